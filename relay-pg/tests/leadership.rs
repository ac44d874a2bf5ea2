//! Leadership and fencing against a real PostgreSQL: one leader at a time, a standby takes over
//! when the lock session ends, and a superseded leader never commits again — whether it knows
//! it lost (local status) or not (the database's fence).
//!
//! Needs `RELAY_TEST_POSTGRES_URL` (see `common`); each test skips with a printed reason without it.

#![allow(clippy::unwrap_used, clippy::expect_used)]
// A real server in real time: takeovers are waited for and timed with the wall clock.
#![allow(clippy::disallowed_methods)]

mod common;

use std::{
    collections::BTreeSet,
    io::Write as _,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
        mpsc,
    },
    thread,
    time::{Duration, Instant},
};

use common::TestDb;
use relay_core::store::{Mutation, Store, StoreError, Table};
use relay_pg::{
    CampaignOptions, LEADER_LOCK_CLASS, Leader, LeaderStatus, LostReason, PgError, PgStore,
};

/// Upper bound for anything that should happen "at once" (generous for a loaded CI machine).
const PROMPTLY: Duration = Duration::from_secs(10);

fn lead(db: &TestDb) -> Leader {
    relay_pg::campaign_blocking(db.config.clone(), CampaignOptions::default()).expect("campaign")
}

/// Campaigns on another thread; the receiver yields the leader and when it was elected.
fn standby(db: &TestDb) -> mpsc::Receiver<(Leader, Instant)> {
    let (tx, rx) = mpsc::channel();
    let config = db.config.clone();
    thread::spawn(move || {
        let leader = relay_pg::campaign_blocking(config, CampaignOptions::default());
        let _ = tx.send((leader.expect("standby campaign"), Instant::now()));
    });
    rx
}

fn put(key: &str) -> Mutation {
    Mutation::Put {
        table: Table::Messages,
        key: key.into(),
        value: b"m".to_vec(),
    }
}

fn keys(store: &mut PgStore) -> BTreeSet<String> {
    store
        .load()
        .unwrap()
        .remove(&Table::Messages)
        .unwrap_or_default()
        .into_keys()
        .collect()
}

fn terminate_lock_session(db: &TestDb, leader: &Leader) {
    let pid = leader.lock_backend_pid();
    assert_eq!(
        db.admin()
            .rows(&format!("SELECT pg_terminate_backend({pid})"))[0][0]
            .as_deref(),
        Some("t")
    );
}

/// Waits (on a private runtime) for `leader` to learn it lost.
fn wait_lost(leader: &Leader) -> LostReason {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime
        .block_on(async { tokio::time::timeout(PROMPTLY, leader.lost()).await })
        .expect("leadership loss noticed in time")
}

