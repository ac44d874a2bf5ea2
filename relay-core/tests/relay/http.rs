//! REST: registration, PoW, auth, tokens, tickets, contacts, lookups, errors.

use relay_core::{Config, HttpRequest, Method};
use serde_json::json;
use wire::ServerFrame;
use wire::http::paths;

use crate::world::{World, b64, closed, frames};

#[test]
fn register_conflict_returns_existing_account_and_names_the_key() {
    let mut w = World::new();
    let (sk, x) = w.fresh_keys();
    let r = w.register_with(&sk, x, "alice", "1.1.1.1");
    assert_eq!(r.status, 201);
    let first = r.body_json();
    // Same Ed25519 key, even without PoW: 409 with the account.
    let body = json!({"ed25519_public_key": b64(sk.verifying_key().as_bytes()), "x25519_public_key": b64(&[9; 32]), "nickname": "again"});
    let r = w.http(HttpRequest::new(Method::Post, paths::REGISTER).json(&body));
    assert_eq!(r.status, 409);
    let v = r.body_json();
    assert_eq!(v["uuid"], first["uuid"]);
    assert_eq!(v["alias_id"], first["alias_id"]);
    assert_eq!(v["error"], "ALREADY_REGISTERED");
    assert_eq!(v["key"], "ed25519");
    // Another Ed25519 key but the same X25519 key.
    let (sk2, _) = w.fresh_keys();
    let body = json!({"ed25519_public_key": b64(sk2.verifying_key().as_bytes()), "x25519_public_key": b64(&x), "nickname": "x"});
    let r = w.http(HttpRequest::new(Method::Post, paths::REGISTER).json(&body));
    assert_eq!(
        (r.status, r.body_json()["key"].clone()),
        (409, json!("x25519"))
    );
    let alias = first["alias_id"].as_str().unwrap();
    assert!(alias.len() == 9 && alias.starts_with('u'));
}

#[test]
fn pow_missing_wrong_reused_expired() {
    let mut w = World::with_config(Config::default()); // difficulty 4
    let (sk, x) = w.fresh_keys();
    let base = json!({"ed25519_public_key": b64(sk.verifying_key().as_bytes()), "x25519_public_key": b64(&x), "nickname": "n"});
    let reg = |w: &mut World, nonce: Option<&str>| {
        let mut b = base.clone();
        if let Some(n) = nonce {
            b["pow_nonce"] = json!(n);
        }
        w.http(
            HttpRequest::new(Method::Post, paths::REGISTER)
                .json(&b)
                .from_addr("2.2.2.2"),
        )
    };
    let r = reg(&mut w, None);
    assert_eq!(
        (r.status, r.error_code().unwrap().as_str()),
        (400, "POW_REQUIRED")
    );
    let r = reg(&mut w, Some("")); // Android sends "" when unsolved
    assert_eq!(r.error_code().unwrap(), "POW_REQUIRED");
    // GET works too (iOS); default difficulty 4 and expires_in.
    let c = w.http(HttpRequest::new(Method::Get, paths::POW_CHALLENGE).from_addr("2.2.2.2"));
    let v = c.body_json();
    assert_eq!(
        (v["difficulty"].as_u64(), v["expires_in"].as_u64()),
        (Some(4), Some(300))
    );
    let challenge = v["challenge_string"].as_str().unwrap().to_owned();
    let nonce = relay_core::pow::solve(&challenge, 4);
    let wrong = (0u64..)
        .map(|i| i.to_string())
        .find(|n| !relay_core::pow::verify(&challenge, n, 4))
        .unwrap();
    assert_eq!(
        reg(&mut w, Some(&wrong)).error_code().unwrap(),
        "POW_INVALID"
    );
    // Expired.
    w.advance(300_001);
    assert_eq!(
        reg(&mut w, Some(&nonce)).error_code().unwrap(),
        "POW_INVALID"
    );
    // Fresh, solved, then reused.
    let nonce = w.solve_pow("2.2.2.2");
    let r = w.register_with(&sk, x, "n", "2.2.2.2");
    assert_eq!(r.status, 201);
    // The nonce we solved before register_with consumed its own challenge; reuse fails.
    let (sk3, _) = w.fresh_keys();
    let b = json!({"ed25519_public_key": b64(sk3.verifying_key().as_bytes()), "x25519_public_key": b64(&[77; 32]), "nickname": "n", "pow_nonce": nonce});
    let first = w.http(
        HttpRequest::new(Method::Post, paths::REGISTER)
            .json(&b)
            .from_addr("2.2.2.2"),
    );
    assert_eq!(first.status, 201);
    let (sk4, _) = w.fresh_keys();
    let b = json!({"ed25519_public_key": b64(sk4.verifying_key().as_bytes()), "x25519_public_key": b64(&[78; 32]), "nickname": "n", "pow_nonce": nonce});
    let again = w.http(
        HttpRequest::new(Method::Post, paths::REGISTER)
            .json(&b)
            .from_addr("2.2.2.2"),
    );
    assert_eq!(again.error_code().unwrap(), "POW_INVALID");
}

