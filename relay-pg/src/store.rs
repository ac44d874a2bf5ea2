//! [`PgStore`]: relay-core's [`Store`] over PostgreSQL, fenced by a leadership epoch.
//!
//! **One round trip per commit.** A batch is first reduced to the last mutation per (table, key)
//! (same final state as applying it in order), then sent as one pipeline of prepared statements
//! on the store's connection: `BEGIN`, `SELECT relay_fence(epoch)`, per touched table one
//! `INSERT … SELECT FROM unnest($keys, $values) ON CONFLICT (k) DO UPDATE` and one
//! `DELETE … WHERE k = ANY($keys)` (a single row uses the plain `VALUES ($1, $2)` / `k = $1`
//! forms, ~50 µs cheaper: a routed message touches three tables with one row each), then
//! `COMMIT`. Any failing statement aborts the transaction
//! (PostgreSQL turns the final `COMMIT` into a rollback), so `Err` means nothing was applied,
//! except after a timeout or a lost connection, where the outcome is unknown (the relay then
//! rebuilds from the database, which holds the truth; clients re-send with the same ids).
//!
//! `load` reads every table in one `REPEATABLE READ` snapshot with one `UNION ALL` query, after
//! checking the epoch in the same snapshot.

use std::{collections::BTreeMap, fmt, future::Future, pin::Pin, sync::Arc, time::Duration};

use futures_util::{TryStreamExt, future::join_all};
use relay_core::store::{Batch, Mutation, Snapshot, Store, StoreError, Table};
use tokio_postgres::{Client, NoTls, Statement, types::ToSql};

use crate::{
    LeaderWatch, PgConfig, PgError,
    error::{classify, describe},
    runtime::PgRuntime,
};

/// A commit not answered within this time fails (outcome unknown) and closes the connection.
pub const COMMIT_TIMEOUT_MS: u64 = 10_000;
/// A `load` not finished within this time fails.
pub const LOAD_TIMEOUT_MS: u64 = 300_000;
/// Server-side: a session of ours idle inside a transaction this long is ended by the server, so a
/// half-sent pipeline (network cut) cannot hold the epoch row's share lock and stall a takeover.
pub const IDLE_IN_TRANSACTION_TIMEOUT_MS: u32 = 5_000;
/// Server-side TCP keepalive of store connections: idle seconds before the first probe.
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

/// relay-core's [`Store`] over PostgreSQL. Every commit is one transaction that first checks,
/// under a share lock on the epoch row, that the database's leadership epoch is still this
/// store's; otherwise it fails with [`StoreError::Fenced`] and applies nothing.
///
/// Get one from [`crate::Leader::store`] (which also refuses commits as soon as the leader knows
/// it lost) or, for a process that does its own leader election, [`PgStore::open_fenced`].
/// Blocking calls: safe on a tokio worker thread and on plain threads (the connection lives on the
/// crate's own thread). After a failed commit the store refuses everything: open a new one.
pub struct PgStore {
    runtime: Arc<PgRuntime>,
    conn: Option<Arc<DataConn>>,
    epoch: u64,
    leadership: Option<LeaderWatch>,
    fenced: bool,
    target: String,
}

impl fmt::Debug for PgStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgStore")
            .field("target", &self.target)
            .field("epoch", &self.epoch)
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
        Self::connect(Arc::new(PgRuntime::start()?), config, epoch, None)
    }

    pub(crate) fn connect(
        runtime: Arc<PgRuntime>,
        config: &PgConfig,
        epoch: u64,
        leadership: Option<LeaderWatch>,
    ) -> Result<Self, PgError> {
        let target = config.to_string();
        let config = config.clone();
        let conn = runtime.block_on(async move { DataConn::connect(&config).await })?;
        Ok(Self {
            runtime,
            conn: Some(Arc::new(conn)),
            epoch,
            leadership,
            fenced: false,
            target,
        })
    }

    /// The epoch this store commits under.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The connection, unless the store is fenced or broken.
    fn usable(&self) -> Result<Arc<DataConn>, PgError> {
        let lost = self.leadership.as_ref().is_some_and(|l| !l.is_leading());
        if self.fenced || lost {
            return Err(PgError::Fenced { epoch: self.epoch });
        }
        self.conn.clone().ok_or_else(|| {
            PgError::Backend("the connection failed earlier; open a new store".into())
        })
    }

    /// Records the outcome of an operation: fenced for good, or broken after any other error.
    fn settle<T>(&mut self, result: Result<T, PgError>) -> Result<T, StoreError> {
        match &result {
            Ok(_) => {}
            Err(PgError::Fenced { .. }) => {
                self.fenced = true;
                tracing::error!(
                    epoch = self.epoch,
                    "commit refused: fenced by a newer leader"
                );
            }
            Err(e) => {
                self.conn = None;
                tracing::warn!(target_db = %self.target, error = %e, "PostgreSQL store failed");
            }
        }
        result.map_err(StoreError::from)
    }
}

