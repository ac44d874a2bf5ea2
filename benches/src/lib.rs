//! Shared helpers of the benchmarks.
//!
//! * [`MachineInfo`]: the CPU model and the crypto-relevant CPU flags, printed at the top of every
//!   bench run so a table of numbers always says where it was taken.
//! * [`spawn_echo_server`]: a bare tokio-tungstenite echo server on loopback, the transport ceiling.
//! * [`run_load`]: a bounded WebSocket round-trip load generator that takes a `ws://` URL, so the
//!   same generator measures the echo server now and the relay end to end later.
//! * [`relay_world`]: a relay-core `Relay` on a `MemoryStore` under a virtual clock, set up through
//!   its public HTTP/WS inputs, for the relay-core benches.
//!
//! Benches measure wall time by design, so this crate reads the real clock (`Instant::now`) in
//! exactly one place, [`wall_now`]; the workspace ban on ambient clocks is for the sans-IO cores.

pub mod relay_load;
pub mod relay_process;
pub mod relay_world;

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{SinkExt as _, StreamExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Barrier;
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{self, Message};

/// CPU flags that decide which code paths the crypto crates can take.
pub const CRYPTO_FLAGS: [&str; 7] = [
    "aes",
    "vaes",
    "pclmulqdq",
    "vpclmulqdq",
    "sha_ni",
    "avx2",
    "avx512f",
];

/// The machine a run was taken on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineInfo {
    /// `model name` of the first CPU in `/proc/cpuinfo` (or `unknown`).
    pub cpu_model: String,
    /// Logical CPUs visible to this process.
    pub logical_cpus: usize,
    /// Each of [`CRYPTO_FLAGS`] and whether the CPU advertises it.
    pub flags: Vec<(&'static str, bool)>,
    /// `RUSTFLAGS` at run time (cargo passes the build-time value through to bench processes).
    pub rustflags: String,
}

impl MachineInfo {
    /// Reads `/proc/cpuinfo` (Linux); on other systems the model is `unknown` and no flag is set.
    pub fn detect() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        Self::from_cpuinfo(&cpuinfo)
    }

    /// Parses the text of `/proc/cpuinfo`.
    pub fn from_cpuinfo(cpuinfo: &str) -> Self {
        let field = |name: &str| {
            cpuinfo
                .lines()
                .filter_map(|l| l.split_once(':'))
                .find(|(k, _)| k.trim() == name)
                .map(|(_, v)| v.trim().to_owned())
        };
        let cpu_model = field("model name").unwrap_or_else(|| "unknown".to_owned());
        let present = field("flags").unwrap_or_default();
        let flags = CRYPTO_FLAGS
            .iter()
            .map(|&f| (f, present.split_whitespace().any(|p| p == f)))
            .collect();
        Self {
            cpu_model,
            logical_cpus: std::thread::available_parallelism().map_or(1, usize::from),
            flags,
            rustflags: std::env::var("RUSTFLAGS").unwrap_or_default(),
        }
    }
}

impl fmt::Display for MachineInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cpu: {} ({} logical)\nflags:",
            self.cpu_model, self.logical_cpus
        )?;
        for (name, on) in &self.flags {
            write!(f, " {name}={}", if *on { "yes" } else { "no" })?;
        }
        let rf = if self.rustflags.is_empty() {
            "(none)"
        } else {
            &self.rustflags
        };
        write!(f, "\nRUSTFLAGS: {rf}")
    }
}

/// The real clock. Benches measure wall time by design; this is the single allowed reader.
#[allow(clippy::disallowed_methods)] // benches measure wall time by design (see the crate doc)
pub fn wall_now() -> Instant {
    Instant::now()
}

/// Why a load run failed.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// Binding, connecting or a WebSocket protocol error.
    #[error("websocket: {0}")]
    Ws(#[from] tungstenite::Error),
    /// Local socket error.
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    /// The peer closed or answered with something other than the echoed frame.
    #[error("unexpected reply on connection {0}")]
    UnexpectedReply(usize),
    /// The run did not finish within [`LoadConfig::deadline`].
    #[error("load run exceeded its deadline of {0:?}")]
    Deadline(Duration),
    /// A connection task panicked or was cancelled.
    #[error("connection task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// Shape of one bounded load run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadConfig {
    /// Concurrent WebSocket connections, each running a closed loop (send, await the reply).
    pub connections: usize,
    /// Unmeasured round trips per connection before the measured ones.
    pub warmup_round_trips: usize,
    /// Measured round trips per connection.
    pub round_trips_per_connection: usize,
    /// Size of the text frame sent each round trip.
    pub frame_bytes: usize,
    /// Hard bound on the whole run, connecting included.
    pub deadline: Duration,
}

