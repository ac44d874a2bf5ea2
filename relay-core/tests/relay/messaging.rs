//! WebSocket messaging: acks, seqs, dedup, delivery, sync, receipts, typing, retract, limits.

use relay_core::Config;
use serde_json::json;
use wire::ServerFrame;
use wire::http::paths;

use crate::world::both_online as pair;
use crate::world::{World, acks, b64, errors, frames, msgs};

#[test]
fn msg_ack_seq_and_live_delivery() {
    let mut w = World::new();
    let (a, b, conv) = pair(&mut w);
    let (ca, cb) = (a.conn.unwrap(), b.conn.unwrap());
    let outs = w.msg(&a, &b, &conv, "m1");
    assert_eq!(acks(&frames(&outs, ca)), [("m1".into(), 1)]);
    let got = frames(&outs, cb);
    let ServerFrame::Msg(m) = &got[0] else {
        panic!("{got:?}")
    };
    assert_eq!(
        (m.from.as_str(), m.seq.get(), m.at, m.payload.as_str()),
        (a.alias.as_str(), 1, w.now, b64(b"p-m1").as_str())
    );
    assert_eq!(m.crypto_v, Some(1));
    // Seqs are per conversation and shared by both directions.
    let outs = w.msg(&b, &a, &conv, "m2");
    assert_eq!(acks(&frames(&outs, cb)), [("m2".into(), 2)]);
    assert_eq!(msgs(&frames(&outs, ca)), [("m2".into(), 2)]);
    // from is the authenticated sender even if the client claims otherwise.
    let outs = w.send(ca, json!({"type":"msg","id":"m3","from":"u00000000","to":b.alias,"conv_id":conv,"payload":"eA=="}));
    let ServerFrame::Msg(m) = &frames(&outs, cb)[0] else {
        panic!()
    };
    assert_eq!(m.from.as_str(), a.alias);
}

#[test]
fn duplicate_id_same_ack_never_a_second_seq() {
    let mut w = World::new();
    let (a, b, conv) = pair(&mut w);
    let (ca, cb) = (a.conn.unwrap(), b.conn.unwrap());
    w.msg(&a, &b, &conv, "m1");
    let outs = w.msg(&a, &b, &conv, "m1");
    assert_eq!(acks(&frames(&outs, ca)), [("m1".into(), 1)]);
    assert!(frames(&outs, cb).is_empty());
    // Still deduplicated after delivery and after the 24 h hold (web client's resend, D-TS-2).
    w.send(
        cb,
        json!({"type":"delivered","conv_id":conv,"seq":1,"to":a.alias}),
    );
    w.advance(2 * 24 * 3_600_000);
    let mut a = a;
    w.login(&mut a);
    let ca = w.connect(&mut a);
    w.sync(ca);
    let outs = w.msg(&a, &b, &conv, "m1");
    assert_eq!(acks(&frames(&outs, ca)), [("m1".into(), 1)]);
    let outs = w.msg(&a, &b, &conv, "m2");
    assert_eq!(acks(&frames(&outs, ca)), [("m2".into(), 2)]);
}

#[test]
fn non_members_and_wrong_recipient_are_refused() {
    let mut w = World::new();
    let (a, b, conv) = pair(&mut w);
    let mut c = w.user("carol");
    let cc = w.connect(&mut c);
    w.sync(cc);
    let outs = w.send(
        cc,
        json!({"type":"msg","id":"x","to":b.alias,"conv_id":conv,"payload":"cA=="}),
    );
    assert_eq!(errors(&frames(&outs, cc)), ["NOT_A_MEMBER"]);
    assert!(frames(&outs, b.conn.unwrap()).is_empty());
    let outs = w.send(
        a.conn.unwrap(),
        json!({"type":"msg","id":"y","to":c.alias,"conv_id":conv,"payload":"cA=="}),
    );
    assert_eq!(errors(&frames(&outs, a.conn.unwrap())), ["NOT_A_MEMBER"]);
    let outs = w.send(cc, json!({"type":"typing","to":b.alias,"conv_id":conv}));
    assert_eq!(errors(&frames(&outs, cc)), ["NOT_A_MEMBER"]);
    let outs = w.send(
        cc,
        json!({"type":"read","to":b.alias,"conv_id":conv,"seq":1}),
    );
    assert_eq!(errors(&frames(&outs, cc)), ["NOT_A_MEMBER"]);
}

