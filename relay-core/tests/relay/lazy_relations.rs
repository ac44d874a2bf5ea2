//! Conversations and friendships live in the store and are read when needed: a conversation
//! by its id (a `msg`, a receipt), a user's contacts with one prefix scan of the `contacts`
//! rows written with each friendship (a friends list, a friend request or answer, a call, a
//! `sync`). Nothing of them is read at start, and past the caches' bounds only what a batch in
//! flight wrote stays in memory.

use relay_core::store::{Mutation, Store as _, Table};
use serde_json::{Value, json};
use wire::http::paths;

use crate::world::{World, acks, both_online, closed, errors, frames, msgs};

fn without_relation_caches() -> relay_core::Config {
    relay_core::Config {
        conversation_cache_bytes: 0,
        contact_cache_bytes: 0,
        ..crate::world::fast_config()
    }
}

/// The friendship each `contacts` row holds, by key.
fn contact_rows(w: &World) -> Vec<(String, Value)> {
    w.rows(Table::Contacts)
        .into_iter()
        .map(|(k, v)| (k, serde_json::from_slice(&v).unwrap()))
        .collect()
}

/// Without the caches a conversation or contact list is in memory only while an input uses
/// it: a restart reads none, and the seq counters carry on from the stored row.
#[test]
fn conversations_and_contacts_stay_in_the_store_and_are_read_back_when_needed() {
    let mut w = World::with_config(without_relation_caches());
    let (mut a, mut b, conv) = both_online(&mut w);
    let cache = w.relay.relation_cache();
    assert_eq!(
        (cache.conversations, cache.contact_lists),
        (0, 0),
        "evicted once durable"
    );
    // One row per member, each the whole friendship.
    let rows = contact_rows(&w);
    assert_eq!(rows.len(), 2);
    for (uuid, (key, f)) in [&a.uuid, &b.uuid].into_iter().zip(&rows) {
        assert!(key.starts_with(&format!("{uuid}/")), "{key}");
        assert_eq!(f["status"], "accepted");
        assert_eq!(f["conversation_id"], conv.as_str());
    }
    let read = w.relay.stats().conversations_read;
    for id in ["m1", "m2"] {
        w.msg(&a, &b, &conv, id);
    }
    assert_eq!(
        w.relay.stats().conversations_read,
        read + 2,
        "one read per message"
    );

    w.restart(Box::new(w.mem.clone()));
    assert_eq!(
        w.relay.relation_cache().conversations,
        0,
        "nothing at start"
    );
    assert_eq!(w.relay.stats().contacts_read, 0);
    let ca = w.connect(&mut a);
    w.sync(ca);
    let cb = w.connect(&mut b);
    let outs = w.sync(cb);
    assert_eq!(
        msgs(&frames(&outs, cb)),
        [("m1".into(), 1), ("m2".into(), 2)]
    );
    assert_eq!(
        w.relay.stats().contacts_read,
        2,
        "each sync read its contacts"
    );
    let outs = w.msg(&a, &b, &conv, "m3");
    assert_eq!(
        acks(&frames(&outs, ca)),
        [("m3".into(), 3)],
        "the counter is the stored one"
    );
    let r = w.get(paths::ACTIVE_CONVERSATIONS, Some(&a.token));
    assert_eq!(r.body_json()["conversations"][0]["conv_id"], conv.as_str());
    let r = w.get(paths::FRIENDS, Some(&b.token));
    assert_eq!(r.body_json()[0]["conversation_id"], conv.as_str());
    assert_eq!(r.body_json()[0]["alias_id"], a.alias.as_str());
}

/// A failed conversation read refuses the message with `STORAGE_UNAVAILABLE` (no ack, no seq
/// used, nothing stored); the retry is stored as if the first try had not happened.
#[test]
fn a_failed_conversation_read_changes_nothing() {
    let mut w = World::with_config(relay_core::Config {
        conversation_cache_bytes: 0,
        ..crate::world::fast_config()
    });
    let (a, b, conv) = both_online(&mut w);
    let (ca, cb) = (a.conn.unwrap(), b.conn.unwrap());
    w.msg(&a, &b, &conv, "m1");
    let stored = w.rows(Table::Messages).len();
    // Everything else `m2` needs is in memory since `m1`: the one read is the conversation.
    w.mem.fail_reads(1);
    let outs = w.msg(&a, &b, &conv, "m2");
    assert_eq!(errors(&frames(&outs, ca)), ["STORAGE_UNAVAILABLE"]);
    assert!(acks(&frames(&outs, ca)).is_empty());
    assert!(msgs(&frames(&outs, cb)).is_empty());
    assert_eq!(w.relay.stats().conversation_read_failures, 1);
    assert_eq!(w.rows(Table::Messages).len(), stored);
    let outs = w.msg(&a, &b, &conv, "m2");
    assert_eq!(acks(&frames(&outs, ca)), [("m2".into(), 2)], "no seq used");
}

