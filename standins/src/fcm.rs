//! An FCM (HTTP v1) stand-in: Google's OAuth token endpoint and `messages:send`, checking
//! the request shapes and the credentials.
//!
//! * [`FcmService::service_account_json`] hands out a service-account key file (a fixed RSA
//!   test key, `fcm-test-key.pem`, that grants nothing anywhere) naming this service's token
//!   URL.
//! * `POST /token` (form `grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer&assertion=…`):
//!   the assertion must verify (RS256) against that key with `iss` = the client email,
//!   `scope` = the FCM scope, `aud` = the token URL, `iat ≤ now < exp ≤ iat + 1 h`; answers
//!   `{"access_token","expires_in":3600,"token_type":"Bearer"}`, else 400 `invalid_grant`.
//! * `POST /v1/projects/{project}/messages:send`: `Authorization: Bearer` must be a live
//!   issued token (401 otherwise), the project ours (403), the body
//!   `{"message":{"token","data":{…},…}}` with string data values and no `notification`
//!   (400 `INVALID_ARGUMENT`); an [`FcmService::unregister`]ed token gets 404
//!   `UNREGISTERED`; scripted failures first ([`FcmService::fail_next`]).
//!
//! Every request is recorded ([`FcmService::received`], [`FcmService::token_requests`]).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::{fmt, io};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use rsa::pkcs1::EncodeRsaPublicKey as _;
use rsa::pkcs8::DecodePrivateKey as _;
use serde_json::{Value, json};

use wire::UnixMs;

use seam::clock::Clock;
use seam::net::Network;

use crate::service::{Recorded, lock, serve_on};

/// The RSA test key of the fake service account (PKCS#8 PEM; grants nothing anywhere).
pub const FCM_TEST_KEY_PEM: &str = include_str!("fcm-test-key.pem");
/// The fake project.
pub const FCM_TEST_PROJECT: &str = "demo-project";
/// The fake service account's email.
pub const FCM_TEST_CLIENT_EMAIL: &str = "relay@demo-project.iam.gserviceaccount.com";
/// The scope the assertion must ask for.
pub const FCM_SCOPE: &str = "https://www.googleapis.com/auth/firebase.messaging";
/// Lifetime of the access tokens issued.
pub const FCM_TOKEN_LIFETIME_S: u64 = 3600;
/// Most records kept.
pub const MAX_RECORDED_FCM: usize = 100_000;

/// One `messages:send` as received.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceivedFcm {
    /// The status answered.
    pub status: u16,
    /// The project in the path.
    pub project: String,
    /// Whether the bearer token was a live one we issued.
    pub authorized: bool,
    /// `message.token`.
    pub token: Option<String>,
    /// The whole `message` object.
    pub message: Value,
    /// When it arrived, by the service's stamp clock ([`FcmService::with_stamp_clock`]).
    pub at: UnixMs,
}

struct Inner {
    token_url: String,
    issued: BTreeMap<String, u64>,
    unregistered: BTreeSet<String>,
    script: VecDeque<u16>,
    received: Recorded<ReceivedFcm>,
    token_requests: Recorded<Result<(), String>>,
    next_token: u64,
}

/// The service; clones share state.
#[derive(Clone)]
pub struct FcmService {
    inner: Arc<Mutex<Inner>>,
    clock: Arc<dyn Clock>,
    stamp: Arc<dyn Clock>,
    decoding: Arc<DecodingKey>,
}

impl fmt::Debug for FcmService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FcmService").finish_non_exhaustive()
    }
}

