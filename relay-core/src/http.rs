//! HTTP requests and responses as plain values, routing, and the error body.
//!
//! Routing and body parsing live in the core so every shell (tokio, turmoil) and the
//! conformance suite see identical behaviour. The shell adds transport headers (CORS,
//! `Content-Type: application/json`) and nothing else.

use serde::Serialize;
use wire::{ErrorBody, ErrorCode};

/// HTTP methods the relay distinguishes.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum Method {
    /// `GET`
    Get,
    /// `POST`
    Post,
    /// `PUT`
    Put,
    /// `DELETE`
    Delete,
    /// Anything else (answered with 405 on known paths).
    Other,
}

impl Method {
    /// Parses a method name (case-sensitive, as HTTP requires).
    pub fn parse(name: &str) -> Self {
        match name {
            "GET" => Self::Get,
            "POST" => Self::Post,
            "PUT" => Self::Put,
            "DELETE" => Self::Delete,
            _ => Self::Other,
        }
    }
}

/// One HTTP request, as the shell received it.
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HttpRequest {
    /// The method.
    pub method: Method,
    /// The path, without the query (`/api/v1/friends`).
    pub path: String,
    /// The raw query string without `?` (empty when none).
    pub query: String,
    /// The `Authorization` header value, if any.
    pub authorization: Option<String>,
    /// The client address used for per-address limits (the shell resolves proxies, e.g.
    /// `CF-Connecting-IP`).
    pub remote_addr: String,
    /// The raw body.
    #[serde(with = "base64_bytes")]
    pub body: Vec<u8>,
    /// Other request headers the relay reads (names in lower case), e.g. the payment
    /// webhook's `x-payment-signature`. Shells may pass every header; the relay looks up only
    /// the ones it needs.
    pub headers: Vec<(String, String)>,
    /// The addresses the shell resolved for a host named in the body, when the route needs
    /// them (`POST /api/v1/push/subscribe`: the endpoint's host; see
    /// [`crate::destination`]). relay-core never resolves names itself.
    pub resolved: Option<Resolution>,
}

/// A host name and the addresses a shell's resolver returned for it (empty: it did not
/// resolve).
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Resolution {
    /// The name, as it appears in the request (compared case-insensitively, trailing dot
    /// ignored).
    pub host: String,
    /// Every address it resolved to.
    pub addrs: Vec<std::net::IpAddr>,
}

impl std::fmt::Debug for Resolution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The host belongs to a push endpoint, which is a capability: never printed.
        f.debug_struct("Resolution")
            .field("addrs", &self.addrs.len())
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for HttpRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print credentials, bodies (they may hold signatures or keys) or the client's
        // address.
        f.debug_struct("HttpRequest")
            .field("method", &self.method)
            .field("path", &self.path)
            .field(
                "authorization",
                &self.authorization.as_ref().map(|_| "<redacted>"),
            )
            // Client addresses stay out of logs.
            .field(
                "remote_addr",
                &(!self.remote_addr.is_empty()).then_some("<redacted>"),
            )
            .field("body_len", &self.body.len())
            .field("headers", &self.headers.len())
            .field("resolved", &self.resolved)
            .finish()
    }
}

impl HttpRequest {
    /// A request with no query, no credentials and no body.
    pub fn new(method: Method, path: impl Into<String>) -> Self {
        let path = path.into();
        let (path, query) = match path.split_once('?') {
            Some((p, q)) => (p.to_owned(), q.to_owned()),
            None => (path, String::new()),
        };
        Self {
            method,
            path,
            query,
            authorization: None,
            remote_addr: String::from("0.0.0.0"),
            body: Vec::new(),
            headers: Vec::new(),
            resolved: None,
        }
    }