impl LoadConfig {
    /// Measured round trips in total.
    pub fn total_round_trips(&self) -> usize {
        self.connections * self.round_trips_per_connection
    }
}

/// Result of one load run.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadReport {
    /// Connections used.
    pub connections: usize,
    /// Measured round trips (all connections).
    pub round_trips: usize,
    /// From the first measured send to the last measured reply.
    pub wall: Duration,
    /// Sorted latencies of every measured round trip.
    latencies: Vec<Duration>,
}

impl LoadReport {
    /// Round trips per second over the measured window.
    pub fn round_trips_per_sec(&self) -> f64 {
        let secs = self.wall.as_secs_f64();
        if secs > 0.0 {
            self.round_trips as f64 / secs
        } else {
            0.0
        }
    }

    /// Latency at quantile `q` in `[0, 1]` (nearest rank), zero when nothing was measured.
    pub fn latency_quantile(&self, q: f64) -> Duration {
        quantile(&self.latencies, q)
    }
}

/// Nearest-rank quantile of sorted samples.
fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (q.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.saturating_sub(1).min(sorted.len() - 1)]
}

/// A ~`len`-byte ASCII text frame (deterministic content).
pub fn text_frame(len: usize) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    (0..len)
        .map(|i| char::from(ALPHABET[i % ALPHABET.len()]))
        .collect()
}

/// The WebSocket configuration of every socket in the benches, both ends, echo and relay
/// clients alike: the relay's own read buffer size (`relay_server::WS_READ_BUFFER_BYTES`).
///
/// tungstenite zero-fills its whole read buffer before every `read` syscall, so its default
/// 128 KiB would make each side spend more time in `memset` than in the socket: a load
/// generator (or an echo) with that default measures itself, not the server.
pub fn ws_config() -> WebSocketConfig {
    WebSocketConfig::default().read_buffer_size(relay_server::WS_READ_BUFFER_BYTES)
}

/// Runs `cfg.connections` closed-loop clients against `url` and collects every round-trip latency.
///
/// Every connection connects and warms up first; the measured loops start together behind a
/// barrier. Each round trip sends one text frame and waits for a text frame with the same content.
/// The whole run is bounded by `cfg.deadline` and by the round-trip counts.
pub async fn run_load(url: &str, cfg: &LoadConfig) -> Result<LoadReport, LoadError> {
    tokio::time::timeout(cfg.deadline, run_load_unbounded(url, cfg))
        .await
        .map_err(|_| LoadError::Deadline(cfg.deadline))?
}

async fn run_load_unbounded(url: &str, cfg: &LoadConfig) -> Result<LoadReport, LoadError> {
    let barrier = Arc::new(Barrier::new(cfg.connections));
    let mut tasks = Vec::with_capacity(cfg.connections);
    for id in 0..cfg.connections {
        let (url, cfg, barrier) = (url.to_owned(), cfg.clone(), Arc::clone(&barrier));
        tasks.push(tokio::spawn(async move {
            connection_loop(id, &url, &cfg, &barrier).await
        }));
    }
    let mut latencies = Vec::with_capacity(cfg.total_round_trips());
    let mut window: Option<(Instant, Instant)> = None;
    for task in tasks {
        let run = task.await??;
        latencies.extend_from_slice(&run.latencies);
        window = Some(match window {
            None => (run.start, run.end),
            Some((s, e)) => (s.min(run.start), e.max(run.end)),
        });
    }
    latencies.sort_unstable();
    let wall = window.map_or(Duration::ZERO, |(s, e)| e.duration_since(s));
    Ok(LoadReport {
        connections: cfg.connections,
        round_trips: latencies.len(),
        wall,
        latencies,
    })
}

struct ConnectionRun {
    start: Instant,
    end: Instant,
    latencies: Vec<Duration>,
}

