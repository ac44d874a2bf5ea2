//! Media chunk framing (PROTOCOL §4.6).
//!
//! Plaintext is cut into [`MEDIA_CHUNK_PLAINTEXT_BYTES`] chunks, each encrypted with the session
//! key and a fresh random IV. One frame = `u32_BE(len) ‖ IV(12) ‖ ciphertext‖tag(len)`; the stored
//! object is the concatenation. Empty input gives one frame encrypting zero bytes (web client);
//! an empty object (no frames, as the Android client uploads) decodes to empty plaintext.
//! Decoding is strict: truncated length/IV/ciphertext, a length outside `16..=chunk+16`, and an
//! authentication failure are distinct errors.
//!
//! The AEAD behind the chunks is the crate's provider seam (`aes-gcm`, or aws-lc-rs with the
//! `aws-lc` feature; the bytes are the same, the tests of this module run on either).

use rand_core::CryptoRng;

use super::aead::AeadKey;
use super::{IV_BYTES, SessionKey, TAG_BYTES};

/// Plaintext bytes per chunk: 5 MiB.
pub const MEDIA_CHUNK_PLAINTEXT_BYTES: usize = 5 * 1024 * 1024;
/// Largest valid `len` field: a full chunk plus the tag.
pub const MEDIA_CHUNK_MAX_CIPHERTEXT_BYTES: usize = MEDIA_CHUNK_PLAINTEXT_BYTES + TAG_BYTES;
/// Size of the big-endian length prefix.
pub const MEDIA_LEN_PREFIX_BYTES: usize = 4;

/// Why a media object could not be decrypted. Offsets are byte positions in the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MediaError {
    /// Fewer than 4 bytes left where a length prefix was expected.
    #[error("truncated length prefix at offset {offset}")]
    TruncatedLength {
        /// Where the frame starts.
        offset: usize,
    },
    /// The length is below the tag size or above one chunk plus tag.
    #[error("invalid chunk length {len} at offset {offset}")]
    BadLength {
        /// Where the frame starts.
        offset: usize,
        /// The length read.
        len: u32,
    },
    /// Fewer than 12 bytes left for the IV.
    #[error("truncated IV at offset {offset}")]
    TruncatedIv {
        /// Where the frame starts.
        offset: usize,
    },
    /// Fewer bytes left than the length announces.
    #[error("truncated ciphertext at offset {offset}")]
    TruncatedCiphertext {
        /// Where the frame starts.
        offset: usize,
    },
    /// A chunk failed authentication.
    #[error("chunk {index} failed authentication")]
    Auth {
        /// Zero-based chunk index.
        index: usize,
    },
}

/// Encrypts a media object into frames (one per multipart part).
pub fn encrypt_media<R: CryptoRng + ?Sized>(
    key: &SessionKey,
    plaintext: &[u8],
    rng: &mut R,
) -> Vec<Vec<u8>> {
    let chunks: Vec<&[u8]> = if plaintext.is_empty() {
        vec![&[][..]]
    } else {
        plaintext.chunks(MEDIA_CHUNK_PLAINTEXT_BYTES).collect()
    };
    let aead = key.aead();
    chunks
        .into_iter()
        .map(|c| {
            let mut iv = [0u8; IV_BYTES];
            rng.fill_bytes(&mut iv);
            seal_frame(&aead, &iv, c)
        })
        .collect()
}

/// One frame with a caller-chosen IV. Only for test vectors: never reuse an IV with one key.
///
/// One allocation: the frame `len ‖ IV ‖ ciphertext ‖ tag` is sized up front, the plaintext is
/// copied to its place and encrypted in place, then the tag is written after it.
pub fn encrypt_chunk_with_iv(key: &SessionKey, iv: &[u8; IV_BYTES], chunk: &[u8]) -> Vec<u8> {
    seal_frame(&key.aead(), iv, chunk)
}

fn seal_frame(aead: &AeadKey, iv: &[u8; IV_BYTES], chunk: &[u8]) -> Vec<u8> {
    let len = u32::try_from(chunk.len() + TAG_BYTES).unwrap_or(u32::MAX);
    let body_at = MEDIA_LEN_PREFIX_BYTES + IV_BYTES;
    let mut frame = Vec::with_capacity(body_at + chunk.len() + TAG_BYTES);
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(iv);
    frame.extend_from_slice(chunk);
    let tag = aead.seal_in_place(iv, &mut frame[body_at..]);
    frame.extend_from_slice(&tag);
    frame
}