#[test]
fn registration_rate_limit_per_address_per_hour() {
    let mut w = World::new();
    for i in 0..10 {
        let (sk, x) = w.fresh_keys();
        assert_eq!(
            w.register_with(&sk, x, &format!("n{i}"), "3.3.3.3").status,
            201
        );
    }
    let (sk, x) = w.fresh_keys();
    let r = w.register_with(&sk, x, "n", "3.3.3.3");
    assert_eq!(
        (r.status, r.error_code().unwrap().as_str()),
        (429, "RATE_LIMITED")
    );
    assert_eq!(w.register_with(&sk, x, "n", "4.4.4.4").status, 201);
    w.advance(3_600_000);
    let (sk, x) = w.fresh_keys();
    assert_eq!(w.register_with(&sk, x, "n", "3.3.3.3").status, 201);
}

#[test]
fn nickname_limits() {
    let mut w = World::new();
    for bad in ["", "   ", &"x".repeat(33), "a\u{0007}b"] {
        let (sk, x) = w.fresh_keys();
        let r = w.register_with(&sk, x, bad, "5.5.5.5");
        assert_eq!(
            (r.status, r.error_code().unwrap().as_str()),
            (400, "INVALID_FIELD"),
            "{bad:?}"
        );
    }
    let (sk, x) = w.fresh_keys();
    assert_eq!(
        w.register_with(&sk, x, &"é".repeat(32), "5.5.5.5").status,
        201
    );
}

#[test]
fn auth_challenge_single_use_expiry_and_bad_signature() {
    let mut w = World::new();
    let mut u = w.user("u");
    let c = w.post(paths::AUTH_CHALLENGE, json!({"user_uuid": u.uuid}), None);
    let v = c.body_json();
    assert!(v["expires_at"].as_str().unwrap().ends_with('Z'));
    let ch = v["challenge"].as_str().unwrap().to_owned();
    use ed25519_dalek::Signer as _;
    let good = b64(&u.sk.sign(ch.as_bytes()).to_bytes());
    let bad = b64(&u.sk.sign(b"other").to_bytes());
    let r = w.post(
        paths::AUTH_VERIFY,
        json!({"user_uuid": u.uuid, "challenge": ch, "signature": bad}),
        None,
    );
    assert_eq!(
        (r.status, r.error_code().unwrap().as_str()),
        (401, "SIGNATURE_INVALID")
    );
    // A failed attempt leaves the challenge to its account's key; the first login uses it up.
    let login = json!({"user_uuid": u.uuid, "challenge": ch, "signature": good});
    assert_eq!(w.post(paths::AUTH_VERIFY, login.clone(), None).status, 200);
    let r = w.post(paths::AUTH_VERIFY, login, None);
    assert_eq!(
        (r.status, r.error_code().unwrap().as_str()),
        (401, "CHALLENGE_INVALID")
    );
    // Expired.
    let c = w.post(paths::AUTH_CHALLENGE, json!({"user_uuid": u.uuid}), None);
    let ch = c.body_json()["challenge"].as_str().unwrap().to_owned();
    w.advance(120_000);
    let good = b64(&u.sk.sign(ch.as_bytes()).to_bytes());
    let r = w.post(
        paths::AUTH_VERIFY,
        json!({"user_uuid": u.uuid, "challenge": ch, "signature": good}),
        None,
    );
    assert_eq!(r.error_code().unwrap(), "CHALLENGE_INVALID");
    let r = w.login(&mut u);
    assert_eq!(r.body_json()["expires_in"], 86_400);
    let r = w.post(
        paths::AUTH_CHALLENGE,
        json!({"user_uuid": "00000000-0000-4000-8000-000000000000"}),
        None,
    );
    assert_eq!(r.status, 404);
}

