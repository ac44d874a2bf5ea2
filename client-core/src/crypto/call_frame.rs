//! Call media frame encryption (PROTOCOL §4.7), with a key schedule we define.
//!
//! **Key material** (44 bytes = AES-256 key ‖ 12-byte base IV) is derived per call and per
//! direction from the conversation session key:
//!
//! ```text
//! km = HKDF-SHA256(IKM  = session key,
//!                  salt = SHA-256("securechat-call-v1" ‖ call_id),
//!                  info = "securechat-call-frame-v1 caller->callee"   (or "… callee->caller"),
//!                  L    = 44)
//! ```
//!
//! Distinct `info` per direction means the caller's and the callee's frames never share a
//! (key, IV) pair although both counters start at 0; the `call_id` in the salt gives each call
//! fresh keys. No reference client defines this derivation (frame E2EE is inactive there), so this
//! is our own, documented choice.
//!
//! **Frames**: `IV = base_iv` with its first 8 bytes XORed with the counter in little-endian
//! order; output = counter (8 bytes, big-endian) ‖ ciphertext‖tag, no AAD. The receiver derives
//! the IV from the header, drops frames shorter than [`CALL_FRAME_MIN_BYTES`], drops a counter
//! seen among the last [`REPLAY_WINDOW_FRAMES`] distinct counters (recorded only after the frame
//! authenticated) and drops frames that fail authentication.
//!
//! **Rekey**: per key at most [`REKEY_MAX_FRAMES`] frames and [`REKEY_MAX_CIPHERTEXT_BYTES`]
//! ciphertext bytes. At 80 % of either the encryptor reports `rekey_needed` once; at 100 % it
//! refuses to encrypt.

use std::collections::{BTreeSet, VecDeque};
use std::fmt;

use sha2::{Digest as _, Sha256};
use zeroize::Zeroize as _;

use super::aead::AeadKey;
use super::{IV_BYTES, SessionKey, TAG_BYTES, hkdf_sha256};

/// Key material length: 32-byte key plus 12-byte base IV.
pub const CALL_KEY_MATERIAL_BYTES: usize = 44;
/// Salt prefix of the call key derivation.
pub const CALL_SALT_PREFIX: &[u8] = b"securechat-call-v1";
/// HKDF info for frames sent by the caller.
pub const CALL_INFO_CALLER_TO_CALLEE: &[u8] = b"securechat-call-frame-v1 caller->callee";
/// HKDF info for frames sent by the callee.
pub const CALL_INFO_CALLEE_TO_CALLER: &[u8] = b"securechat-call-frame-v1 callee->caller";
/// Counter header length in bytes.
pub const CALL_FRAME_HEADER_BYTES: usize = 8;
/// Shortest acceptable frame: header plus tag.
pub const CALL_FRAME_MIN_BYTES: usize = CALL_FRAME_HEADER_BYTES + TAG_BYTES;
/// Distinct counters remembered for replay detection.
pub const REPLAY_WINDOW_FRAMES: usize = 2048;
/// Frames per key before encryption is refused (2^24).
pub const REKEY_MAX_FRAMES: u64 = 1 << 24;
/// Ciphertext bytes per key before encryption is refused (2^34).
pub const REKEY_MAX_CIPHERTEXT_BYTES: u64 = 1 << 34;
/// Percentage of either limit at which `rekey_needed` is signalled.
pub const REKEY_WARN_PERCENT: u64 = 80;

/// Which side sends the frames a key protects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallDirection {
    /// Frames from the caller to the callee.
    CallerToCallee,
    /// Frames from the callee to the caller.
    CalleeToCaller,
}

/// 44 bytes of call key material; redacted in `Debug`.
#[derive(Clone)]
pub struct CallKeyMaterial([u8; CALL_KEY_MATERIAL_BYTES]);

impl CallKeyMaterial {
    /// Wraps raw material (e.g. handed to a WebRTC transform).
    pub fn from_bytes(bytes: [u8; CALL_KEY_MATERIAL_BYTES]) -> Self {
        Self(bytes)
    }
    /// Raw material (handle with care).
    pub fn as_bytes(&self) -> &[u8; CALL_KEY_MATERIAL_BYTES] {
        &self.0
    }
    fn split(&self) -> (AeadKey, [u8; IV_BYTES]) {
        let mut key = [0u8; 32];
        key.copy_from_slice(&self.0[..32]);
        let mut iv = [0u8; IV_BYTES];
        iv.copy_from_slice(&self.0[32..]);
        let cipher = AeadKey::new(&key);
        key.zeroize();
        (cipher, iv)
    }
}

