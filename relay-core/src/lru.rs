//! A cache of values by key over the store, bounded in estimated bytes, least recently used
//! out first, whose entries can be pinned.
//!
//! The relay's caches of lazily read state (a conversation's tombstones, a recipient's queue of a
//! conversation) share its one rule: **only clean entries are evicted**. A write pins what it
//! changed until the batch that carries it is durable ([`Lru::write`], [`Lru::move_written`],
//! [`Lru::unpin`]), so an entry read again from the store after an eviction holds everything
//! the relay acknowledged. Entries can also be pinned for as long as something uses them
//! ([`Lru::pin`], [`Lru::release`]): a synced recipient's queues. The bound can be exceeded by
//! what is pinned, never by more.
//!
//! Only unpinned entries are in the eviction order, so [`Lru::evict`] costs the entries it
//! evicts, however many are pinned; an entry that becomes unpinned counts as just used.

use std::collections::BTreeMap;

/// An estimate of the heap a key or value takes.
pub(crate) trait Weigh {
    fn weight(&self) -> usize;
}

/// Emptied batch lists kept for reuse (more than the batches a shell keeps in flight).
const SPARE_LISTS: usize = 8;

#[derive(Debug)]
struct Entry<V> {
    value: V,
    /// The key's and the value's weight, as last counted.
    weight: usize,
    /// Its place in [`Lru::order`] while unpinned.
    tick: u64,
    /// Writes not yet durable plus holds: while non-zero the entry is not evicted.
    pins: u32,
}

/// Values by key, within `bound` bytes once what is pinned is released.
#[derive(Debug)]
pub(crate) struct Lru<K, V> {
    entries: BTreeMap<K, Entry<V>>,
    /// tick of last use -> key, oldest first; unpinned entries only.
    order: BTreeMap<u64, K>,
    tick: u64,
    bytes: usize,
    bound: usize,
    /// Keys written since the last [`Lru::move_written`] (one per write).
    written: Vec<K>,
    /// Emptied lists of durable batches, reused by [`Lru::move_written`] (no allocation per
    /// batch once as many exist as batches are in flight).
    spare: Vec<Vec<K>>,
    /// Entries evicted since the cache was built.
    evictions: u64,
}

impl<K: Ord + Clone + Weigh, V: Weigh> Lru<K, V> {
    /// An empty cache of at most `bound` bytes.
    pub(crate) fn new(bound: usize) -> Self {
        Self {
            entries: BTreeMap::new(),
            order: BTreeMap::new(),
            tick: 0,
            bytes: 0,
            bound,
            written: Vec::new(),
            spare: Vec::new(),
            evictions: 0,
        }
    }

    pub(crate) fn contains(&self, key: &K) -> bool {
        self.entries.contains_key(key)
    }

    pub(crate) fn get(&self, key: &K) -> Option<&V> {
        self.entries.get(key).map(|e| &e.value)
    }

    /// Adds `value` as read from the store (or replaces the entry, keeping its pins) and makes
    /// it the most recently used. Nothing is evicted before the caller's [`Lru::evict`].
    pub(crate) fn insert(&mut self, key: K, value: V) {
        let weight = key.weight() + value.weight();
        let pins = match self.entries.remove(&key) {
            Some(old) => {
                self.bytes -= old.weight;
                if old.pins == 0 {
                    self.order.remove(&old.tick);
                }
                old.pins
            }
            None => 0,
        };
        self.bytes += weight;
        let tick = if pins == 0 { self.next_tick(&key) } else { 0 };
        self.entries.insert(
            key,
            Entry {
                value,
                weight,
                tick,
                pins,
            },
        );
    }

