//! A minimal raw client for the server tests on loopback that need exact bytes or their own
//! allocations: accounts over HTTP (PoW off), tickets, WebSockets with chosen buffer sizes,
//! each from a chosen loopback source address.
#![allow(dead_code, reason = "each test binary uses part of it")]

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use client_core::encoding::to_base64;
use client_core::keys::{EcdhKeyPair, SigningKeyPair};
use futures_util::{SinkExt as _, StreamExt as _};
use seam::net::{Connector, Endpoint, HttpClient, HttpRequest};
use serde_json::{Value, json};
use tokio::net::{TcpSocket, TcpStream};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

/// Connects from a chosen loopback source address (so a test can look for it in logs, or
/// stay under per-address limits).
#[derive(Debug, Clone, Copy)]
pub(crate) struct FromAddr(pub(crate) Ipv4Addr);

impl Connector for FromAddr {
    type Stream = TcpStream;

    async fn connect(&self, endpoint: &Endpoint) -> io::Result<TcpStream> {
        let ip: IpAddr = endpoint.host().parse().map_err(io::Error::other)?;
        let socket = TcpSocket::new_v4()?;
        socket.bind(SocketAddr::from((self.0, 0)))?;
        let stream = socket
            .connect(SocketAddr::from((ip, endpoint.port())))
            .await?;
        stream.set_nodelay(true)?;
        Ok(stream)
    }
}

/// A client WebSocket of these tests.
pub(crate) type Ws = WebSocketStream<TcpStream>;

/// A registered, logged-in account.
#[derive(Debug)]
pub(crate) struct Account {
    pub(crate) uuid: String,
    pub(crate) alias: String,
    pub(crate) token: String,
    pub(crate) from: FromAddr,
}

/// A JSON request that must answer 2xx; returns the body.
pub(crate) async fn call(
    http: &HttpClient<FromAddr>,
    method: http::Method,
    path: &str,
    body: &Value,
    token: Option<&str>,
) -> Value {
    let mut req = HttpRequest::new(method, path)
        .json(body)
        .expect("json body");
    if let Some(token) = token {
        req = req.bearer(token);
    }
    let resp = http.send(req).await.expect("http response");
    assert!(resp.status.is_success(), "{path}: {}", resp.status);
    serde_json::from_slice(&resp.body).expect("json answer")
}

/// Makes `a` and `b` friends (`a` asks, `b` accepts, each from its own address); returns
/// their conversation id.
pub(crate) async fn befriend(relay: SocketAddr, a: &Account, b: &Account) -> String {
    let request = call(
        &client(relay, a.from),
        http::Method::POST,
        "/api/v1/friends/request",
        &json!({"to_alias_id": b.alias}),
        Some(&a.token),
    )
    .await;
    let id = &request["friendship_id"];
    let id = id.as_str().map_or_else(|| id.to_string(), str::to_owned);
    let accepted = call(
        &client(relay, b.from),
        http::Method::PUT,
        &format!("/api/v1/friends/{id}/accept"),
        &json!({}),
        Some(&b.token),
    )
    .await;
    accepted["conversation_id"]
        .as_str()
        .expect("the accept answers the conversation id")
        .to_owned()
}

/// Registers account number `k` (keys derived from it) from `from` on a relay whose PoW is
/// off, and logs it in.
pub(crate) async fn account(relay: SocketAddr, from: FromAddr, k: u8) -> Account {
    let http = client(relay, from);
    let signing = SigningKeyPair::from_private_bytes(&[k; 32]);
    let mut x = [0x5a; 32];
    x[8] = k;
    let ecdh = EcdhKeyPair::from_private_bytes(x);
    let post = http::Method::POST;
    let reg = call(
        &http,
        post.clone(),
        "/api/v1/register",
        &json!({
            "ed25519_public_key": to_base64(&signing.public_key()),
            "x25519_public_key": to_base64(&ecdh.public_key()),
            "nickname": format!("user{k}"),
            "pow_nonce": "0",
        }),
        None,
    )
    .await;
    let uuid = reg["uuid"].as_str().expect("uuid").to_owned();
    let alias = reg["alias_id"].as_str().expect("alias").to_owned();
    let ch = call(
        &http,
        post.clone(),
        "/api/v1/auth/challenge",
        &json!({"user_uuid": uuid}),
        None,
    )
    .await;
    let challenge = ch["challenge"].as_str().expect("challenge");
    let signature = to_base64(&signing.sign(challenge.as_bytes()));
    let v = call(
        &http,
        post,
        "/api/v1/auth/verify",
        &json!({"user_uuid": uuid, "challenge": challenge, "signature": signature}),
        None,
    )
    .await;
    Account {
        uuid,
        alias,
        token: v["token"].as_str().expect("token").to_owned(),
        from,
    }
}

