//! What a hostile client does on real loopback sockets: drip a request body, close its
//! WebSocket and expect an answer, stop reading quietly, and aim push subscriptions into the
//! relay's own network (by address, or by a name that later resolves there). Nothing here
//! sends traffic beyond 127.0.0.1: test resolvers answer names, and public addresses they
//! return are only ever checked, never connected to.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::{SinkExt as _, StreamExt as _};
use relay_core::{Config, MemoryBlobStore, store::MemoryStore};
use relay_push::dns::{BoxFuture, Resolve, StaticResolver};
use relay_server::RelayServer;
use relay_server::metrics::Metrics;
use seam::net::{ConnectionCounter, Listener as _, Network, ServeLimits, Tokio};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

mod common;
use common::{Account, FromAddr, account, befriend, client, connect};

struct Running {
    addr: SocketAddr,
    connections: ConnectionCounter,
    /// What the server counts (attached by [`start`]).
    metrics: Metrics,
    stop: Arc<Notify>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Running {
    async fn stop(self) {
        self.stop.notify_one();
        let _ = tokio::time::timeout(Duration::from_secs(10), self.task).await;
    }
}

async fn start(server: RelayServer) -> Running {
    let listener = Tokio::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let connections = server.connections();
    let metrics = Metrics::new();
    let server = server.with_metrics(metrics.clone());
    let (stop, task) = common::serve_until_notified(server, listener);
    Running {
        addr,
        connections,
        metrics,
        stop,
        task,
    }
}

fn server(config: Config, limits: ServeLimits) -> RelayServer {
    RelayServer::in_memory(
        Config {
            pow_difficulty: 0,
            ..config
        },
        5,
        MemoryStore::new(),
        MemoryBlobStore::new(),
    )
    .with_limits(limits)
}

async fn wait_open(c: &ConnectionCounter, n: usize, within: Duration) -> bool {
    let step = Duration::from_millis(10);
    for _ in 0..within.as_millis() / step.as_millis() {
        if c.open() == n {
            return true;
        }
        tokio::time::sleep(step).await;
    }
    c.open() == n
}

/// The real clock: these tests measure how long the relay takes to close a connection on real
/// sockets.
#[allow(
    clippy::disallowed_methods,
    reason = "the bound under test is wall-clock time on loopback sockets"
)]
fn wall_clock() -> std::time::Instant {
    std::time::Instant::now()
}

/// A body dripped a byte at a time is answered 408 `BODY_TIMEOUT` and its connection closed
/// at the body deadline; a body sent at a normal pace is not.
#[tokio::test]
async fn a_dripped_request_body_is_answered_408_and_closed() {
    let r = start(server(
        Config::default(),
        ServeLimits {
            body_read_timeout_ms: 500,
            body_min_bytes_per_s: 1024,
            ..ServeLimits::default()
        },
    ))
    .await;
    let s = TcpStream::connect(r.addr).await.unwrap();
    let (mut rd, mut wr) = s.into_split();
    wr.write_all(
        b"POST /api/v1/pow/challenge HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 64\r\n\r\n{",
    )
    .await
    .unwrap();
    let started = wall_clock();
    let drip = async {
        for _ in 0..60 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if wr.write_all(b" ").await.is_err() {
                break;
            }
        }
    };
    let mut answer = Vec::new();
    let read = async {
        let mut buf = [0u8; 1024];
        loop {
            match rd.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
        }
    };
    tokio::select! {
        () = read => {}
        () = async { drip.await; tokio::time::sleep(Duration::from_secs(5)).await } => {}
    }
    let took = started.elapsed();
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("BODY_TIMEOUT"), "{text}");
    assert!(
        took < Duration::from_secs(3),
        "closed after {took:?}, the deadline is ~0.5 s"
    );
    // A normal body still works.
    let http = client(r.addr, FromAddr(Ipv4Addr::LOCALHOST));
    let resp = http
        .send(
            seam::net::HttpRequest::new(http::Method::POST, "/api/v1/pow/challenge")
                .json(&json!({}))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.status, 200);
    r.stop().await;
}

