//! Firebase Cloud Messaging, HTTP v1 API, for Android registration tokens; built sans-IO.
//!
//! * **Credentials**: a service-account JSON key file (`--fcm-credentials FILE`, mode 0600):
//!   `project_id`, `client_email`, `private_key` (PKCS#8 RSA PEM), `private_key_id`,
//!   `token_uri`.
//! * **Access token**: the OAuth 2.0 JWT-bearer grant (RFC 7523): `POST <token_uri>` with
//!   `grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer&assertion=<RS256 JWT>` whose
//!   claims are `iss` = the client email, `scope` = [`FCM_SCOPE`], `aud` = the token URL,
//!   `iat`, `exp` = `iat` + 1 h. The answer's `access_token` is cached until
//!   [`FCM_TOKEN_REFRESH_MARGIN_S`] before its `expires_in`.
//! * **Send**: `POST <endpoint>/v1/projects/<project_id>/messages:send`,
//!   `Authorization: Bearer <access token>`, a **data** message whose `data` is exactly the
//!   push payload (`{"type":"new_msg"}`; the Android app reads `data["type"]`), Android
//!   priority `high`, `ttl` and a constant `collapse_key` (a burst collapses). No
//!   `notification` block: nothing for the OS to display that the app did not decide.
//! * Both URLs can be overridden (`--fcm-endpoint`, `--fcm-token-url`) for stand-ins.

use std::path::Path;

use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_TYPE};
use http::{HeaderValue, Method};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use private_files::{PrivateFileError, read_private};
use rsa::pkcs1::EncodeRsaPrivateKey as _;
use rsa::pkcs8::DecodePrivateKey as _;
use serde::{Deserialize, Serialize};
use serde_json::json;
use wire::UnixMs;
use wire::http::PushPayload;
use zeroize::Zeroizing;

use crate::outcome::{Outcome, safe_code, transient};
use crate::transport::{PushRequest, PushResponse};

/// The OAuth scope that allows sending FCM messages.
pub const FCM_SCOPE: &str = "https://www.googleapis.com/auth/firebase.messaging";
/// Google's OAuth token URL (used when the key file names none).
pub const DEFAULT_FCM_TOKEN_URL: &str = "https://oauth2.googleapis.com/token";
/// The FCM API base URL.
pub const DEFAULT_FCM_ENDPOINT: &str = "https://fcm.googleapis.com";
/// The grant type of the token request (RFC 7523 §2.1).
pub const JWT_BEARER_GRANT: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
/// Lifetime of the signed assertion (Google accepts at most 1 h).
pub const FCM_ASSERTION_LIFETIME_S: u64 = 3600;
/// A cached access token is replaced when it has less than this left.
pub const FCM_TOKEN_REFRESH_MARGIN_S: u64 = 300;
/// Default Android `ttl` of a push: 24 h, the relay's offline message lifetime.
pub const FCM_TTL_S: u32 = 24 * 3600;
/// The constant `collapse_key`: a burst for one device collapses into one message.
pub const FCM_COLLAPSE_KEY: &str = "new_msg";
/// Largest credentials file read.
pub const MAX_CREDENTIALS_BYTES: u64 = 64 * 1024;

/// Why FCM credentials were refused. Messages never contain key material.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    /// The file could not be read, is open to group or others, or is too large.
    #[error(transparent)]
    File(#[from] PrivateFileError),
    /// Not a service-account key file.
    #[error("not a service-account key file: {0}")]
    Malformed(&'static str),
}

#[derive(Deserialize)]
struct ServiceAccountFile {
    #[serde(rename = "type")]
    kind: Option<String>,
    project_id: String,
    client_email: String,
    private_key: String,
    private_key_id: Option<String>,
    token_uri: Option<String>,
}

/// A Google service account that may send FCM messages. `Debug` shows the project only.
#[derive(Clone)]
pub struct ServiceAccount {
    project_id: String,
    client_email: String,
    key_id: Option<String>,
    token_uri: String,
    key: EncodingKey,
}

impl std::fmt::Debug for ServiceAccount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceAccount")
            .field("project_id", &self.project_id)
            .finish_non_exhaustive()
    }
}

