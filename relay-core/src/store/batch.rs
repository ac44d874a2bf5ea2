//! A batch of row-level mutations held in three reusable buffers: the keys back to back in one
//! `String`, the values back to back in one `Vec<u8>`, and one small fixed-size entry per
//! mutation pointing into them.
//!
//! The relay writes several rows for every routed message (the message, its tombstone, the
//! conversation's counter): as owned `String` keys and `Vec<u8>` values that was two heap
//! allocations per row. Here a row is two appends to buffers whose capacity survives
//! [`Batch::clear`], so a relay that reuses its batches writes rows without allocating, and a
//! store reads them by reference ([`MutationRef`]) to bind or copy as it needs.

use super::{Mutation, Table};

/// The mutations of one input (or of a group of inputs), applied atomically and in order.
///
/// Build it with [`put`](Batch::put), [`delete`](Batch::delete),
/// [`put_expiring`](Batch::put_expiring) and [`expire`](Batch::expire) (or collect it from
/// owned [`Mutation`]s); read it with [`iter`](Batch::iter).
#[derive(Clone, Default)]
pub struct Batch {
    keys: String,
    values: Vec<u8>,
    ops: Vec<Op>,
}

/// One mutation: its kind and table, and where its key and value lie in the buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Op {
    kind: Kind,
    table: Table,
    key: (usize, usize),
    value: (usize, usize),
    /// [`Kind::PutExpiring`]: the expiry; [`Kind::Expire`]: `up_to`.
    at: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Put,
    Delete,
    PutExpiring,
    Expire,
}

/// One mutation of a [`Batch`], borrowed from it: the same variants as [`Mutation`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MutationRef<'a> {
    /// Insert or replace the row `key` of `table` ([`Mutation::Put`]).
    Put {
        /// Target table.
        table: Table,
        /// Row key.
        key: &'a str,
        /// Serialized record.
        value: &'a [u8],
    },
    /// Delete the row `key` of `table` ([`Mutation::Delete`]).
    Delete {
        /// Target table.
        table: Table,
        /// Row key.
        key: &'a str,
    },
    /// Insert or replace a row with its expiry ([`Mutation::PutExpiring`]).
    PutExpiring {
        /// Target table.
        table: Table,
        /// Row key.
        key: &'a str,
        /// Serialized record.
        value: &'a [u8],
        /// When the row may be deleted.
        expires_at: u64,
    },
    /// Delete every expired row of `table` ([`Mutation::Expire`]).
    Expire {
        /// Target table.
        table: Table,
        /// Epoch milliseconds: rows expiring at or before it go.
        up_to: u64,
    },
}

impl<'a> MutationRef<'a> {
    /// The table this mutation writes.
    pub fn table(self) -> Table {
        match self {
            Self::Put { table, .. }
            | Self::Delete { table, .. }
            | Self::PutExpiring { table, .. }
            | Self::Expire { table, .. } => table,
        }
    }

    /// The single row this mutation writes (`None` for [`MutationRef::Expire`], which writes a
    /// range).
    pub fn key(self) -> Option<&'a str> {
        match self {
            Self::Put { key, .. } | Self::Delete { key, .. } | Self::PutExpiring { key, .. } => {
                Some(key)
            }
            Self::Expire { .. } => None,
        }
    }

    /// Whether this mutation carries an expiry for a table without one: a store refuses its
    /// whole batch.
    pub fn misplaces_an_expiry(self) -> bool {
        matches!(self, Self::PutExpiring { .. } | Self::Expire { .. }) && !self.table().has_expiry()
    }

    /// An owned copy.
    pub fn to_mutation(self) -> Mutation {
        match self {
            Self::Put { table, key, value } => Mutation::Put {
                table,
                key: key.to_owned(),
                value: value.to_vec(),
            },
            Self::Delete { table, key } => Mutation::Delete {
                table,
                key: key.to_owned(),
            },
            Self::PutExpiring {
                table,
                key,
                value,
                expires_at,
            } => Mutation::PutExpiring {
                table,
                key: key.to_owned(),
                value: value.to_vec(),
                expires_at,
            },
            Self::Expire { table, up_to } => Mutation::Expire { table, up_to },
        }
    }
}

