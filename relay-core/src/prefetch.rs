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
//!   marks the read stale (`Prefetch::written`): a stale result is dropped and read again.
//! * **A failed read** answers one frame that waited for it, as an inline read failure does:
//!   the documented `STORAGE_UNAVAILABLE` refusal and nothing else; any other frame that
//!   waited for it reads again.
//! * **What a client sent counts.** A frame queued behind a parked one is charged to the
//!   frame budget when it runs (a receipt ahead of it may refund the charge first); frames a
//!   client sent before it closed its socket run before the connection is dropped.
//! * **Bounded**: frames parked per connection and in all ([`MAX_PARKED_FRAMES`]), rounds of
//!   reads per frame ([`MAX_READ_ROUNDS`]); reads in flight are at most one per parked
//!   connection, and the shell's reader pool decides how many run at once.
//!
//! HTTP requests, upgrades and timers still read on the relay's task (counted in
//! [`RelayStats::reads_inline`](crate::RelayStats::reads_inline)).

use std::collections::{BTreeMap, VecDeque};

use wire::ClientFrame;

use crate::shell::ConnId;
use crate::store::{Batch, Expiries, MutationRef, Rows, StoreError, StoreRead, Table};

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

/// Identifies a [`ReadRequest`] until its [`ReadDone`] comes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReadId(pub u64);

/// One read of the store, as [`StoreRead`] offers them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ReadOp {
    /// [`StoreRead::get`].
    Get {
        /// The table.
        table: Table,
        /// The row's key.
        key: String,
    },
    /// [`StoreRead::scan_prefix`], or with a bound [`StoreRead::scan_prefix_max`].
    ScanPrefix {
        /// The table.
        table: Table,
        /// The keys' prefix.
        prefix: String,
        /// Rows at most (`None`: all).
        max: Option<usize>,
    },
    /// [`StoreRead::scan_page`].
    ScanPage {
        /// The table.
        table: Table,
        /// The page starts after this key.
        after: Option<String>,
        /// Rows at most.
        limit: usize,
    },
    /// [`StoreRead::latest_expiries`].
    LatestExpiries {
        /// The table.
        table: Table,
        /// Milliseconds before the latest expiry.
        window: u64,
    },
    /// [`StoreRead::next_expiry`].
    NextExpiry {
        /// The table.
        table: Table,
        /// The expiry must come after this.
        after: u64,
    },
    /// [`StoreRead::expired`].
    Expired {
        /// The table.
        table: Table,
        /// Expiries at or before this.
        up_to: u64,
        /// The page starts after this row (expiry and key).
        after: Option<(u64, String)>,
        /// Keys at most.
        limit: usize,
    },
}

/// What a [`ReadOp`] returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadValue {
    /// A row's value, if the row exists.
    Row(Option<Vec<u8>>),
    /// Rows in key order.
    Rows(Rows),
    /// Keys with their expiries.
    Expiries(Expiries),
    /// An expiry, if any.
    Expiry(Option<u64>),
}

impl ReadValue {
    /// Estimated heap of the value (keys and values, plus a small overhead per row).
    fn bytes(&self) -> usize {
        match self {
            Self::Row(v) => v.as_ref().map_or(0, Vec::len),
            Self::Rows(rows) => rows.iter().map(|(k, v)| k.len() + v.len() + 48).sum(),
            Self::Expiries(keys) => keys.iter().map(|(k, _)| k.len() + 32).sum(),
            Self::Expiry(_) => 0,
        }
    }
}

impl ReadOp {
    /// Runs the read on `reader` (the shell's, off the relay's task).
    pub fn run(&self, reader: &mut dyn StoreRead) -> Result<ReadValue, StoreError> {
        Ok(match self {
            Self::Get { table, key } => ReadValue::Row(reader.get(*table, key)?),
            Self::ScanPrefix {
                table,
                prefix,
                max: None,
            } => ReadValue::Rows(reader.scan_prefix(*table, prefix)?),
            Self::ScanPrefix {
                table,
                prefix,
                max: Some(max),
            } => ReadValue::Rows(reader.scan_prefix_max(*table, prefix, *max)?),
            Self::ScanPage {
                table,
                after,
                limit,
            } => ReadValue::Rows(reader.scan_page(*table, after.as_deref(), *limit)?),
            Self::LatestExpiries { table, window } => {
                ReadValue::Expiries(reader.latest_expiries(*table, *window)?)
            }
            Self::NextExpiry { table, after } => {
                ReadValue::Expiry(reader.next_expiry(*table, *after)?)
            }
            Self::Expired {
                table,
                up_to,
                after,
                limit,
            } => {
                let after = after.as_ref().map(|(at, k)| (*at, k.as_str()));
                ReadValue::Expiries(reader.expired(*table, *up_to, after, *limit)?)
            }
        })
    }