#[test]
fn bad_frames_get_error_frames_and_keep_the_socket() {
    let mut w = World::new();
    let (a, _b, _conv) = pair(&mut w);
    let ca = a.conn.unwrap();
    for bad in [
        "not json",
        "[1]",
        r#"{"no":"type"}"#,
        r#"{"type":"msg","id":"x"}"#,
        r#"{"type":"message","text":"x"}"#,
    ] {
        w.relay.handle_text(w.now, ca, bad);
        let outs = w.drain();
        let e = errors(&frames(&outs, ca));
        assert_eq!(e.len(), 1, "{bad}");
        assert!(w.relay.is_connected(ca));
    }
    let big = format!(
        r#"{{"type":"msg","id":"x","to":"u1","conv_id":"c","payload":"{}"}}"#,
        "A".repeat(50_000)
    );
    w.relay.handle_text(w.now, ca, &big);
    assert_eq!(errors(&frames(&w.drain(), ca)), ["PAYLOAD_TOO_LARGE"]);
}

#[test]
fn offline_queue_sync_replay_and_receipts() {
    let mut w = World::new();
    let mut a = w.user("alice");
    let mut b = w.user("bob");
    let conv = w.befriend(&a, &b);
    let ca = w.connect(&mut a);
    w.sync(ca);
    for i in 1..=5 {
        w.msg(&a, &b, &conv, &format!("m{i}"));
    }
    let s = w
        .get(paths::STORAGE_ESTIMATE, Some(&b.token.clone()))
        .body_json();
    assert_eq!(s["message_count"], 5);
    // Connected but not synced: nothing pushed yet.
    let cb = w.connect(&mut b);
    let outs = w.msg(&a, &b, &conv, "m6");
    assert!(frames(&outs, cb).is_empty());
    let outs = w.sync(cb);
    let replay = msgs(&frames(&outs, cb));
    assert_eq!(
        replay.iter().map(|m| m.1).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5, 6]
    );
    // A receipt for a seq never sent is refused.
    let outs = w.send(
        cb,
        json!({"type":"delivered","conv_id":conv,"seq":7,"to":a.alias}),
    );
    assert_eq!(errors(&frames(&outs, cb)), ["INVALID_RECEIPT"]);
    let outs = w.send(
        cb,
        json!({"type":"delivered","conv_id":conv,"seq":0,"to":a.alias}),
    );
    assert_eq!(errors(&frames(&outs, cb)), ["INVALID_RECEIPT"]);
    let outs = w.send(
        cb,
        json!({"type":"delivered","conv_id":conv,"seq":3,"to":a.alias}),
    );
    let to_a = frames(&outs, ca);
    assert!(
        matches!(&to_a[..], [ServerFrame::Delivered(r)] if r.seq.get() == 3 && r.from.as_ref().map(|f| f.as_str()) == Some(b.alias.as_str()))
    );
    // Never backwards: an older receipt is not forwarded.
    let outs = w.send(
        cb,
        json!({"type":"delivered","conv_id":conv,"seq":2,"to":a.alias}),
    );
    assert!(frames(&outs, ca).is_empty());
    // Re-sync replays exactly the undelivered suffix.
    let outs = w.sync(cb);
    assert_eq!(
        msgs(&frames(&outs, cb))
            .iter()
            .map(|m| m.1)
            .collect::<Vec<_>>(),
        [4, 5, 6]
    );
    // Read receipts for an offline sender are kept and delivered on its next sync.
    w.relay.handle_disconnect(w.now, ca);
    w.send(
        cb,
        json!({"type":"read","conv_id":conv,"seq":4,"to":a.alias}),
    );
    w.send(
        cb,
        json!({"type":"read","conv_id":conv,"seq":6,"to":a.alias}),
    );
    let ca = w.connect(&mut a);
    let outs = w.sync(ca);
    let got = frames(&outs, ca);
    assert!(
        matches!(got.iter().find(|f| matches!(f, ServerFrame::Read(_))), Some(ServerFrame::Read(r)) if r.seq.get() == 6)
    );
    let s = w
        .get(paths::STORAGE_ESTIMATE, Some(&b.token.clone()))
        .body_json();
    assert_eq!(s["message_count"], 0);
}

