//! Crossings between the nodes of a cluster: what a core sends a shard served by another node
//! goes there as an envelope (`relay_core::handoff::envelope`) on a WebSocket between the two
//! nodes, and the receiving node hands it to the core of its shard.
//!
//! * **Outgoing** (`Remote`): a crossing for a shard not served here goes to its owner's
//!   address as the membership's directory names it, through one link per address: a task
//!   that connects to `PEER_PATH` with this node's proof, writes the envelopes queued for it,
//!   pings every [`PEER_PING_MS`] and connects again ([`PEER_RECONNECT_MS`]) when the
//!   connection fails, a write takes over [`PEER_WRITE_TIMEOUT_MS`] or nothing came back
//!   for [`PEER_SILENT_MS`] (a node gone without a word, a network that dropped what was
//!   sent). A full queue
//!   ([`PEER_QUEUE`]), an owner the directory does not know and an envelope queued when the
//!   connection failed are lost, as a crossing lost on the way: the hand-off protocol sends
//!   what must arrive again, and the rest (typing, a forward answered by its timeout) may be
//!   lost anyway. A crossing for a shard the directory names no other node for (none, or
//!   this node, which just gave it up: the directory follows the membership a heartbeat
//!   later) waits up to [`HELD_CROSSING_MS`] for the directory to name one (at most
//!   [`HELD_CROSSINGS`] wait), so that a forward's answer is not lost to a move.
//! * **Incoming** (`GET PEER_PATH`): the upgrade needs a proof ([`proof`]): HMAC-SHA256 under
//!   the cluster's key of the sending node's name and the time, within
//!   [`PEER_PROOF_SKEW_S`] of this node's clock; without a cluster key the route does not
//!   exist (404). Each envelope is decoded (at most
//!   [`MAX_ENVELOPE_BYTES`](relay_core::handoff::envelope::MAX_ENVELOPE_BYTES)) and handed to
//!   the core of its shard without waiting; one for a shard not served here, or whose core's
//!   queue is full, is dropped. A malformed envelope is logged (without its text) and skipped.
//!   The link ends with the server that accepted it: when it stops (a shutdown), the link is
//!   closed, so the sending node connects again, to whatever serves the address next, rather
//!   than write into a server that is gone.
//! * **Where the links belong**: the proof authenticates the upgrade, not each envelope, and
//!   the link is plain HTTP, so whoever sees a proof can use it again within its window. The
//!   nodes' addresses belong on their private network, and a load balancer in front of the
//!   nodes should not pass `/cluster/` from clients.

use std::{
    collections::{BTreeMap, VecDeque},
    sync::Arc,
    time::Duration,
};

use axum::{
    extract::{Request, State},
    response::{IntoResponse as _, Response},
};
use futures_util::{SinkExt as _, StreamExt as _};
use http::{StatusCode, header::AUTHORIZATION};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use relay_core::handoff::{Crossing, ShardId, envelope};
use seam::clock::Clock;
use seam::net::{Endpoint, HttpClient, Network, WsMessage, WsRequest, WsStream};
use tokio::sync::{mpsc, watch};
use tokio_tungstenite::{
    WebSocketStream,
    tungstenite::protocol::{Role, WebSocketConfig},
};
use tracing::{debug, info, trace, warn};

pub use super::cluster_key::{ClusterKey, PEER_PROOF_SKEW_S, proof};
use super::driver::{Input, Phase};
use super::rest::App;