    /// With the header `name: value` (`name` is matched case-insensitively).
    #[must_use]
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// The first value of header `name` (case-insensitive), if any.
    pub fn header_value(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// With a JSON body.
    #[must_use]
    pub fn json(mut self, body: &impl Serialize) -> Self {
        self.body = serde_json::to_vec(body).unwrap_or_default();
        self
    }

    /// With a raw body.
    #[must_use]
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// With the addresses `host` resolved to (see [`HttpRequest::resolved`]).
    #[must_use]
    pub fn resolved(mut self, host: impl Into<String>, addrs: Vec<std::net::IpAddr>) -> Self {
        self.resolved = Some(Resolution {
            host: host.into(),
            addrs,
        });
        self
    }

    /// With `Authorization: Bearer <token>`.
    #[must_use]
    pub fn bearer(mut self, token: &str) -> Self {
        self.authorization = Some(format!("Bearer {token}"));
        self
    }

    /// From the client address `addr`.
    #[must_use]
    pub fn from_addr(mut self, addr: impl Into<String>) -> Self {
        self.remote_addr = addr.into();
        self
    }
}

/// `Content-Type` of JSON bodies (every response but a media download).
pub const CONTENT_TYPE_JSON: &str = "application/json";
/// `Content-Type` of raw bytes (media download, M4).
pub const CONTENT_TYPE_OCTET_STREAM: &str = "application/octet-stream";

/// One HTTP response: a status, a body and its content type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpResponse {
    /// The status code.
    pub status: u16,
    /// The body: JSON unless `content_type` says otherwise.
    pub body: Vec<u8>,
    /// The `Content-Type` the shell sends: [`CONTENT_TYPE_JSON`] except for raw media bytes
    /// ([`CONTENT_TYPE_OCTET_STREAM`]).
    pub content_type: &'static str,
    /// The `Retry-After` header the shell sends, in seconds: set on every 429.
    pub retry_after_s: Option<u64>,
}

impl HttpResponse {
    /// `status` with `body` serialised as JSON.
    pub fn json(status: u16, body: &impl Serialize) -> Self {
        match serde_json::to_vec(body) {
            Ok(body) => Self {
                status,
                body,
                content_type: CONTENT_TYPE_JSON,
                retry_after_s: None,
            },
            Err(_) => Self::error(
                500,
                &ErrorCode::BAD_REQUEST,
                "response serialisation failed",
            ),
        }
    }

    /// An error response with the standard body.
    pub fn error(status: u16, code: &ErrorCode, message: &str) -> Self {
        let body = serde_json::to_vec(&ErrorBody::new(code.clone(), message)).unwrap_or_default();
        Self {
            status,
            body,
            content_type: CONTENT_TYPE_JSON,
            retry_after_s: (status == 429).then_some(crate::limits::DEFAULT_RETRY_AFTER_S),
        }
    }

    /// `status` with raw bytes (`application/octet-stream`).
    pub fn bytes(status: u16, body: Vec<u8>) -> Self {
        Self {
            status,
            body,
            content_type: CONTENT_TYPE_OCTET_STREAM,
            retry_after_s: None,
        }
    }

    /// The body parsed as JSON (tests and shells).
    pub fn body_json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }

    /// The `error` code of an error body, if any.
    pub fn error_code(&self) -> Option<String> {
        self.body_json()
            .get("error")
            .and_then(|e| e.as_str())
            .map(str::to_owned)
    }
}

/// A refusal: status, stable code and a human message (never containing secrets).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status} {code}: {message}")]
pub struct ApiError {
    /// HTTP status.
    pub status: u16,
    /// Stable code.
    pub code: ErrorCode,
    /// Human sentence.
    pub message: String,
    /// Seconds until a retry can succeed (`Retry-After`); 429s without one get
    /// [`DEFAULT_RETRY_AFTER_S`](crate::limits::DEFAULT_RETRY_AFTER_S).
    pub retry_after_s: Option<u64>,
}

impl ApiError {
    /// With the code's default status. Counted as the refusal probe `refuse:CODE@file` of
    /// the module that decided it (feature `probes`).
    #[cfg_attr(feature = "probes", track_caller)]
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        probes::refusal(code.as_str());
        Self {
            status: code.default_status(),
            code,
            message: message.into(),
            retry_after_s: None,
        }
    }

    /// With an explicit status (a refusal probe, as [`new`](Self::new)).
    #[cfg_attr(feature = "probes", track_caller)]
    pub fn with_status(status: u16, code: ErrorCode, message: impl Into<String>) -> Self {
        probes::refusal(code.as_str());
        Self {
            status,
            code,
            message: message.into(),
            retry_after_s: None,
        }
    }

    /// 429 `RATE_LIMITED` that may be retried after `retry_after_ms` (rounded up to whole
    /// seconds, at least 1).
    #[cfg_attr(feature = "probes", track_caller)]
    pub fn rate_limited(message: impl Into<String>, retry_after_ms: u64) -> Self {
        Self {
            retry_after_s: Some(retry_after_ms.div_ceil(1000).max(1)),
            ..Self::new(ErrorCode::RATE_LIMITED, message) // probe: refused by the caller
        }
    }

    /// As a response.
    pub fn into_response(self) -> HttpResponse {
        let mut response = HttpResponse::error(self.status, &self.code, &self.message);
        if self.retry_after_s.is_some() {
            response.retry_after_s = self.retry_after_s;
        }
        response
    }
}

