//! [`PgStore`]: relay-core's [`Store`] over PostgreSQL, fenced by a leadership epoch or, in a
//! cluster, by one shard's epoch ([`Fence`]).
//!
//! **One round trip per commit.** A batch is first reduced to its net effect per table (a
//! `Plan`: the rules are in `store::plan`), then sent as one pipeline of prepared statements
//! on the store's connection: `BEGIN`, `SELECT relay_fence(epoch)` (or
//! `relay_fence_shard(shard, epoch)`), then per touched table, in this order, at most one `DELETE … WHERE expires_at <= $1` (a range expiry, expiring tables only), one
//! `INSERT … SELECT FROM unnest($keys, $values[, $expiries]) ON CONFLICT (k) DO UPDATE` and one
//! `DELETE … WHERE k = ANY($keys)` (a single row uses the plain `VALUES ($1, $2[, $3])` /
//! `k = $1` forms, ~50 µs cheaper: a routed message touches three tables with one row each),
//! then `COMMIT`. Any failing statement aborts the transaction (PostgreSQL turns the final
//! `COMMIT` into a rollback), so `Err` means nothing was applied, except after a timeout or a
//! lost connection, where the outcome is unknown (the relay then rebuilds from the database,
//! which holds the truth; clients re-send with the same ids).
//!
//! **Refused before anything is sent** (the store stays usable, nothing is applied): an
//! expiring mutation on a table without expiry ([`Table::has_expiry`]), a key or value larger
//! than [`MAX_ROW_BYTES`], an expiry beyond `i64::MAX` milliseconds (an `Expire` beyond it is
//! the same as one at it, and is sent as that). After any other failed commit the store refuses
//! everything: open a new one.
//!
//! `load` reads every table in one `REPEATABLE READ` snapshot with one `UNION ALL` query, after
//! checking the epoch (the leader's or the shard's) in the same snapshot; `load_eager` the
//! same without the lazy tables ([`Table::is_lazy`]), which it does not read at all.
//!
//! **Keyed reads** ([`Store::reader`]) go through a connection of their own, on the crate's
//! thread: each read is one prepared `SELECT` in autocommit, so it sees every transaction
//! committed before it began. Reads are not fenced (they change nothing, and every row they see
//! is committed). A read not answered within [`READ_TIMEOUT_MS`] fails, and so does any read the
//! server refuses; the reader then drops its connection and opens a new one at its next read.

mod plan;

use std::{collections::BTreeMap, fmt, future::Future, pin::Pin, sync::Arc, time::Duration};

use plan::Plan;

use futures_util::{TryStreamExt, future::join_all};
use relay_core::store::{Batch, Snapshot, Store, StoreError, StoreRead, Table};
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
