//! Payment orders and the signed webhook: forgery, duplicates, underpayment, late payment,
//! expiry, redelivery of `payment_confirmed` on sync, restart; plus a model-based proptest of
//! purchases, trades and webhooks. Also the shared helpers of `channels.rs` and `vanity.rs`.

use std::collections::{BTreeMap, BTreeSet};
use wire::http::paths;

use proptest::prelude::*;
use relay_core::config::WebhookSecret;
use relay_core::store::SqliteStore;
use relay_core::{Config, ConnId, HttpRequest, HttpResponse, Method, Output};
use serde_json::{Value, json};
use wire::ServerFrame;

use crate::world::{User, World, fast_config};

pub(crate) const SECRET: &[u8] = b"test-webhook-secret";
pub(crate) const HOLD_MS: u64 = 15 * 60_000;
pub(crate) const TRADE_TTL_MS: u64 = 30 * 60_000;

pub(crate) fn commerce_config() -> Config {
    Config {
        payment_webhook_secret: WebhookSecret(SECRET.to_vec()),
        free_channel_quota: 2,
        // The model's audit looks every alias up, again and again, from one account.
        lookups: relay_core::limits::Budget {
            burst: 1_000_000,
            ..relay_core::limits::USER_LOOKUPS
        },
        lookups_per_network: relay_core::limits::Budget {
            burst: 1_000_000,
            ..relay_core::limits::USER_LOOKUPS_PER_NETWORK
        },
        ..fast_config()
    }
}

pub(crate) fn cw() -> World {
    World::with_config(commerce_config())
}

pub(crate) fn req(
    w: &mut World,
    method: Method,
    path: &str,
    body: Option<Value>,
    token: Option<&str>,
) -> HttpResponse {
    let mut r = HttpRequest::new(method, path);
    if let Some(b) = body {
        r = r.json(&b);
    }
    if let Some(t) = token {
        r = r.bearer(t);
    }
    w.http(r)
}

pub(crate) fn webhook_raw(w: &mut World, body: &[u8], sig: Option<&str>) -> HttpResponse {
    let mut r = HttpRequest::new(Method::Post, paths::PAYMENT_WEBHOOK).body(body.to_vec());
    if let Some(s) = sig {
        r = r.header("X-Payment-Signature", s);
    }
    let resp = w.http(r);
    w.drain();
    resp
}

pub(crate) fn webhook(
    w: &mut World,
    order: &str,
    payment: &str,
    status: &str,
    paid: u64,
) -> HttpResponse {
    let body = json!({"payment_id": payment, "order_id": order, "payment_status": status, "paid_usdt": paid})
        .to_string();
    let sig = relay_core::payments::sign_webhook(SECRET, body.as_bytes());
    let mut r = HttpRequest::new(Method::Post, paths::PAYMENT_WEBHOOK).body(body);
    r = r.header("x-payment-signature", sig);
    w.http(r)
}

/// Pays `order` in full with a fresh payment id.
pub(crate) fn pay(w: &mut World, order: &str, price: u64) -> Vec<Output> {
    let r = webhook(w, order, &format!("pay-{order}"), "finished", price);
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    w.drain()
}

pub(crate) fn status_of(w: &mut World, order: &str) -> Value {
    let r = w.get(&paths::with(paths::ORDER_STATUS, order), None);
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    r.body_json()
}

/// `payment_confirmed` frames (order id, ref id) sent to `conn`.
pub(crate) fn confirms(outs: &[Output], conn: ConnId) -> Vec<(String, String)> {
    crate::world::frames(outs, conn)
        .into_iter()
        .filter_map(|f| match f {
            ServerFrame::PaymentConfirmed(p) => Some((p.order_id.to_string(), p.ref_id)),
            _ => None,
        })
        .collect()
}

/// Every `payment_confirmed` in `outs`, to anyone.
pub(crate) fn all_confirms(outs: &[Output]) -> Vec<String> {
    outs.iter()
        .filter_map(|o| match o {
            Output::Send {
                frame: ServerFrame::PaymentConfirmed(p),
                ..
            } => Some(p.order_id.to_string()),
            _ => None,
        })
        .collect()
}

pub(crate) fn purchase(w: &mut World, u: &User, alias: &str) -> HttpResponse {
    w.post(
        paths::VANITY_PURCHASE,
        json!({ "alias_id": alias }),
        Some(&u.token),
    )
}

