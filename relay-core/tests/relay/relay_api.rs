//! The relay's public surface beside its HTTP and text inputs: what its small types print, and
//! frames in binary messages or decoded by the shell.

use relay_core::store::Store as _;
use relay_core::{BatchFailed, WsConnect};
use serde_json::json;

use crate::world::{World, acks, both_online, frames};

/// An upgrade request's `Debug` names its type and nothing of the query (the ticket is a
/// credential) or the protocol header.
#[test]
fn a_ws_connect_prints_none_of_its_query() {
    let req = WsConnect {
        query: "user_uuid=u&ticket=SECRET-TICKET".into(),
        protocol: Some("securechat.v1".into()),
    };
    assert_eq!(format!("{req:?}"), "WsConnect { .. }");
}

/// A failed batch and a sealed batch's id say what they are; ids count up from 0 in seal order.
#[test]
fn batch_ids_count_up_in_seal_order_and_print_as_batch_n() {
    assert_eq!(
        BatchFailed.to_string(),
        "the batch's commit failed: nothing of it was stored, the relay stopped"
    );
    let mut w = World::new();
    let (a, b, conv) = both_online(&mut w);
    w.pipeline();
    let ca = a.conn.unwrap();
    let mut ids = Vec::new();
    for n in 0..3 {
        let text = json!({"type":"msg","id":format!("b{n}"),"to":b.alias,"conv_id":conv,
                          "crypto_v":1,"payload":"cA=="})
        .to_string();
        w.relay.handle_text(w.now, ca, &text);
        assert!(w.seal());
        let id = w.pending.back().unwrap().id;
        ids.push((id.get(), id.to_string()));
    }
    assert_eq!(
        ids,
        [
            (0, "batch 0".to_owned()),
            (1, "batch 1".to_owned()),
            (2, "batch 2".to_owned())
        ]
    );
    w.settle();
}

/// A frame in a binary message (iOS sends JSON in binary frames), or decoded by the shell, or
/// handed over already decoded, is handled as its text would be; from an unknown connection it
/// is ignored.
#[test]
fn a_frame_in_binary_or_decoded_by_the_shell_is_handled_like_its_text() {
    let mut w = World::new();
    let (a, b, conv) = both_online(&mut w);
    let ca = a.conn.unwrap();
    let text = |id: &str| msg_text(&b, &conv, id);
    let unknown = relay_core::ConnId(999);
    let frame = wire::ClientFrame::decode(&text("f1")).unwrap();
    w.relay.handle_frame(w.now, unknown, frame.clone());
    w.relay.handle_binary(w.now, unknown, text("f1").as_bytes());
    w.relay.handle_decoded(w.now, unknown, Ok(frame.clone()));
    assert!(w.drain().is_empty(), "an unknown connection is ignored");

    w.relay.handle_frame(w.now, ca, frame);
    let outs = w.drain();
    assert_eq!(acks(&frames(&outs, ca)), [("f1".to_owned(), 1)]);
    w.relay.handle_binary(w.now, ca, text("f2").as_bytes());
    let outs = w.drain();
    assert_eq!(acks(&frames(&outs, ca)), [("f2".to_owned(), 2)]);
    let decoded = wire::ClientFrame::decode_bytes(text("f3").as_bytes());
    w.relay.handle_decoded(w.now, ca, decoded);
    let outs = w.drain();
    assert_eq!(acks(&frames(&outs, ca)), [("f3".to_owned(), 3)]);
    assert_eq!(w.relay.queued_messages(), 3);
}

/// With pipelined commits, an upload that expires on a timer inside the open batch keeps its
/// parts until that batch is durable: a crash before the commit finds the upload still stored,
/// and its bytes with it.
#[test]
fn an_expired_upload_keeps_its_parts_until_its_batch_is_durable() {
    let blobs = relay_core::MemoryBlobStore::new();
    let mut w = World::with_blobs(crate::world::fast_config(), blobs.clone());
    let a = w.user("alice");
    let (id, key) = crate::media::init(&mut w, &a);
    let r = crate::media::chunk(&mut w, &a.token, &id, &key, "1", vec![7; 64]);
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    assert_eq!(blobs.part_count(), 1);
    w.pipeline();
    w.now = w.now.plus_ms(2 * 60 * 60 * 1000);
    w.relay.handle_timeout(w.now);
    assert_eq!(blobs.part_count(), 1, "deleted before the batch is sealed");
    assert!(w.seal());
    assert_eq!(blobs.part_count(), 1, "deleted before the batch is durable");
    w.commit_next(true).unwrap();
    assert_eq!(blobs.part_count(), 0);
}

