//! A Web Push service stand-in (RFC 8030) that checks what it gets with real cryptography.
//!
//! Like a browser's push service it **creates subscriptions**
//! ([`WebPushService::subscribe`]): a P-256 key pair and a 16-byte auth secret per
//! subscription, handing out what `PushSubscription.toJSON()` gives a web app (`endpoint`,
//! `keys.p256dh`, `keys.auth`) and keeping the private key. Then `POST /wpush/{id}`:
//!
//! * **decrypts** the RFC 8291 `aes128gcm` body with the subscription's private key
//!   ([`decrypt_aes128gcm`]);
//! * **verifies** `Authorization: vapid t=…, k=…` (RFC 8292): ES256 signature against `k`,
//!   `aud` = the subscription endpoint's origin, `exp` within 24 h of its clock, and, when
//!   told the relay's served key ([`WebPushService::expect_vapid_key`]), `k` equal to it;
//! * records everything ([`WebPushService::received`]) and answers like a push service:
//!   201 accepted; 404 unknown subscription; 410 after [`WebPushService::unsubscribe`];
//!   401 for a missing or bad VAPID signature; 400 for a body that does not decrypt; 413 over
//!   4096 bytes; and scripted failures first ([`WebPushService::fail_next`], e.g. 429 with
//!   `Retry-After`, 503).
//!
//! Runs on tokio (loopback) and turmoil alike ([`WebPushService::run`]).

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::{fmt, io};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use p256::SecretKey;
use rand_chacha::ChaCha20Rng;
use rand_core::{Rng as _, SeedableRng as _};

use super::pushcrypto::{VapidClaims, b64url, decrypt_aes128gcm, uncompressed, verify_vapid};
use wire::UnixMs;

use seam::clock::Clock;
use seam::net::Network;

use crate::service::{Recorded, lock, serve_on};

/// Largest body a push service accepts (RFC 8030 §7.2: at least 4096 must be).
pub const MAX_WEB_PUSH_BODY_BYTES: usize = 4096;
/// Most records kept (oldest dropped first).
pub const MAX_RECORDED_WEB_PUSHES: usize = 100_000;

/// A subscription as a web app gets it from `PushSubscription.toJSON()`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebPushSubscription {
    /// The subscription's id in this service (the last path segment of `endpoint`).
    pub id: String,
    /// The push resource URL.
    pub endpoint: String,
    /// `keys.p256dh`: base64url of the 65-byte public key.
    pub p256dh: String,
    /// `keys.auth`: base64url of the 16-byte auth secret.
    pub auth: String,
}

/// One push as received and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedWebPush {
    /// The subscription id from the path.
    pub subscription: String,
    /// The status answered.
    pub status: u16,
    /// The decrypted payload, or why it did not decrypt.
    pub plaintext: Result<Vec<u8>, String>,
    /// The verified VAPID claims, or why verification failed.
    pub vapid: Result<VapidClaims, String>,
    /// `TTL`.
    pub ttl: Option<String>,
    /// `Urgency`.
    pub urgency: Option<String>,
    /// `Topic`.
    pub topic: Option<String>,
    /// `Content-Encoding`.
    pub content_encoding: Option<String>,
    /// Body length.
    pub body_len: usize,
    /// When it arrived, by the service's stamp clock ([`WebPushService::with_stamp_clock`]).
    pub at: UnixMs,
}

struct Sub {
    secret: SecretKey,
    auth: [u8; 16],
    origin: String,
    gone: bool,
}

struct Inner {
    subs: BTreeMap<String, Sub>,
    expected_key: Option<String>,
    script: VecDeque<(u16, Option<u64>)>,
    received: Recorded<ReceivedWebPush>,
    rng: ChaCha20Rng,
    next_id: u64,
}

/// The service; clones share state.
#[derive(Clone)]
pub struct WebPushService {
    inner: Arc<Mutex<Inner>>,
    clock: Arc<dyn Clock>,
    stamp: Arc<dyn Clock>,
}

impl fmt::Debug for WebPushService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = self.lock();
        f.debug_struct("WebPushService")
            .field("subscriptions", &inner.subs.len())
            .field("received", &inner.received.len())
            .finish_non_exhaustive()
    }
}

