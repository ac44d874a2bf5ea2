//! In-memory store whose committed state survives a simulated crash.

use std::sync::{Arc, Mutex};

use super::{Batch, Mutation, Snapshot, Store, StoreError};

/// An in-memory [`Store`]. Cloning gives another handle to the **same** committed state, so a
/// test (or the simulator) can drop a `Relay`, keep a clone, and build a new `Relay` from it:
/// exactly the committed batches survive.
///
/// Faults can be injected with [`MemoryStore::fail_commits`] to exercise the fail-stop policy.
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug, Default)]
struct Inner {
    tables: Snapshot,
    fail_commits: u32,
    commits: u64,
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
        Ok(self.lock().tables.clone())
    }

    fn commit(&mut self, batch: Batch) -> Result<(), StoreError> {
        let mut inner = self.lock();
        if inner.fail_commits > 0 {
            inner.fail_commits -= 1;
            return Err(StoreError::Backend("injected commit failure".into()));
        }
        for m in batch {
            match m {
                Mutation::Put { table, key, value } => {
                    inner.tables.entry(table).or_default().insert(key, value);
                }
                Mutation::Delete { table, key } => {
                    if let Some(t) = inner.tables.get_mut(&table) {
                        t.remove(&key);
                        if t.is_empty() {
                            inner.tables.remove(&table);
                        }
                    }
                }
            }
        }
        inner.commits += 1;
        Ok(())
    }
}
