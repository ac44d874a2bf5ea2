//! The call state machine: two machines wired in memory under a virtual clock.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::needless_pass_by_value
)]

use client_core::crypto::session_key;
use client_core::crypto::signal::{SignalError, seal_signal};
use client_core::keys::{X25519Path, derive_identity};
use client_core::machine::{
    CALL_RING_TIMEOUT_MS, CallEndReason, CallEvent, CallOptions, CallState, Client, ClientConfig,
    ClientError, ConnCommand, Event,
};
use client_core::store::MemoryStore;
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use serde_json::{Map, Value, json};
use wire::frames::{CRYPTO_V_CALL, CallKind, CallSignal, ClientFrame, ServerFrame};
use wire::ids::{AliasId, CallId};

const ALICE: &str =
    "abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon about";
const BOB: &str = "legal winner thank year wave sausage worth useful legal winner thank yellow";
const CAROL: &str =
    "letter advice cage absurd amount doctor acoustic avoid letter advice cage above";
const A: &str = "u10000001";
const B: &str = "u10000002";
const CONV: &str = "c-test-conv-id";

type C = Client<MemoryStore>;

fn reply(c: &mut C, now: u64, status: u16, body: Value) {
    let r = c.poll_http().expect("an HTTP request");
    c.handle_http_response(now, r.id, status, body.to_string().as_bytes())
        .unwrap();
}

/// A registered, connected client whose only friend is `peer`.
fn peer_client(mnemonic: &str, uuid: &str, alias: &str, peer_mnemonic: &str, peer: &str) -> C {
    let mut c = Client::new(
        MemoryStore::new(),
        [alias.as_bytes()[alias.len() - 1]; 32],
        ClientConfig::default(),
    )
    .unwrap();
    c.register_account(0, mnemonic, alias).unwrap();
    reply(&mut c, 0, 500, json!({})); // no PoW
    reply(&mut c, 0, 201, json!({"uuid": uuid, "alias_id": alias}));
    reply(&mut c, 0, 200, json!({"challenge": "ch"}));
    reply(&mut c, 0, 200, json!({"token": "jwt"}));
    let p = derive_identity(peer_mnemonic, X25519Path::Spec).unwrap();
    c.sync_contacts(0);
    reply(
        &mut c,
        0,
        200,
        json!([{
            "friendship_id": 7, "alias_id": peer, "nickname": "p", "status": "accepted",
            "direction": "sent", "conversation_id": CONV,
            "x25519_public_key": p.ecdh_public_b64(), "ed25519_public_key": p.signing_public_b64(),
            "created_at": "2026-01-01T00:00:00Z"
        }]),
    );
    c.connect(0);
    reply(&mut c, 0, 200, json!({"ticket": "t"}));
    assert!(matches!(
        c.poll_connection(),
        Some(ConnCommand::Connect { .. })
    ));
    c.handle_connected(0).unwrap();
    while c.poll_transmit().is_some() {}
    while c.poll_event().is_some() {}
    c
}

fn pair() -> (C, C) {
    (
        peer_client(ALICE, "11111111-1111-4111-8111-111111111111", A, BOB, B),
        peer_client(BOB, "22222222-2222-4222-8222-222222222222", B, ALICE, A),
    )
}

/// Call frames `from` sent, as the relay forwards them (text).
fn outgoing(from: &mut C) -> Vec<String> {
    std::iter::from_fn(|| from.poll_transmit())
        .filter_map(|f| match f {
            ClientFrame::Call(c) => Some(ServerFrame::Call(c).encode()),
            _ => None,
        })
        .collect()
}

/// Moves every call frame of `from` to `to`; returns how many.
fn pump(from: &mut C, to: &mut C, now: u64) -> usize {
    let fs = outgoing(from);
    for f in &fs {
        to.handle_text(now, f).unwrap();
    }
    fs.len()
}

