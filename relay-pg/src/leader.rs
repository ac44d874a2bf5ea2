//! Leadership: exactly one active relay per schema, fenced by an epoch.
//!
//! A candidate opens a dedicated **lock session**, waits for the session-level advisory lock of
//! its schema (`pg_advisory_lock(LEADER_LOCK_CLASS << 32 | schema oid)`), then in one transaction
//! migrates the schema and increments the epoch row ([`crate::schema`]). It is then the
//! [`Leader`] of that epoch: [`Leader::store`] opens [`PgStore`]s whose every commit re-checks the
//! epoch inside its own transaction. The lock session stays open, heartbeating, for as long as it
//! leads; when it ends (dropped, killed, its machine died, the network failed, the heartbeat
//! timed out, or the epoch moved) the leader's status becomes [`LeaderStatus::Lost`] for good.
//!
//! See the crate documentation for the guarantees and what they rely on.

use std::{collections::BTreeMap, fmt, sync::Arc, time::Duration};

use tokio::sync::{oneshot, watch};
use tokio_postgres::{Client, NoTls, error::SqlState};

use crate::{
    KeyClaim, KeyKind, PgConfig, PgError, PgStore, error::describe, keys, runtime::PgRuntime,
    schema, store::session_options,
};

/// Advisory-lock class of leadership (`'RLY1'`): the lock key is `class << 32 | schema oid`, so
/// two schemas (two deployments) in one database never share a lock.
pub const LEADER_LOCK_CLASS: i64 = 0x524C_5931;
/// How long one `pg_advisory_lock` wait lasts before a standby re-checks that its caller still
/// wants to campaign (the lock is granted the moment it is released, whatever this value).
pub const CAMPAIGN_LOCK_WAIT_MS: u64 = 1_000;
/// Interval between the leader's heartbeats on its lock session.
pub const HEARTBEAT_INTERVAL_MS: u64 = 500;
/// A heartbeat not answered within this time ends the leadership.
pub const HEARTBEAT_TIMEOUT_MS: u64 = 2_000;
/// Server-side TCP keepalive of the lock session: idle seconds before the first probe. With the
/// interval and count below, the server drops the session of a dead or unreachable leader's
/// machine (and so releases its lock) after about 2 + 3 × 1 = 5 s.
pub const LOCK_KEEPALIVE_IDLE_S: u32 = 2;
/// Server-side TCP keepalive of the lock session: seconds between probes.
pub const LOCK_KEEPALIVE_INTERVAL_S: u32 = 1;
/// Server-side TCP keepalive of the lock session: unanswered probes before the session is dropped.
pub const LOCK_KEEPALIVE_COUNT: u32 = 3;
/// Server-side `tcp_user_timeout` of the lock session: unacknowledged data for this long drops it.
pub const LOCK_TCP_USER_TIMEOUT_MS: u32 = 5_000;
/// Server-side `idle_session_timeout` of the lock session once it leads: a leader whose heartbeats
/// stop for this long (the process is paused — SIGSTOP, a debugger, a frozen VM — while its
/// kernel still acknowledges TCP, so keepalives see nothing wrong) has its lock session ended by
/// the server, which releases the lock to a standby. Well above [`HEARTBEAT_INTERVAL_MS`].
pub const LOCK_IDLE_SESSION_TIMEOUT_MS: u32 = 3_000;
/// Longest `holder` label kept in the `leader` row.
pub const MAX_HOLDER_BYTES: usize = 200;

/// How to campaign and how to watch over a won leadership.
#[derive(Debug, Clone)]
pub struct CampaignOptions {
    /// Who this process is, recorded in the `leader` row for operators (e.g. `"relay@host
    /// pid 1234"`); cut to [`MAX_HOLDER_BYTES`]. Never put a secret here.
    pub holder: String,
    /// See [`CAMPAIGN_LOCK_WAIT_MS`].
    pub lock_wait_ms: u64,
    /// See [`HEARTBEAT_INTERVAL_MS`].
    pub heartbeat_interval_ms: u64,
    /// See [`HEARTBEAT_TIMEOUT_MS`].
    pub heartbeat_timeout_ms: u64,
    /// Fingerprints of the keys this relay uses, checked against (or recorded as) the ones of
    /// every relay of the schema when it wins (see [the crate doc](crate#keys-shared-by-every-relay)).
    /// Empty by default: nothing checked.
    pub keys: BTreeMap<KeyKind, KeyClaim>,
}

impl Default for CampaignOptions {
    fn default() -> Self {
        Self {
            holder: format!("relay pid {}", std::process::id()),
            lock_wait_ms: CAMPAIGN_LOCK_WAIT_MS,
            heartbeat_interval_ms: HEARTBEAT_INTERVAL_MS,
            heartbeat_timeout_ms: HEARTBEAT_TIMEOUT_MS,
            keys: BTreeMap::new(),
        }
    }
}

