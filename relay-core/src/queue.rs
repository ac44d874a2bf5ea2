//! The undelivered messages of one recipient in one conversation, by seq.
//!
//! A ring buffer rather than an ordered map: every new message of a conversation has a higher
//! seq than any queued one, so queuing is a push at the back, and receipts and expiry take
//! from the front; a lookup by seq is a binary search. No allocation per message (an ordered
//! map allocated a node every few messages, and a node of rows this size is a large
//! allocation for the allocator), and no key stored twice.

use std::collections::VecDeque;

use wire::{MessageId, Seq, UnixMs};

/// A queued message: what its `msg` frame needs besides the conversation (recipient, sender
/// and conversation id are the conversation's; see `crate::state::Conversation`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Queued {
    pub(crate) seq: Seq,
    pub(crate) id: MessageId,
    pub(crate) crypto_v: Option<u32>,
    pub(crate) payload: String,
    pub(crate) at: UnixMs,
}

impl Queued {
    /// What this message counts against the queue bounds
    /// ([`crate::limits::queued_message_bytes`]).
    pub(crate) fn charge(&self) -> u64 {
        crate::limits::queued_message_bytes(self.id.as_str().len(), self.payload.len())
    }
}

/// Queued messages in strictly increasing seq order, and the bytes they count.
#[derive(Debug, Default)]
pub(crate) struct Queue(VecDeque<Queued>, u64);

/// An empty queue gives its buffer back above this capacity (so an idle conversation holds
/// little), and keeps it below (so a conversation that is emptied by every receipt does not
/// allocate for every message).
const KEEP_EMPTY_CAPACITY: usize = 8;

impl Queue {
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The bytes of every queued message ([`Queued::charge`]).
    pub(crate) fn bytes(&self) -> u64 {
        self.1
    }

    /// Queues `m`, replacing (and returning) a message with the same seq.
    pub(crate) fn insert(&mut self, m: Queued) -> Option<Queued> {
        self.1 += m.charge();
        let replaced = match self.0.back() {
            Some(last) if last.seq >= m.seq => match self.position(m.seq) {
                Ok(i) => Some(std::mem::replace(&mut self.0[i], m)),
                Err(i) => {
                    self.0.insert(i, m);
                    None
                }
            },
            _ => {
                self.0.push_back(m);
                None
            }
        };
        if let Some(old) = &replaced {
            self.1 -= old.charge();
        }
        replaced
    }

    fn position(&self, seq: Seq) -> Result<usize, usize> {
        self.0.binary_search_by_key(&seq, |m| m.seq)
    }

    /// Removes the message `seq`.
    pub(crate) fn remove(&mut self, seq: Seq) -> Option<Queued> {
        let i = self.position(seq).ok()?;
        let m = self.0.remove(i);
        if let Some(m) = &m {
            self.1 -= m.charge();
        }
        self.trim();
        m
    }

    /// Removes the oldest message if its seq is at most `upto`.
    pub(crate) fn pop_upto(&mut self, upto: Seq) -> Option<Queued> {
        if self.0.front().is_some_and(|m| m.seq <= upto) {
            let m = self.0.pop_front();
            if let Some(m) = &m {
                self.1 -= m.charge();
            }
            self.trim();
            m
        } else {
            None
        }
    }

    fn trim(&mut self) {
        if self.0.is_empty() && self.0.capacity() > KEEP_EMPTY_CAPACITY {
            self.0 = VecDeque::new();
        }
    }

    /// The oldest message.
    pub(crate) fn first(&self) -> Option<&Queued> {
        self.0.front()
    }

    /// Every message, by seq.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Queued> {
        self.0.iter()
    }

    /// The messages with seq >= `from`, by seq.
    pub(crate) fn starting_at(&self, from: Seq) -> impl Iterator<Item = &Queued> {
        let start = self.0.partition_point(|m| m.seq < from);
        self.0.range(start..)
    }

    /// The messages with seq <= `upto`, by seq.
    pub(crate) fn upto(&self, upto: Seq) -> impl Iterator<Item = &Queued> {
        let end = self.0.partition_point(|m| m.seq <= upto);
        self.0.range(..end)
    }
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
            payload: String::new(),
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
                prop_assert_eq!(q.first(), model.values().next());
                for s in [0, 10, 20, 39] {
                    prop_assert!(q.starting_at(Seq(s)).eq(model.range(Seq(s)..).map(|(_, m)| m)));
                    prop_assert!(q.upto(Seq(s)).eq(model.range(..=Seq(s)).map(|(_, m)| m)));
                }
            }
        }
    }
}
