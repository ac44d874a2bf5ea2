//! A seeded TCP fault proxy for black-box runs against any relay.
//!
//! A [`FaultProxy`] listens on a local address and forwards every accepted connection to one
//! upstream address, applying the [`Plan`]'s toxics on the way. The vocabulary is toxiproxy's
//! (`latency`, `bandwidth`, `slicer`, `timeout`, `reset_peer`, `limit_data`), which operators
//! already know, plus two the relay's own fault runs use: `hold` (stall a direction for a while,
//! then release everything it held, in order) and `half_open` (one direction silently dead while
//! the connection stays up).
//!
//! # Determinism
//! Which toxics a connection gets (each has a `toxicity`, the probability it applies) and every
//! random draw of a toxic (jitter, slice sizes) come from a ChaCha RNG seeded with the plan seed
//! and the connection's accept index: the same plan, seed and connection order give the same
//! faults. Timing on a real network is not deterministic, and this proxy does not pretend it is;
//! [`FaultProxy::connections`] reports what each connection got so a run can be reproduced.
//!
//! # Bounds
//! Each direction reads at most [`READ_CHUNK_BYTES`] at a time and keeps at most
//! [`QUEUED_CHUNKS_MAX`] chunks between its reader and writer (back-pressure reaches the sender
//! through TCP), so a connection holds at most ~2 MiB whatever its toxics.
//!
//! # Why not noxious
//! `noxious` (a Rust port of toxiproxy) was checked first: its toxics are crate-private (it is
//! a server driven over REST, not a library), its last release is from 2021 on tokio-util 0.6 and
//! rand 0.8, and it has neither holds nor half-open links. The toxics here are small state
//! machines over tokio's `TcpStream`.

pub mod ports;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand_chacha::ChaCha20Rng;
use rand_core::{Rng as _, SeedableRng as _};
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, sleep_until};

mod plan;

pub use plan::{
    ALL_DESTRUCTIVE_TOXICITY, Direction, Plan, PlanError, TOXIC_NAMES, Toxic, ToxicSpec,
};

/// Largest read from one side before it is passed through the toxics.
pub const READ_CHUNK_BYTES: usize = 16 * 1024;
/// Chunks queued between a direction's reader and its writer (latency and holds delay the
/// writer; the reader then stops, and TCP pushes back on the sender).
pub const QUEUED_CHUNKS_MAX: usize = 64;

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
}

/// What one proxied connection got (for reports and reproduction).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ConnectionFaults {
    /// Accept index, from 0.
    pub index: u64,
    /// The toxics that applied to it, with their direction.
    pub toxics: Vec<ToxicSpec>,
}

/// A running proxy; dropping it stops accepting and closes every connection.
#[derive(Debug)]
pub struct FaultProxy {
    local: SocketAddr,
    log: Arc<Mutex<Vec<ConnectionFaults>>>,
    accept: JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on `listen` (port 0 picks one) and forwards to `upstream` under `plan`, drawing
    /// per-connection randomness from `seed`.
    pub async fn start(
        listen: SocketAddr,
        upstream: SocketAddr,
        plan: Plan,
        seed: u64,
    ) -> Result<Self, ProxyError> {
        let listener = TcpListener::bind(listen)
            .await
            .map_err(|source| ProxyError::Bind {
                addr: listen,
                source,
            })?;
        let local = listener.local_addr().map_err(|source| ProxyError::Bind {
            addr: listen,
            source,
        })?;
        let log = Arc::new(Mutex::new(Vec::new()));
        let upstream = Upstream {
            addr: upstream,
            keep_source_ip: false,
        };
        let accept = tokio::spawn(accept_loop(listener, upstream, plan, seed, log.clone()));
        Ok(Self { local, log, accept })
    }

