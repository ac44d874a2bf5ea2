//! Reads ahead: the store reads a frame needs, done off the relay's task before the frame runs.
//!
//! Most of what the relay serves from is in memory, but the lazy tables (accounts, contacts,
//! conversations, queues, tombstones, receipt marks) are read on a cache miss. Read on the
//! relay's own task, such a read stalls every other user while it runs (a whole tombstone set,
//! a database round trip). A shell that reads ahead ([`Relay::read_ahead`](crate::Relay::read_ahead))
//! takes those reads off the task:
//!
//! * **A read is found by trying.** A frame runs against `Ahead`, a stand-in for the store's
//!   reader that answers only from rows already read. The first read it cannot answer ends the
//!   attempt: the rules read before they write (a read that fails leaves nothing changed, as
//!   it always had to, so that the frame could be refused with `STORAGE_UNAVAILABLE`), so the
//!   attempt is discarded whole (its outputs, its counters) and the frame is *parked* on that
//!   read, a [`ReadRequest`] the shell polls ([`Relay::poll_read`](crate::Relay::poll_read)),
//!   runs on a reader of its own ([`ReadRequest::run`]) and hands back
//!   ([`Relay::handle_read`](crate::Relay::handle_read)). The frame then runs again; a frame
//!   whose reads chain (a name, then its account) parks once per link. The keys a frame needs
//!   are thus exactly the reads its rules make, never a list kept beside them that could go
//!   stale.
//! * **Order per connection, nobody waits for anyone else.** While a connection's frame is
//!   parked, its later frames queue behind it ([`MAX_PARKED_FRAMES_PER_CONN`]); every other
//!   connection's frames run at once.
//! * **A row read ahead is never stale when used.** A read is only asked for a row that is not
//!   in memory, and a lazy row leaves memory only once every write to it is durable, so the
//!   store already holds its newest value. What the relay writes to a row after asking for it
//!   marks the read stale if it is not back yet (`Prefetch::written`): a stale result is
//!   dropped and read again. Rows already back take the write in when they are one row or a
//!   whole scan (they then answer what the store holds once the write is durable), and are
//!   dropped otherwise (a bounded scan or page, whose bound the write may move).
//! * **A failed read** answers one frame that waited for it, as an inline read failure does:
//!   the documented `STORAGE_UNAVAILABLE` refusal and nothing else; any other frame that
//!   waited for it reads again.
//! * **What a client sent counts.** A frame queued behind a parked one is charged to the
//!   frame budget when it runs (a receipt ahead of it may refund the charge first); frames a
//!   client sent before it closed its socket run before the connection is dropped.
//! * **Bounded**: frames parked per connection and in all ([`MAX_PARKED_FRAMES`]), rounds of
//!   reads per frame ([`MAX_READ_ROUNDS`]); reads in flight are at most one per parked
//!   connection and [`MAX_READS_IN_FLIGHT`] in all, and none is handed out while the rows read
//!   ahead weigh [`MAX_ROWS_AHEAD_BYTES`] (but one, when none is in flight); the shell's reader
//!   pool decides how many of those run at once.
//!
//! * **Requests and upgrades too.** An HTTP request
//!   ([`Relay::handle_request`](crate::Relay::handle_request)) or a WebSocket upgrade
//!   ([`Relay::handle_connect_ahead`](crate::Relay::handle_connect_ahead)) is tried the same way
//!   and parked on its first miss (its own waiter: no request waits behind another); its answer
//!   comes out later as an output, after the commit of what it wrote. A request's budget is
//!   charged once, however often it runs. Bounded by [`MAX_PARKED_REQUESTS`] and
//!   [`MAX_PARKED_REQUEST_BYTES`].
//!
//! * **What other shards send too.** A crossing ([`Relay::handle_crossing`](crate::Relay::handle_crossing):
//!   a hand-off to apply, a submission to decide, a notice) is tried the same way and parked
//!   on its first miss as the crossings' waiter (`Waiter::Crossings`); the crossings after it
//!   queue behind it in the order they came, at most [`MAX_PARKED_CROSSINGS`] (one more is
//!   dropped, as a full input queue drops it: its shard sends again what the hand-off needs).
//!   A forwarded request waits as a request; an answer to one never reads.
//!
//! * **The timed sweeps too.** The expiry of tombstones and messages runs in steps
//!   (`crate::sweeps`), each an input that reads before it writes: the next tombstone expiry,
//!   a page of due queues, each due queue not in memory, the next queue expiry. A step that
//!   misses waits as the sweeps' waiter (`Waiter::Sweep`; no second sweep starts, and no
//!   deadline is set for it, meanwhile) and runs again when its read is back; the rows it used
//!   are let go after each step, so a page of large queues holds one at a time. The reads of
//!   an expiry index are never stale (`ReadOp::covers`): they are views of the durable rows,
//!   and the sweeps arm themselves for what is written after.
//!
//! What still reads on the relay's task (counted in
//! [`RelayStats::reads_inline`](crate::RelayStats::reads_inline)): a read an input makes after
//! it changed something (the rules read first; none is known to), and every read of a shell
//! that does not read ahead.

