//! Fault kinds and the fault plan drawn from a seed (swarm testing: each run enables a random
//! subset of kinds, so rare combinations get runs of their own).
//!
//! The plan is **explicit data** (serde): drawn from the seed by [`FaultPlan::draw`], printed
//! at the start of every run, written into replay files and shrunk event by event
//! (`simulate --shrink`). The runner never draws a fault itself.
//!
//! Loss is modelled as broken links (partitions, holds) rather than turmoil's `fail_rate`,
//! which breaks a TCP stream outright: a real network drops segments and the endpoints only
//! learn it from heartbeats and timeouts.
//!
//! | kind | what the plan does |
//! |---|---|
//! | `partition`, `oneway`, `hold`, `latency` | client ↔ relay links broken, one direction dropped, segments queued, latency spikes |
//! | `relay-crash`, `client-crash` | the host powers off (its in-flight segments are lost, no FIN/RST goes out) and restarts on its durable store |
//! | `webhook` | payment webhooks duplicated, delayed, forged, split, cut off; relay clock jumps |
//! | `commit-fail` | the relay's next commits fail, or the store is down for a while (fail-stop, then rebuild from the store) |
//! | `commit-slow` | a commit stalls the relay's event loop for a while (modelled as every relay link held) |
//! | `commit-crash` | a commit becomes durable, then the relay powers off before any output leaves |
//! | `batch-crash` | the relay powers off in the middle of a batch (nothing of it is applied) |
//! | `slow-consumer` | a raw WebSocket client stops reading for a while or for good while provoking answers |
//! | `storm` | every client host restarts at once, and a raw host opens many sockets at once |
//! | `clock-skew` | client clocks run minutes away from the relay's (both ways), from the start |
//! | `abuse` | a raw client sends malformed frames at a high rate |
//! | `dishonest` | a raw client makes requests no honest client makes (others' conversations, orders, channels, friendships, identities) |
//! | `failover` | two relays share the store, one active (a lease and a fencing epoch), behind a load balancer; the active one freezes (SIGSTOP-like) past its lease or powers off, and the standby takes over (see `super::failover`) |

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use rand_chacha::ChaCha20Rng;
use rand_core::Rng as _;
use serde::{Deserialize, Serialize};

use crate::bounds::{LEASE_MS, PAY, RELAY, STORM_WAVE, STORM_WAVE_MS, STUCK_MIN_PROVOKE};
use crate::scenario::{Scale, Scenario};

/// A kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// Two-way partition between a client host and the relay, later repaired.
    Partition,
    /// One-way partition (either direction), later repaired.
    #[serde(rename = "oneway")]
    OneWay,
    /// Link held (segments queued, not lost), later released.
    Hold,
    /// Wide latency range on all links, plus spikes of the maximum mid-run.
    Latency,
    /// Relay host powered off and restarted on the same store.
    RelayCrash,
    /// Client host powered off and restarted on its durable store.
    ClientCrash,
    /// Payment webhooks duplicated, delayed (reordered), forged, split into an underpayment
    /// and a top-up, cut off from the relay for a while; the relay's clock jumps past the
    /// 15-minute hold (and sometimes the 30-minute trade order) so payments arrive late.
    Webhook,
    /// The relay's store refuses commits (fail-stop; the shell rebuilds from the store).
    CommitFail,
    /// A commit stalls the relay's single event loop.
    CommitSlow,
    /// A commit is durable but the relay powers off before sending its outputs.
    CommitCrash,
    /// The relay powers off in the middle of a batch (nothing applied).
    BatchCrash,
    /// A client stops reading its socket (for a while or for good).
    SlowConsumer,
    /// Many clients (re)connect at once.
    Storm,
    /// Client clocks disagree with the relay's.
    ClockSkew,
    /// Malformed frames at a high rate.
    Abuse,
    /// Requests an honest client never makes.
    Dishonest,
    /// Active/standby relays on one shared store (lease + fencing epoch) behind a load
    /// balancer: the active relay freezes past its lease (a paused process) or powers off, the
    /// standby takes over, and a frozen relay that resumes must commit nothing. With this
    /// kind, every relay crash of the plan hits the active relay.
    Failover,
}

