//! The relay server, end to end over real HTTP and WebSockets: one scenario written once and
//! run on turmoil's simulated network (seeded) and on loopback sockets; plus a crash and
//! restart of the relay host on the same store, and graceful shutdown.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "shared test helpers outside #[test] fns: a panic is the failure report"
)]

use std::{
    cell::Cell,
    net::{Ipv4Addr, SocketAddr},
    rc::Rc,
    sync::Arc,
    time::Duration,
};

use base64::Engine as _;
use ed25519_dalek::{Signer as _, SigningKey};
use futures_util::{SinkExt as _, StreamExt as _};
use http::{Method, header};
use relay_core::{Config, MemoryBlobStore, store::MemoryStore};
use relay_server::RelayServer;
use seam::{
    clock::SimClock,
    net::{
        Connector, Endpoint, HttpClient, HttpRequest, Listener as _, Network, Tokio, Turmoil,
        WsError, WsMessage, WsRequest, WsStream,
    },
};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use tokio::sync::Notify;

const RELAY: &str = "relay";
const PORT: u16 = 8080;
const SEED: u64 = 11;
/// How long a test waits for a frame before failing.
const FRAME_WAIT: Duration = Duration::from_secs(5);

fn config() -> Config {
    Config {
        pow_difficulty: 1,
        ..Config::default()
    }
}

// ---- a minimal client, written once for both networks

struct User {
    sk: SigningKey,
    uuid: String,
    alias: String,
    token: String,
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The reference clients' PoW: the smallest decimal nonce whose SHA-256 over
/// `challenge + nonce` starts with `difficulty` zero hex digits.
fn solve_pow(challenge: &str, difficulty: usize) -> String {
    (0u64..)
        .map(|n| n.to_string())
        .find(|nonce| {
            let digest = Sha256::digest(format!("{challenge}{nonce}").as_bytes());
            let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
            hex.bytes().take(difficulty).all(|c| c == b'0')
        })
        .unwrap()
}

async fn post<C: Connector>(
    http: &HttpClient<C>,
    path: &str,
    body: &Value,
    token: Option<&str>,
) -> (u16, Value) {
    let mut request = HttpRequest::post(path).json(body).unwrap();
    if let Some(token) = token {
        request = request.bearer(token);
    }
    let response = http.send(request).await.unwrap();
    let json = serde_json::from_slice(&response.body).unwrap_or(Value::Null);
    (response.status.as_u16(), json)
}

async fn register<C: Connector>(http: &HttpClient<C>, key: u8, nickname: &str) -> User {
    let (status, pow) = post(http, "/api/v1/pow/challenge", &json!({}), None).await;
    assert_eq!(status, 200, "{pow}");
    let difficulty = usize::try_from(pow["difficulty"].as_u64().unwrap()).unwrap();
    let nonce = solve_pow(pow["challenge_string"].as_str().unwrap(), difficulty);
    let sk = SigningKey::from_bytes(&[key; 32]);
    let body = json!({
        "ed25519_public_key": b64(sk.verifying_key().as_bytes()),
        "x25519_public_key": b64(&[key.wrapping_add(100); 32]),
        "nickname": nickname,
        "pow_nonce": nonce,
    });
    let (status, account) = post(http, "/api/v1/register", &body, None).await;
    assert_eq!(status, 201, "{account}");
    let mut user = User {
        sk,
        uuid: account["uuid"].as_str().unwrap().to_owned(),
        alias: account["alias_id"].as_str().unwrap().to_owned(),
        token: String::new(),
    };
    login(http, &mut user).await;
    user
}

async fn login<C: Connector>(http: &HttpClient<C>, user: &mut User) {
    let (status, c) = post(
        http,
        "/api/v1/auth/challenge",
        &json!({"user_uuid": user.uuid}),
        None,
    )
    .await;
    assert_eq!(status, 200, "{c}");
    let challenge = c["challenge"].as_str().unwrap();
    let signature = user.sk.sign(challenge.as_bytes()).to_bytes();
    let body =
        json!({"user_uuid": user.uuid, "challenge": challenge, "signature": b64(&signature)});
    let (status, v) = post(http, "/api/v1/auth/verify", &body, None).await;
    assert_eq!(status, 200, "{v}");
    user.token = v["token"].as_str().unwrap().to_owned();
}

async fn ticket<C: Connector>(http: &HttpClient<C>, user: &User) -> String {
    let (status, v) = post(http, "/api/v1/ws/ticket", &json!({}), Some(&user.token)).await;
    assert_eq!(status, 200, "{v}");
    v["ticket"].as_str().unwrap().to_owned()
}

/// Ticket, connect, `sync`.
async fn open_ws<C: Connector>(http: &HttpClient<C>, user: &User) -> WsStream<C::Stream> {
    let ticket = ticket(http, user).await;
    let path = format!("/ws?user_uuid={}&ticket={ticket}", user.uuid);
    let mut ws = http.connect_ws(WsRequest::new(path)).await.unwrap();
    send(&mut ws, &json!({"type": "sync", "crypto_v": 1})).await;
    ws
}

async fn send<S>(ws: &mut WsStream<S>, frame: &Value)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    ws.send(WsMessage::text(frame.to_string())).await.unwrap();
}

