//! What the whole relay shares, on two shards: registration, channels, vanity aliases, orders
//! and payments are decided by the registry shard (shard 0), whichever shard a request
//! reaches; sign-in at the account's shard; and their effects on another shard's users (a
//! channel post, a payment confirmation, a bound alias) reach those users at their shard.

use relay_core::handoff::REGISTRY_SHARD;
use relay_core::store::Table;
use relay_core::{HttpRequest, HttpResponse, Method, Output};
use serde_json::json;
use wire::ServerFrame;
use wire::http::paths;

use crate::orders::{SECRET, commerce_config};
use crate::shards::{Fate, Two, across};
use crate::world::{User, World, b64, frames, register_request};

/// Two shards with one user registered on each (`users[i]` on shard `i`), each connected and
/// synced to its shard.
fn one_on_each() -> (Two, [User; 2]) {
    let mut setup = World::with_config(commerce_config());
    let (a, b) = across(&mut setup);
    let mut two = Two::split(setup);
    let mut users = if two.of(&a) == 0 { [a, b] } else { [b, a] };
    for (i, u) in users.iter_mut().enumerate() {
        let c = two.shards[i].connect(u);
        two.shards[i].sync(c);
    }
    (two, users)
}

/// A request to shard `i`, everything delivered: its answer and the other outputs.
fn at(two: &mut Two, i: usize, req: HttpRequest) -> (HttpResponse, Vec<Output>) {
    let (answer, outs) = two.request_at(i, req, |_, _| Fate::Deliver);
    (answer.expect("answered"), outs)
}

fn post(path: &str, body: &serde_json::Value, token: Option<&str>) -> HttpRequest {
    let r = HttpRequest::new(Method::Post, path).json(body);
    match token {
        Some(t) => r.bearer(t),
        None => r,
    }
}

#[test]
fn a_registration_is_decided_at_the_registry_and_its_account_signs_in_at_its_own_shard() {
    let (mut two, _) = one_on_each();
    let other = 1 - usize::from(REGISTRY_SHARD.0);
    // The proof of work and the registration reach the other shard: both go to the registry.
    let (r, _) = at(
        &mut two,
        other,
        HttpRequest::new(Method::Post, paths::POW_CHALLENGE).from_addr("10.9.9.9"),
    );
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    let v = r.body_json();
    let nonce = relay_core::pow::solve(
        v["challenge_string"].as_str().unwrap(),
        u32::try_from(v["difficulty"].as_u64().unwrap()).unwrap(),
    );
    // Keys no world here made.
    let sk = ed25519_dalek::SigningKey::from_bytes(&[201; 32]);
    let x = [77; 32];
    let (r, _) = at(
        &mut two,
        other,
        register_request(&sk, x, "newcomer", &nonce, "10.9.9.9"),
    );
    assert_eq!(r.status, 201, "{:?}", r.body_json());
    let uuid = r.body_json()["uuid"].as_str().unwrap().to_owned();
    assert!(two.shards[other].relay.stats().requests_forwarded >= 2);
    // The same keys again, wherever they arrive, meet the one registry: 409.
    let (r, _) = at(
        &mut two,
        other,
        register_request(&sk, x, "newcomer", &nonce, "10.9.9.9"),
    );
    assert_eq!(r.status, 409, "{:?}", r.body_json());
    // Sign-in reaches shard 0 and 1 alike: the account's shard decides it.
    for i in [0, 1] {
        let (c, _) = at(
            &mut two,
            i,
            post(paths::AUTH_CHALLENGE, &json!({"user_uuid": uuid}), None),
        );
        assert_eq!(c.status, 200, "{:?}", c.body_json());
        let challenge = c.body_json()["challenge"].as_str().unwrap().to_owned();
        use ed25519_dalek::Signer as _;
        let sig = sk.sign(challenge.as_bytes());
        let body =
            json!({"user_uuid": uuid, "challenge": challenge, "signature": b64(&sig.to_bytes())});
        let (r, _) = at(&mut two, i, post(paths::AUTH_VERIFY, &body, None));
        assert_eq!(r.status, 200, "{:?}", r.body_json());
        // Its token works at either shard for the caller's routes.
        let token = r.body_json()["token"].as_str().unwrap().to_owned();
        let (r, _) = at(
            &mut two,
            1 - i,
            HttpRequest::new(Method::Get, paths::FRIENDS).bearer(&token),
        );
        assert_eq!(r.status, 200, "{:?}", r.body_json());
    }
}

