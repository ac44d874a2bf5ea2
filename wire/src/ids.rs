//! Identifier newtypes.
//!
//! Every identifier that crosses the wire has its own type, parsed once at the edge
//! ("parse, don't validate"). Parsing is deliberately liberal enough to accept every format
//! the reference clients and a third-party relay produce (PROTOCOL.md §5.7), and strict enough
//! that an id can be used in a URL path, a log field or a storage key without escaping.
//!
//! An id is immutable once parsed, so the textual ones share their bytes (`Arc<str>`: a clone
//! is a reference count, not an allocation) and a [`UserUuid`] is stored inline; the relay
//! copies ids into its indexes, rows and outgoing frames on every message.
//!
//! String ids deserialize through [`std::str::FromStr`], so a malformed id inside a frame or a body is a
//! decode error naming the id kind, never a value that travels further.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Why a string is not a valid identifier.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    /// The value is empty.
    #[error("{kind} must not be empty")]
    Empty {
        /// Which identifier kind was being parsed.
        kind: &'static str,
    },
    /// The value is longer than the kind allows.
    #[error("{kind} is {len} bytes long, the limit is {max}")]
    TooLong {
        /// Which identifier kind was being parsed.
        kind: &'static str,
        /// Length of the rejected value in bytes.
        len: usize,
        /// The limit for this kind.
        max: usize,
    },
    /// The value contains a character outside the kind's alphabet.
    #[error("{kind} contains a character that is not allowed ({allowed})")]
    BadChar {
        /// Which identifier kind was being parsed.
        kind: &'static str,
        /// Human description of the alphabet.
        allowed: &'static str,
    },
    /// The value does not have the kind's shape (for example a UUID).
    #[error("{kind} is malformed: expected {expected}")]
    Malformed {
        /// Which identifier kind was being parsed.
        kind: &'static str,
        /// Human description of the expected shape.
        expected: &'static str,
    },
}

fn check_token(
    kind: &'static str,
    value: &str,
    max: usize,
    allowed: &'static str,
    ok: impl Fn(u8) -> bool,
) -> Result<(), IdError> {
    if value.is_empty() {
        return Err(IdError::Empty { kind });
    }
    if value.len() > max {
        return Err(IdError::TooLong {
            kind,
            len: value.len(),
            max,
        });
    }
    if !value.bytes().all(ok) {
        return Err(IdError::BadChar { kind, allowed });
    }
    Ok(())
}

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':')
}

