//! The rate limiters at their edges: a fixed window ends exactly `window` ms after its first
//! event (not a millisecond earlier or later), the timer's sweep never forgets a live window or
//! a bucket that is not full, a limit of 0 allows nothing, and a token bucket's `Retry-After` is
//! exactly the time until its next token, fractions included; at a sharded relay a message
//! submitted to its conversation's owner is charged as it goes.

use relay_core::Config;
use relay_core::limits::{Budget, HOUR_MS};

use crate::world::both_online as pair;
use crate::world::{User, World, acks, errors, fast_config, frames};

/// Whether `id` from `a` was accepted (acked) or refused with `RATE_LIMITED`.
fn accepted(w: &mut World, a: &User, b: &User, conv: &str, id: &str) -> bool {
    let ca = a.conn.unwrap();
    let outs = w.msg(a, b, conv, id);
    let fs = frames(&outs, ca);
    match (acks(&fs).len(), errors(&fs).as_slice()) {
        (1, []) => true,
        (0, [e]) if e == "RATE_LIMITED" => false,
        other => panic!("{id}: {other:?}"),
    }
}

/// The message window is fixed: it starts with its first message and ends exactly a minute
/// later; the clock is moved without a timer tick, so only the limiter's own check decides.
#[test]
fn a_message_window_ends_exactly_one_minute_after_its_first_message() {
    let mut w = World::with_config(Config {
        msgs_per_min_per_user: 2,
        ..fast_config()
    });
    let (a, b, conv) = pair(&mut w);
    assert!(accepted(&mut w, &a, &b, &conv, "m0"));
    w.now = w.now.plus_ms(10);
    assert!(accepted(&mut w, &a, &b, &conv, "m1"));
    assert!(!accepted(&mut w, &a, &b, &conv, "m2"), "two per window");
    w.now = w.now.plus_ms(59_989);
    assert!(
        !accepted(&mut w, &a, &b, &conv, "m2"),
        "the last millisecond of the window"
    );
    w.now = w.now.plus_ms(1);
    assert!(
        accepted(&mut w, &a, &b, &conv, "m2"),
        "a minute after the first message: a new window"
    );
    // The new window started with `m2`: one more, then refused until a minute after it.
    w.now = w.now.plus_ms(1);
    assert!(accepted(&mut w, &a, &b, &conv, "m3"));
    assert!(!accepted(&mut w, &a, &b, &conv, "m4"));
    w.now = w.now.plus_ms(59_998);
    assert!(!accepted(&mut w, &a, &b, &conv, "m4"));
    w.now = w.now.plus_ms(1);
    assert!(accepted(&mut w, &a, &b, &conv, "m4"));
}

/// The timer sweeps expired windows only: a live one keeps counting across ticks.
#[test]
fn a_timer_tick_does_not_reset_a_live_message_window() {
    let mut w = World::with_config(Config {
        msgs_per_min_per_user: 2,
        ..fast_config()
    });
    let (a, b, conv) = pair(&mut w);
    assert!(accepted(&mut w, &a, &b, &conv, "m0"));
    assert!(accepted(&mut w, &a, &b, &conv, "m1"));
    w.advance(1);
    assert!(
        !accepted(&mut w, &a, &b, &conv, "m2"),
        "still the same window"
    );
    w.advance(59_000);
    assert!(!accepted(&mut w, &a, &b, &conv, "m2"));
    w.advance(999);
    assert!(
        accepted(&mut w, &a, &b, &conv, "m2"),
        "the window has ended"
    );
}

/// A limit of 0 messages per minute allows none, the first one included.
#[test]
fn a_message_limit_of_zero_allows_no_message() {
    let mut w = World::with_config(Config {
        msgs_per_min_per_user: 0,
        ..fast_config()
    });
    let (a, b, conv) = pair(&mut w);
    assert!(!accepted(&mut w, &a, &b, &conv, "m0"));
    w.now = w.now.plus_ms(120_000);
    assert!(!accepted(&mut w, &a, &b, &conv, "m0"));
}

fn lookup_config() -> Config {
    // Two at once, then one every 30 s.
    Config {
        lookups: Budget {
            burst: 2,
            per_window: 120,
            window_ms: HOUR_MS,
        },
        ..fast_config()
    }
}

/// `(status, Retry-After)` of one user lookup.
fn lookup(w: &mut World, u: &User) -> (u16, Option<u64>) {
    let r = w.get("/api/v1/users/u10000000", Some(&u.token));
    // 200 if the alias happens to be taken: either way the lookup was answered.
    let status = if r.status == 200 { 404 } else { r.status };
    (status, r.retry_after_s)
}

