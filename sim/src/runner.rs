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
//!                      expires), then the commerce audit ([`super::commerce`])┘
//! oracles            : over the trace, the client stores, the relay store's history, the
//!                      stand-ins, the raw clients' findings and the logs
//! ```
//!
//! Hosts: `relay` (with the `failover` fault kind: a load balancer in front of `relay-a` and
//! `relay-b`, see [`super::failover`]), client hosts (`c0`.. one account each; `h0`.. several accounts each at the
//! large scale), strangers `x0`.. (raw clients, [`super::hostile`]), and `pay`, the outside
//! world: the payment processor stand-in on [`PAY_PORT`], a forger on [`FORGER_PORT`], the
//! push services (Web Push on [`PUSH_PORT`], FCM and APNs next to it; the relay delivers to
//! them for real, see [`super::pushworld`]) and the app of an account that audits commerce.
//! The relay reads an [`OffsetClock`] the runner keeps (clock-jump faults; it survives relay
//! restarts); each client reads a [`SkewClock`] (clock-skew faults).
//!
//! **Crashes are power-offs**: before turmoil drops a host's runtime, every link *from* that
//! host is cut (and restored right after), so the FIN/RST segments its dropped sockets would
//! send never leave, and in-flight segments from it are lost. A crashed machine sends nothing;
//! and the order in which tokio drops the tasks (it depends on a process-global task id) can
//! no longer reach the network, so a run does not depend on what the process ran before
//! (runs can share a process, and a sweep runs seeds on threads).

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::{Ipv4Addr, SocketAddr};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use client_core::store::ClientStore as _;
use rand_chacha::ChaCha20Rng;
use rand_core::{Rng as _, SeedableRng as _};
use relay_core::{Config, MemoryBlobStore, Relay};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use wire::UnixMs;

use super::commerce::{self, CommerceWorld, Payments};
use super::failover::{self, SimLeadership};
use super::faults::{
    FaultAction, FaultKind, FaultPlan, FaultSelection, HostileAct, PAY, RELAY, RELAY_A, RELAY_B,
    STORM_WAVE, STORM_WAVE_MS, StoreChoice,
};
use super::oracles::{self, Violation};
use super::pushworld::{self, PushKind, PushWorld};
use super::scenario::{ActionKind, DrawParams, Scale, Scenario};
use super::store::{SimStore, StoreCtl};
use super::trace::{self, Device, Record, Trace};
use client::{Client, ClientOptions, EventKind, SharedStore};
use relay_server::RelayServer;
use seam::clock::{Clock, OffsetClock, SimClock};
use seam::net::{Endpoint, ServeLimits, Turmoil};
use standins::PaymentProcessor;

/// Port of the relay host.
pub const RELAY_PORT: u16 = 8080;
/// Traffic window (faults happen inside it).
pub const TRAFFIC_WINDOW_MS: u64 = 120_000;
/// After healing, the run goes on this long (delivery, probes, commerce audit).
pub const LIVENESS_BOUND_MS: u64 = 120_000;
/// Every acknowledged message must reach its recipient within this long after healing (or
/// after its ack, if later), however large the backlog: a client learns that a socket died
/// silently in a partition only after [`DEAD_LINK_MS`](client::DEAD_LINK_MS) of
/// silence (60 s), then reconnects and syncs.
pub const DELIVERY_BOUND_MS: u64 = client::DEAD_LINK_MS + 20_000;
/// The probe round starts this long after healing (every client has noticed a dead socket
/// by then, see [`DELIVERY_BOUND_MS`]).
pub const PROBE_AFTER_HEAL_MS: u64 = client::DEAD_LINK_MS + 15_000;
/// A client that connects on a healthy network must have everything queued for it at that
/// moment within this long (the `sync-complete` oracle): a backlog of thousands is replayed in
/// windows of `relay_core::limits::SYNC_WINDOW_MSGS`, each released by the client's receipts.
pub const SYNC_BOUND_MS: u64 = 20_000;
/// A probe (message, typing notice, call offer and its answer) must arrive within this long.
pub const PROBE_BOUND_MS: u64 = 10_000;
/// Setup (registration, friendships) must finish within this much simulated time at the
/// small and medium scales (see [`Scale::setup_bound_ms`]).
pub const SETUP_BOUND_MS: u64 = 120_000;
/// Simulated time per turmoil step. Every step costs the same for every host whatever
/// happens in it (turmoil polls each host's runtime and scans every link), so this is the
/// simulator's main speed knob: 4 ms halves the steps of 2 ms (the link latency of a healthy
/// link, 1-12 ms, spans several ticks, so deliveries still interleave).
const TICK_MS: u64 = 4;
/// turmoil's per-stream window and accept queue, in segments (turmoil panics when more
/// connection attempts than this reach a listener within one step).
pub(super) const TCP_CAPACITY: usize = 256;
/// A relay that exits (it could not open its store) is started again after this long.
const RELAY_RESTART_MS: u64 = 1_000;
/// Pause between retries of a failed setup call.
const RETRY_MS: u64 = 500;
/// Port of the payment processor stand-in on the `pay` host.
pub const PAY_PORT: u16 = 9090;
/// Port of the forger (wrong secret) on the `pay` host.
pub const FORGER_PORT: u16 = 9091;
/// Port of the Web Push stand-in on the `pay` host (FCM and APNs take the next two ports).
pub const PUSH_PORT: u16 = 9100;
/// Host of the commerce auditor's app (it shares the `pay` host with the payment and push
/// stand-ins).
pub const AUDIT: &str = PAY;
/// The webhook secret the relay and the processor share.
const WEBHOOK_SECRET: &[u8] = b"sim-webhook-secret";
/// Attempts of one media download in the probe round.
const MEDIA_ATTEMPTS: u32 = 3;
/// Probes go to at most this many peers per client.
const PROBE_PEERS: usize = 3;

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
    /// [`super::planted`]).
    #[cfg(feature = "planted-bugs")]
    pub planted: Option<super::planted::Planted>,
}

impl RunConfig {
    /// Defaults: small scale, 4 clients, swarm faults, drawn store, logs captured.
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            scale: Scale::Small,
            clients: Some(4),
            faults: FaultSelection::Swarm,
            store: StoreChoice::Drawn,
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
        let mut rng = ChaCha20Rng::from_seed(derive_seed(self.seed, TAG_SCENARIO, 0));
        let scenario = Scenario::draw(
            &mut rng,
            DrawParams {
                seed: self.seed,
                scale: self.scale,
                clients: self.clients,
                window_ms: TRAFFIC_WINDOW_MS,
            },
        );
        let mut rng = ChaCha20Rng::from_seed(derive_seed(self.seed, TAG_PLAN, 0));
        let plan = FaultPlan::draw(
            &mut rng,
            &self.faults,
            self.store,
            &scenario,
            TRAFFIC_WINDOW_MS,
        );
        Replay {
            seed: self.seed,
            bind_vanity: self.bind_vanity,
            scenario,
            plan,
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
    /// The scenario.
    pub scenario: Scenario,
    /// The fault plan.
    pub plan: FaultPlan,
}

/// The outcome of one run.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// The seed.
    pub seed: u64,
    /// The scenario that ran (its `Display` is the summary line).
    pub scenario: Scenario,
    /// The fault plan that ran.
    pub plan: FaultPlan,
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
}

