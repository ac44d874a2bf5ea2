//! Fault kinds and the fault plan drawn from a seed (swarm testing: each run enables a random
//! subset of kinds, so rare combinations get runs of their own).
//!
//! Loss is modelled as broken links (partitions, holds) rather than turmoil's `fail_rate`,
//! which breaks a TCP stream outright: a real network drops segments and the endpoints only
//! learn it from heartbeats and timeouts.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use rand_chacha::ChaCha20Rng;
use rand_core::Rng as _;

/// A kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    /// Two-way partition between a client host and the relay, later repaired.
    Partition,
    /// One-way partition (either direction), later repaired.
    OneWay,
    /// Link held (segments queued, not lost), later released.
    Hold,
    /// Wide latency range on all links, plus spikes of the maximum mid-run.
    Latency,
    /// Relay host crashed and restarted on the same store.
    RelayCrash,
    /// Client host crashed and restarted on its durable store.
    ClientCrash,
}

impl FaultKind {
    /// Every kind.
    pub const ALL: [Self; 6] = [
        Self::Partition,
        Self::OneWay,
        Self::Hold,
        Self::Latency,
        Self::RelayCrash,
        Self::ClientCrash,
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
        }
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

/// One scheduled fault action, `at_ms` after traffic starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultEvent {
    /// Offset from the start of traffic.
    pub at_ms: u64,
    /// What happens.
    pub action: FaultAction,
}

/// What a fault event does to the simulated world.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FaultAction {
    /// Both directions between two hosts drop segments.
    Partition(String, String),
    /// Repair both directions.
    Repair(String, String),
    /// Segments from the first host to the second are dropped.
    PartitionOneway(String, String),
    /// Repair one direction.
    RepairOneway(String, String),
    /// Segments between the hosts are queued.
    Hold(String, String),
    /// Queued segments are delivered.
    Release(String, String),
    /// Sets the maximum message latency of every link.
    MaxLatency(u64),
    /// Crashes a host (its software stops; its durable store stays).
    Crash(String),
    /// Starts a crashed host again.
    Restart(String),
}

impl fmt::Display for FaultAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Partition(a, b) => write!(f, "partition {a} <-> {b}"),
            Self::Repair(a, b) => write!(f, "repair {a} <-> {b}"),
            Self::PartitionOneway(a, b) => write!(f, "partition {a} -> {b}"),
            Self::RepairOneway(a, b) => write!(f, "repair {a} -> {b}"),
            Self::Hold(a, b) => write!(f, "hold {a} <-> {b}"),
            Self::Release(a, b) => write!(f, "release {a} <-> {b}"),
            Self::MaxLatency(ms) => write!(f, "max latency {ms} ms"),
            Self::Crash(h) => write!(f, "crash {h}"),
            Self::Restart(h) => write!(f, "restart {h}"),
        }
    }
}

/// The faults of one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultPlan {
    /// Enabled kinds.
    pub kinds: BTreeSet<FaultKind>,
    /// Builder latency range (min, max) in ms.
    pub latency_ms: (u64, u64),
    /// Events in time order.
    pub events: Vec<FaultEvent>,
}

impl FaultPlan {
    /// Draws a plan for `clients` client hosts over a traffic window of `window_ms`.
    pub fn draw(
        rng: &mut ChaCha20Rng,
        selection: &FaultSelection,
        clients: usize,
        window_ms: u64,
    ) -> Self {
        let kinds: BTreeSet<FaultKind> = match selection {
            FaultSelection::Only(k) => k.clone(),
            FaultSelection::Swarm => loop {
                let k: BTreeSet<FaultKind> = FaultKind::ALL
                    .into_iter()
                    .filter(|_| rng.next_u32().is_multiple_of(2))
                    .collect();
                if !k.is_empty() {
                    break k;
                }
            },
        };
        let latency_ms = if kinds.contains(&FaultKind::Latency) {
            let min = 1 + u64::from(rng.next_u32() % 20);
            (min, min + 50 + u64::from(rng.next_u32() % 400))
        } else {
            (1, 5)
        };
        let mut events = Vec::new();
        let client =
            |rng: &mut ChaCha20Rng| format!("c{}", rng.next_u32() as usize % clients.max(1));
        // Each fault occupies [start, start + duration) inside the window.
        let span = |rng: &mut ChaCha20Rng, max_ms: u64| {
            let duration = 1_000 + rng.next_u64() % max_ms;
            let start = rng.next_u64() % window_ms.saturating_sub(duration).max(1);
            (start, start + duration)
        };
        for kind in &kinds {
            let count = 1 + rng.next_u32() % 3;
            for _ in 0..count {
                match kind {
                    FaultKind::Partition => {
                        let c = client(rng);
                        let (s, e) = span(rng, 80_000);
                        events.push(ev(s, FaultAction::Partition(c.clone(), RELAY.into())));
                        events.push(ev(e, FaultAction::Repair(c, RELAY.into())));
                    }
                    FaultKind::OneWay => {
                        let c = client(rng);
                        let (from, to) = if rng.next_u32().is_multiple_of(2) {
                            (c, RELAY.to_owned())
                        } else {
                            (RELAY.to_owned(), c)
                        };
                        let (s, e) = span(rng, 80_000);
                        events.push(ev(
                            s,
                            FaultAction::PartitionOneway(from.clone(), to.clone()),
                        ));
                        events.push(ev(e, FaultAction::RepairOneway(from, to)));
                    }
                    FaultKind::Hold => {
                        let c = client(rng);
                        let (s, e) = span(rng, 90_000);
                        events.push(ev(s, FaultAction::Hold(c.clone(), RELAY.into())));
                        events.push(ev(e, FaultAction::Release(c, RELAY.into())));
                    }
                    FaultKind::Latency => {
                        let (s, e) = span(rng, 20_000);
                        let spike = 500 + rng.next_u64() % 3_000;
                        events.push(ev(s, FaultAction::MaxLatency(spike)));
                        events.push(ev(e, FaultAction::MaxLatency(latency_ms.1)));
                    }
                    FaultKind::RelayCrash => {
                        let (s, e) = span(rng, 30_000);
                        events.push(ev(s, FaultAction::Crash(RELAY.into())));
                        events.push(ev(e, FaultAction::Restart(RELAY.into())));
                    }
                    FaultKind::ClientCrash => {
                        let c = client(rng);
                        let (s, e) = span(rng, 30_000);
                        events.push(ev(s, FaultAction::Crash(c.clone())));
                        events.push(ev(e, FaultAction::Restart(c)));
                    }
                }
            }
        }
        // Stable: by time, then by insertion order.
        events.sort_by_key(|e| e.at_ms);
        Self {
            kinds,
            latency_ms,
            events,
        }
    }
}

impl fmt::Display for FaultPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kinds: Vec<&str> = self.kinds.iter().map(|k| k.name()).collect();
        writeln!(
            f,
            "fault plan: kinds [{}], latency {}..{} ms, {} events",
            kinds.join(","),
            self.latency_ms.0,
            self.latency_ms.1,
            self.events.len()
        )?;
        for e in &self.events {
            writeln!(f, "  +{:>6} ms  {}", e.at_ms, e.action)?;
        }
        Ok(())
    }
}

fn ev(at_ms: u64, action: FaultAction) -> FaultEvent {
    FaultEvent { at_ms, action }
}

/// Host name of the relay.
pub const RELAY: &str = "relay";
