//! The step loop of a run: the turmoil world plus the runner's bookkeeping ([`Sim`]), stepped
//! through setup, the traffic window with the fault plan, healing and the liveness phase.
//!
//! ```text
//! every step (TICK_MS of simulated time):
//!   turmoil step, then housekeeping (restarts, stall ends, thaws the runner scheduled;
//!   power-offs the store asked for)
//!   setup     : until every client is ready (or SETUP_BOUND_MS passed: a `setup` violation)
//!   traffic   : the plan's events as they fall due
//!   heal      : at the end of the window: every link, host and store fault undone
//!   final jump: FINAL_JUMP_BEFORE_END_MS before the end, the relay's clock jumps
//!   end       : LIVENESS_BOUND_MS after healing
//! ```
//!
//! **Crashes are power-offs**: before turmoil drops a host's runtime, every link *from* that
//! host is cut (and restored right after), so the FIN/RST segments its dropped sockets would
//! send never leave, and in-flight segments from it are lost. A crashed machine sends nothing;
//! and the order in which tokio drops the tasks (it depends on a process-global task id) can
//! no longer reach the network, so a run does not depend on what the process ran before
//! (runs can share a process, and a sweep runs seeds on threads).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::future::Future;
use std::time::Duration;

use super::Parts;
use crate::bounds::{
    FINAL_JUMP_BEFORE_END_MS, FINAL_JUMP_MS, LIVENESS_BOUND_MS, RELAY, RELAY_A, RELAY_B,
    TRAFFIC_WINDOW_MS,
};
use crate::faults::{FaultAction, FaultPlan, HostileAct};
use crate::market;
use crate::pushworld::PushKind;
use crate::scenario::ActionKind;
use crate::store::StoreCtl;
use crate::time::SkewClock;
use crate::trace::{Record, Trace};
use crate::transit::{CrossingFaults, CrossingOdds};
use crate::violation::{Oracle, Violation};
use crate::world::{RunnerRequest, Shared};
use seam::clock::OffsetClock;

/// Per-direction link state, as turmoil has it (so a power-off can restore it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Dir {
    #[default]
    Healthy,
    Held,
    Cut,
}

/// The fault state of every link the plan touched, plus what the runner itself holds.
#[derive(Debug, Default)]
struct Links {
    dirs: BTreeMap<(String, String), Dir>,
    /// Hosts currently powered off.
    down: BTreeSet<String>,
    /// Relay hosts frozen right now (failover): every link of theirs held.
    frozen: BTreeSet<String>,
}

impl Links {
    fn get(&self, from: &str, to: &str) -> Dir {
        self.dirs
            .get(&(from.to_owned(), to.to_owned()))
            .copied()
            .unwrap_or_default()
    }
    fn set(&mut self, from: &str, to: &str, d: Dir) {
        self.dirs.insert((from.to_owned(), to.to_owned()), d);
    }
    fn both(&mut self, a: &str, b: &str, d: Dir) {
        self.set(a, b, d);
        self.set(b, a, d);
    }
}

/// Something the runner itself scheduled.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Internal {
    Restart(String),
    /// A frozen relay host resumes (failover).
    Thaw(String),
    /// A cluster node cut from the database reaches it again.
    Reconnect(String),
    /// A cluster node that left may start again (it joins under load).
    Return(String),
    /// A cluster node cut from the load balancer reaches it again.
    Rejoin(String),
}

/// The turmoil world plus the runner's bookkeeping.
pub(super) struct Sim<'a> {
    sim: turmoil::Sim<'a>,
    /// Every host, in the order turmoil numbers them.
    hosts: Vec<String>,
    links: Links,
    relay_clock: OffsetClock,
    /// The clocks of each client host's apps (clock-skew faults).
    skews: BTreeMap<String, Vec<SkewClock>>,
    /// Every app's clock (the clients', the auditor's): a world jump moves them all.
    app_clocks: Vec<SkewClock>,
    store: StoreCtl,
    /// What happens to the crossings between the relay's cores (`handoff` faults).
    crossings: CrossingFaults,
    internal: BTreeMap<u64, Vec<Internal>>,
    trace: Trace,
    /// Where power-offs of the relay are recorded ([`World::relay_off_ms`](crate::world::World::relay_off_ms)).
    world: Shared,
    /// The plan's minimum link latency: a slow consumer's link is pinned to it (see
    /// [`FaultAction::Hostile`] in `apply`).
    steady_latency_ms: u64,
    /// The failover topology: `relay` is a load balancer in front of `relay-a` and `relay-b`
    /// (see [`crate::failover`]); a crash or restart of `relay` hits one of them.
    pub(super) failover: bool,
    /// The cluster topology (a `failover` world too: `relay` is the load balancer): three
    /// nodes (see [`crate::cluster`]); a crash, freeze or cut hits the busiest node.
    pub(super) cluster: bool,
    /// Relay hosts powered off by a crash of `relay` (failover), oldest first: a restart of
    /// `relay` starts the oldest.
    relay_down: VecDeque<String>,
    /// The cluster nodes asked to leave (their hosts shut their servers down).
    departures: crate::cluster::Departures,
}

