//! RFC 8291 message encryption for Web Push: the `aes128gcm` content coding of RFC 8188 keyed
//! by an ECDH agreement between a fresh application-server key and the subscription's P-256
//! key (`p256dh`), mixed with its 16-byte `auth` secret.
//!
//! Sans-IO and deterministic given its inputs: [`encrypt_with`] takes the ephemeral key and
//! the salt (checked byte for byte against RFC 8291 appendix A); [`encrypt`] draws both from a
//! caller-supplied CSPRNG. One record carries the whole payload (Web Push payloads are
//! ≤ [`MAX_PLAINTEXT_BYTES`]), so the body is `salt ‖ rs ‖ idlen ‖ keyid ‖ ciphertext`.

use aes_gcm::Aes128Gcm;
use aes_gcm::aead::{Aead as _, KeyInit as _};
use base64::Engine as _;
use hkdf::Hkdf;
use p256::elliptic_curve::sec1::ToEncodedPoint as _;
use p256::{PublicKey, SecretKey};
use rand_core::CryptoRng;
use sha2::Sha256;
use zeroize::Zeroizing;

/// The record size written in the header (RFC 8188 `rs`); the single record is shorter.
pub const RECORD_SIZE: u32 = 4096;
/// Bytes of the header before the ciphertext: salt 16, rs 4, idlen 1, keyid 65.
pub const HEADER_BYTES: usize = 16 + 4 + 1 + 65;
/// AES-GCM tag bytes.
const TAG_BYTES: usize = 16;
/// Largest plaintext: push services accept 4096-byte bodies, which must hold the header, the
/// padding delimiter and the tag.
pub const MAX_PLAINTEXT_BYTES: usize = 4096 - HEADER_BYTES - 1 - TAG_BYTES;

/// Why a payload could not be encrypted for a subscription.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EceError {
    /// `p256dh` is not base64url of an uncompressed point on P-256.
    #[error("the subscription's p256dh is not a P-256 public key")]
    BadPublicKey,
    /// `auth` is not base64url of 16 bytes.
    #[error("the subscription's auth secret is not 16 bytes")]
    BadAuthSecret,
    /// The plaintext is longer than [`MAX_PLAINTEXT_BYTES`].
    #[error("payload longer than {MAX_PLAINTEXT_BYTES} bytes")]
    TooLong,
}

/// The receiving side's keys, from a `PushSubscription` (`keys.p256dh`, `keys.auth`).
#[derive(Clone)]
pub struct UaKeys {
    public: PublicKey,
    public_bytes: [u8; 65],
    auth: [u8; 16],
}

impl std::fmt::Debug for UaKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UaKeys(<redacted>)")
    }
}

/// Decodes base64url with or without padding (browsers differ).
pub(crate) fn b64url_decode(value: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(value.trim_end_matches('='))
        .ok()
}

/// Encodes base64url without padding.
pub(crate) fn b64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// The uncompressed SEC1 encoding (`0x04 ‖ x ‖ y`) of a P-256 public key.
pub(crate) fn uncompressed(public: &PublicKey) -> [u8; 65] {
    let point = public.to_encoded_point(false);
    let mut out = [0u8; 65];
    out.copy_from_slice(point.as_bytes());
    out
}

impl UaKeys {
    /// Parses the subscription keys as the browser sent them (base64url, padded or not).
    pub fn from_b64url(p256dh: &str, auth: &str) -> Result<Self, EceError> {
        let public_raw = b64url_decode(p256dh).ok_or(EceError::BadPublicKey)?;
        let auth = b64url_decode(auth)
            .and_then(|a| <[u8; 16]>::try_from(a.as_slice()).ok())
            .ok_or(EceError::BadAuthSecret)?;
        Self::from_bytes(&public_raw, auth)
    }

    /// From raw bytes: the 65-byte uncompressed point and the auth secret.
    pub fn from_bytes(p256dh: &[u8], auth: [u8; 16]) -> Result<Self, EceError> {
        if p256dh.len() != 65 || p256dh[0] != 4 {
            return Err(EceError::BadPublicKey);
        }
        let public = PublicKey::from_sec1_bytes(p256dh).map_err(|_| EceError::BadPublicKey)?;
        Ok(Self {
            public_bytes: uncompressed(&public),
            public,
            auth,
        })
    }
}

/// Draws a P-256 secret key from `rng` (rejection sampling: a 32-byte string is a valid
/// scalar with probability ≈ 1 − 2⁻³²).
pub(crate) fn random_secret(rng: &mut impl CryptoRng) -> SecretKey {
    loop {
        let mut bytes = Zeroizing::new([0u8; 32]);
        rng.fill_bytes(bytes.as_mut());
        if let Ok(secret) = SecretKey::from_slice(bytes.as_ref()) {
            return secret;
        }
    }
}

/// Encrypts `plaintext` for `ua` with a fresh ephemeral key and salt drawn from `rng`.
pub fn encrypt(
    plaintext: &[u8],
    ua: &UaKeys,
    rng: &mut impl CryptoRng,
) -> Result<Vec<u8>, EceError> {
    let ephemeral = random_secret(rng);
    let mut salt = [0u8; 16];
    rng.fill_bytes(&mut salt);
    encrypt_with(plaintext, ua, &ephemeral, salt)
}