#[test]
fn a_channel_post_reaches_its_subscribers_on_every_shard() {
    let (mut two, users) = one_on_each();
    let owner = &users[1];
    let (r, _) = at(
        &mut two,
        1,
        post(
            paths::CHANNELS,
            &json!({"name": "feed", "description": "d", "is_public": true}),
            Some(&owner.token),
        ),
    );
    assert_eq!(r.status, 201, "{:?}", r.body_json());
    let ch = r.body_json()["channel_id"].as_str().unwrap().to_owned();
    let (r, _) = at(
        &mut two,
        0,
        post(
            &paths::with(paths::CHANNEL_SUBSCRIBE, &ch),
            &json!({}),
            Some(&users[0].token),
        ),
    );
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    let (r, outs) = at(
        &mut two,
        1,
        post(
            &paths::with(paths::CHANNEL_POSTS, &ch),
            &json!({"content": "hello"}),
            Some(&owner.token),
        ),
    );
    assert_eq!(r.status, 201, "{:?}", r.body_json());
    for u in &users {
        let got = frames(&outs, u.conn.unwrap());
        assert!(
            matches!(&got[..], [ServerFrame::ChannelPost(p)] if p.channel_id.as_str() == ch),
            "{got:?}"
        );
    }
}

/// The payment webhook's request for `order`, paid in full.
fn paid(order: &str, price: u64) -> HttpRequest {
    let body = json!({"payment_id": format!("pay-{order}"), "order_id": order, "payment_status": "finished", "paid_usdt": price})
        .to_string();
    let sig = relay_core::payments::sign_webhook(SECRET, body.as_bytes());
    HttpRequest::new(Method::Post, paths::PAYMENT_WEBHOOK)
        .body(body)
        .header("x-payment-signature", sig)
}

#[test]
fn a_confirmation_and_a_bind_for_a_buyer_of_another_shard_reach_it_there() {
    let (mut two, mut users) = one_on_each();
    let buyer = users[1].clone();
    let (r, _) = at(
        &mut two,
        1,
        post(
            paths::VANITY_PURCHASE,
            &json!({"alias_id": "88888888"}),
            Some(&buyer.token),
        ),
    );
    assert_eq!(r.status, 201, "{:?}", r.body_json());
    let order = r.body_json()["order_id"].as_str().unwrap().to_owned();
    let price = r.body_json()["price_usdt"].as_u64().unwrap();
    // The webhook reaches the buyer's shard: the registry decides it, and the buyer's shard
    // sends the confirmation live and keeps it.
    let (r, outs) = at(&mut two, 1, paid(&order, price));
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    let live: Vec<_> = frames(&outs, buyer.conn.unwrap())
        .into_iter()
        .filter(|f| matches!(f, ServerFrame::PaymentConfirmed(_)))
        .collect();
    assert_eq!(live.len(), 1, "{outs:?}");
    // Kept at the buyer's shard, across its restart: its next sync sends it again.
    two.restart(1);
    let c = two.shards[1].connect(&mut users[1]);
    let again = two.shards[1].sync(c);
    assert!(
        frames(&again, c)
            .iter()
            .any(|f| matches!(f, ServerFrame::PaymentConfirmed(p) if p.order_id.as_str() == order)),
        "{again:?}"
    );
    // The bind is decided at the registry; the account changes at the buyer's shard.
    let token = users[1].token.clone();
    let bind = || {
        post(
            paths::VANITY_BIND,
            &json!({"order_id": order}),
            Some(&token),
        )
    };
    let (r, _) = at(&mut two, 1, bind());
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    let w = &mut two.shards[1];
    let r = w.get(
        &paths::with(paths::USER, "88888888"),
        Some(&users[1].token.clone()),
    );
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    // The other shard's copy of the account (the registry read it for the bind) takes the
    // new alias: its users find the buyer by it.
    let w = &mut two.shards[0];
    let r = w.get(
        &paths::with(paths::USER, "88888888"),
        Some(&users[0].token.clone()),
    );
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    // A retry of the bind is answered again, not refused.
    let (r, _) = at(&mut two, 1, bind());
    assert_eq!(r.status, 200, "{:?}", r.body_json());
}

