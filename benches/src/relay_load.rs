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
//! One file past 900 lines on purpose: the setup, the closed loops and the report share the
//! private `Account`, `Peer` and `Pair` types, which a split would have to make public.

use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use client_core::crypto::{SessionKey, decrypt_payload, encrypt_payload, session_key};
use client_core::encoding::to_base64;
use client_core::keys::{EcdhKeyPair, SigningKeyPair};
use client_core::pow::solve_pow;
use futures_util::{SinkExt as _, StreamExt as _};
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng as _;
use relay_core::store::MemoryStore;
use relay_core::{Config, MemoryBlobStore};
use relay_server::RelayServer;
use seam::clock::Clock;
use seam::net::{
    Connector, Endpoint, HttpClient, HttpError, HttpRequest, Tokio, WsError, WsMessage, WsStream,
};
use serde_json::{Value, json};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::{Barrier, mpsc, oneshot};
use tokio::task::{JoinHandle, JoinSet};
use wire::{ServerFrame, UnixMs};

use crate::{quantile, wall_now};

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

// ------------------------------------------------------------------------------ load

/// Shape of one bounded relay load run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayLoadConfig {
    /// Unmeasured messages per pair first (also proves every pair routes).
    pub warmup_msgs_per_pair: usize,
    /// Measured messages per pair.
    pub msgs_per_pair: usize,
    /// Plaintext bytes per message (encrypted with AES-256-GCM under the pair's session key).
    pub plaintext_bytes: usize,
    /// The recipient sends one `delivered` per this many messages (and one at the end).
    pub receipt_batch: usize,
    /// Messages a sender keeps unacknowledged (at least 1). 1: the closed loop of the module
    /// doc. More: the sender sends until that many wait for their `ack`, reads the next `ack`,
    /// and so on; delivery latencies are collected at the end (a client with an outbox).
    pub in_flight_per_pair: usize,
    /// Hard bound on the load (setup excluded).
    pub deadline: Duration,
}

/// Result of one relay load run.
#[derive(Debug, Clone, PartialEq)]
pub struct RelayLoadReport {
    /// Pairs used.
    pub pairs: usize,
    /// Measured messages (all pairs).
    pub messages: usize,
    /// Length of the `msg` text frame a sender sends (for an echo of the same size).
    pub frame_bytes: usize,
    /// From the first measured send to the last measured delivery.
    pub wall: Duration,
    delivery: Vec<Duration>,
    ack: Vec<Duration>,
}

impl RelayLoadReport {
    /// Delivered messages per second over the measured window.
    pub fn msgs_per_sec(&self) -> f64 {
        let secs = self.wall.as_secs_f64();
        if secs > 0.0 {
            self.messages as f64 / secs
        } else {
            0.0
        }
    }

    /// One-way latency (sender's send → recipient read the `msg`) at quantile `q`.
    pub fn delivery_quantile(&self, q: f64) -> Duration {
        quantile(&self.delivery, q)
    }

    /// Ack latency (send → the sender read its `ack`) at quantile `q`.
    pub fn ack_quantile(&self, q: f64) -> Duration {
        quantile(&self.ack, q)
    }
}

/// The `msg` frame text a sender sends.
fn msg_frame(id: &str, to: &str, conv: &str, payload: &str) -> String {
    format!(
        r#"{{"type":"msg","id":"{id}","to":"{to}","conv_id":"{conv}","crypto_v":1,"payload":"{payload}"}}"#
    )
}

/// Length of the `msg` frame of `pair` with `plaintext_bytes` of plaintext (for the echo).
pub fn msg_frame_len(pair: &Pair, plaintext_bytes: usize) -> usize {
    let mut rng = ChaCha20Rng::seed_from_u64(0);
    let payload = encrypt_payload(&pair.a.key, &vec![b'x'; plaintext_bytes], &mut rng);
    msg_frame("m0-0", &pair.b.alias, &pair.conv, &payload).len()
}