impl Store for PgStore {
    fn load(&mut self) -> Result<Snapshot, StoreError> {
        let result = self.usable().and_then(|conn| {
            let epoch = self.epoch;
            self.runtime.block_on(async move {
                let timeout = Duration::from_millis(LOAD_TIMEOUT_MS);
                tokio::time::timeout(timeout, conn.load(epoch))
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

    fn commit(&mut self, batch: Batch) -> Result<(), StoreError> {
        let result = self.usable().and_then(|conn| {
            if batch.is_empty() {
                return Ok(());
            }
            let epoch = self.epoch;
            let plan = Plan::new(batch)?;
            self.runtime.block_on(async move {
                let timeout = Duration::from_millis(COMMIT_TIMEOUT_MS);
                tokio::time::timeout(timeout, conn.commit(epoch, &plan))
                    .await
                    .unwrap_or_else(|_| {
                        Err(PgError::Backend(format!(
                            "commit not answered within {COMMIT_TIMEOUT_MS} ms (outcome unknown)"
                        )))
                    })
            })
        });
        self.settle(result)
    }
}

/// The final operation per key of one table.
#[derive(Debug, Default)]
struct TableOps {
    put_keys: Vec<String>,
    put_values: Vec<Vec<u8>>,
    delete_keys: Vec<String>,
}

/// A batch reduced to its net effect per table: the last mutation of each (table, key) wins,
/// which is exactly the state applying the batch in order leaves. Puts and deletes then touch
/// disjoint keys, so their statements commute.
#[derive(Debug)]
struct Plan(BTreeMap<Table, TableOps>);

impl Plan {
    fn new(batch: Batch) -> Result<Self, PgError> {
        let too_large = |what: &str, len: usize| {
            PgError::Backend(format!(
                "a {what} of {len} bytes exceeds MAX_ROW_BYTES ({MAX_ROW_BYTES}); nothing was sent"
            ))
        };
        let mut last: BTreeMap<(Table, String), Option<Vec<u8>>> = BTreeMap::new();
        for m in batch {
            let (key, value) = match &m {
                Mutation::Put { key, value, .. } => (key, Some(value)),
                Mutation::Delete { key, .. } => (key, None),
            };
            if key.len() > MAX_ROW_BYTES {
                return Err(too_large("key", key.len()));
            }
            if let Some(value) = value.filter(|v| v.len() > MAX_ROW_BYTES) {
                return Err(too_large("value", value.len()));
            }
            match m {
                Mutation::Put { table, key, value } => last.insert((table, key), Some(value)),
                Mutation::Delete { table, key } => last.insert((table, key), None),
            };
        }
        let mut tables: BTreeMap<Table, TableOps> = BTreeMap::new();
        for ((table, key), value) in last {
            let ops = tables.entry(table).or_default();
            match value {
                Some(value) => {
                    ops.put_keys.push(key);
                    ops.put_values.push(value);
                }
                None => ops.delete_keys.push(key),
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
    begin_snapshot: Statement,
    epoch: Statement,
    load_all: Statement,
    upsert: BTreeMap<Table, Statement>,
    delete: BTreeMap<Table, Statement>,
    upsert_one: BTreeMap<Table, Statement>,
    delete_one: BTreeMap<Table, Statement>,
}

/// A store connection and its statements (lives on the crate's thread).
struct DataConn {
    client: Client,
    statements: Statements,
}

type Step<'a> = Pin<Box<dyn Future<Output = Result<u64, tokio_postgres::Error>> + Send + 'a>>;

/// No parameters, typed for `execute_raw`.
const NO_PARAMS: [&(dyn ToSql + Sync); 0] = [];

impl DataConn {
    async fn connect(config: &PgConfig) -> Result<Self, PgError> {
        let mut settings = session_options(config.schema());
        settings.push(("tcp_keepalives_idle", STORE_KEEPALIVE_IDLE_S.to_string()));
        let (client, connection) = config
            .driver_with_options(&settings)
            .connect(NoTls)
            .await
            .map_err(|e| PgError::Backend(format!("connecting to {config}: {}", describe(&e))))?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::warn!(error = %describe(&e), "PostgreSQL store connection ended");
            }
        });
        let statements = prepare(&client).await?;
        Ok(Self { client, statements })
    }

    /// One pipelined transaction (see the module doc).
    async fn commit(&self, epoch: u64, plan: &Plan) -> Result<(), PgError> {
        let epoch_param = epoch_param(epoch)?;
        let c = &self.client;
        let s = &self.statements;
        let mut steps: Vec<Step<'_>> = Vec::with_capacity(3 + 2 * plan.0.len());
        steps.push(Box::pin(c.execute_raw(&s.begin, NO_PARAMS)));
        steps.push(Box::pin(
            c.execute_raw(&s.fence, [&epoch_param as &(dyn ToSql + Sync)]),
        ));
        for (table, ops) in &plan.0 {
            match (ops.put_keys.as_slice(), ops.put_values.as_slice()) {
                ([], _) => {}
                ([key], [value]) => {
                    let params: [&(dyn ToSql + Sync); 2] = [key, value];
                    steps.push(Box::pin(c.execute_raw(&s.upsert_one[table], params)));
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
                return Err(classify(&e, epoch));
            }
        }
        Ok(())
    }

    /// Every row, in one snapshot that also shows the epoch is still ours.
    async fn load(&self, epoch: u64) -> Result<Snapshot, PgError> {
        let backend = |e: &tokio_postgres::Error| PgError::Backend(describe(e));
        let c = &self.client;
        let s = &self.statements;
        c.execute_raw(&s.begin_snapshot, NO_PARAMS)
            .await
            .map_err(|e| backend(&e))?;
        let current: i64 = c
            .query_one(&s.epoch, &[])
            .await
            .map_err(|e| backend(&e))?
            .get(0);
        if u64::try_from(current).ok() != Some(epoch) {
            // The caller drops this connection; the server rolls the snapshot back.
            return Err(PgError::Fenced { epoch });
        }
        let mut snapshot = Snapshot::new();
        let rows = c
            .query_raw(&s.load_all, NO_PARAMS)
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

/// Prepares every statement, pipelined (one round trip).
async fn prepare(client: &Client) -> Result<Statements, PgError> {
    let load_all = Table::ALL
        .iter()
        .enumerate()
        .map(|(i, t)| format!("SELECT {i}::int2, k, v FROM {}", t.name()))
        .collect::<Vec<_>>()
        .join(" UNION ALL ");
    let mut texts = vec![
        "BEGIN".to_owned(),
        "COMMIT".to_owned(),
        "SELECT relay_fence($1)".to_owned(),
        "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY".to_owned(),
        "SELECT epoch FROM leader WHERE id = 1".to_owned(),
        load_all,
    ];
    for t in Table::ALL {
        texts.push(format!(
            "INSERT INTO {0} (k, v) SELECT * FROM unnest($1::text[], $2::bytea[]) \
             ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v",
            t.name()
        ));
        texts.push(format!(
            "DELETE FROM {} WHERE k = ANY($1::text[])",
            t.name()
        ));
        texts.push(format!(
            "INSERT INTO {} (k, v) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v",
            t.name()
        ));
        texts.push(format!("DELETE FROM {} WHERE k = $1", t.name()));
    }
    let prepared = join_all(texts.iter().map(|t| client.prepare(t))).await;
    let mut prepared = prepared
        .into_iter()
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| PgError::Backend(format!("preparing statements: {}", describe(&e))))?
        .into_iter();
    let mut next = || {
        prepared
            .next()
            .ok_or_else(|| PgError::Backend("a statement went missing".into()))
    };
    let (begin, commit, fence, begin_snapshot, epoch, load_all) =
        (next()?, next()?, next()?, next()?, next()?, next()?);
    let (mut upsert, mut delete) = (BTreeMap::new(), BTreeMap::new());
    let (mut upsert_one, mut delete_one) = (BTreeMap::new(), BTreeMap::new());
    for t in Table::ALL {
        upsert.insert(t, next()?);
        delete.insert(t, next()?);
        upsert_one.insert(t, next()?);
        delete_one.insert(t, next()?);
    }
    Ok(Statements {
        begin,
        commit,
        fence,
        begin_snapshot,
        epoch,
        load_all,
        upsert,
        delete,
        upsert_one,
        delete_one,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(table: Table, key: &str, value: &str) -> Mutation {
        Mutation::Put {
            table,
            key: key.into(),
            value: value.as_bytes().to_vec(),
        }
    }

    fn del(table: Table, key: &str) -> Mutation {
        Mutation::Delete {
            table,
            key: key.into(),
        }
    }

    /// Applies a batch in order to a map: the naive model the plan must agree with.
    fn apply_in_order(batch: &Batch) -> BTreeMap<(Table, String), Option<Vec<u8>>> {
        let mut state = BTreeMap::new();
        for m in batch {
            match m {
                Mutation::Put { table, key, value } => {
                    state.insert((*table, key.clone()), Some(value.clone()))
                }
                Mutation::Delete { table, key } => state.insert((*table, key.clone()), None),
            };
        }
        state
    }

    #[test]
    fn a_plan_keeps_the_last_mutation_of_each_key() {
        let batch = vec![
            put(Table::Accounts, "a", "1"),
            put(Table::Accounts, "a", "2"),
            put(Table::Messages, "x", "m"),
            del(Table::Messages, "x"),
            del(Table::Messages, "y"),
            put(Table::Messages, "y", "back"),
            put(Table::Meta, "a", "meta"),
        ];
        let model = apply_in_order(&batch);
        let plan = Plan::new(batch).unwrap();
        let mut from_plan = BTreeMap::new();
        for (table, ops) in &plan.0 {
            for (k, v) in ops.put_keys.iter().zip(&ops.put_values) {
                from_plan.insert((*table, k.clone()), Some(v.clone()));
            }
            for k in &ops.delete_keys {
                assert!(!ops.put_keys.contains(k), "puts and deletes are disjoint");
                from_plan.insert((*table, k.clone()), None);
            }
        }
        assert_eq!(from_plan, model);
        assert_eq!(plan.0[&Table::Accounts].put_values, [b"2".to_vec()]);
        assert_eq!(plan.0[&Table::Messages].delete_keys, ["x"]);
    }
}
