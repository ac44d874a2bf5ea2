//! The undelivered messages of one recipient in one conversation, by seq, and the bounded
//! cache of them the relay holds in memory.
//!
//! Queued messages live in the store's `messages` table, which is not read at start
//! ([`crate::store::Table::is_lazy`]). What the relay must know of every queue at all times —
//! how many messages and bytes it holds (the queue bounds), its oldest message, and who wrote
//! it — is its entry in the [`crate::queue_index::QueueIndex`] (a `queue_index` row per
//! non-empty queue, loaded at start, whose indexed expiry the expiry sweep reads:
//! `crate::expiry`),
//! written in the same commit as every change to the queue. The messages themselves are read
//! per queue (one prefix
//! scan) when they are needed — a new message for it, its recipient's `sync`, a receipt, a
//! retraction, its expiry — and kept in [`Queues`], a [`crate::lru::Lru`] bounded by
//! [`crate::Config::queue_cache_bytes`]: a write pins the queue until its batch is durable,
//! and a synced recipient's queues stay in memory until its connection goes (delivery reads
//! them for every message it pushes). The state's queue operations (`impl State` below) keep
//! the message rows, the index and the backlog in step.
//!
//! A ring buffer rather than an ordered map: every new message of a conversation has a higher
//! seq than any queued one, so queuing is a push at the back, and receipts and expiry take
//! from the front; a lookup by seq is a binary search. No allocation per message (an ordered
//! map allocated a node every few messages, and a node of rows this size is a large
//! allocation for the allocator), and no key stored twice.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use wire::{ConvId, MessageId, Seq, UnixMs, UserUuid};

use crate::limits;
use crate::lru::{Lru, Weigh};
use crate::rows::{MessageRow, QueueSummary, Usage, decode, message_key};
use crate::store::{StoreError, StoreRead, Table};

/// A queued message: what its `msg` frame needs besides the conversation (recipient, sender
/// and conversation id are the conversation's; see `crate::state::Conversation`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Queued {
    pub(crate) seq: Seq,
    pub(crate) id: MessageId,
    pub(crate) crypto_v: Option<u32>,
    pub(crate) payload: wire::frames::Payload,
    pub(crate) at: UnixMs,
}

impl Queued {
    /// The bytes of its `msg` frame in `conv` ([`limits::msg_frame_bytes`]): what it counts in
    /// a delivery window.
    pub(crate) fn frame_bytes(&self, conv: &ConvId) -> usize {
        limits::msg_frame_bytes(
            self.id.as_str().len(),
            conv.as_str().len(),
            self.payload.len(),
        )
    }

    /// What this message counts against the queue bounds
    /// ([`crate::limits::queued_message_bytes`]).
    pub(crate) fn charge(&self) -> u64 {
        limits::queued_message_bytes(self.id.as_str().len(), self.payload.len())
    }

    /// This one message as a usage count.
    pub(crate) fn usage(&self) -> Usage {
        Usage {
            msgs: 1,
            bytes: self.charge(),
        }
    }
}

/// Queued messages in strictly increasing seq order, and the bytes they count.
///
/// A queue in memory is the whole queue (read from the store, or created empty), or a part of
/// it with a [`Gap`]: stored messages not in memory. The part in memory is
///
/// * a **head**: the queue's oldest messages as far as they were read (`Gap::after`), read a
///   page at a time (`State::load_queue_part`): a synced recipient's queue is held this way,
///   so what delivery holds follows its window, not the backlog;
/// * and a **tail**: the messages appended since the queue was last read, above the gap. A
///   message for a recipient whose queue is not in memory starts a tail ([`Queue::unread`]), so a
///   flood of messages to evicted queues reads nothing back.
///
/// The gap is read (and laid under the tail, whose commit may still be in flight) when the
/// part of the queue it holds is needed.
#[derive(Debug, Default)]
pub(crate) struct Queue {
    msgs: VecDeque<Queued>,
    bytes: u64,
    gap: Option<Gap>,
}

