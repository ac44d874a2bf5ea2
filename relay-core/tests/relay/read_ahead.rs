//! Reading ahead (`Relay::read_ahead`): a frame that needs a row not in memory is parked on
//! its read, which the shell runs off the relay's task; everyone else is served meanwhile, the
//! connection's later frames wait behind it in order, and a failed read refuses the frame.
//! HTTP requests and upgrades wait the same way, each on its own, and are answered by an
//! output.

use relay_core::prefetch::ReadOp;
use relay_core::store::Table;
use relay_core::{Config, ConnId, HttpRequest, HttpResponse, Method, Output, RequestId, WsConnect};
use wire::http::paths;
use wire::{ErrorCode, ServerFrame};

use crate::world::{User, World, fast_config, frames, msgs, register_request};

/// Acks among `outs` on `u`'s connection, as (id, seq).
fn acks(outs: &[Output], u: &User) -> Vec<(String, u64)> {
    frames(outs, u.conn.unwrap())
        .into_iter()
        .filter_map(|f| match f {
            ServerFrame::Ack(a) => Some((a.id.to_string(), a.seq.get())),
            _ => None,
        })
        .collect()
}

/// A world whose relay restarted reading ahead, with `a` (who wrote `sent` messages to `b`
/// before the restart, so its tombstones are only in the store) and `c`, `d` connected and
/// synced, their reads done. `config`: the relay's.
fn restarted(config: Config, sent: usize) -> (World, [User; 4], String, String) {
    restarted_with(config, sent, true)
}

/// [`restarted`], with `b` connected and synced too when `b_online` (otherwise `a`'s messages
/// stay queued for it, only in the store).
fn restarted_with(
    config: Config,
    sent: usize,
    b_online: bool,
) -> (World, [User; 4], String, String) {
    let mut w = World::with_config(config);
    let (mut a, mut b) = (w.user("a"), w.user("b"));
    let (mut c, mut d) = (w.user("c"), w.user("d"));
    let ab = w.befriend(&a, &b);
    let cd = w.befriend(&c, &d);
    w.connect(&mut a);
    for i in 0..sent {
        let outs = w.msg(&a, &b, &ab, &format!("old-{i}"));
        assert_eq!(acks(&outs, &a).len(), 1);
    }
    let store = w.mem.clone();
    w.restart(Box::new(store));
    w.read_ahead(false);
    let mut online = vec![&mut a, &mut c, &mut d];
    if b_online {
        online.push(&mut b);
    }
    for u in online {
        let conn = w.connect(u);
        w.sync(conn);
    }
    w.finish_reads();
    // `c` has sent once: its (empty) tombstone set is in memory.
    w.msg(&c, &d, &cd, "warm");
    w.finish_reads();
    (w, [a, b, c, d], ab, cd)
}

#[test]
fn a_bystander_is_served_while_a_frame_waits_for_its_read() {
    let (mut w, [a, b, c, d], ab, cd) = restarted(fast_config(), 3);
    let parked = w.relay.stats().frames_parked;

    // `a`'s first message since the restart needs its conversation, then the conversation's
    // tombstones: parked, nothing sent yet.
    let outs = w.msg(&a, &b, &ab, "new-1");
    assert!(
        acks(&outs, &a).is_empty(),
        "acked before its read: {outs:?}"
    );
    assert_eq!(w.reads_waiting(), 1);
    assert_eq!(w.relay.stats().frames_parked, parked + 1);
    let ReadOp::Get { table, key } = &w.reads.as_ref().unwrap()[0].0.op else {
        panic!("not the conversation's read");
    };
    assert_eq!((*table, key.as_str()), (Table::Conversations, ab.as_str()));
    w.complete_read(0);
    let outs = w.drain();
    assert!(acks(&outs, &a).is_empty(), "acked before its read");
    assert_eq!(w.reads_waiting(), 1);
    assert_eq!(w.relay.stats().frames_parked, parked + 2);
    let ReadOp::ScanPrefix { table, prefix, max } = &w.reads.as_ref().unwrap()[0].0.op else {
        panic!("not a tombstone set read");
    };
    assert_eq!(*table, Table::Tombstones);
    assert!(
        *prefix == format!("{ab}/") && max.is_some(),
        "{prefix} {max:?}"
    );
    // Its next frame queues behind it.
    let outs = w.msg(&a, &b, &ab, "new-2");
    assert!(acks(&outs, &a).is_empty());
    assert_eq!(w.relay.prefetch().parked_frames, 2);

    // Meanwhile `c` is served at once: acked, delivered, no read asked.
    let outs = w.msg(&c, &d, &cd, "bystander");
    assert_eq!(acks(&outs, &c), vec![("bystander".to_owned(), 2)]);
    assert!(
        frames(&outs, d.conn.unwrap())
            .iter()
            .any(|f| matches!(f, ServerFrame::Msg(m) if m.id.as_str() == "bystander"))
    );
    assert_eq!(w.reads_waiting(), 1);

    // The read comes back (and those it leads to: the recipient's queue):
    // both of `a`'s messages run, in order, after the three before.
    let outs = w.finish_reads();
    assert_eq!(
        acks(&outs, &a),
        vec![("new-1".to_owned(), 4), ("new-2".to_owned(), 5)]
    );
    let p = w.relay.prefetch();
    assert_eq!(
        (p.parked_frames, p.reads_pending, p.rows_held_bytes),
        (0, 0, 0)
    );
    // A resend of an id from before the restart gets its first seq (the set was read).
    let outs = w.msg(&a, &b, &ab, "old-1");
    assert_eq!(acks(&outs, &a), vec![("old-1".to_owned(), 2)]);
}

