//! Money that cannot buy anything: every webhook arm that applies a payment without
//! delivering (late after what it bought went to someone else, a second payment of a
//! confirmed order) is counted in `RelayStats::webhooks.refund_needed` (the
//! `relay_payment_refunds_needed_total` metric an operator alerts on), and every arm that
//! delivers is not. Each test flips on exactly one condition of `payments.rs` /
//! `orders.rs` (`still_available`, the arms of the webhook match, the channel version a
//! confirmed trade bumps).

use serde_json::json;
use wire::http::paths;

use crate::channels::{create, detail, list};
use crate::orders::{HOLD_MS, TRADE_TTL_MS, cw, purchase, status_of, webhook};
use crate::world::World;

fn refunds(w: &World) -> u64 {
    w.relay.stats().webhooks.refund_needed
}

pub(crate) fn order_of(r: &relay_core::HttpResponse) -> (String, u64) {
    let v = r.body_json();
    (
        v["order_id"].as_str().expect("order id").to_owned(),
        v["price_usdt"].as_u64().expect("price"),
    )
}

#[test]
fn a_late_vanity_payment_is_honoured_while_the_alias_is_free_and_refunded_once_it_is_not() {
    let mut w = cw();
    let a = w.user("a");
    let b = w.user("b");
    // Late, the alias still free: honoured, no refund.
    let (o1, p1) = order_of(&purchase(&mut w, &a, "88888888"));
    w.advance(HOLD_MS);
    assert_eq!(status_of(&mut w, &o1)["status"], "expired");
    assert_eq!(webhook(&mut w, &o1, "late-1", "finished", p1).status, 200);
    assert_eq!(status_of(&mut w, &o1)["status"], "confirmed");
    assert_eq!(refunds(&w), 0);
    // Late, the alias held by another buyer meanwhile: not honoured, one refund.
    let (o2, p2) = order_of(&purchase(&mut w, &a, "66668888"));
    w.advance(HOLD_MS);
    assert_eq!(purchase(&mut w, &b, "66668888").status, 201);
    assert_eq!(webhook(&mut w, &o2, "late-2", "finished", p2).status, 200);
    assert_eq!(status_of(&mut w, &o2)["status"], "expired");
    assert_eq!(refunds(&w), 1);
    // A late partial payment applies nothing and owes nothing yet.
    let (o3, p3) = order_of(&purchase(&mut w, &a, "12345678"));
    w.advance(HOLD_MS);
    assert_eq!(
        webhook(&mut w, &o3, "late-3", "partially_paid", p3 / 2).status,
        200
    );
    assert_eq!(status_of(&mut w, &o3)["status"], "expired");
    assert_eq!(refunds(&w), 1);
}

#[test]
fn a_second_payment_of_a_confirmed_order_is_refunded_but_a_replay_or_a_partial_is_not() {
    let mut w = cw();
    let a = w.user("a");
    let (o, price) = order_of(&purchase(&mut w, &a, "12345678"));
    assert_eq!(webhook(&mut w, &o, "first", "finished", price).status, 200);
    assert_eq!(status_of(&mut w, &o)["status"], "confirmed");
    // The processor's retry of the same report: a duplicate.
    assert_eq!(webhook(&mut w, &o, "first", "finished", price).status, 200);
    assert_eq!(refunds(&w), 0);
    assert_eq!(w.relay.stats().webhooks.duplicate, 1);
    // A separate payment that does not finish: recorded, nothing owed yet.
    assert_eq!(
        webhook(&mut w, &o, "second", "partially_paid", 1).status,
        200
    );
    assert_eq!(refunds(&w), 0);
    // It finishes: the order was already paid, so this one is refunded.
    assert_eq!(webhook(&mut w, &o, "second", "finished", price).status, 200);
    assert_eq!(refunds(&w), 1);
    assert_eq!(status_of(&mut w, &o)["status"], "confirmed");
}

#[test]
fn a_late_trade_payment_buys_the_channel_only_at_the_version_it_was_ordered_at() {
    let mut w = cw();
    let a = w.user("a");
    let b = w.user("b");
    let ch = create(&mut w, &a, "shop", true);
    assert_eq!(list(&mut w, &a, &ch, json!(40)).status, 200);
    let buy = paths::with(paths::CHANNEL_BUY, &ch);
    let (o1, p1) = order_of(&w.post(&buy, json!({}), Some(&b.token)));
    w.advance(TRADE_TTL_MS);
    assert_eq!(status_of(&mut w, &o1)["status"], "expired");
    // The owner changes the price after the order expired: the late payment buys nothing.
    assert_eq!(list(&mut w, &a, &ch, json!(50)).status, 200);
    assert_eq!(webhook(&mut w, &o1, "late-1", "finished", p1).status, 200);
    assert_eq!(status_of(&mut w, &o1)["status"], "expired");
    assert_eq!(detail(&mut w, &a, &ch)["role"], "owner");
    assert_eq!(refunds(&w), 1);
    // Ordered at the current version, paid late with the listing unchanged: honoured, and
    // the transfer bumps the version so the old owner's stale listing loses.
    let (o2, p2) = order_of(&w.post(&buy, json!({}), Some(&b.token)));
    let version = detail(&mut w, &b, &ch)["version"]
        .as_u64()
        .expect("the channel's listing version");
    w.advance(TRADE_TTL_MS);
    assert_eq!(webhook(&mut w, &o2, "late-2", "finished", p2).status, 200);
    assert_eq!(status_of(&mut w, &o2)["status"], "confirmed");
    assert_eq!(detail(&mut w, &b, &ch)["role"], "owner");
    assert_eq!(refunds(&w), 1);
    let r = w.post(
        paths::LIST_CHANNEL,
        json!({"channel_id": ch, "price_usdt": 60, "expected_version": version}),
        Some(&b.token),
    );
    assert_eq!(
        r.status,
        409,
        "the transfer must bump the version: {:?}",
        r.body_json()
    );
    let after = detail(&mut w, &b, &ch)["version"]
        .as_u64()
        .expect("the channel's listing version");
    assert!(
        after > version,
        "the version only moves forward: {version} then {after}"
    );
}
