//! WebSocket frames, both directions (PROTOCOL.md §3).
//!
//! Every frame is one JSON object in a text message, discriminated by `type`.
//! [`ClientFrame`] is what a client sends and a relay decodes; [`ServerFrame`] is what a relay sends
//! and a client decodes. Each frame type is its own struct, so a shell or a core can carry exactly
//! one kind of frame in its types.
//!
//! # Decoding is tolerant where the reference clients differ
//! - Unknown fields are ignored, `crypto_v` may be absent, 1 or 2 (`ping` and `sync` with or without it).
//! - An unknown `type` decodes to [`ClientFrame::Unknown`] / [`ServerFrame::Unknown`] carrying the
//!   raw object, not to an error: a relay answers it with an error frame and keeps the socket.
//! - Oversize input and malformed fields are a [`FrameError`] with a stable [`ErrorCode`].
//!
//! # Encoding is exact
//! `type` comes first and the other keys follow in the order the reference web client writes them
//! (`type,id,to,conv_id,crypto_v,payload` for `msg`), so our frames are byte-identical to theirs.
//! Optional fields that are `None` are omitted, never sent as `null`.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::error::ErrorCode;
use crate::http::ChannelPost;
use crate::ids::{AliasId, CallId, ChannelId, ConvId, FriendshipId, MessageId, OrderId, Seq};
use crate::limits::{MAX_CALL_PAYLOAD_BYTES, MAX_FRAME_BYTES, MAX_MSG_PAYLOAD_BYTES};
use crate::time::UnixMs;

mod hot;

/// The `crypto_v` of a chat message whose payload is `base64(iv ‖ AES-256-GCM ciphertext ‖ tag)`.
pub const CRYPTO_V_MESSAGE: u32 = 1;
/// The `crypto_v` of a call signal whose payload is an encrypted, signed inner object.
pub const CRYPTO_V_CALL: u32 = 2;

/// Why a frame could not be decoded. Each variant maps to a stable [`ErrorCode`] via [`FrameError::code`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The frame exceeds [`MAX_FRAME_BYTES`].
    #[error("frame is {len} bytes, the limit is {max} bytes (MAX_FRAME_BYTES)")]
    TooLarge {
        /// Size of the rejected frame.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A binary frame that is not UTF-8.
    #[error("frame is not UTF-8 text")]
    NotUtf8,
    /// Not a JSON object.
    #[error("frame is not a JSON object: {reason}")]
    NotAnObject {
        /// What the JSON parser said.
        reason: String,
    },
    /// The object has no string `type`.
    #[error("frame has no string \"type\" field")]
    MissingType,
    /// A known frame type whose fields are missing or malformed.
    #[error("invalid {frame_type} frame: {reason}")]
    Invalid {
        /// The frame's `type`.
        frame_type: String,
        /// The frame's `id` when it had a string one, so an error reply can refer to it.
        id: Option<String>,
        /// What is wrong, naming the field.
        reason: String,
    },
    /// A payload larger than its named limit.
    #[error("{frame_type} payload is {len} bytes, the limit is {max} bytes ({limit})")]
    PayloadTooLarge {
        /// The frame's `type`.
        frame_type: String,
        /// The frame's `id` when it had one.
        id: Option<String>,
        /// Size of the payload.
        len: usize,
        /// The limit.
        max: usize,
        /// The limit's name.
        limit: &'static str,
    },
}

impl FrameError {
    /// The error code a relay answers this with.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::TooLarge { .. } => ErrorCode::FRAME_TOO_LARGE,
            Self::PayloadTooLarge { .. } => ErrorCode::PAYLOAD_TOO_LARGE,
            Self::NotUtf8 | Self::NotAnObject { .. } | Self::MissingType | Self::Invalid { .. } => {
                ErrorCode::BAD_FRAME
            }
        }
    }

    /// The frame type, when the frame got far enough to have one.
    pub fn frame_type(&self) -> Option<&str> {
        match self {
            Self::Invalid { frame_type, .. } | Self::PayloadTooLarge { frame_type, .. } => {
                Some(frame_type)
            }
            _ => None,
        }
    }

    /// The frame's `id`, when it had a string one.
    pub fn frame_id(&self) -> Option<&str> {
        match self {
            Self::Invalid { id, .. } | Self::PayloadTooLarge { id, .. } => id.as_deref(),
            _ => None,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Client -> server

/// `sync`: sent on every open; asks the relay to replay everything not yet delivered.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncFrame {
    /// `1` from the web and Android clients, absent from iOS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crypto_v: Option<u32>,
}

/// `ping`: the heartbeat. No client expects a reply.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PingFrame {
    /// `1` from Android, absent from the web and iOS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crypto_v: Option<u32>,
}

