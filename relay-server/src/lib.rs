//! The relay server: `relay-core`'s [`Relay`] behind axum, on any [`Network`].
//!
//! # Shape
//!
//! ```text
//!  axum handlers ──Input::Http{req, reply}──────┐
//!  /ws upgrade   ──Input::Connect{ws, reply}────┤  bounded mpsc      ┌──────────────────────┐
//!  conn tasks    ──Input::Frame/Disconnect──────┴─────────────────►  │ core task: owns Relay │
//!                ◄──Outbound::Text/Close (one bounded mpsc per conn)─│ drains poll_output    │
//!  PushWorker    ◄──submit (bounded queue, never waits)──────────────│ timer = poll_timeout  │
//!  (relay-push)  ──GoneTarget (bounded mpsc)──► handle_push_gone ───►│                       │
//!                                                                     └──────────────────────┘
//! ```
//!
//! * **One task owns the [`Relay`]** (no lock): handlers and connection tasks send it plain
//!   messages; after **every** input it drains `poll_output`, routes `Send` to the connection's
//!   outbound channel (`frame.encode()`), `Close` after everything queued before it, `Push` to
//!   the push worker; then it re-arms its timer from `poll_timeout` ([`seam::clock`]).
//! * **Push** ([`RelayServer::with_push`], [`PushDelivery`]): a [`relay_push::PushWorker`]
//!   delivers Web Push (RFC 8291 + VAPID), FCM and APNs; a push service's "gone" answer comes
//!   back as [`Relay::handle_push_gone`] on the core task. A slow or dead push service never
//!   delays routing: submitting never waits, and the worker's queue and concurrency are
//!   bounded. Without push delivery the outputs are dropped (logged at DEBUG).
//! * **Fail-stop**: if the relay reports [`Relay::is_failed`] after an input (a commit failed),
//!   the core closes every socket, logs at ERROR and rebuilds the relay with the
//!   [`RelayServer`]'s opener on the same store (the store is the source of truth); while the
//!   store stays unusable it retries every [`REBUILD_RETRY_MS`].
//! * **Routes**: every method on `/api/v1/*` goes to `handle_http` with the raw body (limit
//!   enforced before reading: [`MAX_JSON_BODY_BYTES`](wire::limits::MAX_JSON_BODY_BYTES), or
//!   [`MAX_MEDIA_PART_BYTES`](wire::limits::MAX_MEDIA_PART_BYTES) on the media chunk route;
//!   over it: 413 `BODY_TOO_LARGE`); `GET /ws` is the WebSocket (refused with the relay's
//!   response, e.g. 401, *before* upgrading). Every response carries permissive CORS headers
//!   and `OPTIONS` is answered as a preflight (the PWA is served from another origin).
//! * **Probes**: `GET /healthz` answers 200 `{"status":"live","role":…}` while the process
//!   serves HTTP; `GET /readyz` answers 200 `{"status":"ready","role":"active","shards":[…]}`
//!   (the shards it serves) while it serves clients, else 503 with the wire error body: `NOT_LEADER` (a standby),
//!   `STORAGE_UNAVAILABLE` (the store is down and the relay could not be rebuilt),
//!   `SERVER_SHUTTING_DOWN`. Point a load balancer's health check at `/readyz`.
//! * **Active/standby** ([`RelayServer::campaigning`], [`leadership`]): the server binds at once
//!   and stands by (every route but the probes: 503 `NOT_LEADER` with `Retry-After`) until it
//!   leads; it then opens the relay and serves; when the term ends it goes fail-stop at once
//!   (every socket closed) and stands by again.
//! * **Cluster node** ([`RelayServer::clustered`], [`cluster`]): the server binds at once,
//!   joins the cluster and serves each shard its membership owns with a core of its own (a
//!   term per shard, its store fenced by the shard's epoch); a shard planned to move has its
//!   core stopped (its batches in flight let finish) before it is handed over; a request or an
//!   upgrade for a shard not served here is refused like a standby's (503 `NOT_LEADER`). A
//!   crossing for one goes to the node serving it ([`peers`], with a cluster key: a WebSocket
//!   link per node, envelopes dropped when a link is full or fails, as the hand-off protocol
//!   allows), or is dropped without a key. When the membership ends every core stops at once
//!   and the node joins again.
//! * **Test mode** ([`RelayServer::with_test_mode`], `relay --test-mode`; **never in
//!   production**): the clock becomes an [`OffsetClock`] and
//!   `POST /api/v1/test/advance-clock {"ms": u64}` answers `200 {"now_ms": u64}` after moving
//!   it forward by `ms`, firing every timer that became due (`handle_timeout` on the core task)
//!   and executing their outputs (conformance/README.md, "Test clock"). No authentication.
//!   Without test mode the path is an unknown route like any other (404).
//! * **Graceful shutdown (the drain)**: when the shutdown future resolves (the `relay` binary:
//!   SIGTERM or Ctrl-C) the listener stops accepting and the core, between two batches (a
//!   batch in flight is always committed and answered first), refuses new upgrades (503),
//!   handles, commits and answers every input already queued (frames that arrived before the
//!   signal get their acks), then sends GOAWAY `server_shutdown` and a close 1001 (going away)
//!   to every socket after the frames queued for it, so clients reconnect elsewhere or later
//!   (relay-core has no input for this, so the shell sends the [`wire::ServerFrame::Goaway`]
//!   itself and reports the sockets disconnected). In-flight requests are served to the end;
//!   `serve` returns once every handler and socket task is gone, or after the drain deadline
//!   ([`DRAIN_DEADLINE_MS`], [`RelayServer::with_drain_deadline`]) with whatever is still
//!   open: at the deadline each core stops where it is, and a core on a thread of its own
//!   closes the sockets still on that thread as its thread ends. Every ack and 2xx was sent after its commit, so nothing acknowledged is lost. A
//!   campaigning server's term then ends and its leadership is released (PostgreSQL: a
//!   standby takes over at once).
//! * **Metrics** ([`RelayServer::with_metrics`], [`metrics`]): counters, gauges and histograms
//!   of what the server, its relay, its store and its push worker do, served on a listener of
//!   their own ([`metrics::serve_metrics`]); never per account or address.
//!
//! # Starting one
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use std::net::SocketAddr;
//! use seam::clock::SimClock;
//! use seam::net::Turmoil;
//! use relay_server::RelayServer;
//! use relay_core::{Config, MemoryBlobStore, store::MemoryStore};
//!
//! // Inside a turmoil host (the simulator keeps `store` to rebuild the host after a crash):
//! let store = MemoryStore::new();
//! let server = RelayServer::in_memory(Config::default(), 7, store, MemoryBlobStore::new())
//!     .with_clock(SimClock::default());
//! server
//!     .run::<Turmoil>(SocketAddr::from(([0, 0, 0, 0], 8080)), std::future::pending())
//!     .await
//! # }
//! ```
//!
//! # Logs
//! A span per connection (`conn` id and `user` uuid only), per-frame events at TRACE (type and
//! size, never payloads, tokens or tickets), lifecycle at INFO, failures at WARN / ERROR; as
//! text or one JSON object per line ([`logging`]).

