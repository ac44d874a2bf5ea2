//! [`PgStore`]: relay-core's [`Store`] over PostgreSQL, fenced by a leadership epoch or, in a
//! cluster, by one shard's epoch ([`Fence`]).
//!
//! **One round trip per commit.** A batch is first reduced to its net effect per table (a
//! [`Plan`], rules below), then sent as one pipeline of prepared statements on the store's
//! connection: `BEGIN`, `SELECT relay_fence(epoch)` (or `relay_fence_shard(shard, epoch)`),
//! then per touched table, in this order, at
//! most one `DELETE … WHERE expires_at <= $1` (a range expiry, expiring tables only), one
//! `INSERT … SELECT FROM unnest($keys, $values[, $expiries]) ON CONFLICT (k) DO UPDATE` and one
//! `DELETE … WHERE k = ANY($keys)` (a single row uses the plain `VALUES ($1, $2[, $3])` /
//! `k = $1` forms, ~50 µs cheaper: a routed message touches three tables with one row each),
//! then `COMMIT`. Any failing statement aborts the transaction (PostgreSQL turns the final
//! `COMMIT` into a rollback), so `Err` means nothing was applied, except after a timeout or a
//! lost connection, where the outcome is unknown (the relay then rebuilds from the database,
//! which holds the truth; clients re-send with the same ids).
//!
//! **The reduction**, which leaves exactly the state applying the batch in order leaves:
//! * Of the keyed writes (`Put`, `PutExpiring`, `Delete`) only the last one of each
//!   (table, key) is kept: it replaces whatever the earlier ones, and any range expiry before
//!   it, left in that row.
//! * The range expiries (`Expire`) of one table become one, reaching the largest `up_to`, and
//!   run before the table's keyed writes. A row the batch does not write keeps its expiry during
//!   the batch, so some expiry of the batch deletes it exactly when the largest one does; a row
//!   the batch writes is settled by its last write, whatever ran before.
//! * A kept `PutExpiring` that an `Expire` later in the batch reaches (`expires_at <= up_to`) is
//!   sent as a delete: that expiry would have deleted it. Any other kept write is sent as is.
//! * A plain `Put` in an expiring table writes `expires_at = NULL`: the row never expires.
//!
//! Within a table the keyed upserts and deletes then touch disjoint keys, so their statements
//! commute, and they come after the table's one range delete; tables do not interact.
//!
//! **Refused before anything is sent** (the store stays usable, nothing is applied): an
//! expiring mutation on a table without expiry ([`Table::has_expiry`]), a key or value larger
//! than [`MAX_ROW_BYTES`], an expiry beyond `i64::MAX` milliseconds (an `Expire` beyond it is
//! the same as one at it, and is sent as that). After any other failed commit the store refuses
//! everything: open a new one.
//!
//! `load` reads every table in one `REPEATABLE READ` snapshot with one `UNION ALL` query, after
//! checking the epoch (the leader's or the shard's) in the same snapshot; `load_eager` the same without the lazy tables
//! ([`Table::is_lazy`]), which it does not read at all.
//!
//! **Keyed reads** ([`Store::reader`]) go through a connection of their own, on the crate's
//! thread: each read is one prepared `SELECT` in autocommit, so it sees every transaction
//! committed before it began. Reads are not fenced (they change nothing, and every row they see
//! is committed). A read not answered within [`READ_TIMEOUT_MS`] fails, and so does any read the
//! server refuses; the reader then drops its connection and opens a new one at its next read.

use std::{collections::BTreeMap, fmt, future::Future, pin::Pin, sync::Arc, time::Duration};

use futures_util::{TryStreamExt, future::join_all};
use relay_core::store::{Batch, MutationRef, Snapshot, Store, StoreError, StoreRead, Table};
use tokio_postgres::{Client, NoTls, Statement, types::ToSql};

use crate::{
    PgConfig, PgError,
    error::{classify, describe},
    runtime::PgRuntime,
};

/// A commit not answered within this time fails (outcome unknown) and closes the connection.
pub const COMMIT_TIMEOUT_MS: u64 = 10_000;
/// A `load` (or `load_eager`) not finished within this time fails.
pub const LOAD_TIMEOUT_MS: u64 = 300_000;
/// A keyed read ([`Store::reader`]) not answered within this time fails, and the reader opens a
/// new connection at its next read. Also the reader session's server-side `statement_timeout`,
/// so the server stops a read the reader gave up on. Opening the reader's connection (connect
/// and prepare) has the same bound.
pub const READ_TIMEOUT_MS: u64 = 10_000;
/// Server-side: a session of ours idle inside a transaction this long is ended by the server, so a
/// half-sent pipeline (network cut) cannot hold the epoch row's share lock and stall a takeover.
pub const IDLE_IN_TRANSACTION_TIMEOUT_MS: u32 = 5_000;
/// Server-side TCP keepalive of store connections (commits and reads): idle seconds before the
/// first probe.
pub const STORE_KEEPALIVE_IDLE_S: u32 = 5;
/// Largest key or value a commit sends (PostgreSQL's own field limit is 1 GiB). Checked before
/// anything is sent: a parameter the driver failed to encode would be skipped while the rest of
/// the pipeline, `COMMIT` included, went through.
pub const MAX_ROW_BYTES: usize = 256 * 1024 * 1024;