/// The path nodes send each other crossings on (a WebSocket).
pub const PEER_PATH: &str = "/cluster/v1/crossings";
/// Envelopes waiting for one remote node's link at most; more are dropped.
pub const PEER_QUEUE: usize = 4_096;
/// Delay before a link connects again after its connection failed.
pub const PEER_RECONNECT_MS: u64 = 500;
/// Connecting a link (TCP and the upgrade) within this time, or trying again.
pub const PEER_CONNECT_TIMEOUT_MS: u64 = 3_000;
/// A link pings the node it writes to this often.
pub const PEER_PING_MS: u64 = 1_000;
/// A link that heard nothing back (a pong, any frame) for this long is opened again (counted
/// on the ping timer: this many ms' worth of pings unanswered, whatever the wall clock does).
pub const PEER_SILENT_MS: u64 = 3_000;
/// A write on a link that does not finish within this time ends the link (it is opened
/// again).
pub const PEER_WRITE_TIMEOUT_MS: u64 = 3_000;

/// A crossing for a shard the directory names no other node for waits this long at most for
/// it to name one, then is dropped.
pub const HELD_CROSSING_MS: u64 = 2_000;
/// Crossings waiting for the directory at most; one past it is dropped.
pub const HELD_CROSSINGS: usize = 1_024;

/// Where the crossings for shards not served here go: this node's links to the others.
pub(crate) struct Remote {
    inner: Arc<Links>,
}

/// A node's links, and the crossings waiting for the directory to name their shard's owner.
struct Links {
    me: String,
    /// This node's own address as the directory names it.
    address: String,
    key: ClusterKey,
    clock: Arc<dyn Clock>,
    directory: watch::Receiver<BTreeMap<u16, String>>,
    links: std::sync::Mutex<BTreeMap<String, mpsc::Sender<String>>>,
    /// Crossings for a shard no other node is named for yet, each with when it is dropped.
    held: std::sync::Mutex<VecDeque<(u64, Crossing)>>,
    start_link: Arc<dyn Fn(Link) + Send + Sync>,
}

/// One link's work: where to, its queue, and how to prove who it is.
pub(crate) struct Link {
    address: String,
    queue: mpsc::Receiver<String>,
    me: String,
    key: ClusterKey,
    clock: Arc<dyn Clock>,
}

impl Remote {
    /// The links of node `me` (its own address `address`), to the addresses `directory`
    /// names, started on `runtime` over network `N`.
    pub(crate) fn new<N: Network>(
        (me, address): (String, String),
        key: ClusterKey,
        clock: Arc<dyn Clock>,
        directory: watch::Receiver<BTreeMap<u16, String>>,
        runtime: &tokio::runtime::Handle,
    ) -> Self {
        let link_runtime = runtime.clone();
        let inner = Arc::new(Links {
            me,
            address,
            key,
            clock,
            directory: directory.clone(),
            links: std::sync::Mutex::default(),
            held: std::sync::Mutex::default(),
            start_link: Arc::new(move |link| drop(link_runtime.spawn(link.run::<N>()))),
        });
        runtime.spawn(release_held(Arc::downgrade(&inner), directory));
        Self { inner }
    }

    /// Sends `c` to the node serving its shard, without waiting (see the module doc).
    pub(crate) fn send(&self, c: &Crossing) {
        self.inner.send(c);
    }
}

/// Sends the held crossings whose shard the directory names a node for, each time it
/// changes, until the links are dropped or the directory ends.
async fn release_held(
    links: std::sync::Weak<Links>,
    mut directory: watch::Receiver<BTreeMap<u16, String>>,
) {
    while directory.changed().await.is_ok() {
        let Some(links) = links.upgrade() else {
            return;
        };
        let held = links
            .held
            .lock()
            .map(|mut held| std::mem::take(&mut *held))
            .unwrap_or_default();
        for (until, c) in held {
            links.send_or_hold(c, until);
        }
    }
}

impl Links {
    /// The address of the node serving shard `to`, unless the directory names none or
    /// this node (which no longer serves it: it just moved).
    fn owner(&self, to: u16) -> Option<String> {
        self.directory
            .borrow()
            .get(&to)
            .filter(|address| **address != self.address)
            .cloned()
    }

    fn send(&self, c: &Crossing) {
        let until = self.clock.now().0.saturating_add(HELD_CROSSING_MS);
        self.send_or_hold(c.clone(), until);
    }

