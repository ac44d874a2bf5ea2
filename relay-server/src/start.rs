//! Starting a server's cores as its mode says: a single server's (each shard's relay opened
//! at once), a campaigning server's supervisor, a cluster node's; and push delivery, once per
//! server.

use std::io;
use std::sync::{Arc, atomic::AtomicBool};

use relay_core::handoff::ShardMap;
use seam::net::Network;
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{Instrument as _, debug};

use super::cluster::{self, ClusterSupervisor, Membership};
use super::driver::{self, CoreParts, CoreThread, Input, Phase, PushSink};
use super::leadership::Leadership;
use super::supervisor::Supervisor;
use super::{
    CoreCtx, INPUT_QUEUE_CAPACITY, Mode, RelayOpener, RelayServer, abandoned_at, core_span,
    count_leading, drain_deadline, join_cores, no_relay, onward,
};

impl RelayServer {
    /// Starts the cores as the server's mode says (a cluster node: also its way to the other
    /// nodes), with the clock, metrics and limits they share: the task that ends with them.
    pub(super) fn start_cores<N: Network>(
        &mut self,
        phase_tx: &Arc<watch::Sender<Phase>>,
        stop_rx: watch::Receiver<bool>,
        fatal_tx: oneshot::Sender<String>,
    ) -> io::Result<(tokio::task::JoinHandle<()>, Option<onward::Onward>)> {
        let (test_clock, clock) = self.core_clock();
        self.attach_metrics();
        self.connections
            .set_exempt("trusted proxies", (*self.trusted_proxies).clone());
        let ctx = self.core_ctx(clock, test_clock);
        let mode = std::mem::replace(&mut self.mode, Mode::Single(vec![Box::new(no_relay)]));
        Ok(match mode {
            Mode::Single(openers) => {
                let core = self.start_single::<N>(openers, &ctx, phase_tx, &stop_rx)?;
                (core, None)
            }
            Mode::Campaign(leadership) => {
                let core = self.start_campaign::<N>(leadership, ctx, phase_tx, stop_rx, fatal_tx);
                (core, None)
            }
            Mode::Cluster(membership) => {
                let (routes_tx, routes) = watch::channel(onward::Routes::default());
                let onward = self.cluster_key.clone().map(|key| {
                    let watches = (routes, stop_rx.clone());
                    let clock = Arc::clone(&self.clock);
                    onward::Onward::new::<N>(key, clock, watches, self.metrics.clone())
                });
                let started = (membership, routes_tx);
                let core = self.start_cluster::<N>(started, ctx, phase_tx, stop_rx, fatal_tx);
                (core, onward)
            }
        })
    }

    /// A single server: opens each core's relay with its opener (an error fails the start),
    /// starts push delivery, turns the phase active with the cores' inputs and spawns them
    /// (a sharded server's cores send each other what crosses between shards).
    fn start_single<N: Network>(
        &mut self,
        openers: Vec<RelayOpener>,
        ctx: &CoreCtx,
        phase: &watch::Sender<Phase>,
        stop: &watch::Receiver<bool>,
    ) -> io::Result<tokio::task::JoinHandle<()>> {
        let mut relays = Vec::with_capacity(openers.len());
        for mut open in openers {
            relays.push((open().map_err(io::Error::other)?, open));
        }
        let map = relays[0].0.config().shard.map();
        count_leading(self.metrics.as_ref(), relays[0].0.config(), None);
        let parts = self.start_push::<N>();
        let (senders, receivers): (Vec<_>, Vec<_>) = (0..relays.len())
            .map(|_| mpsc::channel(INPUT_QUEUE_CAPACITY))
            .unzip();
        let (cores, mut threads) = CoreThread::for_cores(self.core_threads, map, senders)?;
        let store_down = Arc::new(AtomicBool::new(false));
        phase.send_replace(Phase::Active {
            inputs: cores.clone(),
            epoch: None,
            store_down: Arc::clone(&store_down),
        });
        let peers = driver::fixed_peers(cores.weak());
        let sharded = relays.len() > 1;
        // One core takes the push worker's gone reports; with several, a task hands each to
        // its user's core.
        let (mut gone, routed) = match (parts.gone, sharded) {
            (Some(gone), true) => (
                None,
                Some(tokio::spawn(route_gone(gone, map, peers.clone()))),
            ),
            (gone, _) => (gone, None),
        };
        drop(cores);
        let mut tasks = Vec::with_capacity(relays.len());
        for ((relay, open), inputs) in relays.into_iter().zip(receivers) {
            // Every core pushes through the one worker.
            let push = parts
                .push
                .as_ref()
                .map(|PushSink(worker)| PushSink(worker.clone()));
            let (ctx, store_down) = (ctx.clone(), Arc::clone(&store_down));
            let (stop, gone) = (stop.clone(), gone.take());
            let peers = sharded.then(|| (peers.clone(), self.transit.clone()));
            let span = core_span(sharded, &relay);
            let deadline = drain_deadline(stop.clone(), self.drain_deadline_ms);
            // Built where it runs: on its thread's runtime, if it has one.
            let run = move |own_thread: bool| {
                let core = ctx
                    .core(relay, open, push, store_down, None)
                    .with_sockets_on_its_thread(own_thread);
                let core = match peers {
                    Some((peers, transit)) => core.with_peers(peers, transit),
                    None => core,
                };
                abandoned_at(core.run(inputs, stop, gone), deadline).instrument(span)
            };
            tasks.push(CoreThread::spawn(threads.next(), run)?);
        }
        Ok(tokio::spawn(join_cores(tasks, routed)))
    }

