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
use crate::ids::{
    AliasId, ChannelId, ConvId, FriendshipId, MediaKey, OrderId, PostId, UploadId, UserUuid,
};
use crate::limits::MAX_JSON_BODY_BYTES;
use crate::time::IsoTime;

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

/// Decodes a JSON request body, treating an empty (or all-whitespace) body as `{}`.
pub fn decode_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, BodyError> {
    if body.len() > MAX_JSON_BODY_BYTES {
        return Err(BodyError::TooLarge {
            len: body.len(),
            max: MAX_JSON_BODY_BYTES,
        });
    }
    let body = if body.iter().all(u8::is_ascii_whitespace) {
        b"{}".as_slice()
    } else {
        body
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

fn empty_string_as_none<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(Option::<String>::deserialize(d)?.filter(|s| !s.is_empty()))
}

// ---------------------------------------------------------------------------------------------
// 1.1 registration, proof of work, authentication

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

// ---------------------------------------------------------------------------------------------
// 1.2 users and friends

/// A friendship's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FriendStatus {
    /// Requested, not yet answered.
    Pending,
    /// Both are contacts; a conversation exists.
    Accepted,
    /// The recipient declined.
    Rejected,
}

/// Who sent the friend request, from the caller's point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FriendDirection {
    /// The caller sent it.
    Sent,
    /// The caller received it.
    Received,
}

fn conv_id_or_empty<S: Serializer>(id: &Option<ConvId>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(id.as_ref().map_or("", ConvId::as_str))
}

fn conv_id_from_empty<'de, D: Deserializer<'de>>(d: D) -> Result<Option<ConvId>, D::Error> {
    match Option::<String>::deserialize(d)? {
        None => Ok(None),
        Some(s) if s.is_empty() => Ok(None),
        Some(s) => ConvId::parse(&s)
            .map(Some)
            .map_err(serde::de::Error::custom),
    }
}

/// F1 element: one contact as the caller sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FriendProfile {
    /// The friendship.
    pub friendship_id: FriendshipId,
    /// The other account's alias.
    pub alias_id: AliasId,
    /// The other account's nickname.
    pub nickname: String,
    /// State.
    pub status: FriendStatus,
    /// Who asked.
    pub direction: FriendDirection,
    /// The conversation once accepted; encoded as `""` before (absent, null and `""` decode to `None`).
    #[serde(
        default,
        serialize_with = "conv_id_or_empty",
        deserialize_with = "conv_id_from_empty"
    )]
    pub conversation_id: Option<ConvId>,
    /// The other account's X25519 key.
    pub x25519_public_key: PublicKeyB64,
    /// The other account's Ed25519 key.
    pub ed25519_public_key: PublicKeyB64,
    /// When the request was made.
    pub created_at: IsoTime,
}

/// F2 request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FriendRequestBody {
    /// Whom to ask.
    pub to_alias_id: AliasId,
}

/// F2 response (clients ignore it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FriendRequestResponse {
    /// The new friendship.
    pub friendship_id: FriendshipId,
    /// Always `pending`.
    pub status: FriendStatus,
}

/// F3 request of iOS's `POST /friends/accept`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcceptFriendBody {
    /// The friendship to accept.
    pub friendship_id: FriendshipId,
}

/// F3 response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcceptFriendResponse {
    /// The conversation both sides salt their session key with.
    pub conversation_id: ConvId,
}

/// F5 response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserProfile {
    /// Alias.
    pub alias_id: AliasId,
    /// Nickname.
    pub nickname: String,
    /// X25519 key.
    pub x25519_public_key: PublicKeyB64,
    /// Ed25519 key.
    pub ed25519_public_key: PublicKeyB64,
}

// ---------------------------------------------------------------------------------------------
// 1.3 conversations and storage

/// C1 element.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActiveConversation {
    /// The conversation.
    pub conv_id: ConvId,
}

/// C1 response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActiveConversations {
    /// The caller's conversations (accepted friendships).
    pub conversations: Vec<ActiveConversation>,
}

