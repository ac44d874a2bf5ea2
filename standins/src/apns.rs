//! An APNs stand-in (token-based provider authentication) checking request shape and the
//! ES256 provider token.
//!
//! [`ApnsService::new`] makes a signing key (what Apple's console gives as a `.p8` file:
//! [`ApnsService::p8_pem`]) for a key id, a team id and a bundle id (topic). Then
//! `POST /3/device/{token}`:
//!
//! * `authorization: bearer <JWT>`: header `alg` ES256 and `kid` = the key id, claims `iss` =
//!   the team id and `iat` within the last hour of its clock, signature verified with `p256`
//!   (403 `InvalidProviderToken` / `ExpiredProviderToken`);
//! * `apns-topic` = the bundle id (400 `BadTopic` / `MissingTopic`), `apns-push-type` present,
//!   a JSON body with an `aps` dictionary (400 `BadPayload` / `PayloadEmpty`);
//! * a non-hex token: 400 `BadDeviceToken`; an [`ApnsService::unregister`]ed one: 410
//!   `Unregistered`; scripted failures first ([`ApnsService::fail_next`]); else 200 with an
//!   `apns-id`.
//!
//! The real service speaks HTTP/2 only; this one speaks what the network seam's server
//! speaks (HTTP/1.1), which is what the relay's transport uses for `http://` in tests.

use std::collections::{BTreeSet, VecDeque};
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
use p256::pkcs8::{EncodePrivateKey as _, LineEnding};
use rand_chacha::ChaCha20Rng;
use rand_core::{Rng as _, SeedableRng as _};
use serde_json::{Value, json};

use super::pushcrypto::{uncompressed, verify_es256};
use wire::UnixMs;

use seam::clock::Clock;
use seam::net::Network;

use crate::service::{Recorded, lock, serve_on};

/// A provider token older than this is expired (Apple: one hour).
pub const APNS_PROVIDER_TOKEN_MAX_AGE_S: u64 = 3600;
/// Largest body accepted (Apple: 4096 bytes for a regular push).
pub const MAX_APNS_BODY_BYTES: usize = 4096;
/// Most records kept.
pub const MAX_RECORDED_APNS: usize = 100_000;

/// One push as received.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceivedApns {
    /// The status answered.
    pub status: u16,
    /// Apple's `reason` for an error.
    pub reason: Option<String>,
    /// The device token from the path.
    pub device_token: String,
    /// The provider token verified: `Ok((kid, iss, iat))`, or why not.
    pub provider_token: Result<(String, String, u64), String>,
    /// `apns-topic`.
    pub topic: Option<String>,
    /// `apns-push-type`.
    pub push_type: Option<String>,
    /// `apns-priority`.
    pub priority: Option<String>,
    /// `apns-collapse-id`.
    pub collapse_id: Option<String>,
    /// `apns-expiration`.
    pub expiration: Option<String>,
    /// The body.
    pub body: Value,
    /// When it arrived, by the service's stamp clock ([`ApnsService::with_stamp_clock`]).
    pub at: UnixMs,
}

struct Inner {
    unregistered: BTreeSet<String>,
    script: VecDeque<u16>,
    received: Recorded<ReceivedApns>,
}

/// The service; clones share state.
#[derive(Clone)]
pub struct ApnsService {
    inner: Arc<Mutex<Inner>>,
    clock: Arc<dyn Clock>,
    stamp: Arc<dyn Clock>,
    key: SecretKey,
    key_id: String,
    team_id: String,
    topic: String,
}

impl fmt::Debug for ApnsService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApnsService")
            .field("key_id", &self.key_id)
            .field("team_id", &self.team_id)
            .field("topic", &self.topic)
            .finish_non_exhaustive()
    }
}