/// The next text frame as JSON, or `{"closed": code}` when the socket closes.
async fn next_frame<S>(ws: &mut WsStream<S>) -> Value
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    loop {
        let message = tokio::time::timeout(FRAME_WAIT, ws.next())
            .await
            .expect("a frame within the wait");
        match message {
            Some(Ok(WsMessage::Text(text))) => return serde_json::from_str(&text).unwrap(),
            Some(Ok(WsMessage::Close(frame))) => {
                return json!({"closed": frame.map(|f| u16::from(f.code))});
            }
            Some(Ok(_)) => {}
            None => return json!({"closed": null}),
            Some(Err(e)) => return json!({"closed": e.to_string()}),
        }
    }
}

/// Describes a frame without its ids (they differ per network run).
fn describe(frame: &Value) -> String {
    match frame["type"].as_str() {
        Some("ack") => format!("ack seq={}", frame["seq"]),
        Some("msg") => format!("msg seq={} payload={}", frame["seq"], frame["payload"]),
        Some("goaway") => format!("goaway {}", frame["reason"].as_str().unwrap()),
        Some("error") => format!("error {}", frame["error"].as_str().unwrap()),
        Some(t) => t.to_owned(),
        None => format!("closed {}", frame["closed"]),
    }
}

// ---- the scenario, generic over the network

/// Everything the server must do, as seen by two clients; returns the observed trace.
async fn scenario<C: Connector>(http: &HttpClient<C>) -> Vec<String> {
    scenario_of(http).await.0
}

