//! Invariants checked at the end of every run; each violation names its oracle. One module
//! per family; each starts with the table of its oracles:
//!
//! | module | oracles |
//! |---|---|
//! | [`delivery`] | `delivered-exactly-once`, `non-participant`, `seq-order`, `seq-gap-free` (shared with Jepsen mode, over [`Observed`]) |
//! | [`receipts`] | `receipts` (shared with Jepsen mode), `receipts-clear`, `retract-lands` |
//! | `liveness` | `liveness`, `sync-complete`, `probes`, `outbox-drained`, `media` |
//! | `storage` | `seq-unique`, `retract-drops`, `receipt-drops`, `fail-stop`, `store-intact`, `queue-summaries`, `contacts-index`, `canary-store`, `canary-logs` |
//! | [`push`] | `push` (real delivery to the Web Push, FCM and APNs stand-ins, see [`crate::pushworld`]) |
//! | [`adversaries`] | `authz`, `bad-input`, `stuck-client`, `resources` |
//! | `market` | `payment-applied-once`, `alias-unique`, `channel-single-owner`, `holds-released`, `quota`, `commerce-model`, `order-records`, `bind-state` |
//! | [`wire`] | `duplicate-delivery`, `seq-reused` (simulator and Jepsen mode), `ack-lost` (Jepsen mode): over the frames each socket received, before the client's dedup |
//! | `operator` | `webhook-counts` (the relay's metrics against the webhooks the run sent) |
//! | `cluster` | `shard-epochs`, `takeover`, `ownership`, `handoffs-drained` (the cluster topology's membership and shards, over what the shared store recorded) |
//! | `expiry` | `expiry`, `spent-bound`, `queue-bounds`, `drills`, and what the drill host found (`lookup`, `tokenless`, `values`, `reads`, `push-off`, `dedup`, `retract`, `credentials`, `limit-exact`, `push-policy`; see [`crate::drills`]) |
//!
//! and `setup`, `host-error`, `panic` from the runner and the sweep. [`observed`] is the
//! history type the client-visible oracles read: the simulator builds it here from its trace
//! (`Input`), Jepsen mode from its own history.
//!
//! Retracted messages are exempt from delivery and receipt checks: the relay drops a
//! still-queued copy on `retract`, and a later receipt "up to seq" covers it.

pub mod adversaries;
mod cluster;
pub mod delivery;
mod expiry;
mod liveness;
mod market;
pub mod observed;
mod operator;
pub mod push;
pub mod receipts;
mod storage;
pub mod wire;

use std::collections::{BTreeMap, BTreeSet};

use client_core::machine::Event;
use client_core::store::MessageStatus;
use relay_core::store::Snapshot;

use self::observed::{Ack, Observed, Seen, acked_in};
use crate::faults::FaultPlan;
use crate::pushworld::SeenPush;
use crate::scenario::{Pair, Scenario};
use crate::store::{ClusterRecord, History};
use crate::trace::Record;
use crate::world::World;
use client::SharedStore;

pub use self::adversaries::{RelayStats, ResourceLimits, resources};
pub(crate) use self::market::{MarketInput, check_market};
pub(crate) use self::operator::{WebhookInput, webhook_counts};
pub use self::push::{PUSH_SLACK_MS, PushFacts, check_push};
pub(crate) use self::storage::logs_free_of_canaries;
pub use crate::violation::{Oracle, Violation};

/// What the oracles read.
#[derive(Debug)]
pub(crate) struct Input<'a> {
    pub(crate) scenario: &'a Scenario,
    pub(crate) plan: &'a FaultPlan,
    pub(crate) records: &'a [Record],
    /// Each client's (primary device's) store.
    pub(crate) stores: &'a [SharedStore],
    /// The conversation of each pair.
    pub(crate) convs: &'a BTreeMap<usize, String>,
    /// Every alias each client had (a bind adds one).
    pub(crate) aliases: &'a BTreeMap<usize, Vec<String>>,
    /// The relay store's committed content at the end.
    pub(crate) snapshot: &'a Snapshot,
    /// What was committed over the run.
    pub(crate) history: &'a History,
    pub(crate) world: &'a World,
    pub(crate) pushes: &'a [SeenPush],
    pub(crate) start_ms: Option<u64>,
    pub(crate) heal_ms: Option<u64>,
    /// When the run ended.
    pub(crate) end_ms: u64,
    /// Final clock skew of each client.
    pub(crate) skews: &'a [i64],
    /// The relay's configuration (its TTLs and bounds).
    pub(crate) relay: &'a relay_core::Config,
    /// The drills the drill host was to run.
    pub(crate) drills: &'a [crate::class::Drill],
    /// The cluster topology's record (`shards` 0: not a cluster run).
    pub(crate) cluster: &'a ClusterRecord,
}

