//! The SQLite store's backups through their public API: which files are refused, and a copy of
//! a store of many pages.

use std::path::Path;

use relay_core::store::backup::{BackupError, backup, restore};
use relay_core::store::{Mutation, SCHEMA_VERSION, SqliteStore, Store, Table};

fn put(key: &str, value: &[u8]) -> Mutation {
    Mutation::Put {
        table: Table::Meta,
        key: key.into(),
        value: value.to_vec(),
    }
}

fn meta_keys(store: &mut dyn Store) -> Vec<String> {
    store
        .load()
        .unwrap()
        .get(&Table::Meta)
        .map(|rows| rows.keys().cloned().collect())
        .unwrap_or_default()
}

/// An SQLite file with no relay schema in it (`user_version` 0), or one written by a newer
/// schema, is neither backed up nor restored; nothing is written to the target.
#[test]
fn a_backup_refuses_a_file_without_the_relay_schema_or_of_a_newer_one() {
    let dir = tempfile::tempdir().unwrap();
    for (name, version) in [
        ("plain", 0),
        ("negative", -1),
        ("newer", SCHEMA_VERSION + 1),
    ] {
        let path = dir.path().join(format!("{name}.sqlite3"));
        {
            let c = rusqlite::Connection::open(&path).unwrap();
            c.execute("CREATE TABLE t (k TEXT)", []).unwrap();
            c.pragma_update(None, "user_version", version).unwrap();
        }
        let out = dir.path().join(format!("{name}.backup"));
        let r = backup(&path, &out);
        assert!(
            matches!(r, Err(BackupError::NotAStore { .. })),
            "{name}: {r:?}"
        );
        assert!(!out.exists(), "{name}");
        let restored = dir.path().join(format!("{name}.restored"));
        let r = restore(&path, &restored);
        assert!(
            matches!(r, Err(BackupError::NotAStore { .. })),
            "{name}: {r:?}"
        );
        assert!(!restored.exists(), "{name}");
    }
}

/// A restore never writes beside a store that may be in use: a missing backup, an existing
/// target or an existing `-wal` of the target is refused.
#[test]
fn a_restore_refuses_a_missing_backup_and_an_existing_store_or_wal() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("relay.sqlite3");
    SqliteStore::open(&path)
        .unwrap()
        .commit(&vec![put("k", b"\"v\"")].into())
        .unwrap();
    let copy = dir.path().join("copy.sqlite3");
    backup(&path, &copy).unwrap();

    let missing = dir.path().join("missing.sqlite3");
    assert!(matches!(
        restore(&missing, &dir.path().join("a.sqlite3")),
        Err(BackupError::Missing(p)) if p == missing
    ));
    let target = dir.path().join("target.sqlite3");
    std::fs::write(dir.path().join("target.sqlite3-wal"), b"").unwrap();
    assert!(matches!(
        restore(&copy, &target),
        Err(BackupError::Exists(p)) if p == dir.path().join("target.sqlite3-wal")
    ));
    assert!(!target.exists());
    assert!(matches!(
        restore(&copy, &path),
        Err(BackupError::Exists(p)) if p == path
    ));

    let fresh = dir.path().join("fresh.sqlite3");
    let report = restore(&copy, &fresh).unwrap();
    assert_eq!(report.schema_version, SCHEMA_VERSION);
    assert_eq!(report.rows.get("meta"), Some(&1));
    assert_eq!(report.bytes, std::fs::metadata(&fresh).unwrap().len());
    assert_eq!(meta_keys(&mut SqliteStore::open(&fresh).unwrap()), ["k"]);
}

fn pages(path: &Path) -> i64 {
    rusqlite::Connection::open(path)
        .unwrap()
        .query_row("PRAGMA page_count", [], |r| r.get(0))
        .unwrap()
}

/// A store of more pages than the backup's retries is copied whole, in one step, with every row
/// of every table counted in the report.
#[test]
fn a_backup_copies_a_store_of_many_pages_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("relay.sqlite3");
    let mut store = SqliteStore::open(&path).unwrap();
    let value = vec![b'x'; 4000];
    store
        .commit(&(0..300).map(|i| put(&format!("k{i:03}"), &value)).collect())
        .unwrap();
    store
        .commit(
            &vec![Mutation::Put {
                table: Table::Accounts,
                key: "u".into(),
                value: b"{}".to_vec(),
            }]
            .into(),
        )
        .unwrap();
    let out = dir.path().join("backup.sqlite3");
    let report = backup(&path, &out).unwrap();
    assert!(pages(&out) > 300, "{} pages", pages(&out));
    assert_eq!(report.rows.get("meta"), Some(&300));
    assert_eq!(report.rows.get("accounts"), Some(&1));
    assert_eq!(report.rows.get("tombstones"), Some(&0));
    assert_eq!(report.rows.len(), Table::ALL.len());
    assert_eq!(report.bytes, std::fs::metadata(&out).unwrap().len());
    let copied = SqliteStore::open(&out).unwrap().load().unwrap();
    assert_eq!(copied, store.load().unwrap());
}
