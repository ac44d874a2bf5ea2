//! `PgStore` against a real PostgreSQL: relay-core's shared store suite, unchanged (two stores
//! of one leader side by side too, as the cores of a sharded relay would), then what a
//! networked store adds (durability across connections and leaders, atomicity of a failing
//! batch, large batches against a naive model, migrations, a newer schema refused, the expiry
//! column of a fresh and of a migrated database, keyed reads that outlive a failed read).
//!
//! Needs `RELAY_TEST_POSTGRES_URL` (see `common`); each test skips with a printed reason without it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;

use common::{Admin, TestDb};
use relay_core::store::{Batch, Mutation, Snapshot, Store, StoreError, StoreRead, Table};
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
    fn load_eager(&mut self) -> Result<Snapshot, StoreError> {
        self.store.load_eager()
    }
    fn commit(&mut self, batch: &Batch) -> Result<(), StoreError> {
        self.store.commit(batch)
    }
    fn reader(&mut self) -> Result<Box<dyn StoreRead>, StoreError> {
        self.store.reader()
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
    match suite_store() {
        Some(store) => store,
        None => return,
    },
    beside = |s: &mut SuiteStore| s._leader.store().expect("a second store of the leader")
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
            .commit(
                &vec![
                    put(Table::Accounts, "u", b"alice"),
                    put(Table::Meta, "jwt", b"k"),
                ]
                .into(),
            )
            .unwrap();
        store.commit(&vec![del(Table::Meta, "jwt")].into()).unwrap();
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
        .commit(&vec![put(Table::Accounts, "before", b"1")].into())
        .unwrap();
    // PostgreSQL text cannot hold NUL: the second table's statement fails on the server after
    // the first table's went through, inside the same transaction.
    let err = store
        .commit(
            &vec![
                put(Table::Accounts, "a", b"1"),
                del(Table::Accounts, "before"),
                put(Table::Messages, "bad\0key", b"m"),
            ]
            .into(),
        )
        .unwrap_err();
    assert!(matches!(err, StoreError::Backend(_)), "{err:?}");
    // The store refuses after a failure; a new one sees only the first commit.
    assert!(
        store
            .commit(&vec![put(Table::Meta, "x", b"1")].into())
            .is_err()
    );
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

/// Every row with its expiry (`None`: none), as the batches leave them applied in order.
type Model = BTreeMap<Table, BTreeMap<String, (Vec<u8>, Option<u64>)>>;

#[test]
fn many_batches_agree_with_a_naive_model() {
    let Some(db) = TestDb::new() else { return };
    let leader = lead(&db);
    let mut store = leader.store().unwrap();
    let mut model = Model::new();
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
            let value: Vec<u8> = (0..rng.next(300)).map(|j| (j * 7 + round) as u8).collect();
            // Expiries between 0 and 1000 against range expiries up to 1000: some rows go in the
            // batch that puts them, some in a later one, some stay.
            match (rng.next(6), table.has_expiry()) {
                (0 | 1, _) => batch.push(del(table, &key)),
                (2, true) => batch.push(Mutation::Expire {
                    table,
                    up_to: rng.next(1_000),
                }),
                (3 | 4, true) => batch.push(Mutation::PutExpiring {
                    table,
                    key,
                    value,
                    expires_at: rng.next(1_000),
                }),
                _ => batch.push(put(table, &key, &value)),
            }
        }
        for m in batch.clone() {
            match m {
                Mutation::Put { table, key, value } => {
                    model.entry(table).or_default().insert(key, (value, None));
                }
                Mutation::PutExpiring {
                    table,
                    key,
                    value,
                    expires_at,
                } => {
                    model
                        .entry(table)
                        .or_default()
                        .insert(key, (value, Some(expires_at)));
                }
                Mutation::Delete { table, key } => {
                    if let Some(t) = model.get_mut(&table) {
                        t.remove(&key);
                    }
                }
                Mutation::Expire { table, up_to } => {
                    if let Some(t) = model.get_mut(&table) {
                        t.retain(|_, (_, at)| at.is_none_or(|at| at > up_to));
                    }
                }
            }
        }
        model.retain(|_, t| !t.is_empty());
        store.commit(&batch.into()).unwrap();
        let values: Snapshot = model
            .iter()
            .map(|(table, rows)| {
                let rows = rows.iter().map(|(k, (v, _))| (k.clone(), v.clone()));
                (*table, rows.collect())
            })
            .collect();
        assert_eq!(store.load().unwrap(), values, "round {round}");
        let expiries: Vec<(String, Option<i64>)> = model
            .get(&Table::Tombstones)
            .into_iter()
            .flatten()
            .map(|(k, (_, at))| (k.clone(), at.map(|at| at as i64)))
            .collect();
        assert_eq!(stored_expiries(&db), expiries, "round {round}");
    }
}

