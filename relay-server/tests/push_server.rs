//! Push delivery through the real relay server (`RelayServer::with_push`), on turmoil from a
//! seed, against the push-service stand-ins with real cryptography: accounts register their
//! targets over the REST routes exactly as the reference clients do, stay offline, and a
//! friend's messages make the relay push.
//!
//! * Web Push: the stand-in decrypts the RFC 8291 body to exactly `{"type":"new_msg"}` and
//!   verifies the VAPID JWT against the key the relay serves at `GET /api/v1/push/vapid-key`;
//!   a burst makes one push per subscription; a `410` makes the relay delete the
//!   subscription (no later attempt to it, while the account's other subscription still gets
//!   pushes).
//! * FCM and APNs tokens from `POST /api/v1/push/register` reach their stand-ins (OAuth grant,
//!   provider token, request shape); FCM `UNREGISTERED` deletes the token.
//! * A dead push service (its link held for the whole run) never delays routing: an online
//!   recipient gets every message while the pushes hang, and the worker's queue stays bounded.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers outside #[test] fns: a panic is the failure report"
)]

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use ed25519_dalek::{Signer as _, SigningKey};
use futures_util::{SinkExt as _, StreamExt as _};
use http::Method;
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng as _;
use relay_core::{Config, MemoryBlobStore, store::MemoryStore};
use relay_push::{
    ApnsConfig, FcmConfig, ServiceAccount, VapidKey, VapidSubject, WebPushConfig, WorkerConfig,
    WorkerLimits,
};
use relay_server::{PushDelivery, RelayServer};
use seam::clock::{Clock, SimClock};
use seam::net::{
    Endpoint, HttpClient, HttpRequest, Network, Turmoil, TurmoilConnector, WsMessage, WsRequest,
    WsStream,
};
use serde_json::{Value, json};
use standins::pushcrypto::{b64url_decode, is_uncompressed_p256_point};
use standins::{ApnsService, FcmService, ReceivedWebPush, WebPushService};

const RELAY: &str = "relay";
const PORT: u16 = 8080;
const WEB: &str = "webpush";
const FCM: &str = "fcm";
const APNS: &str = "apns";
const SERVICE_PORT: u16 = 443;
const SUBJECT: &str = "mailto:ops@example.org";
const NEW_MSG: &[u8] = br#"{"type":"new_msg"}"#;
const KEY_ID: &str = "KEYID12345";
const TEAM_ID: &str = "TEAM123456";
const BUNDLE: &str = "org.example.securechat";
/// Longer than relay-core's per-recipient push interval (30 s).
const PAST_PUSH_INTERVAL: Duration = Duration::from_secs(31);
/// Bound of every wait (virtual time); only keeps a broken build from hanging.
const WAIT: Duration = Duration::from_secs(20);

type Http = HttpClient<TurmoilConnector>;
type Ws = WsStream<<TurmoilConnector as seam::net::Connector>::Stream>;

fn base(host: &str) -> String {
    format!("http://{host}:{SERVICE_PORT}")
}

fn sim_builder(seed: u64) -> turmoil::Sim<'static> {
    turmoil::Builder::new()
        .rng_seed(seed)
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(10))
        .simulation_duration(Duration::from_secs(600))
        .build()
}

fn config() -> Config {
    Config {
        pow_difficulty: 0,
        registrations_per_hour_per_addr: 1_000,
        ..Config::default()
    }
}

fn vapid_key() -> VapidKey {
    VapidKey::generate(&mut ChaCha20Rng::seed_from_u64(0x7a91d))
}

fn web_push(key: &VapidKey) -> WebPushConfig {
    WebPushConfig {
        allow_http: true,
        ..WebPushConfig::new(key.clone(), VapidSubject::parse(SUBJECT).unwrap())
    }
}

/// The relay host: in memory, simulated clock, push delivery built by `delivery` (called on
/// every host start) and the relay's config made to agree with it.
fn relay_host(sim: &mut turmoil::Sim<'_>, delivery: impl Fn() -> PushDelivery + 'static) {
    sim.host(RELAY, move || {
        let delivery = delivery();
        async move {
            let mut config = config();
            delivery.configure(&mut config);
            RelayServer::in_memory(config, 3, MemoryStore::new(), MemoryBlobStore::new())
                .with_clock(SimClock::default())
                .with_push(delivery)
                .run::<Turmoil>(
                    SocketAddr::from((Ipv4Addr::UNSPECIFIED, PORT)),
                    std::future::pending(),
                )
                .await?;
            Ok(())
        }
    });
}

