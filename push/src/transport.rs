//! The one IO seam of this crate: send an HTTP request, get the whole response.
//!
//! Requests are built sans-IO ([`crate::webpush`], [`crate::fcm`], [`crate::apns`]) as
//! [`PushRequest`]s with an absolute URI; a [`PushTransport`] sends them. The crate ships the
//! production transport ([`crate::HttpsTransport`]: TLS, HTTP/1.1 and HTTP/2); the relay shell
//! implements the trait over its own network seam to reach stand-ins on turmoil.

use bytes::Bytes;
use http::{HeaderMap, StatusCode};

/// A request to a push service: absolute URI, method, headers and the whole body.
pub type PushRequest = http::Request<Bytes>;

/// Largest response body a transport reads; push services answer with small JSON.
pub const MAX_PUSH_RESPONSE_BYTES: usize = 64 * 1024;

/// A complete response.
#[derive(Debug, Clone)]
pub struct PushResponse {
    /// The status.
    pub status: StatusCode,
    /// The headers (`Retry-After` is read from here).
    pub headers: HeaderMap,
    /// The body (at most [`MAX_PUSH_RESPONSE_BYTES`]).
    pub body: Bytes,
}

impl PushResponse {
    /// A response with `status` and `body`, no headers (tests).
    pub fn new(status: u16, body: impl Into<Bytes>) -> Self {
        Self {
            status: StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            headers: HeaderMap::new(),
            body: body.into(),
        }
    }
}

/// Why no response arrived. Messages never contain the URL (a Web Push endpoint is a
/// capability) or any header.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    /// The connection (TCP or TLS) could not be set up.
    #[error("connect failed: {0}")]
    Connect(String),
    /// The exchange failed after connecting (reset, malformed response, body too large).
    #[error("exchange failed: {0}")]
    Exchange(String),
    /// The URI's scheme is not allowed by this transport (e.g. `http` in production).
    #[error("scheme not allowed")]
    SchemeNotAllowed,
    /// The destination policy refused the host or an address it resolved to (nothing was
    /// sent); the reason names the rule, never the host.
    #[error("destination refused: {0}")]
    Refused(String),
}

/// Sends push requests. Implementations are cheap to share (`Arc`) and may be called from
/// many tasks at once; the worker applies its own timeout around every call.
pub trait PushTransport: Send + Sync + 'static {
    /// Sends `request` and reads the whole response.
    fn send(
        &self,
        request: PushRequest,
    ) -> impl Future<Output = Result<PushResponse, TransportError>> + Send;
}
