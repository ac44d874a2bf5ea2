//! The core task: owns the [`Relay`], executes its outputs, drives its timer.
//!
//! Inputs are handled in batches: the task waits for one, takes every other one already
//! queued (up to [`MAX_BATCH_INPUTS`]), handles them inside one group commit
//! ([`Relay::begin_batch`] / [`Relay::commit_batch`]: one store transaction), and only then
//! answers their HTTP requests and upgrades and hands their frames to the sockets. A batch
//! whose commit fails answers every request with 503 and accepts no upgrade (fail-stop).
//!
//! A core serving one leadership term ([`super::leadership`]) also stops when the term ends:
//! at once, before anything else queued, closing every socket (see [`Core::end_term`]).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::{collections::BTreeMap, mem, sync::Arc};

use axum::extract::ws::Utf8Bytes;
use relay_core::{CloseReason, ConnId, HttpResponse, Output, Relay, RelayStats, WsConnect};
use relay_push::{GoneTarget, PushWorker, Submitted};
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{debug, error, info, trace, warn};
use wire::{ClientFrame, FrameError, ServerFrame, UnixMs, UserUuid, frames::GoawayFrame};

use super::leadership::{CLOSE_NOT_LEADER, TermEnd};
use super::metrics::{CloseKind, Metrics, close_kind};
use super::rest::Phase;
use super::{
    INPUT_QUEUE_CAPACITY, MAX_BATCH_INPUTS, OUTBOUND_QUEUE_CAPACITY, REBUILD_RETRY_MS, RelayOpener,
};
use seam::clock::{self, Clock, OffsetClock};

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
    /// A frame a socket task decoded (text, or binary holding UTF-8 JSON), or why it could
    /// not; the relay charges either to the connection's frame budget.
    Frame {
        conn: ConnId,
        decoded: Result<ClientFrame, FrameError>,
    },
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
            Self::Frame { conn, decoded } => match decoded {
                Ok(frame) => write!(f, "Frame({}, {})", conn.0, frame.frame_type()),
                Err(e) => write!(f, "Frame({}, undecodable: {})", conn.0, e.code()),
            },
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
}

