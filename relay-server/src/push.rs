//! Push delivery: the relay's `Output::Push` handed to a [`relay_push::PushWorker`], and the
//! targets the push services report gone fed back to the relay.
//!
//! ```text
//!  core task ── Output::Push ──► PushWorker::submit (try_send: never waits)
//!      ▲                              │ bounded queue, bounded concurrency, retries
//!      │                              ▼
//!      │                  PushTransport ──► Web Push service / FCM / APNs
//!      │                              │ 404 / 410 / UNREGISTERED / BadDeviceToken …
//!      └── Relay::handle_push_gone ◄── gone channel (a select! arm of the core loop)
//! ```
//!
//! * **What is sent** is decided by `relay-core` (an offline recipient with targets, at most
//!   one push per recipient per 30 s, payload exactly `{"type":"new_msg"}`) and built by
//!   `relay-push` (RFC 8291 `aes128gcm` + a VAPID JWT per push service origin; FCM HTTP v1
//!   data message; APNs token auth). Nothing here logs a user, endpoint, key or token.
//! * **Transport**: [`PushDelivery::over_https`] (the `relay` binary: rustls, HTTP/2 and
//!   HTTP/1.1, `https://` only outside test mode) or [`PushDelivery::over_network`] (the
//!   server's own network seam, plain HTTP: stand-ins on loopback or turmoil;
//!   [`NetPushTransport`]).
//! * **Clock**: the worker signs JWTs with the server's base clock (system time, or simulated
//!   time on turmoil), **never** the test-mode offset clock: push services check `iat`/`exp`
//!   against their real time.
//! * **Gone** reports become [`relay_core::Relay::handle_push_gone`], an input committed like
//!   any other; a relay that is being rebuilt after a fail-stop drops the report (the next push
//!   to that target reports it again).

use std::sync::{Arc, Mutex, PoisonError};

use relay_core::Config;
use relay_push::transport::MAX_PUSH_RESPONSE_BYTES;
use relay_push::{
    GoneTarget, HttpsTransport, PushRequest, PushResponse, PushTransport, PushWorker,
    TransportError, WorkerConfig,
};
use tokio::sync::mpsc;

use seam::clock::Clock;
use seam::net::{Connector, Endpoint, HttpClient, HttpRequest, Network};

/// Idle connections [`NetPushTransport`] keeps, over all push services.
pub const NET_PUSH_MAX_IDLE: usize = 16;

/// Real push delivery for a [`RelayServer`](super::RelayServer)
/// ([`with_push`](super::RelayServer::with_push)): what the worker can deliver to, how it
/// reaches the push services, and the seed of its CSPRNG.
///
/// The relay's own [`Config`] must agree with it (the served VAPID key, the push destination
/// policy): [`PushDelivery::configure`] sets both.
pub struct PushDelivery {
    config: WorkerConfig,
    https: Option<HttpsTransport>,
    seed: [u8; 32],
}

impl std::fmt::Debug for PushDelivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PushDelivery")
            .field("web_push", &self.config.web_push.is_some())
            .field("fcm", &self.config.fcm.is_some())
            .field("apns", &self.config.apns.is_some())
            .field("https", &self.https)
            .finish_non_exhaustive()
    }
}

impl PushDelivery {
    /// Delivery over TLS with `transport` (production: [`HttpsTransport::new`]; test mode adds
    /// [`HttpsTransport::allowing_http`]). `seed` seeds the RFC 8291 ephemeral keys, salts
    /// and retry jitter: 32 bytes from the operating system.
    pub fn over_https(config: WorkerConfig, transport: HttpsTransport, seed: [u8; 32]) -> Self {
        Self {
            config,
            https: Some(transport),
            seed,
        }
    }

    /// Delivery over the server's own network seam ([`NetPushTransport`] over
    /// [`Network::connector`]): plain `http://` only, so for push-service stand-ins on loopback
    /// or turmoil (tests, the simulator, the conformance relay). `seed` may come from the run's
    /// seed.
    pub fn over_network(config: WorkerConfig, seed: [u8; 32]) -> Self {
        Self {
            config,
            https: None,
            seed,
        }
    }

    /// What the worker delivers to.
    pub fn worker_config(&self) -> &WorkerConfig {
        &self.config
    }

