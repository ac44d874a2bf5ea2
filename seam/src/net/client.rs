//! A small HTTP/1.1 client over any [`Connector`].
//!
//! Built on hyper's connection-level API rather than hyper-util's pooled `Client`: that pool
//! reads `std::time::Instant::now()` for idle expiry, which would leak the wall clock into a
//! simulation. Here the pool is a bounded stack of idle connections, each closed rather than
//! reused once it was idle for [`IDLE_EXPIRY_MS`] on tokio's clock (turmoil's in a
//! simulation), with no timers.

use std::{
    fmt,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use bytes::Bytes;
use http::{
    HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode,
    header::{AUTHORIZATION, CONTENT_TYPE, HOST},
    uri::Authority,
};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::client::conn::{TrySendError, http1};
use hyper_util::rt::TokioIo;
use serde::{Serialize, de::DeserializeOwned};

use super::{Connector, Endpoint};

/// Timeout of a request (connect, send, and read the whole response) unless it sets its own.
pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 10_000;
/// Default largest response body accepted ([`HttpClient::with_max_response_bytes`]); a larger
/// one fails with [`HttpError::BodyTooLarge`].
pub const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;
/// Default bound of the idle-connection pool; when full, the oldest idle connection is closed.
pub const MAX_IDLE_CONNECTIONS: usize = 4;

/// A connection idle this long is closed rather than reused: well under the time servers close
/// an idle kept-alive connection after (this crate's server: its header-read timeout,
/// [`HEADER_READ_TIMEOUT_MS`](super::server::HEADER_READ_TIMEOUT_MS); hyper's default: 30 s).
/// A request written into a connection the server is closing at that moment fails
/// ("connection closed before message completed") and cannot be sent again safely: the server
/// may have read it.
pub const IDLE_EXPIRY_MS: u64 = 4_000;

type Sender = http1::SendRequest<Full<Bytes>>;

/// An idle connection of the pool: its endpoint, its sender, since when it is idle.
type Idle = (Authority, Sender, tokio::time::Instant);

/// Now on tokio's clock: the pool's one clock read (turmoil's simulated time in a simulation,
/// never the wall clock), for idle expiry.
#[allow(
    clippy::disallowed_methods,
    reason = "the IO shell's idle pool: tokio's clock, simulated under turmoil"
)]
fn pool_now() -> tokio::time::Instant {
    tokio::time::Instant::now()
}

/// One HTTP request: method, origin-form path (with query), headers, body.
#[derive(Clone, Debug)]
pub struct HttpRequest {
    method: Method,
    path_and_query: String,
    headers: Vec<(HeaderName, String)>,
    body: Bytes,
    timeout: Option<Duration>,
}

impl HttpRequest {
    /// A request with an empty body; `path_and_query` starts with `/`.
    pub fn new(method: Method, path_and_query: impl Into<String>) -> Self {
        Self {
            method,
            path_and_query: path_and_query.into(),
            headers: Vec::new(),
            body: Bytes::new(),
            timeout: None,
        }
    }

    /// A `GET`.
    pub fn get(path_and_query: impl Into<String>) -> Self {
        Self::new(Method::GET, path_and_query)
    }

    /// A `POST` with an empty body.
    pub fn post(path_and_query: impl Into<String>) -> Self {
        Self::new(Method::POST, path_and_query)
    }

    /// Adds a header (validated when the request is sent).
    pub fn header(mut self, name: HeaderName, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }

    /// Adds `Authorization: Bearer <token>`.
    pub fn bearer(self, token: &str) -> Self {
        self.header(AUTHORIZATION, format!("Bearer {token}"))
    }

    /// Sets a raw body.
    pub fn body(mut self, body: impl Into<Bytes>) -> Self {
        self.body = body.into();
        self
    }

    /// Sets a JSON body and `Content-Type: application/json`.
    pub fn json<T: Serialize + ?Sized>(self, value: &T) -> Result<Self, HttpError> {
        let body = serde_json::to_vec(value).map_err(HttpError::Json)?;
        Ok(self.header(CONTENT_TYPE, "application/json").body(body))
    }

    /// Overrides the client's timeout for this request.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// The method.
    pub fn method(&self) -> &Method {
        &self.method
    }

    /// The path and query.
    pub fn path_and_query(&self) -> &str {
        &self.path_and_query
    }

    fn to_hyper(&self, authority: &Authority) -> Result<Request<Full<Bytes>>, HttpError> {
        let mut builder = Request::builder()
            .method(self.method.clone())
            .uri(self.path_and_query.as_str())
            .header(HOST, authority.as_str());
        for (name, value) in &self.headers {
            let value = HeaderValue::try_from(value.as_str())
                .map_err(|_| HttpError::InvalidHeader(name.clone()))?;
            builder = builder.header(name, value);
        }
        builder
            .body(Full::new(self.body.clone()))
            .map_err(HttpError::InvalidRequest)
    }
}

