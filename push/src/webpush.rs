//! Web Push requests (RFC 8030 §5) for a browser subscription, built sans-IO.
//!
//! `POST <endpoint>` with the RFC 8291 `aes128gcm` body ([`crate::ece`]),
//! `Authorization: vapid t=<JWT>, k=<key>` ([`crate::vapid`]), and:
//!
//! * `TTL`: how long the push service keeps the message for an offline browser (default
//!   [`WEB_PUSH_TTL_S`], the relay's offline message lifetime: after it, nothing is left to
//!   fetch);
//! * `Urgency`: default `high` (a chat message the user is waiting for; `normal` lets mobile
//!   browsers defer it in battery saving);
//! * `Topic`: default [`WEB_PUSH_TOPIC`], a constant. A push service keeps one undelivered
//!   message per (subscription, topic), so a burst to an offline browser collapses into one
//!   notification, and the constant reveals nothing about the user or the conversation.

use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_ENCODING, CONTENT_TYPE};
use http::{HeaderValue, Method, Uri};
use rand_core::CryptoRng;
use wire::UnixMs;

use crate::ece::{self, EceError, UaKeys};
use crate::outcome::{Outcome, transient};
use crate::transport::{PushRequest, PushResponse};
use crate::vapid::{SignError, VapidKey, VapidSigner, VapidSubject, origin_of};

/// Default `TTL` of a Web Push message: 24 h, the relay's offline message lifetime.
pub const WEB_PUSH_TTL_S: u32 = 24 * 3600;
/// Default `Topic`: the same for every push, so a burst collapses and nothing leaks.
pub const WEB_PUSH_TOPIC: &str = "new_msg";
/// Longest `Topic` (RFC 8030 §5.4: at most 32 characters of the base64url alphabet).
pub const MAX_TOPIC_CHARS: usize = 32;
/// Longest endpoint URL accepted (the relay refuses longer ones at subscribe).
pub const MAX_ENDPOINT_BYTES: usize = 2048;

/// RFC 8030 §5.3 urgency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Urgency {
    /// `very-low`.
    VeryLow,
    /// `low`.
    Low,
    /// `normal`.
    Normal,
    /// `high`.
    High,
}

impl Urgency {
    /// The header value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::VeryLow => "very-low",
            Self::Low => "low",
            Self::Normal => "normal",
            Self::High => "high",
        }
    }
}

/// A valid `Topic` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topic(String);

impl Topic {
    /// 1..=32 characters of `A-Z a-z 0-9 - _`.
    pub fn new(topic: &str) -> Option<Self> {
        let ok = !topic.is_empty()
            && topic.len() <= MAX_TOPIC_CHARS
            && topic
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        ok.then(|| Self(topic.to_owned()))
    }

    /// The value.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Per-message headers of Web Push requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebPushOptions {
    /// `TTL` in seconds.
    pub ttl_s: u32,
    /// `Urgency`.
    pub urgency: Urgency,
    /// `Topic` (none: every push is kept separately by the push service).
    pub topic: Option<Topic>,
}

impl Default for WebPushOptions {
    fn default() -> Self {
        Self {
            ttl_s: WEB_PUSH_TTL_S,
            urgency: Urgency::High,
            topic: Topic::new(WEB_PUSH_TOPIC),
        }
    }
}

/// Everything Web Push delivery needs.
#[derive(Debug, Clone)]
pub struct WebPushConfig {
    /// The VAPID key (its public half is what the relay serves).
    pub key: VapidKey,
    /// The VAPID `sub` contact.
    pub subject: VapidSubject,
    /// Headers.
    pub options: WebPushOptions,
    /// Accept `http://` endpoints (a relay's **test mode** only: the conformance push probe
    /// and stand-ins on loopback or turmoil). Production: `https://` only.
    pub allow_http: bool,
}

impl WebPushConfig {
    /// Production defaults for `key` and `subject`.
    pub fn new(key: VapidKey, subject: VapidSubject) -> Self {
        Self {
            key,
            subject,
            options: WebPushOptions::default(),
            allow_http: false,
        }
    }
}

/// Why no request could be built for a subscription (the subscription is unusable, or the
/// key cannot sign). Never contains the endpoint or keys.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebPushError {
    /// The endpoint is not an `https://` URL with a host (or `http://` when allowed).
    #[error("the endpoint is not a usable push service URL")]
    BadEndpoint,
    /// The subscription keys are unusable.
    #[error(transparent)]
    Keys(#[from] EceError),
    /// Signing failed.
    #[error(transparent)]
    Sign(#[from] SignError),
}

/// Parses a subscription endpoint: returns the URI and its origin (the JWT audience).
pub fn parse_endpoint(endpoint: &str, allow_http: bool) -> Result<(Uri, String), WebPushError> {
    if endpoint.len() > MAX_ENDPOINT_BYTES {
        return Err(WebPushError::BadEndpoint);
    }
    let uri: Uri = endpoint.parse().map_err(|_| WebPushError::BadEndpoint)?;
    let scheme_ok = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => allow_http,
        _ => false,
    };
    let userinfo = uri.authority().is_some_and(|a| a.as_str().contains('@'));
    if !scheme_ok || userinfo {
        return Err(WebPushError::BadEndpoint);
    }
    let origin = origin_of(&uri).ok_or(WebPushError::BadEndpoint)?;
    Ok((uri, origin))
}