async fn connection_loop(
    id: usize,
    url: &str,
    cfg: &LoadConfig,
    barrier: &Barrier,
) -> Result<ConnectionRun, LoadError> {
    let (mut ws, _) =
        tokio_tungstenite::connect_async_with_config(url, Some(ws_config()), true).await?;
    let frame = text_frame(cfg.frame_bytes);
    for _ in 0..cfg.warmup_round_trips {
        round_trip_once(id, &mut ws, &frame).await?;
    }
    barrier.wait().await;
    let mut latencies = Vec::with_capacity(cfg.round_trips_per_connection);
    let start = wall_now();
    for _ in 0..cfg.round_trips_per_connection {
        let t0 = wall_now();
        round_trip_once(id, &mut ws, &frame).await?;
        latencies.push(t0.elapsed());
    }
    let end = wall_now();
    // Best effort: the server may already be gone at the end of a run.
    let _ = ws.close(None).await;
    Ok(ConnectionRun {
        start,
        end,
        latencies,
    })
}

type ClientWs = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<TcpStream>>;

async fn round_trip_once(id: usize, ws: &mut ClientWs, frame: &str) -> Result<(), LoadError> {
    ws.send(Message::text(frame)).await?;
    loop {
        match ws.next().await {
            Some(Ok(Message::Text(reply))) if reply.as_str() == frame => return Ok(()),
            // Control frames may interleave; tungstenite answers pings itself.
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
            Some(Err(e)) => return Err(e.into()),
            _ => return Err(LoadError::UnexpectedReply(id)),
        }
    }
}

/// A running echo server: its address and the accept task (abort it to stop).
#[derive(Debug)]
pub struct EchoServer {
    /// The bound loopback address.
    pub addr: SocketAddr,
    /// The accept loop; connection tasks end when their client closes.
    pub task: JoinHandle<()>,
}

impl EchoServer {
    /// `ws://` URL of the server.
    pub fn url(&self) -> String {
        format!("ws://{}/", self.addr)
    }
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Binds a bare tokio-tungstenite echo server on `127.0.0.1:0` (loopback only).
///
/// Every text or binary frame is sent back unchanged; `TCP_NODELAY` is set as a relay would.
pub async fn spawn_echo_server() -> Result<EchoServer, LoadError> {
    let listener = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0)).await?;
    let addr = listener.local_addr()?;
    let task = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(echo_connection(stream));
        }
    });
    Ok(EchoServer { addr, task })
}

async fn echo_connection(stream: TcpStream) {
    if stream.set_nodelay(true).is_err() {
        return;
    }
    let Ok(mut ws) = tokio_tungstenite::accept_async_with_config(stream, Some(ws_config())).await
    else {
        return;
    };
    while let Some(Ok(msg)) = ws.next().await {
        let echo = match msg {
            Message::Text(_) | Message::Binary(_) => msg,
            Message::Close(_) => break,
            _ => continue,
        };
        if ws.send(echo).await.is_err() {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpuinfo_parsing() {
        let info = MachineInfo::from_cpuinfo(
            "processor\t: 0\nmodel name\t: AMD EPYC 9R14\nflags\t\t: fpu aes avx2 sha_ni\n",
        );
        assert_eq!(info.cpu_model, "AMD EPYC 9R14");
        let on: Vec<_> = info.flags.iter().filter(|f| f.1).map(|f| f.0).collect();
        assert_eq!(on, ["aes", "sha_ni", "avx2"]);
        assert_eq!(MachineInfo::from_cpuinfo("").cpu_model, "unknown");
    }

    #[test]
    fn nearest_rank_quantiles() {
        let s: Vec<_> = (1..=100).map(Duration::from_micros).collect();
        assert_eq!(quantile(&s, 0.5), Duration::from_micros(50));
        assert_eq!(quantile(&s, 0.99), Duration::from_micros(99));
        assert_eq!(quantile(&s, 1.0), Duration::from_micros(100));
        assert_eq!(quantile(&[], 0.5), Duration::ZERO);
    }

    #[test]
    fn echo_round_trips_are_bounded() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let report = rt
            .block_on(async {
                let server = spawn_echo_server().await?;
                let cfg = LoadConfig {
                    connections: 3,
                    warmup_round_trips: 2,
                    round_trips_per_connection: 5,
                    frame_bytes: 200,
                    deadline: Duration::from_secs(10),
                };
                run_load(&server.url(), &cfg).await
            })
            .unwrap();
        assert_eq!(report.round_trips, 15);
        assert!(report.latency_quantile(0.99) >= report.latency_quantile(0.5));
    }
}