    /// Like [`FaultProxy::start`], but binds synchronously (inside a tokio runtime), for
    /// callers that cannot await. With `keep_source_ip`, each upstream connection is made from
    /// the client's own IP address when client and upstream are both on loopback, so a relay's
    /// per-address limits see the clients, not the proxy.
    pub fn bind(
        listen: SocketAddr,
        upstream: SocketAddr,
        plan: Plan,
        seed: u64,
        keep_source_ip: bool,
    ) -> Result<Self, ProxyError> {
        let bind_error = |source| ProxyError::Bind {
            addr: listen,
            source,
        };
        let std_listener = std::net::TcpListener::bind(listen).map_err(bind_error)?;
        std_listener.set_nonblocking(true).map_err(bind_error)?;
        let listener = TcpListener::from_std(std_listener).map_err(bind_error)?;
        let local = listener.local_addr().map_err(bind_error)?;
        let log = Arc::new(Mutex::new(Vec::new()));
        let accept = tokio::spawn(accept_loop(
            listener,
            Upstream {
                addr: upstream,
                keep_source_ip,
            },
            plan,
            seed,
            log.clone(),
        ));
        Ok(Self { local, log, accept })
    }

    /// The address clients connect to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// What every connection accepted so far got, in accept order.
    pub fn connections(&self) -> Vec<ConnectionFaults> {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Where connections go, and from which source address.
#[derive(Clone, Copy, Debug)]
struct Upstream {
    addr: SocketAddr,
    keep_source_ip: bool,
}

impl Upstream {
    /// Connects for a client at `peer`: from the client's IP when asked and both are loopback.
    async fn connect(self, peer: SocketAddr) -> std::io::Result<TcpStream> {
        let same_ip = self.keep_source_ip
            && peer.ip().is_loopback()
            && self.addr.ip().is_loopback()
            && peer.is_ipv4() == self.addr.is_ipv4();
        if !same_ip {
            return TcpStream::connect(self.addr).await;
        }
        let socket = if self.addr.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        socket.bind(SocketAddr::new(peer.ip(), 0))?;
        socket.connect(self.addr).await
    }
}

async fn accept_loop(
    listener: TcpListener,
    upstream: Upstream,
    plan: Plan,
    seed: u64,
    log: Arc<Mutex<Vec<ConnectionFaults>>>,
) {
    // Connection tasks live in this set: aborting the accept loop drops them all.
    let mut conns = tokio::task::JoinSet::new();
    let mut index = 0u64;
    loop {
        let (client, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "fault proxy: accept failed");
                sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let mut rng = connection_rng(seed, index);
        let toxics = plan.draw(&mut rng);
        if let Ok(mut l) = log.lock() {
            l.push(ConnectionFaults {
                index,
                toxics: toxics.clone(),
            });
        }
        tracing::debug!(index, toxics = toxics.len(), "fault proxy: connection");
        conns.spawn(proxy_connection(client, peer, upstream, toxics, rng));
        index += 1;
        while conns.try_join_next().is_some() {}
    }
}

/// The RNG of connection `index` under `seed`.
fn connection_rng(seed: u64, index: u64) -> ChaCha20Rng {
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8..16].copy_from_slice(&index.to_le_bytes());
    ChaCha20Rng::from_seed(key)
}

async fn proxy_connection(
    mut client: TcpStream,
    peer: SocketAddr,
    upstream: Upstream,
    toxics: Vec<ToxicSpec>,
    mut rng: ChaCha20Rng,
) {
    let mut server = match upstream.connect(peer).await {
        Ok(s) => s,
        Err(error) => {
            tracing::debug!(%error, "fault proxy: upstream connect failed");
            return;
        }
    };
    drop(client.set_nodelay(true));
    drop(server.set_nodelay(true));
    let reset = toxics
        .iter()
        .any(|t| matches!(t.toxic, Toxic::ResetPeer { .. }));
    if reset {
        // Closing a socket with SO_LINGER 0 sends a reset instead of a FIN.
        drop(client.set_zero_linger());
        drop(server.set_zero_linger());
    }
    let close_after = toxics
        .iter()
        .filter_map(|t| match t.toxic {
            Toxic::Timeout { timeout_ms } if timeout_ms > 0 => Some(timeout_ms),
            Toxic::ResetPeer { timeout_ms } => Some(timeout_ms),
            _ => None,
        })
        .min();
    let started = Instant::now_for_proxy();
    // Borrowed halves: dropping them does not shut the write side down, so under `reset_peer`
    // the sockets' close is a bare reset (owned halves would send a FIN first).
    let (client_read, client_write) = client.split();
    let (server_read, server_write) = server.split();
    let up = Pipe::new(Direction::Upstream, &toxics, started, rng.next_u64());
    let down = Pipe::new(Direction::Downstream, &toxics, started, rng.next_u64());
    let both = async {
        tokio::join!(
            up.run(client_read, server_write),
            down.run(server_read, client_write)
        );
    };
    match close_after {
        // When the timer fires both directions are dropped, which closes both sockets (a reset
        // under `reset_peer`, a FIN under `timeout`).
        Some(ms) => {
            tokio::select! {
                biased;
                () = both => {}
                () = sleep(Duration::from_millis(ms)) => {}
            }
        }
        None => both.await,
    }
    drop(client);
    drop(server);
}

/// `tokio::time::Instant::now`, the one clock read of this IO shell.
trait NowForProxy {
    fn now_for_proxy() -> Self;
}

impl NowForProxy for Instant {
    #[allow(clippy::disallowed_methods)] // an IO shell: the proxy's toxics run on the wall clock
    fn now_for_proxy() -> Self {
        Self::now()
    }
}

/// One direction of a connection and the toxics that apply to it.
struct Pipe {
    direction: Direction,
    toxics: Vec<Toxic>,
    started: Instant,
    rng: ChaCha20Rng,
}

impl Pipe {
    fn new(direction: Direction, toxics: &[ToxicSpec], started: Instant, seed: u64) -> Self {
        Self {
            direction,
            toxics: toxics
                .iter()
                .filter(|t| t.stream == direction)
                .map(|t| t.toxic.clone())
                .collect(),
            started,
            rng: ChaCha20Rng::seed_from_u64(seed),
        }
    }

