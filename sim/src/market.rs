//! The simulator's market: the scripted vanity purchases, channel listings, channel buys and
//! quota buys, their payments through the stand-in (with the fault plan's webhook faults),
//! the background bind loop, and the end-of-run audit through the relay's public API. What
//! they learn goes to the world's [`Ledger`](crate::world::ledger::Ledger); the commerce
//! oracles read it.
//!
//! ```text
//! action     : purchase / buy / quota buy (retried on a lost response: same order back;
//!              every third channel buy is tapped twice: the same pending order back)
//! pay        : PaymentProcessor::pay with a WebhookPlan drawn from the action's roll,
//!              or abandoned (sometimes "paid" by a forger signing with the wrong secret)
//! bind loop  : every client polls V5 for its paid vanity orders and binds the confirmed
//!              ones (a bind whose answer was lost is repeated: 200 for the owner)
//! final jump : FINAL_JUMP_BEFORE_END_MS before the end, the relay's clock jumps 31 min:
//!              every unpaid order expires
//! audit      : AUDIT_BEFORE_END_MS before the end, V5 of every order, vanity search for
//!              every alias, channel detail; each client records `channels/mine`; then buy
//!              probes on the channels whose trade orders all expired
//! ```

use std::collections::BTreeSet;

use futures_util::{StreamExt as _, stream};
use rand_chacha::ChaCha20Rng;
use rand_core::{Rng as _, SeedableRng as _};
use wire::OrderId;
use wire::http::{ChannelRole, OrderKind, OrderState, PaymentStatus};

use crate::scenario::Pay;
use crate::time::{sim_ms, sleep_ms};
use crate::violation::Oracle;
use crate::world::ledger::{BindProbe, BindRec, ChannelRec, OrderRec, Payments};
use crate::world::{HostCtx, note};
use client::{Client, ClientError};
use seam::net::Turmoil;
use standins::{PaymentProcessor, WebhookPlan};

/// Attempts of one webhook copy in the simulator (enough to outlast any partition or crash of
/// the fault plan, so paid orders converge in the liveness phase).
const WEBHOOK_ATTEMPTS: u32 = 60;
/// Pause between webhook attempts.
const WEBHOOK_RETRY_MS: u64 = 2_000;
/// Attempts of one scripted commerce call when its response is lost.
const CALL_ATTEMPTS: u32 = 5;
/// Attempts of one read of the audit (`retried!(read …)`).
const READ_ATTEMPTS: u32 = 8;
/// Reads of the audit in flight at once: the answers do not change any more (every hold
/// expired), and one at a time does not fit before the probes when each passes a load
/// balancer and a node that passes it on at a high latency.
const AUDIT_READS_IN_FLIGHT: usize = 4;
/// Percent of paid orders (under the `webhook` fault) paid once, finished, one USDT short.
const SHORT_PAYMENT_PCT: u32 = 10;
/// Percent of paid orders (under the `webhook` fault) whose payment the processor reports
/// first at half its amount (`partially_paid`), then in full (`finished`), under one id.
const PROGRESS_REPORT_PCT: u32 = 20;
/// Percent of paid orders (under the `webhook` fault) that their buyer pays a second time.
const SECOND_PAYMENT_PCT: u32 = 15;
/// Attempts of a forger's copy of an abandoned order.
const FORGER_ATTEMPTS: u32 = 5;

fn base_plan(paid_usdt: u64) -> WebhookPlan {
    WebhookPlan {
        max_attempts: WEBHOOK_ATTEMPTS,
        retry_delay_ms: WEBHOOK_RETRY_MS,
        ..WebhookPlan::paid(paid_usdt)
    }
}

/// Pays `order` as `pay` says; returns `(paid in full, forged only)` and a note.
fn pay_order(payments: &Payments, order: &str, price: u64, pay: Pay) -> (bool, bool, String) {
    let Ok(id) = OrderId::parse(order) else {
        return (false, false, format!("order id {order} unparsable"));
    };
    match pay {
        Pay::Abandoned { roll } => {
            let mut r = ChaCha20Rng::seed_from_u64(roll);
            if payments.enabled && r.next_u32() % 100 < payments.faults.forge_only_pct {
                let plan = WebhookPlan {
                    max_attempts: FORGER_ATTEMPTS,
                    ..base_plan(price)
                };
                let _ = payments.forger.pay(id, plan);
                (false, true, format!("{order} forged-only payment"))
            } else {
                (false, false, format!("{order} abandoned"))
            }
        }
        Pay::Paid { roll } => {
            if !payments.enabled {
                let _ = payments.processor.pay(id, base_plan(price));
                return (true, false, format!("{order} paid {price}"));
            }
            let (in_full, text) = pay_with_faults(payments, id, order, price, roll);
            (in_full, false, text)
        }
    }
}