impl fmt::Debug for CallKeyMaterial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CallKeyMaterial(<redacted>)")
    }
}

impl Drop for CallKeyMaterial {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

/// Derives the key material of one direction of one call (see the module doc).
pub fn derive_call_key_material(
    session_key: &SessionKey,
    call_id: &str,
    direction: CallDirection,
) -> CallKeyMaterial {
    let mut h = Sha256::new();
    h.update(CALL_SALT_PREFIX);
    h.update(call_id.as_bytes());
    let salt = h.finalize();
    let info = match direction {
        CallDirection::CallerToCallee => CALL_INFO_CALLER_TO_CALLEE,
        CallDirection::CalleeToCaller => CALL_INFO_CALLEE_TO_CALLER,
    };
    CallKeyMaterial(hkdf_sha256(session_key.as_bytes(), &salt, info))
}

/// The IV of a counter: `base_iv` with its first 8 bytes XORed with the little-endian counter.
pub fn frame_iv(base_iv: &[u8; IV_BYTES], counter: u64) -> [u8; IV_BYTES] {
    let mut iv = *base_iv;
    for (b, c) in iv.iter_mut().zip(counter.to_le_bytes()) {
        *b ^= c;
    }
    iv
}

/// Errors of the frame cipher.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CallFrameError {
    /// Frame shorter than header plus tag.
    #[error("call frame too short: {0} bytes")]
    TooShort(usize),
    /// Counter already seen within the replay window.
    #[error("replayed call frame counter {0}")]
    Replay(u64),
    /// Authentication failed.
    #[error("call frame failed authentication")]
    Auth,
    /// The key reached a rekey limit; a new key is required.
    #[error("call key exhausted: rekey required")]
    KeyExhausted,
}

/// Per-key usage limits (defaults: the protocol's; tests shrink them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RekeyLimits {
    /// Frames per key.
    pub max_frames: u64,
    /// Ciphertext bytes per key.
    pub max_ciphertext_bytes: u64,
}

impl Default for RekeyLimits {
    fn default() -> Self {
        Self {
            max_frames: REKEY_MAX_FRAMES,
            max_ciphertext_bytes: REKEY_MAX_CIPHERTEXT_BYTES,
        }
    }
}

/// One encrypted frame and whether the sender should now start a rekey.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedFrame {
    /// `counter_be ‖ ciphertext ‖ tag`.
    pub bytes: Vec<u8>,
    /// True exactly once: the first frame at or past 80 % of a limit.
    pub rekey_needed: bool,
}

/// Sender half of the frame cipher.
pub struct FrameEncryptor {
    cipher: AeadKey,
    base_iv: [u8; IV_BYTES],
    counter: u64,
    ciphertext_bytes: u64,
    limits: RekeyLimits,
    rekey_signalled: bool,
}

impl fmt::Debug for FrameEncryptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FrameEncryptor")
            .field("counter", &self.counter)
            .field("ciphertext_bytes", &self.ciphertext_bytes)
            .finish_non_exhaustive()
    }
}

impl FrameEncryptor {
    /// A sender with the protocol's limits.
    pub fn new(km: &CallKeyMaterial) -> Self {
        Self::with_limits(km, RekeyLimits::default())
    }

    /// A sender with custom limits.
    pub fn with_limits(km: &CallKeyMaterial, limits: RekeyLimits) -> Self {
        let (cipher, base_iv) = km.split();
        Self {
            cipher,
            base_iv,
            counter: 0,
            ciphertext_bytes: 0,
            limits,
            rekey_signalled: false,
        }
    }

    /// Frames sent with this key so far.
    pub fn frames_sent(&self) -> u64 {
        self.counter
    }