/// A message addressed to an alias its recipient had before a bind is taken on a shard that
/// is not the registry (which alone holds the alias table): the account row keeps its former
/// aliases.
#[test]
fn a_former_alias_still_names_its_account_on_every_shard() {
    let mut setup = World::with_config(commerce_config());
    let map = relay_core::handoff::ShardMap::new(2).unwrap();
    let on_one = |u: &User| map.of_user(&wire::UserUuid::parse(&u.uuid).unwrap()).0 == 1;
    let mut mine = Vec::new();
    for n in 0..64 {
        let u = setup.user(&format!("user{n}"));
        if on_one(&u) {
            mine.push(u);
        }
        if mine.len() == 2 {
            break;
        }
    }
    let [mut buyer, mut friend]: [User; 2] = mine.try_into().expect("two users on shard 1");
    let conv = setup.befriend(&buyer, &friend);
    let mut two = Two::split(setup);
    for u in [&mut buyer, &mut friend] {
        let c = two.shards[1].connect(u);
        two.shards[1].sync(c);
    }
    buy_and_bind(&mut two, 1, &buyer, "77777777");
    // `buyer` still carries its former alias: the friend's client has not heard of the bind.
    let outs = two.shards[1].msg(&friend, &buyer, &conv, "to-the-old-alias");
    let acked = crate::world::acks(&frames(&outs, friend.conn.unwrap()));
    assert_eq!(acked.len(), 1, "{outs:?}");
}

/// A user of the registry shard binds an alias: another shard, which had read its account
/// before, takes the new alias too (a message to it from there is taken).
#[test]
fn a_bind_at_the_registry_reaches_every_other_shards_copy_of_the_account() {
    let mut setup = World::with_config(commerce_config());
    let (a, b) = across(&mut setup);
    let conv = setup.befriend(&a, &b);
    let mut two = Two::split(setup);
    let [mut buyer, mut friend] = if two.of(&a) == 0 { [a, b] } else { [b, a] };
    let c = two.shards[0].connect(&mut buyer);
    two.shards[0].sync(c);
    let c = two.shards[1].connect(&mut friend);
    two.shards[1].sync(c);
    // The friend's shard reads the buyer's account for this message.
    two.shards[1].msg(&friend, &buyer, &conv, "before");
    two.carry(|_, _| Fate::Deliver);
    buy_and_bind(&mut two, 0, &buyer, "66666666");
    two.carry(|_, _| Fate::Deliver);
    let renamed = User {
        alias: "66666666".into(),
        ..buyer.clone()
    };
    let mut outs = two.shards[1].msg(&friend, &renamed, &conv, "after");
    two.keep(&outs);
    // The owner may be either shard: the ack comes at once, or with the owner's verdict.
    outs.extend(two.carry(|_, _| Fate::Deliver));
    let acked = crate::world::acks(&frames(&outs, friend.conn.unwrap()));
    assert_eq!(acked.len(), 1, "{outs:?}");
}

