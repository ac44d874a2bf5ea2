//! Calls: K1 ice-config (coturn REST credentials) and `call_*` routing.

use base64::Engine as _;
use hmac::{Hmac, KeyInit as _, Mac as _};
use relay_core::{Config, TurnSecret};
use serde_json::json;
use wire::ServerFrame;
use wire::http::paths;

use crate::world::{World, closed, errors, fast_config, frames};

const SECRET: &str = "coturn-static-auth-secret";

fn turn_config() -> Config {
    Config {
        turn_urls: vec![
            "turn:turn.example.net:3478?transport=udp".into(),
            "turns:turn.example.net:5349?transport=tcp".into(),
        ],
        turn_secret: Some(TurnSecret(SECRET.into())),
        turn_ttl_s: 3600,
        ..fast_config()
    }
}

#[test]
fn ice_config_issues_verifiable_time_limited_turn_credentials() {
    let mut w = World::with_config(turn_config());
    let u = w.user("alice");
    let r = w.get(paths::ICE_CONFIG, Some(&u.token));
    assert_eq!(r.status, 200);
    let v = r.body_json();
    assert_eq!(v["ttl"], 3600);
    assert_eq!(v["ice_transport_policy"], "all");
    let servers = v["ice_servers"].as_array().unwrap();
    assert_eq!(servers.len(), 2);
    assert_eq!(servers[0]["urls"][0], "stun:stun.l.google.com:19302");
    assert!(servers[0].get("username").is_none());
    let turn = &servers[1];
    assert_eq!(turn["urls"].as_array().unwrap().len(), 2);
    let username = turn["username"].as_str().unwrap();
    let (expiry, alias) = username.split_once(':').unwrap();
    assert_eq!(alias, u.alias);
    assert_eq!(expiry.parse::<u64>().unwrap(), w.now.get() / 1000 + 3600);
    let mut mac = Hmac::<sha1::Sha1>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(username.as_bytes());
    let expected = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
    assert_eq!(turn["credential"], expected);
    assert_eq!(relay_core::turn_credential(SECRET, username), expected);

    // mode=relay: TURN only, relay policy.
    let v = w
        .get("/api/v1/calls/ice-config?mode=relay", Some(&u.token))
        .body_json();
    assert_eq!(v["ice_transport_policy"], "relay");
    let servers = v["ice_servers"].as_array().unwrap();
    assert_eq!(servers.len(), 1);
    assert!(servers[0]["urls"][0].as_str().unwrap().starts_with("turn:"));
    // Later requests get later expiries.
    w.advance(10_000);
    let v = w.get(paths::ICE_CONFIG, Some(&u.token)).body_json();
    let later = v["ice_servers"][1]["username"].as_str().unwrap().to_owned();
    assert!(later.as_str() > username);
    // Debug never shows the secret.
    assert!(!format!("{:?}", w.relay.config()).contains(SECRET));
}

#[test]
fn ice_config_without_turn() {
    let mut w = World::new();
    let u = w.user("alice");
    let v = w.get(paths::ICE_CONFIG, Some(&u.token)).body_json();
    assert_eq!(v["ice_transport_policy"], "all");
    assert_eq!(v["ice_servers"].as_array().unwrap().len(), 1);
    assert!(v["ice_servers"][0].get("credential").is_none());
    let r = w.get("/api/v1/calls/ice-config?mode=relay", Some(&u.token));
    assert_eq!(
        (r.status, r.error_code().unwrap().as_str()),
        (503, "TURN_UNAVAILABLE")
    );
    let r = w.get("/api/v1/calls/ice-config?mode=bogus", Some(&u.token));
    assert_eq!(
        (r.status, r.error_code().unwrap().as_str()),
        (400, "INVALID_FIELD")
    );
    assert_eq!(w.get(paths::ICE_CONFIG, None).status, 401);
    // No STUN configured either: an empty list, still policy all.
    let mut w = World::with_config(Config {
        stun_urls: Vec::new(),
        ..fast_config()
    });
    let u = w.user("bob");
    let v = w.get(paths::ICE_CONFIG, Some(&u.token)).body_json();
    assert_eq!(v["ice_servers"], json!([]));
}