impl FaultKind {
    /// Every kind.
    pub const ALL: [Self; 17] = [
        Self::Partition,
        Self::OneWay,
        Self::Hold,
        Self::Latency,
        Self::RelayCrash,
        Self::ClientCrash,
        Self::Webhook,
        Self::CommitFail,
        Self::CommitSlow,
        Self::CommitCrash,
        Self::BatchCrash,
        Self::SlowConsumer,
        Self::Storm,
        Self::ClockSkew,
        Self::Abuse,
        Self::Dishonest,
        Self::Failover,
    ];

    /// CLI name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Partition => "partition",
            Self::OneWay => "oneway",
            Self::Hold => "hold",
            Self::Latency => "latency",
            Self::RelayCrash => "relay-crash",
            Self::ClientCrash => "client-crash",
            Self::Webhook => "webhook",
            Self::CommitFail => "commit-fail",
            Self::CommitSlow => "commit-slow",
            Self::CommitCrash => "commit-crash",
            Self::BatchCrash => "batch-crash",
            Self::SlowConsumer => "slow-consumer",
            Self::Storm => "storm",
            Self::ClockSkew => "clock-skew",
            Self::Abuse => "abuse",
            Self::Dishonest => "dishonest",
            Self::Failover => "failover",
        }
    }

    /// Whether this kind acts on the relay's store.
    pub fn is_storage(self) -> bool {
        matches!(
            self,
            Self::CommitFail | Self::CommitSlow | Self::CommitCrash | Self::BatchCrash
        )
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for FaultKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| format!("unknown fault kind {s:?}"))
    }
}

/// Which fault kinds a run may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FaultSelection {
    /// Swarm: a random non-empty subset drawn from the seed.
    Swarm,
    /// Exactly these kinds (empty: a fault-free run).
    Only(BTreeSet<FaultKind>),
}

impl FromStr for FaultSelection {
    type Err = String;
    /// `swarm`, `all`, `none`, or a comma-separated list of kinds.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "swarm" => Ok(Self::Swarm),
            "all" => Ok(Self::Only(FaultKind::ALL.into_iter().collect())),
            "none" => Ok(Self::Only(BTreeSet::new())),
            list => list
                .split(',')
                .map(|k| k.trim().parse())
                .collect::<Result<_, _>>()
                .map(Self::Only),
        }
    }
}

impl fmt::Display for FaultSelection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Swarm => f.write_str("swarm"),
            Self::Only(k) if k.is_empty() => f.write_str("none"),
            Self::Only(k) if k.len() == FaultKind::ALL.len() => f.write_str("all"),
            Self::Only(k) => {
                let names: Vec<&str> = k.iter().map(|k| k.name()).collect();
                f.write_str(&names.join(","))
            }
        }
    }
}

/// The relay's durable store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum StoreKind {
    /// `relay_core::store::MemoryStore` (its committed state survives a crash).
    #[default]
    Memory,
    /// `relay_core::store::SqliteStore` on a temporary file (reopened after every crash).
    Sqlite,
}

impl StoreKind {
    /// CLI name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Memory => "memory",
            Self::Sqlite => "sqlite",
        }
    }
}

impl FromStr for StoreKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "memory" => Ok(Self::Memory),
            "sqlite" => Ok(Self::Sqlite),
            _ => Err(format!("unknown store {s:?} (memory, sqlite)")),
        }
    }
}

/// One scheduled fault action, `at_ms` after traffic starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultEvent {
    /// Offset from the start of traffic.
    pub at_ms: u64,
    /// What happens.
    pub action: FaultAction,
}

