//! Cryptography of PROTOCOL §4: session keys, message payloads, content shapes, media chunks,
//! call frames and call-signal signatures.
//!
//! Everything here is deterministic given its inputs: IVs and nonces come from an injected
//! [`CryptoRng`], time from a `now_ms` argument.

mod aead;
pub mod call_frame;
pub mod content;
pub mod json;
pub mod media;
pub mod signal;

use std::fmt;

use hkdf::Hkdf;
use rand_core::CryptoRng;
use sha2::{Digest as _, Sha256};
use zeroize::Zeroize as _;

use crate::encoding::{EncodingError, from_base64, from_base64_array, to_base64};
use crate::keys::EcdhKeyPair;

/// `"aes-gcm"` is the default (RustCrypto); `"aws-lc-rs"` comes with the feature `aws-lc`. Either
/// gives the same bytes on the wire.
pub use aead::PROVIDER as AEAD_PROVIDER;

/// HKDF info of the conversation session key.
pub const SESSION_KEY_INFO: &[u8] = b"securechat-session-v1";
/// AES-GCM IV length in bytes.
pub const IV_BYTES: usize = 12;
/// AES-GCM tag length in bytes.
pub const TAG_BYTES: usize = 16;
/// Smallest valid decoded payload: IV plus tag (an encrypted empty string).
pub const MIN_PAYLOAD_BYTES: usize = IV_BYTES + TAG_BYTES;

/// A 32-byte AES-256-GCM conversation key; redacted in `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct SessionKey([u8; 32]);

impl SessionKey {
    /// Wraps raw key bytes.
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }
    /// Parses the stored `sessionKeyBase64` form.
    pub fn from_base64(s: &str) -> Result<Self, EncodingError> {
        from_base64_array(s).map(Self)
    }
    /// The stored `sessionKeyBase64` form.
    pub fn to_base64(&self) -> String {
        to_base64(&self.0)
    }
    /// Raw key bytes (handle with care).
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
    /// The expanded AES-256-GCM key of the build's provider.
    pub(crate) fn aead(&self) -> aead::AeadKey {
        aead::AeadKey::new(&self.0)
    }
}

impl fmt::Debug for SessionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SessionKey(<redacted>)")
    }
}

impl Drop for SessionKey {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

/// Why a payload could not be decrypted. Never contains key or plaintext bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    /// The payload is not canonical standard base64.
    #[error("payload is not valid base64")]
    Base64,
    /// Fewer than IV + tag bytes after decoding.
    #[error("payload too short: {0} bytes, at least 28 required")]
    TooShort(usize),
    /// AES-GCM authentication failed (wrong key or tampered data).
    #[error("payload failed authentication")]
    Auth,
    /// Decrypted bytes are not UTF-8 text.
    #[error("payload plaintext is not UTF-8")]
    Utf8,
}

/// HKDF-SHA256 over `ikm` with the given salt and info, `N` bytes of output.
pub(crate) fn hkdf_sha256<const N: usize>(ikm: &[u8], salt: &[u8], info: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    // N is at most 44 here, far below the 255 × 32 byte HKDF limit.
    Hkdf::<Sha256>::new(Some(salt), ikm)
        .expand(info, &mut out)
        .expect("HKDF output length is within bounds");
    out
}

/// Session key from a raw X25519 shared secret (PROTOCOL §4.3).
pub fn session_key_from_shared(shared: &[u8; 32], conversation_id: &str) -> SessionKey {
    let salt = Sha256::digest(conversation_id.as_bytes());
    SessionKey(hkdf_sha256(shared, &salt, SESSION_KEY_INFO))
}

/// Session key: HKDF-SHA256(X25519(mine, theirs), salt SHA-256(conversation id), info `securechat-session-v1`).
pub fn session_key(
    my_ecdh: &EcdhKeyPair,
    their_ecdh_public: &[u8; 32],
    conversation_id: &str,
) -> SessionKey {
    let mut shared = my_ecdh.diffie_hellman(their_ecdh_public);
    let key = session_key_from_shared(&shared, conversation_id);
    shared.zeroize();
    key
}

/// AES-256-GCM with an explicit IV; returns `iv ‖ ciphertext ‖ tag` (one allocation, sealed in
/// place).
pub(crate) fn seal_raw(key: &SessionKey, iv: &[u8; IV_BYTES], plaintext: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(IV_BYTES + plaintext.len() + TAG_BYTES);
    out.extend_from_slice(iv);
    out.extend_from_slice(plaintext);
    let tag = key.aead().seal_in_place(iv, &mut out[IV_BYTES..]);
    out.extend_from_slice(&tag);
    out
}