/// A genuine payment under the plan's webhook faults, drawn from `roll`: duplicated, forged,
/// delayed copies, sometimes an underpayment topped up later (the top-up overtaking it now and
/// then), sometimes paid twice, sometimes a finished payment one USDT short (never paid in
/// full), sometimes reported at half its amount before the full report. Returns whether it is paid in full, and the note.
fn pay_with_faults(
    payments: &Payments,
    id: OrderId,
    order: &str,
    price: u64,
    roll: u64,
) -> (bool, String) {
    let mut r = ChaCha20Rng::seed_from_u64(roll);
    let f = payments.faults;
    let plan = WebhookPlan {
        duplicates: r.next_u32() % (f.max_duplicates + 1),
        duplicate_spacing_ms: 100 + r.next_u64() % 5_000,
        forged: r.next_u32() % (f.max_forged + 1),
        delay_ms: r.next_u64() % f.max_delay_ms.max(1),
        ..base_plan(price)
    };
    let underpay = price >= 2 && r.next_u32() % 100 < f.underpay_pct;
    if !underpay {
        // Now and then the buyer pays a second time, separately (a second invoice paid by
        // mistake): the relay keeps the first and flags the order for a refund.
        let twice = r.next_u32() % 100 < SECOND_PAYMENT_PCT;
        let short = price >= 2 && r.next_u32() % 100 < SHORT_PAYMENT_PCT;
        // Now and then the processor reports the payment's amount so far before the final
        // report (same payment id, cumulative amounts).
        let progress = price >= 2 && r.next_u32() % 100 < PROGRESS_REPORT_PCT;
        let plan = WebhookPlan {
            progress_usdt: progress.then_some(price / 2),
            ..plan
        };
        if short {
            let plan = WebhookPlan {
                paid_usdt: price - 1,
                ..plan
            };
            let _ = payments.processor.pay(id, plan);
            return (
                false,
                format!("{order} paid {} of {price}, finished (short)", price - 1),
            );
        }
        let text = format!(
            "{order} paid {price} (dup {}, forged {}, delay {} ms){}{}",
            plan.duplicates,
            plan.forged,
            plan.delay_ms,
            if progress {
                format!(", reported at {} first", price / 2)
            } else {
                String::new()
            },
            if twice { ", then paid again" } else { "" }
        );
        if twice {
            let again = WebhookPlan {
                delay_ms: plan.delay_ms + 5_000 + r.next_u64() % 10_000,
                duplicates: 0,
                forged: 0,
                ..plan
            };
            let _ = payments.processor.pay(id.clone(), again);
        }
        let _ = payments.processor.pay(id, plan);
        return (true, text);
    }
    let part = price / 2;
    // The top-up goes out well after the underpayment's last copy, or now and then well
    // before its first (it overtakes it).
    let overtakes = r.next_u32().is_multiple_of(4);
    let after = plan.delay_ms
        + plan.duplicate_spacing_ms * u64::from(plan.duplicates)
        + 2_000
        + r.next_u64() % f.max_delay_ms.max(1);
    let (first_delay, after) = if overtakes {
        (after, plan.delay_ms)
    } else {
        (plan.delay_ms, after)
    };
    let first = WebhookPlan {
        payment_status: PaymentStatus::PartiallyPaid,
        paid_usdt: part,
        delay_ms: first_delay,
        ..plan
    };
    let top_up = WebhookPlan {
        paid_usdt: price - part,
        delay_ms: after,
        ..plan
    };
    let text = format!(
        "{order} underpaid {part} (dup {}, forged {}, delay {first_delay} ms) and topped up {} at +{after} ms",
        plan.duplicates,
        plan.forged,
        price - part
    );
    let _ = payments.processor.pay(id.clone(), first);
    let _ = payments.processor.pay(id, top_up);
    (true, text)
}