    /// Changes the entry of `key` with a change whose mutation is in the batch being built
    /// (reweighed): the entry is pinned until [`Lru::move_written`] hands the write to that
    /// batch and [`Lru::unpin`] (or [`Lru::unpin_written`]) reports it durable. `None` when it
    /// is not cached.
    pub(crate) fn write<R>(&mut self, key: &K, f: impl FnOnce(&mut V) -> R) -> Option<R> {
        let e = self.entries.get_mut(key)?;
        let r = f(&mut e.value);
        reweigh(&mut self.bytes, key, e);
        if e.pins == 0 {
            self.order.remove(&e.tick);
            e.tick = 0;
        }
        e.pins += 1;
        self.written.push(key.clone());
        Some(r)
    }

    /// Holds the entry of `key` in memory until a matching [`Lru::release`].
    pub(crate) fn pin(&mut self, key: &K) {
        if let Some(e) = self.entries.get_mut(key) {
            if e.pins == 0 {
                self.order.remove(&e.tick);
                e.tick = 0;
            }
            e.pins += 1;
        }
    }

    /// Undoes one [`Lru::pin`]; the last one makes the entry the most recently used.
    pub(crate) fn release(&mut self, key: &K) {
        let Some(e) = self.entries.get_mut(key) else {
            return;
        };
        if e.pins == 0 {
            debug_assert!(false, "released an entry that was not pinned");
            return;
        }
        e.pins -= 1;
        if e.pins == 0 {
            self.tick += 1;
            e.tick = self.tick;
            self.order.insert(self.tick, key.clone());
        }
    }

    /// Moves the keys written since the last move into `batch` (one per write): the relay keeps
    /// them with the batch that carries the writes and [`unpin`](Lru::unpin)s them once it is
    /// durable. (The list keeps its capacity: no allocation per input.)
    pub(crate) fn move_written(&mut self, batch: &mut Vec<K>) {
        if batch.capacity() == 0
            && !self.written.is_empty()
            && let Some(spare) = self.spare.pop()
        {
            *batch = spare;
        }
        batch.append(&mut self.written);
    }

    /// The writes since the last [`move_written`](Lru::move_written) are durable (an input
    /// committed on its own).
    pub(crate) fn unpin_written(&mut self) {
        // The list keeps its capacity (no allocation per input).
        let mut written = std::mem::take(&mut self.written);
        for key in &written {
            self.release(key);
        }
        written.clear();
        self.written = written;
    }

    /// The writes `written` (a batch's, from [`move_written`](Lru::move_written)) are durable.
    /// The list is kept for reuse.
    pub(crate) fn unpin(&mut self, mut written: Vec<K>) {
        for key in &written {
            self.release(key);
        }
        if written.capacity() > 0 && self.spare.len() < SPARE_LISTS {
            written.clear();
            self.spare.push(written);
        }
    }

    /// Changes the entry of `key` with what the store already holds (not a write: nothing is
    /// pinned), reweighing it. `None` when it is not cached.
    pub(crate) fn update<R>(&mut self, key: &K, f: impl FnOnce(&mut V) -> R) -> Option<R> {
        let e = self.entries.get_mut(key)?;
        let r = f(&mut e.value);
        reweigh(&mut self.bytes, key, e);
        Some(r)
    }

    /// Changes every entry in memory (e.g. drops what expired), reweighing each.
    pub(crate) fn update_all(&mut self, mut f: impl FnMut(&K, &mut V)) {
        for (key, e) in &mut self.entries {
            f(key, &mut e.value);
            reweigh(&mut self.bytes, key, e);
        }
    }

    /// Evicts the least recently used unpinned entries until the estimate is within the bound
    /// (the relay calls it at the end of every input, after its commit, and when a batch is
    /// reported durable).
    pub(crate) fn evict(&mut self) {
        self.evict_with(|_, _| {});
    }

    /// [`Lru::evict`], handing each evicted entry to `gone` (a cache that indexes its entries
    /// drops them from its indexes).
    pub(crate) fn evict_with(&mut self, mut gone: impl FnMut(K, V)) {
        while self.bytes > self.bound {
            let Some((_, key)) = self.order.pop_first() else {
                return; // what is left is pinned
            };
            if let Some(e) = self.entries.remove(&key) {
                self.bytes -= e.weight;
                self.evictions += 1;
                gone(key, e.value);
            }
        }
    }