/// Runs every pair's closed loop (see the module doc) on `relay`; consumes the pairs and closes
/// their sockets at the end.
pub async fn run_relay_load(
    relay: &BenchRelay,
    pairs: Vec<Pair>,
    cfg: &RelayLoadConfig,
) -> Result<RelayLoadReport, RelayLoadError> {
    let n = pairs.len();
    let frame_bytes = pairs
        .first()
        .map_or(0, |p| msg_frame_len(p, cfg.plaintext_bytes));
    if let Some(clock) = &relay.clock {
        clock.set_factor(LOAD_DILATION);
    }
    let result = tokio::time::timeout(cfg.deadline, run_pairs(pairs, cfg)).await;
    if let Some(clock) = &relay.clock {
        clock.set_factor(1);
    }
    let runs = result.map_err(|_| RelayLoadError::Deadline(cfg.deadline))??;
    let mut delivery = Vec::with_capacity(n * cfg.msgs_per_pair);
    let mut ack = Vec::with_capacity(n * cfg.msgs_per_pair);
    let mut window: Option<(Instant, Instant)> = None;
    for run in runs {
        delivery.extend_from_slice(&run.delivery);
        ack.extend_from_slice(&run.ack);
        window = Some(match window {
            None => (run.start, run.end),
            Some((s, e)) => (s.min(run.start), e.max(run.end)),
        });
    }
    delivery.sort_unstable();
    ack.sort_unstable();
    Ok(RelayLoadReport {
        pairs: n,
        messages: delivery.len(),
        frame_bytes,
        wall: window.map_or(Duration::ZERO, |(s, e)| e.duration_since(s)),
        delivery,
        ack,
    })
}

struct PairRun {
    start: Instant,
    end: Instant,
    delivery: Vec<Duration>,
    ack: Vec<Duration>,
}

async fn run_pairs(
    pairs: Vec<Pair>,
    cfg: &RelayLoadConfig,
) -> Result<Vec<PairRun>, RelayLoadError> {
    let barrier = Arc::new(Barrier::new(pairs.len()));
    let mut settled = JoinSet::new();
    for (index, pair) in pairs.into_iter().enumerate() {
        let (tx, rx) = mpsc::unbounded_channel();
        let Pair { a, b, conv } = pair;
        let total = cfg.warmup_msgs_per_pair + cfg.msgs_per_pair;
        let to = b.alias.clone();
        let from = a.alias.clone();
        let recv = tokio::spawn(receiver(
            b,
            from,
            conv.clone(),
            total,
            cfg.receipt_batch.max(1),
            tx,
        ));
        let side = SenderSide {
            index,
            rng: ChaCha20Rng::seed_from_u64(index as u64),
            plaintext: crate::text_frame(cfg.plaintext_bytes).into_bytes(),
            peer: a,
            to,
            conv,
            cfg: cfg.clone(),
            delivered: rx,
            barrier: Arc::clone(&barrier),
        };
        let send = if cfg.in_flight_per_pair > 1 {
            tokio::spawn(sender_windowed(side))
        } else {
            tokio::spawn(sender(side))
        };
        settled.spawn(PairTasks { send, recv }.settle());
    }
    // The first pair that fails ends the run with its error (dropping the set aborts the
    // others): its partners wait at the barrier or for frames that never come, so waiting
    // for the pairs in order would only show the run's deadline.
    let mut runs = Vec::with_capacity(settled.len());
    while let Some(run) = settled.join_next().await {
        runs.push(run??);
    }
    Ok(runs)
}

/// A pair's two tasks, aborted when dropped (a run that failed leaves none behind).
struct PairTasks {
    send: JoinHandle<Result<PairRun, RelayLoadError>>,
    recv: JoinHandle<Result<(), RelayLoadError>>,
}