mod read;
mod reader;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use wire::ClientFrame;

use crate::http::HttpRequest;
use crate::shell::{ConnId, RequestId, WsConnect};
use crate::store::{Batch, MutationRef, Table};

pub use read::{ReadDone, ReadId, ReadOp, ReadRequest, ReadValue};
pub(crate) use reader::{Ahead, Inline, Reader};

/// Frames one connection may have waiting for reads (the one parked and those queued behind
/// it) beyond its frame burst (`Config::frame_burst_per_conn`): the frames its budget admits
/// at once always wait, and a connection whose read is slow may go on past them by this many
/// as its budget refills; one more is refused with `RATE_LIMITED`.
pub const MAX_PARKED_FRAMES_PER_CONN: usize = 64;
/// Frames all connections together may have waiting for reads; one more is refused with
/// `STORAGE_UNAVAILABLE` (the relay's reads are behind; the client sends it again).
pub const MAX_PARKED_FRAMES: usize = 16_384;
/// Times one frame may be parked again on a read its connection had done already (the rows
/// were written before it could use them, so they were dropped and are read again) before it
/// is refused with `STORAGE_UNAVAILABLE`: a bound on a frame that others' writes keep from
/// running. A read of a row not read yet is progress and is not counted: a `sync` reads one
/// queue per conversation, and whatever else a frame needs, one read at a time.
pub const MAX_READ_ROUNDS: u32 = 16;

/// Bytes of rows read ahead the relay holds for frames waiting (a queue read whole can be
/// 2 MiB): past it, no further read is handed to the shell until frames that held rows ran,
/// unless none is in flight (so the frames holding rows always get the reads they wait for).
pub const MAX_ROWS_AHEAD_BYTES: usize = 32 * 1024 * 1024;
/// Reads handed to the shell and not yet reported, at most: what they return is not yet counted
/// in [`MAX_ROWS_AHEAD_BYTES`], so the two together bound the rows read ahead.
pub const MAX_READS_IN_FLIGHT: usize = 16;
/// HTTP requests and WebSocket upgrades waiting for reads, at most; one more is answered 503
/// `STORAGE_UNAVAILABLE` (the relay's reads are behind; the client retries).
pub const MAX_PARKED_REQUESTS: usize = 4_096;
/// What other shards sent that waits for reads (the crossing parked and those queued behind
/// it), at most; one more is dropped, as a full core's input queue drops it (what the hand-off
/// protocol needs is sent again).
pub const MAX_PARKED_CROSSINGS: usize = 4_096;
/// Bytes of request bodies waiting for reads, at most (a media part is up to 5 MiB); past it a
/// request that would wait is answered 503 `STORAGE_UNAVAILABLE`.
pub const MAX_PARKED_REQUEST_BYTES: usize = 64 * 1024 * 1024;

/// Who waits for a read: the relay's timed sweeps, a connection (its frames, or its upgrade)
/// or one HTTP request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Waiter {
    /// The timed sweeps of expired tombstones and messages (one step waits at a time).
    Sweep,
    /// What other shards sent, in the order it came (one crossing waits at a time, the
    /// later ones behind it).
    Crossings,
    /// A connection's frames in order, or the upgrade that opens it.
    Conn(ConnId),
    /// One HTTP request.
    Request(RequestId),
}

/// What waits: a frame, an HTTP request, a WebSocket upgrade or a step of the sweeps.
#[derive(Debug, Clone)]
pub(crate) enum Work {
    /// The next step of the sweeps that came due at this time (their reads are keyed by it).
    Sweep(wire::UnixMs),
    /// A frame of the waiter's connection.
    Frame(ClientFrame),
    /// An HTTP request (shared: each run borrows it).
    Http(Arc<HttpRequest>),
    /// The upgrade of the waiter's connection.
    Connect(WsConnect),
    /// What the core of another shard sent.
    Cross(Box<crate::handoff::Crossing>),
}

impl Work {
    /// Body bytes it holds (bounded by [`MAX_PARKED_REQUEST_BYTES`]).
    fn body_bytes(&self) -> usize {
        match self {
            Self::Http(req) => req.body.len(),
            Self::Frame(_) | Self::Connect(_) | Self::Sweep(_) | Self::Cross(_) => 0,
        }
    }

