//! The SecureChat relay protocol vocabulary: identifiers, HTTP bodies, WebSocket frames and the
//! error body. Serde types only, no behaviour: this is how the relay, the client and the conformance
//! suite agree without depending on each other.
//!
//! - [`ids`]: newtypes for every identifier, parsed once at the edge.
//! - [`frames`]: [`ClientFrame`] and [`ServerFrame`], tolerant decoders, exact encoders.
//! - [`http`]: every request and response body, and the route [`http::paths`].
//! - [`error`]: [`ErrorBody`] and the stable [`ErrorCode`]s.
//! - [`limits`]: named size limits (`MAX_FRAME_BYTES`, body limits, ...).
//! - [`time`]: epoch milliseconds and ISO-8601 strings.
//! - [`json`]: JSON written by hand for the hot path, byte for byte `serde_json`'s.
//!
//! ```
//! use wire::{ClientFrame, ServerFrame};
//!
//! let frame = ClientFrame::decode(r#"{"type":"ping","crypto_v":1}"#).unwrap();
//! assert_eq!(frame.frame_type(), "ping");
//! // Unknown types are values, not errors: a relay answers them and keeps the socket.
//! let odd = ClientFrame::decode(r#"{"type":"message","text":"x"}"#).unwrap();
//! assert!(matches!(odd, ClientFrame::Unknown(_)));
//! let goaway = ServerFrame::decode(r#"{"type":"goaway","payload":{"reason":"new_device_login"}}"#).unwrap();
//! assert_eq!(goaway.encode(), r#"{"type":"goaway","reason":"new_device_login","payload":{"reason":"new_device_login"}}"#);
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod error;
pub mod frames;
pub mod http;
pub mod ids;
pub mod json;
pub mod limits;
pub mod time;

pub use error::{ErrorBody, ErrorCode};
pub use frames::{ClientFrame, FrameError, ServerFrame};
pub use ids::{
    AliasId, CallId, ChannelId, ConvId, FriendshipId, IdError, MediaKey, MessageId, OrderId,
    PostId, Seq, UploadId, UserUuid,
};
pub use time::{IsoTime, UnixMs};
