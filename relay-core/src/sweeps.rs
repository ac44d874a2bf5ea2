//! The relay's timed sweeps over the store: expired messages (a page of queues at a time, the
//! cursor in `expiry::Sweep`) and expired tombstones (one range delete), each run when its
//! time comes (`Relay::handle_timeout`).

use crate::cx::Cx;
use crate::queue_index::parse_queue_key;
use crate::store::StoreRead as _;
use crate::store::Table;
use wire::UnixMs;

impl Cx<'_> {
    /// The range expiry of the tombstones, when due at `now`: one `Expire` mutation (committed
    /// with this input), the sets in memory dropping theirs, and the next one scheduled at the
    /// earliest expiry left (read from the store; the tombstones written since the last sweep
    /// count too, since some may not be committed yet), but not sooner than
    /// [`TOMBSTONE_SWEEP_MS`](crate::limits::TOMBSTONE_SWEEP_MS) from now. A failed read retries after that interval.
    pub(crate) fn sweep_tombstones(&mut self, now: UnixMs) {
        if self.state.tombstones().sweep_at().is_none_or(|at| at > now) {
            return;
        }
        self.state.expire_tombstones(now);
        let stored = match self.reader.next_expiry(Table::Tombstones, now.get()) {
            Ok(next) => next.map(UnixMs),
            Err(_) => {
                self.stats.tombstone_read_failures += 1;
                Some(now)
            }
        };
        self.state.tombstones_swept(now, stored);
    }

    /// Deletes the queued messages whose TTL has ended, when the sweep is due: one page
    /// (`Config::expiry_page_rows`, [`crate::limits::EXPIRY_PAGE_ROWS`]) of due queues from the store's index on the queue
    /// index's expiry, each queue read (if it is not in memory) and its due messages taken
    /// out, its index row rewritten with its next expiry (or deleted) and the backlog in
    /// step, until `Config::expiry_page_messages` ([`crate::limits::EXPIRY_PAGE_MESSAGES`]) messages
    /// went. A full page, or one cut
    /// short by that bound, leaves the sweep due again
    /// [`crate::limits::EXPIRY_PAGE_PAUSE_MS`] later, to go on after its last row (the inputs that
    /// arrived meanwhile are handled between pages); otherwise it is due at the next stored
    /// expiry. A failed read puts it off
    /// by [`crate::limits::QUEUE_READ_RETRY_MS`] (the messages stay queued meanwhile).
    pub(crate) fn sweep_messages(&mut self, now: UnixMs) {
        let Some(after) = self.state.expiry_sweep().start(now) else {
            return;
        };
        let retry = now.plus_ms(crate::limits::QUEUE_READ_RETRY_MS);
        let (page_rows, page_messages) = self.state.expiry_sweep().page();
        let page = self.reader.expired(
            Table::QueueIndex,
            now.get(),
            after.as_ref().map(|(at, k)| (*at, k.as_str())),
            page_rows,
        );
        let Ok(page) = page else {
            self.stats.queue_read_failures += 1;
            self.state.expiry_sweep().put_off(after, retry);
            return;
        };
        let mut expired = 0;
        let mut last = None;
        for (key, at) in &page {
            if expired >= page_messages {
                break;
            }
            last = Some((*at, key));
            let Some((recipient, conv)) = parse_queue_key(key) else {
                // Not a key the relay writes (it never names a queue the relay knows).
                continue;
            };
            if self.read_queue(&recipient, &conv).is_err() {
                // The whole page again later: the queues before this one are done (their
                // due messages are gone from memory), so it is only read again.
                self.state.expiry_sweep().put_off(after, retry);
                return;
            }
            expired += self.state.expire_queue(now, &recipient, &conv);
            self.recount(&recipient, &conv);
        }
        let cut_short = last.is_some_and(|(_, k)| page.last().is_some_and(|(l, _)| l != k));
        if page.len() >= page_rows || cut_short {
            let last = last.map(|(at, k)| (at, k.clone()));
            let next = now.plus_ms(crate::limits::EXPIRY_PAGE_PAUSE_MS);
            self.state.expiry_sweep().go_on_after(last, next);
            return;
        }
        let next = match self.reader.next_expiry(Table::QueueIndex, now.get()) {
            Ok(next) => next.map(UnixMs),
            Err(_) => {
                self.stats.queue_read_failures += 1;
                Some(retry)
            }
        };
        self.state.expiry_sweep().due_at(next);
    }
}