    fn table(&self) -> Table {
        match self {
            Self::Get { table, .. }
            | Self::ScanPrefix { table, .. }
            | Self::ScanPage { table, .. }
            | Self::LatestExpiries { table, .. }
            | Self::NextExpiry { table, .. }
            | Self::Expired { table, .. } => *table,
        }
    }

    /// Whether a write to `key` of `table` may change what this read returns (an expiry on
    /// the table changes every read of it).
    fn covers(&self, table: Table, key: Option<&str>) -> bool {
        if self.table() != table {
            return false;
        }
        let Some(key) = key else {
            return true;
        };
        match self {
            Self::Get { key: k, .. } => k == key,
            Self::ScanPrefix { prefix, .. } => key.starts_with(prefix.as_str()),
            Self::ScanPage { after, .. } => after.as_deref().is_none_or(|a| key > a),
            Self::LatestExpiries { .. } | Self::NextExpiry { .. } | Self::Expired { .. } => true,
        }
    }
}

/// A read the relay needs done before a parked frame can run again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadRequest {
    /// Hand it back in the [`ReadDone`].
    pub id: ReadId,
    /// What to read.
    pub op: ReadOp,
}

impl ReadRequest {
    /// Runs the read on `reader` (off the relay's task) and makes its report.
    pub fn run(&self, reader: &mut dyn StoreRead) -> ReadDone {
        ReadDone {
            id: self.id,
            result: self.op.run(reader),
        }
    }
}

/// The outcome of a [`ReadRequest`], for [`Relay::handle_read`](crate::Relay::handle_read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadDone {
    /// The request's id.
    pub id: ReadId,
    /// What the read returned, or why it failed.
    pub result: Result<ReadValue, StoreError>,
}

/// Rows read ahead, which answer a parked frame's reads ([`Reader`]); the first read they
/// cannot answer is recorded.
#[derive(Debug, Default)]
pub(crate) struct Ahead {
    rows: BTreeMap<ReadOp, Held>,
    /// The first read of the current attempt that no row answered.
    missed: Option<ReadOp>,
    /// Estimated heap of `rows`.
    bytes: usize,
}

/// A read's result, kept while frames that waited for it may run again.
#[derive(Debug)]
struct Held {
    result: Result<ReadValue, StoreError>,
    /// Frames parked on this read whose run is not over.
    holders: usize,
}

impl Ahead {
    /// The answer to `op` from the rows read ahead; a miss is recorded (the first of the
    /// attempt) and answered with an error.
    fn answer(&mut self, op: ReadOp) -> Result<ReadValue, StoreError> {
        if let Some(held) = self.rows.get(&op) {
            if held.result.is_ok() {
                return held.result.clone();
            }
            // A failed read answers one frame (refused as for a failed read); any other frame
            // that waited for it reads again.
            if let Some(failed) = self.rows.remove(&op) {
                return failed.result;
            }
        }
        if self.missed.is_none() {
            self.missed = Some(op);
        }
        Err(not_read_ahead())
    }

    fn release(&mut self, op: &ReadOp) {
        if let Some(held) = self.rows.get_mut(op) {
            held.holders = held.holders.saturating_sub(1);
            if held.holders == 0 {
                let gone = self.rows.remove(op).map_or(0, |h| held_bytes(&h));
                self.bytes -= gone;
            }
        }
    }
}

fn held_bytes(h: &Held) -> usize {
    h.result.as_ref().map_or(0, ReadValue::bytes)
}

/// A result of another kind than its read's (a shell that answered the wrong request).
fn mismatch() -> StoreError {
    StoreError::Backend("a read was answered with another read's kind of result".into())
}

/// The relay's own reader, counting the reads made on the relay's task ([`Reader::Inline`]).
#[derive(Debug)]
pub(crate) struct Inline {
    reader: Box<dyn StoreRead>,
    reads: u64,
}

