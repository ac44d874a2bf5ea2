//! A cluster node's routing: clients reach the cluster at one address (a load balancer spreads
//! their connections over the nodes), and a node passes a request or a WebSocket upgrade whose
//! shard another node serves on to that node, which answers it as its own.
//!
//! * **Requests**: the request (method, path and query, every header but the hop-by-hop ones,
//!   the body already read within its route's limit) goes to the owner's address as the
//!   membership's directory names it, on a pooled connection per node, and the owner's answer
//!   (status, headers but the hop-by-hop ones, a body of at most
//!   [`MAX_ONWARD_RESPONSE_BYTES`]) is the client's. No answer within [`ONWARD_TIMEOUT_MS`]:
//!   503 `NOT_LEADER`; the request may have been applied, as when any answer is lost, and the
//!   relay's idempotent routes (client ids) make the client's retry safe.
//! * **Upgrades**: the upgrade request goes on to the owner on a connection of its own, and the
//!   owner's answer is the client's: a refusal as it is (its body at most
//!   [`MAX_ONWARD_REFUSAL_BYTES`]), or `101` with the owner's handshake headers, after which
//!   the two connections are joined byte for byte until either ends or this server stops.
//!   The owner runs the socket (frames, limits, pings, its close); the join holds two fixed
//!   buffers, so a client that stops reading stops the owner's writes and the owner's write
//!   deadline closes it, freeing both connections.
//! * **One hop**: what another node passed on is never passed on again; if its shard moved
//!   meanwhile it is refused 503 `NOT_LEADER`, and the client tries again.
//! * **The client's network** travels in [`FORWARDED_HEADER`]: `<node> <time> <network>
//!   <HMAC-SHA256 under the cluster key>`, within
//!   [`PEER_PROOF_SKEW_S`](super::peers::PEER_PROOF_SKEW_S) of the owner's clock, so that the
//!   owner's per-address bounds (proofs of work, registrations, lookups) count the client, not
//!   the node. A value that does not verify is ignored (the request counts as the sending
//!   address's and may be passed on). The per-address connection cap does not count the other
//!   nodes' addresses (each connection they pass on was counted there for its client).
//! * **Failures**: no node serves the shard now, its node cannot be reached within
//!   [`ONWARD_CONNECT_TIMEOUT_MS`] or does not answer:
//!   503 `NOT_LEADER` with `Retry-After`; by the client's retry the directory names the new
//!   owner. Nothing is queued here: the hop holds a request only while it is being answered.

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt,
    future::Future,
    io,
    net::{IpAddr, SocketAddr},
    pin::Pin,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    body::Body,
    extract::Request,
    http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header, request::Parts},
    response::Response,
};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty, Limited};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use relay_core::handoff::ShardId;
use seam::clock::Clock;
use seam::net::{Connector, Endpoint, HttpClient, Network};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tracing::debug;

use super::cluster_key::{self, ClusterKey};
use super::metrics::{Metrics, PassedKind, Stopwatch};

/// The header a passed-on request carries its client's network in, under the cluster key.
pub const FORWARDED_HEADER: &str = "x-securechat-forwarded";
/// A request passed on is answered within this, in ms, or refused 503 `NOT_LEADER`.
pub const ONWARD_TIMEOUT_MS: u64 = 30_000;
/// An upgrade passed on is answered by the owner (connection and handshake) within this, in
/// ms, or refused 503 `NOT_LEADER`.
pub const ONWARD_CONNECT_TIMEOUT_MS: u64 = 3_000;
/// The largest answer a node reads back for a request it passed on: a media part and room
/// for its headers (larger: 503).
pub const MAX_ONWARD_RESPONSE_BYTES: usize = wire::limits::MAX_MEDIA_PART_BYTES + 64 * 1024;
/// The largest body of a refused upgrade a node reads back from the owner.
pub const MAX_ONWARD_REFUSAL_BYTES: usize = 64 * 1024;
/// Nodes a server keeps a connection pool for; past it, the pools start over.
pub const MAX_ONWARD_POOLS: usize = 256;