/// Session settings every connection of the crate starts with.
pub(crate) fn session_options(schema: &str) -> Vec<(&'static str, String)> {
    vec![
        ("search_path", schema.to_owned()),
        (
            "idle_in_transaction_session_timeout",
            IDLE_IN_TRANSACTION_TIMEOUT_MS.to_string(),
        ),
    ]
}

/// An expiring mutation or read on a table without expiry: a bug of the caller, refused.
pub(crate) fn no_expiry(table: Table) -> PgError {
    PgError::Backend(format!(
        "table {} has no expiry column (expiring rows only go in tables with Table::has_expiry)",
        table.name()
    ))
}

/// What a store's commits are fenced by: the leadership epoch of an active/standby relay, or
/// one shard's epoch in a cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fence {
    /// `relay_fence(epoch)`: the schema's leader epoch.
    Leader {
        /// The epoch.
        epoch: u64,
    },
    /// `relay_fence_shard(shard, epoch)`: the shard's epoch.
    Shard {
        /// The shard.
        shard: u16,
        /// Its epoch.
        epoch: u64,
    },
}

impl Fence {
    /// The epoch.
    pub fn epoch(self) -> u64 {
        match self {
            Self::Leader { epoch } | Self::Shard { epoch, .. } => epoch,
        }
    }

    /// The error of a commit this fence refused.
    pub(crate) fn refused(self) -> PgError {
        match self {
            Self::Leader { epoch } => PgError::Fenced { epoch },
            Self::Shard { shard, epoch } => PgError::ShardFenced { shard, epoch },
        }
    }
}

/// What tells a store, without I/O, whether its fence still holds as far as its owner knows
/// (a leadership still leading, a cluster node still holding the shard under the epoch), so
/// that it refuses before sending anything.
pub(crate) type Tenure = Arc<dyn Fn() -> bool + Send + Sync>;

/// relay-core's [`Store`] over PostgreSQL. Every commit is one transaction that first checks,
/// under a share lock on the epoch row, that the database's leadership epoch is still this
/// store's; otherwise it fails with [`StoreError::Fenced`] and applies nothing.
///
/// Get one from [`crate::Leader::store`] (which also refuses commits as soon as the leader knows
/// it lost), from [`crate::Member::store`] in a cluster (fenced by one shard's epoch, and
/// refusing as soon as the node knows the shard moved) or, for a process that does its own
/// election, [`PgStore::open_fenced`] or [`PgStore::open_shard_fenced`].
/// Blocking calls: safe on a tokio worker thread and on plain threads (the connection lives on the
/// crate's own thread). After a failed commit the store refuses everything (open a new one),
/// except a batch refused before anything was sent (see the module doc).
pub struct PgStore {
    runtime: Arc<PgRuntime>,
    conn: Option<Arc<DataConn>>,
    fence: Fence,
    tenure: Option<Tenure>,
    fenced: bool,
    /// What readers connect with (its `Debug` and `Display` never show the password).
    config: PgConfig,
}

impl fmt::Debug for PgStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgStore")
            .field("target", &self.config.to_string())
            .field("fence", &self.fence)
            .field("connected", &self.conn.is_some())
            .field("fenced", &self.fenced)
            .finish()
    }
}

impl PgStore {
    /// A store that commits only while the database's leadership epoch is `epoch` (the schema
    /// must exist: a [`crate::campaign`] created it). Safe whoever holds the leadership lock: the
    /// fence is enforced by the database. Blocking.
    pub fn open_fenced(config: &PgConfig, epoch: u64) -> Result<Self, PgError> {
        let fence = Fence::Leader { epoch };
        Self::connect(Arc::new(PgRuntime::start()?), config, fence, None)
    }

    /// A store that commits only while `shard`'s epoch in the cluster's `shards` table is
    /// `epoch` (the cluster must exist: a [`crate::join`] created it). Safe whoever owns the
    /// shard: the fence is enforced by the database. Blocking.
    pub fn open_shard_fenced(config: &PgConfig, shard: u16, epoch: u64) -> Result<Self, PgError> {
        let fence = Fence::Shard { shard, epoch };
        Self::connect(Arc::new(PgRuntime::start()?), config, fence, None)
    }