/// What a raw (hostile or slow) client does when told to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "act")]
pub enum HostileAct {
    /// Sends `frames` malformed frames as fast as the link takes them (every one must be
    /// answered with an error frame, or the socket closed with a code).
    Flood {
        /// How many frames.
        frames: u32,
        /// Picks the mix of malformations.
        roll: u64,
    },
    /// Makes `count` requests an honest client never makes (every one must be refused).
    Dishonest {
        /// How many requests.
        count: u32,
        /// Picks the requests and their targets.
        roll: u64,
    },
    /// Stops reading its socket while provoking `provoke` answers; resumes after `pause_ms`
    /// (`None`: never).
    StopReading {
        /// Frames sent to make the relay answer.
        provoke: u32,
        /// How long the pause lasts (`None`: for good).
        pause_ms: Option<u64>,
    },
    /// Opens `sockets` connections at once (authenticated, bad tokens, and silent TCP), holds
    /// them for `hold_ms`, then drops them.
    Storm {
        /// How many sockets.
        sockets: u32,
        /// How long they stay open.
        hold_ms: u64,
    },
}

impl fmt::Display for HostileAct {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Flood { frames, .. } => write!(f, "floods {frames} malformed frames"),
            Self::Dishonest { count, .. } => write!(f, "makes {count} dishonest requests"),
            Self::StopReading {
                provoke,
                pause_ms: Some(ms),
            } => write!(f, "stops reading for {ms} ms (provoking {provoke} answers)"),
            Self::StopReading {
                provoke,
                pause_ms: None,
            } => write!(f, "stops reading for good (provoking {provoke} answers)"),
            Self::Storm { sockets, hold_ms } => {
                write!(f, "opens {sockets} sockets at once for {hold_ms} ms")
            }
        }
    }
}

/// What a fault event does to the simulated world.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "do")]
pub enum FaultAction {
    /// Both directions between two hosts drop segments.
    Partition {
        /// One host.
        a: String,
        /// The other.
        b: String,
    },
    /// Repair both directions.
    Repair {
        /// One host.
        a: String,
        /// The other.
        b: String,
    },
    /// Segments from `from` to `to` are dropped.
    PartitionOneway {
        /// Sender side.
        from: String,
        /// Receiver side.
        to: String,
    },
    /// Repair one direction.
    RepairOneway {
        /// Sender side.
        from: String,
        /// Receiver side.
        to: String,
    },
    /// Segments between the hosts are queued.
    Hold {
        /// One host.
        a: String,
        /// The other.
        b: String,
    },
    /// Queued segments are delivered.
    Release {
        /// One host.
        a: String,
        /// The other.
        b: String,
    },
    /// Sets the maximum message latency of every link.
    MaxLatency {
        /// Milliseconds.
        ms: u64,
    },
    /// Powers a host off (its in-flight segments are lost; its durable store stays).
    Crash {
        /// Host name.
        host: String,
    },
    /// Starts a crashed host again.
    Restart {
        /// Host name.
        host: String,
    },
    /// The relay's clock jumps forward (an NTP step; pending orders whose deadline it passes
    /// expire, so their payments arrive late).
    ClockJump {
        /// Milliseconds.
        ms: u64,
    },
    /// A client host's clock runs `skew_ms` away from true time (negative: behind) for the
    /// whole run, setup included (the runner applies every skew before starting: a step of
    /// the clock mid-run would stretch the client's timers by the step, since client-core
    /// computes its deadlines from the wall clock).
    SetSkew {
        /// Host name.
        host: String,
        /// Offset from true (and the relay's unjumped) time.
        skew_ms: i64,
    },
    /// The relay's next `commits` commits fail (nothing of them is applied).
    FailCommits {
        /// How many.
        commits: u32,
    },
    /// Every commit and load fails for `ms` (the disk is gone; the shell keeps rebuilding).
    StoreDown {
        /// Milliseconds.
        ms: u64,
    },
    /// The relay's event loop stalls for `ms` on a slow commit (every relay link held).
    StallCommit {
        /// Milliseconds.
        ms: u64,
    },
    /// The next commit is durable, then the relay powers off before sending anything;
    /// it restarts `restart_after_ms` later.
    CrashAfterCommit {
        /// Delay of the restart.
        restart_after_ms: u64,
    },
    /// The relay powers off in the middle of its next batch (nothing applied); it restarts
    /// `restart_after_ms` later.
    CrashMidBatch {
        /// Delay of the restart.
        restart_after_ms: u64,
    },
    /// The active relay's process freezes for `ms` (SIGSTOP, then SIGCONT): every link of
    /// its host held, its lease calls unanswered (failover topology only).
    Freeze {
        /// Milliseconds.
        ms: u64,
    },
    /// Tells a raw client host to do something.
    Hostile {
        /// Host name (`x0`, ...).
        host: String,
        /// What.
        act: HostileAct,
    },
}

