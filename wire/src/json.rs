//! JSON written by hand for what every routed message costs (the relay's stored rows of the
//! routing path, and the `ack`, `msg` and receipt frames it sends): **byte for byte** what
//! `serde_json` writes for the same values (the tests compare the two on arbitrary values), so
//! stored rows, frames and every reader of them are unchanged.
//!
//! The point is the payload: `serde_json` checks each byte of a string against its escape
//! table, one at a time; here a string is checked in 32-byte blocks without a branch per byte
//! and copied in one piece. Strings that do need escaping (never a base64 payload) are written by
//! `serde_json` itself. Ids are never checked: their parsers admit no byte that needs escaping.

/// Appends `s` as a JSON string, escaped exactly as `serde_json` escapes it.
#[inline]
pub fn string(out: &mut Vec<u8>, s: &str) {
    if needs_escape(s.as_bytes()) {
        // Writing into a `Vec` cannot fail, and a `str` always serialises.
        let _ = serde_json::to_writer(&mut *out, s);
    } else {
        out.reserve(s.len() + 2);
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    }
}

/// Appends `u` as a JSON string: its text (hex digits and `-`) never needs escaping, and is
/// copied as bytes, without the UTF-8 check of `as_str`.
#[inline]
pub fn uuid(out: &mut Vec<u8>, u: &crate::ids::UserUuid) {
    out.reserve(crate::ids::UserUuid::LEN + 2);
    out.push(b'"');
    out.extend_from_slice(u.as_bytes());
    out.push(b'"');
}

/// Appends an id's text (a [`crate::ids`] string id, whose parser admits only letters, digits and
/// `- _ . : /`) as a JSON string: never escaped, so copied without the escape check.
#[inline]
pub fn id(out: &mut Vec<u8>, id: &str) {
    debug_assert!(!needs_escape(id.as_bytes()), "an id that needs escaping");
    out.reserve(id.len() + 2);
    out.push(b'"');
    out.extend_from_slice(id.as_bytes());
    out.push(b'"');
}

/// Whether `bytes` holds a byte that `serde_json` escapes: a control character (below 0x20),
/// `"` or `\`.
fn needs_escape(bytes: &[u8]) -> bool {
    fn escaped(block: &[u8; BLOCK]) -> bool {
        // Non-short-circuit `|`: no branch per byte, so the block becomes vector compares.
        let any = block.iter().fold(0u8, |any, &b| {
            any | u8::from(b < 0x20) | u8::from(b == b'"') | u8::from(b == b'\\')
        });
        any != 0
    }
    any_block(bytes, b'x', escaped)
}

/// Bytes checked at a time by [`any_block`].
pub const BLOCK: usize = 32;

/// Whether `test` holds for a [`BLOCK`] of `bytes`; the last, short block is padded with
/// `filler` (a byte `test` never flags), so every byte goes through the vectorised test.
#[inline]
pub fn any_block(bytes: &[u8], filler: u8, test: impl Fn(&[u8; BLOCK]) -> bool) -> bool {
    let mut blocks = bytes.chunks_exact(BLOCK);
    for block in &mut blocks {
        if block.try_into().is_ok_and(&test) {
            return true;
        }
    }
    let rest = blocks.remainder();
    if rest.is_empty() {
        return false;
    }
    let mut last = [filler; BLOCK];
    last[..rest.len()].copy_from_slice(rest);
    test(&last)
}

/// Appends the decimal digits of `n` (how `serde_json` writes every unsigned integer).
#[inline]
pub fn uint(out: &mut Vec<u8>, n: u64) {
    let mut buf = [0u8; 20];
    let start = digits(&mut buf, n);
    out.extend_from_slice(&buf[start..]);
}

/// Writes the decimal digits of `n` at the end of `buf`, two at a time; returns where they
/// start.
#[inline]
pub fn digits(buf: &mut [u8; 20], mut n: u64) -> usize {
    const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
        2021222324252627282930313233343536373839\
        4041424344454647484950515253545556575859\
        6061626364656667686970717273747576777879\
        8081828384858687888990919293949596979899";
    let mut i = buf.len();
    while n >= 100 {
        // `n % 100` is below 100, so `2 * (n % 100) + 1` is inside `PAIRS`.
        let pair = 2 * (n % 100) as usize;
        n /= 100;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    }
    if n >= 10 {
        let pair = 2 * n as usize;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    } else {
        i -= 1;
        // `n` is below 10.
        buf[i] = b'0' + n as u8;
    }
    i
}

/// Appends `true` or `false`.
#[inline]
pub fn boolean(out: &mut Vec<u8>, b: bool) {
    out.extend_from_slice(if b { b"true" } else { b"false" });
}

/// Appends the number, or `null` for `None` (`serde_json` for an `Option` without
/// `skip_serializing_if`).
#[inline]
pub fn opt_uint(out: &mut Vec<u8>, n: Option<u64>) {
    match n {
        Some(n) => uint(out, n),
        None => out.extend_from_slice(b"null"),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Every ASCII byte repeated to fill a block exactly (no filler byte pads it), and around
    /// that: every byte of the string flagged (or none) and an even count of flagged bytes.
    #[test]
    fn strings_of_one_repeated_byte() {
        for b in 0u8..128 {
            for n in [1, 2, BLOCK - 1, BLOCK, BLOCK + 1, 2 * BLOCK] {
                let s = std::str::from_utf8(&[b]).unwrap().repeat(n);
                let mut out = Vec::new();
                string(&mut out, &s);
                assert_eq!(out, serde_json::to_vec(&s).unwrap(), "byte {b:#04x} x {n}");
            }
        }
    }

    proptest! {
        #[test]
        fn strings_are_escaped_as_serde_json_does(s in any::<String>(), long in any::<bool>()) {
            // Long strings cross the 32-byte blocks; short ones stay in the remainder.
            let s = if long { s.repeat(40) } else { s };
            let mut out = Vec::new();
            string(&mut out, &s);
            prop_assert_eq!(out, serde_json::to_vec(&s).unwrap());
        }

        #[test]
        fn every_ascii_byte_in_a_block(b in 0u8..128, at in 0usize..70) {
            let mut s = "x".repeat(70);
            s.replace_range(at..=at, std::str::from_utf8(&[b]).unwrap());
            let mut out = Vec::new();
            string(&mut out, &s);
            prop_assert_eq!(out, serde_json::to_vec(&s).unwrap());
        }

        #[test]
        fn numbers_are_written_as_serde_json_does(n in any::<u64>(), o in any::<Option<u32>>()) {
            let mut out = Vec::new();
            uint(&mut out, n);
            prop_assert_eq!(&out, &serde_json::to_vec(&n).unwrap());
            out.clear();
            opt_uint(&mut out, o.map(u64::from));
            prop_assert_eq!(out, serde_json::to_vec(&o).unwrap());
        }
    }

    #[test]
    fn edges() {
        for n in [
            0,
            9,
            10,
            11,
            99,
            100,
            101,
            999,
            1000,
            10_000_000_000_000,
            u64::MAX,
        ] {
            let mut out = Vec::new();
            uint(&mut out, n);
            assert_eq!(out, n.to_string().into_bytes());
        }
        let mut out = Vec::new();
        boolean(&mut out, true);
        boolean(&mut out, false);
        assert_eq!(out, b"truefalse");
    }
}
