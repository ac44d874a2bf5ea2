//! The relay's store in the simulator: a fault-injecting [`Store`] wrapper around a
//! [`MemoryStore`] or an [`SqliteStore`] on a temporary file, and the history of what was
//! committed (for the storage oracles).
//!
//! ```text
//!   relay host ── opener() ──► Relay::with_blobs(config, Box<FaultyStore>, ..)
//!                                   │ commit(batch) / load()
//!                                   ▼
//!                          FaultyStore ── StoreCtl (shared with the runner) ──┐
//!                                   │                                           │ arm faults,
//!                                   ▼                                           │ read history,
//!                   MemoryStore (shared)  |  SqliteStore::open(tmp file)        │ crash requests
//! ```
//!
//! Faults (armed by the runner from the fault plan):
//! * **fail** the next `n` commits (nothing applied; the relay fail-stops and the shell
//!   rebuilds it from the store); the first of them, like a crashing one below, first waits
//!   [`FAULTED_COMMIT_DELAY_MS`] in the committer, so batches are in flight behind it;
//! * **down**: every commit, load and keyed read fails until a simulated time (the rebuild
//!   keeps failing and is retried);
//! * **fail reads**: the next `n` keyed reads
//!   ([`StoreRead`](relay_core::store::StoreRead): an account, a conversation's tombstones, a
//!   queue, the next expiry), of one table or any, fail; nothing is changed, the input that
//!   needed the read is refused;
//! * **crash after commit**: the next commit is applied durably, then reported failed (so
//!   the relay releases none of its outputs) and the store goes down until the runner has
//!   powered the relay off and on again (a crash between commit and send);
//! * **crash mid-batch**: the next commit is not applied, the store goes down, and the relay
//!   is powered off (a crash during a batch: an atomic store leaves nothing of it).
//!
//! * **read latency**: every read the relay makes ahead of a parked frame waits a time drawn
//!   from the run's seed before it runs ([`StoreCtl::read_delay`], handed to the server as
//!   its `ReadMode::Task` delay): up to the run's slowest read ([`READ_DELAY_MAX_MS`] picks
//!   it), so reads finish out of order and a slow one holds its frame while others pass.
//!
//! * **slow commit**: the next commit waits a while before it is applied. `Store::commit` is
//!   synchronous and simulated time only advances between turmoil steps, so the wait happens
//!   in the relay's committer task ([`StoreCtl::commit_delay`], handed to the server as its
//!   `CommitMode::Task` delay), before it calls `commit`: the relay keeps handling inputs
//!   meanwhile, with that batch and the ones behind it in flight.
//!
//! **Failover** (the `failover` fault kind, see `super::failover`): the store is the database
//! two relays share. It keeps a lease (holder, expiry in simulated ms) and the fencing epoch,
//! which every leadership win increments; a store opened by a leader with
//! [`SimStore::open_fenced`] checks, in the same step as the write, that its epoch is still
//! the current one, and refuses with [`StoreError::Fenced`] otherwise (loads too). A frozen
//! host's lease calls go unanswered; a powered-off host's lease lapses (it never resigns).
//!
//! History (`history`): what every commit wrote, for the storage oracles; for SQLite also a
//! model of the committed content that every `load` must return exactly (every table, every
//! row).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use relay_core::store::{
    Batch, MemoryStore, Snapshot, SqliteStore, Store, StoreError, Table, WriteGroup,
};

use crate::faults::StoreKind;
use crate::seeds::splitmix64;
use crate::time::sim_ms;

mod cluster;
mod faulty;
mod history;

pub use self::cluster::{Beat, ClusterRecord, ForcedMove, Freed};
use self::cluster::{Cluster, ShardFence};
use self::faulty::Backend;
pub use self::faulty::FaultyStore;
pub use self::history::{CommittedMessage, Counts, History, QueueLedger};

/// How long a commit hit by an injected failure or crash waits before it is applied (or
/// not), in ms: the relay keeps handling inputs meanwhile, so the fault lands with batches
/// in flight behind that commit (they fail with it, or die with the process).
pub const FAULTED_COMMIT_DELAY_MS: u64 = 250;

