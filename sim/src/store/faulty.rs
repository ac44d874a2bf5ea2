//! The store a relay opens in the simulator ([`FaultyStore`]): the run's memory or SQLite
//! store behind the faults its [`StoreCtl`] arms (commits failed, crashed after or during
//! the batch, fenced; loads and keyed reads failed while down or when armed), recording what
//! was committed and checking every load against the model of it (see the parent module).

use std::collections::BTreeMap;

use relay_core::store::{
    Batch, Expiries, MemoryStore, MutationRef, Rows, Snapshot, SqliteStore, Store, StoreError,
    StoreRead, Table,
};

use super::cluster::ShardFence;
use super::{CrashRequest, StoreCtl};
use crate::time::sim_ms;

/// The first difference between two snapshots (table, key), or `None`.
fn first_difference(want: &Snapshot, got: &Snapshot) -> Option<String> {
    let empty = BTreeMap::new();
    for table in Table::ALL {
        let w = want.get(&table).unwrap_or(&empty);
        let g = got.get(&table).unwrap_or(&empty);
        if w == g {
            continue;
        }
        for (k, v) in w {
            match g.get(k) {
                None => return Some(format!("{table:?} row {k} committed but missing")),
                Some(x) if x != v => return Some(format!("{table:?} row {k} differs")),
                Some(_) => {}
            }
        }
        for k in g.keys() {
            if !w.contains_key(k) {
                return Some(format!("{table:?} row {k} present but never committed"));
            }
        }
    }
    None
}

/// The backend behind the wrapper.
#[derive(Debug)]
pub(super) enum Backend {
    Memory(MemoryStore),
    Sqlite(SqliteStore),
}

/// A [`Store`] that injects the faults its [`StoreCtl`] arms and records what was committed.
#[derive(Debug)]
pub struct FaultyStore {
    pub(super) backend: Backend,
    pub(super) ctl: StoreCtl,
    /// Failover: the (host, epoch) this store was opened for.
    pub(super) fence: Option<(String, u64)>,
    /// Cluster: the (node, shard, epoch) this store was opened for.
    pub(super) shard_fence: Option<ShardFence>,
    /// The shard of a sharded relay this store was opened for (its faults of one shard).
    pub(super) shard: Option<u16>,
}

impl FaultyStore {
    /// The host that opened this store: a cluster node, or a failover relay.
    fn writer(&self) -> Option<String> {
        let node = self.shard_fence.as_ref().map(|f| f.host.clone());
        node.or_else(|| self.fence.as_ref().map(|(host, _)| host.clone()))
    }

    fn inner(&mut self) -> &mut dyn Store {
        match &mut self.backend {
            Backend::Memory(s) => s,
            Backend::Sqlite(s) => s,
        }
    }
}

impl FaultyStore {
    /// A load (all tables, or the eager ones), checked against the model of what was committed.
    fn checked_load(&mut self, eager: bool) -> Result<Snapshot, StoreError> {
        let ctl = self.ctl.clone();
        ctl.lock().fenced(self.fence.as_ref())?;
        ctl.lock().shard_fenced(self.shard_fence.as_ref(), false)?;
        if ctl.lock().is_down_for(self.shard) {
            ctl.lock().history.counts.failed_loads += 1;
            return Err(StoreError::Backend("injected: store down".into()));
        }
        let snapshot = if eager {
            self.inner().load_eager()?
        } else {
            self.inner().load()?
        };
        let mut c = ctl.lock();
        c.history.counts.loads += 1;
        if let Some(model) = &mut c.model {
            let want = if eager {
                model.load_eager()
            } else {
                model.load()
            }?;
            if let Some(diff) = first_difference(&want, &snapshot) {
                c.history.load_mismatches.push((sim_ms(), diff));
            }
        }
        Ok(snapshot)
    }
}

impl Store for FaultyStore {
    fn load(&mut self) -> Result<Snapshot, StoreError> {
        self.checked_load(false)
    }

    fn load_eager(&mut self) -> Result<Snapshot, StoreError> {
        self.checked_load(true)
    }

    fn reader(&mut self) -> Result<Box<dyn StoreRead>, StoreError> {
        Ok(Box::new(FaultyReader {
            inner: self.inner().reader()?,
            ctl: self.ctl.clone(),
            shard: self.shard,
        }))
    }

