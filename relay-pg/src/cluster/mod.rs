//! A cluster: several relay nodes over one schema, each owning some of the deployment's shards,
//! every shard's commits fenced by that shard's epoch.
//!
//! * **Joining** ([`join`]): one transaction, under the schema's cluster lock, migrates the
//!   schema, creates the cluster (its shard count, fixed for its life, and one row per shard)
//!   or checks that this node's count is the cluster's, checks the relay's keys as a leader's
//!   campaign does, and takes the next **incarnation** of the node's name with a lease. A name
//!   whose lease still runs is not taken: a node restarted at once waits up to twice the lease
//!   for its previous life's to lapse ([`PgError::NodeNameInUse`] after that).
//! * **The lease** runs on the database's clock (`nodes.lease_until`), so node clocks do not
//!   matter. The heartbeat renews it every [`CLUSTER_HEARTBEAT_INTERVAL_MS`], and only while it
//!   runs: a node whose lease lapsed (paused, partitioned, too slow) cannot renew it, has lost
//!   every shard ([`LostReason::LeaseLapsed`]) and joins again as a new incarnation. A renewal
//!   not answered within the heartbeat timeout ends the membership too, before the lease
//!   could lapse unnoticed (the options require `2 × interval + 2 × timeout < lease`).
//! * **Who owns what** is `shards(id, epoch, owner, owner_incarnation, handover_to, …)`. The
//!   live node first by name is the **coordinator**: at each heartbeat it reads the live nodes
//!   and the shards and applies the plan of [`plan`] (orphans assigned at once, a node over its
//!   share handing shards to one under it). Every change of owner takes the shard's next
//!   epoch. A planned move is a **handover**: the owner sees the mark at its next heartbeat,
//!   stops the shard (the shell closes its connections and lets its last commit finish) and
//!   hands it over itself ([`Member::hand_over`]); an owner that does not within
//!   [`HANDOVER_DEADLINE_MS`] has it taken. Each change is a compare-and-set on the epoch the
//!   coordinator read, and an assignment goes only to a live incarnation, so a coordinator
//!   that acts on a stale view changes nothing.
//! * **Fencing**: a shard's store ([`Member::store`]) runs `relay_fence_shard(shard, epoch)` in
//!   every commit, under a share lock on the shard's row that the move's update conflicts
//!   with: each commit either lands before the move (and the new owner reads it) or fails with
//!   [`PgError::ShardFenced`] and applies nothing. A node that was paused past its lease, or
//!   cut from the database, commits nothing for a shard it lost, whatever it believes. Safety
//!   rests on the fence; the leases and the plan only decide who should write.
//! * **What a node sees** is a [`MemberWatch`]: the shards it owns with their epochs and
//!   planned handovers, as of its last heartbeat, or why its membership ended. A new owner
//!   learns of a shard at its next heartbeat, so a dead node's shards are served again within
//!   the lease plus two heartbeats (plus the time to start the shard).
//!
//! A schema is served either by one active relay ([`crate::campaign`]) or by a cluster, never
//! both: creating the cluster takes the leader epoch from 0 to 1 under the leader row's lock,
//! so it is refused on a schema a leader ever served ([`PgError::WrongMode`]), and a campaign
//! on a cluster's schema is refused. Joins take turns (the cluster lock), and a node of a
//! newer build migrates the schema when it joins: nodes of the older build keep running
//! (migrations add tables and columns), but cannot join again.

mod plan;
mod sql;

use std::{collections::BTreeMap, fmt, sync::Arc, time::Duration};

use tokio::sync::{mpsc, oneshot, watch};
use tokio_postgres::{Client, NoTls};

pub use plan::NodeId;
pub use sql::CLUSTER_LOCK_CLASS;

use crate::{
    KeyClaim, KeyKind, LostReason, PgConfig, PgError, PgStore, error::describe, runtime::PgRuntime,
    schema, store::session_options,
};

