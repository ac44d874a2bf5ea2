//! The short-lived credentials at their edges: proof-of-work challenges (several per address,
//! the oldest evicted past eight, each usable once, until the instant it expires), auth
//! challenges and WebSocket tickets (usable until the instant they expire, even before the
//! relay's timer has swept them), and the lifetimes the relay announces.

use relay_core::store::{Store as _, Table};
use relay_core::{HttpRequest, HttpResponse, Method};
use serde_json::json;
use wire::http::paths;

use crate::world::{World, b64};

/// A fresh proof-of-work challenge for `addr` (difficulty 1 in the test world).
fn challenge(w: &mut World, addr: &str) -> String {
    let r = w.http(HttpRequest::new(Method::Post, paths::POW_CHALLENGE).from_addr(addr));
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    r.body_json()["challenge_string"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Registers fresh keys from `addr` with `nonce`.
fn register(w: &mut World, addr: &str, nonce: &str) -> HttpResponse {
    let (sk, x) = w.fresh_keys();
    let body = json!({
        "ed25519_public_key": b64(sk.verifying_key().as_bytes()),
        "x25519_public_key": b64(&x),
        "nickname": "n",
        "pow_nonce": nonce,
    });
    w.http(
        HttpRequest::new(Method::Post, paths::REGISTER)
            .json(&body)
            .from_addr(addr),
    )
}

/// A nonce solving `challenge` and none of `others` (so a registration can only have used
/// `challenge`).
fn nonce_for(challenge: &str, others: &[&str]) -> String {
    (0u64..)
        .map(|i| i.to_string())
        .find(|n| {
            relay_core::pow::verify(challenge, n, 1)
                && others.iter().all(|o| !relay_core::pow::verify(o, n, 1))
        })
        .unwrap()
}

/// One address may hold several challenges; solving one leaves the others usable.
#[test]
fn an_address_s_other_challenges_survive_one_being_solved() {
    let mut w = World::new();
    let addr = "5.5.5.5";
    let first = challenge(&mut w, addr);
    let second = challenge(&mut w, addr);
    let r = register(&mut w, addr, &nonce_for(&first, &[&second]));
    assert_eq!(r.status, 201, "{:?}", r.body_json());
    let r = register(&mut w, addr, &nonce_for(&second, &[&first]));
    assert_eq!(r.status, 201, "{:?}", r.body_json());
}

/// Eight challenges per address are kept; a ninth evicts the oldest only.
#[test]
fn a_ninth_challenge_evicts_only_the_oldest() {
    let mut w = World::new();
    let addr = "5.5.5.6";
    let t0 = w.now;
    let all: Vec<String> = (0..9)
        .map(|_| {
            w.now = w.now.plus_ms(1);
            challenge(&mut w, addr)
        })
        .collect();
    // The evicted one is forgotten: the next expiry is the second one's.
    assert_eq!(w.relay.poll_timeout(), Some(t0.plus_ms(2 + 300_000)));
    let others = |i: usize| -> Vec<&str> {
        all.iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, c)| c.as_str())
            .collect()
    };
    let r = register(&mut w, addr, &nonce_for(&all[0], &others(0)));
    assert_eq!(r.error_code().unwrap(), "POW_INVALID");
    let r = register(&mut w, addr, &nonce_for(&all[1], &others(1)));
    assert_eq!(r.status, 201, "{:?}", r.body_json());
    let r = register(&mut w, addr, &nonce_for(&all[8], &others(8)));
    assert_eq!(r.status, 201, "{:?}", r.body_json());
}

/// Challenges of many addresses are held at once (the relay-wide table keeps up to 100,000).
#[test]
fn challenges_of_many_addresses_are_held_at_once() {
    let mut w = World::new();
    let addrs: Vec<String> = (0..5).map(|i| format!("6.6.6.{i}")).collect();
    let all: Vec<String> = addrs.iter().map(|a| challenge(&mut w, a)).collect();
    for (addr, c) in addrs.iter().zip(&all) {
        let r = register(&mut w, addr, &relay_core::pow::solve(c, 1));
        assert_eq!(r.status, 201, "{addr}: {:?}", r.body_json());
    }
}

/// The relay's timer sweeps expired challenges only: an address's younger challenge survives
/// the sweep of its older one.
#[test]
fn sweeping_an_expired_challenge_keeps_the_address_s_live_ones() {
    let mut w = World::new();
    let addr = "5.5.5.7";
    let t0 = w.now;
    let old = challenge(&mut w, addr);
    w.advance(200_000);
    let young = challenge(&mut w, addr);
    // The old one's expiry: the relay asks to be woken then, and sweeps it.
    assert_eq!(w.relay.poll_timeout(), Some(t0.plus_ms(300_000)));
    w.advance(100_000);
    // Swept at that very instant: the young one's expiry is next.
    assert_eq!(w.relay.poll_timeout(), Some(t0.plus_ms(500_000)));
    let r = register(&mut w, addr, &nonce_for(&old, &[&young]));
    assert_eq!(r.error_code().unwrap(), "POW_INVALID");
    let r = register(&mut w, addr, &nonce_for(&young, &[&old]));
    assert_eq!(r.status, 201, "{:?}", r.body_json());
}

