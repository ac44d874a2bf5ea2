//! In-memory store whose committed state survives a simulated crash.

use std::sync::{Arc, Mutex};

use std::collections::BTreeMap;

use super::{
    Batch, Expiries, MutationRef, Rows, Snapshot, Store, StoreError, StoreRead, Table, no_expiry,
};

/// An in-memory [`Store`]. Cloning gives another handle to the **same** committed state, so a
/// test (or the simulator) can drop a `Relay`, keep a clone, and build a new `Relay` from it:
/// exactly the committed batches survive.
///
/// Faults can be injected with [`MemoryStore::fail_commits`] to exercise the fail-stop policy,
/// and with [`MemoryStore::fail_reads`] for the keyed reads ([`StoreRead`]; the reader is
/// another handle to the same rows).
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Every committed row, with its expiry when it was put with one.
    tables: BTreeMap<Table, BTreeMap<String, Row>>,
    fail_commits: u32,
    fail_reads: u32,
    commits: u64,
}

/// A committed row.
#[derive(Debug, Clone)]
struct Row {
    value: Vec<u8>,
    expires_at: Option<u64>,
}

impl Inner {
    /// The committed content of the tables `keep` selects.
    fn snapshot(&self, keep: impl Fn(Table) -> bool) -> Snapshot {
        self.tables
            .iter()
            .filter(|(table, _)| keep(**table))
            .map(|(table, rows)| {
                let rows = rows
                    .iter()
                    .map(|(k, row)| (k.clone(), row.value.clone()))
                    .collect();
                (*table, rows)
            })
            .collect()
    }

    /// Writes a copy of the row; a row that exists keeps its key and its value's buffer.
    fn put(&mut self, table: Table, key: &str, value: &[u8], expires_at: Option<u64>) {
        let rows = self.tables.entry(table).or_default();
        match rows.get_mut(key) {
            Some(row) => {
                row.value.clear();
                row.value.extend_from_slice(value);
                row.expires_at = expires_at;
            }
            None => {
                let row = Row {
                    value: value.to_vec(),
                    expires_at,
                };
                rows.insert(key.to_owned(), row);
            }
        }
    }

    fn remove(&mut self, table: Table, key: &str) {
        if let Some(t) = self.tables.get_mut(&table) {
            t.remove(key);
            if t.is_empty() {
                self.tables.remove(&table);
            }
        }
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes the next `n` commits fail (nothing of them is applied).
    pub fn fail_commits(&self, n: u32) {
        self.lock().fail_commits = n;
    }

    /// Makes the next `n` keyed reads fail.
    pub fn fail_reads(&self, n: u32) {
        self.lock().fail_reads = n;
    }

    /// How many batches were committed successfully.
    pub fn commit_count(&self) -> u64 {
        self.lock().commits
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A poisoned lock only means another handle panicked mid-test; the data is still the
        // last committed state because `commit` cannot panic while it applies a batch.
        match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }
}

impl Store for MemoryStore {
    fn load(&mut self) -> Result<Snapshot, StoreError> {
        Ok(self.lock().snapshot(|_| true))
    }

    fn load_eager(&mut self) -> Result<Snapshot, StoreError> {
        Ok(self.lock().snapshot(|table| !table.is_lazy()))
    }

    fn commit(&mut self, batch: &Batch) -> Result<(), StoreError> {
        let mut inner = self.lock();
        if inner.fail_commits > 0 {
            inner.fail_commits -= 1;
            return Err(StoreError::Backend("injected commit failure".into()));
        }
        super::refuse_misplaced_expiry(batch)?;
        for m in batch {
            match m {
                MutationRef::Put { table, key, value } => inner.put(table, key, value, None),
                MutationRef::PutExpiring {
                    table,
                    key,
                    value,
                    expires_at,
                } => inner.put(table, key, value, Some(expires_at)),
                MutationRef::Delete { table, key } => inner.remove(table, key),
                MutationRef::Expire { table, up_to } => {
                    if let Some(rows) = inner.tables.get_mut(&table) {
                        rows.retain(|_, row| row.expires_at.is_none_or(|at| at > up_to));
                        if rows.is_empty() {
                            inner.tables.remove(&table);
                        }
                    }
                }
            }
        }
        inner.commits += 1;
        Ok(())
    }

    fn reader(&mut self) -> Result<Box<dyn StoreRead>, StoreError> {
        Ok(Box::new(self.clone()))
    }
}

impl MemoryStore {
    /// The store for one read: `Err` when a read fault is due.
    fn read(&self) -> Result<std::sync::MutexGuard<'_, Inner>, StoreError> {
        let mut inner = self.lock();
        if inner.fail_reads > 0 {
            inner.fail_reads -= 1;
            return Err(StoreError::Backend("injected read failure".into()));
        }
        Ok(inner)
    }
}

