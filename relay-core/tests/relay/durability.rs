//! Durability: drop the relay mid-stream, reopen it on the same SQLite file, check that
//! nothing acknowledged is lost and nothing is delivered twice.

use std::collections::BTreeMap;

use relay_core::store::SqliteStore;
use serde_json::json;
use wire::ServerFrame;

use crate::world::{World, acks, frames};

#[test]
fn sqlite_crash_and_reopen_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("relay.db");
    let mut w = World::new();
    w.restart(Box::new(SqliteStore::open(&path).unwrap()));
    let mut a = w.user("alice");
    let mut b = w.user("bob");
    let conv = w.befriend(&a, &b);
    let ca = w.connect(&mut a);
    w.sync(ca);
    let mut acked = BTreeMap::new();
    for i in 1..=10 {
        let outs = w.msg(&a, &b, &conv, &format!("m{i}"));
        for (id, seq) in acks(&frames(&outs, ca)) {
            acked.insert(seq, id);
        }
    }
    // Bob reads a prefix and acknowledges it.
    let cb = w.connect(&mut b);
    let outs = w.sync(cb);
    let first = crate::model::replayed(&outs, cb);
    assert_eq!(first.len(), 10);
    w.send(
        cb,
        json!({"type":"delivered","conv_id":conv,"seq":4,"to":a.alias}),
    );
    // Crash: the relay is dropped; a new one opens the same file.
    w.restart(Box::new(SqliteStore::open(&path).unwrap()));
    // Tokens survive the restart (persisted signing key, current jti).
    let ca = w.connect(&mut a);
    w.sync(ca);
    let cb = w.connect(&mut b);
    let outs = w.sync(cb);
    let replay: Vec<(u64, String)> = frames(&outs, cb)
        .iter()
        .filter_map(|f| {
            if let ServerFrame::Msg(m) = f {
                Some((m.seq.get(), m.id.to_string()))
            } else {
                None
            }
        })
        .collect();
    let expected: Vec<(u64, String)> = acked.range(5..).map(|(s, i)| (*s, i.clone())).collect();
    assert_eq!(
        replay, expected,
        "exactly the undelivered suffix, nothing delivered twice"
    );
    // The dedup survives too: a resend gets the original seq.
    let outs = w.msg(&a, &b, &conv, "m3");
    assert_eq!(acks(&frames(&outs, ca)), [("m3".into(), 3)]);
    let outs = w.msg(&a, &b, &conv, "m11");
    assert_eq!(acks(&frames(&outs, ca)), [("m11".into(), 11)]);
    // The receipt mark survived: re-sending delivered 4 is not forwarded again.
    let outs = w.send(
        cb,
        json!({"type":"delivered","conv_id":conv,"seq":4,"to":a.alias}),
    );
    assert!(frames(&outs, ca).is_empty());
}

#[test]
fn memory_store_survives_a_simulated_crash() {
    let mut w = World::new();
    let mut a = w.user("alice");
    let mut b = w.user("bob");
    let conv = w.befriend(&a, &b);
    let ca = w.connect(&mut a);
    w.sync(ca);
    w.msg(&a, &b, &conv, "m1");
    let store = w.mem.clone();
    w.restart(Box::new(store));
    let cb = w.connect(&mut b);
    let outs = w.sync(cb);
    assert_eq!(crate::world::msgs(&frames(&outs, cb)), [("m1".into(), 1)]);
    // A restart with the same seed never re-issues an earlier token id.
    let t1 = a.token.clone();
    w.login(&mut a);
    assert_ne!(t1, a.token);
}
