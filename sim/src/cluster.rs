//! The cluster topology (fault kind `cluster`): three relay nodes serve one user base's shards
//! over the shared store, behind a load balancer, without PostgreSQL.
//!
//! ```text
//!   clients ──► relay (load balancer: new connections to the live nodes in turn)
//!                 │                  │                  │
//!                 ▼                  ▼                  ▼
//!              relay-a            relay-b            relay-c     RelayServer::clustered(SimMembership)
//!                 │  ◄── requests, upgrades and crossings passed to a shard's owner ──►  │
//!                 └────── SimStore: rows + nodes' leases + shards (owner, epoch) ───────┘
//! ```
//!
//! Every node runs the server shell's cluster mode (`relay_server::cluster`), the one
//! `relay --cluster-node` runs, over [`SimMembership`]: a lease of [`LEASE_MS`] in the shared
//! store's node table (joined, then renewed every [`RENEW_MS`] by a heartbeat that also runs
//! the coordinator's round, see `crate::store`'s cluster tables), one relay core per shard it
//! owns, its store fenced by the shard's epoch. Requests, WebSocket upgrades and crossings
//! for a shard another node serves go to that node, the cluster key proving them, as between
//! real nodes.
//!
//! The faults: a node powers off (its lease lapses and its shards move at once) and restarts
//! (it joins again and takes a share back: a join under load); a node leaves on purpose (its
//! server's shutdown, as on SIGTERM: it drains, stops its cores and gives its shards up, see
//! [`Departures`]) and starts again later; a node freezes past its lease (SIGSTOP-like; when
//! it resumes, its heartbeat is refused and it stops every core); a node is cut from the
//! database but not from its clients (its commits fail, its heartbeats go unanswered, it
//! gives its membership up once the lease would have lapsed), or from the load balancer but
//! not from the database (its clients' connections go silent; its shards stay its own and
//! the other nodes pass it their requests); two nodes lose the links between them, both ways
//! or one way. What is checked on top of the client-visible oracles: `crate::oracles`'
//! cluster family.
//!
//! Differences from PostgreSQL, on purpose: the coordinator's round runs at every node's
//! heartbeat (relay-pg elects one coordinator), and the load balancer's health check is
//! instant (it reads the leases instead of polling `/readyz`).

use std::collections::BTreeMap;
use std::sync::Arc;

use relay_core::Relay;
use relay_core::handoff::{ShardMap, ShardPlace};
use relay_core::store::StoreError;
use relay_server::cluster::{JoinFuture, Membership, Node, Owned, ShardLease};
use relay_server::leadership::{CAMPAIGN_RETRY_MS, TermStore};
use tokio::sync::watch;

use crate::bounds::{LEASE_MS, RELAY_PORT, RENEW_MS};
use crate::store::{Beat, FaultyStore, SimStore, StoreCtl};
use crate::time::{sim_ms, sleep_ms};

/// The nodes of the cluster topology.
pub const NODES: [&str; 3] = [
    crate::bounds::RELAY_A,
    crate::bounds::RELAY_B,
    crate::bounds::RELAY_C,
];

/// Builds the relay of one shard from its fenced store.
pub type MakeShard =
    Arc<dyn Fn(ShardPlace, TermStore<FaultyStore>) -> Result<Relay, StoreError> + Send + Sync>;

/// The membership of one node over the shared store's node and shard tables.
pub struct SimMembership {
    host: String,
    store: SimStore,
    map: ShardMap,
    make: MakeShard,
}

impl std::fmt::Debug for SimMembership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimMembership")
            .field("host", &self.host)
            .finish_non_exhaustive()
    }
}

impl SimMembership {
    /// The membership of `host` in a cluster of `map`'s shards over `store`; `make` builds
    /// each shard's relay.
    pub fn new(host: &str, store: SimStore, map: ShardMap, make: MakeShard) -> Self {
        Self {
            host: host.to_owned(),
            store,
            map,
            make,
        }
    }
}

/// The address a node is reached at (its listener).
pub fn address(host: &str) -> String {
    format!("{host}:{RELAY_PORT}")
}

fn owns(owned: &BTreeMap<u16, (u64, bool)>) -> Owned {
    Owned::Shards(
        owned
            .iter()
            .map(|(&shard, &(epoch, leaving))| (shard, ShardLease { epoch, leaving }))
            .collect(),
    )
}

fn addresses(directory: BTreeMap<u16, String>) -> BTreeMap<u16, String> {
    directory
        .into_iter()
        .map(|(shard, host)| (shard, address(&host)))
        .collect()
}

/// Leaves the cluster when the membership is dropped (a powered-off node's drop does
/// nothing, see [`StoreCtl::cluster_leave`]) and stops its heartbeat.
struct Leave {
    ctl: StoreCtl,
    host: String,
    beat: tokio::task::JoinHandle<()>,
}

impl Drop for Leave {
    fn drop(&mut self) {
        self.beat.abort();
        self.ctl.cluster_leave(&self.host);
    }
}

/// Replaces `tx`'s value when it differs.
fn publish<T: PartialEq>(tx: &watch::Sender<T>, value: T) {
    tx.send_if_modified(|current| {
        if *current == value {
            return false;
        }
        *current = value;
        true
    });
}

