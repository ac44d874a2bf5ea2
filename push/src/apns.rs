//! Apple Push Notification service, token-based authentication over HTTP/2; built sans-IO.
//!
//! * **Credentials**: the `.p8` signing key (PKCS#8 P-256 PEM, `--apns-key FILE`, mode 0600),
//!   its key id (`--apns-key-id`), the team id (`--apns-team-id`) and the app's bundle id as
//!   the topic (`--apns-topic`).
//! * **Provider token**: an ES256 JWT with header `{"alg":"ES256","kid":<key id>}` and
//!   claims `{"iss":<team id>,"iat":<now>}`. Apple refuses tokens older than an hour and
//!   refreshes more often than every 20 minutes (`TooManyProviderTokenUpdates`), so one token
//!   is cached and replaced after [`APNS_TOKEN_REFRESH_S`].
//! * **Send**: `POST <endpoint>/3/device/<device token>` with `authorization: bearer <JWT>`,
//!   `apns-topic`, `apns-push-type: alert`, `apns-priority: 10`, `apns-expiration` and a
//!   constant `apns-collapse-id` (a burst collapses). Body:
//!   `{"aps":{"alert":{"title":"SecureChat","body":"New message"},"sound":"default","mutable-content":1},"type":"new_msg"}`:
//!   the app's own data is exactly the push payload; the alert is a fixed text (no sender, no
//!   content: the reference iOS app ships no `Localizable.strings`, so a localisation key would
//!   be shown verbatim) and `mutable-content` lets a notification service extension replace
//!   it after fetching over the relay's normal, encrypted path.
//! * The endpoint defaults to production ([`DEFAULT_APNS_ENDPOINT`]; sandbox builds use
//!   [`SANDBOX_APNS_ENDPOINT`]) and can be overridden (`--apns-endpoint`).

use std::path::Path;

use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_TYPE};
use http::{HeaderValue, Method};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use p256::SecretKey;
use p256::pkcs8::{DecodePrivateKey as _, EncodePrivateKey as _};
use serde::Serialize;
use serde_json::json;
use wire::UnixMs;
use wire::http::PushPayload;
use zeroize::Zeroizing;

use private_files::read_private;

use crate::fcm::CredentialsError;
use crate::outcome::{Outcome, safe_code, transient};
use crate::transport::{PushRequest, PushResponse};

/// Apple's production endpoint.
pub const DEFAULT_APNS_ENDPOINT: &str = "https://api.push.apple.com";
/// Apple's development (sandbox) endpoint.
pub const SANDBOX_APNS_ENDPOINT: &str = "https://api.sandbox.push.apple.com";
/// The provider token is replaced after this (Apple: between 20 and 60 minutes).
pub const APNS_TOKEN_REFRESH_S: u64 = 40 * 60;
/// Default `apns-expiration`: now + 24 h, the relay's offline message lifetime.
pub const APNS_TTL_S: u32 = 24 * 3600;
/// The constant `apns-collapse-id`.
pub const APNS_COLLAPSE_ID: &str = "new_msg";
/// The alert's fixed title (the same for every push: nothing about the sender or content).
pub const APNS_ALERT_TITLE: &str = "SecureChat";
/// The alert's fixed body.
pub const APNS_ALERT_BODY: &str = "New message";
/// Longest device token accepted (hex; Apple's are 64 characters today, and may grow).
pub const MAX_DEVICE_TOKEN_CHARS: usize = 200;

/// APNs delivery settings. `Debug` never shows the key.
#[derive(Clone)]
pub struct ApnsConfig {
    key: EncodingKey,
    public: [u8; 65],
    /// The key id (10 characters, from Apple's developer console).
    pub key_id: String,
    /// The team id (10 characters).
    pub team_id: String,
    /// The app's bundle id (`apns-topic`).
    pub topic: String,
    /// The API base URL.
    pub endpoint: String,
    /// `apns-expiration` = now + this.
    pub ttl_s: u32,
}

