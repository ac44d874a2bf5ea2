//! The fault plan of one run ([`FaultPlan`]) and its draw from the seed: for each enabled
//! kind, one to three faults at random times in the traffic window (a storm once), and the
//! bounds of the payment webhooks' faults ([`WebhookFaults`]). The `handoff` kind is drawn
//! last, and only for a sharded relay, so that the plans of every other run stay as they were.

use std::collections::BTreeSet;
use std::fmt;
use std::ops::ControlFlow;

use rand_chacha::ChaCha20Rng;
use rand_core::Rng as _;
use serde::{Deserialize, Serialize};

use super::{
    FaultAction, FaultEvent, FaultKind, FaultSelection, HostileAct, SWARM_DEFAULT_WEIGHT,
    SWARM_WEIGHT_SCALE, StoreChoice, StoreKind,
};
use crate::bounds::{
    LEASE_MS, MIN_CLUSTER_SHARDS, PAY, RELAY, RELAY_A, RELAY_B, RELAY_C, STORM_WAVE, STORM_WAVE_MS,
    STUCK_MIN_PROVOKE,
};
use crate::scenario::{Scale, Scenario};

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
/// [`WebhookPlan`](standins::WebhookPlan) within them (see `market`).
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

/// Reads of queued messages that fail right after every other idle stretch of a `days` run
/// (the expiry sweep's, as the stretch made messages due).
pub(super) const DAYS_FAILED_SWEEP_READS: u32 = 2;