#[test]
fn a_set_too_large_to_hold_is_never_read_whole() {
    // Sets of more than 9 tombstones are not held (an eighth of 8,000 bytes); `a` has 12.
    let config = Config {
        tombstone_cache_bytes: 8_000,
        tombstone_set_by_row_min_bytes: 0,
        ..fast_config()
    };
    let (mut w, [a, b, ..], ab, _) = restarted(config, 12);
    w.msg(&a, &b, &ab, "old-11");
    // The conversation first.
    let reads = w.reads.as_ref().unwrap();
    assert!(
        matches!(
            &reads[0].0.op,
            ReadOp::Get {
                table: Table::Conversations,
                ..
            }
        ),
        "{:?}",
        reads[0].0.op
    );
    w.complete_read(0);
    w.drain();
    // Then the bounded read: one row more than a held set may have, not all twelve.
    let reads = w.reads.as_ref().unwrap();
    assert!(
        matches!(&reads[0].0.op, ReadOp::ScanPrefix { max: Some(10), .. }),
        "{:?}",
        reads[0].0.op
    );
    w.complete_read(0);
    w.drain();
    // It came back full: the conversation is read by row, this id first (its rows: one,
    // or two in a store rekeyed from per-author keys).
    let reads = w.reads.as_ref().unwrap();
    assert_eq!(reads.len(), 1);
    let ReadOp::ScanPrefix { table, prefix, max } = &reads[0].0.op else {
        panic!("not a read of the id: {:?}", reads[0].0.op);
    };
    assert_eq!(
        (*table, prefix.as_str(), *max),
        (Table::Tombstones, &*format!("{ab}/old-11/"), Some(2))
    );
    let outs = w.finish_reads();
    assert_eq!(acks(&outs, &a), vec![("old-11".to_owned(), 12)]);
}

#[test]
fn a_failed_read_refuses_the_frame_and_nothing_else() {
    let (mut w, [a, b, ..], ab, _) = restarted(fast_config(), 1);
    let rows_before = w.rows(Table::Messages).len();
    w.msg(&a, &b, &ab, "new-1");
    w.mem.fail_reads(1);
    w.complete_read(0);
    let outs = w.drain();
    let refusals: Vec<_> = frames(&outs, a.conn.unwrap())
        .into_iter()
        .filter_map(|f| match f {
            ServerFrame::Error(e) => Some((e.error, e.id)),
            _ => None,
        })
        .collect();
    assert_eq!(
        refusals,
        vec![(ErrorCode::STORAGE_UNAVAILABLE, Some("new-1".to_owned()))]
    );
    assert!(acks(&outs, &a).is_empty());
    assert_eq!(w.rows(Table::Messages).len(), rows_before);
    // Sent again, it is read again and accepted.
    w.msg(&a, &b, &ab, "new-1");
    let outs = w.finish_reads();
    assert_eq!(acks(&outs, &a), vec![("new-1".to_owned(), 2)]);
}

