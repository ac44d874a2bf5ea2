//! Invariants checked at the end of every run; each violation names its oracle.
//!
//! | oracle | checks |
//! |---|---|
//! | `delivered-exactly-once` | every message the relay acknowledged (the sender's store has its seq) reaches an app of the recipient's account; no app sees one message twice |
//! | `seq-order` | per device and conversation, `message` events come in strictly increasing seq |
//! | `seq-gap-free` | per conversation, the seqs seen (sender acks ∪ recipient messages) are exactly `1..=max` |
//! | `non-participant` | no message or typing event reaches a device outside the conversation, or claims a sender other than the peer |
//! | `receipts` | `delivered`/`read` only for messages the recipient's account received (and, for `read`, marked read); a status never moves down |
//!
//! Retracted messages are exempt from delivery and receipt checks: the relay drops a
//! still-queued copy on `retract`, and a later receipt "up to seq" covers it.
//! | `outbox-drained` | after the liveness phase no primary device has an unacknowledged outbox intent |
//! | `canary-store` / `canary-logs` | no planted plaintext in the relay's committed rows or in any log line |
//! | `payment-applied-once` | every order paid in full through the stand-in ends confirmed (or, when a clock jump made it late, expired *and* flagged for refund), never pending; unpaid and forged-only orders never confirm; a forged webhook is never accepted; exactly one `payment_confirmed` reaches the buyer's account per confirmed order (none otherwise, none to anyone else), across reconnects and crashes; no webhook copy given up |
//! | `alias-unique` | no alias bound to two accounts, at most one confirmed order per alias, current aliases distinct, bound and retired aliases never searchable or bound again |
//! | `channel-single-owner` | every listed channel has exactly one owner (`channels/mine`), the buyer of its one confirmed trade order or else its creator; a sold channel is no longer for sale |
//! | `holds-released` | after the final clock jump no order is pending, every pool alias without a confirmed order is searchable, every still-listed channel without a confirmed trade can be bought |
//! | `quota` | seats bought (relay row) = confirmed quota orders; channels created (relay row and 2xx seen) <= free quota + seats |

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use client_core::machine::Event;
use client_core::store::{ClientStore as _, MessageStatus};
use relay_core::store::{MemoryStore as RelayStore, Store as _, Table};
use wire::http::{OrderKind, OrderState};

use super::commerce::{CommerceWorld, OrderRec};
use super::scenario::Scenario;
use super::trace::{Device, Record};
use crate::client::SharedStore;
use crate::standins::PaymentProcessor;

/// One broken invariant.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Violation {
    /// Oracle name.
    pub oracle: &'static str,
    /// What was seen.
    pub detail: String,
}

impl Violation {
    /// A violation of `oracle`.
    pub fn new(oracle: &'static str, detail: impl Into<String>) -> Self {
        Self {
            oracle,
            detail: detail.into(),
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {}", self.oracle, self.detail)
    }
}

/// Every oracle name (for summaries).
pub const ORACLES: [&str; 15] = [
    "delivered-exactly-once",
    "seq-order",
    "seq-gap-free",
    "non-participant",
    "receipts",
    "outbox-drained",
    "canary-store",
    "canary-logs",
    "setup",
    "host-error",
    "payment-applied-once",
    "alias-unique",
    "channel-single-owner",
    "holds-released",
    "quota",
];

/// What the oracles read.
#[derive(Debug)]
pub(super) struct Input<'a> {
    pub(super) scenario: &'a Scenario,
    pub(super) records: &'a [Record],
    pub(super) stores: &'a [SharedStore],
    pub(super) second_stores: &'a [(Device, SharedStore)],
    pub(super) convs: &'a BTreeMap<usize, String>,
    /// Every alias each client had (a bind adds one).
    pub(super) aliases: &'a BTreeMap<usize, Vec<String>>,
    pub(super) relay_store: &'a RelayStore,
}

/// A message as acknowledged to its sender.
#[derive(Debug, Clone)]
struct Acked {
    id: String,
    conv: String,
    seq: u64,
    sender: usize,
}

