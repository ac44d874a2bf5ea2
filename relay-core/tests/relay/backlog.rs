//! Issue 17: backlogs and abusive clients, driven in memory under a virtual clock.
//!
//! * D1: a backlog of 20 contacts × 100 messages reaches a reader that answers every `msg`
//!   with its own `delivered` (the reference web client), in one session: exactly once, never
//!   more in flight than the shell's outbound queue holds, never a close, never `RATE_LIMITED`.
//! * D5: every frame a connection sends counts against its budget *before* decoding; past it
//!   the relay stops answering and closes the socket.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use relay_core::{CloseReason, Config, ConnId, Output};
use serde_json::json;
use wire::ServerFrame;

use crate::world::{User, World, b64, closed, errors, frames};

/// Frames the relay shell's outbound queue holds per socket (`relay_server`): a replay that puts
/// more than this in flight overflows it, and the shell closes the socket.
const SHELL_OUTBOUND_FRAMES: usize = 1024;
/// The reader handles one `msg` every this many ms (2,000 receipts in 20 s).
const READER_STEP_MS: u64 = 10;

struct Backlog {
    w: World,
    reader: User,
    /// (conv id, sender) per contact.
    contacts: Vec<(String, User)>,
}

/// `contacts` friends of an offline reader, each of whom sends it `per_contact` messages.
fn backlog(config: Config, contacts: usize, per_contact: usize) -> Backlog {
    let mut w = World::with_config(config);
    let reader = w.user("reader");
    let mut senders = Vec::new();
    for i in 0..contacts {
        let mut s = w.user(&format!("sender{i}"));
        let conv = w.befriend(&s, &reader);
        let c = w.connect(&mut s);
        w.sync(c);
        senders.push((conv, s));
    }
    for (i, (conv, s)) in senders.iter().enumerate() {
        for k in 0..per_contact {
            let outs = w.msg(s, &reader, conv, &format!("c{i}-m{k}"));
            assert!(
                errors(&frames(&outs, s.conn.unwrap())).is_empty(),
                "sending the backlog"
            );
            w.advance(1);
        }
    }
    Backlog {
        w,
        reader,
        contacts: senders,
    }
}

/// What the reader saw in one session.
#[derive(Debug, Default)]
struct Session {
    /// (conv, seq) of every `msg`, in arrival order.
    got: Vec<(String, u64)>,
    /// Most `msg` frames pushed and not yet answered by a `delivered`, at any time.
    max_in_flight: usize,
    errors: Vec<String>,
    closed: bool,
}

/// Connects the reader, syncs, and answers every `msg` with its own `delivered`, one every
/// [`READER_STEP_MS`], until nothing more arrives.
fn read_like_the_web_client(b: &mut Backlog) -> Session {
    let w = &mut b.w;
    let conn = w.connect(&mut b.reader);
    let mut s = Session::default();
    let mut unanswered: VecDeque<(String, u64)> = VecDeque::new();
    let outs = w.sync(conn);
    let mut pending = collect(&outs, conn, &mut s, &mut unanswered);
    let alias_of: BTreeMap<String, String> = b
        .contacts
        .iter()
        .map(|(conv, u)| (conv.clone(), u.alias.clone()))
        .collect();
    while pending && !s.closed {
        let Some((conv, seq)) = unanswered.pop_front() else {
            break;
        };
        w.now = w.now.plus_ms(READER_STEP_MS);
        let to = &alias_of[&conv];
        let outs = w.send(
            conn,
            json!({"type":"delivered","conv_id":conv,"seq":seq,"to":to,"crypto_v":1}),
        );
        pending = collect(&outs, conn, &mut s, &mut unanswered) || !unanswered.is_empty();
    }
    s
}

fn collect(
    outs: &[Output],
    conn: ConnId,
    s: &mut Session,
    unanswered: &mut VecDeque<(String, u64)>,
) -> bool {
    s.closed |= closed(outs, conn);
    let fs = frames(outs, conn);
    s.errors.extend(errors(&fs));
    for f in &fs {
        if let ServerFrame::Msg(m) = f {
            let key = (m.conv_id.to_string(), m.seq.get());
            s.got.push(key.clone());
            unanswered.push_back(key);
        }
    }
    s.max_in_flight = s.max_in_flight.max(unanswered.len());
    !unanswered.is_empty()
}