#[test]
fn frames_sent_before_a_close_still_run() {
    let (mut w, [a, b, ..], ab, _) = restarted(fast_config(), 2);
    // `b` synced after the restart and was sent both messages; it acknowledges them, then
    // its socket closes before the receipt's read (the conversation's marks) came back.
    let queued_for_b = |w: &World| {
        (w.rows(Table::Messages).iter())
            .filter(|(k, _)| k.starts_with(&b.uuid))
            .count()
    };
    assert_eq!(queued_for_b(&w), 2, "both messages queued for b");
    w.send(
        b.conn.unwrap(),
        serde_json::json!({"type":"delivered","conv_id":ab,"seq":2,"to":a.alias}),
    );
    assert_eq!(w.reads_waiting(), 1, "the receipt waits for a read");
    w.relay.handle_disconnect(w.now, b.conn.unwrap());
    assert!(
        w.relay.is_connected(b.conn.unwrap()),
        "dropped once its frames ran"
    );
    w.finish_reads();
    assert!(!w.relay.is_connected(b.conn.unwrap()));
    assert_eq!(queued_for_b(&w), 0, "the receipt counted");
}

/// A relay restarted reading ahead, with `a` and `b` registered before it (cold: nothing of
/// them in memory) and `c` connected after it (warm).
fn cold_and_warm() -> (World, User, User, User) {
    let mut w = World::new();
    let (a, b, mut c) = (w.user("a"), w.user("b"), w.user("c"));
    let store = w.mem.clone();
    w.restart(Box::new(store));
    w.read_ahead(false);
    w.connect(&mut c);
    w.finish_reads();
    (w, a, b, c)
}

fn get(path: &str, token: &str) -> HttpRequest {
    HttpRequest::new(Method::Get, path).bearer(token)
}

/// The response to request `id` among `outs`.
fn answer(outs: &[Output], id: u64) -> Option<HttpResponse> {
    outs.iter().find_map(|o| match o {
        Output::Http { id: i, response } if *i == RequestId(id) => Some(response.clone()),
        _ => None,
    })
}

#[test]
fn a_cold_users_request_waits_for_its_account_while_a_warm_one_is_answered() {
    let (mut w, a, _, c) = cold_and_warm();
    let parked = w.relay.stats().requests_parked;
    let now = w.now;
    assert_eq!(
        w.relay
            .handle_request(now, RequestId(1), get(paths::FRIENDS, &a.token)),
        None,
        "answered before its account was read"
    );
    w.drain();
    let ReadOp::Get { table, key } = &w.reads.as_ref().unwrap()[0].0.op else {
        panic!("not a keyed read");
    };
    assert_eq!((*table, key.as_str()), (Table::Accounts, a.uuid.as_str()));
    assert_eq!(w.relay.prefetch().parked_requests, 1);
    assert_eq!(w.relay.stats().requests_parked, parked + 1);

    // Meanwhile the warm user's request (its account is in memory) is answered at once.
    let ticket = HttpRequest::new(Method::Post, paths::WS_TICKET)
        .json(&serde_json::json!({}))
        .bearer(&c.token);
    let warm = w.relay.handle_request(now, RequestId(2), ticket);
    assert_eq!(warm.map(|r| r.status), Some(200));

    // Its reads come back (the account, then its contacts): answered by an output.
    let outs = w.finish_reads();
    let resp = answer(&outs, 1).expect("the parked request's answer");
    assert_eq!(resp.status, 200, "{:?}", resp.body_json());
    let p = w.relay.prefetch();
    assert_eq!(
        (p.parked_requests, p.reads_pending, p.rows_held_bytes),
        (0, 0, 0)
    );
}

/// Friends `a` and `b`, cold (registered before a restart), in a world reading ahead whose
/// relay grants each account 3 requests a minute.
fn three_requests_a_minute() -> (World, User) {
    let config = Config {
        account_requests: relay_core::limits::Budget {
            burst: 3,
            per_window: 3,
            window_ms: 60_000,
        },
        ..fast_config()
    };
    let mut w = World::with_config(config);
    let (a, b) = (w.user("a"), w.user("b"));
    w.befriend(&a, &b);
    let store = w.mem.clone();
    w.restart(Box::new(store));
    w.read_ahead(false);
    (w, a)
}