#[test]
fn sync_is_batched_and_refilled_by_receipts() {
    let mut w = World::with_config(Config {
        sync_window_msgs: 3,
        pow_difficulty: 1,
        ..Config::default()
    });
    let mut a = w.user("alice");
    let mut b = w.user("bob");
    let conv = w.befriend(&a, &b);
    let ca = w.connect(&mut a);
    w.sync(ca);
    for i in 1..=7 {
        w.msg(&a, &b, &conv, &format!("m{i}"));
    }
    let cb = w.connect(&mut b);
    let outs = w.sync(cb);
    assert_eq!(
        msgs(&frames(&outs, cb))
            .iter()
            .map(|m| m.1)
            .collect::<Vec<_>>(),
        [1, 2, 3]
    );
    let outs = w.send(
        cb,
        json!({"type":"delivered","conv_id":conv,"seq":2,"to":a.alias}),
    );
    assert_eq!(
        msgs(&frames(&outs, cb))
            .iter()
            .map(|m| m.1)
            .collect::<Vec<_>>(),
        [4, 5]
    );
    let outs = w.send(
        cb,
        json!({"type":"delivered","conv_id":conv,"seq":5,"to":a.alias}),
    );
    assert_eq!(
        msgs(&frames(&outs, cb))
            .iter()
            .map(|m| m.1)
            .collect::<Vec<_>>(),
        [6, 7]
    );
}

#[test]
fn offline_ttl_purges_undelivered_messages() {
    let mut w = World::new();
    let mut a = w.user("alice");
    let mut b = w.user("bob");
    let conv = w.befriend(&a, &b);
    let ca = w.connect(&mut a);
    w.sync(ca);
    w.msg(&a, &b, &conv, "old");
    w.advance(12 * 3_600_000);
    assert!(!w.relay.is_connected(ca), "idle socket closed");
    w.login(&mut a);
    let ca = w.connect(&mut a);
    w.sync(ca);
    w.msg(&a, &b, &conv, "new");
    assert_eq!(w.relay.queued_messages(), 2);
    w.advance(12 * 3_600_000);
    assert_eq!(w.relay.queued_messages(), 1);
    w.login(&mut b);
    let cb = w.connect(&mut b);
    let outs = w.sync(cb);
    assert_eq!(msgs(&frames(&outs, cb)), [("new".into(), 2)]);
}

#[test]
fn queue_full_gets_no_ack() {
    let mut w = World::with_config(Config {
        max_offline_queue_per_conversation: 2,
        pow_difficulty: 1,
        ..Config::default()
    });
    let mut a = w.user("alice");
    let b = w.user("bob");
    let conv = w.befriend(&a, &b);
    let ca = w.connect(&mut a);
    w.sync(ca);
    w.msg(&a, &b, &conv, "m1");
    w.msg(&a, &b, &conv, "m2");
    let outs = w.msg(&a, &b, &conv, "m3");
    let f = frames(&outs, ca);
    assert!(acks(&f).is_empty());
    assert_eq!(errors(&f), ["QUEUE_FULL"]);
}

#[test]
fn message_rate_limit_120_per_minute() {
    let mut w = World::new();
    let (a, b, conv) = pair(&mut w);
    let ca = a.conn.unwrap();
    for i in 0..120 {
        let outs = w.msg(&a, &b, &conv, &format!("m{i}"));
        assert_eq!(acks(&frames(&outs, ca)).len(), 1);
    }
    let outs = w.msg(&a, &b, &conv, "over");
    assert_eq!(errors(&frames(&outs, ca)), ["RATE_LIMITED"]);
    assert!(acks(&frames(&outs, ca)).is_empty());
    // A duplicate is still acked.
    assert_eq!(
        acks(&frames(&w.msg(&a, &b, &conv, "m5"), ca)),
        [("m5".into(), 6)]
    );
    w.advance(60_000);
    let outs = w.msg(&a, &b, &conv, "over");
    assert_eq!(acks(&frames(&outs, ca)), [("over".into(), 121)]);
}

#[test]
fn typing_forwarded_and_silently_limited() {
    let mut w = World::new();
    let (a, b, conv) = pair(&mut w);
    let (ca, cb) = (a.conn.unwrap(), b.conn.unwrap());
    let mut forwarded = 0;
    for _ in 0..40 {
        let outs = w.send(
            ca,
            json!({"type":"typing","to":b.alias,"conv_id":conv,"crypto_v":1}),
        );
        assert!(frames(&outs, ca).is_empty());
        for f in frames(&outs, cb) {
            let ServerFrame::Typing(t) = f else { panic!() };
            assert_eq!(t.from.as_str(), a.alias);
            forwarded += 1;
        }
    }
    assert_eq!(forwarded, 30);
}