/// Whether a [`Leader`] still leads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaderStatus {
    /// The lock session is alive and the epoch is ours (as of the last heartbeat).
    Leading,
    /// Leadership ended, for good: this epoch's stores refuse every commit.
    Lost(LostReason),
}

/// Why leadership ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LostReason {
    /// [`Leader::resign`] was called or the [`Leader`] was dropped.
    Resigned,
    /// The lock session's connection ended (killed by `pg_terminate_backend`, server restart,
    /// network failure); its advisory lock is released.
    SessionEnded(String),
    /// A heartbeat failed or was not answered within the timeout.
    HeartbeatFailed(String),
    /// The epoch row moved on (someone else took over without the lock: manual intervention).
    Superseded {
        /// The epoch found in the database.
        epoch: u64,
    },
    /// A cluster node's lease had lapsed when it tried to renew it: its shards may be another
    /// node's already.
    LeaseLapsed,
    /// A cluster node left ([`crate::Member::leave`] or dropped).
    Left,
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Resigned => f.write_str("resigned"),
            Self::SessionEnded(why) => write!(f, "lock session ended: {why}"),
            Self::HeartbeatFailed(why) => write!(f, "heartbeat failed: {why}"),
            Self::Superseded { epoch } => write!(f, "superseded by epoch {epoch}"),
            Self::LeaseLapsed => f.write_str("the node's lease had lapsed"),
            Self::Left => f.write_str("left the cluster"),
        }
    }
}

/// A cloneable view of one leadership's status (what a [`PgStore`] checks before each commit,
/// and what the shell watches to go fail-stop).
#[derive(Debug, Clone)]
pub struct LeaderWatch {
    epoch: u64,
    status: watch::Receiver<LeaderStatus>,
}

impl LeaderWatch {
    /// The epoch of this leadership.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Whether it still leads (no I/O: the last known status). False as well if the task that
    /// watches the lock session is gone, whatever it last published.
    pub fn is_leading(&self) -> bool {
        matches!(*self.status.borrow(), LeaderStatus::Leading) && self.status.has_changed().is_ok()
    }

    /// The last known status.
    pub fn status(&self) -> LeaderStatus {
        self.status.borrow().clone()
    }

    /// Resolves once leadership is lost (at once if it already is). Works on any executor.
    pub async fn lost(&mut self) -> LostReason {
        let ended = || LostReason::SessionEnded("the leadership task stopped".into());
        match self
            .status
            .wait_for(|s| !matches!(s, LeaderStatus::Leading))
            .await
        {
            Ok(status) => match &*status {
                LeaderStatus::Lost(reason) => reason.clone(),
                LeaderStatus::Leading => ended(),
            },
            Err(_) => ended(),
        }
    }
}

/// The leader of one epoch. Dropping it resigns (closes the lock session: a standby takes over
/// at once).
pub struct Leader {
    watch: LeaderWatch,
    config: PgConfig,
    lock_backend_pid: i32,
    resign: Option<oneshot::Sender<()>>,
    runtime: Arc<PgRuntime>,
}

impl fmt::Debug for Leader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leader")
            .field("epoch", &self.watch.epoch)
            .field("status", &self.watch.status())
            .field("config", &self.config)
            .field("lock_backend_pid", &self.lock_backend_pid)
            .finish()
    }
}

/// Connects, creates or checks the schema, and waits until this process leads; then migrates
/// the schema and takes the next epoch. Runs on the crate's own thread: the returned future can
/// be awaited on any executor; dropping it abandons the campaign (and its connection).
///
/// Fails on a connection or SQL error (the caller retries with its own backoff; a standby that
/// loses its database connection while waiting fails too), on a newer schema, or, once it would
/// lead, with [`PgError::KeysDiffer`] when one of [`CampaignOptions::keys`] is not the recorded
/// one (nothing written; retrying cannot help).
pub async fn campaign(config: PgConfig, options: CampaignOptions) -> Result<Leader, PgError> {
    let runtime = Arc::new(PgRuntime::start()?);
    let task = campaign_task(config.clone(), options);
    let elected = runtime.run(task).await?;
    Ok(Leader::new(elected, config, runtime))
}

/// [`campaign`] for a caller without an executor: blocks the calling thread until this process
/// leads or the campaign fails. Safe on a tokio worker thread (it blocks that thread).
pub fn campaign_blocking(config: PgConfig, options: CampaignOptions) -> Result<Leader, PgError> {
    let runtime = Arc::new(PgRuntime::start()?);
    let elected = runtime.block_on(campaign_task(config.clone(), options))?;
    Ok(Leader::new(elected, config, runtime))
}