/// [`scenario`], with the uuids of its two clients.
async fn scenario_of<C: Connector>(http: &HttpClient<C>) -> (Vec<String>, [String; 2]) {
    let mut trace = Vec::new();

    // CORS preflight.
    let preflight = HttpRequest::new(Method::OPTIONS, "/api/v1/register")
        .header(header::ORIGIN, "https://pwa.example")
        .header(header::ACCESS_CONTROL_REQUEST_METHOD, "POST")
        .header(
            header::ACCESS_CONTROL_REQUEST_HEADERS,
            "authorization, content-type",
        );
    let r = http.send(preflight).await.unwrap();
    trace.push(format!(
        "preflight {} origin={:?} headers={:?}",
        r.status.as_u16(),
        r.headers[header::ACCESS_CONTROL_ALLOW_ORIGIN],
        r.headers[header::ACCESS_CONTROL_ALLOW_HEADERS],
    ));

    // Body limit, before the relay sees the body.
    let big = HttpRequest::post("/api/v1/register")
        .header(header::CONTENT_TYPE, "application/json")
        .body(vec![b' '; wire::limits::MAX_JSON_BODY_BYTES + 1]);
    let r = http.send(big).await.unwrap();
    let v: Value = r.json().unwrap();
    trace.push(format!(
        "oversize {} {} cors={:?}",
        r.status.as_u16(),
        v["error"].as_str().unwrap(),
        r.headers[header::ACCESS_CONTROL_ALLOW_ORIGIN],
    ));

    let mut alice = register(http, 1, "alice").await;
    let bob = register(http, 2, "bob").await;
    trace.push("registered and logged in".into());

    // Refused before the upgrade, with the relay's 401 body.
    let bad = format!("/ws?user_uuid={}&ticket=nope", alice.uuid);
    match http.connect_ws(WsRequest::new(bad)).await {
        Err(WsError::Handshake(tokio_tungstenite::tungstenite::Error::Http(response))) => {
            let body: Value = serde_json::from_slice(response.body().as_deref().unwrap()).unwrap();
            trace.push(format!(
                "bad ticket {} {}",
                response.status().as_u16(),
                body["error"].as_str().unwrap()
            ));
        }
        other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
    }

    let mut alice_ws = open_ws(http, &alice).await;
    let mut bob_ws = open_ws(http, &bob).await;

    // Friends.
    let (status, fr) = post(
        http,
        "/api/v1/friends/request",
        &json!({"to_alias_id": bob.alias}),
        Some(&alice.token),
    )
    .await;
    trace.push(format!("friend request {status}"));
    trace.push(format!(
        "bob <- {}",
        describe(&next_frame(&mut bob_ws).await)
    ));
    let id = fr["friendship_id"].clone();
    let accept =
        HttpRequest::new(Method::PUT, format!("/api/v1/friends/{id}/accept")).bearer(&bob.token);
    let r = http.send(accept).await.unwrap();
    let v: Value = r.json().unwrap();
    let conv = v["conversation_id"].as_str().unwrap().to_owned();
    trace.push(format!("friend accept {}", r.status.as_u16()));
    trace.push(format!(
        "alice <- {}",
        describe(&next_frame(&mut alice_ws).await)
    ));

    // A message: ack to the sender, delivery to the peer, receipt back.
    let msg = json!({"type": "msg", "id": "m-1", "to": bob.alias, "conv_id": conv, "crypto_v": 1, "payload": "aGVsbG8="});
    send(&mut alice_ws, &msg).await;
    trace.push(format!(
        "alice <- {}",
        describe(&next_frame(&mut alice_ws).await)
    ));
    let delivered = next_frame(&mut bob_ws).await;
    assert_eq!(delivered["from"], json!(alice.alias));
    trace.push(format!("bob <- {}", describe(&delivered)));
    send(
        &mut bob_ws,
        &json!({"type": "delivered", "conv_id": conv, "seq": 1, "to": alice.alias, "crypto_v": 1}),
    )
    .await;
    trace.push(format!(
        "alice <- {}",
        describe(&next_frame(&mut alice_ws).await)
    ));

    // iOS sends binary frames holding UTF-8 JSON.
    let typing = json!({"type": "typing", "to": alice.alias, "conv_id": conv});
    bob_ws
        .send(WsMessage::binary(typing.to_string().into_bytes()))
        .await
        .unwrap();
    trace.push(format!(
        "alice <- {}",
        describe(&next_frame(&mut alice_ws).await)
    ));
    bob_ws
        .send(WsMessage::binary(vec![0xff, 0xfe]))
        .await
        .unwrap();
    trace.push(format!(
        "bob <- {}",
        describe(&next_frame(&mut bob_ws).await)
    ));

    // A second login takes over: the old socket gets GOAWAY, then a close.
    login(http, &mut alice).await;
    trace.push(format!(
        "alice <- {}",
        describe(&next_frame(&mut alice_ws).await)
    ));
    trace.push(format!(
        "alice <- {}",
        describe(&next_frame(&mut alice_ws).await)
    ));
    drop(bob_ws);
    (trace, [alice.uuid, bob.uuid])
}