/// Decrypts a concatenation of frames.
pub fn decrypt_media(key: &SessionKey, object: &[u8]) -> Result<Vec<u8>, MediaError> {
    let aead = key.aead();
    let mut out = Vec::with_capacity(object.len());
    let mut offset = 0;
    let mut index = 0;
    while offset < object.len() {
        let rest = &object[offset..];
        let Some(prefix) = rest.get(..MEDIA_LEN_PREFIX_BYTES) else {
            return Err(MediaError::TruncatedLength { offset });
        };
        let len = u32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]);
        let len_usize = usize::try_from(len).unwrap_or(usize::MAX);
        if !(TAG_BYTES..=MEDIA_CHUNK_MAX_CIPHERTEXT_BYTES).contains(&len_usize) {
            return Err(MediaError::BadLength { offset, len });
        }
        let body = &rest[MEDIA_LEN_PREFIX_BYTES..];
        if body.len() < IV_BYTES {
            return Err(MediaError::TruncatedIv { offset });
        }
        let Some(sealed) = body.get(..IV_BYTES + len_usize) else {
            return Err(MediaError::TruncatedCiphertext { offset });
        };
        // Decrypt in place at the end of `out`: no per-chunk buffer.
        let (iv, rest) = sealed.split_at(IV_BYTES);
        let (ct, tag) = rest.split_at(len_usize - TAG_BYTES);
        let mut nonce = [0u8; IV_BYTES];
        nonce.copy_from_slice(iv);
        let tag: [u8; TAG_BYTES] = tag
            .try_into()
            .map_err(|_| MediaError::TruncatedCiphertext { offset })?;
        let start = out.len();
        out.extend_from_slice(ct);
        if aead.open_in_place(&nonce, &mut out[start..], &tag).is_err() {
            out.truncate(start);
            return Err(MediaError::Auth { index });
        }
        offset += MEDIA_LEN_PREFIX_BYTES + IV_BYTES + len_usize;
        index += 1;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::session_key_from_shared;
    use crate::encoding::{from_hex_array, to_hex};

    fn key() -> SessionKey {
        let shared: [u8; 32] =
            from_hex_array("1a29023479e0870c7903ce7209ed3e5a4ae41e90d032cdb49f612fd5cf42a878")
                .unwrap();
        session_key_from_shared(&shared, "c-test-conv-id")
    }

    #[test]
    fn protocol_8_2_chunk_frame() {
        let iv: [u8; 12] = from_hex_array("000102030405060708090a0b").unwrap();
        let f = encrypt_chunk_with_iv(&key(), &iv, &[0, 1, 2]);
        assert_eq!(
            to_hex(&f),
            "00000013000102030405060708090a0bba55b4128cb0c39c8572895f817034b7e712d5"
        );
        assert_eq!(decrypt_media(&key(), &f).unwrap(), vec![0, 1, 2]);
    }

    #[test]
    fn strict_errors() {
        let k = key();
        let iv = [7u8; 12];
        let f = encrypt_chunk_with_iv(&k, &iv, b"abc");
        assert_eq!(
            decrypt_media(&k, &f[..3]),
            Err(MediaError::TruncatedLength { offset: 0 })
        );
        assert_eq!(
            decrypt_media(&k, &f[..10]),
            Err(MediaError::TruncatedIv { offset: 0 })
        );
        assert_eq!(
            decrypt_media(&k, &f[..f.len() - 1]),
            Err(MediaError::TruncatedCiphertext { offset: 0 })
        );
        assert_eq!(
            decrypt_media(&k, &[0, 0, 0, 0]),
            Err(MediaError::BadLength { offset: 0, len: 0 })
        );
        assert!(matches!(
            decrypt_media(&k, &[0, 0x50, 0, 17]),
            Err(MediaError::BadLength { .. })
        ));
        // the 8.1 sample frame (len 1) is not a valid GCM frame
        let sample = [0, 0, 0, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0xff];
        assert!(matches!(
            decrypt_media(&k, &sample),
            Err(MediaError::BadLength { len: 1, .. })
        ));
        let mut t = f;
        let last = t.len() - 1;
        t[last] ^= 1;
        assert_eq!(decrypt_media(&k, &t), Err(MediaError::Auth { index: 0 }));
        assert_eq!(decrypt_media(&k, &[]), Ok(vec![]));
    }
}
