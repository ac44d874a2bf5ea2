//! Server side of the seam: axum's router on any listener, through hyper with per-connection
//! limits (header-read deadline, connection caps).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::{io, net::SocketAddr, time::Duration};

use super::networks::{Network as IpNetwork, NetworkPrefixes};
use axum::{
    Router,
    extract::{ConnectInfo, Request},
    serve::Listener,
};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::watch;
use tower::ServiceExt as _;

/// The remote address of a connection, given to handlers as
/// `axum::extract::ConnectInfo<PeerAddr>` on every listener [`serve`] accepts.
///
/// (axum's own `ConnectInfo<SocketAddr>` exists for tokio's listener only, and the orphan and
/// coherence rules forbid adding it for ours, so [`serve`] inserts this into every request.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PeerAddr(pub SocketAddr);

/// Limits of [`serve_with_limits`] on every connection, whatever it carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServeLimits {
    /// A connection must deliver the complete headers of each request within this, in ms
    /// (slow-header clients, silent connections, idle keep-alive connections): past it, it
    /// is closed. A WebSocket is upgraded inside its first request, so this is also the
    /// deadline to authenticate.
    pub header_read_timeout_ms: u64,
    /// Open connections in total (HTTP and WebSocket); past it, new ones are closed at once.
    pub max_connections: usize,
    /// Open connections from one network ([`prefixes`](Self::prefixes): an IPv4 address, an
    /// IPv6 /64 by default); past it, new ones from it are closed at once.
    pub max_connections_per_addr: usize,
    /// What a per-address bound counts as one client: the peer's address cut to its network.
    pub prefixes: NetworkPrefixes,
    /// Longest a single write to a WebSocket may take, in ms: a client that stops reading is
    /// closed when it passes (used by the relay server's socket tasks).
    pub write_deadline_ms: u64,
    /// How often the relay pings a WebSocket of its own accord, in ms, whatever the client
    /// sends (an application-level `ping` frame does not stand in for it): a client that
    /// answers no ping and sends nothing within [`ServeLimits::write_deadline_ms`] is closed.
    /// Keeps NAT bindings open and finds dead peers on idle sockets.
    pub ws_ping_interval_ms: u64,
    /// Bytes of encoded frames waiting to be written to one WebSocket; a frame that would
    /// take the queue past it closes the socket instead (one frame is always admitted to an
    /// empty queue). Bounds what a slow reader can hold.
    pub outbound_queue_bytes: usize,
    /// A request body must start arriving within this, in ms, counted from the end of its
    /// headers; every byte received extends the deadline by `1 / body_min_bytes_per_s`
    /// seconds (a minimum average rate, as Apache's `mod_reqtimeout` `body=…,MinRate=…`).
    /// Past it the request is answered 408 `BODY_TIMEOUT` and the connection closed (used by
    /// the relay server's request handler).
    pub body_read_timeout_ms: u64,
    /// The minimum average rate of a request body, in bytes per second (see
    /// [`body_read_timeout_ms`](Self::body_read_timeout_ms)).
    pub body_min_bytes_per_s: u64,
}

impl ServeLimits {
    /// How long a body of which `received` bytes arrived may still take, counted from the end
    /// of the headers, in ms.
    pub fn body_deadline_ms(&self, received: u64) -> u64 {
        let earned = received
            .saturating_mul(1_000)
            .checked_div(self.body_min_bytes_per_s)
            .unwrap_or(u64::MAX);
        self.body_read_timeout_ms.saturating_add(earned)
    }
}

