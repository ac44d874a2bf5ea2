//! The receiving side's cryptography for the push stand-ins (and the conformance push probe),
//! written from the RFCs independently of the relay's sending code (`relay-push`), so a test
//! that pairs them checks one against the other:
//!
//! * [`decrypt_aes128gcm`]: RFC 8291 / RFC 8188 decryption with the subscription's private
//!   key and auth secret;
//! * [`verify_es256`]: a compact ES256 JWT checked with `p256` directly (no JWT library);
//! * [`verify_vapid`]: RFC 8292 `Authorization: vapid t=…, k=…` (signature against `k`,
//!   `aud`, `exp` within 24 h, `sub`).

use aes_gcm::Aes128Gcm;
use aes_gcm::aead::{Aead as _, KeyInit as _};
use base64::Engine as _;
use hkdf::Hkdf;
use p256::ecdsa::signature::Verifier as _;
use p256::ecdsa::{Signature, VerifyingKey};
use p256::elliptic_curve::sec1::ToEncodedPoint as _;
use p256::{PublicKey, SecretKey};
use serde_json::Value;
use sha2::Sha256;

/// RFC 8292 §2: a VAPID JWT's `exp` is at most this far after the request.
pub const MAX_VAPID_EXP_S: u64 = 24 * 3600;

/// base64url without padding.
pub fn b64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// base64url with or without padding.
pub fn b64url_decode(s: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s.trim_end_matches('='))
        .ok()
}

/// The 65-byte uncompressed encoding of `public`.
pub fn uncompressed(public: &PublicKey) -> Vec<u8> {
    public.to_encoded_point(false).as_bytes().to_vec()
}

/// Whether `bytes` is an uncompressed P-256 point (65 bytes, `0x04`, on the curve): what a
/// browser requires of an `applicationServerKey`.
pub fn is_uncompressed_p256_point(bytes: &[u8]) -> bool {
    bytes.len() == 65 && bytes[0] == 4 && PublicKey::from_sec1_bytes(bytes).is_ok()
}

/// Decrypts an `aes128gcm` Web Push body for the subscription whose private key is
/// `ua_secret` and auth secret `auth`. Errors say which check failed.
pub fn decrypt_aes128gcm(
    body: &[u8],
    ua_secret: &SecretKey,
    auth: &[u8],
) -> Result<Vec<u8>, String> {
    // Header: salt (16) ‖ rs (u32 BE) ‖ idlen (1) ‖ keyid (idlen) — RFC 8188 §2.1.
    if body.len() < 21 {
        return Err("body shorter than the aes128gcm header".into());
    }
    let salt = &body[..16];
    let rs = u32::from_be_bytes([body[16], body[17], body[18], body[19]]) as usize;
    let idlen = usize::from(body[20]);
    if idlen != 65 || body.len() < 21 + idlen {
        return Err(format!(
            "keyid is {idlen} bytes, RFC 8291 requires the 65-byte sender key"
        ));
    }
    let sender = PublicKey::from_sec1_bytes(&body[21..86])
        .map_err(|_| "keyid is not a P-256 point".to_owned())?;
    let records = &body[86..];
    if rs < 18 || records.len() > rs {
        return Err(format!(
            "record size {rs} with {} bytes: RFC 8291 allows one record",
            records.len()
        ));
    }
    // RFC 8291 §3.3-3.4.
    let shared = p256::ecdh::diffie_hellman(ua_secret.to_nonzero_scalar(), sender.as_affine());
    let mut info = b"WebPush: info\0".to_vec();
    info.extend(uncompressed(&ua_secret.public_key()));
    info.extend(uncompressed(&sender));
    let mut ikm = [0u8; 32];
    Hkdf::<Sha256>::new(Some(auth), &shared.raw_secret_bytes()[..])
        .expand(&info, &mut ikm)
        .map_err(|_| "hkdf".to_owned())?;
    // RFC 8188 §2.2-2.3.
    let prk = Hkdf::<Sha256>::new(Some(salt), &ikm);
    let mut cek = [0u8; 16];
    let mut nonce = [0u8; 12];
    prk.expand(b"Content-Encoding: aes128gcm\0", &mut cek)
        .and_then(|()| prk.expand(b"Content-Encoding: nonce\0", &mut nonce))
        .map_err(|_| "hkdf".to_owned())?;
    let cipher = Aes128Gcm::new_from_slice(&cek).map_err(|_| "cek".to_owned())?;
    let mut plain = cipher
        .decrypt(&nonce.into(), records)
        .map_err(|_| "authentication failed: wrong key, auth secret or ciphertext".to_owned())?;
    // Padding: the delimiter 0x02 (last record) then zeros.
    while plain.last() == Some(&0) {
        plain.pop();
    }
    match plain.pop() {
        Some(2) => Ok(plain),
        _ => Err("no last-record delimiter".into()),
    }
}

