//! [`PgReader`]: the keyed reads of a [`PgStore`](crate::PgStore) ([`Store::reader`]), on a
//! connection of their own beside the store's, so they run while the committer commits.

use std::{collections::BTreeMap, fmt, future::Future, sync::Arc, time::Duration};

use relay_core::store::{Expiries, Rows, StoreError, StoreRead, Table, prefix_end, scan_each};
use tokio_postgres::{Client, Statement};

use crate::{
    PgConfig, PgError,
    error::describe,
    runtime::PgRuntime,
    store::{READ_TIMEOUT_MS, next_statement, no_expiry, open_connection, prepare_all},
};

/// The keyed reads of a [`PgStore`](crate::PgStore) ([`Store::reader`](relay_core::store::Store::reader)): a connection of their own (opened
/// again at the next read after a failed one), prepared `SELECT`s in autocommit, each bounded
/// by [`READ_TIMEOUT_MS`]. Its `Debug` shows where it connects, never the password.
pub(crate) struct PgReader {
    runtime: Arc<PgRuntime>,
    config: PgConfig,
    conn: Option<Arc<ReadConn>>,
}

impl fmt::Debug for PgReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgReader")
            .field("target", &self.config.to_string())
            .field("connected", &self.conn.is_some())
            .finish()
    }
}

/// The prepared reads of one table: by key; by key range with a row limit (a prefix with an
/// end, or from a key on for a prefix without one; a whole prefix reads with the limit
/// `i64::MAX`); a page from the first key and a page after a key; in an expiring table also
/// the latest expiries (keys and expiries), the next expiry and the pages of due keys.
struct TableReads {
    get: Statement,
    scan_range_max: Statement,
    scan_from_max: Statement,
    /// Every row within any of several key ranges, range by range (an index range scan
    /// each: a join on the ranges lets the planner scan the whole table instead).
    scan_ranges: Statement,
    page_first: Statement,
    page_after: Statement,
    expiring: Option<ExpiryReads>,
}

/// The reads of an expiring table's index on `(expires_at, k)`.
struct ExpiryReads {
    /// The keys within a window of the latest expiry.
    latest: Statement,
    /// The earliest expiry after a time.
    next: Statement,
    /// The first page of due keys.
    due_first: Statement,
    /// A page of due keys after an (expiry, key).
    due_after: Statement,
}

/// A reader's connection and its statements (lives on the crate's thread).
struct ReadConn {
    client: Client,
    tables: BTreeMap<Table, TableReads>,
}

impl ReadConn {
    async fn connect(config: &PgConfig) -> Result<Self, PgError> {
        let extra = [("statement_timeout", READ_TIMEOUT_MS.to_string())];
        let client = open_connection(config, &extra, "reader").await?;
        let mut texts = Vec::new();
        for t in Table::ALL {
            let name = t.name();
            texts.push(format!("SELECT v FROM {name} WHERE k = $1"));
            texts.push(format!(
                "SELECT k, v FROM {name} WHERE k >= $1 AND k < $2 ORDER BY k LIMIT $3"
            ));
            texts.push(format!(
                "SELECT k, v FROM {name} WHERE k >= $1 ORDER BY k LIMIT $2"
            ));
            texts.push(format!(
                "SELECT s.k, s.v FROM unnest($1::text[], $2::text[]) WITH ORDINALITY \
                 AS r(lo, hi, n) CROSS JOIN LATERAL (SELECT k, v FROM {name} \
                 WHERE k >= r.lo AND k < r.hi ORDER BY k) s ORDER BY r.n, s.k"
            ));
            texts.push(format!("SELECT k, v FROM {name} ORDER BY k LIMIT $1"));
            texts.push(format!(
                "SELECT k, v FROM {name} WHERE k > $1 ORDER BY k LIMIT $2"
            ));
            if t.has_expiry() {
                texts.push(format!(
                    "SELECT k, expires_at FROM {name} \
                     WHERE expires_at >= (SELECT max(expires_at) FROM {name}) - $1::int8 \
                     ORDER BY expires_at, k"
                ));
                texts.push(format!(
                    "SELECT min(expires_at) FROM {name} WHERE expires_at > $1::int8"
                ));
                texts.push(format!(
                    "SELECT k, expires_at FROM {name} WHERE expires_at <= $1::int8 \
                     ORDER BY expires_at, k LIMIT $2"
                ));
                texts.push(format!(
                    "SELECT k, expires_at FROM {name} WHERE expires_at <= $1::int8 \
                     AND (expires_at, k) > ($2::int8, $3::text) ORDER BY expires_at, k LIMIT $4"
                ));
            }
        }
        let mut prepared = prepare_all(&client, &texts).await?;
        let mut next = || next_statement(&mut prepared);
        let mut tables = BTreeMap::new();
        for t in Table::ALL {
            let get = next()?;
            let (scan_range_max, scan_from_max) = (next()?, next()?);
            let scan_ranges = next()?;
            let (page_first, page_after) = (next()?, next()?);
            let expiring = if t.has_expiry() {
                Some(ExpiryReads {
                    latest: next()?,
                    next: next()?,
                    due_first: next()?,
                    due_after: next()?,
                })
            } else {
                None
            };
            tables.insert(
                t,
                TableReads {
                    get,
                    scan_range_max,
                    scan_from_max,
                    scan_ranges,
                    page_first,
                    page_after,
                    expiring,
                },
            );
        }
        Ok(Self { client, tables })
    }

