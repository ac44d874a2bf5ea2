//! A cluster against a real PostgreSQL: nodes join and share the shards, planned handovers and
//! forced ones, a lapsed lease loses every shard, a moved shard's old owner commits nothing,
//! a restarted node is its name's next life, and the mismatches that must not start a node.
//!
//! Needs `RELAY_TEST_POSTGRES_URL` (see `common`); each test skips with a printed reason without it.

#![allow(clippy::unwrap_used, clippy::expect_used)]
// A real server in real time: moves are waited for with the wall clock.
#![allow(clippy::disallowed_methods)]

mod common;

use std::{
    collections::BTreeSet,
    io::Write as _,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use common::TestDb;
use relay_core::store::{Mutation, Store, StoreError, Table};
use relay_pg::{
    CampaignOptions, JoinOptions, LostReason, Member, MemberStatus, PgError, PgStore, ShardTerm,
};

/// Upper bound for anything that should happen "soon" (generous for a loaded CI machine).
const PROMPTLY: Duration = Duration::from_secs(15);

/// Fast timings, so that leases lapse and rounds run within a test's patience.
fn options(node: &str, shards: u16) -> JoinOptions {
    JoinOptions {
        address: format!("127.0.0.1:0/{node}"),
        lease_ms: 1_500,
        heartbeat_interval_ms: 100,
        heartbeat_timeout_ms: 300,
        ..JoinOptions::new(node, shards)
    }
}

fn join(db: &TestDb, options: JoinOptions) -> Member {
    relay_pg::join_blocking(db.config.clone(), options).expect("join")
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < PROMPTLY, "not in time: {what}");
        thread::sleep(Duration::from_millis(20));
    }
}

fn owned(member: &Member) -> BTreeSet<u16> {
    member.watch().shards().into_keys().collect()
}

/// Acts as the shell does: every shard planned to leave is (stopped and) handed over.
fn hand_over_marked(member: &Member) -> usize {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut n = 0;
    for (shard, term) in member.watch().shards() {
        if term.handover_to.is_some() {
            runtime
                .block_on(member.hand_over(shard, term.epoch))
                .unwrap();
            n += 1;
        }
    }
    n
}

fn put(key: &str) -> Mutation {
    Mutation::Put {
        table: Table::Messages,
        key: key.into(),
        value: b"m".to_vec(),
    }
}

fn message_keys(store: &mut PgStore) -> BTreeSet<String> {
    store
        .load()
        .unwrap()
        .remove(&Table::Messages)
        .unwrap_or_default()
        .into_keys()
        .collect()
}

#[test]
fn the_first_node_creates_the_cluster_and_owns_every_shard() {
    let Some(db) = TestDb::new() else { return };
    let a = join(&db, options("a", 6));
    assert_eq!(a.node().incarnation, 1);
    wait_until("a owns the 6 shards", || owned(&a).len() == 6);
    assert!(a.watch().shards().values().all(|t| *t
        == ShardTerm {
            epoch: 1,
            handover_to: None
        }));
    let admin = db.admin();
    assert_eq!(admin.int("SELECT shards FROM cluster"), 6);
    assert_eq!(
        admin.int("SELECT count(*) FROM shards WHERE owner = 'a' AND owner_incarnation = 1"),
        6
    );
    // No active/standby relay can ever serve this schema.
    assert_eq!(admin.int("SELECT epoch FROM leader"), 1);
    let err =
        relay_pg::campaign_blocking(db.config.clone(), CampaignOptions::default()).unwrap_err();
    assert!(matches!(err, PgError::WrongMode(_)), "{err}");
    assert_eq!(
        admin.int("SELECT epoch FROM leader"),
        1,
        "the campaign wrote nothing"
    );
    // Every shard's store commits under its epoch.
    let mut store = a.store(3).unwrap();
    store.commit(&vec![put("k")].into()).unwrap();
    assert!(message_keys(&mut store).contains("k"));
}

