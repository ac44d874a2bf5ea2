//! The IO seam the shells are written against: one network abstraction and one clock trait,
//! each with a real implementation (tokio sockets, the system clock) and, behind the `turmoil`
//! feature, a simulated one (turmoil's network and virtual time).
//!
//! Everything that touches a socket is written once against [`net`] and runs unchanged on
//! real tokio sockets and on turmoil's simulated network:
//!
//! ```text
//!   server:  let listener = N::bind(addr).await?;          // tokio::net::TcpListener | TurmoilListener
//!            net::serve(listener, router, shutdown).await?; // axum, any `serve::Listener`
//!   client:  let http = HttpClient::new(N::connector(), endpoint);
//!            http.send(HttpRequest::get("/v1/...").bearer(token)).await?;
//!            let ws = http.connect_ws(WsRequest::new("/ws")).await?;
//! ```
//!
//! Code paths meant for simulation never read the wall clock: timeouts use `tokio::time`, which
//! turmoil drives with its own virtual clock.
//!
//! Who uses it: the relay server (`relay-server`), the async client (`client`), the outside
//! world's stand-ins (`standins`), the simulator (`sim`) and the conformance runner. It imports
//! none of them.

pub mod clock;
pub mod net;