/// `msg` from a client: an encrypted chat message for `to` in `conv_id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MsgFrame {
    /// Sender-chosen message id; the relay's idempotency key.
    pub id: MessageId,
    /// The recipient's alias.
    pub to: AliasId,
    /// The conversation.
    pub conv_id: ConvId,
    /// Encryption scheme version ([`CRYPTO_V_MESSAGE`]); echoed to the recipient.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crypto_v: Option<u32>,
    /// `base64(iv ‖ ciphertext ‖ tag)`; opaque to the relay.
    pub payload: Payload,
}

/// A chat message's payload: opaque text whose bytes are shared, not copied, between the frame
/// that brought it, the queue that holds it and every frame that delivers it (a clone is a
/// reference count). Serialised as a plain JSON string.
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Payload(std::sync::Arc<str>);

impl Payload {
    /// The payload's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for Payload {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Payload {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl From<&str> for Payload {
    fn from(s: &str) -> Self {
        Self(s.into())
    }
}

impl From<String> for Payload {
    fn from(s: String) -> Self {
        Self(s.into())
    }
}

impl PartialEq<str> for Payload {
    fn eq(&self, other: &str) -> bool {
        *self.0 == *other
    }
}

impl PartialEq<&str> for Payload {
    fn eq(&self, other: &&str) -> bool {
        *self.0 == **other
    }
}

impl std::fmt::Debug for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.0, f)
    }
}

impl Serialize for Payload {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Payload {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Payload;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }

            // Borrowed or not, the text is copied once, straight into the shared buffer.
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Payload, E> {
                Ok(Payload::from(s))
            }
        }
        deserializer.deserialize_str(Visitor)
    }
}

/// `delivered` or `read` from a client: "I have received / read every message of `conv_id` up to `seq`".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReceiptFrame {
    /// The conversation.
    pub conv_id: ConvId,
    /// Highest sequence number covered (receipts apply "up to").
    pub seq: Seq,
    /// The original sender's alias, to whom the receipt is routed.
    pub to: AliasId,
    /// `1` from web and Android, absent from iOS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crypto_v: Option<u32>,
}

/// `typing` from a client: an ephemeral notice for `to`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TypingFrame {
    /// The peer's alias.
    pub to: AliasId,
    /// The conversation.
    pub conv_id: ConvId,
    /// `1` from web and Android, absent from iOS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crypto_v: Option<u32>,
}

/// `retract` from a client: withdraw the author's own message `id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetractFrame {
    /// The message to retract.
    pub id: MessageId,
    /// The peer's alias.
    pub to: AliasId,
    /// The conversation.
    pub conv_id: ConvId,
    /// `1` from web and Android, absent from iOS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crypto_v: Option<u32>,
}

/// The kind of a call signal; its wire name is the frame `type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum CallKind {
    /// `call_offer`: SDP offer.
    #[serde(rename = "call_offer")]
    Offer,
    /// `call_answer`: SDP answer.
    #[serde(rename = "call_answer")]
    Answer,
    /// `call_ice`: one ICE candidate.
    #[serde(rename = "call_ice")]
    Ice,
    /// `call_reject`: the callee declines.
    #[serde(rename = "call_reject")]
    Reject,
    /// `call_hangup`: either side ends the call.
    #[serde(rename = "call_hangup")]
    Hangup,
    /// `call_invite`: Android's ring before the offer.
    #[serde(rename = "call_invite")]
    Invite,
}

impl CallKind {
    /// Every kind, in wire order.
    pub const ALL: [Self; 6] = [
        Self::Offer,
        Self::Answer,
        Self::Ice,
        Self::Reject,
        Self::Hangup,
        Self::Invite,
    ];

    /// The frame `type` string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Offer => "call_offer",
            Self::Answer => "call_answer",
            Self::Ice => "call_ice",
            Self::Reject => "call_reject",
            Self::Hangup => "call_hangup",
            Self::Invite => "call_invite",
        }
    }

    /// The kind named by a frame `type`, if it is a call signal.
    pub fn from_type(frame_type: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == frame_type)
    }
}

