//! Queued messages live in the store and are read per queue when needed: not at start, and
//! not kept in memory past the queue cache's bound unless a synced recipient or a batch in
//! flight holds them. What the relay must know of every queue at all times (its counts, its
//! oldest message and its sender) is its `queue_index` row, loaded at start.

use relay_core::store::{Mutation, Store as _, Table};
use serde_json::{Value, json};

use crate::world::{World, closed, errors, frames, msgs, online_and_offline};

fn without_queue_cache() -> relay_core::Config {
    relay_core::Config {
        queue_cache_bytes: 0,
        ..crate::world::fast_config()
    }
}

/// The seqs `sync` on `conn` replays, in order.
fn replayed(w: &mut World, conn: relay_core::ConnId) -> Vec<u64> {
    let outs = w.sync(conn);
    msgs(&frames(&outs, conn)).iter().map(|(_, s)| *s).collect()
}

fn conversation_row(w: &World, conv: &str) -> Value {
    let (_, v) = w
        .rows(Table::Conversations)
        .into_iter()
        .find(|(k, _)| k == conv)
        .expect("the conversation's row");
    serde_json::from_slice(&v).unwrap()
}

/// The messages queued in `conv` as the stored queue index counts them (both members; a queue
/// with none has no row).
fn queued_in_row(w: &World, conv: &str) -> u64 {
    w.rows(Table::QueueIndex)
        .into_iter()
        .map(|(k, v)| (k, serde_json::from_slice::<Value>(&v).unwrap()))
        .filter(|(_, v)| v["conv_id"] == conv)
        .inspect(|(k, v)| {
            assert_eq!(*k, format!("{}/{conv}", v["recipient"].as_str().unwrap()));
            assert!(v["msgs"].as_u64().unwrap() > 0, "an empty queue has no row");
        })
        .map(|(_, v)| v["msgs"].as_u64().unwrap())
        .sum()
}

/// Without a queue cache a recipient's queue is in memory only while an input uses it: a
/// message to an offline recipient reads nothing (it joins the queue's tail, which leaves
/// memory once durable), a restart reads none, the recipient's sync reads it and holds it
/// while synced, and its receipts delete rows the next start does not read back.
#[test]
fn queued_messages_stay_in_the_store_and_are_read_back_when_needed() {
    let mut w = World::with_config(without_queue_cache());
    let (mut a, mut b, conv) = online_and_offline(&mut w);
    for (i, id) in ["m1", "m2", "m3"].into_iter().enumerate() {
        w.msg(&a, &b, &conv, id);
        assert_eq!(w.relay.queue_cache().messages, 0, "evicted after {id}");
        assert_eq!(w.relay.stats().queues_read, 0, "read for message {i}");
    }
    assert_eq!(w.relay.queued_messages(), 3);
    assert_eq!(w.rows(Table::Messages).len(), 3);
    assert_eq!(queued_in_row(&w, &conv), 3);

    w.restart(Box::new(w.mem.clone()));
    assert_eq!(w.relay.queue_cache().queues, 0, "nothing read at start");
    assert_eq!(
        (w.relay.queued_messages(), w.relay.backlog_messages()),
        (3, 3)
    );
    let cb = w.connect(&mut b);
    let got = replayed(&mut w, cb);
    assert_eq!(got, [1, 2, 3]);
    assert_eq!(w.relay.stats().queues_read, 1);
    let ca = w.connect(&mut a);
    w.sync(ca);
    // Held while b is synced, whatever the bound.
    w.msg(&a, &b, &conv, "m4");
    assert_eq!(w.relay.queue_cache().messages, 4);
    w.send(
        cb,
        json!({"type":"delivered","conv_id":conv,"seq":2,"to":a.alias}),
    );
    assert_eq!(w.relay.queue_cache().messages, 2);
    w.relay.handle_disconnect(w.now, cb);
    w.drain();
    w.msg(&a, &b, &conv, "m5");
    assert_eq!(
        w.relay.queue_cache().messages,
        0,
        "released with b's connection"
    );

    w.restart(Box::new(w.mem.clone()));
    assert_eq!(w.relay.backlog_messages(), 3);
    let cb = w.connect(&mut b);
    let got = replayed(&mut w, cb);
    assert_eq!(got, [3, 4, 5], "the receipt's deletes were durable");
    assert_eq!(w.relay.stats().queue_summaries_repaired, 0);
}

