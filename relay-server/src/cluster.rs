//! A cluster node: a [`RelayServer`](super::RelayServer) that serves the shards its membership
//! owns, one relay core each, and follows the membership as shards come and go.
//!
//! A server built with [`RelayServer::clustered`](super::RelayServer::clustered) binds its
//! listener at once and loops:
//!
//! ```text
//!   joining ──join() won──► member: one core per owned shard ──membership lost──► joining …
//!   every route 503 NOT_LEADER    a shard gained: open it (its epoch), start its core
//!                                 a shard to hand over: stop its core, then hand it over
//!                                 a shard lost: stop its core at once
//! ```
//!
//! * **Each shard is a term of its own** ([`TermEnd`]): its store is fenced by the shard's
//!   epoch (a commit fenced ends that shard's term alone), and its core stops when the term
//!   ends, as a campaigning server's does (every socket of the shard closed with 1012, inputs
//!   still queued refused, the batches in flight let finish), while the node's other shards
//!   serve on. Only then is a shard planned to move handed over, so its last commits are in
//!   before the next owner's epoch begins; a shard taken from the node (its lease lapsed, a
//!   forced move) has its commits fenced by the database whatever the core still does.
//! * **Requests and upgrades** go to the core of their shard when this node serves it, and are
//!   refused otherwise (503 `NOT_LEADER` with `Retry-After`), as by a standby. What a core
//!   sends another shard (`Output::Cross`) goes to that shard's core when this node serves it,
//!   and otherwise to the node the membership's directory names ([`super::peers`], when the
//!   server has a cluster key), or is lost on the way: the hand-off protocol sends it again
//!   until the shard's core acknowledges it.
//! * **The membership ends** (lease lapsed, session gone): every core stops at once and the
//!   node joins again. A failed join is retried with the campaign's backoff, except a fatal one
//!   (a schema served the other way, another shard count, keys that differ), which stops the
//!   server.
//!
//! The mechanism knows nothing of PostgreSQL: [`super::postgres::PgMembership`] implements
//! [`Membership`] over `relay_pg::join`, and a test can implement it with channels.

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt,
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex, atomic::AtomicBool},
    time::Duration,
};

use relay_core::{
    Relay,
    handoff::{ShardId, ShardMap, ShardPlace},
    store::StoreError,
};
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{Instrument as _, error, info, info_span, warn};

use super::driver::{
    self, CoreParts, Cores, Input, PeerTable, Phase, PushSink, RemoteSink, TermCtx,
};
use super::leadership::{CAMPAIGN_RETRY_MS, CampaignError, TermEnd};
use super::metrics::ShardMove;
use super::onward::Routes;
use super::peers::{ClusterKey, Remote};
use super::supervisor::pause;
use super::{CoreCtx, CrossingTransit, INPUT_QUEUE_CAPACITY, RelayOpener, count_leading};
use seam::clock::Clock;
use seam::net::{ConnectionCounter, Network};

/// A shard owned here whose store could not be opened is tried again after this long,
/// doubling up to [`SHARD_OPEN_RETRY_MAX_MS`].
pub const SHARD_OPEN_RETRY_MS: u64 = 500;
/// The longest pause between two attempts to open a shard owned here.
pub const SHARD_OPEN_RETRY_MAX_MS: u64 = 8_000;

/// The boxed future of [`Membership::join`].
pub type JoinFuture<'a> = Pin<Box<dyn Future<Output = Result<Node, CampaignError>> + Send + 'a>>;

/// A way to be a node of a cluster (a database's leases, a test's channels).
pub trait Membership: Send + 'static {
    /// Joins the cluster and returns the membership (a node waits here). Dropping the future
    /// abandons the join.
    fn join(&mut self) -> JoinFuture<'_>;
}

/// A shard a node owns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardLease {
    /// Its epoch: the shard's store is fenced by it.
    pub epoch: u64,
    /// Planned to move to another node: stop it and hand it over.
    pub leaving: bool,
}

