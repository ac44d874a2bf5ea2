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
    s.commit(
        &vec![
            put(Table::Accounts, "a", "1"),
            put(Table::Accounts, "a", "2"),
            put(Table::Messages, "x/1", "m1"),
            put(Table::Messages, "x/2", "m2"),
            del(Table::Messages, "x/1"),
            del(Table::Messages, "never"),
        ]
        .into(),
    )
    .unwrap();
    assert_eq!(get(s, Table::Accounts, "a").as_deref(), Some("2"));
    assert_eq!(get(s, Table::Messages, "x/1"), None);
    assert_eq!(get(s, Table::Messages, "x/2").as_deref(), Some("m2"));
}

/// The same key lives independently in two tables, and keys load in lexicographic order.
pub fn tables_are_independent_and_ordered(s: &mut dyn Store) {
    s.commit(
        &vec![
            put(Table::Meta, "k", "meta"),
            put(Table::Tombstones, "k", "tomb"),
            put(Table::Tombstones, "b", "2"),
            put(Table::Tombstones, "a", "1"),
        ]
        .into(),
    )
    .unwrap();
    let snap = s.load().unwrap();
    assert_eq!(snap[&Table::Meta]["k"], b"meta");
    let keys: Vec<_> = snap[&Table::Tombstones].keys().cloned().collect();
    assert_eq!(keys, ["a", "b", "k"]);
}

/// Committing an empty batch succeeds.
pub fn empty_batch_is_ok(s: &mut dyn Store) {
    s.commit(&Default::default()).unwrap();
}

fn put_exp(table: Table, key: &str, value: &str, expires_at: u64) -> Mutation {
    Mutation::PutExpiring {
        table,
        key: key.into(),
        value: value.as_bytes().to_vec(),
        expires_at,
    }
}

fn keys(rows: &super::Rows) -> Vec<&str> {
    rows.iter().map(|(k, _)| k.as_str()).collect()
}

/// A reader sees every commit that returned before its read (also commits made after it was
/// opened), by key and by prefix; a prefix scan stops at the prefix's end, a bounded one after
/// its rows.
pub fn reads_see_committed_rows(s: &mut dyn Store) {
    let mut r = s.reader().unwrap();
    assert_eq!(r.get(Table::Accounts, "u").unwrap(), None);
    assert!(r.scan_prefix(Table::Tombstones, "a/").unwrap().is_empty());
    s.commit(
        &vec![
            put(Table::Accounts, "u", "alice"),
            put(Table::Tombstones, "a/1", "x"),
            put(Table::Tombstones, "a/2", "y"),
            put(Table::Tombstones, "a0", "no"),
            put(Table::Tombstones, "ab/1", "no"),
            put(Table::Tombstones, "a", "no"),
            put(Table::Messages, "a/3", "other table"),
        ]
        .into(),
    )
    .unwrap();
    assert_eq!(
        r.get(Table::Accounts, "u").unwrap().as_deref(),
        Some(&b"alice"[..])
    );
    assert_eq!(r.get(Table::Meta, "u").unwrap(), None);
    let rows = r.scan_prefix(Table::Tombstones, "a/").unwrap();
    assert_eq!(keys(&rows), ["a/1", "a/2"]);
    assert_eq!(rows[1].1, b"y");
    // A bounded scan stops after `max` rows, in key order, within the prefix.
    assert_eq!(
        keys(&r.scan_prefix_max(Table::Tombstones, "a/", 1).unwrap()),
        ["a/1"]
    );
    assert_eq!(
        keys(&r.scan_prefix_max(Table::Tombstones, "a/", 5).unwrap()),
        ["a/1", "a/2"]
    );
    assert_eq!(
        keys(&r.scan_prefix_max(Table::Tombstones, "", 2).unwrap()),
        ["a", "a/1"]
    );
    // Several prefixes in one read: prefix by prefix, in the order given.
    let prefixes = ["ab/".to_owned(), "nothing/".to_owned(), "a/".to_owned()];
    assert_eq!(
        keys(&r.scan_prefixes(Table::Tombstones, &prefixes).unwrap()),
        ["ab/1", "a/1", "a/2"]
    );
    assert!(r.scan_prefixes(Table::Tombstones, &[]).unwrap().is_empty());
    s.commit(&vec![del(Table::Tombstones, "a/1")].into())
        .unwrap();
    assert_eq!(
        keys(&r.scan_prefix(Table::Tombstones, "a/").unwrap()),
        ["a/2"]
    );
    assert_eq!(
        keys(&r.scan_prefix(Table::Tombstones, "").unwrap()),
        ["a", "a/2", "a0", "ab/1"]
    );
}