/// What the core asks a socket task to do, in order.
pub(super) enum Outbound {
    /// Write one text message (shared: a frame sent to many sockets is encoded once); its
    /// [`Charge`] gives its bytes back once written or dropped.
    Text(Utf8Bytes, Charge),
    /// Write a close frame (after everything before it) and end.
    Close { code: u16, reason: &'static str },
}

impl std::fmt::Debug for Outbound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the text: it may carry a payload.
        match self {
            Self::Text(text, _) => write!(f, "Text({} bytes)", text.len()),
            Self::Close { code, reason } => write!(f, "Close({code}, {reason})"),
        }
    }
}

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
    fn new(len: usize, socket: &Arc<AtomicUsize>, total: &OutboundBytes) -> Self {
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

/// WebSocket close codes (RFC 6455 §7.4.1).
mod close_code {
    pub(crate) const NORMAL: u16 = 1000;
    pub(crate) const GOING_AWAY: u16 = 1001;
    pub(crate) const INTERNAL_ERROR: u16 = 1011;
    pub(crate) const POLICY_VIOLATION: u16 = 1008;
    pub(crate) const TRY_AGAIN_LATER: u16 = 1013;
}

/// The close code and reason of `reason`.
fn close_for(reason: CloseReason) -> (u16, &'static str) {
    match reason {
        CloseReason::Goaway => (close_code::NORMAL, "goaway"),
        CloseReason::Idle => (close_code::GOING_AWAY, "idle timeout"),
        CloseReason::StorageFailure => (close_code::INTERNAL_ERROR, "relay restarting"),
        CloseReason::RateLimited => (close_code::POLICY_VIOLATION, "frame rate limit exceeded"),
    }
}

/// What every socket is sent when all are closed at once (shutdown, fail-stop).
enum Last {
    Text(Utf8Bytes),
    Close { code: u16, reason: &'static str },
}

struct ConnEntry {
    tx: mpsc::Sender<Outbound>,
    /// Bytes queued on `tx` and not yet written (each frame's [`Charge`]).
    queued: Arc<AtomicUsize>,
}

/// Where the relay's push outputs go: the delivery worker ([`super::PushDelivery`]); gone
/// reports come back to [`Core::run`].
pub(super) struct PushSink(pub(super) PushWorker);

/// The next gone report; pends forever once the channel is closed (or without a worker).
async fn next_gone(gone: &mut Option<mpsc::Receiver<GoneTarget>>) -> GoneTarget {
    loop {
        match gone {
            Some(rx) => match rx.recv().await {
                Some(report) => return report,
                None => *gone = None,
            },
            None => std::future::pending::<()>().await,
        }
    }
}

/// What outlives one core (a term): the push worker and its gone reports.
pub(super) struct CoreParts {
    pub(super) push: Option<PushSink>,
    pub(super) gone: Option<mpsc::Receiver<GoneTarget>>,
}

/// The term a core serves, for a campaigning server.
pub(super) struct TermCtx {
    /// Ends the core when it ends.
    pub(super) end: TermEnd,
    /// Set to [`Phase::Standby`] the moment the term ends.
    pub(super) phase: Arc<watch::Sender<Phase>>,
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
    push: Option<PushSink>,
    /// Test mode: the offset clock `clock` reads, advanced by [`Input::AdvanceClock`].
    test_clock: Option<OffsetClock>,
    /// [`seam::net::ServeLimits::outbound_queue_bytes`].
    queue_bytes: usize,
    /// Bytes queued over all sockets.
    outbound_bytes: OutboundBytes,
    /// Set while the relay failed and could not be rebuilt (`/readyz` answers 503).
    store_down: Arc<AtomicBool>,
    /// The leadership term served, if the server campaigns.
    term: Option<TermCtx>,
    /// Where the server counts what it does ([`super::metrics`]); `None`: nothing is counted.
    metrics: Option<Metrics>,
    /// The relay's counters when they were last added to `metrics`.
    exported: RelayStats,
}

impl Core {
    #[allow(
        clippy::too_many_arguments,
        reason = "internal; one call site per server mode"
    )]
    pub(super) fn new(
        relay: Relay,
        open: RelayOpener,
        clock: Arc<dyn Clock>,
        push: Option<PushSink>,
        test_clock: Option<OffsetClock>,
        queue_bytes: usize,
        outbound_bytes: OutboundBytes,
        store_down: Arc<AtomicBool>,
        term: Option<TermCtx>,
        metrics: Option<Metrics>,
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
            outbound_bytes,
            store_down,
            term,
            metrics,
            exported: RelayStats::default(),
        }
    }

    /// Runs until every input sender is gone (after shutdown: the router and all sockets), or
    /// until its term ends. `gone`: the push worker's reports of targets that no longer exist.
    /// Returns what the next term's core reuses.
    pub(super) async fn run(
        mut self,
        mut inputs: mpsc::Receiver<Input>,
        mut stop: watch::Receiver<bool>,
        mut gone: Option<mpsc::Receiver<GoneTarget>>,
    ) -> CoreParts {
        info!("relay core started");
        let term_end = self.term.as_ref().map(|t| t.end.clone());
        let ended = async {
            match &term_end {
                Some(end) => end.wait().await,
                None => std::future::pending().await,
            }
        };
        let mut ended = std::pin::pin!(ended);
        let mut batch: Vec<Input> = Vec::with_capacity(MAX_BATCH_INPUTS);
        loop {
            let deadline = if self.rebuild_pending {
                Some(self.rebuild_at)
            } else {
                self.relay.poll_timeout()
            };
            let sleep = clock::sleep_until(&*self.clock, deadline);
            tokio::select! {
                biased;
                why = &mut ended => {
                    self.end_term(&why, &mut inputs);
                    break;
                }
                _ = stop.changed(), if !self.draining => self.begin_shutdown(&mut inputs),
                () = sleep => {
                    if self.rebuild_pending {
                        self.rebuild();
                    } else {
                        let now = self.clock.now();
                        self.relay.handle_timeout(now);
                    }
                }
                report = next_gone(&mut gone) => self.push_gone(&report),
                input = inputs.recv() => match input {
                    Some(input) => {
                        batch.push(input);
                        while batch.len() < MAX_BATCH_INPUTS {
                            match inputs.try_recv() {
                                Ok(input) => batch.push(input),
                                Err(_) => break,
                            }
                        }
                        self.handle_batch(&mut batch);
                    }
                    None => break,
                },
            }
            self.drain();
            self.export(inputs.len());
            if let Some(why) = term_end.as_ref().and_then(TermEnd::ended) {
                // Never rebuild on a store of an ended term: stop here.
                self.end_term(&why, &mut inputs);
                break;
            }
            if self.relay.is_failed() && !self.rebuild_pending {
                if let Some(metrics) = &self.metrics {
                    metrics.failstop();
                }
                error!(
                    "a commit failed: the relay stopped (fail-stop); rebuilding it from the store"
                );
                self.rebuild();
            }
        }
        info!("relay core stopped");
        CoreParts {
            push: self.push.take(),
            gone,
        }
    }

    /// The term ended (leadership lost, or a commit fenced): fail-stop at once. The server
    /// turns standby (new requests get `NOT_LEADER`), every socket is closed, every input still
    /// queued is refused with `NOT_LEADER`, and the relay is dropped with the core: nothing
    /// more is committed or acknowledged by this term.
    fn end_term(&mut self, why: &str, inputs: &mut mpsc::Receiver<Input>) {
        if let Some(term) = &self.term {
            term.phase.send_if_modified(|phase| {
                if matches!(phase, Phase::Active { .. }) {
                    *phase = Phase::Standby;
                    true
                } else {
                    false
                }
            });
        }
        let sockets = self.close_all(
            &[Last::Close {
                code: CLOSE_NOT_LEADER,
                reason: "not the leader",
            }],
            CloseKind::NotLeader,
        );
        inputs.close();
        let mut refused = 0usize;
        while let Ok(input) = inputs.try_recv() {
            match input {
                Input::Http { reply, .. } => {
                    refused += 1;
                    let _ = reply.send(not_leader_response());
                }
                Input::Connect { reply, .. } => {
                    refused += 1;
                    let _ = reply.send(Err(not_leader_response()));
                }
                // Dropping the reply: the handler answers with the server's refusal.
                Input::AdvanceClock { .. } | Input::Frame { .. } | Input::Disconnect { .. } => {}
            }
        }
        self.store_down.store(false, Ordering::Relaxed);
        error!(
            reason = why,
            sockets, refused, "leadership ended: fail-stop, every socket closed; standing by"
        );
    }

    /// Handles `batch` (emptied) inside one group commit, then sends its answers: as they
    /// are when the commit succeeded, 503 (and no upgrade) when it failed. A test-mode clock
    /// move ends the batch before it and is handled on its own (its answer waits for the
    /// outputs of the timers it fired).
    fn handle_batch(&mut self, batch: &mut Vec<Input>) {
        if let Some(metrics) = &self.metrics {
            metrics.batch(batch.len());
        }
        let mut answers = Answers::default();
        self.relay.begin_batch();
        for input in batch.drain(..) {
            if let Input::AdvanceClock { ms, reply } = input {
                self.end_batch(&mut answers);
                self.advance_clock(ms, reply);
                self.relay.begin_batch();
            } else {
                self.handle(input, &mut answers);
            }
        }
        self.end_batch(&mut answers);
    }

    /// Commits the open batch and sends its answers.
    fn end_batch(&mut self, answers: &mut Answers) {
        let committed = self.relay.commit_batch().is_ok();
        for (reply, response) in answers.http.drain(..) {
            let response = if committed {
                response
            } else {
                relay_core::storage_unavailable_response()
            };
            let _ = reply.send(response);
        }
        let now = self.clock.now();
        for (reply, connected) in answers.connects.drain(..) {
            let conn = connected.conn;
            if !committed {
                self.conns.remove(&conn);
                let _ = reply.send(Err(relay_core::storage_unavailable_response()));
            } else if reply.send(Ok(connected)).is_err() {
                // The upgrade handler went away (client gone) before the answer.
                self.conns.remove(&conn);
                self.relay.handle_disconnect(now, conn);
            } else if let Some(metrics) = &self.metrics {
                metrics.websocket_opened();
            }
        }
    }

    fn handle(&mut self, input: Input, answers: &mut Answers) {
        let now = self.clock.now();
        trace!(?input, "input");
        match input {
            Input::Http { req, reply } => {
                let response = self.relay.handle_http(now, &req);
                debug!(path = req.path, status = response.status, "http response");
                answers.http.push((reply, response));
            }
            Input::Connect { ws, reply } => self.connect(now, &ws, reply, answers),
            Input::Frame { conn, decoded } => {
                if let Some(metrics) = &self.metrics {
                    metrics.frame_received(decoded.as_ref().map_err(|_| ()));
                }
                self.relay.handle_decoded(now, conn, decoded);
            }
            Input::Disconnect { conn } => {
                // Still known: the socket ended without the relay closing it.
                if self.conns.remove(&conn).is_some()
                    && let Some(metrics) = &self.metrics
                {
                    metrics.websocket_closed(CloseKind::ClientGone);
                }
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
        answers: &mut Answers,
    ) {
        if self.draining {
            let refusal = HttpResponse::error(
                503,
                &super::rest::shutting_down_code(),
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
                self.conns.insert(
                    conn,
                    ConnEntry {
                        tx,
                        queued: Arc::default(),
                    },
                );
                let connected = Connected {
                    conn,
                    user: accepted.user,
                    subprotocol: accepted.subprotocol,
                    outbound,
                };
                // Answered once the batch is committed.
                answers.connects.push((reply, connected));
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
        // The last frame encoded: the same frame to many sockets (a channel post's fan-out,
        // the same receipt to several) is encoded once and shared.
        let mut last: Option<(ServerFrame, Utf8Bytes)> = None;
        loop {
            let mut overflowed = Vec::new();
            while let Some(output) = self.relay.poll_output() {
                match output {
                    Output::Send { conn, frame } => {
                        if !self.conns.contains_key(&conn) {
                            trace!(conn = conn.0, "frame for a socket already gone");
                            continue;
                        }
                        trace!(conn = conn.0, frame = frame.frame_type(), "frame out");
                        if let Some(metrics) = &self.metrics {
                            metrics.frame_sent(&frame);
                        }
                        let text = match &last {
                            Some((f, text)) if *f == frame => text.clone(),
                            _ => {
                                let text = Utf8Bytes::from(frame.encode());
                                last = Some((frame, text.clone()));
                                text
                            }
                        };
                        if !self.deliver(conn, text) {
                            overflowed.push(conn);
                        }
                    }
                    Output::Close { conn, reason } => {
                        if let Some(entry) = self.conns.remove(&conn) {
                            debug!(conn = conn.0, ?reason, "closing socket");
                            let (code, text) = self.close_for(reason);
                            if let Some(metrics) = &self.metrics {
                                let kind = if code == CLOSE_NOT_LEADER {
                                    CloseKind::NotLeader
                                } else {
                                    close_kind(reason)
                                };
                                metrics.websocket_closed(kind);
                            }
                            let reason = text;
                            let _ = entry.tx.try_send(Outbound::Close { code, reason });
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

    /// The close code and reason of `reason`; a commit that failed because this relay's term
    /// ended (it was fenced: another relay leads now) closes like the end of the term, with
    /// 1012 "not the leader", not 1011.
    fn close_for(&self, reason: CloseReason) -> (u16, &'static str) {
        let term_ended = self.term.as_ref().is_some_and(|t| t.end.ended().is_some());
        if reason == CloseReason::StorageFailure && term_ended {
            return (CLOSE_NOT_LEADER, "not the leader");
        }
        close_for(reason)
    }

    /// Queues an encoded frame on `conn`; `false` when the queue is full, in frames or in
    /// bytes (the socket is then dropped).
    fn deliver(&mut self, conn: ConnId, text: Utf8Bytes) -> bool {
        let Some(entry) = self.conns.get(&conn) else {
            return true;
        };
        let len = text.len();
        let queued = entry.queued.load(Ordering::Relaxed);
        let result = if queued > 0 && queued + len > self.queue_bytes {
            Err(mpsc::error::TrySendError::Full(()))
        } else {
            let charge = Charge::new(len, &entry.queued, &self.outbound_bytes);
            // A refused frame is dropped with its charge.
            entry
                .tx
                .try_send(Outbound::Text(text, charge))
                .map_err(|e| match e {
                    mpsc::error::TrySendError::Full(_) => mpsc::error::TrySendError::Full(()),
                    mpsc::error::TrySendError::Closed(_) => mpsc::error::TrySendError::Closed(()),
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
                if let Some(metrics) = &self.metrics {
                    metrics.websocket_closed(CloseKind::TooSlow);
                }
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

    /// Hands a push to the worker; never waits (a full queue drops it, counted by the worker:
    /// pushes are best effort, the message waits in the relay for the next `sync`).
    fn push(
        &mut self,
        user: UserUuid,
        target: relay_core::PushTarget,
        payload: wire::http::PushPayload,
    ) {
        let kind = target.kind();
        match &self.push {
            None => debug!(kind, "push output dropped: push delivery not configured"),
            Some(PushSink(worker)) => match worker.submit(user, target, payload) {
                // Unconfigured kinds were warned about once at startup; a full queue is
                // warned about by the worker (rate-limited).
                Submitted::Queued | Submitted::Unconfigured | Submitted::QueueFull => {}
                Submitted::Closed => warn!(kind, "push worker stopped: push dropped"),
            },
        }
    }

    /// A push service said a target no longer exists: the relay deletes it (an input,
    /// committed like any other; its outputs are drained by the loop).
    fn push_gone(&mut self, report: &GoneTarget) {
        let kind = report.target.kind();
        if self.rebuild_pending {
            debug!(
                kind,
                "gone report dropped: the relay is being rebuilt (the next push reports it again)"
            );
            return;
        }
        let now = self.clock.now();
        self.relay
            .handle_push_gone(now, &report.user, &report.target);
        info!(kind, "push target reported gone: deleted");
    }

    /// Adds the relay's counters since the last export to the metrics and sets the core's
    /// gauges (`inputs`: inputs waiting).
    fn export(&mut self, inputs: usize) {
        let Some(metrics) = &self.metrics else {
            return;
        };
        let now = *self.relay.stats();
        if now != self.exported {
            metrics.relay_stats(&now, &self.exported);
            self.exported = now;
        }
        metrics.core_gauges(
            self.conns.len(),
            inputs,
            self.relay.backlog_messages(),
            self.relay.queued_bytes(),
        );
    }

    /// Closes every socket with the given last messages and reports them disconnected.
    fn close_all(&mut self, last: &[Last], why: CloseKind) -> usize {
        let now = self.clock.now();
        let conns = mem::take(&mut self.conns);
        let n = conns.len();
        if let Some(metrics) = &self.metrics {
            for _ in 0..n {
                metrics.websocket_closed(why);
            }
        }
        for (conn, entry) in conns {
            for out in last {
                let out = match out {
                    Last::Text(t) => Outbound::Text(
                        t.clone(),
                        Charge::new(t.len(), &entry.queued, &self.outbound_bytes),
                    ),
                    Last::Close { code, reason } => Outbound::Close {
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

    /// Shutdown (the drain): refuse new upgrades; handle, commit and answer every input already
    /// queued (frames that arrived before the signal get their acks); then GOAWAY
    /// `server_shutdown` and close 1001 (going away) on every socket, after the frames queued
    /// for it. Inputs that arrive later are handled as they come (requests are answered; frames
    /// of closed sockets are dropped unacknowledged, and their clients send them again).
    fn begin_shutdown(&mut self, inputs: &mut mpsc::Receiver<Input>) {
        self.draining = true;
        if let Some(metrics) = &self.metrics {
            metrics.draining();
        }
        let mut batch: Vec<Input> = Vec::with_capacity(MAX_BATCH_INPUTS);
        let mut handled = 0usize;
        // What was queued at the signal, at most: clients still sending cannot hold it open.
        while !self.rebuild_pending && handled < INPUT_QUEUE_CAPACITY {
            while batch.len() < MAX_BATCH_INPUTS {
                match inputs.try_recv() {
                    Ok(input) => batch.push(input),
                    Err(_) => break,
                }
            }
            if batch.is_empty() {
                break;
            }
            handled += batch.len();
            self.handle_batch(&mut batch);
            self.drain();
            if self.relay.is_failed() {
                break;
            }
        }
        let goaway = Utf8Bytes::from(
            ServerFrame::Goaway(GoawayFrame {
                reason: wire::frames::goaway_reason::SERVER_SHUTDOWN.to_owned(),
            })
            .encode(),
        );
        let sockets = self.close_all(
            &[
                Last::Text(goaway),
                Last::Close {
                    code: close_code::GOING_AWAY,
                    reason: "server shutdown",
                },
            ],
            CloseKind::Shutdown,
        );
        info!(
            sockets,
            inputs_handled = handled,
            "shutting down: queued inputs committed; GOAWAY and close 1001 sent to every socket"
        );
    }

    /// Fail-stop recovery: drop the failed relay and open a new one from the store.
    fn rebuild(&mut self) {
        let (code, reason) = close_for(CloseReason::StorageFailure);
        self.close_all(&[Last::Close { code, reason }], CloseKind::StorageFailure);
        match (self.open)() {
            Ok(relay) => {
                self.export(0);
                self.relay = relay;
                self.exported = RelayStats::default();
                self.rebuild_pending = false;
                self.store_down.store(false, Ordering::Relaxed);
                tracing::warn!("relay rebuilt from the store after a failed commit");
            }
            Err(err) => {
                self.rebuild_pending = true;
                self.store_down.store(true, Ordering::Relaxed);
                self.rebuild_at = self.clock.now().plus_ms(REBUILD_RETRY_MS);
                error!(error = %err, retry_ms = REBUILD_RETRY_MS, "rebuilding the relay from the store failed");
            }
        }
    }
}

/// The refusal of an input that reached a core whose term ended.
fn not_leader_response() -> HttpResponse {
    let mut response = HttpResponse::error(
        503,
        &wire::ErrorCode::other(super::leadership::NOT_LEADER),
        "this relay just stopped being the active relay; retry shortly",
    );
    response.retry_after_s = Some(super::leadership::NOT_LEADER_RETRY_AFTER_S);
    response
}

/// The answers of a batch's inputs, sent once the batch is committed.
#[derive(Default)]
struct Answers {
    http: Vec<(oneshot::Sender<HttpResponse>, HttpResponse)>,
    connects: Vec<(oneshot::Sender<Result<Connected, HttpResponse>>, Connected)>,
}