impl ServiceAccount {
    /// Parses the JSON key file Google's console downloads.
    pub fn from_json(text: &str) -> Result<Self, CredentialsError> {
        let file: ServiceAccountFile = serde_json::from_str(text)
            .map_err(|_| CredentialsError::Malformed("not the expected JSON"))?;
        if file.kind.as_deref().is_some_and(|k| k != "service_account") {
            return Err(CredentialsError::Malformed("`type` is not service_account"));
        }
        let project_ok = !file.project_id.is_empty()
            && file
                .project_id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b':' || b == b'.');
        if !project_ok {
            return Err(CredentialsError::Malformed("bad project_id"));
        }
        if !file.client_email.contains('@') {
            return Err(CredentialsError::Malformed("bad client_email"));
        }
        // jsonwebtoken's RustCrypto backend signs RS256 from PKCS#1 DER.
        let pem = Zeroizing::new(file.private_key);
        let rsa = rsa::RsaPrivateKey::from_pkcs8_pem(&pem)
            .map_err(|_| CredentialsError::Malformed("private_key is not a PKCS#8 RSA key"))?;
        let der = rsa
            .to_pkcs1_der()
            .map_err(|_| CredentialsError::Malformed("private_key is not a PKCS#8 RSA key"))?;
        Ok(Self {
            project_id: file.project_id,
            client_email: file.client_email,
            key_id: file.private_key_id.filter(|k| !k.is_empty()),
            token_uri: file
                .token_uri
                .unwrap_or_else(|| DEFAULT_FCM_TOKEN_URL.to_owned()),
            key: EncodingKey::from_rsa_der(der.as_bytes()),
        })
    }

    /// Reads a key file; refuses one open to group or others.
    pub fn load(path: &Path) -> Result<Self, CredentialsError> {
        let text = read_private(path)?;
        Self::from_json(&text)
    }

    /// The Firebase project.
    pub fn project_id(&self) -> &str {
        &self.project_id
    }

    /// The token URL named by the key file.
    pub fn token_uri(&self) -> &str {
        &self.token_uri
    }
}

/// FCM delivery settings.
#[derive(Debug, Clone)]
pub struct FcmConfig {
    /// The service account.
    pub account: ServiceAccount,
    /// Where access tokens come from (default: the key file's `token_uri`).
    pub token_url: String,
    /// The API base URL (default [`DEFAULT_FCM_ENDPOINT`]).
    pub endpoint: String,
    /// Android `ttl` in seconds.
    pub ttl_s: u32,
}

impl FcmConfig {
    /// Production settings for `account`.
    pub fn new(account: ServiceAccount) -> Self {
        Self {
            token_url: account.token_uri.clone(),
            account,
            endpoint: DEFAULT_FCM_ENDPOINT.to_owned(),
            ttl_s: FCM_TTL_S,
        }
    }
}

/// A cached OAuth access token. `Debug` redacts it.
#[derive(Clone)]
pub struct AccessToken {
    token: Zeroizing<String>,
    expires_at_s: u64,
}

impl std::fmt::Debug for AccessToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessToken")
            .field("expires_at_s", &self.expires_at_s)
            .finish_non_exhaustive()
    }
}

impl AccessToken {
    /// Whether it can still be used at `now` (more than the refresh margin left).
    pub fn is_fresh(&self, now: UnixMs) -> bool {
        now.get() / 1000 + FCM_TOKEN_REFRESH_MARGIN_S < self.expires_at_s
    }
}

/// Why an FCM request could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FcmError {
    /// Signing the assertion failed.
    #[error("signing the OAuth assertion failed")]
    Sign,
    /// A configured URL or the token is not usable in a request.
    #[error("bad URL or token")]
    BadRequest,
}

#[derive(Serialize)]
struct AssertionClaims<'a> {
    iss: &'a str,
    scope: &'a str,
    aud: &'a str,
    iat: u64,
    exp: u64,
}

/// Percent-encodes a form value (RFC 3986 unreserved characters kept).
fn form_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The access-token request (JWT-bearer grant) at `now`.
pub fn token_request(config: &FcmConfig, now: UnixMs) -> Result<PushRequest, FcmError> {
    let iat = now.get() / 1000;
    let claims = AssertionClaims {
        iss: &config.account.client_email,
        scope: FCM_SCOPE,
        aud: &config.token_url,
        iat,
        exp: iat + FCM_ASSERTION_LIFETIME_S,
    };
    let mut header = Header::new(Algorithm::RS256);
    header.kid.clone_from(&config.account.key_id);
    let assertion = Zeroizing::new(
        jsonwebtoken::encode(&header, &claims, &config.account.key).map_err(|_| FcmError::Sign)?,
    );
    let body = format!(
        "grant_type={}&assertion={}",
        form_encode(JWT_BEARER_GRANT),
        form_encode(&assertion)
    );
    http::Request::builder()
        .method(Method::POST)
        .uri(config.token_url.as_str())
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Bytes::from(body))
        .map_err(|_| FcmError::BadRequest)
}

#[derive(Deserialize)]
struct TokenAnswer {
    access_token: String,
    expires_in: u64,
}