/// Default of [`ServeLimits::header_read_timeout_ms`].
pub const HEADER_READ_TIMEOUT_MS: u64 = 10_000;
/// Default of [`ServeLimits::max_connections`].
pub const MAX_CONNECTIONS: usize = 20_000;
/// Default of [`ServeLimits::max_connections_per_addr`] (a NAT or a load generator may put many
/// clients behind one address).
pub const MAX_CONNECTIONS_PER_ADDR: usize = 512;
/// Default of [`ServeLimits::write_deadline_ms`].
pub const WRITE_DEADLINE_MS: u64 = 15_000;
/// Default of [`ServeLimits::ws_ping_interval_ms`]: under the 30 s many NATs and mobile
/// carriers keep an idle TCP binding.
pub const WS_PING_INTERVAL_MS: u64 = 25_000;
/// Default of [`ServeLimits::body_read_timeout_ms`]: a body must start arriving (and a small
/// JSON body must arrive whole) within 10 s of its headers.
pub const BODY_READ_TIMEOUT_MS: u64 = 10_000;
/// Default of [`ServeLimits::body_min_bytes_per_s`]: 4 KiB/s on average (a 32 KiB JSON body
/// may take 18 s; a 5 MiB media part 22 minutes, at a 32 kbit/s trickle); a client dripping
/// a byte a second is answered 408 after 10 s.
pub const BODY_MIN_BYTES_PER_S: u64 = 4 * 1024;
/// Default of [`ServeLimits::outbound_queue_bytes`]: twice the relay core's backlog window
/// (`relay_core::limits::SYNC_WINDOW_BYTES`, 512 KiB), so a replay never fills it and only a
/// client that stops reading live traffic does.
pub const OUTBOUND_QUEUE_BYTES: usize = 1024 * 1024;

impl Default for ServeLimits {
    fn default() -> Self {
        Self {
            header_read_timeout_ms: HEADER_READ_TIMEOUT_MS,
            max_connections: MAX_CONNECTIONS,
            max_connections_per_addr: MAX_CONNECTIONS_PER_ADDR,
            prefixes: NetworkPrefixes::default(),
            write_deadline_ms: WRITE_DEADLINE_MS,
            ws_ping_interval_ms: WS_PING_INTERVAL_MS,
            outbound_queue_bytes: OUTBOUND_QUEUE_BYTES,
            body_read_timeout_ms: BODY_READ_TIMEOUT_MS,
            body_min_bytes_per_s: BODY_MIN_BYTES_PER_S,
        }
    }
}

/// Open connections, in total and per network; shared by the accept loop and the guards.
#[derive(Debug, Default)]
struct Counts {
    total: usize,
    per_addr: BTreeMap<IpNetwork, usize>,
    /// Connections closed at once since the start: over the total cap, over an address's cap.
    refused: Refused,
    /// Addresses the per-address cap does not count, by why ([`ConnectionCounter::set_exempt`]).
    exempt: BTreeMap<&'static str, BTreeSet<IpAddr>>,
}

/// Connections [`serve_with_limits`] closed at once, since it started, by the cap they hit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Refused {
    /// Over [`ServeLimits::max_connections`].
    pub total_cap: u64,
    /// Over [`ServeLimits::max_connections_per_addr`].
    pub per_addr_cap: u64,
}

/// How many connections [`serve_with_limits`] holds open, for tests and stats.
#[derive(Clone, Debug, Default)]
pub struct ConnectionCounter(Arc<Mutex<Counts>>);

impl ConnectionCounter {
    /// Connections open now.
    pub fn open(&self) -> usize {
        self.0.lock().map(|c| c.total).unwrap_or(0)
    }

    /// Connections refused since the start, by cap.
    pub fn refused(&self) -> Refused {
        self.0.lock().map(|c| c.refused).unwrap_or_default()
    }

    /// Has the per-address cap leave connections from `ips` alone (they still count in the
    /// total) for reason `why`: e.g. a cluster's other nodes, each connection of which they
    /// passed on for a client they counted themselves, or a load balancer in front. Replaces
    /// the set of that reason (an empty set removes it).
    pub fn set_exempt(&self, why: &'static str, ips: BTreeSet<IpAddr>) {
        if let Ok(mut c) = self.0.lock() {
            if ips.is_empty() {
                c.exempt.remove(why);
            } else {
                c.exempt.insert(why, ips);
            }
        }
    }

    fn admit(&self, peer: IpAddr, limits: &ServeLimits) -> Option<ConnGuard> {
        let ip = limits.prefixes.network(peer);
        let mut c = self.0.lock().ok()?;
        let from_ip = c.per_addr.get(&ip).copied().unwrap_or(0);
        if c.total >= limits.max_connections {
            c.refused.total_cap += 1;
            return None;
        }
        let exempt = c.exempt.values().any(|ips| ips.contains(&peer));
        if from_ip >= limits.max_connections_per_addr && !exempt {
            c.refused.per_addr_cap += 1;
            return None;
        }
        c.total += 1;
        c.per_addr.insert(ip, from_ip + 1);
        Some(ConnGuard {
            counter: self.clone(),
            ip,
        })
    }
}

