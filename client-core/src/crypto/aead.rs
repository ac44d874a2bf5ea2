//! The one AES-256-GCM seam of `client-core`: every payload (§4.4, call signals included), media
//! chunk (§4.6) and call frame (§4.7) is sealed and opened through [`AeadKey`].
//!
//! What the callers need and nothing more: a 256-bit key, a 96-bit IV, no associated data, the
//! buffer encrypted or decrypted in place and the 16-byte tag detached (each caller places it
//! itself). Two providers implement it, picked at build time:
//!
//! - default: the `aes-gcm` crate (RustCrypto, the mandated stack);
//! - feature `aws-lc`: aws-lc-rs (AWS-LC's assembly AES-GCM, the same provider rustls and str0m
//!   offer).
//!
//! Both produce the same bytes; with the feature the RustCrypto provider is still compiled for the
//! tests, which check the two against each other on random inputs.

use super::{IV_BYTES, TAG_BYTES};

/// The AES-256-GCM implementation of this build: `"aes-gcm"` or `"aws-lc-rs"`.
#[cfg(not(feature = "aws-lc"))]
pub const PROVIDER: &str = "aes-gcm";
/// The AES-256-GCM implementation of this build: `"aes-gcm"` or `"aws-lc-rs"`.
#[cfg(feature = "aws-lc")]
pub const PROVIDER: &str = "aws-lc-rs";

#[cfg(not(feature = "aws-lc"))]
pub(crate) use rustcrypto::AeadKey;

#[cfg(feature = "aws-lc")]
pub(crate) use awslc::AeadKey;

/// Authentication failed: wrong key, IV or tag, or tampered data. The buffer has then been
/// zeroed by either provider, so no unauthenticated plaintext is left in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AuthFailed;

/// The `aes-gcm` crate.
#[cfg(any(not(feature = "aws-lc"), test))]
mod rustcrypto {
    use aes_gcm::aead::{AeadInOut as _, KeyInit as _};
    use aes_gcm::{Aes256Gcm, Nonce, Tag};
    use zeroize::Zeroize as _;

    use super::{AuthFailed, IV_BYTES, TAG_BYTES};

    /// An expanded AES-256-GCM key (round keys and GHASH key).
    pub(crate) struct AeadKey(Aes256Gcm);

    impl AeadKey {
        pub(crate) fn new(key: &[u8; 32]) -> Self {
            Self(Aes256Gcm::new(key.into()))
        }

        /// Encrypts `buf` in place; returns the tag.
        pub(crate) fn seal_in_place(&self, iv: &[u8; IV_BYTES], buf: &mut [u8]) -> [u8; TAG_BYTES] {
            // Encryption only fails above 64 GiB; the largest caller input is a 5 MiB chunk.
            self.0
                .encrypt_inout_detached(&Nonce::from(*iv), &[], buf.into())
                .expect("AES-GCM plaintext within size limit")
                .into()
        }

        /// Decrypts `buf` in place if `tag` authenticates it; zeroes it if not.
        pub(crate) fn open_in_place(
            &self,
            iv: &[u8; IV_BYTES],
            buf: &mut [u8],
            tag: &[u8; TAG_BYTES],
        ) -> Result<(), AuthFailed> {
            self.0
                .decrypt_inout_detached(&Nonce::from(*iv), &[], buf.into(), &Tag::from(*tag))
                .map_err(|_| {
                    buf.zeroize();
                    AuthFailed
                })
        }
    }
}

/// aws-lc-rs.
#[cfg(feature = "aws-lc")]
mod awslc {
    use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
    use zeroize::Zeroize as _;

    use super::{AuthFailed, IV_BYTES, TAG_BYTES};

    /// An expanded AES-256-GCM key held by AWS-LC (`LessSafeKey`: the callers choose the IVs,
    /// which is what the protocol's random and counter IVs need).
    pub(crate) struct AeadKey(LessSafeKey);

    impl AeadKey {
        pub(crate) fn new(key: &[u8; 32]) -> Self {
            // Only a wrong key length fails, and the type fixes it at 32 bytes.
            let unbound = UnboundKey::new(&AES_256_GCM, key).expect("a 32-byte AES-256 key");
            Self(LessSafeKey::new(unbound))
        }

        /// Encrypts `buf` in place; returns the tag.
        pub(crate) fn seal_in_place(&self, iv: &[u8; IV_BYTES], buf: &mut [u8]) -> [u8; TAG_BYTES] {
            let tag = self
                .0
                .seal_in_place_separate_tag(Nonce::assume_unique_for_key(*iv), Aad::empty(), buf)
                .expect("AES-GCM plaintext within size limit");
            let mut out = [0u8; TAG_BYTES];
            out.copy_from_slice(tag.as_ref());
            out
        }

        /// Decrypts `buf` in place if `tag` authenticates it; zeroes it if not.
        pub(crate) fn open_in_place(
            &self,
            iv: &[u8; IV_BYTES],
            buf: &mut [u8],
            tag: &[u8; TAG_BYTES],
        ) -> Result<(), AuthFailed> {
            self.0
                .open_in_place_separate_tag(
                    Nonce::assume_unique_for_key(*iv),
                    Aad::empty(),
                    tag,
                    buf,
                )
                .map(|_| ())
                .map_err(|_| {
                    buf.zeroize();
                    AuthFailed
                })
        }
    }
}

