//! IO shells for the SecureChat cores and the deterministic simulator.
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

pub mod client;
pub mod clock;
pub mod net;
pub mod server;
pub mod sim;
pub mod standins;