    fn reads(&self, table: Table) -> Result<&TableReads, PgError> {
        self.tables
            .get(&table)
            .ok_or_else(|| PgError::Backend(format!("no reads prepared for {}", table.name())))
    }

    /// The expiry reads of an expiring table.
    fn expiring(&self, table: Table) -> Result<&ExpiryReads, PgError> {
        self.reads(table)?
            .expiring
            .as_ref()
            .ok_or_else(|| no_expiry(table))
    }
}

/// `(k, expires_at)` rows as [`Expiries`].
fn expiries(found: &[tokio_postgres::Row]) -> Expiries {
    found
        .iter()
        .map(|r| {
            let at: i64 = r.get(1);
            (r.get::<_, String>(0), u64::try_from(at).unwrap_or(0))
        })
        .collect()
}

/// `(k, v)` rows as [`Rows`].
fn rows(found: &[tokio_postgres::Row]) -> Rows {
    found.iter().map(|r| (r.get(0), r.get(1))).collect()
}

fn read_failed(e: &tokio_postgres::Error) -> PgError {
    PgError::Backend(describe(e))
}

impl PgReader {
    /// A reader of `config`'s database; it connects at its first read, on the thread that
    /// reads (whoever asks for readers, e.g. a relay's core before it serves, never waits for
    /// their connections).
    pub(crate) fn new(runtime: Arc<PgRuntime>, config: PgConfig) -> Self {
        Self {
            runtime,
            config,
            conn: None,
        }
    }

    /// The connection, opened now if there is none (first use, or after a failed read).
    fn connection(&mut self) -> Result<Arc<ReadConn>, PgError> {
        if let Some(conn) = &self.conn {
            return Ok(Arc::clone(conn));
        }
        let config = self.config.clone();
        let conn = self.runtime.block_on(async move {
            let timeout = Duration::from_millis(READ_TIMEOUT_MS);
            tokio::time::timeout(timeout, ReadConn::connect(&config))
                .await
                .unwrap_or_else(|_| {
                    Err(PgError::Backend(format!(
                        "reader connection not ready within {READ_TIMEOUT_MS} ms"
                    )))
                })
        });
        let conn = match conn {
            Ok(conn) => Arc::new(conn),
            Err(e) => {
                tracing::warn!(target_db = %self.config, error = %e, "PostgreSQL reader could not connect");
                return Err(e);
            }
        };
        self.conn = Some(Arc::clone(&conn));
        Ok(conn)
    }

    /// Runs `read` on the crate's thread within [`READ_TIMEOUT_MS`]; after any failure the
    /// connection is dropped (a timed-out query may still be answered on it later).
    fn read<T, F, Fut>(&mut self, read: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(Arc<ReadConn>) -> Fut,
        Fut: Future<Output = Result<T, PgError>> + Send + 'static,
    {
        let result = self.connection().and_then(|conn| {
            let read = read(conn);
            self.runtime.block_on(async move {
                let timeout = Duration::from_millis(READ_TIMEOUT_MS);
                tokio::time::timeout(timeout, read)
                    .await
                    .unwrap_or_else(|_| {
                        Err(PgError::Backend(format!(
                            "read not answered within {READ_TIMEOUT_MS} ms"
                        )))
                    })
            })
        });
        if let Err(e) = &result
            && self.conn.take().is_some()
        {
            tracing::warn!(target_db = %self.config, error = %e, "PostgreSQL read failed");
        }
        result.map_err(StoreError::from)
    }
}

impl StoreRead for PgReader {
    fn connect(&mut self) -> Result<(), StoreError> {
        self.connection().map(drop).map_err(StoreError::from)
    }

    fn get(&mut self, table: Table, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let key = key.to_owned();
        self.read(move |c| async move {
            let get = &c.reads(table)?.get;
            let row = c.client.query_opt(get, &[&key]).await;
            Ok(row.map_err(|e| read_failed(&e))?.map(|r| r.get(0)))
        })
    }

