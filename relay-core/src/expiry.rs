//! The expiry of queued messages: no timer per queue or message, but one deadline, the
//! earliest expiry in the store's index on `queue_index.expires_at` (each queue's row carries
//! when its oldest message's TTL ends, written with every change to the queue:
//! `crate::queue_index`). When it passes, [`crate::relay::Relay::sweep_messages`] reads the
//! due queues in (expiry, key) pages ([`StoreRead::expired`]) and each loses its due messages
//! (`crate::queue`, `State::expire_queue`), its row rewritten with its next expiry.
//!
//! A read sees only durable rows, so a queue's expiry arms the sweep when the batch that wrote
//! its row is durable ([`Sweep::wrote`], carried by the batch's pins, then [`Sweep::arm`]), not
//! when it is written: a commit slower than the TTL still gets its sweep.
//!
//! [`StoreRead::expired`]: crate::store::StoreRead::expired

use wire::{ConvId, UnixMs, UserUuid};

use crate::limits;
use crate::queue::QueueKey;
use crate::store::Table;

/// When the stored queues are next read for expiry, and where a sweep cut short goes on.
#[derive(Debug, Default)]
pub(crate) struct Sweep {
    /// The offline TTL.
    ttl_ms: u64,
    /// When the next sweep is due (none: no stored message expires).
    at: Option<UnixMs>,
    /// Where a sweep stopped (a full page, or the message bound): the next one reads after
    /// this row (its expiry and key).
    after: Option<(u64, String)>,
    /// The earliest expiry written since the writes were last handed to a batch's pins.
    written: Option<UnixMs>,
    /// Due queues read per page.
    page_rows: usize,
    /// Messages deleted per step at most.
    page_messages: usize,
}

impl Sweep {
    /// No sweep due yet, for messages that expire `ttl_ms` after they were accepted.
    pub(crate) fn new(ttl_ms: u64) -> Self {
        Self {
            ttl_ms,
            page_rows: limits::EXPIRY_PAGE_ROWS,
            page_messages: limits::EXPIRY_PAGE_MESSAGES,
            ..Self::default()
        }
    }

    /// Pages of `rows` due queues, at most `messages` deletions per step (each at least 1).
    pub(crate) fn set_pages(&mut self, rows: usize, messages: usize) {
        self.page_rows = rows.max(1);
        self.page_messages = messages.max(1);
    }

    /// The offline TTL: a message expires this long after it was accepted.
    pub(crate) fn ttl_ms(&self) -> u64 {
        self.ttl_ms
    }

    /// The first sweep is due at `at` (the earliest stored expiry, read at start).
    pub(crate) fn set_first(&mut self, at: Option<UnixMs>) {
        self.at = at;
    }

    /// When the next sweep is due.
    pub(crate) fn at(&self) -> Option<UnixMs> {
        self.at
    }

    /// A queue index row expiring at `at` was written in the batch being built.
    pub(crate) fn wrote(&mut self, at: UnixMs) {
        self.written = Some(self.written.map_or(at, |w| w.min(at)));
    }

    /// Hands the earliest expiry written since the last move to a batch's pins (`batch`).
    pub(crate) fn move_written(&mut self, batch: &mut Option<UnixMs>) {
        if let Some(at) = self.written.take() {
            *batch = Some(batch.map_or(at, |b| b.min(at)));
        }
    }

    /// Rows expiring at `at` (if any) are durable now: the sweep is due by then, and reads
    /// from the first due row again if it had passed them.
    pub(crate) fn arm(&mut self, at: Option<UnixMs>) {
        let Some(at) = at else {
            return;
        };
        self.at = Some(self.at.map_or(at, |s| s.min(at)));
        if self.after.as_ref().is_some_and(|(a, _)| at.get() <= *a) {
            self.after = None;
        }
    }

    /// [`Sweep::arm`] for what was written since the last move.
    pub(crate) fn arm_written(&mut self) {
        let written = self.written.take();
        self.arm(written);
    }