impl Sim<'_> {
    /// Simulated ms since the run started.
    pub(super) fn now(&self) -> u64 {
        u64::try_from(self.sim.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Appends a note to the trace.
    pub(super) fn note(&self, text: String) {
        self.trace.push(Record::Note {
            t_ms: self.now(),
            text,
        });
    }

    fn schedule(&mut self, at: u64, what: Internal) {
        self.internal.entry(at).or_default().push(what);
    }

    /// The relay hosts behind the balancer (failover, cluster).
    fn nodes(&self) -> &'static [&'static str] {
        if self.cluster {
            &crate::cluster::NODES
        } else {
            &[RELAY_A, RELAY_B]
        }
    }

    /// Whether `host` is a relay host behind the balancer.
    fn is_node(&self, host: &str) -> bool {
        self.failover && self.nodes().contains(&host)
    }

    /// The relay host a fault of `relay` hits: the lease holder (failover) or the busiest
    /// node (cluster), among those up and not frozen; else the first such.
    fn target(&self) -> Option<String> {
        let up: Vec<String> = self
            .nodes()
            .iter()
            .map(|h| (*h).to_owned())
            .filter(|h| !self.links.down.contains(h) && !self.links.frozen.contains(h))
            .collect();
        let chosen = if self.cluster {
            self.store.cluster_busiest(&up)
        } else {
            self.store.holder().filter(|h| up.contains(h))
        };
        chosen.or_else(|| up.first().cloned())
    }

    /// Cuts every link from `host`, drops its runtime, restores the links. In the failover
    /// topology, `relay` means the active relay (the lease holder; else the first relay up);
    /// in the cluster topology, the busiest node.
    fn power_off(&mut self, host: &str) {
        if self.failover && host == RELAY {
            let target = self.target();
            let Some(target) = target else {
                self.note("no relay up to power off".into());
                return;
            };
            self.note(format!("the active relay is {target}"));
            self.relay_down.push_back(target.clone());
            self.power_off(&target);
            return;
        }
        if !self.links.down.insert(host.to_owned()) {
            return;
        }
        let others: Vec<String> = self.hosts.iter().filter(|h| *h != host).cloned().collect();
        for h in &others {
            self.sim.partition_oneway(host, h.as_str());
        }
        let relay = host == RELAY || self.is_node(host);
        if host == RELAY {
            self.store.set_powered_off(true);
        } else if relay {
            self.store.set_dead(host, true, self.now());
        }
        if relay {
            let now = self.now();
            self.world.borrow_mut().relay_off_ms.push(now);
        }
        self.sim.crash(host);
        for h in &others {
            self.restore(host, h);
        }
    }

    /// Puts the direction `from → to` back to its tracked state (after a power-off cut it).
    fn restore(&mut self, from: &str, to: &str) {
        let frozen = self.links.frozen.contains(from) || self.links.frozen.contains(to);
        match self.links.get(from, to) {
            Dir::Healthy if frozen => {
                self.sim.hold(from, to);
            }
            Dir::Healthy => self.sim.repair_oneway(from, to),
            Dir::Cut => {}
            Dir::Held => {
                self.sim.hold(from, to);
                if self.links.get(to, from) == Dir::Cut {
                    self.sim.partition_oneway(to, from);
                }
            }
        }
    }

    fn power_on(&mut self, host: &str) {
        if self.failover && host == RELAY {
            if let Some(target) = self.relay_down.pop_front() {
                self.power_on(&target);
            }
            return;
        }
        if self.links.down.remove(host) {
            if host == RELAY {
                self.store.set_powered_off(false);
            } else if self.is_node(host) {
                self.store.set_dead(host, false, self.now());
            }
            self.sim.bounce(host);
        }
    }

    /// Freezes the active relay (failover): every link of its host held, its lease calls
    /// unanswered, until `until`.
    fn freeze(&mut self, until: u64) {
        if !self.failover {
            return;
        }
        let target = if self.cluster {
            self.target()
        } else {
            self.store
                .holder()
                .filter(|h| !self.links.down.contains(h) && !self.links.frozen.contains(h))
        };
        let Some(target) = target else {
            self.note("no active relay to freeze".into());
            return;
        };
        self.note(format!("the active relay is {target}"));
        self.links.frozen.insert(target.clone());
        self.store.set_frozen(&target, true, self.now());
        let others: Vec<String> = self
            .hosts
            .iter()
            .filter(|h| **h != target)
            .cloned()
            .collect();
        for h in &others {
            self.sim.hold(target.as_str(), h.as_str());
        }
        let now = self.now();
        self.world.borrow_mut().relay_off_ms.push(now);
        self.schedule(until, Internal::Thaw(target));
    }

    /// Cuts the busiest cluster node from the database until `until` (its links to clients
    /// and the other nodes stay).
    fn cut_from_store(&mut self, until: u64) {
        let Some(target) = self.cluster.then(|| self.target()).flatten() else {
            self.note("no cluster node to cut from the database".into());
            return;
        };
        self.note(format!("{target} is cut from the database"));
        self.store.set_cut(&target, true, self.now());
        self.schedule(until, Internal::Reconnect(target));
    }

    /// Asks the busiest cluster node to leave (a graceful shutdown: it drains, stops its
    /// cores, gives its shards up) and lets it start again at `until`.
    fn leave(&mut self, until: u64) {
        let Some(target) = self.cluster.then(|| self.target()).flatten() else {
            self.note("no cluster node to leave".into());
            return;
        };
        self.note(format!("{target} is asked to leave the cluster"));
        self.departures.set(&target, true);
        self.store.set_departed(&target, true, self.now());
        self.schedule(until, Internal::Return(target));
    }

    /// Lets a cluster node that left start again.
    fn come_back(&mut self, host: &str) {
        self.departures.set(host, false);
        self.store.set_departed(host, false, self.now());
    }

    /// Cuts the busiest cluster node from the load balancer (both ways) until `until`; its
    /// links to the database and the other nodes stay.
    fn cut_from_balancer(&mut self, until: u64) {
        let Some(target) = self.cluster.then(|| self.target()).flatten() else {
            self.note("no cluster node to cut from the load balancer".into());
            return;
        };
        self.note(format!("{target} is cut from the load balancer"));
        let cut = FaultAction::Partition {
            a: RELAY.to_owned(),
            b: target.clone(),
        };
        self.apply_to_links(&cut);
        self.schedule(until, Internal::Rejoin(target));
    }

    fn thaw(&mut self, host: &str) {
        if !self.links.frozen.remove(host) {
            return;
        }
        self.store.set_frozen(host, false, self.now());
        let others: Vec<String> = self.hosts.iter().filter(|h| *h != host).cloned().collect();
        for h in &others {
            self.sim.release(host, h.as_str());
        }
    }

    /// Applies one fault of the plan.
    fn apply(&mut self, action: &FaultAction) {
        if self.apply_to_links(action) {
            return;
        }
        let now = self.now();
        if action.is_store_fault() {
            self.world.borrow_mut().store_faults += 1;
        }
        match action {
            FaultAction::MaxLatency { ms } => {
                self.sim.set_max_message_latency(Duration::from_millis(*ms));
            }
            FaultAction::Crash { host } => self.power_off(host),
            FaultAction::Restart { host } => self.power_on(host),
            FaultAction::ClockJump { ms } => self.jump_relay_clock(*ms),
            FaultAction::WorldJump { ms } => {
                self.jump_relay_clock(*ms);
                for clock in &self.app_clocks {
                    clock.advance(*ms);
                }
            }
            // Applied before the run started (see `FaultAction::SetSkew`).
            FaultAction::SetSkew { .. } => {}
            FaultAction::FailCommits { commits } => self.store.fail_commits(*commits),
            FaultAction::FailReads { reads, table } => {
                let table = table.as_deref().and_then(|name| {
                    relay_core::store::Table::ALL
                        .into_iter()
                        .find(|t| t.name() == name)
                });
                self.store.fail_reads(*reads, table);
            }
            FaultAction::StoreDown { ms } => self.store.down_until(now + ms),
            FaultAction::StallCommit { ms } => self.stall(*ms),
            FaultAction::CrashAfterCommit { restart_after_ms } => {
                self.store.crash_after_commit(*restart_after_ms);
            }
            FaultAction::CrashMidBatch { restart_after_ms } => {
                self.store.crash_mid_batch(*restart_after_ms);
            }
            FaultAction::Freeze { ms } => self.freeze(now + ms),
            FaultAction::CutFromStore { ms } => self.cut_from_store(now + ms),
            FaultAction::Leave { ms } => self.leave(now + ms),
            FaultAction::CutFromBalancer { ms } => self.cut_from_balancer(now + ms),
            FaultAction::Crossings {
                ms,
                lose_pct,
                twice_pct,
                delay_pct,
                delay_max_ms,
            } => {
                let odds = CrossingOdds {
                    lose_pct: *lose_pct,
                    twice_pct: *twice_pct,
                    delay_pct: *delay_pct,
                    delay_max_ms: *delay_max_ms,
                };
                self.crossings.arm(odds, now + ms);
            }
            FaultAction::ShardCommitsFail { shard, commits } => {
                self.store.fail_shard_commits(*shard, *commits);
            }
            FaultAction::ShardStoreDown { shard, ms } => {
                self.store.shard_down_until(*shard, now + ms);
            }
            FaultAction::ShardCommitSlow { shard, ms } => {
                self.store.stall_shard_commit(*shard, *ms);
                self.world.borrow_mut().relay_stalled = true;
            }
            FaultAction::CrashAfterCommitOf {
                table,
                restart_after_ms,
            } => {
                let table = relay_core::store::Table::ALL
                    .into_iter()
                    .find(|t| t.name() == table);
                if let Some(table) = table {
                    self.store.crash_after_commit_of(table, *restart_after_ms);
                }
            }
            FaultAction::Hostile { host, act } => self.hostile(host, act),
            FaultAction::Partition { .. }
            | FaultAction::Repair { .. }
            | FaultAction::PartitionOneway { .. }
            | FaultAction::RepairOneway { .. }
            | FaultAction::Hold { .. }
            | FaultAction::Release { .. } => {}
        }
    }

    /// Applies a fault that breaks or mends links (tracked in [`Links`]); `false` for any
    /// other.
    fn apply_to_links(&mut self, action: &FaultAction) -> bool {
        match action {
            FaultAction::Partition { a, b } => {
                self.links.both(a, b, Dir::Cut);
                self.sim.partition(a.as_str(), b.as_str());
            }
            FaultAction::Repair { a, b } => {
                self.links.both(a, b, Dir::Healthy);
                self.sim.repair(a.as_str(), b.as_str());
            }
            FaultAction::PartitionOneway { from, to } => {
                self.links.set(from, to, Dir::Cut);
                self.sim.partition_oneway(from.as_str(), to.as_str());
            }
            FaultAction::RepairOneway { from, to } => {
                self.links.set(from, to, Dir::Healthy);
                self.sim.repair_oneway(from.as_str(), to.as_str());
            }
            FaultAction::Hold { a, b } => {
                self.links.both(a, b, Dir::Held);
                self.sim.hold(a.as_str(), b.as_str());
            }
            FaultAction::Release { a, b } => {
                self.links.both(a, b, Dir::Healthy);
                self.sim.release(a.as_str(), b.as_str());
            }
            _ => return false,
        }
        true
    }

    /// The relay's clock jumps `ms` forward; the world remembers when (the oracles that judge
    /// expiries measure time on the relay's clock).
    fn jump_relay_clock(&self, ms: u64) {
        self.relay_clock.advance(ms);
        let now = self.now();
        self.world.borrow_mut().relay_jumps.push((now, ms));
    }

    /// Does what the drill host asked of the runner since the last step.
    fn answer_requests(&mut self) {
        loop {
            let request = self.world.borrow_mut().runner_requests.pop_front();
            let Some(request) = request else { return };
            match request {
                RunnerRequest::PowerCycleRelay { down_ms } => {
                    let now = self.now();
                    self.note(format!(
                        "a drill powers the relay off; restart in {down_ms} ms"
                    ));
                    self.power_off(RELAY);
                    self.schedule(now + down_ms, Internal::Restart(RELAY.to_owned()));
                }
                RunnerRequest::JumpRelayClock { ms } => {
                    self.note(format!("a drill jumps the relay clock +{} s", ms / 1_000));
                    self.jump_relay_clock(ms);
                }
                RunnerRequest::FailRead { table } => {
                    if self.store.fail_one_read_if_none_armed(table) {
                        self.note(format!("a drill fails the next read of {}", table.name()));
                        self.world.borrow_mut().drill_reads_armed += 1;
                    } else {
                        self.note(format!(
                            "a drill's failing read of {} not armed: the plan's are pending",
                            table.name()
                        ));
                    }
                }
            }
        }
    }

    /// Hands an act to a raw client host. A slow consumer's link gets a steady latency from
    /// now on: under jitter, its paced frames reach the relay in clumps, the relay answers a
    /// clump with one write, and turmoil's window counts writes; the relay's writes might
    /// then never block, and the stuck-client oracle would hold it to a close it has no
    /// reason to make (seed 8, `--faults all`). (It goes straight to the active relay in the
    /// failover topology.)
    fn hostile(&mut self, host: &str, act: &HostileAct) {
        if matches!(act, HostileAct::StopReading { .. }) {
            let nodes: &[&str] = if self.failover { self.nodes() } else { &[] };
            for &relay in std::iter::once(&RELAY).chain(nodes) {
                self.sim.set_link_latency(
                    host,
                    relay,
                    Duration::from_millis(self.steady_latency_ms),
                );
            }
        }
        self.world
            .borrow_mut()
            .hostile_inbox
            .entry(host.to_owned())
            .or_default()
            .push_back(act.clone());
    }

    /// The relay's next commit takes `ms`: its committer waits that long before applying it,
    /// while the relay goes on handling inputs on top of it (up to its pipeline depth) and
    /// releases nothing of that batch or of the ones after it meanwhile.
    fn stall(&mut self, ms: u64) {
        self.store.stall_next_commit(ms);
        self.world.borrow_mut().relay_stalled = true;
    }

    /// Runs what the runner scheduled for now or earlier, and power-offs the store asked for.
    fn housekeeping(&mut self) {
        self.answer_requests();
        self.world.borrow_mut().store_failed_reads = self.store.failed_reads();
        let now = self.now();
        // A stall lasts from its fault until the stalled commit is applied, which may start
        // later than the fault (the next commit) and ends `ms` after it started.
        let stalled = self.store.stalled();
        self.world.borrow_mut().relay_stalled = stalled;
        if let Some(req) = self.store.take_crash_request() {
            // In a cluster the node whose commit asked for it powers off: what it committed
            // is durable and unacknowledged, and its shards move.
            let host = match req.host {
                Some(node) if self.cluster && self.is_node(&node) => node,
                _ => RELAY.to_owned(),
            };
            let who = if host == RELAY {
                "relay"
            } else {
                host.as_str()
            };
            self.note(format!(
                "{who} powers off (store fault); restart in {} ms",
                req.restart_after_ms
            ));
            self.power_off(&host);
            self.schedule(now + req.restart_after_ms, Internal::Restart(host));
        }
        while let Some(entry) = self.internal.first_entry() {
            if *entry.key() > now {
                break;
            }
            for what in entry.remove() {
                match what {
                    Internal::Restart(h) => self.power_on(&h),
                    Internal::Thaw(h) => self.thaw(&h),
                    Internal::Reconnect(h) => self.store.set_cut(&h, false, now),
                    Internal::Return(h) => self.come_back(&h),
                    Internal::Rejoin(h) => {
                        self.apply_to_links(&FaultAction::Repair {
                            a: RELAY.to_owned(),
                            b: h,
                        });
                    }
                }
            }
        }
    }

    /// Repairs every link, releases every hold, restarts every powered-off host, turns the
    /// store faults off, resets latency.
    fn heal(&mut self, plan: &FaultPlan) {
        for h in self.links.frozen.clone() {
            self.thaw(&h);
        }
        self.store.heal();
        self.store.cluster_heal(self.now());
        if self.cluster {
            for host in self.nodes() {
                self.come_back(host);
            }
        }
        self.crossings.heal();
        let hosts = self.hosts.clone();
        for h in hosts.iter().filter(|h| *h != RELAY) {
            self.sim.repair(h.as_str(), RELAY);
            self.sim.release(h.as_str(), RELAY);
        }
        // The links between the nodes behind the balancer.
        let nodes = if self.failover { self.nodes() } else { &[] };
        for (n, a) in nodes.iter().enumerate() {
            for b in &nodes[n + 1..] {
                self.sim.repair(*a, *b);
            }
        }
        self.links.dirs.clear();
        self.sim
            .set_max_message_latency(Duration::from_millis(plan.latency_ms.1));
        self.relay_down.clear();
        for h in std::mem::take(&mut self.links.down) {
            if h == RELAY {
                self.store.set_powered_off(false);
            } else if self.is_node(&h) {
                self.store.set_dead(&h, false, self.now());
            }
            self.sim.bounce(h.as_str());
        }
    }
}

