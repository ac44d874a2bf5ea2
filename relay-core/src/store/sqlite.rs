//! SQLite store: the default for the real server.
//!
//! WAL journal, `synchronous=FULL` (a commit is on disk before `commit` returns), one
//! `(k TEXT PRIMARY KEY, v BLOB)` table per [`Table`] (plus an indexed `expires_at INTEGER`
//! column in the expiring ones), schema version in `PRAGMA user_version`. Keyed reads
//! ([`StoreRead`]) go through a second, read-only connection: in WAL mode it reads the last
//! committed state while the first one commits.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rusqlite::{Connection, OpenFlags, params};

mod group;
pub use group::WriteGroup;

use super::{
    Batch, Expiries, MutationRef, Rows, Snapshot, Store, StoreError, StoreRead, Table, no_expiry,
};

/// Prepared statements kept per connection: an upsert, an upsert with expiry, a delete and an
/// expiry for every [`Table`] (writer); a get, a scan and two expiry reads (reader).
const STATEMENT_CACHE_CAPACITY: usize = 4 * Table::ALL.len();

/// How long the read connection waits for a lock (only a checkpoint or recovery takes one a
/// WAL reader must wait for).
const READ_BUSY_TIMEOUT_MS: u64 = 5_000;

/// How long the write connection waits for the database's write lock. Only another process's
/// writer (a backup, a tool) makes it wait: this process's stores on one database (the cores
/// of a sharded relay, `relay --shards`) write in a [`WriteGroup`], one at a time.
const WRITE_BUSY_TIMEOUT_MS: u64 = 5_000;

/// Pages the WAL takes before a commit copies them back into the database file (a
/// checkpoint; SQLite's default is 1,000). A checkpoint copies each page once, in its last
/// version, so at a larger interval the pages that many commits rewrite (a queue's index row,
/// a conversation's tombstones, an index's leaves) are copied once instead of once per 1,000
/// pages: on the e2e bench (SQLite, one core) about 30 % more messages a second, with no
/// worse tail latency. The WAL file stays about 40 MiB.
const WAL_CHECKPOINT_PAGES: i64 = 10_000;

/// The WAL file's size at rest: one that grew past it (a long reader or a backup held the
/// checkpoints back) is cut back to it when it next starts over.
const WAL_SIZE_LIMIT_BYTES: i64 = 64 * 1024 * 1024;

/// Schema version written by this build.
///
/// 1: one `(k, v)` table per [`Table`]. 2: an `expires_at` column (with its index) in the
/// expiring tables, filled from the rows' own `expires_at` field. 3: the `account_index`
/// table, filled by the relay's first start from the accounts (a relay of an older version,
/// which would write accounts without their index rows, refuses the database). 4: the
/// `contacts` and `queue_index` tables, filled by the relay's first start from the friendships
/// and the messages (an older relay would write friendships and messages without them). 5: the
/// `expires_at` column of `queue_index` (and its index), filled by the relay's first start from
/// each queue's oldest message and its offline TTL.
pub const SCHEMA_VERSION: i64 = 5;

/// A [`Store`] on an SQLite database file.
#[derive(Debug)]
pub struct SqliteStore {
    conn: Connection,
    /// The stores opened beside this one, which commit with it ([`WriteGroup`]).
    group: WriteGroup,
    /// What a reader opens: the file, or the shared-cache URI of an in-memory database.
    target: PathBuf,
    /// The write statements' SQL per table, built once (a commit looks its statements up in
    /// the connection's cache by this text, row by row).
    writes: BTreeMap<Table, WriteSql>,
}

/// The SQL of the writes to one table.
#[derive(Debug)]
struct WriteSql {
    upsert: String,
    /// Expiring tables only (empty otherwise: a batch that would use it is refused first).
    upsert_expiring: String,
    /// Expiring tables only: the upsert of a row whose expiry does not move (a new row, or a
    /// new value under the same expiry), which leaves the expiry index alone; it changes
    /// nothing when the expiry moves, and then `upsert_expiring` runs. (An upsert whose `SET`
    /// names the indexed column rewrites its index entry even when the value is the same.)
    upsert_same_expiry: String,
    delete: String,
    /// Expiring tables only, as `upsert_expiring`.
    expire: String,
}