fn order_id(r: &HttpResponse) -> String {
    r.body_json()["order_id"].as_str().unwrap().to_owned()
}

fn price_of(r: &HttpResponse) -> u64 {
    r.body_json()["price_usdt"].as_u64().unwrap()
}

#[test]
fn forged_or_missing_signatures_are_refused_before_parsing() {
    let mut w = cw();
    let a = w.user("a");
    let r = purchase(&mut w, &a, "88888888");
    assert_eq!(r.status, 201);
    let o = order_id(&r);
    let body =
        json!({"payment_id":"p1","order_id":o,"payment_status":"finished","paid_usdt":1_000_000})
            .to_string();
    let good = relay_core::payments::sign_webhook(SECRET, body.as_bytes());
    let other = relay_core::payments::sign_webhook(b"other-secret", body.as_bytes());
    for sig in [None, Some("nothex"), Some(""), Some(other.as_str())] {
        let r = webhook_raw(&mut w, body.as_bytes(), sig);
        assert_eq!(r.status, 401);
        assert_eq!(r.error_code().as_deref(), Some("WEBHOOK_SIGNATURE_INVALID"));
    }
    // Signature of another body; and garbage that is not even JSON is still 401, not 400.
    let r = webhook_raw(&mut w, b"{not json", Some(&good));
    assert_eq!(r.status, 401);
    assert_eq!(status_of(&mut w, &o)["status"], "pending");
    // The secret never appears in a response or in Debug output.
    assert!(!format!("{:?}", w.relay.config()).contains("test-webhook-secret"));
    // A correctly signed but malformed body is 400.
    let bad = b"{\"payment_id\":1}";
    let sig = relay_core::payments::sign_webhook(SECRET, bad);
    assert_eq!(webhook_raw(&mut w, bad, Some(&sig)).status, 400);
    // Unknown order: 404.
    assert_eq!(webhook(&mut w, "o-nope", "p9", "finished", 5).status, 404);
    // With no secret configured every webhook is refused.
    let mut w2 = World::with_config(fast_config());
    let sig = relay_core::payments::sign_webhook(b"", body.as_bytes());
    assert_eq!(
        webhook_raw(&mut w2, body.as_bytes(), Some(&sig)).status,
        401
    );
}

#[test]
fn duplicates_and_replays_apply_once() {
    let mut w = cw();
    let mut a = w.user("a");
    let ca = w.connect(&mut a);
    w.sync(ca);
    let r = purchase(&mut w, &a, "88888888");
    let (o, price) = (order_id(&r), price_of(&r));
    let mut outs = Vec::new();
    for _ in 0..3 {
        let r = webhook(&mut w, &o, "p1", "finished", price);
        assert_eq!(r.status, 200);
        outs.extend(w.drain());
    }
    // A later PartiallyPaid replay of the same payment changes nothing either.
    assert_eq!(webhook(&mut w, &o, "p1", "partially_paid", 1).status, 200);
    outs.extend(w.drain());
    assert_eq!(
        confirms(&outs, ca),
        vec![(o.clone(), "88888888".to_owned())]
    );
    assert_eq!(status_of(&mut w, &o)["status"], "confirmed");
    // A payment id reported for another order is refused.
    let r2 = purchase(&mut w, &a, "66668888");
    assert_eq!(
        webhook(&mut w, &order_id(&r2), "p1", "finished", 1000).status,
        400
    );
    // Resync: re-sent once per sync (no ack for the live frame; clients dedup by order id).
    assert_eq!(
        confirms(&w.sync(ca), ca),
        vec![(o.clone(), "88888888".to_owned())]
    );
}

#[test]
fn underpayment_and_failure_stay_pending_until_paid_in_full() {
    let mut w = cw();
    let a = w.user("a");
    let r = purchase(&mut w, &a, "66668888");
    let (o, price) = (order_id(&r), price_of(&r));
    assert!(price > 10);
    assert_eq!(webhook(&mut w, &o, "p1", "partially_paid", 5).status, 200);
    assert_eq!(status_of(&mut w, &o)["status"], "pending");
    assert_eq!(webhook(&mut w, &o, "p2", "failed", 0).status, 200);
    assert_eq!(status_of(&mut w, &o)["status"], "pending");
    // "finished" but short: still pending.
    assert_eq!(webhook(&mut w, &o, "p1", "finished", 10).status, 200);
    assert_eq!(status_of(&mut w, &o)["status"], "pending");
    // A second payment covers the rest.
    assert_eq!(
        webhook(&mut w, &o, "p3", "finished", price - 10).status,
        200
    );
    assert_eq!(status_of(&mut w, &o)["status"], "confirmed");
}