/// A call signal envelope (`crypto_v: 2`), both directions: what the relay sees of a call.
///
/// The relay routes on `to`, overwrites `from` with the authenticated sender, requires `call_id`,
/// and never stores or inspects `payload` (an encrypted, signed inner object, PROTOCOL.md §3.4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallSignal {
    /// The signal kind; encoded as the frame `type`.
    #[serde(rename = "type")]
    pub kind: CallKind,
    /// The peer's alias.
    pub to: AliasId,
    /// The call this signal belongs to.
    pub call_id: CallId,
    /// The sender's alias: claimed by clients, injected by the relay on forward.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<AliasId>,
    /// [`CRYPTO_V_CALL`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crypto_v: Option<u32>,
    /// `base64(iv ‖ AES-GCM(session key, JSON(signed inner)) ‖ tag)`.
    pub payload: String,
}

/// A frame whose `type` this crate does not know, kept whole.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(transparent)]
pub struct UnknownFrame {
    /// The raw object, including its `type`.
    pub raw: Map<String, Value>,
}

impl UnknownFrame {
    /// The frame's `type`.
    pub fn frame_type(&self) -> &str {
        self.raw.get("type").and_then(Value::as_str).unwrap_or("")
    }
}

/// Every frame a client sends.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientFrame {
    /// `sync`
    Sync(SyncFrame),
    /// `ping`
    Ping(PingFrame),
    /// `msg`
    Msg(MsgFrame),
    /// `delivered`
    Delivered(ReceiptFrame),
    /// `read`
    Read(ReceiptFrame),
    /// `typing`
    Typing(TypingFrame),
    /// `retract`
    Retract(RetractFrame),
    /// `call_offer`, `call_answer`, `call_ice`, `call_reject`, `call_hangup`, `call_invite`
    Call(CallSignal),
    /// Any other `type` (including iOS's legacy `message`).
    Unknown(UnknownFrame),
}

impl ClientFrame {
    /// Decodes a text frame. See the module doc for what is tolerated.
    pub fn decode(text: &str) -> Result<Self, FrameError> {
        match Self::decode_hot(text) {
            Some(frame) => Ok(frame),
            None => Self::decode_general(text),
        }
    }

    /// Every frame, through the JSON tree (see the module doc for what is tolerated).
    fn decode_general(text: &str) -> Result<Self, FrameError> {
        let (frame_type, obj) = split_object(text)?;
        let frame = match frame_type.as_str() {
            "sync" => Self::Sync(fields(&frame_type, obj)?),
            "ping" => Self::Ping(fields(&frame_type, obj)?),
            "msg" => {
                check_payload(
                    &frame_type,
                    &obj,
                    MAX_MSG_PAYLOAD_BYTES,
                    "MAX_MSG_PAYLOAD_BYTES",
                )?;
                Self::Msg(fields(&frame_type, obj)?)
            }
            "delivered" => Self::Delivered(fields(&frame_type, obj)?),
            "read" => Self::Read(fields(&frame_type, obj)?),
            "typing" => Self::Typing(fields(&frame_type, obj)?),
            "retract" => Self::Retract(fields(&frame_type, obj)?),
            t if CallKind::from_type(t).is_some() => {
                check_payload(
                    &frame_type,
                    &obj,
                    MAX_CALL_PAYLOAD_BYTES,
                    "MAX_CALL_PAYLOAD_BYTES",
                )?;
                Self::Call(fields(&frame_type, with_type(obj, &frame_type))?)
            }
            _ => Self::Unknown(UnknownFrame {
                raw: with_type(obj, &frame_type),
            }),
        };
        Ok(frame)
    }

    /// Decodes a binary frame holding UTF-8 JSON (iOS may send those).
    pub fn decode_bytes(bytes: &[u8]) -> Result<Self, FrameError> {
        if bytes.len() > MAX_FRAME_BYTES {
            return Err(FrameError::TooLarge {
                len: bytes.len(),
                max: MAX_FRAME_BYTES,
            });
        }
        Self::decode(std::str::from_utf8(bytes).map_err(|_| FrameError::NotUtf8)?)
    }

    /// The frame `type`.
    pub fn frame_type(&self) -> &str {
        match self {
            Self::Sync(_) => "sync",
            Self::Ping(_) => "ping",
            Self::Msg(_) => "msg",
            Self::Delivered(_) => "delivered",
            Self::Read(_) => "read",
            Self::Typing(_) => "typing",
            Self::Retract(_) => "retract",
            Self::Call(c) => c.kind.as_str(),
            Self::Unknown(u) => u.frame_type(),
        }
    }

