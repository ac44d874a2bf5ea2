//! The plain-HTTP push gateway stand-in — **legacy**: records every push it receives. The
//! simulator no longer uses it: it delivers for real
//! ([`RelayServer::with_push`](crate::server::RelayServer::with_push) with
//! [`WebPushService`](super::WebPushService), [`FcmService`](super::FcmService),
//! [`ApnsService`](super::ApnsService)). Nothing it receives is encrypted or signed.
//!
//! The relay server, given this service's address as its push gateway
//! ([`RelayServer::with_push_gateway`](crate::server::RelayServer::with_push_gateway)), POSTs
//! each push to a path naming its target ([`push_path`](crate::server::push_path)). Any
//! `POST` path is accepted with 201 and recorded with its body; tests and the simulator read
//! the records in-process with [`PushService::received`].

use std::{
    io,
    net::SocketAddr,
    sync::{Arc, Mutex, PoisonError},
};

use axum::{Router, body::Bytes, extract::State, http::StatusCode, http::Uri, routing::post};

use crate::net::{Network, serve};

/// Most pushes kept; older ones are dropped first (counted in [`PushService::dropped`]).
pub const MAX_RECORDED_PUSHES: usize = 100_000;
/// Largest push body accepted, in bytes (Web Push caps payloads at 4 KiB).
pub const MAX_PUSH_BODY_BYTES: usize = 4096;

/// One push as received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedPush {
    /// The request path (the target: `/web-push/…`, `/fcm/…`, `/apns/…`).
    pub path: String,
    /// The body as text (lossy UTF-8).
    pub body: String,
}

#[derive(Debug, Default)]
struct Inner {
    received: Vec<RecordedPush>,
    dropped: u64,
}

/// A handle to the push service; clones share the records.
#[derive(Debug, Clone, Default)]
pub struct PushService {
    inner: Arc<Mutex<Inner>>,
}

impl PushService {
    /// An empty service.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every push received so far, in arrival order.
    pub fn received(&self) -> Vec<RecordedPush> {
        self.lock().received.clone()
    }

    /// How many records were dropped because [`MAX_RECORDED_PUSHES`] was reached.
    pub fn dropped(&self) -> u64 {
        self.lock().dropped
    }

    /// The service's HTTP app: `POST` on any path records the push.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/", post(record))
            .route("/{*path}", post(record))
            .layer(axum::extract::DefaultBodyLimit::max(MAX_PUSH_BODY_BYTES))
            .with_state(self.clone())
    }

    /// Binds `addr` on `N` and serves until `shutdown`.
    pub async fn run<N: Network>(
        self,
        addr: SocketAddr,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> io::Result<()> {
        let listener = N::bind(addr).await?;
        serve(listener, self.router(), shutdown).await
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Append-only records: nothing a panicking holder could leave half-done.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

async fn record(State(service): State<PushService>, uri: Uri, body: Bytes) -> StatusCode {
    let push = RecordedPush {
        path: uri.path().to_owned(),
        body: String::from_utf8_lossy(&body).into_owned(),
    };
    tracing::debug!(path = push.path, "push received");
    let mut inner = service.lock();
    if inner.received.len() >= MAX_RECORDED_PUSHES {
        inner.received.remove(0);
        inner.dropped += 1;
    }
    inner.received.push(push);
    StatusCode::CREATED
}