#[test]
fn a_request_that_waited_is_charged_to_its_budget_once() {
    // A budget of 3 lookups: a request parked on reads and run again three times still
    // costs one, so three requests of a cold user all pass and the fourth is refused.
    let (mut w, a) = three_requests_a_minute();
    let statuses: Vec<u16> = (0..4)
        .map(|_| w.get(paths::FRIENDS, Some(&a.token)).status)
        .collect();
    assert_eq!(statuses, vec![200, 200, 200, 429]);
    assert!(w.requests_parked >= 1, "no request waited");
}

/// A request charged to its budget and then refused because too much already waits for reads
/// (503) gets its token back: the refusal is the relay's, not the client's spending.
#[test]
fn a_request_refused_for_the_waiting_bound_gives_its_budget_back() {
    let (mut w, mut a) = three_requests_a_minute();
    // `a` warm, its contacts cold: the request is charged, then needs a read to go on. (The
    // connection's ticket spends one of the three tokens.)
    w.connect(&mut a);
    w.finish_reads();
    let too_big = get(paths::FRIENDS, &a.token).body(vec![
        b' ';
        relay_core::prefetch::MAX_PARKED_REQUEST_BYTES
            + 1
    ]);
    let refused = w.relay.handle_request(w.now, RequestId(7), too_big);
    assert_eq!(refused.map(|r| r.status), Some(503));
    w.drain();
    let statuses: Vec<u16> = (0..3)
        .map(|_| w.get(paths::FRIENDS, Some(&a.token)).status)
        .collect();
    assert_eq!(
        statuses,
        vec![200, 200, 429],
        "the refused request kept its token"
    );
}

#[test]
fn a_cold_upgrade_waits_and_is_answered_by_an_output() {
    let (mut w, a, _, _) = cold_and_warm();
    let conn = ConnId(900);
    let ws = WsConnect {
        query: format!("user_uuid={}&token={}", a.uuid, a.token),
        protocol: None,
    };
    let now = w.now;
    assert!(w.relay.handle_connect_ahead(now, conn, ws).is_none());
    assert!(!w.relay.is_connected(conn));
    let outs = w.finish_reads();
    let accepted = outs.iter().find_map(|o| match o {
        Output::Connect { conn: c, result } if *c == conn => Some(result.clone()),
        _ => None,
    });
    assert_eq!(
        accepted.expect("answered").map(|a| a.user.to_string()),
        Ok(a.uuid)
    );
    assert!(w.relay.is_connected(conn));
    assert_eq!(w.relay.prefetch().parked_conns, 0);
}

#[test]
fn a_registration_that_waited_keeps_the_ids_it_checked_and_spends_its_proof_once() {
    let (mut w, ..) = cold_and_warm();
    let (sk, x) = w.fresh_keys();
    let before = w.requests_parked;
    let nonce = w.solve_pow("10.9.9.9");
    let resp = w.http(register_request(&sk, x, "late", &nonce, "10.9.9.9"));
    assert_eq!(resp.status, 201, "{:?}", resp.body_json());
    assert!(w.requests_parked > before, "the registration never waited");
    // The account stored is the one answered (the id its reads checked).
    let uuid = resp.body_json()["uuid"].as_str().unwrap().to_owned();
    assert!(w.rows(Table::Accounts).iter().any(|(k, _)| *k == uuid));
    // Its proof of work was used once: the same nonce for other keys is refused.
    let (sk2, x2) = w.fresh_keys();
    let resp = w.http(register_request(&sk2, x2, "again", &nonce, "10.9.9.9"));
    assert_eq!(resp.status, 400, "{:?}", resp.body_json());
}

#[test]
fn a_failed_read_answers_the_waiting_request_with_503_and_nothing_else() {
    let (mut w, a, _, _) = cold_and_warm();
    let now = w.now;
    assert!(
        w.relay
            .handle_request(now, RequestId(7), get(paths::FRIENDS, &a.token))
            .is_none()
    );
    w.drain();
    w.mem.fail_reads(1);
    w.complete_read(0);
    let outs = w.drain();
    let resp = answer(&outs, 7).expect("answered");
    assert_eq!(resp.status, 503);
    assert_eq!(resp.error_code().as_deref(), Some("STORAGE_UNAVAILABLE"));
    // Asked again, it is read again and answered.
    assert_eq!(w.get(paths::FRIENDS, Some(&a.token)).status, 200);
}