/// A range of keys: from its start (included) to its end (excluded), at most `max` rows, in
/// key order, of its table only; an empty or inverted range holds nothing.
pub fn ranges_hold_their_rows(s: &mut dyn Store) {
    let mut r = s.reader().unwrap();
    assert!(
        r.scan_range(Table::Tombstones, "a", "b", 10)
            .unwrap()
            .is_empty()
    );
    s.commit(
        &vec![
            put(Table::Tombstones, "a/1", "x"),
            put(Table::Tombstones, "a/2", "y"),
            put(Table::Tombstones, "a0", "no"),
            put(Table::Tombstones, "a", "no"),
            put(Table::Messages, "a/3", "other table"),
        ]
        .into(),
    )
    .unwrap();
    assert_eq!(
        keys(&r.scan_range(Table::Tombstones, "a/", "a0", 10).unwrap()),
        ["a/1", "a/2"]
    );
    assert_eq!(
        keys(&r.scan_range(Table::Tombstones, "a/2", "a0", 10).unwrap()),
        ["a/2"]
    );
    assert_eq!(
        keys(&r.scan_range(Table::Tombstones, "a", "a/2", 10).unwrap()),
        ["a", "a/1"]
    );
    assert_eq!(
        keys(&r.scan_range(Table::Tombstones, "a", "b", 2).unwrap()),
        ["a", "a/1"]
    );
    assert!(
        r.scan_range(Table::Tombstones, "a0", "a/", 10)
            .unwrap()
            .is_empty()
    );
    assert!(
        r.scan_range(Table::Tombstones, "a/1", "a/1", 10)
            .unwrap()
            .is_empty()
    );
}

/// A table read in pages: each page holds at most `limit` rows, in key order, after the key
/// given; the pages together hold every row once, and a page sees commits made between pages.
pub fn pages_cover_the_table_in_key_order(s: &mut dyn Store) {
    let mut r = s.reader().unwrap();
    assert!(r.scan_page(Table::Messages, None, 10).unwrap().is_empty());
    let all: Vec<String> = (0..23).map(|i| format!("u/c/{i:020}")).collect();
    s.commit(
        &all.iter()
            .map(|k| put(Table::Messages, k, "m"))
            .chain([put(Table::Tombstones, "u/x", "other table")])
            .collect(),
    )
    .unwrap();
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = r.scan_page(Table::Messages, after.as_deref(), 5).unwrap();
        assert!(page.len() <= 5, "{}", page.len());
        let Some((last, _)) = page.last() else {
            break;
        };
        after = Some(last.clone());
        seen.extend(page.into_iter().map(|(k, _)| k));
    }
    assert_eq!(seen, all);
    // A page starts strictly after its key, also a key that is not (or no longer) there.
    let page = r
        .scan_page(Table::Messages, Some("u/c/0000000000000000001"), 2)
        .unwrap();
    assert_eq!(keys(&page), [all[10].as_str(), all[11].as_str()]);
    s.commit(&vec![del(Table::Messages, &all[12])].into())
        .unwrap();
    let page = r.scan_page(Table::Messages, Some(&all[11]), 2).unwrap();
    assert_eq!(keys(&page), [all[13].as_str(), all[14].as_str()]);
    assert!(
        r.scan_page(Table::Messages, Some(&all[22]), 5)
            .unwrap()
            .is_empty()
    );
}

