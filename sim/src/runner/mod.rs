//! One simulation run: build the turmoil world, step it, apply the fault plan, heal, check.
//!
//! ```text
//! setup (no faults)  : register, friend requests (some to strangers, rejected), accepts,
//!                      sessions, push tokens                                ─┐ gated on every
//! traffic (window)   : scripted actions + the fault plan                    │ client's setup
//! heal               : every link repaired, every host up, store faults off │
//!   heal + 75 s      : probe round: a message, a typing notice and a call   │
//!                      per client and peer, each due within PROBE_BOUND_MS  │
//!   end - 40 s       : the relay's clock jumps 31 min (every unpaid order    │
//!                      expires), then the commerce audit ([`crate::market`]) ┘
//! oracles            : over the trace, the client stores, the relay store's history, the
//!                      stand-ins, the raw clients' findings and the logs
//! ```
//!
//! Hosts: `relay` (with the `failover` fault kind: a load balancer in front of `relay-a` and
//! `relay-b`, see [`crate::failover`]), client hosts, strangers and `pay` (the outside world);
//! see [`hosts`]. The relay reads an `OffsetClock` the runner keeps (clock-jump faults; it
//! survives relay restarts); each client reads a [`SkewClock`] (clock-skew faults).
//!
//! Modules: [`relay`] (the relay's configuration and hosts), [`hosts`] (the other hosts),
//! [`step`] (the step loop: faults, power-offs, freezes, stalls, healing), [`finish`] (the
//! end-of-run notes, the oracles and the counters), [`logscan`] (the canary scan of the
//! logs).

mod finish;
mod hosts;
mod logscan;
mod relay;
mod step;

use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng as _;
use serde::{Deserialize, Serialize};

use self::logscan::LogScan;
use self::relay::RelaySetup;
use self::step::Sim;
use crate::bounds::TRAFFIC_WINDOW_MS;
use crate::class::{Class, ClassChoice};
use crate::drills::Drill;
use crate::faults::{FaultKind, FaultPlan, FaultSelection, StoreChoice};
use crate::oracles;
use crate::pushworld::PushWorld;
use crate::scenario::{DrawParams, Scale, Scenario};
use crate::seeds::{TAG_PLAN, TAG_RELAY, TAG_SCENARIO, derive_seed, derive_u64};
use crate::store::SimStore;
use crate::time::SkewClock;
use crate::trace::{self, Record, Trace};
use crate::transit::CrossingFaults;
use crate::violation::Violation;
use crate::world::ledger::Payments;
use crate::world::{HostCtx, Shared, relay_endpoint};
use client::SharedStore;
use seam::clock::{Clock, OffsetClock, SimClock};
use standins::PaymentProcessor;

/// Simulated time per turmoil step. Every step costs the same for every host whatever
/// happens in it (turmoil polls each host's runtime and scans every link), so this is the
/// simulator's main speed knob: 4 ms halves the steps of 2 ms (the link latency of a healthy
/// link, 1-12 ms, spans several ticks, so deliveries still interleave).
const TICK_MS: u64 = 4;
/// turmoil's simulated-time limit of one run (far beyond any run's end).
const SIMULATION_LIMIT_S: u64 = 7_200;

/// What to run.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The seed: scenario, fault plan, turmoil and every client RNG derive from it.
    pub seed: u64,
    /// World size (when the scenario is drawn).
    pub scale: Scale,
    /// Client count (`None`: drawn from the scale).
    pub clients: Option<usize>,
    /// Which fault kinds may be used.
    pub faults: FaultSelection,
    /// Which store the relay uses.
    pub store: StoreChoice,
    /// How many relay cores (shards) the relay runs.
    pub shards: ShardsChoice,
    /// Which class of run (see [`crate::class`]).
    pub class: ClassChoice,
    /// Scan every log event (DEBUG and above) for the canary oracle.
    pub capture_logs: bool,
    /// Print the run's logs to stderr with this `tracing` filter (e.g. `debug`,
    /// `relay_server=trace`) instead of scanning them (debugging one run).
    pub log: Option<String>,
    /// Bind confirmed vanity orders (the buyer's alias changes).
    pub bind_vanity: bool,
    /// An explicit scenario and plan (a replay file, a shrinking step) instead of drawing
    /// them from the seed.
    pub replay: Option<Replay>,
    /// A bug planted in the relay (test-only, feature `planted-bugs`; see
    /// [`crate::planted`]).
    #[cfg(feature = "planted-bugs")]
    pub planted: Option<crate::planted::Planted>,
}