pub mod cluster;
mod cluster_key;
mod committer;
mod driver;
pub mod embedded;
pub mod leadership;
pub mod logging;
pub mod metrics;
pub mod onward;
mod outbound;
pub mod peers;
pub mod postgres;
mod push;
mod readers;
mod rest;
pub mod secrets;
mod start;
mod supervisor;
mod ws;

use std::{
    fmt, io,
    net::SocketAddr,
    sync::{Arc, atomic::AtomicBool},
    time::Duration,
};

use axum::{
    Router,
    routing::{any, get},
};
use relay_core::{
    Config, MemoryBlobStore, Relay,
    handoff::{ShardId, ShardMap, ShardPlace},
    store::{MemoryStore, StoreError},
};
use tokio::sync::{oneshot, watch};
use tracing::{Span, error, info, info_span, warn};

use seam::clock::{Clock, OffsetClock, SystemClock};
use seam::net::{ConnectionCounter, Network, ServeLimits, serve_with_limits};

use self::cluster::Membership;
use self::driver::Phase;
use self::driver::{PushSink, TermCtx};
use self::leadership::Leadership;
use self::metrics::Metrics;

pub use self::committer::{CommitDelay, CommitMode, PIPELINE_DEPTH};
pub use self::driver::{CrossingTransit, Transit};
pub use self::outbound::OutboundBytes;
pub use self::push::{NET_PUSH_MAX_IDLE, NetPushTransport, PushDelivery};
pub use self::readers::{READ_THREADS, ReadDelay, ReadMode};
pub use self::rest::{HEALTHZ_PATH, OVERSIZE_DRAIN_BYTES, READYZ_PATH};
pub use self::ws::{
    CLOSE_LINGER_MS, HARD_MAX_MESSAGE_BYTES, MAX_WRITE_BATCH, WS_MAX_WRITE_BUFFER_BYTES,
    WS_READ_BUFFER_BYTES, WS_WRITE_BUFFER_BYTES,
};
pub use seam::net::{OUTBOUND_QUEUE_BYTES, WRITE_DEADLINE_MS};