/// Rows put with an expiry go with the first range expiry that reaches it; a plain put of the
/// same key clears its expiry; the reads by expiry see exactly the rows that have one.
pub fn expiring_rows_expire_by_range(s: &mut dyn Store) {
    let t = Table::Tombstones;
    s.commit(
        &vec![
            put_exp(t, "a/1", "1", 100),
            put_exp(t, "a/2", "2", 200),
            put_exp(t, "b/1", "3", 250),
            put_exp(t, "b/2", "4", 300),
            put_exp(t, "c/1", "5", 400),
            put(t, "c/1", "kept"),
        ]
        .into(),
    )
    .unwrap();
    let mut r = s.reader().unwrap();
    assert_eq!(r.next_expiry(t, 0).unwrap(), Some(100));
    assert_eq!(r.next_expiry(t, 100).unwrap(), Some(200));
    assert_eq!(r.next_expiry(t, 300).unwrap(), None);
    assert_eq!(
        r.latest_expiries(t, 50).unwrap(),
        [("b/1".to_owned(), 250), ("b/2".to_owned(), 300)]
    );
    assert_eq!(r.latest_expiries(t, 0).unwrap(), [("b/2".to_owned(), 300)]);
    s.commit(
        &vec![Mutation::Expire {
            table: t,
            up_to: 200,
        }]
        .into(),
    )
    .unwrap();
    let left: Vec<String> = s.load().unwrap()[&t].keys().cloned().collect();
    assert_eq!(left, ["b/1", "b/2", "c/1"]);
    assert_eq!(r.next_expiry(t, 0).unwrap(), Some(250));
    s.commit(
        &vec![Mutation::Expire {
            table: t,
            up_to: u64::MAX >> 2,
        }]
        .into(),
    )
    .unwrap();
    assert_eq!(get(s, t, "c/1").as_deref(), Some("kept"));
    assert_eq!(r.next_expiry(t, 0).unwrap(), None);
    assert!(r.latest_expiries(t, 1_000).unwrap().is_empty());
}

/// The due rows of an expiring table are read in pages of (expiry, key) order, each after the
/// last row of the one before; rows without an expiry, or due later, are never among them.
pub fn due_rows_are_read_in_pages(s: &mut dyn Store) {
    let t = Table::QueueIndex;
    s.commit(
        &vec![
            put_exp(t, "u/c/3", "3", 100),
            put_exp(t, "u/c/1", "1", 100),
            put_exp(t, "u/c/2", "2", 100),
            put_exp(t, "v/c/1", "4", 50),
            put_exp(t, "v/c/2", "5", 300),
            put(t, "w/c/1", "no expiry"),
            put_exp(Table::Tombstones, "u/m", "other table", 10),
        ]
        .into(),
    )
    .unwrap();
    let mut r = s.reader().unwrap();
    let due = |r: &mut Box<dyn crate::store::StoreRead>, after, limit| {
        r.expired(t, 200, after, limit).unwrap()
    };
    let first = due(&mut r, None, 2);
    assert_eq!(first, [("v/c/1".to_owned(), 50), ("u/c/1".to_owned(), 100)]);
    let next = due(&mut r, Some((100, "u/c/1")), 2);
    assert_eq!(next, [("u/c/2".to_owned(), 100), ("u/c/3".to_owned(), 100)]);
    assert!(due(&mut r, Some((100, "u/c/3")), 2).is_empty());
    assert_eq!(due(&mut r, None, 100).len(), 4);
    assert_eq!(r.expired(t, 49, None, 10).unwrap(), []);
    assert_eq!(r.expired(t, u64::MAX, None, 10).unwrap().len(), 5);
    s.commit(&vec![del(t, "v/c/1")].into()).unwrap();
    assert_eq!(
        due(&mut r, None, 1),
        [("u/c/1".to_owned(), 100)],
        "a deleted row is no longer due"
    );
    assert!(r.expired(Table::Accounts, 200, None, 10).is_err());
}

