//! Channels (CH1-CH8), channel trading (CH9-CH10) and quota buy (CH11).

use relay_core::Method;
use serde_json::{Value, json};
use wire::ServerFrame;
use wire::http::paths;

use crate::orders::{TRADE_TTL_MS, all_confirms, confirms, cw, pay, req, status_of};
use crate::world::{User, World, frames};

pub(crate) fn create(w: &mut World, u: &User, name: &str, public: bool) -> String {
    let r = w.post(
        paths::CHANNELS,
        json!({"name": name, "description": format!("about {name}"), "is_public": public}),
        Some(&u.token),
    );
    assert_eq!(r.status, 201, "{:?}", r.body_json());
    r.body_json()["channel_id"].as_str().unwrap().to_owned()
}

pub(crate) fn detail(w: &mut World, u: &User, ch: &str) -> Value {
    let r = w.get(&paths::with(paths::CHANNEL, ch), Some(&u.token));
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    r.body_json()
}

pub(crate) fn list(w: &mut World, u: &User, ch: &str, price: Value) -> relay_core::HttpResponse {
    w.post(
        paths::LIST_CHANNEL,
        json!({"channel_id": ch, "price_usdt": price}),
        Some(&u.token),
    )
}

#[test]
fn create_detail_mine_subscribe() {
    let mut w = cw();
    let a = w.user("a");
    let b = w.user("b");
    let ch = create(&mut w, &a, "News", true);
    let d = detail(&mut w, &a, &ch);
    assert_eq!(d["role"], "owner");
    assert_eq!(d["for_sale"], false);
    assert!(d.get("sale_price").is_none());
    assert_eq!(d["version"], 1);
    let d = detail(&mut w, &b, &ch);
    assert!(d.get("role").is_none());
    assert_eq!(d["is_subscribed"], false);
    let sub = paths::with(paths::CHANNEL_SUBSCRIBE, &ch);
    for _ in 0..2 {
        assert_eq!(w.post(&sub, json!({}), Some(&b.token)).status, 200);
    }
    let d = detail(&mut w, &b, &ch);
    assert_eq!(
        (d["role"].as_str(), d["is_subscribed"].as_bool()),
        (Some("subscriber"), Some(true))
    );
    let mine = w.get(paths::CHANNELS_MINE, Some(&b.token)).body_json();
    assert_eq!(mine.as_array().unwrap().len(), 1);
    assert_eq!(mine[0]["role"], "subscriber");
    let mine = w.get(paths::CHANNELS_MINE, Some(&a.token)).body_json();
    assert_eq!(mine[0]["role"], "owner");
    // Owner: subscribe is a no-op, unsubscribe is refused.
    assert_eq!(w.post(&sub, json!({}), Some(&a.token)).status, 200);
    let r = req(&mut w, Method::Delete, &sub, None, Some(&a.token));
    assert_eq!(
        (r.status, r.error_code().as_deref()),
        (400, Some("OWN_CHANNEL"))
    );
    for _ in 0..2 {
        assert_eq!(
            req(&mut w, Method::Delete, &sub, None, Some(&b.token)).status,
            200
        );
    }
    assert_eq!(detail(&mut w, &b, &ch)["is_subscribed"], false);
    assert!(
        w.get(paths::CHANNELS_MINE, Some(&b.token))
            .body_json()
            .as_array()
            .unwrap()
            .is_empty()
    );
    // Unknown / malformed ids, no token, bad bodies.
    assert_eq!(
        w.get("/api/v1/channels/ch-nope", Some(&a.token))
            .error_code()
            .as_deref(),
        Some("CHANNEL_NOT_FOUND")
    );
    assert_eq!(
        w.post(
            "/api/v1/channels/ch-nope/subscribe",
            json!({}),
            Some(&a.token)
        )
        .status,
        404
    );
    assert_eq!(w.get(paths::CHANNELS_MINE, None).status, 401);
    let r = w.post(paths::CHANNELS, json!({"name": "  "}), Some(&a.token));
    assert_eq!(
        (r.status, r.error_code().as_deref()),
        (400, Some("INVALID_FIELD"))
    );
    let r = w.post(
        paths::CHANNELS,
        json!({"name": "x".repeat(65)}),
        Some(&a.token),
    );
    assert_eq!(r.status, 400);
    let r = w.http(
        relay_core::HttpRequest::new(Method::Post, paths::CHANNELS)
            .body("{")
            .bearer(&a.token),
    );
    assert_eq!(r.error_code().as_deref(), Some("INVALID_JSON"));
}

