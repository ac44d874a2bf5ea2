//! The relay hosts of a run: the relay's configuration (the same in every run of a class but
//! for planted bugs and the seed-drawn caches), and its host, a supervisor that starts the relay server again whenever it
//! exits. With the `failover` fault kind, `relay` is a load balancer in front of `relay-a`
//! and `relay-b`, both campaigning for the shared store's lease (see [`crate::failover`]).
//! The store and the media blobs outlive every power-off; so does the relay's clock.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use relay_core::destination::PushDestinations;
use relay_core::{Config, MemoryBlobStore, Relay};

use super::step::Sim;
use super::{Parts, RunConfig};
use crate::bounds::{RELAY, RELAY_A, RELAY_B, RELAY_PORT};
use crate::class::Class;
use crate::failover::{self, SimLeadership};
use crate::pushworld::PushWorld;
use crate::seeds::{TAG_READS, TAG_RELAY, TAG_RELAY_KEY, TAG_RELAY_START, derive_seed, derive_u64};
use crate::store::SimStore;
use crate::time::sleep_ms;
use crate::transit::CrossingFaults;
use relay_server::metrics::Metrics;
use relay_server::{CommitMode, PushDelivery, ReadMode, RelayServer};
use seam::clock::OffsetClock;
use seam::net::{ServeLimits, Turmoil};

/// A relay that exits (it could not open its store) is started again after this long.
const RELAY_RESTART_MS: u64 = 1_000;

/// How the relay of a run is configured (its class's configuration, see [`crate::class`]).
#[derive(Debug, Clone)]
pub(super) struct RelaySetup {
    config: Config,
    limits: ServeLimits,
    /// Push delivery on (off only with a planted bug).
    push: bool,
    /// Subscriptions checked with production's push policy (public `https://` destinations
    /// only), whatever the push stand-ins need (the `limits` class).
    production_push: bool,
    /// A bug planted in the shared store (the failover topology's or the cluster's).
    #[cfg(feature = "planted-bugs")]
    planted: Option<crate::planted::Planted>,
}

impl RelaySetup {
    /// The relay's configuration.
    pub(super) fn config(&self) -> &Config {
        &self.config
    }

    #[cfg_attr(
        not(feature = "planted-bugs"),
        allow(unused_variables, reason = "only planted bugs change the relay")
    )]
    pub(super) fn of(run: &RunConfig, class: Class) -> Self {
        let base = Config {
            #[cfg(feature = "planted-bugs")]
            planted_bug: run.planted.and_then(crate::planted::Planted::relay_bug),
            tombstone_cache_bytes: cache_bytes(run.seed),
            queue_cache_bytes: cache_bytes(run.seed),
            account_cache_bytes: cache_bytes(run.seed),
            conversation_cache_bytes: cache_bytes(run.seed),
            contact_cache_bytes: cache_bytes(run.seed),
            queue_page_msgs: queue_page_msgs(run.seed),
            ..relay_config()
        };
        Self {
            config: class.relay_config(Config {
                // As the `relay` binary runs: a key file every relay of the deployment
                // reads, and fresh randomness at each start (see `start_seed`).
                jwt_signing_key: Some(relay_core::JwtSigningKey(derive_seed(
                    run.seed,
                    TAG_RELAY_KEY,
                    0,
                ))),
                ..base
            }),
            production_push: !class.honest_push(),
            #[cfg(feature = "planted-bugs")]
            limits: run.planted.map_or_else(ServeLimits::default, |p| {
                p.serve_limits(ServeLimits::default())
            }),
            #[cfg(not(feature = "planted-bugs"))]
            limits: ServeLimits::default(),
            #[cfg(feature = "planted-bugs")]
            push: run.planted != Some(crate::planted::Planted::NoPushDelivery),
            #[cfg(not(feature = "planted-bugs"))]
            push: true,
            #[cfg(feature = "planted-bugs")]
            planted: run.planted,
        }
    }

    /// Plants the run's bug of the shared store, if it has one.
    #[cfg(feature = "planted-bugs")]
    pub(super) fn plant(&self, ctl: &crate::store::StoreCtl) {
        use crate::planted::Planted;
        match self.planted {
            Some(Planted::UnfencedStore) => ctl.set_unfenced(),
            Some(Planted::ShardUnfenced) => ctl.cluster_unfenced(),
            Some(Planted::LeaseRenewedAfterLapse) => ctl.cluster_renew_lapsed(),
            _ => {}
        }
    }
}