#[test]
fn a_failed_commit_refuses_the_requests_that_wait_for_reads() {
    let (mut w, a, _, _) = cold_and_warm();
    let now = w.now;
    assert!(
        w.relay
            .handle_request(now, RequestId(3), get(paths::FRIENDS, &a.token))
            .is_none()
    );
    // A registration (read on this task) writes, and its commit fails: the relay stops.
    let (sk, x) = w.fresh_keys();
    let nonce = w.solve_pow("10.1.1.1");
    w.mem.fail_commits(1);
    let register = register_request(&sk, x, "n", &nonce, "10.1.1.1");
    assert_eq!(w.relay.handle_http(now, &register).status, 503);
    assert!(w.relay.is_failed());
    // The request that waited for a read is answered with the same refusal.
    let outs = w.drain();
    let resp = answer(&outs, 3).expect("the waiting request answered");
    assert_eq!(resp.status, 503);
    assert_eq!(resp.error_code().as_deref(), Some("STORAGE_UNAVAILABLE"));
    assert_eq!(w.relay.prefetch().parked_requests, 0);
}

/// A relay reading ahead whose store holds `a`'s `sent` messages to `b` (never online), and
/// `c`, `d` connected, synced and warm; the relay restarted, so `b`'s queue is only in the
/// store. Messages live `ttl_ms`; nobody idles out before a day.
fn queued_then_restarted(sent: usize, ttl_ms: u64) -> (World, [User; 4], String, String) {
    let config = Config {
        offline_ttl_ms: ttl_ms,
        idle_timeout_ms: 24 * 3_600_000,
        ..fast_config()
    };
    restarted_with(config, sent, false)
}

/// The messages stored in `u`'s queues.
fn stored_for(w: &World, u: &User) -> usize {
    w.rows(Table::Messages)
        .iter()
        .filter(|(k, _)| k.starts_with(u.uuid.as_str()))
        .count()
}

#[test]
fn the_expiry_sweep_waits_for_its_reads_while_others_are_served() {
    let (mut w, [_, b, c, d], _, cd) = queued_then_restarted(3, 60_000);
    assert_eq!(stored_for(&w, &b), 3);
    let (inline, parked) = (w.relay.stats().reads_inline, w.relay.stats().sweeps_parked);

    // The TTL passes: the sweep needs the page of due queues, which is not in memory. It
    // waits for it; nothing is read on the relay's task, and no deadline is set meanwhile
    // (the read's return runs it).
    w.advance(61_000);
    assert!(w.relay.prefetch().sweep_waiting);
    assert_eq!(w.reads_waiting(), 1);
    assert!(
        matches!(
            &w.reads.as_ref().unwrap()[0].0.op,
            ReadOp::Expired {
                table: Table::QueueIndex,
                ..
            }
        ),
        "not the due queues' page"
    );
    assert_eq!(w.relay.stats().sweeps_parked, parked + 1);
    assert!(w.relay.poll_timeout().is_none_or(|at| at > w.now));

    // `c` is served at once while the sweep waits.
    let outs = w.msg(&c, &d, &cd, "bystander");
    assert_eq!(acks(&outs, &c).len(), 1);
    assert_eq!(w.reads_waiting(), 1, "the bystander read nothing");

    // The reads come back (the page, `b`'s queue, the next expiry): `a`'s messages are
    // gone, and the relay read nothing on its own task.
    w.finish_reads();
    assert!(!w.relay.prefetch().sweep_waiting);
    assert_eq!(stored_for(&w, &b), 0, "expired messages still stored");
    assert!(w.relay.stats().sweeps_parked >= parked + 3);
    assert_eq!(w.relay.stats().reads_inline, inline);
    let p = w.relay.prefetch();
    assert_eq!((p.reads_pending, p.rows_held_bytes), (0, 0));
}