#[test]
fn free_quota_then_quota_buy_adds_one_seat() {
    let mut w = cw();
    let mut a = w.user("a");
    create(&mut w, &a, "one", true);
    create(&mut w, &a, "two", true);
    let r = w.post(paths::CHANNELS, json!({"name": "three"}), Some(&a.token));
    assert_eq!(r.status, 403);
    assert_eq!(r.error_code().as_deref(), Some("QUOTA_EXCEEDED"));
    assert!(String::from_utf8_lossy(&r.body).contains("QUOTA_EXCEEDED"));
    let r = w.post(paths::CHANNEL_QUOTA_BUY, json!({}), None);
    assert_eq!(r.status, 401);
    let r = w.post(paths::CHANNEL_QUOTA_BUY, json!({}), Some(&a.token));
    assert_eq!(r.status, 201);
    let v = r.body_json();
    assert_eq!(v["price_usdt"], 5);
    assert!(v["pay_to"].as_str().unwrap().starts_with('T'));
    let o = v["order_id"].as_str().unwrap().to_owned();
    assert!(v["payment_url"].as_str().unwrap().ends_with(&o));
    let ca = w.connect(&mut a);
    w.sync(ca);
    let outs = pay(&mut w, &o, 5);
    assert_eq!(confirms(&outs, ca), vec![(o.clone(), o.clone())]);
    create(&mut w, &a, "three", true);
    let r = w.post(paths::CHANNELS, json!({"name": "four"}), Some(&a.token));
    assert_eq!(r.status, 403);
}

#[test]
fn search_is_public_case_insensitive_bounded_and_ordered() {
    let mut w = World::with_config(relay_core::Config {
        free_channel_quota: 60,
        ..crate::orders::commerce_config()
    });
    let a = w.user("a");
    create(&mut w, &a, "Rust Weekly", true);
    create(&mut w, &a, "rust secret", false);
    create(&mut w, &a, "Alpha RUST", true);
    let r = w
        .get("/api/v1/channels/search?q=rUsT", Some(&a.token))
        .body_json();
    let names: Vec<&str> = r
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Alpha RUST", "Rust Weekly"]);
    assert!(
        w.get("/api/v1/channels/search?q=", Some(&a.token))
            .body_json()
            .as_array()
            .unwrap()
            .is_empty()
    );
    assert!(
        w.get(paths::CHANNEL_SEARCH, Some(&a.token))
            .body_json()
            .as_array()
            .unwrap()
            .is_empty()
    );
    // Description matches too; URL-encoded spaces decode.
    let r = w
        .get("/api/v1/channels/search?q=about%20alpha", Some(&a.token))
        .body_json();
    assert_eq!(r.as_array().unwrap().len(), 1);
    for i in 0..55 {
        create(&mut w, &a, &format!("bulk {i:02}"), true);
    }
    let r = w
        .get("/api/v1/channels/search?q=bulk", Some(&a.token))
        .body_json();
    assert_eq!(r.as_array().unwrap().len(), 50);
    assert_eq!(r[0]["name"], "bulk 00");
    let long = "x".repeat(65);
    assert_eq!(
        w.get(&format!("/api/v1/channels/search?q={long}"), Some(&a.token))
            .status,
        400
    );
}

