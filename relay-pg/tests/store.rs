//! `PgStore` against a real PostgreSQL: relay-core's shared store suite, unchanged, then what a
//! networked store adds (durability across connections and leaders, atomicity of a failing
//! batch, large batches against a naive model, migrations, a newer schema refused).
//!
//! Needs `RELAY_TEST_POSTGRES_URL` (see `common`); each test skips with a printed reason without it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;

use common::TestDb;
use relay_core::store::{Mutation, Snapshot, Store, StoreError, Table};
use relay_pg::{CampaignOptions, Leader, MIGRATIONS, PgError, PgStore, SCHEMA_VERSION};

/// A leader's store plus what must outlive it (drop order: store, leader, schema).
#[derive(Debug)]
struct SuiteStore {
    store: PgStore,
    _leader: Leader,
    _db: TestDb,
}

impl Store for SuiteStore {
    fn load(&mut self) -> Result<Snapshot, StoreError> {
        self.store.load()
    }
    fn commit(&mut self, batch: Vec<Mutation>) -> Result<(), StoreError> {
        self.store.commit(batch)
    }
}

fn lead(db: &TestDb) -> Leader {
    relay_pg::campaign_blocking(db.config.clone(), CampaignOptions::default()).expect("campaign")
}

/// A fresh schema, its leader and a store of that leader; `None` (skip printed) without PostgreSQL.
fn suite_store() -> Option<SuiteStore> {
    let db = TestDb::new()?;
    let leader = lead(&db);
    let store = leader.store().expect("store");
    Some(SuiteStore {
        store,
        _leader: leader,
        _db: db,
    })
}

relay_core::store_suite!(
    postgres,
    match super::suite_store() {
        Some(store) => store,
        None => return,
    }
);

fn put(table: Table, key: &str, value: &[u8]) -> Mutation {
    Mutation::Put {
        table,
        key: key.into(),
        value: value.to_vec(),
    }
}

fn del(table: Table, key: &str) -> Mutation {
    Mutation::Delete {
        table,
        key: key.into(),
    }
}

#[test]
fn commits_survive_the_connection_and_the_leader() {
    let Some(db) = TestDb::new() else { return };
    let first = lead(&db);
    assert_eq!(first.epoch(), 1);
    {
        let mut store = first.store().unwrap();
        store
            .commit(vec![
                put(Table::Accounts, "u", b"alice"),
                put(Table::Meta, "jwt", b"k"),
            ])
            .unwrap();
        store.commit(vec![del(Table::Meta, "jwt")]).unwrap();
    }
    first.resign();
    let second = lead(&db);
    assert_eq!(second.epoch(), 2, "every leader takes a new epoch");
    let snapshot = second.store().unwrap().load().unwrap();
    assert_eq!(snapshot[&Table::Accounts]["u"], b"alice");
    assert!(!snapshot.contains_key(&Table::Meta));
}

#[test]
fn a_batch_that_fails_part_way_applies_nothing() {
    let Some(db) = TestDb::new() else { return };
    let leader = lead(&db);
    let mut store = leader.store().unwrap();
    store
        .commit(vec![put(Table::Accounts, "before", b"1")])
        .unwrap();
    // PostgreSQL text cannot hold NUL: the second table's statement fails on the server after
    // the first table's went through, inside the same transaction.
    let err = store
        .commit(vec![
            put(Table::Accounts, "a", b"1"),
            del(Table::Accounts, "before"),
            put(Table::Messages, "bad\0key", b"m"),
        ])
        .unwrap_err();
    assert!(matches!(err, StoreError::Backend(_)), "{err:?}");
    // The store refuses after a failure; a new one sees only the first commit.
    assert!(store.commit(vec![put(Table::Meta, "x", b"1")]).is_err());
    let snapshot = leader.store().unwrap().load().unwrap();
    assert_eq!(snapshot.len(), 1, "{snapshot:?}");
    assert_eq!(snapshot[&Table::Accounts].len(), 1);
    assert_eq!(snapshot[&Table::Accounts]["before"], b"1");
}

/// A small deterministic generator (no RNG crate needed for test data).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, bound: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % bound
    }
}

