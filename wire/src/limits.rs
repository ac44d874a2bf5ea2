//! Named limits shared by the relay, the client and the conformance suite.
//!
//! Units are in the names. A value beyond a limit is rejected with a typed error and a stable
//! error code; nothing is silently truncated.

/// Largest WebSocket text frame, in bytes, a relay must accept and a client may send.
///
/// Sized for a call offer: an SDP of ~10 KiB, signed, encrypted and base64-encoded, fits with room.
pub const MAX_FRAME_BYTES: usize = 64 * 1024;

/// Largest `payload` (base64 text) of a `msg` frame, in bytes.
pub const MAX_MSG_PAYLOAD_BYTES: usize = 48 * 1024;

/// Largest `payload` (base64 text) of a call signal, in bytes.
pub const MAX_CALL_PAYLOAD_BYTES: usize = 56 * 1024;

/// Largest JSON request body, in bytes, on every JSON route.
pub const MAX_JSON_BODY_BYTES: usize = 32 * 1024;

/// Plaintext bytes per media chunk (PROTOCOL.md §4.6).
pub const MEDIA_CHUNK_PLAINTEXT_BYTES: usize = 5 * 1024 * 1024;

/// Bytes a chunk frame adds to its plaintext: 4-byte length, 12-byte IV, 16-byte tag.
pub const MEDIA_CHUNK_OVERHEAD_BYTES: usize = 4 + 12 + 16;

/// Largest body of one media part upload (M2): one full chunk frame.
pub const MAX_MEDIA_PART_BYTES: usize = MEDIA_CHUNK_PLAINTEXT_BYTES + MEDIA_CHUNK_OVERHEAD_BYTES;

/// Most parts in one multipart upload.
pub const MAX_MEDIA_PARTS: u32 = 64;

/// Largest assembled media object, in bytes (20 full chunks, about 100 MiB).
pub const MAX_MEDIA_OBJECT_BYTES: u64 = 20 * MAX_MEDIA_PART_BYTES as u64;

/// Nickname length bounds, in Unicode scalar values.
pub const NICKNAME_MAX_CHARS: usize = 32;

/// Channel name length bound, in Unicode scalar values.
pub const CHANNEL_NAME_MAX_CHARS: usize = 64;

/// Channel description length bound, in Unicode scalar values.
pub const CHANNEL_DESCRIPTION_MAX_CHARS: usize = 1024;

/// Largest channel post content, in bytes.
pub const MAX_CHANNEL_POST_BYTES: usize = 16 * 1024;

/// Longest reason string in an error frame or body message, in bytes.
pub const MAX_ERROR_MESSAGE_BYTES: usize = 512;