/// Decrypts `iv ‖ ciphertext ‖ tag`.
pub(crate) fn open_raw(key: &SessionKey, data: &[u8]) -> Result<Vec<u8>, PayloadError> {
    if data.len() < MIN_PAYLOAD_BYTES {
        return Err(PayloadError::TooShort(data.len()));
    }
    let (iv, rest) = data.split_at(IV_BYTES);
    let (ct, tag) = rest.split_at(rest.len() - TAG_BYTES);
    let mut iv_arr = [0u8; IV_BYTES];
    iv_arr.copy_from_slice(iv);
    let mut tag_arr = [0u8; TAG_BYTES];
    tag_arr.copy_from_slice(tag);
    let mut plain = ct.to_vec();
    key.aead()
        .open_in_place(&iv_arr, &mut plain, &tag_arr)
        .map_err(|_| PayloadError::Auth)?;
    Ok(plain)
}

/// Encrypts a message payload: `base64(iv ‖ ciphertext ‖ tag)` with a random IV (PROTOCOL §4.4).
pub fn encrypt_payload<R: CryptoRng + ?Sized>(
    key: &SessionKey,
    plaintext: &[u8],
    rng: &mut R,
) -> String {
    let mut iv = [0u8; IV_BYTES];
    rng.fill_bytes(&mut iv);
    to_base64(&seal_raw(key, &iv, plaintext))
}

/// Encrypts with a caller-chosen IV. Only for test vectors: never reuse an IV with one key.
pub fn encrypt_payload_with_iv(key: &SessionKey, iv: &[u8; IV_BYTES], plaintext: &[u8]) -> String {
    to_base64(&seal_raw(key, iv, plaintext))
}

/// Decrypts a message payload (strict base64, at least 28 bytes, authenticated).
pub fn decrypt_payload(key: &SessionKey, payload_b64: &str) -> Result<Vec<u8>, PayloadError> {
    let data = from_base64(payload_b64).map_err(|_| PayloadError::Base64)?;
    open_raw(key, &data)
}

/// Decrypts a message payload and requires UTF-8 text.
pub fn decrypt_payload_text(key: &SessionKey, payload_b64: &str) -> Result<String, PayloadError> {
    String::from_utf8(decrypt_payload(key, payload_b64)?).map_err(|_| PayloadError::Utf8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encoding::{from_hex_array, to_hex};

    #[test]
    fn protocol_8_2_session_keys_and_fixed_iv_payload() {
        let mut secret = [0u8; 32];
        for (i, b) in secret.iter_mut().enumerate() {
            *b = u8::try_from(i).unwrap();
        }
        assert_eq!(
            to_hex(session_key_from_shared(&secret, "c-test-conv-id").as_bytes()),
            "83e02ab46dba41140924f084213100b30f2db81e35367a1d2e57a88ebc7589f0"
        );
        assert_eq!(
            to_hex(session_key_from_shared(&secret, "conv-1").as_bytes()),
            "65fe0ca33447567c6d9993eb83f840a8bcdcdcece8cf161935bbb3bdc49ec67d"
        );
        let shared: [u8; 32] =
            from_hex_array("1a29023479e0870c7903ce7209ed3e5a4ae41e90d032cdb49f612fd5cf42a878")
                .unwrap();
        let key = session_key_from_shared(&shared, "c-test-conv-id");
        assert_eq!(
            to_hex(key.as_bytes()),
            "04973944a1f70f8dbcb625a30a02199af009a6b0aaa30ce41d4c552c743a1342"
        );
        let iv: [u8; 12] = from_hex_array("000102030405060708090a0b").unwrap();
        let p = encrypt_payload_with_iv(&key, &iv, b"hello");
        assert_eq!(p, "AAECAwQFBgcICQoL0jHajt/mT28D3zDaW8b+jHAC9lOL");
        assert_eq!(decrypt_payload_text(&key, &p).unwrap(), "hello");
    }

    #[test]
    fn payload_errors_are_distinct() {
        let key = SessionKey::from_bytes([9; 32]);
        assert_eq!(decrypt_payload(&key, "!!!!"), Err(PayloadError::Base64));
        assert_eq!(
            decrypt_payload(&key, &to_base64(&[0u8; 27])),
            Err(PayloadError::TooShort(27))
        );
        assert_eq!(
            decrypt_payload(&key, &to_base64(&[0u8; 28])),
            Err(PayloadError::Auth)
        );
        assert!(!format!("{key:?}").contains('9'));
    }
}