#[test]
fn token_errors_have_distinct_codes() {
    let mut w = World::new();
    let mut u = w.user("u");
    let ok = w.get(paths::FRIENDS, Some(&u.token.clone()));
    assert_eq!((ok.status, ok.body.as_slice()), (200, b"[]".as_slice()));
    let code = |w: &mut World, auth: Option<&str>| {
        let mut req = HttpRequest::new(Method::Get, paths::FRIENDS);
        req.authorization = auth.map(str::to_owned);
        let r = w.http(req);
        assert_eq!(r.status, 401);
        r.error_code().unwrap()
    };
    assert_eq!(code(&mut w, None), "AUTH_REQUIRED");
    assert_eq!(code(&mut w, Some("Bearer not.a.jwt")), "TOKEN_INVALID");
    assert_eq!(code(&mut w, Some("Basic abc")), "TOKEN_INVALID");
    // Signed by another relay's key.
    let other_key = Config {
        jwt_signing_key: Some(relay_core::JwtSigningKey([0x99; 32])),
        ..crate::world::fast_config()
    };
    let other = World::with_seed(other_key, 99).user("u").token;
    assert_eq!(
        code(&mut w, Some(&format!("Bearer {other}"))),
        "TOKEN_SIGNATURE_INVALID"
    );
    let old = u.token.clone();
    w.login(&mut u);
    assert_eq!(
        code(&mut w, Some(&format!("Bearer {old}"))),
        "TOKEN_REVOKED"
    );
    w.advance(24 * 3_600_000);
    assert_eq!(
        code(&mut w, Some(&format!("Bearer {}", u.token))),
        "TOKEN_EXPIRED"
    );
}

#[test]
fn routing_errors_and_bodies() {
    let mut w = World::new();
    let u = w.user("u");
    let r = w.get("/api/v1/nothing", None);
    assert_eq!(
        (r.status, r.error_code().unwrap().as_str()),
        (404, "NOT_FOUND")
    );
    let r = w.http(HttpRequest::new(Method::Delete, paths::REGISTER));
    assert_eq!(
        (r.status, r.error_code().unwrap().as_str()),
        (405, "METHOD_NOT_ALLOWED")
    );
    let r = w.http(
        HttpRequest::new(Method::Post, paths::FRIEND_REQUEST)
            .bearer(&u.token)
            .body("{nope"),
    );
    assert_eq!(
        (r.status, r.error_code().unwrap().as_str()),
        (400, "INVALID_JSON")
    );
    let r = w.http(
        HttpRequest::new(Method::Post, paths::FRIEND_REQUEST)
            .bearer(&u.token)
            .body(vec![b' '; 40_000]),
    );
    assert_eq!(
        (r.status, r.error_code().unwrap().as_str()),
        (413, "BODY_TOO_LARGE")
    );
    // Empty POST bodies are accepted, unknown fields ignored.
    let r = w.http(HttpRequest::new(Method::Post, paths::POW_CHALLENGE));
    assert_eq!(r.status, 200);
    let r = w.post(paths::WS_TICKET, json!({"whatever": 1}), Some(&u.token));
    let t = r.body_json()["ticket"].as_str().unwrap().to_owned();
    // `t`, then base64url of expiry (8 bytes), nonce (16), the token's jti (32) and tag (16).
    assert!(
        t.len() == 97
            && t.starts_with('t')
            && t.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    );
    for r in [w.get("/api/v1/nothing", None), w.get(paths::FRIENDS, None)] {
        let v = r.body_json();
        assert!(v["error"].is_string() && v["message"].is_string());
    }
}

