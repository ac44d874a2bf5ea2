//! The client machine under a virtual clock against scripted relay frames and HTTP answers.
//!
//! One file past 900 lines on purpose: every test drives the same scripted relay through the
//! shared helpers at its top (`register`, `open`, `sync_friends`, `inbound`, `reply`).
#![allow(clippy::needless_pass_by_value)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use client_core::crypto::content::MessageContent;
use client_core::crypto::{SessionKey, encrypt_payload, session_key};
use client_core::keys::{X25519Path, derive_identity};
use client_core::machine::{
    AuthFailure, Client, ClientConfig, ConnCommand, Event, HttpRequest, InboxLimit, NetworkState,
    OUTBOX_RETRY_MAX_MS, WsAuth, outbox_retry_delay_ms,
};
use client_core::store::{ClientStore, MemoryStore, MessageStatus};
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use serde_json::{Value, json};
use wire::frames::ClientFrame;

const ALICE: &str =
    "abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon about";
const BOB: &str = "legal winner thank year wave sausage worth useful legal winner thank yellow";
const ALICE_UUID: &str = "11111111-1111-4111-8111-111111111111";
const CONV: &str = "c-test-conv-id";

type C = Client<MemoryStore>;

fn client(cfg: ClientConfig) -> C {
    Client::new(MemoryStore::new(), [42; 32], cfg).unwrap()
}

fn next_http(c: &mut C) -> HttpRequest {
    c.poll_http().expect("an HTTP request")
}

fn reply(c: &mut C, now: u64, req: &HttpRequest, status: u16, body: Value) {
    c.handle_http_response(now, req.id, status, body.to_string().as_bytes())
        .unwrap();
}

fn events(c: &mut C) -> Vec<Event> {
    std::iter::from_fn(|| c.poll_event()).collect()
}

fn frames(c: &mut C) -> Vec<ClientFrame> {
    std::iter::from_fn(|| c.poll_transmit()).collect()
}

/// Registers alice (PoW → register → challenge → verify).
fn register(c: &mut C, now: u64) {
    c.register_account(now, ALICE, "alice").unwrap();
    let r = next_http(c);
    assert_eq!(r.path, "/api/v1/pow/challenge");
    reply(
        c,
        now,
        &r,
        200,
        json!({"challenge_string": "abc", "difficulty": 4, "expires_in": 300}),
    );
    let r = next_http(c);
    assert_eq!(r.path, "/api/v1/register");
    let body = r.body.clone().unwrap();
    assert_eq!(body["pow_nonce"], "93803");
    assert_eq!(body["nickname"], "alice");
    reply(
        c,
        now,
        &r,
        201,
        json!({"uuid": ALICE_UUID, "alias_id": "u10000001"}),
    );
    auth_round(c, now);
}

fn auth_round(c: &mut C, now: u64) {
    let r = next_http(c);
    assert_eq!(r.path, "/api/v1/auth/challenge");
    assert_eq!(r.body.as_ref().unwrap()["user_uuid"], ALICE_UUID);
    reply(
        c,
        now,
        &r,
        200,
        json!({"challenge": "ch-1", "expires_at": "2026-01-01T00:00:00Z"}),
    );
    let r = next_http(c);
    assert_eq!(r.path, "/api/v1/auth/verify");
    let id = derive_identity(ALICE, X25519Path::Spec).unwrap();
    assert_eq!(
        r.body.as_ref().unwrap()["signature"],
        id.sign_challenge("ch-1")
    );
    reply(
        c,
        now,
        &r,
        200,
        json!({"token": "jwt-1", "expires_in": 3600}),
    );
}

/// Connects and opens the socket; returns the frames sent on open.
fn open(c: &mut C, now: u64) -> Vec<ClientFrame> {
    c.connect(now);
    let r = next_http(c);
    assert_eq!(r.path, "/api/v1/ws/ticket");
    assert!(r.bearer);
    reply(c, now, &r, 200, json!({"ticket": "t-1", "expires_in": 30}));
    match c.poll_connection() {
        Some(ConnCommand::Connect { user_uuid, auth }) => {
            assert_eq!(user_uuid, ALICE_UUID);
            assert_eq!(auth, WsAuth::Ticket("t-1".into()));
        }
        other => panic!("{other:?}"),
    }
    c.handle_connected(now).unwrap();
    frames(c)
}

fn friend(key_mnemonic: &str, path: X25519Path) -> Value {
    let b = derive_identity(key_mnemonic, path).unwrap();
    json!([{
        "friendship_id": 7, "alias_id": "u10000002", "nickname": "bob", "status": "accepted",
        "direction": "sent", "conversation_id": CONV,
        "x25519_public_key": b.ecdh_public_b64(), "ed25519_public_key": b.signing_public_b64(),
        "created_at": "2026-01-01T00:00:00Z"
    }])
}

fn sync_friends(c: &mut C, now: u64, body: Value) {
    c.sync_contacts(now);
    let r = next_http(c);
    assert_eq!(r.path, "/api/v1/friends");
    reply(c, now, &r, 200, body);
}

/// Bob's key for the conversation, as bob derives it.
fn bob_key(bob_path: X25519Path) -> SessionKey {
    let a = derive_identity(ALICE, X25519Path::Spec).unwrap();
    let b = derive_identity(BOB, bob_path).unwrap();
    session_key(&b.ecdh_key, &a.ecdh_key.public_key(), CONV)
}

fn inbound(id: &str, seq: u64, text: &str, key: &SessionKey) -> String {
    let mut rng = ChaCha20Rng::seed_from_u64(seq);
    let payload = encrypt_payload(key, text.as_bytes(), &mut rng);
    json!({"type":"msg","id":id,"from":"u10000002","conv_id":CONV,"seq":seq,"at":1000 + seq,"crypto_v":1,"payload":payload}).to_string()
}

fn ready(now: u64) -> C {
    ready_with(ClientConfig::default(), now)
}

/// A client with `cfg`, registered, Bob's friendship synced and the socket open.
fn ready_with(cfg: ClientConfig, now: u64) -> C {
    let mut c = client(cfg);
    register(&mut c, now);
    sync_friends(&mut c, now, friend(BOB, X25519Path::Spec));
    let opened = open(&mut c, now);
    assert!(matches!(opened[0], ClientFrame::Sync(_)));
    events(&mut c);
    c
}

#[test]
fn registration_stores_identity_after_verify() {
    let mut c = client(ClientConfig::default());
    register(&mut c, 0);
    let ev = events(&mut c);
    assert!(ev.contains(&Event::Authenticated {
        alias_id: "u10000001".into(),
        nickname: "alice".into(),
        recovered: false
    }));
    let stored = c.store().load_identity().unwrap().unwrap();
    assert_eq!(stored.uuid, ALICE_UUID);
    assert_eq!(c.bearer_token(), Some("jwt-1"));
    assert!(!format!("{stored:?}").contains("abandon"));
    // restore_session re-runs A3/A4 for the stored identity
    assert_eq!(
        c.restore_session(1).unwrap(),
        Some(("u10000001".into(), "alice".into()))
    );
    auth_round(&mut c, 1);
    assert!(matches!(events(&mut c)[..], [Event::Authenticated { .. }]));
}