/// Every tombstone's key and `expires_at` column, in key order (byte order, as the store's).
fn stored_expiries(db: &TestDb) -> Vec<(String, Option<i64>)> {
    db.admin()
        .rows("SELECT k, expires_at FROM tombstones ORDER BY k")
        .into_iter()
        .map(|row| {
            let at = row[1].as_deref().map(|at| at.parse().unwrap());
            (row[0].clone().unwrap(), at)
        })
        .collect()
}

/// The index names of `table` in the test's schema.
fn indexes(db: &TestDb, table: &str) -> Vec<String> {
    db.admin()
        .rows(&format!(
            "SELECT indexname::text FROM pg_indexes WHERE schemaname = '{}' AND tablename = '{table}' ORDER BY 1",
            db.schema
        ))
        .into_iter()
        .map(|row| row[0].clone().unwrap())
        .collect()
}

/// The test schema with an empty `schema_migrations` table, as a relay's bootstrap leaves it
/// (the tests then apply the migrations of an older version by hand).
fn create_bookkept_schema(admin: &Admin, schema: &str) {
    admin.exec(&format!(
        "CREATE SCHEMA {schema};
         CREATE TABLE {schema}.schema_migrations (version BIGINT PRIMARY KEY, name TEXT NOT NULL,
             applied_at TIMESTAMPTZ NOT NULL DEFAULT now());"
    ));
}

#[test]
fn an_old_schema_is_migrated_keeping_its_rows() {
    let Some(db) = TestDb::new() else { return };
    let admin = db.admin();
    // A version-1 database as an older build left it, written before `push_targets` existed.
    create_bookkept_schema(&admin, &db.schema);
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
        .commit(&vec![put(Table::PushTargets, "u1", b"target")].into())
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
                .commit(&vec![put(Table::Accounts, flavor, b"1")].into())
                .unwrap();
            let handle = tokio::spawn(async move { store.load().unwrap() });
            handle.await.unwrap()
        });
        assert!(loaded[&Table::Accounts].contains_key(flavor));
    }
}