    pub(crate) fn connect(
        runtime: Arc<PgRuntime>,
        config: &PgConfig,
        fence: Fence,
        tenure: Option<Tenure>,
    ) -> Result<Self, PgError> {
        let driver_config = config.clone();
        let conn = runtime.block_on(async move { DataConn::connect(&driver_config).await })?;
        Ok(Self {
            runtime,
            conn: Some(Arc::new(conn)),
            fence,
            tenure,
            fenced: false,
            config: config.clone(),
        })
    }

    /// The epoch this store commits under.
    pub fn epoch(&self) -> u64 {
        self.fence.epoch()
    }

    /// What this store's commits are fenced by.
    pub fn fence(&self) -> Fence {
        self.fence
    }

    /// The connection, unless the store is fenced or broken.
    fn usable(&self) -> Result<Arc<DataConn>, PgError> {
        let lost = self.tenure.as_ref().is_some_and(|holds| !holds());
        if self.fenced || lost {
            return Err(self.fence.refused());
        }
        self.conn.clone().ok_or_else(|| {
            PgError::Backend("the connection failed earlier; open a new store".into())
        })
    }

    /// Records the outcome of an operation: fenced for good, or broken after any other error.
    fn settle<T>(&mut self, result: Result<T, PgError>) -> Result<T, StoreError> {
        match &result {
            Ok(_) => {}
            Err(PgError::Fenced { .. } | PgError::ShardFenced { .. }) => {
                self.fenced = true;
                tracing::error!(fence = ?self.fence, "commit refused: the fence has ended");
            }
            Err(e) => {
                self.conn = None;
                tracing::warn!(target_db = %self.config, error = %e, "PostgreSQL store failed");
            }
        }
        result.map_err(StoreError::from)
    }

    /// `load` (every table) or `load_eager` (all but the lazy ones).
    fn load_tables(&mut self, eager: bool) -> Result<Snapshot, StoreError> {
        let result = self.usable().and_then(|conn| {
            let fence = self.fence;
            self.runtime.block_on(async move {
                let timeout = Duration::from_millis(LOAD_TIMEOUT_MS);
                tokio::time::timeout(timeout, conn.load(fence, eager))
                    .await
                    .unwrap_or_else(|_| {
                        Err(PgError::Backend(format!(
                            "load not finished within {LOAD_TIMEOUT_MS} ms"
                        )))
                    })
            })
        });
        self.settle(result)
    }
}

impl Store for PgStore {
    fn load(&mut self) -> Result<Snapshot, StoreError> {
        self.load_tables(false)
    }

    fn load_eager(&mut self) -> Result<Snapshot, StoreError> {
        self.load_tables(true)
    }

    fn commit(&mut self, batch: &Batch) -> Result<(), StoreError> {
        let conn = match self.usable() {
            Ok(conn) => conn,
            Err(e) => return self.settle(Err(e)),
        };
        if batch.is_empty() {
            return Ok(());
        }
        // Refused here, nothing was sent: the connection is as it was and stays usable.
        let plan = Plan::new(batch).map_err(StoreError::from)?;
        let fence = self.fence;
        let result = self.runtime.block_on(async move {
            let timeout = Duration::from_millis(COMMIT_TIMEOUT_MS);
            tokio::time::timeout(timeout, conn.commit(fence, &plan))
                .await
                .unwrap_or_else(|_| {
                    Err(PgError::Backend(format!(
                        "commit not answered within {COMMIT_TIMEOUT_MS} ms (outcome unknown)"
                    )))
                })
        });
        self.settle(result)
    }

    /// Keyed reads on a connection of their own (blocking), on this store's thread: opened at
    /// the first read (so this returns at once, whatever the database does), autocommit
    /// prepared `SELECT`s, each within [`READ_TIMEOUT_MS`]; after a failed read the next one
    /// reconnects. They work whatever becomes of this store (fenced or broken): reads need no
    /// fence. The reader's `Debug` shows where it connects, never the password.
    fn reader(&mut self) -> Result<Box<dyn StoreRead>, StoreError> {
        let reader = crate::reader::PgReader::new(Arc::clone(&self.runtime), self.config.clone());
        Ok(Box::new(reader))
    }
}

/// The net effect of a batch on one table (see the module doc).
#[derive(Debug, Default)]
struct TableOps {
    /// Rows expiring at or before this are deleted first: the largest `up_to` of the batch's
    /// expiries of this table, if any.
    expire_up_to: Option<i64>,
    /// Rows to insert or replace.
    put_keys: Vec<String>,
    put_values: Vec<Vec<u8>>,
    /// The expiry of each row of `put_keys` (NULL: none). Sent only for expiring tables, where
    /// every upsert sets the column; always `None` in the others.
    put_expiries: Vec<Option<i64>>,
    /// Rows to delete (disjoint from `put_keys`).
    delete_keys: Vec<String>,
}

