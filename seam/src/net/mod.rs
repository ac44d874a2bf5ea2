//! The network seam: one listener/connector abstraction, two networks.
//!
//! | side   | tokio (production, loopback tests) | turmoil (simulation)   |
//! |--------|------------------------------------|------------------------|
//! | server | [`tokio::net::TcpListener`]        | [`TurmoilListener`]    |
//! | client | [`TokioConnector`]                 | [`TurmoilConnector`]   |
//!
//! [`Network`] bundles the two so server and client code can be generic over one type
//! parameter ([`Tokio`] or [`Turmoil`]). On top of the seam:
//!
//! - [`serve`]: runs any axum [`Router`](axum::Router) on any listener, with graceful shutdown
//!   and the peer address available to handlers as `ConnectInfo<PeerAddr>`;
//! - [`HttpClient`]: a small HTTP/1.1 client (hyper's connection-level API, a bounded pool of
//!   idle connections, a timeout on every request) that also opens WebSockets
//!   ([`HttpClient::connect_ws`], tokio-tungstenite over the same connector).
//!
//! Nothing here reads the wall clock: every timeout is a `tokio::time` timer, and the idle
//! pool's expiry reads tokio's clock, which turmoil drives with its own virtual clock.

mod client;
mod connector;
mod endpoint;
mod moved;
mod networks;
mod server;
#[cfg(feature = "turmoil")]
mod turmoil_listener;
mod ws;

use std::{io, net::SocketAddr};

pub use client::{
    DEFAULT_REQUEST_TIMEOUT_MS, HttpClient, HttpError, HttpRequest, HttpResponse, IDLE_EXPIRY_MS,
    MAX_IDLE_CONNECTIONS, MAX_RESPONSE_BYTES,
};
#[cfg(feature = "turmoil")]
pub use connector::TurmoilConnector;
pub use connector::{Connector, TokioConnector};
pub use endpoint::{Endpoint, EndpointError};
pub use moved::{MovedTcp, ServedTcp};
pub use networks::{
    IPV4_PREFIX, IPV6_PREFIX, MIN_IPV4_PREFIX, MIN_IPV6_PREFIX, Network as IpNetwork,
    NetworkPrefixes, PrefixError,
};
pub use server::{
    BODY_MIN_BYTES_PER_S, BODY_READ_TIMEOUT_MS, ConnectionCounter, HEADER_READ_TIMEOUT_MS,
    MAX_CONNECTIONS, MAX_CONNECTIONS_PER_ADDR, OUTBOUND_QUEUE_BYTES, PeerAddr, Refused,
    ServeLimits, WRITE_DEADLINE_MS, WS_PING_INTERVAL_MS, serve, serve_with_limits,
};
#[cfg(feature = "turmoil")]
pub use turmoil_listener::TurmoilListener;
pub use ws::{WsError, WsMessage, WsRequest, WsStream};

/// A network the shells can run on: how to listen and how to connect.
pub trait Network: Send + Sync + 'static {
    /// The server-side listener type, usable by [`serve`].
    type Listener: Listener<Addr = SocketAddr>;
    /// The client-side connector type, usable by [`HttpClient`].
    type Connector: Connector;

    /// Binds a listener on `addr` (port 0 picks a free port).
    fn bind(addr: SocketAddr) -> impl Future<Output = io::Result<Self::Listener>> + Send;

    /// A connector that opens streams on this network.
    fn connector() -> Self::Connector;
}

/// Real sockets through tokio.
#[derive(Clone, Copy, Debug, Default)]
pub struct Tokio;

/// axum's listener trait, re-exported so callers can ask a listener for its `local_addr`.
pub use axum::serve::Listener;

/// A tokio listener whose accepted sockets have `TCP_NODELAY` set: frames are small and
/// latency-sensitive, and Nagle's algorithm would hold some of them back ~40 ms.
pub type TokioListener =
    axum::serve::TapIo<tokio::net::TcpListener, fn(&mut tokio::net::TcpStream)>;

fn set_nodelay(stream: &mut tokio::net::TcpStream) {
    if let Err(error) = stream.set_nodelay(true) {
        tracing::debug!(%error, "could not set TCP_NODELAY on an accepted socket");
    }
}

impl Network for Tokio {
    type Listener = TokioListener;
    type Connector = TokioConnector;

    async fn bind(addr: SocketAddr) -> io::Result<Self::Listener> {
        use axum::serve::ListenerExt as _;
        let listener = tokio::net::TcpListener::bind(addr).await?;
        Ok(listener.tap_io(set_nodelay as fn(&mut tokio::net::TcpStream)))
    }

    fn connector() -> Self::Connector {
        TokioConnector
    }
}

#[cfg(feature = "turmoil")]
/// turmoil's simulated network; must be used from inside a turmoil host or client.
#[derive(Clone, Copy, Debug, Default)]
pub struct Turmoil;

#[cfg(feature = "turmoil")]
impl Network for Turmoil {
    type Listener = TurmoilListener;
    type Connector = TurmoilConnector;

    async fn bind(addr: SocketAddr) -> io::Result<Self::Listener> {
        TurmoilListener::bind(addr).await
    }

    fn connector() -> Self::Connector {
        TurmoilConnector
    }
}
