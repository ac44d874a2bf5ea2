//! The bytes of encoded frames queued for sockets and not yet written: each frame's
//! [`Charge`] against its socket's count and the total, and the total as a shared gauge
//! ([`OutboundBytes`]) the metrics read at scrape time. The core task charges; a socket's
//! writer (or a dropped queue) gives the bytes back.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Bytes of encoded frames queued for sockets and not yet written, over all sockets
/// ([`super::RelayServer::outbound_bytes`]; the bound per socket is
/// [`seam::net::ServeLimits::outbound_queue_bytes`]).
#[derive(Clone, Debug, Default)]
pub struct OutboundBytes(Arc<AtomicUsize>);

impl OutboundBytes {
    /// Bytes queued now.
    pub fn get(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

/// The bytes of one queued frame, counted against its socket's queue and the total while it
/// lives: written, dropped with a closed socket's queue, or refused by a full queue, it gives
/// them back exactly once.
pub(super) struct Charge {
    len: usize,
    socket: Arc<AtomicUsize>,
    total: Arc<AtomicUsize>,
}

impl Charge {
    pub(super) fn new(len: usize, socket: &Arc<AtomicUsize>, total: &OutboundBytes) -> Self {
        socket.fetch_add(len, Ordering::Relaxed);
        total.0.fetch_add(len, Ordering::Relaxed);
        Self {
            len,
            socket: Arc::clone(socket),
            total: Arc::clone(&total.0),
        }
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.socket.fetch_sub(self.len, Ordering::Relaxed);
        self.total.fetch_sub(self.len, Ordering::Relaxed);
    }
}