/// How long a node's lease runs after each renewal (database time).
pub const CLUSTER_LEASE_MS: u64 = 3_000;
/// Interval between a node's heartbeats (renewal, its shards read, the coordinator's round).
pub const CLUSTER_HEARTBEAT_INTERVAL_MS: u64 = 500;
/// A renewal not answered within this time ends the membership.
pub const CLUSTER_HEARTBEAT_TIMEOUT_MS: u64 = 800;
/// A planned handover not done by its owner within this time is forced by the coordinator.
pub const HANDOVER_DEADLINE_MS: u64 = 5_000;
/// Handovers planned at once at most (a node joining a cluster of many shards gets its share
/// in steps of this many).
pub const MAX_HANDOVERS_PLANNED: usize = 32;
/// Most shards a cluster can have.
pub const MAX_CLUSTER_SHARDS: u16 = 1_024;
/// Longest node name.
pub const MAX_NODE_NAME_BYTES: usize = 64;
/// Longest address a node registers.
pub const MAX_NODE_ADDRESS_BYTES: usize = 200;
/// Server-side `lock_timeout` of the membership session: a shard's row held by a commit that
/// does not end (its process paused inside the transaction) fails that step, which the next
/// round tries again, rather than stalling the heartbeat.
pub const MEMBERSHIP_LOCK_TIMEOUT_MS: u32 = 300;

/// How a node joins and keeps its membership.
#[derive(Debug, Clone)]
pub struct JoinOptions {
    /// The node's name, unique in the cluster (`[A-Za-z0-9._-]`, at most
    /// [`MAX_NODE_NAME_BYTES`]). Its lives are numbered: a restart is the next incarnation.
    pub node: String,
    /// Where the other nodes and the load balancer reach this node (recorded for operators
    /// and for cross-node traffic; never a secret).
    pub address: String,
    /// The cluster's number of shards (checked against the recorded one).
    pub shards: u16,
    /// See [`CLUSTER_LEASE_MS`].
    pub lease_ms: u64,
    /// See [`CLUSTER_HEARTBEAT_INTERVAL_MS`].
    pub heartbeat_interval_ms: u64,
    /// See [`CLUSTER_HEARTBEAT_TIMEOUT_MS`].
    pub heartbeat_timeout_ms: u64,
    /// See [`HANDOVER_DEADLINE_MS`].
    pub handover_deadline_ms: u64,
    /// See [`MAX_HANDOVERS_PLANNED`].
    pub max_handovers: usize,
    /// The relay's key fingerprints, checked as a leader's campaign checks them.
    pub keys: BTreeMap<KeyKind, KeyClaim>,
}

impl JoinOptions {
    /// Node `node` of a cluster of `shards` shards, with the default timings.
    pub fn new(node: impl Into<String>, shards: u16) -> Self {
        Self {
            node: node.into(),
            address: String::new(),
            shards,
            lease_ms: CLUSTER_LEASE_MS,
            heartbeat_interval_ms: CLUSTER_HEARTBEAT_INTERVAL_MS,
            heartbeat_timeout_ms: CLUSTER_HEARTBEAT_TIMEOUT_MS,
            handover_deadline_ms: HANDOVER_DEADLINE_MS,
            max_handovers: MAX_HANDOVERS_PLANNED,
            keys: BTreeMap::new(),
        }
    }

    /// Refuses a name, address, shard count or timing the cluster cannot work with.
    pub fn validate(&self) -> Result<(), PgError> {
        let bad = |why: String| Err(PgError::Config(why));
        let name_ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
        if self.node.is_empty() || self.node.len() > MAX_NODE_NAME_BYTES {
            return bad(format!("a node name has 1 to {MAX_NODE_NAME_BYTES} bytes"));
        }
        if !self.node.chars().all(name_ok) {
            return bad("a node name has only letters, digits, '.', '_' and '-'".into());
        }
        if self.address.len() > MAX_NODE_ADDRESS_BYTES || self.address.chars().any(char::is_control)
        {
            return bad(format!(
                "a node address has at most {MAX_NODE_ADDRESS_BYTES} bytes and no control characters"
            ));
        }
        if self.shards == 0 || self.shards > MAX_CLUSTER_SHARDS {
            return bad(format!(
                "a cluster has 1 to {MAX_CLUSTER_SHARDS} shards, not {}",
                self.shards
            ));
        }
        let (i, t) = (self.heartbeat_interval_ms, self.heartbeat_timeout_ms);
        if i == 0 || t == 0 || 2 * i + 2 * t >= self.lease_ms {
            return bad(format!(
                "the lease ({} ms) must outlast two heartbeat intervals ({i} ms) and two \
                 timeouts ({t} ms), so that a node knows it lost before its lease lapses",
                self.lease_ms
            ));
        }
        if self.max_handovers == 0 {
            return bad("at least one handover must be allowed at once".into());
        }
        Ok(())
    }
}