/// A `sync` whose queue read fails replays nothing and closes the connection (1013 in the
/// shells): the relay runs on, and the client's next connection replays everything.
#[test]
fn a_failed_queue_read_closes_the_sync_and_the_next_sync_replays_everything() {
    let mut w = World::with_config(without_queue_cache());
    let (a, mut b, conv) = online_and_offline(&mut w);
    w.msg(&a, &b, &conv, "m1");
    w.msg(&a, &b, &conv, "m2");
    let cb = w.connect(&mut b);
    w.mem.fail_reads(1);
    let outs = w.sync(cb);
    assert_eq!(errors(&frames(&outs, cb)), ["STORAGE_UNAVAILABLE"]);
    assert!(msgs(&frames(&outs, cb)).is_empty());
    assert!(closed(&outs, cb));
    assert!(outs.iter().any(|o| matches!(
        o,
        relay_core::Output::Close { conn, reason: relay_core::CloseReason::StorageUnavailable }
            if *conn == cb
    )));
    assert!(!w.relay.is_failed());
    assert_eq!(w.relay.stats().queue_read_failures, 1);
    // Nothing held for the closed connection (a's empty queue is held for a's).
    w.msg(&a, &b, &conv, "m3");
    assert_eq!(w.relay.queue_cache().messages, 0);
    let cb = w.connect(&mut b);
    let got = replayed(&mut w, cb);
    assert_eq!(got, [1, 2, 3]);
}

/// A `msg` frame of `from` to `to` in `conv`.
fn msg_text(to: &crate::world::User, conv: &str, id: &str) -> String {
    json!({"type":"msg","id":id,"to":to.alias,"conv_id":conv,"crypto_v":1,
        "payload":crate::world::b64(id.as_bytes())})
    .to_string()
}

/// A message to a recipient connected but not synced, whose queue is only in the store, reads
/// nothing; a sync while its commit is still in flight replays it with the stored ones (the
/// tail in memory is laid over the rows read), and nothing needs repair after a restart.
#[test]
fn a_sync_while_a_tails_commit_is_in_flight_replays_the_tail_too() {
    let mut w = World::with_config(without_queue_cache());
    let (a, mut b, conv) = online_and_offline(&mut w);
    let ca = a.conn.unwrap();
    w.msg(&a, &b, &conv, "m1");
    w.msg(&a, &b, &conv, "m2");
    let cb = w.connect(&mut b);
    w.pipeline();
    w.relay.handle_text(w.now, ca, &msg_text(&b, &conv, "m3"));
    assert!(w.seal(), "m3's batch is in flight");
    assert_eq!(w.relay.stats().queues_read, 0);
    assert_eq!(
        w.relay.queue_cache().messages,
        1,
        "the tail, pinned until durable"
    );

    // The sync reads the store (m1, m2: m3's commit has not landed) and the tail.
    w.relay.handle_text(
        w.now,
        cb,
        &json!({"type": "sync", "crypto_v": 1}).to_string(),
    );
    w.settle();
    let got: Vec<u64> = msgs(&frames(&w.released(), cb))
        .iter()
        .map(|(_, s)| *s)
        .collect();
    assert_eq!(got, [1, 2, 3]);
    assert_eq!(w.relay.stats().queues_read, 1);
    assert_eq!(w.relay.stats().queue_summaries_repaired, 0);

    w.restart(Box::new(w.mem.clone()));
    let cb = w.connect(&mut b);
    assert_eq!(replayed(&mut w, cb), [1, 2, 3]);
    assert_eq!(w.relay.stats().queue_summaries_repaired, 0);
}

/// A read ahead of a queue that ran before the commit of its tail, and came back after the
/// tail left memory, lacks the tail's messages: it is not used, but read again.
#[test]
fn a_read_that_ran_before_a_tails_commit_is_read_again_once_the_tail_is_gone() {
    let mut w = World::with_config(without_queue_cache());
    let (a, mut b, conv) = online_and_offline(&mut w);
    let ca = a.conn.unwrap();
    w.msg(&a, &b, &conv, "m1");
    w.read_ahead(false);
    let cb = w.connect(&mut b);
    w.finish_reads();
    w.pipeline();
    w.relay.handle_text(w.now, ca, &msg_text(&b, &conv, "m2"));
    assert!(w.seal());
    // The sync waits for the queue's read, which runs now (m2's commit has not landed) ...
    w.relay.handle_text(
        w.now,
        cb,
        &json!({"type": "sync", "crypto_v": 1}).to_string(),
    );
    w.reads
        .as_mut()
        .unwrap()
        .extend(std::iter::from_fn(|| w.relay.poll_read()).map(|r| (r, None)));
    assert_eq!(w.reads_waiting(), 1, "the sync waits for the queue");
    w.run_early(0);
    // ... and comes back after it did, the tail evicted meanwhile.
    w.settle();
    assert_eq!(w.relay.queue_cache().messages, 0, "the tail left memory");
    let outs = w.finish_reads();
    let got: Vec<u64> = msgs(&frames(&outs, cb)).iter().map(|(_, s)| *s).collect();
    assert_eq!(got, [1, 2], "the stale read was used");
    assert_eq!(w.relay.stats().queue_summaries_repaired, 0);
}

