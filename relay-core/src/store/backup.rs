//! Online backup and restore of a [`SqliteStore`](super::SqliteStore) file, through SQLite's
//! backup API: a copy taken while a relay commits to the same file is a consistent snapshot.
//!
//! * [`backup`] opens the store read-only (a second connection beside the running relay's;
//!   in WAL mode it never blocks the relay's commits) and copies every page **in one step**,
//!   inside one read transaction: the copy is the store exactly as it was when that
//!   transaction began, so it holds every commit that finished before the backup started
//!   (an acknowledgement leaves the relay only after its commit), and no half of any later
//!   one.
//! * The copy is written to `OUT.partial` (mode 0600), checked with `PRAGMA integrity_check`,
//!   turned into a self-contained file (rollback journal, no `-wal` beside it), synced to
//!   disk and only then renamed to `OUT`: a crash leaves no half-written `OUT`.
//! * [`restore`] checks a backup the same way and copies it to a store path that must not
//!   exist yet (never over a store a relay may be using).
//!
//! Keys are not in the store (`jwt-signing.key`, `vapid.pem` live beside it): back them up
//! separately, once (they change only when rotated).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::backup::{Backup, StepResult};
use rusqlite::{Connection, OpenFlags};

use super::{SCHEMA_VERSION, Table};

/// How long a backup waits for a lock the running relay holds (a checkpoint), at most.
pub const BACKUP_BUSY_TIMEOUT_MS: u64 = 10_000;

/// Why a backup or restore did not happen. Nothing was written to the target path.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// The source file does not exist.
    #[error("{0}: no such file (is --data the relay's data directory?)")]
    Missing(PathBuf),
    /// The target already exists; nothing is overwritten.
    #[error("{0} already exists: choose another path, or move it away first")]
    Exists(PathBuf),
    /// The source is not a relay store this build can read.
    #[error("{path}: not a relay store this build can read: {why}")]
    NotAStore {
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// SQLite or the file system failed.
    #[error("{what} {path}: {why}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The error.
        why: String,
    },
}

/// What a backup or restore copied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupReport {
    /// Size of the written file, in bytes.
    pub bytes: u64,
    /// Rows per table (tables the store has; an older store may lack newer ones).
    pub rows: BTreeMap<&'static str, u64>,
    /// The store's schema version.
    pub schema_version: i64,
}

/// Copies the store file `store` (a relay may be running on it) to the new file `out`
/// (module doc). `out` must not exist.
pub fn backup(store: &Path, out: &Path) -> Result<BackupReport, BackupError> {
    if !store.is_file() {
        return Err(BackupError::Missing(store.to_owned()));
    }
    refuse_existing(out)?;
    let source = open_source(store)?;
    copy(&source, store, out)
}

/// Copies the backup file `from` to the store path `store`, which must not exist (nor its
/// `-wal`): restore into a fresh data directory, or move the old store away first.
pub fn restore(from: &Path, store: &Path) -> Result<BackupReport, BackupError> {
    if !from.is_file() {
        return Err(BackupError::Missing(from.to_owned()));
    }
    refuse_existing(store)?;
    refuse_existing(&suffixed(store, "-wal"))?;
    let source = open_source(from)?;
    let ok: String = source
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .map_err(sqlite("checking", from))?;
    if ok != "ok" {
        return Err(BackupError::NotAStore {
            path: from.to_owned(),
            why: format!("integrity check failed: {ok}"),
        });
    }
    copy(&source, from, store)
}

fn refuse_existing(path: &Path) -> Result<(), BackupError> {
    if path.exists() {
        return Err(BackupError::Exists(path.to_owned()));
    }
    Ok(())
}

fn suffixed(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

fn sqlite(what: &'static str, path: &Path) -> impl Fn(rusqlite::Error) -> BackupError {
    let path = path.to_owned();
    move |e| BackupError::Io {
        what,
        path: path.clone(),
        why: e.to_string(),
    }
}

fn io(what: &'static str, path: &Path) -> impl Fn(std::io::Error) -> BackupError {
    let path = path.to_owned();
    move |e| BackupError::Io {
        what,
        path: path.clone(),
        why: e.to_string(),
    }
}

/// Opens `path` read-only and checks that it is a relay store of a schema this build knows.
fn open_source(path: &Path) -> Result<Connection, BackupError> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(sqlite("opening", path))?;
    conn.busy_timeout(Duration::from_millis(BACKUP_BUSY_TIMEOUT_MS))
        .map_err(sqlite("opening", path))?;
    let not_a_store = |why: String| BackupError::NotAStore {
        path: path.to_owned(),
        why,
    };
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(|e| not_a_store(e.to_string()))?;
    if version < 1 {
        return Err(not_a_store("no relay schema in it".into()));
    }
    if version > SCHEMA_VERSION {
        return Err(not_a_store(format!(
            "schema version {version}, this build reads up to {SCHEMA_VERSION}: use a newer relay"
        )));
    }
    Ok(conn)
}

