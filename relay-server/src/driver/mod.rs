//! The core task: owns the [`Relay`], executes its outputs, drives its timer.
//!
//! Inputs are handled in batches: the task waits for one, takes every other one already
//! queued (up to [`MAX_BATCH_INPUTS`]), handles them inside one group commit, seals the batch
//! ([`Relay::seal_batch`]) and hands its mutations to the [`Committer`] (one store
//! transaction). It answers the batch's HTTP requests and upgrades and hands its frames to the
//! sockets only once the committer reports that commit, and every earlier one, done
//! ([`Relay::handle_committed`]). Meanwhile it goes on with the next batches, up to
//! [`PIPELINE_DEPTH`](super::PIPELINE_DEPTH) in flight ([`CommitMode::Inline`] commits each
//! batch as it is sealed). A batch whose commit fails answers every request with 503 and
//! accepts no upgrade, and so does every batch after it (fail-stop); the relay is rebuilt from
//! the store once every batch in flight was reported.
//!
//! A core serving one leadership term ([`super::leadership`]) also stops when the term ends:
//! at once, before anything else queued, closing every socket (see [`Core::end_term`]).
//!
//! Submodules: `inputs` (what the handlers and the server's loop exchange with the core task,
//! and what wakes it), `answers` (what the core owes the handlers), `outputs` (the relay's
//! outputs executed: frames, closes, pushes, answers, crossings to the other cores), `upgrades` (a WebSocket
//! upgrade answered, at once or after a read ahead), `sockets` (the table of open WebSockets
//! and what is queued on each) and `support` (close codes, the refusal after a term, the
//! committer for a mode, the store stand-in) and `threads` (a core on a thread of its own,
//! with its sockets).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::{mem, sync::Arc};

use relay_core::{
    BatchId, CloseReason, ConnId, HttpResponse, Output, Relay, RelayStats, WsConnect,
};
use relay_push::{GoneTarget, PushWorker, Submitted};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_tungstenite::tungstenite::Utf8Bytes;
use tracing::{debug, error, info, trace, warn};
use wire::{ClientFrame, FrameError, ServerFrame, UnixMs, UserUuid, frames::GoawayFrame};

use super::committer::{CommitMode, Committer, Completion};
use super::leadership::{CLOSE_NOT_LEADER, TermEnd};
use super::metrics::{CloseKind, CoreShare, Metrics, Stopwatch, close_kind};
use super::outbound::{Charge, OutboundBytes};
use super::readers::{ReadMode, Readers};
use super::{
    INPUT_QUEUE_CAPACITY, MAX_BATCH_INPUTS, OUTBOUND_QUEUE_CAPACITY, REBUILD_RETRY_MS, RelayOpener,
};
use seam::clock::{self, Clock, OffsetClock};

mod answers;
mod inputs;
mod outputs;
mod sockets;
mod support;
mod threads;
mod upgrades;

use answers::{Answers, Parked};
use inputs::Wakeup;
pub(super) use inputs::{
    Connected, CoreParts, Cores, Input, Outbound, PeerTable, Phase, TermCtx, UpgradeCore,
};
pub use outputs::{CrossingTransit, Transit};
use sockets::{Farewell, Sent, Sockets};
use support::{close_code, close_for, next_gone, not_leader_response, pipeline_for};
pub(super) use threads::CoreThread;

/// Where the relay's push outputs go: the delivery worker ([`super::PushDelivery`]); gone
/// reports come back to [`Core::run`].
pub(super) struct PushSink(pub(super) PushWorker);