/// Who serves each shard, as this node's membership knows it now (empty between
/// memberships).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Routes {
    /// This node's name (the forwarded values it signs).
    pub(crate) node: String,
    /// This node's own address in `shards`: a shard the directory still names it for after
    /// the shard left is not passed on (to itself), but refused.
    pub(crate) address: String,
    /// Each shard served by some node: that node's address.
    pub(crate) shards: BTreeMap<u16, String>,
}

impl Routes {
    /// The IP addresses of the nodes, which the per-address connection cap does not count
    /// (addresses given by host name are not resolved, and are counted; this node's own is
    /// among them, so a client on its machine is not capped either).
    pub(crate) fn node_ips(&self) -> BTreeSet<IpAddr> {
        self.shards
            .values()
            .filter_map(|address| address.parse::<SocketAddr>().ok())
            .map(|address| address.ip())
            .collect()
    }
}

/// The way from this node to the others, for what it passes on (see the module doc).
#[derive(Clone)]
pub(crate) struct Onward {
    key: ClusterKey,
    clock: Arc<dyn Clock>,
    routes: watch::Receiver<Routes>,
    hop: Arc<dyn Hop>,
    /// The server's stop: joined connections end with it.
    stop: watch::Receiver<bool>,
    /// Counts and times what is passed on, when the server has metrics.
    metrics: Option<Metrics>,
}

impl fmt::Debug for Onward {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Onward")
            .field("routes", &*self.routes.borrow())
            .finish_non_exhaustive()
    }
}

impl Onward {
    /// The way on over network `N`, to the nodes `routes` names, signed with `key` at
    /// `clock`'s time; joined connections end when `stop` turns true; counted in `metrics`.
    pub(crate) fn new<N: Network>(
        key: ClusterKey,
        clock: Arc<dyn Clock>,
        (routes, stop): (watch::Receiver<Routes>, watch::Receiver<bool>),
        metrics: Option<Metrics>,
    ) -> Self {
        Self {
            key,
            clock,
            routes,
            hop: Arc::new(Via {
                connector: N::connector(),
                pools: Mutex::default(),
            }),
            stop,
            metrics,
        }
    }

    /// Counts one thing passed on and, when answered, the hop's time.
    fn count(&self, kind: PassedKind, answered: bool, watch: Option<Stopwatch>) {
        if let (Some(metrics), Some(watch)) = (&self.metrics, watch) {
            metrics.passed_on(kind, answered, watch.seconds());
        }
    }

    /// The client's network, when another node passed this request on (a valid
    /// [`FORWARDED_HEADER`]); `None` for a client's own request.
    pub(crate) fn client_of(&self, headers: &HeaderMap) -> Option<String> {
        let value = headers.get(FORWARDED_HEADER)?.to_str().ok()?;
        let client = cluster_key::verify_forwarded(&self.key, value, self.now_s());
        if client.is_none() {
            debug!("a forwarded value that does not verify: the request is the sender's own");
        }
        client
    }

    fn now_s(&self) -> u64 {
        self.clock.now().0 / 1_000
    }

    /// This node's name and the address of the other node serving `shard`, if one does.
    fn owner(&self, shard: ShardId) -> Option<(String, String)> {
        let routes = self.routes.borrow();
        let address = routes.shards.get(&shard.0)?;
        (*address != routes.address).then(|| (routes.node.clone(), address.clone()))
    }

    /// Passes a request of `shard` (its head `parts`, its `body`) from a client of network
    /// `client` on to the node serving the shard: that node's answer, or `None` when no node
    /// serves the shard now or its node did not answer (the caller refuses the request).
    pub(crate) async fn request(
        &self,
        shard: ShardId,
        parts: &Parts,
        body: Vec<u8>,
        client: &str,
    ) -> Option<Response> {
        let Some((me, address)) = self.owner(shard) else {
            debug!(shard = shard.0, "no node serves the shard of a request now");
            return None;
        };
        let watch = self.metrics.as_ref().map(|_| Stopwatch::start());
        let sent = self.send(&me, &address, parts, body, client).await;
        self.count(PassedKind::Request, sent.is_ok(), watch);
        match sent {
            Ok(answer) => {
                let mut response = Response::new(Body::from(answer.body));
                *response.status_mut() = answer.status;
                copy_answer_headers(&answer.headers, response.headers_mut());
                Some(response)
            }
            Err(error) => {
                debug!(shard = shard.0, %address, %error, "a request passed on was not answered");
                None
            }
        }
    }

