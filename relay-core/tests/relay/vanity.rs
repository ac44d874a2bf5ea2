//! Vanity aliases: search, purchase and hold, reserve, bind, retired aliases, restart.

use relay_core::HttpRequest;
use relay_core::store::Store as _;
use serde_json::json;
use wire::ServerFrame;
use wire::http::paths;

use crate::orders::{HOLD_MS, confirms, cw, pay, purchase, status_of};
use crate::world::{frames, msgs};

#[test]
fn search_featured_by_price_and_prefix() {
    let mut w = cw();
    let r = w.get(paths::VANITY_SEARCH, None);
    assert_eq!(r.status, 200);
    let items = r.body_json();
    let items = items.as_array().unwrap();
    assert!(!items.is_empty() && items.len() <= 50);
    assert!(
        items
            .iter()
            .all(|i| i["is_featured"] == true && i["tier"] == "top")
    );
    let keys: Vec<(u64, String)> = items
        .iter()
        .map(|i| {
            (
                i["price_usdt"].as_u64().unwrap(),
                i["alias_id"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted);
    assert_eq!(w.get("/api/v1/vanity/search?q=", None).body, r.body);
    let p = w.get("/api/v1/vanity/search?q=8888", None).body_json();
    let p = p.as_array().unwrap();
    assert!(!p.is_empty());
    assert!(
        p.iter()
            .all(|i| i["alias_id"].as_str().unwrap().starts_with("8888"))
    );
    assert!(p.iter().any(|i| i["alias_id"] == "88888888"));
    let all = w.get("/api/v1/vanity/search?q=1", None).body_json();
    assert!(all.as_array().unwrap().len() <= 50);
    assert!(
        w.get("/api/v1/vanity/search?q=ZZZ", None)
            .body_json()
            .as_array()
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        w.get(&format!("/api/v1/vanity/search?q={}", "1".repeat(65)), None)
            .status,
        400
    );
}

#[test]
fn purchase_hold_same_order_conflicts_and_errors() {
    let mut w = cw();
    let a = w.user("a");
    let b = w.user("b");
    assert_eq!(
        w.post(paths::VANITY_PURCHASE, json!({"alias_id":"88888888"}), None)
            .status,
        401
    );
    let r = purchase(&mut w, &a, "zzzzzz");
    assert_eq!(
        (r.status, r.error_code().as_deref()),
        (404, Some("ALIAS_NOT_FOUND"))
    );
    assert_eq!(purchase(&mut w, &a, "NOT VALID").status, 400);
    let r = purchase(&mut w, &a, "88888888");
    assert_eq!(r.status, 201);
    let v = r.body_json();
    let o = v["order_id"].as_str().unwrap().to_owned();
    assert_eq!(v["price_usdt"], v["amount_usdt"]);
    assert_eq!(v["price_usdt"], 1500);
    assert_eq!(
        v["payment_url"],
        format!("https://pay.securechat.invalid/checkout/{o}")
    );
    let pay_to = v["pay_to"].as_str().unwrap();
    assert!(pay_to.starts_with('T') && pay_to.len() == 34);
    let exp = wire::IsoTime::parse(v["expired_at"].as_str().unwrap()).unwrap();
    assert_eq!(exp.ms(), w.now.get() + HOLD_MS);
    let again = purchase(&mut w, &a, "88888888");
    assert_eq!(
        (again.status, again.body_json()["order_id"].as_str()),
        (200, Some(o.as_str()))
    );
    let r = purchase(&mut w, &b, "88888888");
    assert_eq!(
        (r.status, r.error_code().as_deref()),
        (409, Some("ALIAS_TAKEN"))
    );
    // Held aliases are hidden from search.
    let s = w.get("/api/v1/vanity/search?q=8888", None).body_json();
    assert!(
        !s.as_array()
            .unwrap()
            .iter()
            .any(|i| i["alias_id"] == "88888888")
    );
    // The hold ends after 15 minutes.
    w.advance(HOLD_MS);
    assert_eq!(status_of(&mut w, &o)["status"], "expired");
    assert_eq!(purchase(&mut w, &b, "88888888").status, 201);
}

#[test]
fn bind_rules_retire_the_old_alias_and_keep_routing() {
    let mut w = cw();
    let mut a = w.user("a");
    let mut b = w.user("b");
    let conv = w.befriend(&a, &b);
    let old = a.alias.clone();
    let bind = |w: &mut crate::world::World, u: &crate::world::User, o: &str| {
        w.post(paths::VANITY_BIND, json!({"order_id": o}), Some(&u.token))
    };
    let r = bind(&mut w, &a, "o-missing");
    assert_eq!(
        (r.status, r.error_code().as_deref()),
        (404, Some("ORDER_NOT_FOUND"))
    );
    let p = purchase(&mut w, &a, "88888888");
    let o = p.body_json()["order_id"].as_str().unwrap().to_owned();
    let r = bind(&mut w, &a, &o);
    assert_eq!(
        (r.status, r.error_code().as_deref()),
        (409, Some("ORDER_NOT_CONFIRMED"))
    );
    assert_eq!(bind(&mut w, &b, &o).status, 404, "not the caller's order");
    let ca = w.connect(&mut a);
    w.sync(ca);
    let outs = pay(&mut w, &o, 1500);
    assert_eq!(
        confirms(&outs, ca),
        vec![(o.clone(), "88888888".to_owned())]
    );
    // Confirmed but unbound: still not purchasable by anyone else.
    assert_eq!(purchase(&mut w, &b, "88888888").status, 409);
    let r = bind(&mut w, &a, &o);
    assert_eq!(
        (r.status, r.body_json()["alias_id"].as_str()),
        (200, Some("88888888"))
    );
    a.alias = "88888888".into();
    // Idempotent retry; another account cannot use the order.
    assert_eq!(bind(&mut w, &a, &o).status, 200);
    assert_eq!(bind(&mut w, &b, &o).status, 404);
    // Lookups: the new alias resolves, the old one is retired (404) and never reassigned.
    assert_eq!(
        w.get("/api/v1/users/88888888", Some(&b.token)).body_json()["alias_id"],
        "88888888"
    );
    assert_eq!(
        w.get(&paths::with(paths::USER, &old), Some(&b.token))
            .status,
        404
    );
    let friends = w.get(paths::FRIENDS, Some(&b.token)).body_json();
    assert_eq!(friends[0]["alias_id"], "88888888");
    assert_eq!(purchase(&mut w, &b, "88888888").status, 409);
    // Messages to the new alias and (from a stale client) to the retired one both route.
    let cb = w.connect(&mut b);
    w.sync(cb);
    let outs = w.send(
        cb,
        json!({"type":"msg","id":"m1","to":"88888888","conv_id":conv,"payload":"eA=="}),
    );
    assert_eq!(msgs(&frames(&outs, ca)).len(), 1);
    let outs = w.send(
        cb,
        json!({"type":"msg","id":"m2","to":old,"conv_id":conv,"payload":"eA=="}),
    );
    let fa = frames(&outs, ca);
    assert_eq!(msgs(&fa).len(), 1);
    let Some(ServerFrame::Msg(m)) = fa.first() else {
        panic!()
    };
    assert_eq!(m.from.as_str(), b.alias);
    // The search no longer lists it.
    let s = w.get("/api/v1/vanity/search?q=88888888", None).body_json();
    assert!(s.as_array().unwrap().is_empty());
}

#[test]
fn deprecated_reserve_and_status_still_work() {
    let mut w = cw();
    let a = w.user("a");
    let b = w.user("b");
    let r = w.http(
        HttpRequest::new(relay_core::Method::Post, paths::VANITY_RESERVE)
            .json(&json!({"alias_id":"66668888"})),
    );
    assert_eq!(r.status, 201, "{:?}", r.body_json());
    let v = r.body_json();
    assert_eq!(v["price"], v["price_usdt"]);
    let o = v["order_id"].as_str().unwrap().to_owned();
    assert_eq!(status_of(&mut w, &o)["status"], "pending");
    assert_eq!(status_of(&mut w, &o)["alias_id"], "66668888");
    assert_eq!(purchase(&mut w, &a, "66668888").status, 409);
    let price = v["price"].as_u64().unwrap();
    pay(&mut w, &o, price);
    assert_eq!(status_of(&mut w, &o)["status"], "confirmed");
    let r = w.post(paths::VANITY_BIND, json!({"order_id": o}), Some(&b.token));
    assert_eq!(r.status, 200);
    let r = w.post(paths::VANITY_BIND, json!({"order_id": o}), Some(&a.token));
    assert_eq!(r.status, 404, "bound to b now");
    assert_eq!(
        w.post(paths::VANITY_RESERVE, json!({"alias_id":"nope_x"}), None)
            .status,
        404
    );
}

#[test]
fn memory_restart_keeps_holds_and_bindings() {
    let mut w = cw();
    let a = w.user("a");
    let b = w.user("b");
    let o = purchase(&mut w, &a, "12345678").body_json()["order_id"]
        .as_str()
        .unwrap()
        .to_owned();
    w.restart(Box::new(w.mem.clone()));
    assert_eq!(purchase(&mut w, &b, "12345678").status, 409);
    pay(&mut w, &o, 300);
    w.restart(Box::new(w.mem.clone()));
    assert_eq!(
        w.post(paths::VANITY_BIND, json!({"order_id": o}), Some(&a.token))
            .status,
        200
    );
    w.restart(Box::new(w.mem.clone()));
    assert_eq!(w.get("/api/v1/users/12345678", Some(&b.token)).status, 200);
    assert_eq!(purchase(&mut w, &b, "12345678").status, 409);
}

#[test]
fn pay_to_addresses_draw_on_the_whole_base58_alphabet() {
    const BASE58: &str = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz";
    let mut w = cw();
    let a = w.user("a");
    let mut seen = std::collections::BTreeSet::new();
    for alias in ["88888888", "66668888", "12345678"] {
        let r = purchase(&mut w, &a, alias);
        assert_eq!(r.status, 201, "{:?}", r.body_json());
        let pay_to = r.body_json()["pay_to"].as_str().unwrap().to_owned();
        let rest = pay_to.strip_prefix('T').unwrap();
        assert_eq!(rest.len(), 33);
        assert!(rest.chars().all(|c| BASE58.contains(c)), "{pay_to}");
        seen.extend(rest.chars());
    }
    // 99 characters drawn uniformly from 58 cover far more than a handful of them.
    assert!(seen.len() > 20, "only {seen:?} in three addresses");
}

/// A reservation of `alias` (it must be in `config`'s catalog), then one registration; the
/// reservation's order id and price, and the account.
fn reserve_then_register(
    config: relay_core::Config,
    alias: &str,
) -> (crate::world::World, String, u64, crate::world::User) {
    let mut w = crate::world::World::with_config(config);
    let r = w.post(paths::VANITY_RESERVE, json!({ "alias_id": alias }), None);
    assert_eq!(r.status, 201, "{:?}", r.body_json());
    let v = r.body_json();
    let (o, price) = (
        v["order_id"].as_str().unwrap().to_owned(),
        v["price_usdt"].as_u64().unwrap(),
    );
    let u = w.user("holder");
    (w, o, price, u)
}

#[test]
fn registration_never_assigns_an_alias_of_the_catalog() {
    // An operator's catalog may hold aliases of the registration form (`u` and 8 digits). A
    // dry run with the same seed and the same draws finds the alias the first registration
    // after a reservation would draw; with that alias in the catalog, registration passes it
    // over, so the paid reservation still binds.
    let (_, _, _, dry) = reserve_then_register(crate::orders::commerce_config(), "88888888");
    let alias = wire::AliasId::parse(&dry.alias).unwrap();
    let mut config = crate::orders::commerce_config();
    config.vanity_catalog.push(alias.clone());
    let (mut w, o, price, holder) = reserve_then_register(config, alias.as_str());
    assert_ne!(
        holder.alias,
        alias.as_str(),
        "registration handed out a catalog alias"
    );
    pay(&mut w, &o, price);
    assert_eq!(status_of(&mut w, &o)["status"], "confirmed");
    let b = w.user("b");
    assert_ne!(b.alias, alias.as_str());
    let r = w.post(paths::VANITY_BIND, json!({ "order_id": o }), Some(&b.token));
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    assert_eq!(r.body_json()["alias_id"], alias.as_str());
}

#[test]
fn a_vanity_alias_its_owner_moved_away_from_is_never_sold_again() {
    let mut w = cw();
    let a = w.user("a");
    let b = w.user("b");
    for alias in ["88888888", "66668888"] {
        let r = purchase(&mut w, &a, alias);
        let o = r.body_json()["order_id"].as_str().unwrap().to_owned();
        pay(&mut w, &o, r.body_json()["price_usdt"].as_u64().unwrap());
        let r = w.post(paths::VANITY_BIND, json!({ "order_id": o }), Some(&a.token));
        assert_eq!(r.status, 200, "{:?}", r.body_json());
    }
    // 88888888 is retired now: no account has it, no order holds it, and still no sale.
    let r = purchase(&mut w, &b, "88888888");
    assert_eq!(
        (r.status, r.error_code().as_deref()),
        (409, Some("ALIAS_TAKEN"))
    );
    let s = w.get("/api/v1/vanity/search?q=88888888", None).body_json();
    assert!(s.as_array().unwrap().is_empty(), "{s}");
}

/// The featured aliases, cheapest first (what an abuser would try to corner).
fn featured(w: &mut crate::world::World) -> Vec<String> {
    w.get(paths::VANITY_SEARCH, None)
        .body_json()
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["alias_id"].as_str().unwrap().to_owned())
        .collect()
}

fn reserve_from(
    w: &mut crate::world::World,
    network: &str,
    alias: &str,
) -> relay_core::HttpResponse {
    w.http(
        HttpRequest::new(relay_core::Method::Post, paths::VANITY_RESERVE)
            .json(&json!({ "alias_id": alias }))
            .from_addr(network),
    )
}

/// An account holds at most three unpaid aliases at once, a network ten (purchases and
/// reserves together); past either, 429 with the time until the first lapses. Another
/// account or network is not refused, and a hold that lapses or is paid frees a place.
#[test]
fn unpaid_holds_are_capped_per_account_and_per_network() {
    let mut w = cw();
    let aliases = featured(&mut w);
    let a = w.user("a");
    let b = w.user("b");
    let mut next = aliases.iter().cloned();
    let take =
        |w: &mut crate::world::World, u: &crate::world::User, alias: String| purchase(w, u, &alias);
    let held: Vec<_> = (0..3)
        .map(|_| take(&mut w, &a, next.next().unwrap()))
        .collect();
    assert!(held.iter().all(|r| r.status == 201));
    let r = take(&mut w, &a, next.next().unwrap());
    assert_eq!(r.status, 429, "{:?}", r.body_json());
    assert_eq!(r.error_code().as_deref(), Some("RATE_LIMITED"));
    assert_eq!(r.retry_after_s, Some(HOLD_MS / 1000));
    // Paying for one frees a place.
    let first = held[0].body_json();
    pay(
        &mut w,
        first["order_id"].as_str().unwrap(),
        first["price_usdt"].as_u64().unwrap(),
    );
    assert_eq!(take(&mut w, &a, next.next().unwrap()).status, 201);
    // The network (every account here asks from the same one): 3 of a's, then b's and
    // reserves up to ten.
    for _ in 0..3 {
        assert_eq!(take(&mut w, &b, next.next().unwrap()).status, 201);
    }
    let c = w.user("c");
    for _ in 0..3 {
        assert_eq!(take(&mut w, &c, next.next().unwrap()).status, 201);
    }
    let addr = HttpRequest::new(relay_core::Method::Get, "/").remote_addr;
    let spare = next.next().unwrap();
    assert_eq!(reserve_from(&mut w, &addr, &spare).status, 201, "the tenth");
    let more = next.next().unwrap();
    let r = reserve_from(&mut w, &addr, &more);
    assert_eq!(
        (r.status, r.error_code().as_deref()),
        (429, Some("RATE_LIMITED"))
    );
    let d = w.user("d");
    assert_eq!(
        take(&mut w, &d, next.next().unwrap()).status,
        429,
        "an eleventh from the network"
    );
    // Another network is not refused.
    assert_eq!(reserve_from(&mut w, "198.51.100.0/24", &more).status, 201);
    // Once the holds lapse, the network may hold again.
    w.advance(HOLD_MS);
    assert_eq!(take(&mut w, &d, next.next().unwrap()).status, 201);
}

/// A hold that lapses unpaid is not renewed by its holder: the same account (or, for a
/// reserve, the same network) may not hold that alias again for a hold's lifetime, while
/// anyone else may at once.
#[test]
fn a_lapsed_hold_is_not_renewed_by_its_holder() {
    let mut w = cw();
    let aliases = featured(&mut w);
    let (x, y) = (aliases[0].clone(), aliases[1].clone());
    let a = w.user("a");
    let b = w.user("b");
    assert_eq!(purchase(&mut w, &a, &x).status, 201);
    w.advance(HOLD_MS);
    let r = purchase(&mut w, &a, &x);
    assert_eq!(
        (r.status, r.error_code().as_deref()),
        (429, Some("RATE_LIMITED"))
    );
    assert_eq!(r.retry_after_s, Some(HOLD_MS / 1000));
    // Another alias, and another account for this one, at once.
    assert_eq!(purchase(&mut w, &a, &y).status, 201);
    assert_eq!(purchase(&mut w, &b, &x).status, 201);
    // A reserve's holder is its network.
    let z = aliases[2].clone();
    assert_eq!(reserve_from(&mut w, "192.0.2.9", &z).status, 201);
    w.advance(HOLD_MS);
    assert_eq!(reserve_from(&mut w, "192.0.2.9", &z).status, 429);
    assert_eq!(reserve_from(&mut w, "192.0.2.10", &z).status, 201);
    // After the cooldown the first holder may try again (when the alias is free).
    w.advance(HOLD_MS);
    assert_eq!(reserve_from(&mut w, "192.0.2.9", &aliases[0]).status, 201);
}

/// An order that is over is kept for the retention (7 days), then deleted from memory and the
/// store: its status is then 404. An unpaid order counts from its expiry, a bound vanity
/// order from its binding; a paid alias not yet bound is kept.
#[test]
fn orders_that_are_over_are_deleted_after_the_retention() {
    use relay_core::limits::ORDER_RETENTION_MS;
    let mut w = cw();
    let aliases = featured(&mut w);
    let a = w.user("a");
    let unpaid = purchase(&mut w, &a, &aliases[0]).body_json();
    let unpaid = unpaid["order_id"].as_str().unwrap().to_owned();
    let paid = purchase(&mut w, &a, &aliases[1]).body_json();
    let paid_id = paid["order_id"].as_str().unwrap().to_owned();
    pay(&mut w, &paid_id, paid["price_usdt"].as_u64().unwrap());
    w.advance(HOLD_MS);
    assert_eq!(status_of(&mut w, &unpaid)["status"], "expired");
    w.advance(ORDER_RETENTION_MS - 1);
    assert_eq!(status_of(&mut w, &unpaid)["status"], "expired");
    w.advance(1);
    let r = w.get(&paths::with(paths::ORDER_STATUS, &unpaid), None);
    assert_eq!(r.status, 404, "{:?}", r.body_json());
    assert!(
        !w.mem.clone().load().unwrap()[&relay_core::store::Table::Orders].contains_key(&unpaid)
    );
    // Paid, not bound: kept however long.
    assert_eq!(status_of(&mut w, &paid_id)["status"], "confirmed");
    let mut a = a;
    w.login(&mut a);
    let r = w.post(
        paths::VANITY_BIND,
        json!({"order_id": paid_id}),
        Some(&a.token),
    );
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    w.advance(ORDER_RETENTION_MS);
    let r = w.get(&paths::with(paths::ORDER_STATUS, &paid_id), None);
    assert_eq!(r.status, 404, "bound, then kept for the retention");
}