/// Encrypts `plaintext` for `ua` with the given application-server key `as_secret` (use a
/// fresh one per message) and `salt` (16 fresh random bytes per message).
pub fn encrypt_with(
    plaintext: &[u8],
    ua: &UaKeys,
    as_secret: &SecretKey,
    salt: [u8; 16],
) -> Result<Vec<u8>, EceError> {
    if plaintext.len() > MAX_PLAINTEXT_BYTES {
        return Err(EceError::TooLong);
    }
    let as_public = uncompressed(&as_secret.public_key());
    let shared = p256::ecdh::diffie_hellman(as_secret.to_nonzero_scalar(), ua.public.as_affine());

    // RFC 8291 §3.4: IKM from the ECDH secret and the auth secret, bound to both public keys.
    let mut key_info = Vec::with_capacity(14 + 130);
    key_info.extend_from_slice(b"WebPush: info\0");
    key_info.extend_from_slice(&ua.public_bytes);
    key_info.extend_from_slice(&as_public);
    let mut ikm = Zeroizing::new([0u8; 32]);
    Hkdf::<Sha256>::new(Some(&ua.auth), &shared.raw_secret_bytes()[..])
        .expand(&key_info, ikm.as_mut())
        .map_err(|_| EceError::TooLong)?;

    // RFC 8188 §2.2-2.3: content-encryption key and nonce from the salt.
    let hk = Hkdf::<Sha256>::new(Some(&salt), ikm.as_ref());
    let mut cek = Zeroizing::new([0u8; 16]);
    let mut nonce = [0u8; 12];
    hk.expand(b"Content-Encoding: aes128gcm\0", cek.as_mut())
        .and_then(|()| hk.expand(b"Content-Encoding: nonce\0", &mut nonce))
        .map_err(|_| EceError::TooLong)?;

    // One record, sequence number 0 (the nonce is used as derived); delimiter 0x02 = last.
    let mut record = Zeroizing::new(Vec::with_capacity(plaintext.len() + 1));
    record.extend_from_slice(plaintext);
    record.push(2);
    let cipher = Aes128Gcm::new_from_slice(cek.as_ref()).map_err(|_| EceError::TooLong)?;
    let sealed = cipher
        .encrypt(&nonce.into(), record.as_slice())
        .map_err(|_| EceError::TooLong)?;

    let mut body = Vec::with_capacity(HEADER_BYTES + sealed.len());
    body.extend_from_slice(&salt);
    body.extend_from_slice(&RECORD_SIZE.to_be_bytes());
    body.push(65);
    body.extend_from_slice(&as_public);
    body.extend_from_slice(&sealed);
    Ok(body)
}

#[cfg(test)]
mod tests {
    use rand_chacha::ChaCha20Rng;
    use rand_core::SeedableRng as _;

    use super::*;

    fn d(s: &str) -> Vec<u8> {
        b64url_decode(s).unwrap()
    }

    /// RFC 8291 appendix A, every input and the output byte for byte.
    #[test]
    fn rfc8291_appendix_a() {
        let plaintext = d("V2hlbiBJIGdyb3cgdXAsIEkgd2FudCB0byBiZSBhIHdhdGVybWVsb24");
        assert_eq!(plaintext, b"When I grow up, I want to be a watermelon");
        let as_secret =
            SecretKey::from_slice(&d("yfWPiYE-n46HLnH0KqZOF1fJJU3MYrct3AELtAQ-oRw")).unwrap();
        assert_eq!(
            b64url(&uncompressed(&as_secret.public_key())),
            "BP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A8"
        );
        let ua = UaKeys::from_b64url(
            "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4",
            "BTBZMqHH6r4Tts7J_aSIgg",
        )
        .unwrap();
        let salt: [u8; 16] = d("DGv6ra1nlYgDCS1FRnbzlw").try_into().unwrap();
        let body = encrypt_with(&plaintext, &ua, &as_secret, salt).unwrap();
        assert_eq!(
            b64url(&body),
            "DGv6ra1nlYgDCS1FRnbzlwAAEABBBP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A_yl95bQpu6cVPTpK4Mqgkf1CXztLVBSt2Ks3oZwbuwXPXLWyouBWLVWGNWQexSgSxsj_Qulcy4a-fN"
        );
    }

    #[test]
    fn fresh_key_and_salt_per_message_and_bounded_length() {
        let ua = UaKeys::from_b64url(
            "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4",
            "BTBZMqHH6r4Tts7J_aSIgg==",
        )
        .unwrap();
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        let a = encrypt(br#"{"type":"new_msg"}"#, &ua, &mut rng).unwrap();
        let b = encrypt(br#"{"type":"new_msg"}"#, &ua, &mut rng).unwrap();
        assert_eq!(a.len(), HEADER_BYTES + 18 + 1 + 16);
        assert_ne!(a[..16], b[..16], "salt reused");
        assert_ne!(a[21..86], b[21..86], "ephemeral key reused");
        assert!(encrypt(&[0; MAX_PLAINTEXT_BYTES], &ua, &mut rng).is_ok_and(|b| b.len() == 4096));
        assert_eq!(
            encrypt(&[0; MAX_PLAINTEXT_BYTES + 1], &ua, &mut rng),
            Err(EceError::TooLong)
        );
    }

    #[test]
    fn refuses_keys_that_are_not_p256_points() {
        let mut off_curve = vec![4u8];
        off_curve.extend([9u8; 64]);
        assert_eq!(
            UaKeys::from_bytes(&off_curve, [0; 16]).unwrap_err(),
            EceError::BadPublicKey
        );
        assert_eq!(
            UaKeys::from_b64url("BCVx", "BTBZMqHH6r4Tts7J_aSIgg").unwrap_err(),
            EceError::BadPublicKey
        );
        assert_eq!(
            UaKeys::from_b64url(
                "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4",
                "AAAA"
            )
            .unwrap_err(),
            EceError::BadAuthSecret
        );
    }
}