/// A challenge is valid until the instant it expires, even when the relay's timer has not
/// run yet; a nonce of `MAX_POW_NONCE_BYTES` is accepted, one byte more is not.
#[test]
fn a_pow_challenge_expires_at_its_instant_and_nonces_are_bounded() {
    let mut w = World::new();
    let addr = "5.5.5.8";
    let c = challenge(&mut w, addr);
    w.now = w.now.plus_ms(300_000);
    let r = register(&mut w, addr, &relay_core::pow::solve(&c, 1));
    assert_eq!(r.error_code().unwrap(), "POW_INVALID");
    let c = challenge(&mut w, addr);
    w.now = w.now.plus_ms(299_999);
    let r = register(&mut w, addr, &relay_core::pow::solve(&c, 1));
    assert_eq!(r.status, 201, "{:?}", r.body_json());
    // Nonces of 64 and 65 bytes (zero-padded decimals solving the challenge).
    let max = relay_core::limits::MAX_POW_NONCE_BYTES;
    let padded = |c: &str, len: usize| {
        (0u64..)
            .map(|i| format!("{i:0>len$}"))
            .find(|n| relay_core::pow::verify(c, n, 1))
            .unwrap()
    };
    let c = challenge(&mut w, addr);
    let r = register(&mut w, addr, &padded(&c, max + 1));
    assert_eq!(
        (
            r.error_code().unwrap().as_str(),
            r.body_json()["message"].as_str()
        ),
        ("POW_INVALID", Some("pow_nonce is too long"))
    );
    let r = register(&mut w, addr, &padded(&c, max));
    assert_eq!(r.status, 201, "{:?}", r.body_json());
}

/// An auth challenge and a ticket are refused at the instant they expire although no timer
/// has swept them, and accepted one millisecond before.
#[test]
fn auth_challenges_and_tickets_expire_at_their_instant() {
    use ed25519_dalek::Signer as _;
    let mut w = World::new();
    let mut u = w.user("u");
    let verify = |w: &mut World, u: &crate::world::User, at: u64| {
        let c = w.post(paths::AUTH_CHALLENGE, json!({"user_uuid": u.uuid}), None);
        let ch = c.body_json()["challenge"].as_str().unwrap().to_owned();
        w.now = w.now.plus_ms(at);
        let sig = b64(&u.sk.sign(ch.as_bytes()).to_bytes());
        w.post(
            paths::AUTH_VERIFY,
            json!({"user_uuid": u.uuid, "challenge": ch, "signature": sig}),
            None,
        )
    };
    assert_eq!(
        verify(&mut w, &u, 120_000).error_code().unwrap(),
        "CHALLENGE_INVALID"
    );
    let r = verify(&mut w, &u, 119_999);
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    u.token = r.body_json()["token"].as_str().unwrap().to_owned();
    let ticket = |w: &mut World, u: &crate::world::User| {
        let r = w.post(paths::WS_TICKET, json!({}), Some(&u.token));
        assert_eq!(r.body_json()["expires_in"], 30);
        r.body_json()["ticket"].as_str().unwrap().to_owned()
    };
    let t = ticket(&mut w, &u);
    w.now = w.now.plus_ms(30_000);
    let r = w
        .connect_query(format!("user_uuid={}&ticket={t}", u.uuid), None)
        .unwrap_err();
    assert_eq!(r.error_code().unwrap(), "TICKET_INVALID");
    let t = ticket(&mut w, &u);
    w.now = w.now.plus_ms(29_999);
    assert!(
        w.connect_query(format!("user_uuid={}&ticket={t}", u.uuid), None)
            .is_ok()
    );
}

/// A solved challenge is forgotten at once: the relay no longer asks to be woken for it.
#[test]
fn a_solved_challenge_leaves_no_timer() {
    let mut w = World::new();
    let c = challenge(&mut w, "5.5.5.9");
    assert!(w.relay.poll_timeout().is_some());
    let r = register(&mut w, "5.5.5.9", &relay_core::pow::solve(&c, 1));
    assert_eq!(r.status, 201, "{:?}", r.body_json());
    assert_eq!(w.relay.poll_timeout(), None);
}