    fn find<T>(&self, f: impl Fn(&Toxic) -> Option<T>) -> Option<T> {
        self.toxics.iter().find_map(f)
    }

    /// Reads from `from`, writes to `to`, through the toxics; returns when either side ends.
    async fn run<R, W>(mut self, mut from: R, mut to: W)
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        let dead = self
            .toxics
            .iter()
            .any(|t| matches!(t, Toxic::HalfOpen | Toxic::Timeout { .. }));
        if dead {
            // Nothing passes. Reading continues so the sender is not pushed back: a dead
            // direction, not a slow one. (`timeout` also closes the connection after its delay,
            // in `proxy_connection`.)
            discard(&mut from).await;
            tracing::debug!(direction = ?self.direction, "fault proxy: dead direction ended");
            return;
        }
        let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>(QUEUED_CHUNKS_MAX);
        let limit = self.find(|t| match t {
            Toxic::LimitData { bytes } => Some(*bytes),
            _ => None,
        });
        let reader = async move {
            let mut total = 0u64;
            let mut buf = vec![0u8; READ_CHUNK_BYTES];
            loop {
                let n = match from.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                let mut chunk = buf[..n].to_vec();
                let mut last = false;
                if let Some(limit) = limit {
                    let room = limit.saturating_sub(total);
                    if chunk.len() as u64 >= room {
                        chunk.truncate(usize::try_from(room).unwrap_or(usize::MAX));
                        last = true;
                    }
                }
                total += chunk.len() as u64;
                if tx.send((Instant::now_for_proxy(), chunk)).await.is_err() || last {
                    break;
                }
            }
        };
        let writer = self.write_loop(rx, &mut to);
        tokio::join!(reader, writer);
        drop(to.shutdown().await);
    }

    /// The deadline `ms` after the connection started.
    fn at(&self, ms: u64) -> Instant {
        self.started + Duration::from_millis(ms)
    }

