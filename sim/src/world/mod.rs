//! The state a run's hosts share: the runner, the client apps, the raw clients, the
//! commerce scripts and, at the end, the oracles read and write one [`World`]
//! (single-threaded: turmoil runs every host on the runner's thread), and each scripted host
//! gets a [`HostCtx`].
//!
//! [`ledger`] holds the commerce records (orders, listings, binds, the audit) and the payment
//! stand-ins the scripts pay through.

pub(crate) mod ledger;

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::rc::Rc;

use client::SharedStore;
use seam::net::Endpoint;

use self::ledger::{Ledger, Payments};
use crate::bounds::{PAY, PAY_PORT, RELAY, RELAY_PORT};
use crate::class::Drill;
use crate::faults::HostileAct;
use crate::pushworld::PushWorld;
use crate::scenario::Scenario;
use crate::store::StoreCtl;
use crate::time::{SkewClock, sim_ms, sleep_ms};
use crate::trace::{Device, Record, Trace};
use crate::transit::CrossingFaults;
use crate::violation::Violation;

/// A raw client's slow-consumer episode.
#[derive(Debug, Clone)]
pub(crate) struct StuckRec {
    pub(crate) host: String,
    /// When it stopped reading (and started provoking answers).
    pub(crate) stopped_ms: u64,
    /// When its own writes blocked (the relay stopped reading it), if they did.
    pub(crate) blocked_ms: Option<u64>,
    /// When its socket disappeared (the relay reset it), if it did within the bound.
    pub(crate) closed_ms: Option<u64>,
    /// Frames sent to provoke answers.
    pub(crate) provoke: u32,
    /// The pause outlasted the bound (or never ended): the relay had to close it.
    pub(crate) must_close: bool,
}

/// A probe sent in the probe round.
#[derive(Debug, Clone)]
pub(crate) struct ProbeRec {
    pub(crate) kind: &'static str,
    pub(crate) from: usize,
    pub(crate) to: usize,
    pub(crate) conv: String,
    /// Message id or call id.
    pub(crate) id: String,
    pub(crate) sent_ms: u64,
}