/// The `Authorization` header: the scheme is `Bearer` in any case, and only `Bearer`; an
/// empty or blank header is a missing token, not a malformed one.
#[test]
fn the_authorization_scheme_is_bearer_in_any_case() {
    let mut w = World::new();
    let u = w.user("u");
    let code = |w: &mut World, auth: &str| {
        let mut req = HttpRequest::new(Method::Get, paths::FRIENDS);
        req.authorization = Some(auth.to_owned());
        let r = w.http(req);
        (r.status, r.error_code())
    };
    for scheme in ["Bearer", "bearer", "BEARER"] {
        assert_eq!(
            code(&mut w, &format!("{scheme} {}", u.token)),
            (200, None),
            "{scheme}"
        );
    }
    for scheme in ["Token", "Basic", "JWT"] {
        assert_eq!(
            code(&mut w, &format!("{scheme} {}", u.token)),
            (401, Some("TOKEN_INVALID".into())),
            "{scheme}"
        );
    }
    for blank in ["", "   "] {
        assert_eq!(
            code(&mut w, blank),
            (401, Some("AUTH_REQUIRED".into())),
            "{blank:?}"
        );
    }
}

/// A ticket the relay issued and an auth challenge, both for `u`.
fn ticket_of(w: &mut World, u: &crate::world::User) -> String {
    let r = w.post(paths::WS_TICKET, json!({}), Some(&u.token));
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    r.body_json()["ticket"].as_str().unwrap().to_owned()
}

/// `u`'s login answering `challenge` (a fresh one when `None`); the signed body, to replay.
fn verify_body(
    w: &mut World,
    u: &crate::world::User,
    challenge: Option<String>,
) -> serde_json::Value {
    use ed25519_dalek::Signer as _;
    let ch = challenge.unwrap_or_else(|| {
        let c = w.post(paths::AUTH_CHALLENGE, json!({"user_uuid": u.uuid}), None);
        c.body_json()["challenge"].as_str().unwrap().to_owned()
    });
    let sig = b64(&u.sk.sign(ch.as_bytes()).to_bytes());
    json!({"user_uuid": u.uuid, "challenge": ch, "signature": sig})
}

fn upgrade(w: &mut World, u: &crate::world::User, ticket: &str) -> Result<(), String> {
    w.connect_query(format!("user_uuid={}&ticket={ticket}", u.uuid), None)
        .map(|_| ())
        .map_err(|r| r.error_code().unwrap_or_default())
}

/// Tickets and auth challenges carry what checks them: an unused one issued before a restart
/// is accepted after it, and a used one stays used (its mark was committed with its use).
#[test]
fn a_restart_keeps_unused_credentials_valid_and_used_ones_spent() {
    let mut w = World::new();
    let mut u = w.user("u");
    let used_login = verify_body(&mut w, &u, None);
    let r = w.post(paths::AUTH_VERIFY, used_login.clone(), None);
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    u.token = r.body_json()["token"].as_str().unwrap().to_owned();
    let used_ticket = ticket_of(&mut w, &u);
    let unused_ticket = ticket_of(&mut w, &u);
    assert_eq!(upgrade(&mut w, &u, &used_ticket), Ok(()));
    let c = w.post(paths::AUTH_CHALLENGE, json!({"user_uuid": u.uuid}), None);
    let unused_challenge = c.body_json()["challenge"].as_str().unwrap().to_owned();
    let spent = w.mem.clone().load().unwrap()[&Table::Spent].len();
    assert_eq!(
        spent, 3,
        "one row per used credential (the two logins, the ticket), committed with its use"
    );

    w.restart(Box::new(w.mem.clone()));
    assert_eq!(
        upgrade(&mut w, &u, &used_ticket),
        Err("TICKET_INVALID".into())
    );
    assert_eq!(upgrade(&mut w, &u, &unused_ticket), Ok(()));
    assert_eq!(
        upgrade(&mut w, &u, &unused_ticket),
        Err("TICKET_INVALID".into())
    );
    let r = w.post(paths::AUTH_VERIFY, used_login, None);
    assert_eq!(
        (r.status, r.error_code().unwrap().as_str()),
        (401, "CHALLENGE_INVALID")
    );
    let body = verify_body(&mut w, &u, Some(unused_challenge));
    assert_eq!(w.post(paths::AUTH_VERIFY, body.clone(), None).status, 200);
    assert_eq!(
        w.post(paths::AUTH_VERIFY, body, None).error_code().unwrap(),
        "CHALLENGE_INVALID"
    );
}