impl Inline {
    pub(crate) fn new(reader: Box<dyn StoreRead>) -> Self {
        Self { reader, reads: 0 }
    }

    /// Reads made through it.
    pub(crate) fn reads(&self) -> u64 {
        self.reads
    }

    fn run(&mut self, op: &ReadOp) -> Result<ReadValue, StoreError> {
        self.reads += 1;
        op.run(&mut *self.reader)
    }
}

/// The reader a rule reads through: the relay's own, or, while a frame is tried against the
/// rows read ahead, those rows. A read they cannot answer ends the attempt while the frame
/// has changed nothing yet (it may park: [`Reader::may_park`]); once it has written or staged
/// something it cannot be tried again, so the read is made on the relay's task (counted in
/// `reads_inline`).
#[derive(Debug)]
pub(crate) enum Reader<'a> {
    /// Every read on the relay's task.
    Inline(&'a mut Inline),
    /// Reads from the rows read ahead.
    Ahead {
        ahead: &'a mut Ahead,
        inline: &'a mut Inline,
        /// The frame has changed nothing yet: a miss ends its attempt.
        may_park: bool,
    },
}

impl Reader<'_> {
    /// Whether a miss may end the attempt now (the input has changed nothing).
    pub(crate) fn may_park(&mut self, clean: bool) {
        if let Self::Ahead { may_park, .. } = self {
            *may_park = clean;
        }
    }

    /// Whether a read of this attempt missed (the attempt will be dropped and run again).
    pub(crate) fn missed(&self) -> bool {
        matches!(self, Self::Ahead { ahead, .. } if ahead.missed.is_some())
    }

    /// The read made: from the rows read ahead when they have it; else, if the attempt may
    /// park, the miss (the attempt ends); else on this task.
    fn read(&mut self, op: ReadOp) -> Result<ReadValue, StoreError> {
        match self {
            Self::Inline(inline) => inline.run(&op),
            Self::Ahead {
                ahead,
                inline,
                may_park,
            } => {
                if ahead.missed.is_some() {
                    // The attempt is over: the rule reads on towards its refusal.
                    return Err(not_read_ahead());
                }
                let answer = ahead.answer(op);
                match ahead.missed.take_if(|_| !*may_park) {
                    Some(op) => inline.run(&op),
                    None => answer,
                }
            }
        }
    }
}

impl StoreRead for Reader<'_> {
    fn get(&mut self, table: Table, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let key = key.to_owned();
        match self.read(ReadOp::Get { table, key })? {
            ReadValue::Row(row) => Ok(row),
            _ => Err(mismatch()),
        }
    }
    fn scan_prefix(&mut self, table: Table, prefix: &str) -> Result<Rows, StoreError> {
        let prefix = prefix.to_owned();
        rows(self.read(ReadOp::ScanPrefix {
            table,
            prefix,
            max: None,
        }))
    }
    fn scan_prefix_max(
        &mut self,
        table: Table,
        prefix: &str,
        max: usize,
    ) -> Result<Rows, StoreError> {
        let (prefix, max) = (prefix.to_owned(), Some(max));
        rows(self.read(ReadOp::ScanPrefix { table, prefix, max }))
    }
    fn scan_page(
        &mut self,
        table: Table,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Rows, StoreError> {
        let after = after.map(str::to_owned);
        rows(self.read(ReadOp::ScanPage {
            table,
            after,
            limit,
        }))
    }
    fn latest_expiries(&mut self, table: Table, window: u64) -> Result<Expiries, StoreError> {
        expiries(self.read(ReadOp::LatestExpiries { table, window }))
    }
    fn next_expiry(&mut self, table: Table, after: u64) -> Result<Option<u64>, StoreError> {
        match self.read(ReadOp::NextExpiry { table, after })? {
            ReadValue::Expiry(at) => Ok(at),
            _ => Err(mismatch()),
        }
    }
    fn expired(
        &mut self,
        table: Table,
        up_to: u64,
        after: Option<(u64, &str)>,
        limit: usize,
    ) -> Result<Expiries, StoreError> {
        let after = after.map(|(at, k)| (at, k.to_owned()));
        expiries(self.read(ReadOp::Expired {
            table,
            up_to,
            after,
            limit,
        }))
    }
}