/// A shard a node owns, as of its last heartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardTerm {
    /// The shard's epoch: its store is fenced by it.
    pub epoch: u64,
    /// The node it is planned to go to: stop it and call [`Member::hand_over`].
    pub handover_to: Option<String>,
}

/// Who serves a shard: its owner's name and the address it registered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardOwner {
    /// The owner's node name.
    pub node: String,
    /// Where it is reached ([`JoinOptions::address`]).
    pub address: String,
}

/// Where a node stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemberStatus {
    /// A member: the shards it owns (possibly none).
    Owns(BTreeMap<u16, ShardTerm>),
    /// The membership ended, for good: every store of it refuses to commit. Join again.
    Lost(LostReason),
}

/// A cloneable view of a node's membership (what its shards' stores check before each commit,
/// and what the shell watches to start, stop and hand over shards).
#[derive(Debug, Clone)]
pub struct MemberWatch {
    node: NodeId,
    status: watch::Receiver<MemberStatus>,
    directory: watch::Receiver<BTreeMap<u16, ShardOwner>>,
}

impl MemberWatch {
    /// This node's name and incarnation.
    pub fn node(&self) -> &NodeId {
        &self.node
    }

    /// The last known status. Lost as well if the heartbeat task is gone.
    pub fn status(&self) -> MemberStatus {
        let last = self.status.borrow().clone();
        match last {
            MemberStatus::Owns(_) if self.status.has_changed().is_err() => MemberStatus::Lost(
                LostReason::SessionEnded("the membership task stopped".into()),
            ),
            last => last,
        }
    }

    /// The shards owned as of the last heartbeat (none once lost).
    pub fn shards(&self) -> BTreeMap<u16, ShardTerm> {
        match self.status() {
            MemberStatus::Owns(shards) => shards,
            MemberStatus::Lost(_) => BTreeMap::new(),
        }
    }

    /// Who serves each shard whose owner's lease runs, as of the last heartbeat (a shard
    /// between owners is missing).
    pub fn directory(&self) -> BTreeMap<u16, ShardOwner> {
        self.directory.borrow().clone()
    }

    /// [`MemberWatch::directory`] as a watch, to follow its changes.
    pub fn directory_watch(&self) -> watch::Receiver<BTreeMap<u16, ShardOwner>> {
        self.directory.clone()
    }

    /// Whether `shard` is still owned under `epoch` (no I/O).
    pub fn holds(&self, shard: u16, epoch: u64) -> bool {
        self.status.has_changed().is_ok()
            && matches!(&*self.status.borrow(), MemberStatus::Owns(s) if s.get(&shard).is_some_and(|t| t.epoch == epoch))
    }

    /// Resolves at the next change of status (at once if the heartbeat task is gone) and
    /// returns the new one. Works on any executor.
    pub async fn changed(&mut self) -> MemberStatus {
        let _ = self.status.changed().await;
        self.status()
    }
}

/// What the shell asks of the heartbeat task.
enum Command {
    HandOver {
        shard: u16,
        epoch: u64,
        done: oneshot::Sender<Result<Option<String>, PgError>>,
    },
}

/// One node's membership of a cluster. Dropping it leaves the cluster: its shards are let go
/// (each under its next epoch) and its lease ended, so the others take them at once.
pub struct Member {
    watch: MemberWatch,
    config: PgConfig,
    shards_total: u16,
    session_pid: i32,
    commands: mpsc::Sender<Command>,
    leave: Option<oneshot::Sender<()>>,
    runtime: Arc<PgRuntime>,
}