/// The stored messages of a [`Queue`] that are not in memory: those above `after` (all the
/// stored ones, when nothing was read) and below the tail. What they count was known when the
/// gap opened (the queue's index entry, less what was in memory) and changes only as pages of
/// it are read: nothing else writes to messages that are not in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Gap {
    /// The highest seq read from the store: the end of the head (`None`: nothing read).
    after: Option<Seq>,
    msgs: u64,
    bytes: u64,
    /// The oldest `at` among the gap's messages: what the index entry said when the gap
    /// opened, raised to the `at` of each page's last message as pages are read (messages are
    /// queued in seq order at the relay's time; a step back of its clock delays the expiry of
    /// what was queued across the step by at most the step).
    oldest: UnixMs,
}

impl Gap {
    /// A gap holding what `stored` counts, nothing of it read.
    pub(crate) fn of(stored: QueueSummary) -> Self {
        Self {
            after: None,
            msgs: stored.msgs,
            bytes: stored.bytes,
            oldest: stored.oldest,
        }
    }

    /// The highest seq read from the store (`None`: nothing read).
    pub(crate) fn after(&self) -> Option<Seq> {
        self.after
    }

    /// The messages the gap holds.
    pub(crate) fn msgs(&self) -> u64 {
        self.msgs
    }

    /// The bytes the gap's messages count.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }
}

/// An empty queue gives its buffer back above this capacity (so an idle conversation holds
/// little), and keeps it below (so a conversation that is emptied by every receipt does not
/// allocate for every message).
const KEEP_EMPTY_CAPACITY: usize = 8;

impl Queue {
    pub(crate) fn len(&self) -> usize {
        self.msgs.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.msgs.is_empty()
    }

    /// The bytes of every queued message ([`Queued::charge`]).
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// A queue none of whose stored messages (`stored`) is in memory yet: the start of a tail,
    /// or of a read of the queue.
    pub(crate) fn unread(stored: QueueSummary) -> Self {
        Self {
            gap: Some(Gap::of(stored)),
            ..Self::default()
        }
    }

    /// Whether this is only a tail: nothing of the stored queue was read.
    pub(crate) fn is_tail(&self) -> bool {
        self.gap.is_some_and(|g| g.after.is_none())
    }

    /// The stored messages not in memory, if any.
    pub(crate) fn gap(&self) -> Option<Gap> {
        self.gap
    }

    /// What a read of the gap covers: the seqs above `Gap::after` (from the first when
    /// `None`) and below the first message of the tail (`None`: no tail). `None`: no gap.
    pub(crate) fn gap_range(&self) -> Option<(Option<Seq>, Option<Seq>)> {
        let g = self.gap?;
        let before = match g.after {
            Some(after) => self.starting_at(after.next()).next(),
            None => self.msgs.front(),
        };
        Some((g.after, before.map(|m| m.seq)))
    }

    /// Lays `rows` (read from the gap's range, [`Queue::gap_range`], in seq order) in the gap.
    /// `more`: the read stopped at its bound, so stored messages may follow the last row;
    /// otherwise it found every one and the gap closes.
    /// Returns whether the queue is now in memory whole.
    pub(crate) fn merge(&mut self, rows: Vec<Queued>, more: bool) -> bool {
        let Some(mut g) = self.gap else {
            return true;
        };
        for m in rows {
            if g.after.is_some_and(|a| m.seq <= a) {
                continue;
            }
            let charge = m.charge();
            g.after = Some(m.seq);
            g.oldest = g.oldest.max(m.at);
            if self.insert(m).is_some() {
                // The tail had it already (its commit was durable before the read).
                continue;
            }
            g.msgs = g.msgs.saturating_sub(1);
            g.bytes = g.bytes.saturating_sub(charge);
        }
        self.gap = more.then_some(g);
        !more
    }

