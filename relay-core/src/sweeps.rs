//! The relay's timed sweeps over the store: expired tombstones (one range delete) and expired
//! messages (a page of queues at a time, the cursor and the page in `expiry::Sweep`), run in
//! steps when their time comes (`Relay::handle_timeout`).
//!
//! Each step is an input of its own that reads before it writes, so that a relay reading ahead
//! (`crate::prefetch`) never reads for a sweep on its own task: a step whose read was not done
//! yet ends with nothing changed ([`Cx::read_missed`]), the sweep waits for the read, and the
//! step runs again once it is back. The reads are keyed by the time the sweep came due (`at`),
//! not the time a step runs, so a step run again asks for the very read it waited for.

use crate::cx::Cx;
use crate::expiry::Step;
use crate::limits;
use crate::queue_index::parse_queue_key;
use crate::store::{StoreError, Table};
use wire::UnixMs;

impl Cx<'_> {
    /// One step of the sweeps due at `at`, run at `now`: the tombstones' range expiry when it
    /// is due, else the message sweep's next step. `true`: another step follows (the caller
    /// ends this input first). `false`: the sweeps are done for now, or a read is awaited
    /// ([`Cx::read_missed`]).
    pub(crate) fn sweep_step(&mut self, now: UnixMs, at: UnixMs) -> bool {
        if self
            .state
            .tombstones()
            .sweep_at()
            .is_some_and(|due| due <= at)
        {
            return self.sweep_tombstones(now, at);
        }
        match self.state.expiry_sweep().next(at) {
            Step::Idle => false,
            Step::ReadPage { up_to, after, rows } => {
                let after = after.as_ref().map(|(at, k)| (*at, k.as_str()));
                let page = self.read_index(|r| r.expired(Table::QueueIndex, up_to, after, rows));
                match page {
                    Ok(page) => {
                        self.state.expiry_sweep().page_read(up_to, page);
                        true
                    }
                    Err(_) => self.sweep_read_failed(now),
                }
            }
            Step::Queue(key) => self.expire_queue(now, &key),
            Step::GoOn => {
                let next = now.plus_ms(limits::EXPIRY_PAGE_PAUSE_MS);
                self.state.expiry_sweep().go_on(next);
                false
            }
            Step::ReadNext { up_to } => {
                match self.read_index(|r| r.next_expiry(Table::QueueIndex, up_to)) {
                    Ok(next) => self.state.expiry_sweep().due_at(next.map(UnixMs)),
                    Err(_) if self.read_missed() => {}
                    Err(_) => {
                        self.stats.queue_read_failures += 1;
                        let retry = now.plus_ms(limits::QUEUE_READ_RETRY_MS);
                        self.state.expiry_sweep().due_at(Some(retry));
                    }
                }
                false
            }
        }
    }

    /// The range expiry of the tombstones due at `at`: the next expiry after `at` read first
    /// (from the store; the tombstones written since the last sweep count too, since some may
    /// not be committed yet), then, at the registry shard only, one `Expire` mutation
    /// (committed with this input) that deletes every shard's expired rows (the rows are
    /// garbage: reads leave expired tombstones out, so which shard deletes them changes
    /// nothing another sees, and one collector keeps the table's deletes with one owner), the
    /// sets in memory dropping theirs, and the next sweep scheduled at the earliest expiry left,
    /// but not sooner than [`TOMBSTONE_SWEEP_MS`](crate::limits::TOMBSTONE_SWEEP_MS) from
    /// `now`. A failed read retries after that interval. `true` but when the read is awaited.
    fn sweep_tombstones(&mut self, now: UnixMs, at: UnixMs) -> bool {
        let stored = match self.read_index(|r| r.next_expiry(Table::Tombstones, at.get())) {
            Ok(next) => next.map(UnixMs),
            Err(_) if self.read_missed() => return false,
            Err(_) => {
                self.stats.tombstone_read_failures += 1;
                Some(now)
            }
        };
        let collector = self.config.shard.me() == crate::handoff::REGISTRY_SHARD;
        self.state.expire_tombstones(at, collector);
        self.state.tombstones_swept(now, stored);
        true
    }

    /// The message sweep's step for the due queue `key`: the queue read (if it is not in
    /// memory), its due messages taken out, its index row rewritten with its next expiry (or
    /// deleted) and the backlog in step ([`State::expire_queue`](crate::state::State::expire_queue)).
    fn expire_queue(&mut self, now: UnixMs, key: &str) -> bool {
        let Some((recipient, conv)) = parse_queue_key(key) else {
            // Not a key the relay writes (it never names a queue the relay knows).
            self.state.expiry_sweep().queue_done(0);
            return true;
        };
        if self.config.shard.elsewhere(&recipient).is_some() {
            // Another shard's queue: that shard expires it.
            self.state.expiry_sweep().queue_done(0);
            return true;
        }
        // A queue read in part (a synced recipient's, held from its oldest message) is read on
        // as far as its messages expired; any other is read whole.
        let in_part = (self.state.queues())
            .get(&(recipient.clone(), conv.clone()))
            .is_some_and(|q| q.gap().is_some());
        let read = if in_part {
            self.read_queue_unexpired(&recipient, &conv, now)
        } else {
            self.read_queue(&recipient, &conv)
        };
        if read.is_err() {
            // Read again later (the failure is counted by the read): the queues before this
            // one are done (their due messages are gone from memory), so the sweep goes on
            // after the last of them.
            if !self.read_missed() {
                let retry = now.plus_ms(limits::QUEUE_READ_RETRY_MS);
                self.state.expiry_sweep().put_off(retry);
            }
            return false;
        }
        let expired = self.state.expire_queue(now, &recipient, &conv);
        self.recount(&recipient, &conv);
        self.state.expiry_sweep().queue_done(expired);
        true
    }

    /// A read of the message sweep failed: the sweep goes on where it stood
    /// [`QUEUE_READ_RETRY_MS`](crate::limits::QUEUE_READ_RETRY_MS) later (the messages stay
    /// queued meanwhile). A read that was not done yet is awaited instead. `false`.
    fn sweep_read_failed(&mut self, now: UnixMs) -> bool {
        if !self.read_missed() {
            self.stats.queue_read_failures += 1;
            let retry = now.plus_ms(limits::QUEUE_READ_RETRY_MS);
            self.state.expiry_sweep().put_off(retry);
        }
        false
    }

    /// A read of an expiry index through this input's reader (which may end the step:
    /// [`Cx::read_parts`]).
    fn read_index<T>(
        &mut self,
        read: impl FnOnce(&mut dyn crate::store::StoreRead) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let (_, cx) = self.read_parts();
        read(cx.reader())
    }
}