#[test]
fn expiry_releases_holds_and_late_payments_have_a_documented_outcome() {
    let mut w = cw();
    let a = w.user("a");
    let b = w.user("b");
    let r = purchase(&mut w, &a, "88888888");
    let (o1, price) = (order_id(&r), price_of(&r));
    assert_eq!(purchase(&mut w, &b, "88888888").status, 409);
    w.advance(HOLD_MS - 1);
    assert_eq!(status_of(&mut w, &o1)["status"], "pending");
    w.advance(1);
    assert_eq!(status_of(&mut w, &o1)["status"], "expired");
    // Late payment while the alias is still free: honoured.
    assert_eq!(webhook(&mut w, &o1, "late", "finished", price).status, 200);
    assert_eq!(status_of(&mut w, &o1)["status"], "confirmed");
    assert_eq!(purchase(&mut w, &b, "88888888").status, 409);

    // Late payment after someone else took the alias: stays expired, 200 (refund flagged).
    let r = purchase(&mut w, &a, "66668888");
    let (o2, price2) = (order_id(&r), price_of(&r));
    w.advance(HOLD_MS);
    assert_eq!(status_of(&mut w, &o2)["status"], "expired");
    let rb = purchase(&mut w, &b, "66668888");
    assert_eq!(rb.status, 201);
    assert_eq!(
        webhook(&mut w, &o2, "late2", "finished", price2).status,
        200
    );
    assert_eq!(status_of(&mut w, &o2)["status"], "expired");
    assert_eq!(status_of(&mut w, &order_id(&rb))["status"], "pending");
    // A payment arriving after the deadline but before the timer fired counts as late too.
    let r = purchase(&mut w, &a, "12345678");
    let o3 = order_id(&r);
    w.now = w.now.plus_ms(HOLD_MS + 5);
    assert_eq!(
        webhook(&mut w, &o3, "late3", "finished", price_of(&r)).status,
        200
    );
    assert_eq!(status_of(&mut w, &o3)["status"], "confirmed");
}

#[test]
fn offline_buyer_gets_payment_confirmed_on_every_sync_until_the_ttl_even_after_restart() {
    let mut w = cw();
    let mut a = w.user("a");
    let r = purchase(&mut w, &a, "88888888");
    let (o, price) = (order_id(&r), price_of(&r));
    let outs = pay(&mut w, &o, price);
    assert!(all_confirms(&outs).is_empty());
    w.restart(Box::new(w.mem.clone()));
    let ca = w.connect(&mut a);
    let want = vec![(o.clone(), "88888888".to_owned())];
    assert_eq!(confirms(&w.sync(ca), ca), want);
    // Not acknowledged: every later sync re-sends it, across a restart too.
    assert_eq!(confirms(&w.sync(ca), ca), want);
    w.restart(Box::new(w.mem.clone()));
    let ca = w.connect(&mut a);
    assert_eq!(confirms(&w.sync(ca), ca), want);
}

#[test]
fn order_status_covers_every_kind() {
    let mut w = cw();
    let a = w.user("a");
    let r = purchase(&mut w, &a, "88888888");
    let v = status_of(&mut w, &order_id(&r));
    assert_eq!(v["kind"], "vanity");
    assert_eq!(v["alias_id"], "88888888");
    assert_eq!(v["ref_id"], "88888888");
    let q = w.post(paths::CHANNEL_QUOTA_BUY, json!({}), Some(&a.token));
    assert_eq!(q.status, 201);
    let qo = order_id(&q);
    let v = status_of(&mut w, &qo);
    assert_eq!(
        (
            v["kind"].as_str(),
            v["alias_id"].as_str(),
            v["ref_id"].as_str()
        ),
        (Some("channel_quota"), Some(""), Some(qo.as_str()))
    );
    assert_eq!(
        w.get("/api/v1/vanity/order/o-unknown/status", None).status,
        404
    );
    assert_eq!(w.get("/api/v1/vanity/order/%%%/status", None).status, 404);
}