    /// Sends a request (its head `parts`, its `body`) from a client of network `client` to
    /// node `address`, as node `me` passes it on.
    async fn send(
        &self,
        me: &str,
        address: &str,
        parts: &Parts,
        body: Vec<u8>,
        client: &str,
    ) -> Result<seam::net::HttpResponse, String> {
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let mut request = seam::net::HttpRequest::new(parts.method.clone(), path)
            .timeout(Duration::from_millis(ONWARD_TIMEOUT_MS))
            .body(body);
        for (name, value) in passed_on(&parts.headers) {
            if let Ok(value) = value.to_str() {
                request = request.header(name.clone(), value);
            }
        }
        let forwarded = cluster_key::forwarded(&self.key, me, self.now_s(), client);
        request = request.header(HeaderName::from_static(FORWARDED_HEADER), forwarded);
        self.hop.request(address, request).await
    }

    /// Sends a request to every other node the directory names (test mode's clock: every
    /// node's moves alike) and waits for their answers; `Err` names a node that did not
    /// answer 200.
    pub(crate) async fn to_every_node(
        &self,
        parts: &Parts,
        body: &[u8],
        client: &str,
    ) -> Result<usize, String> {
        let (me, addresses) = {
            let routes = self.routes.borrow();
            let others: BTreeSet<String> = routes
                .shards
                .values()
                .filter(|address| **address != routes.address)
                .cloned()
                .collect();
            (routes.node.clone(), others)
        };
        for address in &addresses {
            let answer = self
                .send(&me, address, parts, body.to_vec(), client)
                .await?;
            if answer.status != StatusCode::OK {
                return Err(format!("node {address} answered {}", answer.status));
            }
        }
        Ok(addresses.len())
    }

    /// Passes a WebSocket upgrade of `shard` from a client of network `client` on to the node
    /// serving the shard: its refusal, or `101` and the two connections joined; `None` as for
    /// [`Self::request`].
    pub(crate) async fn upgrade(
        &self,
        shard: ShardId,
        request: Request,
        client: &str,
    ) -> Option<Response> {
        let Some((me, address)) = self.owner(shard) else {
            debug!(
                shard = shard.0,
                "no node serves the shard of an upgrade now"
            );
            return None;
        };
        let (mut parts, _) = request.into_parts();
        let from_client = parts.extensions.remove::<OnUpgrade>()?;
        let forwarded = cluster_key::forwarded(&self.key, &me, self.now_s(), client);
        let watch = self.metrics.as_ref().map(|_| Stopwatch::start());
        let asked = tokio::time::timeout(
            Duration::from_millis(ONWARD_CONNECT_TIMEOUT_MS),
            self.ask_upgrade(&address, &parts, forwarded),
        )
        .await;
        self.count(PassedKind::Upgrade, matches!(asked, Ok(Ok(_))), watch);
        let mut answer = match asked {
            Ok(Ok(answer)) => answer,
            Ok(Err(error)) => {
                debug!(shard = shard.0, %address, %error, "an upgrade passed on failed");
                return None;
            }
            Err(_) => {
                debug!(shard = shard.0, %address, "an upgrade passed on was not answered in time");
                return None;
            }
        };
        if answer.status() != StatusCode::SWITCHING_PROTOCOLS {
            return refusal(answer).await;
        }
        let from_owner = hyper::upgrade::on(&mut answer);
        let mut response = Response::new(Body::empty());
        *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
        for (name, value) in answer.headers() {
            if name != header::CONTENT_LENGTH && name != header::TRANSFER_ENCODING {
                response.headers_mut().append(name.clone(), value.clone());
            }
        }
        let mut stop = self.stop.clone();
        tokio::spawn(async move {
            let (Ok(client), Ok(owner)) = tokio::join!(from_client, from_owner) else {
                debug!("an upgrade passed on ended before both sides were upgraded");
                return;
            };
            let (mut client, mut owner) = (TokioIo::new(client), TokioIo::new(owner));
            tokio::select! {
                biased;
                _ = stop.wait_for(|stop| *stop) => {}
                joined = tokio::io::copy_bidirectional(&mut client, &mut owner) => {
                    if let Err(error) = joined {
                        debug!(%error, "a socket passed on ended with an error");
                    }
                }
            }
        });
        Some(response)
    }