impl std::fmt::Debug for ApnsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApnsConfig")
            .field("key_id", &self.key_id)
            .field("team_id", &self.team_id)
            .field("topic", &self.topic)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

fn id_ok(id: &str) -> bool {
    !id.is_empty() && id.len() <= 32 && id.bytes().all(|b| b.is_ascii_alphanumeric())
}

impl ApnsConfig {
    /// From the `.p8` key's PEM text and the ids.
    pub fn new(
        p8_pem: &str,
        key_id: &str,
        team_id: &str,
        topic: &str,
    ) -> Result<Self, CredentialsError> {
        let secret = SecretKey::from_pkcs8_pem(p8_pem.trim())
            .map_err(|_| CredentialsError::Malformed("the .p8 key is not a PKCS#8 P-256 key"))?;
        let der = secret
            .to_pkcs8_der()
            .map_err(|_| CredentialsError::Malformed("the .p8 key is not a PKCS#8 P-256 key"))?;
        if !id_ok(key_id) || !id_ok(team_id) {
            return Err(CredentialsError::Malformed(
                "key id and team id must be letters and digits",
            ));
        }
        let topic_ok = !topic.is_empty()
            && topic
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b));
        if !topic_ok {
            return Err(CredentialsError::Malformed("the topic must be a bundle id"));
        }
        Ok(Self {
            key: EncodingKey::from_ec_der(der.as_bytes()),
            public: crate::ece::uncompressed(&secret.public_key()),
            key_id: key_id.to_owned(),
            team_id: team_id.to_owned(),
            topic: topic.to_owned(),
            endpoint: DEFAULT_APNS_ENDPOINT.to_owned(),
            ttl_s: APNS_TTL_S,
        })
    }

    /// Reads the `.p8` file (refused when open to group or others).
    pub fn load(
        p8_path: &Path,
        key_id: &str,
        team_id: &str,
        topic: &str,
    ) -> Result<Self, CredentialsError> {
        let pem = read_private(p8_path)?;
        Self::new(&pem, key_id, team_id, topic)
    }

    /// Sends to `endpoint` instead (`--apns-endpoint`: the sandbox, or a stand-in).
    pub fn with_endpoint(mut self, endpoint: &str) -> Self {
        endpoint
            .trim_end_matches('/')
            .clone_into(&mut self.endpoint);
        self
    }

    /// The signing key's public point (stand-ins verify provider tokens with it).
    pub fn public_key(&self) -> [u8; 65] {
        self.public
    }
}

/// The cached provider token. `Debug` redacts it.
#[derive(Clone)]
pub struct ProviderToken {
    jwt: Zeroizing<String>,
    issued_at_s: u64,
}

impl std::fmt::Debug for ProviderToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderToken")
            .field("issued_at_s", &self.issued_at_s)
            .finish_non_exhaustive()
    }
}

impl ProviderToken {
    /// Whether it is still within [`APNS_TOKEN_REFRESH_S`] of its issue at `now` (a clock
    /// that went backwards also makes a new one).
    pub fn is_fresh(&self, now: UnixMs) -> bool {
        let now_s = now.get() / 1000;
        now_s >= self.issued_at_s && now_s < self.issued_at_s + APNS_TOKEN_REFRESH_S
    }
}

/// Why an APNs request could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApnsError {
    /// Signing the provider token failed.
    #[error("signing the provider token failed")]
    Sign,
    /// The device token is not 1..=200 hex digits.
    #[error("the device token is not hex")]
    BadDeviceToken,
    /// The configured endpoint does not make a URL.
    #[error("bad endpoint")]
    BadEndpoint,
}

#[derive(Serialize)]
struct ProviderClaims<'a> {
    iss: &'a str,
    iat: u64,
}

/// A new provider token at `now`.
pub fn provider_token(config: &ApnsConfig, now: UnixMs) -> Result<ProviderToken, ApnsError> {
    let iat = now.get() / 1000;
    let mut header = Header::new(Algorithm::ES256);
    header.typ = None;
    header.kid = Some(config.key_id.clone());
    let claims = ProviderClaims {
        iss: &config.team_id,
        iat,
    };
    let jwt = jsonwebtoken::encode(&header, &claims, &config.key).map_err(|_| ApnsError::Sign)?;
    Ok(ProviderToken {
        jwt: Zeroizing::new(jwt),
        issued_at_s: iat,
    })
}