    /// Makes `config` agree with this delivery: serves the VAPID public key when Web Push is
    /// configured (else `vapid_public_key` is left as it is: `None` serves the placeholder);
    /// subscriptions are checked with the HTTPS transport's destination policy, or accepted
    /// on any `http://` address when Web Push delivers to stand-ins (test mode).
    pub fn configure(&self, config: &mut Config) {
        if let Some(web) = &self.config.web_push {
            config.vapid_public_key = Some(web.key.public_key_b64url().to_owned());
            if web.allow_http {
                // Test mode: stand-ins on plain HTTP, on loopback or a simulated network.
                config.push_destinations = relay_core::destination::PushDestinations::permissive();
            }
        }
        if let Some(https) = &self.https {
            config.push_destinations = https.destinations().clone();
        }
    }

    /// The resolver the server checks subscriptions with (the transport's own, so both
    /// checks see the same names), when the transport's policy checks addresses.
    pub fn endpoint_resolver(&self) -> Option<Arc<dyn relay_push::dns::Resolve>> {
        self.https
            .as_ref()
            .filter(|https| https.destinations().requires_resolution())
            .map(HttpsTransport::resolver)
    }

    /// Starts the worker on network `N`; JWTs are signed with `clock`.
    pub(super) fn spawn<N: Network>(
        self,
        clock: Arc<dyn Clock>,
    ) -> (PushWorker, mpsc::Receiver<GoneTarget>) {
        let wall: relay_push::worker::WallClock = Arc::new(move || clock.now());
        match self.https {
            Some(https) => PushWorker::spawn(self.config, https, wall, self.seed),
            None => PushWorker::spawn(
                self.config,
                NetPushTransport::new(N::connector()),
                wall,
                self.seed,
            ),
        }
    }
}

/// [`PushTransport`] over the network seam ([`seam::net`]): plain HTTP/1.1 to `http://`
/// URIs (anything else is [`TransportError::SchemeNotAllowed`]), on tokio or turmoil, with one
/// bounded pool of idle connections ([`NET_PUSH_MAX_IDLE`]) shared by every push service.
/// Responses larger than [`MAX_PUSH_RESPONSE_BYTES`] are refused. Test relays and the
/// simulator reach push-service stand-ins through it; production uses [`HttpsTransport`].
#[derive(Clone)]
pub struct NetPushTransport<C: Connector> {
    connector: C,
    /// Created with the first request's endpoint; clones share its idle pool (keyed by
    /// authority), each pointed at its own request's endpoint.
    pool: Arc<Mutex<Option<HttpClient<C>>>>,
}

impl<C: Connector> std::fmt::Debug for NetPushTransport<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetPushTransport").finish_non_exhaustive()
    }
}

impl<C: Connector> NetPushTransport<C> {
    /// A transport opening its connections with `connector`.
    pub fn new(connector: C) -> Self {
        Self {
            connector,
            pool: Arc::default(),
        }
    }

    fn client(&self, endpoint: Endpoint) -> HttpClient<C> {
        // Holds only a client handle: nothing a panicking holder could leave half-done.
        let mut pool = self.pool.lock().unwrap_or_else(PoisonError::into_inner);
        match &*pool {
            Some(shared) => {
                let mut client = shared.clone();
                client.set_endpoint(endpoint);
                client
            }
            None => {
                let client = HttpClient::new(self.connector.clone(), endpoint)
                    .with_max_idle(NET_PUSH_MAX_IDLE)
                    .with_max_response_bytes(MAX_PUSH_RESPONSE_BYTES);
                *pool = Some(client.clone());
                client
            }
        }
    }
}

impl<C: Connector> PushTransport for NetPushTransport<C> {
    async fn send(&self, request: PushRequest) -> Result<PushResponse, TransportError> {
        if request.uri().scheme_str() != Some("http") {
            return Err(TransportError::SchemeNotAllowed);
        }
        let authority = request
            .uri()
            .authority()
            .ok_or(TransportError::SchemeNotAllowed)?;
        // Messages never name the URI: a Web Push endpoint is a capability.
        let endpoint = Endpoint::parse(authority.as_str())
            .map_err(|_| TransportError::Connect("not a host[:port]".into()))?;
        let path = request
            .uri()
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_owned();
        let (parts, body) = request.into_parts();
        let mut req = HttpRequest::new(parts.method, path).body(body);
        for (name, value) in &parts.headers {
            let value = value
                .to_str()
                .map_err(|_| TransportError::Exchange("a header value is not ASCII".into()))?;
            req = req.header(name.clone(), value);
        }
        let response = self.client(endpoint).send(req).await.map_err(|e| match e {
            seam::net::HttpError::Connect { source, .. } => {
                TransportError::Connect(source.kind().to_string())
            }
            other => TransportError::Exchange(other.to_string()),
        })?;
        Ok(PushResponse {
            status: response.status,
            headers: response.headers,
            body: response.body,
        })
    }
}
