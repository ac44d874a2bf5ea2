//! Edges of the message paths the broader tests pass over: the relay's message counters, the
//! stored form of a retraction, receipts at the edges of what was sent, and the delivery
//! window's accounting.

use relay_core::store::{Store as _, Table};
use serde_json::{Value, json};

use crate::world::online_and_offline as alice_and_offline_bob;
use crate::world::{User, World, acks, errors, frames};

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

/// (conv, seq) of the `msg` frames sent to `conn` among `outs`.
fn pushed(outs: &[relay_core::Output], conn: relay_core::ConnId) -> Vec<(String, u64)> {
    frames(outs, conn)
        .into_iter()
        .filter_map(|f| match f {
            wire::ServerFrame::Msg(m) => Some((m.conv_id.to_string(), m.seq.get())),
            _ => None,
        })
        .collect()
}

/// A conversation already waiting for its turn since the `sync` keeps one place in the turn
/// order when a new message arrives in it: the two backlogs still alternate.
#[test]
fn a_new_message_does_not_give_a_waiting_conversation_a_second_turn() {
    let mut w = World::with_config(relay_core::Config {
        sync_window_msgs: 1,
        ..crate::world::fast_config()
    });
    let mut r = w.user("reader");
    let mut a = w.user("a");
    let mut b = w.user("b");
    let conv_a = w.befriend(&a, &r);
    let conv_b = w.befriend(&b, &r);
    let ca = w.connect(&mut a);
    w.sync(ca);
    let cb = w.connect(&mut b);
    w.sync(cb);
    // A's backlog is the older one.
    for i in 1..=3 {
        w.msg(&a, &r, &conv_a, &format!("a{i}"));
        w.advance(1);
    }
    for i in 1..=3 {
        w.msg(&b, &r, &conv_b, &format!("b{i}"));
        w.advance(1);
    }
    let cr = w.connect(&mut r);
    let mut order = pushed(&w.sync(cr), cr);
    assert_eq!(order, [(conv_a.clone(), 1)]);
    // A writes again while both conversations wait for their turns.
    order.extend(pushed(&w.msg(&a, &r, &conv_a, "a4"), cr));
    // The reader acknowledges each message as it comes.
    while let Some((conv, seq)) = order.last().cloned() {
        let to = if conv == conv_a { &a.alias } else { &b.alias };
        let outs = w.send(
            cr,
            json!({"type":"delivered","conv_id":conv,"seq":seq,"to":to}),
        );
        let next = pushed(&outs, cr);
        if next.is_empty() {
            break;
        }
        order.extend(next);
    }
    let (ta, tb) = (conv_a.as_str(), conv_b.as_str());
    let got: Vec<(&str, u64)> = order.iter().map(|(c, s)| (c.as_str(), *s)).collect();
    assert_eq!(
        got,
        [
            (ta, 1),
            (tb, 1),
            (ta, 2),
            (tb, 2),
            (ta, 3),
            (tb, 3),
            (ta, 4)
        ]
    );
}

/// Acknowledges the last message pushed to `r` (from `a` in `conv_a`, else from `b`) until
/// nothing more comes; returns every (conv, seq) pushed, `order` included.
fn ack_until_idle(
    w: &mut World,
    r: &User,
    (a, conv_a): (&User, &str),
    b: &User,
    mut order: Vec<(String, u64)>,
) -> Vec<(String, u64)> {
    let cr = r.conn.unwrap();
    while let Some((conv, seq)) = order.last().cloned() {
        let to = if conv == conv_a { &a.alias } else { &b.alias };
        let next = pushed(
            &w.send(
                cr,
                json!({"type":"delivered","conv_id":conv,"seq":seq,"to":to}),
            ),
            cr,
        );
        if next.is_empty() {
            break;
        }
        order.extend(next);
    }
    order
}

