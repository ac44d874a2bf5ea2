//! The network under the cases, type-erased so the same cases run over real loopback sockets
//! ([`sim::net::Tokio`]) and over turmoil ([`sim::net::Turmoil`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use futures_util::{SinkExt as _, StreamExt as _};
use sim::net::{
    Connector, Endpoint, HttpClient, HttpError, HttpRequest, HttpResponse, WsError, WsMessage,
    WsRequest, WsStream,
};

/// A boxed, sendable future.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One open WebSocket, whatever the network.
pub trait WsIo: Send {
    /// Sends one message.
    fn send(&mut self, msg: WsMessage) -> BoxFuture<'_, Result<(), String>>;
    /// The next message, `None` when the stream ended.
    fn recv(&mut self) -> BoxFuture<'_, Option<Result<WsMessage, String>>>;
}

struct StreamIo<S>(WsStream<S>);

impl<S> WsIo for StreamIo<S>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    fn send(&mut self, msg: WsMessage) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move { self.0.send(msg).await.map_err(|e| e.to_string()) })
    }

    fn recv(&mut self) -> BoxFuture<'_, Option<Result<WsMessage, String>>> {
        Box::pin(async move { self.0.next().await.map(|r| r.map_err(|e| e.to_string())) })
    }
}

/// HTTP requests and WebSocket upgrades against one relay.
pub trait Transport: Send + Sync {
    /// Sends one HTTP request.
    fn http(&self, req: HttpRequest) -> BoxFuture<'_, Result<HttpResponse, HttpError>>;
    /// Opens a WebSocket.
    fn ws(&self, req: WsRequest) -> BoxFuture<'_, Result<Box<dyn WsIo>, WsError>>;
    /// `http://host:port` of the relay.
    fn base_url(&self) -> String;
}

/// [`Transport`] over any [`Connector`] of `sim::net`.
#[derive(Debug)]
pub struct NetTransport<C> {
    client: HttpClient<C>,
}

impl<C: Connector> NetTransport<C> {
    /// A transport to `endpoint` through `connector`.
    pub fn new(connector: C, endpoint: Endpoint) -> Self {
        Self {
            client: HttpClient::new(connector, endpoint),
        }
    }

    /// Boxed as the shared trait object the runner hands to cases.
    pub fn shared(self) -> Arc<dyn Transport> {
        Arc::new(self)
    }
}

impl<C: Connector> Transport for NetTransport<C> {
    fn http(&self, req: HttpRequest) -> BoxFuture<'_, Result<HttpResponse, HttpError>> {
        Box::pin(self.client.send(req))
    }

    fn ws(&self, req: WsRequest) -> BoxFuture<'_, Result<Box<dyn WsIo>, WsError>> {
        Box::pin(async move {
            let stream = self.client.connect_ws(req).await?;
            Ok(Box::new(StreamIo(stream)) as Box<dyn WsIo>)
        })
    }

    fn base_url(&self) -> String {
        self.client.endpoint().to_string()
    }
}
