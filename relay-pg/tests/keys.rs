//! Key fingerprints against a real PostgreSQL: the first leader records them; a leader with the
//! same keys leads; one with another key refuses to lead, writes nothing (no epoch taken) and
//! releases the lock to the next candidate; a rotation replaces the recorded key; a relay
//! without a kind of key (no Web Push) is not blocked by its record; a version-2 database
//! migrates and records.
//!
//! Needs `RELAY_TEST_POSTGRES_URL` (see `common`); each test skips with a printed reason without it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{collections::BTreeMap, sync::mpsc, thread, time::Duration};

use common::{TestDb, logged};
use relay_pg::{
    CampaignOptions, KeyClaim, KeyFingerprint, KeyKind, Leader, MIGRATIONS, PgError,
    SCHEMA_VERSION, SHORT_FINGERPRINT_HEX,
};

/// Bound of a wait that should end at once (generous for a loaded CI machine).
const PROMPTLY: Duration = Duration::from_secs(10);

const JWT_A: KeyFingerprint = KeyFingerprint::from_bytes([0xa1; 32]);
const JWT_B: KeyFingerprint = KeyFingerprint::from_bytes([0xb2; 32]);
const VAPID_A: KeyFingerprint = KeyFingerprint::from_bytes([0xc3; 32]);
const VAPID_B: KeyFingerprint = KeyFingerprint::from_bytes([0xd4; 32]);

fn options(holder: &str, keys: &[(KeyKind, KeyClaim)]) -> CampaignOptions {
    CampaignOptions {
        holder: holder.into(),
        keys: keys.iter().copied().collect(),
        ..CampaignOptions::default()
    }
}

fn campaign(db: &TestDb, holder: &str, keys: &[(KeyKind, KeyClaim)]) -> Result<Leader, PgError> {
    relay_pg::campaign_blocking(db.config.clone(), options(holder, keys))
}

/// `holder` leads with `keys`, then resigns at once.
fn lead_and_resign(db: &TestDb, holder: &str, keys: &[(KeyKind, KeyClaim)]) {
    campaign(db, holder, keys).unwrap().resign();
}

fn both(jwt: KeyClaim, vapid: KeyClaim) -> [(KeyKind, KeyClaim); 2] {
    [(KeyKind::Jwt, jwt), (KeyKind::Vapid, vapid)]
}

/// `kind -> (fingerprint hex, holder, epoch)` as recorded.
fn recorded(db: &TestDb) -> BTreeMap<String, (String, String, i64)> {
    db.admin()
        .rows("SELECT kind, encode(fingerprint, 'hex'), holder, epoch FROM key_fingerprints")
        .into_iter()
        .map(|r| {
            let col = |i: usize| r[i].clone().unwrap();
            (col(0), (col(1), col(2), col(3).parse().unwrap()))
        })
        .collect()
}

fn hex(fp: KeyFingerprint) -> String {
    fp.as_bytes().iter().map(|b| format!("{b:02x}")).collect()
}

fn epoch(db: &TestDb) -> i64 {
    db.admin().int("SELECT epoch FROM leader WHERE id = 1")
}

#[test]
fn the_first_leader_records_its_fingerprints_and_the_same_keys_lead_again() {
    let Some(db) = TestDb::new() else { return };
    let first = campaign(
        &db,
        "relay one",
        &both(KeyClaim::new(JWT_A), KeyClaim::new(VAPID_A)),
    )
    .unwrap();
    let rows = recorded(&db);
    assert_eq!(
        rows,
        BTreeMap::from([
            ("jwt".into(), (hex(JWT_A), "relay one".into(), 1)),
            ("vapid".into(), (hex(VAPID_A), "relay one".into(), 1)),
        ])
    );
    first.resign();
    let second = campaign(
        &db,
        "relay two",
        &both(KeyClaim::new(JWT_A), KeyClaim::new(VAPID_A)),
    )
    .unwrap();
    assert_eq!(second.epoch(), 2);
    // Equal fingerprints are left as recorded (who recorded them first stays visible).
    assert_eq!(recorded(&db), rows);
}