/// An HTTP client to `relay` from `from`.
pub(crate) fn client(relay: SocketAddr, from: FromAddr) -> HttpClient<FromAddr> {
    let endpoint = Endpoint::parse(&format!("http://{relay}")).expect("endpoint");
    HttpClient::new(from, endpoint)
}

/// Ticket, upgrade with 1 KiB client buffers, `sync`; also returns the ticket.
pub(crate) async fn connect(
    relay: SocketAddr,
    a: &Account,
) -> (WebSocketStream<TcpStream>, String) {
    connect_with(relay, a, None).await
}

/// [`connect`], with the client socket's kernel receive buffer set to `rcvbuf` bytes.
pub(crate) async fn connect_with(
    relay: SocketAddr,
    a: &Account,
    rcvbuf: Option<u32>,
) -> (WebSocketStream<TcpStream>, String) {
    let http = client(relay, a.from);
    let v = call(
        &http,
        http::Method::POST,
        "/api/v1/ws/ticket",
        &json!({}),
        Some(&a.token),
    )
    .await;
    drop(http);
    let ticket = v["ticket"].as_str().expect("ticket").to_owned();
    let url = format!("ws://{relay}/ws?user_uuid={}&ticket={ticket}", a.uuid);
    let config = WebSocketConfig::default()
        .read_buffer_size(1024)
        .write_buffer_size(0)
        .max_write_buffer_size(64 * 1024);
    let socket = TcpSocket::new_v4().expect("socket");
    if let Some(size) = rcvbuf {
        socket.set_recv_buffer_size(size).expect("SO_RCVBUF");
    }
    socket.bind(SocketAddr::from((a.from.0, 0))).expect("bind");
    let tcp = socket.connect(relay).await.expect("tcp");
    tcp.set_nodelay(true).expect("nodelay");
    let (mut ws, _) = tokio_tungstenite::client_async_with_config(url, tcp, Some(config))
        .await
        .expect("upgrade");
    ws.send(r#"{"type":"sync","crypto_v":1}"#.into())
        .await
        .expect("sync");
    (ws, ticket)
}

/// The address a `relay` started with `--listen 127.0.0.1:0 --log info` (or more) bound, read
/// from its log file `log` ("relay listening addr=…"); `None` when the process exited first or
/// nothing was logged within 30 s. Port 0 leaves the choice to the kernel: no other process can
/// hold the port between a test choosing it and the relay binding it.
pub(crate) fn listening_addr(
    log: &std::path::Path,
    child: &mut std::process::Child,
) -> Option<SocketAddr> {
    for _ in 0..3000 {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(addr) = text
            .lines()
            .filter(|l| l.contains("relay listening"))
            .find_map(|l| l.split("addr=").nth(1))
            .and_then(|a| a.split_whitespace().next())
            .and_then(|a| a.parse().ok())
        {
            return Some(addr);
        }
        if child.try_wait().ok().flatten().is_some() {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    None
}

/// A `relay` binary started by a test; killed when dropped.
pub(crate) struct RelayProcess {
    child: std::process::Child,
    /// Where it listens (loopback).
    pub(crate) addr: SocketAddr,
    /// Its log (info and above); removed with the directory when dropped.
    _log_dir: tempfile::TempDir,
}
impl RelayProcess {
    /// The process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Resident memory of the process, in bytes (Linux `/proc`).
    pub(crate) fn rss_bytes(&self) -> u64 {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid())).expect("/proc status");
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS");
        kib * 1024
    }

    /// Sends SIGTERM and waits (bounded) for the process to exit; whether it exited 0.
    pub(crate) fn terminate(&mut self) -> bool {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status();
        for _ in 0..1500 {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.success();
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        false
    }
}

impl Drop for RelayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the `relay` binary on memory (PoW off) with `flags` on a port of the kernel's
/// choosing, and returns once it listens.
pub(crate) async fn start(flags: &[&str]) -> RelayProcess {
    let log_dir = tempfile::tempdir().expect("a log directory");
    let log = log_dir.path().join("relay.log");
    let out = std::fs::File::create(&log).expect("the log file");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_relay"))
        .args(["--listen", "127.0.0.1:0", "--memory"])
        .args(["--pow-difficulty", "0", "--log", "info"])
        .args(flags)
        .stdout(out.try_clone().expect("the log file"))
        .stderr(out)
        .spawn()
        .expect("spawn relay");
    let found = tokio::task::block_in_place(|| listening_addr(&log, &mut child));
    let Some(addr) = found else {
        let _ = child.kill();
        panic!(
            "the relay did not listen:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    };
    RelayProcess {
        child,
        addr,
        _log_dir: log_dir,
    }
}

/// Sends message `id` to `to` in `conv` on `ws` until it is acknowledged, sending it again
/// (same id) after each `STORAGE_UNAVAILABLE` (a core that has just started refuses a message
/// until it knows the recipient's queue level) as a client does; panics on any other error,
/// on a socket that ends, or after 30 s. Frames other than its answer are skipped.
pub(crate) async fn send_acked(ws: &mut Ws, id: &str, to: &Account, conv: &str) -> u64 {
    let frame = json!({"type": "msg", "id": id, "to": to.alias, "conv_id": conv,
        "crypto_v": 1, "payload": "aGk="})
    .to_string();
    let answered = async {
        loop {
            ws.send(Message::text(frame.clone())).await.expect("send");
            loop {
                let text = match ws.next().await {
                    Some(Ok(Message::Text(text))) => text,
                    Some(Ok(Message::Close(_)) | Err(_)) | None => panic!("the socket ended"),
                    Some(Ok(_)) => continue,
                };
                let v: Value = serde_json::from_str(&text).expect("json frame");
                match (v["type"].as_str(), v["id"].as_str()) {
                    (Some("ack"), Some(acked)) if acked == id => {
                        return v["seq"].as_u64().expect("seq");
                    }
                    (Some("error"), Some(refused)) if refused == id => {
                        assert_eq!(v["error"], "STORAGE_UNAVAILABLE", "{v}");
                        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                        break;
                    }
                    _ => {}
                }
            }
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(30), answered)
        .await
        .expect("acknowledged in time")
}

/// The test database's URL, or `None` after printing why the test is skipped (a failure where
/// PostgreSQL is required: `RELAY_TEST_POSTGRES_REQUIRED=1`).
pub(crate) fn database(test: &str) -> Option<String> {
    match std::env::var("RELAY_TEST_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var("RELAY_TEST_POSTGRES_REQUIRED").as_deref() != Ok("1"),
                "{test}: RELAY_TEST_POSTGRES_REQUIRED=1 but RELAY_TEST_POSTGRES_URL is not set"
            );
            eprintln!(
                "SKIPPED {test}: RELAY_TEST_POSTGRES_URL is not set (start a cluster with relay-pg/scripts/pg-test-cluster.sh)"
            );
            None
        }
    }
}

/// Elapsed time for the printed measurements only (never asserted).
#[allow(
    clippy::disallowed_methods,
    reason = "tests time what they print for their reports; nothing asserts on it"
)]
pub(crate) fn now() -> std::time::Instant {
    std::time::Instant::now()
}

/// Every message `ws` gets until 1.5 s pass without a frame, as (id, seq).
pub(crate) async fn inbox(ws: &mut Ws) -> Vec<(String, u64)> {
    let mut got = Vec::new();
    while let Ok(Some(Ok(m))) =
        tokio::time::timeout(std::time::Duration::from_millis(1500), ws.next()).await
    {
        if let Message::Text(text) = m {
            let v: Value = serde_json::from_str(&text).expect("json frame");
            if v["type"] == "msg" {
                let id = v["id"].as_str().expect("id").to_owned();
                got.push((id, v["seq"].as_u64().expect("seq")));
            }
        }
    }
    got
}

/// Serves `server` on `listener` on a task of its own until the returned `Notify` is notified:
/// the stop, and the task (the server's result once it has drained).
pub(crate) fn serve_until_notified(
    server: relay_server::RelayServer,
    listener: <seam::net::Tokio as seam::net::Network>::Listener,
) -> (
    std::sync::Arc<tokio::sync::Notify>,
    tokio::task::JoinHandle<io::Result<()>>,
) {
    let stop = std::sync::Arc::new(tokio::sync::Notify::new());
    let stopped = std::sync::Arc::clone(&stop);
    let task = tokio::spawn(server.serve::<seam::net::Tokio>(listener, async move {
        stopped.notified().await;
    }));
    (stop, task)
}