/// A database at version 4 (tombstones without an expiry column) is migrated to version 5: the
/// column is filled from each row's own `expires_at` field (NULL without one), indexed, and the
/// rows then expire by range and are read by expiry.
#[test]
fn a_version_4_database_gains_the_tombstone_expiries() {
    let Some(db) = TestDb::new() else { return };
    let admin = db.admin();
    create_bookkept_schema(&admin, &db.schema);
    for m in MIGRATIONS.iter().filter(|m| m.version <= 4) {
        admin.exec(m.sql);
        admin.exec(&format!(
            "INSERT INTO schema_migrations (version, name) VALUES ({}, '{}')",
            m.version, m.name
        ));
    }
    admin.exec(
        r#"UPDATE leader SET epoch = 3 WHERE id = 1;
           INSERT INTO tombstones (k, v) VALUES
             ('a/1', convert_to('{"author":"a","seq":1,"expires_at":500,"retracted":false}', 'UTF8')),
             ('a/2', convert_to('{"author":"a","seq":2,"expires_at":900,"retracted":true}', 'UTF8')),
             ('b/1', convert_to('{"author":"b","seq":1}', 'UTF8'));
           INSERT INTO accounts (k, v) VALUES ('u', '\x616c696365');"#,
    );
    assert!(
        indexes(&db, "tombstones")
            .iter()
            .all(|i| !i.contains("expires_at"))
    );
    let leader = lead(&db);
    assert_eq!(leader.epoch(), 4);
    assert_eq!(
        admin.int("SELECT max(version) FROM schema_migrations"),
        SCHEMA_VERSION
    );
    assert!(
        indexes(&db, "queue_index")
            .iter()
            .any(|i| i.contains("expires_at")),
        "migration 8 indexes the queues' expiry"
    );
    assert_eq!(
        stored_expiries(&db),
        [
            ("a/1".to_owned(), Some(500)),
            ("a/2".to_owned(), Some(900)),
            ("b/1".to_owned(), None)
        ]
    );
    assert!(indexes(&db, "tombstones").contains(&"tombstones_expires_at".to_owned()));
    let mut store = leader.store().unwrap();
    let mut reader = store.reader().unwrap();
    assert_eq!(reader.next_expiry(Table::Tombstones, 0).unwrap(), Some(500));
    let latest = reader.latest_expiries(Table::Tombstones, 0).unwrap();
    assert_eq!(latest.len(), 1);
    assert_eq!(latest[0].0, "a/2");
    store
        .commit(
            &vec![Mutation::Expire {
                table: Table::Tombstones,
                up_to: 600,
            }]
            .into(),
        )
        .unwrap();
    let snapshot = store.load().unwrap();
    let left: Vec<&String> = snapshot[&Table::Tombstones].keys().collect();
    assert_eq!(left, ["a/2", "b/1"], "the row without expiry never expires");
    assert_eq!(snapshot[&Table::Accounts]["u"], b"alice");
    assert_eq!(reader.next_expiry(Table::Tombstones, 0).unwrap(), Some(900));
}

/// A fresh database's expiring tables have the `expires_at` column and its index; the others
/// have neither.
#[test]
fn a_fresh_database_has_the_expiry_columns_and_indexes() {
    let Some(db) = TestDb::new() else { return };
    let _leader = lead(&db);
    let with_column: Vec<String> = db
        .admin()
        .rows(&format!(
            "SELECT table_name::text FROM information_schema.columns \
             WHERE table_schema = '{}' AND column_name = 'expires_at' ORDER BY 1",
            db.schema
        ))
        .into_iter()
        .map(|row| row[0].clone().unwrap())
        .collect();
    let mut expiring: Vec<&str> = Table::ALL
        .iter()
        .filter(|t| t.has_expiry())
        .map(|t| t.name())
        .collect();
    expiring.sort_unstable();
    assert_eq!(with_column, expiring);
    for table in expiring {
        assert!(
            indexes(&db, table).contains(&format!("{table}_expires_at")),
            "{table}: {:?}",
            indexes(&db, table)
        );
    }
}

/// A table that relay-core knows but no migration created (dropped here) is created by the
/// next leader; an expiring one with its expiry column and index.
#[test]
fn a_missing_expiring_table_is_created_with_its_expiry_column() {
    let Some(db) = TestDb::new() else { return };
    lead(&db).resign();
    db.admin().exec("DROP TABLE tombstones");
    let leader = lead(&db);
    assert!(indexes(&db, "tombstones").contains(&"tombstones_expires_at".to_owned()));
    let mut store = leader.store().unwrap();
    store
        .commit(
            &vec![Mutation::PutExpiring {
                table: Table::Tombstones,
                key: "a/1".into(),
                value: b"t".to_vec(),
                expires_at: 70,
            }]
            .into(),
        )
        .unwrap();
    assert_eq!(stored_expiries(&db), [("a/1".to_owned(), Some(70))]);
}