impl RelaySetup {
    /// This setup for a relay of `shards` cores. Its configuration names the shard map (each
    /// core runs its own shard of it), so that the drills and oracles know it; the relay's
    /// total of queued bytes is the unsharded total times `shards`, so that each shard's
    /// share of it (`relay_core::handoff::total_share`) is what one relay has.
    pub(super) fn sharded(&self, shards: u16) -> Self {
        let mut s = self.clone();
        if let Some(place) = relay_core::handoff::ShardMap::new(shards)
            .filter(|_| shards > 1)
            .and_then(|map| {
                relay_core::handoff::ShardPlace::new(map, relay_core::handoff::ShardId(0))
            })
        {
            s.config.shard = place;
            s.config.max_offline_queue_bytes_total = s
                .config
                .max_offline_queue_bytes_total
                .saturating_mul(u64::from(shards));
        }
        s
    }
}

/// The relay's configuration in every run of the `standard` class (but for a planted bug);
/// the other classes change it ([`Class::relay_config`]).
fn relay_config() -> Config {
    Config {
        pow_difficulty: 1,
        registrations_per_hour_per_addr: 100_000,
        msgs_per_min_per_user: 10_000,
        payment_webhook_secret: relay_core::config::WebhookSecret(
            crate::bounds::WEBHOOK_SECRET.to_vec(),
        ),
        payment_page_base: crate::world::payment_page_base(),
        ..Config::default()
    }
}

/// The bound of each of the relay's caches over the store (tombstones, queues, accounts,
/// conversations, contacts) in the run of `seed`: none at all for even seeds (every author's
/// tombstones, every queue not held by a synced connection, every account, conversation and
/// contact list is evicted after each input and read from the store when next needed, so the
/// reads and their faults are on the routing, sync and receipt paths), 64 MiB each for odd
/// ones.
fn cache_bytes(seed: u64) -> usize {
    if seed.is_multiple_of(2) {
        0
    } else {
        relay_core::limits::TOMBSTONE_CACHE_BYTES
    }
}

/// Messages per page of a synced recipient's queue, drawn per seed (independently of the
/// caches): pages of two and of sixteen messages make delivery read ahead all the time; the
/// default, a window's worth, as production runs.
fn queue_page_msgs(seed: u64) -> usize {
    match (seed / 2) % 3 {
        0 => 2,
        1 => 16,
        _ => relay_core::limits::QUEUE_PAGE_MSGS,
    }
}

/// Channels an account may create before it buys seats.
pub(super) fn free_channel_quota() -> u32 {
    relay_config().free_channel_quota
}

/// What every relay host of a run is built from.
#[derive(Clone)]
struct RelayParts {
    store: SimStore,
    blobs: MemoryBlobStore,
    config: Config,
    limits: ServeLimits,
    deliver_pushes: bool,
    production_push: bool,
    clock: OffsetClock,
    push: PushWorld,
    metrics: Metrics,
    crossings: CrossingFaults,
    /// The cluster nodes asked to leave (none outside the cluster topology).
    departures: crate::cluster::Departures,
}

impl RelayParts {
    /// The push delivery to the stand-ins, `config` made to agree with it (its push policy
    /// production's again where the class says so: nothing on the simulated network passes).
    fn push_delivery(&self, config: &mut Config) -> PushDelivery {
        let delivery = self.push.delivery(config);
        if self.production_push {
            config.push_destinations = PushDestinations::default();
        }
        delivery
    }
}

/// Adds the relay host (or, in the failover topology, the balancer and both relays).
pub(super) fn add_relay_hosts(
    sim: &mut Sim<'_>,
    parts: &Parts<'_>,
    store: &SimStore,
    setup: &RelaySetup,
) {
    let relay = RelayParts {
        store: store.clone(),
        blobs: MemoryBlobStore::new(),
        config: setup.config.clone(),
        limits: setup.limits,
        deliver_pushes: setup.push,
        production_push: setup.production_push,
        clock: parts.relay_clock.clone(),
        push: parts.push.clone(),
        metrics: parts.metrics.clone(),
        crossings: parts.crossings.clone(),
        departures: parts.departures.clone(),
    };
    let seed = parts.replay.seed;
    let slowest = crate::store::READ_DELAY_MAX_MS
        [(derive_u64(seed, TAG_READS, 0) % crate::store::READ_DELAY_MAX_MS.len() as u64) as usize];
    store
        .ctl()
        .seed_read_delays(derive_u64(seed, TAG_READS, 1), slowest);
    // Half the runs on the memory store without slow commits commit inline, on the core task,
    // as the `relay` binary does with `--memory` (the rest pipeline on a task).
    let inline = !sim.failover
        && store.kind() == crate::faults::StoreKind::Memory
        && !parts
            .replay
            .plan
            .kinds
            .contains(&crate::faults::FaultKind::CommitSlow)
        && derive_u64(seed, TAG_RELAY, 9).is_multiple_of(2);
    if sim.cluster {
        add_cluster(sim, &relay, seed, parts.replay.shards);
    } else if sim.failover {
        add_balancer(sim, store);
        for (n, host) in [RELAY_A, RELAY_B].into_iter().enumerate() {
            add_campaigning_relay(sim, host, &relay, derive_u64(seed, TAG_RELAY, n as u64 + 1));
        }
    } else {
        let shards = parts.replay.shards;
        add_relay(sim, relay, derive_u64(seed, TAG_RELAY, 0), (inline, shards));
    }
}