impl Mutation {
    /// This mutation, borrowed (as a [`Batch`] hands them out).
    pub fn as_ref(&self) -> MutationRef<'_> {
        match self {
            Self::Put { table, key, value } => MutationRef::Put {
                table: *table,
                key,
                value,
            },
            Self::Delete { table, key } => MutationRef::Delete { table: *table, key },
            Self::PutExpiring {
                table,
                key,
                value,
                expires_at,
            } => MutationRef::PutExpiring {
                table: *table,
                key,
                value,
                expires_at: *expires_at,
            },
            Self::Expire { table, up_to } => MutationRef::Expire {
                table: *table,
                up_to: *up_to,
            },
        }
    }
}

/// Appends a row key piece by piece straight into a [`Batch`]'s key buffer.
#[derive(Debug)]
pub struct RowKey<'a>(&'a mut String);

impl<'a> RowKey<'a> {
    /// A key written into `buf` (appended to what it holds).
    pub(crate) fn into(buf: &'a mut String) -> Self {
        Self(buf)
    }

    /// Appends `s` to the key.
    pub fn push_str(&mut self, s: &str) {
        self.0.push_str(s);
    }

    /// Appends `c` to the key.
    pub fn push(&mut self, c: char) {
        self.0.push(c);
    }
}

impl Batch {
    /// An empty batch (allocates nothing until a row is written).
    pub fn new() -> Self {
        Self::default()
    }

    /// How many mutations it holds.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether it holds no mutation.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Bytes its buffers hold allocated (what keeping it for reuse costs).
    fn capacity_bytes(&self) -> usize {
        self.keys.capacity() + self.values.capacity() + self.ops.capacity() * size_of::<Op>()
    }

    /// Forgets every mutation, keeping the buffers' capacity for the next batch.
    pub fn clear(&mut self) {
        self.keys.clear();
        self.values.clear();
        self.ops.clear();
    }

    /// Forgets every mutation for reuse in place: keeps the buffers' capacity unless they grew
    /// beyond [`Spares::MAX_BYTES`] (an input or a start that wrote many rows), which are let go.
    pub(crate) fn reset(&mut self) {
        if self.capacity_bytes() > Spares::MAX_BYTES {
            *self = Self::new();
        } else {
            self.clear();
        }
    }