/// A complete response: status, headers and the whole body.
#[derive(Clone, Debug)]
pub struct HttpResponse {
    /// Status code.
    pub status: StatusCode,
    /// Headers (note: hyper's server adds a `Date` read from the wall clock, even in simulation).
    pub headers: HeaderMap,
    /// The whole body.
    pub body: Bytes,
}

impl HttpResponse {
    /// Decodes the body as JSON.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, HttpError> {
        serde_json::from_slice(&self.body).map_err(HttpError::Json)
    }
}

/// Why a request produced no response.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The TCP connection could not be opened (on turmoil, a partitioned link refuses at once).
    #[error("connecting to {endpoint} failed: {source}")]
    Connect {
        /// Where we tried to connect.
        endpoint: Endpoint,
        /// The socket error.
        source: std::io::Error,
    },
    /// The HTTP exchange failed: handshake, connection closed or reset, malformed response.
    #[error("HTTP exchange failed: {0}")]
    Exchange(#[from] hyper::Error),
    /// No complete response within the timeout; the connection used is discarded.
    #[error("no response within {timeout_ms} ms")]
    Timeout {
        /// The timeout that elapsed.
        timeout_ms: u64,
    },
    /// The response body exceeded the client's limit ([`MAX_RESPONSE_BYTES`] by default).
    #[error("response body larger than the client's limit")]
    BodyTooLarge,
    /// Reading the response body failed (connection closed or reset mid-body).
    #[error("reading the response body failed: {0}")]
    Body(Box<dyn std::error::Error + Send + Sync>),
    /// A header value is not a valid HTTP header value.
    #[error("invalid value for header {0}")]
    InvalidHeader(HeaderName),
    /// The method or path do not make a valid request.
    #[error("invalid request: {0}")]
    InvalidRequest(http::Error),
    /// A JSON body could not be encoded or decoded.
    #[error("JSON: {0}")]
    Json(serde_json::Error),
}

impl HttpError {
    /// Whether the request timed out (the peer may or may not have processed it).
    pub fn is_timeout(&self) -> bool {
        matches!(self, Self::Timeout { .. })
    }
}

/// An HTTP/1.1 client for one [`Endpoint`] over a [`Connector`]; clones share the pool.
#[derive(Clone)]
pub struct HttpClient<C> {
    connector: C,
    endpoint: Endpoint,
    timeout: Duration,
    max_idle: usize,
    max_response_bytes: usize,
    idle: Arc<Mutex<Vec<Idle>>>,
}

impl<C: Connector> HttpClient<C> {
    /// A client for `endpoint` with [`DEFAULT_REQUEST_TIMEOUT_MS`] and
    /// [`MAX_IDLE_CONNECTIONS`].
    pub fn new(connector: C, endpoint: Endpoint) -> Self {
        Self {
            connector,
            endpoint,
            timeout: Duration::from_millis(DEFAULT_REQUEST_TIMEOUT_MS),
            max_idle: MAX_IDLE_CONNECTIONS,
            max_response_bytes: MAX_RESPONSE_BYTES,
            idle: Arc::default(),
        }
    }

    /// Sets the default per-request timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Bounds the idle pool; 0 opens a fresh connection for every request.
    pub fn with_max_idle(mut self, max_idle: usize) -> Self {
        self.max_idle = max_idle;
        self
    }

    /// Largest response body read; a larger one fails with [`HttpError::BodyTooLarge`]
    /// (default [`MAX_RESPONSE_BYTES`]).
    pub fn with_max_response_bytes(mut self, max: usize) -> Self {
        self.max_response_bytes = max;
        self
    }

    /// The endpoint requests go to.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Points this client (not its clones) at another endpoint.
    pub fn set_endpoint(&mut self, endpoint: Endpoint) {
        self.endpoint = endpoint;
    }

    /// The connector streams are opened with.
    pub fn connector(&self) -> &C {
        &self.connector
    }

    /// The default per-request timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Closes every idle connection (e.g. after a network change).
    pub fn clear_idle(&self) {
        self.lock_idle().clear();
    }