    /// The oldest message pushed after `pushed` would be (the lowest seq above it): `Next::Gap`
    /// when that may be a stored message not read yet.
    pub(crate) fn next_after(&self, pushed: Seq) -> Next<'_> {
        let next = self.starting_at(pushed.next()).next();
        match self.gap {
            Some(g)
                if g.msgs > 0
                    && g.after.is_none_or(|a| a >= pushed)
                    && next.is_none_or(|m| g.after.is_none_or(|a| m.seq > a)) =>
            {
                Next::Gap
            }
            _ => next.map_or(Next::None, Next::Msg),
        }
    }

    /// Queues `m`, replacing (and returning) a message with the same seq.
    pub(crate) fn insert(&mut self, m: Queued) -> Option<Queued> {
        self.bytes += m.charge();
        let replaced = match self.msgs.back() {
            Some(last) if last.seq >= m.seq => match self.position(m.seq) {
                Ok(i) => Some(std::mem::replace(&mut self.msgs[i], m)),
                Err(i) => {
                    self.msgs.insert(i, m);
                    None
                }
            },
            _ => {
                self.msgs.push_back(m);
                None
            }
        };
        if let Some(old) = &replaced {
            self.bytes -= old.charge();
        }
        replaced
    }

    fn position(&self, seq: Seq) -> Result<usize, usize> {
        self.msgs.binary_search_by_key(&seq, |m| m.seq)
    }

    /// Removes the message `seq`.
    pub(crate) fn remove(&mut self, seq: Seq) -> Option<Queued> {
        let i = self.position(seq).ok()?;
        let m = self.msgs.remove(i);
        if let Some(m) = &m {
            self.bytes -= m.charge();
        }
        self.trim();
        m
    }

    /// Removes the oldest message if its seq is at most `upto`.
    pub(crate) fn pop_upto(&mut self, upto: Seq) -> Option<Queued> {
        if self.msgs.front().is_some_and(|m| m.seq <= upto) {
            let m = self.msgs.pop_front();
            if let Some(m) = &m {
                self.bytes -= m.charge();
            }
            self.trim();
            m
        } else {
            None
        }
    }

    fn trim(&mut self) {
        if self.msgs.is_empty() && self.msgs.capacity() > KEEP_EMPTY_CAPACITY {
            self.msgs = VecDeque::new();
        }
    }

    /// Every message, by seq.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Queued> {
        self.msgs.iter()
    }

    /// The messages with seq >= `from`, by seq.
    #[inline]
    pub(crate) fn starting_at(&self, from: Seq) -> impl Iterator<Item = &Queued> {
        let start = self.msgs.partition_point(|m| m.seq < from);
        self.msgs.range(start..)
    }

    /// The messages with seq <= `upto`, by seq.
    pub(crate) fn upto(&self, upto: Seq) -> impl Iterator<Item = &Queued> {
        let end = self.msgs.partition_point(|m| m.seq <= upto);
        self.msgs.range(..end)
    }
}

/// What comes after a seq in a queue ([`Queue::next_after`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next<'a> {
    /// This message.
    Msg(&'a Queued),
    /// A stored message not in memory, maybe: the gap must be read first.
    Gap,
    /// Nothing.
    None,
}

impl Queue {
    /// What this queue holds, as its conversation's row keeps it: the messages in memory and
    /// those of the gap (whose oldest is a bound below theirs, [`Gap::oldest`]).
    pub(crate) fn summary(&self) -> QueueSummary {
        let oldest = self.msgs.iter().map(|m| m.at).min();
        let (gap_msgs, gap_bytes, oldest) = match self.gap {
            Some(g) if g.msgs > 0 => (
                g.msgs,
                g.bytes,
                Some(oldest.map_or(g.oldest, |o| o.min(g.oldest))),
            ),
            _ => (0, 0, oldest),
        };
        QueueSummary {
            msgs: self.msgs.len() as u64 + gap_msgs,
            bytes: self.bytes() + gap_bytes,
            oldest: oldest.unwrap_or_default(),
        }
    }
}

/// Estimated heap per cached queue besides its messages' charges (which already count each
/// slot, [`crate::limits::QUEUED_MESSAGE_OVERHEAD_BYTES`]) and its key: the cache's map entry,
/// its place in the LRU order, the ring buffer's header.
pub(crate) const QUEUE_BYTES: usize = 160;

impl Weigh for Queue {
    fn weight(&self) -> usize {
        usize::try_from(self.bytes()).unwrap_or(usize::MAX) + QUEUE_BYTES
    }
}

/// A queue's key: its recipient and conversation (its rows' key prefix).
pub(crate) type QueueKey = (UserUuid, ConvId);

impl Weigh for QueueKey {
    fn weight(&self) -> usize {
        self.0.as_str().len() + self.1.as_str().len()
    }
}

