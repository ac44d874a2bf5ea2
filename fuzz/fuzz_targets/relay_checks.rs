//! The properties of the relay's fuzz targets beyond frames, shared (via `#[path]`) by the
//! libFuzzer targets in this directory and by the stable corpus replay
//! `relay-core/tests/fuzz_corpus.rs`.
//!
//! | target | input | property |
//! |---|---|---|
//! | `http_bodies` | a route selector byte, then a body | every route with that body answers (no panic), with a status below 500 (or 503 `TURN_UNAVAILABLE`) and the error body's stable code; every request body type that decodes re-encodes and decodes to an equal value |
//! | `webhook` | a mode byte, then a body (and, in mode 1, a signature line) | the payment webhook never panics or answers 5xx; an unsigned or wrongly signed body is 401 whatever it holds |
//! | `push_subscription` | an endpoint URL, then resolved addresses | parsing never panics; an accepted literal address is public; an accepted host re-parses to itself; the relay never stores an endpoint with a non-public resolved address |
//! | `tokens` | a bearer token / WebSocket query | JWT verification, REST authentication and the WebSocket upgrade never panic and never accept anything but the real token or ticket |
//! | `store_rows` | rows of any table | loading a store never panics (a corrupt row is an error), and a relay that loads serves requests and timers |

use std::net::IpAddr;

use hmac::{KeyInit as _, Mac as _};
use relay_core::store::{Batch, MemoryStore, Store as _, Table};
use relay_core::{Config, HttpRequest, HttpResponse, Method, Relay, WsConnect};
use serde_json::json;
use wire::UnixMs;

/// The relay's clock in every check.
const NOW: UnixMs = UnixMs(1_800_000_000_000);
/// The webhook secret of the checks' relay.
const SECRET: &[u8] = b"fuzz-webhook-secret";

fn config() -> Config {
    Config {
        pow_difficulty: 0,
        jwt_signing_key: Some(relay_core::JwtSigningKey([7; 32])),
        payment_webhook_secret: relay_core::config::WebhookSecret(SECRET.to_vec()),
        ..Config::default()
    }
}

/// A relay with one registered, logged-in account; returns the relay, its uuid and token.
fn relay_with_account() -> (Relay, String, String) {
    use ed25519_dalek::Signer as _;
    let mut relay = Relay::new(config(), Box::new(MemoryStore::new()), 1).expect("a relay");
    let sk = ed25519_dalek::SigningKey::from_bytes(&[5; 32]);
    let b64 = |b: &[u8]| {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(b)
    };
    let reg = relay.handle_http(
        NOW,
        &HttpRequest::new(Method::Post, "/api/v1/register").json(&json!({
            "ed25519_public_key": b64(sk.verifying_key().as_bytes()),
            "x25519_public_key": b64(&[9; 32]),
            "nickname": "fuzz",
        })),
    );
    assert_eq!(reg.status, 201, "{:?}", reg.body_json());
    let uuid = reg.body_json()["uuid"].as_str().expect("uuid").to_owned();
    let ch = relay.handle_http(
        NOW,
        &HttpRequest::new(Method::Post, "/api/v1/auth/challenge").json(&json!({"user_uuid": uuid})),
    );
    let challenge = ch.body_json()["challenge"]
        .as_str()
        .expect("challenge")
        .to_owned();
    let sig = sk.sign(challenge.as_bytes());
    let v = relay.handle_http(
        NOW,
        &HttpRequest::new(Method::Post, "/api/v1/auth/verify").json(&json!({
            "user_uuid": uuid, "challenge": challenge, "signature": b64(&sig.to_bytes())})),
    );
    let token = v.body_json()["token"].as_str().expect("token").to_owned();
    while relay.poll_output().is_some() {}
    (relay, uuid, token)
}