/// The slowest read of a run is one of these, in ms, drawn from its seed: none waits, a
/// database round trip (reads overtake each other), a busy disk, a read that holds its frame
/// (and its connection's frames behind it) for a fifth of a second while everyone else is
/// served.
pub const READ_DELAY_MAX_MS: [u64; 4] = [0, 2, 20, 200];

/// A power-off the store asks the runner for (crash after commit / mid-batch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrashRequest {
    /// Delay of the restart, in ms.
    pub restart_after_ms: u64,
    /// The host whose commit asked for it: the cluster node or the failover relay that
    /// opened the store (`None`: a relay of one host).
    pub host: Option<String>,
}

#[derive(Debug, Default)]
struct FaultState {
    fail_next: u32,
    fail_reads: u32,
    /// Only reads of this table fail (any when `None`).
    fail_reads_of: Option<Table>,
    down_until_ms: Option<u64>,
    down_until_restart: bool,
    crash_after_commit: Option<u64>,
    crash_mid_batch: Option<u64>,
    crash_request: Option<CrashRequest>,
    /// Ms the next commit waits before it is applied (0: none).
    stall_next_ms: u64,
    /// Simulated ms until which the commit under way waits (what it took of `stall_next_ms`).
    stalled_until_ms: u64,
    powered_off: bool,
    history: History,
    /// SQLite: the committed content as a model, every committed batch applied in order to a
    /// [`MemoryStore`] (memory: the store is its own model).
    model: Option<MemoryStore>,
    /// Failover topology: the leadership lease and the fencing epoch.
    lease: Lease,
    /// The relay's read latencies: the slowest, and the state of their draw (splitmix64).
    read_delay_max_ms: u64,
    read_delay_state: u64,
    /// Reads the relay made ahead of a parked frame, and how many waited.
    reads_ahead: u64,
    reads_delayed: u64,
    /// A sharded relay: faults of one shard's store alone, by shard.
    shards: BTreeMap<u16, ShardFaults>,
    /// Power off after the next commit that writes a row of this table (restart delay).
    crash_after_commit_of: Option<(Table, u64)>,
    /// Cluster topology: nodes, shard owners and epochs.
    cluster: Cluster,
}

/// Faults of one shard's store alone: what a sharded relay whose shards keep their stores
/// apart meets when one of them fails (the other shards commit on).
#[derive(Debug, Default)]
struct ShardFaults {
    /// The shard's next commits that fail.
    fail_next: u32,
    /// The shard's commits, loads and reads fail until then (simulated ms).
    down_until_ms: Option<u64>,
    /// Ms the shard's next commit waits before it is applied (0: none).
    stall_next_ms: u64,
}

/// The leadership lease of the failover topology (see the module docs).
#[derive(Debug, Default)]
struct Lease {
    holder: Option<String>,
    /// The current epoch (0: nobody ever led).
    epoch: u64,
    until_ms: u64,
    /// Hosts whose process is frozen: their lease calls go unanswered.
    frozen: BTreeSet<String>,
    /// Hosts powered off: their runtime is dropped without resigning.
    dead: BTreeSet<String>,
    /// Planted (test-only): commits and loads are not checked against the epoch.
    unfenced: bool,
}

/// The answer to a lease renewal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Renewal {
    /// Still the leader, until `now + lease`.
    Renewed,
    /// No answer (the host is frozen; it learns nothing and tries again).
    Unanswered,
    /// The term is over (the lease lapsed and another relay took over, or it resigned).
    Lost(String),
}

/// The runner's handle on the store faults and history (clones share them).
#[derive(Debug, Clone, Default)]
pub struct StoreCtl {
    inner: Arc<Mutex<FaultState>>,
}

impl StoreCtl {
    fn lock(&self) -> MutexGuard<'_, FaultState> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The next `n` commits fail.
    pub fn fail_commits(&self, n: u32) {
        let mut c = self.lock();
        c.fail_next += n;
        c.stall_next_ms = c.stall_next_ms.max(FAULTED_COMMIT_DELAY_MS);
    }

