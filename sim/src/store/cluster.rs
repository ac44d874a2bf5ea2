//! The cluster topology's membership tables in the shared store (the `cluster` fault kind,
//! see `crate::cluster`): what `relay_pg::join` keeps in PostgreSQL, kept here under the
//! store's lock, so that each call is one transaction on the database's clock (simulated ms).
//!
//! * **Nodes** hold a lease ([`StoreCtl::cluster_join`], renewed by
//!   [`StoreCtl::cluster_heartbeat`]); a lease that lapsed is never renewed: the node hears
//!   that its membership is over and joins again.
//! * **Shards** have an owner and an epoch. Every heartbeat runs the coordinator's round: the
//!   shards of nodes whose lease lapsed go at once to the live node with the fewest (the
//!   epoch moves on: a forced move), and while one node has two more than another, one of its
//!   shards is marked leaving; its owner stops the shard's core and hands it over
//!   ([`StoreCtl::cluster_hand_over`]), and the next owner gets it under the next epoch.
//! * **The fence**: a shard's store opened for (node, shard, epoch) checks, in the same step
//!   as each commit and load, that the epoch is still the shard's, and refuses with
//!   `StoreError::Fenced` otherwise. A node cut from the database gets no answer to its
//!   heartbeats and a backend error from its stores.
//!
//! What the oracles read: every commit of a shard with its writer and epoch, every shard
//! opened, every forced move with the lapse it followed, and what each node was last told it
//! owns.

use std::collections::{BTreeMap, BTreeSet};

use relay_core::store::StoreError;

use super::{FaultyStore, SimStore, StoreCtl};
use crate::time::sim_ms;

/// The fence of a store opened by a cluster node: which node, shard and epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ShardFence {
    pub(super) host: String,
    pub(super) shard: u16,
    pub(super) epoch: u64,
}

/// One row of the shard table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct ShardRow {
    owner: Option<String>,
    epoch: u64,
    /// Planned to move: its owner stops it and hands it over.
    leaving: bool,
}

/// Why a node's shards were freed all at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freed {
    /// Its lease lapsed (it died, froze or was cut off).
    Lapsed,
    /// It left on purpose (a planned stop).
    Left,
}

/// A forced move: the shard of a node whose lease lapsed or that left, given to another at
/// once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForcedMove {
    /// The shard.
    pub shard: u16,
    /// Its new epoch.
    pub epoch: u64,
    /// The node that lost it.
    pub from: String,
    /// Why it lost it.
    pub cause: Freed,
    /// When it was freed: when the lease lapsed, or when the node left (simulated ms).
    pub freed_ms: u64,
    /// The node it went to.
    pub to: String,
    /// When it moved.
    pub at_ms: u64,
}

/// What the oracles read of the cluster (a copy: [`StoreCtl::cluster_record`]).
#[derive(Debug, Clone, Default)]
pub struct ClusterRecord {
    /// The cluster's shard count (0: not a cluster run).
    pub shards: u16,
    /// Every commit of a shard's store: `(ms, shard, epoch, writer)`, once per distinct
    /// (shard, epoch, writer) (the first commit of each).
    pub writers: Vec<(u64, u16, u64, String)>,
    /// Commits accepted under an epoch that was not the shard's: `(ms, shard, epoch, the
    /// shard's epoch then, writer)`.
    pub superseded: Vec<(u64, u16, u64, u64, String)>,
    /// Every shard store opened for a core: `(ms, shard, epoch, node)`.
    pub opened: Vec<(u64, u16, u64, String)>,
    /// Every forced move.
    pub forced: Vec<ForcedMove>,
    /// Planned moves done (handed over).
    pub handed_over: u64,
    /// Joins.
    pub joins: Vec<(u64, String)>,
    /// What each node was last told it owns, shard → epoch (a node whose membership ended
    /// owns nothing).
    pub told: BTreeMap<String, BTreeMap<u16, u64>>,
    /// The shard table at the end: shard → (owner, epoch).
    pub owners: BTreeMap<u16, (Option<String>, u64)>,
    /// Nodes with a live lease at the end.
    pub live: BTreeSet<String>,
    /// When a node could not serve: `(node, from, until)` (`None`: to the end), for a power-off,
    /// a freeze or a cut from the database.
    pub troubles: Vec<(String, u64, Option<u64>)>,
    /// The last change of the shard table (an owner or an epoch), in simulated ms.
    pub changed_ms: u64,
}

