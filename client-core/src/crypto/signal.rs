//! Call-signal signing and verification (PROTOCOL §3.4–3.6), interoperable with the web client.
//!
//! **Signing.** The inner object is the caller's fields (`type`, `call_id`, `from` and the
//! type's sensitive fields) plus `_ts` (`now`, epoch ms), `_nonce` (16 RNG bytes as 32 lowercase
//! hex), `_body` and `_sig`. The signature is Ed25519 over the web client's canonical form
//! ([`canonical_web`]) of the object without `_sig`, so the web client verifies it unchanged.
//!
//! **Every field signed (`_body`).** The web canonical form drops nested keys that are not also
//! top-level keys (e.g. `candidate.sdpMid` of `call_ice`). We therefore add a top-level string
//! `_body` = lowercase hex SHA-256 of [`canonical_full`] (every key at every depth, sorted) of the
//! object without `_sig` and `_body`. Being top-level, `_body` is inside the web canonical form
//! and thus covered by the signature, and it commits to every nested field. The web client
//! ignores the unknown field (it only copies it onto the envelope it dispatches).
//!
//! **Verifying.** After AES-GCM decryption: `_sig` is 128 lowercase hex, `_ts` an integer within
//! [`SIGNAL_MAX_AGE_MS`] of `now`, `_nonce` 32 lowercase hex not seen within
//! [`NONCE_CACHE_TTL_MS`], the peer's Ed25519 key is known (no key: reject, unlike KT), the
//! signature verifies, `_body` (when present) matches, the inner `from`, `call_id` and `type`
//! equal the envelope's (the web client dispatches on the unsigned outer type; we do not). The
//! nonce is recorded only after all checks pass. A reference-signed signal has no `_body`; it is
//! accepted, and [`VerifiedSignal::coverage`] lists the nested fields its signature does not cover
//! so the caller can decide (e.g. treat `candidate.sdpMid` as unauthenticated).

use std::collections::{BTreeMap, BTreeSet};

use rand_core::CryptoRng;
use serde_json::{Map, Value};
use sha2::{Digest as _, Sha256};

use super::json::{canonical_full, canonical_web, uncovered_paths};
use super::{PayloadError, SessionKey, decrypt_payload_text, encrypt_payload};
use crate::encoding::{from_hex_array, to_hex};
use crate::keys::{SigningKeyPair, verify_signature};

/// Largest accepted difference between `now` and a signal's `_ts`, in ms.
pub const SIGNAL_MAX_AGE_MS: u64 = 60_000;
/// How long a seen nonce is remembered, in ms.
pub const NONCE_CACHE_TTL_MS: u64 = 300_000;
/// Bound on remembered nonces; when full the entry expiring first is evicted.
pub const NONCE_CACHE_MAX_ENTRIES: usize = 4096;
/// Random bytes in a nonce (32 hex chars).
pub const SIGNAL_NONCE_BYTES: usize = 16;
/// Field carrying the digest of the full canonical form.
pub const BODY_FIELD: &str = "_body";
/// Timestamp field.
pub const TS_FIELD: &str = "_ts";
/// Nonce field.
pub const NONCE_FIELD: &str = "_nonce";
/// Signature field.
pub const SIG_FIELD: &str = "_sig";