impl fmt::Display for FaultAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Partition { a, b } => write!(f, "partition {a} <-> {b}"),
            Self::Repair { a, b } => write!(f, "repair {a} <-> {b}"),
            Self::PartitionOneway { from, to } => write!(f, "partition {from} -> {to}"),
            Self::RepairOneway { from, to } => write!(f, "repair {from} -> {to}"),
            Self::Hold { a, b } => write!(f, "hold {a} <-> {b}"),
            Self::Release { a, b } => write!(f, "release {a} <-> {b}"),
            Self::MaxLatency { ms } => write!(f, "max latency {ms} ms"),
            Self::Crash { host } => write!(f, "power off {host}"),
            Self::Restart { host } => write!(f, "restart {host}"),
            Self::ClockJump { ms } => write!(f, "relay clock jumps +{} s", ms / 1_000),
            Self::SetSkew { host, skew_ms } => write!(f, "{host} clock skew {skew_ms:+} ms"),
            Self::FailCommits { commits } => write!(f, "next {commits} relay commit(s) fail"),
            Self::StoreDown { ms } => write!(f, "relay store down for {ms} ms"),
            Self::StallCommit { ms } => write!(f, "relay stalls {ms} ms on a slow commit"),
            Self::CrashAfterCommit { restart_after_ms } => write!(
                f,
                "relay powers off after its next commit (restart +{restart_after_ms} ms)"
            ),
            Self::CrashMidBatch { restart_after_ms } => write!(
                f,
                "relay powers off mid-batch (restart +{restart_after_ms} ms)"
            ),
            Self::Freeze { ms } => write!(f, "active relay freezes for {ms} ms"),
            Self::Hostile { host, act } => write!(f, "{host} {act}"),
        }
    }
}

impl FaultAction {
    /// Every host name the action refers to (for shrinking away a host).
    pub fn hosts(&self) -> Vec<&str> {
        match self {
            Self::Partition { a, b }
            | Self::Repair { a, b }
            | Self::Hold { a, b }
            | Self::Release { a, b } => vec![a, b],
            Self::PartitionOneway { from, to } | Self::RepairOneway { from, to } => {
                vec![from, to]
            }
            Self::Crash { host }
            | Self::Restart { host }
            | Self::SetSkew { host, .. }
            | Self::Hostile { host, .. } => vec![host],
            _ => Vec::new(),
        }
    }

    /// Renames hosts (`c5` → `c4` when the shrinker drops `c3`); `None` drops the action.
    pub fn rename(&self, map: &dyn Fn(&str) -> Option<String>) -> Option<Self> {
        let m = |h: &String| map(h);
        Some(match self {
            Self::Partition { a, b } => Self::Partition { a: m(a)?, b: m(b)? },
            Self::Repair { a, b } => Self::Repair { a: m(a)?, b: m(b)? },
            Self::Hold { a, b } => Self::Hold { a: m(a)?, b: m(b)? },
            Self::Release { a, b } => Self::Release { a: m(a)?, b: m(b)? },
            Self::PartitionOneway { from, to } => Self::PartitionOneway {
                from: m(from)?,
                to: m(to)?,
            },
            Self::RepairOneway { from, to } => Self::RepairOneway {
                from: m(from)?,
                to: m(to)?,
            },
            Self::Crash { host } => Self::Crash { host: m(host)? },
            Self::Restart { host } => Self::Restart { host: m(host)? },
            Self::SetSkew { host, skew_ms } => Self::SetSkew {
                host: m(host)?,
                skew_ms: *skew_ms,
            },
            Self::Hostile { host, act } => Self::Hostile {
                host: m(host)?,
                act: act.clone(),
            },
            other => other.clone(),
        })
    }
}