/// A row rewritten keeps its expiry, or takes the new one, with its new value each time; a
/// rewrite without an expiry clears it.
pub fn rewrites_keep_or_move_the_expiry(s: &mut dyn Store) {
    let t = Table::QueueIndex;
    let due = |s: &mut dyn Store, up_to| s.reader().unwrap().expired(t, up_to, None, 10).unwrap();
    s.commit(&vec![put_exp(t, "k", "a", 100), put_exp(t, "other", "o", 500)].into())
        .unwrap();
    s.commit(&vec![put_exp(t, "k", "b", 100)].into()).unwrap();
    assert_eq!(get(s, t, "k").as_deref(), Some("b"));
    assert_eq!(due(s, 100), [("k".to_owned(), 100)]);
    s.commit(&vec![put_exp(t, "k", "c", 300)].into()).unwrap();
    assert_eq!(get(s, t, "k").as_deref(), Some("c"));
    assert!(due(s, 299).is_empty(), "the expiry moved later");
    assert_eq!(due(s, 300), [("k".to_owned(), 300)]);
    s.commit(&vec![put_exp(t, "k", "d", 50)].into()).unwrap();
    assert_eq!(due(s, 100), [("k".to_owned(), 50)], "and earlier");
    s.commit(&vec![put(t, "k", "e")].into()).unwrap();
    assert_eq!(get(s, t, "k").as_deref(), Some("e"));
    assert!(due(s, 400).is_empty(), "a rewrite without expiry clears it");
    s.commit(&vec![put_exp(t, "k", "f", 60)].into()).unwrap();
    assert_eq!(due(s, 100), [("k".to_owned(), 60)]);
    assert_eq!(get(s, t, "other").as_deref(), Some("o"));
    assert_eq!(due(s, 500).len(), 2);
}

/// Inside one batch an expiry applies in its place: a row put before it goes if it is due, a
/// row put after it stays.
pub fn expiry_applies_in_batch_order(s: &mut dyn Store) {
    let t = Table::Tombstones;
    s.commit(
        &vec![
            put_exp(t, "k", "old", 10),
            put_exp(t, "gone", "x", 10),
            Mutation::Expire {
                table: t,
                up_to: 50,
            },
            put_exp(t, "k", "new", 90),
        ]
        .into(),
    )
    .unwrap();
    assert_eq!(get(s, t, "k").as_deref(), Some("new"));
    assert_eq!(get(s, t, "gone"), None);
    assert_eq!(s.reader().unwrap().next_expiry(t, 0).unwrap(), Some(90));
}

/// An expiry on a table without one is refused, and nothing of its batch is applied.
pub fn expiry_on_a_plain_table_is_refused(s: &mut dyn Store) {
    assert!(
        s.commit(
            &vec![
                put(Table::Accounts, "u", "alice"),
                put_exp(Table::Accounts, "v", "bob", 5),
            ]
            .into()
        )
        .is_err()
    );
    assert_eq!(get(s, Table::Accounts, "u"), None);
    assert!(
        s.commit(
            &vec![
                put(Table::Accounts, "u", "alice"),
                Mutation::Expire {
                    table: Table::Accounts,
                    up_to: 5
                },
            ]
            .into()
        )
        .is_err()
    );
    assert_eq!(get(s, Table::Accounts, "u"), None);
    assert!(s.reader().unwrap().next_expiry(Table::Accounts, 0).is_err());
}

/// `load_eager` holds every table but the lazy ones; `load` holds them all.
pub fn load_eager_leaves_out_the_lazy_tables(s: &mut dyn Store) {
    s.commit(
        &vec![
            put(Table::QueueIndex, "f", "alice"),
            put(Table::Accounts, "u", "bob"),
            put_exp(Table::Tombstones, "u/1", "t", 7),
        ]
        .into(),
    )
    .unwrap();
    let eager = s.load_eager().unwrap();
    assert_eq!(eager[&Table::QueueIndex]["f"], b"alice");
    assert!(
        eager
            .iter()
            .all(|(t, rows)| !t.is_lazy() || rows.is_empty())
    );
    let all = s.load().unwrap();
    assert_eq!(all[&Table::Tombstones]["u/1"], b"t");
    assert_eq!(all[&Table::Accounts]["u"], b"bob");
}

