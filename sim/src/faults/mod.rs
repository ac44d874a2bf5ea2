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
//! | `commit-slow` | a commit takes a while: the relay goes on with later batches (pipelined), none of them acknowledged until it is done |
//! | `commit-crash` | a commit becomes durable, then the relay powers off before any output leaves |
//! | `batch-crash` | the relay powers off in the middle of a batch (nothing of it is applied) |
//! | `slow-consumer` | a raw WebSocket client stops reading for a while or for good while provoking answers |
//! | `storm` | every client host restarts at once, and a raw host opens many sockets at once |
//! | `clock-skew` | client clocks run minutes away from the relay's (both ways), from the start |
//! | `abuse` | a raw client sends malformed frames at a high rate |
//! | `dishonest` | a raw client makes requests no honest client makes (others' conversations, orders, channels, friendships, identities) |
//! | `handoff` | a sharded relay only: crossings between its cores lost, repeated or delayed for a while; one shard's store failing alone (commits, or down for a while), or its next commit slow while the other shards commit on; a power-off right after an owner's hand-off is committed, or right after an apply is durable |
//! | `failover` | two relays share the store, one active (a lease and a fencing epoch), behind a load balancer; the active one freezes (SIGSTOP-like) past its lease or powers off, and the standby takes over (see `super::failover`) |
//! | `cluster` | three relay nodes serve the shards over the store (a lease per node, an owner and an epoch per shard), behind a load balancer; the busiest node powers off and restarts (its shards move, then it joins again under load), leaves on purpose (a graceful shutdown) and starts again, freezes past its lease, or is cut from the database but not from its clients, or from the load balancer but not from the database; or two nodes lose the links between them, both ways or one way (see `super::cluster`); with it, `failover` is not drawn; never drawn by the swarm or `all`, only by name |
//!
//! Modules: `action` (what one event does), `plan` (the plan and its draw).

mod action;
mod plan;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

pub use self::action::{FaultAction, FaultEvent, HostileAct};
pub use self::plan::{FaultPlan, WebhookFaults};

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
    /// A sharded relay's hand-off between its cores: crossings lost, repeated, delayed; one
    /// shard's store failing or slow alone; power-offs between an owner's commit and the apply, and
    /// between the apply and its acknowledgement. Drawn only for a sharded relay.
    Handoff,
    /// Three relay nodes share the shards over the store (a lease per node, an owner and an
    /// epoch per shard) behind a load balancer: the busiest node powers off and restarts,
    /// leaves on purpose and starts again, freezes past its lease, or is cut from the
    /// database or from the load balancer; its shards move to the others and back; or two
    /// nodes lose their links, both ways or one way. With this kind, every relay crash of the plan
    /// hits the busiest node. A topology of its own: never drawn by the swarm or `all`, only
    /// by name.
    Cluster,
}

impl FaultKind {
    /// Every kind.
    pub const ALL: [Self; 19] = [
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
        Self::Handoff,
        Self::Cluster,
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
            Self::Cluster => "cluster",
            Self::Handoff => "handoff",
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
    /// Swarm: a random non-empty subset drawn from the seed (each kind with probability 3/8).
    Swarm,
    /// Swarm with a weight per kind: each kind is in the subset with probability
    /// `weight / SWARM_WEIGHT_SCALE` (kinds not listed: [`SWARM_DEFAULT_WEIGHT`]). What a
    /// steered sweep (`simulate --steer`) draws from; written `swarm:partition=40,hold=12`.
    Weighted(BTreeMap<FaultKind, u32>),
    /// Exactly these kinds (empty: a fault-free run).
    Only(BTreeSet<FaultKind>),
}

/// The denominator of [`FaultSelection::Weighted`]'s weights.
pub const SWARM_WEIGHT_SCALE: u32 = 64;

/// A kind's weight when a weighted swarm does not name it (3/8, as in [`FaultSelection::Swarm`]).
pub const SWARM_DEFAULT_WEIGHT: u32 = 24;

impl FromStr for FaultSelection {
    type Err = String;
    /// `swarm`, `all`, `none`, or a comma-separated list of kinds.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(weights) = s.strip_prefix("swarm:") {
            return weights
                .split(',')
                .filter(|w| !w.trim().is_empty())
                .map(|w| {
                    let (kind, weight) = w
                        .split_once('=')
                        .ok_or_else(|| format!("expected KIND=WEIGHT, got {w:?}"))?;
                    let weight: u32 = weight
                        .trim()
                        .parse()
                        .map_err(|e| format!("weight of {kind}: {e}"))?;
                    if weight > SWARM_WEIGHT_SCALE {
                        return Err(format!(
                            "weight of {kind}: {weight} is over {SWARM_WEIGHT_SCALE}"
                        ));
                    }
                    Ok((kind.trim().parse()?, weight))
                })
                .collect::<Result<_, String>>()
                .map(Self::Weighted);
        }
        match s {
            "swarm" => Ok(Self::Swarm),
            // Every kind of the single-relay and failover topologies; `cluster` is named.
            "all" => Ok(Self::Only(
                FaultKind::ALL
                    .into_iter()
                    .filter(|k| *k != FaultKind::Cluster)
                    .collect(),
            )),
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
            Self::Weighted(w) => {
                let parts: Vec<String> =
                    w.iter().map(|(k, w)| format!("{}={w}", k.name())).collect();
                write!(f, "swarm:{}", parts.join(","))
            }
            Self::Only(k) if k.is_empty() => f.write_str("none"),
            Self::Only(k)
                if k.len() == FaultKind::ALL.len() - 1 && !k.contains(&FaultKind::Cluster) =>
            {
                f.write_str("all")
            }
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