#[test]
fn signals_are_routed_between_contacts_with_from_overwritten() {
    let mut w = World::new();
    let mut a = w.user("alice");
    let mut b = w.user("bob");
    w.befriend(&a, &b);
    let ca = w.connect(&mut a);
    let cb = w.connect(&mut b);
    for kind in [
        "call_invite",
        "call_offer",
        "call_answer",
        "call_ice",
        "call_reject",
        "call_hangup",
    ] {
        let outs = w.call(&a, kind, &b.alias, "6f1c2a9e-0000-4000-8000-000000000001");
        assert!(frames(&outs, ca).is_empty(), "nothing back to the caller");
        let got = frames(&outs, cb);
        assert_eq!(got.len(), 1);
        let ServerFrame::Call(c) = &got[0] else {
            panic!("expected a call frame, got {got:?}");
        };
        assert_eq!(c.kind.as_str(), kind);
        assert_eq!(
            c.from.as_ref().map(ToString::to_string),
            Some(a.alias.clone())
        );
        assert_eq!(c.call_id.as_str(), "6f1c2a9e-0000-4000-8000-000000000001");
        assert_eq!(c.payload, "c2lnbmFs");
        assert_eq!(c.crypto_v, Some(2));
        let text = got[0].encode();
        assert!(
            text.contains(&format!("\"from\":\"{}\"", a.alias)),
            "{text}"
        );
    }
    // And back.
    let outs = w.call(&b, "call_answer", &a.alias, "c1");
    assert_eq!(frames(&outs, ca).len(), 1);
    // A signal without call_id is refused and not forwarded.
    let outs = w.send(
        ca,
        json!({"type":"call_offer","to":b.alias,"crypto_v":2,"payload":"x"}),
    );
    assert_eq!(errors(&frames(&outs, ca)).len(), 1);
    assert!(frames(&outs, cb).is_empty());
}

#[test]
fn non_contacts_are_refused_and_offline_peers_reported() {
    let mut w = World::new();
    let mut a = w.user("alice");
    let mut b = w.user("bob");
    let mut c = w.user("carol");
    w.befriend(&a, &b);
    // carol → alice: pending request only.
    let r = w.post(
        paths::FRIEND_REQUEST,
        json!({"to_alias_id": a.alias}),
        Some(&c.token),
    );
    assert_eq!(r.status, 200);
    let ca = w.connect(&mut a);
    let cc = w.connect(&mut c);
    for (to, label) in [
        (a.alias.clone(), "pending"),
        ("u12345678".to_owned(), "unknown"),
        (c.alias.clone(), "self"),
    ] {
        let outs = w.call(&c, "call_offer", &to, "call-9");
        let f = frames(&outs, cc);
        let [ServerFrame::Error(e)] = f.as_slice() else {
            panic!("{label}: {f:?}");
        };
        assert_eq!(e.error.as_str(), "NOT_A_CONTACT", "{label}");
        assert_eq!(e.ref_type.as_deref(), Some("call_offer"));
        assert_eq!(e.id.as_deref(), Some("call-9"));
        assert!(frames(&outs, ca).is_empty());
    }
    // bob is offline: PEER_OFFLINE back to alice, nothing stored.
    let commits = w.mem.commit_count();
    let outs = w.call(&a, "call_offer", &b.alias, "call-1");
    let f = frames(&outs, ca);
    let [ServerFrame::Error(e)] = f.as_slice() else {
        panic!("{f:?}");
    };
    assert_eq!(e.error.as_str(), "PEER_OFFLINE");
    assert_eq!(e.ref_type.as_deref(), Some("call_offer"));
    assert_eq!(e.id.as_deref(), Some("call-1"));
    assert!(!closed(&outs, ca));
    assert_eq!(
        w.mem.commit_count(),
        commits,
        "call signals are never stored"
    );
    // bob connects, syncs, restarts: no call frame ever replays.
    let cb = w.connect(&mut b);
    let outs = w.sync(cb);
    assert!(
        !frames(&outs, cb)
            .iter()
            .any(|f| matches!(f, ServerFrame::Call(_)))
    );
    w.restart(Box::new(w.mem.clone()));
    let cb = w.connect(&mut b);
    let outs = w.sync(cb);
    assert!(
        !frames(&outs, cb)
            .iter()
            .any(|f| matches!(f, ServerFrame::Call(_)))
    );
}

#[test]
fn call_signals_are_rate_limited_per_connection() {
    let mut w = World::new();
    let mut a = w.user("alice");
    let mut b = w.user("bob");
    w.befriend(&a, &b);
    let ca = w.connect(&mut a);
    let cb = w.connect(&mut b);
    let limit = relay_core::limits::MAX_CALL_FRAMES_PER_MIN_PER_CONN;
    for _ in 0..limit {
        let outs = w.call(&a, "call_ice", &b.alias, "c1");
        assert_eq!(frames(&outs, cb).len(), 1);
    }
    let outs = w.call(&a, "call_ice", &b.alias, "c1");
    assert_eq!(errors(&frames(&outs, ca)), vec!["RATE_LIMITED".to_owned()]);
    assert!(frames(&outs, cb).is_empty());
    // Keep both sockets alive, then the window reopens.
    w.now = w.now.plus_ms(60_000);
    let outs = w.call(&a, "call_ice", &b.alias, "c1");
    assert_eq!(frames(&outs, cb).len(), 1);
}
