//! Invariants checked at the end of every run; each violation names its oracle.
//!
//! | oracle | checks |
//! |---|---|
//! | `delivered-exactly-once` | every message the relay acknowledged (the sender's store has its seq) reaches an app of the recipient's account; no app sees one message twice |
//! | `liveness` | every acknowledged message reaches its recipient within `DELIVERY_BOUND_MS` (80 s: a dead socket is noticed after 60 s of silence) of healing, or of its ack if later, however large the backlog |
//! | `seq-order` | per device and conversation, `message` events come in strictly increasing seq |
//! | `seq-gap-free` | per conversation, the seqs seen (sender acks ∪ recipient messages) are exactly `1..=max` |
//! | `seq-unique` | in the relay's committed rows, a message (author, id) has one seq (a resend is deduplicated, never stored again) and a seq of a conversation belongs to one message (never reused, e.g. after a restart) |
//! | `sync-complete` | a client that connects while the network is healthy (a run without fault events, or after healing) and stays connected gets everything queued for it at that moment within `SYNC_BOUND_MS` (20 s), whatever later traffic does |
//! | `non-participant` | no message or typing event reaches a device outside the conversation, or claims a sender other than the peer |
//! | `receipts` | `delivered`/`read` only for messages the recipient's account received (and, for `read`, marked read); a status never moves down |
//! | `receipts-clear` | the relay deletes a queued message (a receipt, a retract) only after an app of the recipient received it, or its author retracted it |
//! | `fail-stop` | every message acknowledged and every order handed out was committed first (the store's history has it) |
//! | `store-intact` | every reopen of the store (restart, rebuild) loads exactly what was committed, every table and row (SQLite); nothing is committed while the relay is powered off |
//! | `outbox-drained` | after the liveness phase no primary device has an unacknowledged outbox intent |
//! | `probes` | after healing, every probe message, typing notice and call offer (and its answer) arrives within `PROBE_BOUND_MS`; a call between clocks skewed more than the 60 s signal window apart is refused instead |
//! | `retract-lands` | a retract the relay accepted reaches the recipient of the message (if it got the message) |
//! | `media` | media a recipient downloads decrypts to what its sender uploaded |
//! | `push` | (real delivery to the Web Push, FCM and APNs stand-ins, see [`super::pushworld`]) every push reaches a registered target, decrypts / verifies, and carries exactly `{"type":"new_msg"}` and no alias, id or text; at most one per target per 30 s window; none after the target's push service answered 404/410; a client offline with a target while a message is acked for it is pushed ([`check_push`]) |
//! | `authz` | requests an honest client never makes are refused: no message of a stranger in someone else's conversation is acked, committed or delivered, no receipt mark in a stranger's name, no retract by anyone but the author lands, no friendship, order, channel or identity of someone else is taken, a rejected request stays rejected |
//! | `bad-input` | every malformed frame gets an error frame, or the socket is closed with a code |
//! | `stuck-client` | a client that stopped reading is closed by the relay within `STUCK_CLOSE_BOUND_MS` (unless the relay was powered off meanwhile: the socket died with it), and one that reads again gets a working socket |
//! | `resources` | (with a relay stats source) buffered outbound bytes per connection stay under the limit and connections are freed; today only what is observable from outside (`stuck-client`) |
//! | `canary-store` / `canary-logs` | no planted plaintext in the relay's committed rows or in any log line |
//! | `payment-applied-once`, `alias-unique`, `channel-single-owner`, `holds-released`, `quota`, `commerce-model` | commerce, after the public-API audit of [`super::commerce`]: paid orders confirmed (or late and refund-flagged) and their `payment_confirmed` seen at least once by the buyer and at most once by its primary device, one owner per alias and channel, holds released, seats counted, refund flags only on orders a genuine payment reached |
//!
//! Retracted messages are exempt from delivery and receipt checks: the relay drops a
//! still-queued copy on `retract`, and a later receipt "up to seq" covers it.

use std::collections::{BTreeMap, BTreeSet};

use client_core::machine::Event;
use client_core::store::{ClientStore as _, MessageStatus};
use relay_core::store::{Snapshot, Table};
use wire::frames::CallKind;
use wire::http::{OrderKind, OrderState};

use crate::bounds::{
    DELIVERY_BOUND_MS, PROBE_BOUND_MS, PUSH, RELAY, STUCK_CLOSE_BOUND_MS, SYNC_BOUND_MS,
};
use crate::faults::{FaultAction, FaultPlan};
use crate::pushworld::{SeenPush, zero_knowledge};
use crate::scenario::Scenario;
use crate::store::History;
use crate::trace::{Device, Record};
pub use crate::violation::Violation;
use crate::world::World;
use crate::world::ledger::{Ledger, OrderRec};
use client::SharedStore;
use standins::PaymentProcessor;

/// Every oracle name (for summaries).
pub const ORACLES: [&str; 32] = [
    "delivered-exactly-once",
    "liveness",
    "seq-order",
    "seq-gap-free",
    "seq-unique",
    "sync-complete",
    "non-participant",
    "receipts",
    "receipts-clear",
    "fail-stop",
    "store-intact",
    "outbox-drained",
    "probes",
    "retract-lands",
    "media",
    "push",
    "authz",
    "bad-input",
    "stuck-client",
    "resources",
    "canary-store",
    "canary-logs",
    "setup",
    "host-error",
    "panic",
    "payment-applied-once",
    "alias-unique",
    "channel-single-owner",
    "holds-released",
    "quota",
    "commerce-model",
    "crash",
];

/// What the oracles read.
#[derive(Debug)]
pub(crate) struct Input<'a> {
    pub(crate) scenario: &'a Scenario,
    pub(crate) plan: &'a FaultPlan,
    pub(crate) records: &'a [Record],
    pub(crate) stores: &'a [SharedStore],
    pub(crate) second_stores: &'a [(Device, SharedStore)],
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
}

/// A message as acknowledged to its sender.
#[derive(Debug, Clone)]
struct Acked {
    id: String,
    conv: String,
    seq: u64,
    sender: usize,
}

/// A relay stats sample: the resource oracle's input once the relay server exposes one (open
/// connections, bytes buffered for sockets). Nothing provides it yet; see [`resources`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RelayStats {
    /// Sockets the relay holds.
    pub open_connections: u64,
    /// Bytes queued for sockets, over all of them.
    pub buffered_outbound_bytes: u64,
    /// The largest queue of one socket, in bytes.
    pub max_buffered_per_connection_bytes: u64,
}

/// Limits the resource oracle holds a stats source to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResourceLimits {
    /// Most bytes queued for one socket.
    pub per_connection_bytes: u64,
    /// Most sockets beyond the run's own (clients, strangers' sockets).
    pub slack_connections: u64,
}

/// The resource oracle over stats samples `(simulated ms, stats)`: per-connection buffers
/// under the limit at every sample; after every stuck client was closed, the relay holds no
/// more sockets than the run opened. An empty sample list checks nothing (today's relay
/// exposes no stats; the stuck-client oracle covers what is visible from outside).
pub fn resources(
    samples: &[(u64, RelayStats)],
    limits: ResourceLimits,
    expected_connections: u64,
    out: &mut Vec<Violation>,
) {
    for (t, s) in samples {
        if s.max_buffered_per_connection_bytes > limits.per_connection_bytes {
            out.push(Violation::new(
                "resources",
                format!(
                    "at {t} ms a socket had {} bytes queued (limit {})",
                    s.max_buffered_per_connection_bytes, limits.per_connection_bytes
                ),
            ));
        }
    }
    if let Some((t, s)) = samples.last()
        && s.open_connections > expected_connections + limits.slack_connections
    {
        out.push(Violation::new(
            "resources",
            format!(
                "at {t} ms the relay held {} sockets, {expected_connections} expected",
                s.open_connections
            ),
        ));
    }
}

/// Runs every store/trace oracle.
pub(crate) fn check_all(input: &Input<'_>, out: &mut Vec<Violation>) {
    out.extend(input.world.findings.iter().cloned());
    if out.iter().any(|v| v.oracle == "setup") {
        return;
    }
    let conv_pair: BTreeMap<&str, usize> = input
        .convs
        .iter()
        .map(|(pair, conv)| (conv.as_str(), *pair))
        .collect();
    let all_acked = acked_messages(input);
    // The relay drops a still-queued copy of a retracted message (relay-core `messaging`): a
    // retracted message need not be delivered, and receipts may cover it.
    let retracted: BTreeSet<&str> = input
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
        .collect();
    let acked: Vec<Acked> = all_acked
        .iter()
        .filter(|a| !retracted.contains(a.id.as_str()))
        .cloned()
        .collect();
    let got = first_received(input.records);
    delivery(input, &conv_pair, &acked, out);
    liveness(input, &conv_pair, &acked, &got, out);
    gap_free(input, &all_acked, out);
    seq_unique(input, out);
    sync_complete(input, &got, out);
    receipts(input, &conv_pair, &acked, out);
    receipts_clear(input, &got, out);
    fail_stop(input, &all_acked, out);
    store_intact(input, out);
    outbox(input, out);
    store_canaries(input, out);
    probes(input, out);
    retract_lands(input, &conv_pair, &all_acked, out);
    media(input, out);
    push(input, &conv_pair, &acked, out);
    authz(input, &got, out);
    stuck_clients(input, out);
}