#[test]
fn posts_owner_only_paged_newest_first_and_live_frames() {
    let mut w = cw();
    let mut a = w.user("a");
    let mut b = w.user("b");
    let mut c = w.user("c");
    let ch = create(&mut w, &a, "feed", true);
    w.post(
        &paths::with(paths::CHANNEL_SUBSCRIBE, &ch),
        json!({}),
        Some(&b.token),
    );
    let (ca, cb, cc) = (w.connect(&mut a), w.connect(&mut b), w.connect(&mut c));
    for conn in [ca, cb, cc] {
        w.sync(conn);
    }
    let posts = paths::with(paths::CHANNEL_POSTS, &ch);
    let r = w.post(&posts, json!({"content": "hi"}), Some(&b.token));
    assert_eq!(
        (r.status, r.error_code().as_deref()),
        (403, Some("FORBIDDEN"))
    );
    let r = w.post(
        &posts,
        json!({"content": "x".repeat(16 * 1024 + 1)}),
        Some(&a.token),
    );
    assert_eq!(r.status, 413);
    assert_eq!(
        w.post(&posts, json!({"content": " "}), Some(&a.token))
            .status,
        400
    );
    assert_eq!(
        w.post(
            &posts,
            json!({"content": "x", "type": "html"}),
            Some(&a.token)
        )
        .status,
        400
    );
    let r = w.post(
        &posts,
        json!({"content": "# hello", "type": "markdown"}),
        Some(&a.token),
    );
    assert_eq!(r.status, 201);
    let pid = r.body_json()["post_id"].as_str().unwrap().to_owned();
    let outs = w.drain();
    let fb = frames(&outs, cb);
    let Some(ServerFrame::ChannelPost(f)) = fb.first() else {
        panic!("subscriber got no channel_post: {fb:?}");
    };
    assert_eq!(
        (f.conv_id.as_str(), f.channel_id.as_str()),
        (ch.as_str(), ch.as_str())
    );
    assert_eq!(f.post.id.as_str(), pid);
    assert_eq!(f.post.author_alias_id.as_str(), a.alias);
    assert_eq!(frames(&outs, ca).len(), 1, "owner sees its post live");
    assert!(frames(&outs, cc).is_empty(), "non-subscriber got a post");
    for i in 1..=7 {
        w.post(&posts, json!({"content": format!("p{i}")}), Some(&a.token));
    }
    let page = w
        .get(&format!("{posts}?limit=3"), Some(&b.token))
        .body_json();
    let contents: Vec<&str> = page
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["content"].as_str().unwrap())
        .collect();
    assert_eq!(contents, ["p7", "p6", "p5"]);
    let last = page[2]["id"].as_str().unwrap().to_owned();
    let page = w
        .get(&format!("{posts}?limit=3&before={last}"), Some(&b.token))
        .body_json();
    assert_eq!(page[0]["content"], "p4");
    let all = w.get(&posts, Some(&c.token)).body_json();
    assert_eq!(all.as_array().unwrap().len(), 8);
    assert_eq!(all[7]["type"], "markdown");
    assert_eq!(
        w.get(&format!("{posts}?limit=0"), Some(&b.token)).status,
        400
    );
    assert_eq!(
        w.get(&format!("{posts}?limit=x"), Some(&b.token)).status,
        400
    );
    assert_eq!(
        w.get(&format!("{posts}?before=zzz"), Some(&b.token)).status,
        400
    );
    assert_eq!(
        w.get(&format!("{posts}?limit=1000"), Some(&b.token))
            .body_json()
            .as_array()
            .unwrap()
            .len(),
        8
    );
}