/// A used credential's row goes when the credential expires (nothing could present it any
/// more), also when the relay restarted in between; not a millisecond before.
#[test]
fn spent_rows_last_exactly_as_long_as_their_credentials() {
    let mut w = World::new();
    let mut u = w.user("u");
    w.connect(&mut u);
    let rows = |w: &World| {
        w.mem
            .clone()
            .load()
            .unwrap()
            .get(&Table::Spent)
            .map_or(0, std::collections::BTreeMap::len)
    };
    // The user's login (a challenge, 120 s) and the ticket (30 s).
    assert_eq!(rows(&w), 2);
    w.advance(29_999);
    assert_eq!(rows(&w), 2);
    w.advance(1);
    assert_eq!(rows(&w), 1, "the ticket's row goes at its expiry");
    w.restart(Box::new(w.mem.clone()));
    w.advance(89_999);
    assert_eq!(rows(&w), 1);
    w.advance(1);
    assert_eq!(
        rows(&w),
        0,
        "the challenge's row goes at its expiry, after a restart too"
    );
    assert_eq!(
        w.relay.poll_timeout().is_some(),
        w.relay.is_connected(u.conn.unwrap())
    );
}

/// A credential opens only for the account, kind and relay key it was sealed for, and not
/// with any byte changed.
#[test]
fn a_credential_is_bound_to_its_account_kind_and_key() {
    let mut w = World::new();
    let u = w.user("u");
    let v = w.user("v");
    let t = ticket_of(&mut w, &u);
    assert_eq!(upgrade(&mut w, &v, &t), Err("TICKET_INVALID".into()));
    let mut forged = t.clone().into_bytes();
    let last = forged.len() - 1;
    forged[last] = if forged[last] == b'A' { b'B' } else { b'A' };
    let forged = String::from_utf8(forged).unwrap();
    assert_eq!(upgrade(&mut w, &u, &forged), Err("TICKET_INVALID".into()));
    // A challenge is not a ticket, nor the other way round.
    let c = w.post(paths::AUTH_CHALLENGE, json!({"user_uuid": u.uuid}), None);
    let ch = c.body_json()["challenge"].as_str().unwrap().to_owned();
    assert_eq!(upgrade(&mut w, &u, &ch), Err("TICKET_INVALID".into()));
    let body = verify_body(&mut w, &u, Some(t.clone()));
    assert_eq!(
        w.post(paths::AUTH_VERIFY, body, None).error_code().unwrap(),
        "CHALLENGE_INVALID"
    );
    // Another relay key (another deployment) opens none of them.
    let mut other = World::with_config(relay_core::Config {
        jwt_signing_key: Some(relay_core::JwtSigningKey([0x77; 32])),
        ..crate::world::fast_config()
    });
    let mut u2 = other.user("u");
    u2.uuid.clone_from(&u.uuid);
    let body = verify_body(&mut other, &u2, Some(ch));
    assert_eq!(
        other
            .post(paths::AUTH_VERIFY, body, None)
            .error_code()
            .unwrap(),
        "CHALLENGE_INVALID"
    );
    assert_eq!(upgrade(&mut w, &u, &t), Ok(()), "the original still opens");
}

/// When the relay remembers as many used credentials of an account's as it may, that
/// account's login or ticket upgrade gets 429 and uses nothing up; it goes through once one
/// has expired. Another account is never refused for it.
#[test]
fn a_full_spent_set_refuses_rather_than_forgets() {
    let mut w = World::with_config(relay_core::Config {
        max_spent_credentials_per_account: 2,
        ..crate::world::fast_config()
    });
    let mut u = w.user("u");
    let v = w.user("v");
    let t = ticket_of(&mut w, &u);
    assert_eq!(upgrade(&mut w, &u, &t), Ok(()));
    // Full: the login's challenge and the ticket.
    let t2 = ticket_of(&mut w, &u);
    assert_eq!(upgrade(&mut w, &u, &t2), Err("RATE_LIMITED".into()));
    let body = verify_body(&mut w, &u, None);
    let r = w.post(paths::AUTH_VERIFY, body.clone(), None);
    assert_eq!(
        (r.status, r.error_code().unwrap().as_str()),
        (429, "RATE_LIMITED")
    );
    // Another account (whose login spent one) still upgrades, then is full in turn.
    let tv = ticket_of(&mut w, &v);
    assert_eq!(upgrade(&mut w, &v, &tv), Ok(()), "u's full set refuses v");
    let tv2 = ticket_of(&mut w, &v);
    assert_eq!(upgrade(&mut w, &v, &tv2), Err("RATE_LIMITED".into()));
    w.advance(30_000);
    assert_eq!(
        upgrade(&mut w, &u, &t),
        Err("TICKET_INVALID".into()),
        "expired"
    );
    let r = w.post(paths::AUTH_VERIFY, body, None);
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    u.token = r.body_json()["token"].as_str().unwrap().to_owned();
    let t3 = ticket_of(&mut w, &u);
    assert_eq!(upgrade(&mut w, &u, &t3), Err("RATE_LIMITED".into()));
    // The first login's challenge expires 120 s after it was issued.
    w.advance(90_000);
    let t4 = ticket_of(&mut w, &u);
    assert_eq!(upgrade(&mut w, &u, &t4), Ok(()));
}