#[test]
fn a_joining_node_is_handed_its_share_and_the_old_owner_commits_nothing_there() {
    let Some(db) = TestDb::new() else { return };
    let a = join(&db, options("a", 6));
    wait_until("a owns every shard", || owned(&a).len() == 6);
    let mut before: Vec<(u16, PgStore)> = (0..6).map(|s| (s, a.store(s).unwrap())).collect();
    let b = join(&db, options("b", 6));
    wait_until("three handovers planned", || {
        a.watch()
            .shards()
            .values()
            .filter(|t| t.handover_to.as_deref() == Some("b"))
            .count()
            == 3
    });
    assert!(owned(&b).is_empty(), "nothing is taken from a live owner");
    assert_eq!(hand_over_marked(&a), 3);
    wait_until("b owns its three", || owned(&b).len() == 3);
    assert_eq!(owned(&a).len(), 3);
    assert!(owned(&a).is_disjoint(&owned(&b)));
    for (shard, term) in b.watch().shards() {
        assert_eq!(term.epoch, 2, "shard {shard} moved once");
    }
    // a's stores: those of shards it kept commit, those of shards it gave are fenced, by
    // its own view and by the database.
    for (shard, store) in &mut before {
        let result = store.commit(&vec![put(&format!("a/{shard}"))].into());
        if owned(&a).contains(shard) {
            result.unwrap();
        } else {
            assert!(
                matches!(result, Err(StoreError::Fenced { epoch: 1 })),
                "{result:?}"
            );
            let mut unaware = PgStore::open_shard_fenced(&db.config, *shard, 1).unwrap();
            let err = unaware.commit(&vec![put("stale")].into()).unwrap_err();
            assert!(matches!(err, StoreError::Fenced { epoch: 1 }), "{err:?}");
        }
    }
    let moves = db
        .admin()
        .int("SELECT sum(moves) FROM shards WHERE owner = 'b'");
    assert_eq!(moves, 6, "three first assignments and three moves");
}

#[test]
fn a_handover_the_owner_does_not_do_is_forced_at_its_deadline() {
    let Some(db) = TestDb::new() else { return };
    let slow = JoinOptions {
        handover_deadline_ms: 700,
        ..options("a", 4)
    };
    let a = join(&db, slow);
    wait_until("a owns every shard", || owned(&a).len() == 4);
    let mut kept: Vec<PgStore> = (0..4).map(|s| a.store(s).unwrap()).collect();
    let b = join(
        &db,
        JoinOptions {
            handover_deadline_ms: 700,
            ..options("b", 4)
        },
    );
    // a never hands over (a stuck shell); the coordinator (a, first by name) forces it.
    wait_until("b owns two", || owned(&b).len() == 2);
    wait_until("a sees it lost two", || owned(&a).len() == 2);
    let fenced = kept
        .iter_mut()
        .map(|s| s.commit(&vec![put("late")].into()))
        .filter(Result::is_err)
        .count();
    assert_eq!(fenced, 2);
}

#[test]
fn a_lapsed_lease_loses_every_shard_and_its_commits_are_fenced() {
    let Some(db) = TestDb::new() else { return };
    let a = join(&db, options("a", 4));
    wait_until("a owns every shard", || owned(&a).len() == 4);
    let b = join(&db, options("b", 4));
    assert_eq!(hand_over_marked_until(&a, &b, 2), 2);
    let a_shards = owned(&a);
    let terms = a.watch().shards();
    let mut stores: Vec<PgStore> = a_shards.iter().map(|s| a.store(*s).unwrap()).collect();
    // a's lease lapses as if its process had been paused past it.
    db.admin().exec(
        "UPDATE nodes SET lease_until = clock_timestamp() - interval '1 second' WHERE name = 'a'",
    );
    wait_until("b owns every shard", || owned(&b).len() == 4);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut watch = a.watch();
    let status = runtime.block_on(async {
        tokio::time::timeout(PROMPTLY, async {
            loop {
                if let MemberStatus::Lost(reason) = watch.status() {
                    return reason;
                }
                watch.changed().await;
            }
        })
        .await
        .unwrap()
    });
    assert_eq!(
        status,
        LostReason::LeaseLapsed,
        "a lapsed lease is not renewed"
    );
    for store in &mut stores {
        assert!(store.commit(&vec![put("after")].into()).is_err());
    }
    // And the database refuses a writer that believes it still owns them.
    for (shard, term) in terms {
        let mut unaware = PgStore::open_shard_fenced(&db.config, shard, term.epoch).unwrap();
        assert!(unaware.commit(&vec![put("after")].into()).is_err());
    }
    assert!(!message_keys(&mut b.store(0).unwrap()).contains("after"));
    // Its name comes back as the next incarnation and gets its share again.
    let a2 = join(&db, options("a", 4));
    assert_eq!(a2.node().incarnation, 2);
    assert_eq!(hand_over_marked_until(&b, &a2, 2), 2);
}

