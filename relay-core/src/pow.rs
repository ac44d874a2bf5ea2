//! Proof-of-work: SHA-256 over `challenge_string + pow_nonce`, solved when the lowercase hex
//! digest starts with `difficulty` `'0'` characters (difficulty counts hex nibbles).

use sha2::{Digest as _, Sha256};

use crate::ids::hex;

/// Whether `nonce` solves `challenge` at `difficulty`.
pub fn verify(challenge: &str, nonce: &str, difficulty: u32) -> bool {
    let mut h = Sha256::new();
    h.update(challenge.as_bytes());
    h.update(nonce.as_bytes());
    let digest = hex(&h.finalize());
    let n = usize::try_from(difficulty).unwrap_or(usize::MAX);
    n <= digest.len() && digest.bytes().take(n).all(|c| c == b'0')
}

/// Finds the smallest decimal nonce solving `challenge` (the reference clients' algorithm).
/// For tests and the simulator's clients.
pub fn solve(challenge: &str, difficulty: u32) -> String {
    let mut i: u64 = 0;
    loop {
        let nonce = i.to_string();
        if verify(challenge, &nonce, difficulty) {
            return nonce;
        }
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_vectors() {
        // PROTOCOL §8.2.
        assert!(verify("test-challenge", "45524", 4));
        assert!(verify("abc", "93803", 4));
        assert!(!verify("abc", "93802", 4));
        assert_eq!(solve("abc", 4), "93803");
        assert!(verify("anything", "", 0));
        assert!(!verify("x", "1", 65));
    }
}