/// A client that stopped reading was closed within the bound (seen from outside: its host's
/// socket was reset).
fn stuck_clients(input: &Input<'_>, out: &mut Vec<Violation>) {
    // A relay powered off while the client was stuck took the socket with it: the restarted
    // relay never knew it, and turmoil sends the client no reset. (When it really powered
    // off: a store fault's crash happens at a later commit than its plan event.)
    for s in &input.world.stuck {
        let window = s.stopped_ms..=s.stopped_ms + STUCK_CLOSE_BOUND_MS;
        if input.world.relay_off_ms.iter().any(|t| window.contains(t)) {
            continue;
        }
        if s.must_close && s.closed_ms.is_none() {
            out.push(Violation::new(
                "stuck-client",
                format!(
                    "{} stopped reading at {} ms and provoked {} answers ({}); the relay had not closed its socket {STUCK_CLOSE_BOUND_MS} ms later",
                    s.host,
                    s.stopped_ms,
                    s.provoke,
                    s.blocked_ms.map_or_else(
                        || "its writes never blocked".to_owned(),
                        |b| format!("the relay stopped reading it at {b} ms")
                    )
                ),
            ));
        }
    }
    // Resource bounds beyond what is visible from outside need the relay's stats (not
    // exposed yet): the samples are empty and check nothing.
    resources(
        &[],
        ResourceLimits {
            per_connection_bytes: u64::MAX,
            slack_connections: 0,
        },
        0,
        out,
    );
}

fn acked_messages(input: &Input<'_>) -> Vec<Acked> {
    let mut out = Vec::new();
    for (client, store) in input.stores.iter().enumerate() {
        let snapshot = store.snapshot();
        for conv in input.convs.values() {
            for m in snapshot.get_history(conv, None, None).unwrap_or_default() {
                if let (true, Some(seq)) = (m.is_me, m.seq) {
                    out.push(Acked {
                        id: m.id,
                        conv: conv.clone(),
                        seq,
                        sender: client,
                    });
                }
            }
        }
    }
    out
}

/// `(device, message id, conv, seq, from)` of every `message` event, in trace order.
type Received<'a> = (Device, &'a str, &'a str, Option<u64>, Option<&'a str>);

fn received(records: &[Record]) -> Vec<Received<'_>> {
    records
        .iter()
        .filter_map(|r| match r {
            Record::Event {
                who,
                event: Event::Message(m),
                ..
            } => Some((
                *who,
                m.id.as_str(),
                m.conversation_id.as_str(),
                m.seq,
                m.from_alias_id.as_deref(),
            )),
            _ => None,
        })
        .collect()
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

fn delivery(
    input: &Input<'_>,
    conv_pair: &BTreeMap<&str, usize>,
    acked: &[Acked],
    out: &mut Vec<Violation>,
) {
    let got = received(input.records);
    // Each second-device login is a new device with an empty store (it may be given what an
    // earlier one already had): keyed by login, counted from its `authenticated` event.
    let mut login: BTreeMap<Device, u32> = BTreeMap::new();
    let mut per_device: BTreeMap<(Device, u32, &str), usize> = BTreeMap::new();
    let mut last_seq: BTreeMap<(Device, u32, &str), u64> = BTreeMap::new();
    for r in input.records {
        let (who, id, conv, seq, from) = match r {
            Record::Event {
                who,
                event: Event::Authenticated { .. },
                ..
            } => {
                *login.entry(*who).or_default() += 1;
                continue;
            }
            Record::Event {
                who,
                event: Event::Message(m),
                ..
            } => (
                *who,
                m.id.as_str(),
                m.conversation_id.as_str(),
                m.seq,
                m.from_alias_id.as_deref(),
            ),
            _ => continue,
        };
        let session = if who.device == 0 {
            0
        } else {
            login.get(&who).copied().unwrap_or(0)
        };
        *per_device.entry((who, session, id)).or_default() += 1;
        if per_device[&(who, session, id)] == 2 {
            out.push(Violation::new(
                "delivered-exactly-once",
                format!("{who} got message {id} twice"),
            ));
        }
        let Some(&pair) = conv_pair.get(conv) else {
            out.push(Violation::new(
                "non-participant",
                format!("{who} got {id} in unknown conversation {conv}"),
            ));
            continue;
        };
        let p = input.scenario.pairs[pair];
        if !p.has(who.client) || !alias_of(input.aliases, p.peer(who.client), from) {
            out.push(Violation::new(
                "non-participant",
                format!("{who} got {id} in {conv} from {from:?}"),
            ));
        }
        if let Some(seq) = seq {
            let last = last_seq.entry((who, session, conv)).or_insert(0);
            if seq <= *last {
                out.push(Violation::new(
                    "seq-order",
                    format!("{who} got seq {seq} after {last} in {conv}"),
                ));
            }
            *last = (*last).max(seq);
        }
    }
    for r in input.records {
        if let Record::Event {
            who,
            event:
                Event::Typing {
                    from_alias_id,
                    conversation_id,
                },
            ..
        } = r
        {
            let ok = conv_pair
                .get(conversation_id.as_str())
                .is_some_and(|&pair| {
                    let p = input.scenario.pairs[pair];
                    p.has(who.client)
                        && alias_of(input.aliases, p.peer(who.client), Some(from_alias_id))
                });
            if !ok {
                out.push(Violation::new(
                    "non-participant",
                    format!("{who} got typing from {from_alias_id} in {conversation_id}"),
                ));
            }
        }
    }
    // Every acknowledged message reached some app of the recipient's account.
    let by_account: BTreeSet<(usize, &str)> =
        got.iter().map(|&(who, id, ..)| (who.client, id)).collect();
    let mut missing: BTreeMap<usize, Vec<&Acked>> = BTreeMap::new();
    for a in acked {
        let Some(&pair) = conv_pair.get(a.conv.as_str()) else {
            continue;
        };
        let recipient = input.scenario.pairs[pair].peer(a.sender);
        let in_store = input.stores[recipient]
            .snapshot()
            .get_message(&a.id)
            .ok()
            .flatten()
            .is_some();
        if !by_account.contains(&(recipient, a.id.as_str())) && !in_store {
            missing.entry(recipient).or_default().push(a);
        }
    }
    for (recipient, lost) in missing {
        let first = lost[0];
        let convs: BTreeSet<&str> = lost.iter().map(|a| a.conv.as_str()).collect();
        out.push(Violation::new(
            "delivered-exactly-once",
            format!(
                "{} message(s) to c{recipient} in {} conversation(s) acknowledged but never delivered; first: {} (c{} -> c{recipient}, {} seq {})",
                lost.len(),
                convs.len(),
                first.id,
                first.sender,
                first.conv,
                first.seq
            ),
        ));
    }
}

/// Every acknowledged message arrives within [`DELIVERY_BOUND_MS`] of healing (or of its ack).
fn liveness(
    input: &Input<'_>,
    conv_pair: &BTreeMap<&str, usize>,
    acked: &[Acked],
    got: &BTreeMap<(usize, &str), u64>,
    out: &mut Vec<Violation>,
) {
    let Some(heal) = input.heal_ms else { return };
    let acks = ack_times(input.records);
    let mut late: BTreeMap<usize, (u64, Vec<&Acked>)> = BTreeMap::new();
    for a in acked {
        let Some(&pair) = conv_pair.get(a.conv.as_str()) else {
            continue;
        };
        let recipient = input.scenario.pairs[pair].peer(a.sender);
        let acked_at = acks.get(a.id.as_str()).copied().unwrap_or(heal);
        let due = heal.max(acked_at) + DELIVERY_BOUND_MS;
        match got.get(&(recipient, a.id.as_str())) {
            Some(t) if *t <= due => {}
            other => {
                let e = late.entry(recipient).or_insert((0, Vec::new()));
                e.0 =
                    e.0.max(other.copied().unwrap_or(u64::MAX).saturating_sub(due));
                e.1.push(a);
            }
        }
    }
    for (recipient, (_, lost)) in late {
        let backlog = input
            .history
            .messages
            .values()
            .filter(|m| {
                input.world.uuids.get(&recipient) == Some(&m.recipient)
                    && m.deleted_ms.is_none_or(|d| d > heal)
                    && m.at_ms <= heal
            })
            .count();
        let first = lost[0];
        out.push(Violation::new(
            "liveness",
            format!(
                "{} acknowledged message(s) to c{recipient} not delivered within {DELIVERY_BOUND_MS} ms of healing (backlog of {backlog} queued for it at healing); first: {} (c{} -> c{recipient}, seq {})",
                lost.len(),
                first.id,
                first.sender,
                first.seq
            ),
        ));
    }
}