/// `begin_batch` while a batch is open is a no-op: what the open batch holds is committed and
/// released by the one `commit_batch`. On a failed relay it opens nothing.
#[test]
fn beginning_a_batch_twice_keeps_the_open_one() {
    let mut w = World::new();
    let (a, b, conv) = both_online(&mut w);
    let (ca, cb) = (a.conn.unwrap(), b.conn.unwrap());
    w.relay.begin_batch();
    let text = json!({"type":"msg","id":"k1","to":b.alias,"conv_id":conv,"crypto_v":1,
                      "payload":"cA=="})
    .to_string();
    w.relay.handle_text(w.now, ca, &text);
    w.relay.begin_batch();
    assert!(w.relay.in_batch());
    w.relay.commit_batch().unwrap();
    let outs = w.drain();
    assert_eq!(acks(&frames(&outs, ca)), [("k1".to_owned(), 1)]);
    assert_eq!(
        crate::world::msgs(&frames(&outs, cb)),
        [("k1".to_owned(), 1)]
    );

    w.mem.fail_commits(1);
    w.relay.handle_text(w.now, ca, &text.replace("k1", "k2"));
    assert!(w.relay.is_failed());
    w.relay.begin_batch();
    assert!(!w.relay.in_batch());
}

/// A relay that keeps its store may still seal a batch for the shell to commit: while that
/// batch is in flight, a later input joins a new batch instead of committing on its own, so its
/// answer never overtakes the sealed batch's.
#[test]
fn an_input_after_a_sealed_batch_waits_behind_it() {
    let mut w = World::new();
    let (a, b, conv) = both_online(&mut w);
    let ca = a.conn.unwrap();
    let text = |id: &str| msg_text(&b, &conv, id);
    let mut store = w.mem.clone();
    w.relay.begin_batch();
    w.relay.handle_text(w.now, ca, &text("s1"));
    let sealed = w
        .relay
        .seal_batch()
        .unwrap()
        .expect("a batch with mutations");
    assert!(!w.relay.in_batch());
    w.relay.handle_text(w.now, ca, &text("s2"));
    assert!(w.relay.in_batch(), "the input joined a new batch");
    assert!(
        w.released().is_empty(),
        "released before the sealed batch's commit"
    );

    store.commit(&sealed.mutations).unwrap();
    w.relay.handle_committed(sealed.id, &Ok(())).unwrap();
    assert_eq!(acks(&frames(&w.released(), ca)), [("s1".to_owned(), 1)]);
    let next = w.relay.seal_batch().unwrap().expect("the batch of s2");
    store.commit(&next.mutations).unwrap();
    w.relay.handle_committed(next.id, &Ok(())).unwrap();
    assert_eq!(acks(&frames(&w.released(), ca)), [("s2".to_owned(), 2)]);
}

/// `config` is the configuration the relay was built with.
#[test]
fn the_relay_reports_the_configuration_it_was_built_with() {
    let config = relay_core::Config {
        sync_window_msgs: 7,
        msgs_per_min_per_user: 11,
        ..crate::world::fast_config()
    };
    let w = World::with_config(config);
    let c = w.relay.config();
    assert_eq!(
        (
            c.pow_difficulty,
            c.sync_window_msgs,
            c.msgs_per_min_per_user
        ),
        (1, 7, 11)
    );
}

/// The text of a `msg` frame to `to` in `conv` with message id `id`.
fn msg_text(to: &crate::world::User, conv: &str, id: &str) -> String {
    json!({"type":"msg","id":id,"to":to.alias,"conv_id":conv,"crypto_v":1,"payload":"cA=="})
        .to_string()
}