impl fmt::Debug for Member {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Member")
            .field("node", &self.watch.node)
            .field("status", &self.watch.status())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Joins the cluster of `config`'s schema (creating it when this is the first node) and starts
/// the heartbeat. Runs on the crate's own thread: the future can be awaited on any executor.
///
/// Fails on a connection or SQL error (the caller retries with its own backoff), on a newer
/// schema, on a schema an active/standby relay serves ([`PgError::WrongMode`]), on another shard
/// count ([`PgError::ShardsDiffer`]), on keys other than the recorded ones
/// ([`PgError::KeysDiffer`]), and when a live node keeps this name for twice the lease
/// ([`PgError::NodeNameInUse`]).
pub async fn join(config: PgConfig, options: JoinOptions) -> Result<Member, PgError> {
    options.validate()?;
    let runtime = Arc::new(PgRuntime::start()?);
    let shards = options.shards;
    let started = runtime
        .run(start(config.clone(), options, Arc::clone(&runtime)))
        .await?;
    Ok(Member::new(started, config, shards, runtime))
}

/// [`join`] for a caller without an executor: blocks the calling thread. Safe on a tokio
/// worker thread (it blocks that thread).
pub fn join_blocking(config: PgConfig, options: JoinOptions) -> Result<Member, PgError> {
    options.validate()?;
    let runtime = Arc::new(PgRuntime::start()?);
    let shards = options.shards;
    let started = runtime.block_on(start(config.clone(), options, Arc::clone(&runtime)))?;
    Ok(Member::new(started, config, shards, runtime))
}

impl Member {
    fn new(started: Started, config: PgConfig, shards_total: u16, runtime: Arc<PgRuntime>) -> Self {
        Self {
            watch: started.watch,
            config,
            shards_total,
            session_pid: started.session_pid,
            commands: started.commands,
            leave: Some(started.leave),
            runtime,
        }
    }

    /// This node's name and incarnation.
    pub fn node(&self) -> &NodeId {
        &self.watch.node
    }

    /// The cluster's number of shards.
    pub fn shards_total(&self) -> u16 {
        self.shards_total
    }

    /// The server process id of the membership session (`pg_stat_activity.pid`). Ending it
    /// (`pg_terminate_backend`) ends the membership at once; the lease then lapses.
    pub fn session_pid(&self) -> i32 {
        self.session_pid
    }

    /// A cloneable view of the membership.
    pub fn watch(&self) -> MemberWatch {
        self.watch.clone()
    }

    /// Opens a store for `shard`, fenced by the epoch this node owns it under (blocking; safe
    /// on a tokio worker). It refuses every commit once the shard is no longer held under that
    /// epoch (as of the last heartbeat, and in any case in the database).
    pub fn store(&self, shard: u16) -> Result<PgStore, PgError> {
        let Some(term) = self.watch.shards().remove(&shard) else {
            return Err(PgError::ShardFenced { shard, epoch: 0 });
        };
        PgStore::connect(
            Arc::clone(&self.runtime),
            &self.config,
            crate::Fence::Shard {
                shard,
                epoch: term.epoch,
            },
            Some({
                let (watch, epoch) = (self.watch(), term.epoch);
                Arc::new(move || watch.holds(shard, epoch))
            }),
        )
    }

    /// Hands `shard`, owned under `epoch` and stopped by the caller (no commit of it in flight
    /// any more), to the node it is planned for, or to nobody when that node is gone (the
    /// coordinator then assigns it). Returns the node it went to. The status drops the shard.
    pub async fn hand_over(&self, shard: u16, epoch: u64) -> Result<Option<String>, PgError> {
        let (done, answer) = oneshot::channel();
        self.commands
            .send(Command::HandOver { shard, epoch, done })
            .await
            .map_err(|_| PgError::Stopped)?;
        answer.await.map_err(|_| PgError::Stopped)?
    }

    /// Leaves the cluster now (see the type's doc).
    pub fn leave(mut self) {
        self.send_leave();
    }