/// D1: 20 contacts × 100 messages to an offline user; one sync; every message arrives exactly
/// once, the relay never closes the socket, never refuses a receipt, and never has more
/// messages in flight than the shell's outbound queue holds.
#[test]
fn a_backlog_of_2000_messages_from_20_contacts_arrives_in_one_session() {
    let mut b = backlog(crate::world::fast_config(), 20, 100);
    let s = read_like_the_web_client(&mut b);
    assert!(!s.closed, "the relay closed the reader's socket");
    assert!(s.errors.is_empty(), "errors: {:?}", dedup(&s.errors));
    let unique: BTreeSet<_> = s.got.iter().cloned().collect();
    assert_eq!(unique.len(), s.got.len(), "a message arrived twice");
    assert_eq!(s.got.len(), 2_000, "every message arrives");
    assert!(
        s.max_in_flight <= SHELL_OUTBOUND_FRAMES,
        "{} messages in flight at once: more than the shell's outbound queue ({SHELL_OUTBOUND_FRAMES})",
        s.max_in_flight
    );
    assert_eq!(b.w.relay.queued_messages(), 0, "every message was released");
}

fn dedup(v: &[String]) -> BTreeMap<&str, usize> {
    let mut m = BTreeMap::new();
    for e in v {
        *m.entry(e.as_str()).or_default() += 1;
    }
    m
}

/// D5: malformed frames count against the connection's budget before decoding; past it the
/// relay stops answering and closes the socket with `RateLimited`.
#[test]
fn a_flood_of_malformed_frames_is_cut_off_and_closed() {
    let mut w = World::new();
    let mut a = w.user("alice");
    let ca = w.connect(&mut a);
    w.sync(ca);
    let mut answered = 0usize;
    let mut closed_after = None;
    for i in 0..10_000 {
        let outs = w.send_raw(ca, "{not json");
        answered += frames(&outs, ca).len();
        if closed(&outs, ca) {
            closed_after = Some(i + 1);
            assert!(outs.iter().any(|o| matches!(
                o,
                Output::Close { conn, reason: CloseReason::RateLimited } if *conn == ca
            )));
            break;
        }
    }
    let n = closed_after.expect("the flood was never cut off");
    assert!(n <= 5_000, "closed only after {n} frames");
    assert!(answered < n, "every frame was answered");
    assert!(!w.relay.is_connected(ca));
    // Stopped answering: nothing for the next frames.
    assert!(w.send_raw(ca, "{not json").is_empty());
    let _ = b64(&[]);
}

/// D5, frames a shell decodes itself (`handle_decoded`): an undecodable one is answered with
/// the same error frame as undecodable text, and charged to the same budget, so a flood of
/// them is cut off and closed just the same.
#[test]
fn undecodable_frames_decoded_by_the_shell_are_charged_too() {
    let mut w = World::new();
    let mut a = w.user("alice");
    let ca = w.connect(&mut a);
    w.sync(ca);
    let error = wire::ClientFrame::decode_bytes(b"{not json").unwrap_err();
    w.relay.handle_decoded(w.now, ca, Err(error.clone()));
    let first = w.drain();
    let text_answer = w.send_raw(ca, "{not json");
    assert_eq!(
        frames(&first, ca),
        frames(&text_answer, ca),
        "the same answer as for undecodable text"
    );
    let mut closed_after = None;
    for i in 0..10_000 {
        w.relay.handle_decoded(w.now, ca, Err(error.clone()));
        if closed(&w.drain(), ca) {
            closed_after = Some(i + 1);
            break;
        }
    }
    let n = closed_after.expect("a flood of undecodable frames was never cut off");
    assert!(n <= 5_000, "closed only after {n} frames");
    assert!(!w.relay.is_connected(ca));
}