#[test]
fn conflict_recovery_requires_our_key() {
    // 409 whose account accepts our signature: recovered
    let mut c = client(ClientConfig::default());
    c.register_account(0, ALICE, "alice").unwrap();
    let r = next_http(&mut c);
    reply(&mut c, 0, &r, 500, json!({}));
    let r = next_http(&mut c);
    assert!(r.body.as_ref().unwrap().get("pow_nonce").is_none());
    reply(
        &mut c,
        0,
        &r,
        409,
        json!({"error":"ALREADY_REGISTERED","message":"x","uuid":ALICE_UUID,"alias_id":"u10000001","key":"ed25519"}),
    );
    auth_round(&mut c, 0);
    assert!(events(&mut c).contains(&Event::Authenticated {
        alias_id: "u10000001".into(),
        nickname: "alice".into(),
        recovered: true
    }));

    // 409 naming an account our key cannot authenticate: refused, nothing stored
    let mut c = client(ClientConfig::default());
    c.register_account(0, ALICE, "alice").unwrap();
    let r = next_http(&mut c);
    reply(
        &mut c,
        0,
        &r,
        200,
        json!({"challenge_string": "abc", "difficulty": 4}),
    );
    let r = next_http(&mut c);
    reply(
        &mut c,
        0,
        &r,
        409,
        json!({"uuid":"22222222-2222-4222-8222-222222222222","alias_id":"u9"}),
    );
    let r = next_http(&mut c);
    reply(&mut c, 0, &r, 200, json!({"challenge": "ch"}));
    let r = next_http(&mut c);
    reply(
        &mut c,
        0,
        &r,
        401,
        json!({"error":"UNAUTHORIZED","message":"bad signature"}),
    );
    assert_eq!(
        events(&mut c),
        vec![Event::AuthFailed(AuthFailure::RecoveryRejected)]
    );
    assert!(c.store().load_identity().unwrap().is_none());
    assert!(c.bearer_token().is_none());
}

#[test]
fn ticket_failure_falls_back_to_token() {
    let mut c = client(ClientConfig::default());
    register(&mut c, 0);
    c.connect(0);
    let r = next_http(&mut c);
    reply(&mut c, 0, &r, 404, json!({}));
    assert_eq!(
        c.poll_connection(),
        Some(ConnCommand::Connect {
            user_uuid: ALICE_UUID.into(),
            auth: WsAuth::Token("jwt-1".into())
        })
    );
}

#[test]
fn reconnect_resends_unacked_outbox_with_same_id_exactly_once() {
    let mut c = ready(0);
    let id = c
        .send_message(10, CONV, "u10000002", &MessageContent::Text("hello".into()))
        .unwrap();
    let sent = frames(&mut c);
    let ClientFrame::Msg(m1) = &sent[0] else {
        panic!("{sent:?}")
    };
    assert_eq!(m1.id.as_str(), id);
    // socket drops before the ack
    c.handle_disconnected(20);
    assert_eq!(c.network_state(), NetworkState::Disconnected);
    let at = c.poll_timeout().unwrap();
    assert!((20 + 700..20 + 1000).contains(&at), "{at}");
    c.handle_timeout(at);
    let r = next_http(&mut c);
    reply(&mut c, at, &r, 200, json!({"ticket": "t-2"}));
    assert!(matches!(
        c.poll_connection(),
        Some(ConnCommand::Connect { .. })
    ));
    c.handle_connected(at).unwrap();
    let sent = frames(&mut c);
    assert!(matches!(sent[0], ClientFrame::Sync(_)));
    let ClientFrame::Msg(m2) = &sent[1] else {
        panic!("{sent:?}")
    };
    assert_eq!(m2.id.as_str(), id);
    assert_eq!(sent.len(), 2);
    c.handle_text(at, &json!({"type":"ack","id":id,"seq":1}).to_string())
        .unwrap();
    assert!(c.store().list_outbox().unwrap().is_empty());
    let hist = c.store().get_history(CONV, None, None).unwrap();
    assert_eq!(hist.len(), 1);
    assert_eq!(hist[0].status, MessageStatus::Sent);
    // a later reconnect resends nothing
    c.handle_disconnected(at + 1);
    let t = c.poll_timeout().unwrap();
    c.handle_timeout(t);
    let r = next_http(&mut c);
    reply(&mut c, t, &r, 200, json!({"ticket": "t-3"}));
    c.poll_connection();
    c.handle_connected(t).unwrap();
    assert_eq!(frames(&mut c).len(), 1);
    // a duplicate ack changes nothing
    events(&mut c);
    c.handle_text(t, &json!({"type":"ack","id":id,"seq":1}).to_string())
        .unwrap();
    assert!(
        events(&mut c)
            .iter()
            .all(|e| !matches!(e, Event::StatusChange { .. }))
    );
}

#[test]
fn outbox_fails_after_attempt_limit() {
    let mut c = ready_with(
        ClientConfig {
            outbox_max_attempts: 2,
            ..ClientConfig::default()
        },
        0,
    );
    let id = c
        .send_message(1, CONV, "u10000002", &MessageContent::Text("x".into()))
        .unwrap();
    let mut now = 1;
    for _ in 0..2 {
        c.handle_disconnected(now);
        now = c.poll_timeout().unwrap();
        c.handle_timeout(now);
        let r = next_http(&mut c);
        reply(&mut c, now, &r, 200, json!({"ticket": "t"}));
        c.poll_connection();
        c.handle_connected(now).unwrap();
    }
    assert!(events(&mut c).contains(&Event::StatusChange {
        id,
        status: MessageStatus::Failed
    }));
    assert!(c.store().list_outbox().unwrap().is_empty());
}

/// A refusal with a transient code (a rate limit, a full queue, the store briefly down) keeps
/// the intent and sends it again after a pause that doubles with its attempts; a refusal that
/// says something against the message fails it at once; the attempt limit still holds.
#[test]
fn a_transient_refusal_is_retried_after_a_pause_and_a_final_one_fails() {
    let mut c = ready_with(
        ClientConfig {
            outbox_max_attempts: 3,
            ..ClientConfig::default()
        },
        0,
    );
    let send = |c: &mut C, now: u64| {
        c.send_message(now, CONV, "u10000002", &MessageContent::Text("x".into()))
            .unwrap()
    };
    let refuse = |c: &mut C, now: u64, code: &str, id: &str| {
        c.handle_text(
            now,
            &json!({"type":"error","error":code,"message":"no","ref_type":"msg","id":id})
                .to_string(),
        )
        .unwrap();
    };
    let id = send(&mut c, 1);
    assert_eq!(frames(&mut c).len(), 1);
    events(&mut c);
    refuse(&mut c, 10, "RATE_LIMITED", &id);
    assert_eq!(c.store().list_outbox().unwrap().len(), 1, "kept");
    assert!(events(&mut c).is_empty(), "no status change");
    let due = c.poll_timeout().unwrap();
    assert_eq!(due, 10 + outbox_retry_delay_ms(1));
    c.handle_timeout(due - 1);
    assert!(
        frames(&mut c)
            .iter()
            .all(|f| !matches!(f, ClientFrame::Msg(_)))
    );
    c.handle_timeout(due);
    let again: Vec<ClientFrame> = frames(&mut c)
        .into_iter()
        .filter(|f| matches!(f, ClientFrame::Msg(m) if m.id.as_str() == id))
        .collect();
    assert_eq!(again.len(), 1, "sent again with the same id");
    // The second transient refusal waits twice as long; the third transmission is the last.
    refuse(&mut c, due, "RELAY_QUEUE_FULL", &id);
    let due2 = c.poll_timeout().unwrap();
    assert_eq!(due2 - due, outbox_retry_delay_ms(2));
    assert_eq!(outbox_retry_delay_ms(2), 2 * outbox_retry_delay_ms(1));
    c.handle_timeout(due2);
    assert_eq!(frames(&mut c).len(), 1);
    refuse(&mut c, due2, "STORAGE_UNAVAILABLE", &id);
    c.handle_timeout(c.poll_timeout().unwrap());
    assert!(events(&mut c).contains(&Event::StatusChange {
        id,
        status: MessageStatus::Failed
    }));
    assert!(
        c.store().list_outbox().unwrap().is_empty(),
        "the limit holds"
    );
    // A final refusal fails at once.
    let other = send(&mut c, due2 + 1);
    refuse(&mut c, due2 + 2, "NOT_A_MEMBER", &other);
    assert!(events(&mut c).contains(&Event::StatusChange {
        id: other,
        status: MessageStatus::Failed
    }));
    assert!(c.store().list_outbox().unwrap().is_empty());
    assert_eq!(outbox_retry_delay_ms(40), OUTBOX_RETRY_MAX_MS);
}