/// A failed contacts read answers 503 (a friends list, a friend request) or closes a `sync`
/// (1013, for the client to reconnect), and changes nothing.
#[test]
fn a_failed_contacts_read_changes_nothing() {
    let mut w = World::with_config(relay_core::Config {
        contact_cache_bytes: 0,
        ..crate::world::fast_config()
    });
    let (mut a, _b, _conv) = both_online(&mut w);
    let c = w.user("carol");
    // Accounts are in memory: the first read of each request is the caller's contacts.
    w.mem.fail_reads(1);
    let r = w.get(paths::FRIENDS, Some(&a.token));
    assert_eq!(
        (r.status, r.error_code().as_deref()),
        (503, Some("STORAGE_UNAVAILABLE"))
    );
    let (friendships, contacts) = (
        w.rows(Table::Friendships).len(),
        w.rows(Table::Contacts).len(),
    );
    w.mem.fail_reads(1);
    let r = w.post(
        paths::FRIEND_REQUEST,
        json!({"to_alias_id": c.alias}),
        Some(&a.token),
    );
    assert_eq!(r.status, 503, "{:?}", r.body_json());
    assert_eq!(w.rows(Table::Friendships).len(), friendships);
    assert_eq!(w.rows(Table::Contacts).len(), contacts);
    let r = w.post(
        paths::FRIEND_REQUEST,
        json!({"to_alias_id": c.alias}),
        Some(&a.token),
    );
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    assert_eq!(w.rows(Table::Contacts).len(), contacts + 2);

    let ca = w.connect(&mut a);
    w.mem.fail_reads(1);
    let outs = w.sync(ca);
    assert_eq!(errors(&frames(&outs, ca)), ["STORAGE_UNAVAILABLE"]);
    assert!(closed(&outs, ca));
    assert_eq!(w.relay.stats().contact_read_failures, 3);
}