/// Inputs waiting for the core task; when full, handlers and socket readers wait (backpressure).
pub const INPUT_QUEUE_CAPACITY: usize = 1024;
/// Inputs the core task takes from its queue at a time: whatever is queued, up to this many.
/// With an inline or task committer each such chunk is one batch (one group commit, then its
/// answers and frames go out); with a commit thread the open batch keeps taking chunks while a
/// commit runs and is sealed once it holds this many inputs (so it holds fewer than twice this).
pub const MAX_BATCH_INPUTS: usize = 256;
/// Frames waiting to be written on one socket; when full the socket is closed (the relay keeps
/// what it did not deliver, and the client re-syncs on reconnect). Their bytes are bounded too,
/// by [`ServeLimits::outbound_queue_bytes`] ([`OUTBOUND_QUEUE_BYTES`] by default).
pub const OUTBOUND_QUEUE_CAPACITY: usize = 1024;
/// The test-mode clock route (served only by a server in test mode).
pub const ADVANCE_CLOCK_PATH: &str = "/api/v1/test/advance-clock";

/// How long a shutdown may take once it begins, by default ([`RelayServer::with_drain_deadline`]):
/// past it the server stops with whatever sockets and requests are still open.
pub const DRAIN_DEADLINE_MS: u64 = 10_000;

/// Delay between attempts to rebuild a failed relay from its store.
pub const REBUILD_RETRY_MS: u64 = 1_000;

/// Builds a fresh [`Relay`] from the durable store; called at start and after a fail-stop.
pub type RelayOpener = Box<dyn FnMut() -> Result<Relay, StoreError> + Send>;

/// How a server gets its relay.
enum Mode {
    /// Opens it at start and serves until shutdown: one relay core per shard, each opened by
    /// its opener (one for an unsharded relay).
    Single(Vec<RelayOpener>),
    /// Campaigns; serves while it leads ([`leadership`]).
    Campaign(Box<dyn Leadership>),
    /// A cluster node: serves the shards its membership owns ([`cluster`]).
    Cluster(Box<dyn Membership>),
}

/// A relay server ready to run: how to open the relay, which clock, where pushes go.
pub struct RelayServer {
    mode: Mode,
    clock: Arc<dyn Clock>,
    push: Option<PushDelivery>,
    test_mode: bool,
    limits: ServeLimits,
    connections: ConnectionCounter,
    outbound_bytes: OutboundBytes,
    resolver: Option<Arc<dyn relay_push::dns::Resolve>>,
    metrics: Option<Metrics>,
    drain_deadline_ms: u64,
    commit_mode: CommitMode,
    read_mode: ReadMode,
    transit: Option<CrossingTransit>,
    core_threads: bool,
    on_core_threads: Arc<std::sync::atomic::AtomicU64>,
    cluster_key: Option<peers::ClusterKey>,
    trusted_proxies: Arc<std::collections::BTreeSet<std::net::IpAddr>>,
}