#[test]
fn retract_only_by_author_and_drops_queued_copy() {
    let mut w = World::new();
    let mut a = w.user("alice");
    let mut b = w.user("bob");
    let conv = w.befriend(&a, &b);
    let ca = w.connect(&mut a);
    w.sync(ca);
    w.msg(&a, &b, &conv, "m1");
    w.msg(&a, &b, &conv, "m2");
    // Retract while bob is offline: the queued copy is dropped, the retract kept.
    w.send(
        ca,
        json!({"type":"retract","id":"m1","to":b.alias,"conv_id":conv,"crypto_v":1}),
    );
    let cb = w.connect(&mut b);
    let outs = w.sync(cb);
    let got = frames(&outs, cb);
    assert!(
        matches!(&got[0], ServerFrame::Retract(r) if r.id.as_str() == "m1" && r.from.as_str() == a.alias)
    );
    assert_eq!(msgs(&got), [("m2".into(), 2)]);
    // Bob cannot retract Alice's message.
    let outs = w.send(
        cb,
        json!({"type":"retract","id":"m2","to":a.alias,"conv_id":conv}),
    );
    assert_eq!(errors(&frames(&outs, cb)), ["NOT_THE_AUTHOR"]);
    assert!(frames(&outs, ca).is_empty());
    // Online: forwarded at once.
    let outs = w.send(
        ca,
        json!({"type":"retract","id":"m2","to":b.alias,"conv_id":conv}),
    );
    assert!(matches!(&frames(&outs, cb)[..], [ServerFrame::Retract(r)] if r.id.as_str() == "m2"));
    // Resending a retracted id still gets the same ack, and no redelivery.
    let outs = w.msg(&a, &b, &conv, "m1");
    assert_eq!(acks(&frames(&outs, ca)), [("m1".into(), 1)]);
    assert!(frames(&outs, cb).is_empty());
}

#[test]
fn commit_failure_is_fail_stop() {
    let mut w = World::new();
    let (a, b, conv) = pair(&mut w);
    let ca = a.conn.unwrap();
    w.mem.fail_commits(1);
    let outs = w.msg(&a, &b, &conv, "m1");
    let f = frames(&outs, ca);
    assert!(acks(&f).is_empty());
    assert_eq!(errors(&f), ["STORAGE_UNAVAILABLE"]);
    // The error names the frame it refuses.
    assert!(
        matches!(&f[..], [ServerFrame::Error(e)]
            if e.ref_type.as_deref() == Some("msg") && e.id.as_deref() == Some("m1")),
        "{f:?}"
    );
    assert!(w.relay.is_failed());
    let r = w.get(paths::FRIENDS, Some(&a.token));
    assert_eq!(
        (r.status, r.error_code().unwrap().as_str()),
        (503, "STORAGE_UNAVAILABLE")
    );
    // Rebuilt from the store: the unacknowledged message does not exist.
    let store = w.mem.clone();
    w.restart(Box::new(store));
    let mut a = a;
    let ca = w.connect(&mut a);
    w.sync(ca);
    let outs = w.msg(&a, &b, &conv, "m1");
    assert_eq!(acks(&frames(&outs, ca)), [("m1".into(), 1)]);
}

/// The error frame of a failed commit names the refused frame: its type, and its id when it
/// has one (`msg` above, `retract` here; a receipt has none).
#[test]
fn commit_failure_names_the_refused_frame() {
    for (frame_type, id) in [("retract", Some("m1")), ("delivered", None)] {
        let mut w = World::new();
        let (a, b, conv) = pair(&mut w);
        let (ca, cb) = (a.conn.unwrap(), b.conn.unwrap());
        w.msg(&a, &b, &conv, "m1");
        w.mem.fail_commits(1);
        let (conn, frame) = if frame_type == "retract" {
            (
                ca,
                json!({"type":"retract","id":"m1","to":b.alias,"conv_id":conv}),
            )
        } else {
            (
                cb,
                json!({"type":"delivered","seq":1,"to":a.alias,"conv_id":conv}),
            )
        };
        let outs = w.send(conn, frame);
        let f = frames(&outs, conn);
        assert!(
            matches!(&f[..], [ServerFrame::Error(e)]
                if e.error.to_string() == "STORAGE_UNAVAILABLE"
                    && e.ref_type.as_deref() == Some(frame_type)
                    && e.id.as_deref() == id),
            "{f:?}"
        );
        assert!(w.relay.is_failed());
    }
}