/// Two stores on one database (the cores of a sharded relay), each writing rows of its own:
/// each sees what the other committed, whole and by key, prefix and expiry in its reader, and
/// a row one of them deletes is gone for both.
pub fn stores_beside_see_each_other<'s>(a: &'s mut dyn Store, b: &'s mut dyn Store) {
    let mut ra = a.reader().unwrap();
    let mut rb = b.reader().unwrap();
    a.commit(
        &vec![
            put(Table::Accounts, "u0", "alice"),
            put_exp(Table::Tombstones, "u0/c/1", "m1", 40),
        ]
        .into(),
    )
    .unwrap();
    b.commit(
        &vec![
            put(Table::Accounts, "u1", "bob"),
            put_exp(Table::Tombstones, "u1/c/1", "m2", 20),
        ]
        .into(),
    )
    .unwrap();
    a.commit(&vec![put(Table::Accounts, "u0", "alice2")].into())
        .unwrap();
    for s in [&mut *a, &mut *b] {
        assert_eq!(get(s, Table::Accounts, "u0").as_deref(), Some("alice2"));
        assert_eq!(get(s, Table::Accounts, "u1").as_deref(), Some("bob"));
    }
    for r in [&mut ra, &mut rb] {
        assert_eq!(
            r.get(Table::Accounts, "u1").unwrap().as_deref(),
            Some(&b"bob"[..])
        );
        assert_eq!(
            r.get(Table::Accounts, "u0").unwrap().as_deref(),
            Some(&b"alice2"[..])
        );
        assert_eq!(
            keys(&r.scan_prefix(Table::Tombstones, "u1/").unwrap()),
            ["u1/c/1"]
        );
        assert_eq!(r.next_expiry(Table::Tombstones, 0).unwrap(), Some(20));
        assert_eq!(r.next_expiry(Table::Tombstones, 20).unwrap(), Some(40));
    }
    b.commit(&vec![del(Table::Tombstones, "u1/c/1")].into())
        .unwrap();
    for r in [&mut ra, &mut rb] {
        assert_eq!(r.get(Table::Tombstones, "u1/c/1").unwrap(), None);
        assert_eq!(r.next_expiry(Table::Tombstones, 0).unwrap(), Some(40));
    }
}

/// Commits of each side in [`stores_beside_commit_at_once`].
const COMMITS_AT_ONCE: usize = 150;

/// Two stores on one database commit at once, each from a thread of its own, many small
/// batches that each add a row and rewrite a row of its own: every commit succeeds (none
/// refused because the other held the database), and every row is there afterwards, the
/// rewritten ones with their last value.
pub fn stores_beside_commit_at_once<'s>(a: &'s mut dyn Store, b: &'s mut dyn Store) {
    fn commit_many(s: &mut dyn Store, side: &str) {
        for i in 0..COMMITS_AT_ONCE {
            s.commit(
                &vec![
                    put(Table::Messages, &format!("{side}/{i:04}"), side),
                    put(Table::Accounts, side, &i.to_string()),
                ]
                .into(),
            )
            .unwrap_or_else(|e| panic!("commit {i} of {side}: {e}"));
        }
    }
    std::thread::scope(|scope| {
        scope.spawn(|| commit_many(a, "a"));
        scope.spawn(|| commit_many(b, "b"));
    });
    let last = (COMMITS_AT_ONCE - 1).to_string();
    for s in [&mut *a, &mut *b] {
        let snap = s.load().unwrap();
        for side in ["a", "b"] {
            let prefix = format!("{side}/");
            let rows = snap[&Table::Messages]
                .keys()
                .filter(|k| k.starts_with(&prefix))
                .count();
            assert_eq!(rows, COMMITS_AT_ONCE, "rows of {side}");
            assert_eq!(snap[&Table::Accounts][side], last.as_bytes());
        }
    }
}