    fn is_request(&self) -> bool {
        matches!(self, Self::Http(_) | Self::Connect(_))
    }
}

/// A frame, request or upgrade waiting for a read (or a frame queued behind one that is).
#[derive(Debug)]
struct Parked {
    work: Work,
    /// Times it was parked again on a read its waiter had done already.
    rereads: u32,
    /// A frame: it was charged to its connection's frame budget (a frame queued behind a
    /// parked one is charged when it runs, as it would have been had nothing waited: a receipt
    /// ahead of it may make it free first). A request: its request budget was charged.
    charged: bool,
}

/// One waiter's work: the head parked on a read, a connection's later frames behind it.
#[derive(Debug, Default)]
struct Waiting {
    frames: VecDeque<Parked>,
    /// The reads its frames were parked on, held until none of its frames waits any more:
    /// the frames behind the head usually need the same rows (a burst to one peer), and a
    /// relay without caches would read them again for each.
    holds: Vec<ReadOp>,
}

/// A read asked for and not yet reported.
#[derive(Debug)]
struct Pending {
    op: ReadOp,
    /// Waiters whose head waits for it.
    waiters: Vec<Waiter>,
    /// A row it reads was written after it was asked for: its result is dropped and the read
    /// asked again.
    stale: bool,
}

/// What a parked frame's attempt came to ([`Prefetch::parked_again`]).
#[derive(Debug)]
pub(crate) enum Reparked {
    /// It waits for its next read.
    Waiting,
    /// It was parked again on rows read already more than [`MAX_READ_ROUNDS`] times: refuse
    /// it with the refusal's code and words.
    TooManyRounds(Work, Refusal),
}