#[test]
fn sqlite_restart_keeps_orders_holds_payments_and_bindings() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("relay.db");
    let mut w = cw();
    w.restart(Box::new(SqliteStore::open(&path).unwrap()));
    let mut a = w.user("a");
    let mut b = w.user("b");
    let held = purchase(&mut w, &a, "66668888");
    let paid = purchase(&mut w, &a, "88888888");
    let (po, pp) = (order_id(&paid), price_of(&paid));
    pay(&mut w, &po, pp);
    w.restart(Box::new(SqliteStore::open(&path).unwrap()));
    // Tokens survive (persisted signing key); the hold and the payment too.
    assert_eq!(purchase(&mut w, &b, "66668888").status, 409);
    assert_eq!(
        purchase(&mut w, &a, "66668888").body_json()["order_id"],
        order_id(&held).as_str()
    );
    assert_eq!(status_of(&mut w, &po)["status"], "confirmed");
    // Replay after restart: no second effect.
    assert_eq!(
        webhook(&mut w, &po, &format!("pay-{po}"), "finished", pp).status,
        200
    );
    let r = w.post(paths::VANITY_BIND, json!({"order_id": po}), Some(&a.token));
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    w.restart(Box::new(SqliteStore::open(&path).unwrap()));
    let r = w.get("/api/v1/users/88888888", Some(&b.token));
    assert_eq!(r.status, 200);
    let ca = w.connect(&mut a);
    let outs = w.sync(ca);
    assert_eq!(confirms(&outs, ca).len(), 1);
    // The hold expires after the restart too (timers rebuilt from the store).
    w.advance(HOLD_MS);
    assert_eq!(status_of(&mut w, &order_id(&held))["status"], "expired");
    let cb = w.connect(&mut b);
    w.sync(cb);
    assert_eq!(purchase(&mut w, &b, "66668888").status, 201);
}

// ------------------------------------------------------------------ model-based proptest

#[derive(Debug, Clone)]
enum Op {
    Purchase { who: usize, alias: usize },
    Pay { order: usize, part: bool, dup: bool },
    Bind { who: usize, order: usize },
    List { price: u64 },
    Buy { who: usize },
    Connect { who: usize },
    Disconnect { who: usize },
    Advance { ms: u64 },
    Restart,
}

/// Simulator seed 80: the underpayment (`partially_paid`) and its `finished` top-up are two
/// payments retried across a partition; the top-up lands first (short), then the
/// underpayment completes the total. Before the deadline, and late after a clock jump with
/// the expiry timer not yet fired, the order is paid in full either way.
#[test]
fn a_top_up_that_overtakes_its_underpayment_still_pays_the_order() {
    let mut w = cw();
    let a = w.user("a");
    let r = purchase(&mut w, &a, "66668888");
    let (o1, price) = (order_id(&r), price_of(&r));
    let part = price / 2;
    assert_eq!(
        webhook(&mut w, &o1, "top-up", "finished", price - part).status,
        200
    );
    assert_eq!(status_of(&mut w, &o1)["status"], "pending");
    assert_eq!(
        webhook(&mut w, &o1, "under", "partially_paid", part).status,
        200
    );
    assert_eq!(status_of(&mut w, &o1)["status"], "confirmed");

    // Late: the relay's clock jumps past the deadline before either copy arrives.
    let r = purchase(&mut w, &a, "12345678");
    let (o2, price) = (order_id(&r), price_of(&r));
    let part = price / 2;
    w.now = w.now.plus_ms(HOLD_MS + 31 * 60_000);
    assert_eq!(
        webhook(&mut w, &o2, "top-up2", "finished", price - part).status,
        200
    );
    assert_eq!(status_of(&mut w, &o2)["status"], "expired");
    assert_eq!(
        webhook(&mut w, &o2, "under2", "partially_paid", part).status,
        200
    );
    assert_eq!(status_of(&mut w, &o2)["status"], "confirmed");
    w.drain();
}