/// A node's heartbeat: renews its lease every [`RENEW_MS`] and publishes what it owns and
/// where the others are; ends its membership when the store says so, or when no heartbeat
/// was answered for a lease (the node cannot know it still owns anything). While the node
/// is frozen (a stopped process), the heartbeat does nothing: after it resumes, what reached
/// its cores meanwhile is served before its next heartbeat learns the lease lapsed, and only
/// the shards' fences keep those commits out.
async fn heartbeat(
    ctl: StoreCtl,
    host: String,
    owned: watch::Sender<Owned>,
    directory: watch::Sender<BTreeMap<u16, String>>,
) {
    let mut answered = sim_ms();
    loop {
        tokio::select! {
            biased;
            () = owned.closed() => return,
            () = sleep_ms(RENEW_MS) => {}
        }
        match ctl.cluster_heartbeat(&host, LEASE_MS) {
            Beat::Unanswered if sim_ms().saturating_sub(answered) >= LEASE_MS => {
                owned.send_replace(Owned::Lost("no heartbeat answered within the lease".into()));
                return;
            }
            Beat::Unanswered | Beat::Paused => {}
            Beat::Lost(why) => {
                owned.send_replace(Owned::Lost(why));
                return;
            }
            Beat::Owns(now) => {
                answered = sim_ms();
                publish(&directory, addresses(ctl.cluster_directory()));
                publish(&owned, owns(&now));
            }
        }
    }
}

impl Membership for SimMembership {
    fn join(&mut self) -> JoinFuture<'_> {
        Box::pin(async move {
            let ctl = self.store.ctl().clone();
            let owned = loop {
                if let Some(owned) = ctl.cluster_join(&self.host, LEASE_MS) {
                    break owned;
                }
                sleep_ms(CAMPAIGN_RETRY_MS).await;
            };
            tracing::info!(host = %self.host, shards = ?owned.keys().collect::<Vec<_>>(), "joined the cluster");
            let (owned_tx, owned_rx) = watch::channel(owns(&owned));
            let (dir_tx, dir_rx) = watch::channel(addresses(ctl.cluster_directory()));
            let beat = tokio::spawn(heartbeat(ctl.clone(), self.host.clone(), owned_tx, dir_tx));
            let (store, host, make) = (
                self.store.clone(),
                self.host.clone(),
                Arc::clone(&self.make),
            );
            let hand = (ctl.clone(), self.host.clone());
            Ok(Node {
                name: self.host.clone(),
                map: self.map,
                owned: owned_rx,
                directory: dir_rx,
                address: address(&self.host),
                open: Box::new(move |place, epoch, end| {
                    let fenced = store.open_cluster_shard(&host, place.me().0, epoch)?;
                    make(place, TermStore::new(fenced, end))
                }),
                hand_over: Box::new(move |shard, epoch| {
                    hand.0.cluster_hand_over(&hand.1, shard, epoch);
                    Box::pin(std::future::ready(Ok(())))
                }),
                holder: Box::new(Leave {
                    ctl,
                    host: self.host.clone(),
                    beat,
                }),
            })
        })
    }
}

/// The nodes asked to leave the cluster and stay away (fault `Leave`): the runner asks and
/// lets them back; each node's host stops its server when asked (a graceful shutdown, as the
/// `relay` binary's on SIGTERM) and starts it again once let back.
#[derive(Debug, Clone)]
pub struct Departures(Arc<watch::Sender<std::collections::BTreeSet<String>>>);

impl Default for Departures {
    fn default() -> Self {
        Self(Arc::new(
            watch::channel(std::collections::BTreeSet::new()).0,
        ))
    }
}

impl Departures {
    /// Asks `host` to leave (`true`) or lets it back.
    pub fn set(&self, host: &str, away: bool) {
        self.0.send_if_modified(|set| {
            if away {
                set.insert(host.to_owned())
            } else {
                set.remove(host)
            }
        });
    }

    /// Lets every node back (healing).
    pub fn clear(&self) {
        self.0.send_if_modified(|set| {
            let had = !set.is_empty();
            set.clear();
            had
        });
    }

    /// Resolves once `host` is asked to leave.
    pub async fn asked(&self, host: &str) {
        let mut rx = self.0.subscribe();
        let _ = rx.wait_for(|set| set.contains(host)).await;
    }

    /// Resolves once `host` may serve (at once unless it was asked to leave).
    pub async fn back(&self, host: &str) {
        let mut rx = self.0.subscribe();
        let _ = rx.wait_for(|set| !set.contains(host)).await;
    }
}

/// The load balancer's pick: the live nodes in turn, each connection's first choice the next
/// one, the others after it for a redispatch (none: the connection is refused).
pub fn round_robin(ctl: StoreCtl) -> impl FnMut() -> Vec<String> {
    let mut next = 0usize;
    move || {
        let mut live = ctl.cluster_live();
        if live.is_empty() {
            return live;
        }
        next = next.wrapping_add(1);
        let first = next % live.len();
        live.rotate_left(first);
        live
    }
}