macro_rules! string_id {
    (
        $(#[$meta:meta])*
        $name:ident, kind = $kind:literal, max = $max:expr, allowed = $allowed:literal, ok = $ok:expr
    ) => {
        $(#[$meta])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(Arc<str>);

        impl $name {
            /// Longest accepted value, in bytes.
            pub const MAX_LEN: usize = $max;

            /// Parses and validates a value received from a peer.
            pub fn parse(value: &str) -> Result<Self, IdError> {
                check_token($kind, value, Self::MAX_LEN, $allowed, $ok)?;
                Ok(Self(Arc::from(value)))
            }

            /// The id as it appears on the wire.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// Consumes the id, returning the wire string.
            pub fn into_string(self) -> String {
                String::from(&*self.0)
            }
        }

        impl FromStr for $name {
            type Err = IdError;
            fn from_str(s: &str) -> Result<Self, IdError> {
                Self::parse(s)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($name), self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let raw = std::borrow::Cow::<'de, str>::deserialize(d)?;
                Self::parse(&raw).map_err(serde::de::Error::custom)
            }
        }
    };
}

string_id!(
    /// A textual account handle (`u` + 8 digits when assigned, or a vanity alias such as `88888888`).
    ///
    /// 3 to 32 characters of `[a-z0-9_]`: the union of what the reference clients' validators accept
    /// (PROTOCOL.md §5.7). Upper case is rejected rather than folded so two spellings never name one account.
    AliasId, kind = "alias id", max = 32, allowed = "a-z 0-9 _", ok = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'
);

impl AliasId {
    /// Shortest accepted alias, in characters.
    pub const MIN_LEN: usize = 3;

    /// Parses an alias id, also enforcing [`AliasId::MIN_LEN`].
    pub fn parse_alias(value: &str) -> Result<Self, IdError> {
        let id = Self::parse(value)?;
        if id.0.len() < Self::MIN_LEN {
            return Err(IdError::Malformed {
                kind: "alias id",
                expected: "at least 3 characters",
            });
        }
        Ok(id)
    }
}

string_id!(
    /// A conversation id: opaque, assigned by the relay when a friendship is accepted.
    ///
    /// Both parties salt their session key with its exact bytes, so it is never normalised.
    ConvId, kind = "conversation id", max = 128, allowed = "A-Z a-z 0-9 - _ . :", ok = is_token_byte
);

string_id!(
    /// A message id chosen by the sender (`local-<base36>` on the web, a UUID on Android and iOS).
    ///
    /// It is the relay's idempotency key for a message.
    MessageId, kind = "message id", max = 128, allowed = "A-Z a-z 0-9 - _ . :", ok = is_token_byte
);

string_id!(
    /// A channel id, assigned by the relay.
    ChannelId, kind = "channel id", max = 64, allowed = "A-Z a-z 0-9 - _ . :", ok = is_token_byte
);

string_id!(
    /// A channel post id, assigned by the relay.
    PostId, kind = "post id", max = 64, allowed = "A-Z a-z 0-9 - _ . :", ok = is_token_byte
);

string_id!(
    /// A payment order id (vanity purchase, channel trade or quota buy), assigned by the relay.
    OrderId, kind = "order id", max = 64, allowed = "A-Z a-z 0-9 - _ . :", ok = is_token_byte
);

string_id!(
    /// A call id chosen by the caller (a UUID in every reference client).
    CallId, kind = "call id", max = 128, allowed = "A-Z a-z 0-9 - _ . :", ok = is_token_byte
);

string_id!(
    /// A media object key, assigned by the relay at upload init; it is what goes into `[img]<key>`.
    ///
    /// `/` is allowed (object-store keys); `|`, `[` and `]` are not, because they delimit the
    /// media content strings.
    MediaKey, kind = "media key", max = 128, allowed = "A-Z a-z 0-9 - _ . : /", ok = |b: u8| is_token_byte(b) || b == b'/'
);

string_id!(
    /// A multipart upload id, assigned by the relay at upload init.
    UploadId, kind = "upload id", max = 128, allowed = "A-Z a-z 0-9 - _ . :", ok = is_token_byte
);

/// The relay's account id: a 36-character UUID (`8-4-4-4-12` hex), kept in lower case.
///
/// Clients send it back as `user_uuid`; parsing accepts either case and normalises to lower case.
///
/// Ordered as its text is (byte by byte); two ids almost always differ in their first eight
/// characters, which are compared as one integer before the rest (it is the first part of most
/// of the relay's map keys).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct UserUuid([u8; Self::LEN]);

impl PartialOrd for UserUuid {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for UserUuid {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        // Big-endian: the integers order as the bytes do.
        let head = |u: &Self| u.0.first_chunk::<8>().map_or(0, |h| u64::from_be_bytes(*h));
        head(self)
            .cmp(&head(other))
            .then_with(|| self.0.cmp(&other.0))
    }
}

impl UserUuid {
    /// Parses a UUID in `8-4-4-4-12` hex form (any case), normalising to lower case.
    pub fn parse(value: &str) -> Result<Self, IdError> {
        const KIND: &str = "user uuid";
        const EXPECTED: &str = "36 characters, 8-4-4-4-12 hex digits";
        if value.is_empty() {
            return Err(IdError::Empty { kind: KIND });
        }
        let bytes = value.as_bytes();
        let shaped = bytes.len() == 36
            && bytes.iter().enumerate().all(|(i, b)| match i {
                8 | 13 | 18 | 23 => *b == b'-',
                _ => b.is_ascii_hexdigit(),
            });
        if !shaped {
            return Err(IdError::Malformed {
                kind: KIND,
                expected: EXPECTED,
            });
        }
        let mut out = [0; Self::LEN];
        for (o, b) in out.iter_mut().zip(bytes) {
            *o = b.to_ascii_lowercase();
        }
        Ok(Self(out))
    }

    /// Formats 16 bytes (for example from a seeded RNG) as a version-4 UUID.
    pub fn from_random_bytes(mut bytes: [u8; 16]) -> Self {
        bytes[6] = (bytes[6] & 0x0f) | 0x40;
        bytes[8] = (bytes[8] & 0x3f) | 0x80;
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut out = [b'-'; Self::LEN];
        let digits = (0..Self::LEN).filter(|i| !matches!(i, 8 | 13 | 18 | 23));
        for (i, nibble) in digits.zip(bytes.iter().flat_map(|b| [b >> 4, b & 0x0f])) {
            out[i] = HEX[usize::from(nibble)];
        }
        Self(out)
    }

    /// Length of the textual form, in bytes.
    pub const LEN: usize = 36;

    /// The UUID's text as bytes (ASCII hex digits and `-`): for writers that take bytes, without
    /// the UTF-8 check of [`as_str`](Self::as_str).
    pub fn as_bytes(&self) -> &[u8; Self::LEN] {
        &self.0
    }

    /// The UUID as it appears on the wire.
    pub fn as_str(&self) -> &str {
        // Only ASCII hex digits and `-` are ever stored (see `parse`, `from_random_bytes`).
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl FromStr for UserUuid {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, IdError> {
        Self::parse(s)
    }
}

impl fmt::Display for UserUuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for UserUuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UserUuid({:?})", self.as_str())
    }
}

impl Serialize for UserUuid {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for UserUuid {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = std::borrow::Cow::<'de, str>::deserialize(d)?;
        Self::parse(&raw).map_err(serde::de::Error::custom)
    }
}

/// A per-conversation sequence number assigned by the relay: strictly increasing from 1, gap-free.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Seq(pub u64);

impl Seq {
    /// The first sequence number of a conversation.
    pub const FIRST: Self = Self(1);

    /// The raw number.
    pub fn get(self) -> u64 {
        self.0
    }

    /// The following sequence number.
    #[must_use]
    pub fn next(self) -> Self {
        Self(self.0.saturating_add(1))
    }
}

impl fmt::Display for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Debug for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Seq({})", self.0)
    }
}