impl ClusterRecord {
    /// When forced move `m`'s shard was served again: the first core opened for it under the
    /// move's epoch or a later one.
    pub fn served_at(&self, m: &ForcedMove) -> Option<u64> {
        self.opened
            .iter()
            .filter(|(_, shard, epoch, _)| *shard == m.shard && *epoch >= m.epoch)
            .map(|(at, ..)| *at)
            .min()
    }

    /// Shard moves so far (forced and handed over).
    pub fn moves(&self) -> u64 {
        self.forced.len() as u64 + self.handed_over
    }
}

/// The cluster's tables and what was recorded of them.
#[derive(Debug, Default)]
pub(super) struct Cluster {
    /// Node → its lease's end (simulated ms).
    nodes: BTreeMap<String, u64>,
    rows: Vec<ShardRow>,
    /// Nodes cut from the database: their calls go unanswered, their stores fail.
    cut: BTreeSet<String>,
    record: ClusterRecord,
    /// (shard, epoch, writer) seen, for `record.writers`.
    writers_seen: BTreeSet<(u16, u64, String)>,
    /// Planted (test-only): a renewal of a lapsed lease is taken, and the node's shards that
    /// moved meanwhile are written back to it under their current epochs.
    renew_lapsed: bool,
    /// Planted (test-only): shard stores check no epoch.
    unfenced: bool,
}

/// The answer to a heartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Beat {
    /// Still a member: the shards it owns, shard → (epoch, leaving).
    Owns(BTreeMap<u16, (u64, bool)>),
    /// No answer (the node is cut from the database; it tries again).
    Unanswered,
    /// The node's process is stopped (a freeze): its heartbeat does not run at all, so it
    /// neither renews nor notices that its lease runs out.
    Paused,
    /// The membership is over, with why.
    Lost(String),
}

impl Cluster {
    /// `host` stops (`true`) or starts again being able to serve at `now` (recorded for the
    /// `takeover` oracle).
    pub(super) fn trouble(&mut self, host: &str, on: bool, now: u64) {
        let t = &mut self.record.troubles;
        if on {
            t.push((host.to_owned(), now, None));
        } else if let Some(open) = t
            .iter_mut()
            .rev()
            .find(|(h, _, until)| h == host && until.is_none())
        {
            open.2 = Some(now);
        }
    }

    /// The shards `host` owns, recorded as what it was last told.
    fn tell(&mut self, host: &str) -> BTreeMap<u16, (u64, bool)> {
        let owned = self.owned(host);
        self.record.told.insert(
            host.to_owned(),
            owned.iter().map(|(s, (e, _))| (*s, *e)).collect(),
        );
        owned
    }

    /// The shards `host` owns.
    fn owned(&self, host: &str) -> BTreeMap<u16, (u64, bool)> {
        self.rows
            .iter()
            .enumerate()
            .filter(|(_, r)| r.owner.as_deref() == Some(host))
            .filter_map(|(s, r)| Some((u16::try_from(s).ok()?, (r.epoch, r.leaving))))
            .collect()
    }

    fn count(&self, host: &str) -> usize {
        self.rows
            .iter()
            .filter(|r| r.owner.as_deref() == Some(host))
            .count()
    }

    /// The live node with the fewest shards (ties: by name), but `not`.
    fn least_loaded(&self, not: Option<&str>) -> Option<String> {
        self.nodes
            .keys()
            .filter(|n| Some(n.as_str()) != not)
            .min_by_key(|n| self.count(n))
            .cloned()
    }