/// What a node owns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owned {
    /// The shards it owns (possibly none).
    Shards(BTreeMap<u16, ShardLease>),
    /// The membership ended, with why: every shard is lost.
    Lost(String),
}

/// Opens the relay of one shard under one epoch; its store's fenced commits end `end` (see
/// [`super::leadership::TermStore`]).
pub type ShardOpener = Box<dyn FnMut(ShardPlace, u64, TermEnd) -> Result<Relay, StoreError> + Send>;

/// The boxed future of a [`HandOver`].
pub type HandOverFuture = Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;

/// Hands a stopped shard (`shard`, `epoch`) to the node it is planned for.
pub type HandOver = Box<dyn FnMut(u16, u64) -> HandOverFuture + Send>;

/// One membership of a cluster.
pub struct Node {
    /// The node's name (logs).
    pub name: String,
    /// The cluster's shards.
    pub map: ShardMap,
    /// What the node owns, as its membership learns it.
    pub owned: watch::Receiver<Owned>,
    /// Where each shard served by a node is served: that node's address (its listener, where
    /// the other nodes' links connect).
    pub directory: watch::Receiver<BTreeMap<u16, String>>,
    /// This node's own address as the directory names it (what it never passes a request
    /// on to).
    pub address: String,
    /// Opens a shard's relay (at its start, and again to rebuild after a failed commit).
    pub open: ShardOpener,
    /// Hands a stopped shard over.
    pub hand_over: HandOver,
    /// Held while the membership lasts, then dropped (e.g. a `relay_pg::Member`, which leaves
    /// the cluster when dropped).
    pub holder: Box<dyn Send>,
}

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Node")
            .field("name", &self.name)
            .field("shards", &self.map.shards())
            .field("owned", &*self.owned.borrow())
            .finish_non_exhaustive()
    }
}

/// A shard this node serves: its core's way in, its term, and the core's task.
struct Local {
    epoch: u64,
    end: TermEnd,
    inputs: mpsc::Sender<Input>,
    task: tokio::task::JoinHandle<()>,
}

/// One membership being served: how to open and hand over its shards, and the cores of the
/// shards served here.
struct Serving {
    name: String,
    map: ShardMap,
    open: Arc<Mutex<ShardOpener>>,
    hand_over: HandOver,
    local: BTreeMap<u16, Local>,
    /// The shards (and epochs) handed over in this membership: each is handed over once.
    handed: BTreeSet<(u16, u64)>,
    /// Each core's task says its shard here when it ends.
    ended: mpsc::Sender<u16>,
    /// The links to the other nodes, if crossings go there.
    remote: Option<RemoteSink>,
}

/// A cluster node's loop: join, serve the owned shards as they change, join again.
pub(super) struct ClusterSupervisor {
    pub(super) membership: Box<dyn Membership>,
    pub(super) ctx: CoreCtx,
    pub(super) phase: Arc<watch::Sender<Phase>>,
    pub(super) stop: watch::Receiver<bool>,
    pub(super) transit: Option<CrossingTransit>,
    /// Makes a membership's links to the other nodes (node name, directory); `None`: a
    /// crossing for a shard not served here is dropped.
    pub(super) remote: Option<RemoteFactory>,
    /// Where the handlers pass on what another node serves: each membership's directory,
    /// empty between memberships ([`super::onward`]).
    pub(super) routes: watch::Sender<Routes>,
    /// The server's connections: the nodes' addresses are exempt from the per-address cap.
    pub(super) connections: ConnectionCounter,
}

/// Makes the links of a node (its name and its own address) to the addresses of a directory.
pub(super) type RemoteFactory =
    Arc<dyn Fn((String, String), watch::Receiver<BTreeMap<u16, String>>) -> Remote + Send + Sync>;