/// Expands to a module `$modname` with one `#[test]` per check of [`crate::store::suite`], each on a
/// fresh store built by `$make` (an expression evaluated inside the test; it may `return` to skip).
///
/// With `beside = $beside` (a closure from `&mut` the fresh store to another store on the same
/// database, as each core of a sharded relay opens its own), the checks of two stores side by
/// side run too.
#[macro_export]
macro_rules! store_suite {
    ($modname:ident, $make:expr, beside = $beside:expr) => {
        mod $modname {
            #[allow(unused_imports)]
            use super::*;
            $crate::store_suite!(@one $make);
            #[test]
            fn stores_beside_see_each_other() {
                let mut a = $make;
                let mut b = ($beside)(&mut a);
                $crate::store::suite::stores_beside_see_each_other(&mut a, &mut b);
            }
            #[test]
            fn stores_beside_commit_at_once() {
                let mut a = $make;
                let mut b = ($beside)(&mut a);
                $crate::store::suite::stores_beside_commit_at_once(&mut a, &mut b);
            }
        }
    };
    ($modname:ident, $make:expr) => {
        mod $modname {
            #[allow(unused_imports)]
            use super::*;
            $crate::store_suite!(@one $make);
        }
    };
    (@one $make:expr) => {
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
        #[test]
        fn reads_see_committed_rows() {
            let mut s = $make;
            $crate::store::suite::reads_see_committed_rows(&mut s);
        }
        #[test]
        fn ranges_hold_their_rows() {
            let mut s = $make;
            $crate::store::suite::ranges_hold_their_rows(&mut s);
        }
        #[test]
        fn pages_cover_the_table_in_key_order() {
            let mut s = $make;
            $crate::store::suite::pages_cover_the_table_in_key_order(&mut s);
        }
        #[test]
        fn expiring_rows_expire_by_range() {
            let mut s = $make;
            $crate::store::suite::expiring_rows_expire_by_range(&mut s);
        }
        #[test]
        fn due_rows_are_read_in_pages() {
            let mut s = $make;
            $crate::store::suite::due_rows_are_read_in_pages(&mut s);
        }
        #[test]
        fn rewrites_keep_or_move_the_expiry() {
            let mut s = $make;
            $crate::store::suite::rewrites_keep_or_move_the_expiry(&mut s);
        }
        #[test]
        fn expiry_applies_in_batch_order() {
            let mut s = $make;
            $crate::store::suite::expiry_applies_in_batch_order(&mut s);
        }
        #[test]
        fn expiry_on_a_plain_table_is_refused() {
            let mut s = $make;
            $crate::store::suite::expiry_on_a_plain_table_is_refused(&mut s);
        }
        #[test]
        fn load_eager_leaves_out_the_lazy_tables() {
            let mut s = $make;
            $crate::store::suite::load_eager_leaves_out_the_lazy_tables(&mut s);
        }
    };
}

#[cfg(test)]
mod tests {
    use super::{del, get, put};
    use crate::store::{Store, Table};

    store_suite!(
        memory,
        crate::store::MemoryStore::new(),
        beside = |s: &mut crate::store::MemoryStore| s.clone()
    );
    store_suite!(
        sqlite,
        crate::store::SqliteStore::open_in_memory().unwrap(),
        beside = |s: &mut crate::store::SqliteStore| s.beside().unwrap()
    );
    store_suite!(
        sqlite_file,
        TempSqlite::new(),
        beside = |s: &mut TempSqlite| s.beside()
    );

    /// An SQLite store on a file of its own, removed with it.
    #[derive(Debug)]
    struct TempSqlite {
        store: crate::store::SqliteStore,
        dir: std::sync::Arc<tempfile::TempDir>,
    }

    impl TempSqlite {
        fn new() -> Self {
            let dir = tempfile::tempdir().unwrap();
            let store = crate::store::SqliteStore::open(dir.path().join("relay.db")).unwrap();
            Self {
                store,
                dir: std::sync::Arc::new(dir),
            }
        }

        fn beside(&mut self) -> Self {
            Self {
                store: self.store.beside().unwrap(),
                dir: std::sync::Arc::clone(&self.dir),
            }
        }
    }

    impl Store for TempSqlite {
        fn load(&mut self) -> Result<crate::store::Snapshot, crate::store::StoreError> {
            self.store.load()
        }

        fn commit(&mut self, batch: &crate::store::Batch) -> Result<(), crate::store::StoreError> {
            self.store.commit(batch)
        }

        fn reader(&mut self) -> Result<Box<dyn crate::store::StoreRead>, crate::store::StoreError> {
            self.store.reader()
        }
    }