    /// The value of `key`, read: the entry becomes the most recently used, unless it is already
    /// among the more recently used half of the eviction order (then it stays where it is: a
    /// hot entry read on every message is not moved each time, and is still far from the
    /// eviction end). Pinned entries are not in the eviction order: they count as used when
    /// their last pin goes.
    pub(crate) fn read(&mut self, key: &K) -> Option<&V> {
        let e = self.entries.get_mut(key)?;
        let half = u64::try_from(self.order.len() / 2).unwrap_or(u64::MAX);
        if e.pins == 0 && self.tick - e.tick >= half.max(1) {
            self.order.remove(&e.tick);
            self.tick += 1;
            e.tick = self.tick;
            self.order.insert(self.tick, key.clone());
        }
        Some(&e.value)
    }

    /// The bound, in estimated bytes.
    pub(crate) fn bound(&self) -> usize {
        self.bound
    }

    /// The estimated bytes of what is held.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// The entries held.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Entries evicted since the cache was built.
    pub(crate) fn evictions(&self) -> u64 {
        self.evictions
    }

    /// Every value held, by key.
    pub(crate) fn values(&self) -> impl Iterator<Item = &V> {
        self.entries.values().map(|e| &e.value)
    }

    fn next_tick(&mut self, key: &K) -> u64 {
        self.tick += 1;
        self.order.insert(self.tick, key.clone());
        self.tick
    }
}