    /// The exact JSON text of the frame.
    pub fn encode(&self) -> String {
        to_json(self)
    }
}

impl Serialize for ClientFrame {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Sync(f) => tagged("sync", f, s),
            Self::Ping(f) => tagged("ping", f, s),
            Self::Msg(f) => tagged("msg", f, s),
            Self::Delivered(f) => tagged("delivered", f, s),
            Self::Read(f) => tagged("read", f, s),
            Self::Typing(f) => tagged("typing", f, s),
            Self::Retract(f) => tagged("retract", f, s),
            Self::Call(f) => f.serialize(s),
            Self::Unknown(f) => f.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for ClientFrame {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(d)?;
        Self::decode(&value.to_string()).map_err(serde::de::Error::custom)
    }
}

// ---------------------------------------------------------------------------------------------
// Server -> client

/// `ack`: the relay committed message `id` as `seq`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AckFrame {
    /// The client's message id.
    pub id: MessageId,
    /// The sequence number the relay assigned.
    pub seq: Seq,
}

/// `msg` from the relay: a message delivered live or replayed after `sync`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MsgDelivery {
    /// The sender's message id.
    pub id: MessageId,
    /// The authenticated sender's alias, injected by the relay.
    pub from: AliasId,
    /// The conversation.
    pub conv_id: ConvId,
    /// The relay-assigned sequence number.
    pub seq: Seq,
    /// When the relay accepted the message (epoch ms).
    pub at: UnixMs,
    /// The sender's `crypto_v`, echoed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crypto_v: Option<u32>,
    /// The sender's opaque payload, byte for byte.
    pub payload: Payload,
}

/// `delivered` or `read` from the relay: the peer's receipt, up to `seq`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReceiptDelivery {
    /// The conversation.
    pub conv_id: ConvId,
    /// Highest sequence number covered.
    pub seq: Seq,
    /// The peer who sent the receipt, injected by the relay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<AliasId>,
    /// The recipient of this frame (the original sender), as the reference README shows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<AliasId>,
}

/// `typing` from the relay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TypingDelivery {
    /// Who is typing, injected by the relay.
    pub from: AliasId,
    /// The conversation.
    pub conv_id: ConvId,
}

/// `retract` from the relay: the author withdrew message `id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetractDelivery {
    /// The retracted message.
    pub id: MessageId,
    /// The author, injected by the relay (only the author may retract).
    pub from: AliasId,
    /// The conversation.
    pub conv_id: ConvId,
}

/// `channel_post`: a new post in a channel the recipient subscribes to.
///
/// Shape (decided; PROTOCOL.md §3.2 lists three incompatible ones): the PWA's
/// `{conv_id: <channel id>, post: ChannelPost}`, plus `channel_id` with the same value for readers
/// that expect a channel field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelPostFrame {
    /// The channel id (the PWA reads this key).
    pub conv_id: ChannelId,
    /// The channel id again, named for what it is.
    pub channel_id: ChannelId,
    /// The post.
    pub post: ChannelPost,
}

/// `payment_confirmed`: an order was paid and applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentConfirmedFrame {
    /// The order.
    pub order_id: OrderId,
    /// The alias id (vanity purchase), the channel id (channel trade) or the order id (quota buy).
    pub ref_id: String,
}

/// `friend_request`: someone asked the recipient to be contacts. Clients use it to refresh F1.
///
/// Fields decided here (the reference clients read none of them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FriendRequestFrame {
    /// The new friendship.
    pub friendship_id: FriendshipId,
    /// The requester's alias.
    pub from: AliasId,
    /// The requester's nickname.
    pub nickname: String,
}

/// `friend_accepted`: the recipient's request was accepted. Clients use it to refresh F1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FriendAcceptedFrame {
    /// The friendship.
    pub friendship_id: FriendshipId,
    /// The alias of the one who accepted.
    pub from: AliasId,
    /// The conversation the relay assigned.
    pub conversation_id: ConvId,
}

/// Why the relay sent a GOAWAY.
pub mod goaway_reason {
    /// Another login (a newer JWT) took over the account.
    pub const NEW_DEVICE_LOGIN: &str = "new_device_login";
    /// Another socket with the same token took over.
    pub const SESSION_REPLACED: &str = "session_replaced";
    /// The token used by this socket was revoked.
    pub const JWT_REVOKED: &str = "jwt_revoked";
    /// The relay is shutting down.
    pub const SERVER_SHUTDOWN: &str = "server_shutdown";
}