/// With a cluster key: how each membership makes its links to the other nodes, proved with
/// `key` at `clock`'s time, on the calling runtime, over network `N`.
pub(super) fn remote_factory<N: Network>(
    key: Option<ClusterKey>,
    clock: Arc<dyn Clock>,
) -> Option<RemoteFactory> {
    let key = key?;
    let runtime = tokio::runtime::Handle::current();
    Some(Arc::new(move |me, directory| {
        Remote::new::<N>(me, key.clone(), Arc::clone(&clock), directory, &runtime)
    }))
}

/// Why the per-address connection cap does not count the nodes' addresses.
const NODES_EXEMPT: &str = "the cluster's nodes pass connections on";

/// Keeps `routes` (and the connection cap's exempt addresses) in line with a membership's
/// `directory` until the membership's watch ends or the task is aborted.
async fn follow_directory(
    (node, address): (String, String),
    mut directory: watch::Receiver<BTreeMap<u16, String>>,
    routes: watch::Sender<Routes>,
    connections: ConnectionCounter,
) {
    loop {
        let now = Routes {
            node: node.clone(),
            address: address.clone(),
            shards: directory.borrow_and_update().clone(),
        };
        connections.set_exempt(NODES_EXEMPT, now.node_ips());
        routes.send_replace(now);
        if directory.changed().await.is_err() {
            return;
        }
    }
}

impl ClusterSupervisor {
    /// Joins, serves every membership and joins again after each, until shutdown or until a
    /// join fails for good (its reason goes to `fatal`).
    pub(super) async fn run(mut self, parts: CoreParts, fatal: oneshot::Sender<String>) {
        let mut retry_ms = CAMPAIGN_RETRY_MS;
        // Outlives the memberships: the push worker's gone reports go to whichever core
        // serves their user's shard.
        let (peers_tx, peers) = watch::channel::<PeerTable>(Arc::new([]));
        let routed = parts.gone.map(|gone| {
            // The map is the cluster's, known at the first join; until then nothing is routed.
            tokio::spawn(route_gone_when_joined(gone, peers.clone()))
        });
        let push = parts.push;
        loop {
            if *self.stop.borrow() {
                break;
            }
            let joined = {
                let mut stop = self.stop.clone();
                tokio::select! {
                    biased;
                    _ = stop.wait_for(|stop| *stop) => break,
                    joined = self.membership.join() => joined,
                }
            };
            let node = match joined {
                Ok(node) => node,
                Err(CampaignError::Fatal(why)) => {
                    let _ = fatal.send(why);
                    break;
                }
                Err(CampaignError::Retry(why)) => {
                    warn!(reason = %why, retry_ms, "joining the cluster failed; retrying");
                    if !pause(self.stop.clone(), &mut retry_ms).await {
                        break;
                    }
                    continue;
                }
            };
            retry_ms = CAMPAIGN_RETRY_MS;
            info!(node = %node.name, shards = node.map.shards(), "cluster member: serving the shards it owns");
            let why = self.serve(node, &peers_tx, push.as_ref()).await;
            info!(reason = %why, "cluster membership over");
        }
        if let Some(routed) = routed {
            routed.abort();
        }
        info!("cluster node stopped");
    }

    /// Serves one membership until it ends or the server stops; returns why it ended.
    async fn serve(
        &mut self,
        node: Node,
        peers_tx: &watch::Sender<PeerTable>,
        push: Option<&PushSink>,
    ) -> String {
        let Node {
            name,
            map,
            mut owned,
            directory,
            address,
            open,
            hand_over,
            holder,
        } = node;
        let routing = tokio::spawn(follow_directory(
            (name.clone(), address.clone()),
            directory.clone(),
            self.routes.clone(),
            self.connections.clone(),
        ));
        let remote = self.remote.as_ref().map(|make| {
            let links = make((name.clone(), address), directory);
            Arc::new(move |c: &relay_core::handoff::Crossing| links.send(c)) as RemoteSink
        });
        let (ended_tx, ended_rx) = mpsc::channel::<u16>(usize::from(map.shards()));
        let mut here = Serving {
            name,
            map,
            open: Arc::new(Mutex::new(open)),
            hand_over,
            local: BTreeMap::new(),
            handed: BTreeSet::new(),
            ended: ended_tx,
            remote,
        };
        let why = self
            .follow_until_lost(&mut owned, &mut here, ended_rx, (peers_tx, push))
            .await;
        self.stop_all(&mut here.local, &why).await;
        routing.abort();
        self.routes.send_replace(Routes::default());
        self.connections.set_exempt(NODES_EXEMPT, BTreeSet::new());
        peers_tx.send_replace(Arc::new([]));
        drop(holder);
        why
    }

