//! REST: `/api/v1/*` to the core task, body limits, CORS, and the relay's response to axum's.

use std::sync::{Arc, atomic::Ordering};

use axum::{
    body::Body,
    extract::{ConnectInfo, Request, State},
    http::{HeaderMap, HeaderValue, Method, StatusCode, header, request::Parts},
    middleware::Next,
    response::{IntoResponse, Response},
};
use http_body_util::BodyExt as _;
use hyper::body::Body as _;
use relay_core::HttpResponse;
use tokio::sync::{oneshot, watch};
use wire::{
    ErrorBody, ErrorCode,
    limits::{MAX_JSON_BODY_BYTES, MAX_MEDIA_PART_BYTES},
};

use super::driver::{Cores, Input, Phase};
use super::leadership::{NOT_LEADER, NOT_LEADER_RETRY_AFTER_S};
use seam::net::PeerAddr;

/// The header a trusted proxy names the client in ([`App::client_network`]).
const FORWARDED_FOR: &str = "x-forwarded-for";
/// The liveness probe's path: 200 for as long as the process serves HTTP.
pub const HEALTHZ_PATH: &str = "/healthz";
/// The readiness probe's path: 200 only while this relay serves clients (the active one).
pub const READYZ_PATH: &str = "/readyz";

/// What every handler holds: the way to the core task.
#[derive(Clone, Debug)]
pub(super) struct App {
    pub(super) phase: watch::Receiver<Phase>,
    /// Serve [`super::ADVANCE_CLOCK_PATH`] (test mode only; otherwise it is an unknown route).
    pub(super) test_mode: bool,
    /// Per-connection limits (the WebSocket's write deadline, the body deadline).
    pub(super) limits: seam::net::ServeLimits,
    /// Resolves the host of a push subscription's endpoint before the relay checks it
    /// (`None`: the relay's policy needs no resolution, e.g. test mode).
    pub(super) resolver: Option<Arc<dyn relay_push::dns::Resolve>>,
    /// Counts the relay's answers by route ([`super::metrics`]).
    pub(super) metrics: Option<super::metrics::Metrics>,
    /// Counts the sockets served on their core's thread (`ws`).
    pub(super) on_core_threads: Arc<std::sync::atomic::AtomicU64>,
    /// A cluster node's check of the other nodes' links: the node an `Authorization` value
    /// proves, if it does; `None`: no such route.
    pub(super) cluster: Option<PeerCheck>,
    /// A cluster node's way to the nodes serving the shards it does not (`None`: such a
    /// request is refused, [`App::not_here`]).
    pub(super) onward: Option<super::onward::Onward>,
    /// Load balancers whose `X-Forwarded-For` names the client.
    pub(super) trusted_proxies: Arc<std::collections::BTreeSet<std::net::IpAddr>>,
}

/// Checks another node's proof (an `Authorization` value): the node it proves, if any.
#[derive(Clone)]
pub(super) struct PeerCheck(pub(super) Arc<Prove>);

/// What a [`PeerCheck`] runs.
pub(super) type Prove = dyn Fn(&str) -> Option<String> + Send + Sync;

impl std::fmt::Debug for PeerCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PeerCheck")
    }
}

impl App {
    /// The current cores' inputs; `None` when there are none (answer [`Self::refusal`]).
    pub(super) fn cores(&self) -> Option<Cores> {
        match &*self.phase.borrow() {
            Phase::Active { inputs, .. } => Some(inputs.clone()),
            Phase::Standby | Phase::Stopping => None,
        }
    }

    /// The answer when there is no core, or it went away under a request: a standby (the term
    /// ended: `NOT_LEADER`) or a server shutting down.
    pub(super) fn refusal(&self) -> Response {
        match &*self.phase.borrow() {
            Phase::Standby => not_leader(),
            Phase::Active { .. } | Phase::Stopping => unavailable(),
        }
    }

    /// The answer for a request or an upgrade whose shard this cluster node does not serve
    /// now: 503 `NOT_LEADER` with `Retry-After`, as a standby's (the client tries again, and a
    /// load balancer sends it on).
    pub(super) fn not_here(&self) -> Response {
        not_leader()
    }

