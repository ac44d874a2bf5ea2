//! HTTP request and response bodies of every route (PROTOCOL.md §1), with the route paths.
//!
//! Field names are the reference clients' (snake_case, with the camelCase exceptions they use).
//! Decoding ignores unknown fields and treats an empty body as `{}` ([`decode_body`]), because the
//! Android SDK posts several routes with no body at all. Where clients disagree on a response shape,
//! the response carries every variant's fields (documented on the field) so each client finds its own.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::ErrorCode;
use crate::limits::MAX_JSON_BODY_BYTES;

mod auth;
mod calls;
mod channels;
mod conversations;
mod friends;
mod media;
mod push;
mod vanity;

pub use self::auth::*;
pub use self::calls::*;
pub use self::channels::*;
pub use self::conversations::*;
pub use self::friends::*;
pub use self::media::*;
pub use self::push::*;
pub use self::vanity::*;

/// Every route path, with `{name}` placeholders for path parameters.
pub mod paths {
    /// A1 (POST; iOS uses GET).
    pub const POW_CHALLENGE: &str = "/api/v1/pow/challenge";
    /// A2.
    pub const REGISTER: &str = "/api/v1/register";
    /// A3.
    pub const AUTH_CHALLENGE: &str = "/api/v1/auth/challenge";
    /// A4.
    pub const AUTH_VERIFY: &str = "/api/v1/auth/verify";
    /// A5.
    pub const WS_TICKET: &str = "/api/v1/ws/ticket";
    /// The WebSocket endpoint.
    pub const WS: &str = "/ws";
    /// F1.
    pub const FRIENDS: &str = "/api/v1/friends";
    /// F2.
    pub const FRIEND_REQUEST: &str = "/api/v1/friends/request";
    /// F3 (PUT; web and Android).
    pub const FRIEND_ACCEPT: &str = "/api/v1/friends/{friendship_id}/accept";
    /// F3 (POST with `{friendship_id}`; iOS).
    pub const FRIEND_ACCEPT_BODY: &str = "/api/v1/friends/accept";
    /// F4.
    pub const FRIEND_REJECT: &str = "/api/v1/friends/{friendship_id}/reject";
    /// F5.
    pub const USER: &str = "/api/v1/users/{alias_id}";
    /// C1.
    pub const ACTIVE_CONVERSATIONS: &str = "/api/v1/conversations/active";
    /// C2.
    pub const STORAGE_ESTIMATE: &str = "/api/v1/storage/estimate";
    /// CH1 (`?q=`).
    pub const CHANNEL_SEARCH: &str = "/api/v1/channels/search";
    /// CH2.
    pub const CHANNELS_MINE: &str = "/api/v1/channels/mine";
    /// CH3.
    pub const CHANNEL: &str = "/api/v1/channels/{channel_id}";
    /// CH4.
    pub const CHANNELS: &str = "/api/v1/channels";
    /// CH5 (POST) and CH6 (DELETE).
    pub const CHANNEL_SUBSCRIBE: &str = "/api/v1/channels/{channel_id}/subscribe";
    /// CH7 (POST) and CH8 (GET).
    pub const CHANNEL_POSTS: &str = "/api/v1/channels/{channel_id}/posts";
    /// CH9 (web and Android).
    pub const LIST_CHANNEL: &str = "/api/v1/vanity/list-channel";
    /// CH9 (PUT; iOS).
    pub const CHANNEL_FOR_SALE: &str = "/api/v1/channels/{channel_id}/forsale";
    /// CH10.
    pub const CHANNEL_BUY: &str = "/api/v1/channels/{channel_id}/buy";
    /// CH11.
    pub const CHANNEL_QUOTA_BUY: &str = "/api/v1/channels/quota/buy";
    /// V1 (`?q=`).
    pub const VANITY_SEARCH: &str = "/api/v1/vanity/search";
    /// V2.
    pub const VANITY_PURCHASE: &str = "/api/v1/vanity/purchase";
    /// V3.
    pub const VANITY_BIND: &str = "/api/v1/vanity/bind";
    /// V4 (deprecated).
    pub const VANITY_RESERVE: &str = "/api/v1/vanity/reserve";
    /// V5 (deprecated; also polled for channel and quota orders).
    pub const ORDER_STATUS: &str = "/api/v1/vanity/order/{order_id}/status";
    /// The payment processor's webhook (our stand-in's contract, see [`super::PaymentWebhook`]).
    pub const PAYMENT_WEBHOOK: &str = "/api/v1/payments/webhook";
    /// M1.
    pub const MEDIA_INIT: &str = "/api/v1/media/upload-parts/init";
    /// M2 (`?mediaKey=&partNumber=`).
    pub const MEDIA_CHUNK: &str = "/api/v1/media/upload-parts/{upload_id}/chunk";
    /// M3.
    pub const MEDIA_COMPLETE: &str = "/api/v1/media/upload-parts/{upload_id}/complete";
    /// M4 (`?key=`).
    pub const MEDIA_DOWNLOAD: &str = "/api/v1/media/download";
    /// P1.
    pub const PUSH_VAPID_KEY: &str = "/api/v1/push/vapid-key";
    /// P2.
    pub const PUSH_SUBSCRIBE: &str = "/api/v1/push/subscribe";
    /// P3.
    pub const PUSH_REGISTER: &str = "/api/v1/push/register";
    /// P4.
    pub const PUSH_DISABLE: &str = "/api/v1/push/disable";
    /// K1 (`?mode=relay`).
    pub const ICE_CONFIG: &str = "/api/v1/calls/ice-config";