impl FaultPlan {
    /// Draws a plan for `scenario` over a traffic window of `window_ms`, for a relay of
    /// `shards` cores.
    pub fn draw(
        rng: &mut ChaCha20Rng,
        selection: &FaultSelection,
        store: StoreChoice,
        scenario: &Scenario,
        (window_ms, shards): (u64, u16),
    ) -> Self {
        // Every kind but `handoff`, which is drawn last (see the module docs), and `cluster`,
        // a topology of its own that only its name selects.
        let first = || {
            FaultKind::ALL
                .into_iter()
                .filter(|k| !matches!(k, FaultKind::Handoff | FaultKind::Cluster))
        };
        let mut kinds: BTreeSet<FaultKind> = match selection {
            FaultSelection::Only(k) => k.clone(),
            FaultSelection::Swarm => loop {
                let k: BTreeSet<FaultKind> = first().filter(|_| rng.next_u32() % 8 < 3).collect();
                if !k.is_empty() {
                    break k;
                }
            },
            FaultSelection::Weighted(weights) => loop {
                let k: BTreeSet<FaultKind> = first()
                    .filter(|kind| {
                        let w = weights.get(kind).copied().unwrap_or(SWARM_DEFAULT_WEIGHT);
                        rng.next_u32() % SWARM_WEIGHT_SCALE < w
                    })
                    .collect();
                let all_zero = first()
                    .all(|kind| weights.get(&kind).copied().unwrap_or(SWARM_DEFAULT_WEIGHT) == 0);
                if !k.is_empty() || all_zero {
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
        let cluster = kinds.contains(&FaultKind::Cluster);
        for kind in kinds
            .iter()
            .filter(|k| **k != FaultKind::Handoff && !(cluster && **k == FaultKind::Failover))
        {
            d.kind(*kind, latency_ms);
        }
        let webhook = if kinds.contains(&FaultKind::Webhook) {
            d.webhook()
        } else {
            WebhookFaults::default()
        };
        // The failover topology's relays run one core each; a cluster has at least
        // `MIN_CLUSTER_SHARDS` shards (the cluster topology replaces the failover one).
        if kinds.contains(&FaultKind::Cluster) {
            kinds.remove(&FaultKind::Failover);
        }
        let shards = if kinds.contains(&FaultKind::Cluster) {
            shards.max(MIN_CLUSTER_SHARDS)
        } else if kinds.contains(&FaultKind::Failover) {
            1
        } else {
            shards
        };
        if shards > 1 && d.handoff_enabled(selection) {
            kinds.insert(FaultKind::Handoff);
            let count = 1 + d.rng.next_u32() % 3;
            for _ in 0..count {
                d.handoff(shards);
            }
        } else if shards <= 1 {
            // Nothing crosses between the cores of a relay of one.
            kinds.remove(&FaultKind::Handoff);
        }
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

    /// Times (offsets from the start of traffic) of the relay clock jumps (the world's
    /// included).
    pub fn clock_jumps(&self) -> impl Iterator<Item = u64> + '_ {
        self.events
            .iter()
            .filter(|e| {
                matches!(
                    e.action,
                    FaultAction::ClockJump { .. } | FaultAction::WorldJump { .. }
                )
            })
            .map(|e| e.at_ms)
    }

    /// Adds the world-clock jumps `(offset, ms)` of a `days` run ([`crate::class::days_jumps`]),
    /// every other one followed at once by `DAYS_FAILED_SWEEP_READS` failing reads of queued
    /// messages, keeping the events in time order.
    pub fn add_world_jumps(&mut self, jumps: &[(u64, u64)]) {
        for (n, &(at_ms, ms)) in jumps.iter().enumerate() {
            self.events.push(FaultEvent {
                at_ms,
                action: FaultAction::WorldJump { ms },
            });
            // Every other stretch ends with the expiry sweep's first queue reads failing:
            // the sweep that the jump makes due must retry its page, and lose no queue.
            if n % 2 == 1 {
                self.events.push(FaultEvent {
                    at_ms,
                    action: FaultAction::FailReads {
                        reads: DAYS_FAILED_SWEEP_READS,
                        table: Some(relay_core::store::Table::Messages.name().to_owned()),
                    },
                });
            }
        }
        self.events.sort_by_key(|e| e.at_ms);
    }

    /// The fault kinds the events actually exercise (a shrunk plan may have lost some).
    pub fn exercised(&self) -> BTreeSet<FaultKind> {
        let mut out = BTreeSet::new();
        for e in &self.events {
            let k = match &e.action {
                FaultAction::Partition { a, b } if a == PAY || b == PAY => FaultKind::Webhook,
                FaultAction::Partition { a, b } if a.starts_with(RELAY) && b.starts_with(RELAY) => {
                    FaultKind::Cluster
                }
                FaultAction::Partition { .. } => FaultKind::Partition,
                FaultAction::PartitionOneway { from, to }
                    if from.starts_with(RELAY) && to.starts_with(RELAY) =>
                {
                    FaultKind::Cluster
                }
                FaultAction::PartitionOneway { .. } => FaultKind::OneWay,
                FaultAction::Hold { .. } => FaultKind::Hold,
                FaultAction::MaxLatency { .. } => FaultKind::Latency,
                FaultAction::Crash { host } if host == RELAY => FaultKind::RelayCrash,
                FaultAction::Crash { .. } => FaultKind::ClientCrash,
                FaultAction::ClockJump { .. } => FaultKind::Webhook,
                FaultAction::SetSkew { .. } => FaultKind::ClockSkew,
                FaultAction::FailCommits { .. }
                | FaultAction::FailReads { .. }
                | FaultAction::StoreDown { .. } => FaultKind::CommitFail,
                FaultAction::StallCommit { .. } => FaultKind::CommitSlow,
                FaultAction::CrashAfterCommit { .. } => FaultKind::CommitCrash,
                FaultAction::CrashMidBatch { .. } => FaultKind::BatchCrash,
                FaultAction::Freeze { .. } if self.kinds.contains(&FaultKind::Cluster) => {
                    FaultKind::Cluster
                }
                FaultAction::Freeze { .. } => FaultKind::Failover,
                FaultAction::CutFromStore { .. }
                | FaultAction::Leave { .. }
                | FaultAction::CutFromBalancer { .. } => FaultKind::Cluster,
                FaultAction::Crossings { .. }
                | FaultAction::ShardCommitsFail { .. }
                | FaultAction::ShardStoreDown { .. }
                | FaultAction::ShardCommitSlow { .. }
                | FaultAction::CrashAfterCommitOf { .. } => FaultKind::Handoff,
                FaultAction::Hostile { act, .. } => match act {
                    HostileAct::Flood { .. } => FaultKind::Abuse,
                    HostileAct::Dishonest { .. } => FaultKind::Dishonest,
                    HostileAct::StopReading { .. } => FaultKind::SlowConsumer,
                    HostileAct::Storm { .. } => FaultKind::Storm,
                },
                FaultAction::Repair { .. }
                | FaultAction::RepairOneway { .. }
                | FaultAction::Release { .. }
                | FaultAction::Restart { .. }
                | FaultAction::WorldJump { .. } => continue,
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

    /// One to three faults of `kind` (a storm only once; a kind that needs a raw client
    /// none without one).
    fn kind(&mut self, kind: FaultKind, latency_ms: (u64, u64)) {
        let count = 1 + self.rng.next_u32() % 3;
        for _ in 0..count {
            if self.one(kind, latency_ms).is_break() {
                return;
            }
        }
    }

    /// One fault of `kind`; `Break` when no more of this kind are to be drawn.
    fn one(&mut self, kind: FaultKind, latency_ms: (u64, u64)) -> ControlFlow<()> {
        match kind {
            FaultKind::Partition => self.partition(),
            FaultKind::OneWay => self.one_way(),
            FaultKind::Hold => self.hold(),
            FaultKind::Latency => self.latency(latency_ms),
            FaultKind::RelayCrash => self.power_cycle(RELAY.to_owned(), 30_000),
            FaultKind::ClientCrash => {
                let c = self.client();
                self.power_cycle(c, 30_000);
            }
            FaultKind::Webhook => self.webhook_cut(),
            FaultKind::CommitFail => self.commit_fail(),
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
            FaultKind::SlowConsumer => return self.slow_consumer(),
            FaultKind::Storm => {
                self.storm();
                // One storm per kind is plenty.
                return ControlFlow::Break(());
            }
            FaultKind::ClockSkew => self.clock_skew(),
            FaultKind::Abuse => return self.abuse(),
            FaultKind::Failover => self.failover(),
            FaultKind::Cluster => self.cluster(),
            FaultKind::Dishonest => return self.dishonest(),
            // Drawn last, for a sharded relay only (`handoff`).
            FaultKind::Handoff => return ControlFlow::Break(()),
        }
        ControlFlow::Continue(())
    }

    /// Whether `selection` takes the `handoff` kind (a swarm draws it here, after the rest).
    fn handoff_enabled(&mut self, selection: &FaultSelection) -> bool {
        match selection {
            FaultSelection::Only(k) => k.contains(&FaultKind::Handoff),
            FaultSelection::Swarm => self.rng.next_u32() % 8 < 3,
            FaultSelection::Weighted(weights) => {
                let w = weights
                    .get(&FaultKind::Handoff)
                    .copied()
                    .unwrap_or(SWARM_DEFAULT_WEIGHT);
                self.rng.next_u32() % SWARM_WEIGHT_SCALE < w
            }
        }
    }

    /// One fault of the hand-off between the cores of a relay of `shards`: crossings lost,
    /// repeated and delayed for a while (half the time); one shard's store failing or slow
    /// alone; or
    /// a power-off right after an owner commits a hand-off or a recipient's shard applies one.
    fn handoff(&mut self, shards: u16) {
        let at = self.at();
        match self.rng.next_u32() % 4 {
            0 | 1 => {
                let ms = 2_000 + self.rng.next_u64() % 20_000;
                let pct = |d: &mut Self, max: u32| (d.rng.next_u32() % max) as u8;
                let action = FaultAction::Crossings {
                    ms,
                    lose_pct: pct(self, 30),
                    twice_pct: pct(self, 30),
                    delay_pct: pct(self, 40),
                    delay_max_ms: 10 + self.rng.next_u64() % 3_000,
                };
                self.push(at, action);
            }
            2 => {
                let shard = (self.rng.next_u32() % u32::from(shards.max(1))) as u16;
                let action = match self.rng.next_u32() % 3 {
                    0 => FaultAction::ShardCommitsFail {
                        shard,
                        commits: 1 + self.rng.next_u32() % 3,
                    },
                    1 => FaultAction::ShardStoreDown {
                        shard,
                        ms: 500 + self.rng.next_u64() % 5_000,
                    },
                    _ => FaultAction::ShardCommitSlow {
                        shard,
                        ms: 200 + self.rng.next_u64() % 3_000,
                    },
                };
                self.push(at, action);
            }
            _ => {
                let table = if self.rng.next_u32().is_multiple_of(2) {
                    relay_core::store::Table::Outbox
                } else {
                    relay_core::store::Table::InboxMarks
                };
                let restart_after_ms = 500 + self.rng.next_u64() % 10_000;
                self.push(
                    at,
                    FaultAction::CrashAfterCommitOf {
                        table: table.name().to_owned(),
                        restart_after_ms,
                    },
                );
            }
        }
    }

    /// A client host and the relay cut apart both ways, later repaired.
    fn partition(&mut self) {
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

    /// One direction between a client host and the relay cut, later repaired.
    fn one_way(&mut self) {
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

    /// A client host's link to the relay held, later released.
    fn hold(&mut self) {
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

    /// A spike of the maximum latency, later back to the plan's.
    fn latency(&mut self, latency_ms: (u64, u64)) {
        let (s, e) = self.span(20_000);
        let spike = 500 + self.rng.next_u64() % 3_000;
        self.push(s, FaultAction::MaxLatency { ms: spike });
        self.push(e, FaultAction::MaxLatency { ms: latency_ms.1 });
    }

    /// `host` powers off, and restarts at most `max_ms` later.
    fn power_cycle(&mut self, host: String, max_ms: u64) {
        let (s, e) = self.span(max_ms);
        self.push(s, FaultAction::Crash { host: host.clone() });
        self.push(e, FaultAction::Restart { host });
    }

    /// The processor cut off from the relay: retries must carry the payments through.
    fn webhook_cut(&mut self) {
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

    /// The store down for a while (one time in three), the next commits failing, or the next
    /// keyed reads failing (one time in three each).
    fn commit_fail(&mut self) {
        let at = self.at();
        match self.rng.next_u32() % 3 {
            0 => {
                let ms = 500 + self.rng.next_u64() % 5_000;
                self.push(at, FaultAction::StoreDown { ms });
            }
            1 => {
                let commits = 1 + self.rng.next_u32() % 3;
                self.push(at, FaultAction::FailCommits { commits });
            }
            _ => {
                let reads = 1 + self.rng.next_u32() % 3;
                // Any read, or only those of one lazy table: each read path (an account, a
                // tombstone set, a queue) gets its faults, however many reads of the others
                // come first.
                let lazy = relay_core::store::Table::ALL
                    .into_iter()
                    .filter(|t| t.is_lazy())
                    .collect::<Vec<_>>();
                let pick = self.rng.next_u32() as usize % (lazy.len() + 1);
                let table = lazy.get(pick).map(|t| t.name().to_owned());
                self.push(at, FaultAction::FailReads { reads, table });
            }
        }
    }

    /// A raw client stops reading (for a while, for longer than the close bound, or for
    /// good) while provoking more answers than the transport's window holds, so the relay's
    /// writes to it block.
    fn slow_consumer(&mut self) -> ControlFlow<()> {
        let Some(host) = self.raw() else {
            return ControlFlow::Break(());
        };
        let at = self.at();
        let provoke = STUCK_MIN_PROVOKE + self.rng.next_u32() % 300;
        let pause_ms = match self.rng.next_u32() % 3 {
            0 => None,
            1 => Some(5_000 + self.rng.next_u64() % 30_000),
            _ => Some(70_000 + self.rng.next_u64() % 60_000),
        };
        let act = HostileAct::StopReading { provoke, pause_ms };
        self.push(at, FaultAction::Hostile { host, act });
        ControlFlow::Continue(())
    }

    /// Every client host powers off and restarts at once (in waves that turmoil's accept
    /// queue takes), and a raw host opens many sockets.
    fn storm(&mut self) {
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
    }

    /// A client host's clock up to 3 minutes off either way, from the start: call signals
    /// (60 s window) between hosts skewed apart by more than that are refused, as they must
    /// be.
    fn clock_skew(&mut self) {
        let c = self.client();
        let skew_ms = i64::try_from(self.rng.next_u64() % 360_000).unwrap_or(0) - 180_000;
        self.push(0, FaultAction::SetSkew { host: c, skew_ms });
    }

    /// A raw client floods malformed frames.
    fn abuse(&mut self) -> ControlFlow<()> {
        let Some(host) = self.raw() else {
            return ControlFlow::Break(());
        };
        let at = self.at();
        let frames = self.scale.flood_frames(self.rng);
        let roll = self.rng.next_u64();
        let act = HostileAct::Flood { frames, roll };
        self.push(at, FaultAction::Hostile { host, act });
        ControlFlow::Continue(())
    }

    /// The active relay freezes for shorter or longer than the lease (a freeze the leader
    /// survives, and one it does not: the standby takes over; the frozen relay resumes with
    /// frames in flight and must commit nothing), or sometimes powers off instead.
    fn failover(&mut self) {
        let (s, e) = self.span(LEASE_MS * 4);
        if self.rng.next_u32().is_multiple_of(3) {
            self.push(s, FaultAction::Crash { host: RELAY.into() });
            self.push(e, FaultAction::Restart { host: RELAY.into() });
        } else {
            self.push(s, FaultAction::Freeze { ms: e - s });
        }
    }

    /// One node fault of the cluster topology, on the busiest node unless said: it freezes
    /// for shorter or longer than its lease (two times in eight), powers off and restarts (a
    /// join under load), leaves on purpose and starts again, is cut from the database for a
    /// while, or from the load balancer; or two nodes lose the links between them, both ways
    /// or one way only (not to the database or the clients).
    fn cluster(&mut self) {
        let (s, e) = self.span(LEASE_MS * 4);
        match self.rng.next_u32() % 8 {
            0 => {
                self.push(s, FaultAction::Crash { host: RELAY.into() });
                self.push(e, FaultAction::Restart { host: RELAY.into() });
            }
            1 => self.push(s, FaultAction::CutFromStore { ms: e - s }),
            2 => self.push(s, FaultAction::Leave { ms: e - s }),
            3 => self.push(s, FaultAction::CutFromBalancer { ms: e - s }),
            4 | 5 => {
                let nodes = [RELAY_A, RELAY_B, RELAY_C];
                let first = self.rng.next_u32() as usize % nodes.len();
                let (a, b) = (nodes[first], nodes[(first + 1) % nodes.len()]);
                let (a, b) = (a.to_owned(), b.to_owned());
                if self.rng.next_u32().is_multiple_of(2) {
                    let (from, to) = (a.clone(), b.clone());
                    self.push(s, FaultAction::PartitionOneway { from, to });
                    self.push(e, FaultAction::RepairOneway { from: a, to: b });
                } else {
                    let (x, y) = (a.clone(), b.clone());
                    self.push(s, FaultAction::Partition { a: x, b: y });
                    self.push(e, FaultAction::Repair { a, b });
                }
            }
            _ => self.push(s, FaultAction::Freeze { ms: e - s }),
        }
    }

    /// A raw client makes dishonest requests, after setup gave the world something to steal
    /// (in one act of three, across a relay power cycle).
    fn dishonest(&mut self) -> ControlFlow<()> {
        let Some(host) = self.raw() else {
            return ControlFlow::Break(());
        };
        let at = self.window_ms / 4 + self.at() * 3 / 4;
        let count = 10 + self.rng.next_u32() % 30;
        let roll = self.rng.next_u64();
        let act = HostileAct::Dishonest { count, roll };
        self.push(at, FaultAction::Hostile { host, act });
        // One act in three meets the worst moment on purpose: the relay powers off while
        // the act's attempts are under way and restarts within ten seconds. Drawn from the
        // act's own roll, so the rest of the plan is drawn as before.
        if roll.is_multiple_of(3) {
            let crash =
                (at + 1_000 + (roll >> 8) % 15_000).min(self.window_ms.saturating_sub(2_000));
            let restart = (crash + 1_000 + (roll >> 24) % 9_000).min(self.window_ms);
            self.push(crash, FaultAction::Crash { host: RELAY.into() });
            self.push(restart, FaultAction::Restart { host: RELAY.into() });
        }
        ControlFlow::Continue(())
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