impl RunConfig {
    /// Defaults: small scale, 4 clients, swarm faults, drawn store, mixed classes, logs
    /// captured.
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            scale: Scale::Small,
            clients: Some(4),
            faults: FaultSelection::Swarm,
            store: StoreChoice::Drawn,
            shards: ShardsChoice::Fixed(1),
            class: ClassChoice::Mixed,
            capture_logs: true,
            log: None,
            bind_vanity: true,
            replay: None,
            #[cfg(feature = "planted-bugs")]
            planted: None,
        }
    }

    /// A run of exactly `replay`.
    pub fn replaying(replay: Replay) -> Self {
        Self {
            seed: replay.seed,
            scale: replay.scenario.scale,
            clients: Some(replay.scenario.accounts.len()),
            bind_vanity: replay.bind_vanity,
            replay: Some(replay),
            ..Self::new(0)
        }
    }

    /// The scenario and plan this configuration runs.
    pub fn draw(&self) -> Replay {
        if let Some(r) = &self.replay {
            return r.clone();
        }
        let class = self.class.of(self.seed);
        let mut rng = ChaCha20Rng::from_seed(derive_seed(self.seed, TAG_SCENARIO, 0));
        let mut scenario = Scenario::draw(
            &mut rng,
            DrawParams {
                seed: self.seed,
                scale: self.scale,
                clients: self.clients,
                window_ms: TRAFFIC_WINDOW_MS,
            },
        );
        scenario.fit_class(class);
        let shards = match self.shards {
            ShardsChoice::Fixed(n) => n.max(1),
            ShardsChoice::Drawn => relay::relay_shards(self.seed),
        };
        let mut rng = ChaCha20Rng::from_seed(derive_seed(self.seed, TAG_PLAN, 0));
        let mut plan = FaultPlan::draw(
            &mut rng,
            &self.faults,
            self.store,
            &scenario,
            (TRAFFIC_WINDOW_MS, shards),
        );
        if class == Class::Days {
            plan.add_world_jumps(&crate::class::days_jumps(self.seed, TRAFFIC_WINDOW_MS));
        }
        // A cluster's shards are spread over its nodes: it has a few at least.
        let shards = if plan.kinds.contains(&FaultKind::Cluster) {
            shards.max(crate::bounds::MIN_CLUSTER_SHARDS)
        } else {
            shards
        };
        Replay {
            seed: self.seed,
            bind_vanity: self.bind_vanity,
            class,
            drills: Drill::of_class(class),
            scenario,
            plan,
            shards,
        }
    }
}

/// A run as explicit data: what `simulate --replay FILE` reads and `--shrink` writes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replay {
    /// The seed (turmoil's RNG, every client's and the relay's RNG derive from it).
    pub seed: u64,
    /// Bind confirmed vanity orders.
    pub bind_vanity: bool,
    /// The run's class (replay files written before classes existed are `standard`).
    #[serde(default)]
    pub class: Class,
    /// What the drill host does, in order (see [`crate::drills`]).
    #[serde(default)]
    pub drills: Vec<Drill>,
    /// The scenario.
    pub scenario: Scenario,
    /// The fault plan.
    pub plan: FaultPlan,
    /// Relay cores (shards) of the relay (replay files written before shards existed: 1).
    #[serde(default = "one_shard")]
    pub shards: u16,
}