    /// Encrypts one frame.
    pub fn encrypt(&mut self, frame: &[u8]) -> Result<SealedFrame, CallFrameError> {
        let ct_len = u64::try_from(frame.len() + TAG_BYTES).unwrap_or(u64::MAX);
        if self.counter >= self.limits.max_frames
            || self.ciphertext_bytes.saturating_add(ct_len) > self.limits.max_ciphertext_bytes
        {
            return Err(CallFrameError::KeyExhausted);
        }
        let iv = frame_iv(&self.base_iv, self.counter);
        let mut bytes = Vec::with_capacity(CALL_FRAME_HEADER_BYTES + frame.len() + TAG_BYTES);
        bytes.extend_from_slice(&self.counter.to_be_bytes());
        bytes.extend_from_slice(frame);
        let tag = self
            .cipher
            .seal_in_place(&iv, &mut bytes[CALL_FRAME_HEADER_BYTES..]);
        bytes.extend_from_slice(&tag);
        self.counter += 1;
        self.ciphertext_bytes += ct_len;
        let warn = self.counter.saturating_mul(100)
            >= self.limits.max_frames.saturating_mul(REKEY_WARN_PERCENT)
            || self.ciphertext_bytes.saturating_mul(100)
                >= self
                    .limits
                    .max_ciphertext_bytes
                    .saturating_mul(REKEY_WARN_PERCENT);
        let rekey_needed = warn && !self.rekey_signalled;
        self.rekey_signalled |= warn;
        Ok(SealedFrame {
            bytes,
            rekey_needed,
        })
    }
}

/// Receiver half of the frame cipher, with the replay window.
pub struct FrameDecryptor {
    cipher: AeadKey,
    base_iv: [u8; IV_BYTES],
    seen: BTreeSet<u64>,
    order: VecDeque<u64>,
}

impl fmt::Debug for FrameDecryptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FrameDecryptor")
            .field("window", &self.order.len())
            .finish_non_exhaustive()
    }
}

impl FrameDecryptor {
    /// A receiver for one direction's key material.
    pub fn new(km: &CallKeyMaterial) -> Self {
        let (cipher, base_iv) = km.split();
        Self {
            cipher,
            base_iv,
            seen: BTreeSet::new(),
            order: VecDeque::with_capacity(REPLAY_WINDOW_FRAMES),
        }
    }

