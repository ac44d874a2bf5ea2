//! What a relay rebuilds from its store at startup beyond the rows themselves.

use wire::ServerFrame;

use crate::world::{User, World, frames, online_and_offline};

/// Whether `a`'s message `id` to `b` was acknowledged (else refused as rate limited).
fn accepted(w: &mut World, a: &User, b: &User, conv: &str, id: &str) -> bool {
    let fs = frames(&w.msg(a, b, conv, id), a.conn.unwrap());
    match &fs[..] {
        [ServerFrame::Ack(_)] => true,
        [ServerFrame::Error(e)] if e.error.as_str() == "RATE_LIMITED" => false,
        other => panic!("{id}: {other:?}"),
    }
}

/// The per-user message window rebuilt at startup holds the messages of the last minute before
/// the latest stored one, and no older one: a message exactly a minute older started a window
/// that has ended, so it does not open the restored window early (which would hand the sender
/// a fresh allowance).
#[test]
fn the_restored_message_window_leaves_out_a_message_a_minute_older() {
    let mut w = World::with_config(relay_core::Config {
        msgs_per_min_per_user: 3,
        ..crate::world::fast_config()
    });
    let (mut a, b, conv) = online_and_offline(&mut w);
    assert!(accepted(&mut w, &a, &b, &conv, "m0"));
    w.now = w.now.plus_ms(60_000);
    w.connect(&mut a);
    assert!(accepted(&mut w, &a, &b, &conv, "m1"));
    assert!(accepted(&mut w, &a, &b, &conv, "m2"));

    w.restart(Box::new(w.mem.clone()));
    w.now = w.now.plus_ms(1_000);
    w.connect(&mut a);
    assert!(
        accepted(&mut w, &a, &b, &conv, "m3"),
        "the third of this window"
    );
    assert!(
        !accepted(&mut w, &a, &b, &conv, "m4"),
        "a fourth in one minute"
    );
}