/// An unsharded relay's one core.
fn one_shard() -> u16 {
    1
}

/// How many relay cores (shards) a run's relay runs: a fixed number, or drawn from the seed
/// (1 to 4; `relay --shards`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardsChoice {
    /// This many.
    Fixed(u16),
    /// Drawn per seed.
    Drawn,
}

impl std::str::FromStr for ShardsChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s == "drawn" {
            return Ok(Self::Drawn);
        }
        match s.parse::<u16>() {
            Ok(n) if (1..=1024).contains(&n) => Ok(Self::Fixed(n)),
            _ => Err(format!(
                "expected `drawn` or a shard count 1..=1024, got {s:?}"
            )),
        }
    }
}

impl std::fmt::Display for ShardsChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Fixed(n) => write!(f, "{n}"),
            Self::Drawn => f.write_str("drawn"),
        }
    }
}

/// The outcome of one run.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// The seed.
    pub seed: u64,
    /// The run's class.
    pub class: Class,
    /// The drills the drill host ran.
    pub drills: Vec<Drill>,
    /// The scenario that ran (its `Display` is the summary line).
    pub scenario: Scenario,
    /// The fault plan that ran.
    pub plan: FaultPlan,
    /// Relay cores (shards) of the relay.
    pub shards: u16,
    /// Application-level trace lines.
    pub trace: Vec<String>,
    /// SHA-256 of the trace.
    pub trace_hash: String,
    /// Every oracle violation.
    pub violations: Vec<Violation>,
    /// Simulated time of the run.
    pub simulated: Duration,
    /// Counters of the run.
    pub stats: RunStats,
    /// What the honest clients' connections carried: requests and refusals by route.
    pub routes: std::collections::BTreeMap<String, crate::wiretap::RouteCount>,
    /// The trace as records (what [`trace`](Self::trace) renders), for reports.
    pub records: Vec<Record>,
    /// Simulated ms at which traffic started (`None`: setup never finished).
    pub traffic_start_ms: Option<u64>,
    /// Simulated ms at which every fault was healed (`None`: the run ended before).
    pub heal_ms: Option<u64>,
    /// Each code probe the run hit (relay core, client core), with its count (see
    /// [`crate::coverage`]).
    pub probes: std::collections::BTreeMap<String, u64>,
    /// What each drill judged and left unjudged (see [`crate::drills`]).
    pub drill_counts: std::collections::BTreeMap<Drill, (u64, u64)>,
    /// How far the relay's clock moved over the run: simulated time plus every jump.
    pub relay_elapsed: Duration,
}

impl RunReport {
    /// The run as a replay file's content.
    pub fn replay(&self, bind_vanity: bool) -> Replay {
        Replay {
            seed: self.seed,
            bind_vanity,
            class: self.class,
            drills: self.drills.clone(),
            scenario: self.scenario.clone(),
            plan: self.plan.clone(),
            shards: self.shards,
        }
    }
}

/// Counters of one run (for the summaries and the benchmarks).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunStats {
    /// turmoil steps.
    pub steps: u64,
    /// Messages acknowledged to their senders.
    pub acked: u64,
    /// Conversations set up (friendships accepted) of the scenario's pairs.
    pub conversations: u64,
    /// The scenario's pairs.
    pub pairs: u64,
    /// Messages that reached a recipient's app (distinct per recipient).
    pub received: u64,
    /// Receipts the senders' apps applied (`delivered` and `read` status changes).
    pub receipts: u64,
    /// Store commits, injected commit failures, loads.
    pub commits: u64,
    /// Injected commit failures.
    pub failed_commits: u64,
    /// Relay opens and rebuilds.
    pub loads: u64,
    /// Leadership terms (failover topology; 0 otherwise).
    pub terms: u64,
    /// Commits and loads refused by the fence (failover and cluster topologies).
    pub fenced: u64,
    /// Shard moves between the cluster topology's nodes: forced (a lease lapsed) and handed
    /// over (planned), 0 otherwise.
    pub shard_moves: u64,
    /// Bounds on the relay's webhook counters that the `webhook-counts` oracle judged.
    pub webhook_bounds: u64,
    /// Messages the relay's cores handed to another shard's core (0 with one shard; from the
    /// relay's metrics, `relay_messages_handed_off_total`).
    pub handed_off: u64,
    /// Crossings between the relay's cores that the `handoff` faults lost, repeated or
    /// delayed.
    pub crossings_faulted: u64,
}