    /// Follows `owned` until the membership ends (or the server stops): returns why.
    async fn follow_until_lost(
        &mut self,
        owned: &mut watch::Receiver<Owned>,
        here: &mut Serving,
        mut ended_rx: mpsc::Receiver<u16>,
        (peers_tx, push): (&watch::Sender<PeerTable>, Option<&PushSink>),
    ) -> String {
        let map = here.map;
        let mut stop = self.stop.clone();
        let mut retry_ms = SHARD_OPEN_RETRY_MS;
        loop {
            let now = owned.borrow_and_update().clone();
            let unopened = match now {
                Owned::Lost(why) => return why,
                Owned::Shards(shards) => self.follow(&shards, here, peers_tx, push).await,
            };
            if !unopened {
                retry_ms = SHARD_OPEN_RETRY_MS;
            }
            tokio::select! {
                biased;
                _ = stop.wait_for(|stop| *stop) => return "the server is stopping".to_owned(),
                // A shard owned here that could not be opened (its store failed): tried again
                // after a pause (doubling), not only at the membership's next change.
                () = tokio::time::sleep(Duration::from_millis(retry_ms)), if unopened => {
                    retry_ms = (retry_ms * 2).min(SHARD_OPEN_RETRY_MAX_MS);
                }
                changed = owned.changed() => {
                    if changed.is_err() {
                        return "the membership's watch was dropped".to_owned();
                    }
                }
                Some(shard) = ended_rx.recv() => {
                    // A core that stopped by itself (its term ended: a fenced commit): the shard
                    // is dropped here, and started again if the membership still says so.
                    if here.local.get(&shard).is_some_and(|l| l.task.is_finished()) {
                        here.local.remove(&shard);
                        self.publish(map, &here.local, peers_tx);
                    }
                }
            }
        }
    }

    /// Brings the cores served here in line with `shards`: stops those no longer owned under
    /// their epoch and those planned to leave (handing these over), starts the new ones.
    /// Returns whether a shard owned here could not be opened.
    async fn follow(
        &mut self,
        shards: &BTreeMap<u16, ShardLease>,
        here: &mut Serving,
        peers_tx: &watch::Sender<PeerTable>,
        push: Option<&PushSink>,
    ) -> bool {
        let mut unopened = false;
        let mut moves = Moves::default();
        // Planned to leave before its core started here: nothing ran here under its epoch,
        // so it is handed over at once.
        let never_started: Vec<(u16, u64)> = shards
            .iter()
            .filter(|(shard, lease)| lease.leaving && !here.local.contains_key(shard))
            .map(|(shard, lease)| (*shard, lease.epoch))
            .filter(|planned| !here.handed.contains(planned))
            .collect();
        let going = going(&mut here.local, shards);
        if !going.is_empty() {
            here.handed.extend(
                going
                    .iter()
                    .filter(|(.., planned)| *planned)
                    .map(|(shard, l, _)| (*shard, l.epoch)),
            );
            // Handlers stop sending to those cores before they stop.
            self.publish(here.map, &here.local, peers_tx);
            let_go(going, &mut here.hand_over, &mut moves).await;
        }
        for planned in never_started {
            here.handed.insert(planned);
            hand_over_one(&mut here.hand_over, planned, &mut moves).await;
        }
        for (shard, lease) in shards {
            if lease.leaving || here.local.contains_key(shard) {
                continue;
            }
            let Some(place) = ShardPlace::new(here.map, ShardId(*shard)) else {
                continue;
            };
            if let Some(started) = self.start(place, lease.epoch, here, peers_tx, push) {
                here.local.insert(*shard, started);
                moves.gained += 1;
            } else {
                unopened = true;
            }
        }
        if let Some(metrics) = &self.ctx.metrics {
            metrics.cluster_moves(ShardMove::Gained, moves.gained as u64);
            metrics.cluster_moves(ShardMove::Lost, moves.lost as u64);
            metrics.cluster_moves(ShardMove::HandedOver, moves.handed as u64);
        }
        if moves.changed() {
            info!(node = %here.name, serving = ?here.local.keys().collect::<Vec<_>>(), gained = moves.gained, lost = moves.lost, handed_over = moves.handed, "cluster: the shards served here changed");
            self.publish(here.map, &here.local, peers_tx);
        }
        unopened
    }