    /// A sweep starts if one is due at `now`: where the last one stopped (`Some(None)`: from
    /// the first due row). `None`: not due.
    fn start(&mut self, now: UnixMs) -> Option<Option<(u64, String)>> {
        if self.at.is_none_or(|at| at > now) {
            return None;
        }
        Some(self.after.take())
    }

    /// A read failed: the sweep goes on from `after` again at `retry`.
    fn put_off(&mut self, after: Option<(u64, String)>, retry: UnixMs) {
        self.after = after;
        self.at = Some(retry);
    }

    /// A page was full or cut short: the next sweep reads after `last`, at `at`.
    fn go_on_after(&mut self, last: Option<(u64, String)>, at: UnixMs) {
        self.after = last;
        self.at = Some(at);
    }

    /// The sweep is done: the next is due at `at` (the next stored expiry, or a retry).
    fn due_at(&mut self, at: Option<UnixMs>) {
        self.at = at;
    }
}

/// The recipient and conversation of the queue index row `key` (`recipient/conv`; a recipient
/// is a uuid, without `/`).
fn parse_queue_key(key: &str) -> Option<QueueKey> {
    let (recipient, conv) = key.split_once('/')?;
    Some((UserUuid::parse(recipient).ok()?, ConvId::parse(conv).ok()?))
}

impl crate::relay::Relay {
    /// Deletes the queued messages whose TTL has ended, when the sweep is due: one page
    /// (`Config::expiry_page_rows`, [`limits::EXPIRY_PAGE_ROWS`]) of due queues from the store's index on the queue
    /// index's expiry, each queue read (if it is not in memory) and its due messages taken
    /// out, its index row rewritten with its next expiry (or deleted) and the backlog in
    /// step, until `Config::expiry_page_messages` ([`limits::EXPIRY_PAGE_MESSAGES`]) messages
    /// went. A full page, or one cut
    /// short by that bound, leaves the sweep due again
    /// [`limits::EXPIRY_PAGE_PAUSE_MS`] later, to go on after its last row (the inputs that
    /// arrived meanwhile are handled between pages); otherwise it is due at the next stored
    /// expiry. A failed read puts it off
    /// by [`limits::QUEUE_READ_RETRY_MS`] (the messages stay queued meanwhile).
    pub(crate) fn sweep_messages(&mut self, now: UnixMs) {
        let Some(after) = self.state.queues.sweep.start(now) else {
            return;
        };
        let retry = now.plus_ms(limits::QUEUE_READ_RETRY_MS);
        let (page_rows, page_messages) = {
            let s = &self.state.queues.sweep;
            (s.page_rows, s.page_messages)
        };
        let page = self.reader.expired(
            Table::QueueIndex,
            now.get(),
            after.as_ref().map(|(at, k)| (*at, k.as_str())),
            page_rows,
        );
        let Ok(page) = page else {
            self.stats.queue_read_failures += 1;
            self.state.queues.sweep.put_off(after, retry);
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
                self.state.queues.sweep.put_off(after, retry);
                return;
            }
            expired += self.state.expire_queue(now, &recipient, &conv);
            self.recount(&recipient, &conv);
        }
        let cut_short = last.is_some_and(|(_, k)| page.last().is_some_and(|(l, _)| l != k));
        if page.len() >= page_rows || cut_short {
            let last = last.map(|(at, k)| (at, k.clone()));
            let next = now.plus_ms(limits::EXPIRY_PAGE_PAUSE_MS);
            self.state.queues.sweep.go_on_after(last, next);
            return;
        }
        let next = match self.reader.next_expiry(Table::QueueIndex, now.get()) {
            Ok(next) => next.map(UnixMs),
            Err(_) => {
                self.stats.queue_read_failures += 1;
                Some(retry)
            }
        };
        self.state.queues.sweep.due_at(next);
    }
}