impl fmt::Debug for RelayServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RelayServer")
            .field("clock", &self.clock)
            .field("push", &self.push)
            .field("test_mode", &self.test_mode)
            .field("limits", &self.limits)
            .field("commit_mode", &self.commit_mode)
            .field("read_mode", &self.read_mode)
            .finish_non_exhaustive()
    }
}

impl RelayServer {
    /// A server that opens its relay with `open` (called again to rebuild after a
    /// fail-stop: it must open the **same** store), on the [`SystemClock`], without push
    /// delivery.
    pub fn new(open: impl FnMut() -> Result<Relay, StoreError> + Send + 'static) -> Self {
        Self::with_mode(Mode::Single(vec![Box::new(open)]))
    }

    /// A sharded server: `shards` relay cores over one store, each running one shard of
    /// `ShardMap::new(shards)` and opened (and rebuilt after a fail-stop) by `open` with its
    /// [`ShardPlace`] (which the relay's [`Config::shard`] must be). Requests and upgrades go to
    /// the core of their account's shard, and what a core sends another shard's
    /// (`Output::Cross`) to that core. `shards` 0 is taken for 1.
    pub fn sharded(
        shards: u16,
        open: impl FnMut(ShardPlace) -> Result<Relay, StoreError> + Clone + Send + 'static,
    ) -> Self {
        let map = ShardMap::new(shards.max(1)).unwrap_or_else(|| ShardPlace::single().map());
        let openers = (0..map.shards())
            .filter_map(|i| ShardPlace::new(map, ShardId(i)))
            .map(|place| {
                let mut open = open.clone();
                Box::new(move || open(place)) as RelayOpener
            })
            .collect();
        Self::with_mode(Mode::Single(openers))
    }

    /// A server that serves only while it leads among several (active/standby; see
    /// [`leadership`]): it binds at once, stands by while `leadership` campaigns, opens the
    /// relay with the won [`Term`](leadership::Term)'s opener, and goes fail-stop and stands by again when the
    /// term ends.
    pub fn campaigning(leadership: impl Leadership) -> Self {
        Self::with_mode(Mode::Campaign(Box::new(leadership)))
    }

    /// A cluster node (see [`cluster`]): it binds at once, joins the cluster with
    /// `membership`, serves the shards it owns (one core each, opened with the shard's epoch)
    /// and follows the membership as they come and go; requests and upgrades for a shard it
    /// does not serve are refused (503 `NOT_LEADER`).
    pub fn clustered(membership: impl Membership) -> Self {
        Self::with_mode(Mode::Cluster(Box::new(membership)))
    }

    /// A cluster node's key, the same on every node (see [`peers`]): crossings for shards
    /// another node serves go there, and the other nodes' links are accepted on
    /// [`peers::PEER_PATH`]. Without it a cluster node drops them.
    pub fn with_cluster_key(mut self, key: peers::ClusterKey) -> Self {
        self.cluster_key = Some(key);
        self
    }

    /// Load balancers in front of this relay (their addresses): a request or an upgrade from
    /// one counts as the client's that the last `X-Forwarded-For` entry names for the
    /// per-address bounds, and their connections are not held to the per-address connection
    /// cap. Never name an address clients can connect from: they could claim any address.
    pub fn with_trusted_proxies(
        mut self,
        proxies: std::collections::BTreeSet<std::net::IpAddr>,
    ) -> Self {
        self.trusted_proxies = Arc::new(proxies);
        self
    }

    fn with_mode(mode: Mode) -> Self {
        Self {
            mode,
            clock: Arc::new(SystemClock),
            push: None,
            test_mode: false,
            limits: ServeLimits::default(),
            connections: ConnectionCounter::default(),
            outbound_bytes: OutboundBytes::default(),
            resolver: None,
            metrics: None,
            drain_deadline_ms: DRAIN_DEADLINE_MS,
            commit_mode: CommitMode::Inline,
            read_mode: ReadMode::Core,
            transit: None,
            core_threads: false,
            on_core_threads: Arc::default(),
            cluster_key: None,
            trusted_proxies: Arc::default(),
        }
    }