/// One admitted connection; dropping it (with the socket, also after an upgrade) frees its
/// place.
#[derive(Debug)]
pub(super) struct ConnGuard {
    counter: ConnectionCounter,
    ip: IpNetwork,
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        if let Ok(mut c) = self.counter.0.lock() {
            c.total = c.total.saturating_sub(1);
            let left = c
                .per_addr
                .get(&self.ip)
                .copied()
                .unwrap_or(1)
                .saturating_sub(1);
            if left == 0 {
                c.per_addr.remove(&self.ip);
            } else {
                c.per_addr.insert(self.ip, left);
            }
        }
    }
}

/// A socket that carries its [`ConnGuard`]: the place is freed when the socket is dropped,
/// whoever holds it then (hyper, or the WebSocket task after an upgrade).
pub(super) struct Guarded<I> {
    pub(super) io: I,
    pub(super) _guard: ConnGuard,
}

impl<I: AsyncRead + Unpin> AsyncRead for Guarded<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Guarded<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// Serves `router` on `listener` with the default [`ServeLimits`] until `shutdown` resolves,
/// then stops accepting and waits for in-flight HTTP requests to finish.
///
/// Handlers may extract `ConnectInfo<PeerAddr>`. WebSocket connections are detached from
/// hyper once upgraded, so graceful shutdown does not wait for them: whoever owns the socket
/// tasks must close them.
pub async fn serve<L, F>(listener: L, router: Router, shutdown: F) -> io::Result<()>
where
    L: Listener<Addr = SocketAddr>,
    L::Io: Unpin,
    F: Future<Output = ()> + Send + 'static,
{
    serve_with_limits(
        listener,
        router,
        shutdown,
        ServeLimits::default(),
        ConnectionCounter::default(),
    )
    .await
}

/// [`serve`] with explicit `limits`, counting open connections in `counter`.
///
/// HTTP/1.1 through hyper with its header-read timer on tokio's clock (so on turmoil's too);
/// a connection over a cap is closed before a byte is read; nothing logs client addresses.
pub async fn serve_with_limits<L, F>(
    mut listener: L,
    router: Router,
    shutdown: F,
    limits: ServeLimits,
    counter: ConnectionCounter,
) -> io::Result<()>
where
    L: Listener<Addr = SocketAddr>,
    L::Io: Unpin,
    F: Future<Output = ()> + Send + 'static,
{
    // Every connection task holds a clone of `open_rx`; `open_tx.closed()` resolves when the
    // last one ended. `stop_tx` asks them to shut down gracefully.
    let (open_tx, open_rx) = watch::channel(());
    let (stop_tx, _) = watch::channel(false);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (io, peer) = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        let Some(guard) = counter.admit(peer.ip(), &limits) else {
            tracing::debug!(
                open = counter.open(),
                "connection refused: over the total or per-address connection cap"
            );
            drop(io);
            continue;
        };
        let info = ConnectInfo(PeerAddr(peer));
        let service = router.clone().map_request(move |mut request: Request| {
            request.extensions_mut().insert(info);
            request
        });
        let service = TowerToHyperService::new(
            service.map_request(|req: http::Request<Incoming>| req.map(axum::body::Body::new)),
        );
        let io = TokioIo::new(Guarded { io, _guard: guard });
        let mut stop = stop_tx.subscribe();
        let open = open_rx.clone();
        let header_timeout = Duration::from_millis(limits.header_read_timeout_ms);
        tokio::spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout);
            let mut conn = std::pin::pin!(builder.serve_connection(io, service).with_upgrades());
            tokio::select! {
                biased;
                result = conn.as_mut() => {
                    if let Err(error) = result {
                        tracing::trace!(%error, "HTTP connection ended with an error");
                    }
                }
                _ = stop.changed() => {
                    conn.as_mut().graceful_shutdown();
                    if let Err(error) = conn.await {
                        tracing::trace!(%error, "HTTP connection ended with an error");
                    }
                }
            }
            drop(open);
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    drop(open_rx);
    open_tx.closed().await;
    Ok(())
}