/// Retries a client call while its response is lost (transport errors); a relay status is
/// final. `retried!(read CALL)`: a read, also retried while the relay says to try again (503,
/// 429: a node that does not serve the shard now, a store that is down, a rate), up to
/// `READ_ATTEMPTS` times; reads change nothing, so a retry is always safe. (A macro: the
/// module handles the calls borrow are temporaries.)
macro_rules! retried {
    ($call:expr) => {
        retried!(@ $call, CALL_ATTEMPTS, false)
    };
    (read $call:expr) => {
        retried!(@ $call, READ_ATTEMPTS, true)
    };
    (@ $call:expr, $attempts:expr, $read:expr) => {{
        let mut last = ClientError::Stopped;
        let mut result = None;
        for _ in 0..$attempts {
            match $call.await {
                Ok(v) => {
                    result = Some(Ok(v));
                    break;
                }
                Err(e @ ClientError::Status(503 | 429, _)) if $read => last = e,
                Err(e @ (ClientError::Status(..) | ClientError::BadResponse(_))) => {
                    result = Some(Err(e));
                    break;
                }
                Err(e) => last = e,
            }
            sleep_ms(500).await;
        }
        result.unwrap_or(Err(last))
    }};
}

/// What an order's answer says of how to pay it: `payment_url` the processor's page of this
/// very order (`{base}/{order_id}`, the relay's configuration), `pay_to` a TRON address
/// (`T` and 33 base58 characters, PurchaseOrder and ChannelTradeOrder in SPEC.md). A wrong one
/// is an `order-records` finding.
fn check_payment_fields(
    ctx: &HostCtx,
    order_id: &str,
    payment_url: Option<&str>,
    pay_to: Option<&str>,
) {
    let mut wrong = Vec::new();
    if let Some(url) = payment_url {
        let want = format!("{}/{order_id}", crate::world::payment_page_base());
        if url != want {
            wrong.push(format!("payment_url {url:?} (expected {want:?})"));
        }
    }
    if let Some(to) = pay_to {
        const BASE58: &str = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz";
        let ok =
            to.len() == 34 && to.starts_with('T') && to[1..].chars().all(|c| BASE58.contains(c));
        if !ok {
            wrong.push(format!(
                "pay_to {to:?} (not a TRON address: T and 33 base58 characters)"
            ));
        }
    }
    if !wrong.is_empty() {
        order_finding(
            ctx,
            format!("order {order_id} was answered with {}", wrong.join(", ")),
        );
    }
}

/// Records an `order-records` finding: what the relay answered an order's buyer was wrong.
fn order_finding(ctx: &HostCtx, what: String) {
    ctx.world
        .borrow_mut()
        .findings
        .push(crate::violation::Violation::new(Oracle::OrderRecords, what));
}

/// An order just placed, before its payment.
fn new_order(ctx: &HostCtx, order_id: &OrderId, kind: OrderKind, target: String) -> OrderRec {
    OrderRec {
        order_id: order_id.to_string(),
        kind,
        client: ctx.me,
        target,
        price: 0,
        requested_ms: 0,
        paid: false,
        forged_only: false,
        settled: false,
    }
}

fn record_order(ctx: &HostCtx, mut rec: OrderRec, pay: Pay) {
    let known = ctx
        .world
        .borrow()
        .ledger
        .orders
        .iter()
        .any(|o| o.order_id == rec.order_id);
    if known {
        note(
            ctx,
            format!("c{} got its pending order {} again", ctx.me, rec.order_id),
        );
        return;
    }
    let (paid, forged_only, text) = pay_order(&ctx.payments, &rec.order_id, rec.price, pay);
    rec.paid = paid;
    rec.forged_only = forged_only;
    note(
        ctx,
        format!("c{} order {:?} {}: {text}", ctx.me, rec.kind, rec.target),
    );
    ctx.world.borrow_mut().ledger.orders.push(rec);
}

/// How often a buyer refused with `ALIAS_TAKEN` comes back to the alias, and how many
/// times: a user who wants that alias tries again, and a hold that expired meanwhile (a
/// clock jump) lets the retry in while the first buyer's payment may still be on its way.
const TAKEN_RETRY_MS: u64 = 5_000;
/// See [`TAKEN_RETRY_MS`].
const TAKEN_RETRIES: u32 = 12;

