//! JWTs: EdDSA (Ed25519) via `jsonwebtoken`, claims `sub` = user uuid, `jti`, `iat`, `exp`
//! (seconds). Validation never reads the system clock: `exp` is checked against the injected
//! `now` here. The signing key comes from the caller (`Config::jwt_signing_key`: the `relay`
//! binary keeps it in a 0600 file of its own, never in the store) or, in tests and simulations,
//! is derived from the relay's seed; either way tokens survive a restart.

use ed25519_dalek::SigningKey;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation, errors::ErrorKind};
use serde::{Deserialize, Serialize};
use wire::ErrorCode;

/// Claims of a relay JWT.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// The user uuid.
    pub sub: String,
    /// Token id; only the account's current `jti` is valid.
    pub jti: String,
    /// Issued at, seconds since the epoch.
    pub iat: u64,
    /// Expiry, seconds since the epoch.
    pub exp: u64,
}

/// Why a bearer token was refused (each maps to its own 401 error code).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// No token was presented.
    #[error("authentication required: no bearer token")]
    Missing,
    /// Not a well-formed relay JWT.
    #[error("the bearer token is malformed")]
    Malformed,
    /// Well-formed, but not signed by this relay.
    #[error("the bearer token signature is invalid")]
    BadSignature,
    /// Past its `exp`.
    #[error("the bearer token has expired")]
    Expired,
    /// Superseded by a newer login (or the account no longer exists).
    #[error("the bearer token was revoked by a newer login")]
    Revoked,
}

impl TokenError {
    /// The error code of the 401 that answers it (`error` of the body, PROTOCOL.md).
    pub fn code(self) -> ErrorCode {
        match self {
            Self::Missing => ErrorCode::AUTH_REQUIRED, // probe: refused by the caller
            Self::Malformed => ErrorCode::TOKEN_INVALID, // probe: refused by the caller
            Self::BadSignature => ErrorCode::TOKEN_SIGNATURE_INVALID, // probe: refused by the caller
            Self::Expired => ErrorCode::TOKEN_EXPIRED, // probe: refused by the caller
            Self::Revoked => ErrorCode::TOKEN_REVOKED, // probe: refused by the caller
        }
    }
}

/// Signs and verifies relay JWTs (EdDSA over one Ed25519 key).
///
/// Public so benchmarks and tools can exercise the exact code the relay runs; the relay itself
/// builds its keys from `Config::jwt_signing_key`. Neither method reads a clock: both
/// take `now` in epoch milliseconds.
///
/// ```
/// use relay_core::token::{TokenError, TokenKeys};
///
/// let keys = TokenKeys::from_seed([7; 32]);
/// let now = 1_800_000_000_000;
/// let jwt = keys.issue("user-uuid", "jti-1", now, 60_000).unwrap();
/// assert_eq!(keys.verify(&jwt, now).unwrap().sub, "user-uuid");
/// assert_eq!(keys.verify(&jwt, now + 60_000), Err(TokenError::Expired));
/// ```
pub struct TokenKeys {
    encoding: EncodingKey,
    decoding: DecodingKey,
    validation: Validation,
}

impl std::fmt::Debug for TokenKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenKeys { .. }")
    }
}

/// PKCS#8 v1 prefix of an Ed25519 private key (RFC 8410): the seed follows.
const PKCS8_ED25519_PREFIX: [u8; 16] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
];

impl TokenKeys {
    /// Keys from a 32-byte Ed25519 seed (the private key).
    pub fn from_seed(seed: [u8; 32]) -> Self {
        let public = SigningKey::from_bytes(&seed).verifying_key().to_bytes();
        let mut der = PKCS8_ED25519_PREFIX.to_vec();
        der.extend_from_slice(&seed);
        let mut validation = Validation::new(Algorithm::EdDSA);
        validation.validate_exp = false; // checked against the injected clock instead
        validation.validate_nbf = false;
        validation.validate_aud = false;
        validation.leeway = 0;
        validation.set_required_spec_claims(&["exp", "sub"]);
        Self {
            encoding: EncodingKey::from_ed_der(&der),
            decoding: DecodingKey::from_ed_der(&public),
            validation,
        }
    }