impl<'a> Sim<'a> {
    /// The runner's bookkeeping around a turmoil world that has no hosts yet.
    pub(super) fn new(sim: turmoil::Sim<'a>, parts: &Parts<'_>, store: StoreCtl) -> Self {
        let plan = &parts.replay.plan;
        let cluster = plan.kinds.contains(&crate::faults::FaultKind::Cluster);
        Self {
            sim,
            hosts: Vec::new(),
            links: Links::default(),
            relay_clock: parts.relay_clock.clone(),
            skews: BTreeMap::new(),
            app_clocks: parts
                .clocks
                .iter()
                .chain(std::iter::once(&parts.auditor_clock))
                .cloned()
                .collect(),
            store,
            crossings: parts.crossings.clone(),
            internal: BTreeMap::new(),
            trace: parts.trace.clone(),
            world: parts.world.clone(),
            steady_latency_ms: plan.latency_ms.0,
            failover: plan.kinds.contains(&crate::faults::FaultKind::Failover) || cluster,
            cluster,
            relay_down: VecDeque::new(),
            departures: parts.departures.clone(),
        }
    }

    /// Adds host `name` running `software` (turmoil numbers hosts in this order).
    pub(super) fn host<F, Fut>(&mut self, name: &str, software: F)
    where
        F: Fn() -> Fut + 'a,
        Fut: Future<Output = turmoil::Result> + 'static,
    {
        self.hosts.push(name.to_owned());
        self.sim.host(name, software);
    }