/// A conversation that gets messages while another one waits for the window joins the turn
/// order once (a new one, or one whose earlier messages were all pushed).
#[test]
fn a_live_conversation_joins_the_turns_once_while_another_waits() {
    let mut w = World::with_config(relay_core::Config {
        sync_window_msgs: 1,
        ..crate::world::fast_config()
    });
    let mut r = w.user("reader");
    let mut a = w.user("a");
    let mut b = w.user("b");
    let conv_a = w.befriend(&a, &r);
    let conv_b = w.befriend(&b, &r);
    let ca = w.connect(&mut a);
    w.sync(ca);
    let cb = w.connect(&mut b);
    w.sync(cb);
    for i in 1..=3 {
        w.msg(&a, &r, &conv_a, &format!("a{i}"));
    }
    let cr = w.connect(&mut r);
    let mut order = pushed(&w.sync(cr), cr);
    // B is new on this connection: b1 and b2 arrive while A waits for the window.
    order.extend(pushed(&w.msg(&b, &r, &conv_b, "b1"), cr));
    order.extend(pushed(&w.msg(&b, &r, &conv_b, "b2"), cr));
    let order = ack_until_idle(&mut w, &r, (&a, &conv_a), &b, order);
    let (ta, tb) = (conv_a.as_str(), conv_b.as_str());
    let got: Vec<(&str, u64)> = order.iter().map(|(c, s)| (c.as_str(), *s)).collect();
    assert_eq!(got, [(ta, 1), (ta, 2), (tb, 1), (ta, 3), (tb, 2)]);
    // Everything was pushed: a4 goes out at once, a5 waits for it and follows its receipt.
    let mut order = pushed(&w.msg(&a, &r, &conv_a, "a4"), cr);
    order.extend(pushed(&w.msg(&a, &r, &conv_a, "a5"), cr));
    let order = ack_until_idle(&mut w, &r, (&a, &conv_a), &b, order);
    let got: Vec<(&str, u64)> = order.iter().map(|(c, s)| (c.as_str(), *s)).collect();
    assert_eq!(got, [(ta, 4), (ta, 5)]);
}

/// A conversation whose last message was pushed leaves the turns: it does not hold the front
/// against another conversation's backlog.
#[test]
fn a_conversation_with_nothing_left_gives_up_its_turn() {
    let mut w = World::with_config(relay_core::Config {
        sync_window_msgs: 2,
        ..crate::world::fast_config()
    });
    let mut r = w.user("reader");
    let mut a = w.user("a");
    let mut b = w.user("b");
    let conv_a = w.befriend(&a, &r);
    let conv_b = w.befriend(&b, &r);
    let ca = w.connect(&mut a);
    w.sync(ca);
    let cb = w.connect(&mut b);
    w.sync(cb);
    w.msg(&a, &r, &conv_a, "a1");
    w.advance(1);
    w.msg(&b, &r, &conv_b, "b1");
    w.msg(&b, &r, &conv_b, "b2");
    let cr = w.connect(&mut r);
    let outs = w.sync(cr);
    assert_eq!(
        pushed(&outs, cr),
        [(conv_a.clone(), 1), (conv_b.clone(), 1)]
    );
    let outs = w.send(
        cr,
        json!({"type":"delivered","conv_id":conv_a,"seq":1,"to":a.alias}),
    );
    assert_eq!(pushed(&outs, cr), [(conv_b.clone(), 2)]);
}

/// A message retracted while in flight gives its bytes back to the window, and only its own:
/// the bytes of what is still in flight keep counting.
#[test]
fn a_retraction_in_flight_frees_exactly_its_bytes_of_the_window() {
    // The world's `msg` frames: ids "m1".."m4", conversation ids "c-" + 24 hex digits,
    // payload base64("p-mN") (8 bytes).
    let cost = relay_core::limits::msg_frame_bytes(2, 26, 8);
    let mut w = World::with_config(relay_core::Config {
        sync_window_bytes: 2 * cost + cost / 2,
        ..crate::world::fast_config()
    });
    let (a, mut r, conv) = alice_and_offline_bob(&mut w);
    assert_eq!(conv.len(), 26);
    for i in 1..=4 {
        w.msg(&a, &r, &conv, &format!("m{i}"));
    }
    let cr = w.connect(&mut r);
    let outs = w.sync(cr);
    assert_eq!(pushed(&outs, cr), [(conv.clone(), 1), (conv.clone(), 2)]);
    let outs = w.send(
        a.conn.unwrap(),
        json!({"type":"retract","id":"m2","to":r.alias,"conv_id":conv}),
    );
    assert_eq!(pushed(&outs, cr), [(conv.clone(), 3)]);
}