fn header_str(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

impl WebPushService {
    /// A service whose keys come from `seed` and whose `exp` checks use `clock`.
    pub fn new(seed: u64, clock: Arc<dyn Clock>) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Inner {
                subs: BTreeMap::new(),
                expected_key: None,
                script: VecDeque::new(),
                received: Recorded::new(MAX_RECORDED_WEB_PUSHES),
                rng: ChaCha20Rng::seed_from_u64(seed),
                next_id: 1,
            })),
            stamp: Arc::clone(&clock),
            clock,
        }
    }

    /// Stamps the records' [`ReceivedWebPush::at`] with `stamp` instead of the checking clock
    /// (the simulator checks against the relay's clock, which jumps, and times arrivals in
    /// simulated time).
    #[must_use]
    pub fn with_stamp_clock(mut self, stamp: Arc<dyn Clock>) -> Self {
        self.stamp = stamp;
        self
    }

    /// Creates a subscription whose endpoint is `{base}/wpush/{id}` (`base` is how the relay
    /// reaches this service: `http://127.0.0.1:PORT`, `http://webpush:443`).
    pub fn subscribe(&self, base: &str) -> WebPushSubscription {
        let mut inner = self.lock();
        let id = format!("s{}", inner.next_id);
        inner.next_id += 1;
        let secret = loop {
            let mut b = [0u8; 32];
            inner.rng.fill_bytes(&mut b);
            if let Ok(s) = SecretKey::from_slice(&b) {
                break s;
            }
        };
        let mut auth = [0u8; 16];
        inner.rng.fill_bytes(&mut auth);
        let base = base.trim_end_matches('/');
        let endpoint = format!("{base}/wpush/{id}");
        let origin = base
            .parse::<http::Uri>()
            .ok()
            .and_then(|u| {
                let scheme = u.scheme_str()?.to_ascii_lowercase();
                let a = u.authority()?;
                let default = if scheme == "https" { 443 } else { 80 };
                let host = a.host().to_ascii_lowercase();
                Some(match a.port_u16() {
                    Some(p) if p != default => format!("{scheme}://{host}:{p}"),
                    _ => format!("{scheme}://{host}"),
                })
            })
            .unwrap_or_default();
        let sub = WebPushSubscription {
            id: id.clone(),
            endpoint,
            p256dh: b64url(&uncompressed(&secret.public_key())),
            auth: b64url(&auth),
        };
        inner.subs.insert(
            id,
            Sub {
                secret,
                auth,
                origin,
                gone: false,
            },
        );
        sub
    }

    /// The relay's served VAPID public key (base64url): `k` must equal it from now on.
    pub fn expect_vapid_key(&self, key_b64url: &str) {
        self.lock().expected_key = Some(key_b64url.trim_end_matches('=').to_owned());
    }

    /// The browser unsubscribed: pushes to `id` get 410 Gone from now on.
    pub fn unsubscribe(&self, id: &str) {
        if let Some(s) = self.lock().subs.get_mut(id) {
            s.gone = true;
        }
    }

    /// The next pushes (any subscription) get these statuses, each with `Retry-After`
    /// seconds if given, before any other check.
    pub fn fail_next(&self, statuses: &[u16], retry_after_s: Option<u64>) {
        let mut inner = self.lock();
        for s in statuses {
            inner.script.push_back((*s, retry_after_s));
        }
    }

    /// Every push received, in arrival order.
    pub fn received(&self) -> Vec<ReceivedWebPush> {
        self.lock().received.to_vec()
    }

    /// Records dropped past [`MAX_RECORDED_WEB_PUSHES`].
    pub fn dropped(&self) -> u64 {
        self.lock().received.dropped()
    }

    /// The HTTP app.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/wpush/{id}", post(receive))
            .layer(axum::extract::DefaultBodyLimit::max(
                MAX_WEB_PUSH_BODY_BYTES,
            ))
            .with_state(self.clone())
    }

    /// Binds `addr` on `N` and serves until `shutdown`.
    pub async fn run<N: Network>(
        self,
        addr: SocketAddr,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> io::Result<()> {
        serve_on::<N>(addr, self.router(), shutdown).await
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        lock(&self.inner)
    }

    fn handle(&self, id: &str, headers: &HeaderMap, body: &[u8]) -> (u16, Option<u64>) {
        let now_s = self.clock.now().get() / 1000;
        let mut inner = self.lock();
        let scripted = inner.script.pop_front();
        let (plaintext, vapid, known, gone) = match inner.subs.get(id) {
            None => (
                Err("unknown subscription".into()),
                Err("unknown subscription".into()),
                false,
                false,
            ),
            Some(sub) => {
                let plaintext = decrypt_aes128gcm(body, &sub.secret, &sub.auth);
                let vapid = header_str(headers, header::AUTHORIZATION.as_str())
                    .ok_or_else(|| "no Authorization header".to_owned())
                    .and_then(|h| verify_vapid(&h, &sub.origin, now_s))
                    .and_then(|claims| match &inner.expected_key {
                        Some(k) if *k != claims.key => {
                            Err("k is not the relay's served VAPID key".to_owned())
                        }
                        _ => Ok(claims),
                    });
                (plaintext, vapid, true, sub.gone)
            }
        };
        let encoding = header_str(headers, header::CONTENT_ENCODING.as_str());
        let (status, retry_after) = match scripted {
            Some(s) => s,
            None if !known => (404, None),
            None if gone => (410, None),
            None if vapid.is_err() => (401, None),
            None if encoding.as_deref() != Some("aes128gcm") || plaintext.is_err() => (400, None),
            None => (201, None),
        };
        let record = ReceivedWebPush {
            subscription: id.to_owned(),
            status,
            plaintext,
            vapid,
            ttl: header_str(headers, "ttl"),
            urgency: header_str(headers, "urgency"),
            topic: header_str(headers, "topic"),
            content_encoding: encoding,
            body_len: body.len(),
            at: self.stamp.now(),
        };
        inner.received.push(record);
        (status, retry_after)
    }
}

async fn receive(
    State(service): State<WebPushService>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (status, retry_after) = service.handle(&id, &headers, &body);
    tracing::debug!(status, "web push received");
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    match retry_after {
        Some(s) => (status, [(header::RETRY_AFTER, s.to_string())]).into_response(),
        None => status.into_response(),
    }
}