fn service_host<S, F, Fut>(sim: &mut turmoil::Sim<'_>, name: &str, service: &S, run: F)
where
    S: Clone + 'static,
    F: Fn(S, SocketAddr) -> Fut + 'static,
    Fut: Future<Output = std::io::Result<()>> + 'static,
{
    let service = service.clone();
    sim.host(name, move || {
        let fut = run(
            service.clone(),
            SocketAddr::from((Ipv4Addr::UNSPECIFIED, SERVICE_PORT)),
        );
        async move {
            fut.await?;
            Ok(())
        }
    });
}

fn sim_clock() -> Arc<dyn Clock> {
    Arc::new(SimClock::default())
}

// ---------------------------------------------------------------- a minimal client

struct User {
    uuid: String,
    alias: String,
    token: String,
}

fn http() -> Http {
    HttpClient::new(
        Turmoil::connector(),
        Endpoint::parse(&format!("http://{RELAY}:{PORT}")).unwrap(),
    )
}

async fn request(http: &Http, method: Method, path: &str, body: &Value, token: &str) -> Value {
    let mut req = HttpRequest::new(method, path).json(body).unwrap();
    if !token.is_empty() {
        req = req.bearer(token);
    }
    let response = http.send(req).await.unwrap();
    let v: Value = serde_json::from_slice(&response.body).unwrap_or(Value::Null);
    assert!(
        response.status.is_success(),
        "{path}: {} {v}",
        response.status
    );
    v
}

async fn post(http: &Http, path: &str, body: Value, token: &str) -> Value {
    request(http, Method::POST, path, &body, token).await
}

/// Registers (PoW off) and logs in.
async fn register(http: &Http, key: u8) -> User {
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let sk = SigningKey::from_bytes(&[key; 32]);
    let account = post(
        http,
        "/api/v1/register",
        json!({
            "ed25519_public_key": b64(sk.verifying_key().as_bytes()),
            "x25519_public_key": b64(&[key.wrapping_add(100); 32]),
            "nickname": format!("user{key}"),
            "pow_nonce": "0",
        }),
        "",
    )
    .await;
    let uuid = account["uuid"].as_str().unwrap().to_owned();
    let c = post(
        http,
        "/api/v1/auth/challenge",
        json!({"user_uuid": uuid}),
        "",
    )
    .await;
    let challenge = c["challenge"].as_str().unwrap();
    let signature = b64(&sk.sign(challenge.as_bytes()).to_bytes());
    let v = post(
        http,
        "/api/v1/auth/verify",
        json!({"user_uuid": uuid, "challenge": challenge, "signature": signature}),
        "",
    )
    .await;
    User {
        uuid,
        alias: account["alias_id"].as_str().unwrap().to_owned(),
        token: v["token"].as_str().unwrap().to_owned(),
    }
}

/// `a` asks, `b` accepts; returns the conversation id.
async fn befriend(http: &Http, a: &User, b: &User) -> String {
    let fr = post(
        http,
        "/api/v1/friends/request",
        json!({"to_alias_id": b.alias}),
        &a.token,
    )
    .await;
    let id = fr["friendship_id"].as_u64().map_or_else(
        || fr["friendship_id"].as_str().unwrap().to_owned(),
        |n| n.to_string(),
    );
    let v = request(
        http,
        Method::PUT,
        &format!("/api/v1/friends/{id}/accept"),
        &json!({}),
        &b.token,
    )
    .await;
    v["conversation_id"].as_str().unwrap().to_owned()
}

/// Ticket, upgrade, `sync`.
async fn open_ws(http: &Http, user: &User) -> Ws {
    let v = post(http, "/api/v1/ws/ticket", json!({}), &user.token).await;
    let ticket = v["ticket"].as_str().unwrap();
    let path = format!("/ws?user_uuid={}&ticket={ticket}", user.uuid);
    let mut ws = http.connect_ws(WsRequest::new(path)).await.unwrap();
    ws.send(WsMessage::text(r#"{"type":"sync","crypto_v":1}"#))
        .await
        .unwrap();
    ws
}

/// The next frame of type `kind` (others are skipped).
async fn next_of(ws: &mut Ws, kind: &str) -> Value {
    loop {
        let message = tokio::time::timeout(WAIT, ws.next())
            .await
            .unwrap_or_else(|_| panic!("no {kind} frame within the wait"));
        match message {
            Some(Ok(WsMessage::Text(text))) => {
                let v: Value = serde_json::from_str(&text).unwrap();
                if v["type"] == kind {
                    return v;
                }
            }
            Some(Ok(_)) => {}
            other => panic!("socket ended while waiting for {kind}: {other:?}"),
        }
    }
}

/// Sends a message from `from`'s socket to `to` and waits for its ack.
async fn send_msg(ws: &mut Ws, to: &User, conv: &str, id: &str) {
    let frame = json!({
        "type": "msg", "id": id, "to": to.alias, "conv_id": conv, "crypto_v": 1,
        "payload": "cHVzaA==",
    });
    ws.send(WsMessage::text(frame.to_string())).await.unwrap();
    let ack = next_of(ws, "ack").await;
    assert_eq!(ack["id"], id, "{ack}");
}

/// Waits `d` while reading (and so answering the relay's pings, as every client does): a
/// client that reads nothing for the write deadline is taken to be stuck and closed.
async fn idle(ws: &mut Ws, d: Duration) {
    let _ = tokio::time::timeout(d, async { while let Some(Ok(_)) = ws.next().await {} }).await;
}

/// Subscribes `user` to Web Push with a new subscription of `service` (as a browser would).
async fn subscribe(http: &Http, user: &User, service: &WebPushService) -> String {
    let sub = service.subscribe(&base(WEB));
    post(
        http,
        "/api/v1/push/subscribe",
        json!({"endpoint": sub.endpoint, "keys": {"p256dh": sub.p256dh, "auth": sub.auth}}),
        &user.token,
    )
    .await;
    sub.id
}

/// Waits (bounded, virtual time) until `done` holds.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let step = Duration::from_millis(50);
    let mut waited = Duration::ZERO;
    while !done() {
        assert!(waited < WAIT, "{what}: not reached within the wait");
        tokio::time::sleep(step).await;
        waited += step;
    }
}

fn pushes_to(service: &WebPushService, sub: &str) -> Vec<ReceivedWebPush> {
    service
        .received()
        .into_iter()
        .filter(|r| r.subscription == sub)
        .collect()
}

/// A delivered push, checked as a browser's push service and service worker would.
fn assert_good_push(push: &ReceivedWebPush, served_key: &str) {
    assert_eq!(push.status, 201, "{push:?}");
    assert_eq!(
        push.plaintext.as_deref(),
        Ok(NEW_MSG),
        "exactly the zero-knowledge payload"
    );
    let vapid = push.vapid.as_ref().expect("the VAPID JWT verifies");
    assert_eq!(vapid.key, served_key, "signed by the served key");
    assert_eq!(vapid.aud, base(WEB));
    assert_eq!(vapid.sub, SUBJECT);
    assert_eq!(push.content_encoding.as_deref(), Some("aes128gcm"));
    assert_eq!(push.ttl.as_deref(), Some("86400"));
    assert_eq!(push.urgency.as_deref(), Some("high"));
    assert_eq!(push.topic.as_deref(), Some("new_msg"));
}

// ---------------------------------------------------------------- the tests

/// Web Push end to end through the relay server: served key, decryption, VAPID, one push per
/// burst, and a 410 deletes exactly that subscription.
#[test]
fn web_push_from_the_relay_server_decrypts_and_a_410_deletes_the_subscription() {
    let mut sim = sim_builder(31);
    let key = vapid_key();
    let k = key.clone();
    relay_host(&mut sim, move || {
        let config = WorkerConfig {
            web_push: Some(web_push(&k)),
            ..WorkerConfig::default()
        };
        PushDelivery::over_network(config, [31; 32])
    });
    let web = WebPushService::new(31, sim_clock());
    service_host(&mut sim, WEB, &web, |s: WebPushService, a| {
        s.run::<Turmoil>(a, std::future::pending())
    });

    let service = web.clone();
    sim.client("clients", async move {
        let http = http();
        let alice = register(&http, 1).await;
        let bob = register(&http, 2).await;
        let conv = befriend(&http, &alice, &bob).await;

        // The key a browser would pass to pushManager.subscribe.
        let v = request(
            &http,
            Method::GET,
            "/api/v1/push/vapid-key",
            &json!({}),
            &bob.token,
        )
        .await;
        let served = v["vapid_public_key"].as_str().unwrap().to_owned();
        assert!(is_uncompressed_p256_point(&b64url_decode(&served).unwrap()));
        assert_eq!(served, key.public_key_b64url());
        service.expect_vapid_key(&served);

        // Two browsers of bob's; bob never connects (offline).
        let kept = subscribe(&http, &bob, &service).await;
        let dropped = subscribe(&http, &bob, &service).await;
        let mut alice_ws = open_ws(&http, &alice).await;

        // A burst: one push per subscription.
        for id in ["m1", "m2", "m3"] {
            send_msg(&mut alice_ws, &bob, &conv, id).await;
        }
        until("a push to each subscription", || {
            !pushes_to(&service, &kept).is_empty() && !pushes_to(&service, &dropped).is_empty()
        })
        .await;
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(service.received().len(), 2, "{:?}", service.received());
        for push in service.received() {
            assert_good_push(&push, &served);
        }

        // The browser unsubscribed one: its push service answers 410, the relay deletes it.
        service.unsubscribe(&dropped);
        idle(&mut alice_ws, PAST_PUSH_INTERVAL).await;
        send_msg(&mut alice_ws, &bob, &conv, "m4").await;
        until("the 410 and the other subscription's second push", || {
            pushes_to(&service, &dropped).len() == 2 && pushes_to(&service, &kept).len() == 2
        })
        .await;
        assert_eq!(pushes_to(&service, &dropped)[1].status, 410);
        assert_good_push(&pushes_to(&service, &kept)[1], &served);

        // From now on only the kept subscription is pushed to: the relay deleted the other.
        idle(&mut alice_ws, PAST_PUSH_INTERVAL).await;
        send_msg(&mut alice_ws, &bob, &conv, "m5").await;
        until("the third push", || pushes_to(&service, &kept).len() == 3).await;
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(
            pushes_to(&service, &dropped).len(),
            2,
            "no attempt after the 410"
        );
        assert_good_push(&pushes_to(&service, &kept)[2], &served);
        Ok(())
    });
    sim.run().unwrap();
}

/// Native tokens registered over `POST /api/v1/push/register` reach the FCM and APNs
/// stand-ins with valid credentials; FCM `UNREGISTERED` deletes the token. Without Web Push
/// configured the VAPID route serves the placeholder.
#[test]
fn fcm_and_apns_tokens_registered_over_rest_reach_their_stand_ins() {
    let mut sim = sim_builder(32);
    let fcm = FcmService::new(sim_clock());
    let apns = ApnsService::new(32, sim_clock(), KEY_ID, TEAM_ID, BUNDLE);
    let account = fcm.service_account_json(&base(FCM));
    let p8 = apns.p8_pem();
    relay_host(&mut sim, move || {
        let fcm = FcmConfig {
            endpoint: base(FCM),
            ..FcmConfig::new(ServiceAccount::from_json(&account).unwrap())
        };
        let apns = ApnsConfig::new(&p8, KEY_ID, TEAM_ID, BUNDLE)
            .unwrap()
            .with_endpoint(&base(APNS));
        let config = WorkerConfig {
            fcm: Some(fcm),
            apns: Some(apns),
            ..WorkerConfig::default()
        };
        PushDelivery::over_network(config, [32; 32])
    });
    service_host(&mut sim, FCM, &fcm, |s: FcmService, a| {
        s.run::<Turmoil>(a, std::future::pending())
    });
    service_host(&mut sim, APNS, &apns, |s: ApnsService, a| {
        s.run::<Turmoil>(a, std::future::pending())
    });

    let (fcm_seen, apns_seen) = (fcm.clone(), apns.clone());
    sim.client("clients", async move {
        let http = http();
        let alice = register(&http, 1).await;
        let android = register(&http, 2).await;
        let ios = register(&http, 3).await;
        let v = request(
            &http,
            Method::GET,
            "/api/v1/push/vapid-key",
            &json!({}),
            &android.token,
        )
        .await;
        assert_eq!(
            v["vapid_public_key"],
            relay_core::push::VAPID_KEY_PLACEHOLDER
        );
        // The Android app's and the iOS SDK's registration bodies (PROTOCOL §1.7 P3).
        post(
            &http,
            "/api/v1/push/register",
            json!({"token": "fcm-token-1", "platform": "android"}),
            &android.token,
        )
        .await;
        post(
            &http,
            "/api/v1/push/register",
            json!({"device_token": "0a1b2c3d4e5f", "platform": "ios"}),
            &ios.token,
        )
        .await;
        let to_android = befriend(&http, &alice, &android).await;
        let to_ios = befriend(&http, &alice, &ios).await;
        let mut ws = open_ws(&http, &alice).await;
        send_msg(&mut ws, &android, &to_android, "a1").await;
        send_msg(&mut ws, &ios, &to_ios, "i1").await;
        until("one FCM and one APNs push", || {
            fcm.received().len() == 1 && apns.received().len() == 1
        })
        .await;

        // The app was uninstalled: UNREGISTERED, and the relay deletes the token.
        fcm.unregister("fcm-token-1");
        idle(&mut ws, PAST_PUSH_INTERVAL).await;
        send_msg(&mut ws, &android, &to_android, "a2").await;
        until("the UNREGISTERED answer", || fcm.received().len() == 2).await;
        idle(&mut ws, PAST_PUSH_INTERVAL).await;
        send_msg(&mut ws, &android, &to_android, "a3").await;
        send_msg(&mut ws, &ios, &to_ios, "i2").await;
        until("the second APNs push", || apns.received().len() == 2).await;
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(fcm.received().len(), 2, "no FCM attempt after UNREGISTERED");
        Ok(())
    });
    sim.run().unwrap();

    let sent = fcm_seen.received();
    assert_eq!(
        sent.iter().map(|r| r.status).collect::<Vec<_>>(),
        [200, 404]
    );
    for r in &sent {
        assert!(r.authorized, "{r:?}");
        assert_eq!(r.token.as_deref(), Some("fcm-token-1"));
        assert_eq!(r.message["data"], json!({"type": "new_msg"}));
        assert!(r.message.get("notification").is_none());
    }
    assert_eq!(fcm_seen.token_requests(), vec![Ok(())], "one OAuth grant");
    let pushed = apns_seen.received();
    assert_eq!(pushed.len(), 2);
    for r in &pushed {
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.device_token, "0a1b2c3d4e5f");
        let (kid, iss, _) = r.provider_token.clone().expect("provider token verifies");
        assert_eq!((kid.as_str(), iss.as_str()), (KEY_ID, TEAM_ID));
        assert_eq!(r.topic.as_deref(), Some(BUNDLE));
        assert_eq!(r.body["type"], "new_msg");
        // Nothing but the payload's type and the fixed, content-free alert envelope.
        let mut keys: Vec<&str> = r
            .body
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        assert_eq!(keys, ["aps", "type"]);
    }
}

/// The push service's link is held for the whole run (requests neither answered nor failed):
/// the online recipient still gets every message, the offline recipients' pushes wait in the
/// worker's bounded queue, and once the link returns what was kept is delivered.
#[test]
fn a_dead_push_service_never_delays_routing() {
    const LIMITS: WorkerLimits = WorkerLimits {
        queue_capacity: 2,
        max_concurrent: 2,
        max_retrying: 2,
        max_attempts: 2,
        backoff_base_ms: 1_000,
        backoff_max_ms: 5_000,
        request_timeout_ms: 120_000,
    };
    let mut sim = sim_builder(33);
    let key = vapid_key();
    let k = key.clone();
    relay_host(&mut sim, move || {
        let config = WorkerConfig {
            web_push: Some(web_push(&k)),
            limits: LIMITS,
            ..WorkerConfig::default()
        };
        PushDelivery::over_network(config, [33; 32])
    });
    let web = WebPushService::new(33, sim_clock());
    service_host(&mut sim, WEB, &web, |s: WebPushService, a| {
        s.run::<Turmoil>(a, std::future::pending())
    });

    let service = web.clone();
    sim.client("clients", async move {
        let http = http();
        let alice = register(&http, 1).await;
        let bob = register(&http, 2).await;
        let mut offline = Vec::new();
        for k in 3..=4 {
            let user = register(&http, k).await;
            for _ in 0..4 {
                subscribe(&http, &user, &service).await;
            }
            let conv = befriend(&http, &alice, &user).await;
            offline.push((user, conv));
        }
        let to_bob = befriend(&http, &alice, &bob).await;
        let mut alice_ws = open_ws(&http, &alice).await;
        let mut bob_ws = open_ws(&http, &bob).await;

        // The push service stops answering: 8 pushes, more than the worker holds.
        turmoil::hold(RELAY, WEB);
        for (n, (user, conv)) in offline.iter().enumerate() {
            send_msg(&mut alice_ws, user, conv, &format!("off-{n}")).await;
        }
        // Routing to the online recipient goes on while every push hangs.
        for n in 0..20 {
            send_msg(&mut alice_ws, &bob, &to_bob, &format!("on-{n}")).await;
        }
        for n in 0..20 {
            let msg = next_of(&mut bob_ws, "msg").await;
            assert_eq!(msg["id"], format!("on-{n}"));
        }
        assert!(service.received().is_empty(), "the link is held");

        // The link returns: what the worker kept (in flight, one waiting for a permit, the
        // queue) is delivered; the rest was dropped at the full queue.
        turmoil::release(RELAY, WEB);
        until("the kept pushes", || !service.received().is_empty()).await;
        tokio::time::sleep(Duration::from_secs(10)).await;
        let got = service.received();
        let bound = LIMITS.max_concurrent + 1 + LIMITS.queue_capacity;
        assert!(got.len() <= bound, "{} pushes, bound {bound}", got.len());
        for push in &got {
            assert_good_push(push, key.public_key_b64url());
        }
        Ok(())
    });
    sim.run().unwrap();
}