/// The rows a scan returned.
fn rows(read: Result<ReadValue, StoreError>) -> Result<Rows, StoreError> {
    match read? {
        ReadValue::Rows(rows) => Ok(rows),
        _ => Err(mismatch()),
    }
}

/// The keys and expiries an expiry read returned.
fn expiries(read: Result<ReadValue, StoreError>) -> Result<Expiries, StoreError> {
    match read? {
        ReadValue::Expiries(keys) => Ok(keys),
        _ => Err(mismatch()),
    }
}

fn not_read_ahead() -> StoreError {
    StoreError::Backend("not read ahead".into())
}

/// A frame waiting for a read (or queued behind one that is).
#[derive(Debug)]
struct Parked {
    frame: ClientFrame,
    /// Times it was parked again on a read its connection had done already.
    rereads: u32,
    /// It was charged to its connection's frame budget. A frame queued behind a parked one is
    /// charged when it runs, as it would have been had nothing waited: a receipt ahead of it
    /// may make it free first.
    charged: bool,
}

/// One connection's frames waiting: the head parked on a read, the rest behind it.
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
    /// Connections whose head frame waits for it.
    waiters: Vec<ConnId>,
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
    /// it.
    TooManyRounds(ClientFrame),
}

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
    /// Each connection's frames waiting.
    parked: BTreeMap<ConnId, Waiting>,
    /// Frames in `parked`.
    parked_frames: usize,
    /// Connections whose head's read came back, to run in this order.
    ready: VecDeque<ConnId>,
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
        self.ahead.missed.take()
    }

    /// Whether `conn` has frames waiting (a new frame of it queues behind them).
    pub(crate) fn is_waiting(&self, conn: ConnId) -> bool {
        self.parked.contains_key(&conn)
    }

    /// Whether one more frame of `conn` may wait: `Err` is the refusal's code and words.
    pub(crate) fn room_for(
        &self,
        conn: ConnId,
        burst: u32,
    ) -> Result<(), (wire::ErrorCode, &'static str)> {
        let per_conn = usize::try_from(burst)
            .unwrap_or(usize::MAX)
            .saturating_add(MAX_PARKED_FRAMES_PER_CONN);
        if self.parked.get(&conn).map_or(0, |w| w.frames.len()) >= per_conn {
            return Err((
                wire::ErrorCode::RATE_LIMITED,
                "too many frames wait for the store on this connection; send it again later",
            ));
        }
        if self.parked_frames >= MAX_PARKED_FRAMES {
            return Err((
                wire::ErrorCode::STORAGE_UNAVAILABLE,
                "the relay's reads are behind; send it again",
            ));
        }
        Ok(())
    }

    /// Queues `frame` behind `conn`'s parked frames, not charged to the frame budget (the
    /// caller gave its charge back: it is charged when it runs).
    pub(crate) fn queue_behind(&mut self, conn: ConnId, frame: ClientFrame) {
        self.push(conn, frame, false);
    }

    fn push(&mut self, conn: ConnId, frame: ClientFrame, charged: bool) {
        self.parked_frames += 1;
        let waiting = self.parked.entry(conn).or_default();
        waiting.frames.push_back(Parked {
            frame,
            rereads: 0,
            charged,
        });
    }

    /// Parks `frame` of `conn` (which has nothing waiting, and was charged) on `op`.
    pub(crate) fn park(&mut self, conn: ConnId, frame: ClientFrame, op: ReadOp) {
        self.push(conn, frame, true);
        let _ = self.parked_again(conn, op);
    }

    /// Whether `conn`'s head frame is still to be charged to the frame budget.
    pub(crate) fn head_uncharged(&self, conn: ConnId) -> bool {
        self.parked
            .get(&conn)
            .and_then(|w| w.frames.front())
            .is_some_and(|p| !p.charged)
    }

    /// `conn`'s head frame was charged.
    pub(crate) fn head_charged(&mut self, conn: ConnId) {
        if let Some(p) = self
            .parked
            .get_mut(&conn)
            .and_then(|w| w.frames.front_mut())
        {
            p.charged = true;
        }
    }

    /// `conn`'s head frame ran again and missed `op`: it waits for that read now.
    pub(crate) fn parked_again(&mut self, conn: ConnId, op: ReadOp) -> Reparked {
        let Some(waiting) = self.parked.get_mut(&conn) else {
            return Reparked::Waiting;
        };
        let Some(head) = waiting.frames.front_mut() else {
            return Reparked::Waiting;
        };
        if waiting.holds.contains(&op) {
            head.rereads += 1;
        }
        if head.rereads > MAX_READ_ROUNDS {
            let Some(head) = self.pop_head(conn) else {
                return Reparked::Waiting;
            };
            return Reparked::TooManyRounds(head);
        }
        waiting.holds.push(op.clone());
        let id = match self.asked.get(&op) {
            Some(id) => *id,
            None => self.ask(op),
        };
        if let Some(p) = self.pending.get_mut(&id) {
            p.waiters.push(conn);
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

    /// The next read for the shell.
    pub(crate) fn poll_read(&mut self) -> Option<ReadRequest> {
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
        let held = Held {
            result: done.result,
            holders: p.waiters.len(),
        };
        self.ahead.bytes += held_bytes(&held);
        if let Some(old) = self.ahead.rows.insert(p.op, held) {
            self.ahead.bytes -= held_bytes(&old);
        }
        self.ready.extend(p.waiters);
    }

    /// The next connection whose head frame may run again.
    pub(crate) fn next_ready(&mut self) -> Option<ConnId> {
        self.ready.pop_front()
    }

    /// A copy of `conn`'s head frame, to run.
    pub(crate) fn head(&self, conn: ConnId) -> Option<ClientFrame> {
        self.parked
            .get(&conn)?
            .frames
            .front()
            .map(|p| p.frame.clone())
    }

    /// `conn`'s head frame ran to its end (once none waits, the rows its frames held may go).
    pub(crate) fn ran(&mut self, conn: ConnId) {
        let _ = self.pop_head(conn);
    }

    fn pop_head(&mut self, conn: ConnId) -> Option<ClientFrame> {
        let waiting = self.parked.get_mut(&conn)?;
        let head = waiting.frames.pop_front()?;
        self.parked_frames -= 1;
        if waiting.frames.is_empty()
            && let Some(waiting) = self.parked.remove(&conn)
        {
            for op in &waiting.holds {
                self.ahead.release(op);
            }
        }
        Some(head.frame)
    }

    /// The client closed `conn`: `true` when frames of it wait, which run first (the caller
    /// drops the connection once they did, [`Prefetch::closed`]); `false`: drop it now.
    pub(crate) fn close_after_waiting(&mut self, conn: ConnId) -> bool {
        if self.parked.contains_key(&conn) {
            self.closing.insert(conn);
            return true;
        }
        false
    }

    /// Whether `conn`, closed by its client while frames of it waited, has none left (its
    /// connection is to be dropped now; asked once).
    pub(crate) fn closed(&mut self, conn: ConnId) -> bool {
        !self.parked.contains_key(&conn) && self.closing.remove(&conn)
    }

    /// `conn` is gone: its waiting frames are dropped (none was acknowledged) and the rows they
    /// held released.
    pub(crate) fn forget(&mut self, conn: ConnId) {
        self.closing.remove(&conn);
        let Some(waiting) = self.parked.remove(&conn) else {
            return;
        };
        self.parked_frames -= waiting.frames.len();
        for op in &waiting.holds {
            self.ahead.release(op);
        }
        for p in self.pending.values_mut() {
            p.waiters.retain(|c| *c != conn);
        }
        self.ready.retain(|c| *c != conn);
    }

    /// An input wrote `batch`: reads of the rows it wrote, asked or done, are stale.
    pub(crate) fn written(&mut self, batch: &Batch) {
        if self.pending.is_empty() && self.ahead.rows.is_empty() {
            return;
        }
        for m in batch {
            self.written_row(m);
        }
    }

    fn written_row(&mut self, m: MutationRef<'_>) {
        let (table, key) = (m.table(), m.key());
        if !table.is_lazy() {
            return;
        }
        for p in self.pending.values_mut() {
            if p.op.covers(table, key) {
                p.stale = true;
            }
        }
        let stale: Vec<ReadOp> = (self.ahead.rows.keys())
            .filter(|op| op.covers(table, key))
            .cloned()
            .collect();
        for op in stale {
            if let Some(h) = self.ahead.rows.remove(&op) {
                self.ahead.bytes -= held_bytes(&h);
            }
        }
    }

    /// What waits now (metrics).
    pub(crate) fn stats(&self) -> crate::stats::PrefetchStats {
        crate::stats::PrefetchStats {
            on: self.on,
            parked_frames: self.parked_frames,
            parked_conns: self.parked.len(),
            reads_pending: self.pending.len(),
            reads_queued: self.requests.len(),
            rows_held_bytes: self.ahead.bytes,
        }
    }

    /// Whether nothing waits (tests).
    #[cfg(test)]
    pub(crate) fn is_idle(&self) -> bool {
        self.parked.is_empty() && self.pending.is_empty() && self.ahead.rows.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        p.park(ConnId(1), ping(), get("u1"));
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
        assert_eq!(p.next_ready(), Some(ConnId(1)));
        assert_eq!(
            p.reader().answer(get("u1")),
            Ok(ReadValue::Row(Some(b"old".to_vec())))
        );
        // A write after it came back drops the row: the frame's next attempt misses again.
        written(&mut p, "u1");
        assert!(p.reader().answer(get("u1")).is_err());
        assert_eq!(p.take_miss(), Some(get("u1")));
    }

    #[test]
    fn frames_on_one_read_share_it_and_rows_go_when_their_frames_ran() {
        let mut p = Prefetch::default();
        p.turn_on();
        p.park(ConnId(1), ping(), get("u1"));
        p.park(ConnId(2), ping(), get("u1"));
        p.queue_behind(ConnId(1), ping());
        let read = p.poll_read().unwrap();
        assert_eq!(p.poll_read(), None, "one read for both");
        p.complete(done(read.id));
        assert_eq!(p.next_ready(), Some(ConnId(1)));
        assert_eq!(p.next_ready(), Some(ConnId(2)));
        p.ran(ConnId(1));
        assert!(p.is_waiting(ConnId(1)), "the frame behind still waits");
        assert!(p.stats().rows_held_bytes > 0);
        // The frame behind reads the rows its connection's head waited for.
        assert!(p.reader().answer(get("u1")).is_ok());
        p.ran(ConnId(1));
        p.ran(ConnId(2));
        assert!(p.is_idle(), "{p:?}");
    }

    #[test]
    fn a_failed_read_answers_one_frame_and_the_others_read_again() {
        let mut p = Prefetch::default();
        p.turn_on();
        p.park(ConnId(1), ping(), get("u1"));
        p.queue_behind(ConnId(1), ping());
        p.park(ConnId(2), ping(), get("u1"));
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
    fn a_connection_that_goes_frees_what_it_held_and_its_read_wakes_nobody() {
        let mut p = Prefetch::default();
        p.turn_on();
        p.park(ConnId(1), ping(), get("u1"));
        p.queue_behind(ConnId(1), ping());
        let read = p.poll_read().unwrap();
        p.forget(ConnId(1));
        assert_eq!(p.stats().parked_frames, 0);
        p.complete(done(read.id));
        assert_eq!(p.next_ready(), None);
        assert!(p.is_idle(), "{p:?}");
    }

    #[test]
    fn the_bounds_refuse_the_frame_that_would_pass_them() {
        let mut p = Prefetch::default();
        p.turn_on();
        p.park(ConnId(1), ping(), get("u1"));
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
        p.park(ConnId(1), ping(), get("k0"));
        for round in 1..3 * MAX_READ_ROUNDS {
            let read = p.poll_read().unwrap();
            p.complete(done(read.id));
            assert_eq!(p.next_ready(), Some(ConnId(1)));
            let next = get(&format!("k{round}"));
            assert!(matches!(p.parked_again(ConnId(1), next), Reparked::Waiting));
        }
        // The same row again and again (written each time before the frame could run) is not.
        for _ in 0..MAX_READ_ROUNDS {
            let read = p.poll_read().unwrap();
            p.complete(done(read.id));
            assert_eq!(p.next_ready(), Some(ConnId(1)));
            assert!(matches!(
                p.parked_again(ConnId(1), get("k0")),
                Reparked::Waiting
            ));
        }
        let read = p.poll_read().unwrap();
        p.complete(done(read.id));
        assert!(matches!(
            p.parked_again(ConnId(1), get("k0")),
            Reparked::TooManyRounds(_)
        ));
        assert!(p.is_idle(), "{p:?}");
    }
}