#[test]
fn a_message_sent_while_the_sweep_waits_for_its_queue_is_kept() {
    let (mut w, [a, b, ..], ab, _) = queued_then_restarted(2, 60_000);
    w.advance(61_000);
    // The page comes back; the sweep waits for `b`'s queue.
    w.complete_read(0);
    w.drain();
    assert!(w.relay.prefetch().sweep_waiting);
    let ReadOp::ScanPrefix { table, prefix, .. } = &w.reads.as_ref().unwrap()[0].0.op else {
        panic!("not a queue read");
    };
    assert_eq!(*table, Table::Messages);
    assert!(prefix.starts_with(b.uuid.as_str()));

    // `a` writes to that queue meanwhile (its frame waits for the same rows first).
    let outs = w.msg(&a, &b, &ab, "fresh");
    let outs = [outs, w.finish_reads()].concat();
    assert_eq!(acks(&outs, &a), vec![("fresh".to_owned(), 3)]);
    assert!(!w.relay.prefetch().sweep_waiting);
    // The two due messages went, the fresh one stays (and expires at its own time).
    assert_eq!(stored_for(&w, &b), 1);
    assert_eq!(w.relay.queued_messages(), 1);
    w.advance(61_000);
    w.finish_reads();
    assert_eq!(stored_for(&w, &b), 0);
}

#[test]
fn a_failed_sweep_read_puts_the_sweep_off_and_answers_nobody() {
    let (mut w, [_, b, ..], _, _) = queued_then_restarted(2, 60_000);
    w.advance(61_000);
    let failures = w.relay.stats().queue_read_failures;
    w.mem.fail_reads(1);
    w.complete_read(0);
    let outs = w.drain();
    assert!(
        outs.is_empty(),
        "a sweep's failed read answered someone: {outs:?}"
    );
    assert_eq!(w.relay.stats().queue_read_failures, failures + 1);
    assert!(!w.relay.prefetch().sweep_waiting);
    assert_eq!(stored_for(&w, &b), 2, "nothing deleted");
    // It is tried again a second later, and then goes through.
    let retry = w.relay.poll_timeout().expect("the sweep's retry");
    assert_eq!(
        retry,
        w.now.plus_ms(relay_core::limits::QUEUE_READ_RETRY_MS)
    );
    w.advance(relay_core::limits::QUEUE_READ_RETRY_MS);
    w.finish_reads();
    assert_eq!(stored_for(&w, &b), 0);
}

#[test]
fn the_tombstone_sweep_reads_its_next_expiry_off_the_task() {
    let (mut w, _, _, _) = queued_then_restarted(2, 60_000);
    let tombstones = w.rows(Table::Tombstones).len();
    assert!(tombstones >= 2);
    let inline = w.relay.stats().reads_inline;
    w.advance(relay_core::limits::TOMBSTONE_TTL_MS + 1);
    assert!(w.relay.prefetch().sweep_waiting);
    assert!(matches!(
        &w.reads.as_ref().unwrap()[0].0.op,
        ReadOp::NextExpiry {
            table: Table::Tombstones,
            ..
        }
    ));
    w.finish_reads();
    assert!(!w.relay.prefetch().sweep_waiting);
    assert_eq!(
        w.rows(Table::Tombstones).len(),
        0,
        "expired tombstones stored"
    );
    assert_eq!(w.relay.stats().reads_inline, inline);
}

#[test]
fn a_sync_while_the_sweep_waits_replays_nothing_past_its_ttl() {
    let (mut w, [_, mut b, ..], _, _) = queued_then_restarted(3, 60_000);
    let conn = w.connect(&mut b);
    w.finish_reads();
    w.advance(61_000);
    assert!(w.relay.prefetch().sweep_waiting);
    // `b` syncs: its contacts and queue are read for the sync (the sweep still waits for its
    // page, the oldest read).
    let mut outs = w.sync(conn);
    assert!(w.reads_waiting() >= 2);
    // The sync's reads come back first: what outlived the TTL is not replayed, and goes.
    while w.reads_waiting() > 1 {
        w.complete_read(1);
        outs.extend(w.drain());
    }
    assert!(
        msgs(&frames(&outs, conn)).is_empty(),
        "replayed past its TTL: {outs:?}"
    );
    assert_eq!(stored_for(&w, &b), 0);
    assert!(w.relay.prefetch().sweep_waiting);
    // The sweep then finds nothing left to take.
    w.finish_reads();
    assert!(!w.relay.prefetch().sweep_waiting);
    assert_eq!(w.relay.queued_messages(), 0);
}