/// Runs one seed (or the replay in `config`).
pub fn run(config: &RunConfig) -> RunReport {
    let replay = config.draw();
    let scan = LogScan::default();
    let relay = RelaySetup::of(config, replay.class);
    probes::start();
    let mut inner = logscan::with_logs(config, &scan, || run_inner(&replay, &relay));
    let probes = probes::finish();
    if config.capture_logs && config.log.is_none() {
        oracles::logs_free_of_canaries(
            &scan.suspects(),
            &replay.scenario.canaries(),
            &mut inner.violations,
        );
    }
    let lines = trace::lines(&inner.records);
    let trace_hash = trace::hash(&lines);
    let (traffic_start_ms, heal_ms) = inner.times;
    RunReport {
        seed: replay.seed,
        class: replay.class,
        drills: replay.drills,
        scenario: replay.scenario,
        plan: replay.plan,
        shards: replay.shards,
        trace: lines,
        trace_hash,
        violations: inner.violations,
        simulated: Duration::from_millis(inner.end_ms),
        stats: inner.stats,
        routes: inner.routes,
        records: inner.records,
        traffic_start_ms,
        heal_ms,
        probes,
        drill_counts: inner.drill_counts,
        relay_elapsed: Duration::from_millis(inner.relay_elapsed_ms),
    }
}

/// What a run leaves behind, before the log scan.
struct Inner {
    records: Vec<Record>,
    violations: Vec<Violation>,
    end_ms: u64,
    stats: RunStats,
    routes: std::collections::BTreeMap<String, crate::wiretap::RouteCount>,
    /// When traffic started and when the faults were healed (simulated ms).
    times: (Option<u64>, Option<u64>),
    /// What each drill judged and left unjudged.
    drill_counts: std::collections::BTreeMap<Drill, (u64, u64)>,
    /// How far the relay's clock moved over the run.
    relay_elapsed_ms: u64,
}

/// What every host of a run shares, made before the hosts.
pub(super) struct Parts<'r> {
    replay: &'r Replay,
    scenario: Rc<Scenario>,
    trace: Trace,
    world: Shared,
    /// The relay's clock (clock-jump faults; it survives relay restarts).
    relay_clock: OffsetClock,
    push: PushWorld,
    payments: Payments,
    /// Each client's durable store.
    stores: Vec<SharedStore>,
    /// Each client's clock.
    clocks: Vec<SkewClock>,
    /// The commerce auditor's clock.
    auditor_clock: SkewClock,
    /// What every start of every relay host counts for an operator (one registry over the
    /// run, as one scraped series accumulates across restarts).
    metrics: relay_server::metrics::Metrics,
    /// What happens to the crossings between the relay's cores (`handoff` faults).
    crossings: CrossingFaults,
    /// The cluster nodes asked to leave (fault `Leave`).
    departures: crate::cluster::Departures,
}