impl From<wire::http::BodyError> for ApiError {
    #[cfg_attr(feature = "probes", track_caller)]
    fn from(e: wire::http::BodyError) -> Self {
        Self::new(e.code(), e.to_string())
    }
}

/// Every route the relay serves, by area.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Route {
    PowChallenge,
    Register,
    AuthChallenge,
    AuthVerify,
    WsTicket,
    Friends,
    FriendRequest,
    FriendAcceptPath(String),
    FriendAcceptBody,
    FriendReject(String),
    User(String),
    ActiveConversations,
    StorageEstimate,
    // ---- media, push, calls
    MediaInit,
    MediaChunk(String),
    MediaComplete(String),
    MediaDownload,
    PushVapidKey,
    PushSubscribe,
    PushRegister,
    PushDisable,
    IceConfig,
    // ---- channels, vanity aliases, payment orders
    ChannelSearch,
    ChannelsMine,
    ChannelCreate,
    Channel(String),
    ChannelSubscribe(String),
    ChannelPosts(String),
    ChannelForSale(String),
    ChannelBuy(String),
    ChannelQuotaBuy,
    ListChannel,
    VanitySearch,
    VanityPurchase,
    VanityBind,
    VanityReserve,
    OrderStatus(String),
    PaymentWebhook,
}

/// Which shard of a sharded relay decides a route (`crate::relay` forwards a request that
/// reached another, `crate::handoff::Forwarded`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Home {
    /// Whichever shard it reaches (no route is, today: every authenticated route is decided
    /// at its caller's shard, or reaches the registry through it).
    Any,
    /// The caller's (its token's subject), the only shard that checks the token's session:
    /// what an account keeps (contacts, queues, tickets, push targets), and the reads of an
    /// authenticated caller (a user lookup, the ICE servers, the push key). A friendship's
    /// change goes on from there to the pair's owner.
    Caller,
    /// The shard of the account the body names (`user_uuid`): sign-in.
    Named,
    /// The registry shard, shard 0: what the whole relay shares (registration's names and its
    /// proof of work, channels, vanity aliases, orders and payments, media).
    Registry,
}

impl Route {
    /// The shard that decides this route ([`Home`]).
    pub(crate) fn home(&self) -> Home {
        match self {
            Self::User(_)
            | Self::PushVapidKey
            | Self::IceConfig
            | Self::WsTicket
            | Self::Friends
            | Self::FriendRequest
            | Self::FriendAcceptPath(_)
            | Self::FriendAcceptBody
            | Self::FriendReject(_)
            | Self::ActiveConversations
            | Self::StorageEstimate
            | Self::PushSubscribe
            | Self::PushRegister
            | Self::PushDisable => Home::Caller,
            Self::AuthChallenge | Self::AuthVerify => Home::Named,
            Self::PowChallenge
            | Self::Register
            | Self::MediaInit
            | Self::MediaChunk(_)
            | Self::MediaComplete(_)
            | Self::MediaDownload
            | Self::ChannelSearch
            | Self::ChannelsMine
            | Self::ChannelCreate
            | Self::Channel(_)
            | Self::ChannelSubscribe(_)
            | Self::ChannelPosts(_)
            | Self::ChannelForSale(_)
            | Self::ChannelBuy(_)
            | Self::ChannelQuotaBuy
            | Self::ListChannel
            | Self::VanitySearch
            | Self::VanityPurchase
            | Self::VanityBind
            | Self::VanityReserve
            | Self::OrderStatus(_)
            | Self::PaymentWebhook => Home::Registry,
        }
    }