    /// Makes the clocks of host `name`'s apps subject to its clock-skew faults.
    pub(super) fn skewed(&mut self, name: &str, clocks: Vec<SkewClock>) {
        self.skews.insert(name.to_owned(), clocks);
    }

    /// Sets every clock skew of the plan: they hold from the start.
    pub(super) fn set_skews(&self, plan: &FaultPlan) {
        for e in &plan.events {
            if let FaultAction::SetSkew { host, skew_ms } = &e.action {
                for clock in self.skews.get(host).into_iter().flatten() {
                    clock.set(*skew_ms);
                }
            }
        }
    }
}

/// Where the step loop is.
#[derive(Debug, Default)]
struct Timeline {
    /// Index of the plan's next event.
    next_fault: usize,
    healed: bool,
    final_jump: bool,
    steps: u64,
}

/// How a run's step loop ended.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ended {
    /// Simulated ms of the last step.
    pub(super) end_ms: u64,
    /// turmoil steps taken.
    pub(super) steps: u64,
}

impl Sim<'_> {
    /// Steps the world through setup, traffic with faults, healing and liveness, to the end
    /// of the run (or the first host error, or setup running late).
    pub(super) fn run_to_end(
        &mut self,
        parts: &Parts<'_>,
        violations: &mut Vec<Violation>,
    ) -> Ended {
        let plan = &parts.replay.plan;
        let mut t = Timeline::default();
        loop {
            t.steps += 1;
            if let Err(e) = self.sim.step() {
                violations.push(Violation::new(Oracle::HostError, e.to_string()));
                return self.ended(&t);
            }
            self.housekeeping();
            let now = self.now();
            let start = self.world.borrow().traffic_start_ms;
            let Some(start) = start else {
                if let Some(late) = self.setup_step(parts, now) {
                    violations.push(late);
                    return self.ended(&t);
                }
                continue;
            };
            while let Some(fault) = plan.events.get(t.next_fault)
                && start + fault.at_ms <= now
            {
                self.apply(&fault.action);
                self.note(format!("fault: {}", fault.action));
                t.next_fault += 1;
            }
            if !t.healed && now >= start + TRAFFIC_WINDOW_MS {
                // Faults scheduled past the window never happen.
                t.next_fault = plan.events.len();
                t.healed = true;
                self.heal_all(plan, now);
            }
            let end = start + TRAFFIC_WINDOW_MS + LIVENESS_BOUND_MS;
            if !t.final_jump && now + FINAL_JUMP_BEFORE_END_MS >= end {
                t.final_jump = true;
                self.final_jump(parts, now);
            }
            if now >= end {
                return self.ended(&t);
            }
        }
    }

    fn ended(&self, t: &Timeline) -> Ended {
        Ended {
            end_ms: self.now(),
            steps: t.steps,
        }
    }

    /// One step of setup: traffic starts once every client is ready; `Some` when setup ran
    /// past its bound.
    fn setup_step(&self, parts: &Parts<'_>, now: u64) -> Option<Violation> {
        let clients = parts.scenario.accounts.len();
        let ready = self.world.borrow().ready.len();
        if ready == clients {
            self.world.borrow_mut().traffic_start_ms = Some(now);
            self.note("setup done: traffic starts".into());
            if parts.push.revoke_one {
                self.revoke_one(parts, now);
            }
            return None;
        }
        let setup_bound = parts.scenario.scale.setup_bound_ms();
        (now > setup_bound).then(|| {
            Violation::new(
                Oracle::Setup,
                format!(
                    "setup not done within {setup_bound} ms ({} of {clients} clients ready)",
                    self.world.borrow().ready.len()
                ),
            )
        })
    }

    /// Heals everything at the end of the traffic window; the liveness phase starts.
    fn heal_all(&mut self, plan: &FaultPlan, now: u64) {
        self.heal(plan);
        self.world.borrow_mut().heal_ms = Some(now);
        self.note("healed: liveness phase".into());
    }

    /// The relay's clock jumps past every hold and trade order, so every unpaid order
    /// expires; the orders with webhooks still in flight are noted for the audit.
    fn final_jump(&self, parts: &Parts<'_>, now: u64) {
        let late = market::in_flight_orders(&parts.payments.processor);
        self.note(format!(
            "final relay clock jump +{} s; orders with webhooks in flight: {late:?}",
            FINAL_JUMP_MS / 1_000
        ));
        let after = self.relay_clock.advance(FINAL_JUMP_MS);
        let mut w = self.world.borrow_mut();
        w.relay_jumps.push((now, FINAL_JUMP_MS));
        w.ledger.audit.late_at_final_jump = late;
        w.ledger.audit.final_jump_relay_ms = Some(after.0);
        w.final_jump_ms = Some(now);
    }

    /// One browser of the first Web Push client unsubscribes (its push service answers 410
    /// from now on); see [`pushworld`](crate::pushworld).
    fn revoke_one(&self, parts: &Parts<'_>, now: u64) {
        let mut w = self.world.borrow_mut();
        // Preferably a client that will go offline (only offline users are pushed).
        let goes_offline = |c: usize| {
            parts
                .scenario
                .actions
                .iter()
                .any(|a| a.client == c && matches!(a.kind, ActionKind::Offline { .. }))
        };
        let candidates = || {
            w.push_targets
                .iter()
                .filter(|(c, t)| PushKind::of(**c) == PushKind::Web && t.len() > 1)
        };
        let victim = candidates()
            .find(|(c, _)| goes_offline(**c))
            .or_else(|| candidates().next())
            .map(|(c, t)| (*c, t[1].clone()));
        if let Some((c, sub)) = victim {
            parts.push.web.unsubscribe(&sub);
            w.revoked = Some((sub, now));
            drop(w);
            self.note(format!("c{c}'s second browser unsubscribed from Web Push"));
        }
    }
}