    async fn write_loop<W: AsyncWrite + Unpin>(
        &mut self,
        mut rx: mpsc::Receiver<(Instant, Vec<u8>)>,
        to: &mut W,
    ) {
        let mut pacer = Pacer::default();
        while let Some((arrived, chunk)) = rx.recv().await {
            if self.pass(arrived, &chunk, to, &mut pacer).await.is_err() {
                break;
            }
        }
    }

    /// One chunk through latency, hold, slicer and bandwidth, in that order.
    async fn pass<W: AsyncWrite + Unpin>(
        &mut self,
        arrived: Instant,
        chunk: &[u8],
        to: &mut W,
        pacer: &mut Pacer,
    ) -> std::io::Result<()> {
        if let Some((latency_ms, jitter_ms)) = self.find(|t| match t {
            Toxic::Latency {
                latency_ms,
                jitter_ms,
            } => Some((*latency_ms, *jitter_ms)),
            _ => None,
        }) {
            let jitter = if jitter_ms == 0 {
                0
            } else {
                self.rng.next_u64() % (jitter_ms + 1)
            };
            // Order is kept: a chunk never leaves before the one read before it.
            sleep_until(arrived + Duration::from_millis(latency_ms + jitter)).await;
        }
        if let Some((after_ms, for_ms)) = self.find(|t| match t {
            Toxic::Hold { after_ms, for_ms } => Some((*after_ms, *for_ms)),
            _ => None,
        }) {
            let (from, until) = (self.at(after_ms), self.at(after_ms + for_ms));
            let now = Instant::now_for_proxy();
            if now >= from && now < until {
                sleep_until(until).await;
            }
        }
        let slicer = self.find(|t| match t {
            Toxic::Slicer {
                average_size,
                size_variation,
                delay_us,
            } => Some((*average_size, *size_variation, *delay_us)),
            _ => None,
        });
        let rate = self.find(|t| match t {
            Toxic::Bandwidth { rate_kbps } => Some(*rate_kbps),
            _ => None,
        });
        let mut rest = chunk;
        while !rest.is_empty() {
            let n = match slicer {
                Some((avg, var, _)) => {
                    let low = avg.saturating_sub(var).max(1);
                    let span = (avg + var).saturating_sub(low) + 1;
                    let size = low + self.rng.next_u64() % span;
                    usize::try_from(size).unwrap_or(usize::MAX).min(rest.len())
                }
                None => rest.len(),
            };
            let (now, later) = rest.split_at(n);
            to.write_all(now).await?;
            to.flush().await?;
            if let Some(rate) = rate.filter(|r| *r > 0) {
                // rate in KB/s: n bytes take n / (rate * 1000) s.
                pacer
                    .spend(Duration::from_micros(n as u64 * 1_000 / rate))
                    .await;
            }
            if let Some((_, _, delay_us)) = slicer.filter(|_| !later.is_empty()) {
                pacer.spend(Duration::from_micros(delay_us)).await;
            }
            rest = later;
        }
        Ok(())
    }
}

/// Paces writes on the wall clock: each write owes some time, and the pacer sleeps only once
/// the debt reaches [`PACER_SLEEP_MIN`] (timers are coarser than a slice's few microseconds).
#[derive(Debug, Default)]
struct Pacer {
    next: Option<Instant>,
}

/// Smallest sleep the pacer takes.
const PACER_SLEEP_MIN: Duration = Duration::from_millis(2);

impl Pacer {
    async fn spend(&mut self, d: Duration) {
        let now = Instant::now_for_proxy();
        let next = self.next.filter(|n| *n > now).unwrap_or(now) + d;
        self.next = Some(next);
        if next >= now + PACER_SLEEP_MIN {
            sleep_until(next).await;
        }
    }
}

/// Reads and drops everything until the peer closes.
async fn discard<R: AsyncRead + Unpin>(from: &mut R) {
    let mut buf = vec![0u8; READ_CHUNK_BYTES];
    while let Ok(n) = from.read(&mut buf).await {
        if n == 0 {
            break;
        }
    }
}
