//! Edges of the message paths the broader tests pass over: the relay's message counters, the
//! stored form of a retraction, receipts at the edges of what was sent, and the delivery
//! window's accounting.

use relay_core::store::{Store as _, Table};
use serde_json::{Value, json};

use crate::world::{User, World, acks, frames};

/// Alice (connected and synced) and Bob (registered, not connected), friends.
fn alice_and_offline_bob(w: &mut World) -> (User, User, String) {
    let mut a = w.user("alice");
    let b = w.user("bob");
    let conv = w.befriend(&a, &b);
    let ca = w.connect(&mut a);
    w.sync(ca);
    (a, b, conv)
}

/// Every accepted message counts once, as online or offline by where its recipient was; a
/// resend counts as deduplicated; a `sync` counts with the backlog it found.
#[test]
fn the_relay_counts_accepted_deduplicated_and_replayed_messages() {
    let mut w = World::new();
    let (a, mut b, conv) = alice_and_offline_bob(&mut w);
    let before = *w.relay.stats();
    w.msg(&a, &b, &conv, "m1");
    w.msg(&a, &b, &conv, "m2");
    w.msg(&a, &b, &conv, "m1");
    let s = *w.relay.stats();
    assert_eq!(
        s.messages_accepted_offline - before.messages_accepted_offline,
        2
    );
    assert_eq!(s.messages_accepted_online, before.messages_accepted_online);
    assert_eq!(s.messages_deduplicated - before.messages_deduplicated, 1);
    // Bob syncs with two messages waiting.
    let cb = w.connect(&mut b);
    w.sync(cb);
    let s = *w.relay.stats();
    assert_eq!(s.syncs - before.syncs, 1);
    assert_eq!(s.sync_backlog_messages - before.sync_backlog_messages, 2);
    // Now online: counted as such.
    w.msg(&a, &b, &conv, "m3");
    w.msg(&a, &b, &conv, "m4");
    w.msg(&a, &b, &conv, "m3");
    let s = *w.relay.stats();
    assert_eq!(
        s.messages_accepted_online - before.messages_accepted_online,
        2
    );
    assert_eq!(
        s.messages_accepted_offline - before.messages_accepted_offline,
        2
    );
    assert_eq!(s.messages_deduplicated - before.messages_deduplicated, 2);
    // A second sync finds the four messages still unacknowledged.
    w.sync(cb);
    let s = *w.relay.stats();
    assert_eq!(s.syncs - before.syncs, 2);
    assert_eq!(s.sync_backlog_messages - before.sync_backlog_messages, 6);
}

/// The stored tombstone rows of `w` that name the message id `id`, decoded.
fn tombstones(w: &World, id: &str) -> Vec<Value> {
    let snapshot = w.mem.clone().load().unwrap();
    snapshot
        .get(&Table::Tombstones)
        .into_iter()
        .flatten()
        .map(|(_, v)| serde_json::from_slice::<Value>(v).unwrap())
        .filter(|row| row["id"] == id)
        .collect()
}

/// A retraction is written to the message's tombstone, so it is known after a restart.
#[test]
fn a_retraction_is_stored_in_the_tombstone() {
    let mut w = World::new();
    let (a, b, conv) = alice_and_offline_bob(&mut w);
    let ca = a.conn.unwrap();
    w.msg(&a, &b, &conv, "m1");
    assert_eq!(tombstones(&w, "m1")[0]["retracted"], false);
    w.send(
        ca,
        json!({"type":"retract","id":"m1","to":b.alias,"conv_id":conv}),
    );
    let rows = tombstones(&w, "m1");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["retracted"], true, "{rows:?}");
    // A resend after the retraction still gets its first ack.
    let outs = w.msg(&a, &b, &conv, "m1");
    assert_eq!(acks(&frames(&outs, ca)), [("m1".into(), 1)]);
}