/// A frame that cannot wait for its reads: the error code and words it is refused with.
pub(crate) type Refusal = (wire::ErrorCode, &'static str);

/// Frames parked on reads, the reads asked for, and the rows read ahead (see the module doc).
/// Off until a shell turns it on ([`Prefetch::turn_on`]).
#[derive(Debug, Default)]
pub(crate) struct Prefetch {
    on: bool,
    ahead: Ahead,
    pending: BTreeMap<ReadId, Pending>,
    /// The pending read of each op (two frames parked on one row share its read).
    asked: BTreeMap<ReadOp, ReadId>,
    /// Reads for the shell to poll, in the order they were asked.
    requests: VecDeque<ReadRequest>,
    next_id: u64,
    /// Each waiter's work.
    parked: BTreeMap<Waiter, Waiting>,
    /// Frames in `parked`.
    parked_frames: usize,
    /// Requests and upgrades in `parked`, and the bytes of their bodies.
    parked_requests: (usize, usize),
    /// Crossings in `parked`.
    parked_crossings: usize,
    /// Waiters whose head's read came back, to run in this order.
    ready: VecDeque<Waiter>,
    /// Connections the client closed while frames of theirs waited: the frames run (a
    /// receipt sent before the close counts), then the connection is dropped.
    closing: std::collections::BTreeSet<ConnId>,
}

impl Prefetch {
    /// From now on frames read only what was read ahead.
    pub(crate) fn turn_on(&mut self) {
        self.on = true;
    }

    pub(crate) fn is_on(&self) -> bool {
        self.on
    }

    /// The reader an attempt reads through.
    pub(crate) fn reader(&mut self) -> &mut Ahead {
        &mut self.ahead
    }

    /// The read the attempt that just ended could not make, if any (and forgets it).
    pub(crate) fn take_miss(&mut self) -> Option<ReadOp> {
        self.ahead.take_miss()
    }

    /// Whether a step of the sweeps waits for a read (no other sweep starts meanwhile).
    pub(crate) fn sweep_waits(&self) -> bool {
        self.parked.contains_key(&Waiter::Sweep)
    }

    /// The rows `w`'s head was parked on were used (a step of the sweeps that ran, whose
    /// next step waits for other rows): they go once no one else holds them.
    pub(crate) fn release_holds(&mut self, w: Waiter) {
        let Some(waiting) = self.parked.get_mut(&w) else {
            return;
        };
        for op in std::mem::take(&mut waiting.holds) {
            self.ahead.release(&op);
        }
    }

    /// Whether a crossing waits for a read (a new one queues behind it).
    pub(crate) fn crossings_wait(&self) -> bool {
        self.parked.contains_key(&Waiter::Crossings)
    }

    /// Queues `c` behind the crossings that wait; `false` (dropped): [`MAX_PARKED_CROSSINGS`]
    /// wait already.
    pub(crate) fn queue_crossing(&mut self, c: crate::handoff::Crossing) -> bool {
        if self.parked_crossings >= MAX_PARKED_CROSSINGS {
            return false;
        }
        self.push(Waiter::Crossings, Work::Cross(Box::new(c)), true);
        true
    }

    /// Whether `conn` has frames waiting (a new frame of it queues behind them).
    pub(crate) fn is_waiting(&self, conn: ConnId) -> bool {
        self.parked.contains_key(&Waiter::Conn(conn))
    }

    /// Whether one more request or upgrade, with a body of `bytes`, may wait: `Err` is the
    /// refusal's code and words (503).
    pub(crate) fn room_for_request(&self, bytes: usize) -> Result<(), Refusal> {
        let (count, held) = self.parked_requests;
        if count >= MAX_PARKED_REQUESTS || held.saturating_add(bytes) > MAX_PARKED_REQUEST_BYTES {
            let code = wire::ErrorCode::STORAGE_UNAVAILABLE;
            probes::refusal(code.as_str());
            return Err((code, "the relay's reads are behind; retry shortly"));
        }
        Ok(())
    }

    /// Whether one more frame of `conn` may wait: `Err` is the refusal's code and words.
    pub(crate) fn room_for(&self, conn: ConnId, burst: u32) -> Result<(), Refusal> {
        let per_conn = usize::try_from(burst)
            .unwrap_or(usize::MAX)
            .saturating_add(MAX_PARKED_FRAMES_PER_CONN);
        let waiting = self.parked.get(&Waiter::Conn(conn));
        if waiting.map_or(0, |w| w.frames.len()) >= per_conn {
            let code = wire::ErrorCode::RATE_LIMITED;
            probes::refusal(code.as_str());
            return Err((
                code,
                "too many frames wait for the store on this connection; send it again later",
            ));
        }
        if self.parked_frames >= MAX_PARKED_FRAMES {
            let code = wire::ErrorCode::STORAGE_UNAVAILABLE;
            probes::refusal(code.as_str());
            return Err((code, "the relay's reads are behind; send it again"));
        }
        Ok(())
    }

    /// Queues `frame` behind `conn`'s parked frames, not charged to the frame budget (the
    /// caller gave its charge back: it is charged when it runs).
    pub(crate) fn queue_behind(&mut self, conn: ConnId, frame: ClientFrame) {
        self.push(Waiter::Conn(conn), Work::Frame(frame), false);
    }

    fn push(&mut self, w: Waiter, work: Work, charged: bool) {
        if work.is_request() {
            self.parked_requests.0 += 1;
            self.parked_requests.1 += work.body_bytes();
        } else if matches!(work, Work::Frame(_)) {
            self.parked_frames += 1;
        } else if matches!(work, Work::Cross(_)) {
            self.parked_crossings += 1;
        }
        let waiting = self.parked.entry(w).or_default();
        waiting.frames.push_back(Parked {
            work,
            rereads: 0,
            charged,
        });
    }

    /// Parks `work` of `w` (which has nothing waiting) on `op`; `charged`: a frame was charged
    /// to its frame budget, a request to its request budget.
    pub(crate) fn park(&mut self, w: Waiter, work: Work, charged: bool, op: ReadOp) {
        self.push(w, work, charged);
        let _ = self.parked_again(w, op);
    }

    /// Whether `w`'s head is still to be charged to its budget.
    pub(crate) fn head_uncharged(&self, w: Waiter) -> bool {
        self.parked
            .get(&w)
            .and_then(|w| w.frames.front())
            .is_some_and(|p| !p.charged)
    }

    /// `w`'s head was charged.
    pub(crate) fn head_charged(&mut self, w: Waiter) {
        if let Some(p) = self.parked.get_mut(&w).and_then(|w| w.frames.front_mut()) {
            p.charged = true;
        }
    }

    /// `w`'s head ran again and missed `op`: it waits for that read now.
    pub(crate) fn parked_again(&mut self, w: Waiter, op: ReadOp) -> Reparked {
        let Some(waiting) = self.parked.get_mut(&w) else {
            return Reparked::Waiting;
        };
        let Some(head) = waiting.frames.front_mut() else {
            return Reparked::Waiting;
        };
        if waiting.holds.contains(&op) {
            head.rereads += 1;
        }
        if head.rereads > MAX_READ_ROUNDS {
            let Some(head) = self.pop_head(w) else {
                return Reparked::Waiting;
            };
            let code = wire::ErrorCode::STORAGE_UNAVAILABLE;
            probes::refusal(code.as_str());
            return Reparked::TooManyRounds(
                head,
                (
                    code,
                    "the relay could not read what this frame needs; send it again",
                ),
            );
        }
        waiting.holds.push(op.clone());
        let id = match self.asked.get(&op) {
            Some(id) => *id,
            None => self.ask(op),
        };
        if let Some(p) = self.pending.get_mut(&id) {
            p.waiters.push(w);
        }
        Reparked::Waiting
    }

    fn ask(&mut self, op: ReadOp) -> ReadId {
        let id = ReadId(self.next_id);
        self.next_id += 1;
        self.asked.insert(op.clone(), id);
        self.requests.push_back(ReadRequest { id, op: op.clone() });
        self.pending.insert(
            id,
            Pending {
                op,
                waiters: Vec::new(),
                stale: false,
            },
        );
        id
    }

    /// The next read for the shell, while the rows read ahead and the reads in flight are
    /// within their bounds ([`MAX_ROWS_AHEAD_BYTES`], [`MAX_READS_IN_FLIGHT`]); with none in
    /// flight, one is handed out whatever is held (the frames holding rows may wait for it).
    pub(crate) fn poll_read(&mut self) -> Option<ReadRequest> {
        // Every asked read is either queued here or handed out and not yet reported.
        let in_flight = self.pending.len().saturating_sub(self.requests.len());
        let room = in_flight < MAX_READS_IN_FLIGHT && self.ahead.bytes() < MAX_ROWS_AHEAD_BYTES;
        if in_flight > 0 && !room {
            return None;
        }
        self.requests.pop_front()
    }

    /// A read came back. Its waiters are ready to run again (or, when it went stale, wait for
    /// the same read asked again). Unknown ids (a read of a relay that was rebuilt) are
    /// ignored.
    pub(crate) fn complete(&mut self, done: ReadDone) {
        let Some(p) = self.pending.remove(&done.id) else {
            return;
        };
        self.asked.remove(&p.op);
        if p.waiters.is_empty() {
            return;
        }
        if p.stale {
            let id = self.ask(p.op);
            if let Some(again) = self.pending.get_mut(&id) {
                again.waiters = p.waiters;
            }
            return;
        }
        self.ahead.hold(p.op, done.result, p.waiters.len());
        self.ready.extend(p.waiters);
    }

    /// The next waiter whose head may run again.
    pub(crate) fn next_ready(&mut self) -> Option<Waiter> {
        self.ready.pop_front()
    }

    /// A copy of `w`'s head, to run (a request is shared, not copied).
    pub(crate) fn head(&self, w: Waiter) -> Option<Work> {
        self.parked.get(&w)?.frames.front().map(|p| p.work.clone())
    }

    /// `w`'s head ran to its end (once none waits, the rows it held may go).
    pub(crate) fn ran(&mut self, w: Waiter) {
        let _ = self.pop_head(w);
    }

    fn pop_head(&mut self, w: Waiter) -> Option<Work> {
        let waiting = self.parked.get_mut(&w)?;
        let head = waiting.frames.pop_front()?;
        let empty = waiting.frames.is_empty();
        self.unpark(&head.work);
        if empty && let Some(waiting) = self.parked.remove(&w) {
            for op in &waiting.holds {
                self.ahead.release(op);
            }
        }
        Some(head.work)
    }

    /// `work` no longer waits: the counts of what waits go down.
    fn unpark(&mut self, work: &Work) {
        if work.is_request() {
            self.parked_requests.0 -= 1;
            self.parked_requests.1 -= work.body_bytes();
        } else if matches!(work, Work::Frame(_)) {
            self.parked_frames -= 1;
        } else if matches!(work, Work::Cross(_)) {
            self.parked_crossings -= 1;
        }
    }

    /// Every request and upgrade waiting, taken out (the relay stopped: each is answered with
    /// its refusal).
    pub(crate) fn take_requests(&mut self) -> Vec<(Waiter, Work)> {
        let requests: Vec<Waiter> = (self.parked.iter())
            .filter(|(_, w)| w.frames.front().is_some_and(|p| p.work.is_request()))
            .map(|(w, _)| *w)
            .collect();
        let mut taken = Vec::with_capacity(requests.len());
        for w in requests {
            taken.extend(self.remove(w).into_iter().map(|work| (w, work)));
        }
        taken
    }

    /// The client closed `conn`: `true` when frames of it wait, which run first (the caller
    /// drops the connection once they did, [`Prefetch::closed`]); `false`: drop it now.
    pub(crate) fn close_after_waiting(&mut self, conn: ConnId) -> bool {
        if self.parked.contains_key(&Waiter::Conn(conn)) {
            self.closing.insert(conn);
            return true;
        }
        false
    }

    /// Whether `conn`, closed by its client while frames of it waited, has none left (its
    /// connection is to be dropped now; asked once).
    pub(crate) fn closed(&mut self, conn: ConnId) -> bool {
        !self.parked.contains_key(&Waiter::Conn(conn)) && self.closing.remove(&conn)
    }

    /// `w` is gone (a connection closed, the relay stopped): what it had waiting is dropped
    /// (none of it was acknowledged) and the rows it held released.
    pub(crate) fn forget(&mut self, w: Waiter) {
        let _ = self.remove(w);
    }

    /// Takes out everything `w` had waiting, in order ([`Prefetch::forget`]).
    fn remove(&mut self, w: Waiter) -> Vec<Work> {
        if let Waiter::Conn(conn) = w {
            self.closing.remove(&conn);
        }
        let Some(waiting) = self.parked.remove(&w) else {
            return Vec::new();
        };
        for p in &waiting.frames {
            self.unpark(&p.work);
        }
        for op in &waiting.holds {
            self.ahead.release(op);
        }
        for p in self.pending.values_mut() {
            p.waiters.retain(|c| *c != w);
        }
        self.ready.retain(|c| *c != w);
        waiting.frames.into_iter().map(|p| p.work).collect()
    }

    /// An input wrote `batch`: reads of the rows it wrote, asked or done, are stale.
    pub(crate) fn written(&mut self, batch: &Batch) {
        if self.pending.is_empty() && self.ahead.is_empty() {
            return;
        }
        for m in batch {
            self.written_row(m);
        }
    }

    /// A read not back yet that covers the row is stale; the rows back take the write in,
    /// or are dropped ([`Ahead::written`]).
    fn written_row(&mut self, m: MutationRef<'_>) {
        let (table, key, value) = match m {
            MutationRef::Put { table, key, value }
            | MutationRef::PutExpiring {
                table, key, value, ..
            } => (table, key, Some(value)),
            MutationRef::Delete { table, key } => (table, key, None),
            MutationRef::Expire { table, .. } => return self.stale_covering(table, None),
        };
        if !table.is_lazy() {
            return;
        }
        self.stale_pending(table, Some(key));
        self.ahead.written(table, key, value);
    }

    /// Rows of `table` under `prefix` that were in memory only left it: a read of them asked
    /// or done before may lack them (it may have run before their commit), so it is stale.
    pub(crate) fn forgotten(&mut self, table: Table, prefix: &str) {
        if self.pending.is_empty() && self.ahead.is_empty() {
            return;
        }
        probes::probe!("prefetch:tail-forgotten");
        self.stale_covering(table, Some(prefix));
    }

    /// Reads that cover the row `key` of `table` (every row, for `None`) are stale.
    fn stale_covering(&mut self, table: Table, key: Option<&str>) {
        if !table.is_lazy() {
            return;
        }
        self.stale_pending(table, key);
        self.ahead.drop_covering(table, key);
    }

    /// Reads not back yet that cover the row `key` of `table` (every row, for `None`) are
    /// stale: they may have run before or after the write.
    fn stale_pending(&mut self, table: Table, key: Option<&str>) {
        for p in self.pending.values_mut() {
            if p.op.covers(table, key) {
                p.stale = true;
            }
        }
    }

    /// What waits now (metrics).
    pub(crate) fn stats(&self) -> crate::stats::PrefetchStats {
        crate::stats::PrefetchStats {
            on: self.on,
            parked_frames: self.parked_frames,
            parked_conns: self.parked.len()
                - self.parked.range(Waiter::Request(RequestId(0))..).count()
                - usize::from(self.sweep_waits())
                - usize::from(self.crossings_wait()),
            parked_crossings: self.parked_crossings,
            sweep_waiting: self.sweep_waits(),
            parked_requests: self.parked_requests.0,
            reads_pending: self.pending.len(),
            reads_queued: self.requests.len(),
            rows_held_bytes: self.ahead.bytes(),
        }
    }

    /// Whether nothing waits (tests).
    #[cfg(test)]
    pub(crate) fn is_idle(&self) -> bool {
        self.parked.is_empty() && self.pending.is_empty() && self.ahead.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{StoreError, Table};

    fn c(n: u64) -> Waiter {
        Waiter::Conn(ConnId(n))
    }

    impl Prefetch {
        fn park_frame(&mut self, conn: ConnId, frame: ClientFrame, op: ReadOp) {
            self.park(Waiter::Conn(conn), Work::Frame(frame), true, op);
        }
    }

    fn ping() -> ClientFrame {
        ClientFrame::decode(r#"{"type":"ping"}"#).unwrap()
    }

    fn get(key: &str) -> ReadOp {
        ReadOp::Get {
            table: Table::Accounts,
            key: key.to_owned(),
        }
    }

    fn written(p: &mut Prefetch, key: &str) {
        let mut batch = Batch::new();
        batch.put(Table::Accounts, key, b"{}");
        p.written(&batch);
    }

    fn done(id: ReadId) -> ReadDone {
        ReadDone {
            id,
            result: Ok(ReadValue::Row(Some(b"old".to_vec()))),
        }
    }

    #[test]
    fn a_read_whose_row_was_written_meanwhile_is_asked_again() {
        let mut p = Prefetch::default();
        p.turn_on();
        p.park_frame(ConnId(1), ping(), get("u1"));
        let first = p.poll_read().unwrap();
        // A write of another row changes nothing; one of the row makes the read stale.
        written(&mut p, "u2");
        written(&mut p, "u1");
        p.complete(done(first.id));
        assert_eq!(p.next_ready(), None, "a stale read woke its frame");
        let again = p.poll_read().unwrap();
        assert_eq!(again.op, get("u1"));
        assert_ne!(again.id, first.id);
        p.complete(done(again.id));
        assert_eq!(p.next_ready(), Some(c(1)));
        assert_eq!(
            p.reader().answer(get("u1")),
            Ok(ReadValue::Row(Some(b"old".to_vec())))
        );
        // A write after it came back is taken in: the frame's next attempt reads it.
        written(&mut p, "u1");
        assert_eq!(
            p.reader().answer(get("u1")),
            Ok(ReadValue::Row(Some(b"{}".to_vec())))
        );
        assert_eq!(p.take_miss(), None);
    }

    fn scan(prefix: &str, max: Option<usize>) -> ReadOp {
        ReadOp::ScanPrefix {
            table: Table::Accounts,
            prefix: prefix.to_owned(),
            max,
        }
    }

    fn rows(keys: &[(&str, &[u8])]) -> ReadValue {
        ReadValue::Rows(
            keys.iter()
                .map(|(k, v)| ((*k).to_owned(), v.to_vec()))
                .collect(),
        )
    }

    /// Rows back from a whole scan take the relay's writes in (puts in key order, deletes),
    /// as the store will hold them; a bounded scan, whose bound a write may move, is dropped
    /// and read again, and so is a row whose read failed.
    #[test]
    fn rows_back_take_writes_in_or_are_read_again() {
        let mut p = Prefetch::default();
        p.turn_on();
        p.park_frame(ConnId(1), ping(), scan("p/", None));
        p.park_frame(ConnId(2), ping(), scan("p/", Some(2)));
        p.park_frame(ConnId(3), ping(), get("q"));
        let reads: Vec<_> = std::iter::from_fn(|| p.poll_read()).collect();
        assert_eq!(reads.len(), 3);
        for r in &reads {
            let result = match &r.op {
                ReadOp::Get { .. } => Err(StoreError::Backend("down".into())),
                _ => Ok(rows(&[("p/a", b"1"), ("p/c", b"3")])),
            };
            p.complete(ReadDone { id: r.id, result });
        }
        let mut batch = Batch::new();
        batch.put(Table::Accounts, "p/b", b"2");
        batch.delete(Table::Accounts, "p/c");
        batch.put(Table::Accounts, "p/a", b"one");
        batch.put(Table::Accounts, "q", b"{}");
        p.written(&batch);
        assert_eq!(
            p.reader().answer(scan("p/", None)),
            Ok(rows(&[("p/a", b"one"), ("p/b", b"2")]))
        );
        assert!(p.reader().answer(scan("p/", Some(2))).is_err());
        assert_eq!(p.take_miss(), Some(scan("p/", Some(2))));
        assert!(p.reader().answer(get("q")).is_err());
        assert_eq!(p.take_miss(), Some(get("q")));
    }

    #[test]
    fn frames_on_one_read_share_it_and_rows_go_when_their_frames_ran() {
        let mut p = Prefetch::default();
        p.turn_on();
        p.park_frame(ConnId(1), ping(), get("u1"));
        p.park_frame(ConnId(2), ping(), get("u1"));
        p.queue_behind(ConnId(1), ping());
        let read = p.poll_read().unwrap();
        assert_eq!(p.poll_read(), None, "one read for both");
        p.complete(done(read.id));
        assert_eq!(p.next_ready(), Some(c(1)));
        assert_eq!(p.next_ready(), Some(c(2)));
        p.ran(c(1));
        assert!(p.is_waiting(ConnId(1)), "the frame behind still waits");
        assert!(p.stats().rows_held_bytes > 0);
        // The frame behind reads the rows its connection's head waited for.
        assert!(p.reader().answer(get("u1")).is_ok());
        p.ran(c(1));
        p.ran(c(2));
        assert!(p.is_idle(), "{p:?}");
    }

    #[test]
    fn a_failed_read_answers_one_frame_and_the_others_read_again() {
        let mut p = Prefetch::default();
        p.turn_on();
        p.park_frame(ConnId(1), ping(), get("u1"));
        p.queue_behind(ConnId(1), ping());
        p.park_frame(ConnId(2), ping(), get("u1"));
        let read = p.poll_read().unwrap();
        p.complete(ReadDone {
            id: read.id,
            result: Err(StoreError::Backend("injected".into())),
        });
        assert!(p.reader().answer(get("u1")).is_err());
        assert_eq!(p.take_miss(), None, "the failure, not a miss");
        // The frame behind it, and the other connection's, miss: their read is asked again.
        assert!(p.reader().answer(get("u1")).is_err());
        assert_eq!(p.take_miss(), Some(get("u1")));
    }

    #[test]
    fn reads_wait_while_the_rows_ahead_weigh_their_bound_but_one_always_goes() {
        let mut p = Prefetch::default();
        p.turn_on();
        let big = || ReadDone {
            id: ReadId(0),
            result: Ok(ReadValue::Row(Some(vec![0; MAX_ROWS_AHEAD_BYTES / 2]))),
        };
        for c in 0..40 {
            p.park_frame(ConnId(c), ping(), get(&format!("u{c}")));
        }
        // At most MAX_READS_IN_FLIGHT handed out at once.
        let first: Vec<_> = std::iter::from_fn(|| p.poll_read()).collect();
        assert_eq!(first.len(), MAX_READS_IN_FLIGHT);
        // Two big rows come back: the rows ahead weigh the bound, so no new read goes while
        // others are in flight.
        for r in &first[..2] {
            p.complete(ReadDone { id: r.id, ..big() });
        }
        assert!(p.stats().rows_held_bytes >= MAX_ROWS_AHEAD_BYTES);
        for r in &first[2..] {
            p.complete(done(r.id));
        }
        // Nothing in flight: one read goes whatever is held.
        let one = p.poll_read().expect("one read when none is in flight");
        assert_eq!(
            p.poll_read(),
            None,
            "a second waits while the rows weigh the bound"
        );
        // The frames that held the big rows ran: reads go again.
        p.ran(c(0));
        p.ran(c(1));
        p.complete(done(one.id));
        assert!(p.poll_read().is_some());
    }

    #[test]
    fn a_connection_that_goes_frees_what_it_held_and_its_read_wakes_nobody() {
        let mut p = Prefetch::default();
        p.turn_on();
        p.park_frame(ConnId(1), ping(), get("u1"));
        p.queue_behind(ConnId(1), ping());
        let read = p.poll_read().unwrap();
        p.forget(c(1));
        assert_eq!(p.stats().parked_frames, 0);
        p.complete(done(read.id));
        assert_eq!(p.next_ready(), None);
        assert!(p.is_idle(), "{p:?}");
    }

    #[test]
    fn the_bounds_refuse_the_frame_that_would_pass_them() {
        let mut p = Prefetch::default();
        p.turn_on();
        p.park_frame(ConnId(1), ping(), get("u1"));
        for _ in 1..MAX_PARKED_FRAMES_PER_CONN + 10 {
            assert!(p.room_for(ConnId(1), 10).is_ok());
            p.queue_behind(ConnId(1), ping());
        }
        let (code, _) = p.room_for(ConnId(1), 10).unwrap_err();
        assert_eq!(code, wire::ErrorCode::RATE_LIMITED);
        assert!(p.room_for(ConnId(2), 10).is_ok());
    }

    #[test]
    fn a_frame_whose_rows_keep_being_written_is_handed_back() {
        let mut p = Prefetch::default();
        p.turn_on();
        // New rows are progress, however many.
        p.park_frame(ConnId(1), ping(), get("k0"));
        for round in 1..3 * MAX_READ_ROUNDS {
            let read = p.poll_read().unwrap();
            p.complete(done(read.id));
            assert_eq!(p.next_ready(), Some(c(1)));
            let next = get(&format!("k{round}"));
            assert!(matches!(p.parked_again(c(1), next), Reparked::Waiting));
        }
        // The same row again and again (written each time before the frame could run) is not.
        for _ in 0..MAX_READ_ROUNDS {
            let read = p.poll_read().unwrap();
            p.complete(done(read.id));
            assert_eq!(p.next_ready(), Some(c(1)));
            assert!(matches!(p.parked_again(c(1), get("k0")), Reparked::Waiting));
        }
        let read = p.poll_read().unwrap();
        p.complete(done(read.id));
        assert!(matches!(
            p.parked_again(c(1), get("k0")),
            Reparked::TooManyRounds(..)
        ));
        assert!(p.is_idle(), "{p:?}");
    }
}
