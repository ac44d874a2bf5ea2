//! Registration proof of work (PROTOCOL §1.1.1).
//!
//! Candidate nonces are the decimal renderings of a counter starting at 0; the hash input is
//! `challenge ‖ nonce` (UTF-8, no separator); the puzzle is solved when SHA-256 of it, rendered as
//! lowercase hex, starts with `difficulty` `'0'` characters, i.e. `difficulty` counts leading zero
//! **nibbles**. The relay re-implements [`pow_is_solved`] (it must not depend on this crate): it is
//! `sha256(challenge + nonce)` and a check of the first `difficulty` nibbles.

use sha2::{Digest as _, Sha256};

/// Candidates tried before [`solve_pow`] gives up (the reference clients stop at 10 million too).
pub const POW_MAX_ATTEMPTS: u64 = 10_000_000;
/// Largest meaningful difficulty: a SHA-256 digest has 64 nibbles.
pub const POW_MAX_DIFFICULTY: u32 = 64;
/// Difficulty assumed when the relay's challenge omits it or sends 0 (the web client's default).
pub const POW_DEFAULT_DIFFICULTY: u32 = 4;

/// Why no nonce was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PowError {
    /// Difficulty above 64 nibbles can never be met.
    #[error("difficulty {0} exceeds 64 nibbles")]
    DifficultyTooHigh(u32),
    /// No solution within [`POW_MAX_ATTEMPTS`] candidates.
    #[error("no solution within the attempt limit")]
    AttemptsExhausted,
}

/// True when the first `difficulty` hex nibbles of `digest` are zero.
pub fn leading_zero_nibbles(digest: &[u8], difficulty: u32) -> bool {
    let d = difficulty as usize;
    if d > digest.len() * 2 {
        return false;
    }
    let full = d / 2;
    digest[..full].iter().all(|&b| b == 0) && (d.is_multiple_of(2) || digest[full] >> 4 == 0)
}

/// Checks a proposed nonce (the relay-side check).
pub fn pow_is_solved(challenge: &str, nonce: &str, difficulty: u32) -> bool {
    let mut h = Sha256::new();
    h.update(challenge.as_bytes());
    h.update(nonce.as_bytes());
    leading_zero_nibbles(&h.finalize(), difficulty)
}

/// An ASCII decimal counter kept right-aligned in a stack buffer and incremented in place.
struct DecimalCounter {
    buf: [u8; 20],
    start: usize,
}

impl DecimalCounter {
    fn zero() -> Self {
        let mut buf = [b'0'; 20];
        buf[19] = b'0';
        Self { buf, start: 19 }
    }
    fn as_bytes(&self) -> &[u8] {
        &self.buf[self.start..]
    }
    fn increment(&mut self) {
        let mut i = self.buf.len();
        while i > 0 {
            i -= 1;
            if self.buf[i] == b'9' {
                self.buf[i] = b'0';
            } else {
                self.buf[i] += 1;
                self.start = self.start.min(i);
                return;
            }
        }
    }
}

/// Finds the first decimal nonce that solves the challenge.
pub fn solve_pow(challenge: &str, difficulty: u32) -> Result<String, PowError> {
    if difficulty > POW_MAX_DIFFICULTY {
        return Err(PowError::DifficultyTooHigh(difficulty));
    }
    let mut prefix = Sha256::new();
    prefix.update(challenge.as_bytes());
    let mut counter = DecimalCounter::zero();
    for _ in 0..POW_MAX_ATTEMPTS {
        let mut h = prefix.clone();
        h.update(counter.as_bytes());
        if leading_zero_nibbles(&h.finalize(), difficulty) {
            return Ok(String::from_utf8_lossy(counter.as_bytes()).into_owned());
        }
        counter.increment();
    }
    Err(PowError::AttemptsExhausted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_counts() {
        let mut c = DecimalCounter::zero();
        for i in 0..12_345u32 {
            assert_eq!(c.as_bytes(), i.to_string().as_bytes());
            c.increment();
        }
    }

    #[test]
    fn protocol_vectors() {
        assert_eq!(solve_pow("test-challenge", 4).unwrap(), "45524");
        assert_eq!(solve_pow("abc", 4).unwrap(), "93803");
        assert!(pow_is_solved("abc", "93803", 4));
        assert!(!pow_is_solved("abc", "93804", 4));
        assert_eq!(solve_pow("x", 0).unwrap(), "0");
        assert!(solve_pow("x", 65).is_err());
    }
}
