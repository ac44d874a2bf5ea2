//! The relay's durable state across a restart: each kind of row keeps its own key, so rows of
//! different kinds, conversations or readers never overwrite one another in the store.

use relay_core::limits::TOMBSTONE_TTL_MS;
use relay_core::store::{Store as _, Table};
use serde_json::json;
use wire::ServerFrame;

use crate::world::{User, World, acks, errors, frames, msgs, online_and_offline};

/// The receipts a connection got: (kind, seq).
fn receipts(fs: &[ServerFrame]) -> Vec<(&'static str, u64)> {
    fs.iter()
        .filter_map(|f| match f {
            ServerFrame::Delivered(r) => Some(("delivered", r.seq.get())),
            ServerFrame::Read(r) => Some(("read", r.seq.get())),
            _ => None,
        })
        .collect()
}

/// A delivered and a read receipt of one reader in one conversation are two rows each (the
/// reader's marks, and the receipts waiting for the offline author): both kinds survive a
/// restart, the author gets both on its next sync, and neither mark is forwarded again.
#[test]
fn delivered_and_read_marks_and_pending_receipts_survive_a_restart_side_by_side() {
    let mut w = World::new();
    let (mut a, mut b, conv) = online_and_offline(&mut w);
    for id in ["m1", "m2", "m3"] {
        w.msg(&a, &b, &conv, id);
    }
    w.relay.handle_disconnect(w.now, a.conn.unwrap());
    let cb = w.connect(&mut b);
    w.sync(cb);
    w.send(
        cb,
        json!({"type":"delivered","conv_id":conv,"seq":3,"to":a.alias}),
    );
    w.send(
        cb,
        json!({"type":"read","conv_id":conv,"seq":2,"to":a.alias}),
    );

    w.restart(Box::new(w.mem.clone()));
    let ca = w.connect(&mut a);
    let outs = w.sync(ca);
    let mut got = receipts(&frames(&outs, ca));
    got.sort_unstable();
    assert_eq!(got, [("delivered", 3), ("read", 2)]);

    // Both marks survived: the same receipts again are not forwarded; a newer read is.
    let cb = w.connect(&mut b);
    w.sync(cb);
    for (kind, seq) in [("delivered", 3), ("read", 2)] {
        let outs = w.send(
            cb,
            json!({"type":kind,"conv_id":conv,"seq":seq,"to":a.alias}),
        );
        assert!(frames(&outs, ca).is_empty(), "{kind} {seq} forwarded again");
    }
    let outs = w.send(
        cb,
        json!({"type":"read","conv_id":conv,"seq":3,"to":a.alias}),
    );
    assert_eq!(receipts(&frames(&outs, ca)), [("read", 3)]);

    // Delivered on that sync, the waiting receipts are gone from the store.
    w.restart(Box::new(w.mem.clone()));
    let ca = w.connect(&mut a);
    assert!(receipts(&frames(&w.sync(ca), ca)).is_empty());
}

/// A receipt may cover what an earlier connection of the reader was pushed, even when a new
/// connection's replay stops below it (the window is shared with another conversation): the
/// highest seq pushed per conversation never goes down.
#[test]
fn a_receipt_covers_what_an_earlier_connection_was_pushed() {
    let mut w = World::with_config(relay_core::Config {
        sync_window_msgs: 2,
        ..crate::world::fast_config()
    });
    let (a, mut b, x) = online_and_offline(&mut w);
    let mut c = w.user("carol");
    let y = w.befriend(&c, &b);
    let cc = w.connect(&mut c);
    w.sync(cc);
    let cb = w.connect(&mut b);
    w.sync(cb);
    let mut pushed = Vec::new();
    for id in ["x1", "x2"] {
        pushed.extend(msgs(&frames(&w.msg(&a, &b, &x, id), cb)));
    }
    let outs = w.send(
        cb,
        json!({"type":"delivered","conv_id":x,"seq":1,"to":a.alias}),
    );
    pushed.extend(msgs(&frames(&outs, cb)));
    pushed.extend(msgs(&frames(&w.msg(&a, &b, &x, "x3"), cb)));
    assert_eq!(
        pushed,
        [("x1".into(), 1), ("x2".into(), 2), ("x3".into(), 3)]
    );
    // The window is full (x2, x3): carol's message waits.
    w.now = w.now.plus_ms(1_000);
    assert!(msgs(&frames(&w.msg(&c, &b, &y, "y1"), cb)).is_empty());

    // A new connection replays one message of each conversation, the oldest first: x2, y1.
    let cb2 = w.connect(&mut b);
    let replay = msgs(&frames(&w.sync(cb2), cb2));
    assert_eq!(replay, [("x2".into(), 2), ("y1".into(), 1)]);
    // x3 reached the earlier connection: its receipt is valid.
    let outs = w.send(
        cb2,
        json!({"type":"delivered","conv_id":x,"seq":3,"to":a.alias}),
    );
    assert!(errors(&frames(&outs, cb2)).is_empty(), "{outs:?}");
    assert_eq!(w.relay.queued_messages(), 1, "only y1 is left");
}