    /// The coordinator's round at `now`: lapsed nodes out and their shards given away,
    /// ownerless shards given, one planned move when the spread is uneven.
    fn coordinate(&mut self, now: u64) {
        let lapsed: Vec<(String, u64)> = self
            .nodes
            .iter()
            .filter(|(_, until)| **until <= now)
            .map(|(n, until)| (n.clone(), *until))
            .collect();
        for (node, until) in &lapsed {
            self.nodes.remove(node);
            for shard in 0..self.rows.len() {
                if self.rows[shard].owner.as_deref() != Some(node.as_str()) {
                    continue;
                }
                self.free(shard, node, (Freed::Lapsed, *until), now);
            }
        }
        for shard in 0..self.rows.len() {
            if self.rows[shard].owner.is_none() {
                self.assign(shard);
            }
        }
        self.plan_move();
    }

    /// Takes `shard` from `node` (for `cause`, at `freed_ms`) and gives it to the least
    /// loaded live node at once, recorded as a forced move.
    fn free(&mut self, shard: usize, node: &str, (cause, freed_ms): (Freed, u64), now: u64) {
        self.rows[shard].owner = None;
        if let Some(to) = self.assign(shard) {
            let epoch = self.rows[shard].epoch;
            self.record.forced.push(ForcedMove {
                shard: u16::try_from(shard).unwrap_or(u16::MAX),
                epoch,
                from: node.to_owned(),
                cause,
                freed_ms,
                to,
                at_ms: now,
            });
        }
    }

    /// Gives ownerless `shard` to the least loaded live node under the next epoch.
    fn assign(&mut self, shard: usize) -> Option<String> {
        let to = self.least_loaded(None)?;
        let row = &mut self.rows[shard];
        row.owner = Some(to.clone());
        row.epoch += 1;
        row.leaving = false;
        self.record.changed_ms = sim_ms();
        Some(to)
    }

    /// Marks one shard of the busiest node leaving when it has two more than the idlest and
    /// no move is under way.
    fn plan_move(&mut self) {
        if self.rows.iter().any(|r| r.leaving) {
            return;
        }
        let counts: Vec<(String, usize)> = self
            .nodes
            .keys()
            .map(|n| (n.clone(), self.count(n)))
            .collect();
        let (Some(max), Some(min)) = (
            counts.iter().max_by_key(|(_, c)| *c),
            counts.iter().min_by_key(|(_, c)| *c),
        ) else {
            return;
        };
        if max.1 < min.1 + 2 {
            return;
        }
        if let Some(row) = self
            .rows
            .iter_mut()
            .rev()
            .find(|r| r.owner.as_deref() == Some(max.0.as_str()))
        {
            row.leaving = true;
        }
    }

    /// The fence of one commit or load: `Err` when the node is cut off or its epoch is over
    /// (planted: a commit under an epoch that is over is taken, and recorded).
    pub(super) fn fence(&mut self, fence: &ShardFence, commit: bool) -> Result<(), StoreError> {
        if self.cut.contains(&fence.host) {
            return Err(StoreError::Backend(
                "injected: the node is cut from the database".into(),
            ));
        }
        let current = self
            .rows
            .get(usize::from(fence.shard))
            .map_or(0, |r| r.epoch);
        if current != fence.epoch && !self.unfenced {
            return Err(StoreError::Fenced { epoch: fence.epoch });
        }
        if !commit {
            return Ok(());
        }
        if current != fence.epoch {
            self.record.superseded.push((
                sim_ms(),
                fence.shard,
                fence.epoch,
                current,
                fence.host.clone(),
            ));
        }
        if self
            .writers_seen
            .insert((fence.shard, fence.epoch, fence.host.clone()))
        {
            self.record
                .writers
                .push((sim_ms(), fence.shard, fence.epoch, fence.host.clone()));
        }
        Ok(())
    }
}

impl StoreCtl {
    /// The cluster topology: the store keeps the membership of a cluster of `shards` shards.
    pub fn cluster_enable(&self, shards: u16) {
        let mut c = self.lock();
        c.cluster.rows = vec![ShardRow::default(); usize::from(shards)];
        c.cluster.record.shards = shards;
    }

    /// Planted (test-only): a renewal takes a lapsed lease, and writes the node's last shards
    /// back to it under their current epochs.
    pub fn cluster_renew_lapsed(&self) {
        self.lock().cluster.renew_lapsed = true;
    }

