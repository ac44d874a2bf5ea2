//! SQLite store: the default for the real server.
//!
//! WAL journal, `synchronous=FULL` (a commit is on disk before `commit` returns), one
//! `(k TEXT PRIMARY KEY, v BLOB)` table per [`Table`], schema version in `PRAGMA user_version`.

use std::path::Path;

use rusqlite::{Connection, params};

use super::{Batch, Mutation, Snapshot, Store, StoreError, Table};

/// Prepared statements kept per connection: an upsert and a delete for every [`Table`].
const STATEMENT_CACHE_CAPACITY: usize = 2 * Table::ALL.len();

/// Schema version written by this build.
pub const SCHEMA_VERSION: i64 = 1;

/// A [`Store`] on an SQLite database file.
#[derive(Debug)]
pub struct SqliteStore {
    conn: Connection,
}

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
        let path = path.as_ref();
        let private = |p: &Path| {
            private_files::make_private(p).map_err(|e| StoreError::Backend(e.to_string()))
        };
        private(path)?;
        let conn = Connection::open(path).map_err(|e| backend(&e))?;
        let store = Self::init(conn)?;
        for suffix in ["-wal", "-shm"] {
            let mut journal = path.as_os_str().to_owned();
            journal.push(suffix);
            let journal = std::path::PathBuf::from(journal);
            if journal.exists() {
                private(&journal)?;
            }
        }
        Ok(store)
    }

    /// An in-memory SQLite database (tests; not durable).
    pub fn open_in_memory() -> Result<Self, StoreError> {
        let conn = Connection::open_in_memory().map_err(|e| backend(&e))?;
        Self::init(conn)
    }

    fn init(conn: Connection) -> Result<Self, StoreError> {
        // One upsert and one delete per table stay prepared across commits.
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE_CAPACITY);
        // `journal_mode` returns a row, so it is read rather than executed.
        let _mode: String = conn
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .map_err(|e| backend(&e))?;
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(|e| backend(&e))?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(|e| backend(&e))?;
        let found: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| backend(&e))?;
        if found > SCHEMA_VERSION {
            return Err(StoreError::SchemaVersion {
                found,
                supported: SCHEMA_VERSION,
            });
        }
        // Version 1: every table. Later versions append steps here.
        for t in Table::ALL {
            conn.execute(
                &format!(
                    "CREATE TABLE IF NOT EXISTS {} (k TEXT PRIMARY KEY NOT NULL, v BLOB NOT NULL) WITHOUT ROWID",
                    t.name()
                ),
                [],
            )
            .map_err(|e| backend(&e))?;
        }
        conn.pragma_update(None, "user_version", SCHEMA_VERSION)
            .map_err(|e| backend(&e))?;
        Ok(Self { conn })
    }
}

impl Store for SqliteStore {
    fn load(&mut self) -> Result<Snapshot, StoreError> {
        let mut out = Snapshot::new();
        for t in Table::ALL {
            let mut stmt = self
                .conn
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

    fn commit(&mut self, batch: Batch) -> Result<(), StoreError> {
        if batch.is_empty() {
            return Ok(());
        }
        // Within one transaction only the last mutation of each row matters (a batch of many
        // inputs rewrites the same conversation row once per message): the others are skipped.
        let mut seen = std::collections::BTreeSet::new();
        let mut last = vec![false; batch.len()];
        for (i, m) in batch.iter().enumerate().rev() {
            let (Mutation::Put { table, key, .. } | Mutation::Delete { table, key }) = m;
            last[i] = seen.insert((*table, key.as_str()));
        }
        let tx = self.conn.transaction().map_err(|e| backend(&e))?;
        for (m, _) in batch.iter().zip(&last).filter(|(_, last)| **last) {
            match m {
                Mutation::Put { table, key, value } => tx
                    .prepare_cached(&format!(
                        "INSERT INTO {} (k, v) VALUES (?1, ?2) ON CONFLICT(k) DO UPDATE SET v = excluded.v",
                        table.name()
                    ))
                    .and_then(|mut stmt| stmt.execute(params![key, value])),
                Mutation::Delete { table, key } => tx
                    .prepare_cached(&format!("DELETE FROM {} WHERE k = ?1", table.name()))
                    .and_then(|mut stmt| stmt.execute(params![key])),
            }
            .map_err(|e| backend(&e))?;
        }
        // Dropping `tx` on the error paths above rolls back.
        tx.commit().map_err(|e| backend(&e))
    }
}