/// Relay cores of a run's relay, one per shard (`relay --shards`): 1 to [`MAX_RELAY_SHARDS`],
/// drawn from the seed (a campaigning relay of the failover topology runs one).
pub(crate) fn relay_shards(seed: u64) -> u16 {
    let n = derive_u64(seed, TAG_RELAY, 10) % u64::from(MAX_RELAY_SHARDS);
    1 + u16::try_from(n).unwrap_or(0)
}

/// The most relay cores a run's relay has.
pub(crate) const MAX_RELAY_SHARDS: u16 = 4;

/// The one relay of a run: a supervisor that starts the relay again when it exits (the
/// relay binary exits when it cannot open its store at start, e.g. the store is down). It
/// commits `inline` on its core tasks, or pipelined on a task ([`commit_mode`]), and runs
/// `shards` relay cores over the store.
fn add_relay(sim: &mut Sim<'_>, relay: RelayParts, relay_seed: u64, (inline, shards): (bool, u16)) {
    supervised(sim, RELAY, relay, relay_seed, move |relay, cores| {
        let store = relay.store.clone();
        let commit = if inline {
            CommitMode::Inline
        } else {
            commit_mode(&store)
        };
        let reads = read_mode(&store);
        let open = move |place: relay_core::handoff::ShardPlace| {
            cores.open(place, store.open_shard(place.me().0)?)
        };
        RelayServer::sharded(shards, open)
            .with_crossing_transit(relay.crossings.transit())
            .with_commit_mode(commit)
            .with_read_mode(reads)
            .with_metrics(relay.metrics.clone())
    });
}

/// What every relay core of one start of a relay host is built from: the start's
/// configuration, the run's blobs, the start's seed.
#[derive(Clone)]
struct Cores {
    config: Config,
    blobs: MemoryBlobStore,
    seed: u64,
}

impl Cores {
    /// The core of shard `place` over `store`.
    fn open(
        &self,
        place: relay_core::handoff::ShardPlace,
        store: impl relay_core::store::Store + 'static,
    ) -> Result<Relay, relay_core::store::StoreError> {
        let config = Config {
            shard: place,
            ..self.config.clone()
        };
        Relay::with_blobs(
            config,
            Box::new(store),
            Box::new(self.blobs.clone()),
            self.seed,
        )
    }
}

/// A relay host's supervisor: at each start (counted across the host's power cycles, each
/// of which runs the host's closure again) `build` makes the server from the run's relay
/// parts and the start's [`Cores`] (its configuration, its push policy made to agree with
/// the delivery, and its seed); the server is started again whenever it exits. A host asked to leave
/// (a cluster node, see [`crate::cluster::Departures`]) shuts its server down gracefully and
/// starts it again once let back.
fn supervised(
    sim: &mut Sim<'_>,
    host: &str,
    relay: RelayParts,
    relay_seed: u64,
    build: impl Fn(&RelayParts, Cores) -> RelayServer + Clone + 'static,
) {
    let starts = Arc::new(AtomicU64::new(0));
    let name = host.to_owned();
    sim.host(host, move || {
        let (relay, build) = (relay.clone(), build.clone());
        let starts = Arc::clone(&starts);
        let host = name.clone();
        async move {
            loop {
                relay.departures.back(&host).await;
                let relay_seed = start_seed(relay_seed, starts.fetch_add(1, Ordering::Relaxed));
                let mut config = relay.config.clone();
                let delivery = relay.push_delivery(&mut config);
                let cores = Cores {
                    config,
                    blobs: relay.blobs.clone(),
                    seed: relay_seed,
                };
                let server = build(&relay, cores);
                let delivery = relay.deliver_pushes.then_some(delivery);
                let asked = {
                    let (departures, host) = (relay.departures.clone(), host.clone());
                    async move { departures.asked(&host).await }
                };
                serve_relay(server, (relay.limits, &relay.clock), delivery, asked).await;
            }
        }
    });
}

/// A pipelined relay commits on a task of its host's runtime (deterministic),
/// [`relay_server::PIPELINE_DEPTH`] batches in flight; the store's slow-commit fault is the
/// wait that task makes before a commit.
fn commit_mode(store: &SimStore) -> CommitMode {
    let ctl = store.ctl().clone();
    CommitMode::Task {
        delay: Some(Arc::new(move |shard: relay_core::handoff::ShardId| {
            ctl.commit_delay(shard.0)
        })),
    }
}

