//! Server side of the seam: axum on any listener.

use std::{convert::Infallible, fmt, io, net::SocketAddr, time::Duration};

use axum::{
    Router,
    extract::{ConnectInfo, Request},
    serve::{IncomingStream, Listener},
};
use tower::ServiceExt as _;

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

/// The remote address of a connection, given to handlers as
/// `axum::extract::ConnectInfo<PeerAddr>` on every listener [`serve`] accepts.
///
/// (axum's own `ConnectInfo<SocketAddr>` exists for tokio's listener only, and the orphan and
/// coherence rules forbid adding it for ours, so [`serve`] inserts this into every request.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PeerAddr(pub SocketAddr);

/// Serves `router` on `listener` until `shutdown` resolves, then stops accepting and waits
/// for in-flight HTTP requests to finish.
///
/// Handlers may extract `ConnectInfo<PeerAddr>`. WebSocket connections are detached from
/// hyper once upgraded, so graceful shutdown does not wait for them: whoever owns the socket
/// tasks must close them.
pub async fn serve<L, F>(listener: L, router: Router, shutdown: F) -> io::Result<()>
where
    L: Listener<Addr = SocketAddr>,
    F: Future<Output = ()> + Send + 'static,
{
    let make_service = tower::service_fn(move |incoming: IncomingStream<'_, L>| {
        let peer = ConnectInfo(PeerAddr(*incoming.remote_addr()));
        let service = router.clone().map_request(move |mut request: Request| {
            request.extensions_mut().insert(peer);
            request
        });
        std::future::ready(Ok::<_, Infallible>(service))
    });
    axum::serve(listener, make_service)
        .with_graceful_shutdown(shutdown)
        .await
}