/// RFC 6455 §5.5.1: a client's Close is answered with a Close carrying its code, so a client
/// that disconnects on purpose sees 1000, not 1006.
#[tokio::test]
async fn a_clients_close_is_answered_with_its_code() {
    let r = start(server(Config::default(), ServeLimits::default())).await;
    let a = account(r.addr, FromAddr(Ipv4Addr::LOCALHOST), 1).await;
    let (mut ws, _) = connect(r.addr, &a).await;
    ws.send(Message::Close(Some(CloseFrame {
        code: CloseCode::Normal,
        reason: "bye".into(),
    })))
    .await
    .unwrap();
    let mut answer = None;
    let read = async {
        while let Some(m) = ws.next().await {
            match m {
                Ok(Message::Close(frame)) => {
                    answer = Some(frame);
                    break;
                }
                Ok(_) => {}
                Err(e) => panic!("no close handshake: {e}"),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .expect("an answer");
    let frame = answer.expect("a close frame").expect("with a code");
    assert_eq!(frame.code, CloseCode::Normal);
    // Then the relay closes the TCP connection.
    assert!(wait_open(&r.connections, 0, Duration::from_secs(5)).await);
    r.stop().await;
}

/// A server whose write deadline is `deadline_ms`, with two friends on it (from two addresses)
/// and their conversation.
async fn friends_with_deadline(deadline_ms: u64) -> (Running, Account, Account, String) {
    let r = start(server(
        Config::default(),
        ServeLimits {
            write_deadline_ms: deadline_ms,
            ..ServeLimits::default()
        },
    ))
    .await;
    let a = account(r.addr, FromAddr(Ipv4Addr::new(127, 0, 0, 1)), 1).await;
    let b = account(r.addr, FromAddr(Ipv4Addr::new(127, 0, 0, 2)), 2).await;
    let conv = befriend(r.addr, &a, &b).await;
    (r, a, b, conv)
}

/// A client that stops reading (and sending) while its buffers still absorb what the relay
/// writes is closed at the write deadline, not at the 90 s idle timeout; a client that keeps
/// reading is not.
#[tokio::test]
async fn a_quietly_stuck_reader_is_closed_at_the_write_deadline() {
    const DEADLINE_MS: u64 = 500;
    let (r, a, b, conv) = friends_with_deadline(DEADLINE_MS).await;
    let (stuck, _) = connect(r.addr, &b).await;
    let (mut ws, _) = connect(r.addr, &a).await;
    assert!(wait_open(&r.connections, 2, Duration::from_secs(5)).await);
    ws.send(Message::text(
        json!({"type":"msg","id":"m1","to":b.alias,"conv_id":conv,"crypto_v":1,"payload":"aGk="})
            .to_string(),
    ))
    .await
    .unwrap();
    // a keeps reading (and so answers the relay's pings).
    let reader = tokio::spawn(async move {
        while let Some(Ok(m)) = ws.next().await {
            if let Message::Close(_) = m {
                break;
            }
        }
    });
    let started = wall_clock();
    assert!(
        wait_open(&r.connections, 1, Duration::from_secs(10)).await,
        "the stuck reader is still open after {:?}",
        started.elapsed()
    );
    let took = started.elapsed();
    assert!(
        took < Duration::from_millis(DEADLINE_MS * 6),
        "closed after {took:?}"
    );
    tokio::time::sleep(Duration::from_millis(DEADLINE_MS * 4)).await;
    assert_eq!(r.connections.open(), 1, "the reading client stays");
    drop(stuck);
    reader.abort();
    r.stop().await;
}

/// A `GET /ws` that is not a valid WebSocket handshake is refused 400 `BAD_REQUEST` with a
/// message naming what is wrong, before authentication; a valid one without credentials gets
/// the relay's own refusal.
#[tokio::test]
async fn a_broken_websocket_handshake_is_refused_with_a_code() {
    let r = start(server(Config::default(), ServeLimits::default())).await;
    let ok = "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n";
    let cases = [
        ("", "Connection"),
        ("Connection: keep-alive, Upgrade\r\n", "Upgrade header"),
        ("Connection: Upgrade\r\nUpgrade: h2c\r\n", "Upgrade header"),
        (
            "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 8\r\n",
            "Version",
        ),
        (
            "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n",
            "Key",
        ),
    ];
    for (headers, names) in cases {
        let answer = raw_get(r.addr, headers).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{headers:?}: {answer}");
        assert!(answer.contains("\"BAD_REQUEST\""), "{headers:?}: {answer}");
        assert!(answer.contains(names), "{headers:?}: {answer}");
    }
    let answer = raw_get(r.addr, ok).await;
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    r.stop().await;
}

/// `GET /ws` with `headers` on a fresh connection: the answer's head and body.
async fn raw_get(addr: SocketAddr, headers: &str) -> String {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let request = format!("GET /ws HTTP/1.1\r\nHost: relay\r\n{headers}\r\n");
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut answer = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut answer))
        .await
        .unwrap()
        .unwrap();
    String::from_utf8_lossy(&answer[..n]).into_owned()
}

/// A `msg` frame from a to b.
fn msg(n: usize, to: &str, conv: &str) -> Message {
    Message::text(
        json!({"type":"msg","id":format!("m{n}"),"to":to,"conv_id":conv,"crypto_v":1,"payload":"aGk="})
            .to_string(),
    )
}

/// A busy socket is not pinged once per write: the pings that ride with writes are at least
/// a second apart, so a burst of messages read one by one brings one or two.
#[tokio::test]
async fn a_busy_socket_is_pinged_about_once_a_second() {
    let r = start(server(Config::default(), ServeLimits::default())).await;
    let a = account(r.addr, FromAddr(Ipv4Addr::new(127, 0, 0, 1)), 1).await;
    let b = account(r.addr, FromAddr(Ipv4Addr::new(127, 0, 0, 2)), 2).await;
    let conv = befriend(r.addr, &a, &b).await;
    let (mut reader, _) = connect(r.addr, &b).await;
    let (mut sender, _) = connect(r.addr, &a).await;
    const MESSAGES: usize = 40;
    let (mut msgs, mut pings) = (0, 0);
    let started = wall_clock();
    for n in 0..MESSAGES {
        sender.send(msg(n, &b.alias, &conv)).await.unwrap();
        // Each read before the next send: every frame is a write of its own.
        loop {
            match tokio::time::timeout(Duration::from_secs(10), reader.next()).await {
                Ok(Some(Ok(Message::Ping(_)))) => pings += 1,
                Ok(Some(Ok(Message::Text(t)))) if t.as_str().contains("\"msg\"") => {
                    msgs += 1;
                    break;
                }
                Ok(Some(Ok(_))) => {}
                other => panic!("b's socket: {other:?}"),
            }
        }
    }
    let took = started.elapsed();
    assert_eq!(msgs, MESSAGES);
    let most = 2 + usize::try_from(took.as_millis() / 1_000).unwrap();
    assert!(
        (1..=most).contains(&pings),
        "{pings} pings over {MESSAGES} writes in {took:?}"
    );
    r.stop().await;
}

/// A client that read and answered pings, then stopped reading, is found by the next ping that
/// rides with a write once the gap after the last one has passed: closed within the gap and
/// the deadline.
#[tokio::test]
async fn a_reader_that_stops_midway_is_closed_within_the_gap_and_the_deadline() {
    const DEADLINE_MS: u64 = 400;
    let (r, a, b, conv) = friends_with_deadline(DEADLINE_MS).await;
    let (mut stops, _) = connect(r.addr, &b).await;
    let (mut ws, _) = connect(r.addr, &a).await;
    assert!(wait_open(&r.connections, 2, Duration::from_secs(5)).await);
    // b reads its first message (and answers the ping that came with it), then stops.
    ws.send(msg(0, &b.alias, &conv)).await.unwrap();
    loop {
        match tokio::time::timeout(Duration::from_secs(10), stops.next()).await {
            Ok(Some(Ok(Message::Text(t)))) if t.as_str().contains("\"msg\"") => break,
            Ok(Some(Ok(_))) => {}
            other => panic!("b's socket: {other:?}"),
        }
    }
    // The pong goes out with the next read or flush.
    stops.flush().await.unwrap();
    let stopped = wall_clock();
    // a keeps writing to b (and reads its acks, so it answers its own pings).
    let (mut sink, mut stream) = ws.split();
    let reader = tokio::spawn(async move { while let Some(Ok(_)) = stream.next().await {} });
    let writer = tokio::spawn(async move {
        for n in 1..200 {
            if sink.send(msg(n, &b.alias, &conv)).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    assert!(
        wait_open(&r.connections, 1, Duration::from_secs(10)).await,
        "the reader that stopped is still open after {:?}",
        stopped.elapsed()
    );
    let took = stopped.elapsed();
    // At most the gap (the deadline here) after the last ping, then the deadline: a margin
    // of two more for a loaded machine.
    assert!(
        took < Duration::from_millis(DEADLINE_MS * 4),
        "closed after {took:?}"
    );
    assert!(
        took >= Duration::from_millis(DEADLINE_MS),
        "closed after {took:?}, before the deadline"
    );
    // Counted as the relay's close of a client too slow to read, not as a client gone.
    let exposition = r.metrics.encode();
    assert!(
        exposition.contains(r#"relay_websocket_closes_total{reason="too_slow"} 1"#),
        "{exposition}"
    );
    let client_gone = exposition
        .lines()
        .filter_map(|l| l.strip_prefix(r#"relay_websocket_closes_total{reason="client_gone"} "#))
        .map(|v| v.trim().parse::<f64>().unwrap())
        .sum::<f64>();
    assert!(client_gone == 0.0, "{exposition}");
    writer.abort();
    reader.abort();
    drop(stops);
    r.stop().await;
}

fn subscription(endpoint: &str) -> Value {
    use base64::Engine as _;
    let url = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let key = relay_push::VapidKey::generate(
        &mut <rand_chacha::ChaCha20Rng as rand_core::SeedableRng>::seed_from_u64(7),
    );
    json!({"endpoint": endpoint, "keys": {"p256dh": key.public_key_b64url(), "auth": url.encode([3u8; 16])}})
}

async fn subscribe(relay: SocketAddr, token: &str, endpoint: &str) -> (u16, Value) {
    let http = client(relay, FromAddr(Ipv4Addr::LOCALHOST));
    let req = seam::net::HttpRequest::new(http::Method::POST, "/api/v1/push/subscribe")
        .json(&subscription(endpoint))
        .unwrap()
        .bearer(token);
    let resp = http.send(req).await.unwrap();
    (
        resp.status.as_u16(),
        serde_json::from_slice(&resp.body).unwrap_or(Value::Null),
    )
}

/// At subscription, the server resolves a named endpoint host and the relay refuses it when
/// any address is not public; every literal form is refused without any resolution.
#[tokio::test]
async fn push_subscriptions_are_checked_against_the_resolved_addresses() {
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    let resolver = StaticResolver::new()
        .with("rebind.example.net", &[ip("127.0.0.1")])
        .with("meta.example.net", &[ip("169.254.169.254")])
        .with("mixed.example.net", &[ip("93.184.216.34"), ip("10.0.0.1")])
        .with("push.example.net", &[ip("93.184.216.34")]);
    let r = start(
        server(Config::default(), ServeLimits::default())
            .with_endpoint_resolver(Arc::new(resolver)),
    )
    .await;
    let a = account(r.addr, FromAddr(Ipv4Addr::LOCALHOST), 1).await;
    for host in [
        "rebind.example.net",
        "meta.example.net",
        "mixed.example.net",
        "127.0.0.1",
        "localhost",
        "[::1]",
        "[::ffff:127.0.0.1]",
        "127.1",
        "0x7f000001",
        "0.0.0.0",
        "[::]",
        "10.0.0.1",
        "192.168.1.1",
        "169.254.169.254",
    ] {
        let (status, body) = subscribe(r.addr, &a.token, &format!("https://{host}/w/1")).await;
        assert_eq!(
            (status, body["error"].as_str()),
            (400, Some("PUSH_ENDPOINT_FORBIDDEN")),
            "{host}: {body}"
        );
    }
    let (status, body) = subscribe(r.addr, &a.token, "https://nowhere.example.net/w/1").await;
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("PUSH_ENDPOINT_UNRESOLVABLE"))
    );
    let (status, body) = subscribe(r.addr, &a.token, "https://push.example.net/w/1").await;
    assert_eq!(status, 200, "{body}");
    r.stop().await;
}

/// Answers a public address the first time a name is resolved and loopback ever after: DNS
/// rebinding between the subscription check and the push.
#[derive(Debug, Default)]
struct Rebinding {
    calls: AtomicUsize,
}

impl Resolve for Rebinding {
    fn resolve<'a>(&'a self, _host: &'a str) -> BoxFuture<'a, std::io::Result<Vec<IpAddr>>> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        let ip: IpAddr = if n == 0 {
            "93.184.216.34".parse().unwrap()
        } else {
            Ipv4Addr::LOCALHOST.into()
        };
        Box::pin(async move { Ok(vec![ip]) })
    }
}

/// A name that resolved to a public address at subscription and to loopback when the push
/// is due: the push is refused before any connection (a listener on loopback sees none), and
/// not retried.
#[tokio::test]
async fn a_name_rebound_to_loopback_is_never_connected_to() {
    use relay_push::{HttpsTransport, VapidKey, VapidSubject, WebPushConfig, WorkerConfig};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let hellos = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&hellos);
    tokio::spawn(async move {
        while let Ok((_s, _)) = listener.accept().await {
            seen.fetch_add(1, Ordering::SeqCst);
        }
    });
    let resolver = Arc::new(Rebinding::default());
    let transport = HttpsTransport::new()
        .unwrap()
        .with_resolver(resolver.clone())
        .unwrap();
    let key = VapidKey::generate(
        &mut <rand_chacha::ChaCha20Rng as rand_core::SeedableRng>::seed_from_u64(1),
    );
    let worker = WorkerConfig {
        web_push: Some(WebPushConfig::new(
            key,
            VapidSubject::parse("mailto:ops@example.org").unwrap(),
        )),
        ..WorkerConfig::default()
    };
    let delivery = relay_server::PushDelivery::over_https(worker, transport, [9; 32]);
    let mut config = Config {
        pow_difficulty: 0,
        ..Config::default()
    };
    delivery.configure(&mut config);
    let r = start(
        RelayServer::in_memory(config, 5, MemoryStore::new(), MemoryBlobStore::new())
            .with_push(delivery),
    )
    .await;
    let a = account(r.addr, FromAddr(Ipv4Addr::new(127, 0, 0, 1)), 1).await;
    let b = account(r.addr, FromAddr(Ipv4Addr::new(127, 0, 0, 2)), 2).await;
    let conv = befriend(r.addr, &a, &b).await;
    let endpoint = format!("https://push.example.net:{port}/wpush/1");
    let (status, body) = subscribe(r.addr, &b.token, &endpoint).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(resolver.calls.load(Ordering::SeqCst), 1);
    // b is offline: a's message makes a push due.
    let (mut ws, _) = connect(r.addr, &a).await;
    ws.send(Message::text(
        json!({"type":"msg","id":"m1","to":b.alias,"conv_id":conv,"crypto_v":1,"payload":"aGk="})
            .to_string(),
    ))
    .await
    .unwrap();
    for _ in 0..500 {
        if resolver.calls.load(Ordering::SeqCst) >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(
        resolver.calls.load(Ordering::SeqCst),
        2,
        "the push resolved the name once and was not retried"
    );
    assert_eq!(
        hellos.load(Ordering::SeqCst),
        0,
        "a connection reached loopback"
    );
    drop(ws);
    r.stop().await;
}

/// A store whose commits are fenced once the test says so (another relay took over).
#[derive(Debug)]
struct Fenceable {
    inner: MemoryStore,
    fenced: Arc<std::sync::atomic::AtomicBool>,
}

impl relay_core::store::Store for Fenceable {
    fn load(&mut self) -> Result<relay_core::store::Snapshot, relay_core::store::StoreError> {
        self.inner.load()
    }
    fn commit(
        &mut self,
        batch: &relay_core::store::Batch,
    ) -> Result<(), relay_core::store::StoreError> {
        if self.fenced.load(Ordering::SeqCst) {
            return Err(relay_core::store::StoreError::Fenced { epoch: 1 });
        }
        self.inner.commit(batch)
    }
    fn reader(
        &mut self,
    ) -> Result<Box<dyn relay_core::store::StoreRead>, relay_core::store::StoreError> {
        self.inner.reader()
    }
}

/// Leads once (then stands by for good) over a [`Fenceable`] store.
struct OneTerm {
    fenced: Arc<std::sync::atomic::AtomicBool>,
    led: bool,
}

impl relay_server::leadership::Leadership for OneTerm {
    fn campaign(&mut self) -> relay_server::leadership::CampaignFuture<'_> {
        Box::pin(async move {
            if self.led {
                std::future::pending::<()>().await;
            }
            self.led = true;
            let end = relay_server::leadership::TermEnd::new();
            let (store, fenced, term_end) =
                (MemoryStore::new(), Arc::clone(&self.fenced), end.clone());
            let open = move || {
                let store = relay_server::leadership::TermStore::new(
                    Fenceable {
                        inner: store.clone(),
                        fenced: Arc::clone(&fenced),
                    },
                    term_end.clone(),
                );
                relay_core::Relay::with_blobs(
                    Config {
                        pow_difficulty: 0,
                        ..Config::default()
                    },
                    Box::new(store),
                    Box::new(MemoryBlobStore::new()),
                    7,
                )
            };
            Ok(relay_server::leadership::Term {
                open: Box::new(open),
                end,
                epoch: Some(1),
                holder: Box::new(()),
            })
        })
    }
}

/// A leader whose commit is fenced closes its sockets with 1012 "not the leader", as the
/// README says (not 1011 "relay restarting").
#[tokio::test]
async fn a_fenced_leader_closes_its_sockets_with_1012() {
    let fenced = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let r = start(RelayServer::campaigning(OneTerm {
        fenced: Arc::clone(&fenced),
        led: false,
    }))
    .await;
    let http = client(r.addr, FromAddr(Ipv4Addr::LOCALHOST));
    for _ in 0..500 {
        let ready = http
            .send(seam::net::HttpRequest::new(http::Method::GET, "/readyz"))
            .await
            .is_ok_and(|r| r.status == 200);
        if ready {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let a = account(r.addr, FromAddr(Ipv4Addr::new(127, 0, 0, 1)), 1).await;
    let b = account(r.addr, FromAddr(Ipv4Addr::new(127, 0, 0, 2)), 2).await;
    let conv = befriend(r.addr, &a, &b).await;
    let (mut ws, _) = connect(r.addr, &a).await;
    fenced.store(true, Ordering::SeqCst);
    ws.send(Message::text(
        json!({"type":"msg","id":"m1","to":b.alias,"conv_id":conv,"crypto_v":1,"payload":"aGk="})
            .to_string(),
    ))
    .await
    .unwrap();
    let mut code = None;
    let read = async {
        while let Some(Ok(m)) = ws.next().await {
            if let Message::Close(frame) = m {
                code = frame.map(|f| u16::from(f.code));
                break;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .expect("a close frame");
    assert_eq!(code, Some(1012));
    r.stop().await;
}