/// Runs every store/trace oracle (after the raw clients' own findings).
pub(crate) fn check_all(input: &Input<'_>, out: &mut Vec<Violation>) {
    out.extend(input.world.findings.iter().cloned());
    if out.iter().any(|v| v.oracle == Oracle::Setup) {
        return;
    }
    let convs: Vec<&str> = input.convs.values().map(String::as_str).collect();
    let acked = acked_in(input.stores, &convs);
    let observed = observe(input, &acked);
    let got = first_received(input.records);
    let conv_of: BTreeMap<String, String> = input
        .records
        .iter()
        .filter_map(|r| match r {
            Record::Sent { id, conv, .. } => Some((id.clone(), conv.clone())),
            _ => None,
        })
        .collect();
    let seen_at_the_wire = input.world.wire.seen(&conv_of);
    wire::duplicate_delivery(&seen_at_the_wire, out);
    wire::seq_reused(&seen_at_the_wire, out);
    delivery::exactly_once(&observed, out);
    delivery::non_participant(&observed, out);
    delivery::seq_order(&observed, out);
    delivery::seq_gap_free(&observed, out);
    liveness::liveness(input, &observed, &got, out);
    liveness::sync_complete(input, &got, out);
    storage::seq_unique(input, out);
    storage::retract_drops(input, out);
    storage::receipt_drops(input, out);
    receipts::receipts(&observed, out);
    receipts::receipts_clear(input, &got, out);
    receipts::retract_lands(input, &observed, out);
    storage::fail_stop(input, &acked, out);
    storage::store_intact(input, out);
    storage::queue_summaries(input, out);
    storage::contacts_index(input, out);
    storage::store_canaries(input, out);
    liveness::outbox(input, out);
    liveness::probes(input, out);
    liveness::media(input, out);
    push::push(input, &observed, out);
    adversaries::authz(input, &got, out);
    adversaries::stuck_clients(input, out);
    expiry::nothing_stored_past_its_ttl(input, out);
    expiry::spent_within_bound(input, out);
    expiry::queues_within_bounds(input, out);
    expiry::drills(input, out);
    cluster::cluster(input, out);
}

/// What the clients of a run observed, from its trace.
fn observe<'a>(input: &Input<'a>, acked: &'a [Ack]) -> Observed<'a> {
    let members: BTreeMap<&str, Pair> = input
        .convs
        .iter()
        .map(|(pair, conv)| (conv.as_str(), input.scenario.pairs[*pair]))
        .collect();
    // The relay drops a still-queued copy of a retracted message (relay-core `messaging`), and
    // the sweep one whose TTL passed: neither need be delivered, and receipts may cover both.
    let expired = input
        .history
        .messages
        .values()
        .filter(|m| expiry::expired_in_time(input, m))
        .map(|m| m.id.as_str());
    let exempt: BTreeSet<&str> = input
        .records
        .iter()
        .filter_map(|r| match r {
            Record::Event {
                event: Event::Retracted { id },
                ..
            } => Some(id.as_str()),
            _ => None,
        })
        .chain(input.world.honest_retracts.iter().map(String::as_str))
        .chain(expired)
        .collect();
    Observed {
        members,
        aliases: input.aliases,
        acked,
        exempt,
        events: input.records.iter().filter_map(seen).collect(),
        causal: true,
        stores: input.stores,
    }
}

/// What a trace record tells the client-visible oracles, if anything.
fn seen(record: &Record) -> Option<Seen<'_>> {
    match record {
        Record::Event { who, event, .. } => {
            let who = *who;
            Some(match event {
                Event::Authenticated { .. } => Seen::Login { who },
                Event::Message(m) => Seen::Message {
                    who,
                    id: &m.id,
                    conv: &m.conversation_id,
                    seq: m.seq,
                    from: m.from_alias_id.as_deref(),
                },
                Event::StatusChange { id, status } => Seen::Status {
                    who,
                    id,
                    status: *status,
                },
                Event::Typing {
                    from_alias_id,
                    conversation_id,
                } => Seen::Typing {
                    who,
                    conv: conversation_id,
                    from: from_alias_id,
                },
                _ => return None,
            })
        }
        Record::ReadMarked { who, conv, seq, .. } => Some(Seen::ReadMarked {
            who: *who,
            conv,
            seq: *seq,
        }),
        Record::Sent { .. } | Record::Note { .. } => None,
    }
}

/// `(client, message id) -> simulated ms` of the first app receipt on any device.
fn first_received(records: &[Record]) -> BTreeMap<(usize, &str), u64> {
    let mut out = BTreeMap::new();
    for r in records {
        if let Record::Event {
            t_ms,
            who,
            event: Event::Message(m),
        } = r
        {
            out.entry((who.client, m.id.as_str())).or_insert(*t_ms);
        }
    }
    out
}

/// `message id -> simulated ms` the sender saw its ack (`sent` status).
fn ack_times(records: &[Record]) -> BTreeMap<&str, u64> {
    let mut out = BTreeMap::new();
    for r in records {
        if let Record::Event {
            t_ms,
            who,
            event:
                Event::StatusChange {
                    id,
                    status: MessageStatus::Sent,
                },
        } = r
            && who.device == 0
        {
            out.entry(id.as_str()).or_insert(*t_ms);
        }
    }
    out
}