/// Counts the entry of `key` at its current weight in `bytes` (the cache's estimate).
fn reweigh<K: Weigh, V: Weigh>(bytes: &mut usize, key: &K, e: &mut Entry<V>) {
    let weight = key.weight() + e.value.weight();
    *bytes = *bytes + weight - e.weight;
    e.weight = weight;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use proptest::prelude::*;

    use super::*;

    impl Weigh for u8 {
        fn weight(&self) -> usize {
            1
        }
    }

    impl Weigh for Vec<u8> {
        fn weight(&self) -> usize {
            self.len()
        }
    }

    #[test]
    fn the_least_recent_clean_entry_goes_first_and_pinned_ones_stay() {
        let mut c: Lru<u8, Vec<u8>> = Lru::new(7);
        c.insert(1, vec![0; 2]);
        c.insert(2, vec![0; 2]);
        c.write(&1, |v| v.push(0)).unwrap(); // 1 is pinned, 4 bytes with its key
        assert_eq!(c.bytes(), 7);
        c.insert(3, vec![0; 1]);
        c.evict();
        assert!(
            c.contains(&1) && !c.contains(&2) && c.contains(&3),
            "2 was the least recent clean entry"
        );
        let mut batch = Vec::new();
        c.move_written(&mut batch);
        assert_eq!(batch, vec![1]);
        c.insert(4, vec![0; 2]);
        c.evict();
        assert!(
            c.contains(&1) && !c.contains(&3) && c.contains(&4),
            "1 still pinned"
        );
        c.unpin(batch);
        c.insert(5, vec![0; 2]);
        c.evict();
        assert!(
            c.contains(&1) && !c.contains(&4) && c.contains(&5),
            "1 counts as used when it became clean, after 4"
        );
        assert_eq!(c.evictions(), 3);
    }

    #[test]
    fn a_read_saves_an_old_entry_from_eviction_and_leaves_a_recent_one_in_place() {
        let mut c: Lru<u8, Vec<u8>> = Lru::new(8);
        for k in 1..=4 {
            c.insert(k, vec![0]);
        }
        c.read(&1); // the oldest of four: moved to the newest end
        c.read(&4); // the newest but one now: left where it is
        for (new, gone) in [(5, 2), (6, 3), (7, 4), (8, 1)] {
            c.insert(new, vec![0]);
            c.evict();
            assert!(
                !c.contains(&gone) && c.contains(&new),
                "{gone} goes before {new}"
            );
        }
    }

    #[test]
    fn a_zero_bound_keeps_only_what_is_pinned_or_held() {
        let mut c: Lru<u8, Vec<u8>> = Lru::new(0);
        c.insert(1, vec![0]);
        c.insert(2, vec![0]);
        c.pin(&2);
        c.write(&1, |v| v.push(1)).unwrap();
        c.evict();
        assert_eq!(c.len(), 2);
        c.unpin_written();
        c.evict();
        assert!(!c.contains(&1) && c.contains(&2));
        c.release(&2);
        c.evict();
        assert_eq!((c.len(), c.bytes()), (0, 0));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u8, u8),
        Write(u8),
        Pin(u8),
        Release(u8),
        Durable,
        Evict,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0u8..8, 0u8..6).prop_map(|(k, n)| Op::Insert(k, n)),
            2 => (0u8..8).prop_map(Op::Write),
            1 => (0u8..8).prop_map(Op::Pin),
            1 => (0u8..8).prop_map(Op::Release),
            1 => Just(Op::Durable),
            2 => Just(Op::Evict),
        ]
    }

    proptest! {
        /// Against a model that keeps every entry with its pins: the cache holds a subset of
        /// the model with the same values, never drops a pinned entry, and after an eviction
        /// is within its bound unless only pinned entries are left.
        #[test]
        fn never_drops_a_pinned_entry(bound in 0usize..20, ops in proptest::collection::vec(op(), 0..60)) {
            let mut c: Lru<u8, Vec<u8>> = Lru::new(bound);
            let mut model: BTreeMap<u8, (Vec<u8>, u32)> = BTreeMap::new();
            let mut written = Vec::new();
            for op in ops {
                match op {
                    Op::Insert(k, n) => {
                        let pins = model.get(&k).map_or(0, |(_, p)| *p);
                        c.insert(k, vec![n; usize::from(n)]);
                        model.insert(k, (vec![n; usize::from(n)], pins));
                    }
                    Op::Write(k) => {
                        let done = c.write(&k, |v| v.push(9)).is_some();
                        prop_assert_eq!(done, model.contains_key(&k));
                        if let Some((v, p)) = model.get_mut(&k) {
                            v.push(9);
                            *p += 1;
                            written.push(k);
                        }
                    }
                    Op::Pin(k) => {
                        c.pin(&k);
                        if let Some((_, p)) = model.get_mut(&k) {
                            *p += 1;
                        }
                    }
                    Op::Release(k) => {
                        if model.get(&k).is_some_and(|(_, p)| *p > 0 ) && !written.contains(&k) {
                            c.release(&k);
                            if let Some((_, p)) = model.get_mut(&k) {
                                *p -= 1;
                            }
                        }
                    }
                    Op::Durable => {
                        c.unpin_written();
                        for k in written.drain(..) {
                            if let Some((_, p)) = model.get_mut(&k) {
                                *p -= 1;
                            }
                        }
                    }
                    Op::Evict => {
                        c.evict();
                        let pinned: usize = model.iter().filter(|(_, (_, p))| *p > 0)
                            .map(|(_, (v, _))| 1 + v.len()).sum();
                        prop_assert!(c.bytes() <= bound.max(pinned));
                    }
                }
                model.retain(|k, (_, p)| *p > 0 || c.contains(k));
                for (k, (v, p)) in &model {
                    prop_assert!(*p == 0 || c.contains(k), "pinned {} was dropped", k);
                    if let Some(got) = c.get(k) {
                        prop_assert_eq!(got, v);
                    }
                }
                prop_assert_eq!(c.len(), model.len());
                prop_assert_eq!(c.bytes(), c.values().map(|v| 1 + v.len()).sum::<usize>());
            }
        }
    }
}