/// `goaway`: the relay ends this session; clients stop reconnecting.
///
/// Encoded with the reason both at top level and inside `payload`
/// (`{"type":"goaway","reason":r,"payload":{"reason":r}}`) so every client finds it. Decoding
/// prefers `payload.reason`, then `reason`, then `"unknown"`, as the web client does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoawayFrame {
    /// See [`goaway_reason`].
    pub reason: String,
}

#[derive(Serialize, Deserialize)]
struct GoawayWire {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    payload: Option<GoawayPayload>,
}

#[derive(Serialize, Deserialize)]
struct GoawayPayload {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
}

impl Serialize for GoawayFrame {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        GoawayWire {
            reason: Some(self.reason.clone()),
            payload: Some(GoawayPayload {
                reason: Some(self.reason.clone()),
            }),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for GoawayFrame {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let wire = GoawayWire::deserialize(d)?;
        let nested = wire
            .payload
            .and_then(|p| p.reason)
            .filter(|r| !r.is_empty());
        let reason = nested
            .or(wire.reason.filter(|r| !r.is_empty()))
            .unwrap_or_else(|| "unknown".to_owned());
        Ok(Self { reason })
    }
}

/// `error`: the relay's answer to a frame it refused. The socket stays open.
///
/// Mirrors the HTTP error body, plus what it answers: `ref_type` (the refused frame's `type`) and
/// `id` (its message id, so a client can mark that message failed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorFrame {
    /// Stable code.
    pub error: ErrorCode,
    /// One human sentence.
    pub message: String,
    /// The `type` of the refused frame, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ref_type: Option<String>,
    /// The `id` of the refused frame, when it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

/// Every frame a relay sends.
#[derive(Debug, Clone, PartialEq)]
pub enum ServerFrame {
    /// `ack`
    Ack(AckFrame),
    /// `msg`
    Msg(MsgDelivery),
    /// `delivered`
    Delivered(ReceiptDelivery),
    /// `read`
    Read(ReceiptDelivery),
    /// `typing`
    Typing(TypingDelivery),
    /// `retract`
    Retract(RetractDelivery),
    /// `channel_post`
    ChannelPost(ChannelPostFrame),
    /// `payment_confirmed`
    PaymentConfirmed(PaymentConfirmedFrame),
    /// `friend_request`
    FriendRequest(FriendRequestFrame),
    /// `friend_accepted`
    FriendAccepted(FriendAcceptedFrame),
    /// `goaway`
    Goaway(GoawayFrame),
    /// `error`
    Error(ErrorFrame),
    /// `call_*`, forwarded with `from` injected.
    Call(CallSignal),
    /// Any other `type`.
    Unknown(UnknownFrame),
}

impl ServerFrame {
    /// Decodes a text frame from a relay.
    pub fn decode(text: &str) -> Result<Self, FrameError> {
        let (frame_type, obj) = split_object(text)?;
        let frame = match frame_type.as_str() {
            "ack" => Self::Ack(fields(&frame_type, obj)?),
            "msg" => Self::Msg(fields(&frame_type, obj)?),
            "delivered" => Self::Delivered(fields(&frame_type, obj)?),
            "read" => Self::Read(fields(&frame_type, obj)?),
            "typing" => Self::Typing(fields(&frame_type, obj)?),
            "retract" => Self::Retract(fields(&frame_type, obj)?),
            "channel_post" => Self::ChannelPost(fields(&frame_type, obj)?),
            "payment_confirmed" => Self::PaymentConfirmed(fields(&frame_type, obj)?),
            "friend_request" => Self::FriendRequest(fields(&frame_type, obj)?),
            "friend_accepted" => Self::FriendAccepted(fields(&frame_type, obj)?),
            "goaway" => Self::Goaway(fields(&frame_type, obj)?),
            "error" => Self::Error(fields(&frame_type, obj)?),
            t if CallKind::from_type(t).is_some() => {
                Self::Call(fields(&frame_type, with_type(obj, &frame_type))?)
            }
            _ => Self::Unknown(UnknownFrame {
                raw: with_type(obj, &frame_type),
            }),
        };
        Ok(frame)
    }