fn call_events(c: &mut C) -> Vec<CallEvent> {
    std::iter::from_fn(|| c.poll_event())
        .filter_map(|e| match e {
            Event::Call(ev) => Some(ev),
            _ => None,
        })
        .collect()
}

fn states(evs: &[CallEvent]) -> Vec<(CallState, Option<CallEndReason>)> {
    evs.iter()
        .filter_map(|e| match e {
            CallEvent::StateChanged { state, reason, .. } => Some((*state, *reason)),
            _ => None,
        })
        .collect()
}

fn offer(video: bool) -> CallOptions {
    CallOptions {
        video,
        sdp: "v=0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\n".into(),
    }
}

#[test]
fn full_call_between_two_machines() {
    let (mut a, mut b) = pair();
    let id = a.call(1_000, B, &offer(true)).unwrap();
    assert_eq!(states(&call_events(&mut a)), [(CallState::Calling, None)]);
    assert_eq!(pump(&mut a, &mut b, 1_050), 1);
    let ev = call_events(&mut b);
    assert_eq!(states(&ev), [(CallState::Ringing, None)]);
    assert!(ev.contains(&CallEvent::Incoming {
        call_id: id.clone(),
        from: A.into(),
        video: true,
        sdp: offer(true).sdp
    }));
    // caller ICE while ringing reaches the callee
    a.send_ice_candidate(1_100, json!({"candidate": "candidate:1", "sdpMid": "0"}))
        .unwrap();
    pump(&mut a, &mut b, 1_150);
    assert!(matches!(&call_events(&mut b)[..],
        [CallEvent::RemoteIce { call_id, candidate }] if *call_id == id && candidate["sdpMid"] == "0"));
    b.answer_call(2_000, "v=0 answer").unwrap();
    assert_eq!(b.call_state(), CallState::Connecting);
    pump(&mut b, &mut a, 2_050);
    let ev = call_events(&mut a);
    assert!(ev.contains(&CallEvent::RemoteAnswer {
        call_id: id.clone(),
        sdp: "v=0 answer".into()
    }));
    assert_eq!(states(&ev), [(CallState::Connecting, None)]);
    a.call_media_connected(2_500).unwrap();
    b.call_media_connected(2_500).unwrap();
    assert_eq!(a.call_state(), CallState::Connected);
    // connected: no timer left for the call; a long call does not time out
    a.handle_timeout(2_500 + 2 * CALL_RING_TIMEOUT_MS);
    assert_eq!(a.call_state(), CallState::Connected);
    b.hangup_call(3_000).unwrap();
    assert_eq!(
        states(&call_events(&mut b)),
        [
            (CallState::Connecting, None),
            (CallState::Connected, None),
            (CallState::Hangup, Some(CallEndReason::LocalHangup))
        ]
    );
    pump(&mut b, &mut a, 3_050);
    let ev = call_events(&mut a);
    assert_eq!(
        states(&ev),
        [
            (CallState::Connected, None),
            (CallState::Ended, Some(CallEndReason::RemoteHangup))
        ]
    );
    assert_eq!(a.current_call().unwrap().call_id, id);
    // a new call may start after the end
    a.call(4_000, B, &offer(false)).unwrap();
}

#[test]
fn reject_ends_both_sides() {
    let (mut a, mut b) = pair();
    a.call(0, B, &offer(false)).unwrap();
    pump(&mut a, &mut b, 10);
    b.reject_call(20).unwrap();
    assert_eq!(b.call_state(), CallState::Rejected);
    pump(&mut b, &mut a, 30);
    assert_eq!(a.call_state(), CallState::Rejected);
    assert_eq!(
        a.current_call().unwrap().end_reason,
        Some(CallEndReason::RemoteReject)
    );
    assert!(matches!(b.answer_call(40, "x"), Err(ClientError::NoCall)));
}