    /// The mutations, in order.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            batch: self,
            ops: self.ops.iter(),
        }
    }

    fn get(&self, op: &Op) -> MutationRef<'_> {
        let key = || self.keys.get(op.key.0..op.key.1).unwrap_or_default();
        let value = || self.values.get(op.value.0..op.value.1).unwrap_or_default();
        match op.kind {
            Kind::Put => MutationRef::Put {
                table: op.table,
                key: key(),
                value: value(),
            },
            Kind::Delete => MutationRef::Delete {
                table: op.table,
                key: key(),
            },
            Kind::PutExpiring => MutationRef::PutExpiring {
                table: op.table,
                key: key(),
                value: value(),
                expires_at: op.at,
            },
            Kind::Expire => MutationRef::Expire {
                table: op.table,
                up_to: op.at,
            },
        }
    }

    /// Appends one mutation, copying its key and value.
    pub fn push(&mut self, m: MutationRef<'_>) {
        match m {
            MutationRef::Put { table, key, value } => self.put(table, key, value),
            MutationRef::Delete { table, key } => self.delete(table, key),
            MutationRef::PutExpiring {
                table,
                key,
                value,
                expires_at,
            } => self.put_expiring(table, key, value, expires_at),
            MutationRef::Expire { table, up_to } => self.expire(table, up_to),
        }
    }

    /// Insert or replace the row `key` of `table` with `value`.
    pub fn put(&mut self, table: Table, key: &str, value: &[u8]) {
        self.put_row(table, |k| k.push_str(key), |v| v.extend_from_slice(value));
    }

    /// Delete the row `key` of `table` (no-op when absent).
    pub fn delete(&mut self, table: Table, key: &str) {
        self.delete_row(table, |k| k.push_str(key));
    }

    /// Insert or replace the row `key` of the expiring table `table` with its expiry.
    pub fn put_expiring(&mut self, table: Table, key: &str, value: &[u8], expires_at: u64) {
        self.push_op(
            Kind::PutExpiring,
            table,
            |k| k.push_str(key),
            |v| v.extend_from_slice(value),
            expires_at,
        );
    }

    /// Delete every row of the expiring table `table` whose expiry is at or before `up_to`.
    pub fn expire(&mut self, table: Table, up_to: u64) {
        self.push_op(Kind::Expire, table, |_| {}, |_| {}, up_to);
    }

    /// [`put`](Batch::put) with the key and value written in place by `key` and `value`.
    pub fn put_row(
        &mut self,
        table: Table,
        key: impl FnOnce(&mut RowKey<'_>),
        value: impl FnOnce(&mut Vec<u8>),
    ) {
        self.push_op(Kind::Put, table, key, value, 0);
    }

    /// [`put_expiring`](Batch::put_expiring) with the key and value written in place.
    pub fn put_expiring_row(
        &mut self,
        table: Table,
        key: impl FnOnce(&mut RowKey<'_>),
        value: impl FnOnce(&mut Vec<u8>),
        expires_at: u64,
    ) {
        self.push_op(Kind::PutExpiring, table, key, value, expires_at);
    }

    /// [`delete`](Batch::delete) with the key written in place.
    pub fn delete_row(&mut self, table: Table, key: impl FnOnce(&mut RowKey<'_>)) {
        self.push_op(Kind::Delete, table, key, |_| {}, 0);
    }

    /// [`put`](Batch::put) of a value that may fail to encode: when `value` fails, nothing is
    /// appended and its error is returned.
    pub fn try_put_row<E>(
        &mut self,
        table: Table,
        key: impl FnOnce(&mut RowKey<'_>),
        value: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
    ) -> Result<(), E> {
        let (k0, v0) = (self.keys.len(), self.values.len());
        let mut failed = None;
        self.push_op(Kind::Put, table, key, |v| failed = value(v).err(), 0);
        match failed {
            None => Ok(()),
            Some(e) => {
                self.ops.pop();
                self.keys.truncate(k0);
                self.values.truncate(v0);
                Err(e)
            }
        }
    }

    fn push_op(
        &mut self,
        kind: Kind,
        table: Table,
        key: impl FnOnce(&mut RowKey<'_>),
        value: impl FnOnce(&mut Vec<u8>),
        at: u64,
    ) {
        let k0 = self.keys.len();
        key(&mut RowKey(&mut self.keys));
        let v0 = self.values.len();
        value(&mut self.values);
        self.ops.push(Op {
            kind,
            table,
            key: (k0, self.keys.len()),
            value: (v0, self.values.len()),
            at,
        });
    }

    /// Moves every mutation of `other` to the end of this batch, leaving `other` empty (its
    /// capacity kept).
    pub fn append(&mut self, other: &mut Self) {
        let (dk, dv) = (self.keys.len(), self.values.len());
        self.keys.push_str(&other.keys);
        self.values.extend_from_slice(&other.values);
        self.ops.extend(other.ops.iter().map(|op| Op {
            key: (op.key.0 + dk, op.key.1 + dk),
            value: (op.value.0 + dv, op.value.1 + dv),
            ..*op
        }));
        other.clear();
    }

    /// Owned copies of the mutations (tests and tools).
    pub fn to_mutations(&self) -> Vec<Mutation> {
        self.iter().map(MutationRef::to_mutation).collect()
    }
}

impl PartialEq for Batch {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for Batch {}

/// Tables, kinds, keys and value sizes only: values may be secret (message payloads, keys).
impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        struct Row<'a>(MutationRef<'a>);
        impl std::fmt::Debug for Row<'_> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                match self.0 {
                    MutationRef::Put { table, key, value } => {
                        write!(f, "put {}/{key} ({} B)", table.name(), value.len())
                    }
                    MutationRef::Delete { table, key } => {
                        write!(f, "delete {}/{key}", table.name())
                    }
                    MutationRef::PutExpiring {
                        table,
                        key,
                        value,
                        expires_at,
                    } => write!(
                        f,
                        "put {}/{key} ({} B, expires {expires_at})",
                        table.name(),
                        value.len()
                    ),
                    MutationRef::Expire { table, up_to } => {
                        write!(f, "expire {} up to {up_to}", table.name())
                    }
                }
            }
        }
        f.debug_list().entries(self.iter().map(Row)).finish()
    }
}

/// Emptied batches kept for the next ones, so that a steady stream of batches allocates none:
/// at most [`Spares::MAX`], none whose buffers grew beyond [`Spares::MAX_BYTES`] (a burst of
/// large inputs in one batch does not keep its memory).
#[derive(Debug, Default)]
pub(crate) struct Spares(Vec<Batch>);

impl Spares {
    /// Batches kept: one per batch a shell keeps in flight, and a few more.
    pub(crate) const MAX: usize = 8;
    /// Largest buffers kept, in bytes.
    pub(crate) const MAX_BYTES: usize = 1 << 20;