    /// The frame `type`.
    pub fn frame_type(&self) -> &str {
        match self {
            Self::Ack(_) => "ack",
            Self::Msg(_) => "msg",
            Self::Delivered(_) => "delivered",
            Self::Read(_) => "read",
            Self::Typing(_) => "typing",
            Self::Retract(_) => "retract",
            Self::ChannelPost(_) => "channel_post",
            Self::PaymentConfirmed(_) => "payment_confirmed",
            Self::FriendRequest(_) => "friend_request",
            Self::FriendAccepted(_) => "friend_accepted",
            Self::Goaway(_) => "goaway",
            Self::Error(_) => "error",
            Self::Call(c) => c.kind.as_str(),
            Self::Unknown(u) => u.frame_type(),
        }
    }

    /// The exact JSON text of the frame (the frames of every message written directly, the
    /// rest by `serde_json`; the bytes are the same).
    pub fn encode(&self) -> String {
        self.encode_hot().unwrap_or_else(|| to_json(self))
    }
}

impl Serialize for ServerFrame {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Ack(f) => tagged("ack", f, s),
            Self::Msg(f) => tagged("msg", f, s),
            Self::Delivered(f) => tagged("delivered", f, s),
            Self::Read(f) => tagged("read", f, s),
            Self::Typing(f) => tagged("typing", f, s),
            Self::Retract(f) => tagged("retract", f, s),
            Self::ChannelPost(f) => tagged("channel_post", f, s),
            Self::PaymentConfirmed(f) => tagged("payment_confirmed", f, s),
            Self::FriendRequest(f) => tagged("friend_request", f, s),
            Self::FriendAccepted(f) => tagged("friend_accepted", f, s),
            Self::Goaway(f) => tagged("goaway", f, s),
            Self::Error(f) => tagged("error", f, s),
            Self::Call(f) => f.serialize(s),
            Self::Unknown(f) => f.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for ServerFrame {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(d)?;
        Self::decode(&value.to_string()).map_err(serde::de::Error::custom)
    }
}

// ---------------------------------------------------------------------------------------------
// helpers

#[derive(Serialize)]
struct Tagged<'a, T: Serialize> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(flatten)]
    body: &'a T,
}

fn tagged<S: Serializer, T: Serialize>(
    kind: &'static str,
    body: &T,
    s: S,
) -> Result<S::Ok, S::Error> {
    Tagged { kind, body }.serialize(s)
}

fn to_json<T: Serialize>(value: &T) -> String {
    // Frames hold only strings, integers, and string-keyed maps: serialisation cannot fail.
    serde_json::to_string(value).unwrap_or_else(|e| unreachable!("frame failed to serialise: {e}"))
}

fn split_object(text: &str) -> Result<(String, Map<String, Value>), FrameError> {
    if text.len() > MAX_FRAME_BYTES {
        return Err(FrameError::TooLarge {
            len: text.len(),
            max: MAX_FRAME_BYTES,
        });
    }
    let mut obj = match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(obj)) => obj,
        Ok(other) => {
            return Err(FrameError::NotAnObject {
                reason: format!("found {}", json_kind(&other)),
            });
        }
        Err(e) => {
            return Err(FrameError::NotAnObject {
                reason: e.to_string(),
            });
        }
    };
    // `shift_remove`: `remove` is a `swap_remove` under `preserve_order` and would reorder an
    // unknown frame's fields.
    match obj.shift_remove("type") {
        Some(Value::String(t)) => Ok((t, obj)),
        _ => Err(FrameError::MissingType),
    }
}

fn with_type(obj: Map<String, Value>, frame_type: &str) -> Map<String, Value> {
    // Keep `type` first so an unknown frame re-encodes as it arrived.
    let mut out = Map::with_capacity(obj.len() + 1);
    out.insert("type".to_owned(), Value::String(frame_type.to_owned()));
    out.extend(obj);
    out
}

fn string_id(obj: &Map<String, Value>) -> Option<String> {
    obj.get("id").and_then(Value::as_str).map(str::to_owned)
}

fn fields<T: DeserializeOwned>(frame_type: &str, obj: Map<String, Value>) -> Result<T, FrameError> {
    let id = string_id(&obj);
    serde_json::from_value(Value::Object(obj)).map_err(|e| FrameError::Invalid {
        frame_type: frame_type.to_owned(),
        id,
        reason: e.to_string(),
    })
}

fn check_payload(
    frame_type: &str,
    obj: &Map<String, Value>,
    max: usize,
    limit: &'static str,
) -> Result<(), FrameError> {
    match obj.get("payload").and_then(Value::as_str) {
        Some(p) if p.len() > max => Err(FrameError::PayloadTooLarge {
            frame_type: frame_type.to_owned(),
            id: string_id(obj),
            len: p.len(),
            max,
            limit,
        }),
        _ => Ok(()),
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
