//! The core task: owns the [`Relay`], executes its outputs, drives its timer.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::{collections::BTreeMap, mem, sync::Arc};

use relay_core::{CloseReason, ConnId, HttpResponse, Output, Relay, WsConnect};
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{debug, error, info, trace, warn};
use wire::{ClientFrame, ServerFrame, UnixMs, UserUuid, frames::GoawayFrame};

use super::push::PushJob;
use super::{OUTBOUND_QUEUE_CAPACITY, REBUILD_RETRY_MS, RelayOpener};
use crate::clock::{self, Clock, OffsetClock};

/// A message to the core task.
pub(super) enum Input {
    /// A REST request; the response goes back on `reply`.
    Http {
        req: relay_core::HttpRequest,
        reply: oneshot::Sender<HttpResponse>,
    },
    /// A WebSocket upgrade to authenticate; `Err` is the response to send instead.
    Connect {
        ws: WsConnect,
        reply: oneshot::Sender<Result<Connected, HttpResponse>>,
    },
    /// A text message from a socket.
    Text { conn: ConnId, text: String },
    /// A frame a socket task decoded itself (binary messages holding UTF-8 JSON).
    Frame { conn: ConnId, frame: ClientFrame },
    /// The socket ended (closed, failed, or its task was dropped).
    Disconnect { conn: ConnId },
    /// Test mode only: move the clock forward by `ms`, fire due timers, answer the new now.
    AdvanceClock {
        ms: u64,
        reply: oneshot::Sender<UnixMs>,
    },
}

impl std::fmt::Debug for Input {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print bodies, frames, tokens or tickets.
        match self {
            Self::Http { req, .. } => write!(f, "Http({req:?})"),
            Self::Connect { .. } => f.write_str("Connect"),
            Self::Text { conn, text } => write!(f, "Text({}, {} bytes)", conn.0, text.len()),
            Self::Frame { conn, frame } => write!(f, "Frame({}, {})", conn.0, frame.frame_type()),
            Self::Disconnect { conn } => write!(f, "Disconnect({})", conn.0),
            Self::AdvanceClock { ms, .. } => write!(f, "AdvanceClock({ms} ms)"),
        }
    }
}

/// An accepted upgrade: what the socket task needs.
#[derive(Debug)]
pub(super) struct Connected {
    pub(super) conn: ConnId,
    pub(super) user: UserUuid,
    pub(super) subprotocol: Option<&'static str>,
    pub(super) outbound: mpsc::Receiver<Outbound>,
    /// Bytes of [`Outbound::Text`] queued and not yet written; the socket task subtracts
    /// what it wrote.
    pub(super) queued: Arc<AtomicUsize>,
}

/// What the core asks a socket task to do, in order.
#[derive(Debug)]
pub(super) enum Outbound {
    /// Write one text message.
    Text(String),
    /// Write a close frame (after everything before it) and end.
    Close { code: u16, reason: &'static str },
}

/// WebSocket close codes (RFC 6455 §7.4.1).
mod close_code {
    pub(crate) const NORMAL: u16 = 1000;
    pub(crate) const GOING_AWAY: u16 = 1001;
    pub(crate) const INTERNAL_ERROR: u16 = 1011;
    pub(crate) const POLICY_VIOLATION: u16 = 1008;
    pub(crate) const TRY_AGAIN_LATER: u16 = 1013;
}

fn close_for(reason: CloseReason) -> Outbound {
    let (code, reason) = match reason {
        CloseReason::Goaway => (close_code::NORMAL, "goaway"),
        CloseReason::Idle => (close_code::GOING_AWAY, "idle timeout"),
        CloseReason::StorageFailure => (close_code::INTERNAL_ERROR, "relay restarting"),
        CloseReason::RateLimited => (close_code::POLICY_VIOLATION, "frame rate limit exceeded"),
    };
    Outbound::Close { code, reason }
}

struct ConnEntry {
    tx: mpsc::Sender<Outbound>,
    /// Shared with the socket task: bytes queued on `tx` and not yet written.
    queued: Arc<AtomicUsize>,
}

/// The state of the core task.
pub(super) struct Core {
    relay: Relay,
    open: RelayOpener,
    clock: Arc<dyn Clock>,
    conns: BTreeMap<ConnId, ConnEntry>,
    next_conn: u64,
    draining: bool,
    /// The relay failed and rebuilding it from the store failed too: retry on the timer.
    rebuild_pending: bool,
    /// When that retry is due: fixed when the rebuild fails, so inputs arriving faster than
    /// [`REBUILD_RETRY_MS`] cannot push it back forever.
    rebuild_at: UnixMs,
    push: Option<mpsc::Sender<PushJob>>,
    /// Test mode: the offset clock `clock` reads, advanced by [`Input::AdvanceClock`].
    test_clock: Option<OffsetClock>,
    /// [`crate::net::ServeLimits::outbound_queue_bytes`].
    queue_bytes: usize,
}

impl Core {
    pub(super) fn new(
        relay: Relay,
        open: RelayOpener,
        clock: Arc<dyn Clock>,
        push: Option<mpsc::Sender<PushJob>>,
        test_clock: Option<OffsetClock>,
        queue_bytes: usize,
    ) -> Self {
        Self {
            relay,
            open,
            clock,
            conns: BTreeMap::new(),
            next_conn: 1,
            draining: false,
            rebuild_pending: false,
            rebuild_at: UnixMs(0),
            push,
            test_clock,
            queue_bytes,
        }
    }

