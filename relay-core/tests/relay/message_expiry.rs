//! Queued messages expire by the store's index on their expiry: each row carries the time its
//! offline TTL ends (fixed when the message was accepted), and one sweep, due at the earliest
//! stored expiry, reads the due keys in pages and takes each message out of its queue with its
//! index entry and the backlog. Nothing per queue or per message waits in memory.

use relay_core::limits::{EXPIRY_PAGE_PAUSE_MS, EXPIRY_PAGE_ROWS, QUEUE_READ_RETRY_MS};
use relay_core::store::{Mutation, Store as _, StoreRead as _, Table};

use crate::world::{World, fast_config, online_and_offline};

/// Room for more queued messages than a sweep's page, and no queue cache (every queue is read
/// from the store when its messages expire).
fn roomy() -> relay_core::Config {
    relay_core::Config {
        queue_cache_bytes: 0,
        msgs_per_min_per_user: 1_000_000,
        frames_per_min_per_conn: 1_000_000,
        frame_burst_per_conn: 1_000_000,
        max_offline_queue_per_conversation: 10_000,
        max_offline_queue_per_recipient: 10_000,
        ..fast_config()
    }
}

/// The stored messages' expiries, in order.
fn stored_expiries(w: &World) -> Vec<u64> {
    let mut r = w.mem.clone();
    r.expired(Table::Messages, u64::MAX, None, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|(_, at)| at)
        .collect()
}

/// More messages due at once than one page: each `handle_timeout` takes a page, and the relay
/// asks for the next a moment later (so inputs are handled between pages) until none is left.
#[test]
fn more_due_messages_than_a_page_go_page_by_page_at_the_same_instant() {
    let mut w = World::with_config(roomy());
    let ttl = w.relay.config().offline_ttl_ms;
    let (a, b, conv) = online_and_offline(&mut w);
    let n = EXPIRY_PAGE_ROWS + 100;
    for i in 0..n {
        w.msg(&a, &b, &conv, &format!("m{i}"));
    }
    w.restart(Box::new(w.mem.clone()));
    assert_eq!(w.relay.queued_messages(), n);
    w.advance(ttl - 1);
    assert_eq!(w.relay.queued_messages(), n, "nothing before its TTL");
    w.advance(1);
    assert_eq!(
        w.relay.queued_messages(),
        100,
        "one page per handle_timeout"
    );
    assert_eq!(
        w.relay.poll_timeout(),
        Some(w.now.plus_ms(EXPIRY_PAGE_PAUSE_MS)),
        "the next page is due a moment later"
    );
    w.advance(EXPIRY_PAGE_PAUSE_MS);
    assert_eq!(
        (w.relay.queued_messages(), w.relay.backlog_messages()),
        (0, 0)
    );
    assert!(w.rows(Table::Messages).is_empty());
    assert!(w.rows(Table::QueueIndex).is_empty());
    assert!(
        w.relay.poll_timeout().is_none_or(|at| at > w.now),
        "nothing left to sweep"
    );
}

/// A message keeps the TTL it was accepted with: a relay restarted with another TTL expires the
/// stored messages at their stored expiry and the new ones at the new TTL.
#[test]
fn a_message_keeps_the_ttl_it_was_accepted_with() {
    let mut w = World::with_config(roomy());
    let ttl = w.relay.config().offline_ttl_ms;
    let (a, b, conv) = online_and_offline(&mut w);
    let t0 = w.now;
    w.msg(&a, &b, &conv, "old");
    w.config.offline_ttl_ms = ttl * 2;
    w.restart(Box::new(w.mem.clone()));
    let (mut a, b) = (a, b);
    let ca = w.connect(&mut a);
    w.sync(ca);
    w.msg(&a, &b, &conv, "new");
    let t1 = w.now;
    assert_eq!(
        stored_expiries(&w),
        [t0.get() + ttl, t1.get() + 2 * ttl],
        "each row's expiry is its acceptance plus the TTL then in force"
    );
    w.now = t0;
    w.advance(ttl);
    assert_eq!(w.relay.queued_messages(), 1, "the old one at its old TTL");
    w.now = t1;
    w.advance(2 * ttl - 1);
    assert_eq!(w.relay.queued_messages(), 1);
    w.advance(1);
    assert_eq!(w.relay.queued_messages(), 0, "the new one at the new TTL");
}