impl RunReport {
    /// The run as a replay file's content.
    pub fn replay(&self, bind_vanity: bool) -> Replay {
        Replay {
            seed: self.seed,
            bind_vanity,
            scenario: self.scenario.clone(),
            plan: self.plan.clone(),
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
    /// Store commits, injected commit failures, loads.
    pub commits: u64,
    /// Injected commit failures.
    pub failed_commits: u64,
    /// Relay opens and rebuilds.
    pub loads: u64,
    /// Leadership terms (failover topology; 0 otherwise).
    pub terms: u64,
    /// Commits and loads refused by the fence (failover topology).
    pub fenced: u64,
}

/// A raw client's slow-consumer episode.
#[derive(Debug, Clone)]
pub(super) struct StuckRec {
    pub(super) host: String,
    /// When it stopped reading (and started provoking answers).
    pub(super) stopped_ms: u64,
    /// When its own writes blocked (the relay stopped reading it), if they did.
    pub(super) blocked_ms: Option<u64>,
    /// When its socket disappeared (the relay reset it), if it did within the bound.
    pub(super) closed_ms: Option<u64>,
    /// Frames sent to provoke answers.
    pub(super) provoke: u32,
    /// The pause outlasted the bound (or never ended): the relay had to close it.
    pub(super) must_close: bool,
}

/// A probe sent in the probe round.
#[derive(Debug, Clone)]
pub(super) struct ProbeRec {
    pub(super) kind: &'static str,
    pub(super) from: usize,
    pub(super) to: usize,
    pub(super) conv: String,
    /// Message id or call id.
    pub(super) id: String,
    pub(super) sent_ms: u64,
}

/// State shared between the runner and the scripted hosts (single-threaded: turmoil runs every
/// host on the runner's thread).
#[derive(Debug, Default)]
pub(super) struct World {
    pub(super) aliases: BTreeMap<usize, String>,
    pub(super) uuids: BTreeMap<usize, String>,
    pub(super) requested: BTreeSet<usize>,
    pub(super) accepted: BTreeSet<usize>,
    pub(super) ready: BTreeSet<usize>,
    /// Conversation of each pair, as learned by its members.
    pub(super) convs: BTreeMap<usize, String>,
    /// Simulated ms at which traffic starts.
    pub(super) traffic_start_ms: Option<u64>,
    /// Simulated ms at which everything was healed.
    pub(super) heal_ms: Option<u64>,
    /// Next action index per client (survives client crashes).
    pub(super) next_action: BTreeMap<usize, usize>,
    /// Host incarnations (seed derivation across restarts).
    pub(super) incarnations: BTreeMap<usize, u64>,
    /// Clients whose second device is logged in (or logging in) right now: their primary
    /// device leaves the session to it (see [`keep_session`]).
    pub(super) second_device_on: BTreeSet<usize>,
    /// When the relay host actually powered off, in simulated ms (a crash the plan names, or
    /// one a store fault asked for at a later commit than its plan event).
    pub(super) relay_off_ms: Vec<u64>,
    /// The relay's links are held right now (a slow commit: see `Sim::stall`).
    pub(super) relay_stalled: bool,
    /// Second-device stores.
    pub(super) second_stores: Vec<(Device, SharedStore)>,
    /// Every alias each client had, oldest first (a bind retires the previous one).
    pub(super) alias_history: BTreeMap<usize, Vec<String>>,
    /// Orders, listings, binds and the audit.
    pub(super) commerce: CommerceWorld,
    /// Strangers' `(uuid, alias)` by index.
    pub(super) strangers: BTreeMap<usize, (String, String)>,
    /// Friend requests each stranger rejected.
    pub(super) rejected: BTreeMap<usize, usize>,
    /// Acts for the raw hosts, by host name.
    pub(super) hostile_inbox: BTreeMap<String, VecDeque<HostileAct>>,
    /// Raw clients' direct observations.
    pub(super) findings: Vec<Violation>,
    /// Slow-consumer episodes.
    pub(super) stuck: Vec<StuckRec>,
    /// Ids of messages a stranger tried to put into someone else's conversation.
    pub(super) evil_ids: Vec<String>,
    /// Honest messages sent: id -> (conv, recipient alias).
    pub(super) sent_ids: BTreeMap<String, (String, String)>,
    /// Ids retracted by their own authors.
    pub(super) honest_retracts: BTreeSet<String>,
    /// Media sent: message id -> (conv, sha256 of the plaintext).
    pub(super) media_sent: BTreeMap<String, (String, String)>,
    /// Media downloads by recipients: (client, message id, outcome).
    pub(super) media_checks: Vec<(usize, String, Result<bool, String>)>,
    /// Probes sent.
    pub(super) probes: Vec<ProbeRec>,
    /// Offline spells: (client, from ms, to ms).
    pub(super) offline: Vec<(usize, u64, u64)>,
    /// Clients whose push targets the relay took.
    pub(super) push_registered: BTreeSet<usize>,
    /// Push targets (Web Push subscription ids, FCM and APNs tokens) of each client.
    pub(super) push_targets: BTreeMap<usize, Vec<String>>,
    /// The subscription whose browser unsubscribed, and when (simulated ms).
    pub(super) revoked: Option<(String, u64)>,
    /// When the final relay clock jump happened (simulated ms).
    pub(super) final_jump_ms: Option<u64>,
    /// The failover topology's lease (who is active).
    pub(super) lease: Option<StoreCtl>,
}

impl World {
    /// The host of the active relay: `relay`, or in the failover topology the lease holder
    /// (`relay`, the balancer, while nobody holds it).
    pub(super) fn active_relay(&self) -> String {
        self.lease
            .as_ref()
            .and_then(StoreCtl::leader)
            .unwrap_or_else(|| RELAY.to_owned())
    }
}

type Shared = Rc<RefCell<World>>;

pub(super) fn sim_ms() -> u64 {
    turmoil::sim_elapsed().map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

pub(super) async fn sleep_ms(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

const TAG_SCENARIO: u64 = 1;
const TAG_PLAN: u64 = 2;
const TAG_RELAY: u64 = 3;
const TAG_AUDITOR: u64 = 4;
const TAG_MEDIA: u64 = 5;

pub(super) fn derive_seed(seed: u64, tag: u64, n: u64) -> [u8; 32] {
    let mut out = [0u8; 32];
    out[..8].copy_from_slice(&seed.to_le_bytes());
    out[8..16].copy_from_slice(&tag.to_le_bytes());
    out[16..24].copy_from_slice(&n.to_le_bytes());
    out
}

/// A client's clock: simulated time plus a skew the runner sets (clock-skew faults).
#[derive(Debug, Clone, Default)]
pub struct SkewClock {
    skew_ms: Arc<AtomicI64>,
}

impl SkewClock {
    /// Sets the skew (negative: behind).
    pub fn set(&self, skew_ms: i64) {
        self.skew_ms.store(skew_ms, Ordering::SeqCst);
    }
    /// The current skew.
    pub fn get(&self) -> i64 {
        self.skew_ms.load(Ordering::SeqCst)
    }
}

impl Clock for SkewClock {
    fn now(&self) -> UnixMs {
        let base = i64::try_from(SimClock::default().now().0).unwrap_or(i64::MAX);
        UnixMs(u64::try_from(base.saturating_add(self.get()).max(0)).unwrap_or(0))
    }
}

/// Runs one seed (or the replay in `config`).
pub fn run(config: &RunConfig) -> RunReport {
    let replay = config.draw();
    let scan = LogScan::default();
    let relay = RelaySetup::of(config);
    let go = || run_inner(&replay, &relay);
    let mut inner = if let Some(filter) = &config.log {
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_ansi(false)
            .with_timer(SimTime)
            .with_writer(std::io::stderr)
            .finish();
        tracing::subscriber::with_default(subscriber, go)
    } else if config.capture_logs {
        // Everything at DEBUG but turmoil's own per-step spans (a span per host per step,
        // formatted: they cost more than the rest of the run's logging).
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(LOG_FILTER))
            .with_ansi(false)
            .without_time()
            .with_writer(scan.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, go)
    } else {
        go()
    };
    if config.capture_logs && config.log.is_none() {
        oracles::logs_free_of_canaries(
            &scan.suspects(),
            &replay.scenario.canaries(),
            &mut inner.violations,
        );
    }
    let lines = trace::lines(&inner.records);
    let trace_hash = trace::hash(&lines);
    RunReport {
        seed: replay.seed,
        scenario: replay.scenario,
        plan: replay.plan,
        trace: lines,
        trace_hash,
        violations: inner.violations,
        simulated: Duration::from_millis(inner.end_ms),
        stats: inner.stats,
    }
}

struct Inner {
    records: Vec<Record>,
    violations: Vec<Violation>,
    end_ms: u64,
    stats: RunStats,
}

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
    /// Relay links held by a commit stall (restored when it ends).
    stalled: BTreeSet<String>,
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
    EndStall,
    /// A frozen relay host resumes (failover).
    Thaw(String),
}

/// The turmoil world plus the runner's bookkeeping.
struct Sim<'a> {
    sim: turmoil::Sim<'a>,
    hosts: Vec<String>,
    links: Links,
    relay_clock: OffsetClock,
    skews: BTreeMap<String, Vec<SkewClock>>,
    store: StoreCtl,
    internal: BTreeMap<u64, Vec<Internal>>,
    trace: Trace,
    /// Where power-offs of the relay are recorded ([`World::relay_off_ms`]).
    world: Shared,
    /// The plan's minimum link latency: a slow consumer's link is pinned to it (see
    /// [`FaultAction::Hostile`] in `apply`).
    steady_latency_ms: u64,
    /// The failover topology: `relay` is a load balancer in front of `relay-a` and `relay-b`
    /// (see [`super::failover`]); a crash or restart of `relay` hits one of them.
    failover: bool,
    /// Relay hosts powered off by a crash of `relay` (failover), oldest first: a restart of
    /// `relay` starts the oldest.
    relay_down: VecDeque<String>,
}

impl Sim<'_> {
    fn now(&self) -> u64 {
        u64::try_from(self.sim.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn note(&self, text: String) {
        self.trace.push(Record::Note {
            t_ms: self.now(),
            text,
        });
    }

    fn schedule(&mut self, at: u64, what: Internal) {
        self.internal.entry(at).or_default().push(what);
    }

    /// Cuts every link from `host`, drops its runtime, restores the links. In the failover
    /// topology, `relay` means the active relay (the lease holder; else the first relay up).
    fn power_off(&mut self, host: &str) {
        if self.failover && host == RELAY {
            let up = |h: &String| !self.links.down.contains(h);
            let target = self
                .store
                .holder()
                .filter(up)
                .or_else(|| [RELAY_A, RELAY_B].map(str::to_owned).into_iter().find(up));
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
        let relay = host == RELAY || host == RELAY_A || host == RELAY_B;
        if host == RELAY {
            self.store.set_powered_off(true);
        } else if relay {
            self.store.set_dead(host, true);
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
            Dir::Healthy
                if frozen
                    || self.links.stalled.contains(to)
                    || self.links.stalled.contains(from) =>
            {
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
            } else if host == RELAY_A || host == RELAY_B {
                self.store.set_dead(host, false);
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
        let target = self
            .store
            .holder()
            .filter(|h| !self.links.down.contains(h) && !self.links.frozen.contains(h));
        let Some(target) = target else {
            self.note("no active relay to freeze".into());
            return;
        };
        self.note(format!("the active relay is {target}"));
        self.links.frozen.insert(target.clone());
        self.store.set_frozen(&target, true);
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

    fn thaw(&mut self, host: &str) {
        if !self.links.frozen.remove(host) {
            return;
        }
        self.store.set_frozen(host, false);
        let others: Vec<String> = self.hosts.iter().filter(|h| *h != host).cloned().collect();
        for h in &others {
            self.sim.release(host, h.as_str());
        }
    }

    fn apply(&mut self, action: &FaultAction, world: &Shared) {
        let now = self.now();
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
            FaultAction::MaxLatency { ms } => {
                self.sim.set_max_message_latency(Duration::from_millis(*ms));
            }
            FaultAction::Crash { host } => self.power_off(host),
            FaultAction::Restart { host } => self.power_on(host),
            FaultAction::ClockJump { ms } => {
                self.relay_clock.advance(*ms);
            }
            // Applied before the run started (see `FaultAction::SetSkew`).
            FaultAction::SetSkew { .. } => {}
            FaultAction::FailCommits { commits } => self.store.fail_commits(*commits),
            FaultAction::StoreDown { ms } => self.store.down_until(now + ms),
            FaultAction::StallCommit { ms } => self.stall(now + ms),
            FaultAction::CrashAfterCommit { restart_after_ms } => {
                self.store.crash_after_commit(*restart_after_ms);
            }
            FaultAction::CrashMidBatch { restart_after_ms } => {
                self.store.crash_mid_batch(*restart_after_ms);
            }
            FaultAction::Freeze { ms } => self.freeze(now + ms),
            FaultAction::Hostile { host, act } => {
                if matches!(act, HostileAct::StopReading { .. }) {
                    // The slow consumer's link gets a steady latency from now on. Under
                    // jitter, its paced frames reach the relay in clumps, the relay answers a
                    // clump with one write, and turmoil's window counts writes: the relay's
                    // writes might then never block, and the stuck-client oracle would hold it
                    // to a close it has no reason to make (seed 8, `--faults all`).
                    // (It goes straight to the active relay in the failover topology.)
                    let relays: &[&str] = if self.failover {
                        &[RELAY, RELAY_A, RELAY_B]
                    } else {
                        &[RELAY]
                    };
                    for &relay in relays {
                        self.sim.set_link_latency(
                            host.as_str(),
                            relay,
                            Duration::from_millis(self.steady_latency_ms),
                        );
                    }
                }
                world
                    .borrow_mut()
                    .hostile_inbox
                    .entry(host.clone())
                    .or_default()
                    .push_back(act.clone());
            }
        }
    }

    /// Holds every healthy relay link until `until` (the relay's loop is blocked on a slow
    /// commit: nothing goes in or out).
    fn stall(&mut self, until: u64) {
        let others: Vec<String> = self.hosts.iter().filter(|h| *h != RELAY).cloned().collect();
        for h in others {
            let healthy = self.links.get(RELAY, &h) == Dir::Healthy
                && self.links.get(&h, RELAY) == Dir::Healthy;
            if healthy && self.links.stalled.insert(h.clone()) {
                self.sim.hold(RELAY, h.as_str());
            }
        }
        self.schedule(until, Internal::EndStall);
        self.world.borrow_mut().relay_stalled = true;
    }

    fn end_stall(&mut self) {
        self.world.borrow_mut().relay_stalled = false;
        for h in std::mem::take(&mut self.links.stalled) {
            if self.links.get(RELAY, &h) == Dir::Healthy
                && self.links.get(&h, RELAY) == Dir::Healthy
            {
                self.sim.release(RELAY, h.as_str());
            }
        }
    }

    /// Runs what the runner scheduled for now or earlier, and power-offs the store asked for.
    fn housekeeping(&mut self) {
        let now = self.now();
        if let Some(req) = self.store.take_crash_request() {
            self.note(format!(
                "relay powers off (store fault); restart in {} ms",
                req.restart_after_ms
            ));
            self.power_off(RELAY);
            self.schedule(
                now + req.restart_after_ms,
                Internal::Restart(RELAY.to_owned()),
            );
        }
        while let Some(entry) = self.internal.first_entry() {
            if *entry.key() > now {
                break;
            }
            for what in entry.remove() {
                match what {
                    Internal::Restart(h) => self.power_on(&h),
                    Internal::EndStall => self.end_stall(),
                    Internal::Thaw(h) => self.thaw(&h),
                }
            }
        }
    }

    /// Repairs every link, releases every hold, restarts every powered-off host, turns the
    /// store faults off, resets latency.
    fn heal(&mut self, plan: &FaultPlan) {
        self.end_stall();
        for h in self.links.frozen.clone() {
            self.thaw(&h);
        }
        self.store.heal();
        let hosts = self.hosts.clone();
        for h in hosts.iter().filter(|h| *h != RELAY) {
            self.sim.repair(h.as_str(), RELAY);
            self.sim.release(h.as_str(), RELAY);
        }
        self.links.dirs.clear();
        self.sim
            .set_max_message_latency(Duration::from_millis(plan.latency_ms.1));
        self.internal.retain(|_, v| {
            v.retain(|i| !matches!(i, Internal::EndStall));
            !v.is_empty()
        });
        self.relay_down.clear();
        for h in std::mem::take(&mut self.links.down) {
            if h == RELAY {
                self.store.set_powered_off(false);
            } else if h == RELAY_A || h == RELAY_B {
                self.store.set_dead(&h, false);
            }
            self.sim.bounce(h.as_str());
        }
    }
}

#[allow(
    clippy::too_many_lines,
    reason = "the run's phases in order; each step is a call"
)]
fn run_inner(replay: &Replay, relay: &RelaySetup) -> Inner {
    let relay_clock = OffsetClock::new(Arc::new(SimClock::default()));
    let push = PushWorld::new(
        replay.seed,
        &(Arc::new(relay_clock.clone()) as Arc<dyn Clock>),
    );
    let scenario = Rc::new(replay.scenario.clone());
    let plan = &replay.plan;
    let seed = replay.seed;
    let trace = Trace::default();
    let world: Shared = Rc::default();
    let mut violations = Vec::new();
    let setup_bound = scenario.scale.setup_bound_ms();

    let turmoil = turmoil::Builder::new()
        .rng_seed(seed)
        .min_message_latency(Duration::from_millis(plan.latency_ms.0))
        .max_message_latency(Duration::from_millis(plan.latency_ms.1))
        .tick_duration(Duration::from_millis(TICK_MS))
        .tcp_capacity(TCP_CAPACITY)
        .simulation_duration(Duration::from_secs(7_200))
        .build();

    let store = match SimStore::new(plan.store) {
        Ok(s) => s,
        Err(e) => {
            return Inner {
                records: Vec::new(),
                violations: vec![Violation::new(
                    "host-error",
                    format!("cannot create the relay's store: {e}"),
                )],
                end_ms: 0,
                stats: RunStats::default(),
            };
        }
    };
    let mut sim = Sim {
        sim: turmoil,
        hosts: Vec::new(),
        links: Links::default(),
        relay_clock: relay_clock.clone(),
        skews: BTreeMap::new(),
        store: store.ctl().clone(),
        internal: BTreeMap::new(),
        trace: trace.clone(),
        world: world.clone(),
        steady_latency_ms: plan.latency_ms.0,
        failover: plan.kinds.contains(&FaultKind::Failover),
        relay_down: VecDeque::new(),
    };
    if sim.failover {
        world.borrow_mut().lease = Some(store.ctl().clone());
    }
    #[cfg(feature = "planted-bugs")]
    if relay.unfenced {
        store.ctl().set_unfenced();
    }

    // The relay: its store and blobs outlive crashes.
    let blobs = MemoryBlobStore::new();
    let relay_config = relay.config.clone();
    let limits = relay.limits;
    let deliver_pushes = relay.push;
    let relay_seed = u64::from_le_bytes(
        derive_seed(seed, TAG_RELAY, 0)[..8]
            .try_into()
            .unwrap_or([0; 8]),
    );
    if sim.failover {
        let ctl = store.ctl().clone();
        sim.hosts.push(RELAY.to_owned());
        sim.sim.host(RELAY, move || {
            let ctl = ctl.clone();
            async move {
                failover::balancer(ctl, RELAY_PORT).await?;
                Ok(())
            }
        });
        for (n, host) in [RELAY_A, RELAY_B].into_iter().enumerate() {
            let relay_seed = u64::from_le_bytes(
                derive_seed(seed, TAG_RELAY, n as u64 + 1)[..8]
                    .try_into()
                    .unwrap_or([0; 8]),
            );
            let (store, blobs, config) = (store.clone(), blobs.clone(), relay_config.clone());
            let clock = relay_clock.clone();
            let push = push.clone();
            sim.hosts.push(host.to_owned());
            sim.sim.host(host, move || {
                let (store, blobs, config) = (store.clone(), blobs.clone(), config.clone());
                let (clock, push) = (clock.clone(), push.clone());
                async move {
                    loop {
                        let mut config = config.clone();
                        let delivery = push.delivery(&mut config);
                        let blobs = blobs.clone();
                        let make: failover::MakeRelay = Arc::new(move |fenced| {
                            Relay::with_blobs(
                                config.clone(),
                                Box::new(fenced),
                                Box::new(blobs.clone()),
                                relay_seed,
                            )
                        });
                        let leadership = SimLeadership::new(host, store.clone(), make);
                        let server = RelayServer::campaigning(leadership);
                        let delivery = deliver_pushes.then_some(delivery);
                        serve_relay(server, limits, &clock, delivery).await;
                    }
                }
            });
        }
    } else {
        let store = store.clone();
        let clock = relay_clock.clone();
        let push = push.clone();
        sim.hosts.push(RELAY.to_owned());
        sim.sim.host(RELAY, move || {
            let (store, blobs, config) = (store.clone(), blobs.clone(), relay_config.clone());
            let clock = clock.clone();
            let push = push.clone();
            async move {
                // A supervisor: the relay binary exits when it cannot open its store at
                // start (e.g. the store is down), and is started again.
                loop {
                    let (store, blobs, mut config) = (store.clone(), blobs.clone(), config.clone());
                    let delivery = push.delivery(&mut config);
                    let open = move || {
                        Relay::with_blobs(
                            config.clone(),
                            Box::new(store.open()?),
                            Box::new(blobs.clone()),
                            relay_seed,
                        )
                    };
                    let delivery = deliver_pushes.then_some(delivery);
                    serve_relay(RelayServer::new(open), limits, &clock, delivery).await;
                }
            }
        });
    }

    // The outside world on one host (turmoil scans every link per host per step, so fewer
    // hosts is faster): the payment processor and a forger (wrong secret), the push service,
    // and the commerce auditor's app.
    let payments = Payments {
        processor: PaymentProcessor::new(WEBHOOK_SECRET, endpoint()),
        forger: PaymentProcessor::new(b"forger-guess".as_slice(), endpoint()),
        faults: plan.webhook,
        enabled: plan.kinds.contains(&FaultKind::Webhook),
    };
    let clients = scenario.accounts.len();
    let stores: Vec<SharedStore> = (0..clients).map(|_| SharedStore::new()).collect();
    let clocks: Vec<SkewClock> = (0..clients).map(|_| SkewClock::default()).collect();
    let audit_store = SharedStore::new();
    let auditor_mnemonic = {
        let mut rng = ChaCha20Rng::from_seed(derive_seed(seed, TAG_AUDITOR, 0));
        client_core::keys::new_mnemonic(&mut rng)
            .expose()
            .to_owned()
    };
    let host_ctx = |me: usize, store: &SharedStore, clock: &SkewClock| {
        Rc::new(HostCtx {
            me,
            seed,
            scenario: Rc::clone(&scenario),
            world: Rc::clone(&world),
            trace: trace.clone(),
            store: store.clone(),
            clock: clock.clone(),
            payments: payments.clone(),
            push: push.clone(),
            bind_vanity: replay.bind_vanity,
        })
    };
    {
        let processor = payments.processor.clone();
        let forger = payments.forger.clone();
        let push = push.clone();
        let ctx = host_ctx(clients, &audit_store, &SkewClock::default());
        let mnemonic = auditor_mnemonic;
        sim.hosts.push(PAY.to_owned());
        sim.sim.host(PAY, move || {
            let (processor, forger, push) = (processor.clone(), forger.clone(), push.clone());
            let ctx = Rc::clone(&ctx);
            let mnemonic = mnemonic.clone();
            async move {
                let genuine = processor.run::<Turmoil>(
                    SocketAddr::from((Ipv4Addr::UNSPECIFIED, PAY_PORT)),
                    std::future::pending(),
                );
                let forged = forger.run::<Turmoil>(
                    SocketAddr::from((Ipv4Addr::UNSPECIFIED, FORGER_PORT)),
                    std::future::pending(),
                );
                let on = |port| SocketAddr::from((Ipv4Addr::UNSPECIFIED, port));
                let web = push
                    .web
                    .run::<Turmoil>(on(pushworld::WEB_PUSH_PORT), std::future::pending());
                let fcm = push
                    .fcm
                    .run::<Turmoil>(on(pushworld::FCM_PORT), std::future::pending());
                let apns = push
                    .apns
                    .run::<Turmoil>(on(pushworld::APNS_PORT), std::future::pending());
                let (a, b, c, d, e, ()) = tokio::join!(
                    genuine,
                    forged,
                    web,
                    fcm,
                    apns,
                    auditor_host(ctx, &mnemonic)
                );
                a?;
                b?;
                c?;
                d?;
                e?;
                Ok(())
            }
        });
    }
    for host in scenario.client_hosts() {
        let ctxs: Vec<Rc<HostCtx>> = scenario
            .clients_on(&host)
            .into_iter()
            .map(|i| host_ctx(i, &stores[i], &clocks[i]))
            .collect();
        sim.skews.insert(
            host.clone(),
            scenario
                .clients_on(&host)
                .into_iter()
                .map(|i| clocks[i].clone())
                .collect(),
        );
        sim.hosts.push(host.clone());
        sim.sim.host(host.as_str(), move || {
            let ctxs = ctxs.clone();
            async move {
                futures_util::future::join_all(ctxs.into_iter().map(client_app)).await;
                Ok(())
            }
        });
    }
    for (i, s) in scenario.strangers.iter().enumerate() {
        // A stranger with nothing to do (no request to reject, no act in the plan) costs a
        // host per step for nothing.
        let busy = scenario.rejections.iter().any(|r| r.stranger == i)
            || plan
                .events
                .iter()
                .any(|e| e.action.hosts().contains(&s.host.as_str()));
        if !busy {
            continue;
        }
        let ctx = host_ctx(i, &SharedStore::new(), &SkewClock::default());
        sim.hosts.push(s.host.clone());
        sim.sim.host(s.host.as_str(), move || {
            let ctx = Rc::clone(&ctx);
            async move {
                super::hostile::stranger_host(ctx).await;
                Ok(())
            }
        });
    }

    // Clock skews hold from the start.
    for e in &plan.events {
        if let FaultAction::SetSkew { host, skew_ms } = &e.action {
            for clock in sim.skews.get(host).into_iter().flatten() {
                clock.set(*skew_ms);
            }
        }
    }

    // Step: setup, traffic with faults, heal, liveness.
    let mut next_fault = 0;
    let mut healed = false;
    let mut final_jump = false;
    let mut steps = 0u64;
    let end_ms;
    loop {
        steps += 1;
        if let Err(e) = sim.sim.step() {
            violations.push(Violation::new("host-error", e.to_string()));
            end_ms = sim.now();
            break;
        }
        sim.housekeeping();
        let now = sim.now();
        let start = world.borrow().traffic_start_ms;
        let Some(start) = start else {
            if world.borrow().ready.len() == clients {
                world.borrow_mut().traffic_start_ms = Some(now);
                sim.note("setup done: traffic starts".into());
                if push.revoke_one {
                    revoke_one(&push, &scenario, &world, &sim, now);
                }
            } else if now > setup_bound {
                violations.push(Violation::new(
                    "setup",
                    format!(
                        "setup not done within {setup_bound} ms ({} of {clients} clients ready)",
                        world.borrow().ready.len()
                    ),
                ));
                end_ms = now;
                break;
            }
            continue;
        };
        while let Some(fault) = plan.events.get(next_fault)
            && start + fault.at_ms <= now
        {
            sim.apply(&fault.action, &world);
            sim.note(format!("fault: {}", fault.action));
            next_fault += 1;
        }
        if !healed && now >= start + TRAFFIC_WINDOW_MS {
            // Faults scheduled past the window never happen.
            next_fault = plan.events.len();
            sim.heal(plan);
            healed = true;
            world.borrow_mut().heal_ms = Some(now);
            sim.note("healed: liveness phase".into());
        }
        let end = start + TRAFFIC_WINDOW_MS + LIVENESS_BOUND_MS;
        if !final_jump && now + commerce::FINAL_JUMP_BEFORE_END_MS >= end {
            final_jump = true;
            let late = commerce::in_flight_orders(&payments.processor);
            sim.note(format!(
                "final relay clock jump +{} s; orders with webhooks in flight: {late:?}",
                commerce::FINAL_JUMP_MS / 1_000
            ));
            let after = relay_clock.advance(commerce::FINAL_JUMP_MS);
            let mut w = world.borrow_mut();
            w.commerce.audit.late_at_final_jump = late;
            w.commerce.audit.final_jump_relay_ms = Some(after.0);
            w.final_jump_ms = Some(now);
        }
        if now >= end {
            end_ms = now;
            break;
        }
    }
    let seen = push.seen();
    let count = |k: PushKind| seen.iter().filter(|p| p.kind == k).count();
    trace.push(Record::Note {
        t_ms: end_ms,
        text: format!(
            "pushes received: web {}, fcm {}, apns {}; answered gone: {}",
            count(PushKind::Web),
            count(PushKind::Fcm),
            count(PushKind::Apns),
            seen.iter().filter(|p| p.gone).count()
        ),
    });
    if sim.failover {
        let history = store.ctl().history();
        let terms: Vec<String> = history
            .terms
            .iter()
            .map(|(at, host, epoch)| format!("{host} epoch {epoch} at {at} ms"))
            .collect();
        trace.push(Record::Note {
            t_ms: end_ms,
            text: format!(
                "failover: terms [{}]; commits and loads fenced: {}",
                terms.join(", "),
                history.counts.fenced
            ),
        });
    }
    trace.push(Record::Note {
        t_ms: end_ms,
        text: "end".into(),
    });

    let records = trace.records();
    let history = store.ctl().history();
    let snapshot = store.snapshot().unwrap_or_default();
    let w = world.borrow();
    let input = oracles::Input {
        scenario: &scenario,
        plan,
        records: &records,
        stores: &stores,
        second_stores: &w.second_stores,
        convs: &w.convs,
        aliases: &w.alias_history,
        snapshot: &snapshot,
        history: &history,
        world: &w,
        pushes: &seen,
        start_ms: w.traffic_start_ms,
        heal_ms: w.heal_ms,
        end_ms,
        skews: &clocks.iter().map(SkewClock::get).collect::<Vec<_>>(),
    };
    oracles::check_all(&input, &mut violations);
    if !violations.iter().any(|v| v.oracle == "setup") {
        let jumps: Vec<u64> = w
            .traffic_start_ms
            .map(|s| plan.clock_jumps().map(|j| s + j).collect())
            .unwrap_or_default();
        let commerce_input = oracles::CommerceInput {
            world: &w.commerce,
            alias_history: &w.alias_history,
            records: &records,
            processor: &payments.processor,
            forger: &payments.forger,
            snapshot: &snapshot,
            jumps_ms: &jumps,
            free_quota: relay_config_quota(),
        };
        oracles::check_commerce(&commerce_input, &mut violations);
    }
    violations.sort();
    violations.dedup();
    let acked = records
        .iter()
        .filter(|r| {
            matches!(
                r,
                Record::Event {
                    event: client_core::machine::Event::StatusChange {
                        status: client_core::store::MessageStatus::Sent,
                        ..
                    },
                    ..
                }
            )
        })
        .count() as u64;
    Inner {
        records,
        violations,
        end_ms,
        stats: RunStats {
            steps,
            acked,
            commits: history.counts.commits,
            failed_commits: history.counts.failed,
            loads: history.counts.loads,
            terms: history.terms.len() as u64,
            fenced: history.counts.fenced,
        },
    }
}

/// One start of a relay host's server, configured as every relay of a run is; returns once
/// the server exited (it could not open its store, or its leadership failed for good) and the
/// restart delay passed: the host's supervisor loop starts it again.
async fn serve_relay(
    server: RelayServer,
    limits: ServeLimits,
    clock: &OffsetClock,
    delivery: Option<relay_server::PushDelivery>,
) {
    let mut server = server.with_limits(limits).with_clock(clock.clone());
    if let Some(delivery) = delivery {
        server = server.with_push(delivery);
    }
    let served = server
        .run::<Turmoil>(
            SocketAddr::from((Ipv4Addr::UNSPECIFIED, RELAY_PORT)),
            std::future::pending(),
        )
        .await;
    if let Err(error) = served {
        tracing::warn!(%error, "relay exited; the supervisor restarts it");
    }
    sleep_ms(RELAY_RESTART_MS).await;
}

/// How the relay of a run is configured (the same in every run but for planted bugs).
#[derive(Debug, Clone)]
struct RelaySetup {
    config: Config,
    limits: ServeLimits,
    /// Push delivery on (off only with a planted bug).
    push: bool,
    /// Planted: the shared store of the failover topology checks no epoch.
    #[cfg(feature = "planted-bugs")]
    unfenced: bool,
}

impl RelaySetup {
    #[cfg_attr(
        not(feature = "planted-bugs"),
        allow(unused_variables, reason = "only planted bugs change the relay")
    )]
    fn of(run: &RunConfig) -> Self {
        Self {
            config: Config {
                #[cfg(feature = "planted-bugs")]
                planted_bug: run.planted.and_then(super::planted::Planted::relay_bug),
                ..relay_config()
            },
            #[cfg(feature = "planted-bugs")]
            limits: run.planted.map_or_else(ServeLimits::default, |p| {
                p.serve_limits(ServeLimits::default())
            }),
            #[cfg(not(feature = "planted-bugs"))]
            limits: ServeLimits::default(),
            #[cfg(feature = "planted-bugs")]
            push: run.planted != Some(super::planted::Planted::NoPushDelivery),
            #[cfg(not(feature = "planted-bugs"))]
            push: true,
            #[cfg(feature = "planted-bugs")]
            unfenced: run.planted == Some(super::planted::Planted::UnfencedStore),
        }
    }
}

fn relay_config() -> Config {
    Config {
        pow_difficulty: 1,
        registrations_per_hour_per_addr: 100_000,
        msgs_per_min_per_user: 10_000,
        payment_webhook_secret: relay_core::config::WebhookSecret(WEBHOOK_SECRET.to_vec()),
        payment_page_base: format!("http://{PAY}:{PAY_PORT}/invoice"),
        ..Config::default()
    }
}

fn relay_config_quota() -> u32 {
    relay_config().free_channel_quota
}

/// What a client host's script needs.
pub(super) struct HostCtx {
    pub(super) me: usize,
    pub(super) seed: u64,
    pub(super) scenario: Rc<Scenario>,
    pub(super) world: Shared,
    pub(super) trace: Trace,
    pub(super) store: SharedStore,
    pub(super) clock: SkewClock,
    pub(super) payments: Payments,
    pub(super) push: PushWorld,
    pub(super) bind_vanity: bool,
}

pub(super) fn endpoint() -> Endpoint {
    Endpoint::parse(&format!("http://{RELAY}:{RELAY_PORT}"))
        .unwrap_or_else(|_| unreachable!("a static, valid base URL"))
}

/// One browser of the first Web Push client unsubscribes (its push service answers 410 from
/// now on); see [`pushworld`].
fn revoke_one(push: &PushWorld, scenario: &Scenario, world: &Shared, sim: &Sim<'_>, now: u64) {
    let mut w = world.borrow_mut();
    // Preferably a client that will go offline (only offline users are pushed).
    let goes_offline = |c: usize| {
        scenario
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
        push.web.unsubscribe(&sub);
        w.revoked = Some((sub, now));
        drop(w);
        sim.note(format!("c{c}'s second browser unsubscribed from Web Push"));
    }
}

fn start_client(
    ctx: &HostCtx,
    who: Device,
    store: SharedStore,
    incarnation: u64,
) -> Result<Client<Turmoil>, client::ClientError> {
    let tag = (who.client as u64) << 8 | u64::from(who.device);
    let options = ClientOptions::new(
        endpoint(),
        Arc::new(ctx.clock.clone()),
        derive_seed(ctx.seed, tag, incarnation),
    );
    let client = Client::<Turmoil>::start(store, options)?;
    let trace = ctx.trace.clone();
    client.on(EventKind::Any, move |event| {
        trace.push(Record::Event {
            t_ms: sim_ms(),
            who,
            event: event.clone(),
        });
    });
    Ok(client)
}

pub(super) fn note(ctx: &HostCtx, text: String) {
    ctx.trace.push(Record::Note {
        t_ms: sim_ms(),
        text,
    });
}

/// Registers (fresh store) or restores (restarted host), retrying until the relay answers.
async fn authenticate(client: &Client<Turmoil>, mnemonic: &str, nickname: &str, fresh: bool) {
    loop {
        let done = if fresh {
            client.register_account(mnemonic, nickname).await.is_ok()
        } else {
            client.restore_session().await.is_ok()
        };
        if done {
            return;
        }
        sleep_ms(RETRY_MS).await;
    }
}

/// One client app; runs again from the top after its host restarts.
async fn client_app(ctx: Rc<HostCtx>) {
    let me = ctx.me;
    // Many apps starting at once come up in waves turmoil's accept queue takes.
    sleep_ms((me / STORM_WAVE) as u64 * STORM_WAVE_MS).await;
    let incarnation = {
        let mut w = ctx.world.borrow_mut();
        // A second device on this host went down with it.
        w.second_device_on.remove(&me);
        let n = w.incarnations.entry(me).or_insert(0);
        *n += 1;
        *n
    };
    let who = Device {
        client: me,
        device: 0,
    };
    let Ok(mut client) = start_client(&ctx, who, ctx.store.clone(), incarnation) else {
        note(&ctx, format!("{who} could not start"));
        return;
    };
    let account = &ctx.scenario.accounts[me];
    let identity = ctx.store.load_identity().ok().flatten();
    authenticate(
        &client,
        &account.mnemonic,
        &account.nickname,
        identity.is_none(),
    )
    .await;
    if let Ok(Some(id)) = ctx.store.load_identity() {
        let known = ctx.world.borrow_mut().uuids.insert(me, id.uuid.clone());
        if known.is_none() {
            note(&ctx, format!("{who} is account {}", id.uuid));
        }
    }
    if let Ok(Some(alias)) = client.alias_id().await {
        client.init_calls(&alias, false);
        // A restarted host may still hold the alias a bind retired: the world keeps the
        // newest one.
        let mut w = ctx.world.borrow_mut();
        if let std::collections::btree_map::Entry::Vacant(e) = w.aliases.entry(me) {
            e.insert(alias.clone());
            w.alias_history.insert(me, vec![alias]);
        }
    }
    drop(client.connect().await);
    if !ctx.world.borrow().ready.contains(&me) {
        setup(&ctx, &client).await;
    }
    let audit_at = audit_times(&ctx).await.0;
    let script = async {
        traffic(&ctx, &client).await;
        probe_round(&ctx, &client).await;
        std::future::pending::<()>().await;
    };
    tokio::join!(
        script,
        commerce::bind_loop(&ctx, &client, audit_at),
        answer_calls(&client),
        keep_session(&ctx, &client)
    );
}

/// `(audit, probes)` in simulated ms, once traffic started.
async fn audit_times(ctx: &HostCtx) -> (u64, u64) {
    wait_until(ctx, |w| w.traffic_start_ms.is_some()).await;
    let end =
        ctx.world.borrow().traffic_start_ms.unwrap_or(0) + TRAFFIC_WINDOW_MS + LIVENESS_BOUND_MS;
    (
        end - commerce::AUDIT_BEFORE_END_MS,
        end - commerce::PROBE_BEFORE_END_MS,
    )
}

/// The commerce auditor: registers its own account, then audits at the end.
async fn auditor_host(ctx: Rc<HostCtx>, mnemonic: &str) {
    let who = Device {
        client: ctx.me,
        device: 0,
    };
    let Ok(client) = start_client(&ctx, who, ctx.store.clone(), 1) else {
        return;
    };
    authenticate(&client, mnemonic, "auditor", true).await;
    let (audit_at, probe_at) = audit_times(&ctx).await;
    commerce::audit(&ctx, &client, audit_at, probe_at).await;
    std::future::pending::<()>().await;
}

pub(super) async fn wait_until(ctx: &HostCtx, f: impl Fn(&World) -> bool) {
    while !f(&ctx.world.borrow()) {
        sleep_ms(100).await;
    }
}

/// Friend requests (to friends, and to strangers who reject them), accepts, sessions, the
/// push token; idempotent (a crash cannot happen during setup, but a relay answer can be
/// lost, so every step is retried until its effect is visible).
async fn setup(ctx: &HostCtx, client: &Client<Turmoil>) {
    let me = ctx.me;
    let n = ctx.scenario.accounts.len();
    wait_until(ctx, |w| w.aliases.len() == n).await;
    let aliases = ctx.world.borrow().aliases.clone();
    for (_, pair) in ctx.scenario.pairs_of(me).filter(|(_, p)| p.a == me) {
        let to = &aliases[&pair.b];
        while client.contacts().send_friend_request(to).await.is_err() {
            sleep_ms(RETRY_MS).await;
        }
    }
    for r in ctx.scenario.rejections.iter().filter(|r| r.client == me) {
        wait_until(ctx, |w| w.strangers.contains_key(&r.stranger)).await;
        let to = ctx.world.borrow().strangers[&r.stranger].1.clone();
        while client.contacts().send_friend_request(&to).await.is_err() {
            sleep_ms(RETRY_MS).await;
        }
    }
    if ctx.scenario.push_clients.contains(&me) {
        register_push(ctx, client).await;
    }
    ctx.world.borrow_mut().requested.insert(me);
    wait_until(ctx, |w| w.requested.len() == n).await;
    let incoming: BTreeSet<String> = ctx
        .scenario
        .pairs_of(me)
        .filter(|(_, p)| p.b == me)
        .map(|(_, p)| aliases[&p.a].clone())
        .collect();
    loop {
        let Ok(friends) = client.contacts().sync_friends().await else {
            sleep_ms(RETRY_MS).await;
            continue;
        };
        let mut pending = 0;
        for f in &friends {
            if incoming.contains(f.alias_id.as_str())
                && f.status != wire::http::FriendStatus::Accepted
            {
                pending += 1;
                drop(
                    client
                        .contacts()
                        .accept_friend_request(&f.friendship_id.0.to_string())
                        .await,
                );
            }
        }
        if pending == 0 {
            break;
        }
    }
    ctx.world.borrow_mut().accepted.insert(me);
    wait_until(ctx, |w| w.accepted.len() == n).await;
    loop {
        if let Ok(friends) = client.contacts().sync_friends().await {
            let mut all = true;
            for (index, pair) in ctx.scenario.pairs_of(me) {
                let peer = &aliases[&pair.peer(me)];
                let conv = friends
                    .iter()
                    .find(|f| f.alias_id.as_str() == peer)
                    .and_then(|f| f.conversation_id.as_ref());
                match conv {
                    Some(c) => {
                        ctx.world
                            .borrow_mut()
                            .convs
                            .insert(index, c.as_str().to_owned());
                    }
                    None => all = false,
                }
            }
            if all {
                break;
            }
        }
        sleep_ms(RETRY_MS).await;
    }
    ctx.world.borrow_mut().ready.insert(me);
}

/// Registers this client's push targets ([`PushKind::of`]): two Web Push subscriptions (two
/// browsers, each subscribed with the key the relay serves), or an FCM or APNs token. A
/// target counts once the relay acknowledged it.
async fn register_push(ctx: &HostCtx, client: &Client<Turmoil>) {
    let me = ctx.me;
    let mut targets = Vec::new();
    match PushKind::of(me) {
        PushKind::Web => {
            // A browser passes the served key to `pushManager.subscribe`; the stand-in checks
            // every VAPID JWT against the key the relay was configured with.
            if client.push().vapid_key().await.is_err() {
                note(ctx, format!("c{me} could not read the VAPID key"));
            }
            for _ in 0..2 {
                let sub = ctx.push.subscribe();
                let request = wire::http::PushSubscribeRequest {
                    endpoint: sub.endpoint.clone(),
                    keys: wire::http::PushKeys {
                        p256dh: sub.p256dh.clone(),
                        auth: sub.auth.clone(),
                    },
                };
                for _ in 0..SETUP_ATTEMPTS {
                    if client.push().subscribe(&request).await.is_ok() {
                        targets.push(sub.id);
                        break;
                    }
                    sleep_ms(RETRY_MS).await;
                }
            }
        }
        kind => {
            let request = if kind == PushKind::Fcm {
                wire::http::PushRegisterRequest {
                    token: Some(pushworld::fcm_token(me)),
                    device_token: None,
                    platform: "android".to_owned(),
                }
            } else {
                wire::http::PushRegisterRequest {
                    token: None,
                    device_token: Some(pushworld::apns_token(me)),
                    platform: "ios".to_owned(),
                }
            };
            for _ in 0..SETUP_ATTEMPTS {
                if client.push().register(&request).await.is_ok() {
                    targets.extend(request.token.or(request.device_token));
                    break;
                }
                sleep_ms(RETRY_MS).await;
            }
        }
    }
    if !targets.is_empty() {
        let mut w = ctx.world.borrow_mut();
        w.push_registered.insert(me);
        w.push_targets.insert(me, targets);
    }
}

/// Attempts of a push registration in setup.
const SETUP_ATTEMPTS: u32 = 10;

/// Runs this client's scripted actions at their times; actions due while the host was down
/// are skipped.
async fn traffic(ctx: &HostCtx, client: &Client<Turmoil>) {
    let me = ctx.me;
    wait_until(ctx, |w| w.traffic_start_ms.is_some()).await;
    let start = ctx.world.borrow().traffic_start_ms.unwrap_or(0);
    let actions: Vec<(usize, _)> = ctx
        .scenario
        .actions
        .iter()
        .enumerate()
        .filter(|(_, a)| a.client == me)
        .map(|(i, a)| (i, a.clone()))
        .collect();
    for (index, action) in actions {
        if ctx
            .world
            .borrow()
            .next_action
            .get(&me)
            .is_some_and(|n| index < *n)
        {
            continue;
        }
        let due = start + action.at_ms;
        let now = sim_ms();
        if due + 1_000 < now || ctx.world.borrow().heal_ms.is_some() {
            note(ctx, format!("c{me} skipped action {index} (host was down)"));
            ctx.world.borrow_mut().next_action.insert(me, index + 1);
            continue;
        }
        sleep_ms(due.saturating_sub(now)).await;
        perform(ctx, client, index, &action.kind).await;
        ctx.world.borrow_mut().next_action.insert(me, index + 1);
    }
}

fn record_sent(ctx: &HostCtx, who: Device, id: String, conv: String, peer: &str) {
    ctx.world
        .borrow_mut()
        .sent_ids
        .insert(id.clone(), (conv.clone(), peer.to_owned()));
    ctx.trace.push(Record::Sent {
        t_ms: sim_ms(),
        who,
        id,
        conv,
    });
}

/// The plaintext of media action `index`.
fn media_bytes(seed: u64, index: usize, len: u32) -> Vec<u8> {
    let mut rng = ChaCha20Rng::from_seed(derive_seed(seed, TAG_MEDIA, index as u64));
    let mut out = vec![0u8; len as usize];
    rng.fill_bytes(&mut out);
    out
}

pub(super) fn sha256_hex(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[allow(
    clippy::too_many_lines,
    reason = "one arm per action kind; each is short"
)]
async fn perform(ctx: &HostCtx, client: &Client<Turmoil>, index: usize, kind: &ActionKind) {
    let me = ctx.me;
    let who = Device {
        client: me,
        device: 0,
    };
    let target = |pair: usize| {
        let w = ctx.world.borrow();
        let peer = ctx.scenario.pairs[pair].peer(me);
        (
            w.convs.get(&pair).cloned().unwrap_or_default(),
            w.aliases.get(&peer).cloned().unwrap_or_default(),
        )
    };
    match kind {
        ActionKind::Send { pair, text } => {
            let (conv, peer) = target(*pair);
            match client.send_message(&conv, &peer, text, None).await {
                Ok(id) => record_sent(ctx, who, id, conv, &peer),
                Err(e) => note(ctx, format!("{who} send refused: {e}")),
            }
        }
        ActionKind::Burst {
            pair,
            count,
            canary,
        } => {
            let (conv, peer) = target(*pair);
            for i in 0..*count {
                let text = if i == 0 {
                    format!("burst {index}: {canary}")
                } else {
                    format!("burst {index} #{i}")
                };
                match client.send_message(&conv, &peer, &text, None).await {
                    Ok(id) => record_sent(ctx, who, id, conv.clone(), &peer),
                    Err(e) => {
                        note(ctx, format!("{who} burst refused at #{i}: {e}"));
                        break;
                    }
                }
            }
        }
        ActionKind::Offline { stay_ms } => {
            drop(client.disconnect().await);
            let from = sim_ms();
            note(ctx, format!("{who} goes offline for {stay_ms} ms"));
            tokio::select! {
                biased;
                () = sleep_ms(*stay_ms) => {}
                () = wait_until(ctx, |w| w.heal_ms.is_some()) => {}
            }
            drop(client.connect().await);
            ctx.world.borrow_mut().offline.push((me, from, sim_ms()));
            note(ctx, format!("{who} back online"));
        }
        ActionKind::Media { pair, bytes } => {
            let (conv, peer) = target(*pair);
            let data = media_bytes(ctx.seed, index, *bytes);
            match client.send_image(&conv, &peer, &data).await {
                Ok(id) => {
                    ctx.world
                        .borrow_mut()
                        .media_sent
                        .insert(id.clone(), (conv.clone(), sha256_hex(&data)));
                    record_sent(ctx, who, id, conv, &peer);
                }
                Err(e) => note(ctx, format!("{who} media refused: {e}")),
            }
        }
        ActionKind::Read { pair } => {
            let (conv, peer) = target(*pair);
            let history = client
                .get_history(&conv, None, None)
                .await
                .unwrap_or_default();
            let Some(seq) = history
                .iter()
                .filter(|m| !m.is_me)
                .filter_map(|m| m.seq)
                .max()
            else {
                return;
            };
            match client.mark_as_read(&conv, seq, &peer).await {
                Ok(()) => ctx.trace.push(Record::ReadMarked {
                    t_ms: sim_ms(),
                    who,
                    conv,
                    seq,
                }),
                Err(e) => note(ctx, format!("{who} read refused: {e}")),
            }
        }
        ActionKind::Typing { pair } => {
            let (conv, peer) = target(*pair);
            drop(client.send_typing(&conv, &peer).await);
        }
        ActionKind::Retract { pair } => {
            let (conv, peer) = target(*pair);
            let history = client
                .get_history(&conv, None, None)
                .await
                .unwrap_or_default();
            let Some(m) = history
                .iter()
                .rev()
                .find(|m| m.is_me && m.seq.is_some() && m.msg_type.is_none())
            else {
                return;
            };
            match client.retract_message(&m.id, &peer, &conv).await {
                Ok(()) => {
                    ctx.world.borrow_mut().honest_retracts.insert(m.id.clone());
                    note(ctx, format!("{who} retracted {}", m.id));
                }
                Err(e) => note(ctx, format!("{who} retract refused: {e}")),
            }
        }
        ActionKind::SecondDevice { stay_ms } => second_device(ctx, client, *stay_ms).await,
        ActionKind::BuyAlias { alias, pay } => commerce::buy_alias(ctx, client, alias, *pay).await,
        ActionKind::CreateChannel { price_usdt } => {
            commerce::create_channel(ctx, client, *price_usdt).await;
        }
        ActionKind::BuyChannel { slot, pay } => {
            commerce::buy_channel(ctx, client, *slot, *pay).await;
        }
        ActionKind::BuyQuota { pay } => commerce::buy_quota(ctx, client, *pay).await,
    }
}

/// After healing: a message and a typing notice to each of up to [`PROBE_PEERS`] peers, and
/// a call if its pair is in the call matching; then each media message received is downloaded and
/// checked against what its sender uploaded.
async fn probe_round(ctx: &HostCtx, client: &Client<Turmoil>) {
    let me = ctx.me;
    wait_until(ctx, |w| w.heal_ms.is_some()).await;
    let heal = ctx.world.borrow().heal_ms.unwrap_or(0);
    let at = heal + PROBE_AFTER_HEAL_MS + (me / STORM_WAVE) as u64 * STORM_WAVE_MS;
    sleep_ms(at.saturating_sub(sim_ms())).await;
    let who = Device {
        client: me,
        device: 0,
    };
    let peers: Vec<(usize, usize)> = ctx
        .scenario
        .pairs_of(me)
        .take(PROBE_PEERS)
        .map(|(i, p)| (i, p.peer(me)))
        .collect();
    let calls_to = call_matching(&ctx.scenario)
        .into_iter()
        .find(|p| ctx.scenario.pairs[*p].a == me);
    for (pair, peer) in peers {
        let (conv, alias) = {
            let w = ctx.world.borrow();
            (
                w.convs.get(&pair).cloned().unwrap_or_default(),
                w.aliases.get(&peer).cloned().unwrap_or_default(),
            )
        };
        let sent_ms = sim_ms();
        let text = format!("probe c{me} -> c{peer}");
        if let Ok(id) = client.send_message(&conv, &alias, &text, None).await {
            record_sent(ctx, who, id.clone(), conv.clone(), &alias);
            ctx.world.borrow_mut().probes.push(ProbeRec {
                kind: "message",
                from: me,
                to: peer,
                conv: conv.clone(),
                id,
                sent_ms,
            });
        }
        if client.send_typing(&conv, &alias).await.is_ok() {
            ctx.world.borrow_mut().probes.push(ProbeRec {
                kind: "typing",
                from: me,
                to: peer,
                conv: conv.clone(),
                id: String::new(),
                sent_ms: sim_ms(),
            });
        }
    }
    // client-core signs call signals with the alias given to `init_calls`; after a vanity
    // bind the relay names the new alias and the peer refuses the signal (`FromMismatch`),
    // so clients whose alias changed sit the call out.
    let rebound = |c: usize| {
        ctx.world
            .borrow()
            .alias_history
            .get(&c)
            .is_some_and(|h| h.len() > 1)
    };
    if let Some(pair) = calls_to
        && let Some(calls) = client.calls()
        && !rebound(me)
        && !rebound(ctx.scenario.pairs[pair].peer(me))
    {
        let peer = ctx.scenario.pairs[pair].peer(me);
        let (conv, alias) = {
            let w = ctx.world.borrow();
            (
                w.convs.get(&pair).cloned().unwrap_or_default(),
                w.aliases.get(&peer).cloned().unwrap_or_default(),
            )
        };
        let call_id = format!("call-c{me}-c{peer}");
        let mut options = client::CallOptions::default();
        options
            .fields
            .insert("sdp".to_owned(), serde_json::Value::from("v=0 offer"));
        let sent_ms = sim_ms();
        if calls.call(&alias, &call_id, options).await.is_ok() {
            ctx.world.borrow_mut().probes.push(ProbeRec {
                kind: "call",
                from: me,
                to: peer,
                conv,
                id: call_id,
                sent_ms,
            });
        }
    }
    check_media(ctx, client).await;
}

/// The pairs whose requester calls in the probe round: a matching (no client in two calls,
/// or the second offer would find it busy), greedy in pair order.
fn call_matching(scenario: &Scenario) -> Vec<usize> {
    let mut busy = BTreeSet::new();
    let mut out = Vec::new();
    for (i, p) in scenario.pairs.iter().enumerate() {
        if !busy.contains(&p.a) && !busy.contains(&p.b) {
            busy.insert(p.a);
            busy.insert(p.b);
            out.push(i);
        }
    }
    out
}

/// Downloads every media message this client received and compares it with what was sent.
async fn check_media(ctx: &HostCtx, client: &Client<Turmoil>) {
    let me = ctx.me;
    let sent = ctx.world.borrow().media_sent.clone();
    for (id, (conv, want)) in sent {
        let Ok(Some(m)) = client.get_message_data(&id).await else {
            continue;
        };
        if m.is_me {
            continue;
        }
        let key = m
            .media_url
            .as_deref()
            .unwrap_or(m.text.as_str())
            .trim_start_matches("[img]")
            .to_owned();
        // A lost response is retried; a refusal or undecryptable bytes are final.
        let mut outcome = Err(String::new());
        for _ in 0..MEDIA_ATTEMPTS {
            outcome = match client.media().download_decrypted(&key, &conv).await {
                Ok(data) => Ok(sha256_hex(&data) == want),
                Err(e) => Err(e.to_string()),
            };
            if outcome.is_ok() {
                break;
            }
            sleep_ms(RETRY_MS).await;
        }
        ctx.world.borrow_mut().media_checks.push((me, id, outcome));
    }
}

/// Answers every incoming call (the call probes need a callee).
async fn answer_calls(client: &Client<Turmoil>) {
    let mut events = client.subscribe();
    loop {
        let event = match events.recv().await {
            Ok(e) => e,
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        };
        if let client_core::machine::Event::Call(client_core::machine::CallEvent::Incoming {
            call_id,
            from,
            ..
        }) = event
            && let Some(calls) = client.calls()
        {
            let mut fields = serde_json::Map::new();
            fields.insert("sdp".to_owned(), serde_json::Value::from("v=0 answer"));
            drop(calls.answer(&from, &call_id, fields).await);
        }
    }
}

/// Another device logs into the same account (GOAWAY to the first), stays, leaves; then the
/// first device takes the session back.
async fn second_device(ctx: &HostCtx, client: &Client<Turmoil>, stay_ms: u64) {
    let me = ctx.me;
    let who = Device {
        client: me,
        device: 1,
    };
    let store = SharedStore::new();
    let incarnation = {
        let mut w = ctx.world.borrow_mut();
        w.second_stores.push((who, store.clone()));
        w.second_device_on.insert(me);
        w.second_stores.len() as u64
    };
    let Ok(second) = start_client(ctx, who, store, incarnation) else {
        ctx.world.borrow_mut().second_device_on.remove(&me);
        return;
    };
    let account = &ctx.scenario.accounts[me];
    let login = async {
        authenticate(&second, &account.mnemonic, &account.nickname, true).await;
        drop(second.connect().await);
        drop(second.contacts().sync_friends().await);
    };
    // The login may not finish (relay down, partition): give up when the stay ends.
    tokio::select! {
        biased;
        () = login => sleep_ms(stay_ms).await,
        () = sleep_ms(stay_ms) => {}
    }
    second.shutdown().await;
    note(ctx, format!("{who} left"));
    ctx.world.borrow_mut().second_device_on.remove(&me);
    take_session_back(ctx, client).await;
}

/// The primary device keeps its session: a GOAWAY or a terminal token refusal that comes while
/// no second device of the script is on (the login of a second device that already left, still
/// on its way to the relay when it left, say) is answered as the user of a primary device
/// would: [`take_session_back`].
async fn keep_session(ctx: &HostCtx, client: &Client<Turmoil>) {
    let mut events = client.subscribe();
    loop {
        let event = match events.recv().await {
            Ok(e) => e,
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        };
        let kicked = matches!(
            event,
            client_core::machine::Event::Goaway(_) | client_core::machine::Event::AuthFailed(_)
        );
        if kicked && !ctx.world.borrow().second_device_on.contains(&ctx.me) {
            note(
                ctx,
                format!("c{}/d0 lost its session with no second device on", ctx.me),
            );
            take_session_back(ctx, client).await;
        }
    }
}

/// The first device takes the session back after a second device left (the user opens the app
/// on it again). `connect` re-authenticates once when the relay refuses the old token; but if
/// the relay refused the fresh token too (the account logged in elsewhere between the first
/// device's re-authentication and its socket: the next second device, say), client-core has
/// stopped for good (terminal `AuthFailed`, "Refused token" in its machine doc) and `connect`
/// alone does nothing. The app then logs in again with the stored identity, as a real one
/// would when its user comes back to it.
async fn take_session_back(ctx: &HostCtx, client: &Client<Turmoil>) {
    let primary = Device {
        client: ctx.me,
        device: 0,
    };
    let last_auth = ctx.trace.last(|r| {
        matches!(r, Record::Event {
            who,
            event: client_core::machine::Event::Authenticated { .. }
                | client_core::machine::Event::AuthFailed(_),
            ..
        } if *who == primary)
    });
    let signed_out = matches!(
        last_auth,
        Some(Record::Event {
            event: client_core::machine::Event::AuthFailed(_),
            ..
        })
    );
    if signed_out {
        note(
            ctx,
            format!("{primary} was signed out meanwhile: logs in again"),
        );
        let account = &ctx.scenario.accounts[ctx.me];
        authenticate(client, &account.mnemonic, &account.nickname, false).await;
    }
    drop(client.connect().await);
}

/// A `MakeWriter` that scans every formatted log line for planted plaintext: lines holding
/// the canary prefix are kept (the rest is dropped at once, so the capture costs no memory).
#[derive(Debug, Clone, Default)]
pub(super) struct LogScan {
    suspects: Arc<std::sync::Mutex<Vec<String>>>,
}

/// Log lines stamped with simulated ms (as the trace is).
struct SimTime;

impl tracing_subscriber::fmt::time::FormatTime for SimTime {
    fn format_time(&self, w: &mut tracing_subscriber::fmt::format::Writer<'_>) -> std::fmt::Result {
        write!(w, "{:>8}", sim_ms())
    }
}

/// What the canary scan hears: DEBUG and above from every crate but the simulator framework.
const LOG_FILTER: &str = "debug,turmoil=warn";

/// Every canary starts with this.
const CANARY_PREFIX: &[u8] = b"CANARY";

impl LogScan {
    fn suspects(&self) -> String {
        self.suspects
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .join("\n")
    }
}

impl std::io::Write for LogScan {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if data
            .windows(CANARY_PREFIX.len())
            .any(|w| w == CANARY_PREFIX)
        {
            self.suspects
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(String::from_utf8_lossy(data).into_owned());
        }
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogScan {
    type Writer = Self;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}