    fn send_leave(&mut self) {
        if let Some(leave) = self.leave.take() {
            let _ = leave.send(());
        }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.send_leave();
    }
}

/// What the start task hands back.
struct Started {
    watch: MemberWatch,
    session_pid: i32,
    commands: mpsc::Sender<Command>,
    leave: oneshot::Sender<()>,
}

/// Runs on the crate's thread: connect, bootstrap, join (waiting for the name's lease), then
/// spawn the heartbeat that owns the membership session.
async fn start(
    config: PgConfig,
    options: JoinOptions,
    runtime: Arc<PgRuntime>,
) -> Result<Started, PgError> {
    let schema_name = config.schema().to_owned();
    let mut settings = session_options(&schema_name);
    settings.push(("lock_timeout", MEMBERSHIP_LOCK_TIMEOUT_MS.to_string()));
    let (mut client, connection) = config
        .driver_with_options(&settings)
        .connect(NoTls)
        .await
        .map_err(|e| PgError::Backend(format!("connecting to {config}: {}", describe(&e))))?;
    let (ended_tx, ended_rx) = oneshot::channel::<String>();
    tokio::spawn(async move {
        let why = match connection.await {
            Ok(()) => "connection closed".to_owned(),
            Err(e) => describe(&e),
        };
        let _ = ended_tx.send(why);
    });
    schema::bootstrap(&mut client, &schema_name).await?;
    let joined = join_waiting(&mut client, &schema_name, &options).await?;
    for event in &joined.events {
        event.log();
    }
    let me = NodeId {
        name: options.node.clone(),
        incarnation: joined.incarnation,
    };
    let statements = sql::Statements::prepare(&client).await?;
    let session_pid: i32 = client
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .map_err(|e| sql::backend(&e))?
        .get(0);
    tracing::info!(target_db = %config, node = %me.name, incarnation = me.incarnation, "joined the cluster");
    let (status_tx, status) = watch::channel(MemberStatus::Owns(BTreeMap::new()));
    let (directory_tx, directory) = watch::channel(BTreeMap::new());
    let (commands, commands_rx) = mpsc::channel(16);
    let (leave, leave_rx) = oneshot::channel();
    let heartbeat = Heartbeat {
        client,
        statements,
        me: me.clone(),
        options,
        owned: BTreeMap::new(),
        status: status_tx,
        directory: directory_tx,
        _runtime: runtime,
    };
    tokio::spawn(heartbeat.run(ended_rx, leave_rx, commands_rx));
    Ok(Started {
        watch: MemberWatch {
            node: me,
            status,
            directory,
        },
        session_pid,
        commands,
        leave,
    })
}

/// The join transaction, tried again while a live incarnation holds the name, for up to twice
/// the lease.
async fn join_waiting(
    client: &mut Client,
    schema_name: &str,
    options: &JoinOptions,
) -> Result<sql::Joined, PgError> {
    let pause = Duration::from_millis(options.heartbeat_interval_ms);
    let tries = (2 * options.lease_ms).div_ceil(options.heartbeat_interval_ms);
    let mut tried = 0;
    loop {
        match sql::join(client, schema_name, options).await {
            Ok(joined) => return Ok(joined),
            Err(sql::JoinRefused::Failed(e)) => return Err(e),
            Err(sql::JoinRefused::NameInUse {
                incarnation,
                address,
            }) => {
                tried += 1;
                if tried > tries {
                    return Err(PgError::NodeNameInUse {
                        name: options.node.clone(),
                        incarnation,
                        address,
                    });
                }
                tracing::info!(
                    node = %options.node,
                    live_incarnation = incarnation,
                    "waiting for the lease of this node name's previous life to lapse"
                );
                tokio::time::sleep(pause).await;
            }
        }
    }
}

/// Owns the membership session: renews, coordinates, publishes, hands over, leaves.
struct Heartbeat {
    client: Client,
    statements: sql::Statements,
    me: NodeId,
    options: JoinOptions,
    owned: BTreeMap<u16, ShardTerm>,
    status: watch::Sender<MemberStatus>,
    directory: watch::Sender<BTreeMap<u16, ShardOwner>>,
    /// Keeps the crate's thread running until the heartbeat is done (a dropped [`Member`]
    /// still leaves).
    _runtime: Arc<PgRuntime>,
}

impl Heartbeat {
    async fn run(
        mut self,
        mut ended: oneshot::Receiver<String>,
        mut leave: oneshot::Receiver<()>,
        mut commands: mpsc::Receiver<Command>,
    ) {
        let mut tick =
            tokio::time::interval(Duration::from_millis(self.options.heartbeat_interval_ms));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let reason = loop {
            tokio::select! {
                biased;
                _ = &mut leave => break LostReason::Left,
                why = &mut ended => {
                    break LostReason::SessionEnded(why.unwrap_or_else(|_| "connection task stopped".into()));
                }
                Some(command) = commands.recv() => self.command(command).await,
                _ = tick.tick() => {
                    if let Some(reason) = self.beat().await {
                        break reason;
                    }
                }
            }
        };
        // Publish first: from here on this membership's stores refuse to commit.
        let _ = self.status.send(MemberStatus::Lost(reason.clone()));
        if reason == LostReason::Left {
            let timeout = Duration::from_millis(self.options.lease_ms);
            match sql::leave(
                &self.client,
                &self.statements,
                &self.me,
                &self.owned,
                timeout,
            )
            .await
            {
                Ok(()) => tracing::info!(node = %self.me.name, "left the cluster"),
                Err(e) => {
                    tracing::warn!(node = %self.me.name, error = %e, "leaving: the lease lapses instead");
                }
            }
        } else {
            tracing::error!(node = %self.me.name, incarnation = self.me.incarnation, reason = %reason, "cluster membership lost");
        }
    }