impl FcmService {
    /// A service whose token checks use `clock`. Panics only if the embedded test key is
    /// corrupt (a build defect).
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        let key = rsa::RsaPrivateKey::from_pkcs8_pem(FCM_TEST_KEY_PEM)
            .unwrap_or_else(|e| panic!("embedded FCM test key: {e}"));
        let public = key
            .to_public_key()
            .to_pkcs1_der()
            .unwrap_or_else(|e| panic!("embedded FCM test key: {e}"));
        Self {
            inner: Arc::new(Mutex::new(Inner {
                token_url: String::new(),
                issued: BTreeMap::new(),
                unregistered: BTreeSet::new(),
                script: VecDeque::new(),
                received: Recorded::new(MAX_RECORDED_FCM),
                token_requests: Recorded::new(MAX_RECORDED_FCM),
                next_token: 1,
            })),
            stamp: Arc::clone(&clock),
            clock,
            decoding: Arc::new(DecodingKey::from_rsa_der(public.as_bytes())),
        }
    }

    /// Stamps the records' [`ReceivedFcm::at`] with `stamp` instead of the checking clock.
    #[must_use]
    pub fn with_stamp_clock(mut self, stamp: Arc<dyn Clock>) -> Self {
        self.stamp = stamp;
        self
    }

    /// The service-account key file for a relay that reaches this service at `base`
    /// (`http://fcm:443`); its `token_uri` is `{base}/token`, the assertion's expected `aud`.
    pub fn service_account_json(&self, base: &str) -> String {
        let token_url = format!("{}/token", base.trim_end_matches('/'));
        self.lock().token_url.clone_from(&token_url);
        json!({
            "type": "service_account",
            "project_id": FCM_TEST_PROJECT,
            "private_key_id": "test-key-1",
            "private_key": FCM_TEST_KEY_PEM,
            "client_email": FCM_TEST_CLIENT_EMAIL,
            "token_uri": token_url,
        })
        .to_string()
    }

    /// The app was uninstalled: sends to `token` get 404 `UNREGISTERED`.
    pub fn unregister(&self, token: &str) {
        self.lock().unregistered.insert(token.to_owned());
    }

    /// Revokes every issued access token (the next send gets 401).
    pub fn revoke_access_tokens(&self) {
        self.lock().issued.clear();
    }

    /// The next sends get these statuses first.
    pub fn fail_next(&self, statuses: &[u16]) {
        self.lock().script.extend(statuses.iter().copied());
    }

    /// Every `messages:send`, in order.
    pub fn received(&self) -> Vec<ReceivedFcm> {
        self.lock().received.to_vec()
    }

    /// Every token request: `Ok` when the assertion was valid, else why not.
    pub fn token_requests(&self) -> Vec<Result<(), String>> {
        self.lock().token_requests.to_vec()
    }

    /// The HTTP app.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/token", post(token))
            .route("/v1/projects/{project}/messages:send", post(send))
            .layer(axum::extract::DefaultBodyLimit::max(16 * 1024))
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

    fn check_assertion(&self, form: &str, now_s: u64) -> Result<(), String> {
        let mut grant = None;
        let mut assertion = None;
        for pair in form.split('&') {
            let (k, v) = pair.split_once('=').ok_or("form pair without =")?;
            let v = percent_decode(v).ok_or("bad percent-encoding")?;
            match k {
                "grant_type" => grant = Some(v),
                "assertion" => assertion = Some(v),
                _ => {}
            }
        }
        if grant.as_deref() != Some("urn:ietf:params:oauth:grant-type:jwt-bearer") {
            return Err(format!("grant_type {grant:?}"));
        }
        let assertion = assertion.ok_or("no assertion")?;
        let token_url = self.lock().token_url.clone();
        let mut v = Validation::new(Algorithm::RS256);
        v.set_audience(&[token_url]);
        v.set_issuer(&[FCM_TEST_CLIENT_EMAIL]);
        // exp/iat are checked against this service's clock below (simulated time).
        v.validate_exp = false;
        v.set_required_spec_claims(&["exp", "iat", "aud", "iss"]);
        let data = jsonwebtoken::decode::<Value>(&assertion, &self.decoding, &v)
            .map_err(|e| format!("assertion: {e}"))?;
        let c = data.claims;
        if c["scope"]
            .as_str()
            .is_none_or(|s| !s.split(' ').any(|s| s == FCM_SCOPE))
        {
            return Err("scope lacks firebase.messaging".into());
        }
        let iat = c["iat"].as_u64().unwrap_or(u64::MAX);
        let exp = c["exp"].as_u64().unwrap_or(0);
        if iat > now_s + 60 || exp <= now_s || exp > iat + 3600 {
            return Err(format!("iat {iat} / exp {exp} not valid at {now_s}"));
        }
        Ok(())
    }
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

async fn token(State(service): State<FcmService>, body: Bytes) -> Response {
    let now_s = service.clock.now().get() / 1000;
    let form = String::from_utf8_lossy(&body);
    let checked = service.check_assertion(&form, now_s);
    let mut inner = service.lock();
    inner.token_requests.push(checked.clone());
    match checked {
        Ok(()) => {
            let token = format!("at-{}", inner.next_token);
            inner.next_token += 1;
            inner
                .issued
                .insert(token.clone(), now_s + FCM_TOKEN_LIFETIME_S);
            axum::Json(json!({"access_token": token, "expires_in": FCM_TOKEN_LIFETIME_S, "token_type": "Bearer"}))
                .into_response()
        }
        Err(_) => (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({"error": "invalid_grant"})),
        )
            .into_response(),
    }
}

fn fcm_error(status: u16, code: &str) -> Response {
    let s = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = json!({"error": {"code": status, "status": code, "details": [
        {"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": code}]}});
    (s, axum::Json(body)).into_response()
}

async fn send(
    State(service): State<FcmService>,
    Path(project): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let now_s = service.clock.now().get() / 1000;
    let mut inner = service.lock();
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let authorized = bearer
        .and_then(|t| inner.issued.get(t))
        .is_some_and(|exp| now_s < *exp);
    let parsed: Option<Value> = serde_json::from_slice(&body).ok();
    let message = parsed
        .as_ref()
        .and_then(|v| v.get("message"))
        .cloned()
        .unwrap_or(Value::Null);
    let token = message["token"].as_str().map(str::to_owned);
    let data_ok = message["data"]
        .as_object()
        .is_some_and(|d| d.values().all(Value::is_string));
    let shape_ok = token.is_some() && data_ok && message.get("notification").is_none();
    let status = match inner.script.pop_front() {
        Some(s) => s,
        None if !authorized => 401,
        None if project != FCM_TEST_PROJECT => 403,
        None if !shape_ok => 400,
        None if token
            .as_ref()
            .is_some_and(|t| inner.unregistered.contains(t)) =>
        {
            404
        }
        None => 200,
    };
    inner.received.push(ReceivedFcm {
        status,
        project: project.clone(),
        authorized,
        token,
        message,
        at: service.stamp.now(),
    });
    drop(inner);
    match status {
        200 => {
            axum::Json(json!({"name": format!("projects/{project}/messages/1")})).into_response()
        }
        401 => fcm_error(401, "UNAUTHENTICATED"),
        403 => fcm_error(403, "SENDER_ID_MISMATCH"),
        400 => fcm_error(400, "INVALID_ARGUMENT"),
        404 => fcm_error(404, "UNREGISTERED"),
        429 => fcm_error(429, "QUOTA_EXCEEDED"),
        other => fcm_error(other, "UNAVAILABLE"),
    }
}