/// Builds the Web Push request that delivers `payload` to the subscription
/// (`endpoint`, `p256dh`, `auth`, as the browser gave them).
#[allow(clippy::too_many_arguments)]
pub fn build_request(
    signer: &mut VapidSigner,
    options: &WebPushOptions,
    allow_http: bool,
    endpoint: &str,
    p256dh: &str,
    auth: &str,
    payload: &[u8],
    now: UnixMs,
    rng: &mut impl CryptoRng,
) -> Result<PushRequest, WebPushError> {
    let (uri, origin) = parse_endpoint(endpoint, allow_http)?;
    let keys = UaKeys::from_b64url(p256dh, auth)?;
    let body = ece::encrypt(payload, &keys, rng)?;
    let authorization = signer.authorization(&origin, now)?;
    let mut builder = http::Request::builder()
        .method(Method::POST)
        .uri(uri)
        .header("TTL", options.ttl_s)
        .header("Urgency", options.urgency.as_str())
        .header(CONTENT_ENCODING, "aes128gcm")
        .header(CONTENT_TYPE, "application/octet-stream");
    if let Some(topic) = &options.topic {
        builder = builder.header("Topic", topic.as_str());
    }
    let authorization =
        HeaderValue::from_str(&authorization).map_err(|_| WebPushError::Sign(SignError))?;
    builder
        .header(AUTHORIZATION, authorization)
        .body(Bytes::from(body))
        .map_err(|_| WebPushError::BadEndpoint)
}

/// RFC 8030 §5 / §7.3 answers: 2xx delivered; 404 and 410 the subscription is gone; 429 and
/// 5xx transient; anything else refused (e.g. 400, 401/403 for a VAPID problem, 413).
pub fn classify(response: &PushResponse) -> Outcome {
    let status = response.status.as_u16();
    if response.status.is_success() {
        return Outcome::Delivered;
    }
    if status == 404 || status == 410 {
        return Outcome::Gone;
    }
    transient(response).unwrap_or_else(|| Outcome::Failed {
        status,
        reason: String::new(),
    })
}

#[cfg(test)]
mod tests {
    use rand_chacha::ChaCha20Rng;
    use rand_core::SeedableRng as _;

    use super::*;

    const P256DH: &str =
        "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4";
    const AUTH: &str = "BTBZMqHH6r4Tts7J_aSIgg";

    fn signer() -> VapidSigner {
        let key = VapidKey::generate(&mut ChaCha20Rng::seed_from_u64(9));
        VapidSigner::new(key, VapidSubject::parse("mailto:ops@example.org").unwrap()).unwrap()
    }

    #[test]
    fn request_has_every_header_and_an_encrypted_body() {
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        let mut s = signer();
        let req = build_request(
            &mut s,
            &WebPushOptions::default(),
            false,
            "https://push.example:443/w/abc?x=1",
            P256DH,
            AUTH,
            br#"{"type":"new_msg"}"#,
            UnixMs(1_767_225_600_000),
            &mut rng,
        )
        .unwrap();
        assert_eq!(req.method(), Method::POST);
        assert_eq!(req.uri(), "https://push.example:443/w/abc?x=1");
        let h = req.headers();
        assert_eq!(h["ttl"], "86400");
        assert_eq!(h["urgency"], "high");
        assert_eq!(h["topic"], "new_msg");
        assert_eq!(h[CONTENT_ENCODING], "aes128gcm");
        assert_eq!(h[CONTENT_TYPE], "application/octet-stream");
        let auth = h[AUTHORIZATION].to_str().unwrap();
        assert!(auth.starts_with("vapid t=ey") && auth.ends_with(s.key().public_key_b64url()));
        assert_eq!(req.body().len(), ece::HEADER_BYTES + 18 + 1 + 16);
        assert!(!req.body().windows(8).any(|w| w == b"new_msg\""));
    }

    #[test]
    fn endpoints_must_be_https_unless_allowed() {
        assert!(parse_endpoint("https://p.example/x", false).is_ok());
        assert_eq!(
            parse_endpoint("http://127.0.0.1:9/x", false),
            Err(WebPushError::BadEndpoint)
        );
        assert_eq!(
            parse_endpoint("http://127.0.0.1:9/x", true).unwrap().1,
            "http://127.0.0.1:9"
        );
        for bad in ["ftp://p/x", "/x", "https://user@p.example/x", "p.example/x"] {
            assert_eq!(
                parse_endpoint(bad, true),
                Err(WebPushError::BadEndpoint),
                "{bad}"
            );
        }
        let long = format!("https://p.example/{}", "a".repeat(MAX_ENDPOINT_BYTES));
        assert_eq!(parse_endpoint(&long, false), Err(WebPushError::BadEndpoint));
    }

    #[test]
    fn topics() {
        assert!(Topic::new(WEB_PUSH_TOPIC).is_some());
        assert!(Topic::new(&"a".repeat(32)).is_some());
        assert!(Topic::new(&"a".repeat(33)).is_none());
        assert!(Topic::new("a b").is_none() && Topic::new("").is_none());
    }

    #[test]
    fn classification() {
        let c = |s| classify(&PushResponse::new(s, ""));
        assert_eq!(c(201), Outcome::Delivered);
        assert_eq!(c(404), Outcome::Gone);
        assert_eq!(c(410), Outcome::Gone);
        assert_eq!(c(429), Outcome::Retry { after: None });
        assert_eq!(c(503), Outcome::Retry { after: None });
        assert!(matches!(c(413), Outcome::Failed { status: 413, .. }));
        assert!(matches!(c(403), Outcome::Failed { status: 403, .. }));
    }
}