fn expected_scenario() -> Vec<String> {
    [
        r#"preflight 204 origin="*" headers="authorization, content-type""#,
        r#"oversize 413 BODY_TOO_LARGE cors="*""#,
        "registered and logged in",
        "bad ticket 401 TICKET_INVALID",
        "friend request 200",
        "bob <- friend_request",
        "friend accept 200",
        "alice <- friend_accepted",
        "alice <- ack seq=1",
        r#"bob <- msg seq=1 payload="aGVsbG8=""#,
        "alice <- delivered",
        "alice <- typing",
        "bob <- error BAD_FRAME",
        "alice <- goaway new_device_login",
        "alice <- closed 1000",
    ]
    .map(String::from)
    .to_vec()
}

/// A socket open at shutdown gets GOAWAY `server_shutdown`, then a close.
async fn shutdown_check<C: Connector>(
    http: &HttpClient<C>,
    ws: &mut WsStream<C::Stream>,
    stop: impl FnOnce(),
) -> Vec<String> {
    let _ = http;
    stop();
    vec![
        describe(&next_frame(ws).await),
        describe(&next_frame(ws).await),
    ]
}

fn expected_shutdown() -> Vec<String> {
    vec!["goaway server_shutdown".into(), "closed 1001".into()]
}

// ---- turmoil

fn sim_builder(seed: u64) -> turmoil::Sim<'static> {
    turmoil::Builder::new()
        .rng_seed(seed)
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(10))
        .simulation_duration(Duration::from_secs(120))
        .build()
}

/// Adds the relay host, serving until `stop` is notified; its state lives in `store`.
fn relay_host(sim: &mut turmoil::Sim<'_>, store: &MemoryStore, stop: &Arc<Notify>) {
    let store = store.clone();
    let blobs = MemoryBlobStore::new();
    let stop = Arc::clone(stop);
    sim.host(RELAY, move || {
        let server = RelayServer::in_memory(config(), SEED, store.clone(), blobs.clone())
            .with_clock(SimClock::default());
        let stop = Arc::clone(&stop);
        async move {
            let addr = SocketAddr::from((Ipv4Addr::UNSPECIFIED, PORT));
            server
                .run::<Turmoil>(addr, async move { stop.notified().await })
                .await?;
            Ok(())
        }
    });
}

fn sim_http() -> HttpClient<<Turmoil as Network>::Connector> {
    HttpClient::new(
        Turmoil::connector(),
        Endpoint::parse(&format!("http://{RELAY}:{PORT}")).unwrap(),
    )
}

#[test]
fn relay_on_turmoil() {
    let mut sim = sim_builder(5);
    let stop = Arc::new(Notify::new());
    relay_host(&mut sim, &MemoryStore::new(), &stop);
    let trigger = Arc::clone(&stop);
    sim.client("clients", async move {
        let http = sim_http();
        assert_eq!(scenario(&http).await, expected_scenario());
        let carol = register(&http, 3, "carol").await;
        let mut ws = open_ws(&http, &carol).await;
        let seen = shutdown_check(&http, &mut ws, || trigger.notify_one()).await;
        assert_eq!(seen, expected_shutdown());
        Ok(())
    });
    sim.run().unwrap();
}