#[test]
fn listing_is_owner_only_positive_integer_and_compare_and_swap() {
    let mut w = cw();
    let a = w.user("a");
    let b = w.user("b");
    let ch = create(&mut w, &a, "shop", true);
    let r = list(&mut w, &b, &ch, json!(10));
    assert_eq!(
        (r.status, r.error_code().as_deref()),
        (403, Some("FORBIDDEN"))
    );
    for bad in [json!(0), json!(-1), json!(1.5), json!("10")] {
        let r = list(&mut w, &a, &ch, bad.clone());
        assert_eq!(
            (r.status, r.error_code().as_deref()),
            (400, Some("INVALID_FIELD")),
            "{bad}"
        );
    }
    assert_eq!(list(&mut w, &a, "ch-nope", json!(5)).status, 404);
    let r = list(&mut w, &a, &ch, json!(10));
    assert_eq!(r.status, 200);
    assert_eq!(r.body_json()["version"], 2);
    let d = detail(&mut w, &b, &ch);
    assert_eq!(
        (d["for_sale"].as_bool(), d["sale_price"].as_u64()),
        (Some(true), Some(10))
    );
    // CAS: a stale version loses.
    let r = w.post(
        paths::LIST_CHANNEL,
        json!({"channel_id": ch, "price_usdt": 20, "expected_version": 1}),
        Some(&a.token),
    );
    assert_eq!(
        (r.status, r.error_code().as_deref()),
        (409, Some("VERSION_CONFLICT"))
    );
    // iOS PUT with the current version wins.
    let r = req(
        &mut w,
        Method::Put,
        &paths::with(paths::CHANNEL_FOR_SALE, &ch),
        Some(json!({"price_usdt": 20, "expected_version": 2})),
        Some(&a.token),
    );
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    assert_eq!(detail(&mut w, &b, &ch)["sale_price"], 20);
    assert_eq!(
        req(
            &mut w,
            Method::Put,
            &paths::with(paths::CHANNEL_FOR_SALE, &ch),
            Some(json!({"price_usdt": 0})),
            Some(&a.token)
        )
        .status,
        400
    );
    assert_eq!(
        w.post(
            paths::LIST_CHANNEL,
            json!({"channel_id": ch, "price_usdt": 5}),
            None
        )
        .status,
        401
    );
}

#[test]
fn buy_rules_concurrent_buyers_and_ownership_transfer() {
    let mut w = cw();
    let mut a = w.user("a");
    let mut b = w.user("b");
    let c = w.user("c");
    let ch = create(&mut w, &a, "shop", true);
    let buy = paths::with(paths::CHANNEL_BUY, &ch);
    assert_eq!(
        w.post("/api/v1/channels/ch-nope/buy", json!({}), Some(&b.token))
            .error_code()
            .as_deref(),
        Some("CHANNEL_NOT_FOUND")
    );
    let r = w.post(&buy, json!({}), Some(&b.token));
    assert_eq!(
        (r.status, r.error_code().as_deref()),
        (409, Some("NOT_FOR_SALE"))
    );
    list(&mut w, &a, &ch, json!(42));
    let r = w.post(&buy, json!({}), Some(&a.token));
    assert_eq!(
        (r.status, r.error_code().as_deref()),
        (400, Some("OWN_CHANNEL"))
    );
    assert_eq!(w.post(&buy, json!({}), None).status, 401);
    let r1 = w.post(&buy, json!({}), Some(&b.token));
    assert_eq!(r1.status, 201);
    let o = r1.body_json()["order_id"].as_str().unwrap().to_owned();
    assert_eq!(r1.body_json()["price_usdt"], 42);
    let r = w.post(&buy, json!({}), Some(&c.token));
    assert_eq!(
        (r.status, r.error_code().as_deref()),
        (409, Some("CHANNEL_TAKEN"))
    );
    let again = w.post(&buy, json!({}), Some(&b.token));
    assert_eq!(again.body_json()["order_id"], o.as_str());
    // The listing is frozen while an order is pending.
    let r = list(&mut w, &a, &ch, json!(99));
    assert_eq!(
        (r.status, r.error_code().as_deref()),
        (409, Some("VERSION_CONFLICT"))
    );
    let ca = w.connect(&mut a);
    let cb = w.connect(&mut b);
    w.sync(ca);
    w.sync(cb);
    let outs = pay(&mut w, &o, 42);
    assert_eq!(confirms(&outs, cb), vec![(o.clone(), ch.clone())]);
    assert_eq!(all_confirms(&outs).len(), 1);
    assert_eq!(status_of(&mut w, &o)["kind"], "channel_trade");
    let d = detail(&mut w, &b, &ch);
    assert_eq!(
        (d["role"].as_str(), d["for_sale"].as_bool()),
        (Some("owner"), Some(false))
    );
    assert!(d.get("sale_price").is_none());
    let d = detail(&mut w, &a, &ch);
    assert_eq!(d["role"], "subscriber");
    // Paying again changes nothing; the new owner posts, the old one cannot.
    assert!(all_confirms(&pay(&mut w, &o, 42)).is_empty());
    let posts = paths::with(paths::CHANNEL_POSTS, &ch);
    assert_eq!(
        w.post(&posts, json!({"content":"mine now"}), Some(&b.token))
            .status,
        201
    );
    assert_eq!(
        w.post(&posts, json!({"content":"no"}), Some(&a.token))
            .status,
        403
    );
    let r = w.post(&buy, json!({}), Some(&c.token));
    assert_eq!(r.error_code().as_deref(), Some("NOT_FOR_SALE"));
    // The new owner's quota is untouched (buying does not use a creation seat).
    create(&mut w, &b, "b1", true);
    create(&mut w, &b, "b2", true);
}

