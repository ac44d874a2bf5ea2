//! The expiry of queued messages: no timer per queue or message, but one deadline, the
//! earliest expiry in the store's index on `queue_index.expires_at` (each queue's row carries
//! when its oldest message's TTL ends, written with every change to the queue:
//! `crate::queue_index`). When it passes, the sweep's steps ([`Cx::sweep_step`](crate::cx::Cx::sweep_step))
//! read the due queues in (expiry, key) pages ([`StoreRead::expired`]) and each loses its due messages
//! (`crate::queue`, `State::expire_queue`), its row rewritten with its next expiry.
//!
//! A read sees only durable rows, so a queue's expiry arms the sweep when the batch that wrote
//! its row is durable ([`Sweep::wrote`], carried by the batch's pins, then [`Sweep::arm`]), not
//! when it is written: a commit slower than the TTL still gets its sweep.
//!
//! [`StoreRead::expired`]: crate::store::StoreRead::expired

use std::collections::VecDeque;

use wire::UnixMs;

use crate::limits;
use crate::store::Expiries;

/// When the stored queues are next read for expiry, where a sweep cut short goes on, and the
/// page a sweep is working through.
///
/// A sweep goes in steps, each its own input that reads before it writes (so that, reading
/// ahead, a step that needs a row not read yet waits for it with nothing done): read a page
/// of due queues ([`Step::ReadPage`]), then each queue in turn ([`Step::Queue`]: read it if it
/// is not in memory, take its due messages out), then either go on after the page
/// ([`Step::GoOn`]) or read when the next stored expiry is ([`Step::ReadNext`]).
#[derive(Debug, Default)]
pub(crate) struct Sweep {
    /// The offline TTL.
    ttl_ms: u64,
    /// When the next sweep is due (none: no stored message expires).
    at: Option<UnixMs>,
    /// Where a sweep stopped (a full page, the message bound, a failed read): the next one
    /// reads after this row (its expiry and key).
    after: Option<(u64, String)>,
    /// The earliest expiry written since the writes were last handed to a batch's pins.
    written: Option<UnixMs>,
    /// Due queues read per page.
    page_rows: usize,
    /// Messages deleted per page at most.
    page_messages: usize,
    /// The page being worked through, between its read and its end.
    page: Option<Page>,
    /// The earliest expiry armed while a page was being worked through: applied when it
    /// ends, after the page set where the next sweep starts.
    rearm: Option<UnixMs>,
}

/// A page of due queues read from the index, being worked through.
#[derive(Debug)]
struct Page {
    /// The expiries it was read up to.
    up_to: u64,
    /// Where it was read from (where the sweep goes on should a later read fail).
    from: Option<(u64, String)>,
    /// The rows not handled yet: expiry and queue key.
    rows: VecDeque<(u64, String)>,
    /// It was a full page (more may be due after it).
    full: bool,
    /// Messages taken out so far.
    expired: usize,
    /// The last row handled.
    last: Option<(u64, String)>,
}

/// What the message sweep does next ([`Sweep::next`]).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Nothing: no sweep is due.
    Idle,
    /// Read the page of due queues: expiries up to `up_to`, after `after`, `rows` at most.
    ReadPage {
        up_to: u64,
        after: Option<(u64, String)>,
        rows: usize,
    },
    /// Handle the queue `key` (the page's next row).
    Queue(String),
    /// The page was full or cut short by the message bound: go on after it shortly.
    GoOn,
    /// The page is done: read the next stored expiry after `up_to`.
    ReadNext { up_to: u64 },
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
        if self.page.is_some() {
            self.rearm = Some(self.rearm.map_or(at, |r| r.min(at)));
        }
    }

    /// [`Sweep::arm`] for what was written since the last move.
    pub(crate) fn arm_written(&mut self) {
        let written = self.written.take();
        self.arm(written);
    }

    /// What the sweep does next at `at` (the time the sweep came due: the reads it asks for
    /// are keyed by it, so that a step run again after its read asks for the same read).
    pub(crate) fn next(&self, at: UnixMs) -> Step {
        let Some(page) = &self.page else {
            if self.at.is_none_or(|due| due > at) {
                return Step::Idle;
            }
            return Step::ReadPage {
                up_to: at.get(),
                after: self.after.clone(),
                rows: self.page_rows,
            };
        };
        match page.rows.front() {
            Some((_, key)) if page.expired < self.page_messages => Step::Queue(key.clone()),
            Some(_) => Step::GoOn,
            None if page.full => Step::GoOn,
            None => Step::ReadNext { up_to: page.up_to },
        }
    }

    /// The keys of the queues the page in progress has still to handle, in order.
    pub(crate) fn page_keys(&self) -> impl Iterator<Item = &str> {
        (self.page.iter())
            .flat_map(|p| p.rows.iter())
            .map(|(_, key)| key.as_str())
    }

    /// The page of due queues up to `up_to` was read: it is worked through from now on.
    pub(crate) fn page_read(&mut self, up_to: u64, rows: Expiries) {
        let full = rows.len() >= self.page_rows;
        self.page = Some(Page {
            up_to,
            from: self.after.take(),
            rows: rows.into_iter().map(|(key, at)| (at, key)).collect(),
            full,
            expired: 0,
            last: None,
        });
    }

    /// The page's next queue was handled: `expired` messages went.
    pub(crate) fn queue_done(&mut self, expired: usize) {
        if let Some(page) = &mut self.page {
            page.last = page.rows.pop_front();
            page.expired += expired;
        }
    }

    /// A read failed: the sweep goes on where it stood (after the last queue it handled) at
    /// `retry`, reading its page again.
    pub(crate) fn put_off(&mut self, retry: UnixMs) {
        self.go_on(retry);
    }

    /// The page was full or cut short ([`Step::GoOn`]): the next sweep reads after its last
    /// queue, at `at`.
    pub(crate) fn go_on(&mut self, at: UnixMs) {
        if let Some(page) = self.page.take() {
            self.after = page.last.or(page.from);
        }
        self.end(Some(at));
    }

    /// The page is done ([`Step::ReadNext`]): the next sweep is due at `at` (the next stored
    /// expiry, or a retry after a failed read).
    pub(crate) fn due_at(&mut self, at: Option<UnixMs>) {
        self.page = None;
        self.end(at);
    }

    /// A sweep ended: the next is due at `at`, or sooner for what was armed meanwhile.
    fn end(&mut self, at: Option<UnixMs>) {
        self.at = at;
        let rearm = self.rearm.take();
        self.arm(rearm);
    }
}