impl WriteSql {
    fn of(table: Table) -> Self {
        let name = table.name();
        let (upsert_expiring, upsert_same_expiry, expire) = if table.has_expiry() {
            let insert = format!("INSERT INTO {name} (k, v, expires_at) VALUES (?1, ?2, ?3)");
            (
                format!(
                    "{insert} ON CONFLICT(k) DO UPDATE SET v = excluded.v, expires_at = excluded.expires_at"
                ),
                format!(
                    "{insert} ON CONFLICT(k) DO UPDATE SET v = excluded.v WHERE expires_at IS excluded.expires_at"
                ),
                format!("DELETE FROM {name} WHERE expires_at <= ?1"),
            )
        } else {
            (String::new(), String::new(), String::new())
        };
        Self {
            upsert: upsert_sql(table),
            upsert_expiring,
            upsert_same_expiry,
            delete: format!("DELETE FROM {name} WHERE k = ?1"),
            expire,
        }
    }

    fn all() -> BTreeMap<Table, Self> {
        Table::ALL.into_iter().map(|t| (t, Self::of(t))).collect()
    }
}

/// Numbers the in-memory databases of this process (each gets its own shared-cache name).
static IN_MEMORY: AtomicU64 = AtomicU64::new(0);

fn backend(e: &rusqlite::Error) -> StoreError {
    StoreError::Backend(e.to_string())
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` and migrates it to [`SCHEMA_VERSION`].
    ///
    /// The database and its `-wal` / `-shm` files are the owner's alone (mode 0600): a new
    /// database file is created with that mode before SQLite opens it (SQLite gives its
    /// journals the database file's mode), and existing files open to the group or others are
    /// narrowed to it.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_in_group(path, WriteGroup::default())
    }

    /// [`open`](Self::open), committing in `group` with the other stores of this process
    /// opened in it on the same database (one per core of a sharded relay).
    pub fn open_in_group(path: impl AsRef<Path>, group: WriteGroup) -> Result<Self, StoreError> {
        let path = path.as_ref();
        let private = |p: &Path| {
            private_files::make_private(p).map_err(|e| StoreError::Backend(e.to_string()))
        };
        private(path)?;
        let conn = Connection::open(path).map_err(|e| backend(&e))?;
        let store = Self::init(conn, path.to_owned(), group)?;
        for suffix in ["-wal", "-shm"] {
            let mut journal = path.as_os_str().to_owned();
            journal.push(suffix);
            let journal = PathBuf::from(journal);
            if journal.exists() {
                private(&journal)?;
            }
        }
        Ok(store)
    }

    /// An in-memory SQLite database (tests; not durable). Its readers share it through a
    /// process-unique shared-cache name; it lives as long as this store.
    pub fn open_in_memory() -> Result<Self, StoreError> {
        let n = IN_MEMORY.fetch_add(1, Ordering::Relaxed);
        let uri = PathBuf::from(format!(
            "file:relay-store-{}-{n}?mode=memory&cache=shared",
            std::process::id()
        ));
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(&uri, flags).map_err(|e| backend(&e))?;
        Self::init(conn, uri, WriteGroup::default())
    }

    /// Another store on this one's database, with a write connection of its own, committing
    /// in a group with this one (a second core's store, as
    /// [`open_in_group`](Self::open_in_group) opens it; an in-memory database too).
    pub fn beside(&self) -> Result<Self, StoreError> {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(&self.target, flags).map_err(|e| backend(&e))?;
        Self::init(conn, self.target.clone(), self.group.clone())
    }

    fn init(conn: Connection, target: PathBuf, group: WriteGroup) -> Result<Self, StoreError> {
        // One upsert and one delete per table stay prepared across commits.
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE_CAPACITY);
        conn.busy_timeout(std::time::Duration::from_millis(WRITE_BUSY_TIMEOUT_MS))
            .map_err(|e| backend(&e))?;
        // `journal_mode` returns a row, so it is read rather than executed.
        let _mode: String = conn
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .map_err(|e| backend(&e))?;
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(|e| backend(&e))?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(|e| backend(&e))?;
        for (pragma, value) in [
            ("wal_autocheckpoint", WAL_CHECKPOINT_PAGES),
            ("journal_size_limit", WAL_SIZE_LIMIT_BYTES),
        ] {
            let set: i64 = conn
                .pragma_update_and_check(None, pragma, value, |r| r.get(0))
                .map_err(|e| backend(&e))?;
            if set != value {
                return Err(StoreError::Backend(format!(
                    "SQLite kept {pragma} at {set}, not {value}"
                )));
            }
        }
        let found: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| backend(&e))?;
        if found > SCHEMA_VERSION {
            return Err(StoreError::SchemaVersion {
                found,
                supported: SCHEMA_VERSION,
            });
        }
        group.alone(|| migrate(&conn))?;
        Ok(Self {
            conn,
            group,
            target,
            writes: WriteSql::all(),
        })
    }
}

/// Brings the schema to [`SCHEMA_VERSION`] in one transaction. Version 1: every table;
/// version 2: the expiry column of the expiring tables (a fresh database gets it at
/// creation); version 3: the `account_index` table; version 4: the `contacts` and
/// `queue_index` tables (created with the others); version 5: the expiry column of
/// `queue_index`, left empty (NULL: never due) for the relay to fill. Later versions append
/// steps here.
fn migrate(conn: &Connection) -> Result<(), StoreError> {
    let tx = conn.unchecked_transaction().map_err(|e| backend(&e))?;
    for t in Table::ALL {
        let expiry = if t.has_expiry() {
            ", expires_at INTEGER"
        } else {
            ""
        };
        tx.execute(
            &format!(
                "CREATE TABLE IF NOT EXISTS {} (k TEXT PRIMARY KEY NOT NULL, v BLOB NOT NULL{expiry}) WITHOUT ROWID",
                t.name()
            ),
            [],
        )
        .map_err(|e| backend(&e))?;
    }
    for t in Table::ALL.into_iter().filter(|t| t.has_expiry()) {
        add_expiry_column(&tx, t)?;
    }
    for t in Table::ALL.into_iter().filter(|t| t.has_expiry()) {
        let name = t.name();
        tx.execute(
            &format!("CREATE INDEX IF NOT EXISTS {name}_expires_at ON {name} (expires_at)"),
            [],
        )
        .map_err(|e| backend(&e))?;
    }
    tx.pragma_update(None, "user_version", SCHEMA_VERSION)
        .map_err(|e| backend(&e))?;
    tx.commit().map_err(|e| backend(&e))
}

/// Adds the expiry column to the expiring table `t` of a database written before it had one
/// (nothing when it has it). Tombstones get theirs from their records; a queue's is filled by
/// the relay's first start (it depends on the relay's offline TTL).
fn add_expiry_column(tx: &rusqlite::Transaction<'_>, t: Table) -> Result<(), StoreError> {
    let name = t.name();
    let has_column: bool = tx
        .query_row(
            "SELECT COUNT(*) > 0 FROM pragma_table_info(?1) WHERE name = 'expires_at'",
            params![name],
            |r| r.get(0),
        )
        .map_err(|e| backend(&e))?;
    if has_column {
        return Ok(());
    }
    tx.execute(
        &format!("ALTER TABLE {name} ADD COLUMN expires_at INTEGER"),
        [],
    )
    .map_err(|e| backend(&e))?;
    if t == Table::Tombstones {
        tx.execute(
            "UPDATE tombstones SET expires_at = json_extract(CAST(v AS TEXT), '$.expires_at')",
            [],
        )
        .map_err(|e| backend(&e))?;
    }
    Ok(())
}

/// An epoch-millisecond expiry as SQLite's integer.
fn sql_ms(ms: u64) -> Result<i64, StoreError> {
    i64::try_from(ms).map_err(|_| StoreError::Backend(format!("expiry {ms} out of range")))
}

/// The upsert of a row without expiry: in an expiring table it also clears the expiry.
fn upsert_sql(table: Table) -> String {
    let clear = if table.has_expiry() {
        ", expires_at = NULL"
    } else {
        ""
    };
    format!(
        "INSERT INTO {} (k, v) VALUES (?1, ?2) ON CONFLICT(k) DO UPDATE SET v = excluded.v{clear}",
        table.name()
    )
}

impl Store for SqliteStore {
    fn load(&mut self) -> Result<Snapshot, StoreError> {
        load_tables(&self.conn, Table::ALL.into_iter())
    }

    fn commit(&mut self, batch: &Batch) -> Result<(), StoreError> {
        if batch.is_empty() {
            return Ok(());
        }
        super::refuse_misplaced_expiry(batch)?;
        let Self {
            conn,
            group,
            writes,
            ..
        } = self;
        group.commit(batch, |batches| write(conn, writes, batches))
    }

    fn load_eager(&mut self) -> Result<Snapshot, StoreError> {
        load_tables(&self.conn, Table::ALL.into_iter().filter(|t| !t.is_lazy()))
    }

    fn reader(&mut self) -> Result<Box<dyn StoreRead>, StoreError> {
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(&self.target, flags).map_err(|e| backend(&e))?;
        conn.busy_timeout(std::time::Duration::from_millis(READ_BUSY_TIMEOUT_MS))
            .map_err(|e| backend(&e))?;
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE_CAPACITY);
        Ok(Box::new(SqliteReader { conn }))
    }
}

/// Writes `batches` in one transaction on `conn`, in order: all of them or none.
fn write(
    conn: &mut Connection,
    writes: &BTreeMap<Table, WriteSql>,
    batches: &[&Batch],
) -> Result<(), StoreError> {
    let tx = conn.transaction().map_err(|e| backend(&e))?;
    for batch in batches {
        write_batch(&tx, writes, batch)?;
    }
    // Dropping `tx` on the error paths above rolls back.
    tx.commit().map_err(|e| backend(&e))
}

/// Writes `batch`'s mutations in the open transaction `tx`.
fn write_batch(
    tx: &rusqlite::Transaction<'_>,
    writes: &BTreeMap<Table, WriteSql>,
    batch: &Batch,
) -> Result<(), StoreError> {
    // Within one transaction only the last mutation of each row matters (a batch of many
    // inputs rewrites the same conversation row once per message): the others are skipped.
    // (Batches of different stores written together touch different rows: those of their
    // shards.)
    let mut seen = std::collections::BTreeSet::new();
    let mut last = vec![false; batch.len()];
    for (i, m) in batch.iter().enumerate().rev() {
        // A range expiry is applied in its place; of the keyed writes only the last counts.
        last[i] = m.key().is_none_or(|key| seen.insert((m.table(), key)));
    }
    let sql = |table: Table| {
        writes
            .get(&table)
            .ok_or_else(|| StoreError::Backend(format!("no SQL for table {}", table.name())))
    };
    for (m, _) in batch.iter().zip(&last).filter(|(_, last)| **last) {
        match m {
            MutationRef::Put { table, key, value } => tx
                .prepare_cached(&sql(table)?.upsert)
                .and_then(|mut stmt| stmt.execute(params![key, value])),
            MutationRef::PutExpiring {
                table,
                key,
                value,
                expires_at,
            } => {
                let at = sql_ms(expires_at)?;
                let sql = sql(table)?;
                let put = |text: &str| {
                    tx.prepare_cached(text)
                        .and_then(|mut stmt| stmt.execute(params![key, value, at]))
                };
                // Most rewrites keep the row's expiry: try the write that leaves the index
                // alone first.
                match put(&sql.upsert_same_expiry) {
                    Ok(0) => put(&sql.upsert_expiring),
                    done => done,
                }
            }
            MutationRef::Delete { table, key } => tx
                .prepare_cached(&sql(table)?.delete)
                .and_then(|mut stmt| stmt.execute(params![key])),
            MutationRef::Expire { table, up_to } => {
                let up_to = sql_ms(up_to)?;
                tx.prepare_cached(&sql(table)?.expire)
                    .and_then(|mut stmt| stmt.execute(params![up_to]))
            }
        }
        .map_err(|e| backend(&e))?;
    }
    Ok(())
}

/// Every row of `tables`, in key order.
fn load_tables(
    conn: &Connection,
    tables: impl Iterator<Item = Table>,
) -> Result<Snapshot, StoreError> {
    let mut out = Snapshot::new();
    for t in tables {
        let mut stmt = conn
            .prepare(&format!("SELECT k, v FROM {} ORDER BY k", t.name()))
            .map_err(|e| backend(&e))?;
        let rows = stmt
            .query_map([], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, Vec<u8>>(1)?))
            })
            .map_err(|e| backend(&e))?;
        for row in rows {
            let (k, v) = row.map_err(|e| backend(&e))?;
            out.entry(t).or_default().insert(k, v);
        }
    }
    Ok(out)
}

/// The read-only connection of a [`SqliteStore`] ([`Store::reader`]).
#[derive(Debug)]
struct SqliteReader {
    conn: Connection,
}

impl SqliteReader {
    fn rows(&self, sql: &str, params: impl rusqlite::Params) -> Result<Rows, StoreError> {
        let mut stmt = self.conn.prepare_cached(sql).map_err(|e| backend(&e))?;
        let rows = stmt
            .query_map(params, |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, Vec<u8>>(1)?))
            })
            .map_err(|e| backend(&e))?;
        rows.collect::<Result<_, _>>().map_err(|e| backend(&e))
    }

    /// Keys with their expiries (the index on `expires_at` holds the key too, since the table
    /// has no rowid: these reads never touch the rows).
    fn expiries(&self, sql: &str, params: impl rusqlite::Params) -> Result<Expiries, StoreError> {
        let mut stmt = self.conn.prepare_cached(sql).map_err(|e| backend(&e))?;
        let found = stmt
            .query_map(params, |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
            })
            .map_err(|e| backend(&e))?;
        let mut out = Vec::new();
        for row in found {
            let (k, at) = row.map_err(|e| backend(&e))?;
            out.push((k, u64::try_from(at).unwrap_or(0)));
        }
        Ok(out)
    }
}

impl StoreRead for SqliteReader {
    fn get(&mut self, table: Table, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        use rusqlite::OptionalExtension as _;
        self.conn
            .prepare_cached(&format!("SELECT v FROM {} WHERE k = ?1", table.name()))
            .and_then(|mut stmt| stmt.query_row(params![key], |r| r.get(0)).optional())
            .map_err(|e| backend(&e))
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
        let name = table.name();
        let max = i64::try_from(max).unwrap_or(i64::MAX);
        match super::prefix_end(prefix) {
            Some(end) => self.rows(
                &format!("SELECT k, v FROM {name} WHERE k >= ?1 AND k < ?2 ORDER BY k LIMIT ?3"),
                params![prefix, end, max],
            ),
            None => self.rows(
                &format!("SELECT k, v FROM {name} WHERE k >= ?1 ORDER BY k LIMIT ?2"),
                params![prefix, max],
            ),
        }
    }

    fn scan_range(
        &mut self,
        table: Table,
        start: &str,
        end: &str,
        max: usize,
    ) -> Result<Rows, StoreError> {
        let name = table.name();
        let max = i64::try_from(max).unwrap_or(i64::MAX);
        self.rows(
            &format!("SELECT k, v FROM {name} WHERE k >= ?1 AND k < ?2 ORDER BY k LIMIT ?3"),
            params![start, end, max],
        )
    }

    fn scan_page(
        &mut self,
        table: Table,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Rows, StoreError> {
        let name = table.name();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        match after {
            Some(after) => self.rows(
                &format!("SELECT k, v FROM {name} WHERE k > ?1 ORDER BY k LIMIT ?2"),
                params![after, limit],
            ),
            None => self.rows(
                &format!("SELECT k, v FROM {name} ORDER BY k LIMIT ?1"),
                params![limit],
            ),
        }
    }

    fn latest_expiries(&mut self, table: Table, window: u64) -> Result<Expiries, StoreError> {
        if !table.has_expiry() {
            return Err(no_expiry(table));
        }
        let name = table.name();
        self.expiries(
            &format!(
                "SELECT k, expires_at FROM {name} WHERE expires_at >= \
                 (SELECT MAX(expires_at) FROM {name}) - ?1 ORDER BY expires_at, k"
            ),
            params![sql_ms(window)?],
        )
    }

    fn expired(
        &mut self,
        table: Table,
        up_to: u64,
        after: Option<(u64, &str)>,
        limit: usize,
    ) -> Result<Expiries, StoreError> {
        if !table.has_expiry() {
            return Err(no_expiry(table));
        }
        let name = table.name();
        // Stored expiries are at most `i64::MAX`: a later bound takes them all.
        let up_to = i64::try_from(up_to).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        match after {
            Some((at, key)) => self.expiries(
                &format!(
                    "SELECT k, expires_at FROM {name} WHERE expires_at <= ?1 \
                     AND (expires_at, k) > (?2, ?3) ORDER BY expires_at, k LIMIT ?4"
                ),
                params![up_to, sql_ms(at)?, key, limit],
            ),
            None => self.expiries(
                &format!(
                    "SELECT k, expires_at FROM {name} WHERE expires_at <= ?1 \
                     ORDER BY expires_at, k LIMIT ?2"
                ),
                params![up_to, limit],
            ),
        }
    }

    fn next_expiry(&mut self, table: Table, after: u64) -> Result<Option<u64>, StoreError> {
        if !table.has_expiry() {
            return Err(no_expiry(table));
        }
        let after = sql_ms(after)?;
        let at: Option<i64> = self
            .conn
            .prepare_cached(&format!(
                "SELECT MIN(expires_at) FROM {} WHERE expires_at > ?1",
                table.name()
            ))
            .and_then(|mut stmt| stmt.query_row(params![after], |r| r.get(0)))
            .map_err(|e| backend(&e))?;
        Ok(at.and_then(|at| u64::try_from(at).ok()))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::{SqliteStore, write};
    use crate::store::{Batch, Store as _, Table};

    fn put(key: &str) -> Batch {
        let mut b = Batch::new();
        b.put(Table::Accounts, key, b"v");
        b
    }

    /// Commits leave their pages in the WAL past SQLite's default of 1,000 (which would have
    /// copied them back and started the WAL over), up to `WAL_CHECKPOINT_PAGES`.
    #[test]
    fn the_wal_takes_its_pages_past_sqlites_default_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("relay.db");
        let mut store = SqliteStore::open(&path).unwrap();
        for n in 0..30 {
            let mut b = Batch::new();
            for k in n * 100..(n + 1) * 100 {
                b.put(Table::Accounts, &format!("k{k:06}"), &[7; 2_000]);
            }
            store.commit(&b).unwrap();
        }
        let other = rusqlite::Connection::open(&path).unwrap();
        let mode: String = other
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        let frames: i64 = other
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get(1))
            .unwrap();
        assert!(
            (1_200..super::WAL_CHECKPOINT_PAGES).contains(&frames),
            "{frames} frames in the WAL"
        );
    }

    /// The batches of a group's write land together, and a write that fails on one of them
    /// leaves none of them.
    #[test]
    fn batches_written_together_are_all_or_nothing() {
        let mut store = SqliteStore::open_in_memory().unwrap();
        let mut bad = Batch::new();
        // An expiry past SQLite's integers.
        bad.put_expiring(Table::Tombstones, "t", b"v", u64::MAX);
        let SqliteStore { conn, writes, .. } = &mut store;
        assert!(write(conn, writes, &[&put("a"), &bad, &put("c")]).is_err());
        assert!(
            store.load().unwrap().is_empty(),
            "nothing of a failed write"
        );
        let SqliteStore { conn, writes, .. } = &mut store;
        write(conn, writes, &[&put("a"), &put("c")]).unwrap();
        let rows = store.load().unwrap();
        let keys: Vec<&String> = rows[&Table::Accounts].keys().collect();
        assert_eq!(keys, ["a", "c"]);
    }
}