const ALIASES: [&str; 3] = ["88888888", "66668888", "12345678"];

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..3usize, 0..3usize).prop_map(|(who, alias)| Op::Purchase { who, alias }),
        4 => (0..8usize, any::<bool>(), any::<bool>()).prop_map(|(order, part, dup)| Op::Pay { order, part, dup }),
        2 => (0..3usize, 0..8usize).prop_map(|(who, order)| Op::Bind { who, order }),
        1 => (1..50u64).prop_map(|price| Op::List { price }),
        2 => (0..3usize).prop_map(|who| Op::Buy { who }),
        1 => (0..3usize).prop_map(|who| Op::Connect { who }),
        1 => (0..3usize).prop_map(|who| Op::Disconnect { who }),
        2 => prop_oneof![Just(60_000u64), Just(HOLD_MS), Just(TRADE_TTL_MS)].prop_map(|ms| Op::Advance { ms }),
        1 => Just(Op::Restart),
    ]
}

fn run(ops: Vec<Op>) {
    let mut w = cw();
    let mut users: Vec<User> = vec![w.user("a"), w.user("b"), w.user("c")];
    let created = w.post(
        paths::CHANNELS,
        json!({"name":"chan","description":"d"}),
        Some(&users[0].token),
    );
    let channel = created.body_json()["channel_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut online: [Option<ConnId>; 3] = [None, None, None];
    // order id -> (price, buyer index)
    let mut orders: Vec<(String, u64, usize)> = Vec::new();
    let mut confirmed_frames: BTreeMap<String, usize> = BTreeMap::new();
    let mut paid_full: BTreeSet<String> = BTreeSet::new();
    let mut owner = 0usize;
    let mut last_status: BTreeMap<String, String> = BTreeMap::new();
    let mut live_frames: BTreeMap<String, usize> = BTreeMap::new();
    for op in ops {
        let is_sync = matches!(op, Op::Connect { .. });
        match op {
            Op::Purchase { who, alias } => {
                let r = purchase(&mut w, &users[who], ALIASES[alias]);
                if r.status == 201 {
                    orders.push((order_id(&r), price_of(&r), who));
                } else if r.status == 200 {
                    assert!(
                        orders
                            .iter()
                            .any(|(o, _, b)| *o == order_id(&r) && *b == who)
                    );
                } else if r.status == 429 {
                    // The hold caps and the re-hold cooldown (see the vanity tests).
                    assert_eq!(r.error_code().as_deref(), Some("RATE_LIMITED"));
                } else {
                    assert_eq!(r.status, 409, "{:?}", r.body_json());
                }
            }
            Op::Pay { order, part, dup } => {
                let Some((o, price, _)) = orders.get(order).cloned() else {
                    continue;
                };
                let (status, paid) = if part {
                    ("partially_paid", price / 2)
                } else {
                    ("finished", price)
                };
                let pid = format!("p-{o}-{part}");
                for _ in 0..(1 + usize::from(dup)) {
                    assert_eq!(webhook(&mut w, &o, &pid, status, paid).status, 200);
                }
                if !part {
                    paid_full.insert(o);
                }
            }
            Op::Bind { who, order } => {
                let Some((o, _, _)) = orders.get(order).cloned() else {
                    continue;
                };
                let r = w.post(
                    paths::VANITY_BIND,
                    json!({"order_id": o}),
                    Some(&users[who].token),
                );
                if r.status == 200 {
                    users[who].alias = r.body_json()["alias_id"].as_str().unwrap().to_owned();
                } else {
                    assert!([404, 409].contains(&r.status), "{:?}", r.body_json());
                }
            }
            Op::List { price } => {
                // Everyone tries; only the owner may list (or nobody while a trade is pending).
                let tokens: Vec<String> = users.iter().map(|u| u.token.clone()).collect();
                for (i, t) in tokens.iter().enumerate() {
                    let r = w.post(
                        paths::LIST_CHANNEL,
                        json!({"channel_id": channel, "price_usdt": price}),
                        Some(t),
                    );
                    if i == owner {
                        assert!([200, 409].contains(&r.status), "{:?}", r.body_json());
                    } else {
                        assert_eq!(r.status, 403);
                    }
                }
            }
            Op::Buy { who } => {
                let r = w.post(
                    &paths::with(paths::CHANNEL_BUY, &channel),
                    json!({}),
                    Some(&users[who].token),
                );
                if r.status == 201 {
                    orders.push((order_id(&r), price_of(&r), who));
                } else {
                    assert!([200, 400, 409].contains(&r.status), "{:?}", r.body_json());
                }
            }
            Op::Connect { who } => {
                let mut u = users[who].clone();
                let c = w.connect(&mut u);
                users[who] = u;
                online[who] = Some(c);
                w.sync(c);
            }
            Op::Disconnect { who } => {
                if let Some(c) = online[who].take() {
                    w.relay.handle_disconnect(w.now, c);
                }
            }
            Op::Advance { ms } => {
                w.now = w.now.plus_ms(ms);
                w.relay.handle_timeout(w.now);
                w.drain();
                for o in &mut online {
                    if o.is_some_and(|c| !w.relay.is_connected(c)) {
                        *o = None;
                    }
                }
            }
            Op::Restart => {
                w.restart(Box::new(w.mem.clone()));
                online = [None, None, None];
            }
        }
        w.drain();
        // ---- invariants after every step
        let mut step_frames: BTreeMap<String, usize> = BTreeMap::new();
        for id in all_confirms(&std::mem::take(&mut w.log)) {
            *step_frames.entry(id).or_default() += 1;
        }
        for (id, n) in step_frames {
            // At most one per order per sync, and at most one live frame per order ever (a
            // replayed webhook sends none).
            assert!(n <= 1, "order {id}: {n} frames in one step");
            *confirmed_frames.entry(id.clone()).or_default() += n;
            if !is_sync {
                let live = live_frames.entry(id.clone()).or_default();
                *live += n;
                assert!(*live <= 1, "order {id}: {live} live frames");
            }
        }
        for (o, _, buyer) in &orders {
            let v = status_of(&mut w, o);
            let st = v["status"].as_str().unwrap().to_owned();
            // Every payment_confirmed is for a confirmed order (live at most once, re-sent on
            // syncs: clients dedup by order id).
            let n = confirmed_frames.get(o).copied().unwrap_or(0);
            if n >= 1 {
                assert_eq!(st, "confirmed");
            }
            // A confirmed order was paid in full; a kept frame reaches the buyer on connect.
            if st == "confirmed" {
                assert!(paid_full.contains(o));
                if n == 0 {
                    assert!(online[*buyer].is_none(), "online buyer missed its frame");
                }
            }
            // Ownership moves exactly when a trade order becomes confirmed.
            let was = last_status.insert(o.clone(), st.clone());
            if v["kind"] == "channel_trade"
                && st == "confirmed"
                && was.as_deref() != Some("confirmed")
            {
                owner = *buyer;
            }
        }
        // Each sold alias resolves to exactly the account that bound it.
        for alias in ALIASES {
            let r = w.get(
                &paths::with(paths::USER, alias),
                Some(&users[0].token.clone()),
            );
            let holders = users.iter().filter(|u| u.alias == alias).count();
            assert_eq!(
                usize::from(r.status == 200),
                holders,
                "{alias} {} {:?}",
                r.status,
                r.body_json()
            );
        }
        // No alias bound twice: each alias resolves to at most one user, and that user has it.
        let holders: Vec<&User> = users.iter().collect();
        let mut seen = BTreeSet::new();
        for u in &holders {
            assert!(
                seen.insert(u.alias.clone()),
                "alias {} bound twice",
                u.alias
            );
        }
        // No channel owned twice: exactly one user sees role owner.
        let owners = (0..3)
            .filter(|i| {
                let t = users[*i].token.clone();
                w.get(&paths::with(paths::CHANNEL, &channel), Some(&t))
                    .body_json()["role"]
                    == "owner"
            })
            .count();
        assert_eq!(owners, 1);
        let t = users[owner].token.clone();
        assert_eq!(
            w.get(&paths::with(paths::CHANNEL, &channel), Some(&t))
                .body_json()["role"],
            "owner"
        );
    }
    // Expired holds released: after every order's deadline, every unconfirmed order is expired
    // and every alias not bound or confirmed is purchasable again.
    w.advance(TRADE_TTL_MS);
    for (o, _, _) in &orders {
        let st = status_of(&mut w, o)["status"].as_str().unwrap().to_owned();
        assert!(st == "confirmed" || st == "expired", "{o} still {st}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn commerce_matches_invariants(ops in proptest::collection::vec(op(), 1..40)) {
        run(ops);
    }
}