#[test]
fn duplicate_delivery_is_stored_and_emitted_once() {
    let mut c = ready(0);
    let k = bob_key(X25519Path::Spec);
    let f = inbound("m-1", 3, "hi alice", &k);
    c.handle_text(5, &f).unwrap();
    c.handle_text(6, &f).unwrap();
    let ev = events(&mut c);
    let msgs: Vec<_> = ev
        .iter()
        .filter(|e| matches!(e, Event::Message(_)))
        .collect();
    assert_eq!(msgs.len(), 1);
    let Event::Message(m) = msgs[0] else {
        unreachable!()
    };
    assert_eq!(m.text, "hi alice");
    assert_eq!(m.seq, Some(3));
    assert_eq!(m.from_alias_id.as_deref(), Some("u10000002"));
    // delivered acknowledged twice (the relay may have missed the first), stored once
    let delivered = frames(&mut c)
        .into_iter()
        .filter(|f| matches!(f, ClientFrame::Delivered(_)))
        .count();
    assert_eq!(delivered, 2);
    assert_eq!(c.store().get_history(CONV, None, None).unwrap().len(), 1);
}

#[test]
fn receipts_before_acks_and_never_downwards() {
    let mut c = ready(0);
    let a = c
        .send_message(1, CONV, "u10000002", &MessageContent::Text("a".into()))
        .unwrap();
    let b = c
        .send_message(2, CONV, "u10000002", &MessageContent::Text("b".into()))
        .unwrap();
    frames(&mut c);
    // delivered up to 1 arrives before any ack: nothing changes
    c.handle_text(
        3,
        r#"{"type":"delivered","conv_id":"c-test-conv-id","seq":1}"#,
    )
    .unwrap();
    let status = |c: &C, id: &str| c.store().get_message(id).unwrap().unwrap().status;
    assert_eq!(status(&c, &a), MessageStatus::Sending);
    // the ack lands: sent, then the remembered receipt applies
    c.handle_text(4, &json!({"type":"ack","id":a,"seq":1}).to_string())
        .unwrap();
    assert_eq!(status(&c, &a), MessageStatus::Delivered);
    c.handle_text(5, &json!({"type":"ack","id":b,"seq":2}).to_string())
        .unwrap();
    assert_eq!(status(&c, &b), MessageStatus::Sent);
    c.handle_text(6, r#"{"type":"read","conv_id":"c-test-conv-id","seq":2}"#)
        .unwrap();
    assert_eq!(status(&c, &a), MessageStatus::Read);
    assert_eq!(status(&c, &b), MessageStatus::Read);
    // a late delivered and a duplicate ack never move a status down
    c.handle_text(
        7,
        r#"{"type":"delivered","conv_id":"c-test-conv-id","seq":2}"#,
    )
    .unwrap();
    c.handle_text(8, &json!({"type":"ack","id":b,"seq":2}).to_string())
        .unwrap();
    assert_eq!(status(&c, &b), MessageStatus::Read);
}

#[test]
fn goaway_stops_reconnection() {
    let mut c = ready(0);
    c.handle_text(
        1,
        r#"{"type":"goaway","payload":{"reason":"new_device_login"}}"#,
    )
    .unwrap();
    let ev = events(&mut c);
    assert!(ev.contains(&Event::Goaway("new_device_login".into())));
    assert!(ev.contains(&Event::NetworkState(NetworkState::Disconnected)));
    assert_eq!(c.poll_connection(), Some(ConnCommand::Close));
    c.handle_disconnected(2);
    assert_eq!(c.poll_timeout(), None);
    c.handle_timeout(100_000);
    assert!(c.poll_http().is_none());
    assert!(c.poll_connection().is_none());
}

#[test]
fn key_change_on_verified_contact_refuses_decryption() {
    let mut c = ready(0);
    c.mark_as_verified(1, CONV).unwrap();
    // the relay now reports a different X25519 key for bob
    sync_friends(&mut c, 2, friend(BOB, X25519Path::WebSdk));
    let ev = events(&mut c);
    assert!(ev.iter().any(|e| matches!(e, Event::SecurityViolation(_))));
    // the verified session is unchanged
    let s = c.store().load_session(CONV).unwrap().unwrap();
    let spec_b = derive_identity(BOB, X25519Path::Spec).unwrap();
    assert_eq!(s.their_ecdh_public_key, spec_b.ecdh_public_b64());
    // a message under the new key: violation, parked, no message, no delivered
    c.handle_text(
        3,
        &inbound("m-9", 4, "trust me", &bob_key(X25519Path::WebSdk)),
    )
    .unwrap();
    let ev = events(&mut c);
    let v = ev
        .iter()
        .find_map(|e| match e {
            Event::SecurityViolation(v) => Some(v.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(v.contact_id, "u10000002");
    assert_eq!(v.detected_at, 3);
    assert!(v.message.is_none());
    assert_ne!(v.previous_fingerprint, v.current_fingerprint);
    assert!(!ev.iter().any(|e| matches!(e, Event::Message(_))));
    assert!(frames(&mut c).is_empty());
    assert_eq!(c.store().list_offline().unwrap().len(), 1);
    // the user resets trust: the new key is adopted and the parked message is delivered
    c.reset_trust_state(4, CONV).unwrap();
    let ev = events(&mut c);
    assert!(
        ev.iter()
            .any(|e| matches!(e, Event::Message(m) if m.text == "trust me"))
    );
    assert!(c.store().list_offline().unwrap().is_empty());
}

#[test]
fn early_message_is_parked_and_retried_after_contacts_sync() {
    let mut c = client(ClientConfig::default());
    register(&mut c, 0);
    open(&mut c, 0);
    events(&mut c);
    c.handle_text(1, &inbound("m-1", 1, "early", &bob_key(X25519Path::Spec)))
        .unwrap();
    assert!(matches!(events(&mut c)[..], [Event::Parked { .. }]));
    assert!(
        frames(&mut c).is_empty(),
        "no delivered for a parked message"
    );
    sync_friends(&mut c, 2, friend(BOB, X25519Path::Spec));
    let ev = events(&mut c);
    assert!(
        ev.iter()
            .any(|e| matches!(e, Event::Message(m) if m.text == "early"))
    );
    assert!(matches!(frames(&mut c)[..], [ClientFrame::Delivered(_)]));
    assert!(c.store().list_offline().unwrap().is_empty());
}

#[test]
fn backoff_is_exponential_capped_and_jittered() {
    let mut c = client(ClientConfig::default());
    register(&mut c, 0);
    c.connect(0);
    let mut now = 0;
    let r = next_http(&mut c);
    reply(&mut c, now, &r, 200, json!({"ticket": "t"}));
    c.poll_connection();
    let mut delays = Vec::new();
    for _ in 0..8 {
        c.handle_disconnected(now); // the attempt failed
        let at = c.poll_timeout().unwrap();
        delays.push(at - now);
        now = at;
        c.handle_timeout(now);
        let r = next_http(&mut c);
        reply(&mut c, now, &r, 200, json!({"ticket": "t"}));
        c.poll_connection();
    }
    for (n, d) in delays.iter().enumerate() {
        let base = (1000u64 << n).min(30_000);
        assert!(
            *d >= base * 7 / 10 && *d < base,
            "attempt {n}: {d} vs {base}"
        );
    }
    // same seed, same delays
    let mut c2 = client(ClientConfig::default());
    register(&mut c2, 0);
    c2.connect(0);
    let r = next_http(&mut c2);
    reply(&mut c2, 0, &r, 200, json!({"ticket": "t"}));
    c2.poll_connection();
    c2.handle_disconnected(0);
    assert_eq!(c2.poll_timeout().unwrap(), delays[0]);
}

#[test]
fn heartbeat_typing_debounce_and_retract() {
    let mut c = ready(0);
    assert_eq!(c.poll_timeout(), Some(25_000));
    c.handle_timeout(25_000);
    assert!(matches!(frames(&mut c)[..], [ClientFrame::Ping(_)]));
    assert_eq!(c.poll_timeout(), Some(50_000));
    c.send_typing(30_000, CONV, "u10000002").unwrap();
    c.send_typing(30_100, CONV, "u10000002").unwrap();
    c.send_typing(30_300, CONV, "u10000002").unwrap();
    let n = frames(&mut c)
        .into_iter()
        .filter(|f| matches!(f, ClientFrame::Typing(_)))
        .count();
    assert_eq!(n, 2);
    // retract: own messages only
    c.handle_text(
        1,
        &inbound("m-peer", 1, "theirs", &bob_key(X25519Path::Spec)),
    )
    .unwrap();
    assert!(c.retract_message(2, "m-peer", "u10000002", CONV).is_err());
    let id = c
        .send_message(3, CONV, "u10000002", &MessageContent::Text("oops".into()))
        .unwrap();
    frames(&mut c);
    c.retract_message(4, &id, "u10000002", CONV).unwrap();
    assert!(matches!(frames(&mut c)[..], [ClientFrame::Retract(_)]));
    let m = c.store().get_message(&id).unwrap().unwrap();
    assert_eq!(m.msg_type.as_deref(), Some("retracted"));
    // an inbound retract from someone else than the author is ignored
    c.handle_text(
        5,
        r#"{"type":"retract","id":"m-peer","from":"u10000003","conv_id":"c-test-conv-id"}"#,
    )
    .unwrap();
    assert_eq!(
        c.store().get_message("m-peer").unwrap().unwrap().text,
        "theirs"
    );
    c.handle_text(
        6,
        r#"{"type":"retract","id":"m-peer","from":"u10000002","conv_id":"c-test-conv-id"}"#,
    )
    .unwrap();
    assert_eq!(
        c.store()
            .get_message("m-peer")
            .unwrap()
            .unwrap()
            .msg_type
            .as_deref(),
        Some("retracted")
    );
}

#[test]
fn receipt_before_ack_survives_restart() {
    let mut c = ready(0);
    let a = c
        .send_message(1, CONV, "u10000002", &MessageContent::Text("a".into()))
        .unwrap();
    frames(&mut c);
    c.handle_text(2, r#"{"type":"read","conv_id":"c-test-conv-id","seq":1}"#)
        .unwrap();
    assert_eq!(
        c.store().get_message(&a).unwrap().unwrap().status,
        MessageStatus::Sending
    );
    // the process restarts between the receipt and the ack
    let store = c.store().clone();
    drop(c);
    let mut c = Client::new(store, [7; 32], ClientConfig::default()).unwrap();
    c.handle_text(3, &json!({"type":"ack","id":a,"seq":1}).to_string())
        .unwrap();
    assert_eq!(
        c.store().get_message(&a).unwrap().unwrap().status,
        MessageStatus::Read
    );
}

fn inbound_in(conv: &str, id: &str, seq: u64, text: &str, key: &SessionKey) -> String {
    let mut rng = ChaCha20Rng::seed_from_u64(seq);
    let payload = encrypt_payload(key, text.as_bytes(), &mut rng);
    json!({"type":"msg","id":id,"from":"u10000002","conv_id":conv,"seq":seq,"at":1000 + seq,"crypto_v":1,"payload":payload}).to_string()
}

#[test]
fn full_offline_inbox_refuses_without_acknowledging() {
    let mut c = client(ClientConfig {
        offline_max_per_conversation: 2,
        offline_max_total: 3,
        ..ClientConfig::default()
    });
    register(&mut c, 0);
    open(&mut c, 0);
    events(&mut c);
    let k = bob_key(X25519Path::Spec);
    for (id, seq) in [("m-1", 1), ("m-2", 2), ("m-3", 3), ("m-4", 4)] {
        c.handle_text(seq, &inbound(id, seq, id, &k)).unwrap();
    }
    // two parked, then one event for the episode; nothing acknowledged
    let ev = events(&mut c);
    assert_eq!(
        ev.iter()
            .filter(|e| matches!(e, Event::Parked { .. }))
            .count(),
        2
    );
    assert_eq!(
        ev.iter()
            .filter(|e| matches!(e, Event::OfflineInboxFull { .. }))
            .collect::<Vec<_>>(),
        [&Event::OfflineInboxFull {
            conversation_id: CONV.into(),
            limit: InboxLimit::PerConversation
        }]
    );
    assert!(
        frames(&mut c).is_empty(),
        "no delivered: the relay keeps them"
    );
    assert_eq!(c.store().count_offline(Some(CONV)).unwrap(), 2);
    // a re-delivered parked message is replaced, not refused
    c.handle_text(5, &inbound("m-2", 2, "m-2", &k)).unwrap();
    assert!(matches!(events(&mut c)[..], [Event::Parked { .. }]));
    // the total bound, reached through another conversation
    c.handle_text(6, &inbound_in("c-other", "o-1", 1, "o", &k))
        .unwrap();
    c.handle_text(7, &inbound_in("c-other", "o-2", 2, "o", &k))
        .unwrap();
    let ev = events(&mut c);
    assert!(matches!(ev[0], Event::Parked { .. }));
    assert_eq!(
        ev[1],
        Event::OfflineInboxFull {
            conversation_id: "c-other".into(),
            limit: InboxLimit::Total
        }
    );
    // the session appears: the parked ones are delivered, then `sync` asks for the rest
    sync_friends(&mut c, 8, friend(BOB, X25519Path::Spec));
    let f = frames(&mut c);
    assert_eq!(
        f.iter()
            .filter(|f| matches!(f, ClientFrame::Delivered(_)))
            .count(),
        2
    );
    assert!(matches!(f.last(), Some(ClientFrame::Sync(_))));
    // the relay redelivers what it kept
    c.handle_text(9, &inbound("m-3", 3, "m-3", &k)).unwrap();
    assert!(
        events(&mut c)
            .iter()
            .any(|e| matches!(e, Event::Message(m) if m.id == "m-3"))
    );
}

#[test]
fn read_and_retract_queue_durably_while_offline() {
    use client_core::store::PendingActionKind;
    let mut c = ready(0);
    let id = c
        .send_message(1, CONV, "u10000002", &MessageContent::Text("oops".into()))
        .unwrap();
    frames(&mut c);
    c.handle_disconnected(10);
    c.mark_as_read(11, CONV, 3, "u10000002").unwrap();
    c.retract_message(12, &id, "u10000002", CONV).unwrap();
    c.mark_as_read(13, CONV, 5, "u10000002").unwrap();
    c.mark_as_read(14, CONV, 4, "u10000002").unwrap(); // lower: nothing
    assert!(frames(&mut c).is_empty());
    let queued: Vec<_> = c
        .store()
        .list_pending_actions()
        .unwrap()
        .into_iter()
        .map(|a| a.kind)
        .collect();
    assert_eq!(
        queued,
        [
            PendingActionKind::Retract {
                message_id: id.clone()
            },
            PendingActionKind::Read { seq: 5 }
        ]
    );
    // restart, then the next open: sync, the unacked message, then the queue in order
    let store = c.store().clone();
    drop(c);
    let mut c = Client::new(store, [9; 32], ClientConfig::default()).unwrap();
    c.restore_session(20).unwrap();
    auth_round(&mut c, 20);
    let f = open(&mut c, 20);
    assert_eq!(f.len(), 4, "{f:?}");
    assert!(matches!(f[0], ClientFrame::Sync(_)));
    assert!(matches!(&f[1], ClientFrame::Msg(m) if m.id.as_str() == id));
    assert!(matches!(&f[2], ClientFrame::Retract(r) if r.id.as_str() == id));
    assert!(matches!(&f[3], ClientFrame::Read(r) if r.seq.get() == 5));
    assert!(c.store().list_pending_actions().unwrap().is_empty());
    // online: sent at once, a repeat of a lower or equal seq is not
    c.mark_as_read(21, CONV, 5, "u10000002").unwrap();
    assert!(frames(&mut c).is_empty());
    c.mark_as_read(22, CONV, 6, "u10000002").unwrap();
    assert!(matches!(frames(&mut c)[..], [ClientFrame::Read(_)]));
}

#[test]
fn mark_as_read_marks_inbound_messages_locally() {
    let mut c = ready(0);
    let k = bob_key(X25519Path::Spec);
    for seq in 1..=3 {
        c.handle_text(seq, &inbound(&format!("m-{seq}"), seq, "hi", &k))
            .unwrap();
    }
    let own = c
        .send_message(4, CONV, "u10000002", &MessageContent::Text("mine".into()))
        .unwrap();
    events(&mut c);
    assert_eq!(c.unread_count(CONV).unwrap(), 3);
    c.mark_as_read(5, CONV, 2, "u10000002").unwrap();
    let status = |c: &C, id: &str| c.store().get_message(id).unwrap().unwrap().status;
    assert_eq!(status(&c, "m-1"), MessageStatus::Read);
    assert_eq!(status(&c, "m-2"), MessageStatus::Read);
    assert_eq!(status(&c, "m-3"), MessageStatus::Delivered);
    assert_eq!(
        status(&c, &own),
        MessageStatus::Sending,
        "own messages untouched"
    );
    assert_eq!(c.unread_count(CONV).unwrap(), 1);
    assert!(
        events(&mut c)
            .iter()
            .all(|e| !matches!(e, Event::StatusChange { .. }))
    );
    // offline too, and never downwards
    c.handle_disconnected(6);
    c.mark_as_read(7, CONV, 3, "u10000002").unwrap();
    c.mark_as_read(8, CONV, 1, "u10000002").unwrap();
    assert_eq!(c.unread_count(CONV).unwrap(), 0);
    assert_eq!(status(&c, "m-1"), MessageStatus::Read);
}

/// Drops the open socket and fires the reconnect timer; returns the time and the ticket request.
fn drop_and_retry(c: &mut C, now: u64) -> (u64, HttpRequest) {
    c.handle_disconnected(now);
    let at = c.poll_timeout().unwrap();
    c.handle_timeout(at);
    let r = next_http(c);
    assert_eq!(r.path, "/api/v1/ws/ticket");
    (at, r)
}

fn assert_stopped(c: &mut C, now: u64) {
    assert_eq!(c.network_state(), NetworkState::Disconnected);
    assert_eq!(c.poll_timeout(), None);
    c.handle_timeout(now + 10 * 60_000);
    assert!(c.poll_http().is_none());
    assert!(c.poll_connection().is_none());
}

#[test]
fn revoked_token_reauthenticates_once_then_reconnects() {
    let mut c = ready(0);
    let mut now = 1;
    for round in 0..2 {
        // the socket died before any GOAWAY; the relay now refuses the JWT
        let (at, r) = drop_and_retry(&mut c, now);
        now = at;
        reply(
            &mut c,
            now,
            &r,
            401,
            json!({"error": "TOKEN_REVOKED", "message": "revoked"}),
        );
        assert!(
            c.poll_connection().is_none(),
            "no upgrade with the revoked JWT"
        );
        assert_eq!(c.bearer_token(), None);
        auth_round(&mut c, now); // challenge + verify with the stored identity
        let r = next_http(&mut c);
        assert_eq!(r.path, "/api/v1/ws/ticket");
        reply(&mut c, now, &r, 200, json!({"ticket": "t-fresh"}));
        assert_eq!(
            c.poll_connection(),
            Some(ConnCommand::Connect {
                user_uuid: ALICE_UUID.into(),
                auth: WsAuth::Ticket("t-fresh".into())
            })
        );
        c.handle_connected(now).unwrap();
        let ev = events(&mut c);
        assert!(
            ev.iter().any(|e| matches!(e, Event::Authenticated { .. })),
            "round {round}: {ev:?}"
        );
        assert!(!ev.iter().any(|e| matches!(e, Event::AuthFailed(_))));
        assert!(c.is_connected());
        frames(&mut c);
        now += 1; // the open socket restored the budget: the next revocation re-auths again
    }
}

#[test]
fn refused_upgrade_reauthenticates_and_a_second_refusal_is_terminal() {
    let mut c = ready(0);
    // the ticket request failed in transport: JWT fallback, whose upgrade gets 401
    let (now, r) = drop_and_retry(&mut c, 1);
    reply(&mut c, now, &r, 502, json!({}));
    assert!(matches!(
        c.poll_connection(),
        Some(ConnCommand::Connect {
            auth: WsAuth::Token(_),
            ..
        })
    ));
    c.handle_connect_refused(now, 401);
    auth_round(&mut c, now);
    // the fresh token is refused as well: terminal, no loop
    let r = next_http(&mut c);
    assert_eq!(r.path, "/api/v1/ws/ticket");
    reply(&mut c, now, &r, 200, json!({"ticket": "t-2"}));
    assert!(c.poll_connection().is_some());
    c.handle_connect_refused(now, 401);
    let ev = events(&mut c);
    assert!(ev.contains(&Event::AuthFailed(AuthFailure::TokenRefused(401))));
    assert_stopped(&mut c, now);
    // the app may authenticate and connect again
    c.restore_session(now).unwrap();
    auth_round(&mut c, now);
    c.connect(now);
    assert_eq!(next_http(&mut c).path, "/api/v1/ws/ticket");
}

#[test]
fn failed_reauthentication_is_terminal() {
    let mut c = ready(0);
    let (now, r) = drop_and_retry(&mut c, 1);
    reply(&mut c, now, &r, 401, json!({"error": "TOKEN_EXPIRED"}));
    let r = next_http(&mut c);
    assert_eq!(r.path, "/api/v1/auth/challenge");
    reply(&mut c, now, &r, 401, json!({"error": "UNAUTHORIZED"}));
    let ev = events(&mut c);
    assert!(
        ev.contains(&Event::AuthFailed(AuthFailure::Auth(401))),
        "{ev:?}"
    );
    assert_stopped(&mut c, now);
}

#[test]
fn unanswered_reauthentication_is_retried_on_the_backoff() {
    let mut c = ready(0);
    let (now, r) = drop_and_retry(&mut c, 1);
    reply(&mut c, now, &r, 401, json!({"error": "TOKEN_REVOKED"}));
    let r = next_http(&mut c);
    assert_eq!(r.path, "/api/v1/auth/challenge");
    reply(&mut c, now, &r, 503, json!({}));
    assert!(
        events(&mut c)
            .iter()
            .all(|e| !matches!(e, Event::AuthFailed(_)))
    );
    let at = c.poll_timeout().expect("a retry is scheduled");
    assert!(at > now);
    c.handle_timeout(at);
    auth_round(&mut c, at);
    let r = next_http(&mut c);
    assert_eq!(r.path, "/api/v1/ws/ticket");
    reply(&mut c, at, &r, 200, json!({"ticket": "t-3"}));
    assert!(c.poll_connection().is_some());
    c.handle_connected(at).unwrap();
    assert!(c.is_connected());
}

/// A re-authentication the relay could not answer (503 while it rebuilds) is pending on the
/// backoff when the app goes offline; the app's next `connect` must re-authenticate and
/// reconnect, not wait for a token it no longer has (simulator seed 43 found a client that
/// never came back).
#[test]
fn connect_after_an_unanswered_reauthentication_reauthenticates() {
    let mut c = ready(0);
    let (now, r) = drop_and_retry(&mut c, 1);
    reply(&mut c, now, &r, 401, json!({"error": "TOKEN_EXPIRED"}));
    let r = next_http(&mut c);
    assert_eq!(r.path, "/api/v1/auth/challenge");
    reply(&mut c, now, &r, 503, json!({}));
    assert!(c.bearer_token().is_none());
    c.disconnect(now + 1);
    assert!(c.poll_http().is_none());
    c.connect(now + 2);
    auth_round(&mut c, now + 2);
    let r = next_http(&mut c);
    assert_eq!(r.path, "/api/v1/ws/ticket");
    reply(&mut c, now + 2, &r, 200, json!({"ticket": "t-9"}));
    assert!(c.poll_connection().is_some());
    c.handle_connected(now + 3).unwrap();
    assert!(c.is_connected());
}

#[test]
fn goaway_never_reauthenticates_on_its_own() {
    let mut c = ready(0);
    c.handle_text(
        1,
        r#"{"type":"goaway","payload":{"reason":"new_device_login"}}"#,
    )
    .unwrap();
    assert_eq!(c.poll_connection(), Some(ConnCommand::Close));
    c.handle_disconnected(2);
    c.handle_connect_refused(3, 401); // a late refusal changes nothing
    assert_stopped(&mut c, 3);
    assert!(c.bearer_token().is_some());
    // the app taking the session back: its connect may re-authenticate once
    c.connect(10);
    let r = next_http(&mut c);
    reply(&mut c, 10, &r, 401, json!({"error": "TOKEN_REVOKED"}));
    assert_eq!(next_http(&mut c).path, "/api/v1/auth/challenge");
}

fn inbound_at(id: &str, seq: u64, at: u64, text: &str, key: &SessionKey) -> String {
    let mut rng = ChaCha20Rng::seed_from_u64(seq);
    let payload = encrypt_payload(key, text.as_bytes(), &mut rng);
    json!({"type":"msg","id":id,"from":"u10000002","conv_id":CONV,"seq":seq,"at":at,"crypto_v":1,"payload":payload}).to_string()
}

#[test]
fn parked_messages_are_released_in_seq_order() {
    let mut c = client(ClientConfig::default());
    register(&mut c, 0);
    open(&mut c, 0);
    events(&mut c);
    let k = bob_key(X25519Path::Spec);
    // arrival, id and relay-time orders all disagree with the seq order
    c.handle_text(1, &inbound_at("m-a", 4, 1000, "four", &k))
        .unwrap();
    c.handle_text(2, &inbound_at("m-b", 3, 1000, "three", &k))
        .unwrap();
    c.handle_text(3, &inbound_at("m-0", 5, 900, "five", &k))
        .unwrap();
    assert_eq!(c.store().count_offline(Some(CONV)).unwrap(), 3);
    events(&mut c);
    sync_friends(&mut c, 4, friend(BOB, X25519Path::Spec));
    let seqs: Vec<Option<u64>> = events(&mut c)
        .into_iter()
        .filter_map(|e| match e {
            Event::Message(m) => Some(m.seq),
            _ => None,
        })
        .collect();
    assert_eq!(seqs, [Some(3), Some(4), Some(5)]);
    assert!(c.store().list_offline().unwrap().is_empty());
}

/// Bob's friends entry after binding the vanity alias `4000` (same conversation), under the
/// keys of `key_mnemonic`.
fn friend_bound(key_mnemonic: &str) -> Value {
    let mut v = friend(key_mnemonic, X25519Path::Spec);
    v[0]["alias_id"] = json!("4000");
    v
}

fn inbound_from(from: &str, id: &str, seq: u64, text: &str, key: &SessionKey) -> String {
    let mut v: Value = serde_json::from_str(&inbound(id, seq, text, key)).unwrap();
    v["from"] = json!(from);
    v.to_string()
}

#[test]
fn friend_binding_a_vanity_alias_keeps_messages_flowing() {
    let mut c = ready(0);
    c.mark_as_verified(1, CONV).unwrap();
    let k = bob_key(X25519Path::Spec);
    // bob bound `4000`: his next message comes from it; parked, and contacts are synced
    c.handle_text(2, &inbound_from("4000", "m-1", 1, "hi from 4000", &k))
        .unwrap();
    assert!(matches!(events(&mut c)[..], [Event::Parked { .. }]));
    // a second one while the friends request is in flight: no second request yet
    c.handle_text(3, &inbound_from("4000", "m-2", 2, "again", &k))
        .unwrap();
    let r = next_http(&mut c);
    assert_eq!(r.path, "/api/v1/friends");
    assert!(c.poll_http().is_none());
    reply(&mut c, 4, &r, 200, friend_bound(BOB));
    let ev = events(&mut c);
    let texts: Vec<&str> = ev
        .iter()
        .filter_map(|e| match e {
            Event::Message(m) => Some(m.text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(texts, ["hi from 4000", "again"]);
    assert!(
        !ev.iter().any(|e| matches!(
            e,
            Event::SecurityViolation(_) | Event::PeerKeyChanged { .. }
        )),
        "a rename with the same keys is not a trust event: {ev:?}"
    );
    let s = c.store().load_session(CONV).unwrap().unwrap();
    assert_eq!(s.their_alias_id, "4000");
    // the verification follows the alias, in memory and in the store
    assert!(matches!(
        c.trust_state("4000"),
        client_core::security::TrustState::Verified { .. }
    ));
    let trust = c.store().list_trust().unwrap();
    assert_eq!(trust.len(), 1);
    assert_eq!(trust[0].contact_id, "4000");
    assert!(c.store().list_offline().unwrap().is_empty());
    // the second message asked for a resync (its request may have predated the bind)
    let r = next_http(&mut c);
    assert_eq!(r.path, "/api/v1/friends");
    reply(&mut c, 5, &r, 200, friend_bound(BOB));
    assert!(c.poll_http().is_none());
    // later messages flow directly
    c.handle_text(6, &inbound_from("4000", "m-3", 3, "direct", &k))
        .unwrap();
    assert!(
        events(&mut c)
            .iter()
            .any(|e| matches!(e, Event::Message(m) if m.text == "direct"))
    );
}

/// Bob queued messages, then bound `4000`: the relay delivers the backlog under the alias it
/// was sent from, after this client already followed bob to `4000`. The old alias is bob's:
/// the backlog flows, with no further contacts sync.
#[test]
fn backlog_sent_before_a_bind_flows_after_the_session_followed_the_alias() {
    let mut c = ready(0);
    let k = bob_key(X25519Path::Spec);
    c.handle_text(1, &inbound_from("4000", "m-1", 1, "after the bind", &k))
        .unwrap();
    let r = next_http(&mut c);
    reply(&mut c, 2, &r, 200, friend_bound(BOB));
    let s = c.store().load_session(CONV).unwrap().unwrap();
    assert_eq!(s.their_alias_id, "4000");
    assert_eq!(s.former_alias_ids, ["u10000002"]);
    events(&mut c);
    c.handle_text(3, &inbound("m-2", 2, "queued before the bind", &k))
        .unwrap();
    let ev = events(&mut c);
    assert!(
        ev.iter().any(
            |e| matches!(e, Event::Message(m) if m.text == "queued before the bind"
                && m.from_alias_id.as_deref() == Some("u10000002"))
        ),
        "{ev:?}"
    );
    assert!(c.poll_http().is_none(), "no sync needed for a former alias");
    assert!(c.store().list_offline().unwrap().is_empty());
    // and a retract from the former alias lands too
    c.handle_text(4, &retract_frame("m-2", "u10000002"))
        .unwrap();
    assert_eq!(msg_type(&c, "m-2").as_deref(), Some("retracted"));
}

/// A device that first met bob as `4000` receives his backlog sent as `u10000002`, an alias it
/// never knew: parked, a sync that still lists `4000` for the conversation, then the old
/// alias is taken as a former one of bob's and the backlog is shown in seq order. A parked
/// message that does not decrypt under the session key stays parked.
#[test]
fn backlog_from_an_alias_never_seen_is_released_by_the_sync_that_does_not_list_it() {
    let mut c = client(ClientConfig::default());
    register(&mut c, 0);
    sync_friends(&mut c, 0, friend_bound(BOB));
    open(&mut c, 0);
    events(&mut c);
    let k = bob_key(X25519Path::Spec);
    let wrong = bob_key(X25519Path::WebSdk);
    c.handle_text(1, &inbound("m-1", 1, "one", &k)).unwrap();
    let r = next_http(&mut c);
    assert_eq!(r.path, "/api/v1/friends");
    // more of the backlog while the sync is in flight: its answer may predate them
    c.handle_text(2, &inbound("m-2", 2, "two", &k)).unwrap();
    c.handle_text(2, &inbound("m-3", 3, "forged", &wrong))
        .unwrap();
    reply(&mut c, 3, &r, 200, friend_bound(BOB));
    assert!(
        !events(&mut c)
            .iter()
            .any(|e| matches!(e, Event::Message(_))),
        "an answer older than a park releases nothing"
    );
    let r = next_http(&mut c);
    assert_eq!(r.path, "/api/v1/friends");
    reply(&mut c, 4, &r, 200, friend_bound(BOB));
    let texts: Vec<String> = events(&mut c)
        .into_iter()
        .filter_map(|e| match e {
            Event::Message(m) => Some(m.text),
            _ => None,
        })
        .collect();
    assert_eq!(texts, ["one", "two"]);
    let s = c.store().load_session(CONV).unwrap().unwrap();
    assert_eq!(s.their_alias_id, "4000");
    assert_eq!(s.former_alias_ids, ["u10000002"]);
    let parked = c.store().list_offline().unwrap();
    assert_eq!(parked.len(), 1);
    assert_eq!(parked[0].id, "m-3");
}

#[test]
fn alias_change_with_different_keys_is_a_key_change_not_a_rename() {
    let mut c = ready(0);
    c.mark_as_verified(1, CONV).unwrap();
    let new_key = bob_key(X25519Path::WebSdk);
    c.handle_text(2, &inbound_from("4000", "m-1", 1, "who?", &new_key))
        .unwrap();
    events(&mut c);
    let r = next_http(&mut c);
    assert_eq!(r.path, "/api/v1/friends");
    // the entry under the new alias carries another X25519 key: the alias follows, but as a
    // key change of a verified contact (violation, the message stays parked)
    let mut changed = friend(BOB, X25519Path::WebSdk);
    changed[0]["alias_id"] = json!("4000");
    reply(&mut c, 3, &r, 200, changed);
    let ev = events(&mut c);
    assert!(!ev.iter().any(|e| matches!(e, Event::Message(_))), "{ev:?}");
    assert!(
        ev.iter()
            .any(|e| matches!(e, Event::SecurityViolation(v) if v.contact_id == "4000")),
        "{ev:?}"
    );
    assert_eq!(c.store().list_offline().unwrap().len(), 1);
    let s = c.store().load_session(CONV).unwrap().unwrap();
    assert_eq!(s.their_alias_id, "4000");
    assert!(s.pending_ecdh_public_key.is_some());
    // the user accepts the new key: the parked message is delivered
    c.reset_trust_state(4, CONV).unwrap();
    assert!(
        events(&mut c)
            .iter()
            .any(|e| matches!(e, Event::Message(m) if m.text == "who?"))
    );
}

#[test]
fn alias_change_with_another_signing_key_is_not_accepted() {
    let mut c = ready(0);
    let k = bob_key(X25519Path::Spec);
    c.handle_text(2, &inbound_from("4000", "m-1", 1, "who?", &k))
        .unwrap();
    events(&mut c);
    let r = next_http(&mut c);
    let mut forged = friend_bound(BOB);
    forged[0]["ed25519_public_key"] = json!(
        derive_identity(ALICE, X25519Path::Spec)
            .unwrap()
            .signing_public_b64()
    );
    reply(&mut c, 3, &r, 200, forged);
    assert!(
        !events(&mut c)
            .iter()
            .any(|e| matches!(e, Event::Message(_)))
    );
    assert_eq!(c.store().list_offline().unwrap().len(), 1);
    let s = c.store().load_session(CONV).unwrap().unwrap();
    assert_eq!(s.their_alias_id, "u10000002");
}

#[test]
fn payment_confirmed_reaches_the_app_once_per_order_across_restarts() {
    let confirmed = |c: &mut C| {
        events(c)
            .into_iter()
            .filter(|e| matches!(e, Event::PaymentConfirmed { .. }))
            .count()
    };
    let frame =
        |o: &str| json!({"type":"payment_confirmed","order_id":o,"ref_id":"4000"}).to_string();
    let mut c = ready(0);
    c.handle_text(1, &frame("o-1")).unwrap();
    assert_eq!(confirmed(&mut c), 1);
    // re-sent on the next sync: not reported again
    c.handle_text(2, &frame("o-1")).unwrap();
    assert_eq!(confirmed(&mut c), 0);
    c.handle_text(3, &frame("o-2")).unwrap();
    assert_eq!(confirmed(&mut c), 1);
    // after a restart too
    let store = c.store().clone();
    drop(c);
    let mut c = Client::new(store, [7; 32], ClientConfig::default()).unwrap();
    c.handle_text(4, &frame("o-1")).unwrap();
    c.handle_text(4, &frame("o-2")).unwrap();
    assert_eq!(confirmed(&mut c), 0);
}

/// The friendship was accepted while we were away (its `friend_accepted` frame missed): the
/// first message of the conversation must fetch the friends list, not wait for a reconnect.
#[test]
fn message_for_an_unknown_conversation_syncs_contacts() {
    let mut c = client(ClientConfig::default());
    register(&mut c, 0);
    open(&mut c, 0);
    events(&mut c);
    c.handle_text(1, &inbound("m-1", 1, "first", &bob_key(X25519Path::Spec)))
        .unwrap();
    assert!(matches!(events(&mut c)[..], [Event::Parked { .. }]));
    let r = next_http(&mut c);
    assert_eq!(r.path, "/api/v1/friends");
    reply(&mut c, 2, &r, 200, friend(BOB, X25519Path::Spec));
    assert!(
        events(&mut c)
            .iter()
            .any(|e| matches!(e, Event::Message(m) if m.text == "first"))
    );
    assert!(c.store().list_offline().unwrap().is_empty());
}

fn retract_frame(id: &str, from: &str) -> String {
    json!({"type":"retract","id":id,"from":from,"conv_id":CONV}).to_string()
}

fn msg_type(c: &C, id: &str) -> Option<String> {
    c.store().get_message(id).unwrap().unwrap().msg_type
}

/// Bob bound `4000` after sending `m-1`: his retract comes from the new alias. It waits for
/// the contacts sync that shows the rename, then lands; a retract from an alias the sync does
/// not give to the conversation's peer never does.
#[test]
fn retract_from_a_friend_who_bound_a_vanity_alias_lands() {
    let mut c = ready(0);
    let k = bob_key(X25519Path::Spec);
    c.handle_text(1, &inbound("m-1", 1, "one", &k)).unwrap();
    c.handle_text(2, &inbound("m-2", 2, "two", &k)).unwrap();
    events(&mut c);
    // from a stranger's alias: the friends list still gives the conversation to u10000002
    c.handle_text(3, &retract_frame("m-1", "u10000003"))
        .unwrap();
    let r = next_http(&mut c);
    assert_eq!(r.path, "/api/v1/friends");
    reply(&mut c, 4, &r, 200, friend(BOB, X25519Path::Spec));
    assert_eq!(msg_type(&c, "m-1"), None);
    // from bob's new alias, before we know it: held, then applied once the sync follows it
    c.handle_text(5, &retract_frame("m-1", "4000")).unwrap();
    assert_eq!(msg_type(&c, "m-1"), None);
    let r = next_http(&mut c);
    assert_eq!(r.path, "/api/v1/friends");
    reply(&mut c, 6, &r, 200, friend_bound(BOB));
    assert_eq!(msg_type(&c, "m-1").as_deref(), Some("retracted"));
    assert!(
        events(&mut c)
            .iter()
            .any(|e| matches!(e, Event::Retracted { id } if id == "m-1"))
    );
    // once the session follows, a retract of an older message from the new alias lands at once
    c.handle_text(7, &retract_frame("m-2", "4000")).unwrap();
    assert_eq!(msg_type(&c, "m-2").as_deref(), Some("retracted"));
    assert!(c.poll_http().is_none());
}

/// The contacts sync a parked message asked for fails (a stale pooled connection, the relay
/// restarting): it is retried on a doubling timer until one answers, not at the next reconnect.
#[test]
fn failed_contacts_sync_is_retried_while_messages_wait() {
    let mut c = ready(0);
    let k = bob_key(X25519Path::Spec);
    c.handle_text(1, &inbound_from("4000", "m-1", 1, "hi", &k))
        .unwrap();
    let r = next_http(&mut c);
    assert_eq!(r.path, "/api/v1/friends");
    reply(&mut c, 2, &r, 0, Value::Null);
    assert!(c.poll_http().is_none());
    assert_eq!(
        c.poll_timeout(),
        Some(2 + client_core::machine::CONTACTS_RETRY_BASE_MS)
    );
    c.handle_timeout(2 + client_core::machine::CONTACTS_RETRY_BASE_MS);
    let r = next_http(&mut c);
    assert_eq!(r.path, "/api/v1/friends");
    reply(&mut c, 1_010, &r, 503, Value::Null);
    // doubled
    assert_eq!(
        c.poll_timeout(),
        Some(1_010 + 2 * client_core::machine::CONTACTS_RETRY_BASE_MS)
    );
    c.handle_timeout(1_010 + 2 * client_core::machine::CONTACTS_RETRY_BASE_MS);
    let r = next_http(&mut c);
    reply(&mut c, 3_100, &r, 200, friend_bound(BOB));
    assert!(
        events(&mut c)
            .iter()
            .any(|e| matches!(e, Event::Message(m) if m.text == "hi"))
    );
    // nothing waits any more: no retry timer left (only the heartbeat)
    assert_eq!(c.poll_timeout(), Some(25_000));
}

/// The message is parked (bob's new alias is not known yet) when bob retracts it: the parked
/// copy must not be released later as if never retracted.
#[test]
fn retract_of_a_parked_message_replaces_it() {
    let mut c = ready(0);
    let k = bob_key(X25519Path::Spec);
    c.handle_text(1, &inbound_from("4000", "m-1", 1, "oops", &k))
        .unwrap();
    assert_eq!(c.store().count_offline(Some(CONV)).unwrap(), 1);
    c.handle_text(2, &retract_frame("m-1", "4000")).unwrap();
    assert_eq!(c.store().count_offline(Some(CONV)).unwrap(), 0);
    assert_eq!(msg_type(&c, "m-1").as_deref(), Some("retracted"));
    let r = next_http(&mut c);
    reply(&mut c, 3, &r, 200, friend_bound(BOB));
    let ev = events(&mut c);
    assert!(
        !ev.iter()
            .any(|e| matches!(e, Event::Message(m) if m.text == "oops")),
        "{ev:?}"
    );
    // a redelivery of the original is a duplicate of the placeholder
    c.handle_text(4, &inbound_from("4000", "m-1", 1, "oops", &k))
        .unwrap();
    assert_eq!(msg_type(&c, "m-1").as_deref(), Some("retracted"));
}

/// A relay may deliver a retract again (after a crash it cannot know the first arrived): the
/// second changes nothing and is not a second event.
#[test]
fn a_retract_delivered_twice_is_one_event() {
    let mut c = ready(0);
    c.handle_text(1, &inbound("m-1", 1, "one", &bob_key(X25519Path::Spec)))
        .unwrap();
    events(&mut c);
    c.handle_text(2, &retract_frame("m-1", "u10000002"))
        .unwrap();
    c.handle_text(3, &retract_frame("m-1", "u10000002"))
        .unwrap();
    let n = events(&mut c)
        .iter()
        .filter(|e| matches!(e, Event::Retracted { .. }))
        .count();
    assert_eq!(n, 1);
}

#[test]
fn a_contacts_sync_refused_401_under_an_open_socket_reauthenticates_and_keeps_it() {
    let mut c = ready(0);
    let now = 10;
    // the token expired while the socket stayed open: the friends list is refused
    c.sync_contacts(now);
    let r = next_http(&mut c);
    assert_eq!(r.path, "/api/v1/friends");
    reply(
        &mut c,
        now,
        &r,
        401,
        json!({"error": "TOKEN_EXPIRED", "message": "expired"}),
    );
    assert_eq!(c.bearer_token(), None);
    auth_round(&mut c, now); // challenge + verify with the stored identity
    assert!(c.is_connected(), "the socket is kept");
    assert!(c.poll_connection().is_none(), "no reconnect");
    let ev = events(&mut c);
    assert!(ev.iter().any(|e| matches!(e, Event::Authenticated { .. })));
    assert!(!ev.iter().any(|e| matches!(e, Event::AuthFailed(_))));
    // the next sync carries the fresh token and passes
    sync_friends(&mut c, now, friend(BOB, X25519Path::Spec));
    // a refusal right after a refresh that did not help waits for the next connection
    c.sync_contacts(now);
    let r = next_http(&mut c);
    reply(&mut c, now, &r, 401, json!({"error": "TOKEN_EXPIRED"}));
    auth_round(&mut c, now);
    c.sync_contacts(now);
    let r = next_http(&mut c);
    reply(&mut c, now, &r, 401, json!({"error": "TOKEN_EXPIRED"}));
    assert!(
        c.poll_http().is_none(),
        "a second refusal in one episode does not re-authenticate again"
    );
    assert!(c.is_connected());
}