/// Checks a compact JWT's ES256 signature against `public` (65-byte point); returns the
/// header and the claims.
pub fn verify_es256(jwt: &str, public: &[u8]) -> Result<(Value, Value), String> {
    let (input, sig) = jwt.rsplit_once('.').ok_or("not a compact JWT")?;
    let (h, c) = input.split_once('.').ok_or("not a compact JWT")?;
    let sig = b64url_decode(sig)
        .and_then(|s| Signature::from_slice(&s).ok())
        .ok_or("signature is not 64 bytes of base64url")?;
    let key = VerifyingKey::from_sec1_bytes(public).map_err(|_| "key is not a P-256 point")?;
    key.verify(input.as_bytes(), &sig)
        .map_err(|_| "ES256 signature does not verify")?;
    let part = |p: &str| -> Result<Value, String> {
        b64url_decode(p)
            .and_then(|b| serde_json::from_slice(&b).ok())
            .ok_or_else(|| "JWT part is not base64url JSON".to_owned())
    };
    let header = part(h)?;
    if header["alg"] != "ES256" {
        return Err(format!("alg is {}, not ES256", header["alg"]));
    }
    Ok((header, part(c)?))
}

/// What a verified VAPID `Authorization` header said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VapidClaims {
    /// `aud`.
    pub aud: String,
    /// `exp` (epoch seconds).
    pub exp: u64,
    /// `sub`.
    pub sub: String,
    /// The `k` parameter: the signer's public key, base64url.
    pub key: String,
}

/// Verifies `Authorization: vapid t=<jwt>, k=<key>` for a push resource of origin `aud` at
/// `now_s`: the signature against `k`, `aud` equal, `now_s < exp ≤ now_s + 24 h`, `sub` a
/// `mailto:` or `https:` URI.
pub fn verify_vapid(header: &str, aud: &str, now_s: u64) -> Result<VapidClaims, String> {
    let params = header
        .strip_prefix("vapid ")
        .ok_or("the Authorization scheme is not `vapid`")?;
    let mut t = None;
    let mut k = None;
    for param in params.split(',') {
        match param.trim().split_once('=') {
            Some(("t", v)) => t = Some(v.trim()),
            Some(("k", v)) => k = Some(v.trim()),
            _ => {}
        }
    }
    let (t, k) = t.zip(k).ok_or("missing t= or k=")?;
    let key = b64url_decode(k).ok_or("k is not base64url")?;
    if !is_uncompressed_p256_point(&key) {
        return Err("k is not an uncompressed P-256 point".into());
    }
    let (_, claims) = verify_es256(t, &key)?;
    let claim_aud = claims["aud"].as_str().unwrap_or_default();
    if claim_aud != aud {
        return Err(format!(
            "aud {claim_aud:?} is not this push service's origin {aud:?}"
        ));
    }
    let exp = claims["exp"].as_u64().ok_or("no numeric exp")?;
    if exp <= now_s || exp > now_s + MAX_VAPID_EXP_S {
        return Err(format!("exp {exp} is not within 24 h after now {now_s}"));
    }
    let sub = claims["sub"].as_str().unwrap_or_default();
    if !(sub.starts_with("mailto:") || sub.starts_with("https://")) {
        return Err(format!("sub {sub:?} is neither mailto: nor https:"));
    }
    Ok(VapidClaims {
        aud: claim_aud.to_owned(),
        exp,
        sub: sub.to_owned(),
        key: b64url(&key),
    })
}