/// A batch reduced to its net effect per table (rules in the module doc).
#[derive(Debug)]
struct Plan(BTreeMap<Table, TableOps>);

/// The last keyed write of one row, as it is sent.
enum RowOp {
    Upsert(Vec<u8>, Option<i64>),
    Delete,
}

/// An epoch-millisecond expiry as PostgreSQL's BIGINT.
fn sql_ms(ms: u64) -> Result<i64, PgError> {
    i64::try_from(ms).map_err(|_| {
        PgError::Backend(format!(
            "expiry {ms} is beyond the largest storable ({}); nothing was sent",
            i64::MAX
        ))
    })
}

impl Plan {
    fn new(batch: &Batch) -> Result<Self, PgError> {
        let too_large = |what: &str, len: usize| {
            PgError::Backend(format!(
                "a {what} of {len} bytes exceeds MAX_ROW_BYTES ({MAX_ROW_BYTES}); nothing was sent"
            ))
        };
        let mut tables: BTreeMap<Table, TableOps> = BTreeMap::new();
        // Latest `up_to` of the expiries after the current position, per table.
        let mut later_expiry: BTreeMap<Table, u64> = BTreeMap::new();
        let mut last: BTreeMap<(Table, String), RowOp> = BTreeMap::new();
        // Backwards: the first write of a row met is its last in the batch, and every expiry
        // that follows it in the batch has been seen.
        for m in batch.iter().rev() {
            let table = m.table();
            if m.misplaces_an_expiry() {
                return Err(no_expiry(table));
            }
            if let Some(key) = m.key()
                && key.len() > MAX_ROW_BYTES
            {
                return Err(too_large("key", key.len()));
            }
            let (key, op) = match m {
                MutationRef::Expire { up_to, .. } => {
                    let latest = later_expiry.entry(table).or_insert(up_to);
                    *latest = (*latest).max(up_to);
                    // Every stored expiry is at most `i64::MAX`: beyond it is the same as at it.
                    let up_to = i64::try_from(up_to).unwrap_or(i64::MAX);
                    let ops = tables.entry(table).or_default();
                    ops.expire_up_to = ops.expire_up_to.max(Some(up_to));
                    continue;
                }
                MutationRef::Delete { key, .. } => (key, RowOp::Delete),
                MutationRef::Put { key, value, .. } => {
                    if value.len() > MAX_ROW_BYTES {
                        return Err(too_large("value", value.len()));
                    }
                    (key, RowOp::Upsert(value.to_vec(), None))
                }
                MutationRef::PutExpiring {
                    key,
                    value,
                    expires_at,
                    ..
                } => {
                    if value.len() > MAX_ROW_BYTES {
                        return Err(too_large("value", value.len()));
                    }
                    let at = sql_ms(expires_at)?;
                    let expired_later = later_expiry
                        .get(&table)
                        .is_some_and(|&up_to| expires_at <= up_to);
                    if expired_later {
                        (key, RowOp::Delete)
                    } else {
                        (key, RowOp::Upsert(value.to_vec(), Some(at)))
                    }
                }
            };
            last.entry((table, key.to_owned())).or_insert(op);
        }
        for ((table, key), op) in last {
            let ops = tables.entry(table).or_default();
            match op {
                RowOp::Upsert(value, expires_at) => {
                    ops.put_keys.push(key);
                    ops.put_values.push(value);
                    ops.put_expiries.push(expires_at);
                }
                RowOp::Delete => ops.delete_keys.push(key),
            }
        }
        Ok(Self(tables))
    }
}

/// The prepared statements of a store connection.
struct Statements {
    begin: Statement,
    commit: Statement,
    fence: Statement,
    fence_shard: Statement,
    begin_snapshot: Statement,
    epoch: Statement,
    shard_epoch: Statement,
    load_all: Statement,
    load_eager: Statement,
    upsert: BTreeMap<Table, Statement>,
    delete: BTreeMap<Table, Statement>,
    upsert_one: BTreeMap<Table, Statement>,
    delete_one: BTreeMap<Table, Statement>,
    /// Expiring tables only.
    expire: BTreeMap<Table, Statement>,
}

/// A store connection and its statements (lives on the crate's thread).
struct DataConn {
    client: Client,
    statements: Statements,
}

type Step<'a> = Pin<Box<dyn Future<Output = Result<u64, tokio_postgres::Error>> + Send + 'a>>;

/// No parameters, typed for `execute_raw`.
const NO_PARAMS: [&(dyn ToSql + Sync); 0] = [];