#[test]
fn unanswered_call_times_out_on_both_sides() {
    let (mut a, mut b) = pair();
    a.call(0, B, &offer(false)).unwrap();
    pump(&mut a, &mut b, 10);
    // the heartbeat (25 s) comes first; the call deadline is among the timers
    a.handle_timeout(25_000);
    assert_eq!(a.poll_timeout(), Some(CALL_RING_TIMEOUT_MS));
    a.handle_timeout(CALL_RING_TIMEOUT_MS - 1);
    assert_eq!(a.call_state(), CallState::Calling);
    a.handle_timeout(CALL_RING_TIMEOUT_MS);
    assert_eq!(a.call_state(), CallState::Ended);
    assert_eq!(
        a.current_call().unwrap().end_reason,
        Some(CallEndReason::Timeout)
    );
    // the caller's hangup stops the callee ringing
    pump(&mut a, &mut b, CALL_RING_TIMEOUT_MS + 5);
    assert_eq!(b.call_state(), CallState::Ended);
    // a callee that never acts times out by itself and rejects
    let (mut a, mut b) = pair();
    a.call(0, B, &offer(false)).unwrap();
    pump(&mut a, &mut b, 10);
    b.handle_timeout(10 + CALL_RING_TIMEOUT_MS);
    assert_eq!(
        b.current_call().unwrap().end_reason,
        Some(CallEndReason::Timeout)
    );
    let f = outgoing(&mut b);
    assert_eq!(f.len(), 1);
    assert!(f[0].contains("call_reject"));
}

#[test]
fn glare_lower_alias_wins_on_both_sides() {
    let (mut a, mut b) = pair();
    let ida = a.call(0, B, &offer(false)).unwrap();
    let idb = b.call(0, A, &offer(false)).unwrap();
    call_events(&mut a);
    call_events(&mut b);
    let fa = outgoing(&mut a);
    let fb = outgoing(&mut b);
    for f in &fb {
        a.handle_text(5, f).unwrap();
    }
    for f in &fa {
        b.handle_text(5, f).unwrap();
    }
    // A (u10000001 < u10000002) keeps calling; B drops its call and rings for A's
    assert_eq!(a.call_state(), CallState::Calling);
    assert_eq!(a.current_call().unwrap().call_id, ida);
    assert!(call_events(&mut a).is_empty());
    assert_eq!(b.call_state(), CallState::Ringing);
    assert_eq!(b.current_call().unwrap().call_id, ida);
    let ev = call_events(&mut b);
    assert_eq!(
        states(&ev),
        [
            (CallState::Ended, Some(CallEndReason::Glare)),
            (CallState::Ringing, None)
        ]
    );
    assert!(matches!(&ev[0], CallEvent::StateChanged { call_id, .. } if *call_id == idb));
    assert!(outgoing(&mut a).is_empty() && outgoing(&mut b).is_empty());
    b.answer_call(10, "ans").unwrap();
    pump(&mut b, &mut a, 15);
    assert_eq!(a.call_state(), CallState::Connecting);
}

/// Seals a signal as `signer` would, with the conversation key of alice and bob.
fn forged(signer: &str, kind: CallKind, from: &str, to: &str, call_id: &str, now: u64) -> String {
    let a = derive_identity(ALICE, X25519Path::Spec).unwrap();
    let b = derive_identity(BOB, X25519Path::Spec).unwrap();
    let key = session_key(&a.ecdh_key, &b.ecdh_key.public_key(), CONV);
    let s = derive_identity(signer, X25519Path::Spec).unwrap();
    let mut f = Map::new();
    f.insert("type".into(), Value::from(kind.as_str()));
    f.insert("call_id".into(), Value::from(call_id));
    f.insert("from".into(), Value::from(from));
    let mut rng = ChaCha20Rng::seed_from_u64(now);
    let payload = seal_signal(&key, &s.signing_key, f, now, &mut rng).unwrap();
    ServerFrame::Call(CallSignal {
        kind,
        to: AliasId::parse(to).unwrap(),
        call_id: CallId::parse(call_id).unwrap(),
        from: Some(AliasId::parse(from).unwrap()),
        crypto_v: Some(CRYPTO_V_CALL),
        payload,
    })
    .encode()
}

