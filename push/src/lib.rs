//! Push delivery for the SecureChat relay: Web Push (RFC 8030, RFC 8291 encryption, RFC 8292
//! VAPID), Firebase Cloud Messaging (HTTP v1) and Apple Push Notification service (token
//! auth, HTTP/2), zero-knowledge.
//!
//! `relay-core` decides *when* to push (an offline recipient with targets, at most once per
//! recipient per 30 s) and emits `Output::Push { user, target, payload }`; this crate
//! delivers it. The payload is always `{"type":"new_msg"}`: Web Push encrypts exactly those
//! bytes for the browser, FCM sends them as the data message, APNs as the app's data next to a
//! fixed, content-free alert. No alias, conversation or message content ever reaches a push
//! service, and no log line names a user, endpoint, key, token or JWT.
//!
//! # Layout
//!
//! Everything that needs no IO is sans-IO and unit-tested; one trait does the sending.
//!
//! | module | what |
//! |---|---|
//! | [`ece`] | RFC 8291 `aes128gcm` encryption (ephemeral key and salt from a caller's RNG; RFC 8291 appendix A vector) |
//! | [`vapid`] | the VAPID key (generate, 0600 key file, served public key) and per-origin ES256 JWTs |
//! | [`webpush`] | the Web Push request: `TTL`, `Urgency`, `Topic`, `Authorization: vapid …` |
//! | [`fcm`] | service-account key, OAuth JWT-bearer grant, `messages:send` data message |
//! | [`apns`] | `.p8` key, ES256 provider token, `/3/device/<token>` request |
//! | [`outcome`] | delivered / gone / retry / re-authenticate / failed, per service |
//! | [`transport`] | the [`PushTransport`] trait (the only IO seam) |
//! | [`dns`] | name resolution ([`dns::Resolve`]) and the connector's checked, pinned resolver |
//! | [`tls`] | [`HttpsTransport`]: hyper + rustls (ring, webpki roots), HTTP/2 and HTTP/1.1 |
//! | [`worker`] | [`PushWorker`]: bounded queue, bounded concurrency, retries, gone reports |
//!
//! # Wiring into a relay shell
//!
//! ```no_run
//! # async fn run(mut relay: relay_core::Relay) -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use relay_push::{HttpsTransport, PushWorker, VapidKey, VapidSubject, WebPushConfig, WorkerConfig};
//! # let os_seed = [0u8; 32];
//! # let now = || wire::UnixMs(0);
//! let (key, _created) = VapidKey::load_or_create(
//!     std::path::Path::new("data/vapid.pem"),
//!     &mut <rand_chacha::ChaCha20Rng as rand_core::SeedableRng>::from_seed(os_seed),
//! )?;
//! // relay-core serves the public key: Config::vapid_public_key = Some(key.public_key_b64url().into())
//! let config = WorkerConfig {
//!     web_push: Some(WebPushConfig::new(key, VapidSubject::parse("mailto:ops@example.org")?)),
//!     ..WorkerConfig::default()
//! };
//! let (worker, mut gone) = PushWorker::spawn(config, HttpsTransport::new()?, Arc::new(now), os_seed);
//! // For every Output::Push { user, target, payload }: worker.submit(user, target, payload);
//! // For every report: relay.handle_push_gone(now(), &report.user, &report.target), then drain outputs.
//! while let Some(report) = gone.recv().await {
//!     relay.handle_push_gone(now(), &report.user, &report.target);
//! }
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod apns;
pub mod dns;
pub mod ece;
pub mod fcm;
pub mod outcome;
pub mod tls;
pub mod transport;
pub mod vapid;
pub mod webpush;
pub mod worker;

pub use apns::ApnsConfig;
pub use fcm::{CredentialsError, FcmConfig, ServiceAccount};
pub use outcome::Outcome;
pub use tls::HttpsTransport;
pub use transport::{PushRequest, PushResponse, PushTransport, TransportError};
pub use vapid::{KeyFileError, VapidKey, VapidSubject};
pub use webpush::{Urgency, WebPushConfig, WebPushOptions};
pub use worker::{
    GoneTarget, Occupancy, PushStats, PushWorker, Submitted, WorkerConfig, WorkerLimits,
};
