//! Queued messages expire by the store's index on the queues' expiry: each `queue_index` row
//! carries when its queue's oldest message's offline TTL ends, and one sweep, due at the
//! earliest stored expiry, reads the due queues in pages and takes their due messages out, with
//! the queue's row (and next expiry) and the backlog in step. Nothing per queue or per message
//! waits in memory.

use relay_core::limits::{
    Budget, EXPIRY_PAGE_MESSAGES, EXPIRY_PAGE_PAUSE_MS, EXPIRY_PAGE_ROWS, QUEUE_READ_RETRY_MS,
};
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

/// No budget on friend requests or account requests (one sender befriends hundreds).
fn unbudgeted() -> relay_core::Config {
    let any = Budget {
        burst: 1_000_000,
        per_window: 1_000_000,
        window_ms: 1,
    };
    relay_core::Config {
        friend_requests: any,
        account_requests: any,
        public_requests: any,
        registrations_per_hour_per_addr: 1_000_000,
        ..roomy()
    }
}

/// The stored queues' expiries, in order.
fn stored_expiries(w: &World) -> Vec<u64> {
    let mut r = w.mem.clone();
    r.expired(Table::QueueIndex, u64::MAX, None, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|(_, at)| at)
        .collect()
}

/// More queues due at once than one page: each `handle_timeout` takes a page, and the relay
/// asks for the next a moment later (so inputs are handled between pages) until none is left.
#[test]
fn more_due_queues_than_a_page_go_page_by_page_at_the_same_instant() {
    let mut w = World::with_config(unbudgeted());
    let ttl = w.relay.config().offline_ttl_ms;
    // 34 users, every two of them friends: 561 conversations, a message in each (from the
    // first of the two, never acknowledged), so 561 queues.
    let mut users: Vec<_> = (0..34).map(|i| w.user(&format!("u{i}"))).collect();
    let mut convs = Vec::new();
    for i in 0..users.len() {
        for j in i + 1..users.len() {
            convs.push((i, j, w.befriend(&users[i], &users[j])));
        }
    }
    let n = convs.len();
    assert!(n > EXPIRY_PAGE_ROWS);
    for u in &mut users {
        let c = w.connect(u);
        w.sync(c);
    }
    for (i, j, conv) in &convs {
        w.msg(&users[*i], &users[*j], conv, &format!("m{i}-{j}"));
    }
    w.restart(Box::new(w.mem.clone()));
    assert_eq!(w.relay.queued_messages(), n);
    w.advance(ttl - 1);
    assert_eq!(w.relay.queued_messages(), n, "nothing before its TTL");
    w.advance(1);
    assert_eq!(
        w.relay.queued_messages(),
        n - EXPIRY_PAGE_ROWS,
        "one page per handle_timeout"
    );
    let mut steps = 1;
    while w.relay.queued_messages() > 0 {
        assert_eq!(
            w.relay.poll_timeout(),
            Some(w.now.plus_ms(EXPIRY_PAGE_PAUSE_MS)),
            "the next page is due a moment later"
        );
        w.advance(EXPIRY_PAGE_PAUSE_MS);
        steps += 1;
        assert!(
            steps <= n.div_ceil(EXPIRY_PAGE_ROWS),
            "a page did not make progress"
        );
    }
    assert_eq!(steps, n.div_ceil(EXPIRY_PAGE_ROWS));
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

/// A step deletes at most about [`EXPIRY_PAGE_MESSAGES`] messages: it stops after the queue
/// that reaches the bound, and the next step goes on after that queue.
#[test]
fn a_step_stops_after_the_queue_that_reaches_the_message_bound() {
    let mut w = World::with_config(unbudgeted());
    let ttl = w.relay.config().offline_ttl_ms;
    let mut a = w.user("alice");
    let per = 1_000;
    let queues = EXPIRY_PAGE_MESSAGES / per + 2;
    let friends: Vec<_> = (0..queues)
        .map(|i| {
            let b = w.user(&format!("b{i}"));
            let conv = w.befriend(&a, &b);
            (b, conv)
        })
        .collect();
    let ca = w.connect(&mut a);
    w.sync(ca);
    for (i, (b, conv)) in friends.iter().enumerate() {
        for k in 0..per {
            w.msg(&a, b, conv, &format!("m{i}-{k}"));
        }
    }
    let total = queues * per;
    assert_eq!(w.relay.queued_messages(), total);
    w.advance(ttl);
    let first = total - w.relay.queued_messages();
    assert_eq!(
        first,
        EXPIRY_PAGE_MESSAGES.div_ceil(per) * per,
        "whole queues, up to the first that reaches the bound"
    );
    w.advance(EXPIRY_PAGE_PAUSE_MS);
    assert_eq!(w.relay.queued_messages(), 0, "the rest at the next step");
    assert!(w.rows(Table::QueueIndex).is_empty());
}

/// A queue whose oldest message expires keeps its younger ones, with its row's expiry moved to
/// the next oldest.
#[test]
fn a_queue_loses_only_its_due_messages_and_is_due_again_at_its_next_oldest() {
    let mut w = World::with_config(roomy());
    let ttl = w.relay.config().offline_ttl_ms;
    let (a, b, conv) = online_and_offline(&mut w);
    let t0 = w.now;
    w.msg(&a, &b, &conv, "m1");
    w.now = t0.plus_ms(5_000);
    w.msg(&a, &b, &conv, "m2");
    assert_eq!(stored_expiries(&w), [t0.get() + ttl]);
    w.restart(Box::new(w.mem.clone()));
    w.now = t0;
    w.advance(ttl);
    assert_eq!(w.relay.queued_messages(), 1, "m1 at its TTL, m2 kept");
    assert_eq!(stored_expiries(&w), [t0.get() + 5_000 + ttl]);
    w.advance(4_999);
    assert_eq!(w.relay.queued_messages(), 1);
    w.advance(1);
    assert_eq!(w.relay.queued_messages(), 0, "m2 at its TTL");
    assert!(w.rows(Table::QueueIndex).is_empty());
}

/// A relay restarted with another TTL re-times every queue at its start (the stored expiries
/// were written under the old one): the stored messages expire by the new TTL.
#[test]
fn a_start_under_another_ttl_retimes_every_queue() {
    let mut w = World::with_config(roomy());
    let ttl = w.relay.config().offline_ttl_ms;
    let (a, b, conv) = online_and_offline(&mut w);
    let t0 = w.now;
    w.msg(&a, &b, &conv, "m1");
    assert_eq!(stored_expiries(&w), [t0.get() + ttl]);
    w.config.offline_ttl_ms = ttl * 2;
    w.restart(Box::new(w.mem.clone()));
    assert_eq!(stored_expiries(&w), [t0.get() + 2 * ttl]);
    let meta = w.rows(Table::Meta);
    let recorded = meta.iter().find(|(k, _)| k == "queue_expiry_ttl");
    assert!(recorded.is_some(), "the TTL the rows were written under");
    w.now = t0;
    w.advance(ttl);
    assert_eq!(w.relay.queued_messages(), 1, "not at the old TTL");
    w.advance(ttl - 1);
    assert_eq!(w.relay.queued_messages(), 1);
    w.advance(1);
    assert_eq!(w.relay.queued_messages(), 0, "at the new TTL");
}

/// A store whose queue index rows have no expiry (written before queues had one) gets them at
/// the first start, from each queue's oldest message and the relay's TTL.
#[test]
fn queue_index_rows_without_an_expiry_get_one_at_the_first_start() {
    let mut w = World::with_config(roomy());
    let ttl = w.relay.config().offline_ttl_ms;
    let (a, b, conv) = online_and_offline(&mut w);
    let t0 = w.now;
    w.msg(&a, &b, &conv, "m1");
    w.msg(&a, &b, &conv, "m2");
    // Back to the older layout: plain rows, and no meta row saying they have expiries.
    let mut older: Vec<Mutation> = w
        .rows(Table::QueueIndex)
        .into_iter()
        .map(|(key, value)| Mutation::Put {
            table: Table::QueueIndex,
            key,
            value,
        })
        .collect();
    older.push(Mutation::Delete {
        table: Table::Meta,
        key: "queue_expiry_ttl".into(),
    });
    w.mem.clone().commit(&older.into()).unwrap();
    assert!(stored_expiries(&w).is_empty());

    w.restart(Box::new(w.mem.clone()));
    assert_eq!(stored_expiries(&w), [t0.get() + ttl]);
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