/// The faults of one run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultPlan {
    /// Enabled kinds.
    pub kinds: BTreeSet<FaultKind>,
    /// The relay's store.
    pub store: StoreKind,
    /// Builder latency range (min, max) in ms.
    pub latency_ms: (u64, u64),
    /// Events in time order.
    pub events: Vec<FaultEvent>,
    /// How payment webhooks misbehave (all zero without the `webhook` kind).
    pub webhook: WebhookFaults,
}

/// Bounds of the per-payment webhook faults; each payment draws its own
/// [`WebhookPlan`](standins::WebhookPlan) within them (see `commerce`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookFaults {
    /// Most extra identical copies per payment.
    pub max_duplicates: u32,
    /// Most forged copies (wrong signature) per payment.
    pub max_forged: u32,
    /// Longest delay before the first genuine copy, in ms (delays reorder payments).
    pub max_delay_ms: u64,
    /// Percent of payments split into an underpayment and a later top-up.
    pub underpay_pct: u32,
    /// Percent of unpaid orders that get a forged-only payment from a forger.
    pub forge_only_pct: u32,
}

impl fmt::Display for WebhookFaults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "webhooks: duplicates <= {}, forged <= {}, delay <= {} ms, underpay {}%, forged-only {}%",
            self.max_duplicates,
            self.max_forged,
            self.max_delay_ms,
            self.underpay_pct,
            self.forge_only_pct
        )
    }
}

/// Which store a run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StoreChoice {
    /// Drawn from the seed (SQLite in about a third of the runs).
    #[default]
    Drawn,
    /// Always this one.
    Fixed(StoreKind),
}

impl FromStr for StoreChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "drawn" {
            Ok(Self::Drawn)
        } else {
            s.parse().map(Self::Fixed)
        }
    }
}

impl From<StoreKind> for StoreChoice {
    fn from(kind: StoreKind) -> Self {
        Self::Fixed(kind)
    }
}

impl fmt::Display for StoreChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Drawn => f.write_str("drawn"),
            Self::Fixed(k) => f.write_str(k.name()),
        }
    }
}

impl FaultPlan {
    /// Draws a plan for `scenario` over a traffic window of `window_ms`.
    pub fn draw(
        rng: &mut ChaCha20Rng,
        selection: &FaultSelection,
        store: StoreChoice,
        scenario: &Scenario,
        window_ms: u64,
    ) -> Self {
        let kinds: BTreeSet<FaultKind> = match selection {
            FaultSelection::Only(k) => k.clone(),
            FaultSelection::Swarm => loop {
                let k: BTreeSet<FaultKind> = FaultKind::ALL
                    .into_iter()
                    .filter(|_| rng.next_u32() % 8 < 3)
                    .collect();
                if !k.is_empty() {
                    break k;
                }
            },
        };
        let drawn_store = if rng.next_u32().is_multiple_of(3) {
            StoreKind::Sqlite
        } else {
            StoreKind::Memory
        };
        let store = match store {
            StoreChoice::Drawn => drawn_store,
            StoreChoice::Fixed(k) => k,
        };
        let latency_ms = if kinds.contains(&FaultKind::Latency) {
            let min = 1 + u64::from(rng.next_u32() % 20);
            (min, min + 50 + u64::from(rng.next_u32() % 400))
        } else {
            // Ticks are 4 ms (see the runner): a spread over a few ticks keeps deliveries
            // from different links interleaving.
            (1, 12)
        };
        let mut d = Drawer {
            rng,
            hosts: scenario.client_hosts(),
            raws: scenario.strangers.len(),
            scale: scenario.scale,
            window_ms,
            events: Vec::new(),
        };
        for kind in &kinds {
            d.kind(*kind, latency_ms);
        }
        let webhook = if kinds.contains(&FaultKind::Webhook) {
            d.webhook()
        } else {
            WebhookFaults::default()
        };
        let mut events = d.events;
        // Stable: by time, then by insertion order.
        events.sort_by_key(|e| e.at_ms);
        Self {
            kinds,
            store,
            latency_ms,
            events,
            webhook,
        }
    }