    /// The network a request or an upgrade counts as (its IP cut to the configured prefix,
    /// a port never): the peer's, or the client's the last `X-Forwarded-For` entry names when
    /// the peer is a trusted proxy.
    pub(super) fn client_network(&self, peer: &PeerAddr, headers: &HeaderMap) -> String {
        let mut ip = peer.0.ip();
        if self.trusted_proxies.contains(&ip)
            && let Some(named) = headers
                .get_all(FORWARDED_FOR)
                .iter()
                .next_back()
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.rsplit(',').next())
                .and_then(|v| v.trim().parse().ok())
        {
            ip = named;
        }
        self.limits.prefixes.network(ip).to_string()
    }

    fn is_standby(&self) -> bool {
        matches!(&*self.phase.borrow(), Phase::Standby)
    }
}

/// `GET /healthz`: the process is alive and answers HTTP (200 on a standby too), with its role.
pub(super) async fn healthz(State(app): State<App>) -> Response {
    let role = match &*app.phase.borrow() {
        Phase::Standby => "standby",
        Phase::Active { .. } => "active",
        Phase::Stopping => "stopping",
    };
    json_response(
        StatusCode::OK,
        &serde_json::json!({"status": "live", "role": role}),
    )
}

/// `GET /readyz`: 200 while this relay serves clients, with the shards it serves (all of them
/// but on a cluster node); 503 with the wire error body otherwise
/// (`NOT_LEADER` on a standby, `STORAGE_UNAVAILABLE` while its store is down,
/// `SERVER_SHUTTING_DOWN`).
pub(super) async fn readyz(State(app): State<App>) -> Response {
    let phase = app.phase.borrow().clone();
    match phase {
        Phase::Standby => not_leader(),
        Phase::Stopping => unavailable(),
        Phase::Active { store_down, .. } if store_down.load(Ordering::Relaxed) => {
            let mut response = relay_response(relay_core::storage_unavailable_response());
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from(NOT_LEADER_RETRY_AFTER_S),
            );
            response
        }
        Phase::Active { epoch, inputs, .. } => {
            let mut body = serde_json::json!({
                "status": "ready",
                "role": "active",
                "shards": inputs.served(),
            });
            if let Some(epoch) = epoch {
                body["epoch"] = epoch.into();
            }
            json_response(StatusCode::OK, &body)
        }
    }
}

/// On a standby, every route but the probes (and CORS preflights, answered outside) is refused
/// with 503 `NOT_LEADER` and `Retry-After`, WebSocket upgrades included, and the connection is
/// closed after the answer (`Connection: close`), also when the term ended while the request
/// was in flight: behind a TCP load balancer a kept-alive connection stays with the relay it
/// was first sent to, so a client would otherwise ask the old leader forever (found by the
/// simulator's failover topology, `--faults all` seed 0).
pub(super) async fn gate(State(app): State<App>, request: Request, next: Next) -> Response {
    let path = request.uri().path();
    let probe = path == HEALTHZ_PATH || path == READYZ_PATH;
    if app.is_standby() && !probe {
        return close_after(not_leader());
    }
    let response = next.run(request).await;
    if !probe && app.is_standby() && response.status() != StatusCode::SWITCHING_PROTOCOLS {
        return close_after(response);
    }
    response
}

fn close_after(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// 503 `NOT_LEADER` with `Retry-After`: this relay is a standby (another one is active, or
/// none yet); a load balancer sends clients to the active one, which `/readyz` names.
pub(super) fn not_leader() -> Response {
    let mut response = error_response(
        StatusCode::SERVICE_UNAVAILABLE,
        ErrorCode::other(NOT_LEADER),
        "this relay is a standby, not the active relay; retry shortly (or another address)",
    );
    response.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from(NOT_LEADER_RETRY_AFTER_S),
    );
    response
}

fn json_response(status: StatusCode, body: &serde_json::Value) -> Response {
    relay_response(HttpResponse {
        status: status.as_u16(),
        body: serde_json::to_vec(body).unwrap_or_default(),
        content_type: relay_core::http::CONTENT_TYPE_JSON,
        retry_after_s: None,
    })
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
    TooSlow,
    Failed,
}