/// Why a signal was refused. Never contains key bytes or payload plaintext.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignalError {
    /// Fields given to [`sign_signal`] contain a reserved `_`-field.
    #[error("reserved field {0} supplied by caller")]
    ReservedField(&'static str),
    /// Payload could not be decrypted.
    #[error("signal payload: {0}")]
    Payload(#[from] PayloadError),
    /// Plaintext is not a JSON object.
    #[error("signal is not a JSON object")]
    NotObject,
    /// `_sig` missing or not 128 lowercase hex.
    #[error("signal signature field missing or malformed")]
    MalformedSignature,
    /// `_ts` missing or not a non-negative integer.
    #[error("signal timestamp missing or malformed")]
    MalformedTimestamp,
    /// `_ts` further than 60 s from now.
    #[error("signal timestamp outside the {SIGNAL_MAX_AGE_MS} ms window")]
    Stale,
    /// `_nonce` missing or not 32 lowercase hex.
    #[error("signal nonce missing or malformed")]
    MalformedNonce,
    /// Nonce already seen within the TTL.
    #[error("signal nonce replayed")]
    ReplayedNonce,
    /// No Ed25519 key for the peer.
    #[error("no signing key known for the peer")]
    NoPeerKey,
    /// Signature does not verify.
    #[error("signal signature does not verify")]
    BadSignature,
    /// `_body` does not match the full canonical form.
    #[error("signal _body digest mismatch")]
    BodyMismatch,
    /// Inner `from` differs from the envelope's.
    #[error("signal from mismatch")]
    FromMismatch,
    /// Inner `call_id` differs from the envelope's (or one is missing).
    #[error("signal call_id mismatch")]
    CallIdMismatch,
    /// Inner `type` differs from the envelope's.
    #[error("signal type mismatch")]
    TypeMismatch,
}

/// Nonces seen recently; bounded (see [`NONCE_CACHE_MAX_ENTRIES`]).
#[derive(Debug, Default, Clone)]
pub struct NonceCache {
    expiry_of: BTreeMap<String, u64>,
    by_expiry: BTreeSet<(u64, String)>,
}

impl NonceCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }
    /// Entries currently held.
    pub fn len(&self) -> usize {
        self.expiry_of.len()
    }
    /// True when no entries are held.
    pub fn is_empty(&self) -> bool {
        self.expiry_of.is_empty()
    }
    /// True when `nonce` was recorded and has not expired at `now_ms`.
    pub fn contains(&self, nonce: &str, now_ms: u64) -> bool {
        self.expiry_of.get(nonce).is_some_and(|&e| e > now_ms)
    }
    /// Drops expired entries.
    pub fn prune(&mut self, now_ms: u64) {
        while let Some((e, n)) = self.by_expiry.first().cloned() {
            if e > now_ms {
                break;
            }
            self.by_expiry.remove(&(e, n.clone()));
            self.expiry_of.remove(&n);
        }
    }
    /// Records a nonce until `now + TTL`. Evicts the soonest-expiring entry when full: such an
    /// entry is older than any signal the 60 s `_ts` window still admits, so this is safe unless
    /// more than 4096 signals arrive per minute.
    pub fn insert(&mut self, nonce: &str, now_ms: u64) {
        self.prune(now_ms);
        if let Some(old) = self.expiry_of.remove(nonce) {
            self.by_expiry.remove(&(old, nonce.to_owned()));
        }
        while self.expiry_of.len() >= NONCE_CACHE_MAX_ENTRIES {
            let Some((e, n)) = self.by_expiry.pop_first() else {
                break;
            };
            let _ = e;
            self.expiry_of.remove(&n);
        }
        let exp = now_ms.saturating_add(NONCE_CACHE_TTL_MS);
        self.expiry_of.insert(nonce.to_owned(), exp);
        self.by_expiry.insert((exp, nonce.to_owned()));
    }
}

/// The outer (relay-visible) fields a signal is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignalEnvelope<'a> {
    /// Envelope `type` (e.g. `call_offer`).
    pub frame_type: &'a str,
    /// Envelope `from` (injected by the relay).
    pub from: &'a str,
    /// Envelope `call_id`.
    pub call_id: &'a str,
}

/// How much of a verified signal its signature covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignatureCoverage {
    /// Every field (our `_body` scheme, or a flat object).
    Full,
    /// Reference-signed without `_body`: these nested paths are not covered.
    WebCanonicalOnly {
        /// Dotted paths of unsigned nested fields.
        unsigned_fields: Vec<String>,
    },
}

/// A signal that passed every check.
#[derive(Debug, Clone, PartialEq)]
pub struct VerifiedSignal {
    /// Inner fields without `_sig`, `_ts`, `_nonce`, `_body`.
    pub fields: Map<String, Value>,
    /// The sender's `_ts`.
    pub ts_ms: u64,
    /// What the signature covers.
    pub coverage: SignatureCoverage,
}

fn body_digest(inner: &Map<String, Value>) -> String {
    let mut m = inner.clone();
    m.remove(SIG_FIELD);
    m.remove(BODY_FIELD);
    to_hex(&Sha256::digest(
        canonical_full(&Value::Object(m)).as_bytes(),
    ))
}

/// Builds the signed inner object from the caller's fields.
pub fn sign_signal<R: CryptoRng + ?Sized>(
    signing_key: &SigningKeyPair,
    fields: Map<String, Value>,
    now_ms: u64,
    rng: &mut R,
) -> Result<Map<String, Value>, SignalError> {
    for reserved in [TS_FIELD, NONCE_FIELD, SIG_FIELD, BODY_FIELD] {
        if fields.contains_key(reserved) {
            return Err(SignalError::ReservedField(reserved));
        }
    }
    let mut nonce = [0u8; SIGNAL_NONCE_BYTES];
    rng.fill_bytes(&mut nonce);
    let mut inner = fields;
    inner.insert(TS_FIELD.into(), Value::from(now_ms));
    inner.insert(NONCE_FIELD.into(), Value::from(to_hex(&nonce)));
    let body = body_digest(&inner);
    inner.insert(BODY_FIELD.into(), Value::from(body));
    let sig = signing_key.sign(canonical_web(&inner).as_bytes());
    inner.insert(SIG_FIELD.into(), Value::from(to_hex(&sig)));
    Ok(inner)
}