    fn scan_prefix(&mut self, table: Table, prefix: &str) -> Result<Rows, StoreError> {
        self.scan_prefix_max(table, prefix, usize::MAX)
    }

    fn scan_prefix_max(
        &mut self,
        table: Table,
        prefix: &str,
        max: usize,
    ) -> Result<Rows, StoreError> {
        let prefix = prefix.to_owned();
        let max = i64::try_from(max).unwrap_or(i64::MAX);
        self.read(move |c| async move {
            let reads = c.reads(table)?;
            let found = match prefix_end(&prefix) {
                Some(end) => {
                    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] =
                        [&prefix, &end, &max];
                    c.client.query(&reads.scan_range_max, &params).await
                }
                None => c.client.query(&reads.scan_from_max, &[&prefix, &max]).await,
            };
            Ok(rows(&found.map_err(|e| read_failed(&e))?))
        })
    }

    fn scan_prefixes(&mut self, table: Table, prefixes: &[String]) -> Result<Rows, StoreError> {
        // One query for all the ranges (a round trip each would make a sweep of many small
        // queues slow); a prefix without an end (all `char::MAX`) is scanned on its own.
        let Some(ends) = prefixes
            .iter()
            .map(|p| prefix_end(p))
            .collect::<Option<Vec<_>>>()
        else {
            return scan_each(self, table, prefixes);
        };
        let starts = prefixes.to_vec();
        self.read(move |c| async move {
            let reads = c.reads(table)?;
            let found = c.client.query(&reads.scan_ranges, &[&starts, &ends]).await;
            Ok(rows(&found.map_err(|e| read_failed(&e))?))
        })
    }

    fn scan_range(
        &mut self,
        table: Table,
        start: &str,
        end: &str,
        max: usize,
    ) -> Result<Rows, StoreError> {
        let (start, end) = (start.to_owned(), end.to_owned());
        let max = i64::try_from(max).unwrap_or(i64::MAX);
        self.read(move |c| async move {
            let reads = c.reads(table)?;
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] = [&start, &end, &max];
            let found = c.client.query(&reads.scan_range_max, &params).await;
            Ok(rows(&found.map_err(|e| read_failed(&e))?))
        })
    }

    fn scan_page(
        &mut self,
        table: Table,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Rows, StoreError> {
        let after = after.map(str::to_owned);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.read(move |c| async move {
            let reads = c.reads(table)?;
            let found = match &after {
                Some(after) => c.client.query(&reads.page_after, &[after, &limit]).await,
                None => c.client.query(&reads.page_first, &[&limit]).await,
            };
            Ok(rows(&found.map_err(|e| read_failed(&e))?))
        })
    }

    fn latest_expiries(&mut self, table: Table, window: u64) -> Result<Expiries, StoreError> {
        if !table.has_expiry() {
            return Err(no_expiry(table).into());
        }
        // Stored expiries are between 0 and `i64::MAX`: a wider window takes them all, as this
        // one does (and the subtraction cannot overflow).
        let window = i64::try_from(window).unwrap_or(i64::MAX);
        self.read(move |c| async move {
            let found = c.client.query(&c.expiring(table)?.latest, &[&window]).await;
            Ok(expiries(&found.map_err(|e| read_failed(&e))?))
        })
    }

    fn next_expiry(&mut self, table: Table, after: u64) -> Result<Option<u64>, StoreError> {
        if !table.has_expiry() {
            return Err(no_expiry(table).into());
        }
        // No stored expiry is beyond `i64::MAX`: after it there is none, as after this one.
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        self.read(move |c| async move {
            let row = c
                .client
                .query_one(&c.expiring(table)?.next, &[&after])
                .await;
            let at: Option<i64> = row.map_err(|e| read_failed(&e))?.get(0);
            Ok(at.and_then(|at| u64::try_from(at).ok()))
        })
    }

    fn expired(
        &mut self,
        table: Table,
        up_to: u64,
        after: Option<(u64, &str)>,
        limit: usize,
    ) -> Result<Expiries, StoreError> {
        if !table.has_expiry() {
            return Err(no_expiry(table).into());
        }
        // Stored expiries are at most `i64::MAX`: a later bound takes them all.
        let up_to = i64::try_from(up_to).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let after = after.map(|(at, key)| (i64::try_from(at).unwrap_or(i64::MAX), key.to_owned()));
        self.read(move |c| async move {
            let reads = c.expiring(table)?;
            let found = match &after {
                Some((at, key)) => {
                    c.client
                        .query(&reads.due_after, &[&up_to, at, key, &limit])
                        .await
                }
                None => c.client.query(&reads.due_first, &[&up_to, &limit]).await,
            };
            Ok(expiries(&found.map_err(|e| read_failed(&e))?))
        })
    }
}
