//! Client side of the seam: open a TCP stream to `host:port`.

use std::io;

use tokio::io::{AsyncRead, AsyncWrite};

use super::Endpoint;

/// Opens byte streams to an [`Endpoint`] on some network.
///
/// Implementations are cheap handles (`Clone`); the streams they return are what hyper and
/// tokio-tungstenite run over.
pub trait Connector: Clone + Send + Sync + 'static {
    /// The connected stream.
    type Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static;

    /// Opens a TCP connection to `endpoint`'s host and port.
    fn connect(&self, endpoint: &Endpoint)
    -> impl Future<Output = io::Result<Self::Stream>> + Send;
}

/// Connects with real sockets ([`tokio::net::TcpStream`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct TokioConnector;

impl Connector for TokioConnector {
    type Stream = tokio::net::TcpStream;

    async fn connect(&self, endpoint: &Endpoint) -> io::Result<Self::Stream> {
        let stream = tokio::net::TcpStream::connect((endpoint.host(), endpoint.port())).await?;
        // Frames are small and latency-sensitive; Nagle only delays them.
        stream.set_nodelay(true)?;
        Ok(stream)
    }
}

#[cfg(feature = "turmoil")]
/// Connects over turmoil's simulated network ([`turmoil::net::TcpStream`]); host names are
/// resolved by turmoil's DNS (the names given to `Sim::host` / `Sim::client`).
#[derive(Clone, Copy, Debug, Default)]
pub struct TurmoilConnector;

#[cfg(feature = "turmoil")]
impl Connector for TurmoilConnector {
    type Stream = turmoil::net::TcpStream;

    async fn connect(&self, endpoint: &Endpoint) -> io::Result<Self::Stream> {
        turmoil::net::TcpStream::connect((endpoint.host(), endpoint.port())).await
    }
}
