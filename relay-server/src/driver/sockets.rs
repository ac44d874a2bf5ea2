//! The core task's table of open WebSockets: per connection, the channel to its socket task
//! and the bytes queued on it and not yet written, bounded per socket
//! ([`seam::net::ServeLimits::outbound_queue_bytes`], [`OUTBOUND_QUEUE_CAPACITY`] frames) and
//! counted over all sockets ([`OutboundBytes`], the metrics read it). The core decides what
//! to send and logs and counts it; this table queues it.

use std::collections::BTreeMap;
use std::mem;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use relay_core::ConnId;
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;
use tokio_tungstenite::tungstenite::Utf8Bytes;

use super::inputs::Outbound;
use super::support::close_code;
use crate::OUTBOUND_QUEUE_CAPACITY;
use crate::outbound::{Charge, OutboundBytes};

/// What every socket is sent when all are closed at once (shutdown, fail-stop).
pub(super) enum Farewell {
    Text(Utf8Bytes),
    Close { code: u16, reason: &'static str },
}

/// What became of a frame handed to [`Sockets::send`].
pub(super) enum Sent {
    /// Queued (or the socket was not known: nothing to do).
    Queued,
    /// The socket task had ended: the socket is forgotten (its disconnect input is on its
    /// way).
    Gone,
    /// The socket's queue was full, in frames or in bytes: the socket is forgotten and told
    /// to close (best effort); the core reports it disconnected.
    Full,
}

struct Socket {
    tx: mpsc::Sender<Outbound>,
    /// Bytes queued on `tx` and not yet written (each frame's [`Charge`]).
    queued: Arc<AtomicUsize>,
}

/// The open sockets, by connection.
pub(super) struct Sockets {
    open: BTreeMap<ConnId, Socket>,
    /// Most bytes queued on one socket.
    queue_bytes: usize,
    /// Bytes queued over all sockets.
    outbound_bytes: OutboundBytes,
}

impl Sockets {
    pub(super) fn new(queue_bytes: usize, outbound_bytes: OutboundBytes) -> Self {
        Self {
            open: BTreeMap::new(),
            queue_bytes,
            outbound_bytes,
        }
    }

    /// Opens `conn`: the receiving end is its socket task's.
    pub(super) fn open(&mut self, conn: ConnId) -> mpsc::Receiver<Outbound> {
        let (tx, outbound) = mpsc::channel(OUTBOUND_QUEUE_CAPACITY);
        let socket = Socket {
            tx,
            queued: Arc::default(),
        };
        self.open.insert(conn, socket);
        outbound
    }

    /// Forgets `conn` (its task ended or never started); whether it was open.
    pub(super) fn forget(&mut self, conn: ConnId) -> bool {
        self.open.remove(&conn).is_some()
    }

    pub(super) fn is_open(&self, conn: ConnId) -> bool {
        self.open.contains_key(&conn)
    }

    pub(super) fn len(&self) -> usize {
        self.open.len()
    }

    /// Most bytes queued on one socket.
    pub(super) fn queue_bytes(&self) -> usize {
        self.queue_bytes
    }

    /// Tells `conn` to close with `code` and `reason` and forgets it; whether it was open.
    pub(super) fn close(&mut self, conn: ConnId, code: u16, reason: &'static str) -> bool {
        let Some(socket) = self.open.remove(&conn) else {
            return false;
        };
        let _ = socket.tx.try_send(Outbound::Close { code, reason });
        true
    }

    /// Queues an encoded frame on `conn`, within its bounds.
    pub(super) fn send(&mut self, conn: ConnId, text: Utf8Bytes) -> Sent {
        let Some(socket) = self.open.get(&conn) else {
            return Sent::Queued;
        };
        let len = text.len();
        let queued = socket.queued.load(Ordering::Relaxed);
        let result = if queued > 0 && queued + len > self.queue_bytes {
            Err(TrySendError::Full(()))
        } else {
            let charge = Charge::new(len, &socket.queued, &self.outbound_bytes);
            // A refused frame is dropped with its charge.
            socket
                .tx
                .try_send(Outbound::Text(text, charge))
                .map_err(|e| match e {
                    TrySendError::Full(_) => TrySendError::Full(()),
                    TrySendError::Closed(_) => TrySendError::Closed(()),
                })
        };
        match result {
            Ok(()) => Sent::Queued,
            Err(TrySendError::Closed(())) => {
                self.open.remove(&conn);
                Sent::Gone
            }
            Err(TrySendError::Full(())) => {
                // Best effort: the queue is full, so the task may only see the closed
                // channel, and closes with 1001.
                self.close(conn, close_code::TRY_AGAIN_LATER, "too slow");
                Sent::Full
            }
        }
    }

    /// Sends every socket `farewell` and forgets them all: the connections that were open,
    /// in order.
    pub(super) fn close_all(&mut self, farewell: &[Farewell]) -> Vec<ConnId> {
        let open = mem::take(&mut self.open);
        let mut closed = Vec::with_capacity(open.len());
        for (conn, socket) in open {
            for out in farewell {
                let out = match out {
                    Farewell::Text(t) => Outbound::Text(
                        t.clone(),
                        Charge::new(t.len(), &socket.queued, &self.outbound_bytes),
                    ),
                    Farewell::Close { code, reason } => Outbound::Close {
                        code: *code,
                        reason,
                    },
                };
                let _ = socket.tx.try_send(out);
            }
            closed.push(conn);
        }
        closed
    }
}