    /// The next `n` keyed reads fail (of `table` only, when given).
    pub fn fail_reads(&self, n: u32, table: Option<Table>) {
        let mut c = self.lock();
        c.fail_reads += n;
        c.fail_reads_of = table;
    }

    /// Keyed reads failed so far (injected failures and reads while the store was down).
    pub fn failed_reads(&self) -> u64 {
        self.lock().history.counts.failed_reads
    }

    /// The next keyed read of `table` fails, unless failing reads are armed already (a fault
    /// of the plan not yet met): `false` then, and nothing changed.
    pub fn fail_one_read_if_none_armed(&self, table: Table) -> bool {
        let mut c = self.lock();
        if c.fail_reads > 0 {
            return false;
        }
        c.fail_reads = 1;
        c.fail_reads_of = Some(table);
        true
    }

    /// The next `n` commits of shard `shard`'s store fail (the other shards' commit on).
    pub fn fail_shard_commits(&self, shard: u16, n: u32) {
        let mut c = self.lock();
        c.shards.entry(shard).or_default().fail_next += n;
    }

    /// Every commit, load and read of shard `shard`'s store fails until simulated
    /// `until_ms` (the other shards' go on).
    pub fn shard_down_until(&self, shard: u16, until_ms: u64) {
        let mut c = self.lock();
        let f = c.shards.entry(shard).or_default();
        f.down_until_ms = Some(f.down_until_ms.map_or(until_ms, |u| u.max(until_ms)));
    }

    /// The next commit that writes a row of `table` is durable, then fails, and the relay is
    /// powered off (e.g. an owner's hand-off row written and not yet applied, or an apply
    /// durable and not yet acknowledged).
    pub fn crash_after_commit_of(&self, table: Table, restart_after_ms: u64) {
        self.lock().crash_after_commit_of = Some((table, restart_after_ms));
    }

    /// Every commit and load fails until simulated `until_ms`.
    pub fn down_until(&self, until_ms: u64) {
        let mut c = self.lock();
        c.down_until_ms = Some(c.down_until_ms.map_or(until_ms, |u| u.max(until_ms)));
    }

    /// Seeds the relay's read latencies: each read waits up to `max_ms`, drawn from `seed`.
    pub fn seed_read_delays(&self, seed: u64, max_ms: u64) {
        let mut c = self.lock();
        c.read_delay_state = seed;
        c.read_delay_max_ms = max_ms;
    }

    /// How long the next read ahead waits before it runs, in ms (the relay's read task asks
    /// before each): three in four within a twentieth of the slowest, the rest up to it.
    pub fn read_delay(&self) -> u64 {
        let mut c = self.lock();
        c.reads_ahead += 1;
        if c.read_delay_max_ms == 0 {
            return 0;
        }
        let z = splitmix64(&mut c.read_delay_state);
        let max = c.read_delay_max_ms;
        let cap = if z.is_multiple_of(4) {
            max
        } else {
            (max / 20).max(1)
        };
        let ms = (z >> 2) % (cap + 1);
        if ms > 0 {
            c.reads_delayed += 1;
        }
        ms
    }

    /// Reads the relay made ahead of parked frames, and how many of them waited.
    pub fn reads_ahead(&self) -> (u64, u64) {
        let c = self.lock();
        (c.reads_ahead, c.reads_delayed)
    }

    /// The relay's next commit waits `ms` before it is applied.
    pub fn stall_next_commit(&self, ms: u64) {
        let mut c = self.lock();
        c.stall_next_ms = c.stall_next_ms.max(ms);
    }

    /// The next commit of shard `shard`'s core waits `ms` before it is applied (the other
    /// shards' commit on).
    pub fn stall_shard_commit(&self, shard: u16, ms: u64) {
        let mut c = self.lock();
        let f = c.shards.entry(shard).or_default();
        f.stall_next_ms = f.stall_next_ms.max(ms);
    }