    /// One heartbeat; `Some` when the membership is over.
    async fn beat(&mut self) -> Option<LostReason> {
        let timeout = Duration::from_millis(self.options.heartbeat_timeout_ms);
        let renewal = sql::renew(
            &self.client,
            &self.statements,
            &self.me,
            self.options.lease_ms,
        );
        match tokio::time::timeout(timeout, renewal).await {
            Err(_) => {
                return Some(LostReason::HeartbeatFailed(format!(
                    "no answer within {} ms",
                    timeout.as_millis()
                )));
            }
            Ok(Err(e)) => return Some(LostReason::HeartbeatFailed(e.to_string())),
            Ok(Ok(sql::Renewed::Lapsed)) => return Some(LostReason::LeaseLapsed),
            Ok(Ok(sql::Renewed::Owns { shards, directory })) => self.publish(shards, directory),
        }
        // Bounded, so that the next renewal comes in time whatever the round does.
        let round = Duration::from_millis(self.options.heartbeat_interval_ms);
        let coordinate = sql::coordinate(&self.client, &self.statements, &self.me, &self.options);
        match tokio::time::timeout(round, coordinate).await {
            Ok(Ok(0)) => {}
            Ok(Ok(_)) => {
                // What changed for this node shows at once rather than at the next beat.
                let owned = sql::renew(
                    &self.client,
                    &self.statements,
                    &self.me,
                    self.options.lease_ms,
                );
                match tokio::time::timeout(timeout, owned).await {
                    Ok(Ok(sql::Renewed::Owns { shards, directory })) => {
                        self.publish(shards, directory);
                    }
                    Ok(Ok(sql::Renewed::Lapsed)) => return Some(LostReason::LeaseLapsed),
                    _ => {}
                }
            }
            Ok(Err(e)) => {
                tracing::warn!(node = %self.me.name, error = %e, "cluster: the coordinator's round failed");
            }
            Err(_) => {
                tracing::warn!(node = %self.me.name, "cluster: the coordinator's round took longer than a heartbeat");
            }
        }
        None
    }

    fn publish(&mut self, shards: BTreeMap<u16, ShardTerm>, directory: BTreeMap<u16, ShardOwner>) {
        self.directory.send_if_modified(|known| {
            let changed = *known != directory;
            *known = directory;
            changed
        });
        self.set_owned(shards);
    }

    fn set_owned(&mut self, shards: BTreeMap<u16, ShardTerm>) {
        if shards != self.owned {
            tracing::info!(
                node = %self.me.name,
                owned = ?shards.keys().collect::<Vec<_>>(),
                "cluster: the shards this node owns changed"
            );
            self.owned = shards;
            let _ = self.status.send(MemberStatus::Owns(self.owned.clone()));
        }
    }

    async fn command(&mut self, command: Command) {
        match command {
            Command::HandOver { shard, epoch, done } => {
                let result =
                    sql::hand_over(&self.client, &self.statements, &self.me, shard, epoch).await;
                if result.is_ok() && self.owned.get(&shard).is_some_and(|t| t.epoch == epoch) {
                    let mut owned = self.owned.clone();
                    owned.remove(&shard);
                    self.set_owned(owned);
                }
                let _ = done.send(result);
            }
        }
    }
}