    /// Stops every core: at once when the membership ended (the node stands by), by the
    /// drain when the server stops.
    async fn stop_all(&mut self, local: &mut BTreeMap<u16, Local>, why: &str) {
        let stopping = *self.stop.borrow();
        for (_, l) in std::mem::take(local) {
            if !stopping {
                l.end.end(why);
            }
            drop(l.inputs);
            let _ = l.task.await;
        }
        if !stopping {
            Phase::stand_by(&self.phase);
        }
    }

    /// Opens shard `place` under `epoch` and starts its core; `None` (logged) when it cannot
    /// be opened now (tried again after [`SHARD_OPEN_RETRY_MS`], or at the membership's next
    /// change).
    fn start(
        &self,
        place: ShardPlace,
        epoch: u64,
        here: &Serving,
        peers_tx: &watch::Sender<PeerTable>,
        push: Option<&PushSink>,
    ) -> Option<Local> {
        let (open, ended) = (&here.open, &here.ended);
        let shard = place.me().0;
        let end = TermEnd::new();
        let opened = open
            .lock()
            .map_err(|_| StoreError::Backend("a shard opener panicked".into()))
            .and_then(|mut open| open(place, epoch, end.clone()));
        let relay = match opened {
            Ok(relay) => relay,
            Err(e) => {
                error!(shard, epoch, error = %e, "opening the shard failed");
                return None;
            }
        };
        count_leading(self.ctx.metrics.as_ref(), relay.config(), None);
        let reopen: RelayOpener = {
            let (open, end) = (Arc::clone(open), end.clone());
            Box::new(move || {
                let mut open = open
                    .lock()
                    .map_err(|_| StoreError::Backend("a shard opener panicked".into()))?;
                open(place, epoch, end.clone())
            })
        };
        let (inputs, receiver) = mpsc::channel(INPUT_QUEUE_CAPACITY);
        let term = TermCtx {
            end: end.clone(),
            phase: None,
        };
        let push = push.map(|PushSink(worker)| PushSink(worker.clone()));
        let core = self
            .ctx
            .core(
                relay,
                reopen,
                push,
                Arc::new(AtomicBool::new(false)),
                Some(term),
            )
            .with_peers(peers_tx.subscribe(), self.transit.clone())
            .with_remote(here.remote.clone());
        let stop = self.stop.clone();
        let ended = ended.clone();
        let span = info_span!("core", shard);
        let task = tokio::spawn(
            async move {
                core.run(receiver, stop, None).await;
                let _ = ended.try_send(shard);
            }
            .instrument(span),
        );
        info!(shard, epoch, "serving the shard");
        Some(Local {
            epoch,
            end,
            inputs,
            task,
        })
    }