/// Purchases `alias` and pays for it; comes back while it is held by someone else.
pub(crate) async fn buy_alias(ctx: &HostCtx, client: &Client<Turmoil>, alias: &str, pay: Pay) {
    for attempt in 0..=TAKEN_RETRIES {
        let requested_ms = sim_ms();
        match retried!(client.vanity().purchase(alias)) {
            Ok(order) => {
                check_payment_fields(
                    ctx,
                    order.order_id.as_str(),
                    Some(&order.payment_url),
                    order.pay_to.as_deref(),
                );
                let rec = OrderRec {
                    price: order.price_usdt,
                    requested_ms,
                    ..new_order(ctx, &order.order_id, OrderKind::Vanity, alias.to_owned())
                };
                if attempt > 0 {
                    note(ctx, format!("c{} got {alias} at try {attempt}", ctx.me));
                }
                record_order(ctx, rec, pay);
                return;
            }
            Err(ClientError::Status(_, body))
                if body.contains("ALIAS_TAKEN") && attempt < TAKEN_RETRIES =>
            {
                sleep_ms(TAKEN_RETRY_MS).await;
            }
            // Every alias of the pool comes from the relay's catalogue.
            Err(ClientError::Status(status, body)) if body.contains("ALIAS_NOT_FOUND") => {
                order_finding(
                    ctx,
                    format!(
                        "a purchase of {alias}, an alias of the relay's catalogue, was answered {status} ALIAS_NOT_FOUND"
                    ),
                );
                return;
            }
            Err(e) => {
                note(ctx, format!("c{} purchase {alias} refused: {e}", ctx.me));
                return;
            }
        }
    }
}

/// Creates a channel and lists it.
pub(crate) async fn create_channel(ctx: &HostCtx, client: &Client<Turmoil>, price: u64) {
    let me = ctx.me;
    // Not retried: a create whose answer was lost may still have used a seat.
    let created = match client
        .channels()
        .create(&format!("ch of c{me}"), "", true)
        .await
    {
        Ok(c) => c,
        Err(e) => {
            note(ctx, format!("c{me} channel create refused: {e}"));
            return;
        }
    };
    let id = created.channel_id.to_string();
    *ctx.world.borrow_mut().ledger.created.entry(me).or_default() += 1;
    match retried!(client.channels().list_for_sale(&id, price)) {
        Ok(_) => {
            note(ctx, format!("c{me} listed {id} for {price}"));
            ctx.world
                .borrow_mut()
                .ledger
                .channels
                .push(ChannelRec { id, creator: me });
        }
        Err(e) => note(ctx, format!("c{me} listing {id} refused: {e}")),
    }
}

/// Buys a listed channel created by someone else.
pub(crate) async fn buy_channel(ctx: &HostCtx, client: &Client<Turmoil>, slot: usize, pay: Pay) {
    let me = ctx.me;
    let candidates: Vec<String> = ctx
        .world
        .borrow()
        .ledger
        .channels
        .iter()
        .filter(|c| c.creator != me)
        .map(|c| c.id.clone())
        .collect();
    if candidates.is_empty() {
        return;
    }
    let id = candidates[slot % candidates.len()].clone();
    let requested_ms = sim_ms();
    match retried!(client.channels().buy(&id)) {
        Ok(order) => {
            check_payment_fields(
                ctx,
                order.order_id.as_str(),
                order.payment_url.as_deref(),
                Some(&order.pay_to),
            );
            if slot.is_multiple_of(3) {
                buy_again(ctx, client, &id, order.order_id.as_str(), requested_ms).await;
            }
            let rec = OrderRec {
                price: order.price_usdt,
                requested_ms,
                ..new_order(ctx, &order.order_id, OrderKind::ChannelTrade, id)
            };
            record_order(ctx, rec, pay);
        }
        Err(e) => note(ctx, format!("c{me} buy {id} refused: {e}")),
    }
}