    /// The wait armed for the next commit of shard `shard`'s core, once (what the relay's
    /// committer asks before each commit; 0: none): a wait armed for whichever core commits
    /// next, or one armed for that shard.
    pub fn commit_delay(&self, shard: u16) -> u64 {
        let mut c = self.lock();
        let own = c
            .shards
            .get_mut(&shard)
            .map_or(0, |f| std::mem::take(&mut f.stall_next_ms));
        let ms = std::mem::take(&mut c.stall_next_ms).max(own);
        if ms > 0 {
            c.stalled_until_ms = c.stalled_until_ms.max(sim_ms() + ms);
        }
        ms
    }

    /// Whether a commit wait is armed or under way: the relay releases nothing of the stalled
    /// batch or of the ones after it until it ends.
    pub fn stalled(&self) -> bool {
        let c = self.lock();
        c.stall_next_ms > 0
            || c.shards.values().any(|f| f.stall_next_ms > 0)
            || sim_ms() < c.stalled_until_ms
    }

    /// The next commit is durable, then fails, and the relay is powered off.
    pub fn crash_after_commit(&self, restart_after_ms: u64) {
        let mut c = self.lock();
        c.crash_after_commit = Some(restart_after_ms);
        c.stall_next_ms = c.stall_next_ms.max(FAULTED_COMMIT_DELAY_MS);
    }

    /// The next commit is not applied and the relay is powered off.
    pub fn crash_mid_batch(&self, restart_after_ms: u64) {
        let mut c = self.lock();
        c.crash_mid_batch = Some(restart_after_ms);
        c.stall_next_ms = c.stall_next_ms.max(FAULTED_COMMIT_DELAY_MS);
    }

    /// A power-off the store asked for since the last call.
    pub fn take_crash_request(&self) -> Option<CrashRequest> {
        self.lock().crash_request.take()
    }

    /// The runner powered the relay off (`true`) or on again (`false`); powering on ends a
    /// crash's store outage.
    pub fn set_powered_off(&self, off: bool) {
        let mut c = self.lock();
        c.powered_off = off;
        if !off {
            c.down_until_restart = false;
        }
    }

    /// Heals: no armed faults, store up.
    pub fn heal(&self) {
        let mut c = self.lock();
        c.fail_next = 0;
        c.fail_reads = 0;
        c.fail_reads_of = None;
        c.stall_next_ms = 0;
        c.down_until_ms = None;
        c.crash_after_commit = None;
        c.crash_mid_batch = None;
        c.shards.clear();
        c.crash_after_commit_of = None;
    }

    /// A copy of the history.
    pub fn history(&self) -> History {
        self.lock().history.clone()
    }

    /// Failover: `host` campaigns; it wins when nobody holds a live lease (the epoch moves
    /// on). `None`: not now (someone leads, or `host` is frozen).
    pub fn try_lead(&self, host: &str, lease_ms: u64) -> Option<u64> {
        let now = sim_ms();
        let mut c = self.lock();
        let l = &mut c.lease;
        if l.frozen.contains(host) || l.dead.contains(host) {
            return None;
        }
        if l.holder.is_some() && now < l.until_ms {
            return None;
        }
        l.holder = Some(host.to_owned());
        l.epoch += 1;
        l.until_ms = now + lease_ms;
        let epoch = l.epoch;
        c.history.terms.push((now, host.to_owned(), epoch));
        Some(epoch)
    }

    /// Failover: the leader of `epoch` renews its lease.
    pub fn renew(&self, host: &str, epoch: u64, lease_ms: u64) -> Renewal {
        let now = sim_ms();
        let mut c = self.lock();
        let l = &mut c.lease;
        if l.frozen.contains(host) {
            return Renewal::Unanswered;
        }
        if l.epoch != epoch || l.holder.as_deref() != Some(host) {
            return Renewal::Lost(format!(
                "epoch {epoch} is over (the current one is {})",
                l.epoch
            ));
        }
        // Also when the lease lapsed but nobody took over yet: the epoch is still this
        // leader's, so what it committed meanwhile is safe.
        l.until_ms = now + lease_ms;
        Renewal::Renewed
    }

    /// Failover: the leader of `epoch` steps down (its term ended or its server stopped). A
    /// powered-off host never resigns: its lease lapses.
    pub fn resign(&self, host: &str, epoch: u64) {
        let mut c = self.lock();
        let l = &mut c.lease;
        if !l.dead.contains(host) && l.epoch == epoch && l.holder.as_deref() == Some(host) {
            l.holder = None;
        }
    }

