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
use crate::rows::{MessageRow, QueueSummary, Usage, decode};
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
/// A queue in memory is either the whole queue (read from the store, or created empty) or
/// its *tail*: only messages appended since it was last read, the older ones in the store
/// alone ([`Queue::tail`]). A message for an offline recipient whose queue is not in memory
/// joins a tail, so a flood of messages to evicted queues reads nothing back; the tail is
/// merged with the stored rows when the whole queue is next needed (`State::load_queue`).
#[derive(Debug, Default)]
pub(crate) struct Queue {
    msgs: VecDeque<Queued>,
    bytes: u64,
    tail: bool,
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

    /// An empty tail: the messages appended to a queue whose stored ones are not in memory.
    pub(crate) fn tail() -> Self {
        Self {
            tail: true,
            ..Self::default()
        }
    }

    /// Whether this is a tail ([`Queue::tail`]), not the whole queue.
    pub(crate) fn is_tail(&self) -> bool {
        self.tail
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

impl Queue {
    /// What this queue holds, as its conversation's row keeps it.
    pub(crate) fn summary(&self) -> QueueSummary {
        QueueSummary {
            msgs: self.msgs.len() as u64,
            bytes: self.bytes(),
            oldest: self.msgs.iter().map(|m| m.at).min().unwrap_or_default(),
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

    /// The queue `key`, if it is in memory whole (not a tail).
    pub(crate) fn get(&self, key: &QueueKey) -> Option<&Queue> {
        self.cache.get(key).filter(|q| !q.is_tail())
    }

    /// Whether the queue `key` is in memory whole (not a tail).
    pub(crate) fn is_loaded(&self, key: &QueueKey) -> bool {
        self.get(key).is_some()
    }

    /// The messages of the tail of `key` in memory ([`Queue::tail`]), by seq: what a read of
    /// the stored queue may not hold yet.
    pub(crate) fn tail_of(&self, key: &QueueKey) -> impl Iterator<Item = &Queued> {
        self.cache
            .get(key)
            .filter(|q| q.is_tail())
            .into_iter()
            .flat_map(Queue::iter)
    }

    /// Appends `m` to the queue `key` without its stored messages: to the queue in memory
    /// (whole or a tail), or to a new tail. Pinned until the batch being built is durable.
    /// Returns the message it replaced (a seq already in memory).
    pub(crate) fn append(&mut self, key: &QueueKey, m: Queued) -> Option<Queued> {
        if !self.cache.contains(key) {
            probes::probe!("queue:tail-started");
            self.cache.insert(key.clone(), Queue::tail());
        }
        self.cache.write(key, |q| q.insert(m)).flatten()
    }

    /// Adds the queue `key` as read from the store (or a new empty one), pinned while its
    /// recipient is held. (A queue already in memory, whole or a tail, is replaced, keeping
    /// its pins.)
    pub(crate) fn insert_loaded(&mut self, key: QueueKey, queue: Queue) {
        let new = !self.is_loaded(&key);
        let held = new.then(|| self.held.get_mut(&key.0)).flatten();
        let pin = held.is_some_and(|h| h.pinned.insert(key.1.clone()));
        let pinned = pin.then(|| key.clone());
        self.cache.insert(key, queue);
        if let Some(key) = pinned {
            self.cache.pin(&key);
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
    /// in flight wrote is evicted), but a read of their queue that ran before their commit
    /// lacks them: such a read must not be used.
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

/// Every stored message of the queue of `recipient` in `conv`, written by `from` (one prefix
/// scan), checked to belong to it.
/// The prefix of the message rows of the queue `(recipient, conv)`: what [`read_queue`] scans.
pub(crate) fn queue_prefix(recipient: &UserUuid, conv: &ConvId) -> String {
    let mut prefix = String::with_capacity(recipient.as_str().len() + conv.as_str().len() + 2);
    prefix.push_str(recipient.as_str());
    prefix.push('/');
    prefix.push_str(conv.as_str());
    prefix.push('/');
    prefix
}

pub(crate) fn read_queue(
    reader: &mut dyn StoreRead,
    recipient: &UserUuid,
    conv: &ConvId,
    from: &UserUuid,
) -> Result<Queue, StoreError> {
    let prefix = queue_prefix(recipient, conv);
    let mut q = Queue::default();
    for (key, value) in reader.scan_prefix(Table::Messages, &prefix)? {
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
        q.insert(Queued {
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