/// Opens a connection of the crate with `extra` session settings after the common ones, and
/// spawns its connection task (on the calling runtime: the crate's thread).
pub(crate) async fn open_connection(
    config: &PgConfig,
    extra: &[(&'static str, String)],
    what: &'static str,
) -> Result<Client, PgError> {
    let mut settings = session_options(config.schema());
    settings.push(("tcp_keepalives_idle", STORE_KEEPALIVE_IDLE_S.to_string()));
    settings.extend(extra.iter().cloned());
    let (client, connection) = config
        .driver_with_options(&settings)
        .connect(NoTls)
        .await
        .map_err(|e| PgError::Backend(format!("connecting to {config}: {}", describe(&e))))?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::warn!(error = %describe(&e), "PostgreSQL {what} connection ended");
        }
    });
    Ok(client)
}

impl DataConn {
    async fn connect(config: &PgConfig) -> Result<Self, PgError> {
        let client = open_connection(config, &[], "store").await?;
        let statements = prepare(&client).await?;
        Ok(Self { client, statements })
    }

    /// One pipelined transaction (see the module doc).
    async fn commit(&self, fence: Fence, plan: &Plan) -> Result<(), PgError> {
        let epoch_param = epoch_param(fence.epoch())?;
        let shard_param = match fence {
            Fence::Shard { shard, .. } => i32::from(shard),
            Fence::Leader { .. } => 0,
        };
        let c = &self.client;
        let s = &self.statements;
        let mut steps: Vec<Step<'_>> = Vec::with_capacity(3 + 3 * plan.0.len());
        steps.push(Box::pin(c.execute_raw(&s.begin, NO_PARAMS)));
        steps.push(match fence {
            Fence::Leader { .. } => {
                Box::pin(c.execute_raw(&s.fence, [&epoch_param as &(dyn ToSql + Sync)]))
            }
            Fence::Shard { .. } => Box::pin(c.execute_raw(
                &s.fence_shard,
                [
                    &shard_param as &(dyn ToSql + Sync),
                    &epoch_param as &(dyn ToSql + Sync),
                ],
            )),
        });
        for (table, ops) in &plan.0 {
            if let Some(up_to) = &ops.expire_up_to {
                // `Plan::new` refuses an expiry on a table without one.
                let expire = s.expire.get(table).ok_or_else(|| no_expiry(*table))?;
                let params: [&(dyn ToSql + Sync); 1] = [up_to];
                steps.push(Box::pin(c.execute_raw(expire, params)));
            }
            let expiring = table.has_expiry();
            match (
                ops.put_keys.as_slice(),
                ops.put_values.as_slice(),
                ops.put_expiries.as_slice(),
            ) {
                ([], _, _) => {}
                ([key], [value], [expires_at]) if expiring => {
                    let params: [&(dyn ToSql + Sync); 3] = [key, value, expires_at];
                    steps.push(Box::pin(c.execute_raw(&s.upsert_one[table], params)));
                }
                ([key], [value], _) => {
                    let params: [&(dyn ToSql + Sync); 2] = [key, value];
                    steps.push(Box::pin(c.execute_raw(&s.upsert_one[table], params)));
                }
                _ if expiring => {
                    let params: [&(dyn ToSql + Sync); 3] =
                        [&ops.put_keys, &ops.put_values, &ops.put_expiries];
                    steps.push(Box::pin(c.execute_raw(&s.upsert[table], params)));
                }
                _ => {
                    let params: [&(dyn ToSql + Sync); 2] = [&ops.put_keys, &ops.put_values];
                    steps.push(Box::pin(c.execute_raw(&s.upsert[table], params)));
                }
            }
            match ops.delete_keys.as_slice() {
                [] => {}
                [key] => {
                    let params: [&(dyn ToSql + Sync); 1] = [key];
                    steps.push(Box::pin(c.execute_raw(&s.delete_one[table], params)));
                }
                _ => {
                    let params: [&(dyn ToSql + Sync); 1] = [&ops.delete_keys];
                    steps.push(Box::pin(c.execute_raw(&s.delete[table], params)));
                }
            }
        }
        steps.push(Box::pin(c.execute_raw(&s.commit, NO_PARAMS)));
        // The driver sends each request when its future is first polled, in this order, and the
        // server answers in order: one round trip for the whole transaction.
        let results = join_all(steps).await;
        let committed = results.last().is_some_and(Result::is_ok);
        for result in results {
            if let Err(e) = result {
                if committed && e.as_db_error().is_none() {
                    // Cannot happen with `MAX_ROW_BYTES` checked: a statement failed before it
                    // was sent, so the server did not abort the transaction.
                    tracing::error!(error = %describe(&e), "a statement was not sent but COMMIT succeeded");
                }
                return Err(classify(&e, fence.refused()));
            }
        }
        Ok(())
    }