#[test]
fn signals_for_another_call_id_are_ignored() {
    let (mut a, mut b) = pair();
    let id = a.call(0, B, &offer(false)).unwrap();
    pump(&mut a, &mut b, 10);
    b.answer_call(20, "ans").unwrap();
    pump(&mut b, &mut a, 30);
    call_events(&mut a);
    // a genuine, well-signed hangup and reject from bob, but for another call id (S-4)
    let other = "99999999-9999-4999-8999-999999999999";
    a.handle_text(40, &forged(BOB, CallKind::Hangup, B, A, other, 40))
        .unwrap();
    a.handle_text(41, &forged(BOB, CallKind::Reject, B, A, other, 41))
        .unwrap();
    assert_eq!(a.call_state(), CallState::Connecting);
    assert!(call_events(&mut a).is_empty());
    // the right call id ends it
    a.handle_text(50, &forged(BOB, CallKind::Hangup, B, A, &id, 50))
        .unwrap();
    assert_eq!(a.call_state(), CallState::Ended);
}

#[test]
fn offer_during_a_call_is_refused_busy() {
    let (mut a, mut b) = pair();
    a.call(0, B, &offer(false)).unwrap();
    pump(&mut a, &mut b, 10);
    b.answer_call(20, "ans").unwrap();
    pump(&mut b, &mut a, 30);
    call_events(&mut a);
    let first = a.current_call().unwrap().call_id.clone();
    let second = "88888888-8888-4888-8888-888888888888";
    a.handle_text(40, &forged(BOB, CallKind::Offer, B, A, second, 40))
        .unwrap();
    assert_eq!(a.current_call().unwrap().call_id, first, "not replaced");
    assert_eq!(a.call_state(), CallState::Connecting);
    assert_eq!(
        call_events(&mut a),
        [CallEvent::MissedWhileBusy {
            from: B.into(),
            call_id: second.into()
        }]
    );
    let f = outgoing(&mut a);
    assert_eq!(f.len(), 1);
    assert!(f[0].contains("call_reject") && f[0].contains(second));
    // bob's machine, told it is busy, ends the other call as busy: wire it back
    b.handle_text(45, &f[0]).unwrap(); // for an unknown call id: ignored
    assert_eq!(b.call_state(), CallState::Connecting);
    assert!(matches!(
        a.call(50, B, &offer(false)),
        Err(ClientError::CallBusy)
    ));
}

#[test]
fn replayed_and_mis_signed_signals_are_refused() {
    let (mut a, mut b) = pair();
    let id = a.call(0, B, &offer(false)).unwrap();
    let f = outgoing(&mut a);
    b.handle_text(10, &f[0]).unwrap();
    b.reject_call(20).unwrap();
    call_events(&mut b);
    // the same offer again (a replay, within the window): refused by the nonce cache
    b.handle_text(30, &f[0]).unwrap();
    assert_eq!(b.call_state(), CallState::Rejected);
    assert!(matches!(&call_events(&mut b)[..],
        [CallEvent::SignalRefused { error: SignalError::ReplayedNonce, call_id, .. }] if *call_id == id));
    // an offer "from alice" under the right session key but signed by carol's key
    let other = "77777777-7777-4777-8777-777777777777";
    b.handle_text(40, &forged(CAROL, CallKind::Offer, A, B, other, 40))
        .unwrap();
    assert_eq!(b.call_state(), CallState::Rejected);
    assert!(matches!(
        &call_events(&mut b)[..],
        [CallEvent::SignalRefused {
            error: SignalError::BadSignature,
            ..
        }]
    ));
    // the same offer signed by alice's key rings
    b.handle_text(50, &forged(ALICE, CallKind::Offer, A, B, other, 50))
        .unwrap();
    assert_eq!(b.call_state(), CallState::Ringing);
}