    /// Sends `request` and reads the whole response, within the request's timeout.
    ///
    /// Any status is a response (`Ok`); `Err` means no complete response arrived.
    pub async fn send(&self, request: HttpRequest) -> Result<HttpResponse, HttpError> {
        let timeout = request.timeout.unwrap_or(self.timeout);
        let hyper_request = request.to_hyper(self.endpoint.authority())?;
        tokio::time::timeout(timeout, self.exchange(hyper_request))
            .await
            .unwrap_or_else(|_elapsed| {
                Err(HttpError::Timeout {
                    timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
                })
            })
    }

    async fn exchange(&self, request: Request<Full<Bytes>>) -> Result<HttpResponse, HttpError> {
        let mut request = request;
        // A pooled connection may have been closed by the peer since its last use; hyper
        // hands the request back if it never went out, and then a fresh connection is used.
        while let Some(mut sender) = self.take_idle().await {
            match sender.try_send_request(request).await {
                Ok(response) => return self.finish(sender, response).await,
                Err(mut error) => match error.take_message() {
                    Some(unsent) => request = unsent,
                    None => return Err(HttpError::Exchange(error.into_error())),
                },
            }
        }
        let mut sender = self.open().await?;
        let response = sender
            .try_send_request(request)
            .await
            .map_err(TrySendError::into_error)?;
        self.finish(sender, response).await
    }

    async fn finish(
        &self,
        sender: Sender,
        response: http::Response<hyper::body::Incoming>,
    ) -> Result<HttpResponse, HttpError> {
        let (parts, body) = response.into_parts();
        let body = Limited::new(body, self.max_response_bytes)
            .collect()
            .await
            .map_err(|error| {
                if error.is::<LengthLimitError>() {
                    HttpError::BodyTooLarge
                } else {
                    HttpError::Body(error)
                }
            })?
            .to_bytes();
        self.put_idle(sender);
        Ok(HttpResponse {
            status: parts.status,
            headers: parts.headers,
            body,
        })
    }

    async fn open(&self) -> Result<Sender, HttpError> {
        let stream = self
            .connector
            .connect(&self.endpoint)
            .await
            .map_err(|source| HttpError::Connect {
                endpoint: self.endpoint.clone(),
                source,
            })?;
        let (sender, connection) = http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "HTTP connection ended with an error");
            }
        });
        Ok(sender)
    }

    /// Most recently used idle connection to the current endpoint that is still usable (open,
    /// and idle for less than [`IDLE_EXPIRY_MS`]).
    async fn take_idle(&self) -> Option<Sender> {
        loop {
            let (mut sender, since) = {
                let mut idle = self.lock_idle();
                let index = idle
                    .iter()
                    .rposition(|(authority, ..)| authority == self.endpoint.authority())?;
                let (_, sender, since) = idle.remove(index);
                (sender, since)
            };
            let fresh =
                pool_now().saturating_duration_since(since) < Duration::from_millis(IDLE_EXPIRY_MS);
            if fresh && !sender.is_closed() && sender.ready().await.is_ok() {
                return Some(sender);
            }
        }
    }

    fn put_idle(&self, sender: Sender) {
        if self.max_idle == 0 || sender.is_closed() {
            return;
        }
        let mut idle = self.lock_idle();
        if idle.len() >= self.max_idle {
            idle.remove(0);
        }
        idle.push((self.endpoint.authority().clone(), sender, pool_now()));
    }

    fn lock_idle(&self) -> std::sync::MutexGuard<'_, Vec<Idle>> {
        // The pool holds no invariant a panicking holder could break.
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<C: fmt::Debug> fmt::Debug for HttpClient<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpClient")
            .field("connector", &self.connector)
            .field("endpoint", &self.endpoint)
            .field("timeout", &self.timeout)
            .field("max_idle", &self.max_idle)
            .field("max_response_bytes", &self.max_response_bytes)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_origin_form_requests_with_host_and_bearer() {
        let authority = Authority::from_static("server:8080");
        let request = HttpRequest::post("/v1/echo?x=1")
            .bearer("t0k")
            .json(&serde_json::json!({"a": 1}))
            .unwrap()
            .to_hyper(&authority)
            .unwrap();
        assert_eq!(request.method(), Method::POST);
        assert_eq!(request.uri(), "/v1/echo?x=1");
        assert_eq!(request.headers()[HOST], "server:8080");
        assert_eq!(request.headers()[AUTHORIZATION], "Bearer t0k");
        assert_eq!(request.headers()[CONTENT_TYPE], "application/json");
    }

    #[test]
    fn rejects_header_values_that_would_split_the_request() {
        let authority = Authority::from_static("server:8080");
        let error = HttpRequest::get("/")
            .bearer("evil\r\nX-Injected: 1")
            .to_hyper(&authority)
            .unwrap_err();
        assert!(matches!(error, HttpError::InvalidHeader(name) if name == AUTHORIZATION));
    }
}
