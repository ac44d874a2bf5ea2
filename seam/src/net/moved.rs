//! A WebSocket's TCP connection moved to the runtime that serves it: [`serve`](super::serve)
//! accepts and upgrades connections on the server's runtime; a relay that serves each
//! socket on its shard's thread takes the connection out of hyper after the upgrade
//! ([`MovedTcp::take`]), off the accepting runtime's reactor, and registers it with its
//! thread's ([`MovedTcp::register`]). The connection stays counted as open throughout: its
//! place in the [`ConnectionCounter`](super::ConnectionCounter) moves with it.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::server::{ConnGuard, Guarded};

/// An upgraded tokio TCP connection, off every runtime's reactor, with the bytes hyper had
/// read past the upgrade's request.
#[derive(Debug)]
pub struct MovedTcp {
    stream: std::net::TcpStream,
    guard: ConnGuard,
    read: Bytes,
}

impl MovedTcp {
    /// Takes the connection out of `upgraded` and off the current runtime's reactor.
    /// `Err(upgraded)`: it is not a tokio TCP connection that [`serve`](super::serve)
    /// accepted (a turmoil one, say), and stays where it is. `Ok(Err(_))`: taking it off the
    /// reactor failed, and the connection is closed.
    #[allow(
        clippy::result_large_err,
        reason = "the error gives the connection back, as hyper's downcast does"
    )]
    pub fn take(upgraded: Upgraded) -> Result<io::Result<Self>, Upgraded> {
        let parts = upgraded.downcast::<TokioIo<Guarded<tokio::net::TcpStream>>>()?;
        let Guarded { io, _guard: guard } = parts.io.into_inner();
        Ok(io.into_std().map(|stream| Self {
            stream,
            guard,
            read: parts.read_buf,
        }))
    }

    /// Registers the connection with the current runtime's reactor (call it on the runtime
    /// that serves it): the stream, and the bytes already read past the upgrade's request,
    /// which come first.
    pub fn register(self) -> io::Result<(ServedTcp, Bytes)> {
        let Self {
            stream,
            guard,
            read,
        } = self;
        let io = tokio::net::TcpStream::from_std(stream)?;
        Ok((ServedTcp(Guarded { io, _guard: guard }), read))
    }
}

/// A moved connection registered with the runtime serving it ([`MovedTcp::register`]);
/// dropping it closes the connection and frees its place.
pub struct ServedTcp(Guarded<tokio::net::TcpStream>);

impl std::fmt::Debug for ServedTcp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ServedTcp").field(&self.0.io).finish()
    }
}

impl AsyncRead for ServedTcp {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for ServedTcp {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }
}