/// A friendship id: an integer assigned by the relay (F1-F4).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct FriendshipId(pub u64);

impl FriendshipId {
    /// Parses the decimal form used in URL paths (`/friends/{id}/accept`).
    pub fn parse(value: &str) -> Result<Self, IdError> {
        const KIND: &str = "friendship id";
        if value.is_empty() {
            return Err(IdError::Empty { kind: KIND });
        }
        if value.len() > 20 || !value.bytes().all(|b| b.is_ascii_digit()) {
            return Err(IdError::Malformed {
                kind: KIND,
                expected: "a decimal integer",
            });
        }
        value.parse().map(Self).map_err(|_| IdError::Malformed {
            kind: KIND,
            expected: "a decimal integer below 2^64",
        })
    }

    /// The raw number.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for FriendshipId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Debug for FriendshipId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FriendshipId({})", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alias_ids_follow_the_union_of_client_rules() {
        for ok in ["u12345678", "88888888", "crypto", "a_b", "uel21oqs6"] {
            assert!(AliasId::parse_alias(ok).is_ok(), "{ok}");
        }
        assert_eq!(
            AliasId::parse_alias("ab").unwrap_err().to_string(),
            "alias id is malformed: expected at least 3 characters"
        );
        assert!(matches!(
            AliasId::parse("U123"),
            Err(IdError::BadChar { .. })
        ));
        assert!(matches!(
            AliasId::parse("a b"),
            Err(IdError::BadChar { .. })
        ));
        assert!(matches!(AliasId::parse(""), Err(IdError::Empty { .. })));
        assert!(matches!(
            AliasId::parse(&"a".repeat(33)),
            Err(IdError::TooLong {
                len: 33,
                max: 32,
                ..
            })
        ));
    }

    #[test]
    fn uuids_are_normalised_to_lower_case() {
        let u = UserUuid::parse("0F8FAD5B-D9CB-469F-A165-70867728950E").unwrap();
        assert_eq!(u.as_str(), "0f8fad5b-d9cb-469f-a165-70867728950e");
        for bad in [
            "",
            "0f8fad5b-d9cb-469f-a165-70867728950",
            "0f8fad5bd9cb-469f-a165-70867728950e0",
            "zf8fad5b-d9cb-469f-a165-70867728950e",
        ] {
            assert!(UserUuid::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn random_bytes_make_a_v4_uuid() {
        let u = UserUuid::from_random_bytes([0xff; 16]);
        assert_eq!(u.as_str(), "ffffffff-ffff-4fff-bfff-ffffffffffff");
        assert_eq!(UserUuid::parse(u.as_str()).unwrap(), u);
        let bytes: [u8; 16] = std::array::from_fn(|i| u8::try_from(i).unwrap());
        let u = UserUuid::from_random_bytes(bytes);
        assert_eq!(u.as_str(), "00010203-0405-4607-8809-0a0b0c0d0e0f");
        // ordered as their text
        let a = UserUuid::parse("0a000000-0000-4000-8000-000000000000").unwrap();
        let b = UserUuid::parse("a0000000-0000-4000-8000-000000000000").unwrap();
        assert!(a < b && a.as_str() < b.as_str());
    }

    #[test]
    fn media_keys_allow_slashes_but_not_content_delimiters() {
        assert!(MediaKey::parse("media/abc123").is_ok());
        assert!(MediaKey::parse("a|b").is_err());
        assert!(MediaKey::parse("[img]abc").is_err());
    }

    #[test]
    fn friendship_ids_parse_from_paths() {
        assert_eq!(FriendshipId::parse("42").unwrap(), FriendshipId(42));
        assert!(FriendshipId::parse("-1").is_err());
        assert!(FriendshipId::parse("99999999999999999999").is_err());
        assert!(FriendshipId::parse("").is_err());
    }

    #[test]
    fn ids_deserialize_with_a_named_error() {
        let err = serde_json::from_str::<ConvId>("\"a b\"")
            .unwrap_err()
            .to_string();
        assert!(err.contains("conversation id"), "{err}");
    }

    proptest::proptest! {
        /// The comparison orders and equates user uuids exactly as their text, including pairs
        /// that differ in one character anywhere and pairs equal in their first characters.
        #[test]
        fn user_uuids_order_as_their_text(
            a in proptest::array::uniform16(0u8..),
            b in proptest::array::uniform16(0u8..),
            at in 0usize..36,
            digit in 0usize..16,
        ) {
            let x = UserUuid::from_random_bytes(a);
            let far = UserUuid::from_random_bytes(b);
            let mut text = x.as_str().as_bytes().to_vec();
            if text[at] != b'-' {
                text[at] = b"0123456789abcdef"[digit];
            }
            let near = UserUuid::parse(std::str::from_utf8(&text).unwrap()).unwrap();
            // Equal up to a point (inside and past the first eight characters), then unlike.
            let spliced = |from: usize| {
                let mut text = x.as_str().as_bytes().to_vec();
                text[from..].copy_from_slice(&far.as_str().as_bytes()[from..]);
                UserUuid::parse(std::str::from_utf8(&text).unwrap()).unwrap()
            };
            let (second, third) = (spliced(4), spliced(16));
            for y in [&x, &far, &near, &second, &third] {
                proptest::prop_assert_eq!(x.cmp(y), x.as_str().cmp(y.as_str()));
                proptest::prop_assert_eq!(y.cmp(&x), y.as_str().cmp(x.as_str()));
                proptest::prop_assert_eq!(x == *y, x.as_str() == y.as_str());
                proptest::prop_assert_eq!(x.as_bytes().as_slice(), x.as_str().as_bytes());
            }
        }
    }
}
