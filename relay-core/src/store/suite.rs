//! The shared test suite every [`Store`] implementation must pass.
//!
//! Public (behind the `test-suite` feature) so that a store in another crate runs exactly these
//! checks: `relay_core::store_suite!(my_store, MyStore::new())` expands to one `#[test]` per check,
//! each building a fresh store with the given expression (which may `return` early to skip a test,
//! e.g. when the store's server is not available). The functions panic on a failed check.

// Test code: a panic is how a check fails.
#![allow(clippy::unwrap_used)]

use super::{Mutation, Store, Table};

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

fn get(s: &mut dyn Store, table: Table, key: &str) -> Option<String> {
    let snap = s.load().unwrap();
    snap.get(&table)
        .and_then(|t| t.get(key))
        .map(|v| String::from_utf8(v.clone()).unwrap())
}

/// A fresh store loads no rows.
pub fn empty_store_loads_empty(s: &mut dyn Store) {
    assert!(s.load().unwrap().values().all(|t| t.is_empty()));
}

/// A batch applies in order: a later put of the same key wins, a delete after a put removes it,
/// deleting a missing key is a no-op.
pub fn batch_applies_in_order(s: &mut dyn Store) {
    s.commit(vec![
        put(Table::Accounts, "a", "1"),
        put(Table::Accounts, "a", "2"),
        put(Table::Messages, "x/1", "m1"),
        put(Table::Messages, "x/2", "m2"),
        del(Table::Messages, "x/1"),
        del(Table::Messages, "never"),
    ])
    .unwrap();
    assert_eq!(get(s, Table::Accounts, "a").as_deref(), Some("2"));
    assert_eq!(get(s, Table::Messages, "x/1"), None);
    assert_eq!(get(s, Table::Messages, "x/2").as_deref(), Some("m2"));
}

/// The same key lives independently in two tables, and keys load in lexicographic order.
pub fn tables_are_independent_and_ordered(s: &mut dyn Store) {
    s.commit(vec![
        put(Table::Meta, "k", "meta"),
        put(Table::Tombstones, "k", "tomb"),
        put(Table::Tombstones, "b", "2"),
        put(Table::Tombstones, "a", "1"),
    ])
    .unwrap();
    let snap = s.load().unwrap();
    assert_eq!(snap[&Table::Meta]["k"], b"meta");
    let keys: Vec<_> = snap[&Table::Tombstones].keys().cloned().collect();
    assert_eq!(keys, ["a", "b", "k"]);
}

/// Committing an empty batch succeeds.
pub fn empty_batch_is_ok(s: &mut dyn Store) {
    s.commit(vec![]).unwrap();
}

/// Expands to a module `$modname` with one `#[test]` per check of [`crate::store::suite`], each on a
/// fresh store built by `$make` (an expression evaluated inside the test; it may `return` to skip).
#[macro_export]
macro_rules! store_suite {
    ($modname:ident, $make:expr) => {
        mod $modname {
            #[allow(unused_imports)]
            use super::*;
            #[test]
            fn empty_store_loads_empty() {
                let mut s = $make;
                $crate::store::suite::empty_store_loads_empty(&mut s);
            }
            #[test]
            fn batch_applies_in_order() {
                let mut s = $make;
                $crate::store::suite::batch_applies_in_order(&mut s);
            }
            #[test]
            fn tables_are_independent_and_ordered() {
                let mut s = $make;
                $crate::store::suite::tables_are_independent_and_ordered(&mut s);
            }
            #[test]
            fn empty_batch_is_ok() {
                let mut s = $make;
                $crate::store::suite::empty_batch_is_ok(&mut s);
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::{del, get, put};
    use crate::store::{Store, Table};

    store_suite!(memory, crate::store::MemoryStore::new());
    store_suite!(sqlite, crate::store::SqliteStore::open_in_memory().unwrap());

    #[test]
    fn memory_commit_then_reopen() {
        let store = crate::store::MemoryStore::new();
        {
            let mut handle = store.clone();
            handle
                .commit(vec![put(Table::Accounts, "u", "alice")])
                .unwrap();
            store.fail_commits(1);
            assert!(
                handle
                    .commit(vec![put(Table::Accounts, "v", "bob")])
                    .is_err()
            );
        } // "crash": the first handle is gone
        let mut reopened = store;
        assert_eq!(
            get(&mut reopened, Table::Accounts, "u").as_deref(),
            Some("alice")
        );
        assert_eq!(get(&mut reopened, Table::Accounts, "v"), None);
    }

    #[test]
    fn sqlite_commit_then_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("relay.db");
        {
            let mut s = crate::store::SqliteStore::open(&path).unwrap();
            s.commit(vec![
                put(Table::Accounts, "u", "alice"),
                put(Table::Meta, "jwt", "k"),
            ])
            .unwrap();
            s.commit(vec![del(Table::Meta, "jwt")]).unwrap();
        }
        let mut s = crate::store::SqliteStore::open(&path).unwrap();
        assert_eq!(get(&mut s, Table::Accounts, "u").as_deref(), Some("alice"));
        assert_eq!(get(&mut s, Table::Meta, "jwt"), None);
    }

    #[test]
    fn sqlite_rejects_newer_schema() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("relay.db");
        {
            let c = rusqlite::Connection::open(&path).unwrap();
            c.pragma_update(None, "user_version", 99).unwrap();
        }
        let err = crate::store::SqliteStore::open(&path).unwrap_err();
        assert!(matches!(
            err,
            crate::store::StoreError::SchemaVersion { found: 99, .. }
        ));
    }
}