    /// Runs until every input sender is gone (after shutdown: the router and all sockets).
    pub(super) async fn run(
        mut self,
        mut inputs: mpsc::Receiver<Input>,
        mut stop: watch::Receiver<bool>,
    ) {
        info!("relay core started");
        loop {
            let deadline = if self.rebuild_pending {
                Some(self.rebuild_at)
            } else {
                self.relay.poll_timeout()
            };
            let sleep = clock::sleep_until(&*self.clock, deadline);
            tokio::select! {
                biased;
                _ = stop.changed(), if !self.draining => self.begin_shutdown(),
                () = sleep => {
                    if self.rebuild_pending {
                        self.rebuild();
                    } else {
                        let now = self.clock.now();
                        self.relay.handle_timeout(now);
                    }
                }
                input = inputs.recv() => match input {
                    Some(input) => self.handle(input),
                    None => break,
                },
            }
            self.drain();
            if self.relay.is_failed() && !self.rebuild_pending {
                error!(
                    "a commit failed: the relay stopped (fail-stop); rebuilding it from the store"
                );
                self.rebuild();
            }
        }
        info!("relay core stopped");
    }

    fn handle(&mut self, input: Input) {
        let now = self.clock.now();
        trace!(?input, "input");
        match input {
            Input::Http { req, reply } => {
                let response = self.relay.handle_http(now, &req);
                debug!(path = req.path, status = response.status, "http response");
                let _ = reply.send(response);
            }
            Input::Connect { ws, reply } => self.connect(now, &ws, reply),
            Input::Text { conn, text } => self.relay.handle_text(now, conn, &text),
            Input::Frame { conn, frame } => self.relay.handle_frame(now, conn, frame),
            Input::Disconnect { conn } => {
                self.conns.remove(&conn);
                self.relay.handle_disconnect(now, conn);
            }
            Input::AdvanceClock { ms, reply } => self.advance_clock(ms, reply),
        }
    }

    /// Test mode: moves the clock, fires what became due, executes its outputs, then answers.
    fn advance_clock(&mut self, ms: u64, reply: oneshot::Sender<UnixMs>) {
        let Some(test_clock) = &self.test_clock else {
            // The router only sends this in test mode; answer with the unchanged time.
            let _ = reply.send(self.clock.now());
            return;
        };
        let now = test_clock.advance(ms);
        info!(
            ms,
            now_ms = now.0,
            offset_ms = test_clock.offset_ms(),
            "test clock advanced"
        );
        if !self.rebuild_pending {
            self.relay.handle_timeout(now);
        }
        self.drain();
        let _ = reply.send(now);
    }

    fn connect(
        &mut self,
        now: UnixMs,
        ws: &WsConnect,
        reply: oneshot::Sender<Result<Connected, HttpResponse>>,
    ) {
        if self.draining {
            let refusal = HttpResponse::error(
                503,
                &super::http::shutting_down_code(),
                "the relay is shutting down; reconnect shortly",
            );
            let _ = reply.send(Err(refusal));
            return;
        }
        let conn = ConnId(self.next_conn);
        self.next_conn += 1;
        match self.relay.handle_connect(now, conn, ws) {
            Ok(accepted) => {
                let (tx, outbound) = mpsc::channel(OUTBOUND_QUEUE_CAPACITY);
                let queued = Arc::new(AtomicUsize::new(0));
                self.conns.insert(
                    conn,
                    ConnEntry {
                        tx,
                        queued: Arc::clone(&queued),
                    },
                );
                let connected = Connected {
                    conn,
                    user: accepted.user,
                    subprotocol: accepted.subprotocol,
                    outbound,
                    queued,
                };
                if reply.send(Ok(connected)).is_err() {
                    // The upgrade handler went away (client gone) before the answer.
                    self.conns.remove(&conn);
                    self.relay.handle_disconnect(now, conn);
                }
            }
            Err(refusal) => {
                debug!(status = refusal.status, "websocket refused");
                let _ = reply.send(Err(refusal));
            }
        }
    }