    /// Tells the handlers and the cores which shards are served here now.
    fn publish(
        &self,
        map: ShardMap,
        local: &BTreeMap<u16, Local>,
        peers_tx: &watch::Sender<PeerTable>,
    ) {
        let inputs: Vec<Option<mpsc::Sender<Input>>> = (0..map.shards())
            .map(|shard| local.get(&shard).map(|l| l.inputs.clone()))
            .collect();
        let cores = Cores::partial(map, inputs);
        peers_tx.send_replace(cores.weak());
        if let Some(metrics) = &self.ctx.metrics {
            for shard in 0..map.shards() {
                metrics.cluster_shard(shard, local.get(&shard).map(|l| l.epoch), local.len());
            }
        }
        self.phase.send_if_modified(|phase| {
            if matches!(phase, Phase::Stopping) {
                return false;
            }
            *phase = Phase::Active {
                inputs: cores,
                epoch: None,
                store_down: Arc::new(AtomicBool::new(false)),
            };
            true
        });
    }
}

/// Takes out of `local` the shards no longer owned under their epoch (`false`) and those
/// planned to leave (`true`).
fn going(
    local: &mut BTreeMap<u16, Local>,
    shards: &BTreeMap<u16, ShardLease>,
) -> Vec<(u16, Local, bool)> {
    let leaving: Vec<(u16, bool)> = local
        .iter()
        .filter_map(|(shard, l)| match shards.get(shard) {
            Some(lease) if lease.epoch == l.epoch && !lease.leaving => None,
            Some(lease) if lease.epoch == l.epoch => Some((*shard, true)),
            _ => Some((*shard, false)),
        })
        .collect();
    leaving
        .into_iter()
        .filter_map(|(shard, planned)| Some((shard, local.remove(&shard)?, planned)))
        .collect()
}

/// Stops the cores of `going` (at once: their terms end) and hands over the shards planned
/// to leave once their cores let their last batches finish.
async fn let_go(going: Vec<(u16, Local, bool)>, hand_over: &mut HandOver, moves: &mut Moves) {
    for (shard, l, planned) in going {
        let why = if planned {
            "the shard is handed over to another node"
        } else {
            "the shard moved to another node"
        };
        l.end.end(why);
        drop(l.inputs);
        // The core lets its batches in flight finish before it ends.
        let _ = l.task.await;
        if planned {
            hand_over_one(hand_over, (shard, l.epoch), moves).await;
        } else {
            moves.lost += 1;
        }
    }
}

/// Hands `shard` of `epoch` over (its core stopped, or never started here).
async fn hand_over_one(hand_over: &mut HandOver, (shard, epoch): (u16, u64), moves: &mut Moves) {
    match hand_over(shard, epoch).await {
        Ok(()) => moves.handed += 1,
        Err(e) => {
            warn!(shard, error = %e, "handing the shard over failed: its move is forced at the deadline");
        }
    }
}

/// What one look at the membership changed here.
#[derive(Debug, Default)]
struct Moves {
    gained: usize,
    lost: usize,
    handed: usize,
}

impl Moves {
    fn changed(&self) -> bool {
        self.gained + self.lost + self.handed > 0
    }
}

/// Hands each gone report to the core serving its user's shard, once the node knows the
/// cluster's map (from the size of the peer table); a report for a shard not served here is
/// dropped (its target stays until the next push to it is refused again).
async fn route_gone_when_joined(
    mut gone: mpsc::Receiver<relay_push::GoneTarget>,
    peers: driver::Peers,
) {
    while let Some(report) = gone.recv().await {
        let core = {
            let table = peers.borrow();
            let map = u16::try_from(table.len()).ok().and_then(ShardMap::new);
            map.and_then(|map| {
                let shard = usize::from(map.of_user(&report.user).0);
                table.get(shard).and_then(|core| core.as_ref()?.upgrade())
            })
        };
        match core {
            Some(core) => {
                let _ = core.send(Input::Gone(report)).await;
            }
            None => tracing::debug!("gone report for a shard not served here: dropped"),
        }
    }
}