    #[test]
    fn memory_commit_then_reopen() {
        let store = crate::store::MemoryStore::new();
        {
            let mut handle = store.clone();
            handle
                .commit(&vec![put(Table::Accounts, "u", "alice")].into())
                .unwrap();
            store.fail_commits(1);
            assert!(
                handle
                    .commit(&vec![put(Table::Accounts, "v", "bob")].into())
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
            s.commit(
                &vec![
                    put(Table::Accounts, "u", "alice"),
                    put(Table::Meta, "jwt", "k"),
                ]
                .into(),
            )
            .unwrap();
            s.commit(&vec![del(Table::Meta, "jwt")].into()).unwrap();
        }
        let mut s = crate::store::SqliteStore::open(&path).unwrap();
        assert_eq!(get(&mut s, Table::Accounts, "u").as_deref(), Some("alice"));
        assert_eq!(get(&mut s, Table::Meta, "jwt"), None);
    }

    /// A version-1 database (tombstones without an expiry column) is migrated: every row's
    /// expiry is read from its own `expires_at` field, and the rows expire by range.
    #[test]
    fn sqlite_version_1_gains_the_expiry_column() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("relay.db");
        {
            let c = rusqlite::Connection::open(&path).unwrap();
            c.execute_batch(
                "CREATE TABLE tombstones (k TEXT PRIMARY KEY NOT NULL, v BLOB NOT NULL) WITHOUT ROWID;
                 INSERT INTO tombstones VALUES ('a/1', CAST('{\"seq\":1,\"expires_at\":500}' AS BLOB));
                 INSERT INTO tombstones VALUES ('a/2', CAST('{\"seq\":2,\"expires_at\":900}' AS BLOB));
                 PRAGMA user_version = 1;",
            )
            .unwrap();
        }
        let mut s = crate::store::SqliteStore::open(&path).unwrap();
        let mut r = s.reader().unwrap();
        assert_eq!(r.next_expiry(Table::Tombstones, 0).unwrap(), Some(500));
        s.commit(
            &vec![crate::store::Mutation::Expire {
                table: Table::Tombstones,
                up_to: 600,
            }]
            .into(),
        )
        .unwrap();
        assert_eq!(get(&mut s, Table::Tombstones, "a/1"), None);
        assert!(get(&mut s, Table::Tombstones, "a/2").is_some());
        drop(s);
        let c = rusqlite::Connection::open(&path).unwrap();
        let v: i64 = c
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(v, crate::store::SCHEMA_VERSION);
    }

    /// A version-4 database (a queue index without an expiry column) is migrated: the column is
    /// added empty, so no stored queue is due until the relay fills it.
    #[test]
    fn sqlite_version_4_queue_index_gains_an_empty_expiry_column() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("relay.db");
        {
            let c = rusqlite::Connection::open(&path).unwrap();
            c.execute_batch(
                "CREATE TABLE queue_index (k TEXT PRIMARY KEY NOT NULL, v BLOB NOT NULL) WITHOUT ROWID;
                 CREATE TABLE tombstones (k TEXT PRIMARY KEY NOT NULL, v BLOB NOT NULL, expires_at INTEGER) WITHOUT ROWID;
                 INSERT INTO queue_index VALUES ('u/c', CAST('{\"oldest\":5}' AS BLOB));
                 PRAGMA user_version = 4;",
            )
            .unwrap();
        }
        let mut s = crate::store::SqliteStore::open(&path).unwrap();
        let mut r = s.reader().unwrap();
        assert_eq!(r.next_expiry(Table::QueueIndex, 0).unwrap(), None);
        assert!(
            r.expired(Table::QueueIndex, u64::MAX, None, 10)
                .unwrap()
                .is_empty()
        );
        s.commit(&vec![super::put_exp(Table::QueueIndex, "u/c", "m", 7)].into())
            .unwrap();
        assert_eq!(
            r.expired(Table::QueueIndex, 7, None, 10).unwrap(),
            [("u/c".to_owned(), 7)]
        );
    }

    #[test]
    fn prefix_ends() {
        use crate::store::prefix_end;
        assert_eq!(prefix_end("a/").as_deref(), Some("a0"));
        assert_eq!(prefix_end("").as_deref(), None);
        assert_eq!(prefix_end("ab").as_deref(), Some("ac"));
        let max = char::MAX.to_string();
        assert_eq!(prefix_end(&format!("a{max}")).as_deref(), Some("b"));
        assert_eq!(prefix_end(&max), None);
        assert_eq!(prefix_end("\u{D7FF}").as_deref(), Some("\u{E000}"));
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