/// C2 response: what the relay holds for the caller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StorageEstimate {
    /// Bytes of undelivered payloads and media held for the caller.
    pub used_bytes: u64,
    /// The caller's limit.
    pub quota_bytes: u64,
    /// Undelivered messages held for the caller.
    pub message_count: u64,
}

// ---------------------------------------------------------------------------------------------
// 1.4 channels

/// The caller's role in a channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChannelRole {
    /// Owns the channel; the only role that may post.
    Owner,
    /// Subscribes to it.
    Subscriber,
}

/// A channel as the caller sees it (CH1-CH3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelInfo {
    /// Channel id.
    pub id: ChannelId,
    /// Name.
    pub name: String,
    /// Description.
    pub description: String,
    /// The caller's role, absent when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<ChannelRole>,
    /// Whether the caller subscribes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_subscribed: Option<bool>,
    /// Whether the channel is listed for sale.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub for_sale: Option<bool>,
    /// Price in whole USDT; present only when `for_sale` is true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sale_price: Option<u64>,
    /// The listing's compare-and-swap version (an extension; clients ignore it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u64>,
}

/// A post's format.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum PostType {
    /// Plain text (the web client's default).
    #[default]
    Text,
    /// Markdown (the PWA's choice).
    Markdown,
}

/// A channel post (CH8 element and inside `channel_post` frames).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelPost {
    /// Post id.
    pub id: PostId,
    /// Format.
    #[serde(rename = "type")]
    pub post_type: PostType,
    /// Content (channels are public, not end-to-end encrypted).
    pub content: String,
    /// When it was posted.
    pub created_at: IsoTime,
    /// The owner who posted it.
    pub author_alias_id: AliasId,
}

fn default_true() -> bool {
    true
}

/// CH4 request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateChannelRequest {
    /// Name.
    pub name: String,
    /// Description (may be empty).
    #[serde(default)]
    pub description: String,
    /// Whether search finds it (the web client's default is true).
    #[serde(default = "default_true")]
    pub is_public: bool,
}

/// CH4 response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateChannelResponse {
    /// The new channel.
    pub channel_id: ChannelId,
}

/// CH7 request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreatePostRequest {
    /// Format; `text` when absent.
    #[serde(rename = "type", default)]
    pub post_type: PostType,
    /// Content.
    pub content: String,
}

/// CH7 response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreatePostResponse {
    /// The new post.
    pub post_id: PostId,
}

/// CH8 query (an extension: clients send none and get the newest page).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PostsQuery {
    /// Only posts older than this post id.
    #[serde(default)]
    pub before: Option<PostId>,
    /// Page size, capped by the relay.
    #[serde(default)]
    pub limit: Option<u32>,
}

/// CH1 and V1 query.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SearchQuery {
    /// The search text; absent and empty mean the same.
    #[serde(default)]
    pub q: Option<String>,
}

/// CH9 request of the web and Android clients (`POST /vanity/list-channel`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListChannelRequest {
    /// The channel to list.
    pub channel_id: ChannelId,
    /// Whole USDT, positive.
    pub price_usdt: u64,
    /// Compare-and-swap: the listing version the caller saw (an extension; when absent the relay
    /// compares against the version current when the request arrives).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_version: Option<u64>,
}

/// CH9 request of iOS (`PUT /channels/{id}/forsale`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForSaleRequest {
    /// Whole USDT, positive.
    pub price_usdt: u64,
    /// See [`ListChannelRequest::expected_version`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_version: Option<u64>,
}

/// CH9 response (clients ignore it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListChannelResponse {
    /// The channel.
    pub channel_id: ChannelId,
    /// The listed price.
    pub price_usdt: u64,
    /// The listing's new version.
    pub version: u64,
}

/// CH10 and CH11 response: a pending payment order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelTradeOrder {
    /// The order.
    pub order_id: OrderId,
    /// Whole USDT.
    pub price_usdt: u64,
    /// Receiving address.
    pub pay_to: String,
    /// When the order expires.
    pub expired_at: IsoTime,
    /// Hosted payment page (an extension, as for vanity purchases).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payment_url: Option<String>,
}