impl Leader {
    fn new(elected: Elected, config: PgConfig, runtime: Arc<PgRuntime>) -> Self {
        Self {
            watch: LeaderWatch {
                epoch: elected.epoch,
                status: elected.status,
            },
            config,
            lock_backend_pid: elected.lock_backend_pid,
            resign: Some(elected.resign),
            runtime,
        }
    }

    /// The epoch (fencing token) this leadership holds; every new leader's is larger.
    pub fn epoch(&self) -> u64 {
        self.watch.epoch
    }

    /// Whether it still leads (no I/O).
    pub fn is_leading(&self) -> bool {
        self.watch.is_leading()
    }

    /// A cloneable status view (e.g. for the shell's `/readyz` and its fail-stop watcher).
    pub fn watch(&self) -> LeaderWatch {
        self.watch.clone()
    }

    /// Resolves once leadership is lost. Works on any executor.
    pub async fn lost(&self) -> LostReason {
        self.watch.clone().lost().await
    }

    /// The server process id of the lock session (`pg_stat_activity.pid`; an operator can end
    /// this leadership with `pg_terminate_backend(pid)`).
    pub fn lock_backend_pid(&self) -> i32 {
        self.lock_backend_pid
    }

    /// Opens a new [`PgStore`] fenced by this epoch, on its own connection (blocking; safe on a
    /// tokio worker). Call it again after a failed commit to get a fresh connection: it fails
    /// with [`PgError::Fenced`] once leadership is lost.
    pub fn store(&self) -> Result<PgStore, PgError> {
        if !self.is_leading() {
            return Err(PgError::Fenced {
                epoch: self.epoch(),
            });
        }
        PgStore::connect(
            Arc::clone(&self.runtime),
            &self.config,
            crate::Fence::Leader {
                epoch: self.epoch(),
            },
            Some({
                let watch = self.watch();
                Arc::new(move || watch.is_leading())
            }),
        )
    }

    /// Gives up leadership now: the lock session closes and a standby takes over at once.
    /// Stores of this epoch refuse every later commit.
    pub fn resign(mut self) {
        self.send_resign();
    }

    fn send_resign(&mut self) {
        if let Some(resign) = self.resign.take() {
            let _ = resign.send(());
        }
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        self.send_resign();
    }
}

/// What the campaign task hands back.
struct Elected {
    epoch: u64,
    status: watch::Receiver<LeaderStatus>,
    resign: oneshot::Sender<()>,
    lock_backend_pid: i32,
}

/// Runs on the crate's thread: connect, bootstrap, wait for the lock, migrate and bump, then
/// spawn the heartbeat that owns the lock session.
async fn campaign_task(config: PgConfig, options: CampaignOptions) -> Result<Elected, PgError> {
    let schema = config.schema().to_owned();
    let mut holder = options.holder.clone();
    truncate_utf8(&mut holder, MAX_HOLDER_BYTES);
    let mut settings = session_options(&schema);
    settings.extend([
        ("tcp_keepalives_idle", LOCK_KEEPALIVE_IDLE_S.to_string()),
        (
            "tcp_keepalives_interval",
            LOCK_KEEPALIVE_INTERVAL_S.to_string(),
        ),
        ("tcp_keepalives_count", LOCK_KEEPALIVE_COUNT.to_string()),
        ("tcp_user_timeout", LOCK_TCP_USER_TIMEOUT_MS.to_string()),
    ]);
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
    schema::bootstrap(&mut client, &schema).await?;
    keys::warn_early(&client, &schema, &options.keys).await?;
    let key = lock_key(&client, &schema).await?;
    tracing::info!(target_db = %config, "standby: waiting for leadership");
    wait_for_lock(&client, key, options.lock_wait_ms).await?;
    let (epoch, key_events) =
        schema::migrate_and_bump(&mut client, &schema, &holder, &options.keys).await?;
    for event in &key_events {
        event.log();
    }
    // From now on the heartbeat keeps the session busy: if it stops (a paused process), the
    // server ends the session and the lock goes to a standby.
    client
        .batch_execute(&format!(
            "SET idle_session_timeout = {LOCK_IDLE_SESSION_TIMEOUT_MS}"
        ))
        .await
        .map_err(|e| PgError::Backend(describe(&e)))?;
    let epoch = u64::try_from(epoch)
        .map_err(|_| PgError::Backend(format!("negative epoch {epoch} in the leader row")))?;
    let pid: i32 = client
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .map_err(|e| PgError::Backend(describe(&e)))?
        .get(0);
    let heartbeat = client
        .prepare("SELECT epoch FROM leader WHERE id = 1")
        .await
        .map_err(|e| PgError::Backend(describe(&e)))?;
    tracing::info!(target_db = %config, epoch, lock_backend_pid = pid, "leading");
    let (status_tx, status) = watch::channel(LeaderStatus::Leading);
    let (resign, resign_rx) = oneshot::channel();
    let watcher = Heartbeat {
        client,
        statement: heartbeat,
        epoch,
        interval: Duration::from_millis(options.heartbeat_interval_ms.max(1)),
        timeout: Duration::from_millis(options.heartbeat_timeout_ms.max(1)),
    };
    tokio::spawn(watcher.run(ended_rx, resign_rx, status_tx));
    Ok(Elected {
        epoch,
        status,
        resign,
        lock_backend_pid: pid,
    })
}