    /// `template` (one of the paths above) with its `{name}` placeholder replaced by `value`:
    /// `with(USER, "u1234")` is `/api/v1/users/u1234`. A template without a placeholder comes
    /// back unchanged. The value is inserted as given (path parameters here are ids and
    /// aliases, never escaped).
    pub fn with(template: &str, value: impl std::fmt::Display) -> String {
        match (template.find('{'), template.find('}')) {
            (Some(open), Some(close)) if open < close => {
                format!("{}{value}{}", &template[..open], &template[close + 1..])
            }
            _ => template.to_owned(),
        }
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn a_placeholder_is_filled_and_a_plain_path_kept() {
            assert_eq!(
                super::with(super::FRIEND_ACCEPT, 7),
                "/api/v1/friends/7/accept"
            );
            assert_eq!(super::with(super::USER, "u1"), "/api/v1/users/u1");
            assert_eq!(super::with(super::FRIENDS, "x"), super::FRIENDS);
        }
    }
}

/// Why a request body was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    /// The body is larger than the route allows.
    #[error("body is {len} bytes, the limit is {max} bytes")]
    TooLarge {
        /// Size of the body.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Not JSON, or not the expected shape; the reason names the field.
    #[error("invalid JSON body: {reason}")]
    Invalid {
        /// What the decoder said.
        reason: String,
    },
}

impl BodyError {
    /// The error code a relay answers this with.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::TooLarge { .. } => ErrorCode::BODY_TOO_LARGE,
            Self::Invalid { .. } => ErrorCode::INVALID_JSON,
        }
    }
}

/// Decodes a JSON request body, treating an empty (or all-whitespace) body as `{}`. Every
/// request body is an object: anything else is refused, even where serde would read a struct
/// from an array of its fields in order.
pub fn decode_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, BodyError> {
    if body.len() > MAX_JSON_BODY_BYTES {
        return Err(BodyError::TooLarge {
            len: body.len(),
            max: MAX_JSON_BODY_BYTES,
        });
    }
    let body = match body.iter().find(|b| !b.is_ascii_whitespace()) {
        None => b"{}".as_slice(),
        Some(b'{') => body,
        Some(_) => {
            return Err(BodyError::Invalid {
                reason: "the body must be a JSON object".to_owned(),
            });
        }
    };
    serde_json::from_slice(body).map_err(|e| BodyError::Invalid {
        reason: e.to_string(),
    })
}

/// A body with no fields, for routes that take none (`{}`, or nothing at all).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Empty {}

/// `{"ok": true}`: the response of routes whose body clients ignore.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OkResponse {
    /// Always `true` on a 2xx.
    pub ok: bool,
}

impl OkResponse {
    /// `{"ok": true}`.
    pub const OK: Self = Self { ok: true };
}

fn strict_b64<const N: usize>(what: &'static str, text: &str) -> Result<[u8; N], String> {
    let bytes = STANDARD
        .decode(text)
        .map_err(|_| format!("{what} is not standard padded base64"))?;
    if STANDARD.encode(&bytes) != text {
        return Err(format!("{what} is not canonical base64"));
    }
    <[u8; N]>::try_from(bytes.as_slice())
        .map_err(|_| format!("{what} must decode to {N} bytes, got {}", bytes.len()))
}

/// A 32-byte public key (Ed25519 or X25519) as standard padded base64.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PublicKeyB64(pub [u8; 32]);

impl PublicKeyB64 {
    /// Decodes strictly: standard alphabet, padded, canonical, exactly 32 bytes.
    pub fn parse(text: &str) -> Result<Self, String> {
        strict_b64("public key", text).map(Self)
    }

    /// The base64 text.
    pub fn to_b64(&self) -> String {
        STANDARD.encode(self.0)
    }
}

impl fmt::Debug for PublicKeyB64 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKeyB64({})", self.to_b64())
    }
}

impl Serialize for PublicKeyB64 {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_b64())
    }
}