    /// The route's path template (`users/{alias}`): a fixed name per route, never a value
    /// taken from the request (shells label metrics with it).
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Self::PowChallenge => "pow/challenge",
            Self::Register => "register",
            Self::AuthChallenge => "auth/challenge",
            Self::AuthVerify => "auth/verify",
            Self::WsTicket => "ws/ticket",
            Self::Friends => "friends",
            Self::FriendRequest => "friends/request",
            Self::FriendAcceptPath(_) => "friends/{id}/accept",
            Self::FriendAcceptBody => "friends/accept",
            Self::FriendReject(_) => "friends/{id}/reject",
            Self::User(_) => "users/{alias}",
            Self::ActiveConversations => "conversations/active",
            Self::StorageEstimate => "storage/estimate",
            Self::MediaInit => "media/upload-parts/init",
            Self::MediaChunk(_) => "media/upload-parts/{id}/chunk",
            Self::MediaComplete(_) => "media/upload-parts/{id}/complete",
            Self::MediaDownload => "media/download",
            Self::PushVapidKey => "push/vapid-key",
            Self::PushSubscribe => "push/subscribe",
            Self::PushRegister => "push/register",
            Self::PushDisable => "push/disable",
            Self::IceConfig => "calls/ice-config",
            Self::ChannelSearch => "channels/search",
            Self::ChannelsMine => "channels/mine",
            Self::ChannelCreate => "channels",
            Self::Channel(_) => "channels/{id}",
            Self::ChannelSubscribe(_) => "channels/{id}/subscribe",
            Self::ChannelPosts(_) => "channels/{id}/posts",
            Self::ChannelForSale(_) => "channels/{id}/forsale",
            Self::ChannelBuy(_) => "channels/{id}/buy",
            Self::ChannelQuotaBuy => "channels/quota/buy",
            Self::ListChannel => "vanity/list-channel",
            Self::VanitySearch => "vanity/search",
            Self::VanityPurchase => "vanity/purchase",
            Self::VanityBind => "vanity/bind",
            Self::VanityReserve => "vanity/reserve",
            Self::OrderStatus(_) => "vanity/order/{id}/status",
            Self::PaymentWebhook => "payments/webhook",
        }
    }
}

/// Every name [`route_name`] can return.
pub const ROUTE_NAMES: &[&str] = &[
    "pow/challenge",
    "register",
    "auth/challenge",
    "auth/verify",
    "ws/ticket",
    "friends",
    "friends/request",
    "friends/{id}/accept",
    "friends/accept",
    "friends/{id}/reject",
    "users/{alias}",
    "conversations/active",
    "storage/estimate",
    "media/upload-parts/init",
    "media/upload-parts/{id}/chunk",
    "media/upload-parts/{id}/complete",
    "media/download",
    "push/vapid-key",
    "push/subscribe",
    "push/register",
    "push/disable",
    "calls/ice-config",
    "channels/search",
    "channels/mine",
    "channels",
    "channels/{id}",
    "channels/{id}/subscribe",
    "channels/{id}/posts",
    "channels/{id}/forsale",
    "channels/{id}/buy",
    "channels/quota/buy",
    "vanity/list-channel",
    "vanity/search",
    "vanity/purchase",
    "vanity/bind",
    "vanity/reserve",
    "vanity/order/{id}/status",
    "payments/webhook",
    UNKNOWN_ROUTE,
];

/// What [`route_name`] returns for a path no route serves (or a method it does not accept).
pub const UNKNOWN_ROUTE: &str = "unknown";

/// The path template of the route `method path` goes to (`users/{alias}`, `channels/{id}`),
/// or [`UNKNOWN_ROUTE`]: one of [`ROUTE_NAMES`], never a part of the request itself.
pub fn route_name(method: Method, path: &str) -> &'static str {
    route(method, path).map_or(UNKNOWN_ROUTE, |r| r.name())
}

