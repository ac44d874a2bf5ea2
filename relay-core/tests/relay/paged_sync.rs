//! A synced recipient's queue is held in memory from its oldest message as far as pages were
//! read, not whole: delivery pushes from that head, and what the window may take next is read
//! ahead by the frames that open it (receipts, new messages), before they run. Whatever the
//! page size, the replay is the whole queue in seq order, exactly once per sync, and nothing
//! expired, retracted or acknowledged comes back.

use serde_json::json;

use crate::world::{User, World, frames, msgs, online_and_offline};

/// No queue cache (what is not held leaves memory at once), a window of `window` messages and
/// pages of `page` messages; messages expire after 10 s (well within a connection's and a
/// token's life).
fn paged(window: usize, page: usize) -> relay_core::Config {
    relay_core::Config {
        queue_cache_bytes: 0,
        sync_window_msgs: window,
        queue_page_msgs: page,
        offline_ttl_ms: 10_000,
        ..crate::world::fast_config()
    }
}

/// The seqs pushed to `conn` among `outs`, in order.
fn pushed(outs: &[relay_core::Output], conn: relay_core::ConnId) -> Vec<u64> {
    msgs(&frames(outs, conn)).iter().map(|(_, s)| *s).collect()
}

/// `b` acknowledges `seq` of `conv` (from `a`); the seqs pushed to it in answer.
fn ack(w: &mut World, b: &User, a: &User, conv: &str, seq: u64) -> Vec<u64> {
    let cb = b.conn.unwrap();
    let outs = w.send(
        cb,
        json!({"type":"delivered","conv_id":conv,"seq":seq,"to":a.alias}),
    );
    pushed(&outs, cb)
}

/// `b` acknowledges `seq` of `conv` while the store fails its next read: the receipt is
/// refused `STORAGE_UNAVAILABLE`; the seqs pushed to it in answer all the same.
fn refused_ack(w: &mut World, b: &User, a: &User, conv: &str, seq: u64) -> Vec<u64> {
    let cb = b.conn.unwrap();
    w.mem.fail_reads(1);
    let outs = w.send(
        cb,
        json!({"type":"delivered","conv_id":conv,"seq":seq,"to":a.alias}),
    );
    let refused = crate::world::errors(&frames(&outs, cb));
    assert_eq!(refused, ["STORAGE_UNAVAILABLE"], "the receipt of {seq}");
    pushed(&outs, cb)
}

/// Alice queues `n` messages for Bob (offline); the relay restarts, so nothing of them is in
/// memory; Bob connects. Returns Alice, Bob and the conversation.
fn backlog(w: &mut World, n: usize) -> (User, User, String) {
    let (a, mut b, conv) = online_and_offline(w);
    for i in 1..=n {
        w.msg(&a, &b, &conv, &format!("m{i}"));
    }
    w.restart(Box::new(w.mem.clone()));
    let mut a = a;
    w.connect(&mut a);
    w.connect(&mut b);
    (a, b, conv)
}

/// Bob syncs and acknowledges each message as it comes; returns every seq pushed, in order,
/// checking after each step that memory holds no more than `held_at_most` messages and that
/// the window stays full (`window` in flight, or all that is left).
fn drain_acking(
    w: &mut World,
    (a, b, conv): (&User, &User, &str),
    (total, window): (usize, usize),
    held_at_most: usize,
) -> Vec<u64> {
    let cb = b.conn.unwrap();
    let mut got = pushed(&w.sync(cb), cb);
    let mut next = 0;
    while next < got.len() {
        assert_eq!(
            got.len() - next,
            window.min(total - next),
            "in flight after {next} acks"
        );
        let seq = got[next];
        next += 1;
        got.extend(ack(w, b, a, conv, seq));
        let held = w.relay.queue_cache().messages;
        assert!(
            held <= held_at_most,
            "{held} messages held after the receipt of {seq}"
        );
    }
    got
}

/// A backlog of 40 drains in order through a window of 4 and pages of 2: memory holds the
/// window and what is read ahead of it, never the queue; every page is read ahead by the
/// receipt that needs it (none on the relay's task), and nothing is left or repaired.
#[test]
fn a_synced_recipient_holds_its_window_and_a_page_not_its_queue() {
    let mut w = World::with_config(paged(4, 2));
    w.read_ahead(true);
    let (a, b, conv) = backlog(&mut w, 40);
    let got = drain_acking(&mut w, (&a, &b, &conv), (40, 4), 4 + 2 + 2);
    assert_eq!(got, (1..=40).collect::<Vec<_>>());
    let stats = w.relay.stats();
    assert!(
        stats.queues_read >= 20,
        "{} reads of 40 messages in pages of 2",
        stats.queues_read
    );
    assert_eq!(stats.reads_inline, 0, "a page read on the relay's task");
    assert_eq!(stats.queue_summaries_repaired, 0);
    assert_eq!(w.relay.queued_messages(), 0);
    w.restart(Box::new(w.mem.clone()));
    assert_eq!(
        w.relay.queued_messages(),
        0,
        "every receipt's delete was durable"
    );
}