    /// A server over a [`MemoryStore`] and a [`MemoryBlobStore`] (clones of both survive a
    /// simulated crash: build the restarted host's server from the same handles).
    pub fn in_memory(
        config: Config,
        seed: u64,
        store: MemoryStore,
        blobs: MemoryBlobStore,
    ) -> Self {
        Self::in_memory_sharded(1, config, seed, store, blobs)
    }

    /// [`in_memory`](Self::in_memory) with `shards` relay cores ([`sharded`](Self::sharded)).
    pub fn in_memory_sharded(
        shards: u16,
        config: Config,
        seed: u64,
        store: MemoryStore,
        blobs: MemoryBlobStore,
    ) -> Self {
        Self::sharded(shards, move |place| {
            let config = Config {
                shard: place,
                ..config.clone()
            };
            Relay::with_blobs(
                config,
                Box::new(store.clone()),
                Box::new(blobs.clone()),
                seed,
            )
        })
    }

    /// Uses `clock` for `now` (a [`seam::clock::SimClock`] under turmoil).
    #[must_use]
    pub fn with_clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Delivers the relay's push outputs for real (Web Push, FCM, APNs; see [`PushDelivery`])
    /// and deletes the targets the push services report gone. The relay's [`Config`] must
    /// agree ([`PushDelivery::configure`]).
    /// Over HTTPS with a policy that checks addresses, the transport's resolver also checks
    /// push subscriptions ([`with_endpoint_resolver`](Self::with_endpoint_resolver)).
    #[must_use]
    pub fn with_push(mut self, delivery: PushDelivery) -> Self {
        if let Some(resolver) = delivery.endpoint_resolver() {
            self.resolver = Some(resolver);
        }
        self.push = Some(delivery);
        self
    }

    /// Resolves the host of every push subscription's endpoint with `resolver` before the
    /// relay checks it (`relay_core::destination`: a relay whose policy checks addresses
    /// refuses a name that comes without its resolution).
    #[must_use]
    pub fn with_endpoint_resolver(mut self, resolver: Arc<dyn relay_push::dns::Resolve>) -> Self {
        self.resolver = Some(resolver);
        self
    }

    /// **Test mode — never in production.** Serves the unauthenticated
    /// `POST /api/v1/test/advance-clock` route ([`ADVANCE_CLOCK_PATH`]), which moves the
    /// relay's clock (whichever [`with_clock`](Self::with_clock) chose, wrapped in an
    /// [`OffsetClock`]) forward, fires the timers that became due and answers
    /// `{"now_ms": u64}` once their outputs were executed.
    #[must_use]
    pub fn with_test_mode(mut self) -> Self {
        self.test_mode = true;
        self
    }