fn gap_free(input: &Input<'_>, acked: &[Acked], out: &mut Vec<Violation>) {
    let mut seqs: BTreeMap<&str, BTreeSet<u64>> = BTreeMap::new();
    for a in acked {
        seqs.entry(a.conv.as_str()).or_default().insert(a.seq);
    }
    for (_, _, conv, seq, _) in received(input.records) {
        if let Some(seq) = seq {
            seqs.entry(conv).or_default().insert(seq);
        }
    }
    for (conv, set) in seqs {
        let max = set.last().copied().unwrap_or(0);
        let missing: Vec<u64> = (1..=max).filter(|s| !set.contains(s)).collect();
        if !missing.is_empty() {
            let shown: Vec<u64> = missing.iter().copied().take(10).collect();
            out.push(Violation::new(
                "seq-gap-free",
                format!(
                    "{conv}: {} seq(s) of 1..={max} never seen, first {shown:?}",
                    missing.len()
                ),
            ));
        }
    }
}

/// One seq per message, one message per seq, over every `Messages` row the relay committed.
fn seq_unique(input: &Input<'_>, out: &mut Vec<Violation>) {
    let mut seqs_of: BTreeMap<(&str, &str), BTreeSet<(&str, u64)>> = BTreeMap::new();
    let mut ids_at: BTreeMap<(&str, u64), BTreeSet<&str>> = BTreeMap::new();
    for (from, id, conv, seq) in &input.history.assigned {
        seqs_of
            .entry((from.as_str(), id.as_str()))
            .or_default()
            .insert((conv.as_str(), *seq));
        ids_at
            .entry((conv.as_str(), *seq))
            .or_default()
            .insert(id.as_str());
    }
    let twice: Vec<String> = seqs_of
        .iter()
        .filter(|(_, s)| s.len() > 1)
        .map(|((_, id), s)| format!("{id} stored as {s:?}"))
        .collect();
    if let Some(first) = twice.first() {
        out.push(Violation::new(
            "seq-unique",
            format!(
                "{} message(s) stored under more than one seq (a resend was not deduplicated); first: {first}",
                twice.len()
            ),
        ));
    }
    let reused: Vec<String> = ids_at
        .iter()
        .filter(|(_, ids)| ids.len() > 1)
        .map(|((conv, seq), ids)| format!("{conv} seq {seq} given to {ids:?}"))
        .collect();
    if let Some(first) = reused.first() {
        out.push(Violation::new(
            "seq-unique",
            format!(
                "{} seq(s) given to more than one message; first: {first}",
                reused.len()
            ),
        ));
    }
}

/// `sync-complete`: a `sync` on a healthy network hands over the whole backlog.
///
/// A connection counts if it opened while the network was healthy (the plan has no fault
/// events but clock skews, or it opened after healing) and no device of the account changed
/// its network state during the next [`SYNC_BOUND_MS`]. Every message the relay had committed
/// for the account before the connection opened, and still held then, must reach an app of
/// the account by the end of that bound (unless its author retracted it meanwhile). Later
/// traffic in a conversation releases a backlog the relay forgot; [`liveness`] with its long
/// bound (and the probe round after healing) cannot tell the two apart, this oracle can.
fn sync_complete(input: &Input<'_>, got: &BTreeMap<(usize, &str), u64>, out: &mut Vec<Violation>) {
    let eventful = input
        .plan
        .events
        .iter()
        .any(|e| !matches!(e.action, FaultAction::SetSkew { .. }));
    let healthy_from = if eventful {
        match input.heal_ms {
            Some(h) => h,
            None => return,
        }
    } else {
        0
    };
    // Network state changes per client, in time order.
    let mut changes: BTreeMap<usize, Vec<(u64, Device, bool)>> = BTreeMap::new();
    for r in input.records {
        if let Record::Event {
            t_ms,
            who,
            event: Event::NetworkState(state),
        } = r
        {
            let connected = matches!(state, client_core::machine::NetworkState::Connected);
            changes
                .entry(who.client)
                .or_default()
                .push((*t_ms, *who, connected));
        }
    }
    let client_of: BTreeMap<&str, usize> = input
        .world
        .uuids
        .iter()
        .map(|(c, u)| (u.as_str(), *c))
        .collect();
    let mut backlog: BTreeMap<usize, Vec<&crate::store::CommittedMessage>> = BTreeMap::new();
    for m in input.history.messages.values() {
        if let Some(&c) = client_of.get(m.recipient.as_str()) {
            backlog.entry(c).or_default().push(m);
        }
    }
    for (client, list) in &changes {
        for (i, &(t, who, connected)) in list.iter().enumerate() {
            let until = t + SYNC_BOUND_MS;
            let undisturbed = list.get(i + 1).is_none_or(|&(next, _, _)| next > until);
            if !connected || t < healthy_from || !undisturbed || input.end_ms < until {
                continue;
            }
            let missing: Vec<&crate::store::CommittedMessage> = backlog
                .get(client)
                .into_iter()
                .flatten()
                .copied()
                .filter(|m| m.at_ms < t && m.deleted_ms.is_none_or(|d| d > t))
                .filter(|m| {
                    input
                        .history
                        .retracted_ids
                        .get(&m.id)
                        .is_none_or(|r| *r > until)
                })
                .filter(|m| {
                    got.get(&(*client, m.id.as_str()))
                        .is_none_or(|g| *g > until)
                })
                .collect();
            if let Some(first) = missing.first() {
                out.push(Violation::new(
                    "sync-complete",
                    format!(
                        "{who} connected at {t} ms on a healthy network with {} queued message(s) that had not arrived {SYNC_BOUND_MS} ms later; first: {} ({} seq {}, committed at {} ms, {})",
                        missing.len(),
                        first.id,
                        first.conv,
                        first.seq,
                        first.at_ms,
                        got.get(&(*client, first.id.as_str()))
                            .map_or_else(|| "never received".to_owned(), |g| format!("received at {g} ms"))
                    ),
                ));
            }
        }
    }
}

fn rank(s: MessageStatus) -> u8 {
    match s {
        MessageStatus::Sending => 0,
        MessageStatus::Failed => 1,
        MessageStatus::Sent => 2,
        MessageStatus::Delivered => 3,
        MessageStatus::Read => 4,
    }
}

fn receipts(
    input: &Input<'_>,
    conv_pair: &BTreeMap<&str, usize>,
    acked: &[Acked],
    out: &mut Vec<Violation>,
) {
    let by_id: BTreeMap<&str, &Acked> = acked.iter().map(|a| (a.id.as_str(), a)).collect();
    let mut delivered: BTreeSet<(usize, &str)> = BTreeSet::new();
    let mut read_hw: BTreeMap<(usize, &str), u64> = BTreeMap::new();
    let mut last: BTreeMap<(Device, &str), MessageStatus> = BTreeMap::new();
    for r in input.records {
        match r {
            Record::Event {
                who,
                event: Event::Message(m),
                ..
            } => {
                delivered.insert((who.client, m.id.as_str()));
            }
            Record::ReadMarked { who, conv, seq, .. } => {
                let hw = read_hw.entry((who.client, conv.as_str())).or_insert(0);
                *hw = (*hw).max(*seq);
            }
            Record::Event {
                who,
                event: Event::StatusChange { id, status },
                ..
            } => {
                if let Some(prev) = last.insert((*who, id.as_str()), *status)
                    && rank(*status) <= rank(prev)
                {
                    out.push(Violation::new(
                        "receipts",
                        format!("{who} status of {id} moved {prev:?} -> {status:?}"),
                    ));
                }
                if !matches!(status, MessageStatus::Delivered | MessageStatus::Read) {
                    continue;
                }
                let Some(a) = by_id.get(id.as_str()) else {
                    continue;
                };
                let Some(&pair) = conv_pair.get(a.conv.as_str()) else {
                    continue;
                };
                let recipient = input.scenario.pairs[pair].peer(a.sender);
                if !delivered.contains(&(recipient, id.as_str())) {
                    out.push(Violation::new(
                        "receipts",
                        format!("{who} {status:?} for {id} before c{recipient} received it"),
                    ));
                }
                if *status == MessageStatus::Read
                    && read_hw
                        .get(&(recipient, a.conv.as_str()))
                        .is_none_or(|hw| *hw < a.seq)
                {
                    out.push(Violation::new(
                        "receipts",
                        format!(
                            "{who} read for {id} (seq {}) not marked read by c{recipient}",
                            a.seq
                        ),
                    ));
                }
            }
            _ => {}
        }
    }
}

