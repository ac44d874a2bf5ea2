//! The error body of every non-2xx HTTP response and the codes shared with the error frame.
//!
//! `{"error": "<UPPER_SNAKE_CODE>", "message": "<human sentence>"}`. The reference web client
//! surfaces errors as `"<status>: <raw body>"` and matches substrings such as `409`,
//! `QUOTA_EXCEEDED` and `already exists`, so codes are stable and messages are meaningful.

use std::borrow::Cow;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A stable, machine-readable error code in `UPPER_SNAKE_CASE`.
///
/// An open set: the constants below are what this relay sends; decoding accepts any code so the
/// conformance suite can read another relay's errors.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ErrorCode(Cow<'static, str>);

macro_rules! codes {
    ($($(#[$doc:meta])* $name:ident = $status:literal;)*) => {
        impl ErrorCode {
            $(
                $(#[$doc])*
                pub const $name: Self = Self(Cow::Borrowed(stringify!($name)));
            )*

            /// Every code this relay can send, with its default HTTP status.
            pub const ALL: &'static [(Self, u16)] = &[$((Self::$name, $status),)*];
        }
    };
}

codes! {
    /// The request is malformed in a way no more specific code describes.
    BAD_REQUEST = 400;
    /// The body is not valid JSON or does not have the expected shape.
    INVALID_JSON = 400;
    /// A field has a value outside its allowed range or format (the message names the field).
    INVALID_FIELD = 400;
    /// A public key is not a valid curve point or has small order (registration).
    INVALID_KEY = 400;
    /// The request body exceeds the route's limit.
    BODY_TOO_LARGE = 413;
    /// Registration needs a proof-of-work nonce and none was sent.
    POW_REQUIRED = 400;
    /// The proof-of-work challenge is unknown, expired, already used or the nonce does not solve it.
    POW_INVALID = 400;
    /// The auth challenge is unknown, expired, already used or issued for another account.
    CHALLENGE_INVALID = 401;
    /// A signature does not verify.
    SIGNATURE_INVALID = 401;
    /// No bearer token was presented on a route that needs one.
    AUTH_REQUIRED = 401;
    /// The bearer token is not a well-formed JWT or its signature is wrong.
    TOKEN_INVALID = 401;
    /// The bearer token is well formed but its signature does not verify.
    TOKEN_SIGNATURE_INVALID = 401;
    /// The bearer token has expired.
    TOKEN_EXPIRED = 401;
    /// The bearer token was revoked by a newer login.
    TOKEN_REVOKED = 401;
    /// The WebSocket ticket is unknown, expired or already used.
    TICKET_INVALID = 401;
    /// The caller may not do this (for example post in a channel it does not own).
    FORBIDDEN = 403;
    /// The caller has used up its free quota (channel creation).
    QUOTA_EXCEEDED = 403;
    /// No such route.
    NOT_FOUND = 404;
    /// No account with that alias or uuid.
    USER_NOT_FOUND = 404;
    /// No such friendship, or it is not the caller's.
    FRIENDSHIP_NOT_FOUND = 404;
    /// No such vanity alias in the inventory.
    ALIAS_NOT_FOUND = 404;
    /// No such channel.
    CHANNEL_NOT_FOUND = 404;
    /// No such order, or it is not the caller's.
    ORDER_NOT_FOUND = 404;
    /// No such upload or media object, or it is not the caller's.
    MEDIA_NOT_FOUND = 404;
    /// The route exists but not with this method.
    METHOD_NOT_ALLOWED = 405;
    /// A key of the registration is already registered; the body carries the existing account.
    ALREADY_REGISTERED = 409;
    /// The thing to create already exists (for example a friend request).
    ALREADY_EXISTS = 409;
    /// The alias is held or owned by someone else.
    ALIAS_TAKEN = 409;
    /// The channel was just bought, or is being bought, by someone else.
    CHANNEL_TAKEN = 409;
    /// The channel is not listed for sale.
    NOT_FOR_SALE = 409;
    /// A compare-and-swap lost against a concurrent change.
    VERSION_CONFLICT = 409;
    /// The order is not confirmed (yet), or it was already used.
    ORDER_NOT_CONFIRMED = 409;
    /// The friendship is not in a state that allows this transition.
    INVALID_STATE = 409;
    /// The buyer already owns the channel.
    OWN_CHANNEL = 400;
    /// The request is over a rate limit.
    RATE_LIMITED = 429;
    /// The request body did not arrive in time (too slow, or stalled).
    BODY_TIMEOUT = 408;
    /// A push endpoint the relay will not connect to: not `https://`, a loopback, private,
    /// link-local or otherwise non-public address, a non-canonical numeric host, a local name,
    /// or a host outside the operator's allowlist.
    PUSH_ENDPOINT_FORBIDDEN = 400;
    /// The push endpoint's host name does not resolve to any address.
    PUSH_ENDPOINT_UNRESOLVABLE = 400;
    /// A webhook signature does not verify.
    WEBHOOK_SIGNATURE_INVALID = 401;
    /// The relay is shutting down and accepts no new connections or requests.
    SERVER_SHUTTING_DOWN = 503;
    /// TURN-only ICE servers were asked for and none is configured.
    TURN_UNAVAILABLE = 503;
    /// The relay's store could not commit the write; nothing was acknowledged.
    STORAGE_UNAVAILABLE = 503;
    // ---- codes used mostly in error frames on the WebSocket
    /// The frame is not JSON, has no `type`, or a field is malformed.
    BAD_FRAME = 400;
    /// The frame exceeds `MAX_FRAME_BYTES`.
    FRAME_TOO_LARGE = 413;
    /// The frame type is not one this relay accepts from clients.
    UNSUPPORTED_FRAME = 400;
    /// The payload exceeds its limit.
    PAYLOAD_TOO_LARGE = 413;
    /// The sender is not a member of the conversation, or `to` is not its other member.
    NOT_A_MEMBER = 403;
    /// The two accounts are not accepted contacts.
    NOT_A_CONTACT = 403;
    /// Only the author of a message may retract it.
    NOT_THE_AUTHOR = 403;
    /// The receipt names a sequence number that was never delivered to the caller.
    INVALID_RECEIPT = 400;
    /// The recipient's offline queue for this conversation is full (messages or bytes); the
    /// message was not accepted.
    QUEUE_FULL = 429;
    /// Everything queued for the recipient, over all conversations, is at its bound (messages
    /// or bytes); the message was not accepted.
    RECIPIENT_QUEUE_FULL = 429;
    /// The sender's undelivered messages, over all recipients, are at their bound; the message
    /// was not accepted.
    SENDER_QUEUE_FULL = 429;
    /// The relay holds as many undelivered bytes as it may; the message was not accepted.
    RELAY_QUEUE_FULL = 503;
    /// A call signal for a peer that is not connected; calls are never stored.
    PEER_OFFLINE = 404;
}

impl ErrorCode {
    /// A code received from a peer (any relay).
    pub fn other(code: impl Into<String>) -> Self {
        Self(Cow::Owned(code.into()))
    }

    /// The code as sent on the wire.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether the refusal says nothing against the request itself: the same request may
    /// succeed later (a rate limit, a full queue, a store or relay that is briefly
    /// unavailable). A client retries such a refusal after a pause instead of giving up; an
    /// unknown code is not transient.
    pub fn is_transient(&self) -> bool {
        [
            Self::RATE_LIMITED,
            Self::STORAGE_UNAVAILABLE,
            Self::SERVER_SHUTTING_DOWN,
            Self::QUEUE_FULL,
            Self::RECIPIENT_QUEUE_FULL,
            Self::SENDER_QUEUE_FULL,
            Self::RELAY_QUEUE_FULL,
        ]
        .contains(self)
    }

    /// The HTTP status this relay pairs with the code, or 400 for an unknown code.
    pub fn default_status(&self) -> u16 {
        Self::ALL
            .iter()
            .find(|(c, _)| c == self)
            .map_or(400, |(_, s)| *s)
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ErrorCode({})", self.0)
    }
}

impl Serialize for ErrorCode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for ErrorCode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(d)?;
        Ok(Self::ALL
            .iter()
            .find(|(c, _)| c.as_str() == raw)
            .map_or_else(|| Self::other(raw), |(c, _)| c.clone()))
    }
}

/// The body of every non-2xx HTTP response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// Stable machine-readable code.
    pub error: ErrorCode,
    /// One human sentence; never contains secrets or payloads.
    pub message: String,
}

impl ErrorBody {
    /// Builds an error body.
    pub fn new(error: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            error,
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_upper_snake_and_unique() {
        let mut seen = std::collections::BTreeSet::new();
        for (code, status) in ErrorCode::ALL {
            assert!(
                code.as_str()
                    .bytes()
                    .all(|b| b.is_ascii_uppercase() || b == b'_'),
                "{code}"
            );
            assert!(seen.insert(code.as_str()), "duplicate {code}");
            assert!((400..600).contains(status), "{code}");
        }
    }

    #[test]
    fn unknown_codes_survive_decoding() {
        let body: ErrorBody =
            serde_json::from_str(r#"{"error":"SOMETHING_ELSE","message":"m","extra":1}"#).unwrap();
        assert_eq!(body.error.as_str(), "SOMETHING_ELSE");
        assert_eq!(body.error.default_status(), 400);
        let known: ErrorBody =
            serde_json::from_str(r#"{"error":"RATE_LIMITED","message":"slow down"}"#).unwrap();
        assert_eq!(known.error, ErrorCode::RATE_LIMITED);
        assert_eq!(known.error.default_status(), 429);
    }
}
