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
    /// Payment webhooks duplicated, delayed (reordered), forged, split into an underpayment
    /// and a top-up, cut off from the relay for a while; the relay's clock jumps past the
    /// 15-minute hold (and sometimes the 30-minute trade order) so payments arrive late.
    Webhook,
}

impl FaultKind {
    /// Every kind.
    pub const ALL: [Self; 7] = [
        Self::Partition,
        Self::OneWay,
        Self::Hold,
        Self::Latency,
        Self::RelayCrash,
        Self::ClientCrash,
        Self::Webhook,
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
    /// The relay's clock jumps forward by this many ms (an NTP step; pending orders whose
    /// deadline it passes expire, so their payments arrive late).
    ClockJump(u64),
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
            Self::ClockJump(ms) => write!(f, "relay clock jumps +{} s", ms / 1_000),
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
    /// How payment webhooks misbehave (all zero without the `webhook` kind).
    pub webhook: WebhookFaults,
}

/// Bounds of the per-payment webhook faults; each payment draws its own
/// [`WebhookPlan`](crate::standins::WebhookPlan) within them (see `runner`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
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
                    FaultKind::Webhook => {
                        // The processor cut off from the relay: retries must carry the
                        // payments through.
                        let (s, e) = span(rng, 30_000);
                        events.push(ev(s, FaultAction::Partition(PAY.into(), RELAY.into())));
                        events.push(ev(e, FaultAction::Repair(PAY.into(), RELAY.into())));
                    }
                }
            }
        }
        let webhook = if kinds.contains(&FaultKind::Webhook) {
            // One clock jump past the alias hold (sometimes past the trade order too), in
            // the second half of the window so orders exist before it.
            let minutes = if rng.next_u32().is_multiple_of(3) {
                31
            } else {
                16
            };
            let at = window_ms / 2 + rng.next_u64() % (window_ms / 3).max(1);
            events.push(ev(at, FaultAction::ClockJump(minutes * 60_000)));
            WebhookFaults {
                max_duplicates: 1 + rng.next_u32() % 3,
                max_forged: rng.next_u32() % 3,
                max_delay_ms: 1_000 + rng.next_u64() % 40_000,
                underpay_pct: 10 + rng.next_u32() % 40,
                forge_only_pct: 20 + rng.next_u32() % 60,
            }
        } else {
            WebhookFaults::default()
        };
        // Stable: by time, then by insertion order.
        events.sort_by_key(|e| e.at_ms);
        Self {
            kinds,
            latency_ms,
            events,
            webhook,
        }
    }

    /// Times (offsets from the start of traffic) of the relay clock jumps.
    pub fn clock_jumps(&self) -> impl Iterator<Item = u64> + '_ {
        self.events
            .iter()
            .filter(|e| matches!(e.action, FaultAction::ClockJump(_)))
            .map(|e| e.at_ms)
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
        if self.kinds.contains(&FaultKind::Webhook) {
            writeln!(f, "  {}", self.webhook)?;
        }
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
/// Host name of the payment processor stand-in.
pub const PAY: &str = "pay";