    /// Failover: where the load balancer sends new connections (the lease holder, unless it
    /// powered off: an instant health check; a frozen one still gets them).
    pub fn leader(&self) -> Option<String> {
        let c = self.lock();
        c.lease.holder.clone().filter(|h| !c.lease.dead.contains(h))
    }

    /// Failover: the holder of the lease, live or lapsed (the relay a crash fault hits).
    pub fn holder(&self) -> Option<String> {
        self.lock().lease.holder.clone()
    }

    /// Failover: `host`'s process freezes (`true`) or resumes, at `now` (the runner's simulated ms).
    pub fn set_frozen(&self, host: &str, frozen: bool, now: u64) {
        let mut c = self.lock();
        let changed = if frozen {
            c.lease.frozen.insert(host.to_owned())
        } else {
            c.lease.frozen.remove(host)
        };
        if changed {
            c.cluster.trouble(host, frozen, now);
        }
    }

    /// Failover: `host` powers off (`true`) or on. A relay that dies ends its store's crash
    /// outage (the database itself is fine; the standby may commit). `now`: the runner's simulated ms.
    pub fn set_dead(&self, host: &str, dead: bool, now: u64) {
        let mut c = self.lock();
        let changed = if dead {
            c.down_until_restart = false;
            c.lease.dead.insert(host.to_owned())
        } else {
            c.lease.dead.remove(host)
        };
        if changed {
            c.cluster.trouble(host, dead, now);
        }
    }

    /// Planted (test-only): the store stops checking epochs.
    pub fn set_unfenced(&self) {
        self.lock().lease.unfenced = true;
    }
}

impl FaultState {
    fn is_down(&self) -> bool {
        self.down_until_restart || self.down_until_ms.is_some_and(|u| sim_ms() < u)
    }

    /// Whether the store is down for `shard` (the whole store, or that shard's alone).
    fn is_down_for(&self, shard: Option<u16>) -> bool {
        self.is_down()
            || shard
                .and_then(|s| self.shards.get(&s))
                .and_then(|f| f.down_until_ms)
                .is_some_and(|u| sim_ms() < u)
    }

    /// Takes one of `shard`'s armed commit failures, if it has one.
    fn take_shard_failure(&mut self, shard: Option<u16>) -> bool {
        match shard.and_then(|s| self.shards.get_mut(&s)) {
            Some(f) if f.fail_next > 0 => {
                f.fail_next -= 1;
                true
            }
            _ => false,
        }
    }

    /// A cluster node's shard store's fence (see `cluster`), its refusals counted.
    fn shard_fenced(&mut self, fence: Option<&ShardFence>, commit: bool) -> Result<(), StoreError> {
        let Some(fence) = fence else {
            return Ok(());
        };
        let checked = self.cluster.fence(fence, commit);
        if matches!(checked, Err(StoreError::Fenced { .. })) {
            self.history.counts.fenced += 1;
        }
        checked
    }

    /// The fence: `Err` when a store opened for `fence` (host, epoch) may no longer write.
    fn fenced(&mut self, fence: Option<&(String, u64)>) -> Result<(), StoreError> {
        let Some((host, epoch)) = fence else {
            return Ok(());
        };
        if self.lease.dead.contains(host) {
            self.history.commits_while_off.push(sim_ms());
        }
        if self.lease.unfenced || self.lease.epoch == *epoch {
            return Ok(());
        }
        self.history.counts.fenced += 1;
        Err(StoreError::Fenced { epoch: *epoch })
    }

    fn record(&mut self, batch: &Batch) {
        self.history.record(batch, sim_ms());
        if let Some(model) = &mut self.model {
            // The SQLite commit of the same batch succeeded, so the model's cannot fail.
            let _ = model.commit(batch);
        }
    }
}

/// The relay's durable store for one run, and how to open it (again).
#[derive(Debug, Clone)]
pub struct SimStore {
    kind: StoreKind,
    memory: MemoryStore,
    path: Option<Arc<TempPath>>,
    /// The group in which the SQLite stores opened here commit (one per core of a sharded
    /// relay, as `relay --data --shards` opens them).
    group: WriteGroup,
    ctl: StoreCtl,
}