/// The relay deletes a queued message only after its recipient's app had it, or when its
/// author retracted it.
fn receipts_clear(input: &Input<'_>, got: &BTreeMap<(usize, &str), u64>, out: &mut Vec<Violation>) {
    let client_of: BTreeMap<&str, usize> = input
        .world
        .uuids
        .iter()
        .map(|(c, u)| (u.as_str(), *c))
        .collect();
    let mut early: Vec<String> = Vec::new();
    for m in input.history.messages.values() {
        let Some(deleted) = m.deleted_ms else {
            continue;
        };
        if input.history.retracted_ids.contains_key(&m.id) {
            continue;
        }
        let Some(&recipient) = client_of.get(m.recipient.as_str()) else {
            continue;
        };
        match got.get(&(recipient, m.id.as_str())) {
            Some(t) if *t <= deleted => {}
            other => early.push(format!(
                "{} (to c{recipient}, {} seq {}) deleted at {deleted} ms, {}",
                m.id,
                m.conv,
                m.seq,
                other.map_or_else(
                    || "never received".to_owned(),
                    |t| format!("received at {t} ms")
                )
            )),
        }
    }
    if let Some(first) = early.first() {
        out.push(Violation::new(
            "receipts-clear",
            format!(
                "{} queued message(s) deleted before their recipient had them; first: {first}",
                early.len()
            ),
        ));
    }
}

/// Every ack and every order handed out was committed first.
fn fail_stop(input: &Input<'_>, acked: &[Acked], out: &mut Vec<Violation>) {
    let committed_seq: BTreeMap<&str, u64> = input
        .history
        .messages
        .values()
        .map(|m| (m.id.as_str(), m.seq))
        .collect();
    for a in acked {
        let known = input.history.accepted_ids.contains(&a.id);
        match committed_seq.get(a.id.as_str()) {
            Some(seq) if *seq != a.seq => out.push(Violation::new(
                "fail-stop",
                format!(
                    "c{} was acked {} with seq {}, but seq {seq} was committed",
                    a.sender, a.id, a.seq
                ),
            )),
            None if !known => out.push(Violation::new(
                "fail-stop",
                format!(
                    "c{} was acked {} (seq {}) but the relay never committed it",
                    a.sender, a.id, a.seq
                ),
            )),
            _ => {}
        }
    }
    for o in &input.world.ledger.orders {
        if !input.history.orders.contains(&o.order_id) {
            out.push(Violation::new(
                "fail-stop",
                format!(
                    "c{} was handed order {} but the relay never committed it",
                    o.client, o.order_id
                ),
            ));
        }
    }
}

fn store_intact(input: &Input<'_>, out: &mut Vec<Violation>) {
    for (t, diff) in &input.history.load_mismatches {
        out.push(Violation::new(
            "store-intact",
            format!("the store reopened at {t} ms did not load what was committed: {diff}"),
        ));
    }
    if let Some(t) = input.history.commits_while_off.first() {
        out.push(Violation::new(
            "store-intact",
            format!(
                "{} commit(s) while the relay was powered off, first at {t} ms",
                input.history.commits_while_off.len()
            ),
        ));
    }
}

fn outbox(input: &Input<'_>, out: &mut Vec<Violation>) {
    for (client, store) in input.stores.iter().enumerate() {
        let pending = store.snapshot().list_outbox().unwrap_or_default();
        if !pending.is_empty() {
            let ids: Vec<&str> = pending
                .iter()
                .take(5)
                .map(|i| i.internal_id.as_str())
                .collect();
            out.push(Violation::new(
                "outbox-drained",
                format!(
                    "c{client} still has {} unacknowledged intent(s) after the liveness phase, first {ids:?}",
                    pending.len()
                ),
            ));
        }
    }
    // Second devices only log in and leave; their stores are not expected to drain.
    let _ = input.second_stores;
}

fn store_canaries(input: &Input<'_>, out: &mut Vec<Violation>) {
    let canaries = input.scenario.canaries();
    for (table, rows) in input.snapshot {
        for (key, value) in rows {
            if !contains(value, b"CANARY") && !key.contains("CANARY") {
                continue;
            }
            for canary in &canaries {
                let c = canary.as_bytes();
                if contains(key.as_bytes(), c) || contains(value, c) {
                    out.push(Violation::new(
                        "canary-store",
                        format!("{canary} in relay table {table:?}"),
                    ));
                }
            }
        }
    }
}

/// Checks the lines that mention a canary prefix for actual canaries.
pub(crate) fn logs_free_of_canaries(text: &str, canaries: &[String], out: &mut Vec<Violation>) {
    if text.is_empty() {
        return;
    }
    for canary in canaries {
        if text.contains(canary.as_str()) {
            out.push(Violation::new(
                "canary-logs",
                format!("{canary} appears in the logs"),
            ));
        }
    }
}

/// After healing, probes arrive within [`PROBE_BOUND_MS`].
fn probes(input: &Input<'_>, out: &mut Vec<Violation>) {
    /// Call signals older or newer than this are refused (client-core's window), plus the
    /// largest latency of a healed link.
    const SIGNAL_WINDOW_MS: i64 = client_core::crypto::signal::SIGNAL_MAX_AGE_MS as i64;
    const UNCERTAIN_MS: i64 = 5_000;
    let mut late = Vec::new();
    for p in &input.world.probes {
        let due = p.sent_ms + PROBE_BOUND_MS;
        let at_peer = |f: &dyn Fn(&Event) -> bool| {
            input.records.iter().any(|r| match r {
                Record::Event { t_ms, who, event } => {
                    who.client == p.to && *t_ms >= p.sent_ms && *t_ms <= due && f(event)
                }
                _ => false,
            })
        };
        let at_me = |f: &dyn Fn(&Event) -> bool| {
            input.records.iter().any(|r| match r {
                Record::Event { t_ms, who, event } => {
                    who.client == p.from && *t_ms >= p.sent_ms && *t_ms <= due && f(event)
                }
                _ => false,
            })
        };
        let missing = match p.kind {
            "message" => (!at_peer(&|e| matches!(e, Event::Message(m) if m.id == p.id)))
                .then(|| "message".to_owned()),
            "typing" => (!at_peer(&|e| {
                matches!(e, Event::Typing { conversation_id, .. } if *conversation_id == p.conv)
            }))
            .then(|| "typing notice".to_owned()),
            "call" => {
                let skew = input.skews.get(p.from).copied().unwrap_or(0)
                    - input.skews.get(p.to).copied().unwrap_or(0);
                let incoming = at_peer(&|e| {
                    matches!(e, Event::CallSignal { kind: CallKind::Offer, call_id, .. } if *call_id == p.id)
                });
                if skew.abs() > SIGNAL_WINDOW_MS + UNCERTAIN_MS {
                    incoming.then(|| {
                        format!("refusal of a call offer from a clock {skew} ms apart (it rang)")
                    })
                } else if skew.abs() + UNCERTAIN_MS < SIGNAL_WINDOW_MS {
                    let answered = at_me(&|e| {
                        matches!(e, Event::CallSignal { kind: CallKind::Answer, call_id, .. } if *call_id == p.id)
                    });
                    match (incoming, answered) {
                        (false, _) => Some("call offer".to_owned()),
                        (true, false) => Some("call answer".to_owned()),
                        _ => None,
                    }
                } else {
                    None
                }
            }
            _ => None,
        };
        if let Some(what) = missing {
            late.push(format!(
                "{what} c{} -> c{} sent at {} ms",
                p.from, p.to, p.sent_ms
            ));
        }
    }
    if let Some(first) = late.first() {
        out.push(Violation::new(
            "probes",
            format!(
                "{} of {} probe(s) did not arrive within {PROBE_BOUND_MS} ms; first: {first}",
                late.len(),
                input.world.probes.len()
            ),
        ));
    }
}