/// Runs every store/trace oracle.
pub(super) fn check_all(input: &Input<'_>, out: &mut Vec<Violation>) {
    if out.iter().any(|v| v.oracle == "setup") {
        return;
    }
    let conv_pair: BTreeMap<&str, usize> = input
        .convs
        .iter()
        .map(|(pair, conv)| (conv.as_str(), *pair))
        .collect();
    let all_acked = acked_messages(input);
    let acked = all_acked.clone();
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
        .collect();
    let acked: Vec<Acked> = acked
        .into_iter()
        .filter(|a| !retracted.contains(a.id.as_str()))
        .collect();
    delivery(input, &conv_pair, &acked, out);
    gap_free(input, &all_acked, out);
    receipts(input, &conv_pair, &acked, out);
    outbox(input, out);
    store_canaries(input, out);
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
/// `(device, message id, conv, seq, from)`.
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

fn delivery(
    input: &Input<'_>,
    conv_pair: &BTreeMap<&str, usize>,
    acked: &[Acked],
    out: &mut Vec<Violation>,
) {
    let got = received(input.records);
    let mut per_device: BTreeMap<(Device, &str), usize> = BTreeMap::new();
    let mut last_seq: BTreeMap<(Device, &str), u64> = BTreeMap::new();
    for &(who, id, conv, seq, from) in &got {
        *per_device.entry((who, id)).or_default() += 1;
        if per_device[&(who, id)] == 2 {
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
            let last = last_seq.entry((who, conv)).or_insert(0);
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
    // Liveness: every acknowledged message reached some app of the recipient's account.
    let by_account: BTreeSet<(usize, &str)> =
        got.iter().map(|&(who, id, ..)| (who.client, id)).collect();
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
            out.push(Violation::new(
                "delivered-exactly-once",
                format!(
                    "message {} (c{} -> c{recipient}, {} seq {}) acknowledged but never delivered",
                    a.id, a.sender, a.conv, a.seq
                ),
            ));
        }
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
            out.push(Violation::new(
                "seq-gap-free",
                format!("{conv}: seqs {missing:?} of 1..={max} never seen"),
            ));
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

fn outbox(input: &Input<'_>, out: &mut Vec<Violation>) {
    for (client, store) in input.stores.iter().enumerate() {
        let pending = store.snapshot().list_outbox().unwrap_or_default();
        if !pending.is_empty() {
            let ids: Vec<&str> = pending.iter().map(|i| i.internal_id.as_str()).collect();
            out.push(Violation::new(
                "outbox-drained",
                format!("c{client} still has unacknowledged {ids:?} after the liveness phase"),
            ));
        }
    }
    // Second devices only log in and leave; their stores are not expected to drain.
    let _ = input.second_stores;
}

fn store_canaries(input: &Input<'_>, out: &mut Vec<Violation>) {
    let mut store = input.relay_store.clone();
    let Ok(snapshot) = store.load() else {
        out.push(Violation::new("canary-store", "relay store unreadable"));
        return;
    };
    for (table, rows) in &snapshot {
        for (key, value) in rows {
            for canary in &input.scenario.canaries {
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

/// Checks captured log text for canaries.
pub(super) fn logs_free_of_canaries(text: &str, canaries: &[String], out: &mut Vec<Violation>) {
    for canary in canaries {
        if text.contains(canary.as_str()) {
            out.push(Violation::new(
                "canary-logs",
                format!("{canary} appears in the logs"),
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
pub(super) struct CommerceInput<'a> {
    pub(super) world: &'a CommerceWorld,
    pub(super) alias_history: &'a BTreeMap<usize, Vec<String>>,
    pub(super) records: &'a [Record],
    pub(super) processor: &'a PaymentProcessor,
    pub(super) forger: &'a PaymentProcessor,
    pub(super) relay_store: &'a RelayStore,
    /// Simulated ms of the mid-run relay clock jumps.
    pub(super) jumps_ms: &'a [u64],
    pub(super) free_quota: u32,
}

/// The relay's order and quota rows, as JSON (scanned only where the public API cannot
/// tell: refund flags, buyers, seat counters, pending orders nobody learned about).
struct Rows {
    orders: BTreeMap<String, serde_json::Value>,
    quota: BTreeMap<String, serde_json::Value>,
}

fn rows(store: &RelayStore) -> Option<Rows> {
    let mut store = store.clone();
    let snapshot = store.load().ok()?;
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

fn field<'v>(row: Option<&'v serde_json::Value>, name: &str) -> Option<&'v serde_json::Value> {
    row.and_then(|r| r.get(name))
}

/// Runs the commerce oracles.
pub(super) fn check_commerce(input: &CommerceInput<'_>, out: &mut Vec<Violation>) {
    let w = input.world;
    let audit = &w.audit;
    if !audit.done {
        out.push(Violation::new(
            "payment-applied-once",
            "the commerce audit did not finish within the liveness bound",
        ));
        return;
    }
    let Some(rows) = rows(input.relay_store) else {
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
    input: &CommerceInput<'_>,
    rows: &Rows,
    state: &dyn Fn(&str) -> Option<OrderState>,
    out: &mut Vec<Violation>,
) {
    const O: &str = "payment-applied-once";
    let w = input.world;
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
        let expected = usize::from(st == OrderState::Confirmed);
        if got.len() != expected {
            out.push(Violation::new(
                O,
                format!(
                    "order {id} ({st:?}) got {} payment_confirmed at c{} (expected {expected}): {got:?}",
                    got.len(),
                    o.client
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
        if d.forged && d.status.is_some_and(|s| s != 401) {
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
    input: &'w CommerceInput<'_>,
    kind: OrderKind,
    state: &dyn Fn(&str) -> Option<OrderState>,
) -> Vec<&'w OrderRec> {
    input
        .world
        .orders
        .iter()
        .filter(|o| o.kind == kind && state(&o.order_id) == Some(OrderState::Confirmed))
        .collect()
}

fn aliases_unique(
    input: &CommerceInput<'_>,
    state: &dyn Fn(&str) -> Option<OrderState>,
    out: &mut Vec<Violation>,
) {
    const O: &str = "alias-unique";
    let w = input.world;
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
    input: &CommerceInput<'_>,
    state: &dyn Fn(&str) -> Option<OrderState>,
    out: &mut Vec<Violation>,
) {
    const O: &str = "channel-single-owner";
    let w = input.world;
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
    input: &CommerceInput<'_>,
    rows: &Rows,
    state: &dyn Fn(&str) -> Option<OrderState>,
    out: &mut Vec<Violation>,
) {
    const O: &str = "holds-released";
    let w = input.world;
    let late = &w.audit.late_at_final_jump;
    let probes: BTreeSet<&str> = w
        .audit
        .probes
        .values()
        .filter_map(|p| p.as_ref().ok().map(String::as_str))
        .collect();
    for (id, row) in &rows.orders {
        let pending = field(Some(row), "state").and_then(|s| s.as_str()) == Some("pending");
        if pending && !probes.contains(id.as_str()) && !late.contains(id) {
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
        if !taken && w.audit.searchable.get(alias) != Some(&true) {
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
    input: &CommerceInput<'_>,
    rows: &Rows,
    state: &dyn Fn(&str) -> Option<OrderState>,
    out: &mut Vec<Violation>,
) {
    const O: &str = "quota";
    let w = input.world;
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