fn header_str(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

impl ApnsService {
    /// A service with a signing key from `seed` for `key_id` / `team_id`, accepting pushes
    /// for the bundle id `topic`.
    pub fn new(seed: u64, clock: Arc<dyn Clock>, key_id: &str, team_id: &str, topic: &str) -> Self {
        let mut rng = ChaCha20Rng::seed_from_u64(seed);
        let key = loop {
            let mut b = [0u8; 32];
            rng.fill_bytes(&mut b);
            if let Ok(k) = SecretKey::from_slice(&b) {
                break k;
            }
        };
        Self {
            inner: Arc::new(Mutex::new(Inner {
                unregistered: BTreeSet::new(),
                script: VecDeque::new(),
                received: Recorded::new(MAX_RECORDED_APNS),
            })),
            stamp: Arc::clone(&clock),
            clock,
            key,
            key_id: key_id.to_owned(),
            team_id: team_id.to_owned(),
            topic: topic.to_owned(),
        }
    }

    /// Stamps the records' [`ReceivedApns::at`] with `stamp` instead of the checking clock.
    #[must_use]
    pub fn with_stamp_clock(mut self, stamp: Arc<dyn Clock>) -> Self {
        self.stamp = stamp;
        self
    }

    /// The `.p8` signing key (PKCS#8 PEM) the relay is configured with.
    pub fn p8_pem(&self) -> String {
        self.key
            .to_pkcs8_pem(LineEnding::LF)
            .map(|p| p.to_string())
            .unwrap_or_default()
    }

    /// The device was reset or the app removed: pushes to `token` get 410 from now on.
    pub fn unregister(&self, token: &str) {
        self.lock().unregistered.insert(token.to_ascii_lowercase());
    }

    /// The next pushes get these statuses first.
    pub fn fail_next(&self, statuses: &[u16]) {
        self.lock().script.extend(statuses.iter().copied());
    }

    /// Every push, in order.
    pub fn received(&self) -> Vec<ReceivedApns> {
        self.lock().received.to_vec()
    }

    /// The HTTP app.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/3/device/{token}", post(push))
            .layer(axum::extract::DefaultBodyLimit::max(MAX_APNS_BODY_BYTES))
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

    fn provider_token(
        &self,
        headers: &HeaderMap,
        now_s: u64,
    ) -> Result<(String, String, u64), String> {
        let auth = header_str(headers, header::AUTHORIZATION.as_str()).ok_or("no authorization")?;
        let jwt = auth.strip_prefix("bearer ").ok_or("not `bearer <jwt>`")?;
        let (h, c) = verify_es256(jwt, &uncompressed(&self.key.public_key()))?;
        let kid = h["kid"].as_str().unwrap_or_default().to_owned();
        let iss = c["iss"].as_str().unwrap_or_default().to_owned();
        let iat = c["iat"].as_u64().ok_or("no numeric iat")?;
        if kid != self.key_id || iss != self.team_id {
            return Err(format!("kid {kid:?} / iss {iss:?} do not match the key"));
        }
        if iat > now_s + 60 || now_s >= iat + APNS_PROVIDER_TOKEN_MAX_AGE_S {
            return Err("expired".into());
        }
        Ok((kid, iss, iat))
    }
}

async fn push(
    State(service): State<ApnsService>,
    Path(device_token): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let now_s = service.clock.now().get() / 1000;
    let provider_token = service.provider_token(&headers, now_s);
    let topic = header_str(&headers, "apns-topic");
    let parsed: Option<Value> = serde_json::from_slice(&body).ok();
    let mut inner = service.lock();
    let reason = match inner.script.pop_front() {
        Some(s) => Some((s, "ServiceUnavailable")),
        None => match &provider_token {
            Err(e) if e == "expired" => Some((403, "ExpiredProviderToken")),
            Err(_) => Some((403, "InvalidProviderToken")),
            Ok(_) if topic.is_none() => Some((400, "MissingTopic")),
            Ok(_) if topic.as_deref() != Some(service.topic.as_str()) => Some((400, "BadTopic")),
            Ok(_) if body.is_empty() => Some((400, "PayloadEmpty")),
            Ok(_) if parsed.as_ref().is_none_or(|v| !v["aps"].is_object()) => {
                Some((400, "BadPayload"))
            }
            Ok(_) if header_str(&headers, "apns-push-type").is_none() => {
                Some((400, "InvalidPushType"))
            }
            Ok(_)
                if device_token.is_empty()
                    || !device_token.bytes().all(|b| b.is_ascii_hexdigit()) =>
            {
                Some((400, "BadDeviceToken"))
            }
            Ok(_)
                if inner
                    .unregistered
                    .contains(&device_token.to_ascii_lowercase()) =>
            {
                Some((410, "Unregistered"))
            }
            Ok(_) => None,
        },
    };
    let status = reason.map_or(200, |(s, _)| s);
    inner.received.push(ReceivedApns {
        status,
        reason: reason.map(|(_, r)| r.to_owned()),
        device_token,
        provider_token,
        topic,
        push_type: header_str(&headers, "apns-push-type"),
        priority: header_str(&headers, "apns-priority"),
        collapse_id: header_str(&headers, "apns-collapse-id"),
        expiration: header_str(&headers, "apns-expiration"),
        body: parsed.unwrap_or(Value::Null),
        at: service.stamp.now(),
    });
    drop(inner);
    match reason {
        None => (
            StatusCode::OK,
            [("apns-id", "00000000-0000-0000-0000-000000000001")],
        )
            .into_response(),
        Some((s, r)) => {
            let status = StatusCode::from_u16(s).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let body = if s == 410 {
                json!({"reason": r, "timestamp": now_s * 1000})
            } else {
                json!({"reason": r})
            };
            (status, axum::Json(body)).into_response()
        }
    }
}
