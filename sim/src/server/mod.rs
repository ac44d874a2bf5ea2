//! The relay server: `relay-core`'s [`Relay`] behind axum, on any [`Network`].
//!
//! # Shape
//!
//! ```text
//!  axum handlers ──Input::Http{req, reply}──────┐
//!  /ws upgrade   ──Input::Connect{ws, reply}────┤  bounded mpsc      ┌──────────────────────┐
//!  conn tasks    ──Input::Text/Frame/Disconnect─┴─────────────────►  │ core task: owns Relay │
//!                ◄──Outbound::Text/Close (one bounded mpsc per conn)─│ drains poll_output    │
//!  PushWorker    ◄──submit (bounded queue, never waits)──────────────│ timer = poll_timeout  │
//!  (relay-push)  ──GoneTarget (bounded mpsc)──► handle_push_gone ───►│                       │
//!                                                                     └──────────────────────┘
//! ```
//!
//! * **One task owns the [`Relay`]** (no lock): handlers and connection tasks send it plain
//!   messages; after **every** input it drains `poll_output`, routes `Send` to the connection's
//!   outbound channel (`frame.encode()`), `Close` after everything queued before it, `Push` to
//!   the push worker; then it re-arms its timer from `poll_timeout` ([`crate::clock`]).
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
//! * **Test mode** ([`RelayServer::with_test_mode`], `relay --test-mode`; **never in
//!   production**): the clock becomes an [`OffsetClock`] and
//!   `POST /api/v1/test/advance-clock {"ms": u64}` answers `200 {"now_ms": u64}` after moving
//!   it forward by `ms`, firing every timer that became due (`handle_timeout` on the core task)
//!   and executing their outputs (conformance/README.md, "Test clock"). No authentication.
//!   Without test mode the path is an unknown route like any other (404).
//! * **Graceful shutdown**: when the shutdown future resolves the listener stops accepting,
//!   the core sends GOAWAY `server_shutdown` to every socket and closes it (relay-core has no
//!   input for this, so the shell sends the [`wire::ServerFrame::Goaway`] itself and reports
//!   the sockets disconnected), refuses new upgrades with 503, and keeps serving in-flight
//!   requests until every handler and socket task is gone. Every ack and 2xx was sent after
//!   its commit, so nothing acknowledged is lost.
//!
//! # Starting one
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use std::net::SocketAddr;
//! use sim::clock::SimClock;
//! use sim::net::Turmoil;
//! use sim::server::RelayServer;
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
//! size, never payloads, tokens or tickets), lifecycle at INFO, failures at WARN / ERROR.

mod driver;
pub mod embedded;
mod http;
pub mod logging;
mod push;
mod push_gateway;
pub mod secrets;
mod ws;

use std::{fmt, io, net::SocketAddr, sync::Arc};

use axum::{
    Router,
    routing::{any, get},
};
use relay_core::{
    Config, MemoryBlobStore, Relay,
    store::{MemoryStore, StoreError},
};
use tokio::sync::{mpsc, watch};
use tracing::info;

use crate::clock::{Clock, OffsetClock, SystemClock};
use crate::net::{ConnectionCounter, Endpoint, Network, ServeLimits, serve_with_limits};

pub use self::driver::OutboundBytes;
pub use self::http::OVERSIZE_DRAIN_BYTES;
pub use self::push::{NET_PUSH_MAX_IDLE, NetPushTransport, PushDelivery};
pub use self::push_gateway::{PUSH_QUEUE_CAPACITY, push_path};
pub use self::ws::{
    CLOSE_LINGER_MS, HARD_MAX_MESSAGE_BYTES, MAX_WRITE_BATCH, WS_MAX_WRITE_BUFFER_BYTES,
    WS_READ_BUFFER_BYTES, WS_WRITE_BUFFER_BYTES,
};
pub use crate::net::{OUTBOUND_QUEUE_BYTES, WRITE_DEADLINE_MS};

/// Inputs waiting for the core task; when full, handlers and socket readers wait (backpressure).
pub const INPUT_QUEUE_CAPACITY: usize = 1024;
/// Inputs the core task handles in one batch at most (one group commit, then their answers
/// and frames go out); a batch is whatever is queued when the task gets to it.
pub const MAX_BATCH_INPUTS: usize = 256;
/// Frames waiting to be written on one socket; when full the socket is closed (the relay keeps
/// what it did not deliver, and the client re-syncs on reconnect). Their bytes are bounded too,
/// by [`ServeLimits::outbound_queue_bytes`] ([`OUTBOUND_QUEUE_BYTES`] by default).
pub const OUTBOUND_QUEUE_CAPACITY: usize = 1024;
/// The test-mode clock route (served only by a server in test mode).
pub const ADVANCE_CLOCK_PATH: &str = "/api/v1/test/advance-clock";

/// Delay between attempts to rebuild a failed relay from its store.
pub const REBUILD_RETRY_MS: u64 = 1_000;