    /// Sends the upgrade (`parts`' path, query and end-to-end headers, and `forwarded`) to
    /// `address` on a connection of its own; its answer.
    async fn ask_upgrade(
        &self,
        address: &str,
        parts: &Parts,
        forwarded: String,
    ) -> io::Result<hyper::Response<hyper::body::Incoming>> {
        let io = self.hop.connect(address).await?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
            .await
            .map_err(io::Error::other)?;
        tokio::spawn(async move {
            if let Err(error) = connection.with_upgrades().await {
                debug!(%error, "the connection of an upgrade passed on ended with an error");
            }
        });
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let mut request = http::Request::builder()
            .method(Method::GET)
            .uri(path)
            .header(header::HOST, address)
            .header(header::CONNECTION, "upgrade")
            .header(header::UPGRADE, "websocket");
        for (name, value) in passed_on(&parts.headers) {
            request = request.header(name, value);
        }
        let request = request
            .header(FORWARDED_HEADER, forwarded)
            .body(Empty::<Bytes>::new())
            .map_err(io::Error::other)?;
        sender.send_request(request).await.map_err(io::Error::other)
    }
}

/// The owner's refusal of an upgrade as the client's answer (its body read within
/// [`MAX_ONWARD_REFUSAL_BYTES`] and [`ONWARD_TIMEOUT_MS`], else `None`).
async fn refusal(answer: hyper::Response<hyper::body::Incoming>) -> Option<Response> {
    let (parts, body) = answer.into_parts();
    let read = tokio::time::timeout(
        Duration::from_millis(ONWARD_TIMEOUT_MS),
        Limited::new(body, MAX_ONWARD_REFUSAL_BYTES).collect(),
    )
    .await;
    let Ok(Ok(body)) = read else {
        debug!("the refusal of an upgrade passed on could not be read");
        return None;
    };
    let mut response = Response::new(Body::from(body.to_bytes()));
    *response.status_mut() = parts.status;
    copy_answer_headers(&parts.headers, response.headers_mut());
    Some(response)
}

/// The headers of a client's request that go on to the owner: all but the hop-by-hop ones,
/// `Host` (the owner's) and a forwarded value (the node sets its own).
fn passed_on(headers: &HeaderMap) -> impl Iterator<Item = (&HeaderName, &HeaderValue)> {
    headers
        .iter()
        .filter(|(name, _)| !hop_by_hop(name) && *name != header::HOST)
        .filter(|(name, _)| name.as_str() != FORWARDED_HEADER)
}

/// Copies the end-to-end headers of an owner's answer (the body's length is this answer's).
fn copy_answer_headers(from: &HeaderMap, to: &mut HeaderMap) {
    for (name, value) in from {
        if !hop_by_hop(name) {
            to.append(name.clone(), value.clone());
        }
    }
}

/// Headers that describe one connection, not the request (RFC 9110 §7.6.1), and the body's
/// framing, which each hop sets for itself.
fn hop_by_hop(name: &HeaderName) -> bool {
    [
        header::CONNECTION,
        header::TRANSFER_ENCODING,
        header::CONTENT_LENGTH,
        header::TE,
        header::TRAILER,
        header::UPGRADE,
        header::PROXY_AUTHENTICATE,
        header::PROXY_AUTHORIZATION,
    ]
    .contains(name)
        || name.as_str() == "keep-alive"
        || name.as_str() == "proxy-connection"
}