/// With two conversations in flight, a retraction in one recounts that one only: the other's
/// bytes still fill the window.
#[test]
fn a_retraction_in_flight_keeps_the_other_conversation_s_bytes_counted() {
    let cost = relay_core::limits::msg_frame_bytes(2, 26, 8);
    let mut w = World::with_config(relay_core::Config {
        sync_window_bytes: 3 * cost + cost / 2,
        ..crate::world::fast_config()
    });
    let mut r = w.user("reader");
    let mut a = w.user("a");
    let mut b = w.user("b");
    let conv_a = w.befriend(&a, &r);
    let conv_b = w.befriend(&b, &r);
    let ca = w.connect(&mut a);
    w.sync(ca);
    let cb = w.connect(&mut b);
    w.sync(cb);
    w.msg(&a, &r, &conv_a, "a1");
    w.advance(1);
    for i in 1..=4 {
        w.msg(&b, &r, &conv_b, &format!("b{i}"));
    }
    let cr = w.connect(&mut r);
    let outs = w.sync(cr);
    assert_eq!(
        pushed(&outs, cr),
        [
            (conv_a.clone(), 1),
            (conv_b.clone(), 1),
            (conv_b.clone(), 2)
        ]
    );
    let outs = w.send(
        cb,
        json!({"type":"retract","id":"b2","to":r.alias,"conv_id":conv_b}),
    );
    assert_eq!(pushed(&outs, cr), [(conv_b.clone(), 3)]);
}

/// Dedup is per conversation. An author's id used again in another conversation is a new
/// message there, and a resend in either gets that conversation's first ack; the id the other
/// member already used in a conversation is refused with `ALREADY_EXISTS` (no ack, nothing
/// stored or delivered); a retraction names its conversation, and is the author's alone.
#[test]
fn message_ids_belong_to_their_conversation() {
    let mut w = World::new();
    let (mut a, mut b, c) = (w.user("a"), w.user("b"), w.user("c"));
    let ab = w.befriend(&a, &b);
    let ac = w.befriend(&a, &c);
    let ca = w.connect(&mut a);
    w.sync(ca);
    let cb = w.connect(&mut b);
    w.sync(cb);
    let sent = |w: &mut World, from: &User, to: &User, conv: &str, id: &str, conn| {
        acks(&frames(&w.msg(from, to, conv, id), conn))
    };
    assert_eq!(sent(&mut w, &a, &b, &ab, "x", ca), [("x".into(), 1)]);
    assert_eq!(sent(&mut w, &a, &c, &ac, "x", ca), [("x".into(), 1)]);
    let dedup = w.relay.stats().messages_deduplicated;
    assert_eq!(sent(&mut w, &a, &b, &ab, "x", ca), [("x".into(), 1)]);
    assert_eq!(sent(&mut w, &a, &c, &ac, "x", ca), [("x".into(), 1)]);
    assert_eq!(w.relay.stats().messages_deduplicated, dedup + 2);

    let messages = w.rows(Table::Messages).len();
    let outs = w.msg(&b, &a, &ab, "x");
    assert!(acks(&frames(&outs, cb)).is_empty());
    assert_eq!(errors(&frames(&outs, cb)), ["ALREADY_EXISTS"]);
    assert!(frames(&outs, ca).is_empty(), "nothing delivered: {outs:?}");
    assert_eq!(w.rows(Table::Messages).len(), messages);
    assert_eq!(sent(&mut w, &b, &a, &ab, "y", cb), [("y".into(), 2)]);

    let retract = |w: &mut World, conn, to: &User, conv: &str| {
        let frame = json!({"type":"retract","id":"x","to":to.alias,"conv_id":conv});
        errors(&frames(&w.send(conn, frame), conn))
    };
    assert_eq!(retract(&mut w, cb, &a, &ab), ["NOT_THE_AUTHOR"]);
    assert!(retract(&mut w, ca, &c, &ac).is_empty());
    let mut rows: Vec<_> = tombstones(&w, "x")
        .iter()
        .map(|r| (r["conv_id"] == *ac, r["retracted"].as_bool().unwrap()))
        .collect();
    rows.sort();
    assert_eq!(
        rows,
        [(false, false), (true, true)],
        "only ac's x is retracted"
    );
}