    /// Every row (of the tables that are not lazy, when `eager`), in one snapshot that also
    /// shows the epoch is still ours.
    async fn load(&self, fence: Fence, eager: bool) -> Result<Snapshot, PgError> {
        let backend = |e: &tokio_postgres::Error| PgError::Backend(describe(e));
        let c = &self.client;
        let s = &self.statements;
        c.execute_raw(&s.begin_snapshot, NO_PARAMS)
            .await
            .map_err(|e| backend(&e))?;
        let current: Option<i64> = match fence {
            Fence::Leader { .. } => c.query_opt(&s.epoch, &[]).await,
            Fence::Shard { shard, .. } => c.query_opt(&s.shard_epoch, &[&i32::from(shard)]).await,
        }
        .map_err(|e| backend(&e))?
        .map(|row| row.get(0));
        if current.and_then(|c| u64::try_from(c).ok()) != Some(fence.epoch()) {
            // The caller drops this connection; the server rolls the snapshot back.
            return Err(fence.refused());
        }
        let mut snapshot = Snapshot::new();
        let load = if eager { &s.load_eager } else { &s.load_all };
        let rows = c
            .query_raw(load, NO_PARAMS)
            .await
            .map_err(|e| backend(&e))?;
        let mut rows = std::pin::pin!(rows);
        while let Some(row) = rows.try_next().await.map_err(|e| backend(&e))? {
            let index: i16 = row.get(0);
            let table = usize::try_from(index)
                .ok()
                .and_then(|i| Table::ALL.get(i).copied())
                .ok_or_else(|| PgError::Backend(format!("bad table index {index}")))?;
            snapshot
                .entry(table)
                .or_default()
                .insert(row.get(1), row.get(2));
        }
        c.execute_raw(&s.commit, NO_PARAMS)
            .await
            .map_err(|e| backend(&e))?;
        Ok(snapshot)
    }
}

fn epoch_param(epoch: u64) -> Result<i64, PgError> {
    i64::try_from(epoch).map_err(|_| PgError::Backend(format!("epoch {epoch} out of range")))
}

/// One `UNION ALL` query over every table (or, when `eager`, every table that is not lazy), each
/// row tagged with its table's index in [`Table::ALL`].
fn load_query(eager: bool) -> String {
    Table::ALL
        .iter()
        .enumerate()
        .filter(|(_, t)| !(eager && t.is_lazy()))
        .map(|(i, t)| format!("SELECT {i}::int2, k, v FROM {}", t.name()))
        .collect::<Vec<_>>()
        .join(" UNION ALL ")
}

/// The upserts of `table`, batched (`unnest`) and single-row. In an expiring table every upsert
/// sets `expires_at` (NULL for a row put without expiry).
fn upsert_sql(table: Table) -> (String, String) {
    let name = table.name();
    if table.has_expiry() {
        (
            format!(
                "INSERT INTO {name} (k, v, expires_at) \
                 SELECT * FROM unnest($1::text[], $2::bytea[], $3::int8[]) \
                 ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v, expires_at = EXCLUDED.expires_at"
            ),
            format!(
                "INSERT INTO {name} (k, v, expires_at) VALUES ($1, $2, $3::int8) \
                 ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v, expires_at = EXCLUDED.expires_at"
            ),
        )
    } else {
        (
            format!(
                "INSERT INTO {name} (k, v) SELECT * FROM unnest($1::text[], $2::bytea[]) \
                 ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v"
            ),
            format!(
                "INSERT INTO {name} (k, v) VALUES ($1, $2) \
                 ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v"
            ),
        )
    }
}

/// Prepares `texts`, pipelined (one round trip), in order.
pub(crate) async fn prepare_all(
    client: &Client,
    texts: &[String],
) -> Result<std::vec::IntoIter<Statement>, PgError> {
    let prepared = join_all(texts.iter().map(|t| client.prepare(t))).await;
    Ok(prepared
        .into_iter()
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| PgError::Backend(format!("preparing statements: {}", describe(&e))))?
        .into_iter())
}

/// The next of the statements prepared by [`prepare_all`].
pub(crate) fn next_statement(
    prepared: &mut std::vec::IntoIter<Statement>,
) -> Result<Statement, PgError> {
    prepared
        .next()
        .ok_or_else(|| PgError::Backend("a statement went missing".into()))
}

