//! End-to-end load through the real relay: `relay_server::RelayServer` on a
//! `MemoryStore`, over loopback WebSockets, driven by genuine clients.
//!
//! * [`BenchRelay::start`]: the relay on `127.0.0.1:0` with [`bench_config`] and a
//!   [`DilatedClock`] (see there: the relay's 600 frames per connection per minute is a constant).
//! * [`BenchRelay::pairs`]: `2 × P` accounts created over HTTP exactly as a client does (PoW
//!   challenge, PoW solved with client-core, register, auth challenge signed with Ed25519,
//!   verify), befriended pairwise (request + accept), session keys derived (X25519 + HKDF), each
//!   connected over a WebSocket with a ticket and synced. Every account talks to the relay from
//!   its own loopback source address (`127.0.x.y`): PoW challenges are limited per address.
//! * [`run_relay_load`]: per pair a closed loop, one message in flight: the sender encrypts
//!   ~200 B with AES-256-GCM, sends the `msg` frame, reads its `ack`, and waits until the peer
//!   has received that `msg`; the peer decodes and decrypts every `msg` and sends `delivered`
//!   receipts in batches, as a real client does. Per message it records the one-way latency
//!   (send → the peer read the `msg`; both ends in this process, one clock) and the ack latency.
//!   With [`RelayLoadConfig::in_flight_per_pair`] above 1 the sender instead keeps that many
//!   messages unacknowledged (an outbox draining), and checks every delivery at the end.
//!
//!
//! This module sets the relay and its clients up; `run` drives the load and reports it.

use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use client_core::crypto::{SessionKey, session_key};
use client_core::encoding::to_base64;
use client_core::keys::{EcdhKeyPair, SigningKeyPair};
use client_core::pow::solve_pow;
use futures_util::{SinkExt as _, StreamExt as _};
use relay_core::store::MemoryStore;
use relay_core::{Config, MemoryBlobStore};
use relay_server::RelayServer;
use seam::clock::Clock;
use seam::net::{
    Connector, Endpoint, HttpClient, HttpError, HttpRequest, Tokio, WsError, WsMessage, WsStream,
};
use serde_json::{Value, json};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use wire::UnixMs;

use crate::wall_now;

mod run;

pub use run::{RelayLoadConfig, RelayLoadReport, msg_frame_len, run_relay_load};

/// How much faster than real time the relay's clock runs while a load runs (see [`DilatedClock`]).
pub const LOAD_DILATION: u64 = 5_000;

/// Long enough that nothing the bench holds expires during a (dilated) run: 30 days.
const LONG_TTL_MS: u64 = 30 * 24 * 60 * 60 * 1000;

/// Production config with what would stop a benchmark relaxed: PoW difficulty 1 (still solved
/// and checked), unlimited registrations per address and messages per user per minute (the
/// production 120/min would cap a pair at 2 msgs/s), and idle timeout, JWT and offline TTL of
/// 30 days (the load runs on a dilated clock). Every measured path is production code.
pub fn bench_config() -> Config {
    Config {
        pow_difficulty: 1,
        registrations_per_hour_per_addr: u32::MAX,
        msgs_per_min_per_user: u32::MAX,
        idle_timeout_ms: LONG_TTL_MS,
        jwt_ttl_ms: LONG_TTL_MS,
        offline_ttl_ms: LONG_TTL_MS,
        ..Config::default()
    }
}