/// A store written by a relay that kept tombstones per author (`author/id`) is rekeyed by
/// conversation at the first start (values and expiries kept), and its ids still answer:
/// a resend gets its first ack, the other member's reuse is refused, the author may retract.
#[test]
fn tombstones_keyed_by_author_are_rekeyed_at_start() {
    let mut w = World::new();
    let (mut a, mut b, conv) = alice_and_offline_bob(&mut w);
    for id in ["m1", "m2", "m3"] {
        w.msg(&a, &b, &conv, id);
    }
    let rows = w.rows(Table::Tombstones);
    assert_eq!(rows.len(), 3);
    // The store as an older relay left it: tombstones keyed by author, no meta row.
    let mut old = relay_core::store::Batch::new();
    for (key, value) in &rows {
        let row: Value = serde_json::from_slice(value).unwrap();
        let author_key = format!(
            "{}/{}",
            row["author"].as_str().unwrap(),
            row["id"].as_str().unwrap()
        );
        old.delete(Table::Tombstones, key);
        old.put_expiring(
            Table::Tombstones,
            &author_key,
            value,
            row["expires_at"].as_u64().unwrap(),
        );
    }
    old.delete(Table::Meta, "tombstones_by_conversation");
    w.mem.clone().commit(&old).unwrap();
    assert!(
        w.rows(Table::Tombstones)
            .iter()
            .all(|(k, _)| k.starts_with(&a.uuid))
    );

    let store = w.mem.clone();
    w.restart(Box::new(store));
    assert_eq!(w.rows(Table::Tombstones), rows, "rekeyed, values kept");
    let store = w.mem.clone();
    w.restart(Box::new(store));
    assert_eq!(w.rows(Table::Tombstones), rows, "once");
    w.login(&mut a);
    let ca = w.connect(&mut a);
    w.sync(ca);
    assert_eq!(
        acks(&frames(&w.msg(&a, &b, &conv, "m2"), ca)),
        [("m2".into(), 2)]
    );
    assert_eq!(
        acks(&frames(&w.msg(&a, &b, &conv, "m4"), ca)),
        [("m4".into(), 4)]
    );
    w.login(&mut b);
    let cb = w.connect(&mut b);
    w.sync(cb);
    assert_eq!(
        errors(&frames(&w.msg(&b, &a, &conv, "m1"), cb)),
        ["ALREADY_EXISTS"]
    );
    let frame = json!({"type":"retract","id":"m3","to":b.alias,"conv_id":conv});
    assert!(errors(&frames(&w.send(ca, frame), ca)).is_empty());
    assert_eq!(tombstones(&w, "m3")[0]["retracted"], true);
}

/// The `retract` frames among `outs` sent to `conn`, as (conversation, id).
fn retracts(outs: &[relay_core::Output], conn: relay_core::ConnId) -> Vec<(String, String)> {
    let mut got: Vec<_> = frames(outs, conn)
        .into_iter()
        .filter_map(|f| match f {
            wire::ServerFrame::Retract(r) => Some((r.conv_id.to_string(), r.id.to_string())),
            _ => None,
        })
        .collect();
    got.sort();
    got
}

/// Retractions kept for an offline recipient are its conversations': two senders who retract
/// the same id in their conversations with it both reach it at its next sync, also when a
/// row was kept by an older relay under `recipient/id` (rekeyed at start).
#[test]
fn kept_retractions_are_keyed_by_conversation() {
    let mut w = World::new();
    let (mut a, mut b, mut r) = (w.user("a"), w.user("b"), w.user("r"));
    let ar = w.befriend(&a, &r);
    let br = w.befriend(&b, &r);
    let ca = w.connect(&mut a);
    w.sync(ca);
    let cb = w.connect(&mut b);
    w.sync(cb);
    w.msg(&a, &r, &ar, "x");
    w.msg(&b, &r, &br, "x");
    for (conn, conv) in [(ca, &ar), (cb, &br)] {
        let frame = json!({"type":"retract","id":"x","to":r.alias,"conv_id":conv});
        assert!(errors(&frames(&w.send(conn, frame), conn)).is_empty());
    }
    let kept = w.rows(Table::PendingRetracts);
    assert_eq!(kept.len(), 2, "one per conversation");
    let mut both = vec![(ar.clone(), "x".to_owned()), (br.clone(), "x".to_owned())];
    both.sort();
    let cr = w.connect(&mut r);
    assert_eq!(retracts(&w.sync(cr), cr), both);

    // One row as an older relay kept it: `recipient/id`.
    let (key, value) = kept.iter().find(|(k, _)| k.contains(&ar)).unwrap().clone();
    let mut old = relay_core::store::Batch::new();
    old.delete(Table::PendingRetracts, &key);
    old.put(Table::PendingRetracts, &format!("{}/x", r.uuid), &value);
    w.mem.clone().commit(&old).unwrap();
    let store = w.mem.clone();
    w.restart(Box::new(store));
    let mut rows: Vec<_> = w
        .rows(Table::PendingRetracts)
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    rows.sort();
    let mut keys: Vec<_> = kept.iter().map(|(k, _)| k.clone()).collect();
    keys.sort();
    assert_eq!(rows, keys, "rekeyed at start");
    w.login(&mut r);
    let cr = w.connect(&mut r);
    assert_eq!(retracts(&w.sync(cr), cr), both);
}