#[test]
fn the_sweep_reads_a_pages_cold_queues_together() {
    let config = Config {
        offline_ttl_ms: 60_000,
        idle_timeout_ms: 24 * 3_600_000,
        ..fast_config()
    };
    let mut w = World::with_config(config);
    let mut a = w.user("a");
    let bs: Vec<User> = (0..4).map(|i| w.user(&format!("b{i}"))).collect();
    let convs: Vec<String> = bs.iter().map(|b| w.befriend(&a, b)).collect();
    w.connect(&mut a);
    for (b, conv) in bs.iter().zip(&convs) {
        for i in 0..2 {
            let outs = w.msg(&a, b, conv, &format!("{}-{i}", b.alias));
            assert_eq!(acks(&outs, &a).len(), 1);
        }
    }
    let store = w.mem.clone();
    w.restart(Box::new(store));
    w.read_ahead(false);
    w.advance(61_000);
    w.complete_read(0);
    w.drain();
    // The page named four cold queues: one read asks for all of them.
    assert_eq!(w.reads_waiting(), 1);
    let ReadOp::ScanPrefixes { table, prefixes } = &w.reads.as_ref().unwrap()[0].0.op else {
        panic!("not one read of the page's queues");
    };
    assert_eq!((*table, prefixes.len()), (Table::Messages, 4));
    // It comes back: every queue loses its messages; then the next expiry is read.
    w.complete_read(0);
    w.drain();
    assert!(matches!(
        &w.reads.as_ref().unwrap()[0].0.op,
        ReadOp::NextExpiry {
            table: Table::QueueIndex,
            ..
        }
    ));
    w.finish_reads();
    assert!(!w.relay.prefetch().sweep_waiting);
    assert_eq!(w.rows(Table::Messages).len(), 0);
    assert_eq!(w.relay.queued_messages(), 0);
    let p = w.relay.prefetch();
    assert_eq!((p.reads_pending, p.rows_held_bytes), (0, 0));
}

/// A `sync` refused for a bound of prefetch closes its connection, as a sync whose reads
/// failed does: a client left connected without its replay would get nothing queued until it
/// reconnects (the reference clients do not send a `sync` again on an error). The bound here
/// is the frames one connection may have waiting; a hub's queue written so often that its
/// reads go stale past `MAX_READ_ROUNDS` is refused the same way. Reconnected, it syncs.
#[test]
fn a_sync_refused_while_frames_wait_closes_its_connection() {
    use relay_core::CloseReason;
    use relay_core::prefetch::MAX_PARKED_FRAMES_PER_CONN;

    let config = fast_config();
    let burst = config.frame_burst_per_conn as usize;
    let (mut w, [_, mut b, ..], _, _) = restarted_with(config, 2, false);
    let conn = w.connect(&mut b);
    w.finish_reads();
    w.sync(conn);
    assert!(w.reads_waiting() > 0, "the sync waits for b's reads");
    for _ in 0..burst + MAX_PARKED_FRAMES_PER_CONN {
        w.send(conn, serde_json::json!({"type": "ping"}));
    }
    let refused = w.sync(conn);
    let errors: Vec<_> = frames(&refused, conn)
        .into_iter()
        .filter_map(|f| match f {
            ServerFrame::Error(e) => Some((e.error, e.ref_type)),
            _ => None,
        })
        .collect();
    assert_eq!(
        errors,
        vec![(ErrorCode::RATE_LIMITED, Some("sync".to_owned()))],
        "{refused:?}"
    );
    assert!(
        refused.iter().any(|o| matches!(
            o,
            Output::Close { conn: c, reason: CloseReason::StorageUnavailable } if *c == conn
        )),
        "the connection is closed with the refusal: {refused:?}"
    );
    w.finish_reads();
    assert!(!w.relay.is_connected(conn));
    // Reconnected, it syncs: both messages arrive.
    let conn = w.connect(&mut b);
    w.finish_reads();
    w.sync(conn);
    let outs = w.finish_reads();
    assert_eq!(msgs(&frames(&outs, conn)).len(), 2, "{outs:?}");
}