#[test]
fn a_leader_with_another_jwt_key_refuses_to_lead_writes_nothing_and_frees_the_lock() {
    let Some(db) = TestDb::new() else { return };
    lead_and_resign(
        &db,
        "relay one",
        &both(KeyClaim::new(JWT_A), KeyClaim::new(VAPID_A)),
    );
    let before = recorded(&db);
    let epoch_before = epoch(&db);

    let err = campaign(
        &db,
        "relay two",
        &both(KeyClaim::new(JWT_B), KeyClaim::new(VAPID_A)),
    )
    .unwrap_err();
    let PgError::KeysDiffer(mismatches) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(mismatches.len(), 1, "{err}");
    let m = &mismatches[0];
    assert_eq!(
        (
            m.kind,
            m.ours,
            m.recorded,
            m.recorded_by.as_str(),
            m.recorded_epoch
        ),
        (KeyKind::Jwt, JWT_B, JWT_A, "relay one", 1)
    );
    let text = err.to_string();
    for part in ["jwt", &JWT_B.short_hex(), &JWT_A.short_hex(), "relay one"] {
        assert!(text.contains(part), "{part}: {text}");
    }
    // Short prefixes only, in the text and in Debug.
    for shown in [text, format!("{err:?}")] {
        for fp in [JWT_A, JWT_B] {
            assert!(!shown.contains(&hex(fp)[..16]), "{shown}");
        }
    }
    // Nothing written: no epoch taken, the record unchanged …
    assert_eq!(epoch(&db), epoch_before);
    assert_eq!(recorded(&db), before);
    // … and the lock is free: a relay with the right keys leads at once.
    let (tx, rx) = mpsc::channel();
    let config = db.config.clone();
    thread::spawn(move || {
        let _ = tx.send(relay_pg::campaign_blocking(
            config,
            options(
                "relay three",
                &both(KeyClaim::new(JWT_A), KeyClaim::new(VAPID_A)),
            ),
        ));
    });
    let leader = rx.recv_timeout(PROMPTLY).expect("led at once").unwrap();
    assert_eq!(i64::try_from(leader.epoch()).unwrap(), epoch_before + 1);
}

#[test]
fn every_differing_key_is_reported_at_once() {
    let Some(db) = TestDb::new() else { return };
    lead_and_resign(
        &db,
        "relay one",
        &both(KeyClaim::new(JWT_A), KeyClaim::new(VAPID_A)),
    );
    let err = campaign(
        &db,
        "relay two",
        &both(KeyClaim::new(JWT_B), KeyClaim::new(VAPID_B)),
    )
    .unwrap_err();
    let PgError::KeysDiffer(mismatches) = &err else {
        panic!("{err:?}")
    };
    let kinds: Vec<KeyKind> = mismatches.iter().map(|m| m.kind).collect();
    assert_eq!(kinds, [KeyKind::Jwt, KeyKind::Vapid], "{err}");
}

#[test]
fn a_standby_with_another_key_warns_at_once_and_fails_only_once_it_would_lead() {
    let Some(db) = TestDb::new() else { return };
    common::capture_logs();
    const JWT_E: KeyFingerprint = KeyFingerprint::from_bytes([0xe5; 32]);
    let leader = campaign(&db, "relay one", &[(KeyKind::Jwt, KeyClaim::new(JWT_E))]).unwrap();
    let (tx, rx) = mpsc::channel();
    let config = db.config.clone();
    thread::spawn(move || {
        let _ = tx.send(relay_pg::campaign_blocking(
            config,
            options("relay two", &[(KeyKind::Jwt, KeyClaim::new(JWT_B))]),
        ));
    });
    // It stands by (it does not fail while another relay leads), saying at once that it would
    // refuse to lead …
    assert!(rx.recv_timeout(Duration::from_millis(1_500)).is_err());
    assert!(leader.is_leading());
    let warned = logged().lines().any(|l| {
        l.contains("refuse to lead")
            && l.contains(&JWT_E.short_hex())
            && l.contains(&JWT_B.short_hex())
    });
    assert!(warned, "no early warning:\n{}", logged());
    // … and fails when it wins the lock.
    leader.resign();
    let err = rx
        .recv_timeout(PROMPTLY)
        .expect("campaign ended")
        .unwrap_err();
    assert!(matches!(err, PgError::KeysDiffer(_)), "{err:?}");
    assert_eq!(epoch(&db), 1);
    // The logs show fingerprints as short prefixes only.
    let logs = logged();
    for fp in [JWT_E, JWT_B] {
        assert!(logs.contains(&fp.short_hex()), "{logs}");
        assert!(
            !logs.contains(&hex(fp)[..SHORT_FINGERPRINT_HEX + 2]),
            "{logs}"
        );
    }
}

