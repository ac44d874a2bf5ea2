//! The database password never appears in `Debug`/`Display` output, errors or logs: from the URL,
//! from a password file, from the API, with a wrong password, and through a whole leadership.
//!
//! The tests that need a server skip with a printed reason without `RELAY_TEST_POSTGRES_URL`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write as _;

use common::TestDb;
use relay_core::store::{Mutation, Store, StoreError, Table};
use relay_pg::{CampaignOptions, PgConfig, PgError, PgStore};

const SECRET: &str = "hunter2-Sup3r-s3cret";

fn assert_hidden(what: &str, text: &str, secret: &str) {
    assert!(!text.contains(secret), "{what} shows the password: {text}");
}

fn assert_logs_hide(secret: &str) {
    assert_hidden("the logs", &common::logged(), secret);
}

#[test]
fn config_debug_and_display_hide_the_password() {
    let config = PgConfig::from_url(&format!(
        "postgresql://relay:{SECRET}@db.internal:5433/chat"
    ))
    .unwrap();
    for text in [
        format!("{config:?}"),
        format!("{config:#?}"),
        config.to_string(),
    ] {
        assert_hidden("a config", &text, SECRET);
        assert!(text.contains("relay@db.internal:5433/chat"), "{text}");
    }
    assert!(config.has_password());
    let api = config.with_password("from-the-api-XYZZY");
    assert_hidden("a config", &format!("{api:?} {api}"), "XYZZY");
    let kv = PgConfig::from_url(&format!(
        "host=/run/postgresql user=relay password={SECRET}"
    ))
    .unwrap();
    assert_hidden("a config", &format!("{kv:?} {kv}"), SECRET);
}

#[test]
fn a_password_file_is_read_but_never_shown() {
    let dir = std::env::temp_dir().join(format!("relay-pg-secrets-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("password");
    std::fs::write(&file, format!("{SECRET}\n")).unwrap();
    let config = PgConfig::from_url("postgresql://relay@127.0.0.1/chat")
        .unwrap()
        .with_password_file(&file)
        .unwrap();
    assert!(config.has_password());
    assert_hidden("a config", &format!("{config:?} {config}"), SECRET);
    let missing = PgConfig::from_url("postgresql://relay@127.0.0.1/chat")
        .unwrap()
        .with_password_file(&dir.join("absent"))
        .unwrap_err();
    assert!(missing.to_string().contains("absent"), "{missing}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn url_errors_do_not_repeat_the_url() {
    for url in [
        format!("postgresql://relay:{SECRET}@db:notaport/chat"),
        format!("postgresql://relay:{SECRET}@db/chat?sslmode=require"),
        format!("postgresql://relay:{SECRET}@db/chat?bogus_option=1"),
        format!("host=db password='{SECRET}"),
        format!("postgresql://relay:{SECRET}@db/chat?connect_timeout=x"),
    ] {
        let err = PgConfig::from_url(&url).unwrap_err();
        assert!(matches!(err, PgError::Config(_)), "{err:?}");
        assert_hidden("an error", &format!("{err} {err:?}"), SECRET);
    }
}

#[test]
fn connection_errors_hide_the_password() {
    common::capture_logs();
    // Nothing listens on port 1.
    let config =
        PgConfig::from_url(&format!("postgresql://relay:{SECRET}@127.0.0.1:1/chat")).unwrap();
    let err = relay_pg::campaign_blocking(config.clone(), CampaignOptions::default()).unwrap_err();
    assert!(matches!(err, PgError::Backend(_)), "{err:?}");
    assert_hidden("an error", &format!("{err} {err:?}"), SECRET);
    let err = PgStore::open_fenced(&config, 1).unwrap_err();
    assert_hidden("an error", &format!("{err} {err:?}"), SECRET);
    let as_store_error = StoreError::from(err);
    assert_hidden(
        "an error",
        &format!("{as_store_error} {as_store_error:?}"),
        SECRET,
    );
    assert_logs_hide(SECRET);
}

#[test]
fn a_wrong_password_is_an_authentication_error_without_the_password() {
    let Some(db) = TestDb::new() else { return };
    common::capture_logs();
    let wrong = db.config.clone().with_password(SECRET);
    let err = relay_pg::campaign_blocking(wrong, CampaignOptions::default()).unwrap_err();
    let text = format!("{err} {err:?}");
    assert_hidden("an error", &text, SECRET);
    // 28P01: invalid_password (the test cluster uses SCRAM on TCP).
    assert!(
        text.contains("28P01") || text.contains("authentication"),
        "{text}"
    );
    assert_logs_hide(SECRET);
}

#[test]
fn a_whole_leadership_never_logs_or_shows_the_real_password() {
    let Some(db) = TestDb::new() else { return };
    common::capture_logs();
    let real = common::url()
        .and_then(|url| {
            PgConfig::from_url(&url).ok()?;
            // The password of the test URL (postgresql://user:password@…), if it has one.
            let rest = url.split_once("://")?.1;
            let userinfo = rest.split_once('@')?.0;
            Some(userinfo.split_once(':')?.1.to_owned())
        })
        .filter(|p| !p.is_empty());
    let Some(real) = real else {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED a_whole_leadership_never_logs_or_shows_the_real_password: the test URL has no password"
        );
        return;
    };
    let leader =
        relay_pg::campaign_blocking(db.config.clone(), CampaignOptions::default()).unwrap();
    let mut store = leader.store().unwrap();
    store
        .commit(
            &vec![Mutation::Put {
                table: Table::Meta,
                key: "k".into(),
                value: b"v".to_vec(),
            }]
            .into(),
        )
        .unwrap();
    store.load().unwrap();
    let mut reader = store.reader().unwrap();
    assert_eq!(
        reader.get(Table::Meta, "k").unwrap().as_deref(),
        Some(&b"v"[..])
    );
    // PostgreSQL text cannot hold NUL: the server refuses the read, which is logged.
    let err = reader.get(Table::Meta, "bad\0key").unwrap_err();
    assert_hidden("an error", &format!("{err} {err:?}"), &real);
    let shown = format!(
        "{:?} {:?} {:?} {:?} {}",
        db.config, leader, store, reader, db.config
    );
    assert_hidden("Debug output", &shown, &real);
    db.admin()
        .exec("UPDATE leader SET epoch = epoch + 1 WHERE id = 1");
    let err = store
        .commit(
            &vec![Mutation::Delete {
                table: Table::Meta,
                key: "k".into(),
            }]
            .into(),
        )
        .unwrap_err();
    assert_hidden("an error", &format!("{err} {err:?}"), &real);
    drop(store);
    leader.resign();
    assert_logs_hide(&real);
}