/// Resolves `method path` to a route, or the 404 / 405 answer.
// Long on purpose: the route table, one arm per path of PROTOCOL.md §1.
pub(crate) fn route(method: Method, path: &str) -> Result<Route, ApiError> {
    let segs: Vec<&str> = path.split('/').collect();
    // `segs[0]` is the empty string before the leading slash.
    let (route, allowed): (Route, &[Method]) = match segs.as_slice() {
        ["", "api", "v1", "pow", "challenge"] => {
            (Route::PowChallenge, &[Method::Get, Method::Post])
        }
        ["", "api", "v1", "register"] => (Route::Register, &[Method::Post]),
        ["", "api", "v1", "auth", "challenge"] => (Route::AuthChallenge, &[Method::Post]),
        ["", "api", "v1", "auth", "verify"] => (Route::AuthVerify, &[Method::Post]),
        ["", "api", "v1", "ws", "ticket"] => (Route::WsTicket, &[Method::Post]),
        ["", "api", "v1", "friends"] => (Route::Friends, &[Method::Get]),
        ["", "api", "v1", "friends", "request"] => (Route::FriendRequest, &[Method::Post]),
        ["", "api", "v1", "friends", "accept"] => (Route::FriendAcceptBody, &[Method::Post]),
        ["", "api", "v1", "friends", id, "accept"] => (
            Route::FriendAcceptPath((*id).to_owned()),
            &[Method::Put, Method::Post],
        ),
        ["", "api", "v1", "friends", id, "reject"] => {
            (Route::FriendReject((*id).to_owned()), &[Method::Post])
        }
        ["", "api", "v1", "users", alias] if !alias.is_empty() => {
            (Route::User((*alias).to_owned()), &[Method::Get])
        }
        ["", "api", "v1", "conversations", "active"] => {
            (Route::ActiveConversations, &[Method::Get])
        }
        ["", "api", "v1", "storage", "estimate"] => (Route::StorageEstimate, &[Method::Get]),
        ["", "api", "v1", "media", "upload-parts", "init"] => (Route::MediaInit, &[Method::Post]),
        ["", "api", "v1", "media", "upload-parts", id, "chunk"] if !id.is_empty() => (
            Route::MediaChunk((*id).to_owned()),
            &[Method::Post, Method::Put],
        ),
        ["", "api", "v1", "media", "upload-parts", id, "complete"] if !id.is_empty() => {
            (Route::MediaComplete((*id).to_owned()), &[Method::Post])
        }
        ["", "api", "v1", "media", "download"] => (Route::MediaDownload, &[Method::Get]),
        ["", "api", "v1", "push", "vapid-key"] => (Route::PushVapidKey, &[Method::Get]),
        ["", "api", "v1", "push", "subscribe"] => (Route::PushSubscribe, &[Method::Post]),
        ["", "api", "v1", "push", "register"] => (Route::PushRegister, &[Method::Post]),
        ["", "api", "v1", "push", "disable"] => (Route::PushDisable, &[Method::Post]),
        ["", "api", "v1", "calls", "ice-config"] => (Route::IceConfig, &[Method::Get]),
        ["", "api", "v1", "channels"] => (Route::ChannelCreate, &[Method::Post]),
        ["", "api", "v1", "channels", "search"] => (Route::ChannelSearch, &[Method::Get]),
        ["", "api", "v1", "channels", "mine"] => (Route::ChannelsMine, &[Method::Get]),
        ["", "api", "v1", "channels", "quota", "buy"] => (Route::ChannelQuotaBuy, &[Method::Post]),
        ["", "api", "v1", "channels", id] if !id.is_empty() => {
            (Route::Channel((*id).to_owned()), &[Method::Get])
        }
        ["", "api", "v1", "channels", id, "subscribe"] => (
            Route::ChannelSubscribe((*id).to_owned()),
            &[Method::Post, Method::Delete],
        ),
        ["", "api", "v1", "channels", id, "posts"] => (
            Route::ChannelPosts((*id).to_owned()),
            &[Method::Post, Method::Get],
        ),
        ["", "api", "v1", "channels", id, "forsale"] => {
            (Route::ChannelForSale((*id).to_owned()), &[Method::Put])
        }
        ["", "api", "v1", "channels", id, "buy"] => {
            (Route::ChannelBuy((*id).to_owned()), &[Method::Post])
        }
        ["", "api", "v1", "vanity", "list-channel"] => (Route::ListChannel, &[Method::Post]),
        ["", "api", "v1", "vanity", "search"] => (Route::VanitySearch, &[Method::Get]),
        ["", "api", "v1", "vanity", "purchase"] => (Route::VanityPurchase, &[Method::Post]),
        ["", "api", "v1", "vanity", "bind"] => (Route::VanityBind, &[Method::Post]),
        ["", "api", "v1", "vanity", "reserve"] => (Route::VanityReserve, &[Method::Post]),
        ["", "api", "v1", "vanity", "order", id, "status"] => {
            (Route::OrderStatus((*id).to_owned()), &[Method::Get])
        }
        ["", "api", "v1", "payments", "webhook"] => (Route::PaymentWebhook, &[Method::Post]),
        _ => {
            return Err(ApiError::new(ErrorCode::NOT_FOUND, "no such route"));
        }
    };
    if allowed.contains(&method) {
        Ok(route)
    } else {
        Err(ApiError::new(
            ErrorCode::METHOD_NOT_ALLOWED,
            "this route does not accept that method",
        ))
    }
}

