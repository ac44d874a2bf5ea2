//! Accounts live in the store and are read when needed: by uuid (a login, a token's check, a
//! member's alias on a routed frame) and by alias or public key through the `account_index`
//! rows written with the account. Nothing of them is read at start, and past the account
//! cache's bound only what a batch in flight wrote stays in memory.

use relay_core::store::{Mutation, Store as _, Table};
use serde_json::{Value, json};
use wire::http::paths;

use crate::orders::{commerce_config, pay, purchase};
use crate::world::{World, acks, both_online, errors, frames, msgs};

fn without_account_cache() -> relay_core::Config {
    relay_core::Config {
        account_cache_bytes: 0,
        ..commerce_config()
    }
}

/// The uuid each `account_index` row names, by key.
fn index(w: &World) -> Vec<(String, String)> {
    w.rows(Table::AccountIndex)
        .into_iter()
        .map(|(k, v)| (k, serde_json::from_slice::<String>(&v).unwrap()))
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Without an account cache an account is in memory only while an input uses it: a restart
/// reads none, and every request, lookup and routed frame reads the accounts it needs.
#[test]
fn accounts_stay_in_the_store_and_are_read_back_when_needed() {
    let mut w = World::with_config(without_account_cache());
    let (mut a, mut b, conv) = both_online(&mut w);
    assert_eq!(w.relay.account_cache().accounts, 0, "evicted once durable");
    let (ka, kb) = (
        a.sk.verifying_key().to_bytes(),
        b.sk.verifying_key().to_bytes(),
    );
    let mut want = vec![
        (format!("alias/{}", a.alias), a.uuid.clone()),
        (format!("alias/{}", b.alias), b.uuid.clone()),
        (format!("ed25519/{}", hex(&ka)), a.uuid.clone()),
        (format!("ed25519/{}", hex(&kb)), b.uuid.clone()),
        (format!("x25519/{}", hex(&a.x25519)), a.uuid.clone()),
        (format!("x25519/{}", hex(&b.x25519)), b.uuid.clone()),
    ];
    want.sort();
    assert_eq!(index(&w), want);

    w.restart(Box::new(w.mem.clone()));
    assert_eq!(w.relay.account_cache().accounts, 0, "nothing read at start");
    assert_eq!(w.relay.stats().accounts_read, 0);
    // A token issued before the restart is checked against the stored account.
    let profile = w.get(&paths::with(paths::USER, &b.alias), Some(&a.token));
    assert_eq!(profile.status, 200, "{:?}", profile.body_json());
    assert_eq!(
        profile.body_json()["alias_id"],
        Value::from(b.alias.clone())
    );
    assert_eq!(
        w.relay.stats().accounts_read,
        2,
        "the caller by uuid, b by alias"
    );
    assert_eq!(w.relay.account_cache().accounts, 0);
    let friends = w.get(paths::FRIENDS, Some(&b.token)).body_json();
    assert_eq!(friends[0]["alias_id"], Value::from(a.alias.clone()));
    // Messages both ways, each reading the accounts it names.
    let ca = w.connect(&mut a);
    w.sync(ca);
    let cb = w.connect(&mut b);
    w.sync(cb);
    let outs = w.msg(&a, &b, &conv, "m1");
    assert_eq!(acks(&frames(&outs, ca)), [("m1".to_owned(), 1)]);
    let got = frames(&outs, cb);
    assert_eq!(msgs(&got), [("m1".to_owned(), 1)]);
    assert!(
        matches!(&got[0], wire::ServerFrame::Msg(m) if m.from.as_str() == a.alias),
        "{got:?}"
    );
    assert_eq!(w.relay.account_cache().accounts, 0);
}

/// A registration's duplicate key is found through the index row, with no account in memory.
#[test]
fn a_registered_key_is_found_in_the_store() {
    let mut w = World::with_config(without_account_cache());
    let a = w.user("a");
    w.restart(Box::new(w.mem.clone()));
    let (_, other_x) = w.fresh_keys();
    let r = w.register_with(&a.sk, other_x, "again", "10.9.0.1");
    assert_eq!(r.status, 409, "{:?}", r.body_json());
    let v = r.body_json();
    assert_eq!(
        (v["uuid"].as_str(), v["key"].as_str()),
        (Some(a.uuid.as_str()), Some("ed25519"))
    );
    let (other_sk, _) = w.fresh_keys();
    let r = w.register_with(&other_sk, a.x25519, "again", "10.9.0.2");
    assert_eq!(r.status, 409, "{:?}", r.body_json());
    assert_eq!(r.body_json()["key"], "x25519");
    assert_eq!(w.rows(Table::Accounts).len(), 1);
}

/// Two registrations of one key in consecutive batches, the first not yet committed: the
/// second meets it in memory (the store does not have it yet) and gets 409.
#[test]
fn a_registration_in_flight_is_found_in_memory() {
    let mut w = World::with_config(without_account_cache());
    w.pipeline();
    let (sk, x) = w.fresh_keys();
    let first = w.register_with(&sk, x, "first", "10.9.0.3");
    assert_eq!(first.status, 201);
    assert!(w.seal(), "the registration is in flight");
    let (_, other_x) = w.fresh_keys();
    let second = w.register_with(&sk, other_x, "second", "10.9.0.4");
    assert_eq!(second.status, 409, "{:?}", second.body_json());
    assert_eq!(second.body_json()["uuid"], first.body_json()["uuid"]);
    w.settle();
    assert_eq!(w.rows(Table::Accounts).len(), 1);
}

/// A failed account read answers 503 `STORAGE_UNAVAILABLE` (an error frame for a frame, no
/// ack) and changes nothing: the retry succeeds as if the first try had not happened.
#[test]
fn a_failed_account_read_changes_nothing() {
    let mut w = World::with_config(without_account_cache());
    let (mut a, mut b, conv) = both_online(&mut w);
    let c = w.user("c");
    let ca = w.connect(&mut a);
    w.sync(ca);
    let cb = w.connect(&mut b);
    w.sync(cb);
    let friendships = w.rows(Table::Friendships).len();

    // A token's check.
    w.mem.fail_reads(1);
    let r = w.get(paths::FRIENDS, Some(&a.token));
    assert_eq!(
        (r.status, r.error_code().as_deref()),
        (503, Some("STORAGE_UNAVAILABLE"))
    );
    // A friend request.
    w.mem.fail_reads(1);
    let r = w.post(
        paths::FRIEND_REQUEST,
        json!({"to_alias_id": c.alias}),
        Some(&a.token),
    );
    assert_eq!(r.status, 503, "{:?}", r.body_json());
    assert_eq!(w.rows(Table::Friendships).len(), friendships);
    w.mem.fail_reads(0);
    let r = w.post(
        paths::FRIEND_REQUEST,
        json!({"to_alias_id": c.alias}),
        Some(&a.token),
    );
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    assert_eq!(w.rows(Table::Friendships).len(), friendships + 1);

    // A message: the other member's account, read before anything is written.
    w.mem.fail_reads(1);
    let outs = w.msg(&a, &b, &conv, "m1");
    assert_eq!(errors(&frames(&outs, ca)), ["STORAGE_UNAVAILABLE"]);
    assert!(acks(&frames(&outs, ca)).is_empty());
    assert!(msgs(&frames(&outs, cb)).is_empty());
    let outs = w.msg(&a, &b, &conv, "m1");
    assert_eq!(
        acks(&frames(&outs, ca)),
        [("m1".to_owned(), 1)],
        "no seq used"
    );
    assert_eq!(msgs(&frames(&outs, cb)), [("m1".to_owned(), 1)]);
}

/// A vanity bind replaces the alias's index row in the account's commit; while that commit
/// is in flight the old alias's stored row still names the account, and the account (in
/// memory) wins: the old alias finds nobody, the new one finds it, before and after a restart.
#[test]
fn an_alias_index_row_follows_a_bind() {
    let mut w = World::with_config(without_account_cache());
    let mut a = w.user("a");
    let b = w.user("b");
    let old = a.alias.clone();
    let p = purchase(&mut w, &a, "88888888");
    assert_eq!(p.status, 201, "{:?}", p.body_json());
    let o = p.body_json()["order_id"].as_str().unwrap().to_owned();
    pay(&mut w, &o, 1500);
    w.pipeline();
    let r = w.post(paths::VANITY_BIND, json!({"order_id": o}), Some(&a.token));
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    assert!(w.seal(), "the bind is in flight");
    let old_row = format!("alias/{old}");
    assert!(
        index(&w).iter().any(|(k, _)| *k == old_row),
        "not committed yet"
    );
    let lookup = |w: &mut World, alias: &str| {
        w.get(&paths::with(paths::USER, alias), Some(&b.token))
            .status
    };
    assert_eq!(lookup(&mut w, &old), 404, "the account in memory wins");
    assert_eq!(lookup(&mut w, "88888888"), 200);
    w.settle();
    a.alias = "88888888".into();
    let idx = index(&w);
    assert!(!idx.iter().any(|(k, _)| *k == old_row), "{idx:?}");
    assert!(idx.contains(&("alias/88888888".to_owned(), a.uuid.clone())));
    w.restart(Box::new(w.mem.clone()));
    assert_eq!(lookup(&mut w, &old), 404);
    assert_eq!(lookup(&mut w, "88888888"), 200);
}

/// A store written before the index rows existed (accounts only) is indexed at its first
/// start, and the accounts are found by alias and key again.
#[test]
fn a_store_without_index_rows_is_indexed_at_start() {
    let mut w = World::with_config(without_account_cache());
    let a = w.user("a");
    let b = w.user("b");
    let want = index(&w);
    let mut store = w.mem.clone();
    let mut forget: Vec<Mutation> = want
        .iter()
        .map(|(k, _)| Mutation::Delete {
            table: Table::AccountIndex,
            key: k.clone(),
        })
        .collect();
    forget.push(Mutation::Delete {
        table: Table::Meta,
        key: "account_index".into(),
    });
    store.commit(&forget.into()).unwrap();
    assert!(index(&w).is_empty());
    w.restart(Box::new(w.mem.clone()));
    assert_eq!(index(&w), want);
    let r = w.get(&paths::with(paths::USER, &b.alias), Some(&a.token));
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    let (_, x) = w.fresh_keys();
    let r = w.register_with(&a.sk, x, "again", "10.9.0.5");
    assert_eq!(r.status, 409);
}