    /// A campaigning server: starts push delivery and spawns the [`Supervisor`], which serves
    /// each term it wins (a leadership that fails for good is reported on `fatal`).
    fn start_campaign<N: Network>(
        &mut self,
        leadership: Box<dyn Leadership>,
        ctx: CoreCtx,
        phase: &Arc<watch::Sender<Phase>>,
        stop: watch::Receiver<bool>,
        fatal: oneshot::Sender<String>,
    ) -> tokio::task::JoinHandle<()> {
        let parts = self.start_push::<N>();
        let supervisor = Supervisor {
            leadership,
            ctx,
            phase: Arc::clone(phase),
            stop,
        };
        tokio::spawn(supervisor.run(parts, fatal))
    }

    /// A cluster node: starts push delivery and spawns the [`ClusterSupervisor`], which serves
    /// the shards of each membership (a join that fails for good is reported on `fatal`).
    fn start_cluster<N: Network>(
        &mut self,
        (membership, routes): (Box<dyn Membership>, watch::Sender<onward::Routes>),
        ctx: CoreCtx,
        phase: &Arc<watch::Sender<Phase>>,
        stop: watch::Receiver<bool>,
        fatal: oneshot::Sender<String>,
    ) -> tokio::task::JoinHandle<()> {
        let parts = self.start_push::<N>();
        let supervisor = ClusterSupervisor {
            membership,
            ctx,
            phase: Arc::clone(phase),
            stop,
            transit: self.transit.clone(),
            remote: cluster::remote_factory::<N>(self.cluster_key.clone(), Arc::clone(&self.clock)),
            routes,
            connections: self.connections.clone(),
        };
        tokio::spawn(supervisor.run(parts, fatal))
    }

    /// Starts push delivery (once per server: it outlives the terms of a campaigning one).
    fn start_push<N: Network>(&mut self) -> CoreParts {
        // The worker signs with the base clock, never the test-mode offset (see `push`).
        match self.push.take() {
            Some(delivery) => {
                let (worker, gone) = delivery.spawn::<N>(Arc::clone(&self.clock));
                if let Some(metrics) = &self.metrics {
                    metrics.attach_push(worker.clone());
                }
                CoreParts {
                    push: Some(PushSink(worker)),
                    gone: Some(gone),
                }
            }
            None => CoreParts {
                push: None,
                gone: None,
            },
        }
    }
}

/// Hands each of the push worker's gone reports to the core of its user's shard (a sharded
/// server's); ends when the worker does or a core has stopped. Holds the cores' inputs
/// weakly, as the cores hold each other's.
async fn route_gone(
    mut gone: mpsc::Receiver<relay_push::GoneTarget>,
    map: ShardMap,
    cores: driver::Peers,
) {
    while let Some(report) = gone.recv().await {
        // Weak: a core still stops once the handlers and sockets dropped its inputs.
        let shard = usize::from(map.of_user(&report.user).0);
        let core = cores
            .borrow()
            .get(shard)
            .and_then(|core| core.as_ref()?.upgrade());
        match core {
            Some(core) => {
                if core.send(Input::Gone(report)).await.is_err() && cores.has_changed().is_err() {
                    break;
                }
            }
            // A fixed table: its core stopped, so the server does. A live one (a cluster
            // node's): the shard is not served here now, and its report is dropped.
            None if cores.has_changed().is_err() => break,
            None => debug!(shard, "gone report for a shard not served here: dropped"),
        }
    }
}