    /// Sends `c` to its shard's owner, or holds it until `until` for the directory to name
    /// one (a shard that just moved: the directory follows the membership a moment later).
    fn send_or_hold(&self, c: Crossing, until: u64) {
        let to = c.to().0;
        if let Some(address) = self.owner(to) {
            self.to_link(&address, &c);
            return;
        }
        let now = self.clock.now().0;
        let Ok(mut held) = self.held.lock() else {
            return;
        };
        while let Some((_, old)) = held
            .front()
            .is_some_and(|(until, _)| *until <= now)
            .then(|| held.pop_front())
            .flatten()
        {
            debug!(
                to = old.to().0,
                "crossing dropped: no node was named for its shard in time"
            );
        }
        if until <= now || held.len() >= HELD_CROSSINGS {
            debug!(to, "crossing for a shard no other node serves now: dropped");
            return;
        }
        trace!(
            to,
            "crossing held until the directory names its shard's node"
        );
        held.push_back((until, c));
    }

    /// Queues `c` on the link to `address`, starting the link if there is none.
    fn to_link(&self, address: &str, c: &Crossing) {
        let to = c.to().0;
        let Ok(mut links) = self.links.lock() else {
            return;
        };
        let link = links.entry(address.to_owned()).or_insert_with(|| {
            let (sender, queue) = mpsc::channel(PEER_QUEUE);
            (self.start_link)(Link {
                address: address.to_owned(),
                queue,
                me: self.me.clone(),
                key: self.key.clone(),
                clock: Arc::clone(&self.clock),
            });
            sender
        });
        match link.try_send(envelope::encode(c)) {
            Ok(()) => trace!(to, %address, "crossing to a node"),
            Err(mpsc::error::TrySendError::Full(_)) => {
                debug!(to, %address, "crossing dropped: the link's queue is full");
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                links.remove(address);
            }
        }
    }
}

impl Link {
    /// Connects, writes what is queued, connects again after a failure; ends when the node's
    /// [`Remote`] is dropped (its queue closes).
    async fn run<N: Network>(mut self) {
        let Ok(endpoint) = Endpoint::parse(&format!("http://{}", self.address)) else {
            warn!(address = %self.address, "a node's address is not host:port: no link to it");
            return;
        };
        let client = HttpClient::new(N::connector(), endpoint);
        loop {
            let at_s = self.clock.now().0 / 1_000;
            let request = WsRequest::new(PEER_PATH)
                .header(AUTHORIZATION, proof(&self.key, &self.me, at_s))
                .timeout(Duration::from_millis(PEER_CONNECT_TIMEOUT_MS));
            match client.connect_ws(request).await {
                Ok(mut ws) => {
                    info!(address = %self.address, "link to a node open");
                    let why = self.serve(&mut ws).await;
                    if self.queue.is_closed() {
                        let _ = ws.close(None).await;
                        return;
                    }
                    warn!(address = %self.address, why, "link to a node failed: connecting again");
                }
                Err(error) => debug!(address = %self.address, %error, "link to a node not open"),
            }
            // What waited for a link that failed is stale: the protocol sends it again.
            while self.queue.try_recv().is_ok() {}
            tokio::time::sleep(Duration::from_millis(PEER_RECONNECT_MS)).await;
            if self.queue.is_closed() {
                return;
            }
        }
    }

