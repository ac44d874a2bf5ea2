//! Registration, proof of work, authentication and WebSocket tickets (PROTOCOL.md §1.1).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};

use super::{PublicKeyB64, SignatureB64};
use crate::error::ErrorCode;
use crate::ids::{AliasId, UserUuid};
use crate::time::IsoTime;

/// A1 response: a proof-of-work challenge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PowChallengeResponse {
    /// Prefix to hash: solved when lowercase hex SHA-256(challenge_string + nonce) starts with `difficulty` zeros.
    pub challenge_string: String,
    /// Leading hex zeros required (nibbles, not bits).
    pub difficulty: u32,
    /// Seconds until the challenge expires.
    pub expires_in: u64,
}

/// A2 request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterRequest {
    /// Signing key.
    pub ed25519_public_key: PublicKeyB64,
    /// Key-agreement key.
    pub x25519_public_key: PublicKeyB64,
    /// Display name.
    pub nickname: String,
    /// Decimal nonce solving the PoW challenge; Android sends `""` when unsolved, decoded as `None`.
    #[serde(
        default,
        deserialize_with = "empty_string_as_none",
        skip_serializing_if = "Option::is_none"
    )]
    pub pow_nonce: Option<String>,
}

/// A2 success response (201).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterResponse {
    /// Account id.
    pub uuid: UserUuid,
    /// Assigned alias.
    pub alias_id: AliasId,
}

/// Which registered key a 409 matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RegisteredKey {
    /// The Ed25519 key is registered.
    Ed25519,
    /// The X25519 key is registered (to an account with another Ed25519 key).
    X25519,
}

/// A2 409 body: the error body plus the existing account, which clients use for recovery.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterConflict {
    /// [`ErrorCode::ALREADY_REGISTERED`].
    pub error: ErrorCode,
    /// Human sentence naming the key.
    pub message: String,
    /// The existing account.
    pub uuid: UserUuid,
    /// The existing account's alias.
    pub alias_id: AliasId,
    /// Which key matched.
    pub key: RegisteredKey,
}

/// A3 request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthChallengeRequest {
    /// The account.
    pub user_uuid: UserUuid,
}

/// A3 response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthChallengeResponse {
    /// The string to sign (its UTF-8 bytes).
    pub challenge: String,
    /// When it stops being accepted (iOS requires this field).
    pub expires_at: IsoTime,
}

/// A4 request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthVerifyRequest {
    /// The account.
    pub user_uuid: UserUuid,
    /// The exact string from A3.
    pub challenge: String,
    /// Ed25519 signature of the challenge's UTF-8 bytes.
    pub signature: SignatureB64,
}

/// A4 response.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthVerifyResponse {
    /// The JWT (Bearer).
    pub token: String,
    /// Seconds until it expires (iOS requires this field).
    pub expires_in: u64,
}

impl fmt::Debug for AuthVerifyResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthVerifyResponse")
            .field("token", &"<redacted>")
            .field("expires_in", &self.expires_in)
            .finish()
    }
}

/// A5 response: a single-use WebSocket ticket.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WsTicketResponse {
    /// URL-safe, single use.
    pub ticket: String,
    /// Seconds until it expires.
    pub expires_in: u64,
}

impl fmt::Debug for WsTicketResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WsTicketResponse")
            .field("ticket", &"<redacted>")
            .field("expires_in", &self.expires_in)
            .finish()
    }
}

/// The WebSocket URL's query: `user_uuid` + `ticket` or `token` (web, Android), or iOS's `uuid`
/// with the JWT in `Sec-WebSocket-Protocol: bearer,<jwt>` (see [`bearer_subprotocol`]).
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
pub struct WsConnectQuery {
    /// The account (web, Android).
    #[serde(default)]
    pub user_uuid: Option<String>,
    /// The account (iOS).
    #[serde(default)]
    pub uuid: Option<String>,
    /// A5 ticket.
    #[serde(default)]
    pub ticket: Option<String>,
    /// The JWT.
    #[serde(default)]
    pub token: Option<String>,
}

impl fmt::Debug for WsConnectQuery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WsConnectQuery")
            .field("user_uuid", &self.user_uuid)
            .field("uuid", &self.uuid)
            .field("ticket", &self.ticket.as_ref().map(|_| "<redacted>"))
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// The JWT carried in a `Sec-WebSocket-Protocol` header of the form `bearer,<jwt>` (iOS), if any.
pub fn bearer_subprotocol(header: &str) -> Option<&str> {
    let mut parts = header.split(',').map(str::trim);
    match (parts.next(), parts.next(), parts.next()) {
        (Some(scheme), Some(token), None)
            if scheme.eq_ignore_ascii_case("bearer") && !token.is_empty() =>
        {
            Some(token)
        }
        _ => None,
    }
}

fn empty_string_as_none<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(Option::<String>::deserialize(d)?.filter(|s| !s.is_empty()))
}