    /// An empty batch, on a spare's buffers if there is one.
    pub(crate) fn take(&mut self) -> Batch {
        self.0.pop().unwrap_or_default()
    }

    /// Keeps `batch` (emptied) for a later [`Spares::take`], within the bounds.
    pub(crate) fn give(&mut self, mut batch: Batch) {
        batch.clear();
        if self.0.len() < Self::MAX && batch.capacity_bytes() <= Self::MAX_BYTES {
            self.0.push(batch);
        }
    }
}

/// The mutations of a [`Batch`], in order ([`Batch::iter`]).
#[derive(Debug, Clone)]
pub struct Iter<'a> {
    batch: &'a Batch,
    ops: std::slice::Iter<'a, Op>,
}

impl<'a> Iterator for Iter<'a> {
    type Item = MutationRef<'a>;

    fn next(&mut self) -> Option<Self::Item> {
        self.ops.next().map(|op| self.batch.get(op))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.ops.size_hint()
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.ops.next_back().map(|op| self.batch.get(op))
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl<'a> IntoIterator for &'a Batch {
    type Item = MutationRef<'a>;
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl FromIterator<Mutation> for Batch {
    fn from_iter<I: IntoIterator<Item = Mutation>>(iter: I) -> Self {
        let mut batch = Self::new();
        for m in iter {
            batch.push(m.as_ref());
        }
        batch
    }
}

impl From<Vec<Mutation>> for Batch {
    fn from(mutations: Vec<Mutation>) -> Self {
        mutations.into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn sample() -> Vec<Mutation> {
        vec![
            Mutation::Put {
                table: Table::Accounts,
                key: "u1".into(),
                value: b"{\"a\":1}".to_vec(),
            },
            Mutation::Delete {
                table: Table::Messages,
                key: "u1/c/00000000000000000001".into(),
            },
            Mutation::PutExpiring {
                table: Table::Tombstones,
                key: "u1/m1".into(),
                value: b"{}".to_vec(),
                expires_at: 42,
            },
            Mutation::Expire {
                table: Table::Tombstones,
                up_to: 7,
            },
            Mutation::Put {
                table: Table::Meta,
                key: String::new(),
                value: Vec::new(),
            },
        ]
    }

    #[test]
    fn hands_back_what_was_written_in_order() {
        let batch = Batch::from(sample());
        assert_eq!(batch.len(), 5);
        assert_eq!(batch.to_mutations(), sample());
        let reversed: Vec<_> = batch.iter().rev().map(MutationRef::to_mutation).collect();
        let mut expected = sample();
        expected.reverse();
        assert_eq!(reversed, expected);
    }

    #[test]
    fn append_moves_everything_and_keeps_offsets() {
        let mut a = Batch::from(sample());
        let mut b = Batch::from(sample());
        a.append(&mut b);
        assert!(b.is_empty());
        let mut twice = sample();
        twice.extend(sample());
        assert_eq!(a.to_mutations(), twice);
        b.put(Table::Meta, "k", b"v");
        assert_eq!(b.to_mutations().len(), 1);
    }

    #[test]
    fn clear_keeps_capacity_and_a_cleared_batch_reuses_it() {
        let mut a = Batch::from(sample());
        let capacity = (a.keys.capacity(), a.values.capacity(), a.ops.capacity());
        a.clear();
        assert!(a.is_empty());
        assert!(a.keys.is_empty() && a.values.is_empty());
        for m in sample() {
            a.push(m.as_ref());
        }
        assert_eq!(
            (a.keys.capacity(), a.values.capacity(), a.ops.capacity()),
            capacity
        );
        assert_eq!(a.to_mutations(), sample());
    }

    #[test]
    fn a_value_that_fails_to_encode_leaves_nothing() {
        let mut a = Batch::from(sample());
        let failed = a.try_put_row(
            Table::Meta,
            |k| k.push_str("half"),
            |v| {
                v.extend_from_slice(b"{\"partial");
                Err("cannot encode")
            },
        );
        assert_eq!(failed, Err("cannot encode"));
        assert_eq!(a.to_mutations(), sample());
        a.try_put_row::<()>(
            Table::Meta,
            |k| k.push_str("k"),
            |v| {
                v.push(b'1');
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(a.len(), 6);
    }

    #[derive(Debug, Clone)]
    enum Step {
        Push(Mutation),
        /// A put whose value fails to encode after writing `len` bytes of it.
        FailedPut(String, usize),
        /// Appends a batch of these mutations.
        Append(Vec<Mutation>),
        Clear,
    }

    fn mutation() -> impl Strategy<Value = Mutation> {
        let table = prop::sample::select(Table::ALL.to_vec());
        let key = "[a-c/é]{0,6}";
        let value = prop::collection::vec(any::<u8>(), 0..12);
        prop_oneof![
            (table.clone(), key, value.clone()).prop_map(|(table, key, value)| Mutation::Put {
                table,
                key,
                value
            }),
            (table.clone(), key).prop_map(|(table, key)| Mutation::Delete { table, key }),
            (table.clone(), key, value, any::<u64>()).prop_map(
                |(table, key, value, expires_at)| Mutation::PutExpiring {
                    table,
                    key,
                    value,
                    expires_at
                }
            ),
            (table, any::<u64>()).prop_map(|(table, up_to)| Mutation::Expire { table, up_to }),
        ]
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            6 => mutation().prop_map(Step::Push),
            1 => ("[a-c]{0,4}", 0usize..8).prop_map(|(k, n)| Step::FailedPut(k, n)),
            2 => prop::collection::vec(mutation(), 0..5).prop_map(Step::Append),
            1 => Just(Step::Clear),
        ]
    }

    proptest! {
        /// A batch hands back exactly the mutations written to it, in order, whatever mix of
        /// pushes, failed encodes, appends and clears built it: the `Vec<Mutation>` it replaced.
        #[test]
        fn behaves_as_a_list_of_owned_mutations(steps in prop::collection::vec(step(), 0..40)) {
            let mut batch = Batch::new();
            let mut model: Vec<Mutation> = Vec::new();
            for step in steps {
                match step {
                    Step::Push(m) => {
                        batch.push(m.as_ref());
                        model.push(m);
                    }
                    Step::FailedPut(key, len) => {
                        let failed = batch.try_put_row(Table::Meta, |k| k.push_str(&key), |v| {
                            v.extend(std::iter::repeat_n(b'x', len));
                            Err(())
                        });
                        prop_assert!(failed.is_err());
                    }
                    Step::Append(ms) => {
                        let mut other = Batch::from(ms.clone());
                        batch.append(&mut other);
                        prop_assert!(other.is_empty());
                        model.extend(ms);
                    }
                    Step::Clear => {
                        batch.clear();
                        model.clear();
                    }
                }
                prop_assert_eq!(batch.len(), model.len());
                prop_assert_eq!(batch.to_mutations(), model.clone());
                prop_assert!(batch.iter().rev().eq(model.iter().rev().map(Mutation::as_ref)));
                prop_assert_eq!(&batch, &Batch::from(model.clone()));
            }
        }
    }

    #[test]
    fn spares_are_few_small_and_empty_and_reset_lets_big_buffers_go() {
        let mut spares = Spares::default();
        let mut big = Batch::new();
        big.put(Table::Meta, "k", &vec![b'x'; Spares::MAX_BYTES + 1]);
        spares.give(big.clone());
        assert!(spares.0.is_empty(), "a large batch is not kept");
        for _ in 0..Spares::MAX + 2 {
            let mut small = Batch::new();
            small.put(Table::Meta, "k", b"v");
            spares.give(small);
        }
        assert_eq!(spares.0.len(), Spares::MAX);
        assert!(spares.0.iter().all(Batch::is_empty));
        let taken = spares.take();
        assert_eq!(spares.0.len(), Spares::MAX - 1, "a new batch takes a spare");
        assert!(taken.is_empty() && taken.capacity_bytes() > 0);
        big.reset();
        assert!(big.is_empty());
        assert_eq!(
            big.capacity_bytes(),
            0,
            "buffers beyond the bound are let go"
        );
        let mut small = Batch::from(vec![Mutation::Delete {
            table: Table::Meta,
            key: "k".into(),
        }]);
        let capacity = small.capacity_bytes();
        small.reset();
        assert!(small.is_empty());
        assert_eq!(small.capacity_bytes(), capacity, "small buffers are kept");
    }

    #[test]
    fn debug_shows_no_value() {
        let mut a = Batch::new();
        a.put(Table::Messages, "u/c/1", b"secret payload");
        let shown = format!("{a:?}");
        assert!(!shown.contains("secret"), "{shown}");
        assert!(shown.contains("messages/u/c/1 (14 B)"), "{shown}");
    }
}
