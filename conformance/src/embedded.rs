//! Our relay, started in-process through `sim::server::embedded` (test mode, memory store, low
//! PoW difficulty, a known webhook secret, TURN configured, generous registration limit) on
//! loopback or on a turmoil host.
//!
//! Conformance never imports relay-core (DESIGN.md): everything about building the relay lives
//! in `sim`. The embedded relay is driven like any third-party relay in test mode: the runner
//! advances its clock over HTTP (`POST /api/v1/test/advance-clock`, README.md "Hooks") and acts as
//! its payment processor with the known secret.

use std::net::SocketAddr;

use sim::net::{Tokio, Turmoil};
pub use sim::server::embedded::{
    TEST_POW_DIFFICULTY as EMBEDDED_POW_DIFFICULTY,
    TEST_REGISTRATIONS_PER_HOUR_PER_ADDR as EMBEDDED_REGISTRATIONS_PER_HOUR_PER_ADDR,
    TEST_WEBHOOK_SECRET as EMBEDDED_WEBHOOK_SECRET, TestRelay as EmbeddedRelay,
};
use sim::server::embedded::{TestClock, TestRelayOptions, start_test_relay, test_relay_server};

use crate::ctx::{ClockControl, Hooks};

/// The hooks of an embedded relay: the known webhook secret and the HTTP test clock. (No push
/// probe yet: the embedded relay delivers no Web Push until `relay-push` is wired into the
/// server, issue 12.)
pub fn hooks() -> Hooks {
    Hooks {
        payment_secret: Some(EMBEDDED_WEBHOOK_SECRET.to_vec()),
        clock: Some(ClockControl::Http),
        push_probe: None,
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
