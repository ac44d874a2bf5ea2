//! WebSocket client: tokio-tungstenite's handshake over a [`Connector`]'s stream.

use std::time::Duration;

use http::{HeaderName, HeaderValue, header::AUTHORIZATION};
use tokio_tungstenite::tungstenite::{self, client::IntoClientRequest};

use super::{Connector, HttpClient};

/// A WebSocket frame or control message (tungstenite's type).
pub type WsMessage = tungstenite::Message;
/// An open WebSocket over a connector's stream: a `Stream` of [`WsMessage`] results and a
/// `Sink<WsMessage>` (use `futures_util::{SinkExt, StreamExt}`).
pub type WsStream<S> = tokio_tungstenite::WebSocketStream<S>;

/// What to open: a path (with query) on the client's endpoint, plus headers.
#[derive(Clone, Debug)]
pub struct WsRequest {
    path_and_query: String,
    headers: Vec<(HeaderName, String)>,
    timeout: Option<Duration>,
}

impl WsRequest {
    /// A WebSocket request for `path_and_query` (starts with `/`).
    pub fn new(path_and_query: impl Into<String>) -> Self {
        Self {
            path_and_query: path_and_query.into(),
            headers: Vec::new(),
            timeout: None,
        }
    }

    /// Adds a header to the upgrade request.
    pub fn header(mut self, name: HeaderName, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }

    /// Adds `Authorization: Bearer <token>` to the upgrade request.
    pub fn bearer(self, token: &str) -> Self {
        self.header(AUTHORIZATION, format!("Bearer {token}"))
    }

    /// Overrides the client's timeout for the connect and the handshake.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
}

/// Why a WebSocket could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum WsError {
    /// The TCP connection could not be opened.
    #[error("connecting failed: {0}")]
    Connect(std::io::Error),
    /// The upgrade was refused (the `Http` variant carries the server's response) or failed.
    #[error("WebSocket handshake failed: {0}")]
    Handshake(#[from] tungstenite::Error),
    /// A header value is not a valid HTTP header value.
    #[error("invalid value for header {0}")]
    InvalidHeader(HeaderName),
    /// Not open within the timeout.
    #[error("WebSocket not open within {timeout_ms} ms")]
    Timeout {
        /// The timeout that elapsed.
        timeout_ms: u64,
    },
}

impl<C: Connector> HttpClient<C> {
    /// Opens a WebSocket to `request`'s path on this client's endpoint, over a new connection
    /// from the same connector, within the request's (or the client's) timeout.
    pub async fn connect_ws(&self, request: WsRequest) -> Result<WsStream<C::Stream>, WsError> {
        let timeout = request.timeout.unwrap_or(self.timeout());
        let mut upgrade = self
            .endpoint()
            .ws_url(&request.path_and_query)
            .into_client_request()?;
        for (name, value) in &request.headers {
            let value = HeaderValue::try_from(value.as_str())
                .map_err(|_| WsError::InvalidHeader(name.clone()))?;
            upgrade.headers_mut().append(name, value);
        }
        let open = async {
            let stream = self
                .connector()
                .connect(self.endpoint())
                .await
                .map_err(WsError::Connect)?;
            let (socket, _response) = tokio_tungstenite::client_async(upgrade, stream).await?;
            Ok(socket)
        };
        tokio::time::timeout(timeout, open)
            .await
            .unwrap_or_else(|_elapsed| {
                Err(WsError::Timeout {
                    timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
                })
            })
    }
}
