//! Issue 17 D3 and D8: the JWT signing key is never in the store; registration keys must be
//! valid, large-order points; a `msg` payload must be base64; every 429 says when to retry.

use base64::Engine as _;
use relay_core::store::{MemoryStore, Mutation, Store, Table};
use relay_core::token::TokenKeys;
use relay_core::{Config, JwtSigningKey, Relay};
use serde_json::json;
use wire::http::paths;

use crate::world::{T0, World, b64, errors, fast_config, frames};

/// D3: with a configured key, nothing the store holds contains it.
#[test]
fn the_store_never_holds_the_jwt_signing_key() {
    let key = [0x42u8; 32];
    let mut w = World::with_config(Config {
        jwt_signing_key: Some(JwtSigningKey(key)),
        ..fast_config()
    });
    let u = w.user("u");
    assert!(!u.token.is_empty());
    let mut store = w.mem.clone();
    let snapshot = store.load().unwrap();
    let encodings = [
        b64(&key),
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key),
        key.iter().map(|b| format!("{b:02x}")).collect::<String>(),
    ];
    for (table, rows) in &snapshot {
        for (k, v) in rows {
            assert!(
                !v.windows(32).any(|win| win == key),
                "{table:?}/{k} holds the raw key"
            );
            let text = String::from_utf8_lossy(v);
            for e in &encodings {
                assert!(!text.contains(e.as_str()), "{table:?}/{k} holds the key");
            }
        }
    }
    // Tokens are signed with exactly that key.
    let claims = TokenKeys::from_seed(key).verify(&u.token, T0 + 1).unwrap();
    assert_eq!(claims.sub, u.uuid);
}

/// D3: a store written by an older relay keeps its key in `meta/jwt_signing_key`: the shell
/// reads it (to write its key file) and the next relay deletes the row.
#[test]
fn a_legacy_key_row_is_read_once_then_deleted() {
    let mut store = MemoryStore::new();
    let legacy = [9u8; 32];
    let value = serde_json::to_vec(&b64(&legacy)).unwrap();
    store
        .commit(
            &vec![Mutation::Put {
                table: Table::Meta,
                key: "jwt_signing_key".into(),
                value,
            }]
            .into(),
        )
        .unwrap();
    let found = relay_core::legacy_jwt_signing_key(&mut store).unwrap();
    assert_eq!(found, Some(JwtSigningKey(legacy)));
    let config = Config {
        jwt_signing_key: found,
        ..fast_config()
    };
    let _relay = Relay::new(config, Box::new(store.clone()), 1).unwrap();
    assert_eq!(
        relay_core::legacy_jwt_signing_key(&mut store).unwrap(),
        None
    );
    let meta = store.load().unwrap();
    assert!(
        meta.get(&Table::Meta)
            .is_none_or(|rows| !rows.contains_key("jwt_signing_key"))
    );
}

/// Without a configured key the key is derived from the seed: the same seed keeps tokens
/// valid across a restart, another seed does not accept them.
#[test]
fn without_a_key_the_seed_decides() {
    let mut w = World::with_seed(fast_config(), 7);
    w.config.jwt_signing_key = None;
    let store = w.mem.clone();
    w.relay = Relay::new(w.config.clone(), Box::new(store.clone()), 7).unwrap();
    let u = w.user("u");
    w.relay = Relay::new(w.config.clone(), Box::new(store.clone()), 7).unwrap();
    assert_eq!(w.get(paths::FRIENDS, Some(&u.token)).status, 200);
    w.relay = Relay::new(w.config.clone(), Box::new(store), 8).unwrap();
    let r = w.get(paths::FRIENDS, Some(&u.token));
    assert_eq!(
        (r.status, r.error_code().as_deref()),
        (401, Some("TOKEN_SIGNATURE_INVALID"))
    );
}

fn register_raw(w: &mut World, ed: [u8; 32], x: [u8; 32], addr: &str) -> relay_core::HttpResponse {
    let nonce = w.solve_pow(addr);
    let body = json!({
        "ed25519_public_key": b64(&ed),
        "x25519_public_key": b64(&x),
        "nickname": "k",
        "pow_nonce": nonce,
    });
    w.http(
        relay_core::HttpRequest::new(relay_core::Method::Post, paths::REGISTER)
            .json(&body)
            .from_addr(addr),
    )
}