/// Copies `source` (opened from `from`) to the new file `to`, through `to.partial`.
fn copy(source: &Connection, from: &Path, to: &Path) -> Result<BackupReport, BackupError> {
    let partial = suffixed(to, ".partial");
    // A `.partial` is only ever ours: one left by an interrupted run is replaced.
    if partial.exists() {
        std::fs::remove_file(&partial).map_err(io("removing", &partial))?;
    }
    private_files::make_private(&partial).map_err(|e| BackupError::Io {
        what: "creating",
        path: partial.clone(),
        why: e.to_string(),
    })?;
    let written = write_copy(source, from, &partial);
    let report = match written {
        Ok(report) => report,
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            return Err(e);
        }
    };
    std::fs::rename(&partial, to).map_err(io("renaming", &partial))?;
    if let Some(dir) = to.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io("syncing the directory of", to))?;
    }
    Ok(report)
}

/// Every page in one step (-1), inside one read transaction: a consistent snapshot. A lock
/// held by the running relay (a checkpoint) is waited out, up to [`BACKUP_BUSY_TIMEOUT_MS`].
fn copy_all(backup: &Backup<'_, '_>, from: &Path) -> Result<(), BackupError> {
    const RETRY_MS: u64 = 50;
    for _ in 0..BACKUP_BUSY_TIMEOUT_MS / RETRY_MS {
        match backup.step(-1).map_err(sqlite("copying", from))? {
            StepResult::Done => return Ok(()),
            // More cannot follow a step of every page; Busy and Locked are retried.
            _ => std::thread::sleep(Duration::from_millis(RETRY_MS)),
        }
    }
    Err(BackupError::Io {
        what: "copying",
        path: from.to_owned(),
        why: format!("the store stayed locked for {BACKUP_BUSY_TIMEOUT_MS} ms"),
    })
}

fn write_copy(
    source: &Connection,
    from: &Path,
    partial: &Path,
) -> Result<BackupReport, BackupError> {
    let mut dest = Connection::open(partial).map_err(sqlite("creating", partial))?;
    {
        let backup = Backup::new(source, &mut dest).map_err(sqlite("reading", from))?;
        copy_all(&backup, from)?;
    }
    let _mode: String = dest
        .query_row("PRAGMA journal_mode=DELETE", [], |r| r.get(0))
        .map_err(sqlite("finishing", partial))?;
    let ok: String = dest
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .map_err(sqlite("checking", partial))?;
    if ok != "ok" {
        return Err(BackupError::NotAStore {
            path: from.to_owned(),
            why: format!("the copy fails SQLite's integrity check: {ok}"),
        });
    }
    let schema_version: i64 = dest
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(sqlite("reading", partial))?;
    let mut rows = BTreeMap::new();
    for table in Table::ALL {
        let exists: bool = dest
            .query_row(
                "SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = ?1",
                [table.name()],
                |r| r.get(0),
            )
            .map_err(sqlite("reading", partial))?;
        if exists {
            let n: i64 = dest
                .query_row(&format!("SELECT count(*) FROM {}", table.name()), [], |r| {
                    r.get(0)
                })
                .map_err(sqlite("reading", partial))?;
            rows.insert(table.name(), u64::try_from(n).unwrap_or(0));
        }
    }
    dest.close()
        .map_err(|(_, e)| sqlite("closing", partial)(e))?;
    let file = std::fs::File::open(partial).map_err(io("syncing", partial))?;
    file.sync_all().map_err(io("syncing", partial))?;
    let bytes = file.metadata().map_err(io("reading", partial))?.len();
    Ok(BackupReport {
        bytes,
        rows,
        schema_version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Batch, SqliteStore, Store as _};

    fn put(key: &str) -> Batch {
        let mut batch = Batch::new();
        batch.put(Table::Meta, key, b"\"v\"");
        batch
    }

    #[test]
    fn a_backup_taken_beside_an_open_store_holds_every_commit_before_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("relay.sqlite3");
        let mut store = SqliteStore::open(&path).expect("open");
        store.commit(&put("before")).expect("commit");
        let out = dir.path().join("backup.sqlite3");
        let report = backup(&path, &out).expect("backup");
        store.commit(&put("after")).expect("commit after");
        assert_eq!(report.schema_version, SCHEMA_VERSION);
        assert_eq!(report.rows.get("meta"), Some(&1));
        assert!(!suffixed(&out, ".partial").exists());
        assert_eq!(private_files::mode_of(&out).expect("mode"), Some(0o600));
        assert!(matches!(backup(&path, &out), Err(BackupError::Exists(_))));

        let restored = dir.path().join("fresh").join("relay.sqlite3");
        std::fs::create_dir(dir.path().join("fresh")).expect("dir");
        restore(&out, &restored).expect("restore");
        let snapshot = SqliteStore::open(&restored)
            .expect("open")
            .load()
            .expect("load");
        let meta = snapshot.get(&Table::Meta).expect("meta rows");
        assert!(meta.contains_key("before") && !meta.contains_key("after"));
        assert!(matches!(
            restore(&out, &restored),
            Err(BackupError::Exists(_))
        ));
    }

    #[test]
    fn what_is_not_a_store_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let junk = dir.path().join("junk");
        std::fs::write(&junk, b"not a database at all, not even close").expect("write");
        let out = dir.path().join("out");
        assert!(
            matches!(backup(&junk, &out), Err(BackupError::NotAStore { .. })),
            "{:?}",
            backup(&junk, &out)
        );
        assert!(!out.exists());
        assert!(matches!(
            backup(&dir.path().join("missing"), &out),
            Err(BackupError::Missing(_))
        ));
    }
}