/// Reads the token endpoint's answer at `now`: the token, or what to do (retry on 429/5xx,
/// failed otherwise: the credentials are wrong and every FCM push fails until fixed).
pub fn parse_token_response(response: &PushResponse, now: UnixMs) -> Result<AccessToken, Outcome> {
    if response.status.is_success() {
        let answer: TokenAnswer =
            serde_json::from_slice(&response.body).map_err(|_| Outcome::Failed {
                status: response.status.as_u16(),
                reason: "token_answer_unreadable".into(),
            })?;
        if answer.access_token.is_empty() || HeaderValue::from_str(&answer.access_token).is_err() {
            return Err(Outcome::Failed {
                status: response.status.as_u16(),
                reason: "token_answer_unreadable".into(),
            });
        }
        return Ok(AccessToken {
            token: Zeroizing::new(answer.access_token),
            expires_at_s: now.get() / 1000 + answer.expires_in,
        });
    }
    if let Some(retry) = transient(response) {
        return Err(retry);
    }
    let reason = serde_json::from_slice::<serde_json::Value>(&response.body)
        .ok()
        .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(safe_code))
        .unwrap_or_default();
    Err(Outcome::Failed {
        status: response.status.as_u16(),
        reason,
    })
}

/// The send request for registration `token`.
pub fn send_request(
    config: &FcmConfig,
    access: &AccessToken,
    token: &str,
    payload: &PushPayload,
) -> Result<PushRequest, FcmError> {
    let url = format!(
        "{}/v1/projects/{}/messages:send",
        config.endpoint.trim_end_matches('/'),
        config.account.project_id
    );
    let body = json!({
        "message": {
            "token": token,
            "data": { "type": payload.kind },
            "android": {
                "priority": "high",
                "ttl": format!("{}s", config.ttl_s),
                "collapse_key": FCM_COLLAPSE_KEY,
            }
        }
    });
    let authorization = HeaderValue::from_str(&format!("Bearer {}", *access.token))
        .map_err(|_| FcmError::BadRequest)?;
    http::Request::builder()
        .method(Method::POST)
        .uri(url)
        .header(AUTHORIZATION, authorization)
        .header(CONTENT_TYPE, "application/json")
        .body(Bytes::from(body.to_string()))
        .map_err(|_| FcmError::BadRequest)
}