#[test]
fn trade_order_expiry_releases_the_lock() {
    let mut w = cw();
    let a = w.user("a");
    let b = w.user("b");
    let c = w.user("c");
    let ch = create(&mut w, &a, "shop", true);
    list(&mut w, &a, &ch, json!(7));
    let buy = paths::with(paths::CHANNEL_BUY, &ch);
    let o = w.post(&buy, json!({}), Some(&b.token)).body_json()["order_id"]
        .as_str()
        .unwrap()
        .to_owned();
    w.advance(TRADE_TTL_MS);
    assert_eq!(status_of(&mut w, &o)["status"], "expired");
    let r = w.post(&buy, json!({}), Some(&c.token));
    assert_eq!(r.status, 201);
    let o2 = r.body_json()["order_id"].as_str().unwrap().to_owned();
    // B's late payment: the channel is locked by C's order, so B's order stays expired.
    pay(&mut w, &o, 7);
    assert_eq!(status_of(&mut w, &o)["status"], "expired");
    pay(&mut w, &o2, 7);
    assert_eq!(detail(&mut w, &c, &ch)["role"], "owner");
}

#[test]
fn a_sold_channel_leaves_its_seller_s_owned_list_and_everything_survives_a_restart() {
    let mut w = World::with_config(relay_core::Config {
        free_channel_quota: 10,
        ..crate::orders::commerce_config()
    });
    let a = w.user("a");
    let b = w.user("b");
    let c = w.user("c");
    let ch = create(&mut w, &a, "shop", true);
    let mut kept: Vec<String> = (0..4)
        .map(|i| create(&mut w, &a, &format!("kept {i}"), true))
        .collect();
    kept.sort();
    let posts = paths::with(paths::CHANNEL_POSTS, &ch);
    for i in 1..=3 {
        let r = w.post(&posts, json!({"content": format!("p{i}")}), Some(&a.token));
        assert_eq!(r.status, 201);
    }
    let sub = paths::with(paths::CHANNEL_SUBSCRIBE, &ch);
    assert_eq!(w.post(&sub, json!({}), Some(&c.token)).status, 200);
    assert_eq!(list(&mut w, &a, &ch, json!(5)).status, 200);
    let r = w.post(
        &paths::with(paths::CHANNEL_BUY, &ch),
        json!({}),
        Some(&b.token),
    );
    assert_eq!(r.status, 201);
    pay(&mut w, r.body_json()["order_id"].as_str().unwrap(), 5);
    // The seller's own channels first (by id), then the sold one it is now subscribed to.
    let mine = |w: &mut World, u: &User| -> Vec<(String, String)> {
        let v = w.get(paths::CHANNELS_MINE, Some(&u.token)).body_json();
        v.as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["id"].as_str().unwrap().to_owned(),
                    c["role"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    let mut want_a: Vec<(String, String)> = kept
        .iter()
        .map(|k| (k.clone(), "owner".to_owned()))
        .collect();
    want_a.push((ch.clone(), "subscriber".to_owned()));
    let want_b = vec![(ch.clone(), "owner".to_owned())];
    let want_c = vec![(ch.clone(), "subscriber".to_owned())];
    assert_eq!(mine(&mut w, &a), want_a);
    assert_eq!(mine(&mut w, &b), want_b);
    w.restart(Box::new(w.mem.clone()));
    assert_eq!(mine(&mut w, &a), want_a);
    assert_eq!(mine(&mut w, &b), want_b);
    assert_eq!(mine(&mut w, &c), want_c);
    let page = w.get(&posts, Some(&c.token)).body_json();
    let contents: Vec<&str> = page
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["content"].as_str().unwrap())
        .collect();
    assert_eq!(contents, ["p3", "p2", "p1"]);
}
