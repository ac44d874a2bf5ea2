//! Our relay, started in-process through `sim` (never through relay-core directly): memory
//! store, low PoW difficulty, a known webhook secret, and the test clock.

use crate::ctx::Hooks;

/// The webhook secret the embedded relay is started with.
pub const EMBEDDED_WEBHOOK_SECRET: &[u8] = b"conformance-embedded-webhook-secret";

/// A running embedded relay.
#[derive(Debug)]
pub struct EmbeddedRelay {
    /// `http://127.0.0.1:<port>`.
    pub base_url: String,
    /// The hooks it offers.
    pub hooks: Hooks,
}

/// Why the embedded relay is not available.
pub const UNAVAILABLE: &str =
    "the embedded relay needs sim::server, which has not landed yet; pass --relay URL";

/// Starts the embedded relay on 127.0.0.1, port 0.
pub async fn start_loopback() -> Result<EmbeddedRelay, String> {
    Err(UNAVAILABLE.to_owned())
}
