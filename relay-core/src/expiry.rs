//! The expiry of queued messages: no timer per queue or message, but one deadline, the
//! earliest expiry in the store's index on `queue_index.expires_at` (each queue's row carries
//! when its oldest message's TTL ends, written with every change to the queue:
//! `crate::queue_index`). When it passes, [`Cx::sweep_messages`](crate::cx::Cx::sweep_messages) reads the
//! due queues in (expiry, key) pages ([`StoreRead::expired`]) and each loses its due messages
//! (`crate::queue`, `State::expire_queue`), its row rewritten with its next expiry.
//!
//! A read sees only durable rows, so a queue's expiry arms the sweep when the batch that wrote
//! its row is durable ([`Sweep::wrote`], carried by the batch's pins, then [`Sweep::arm`]), not
//! when it is written: a commit slower than the TTL still gets its sweep.
//!
//! [`StoreRead::expired`]: crate::store::StoreRead::expired

use wire::UnixMs;

use crate::limits;

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

    /// The bounds of one page: rows of the queue index read, messages taken out.
    pub(crate) fn page(&self) -> (usize, usize) {
        (self.page_rows, self.page_messages)
    }

    /// A sweep starts if one is due at `now`: where the last one stopped (`Some(None)`: from
    /// the first due row). `None`: not due.
    pub(crate) fn start(&mut self, now: UnixMs) -> Option<Option<(u64, String)>> {
        if self.at.is_none_or(|at| at > now) {
            return None;
        }
        Some(self.after.take())
    }

    /// A read failed: the sweep goes on from `after` again at `retry`.
    pub(crate) fn put_off(&mut self, after: Option<(u64, String)>, retry: UnixMs) {
        self.after = after;
        self.at = Some(retry);
    }

    /// A page was full or cut short: the next sweep reads after `last`, at `at`.
    pub(crate) fn go_on_after(&mut self, last: Option<(u64, String)>, at: UnixMs) {
        self.after = last;
        self.at = Some(at);
    }

    /// The sweep is done: the next is due at `at` (the next stored expiry, or a retry).
    pub(crate) fn due_at(&mut self, at: Option<UnixMs>) {
        self.at = at;
    }
}