/// A queue that is only in the store expires all the same: the sweep finds its rows by their
/// stored expiry, reads the queue, and deletes them with its index entry.
#[test]
fn a_queue_only_in_the_store_expires_at_its_ttl() {
    let mut w = World::with_config(without_queue_cache());
    let ttl = w.relay.config().offline_ttl_ms;
    let (a, b, conv) = online_and_offline(&mut w);
    w.msg(&a, &b, &conv, "m1");
    w.restart(Box::new(w.mem.clone()));
    w.advance(ttl - 1);
    assert_eq!(w.rows(Table::Messages).len(), 1);
    w.advance(1);
    assert!(w.rows(Table::Messages).is_empty());
    assert_eq!(
        (w.relay.queued_messages(), w.relay.backlog_messages()),
        (0, 0)
    );
    assert_eq!(queued_in_row(&w, &conv), 0);
}

/// A store written before the queue index existed (no `queue_index` rows nor meta row; its
/// conversation rows may carry the summaries older relays kept there, which are ignored) is
/// summarised from its messages once at the first start: counts, expiries and the replay are as
/// if the index had always been there.
#[test]
fn a_store_without_a_queue_index_is_summarised_once_at_start() {
    let mut w = World::new();
    let ttl = w.relay.config().offline_ttl_ms;
    let (a, mut b, conv) = online_and_offline(&mut w);
    for id in ["m1", "m2", "m3"] {
        w.msg(&a, &b, &conv, id);
    }
    // Back to the older layout: summaries (stale ones) in the conversation row, no index.
    let mut old = conversation_row(&w, &conv);
    old["queued"] = json!([
        {"msgs": 0, "bytes": 0, "oldest": 0},
        {"msgs": 9, "bytes": 9, "oldest": 1}
    ]);
    let mut older: Vec<Mutation> = w
        .rows(Table::QueueIndex)
        .into_iter()
        .map(|(key, _)| Mutation::Delete {
            table: Table::QueueIndex,
            key,
        })
        .collect();
    older.push(Mutation::Put {
        table: Table::Conversations,
        key: conv.clone(),
        value: serde_json::to_vec(&old).unwrap(),
    });
    older.push(Mutation::Delete {
        table: Table::Meta,
        key: "queue_index".into(),
    });
    let mut store = w.mem.clone();
    store.commit(&older.into()).unwrap();
    assert!(w.rows(Table::QueueIndex).is_empty());

    w.restart(Box::new(w.mem.clone()));
    assert_eq!(
        (w.relay.queued_messages(), w.relay.backlog_messages()),
        (3, 3)
    );
    assert_eq!(queued_in_row(&w, &conv), 3);
    assert!(w.rows(Table::Meta).iter().any(|(k, _)| k == "queue_index"));
    let cb = w.connect(&mut b);
    let got = replayed(&mut w, cb);
    assert_eq!(got, [1, 2, 3]);
    w.relay.handle_disconnect(w.now, cb);
    w.advance(ttl);
    assert!(w.rows(Table::Messages).is_empty(), "the sweep was armed");
}

/// Rows that disagree with the queue index (a store edited behind the relay's back) win when
/// the queue is read: the index and the queue bounds' counts follow them.
#[test]
fn stored_rows_win_over_a_summary_that_disagrees() {
    let mut w = World::with_config(without_queue_cache());
    let (a, mut b, conv) = online_and_offline(&mut w);
    for id in ["m1", "m2", "m3"] {
        w.msg(&a, &b, &conv, id);
    }
    let first = w.rows(Table::Messages).remove(0).0;
    let mut store = w.mem.clone();
    store
        .commit(
            &vec![Mutation::Delete {
                table: Table::Messages,
                key: first,
            }]
            .into(),
        )
        .unwrap();
    w.restart(Box::new(w.mem.clone()));
    assert_eq!(w.relay.backlog_messages(), 3, "as the index says");
    let cb = w.connect(&mut b);
    let got = replayed(&mut w, cb);
    assert_eq!(got, [2, 3]);
    assert_eq!(w.relay.stats().queue_summaries_repaired, 1);
    assert_eq!(
        (w.relay.queued_messages(), w.relay.backlog_messages()),
        (2, 2)
    );
    assert_eq!(queued_in_row(&w, &conv), 2);
}
