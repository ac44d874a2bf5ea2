//! The relay's deadlines: idle sockets, the armed timers (pending receipts and retractions,
//! orders, spent credentials, media uploads), the in-memory limits' windows, and the timed
//! sweeps of the store (`crate::sweeps`), which run in steps and, reading ahead, wait for
//! their reads off the relay's task like any input (`crate::prefetch`).

use wire::UnixMs;

use super::Relay;
use crate::prefetch::{ReadOp, Waiter, Work};
use crate::queue::queue_prefix;
use crate::queue_index::parse_queue_key;
use crate::rows::Timer;
use crate::shell::CloseReason;
use crate::store::Table;

impl Relay {
    /// Fires every deadline at or before `now`: idle sockets, message / tombstone / pending
    /// receipt expiry, used and ephemeral credential expiry. A sweep whose step waits for a
    /// read goes on when the read is back ([`handle_read`](Relay::handle_read)).
    pub fn handle_timeout(&mut self, now: UnixMs) {
        if self.failed {
            return;
        }
        let idle = self.sessions.idle(now, self.config.idle_timeout_ms);
        for conn in idle {
            self.close_conn(conn, CloseReason::Idle);
        }
        while let Some((at, timer)) = self.state.timers().first().cloned() {
            if at > now {
                break;
            }
            self.state.pop_timer();
            self.fire(now, timer);
        }
        self.admission.sweep(now);
        self.throttles.sweep(now);
        self.budgets.sweep(now.get());
        self.state.upload_limit().sweep(now.get());
        self.cx().sweep_push(now);
        self.cx().send_handoffs(now);
        self.cx().ask_levels(now);
        self.expire_forwards(now);
        if self.finish().is_err() {
            return;
        }
        if !self.prefetch.sweep_waits()
            && let Some(op) = self.sweep(now, now)
        {
            self.park_sweep(now, op);
        }
        if !self.failed && !self.commits.in_batch() {
            self.cx().collect_blobs();
        }
        self.open_gate(now);
    }

    fn fire(&mut self, now: UnixMs, timer: Timer) {
        let ttl = self.config.offline_ttl_ms;
        match timer {
            Timer::PendingReceipt(user, conv, kind) => {
                let expired = self
                    .state
                    .pending_receipts()
                    .get(&(user.clone(), conv.clone(), kind))
                    .is_some_and(|r| now >= r.at.plus_ms(ttl));
                if expired {
                    self.state.delete_pending_receipt(&user, &conv, kind);
                }
            }
            Timer::PendingRetract(user, conv, id) => {
                let key = (user, conv, id);
                let expired = self
                    .state
                    .pending_retracts()
                    .get(&key)
                    .is_some_and(|r| now >= r.at.plus_ms(ttl));
                if expired {
                    self.state.delete_pending_retract(&key.0, &key.1, &key.2);
                }
            }
            Timer::Order(id) => self.cx().expire_order(now, &id),
            Timer::Confirm(user, order) => self.state.expire_pending_confirm(now, &user, &order),
            Timer::Spent(key) => self.state.expire_spent(now, &key),
            Timer::Media(id) => self.cx().fire_media(now, &id),
        }
    }

    /// Runs the steps of the sweeps due at `at` (`crate::sweeps`), each an input of its own
    /// (committed, or joined to the open batch, before the next), until they are done for
    /// now (`None`) or one needs a read not done yet (`Some`: it changed nothing).
    fn sweep(&mut self, now: UnixMs, at: UnixMs) -> Option<ReadOp> {
        loop {
            let (stats, mark) = (self.stats, self.ids.mark());
            self.reading_ahead = self.prefetch.is_on();
            let more = self.cx().sweep_step(now, at);
            self.reading_ahead = false;
            if let Some(op) = self.missed(stats, mark) {
                return Some(self.widen(op));
            }
            if self.finish().is_err() {
                return None;
            }
            if !more {
                return None;
            }
        }
    }

    /// The read a step of the message sweep missed, widened when it is a due queue's: that
    /// queue and the page's next ones not in memory, up to
    /// [`EXPIRY_READ_BYTES`](crate::limits::EXPIRY_READ_BYTES) by their index entries, in one
    /// read (each answers the step that reads it).
    fn widen(&self, op: ReadOp) -> ReadOp {
        let ReadOp::ScanPrefix {
            table: Table::Messages,
            prefix,
            max: None,
        } = &op
        else {
            return op;
        };
        let mut prefixes = Vec::new();
        let mut bytes = 0;
        for key in self.state.queues().sweep().page_keys() {
            let Some((recipient, conv)) = parse_queue_key(key) else {
                continue;
            };
            let Some(b) = self.state.queue_to_read(&recipient, &conv) else {
                continue;
            };
            let p = queue_prefix(&recipient, &conv);
            if prefixes.is_empty() && p != *prefix {
                // Not the page's next queue: some other read.
                return op;
            }
            if !prefixes.is_empty() && bytes + b > crate::limits::EXPIRY_READ_BYTES {
                break;
            }
            bytes += b;
            prefixes.push(p);
        }
        if prefixes.len() < 2 {
            return op;
        }
        // A queue's prefix ends with its separator: none is a prefix of another.
        prefixes.sort_unstable();
        prefixes.dedup();
        ReadOp::ScanPrefixes {
            table: Table::Messages,
            prefixes: prefixes.into(),
        }
    }

    /// The sweeps due at `at` wait for `op` (no other sweep starts meanwhile).
    fn park_sweep(&mut self, at: UnixMs, op: ReadOp) {
        self.sweep_parked();
        self.prefetch.park(Waiter::Sweep, Work::Sweep(at), true, op);
    }

    /// Counts a step of the sweeps parked on a read.
    fn sweep_parked(&mut self) {
        probes::probe!("prefetch:sweep-parked");
        self.stats.sweeps_parked += 1;
    }

    /// The sweeps due at `at` run again after the read they waited for: `Some` is the read
    /// their next step needs.
    pub(super) fn resume_sweep(&mut self, now: UnixMs, at: UnixMs) -> Option<ReadOp> {
        let op = self.sweep(now, at)?;
        // The rows the sweeps waited for were used: the next step's are others.
        self.prefetch.release_holds(Waiter::Sweep);
        self.sweep_parked();
        Some(op)
    }

    /// When [`handle_timeout`](Relay::handle_timeout) must be called next (a sweep that
    /// waits for a read sets no deadline: the read's return runs it).
    pub fn poll_timeout(&self) -> Option<UnixMs> {
        if self.failed {
            return None;
        }
        let timers = self.state.timers().first().map(|(at, _)| *at);
        let idle = self.sessions.next_idle(self.config.idle_timeout_ms);
        let pow_expiry = self.admission.next_expiry();
        let handoffs = self.state.handoffs().deadline();
        let forwards = self.forwards.next_deadline();
        let held = self.gate.next_deadline();
        let sweeps = if self.prefetch.sweep_waits() {
            [None, None]
        } else {
            [
                self.state.tombstones().sweep_at(),
                self.state.queues().sweep().at(),
            ]
        };
        [timers, idle, pow_expiry, handoffs, forwards, held]
            .into_iter()
            .chain(sweeps)
            .flatten()
            .min()
    }
}