/// The boxed future of a [`Hop`].
type HopFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A connection to another node, whatever the network.
trait Io: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Io for T {}

/// How this node reaches another (real sockets, or the simulator's network).
trait Hop: Send + Sync {
    /// Sends a request to `address` on a pooled connection and reads the whole answer.
    fn request(
        &self,
        address: &str,
        request: seam::net::HttpRequest,
    ) -> HopFuture<'_, Result<seam::net::HttpResponse, String>>;

    /// Opens a connection of its own to `address`.
    fn connect<'a>(&'a self, address: &'a str) -> HopFuture<'a, io::Result<Box<dyn Io>>>;
}

/// A [`Hop`] over connector `C`, with one connection pool per node.
struct Via<C> {
    connector: C,
    pools: Mutex<BTreeMap<String, HttpClient<C>>>,
}

impl<C: Connector> Via<C> {
    fn pool(&self, address: &str) -> Result<HttpClient<C>, String> {
        let mut pools = self
            .pools
            .lock()
            .map_err(|_| "the pools' lock is poisoned")?;
        if let Some(pool) = pools.get(address) {
            return Ok(pool.clone());
        }
        if pools.len() >= MAX_ONWARD_POOLS {
            pools.clear();
        }
        let pool = HttpClient::new(self.connector.clone(), endpoint(address)?)
            .with_timeout(Duration::from_millis(ONWARD_TIMEOUT_MS))
            .with_max_response_bytes(MAX_ONWARD_RESPONSE_BYTES);
        pools.insert(address.to_owned(), pool.clone());
        Ok(pool)
    }
}

fn endpoint(address: &str) -> Result<Endpoint, String> {
    Endpoint::parse(&format!("http://{address}"))
        .map_err(|error| format!("a node's address is not host:port: {error}"))
}

impl<C: Connector> Hop for Via<C> {
    fn request(
        &self,
        address: &str,
        request: seam::net::HttpRequest,
    ) -> HopFuture<'_, Result<seam::net::HttpResponse, String>> {
        let pool = self.pool(address);
        Box::pin(async move { pool?.send(request).await.map_err(|error| error.to_string()) })
    }

    fn connect<'a>(&'a self, address: &'a str) -> HopFuture<'a, io::Result<Box<dyn Io>>> {
        Box::pin(async move {
            let endpoint = endpoint(address).map_err(io::Error::other)?;
            let stream = self.connector.connect(&endpoint).await?;
            Ok(Box::new(stream) as Box<dyn Io>)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_end_to_end_headers_are_passed_on() {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("authorization", "Bearer t"),
            ("content-type", "application/json"),
            ("sec-websocket-key", "k"),
            ("sec-websocket-protocol", "securechat.v1"),
            ("connection", "keep-alive, upgrade"),
            ("keep-alive", "timeout=5"),
            ("transfer-encoding", "chunked"),
            ("content-length", "12"),
            ("host", "lb.example"),
            ("upgrade", "websocket"),
            (FORWARDED_HEADER, "forged"),
        ] {
            headers.append(
                HeaderName::from_static(name),
                HeaderValue::from_static(value),
            );
        }
        let kept: Vec<&str> = passed_on(&headers).map(|(name, _)| name.as_str()).collect();
        assert_eq!(
            kept,
            [
                "authorization",
                "content-type",
                "sec-websocket-key",
                "sec-websocket-protocol"
            ]
        );
    }

    #[test]
    fn the_nodes_ips_are_the_ones_not_counted() {
        let routes = Routes {
            node: "a".into(),
            address: "10.0.0.1:8080".into(),
            shards: BTreeMap::from([
                (0, "10.0.0.1:8080".to_owned()),
                (1, "10.0.0.2:8080".to_owned()),
                (2, "10.0.0.2:8080".to_owned()),
                (3, "relay-c.internal:8080".to_owned()),
            ]),
        };
        assert_eq!(
            routes.node_ips(),
            BTreeSet::from([
                "10.0.0.1".parse::<IpAddr>().unwrap(),
                "10.0.0.2".parse::<IpAddr>().unwrap()
            ])
        );
    }
}
