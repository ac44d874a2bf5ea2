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

#[test]
fn sqlite_v1_database_is_migrated() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v1.db");
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch(
            "CREATE TABLE identity (id INTEGER PRIMARY KEY CHECK (id = 1), doc TEXT NOT NULL);
             CREATE TABLE sessions (conversation_id TEXT PRIMARY KEY, their_alias_id TEXT NOT NULL, doc TEXT NOT NULL);
             CREATE TABLE messages (id TEXT PRIMARY KEY, conversation_id TEXT NOT NULL, time INTEGER NOT NULL, doc TEXT NOT NULL);
             CREATE TABLE outbox (internal_id TEXT PRIMARY KEY, added_at INTEGER NOT NULL, doc TEXT NOT NULL);
             CREATE TABLE offline_inbox (id TEXT PRIMARY KEY, created_at INTEGER NOT NULL, doc TEXT NOT NULL);
             CREATE TABLE trust (contact_id TEXT PRIMARY KEY, doc TEXT NOT NULL);
             PRAGMA user_version = 1;",
        )
        .unwrap();
    }
    let mut s = SqliteStore::open(&path).unwrap();
    conformance::receipt_levels(&mut s);
    conformance::pending_actions(&mut s);
    conformance::confirmed_orders(&mut s);
    let v: i64 = rusqlite::Connection::open(&path)
        .unwrap()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, client_core::store::SCHEMA_VERSION);
}
