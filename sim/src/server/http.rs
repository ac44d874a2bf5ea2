//! REST: `/api/v1/*` to the core task, body limits, CORS, and the relay's response to axum's.

use axum::{
    body::Body,
    extract::{ConnectInfo, Request, State},
    http::{HeaderMap, HeaderValue, Method, StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use http_body_util::BodyExt as _;
use hyper::body::Body as _;
use relay_core::HttpResponse;
use tokio::sync::{mpsc, oneshot};
use wire::{
    ErrorBody, ErrorCode,
    limits::{MAX_JSON_BODY_BYTES, MAX_MEDIA_PART_BYTES},
};

use super::driver::Input;
use crate::net::PeerAddr;

/// What every handler holds: the way to the core task.
#[derive(Clone, Debug)]
pub(super) struct App {
    pub(super) inputs: mpsc::Sender<Input>,
    /// Serve [`super::ADVANCE_CLOCK_PATH`] (test mode only; otherwise it is an unknown route).
    pub(super) test_mode: bool,
    /// Per-connection limits (the WebSocket's write deadline).
    pub(super) limits: crate::net::ServeLimits,
}

/// The body of `POST /api/v1/test/advance-clock`.
#[derive(Debug, serde::Deserialize)]
struct AdvanceClock {
    ms: u64,
}

/// Its answer.
#[derive(Debug, serde::Serialize)]
struct AdvancedClock {
    now_ms: u64,
}

/// Methods a preflight allows.
const CORS_ALLOW_METHODS: &str = "GET, POST, PUT, DELETE, OPTIONS";
/// Request headers a preflight allows when the browser names none (`Authorization` must be
/// listed explicitly: the `*` wildcard does not cover it).
const CORS_ALLOW_HEADERS: &str = "authorization, content-type, x-payment-signature";
/// How long a browser may cache a preflight, in seconds.
const CORS_MAX_AGE_S: &str = "600";

/// The body limit of `path`: a media part on the chunk route, JSON everywhere else.
fn body_limit(path: &str) -> usize {
    let segs: Vec<&str> = path.split('/').collect();
    match segs.as_slice() {
        ["", "api", "v1", "media", "upload-parts", _, "chunk"] => MAX_MEDIA_PART_BYTES,
        _ => MAX_JSON_BODY_BYTES,
    }
}

/// After refusing an oversize body, at most this much more of it is read and discarded
/// before answering, so that a client still writing its body reads the 413 instead of a
/// connection reset (a server that closes with unread input resets the connection).
pub const OVERSIZE_DRAIN_BYTES: usize = 1024 * 1024;
/// How long that discarding may take, in ms.
const OVERSIZE_DRAIN_MS: u64 = 1_000;

enum BodyRead {
    Complete(Vec<u8>),
    TooLarge,
    Failed,
}

/// Reads at most `limit` bytes of `body` (refusing at once when `Content-Length` already
/// says more), then drains a bounded excess (see [`OVERSIZE_DRAIN_BYTES`]).
async fn read_body(body: Body, limit: usize) -> BodyRead {
    let mut body = body;
    if body.size_hint().lower() > limit as u64 {
        drain(body).await;
        return BodyRead::TooLarge;
    }
    let mut bytes = Vec::new();
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else {
            return BodyRead::Failed;
        };
        if let Some(data) = frame.data_ref() {
            if bytes.len() + data.len() > limit {
                drain(body).await;
                return BodyRead::TooLarge;
            }
            bytes.extend_from_slice(data);
        }
    }
    BodyRead::Complete(bytes)
}

async fn drain(body: Body) {
    let mut body = body;
    let discard = async {
        let mut seen = 0usize;
        while let Some(Ok(frame)) = body.frame().await {
            seen += frame.data_ref().map_or(0, bytes::Bytes::len);
            if seen > OVERSIZE_DRAIN_BYTES {
                break;
            }
        }
    };
    let _ =
        tokio::time::timeout(std::time::Duration::from_millis(OVERSIZE_DRAIN_MS), discard).await;
}

/// Every `/api/v1/*` request: limit and read the body, hand it to the relay, return its answer.
pub(super) async fn api(
    State(app): State<App>,
    ConnectInfo(peer): ConnectInfo<PeerAddr>,
    request: Request,
) -> Response {
    let (parts, body) = request.into_parts();
    let limit = body_limit(parts.uri.path());
    let body = match read_body(body, limit).await {
        BodyRead::Complete(body) => body,
        BodyRead::TooLarge => return too_large(limit),
        BodyRead::Failed => {
            return error_response(
                StatusCode::BAD_REQUEST,
                ErrorCode::BAD_REQUEST,
                "the request body could not be read",
            );
        }
    };
    if app.test_mode
        && parts.method == Method::POST
        && parts.uri.path() == super::ADVANCE_CLOCK_PATH
    {
        return advance_clock(&app, &body).await;
    }
    let mut req = relay_core::HttpRequest::new(
        relay_core::Method::parse(parts.method.as_str()),
        parts.uri.path(),
    );
    req.query = parts.uri.query().unwrap_or_default().to_owned();
    req.authorization = header_str(&parts.headers, header::AUTHORIZATION.as_str());
    // The client's IP only: PoW challenges are bound to the address, and a client's port
    // differs per connection.
    req.remote_addr = peer.0.ip().to_string();
    req.body = body;
    req.headers = parts
        .headers
        .iter()
        .filter_map(|(name, value)| {
            Some((name.as_str().to_owned(), value.to_str().ok()?.to_owned()))
        })
        .collect();
    tracing::debug!(method = %parts.method, path = parts.uri.path(), "http request");
    let (reply, answer) = oneshot::channel();
    if app.inputs.send(Input::Http { req, reply }).await.is_err() {
        return unavailable();
    }
    match answer.await {
        Ok(response) => relay_response(response),
        Err(_) => unavailable(),
    }
}

/// Test mode: `{"ms": u64}` → the core moves its clock, fires due timers → `{"now_ms": u64}`.
async fn advance_clock(app: &App, body: &[u8]) -> Response {
    let Ok(AdvanceClock { ms }) = serde_json::from_slice::<AdvanceClock>(body) else {
        return error_response(
            StatusCode::BAD_REQUEST,
            ErrorCode::INVALID_JSON,
            "expected {\"ms\": <non-negative integer>}",
        );
    };
    let (reply, answer) = oneshot::channel();
    if app
        .inputs
        .send(Input::AdvanceClock { ms, reply })
        .await
        .is_err()
    {
        return unavailable();
    }
    match answer.await {
        Ok(now) => {
            let body = serde_json::to_vec(&AdvancedClock { now_ms: now.0 }).unwrap_or_default();
            relay_response(HttpResponse {
                status: StatusCode::OK.as_u16(),
                body,
                content_type: relay_core::http::CONTENT_TYPE_JSON,
                retry_after_s: None,
            })
        }
        Err(_) => unavailable(),
    }
}

/// Any path outside `/api/v1/*` and `/ws`.
pub(super) async fn not_found() -> Response {
    error_response(StatusCode::NOT_FOUND, ErrorCode::NOT_FOUND, "no such route")
}

/// CORS for every origin: answers `OPTIONS` preflights with 204 and adds the CORS headers to
/// every other response.
pub(super) async fn cors(request: Request, next: Next) -> Response {
    let requested_headers = request
        .headers()
        .get(header::ACCESS_CONTROL_REQUEST_HEADERS)
        .cloned();
    let mut response = if request.method() == Method::OPTIONS {
        StatusCode::NO_CONTENT.into_response()
    } else {
        next.run(request).await
    };
    let headers = response.headers_mut();
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static(CORS_ALLOW_METHODS),
    );
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        requested_headers.unwrap_or_else(|| HeaderValue::from_static(CORS_ALLOW_HEADERS)),
    );
    headers.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static(CORS_MAX_AGE_S),
    );
    response
}