/// An answer the relay may give to input it did not like: below 500 (or a 503 that says the
/// feature is not configured), and an error body with a stable code and a message.
fn well_formed(what: &str, r: &HttpResponse) {
    assert!(
        r.status < 500
            || (r.status == 503 && r.error_code().as_deref() == Some("TURN_UNAVAILABLE")),
        "{what}: {} {:?}",
        r.status,
        r.body_json()
    );
    if r.status >= 400 {
        let body = r.body_json();
        let code = body["error"].as_str().unwrap_or_default();
        assert!(
            !code.is_empty() && code.bytes().all(|b| b.is_ascii_uppercase() || b == b'_'),
            "{what}: code {code:?}"
        );
        assert!(
            body["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{what}: {body}"
        );
    }
}

/// Every route that reads a body (or a query), with a path the relay knows.
const ROUTES: &[(Method, &str)] = &[
    (Method::Post, "/api/v1/pow/challenge"),
    (Method::Post, "/api/v1/register"),
    (Method::Post, "/api/v1/auth/challenge"),
    (Method::Post, "/api/v1/auth/verify"),
    (Method::Post, "/api/v1/ws/ticket"),
    (Method::Post, "/api/v1/friends/request"),
    (Method::Post, "/api/v1/friends/accept"),
    (Method::Put, "/api/v1/friends/1/accept"),
    (Method::Post, "/api/v1/friends/1/reject"),
    (Method::Post, "/api/v1/channels"),
    (Method::Post, "/api/v1/channels/ch-0000000000000000/posts"),
    (Method::Put, "/api/v1/channels/ch-0000000000000000/forsale"),
    (Method::Post, "/api/v1/channels/ch-0000000000000000/buy"),
    (
        Method::Post,
        "/api/v1/channels/ch-0000000000000000/subscribe",
    ),
    (Method::Post, "/api/v1/channels/quota/buy"),
    (Method::Post, "/api/v1/vanity/list-channel"),
    (Method::Post, "/api/v1/vanity/purchase"),
    (Method::Post, "/api/v1/vanity/bind"),
    (Method::Post, "/api/v1/vanity/reserve"),
    (Method::Post, "/api/v1/media/upload-parts/init"),
    (
        Method::Post,
        "/api/v1/media/upload-parts/up-000000000000000000000000/complete",
    ),
    (
        Method::Post,
        "/api/v1/media/upload-parts/up-000000000000000000000000/chunk?partNumber=1&mediaKey=m-x",
    ),
    (Method::Post, "/api/v1/push/subscribe"),
    (Method::Post, "/api/v1/push/register"),
    (Method::Post, "/api/v1/push/disable"),
    (Method::Post, "/api/v1/payments/webhook"),
    (Method::Get, "/api/v1/channels/search?q=FUZZ"),
    (Method::Get, "/api/v1/vanity/search?q=FUZZ"),
    (Method::Get, "/api/v1/calls/ice-config?mode=FUZZ"),
    (
        Method::Get,
        "/api/v1/channels/ch-0000000000000000/posts?limit=FUZZ&before=FUZZ",
    ),
];

/// `http_bodies`.
pub(crate) fn http_bodies(data: &[u8]) {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    round_trips(body);
    let (mut relay, _, token) = relay_with_account();
    let (method, path) = ROUTES[usize::from(selector) % ROUTES.len()];
    let text = String::from_utf8_lossy(body);
    let path = if path.contains("FUZZ") {
        // Query values: the input, percent-encoded as a client would send it.
        let encoded: String = text
            .bytes()
            .take(256)
            .map(|b| {
                if b.is_ascii_alphanumeric() {
                    (b as char).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect();
        path.replace("FUZZ", &encoded)
    } else {
        path.to_owned()
    };
    let req = HttpRequest::new(method, path.clone())
        .body(body.to_vec())
        .bearer(&token);
    let r = relay.handle_http(NOW, &req);
    well_formed(&path, &r);
    while relay.poll_output().is_some() {}
}

/// Every request body type that decodes from `body` re-encodes and decodes to an equal value.
fn round_trips(body: &[u8]) {
    use wire::http::*;
    fn check<T>(body: &[u8])
    where
        T: serde::de::DeserializeOwned + serde::Serialize + PartialEq + std::fmt::Debug,
    {
        if let Ok(value) = decode_body::<T>(body) {
            let again = serde_json::to_vec(&value).expect("encodes");
            let back: T = decode_body(&again)
                .unwrap_or_else(|e| panic!("{value:?} re-encoded does not decode: {e}"));
            assert_eq!(back, value);
        }
    }
    check::<RegisterRequest>(body);
    check::<AuthChallengeRequest>(body);
    check::<AuthVerifyRequest>(body);
    check::<FriendRequestBody>(body);
    check::<AcceptFriendBody>(body);
    check::<CreateChannelRequest>(body);
    check::<CreatePostRequest>(body);
    check::<ListChannelRequest>(body);
    check::<ForSaleRequest>(body);
    check::<PurchaseRequest>(body);
    check::<BindRequest>(body);
    check::<UploadInitRequest>(body);
    check::<CompleteUploadRequest>(body);
    check::<PushSubscribeRequest>(body);
    check::<PushRegisterRequest>(body);
    check::<PaymentWebhook>(body);
}

fn sign(body: &[u8]) -> String {
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(SECRET).expect("any key length");
    mac.update(body);
    mac.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `webhook`: mode 0 signs the body correctly; mode 1 takes the first line as the signature
/// header; mode 2 sends none.
pub(crate) fn webhook(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let (relay, _, _) = relay_with_account();
    let mut relay = relay;
    let (signature, body) = match mode % 3 {
        0 => (Some(sign(rest)), rest),
        1 => {
            let cut = rest.iter().position(|b| *b == b'\n').unwrap_or(rest.len());
            let line = String::from_utf8_lossy(&rest[..cut]).into_owned();
            (Some(line), rest.get(cut + 1..).unwrap_or_default())
        }
        _ => (None, rest),
    };
    let mut req = HttpRequest::new(Method::Post, "/api/v1/payments/webhook").body(body.to_vec());
    if let Some(signature) = &signature {
        req = req.header("x-payment-signature", signature.clone());
    }
    let r = relay.handle_http(NOW, &req);
    well_formed("webhook", &r);
    let genuine = signature
        .as_deref()
        .is_some_and(|s| s.trim().eq_ignore_ascii_case(&sign(body)));
    if !genuine {
        assert_eq!(
            r.status,
            401,
            "an unsigned webhook was accepted: {:?}",
            r.body_json()
        );
    }
    while relay.poll_output().is_some() {}
}

/// `push_subscription`: the first line is the endpoint; each later line an address the shell
/// "resolved" for its host.
pub(crate) fn push_subscription(data: &[u8]) {
    use relay_core::destination::{Host, PushDestinations, classify, parse_endpoint, parse_host};
    let text = String::from_utf8_lossy(data);
    let mut lines = text.lines();
    let endpoint = lines.next().unwrap_or_default().to_owned();
    let addrs: Vec<IpAddr> = lines.filter_map(|l| l.trim().parse().ok()).collect();
    let policy = PushDestinations::default();
    if let Ok(dest) = parse_endpoint(&endpoint) {
        let rendered = match &dest.host {
            Host::Name(n) => n.clone(),
            Host::Ip(IpAddr::V4(v4)) => v4.to_string(),
            Host::Ip(IpAddr::V6(v6)) => format!("[{v6}]"),
        };
        assert_eq!(parse_host(&rendered), Ok(dest.host.clone()), "{rendered}");
        if policy.check_host(&dest.host).is_ok()
            && let Host::Ip(ip) = dest.host
        {
            assert_eq!(classify(ip), None, "{ip} passed as public");
        }
    }
    let (mut relay, _, token) = relay_with_account();
    let host = parse_endpoint(&endpoint).ok().and_then(|d| match d.host {
        Host::Name(n) => Some(n),
        Host::Ip(_) => None,
    });
    let mut p256dh = vec![4u8];
    p256dh.extend([7u8; 64]);
    let b64url = |b: &[u8]| {
        use base64::Engine as _;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
    };
    let mut req = HttpRequest::new(Method::Post, "/api/v1/push/subscribe")
        .json(&json!({"endpoint": endpoint, "keys": {"p256dh": b64url(&p256dh), "auth": b64url(&[1; 16])}}))
        .bearer(&token);
    if let Some(host) = host {
        req = req.resolved(host, addrs.clone());
    }
    let r = relay.handle_http(NOW, &req);
    well_formed("subscribe", &r);
    if r.status == 200 {
        assert!(
            addrs.iter().all(|ip| classify(*ip).is_none()),
            "stored with a non-public address {addrs:?}"
        );
        let dest = parse_endpoint(&endpoint).expect("a stored endpoint parses");
        assert!(dest.https, "stored http:// in production");
        if let Host::Ip(ip) = dest.host {
            assert_eq!(classify(ip), None);
        }
    }
}

/// `tokens`: the input as a bearer token, as a WebSocket query and as a sub-protocol.
pub(crate) fn tokens(data: &[u8]) {
    let text = String::from_utf8_lossy(data).into_owned();
    let keys = relay_core::token::TokenKeys::from_seed([7; 32]);
    let _ = keys.verify(&text, NOW.get());
    let (mut relay, uuid, token) = relay_with_account();
    let r = relay.handle_http(
        NOW,
        &HttpRequest::new(Method::Get, "/api/v1/friends").bearer(&text),
    );
    well_formed("authenticate", &r);
    if r.status == 200 {
        assert_eq!(text.trim(), token, "another token was accepted");
    }
    let mut raw = HttpRequest::new(Method::Get, "/api/v1/friends");
    raw.authorization = Some(text.clone());
    well_formed("authorization", &relay.handle_http(NOW, &raw));
    for ws in [
        WsConnect {
            query: text.clone(),
            protocol: None,
        },
        WsConnect {
            query: format!("user_uuid={uuid}&ticket={text}"),
            protocol: None,
        },
        WsConnect {
            query: format!("uuid={uuid}"),
            protocol: Some(format!("bearer,{text}")),
        },
    ] {
        match relay.handle_connect(NOW, relay_core::ConnId(1), &ws) {
            Ok(_) => assert!(text.contains(&token), "connected without the token"),
            Err(r) => well_formed("connect", &r),
        }
        relay.handle_disconnect(NOW, relay_core::ConnId(1));
    }
    while relay.poll_output().is_some() {}
}

/// `store_rows`: rows `[table][key length][key][value length (2 bytes)][value]…`.
pub(crate) fn store_rows(data: &[u8]) {
    let mut store = MemoryStore::new();
    let mut batch = Batch::new();
    let mut rest = data;
    while let [t, klen, tail @ ..] = rest {
        let klen = usize::from(*klen);
        let Some((key, tail)) = tail.split_at_checked(klen) else {
            break;
        };
        let [v0, v1, tail @ ..] = tail else {
            break;
        };
        let vlen = usize::from(u16::from_le_bytes([*v0, *v1]));
        let (value, tail) = tail.split_at_checked(vlen).unwrap_or((tail, &[]));
        batch.put(
            Table::ALL[usize::from(*t) % Table::ALL.len()],
            &String::from_utf8_lossy(key),
            value,
        );
        rest = tail;
    }
    if store.commit(&batch).is_err() {
        return;
    }
    let Ok(mut relay) = Relay::new(config(), Box::new(store), 3) else {
        return;
    };
    relay.handle_timeout(NOW);
    if let Some(at) = relay.poll_timeout() {
        relay.handle_timeout(at.max(NOW));
    }
    for path in ["/api/v1/vanity/search", "/api/v1/channels/search?q=a"] {
        let r = relay.handle_http(NOW, &HttpRequest::new(Method::Get, path));
        well_formed(path, &r);
    }
    while relay.poll_output().is_some() {}
}