/// A buyer's double tap: channel `id` bought again while its order `first` (asked for at
/// simulated `asked_ms`) is pending must answer with that order (the channel is held for it),
/// never a second one. When the relay's clock passed the order's hold meanwhile (a clock
/// jump), the first order may be over, and a new one is right: the tap is not judged.
async fn buy_again(ctx: &HostCtx, client: &Client<Turmoil>, id: &str, first: &str, asked_ms: u64) {
    let answer = retried!(client.channels().buy(id));
    let held = ctx.world.borrow().relay_elapsed(asked_ms, sim_ms())
        < relay_core::limits::CHANNEL_ORDER_TTL_MS;
    match answer {
        Ok(again) if !held => note(
            ctx,
            format!(
                "c{} bought channel {id} again after the relay's clock passed its order's hold: got {} (not judged)",
                ctx.me, again.order_id
            ),
        ),
        Ok(again) if again.order_id.as_str() != first => {
            order_finding(
                ctx,
                format!(
                    "c{} bought channel {id} again while its order {first} was pending and got another order, {}",
                    ctx.me, again.order_id
                ),
            );
        }
        Ok(_) => {}
        Err(e) => note(ctx, format!("c{} buy {id} again refused: {e}", ctx.me)),
    }
}

/// Buys a channel seat.
pub(crate) async fn buy_quota(ctx: &HostCtx, client: &Client<Turmoil>, pay: Pay) {
    let requested_ms = sim_ms();
    // Not retried: every call is a new order.
    match client.channels().buy_quota().await {
        Ok(order) => {
            check_payment_fields(
                ctx,
                order.order_id.as_str(),
                order.payment_url.as_deref(),
                Some(&order.pay_to),
            );
            let rec = OrderRec {
                price: order.price_usdt,
                requested_ms,
                ..new_order(ctx, &order.order_id, OrderKind::ChannelQuota, String::new())
            };
            record_order(ctx, rec, pay);
        }
        Err(e) => note(ctx, format!("c{} quota buy refused: {e}", ctx.me)),
    }
}

/// Binds this client's confirmed vanity orders (polling V5), and records `channels/mine` at
/// audit time. Runs beside the traffic script for the host's whole life.
pub(crate) async fn bind_loop(ctx: &HostCtx, client: &Client<Turmoil>, audit_at_ms: u64) {
    let mut probed = false;
    loop {
        sleep_ms(1_000).await;
        if !probed && sim_ms() >= audit_at_ms {
            probed = true;
            probe_binds(ctx, client).await;
        }
        for order_id in paid_unsettled(ctx) {
            let Ok(status) = client.vanity().order_status(&order_id).await else {
                continue;
            };
            match status.status {
                OrderState::Pending => {}
                OrderState::Expired => settle(ctx, &order_id),
                OrderState::Confirmed => bind(ctx, client, &order_id).await,
            }
        }
        record_owned(ctx, client, audit_at_ms).await;
    }
}

/// This client's paid vanity orders the bind loop is not done with (none without binding).
fn paid_unsettled(ctx: &HostCtx) -> Vec<String> {
    ctx.world
        .borrow()
        .ledger
        .orders
        .iter()
        .filter(|o| {
            ctx.bind_vanity
                && o.client == ctx.me
                && o.kind == OrderKind::Vanity
                && o.paid
                && !o.settled
        })
        .map(|o| o.order_id.clone())
        .collect()
}

/// Binds a confirmed order: the alias becomes this client's (a refusal settles it too; a lost
/// answer, a refusal of an expired token, or a 503, is tried again on the next round).
async fn bind(ctx: &HostCtx, client: &Client<Turmoil>, order_id: &str) {
    let me = ctx.me;
    ctx.world
        .borrow_mut()
        .ledger
        .audit
        .bind_attempted
        .insert(order_id.to_owned());
    match client.vanity().bind(order_id).await {
        Ok(bound) => {
            let alias = bound.alias_id.to_string();
            let mut w = ctx.world.borrow_mut();
            let old = w.aliases.get(&me).cloned().unwrap_or_default();
            if old != alias {
                w.aliases.insert(me, alias.clone());
                w.alias_history.entry(me).or_default().push(alias.clone());
            }
            w.ledger.binds.push(BindRec {
                client: me,
                alias: alias.clone(),
                order_id: order_id.to_owned(),
            });
            drop(w);
            note(
                ctx,
                format!("c{me} bound {alias} (was {old}) by {order_id}"),
            );
            settle(ctx, order_id);
        }
        // A token that expired meanwhile says nothing of the order: tried again once the app
        // logged in anew (an earlier attempt whose answer was lost may have bound it).
        Err(ClientError::Status(401, _)) => {
            note(
                ctx,
                format!("c{me} bind {order_id} refused: 401 (tried again)"),
            );
        }
        // The store was unavailable (or the relay was not the leader): the refusal says
        // nothing of the order either, and an earlier attempt whose answer was lost may have
        // bound it; tried again on the next round.
        Err(ClientError::Status(503, _)) => {
            note(
                ctx,
                format!("c{me} bind {order_id} refused: 503 (tried again)"),
            );
        }
        Err(ClientError::Status(s, _)) => {
            note(ctx, format!("c{me} bind {order_id} refused: {s}"));
            settle(ctx, order_id);
        }
        Err(_) => {}
    }
}

