//! `payment_confirmed` is not acknowledged, so the relay keeps every confirmation and re-sends
//! it on each `sync` of the buyer for `CONFIRM_REDELIVERY_TTL_MS` (24 h), then purges it on
//! `handle_timeout` (also after a restart); at most 64 are kept per buyer.

use serde_json::json;
use wire::http::paths;

use crate::orders::{all_confirms, confirms, cw, pay, purchase, webhook};
use crate::world::World;

const TTL_MS: u64 = 24 * 60 * 60 * 1000;

fn order_of(r: &relay_core::HttpResponse) -> (String, u64) {
    let v = r.body_json();
    (
        v["order_id"].as_str().unwrap().to_owned(),
        v["price_usdt"].as_u64().unwrap(),
    )
}

#[test]
fn live_frame_into_a_dead_socket_is_resent_on_the_next_sync() {
    let mut w = cw();
    let mut a = w.user("a");
    let ca = w.connect(&mut a);
    w.sync(ca);
    let (o, price) = order_of(&purchase(&mut w, &a, "88888888"));
    let want = vec![(o.clone(), "88888888".to_owned())];
    // Sent live into a connection that is silently dead (the relay cannot know).
    assert_eq!(confirms(&pay(&mut w, &o, price), ca), want);
    // A replayed webhook sends no second live frame.
    assert_eq!(
        webhook(&mut w, &o, &format!("pay-{o}"), "finished", price).status,
        200
    );
    assert!(all_confirms(&w.drain()).is_empty());
    // The buyer reconnects and syncs: the confirmation again.
    let ca2 = w.connect(&mut a);
    assert_eq!(confirms(&w.sync(ca2), ca2), want);
    assert_eq!(confirms(&w.sync(ca2), ca2), want);
    // A new login (the same device after its token expired, or another one: the relay cannot
    // tell) gets it too; clients deduplicate by order id.
    w.login(&mut a);
    let cb = w.connect(&mut a);
    assert_eq!(confirms(&w.sync(cb), cb), want);
}

#[test]
fn kept_confirmations_are_purged_after_the_ttl_even_across_a_restart() {
    let mut w = cw();
    let mut a = w.user("a");
    let (o, price) = order_of(&purchase(&mut w, &a, "88888888"));
    pay(&mut w, &o, price);
    w.restart(Box::new(w.mem.clone()));
    w.advance(TTL_MS - 1);
    w.login(&mut a);
    let ca = w.connect(&mut a);
    assert_eq!(
        confirms(&w.sync(ca), ca),
        vec![(o.clone(), "88888888".to_owned())]
    );
    w.advance(1);
    w.login(&mut a);
    let ca = w.connect(&mut a);
    assert!(confirms(&w.sync(ca), ca).is_empty());
    w.restart(Box::new(w.mem.clone()));
    let ca = w.connect(&mut a);
    assert!(confirms(&w.sync(ca), ca).is_empty());
}

#[test]
fn at_most_64_are_kept_per_buyer_oldest_dropped_first() {
    let mut w: World = cw();
    let mut a = w.user("a");
    let mut orders = Vec::new();
    for _ in 0..66 {
        let r = w.post(paths::CHANNEL_QUOTA_BUY, json!({}), Some(&a.token));
        assert_eq!(r.status, 201, "{:?}", r.body_json());
        let (o, price) = order_of(&r);
        pay(&mut w, &o, price);
        orders.push(o);
        w.advance(1);
    }
    let ca = w.connect(&mut a);
    let got: Vec<String> = confirms(&w.sync(ca), ca)
        .into_iter()
        .map(|(o, _)| o)
        .collect();
    let mut want = orders[2..].to_vec();
    want.sort();
    assert_eq!(got, want);
}