/// The stored keys of `table`.
fn keys(w: &World, table: Table) -> Vec<String> {
    w.mem
        .clone()
        .load()
        .unwrap()
        .get(&table)
        .map(|rows| rows.keys().cloned().collect())
        .unwrap_or_default()
}

/// A message id is remembered for the tombstone lifetime after its acceptance, to the
/// millisecond: until then a resend is a duplicate (its first seq); at that moment the
/// tombstone row is deleted and the id is new again.
#[test]
fn a_tombstone_expires_at_its_lifetime_and_its_row_goes() {
    let mut w = World::new();
    let (mut a, b, conv) = online_and_offline(&mut w);
    let life = TOMBSTONE_TTL_MS.max(w.relay.config().offline_ttl_ms);
    let t0 = w.now;
    w.msg(&a, &b, &conv, "m1");
    assert_eq!(
        keys(&w, Table::Tombstones),
        [format!("{conv}/m1/{}", a.uuid)]
    );
    w.advance(life - 1);
    assert_eq!(keys(&w, Table::Tombstones).len(), 1);
    w.login(&mut a);
    let ca = w.connect(&mut a);
    w.sync(ca);
    assert_eq!(
        acks(&frames(&w.msg(&a, &b, &conv, "m1"), ca)),
        [("m1".into(), 1)]
    );
    w.advance(1);
    assert_eq!(w.now, t0.plus_ms(life));
    assert!(keys(&w, Table::Tombstones).is_empty());
    let ca = w.connect(&mut a);
    w.sync(ca);
    assert_eq!(
        acks(&frames(&w.msg(&a, &b, &conv, "m1"), ca)),
        [("m1".into(), 2)]
    );
}

/// Tombstone rows go by range: the first sweep runs at the earliest expiry, the next ones at
/// the next expiry left but at most once a minute (`TOMBSTONE_SWEEP_MS`), and a restarted
/// relay schedules them from the store. A row may outlive its tombstone by up to that minute;
/// the id is new again at its expiry all the same.
#[test]
fn tombstone_rows_go_by_range_at_most_once_a_minute_also_after_a_restart() {
    use relay_core::limits::TOMBSTONE_SWEEP_MS;
    let mut w = World::new();
    let (mut a, b, conv) = online_and_offline(&mut w);
    let life = TOMBSTONE_TTL_MS.max(w.relay.config().offline_ttl_ms);
    let t0 = w.now;
    let author = a.uuid.clone();
    let row = |id: &str| format!("{conv}/{id}/{author}");
    w.msg(&a, &b, &conv, "m1");
    w.advance(30_000);
    w.msg(&a, &b, &conv, "m2");
    w.advance(10 * 60_000);
    w.login(&mut a);
    let ca = w.connect(&mut a);
    w.sync(ca);
    w.msg(&a, &b, &conv, "m3");
    assert_eq!(
        w.relay.poll_timeout().map(|t| t <= t0.plus_ms(life)),
        Some(true)
    );
    // A restart: the schedule comes back from the store's earliest expiry.
    let store = w.mem.clone();
    w.restart(Box::new(store));
    w.advance(t0.plus_ms(life).get() - w.now.get());
    assert_eq!(keys(&w, Table::Tombstones), [row("m2"), row("m3")]);
    // m2 expired 30 s later, but its row waits for the next sweep a minute after the first.
    w.advance(30_000);
    assert_eq!(keys(&w, Table::Tombstones), [row("m2"), row("m3")]);
    w.login(&mut a);
    let ca = w.connect(&mut a);
    w.sync(ca);
    assert_eq!(
        acks(&frames(&w.msg(&a, &b, &conv, "m2"), ca)),
        [("m2".into(), 4)],
        "m2's tombstone has expired: the id is new again"
    );
    w.advance(TOMBSTONE_SWEEP_MS - 30_000);
    assert_eq!(
        keys(&w, Table::Tombstones),
        [row("m2"), row("m3")],
        "m2 again, m3"
    );
    let m2_again = w.now;
    w.advance(t0.plus_ms(30_000 + 10 * 60_000 + life).get() - w.now.get());
    assert_eq!(
        keys(&w, Table::Tombstones),
        [row("m2")],
        "m3 went at its expiry"
    );
    w.advance(m2_again.plus_ms(life).get() - w.now.get());
    assert!(keys(&w, Table::Tombstones).is_empty());
}