#[test]
fn a_rotation_replaces_the_recorded_key_and_the_old_key_is_then_refused() {
    let Some(db) = TestDb::new() else { return };
    lead_and_resign(
        &db,
        "old",
        &both(KeyClaim::new(JWT_A), KeyClaim::new(VAPID_A)),
    );
    lead_and_resign(
        &db,
        "rotating",
        &both(KeyClaim::replacing(JWT_B), KeyClaim::new(VAPID_A)),
    );
    let rows = recorded(&db);
    assert_eq!(rows["jwt"], (hex(JWT_B), "rotating".into(), 2));
    assert_eq!(rows["vapid"], (hex(VAPID_A), "old".into(), 1));
    let err = campaign(
        &db,
        "old",
        &both(KeyClaim::new(JWT_A), KeyClaim::new(VAPID_A)),
    )
    .unwrap_err();
    assert!(
        matches!(&err, PgError::KeysDiffer(m) if m.len() == 1 && m[0].kind == KeyKind::Jwt),
        "{err:?}"
    );
    // A relay given the new key file leads.
    campaign(
        &db,
        "copied",
        &both(KeyClaim::new(JWT_B), KeyClaim::new(VAPID_A)),
    )
    .unwrap();
}

#[test]
fn a_vapid_rotation_replaces_only_the_vapid_record() {
    let Some(db) = TestDb::new() else { return };
    lead_and_resign(
        &db,
        "old",
        &both(KeyClaim::new(JWT_A), KeyClaim::new(VAPID_A)),
    );
    lead_and_resign(
        &db,
        "rotating",
        &both(KeyClaim::new(JWT_A), KeyClaim::replacing(VAPID_B)),
    );
    let rows = recorded(&db);
    assert_eq!(rows["vapid"], (hex(VAPID_B), "rotating".into(), 2));
    assert_eq!(rows["jwt"], (hex(JWT_A), "old".into(), 1));
}

#[test]
fn a_relay_without_a_vapid_key_leads_and_leaves_the_vapid_record_alone() {
    let Some(db) = TestDb::new() else { return };
    lead_and_resign(
        &db,
        "web push",
        &both(KeyClaim::new(JWT_A), KeyClaim::new(VAPID_A)),
    );
    let leader = campaign(&db, "no web push", &[(KeyKind::Jwt, KeyClaim::new(JWT_A))]).unwrap();
    assert_eq!(leader.epoch(), 2);
    assert_eq!(recorded(&db)["vapid"], (hex(VAPID_A), "web push".into(), 1));
    leader.resign();
    // Nothing claimed at all (relay-pg's default): nothing checked, nothing written.
    lead_and_resign(&db, "no keys", &[]);
    assert_eq!(recorded(&db).len(), 2);
    // A relay that only has the VAPID key (recorded first by a relay without one) records it.
    let db2 = TestDb::new().unwrap();
    lead_and_resign(&db2, "jwt only", &[(KeyKind::Jwt, KeyClaim::new(JWT_A))]);
    assert_eq!(recorded(&db2).len(), 1);
    campaign(
        &db2,
        "both",
        &both(KeyClaim::new(JWT_A), KeyClaim::new(VAPID_B)),
    )
    .unwrap();
    assert_eq!(recorded(&db2)["vapid"], (hex(VAPID_B), "both".into(), 2));
}

#[test]
fn a_version_2_database_is_migrated_then_its_keys_recorded() {
    let Some(db) = TestDb::new() else { return };
    let admin = db.admin();
    // A version-2 database as the previous build left it, led up to epoch 5.
    admin.exec(&format!(
        "CREATE SCHEMA {s};
         CREATE TABLE {s}.schema_migrations (version BIGINT PRIMARY KEY, name TEXT NOT NULL,
             applied_at TIMESTAMPTZ NOT NULL DEFAULT now());",
        s = db.schema
    ));
    for m in &MIGRATIONS[..2] {
        admin.exec(m.sql);
        admin.exec(&format!(
            "INSERT INTO schema_migrations (version, name) VALUES ({}, '{}')",
            m.version, m.name
        ));
    }
    admin.exec("UPDATE leader SET epoch = 5 WHERE id = 1");
    let leader = campaign(&db, "upgraded", &[(KeyKind::Jwt, KeyClaim::new(JWT_A))]).unwrap();
    assert_eq!(leader.epoch(), 6);
    assert_eq!(
        admin.int("SELECT max(version) FROM schema_migrations"),
        SCHEMA_VERSION
    );
    assert_eq!(
        recorded(&db),
        BTreeMap::from([("jwt".into(), (hex(JWT_A), "upgraded".into(), 6))])
    );
}