/// Hands `from`'s marked shards over until `to` owns `n`; returns how many `to` owns.
fn hand_over_marked_until(from: &Member, to: &Member, n: usize) -> usize {
    wait_until("the handovers are done", || {
        hand_over_marked(from);
        owned(to).len() >= n
    });
    owned(to).len()
}

#[test]
fn acknowledged_commits_survive_a_move_and_nothing_after_it_lands() {
    let Some(db) = TestDb::new() else { return };
    let a = join(&db, options("a", 2));
    wait_until("a owns both shards", || owned(&a).len() == 2);
    let mut store = a.store(1).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let stop = Arc::clone(&stop);
        thread::spawn(move || {
            let mut acked = BTreeSet::new();
            for i in 0.. {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let key = format!("w/{i:06}");
                match store.commit(&vec![put(&key)].into()) {
                    Ok(()) => {
                        acked.insert(key);
                    }
                    Err(StoreError::Fenced { .. }) => break,
                    Err(e) => panic!("{e}"),
                }
            }
            acked
        })
    };
    thread::sleep(Duration::from_millis(200));
    let b = join(&db, options("b", 2));
    hand_over_marked_until(&a, &b, 1);
    assert_eq!(owned(&b), BTreeSet::from([1]));
    thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    let acked = writer.join().unwrap();
    assert!(!acked.is_empty());
    let stored = message_keys(&mut b.store(1).unwrap());
    assert_eq!(
        stored, acked,
        "the new owner sees exactly the acknowledged commits"
    );
}