/// The state of the core task.
pub(super) struct Core {
    relay: Relay,
    open: RelayOpener,
    /// Where commits run ([`Core::committer`] is rebuilt with the relay).
    commit_mode: CommitMode,
    /// Commits the relay's sealed batches (it owns the relay's store).
    committer: Committer,
    /// Where reads run ([`Core::readers`] is rebuilt with the relay).
    read_mode: ReadMode,
    /// Runs the reads the relay asks for ahead of a parked frame, off this task.
    readers: Readers,
    /// The answers of the open batch's inputs.
    answers: Answers,
    /// Requests and upgrades waiting for a read ahead, answered by the relay's outputs.
    parked: Parked,
    /// Inputs handled into the open batch.
    open_inputs: usize,
    /// No input arrived during the last commit: the load is light, and a commit thread's next
    /// batch may be committed on this task ([`Committer::submit`]).
    quiet: bool,
    /// The core's thread also serves its sockets ([`CoreThread`]): a commit on this task
    /// would hold every one of them for its length, so none is, however light the load.
    sockets_on_thread: bool,
    /// An input arrived while a batch was in flight (reset when none is).
    arrived_in_flight: bool,
    /// The answers of every sealed batch whose commit is not reported yet, oldest first (as
    /// many as [`Committer::in_flight`]).
    waiting: VecDeque<(BatchId, Answers)>,
    clock: Arc<dyn Clock>,
    /// The open WebSockets and what is queued on each.
    sockets: Sockets,
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
    /// Set while the relay failed and could not be rebuilt (`/readyz` answers 503).
    store_down: Arc<AtomicBool>,
    /// The leadership term served, if the server campaigns.
    term: Option<TermCtx>,
    /// Where the server counts what it does ([`super::metrics`]); `None`: nothing is counted.
    metrics: Option<Metrics>,
    /// The relay's counters when they were last added to `metrics`.
    exported: RelayStats,
    /// This core's share of the gauges of `metrics`.
    gauges: Option<CoreShare>,
    /// The cores of the other shards of a sharded server, by shard (this one's place too),
    /// for what the relay sends them (`Output::Cross`); weak, so that a core still stops
    /// once the handlers and sockets dropped its inputs.
    peers: Option<Peers>,
    /// What happens to each crossing on its way to its core (`None`: it is handed at once).
    transit: Option<CrossingTransit>,
    /// A cluster node's links to the other nodes, for crossings to shards not served here.
    remote: Option<RemoteSink>,
}

/// The inputs of every core of a sharded server, by shard, held weakly: fixed for a process
/// that runs every shard, updated as a cluster node's shards come and go.
pub(crate) type Peers = watch::Receiver<PeerTable>;

/// Where a cluster node's core sends a crossing for a shard not served here (its links to
/// the other nodes); it never waits.
pub(crate) type RemoteSink = Arc<dyn Fn(&relay_core::handoff::Crossing) + Send + Sync>;

/// Peers that never change.
pub(crate) fn fixed_peers(table: PeerTable) -> Peers {
    watch::channel(table).1
}