/// At the audit (every order placed before the final clock jump has expired or been
/// confirmed): this client binds each of its vanity orders that V5 calls expired (the relay
/// must refuse: only a confirmed order binds, SPEC "Vanity alias binding"), and binds again
/// each order it bound whose alias it still has (a retry of a bind whose answer was lost is
/// answered 200).
async fn probe_binds(ctx: &HostCtx, client: &Client<Turmoil>) {
    let me = ctx.me;
    let (orders, bound): (Vec<String>, Vec<(String, String)>) = {
        let w = ctx.world.borrow();
        let orders = w
            .ledger
            .orders
            .iter()
            .filter(|o| o.client == me && o.kind == OrderKind::Vanity)
            .map(|o| o.order_id.clone())
            .collect();
        let current = w.aliases.get(&me).cloned();
        let bound = w
            .ledger
            .binds
            .iter()
            .filter(|b| b.client == me && Some(&b.alias) == current.as_ref())
            .map(|b| (b.order_id.clone(), b.alias.clone()))
            .collect();
        (orders, bound)
    };
    let mut probes = Vec::new();
    for order_id in orders {
        let Ok(status) = client.vanity().order_status(&order_id).await else {
            continue;
        };
        if status.status == OrderState::Expired {
            probes.push((order_id, "expired"));
        }
    }
    probes.extend(bound.into_iter().map(|(order, _)| (order, "bound")));
    for (order_id, what) in probes {
        let status = match client.vanity().bind(&order_id).await {
            Ok(_) => Some(200),
            Err(ClientError::Status(s, _)) => Some(s),
            Err(_) => None,
        };
        note(
            ctx,
            format!("c{me} binds its {what} order {order_id} again: {status:?}"),
        );
        ctx.world
            .borrow_mut()
            .ledger
            .audit
            .bind_probes
            .push(BindProbe {
                client: me,
                order_id,
                what,
                status,
            });
    }
}

/// Once audit time came, records the channels this client owns (`channels/mine`), once.
async fn record_owned(ctx: &HostCtx, client: &Client<Turmoil>, audit_at_ms: u64) {
    let me = ctx.me;
    let recorded = ctx.world.borrow().ledger.audit.owned.contains_key(&me);
    if !recorded
        && sim_ms() >= audit_at_ms
        && let Ok(mine) = client.channels().mine().await
    {
        let owned = mine
            .iter()
            .filter(|c| c.role == Some(ChannelRole::Owner))
            .map(|c| c.id.to_string())
            .collect();
        ctx.world.borrow_mut().ledger.audit.owned.insert(me, owned);
    }
}

fn settle(ctx: &HostCtx, order_id: &str) {
    if let Some(o) = ctx
        .world
        .borrow_mut()
        .ledger
        .orders
        .iter_mut()
        .find(|o| o.order_id == order_id)
    {
        o.settled = true;
    }
}

/// The auditor's script (its own account on its own host): waits for the audit time, reads
/// every order, alias and channel through the public API, then probes expired channel orders
/// by buying.
pub(crate) async fn audit(
    ctx: &HostCtx,
    client: &Client<Turmoil>,
    audit_at_ms: u64,
    probe_at_ms: u64,
) {
    sleep_ms(audit_at_ms.saturating_sub(sim_ms())).await;
    // Any input lets the relay fire the timers the final clock jump made due.
    drop(client.vanity().search("").await);
    sleep_ms(2_000).await;
    let (orders, channels, aliases) = audit_targets(ctx);
    read_public_state(ctx, client, orders, aliases, &channels).await;
    sleep_ms(probe_at_ms.saturating_sub(sim_ms())).await;
    probe_channels(ctx, client, &channels).await;
    ctx.world.borrow_mut().ledger.audit.done = true;
    note(ctx, "audit done".to_owned());
}