fn note(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

#[test]
fn a_standby_waits_then_leads_when_the_leader_resigns() {
    let Some(db) = TestDb::new() else { return };
    let first = lead(&db);
    let second = standby(&db);
    assert!(
        second.recv_timeout(Duration::from_millis(1_500)).is_err(),
        "a second leader while the first one leads"
    );
    let resigned_at = Instant::now();
    first.resign();
    let (second, elected_at) = second.recv_timeout(PROMPTLY).expect("standby took over");
    note(&format!(
        "takeover after resign: {:?}",
        elected_at.duration_since(resigned_at)
    ));
    assert_eq!(second.epoch(), 2);
    assert!(second.is_leading());
    assert_eq!(
        db.admin()
            .int("SELECT backend_pid FROM leader WHERE id = 1"),
        i64::from(second.lock_backend_pid())
    );
}

#[test]
fn an_old_leaders_commit_after_a_takeover_fails_and_commits_nothing() {
    let Some(db) = TestDb::new() else { return };
    let old = lead(&db);
    let old_epoch = old.epoch();
    // Two views of the old leadership: its own store (knows the leader's status) and a store
    // that only has the epoch (like a paused process that has not noticed anything yet: only
    // the database can stop it).
    let mut own = old.store().unwrap();
    let mut unaware = PgStore::open_fenced(&db.config, old_epoch).unwrap();
    own.commit(&vec![put("before/own")].into()).unwrap();
    unaware.commit(&vec![put("before/unaware")].into()).unwrap();

    old.resign();
    let new = lead(&db);
    assert_eq!(new.epoch(), old_epoch + 1);

    for (name, store) in [("own", &mut own), ("unaware", &mut unaware)] {
        let err = store
            .commit(&vec![put(&format!("after/{name}"))].into())
            .unwrap_err();
        assert!(
            matches!(err, StoreError::Fenced { epoch } if epoch == old_epoch),
            "{name}: {err:?}"
        );
        // And it stays fenced (no retry can get through).
        assert!(matches!(
            store.commit(&vec![put("again")].into()),
            Err(StoreError::Fenced { .. })
        ));
        assert!(matches!(store.load(), Err(StoreError::Fenced { .. })));
    }
    // A store of an epoch nobody holds yet cannot write either.
    let mut early = PgStore::open_fenced(&db.config, new.epoch() + 1).unwrap();
    assert!(matches!(
        early.commit(&vec![put("future")].into()),
        Err(StoreError::Fenced { .. })
    ));

    let seen = keys(&mut new.store().unwrap());
    let expected: BTreeSet<String> = ["before/own", "before/unaware"].map(String::from).into();
    assert_eq!(seen, expected);
}

#[test]
fn a_leader_whose_lock_session_is_killed_learns_it_and_a_standby_takes_over() {
    let Some(db) = TestDb::new() else { return };
    let old = lead(&db);
    let mut store = old.store().unwrap();
    store.commit(&vec![put("kept")].into()).unwrap();
    let next = standby(&db);
    thread::sleep(Duration::from_millis(300));

    let killed_at = Instant::now();
    terminate_lock_session(&db, &old);
    let reason = wait_lost(&old);
    assert!(matches!(reason, LostReason::SessionEnded(_)), "{reason:?}");
    let (new, elected_at) = next.recv_timeout(PROMPTLY).expect("standby took over");
    note(&format!(
        "takeover after pg_terminate_backend: {:?} (old leader knew after {:?})",
        elected_at.duration_since(killed_at),
        killed_at.elapsed()
    ));
    assert!(matches!(old.watch().status(), LeaderStatus::Lost(_)));
    assert!(!old.is_leading());
    assert!(matches!(old.store(), Err(PgError::Fenced { .. })));
    assert!(matches!(
        store.commit(&vec![put("lost")].into()),
        Err(StoreError::Fenced { .. })
    ));
    assert_eq!(
        keys(&mut new.store().unwrap()),
        BTreeSet::from(["kept".to_owned()])
    );
}

#[test]
fn a_leader_notices_when_the_epoch_moves_under_it() {
    let Some(db) = TestDb::new() else { return };
    let leader = lead(&db);
    db.admin()
        .exec("UPDATE leader SET epoch = epoch + 1 WHERE id = 1");
    assert_eq!(
        wait_lost(&leader),
        LostReason::Superseded {
            epoch: leader.epoch() + 1
        }
    );
}

/// Commits unique keys until fenced; returns the acknowledged ones and the error that stopped it.
fn write_until_fenced(
    mut store: PgStore,
    prefix: &'static str,
    acked: Arc<AtomicUsize>,
) -> thread::JoinHandle<(BTreeSet<String>, StoreError)> {
    thread::spawn(move || {
        let mut ok = BTreeSet::new();
        let deadline = Instant::now() + 6 * PROMPTLY;
        for i in 0_u64.. {
            assert!(Instant::now() < deadline, "{prefix}: never fenced");
            let key = format!("{prefix}/{i:07}");
            match store.commit(&vec![put(&key)].into()) {
                Ok(()) => {
                    ok.insert(key);
                    acked.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => return (ok, e),
            }
        }
        unreachable!()
    })
}

#[test]
fn commits_racing_a_takeover_are_either_seen_by_the_new_leader_or_refused() {
    let Some(db) = TestDb::new() else { return };
    let old = lead(&db);
    let acked = Arc::new(AtomicUsize::new(0));
    // Both writers run flat out while the leadership changes hands under them.
    let own = write_until_fenced(old.store().unwrap(), "own", Arc::clone(&acked));
    let unaware = write_until_fenced(
        PgStore::open_fenced(&db.config, old.epoch()).unwrap(),
        "unaware",
        Arc::clone(&acked),
    );
    while acked.load(Ordering::Relaxed) < 200 {
        thread::sleep(Duration::from_millis(5));
    }
    terminate_lock_session(&db, &old);
    let new = lead(&db);
    let mut new_store = new.store().unwrap();
    let seen_at_takeover = keys(&mut new_store);

    let mut acknowledged = BTreeSet::new();
    for writer in [own, unaware] {
        let (ok, stopped_by) = writer.join().unwrap();
        assert!(
            matches!(stopped_by, StoreError::Fenced { .. }),
            "{stopped_by:?}"
        );
        assert!(!ok.is_empty());
        acknowledged.extend(ok);
    }
    note(&format!(
        "{} commits acknowledged before the takeover",
        acknowledged.len()
    ));
    // Every acknowledged commit is in the new leader's state, and nothing else is …
    assert_eq!(seen_at_takeover, acknowledged);
    // … and nothing reached the database after the new leader loaded.
    assert_eq!(keys(&mut new_store), acknowledged);
}

#[test]
fn dropping_a_campaign_abandons_it() {
    let Some(db) = TestDb::new() else { return };
    let leader = lead(&db);
    let admin = db.admin();
    let oid = admin.int(&format!(
        "SELECT oid::bigint FROM pg_namespace WHERE nspname = '{}'",
        db.schema
    ));
    let waiting = || {
        admin.int(&format!(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
             AND classid = {LEADER_LOCK_CLASS} AND objid = {oid}"
        ))
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let config = db.config.clone();
    let candidate = thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            tokio::select! {
                _ = relay_pg::campaign(config, CampaignOptions::default()) => panic!("a second leader"),
                _ = stopped => {}
            }
        });
    });
    let deadline = Instant::now() + PROMPTLY;
    while waiting() == 0 {
        assert!(
            Instant::now() < deadline,
            "the candidate never waited for the lock"
        );
        thread::sleep(Duration::from_millis(20));
    }
    stop.send(()).unwrap();
    candidate.join().unwrap();
    // The abandoned candidate's session is gone: nobody waits for the lock any more (sampled
    // across more than one lock-wait slice).
    let deadline = Instant::now() + PROMPTLY;
    let mut quiet_samples = 0;
    while quiet_samples < 8 {
        assert!(Instant::now() < deadline, "a candidate still waits");
        quiet_samples = if waiting() == 0 { quiet_samples + 1 } else { 0 };
        thread::sleep(Duration::from_millis(200));
    }
    assert!(leader.is_leading());
}