/// A store whose messages were written without an expiry (before messages had one) gets them at
/// the first start, from each message's acceptance time and the relay's TTL, once.
#[test]
fn stored_messages_without_an_expiry_get_one_at_the_first_start() {
    let mut w = World::with_config(roomy());
    let ttl = w.relay.config().offline_ttl_ms;
    let (a, b, conv) = online_and_offline(&mut w);
    let t0 = w.now;
    w.msg(&a, &b, &conv, "m1");
    w.msg(&a, &b, &conv, "m2");
    // Back to the older layout: plain rows, and no meta row saying they were given expiries.
    let mut older: Vec<Mutation> = w
        .rows(Table::Messages)
        .into_iter()
        .map(|(key, value)| Mutation::Put {
            table: Table::Messages,
            key,
            value,
        })
        .collect();
    older.push(Mutation::Delete {
        table: Table::Meta,
        key: "message_expiry".into(),
    });
    w.mem.clone().commit(&older.into()).unwrap();
    assert!(stored_expiries(&w).is_empty());

    w.restart(Box::new(w.mem.clone()));
    assert_eq!(stored_expiries(&w), [t0.get() + ttl, t0.get() + ttl]);
    assert!(
        w.rows(Table::Meta)
            .iter()
            .any(|(k, _)| k == "message_expiry")
    );
    w.now = t0;
    w.advance(ttl - 1);
    assert_eq!(w.relay.queued_messages(), 2);
    w.advance(1);
    assert_eq!(w.relay.queued_messages(), 0);
    assert!(w.rows(Table::Messages).is_empty());
}

/// A failed read of the due keys puts the sweep off; the messages stay queued meanwhile and go
/// at the retry.
#[test]
fn a_failed_expiry_read_puts_the_sweep_off() {
    let mut w = World::with_config(roomy());
    let ttl = w.relay.config().offline_ttl_ms;
    let (a, b, conv) = online_and_offline(&mut w);
    w.msg(&a, &b, &conv, "m1");
    w.restart(Box::new(w.mem.clone()));
    w.advance(ttl - 1);
    let failures = w.relay.stats().queue_read_failures;
    w.mem.fail_reads(1);
    w.advance(1);
    assert_eq!(w.relay.queued_messages(), 1, "put off, not lost");
    assert_eq!(w.relay.stats().queue_read_failures, failures + 1);
    assert_eq!(w.rows(Table::Messages).len(), 1);
    w.advance(QUEUE_READ_RETRY_MS - 1);
    assert_eq!(w.relay.queued_messages(), 1);
    w.advance(1);
    assert_eq!(w.relay.queued_messages(), 0);
    assert!(w.rows(Table::Messages).is_empty());
}

/// Reads see only durable rows: a message whose commit is still in flight when its TTL ends is
/// swept once its batch is durable (the sweep is armed by the commit report, not by the write).
#[test]
fn a_message_whose_commit_outlasts_its_ttl_is_swept_once_durable() {
    let mut w = World::with_config(relay_core::Config {
        offline_ttl_ms: 1_000,
        ..roomy()
    });
    let (a, b, conv) = online_and_offline(&mut w);
    w.pipeline();
    let ca = a.conn.unwrap();
    let frame = serde_json::json!({"type":"msg","id":"m1","to":b.alias,"conv_id":conv,
        "crypto_v":1,"payload":crate::world::b64(b"p")});
    w.relay.handle_text(w.now, ca, &frame.to_string());
    assert!(w.seal(), "the message's batch is in flight");
    w.now = w.now.plus_ms(5_000);
    w.relay.handle_timeout(w.now);
    assert_eq!(w.relay.queued_messages(), 1, "not durable yet: not read");
    w.commit_next(true).unwrap();
    assert!(
        w.relay.poll_timeout().is_some_and(|at| at <= w.now),
        "due at once"
    );
    w.advance(0);
    assert_eq!(w.relay.queued_messages(), 0);
    assert!(w.rows(Table::Messages).is_empty());
}