/// `(orders, channels, aliases)` the audit reads: every order and listed channel of the
/// ledger, and every alias of the pool or of a client.
fn audit_targets(ctx: &HostCtx) -> (Vec<String>, Vec<String>, BTreeSet<String>) {
    let w = ctx.world.borrow();
    let orders: Vec<String> = w.ledger.orders.iter().map(|o| o.order_id.clone()).collect();
    let channels: Vec<String> = w.ledger.channels.iter().map(|c| c.id.clone()).collect();
    let mut aliases: BTreeSet<String> = ctx.scenario.alias_pool.iter().cloned().collect();
    for history in w.alias_history.values() {
        aliases.extend(history.iter().cloned());
    }
    (orders, channels, aliases)
}

/// V5 of every order, vanity search for every alias, detail of every channel,
/// [`AUDIT_READS_IN_FLIGHT`] at a time.
async fn read_public_state(
    ctx: &HostCtx,
    client: &Client<Turmoil>,
    orders: Vec<String>,
    aliases: BTreeSet<String>,
    channels: &[String],
) {
    let states: Vec<(String, Option<OrderState>)> = stream::iter(orders)
        .map(|id| async move {
            let state = retried!(read client.vanity().order_status(&id))
                .ok()
                .map(|s| s.status);
            (id, state)
        })
        .buffer_unordered(AUDIT_READS_IN_FLIGHT)
        .collect()
        .await;
    let listed: Vec<(String, bool)> = stream::iter(aliases)
        .map(|alias| async move {
            let items = retried!(read client.vanity().search(&alias)).ok()?;
            let listed = items.iter().any(|i| i.alias_id.as_str() == alias);
            Some((alias, listed))
        })
        .buffer_unordered(AUDIT_READS_IN_FLIGHT)
        .filter_map(std::future::ready)
        .collect()
        .await;
    let for_sale: Vec<(String, bool)> = stream::iter(channels)
        .map(|id| async move {
            let detail = retried!(read client.channels().detail(id)).ok()?;
            Some((id.clone(), detail.for_sale == Some(true)))
        })
        .buffer_unordered(AUDIT_READS_IN_FLIGHT)
        .filter_map(std::future::ready)
        .collect()
        .await;
    let mut w = ctx.world.borrow_mut();
    let audit = &mut w.ledger.audit;
    audit.states.extend(states);
    audit.searchable.extend(listed);
    audit.for_sale.extend(for_sale);
}

/// Tries to buy every channel still for sale whose trade orders were never confirmed: the
/// relay must hand out a new order (every hold expired).
async fn probe_channels(ctx: &HostCtx, client: &Client<Turmoil>, channels: &[String]) {
    for id in channels {
        let probe = {
            let w = ctx.world.borrow();
            let a = &w.ledger.audit;
            let confirmed = w.ledger.orders.iter().any(|o| {
                o.target == *id && a.states.get(&o.order_id) == Some(&Some(OrderState::Confirmed))
            });
            a.for_sale.get(id) == Some(&true) && !confirmed
        };
        if probe {
            let answer = match retried!(client.channels().buy(id)) {
                Ok(order) => Ok(order.order_id.to_string()),
                Err(e) => Err(e.to_string()),
            };
            ctx.world
                .borrow_mut()
                .ledger
                .audit
                .probes
                .insert(id.clone(), answer);
        }
    }
}

/// Orders with a genuine webhook copy not yet answered for good (2xx/401) nor given up.
pub(crate) fn in_flight_orders(processor: &PaymentProcessor) -> BTreeSet<String> {
    let deliveries = processor.deliveries();
    let mut out = BTreeSet::new();
    for p in processor.payments() {
        let copies = i64::from(p.plan.duplicates) + i64::from(p.plan.progress_usdt.is_some());
        for copy in 0..=copies {
            let done = deliveries.iter().any(|d| {
                d.payment_id == p.payment_id
                    && d.copy == copy
                    && !d.forged
                    && (d
                        .status
                        .is_some_and(|s| (200..300).contains(&s) || s == 401)
                        || d.attempt >= p.plan.max_attempts.max(1))
            });
            if !done {
                out.insert(p.order_id.to_string());
            }
        }
    }
    out
}