    /// Times (offsets from the start of traffic) of the relay clock jumps.
    pub fn clock_jumps(&self) -> impl Iterator<Item = u64> + '_ {
        self.events
            .iter()
            .filter(|e| matches!(e.action, FaultAction::ClockJump { .. }))
            .map(|e| e.at_ms)
    }

    /// The fault kinds the events actually exercise (a shrunk plan may have lost some).
    pub fn exercised(&self) -> BTreeSet<FaultKind> {
        let mut out = BTreeSet::new();
        for e in &self.events {
            let k = match &e.action {
                FaultAction::Partition { a, b } if a == PAY || b == PAY => FaultKind::Webhook,
                FaultAction::Partition { .. } => FaultKind::Partition,
                FaultAction::PartitionOneway { .. } => FaultKind::OneWay,
                FaultAction::Hold { .. } => FaultKind::Hold,
                FaultAction::MaxLatency { .. } => FaultKind::Latency,
                FaultAction::Crash { host } if host == RELAY => FaultKind::RelayCrash,
                FaultAction::Crash { .. } => FaultKind::ClientCrash,
                FaultAction::ClockJump { .. } => FaultKind::Webhook,
                FaultAction::SetSkew { .. } => FaultKind::ClockSkew,
                FaultAction::FailCommits { .. } | FaultAction::StoreDown { .. } => {
                    FaultKind::CommitFail
                }
                FaultAction::StallCommit { .. } => FaultKind::CommitSlow,
                FaultAction::CrashAfterCommit { .. } => FaultKind::CommitCrash,
                FaultAction::CrashMidBatch { .. } => FaultKind::BatchCrash,
                FaultAction::Freeze { .. } => FaultKind::Failover,
                FaultAction::Hostile { act, .. } => match act {
                    HostileAct::Flood { .. } => FaultKind::Abuse,
                    HostileAct::Dishonest { .. } => FaultKind::Dishonest,
                    HostileAct::StopReading { .. } => FaultKind::SlowConsumer,
                    HostileAct::Storm { .. } => FaultKind::Storm,
                },
                FaultAction::Repair { .. }
                | FaultAction::RepairOneway { .. }
                | FaultAction::Release { .. }
                | FaultAction::Restart { .. } => continue,
            };
            out.insert(k);
        }
        out
    }
}

/// Draws the events of each kind.
struct Drawer<'r> {
    rng: &'r mut ChaCha20Rng,
    /// Client host names.
    hosts: Vec<String>,
    raws: usize,
    scale: Scale,
    window_ms: u64,
    events: Vec<FaultEvent>,
}