    /// Planted (test-only): shard stores check no epoch; a commit under an epoch that is
    /// over is taken (and recorded).
    pub fn cluster_unfenced(&self) {
        self.lock().cluster.unfenced = true;
    }

    /// `host` joins for `lease_ms`: `None` while it cannot (frozen, powered off, cut from the
    /// database, or its previous life's lease has not lapsed yet).
    pub fn cluster_join(&self, host: &str, lease_ms: u64) -> Option<BTreeMap<u16, (u64, bool)>> {
        let now = sim_ms();
        let mut c = self.lock();
        if c.lease.frozen.contains(host) || c.lease.dead.contains(host) {
            return None;
        }
        let k = &mut c.cluster;
        if k.cut.contains(host) || k.nodes.get(host).is_some_and(|until| *until > now) {
            return None;
        }
        k.nodes.insert(host.to_owned(), now + lease_ms);
        k.record.joins.push((now, host.to_owned()));
        k.coordinate(now);
        let owned = k.tell(host);
        Some(owned)
    }

    /// `host`'s heartbeat: renews its lease and runs the coordinator's round.
    pub fn cluster_heartbeat(&self, host: &str, lease_ms: u64) -> Beat {
        let now = sim_ms();
        let mut c = self.lock();
        if c.lease.frozen.contains(host) {
            return Beat::Paused;
        }
        let k = &mut c.cluster;
        if k.cut.contains(host) {
            return Beat::Unanswered;
        }
        let live = k.nodes.get(host).is_some_and(|until| *until > now);
        if !live && !k.renew_lapsed {
            k.coordinate(now);
            k.record.told.insert(host.to_owned(), BTreeMap::new());
            return Beat::Lost("the node's lease had lapsed".into());
        }
        if !live {
            // Planted: the renewal takes a lapsed lease, and writes the node's last shards
            // back to it under their current epochs.
            let mine: Vec<u16> = k
                .record
                .told
                .get(host)
                .map(|t| t.keys().copied().collect())
                .unwrap_or_default();
            for shard in mine {
                if let Some(row) = k.rows.get_mut(usize::from(shard)) {
                    row.owner = Some(host.to_owned());
                }
            }
        }
        k.nodes.insert(host.to_owned(), now + lease_ms);
        k.coordinate(now);
        let owned = k.tell(host);
        Beat::Owns(owned)
    }

    /// `host` hands over `shard` of `epoch` (its core stopped): the next owner gets it under
    /// the next epoch. Nothing when the shard is no longer `host`'s at that epoch.
    pub fn cluster_hand_over(&self, host: &str, shard: u16, epoch: u64) {
        let now = sim_ms();
        let mut c = self.lock();
        let k = &mut c.cluster;
        let Some(row) = k.rows.get(usize::from(shard)) else {
            return;
        };
        if row.owner.as_deref() != Some(host) || row.epoch != epoch || k.cut.contains(host) {
            return;
        }
        let to = k.least_loaded(Some(host));
        let row = &mut k.rows[usize::from(shard)];
        row.leaving = false;
        if let Some(to) = to {
            row.owner = Some(to);
            row.epoch += 1;
            k.record.handed_over += 1;
            k.record.changed_ms = now;
        }
        k.coordinate(now);
    }

    /// `host` leaves (its membership was dropped: its server stopped, or its heartbeat
    /// learned the membership was over): its shards go to the others at once. A powered-off
    /// host never leaves: its lease lapses.
    pub fn cluster_leave(&self, host: &str) {
        let now = sim_ms();
        let mut c = self.lock();
        if c.lease.dead.contains(host) || c.lease.frozen.contains(host) {
            return;
        }
        let k = &mut c.cluster;
        if k.cut.contains(host) || !k.nodes.contains_key(host) {
            return;
        }
        k.nodes.remove(host);
        for shard in 0..k.rows.len() {
            if k.rows[shard].owner.as_deref() == Some(host) {
                k.free(shard, host, (Freed::Left, now), now);
            }
        }
        k.record.told.insert(host.to_owned(), BTreeMap::new());
        k.coordinate(now);
    }