    fn commit(&mut self, batch: &Batch) -> Result<(), StoreError> {
        let ctl = self.ctl.clone();
        let writer = self.writer();
        {
            let mut c = ctl.lock();
            c.fenced(self.fence.as_ref())?;
            c.shard_fenced(self.shard_fence.as_ref(), true)?;
            if c.powered_off {
                let at = sim_ms();
                c.history.commits_while_off.push(at);
            }
            if c.is_down_for(self.shard) {
                c.history.counts.failed += 1;
                return Err(StoreError::Backend("injected: store down".into()));
            }
            if c.take_shard_failure(self.shard) {
                c.history.counts.failed += 1;
                return Err(StoreError::Backend("injected: shard commit failed".into()));
            }
            if c.fail_next > 0 {
                c.fail_next -= 1;
                c.history.counts.failed += 1;
                return Err(StoreError::Backend("injected: commit failed".into()));
            }
            if let Some(restart_after_ms) = c.crash_mid_batch.take() {
                c.history.counts.failed += 1;
                c.down_until_restart = true;
                c.crash_request = Some(CrashRequest {
                    restart_after_ms,
                    host: writer,
                });
                return Err(StoreError::Backend("injected: power lost mid-batch".into()));
            }
        }
        self.inner().commit(batch)?;
        let mut c = ctl.lock();
        c.history.counts.commits += 1;
        c.record(batch);
        if let Some((_, restart_after_ms)) = c
            .crash_after_commit_of
            .filter(|&(table, _)| writes_to(batch, table))
        {
            c.crash_after_commit_of = None;
            c.down_until_restart = true;
            c.crash_request = Some(CrashRequest {
                restart_after_ms,
                host: writer,
            });
            return Err(StoreError::Backend(
                "injected: power lost after the commit".into(),
            ));
        }
        if let Some(restart_after_ms) = c.crash_after_commit.take() {
            // Durable, but the process dies before it can release anything.
            c.down_until_restart = true;
            c.crash_request = Some(CrashRequest {
                restart_after_ms,
                host: writer,
            });
            return Err(StoreError::Backend(
                "injected: power lost after the commit".into(),
            ));
        }
        Ok(())
    }
}

/// Whether `batch` writes a row of `table`.
fn writes_to(batch: &Batch, table: Table) -> bool {
    batch.into_iter().any(|m| match m {
        MutationRef::Put { table: t, .. } | MutationRef::PutExpiring { table: t, .. } => t == table,
        MutationRef::Delete { .. } | MutationRef::Expire { .. } => false,
    })
}

/// The keyed reads of a [`FaultyStore`]: they fail while the store is down or when a read
/// fault is armed, and are counted.
#[derive(Debug)]
struct FaultyReader {
    inner: Box<dyn StoreRead>,
    ctl: StoreCtl,
    shard: Option<u16>,
}

impl FaultyReader {
    fn read<T>(
        &mut self,
        table: Table,
        read: impl FnOnce(&mut dyn StoreRead) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        {
            let mut c = self.ctl.lock();
            if c.is_down_for(self.shard) {
                c.history.counts.failed_reads += 1;
                return Err(StoreError::Backend("injected: store down".into()));
            }
            if c.fail_reads > 0 && c.fail_reads_of.is_none_or(|t| t == table) {
                c.fail_reads -= 1;
                c.history.counts.failed_reads += 1;
                return Err(StoreError::Backend("injected: read failed".into()));
            }
        }
        let result = read(&mut *self.inner);
        if result.is_ok() {
            self.ctl.lock().history.counts.reads += 1;
        }
        result
    }
}

impl StoreRead for FaultyReader {
    fn get(&mut self, table: Table, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.read(table, |r| r.get(table, key))
    }
    fn scan_prefix(&mut self, table: Table, prefix: &str) -> Result<Rows, StoreError> {
        self.read(table, |r| r.scan_prefix(table, prefix))
    }
    fn scan_prefix_max(
        &mut self,
        table: Table,
        prefix: &str,
        max: usize,
    ) -> Result<Rows, StoreError> {
        self.read(table, |r| r.scan_prefix_max(table, prefix, max))
    }
    fn scan_range(
        &mut self,
        table: Table,
        start: &str,
        end: &str,
        max: usize,
    ) -> Result<Rows, StoreError> {
        self.read(table, |r| r.scan_range(table, start, end, max))
    }
    fn scan_page(
        &mut self,
        table: Table,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Rows, StoreError> {
        self.read(table, |r| r.scan_page(table, after, limit))
    }
    fn latest_expiries(&mut self, table: Table, window: u64) -> Result<Expiries, StoreError> {
        self.read(table, |r| r.latest_expiries(table, window))
    }
    fn next_expiry(&mut self, table: Table, after: u64) -> Result<Option<u64>, StoreError> {
        self.read(table, |r| r.next_expiry(table, after))
    }
    fn expired(
        &mut self,
        table: Table,
        up_to: u64,
        after: Option<(u64, &str)>,
        limit: usize,
    ) -> Result<Expiries, StoreError> {
        self.read(table, |r| r.expired(table, up_to, after, limit))
    }
}