impl Drawer<'_> {
    fn push(&mut self, at_ms: u64, action: FaultAction) {
        self.events.push(FaultEvent { at_ms, action });
    }

    /// A random client host.
    fn client(&mut self) -> String {
        let i = self.rng.next_u32() as usize % self.hosts.len().max(1);
        self.hosts
            .get(i)
            .cloned()
            .unwrap_or_else(|| "c0".to_owned())
    }

    fn raw(&mut self) -> Option<String> {
        (self.raws > 0).then(|| format!("x{}", self.rng.next_u32() as usize % self.raws))
    }

    /// `[start, start + duration)` inside the window.
    fn span(&mut self, max_ms: u64) -> (u64, u64) {
        let duration = 1_000 + self.rng.next_u64() % max_ms;
        let start = self.rng.next_u64() % self.window_ms.saturating_sub(duration).max(1);
        (start, start + duration)
    }

    fn at(&mut self) -> u64 {
        self.rng.next_u64() % self.window_ms.max(1)
    }

    fn kind(&mut self, kind: FaultKind, latency_ms: (u64, u64)) {
        let count = 1 + self.rng.next_u32() % 3;
        for _ in 0..count {
            match kind {
                FaultKind::Partition => {
                    let c = self.client();
                    let (s, e) = self.span(80_000);
                    let r = RELAY.to_owned();
                    self.push(
                        s,
                        FaultAction::Partition {
                            a: c.clone(),
                            b: r.clone(),
                        },
                    );
                    self.push(e, FaultAction::Repair { a: c, b: r });
                }
                FaultKind::OneWay => {
                    let c = self.client();
                    let (from, to) = if self.rng.next_u32().is_multiple_of(2) {
                        (c, RELAY.to_owned())
                    } else {
                        (RELAY.to_owned(), c)
                    };
                    let (s, e) = self.span(80_000);
                    let (f2, t2) = (from.clone(), to.clone());
                    self.push(s, FaultAction::PartitionOneway { from, to });
                    self.push(e, FaultAction::RepairOneway { from: f2, to: t2 });
                }
                FaultKind::Hold => {
                    let c = self.client();
                    let (s, e) = self.span(90_000);
                    let r = RELAY.to_owned();
                    self.push(
                        s,
                        FaultAction::Hold {
                            a: c.clone(),
                            b: r.clone(),
                        },
                    );
                    self.push(e, FaultAction::Release { a: c, b: r });
                }
                FaultKind::Latency => {
                    let (s, e) = self.span(20_000);
                    let spike = 500 + self.rng.next_u64() % 3_000;
                    self.push(s, FaultAction::MaxLatency { ms: spike });
                    self.push(e, FaultAction::MaxLatency { ms: latency_ms.1 });
                }
                FaultKind::RelayCrash => {
                    let (s, e) = self.span(30_000);
                    self.push(s, FaultAction::Crash { host: RELAY.into() });
                    self.push(e, FaultAction::Restart { host: RELAY.into() });
                }
                FaultKind::ClientCrash => {
                    let c = self.client();
                    let (s, e) = self.span(30_000);
                    self.push(s, FaultAction::Crash { host: c.clone() });
                    self.push(e, FaultAction::Restart { host: c });
                }
                FaultKind::Webhook => {
                    // The processor cut off from the relay: retries must carry the
                    // payments through.
                    let (s, e) = self.span(30_000);
                    let (p, r) = (PAY.to_owned(), RELAY.to_owned());
                    self.push(
                        s,
                        FaultAction::Partition {
                            a: p.clone(),
                            b: r.clone(),
                        },
                    );
                    self.push(e, FaultAction::Repair { a: p, b: r });
                }
                FaultKind::CommitFail => {
                    let at = self.at();
                    if self.rng.next_u32().is_multiple_of(3) {
                        let ms = 500 + self.rng.next_u64() % 5_000;
                        self.push(at, FaultAction::StoreDown { ms });
                    } else {
                        let commits = 1 + self.rng.next_u32() % 3;
                        self.push(at, FaultAction::FailCommits { commits });
                    }
                }
                FaultKind::CommitSlow => {
                    let at = self.at();
                    let ms = 200 + self.rng.next_u64() % 8_000;
                    self.push(at, FaultAction::StallCommit { ms });
                }
                FaultKind::CommitCrash => {
                    let at = self.at();
                    let restart_after_ms = 500 + self.rng.next_u64() % 10_000;
                    self.push(at, FaultAction::CrashAfterCommit { restart_after_ms });
                }
                FaultKind::BatchCrash => {
                    let at = self.at();
                    let restart_after_ms = 500 + self.rng.next_u64() % 10_000;
                    self.push(at, FaultAction::CrashMidBatch { restart_after_ms });
                }
                FaultKind::SlowConsumer => {
                    let Some(host) = self.raw() else { return };
                    let at = self.at();
                    // More answers than the transport's window holds, so the relay's writes
                    // to it block.
                    let provoke = STUCK_MIN_PROVOKE + self.rng.next_u32() % 300;
                    let pause_ms = match self.rng.next_u32() % 3 {
                        0 => None,
                        1 => Some(5_000 + self.rng.next_u64() % 30_000),
                        _ => Some(70_000 + self.rng.next_u64() % 60_000),
                    };
                    let act = HostileAct::StopReading { provoke, pause_ms };
                    self.push(at, FaultAction::Hostile { host, act });
                }
                FaultKind::Storm => {
                    // Every client host powers off and restarts at once (in waves that
                    // turmoil's accept queue takes), and a raw host opens many sockets.
                    let at = self.at();
                    let down = 200 + self.rng.next_u64() % 3_000;
                    let hosts = self.hosts.clone();
                    for host in &hosts {
                        self.push(at, FaultAction::Crash { host: host.clone() });
                    }
                    for (i, host) in hosts.iter().enumerate() {
                        let wave = (i / STORM_WAVE) as u64 * STORM_WAVE_MS;
                        self.push(
                            at + down + wave,
                            FaultAction::Restart { host: host.clone() },
                        );
                    }
                    if let Some(host) = self.raw() {
                        let sockets = self.scale.storm_sockets(self.rng);
                        let hold_ms = 1_000 + self.rng.next_u64() % 20_000;
                        let act = HostileAct::Storm { sockets, hold_ms };
                        let at = self.at();
                        self.push(at, FaultAction::Hostile { host, act });
                    }
                    // One storm per kind is plenty.
                    return;
                }
                FaultKind::ClockSkew => {
                    let c = self.client();
                    let at = 0;
                    // Up to 3 minutes either way: call signals (60 s window) between hosts
                    // skewed apart by more than that are refused, as they must be.
                    let skew_ms =
                        i64::try_from(self.rng.next_u64() % 360_000).unwrap_or(0) - 180_000;
                    self.push(at, FaultAction::SetSkew { host: c, skew_ms });
                }
                FaultKind::Abuse => {
                    let Some(host) = self.raw() else { return };
                    let at = self.at();
                    let frames = self.scale.flood_frames(self.rng);
                    let roll = self.rng.next_u64();
                    let act = HostileAct::Flood { frames, roll };
                    self.push(at, FaultAction::Hostile { host, act });
                }
                FaultKind::Failover => {
                    // Shorter and longer than the lease: a freeze the leader survives, and
                    // one it does not (the standby takes over; the frozen relay resumes
                    // with frames in flight and must commit nothing). Sometimes the active
                    // relay powers off instead.
                    let (s, e) = self.span(LEASE_MS * 4);
                    if self.rng.next_u32().is_multiple_of(3) {
                        self.push(s, FaultAction::Crash { host: RELAY.into() });
                        self.push(e, FaultAction::Restart { host: RELAY.into() });
                    } else {
                        self.push(s, FaultAction::Freeze { ms: e - s });
                    }
                }
                FaultKind::Dishonest => {
                    let Some(host) = self.raw() else { return };
                    // After setup gave the world something to steal.
                    let at = self.window_ms / 4 + self.at() * 3 / 4;
                    let count = 10 + self.rng.next_u32() % 30;
                    let roll = self.rng.next_u64();
                    let act = HostileAct::Dishonest { count, roll };
                    self.push(at, FaultAction::Hostile { host, act });
                }
            }
        }
    }

    fn webhook(&mut self) -> WebhookFaults {
        // One clock jump past the alias hold (sometimes past the trade order too), in
        // the second half of the window so orders exist before it.
        let minutes = if self.rng.next_u32().is_multiple_of(3) {
            31
        } else {
            16
        };
        let at = self.window_ms / 2 + self.rng.next_u64() % (self.window_ms / 3).max(1);
        self.push(
            at,
            FaultAction::ClockJump {
                ms: minutes * 60_000,
            },
        );
        WebhookFaults {
            max_duplicates: 1 + self.rng.next_u32() % 3,
            max_forged: self.rng.next_u32() % 3,
            max_delay_ms: 1_000 + self.rng.next_u64() % 40_000,
            underpay_pct: 10 + self.rng.next_u32() % 40,
            forge_only_pct: 20 + self.rng.next_u32() % 60,
        }
    }
}

impl fmt::Display for FaultPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kinds: Vec<&str> = self.kinds.iter().map(|k| k.name()).collect();
        writeln!(
            f,
            "fault plan: kinds [{}], store {}, latency {}..{} ms, {} events",
            kinds.join(","),
            self.store.name(),
            self.latency_ms.0,
            self.latency_ms.1,
            self.events.len()
        )?;
        if self.kinds.contains(&FaultKind::Webhook) {
            writeln!(f, "  {}", self.webhook)?;
        }
        for e in &self.events {
            writeln!(f, "  +{:>6} ms  {}", e.at_ms, e.action)?;
        }
        Ok(())
    }
}