/// State shared between the runner and the scripted hosts (single-threaded: turmoil runs every
/// host on the runner's thread).
#[derive(Debug, Default)]
pub(crate) struct World {
    /// What the clients' connections carried (their taps).
    pub(crate) wire: crate::wiretap::WireLog,
    pub(crate) aliases: BTreeMap<usize, String>,
    pub(crate) uuids: BTreeMap<usize, String>,
    pub(crate) requested: BTreeSet<usize>,
    pub(crate) accepted: BTreeSet<usize>,
    pub(crate) ready: BTreeSet<usize>,
    /// Conversation of each pair, as learned by its members.
    pub(crate) convs: BTreeMap<usize, String>,
    /// Simulated ms at which traffic starts.
    pub(crate) traffic_start_ms: Option<u64>,
    /// Simulated ms at which everything was healed.
    pub(crate) heal_ms: Option<u64>,
    /// Next action index per client (survives client crashes).
    pub(crate) next_action: BTreeMap<usize, usize>,
    /// Host incarnations (seed derivation across restarts).
    pub(crate) incarnations: BTreeMap<usize, u64>,
    /// Clients whose second device is logged in (or logging in) right now: their primary
    /// device leaves the session to it (see `apps::keep_session`).
    pub(crate) second_device_on: BTreeSet<usize>,
    /// When the relay host actually powered off, in simulated ms (a crash the plan names, or
    /// one a store fault asked for at a later commit than its plan event).
    pub(crate) relay_off_ms: Vec<u64>,
    /// A slow commit is under way right now (see `Sim::stall`): the relay acknowledges
    /// nothing until it is done.
    pub(crate) relay_stalled: bool,
    /// Second-device stores.
    pub(crate) second_stores: Vec<(Device, SharedStore)>,
    /// Every alias each client had, oldest first (a bind retires the previous one).
    pub(crate) alias_history: BTreeMap<usize, Vec<String>>,
    /// Orders, listings, binds and the audit.
    pub(crate) ledger: Ledger,
    /// Strangers' `(uuid, alias)` by index.
    pub(crate) strangers: BTreeMap<usize, (String, String)>,
    /// Friend requests each stranger rejected.
    pub(crate) rejected: BTreeMap<usize, usize>,
    /// Acts for the raw hosts, by host name.
    pub(crate) hostile_inbox: BTreeMap<String, VecDeque<HostileAct>>,
    /// Raw clients' direct observations.
    pub(crate) findings: Vec<Violation>,
    /// Slow-consumer episodes.
    pub(crate) stuck: Vec<StuckRec>,
    /// Ids of messages a stranger tried to put into someone else's conversation.
    pub(crate) evil_ids: Vec<String>,
    /// Conversations of strangers with their own puppets (theirs to write and acknowledge in).
    pub(crate) puppet_convs: BTreeSet<String>,
    /// Honest messages sent: id -> (conv, recipient alias).
    pub(crate) sent_ids: BTreeMap<String, (String, String)>,
    /// Ids retracted by their own authors.
    pub(crate) honest_retracts: BTreeSet<String>,
    /// Media sent: message id -> (conv, sha256 of the plaintext, simulated ms of the send,
    /// just after the upload completed).
    pub(crate) media_sent: BTreeMap<String, (String, String, u64)>,
    /// Media downloads by recipients: (client, message id, outcome, simulated ms).
    pub(crate) media_checks: Vec<(usize, String, Result<bool, String>, u64)>,
    /// Probes sent.
    pub(crate) probes: Vec<ProbeRec>,
    /// Offline spells: (client, from ms, to ms).
    pub(crate) offline: Vec<(usize, u64, u64)>,
    /// Clients whose push targets the relay took.
    pub(crate) push_registered: BTreeSet<usize>,
    /// Push targets (Web Push subscription ids, FCM and APNs tokens) of each client.
    pub(crate) push_targets: BTreeMap<usize, Vec<String>>,
    /// The subscription whose browser unsubscribed, and when (simulated ms).
    pub(crate) revoked: Option<(String, u64)>,
    /// When the final relay clock jump happened (simulated ms).
    pub(crate) final_jump_ms: Option<u64>,
    /// Every forward step of the relay's clock, `(simulated ms, step in ms)`: clock-jump
    /// faults, the `days` class's idle stretches, the drills' window jumps, the final jump.
    pub(crate) relay_jumps: Vec<(u64, u64)>,
    /// What the drill host asked the runner for, oldest first (see [`RunnerRequest`]).
    pub(crate) runner_requests: VecDeque<RunnerRequest>,
    /// What the drills did and found (see [`crate::drills`]).
    pub(crate) drills: DrillLog,
    /// The statuses the drills' own signed payment webhooks were answered with, and how
    /// often (the `webhook-counts` oracle adds them to the processors' deliveries).
    pub(crate) drill_webhooks: BTreeMap<u16, u64>,
    /// Failing store reads armed at the drills' request (see [`RunnerRequest::FailRead`]).
    pub(crate) drill_reads_armed: u64,
    /// Push targets the drills registered (the `push` oracle leaves them to the drills).
    pub(crate) drill_push_targets: BTreeSet<String>,
    /// Store faults of the plan applied so far (failed or stalled commits and reads, the
    /// store down, crashes around a commit).
    pub(crate) store_faults: u64,
    /// Keyed store reads failed so far (the plan's faults and the drills').
    pub(crate) store_failed_reads: u64,
    /// The failover topology's lease (who is active).
    pub(crate) lease: Option<StoreCtl>,
    /// What happens to the crossings between the relay's cores (`handoff` faults).
    pub(crate) crossings: Option<CrossingFaults>,
}

/// What the drills did: per drill, the checks judged and the steps a fault left unjudged,
/// whether it finished, and what it found.
#[derive(Debug, Default)]
pub(crate) struct DrillLog {
    /// Checks judged, by drill.
    pub(crate) judged: BTreeMap<Drill, u64>,
    /// Steps not judged (a fault disturbed them), by drill.
    pub(crate) unjudged: BTreeMap<Drill, u64>,
    /// Drills that ran to their end.
    pub(crate) finished: Vec<Drill>,
    /// Breaches found.
    pub(crate) findings: Vec<Violation>,
}

/// What a scripted host may ask of the runner, which does it at its next step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunnerRequest {
    /// Power the relay off (the active one, in the failover topology) and start it again
    /// `down_ms` later.
    PowerCycleRelay {
        /// How long it stays off.
        down_ms: u64,
    },
    /// The relay's clock jumps `ms` forward (a drill waits out a rate window).
    JumpRelayClock {
        /// Milliseconds.
        ms: u64,
    },
    /// The store's next read of `table` fails (a drill asks a question across a failed read),
    /// unless failing reads of the plan are pending (then nothing is armed).
    FailRead {
        /// The table.
        table: relay_core::store::Table,
    },
}