/// The window spans conversations: with three backlogs and a window of three, one message of
/// each is pushed, the conversation with the oldest message first; each receipt gives the
/// next turn.
#[test]
fn the_window_is_shared_and_fair_across_conversations() {
    let config = Config {
        sync_window_msgs: 3,
        ..crate::world::fast_config()
    };
    let mut b = backlog(config, 3, 4);
    let w = &mut b.w;
    let conn = w.connect(&mut b.reader);
    let outs = w.sync(conn);
    let conv = |i: usize| b.contacts[i].0.clone();
    let pushed: Vec<(String, u64)> = msgs_of(&outs, conn);
    assert_eq!(pushed, [(conv(0), 1), (conv(1), 1), (conv(2), 1)]);
    // A receipt for contact 1 frees one slot: the next turn is contact 0's (round robin).
    let to1 = b.contacts[1].1.alias.clone();
    let outs = w.send(
        conn,
        json!({"type":"delivered","conv_id":conv(1),"seq":1,"to":to1}),
    );
    assert_eq!(msgs_of(&outs, conn), [(conv(0), 2)]);
    // Acking everything in flight gives the next three turns in order.
    let mut acked = Vec::new();
    for (i, seq) in [(0, 2), (2, 1), (0, 1)] {
        let to = b.contacts[i].1.alias.clone();
        let outs = w.send(
            conn,
            json!({"type":"delivered","conv_id":conv(i),"seq":seq,"to":to}),
        );
        acked.extend(msgs_of(&outs, conn));
    }
    assert_eq!(acked, [(conv(1), 2), (conv(2), 2), (conv(0), 3)]);
}

/// The window is also bounded in bytes: large payloads leave fewer messages in flight (one is
/// always allowed).
#[test]
fn the_window_is_bounded_in_bytes() {
    let payload_bytes = 40 * 1024;
    let config = Config {
        sync_window_bytes: 100 * 1024,
        ..crate::world::fast_config()
    };
    let mut w = World::with_config(config);
    let mut a = w.user("alice");
    let mut r = w.user("reader");
    let conv = w.befriend(&a, &r);
    let ca = w.connect(&mut a);
    w.sync(ca);
    let payload = b64(&vec![7u8; payload_bytes * 3 / 4]);
    for i in 0..5 {
        let outs = w.send(
            ca,
            json!({"type":"msg","id":format!("big{i}"),"to":r.alias,"conv_id":conv,"payload":payload}),
        );
        assert!(errors(&frames(&outs, ca)).is_empty());
    }
    let cr = w.connect(&mut r);
    let outs = w.sync(cr);
    assert_eq!(
        msgs_of(&outs, cr).len(),
        2,
        "2 × 40 KiB fit in 100 KiB, 3 do not"
    );
    let outs = w.send(
        cr,
        json!({"type":"delivered","conv_id":conv,"seq":2,"to":a.alias}),
    );
    assert_eq!(msgs_of(&outs, cr).len(), 2);
    // A window smaller than one message still lets one through.
    let mut w = World::with_config(Config {
        sync_window_bytes: 1,
        ..crate::world::fast_config()
    });
    let mut a = w.user("alice");
    let mut r = w.user("reader");
    let conv = w.befriend(&a, &r);
    let ca = w.connect(&mut a);
    w.sync(ca);
    w.msg(&a, &r, &conv, "m1");
    w.msg(&a, &r, &conv, "m2");
    let cr = w.connect(&mut r);
    assert_eq!(msgs_of(&w.sync(cr), cr).len(), 1);
}