/// Every message expires at its own `at + offline_ttl` (its stored expiry), in expiry order
/// rather than seq order, also after a restart and when the shell's clock stepped back.
#[test]
fn queued_messages_expire_one_by_one_across_restart_and_clock_step() {
    let store = relay_core::store::MemoryStore::new();
    let mut w = World::new();
    w.restart(Box::new(store.clone()));
    let ttl = w.relay.config().offline_ttl_ms;
    let mut a = w.user("alice");
    let b = w.user("bob");
    let conv = w.befriend(&a, &b);
    let ca = w.connect(&mut a);
    w.sync(ca);
    let t0 = w.now;
    w.msg(&a, &b, &conv, "m1");
    w.now = t0.plus_ms(1_000);
    w.msg(&a, &b, &conv, "m2");
    w.now = t0.plus_ms(400); // the clock stepped back: m3 is older than m2
    w.msg(&a, &b, &conv, "m3");
    assert_eq!(w.relay.queued_messages(), 3);
    w.restart(Box::new(store));
    w.now = t0;
    w.advance(ttl - 1);
    assert_eq!(w.relay.queued_messages(), 3);
    w.advance(1);
    assert_eq!(w.relay.queued_messages(), 2, "m1 at its TTL");
    w.advance(400);
    assert_eq!(w.relay.queued_messages(), 1, "m3 at its TTL, before m2");
    w.advance(599);
    assert_eq!(w.relay.queued_messages(), 1);
    w.advance(1);
    assert_eq!(w.relay.queued_messages(), 0, "m2 at its TTL");
}

#[test]
fn an_older_message_queued_behind_a_younger_one_expires_first() {
    let mut w = World::new();
    let ttl = w.relay.config().offline_ttl_ms;
    let mut a = w.user("alice");
    let b = w.user("bob");
    let conv = w.befriend(&a, &b);
    let ca = w.connect(&mut a);
    w.sync(ca);
    let t0 = w.now;
    w.now = t0.plus_ms(1_000);
    w.msg(&a, &b, &conv, "young");
    w.now = t0; // the clock stepped back
    w.msg(&a, &b, &conv, "old");
    w.advance(ttl);
    assert_eq!(w.relay.queued_messages(), 1, "the older message at its TTL");
    w.advance(999);
    assert_eq!(w.relay.queued_messages(), 1);
    w.advance(1);
    assert_eq!(w.relay.queued_messages(), 0);
}

/// A retract has no ack: one sent live may die in a silently dead socket or with a relay that
/// stops after its commit. It is kept and re-sent on every sync of the recipient (also after a
/// restart) until the offline TTL, then purged.
#[test]
fn a_live_retract_is_resent_on_every_sync_until_the_ttl() {
    let mut w = World::new();
    let ttl = w.relay.config().offline_ttl_ms;
    let (a, mut b, conv) = pair(&mut w);
    let (ca, cb) = (a.conn.unwrap(), b.conn.unwrap());
    w.msg(&a, &b, &conv, "m1");
    let outs = w.send(
        ca,
        json!({"type":"retract","id":"m1","to":b.alias,"conv_id":conv,"crypto_v":1}),
    );
    // Sent live (into what may be a dead socket).
    assert!(matches!(&frames(&outs, cb)[..], [ServerFrame::Retract(r)] if r.id.as_str() == "m1"));
    let retracts = |outs: &_, c| {
        frames(outs, c)
            .into_iter()
            .filter(|f| matches!(f, ServerFrame::Retract(r) if r.id.as_str() == "m1"))
            .count()
    };
    // Bob reconnects: again; and again on a later sync, and after a restart.
    let cb = w.connect(&mut b);
    assert_eq!(retracts(&w.sync(cb), cb), 1);
    assert_eq!(retracts(&w.sync(cb), cb), 1);
    w.restart(Box::new(w.mem.clone()));
    let cb = w.connect(&mut b);
    assert_eq!(retracts(&w.sync(cb), cb), 1);
    // Past the TTL: purged.
    w.advance(ttl);
    w.login(&mut b);
    let cb = w.connect(&mut b);
    assert_eq!(retracts(&w.sync(cb), cb), 0);
}