    /// Decrypts one frame, enforcing length, replay window and authentication.
    pub fn decrypt(&mut self, frame: &[u8]) -> Result<Vec<u8>, CallFrameError> {
        if frame.len() < CALL_FRAME_MIN_BYTES {
            return Err(CallFrameError::TooShort(frame.len()));
        }
        let (header, ct) = frame.split_at(CALL_FRAME_HEADER_BYTES);
        let mut c = [0u8; 8];
        c.copy_from_slice(header);
        let counter = u64::from_be_bytes(c);
        if self.seen.contains(&counter) {
            return Err(CallFrameError::Replay(counter));
        }
        let iv = frame_iv(&self.base_iv, counter);
        let (ct, tag) = ct.split_at(ct.len() - TAG_BYTES);
        let mut tag_arr = [0u8; TAG_BYTES];
        tag_arr.copy_from_slice(tag);
        let mut plain = ct.to_vec();
        self.cipher
            .open_in_place(&iv, &mut plain, &tag_arr)
            .map_err(|_| CallFrameError::Auth)?;
        if self.order.len() == REPLAY_WINDOW_FRAMES
            && let Some(old) = self.order.pop_front()
        {
            self.seen.remove(&old);
        }
        self.order.push_back(counter);
        self.seen.insert(counter);
        Ok(plain)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encoding::{from_hex_array, to_hex};

    #[test]
    fn protocol_8_2_iv_examples() {
        let base: [u8; 12] = from_hex_array("101112131415161718191a1b").unwrap();
        assert_eq!(to_hex(&frame_iv(&base, 0)), "101112131415161718191a1b");
        assert_eq!(to_hex(&frame_iv(&base, 1)), "111112131415161718191a1b");
        assert_eq!(to_hex(&frame_iv(&base, 258)), "121012131415161718191a1b");
        let mut km = [0u8; 44];
        km[32..].copy_from_slice(&base);
        let km = CallKeyMaterial::from_bytes(km);
        let mut e = FrameEncryptor::new(&km);
        let mut headers = Vec::new();
        for _ in 0..259 {
            headers.push(to_hex(&e.encrypt(b"x").unwrap().bytes[..8]));
        }
        assert_eq!(headers[0], "0000000000000000");
        assert_eq!(headers[1], "0000000000000001");
        assert_eq!(headers[258], "0000000000000102");
    }

    /// Whole frames pinned by values computed outside this crate (Python `cryptography`, i.e.
    /// OpenSSL, from the module doc's layout), so either AEAD provider must produce them.
    #[test]
    fn frame_bytes_known_answers() {
        let mut km = [0u8; 44];
        for (i, b) in km.iter_mut().enumerate() {
            *b = u8::try_from(i).unwrap();
        }
        let km = CallKeyMaterial::from_bytes(km);
        let mut e = FrameEncryptor::new(&km);
        let mut d = FrameDecryptor::new(&km);
        let sealed: Vec<String> = (0..259)
            .map(|_| to_hex(&e.encrypt(b"frame").unwrap().bytes))
            .collect();
        assert_eq!(
            sealed[0],
            "0000000000000000b448c71d099ad5025943dbb6397986fa4054f00dba"
        );
        assert_eq!(
            sealed[1],
            "00000000000000015a79087cd548879e367eed6b96fa57c40fb3c34e2a"
        );
        assert_eq!(
            sealed[258],
            "000000000000010201040f7bec21f8788ace80d1b2c6a9b823105e221e"
        );
        for s in [&sealed[258], &sealed[0]] {
            let bytes = crate::encoding::from_hex(s).unwrap();
            assert_eq!(d.decrypt(&bytes).unwrap(), b"frame");
        }
    }

    #[test]
    fn directions_differ_and_round_trip() {
        let sk = SessionKey::from_bytes([5; 32]);
        let a = derive_call_key_material(&sk, "call-1", CallDirection::CallerToCallee);
        let b = derive_call_key_material(&sk, "call-1", CallDirection::CalleeToCaller);
        let c = derive_call_key_material(&sk, "call-2", CallDirection::CallerToCallee);
        assert_ne!(a.as_bytes(), b.as_bytes());
        assert_ne!(a.as_bytes(), c.as_bytes());
        let mut e = FrameEncryptor::new(&a);
        let mut d = FrameDecryptor::new(&a);
        let f = e.encrypt(b"frame").unwrap();
        assert_eq!(d.decrypt(&f.bytes).unwrap(), b"frame");
        assert_eq!(d.decrypt(&f.bytes), Err(CallFrameError::Replay(0)));
        let mut wrong = FrameDecryptor::new(&b);
        let f2 = e.encrypt(b"frame").unwrap();
        assert_eq!(wrong.decrypt(&f2.bytes), Err(CallFrameError::Auth));
        assert_eq!(
            d.decrypt(&f2.bytes[..23]),
            Err(CallFrameError::TooShort(23))
        );
        assert_eq!(d.decrypt(&f2.bytes).unwrap(), b"frame");
    }

    #[test]
    fn replay_window_is_2048_distinct_counters() {
        let km = CallKeyMaterial::from_bytes([1; 44]);
        let mut e = FrameEncryptor::new(&km);
        let mut d = FrameDecryptor::new(&km);
        let frames: Vec<_> = (0..2050).map(|_| e.encrypt(b"").unwrap().bytes).collect();
        for f in &frames {
            d.decrypt(f).unwrap();
        }
        // counters 0 and 1 left the window; 2 is still inside
        assert!(d.decrypt(&frames[0]).is_ok());
        assert_eq!(d.decrypt(&frames[3]), Err(CallFrameError::Replay(3)));
        // a forged frame does not enter the window
        let mut forged = frames[2049].clone();
        forged[0] = 0x7f;
        assert_eq!(d.decrypt(&forged), Err(CallFrameError::Auth));
    }

    #[test]
    fn rekey_thresholds() {
        let km = CallKeyMaterial::from_bytes([2; 44]);
        let mut e = FrameEncryptor::with_limits(
            &km,
            RekeyLimits {
                max_frames: 10,
                max_ciphertext_bytes: u64::MAX,
            },
        );
        let flags: Vec<bool> = (0..10)
            .map(|_| e.encrypt(b"a").unwrap().rekey_needed)
            .collect();
        assert_eq!(flags.iter().filter(|f| **f).count(), 1);
        assert!(flags[7]); // the 8th frame reaches 80 %
        assert_eq!(e.encrypt(b"a"), Err(CallFrameError::KeyExhausted));
        let mut e = FrameEncryptor::with_limits(
            &km,
            RekeyLimits {
                max_frames: u64::MAX,
                max_ciphertext_bytes: 100,
            },
        );
        assert!(!e.encrypt(&[0; 60]).unwrap().rekey_needed); // 76 bytes
        assert!(e.encrypt(&[0; 0]).unwrap().rekey_needed); // 92 bytes >= 80
        assert_eq!(e.encrypt(&[0; 0]), Err(CallFrameError::KeyExhausted)); // 108 > 100
        assert_eq!(REKEY_MAX_FRAMES, 16_777_216);
        assert_eq!(REKEY_MAX_CIPHERTEXT_BYTES, 17_179_869_184);
    }
}