/// A friendship and a conversation written by a batch still in flight are in memory, whatever
/// the bounds: the answer to a request and the first message of an accept not yet durable
/// find them (the store does not have them yet).
#[test]
fn friendships_and_conversations_in_flight_are_found_in_memory() {
    let mut w = World::with_config(without_relation_caches());
    w.pipeline();
    let mut a = w.user("alice");
    let mut b = w.user("bob");
    let ca = w.connect(&mut a);
    w.sync(ca);
    let cb = w.connect(&mut b);
    w.sync(cb);
    let r = w.post(
        paths::FRIEND_REQUEST,
        json!({"to_alias_id": b.alias}),
        Some(&a.token),
    );
    let id = r.body_json()["friendship_id"].as_u64().unwrap();
    assert!(w.seal(), "the request is in flight");
    let r = w.http(
        relay_core::HttpRequest::new(
            relay_core::http::Method::Put,
            paths::with(paths::FRIEND_ACCEPT, id),
        )
        .bearer(&b.token),
    );
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    let conv = r.body_json()["conversation_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(w.seal(), "the accept is in flight");
    // Straight to the relay: the world's helpers would settle the batches in flight first.
    let m1 = json!({"type":"msg","id":"m1","to":b.alias,"conv_id":conv,"crypto_v":1,
        "payload":crate::world::b64(b"p-m1")});
    w.relay.handle_text(w.now, ca, &m1.to_string());
    assert!(w.seal(), "the message is in flight");
    assert_eq!(w.pending.len(), 3, "nothing durable yet");
    w.settle();
    let outs = w.released();
    assert_eq!(acks(&frames(&outs, ca)), [("m1".into(), 1)]);
    assert_eq!(msgs(&frames(&outs, cb)), [("m1".into(), 1)]);
    assert_eq!(contact_rows(&w).len(), 2);
    assert_eq!(w.rows(Table::Conversations).len(), 1);
}

/// A store written before the `contacts` rows existed (friendships by id only) is indexed at
/// its first start: friends lists, `sync` and the conversations work as before.
#[test]
fn a_store_without_contacts_rows_is_indexed_at_start() {
    let mut w = World::with_config(without_relation_caches());
    let (mut a, b, conv) = both_online(&mut w);
    w.msg(&a, &b, &conv, "m1");
    let mut older: Vec<Mutation> = w
        .rows(Table::Contacts)
        .into_iter()
        .map(|(key, _)| Mutation::Delete {
            table: Table::Contacts,
            key,
        })
        .collect();
    older.push(Mutation::Delete {
        table: Table::Meta,
        key: "contacts".into(),
    });
    let mut store = w.mem.clone();
    store.commit(&older.into()).unwrap();
    assert!(w.rows(Table::Contacts).is_empty());

    w.restart(Box::new(w.mem.clone()));
    assert_eq!(contact_rows(&w).len(), 2);
    assert!(w.rows(Table::Meta).iter().any(|(k, _)| k == "contacts"));
    let r = w.get(paths::FRIENDS, Some(&a.token));
    assert_eq!(r.body_json()[0]["conversation_id"], conv.as_str());
    let ca = w.connect(&mut a);
    w.sync(ca);
    let outs = w.msg(&a, &b, &conv, "m2");
    assert_eq!(acks(&frames(&outs, ca)), [("m2".into(), 2)]);
}

/// The receipts forwarded to the author of `conv`'s messages among `fs`: (kind, seq).
fn receipts(fs: &[wire::ServerFrame]) -> Vec<(&'static str, u64)> {
    fs.iter()
        .filter_map(|f| match f {
            wire::ServerFrame::Delivered(r) => Some(("delivered", r.seq.get())),
            wire::ServerFrame::Read(r) => Some(("read", r.seq.get())),
            _ => None,
        })
        .collect()
}

/// A conversation's receipt marks are read back with it (at its next receipt): a receipt the
/// author already got is not forwarded again after a restart, a new one is.
#[test]
fn receipt_marks_are_read_back_with_their_conversation() {
    let mut w = World::with_config(without_relation_caches());
    let (mut a, mut b, conv) = both_online(&mut w);
    let (ca, cb) = (a.conn.unwrap(), b.conn.unwrap());
    for id in ["m1", "m2"] {
        w.msg(&a, &b, &conv, id);
    }
    let delivered = json!({"type":"delivered","conv_id":conv,"seq":2,"to":a.alias});
    let outs = w.send(cb, delivered.clone());
    assert_eq!(receipts(&frames(&outs, ca)), [("delivered", 2)]);
    assert_eq!(w.relay.stats().receipt_marks_read, 1);

    w.restart(Box::new(w.mem.clone()));
    let ca = w.connect(&mut a);
    w.sync(ca);
    let cb = w.connect(&mut b);
    w.sync(cb);
    let outs = w.send(cb, delivered);
    assert!(errors(&frames(&outs, cb)).is_empty());
    assert!(
        receipts(&frames(&outs, ca)).is_empty(),
        "the stored mark covers it"
    );
    let outs = w.send(
        cb,
        json!({"type":"read","conv_id":conv,"seq":2,"to":a.alias}),
    );
    assert_eq!(receipts(&frames(&outs, ca)), [("read", 2)]);
    assert_eq!(
        w.relay.stats().receipt_marks_read,
        2,
        "once per read of the conversation"
    );
}

/// A receipt refused because a read failed still lets the messages it covers out of the
/// connection's window (the client has them and does not send a refused receipt again): the
/// window refills at once instead of stalling until the client reconnects, and the next
/// receipt that is applied does not count them twice.
#[test]
fn a_receipt_refused_for_a_failed_read_still_refills_the_window() {
    let mut w = World::with_config(relay_core::Config {
        conversation_cache_bytes: 0,
        sync_window_msgs: 2,
        ..crate::world::fast_config()
    });
    let (a, mut b, conv) = crate::world::online_and_offline(&mut w);
    for id in ["m1", "m2", "m3", "m4", "m5"] {
        w.msg(&a, &b, &conv, id);
    }
    let cb = w.connect(&mut b);
    let outs = w.sync(cb);
    assert_eq!(msgs(&frames(&outs, cb)).len(), 2, "a window of two");
    // The receipt's first read (its conversation: no cache) fails.
    w.mem.fail_reads(1);
    let outs = w.send(
        cb,
        json!({"type":"delivered","conv_id":conv,"seq":2,"to":a.alias}),
    );
    assert_eq!(errors(&frames(&outs, cb)), ["STORAGE_UNAVAILABLE"]);
    assert_eq!(
        msgs(&frames(&outs, cb)),
        [("m3".into(), 3), ("m4".into(), 4)],
        "the window refilled"
    );
    assert_eq!(w.rows(Table::Messages).len(), 5, "nothing deleted");
    // Applied: 1..4 leave the queue; m1 and m2 are not released twice, so the window holds
    // m3 and m4 until now and then exactly m5 comes.
    let outs = w.send(
        cb,
        json!({"type":"delivered","conv_id":conv,"seq":4,"to":a.alias}),
    );
    assert!(errors(&frames(&outs, cb)).is_empty());
    assert_eq!(msgs(&frames(&outs, cb)), [("m5".into(), 5)]);
    assert_eq!(w.rows(Table::Messages).len(), 1);
}
