//! turmoil's listener made servable by axum (turmoil's own type does not implement
//! [`axum::serve::Listener`]; tokio's does).

use std::{fmt, io, net::SocketAddr, time::Duration};

use axum::serve::Listener;

/// Pause after a failed `accept` before trying again (the error is usually transient:
/// out of file descriptors, a connection reset before it was accepted).
const ACCEPT_RETRY_DELAY_MS: u64 = 50;

/// A turmoil listener that axum can serve (turmoil's own type does not implement
/// [`axum::serve::Listener`]; tokio's does).
pub struct TurmoilListener {
    inner: turmoil::net::TcpListener,
}

impl TurmoilListener {
    /// Binds on the current turmoil host. turmoil accepts only `0.0.0.0`, `::` or loopback
    /// addresses, since a host owns exactly one IP; port 0 picks an ephemeral port.
    pub async fn bind(addr: SocketAddr) -> io::Result<Self> {
        let inner = turmoil::net::TcpListener::bind(addr).await?;
        Ok(Self { inner })
    }
}

impl From<turmoil::net::TcpListener> for TurmoilListener {
    fn from(inner: turmoil::net::TcpListener) -> Self {
        Self { inner }
    }
}

impl fmt::Debug for TurmoilListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TurmoilListener")
            .field("local_addr", &self.inner.local_addr().ok())
            .finish()
    }
}

impl Listener for TurmoilListener {
    type Io = turmoil::net::TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.inner.accept().await {
                Ok(accepted) => return accepted,
                Err(error) => {
                    tracing::warn!(%error, "accept failed; retrying");
                    tokio::time::sleep(Duration::from_millis(ACCEPT_RETRY_DELAY_MS)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}