/// Without a tombstone cache every `msg` reads its conversation's tombstones from the store. A read
/// that fails refuses that frame with `STORAGE_UNAVAILABLE` and changes nothing: no ack, no
/// row, the relay keeps serving; sent again, the message is stored once, and an earlier id is
/// still known.
#[test]
fn a_failed_tombstone_read_refuses_the_frame_and_changes_nothing() {
    let mut w = World::with_config(relay_core::Config {
        tombstone_cache_bytes: 0,
        ..crate::world::fast_config()
    });
    let (a, b, conv) = online_and_offline(&mut w);
    let ca = a.conn.unwrap();
    assert_eq!(
        acks(&frames(&w.msg(&a, &b, &conv, "m1"), ca)),
        [("m1".into(), 1)]
    );
    let rows = w.mem.clone().load().unwrap();
    w.mem.fail_reads(1);
    let refused = frames(&w.msg(&a, &b, &conv, "m2"), ca);
    assert_eq!(errors(&refused), ["STORAGE_UNAVAILABLE"]);
    assert!(acks(&refused).is_empty());
    assert_eq!(w.mem.clone().load().unwrap(), rows, "nothing was written");
    assert!(!w.relay.is_failed() && w.relay.is_connected(ca));
    assert_eq!(w.relay.stats().tombstone_read_failures, 1);
    assert_eq!(
        acks(&frames(&w.msg(&a, &b, &conv, "m2"), ca)),
        [("m2".into(), 2)]
    );
    assert_eq!(
        acks(&frames(&w.msg(&a, &b, &conv, "m1"), ca)),
        [("m1".into(), 1)]
    );
    assert_eq!(
        w.relay.tombstone_cache().conversations,
        0,
        "no cache: nothing stays"
    );
}

/// A conversation whose stored tombstones outweigh what one set may take of the cache is read
/// whole once, then by row: each further message costs one keyed read, not its whole set (a
/// sender at the default rate writes ~1.2 million tombstones a week). Its ids are still
/// answered: a re-sent old id gets its first ack, a new one is accepted, an old one can be
/// retracted, and the retraction is known to a re-send. The same holds after a restart.
#[test]
fn a_conversation_too_heavy_for_the_cache_is_read_by_row_not_whole() {
    use relay_core::limits::TOMBSTONE_SET_BY_ROW_MIN_BYTES;
    let mut w = World::with_config(relay_core::Config {
        // An eighth of it is the smallest threshold.
        tombstone_cache_bytes: 8 * TOMBSTONE_SET_BY_ROW_MIN_BYTES,
        max_offline_queue_per_recipient: 10_000,
        max_offline_queue_per_conversation: 10_000,
        ..crate::world::fast_config()
    });
    let (a, b, conv) = online_and_offline(&mut w);
    let ca = a.conn.unwrap();
    // ~155 bytes a tombstone: the set is held whole until it outgrows the cache (~3,400),
    // evicted, read whole once more, found too heavy, and read by row from then on.
    let n = 4_000;
    for i in 1..=n {
        w.advance(600);
        let id = format!("m{i}");
        assert_eq!(
            acks(&frames(&w.msg(&a, &b, &conv, &id), ca)),
            [(id.clone(), i)]
        );
    }
    let stats = w.relay.stats();
    assert!(
        stats.tombstone_sets_read <= 2,
        "the set was read whole {} times",
        stats.tombstone_sets_read
    );
    assert!(
        stats.tombstone_rows_read >= 100,
        "{}",
        stats.tombstone_rows_read
    );
    // What memory holds of it is what was written since it was found too heavy (about 570
    // tombstones), not the set (about 600 KB).
    assert!(w.relay.tombstone_cache().bytes <= 2 * TOMBSTONE_SET_BY_ROW_MIN_BYTES);
    let resent = |w: &mut World, id: &str| acks(&frames(&w.msg(&a, &b, &conv, id), ca));
    assert_eq!(
        resent(&mut w, "m5"),
        [("m5".into(), 5)],
        "an old id, by row"
    );
    assert_eq!(resent(&mut w, "m4000"), [("m4000".into(), 4_000)]);
    assert_eq!(resent(&mut w, "new"), [("new".into(), 4_001)]);
    assert_eq!(
        resent(&mut w, "new"),
        [("new".into(), 4_001)],
        "written since"
    );
    w.send(
        ca,
        json!({"type":"retract","id":"m7","to":b.alias,"conv_id":conv}),
    );
    let reads = w.relay.stats().tombstone_rows_read;
    assert_eq!(
        resent(&mut w, "m7"),
        [("m7".into(), 7)],
        "retracted, still known"
    );
    let store = w.mem.clone();
    w.restart(Box::new(store));
    let mut a = a;
    w.login(&mut a);
    let ca = w.connect(&mut a);
    w.sync(ca);
    let again = |w: &mut World, id: &str| acks(&frames(&w.msg(&a, &b, &conv, id), ca));
    assert_eq!(again(&mut w, "m9"), [("m9".into(), 9)]);
    assert_eq!(again(&mut w, "m10"), [("m10".into(), 10)]);
    assert_eq!(again(&mut w, "later"), [("later".into(), 4_002)]);
    let after = w.relay.stats();
    assert_eq!(after.tombstone_sets_read, 1, "once after the restart");
    assert!(after.tombstone_rows_read >= 2);
    assert!(reads > 0);
    let rows = w.rows(Table::Tombstones);
    let m7 = rows
        .iter()
        .find(|(k, _)| k.contains("/m7/"))
        .map(|(_, v)| serde_json::from_slice::<serde_json::Value>(v).unwrap())
        .unwrap();
    assert_eq!(m7["retracted"], true);
}