/// An expiring table without its `expires_at` column (relay-core made a table expiring and no
/// migration adds the column) is refused by the next leader, which names the table.
#[test]
fn an_expiring_table_without_its_column_is_refused() {
    let Some(db) = TestDb::new() else { return };
    lead(&db).resign();
    db.admin()
        .exec("ALTER TABLE tombstones DROP COLUMN expires_at");
    let err =
        relay_pg::campaign_blocking(db.config.clone(), CampaignOptions::default()).unwrap_err();
    assert!(err.to_string().contains("tombstones"), "{err}");
}

/// `load_eager` does not read the lazy tables: it works with them gone, where `load` fails.
#[test]
fn load_eager_does_not_read_the_lazy_tables() {
    let Some(db) = TestDb::new() else { return };
    let leader = lead(&db);
    let mut store = leader.store().unwrap();
    store
        .commit(&vec![put(Table::QueueIndex, "f", b"alice")].into())
        .unwrap();
    for table in Table::ALL.iter().filter(|t| t.is_lazy()) {
        db.admin().exec(&format!("DROP TABLE {}", table.name()));
    }
    let eager = store.load_eager().unwrap();
    assert_eq!(eager[&Table::QueueIndex]["f"], b"alice");
    assert!(store.load().is_err());
}

/// A refused batch (an expiry on a table without one) sends nothing and leaves the store usable.
#[test]
fn a_refused_batch_leaves_the_store_usable() {
    let Some(db) = TestDb::new() else { return };
    let leader = lead(&db);
    let mut store = leader.store().unwrap();
    let err = store
        .commit(
            &vec![
                put(Table::Accounts, "u", b"alice"),
                Mutation::Expire {
                    table: Table::Accounts,
                    up_to: 1,
                },
            ]
            .into(),
        )
        .unwrap_err();
    assert!(err.to_string().contains("accounts"), "{err}");
    store
        .commit(&vec![put(Table::Accounts, "v", b"bob")].into())
        .unwrap();
    let snapshot = store.load().unwrap();
    assert_eq!(snapshot[&Table::Accounts].len(), 1);
    assert_eq!(snapshot[&Table::Accounts]["v"], b"bob");
}

/// A reader whose connection was killed fails that read and reconnects at the next one; it
/// reads committed rows whatever becomes of the store (also once fenced).
#[test]
fn a_reader_reconnects_after_a_failed_read_and_outlives_its_store() {
    let Some(db) = TestDb::new() else { return };
    let leader = lead(&db);
    let mut store = leader.store().unwrap();
    store
        .commit(&vec![put(Table::Accounts, "u", b"alice")].into())
        .unwrap();
    let mut reader = store.reader().unwrap();
    assert_eq!(
        reader.get(Table::Accounts, "u").unwrap().as_deref(),
        Some(&b"alice"[..])
    );
    // The reader's session is the one whose last statement read `pending_confirms`, a table
    // no other test of this binary reads through a reader (they share the database).
    assert_eq!(reader.get(Table::PendingConfirms, "none").unwrap(), None);
    let killed = db.admin().int(
        "SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity \
         WHERE pid <> pg_backend_pid() AND query = 'SELECT v FROM pending_confirms WHERE k = $1'",
    );
    assert_eq!(killed, 1);
    assert!(reader.get(Table::Accounts, "u").is_err());
    assert_eq!(
        reader.get(Table::Accounts, "u").unwrap().as_deref(),
        Some(&b"alice"[..])
    );
    // Another relay took over: the store is fenced, the reader still reads.
    db.admin()
        .exec("UPDATE leader SET epoch = epoch + 1 WHERE id = 1");
    let err = store
        .commit(&vec![put(Table::Accounts, "v", b"bob")].into())
        .unwrap_err();
    assert!(matches!(err, StoreError::Fenced { .. }), "{err:?}");
    drop(store);
    let rows = reader.scan_prefix(Table::Accounts, "").unwrap();
    assert_eq!(rows, [("u".to_owned(), b"alice".to_vec())]);
}