impl StoreRead for MemoryStore {
    fn get(&mut self, table: Table, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self
            .read()?
            .tables
            .get(&table)
            .and_then(|t| t.get(key))
            .map(|row| row.value.clone()))
    }

    fn scan_prefix(&mut self, table: Table, prefix: &str) -> Result<Rows, StoreError> {
        self.scan_prefix_max(table, prefix, usize::MAX)
    }

    fn scan_prefix_max(
        &mut self,
        table: Table,
        prefix: &str,
        max: usize,
    ) -> Result<Rows, StoreError> {
        let inner = self.read()?;
        let Some(rows) = inner.tables.get(&table) else {
            return Ok(Vec::new());
        };
        Ok(rows
            .range::<str, _>((
                std::ops::Bound::Included(prefix),
                std::ops::Bound::Unbounded,
            ))
            .take_while(|(k, _)| k.starts_with(prefix))
            .take(max)
            .map(|(k, row)| (k.clone(), row.value.clone()))
            .collect())
    }

    fn scan_range(
        &mut self,
        table: Table,
        start: &str,
        end: &str,
        max: usize,
    ) -> Result<Rows, StoreError> {
        let inner = self.read()?;
        let Some(rows) = inner.tables.get(&table) else {
            return Ok(Vec::new());
        };
        if start >= end {
            return Ok(Vec::new());
        }
        Ok(rows
            .range::<str, _>((
                std::ops::Bound::Included(start),
                std::ops::Bound::Excluded(end),
            ))
            .take(max)
            .map(|(k, row)| (k.clone(), row.value.clone()))
            .collect())
    }

    fn scan_page(
        &mut self,
        table: Table,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Rows, StoreError> {
        let inner = self.read()?;
        let Some(rows) = inner.tables.get(&table) else {
            return Ok(Vec::new());
        };
        let from = after.map_or(std::ops::Bound::Unbounded, std::ops::Bound::Excluded);
        Ok(rows
            .range::<str, _>((from, std::ops::Bound::Unbounded))
            .take(limit)
            .map(|(k, row)| (k.clone(), row.value.clone()))
            .collect())
    }

    fn latest_expiries(&mut self, table: Table, window: u64) -> Result<Expiries, StoreError> {
        if !table.has_expiry() {
            return Err(no_expiry(table));
        }
        let inner = self.read()?;
        let expiring = || {
            inner
                .tables
                .get(&table)
                .into_iter()
                .flatten()
                .filter_map(|(k, row)| Some((k, row.expires_at?)))
        };
        let Some(latest) = expiring().map(|(_, at)| at).max() else {
            return Ok(Vec::new());
        };
        let since = latest.saturating_sub(window);
        let mut out: Expiries = expiring()
            .filter(|(_, at)| *at >= since)
            .map(|(k, at)| (k.clone(), at))
            .collect();
        out.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
        Ok(out)
    }

    fn next_expiry(&mut self, table: Table, after: u64) -> Result<Option<u64>, StoreError> {
        if !table.has_expiry() {
            return Err(no_expiry(table));
        }
        let inner = self.read()?;
        Ok(inner
            .tables
            .get(&table)
            .into_iter()
            .flatten()
            .filter_map(|(_, row)| row.expires_at)
            .filter(|at| *at > after)
            .min())
    }

    fn expired(
        &mut self,
        table: Table,
        up_to: u64,
        after: Option<(u64, &str)>,
        limit: usize,
    ) -> Result<Expiries, StoreError> {
        if !table.has_expiry() {
            return Err(no_expiry(table));
        }
        let inner = self.read()?;
        let mut due: Vec<(u64, &str)> = inner
            .tables
            .get(&table)
            .into_iter()
            .flatten()
            .filter_map(|(k, row)| Some((row.expires_at?, k.as_str())))
            .filter(|&(at, k)| at <= up_to && after.is_none_or(|a| (at, k) > a))
            .collect();
        due.sort_unstable();
        Ok(due
            .into_iter()
            .take(limit)
            .map(|(at, k)| (k.to_owned(), at))
            .collect())
    }
}

/// A store that accepts every commit and keeps nothing; its reads find nothing, as in a store
/// that never received a commit. For measuring the relay's own cost (allocations, heap) without
/// a store's copies of the rows. Behind the `test-suite` feature: never a relay's real store.
#[cfg(any(test, feature = "test-suite"))]
#[derive(Debug, Default, Clone, Copy)]
pub struct NullStore;

#[cfg(any(test, feature = "test-suite"))]
impl Store for NullStore {
    fn load(&mut self) -> Result<Snapshot, StoreError> {
        Ok(Snapshot::new())
    }

    fn commit(&mut self, batch: &Batch) -> Result<(), StoreError> {
        super::refuse_misplaced_expiry(batch)
    }

    fn reader(&mut self) -> Result<Box<dyn StoreRead>, StoreError> {
        MemoryStore::new().reader()
    }
}