impl PairTasks {
    /// The pair's run once both sides are done, or the first error of either: the
    /// recipient's when both failed (the sender only sees that its recipient stopped; the
    /// recipient knows why).
    async fn settle(mut self) -> Result<PairRun, RelayLoadError> {
        tokio::select! {
            biased;
            recv = &mut self.recv => {
                recv??;
                (&mut self.send).await?
            }
            send = &mut self.send => match send? {
                Ok(run) => {
                    (&mut self.recv).await??;
                    Ok(run)
                }
                Err(e) => match tokio::time::timeout(RECIPIENT_GRACE, &mut self.recv).await {
                    Ok(Ok(Err(why))) => Err(why),
                    _ => Err(e),
                },
            },
        }
    }
}

impl Drop for PairTasks {
    fn drop(&mut self) {
        self.send.abort();
        self.recv.abort();
    }
}

/// How long a failed sender's recipient has to report why it stopped.
const RECIPIENT_GRACE: Duration = Duration::from_secs(1);

/// Reads server frames until the `ack` of `id`; receipts routed back to the sender are skipped.
async fn read_ack(ws: &mut RelayWs, id: &str) -> Result<(), RelayLoadError> {
    loop {
        match next_frame(ws).await? {
            ServerFrame::Ack(a) if a.id.as_str() == id => return Ok(()),
            other @ (ServerFrame::Ack(_) | ServerFrame::Error(_) | ServerFrame::Goaway(_)) => {
                return Err(protocol(format!("sender waiting for ack {id}: {other:?}")));
            }
            // Receipts, and notifications a client takes in passing: a `friend_accepted`
            // can come after the connect that follows the acceptance when the two accounts
            // live on different shards.
            _ => {}
        }
    }
}

/// The next decoded text frame (pings are answered by tungstenite).
async fn next_frame(ws: &mut RelayWs) -> Result<ServerFrame, RelayLoadError> {
    loop {
        match ws.next().await {
            Some(Ok(WsMessage::Text(text))) => {
                return ServerFrame::decode(text.as_str())
                    .map_err(|e| protocol(format!("undecodable server frame: {e}")));
            }
            Some(Ok(WsMessage::Ping(_) | WsMessage::Pong(_))) => {}
            Some(Err(e)) => return Err(e.into()),
            other => return Err(protocol(format!("socket ended: {other:?}"))),
        }
    }
}

/// What both senders hold: the pair's sending side and what tells it a message arrived.
struct SenderSide {
    index: usize,
    rng: ChaCha20Rng,
    plaintext: Vec<u8>,
    peer: Peer,
    to: String,
    conv: String,
    cfg: RelayLoadConfig,
    delivered: mpsc::UnboundedReceiver<(usize, Instant)>,
    barrier: Arc<Barrier>,
}

impl SenderSide {
    /// Message `i`'s id and `msg` frame: what a client does per message, encrypt and build the
    /// frame (inside the throughput).
    fn frame(&mut self, i: usize) -> (String, String) {
        let payload = encrypt_payload(&self.peer.key, &self.plaintext, &mut self.rng);
        let id = format!("m{}-{i}", self.index);
        let frame = msg_frame(&id, &self.to, &self.conv, &payload);
        (id, frame)
    }

    /// When the recipient read message `i` (messages arrive in order).
    async fn delivered(&mut self, i: usize) -> Result<Instant, RelayLoadError> {
        let index = self.index;
        let (got, at) = self
            .delivered
            .recv()
            .await
            .ok_or_else(|| protocol(format!("pair {index}: the recipient stopped")))?;
        if got != i {
            return Err(protocol(format!(
                "pair {index}: message {got} arrived, {i} expected"
            )));
        }
        Ok(at)
    }
}