/// `buyer` buys vanity alias `alias`, pays for it and binds it, each through shard `i`.
fn buy_and_bind(two: &mut Two, i: usize, buyer: &User, alias: &str) {
    let purchase = post(
        paths::VANITY_PURCHASE,
        &json!({"alias_id": alias}),
        Some(&buyer.token),
    );
    let (r, _) = at(two, i, purchase);
    assert_eq!(r.status, 201, "{:?}", r.body_json());
    let order = r.body_json()["order_id"].as_str().unwrap().to_owned();
    let price = r.body_json()["price_usdt"].as_u64().unwrap();
    let (r, _) = at(two, i, paid(&order, price));
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    let bind = post(
        paths::VANITY_BIND,
        &json!({"order_id": order}),
        Some(&buyer.token),
    );
    let (r, _) = at(two, i, bind);
    assert_eq!(r.status, 200, "{:?}", r.body_json());
}

/// Only the registry shard deletes expired tombstone rows (one range delete of every
/// shard's): another shard's sweep drops its expired tombstones from memory and writes
/// nothing, so no shard deletes rows of conversations it does not own.
#[test]
fn only_the_registry_collects_expired_tombstones() {
    let mut setup = World::new();
    let (a, b) = across(&mut setup);
    let conv = setup.befriend(&a, &b);
    let mut two = Two::split(setup);
    let mut users = if two.of(&a) == 0 { [a, b] } else { [b, a] };
    for (i, u) in users.iter_mut().enumerate() {
        let c = two.shards[i].connect(u);
        two.shards[i].sync(c);
    }
    for (i, id) in [(0, "m0"), (1, "m1")] {
        let outs = two.shards[i].msg(&users[i], &users[1 - i], &conv, id);
        two.keep(&outs);
        two.carry(|_, _| Fate::Deliver);
    }
    let stored = two.rows(Table::Tombstones);
    assert_eq!(stored, 2, "one tombstone per message");
    let past = relay_core::limits::TOMBSTONE_TTL_MS + 60_000;
    let other = 1 - usize::from(REGISTRY_SHARD.0);
    for i in [other, usize::from(REGISTRY_SHARD.0)] {
        let w = &mut two.shards[i];
        w.now = w.now.plus_ms(past);
        w.relay.handle_timeout(w.now);
        let outs = w.drain();
        two.keep(&outs);
        let left = if i == other { stored } else { 0 };
        assert_eq!(two.rows(Table::Tombstones), left, "after shard {i}'s sweep");
    }
}

/// The storage estimate of a user of another shard than the registry counts its media too:
/// its shard counts its queues and forwards the estimate to the registry, which holds the
/// media and answers the whole of it.
#[test]
fn a_storage_estimate_counts_the_media_the_registry_holds() {
    let (mut two, users) = one_on_each();
    let registry = usize::from(REGISTRY_SHARD.0);
    let other = 1 - registry;
    let store = Box::new(two.shards[registry].mem.clone());
    let blobs = Box::new(relay_core::MemoryBlobStore::new());
    two.shards[registry].restart_with_blobs(store, blobs);
    let u = &users[other];
    let init = post(
        paths::MEDIA_INIT,
        &json!({"content_type": "application/octet-stream"}),
        Some(&u.token),
    );
    let (r, _) = at(&mut two, other, init);
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    let v = r.body_json();
    let (upload, key) = (
        v["upload_id"].as_str().unwrap(),
        v["media_key"].as_str().unwrap(),
    );
    let chunk = HttpRequest::new(
        Method::Post,
        format!("/api/v1/media/upload-parts/{upload}/chunk?mediaKey={key}&partNumber=1"),
    )
    .body(vec![7; 1_000])
    .bearer(&u.token);
    let (r, _) = at(&mut two, other, chunk);
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    let estimate = HttpRequest::new(Method::Get, paths::STORAGE_ESTIMATE).bearer(&u.token);
    let (r, _) = at(&mut two, other, estimate);
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    assert_eq!(r.body_json()["used_bytes"], 1_000, "{:?}", r.body_json());
    assert_eq!(two.shards[other].relay.stats().requests_forwarded, 3);
}