/// Signs and encrypts: the `payload` of a `call_*` frame (`crypto_v` 2).
pub fn seal_signal<R: CryptoRng + ?Sized>(
    session_key: &SessionKey,
    signing_key: &SigningKeyPair,
    fields: Map<String, Value>,
    now_ms: u64,
    rng: &mut R,
) -> Result<String, SignalError> {
    let inner = sign_signal(signing_key, fields, now_ms, rng)?;
    let text = canonical_full(&Value::Object(inner));
    Ok(encrypt_payload(session_key, text.as_bytes(), rng))
}

fn str_field<'a>(m: &'a Map<String, Value>, k: &str) -> Option<&'a str> {
    m.get(k).and_then(Value::as_str)
}

/// Checks a decrypted inner object (see the module doc); records the nonce on success.
pub fn verify_signal(
    inner: &Map<String, Value>,
    envelope: SignalEnvelope<'_>,
    peer_ed25519: Option<&[u8; 32]>,
    now_ms: u64,
    nonces: &mut NonceCache,
) -> Result<VerifiedSignal, SignalError> {
    let sig: [u8; 64] = str_field(inner, SIG_FIELD)
        .and_then(|s| from_hex_array(s).ok())
        .ok_or(SignalError::MalformedSignature)?;
    let ts = inner
        .get(TS_FIELD)
        .and_then(Value::as_u64)
        .ok_or(SignalError::MalformedTimestamp)?;
    if ts.abs_diff(now_ms) > SIGNAL_MAX_AGE_MS {
        return Err(SignalError::Stale);
    }
    let nonce = str_field(inner, NONCE_FIELD)
        .filter(|n| from_hex_array::<SIGNAL_NONCE_BYTES>(n).is_ok())
        .ok_or(SignalError::MalformedNonce)?;
    if nonces.contains(nonce, now_ms) {
        return Err(SignalError::ReplayedNonce);
    }
    let pk = peer_ed25519.ok_or(SignalError::NoPeerKey)?;
    let mut unsigned = inner.clone();
    unsigned.remove(SIG_FIELD);
    verify_signature(pk, canonical_web(&unsigned).as_bytes(), &sig)
        .map_err(|_| SignalError::BadSignature)?;
    let coverage = match inner.get(BODY_FIELD) {
        Some(b) => {
            if b.as_str() != Some(body_digest(inner).as_str()) {
                return Err(SignalError::BodyMismatch);
            }
            SignatureCoverage::Full
        }
        None => {
            let unsigned_fields = uncovered_paths(&unsigned);
            if unsigned_fields.is_empty() {
                SignatureCoverage::Full
            } else {
                SignatureCoverage::WebCanonicalOnly { unsigned_fields }
            }
        }
    };
    if str_field(inner, "from") != Some(envelope.from) {
        return Err(SignalError::FromMismatch);
    }
    if envelope.call_id.is_empty() || str_field(inner, "call_id") != Some(envelope.call_id) {
        return Err(SignalError::CallIdMismatch);
    }
    if str_field(inner, "type") != Some(envelope.frame_type) {
        return Err(SignalError::TypeMismatch);
    }
    nonces.insert(nonce, now_ms);
    let mut fields = unsigned;
    for k in [TS_FIELD, NONCE_FIELD, BODY_FIELD] {
        fields.remove(k);
    }
    Ok(VerifiedSignal {
        fields,
        ts_ms: ts,
        coverage,
    })
}

/// Decrypts a signal payload with the conversation key and verifies it.
pub fn open_signal(
    session_key: &SessionKey,
    payload_b64: &str,
    envelope: SignalEnvelope<'_>,
    peer_ed25519: Option<&[u8; 32]>,
    now_ms: u64,
    nonces: &mut NonceCache,
) -> Result<VerifiedSignal, SignalError> {
    let text = decrypt_payload_text(session_key, payload_b64)?;
    let Ok(Value::Object(inner)) = serde_json::from_str::<Value>(&text) else {
        return Err(SignalError::NotObject);
    };
    verify_signal(&inner, envelope, peer_ed25519, now_ms, nonces)
}