#[test]
fn contacts_flow_and_pushes() {
    let mut w = World::new();
    let mut a = w.user("alice");
    let mut b = w.user("bob");
    let c = w.user("carol");
    let cb = w.connect(&mut b);
    let ca = w.connect(&mut a);
    let r = w.post(
        paths::FRIEND_REQUEST,
        json!({"to_alias_id": a.alias}),
        Some(&a.token),
    );
    assert_eq!(
        (r.status, r.error_code().unwrap().as_str()),
        (400, "BAD_REQUEST")
    );
    let r = w.post(
        paths::FRIEND_REQUEST,
        json!({"to_alias_id": "u00000000"}),
        Some(&a.token),
    );
    assert_eq!(r.status, 404);
    let r = w.post(
        paths::FRIEND_REQUEST,
        json!({"to_alias_id": b.alias}),
        Some(&a.token),
    );
    assert_eq!(r.status, 200);
    let fid = r.body_json()["friendship_id"].as_u64().unwrap();
    let pushed = frames(&w.drain(), cb);
    assert!(matches!(&pushed[..], [ServerFrame::FriendRequest(f)] if f.from.as_str() == a.alias));
    let r = w.post(
        paths::FRIEND_REQUEST,
        json!({"to_alias_id": b.alias}),
        Some(&a.token),
    );
    assert_eq!(r.status, 409);
    assert!(String::from_utf8_lossy(&r.body).contains("already exists"));
    let r = w.post(
        paths::FRIEND_REQUEST,
        json!({"to_alias_id": a.alias}),
        Some(&b.token),
    );
    assert_eq!(r.status, 409);
    // Pending listing from both sides.
    let la = w.get(paths::FRIENDS, Some(&a.token)).body_json();
    assert_eq!(la[0]["status"], "pending");
    assert_eq!(la[0]["direction"], "sent");
    assert_eq!(la[0]["conversation_id"], "");
    assert!(la[0]["created_at"].as_str().unwrap().ends_with('Z'));
    let lb = w.get(paths::FRIENDS, Some(&b.token)).body_json();
    assert_eq!(
        (lb[0]["direction"].as_str(), lb[0]["alias_id"].as_str()),
        (Some("received"), Some(a.alias.as_str()))
    );
    // Only the addressee accepts; the third party sees 404.
    let r = w.http(
        HttpRequest::new(Method::Put, paths::with(paths::FRIEND_ACCEPT, fid)).bearer(&c.token),
    );
    assert_eq!(r.status, 404);
    let r = w.http(
        HttpRequest::new(Method::Put, paths::with(paths::FRIEND_ACCEPT, fid)).bearer(&a.token),
    );
    assert_eq!(r.status, 403);
    // iOS form.
    let r = w.post(
        paths::FRIEND_ACCEPT_BODY,
        json!({"friendship_id": fid}),
        Some(&b.token),
    );
    assert_eq!(r.status, 200);
    let conv = r.body_json()["conversation_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let pushed = frames(&w.drain(), ca);
    assert!(
        matches!(&pushed[..], [ServerFrame::FriendAccepted(f)] if f.conversation_id.as_str() == conv)
    );
    // Idempotent accept.
    let r = w.http(
        HttpRequest::new(Method::Put, paths::with(paths::FRIEND_ACCEPT, fid)).bearer(&b.token),
    );
    assert_eq!(r.body_json()["conversation_id"], conv.as_str());
    let la = w.get(paths::FRIENDS, Some(&a.token)).body_json();
    assert_eq!(
        (la[0]["status"].as_str(), la[0]["conversation_id"].as_str()),
        (Some("accepted"), Some(conv.as_str()))
    );
    assert_eq!(la[0]["x25519_public_key"], b64(&b.x25519));
    let active = w
        .get(paths::ACTIVE_CONVERSATIONS, Some(&a.token))
        .body_json();
    assert_eq!(active["conversations"][0]["conv_id"], conv.as_str());
    // Reject: no notification; rejecting an accepted one is 409.
    let r = w.post(
        paths::FRIEND_REQUEST,
        json!({"to_alias_id": c.alias}),
        Some(&b.token),
    );
    let fid2 = r.body_json()["friendship_id"].as_u64().unwrap();
    w.drain();
    let r = w.post(
        &paths::with(paths::FRIEND_REJECT, fid2),
        json!({}),
        Some(&c.token),
    );
    assert_eq!(r.status, 200);
    assert!(frames(&w.drain(), cb).is_empty());
    let r = w.post(
        &paths::with(paths::FRIEND_REJECT, fid),
        json!({}),
        Some(&b.token),
    );
    assert_eq!(r.status, 409);
    // After a rejection a new request is allowed.
    let r = w.post(
        paths::FRIEND_REQUEST,
        json!({"to_alias_id": c.alias}),
        Some(&b.token),
    );
    assert_eq!(r.status, 200);
    let r = w.post("/api/v1/friends/x/reject", json!({}), Some(&c.token));
    assert_eq!(r.status, 404);
}

#[test]
fn user_lookup_and_storage_estimate() {
    let mut w = World::new();
    let a = w.user("alice");
    let b = w.user("bob");
    let r = w.get(&paths::with(paths::USER, &b.alias), Some(&a.token));
    let v = r.body_json();
    assert_eq!(
        (v["alias_id"].as_str(), v["nickname"].as_str()),
        (Some(b.alias.as_str()), Some("bob"))
    );
    assert_eq!(
        v["ed25519_public_key"],
        b64(b.sk.verifying_key().as_bytes())
    );
    assert_eq!(w.get("/api/v1/users/u99999999", Some(&a.token)).status, 404);
    assert_eq!(
        w.get("/api/v1/users/NOT..valid", Some(&a.token)).status,
        404
    );
    let s = w.get(paths::STORAGE_ESTIMATE, Some(&a.token)).body_json();
    assert_eq!(
        (s["used_bytes"].as_u64(), s["message_count"].as_u64()),
        (Some(0), Some(0))
    );
}

#[test]
fn websocket_auth_variants_and_single_session() {
    let mut w = World::new();
    let mut u = w.user("u");
    // Missing / bad credentials refuse the upgrade with 401.
    let r = w.connect_query(String::new(), None).unwrap_err();
    assert_eq!(
        (r.status, r.error_code().unwrap().as_str()),
        (401, "AUTH_REQUIRED")
    );
    let r = w
        .connect_query(format!("user_uuid={}&ticket=nope", u.uuid), None)
        .unwrap_err();
    assert_eq!(r.error_code().unwrap(), "TICKET_INVALID");
    // Token in the query.
    let c1 = w
        .connect_query(format!("user_uuid={}&token={}", u.uuid, u.token), None)
        .unwrap();
    // iOS: uuid + Sec-WebSocket-Protocol bearer,<jwt>; echo "bearer". Replaces c1 (same token).
    let conn = relay_core::ConnId(99);
    let acc = w
        .relay
        .handle_connect(
            w.now,
            conn,
            &relay_core::WsConnect {
                query: format!("uuid={}", u.uuid),
                protocol: Some(format!("bearer,{}", u.token)),
            },
        )
        .unwrap();
    assert_eq!(acc.subprotocol, Some("bearer"));
    let outs = w.drain();
    let f = frames(&outs, c1);
    assert!(matches!(&f[..], [ServerFrame::Goaway(g)] if g.reason == "session_replaced"));
    assert!(closed(&outs, c1));
    assert_eq!(
        f[0].encode(),
        r#"{"type":"goaway","reason":"session_replaced","payload":{"reason":"session_replaced"}}"#
    );
    // A new login revokes the token; the socket using it gets GOAWAY new_device_login.
    w.login(&mut u);
    let outs = w.drain();
    assert!(
        matches!(&frames(&outs, conn)[..], [ServerFrame::Goaway(g)] if g.reason == "new_device_login")
    );
    assert!(closed(&outs, conn));
    // Ticket: single use, 30 s.
    let t = w
        .post(paths::WS_TICKET, json!({}), Some(&u.token))
        .body_json()["ticket"]
        .as_str()
        .unwrap()
        .to_owned();
    let q = format!("user_uuid={}&ticket={t}", u.uuid);
    assert!(w.connect_query(q.clone(), None).is_ok());
    assert_eq!(
        w.connect_query(q, None).unwrap_err().error_code().unwrap(),
        "TICKET_INVALID"
    );
    let t = w
        .post(paths::WS_TICKET, json!({}), Some(&u.token))
        .body_json()["ticket"]
        .as_str()
        .unwrap()
        .to_owned();
    w.advance(30_000);
    let r = w
        .connect_query(format!("user_uuid={}&ticket={t}", u.uuid), None)
        .unwrap_err();
    assert_eq!(r.error_code().unwrap(), "TICKET_INVALID");
    // Old token in the query: revoked.
    let mut other = w.user("o");
    let old = other.token.clone();
    w.login(&mut other);
    let r = w
        .connect_query(format!("user_uuid={}&token={old}", other.uuid), None)
        .unwrap_err();
    assert_eq!(r.error_code().unwrap(), "TOKEN_REVOKED");
    // Someone else's token.
    let r = w
        .connect_query(format!("user_uuid={}&token={}", u.uuid, other.token), None)
        .unwrap_err();
    assert_eq!(r.status, 401);
}

#[test]
fn idle_timeout_and_ping() {
    let mut w = World::new();
    let mut u = w.user("u");
    let c = w.connect(&mut u);
    w.advance(80_000);
    w.send(c, json!({"type": "ping"}));
    w.advance(80_000);
    assert!(w.relay.is_connected(c));
    let before = w.log.len();
    w.advance(10_000);
    assert!(!w.relay.is_connected(c));
    assert!(closed(&w.log[before..], c));
    assert!(w.relay.poll_timeout().is_none_or(|t| t > w.now));
}

/// F1 lists the caller's friendships only, oldest first, also after a restart (the per-user
/// index is rebuilt from the rows).
#[test]
fn a_friends_list_holds_the_callers_friendships_only_oldest_first() {
    let mut w = World::new();
    let a = w.user("a");
    let b = w.user("b");
    let c = w.user("c");
    let d = w.user("d");
    w.befriend(&b, &c);
    w.befriend(&a, &c);
    w.befriend(&d, &a);
    let list = |w: &mut World| -> Vec<(String, String)> {
        w.get(paths::FRIENDS, Some(&a.token))
            .body_json()
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                (
                    f["alias_id"].as_str().unwrap().to_owned(),
                    f["direction"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    let want = [
        (c.alias.clone(), "sent".to_owned()),
        (d.alias.clone(), "received".to_owned()),
    ];
    assert_eq!(list(&mut w), want);
    w.restart(Box::new(w.mem.clone()));
    assert_eq!(list(&mut w), want);
}
