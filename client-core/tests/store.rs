//! The shared store conformance suite, run against every backend.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use client_core::client_store_tests;
use client_core::store::{ClientStore, MemoryStore, SqliteStore, conformance};

client_store_tests!(memory, MemoryStore::new());
client_store_tests!(sqlite_in_memory, SqliteStore::open_in_memory().unwrap());

#[test]
fn sqlite_file_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("client.db");
    {
        let mut s = SqliteStore::open(&path).unwrap();
        s.put_message(&conformance::msg("m1", "c1", 1)).unwrap();
        s.save_session(&conformance::session("c1", "bob")).unwrap();
    }
    let s = SqliteStore::open(&path).unwrap();
    assert_eq!(s.get_history("c1", None, None).unwrap().len(), 1);
    assert!(s.load_session("c1").unwrap().is_some());
    let mode: String = rusqlite::Connection::open(&path)
        .unwrap()
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
}