    /// Where each shard is served: its owner's host, for owners with a live lease.
    pub fn cluster_directory(&self) -> BTreeMap<u16, String> {
        let now = sim_ms();
        let c = self.lock();
        let k = &c.cluster;
        k.rows
            .iter()
            .enumerate()
            .filter_map(|(s, r)| {
                let owner = r.owner.as_ref()?;
                let live = k.nodes.get(owner).is_some_and(|u| *u > now);
                live.then(|| Some((u16::try_from(s).ok()?, owner.clone())))
                    .flatten()
            })
            .collect()
    }

    /// The nodes a load balancer sends clients to: live lease, not powered off.
    pub fn cluster_live(&self) -> Vec<String> {
        let now = sim_ms();
        let c = self.lock();
        c.cluster
            .nodes
            .iter()
            .filter(|(n, u)| **u > now && !c.lease.dead.contains(*n))
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// The node that owns the most shards (the one a node fault hits), among `up`.
    pub fn cluster_busiest(&self, up: &[String]) -> Option<String> {
        let c = self.lock();
        up.iter()
            .max_by_key(|n| c.cluster.count(n))
            .filter(|n| c.cluster.count(n) > 0)
            .cloned()
    }

    /// `host` was asked to leave (`true`: it cannot serve until it joins again) or may come
    /// back, at `now` (the runner's simulated ms), recorded for the `takeover` oracle.
    pub fn set_departed(&self, host: &str, departed: bool, now: u64) {
        self.lock().cluster.trouble(host, departed, now);
    }

    /// Every node reaches the database again (at `now`, the runner's simulated ms).
    pub fn cluster_heal(&self, now: u64) {
        let mut c = self.lock();
        for host in std::mem::take(&mut c.cluster.cut) {
            c.cluster.trouble(&host, false, now);
        }
    }

    /// `host` is cut from the database (`true`) or reaches it again, at `now` (the runner's
    /// simulated ms).
    pub fn set_cut(&self, host: &str, cut: bool, now: u64) {
        let mut c = self.lock();
        let changed = if cut {
            c.cluster.cut.insert(host.to_owned())
        } else {
            c.cluster.cut.remove(host)
        };
        if changed {
            c.cluster.trouble(host, cut, now);
        }
    }

    /// A store's shard was opened for a core.
    pub(super) fn cluster_opened(&self, fence: &ShardFence) {
        self.lock().cluster.record.opened.push((
            sim_ms(),
            fence.shard,
            fence.epoch,
            fence.host.clone(),
        ));
    }

    /// The cluster's shard count (0: not a cluster run).
    pub fn cluster_shards(&self) -> u16 {
        self.lock().cluster.record.shards
    }

    /// Shard moves so far (forced and handed over): what a drill's step must not overlap.
    pub fn cluster_moves(&self) -> u64 {
        self.lock().cluster.record.moves()
    }

    /// What the oracles read of the cluster.
    pub fn cluster_record(&self) -> ClusterRecord {
        let now = sim_ms();
        let c = self.lock();
        let k = &c.cluster;
        let mut record = k.record.clone();
        record.owners = k
            .rows
            .iter()
            .enumerate()
            .filter_map(|(s, r)| Some((u16::try_from(s).ok()?, (r.owner.clone(), r.epoch))))
            .collect();
        record.live = k
            .nodes
            .iter()
            .filter(|(_, u)| **u > now)
            .map(|(n, _)| n.clone())
            .collect();
        record
    }
}

impl SimStore {
    /// Opens shard `shard`'s store for the core a cluster node `host` runs under `epoch`:
    /// every commit and load first checks that `epoch` is still the shard's.
    pub fn open_cluster_shard(
        &self,
        host: &str,
        shard: u16,
        epoch: u64,
    ) -> Result<FaultyStore, StoreError> {
        let mut store = self.open_shard(shard)?;
        let fence = ShardFence {
            host: host.to_owned(),
            shard,
            epoch,
        };
        self.ctl.cluster_opened(&fence);
        store.shard_fence = Some(fence);
        Ok(store)
    }
}