/// A retract the relay accepted reaches the recipient of the message, if it got the message.
fn retract_lands(
    input: &Input<'_>,
    conv_pair: &BTreeMap<&str, usize>,
    acked: &[Acked],
    out: &mut Vec<Violation>,
) {
    let on_primary: BTreeSet<(usize, &str)> = received(input.records)
        .into_iter()
        .filter(|(who, ..)| who.device == 0)
        .map(|(who, id, ..)| (who.client, id))
        .collect();
    let landed: BTreeSet<(usize, &str)> = input
        .records
        .iter()
        .filter_map(|r| match r {
            Record::Event {
                who,
                event: Event::Retracted { id },
                ..
            } => Some((who.client, id.as_str())),
            _ => None,
        })
        .collect();
    // Spells of second devices: the relay gives a retract to the account's connection of the
    // moment, and a second device that never had the message has nothing to show.
    let mut second: BTreeMap<usize, Vec<(u64, u64)>> = BTreeMap::new();
    for r in input.records {
        match r {
            Record::Event {
                t_ms,
                who,
                event: Event::Authenticated { .. },
            } if who.device == 1 => second
                .entry(who.client)
                .or_default()
                .push((*t_ms, u64::MAX)),
            Record::Note { t_ms, text } if text.ends_with("/d1 left") => {
                let client = text
                    .strip_prefix('c')
                    .and_then(|t| t.split('/').next())
                    .and_then(|n| n.parse::<usize>().ok());
                if let Some(spell) = client
                    .and_then(|c| second.get_mut(&c))
                    .and_then(|v| v.last_mut())
                {
                    spell.1 = *t_ms;
                }
            }
            _ => {}
        }
    }
    for a in acked {
        let Some(&accepted) = input.history.retracted_ids.get(&a.id) else {
            continue;
        };
        let Some(&pair) = conv_pair.get(a.conv.as_str()) else {
            continue;
        };
        let recipient = input.scenario.pairs[pair].peer(a.sender);
        if second.get(&recipient).is_some_and(|v| {
            v.iter()
                .any(|(from, to)| *from <= accepted && accepted <= *to)
        }) {
            continue;
        }
        // The primary device must hear of it; a second device that already left cannot.
        if on_primary.contains(&(recipient, a.id.as_str()))
            && !landed.contains(&(recipient, a.id.as_str()))
        {
            out.push(Violation::new(
                "retract-lands",
                format!(
                    "c{} retracted {} (the relay accepted it at {accepted} ms) but c{recipient}, who had it, never saw the retract",
                    a.sender, a.id
                ),
            ));
        }
    }
}

fn media(input: &Input<'_>, out: &mut Vec<Violation>) {
    for (client, id, outcome) in &input.world.media_checks {
        match outcome {
            Ok(true) => {}
            Ok(false) => out.push(Violation::new(
                "media",
                format!("c{client} downloaded media of {id} that differs from what was sent"),
            )),
            Err(e) => out.push(Violation::new(
                "media",
                format!("c{client} could not download media of {id}: {e}"),
            )),
        }
    }
}

/// Slack of the push timing checks: a push leaves the relay right after the message's
/// commit and reaches the stand-in a link latency later.
pub const PUSH_SLACK_MS: u64 = 3_000;

/// What the `push` oracle reads, in simulated ms (the runner builds it from a run; unit tests
/// build it by hand).
#[derive(Debug, Clone, Default)]
pub struct PushFacts {
    /// Every push the stand-ins received, by arrival.
    pub pushes: Vec<SeenPush>,
    /// Registered targets of each client.
    pub targets: BTreeMap<usize, Vec<String>>,
    /// Offline spells of push clients: `(client, from, to)`.
    pub offline: Vec<(usize, u64, u64)>,
    /// Ack times of the messages to each client.
    pub acked_for: BTreeMap<usize, Vec<(u64, String)>>,
    /// When the relay's memory of recent pushes may have been lost or its clock moved (crash,
    /// store fault, stall, clock jump) or pushes may have been retried or delayed (faults on
    /// the push host's links, latency spikes).
    pub trouble_ms: Vec<u64>,
    /// Per client: when faults hit its host's links (the relay may think it online).
    pub link_trouble_ms: BTreeMap<usize, Vec<u64>>,
    /// Strings no push may carry: aliases, account and conversation ids, message canaries.
    pub secrets: Vec<String>,
    /// The relay's idle timeout: a client whose link was faulty this long before a spell may
    /// still be online to the relay (no FIN through a partition).
    pub idle_ms: u64,
}

/// The `push` oracle over [`PushFacts`]:
///
/// 1. **zero knowledge**: every push reaches a registered target, is accepted by its stand-in
///    (Web Push body decrypts, VAPID JWT verifies against the served key; FCM OAuth; APNs
///    provider token), carries exactly `{"type":"new_msg"}` ([`zero_knowledge`]) and none of
///    the run's aliases, ids or message texts;
/// 2. **one per window**: two pushes to one target at least `PUSH_MIN_INTERVAL_MS` (30 s,
///    less [`PUSH_SLACK_MS`]) apart, unless trouble came between;
/// 3. **gone is gone**: after a target's push service answered 404/410 (`UNREGISTERED`), no
///    push reaches it later than [`PUSH_SLACK_MS`] unless the relay crashed or its store
///    failed meanwhile (the deletion may not have been committed);
/// 4. **offline users are woken**: a client offline with a target while a message is acked
///    for it (at least 1 s into the spell, 5 s before its end) gets a push between 30 s before
///    that message (a push in the window covers it) and the end of the spell.
pub fn check_push(facts: &PushFacts, out: &mut Vec<Violation>) {
    const O: &str = "push";
    let interval = relay_core::limits::PUSH_MIN_INTERVAL_MS;
    let owner: BTreeMap<&str, usize> = facts
        .targets
        .iter()
        .flat_map(|(c, ts)| ts.iter().map(move |t| (t.as_str(), *c)))
        .collect();
    let troubled = |from: u64, to: u64, list: &[u64]| list.iter().any(|t| *t >= from && *t <= to);
    let mut by_target: BTreeMap<&str, Vec<&SeenPush>> = BTreeMap::new();
    for p in &facts.pushes {
        let Some(c) = owner.get(p.target.as_str()) else {
            out.push(Violation::new(
                O,
                format!(
                    "a {:?} push at {} ms went to a target no client registered",
                    p.kind, p.at_ms
                ),
            ));
            continue;
        };
        by_target.entry(p.target.as_str()).or_default().push(p);
        let payload = match &p.payload {
            Ok(payload) => payload,
            Err(why) => {
                out.push(Violation::new(
                    O,
                    format!(
                        "c{c}'s {:?} push at {} ms was refused by its push service ({}): {why}",
                        p.kind, p.at_ms, p.status
                    ),
                ));
                continue;
            }
        };
        if let Err(why) = zero_knowledge(p.kind, payload) {
            out.push(Violation::new(
                O,
                format!("c{c}'s {:?} push at {} ms: {why}", p.kind, p.at_ms),
            ));
        }
        if let Some(found) = facts.secrets.iter().find(|s| contains_word(payload, s)) {
            out.push(Violation::new(
                O,
                format!(
                    "c{c}'s {:?} push at {} ms carries an alias, id or message text of the run ({found:?} in {payload})",
                    p.kind, p.at_ms
                ),
            ));
        }
    }
    for (target, pushes) in &by_target {
        let c = owner[target];
        for w in pushes.windows(2) {
            let (a, b) = (w[0], w[1]);
            if b.at_ms < a.at_ms + interval.saturating_sub(PUSH_SLACK_MS)
                && !troubled(a.at_ms.saturating_sub(interval), b.at_ms, &facts.trouble_ms)
            {
                out.push(Violation::new(
                    O,
                    format!(
                        "c{c}'s {:?} target was pushed at {} and {} ms: more than one push per {interval} ms window",
                        a.kind, a.at_ms, b.at_ms
                    ),
                ));
            }
        }
        if let Some(gone) = pushes.iter().find(|p| p.gone)
            && let Some(later) = pushes.iter().find(|p| p.at_ms > gone.at_ms + PUSH_SLACK_MS)
            && !troubled(gone.at_ms, later.at_ms, &facts.trouble_ms)
        {
            out.push(Violation::new(
                O,
                format!(
                    "c{c}'s {:?} target answered {} at {} ms (gone) and was pushed again at {} ms",
                    gone.kind, gone.status, gone.at_ms, later.at_ms
                ),
            ));
        }
    }
    for &(c, from, to) in &facts.offline {
        let Some(targets) = facts.targets.get(&c) else {
            continue;
        };
        // Every target gone before the spell: nothing left to push to.
        let live = targets.iter().any(|t| {
            by_target
                .get(t.as_str())
                .is_none_or(|ps| !ps.iter().any(|p| p.gone && p.at_ms < to))
        });
        if !live
            || troubled(from.saturating_sub(interval), to, &facts.trouble_ms)
            || facts
                .link_trouble_ms
                .get(&c)
                .is_some_and(|l| troubled(from.saturating_sub(facts.idle_ms), to, l))
        {
            continue;
        }
        let pushed_between = |lo: u64, hi: u64| {
            targets.iter().any(|t| {
                by_target
                    .get(t.as_str())
                    .is_some_and(|ps| ps.iter().any(|p| p.at_ms >= lo && p.at_ms <= hi))
            })
        };
        let missed = facts.acked_for.get(&c).and_then(|acks| {
            acks.iter().find(|(t, _)| {
                *t >= from + 1_000
                    && *t + 5_000 <= to
                    && !pushed_between(
                        t.saturating_sub(interval + PUSH_SLACK_MS),
                        to + PUSH_SLACK_MS,
                    )
            })
        });
        if let Some((t, id)) = missed {
            out.push(Violation::new(
                O,
                format!(
                    "c{c} was offline {from}..{to} ms with a push target while {id} was acked for it at {t} ms, and was never pushed"
                ),
            ));
        }
    }
}