impl<'r> Parts<'r> {
    fn new(replay: &'r Replay) -> Self {
        let relay_clock = OffsetClock::new(Arc::new(SimClock::default()));
        let push = PushWorld::new(
            replay.seed,
            &(Arc::new(relay_clock.clone()) as Arc<dyn Clock>),
        );
        let plan = &replay.plan;
        let payments = Payments {
            processor: PaymentProcessor::new(crate::bounds::WEBHOOK_SECRET, relay_endpoint()),
            forger: PaymentProcessor::new(b"forger-guess".as_slice(), relay_endpoint()),
            faults: plan.webhook,
            enabled: plan.kinds.contains(&FaultKind::Webhook),
        };
        let clients = replay.scenario.accounts.len();
        Self {
            replay,
            scenario: Rc::new(replay.scenario.clone()),
            trace: Trace::default(),
            world: Rc::default(),
            relay_clock,
            push,
            payments,
            stores: (0..clients).map(|_| SharedStore::new()).collect(),
            clocks: (0..clients).map(|_| SkewClock::default()).collect(),
            auditor_clock: SkewClock::default(),
            metrics: relay_server::metrics::Metrics::new(),
            crossings: CrossingFaults::new(derive_u64(replay.seed, TAG_RELAY, 11)),
            departures: crate::cluster::Departures::default(),
        }
    }

    /// The context of host script `me` (a client index, or a stranger's).
    fn host_ctx(&self, me: usize, store: &SharedStore, clock: &SkewClock) -> Rc<HostCtx> {
        Rc::new(HostCtx {
            me,
            seed: self.replay.seed,
            scenario: Rc::clone(&self.scenario),
            world: Rc::clone(&self.world),
            trace: self.trace.clone(),
            store: store.clone(),
            clock: clock.clone(),
            payments: self.payments.clone(),
            push: self.push.clone(),
            bind_vanity: self.replay.bind_vanity,
        })
    }
}

/// The turmoil world of `plan`, without hosts.
fn turmoil_world<'a>(seed: u64, plan: &FaultPlan) -> turmoil::Sim<'a> {
    turmoil::Builder::new()
        .rng_seed(seed)
        .min_message_latency(Duration::from_millis(plan.latency_ms.0))
        .max_message_latency(Duration::from_millis(plan.latency_ms.1))
        .tick_duration(Duration::from_millis(TICK_MS))
        .tcp_capacity(crate::bounds::TCP_CAPACITY)
        .simulation_duration(Duration::from_secs(SIMULATION_LIMIT_S))
        .build()
}

/// Builds the world of `replay`, steps it to the end, checks the oracles.
fn run_inner(replay: &Replay, relay: &RelaySetup) -> Inner {
    let parts = Parts::new(replay);
    let turmoil = turmoil_world(replay.seed, &replay.plan);
    let store = match SimStore::new(replay.plan.store) {
        Ok(s) => s,
        Err(e) => return finish::no_store(&e),
    };
    let mut sim = Sim::new(turmoil, &parts, store.ctl().clone());
    if sim.failover {
        parts.world.borrow_mut().lease = Some(store.ctl().clone());
    }
    parts.world.borrow_mut().crossings = Some(parts.crossings.clone());
    // A campaigning relay (the failover topology) runs one shard; a cluster's membership
    // spreads the run's shards over its nodes.
    let relay = &relay.sharded(if sim.failover && !sim.cluster {
        1
    } else {
        replay.shards
    });
    if sim.cluster {
        store.ctl().cluster_enable(replay.shards);
    }
    #[cfg(feature = "planted-bugs")]
    relay.plant(store.ctl());
    relay::add_relay_hosts(&mut sim, &parts, &store, relay);
    hosts::add_pay_host(&mut sim, &parts);
    hosts::add_client_hosts(&mut sim, &parts);
    hosts::add_stranger_hosts(&mut sim, &parts);
    hosts::add_drill_host(&mut sim, &parts, relay.config());
    sim.set_skews(&replay.plan);
    let mut violations = Vec::new();
    let ended = sim.run_to_end(&parts, &mut violations);
    finish::finish(
        &parts,
        &store,
        relay.config(),
        sim.failover,
        ended,
        violations,
    )
}