/// Every relay reads ahead: its reads run on tasks of its host's runtime (deterministic), each
/// after the wait the store's read latency draws for it, so they finish out of order.
fn read_mode(store: &SimStore) -> ReadMode {
    let ctl = store.ctl().clone();
    ReadMode::Task {
        delay: Some(Arc::new(move || ctl.read_delay())),
    }
}

/// The failover topology's load balancer on the `relay` host.
fn add_balancer(sim: &mut Sim<'_>, store: &SimStore) {
    let ctl = store.ctl().clone();
    sim.host(RELAY, move || {
        let ctl = ctl.clone();
        async move {
            failover::balancer(|| ctl.leader().into_iter().collect(), RELAY_PORT).await?;
            Ok(())
        }
    });
}

/// The cluster topology: its load balancer on the `relay` host and its nodes, each a
/// cluster node over the shared store's membership (see [`crate::cluster`]) with the
/// cluster key every node of the run shares.
fn add_cluster(sim: &mut Sim<'_>, relay: &RelayParts, seed: u64, shards: u16) {
    let ctl = relay.store.ctl().clone();
    sim.host(RELAY, move || {
        let ctl = ctl.clone();
        async move {
            failover::balancer(crate::cluster::round_robin(ctl), RELAY_PORT).await?;
            Ok(())
        }
    });
    let Some(map) = relay_core::handoff::ShardMap::new(shards) else {
        return;
    };
    let key = derive_seed(seed, TAG_RELAY_KEY, 1);
    for (n, host) in crate::cluster::NODES.into_iter().enumerate() {
        let relay_seed = derive_u64(seed, TAG_RELAY, 20 + n as u64);
        add_cluster_node(sim, host, relay, (map, key), relay_seed);
    }
}

/// One node of the cluster topology: it joins, serves the shards it owns, and joins again
/// when its membership ends.
fn add_cluster_node(
    sim: &mut Sim<'_>,
    host: &'static str,
    relay: &RelayParts,
    (map, key): (relay_core::handoff::ShardMap, [u8; 32]),
    relay_seed: u64,
) {
    supervised(sim, host, relay.clone(), relay_seed, move |relay, cores| {
        let make: crate::cluster::MakeShard =
            Arc::new(move |place, fenced| cores.open(place, fenced));
        let membership = crate::cluster::SimMembership::new(host, relay.store.clone(), map, make);
        RelayServer::clustered(membership)
            .with_cluster_key(relay_server::peers::ClusterKey::new(key))
            .with_crossing_transit(relay.crossings.transit())
            .with_commit_mode(commit_mode(&relay.store))
            .with_read_mode(read_mode(&relay.store))
            .with_metrics(relay.metrics.clone())
    });
}

/// One relay of the failover topology: it campaigns for the shared store's lease, serves
/// while it leads, and campaigns again when its term ends.
fn add_campaigning_relay(
    sim: &mut Sim<'_>,
    host: &'static str,
    relay: &RelayParts,
    relay_seed: u64,
) {
    supervised(sim, host, relay.clone(), relay_seed, move |relay, cores| {
        let make: failover::MakeRelay =
            Arc::new(move |fenced| cores.open(cores.config.shard, fenced));
        let leadership = SimLeadership::new(host, relay.store.clone(), make);
        RelayServer::campaigning(leadership)
            .with_commit_mode(commit_mode(&relay.store))
            .with_read_mode(read_mode(&relay.store))
            .with_metrics(relay.metrics.clone())
    });
}

/// The RNG seed of start `start` of a relay host whose number is `host_seed`: the `relay`
/// binary seeds each start from the OS, so nothing a relay drew before a restart (ids,
/// tokens' ids, credentials' nonces) is drawn again after it.
fn start_seed(host_seed: u64, start: u64) -> u64 {
    derive_u64(host_seed, TAG_RELAY_START, start)
}

/// One start of a relay host's server, configured as every relay of a run is, until
/// `shutdown` (a cluster node asked to leave); returns once the server exited (shut down, it
/// could not open its store, or its leadership failed for good) and the restart delay
/// passed: the host's supervisor loop starts it again.
async fn serve_relay(
    server: RelayServer,
    (limits, clock): (ServeLimits, &OffsetClock),
    delivery: Option<PushDelivery>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let mut server = server.with_limits(limits).with_clock(clock.clone());
    if let Some(delivery) = delivery {
        server = server.with_push(delivery);
    }
    let served = server
        .run::<Turmoil>(
            SocketAddr::from((Ipv4Addr::UNSPECIFIED, RELAY_PORT)),
            shutdown,
        )
        .await;
    if let Err(error) = served {
        tracing::warn!(%error, "relay exited; the supervisor restarts it");
    }
    sleep_ms(RELAY_RESTART_MS).await;
}