/// The relay's response as an axum response (status, content type, body).
pub(super) fn relay_response(response: HttpResponse) -> Response {
    let status = StatusCode::from_u16(response.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let content_type = HeaderValue::from_static(response.content_type);
    let mut out = Response::new(Body::from(response.body));
    *out.status_mut() = status;
    out.headers_mut().insert(header::CONTENT_TYPE, content_type);
    if let Some(s) = response.retry_after_s {
        out.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(s));
    }
    out
}

/// A JSON error response with the wire error body.
pub(super) fn error_response(status: StatusCode, code: ErrorCode, message: &str) -> Response {
    let body = serde_json::to_vec(&ErrorBody::new(code, message)).unwrap_or_default();
    relay_response(HttpResponse {
        status: status.as_u16(),
        body,
        content_type: relay_core::http::CONTENT_TYPE_JSON,
        retry_after_s: (status == StatusCode::TOO_MANY_REQUESTS)
            .then_some(relay_core::limits::DEFAULT_RETRY_AFTER_S),
    })
}

fn too_large(limit: usize) -> Response {
    error_response(
        StatusCode::PAYLOAD_TOO_LARGE,
        ErrorCode::BODY_TOO_LARGE,
        &format!("the request body is larger than this route's limit of {limit} bytes"),
    )
}

/// 503 while the server shuts down (the core task is gone or refuses new work).
pub(super) fn unavailable() -> Response {
    error_response(
        StatusCode::SERVICE_UNAVAILABLE,
        shutting_down_code(),
        "the relay is shutting down; retry shortly",
    )
}

/// `SERVER_SHUTTING_DOWN` (503).
pub(super) fn shutting_down_code() -> ErrorCode {
    ErrorCode::SERVER_SHUTTING_DOWN
}

fn header_str(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_chunks_get_the_media_limit() {
        assert_eq!(
            body_limit("/api/v1/media/upload-parts/u1/chunk"),
            MAX_MEDIA_PART_BYTES
        );
        assert_eq!(body_limit("/api/v1/register"), MAX_JSON_BODY_BYTES);
        assert_eq!(
            body_limit("/api/v1/media/upload-parts/u1/complete"),
            MAX_JSON_BODY_BYTES
        );
    }
}