/// The queues in memory: a bounded cache, the recipients whose queues are held, and when the
/// stored messages are next read for expiry.
#[derive(Debug)]
pub(crate) struct Queues {
    cache: Lru<QueueKey, Queue>,
    /// Per recipient with synced connections: how many, and the conversations whose cached
    /// queues are pinned for them (delivery reads them) until the last one goes.
    held: BTreeMap<UserUuid, Held>,
    /// When the stored queues are next read for expiry (`crate::expiry`).
    sweep: crate::expiry::Sweep,
    /// Tails evicted since [`Queues::take_forgotten_tails`] was last called: a read of their
    /// queue asked while they were in memory may lack their messages.
    forgotten_tails: Vec<QueueKey>,
}

/// A held recipient ([`Queues::hold`]).
#[derive(Debug, Default)]
struct Held {
    connections: u32,
    pinned: BTreeSet<ConvId>,
}

impl Default for Queues {
    fn default() -> Self {
        Self::new(usize::MAX, limits::OFFLINE_TTL_MS)
    }
}

impl Queues {
    /// An empty cache of at most `bound` bytes once what is pinned is released, for queued
    /// messages that expire `ttl_ms` after they were accepted.
    pub(crate) fn new(bound: usize, ttl_ms: u64) -> Self {
        Self {
            cache: Lru::new(bound),
            held: BTreeMap::new(),
            sweep: crate::expiry::Sweep::new(ttl_ms),
            forgotten_tails: Vec::new(),
        }
    }

    /// These queues with an expiry sweep of pages of `rows` due queues and at most `messages`
    /// deletions per step.
    pub(crate) fn with_expiry_pages(mut self, rows: usize, messages: usize) -> Self {
        self.sweep.set_pages(rows, messages);
        self
    }

    /// The offline TTL: a message expires this long after it was accepted.
    pub(crate) fn ttl_ms(&self) -> u64 {
        self.sweep.ttl_ms()
    }

    /// The queue `key`, if its oldest messages are in memory: whole, or a head and a gap (not
    /// only a tail).
    pub(crate) fn get(&self, key: &QueueKey) -> Option<&Queue> {
        self.cache.get(key).filter(|q| !q.is_tail())
    }

    /// Whether the oldest messages of the queue `key` are in memory ([`Queues::get`]).
    pub(crate) fn is_loaded(&self, key: &QueueKey) -> bool {
        self.get(key).is_some()
    }

    /// The queue `key` in memory, whatever part of it.
    pub(crate) fn peek(&self, key: &QueueKey) -> Option<&Queue> {
        self.cache.get(key)
    }

    /// Appends `m` to the queue `key` without reading its stored messages (`stored` counts
    /// them): to the queue in memory (whole, or above its gap), or to a new tail. Pinned until
    /// the batch being built is durable. Returns the message it replaced (a seq already in
    /// memory).
    pub(crate) fn append(
        &mut self,
        key: &QueueKey,
        m: Queued,
        stored: QueueSummary,
    ) -> Option<Queued> {
        if !self.cache.contains(key) {
            probes::probe!("queue:tail-started");
            self.cache.insert(key.clone(), Queue::unread(stored));
        }
        self.cache.write(key, |q| q.insert(m)).flatten()
    }

    /// Adds a new empty queue `key`, pinned while its recipient is held.
    pub(crate) fn insert_empty(&mut self, key: &QueueKey) {
        self.cache.insert(key.clone(), Queue::default());
        self.pin_if_held(key);
    }

    /// Lays `rows` read from the gap of the queue `key` in it ([`Queue::merge`]); a queue not
    /// in memory is first added with all of `stored` in its gap. A queue whose oldest messages
    /// this read brought into memory is pinned while its recipient is held.
    pub(crate) fn merge(
        &mut self,
        key: &QueueKey,
        stored: QueueSummary,
        rows: Vec<Queued>,
        more: bool,
    ) -> bool {
        if !self.cache.contains(key) {
            self.cache.insert(key.clone(), Queue::unread(stored));
        }
        let was_loaded = self.is_loaded(key);
        let merged = self
            .cache
            .update(key, |q| q.merge(rows, more))
            .unwrap_or(true);
        if !was_loaded && self.is_loaded(key) {
            self.pin_if_held(key);
        }
        merged
    }

    /// Pins the queue `key` for its held recipient, once.
    fn pin_if_held(&mut self, key: &QueueKey) {
        let held = self.held.get_mut(&key.0);
        if held.is_some_and(|h| h.pinned.insert(key.1.clone())) {
            self.cache.pin(key);
        }
    }