/// Prepares every statement of a store connection, pipelined (one round trip).
async fn prepare(client: &Client) -> Result<Statements, PgError> {
    let mut texts = vec![
        "BEGIN".to_owned(),
        "COMMIT".to_owned(),
        "SELECT relay_fence($1)".to_owned(),
        "SELECT relay_fence_shard($1, $2)".to_owned(),
        "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY".to_owned(),
        "SELECT epoch FROM leader WHERE id = 1".to_owned(),
        "SELECT epoch FROM shards WHERE id = $1".to_owned(),
        load_query(false),
        load_query(true),
    ];
    for t in Table::ALL {
        let (upsert, upsert_one) = upsert_sql(t);
        texts.push(upsert);
        texts.push(format!(
            "DELETE FROM {} WHERE k = ANY($1::text[])",
            t.name()
        ));
        texts.push(upsert_one);
        texts.push(format!("DELETE FROM {} WHERE k = $1", t.name()));
        if t.has_expiry() {
            texts.push(format!(
                "DELETE FROM {} WHERE expires_at <= $1::int8",
                t.name()
            ));
        }
    }
    let mut prepared = prepare_all(client, &texts).await?;
    let mut next = || next_statement(&mut prepared);
    let (begin, commit, fence, fence_shard) = (next()?, next()?, next()?, next()?);
    let (begin_snapshot, epoch, shard_epoch) = (next()?, next()?, next()?);
    let (load_all, load_eager) = (next()?, next()?);
    let (mut upsert, mut delete) = (BTreeMap::new(), BTreeMap::new());
    let (mut upsert_one, mut delete_one) = (BTreeMap::new(), BTreeMap::new());
    let mut expire = BTreeMap::new();
    for t in Table::ALL {
        upsert.insert(t, next()?);
        delete.insert(t, next()?);
        upsert_one.insert(t, next()?);
        delete_one.insert(t, next()?);
        if t.has_expiry() {
            expire.insert(t, next()?);
        }
    }
    Ok(Statements {
        begin,
        commit,
        fence,
        fence_shard,
        begin_snapshot,
        epoch,
        shard_epoch,
        load_all,
        load_eager,
        upsert,
        delete,
        upsert_one,
        delete_one,
        expire,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use relay_core::store::Mutation;

    fn put(table: Table, key: &str, value: &str) -> Mutation {
        Mutation::Put {
            table,
            key: key.into(),
            value: value.as_bytes().to_vec(),
        }
    }

    fn put_exp(table: Table, key: &str, value: &str, expires_at: u64) -> Mutation {
        Mutation::PutExpiring {
            table,
            key: key.into(),
            value: value.as_bytes().to_vec(),
            expires_at,
        }
    }

    fn del(table: Table, key: &str) -> Mutation {
        Mutation::Delete {
            table,
            key: key.into(),
        }
    }

    fn expire(table: Table, up_to: u64) -> Mutation {
        Mutation::Expire { table, up_to }
    }

    /// Rows with their expiry, as the database holds them.
    type State = BTreeMap<(Table, String), (Vec<u8>, Option<u64>)>;

    /// Applies a batch in order to `state`: the naive model the plan must agree with.
    fn apply_in_order(mut state: State, batch: &Batch) -> State {
        for m in batch {
            match m {
                MutationRef::Put { table, key, value } => {
                    state.insert((table, key.to_owned()), (value.to_vec(), None));
                }
                MutationRef::PutExpiring {
                    table,
                    key,
                    value,
                    expires_at,
                } => {
                    state.insert((table, key.to_owned()), (value.to_vec(), Some(expires_at)));
                }
                MutationRef::Delete { table, key } => {
                    state.remove(&(table, key.to_owned()));
                }
                MutationRef::Expire { table, up_to } => {
                    state.retain(|(t, _), (_, at)| {
                        !(*t == table && at.is_some_and(|at| at <= up_to))
                    });
                }
            }
        }
        state
    }

    /// Applies a plan to `state` the way the pipeline does: per table the range expiry, then
    /// the upserts, then the deletes.
    fn apply_plan(mut state: State, plan: &Plan) -> State {
        for (table, ops) in &plan.0 {
            if let Some(up_to) = ops.expire_up_to {
                let up_to = u64::try_from(up_to).unwrap();
                state.retain(|(t, _), (_, at)| !(t == table && at.is_some_and(|at| at <= up_to)));
            }
            assert_eq!(ops.put_keys.len(), ops.put_values.len());
            assert_eq!(ops.put_keys.len(), ops.put_expiries.len());
            for ((k, v), at) in ops
                .put_keys
                .iter()
                .zip(&ops.put_values)
                .zip(&ops.put_expiries)
            {
                assert!(table.has_expiry() || at.is_none());
                let at = at.map(|at| u64::try_from(at).unwrap());
                state.insert((*table, k.clone()), (v.clone(), at));
            }
            for k in &ops.delete_keys {
                assert!(!ops.put_keys.contains(k), "puts and deletes are disjoint");
                state.remove(&(*table, k.clone()));
            }
        }
        state
    }

    #[test]
    fn a_plan_keeps_the_last_mutation_of_each_key() {
        let batch: Batch = vec![
            put(Table::Accounts, "a", "1"),
            put(Table::Accounts, "a", "2"),
            put(Table::Messages, "x", "m"),
            del(Table::Messages, "x"),
            del(Table::Messages, "y"),
            put(Table::Messages, "y", "back"),
            put(Table::Meta, "a", "meta"),
        ]
        .into();
        let model = apply_in_order(State::new(), &batch);
        let plan = Plan::new(&batch).unwrap();
        assert_eq!(apply_plan(State::new(), &plan), model);
        assert_eq!(plan.0[&Table::Accounts].put_values, [b"2".to_vec()]);
        assert_eq!(plan.0[&Table::Messages].delete_keys, ["x"]);
        assert!(plan.0.values().all(|ops| ops.expire_up_to.is_none()));
    }

    #[test]
    fn an_expiry_goes_first_and_a_row_it_would_expire_later_is_deleted() {
        let t = Table::Tombstones;
        let batch: Batch = vec![
            put_exp(t, "k", "old", 10),
            put_exp(t, "gone", "x", 10),
            expire(t, 50),
            put_exp(t, "k", "new", 90),
            put_exp(t, "due", "y", 60),
            put_exp(t, "kept", "z", 200),
            put(t, "plain", "p"),
            expire(t, 70),
            expire(t, 20),
        ]
        .into();
        let plan = Plan::new(&batch).unwrap();
        let ops = &plan.0[&t];
        assert_eq!(ops.expire_up_to, Some(70));
        assert_eq!(ops.put_keys, ["k", "kept", "plain"]);
        assert_eq!(ops.put_expiries, [Some(90), Some(200), None]);
        assert_eq!(ops.delete_keys, ["due", "gone"]);
        let before: State = [
            ((t, "old".to_owned()), (b"o".to_vec(), Some(65))),
            ((t, "late".to_owned()), (b"l".to_vec(), Some(71))),
            ((t, "due".to_owned()), (b"d".to_vec(), None)),
        ]
        .into();
        assert_eq!(
            apply_plan(before.clone(), &plan),
            apply_in_order(before, &batch)
        );
    }

    #[test]
    fn expiries_out_of_range_and_on_plain_tables_are_refused() {
        let refused = |batch: Vec<Mutation>| Plan::new(&batch.into()).unwrap_err().to_string();
        assert!(refused(vec![put_exp(Table::Accounts, "u", "v", 5)]).contains("accounts"));
        assert!(refused(vec![expire(Table::Meta, 5)]).contains("meta"));
        assert!(refused(vec![put_exp(Table::Tombstones, "u", "v", u64::MAX)]).contains("expiry"));
        // Beyond every storable expiry is the same as at the largest one.
        let plan = Plan::new(&vec![expire(Table::Tombstones, u64::MAX)].into()).unwrap();
        assert_eq!(plan.0[&Table::Tombstones].expire_up_to, Some(i64::MAX));
    }

    /// A small deterministic generator (no RNG crate needed for test data).
    struct Lcg(u64);

    impl Lcg {
        fn next(&mut self, bound: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (self.0 >> 33) % bound
        }
    }

    /// Random batches over a few keys of an expiring and a plain table, on random starting
    /// rows: the plan leaves exactly the rows and expiries that applying the batch in order does.
    #[test]
    fn plans_agree_with_applying_the_batch_in_order() {
        let mut rng = Lcg(7);
        let tables = [Table::Tombstones, Table::Accounts];
        for round in 0..2_000 {
            let mut before = State::new();
            for key in ["a", "b", "c", "d"] {
                match rng.next(3) {
                    0 => {}
                    1 => {
                        before.insert((Table::Tombstones, key.into()), (b"s".to_vec(), None));
                    }
                    _ => {
                        let at = rng.next(100);
                        before.insert((Table::Tombstones, key.into()), (b"s".to_vec(), Some(at)));
                    }
                }
            }
            let batch: Batch = (0..rng.next(12))
                .map(|i| {
                    let table = tables[rng.next(2) as usize];
                    let key = ["a", "b", "c", "d"][rng.next(4) as usize];
                    let value = format!("{round}.{i}");
                    match (rng.next(4), table.has_expiry()) {
                        (0, _) => del(table, key),
                        (1, true) => expire(table, rng.next(100)),
                        (2, true) => put_exp(table, key, &value, rng.next(100)),
                        _ => put(table, key, &value),
                    }
                })
                .collect();
            let model = apply_in_order(before.clone(), &batch);
            let plan = Plan::new(&batch).unwrap();
            let planned = apply_plan(before, &plan);
            assert_eq!(planned, model, "round {round}: {batch:?}");
        }
    }
}
