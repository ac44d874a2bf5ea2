//! Our relay, started in-process through `relay_server::embedded` (test mode, memory store, low
//! PoW difficulty, a known webhook secret, TURN configured, generous registration limit, Web
//! Push to `http://` push services) on loopback or on a turmoil host.
//!
//! Conformance never imports relay-core (DESIGN.md): everything about building the relay lives
//! in `sim`. The embedded relay is driven like any third-party relay in test mode: the runner
//! advances its clock over HTTP (`POST /api/v1/test/advance-clock`, README.md "Hooks"), acts as
//! its payment processor with the known secret, and acts as its Web Push service (the push
//! probe: a `standins::WebPushService` on loopback, or on a turmoil host of its own).

use std::net::SocketAddr;
use std::sync::Arc;

pub use relay_server::embedded::{
    TEST_POW_DIFFICULTY as EMBEDDED_POW_DIFFICULTY,
    TEST_REGISTRATIONS_PER_HOUR_PER_ADDR as EMBEDDED_REGISTRATIONS_PER_HOUR_PER_ADDR,
    TEST_WEBHOOK_SECRET as EMBEDDED_WEBHOOK_SECRET, TestRelay as EmbeddedRelay,
};
use relay_server::embedded::{TestClock, TestRelayOptions, start_test_relay, test_relay_server};
use seam::clock::{SimClock, SystemClock};
use seam::net::{Listener as _, Network, Tokio, Turmoil};
use standins::WebPushService;

use crate::ctx::{ClockControl, Hooks, PushProbe};

/// Seed of the push probe's subscription keys.
const PROBE_SEED: u64 = 0x5eed;
/// The push probe's host in a turmoil simulation ([`turmoil_push_probe`]).
pub const TURMOIL_PROBE_HOST: &str = "pushprobe";
/// The push probe's port in a turmoil simulation.
pub const TURMOIL_PROBE_PORT: u16 = 443;

/// The hooks of an embedded relay without the push probe: the known webhook secret and the
/// HTTP test clock (add one with [`start_loopback_push_probe`] or [`turmoil_push_probe`]).
pub fn hooks() -> Hooks {
    Hooks {
        payment_secret: Some(EMBEDDED_WEBHOOK_SECRET.to_vec()),
        clock: Some(ClockControl::Http),
        push_probe: None,
        process: None,
    }
}

/// Every hook of an embedded relay on loopback, the push probe included (started here on
/// 127.0.0.1, port 0; it serves until the runtime ends).
pub async fn loopback_hooks() -> Result<Hooks, String> {
    Ok(Hooks {
        push_probe: Some(start_loopback_push_probe().await?),
        ..hooks()
    })
}

/// Starts the push probe on 127.0.0.1, port 0 (serving until the runtime ends). The embedded
/// relay reaches it over plain HTTP (test mode) and signs with the system clock, which the
/// probe checks `exp` against.
pub async fn start_loopback_push_probe() -> Result<PushProbe, String> {
    let listener = Tokio::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .map_err(|e| format!("starting the push probe on 127.0.0.1: {e}"))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("the push probe's address: {e}"))?;
    let service = WebPushService::new(PROBE_SEED, Arc::new(SystemClock));
    let router = service.router();
    tokio::spawn(async move {
        if let Err(e) = seam::net::serve(listener, router, std::future::pending()).await {
            tracing::warn!(error = %e, "push probe stopped");
        }
    });
    Ok(PushProbe {
        base: format!("http://{addr}"),
        service,
    })
}

/// Adds the push probe's host ([`TURMOIL_PROBE_HOST`]) to a turmoil simulation; its clock is
/// the simulation's, like the embedded relay's on turmoil.
pub fn turmoil_push_probe(sim: &mut turmoil::Sim<'_>) -> PushProbe {
    let service = WebPushService::new(PROBE_SEED, Arc::new(SimClock::default()));
    let served = service.clone();
    sim.host(TURMOIL_PROBE_HOST, move || {
        let service = served.clone();
        async move {
            let addr = SocketAddr::from(([0, 0, 0, 0], TURMOIL_PROBE_PORT));
            service.run::<Turmoil>(addr, std::future::pending()).await?;
            Ok(())
        }
    });
    PushProbe {
        base: format!("http://{TURMOIL_PROBE_HOST}:{TURMOIL_PROBE_PORT}"),
        service,
    }
}

/// Starts the embedded relay on 127.0.0.1, port 0, on real sockets.
pub async fn start_loopback() -> Result<EmbeddedRelay, String> {
    start_test_relay::<Tokio>(TestRelayOptions::default())
        .await
        .map_err(|e| format!("starting the embedded relay on 127.0.0.1: {e}"))
}

/// Serves the embedded relay on the current turmoil host at `addr` until the simulation ends.
pub async fn serve_turmoil(addr: SocketAddr) -> std::io::Result<()> {
    let options = TestRelayOptions {
        listen: addr,
        clock: TestClock::Sim,
        ..TestRelayOptions::default()
    };
    test_relay_server(&options)
        .run::<Turmoil>(addr, std::future::pending())
        .await
}