    /// Executes every queued output, in order; sockets whose queue is full are closed and
    /// reported disconnected (which may queue more outputs, drained in the same call).
    fn drain(&mut self) {
        loop {
            let mut overflowed = Vec::new();
            while let Some(output) = self.relay.poll_output() {
                match output {
                    Output::Send { conn, frame } => {
                        if !self.deliver(conn, &frame) {
                            overflowed.push(conn);
                        }
                    }
                    Output::Close { conn, reason } => {
                        if let Some(entry) = self.conns.remove(&conn) {
                            debug!(conn = conn.0, ?reason, "closing socket");
                            let _ = entry.tx.try_send(close_for(reason));
                        }
                    }
                    Output::Push {
                        user,
                        target,
                        payload,
                    } => self.push(user, target, payload),
                    #[allow(
                        unreachable_patterns,
                        reason = "relay-core grows outputs; new ones are logged until handled"
                    )]
                    _ => debug!("relay output not handled by this shell yet"),
                }
            }
            if overflowed.is_empty() {
                return;
            }
            let now = self.clock.now();
            for conn in overflowed {
                self.relay.handle_disconnect(now, conn);
            }
        }
    }

    /// Queues `frame` on `conn`; `false` when the queue is full, in frames or in bytes (the
    /// socket is then dropped).
    fn deliver(&mut self, conn: ConnId, frame: &ServerFrame) -> bool {
        let Some(entry) = self.conns.get(&conn) else {
            trace!(conn = conn.0, "frame for a socket already gone");
            return true;
        };
        trace!(conn = conn.0, frame = frame.frame_type(), "frame out");
        let text = frame.encode();
        let len = text.len();
        let queued = entry.queued.load(Ordering::Relaxed);
        let result = if queued > 0 && queued + len > self.queue_bytes {
            Err(mpsc::error::TrySendError::Full(Outbound::Text(text)))
        } else {
            entry.queued.fetch_add(len, Ordering::Relaxed);
            entry.tx.try_send(Outbound::Text(text)).inspect_err(|_| {
                entry.queued.fetch_sub(len, Ordering::Relaxed);
            })
        };
        match result {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Closed(_)) => {
                // The socket task ended; its Disconnect input is on its way.
                self.conns.remove(&conn);
                true
            }
            Err(mpsc::error::TrySendError::Full(_)) => {
                warn!(
                    conn = conn.0,
                    frames = OUTBOUND_QUEUE_CAPACITY,
                    bytes = self.queue_bytes,
                    "socket is not reading: outbound queue full, closing it"
                );
                if let Some(entry) = self.conns.remove(&conn) {
                    // Best effort: the queue is full, so the task may only see the closed
                    // channel, and closes with 1001.
                    let _ = entry.tx.try_send(Outbound::Close {
                        code: close_code::TRY_AGAIN_LATER,
                        reason: "too slow",
                    });
                }
                false
            }
        }
    }

    fn push(
        &mut self,
        user: UserUuid,
        target: relay_core::PushTarget,
        payload: wire::http::PushPayload,
    ) {
        let Some(push) = &self.push else {
            debug!(
                kind = target.kind(),
                "push output dropped: no push gateway configured"
            );
            return;
        };
        if push
            .try_send(PushJob {
                user,
                target,
                payload,
            })
            .is_err()
        {
            warn!("push queue full or worker gone: push dropped (best effort)");
        }
    }

    /// Closes every socket with the given outbound messages and reports them disconnected.
    fn close_all(&mut self, last: &[Outbound]) -> usize {
        let now = self.clock.now();
        let conns = mem::take(&mut self.conns);
        let n = conns.len();
        for (conn, entry) in conns {
            for out in last {
                let out = match out {
                    Outbound::Text(t) => Outbound::Text(t.clone()),
                    Outbound::Close { code, reason } => Outbound::Close {
                        code: *code,
                        reason,
                    },
                };
                let _ = entry.tx.try_send(out);
            }
            self.relay.handle_disconnect(now, conn);
        }
        n
    }

    /// Shutdown: GOAWAY `server_shutdown` to every socket, close them, refuse new upgrades.
    fn begin_shutdown(&mut self) {
        self.draining = true;
        let goaway = ServerFrame::Goaway(GoawayFrame {
            reason: wire::frames::goaway_reason::SERVER_SHUTDOWN.to_owned(),
        })
        .encode();
        let sockets = self.close_all(&[
            Outbound::Text(goaway),
            Outbound::Close {
                code: close_code::GOING_AWAY,
                reason: "server shutdown",
            },
        ]);
        info!(sockets, "shutting down: GOAWAY sent to every socket");
    }

    /// Fail-stop recovery: drop the failed relay and open a new one from the store.
    fn rebuild(&mut self) {
        self.close_all(&[close_for(CloseReason::StorageFailure)]);
        match (self.open)() {
            Ok(relay) => {
                self.relay = relay;
                self.rebuild_pending = false;
                tracing::warn!("relay rebuilt from the store after a failed commit");
            }
            Err(err) => {
                self.rebuild_pending = true;
                self.rebuild_at = self.clock.now().plus_ms(REBUILD_RETRY_MS);
                error!(error = %err, retry_ms = REBUILD_RETRY_MS, "rebuilding the relay from the store failed");
            }
        }
    }
}