async fn sender(mut s: SenderSide) -> Result<PairRun, RelayLoadError> {
    let cfg = s.cfg.clone();
    let total = cfg.warmup_msgs_per_pair + cfg.msgs_per_pair;
    let mut delivery = Vec::with_capacity(cfg.msgs_per_pair);
    let mut ack = Vec::with_capacity(cfg.msgs_per_pair);
    let mut start = wall_now();
    for i in 0..total {
        let measured = i >= cfg.warmup_msgs_per_pair;
        if i == cfg.warmup_msgs_per_pair {
            s.barrier.wait().await;
            start = wall_now();
        }
        let (id, frame) = s.frame(i);
        let t0 = wall_now();
        s.peer.ws.send(WsMessage::text(frame)).await?;
        read_ack(&mut s.peer.ws, &id).await?;
        let acked = t0.elapsed();
        let at = s.delivered(i).await?;
        if measured {
            ack.push(acked);
            delivery.push(at.saturating_duration_since(t0));
        }
    }
    let end = wall_now();
    // Best effort: late receipts may still be in flight.
    let _ = s.peer.ws.close(None).await;
    Ok(PairRun {
        start,
        end,
        delivery,
        ack,
    })
}

/// A sender with up to `cfg.in_flight_per_pair` messages unacknowledged (acks come back in
/// order on one connection); the warm-up is acknowledged before the measured messages start.
async fn sender_windowed(mut s: SenderSide) -> Result<PairRun, RelayLoadError> {
    let cfg = s.cfg.clone();
    let total = cfg.warmup_msgs_per_pair + cfg.msgs_per_pair;
    let mut sent_at: Vec<Instant> = Vec::with_capacity(total);
    let mut ack = Vec::with_capacity(cfg.msgs_per_pair);
    let mut start = wall_now();
    let mut acked = 0usize;
    while acked < total {
        while sent_at.len() < total && sent_at.len() - acked < cfg.in_flight_per_pair {
            let i = sent_at.len();
            if i == cfg.warmup_msgs_per_pair {
                if acked < i {
                    break;
                }
                s.barrier.wait().await;
                start = wall_now();
            }
            let (_, frame) = s.frame(i);
            sent_at.push(wall_now());
            s.peer.ws.send(WsMessage::text(frame)).await?;
        }
        read_ack(&mut s.peer.ws, &format!("m{}-{acked}", s.index)).await?;
        if acked >= cfg.warmup_msgs_per_pair {
            ack.push(sent_at[acked].elapsed());
        }
        acked += 1;
    }
    let mut delivery = Vec::with_capacity(cfg.msgs_per_pair);
    for (i, sent) in sent_at.iter().enumerate() {
        let at = s.delivered(i).await?;
        if i >= cfg.warmup_msgs_per_pair {
            delivery.push(at.saturating_duration_since(*sent));
        }
    }
    let end = wall_now();
    let _ = s.peer.ws.close(None).await;
    Ok(PairRun {
        start,
        end,
        delivery,
        ack,
    })
}

async fn receiver(
    mut peer: Peer,
    from: String,
    conv: String,
    total: usize,
    batch: usize,
    delivered: mpsc::UnboundedSender<(usize, Instant)>,
) -> Result<(), RelayLoadError> {
    for i in 0..total {
        let m = loop {
            match next_frame(&mut peer.ws).await? {
                ServerFrame::Msg(m) => break m,
                other @ (ServerFrame::Error(_) | ServerFrame::Goaway(_)) => {
                    return Err(protocol(format!("recipient: {other:?}")));
                }
                // As the sender's (`read_ack`).
                _ => {}
            }
        };
        let at = wall_now();
        // The recipient tells its sender only after reading the frame; the decrypt (what the
        // app does next) is outside the one-way latency but inside the throughput.
        let _ = delivered.send((i, at));
        decrypt_payload(&peer.key, &m.payload)
            .map_err(|e| protocol(format!("decrypting message {i}: {e}")))?;
        if m.from.as_str() != from {
            return Err(protocol(format!("message from {} not {from}", m.from)));
        }
        if (i + 1) % batch == 0 || i + 1 == total {
            let receipt = json!({
                "type": "delivered",
                "conv_id": conv,
                "seq": m.seq,
                "to": from,
                "crypto_v": 1,
            });
            peer.ws.send(WsMessage::text(receipt.to_string())).await?;
        }
    }
    let _ = peer.ws.close(None).await;
    Ok(())
}
