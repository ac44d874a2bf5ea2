//! `TokenKeys` at its edges: the claims it writes, the longest token it reads, the instant a
//! token expires.

use relay_core::limits::MAX_TOKEN_BYTES;
use relay_core::token::{TokenError, TokenKeys};

const NOW: u64 = 1_800_000_123_456;

/// `iat` and `exp` are whole seconds: the issue instant's, and the instant `ttl` later.
#[test]
fn claims_carry_the_issue_and_expiry_seconds() {
    let keys = TokenKeys::from_seed([3; 32]);
    let jwt = keys.issue("someone", "jti-7", NOW, 90_000).unwrap();
    let c = keys.verify(&jwt, NOW).unwrap();
    assert_eq!(
        (c.sub.as_str(), c.jti.as_str(), c.iat, c.exp),
        ("someone", "jti-7", 1_800_000_123, 1_800_000_213)
    );
    // Valid until the last millisecond before `exp`, expired from `exp` on.
    assert!(keys.verify(&jwt, 1_800_000_212_999).is_ok());
    assert_eq!(
        keys.verify(&jwt, 1_800_000_213_000),
        Err(TokenError::Expired)
    );
}

/// A genuine token of `len` bytes (its subject padded to fit), if the encoding can reach
/// exactly that length.
fn token_of_len(keys: &TokenKeys, len: usize) -> Option<String> {
    (0..len).find_map(|pad| {
        let jwt = keys.issue(&"s".repeat(pad), "jti", NOW, 60_000).unwrap();
        (jwt.len() == len).then_some(jwt)
    })
}

/// A token of exactly `MAX_TOKEN_BYTES` is read; one byte more is refused unread, however
/// genuine.
#[test]
fn the_longest_token_read_is_max_token_bytes() {
    let keys = TokenKeys::from_seed([4; 32]);
    let longest = token_of_len(&keys, MAX_TOKEN_BYTES).expect("a token of exactly the limit");
    assert_eq!(keys.verify(&longest, NOW).unwrap().jti, "jti");
    let over = (MAX_TOKEN_BYTES + 1..MAX_TOKEN_BYTES + 8)
        .find_map(|len| token_of_len(&keys, len))
        .expect("a token just over the limit");
    assert_eq!(keys.verify(&over, NOW), Err(TokenError::Malformed));
}

/// Each refusal has its own stable code, the one its 401 carries on the wire, and the keys
/// never print their secret.
#[test]
fn token_errors_have_stable_codes_and_keys_print_nothing() {
    let codes = [
        (TokenError::Missing, "AUTH_REQUIRED"),
        (TokenError::Malformed, "TOKEN_INVALID"),
        (TokenError::BadSignature, "TOKEN_SIGNATURE_INVALID"),
        (TokenError::Expired, "TOKEN_EXPIRED"),
        (TokenError::Revoked, "TOKEN_REVOKED"),
    ];
    for (e, code) in codes {
        assert_eq!(e.code().as_str(), code);
    }
    let keys = TokenKeys::from_seed([5; 32]);
    assert_eq!(format!("{keys:?}"), "TokenKeys { .. }");
}
