//! The network under the cases, type-erased so the same cases run over real loopback sockets
//! ([`seam::net::Tokio`]) and over turmoil ([`seam::net::Turmoil`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use fault_proxy::{ConnectionFaults, FaultProxy, Plan};
use futures_util::{SinkExt as _, StreamExt as _};
use seam::net::{
    Connector, Endpoint, HttpClient, HttpError, HttpRequest, HttpResponse, WsError, WsMessage,
    WsRequest, WsStream,
};
use serde::Serialize;

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
    /// The network faults this transport put on the case's connections, if any.
    fn faults(&self) -> Option<CaseFaults> {
        None
    }
    /// A fresh transport for the same case with the destructive toxics off (a rerun after a
    /// failure a toxic may have caused), if this one has faults.
    fn calmer(&self) -> Option<Arc<dyn Transport>> {
        None
    }
}

/// The network faults one case ran under: enough to reproduce it (`--only ID --faults PLAN
/// --fault-seed SEED` gives the case the same draws, connection by connection).
#[derive(Debug, Clone, Serialize)]
pub struct CaseFaults {
    /// The case's proxy seed.
    pub seed: u64,
    /// The plan.
    pub plan: Plan,
    /// What each of the case's connections got, in accept order.
    pub connections: Vec<ConnectionFaults>,
}

impl CaseFaults {
    /// Whether a connection of the case drew a toxic that can make a request fail (a reset, a
    /// timeout, a data limit, a half-open socket).
    pub fn drew_destructive(&self) -> bool {
        self.connections
            .iter()
            .any(|c| c.toxics.iter().any(|t| t.toxic.is_destructive()))
    }
}

/// Offset of a rerun's loopback source address (see [`LoopbackSourceConnector::nth`]): a rerun
/// registers its accounts from another address than its first attempt, so per-address limits
/// do not count both.
const RERUN_SOURCE_OFFSET: usize = 50_000;

/// A case's own fault proxy in front of the relay, and a transport through it.
struct FaultedTransport {
    inner: Arc<dyn Transport>,
    proxy: FaultProxy,
    plan: Plan,
    seed: u64,
    relay: Endpoint,
    upstream: std::net::SocketAddr,
    source: usize,
}

impl FaultedTransport {
    /// Case `source`'s transport through a new proxy with `plan` (seed `seed`) to `upstream`.
    fn new(
        relay: Endpoint,
        upstream: std::net::SocketAddr,
        plan: Plan,
        seed: u64,
        source: usize,
    ) -> Self {
        let listen = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
        let proxy = FaultProxy::bind(listen, upstream, plan.clone(), seed, true)
            .expect("binding a loopback port for the case's fault proxy");
        let endpoint = Endpoint::parse(&format!("http://{}", proxy.local_addr()))
            .expect("a loopback socket address is a valid endpoint");
        Self {
            inner: NetTransport::new(LoopbackSourceConnector::nth(source), endpoint).shared(),
            proxy,
            plan,
            seed,
            relay,
            upstream,
            source,
        }
    }
}

impl Transport for FaultedTransport {
    fn http(&self, req: HttpRequest) -> BoxFuture<'_, Result<HttpResponse, HttpError>> {
        self.inner.http(req)
    }

    fn ws(&self, req: WsRequest) -> BoxFuture<'_, Result<Box<dyn WsIo>, WsError>> {
        self.inner.ws(req)
    }

    fn base_url(&self) -> String {
        self.relay.to_string()
    }

    fn faults(&self) -> Option<CaseFaults> {
        Some(CaseFaults {
            seed: self.seed,
            plan: self.plan.clone(),
            connections: self.proxy.connections(),
        })
    }

    fn calmer(&self) -> Option<Arc<dyn Transport>> {
        Some(Arc::new(Self::new(
            self.relay.clone(),
            self.upstream,
            self.plan.without_destructive(),
            self.seed,
            self.source + RERUN_SOURCE_OFFSET,
        )))
    }
}

/// Case `n` through its own fault proxy (seed `seed + n`) to `relay` at `upstream`, from the
/// loopback source address of [`loopback_factory`] (the proxy keeps it upstream).
///
/// Must be called inside the tokio runtime. Panics if no loopback port can be bound.
pub fn faulted_factory(
    relay: Endpoint,
    upstream: std::net::SocketAddr,
    plan: Plan,
    seed: u64,
) -> TransportFactory {
    Arc::new(move |n| {
        let case_seed = seed.wrapping_add(n as u64);
        Arc::new(FaultedTransport::new(
            relay.clone(),
            upstream,
            plan.clone(),
            case_seed,
            n,
        ))
    })
}

/// A loopback connector that connects from a chosen source address in `127.0.0.0/8`, so each
/// case looks like its own client to per-address limits (registration, PoW challenges).
#[derive(Debug, Clone, Copy)]
pub struct LoopbackSourceConnector {
    source: std::net::Ipv4Addr,
}

impl LoopbackSourceConnector {
    /// Connects from `127.0.<n / 250>.<n % 250 + 2>`.
    pub fn nth(n: usize) -> Self {
        let hi = u8::try_from((n / 250) % 250).unwrap_or(0);
        let lo = u8::try_from(n % 250).unwrap_or(0) + 2;
        Self {
            source: std::net::Ipv4Addr::new(127, 0, hi, lo),
        }
    }
}

impl Connector for LoopbackSourceConnector {
    type Stream = tokio::net::TcpStream;

    async fn connect(&self, endpoint: &Endpoint) -> std::io::Result<Self::Stream> {
        let addr = tokio::net::lookup_host((endpoint.host(), endpoint.port()))
            .await?
            .find(std::net::SocketAddr::is_ipv4)
            .ok_or_else(|| std::io::Error::other("no IPv4 address for the relay"))?;
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind(std::net::SocketAddr::from((self.source, 0)))?;
        let stream = socket.connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(stream)
    }
}

/// Builds the transport of the `n`th case.
pub type TransportFactory = Arc<dyn Fn(usize) -> Arc<dyn Transport> + Send + Sync>;

/// Every case on the same transport.
pub fn shared_factory(transport: Arc<dyn Transport>) -> TransportFactory {
    Arc::new(move |_| Arc::clone(&transport))
}

/// Each case from its own loopback source address (the relay must be on loopback).
pub fn loopback_factory(endpoint: Endpoint) -> TransportFactory {
    Arc::new(move |n| NetTransport::new(LoopbackSourceConnector::nth(n), endpoint.clone()).shared())
}

/// [`Transport`] over any [`Connector`] of `seam::net`.
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