impl World {
    /// Crossings between the relay's cores a `handoff` fault lost, repeated or delayed so far.
    pub(crate) fn crossings_faulted(&self) -> u64 {
        self.crossings.as_ref().map_or(0, |c| c.counts().faulted())
    }

    /// How far the relay's clock moved between the simulated times `from` and `to`: the
    /// simulated time between them plus every jump after `from`, up to and including `to`.
    pub(crate) fn relay_elapsed(&self, from: u64, to: u64) -> u64 {
        let jumped: u64 = self
            .relay_jumps
            .iter()
            .filter(|(at, _)| *at > from && *at <= to)
            .map(|(_, ms)| ms)
            .sum();
        to.saturating_sub(from) + jumped
    }

    /// The relay's clock (Unix ms) at simulated time `t`: the simulated epoch, `t`, and every
    /// jump up to and including `t`.
    pub(crate) fn relay_now(&self, t: u64) -> u64 {
        let jumped: u64 = self
            .relay_jumps
            .iter()
            .filter(|(at, _)| *at <= t)
            .map(|(_, ms)| ms)
            .sum();
        seam::clock::SIM_EPOCH_BASE.0 + t + jumped
    }

    /// Shard moves between the cluster topology's nodes so far (0 in other topologies).
    pub(crate) fn shard_moves(&self) -> u64 {
        self.lease.as_ref().map_or(0, StoreCtl::cluster_moves)
    }

    /// The relay host that serves account `uuid` itself: in the cluster topology the node its
    /// shard's owner is (no balancer or node passing its socket on in between), else
    /// [`active_relay`](Self::active_relay).
    pub(crate) fn relay_serving(&self, uuid: &str) -> String {
        let owner = self.lease.as_ref().and_then(|ctl| {
            let map = relay_core::handoff::ShardMap::new(ctl.cluster_shards())?;
            let user = wire::UserUuid::parse(uuid).ok()?;
            ctl.cluster_directory().remove(&map.of_user(&user).0)
        });
        owner.unwrap_or_else(|| self.active_relay())
    }

    /// The host of the active relay: `relay`, or in the failover topology the lease holder
    /// (`relay`, the balancer, while nobody holds it).
    pub(crate) fn active_relay(&self) -> String {
        self.lease
            .as_ref()
            .and_then(StoreCtl::leader)
            .unwrap_or_else(|| RELAY.to_owned())
    }
}

/// The world, shared by every host of a run.
pub(crate) type Shared = Rc<RefCell<World>>;

/// What a scripted host (a client app, a raw client, the auditor) needs.
pub(crate) struct HostCtx {
    /// The host's client (or stranger) index.
    pub(crate) me: usize,
    /// The run's seed.
    pub(crate) seed: u64,
    pub(crate) scenario: Rc<Scenario>,
    pub(crate) world: Shared,
    pub(crate) trace: Trace,
    /// The client's durable store (it survives the host's power-offs).
    pub(crate) store: SharedStore,
    pub(crate) clock: SkewClock,
    pub(crate) payments: Payments,
    pub(crate) push: PushWorld,
    /// Bind confirmed vanity orders.
    pub(crate) bind_vanity: bool,
}

/// Appends a note to the trace, stamped with simulated time.
pub(crate) fn note(ctx: &HostCtx, text: String) {
    ctx.trace.push(Record::Note {
        t_ms: sim_ms(),
        text,
    });
}

/// Waits (polling every 100 ms) until `f` holds of the world.
pub(crate) async fn wait_until(ctx: &HostCtx, f: impl Fn(&World) -> bool) {
    while !f(&ctx.world.borrow()) {
        sleep_ms(100).await;
    }
}

/// The payment processor stand-in's hosted page, as the relay is configured to name it in an
/// order's `payment_url` (`{base}/{order_id}`).
pub(crate) fn payment_page_base() -> String {
    format!("http://{PAY}:{PAY_PORT}/invoice")
}

/// The relay's base URL as every host reaches it.
pub(crate) fn relay_endpoint() -> Endpoint {
    Endpoint::parse(&format!("http://{RELAY}:{RELAY_PORT}"))
        .unwrap_or_else(|_| unreachable!("a static, valid base URL"))
}