    /// Changes the cached queue `key` with a change whose mutations are in the batch being
    /// built (pinned until that batch is durable). `None` when it is not in memory.
    pub(crate) fn write<R>(
        &mut self,
        key: &QueueKey,
        f: impl FnOnce(&mut Queue) -> R,
    ) -> Option<R> {
        self.cache.write(key, f)
    }

    /// A synced connection of `user` opened: its cached queues among `convs` (the caller has
    /// read every non-empty one) stay in memory until [`Queues::release`], and so do those
    /// read or created for it later.
    pub(crate) fn hold<'a>(&mut self, user: &UserUuid, convs: impl Iterator<Item = &'a ConvId>) {
        let h = self.held.entry(user.clone()).or_default();
        h.connections += 1;
        if h.connections == 1 {
            for conv in convs {
                let key = (user.clone(), conv.clone());
                if self.cache.contains(&key) && h.pinned.insert(conv.clone()) {
                    self.cache.pin(&key);
                }
            }
        }
    }

    /// A synced connection of `user` went.
    pub(crate) fn release(&mut self, user: &UserUuid) {
        let Some(h) = self.held.get_mut(user) else {
            return;
        };
        h.connections -= 1;
        if h.connections == 0 {
            let Some(h) = self.held.remove(user) else {
                return;
            };
            for conv in h.pinned {
                self.cache.release(&(user.clone(), conv));
            }
        }
    }

    /// See [`Lru::move_written`].
    pub(crate) fn move_written(&mut self, batch: &mut Vec<QueueKey>) {
        self.cache.move_written(batch);
    }

    /// See [`Lru::unpin_written`].
    pub(crate) fn unpin_written(&mut self) {
        self.cache.unpin_written();
    }

    /// See [`Lru::unpin`].
    pub(crate) fn unpin(&mut self, written: Vec<QueueKey>) {
        self.cache.unpin(written);
    }

    /// See [`Lru::evict`]. The tails evicted are noted for [`Queues::take_forgotten_tails`].
    pub(crate) fn evict(&mut self) {
        let forgotten = &mut self.forgotten_tails;
        self.cache.evict_with(|key, q| {
            if q.is_tail() {
                forgotten.push(key);
            }
        });
    }

    /// The tails evicted since the last call. Their messages are durable (only what no batch
    /// in flight wrote is evicted), but a read of their whole queue that ran before their
    /// commit lacks them: such a read must not be used. (A read of a page of the gap ends
    /// below the tail's first message, so it never holds a message of the tail.)
    pub(crate) fn take_forgotten_tails(&mut self) -> Vec<QueueKey> {
        std::mem::take(&mut self.forgotten_tails)
    }

    /// What the cache holds now.
    /// The expiry sweep's cursor and schedule.
    pub(crate) fn sweep(&self) -> &crate::expiry::Sweep {
        &self.sweep
    }

    /// The expiry sweep's cursor and schedule, to move.
    pub(crate) fn sweep_mut(&mut self) -> &mut crate::expiry::Sweep {
        &mut self.sweep
    }

    pub(crate) fn stats(&self) -> crate::stats::QueueCacheStats {
        crate::stats::QueueCacheStats {
            bytes: self.cache.bytes(),
            queues: self.cache.len(),
            messages: self.cache.values().map(Queue::len).sum(),
            evictions: self.cache.evictions(),
        }
    }
}

/// The prefix of the message rows of the queue `(recipient, conv)`: what a read of the whole queue scans.
pub(crate) fn queue_prefix(recipient: &UserUuid, conv: &ConvId) -> String {
    let mut prefix = String::with_capacity(recipient.as_str().len() + conv.as_str().len() + 2);
    prefix.push_str(recipient.as_str());
    prefix.push('/');
    prefix.push_str(conv.as_str());
    prefix.push('/');
    prefix
}

