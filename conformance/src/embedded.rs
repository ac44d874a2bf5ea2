//! Our relay, started in-process through `sim::server` (memory store, low PoW difficulty, a known
//! webhook secret, generous registration limits) on loopback or on a turmoil host.
//!
//! This module is the only place conformance names relay-core, and only for what `sim::server`
//! needs to build a relay ([`Config`], the memory stores), as DESIGN.md allows ("never import
//! relay-core except to start the embedded default relay through `sim`"). Cases never see it.
//!
//! The test clock: `sim::server` does not serve `POST /api/v1/test/advance-clock` yet, so the
//! embedded relay runs on an [`OffsetClock`] and the runner advances it in-process with the same
//! contract (README.md, "Hooks"); external relays are advanced over HTTP.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use relay_core::config::WebhookSecret;
use relay_core::store::MemoryStore;
use relay_core::{Config, MemoryBlobStore};
use sim::clock::{Clock, SimClock, SystemClock};
use sim::net::{Tokio, Turmoil};
use sim::server::RelayServer;
use wire::UnixMs;

use crate::ctx::{ClockControl, Hooks};

/// The webhook secret the embedded relay is started with.
pub const EMBEDDED_WEBHOOK_SECRET: &[u8] = b"conformance-embedded-webhook-secret";

/// PoW difficulty of the embedded relay (hex nibbles): cheap but not zero, so PoW cases run.
pub const EMBEDDED_POW_DIFFICULTY: u32 = 1;

/// Seed of the embedded relay's RNG.
pub const EMBEDDED_SEED: u64 = 0x00c0_ffee;

/// A clock `inner + offset`, where the offset only grows (the test clock hook).
#[derive(Debug, Clone)]
pub struct OffsetClock<C> {
    inner: C,
    offset_ms: Arc<AtomicU64>,
}

impl<C: Clock> Clock for OffsetClock<C> {
    fn now(&self) -> UnixMs {
        self.inner
            .now()
            .plus_ms(self.offset_ms.load(Ordering::SeqCst))
    }
}

impl<C: Clock + Clone> OffsetClock<C> {
    fn new(inner: C) -> Self {
        Self {
            inner,
            offset_ms: Arc::default(),
        }
    }

    fn control(&self) -> ClockControl {
        let (offset, clock) = (Arc::clone(&self.offset_ms), self.clone());
        ClockControl::InProcess(Arc::new(move |ms| {
            offset.fetch_add(ms, Ordering::SeqCst);
            clock.now().0
        }))
    }
}

/// The embedded relay's configuration.
pub fn config() -> Config {
    Config {
        pow_difficulty: EMBEDDED_POW_DIFFICULTY,
        registrations_per_hour_per_addr: 1_000_000,
        msgs_per_min_per_user: 10_000,
        payment_webhook_secret: WebhookSecret(EMBEDDED_WEBHOOK_SECRET.to_vec()),
        turn_urls: vec!["turn:turn.conformance.invalid:3478".to_owned()],
        turn_secret: Some(relay_core::TurnSecret("conformance-turn-secret".to_owned())),
        ..Config::default()
    }
}

/// The hooks the embedded relay offers.
fn hooks(clock: ClockControl) -> Hooks {
    Hooks {
        payment_secret: Some(EMBEDDED_WEBHOOK_SECRET.to_vec()),
        clock: Some(clock),
    }
}

/// A running embedded relay; dropping it stops the server.
#[derive(Debug)]
pub struct EmbeddedRelay {
    /// `http://127.0.0.1:<port>`.
    pub base_url: String,
    /// The hooks it offers.
    pub hooks: Hooks,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

impl EmbeddedRelay {
    /// Stops the server and waits for it.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for EmbeddedRelay {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Starts the embedded relay on 127.0.0.1, port 0, on real sockets.
pub async fn start_loopback() -> Result<EmbeddedRelay, String> {
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .map_err(|e| format!("binding 127.0.0.1:0: {e}"))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("local address: {e}"))?;
    let clock = OffsetClock::new(SystemClock);
    let control = clock.control();
    let server = RelayServer::in_memory(
        config(),
        EMBEDDED_SEED,
        MemoryStore::new(),
        MemoryBlobStore::new(),
    )
    .with_clock(clock);
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(server.serve::<Tokio>(listener, async move {
        let _ = rx.await;
    }));
    Ok(EmbeddedRelay {
        base_url: format!("http://{addr}"),
        hooks: hooks(control),
        stop: Some(tx),
        task: Some(task),
    })
}

/// Serves the embedded relay on the current turmoil host at `addr` until the simulation ends;
/// `on_clock` receives the test clock's control (call it before the first client step).
pub async fn serve_turmoil(
    addr: SocketAddr,
    on_clock: impl FnOnce(ClockControl),
) -> std::io::Result<()> {
    let clock = OffsetClock::new(SimClock::default());
    on_clock(clock.control());
    RelayServer::in_memory(
        config(),
        EMBEDDED_SEED,
        MemoryStore::new(),
        MemoryBlobStore::new(),
    )
    .with_clock(clock)
    .run::<Turmoil>(addr, std::future::pending())
    .await
}

/// The hooks of an embedded relay served with [`serve_turmoil`].
pub fn turmoil_hooks(clock: ClockControl) -> Hooks {
    hooks(clock)
}