/// A temporary SQLite database (and its WAL files), removed when the last handle goes.
#[derive(Debug)]
struct TempPath(PathBuf);

impl Drop for TempPath {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut p = self.0.clone().into_os_string();
            p.push(suffix);
            let _ = std::fs::remove_file(PathBuf::from(p));
        }
    }
}

impl SimStore {
    /// A fresh store of `kind`; SQLite goes to a temporary file (on `/dev/shm` when it
    /// exists: a tmpfs makes its `fsync`s cheap, and the crash model is the process's, not
    /// the disk's).
    pub fn new(kind: StoreKind) -> std::io::Result<Self> {
        let ctl = StoreCtl::default();
        let path = match kind {
            StoreKind::Memory => None,
            StoreKind::Sqlite => {
                let dir = ["/dev/shm"]
                    .into_iter()
                    .map(PathBuf::from)
                    .find(|d| d.is_dir())
                    .unwrap_or_else(std::env::temp_dir);
                let file = tempfile::Builder::new()
                    .prefix("sim-relay-")
                    .suffix(".sqlite3")
                    .tempfile_in(dir)?;
                let (_, path) = file.keep().map_err(|e| e.error)?;
                ctl.lock().model = Some(MemoryStore::new());
                Some(Arc::new(TempPath(path)))
            }
        };
        Ok(Self {
            kind,
            memory: MemoryStore::new(),
            path,
            group: WriteGroup::default(),
            ctl,
        })
    }

    /// The fault and history handle.
    pub fn ctl(&self) -> &StoreCtl {
        &self.ctl
    }

    /// Which backend.
    pub fn kind(&self) -> StoreKind {
        self.kind
    }

    /// Opens the store (again) behind a fault-injecting wrapper: the same memory store, or a
    /// new connection to the same SQLite file.
    pub fn open(&self) -> Result<FaultyStore, StoreError> {
        let backend = match &self.path {
            None => Backend::Memory(self.memory.clone()),
            Some(path) => Backend::Sqlite(SqliteStore::open_in_group(&path.0, self.group.clone())?),
        };
        Ok(FaultyStore {
            backend,
            ctl: self.ctl.clone(),
            fence: None,
            shard_fence: None,
            shard: None,
        })
    }

    /// [`open`](Self::open) for shard `shard` of a sharded relay: the faults armed for that
    /// shard alone hit this store too.
    pub fn open_shard(&self, shard: u16) -> Result<FaultyStore, StoreError> {
        let mut store = self.open()?;
        store.shard = Some(shard);
        Ok(store)
    }

    /// Opens the store for the leader of `epoch` on `host` (failover): every commit and load
    /// first checks that `epoch` is still the current one.
    pub fn open_fenced(&self, host: &str, epoch: u64) -> Result<FaultyStore, StoreError> {
        let mut store = self.open()?;
        store.fence = Some((host.to_owned(), epoch));
        Ok(store)
    }

    /// The committed content, read through a separate handle (no faults, not recorded).
    pub fn snapshot(&self) -> Result<Snapshot, StoreError> {
        match &self.path {
            None => self.memory.clone().load(),
            Some(path) => SqliteStore::open(&path.0)?.load(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::StoreCtl;

    /// A stall aimed at one shard delays that shard's next commit only; one aimed at whichever
    /// core commits next is taken by the first to commit.
    #[test]
    fn a_stall_aimed_at_one_shard_delays_its_next_commit_only() {
        let ctl = StoreCtl::default();
        ctl.stall_shard_commit(1, 500);
        assert!(ctl.stalled());
        assert_eq!(ctl.commit_delay(0), 0, "the other shard commits on");
        assert_eq!(ctl.commit_delay(1), 500);
        assert_eq!(ctl.commit_delay(1), 0, "once");
        ctl.stall_next_commit(300);
        assert_eq!(ctl.commit_delay(0), 300);
        assert_eq!(ctl.commit_delay(1), 0);
    }
}