// ---------------------------------------------------------------------------------------------
// 1.5 vanity aliases and payments

/// A vanity alias's price tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VanityTier {
    /// The most sought-after patterns.
    Top,
    /// Strong patterns.
    Premium,
    /// Everything else.
    Standard,
}

/// V1 element.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VanityItem {
    /// The alias for sale.
    pub alias_id: AliasId,
    /// Whole USDT, computed when asked.
    pub price_usdt: u64,
    /// Tier.
    pub tier: VanityTier,
    /// Shown in the featured list.
    pub is_featured: bool,
}

/// V2 and V4 request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PurchaseRequest {
    /// The alias to buy.
    pub alias_id: AliasId,
}

/// V2 response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PurchaseOrder {
    /// The order.
    pub order_id: OrderId,
    /// The alias held for the buyer.
    pub alias_id: AliasId,
    /// Whole USDT.
    pub price_usdt: u64,
    /// The same price under the Android SDK's field name.
    pub amount_usdt: u64,
    /// Hosted payment page.
    pub payment_url: String,
    /// Deprecated raw receiving address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pay_to: Option<String>,
    /// When the hold ends.
    pub expired_at: IsoTime,
}

/// V3 request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BindRequest {
    /// A confirmed order of the caller.
    pub order_id: OrderId,
}

/// V3 response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BindResponse {
    /// The caller's alias from now on.
    pub alias_id: AliasId,
}

/// V4 response (deprecated).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReserveOrder {
    /// The order.
    pub order_id: OrderId,
    /// The alias held.
    pub alias_id: AliasId,
    /// Whole USDT (web client's name).
    pub price_usdt: u64,
    /// Whole USDT (Android's and the README's name).
    pub price: u64,
    /// Receiving address.
    pub pay_to: String,
    /// When the hold ends.
    pub expired_at: IsoTime,
}

/// A payment order's lifecycle state: `pending → confirmed | expired`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OrderState {
    /// Waiting for payment.
    Pending,
    /// Paid and applied.
    Confirmed,
    /// Not paid in time; whatever it held is released.
    Expired,
}

/// What an order buys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OrderKind {
    /// A vanity alias (V2/V4).
    Vanity,
    /// A channel (CH10).
    ChannelTrade,
    /// One channel-creation seat (CH11).
    ChannelQuota,
}

/// V5 response (deprecated, still polled by apps for every order kind).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderStatusResponse {
    /// State; apps test for exactly `confirmed` and `expired`.
    pub status: OrderState,
    /// The alias for a vanity order; `""` for other kinds (iOS requires the field).
    pub alias_id: String,
    /// What the order buys (an extension).
    pub kind: OrderKind,
    /// The alias, channel or order id the order refers to (as in `payment_confirmed`).
    pub ref_id: String,
}

/// The payment processor's verdict in a webhook.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PaymentStatus {
    /// The full amount (or more) arrived.
    Finished,
    /// Less than the price arrived.
    PartiallyPaid,
    /// The payment failed.
    Failed,
}

/// Name of the header carrying `hex(HMAC-SHA256(secret, raw body))` on a payment webhook.
pub const PAYMENT_SIGNATURE_HEADER: &str = "x-payment-signature";

/// Body of a payment webhook (the payment processor → the relay), signed with
/// [`PAYMENT_SIGNATURE_HEADER`] over the exact raw body bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentWebhook {
    /// The processor's payment id; a replay carries the same one.
    pub payment_id: String,
    /// The relay's order.
    pub order_id: OrderId,
    /// Verdict.
    pub payment_status: PaymentStatus,
    /// Whole USDT received so far.
    pub paid_usdt: u64,
}

// ---------------------------------------------------------------------------------------------
// 1.6 media