/// Builds a fresh [`Relay`] from the durable store; called at start and after a fail-stop.
pub type RelayOpener = Box<dyn FnMut() -> Result<Relay, StoreError> + Send>;

/// A relay server ready to run: how to open the relay, which clock, where pushes go.
pub struct RelayServer {
    open: RelayOpener,
    clock: Arc<dyn Clock>,
    push: Option<PushDelivery>,
    push_gateway: Option<Endpoint>,
    test_mode: bool,
    limits: ServeLimits,
    connections: ConnectionCounter,
    outbound_bytes: OutboundBytes,
}

impl fmt::Debug for RelayServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RelayServer")
            .field("clock", &self.clock)
            .field("push", &self.push)
            .field("push_gateway", &self.push_gateway)
            .field("test_mode", &self.test_mode)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl RelayServer {
    /// A server that opens its relay with `open` (called again to rebuild after a
    /// fail-stop: it must open the **same** store), on the [`SystemClock`], without push
    /// delivery.
    pub fn new(open: impl FnMut() -> Result<Relay, StoreError> + Send + 'static) -> Self {
        Self {
            open: Box::new(open),
            clock: Arc::new(SystemClock),
            push: None,
            push_gateway: None,
            test_mode: false,
            limits: ServeLimits::default(),
            connections: ConnectionCounter::default(),
            outbound_bytes: OutboundBytes::default(),
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
        Self::new(move || {
            Relay::with_blobs(
                config.clone(),
                Box::new(store.clone()),
                Box::new(blobs.clone()),
                seed,
            )
        })
    }

    /// Uses `clock` for `now` (a [`crate::clock::SimClock`] under turmoil).
    #[must_use]
    pub fn with_clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Delivers the relay's push outputs for real (Web Push, FCM, APNs; see [`PushDelivery`])
    /// and deletes the targets the push services report gone. The relay's [`Config`] must
    /// agree ([`PushDelivery::configure`]). Takes precedence over
    /// [`with_push_gateway`](Self::with_push_gateway).
    #[must_use]
    pub fn with_push(mut self, delivery: PushDelivery) -> Self {
        self.push = Some(delivery);
        self
    }

    /// **The simulator's legacy path**, kept until `sim::sim` moves to
    /// [`with_push`](Self::with_push): POSTs the relay's push outputs as plain, unencrypted
    /// JSON to `gateway` (the recording stand-in [`crate::standins::PushService`]); see
    /// [`push_path`] for the paths. No encryption, no VAPID, no gone reports; the `relay`
    /// binary no longer offers it.
    #[must_use]
    pub fn with_push_gateway(mut self, gateway: Endpoint) -> Self {
        self.push_gateway = Some(gateway);
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
    /// Fails if the relay cannot be opened from its store, or if the listener fails.
    pub async fn serve<N: Network>(
        mut self,
        listener: N::Listener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> io::Result<()> {
        let relay = (self.open)().map_err(io::Error::other)?;
        let addr = axum::serve::Listener::local_addr(&listener)?;
        let (inputs_tx, inputs_rx) = mpsc::channel(INPUT_QUEUE_CAPACITY);
        let (stop_tx, stop_rx) = watch::channel(false);
        // The worker signs with the base clock, never the test-mode offset (see `push`).
        let (push, gone) = match (self.push.take(), self.push_gateway.take()) {
            (Some(delivery), _) => {
                let (worker, gone) = delivery.spawn::<N>(Arc::clone(&self.clock));
                (Some(driver::PushSink::Worker(worker)), Some(gone))
            }
            (None, Some(gateway)) => {
                let queue = push_gateway::spawn_worker(N::connector(), gateway);
                (Some(driver::PushSink::Gateway(queue)), None)
            }
            (None, None) => (None, None),
        };
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
        let core = driver::Core::new(
            relay,
            self.open,
            clock,
            push,
            test_clock,
            self.limits.outbound_queue_bytes,
            self.outbound_bytes.clone(),
        );
        let core = tokio::spawn(core.run(inputs_rx, stop_rx, gone));
        info!(%addr, "relay listening");
        let router = router(http::App {
            inputs: inputs_tx,
            test_mode: self.test_mode,
            limits: self.limits,
        });
        let shutdown = async move {
            shutdown.await;
            info!("shutdown requested: no new connections");
            let _ = stop_tx.send(true);
        };
        let served =
            serve_with_limits(listener, router, shutdown, self.limits, self.connections).await;
        // The core stops once the router and every socket task dropped their senders.
        if let Err(error) = core.await {
            tracing::error!(%error, "relay core task ended abnormally");
        }
        info!("relay stopped");
        served
    }
}

/// The routes: `/api/v1/*` (any method), `GET /ws`, CORS on everything, JSON 404 elsewhere.
fn router(app: http::App) -> Router {
    Router::new()
        .route("/ws", get(ws::upgrade))
        .route("/api/v1/{*rest}", any(http::api))
        .fallback(http::not_found)
        .layer(axum::middleware::from_fn(http::cors))
        .with_state(app)
}