#[test]
fn many_batches_agree_with_a_naive_model() {
    let Some(db) = TestDb::new() else { return };
    let leader = lead(&db);
    let mut store = leader.store().unwrap();
    let mut model: BTreeMap<Table, BTreeMap<String, Vec<u8>>> = BTreeMap::new();
    let mut rng = Lcg(42);
    // Keys that stress quoting, ordering and encoding; values with every byte.
    let keys = [
        "a",
        "b",
        "a/b",
        "conv/00000000000000000042",
        "é",
        "'quote",
        "\"dq",
        "back\\slash",
        "Zed",
        "z",
        "日本",
        "emoji😀",
        "sp ace",
        "%",
        "_",
    ];
    for round in 0..40 {
        let len = if round == 39 { 5_000 } else { rng.next(60) };
        let mut batch = Vec::new();
        for i in 0..len {
            let table = Table::ALL[rng.next(Table::ALL.len() as u64) as usize];
            let key = if round == 39 {
                format!("bulk/{i:06}")
            } else {
                keys[rng.next(keys.len() as u64) as usize].to_owned()
            };
            if rng.next(3) == 0 {
                batch.push(del(table, &key));
            } else {
                let value: Vec<u8> = (0..rng.next(300)).map(|j| (j * 7 + round) as u8).collect();
                batch.push(put(table, &key, &value));
            }
        }
        for m in batch.clone() {
            match m {
                Mutation::Put { table, key, value } => {
                    model.entry(table).or_default().insert(key, value);
                }
                Mutation::Delete { table, key } => {
                    if let Some(t) = model.get_mut(&table) {
                        t.remove(&key);
                    }
                }
            }
        }
        model.retain(|_, t| !t.is_empty());
        store.commit(batch).unwrap();
        assert_eq!(store.load().unwrap(), model, "round {round}");
    }
}

#[test]
fn an_old_schema_is_migrated_keeping_its_rows() {
    let Some(db) = TestDb::new() else { return };
    let admin = db.admin();
    // A version-1 database as an older build left it, written before `push_targets` existed.
    admin.exec(&format!(
        "CREATE SCHEMA {s};
         CREATE TABLE {s}.schema_migrations (version BIGINT PRIMARY KEY, name TEXT NOT NULL,
             applied_at TIMESTAMPTZ NOT NULL DEFAULT now());",
        s = db.schema
    ));
    admin.exec(MIGRATIONS[0].sql);
    admin.exec(
        "INSERT INTO schema_migrations (version, name) VALUES (1, '0001_kv_tables');
         DROP TABLE push_targets;
         INSERT INTO accounts (k, v) VALUES ('u1', '\\x616c696365');",
    );
    let leader = lead(&db);
    assert_eq!(leader.epoch(), 1);
    assert_eq!(
        admin.int("SELECT max(version) FROM schema_migrations"),
        SCHEMA_VERSION
    );
    let mut store = leader.store().unwrap();
    assert_eq!(store.load().unwrap()[&Table::Accounts]["u1"], b"alice");
    store
        .commit(vec![put(Table::PushTargets, "u1", b"target")])
        .expect("the missing table was created");
    assert_eq!(store.load().unwrap()[&Table::PushTargets]["u1"], b"target");
}

#[test]
fn a_newer_schema_is_refused() {
    let Some(db) = TestDb::new() else { return };
    lead(&db).resign();
    db.admin()
        .exec("INSERT INTO schema_migrations (version, name) VALUES (99, '0099_future')");
    let err =
        relay_pg::campaign_blocking(db.config.clone(), CampaignOptions::default()).unwrap_err();
    assert!(
        matches!(
            err,
            PgError::SchemaVersion {
                found: 99,
                supported: SCHEMA_VERSION
            }
        ),
        "{err:?}"
    );
    let as_store_error = StoreError::from(err);
    assert!(matches!(
        as_store_error,
        StoreError::SchemaVersion { found: 99, .. }
    ));
}

#[test]
fn the_store_works_from_inside_a_tokio_runtime() {
    let Some(db) = TestDb::new() else { return };
    // The relay shell calls the store from a task on its multi-thread runtime, and opens stores
    // there too; a current-thread runtime is the strictest case (blocking its only thread).
    for flavor in ["current_thread", "multi_thread"] {
        let runtime = match flavor {
            "current_thread" => tokio::runtime::Builder::new_current_thread(),
            _ => tokio::runtime::Builder::new_multi_thread(),
        }
        .enable_all()
        .build()
        .unwrap();
        let config = db.config.clone();
        let loaded = runtime.block_on(async move {
            let leader = relay_pg::campaign(config, CampaignOptions::default())
                .await
                .unwrap();
            let mut store = leader.store().unwrap();
            store
                .commit(vec![put(Table::Accounts, flavor, b"1")])
                .unwrap();
            let handle = tokio::spawn(async move { store.load().unwrap() });
            handle.await.unwrap()
        });
        assert!(loaded[&Table::Accounts].contains_key(flavor));
    }
}