/// Pages of one message, read inline (no read ahead): the same replay, in order.
#[test]
fn pages_of_one_message_replay_the_same() {
    let mut w = World::with_config(paged(3, 1));
    let (a, b, conv) = backlog(&mut w, 12);
    let got = drain_acking(&mut w, (&a, &b, &conv), (12, 3), 3 + 1 + 1);
    assert_eq!(got, (1..=12).collect::<Vec<_>>());
    assert_eq!(w.relay.queued_messages(), 0);
}

/// A message for a synced recipient whose queue is not all in memory waits behind the part
/// not read yet: it is pushed after every older one, never before.
#[test]
fn a_new_message_waits_behind_the_part_not_read_yet() {
    let mut w = World::with_config(paged(2, 1));
    let (a, b, conv) = backlog(&mut w, 5);
    let cb = b.conn.unwrap();
    let mut got = pushed(&w.sync(cb), cb);
    assert_eq!(got, [1, 2]);
    let outs = w.msg(&a, &b, &conv, "m6");
    assert!(pushed(&outs, cb).is_empty(), "the window is full");
    for seq in 1..=6 {
        got.extend(ack(&mut w, &b, &a, &conv, seq));
    }
    assert_eq!(got, [1, 2, 3, 4, 5, 6]);
}

/// A retracted message in the part of the queue not read yet is dropped from the store and
/// never pushed.
#[test]
fn a_message_retracted_before_its_page_is_read_is_never_pushed() {
    let mut w = World::with_config(paged(1, 1));
    let (a, b, conv) = backlog(&mut w, 4);
    let cb = b.conn.unwrap();
    let mut got = pushed(&w.sync(cb), cb);
    assert_eq!(got, [1]);
    w.send(
        a.conn.unwrap(),
        json!({"type":"retract","id":"m3","to":b.alias,"conv_id":conv}),
    );
    for seq in [1, 2, 4] {
        got.extend(ack(&mut w, &b, &a, &conv, seq));
    }
    assert_eq!(got, [1, 2, 4]);
    assert_eq!(w.relay.queued_messages(), 0);
}

/// The expiry of a queue held in part: the sweep reads on as far as its messages expired
/// (pages of one) and deletes every one, without coming back for the same queue again and
/// again; the connection then gets new messages at once.
#[test]
fn a_queue_held_in_part_expires_whole_and_the_sweep_moves_on() {
    let mut w = World::with_config(paged(1, 1));
    let ttl = w.relay.config().offline_ttl_ms;
    let (a, b, conv) = backlog(&mut w, 5);
    let cb = b.conn.unwrap();
    assert_eq!(pushed(&w.sync(cb), cb), [1]);
    let reads = w.relay.stats().queues_read;
    w.advance(ttl);
    assert_eq!(w.relay.queued_messages(), 0);
    let swept = w.relay.stats().queues_read - reads;
    assert!(swept <= 5, "{swept} reads to expire 5 messages");
    w.advance(ttl);
    assert_eq!(
        w.relay.stats().queues_read - reads,
        swept,
        "read again after it expired"
    );
    let outs = w.msg(&a, &b, &conv, "m6");
    assert_eq!(pushed(&outs, cb), [6]);
}

/// What a sync replays never includes what outlived the offline TTL, wherever in the queue it
/// is: the sync reads on past it before the replay.
#[test]
fn a_sync_replays_nothing_that_expired_in_any_page() {
    let mut w = World::with_config(paged(2, 1));
    let ttl = w.relay.config().offline_ttl_ms;
    let (a, mut b, conv) = online_and_offline(&mut w);
    for i in 1..=3 {
        w.msg(&a, &b, &conv, &format!("old{i}"));
    }
    w.advance(ttl / 2);
    for i in 1..=2 {
        w.msg(&a, &b, &conv, &format!("new{i}"));
    }
    // The sweep has not run when Bob syncs: the old ones are due now.
    w.now = w.now.plus_ms(ttl / 2);
    let cb = w.connect(&mut b);
    let mut got = pushed(&w.sync(cb), cb);
    for seq in [4, 5] {
        got.extend(ack(&mut w, &b, &a, &conv, seq));
    }
    assert_eq!(got, [4, 5]);
}