    /// Connection limits (header-read deadline, caps in total and per address, the write
    /// deadline and outbound queue bytes of a WebSocket); default [`ServeLimits::default`].
    pub fn with_limits(mut self, limits: ServeLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Counts what the server does in `metrics` ([`metrics`]; serve them with
    /// [`metrics::serve_metrics`] on a listener of their own). Wrap the store the relay opens
    /// with [`Metrics::meter`] for commit latencies and store errors.
    #[must_use]
    pub fn with_metrics(mut self, metrics: Metrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// How long the drain after the shutdown signal may take, in ms (default
    /// [`DRAIN_DEADLINE_MS`]); past it `serve` returns with what is still open.
    #[must_use]
    pub fn with_drain_deadline(mut self, ms: u64) -> Self {
        self.drain_deadline_ms = ms;
        self
    }

    /// Where the relay's commits run (default [`CommitMode::Inline`]: on the core task, one
    /// batch at a time). [`CommitMode::Thread`] pipelines them on a thread of their own: the
    /// core handles the next batch while one commits, with at most [`PIPELINE_DEPTH`] in
    /// flight, and releases nothing of a batch before its commit and every earlier one
    /// succeeded. For stores whose commit waits on a disk or a network.
    #[must_use]
    pub fn with_commit_mode(mut self, mode: CommitMode) -> Self {
        self.commit_mode = mode;
        self
    }

    /// Where the relay's reads of rows it does not hold in memory run (default
    /// [`ReadMode::Core`]: on the core task, as a frame needs them). [`ReadMode::Threads`]
    /// runs them on threads of their own: a frame that needs a cold row waits for its read
    /// (and its connection's later frames behind it) while the core serves everyone else.
    /// For stores whose reads wait on a disk or a network.
    #[must_use]
    pub fn with_read_mode(mut self, mode: ReadMode) -> Self {
        self.read_mode = mode;
        self
    }

    /// Passes what crosses between the cores of a sharded server through `transit`, which may
    /// lose, repeat or delay each crossing as a network between processes would (see
    /// [`Transit`]); without it, each is handed to its core at once. For a harness that checks
    /// the hand-off protocol (the simulator); a relay for users has no use for it.
    #[must_use]
    pub fn with_crossing_transit(mut self, transit: CrossingTransit) -> Self {
        self.transit = Some(transit);
        self
    }

    /// Runs each core on a thread of its own, with its sockets (tokio TCP connections move
    /// there after their upgrade; others stay where they were accepted): thread per core.
    /// Without it, the cores are tasks on the runtime `serve` runs on (the simulator's way:
    /// turmoil hosts have one thread each). A campaigning (`--postgres`) server's cores are
    /// tasks either way.
    #[must_use]
    pub fn with_core_threads(mut self) -> Self {
        self.core_threads = true;
        self
    }

    /// Counts the WebSockets served on their core's thread so far ([`with_core_threads`](Self::with_core_threads);
    /// shared: read it while the server runs).
    pub fn sockets_on_core_threads(&self) -> Arc<std::sync::atomic::AtomicU64> {
        Arc::clone(&self.on_core_threads)
    }

    /// Counts the connections this server holds open (shared: read it while it runs).
    pub fn connections(&self) -> ConnectionCounter {
        self.connections.clone()
    }

    /// Bytes of frames queued for its sockets and not yet written, over all sockets (shared:
    /// read it while it runs).
    pub fn outbound_bytes(&self) -> OutboundBytes {
        self.outbound_bytes.clone()
    }

    /// Whether [`with_test_mode`](Self::with_test_mode) was called.
    pub fn is_test_mode(&self) -> bool {
        self.test_mode
    }

    /// Binds `addr` on network `N` and serves until `shutdown` resolves.
    pub async fn run<N: Network>(
        self,
        addr: SocketAddr,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> io::Result<()> {
        let listener = N::bind(addr).await?;
        self.serve::<N>(listener, shutdown).await
    }

    /// Serves on an already bound `listener` until `shutdown` resolves, then shuts down
    /// gracefully (see the module doc) and returns once the core task has stopped.
    ///
    /// Fails if the relay cannot be opened from its store (a single server, at start), if a
    /// campaigning server's leadership fails for good ([`CampaignError::Fatal`](leadership::CampaignError::Fatal)), or if the
    /// listener fails.
    pub async fn serve<N: Network>(
        mut self,
        listener: N::Listener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> io::Result<()> {
        let addr = axum::serve::Listener::local_addr(&listener)?;
        let (stop_tx, stop_rx) = watch::channel(false);
        let deadline_stop = stop_rx.clone();
        let (phase_tx, phase_rx) = watch::channel(Phase::Standby);
        let phase_tx = Arc::new(phase_tx);
        let (fatal_tx, fatal_rx) = oneshot::channel::<String>();
        let (core, onward) = self.start_cores::<N>(&phase_tx, stop_rx, fatal_tx)?;
        info!(%addr, "relay listening");
        let router = router(self.app(phase_rx, onward));
        let (fatal_seen_tx, fatal_seen) = oneshot::channel::<String>();
        let shutdown = stop_on(shutdown, fatal_rx, fatal_seen_tx, stop_tx);
        let connections = self.connections.clone();
        let core_abort = core.abort_handle();
        let drain_deadline_ms = self.drain_deadline_ms;
        let deadline = drain_deadline(deadline_stop, drain_deadline_ms);
        let finish = async {
            let served =
                serve_with_limits(listener, router, shutdown, self.limits, self.connections).await;
            // Drops the last inputs sender the router shared: the core stops once every socket
            // task dropped its own.
            phase_tx.send_replace(Phase::Stopping);
            if let Err(error) = core.await {
                tracing::error!(%error, "relay core task ended abnormally");
            }
            served
        };
        let served = tokio::select! {
            biased;
            served = finish => served,
            () = deadline => {
                warn!(
                    drain_deadline_ms,
                    connections = connections.open(),
                    "drain deadline passed: stopping with these connections still open"
                );
                core_abort.abort();
                Ok(())
            }
        };
        info!("relay stopped");
        served?;
        match fatal_seen.await {
            Ok(why) => Err(io::Error::other(why)),
            Err(_) => Ok(()),
        }
    }

    /// What the handlers share: the way to the cores (`phase`), the limits, the metrics, a
    /// cluster node's check of the other nodes' links.
    fn app(&self, phase: watch::Receiver<Phase>, onward: Option<onward::Onward>) -> rest::App {
        rest::App {
            phase,
            test_mode: self.test_mode,
            limits: self.limits,
            resolver: self.resolver.clone(),
            metrics: self.metrics.clone(),
            on_core_threads: Arc::clone(&self.on_core_threads),
            cluster: self.cluster_key.clone().map(|key| {
                let clock = Arc::clone(&self.clock);
                rest::PeerCheck(Arc::new(move |value: &str| {
                    cluster_key::verify(&key, value, clock.now().0 / 1_000)
                }))
            }),
            onward,
            trusted_proxies: Arc::clone(&self.trusted_proxies),
        }
    }

    /// The clock of the cores and the test-mode clock, if any: in test mode an
    /// [`OffsetClock`] over the server's clock (said at WARN), which the cores read and the
    /// advance-clock route moves; otherwise the server's clock.
    fn core_clock(&self) -> (Option<OffsetClock>, Arc<dyn Clock>) {
        let test_clock = self
            .test_mode
            .then(|| OffsetClock::new(Arc::clone(&self.clock)));
        let clock: Arc<dyn Clock> = match &test_clock {
            Some(test_clock) => {
                tracing::warn!(
                    "TEST MODE: POST {ADVANCE_CLOCK_PATH} moves the clock (never in production)"
                );
                Arc::new(test_clock.clone())
            }
            None => Arc::clone(&self.clock),
        };
        (test_clock, clock)
    }

    /// Has the metrics (if on) read the server's open connections, its limits and the bytes
    /// queued for its sockets.
    fn attach_metrics(&self) {
        if let Some(metrics) = &self.metrics {
            metrics.attach_connections(self.connections.clone(), self.limits);
            metrics.attach_outbound(self.outbound_bytes.clone());
        }
    }

    /// What every core of this server shares: `clock`, the test-mode clock, the commit and read modes,
    /// the outbound queue limit and counter, the metrics.
    fn core_ctx(&self, clock: Arc<dyn Clock>, test_clock: Option<OffsetClock>) -> CoreCtx {
        CoreCtx {
            clock,
            commit_mode: self.commit_mode.clone(),
            read_mode: self.read_mode.clone(),
            test_clock,
            queue_bytes: self.limits.outbound_queue_bytes,
            outbound_bytes: self.outbound_bytes.clone(),
            metrics: self.metrics.clone(),
        }
    }
}

/// The server's shutdown signal: resolves on `shutdown`, or when the leadership fails for
/// good (said at ERROR, and its reason passed on to `fatal_seen`); then tells the cores to stop.
async fn stop_on(
    shutdown: impl Future<Output = ()>,
    fatal: oneshot::Receiver<String>,
    fatal_seen: oneshot::Sender<String>,
    stop: watch::Sender<bool>,
) {
    tokio::select! {
        biased;
        () = shutdown => info!("shutdown requested: no new connections"),
        Ok(why) = fatal => {
            error!(reason = %why, "leadership failed for good: shutting down");
            let _ = fatal_seen.send(why);
        }
    }
    let _ = stop.send(true);
}

/// Resolves `drain_deadline_ms` after the stop signal: how long the drain may take.
async fn drain_deadline(mut stop: watch::Receiver<bool>, drain_deadline_ms: u64) {
    let _ = stop.wait_for(|stop| *stop).await;
    tokio::time::sleep(Duration::from_millis(drain_deadline_ms)).await;
}

/// Runs a core until it stops, or until the drain deadline passes: then the core is dropped,
/// and with a thread of its own the thread ends, closing the sockets it still serves (the
/// server has stopped waiting for them).
async fn abandoned_at<T>(core: impl Future<Output = T>, deadline: impl Future<Output = ()>) {
    tokio::select! {
        biased;
        _ = core => {}
        () = deadline => warn!("drain deadline passed: the core stops with its sockets"),
    }
}

/// Waits for the cores' tasks to end, then stops the task that routes gone reports to them.
async fn join_cores(
    tasks: Vec<tokio::task::JoinHandle<()>>,
    routed: Option<tokio::task::JoinHandle<()>>,
) {
    for task in tasks {
        if let Err(error) = task.await {
            error!(%error, "a relay core task ended abnormally");
        }
    }
    if let Some(routed) = routed {
        routed.abort();
    }
}

/// The span of a core's logs (and its sockets'): a sharded server's cores number their
/// connections each from 1, and the shard tells them apart.
fn core_span(sharded: bool, relay: &Relay) -> Span {
    if sharded {
        info_span!("core", shard = relay.config().shard.me().0)
    } else {
        Span::none()
    }
}

/// The placeholder left in a [`RelayServer`] whose mode was taken by `serve`.
fn no_relay() -> Result<Relay, StoreError> {
    Err(StoreError::Backend("this server is already serving".into()))
}

/// What every core of a server shares.
#[derive(Clone)]
struct CoreCtx {
    clock: Arc<dyn Clock>,
    commit_mode: CommitMode,
    read_mode: ReadMode,
    test_clock: Option<OffsetClock>,
    queue_bytes: usize,
    outbound_bytes: OutboundBytes,
    metrics: Option<Metrics>,
}

impl CoreCtx {
    fn core(
        &self,
        relay: Relay,
        open: RelayOpener,
        push: Option<PushSink>,
        store_down: Arc<AtomicBool>,
        term: Option<TermCtx>,
    ) -> driver::Core {
        driver::Core::new(
            relay,
            open,
            (self.commit_mode.clone(), self.read_mode.clone()),
            Arc::clone(&self.clock),
            push,
            self.test_clock.clone(),
            self.queue_bytes,
            self.outbound_bytes.clone(),
            store_down,
            term,
            self.metrics.clone(),
        )
    }
}

/// Has the metrics (if on) say the relay's queued-bytes limit and that this server leads,
/// in the term of `epoch` if it campaigns.
fn count_leading(metrics: Option<&Metrics>, config: &Config, epoch: Option<u64>) {
    if let Some(metrics) = metrics {
        metrics.set_queued_bytes_limit(config.max_offline_queue_bytes_total);
        metrics.leading(epoch);
    }
}

/// The routes: `/api/v1/*` (any method), `GET /ws`, the probes, CORS on everything, JSON 404
/// elsewhere; on a standby everything but the probes is refused first (`rest::gate`).
fn router(app: rest::App) -> Router {
    Router::new()
        .route("/ws", get(ws::upgrade))
        .route(peers::PEER_PATH, get(peers::upgrade))
        .route("/api/v1/{*rest}", any(rest::api))
        .route(HEALTHZ_PATH, get(rest::healthz))
        .route(READYZ_PATH, get(rest::readyz))
        .fallback(rest::not_found)
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            rest::gate,
        ))
        .layer(axum::middleware::from_fn(rest::cors))
        .with_state(app)
}