fn push(
    input: &Input<'_>,
    conv_pair: &BTreeMap<&str, usize>,
    acked: &[Acked],
    out: &mut Vec<Violation>,
) {
    let acks = ack_times(input.records);
    let start = input.start_ms.unwrap_or(0);
    let mut trouble_ms: Vec<u64> = input
        .plan
        .events
        .iter()
        .filter(|e| {
            matches!(
                &e.action,
                FaultAction::Crash { host } if host == RELAY
            ) || matches!(
                e.action,
                FaultAction::FailCommits { .. }
                    | FaultAction::StoreDown { .. }
                    | FaultAction::CrashAfterCommit { .. }
                    | FaultAction::CrashMidBatch { .. }
                    | FaultAction::StallCommit { .. }
                    | FaultAction::ClockJump { .. }
                    | FaultAction::MaxLatency { .. }
            ) || e.action.hosts().contains(&PUSH)
        })
        .map(|e| start + e.at_ms)
        .collect();
    trouble_ms.extend(input.world.relay_off_ms.iter().copied());
    trouble_ms.extend(input.world.final_jump_ms);
    let link_trouble_ms: BTreeMap<usize, Vec<u64>> = input
        .world
        .push_targets
        .keys()
        .map(|&c| {
            let host = input.scenario.accounts[c].host.as_str();
            let times = input
                .plan
                .events
                .iter()
                .filter(|e| e.action.hosts().contains(&host))
                .map(|e| start + e.at_ms)
                .collect();
            (c, times)
        })
        .collect();
    let mut acked_for: BTreeMap<usize, Vec<(u64, String)>> = BTreeMap::new();
    for a in acked {
        if let Some(&pair) = conv_pair.get(a.conv.as_str())
            && let Some(&t) = acks.get(a.id.as_str())
        {
            let to = input.scenario.pairs[pair].peer(a.sender);
            acked_for.entry(to).or_default().push((t, a.id.clone()));
        }
    }
    let mut secrets: Vec<String> = input.aliases.values().flatten().cloned().collect();
    secrets.extend(input.world.uuids.values().cloned());
    secrets.extend(input.convs.values().cloned());
    secrets.extend(input.scenario.canaries());
    let facts = PushFacts {
        pushes: input.pushes.to_vec(),
        targets: input.world.push_targets.clone(),
        offline: input.world.offline.clone(),
        acked_for,
        trouble_ms,
        link_trouble_ms,
        secrets,
        idle_ms: relay_core::Config::default().idle_timeout_ms,
    };
    check_push(&facts, out);
}

/// What strangers must never achieve.
fn authz(input: &Input<'_>, got: &BTreeMap<(usize, &str), u64>, out: &mut Vec<Violation>) {
    let evil: BTreeSet<&str> = input.world.evil_ids.iter().map(String::as_str).collect();
    for id in &evil {
        if input.history.accepted_ids.contains(*id) {
            out.push(Violation::new(
                "authz",
                format!("{id}, sent by a stranger into someone else's conversation, was committed"),
            ));
        }
    }
    for (client, id) in got.keys() {
        if evil.contains(id) {
            out.push(Violation::new(
                "authz",
                format!("c{client} received {id}, sent by a stranger into its conversation"),
            ));
        }
    }
    let strangers: BTreeSet<&str> = input
        .world
        .strangers
        .values()
        .map(|(uuid, _)| uuid.as_str())
        .collect();
    for key in &input.history.receipt_marks {
        if key.split('/').any(|part| strangers.contains(part)) {
            out.push(Violation::new(
                "authz",
                format!("a receipt mark in a stranger's name was committed ({key})"),
            ));
        }
    }
    for r in input.records {
        if let Record::Event {
            who,
            event: Event::Retracted { id },
            ..
        } = r
            && !input.world.honest_retracts.contains(id)
            && input.world.sent_ids.contains_key(id)
        {
            out.push(Violation::new(
                "authz",
                format!("{who} saw {id} retracted, but its author never retracted it"),
            ));
        }
    }
    // A rejected friend request leaves no session with the stranger.
    for r in &input.scenario.rejections {
        let Some((_, alias)) = input.world.strangers.get(&r.stranger) else {
            continue;
        };
        if input.world.rejected.get(&r.stranger).copied().unwrap_or(0) == 0 {
            continue;
        }
        let store = input.stores[r.client].snapshot();
        if store.load_session_by_alias(alias).ok().flatten().is_some() {
            out.push(Violation::new(
                "authz",
                format!(
                    "c{} has a session with stranger {alias} who rejected its request",
                    r.client
                ),
            ));
        }
    }
}

/// Whether `alias` is one of `client`'s aliases (current or retired by a bind).
fn alias_of(aliases: &BTreeMap<usize, Vec<String>>, client: usize, alias: Option<&str>) -> bool {
    alias.is_some_and(|a| {
        aliases
            .get(&client)
            .is_some_and(|h| h.iter().any(|x| x == a))
    })
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

/// What the commerce oracles read.
#[derive(Debug)]
pub(crate) struct MarketInput<'a> {
    pub(crate) ledger: &'a Ledger,
    pub(crate) alias_history: &'a BTreeMap<usize, Vec<String>>,
    pub(crate) records: &'a [Record],
    pub(crate) processor: &'a PaymentProcessor,
    pub(crate) forger: &'a PaymentProcessor,
    pub(crate) snapshot: &'a Snapshot,
    /// Simulated ms of the mid-run relay clock jumps.
    pub(crate) jumps_ms: &'a [u64],
    pub(crate) free_quota: u32,
}

/// The relay's order and quota rows, as JSON (scanned only where the public API cannot
/// tell: refund flags, buyers, seat counters, pending orders nobody learned about).
struct Rows {
    orders: BTreeMap<String, serde_json::Value>,
    quota: BTreeMap<String, serde_json::Value>,
}

fn rows(snapshot: &Snapshot) -> Option<Rows> {
    let json = |t: Table| -> BTreeMap<String, serde_json::Value> {
        snapshot
            .get(&t)
            .map(|rows| {
                rows.iter()
                    .filter_map(|(k, v)| Some((k.clone(), serde_json::from_slice(v).ok()?)))
                    .collect()
            })
            .unwrap_or_default()
    };
    Some(Rows {
        orders: json(Table::Orders),
        quota: json(Table::ChannelQuota),
    })
}

/// Whether `needle` occurs in `hay` as a whole word: not inside a longer run of letters and
/// digits (a vanity alias `400` is not leaked by a TTL of `86400s`).
fn contains_word(hay: &str, needle: &str) -> bool {
    if needle.is_empty() {
        return false;
    }
    let word = |c: Option<char>| c.is_some_and(char::is_alphanumeric);
    hay.match_indices(needle).any(|(i, _)| {
        !word(hay[..i].chars().next_back()) && !word(hay[i + needle.len()..].chars().next())
    })
}

fn field<'v>(row: Option<&'v serde_json::Value>, name: &str) -> Option<&'v serde_json::Value> {
    row.and_then(|r| r.get(name))
}

/// Runs the commerce oracles.
pub(crate) fn check_market(input: &MarketInput<'_>, out: &mut Vec<Violation>) {
    let w = input.ledger;
    let audit = &w.audit;
    if !audit.done {
        out.push(Violation::new(
            "payment-applied-once",
            "the commerce audit did not finish within the liveness bound",
        ));
        return;
    }
    let Some(rows) = rows(input.snapshot) else {
        out.push(Violation::new("quota", "relay store unreadable"));
        return;
    };
    let state = |order: &str| audit.states.get(order).copied().flatten();
    payments_once(input, &rows, &state, out);
    aliases_unique(input, &state, out);
    channels_owned(input, &state, out);
    holds_released(input, &rows, &state, out);
    quota(input, &rows, &state, out);
}

fn confirm_events(records: &[Record]) -> BTreeMap<&str, Vec<Device>> {
    let mut by_order: BTreeMap<&str, Vec<Device>> = BTreeMap::new();
    for r in records {
        if let Record::Event {
            who,
            event: Event::PaymentConfirmed { order_id, .. },
            ..
        } = r
        {
            by_order.entry(order_id.as_str()).or_default().push(*who);
        }
    }
    by_order
}

