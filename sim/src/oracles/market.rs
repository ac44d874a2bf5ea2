//! The commerce oracles, after the public-API audit of [`crate::market`]:
//!
//! | oracle | checks |
//! |---|---|
//! | `payment-applied-once` | paid orders confirmed (or late and refund-flagged) and their `payment_confirmed` seen at least once by the buyer and at most once by its primary device; nothing confirmed without a genuine payment; forged webhooks refused; no genuine copy given up |
//! | `alias-unique` | one owner per alias; a bound or retired alias is not for sale; no alias sold twice |
//! | `channel-single-owner` | one owner per channel, the creator or the buyer of its one confirmed trade |
//! | `holds-released` | every order expired after the final clock jump, and what it held is for sale again; so is every alias of the scenario's pool that no order took, whether or not a buyer ever got an order for it |
//! | `quota` | channels created within the free quota plus the seats bought; the relay counts the seats confirmed |
//! | `commerce-model` | refund flags only on orders a genuine payment reached, never on confirmed ones but those paid in full twice |
//! | `order-records` | what the store records of each order against what the run did: the price quoted, the amount paid (every genuine payment the relay answered, at the largest cumulative amount it answered, summed), a refund due when it was paid in full twice, the hold (15 min for an alias, 30 for a trade or seat), bound only if its buyer bound it, and only once confirmed; a purchase of an alias of the catalogue is never answered `ALIAS_NOT_FOUND`; a channel bought again by its buyer while the order is pending answers with that order |
//! | `bind-state` | a bind of an order the relay calls expired is refused (409); a bind repeated by the owner whose alias it still is, answered 200 |

use std::collections::{BTreeMap, BTreeSet};

use client_core::machine::Event;
use relay_core::store::{Snapshot, Table};
use wire::http::{OrderKind, OrderState};

use crate::trace::{Device, Record};
use crate::violation::{Oracle, Violation};
use crate::world::ledger::{Ledger, OrderRec};
use standins::PaymentProcessor;

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
    /// When the store first committed each order confirmed.
    pub(crate) confirmed_ms: &'a BTreeMap<String, u64>,
    /// The world (the relay's clock across its jumps).
    pub(crate) world: &'a crate::world::World,
    /// Dishonest clients were at work (they place and hold orders of their own).
    pub(crate) dishonest: bool,
    /// The catalogue aliases the scenario's buyers compete for.
    pub(crate) alias_pool: &'a [String],
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

fn field<'v>(row: Option<&'v serde_json::Value>, name: &str) -> Option<&'v serde_json::Value> {
    row.and_then(|r| r.get(name))
}

/// Runs the commerce oracles.
pub(crate) fn check_market(input: &MarketInput<'_>, out: &mut Vec<Violation>) {
    let w = input.ledger;
    let audit = &w.audit;
    if !audit.done {
        out.push(Violation::new(
            Oracle::PaymentAppliedOnce,
            "the commerce audit did not finish within the liveness bound",
        ));
        return;
    }
    let Some(rows) = rows(input.snapshot) else {
        out.push(Violation::new(Oracle::Quota, "relay store unreadable"));
        return;
    };
    let state = |order: &str| audit.states.get(order).copied().flatten();
    payments_once(input, &rows, &state, out);
    aliases_unique(input, &state, out);
    channels_owned(input, &state, out);
    holds_released(input, &rows, &state, out);
    quota(input, &rows, &state, out);
    order_records(input, &rows, out);
    bind_probes(input, out);
}

/// How many separate payments of order `o` were finished in full and answered 2xx by the
/// relay (two or more: one is to be refunded).
fn paid_in_full_times(input: &MarketInput<'_>, o: &OrderRec) -> usize {
    let deliveries = input.processor.deliveries();
    input
        .processor
        .payments()
        .iter()
        .filter(|p| p.order_id.as_str() == o.order_id)
        .filter(|p| {
            deliveries.iter().any(|d| {
                d.payment_id == p.payment_id
                    && !d.forged
                    && d.payment_status == wire::http::PaymentStatus::Finished
                    && d.paid_usdt >= o.price
                    && d.status.is_some_and(|s| (200..300).contains(&s))
            })
        })
        .count()
}

