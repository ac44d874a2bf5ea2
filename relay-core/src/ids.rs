//! Seeded generation of every server-assigned identifier and secret.
//!
//! Formats (decisions the protocol left open):
//! * user uuid: RFC 4122 version-4 layout, lowercase, 36 chars, 122 random bits
//!   (`wire::UserUuid::from_random_bytes` over 16 bytes from here);
//! * alias: `u` + 8 decimal digits (caller retries on collision);
//! * conversation id: `c-` + 24 lowercase hex chars (96 random bits);
//! * JWT id: 32 lowercase hex chars (128 bits);
//! * PoW challenges: 64 lowercase hex chars (256 bits);
//! * the nonces of auth challenges and WS tickets: 16 bytes (their form is
//!   `crate::credential`'s).

use rand_chacha::ChaCha20Rng;
use rand_core::{Rng as _, SeedableRng as _};

/// The relay's only source of randomness, seeded at construction.
#[derive(Debug, Clone)]
pub(crate) struct IdGen {
    rng: ChaCha20Rng,
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    s
}

impl IdGen {
    pub(crate) fn new(seed: u64) -> Self {
        Self {
            rng: ChaCha20Rng::seed_from_u64(seed),
        }
    }

    /// Where the stream of random values is now ([`IdGen::rewind`]).
    pub(crate) fn mark(&self) -> u128 {
        self.rng.get_word_pos()
    }

    /// Goes back to `mark`: the values drawn since are drawn again. An input's attempt that
    /// is dropped to wait for a read rewinds, so that its next run draws what it drew (a
    /// fresh account id it checks against the store is the one whose row was read).
    pub(crate) fn rewind(&mut self, mark: u128) {
        if self.rng.get_word_pos() != mark {
            self.rng.set_word_pos(mark);
        }
    }

    pub(crate) fn bytes<const N: usize>(&mut self) -> [u8; N] {
        let mut b = [0u8; N];
        self.rng.fill_bytes(&mut b);
        b
    }

    pub(crate) fn alias_candidate(&mut self) -> String {
        // Rejection sampling keeps the 8 digits uniform.
        loop {
            let x = self.rng.next_u32();
            if x < 4_200_000_000 {
                return format!("u{:08}", x % 100_000_000);
            }
        }
    }

    pub(crate) fn conv_id(&mut self) -> String {
        format!("c-{}", hex(&self.bytes::<12>()))
    }

    pub(crate) fn jti(&mut self) -> String {
        hex(&self.bytes::<16>())
    }

    pub(crate) fn challenge(&mut self) -> String {
        hex(&self.bytes::<32>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        let mut g = IdGen::new(7);
        let a = g.alias_candidate();
        assert!(a.len() == 9 && a.starts_with('u') && a[1..].chars().all(|c| c.is_ascii_digit()));
        let c = g.challenge();
        assert_eq!(c.len(), 64);
        assert!(
            c.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        assert!(g.conv_id().starts_with("c-"));
    }

    #[test]
    fn same_seed_same_ids() {
        let (mut a, mut b) = (IdGen::new(1), IdGen::new(1));
        assert_eq!(a.conv_id(), b.conv_id());
        assert_eq!(a.challenge(), b.challenge());
        assert_eq!(a.bytes::<16>(), b.bytes::<16>());
    }
}
