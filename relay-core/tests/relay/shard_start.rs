//! A relay core that starts (a restart, a failover, a shard moved to this node) holds
//! WebSocket upgrades until every other shard said how full its queues are, so that the first
//! messages a reconnecting client sends are not refused for it; at most `START_HOLD_MS`.
//! Two shards over one store (the `Two` harness of `shards.rs`).

use relay_core::{ConnId, Output};

use crate::shards::{Fate, Two, two_shards};
use crate::world::{User, frames};

/// Owner `a`'s shard restarted reading ahead, and `a`'s upgrade handed to it and held (no
/// answer yet): the harness, `a`, `b`, their conversation, `a`'s shard and the upgrade's
/// connection.
fn restarted_with_a_held_upgrade() -> (Two, User, User, String, usize, ConnId) {
    let (mut two, a, b, conv) = two_shards(false);
    let ia = two.of(&a);
    two.shards[ia].read_ahead(true);
    let store = Box::new(two.shards[ia].mem.clone());
    two.shards[ia].restart(store);
    let (conn, at_once) = two.shards[ia].begin_connect(&a);
    assert!(at_once.is_none(), "held: {at_once:?}");
    assert_eq!(two.shards[ia].relay.stats().upgrades_held, 1);
    (two, a, b, conv, ia, conn)
}

/// Whether any upgrade was answered among `outs`.
fn any_upgrade_answered(outs: &[Output]) -> bool {
    outs.iter().any(|o| matches!(o, Output::Connect { .. }))
}

/// Whether the upgrade of `conn` was accepted among `outs`.
fn upgrade_accepted(outs: &[Output], conn: ConnId) -> bool {
    outs.iter()
        .any(|o| matches!(o, Output::Connect { conn: c, result: Ok(_) } if *c == conn))
}

/// A core that reads ahead holds a WebSocket upgrade after its start until the other shard
/// said how full its queues are, so that the first messages a reconnecting client sends are
/// not refused for it: the upgrade is answered once the levels came, and the message that
/// follows is acknowledged.
#[test]
fn after_a_start_an_upgrade_waits_for_the_other_shards_levels() {
    let (mut two, mut a, b, conv, ia, conn) = restarted_with_a_held_upgrade();
    // Its first timeout asks the other shard, whose answer opens the gate.
    let w = &mut two.shards[ia];
    w.relay.handle_timeout(w.now);
    let outs = w.drain();
    assert!(!any_upgrade_answered(&outs), "{outs:?}");
    two.keep(&outs);
    let outs = two.carry(|_, _| Fate::Deliver);
    assert!(upgrade_accepted(&outs, conn), "{outs:?}");
    a.conn = Some(conn);
    two.shards[ia].sync(conn);
    two.send(&a, &b, &conv, "m1");
}

/// The gate is bounded in time: when the other shard does not answer, a held upgrade goes
/// through after `START_HOLD_MS`, and a message that needs the levels is refused as before
/// (the client sends it again).
#[test]
fn a_held_upgrade_goes_through_when_the_levels_do_not_come() {
    let (mut two, mut a, b, conv, ia, conn) = restarted_with_a_held_upgrade();
    let w = &mut two.shards[ia];
    let due = w.now.plus_ms(relay_core::START_HOLD_MS);
    assert!(w.relay.poll_timeout().is_some_and(|at| at <= due));
    w.now = wire::UnixMs(due.get() - 1);
    w.relay.handle_timeout(w.now);
    let early = w.drain();
    assert!(
        !any_upgrade_answered(&early),
        "not before its time: {early:?}"
    );
    w.now = due;
    w.relay.handle_timeout(w.now);
    let outs = w.drain();
    assert!(upgrade_accepted(&outs, conn), "{outs:?}");
    // The questions are lost on the way: nothing crossed.
    a.conn = Some(conn);
    two.shards[ia].sync(conn);
    let out = two.post(&a, &b, &conv, "m1");
    assert_eq!(
        crate::world::errors(&frames(&out, conn)),
        vec!["STORAGE_UNAVAILABLE"]
    );
}