/// M1 request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UploadInitRequest {
    /// Always `application/octet-stream` from clients, by design.
    #[serde(default = "octet_stream")]
    pub content_type: String,
}

fn octet_stream() -> String {
    "application/octet-stream".to_owned()
}

/// M1 response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UploadInitResponse {
    /// The multipart upload.
    pub upload_id: UploadId,
    /// The object's unguessable key.
    pub media_key: MediaKey,
}

/// M2 query (camelCase names, as clients send them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkQuery {
    /// The object's key from M1.
    #[serde(rename = "mediaKey")]
    pub media_key: MediaKey,
    /// 1-based part number.
    #[serde(rename = "partNumber")]
    pub part_number: u32,
}

/// M2 response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkResponse {
    /// The part's entity tag; M3 must repeat it.
    pub etag: String,
}

/// One part in M3.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompletedPart {
    /// The etag M2 returned.
    pub etag: String,
    /// 1-based part number.
    pub part_number: u32,
}

/// M3 request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompleteUploadRequest {
    /// The object's key.
    pub media_key: MediaKey,
    /// Every part, in order.
    pub parts: Vec<CompletedPart>,
}

/// M3 response (clients ignore it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompleteUploadResponse {
    /// The object's key.
    pub media_key: MediaKey,
    /// Total size in bytes.
    pub size: u64,
}

/// M4 query.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DownloadQuery {
    /// The bare media key (no `[img]` prefix).
    pub key: MediaKey,
}

// ---------------------------------------------------------------------------------------------
// 1.7 push

/// P1 response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VapidKeyResponse {
    /// The VAPID public key, base64url.
    pub vapid_public_key: String,
}

/// The keys of a Web Push subscription.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushKeys {
    /// The browser's P-256 public key, base64url.
    pub p256dh: String,
    /// The auth secret, base64url.
    pub auth: String,
}

/// P2 request: `PushSubscription.toJSON()`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushSubscribeRequest {
    /// The push service URL.
    pub endpoint: String,
    /// Encryption keys.
    pub keys: PushKeys,
}

/// P3 request: a native token (`token` from Android, `device_token` from iOS).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushRegisterRequest {
    /// FCM token (Android).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// APNs token (iOS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_token: Option<String>,
    /// `android` or `ios`.
    pub platform: String,
}

/// The only push payload the relay ever sends: `{"type":"new_msg"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushPayload {
    /// Always `new_msg`.
    #[serde(rename = "type")]
    pub kind: String,
}

impl PushPayload {
    /// `{"type":"new_msg"}`.
    pub fn new_msg() -> Self {
        Self {
            kind: "new_msg".to_owned(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 1.8 calls

/// K1 query.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IceConfigQuery {
    /// `relay` asks for TURN-only servers.
    #[serde(default)]
    pub mode: Option<String>,
}

/// ICE transport policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IcePolicy {
    /// Any candidate.
    All,
    /// TURN only.
    Relay,
}

/// One ICE server. `urls` is always encoded as an array; decoding also accepts a single string.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IceServer {
    /// `stun:` / `turn:` / `turns:` URLs.
    #[serde(deserialize_with = "string_or_seq")]
    pub urls: Vec<String>,
    /// TURN username (coturn REST: `<expiry>:<alias>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// TURN credential (coturn REST: base64 HMAC-SHA1 of the username).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential: Option<String>,
}

fn string_or_seq<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(s) => vec![s],
        OneOrMany::Many(v) => v,
    })
}

/// K1 response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IceConfig {
    /// Seconds the credentials stay valid.
    pub ttl: u64,
    /// Policy.
    pub ice_transport_policy: IcePolicy,
    /// Servers.
    pub ice_servers: Vec<IceServer>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_bodies_decode_as_empty_objects() {
        assert_eq!(decode_body::<Empty>(b"").unwrap(), Empty {});
        assert_eq!(decode_body::<Empty>(b" \n").unwrap(), Empty {});
        assert_eq!(decode_body::<Empty>(b"{\"x\":1}").unwrap(), Empty {});
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