/// A receipt refused because its read of the next page failed still releases what it covers
/// (the client has it). With nothing left in flight no receipt would bring that page: the
/// relay reads it on its own task and delivery goes on.
#[test]
fn a_page_no_receipt_will_read_ahead_is_read_on_the_relays_task() {
    let mut w = World::with_config(paged(1, 1));
    let (a, b, conv) = backlog(&mut w, 3);
    let cb = b.conn.unwrap();
    let mut got = pushed(&w.sync(cb), cb);
    assert_eq!(got, [1]);
    let outs = refused_ack(&mut w, &b, &a, &conv, 1);
    got.extend(outs);
    assert_eq!(got, [1, 2], "the page read on the relay's task");
    got.extend(ack(&mut w, &b, &a, &conv, 2));
    assert_eq!(got, [1, 2, 3]);
}

/// While messages are in flight, a page the window has room for and no read brought waits for
/// the next receipt, which reads it ahead: nothing is read on the relay's task.
#[test]
fn a_page_waits_for_the_next_receipt_while_messages_are_in_flight() {
    let mut w = World::with_config(paged(2, 1));
    w.read_ahead(true);
    let (a, b, conv) = backlog(&mut w, 4);
    let cb = b.conn.unwrap();
    let mut got = pushed(&w.sync(cb), cb);
    assert_eq!(got, [1, 2]);
    let inline = w.relay.stats().reads_inline;
    let outs = refused_ack(&mut w, &b, &a, &conv, 1);
    assert!(outs.is_empty(), "2 is in flight: the page waits");
    got.extend(ack(&mut w, &b, &a, &conv, 2));
    got.extend(ack(&mut w, &b, &a, &conv, 3));
    assert_eq!(got, [1, 2, 3, 4]);
    assert_eq!(
        w.relay.stats().reads_inline,
        inline,
        "a page read on the relay's task"
    );
    assert_eq!(w.relay.stats().queue_summaries_repaired, 0);
}

/// Every `msg` pushed to `conn` among `outs`: (conversation, seq, sender's alias).
fn pushed_in(outs: &[relay_core::Output], conn: relay_core::ConnId) -> Vec<(String, u64, String)> {
    frames(outs, conn)
        .into_iter()
        .filter_map(|f| match f {
            wire::ServerFrame::Msg(m) => {
                Some((m.conv_id.to_string(), m.seq.get(), m.from.to_string()))
            }
            _ => None,
        })
        .collect()
}

/// A recipient with a backlog in four conversations: their queues share the window (they take
/// turns), so each is read about its share ahead, not a window each; every message arrives
/// once, each conversation in seq order, the window full until the backlog runs out.
#[test]
fn conversations_with_a_backlog_share_the_window_they_are_read_ahead_for() {
    let mut w = World::with_config(paged(4, 4));
    w.read_ahead(true);
    let mut b = w.user("bob");
    let mut convs = Vec::new();
    for i in 0..4 {
        let mut a = w.user(&format!("a{i}"));
        let conv = w.befriend(&a, &b);
        let ca = w.connect(&mut a);
        w.sync(ca);
        for k in 1..=6 {
            w.msg(&a, &b, &conv, &format!("m{i}-{k}"));
        }
        convs.push(conv);
    }
    w.restart(Box::new(w.mem.clone()));
    let cb = w.connect(&mut b);
    let mut got = pushed_in(&w.sync(cb), cb);
    let mut next = 0;
    let mut most_held = 0;
    while next < got.len() {
        assert_eq!(
            got.len() - next,
            4.min(24 - next),
            "in flight after {next} receipts"
        );
        let (conv, seq, from) = got[next].clone();
        next += 1;
        let outs = w.send(
            cb,
            json!({"type":"delivered","conv_id":conv,"seq":seq,"to":from}),
        );
        got.extend(pushed_in(&outs, cb));
        most_held = most_held.max(w.relay.queue_cache().messages);
    }
    assert_eq!(got.len(), 24);
    for conv in &convs {
        let seqs: Vec<u64> = got
            .iter()
            .filter(|(c, ..)| c == conv)
            .map(|(_, s, _)| *s)
            .collect();
        assert_eq!(seqs.len(), 6, "{conv}: {seqs:?}");
        assert!(seqs.windows(2).all(|p| p[0] < p[1]), "{conv}: {seqs:?}");
    }
    // A window (4) in flight, each of the four queues about its share (1) and a page ahead:
    // never the 16 a window's read ahead for each would hold.
    assert!(most_held <= 12, "{most_held} messages held");
    assert_eq!(w.relay.stats().reads_inline, 0);
    assert_eq!(w.relay.queued_messages(), 0);
}