/// The body for `payload`: the APNs envelope plus exactly the payload's fields.
pub fn body(payload: &PushPayload) -> serde_json::Value {
    json!({
        "aps": {
            "alert": { "title": APNS_ALERT_TITLE, "body": APNS_ALERT_BODY },
            "sound": "default",
            "mutable-content": 1,
        },
        "type": payload.kind,
    })
}

/// The send request for `device_token` at `now`.
pub fn send_request(
    config: &ApnsConfig,
    token: &ProviderToken,
    device_token: &str,
    payload: &PushPayload,
    now: UnixMs,
) -> Result<PushRequest, ApnsError> {
    let device_ok = !device_token.is_empty()
        && device_token.len() <= MAX_DEVICE_TOKEN_CHARS
        && device_token.bytes().all(|b| b.is_ascii_hexdigit());
    if !device_ok {
        return Err(ApnsError::BadDeviceToken);
    }
    let url = format!(
        "{}/3/device/{}",
        config.endpoint.trim_end_matches('/'),
        device_token
    );
    let authorization =
        HeaderValue::from_str(&format!("bearer {}", *token.jwt)).map_err(|_| ApnsError::Sign)?;
    let expiration = now.get() / 1000 + u64::from(config.ttl_s);
    http::Request::builder()
        .method(Method::POST)
        .uri(url)
        .header(AUTHORIZATION, authorization)
        .header("apns-topic", config.topic.as_str())
        .header("apns-push-type", "alert")
        .header("apns-priority", "10")
        .header("apns-expiration", expiration)
        .header("apns-collapse-id", APNS_COLLAPSE_ID)
        .header(CONTENT_TYPE, "application/json")
        .body(Bytes::from(body(payload).to_string()))
        .map_err(|_| ApnsError::BadEndpoint)
}

/// APNs answers: 200 delivered; 410, `BadDeviceToken` and `Unregistered` gone;
/// `ExpiredProviderToken` / `InvalidProviderToken` (403) re-authenticate; 429 and 5xx
/// transient; other errors refused with Apple's `reason`.
pub fn classify(response: &PushResponse) -> Outcome {
    let status = response.status.as_u16();
    if response.status.is_success() {
        return Outcome::Delivered;
    }
    let reason = serde_json::from_slice::<serde_json::Value>(&response.body)
        .ok()
        .and_then(|v| v.get("reason").and_then(|r| r.as_str()).map(safe_code))
        .unwrap_or_default();
    if status == 410 || reason == "BadDeviceToken" || reason == "Unregistered" {
        return Outcome::Gone;
    }
    if reason == "ExpiredProviderToken" || reason == "InvalidProviderToken" {
        return Outcome::Reauth;
    }
    transient(response).unwrap_or(Outcome::Failed { status, reason })
}

#[cfg(test)]
mod tests {
    use p256::ecdsa::signature::Verifier as _;
    use p256::ecdsa::{Signature, VerifyingKey};
    use p256::pkcs8::LineEnding;
    use rand_chacha::ChaCha20Rng;
    use rand_core::SeedableRng as _;

    use super::*;
    use crate::ece::b64url_decode;

    pub(crate) fn p8(seed: u64) -> Zeroizing<String> {
        crate::ece::random_secret(&mut ChaCha20Rng::seed_from_u64(seed))
            .to_pkcs8_pem(LineEnding::LF)
            .unwrap()
    }

    fn config() -> ApnsConfig {
        ApnsConfig::new(&p8(1), "ABC123DEFG", "TEAM123456", "org.example.chat").unwrap()
    }