/// Why a relay load run failed.
#[derive(Debug, thiserror::Error)]
pub enum RelayLoadError {
    /// Local socket error.
    #[error("io: {0}")]
    Io(#[from] io::Error),
    /// An HTTP request got no response.
    #[error("http: {0}")]
    Http(#[from] HttpError),
    /// A WebSocket could not be opened.
    #[error("websocket open: {0}")]
    WsOpen(#[from] WsError),
    /// A WebSocket failed while in use.
    #[error("websocket: {0}")]
    Ws(#[from] tokio_tungstenite::tungstenite::Error),
    /// The relay refused a setup step, or answered a frame with something unexpected.
    #[error("{0}")]
    Protocol(String),
    /// The run did not finish within its deadline.
    #[error("relay load run exceeded its deadline of {0:?}")]
    Deadline(Duration),
    /// A task panicked or was cancelled.
    #[error("task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

fn protocol(msg: impl Into<String>) -> RelayLoadError {
    RelayLoadError::Protocol(msg.into())
}

// ------------------------------------------------------------------------------ clock

/// The relay's clock for the bench: the system clock, running `factor` times faster than real
/// time once [`set_factor`](Self::set_factor) is called (monotonic across changes).
///
/// Why: the relay allows 600 frames per connection per minute (`MAX_FRAMES_PER_MIN_PER_CONN`,
/// a constant, not in `Config`), i.e. 10 frames/s per socket. With the clock running
/// [`LOAD_DILATION`] times faster during a load, a socket may send 50,000 frames per real
/// second; the limiter still runs on every frame (its cost is measured), it just never refuses.
/// Setup (tickets valid 30 s, auth challenges 120 s) runs at factor 1.
#[derive(Debug, Clone)]
pub struct DilatedClock {
    inner: Arc<Mutex<Dilation>>,
}

#[derive(Debug)]
struct Dilation {
    /// Real instant of the last factor change.
    real_at: Instant,
    /// Clock reading at that instant.
    virt_at_ms: u64,
    factor: u64,
}

impl DilatedClock {
    /// Starts at the system time, at factor 1.
    pub fn new() -> Self {
        let start = seam::clock::SystemClock.now().get();
        Self {
            inner: Arc::new(Mutex::new(Dilation {
                real_at: wall_now(),
                virt_at_ms: start,
                factor: 1,
            })),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Dilation> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// From now on, time runs `factor` times faster than real time.
    pub fn set_factor(&self, factor: u64) {
        let mut d = self.lock();
        let now = wall_now();
        d.virt_at_ms = read(&d, now);
        d.real_at = now;
        d.factor = factor.max(1);
    }
}

impl Default for DilatedClock {
    fn default() -> Self {
        Self::new()
    }
}

fn read(d: &Dilation, now: Instant) -> u64 {
    let real_ms = u64::try_from(now.duration_since(d.real_at).as_millis()).unwrap_or(u64::MAX);
    d.virt_at_ms
        .saturating_add(real_ms.saturating_mul(d.factor))
}

impl Clock for DilatedClock {
    fn now(&self) -> UnixMs {
        let d = self.lock();
        UnixMs(read(&d, wall_now()))
    }
}

// ------------------------------------------------------------------------------ network

/// Connects from a chosen loopback source address (the relay limits PoW challenges per address).
#[derive(Debug, Clone, Copy)]
pub struct BoundConnector {
    local: Ipv4Addr,
}

impl Connector for BoundConnector {
    type Stream = TcpStream;

    async fn connect(&self, endpoint: &Endpoint) -> io::Result<TcpStream> {
        let ip: IpAddr = endpoint
            .host()
            .parse()
            .map_err(|_| io::Error::other("the bench relay is addressed by IP"))?;
        let socket = TcpSocket::new_v4()?;
        socket.bind(SocketAddr::from((self.local, 0)))?;
        let stream = socket
            .connect(SocketAddr::from((ip, endpoint.port())))
            .await?;
        stream.set_nodelay(true)?;
        Ok(stream)
    }
}

type RelayWs = WsStream<TcpStream>;

// ------------------------------------------------------------------------------ relay

/// A running relay on loopback; dropping it asks the server to stop.
pub struct BenchRelay {
    /// The bound address (`127.0.0.1:port`).
    pub addr: SocketAddr,
    endpoint: Endpoint,
    /// `None` for a relay this process does not run ([`BenchRelay::external`]).
    clock: Option<DilatedClock>,
    next_account: u32,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<io::Result<()>>>,
}

impl fmt::Debug for BenchRelay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BenchRelay")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl BenchRelay {
    /// Binds `127.0.0.1:0` and serves the relay ([`bench_config`], memory stores, no test mode).
    pub async fn start() -> Result<Self, RelayLoadError> {
        let listener = <Tokio as seam::net::Network>::bind((Ipv4Addr::LOCALHOST, 0).into()).await?;
        let addr = seam::net::Listener::local_addr(&listener)?;
        let clock = DilatedClock::new();
        let server = RelayServer::in_memory(
            bench_config(),
            0xbe_4c,
            MemoryStore::new(),
            MemoryBlobStore::new(),
        )
        .with_clock(clock.clone());
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(server.serve::<Tokio>(listener, async move {
            let _ = stopped.await;
        }));
        let endpoint = Endpoint::parse(&format!("http://{addr}"))
            .map_err(|e| protocol(format!("endpoint: {e}")))?;
        Ok(Self {
            addr,
            endpoint,
            clock: Some(clock),
            next_account: 0,
            stop: Some(stop),
            task: Some(task),
        })
    }

    /// A relay another process serves on `addr` (e.g. the release `relay` binary), driven
    /// exactly as a client would; its clock and limits are its own.
    pub fn external(addr: SocketAddr) -> Result<Self, RelayLoadError> {
        let endpoint = Endpoint::parse(&format!("http://{addr}"))
            .map_err(|e| protocol(format!("endpoint: {e}")))?;
        Ok(Self {
            addr,
            endpoint,
            clock: None,
            next_account: 0,
            stop: None,
            task: None,
        })
    }

    /// Creates `n` fresh accounts without contacts (PoW, register, login), each talking to
    /// the relay from its own loopback address.
    pub async fn idle_accounts(&mut self, n: usize) -> Result<Vec<IdleAccount>, RelayLoadError> {
        let mut accounts = Vec::with_capacity(n);
        for _ in 0..n {
            let account = self.account().await?;
            // No keep-alive connection is left open per account (10,000 of them would sit in
            // the relay until its header-read deadline).
            account.http.clear_idle();
            accounts.push(IdleAccount(account));
        }
        Ok(accounts)
    }

    /// Stops the server gracefully and waits for it.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }

    /// Creates `n` pairs of fresh befriended accounts, connected and synced (setup, untimed),
    /// [`SETUP_CONCURRENCY`] pairs at a time (on a durable store each registration, login and
    /// friendship is a commit: one at a time, 10,000 pairs would take minutes of `fsync`s).
    pub async fn pairs(&mut self, n: usize) -> Result<Vec<Pair>, RelayLoadError> {
        let first = self.next_account;
        let count = u32::try_from(2 * n).map_err(|_| protocol(format!("{n} pairs")))?;
        self.next_account += count;
        let endpoint = &self.endpoint;
        futures_util::stream::iter(0..count / 2)
            .map(|i| async move {
                let a = account(endpoint, first + 2 * i).await?;
                let b = account(endpoint, first + 2 * i + 1).await?;
                befriend(a, b).await
            })
            .buffered(SETUP_CONCURRENCY)
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect()
    }

    async fn account(&mut self) -> Result<Account, RelayLoadError> {
        let k = self.next_account;
        self.next_account += 1;
        account(&self.endpoint, k).await
    }
}

/// Pairs [`BenchRelay::pairs`] sets up at once.
pub const SETUP_CONCURRENCY: usize = 32;

/// A fresh account number `k` (PoW, register, login) talking from its own loopback address.
async fn account(endpoint: &Endpoint, k: u32) -> Result<Account, RelayLoadError> {
    // 127.0.1.1, 127.0.1.2, ...: one source address per account.
    let [_, _, hi, lo] = (0x0001_0001u32 + k + k / 254 * 2).to_be_bytes();
    let local = Ipv4Addr::new(127, 0, hi, lo);
    let http = HttpClient::new(BoundConnector { local }, endpoint.clone());
    let mut seed = [0xA5u8; 32];
    seed[8..12].copy_from_slice(&k.to_le_bytes());
    let signing = SigningKeyPair::from_private_bytes(&seed);
    let mut x = [0x5Au8; 32];
    // Not the first bytes: X25519 clamps the low bits of byte 0.
    x[8..12].copy_from_slice(&k.to_le_bytes());
    let ecdh = EcdhKeyPair::from_private_bytes(x);

    let pow = call(
        &http,
        HttpRequest::post("/api/v1/pow/challenge"),
        &json!({}),
    )
    .await?;
    let challenge = str_field(&pow, "challenge_string")?;
    let difficulty = pow["difficulty"]
        .as_u64()
        .and_then(|d| u32::try_from(d).ok())
        .ok_or_else(|| protocol(format!("no difficulty in {pow}")))?;
    let nonce = solve_pow(&challenge, difficulty).map_err(|e| protocol(format!("pow: {e}")))?;
    let reg = call(
        &http,
        HttpRequest::post("/api/v1/register"),
        &json!({
            "ed25519_public_key": to_base64(&signing.public_key()),
            "x25519_public_key": to_base64(&ecdh.public_key()),
            "nickname": format!("bench{k}"),
            "pow_nonce": nonce,
        }),
    )
    .await?;
    let uuid = str_field(&reg, "uuid")?;
    let alias = str_field(&reg, "alias_id")?;
    let ch = call(
        &http,
        HttpRequest::post("/api/v1/auth/challenge"),
        &json!({"user_uuid": uuid}),
    )
    .await?;
    let challenge = str_field(&ch, "challenge")?;
    let signature = to_base64(&signing.sign(challenge.as_bytes()));
    let v = call(
        &http,
        HttpRequest::post("/api/v1/auth/verify"),
        &json!({"user_uuid": uuid, "challenge": challenge, "signature": signature}),
    )
    .await?;
    let token = str_field(&v, "token")?;
    Ok(Account {
        http,
        uuid,
        alias,
        token,
        ecdh,
    })
}

/// Befriends `a` and `b` (request + accept), derives their session keys and connects both.
async fn befriend(a: Account, b: Account) -> Result<Pair, RelayLoadError> {
    let v = call(
        &a.http,
        HttpRequest::post("/api/v1/friends/request").bearer(&a.token),
        &json!({"to_alias_id": b.alias}),
    )
    .await?;
    let id = v["friendship_id"]
        .as_u64()
        .ok_or_else(|| protocol(format!("no friendship_id in {v}")))?;
    let v = call(
        &b.http,
        HttpRequest::new(http::Method::PUT, format!("/api/v1/friends/{id}/accept"))
            .bearer(&b.token),
        &json!({}),
    )
    .await?;
    let conv = str_field(&v, "conversation_id")?;
    let key_a = session_key(&a.ecdh, &b.ecdh.public_key(), &conv);
    let key_b = session_key(&b.ecdh, &a.ecdh.public_key(), &conv);
    let ws_a = connect(&a).await?;
    let ws_b = connect(&b).await?;
    Ok(Pair {
        a: Peer {
            alias: a.alias,
            key: key_a,
            ws: ws_a,
        },
        b: Peer {
            alias: b.alias,
            key: key_b,
            ws: ws_b,
        },
        conv,
    })
}

impl Drop for BenchRelay {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

struct Account {
    http: HttpClient<BoundConnector>,
    uuid: String,
    alias: String,
    token: String,
    ecdh: EcdhKeyPair,
}

/// A logged-in account without contacts ([`BenchRelay::idle_accounts`]).
pub struct IdleAccount(Account);

impl fmt::Debug for IdleAccount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdleAccount").finish_non_exhaustive()
    }
}

impl IdleAccount {
    /// A ticket, the WebSocket and `sync`; the account's HTTP client is dropped, so only the
    /// socket stays open.
    pub async fn connect(self) -> Result<IdleSocket, RelayLoadError> {
        let ws = connect(&self.0).await?;
        Ok(IdleSocket { ws })
    }
}

/// An authenticated, synced socket that only sends heartbeats ([`IdleAccount::connect`]).
pub struct IdleSocket {
    ws: RelayWs,
}

impl fmt::Debug for IdleSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdleSocket").finish_non_exhaustive()
    }
}

impl IdleSocket {
    /// The heartbeat the reference clients send every 25 s (`{"type":"ping"}`), which keeps
    /// the relay's idle timeout (90 s) from closing the socket.
    pub async fn ping(&mut self) -> Result<(), RelayLoadError> {
        self.ws.send(WsMessage::text(r#"{"type":"ping"}"#)).await?;
        Ok(())
    }

    /// Closes the socket (close frame, then the TCP connection).
    pub async fn close(mut self) -> Result<(), RelayLoadError> {
        self.ws.close(None).await?;
        Ok(())
    }
}

/// One side of a pair: its alias, session key and open, synced socket.
pub struct Peer {
    alias: String,
    key: SessionKey,
    ws: RelayWs,
}

impl fmt::Debug for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Peer")
            .field("alias", &self.alias)
            .finish_non_exhaustive()
    }
}

/// Two befriended, connected, synced accounts and their conversation.
pub struct Pair {
    a: Peer,
    b: Peer,
    conv: String,
}

impl fmt::Debug for Pair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pair")
            .field("a", &self.a.alias)
            .field("b", &self.b.alias)
            .field("conv", &self.conv)
            .finish_non_exhaustive()
    }
}

/// A JSON request that must answer 2xx; returns the body.
async fn call(
    http: &HttpClient<BoundConnector>,
    req: HttpRequest,
    body: &Value,
) -> Result<Value, RelayLoadError> {
    let what = format!("{} {}", req.method(), req.path_and_query());
    let r = http.send(req.json(body)?).await?;
    if !r.status.is_success() {
        return Err(protocol(format!(
            "{what}: {} {}",
            r.status,
            String::from_utf8_lossy(&r.body)
        )));
    }
    Ok(r.json()?)
}

fn str_field(v: &Value, name: &str) -> Result<String, RelayLoadError> {
    v[name]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| protocol(format!("no {name} in {v}")))
}

/// Ticket, WebSocket open, `sync`.
async fn connect(acct: &Account) -> Result<RelayWs, RelayLoadError> {
    let v = call(
        &acct.http,
        HttpRequest::post("/api/v1/ws/ticket").bearer(&acct.token),
        &json!({}),
    )
    .await?;
    let ticket = str_field(&v, "ticket")?;
    let url = format!(
        "ws://{}/ws?user_uuid={}&ticket={ticket}",
        acct.http.endpoint().authority(),
        acct.uuid
    );
    let stream = acct.http.connector().connect(acct.http.endpoint()).await?;
    let (mut ws, _) =
        tokio_tungstenite::client_async_with_config(url, stream, Some(crate::ws_config())).await?;
    ws.send(WsMessage::text(r#"{"type":"sync","crypto_v":1}"#))
        .await?;
    Ok(ws)
}