#[cfg(test)]
mod tests {
    use sha2::{Digest as _, Sha256};

    use super::*;
    use crate::encoding::{from_hex_array, to_hex};

    const KEY: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
    const IV: &str = "cafebabefacedbaddecaf888";

    /// Known answers computed outside this crate (Python `cryptography`, i.e. OpenSSL), so they
    /// pin the provider in use, whichever it is: empty plaintext, one partial block, and 1,200
    /// bytes of `i % 251` (75 blocks: more than any provider's parallel batch, and the size of a
    /// call frame). The long ciphertext is pinned by its SHA-256.
    #[test]
    fn known_answers() {
        let key: [u8; 32] = from_hex_array(KEY).unwrap();
        let iv: [u8; IV_BYTES] = from_hex_array(IV).unwrap();
        let k = AeadKey::new(&key);
        let long: Vec<u8> = (0..1200).map(|i| (i % 251) as u8).collect();
        for (pt, ct, tag_hex) in [
            (&b""[..], String::new(), "5b0a77e3716cc7e86cf71b26dee7d5a4"),
            (
                &b"hello, world"[..],
                "e2c6cc4ac5566f6c297931b9".to_owned(),
                "aa941fe66e4761b519dcde7f0149c4a8",
            ),
            (
                &long[..],
                "sha256:f7024f5218195cb8849d737f533cf83d59fc64764bd15fdaaaa086798b612bb5"
                    .to_owned(),
                "7853615f4c4828bfdab525b069f3b11e",
            ),
        ] {
            let mut buf = pt.to_vec();
            let tag = k.seal_in_place(&iv, &mut buf);
            let got = if ct.starts_with("sha256:") {
                format!("sha256:{}", to_hex(&Sha256::digest(&buf)))
            } else {
                to_hex(&buf)
            };
            assert_eq!(got, ct, "{PROVIDER}, {} bytes", pt.len());
            assert_eq!(to_hex(&tag), tag_hex, "{PROVIDER}, {} bytes", pt.len());
            k.open_in_place(&iv, &mut buf, &tag).unwrap();
            assert_eq!(buf, pt);
        }
    }

    #[test]
    fn open_refuses_wrong_tag_iv_or_key() {
        let key: [u8; 32] = from_hex_array(KEY).unwrap();
        let iv: [u8; IV_BYTES] = from_hex_array(IV).unwrap();
        let k = AeadKey::new(&key);
        let mut sealed = b"hello, world".to_vec();
        let tag = k.seal_in_place(&iv, &mut sealed);
        let mut bad_tag = tag;
        bad_tag[15] ^= 1;
        let mut bad_iv = iv;
        bad_iv[0] ^= 1;
        let mut bad_key = key;
        bad_key[31] ^= 1;
        assert_eq!(
            k.open_in_place(&iv, &mut sealed.clone(), &bad_tag),
            Err(AuthFailed)
        );
        assert_eq!(
            k.open_in_place(&bad_iv, &mut sealed.clone(), &tag),
            Err(AuthFailed)
        );
        assert_eq!(
            AeadKey::new(&bad_key).open_in_place(&iv, &mut sealed.clone(), &tag),
            Err(AuthFailed)
        );
        sealed[0] ^= 1;
        assert_eq!(k.open_in_place(&iv, &mut sealed, &tag), Err(AuthFailed));
        assert_eq!(sealed, [0; 12], "a refused buffer is zeroed");
    }

    /// With the feature, the RustCrypto provider (still compiled for the tests) and aws-lc-rs
    /// must agree byte for byte and open each other's output.
    #[cfg(feature = "aws-lc")]
    mod providers {
        use proptest::prelude::*;

        use super::super::{AuthFailed, IV_BYTES, TAG_BYTES, awslc, rustcrypto};

        proptest! {
            #[test]
            fn agree_and_open_each_other(
                key in any::<[u8; 32]>(),
                iv in any::<[u8; IV_BYTES]>(),
                pt in proptest::collection::vec(any::<u8>(), 0..600),
                flip in any::<prop::sample::Index>(),
            ) {
                let aws = awslc::AeadKey::new(&key);
                let rc = rustcrypto::AeadKey::new(&key);
                let (mut a, mut r) = (pt.clone(), pt.clone());
                let tag_a = aws.seal_in_place(&iv, &mut a);
                let tag_r = rc.seal_in_place(&iv, &mut r);
                prop_assert_eq!(&a, &r);
                prop_assert_eq!(tag_a, tag_r);
                let mut back = a.clone();
                prop_assert!(rc.open_in_place(&iv, &mut back, &tag_a).is_ok());
                prop_assert_eq!(&back, &pt);
                let mut back = r;
                prop_assert!(aws.open_in_place(&iv, &mut back, &tag_r).is_ok());
                prop_assert_eq!(&back, &pt);
                // One flipped bit (ciphertext or tag) is refused by both.
                let (mut ct, mut tag) = (a, tag_a);
                let at = flip.index(ct.len() + TAG_BYTES);
                if at < ct.len() {
                    ct[at] ^= 1;
                } else {
                    tag[at - ct.len()] ^= 1;
                }
                prop_assert_eq!(aws.open_in_place(&iv, &mut ct.clone(), &tag), Err(AuthFailed));
                prop_assert_eq!(rc.open_in_place(&iv, &mut ct, &tag), Err(AuthFailed));
            }
        }
    }
}