/// FCM v1 answers: 200 delivered; `UNREGISTERED` (404) gone; 401 re-authenticate; 429 and
/// 5xx transient; other errors refused with their error code.
pub fn classify(response: &PushResponse) -> Outcome {
    let status = response.status.as_u16();
    if response.status.is_success() {
        return Outcome::Delivered;
    }
    let error = serde_json::from_slice::<serde_json::Value>(&response.body)
        .ok()
        .and_then(|v| v.get("error").cloned());
    let code = error
        .as_ref()
        .and_then(|e| e.get("details"))
        .and_then(|d| d.as_array())
        .and_then(|d| {
            d.iter()
                .find_map(|x| x.get("errorCode").and_then(|c| c.as_str()))
        })
        .or_else(|| {
            error
                .as_ref()
                .and_then(|e| e.get("status"))
                .and_then(|s| s.as_str())
        })
        .map(safe_code)
        .unwrap_or_default();
    if status == 404 || code == "UNREGISTERED" {
        return Outcome::Gone;
    }
    if status == 401 {
        return Outcome::Reauth;
    }
    transient(response).unwrap_or(Outcome::Failed {
        status,
        reason: code,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) const TEST_KEY: &str = include_str!("../testdata/fcm-test-key.pem");

    pub(crate) fn account_json(token_uri: &str) -> String {
        json!({
            "type": "service_account",
            "project_id": "demo-project",
            "private_key_id": "kid1",
            "private_key": TEST_KEY,
            "client_email": "relay@demo-project.iam.gserviceaccount.com",
            "token_uri": token_uri,
        })
        .to_string()
    }

    fn config() -> FcmConfig {
        FcmConfig::new(
            ServiceAccount::from_json(&account_json("https://oauth.example/token")).unwrap(),
        )
    }

    fn jwt_part(jwt: &str, i: usize) -> serde_json::Value {
        let part = jwt.split('.').nth(i).unwrap();
        serde_json::from_slice(&crate::ece::b64url_decode(part).unwrap()).unwrap()
    }

    #[test]
    fn token_request_is_a_jwt_bearer_grant_signed_rs256() {
        let c = config();
        assert!(!format!("{:?}", c.account).contains("BEGIN"));
        let now = UnixMs(1_767_225_600_000);
        let req = token_request(&c, now).unwrap();
        assert_eq!(req.uri(), "https://oauth.example/token");
        assert_eq!(
            req.headers()[CONTENT_TYPE],
            "application/x-www-form-urlencoded"
        );
        let body = std::str::from_utf8(req.body()).unwrap();
        let (grant, assertion) = body.split_once('&').unwrap();
        assert_eq!(
            grant,
            "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer"
        );
        let jwt = assertion.strip_prefix("assertion=").unwrap();
        let header = jwt_part(jwt, 0);
        assert_eq!(header["alg"], "RS256");
        assert_eq!(header["kid"], "kid1");
        let claims = jwt_part(jwt, 1);
        assert_eq!(claims["iss"], "relay@demo-project.iam.gserviceaccount.com");
        assert_eq!(claims["scope"], FCM_SCOPE);
        assert_eq!(claims["aud"], "https://oauth.example/token");
        assert_eq!(claims["iat"], 1_767_225_600);
        assert_eq!(claims["exp"], 1_767_225_600 + 3600);
        // The signature verifies with the public half.
        let rsa = rsa::RsaPrivateKey::from_pkcs8_pem(TEST_KEY).unwrap();
        let public = rsa::pkcs1::EncodeRsaPublicKey::to_pkcs1_der(&rsa.to_public_key()).unwrap();
        let mut v = jsonwebtoken::Validation::new(Algorithm::RS256);
        v.set_audience(&["https://oauth.example/token"]);
        v.validate_exp = false;
        jsonwebtoken::decode::<serde_json::Value>(
            jwt,
            &jsonwebtoken::DecodingKey::from_rsa_der(public.as_bytes()),
            &v,
        )
        .unwrap();
    }

    #[test]
    fn token_answers() {
        let now = UnixMs(1_000_000);
        let ok = PushResponse::new(
            200,
            r#"{"access_token":"ya29.x","expires_in":3599,"token_type":"Bearer"}"#,
        );
        let t = parse_token_response(&ok, now).unwrap();
        assert!(t.is_fresh(now));
        assert!(!t.is_fresh(UnixMs(
            now.get() + (3599 - FCM_TOKEN_REFRESH_MARGIN_S) * 1000
        )));
        assert!(!format!("{t:?}").contains("ya29"));
        assert_eq!(
            parse_token_response(&PushResponse::new(503, ""), now).unwrap_err(),
            Outcome::Retry { after: None }
        );
        assert_eq!(
            parse_token_response(&PushResponse::new(400, r#"{"error":"invalid_grant"}"#), now)
                .unwrap_err(),
            Outcome::Failed {
                status: 400,
                reason: "invalid_grant".into()
            }
        );
    }

    #[test]
    fn send_is_a_data_message_with_exactly_the_payload() {
        let c = config();
        let access = parse_token_response(
            &PushResponse::new(200, r#"{"access_token":"at","expires_in":3600}"#),
            UnixMs(0),
        )
        .unwrap();
        let req = send_request(&c, &access, "tok:1", &PushPayload::new_msg()).unwrap();
        assert_eq!(
            req.uri(),
            "https://fcm.googleapis.com/v1/projects/demo-project/messages:send"
        );
        assert_eq!(req.headers()[AUTHORIZATION], "Bearer at");
        let body: serde_json::Value = serde_json::from_slice(req.body()).unwrap();
        assert_eq!(
            body,
            json!({"message": {"token": "tok:1", "data": {"type": "new_msg"},
                "android": {"priority": "high", "ttl": "86400s", "collapse_key": "new_msg"}}})
        );
    }

    #[test]
    fn classification() {
        let c = |s, b: &str| classify(&PushResponse::new(s, b.to_owned()));
        assert_eq!(
            c(200, r#"{"name":"projects/p/messages/1"}"#),
            Outcome::Delivered
        );
        let unregistered = r#"{"error":{"code":404,"status":"NOT_FOUND","details":[{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"UNREGISTERED"}]}}"#;
        assert_eq!(c(404, unregistered), Outcome::Gone);
        assert_eq!(c(404, ""), Outcome::Gone);
        assert_eq!(c(401, ""), Outcome::Reauth);
        assert_eq!(c(429, ""), Outcome::Retry { after: None });
        assert_eq!(c(503, ""), Outcome::Retry { after: None });
        let invalid = r#"{"error":{"code":400,"status":"INVALID_ARGUMENT","details":[{"errorCode":"INVALID_ARGUMENT"}]}}"#;
        assert_eq!(
            c(400, invalid),
            Outcome::Failed {
                status: 400,
                reason: "INVALID_ARGUMENT".into()
            }
        );
    }

    #[test]
    fn refuses_what_is_not_a_service_account() {
        assert!(ServiceAccount::from_json("{}").is_err());
        let mut v: serde_json::Value = serde_json::from_str(&account_json("https://x")).unwrap();
        v["private_key"] = json!("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n");
        let e = ServiceAccount::from_json(&v.to_string()).unwrap_err();
        assert!(!e.to_string().contains("AAAA"), "{e}");
        let mut v: serde_json::Value = serde_json::from_str(&account_json("https://x")).unwrap();
        v["project_id"] = json!("../evil");
        assert!(ServiceAccount::from_json(&v.to_string()).is_err());
    }
}