/// A receipt waiting for its offline author is kept for the offline TTL after it was given, to
/// the millisecond, then deleted: the author's next sync does not get it.
#[test]
fn a_pending_receipt_expires_at_the_offline_ttl() {
    let mut w = World::new();
    let ttl = w.relay.config().offline_ttl_ms;
    let (mut a, mut b, conv) = online_and_offline(&mut w);
    w.msg(&a, &b, &conv, "m1");
    w.relay.handle_disconnect(w.now, a.conn.unwrap());
    let cb = w.connect(&mut b);
    w.sync(cb);
    let t0 = w.now;
    w.send(
        cb,
        json!({"type":"read","conv_id":conv,"seq":1,"to":a.alias}),
    );
    assert_eq!(keys(&w, Table::PendingReceipts).len(), 1);
    w.advance(ttl - 1);
    assert_eq!(keys(&w, Table::PendingReceipts).len(), 1);
    w.advance(1);
    assert_eq!(w.now, t0.plus_ms(ttl));
    assert!(keys(&w, Table::PendingReceipts).is_empty());
    w.login(&mut a);
    let ca = w.connect(&mut a);
    assert!(receipts(&frames(&w.sync(ca), ca)).is_empty());
}

/// The per-recipient count of undelivered messages goes down as they are delivered: a full
/// recipient accepts messages again once it acknowledged some, and the count is rebuilt the same
/// from the store after a restart.
#[test]
fn a_recipient_s_backlog_count_goes_down_with_its_receipts_and_survives_a_restart() {
    let mut w = World::with_config(relay_core::Config {
        max_offline_queue_per_recipient: 2,
        ..crate::world::fast_config()
    });
    let (mut a, mut b, conv) = online_and_offline(&mut w);
    let ca = a.conn.unwrap();
    let sent = |w: &mut World, a: &User, b: &User, id: &str| {
        let outs = w.msg(a, b, &conv, id);
        let fs = frames(&outs, ca);
        (acks(&fs), errors(&fs))
    };
    assert_eq!(sent(&mut w, &a, &b, "m1").0, [("m1".into(), 1)]);
    assert_eq!(sent(&mut w, &a, &b, "m2").0, [("m2".into(), 2)]);
    assert_eq!(sent(&mut w, &a, &b, "m3").1, ["RECIPIENT_QUEUE_FULL"]);
    assert_eq!(w.relay.backlog_messages(), 2);

    let cb = w.connect(&mut b);
    w.sync(cb);
    w.send(
        cb,
        json!({"type":"delivered","conv_id":conv,"seq":2,"to":a.alias}),
    );
    assert_eq!(w.relay.backlog_messages(), 0);
    w.relay.handle_disconnect(w.now, cb);
    assert_eq!(sent(&mut w, &a, &b, "m3").0, [("m3".into(), 3)]);
    assert_eq!(sent(&mut w, &a, &b, "m4").0, [("m4".into(), 4)]);
    assert_eq!(sent(&mut w, &a, &b, "m5").1, ["RECIPIENT_QUEUE_FULL"]);

    w.restart(Box::new(w.mem.clone()));
    assert_eq!(w.relay.backlog_messages(), 2);
    let ca = w.connect(&mut a);
    w.sync(ca);
    a.conn = Some(ca);
    let outs = w.msg(&a, &b, &conv, "m5");
    assert_eq!(errors(&frames(&outs, ca)), ["RECIPIENT_QUEUE_FULL"]);
}