#[test]
fn leaving_lets_every_shard_go_to_the_others_at_once() {
    let Some(db) = TestDb::new() else { return };
    let a = join(&db, options("a", 4));
    wait_until("a owns every shard", || owned(&a).len() == 4);
    let b = join(&db, options("b", 4));
    hand_over_marked_until(&a, &b, 2);
    // Each node knows who serves every shard, and where.
    wait_until("both directories name both nodes", || {
        [&a, &b].iter().all(|m| {
            let d = m.watch().directory();
            d.len() == 4 && d.values().filter(|o| o.node == "b").count() == 2
        })
    });
    for (shard, o) in a.watch().directory() {
        assert_eq!(o.address, format!("127.0.0.1:0/{}", o.node));
        assert!(owned(if o.node == "a" { &a } else { &b }).contains(&shard));
    }
    let start = Instant::now();
    b.leave();
    wait_until("a owns every shard again", || owned(&a).len() == 4);
    wait_until("a's directory names only a", || {
        a.watch().directory().values().all(|o| o.node == "a")
    });
    // Well before b's lease (1.5 s) would have lapsed.
    assert!(
        start.elapsed() < Duration::from_millis(1_400),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(
        db.admin()
            .int("SELECT count(*) FROM nodes WHERE lease_until > clock_timestamp()"),
        1
    );
}

#[test]
fn a_killed_nodes_name_waits_for_its_lease_then_is_the_next_incarnation() {
    let Some(db) = TestDb::new() else { return };
    let a = join(&db, options("a", 2));
    wait_until("a owns both shards", || owned(&a).len() == 2);
    // Its session ends as a killed process's would (no leave): the lease runs on.
    let pid = a.session_pid();
    db.admin()
        .exec(&format!("SELECT pg_terminate_backend({pid})"));
    wait_until("a knows its membership ended", || {
        matches!(a.watch().status(), MemberStatus::Lost(_))
    });
    let start = Instant::now();
    let again = join(&db, options("a", 2));
    assert_eq!(again.node().incarnation, 2);
    assert!(
        start.elapsed() > Duration::from_millis(500),
        "joined before the old lease lapsed"
    );
    wait_until("the new life owns both shards", || owned(&again).len() == 2);
    assert!(again.watch().shards().values().all(|t| t.epoch == 2));
    drop(a);
}

#[test]
fn a_dead_nodes_shards_are_served_elsewhere_within_its_lease_and_a_second() {
    let Some(db) = TestDb::new() else { return };
    let a = join(&db, options("a", 4));
    wait_until("a owns every shard", || owned(&a).len() == 4);
    let b = join(&db, options("b", 4));
    hand_over_marked_until(&a, &b, 2);
    let b_epochs = b.watch().shards();
    // b dies as a killed process does: its session ends, nothing is released, its lease
    // runs out on the database's clock.
    let pid = b.session_pid();
    let died = Instant::now();
    db.admin()
        .exec(&format!("SELECT pg_terminate_backend({pid})"));
    wait_until("a owns every shard again", || owned(&a).len() == 4);
    let took = died.elapsed();
    let _ = writeln!(
        std::io::stderr(),
        "a dead node's shards owned elsewhere after {took:?} (lease 1.5 s)"
    );
    assert!(took < Duration::from_millis(1_500 + 1_000), "{took:?}");
    // Each of b's shards moved on to its next epoch.
    let terms = a.watch().shards();
    for (shard, term) in b_epochs {
        assert_eq!(terms[&shard].epoch, term.epoch + 1);
    }
    drop(b);
}

#[test]
fn a_node_with_another_shard_count_or_on_an_active_standby_schema_is_refused() {
    let Some(db) = TestDb::new() else { return };
    let a = join(&db, options("a", 4));
    let err = relay_pg::join_blocking(db.config.clone(), options("b", 5)).unwrap_err();
    assert!(
        matches!(
            err,
            PgError::ShardsDiffer {
                recorded: 4,
                ours: 5
            }
        ),
        "{err}"
    );
    assert_eq!(
        db.admin().int("SELECT count(*) FROM nodes"),
        1,
        "b wrote nothing"
    );
    drop(a);

    let Some(other) = TestDb::new() else { return };
    let leader =
        relay_pg::campaign_blocking(other.config.clone(), CampaignOptions::default()).unwrap();
    let err = relay_pg::join_blocking(other.config.clone(), options("a", 4)).unwrap_err();
    assert!(matches!(err, PgError::WrongMode(_)), "{err}");
    assert_eq!(other.admin().int("SELECT count(*) FROM cluster"), 0);
    drop(leader);
}

#[test]
fn options_the_cluster_cannot_work_with_are_refused_before_connecting() {
    let tight = JoinOptions {
        lease_ms: 1_000,
        heartbeat_interval_ms: 300,
        heartbeat_timeout_ms: 300,
        ..JoinOptions::new("a", 4)
    };
    for bad in [
        JoinOptions::new("", 4),
        JoinOptions::new("a b", 4),
        JoinOptions::new("a".repeat(65), 4),
        JoinOptions::new("a", 0),
        JoinOptions::new("a", relay_pg::MAX_CLUSTER_SHARDS + 1),
        tight,
    ] {
        assert!(matches!(bad.validate(), Err(PgError::Config(_))), "{bad:?}");
    }
    JoinOptions::new("node-1.eu_west", 4).validate().unwrap();
}