fn payments_once(
    input: &MarketInput<'_>,
    rows: &Rows,
    state: &dyn Fn(&str) -> Option<OrderState>,
    out: &mut Vec<Violation>,
) {
    const O: &str = "payment-applied-once";
    let w = input.ledger;
    let events = confirm_events(input.records);
    for o in &w.orders {
        let id = o.order_id.as_str();
        let Some(st) = state(id) else {
            out.push(Violation::new(O, format!("no V5 answer for order {id}")));
            continue;
        };
        let exposed = input.jumps_ms.iter().any(|j| o.requested_ms < *j)
            || w.audit.late_at_final_jump.contains(id);
        let refund =
            field(rows.orders.get(id), "refund_needed") == Some(&serde_json::Value::Bool(true));
        if o.paid {
            match st {
                OrderState::Pending => out.push(Violation::new(
                    O,
                    format!("order {id} ({:?} {}) paid in full but still pending after the liveness phase", o.kind, o.target),
                )),
                OrderState::Expired if !exposed => out.push(Violation::new(
                    O,
                    format!("order {id} ({:?} {}) paid in full before its deadline but expired", o.kind, o.target),
                )),
                OrderState::Expired if !refund => out.push(Violation::new(
                    O,
                    format!("order {id} ({:?} {}) paid late: neither honoured nor flagged for refund", o.kind, o.target),
                )),
                _ => {}
            }
        } else if st == OrderState::Confirmed {
            let why = if o.forged_only {
                "only forged webhooks"
            } else {
                "never paid"
            };
            out.push(Violation::new(
                O,
                format!("order {id} confirmed with {why}"),
            ));
        }
        if !o.paid && refund {
            out.push(Violation::new(
                "commerce-model",
                format!(
                    "order {id} ({:?} {}) flagged for refund though no genuine payment reached it",
                    o.kind, o.target
                ),
            ));
        }
        if st == OrderState::Confirmed && refund {
            out.push(Violation::new(
                "commerce-model",
                format!(
                    "order {id} ({:?} {}) both confirmed and flagged for refund",
                    o.kind, o.target
                ),
            ));
        }
        let got = events.get(id).cloned().unwrap_or_default();
        if let Some(d) = got.iter().find(|d| d.client != o.client) {
            out.push(Violation::new(
                O,
                format!(
                    "payment_confirmed of c{}'s order {id} reached {d}",
                    o.client
                ),
            ));
        }
        // At most once on the primary device (its store deduplicates by order id for the whole
        // run; a second-device login is a fresh install with a store of its own, so it may see
        // it again); at least once for a confirmed order (the relay re-sends it to every
        // device of the buyer).
        let once_per_device = got.iter().filter(|d| d.device == 0).count() <= 1;
        let expected = usize::from(st == OrderState::Confirmed);
        if !once_per_device || got.is_empty() != (expected == 0) {
            out.push(Violation::new(
                O,
                format!(
                    "order {id} ({st:?}) got {} payment_confirmed at c{} (expected {}): {got:?}",
                    got.len(),
                    o.client,
                    if expected == 0 {
                        "none"
                    } else {
                        "one per device, at least one"
                    }
                ),
            ));
        }
    }
    for id in events.keys() {
        if !w.orders.iter().any(|o| o.order_id == *id) {
            out.push(Violation::new(
                O,
                format!("payment_confirmed for unknown order {id}"),
            ));
        }
    }
    for (id, row) in &rows.orders {
        let confirmed = field(Some(row), "state").and_then(|s| s.as_str()) == Some("confirmed");
        if confirmed && !w.orders.iter().any(|o| o.order_id == *id && o.paid) {
            out.push(Violation::new(
                O,
                format!("order {id} confirmed in the relay but never paid"),
            ));
        }
    }
    for d in input.forger.deliveries() {
        if d.status.is_some_and(|s| (200..300).contains(&s)) {
            out.push(Violation::new(
                O,
                format!(
                    "forged webhook for {} accepted ({:?})",
                    d.order_id, d.status
                ),
            ));
        }
    }
    let payments = input.processor.payments();
    for d in input.processor.deliveries() {
        // 401, or 503 when the copy shared a batch whose group commit failed (the relay then
        // answers every input of the batch 503, as it cannot tell which answers the lost
        // writes would have changed; nothing is applied).
        if d.forged && d.status.is_some_and(|s| s != 401 && s != 503) {
            out.push(Violation::new(
                O,
                format!("forged copy for {} answered {:?}", d.order_id, d.status),
            ));
        }
        let max = payments
            .iter()
            .find(|p| p.payment_id == d.payment_id)
            .map_or(1, |p| p.plan.max_attempts.max(1));
        if !d.forged && d.attempt >= max && !d.status.is_some_and(|s| (200..300).contains(&s)) {
            out.push(Violation::new(
                O,
                format!(
                    "webhook {} copy {} for {} given up: {:?}",
                    d.payment_id, d.copy, d.order_id, d.status
                ),
            ));
        }
    }
}

fn confirmed_orders<'w>(
    input: &'w MarketInput<'_>,
    kind: OrderKind,
    state: &dyn Fn(&str) -> Option<OrderState>,
) -> Vec<&'w OrderRec> {
    input
        .ledger
        .orders
        .iter()
        .filter(|o| o.kind == kind && state(&o.order_id) == Some(OrderState::Confirmed))
        .collect()
}

fn aliases_unique(
    input: &MarketInput<'_>,
    state: &dyn Fn(&str) -> Option<OrderState>,
    out: &mut Vec<Violation>,
) {
    const O: &str = "alias-unique";
    let w = input.ledger;
    let mut bound: BTreeMap<&str, BTreeSet<usize>> = BTreeMap::new();
    for b in &w.binds {
        bound.entry(b.alias.as_str()).or_default().insert(b.client);
    }
    for (alias, who) in &bound {
        if who.len() > 1 {
            out.push(Violation::new(
                O,
                format!("{alias} bound to clients {who:?}"),
            ));
        }
        if w.audit.searchable.get(*alias) == Some(&true) {
            out.push(Violation::new(
                O,
                format!("bound alias {alias} is for sale again"),
            ));
        }
    }
    let mut confirmed: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for o in confirmed_orders(input, OrderKind::Vanity, state) {
        confirmed
            .entry(o.target.as_str())
            .or_default()
            .push(o.order_id.as_str());
    }
    for (alias, orders) in confirmed {
        if orders.len() > 1 {
            out.push(Violation::new(
                O,
                format!("{alias} sold twice: orders {orders:?}"),
            ));
        }
    }
    let mut current: BTreeMap<&str, usize> = BTreeMap::new();
    for (client, history) in input.alias_history {
        if let Some(a) = history.last()
            && let Some(other) = current.insert(a.as_str(), *client)
        {
            out.push(Violation::new(
                O,
                format!("c{client} and c{other} both have alias {a}"),
            ));
        }
        for retired in history.iter().rev().skip(1) {
            if w.audit.searchable.get(retired) == Some(&true) {
                out.push(Violation::new(
                    O,
                    format!("retired alias {retired} of c{client} is for sale"),
                ));
            }
            if let Some(b) = w
                .binds
                .iter()
                .find(|b| b.alias == *retired && b.client != *client)
            {
                out.push(Violation::new(
                    O,
                    format!(
                        "retired alias {retired} of c{client} bound by c{}",
                        b.client
                    ),
                ));
            }
        }
    }
}

fn channels_owned(
    input: &MarketInput<'_>,
    state: &dyn Fn(&str) -> Option<OrderState>,
    out: &mut Vec<Violation>,
) {
    const O: &str = "channel-single-owner";
    let w = input.ledger;
    let trades = confirmed_orders(input, OrderKind::ChannelTrade, state);
    for c in &w.channels {
        let sold: Vec<&&OrderRec> = trades.iter().filter(|o| o.target == c.id).collect();
        if sold.len() > 1 {
            let ids: Vec<&str> = sold.iter().map(|o| o.order_id.as_str()).collect();
            out.push(Violation::new(
                O,
                format!(
                    "channel {} sold by several confirmed orders {ids:?} (listed once)",
                    c.id
                ),
            ));
        }
        let expected = sold.first().map_or(c.creator, |o| o.client);
        let owners: BTreeSet<usize> = w
            .audit
            .owned
            .iter()
            .filter(|(_, ids)| ids.contains(&c.id))
            .map(|(client, _)| *client)
            .collect();
        if owners.len() != 1 || !owners.contains(&expected) {
            out.push(Violation::new(
                O,
                format!("channel {} owned by {owners:?}, expected c{expected} (creator c{}, {} confirmed trade(s))", c.id, c.creator, sold.len()),
            ));
        }
        if !sold.is_empty() && w.audit.for_sale.get(&c.id) == Some(&true) {
            out.push(Violation::new(
                O,
                format!("channel {} still for sale after its trade", c.id),
            ));
        }
    }
    let clients = input.alias_history.len();
    if w.audit.owned.len() < clients {
        out.push(Violation::new(
            O,
            format!(
                "only {} of {clients} clients answered channels/mine",
                w.audit.owned.len()
            ),
        ));
    }
}