/// `order-records`: each order's row against what the run did (see the module doc).
fn order_records(input: &MarketInput<'_>, rows: &Rows, out: &mut Vec<Violation>) {
    const O: Oracle = Oracle::OrderRecords;
    let payments = input.processor.payments();
    let deliveries = input.processor.deliveries();
    let audit = &input.ledger.audit;
    for o in &input.ledger.orders {
        let id = o.order_id.as_str();
        let Some(row) = rows.orders.get(id) else {
            out.push(Violation::new(
                O,
                format!(
                    "order {id} ({:?} {}) has no row in the store",
                    o.kind, o.target
                ),
            ));
            continue;
        };
        let num = |name: &str| field(Some(row), name).and_then(serde_json::Value::as_u64);
        let what = |text: String| {
            Violation::new(O, format!("order {id} ({:?} {}): {text}", o.kind, o.target))
        };
        if num("price_usdt") != Some(o.price) {
            out.push(what(format!(
                "records price {:?}, quoted {}",
                num("price_usdt"),
                o.price
            )));
        }
        // Every genuine payment of the order, at the largest amount so far that the relay
        // answered 2xx (a processor reports a payment's cumulative amount each time).
        let paid: u64 = payments
            .iter()
            .filter(|p| p.order_id.as_str() == id)
            .filter_map(|p| {
                deliveries
                    .iter()
                    .filter(|d| {
                        d.payment_id == p.payment_id
                            && !d.forged
                            && d.payment_status != wire::http::PaymentStatus::Failed
                            && d.status.is_some_and(|s| (200..300).contains(&s))
                    })
                    .map(|d| d.paid_usdt)
                    .max()
            })
            .sum();
        // A copy still unanswered may have been applied: judged only when none is.
        let unanswered = deliveries
            .iter()
            .any(|d| d.order_id.as_str() == id && !d.forged && d.status.is_none());
        if !unanswered && num("paid_usdt") != Some(paid) {
            out.push(what(format!(
                "records {:?} USDT paid; the genuine payments it answered sum to {paid}",
                num("paid_usdt")
            )));
        }
        let hold = match o.kind {
            OrderKind::Vanity => relay_core::limits::ALIAS_HOLD_MS,
            _ => relay_core::limits::CHANNEL_ORDER_TTL_MS,
        };
        if let (Some(created), Some(expires)) = (num("created_at"), num("expires_at"))
            && expires.checked_sub(created) != Some(hold)
        {
            out.push(what(format!(
                "holds from {created} to {expires} ({} ms; the hold is {hold} ms)",
                expires.saturating_sub(created)
            )));
        }
        let used = field(Some(row), "used") == Some(&serde_json::Value::Bool(true));
        let state = field(Some(row), "state").and_then(|v| v.as_str());
        // Two separate payments, each finished and answered: one of them is to be refunded.
        let finished = paid_in_full_times(input, o);
        let refund = field(Some(row), "refund_needed") == Some(&serde_json::Value::Bool(true));
        if finished >= 2 && !refund {
            out.push(what(format!(
                "was paid in full {finished} times, separately, and is not flagged for a refund"
            )));
        }
        if used && state != Some("confirmed") {
            out.push(what(format!("is marked bound while {state:?}")));
        }
        if used && !audit.bind_attempted.contains(id) {
            out.push(what(
                "is marked bound, but its buyer never bound it".to_owned(),
            ));
        }
        let bound = input.ledger.binds.iter().any(|b| b.order_id == id);
        if bound && !used {
            out.push(what(
                "was bound by its buyer, but is not marked bound".to_owned(),
            ));
        }
    }
}