    /// Issues a token for `sub` with id `jti`, issued at `now_ms` (epoch milliseconds) and
    /// valid for `ttl_ms`; `iat`/`exp` are whole seconds. `None` only if signing fails.
    pub fn issue(&self, sub: &str, jti: &str, now_ms: u64, ttl_ms: u64) -> Option<String> {
        let claims = Claims {
            sub: sub.to_owned(),
            jti: jti.to_owned(),
            iat: now_ms / 1000,
            exp: now_ms.saturating_add(ttl_ms) / 1000,
        };
        jsonwebtoken::encode(&Header::new(Algorithm::EdDSA), &claims, &self.encoding).ok()
    }

    /// Verifies signature, shape and expiry against `now_ms` (epoch milliseconds; expired when
    /// `now_ms >= exp * 1000`). Revocation (the account's current `jti`) is the caller's business.
    ///
    /// # Errors
    /// [`TokenError::Missing`] (empty), [`TokenError::Malformed`], [`TokenError::BadSignature`],
    /// [`TokenError::Expired`]; never [`TokenError::Revoked`].
    pub fn verify(&self, token: &str, now_ms: u64) -> Result<Claims, TokenError> {
        if token.is_empty() {
            return Err(TokenError::Missing);
        }
        if token.len() > crate::limits::MAX_TOKEN_BYTES {
            return Err(TokenError::Malformed);
        }
        let data = jsonwebtoken::decode::<Claims>(token, &self.decoding, &self.validation)
            .map_err(|e| match e.kind() {
                ErrorKind::InvalidSignature => TokenError::BadSignature,
                _ => TokenError::Malformed,
            })?;
        if now_ms >= data.claims.exp.saturating_mul(1000) {
            return Err(TokenError::Expired);
        }
        Ok(data.claims)
    }
}

/// The subject `token` claims, without checking anything: for a shell that hands a request to
/// the core of its caller's shard ([`crate::shard_for_request`]). Never an authentication:
/// that core checks the token, and a request that reached another core is forwarded.
pub fn claimed_subject(token: &str) -> Option<wire::UserUuid> {
    use base64::Engine as _;
    #[derive(serde::Deserialize)]
    struct Subject {
        sub: String,
    }
    let payload = token.split('.').nth(1)?;
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .ok()?;
    let claims: Subject = serde_json::from_slice(&raw).ok()?;
    wire::UserUuid::parse(&claims.sub).ok()
}

/// The claims of `token` without checking its signature: only for the planted bug
/// `TokenSignatureIgnored` (feature `planted-bugs`), never in a relay that serves users.
#[cfg(feature = "planted-bugs")]
pub(crate) fn unverified_claims(token: &str) -> Option<Claims> {
    use base64::Engine as _;
    let payload = token.split('.').nth(1)?;
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .ok()?;
    serde_json::from_slice(&raw).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_verify_expire() {
        let k = TokenKeys::from_seed([7; 32]);
        let t = k.issue("user", "j1", 1_000_000, 60_000).unwrap();
        let c = k.verify(&t, 1_000_000).unwrap();
        assert_eq!(
            (c.sub.as_str(), c.jti.as_str(), c.exp),
            ("user", "j1", 1060)
        );
        assert_eq!(k.verify(&t, 1_060_000), Err(TokenError::Expired));
        let other = TokenKeys::from_seed([8; 32]);
        assert_eq!(other.verify(&t, 1_000_000), Err(TokenError::BadSignature));
        assert_eq!(k.verify("abc.def", 0), Err(TokenError::Malformed));
        assert_eq!(k.verify("", 0), Err(TokenError::Missing));
        let mut tampered = t;
        tampered.pop();
        tampered.push('A');
        assert!(k.verify(&tampered, 1_000_000).is_err());
    }
}