fn holds_released(
    input: &MarketInput<'_>,
    rows: &Rows,
    state: &dyn Fn(&str) -> Option<OrderState>,
    out: &mut Vec<Violation>,
) {
    const O: &str = "holds-released";
    let w = input.ledger;
    let late = &w.audit.late_at_final_jump;
    let probes: BTreeSet<&str> = w
        .audit
        .probes
        .values()
        .filter_map(|p| p.as_ref().ok().map(String::as_str))
        .collect();
    let jump = w.audit.final_jump_relay_ms;
    // Targets held by an order placed after the final jump (a dishonest client still at
    // work): not expired yet, rightly.
    let mut fresh_holds: BTreeSet<&str> = BTreeSet::new();
    for (id, row) in &rows.orders {
        let pending = field(Some(row), "state").and_then(|s| s.as_str()) == Some("pending");
        let created = field(Some(row), "created_at").and_then(serde_json::Value::as_u64);
        let after_jump = matches!((created, jump), (Some(c), Some(j)) if c >= j);
        if pending
            && after_jump
            && let Some(t) = field(Some(row), "target").and_then(|t| t.as_str())
        {
            fresh_holds.insert(t);
        }
        if pending && !probes.contains(id.as_str()) && !late.contains(id) && !after_jump {
            out.push(Violation::new(
                O,
                format!("order {id} still pending after the final clock jump"),
            ));
        }
    }
    let mut pool: BTreeSet<&str> = BTreeSet::new();
    for o in &w.orders {
        if o.kind == OrderKind::Vanity {
            pool.insert(o.target.as_str());
        }
    }
    for alias in pool {
        let taken = w.orders.iter().any(|o| {
            o.target == alias
                && (state(&o.order_id) == Some(OrderState::Confirmed) || late.contains(&o.order_id))
        });
        if !taken && !fresh_holds.contains(alias) && w.audit.searchable.get(alias) != Some(&true) {
            out.push(Violation::new(
                O,
                format!("alias {alias}: every order expired, yet not for sale"),
            ));
        }
    }
    for (channel, probe) in &w.audit.probes {
        if let Err(e) = probe {
            let late_trade = w
                .orders
                .iter()
                .any(|o| o.target == *channel && late.contains(&o.order_id));
            if !late_trade {
                out.push(Violation::new(
                    O,
                    format!(
                        "channel {channel}: every trade order expired, yet a buyer was refused: {e}"
                    ),
                ));
            }
        }
    }
}

fn quota(
    input: &MarketInput<'_>,
    rows: &Rows,
    state: &dyn Fn(&str) -> Option<OrderState>,
    out: &mut Vec<Violation>,
) {
    const O: &str = "quota";
    let w = input.ledger;
    let confirmed = confirmed_orders(input, OrderKind::ChannelQuota, state);
    // client -> account uuid, from the buyer of any of its orders.
    let mut uuid: BTreeMap<usize, String> = BTreeMap::new();
    for o in &w.orders {
        if let Some(b) = field(rows.orders.get(&o.order_id), "buyer").and_then(|b| b.as_str()) {
            uuid.insert(o.client, b.to_owned());
        }
    }
    for client in input.alias_history.keys() {
        let seats = confirmed.iter().filter(|o| o.client == *client).count() as u64;
        let free = u64::from(input.free_quota);
        let seen = u64::from(w.created.get(client).copied().unwrap_or(0));
        if seen > free + seats {
            out.push(Violation::new(
                O,
                format!(
                    "c{client} created {seen} channels with {free} free + {seats} bought seats"
                ),
            ));
        }
        let Some(u) = uuid.get(client) else { continue };
        let row = rows.quota.get(u);
        let num = |name: &str| {
            field(row, name)
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0)
        };
        if num("bought") != seats {
            out.push(Violation::new(
                O,
                format!(
                    "c{client}: relay counts {} bought seats, {seats} quota orders confirmed",
                    num("bought")
                ),
            ));
        }
        if num("created") > free + num("bought") {
            out.push(Violation::new(
                O,
                format!(
                    "c{client}: relay counts {} created channels over {free} + {} seats",
                    num("created"),
                    num("bought")
                ),
            ));
        }
    }
}

#[cfg(test)]
mod push_oracle_tests {
    //! The `push` oracle on hand-built facts: each rule fires on the defect it guards against,
    //! and stays quiet on a clean history.

    use super::{PushFacts, Violation, check_push, contains_word};
    use crate::pushworld::{PushKind, SeenPush};

    /// Seed 20 at the medium scale: the vanity alias `400` "found" in an FCM TTL of `86400s`.
    #[test]
    fn a_secret_is_matched_as_a_whole_word_only() {
        let fcm = r#"{"token":"simfcm-c1","data":{"type":"new_msg"},"android":{"ttl":"86400s"}}"#;
        assert!(!contains_word(fcm, "400"));
        assert!(contains_word(r#"{"from":"400"}"#, "400"));
        assert!(contains_word("alias-4444 x", "alias-4444"));
        assert!(!contains_word("x", ""));
    }

    const NEW_MSG: &str = r#"{"type":"new_msg"}"#;

    fn web(target: &str, at_ms: u64, status: u16, payload: &str) -> SeenPush {
        SeenPush {
            kind: PushKind::Web,
            target: target.to_owned(),
            at_ms,
            status,
            gone: matches!(status, 404 | 410),
            payload: Ok(payload.to_owned()),
        }
    }

    /// c0 (two subscriptions `s1`, `s2`) offline 10..100 s; a message acked for it at 20 s.
    fn facts(pushes: Vec<SeenPush>) -> PushFacts {
        PushFacts {
            pushes,
            targets: [(0, vec!["s1".to_owned(), "s2".to_owned()])].into(),
            offline: vec![(0, 10_000, 100_000)],
            acked_for: [(0, vec![(20_000, "m1".to_owned())])].into(),
            secrets: vec!["alias-4444".to_owned(), "c-conv1".to_owned()],
            idle_ms: 90_000,
            ..PushFacts::default()
        }
    }

    fn check(f: &PushFacts) -> Vec<Violation> {
        let mut out = Vec::new();
        check_push(f, &mut out);
        out
    }

    #[test]
    fn a_clean_history_passes() {
        let f = facts(vec![
            web("s1", 20_010, 201, NEW_MSG),
            web("s2", 20_012, 201, NEW_MSG),
            web("s1", 60_000, 201, NEW_MSG),
        ]);
        assert_eq!(check(&f), Vec::new());
    }

    #[test]
    fn an_offline_recipient_never_pushed_is_caught() {
        let v = check(&facts(Vec::new()));
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].detail.contains("never pushed"), "{v:?}");
    }

    #[test]
    fn content_in_a_push_is_caught() {
        for payload in [
            r#"{"type":"new_msg","from":"x"}"#,
            r#"{"type":"new_msg"} "#,
            r#"{"type":"alias-4444"}"#,
        ] {
            let v = check(&facts(vec![web("s1", 20_010, 201, payload)]));
            assert!(!v.is_empty(), "{payload}: not caught");
            assert!(v.iter().all(|v| v.oracle == "push"));
        }
        // Secrets anywhere in a native payload.
        let mut apns = web("s2", 20_010, 200, "");
        apns.kind = PushKind::Apns;
        apns.payload = Ok(r#"{"aps":{"alert":{"body":"c-conv1"}},"type":"new_msg"}"#.to_owned());
        let v = check(&facts(vec![apns]));
        assert!(v.iter().any(|v| v.detail.contains("carries")), "{v:?}");
    }

    #[test]
    fn a_push_the_service_refused_is_caught() {
        let mut bad = web("s1", 20_010, 401, NEW_MSG);
        bad.payload = Err("VAPID: bad signature".to_owned());
        let v = check(&facts(vec![bad]));
        assert!(v.iter().any(|v| v.detail.contains("refused")), "{v:?}");
    }

    #[test]
    fn two_pushes_in_one_window_are_caught_unless_excused() {
        let pushes = vec![
            web("s1", 20_010, 201, NEW_MSG),
            web("s1", 30_000, 201, NEW_MSG),
        ];
        let v = check(&facts(pushes.clone()));
        assert!(v.iter().any(|v| v.detail.contains("window")), "{v:?}");
        let excused = PushFacts {
            trouble_ms: vec![25_000],
            ..facts(pushes)
        };
        assert_eq!(check(&excused), Vec::new(), "a relay restart between");
    }

    #[test]
    fn a_push_after_gone_is_caught() {
        let v = check(&facts(vec![
            web("s1", 20_010, 201, NEW_MSG),
            web("s2", 20_012, 410, NEW_MSG),
            web("s1", 60_000, 201, NEW_MSG),
            web("s2", 60_002, 410, NEW_MSG),
        ]));
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].detail.contains("gone"), "{v:?}");
    }

    #[test]
    fn a_push_to_an_unregistered_target_is_caught() {
        let v = check(&facts(vec![
            web("s1", 20_010, 201, NEW_MSG),
            web("s9", 20_012, 404, NEW_MSG),
        ]));
        assert!(
            v.iter().any(|v| v.detail.contains("no client registered")),
            "{v:?}"
        );
    }
}