/// The stored messages of the queue `(recipient, conv)` of `from` in its gap
/// ([`Queue::gap_range`]: above `after`, below `before`), `page` rows at most (all when
/// `None`), in seq order; and whether the read stopped at its bound (more may follow).
pub(crate) fn read_gap(
    reader: &mut dyn StoreRead,
    (recipient, conv, from): (&UserUuid, &ConvId, &UserUuid),
    (after, before): (Option<Seq>, Option<Seq>),
    page: Option<usize>,
) -> Result<(Vec<Queued>, bool), StoreError> {
    let prefix = queue_prefix(recipient, conv);
    let rows = match (after, before, page) {
        // The whole queue: one prefix scan (which the expiry sweep's read of many answers).
        (None, None, None) => reader.scan_prefix(Table::Messages, &prefix)?,
        _ => {
            let start = after.map_or_else(
                || prefix.clone(),
                |a| message_key(recipient, conv, a.next()),
            );
            let end = match before {
                Some(b) => message_key(recipient, conv, b),
                None => crate::store::prefix_end(&prefix).unwrap_or_default(),
            };
            reader.scan_range(Table::Messages, &start, &end, page.unwrap_or(usize::MAX))?
        }
    };
    let more = page.is_some_and(|p| rows.len() >= p);
    Ok((decode_queued(rows, recipient, conv, from)?, more))
}

/// Message rows of the queue `(recipient, conv)` of `from`, checked to belong to it.
fn decode_queued(
    rows: crate::store::Rows,
    recipient: &UserUuid,
    conv: &ConvId,
    from: &UserUuid,
) -> Result<Vec<Queued>, StoreError> {
    let mut q = Vec::with_capacity(rows.len());
    for (key, value) in rows {
        let m: MessageRow = decode(Table::Messages, &key, &value)?;
        // Written only for a member of the conversation by its other member: anything else
        // is a corrupt store.
        if m.recipient != *recipient || m.from != *from || m.conv_id != *conv {
            return Err(StoreError::Backend(format!(
                "corrupt row {key:?} in table {}: not a message between the members of a \
                 conversation",
                Table::Messages.name()
            )));
        }
        q.push(Queued {
            seq: m.seq,
            id: m.id,
            crypto_v: m.crypto_v,
            payload: m.payload,
            at: m.at,
        });
    }
    Ok(q)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64),
        Remove(u64),
        PopUpto(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u64..40).prop_map(Op::Insert),
            1 => (0u64..40).prop_map(Op::Remove),
            1 => (0u64..40).prop_map(Op::PopUpto),
        ]
    }

    fn queued(seq: u64, version: usize) -> Queued {
        Queued {
            seq: Seq(seq),
            id: MessageId::parse(&format!("m{seq}-{version}")).unwrap(),
            crypto_v: None,
            payload: wire::frames::Payload::default(),
            at: UnixMs(seq),
        }
    }

    proptest! {
        /// The queue behaves as the ordered map it replaced, for any order of operations
        /// (out-of-order inserts included, although the relay only appends).
        #[test]
        fn behaves_as_an_ordered_map(ops in proptest::collection::vec(op(), 0..80)) {
            let mut q = Queue::default();
            let mut model: BTreeMap<Seq, Queued> = BTreeMap::new();
            for (version, op) in ops.into_iter().enumerate() {
                match op {
                    Op::Insert(s) => {
                        prop_assert_eq!(
                            q.insert(queued(s, version)),
                            model.insert(Seq(s), queued(s, version))
                        );
                    }
                    Op::Remove(s) => prop_assert_eq!(q.remove(Seq(s)), model.remove(&Seq(s))),
                    Op::PopUpto(s) => {
                        let want = model.first_key_value().filter(|(k, _)| **k <= Seq(s))
                            .map(|(k, _)| *k);
                        let want = want.and_then(|k| model.remove(&k));
                        prop_assert_eq!(q.pop_upto(Seq(s)), want);
                    }
                }
                prop_assert_eq!(q.len(), model.len());
                prop_assert_eq!(q.bytes(), model.values().map(Queued::charge).sum::<u64>());
                prop_assert!(q.iter().eq(model.values()));
                prop_assert_eq!(q.iter().next(), model.values().next());
                prop_assert_eq!(q.summary().oldest, model.values().map(|m| m.at).min().unwrap_or_default());
                for s in [0, 10, 20, 39] {
                    prop_assert!(q.starting_at(Seq(s)).eq(model.range(Seq(s)..).map(|(_, m)| m)));
                    prop_assert!(q.upto(Seq(s)).eq(model.range(..=Seq(s)).map(|(_, m)| m)));
                }
            }
        }
    }
}