async fn lock_key(client: &Client, schema: &str) -> Result<i64, PgError> {
    let oid: i64 = client
        .query_one(
            "SELECT oid::bigint FROM pg_namespace WHERE nspname = $1",
            &[&schema],
        )
        .await
        .map_err(|e| PgError::Backend(describe(&e)))?
        .get(0);
    Ok((LEADER_LOCK_CLASS << 32) | oid)
}

/// Blocks in `pg_advisory_lock` in slices of `wait_ms` until the lock is ours.
async fn wait_for_lock(client: &Client, key: i64, wait_ms: u64) -> Result<(), PgError> {
    let backend = |e: &tokio_postgres::Error| PgError::Backend(describe(e));
    client
        .batch_execute(&format!("SET lock_timeout = {}", wait_ms.max(1)))
        .await
        .map_err(|e| backend(&e))?;
    let lock = client
        .prepare("SELECT pg_advisory_lock($1)")
        .await
        .map_err(|e| backend(&e))?;
    loop {
        match client.execute(&lock, &[&key]).await {
            Ok(_) => break,
            Err(e) if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => {
                tracing::trace!("standby: the leadership lock is still held");
            }
            Err(e) => return Err(backend(&e)),
        }
    }
    client
        .batch_execute("SET lock_timeout = 0")
        .await
        .map_err(|e| backend(&e))
}

/// Owns the lock session while leading; publishes the status; closes the session when done.
struct Heartbeat {
    client: Client,
    statement: tokio_postgres::Statement,
    epoch: u64,
    interval: Duration,
    timeout: Duration,
}

impl Heartbeat {
    async fn run(
        self,
        mut ended: oneshot::Receiver<String>,
        mut resign: oneshot::Receiver<()>,
        status: watch::Sender<LeaderStatus>,
    ) {
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let reason = loop {
            tokio::select! {
                biased;
                _ = &mut resign => break LostReason::Resigned,
                why = &mut ended => {
                    break LostReason::SessionEnded(why.unwrap_or_else(|_| "connection task stopped".into()));
                }
                _ = tick.tick() => {
                    if let Some(reason) = self.beat().await {
                        break reason;
                    }
                }
            }
        };
        // Publish first: from here on this epoch's stores refuse to commit.
        let _ = status.send(LeaderStatus::Lost(reason.clone()));
        match &reason {
            LostReason::Resigned => tracing::info!(epoch = self.epoch, "resigned leadership"),
            other => tracing::error!(epoch = self.epoch, reason = %other, "leadership lost"),
        }
        // Dropping the client closes the lock session, which releases the lock if still held.
    }

    /// One heartbeat; `Some` when leadership is over.
    async fn beat(&self) -> Option<LostReason> {
        match tokio::time::timeout(self.timeout, self.client.query_one(&self.statement, &[])).await
        {
            Err(_) => Some(LostReason::HeartbeatFailed(format!(
                "no answer within {} ms",
                self.timeout.as_millis()
            ))),
            Ok(Err(e)) => Some(LostReason::HeartbeatFailed(describe(&e))),
            Ok(Ok(row)) => {
                let current: i64 = row.get(0);
                (u64::try_from(current).ok() != Some(self.epoch)).then(|| LostReason::Superseded {
                    epoch: u64::try_from(current).unwrap_or(0),
                })
            }
        }
    }
}

fn truncate_utf8(s: &mut String, max_bytes: usize) {
    if s.len() > max_bytes {
        let mut cut = max_bytes;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holder_labels_are_cut_on_a_char_boundary() {
        let mut s = "é".repeat(150); // 300 bytes
        truncate_utf8(&mut s, MAX_HOLDER_BYTES);
        assert_eq!(s.len(), MAX_HOLDER_BYTES);
        let mut s = format!("a{}", "é".repeat(150));
        truncate_utf8(&mut s, MAX_HOLDER_BYTES);
        assert_eq!(s.len(), MAX_HOLDER_BYTES - 1);
    }

    #[test]
    fn the_lock_key_keeps_the_class_in_the_high_half() {
        let key = (LEADER_LOCK_CLASS << 32) | 16_384;
        assert_eq!(key >> 32, LEADER_LOCK_CLASS);
        assert_eq!(key & 0xFFFF_FFFF, 16_384);
        assert!(key > 0);
    }
}