/// Reads at most `limit` bytes of `body` (refusing at once when `Content-Length` already
/// says more), then drains a bounded excess (see [`OVERSIZE_DRAIN_BYTES`]). The body must
/// keep to `limits`' deadline ([`seam::net::ServeLimits::body_deadline_ms`]: an initial
/// allowance plus time earned by every byte at the minimum rate), else [`BodyRead::TooSlow`].
async fn read_body(body: Body, limit: usize, limits: &seam::net::ServeLimits) -> BodyRead {
    let mut body = body;
    if body.size_hint().lower() > limit as u64 {
        drain(body).await;
        return BodyRead::TooLarge;
    }
    // The deadline starts at the body's allowance and moves later with every byte received:
    // `Sleep::deadline` plus what the bytes earned (no clock read of our own).
    let mut deadline = std::pin::pin!(tokio::time::sleep(std::time::Duration::from_millis(
        limits.body_deadline_ms(0)
    )));
    let mut bytes = Vec::new();
    loop {
        let frame = tokio::select! {
            biased;
            () = &mut deadline => return BodyRead::TooSlow,
            frame = body.frame() => frame,
        };
        let frame = match frame {
            None => break,
            Some(Err(_)) => return BodyRead::Failed,
            Some(Ok(frame)) => frame,
        };
        if let Some(data) = frame.data_ref() {
            if bytes.len() + data.len() > limit {
                drain(body).await;
                return BodyRead::TooLarge;
            }
            bytes.extend_from_slice(data);
            let earned = limits.body_deadline_ms(data.len() as u64) - limits.body_deadline_ms(0);
            let later = deadline.deadline() + std::time::Duration::from_millis(earned);
            deadline.as_mut().reset(later);
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
    let body = match request_body(&app, &parts, body).await {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    // A request another node passed on carries its client's network; it is never passed on
    // again (see `onward`).
    let forwarded = app
        .onward
        .as_ref()
        .and_then(|onward| onward.client_of(&parts.headers));
    if app.test_mode
        && parts.method == Method::POST
        && parts.uri.path() == super::ADVANCE_CLOCK_PATH
    {
        if let (Some(onward), None) = (&app.onward, &forwarded) {
            let client = app.client_network(&peer, &parts.headers);
            if let Err(why) = onward.to_every_node(&parts, &body, &client).await {
                tracing::warn!(%why, "test mode: another node's clock did not move");
                return unavailable();
            }
        }
        return advance_clock(&app, &body).await;
    }
    let req = relay_request(&app, &parts, peer, forwarded.as_deref(), body);
    tracing::debug!(method = %parts.method, path = parts.uri.path(), "http request");
    let Some(cores) = app.cores() else {
        return app.refusal();
    };
    match cores.for_request(&req) {
        Ok(inputs) => ask_core(&app, inputs, req).await,
        Err(shard) => match (&app.onward, forwarded) {
            (Some(onward), None) => onward
                .request(shard, &parts, req.body, &req.remote_addr)
                .await
                .unwrap_or_else(|| app.not_here()),
            _ => app.not_here(),
        },
    }
}

/// Reads the request's body within its route's limit and the body deadline; `Err` is the
/// answer instead (413 too large, 408 too slow and the connection closed after it, 400
/// unreadable).
async fn request_body(app: &App, parts: &Parts, body: Body) -> Result<Vec<u8>, Response> {
    let limit = body_limit(parts.uri.path());
    match read_body(body, limit, &app.limits).await {
        BodyRead::Complete(body) => Ok(body),
        BodyRead::TooLarge => Err(too_large(limit)),
        BodyRead::TooSlow => {
            tracing::debug!(path = parts.uri.path(), "request body too slow: 408");
            Err(close_after(error_response(
                StatusCode::REQUEST_TIMEOUT,
                ErrorCode::BODY_TIMEOUT,
                &format!(
                    "the request body did not arrive in time ({} ms, plus 1 s per {} bytes \
                     received)",
                    app.limits.body_read_timeout_ms, app.limits.body_min_bytes_per_s
                ),
            )))
        }
        BodyRead::Failed => Err(error_response(
            StatusCode::BAD_REQUEST,
            ErrorCode::BAD_REQUEST,
            "the request body could not be read",
        )),
    }
}

/// The relay's request: method, path, query, `Authorization`, the client's network (`client`
/// when another node passed the request on, else the peer's), the body and every header
/// whose value is text (but the one another node's proof travels in).
fn relay_request(
    app: &App,
    parts: &Parts,
    peer: PeerAddr,
    client: Option<&str>,
    body: Vec<u8>,
) -> relay_core::HttpRequest {
    let mut req = relay_core::HttpRequest::new(
        relay_core::Method::parse(parts.method.as_str()),
        parts.uri.path(),
    );
    req.query = parts.uri.query().unwrap_or_default().to_owned();
    req.authorization = header_str(&parts.headers, header::AUTHORIZATION.as_str());
    // The client's network (its IP cut to the configured prefix, a port never): every
    // per-address bound of the core (PoW challenges, registrations, public routes, lookups)
    // counts one client per network.
    req.remote_addr = match client {
        Some(client) => client.to_owned(),
        None => app.client_network(&peer, &parts.headers),
    };
    req.body = body;
    req.headers = parts
        .headers
        .iter()
        .filter(|(name, _)| name.as_str() != super::onward::FORWARDED_HEADER)
        .filter_map(|(name, value)| {
            Some((name.as_str().to_owned(), value.to_str().ok()?.to_owned()))
        })
        .collect();
    req
}

/// Hands `req` to the core of its shard (`inputs`), with the resolution of a push
/// subscription's endpoint when the server resolves them, and answers with its response
/// (timed by route when metrics are on); the server's refusal when the core went away.
async fn ask_core(
    app: &App,
    inputs: tokio::sync::mpsc::Sender<Input>,
    mut req: relay_core::HttpRequest,
) -> Response {
    if let Some(resolver) = &app.resolver
        && req.method == relay_core::Method::Post
        && req.path == wire::http::paths::PUSH_SUBSCRIBE
        && req.authorization.is_some()
    {
        req.resolved = resolve_endpoint(&**resolver, &req.body).await;
    }
    let timed = app.metrics.as_ref().map(|metrics| {
        let route = relay_core::http::route_name(req.method, &req.path);
        (metrics, route, super::metrics::Stopwatch::start())
    });
    let (reply, answer) = oneshot::channel();
    if inputs.send(Input::Http { req, reply }).await.is_err() {
        return app.refusal();
    }
    match answer.await {
        Ok(response) => {
            if let Some((metrics, route, watch)) = timed {
                metrics.http_response(route, response.status, watch.seconds());
            }
            relay_response(response)
        }
        Err(_) => app.refusal(),
    }
}

/// The resolution of a push subscription's endpoint host, when the body names one (the relay
/// checks every address; see `relay_core::destination`). Resolved here, off the relay's task,
/// within [`relay_push::dns::RESOLVE_TIMEOUT_MS`]; a name that does not resolve gets an empty
/// list (the relay answers `PUSH_ENDPOINT_UNRESOLVABLE`). Anything unparsable is left to the
/// relay's own checks.
async fn resolve_endpoint(
    resolver: &dyn relay_push::dns::Resolve,
    body: &[u8],
) -> Option<relay_core::Resolution> {
    use relay_core::destination::{Host, parse_endpoint};
    let request: wire::http::PushSubscribeRequest = serde_json::from_slice(body).ok()?;
    let Host::Name(host) = parse_endpoint(&request.endpoint).ok()?.host else {
        return None;
    };
    let addrs = relay_push::dns::resolve_within(resolver, &host).await;
    Some(relay_core::Resolution { host, addrs })
}

/// Test mode: `{"ms": u64}` → the core moves its clock, fires due timers → `{"now_ms": u64}`
/// (a cluster node has every other node move theirs first).
async fn advance_clock(app: &App, body: &[u8]) -> Response {
    let Ok(AdvanceClock { ms }) = serde_json::from_slice::<AdvanceClock>(body) else {
        return error_response(
            StatusCode::BAD_REQUEST,
            ErrorCode::INVALID_JSON,
            "expected {\"ms\": <non-negative integer>}",
        );
    };
    let Some(cores) = app.cores() else {
        return app.refusal();
    };
    // The cores read one clock: the first moves it, then every other fires what became due
    // on its own shard (a move of 0); the answer waits for all of them. (A cluster node
    // serving no shard has no core to move it: refused.)
    let mut latest = None;
    for (i, inputs) in cores.all().enumerate() {
        let ms = if i == 0 { ms } else { 0 };
        let (reply, answer) = oneshot::channel();
        if inputs
            .send(Input::AdvanceClock { ms, reply })
            .await
            .is_err()
        {
            return app.refusal();
        }
        match answer.await {
            Ok(now) => latest = latest.max(Some(now)),
            Err(_) => return app.refusal(),
        }
    }
    match latest.ok_or(()) {
        Ok(now) => {
            let body = serde_json::to_vec(&AdvancedClock { now_ms: now.0 }).unwrap_or_default();
            relay_response(HttpResponse {
                status: StatusCode::OK.as_u16(),
                body,
                content_type: relay_core::http::CONTENT_TYPE_JSON,
                retry_after_s: None,
            })
        }
        Err(_) => app.refusal(),
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
        ErrorCode::SERVER_SHUTTING_DOWN,
        "the relay is shutting down; retry shortly",
    )
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