impl<'de> Deserialize<'de> for PublicKeyB64 {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Self::parse(&String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

/// A 64-byte Ed25519 signature as standard padded base64.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SignatureB64(pub [u8; 64]);

impl SignatureB64 {
    /// Decodes strictly: standard alphabet, padded, canonical, exactly 64 bytes.
    pub fn parse(text: &str) -> Result<Self, String> {
        strict_b64("signature", text).map(Self)
    }

    /// The base64 text.
    pub fn to_b64(&self) -> String {
        STANDARD.encode(self.0)
    }
}

impl fmt::Debug for SignatureB64 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SignatureB64({})", self.to_b64())
    }
}

impl Serialize for SignatureB64 {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_b64())
    }
}

impl<'de> Deserialize<'de> for SignatureB64 {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Self::parse(&String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_bodies_decode_as_empty_objects() {
        assert_eq!(decode_body::<Empty>(b"").unwrap(), Empty {});
        assert_eq!(decode_body::<Empty>(b" \n").unwrap(), Empty {});
        assert_eq!(decode_body::<Empty>(b"{\"x\":1}").unwrap(), Empty {});
        for not_an_object in [&b"[]"[..], b" [\"n\"]", b"\"n\"", b"7", b"null"] {
            let e = decode_body::<CreateChannelRequest>(not_an_object).unwrap_err();
            assert_eq!(e.code(), ErrorCode::INVALID_JSON, "{e}");
        }
        let create: CreateChannelRequest = decode_body(br#"{"name":"n"}"#).unwrap();
        assert!(create.is_public);
        assert_eq!(
            decode_body::<Empty>(b"[").unwrap_err().code(),
            ErrorCode::INVALID_JSON
        );
        let big = vec![b' '; MAX_JSON_BODY_BYTES + 1];
        assert_eq!(
            decode_body::<Empty>(&big).unwrap_err().code(),
            ErrorCode::BODY_TOO_LARGE
        );
    }

    #[test]
    fn keys_are_strict_base64() {
        let ok = "fC5586FwH7Koaiwko/34Y0t6rYCIbAwKUm1E0j/o4Zo=";
        assert_eq!(PublicKeyB64::parse(ok).unwrap().to_b64(), ok);
        assert!(
            PublicKeyB64::parse("fC5586FwH7Koaiwko/34Y0t6rYCIbAwKUm1E0j/o4Zo").is_err(),
            "unpadded"
        );
        assert!(
            PublicKeyB64::parse("fC5586FwH7Koaiwko_34Y0t6rYCIbAwKUm1E0j_o4Zo=").is_err(),
            "url alphabet"
        );
        assert!(
            PublicKeyB64::parse("fC5586FwH7Koaiwko/34Y0t6rYCIbAwKUm1E0j/o4Zr=").is_err(),
            "non-canonical"
        );
        assert!(PublicKeyB64::parse("AAAA").is_err(), "short");
    }

    #[test]
    fn android_empty_pow_nonce_is_none() {
        let body = r#"{"ed25519_public_key":"fC5586FwH7Koaiwko/34Y0t6rYCIbAwKUm1E0j/o4Zo=","x25519_public_key":"NJiwxcmC9F8mDvwpB5BKRkxowvlTRypDqFrNCtPulgM=","nickname":"n","pow_nonce":""}"#;
        let req: RegisterRequest = decode_body(body.as_bytes()).unwrap();
        assert_eq!(req.pow_nonce, None);
    }

    #[test]
    fn bearer_subprotocol_is_parsed() {
        assert_eq!(
            bearer_subprotocol("bearer,abc.def.ghi"),
            Some("abc.def.ghi")
        );
        assert_eq!(bearer_subprotocol("Bearer, abc"), Some("abc"));
        assert_eq!(bearer_subprotocol("bearer"), None);
        assert_eq!(bearer_subprotocol("chat,abc"), None);
        assert_eq!(bearer_subprotocol("bearer,a,b"), None);
    }

    #[test]
    fn ice_urls_accept_a_string() {
        let s: IceServer = serde_json::from_str(r#"{"urls":"stun:x"}"#).unwrap();
        assert_eq!(s.urls, vec!["stun:x".to_owned()]);
    }

    #[test]
    fn pending_friend_has_empty_conversation_id() {
        let json = r#"{"friendship_id":1,"alias_id":"u12345678","nickname":"n","status":"pending","direction":"sent","conversation_id":"","x25519_public_key":"NJiwxcmC9F8mDvwpB5BKRkxowvlTRypDqFrNCtPulgM=","ed25519_public_key":"fC5586FwH7Koaiwko/34Y0t6rYCIbAwKUm1E0j/o4Zo=","created_at":"2026-01-01T00:00:00.000Z"}"#;
        let f: FriendProfile = serde_json::from_str(json).unwrap();
        assert_eq!(f.conversation_id, None);
        assert_eq!(serde_json::to_string(&f).unwrap(), json);
        let absent = json.replace(r#""conversation_id":"","#, "");
        assert_eq!(
            serde_json::from_str::<FriendProfile>(&absent)
                .unwrap()
                .conversation_id,
            None
        );
    }
}