/// `bind-state`: the binds the audit tried on purpose (see `crate::market`).
fn bind_probes(input: &MarketInput<'_>, out: &mut Vec<Violation>) {
    let late = &input.ledger.audit.late_at_final_jump;
    for p in &input.ledger.audit.bind_probes {
        let Some(status) = p.status else { continue };
        if status == 429 || status >= 500 || status == 401 {
            continue;
        }
        let wrong = match p.what {
            "expired" if !late.contains(&p.order_id) => status != 409,
            "bound" => status != 200,
            _ => false,
        };
        if wrong {
            out.push(Violation::new(
                Oracle::BindState,
                format!(
                    "c{} bound its {} order {} again: {status} (expected {})",
                    p.client,
                    p.what,
                    p.order_id,
                    if p.what == "expired" { "409" } else { "200" }
                ),
            ));
        }
    }
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

/// The V5 state the audit read for each order (`None`: no answer).
type StateOf<'s> = dyn Fn(&str) -> Option<OrderState> + 's;

/// `payment-applied-once` (and `commerce-model`'s refund flags), order by order, then over
/// the confirmations nobody ordered and the webhooks' answers.
fn payments_once(
    input: &MarketInput<'_>,
    rows: &Rows,
    state: &StateOf<'_>,
    out: &mut Vec<Violation>,
) {
    let events = confirm_events(input.records);
    for o in &input.ledger.orders {
        let id = o.order_id.as_str();
        let Some(st) = state(id) else {
            out.push(Violation::new(
                PAID_ONCE,
                format!("no V5 answer for order {id}"),
            ));
            continue;
        };
        order_applied_once(input, rows, o, st, out);
        let got = events.get(id).cloned().unwrap_or_default();
        confirmed_to_buyer(o, st, &got, confirm_lapsed(input, o), out);
    }
    unordered_confirmations(input, rows, &events, out);
    webhooks_answered(input, out);
}

const PAID_ONCE: Oracle = Oracle::PaymentAppliedOnce;

/// A paid order is confirmed (or, paid late, flagged for refund); an unpaid one is not; a
/// refund flag only where a genuine payment arrived and the order was not confirmed.
fn order_applied_once(
    input: &MarketInput<'_>,
    rows: &Rows,
    o: &OrderRec,
    st: OrderState,
    out: &mut Vec<Violation>,
) {
    let id = o.order_id.as_str();
    let exposed = input.jumps_ms.iter().any(|j| o.requested_ms < *j)
        || input.ledger.audit.late_at_final_jump.contains(id);
    let refund =
        field(rows.orders.get(id), "refund_needed") == Some(&serde_json::Value::Bool(true));
    let what = |text: &str| format!("order {id} ({:?} {}) {text}", o.kind, o.target);
    if o.paid {
        let wrong = match st {
            OrderState::Pending => Some(what(
                "paid in full but still pending after the liveness phase",
            )),
            OrderState::Expired if !exposed => {
                Some(what("paid in full before its deadline but expired"))
            }
            OrderState::Expired if !refund => {
                Some(what("paid late: neither honoured nor flagged for refund"))
            }
            OrderState::Expired if surely_available(input, o) => Some(what(
                "paid late while what it bought was still there for it (no other order or buyer for it), yet refunded instead of honoured",
            )),
            _ => None,
        };
        out.extend(wrong.map(|w| Violation::new(PAID_ONCE, w)));
    } else if st == OrderState::Confirmed {
        let why = if o.forged_only {
            "only forged webhooks"
        } else {
            "never paid"
        };
        out.push(Violation::new(
            PAID_ONCE,
            format!("order {id} confirmed with {why}"),
        ));
    }
    if !o.paid && refund {
        out.push(Violation::new(
            Oracle::CommerceModel,
            what("flagged for refund though no genuine payment reached it"),
        ));
    }
    if st == OrderState::Confirmed && refund && paid_in_full_times(input, o) < 2 {
        out.push(Violation::new(
            Oracle::CommerceModel,
            what("both confirmed and flagged for refund, though paid in full once"),
        ));
    }
}

/// Whether what order `o` bought was surely still there for it whenever its payment came: a
/// channel seat always is; an alias or a channel no other order of the run asked for, in a
/// run without dishonest clients (they buy and hold too), and whose listing nobody changed.
fn surely_available(input: &MarketInput<'_>, o: &OrderRec) -> bool {
    match o.kind {
        OrderKind::ChannelQuota => true,
        OrderKind::Vanity | OrderKind::ChannelTrade => {
            // A payment still in flight at the final clock jump may meet the audit's own
            // probe orders.
            !input.dishonest
                && !input.ledger.audit.late_at_final_jump.contains(&o.order_id)
                && !input.ledger.orders.iter().any(|other| {
                    other.order_id != o.order_id && other.kind == o.kind && other.target == o.target
                })
        }
    }
}

/// `payment_confirmed` of order `o` reached only its buyer: at most once on the primary
/// device (its store deduplicates by order id for the whole run; a second-device login is a
/// fresh install with a store of its own, so it may see it again); at least once for a
/// confirmed order (the relay re-sends it to every device of the buyer).
fn confirmed_to_buyer(
    o: &OrderRec,
    st: OrderState,
    got: &[Device],
    lapsed: bool,
    out: &mut Vec<Violation>,
) {
    let id = o.order_id.as_str();
    if let Some(d) = got.iter().find(|d| d.client != o.client) {
        out.push(Violation::new(
            PAID_ONCE,
            format!(
                "payment_confirmed of c{}'s order {id} reached {d}",
                o.client
            ),
        ));
    }
    let once_per_device = got.iter().filter(|d| d.device == 0).count() <= 1;
    let expected = usize::from(st == OrderState::Confirmed && !lapsed);
    if lapsed && once_per_device {
        return;
    }
    if !once_per_device || got.is_empty() != (expected == 0) {
        out.push(Violation::new(
            PAID_ONCE,
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

/// Whether the relay may have let order `o`'s kept `payment_confirmed` lapse: it keeps one
/// for a day on its clock (relay-core's `CONFIRM_REDELIVERY_TTL_MS`), and the buyer's primary
/// device's next live connection (after the order was confirmed: the commit that confirmed
/// it, and no earlier than its first genuine webhook copy's delay) began only later than
/// that, or never. A connection is live when the relay was seen to serve it: something came
/// from the relay over it before the device's network state changed again. One the relay
/// lost at once (a power-off right after the socket opened) may have ended before the relay
/// sent what it kept, and the client may not notice for a long while.
fn confirm_lapsed(input: &MarketInput<'_>, o: &OrderRec) -> bool {
    const REDELIVERY_MS: u64 = 24 * 3_600_000;
    let delay = input
        .processor
        .payments()
        .iter()
        .filter(|p| p.order_id.as_str() == o.order_id)
        .map(|p| p.plan.delay_ms)
        .min()
        .unwrap_or(0);
    // The commit that confirmed it, when the store saw one (a webhook the network held back
    // confirms later than its delay says).
    let earliest = input
        .confirmed_ms
        .get(&o.order_id)
        .copied()
        .unwrap_or(o.requested_ms + delay)
        .max(o.requested_ms + delay);
    let mut connected = None;
    let mut next = None;
    for r in input.records {
        let Record::Event { t_ms, who, event } = r else {
            continue;
        };
        if who.client != o.client || who.device != 0 || *t_ms < earliest {
            continue;
        }
        match event {
            Event::NetworkState(state) => {
                connected =
                    (*state == client_core::machine::NetworkState::Connected).then_some(*t_ms);
            }
            Event::Message(_)
            | Event::StatusChange { .. }
            | Event::Typing { .. }
            | Event::PaymentConfirmed { .. }
            | Event::Retracted { .. }
            | Event::Goaway(_) => {
                if let Some(t) = connected {
                    next = Some(t);
                    break;
                }
            }
            _ => {}
        }
    }
    next.is_none_or(|t| input.world.relay_elapsed(earliest, t) >= REDELIVERY_MS)
}

/// No `payment_confirmed` for an order nobody placed; no order confirmed in the relay that
/// was never paid.
fn unordered_confirmations(
    input: &MarketInput<'_>,
    rows: &Rows,
    events: &BTreeMap<&str, Vec<Device>>,
    out: &mut Vec<Violation>,
) {
    let orders = &input.ledger.orders;
    for id in events.keys() {
        if !orders.iter().any(|o| o.order_id == *id) {
            out.push(Violation::new(
                PAID_ONCE,
                format!("payment_confirmed for unknown order {id}"),
            ));
        }
    }
    for (id, row) in &rows.orders {
        let confirmed = field(Some(row), "state").and_then(|s| s.as_str()) == Some("confirmed");
        if confirmed && !orders.iter().any(|o| o.order_id == *id && o.paid) {
            out.push(Violation::new(
                PAID_ONCE,
                format!("order {id} confirmed in the relay but never paid"),
            ));
        }
    }
}

/// Every forged webhook refused; no genuine copy given up unanswered.
fn webhooks_answered(input: &MarketInput<'_>, out: &mut Vec<Violation>) {
    for d in input.forger.deliveries() {
        if d.status.is_some_and(|s| (200..300).contains(&s)) {
            out.push(Violation::new(
                PAID_ONCE,
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
                PAID_ONCE,
                format!("forged copy for {} answered {:?}", d.order_id, d.status),
            ));
        }
        let max = payments
            .iter()
            .find(|p| p.payment_id == d.payment_id)
            .map_or(1, |p| p.plan.max_attempts.max(1));
        if !d.forged && d.attempt >= max && !d.status.is_some_and(|s| (200..300).contains(&s)) {
            out.push(Violation::new(
                PAID_ONCE,
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
    state: &StateOf<'_>,
) -> Vec<&'w OrderRec> {
    input
        .ledger
        .orders
        .iter()
        .filter(|o| o.kind == kind && state(&o.order_id) == Some(OrderState::Confirmed))
        .collect()
}

/// `alias-unique`: one client per bound alias, none for sale again; no alias sold twice; no
/// two clients with one alias; a retired alias neither for sale nor bound by another.
fn aliases_unique(input: &MarketInput<'_>, state: &StateOf<'_>, out: &mut Vec<Violation>) {
    let w = input.ledger;
    let mut bound: BTreeMap<&str, BTreeSet<usize>> = BTreeMap::new();
    for b in &w.binds {
        bound.entry(b.alias.as_str()).or_default().insert(b.client);
    }
    for (alias, who) in &bound {
        if who.len() > 1 {
            out.push(Violation::new(
                ALIAS_UNIQUE,
                format!("{alias} bound to clients {who:?}"),
            ));
        }
        if w.audit.searchable.get(*alias) == Some(&true) {
            out.push(Violation::new(
                ALIAS_UNIQUE,
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
                ALIAS_UNIQUE,
                format!("{alias} sold twice: orders {orders:?}"),
            ));
        }
    }
    aliases_held_once(input, out);
}

const ALIAS_UNIQUE: Oracle = Oracle::AliasUnique;

/// No two clients end with one alias; a client's retired aliases are neither for sale nor
/// bound by another client.
fn aliases_held_once(input: &MarketInput<'_>, out: &mut Vec<Violation>) {
    let w = input.ledger;
    let mut current: BTreeMap<&str, usize> = BTreeMap::new();
    for (client, history) in input.alias_history {
        if let Some(a) = history.last()
            && let Some(other) = current.insert(a.as_str(), *client)
        {
            out.push(Violation::new(
                ALIAS_UNIQUE,
                format!("c{client} and c{other} both have alias {a}"),
            ));
        }
        for retired in history.iter().rev().skip(1) {
            if w.audit.searchable.get(retired) == Some(&true) {
                out.push(Violation::new(
                    ALIAS_UNIQUE,
                    format!("retired alias {retired} of c{client} is for sale"),
                ));
            }
            if let Some(b) = w
                .binds
                .iter()
                .find(|b| b.alias == *retired && b.client != *client)
            {
                out.push(Violation::new(
                    ALIAS_UNIQUE,
                    format!(
                        "retired alias {retired} of c{client} bound by c{}",
                        b.client
                    ),
                ));
            }
        }
    }
}

fn channels_owned(input: &MarketInput<'_>, state: &StateOf<'_>, out: &mut Vec<Violation>) {
    const O: Oracle = Oracle::ChannelSingleOwner;
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

/// `holds-released`: after the final clock jump no order placed before it is pending, and
/// every alias of the pool or of an expired order that no confirmed order took is for sale.
fn holds_released(
    input: &MarketInput<'_>,
    rows: &Rows,
    state: &StateOf<'_>,
    out: &mut Vec<Violation>,
) {
    let fresh_holds = pending_after_jump(input, rows, out);
    let w = input.ledger;
    let late = &w.audit.late_at_final_jump;
    // Every alias of the pool, whether or not a buyer learned of an order for it: an alias
    // nobody could buy must be for sale at the end as much as one whose orders expired.
    let mut pool: BTreeSet<&str> = input.alias_pool.iter().map(String::as_str).collect();
    for o in &w.orders {
        if o.kind == OrderKind::Vanity {
            pool.insert(o.target.as_str());
        }
    }
    for alias in pool {
        let taken = w.orders.iter().any(|o| {
            o.target == alias
                && (state(&o.order_id) == Some(OrderState::Confirmed) || late.contains(&o.order_id))
        }) || rows.orders.values().any(|row| {
            field(Some(row), "target").and_then(|t| t.as_str()) == Some(alias)
                && field(Some(row), "state").and_then(|s| s.as_str()) == Some("confirmed")
        });
        if !taken && !fresh_holds.contains(alias) && w.audit.searchable.get(alias) != Some(&true) {
            out.push(Violation::new(
                HOLDS_RELEASED,
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
                    HOLDS_RELEASED,
                    format!(
                        "channel {channel}: every trade order expired, yet a buyer was refused: {e}"
                    ),
                ));
            }
        }
    }
}

const HOLDS_RELEASED: Oracle = Oracle::HoldsReleased;

/// Flags every order still pending after the final jump that was placed before it (neither
/// an audit probe nor one with webhooks in flight); returns the targets held by orders
/// placed after it (a dishonest client still at work: not expired yet, rightly).
fn pending_after_jump<'r>(
    input: &MarketInput<'_>,
    rows: &'r Rows,
    out: &mut Vec<Violation>,
) -> BTreeSet<&'r str> {
    let w = input.ledger;
    let late = &w.audit.late_at_final_jump;
    let probes: BTreeSet<&str> = w
        .audit
        .probes
        .values()
        .filter_map(|p| p.as_ref().ok().map(String::as_str))
        .collect();
    let jump = w.audit.final_jump_relay_ms;
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
                HOLDS_RELEASED,
                format!("order {id} still pending after the final clock jump"),
            ));
        }
    }
    fresh_holds
}

fn quota(input: &MarketInput<'_>, rows: &Rows, state: &StateOf<'_>, out: &mut Vec<Violation>) {
    const O: Oracle = Oracle::Quota;
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