/// Messages that leave the queue without a receipt (expiry, retraction) leave the window too.
#[test]
fn expired_and_retracted_messages_free_the_window() {
    let config = Config {
        sync_window_msgs: 2,
        ..crate::world::fast_config()
    };
    let mut w = World::with_config(config);
    let ttl = w.relay.config().offline_ttl_ms;
    let mut a = w.user("alice");
    let mut r = w.user("reader");
    let conv = w.befriend(&a, &r);
    let ca = w.connect(&mut a);
    w.sync(ca);
    w.msg(&a, &r, &conv, "m1");
    w.msg(&a, &r, &conv, "m2");
    w.advance(ttl / 2);
    // Alice's socket went idle meanwhile: she reconnects.
    let ca = w.connect(&mut a);
    w.sync(ca);
    w.msg(&a, &r, &conv, "m3");
    w.msg(&a, &r, &conv, "m4");
    let cr = w.connect(&mut r);
    let outs = w.sync(cr);
    assert_eq!(msgs_of(&outs, cr), [(conv.clone(), 1), (conv.clone(), 2)]);
    // Retracting m2 (in flight) frees its slot: m3 is pushed.
    let outs = w.send(
        ca,
        json!({"type":"retract","id":"m2","to":r.alias,"conv_id":conv}),
    );
    assert_eq!(msgs_of(&outs, cr), [(conv.clone(), 3)]);
    // m1 expires unanswered (both sockets kept alive by pings): m4 is pushed.
    for _ in 0..(ttl / 2 / 60_000) {
        w.now = w.now.plus_ms(60_000);
        w.send(ca, json!({"type":"ping"}));
        w.send(cr, json!({"type":"ping"}));
        w.relay.handle_timeout(w.now);
    }
    let outs = w.drain();
    let mut later = msgs_of(&outs, cr);
    later.extend(msgs_of(&w.log.clone(), cr).into_iter().filter(|m| m.1 == 4));
    assert!(
        later.contains(&(conv.clone(), 4)),
        "m4 pushed once m1 expired"
    );
}

fn msgs_of(outs: &[Output], conn: ConnId) -> Vec<(String, u64)> {
    frames(outs, conn)
        .into_iter()
        .filter_map(|f| match f {
            ServerFrame::Msg(m) => Some((m.conv_id.to_string(), m.seq.get())),
            _ => None,
        })
        .collect()
}

/// D5: binary frames count too, and the budget belongs to the account: reconnecting does not
/// refill it.
#[test]
fn binary_floods_are_cut_off_and_the_budget_survives_reconnecting() {
    let config = Config {
        frame_burst_per_conn: 50,
        frames_per_min_per_conn: 60,
        ..crate::world::fast_config()
    };
    let mut w = World::with_config(config);
    let mut a = w.user("alice");
    let ca = w.connect(&mut a);
    let mut sent = 0;
    while w.relay.is_connected(ca) {
        w.relay.handle_binary(w.now, ca, &[0xff, 0xfe]);
        w.drain();
        sent += 1;
        assert!(sent <= 51);
    }
    assert_eq!(sent, 51, "50 answered, the 51st closes");
    let ca = w.connect(&mut a);
    w.relay.handle_binary(w.now, ca, b"{\"type\":\"ping\"}");
    let outs = w.drain();
    assert!(
        closed(&outs, ca),
        "a new connection of the account starts with no budget"
    );
    // One token per second comes back.
    w.now = w.now.plus_ms(1_000);
    let ca = w.connect(&mut a);
    w.relay.handle_binary(w.now, ca, b"{\"type\":\"ping\"}");
    let outs = w.drain();
    assert!(!closed(&outs, ca));
    assert!(w.relay.is_connected(ca));
}

/// Receipts that release pushed messages are free; any other frame costs its token.
#[test]
fn receipts_for_pushed_messages_are_free_other_frames_are_not() {
    // A budget of 61 frames and no refill: the sender's `sync` and 60 messages use all of its
    // own; the reader's `sync` leaves it 60.
    let config = Config {
        frame_burst_per_conn: 61,
        frames_per_min_per_conn: 0,
        ..crate::world::fast_config()
    };
    let mut b = backlog(config, 1, 60);
    let s = read_like_the_web_client(&mut b);
    assert!(!s.closed, "60 free receipts");
    assert_eq!(s.got.len(), 60);
    // A receipt that releases nothing (a repeat) is not free: 60 are answered, the 61st closes.
    let conn = b.reader.conn.unwrap();
    let (conv, sender) = b.contacts[0].clone();
    let mut sent = 0;
    while b.w.relay.is_connected(conn) {
        b.w.send(
            conn,
            json!({"type":"delivered","conv_id":conv,"seq":60,"to":sender.alias}),
        );
        sent += 1;
        assert!(sent <= 61);
    }
    assert_eq!(sent, 61, "repeated receipts spend the budget");
}
