//! Call commands while the socket is closed: a call signal is never queued for a socket that is
//! not open (the shell has nowhere to send it and drops it), so the command says so with
//! `NotConnected` instead of reporting success for a signal that never leaves.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::needless_pass_by_value
)]

use client_core::keys::{X25519Path, derive_identity};
use client_core::machine::{
    CallEndReason, CallOptions, CallState, Client, ClientConfig, ClientError, ConnCommand,
};
use client_core::store::MemoryStore;
use serde_json::{Map, Value, json};
use wire::frames::{CallKind, ClientFrame, ServerFrame};

const ALICE: &str =
    "abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon about";
const BOB: &str = "legal winner thank year wave sausage worth useful legal winner thank yellow";
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

/// Alice calls Bob; Bob rings, then his socket drops.
fn ringing_bob_offline() -> (C, C) {
    let mut a = peer_client(ALICE, "11111111-1111-4111-8111-111111111111", A, BOB, B);
    let mut b = peer_client(BOB, "22222222-2222-4222-8222-222222222222", B, ALICE, A);
    a.call(
        1_000,
        B,
        &CallOptions {
            video: false,
            sdp: "v=0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\n".into(),
        },
    )
    .unwrap();
    while let Some(f) = a.poll_transmit() {
        if let ClientFrame::Call(c) = f {
            b.handle_text(1_050, &ServerFrame::Call(c).encode())
                .unwrap();
        }
    }
    assert_eq!(b.call_state(), CallState::Ringing);
    b.handle_disconnected(1_100);
    assert!(!b.is_connected());
    (a, b)
}

fn call_frames(c: &mut C) -> usize {
    std::iter::from_fn(|| c.poll_transmit())
        .filter(|f| matches!(f, ClientFrame::Call(_)))
        .count()
}

#[test]
fn answering_while_offline_is_refused_and_the_call_keeps_ringing() {
    let (_a, mut b) = ringing_bob_offline();
    assert!(matches!(
        b.answer_call(1_200, "v=0 answer"),
        Err(ClientError::NotConnected)
    ));
    assert_eq!(b.call_state(), CallState::Ringing);
    assert_eq!(call_frames(&mut b), 0);
}

#[test]
fn rejecting_while_offline_ends_the_call_locally_and_says_the_signal_did_not_leave() {
    let (_a, mut b) = ringing_bob_offline();
    assert!(matches!(
        b.reject_call(1_200),
        Err(ClientError::NotConnected)
    ));
    assert_eq!(b.call_state(), CallState::Rejected);
    assert_eq!(
        b.current_call().unwrap().end_reason,
        Some(CallEndReason::LocalReject)
    );
    assert_eq!(call_frames(&mut b), 0);
}

#[test]
fn a_raw_call_signal_needs_an_open_socket() {
    let (_a, mut b) = ringing_bob_offline();
    let id = b.current_call().unwrap().call_id.clone();
    assert!(matches!(
        b.send_call_signal(1_200, CallKind::Ice, A, &id, Map::new()),
        Err(ClientError::NotConnected)
    ));
    assert!(matches!(
        b.send_ice_candidate(1_200, json!({"candidate": "candidate:1"})),
        Err(ClientError::NotConnected)
    ));
    assert_eq!(call_frames(&mut b), 0);
}