/// D8: keys that are not valid points, or of small order, are refused with 400 INVALID_KEY.
#[test]
fn registration_refuses_invalid_and_low_order_keys() {
    let mut w = World::new();
    let good_ed = ed25519_dalek::SigningKey::from_bytes(&[3; 32])
        .verifying_key()
        .to_bytes();
    let good_x =
        x25519_dalek::PublicKey::from(&x25519_dalek::StaticSecret::from([4; 32])).to_bytes();
    // The Ed25519 identity (small order) and a y-coordinate that is not on the curve.
    let mut identity = [0u8; 32];
    identity[0] = 1;
    let mut not_on_curve = [0u8; 32];
    not_on_curve[0] = 2;
    assert!(ed25519_dalek::VerifyingKey::from_bytes(&not_on_curve).is_err());
    let mut x_one = [0u8; 32];
    x_one[0] = 1;
    let mut p_minus_1 = [0xffu8; 32];
    p_minus_1[0] = 0xec;
    p_minus_1[31] = 0x7f;
    let order8 = [
        0xe0, 0xeb, 0x7a, 0x7c, 0x3b, 0x41, 0xb8, 0xae, 0x16, 0x56, 0xe3, 0xfa, 0xf1, 0x9f, 0xc4,
        0x6a, 0xda, 0x09, 0x8d, 0xeb, 0x9c, 0x32, 0xb1, 0xfd, 0x86, 0x62, 0x05, 0x16, 0x5f, 0x49,
        0xb8, 0x00,
    ];
    let mut order8_high_bit = order8;
    order8_high_bit[31] |= 0x80;
    let cases = [
        (identity, good_x, "ed25519 identity"),
        (not_on_curve, good_x, "ed25519 not a point"),
        (good_ed, [0; 32], "all-zero x25519"),
        (good_ed, x_one, "x25519 u = 1"),
        (good_ed, p_minus_1, "x25519 u = p - 1"),
        (good_ed, order8, "x25519 order 8"),
        (good_ed, order8_high_bit, "x25519 order 8, high bit set"),
    ];
    for (i, (ed, x, what)) in cases.into_iter().enumerate() {
        let r = register_raw(&mut w, ed, x, &format!("10.1.0.{i}"));
        assert_eq!(
            (r.status, r.error_code().as_deref()),
            (400, Some("INVALID_KEY")),
            "{what}"
        );
        // Those X25519 points really are degenerate: no contributory shared secret.
        if what.starts_with("x25519") {
            let shared = x25519_dalek::StaticSecret::from([5; 32])
                .diffie_hellman(&x25519_dalek::PublicKey::from(x));
            assert!(!shared.was_contributory(), "{what}");
        }
    }
    let r = register_raw(&mut w, good_ed, good_x, "10.1.1.1");
    assert_eq!(r.status, 201, "{:?}", r.body_json());
}

/// D8: a `msg` whose payload is not base64 gets an error frame and no ack; real payloads pass.
#[test]
fn a_non_base64_payload_is_refused() {
    let mut w = World::new();
    let (a, b, conv) = crate::world::both_online(&mut w);
    let (ca, cb) = (a.conn.unwrap(), b.conn.unwrap());
    for (i, bad) in [
        "hello world",
        "a",
        "abc=d",
        "ab$=",
        "YQ===",
        "YWJj=",
        "Y Q==",
        // Three characters take one `=` at most.
        "YWI==",
        // The bytes just past each range of the alphabet: `[` after `Z`, `{` after `z`,
        // `:` after `9`, and `*`, `,`, `.` and `0` - 1 around `+` and `/`.
        "YWJ[",
        "YWJ{",
        "YWJ:",
        "YWJ*",
        "YWJ,",
        "YWJ.",
        "YWJ@",
        "YWJ`",
        // In a whole 32-byte block rather than the padded remainder.
        "YWJjYWJjYWJjYWJjYWJjYWJjYWJjYW{jYWJj",
        "YWJjYWJjYWJjYWJjYWJjYWJjYWJjYW:jYWJj",
    ]
    .into_iter()
    .enumerate()
    {
        let outs = w.send(
            ca,
            json!({"type":"msg","id":format!("bad{i}"),"to":b.alias,"conv_id":conv,"crypto_v":1,"payload":bad}),
        );
        let f = frames(&outs, ca);
        assert_eq!(errors(&f), ["BAD_FRAME"], "{bad}");
        assert!(crate::world::acks(&f).is_empty(), "{bad}");
        assert!(frames(&outs, cb).is_empty(), "{bad} was forwarded");
    }
    // The reference clients' payload (PROTOCOL.md §4.4 vector) and unpadded base64 pass.
    for (i, good) in [
        "AAECAwQFBgcICQoL0jHajt/mT28D3zDaW8b+jHAC9lOL",
        "YQ",
        "YWI",
        "YWI=",
        "YWJj",
        "",
    ]
    .into_iter()
    .enumerate()
    {
        let outs = w.send(
            ca,
            json!({"type":"msg","id":format!("good{i}"),"to":b.alias,"conv_id":conv,"crypto_v":1,"payload":good}),
        );
        assert_eq!(crate::world::acks(&frames(&outs, ca)).len(), 1, "{good:?}");
    }
}

/// D8: every 429 carries `Retry-After`, the seconds until the limiter frees up.
#[test]
fn every_429_says_when_to_retry() {
    let mut w = World::new();
    let mut last = None;
    for _ in 0..=relay_core::limits::POW_CHALLENGES_PER_MIN_PER_ADDR {
        let r = w.http(
            relay_core::HttpRequest::new(relay_core::Method::Post, paths::POW_CHALLENGE)
                .from_addr("10.9.9.9"),
        );
        if r.status == 429 {
            last = Some(r);
            break;
        }
        assert_eq!(r.retry_after_s, None);
        w.now = w.now.plus_ms(100);
    }
    let r = last.expect("a 429");
    let s = r.retry_after_s.expect("Retry-After");
    assert!((54..=60).contains(&s), "{s}");
    // Media inits (per user per minute) and auth challenges too.
    let u = w.user("u");
    let mut got = None;
    for _ in 0..=relay_core::limits::MEDIA_UPLOADS_PER_MIN_PER_USER {
        let r = w.post(paths::MEDIA_INIT, json!({}), Some(&u.token));
        if r.status == 429 {
            got = Some(r.retry_after_s);
            break;
        }
    }
    assert!(matches!(got, Some(Some(1..=60))), "{got:?}");
    for _ in 0..=relay_core::limits::AUTH_CHALLENGES_PER_MIN_PER_USER {
        let r = w.post(paths::AUTH_CHALLENGE, json!({"user_uuid": u.uuid}), None);
        if r.status == 429 {
            assert!(r.retry_after_s.is_some_and(|s| (1..=60).contains(&s)));
            return;
        }
    }
    panic!("no 429 for auth challenges");
}