#[test]
fn relay_crash_and_restart_replays_acked_messages() {
    let mut sim = sim_builder(9);
    let store = MemoryStore::new();
    relay_host(&mut sim, &store, &Arc::new(Notify::new()));
    // 0: running; 1: alice's message acked (crash now); 2: relay restarted.
    let phase = Rc::new(Cell::new(0u8));
    let seen = Rc::clone(&phase);
    sim.client("clients", async move {
        let http = sim_http();
        let alice = register(&http, 1, "alice").await;
        let bob = register(&http, 2, "bob").await;
        let (_, fr) = post(
            &http,
            "/api/v1/friends/request",
            &json!({"to_alias_id": bob.alias}),
            Some(&alice.token),
        )
        .await;
        let id = fr["friendship_id"].clone();
        let accept = HttpRequest::new(Method::PUT, format!("/api/v1/friends/{id}/accept"))
            .bearer(&bob.token);
        let v: Value = http.send(accept).await.unwrap().json().unwrap();
        let conv = v["conversation_id"].as_str().unwrap().to_owned();
        // Bob is offline; alice's message is acked, i.e. committed.
        let mut alice_ws = open_ws(&http, &alice).await;
        let msg = json!({"type": "msg", "id": "m-1", "to": bob.alias, "conv_id": conv, "crypto_v": 1, "payload": "Y2FuYXJ5"});
        send(&mut alice_ws, &msg).await;
        assert_eq!(describe(&next_frame(&mut alice_ws).await), "ack seq=1");
        seen.set(1);
        while seen.get() != 2 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        drop(alice_ws);
        // A fresh client (the old pool's connections died with the host). Bob's token was
        // issued before the crash and is still valid: keys and sessions are in the store.
        let http = sim_http();
        let mut bob_ws = open_ws(&http, &bob).await;
        let replayed = next_frame(&mut bob_ws).await;
        assert_eq!(describe(&replayed), r#"msg seq=1 payload="Y2FuYXJ5""#);
        assert_eq!(replayed["id"], "m-1");
        assert_eq!(replayed["from"], json!(alice.alias));
        // Alice re-sends the same id after the restart: same ack, no second delivery.
        let mut alice_ws = open_ws(&http, &alice).await;
        send(&mut alice_ws, &msg).await;
        assert_eq!(describe(&next_frame(&mut alice_ws).await), "ack seq=1");
        Ok(())
    });
    while phase.get() != 1 {
        assert!(!sim.step().unwrap(), "the client finished before the crash");
    }
    let commits = store.commit_count();
    sim.crash(RELAY);
    for _ in 0..100 {
        sim.step().unwrap();
    }
    sim.bounce(RELAY);
    phase.set(2);
    sim.run().unwrap();
    assert!(
        store.commit_count() > commits,
        "the restarted relay commits to the same store"
    );
}

// ---- tokio, loopback sockets

#[tokio::test]
async fn relay_on_loopback_sockets() {
    let server = RelayServer::in_memory(config(), SEED, MemoryStore::new(), MemoryBlobStore::new());
    scenario_and_shutdown_on_loopback(server, "one core").await;
}

/// `server` serving on a loopback port until `stop` is notified: a client of it, the stop,
/// and the task that serves.
async fn serve_on_loopback(
    server: RelayServer,
) -> (
    HttpClient<<Tokio as Network>::Connector>,
    Arc<Notify>,
    tokio::task::JoinHandle<std::io::Result<()>>,
) {
    let listener = Tokio::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = Arc::new(Notify::new());
    let stopped = Arc::clone(&stop);
    let server = tokio::spawn(server.serve::<Tokio>(listener, async move {
        stopped.notified().await;
    }));
    (
        HttpClient::new(Tokio::connector(), Endpoint::from(addr)),
        stop,
        server,
    )
}

/// The scenario, then a graceful shutdown with a socket open, against `server` on loopback;
/// returns the uuids of the scenario's two clients.
async fn scenario_and_shutdown_on_loopback(server: RelayServer, label: &str) -> [String; 2] {
    let (http, stop, server) = serve_on_loopback(server).await;
    let (trace, users) = scenario_of(&http).await;
    assert_eq!(trace, expected_scenario(), "{label}");

    let carol = register(&http, 3, "carol").await;
    let mut ws = open_ws(&http, &carol).await;
    let seen = shutdown_check(&http, &mut ws, || stop.notify_one()).await;
    assert_eq!(seen, expected_shutdown(), "{label}");
    drop(ws);
    drop(http);
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("graceful shutdown finishes")
        .unwrap()
        .unwrap();
    users
}

// ---- the stand-ins, on turmoil

/// The payment stand-in on turmoil: its forged webhook is refused (401) while its genuine
/// copies are answered, and its invoice page shows the payment. (Push delivery to the push
/// stand-ins is `push_server.rs`.)
#[test]
fn payment_standin_on_turmoil() {
    use standins::{PaymentProcessor, WebhookPlan};
    const SECRET: &str = "webhook-secret";
    let mut sim = sim_builder(21);
    let payments = PaymentProcessor::new(
        SECRET,
        Endpoint::parse(&format!("http://{RELAY}:{PORT}")).unwrap(),
    );
    sim.host(RELAY, || async {
        let config = Config {
            payment_webhook_secret: relay_core::config::WebhookSecret(SECRET.into()),
            ..config()
        };
        RelayServer::in_memory(config, SEED, MemoryStore::new(), MemoryBlobStore::new())
            .with_clock(SimClock::default())
            .run::<Turmoil>(
                SocketAddr::from((Ipv4Addr::UNSPECIFIED, PORT)),
                std::future::pending(),
            )
            .await?;
        Ok(())
    });
    let processor = payments.clone();
    sim.host("payments", move || {
        let processor = processor.clone();
        async move {
            let addr = SocketAddr::from((Ipv4Addr::UNSPECIFIED, 9100));
            processor
                .run::<Turmoil>(addr, std::future::pending())
                .await?;
            Ok(())
        }
    });
    let paying = payments;
    sim.client("clients", async move {
        let plan = WebhookPlan {
            forged: 1,
            duplicates: 1,
            duplicate_spacing_ms: 100,
            ..WebhookPlan::paid(10)
        };
        paying
            .pay(wire::OrderId::parse("order-unknown").unwrap(), plan)
            .unwrap();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let deliveries = paying.deliveries();
        let forged: Vec<_> = deliveries.iter().filter(|d| d.forged).collect();
        let genuine: Vec<_> = deliveries.iter().filter(|d| !d.forged).collect();
        assert_eq!(forged.len(), 1, "{deliveries:?}");
        assert_eq!(forged[0].status, Some(401));
        assert!(!genuine.is_empty(), "{deliveries:?}");
        assert!(
            genuine.iter().all(|d| d.status.is_some_and(|s| s != 401)),
            "{deliveries:?}"
        );
        // The invoice page shows the payment.
        let invoices = HttpClient::new(
            Turmoil::connector(),
            Endpoint::parse("http://payments:9100").unwrap(),
        );
        let page: Value = invoices
            .send(HttpRequest::get("/invoice/order-unknown"))
            .await
            .unwrap()
            .json()
            .unwrap();
        assert_eq!(page["status"], "paid");
        Ok(())
    });
    sim.run().unwrap();
}

/// A failed commit stops the relay (503, nothing acknowledged); the server rebuilds it from
/// the store and the next request succeeds.
#[tokio::test]
async fn failed_commit_rebuilds_the_relay_from_the_store() {
    let listener = Tokio::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let store = MemoryStore::new();
    let server = RelayServer::in_memory(config(), SEED, store.clone(), MemoryBlobStore::new());
    let server = tokio::spawn(server.serve::<Tokio>(listener, std::future::pending()));
    let http = HttpClient::new(Tokio::connector(), Endpoint::from(addr));
    let alice = register(&http, 1, "alice").await;
    let bob = register(&http, 2, "bob").await;
    let request = json!({"to_alias_id": bob.alias});
    store.fail_commits(1);
    let (status, v) = post(
        &http,
        "/api/v1/friends/request",
        &request,
        Some(&alice.token),
    )
    .await;
    assert_eq!(
        (status, v["error"].as_str()),
        (503, Some("STORAGE_UNAVAILABLE"))
    );
    // Rebuilt from the store: the token (signing key, current session) survived.
    let (status, v) = post(
        &http,
        "/api/v1/friends/request",
        &request,
        Some(&alice.token),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    server.abort();
}

// ---- test mode: the clock hook

/// The test-mode clock route: answers the new time, fires due timers (an idle socket is closed
/// before the answer) and moves every time-based rule (a token expires).
async fn clock_hook_check<C: Connector>(http: &HttpClient<C>) {
    const ADVANCE: &str = relay_server::ADVANCE_CLOCK_PATH;
    let (status, first) = post(http, ADVANCE, &json!({"ms": 1_000}), None).await;
    assert_eq!(status, 200, "{first}");
    let first = first["now_ms"].as_u64().expect("now_ms");
    let (status, again) = post(http, ADVANCE, &json!({"ms": 0}), None).await;
    assert_eq!(status, 200, "{again}");
    assert!(
        again["now_ms"].as_u64().unwrap() >= first,
        "never backwards"
    );
    let (status, bad) = post(http, ADVANCE, &json!({"ms": -5}), None).await;
    assert_eq!((status, bad["error"].as_str()), (400, Some("INVALID_JSON")));

    let dave = register(http, 4, "dave").await;
    let mut ws = open_ws(http, &dave).await;
    // Past the 90 s idle timeout: the core closes the socket before it answers.
    let (status, moved) = post(http, ADVANCE, &json!({"ms": 91_000}), None).await;
    assert_eq!(status, 200, "{moved}");
    assert!(moved["now_ms"].as_u64().unwrap() >= first + 91_000);
    let closed = next_frame(&mut ws).await;
    assert!(
        closed.get("closed").is_some(),
        "idle socket closed: {closed}"
    );
    // Past the 24 h token lifetime: the token is refused.
    let (status, _) = post(http, ADVANCE, &json!({"ms": 24 * 3_600_000}), None).await;
    assert_eq!(status, 200);
    let (status, refused) = post(http, "/api/v1/ws/ticket", &json!({}), Some(&dave.token)).await;
    assert_eq!(
        (status, refused["error"].as_str()),
        (401, Some("TOKEN_EXPIRED"))
    );
}

#[tokio::test]
async fn test_mode_clock_hook_on_loopback() {
    use relay_server::embedded::{TestRelayOptions, start_test_relay};
    let relay = start_test_relay::<Tokio>(TestRelayOptions::default())
        .await
        .unwrap();
    assert_eq!(relay.clock_path, relay_server::ADVANCE_CLOCK_PATH);
    let http = HttpClient::new(Tokio::connector(), Endpoint::from(relay.addr));
    clock_hook_check(&http).await;
    drop(http);
    relay.stop().await;
}

#[test]
fn test_mode_clock_hook_on_turmoil() {
    use relay_server::embedded::{TestClock, TestRelayOptions, test_relay_server};
    let mut sim = sim_builder(13);
    sim.host(RELAY, || async {
        let options = TestRelayOptions {
            clock: TestClock::Sim,
            ..TestRelayOptions::default()
        };
        test_relay_server(&options)
            .run::<Turmoil>(
                SocketAddr::from((Ipv4Addr::UNSPECIFIED, PORT)),
                std::future::pending(),
            )
            .await?;
        Ok(())
    });
    sim.client("clients", async {
        clock_hook_check(&sim_http()).await;
        Ok(())
    });
    sim.run().unwrap();
}

#[tokio::test]
async fn without_test_mode_the_clock_route_is_unknown() {
    let listener = Tokio::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let server = RelayServer::in_memory(config(), SEED, MemoryStore::new(), MemoryBlobStore::new());
    assert!(!server.is_test_mode());
    let stop = Arc::new(Notify::new());
    let stopped = Arc::clone(&stop);
    let task = tokio::spawn(server.serve::<Tokio>(listener, async move {
        stopped.notified().await;
    }));
    let http = HttpClient::new(Tokio::connector(), Endpoint::from(addr));
    let (status, body) = post(
        &http,
        relay_server::ADVANCE_CLOCK_PATH,
        &json!({"ms": 1_000}),
        None,
    )
    .await;
    assert_eq!((status, body["error"].as_str()), (404, Some("NOT_FOUND")));
    drop(http);
    stop.notify_one();
    task.await.unwrap().unwrap();
}

/// The same scenario on a sharded server: two, five, seven and eight relay cores over one store,
/// each serving its shard's accounts, with friendships decided by the pair's owner core, the
/// registration by the registry core, and messages, receipts and typing notices crossing
/// between cores. Clients see exactly what an unsharded relay shows them.
#[tokio::test]
async fn sharded_relay_on_loopback_sockets() {
    // With this seed the two clients share shard 1 of 2, are on shards 3 and 4 of 5, share
    // shard 0 of 7 (the registry's), and are on shards 7 and 3 of 8: on one core, on two,
    // on the core that also decides registrations.
    let mut placements = Vec::new();
    for shards in [2, 5, 7, 8] {
        let server = sharded_server(shards);
        let users = scenario_and_shutdown_on_loopback(server, &format!("{shards} shards")).await;
        let map = relay_core::handoff::ShardMap::new(shards).unwrap();
        placements.push(users.map(|u| map.of_user(&wire::UserUuid::parse(&u).unwrap()).0));
    }
    assert_eq!(
        placements,
        [[1, 1], [3, 4], [0, 0], [7, 3]],
        "the clients' shards"
    );
}

/// The test server (memory stores) on `shards` cores.
fn sharded_server(shards: u16) -> RelayServer {
    RelayServer::in_memory_sharded(
        shards,
        config(),
        SEED,
        MemoryStore::new(),
        MemoryBlobStore::new(),
    )
}

/// The same scenario with each core on a thread of its own (thread per core): every socket
/// moves to its core's thread after its upgrade and is served there, through the shutdown's
/// GOAWAY; on one core and on three.
#[tokio::test]
async fn thread_per_core_relay_on_loopback_sockets() {
    for shards in [1, 3] {
        let server = sharded_server(shards).with_core_threads();
        let moved = server.sockets_on_core_threads();
        let label = format!("{shards} core threads");
        scenario_and_shutdown_on_loopback(server, &label).await;
        let moved = moved.load(std::sync::atomic::Ordering::Relaxed);
        assert!(
            moved >= 2,
            "{label}: {moved} sockets served on a core's thread"
        );
    }
}

/// A sharded server with push delivery stops as soon as it is asked, on the shared runtime
/// and with its cores on threads: nothing the server keeps (the task that routes the push
/// worker's gone reports to their users' cores) holds a core's inputs, which would keep the
/// cores waiting until the drain deadline (10 s).
#[tokio::test]
async fn a_sharded_server_with_push_stops_without_waiting_for_the_drain_deadline() {
    for core_threads in [false, true] {
        let options = relay_server::embedded::TestRelayOptions {
            shards: 2,
            core_threads,
            web_push: true,
            ..Default::default()
        };
        let relay = relay_server::embedded::start_test_relay::<Tokio>(options)
            .await
            .unwrap();
        let stopped = tokio::time::timeout(Duration::from_secs(3), relay.stop()).await;
        assert!(
            stopped.is_ok(),
            "core threads {core_threads}: not stopped within 3 s"
        );
    }
}

/// A socket whose client never answers the shutdown's close is still open when the drain
/// deadline (here shorter than the close's linger) passes: its core's thread stops then, and
/// the socket closes with it (nothing of the server runs on after it returned).
#[tokio::test]
async fn a_core_thread_stops_at_the_drain_deadline_with_the_sockets_it_still_serves() {
    use tokio::io::AsyncReadExt as _;
    let server = sharded_server(2)
        .with_core_threads()
        .with_drain_deadline(300);
    let (http, stop, server) = serve_on_loopback(server).await;
    let carol = register(&http, 3, "carol").await;
    let mut ws = open_ws(&http, &carol).await;
    stop.notify_one();
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("the server stops at its drain deadline")
        .unwrap()
        .unwrap();
    // Read below the WebSocket, which would answer the close: the GOAWAY and the close
    // frame come, then the end of the stream.
    let tcp = ws.get_mut();
    // (Left to itself, its socket task would wait for the close reply for 2 s, the linger.)
    let ended = tokio::time::timeout(Duration::from_secs(1), async {
        let mut buf = [0u8; 4096];
        while tcp.read(&mut buf).await.is_ok_and(|n| n > 0) {}
    })
    .await;
    assert!(
        ended.is_ok(),
        "the socket is closed once the deadline passed"
    );
}