    /// Writes what is queued on `ws` and pings it every [`PEER_PING_MS`]; returns why the
    /// link ended: the queue closed, a write failed or took over [`PEER_WRITE_TIMEOUT_MS`], or
    /// nothing (a pong, any frame) came back for [`PEER_SILENT_MS`] (a peer gone without a
    /// word, or a network that dropped what was sent: the link is opened again rather than
    /// written into the void).
    async fn serve<S>(&mut self, ws: &mut WsStream<S>) -> &'static str
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        let mut ping = tokio::time::interval(Duration::from_millis(PEER_PING_MS));
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Pings sent since anything came back, counted on the ping timer rather than read off
        // the wall clock, so that a clock step (NTP) does not make every link look silent.
        let mut unanswered: u64 = 0;
        loop {
            let out = tokio::select! {
                biased;
                text = self.queue.recv() => match text {
                    Some(text) => WsMessage::text(text),
                    None => return "its node's links were dropped",
                },
                frame = ws.next() => match frame {
                    Some(Ok(_)) => {
                        unanswered = 0;
                        continue;
                    }
                    Some(Err(_)) | None => return "the connection ended",
                },
                _ = ping.tick() => {
                    if unanswered.saturating_mul(PEER_PING_MS) >= PEER_SILENT_MS {
                        return "nothing came back from the node";
                    }
                    unanswered += 1;
                    WsMessage::Ping(Vec::new().into())
                }
            };
            let wrote =
                tokio::time::timeout(Duration::from_millis(PEER_WRITE_TIMEOUT_MS), ws.send(out))
                    .await;
            if !matches!(wrote, Ok(Ok(()))) {
                return "a write failed or did not finish in time";
            }
        }
    }
}

/// `GET PEER_PATH`: another node's link (see the module doc).
pub(super) async fn upgrade(State(app): State<App>, mut request: Request) -> Response {
    let Some(check) = app.cluster.clone() else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let from = request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| (check.0)(v));
    let Some(from) = from else {
        return StatusCode::UNAUTHORIZED.into_response();
    };
    let accept = match super::ws::handshake(request.headers()) {
        Ok(accept) => accept,
        Err(refusal) => return super::rest::relay_response(refusal),
    };
    let Some(on_upgrade) = request.extensions_mut().remove::<OnUpgrade>() else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    tokio::spawn(async move {
        let Ok(upgraded) = on_upgrade.await else {
            return;
        };
        let config = WebSocketConfig::default()
            .max_message_size(Some(envelope::MAX_ENVELOPE_BYTES))
            .max_frame_size(Some(envelope::MAX_ENVELOPE_BYTES));
        let ws =
            WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, Some(config))
                .await;
        info!(from = %from, "link from a node open");
        receive(ws, &app).await;
        info!(from = %from, "link from a node closed");
    });
    super::ws::switching_protocols(&accept, None)
}

/// Hands each envelope of a link to the core of its shard, until the link ends or the server
/// stops (the link is then closed).
async fn receive<S>(mut ws: WebSocketStream<S>, app: &App)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut phase = app.phase.clone();
    loop {
        let stopping = phase.wait_for(|p| matches!(p, Phase::Stopping));
        let message = tokio::select! {
            biased;
            stopped = stopping => {
                drop(stopped);
                None
            }
            message = ws.next() => Some(message),
        };
        let Some(message) = message else {
            let close = ws.close(None);
            let _ = tokio::time::timeout(Duration::from_millis(PEER_WRITE_TIMEOUT_MS), close).await;
            return;
        };
        let Some(Ok(message)) = message else {
            return;
        };
        let WsMessage::Text(text) = message else {
            continue;
        };
        let crossing = match envelope::decode(&text) {
            Ok(c) => c,
            Err(error) => {
                warn!(%error, "an envelope from a node was refused");
                continue;
            }
        };
        let shard: ShardId = crossing.to();
        trace!(to = shard.0, "crossing from a node");
        let core = app.cores().and_then(|cores| cores.for_shard(shard));
        match core {
            Some(core) => {
                if core.try_send(Input::Cross(crossing)).is_err() {
                    debug!(
                        to = shard.0,
                        "crossing from a node dropped: its core is busy or gone"
                    );
                }
            }
            None => debug!(
                to = shard.0,
                "crossing from a node for a shard not served here"
            ),
        }
    }
}