/// `Retry-After` of a token bucket is the time until its next token: a whole token's refill
/// right after the burst, what is left of it once part has refilled.
#[test]
fn a_lookup_budget_says_exactly_when_its_next_token_comes() {
    let mut w = World::with_config(lookup_config());
    let u = w.user("alice");
    assert_eq!(lookup(&mut w, &u), (404, None));
    assert_eq!(lookup(&mut w, &u), (404, None));
    assert_eq!(lookup(&mut w, &u), (429, Some(30)), "one token per 30 s");
    w.now = w.now.plus_ms(10_000);
    assert_eq!(lookup(&mut w, &u), (429, Some(20)), "a third refilled");
    w.now = w.now.plus_ms(19_999);
    assert_eq!(lookup(&mut w, &u), (429, Some(1)), "a millisecond left");
    w.now = w.now.plus_ms(1);
    assert_eq!(lookup(&mut w, &u), (404, None), "the token is back");
    assert_eq!(lookup(&mut w, &u), (429, Some(30)));
}

/// The timer forgets full buckets only: a bucket that is empty, or partly refilled, is kept
/// across ticks, so ticking does not hand out tokens.
#[test]
fn a_timer_tick_does_not_refill_a_lookup_budget() {
    let mut w = World::with_config(lookup_config());
    let u = w.user("alice");
    assert_eq!(lookup(&mut w, &u).0, 404);
    assert_eq!(lookup(&mut w, &u).0, 404);
    w.advance(1);
    assert_eq!(lookup(&mut w, &u).0, 429, "empty, one tick later");
    w.advance(30_000);
    assert_eq!(lookup(&mut w, &u).0, 404, "one token refilled");
    w.advance(15_000);
    assert_eq!(lookup(&mut w, &u), (429, Some(15)), "half a token kept");
    // A whole hour of ticks refills the burst, never more.
    w.advance(HOUR_MS);
    assert_eq!(lookup(&mut w, &u).0, 404);
    assert_eq!(lookup(&mut w, &u).0, 404);
    assert_eq!(lookup(&mut w, &u), (429, Some(30)));
}

/// At a sharded relay the message rate of a sender whose conversation another shard owns is
/// charged at its shard as each message is submitted, not when its verdict comes back: a
/// burst sent before any verdict is refused past the limit. A message the owner finds stored
/// already (a resend) gives its charge back.
#[test]
fn a_submitted_message_is_charged_as_it_goes_and_a_resend_is_refunded() {
    use crate::shards::{Fate, Two, across};
    let mut setup = World::with_config(Config {
        msgs_per_min_per_user: 2,
        ..fast_config()
    });
    let (mut owner, mut sender) = across(&mut setup);
    let conv = setup.befriend(&owner, &sender);
    let mut two = Two::split(setup);
    let (io, is) = (two.of(&owner), two.of(&sender));
    for (i, u) in [(io, &mut owner), (is, &mut sender)] {
        let c = two.shards[i].connect(u);
        two.shards[i].sync(c);
    }
    let cs = sender.conn.unwrap();
    // What the sender's shard answers at once: nothing (submitted) or RATE_LIMITED.
    let send = |two: &mut Two, id: &str| {
        let outs = two.shards[is].msg(&sender, &owner, &conv, id);
        two.keep(&outs);
        errors(&frames(&outs, cs))
    };
    assert!(send(&mut two, "m1").is_empty());
    assert!(send(&mut two, "m2").is_empty());
    assert_eq!(
        send(&mut two, "m3"),
        ["RATE_LIMITED"],
        "two submitted, none answered"
    );
    let outs = two.carry(|_, _| Fate::Deliver);
    assert_eq!(acks(&frames(&outs, cs)).len(), 2);
    // A minute later: m2 again is a resend, whose charge comes back.
    two.advance(60_000);
    two.carry(|_, _| Fate::Deliver);
    assert!(send(&mut two, "m2").is_empty());
    let outs = two.carry(|_, _| Fate::Deliver);
    assert_eq!(acks(&frames(&outs, cs)).len(), 1, "the first ack, again");
    assert!(send(&mut two, "m4").is_empty());
    assert!(send(&mut two, "m5").is_empty());
    assert_eq!(send(&mut two, "m6"), ["RATE_LIMITED"]);
}