    #[test]
    fn provider_token_is_es256_with_kid_iss_iat_and_verifies() {
        let c = config();
        assert!(!format!("{c:?}").contains("BEGIN"));
        let now = UnixMs(1_767_225_600_999);
        let t = provider_token(&c, now).unwrap();
        let (input, sig) = t.jwt.rsplit_once('.').unwrap();
        VerifyingKey::from_sec1_bytes(&c.public_key())
            .unwrap()
            .verify(
                input.as_bytes(),
                &Signature::from_slice(&b64url_decode(sig).unwrap()).unwrap(),
            )
            .unwrap();
        let (h, cl) = input.split_once('.').unwrap();
        let h: serde_json::Value = serde_json::from_slice(&b64url_decode(h).unwrap()).unwrap();
        let cl: serde_json::Value = serde_json::from_slice(&b64url_decode(cl).unwrap()).unwrap();
        assert_eq!(h, json!({"alg": "ES256", "kid": "ABC123DEFG"}));
        assert_eq!(cl, json!({"iss": "TEAM123456", "iat": 1_767_225_600}));
        assert!(t.is_fresh(now));
        assert!(t.is_fresh(UnixMs(now.get() + (APNS_TOKEN_REFRESH_S - 1) * 1000)));
        assert!(!t.is_fresh(UnixMs(now.get() + APNS_TOKEN_REFRESH_S * 1000)));
        assert!(!t.is_fresh(UnixMs(now.get() - 5_000)));
    }

    #[test]
    fn request_shape() {
        let mut c = config();
        c.endpoint = "http://apns.test:8443/".into();
        let now = UnixMs(1_767_225_600_000);
        let t = provider_token(&c, now).unwrap();
        let req = send_request(&c, &t, "0a1B", &PushPayload::new_msg(), now).unwrap();
        assert_eq!(req.uri(), "http://apns.test:8443/3/device/0a1B");
        let h = req.headers();
        assert!(h[AUTHORIZATION].to_str().unwrap().starts_with("bearer ey"));
        assert_eq!(h["apns-topic"], "org.example.chat");
        assert_eq!(h["apns-push-type"], "alert");
        assert_eq!(h["apns-priority"], "10");
        assert_eq!(h["apns-expiration"], (1_767_225_600 + 86_400).to_string());
        assert_eq!(h["apns-collapse-id"], "new_msg");
        let b: serde_json::Value = serde_json::from_slice(req.body()).unwrap();
        assert_eq!(b["type"], "new_msg");
        assert_eq!(b.as_object().unwrap().len(), 2);
        for bad in ["", "zz", "../x", &"a".repeat(201)] {
            assert_eq!(
                send_request(&c, &t, bad, &PushPayload::new_msg(), now).unwrap_err(),
                ApnsError::BadDeviceToken
            );
        }
    }

    #[test]
    fn classification() {
        let c = |s, b: &str| classify(&PushResponse::new(s, b.to_owned()));
        assert_eq!(c(200, ""), Outcome::Delivered);
        assert_eq!(
            c(410, r#"{"reason":"Unregistered","timestamp":1}"#),
            Outcome::Gone
        );
        assert_eq!(c(400, r#"{"reason":"BadDeviceToken"}"#), Outcome::Gone);
        assert_eq!(
            c(403, r#"{"reason":"ExpiredProviderToken"}"#),
            Outcome::Reauth
        );
        assert_eq!(
            c(429, r#"{"reason":"TooManyRequests"}"#),
            Outcome::Retry { after: None }
        );
        assert_eq!(c(503, ""), Outcome::Retry { after: None });
        assert_eq!(
            c(400, r#"{"reason":"BadTopic"}"#),
            Outcome::Failed {
                status: 400,
                reason: "BadTopic".into()
            }
        );
    }

    #[test]
    fn refuses_bad_credentials() {
        assert!(ApnsConfig::new("nope", "ABC", "TEAM", "org.x").is_err());
        assert!(ApnsConfig::new(&p8(2), "AB C", "TEAM", "org.x").is_err());
        assert!(ApnsConfig::new(&p8(2), "ABC", "TEAM", "org x").is_err());
    }
}