/// Parses `a=1&b=2` without percent-decoding (the reference clients never encode WS query
/// values, and every value the relay reads is URL-safe).
pub(crate) fn query_param<'a>(query: &'a str, name: &str) -> Option<&'a str> {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('=').or(Some((kv, ""))))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_names_are_templates_never_request_values() {
        assert_eq!(
            route_name(Method::Get, "/api/v1/users/alice-42"),
            "users/{alias}"
        );
        assert_eq!(
            route_name(Method::Post, "/api/v1/channels/c-123/posts"),
            "channels/{id}/posts"
        );
        assert_eq!(
            route_name(Method::Get, "/api/v1/nothing/here"),
            UNKNOWN_ROUTE
        );
        assert_eq!(
            route_name(Method::Delete, "/api/v1/register"),
            UNKNOWN_ROUTE
        );
        for name in ROUTE_NAMES {
            assert!(!name.contains("alice") && !name.contains("c-123"));
        }
    }

    /// What the shell logs at trace level never holds the client's address, its token, its
    /// query (tickets) or its body.
    #[test]
    fn debug_of_a_request_redacts_address_credentials_query_and_body() {
        let mut r = HttpRequest::new(Method::Post, "/api/v1/ws/ticket");
        r.remote_addr = "203.0.113.7:51000".into();
        r.authorization = Some("Bearer eyJ-secret-token".into());
        r.query = "ticket=t-secret".into();
        r.body = b"{\"payload\":\"CANARY-body\"}".to_vec();
        let text = format!("{r:?}");
        for secret in ["203.0.113.7", "eyJ-secret-token", "t-secret", "CANARY-body"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert!(text.contains("/api/v1/ws/ticket"), "{text}");
    }

    #[test]
    fn routing() {
        assert_eq!(route(Method::Get, "/api/v1/friends"), Ok(Route::Friends));
        assert_eq!(
            route(Method::Put, "/api/v1/friends/12/accept"),
            Ok(Route::FriendAcceptPath("12".into()))
        );
        assert_eq!(
            route(Method::Post, "/api/v1/friends").unwrap_err().status,
            405
        );
        assert_eq!(route(Method::Get, "/api/v1/nope").unwrap_err().status, 404);
        assert_eq!(
            route(Method::Get, "/api/v1/users/").unwrap_err().status,
            404
        );
    }

    #[test]
    fn query() {
        assert_eq!(query_param("user_uuid=a&ticket=b", "ticket"), Some("b"));
        assert_eq!(query_param("user_uuid=a&ticket", "ticket"), Some(""));
        assert_eq!(query_param("", "ticket"), None);
    }
}

/// Bodies as standard base64 text when a request or a response crosses between nodes
/// (`crate::handoff::envelope`).
mod base64_bytes {
    use base64::Engine as _;
    use serde::{Deserialize as _, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = std::borrow::Cow::<'de, str>::deserialize(d)?;
        base64::engine::general_purpose::STANDARD
            .decode(text.as_bytes())
            .map_err(serde::de::Error::custom)
    }
}

/// An [`HttpResponse`] as it crosses between nodes (`crate::handoff::envelope`): its content
/// type by name, one of the types the relay answers with.
#[derive(serde::Serialize, serde::Deserialize)]
struct ResponseWire {
    status: u16,
    #[serde(with = "base64_bytes")]
    body: Vec<u8>,
    content_type: String,
    retry_after_s: Option<u64>,
}

impl Serialize for HttpResponse {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        ResponseWire {
            status: self.status,
            body: self.body.clone(),
            content_type: self.content_type.to_owned(),
            retry_after_s: self.retry_after_s,
        }
        .serialize(s)
    }
}

impl<'de> serde::Deserialize<'de> for HttpResponse {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let r = ResponseWire::deserialize(d)?;
        let content_type = [CONTENT_TYPE_JSON, CONTENT_TYPE_OCTET_STREAM]
            .into_iter()
            .find(|known| *known == r.content_type)
            .ok_or_else(|| {
                serde::de::Error::custom(format!(
                    "content type {:?} is not one the relay answers with",
                    r.content_type
                ))
            })?;
        Ok(Self {
            status: r.status,
            body: r.body,
            content_type,
            retry_after_s: r.retry_after_s,
        })
    }
}