impl Core {
    #[allow(
        clippy::too_many_arguments,
        reason = "internal; one call site per server mode"
    )]
    pub(super) fn new(
        mut relay: Relay,
        open: RelayOpener,
        (commit_mode, read_mode): (CommitMode, ReadMode),
        clock: Arc<dyn Clock>,
        push: Option<PushSink>,
        test_clock: Option<OffsetClock>,
        queue_bytes: usize,
        outbound_bytes: OutboundBytes,
        store_down: Arc<AtomicBool>,
        term: Option<TermCtx>,
        metrics: Option<Metrics>,
    ) -> Self {
        let (committer, readers) = pipeline_for(&commit_mode, &read_mode, &mut relay);
        let shard = relay.config().shard.me().0;
        Self {
            relay,
            open,
            commit_mode,
            committer,
            read_mode,
            readers,
            answers: Answers::default(),
            parked: Parked::default(),
            open_inputs: 0,
            quiet: true,
            sockets_on_thread: false,
            arrived_in_flight: false,
            waiting: VecDeque::new(),
            clock,
            sockets: Sockets::new(queue_bytes, outbound_bytes),
            next_conn: 1,
            draining: false,
            rebuild_pending: false,
            rebuild_at: UnixMs(0),
            push,
            test_clock,
            store_down,
            term,
            gauges: (metrics.clone()).map(|m| CoreShare::new(m, shard)),
            metrics,
            exported: RelayStats::default(),
            peers: None,
            transit: None,
            remote: None,
        }
    }

    /// `on`: runs on a thread of its own that also serves its sockets ([`CoreThread`]), and
    /// never commits on its task (see [`Core::sockets_on_thread`]).
    pub(super) fn with_sockets_on_its_thread(mut self, on: bool) -> Self {
        self.sockets_on_thread = on;
        self
    }

    /// Sends what the relay emits for shards not served here to the nodes serving them.
    pub(super) fn with_remote(mut self, remote: Option<RemoteSink>) -> Self {
        self.remote = remote;
        self
    }

    /// Sends what the relay emits for other shards to their cores, `peers` (a sharded
    /// server's), through `transit` when there is one.
    pub(super) fn with_peers(mut self, peers: Peers, transit: Option<CrossingTransit>) -> Self {
        self.peers = Some(peers);
        self.transit = transit;
        self
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
        let mut ended = std::pin::pin!(term_ended(term_end.as_ref()));
        let mut batch: Vec<Input> = Vec::with_capacity(MAX_BATCH_INPUTS);
        loop {
            let sleep = clock::sleep_until(&*self.clock, self.deadline());
            let accepting = self.accepting();
            let in_flight = self.committer.in_flight() > 0;
            let reading = accepting && self.readers.in_flight() > 0;
            let woke = tokio::select! {
                biased;
                why = &mut ended => Wakeup::Ended(why),
                _ = stop.changed(), if !self.draining => Wakeup::Stop,
                done = self.committer.next(), if in_flight => Wakeup::Committed(done),
                done = self.readers.next(), if reading => Wakeup::Read(done),
                () = sleep, if accepting => Wakeup::Due,
                report = next_gone(&mut gone), if accepting => Wakeup::Gone(report),
                input = inputs.recv(), if accepting => match input {
                    Some(input) => Wakeup::Input(input),
                    None => break,
                },
            };
            // Everything from here to the end of the round is the core's work (metrics only).
            let busy = self.metrics.as_ref().map(|_| Stopwatch::start());
            match woke {
                Wakeup::Ended(why) => {
                    self.end_term(&why, &mut inputs);
                    break;
                }
                Wakeup::Stop => self.begin_shutdown(&mut inputs).await,
                Wakeup::Committed(done) => self.completed(done),
                Wakeup::Due => self.due(),
                Wakeup::Gone(report) => self.push_gone(&report),
                Wakeup::Read(done) => self.read_done(done),
                Wakeup::Input(input) => self.take_batch(input, in_flight, &mut batch, &mut inputs),
            }
            self.end_round(&inputs, busy);
            if let Some(why) = term_end.as_ref().and_then(TermEnd::ended) {
                // Never rebuild on a store of an ended term: stop here.
                self.end_term(&why, &mut inputs);
                break;
            }
            self.rebuild_if_failed();
        }
        self.let_go(term_end.as_ref()).await;
        info!("relay core stopped");
        CoreParts {
            push: self.push.take(),
            gone,
        }
    }

    /// When the core must next wake without an input: the rebuild's retry while one is
    /// pending, else the relay's next timer.
    fn deadline(&self) -> Option<UnixMs> {
        if self.rebuild_pending {
            Some(self.rebuild_at)
        } else {
            self.relay.poll_timeout()
        }
    }

    /// Whether the core takes inputs (and timers and gone reports) now: they wait while the
    /// pipeline is full, and while a failed relay waits for the reports of its batches in
    /// flight before it is rebuilt.
    fn accepting(&self) -> bool {
        self.committer.has_room() && (!self.relay.is_failed() || self.rebuild_pending)
    }

    /// The deadline came: retries the pending rebuild, or fires the relay's due timers.
    fn due(&mut self) {
        if self.rebuild_pending {
            self.rebuild();
        } else {
            let now = self.clock.now();
            self.relay.handle_timeout(now);
        }
    }

    /// Handles `first` with every input already queued behind it (up to [`MAX_BATCH_INPUTS`])
    /// in the open batch; `in_flight`: a batch was in flight when it arrived.
    fn take_batch(
        &mut self,
        first: Input,
        in_flight: bool,
        batch: &mut Vec<Input>,
        inputs: &mut mpsc::Receiver<Input>,
    ) {
        if in_flight {
            self.arrived_in_flight = true;
        }
        batch.push(first);
        while batch.len() < MAX_BATCH_INPUTS {
            match inputs.try_recv() {
                Ok(input) => batch.push(input),
                Err(_) => break,
            }
        }
        self.handle_batch(batch);
    }

    /// The end of every round: seals the open batch if it is due, executes the outputs,
    /// exports the metrics and counts the round's work (`busy`: when it began).
    fn end_round(&mut self, inputs: &mpsc::Receiver<Input>, busy: Option<Stopwatch>) {
        while let Some(request) = self.relay.poll_read() {
            self.readers.submit(request);
        }
        self.seal_if_due(inputs);
        self.drain();
        self.export(inputs.len());
        if let (Some(metrics), Some(busy)) = (&self.metrics, busy) {
            metrics.core_busy(self.relay.config().shard.me().0, busy.seconds());
        }
    }

    /// Fail-stop: once a failed relay's batches in flight are all reported (and no rebuild is
    /// pending), says so at ERROR and rebuilds the relay from the store.
    fn rebuild_if_failed(&mut self) {
        if self.relay.is_failed() && !self.rebuild_pending && self.committer.in_flight() == 0 {
            if let Some(metrics) = &self.metrics {
                metrics.failstop();
            }
            error!("a commit failed: the relay stopped (fail-stop); rebuilding it from the store");
            self.rebuild();
        }
    }

    /// After the loop: waits until every batch in flight is reported before the core lets go.
    /// After the end of the term (`term_end` ended) their answers were refused already;
    /// otherwise the open batch is sealed too and every batch is answered.
    async fn let_go(&mut self, term_end: Option<&TermEnd>) {
        if term_end.and_then(TermEnd::ended).is_some() {
            // The term ended: its answers were refused and nothing more is sealed; the batches
            // in flight land before the takeover or are fenced, and the core lets go once
            // each is reported.
            while self.committer.in_flight() > 0 {
                let Completion { id, result, .. } = self.committer.next().await;
                debug!(%id, committed = result.is_ok(), "batch of an ended term reported");
            }
        } else if self.committer.in_flight() > 0 {
            // Every input sender is gone: nobody waits for these answers any more, but the
            // batches they answer are committed (or refused) before the core lets go.
            self.settle().await;
        }
    }

    /// The term ended (leadership lost, or a commit fenced): fail-stop at once. The server
    /// turns standby (new requests get `NOT_LEADER`), every socket is closed, every input still
    /// queued is refused with `NOT_LEADER`, and the relay is dropped with the core: nothing
    /// more is committed or acknowledged by this term.
    fn end_term(&mut self, why: &str, inputs: &mut mpsc::Receiver<Input>) {
        if let Some(phase) = self.term.as_ref().and_then(|t| t.phase.as_ref()) {
            Phase::stand_by(phase);
        }
        let sockets = self.close_all(
            &[Farewell::Close {
                code: CLOSE_NOT_LEADER,
                reason: "not the leader",
            }],
            CloseKind::NotLeader,
        );
        inputs.close();
        // Batches in flight are dropped with the committer: nothing of them is released
        // (their commits land before the takeover or are fenced; the clients ask again).
        let mut refused = 0usize;
        let open = mem::take(&mut self.answers);
        for answers in self
            .waiting
            .drain(..)
            .map(|(_, a)| a)
            .chain(std::iter::once(open))
        {
            refused += answers.refuse(not_leader_response);
        }
        refused += self.parked.refuse(not_leader_response);
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
                Input::AdvanceClock { .. }
                | Input::Frame { .. }
                | Input::Disconnect { .. }
                | Input::Cross(_)
                | Input::Gone(_) => {}
            }
        }
        self.store_down.store(false, Ordering::Relaxed);
        if self.term.as_ref().is_some_and(|t| t.phase.is_some()) {
            error!(
                reason = why,
                sockets, refused, "leadership ended: fail-stop, every socket closed; standing by"
            );
        } else {
            // A cluster node's shard: the node's other shards serve on.
            info!(
                reason = why,
                sockets, refused, "the shard's term ended: its core stops, its sockets closed"
            );
        }
    }

    /// A read ahead came back: the frames parked on it run in the open batch.
    fn read_done(&mut self, done: relay_core::prefetch::ReadDone) {
        self.open_inputs += 1;
        let now = self.clock.now();
        self.relay.handle_read(now, done);
    }

    /// Handles `batch` (emptied) in the open batch; its answers wait for the batch's commit
    /// ([`Core::seal`], [`Core::completed`]). A test-mode clock move seals the batch before it
    /// and is sealed on its own (its answer waits for the outputs of the timers it fired).
    fn handle_batch(&mut self, batch: &mut Vec<Input>) {
        if let Some(metrics) = &self.metrics {
            metrics.batch(batch.len());
        }
        for input in batch.drain(..) {
            if let Input::AdvanceClock { ms, reply } = input {
                self.seal();
                self.advance_clock(ms, reply);
                self.seal();
            } else {
                self.handle(input);
            }
        }
    }

    /// Seals the open batch if it is due ([`CommitMode::seals_eagerly`]): always with an eager
    /// committer; otherwise when no batch is in flight or it holds [`MAX_BATCH_INPUTS`] inputs
    /// (and the pipeline has room). A failed relay's batch is answered at once.
    /// `inputs` tells whether the load is light (see [`Core::quiet`]).
    fn seal_if_due(&mut self, inputs: &mpsc::Receiver<Input>) {
        let due = self.commit_mode.seals_eagerly()
            || self.committer.in_flight() == 0
            || self.open_inputs >= MAX_BATCH_INPUTS;
        if self.relay.is_failed() || (due && self.committer.has_room()) {
            let quiet = self.quiet && inputs.is_empty() && !self.sockets_on_thread;
            if self.seal_as(quiet) {
                // Committed here: what arrived meanwhile waits in the queue.
                self.quiet = inputs.is_empty();
            }
        }
    }

    /// [`Core::seal_as`], never committing on this task.
    fn seal(&mut self) {
        self.seal_as(false);
    }

    /// Seals the open batch: hands its mutations to the committer and keeps its answers until
    /// the commit is reported, or answers now when there is nothing to wait for (or the relay
    /// failed: 503).
    /// Returns whether the batch was committed on this task.
    fn seal_as(&mut self, quiet: bool) -> bool {
        self.open_inputs = 0;
        let mut here = false;
        match self.relay.seal_batch() {
            Ok(Some(sealed)) => {
                self.waiting
                    .push_back((sealed.id, mem::take(&mut self.answers)));
                here = self.committer.submit(sealed, quiet);
                while let Some(done) = self.committer.try_next() {
                    self.completed(done);
                }
            }
            Ok(None) => {
                let answers = mem::take(&mut self.answers);
                self.answer(answers, true);
            }
            Err(relay_core::BatchFailed) => {
                let answers = mem::take(&mut self.answers);
                self.answer(answers, false);
            }
        }
        here
    }

    /// The committer reported a batch: the relay releases its outputs (or fails stop), the
    /// frames go to the sockets, then its answers.
    fn completed(&mut self, done: Completion) {
        let Completion { id, result, spare } = done;
        if let Err(e) = &result {
            debug!(%id, error = %e, "batch not committed");
        }
        let committed = self.relay.handle_committed(id, &result).is_ok();
        if let Some(batch) = spare {
            self.relay.recycle_batch(batch);
        }
        if self.committer.in_flight() == 0 {
            self.quiet = !mem::take(&mut self.arrived_in_flight);
        }
        let answers = match self.waiting.pop_front() {
            Some((waiting, answers)) if waiting == id => answers,
            other => {
                // The committer reports in submission order; anything else is a bug here.
                error!(%id, waiting = ?other.as_ref().map(|(w, _)| *w), "commit report out of order");
                other.map(|(_, a)| a).unwrap_or_default()
            }
        };
        self.drain();
        self.answer(answers, committed);
    }

    /// Seals the open batch and waits for every batch in flight to be reported.
    async fn settle(&mut self) {
        self.seal();
        while self.committer.in_flight() > 0 {
            let done = self.committer.next().await;
            self.completed(done);
        }
    }

    /// Sends a batch's answers: as they are when it was committed, 503 (and no upgrade) when
    /// it was not.
    fn answer(&mut self, answers: Answers, committed: bool) {
        let Answers {
            http,
            connects,
            clock,
        } = answers;
        for (reply, response) in http {
            let response = if committed {
                response
            } else {
                relay_core::storage_unavailable_response()
            };
            let _ = reply.send(response);
        }
        let now = self.clock.now();
        for (reply, connected) in connects {
            if committed {
                self.hand_over(reply, connected, now);
            } else {
                self.sockets.forget(connected.conn);
                let _ = reply.send(Err(relay_core::storage_unavailable_response()));
            }
        }
        for (reply, at) in clock {
            let _ = reply.send(at);
        }
    }

    fn handle(&mut self, input: Input) {
        self.open_inputs += 1;
        let now = self.clock.now();
        trace!(?input, "input");
        match input {
            Input::Http { req, reply } => {
                let path = tracing::enabled!(tracing::Level::DEBUG).then(|| req.path.clone());
                let id = self.parked.next_id();
                match self.relay.handle_request(now, id, req) {
                    Some(response) => {
                        debug!(path, status = response.status, "http response");
                        self.answers.http.push((reply, response));
                    }
                    None => {
                        debug!(path, "http request waits for a read");
                        self.parked.http(id, reply);
                    }
                }
            }
            Input::Connect { ws, reply } => self.connect(now, ws, reply),
            Input::Frame { conn, decoded } => {
                if let Some(metrics) = &self.metrics {
                    metrics.frame_received(decoded.as_ref().map_err(|_| ()));
                }
                self.relay.handle_decoded(now, conn, decoded);
            }
            Input::Disconnect { conn, slow } => {
                // Still known: the socket ended without the relay's core closing it: the
                // client went, or its task found it not reading.
                if self.sockets.forget(conn)
                    && let Some(metrics) = &self.metrics
                {
                    let kind = if slow {
                        CloseKind::TooSlow
                    } else {
                        CloseKind::ClientGone
                    };
                    metrics.websocket_closed(kind);
                }
                self.relay.handle_disconnect(now, conn);
            }
            Input::AdvanceClock { ms, reply } => self.advance_clock(ms, reply),
            Input::Cross(c) => {
                if !self.rebuild_pending {
                    self.relay.handle_crossing(now, c);
                }
            }
            Input::Gone(report) => self.push_gone(&report),
        }
    }

    /// Test mode: moves the clock and fires what became due; the answer waits with the open
    /// batch, so it goes after the timers' outputs.
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
        self.answers.clock.push((reply, now));
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
        let (Some(metrics), Some(gauges)) = (&self.metrics, &mut self.gauges) else {
            return;
        };
        let now = *self.relay.stats();
        if now != self.exported {
            metrics.relay_stats(&now, &self.exported);
            self.exported = now;
        }
        let (outbox_rows, handoffs_held) = self.relay.handoff_backlog();
        gauges.report(crate::metrics::CoreGauges {
            websockets: self.sockets.len(),
            inputs,
            queued_messages: self.relay.backlog_messages(),
            queued_bytes: self.relay.queued_bytes(),
            tombstone_cache_bytes: self.relay.tombstone_cache().bytes,
            queue_cache_bytes: self.relay.queue_cache().bytes,
            account_cache_bytes: self.relay.account_cache().bytes,
            conversation_cache_bytes: self.relay.relation_cache().conversation_bytes,
            contact_cache_bytes: self.relay.relation_cache().contact_bytes,
            parked_frames: self.relay.prefetch().parked_frames,
            parked_requests: self.relay.prefetch().parked_requests,
            parked_crossings: self.relay.prefetch().parked_crossings,
            reads_pending: self.relay.prefetch().reads_pending,
            outbox_rows,
            handoffs_held,
        });
    }

    /// Closes every socket with the given farewell and reports them disconnected.
    fn close_all(&mut self, farewell: &[Farewell], why: CloseKind) -> usize {
        let now = self.clock.now();
        let closed = self.sockets.close_all(farewell);
        if let Some(metrics) = &self.metrics {
            for _ in &closed {
                metrics.websocket_closed(why);
            }
        }
        for &conn in &closed {
            self.relay.handle_disconnect(now, conn);
        }
        closed.len()
    }

    /// Shutdown (the drain): refuse new upgrades; handle, commit and answer every input already
    /// queued (frames that arrived before the signal get their acks); then GOAWAY
    /// `server_shutdown` and close 1001 (going away) on every socket, after the frames queued
    /// for it. Inputs that arrive later are handled as they come (requests are answered; frames
    /// of closed sockets are dropped unacknowledged, and their clients send them again).
    async fn begin_shutdown(&mut self, inputs: &mut mpsc::Receiver<Input>) {
        self.draining = true;
        if let Some(metrics) = &self.metrics {
            metrics.draining();
        }
        let mut batch: Vec<Input> = Vec::with_capacity(MAX_BATCH_INPUTS);
        let mut handled = 0usize;
        // What was queued at the signal, at most: clients still sending cannot hold it open.
        while !self.rebuild_pending && handled < INPUT_QUEUE_CAPACITY {
            while !self.committer.has_room() {
                let done = self.committer.next().await;
                self.completed(done);
            }
            if self.relay.is_failed() {
                break;
            }
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
            self.seal();
            self.drain();
            if self.relay.is_failed() {
                break;
            }
        }
        // Every acknowledgement of what was handled leaves before the GOAWAY.
        self.settle().await;
        self.drain();
        let goaway = Utf8Bytes::from(
            ServerFrame::Goaway(GoawayFrame {
                reason: wire::frames::goaway_reason::SERVER_SHUTDOWN.to_owned(),
            })
            .encode(),
        );
        let sockets = self.close_all(
            &[
                Farewell::Text(goaway),
                Farewell::Close {
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
        // What waited for a read in the failed relay (or ran in a batch that was not
        // committed) is refused: nothing of it was stored.
        let refused = self.parked.refuse(relay_core::storage_unavailable_response);
        if refused > 0 {
            debug!(
                refused,
                "requests that waited for reads refused with the failed relay"
            );
        }
        let (code, reason) = close_for(CloseReason::StorageFailure);
        self.close_all(
            &[Farewell::Close { code, reason }],
            CloseKind::StorageFailure,
        );
        match (self.open)() {
            Ok(mut relay) => {
                self.export(0);
                (self.committer, self.readers) =
                    pipeline_for(&self.commit_mode, &self.read_mode, &mut relay);
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

/// Resolves with why once the term `end` has ended; never without a term.
async fn term_ended(end: Option<&TermEnd>) -> String {
    match end {
        Some(end) => end.wait().await,
        None => std::future::pending().await,
    }
}
