//! Strict encoding helpers: standard padded base64 and lowercase hex.
//!
//! Decoding is strict on purpose ("parse, don't validate"): base64 must use the standard alphabet,
//! carry canonical `=` padding and have zero trailing bits; hex must be lowercase with an even length.
//! Anything else is rejected with an [`EncodingError`] that never echoes the input (it may be secret).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

/// Why a string could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EncodingError {
    /// Not canonical standard base64 with padding.
    #[error("invalid base64 (standard alphabet, canonical padding required)")]
    Base64,
    /// Not lowercase hex of even length.
    #[error("invalid hex (lowercase, even length required)")]
    Hex,
    /// Decoded to the wrong number of bytes.
    #[error("wrong length: expected {expected} bytes, got {actual}")]
    Length {
        /// Bytes expected.
        expected: usize,
        /// Bytes found.
        actual: usize,
    },
}

/// Encodes bytes as standard padded base64 (`btoa` form).
pub fn to_base64(bytes: &[u8]) -> String {
    STANDARD.encode(bytes)
}

/// Decodes standard padded base64, rejecting non-canonical encodings.
pub fn from_base64(s: &str) -> Result<Vec<u8>, EncodingError> {
    if !s.len().is_multiple_of(4) {
        return Err(EncodingError::Base64);
    }
    let bytes = STANDARD.decode(s).map_err(|_| EncodingError::Base64)?;
    // Belt and braces: the engine is already canonical, but a re-encode check pins it.
    if STANDARD.encode(&bytes) != s {
        return Err(EncodingError::Base64);
    }
    Ok(bytes)
}

/// Decodes base64 into exactly `N` bytes.
pub fn from_base64_array<const N: usize>(s: &str) -> Result<[u8; N], EncodingError> {
    let v = from_base64(s)?;
    let actual = v.len();
    v.try_into().map_err(|_| EncodingError::Length {
        expected: N,
        actual,
    })
}

/// Encodes bytes as lowercase hex.
pub fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    out
}

fn hex_val(c: u8) -> Result<u8, EncodingError> {
    match c {
        b'0'..=b'9' => Ok(c - b'0'),
        b'a'..=b'f' => Ok(c - b'a' + 10),
        _ => Err(EncodingError::Hex),
    }
}

/// Decodes lowercase hex of even length.
pub fn from_hex(s: &str) -> Result<Vec<u8>, EncodingError> {
    let b = s.as_bytes();
    if !b.len().is_multiple_of(2) {
        return Err(EncodingError::Hex);
    }
    b.chunks_exact(2)
        .map(|p| Ok((hex_val(p[0])? << 4) | hex_val(p[1])?))
        .collect()
}

/// Decodes lowercase hex into exactly `N` bytes.
pub fn from_hex_array<const N: usize>(s: &str) -> Result<[u8; N], EncodingError> {
    let v = from_hex(s)?;
    let actual = v.len();
    v.try_into().map_err(|_| EncodingError::Length {
        expected: N,
        actual,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trip_and_strictness() {
        assert_eq!(to_base64(&[1, 2, 3, 100, 255, 0]), "AQIDZP8A");
        assert_eq!(from_base64("AQIDZP8A").unwrap(), vec![1, 2, 3, 100, 255, 0]);
        assert_eq!(to_base64(&[]), "");
        assert_eq!(from_base64("").unwrap(), Vec::<u8>::new());
        assert!(from_base64("AQI").is_err()); // missing padding
        assert!(from_base64("AQJ=").is_err()); // non-zero trailing bits
        assert!(from_base64("AQ-_").is_err()); // url alphabet
        assert!(from_base64("AQI=\n").is_err());
        assert!(from_base64(" AQI=").is_err());
        assert_eq!(from_base64("AQI=").unwrap(), vec![1, 2]);
    }

    #[test]
    fn hex_strict() {
        assert_eq!(to_hex(&[0, 0xab, 0xff]), "00abff");
        assert_eq!(from_hex("00abff").unwrap(), vec![0, 0xab, 0xff]);
        assert!(from_hex("00ABFF").is_err());
        assert!(from_hex("0").is_err());
        assert!(from_hex("zz").is_err());
        assert_eq!(from_hex_array::<2>("0011"), Ok([0, 0x11]),);
        assert!(from_hex_array::<3>("0011").is_err());
    }
}
