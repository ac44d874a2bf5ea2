//! Group commit (`Relay::begin_batch` / `commit_batch`): nothing of a batch leaves before its
//! one commit; a failed batch acknowledges nothing and loses nothing acknowledged before it;
//! and any grouping of inputs into batches gives exactly the outputs and the stored rows of
//! handling them one by one (proptest).

use std::sync::{Arc, Mutex};
use wire::http::paths;

use proptest::prelude::*;
use relay_core::store::{Batch, MemoryStore, Snapshot, Store, StoreError, StoreRead};
use relay_core::{CloseReason, ConnId, Output};
use serde_json::json;
use wire::ServerFrame;

use crate::world::{User, World, b64, fast_config, frames};

/// A [`MemoryStore`] that counts commits.
#[derive(Debug, Clone)]
struct Counting {
    inner: MemoryStore,
    commits: Arc<Mutex<usize>>,
}

impl Store for Counting {
    fn load(&mut self) -> Result<Snapshot, StoreError> {
        self.inner.load()
    }
    fn commit(&mut self, batch: &Batch) -> Result<(), StoreError> {
        *self.commits.lock().unwrap() += 1;
        self.inner.commit(batch)
    }
    fn reader(&mut self) -> Result<Box<dyn StoreRead>, StoreError> {
        self.inner.reader()
    }
}

/// Two contacts, both connected and synced; the conversation id.
fn pair(w: &mut World) -> (User, User, String) {
    let mut a = w.user("a");
    let mut b = w.user("b");
    let conv = w.befriend(&a, &b);
    let ca = w.connect(&mut a);
    let cb = w.connect(&mut b);
    w.sync(ca);
    w.sync(cb);
    (a, b, conv)
}

fn msg_text(to: &User, conv: &str, id: &str) -> String {
    json!({"type":"msg","id":id,"to":to.alias,"conv_id":conv,"crypto_v":1,
        "payload":b64(format!("p-{id}").as_bytes())})
    .to_string()
}

#[test]
fn a_batch_releases_nothing_before_its_one_commit() {
    let mut w = World::new();
    let (a, b, conv) = pair(&mut w);
    let commits = Arc::new(Mutex::new(0));
    let store = Counting {
        inner: w.mem.clone(),
        commits: Arc::clone(&commits),
    };
    w.restart(Box::new(store));
    let (mut a, mut b) = (a, b);
    let ca = w.connect(&mut a);
    let cb = w.connect(&mut b);
    w.sync(ca);
    w.sync(cb);
    let before = *commits.lock().unwrap();

    w.relay.begin_batch();
    assert!(w.relay.in_batch());
    for i in 0..5 {
        w.relay
            .handle_text(w.now, ca, &msg_text(&b, &conv, &format!("g{i}")));
    }
    assert!(
        w.relay.poll_output().is_none(),
        "an output left before the commit"
    );
    assert_eq!(
        *commits.lock().unwrap(),
        before,
        "committed before the batch ended"
    );
    w.relay.commit_batch().unwrap();
    assert_eq!(
        *commits.lock().unwrap(),
        before + 1,
        "one commit for the batch"
    );
    let outs = w.drain();
    let acks: Vec<String> = frames(&outs, ca)
        .into_iter()
        .filter_map(|f| match f {
            ServerFrame::Ack(a) => Some(a.id.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(acks, ["g0", "g1", "g2", "g3", "g4"], "acks in input order");
    let seqs: Vec<u64> = frames(&outs, cb)
        .into_iter()
        .filter_map(|f| match f {
            ServerFrame::Msg(m) => Some(m.seq.get()),
            _ => None,
        })
        .collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5]);
    assert!(!w.relay.in_batch());
}

#[test]
fn a_failed_batch_acknowledges_nothing_and_keeps_what_was_acknowledged() {
    let mut w = World::new();
    let (mut a, mut b, conv) = pair(&mut w);
    let ca = a.conn.unwrap();
    // Acknowledged one by one, before the batch.
    for i in 0..3 {
        let outs = w.msg(&a, &b, &conv, &format!("ok{i}"));
        assert!(matches!(frames(&outs, ca)[0], ServerFrame::Ack(_)));
    }
    w.relay.begin_batch();
    for i in 0..4 {
        w.relay
            .handle_text(w.now, ca, &msg_text(&b, &conv, &format!("lost{i}")));
    }
    let response = w.post(paths::WS_TICKET, json!({}), Some(&a.token.clone()));
    assert_eq!(response.status, 200, "provisional answer inside the batch");
    w.mem.fail_commits(1);
    assert_eq!(w.relay.commit_batch(), Err(relay_core::BatchFailed));
    assert!(w.relay.is_failed());
    let outs = w.drain();
    assert!(
        outs.iter().all(|o| matches!(
            o,
            Output::Close {
                reason: CloseReason::StorageFailure,
                ..
            }
        )),
        "only closes after a failed batch: {outs:?}"
    );
    assert_eq!(
        relay_core::storage_unavailable_response().status,
        503,
        "what the shell answers instead of the provisional response"
    );
    // Rebuilt from the store: the three acknowledged messages are there, the batch is not.
    w.restart(Box::new(w.mem.clone()));
    let _ = w.connect(&mut a);
    let cb = w.connect(&mut b);
    let replay: Vec<u64> = frames(&w.sync(cb), cb)
        .into_iter()
        .filter_map(|f| match f {
            ServerFrame::Msg(m) => Some(m.seq.get()),
            _ => None,
        })
        .collect();
    assert_eq!(replay, [1, 2, 3]);
}

// ------------------------------------------------------------------------ pipelined commits

/// Pipelined: batch 1's commit fails while batches 2 and 3 (built on it) are in flight.
/// Batch 0 is released; batches 1.. release nothing, even when a (buggy) committer reports a
/// later one as applied; the store holds batch 0 only, and seqs go on from it.
#[test]
fn a_failed_commit_fails_every_later_batch_in_flight_and_releases_none_of_them() {
    let mut w = World::new();
    let (mut a, mut b, conv) = pair(&mut w);
    let (ca, cb) = (a.conn.unwrap(), b.conn.unwrap());
    w.pipeline();
    let mut ids = Vec::new();
    for n in 0..4 {
        w.relay
            .handle_text(w.now, ca, &msg_text(&b, &conv, &format!("p{n}")));
        assert!(w.seal(), "batch {n} has a commit to wait for");
        ids.push(w.pending.back().unwrap().id);
    }
    // A request in the last batch: its answer is provisional.
    let ticket = w.post(paths::WS_TICKET, json!({}), Some(&a.token.clone()));
    assert_eq!(ticket.status, 200);
    w.relay
        .handle_text(w.now, ca, &msg_text(&b, &conv, "p-last"));
    assert!(w.seal());
    assert_eq!(w.relay.batches_in_flight(), 5);
    assert!(w.released().is_empty(), "nothing leaves before a commit");

    w.commit_next(true).unwrap();
    let first = w.released();
    assert_eq!(acks_on(&first, ca), [("p0".to_owned(), 1)]);
    assert_eq!(seqs_on(&first, cb), [1], "batch 0's delivery");

    assert_eq!(w.commit_next(false), Err(relay_core::BatchFailed));
    assert!(w.relay.is_failed());
    // The committer refuses the later ones; even a report of success changes nothing.
    let later = w.pending.pop_front().unwrap();
    assert_eq!(
        w.relay.handle_committed(later.id, &Ok(())),
        Err(relay_core::BatchFailed),
        "a batch built on a failed one is not durable"
    );
    while !w.pending.is_empty() {
        assert_eq!(w.commit_next(true), Err(relay_core::BatchFailed));
    }
    let after = w.released();
    assert!(
        after.iter().all(|o| matches!(
            o,
            Output::Close {
                reason: CloseReason::StorageFailure,
                ..
            }
        )),
        "only closes after the failed commit: {after:?}"
    );
    assert_eq!(w.relay.seal_batch().unwrap_err(), relay_core::BatchFailed);

    // Rebuilt from the store: batch 0 only; the next message takes seq 2.
    w.restart(Box::new(w.mem.clone()));
    let ca = w.connect(&mut a);
    let cb = w.connect(&mut b);
    assert_eq!(seqs_on(&w.sync(cb), cb), [1]);
    let again = w.msg(&a, &b, &conv, "p1");
    assert_eq!(acks_on(&again, ca), [("p1".to_owned(), 2)]);
}

/// Pipelined: batch N+1 is handled on top of batch N's uncommitted state (a resent id is a
/// duplicate of the message still in flight), and its outputs wait for N's commit even though
/// it changed nothing itself.
#[test]
fn a_batch_built_on_one_in_flight_waits_for_its_commit() {
    let mut w = World::new();
    let (a, b, conv) = pair(&mut w);
    let ca = a.conn.unwrap();
    w.pipeline();
    w.relay.handle_text(w.now, ca, &msg_text(&b, &conv, "d"));
    assert!(w.seal());
    w.relay.handle_text(w.now, ca, &msg_text(&b, &conv, "d"));
    assert!(
        w.seal(),
        "the duplicate's ack waits behind the first commit"
    );
    assert!(
        w.pending[1].mutations.is_empty(),
        "a duplicate changes nothing"
    );
    assert!(w.released().is_empty());
    w.commit_next(true).unwrap();
    assert_eq!(acks_on(&w.released(), ca), [("d".to_owned(), 1)]);
    w.commit_next(true).unwrap();
    assert_eq!(
        acks_on(&w.released(), ca),
        [("d".to_owned(), 1)],
        "the same ack"
    );
    assert_eq!(w.relay.batches_in_flight(), 0);
    // Nothing in flight and nothing to commit: released at once.
    w.relay.handle_text(w.now, ca, &msg_text(&b, &conv, "d"));
    assert!(!w.seal());
    assert_eq!(acks_on(&w.released(), ca), [("d".to_owned(), 1)]);
}

fn acks_on(outs: &[Output], conn: ConnId) -> Vec<(String, u64)> {
    crate::world::acks(&frames(outs, conn))
}

fn seqs_on(outs: &[Output], conn: ConnId) -> Vec<u64> {
    crate::world::msgs(&frames(outs, conn))
        .into_iter()
        .map(|(_, s)| s)
        .collect()
}

#[derive(Debug, Clone)]
enum Op {
    Send {
        from: usize,
        id: u8,
    },
    Delivered {
        who: usize,
        seq: u64,
    },
    Read {
        who: usize,
        seq: u64,
    },
    Typing {
        from: usize,
    },
    Garbage {
        from: usize,
    },
    Disconnect {
        who: usize,
    },
    Connect {
        who: usize,
    },
    Advance {
        ms: u64,
    },
    /// Only the batched world: close the current batch and open a new one.
    Cut,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0..2usize, 0..10u8).prop_map(|(from, id)| Op::Send { from, id }),
        2 => (0..2usize, 0..12u64).prop_map(|(who, seq)| Op::Delivered { who, seq }),
        1 => (0..2usize, 0..12u64).prop_map(|(who, seq)| Op::Read { who, seq }),
        1 => (0..2usize).prop_map(|from| Op::Typing { from }),
        1 => (0..2usize).prop_map(|from| Op::Garbage { from }),
        1 => (0..2usize).prop_map(|who| Op::Disconnect { who }),
        2 => (0..2usize).prop_map(|who| Op::Connect { who }),
        1 => (1..120_000u64).prop_map(|ms| Op::Advance { ms }),
        3 => Just(Op::Cut),
    ]
}

/// One world and its two members' connections.
struct Side {
    w: World,
    users: [User; 2],
    online: [Option<ConnId>; 2],
    conv: String,
    http: Vec<(u16, String)>,
}

impl Side {
    fn new() -> Self {
        let mut w = World::with_seed(fast_config(), 9);
        let (a, b, conv) = pair(&mut w);
        let online = [a.conn, b.conn];
        w.log.clear();
        Self {
            w,
            users: [a, b],
            online,
            conv,
            http: Vec::new(),
        }
    }

    fn apply(&mut self, op: &Op) {
        let now = self.w.now;
        match *op {
            Op::Send { from, id } => {
                if let Some(c) = self.online[from] {
                    let text =
                        msg_text(&self.users[1 - from], &self.conv, &format!("m{from}-{id}"));
                    self.w.relay.handle_text(now, c, &text);
                }
            }
            Op::Delivered { who, seq } | Op::Read { who, seq } => {
                if let Some(c) = self.online[who] {
                    let kind = if matches!(op, Op::Delivered { .. }) {
                        "delivered"
                    } else {
                        "read"
                    };
                    let text = json!({"type":kind,"conv_id":self.conv,"seq":seq,
                        "to":self.users[1 - who].alias})
                    .to_string();
                    self.w.relay.handle_text(now, c, &text);
                }
            }
            Op::Typing { from } => {
                if let Some(c) = self.online[from] {
                    let text = json!({"type":"typing","conv_id":self.conv,
                        "to":self.users[1 - from].alias})
                    .to_string();
                    self.w.relay.handle_text(now, c, &text);
                }
            }
            Op::Garbage { from } => {
                if let Some(c) = self.online[from] {
                    self.w.relay.handle_text(now, c, "{not json");
                }
            }
            Op::Disconnect { who } => {
                if let Some(c) = self.online[who].take() {
                    self.w.relay.handle_disconnect(now, c);
                }
            }
            Op::Connect { who } => {
                let token = self.users[who].token.clone();
                let t = self.w.post(paths::WS_TICKET, json!({}), Some(&token));
                self.http
                    .push((t.status, String::from_utf8_lossy(&t.body).into_owned()));
                if t.status == 200 {
                    let ticket = t.body_json()["ticket"].as_str().unwrap().to_owned();
                    let q = format!("user_uuid={}&ticket={ticket}", self.users[who].uuid);
                    if let Ok(c) = self.w.connect_query(q, None) {
                        self.online[who] = Some(c);
                        let sync = json!({"type":"sync","crypto_v":1}).to_string();
                        self.w.relay.handle_text(now, c, &sync);
                    }
                }
            }
            Op::Advance { ms } => {
                self.w.now = now.plus_ms(ms);
                let now = self.w.now;
                self.w.relay.handle_timeout(now);
            }
            Op::Cut => {}
        }
        for o in &mut self.online {
            if o.is_some_and(|c| !self.w.relay.is_connected(c)) {
                *o = None;
            }
        }
    }
}

fn outputs_and_rows(ops: &[Op]) {
    let mut one = Side::new();
    let mut grouped = Side::new();
    grouped.w.relay.begin_batch();
    for op in ops {
        one.apply(op);
        one.w.drain();
        if matches!(op, Op::Cut) {
            grouped.w.relay.commit_batch().unwrap();
            grouped.w.drain();
            grouped.w.relay.begin_batch();
        } else {
            grouped.apply(op);
        }
    }
    grouped.w.relay.commit_batch().unwrap();
    grouped.w.drain();
    assert_eq!(one.w.log, grouped.w.log, "outputs differ");
    assert_eq!(one.http, grouped.http, "HTTP answers differ");
    assert_eq!(
        one.w.mem.clone().load().unwrap(),
        grouped.w.mem.clone().load().unwrap(),
        "stored rows differ"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn any_grouping_gives_the_outputs_and_rows_of_one_by_one(ops in prop::collection::vec(op(), 1..60)) {
        outputs_and_rows(&ops);
    }
}

// ------------------------------------------------------------------------ crash under group commit

/// Environment variable that makes [`crash_child`] run (its value: the SQLite file).
const CHILD_ENV: &str = "RELAY_GROUP_COMMIT_CRASH_CHILD";

/// The child process of [`kill_9_under_group_commit_loses_nothing_acknowledged`]: a relay on a
/// SQLite file handling `msg`s in batches of 1 to 24, printing `BATCH <n>` before each batch's
/// commit and `ACK <id> <seq>` for every ack it released (after the commit), until it is killed. Does nothing unless started by
/// the parent test.
#[test]
#[ignore = "the child of kill_9_under_group_commit_loses_nothing_acknowledged; runs only under it"]
fn crash_child() {
    use std::io::Write as _;
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    // Unlimited messages per minute: the virtual clock moves 1 ms per batch.
    let mut w = World::with_config(relay_core::Config {
        msgs_per_min_per_user: u32::MAX,
        ..fast_config()
    });
    w.restart(Box::new(
        relay_core::store::SqliteStore::open(&path).unwrap(),
    ));
    let (a, b, conv) = pair(&mut w);
    let ca = a.conn.unwrap();
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "USER {} {} {} {} {conv}",
        b.uuid, b.token, b.alias, a.alias
    )
    .unwrap();
    out.flush().unwrap();
    let mut next = 0u64;
    let mut k = 0x9e37_79b9_u64;
    loop {
        k = k.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        let n = 1 + (k >> 33) % 24;
        w.relay.begin_batch();
        for _ in 0..n {
            w.relay
                .handle_text(w.now, ca, &msg_text(&b, &conv, &format!("k{next}")));
            next += 1;
        }
        // Before the commit: the parent then knows every batch that may have been stored.
        writeln!(out, "BATCH {n}").unwrap();
        out.flush().unwrap();
        w.relay.commit_batch().unwrap();
        for f in frames(&w.drain(), ca) {
            match f {
                ServerFrame::Ack(ack) => {
                    writeln!(out, "ACK {} {}", ack.id, ack.seq.get()).unwrap();
                }
                // Any refusal would stall the parent: fail loudly instead.
                ServerFrame::Error(e) => panic!("the child's message was refused: {e:?}"),
                _ => {}
            }
        }
        out.flush().unwrap();
        w.advance(1);
    }
}

/// Kills (SIGKILL) a relay committing in batches at several points — between batches and
/// inside a commit, wherever the kill lands — and restarts on the same SQLite file each time:
/// every message whose ack left the relay is stored with its seq, seqs stay gap-free, and a
/// batch is stored whole or not at all.
#[test]
fn kill_9_under_group_commit_loses_nothing_acknowledged() {
    use std::io::BufRead as _;
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("relay.sqlite3");
    for (round, stop_after) in [37usize, 151, 260].into_iter().enumerate() {
        // Each round starts from an empty file (the conversation's queue holds 1,000).
        let _ = std::fs::remove_file(&path);
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--ignored",
                "--exact",
                "group_commit::crash_child",
                "--nocapture",
            ])
            .args(["--test-threads", "1"])
            .env(CHILD_ENV, &path)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = std::io::BufReader::new(stdout).lines();
        let mut user = None;
        let mut acked: Vec<(String, u64)> = Vec::new();
        // Seq of the last message of every batch the child began to commit.
        let mut batch_ends: Vec<u64> = vec![0];
        while acked.len() < stop_after {
            let line = lines
                .next()
                .expect("the child stopped before the kill point")
                .unwrap();
            // libtest prints `test … ... ` before the child's first line, on the same line.
            let start = ["USER ", "ACK "]
                .iter()
                .filter_map(|m| line.find(m))
                .chain(line.find("BATCH "))
                .min()
                .unwrap_or(0);
            let mut parts = line[start..].split(' ');
            match parts.next() {
                Some("USER") => user = Some(parts.map(str::to_owned).collect::<Vec<_>>()),
                Some("BATCH") => {
                    let n: u64 = parts.next().unwrap().parse().unwrap();
                    let end = batch_ends.last().unwrap() + n;
                    batch_ends.push(end);
                }
                Some("ACK") => {
                    let id = parts.next().unwrap().to_owned();
                    let seq = parts.next().unwrap().parse().unwrap();
                    acked.push((id, seq));
                }
                _ => {}
            }
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        // What the child wrote before it died: later batches it began.
        for line in lines.map_while(Result::ok) {
            if let Some(i) = line.find("BATCH ") {
                let n: u64 = line[i + 6..].trim().parse().unwrap();
                let end = batch_ends.last().unwrap() + n;
                batch_ends.push(end);
            }
        }
        let user = user.expect("the child named its recipient");

        // Restart on the file; the recipient syncs and reads everything.
        let mut w = World::new();
        w.restart(Box::new(
            relay_core::store::SqliteStore::open(&path).unwrap(),
        ));
        let mut b = User {
            sk: ed25519_dalek::SigningKey::from_bytes(&[0; 32]),
            x25519: [0; 32],
            uuid: user[0].clone(),
            token: user[1].clone(),
            alias: user[2].clone(),
            conn: None,
        };
        let cb = w.connect(&mut b);
        let mut stored: Vec<(String, u64)> = Vec::new();
        let mut outs = w.sync(cb);
        loop {
            let got: Vec<(String, u64)> = frames(&outs, cb)
                .into_iter()
                .filter_map(|f| match f {
                    ServerFrame::Msg(m) => Some((m.id.to_string(), m.seq.get())),
                    _ => None,
                })
                .collect();
            let Some(last) = got.last().map(|(_, s)| *s) else {
                break;
            };
            stored.extend(got);
            outs = w.send(
                cb,
                json!({"type":"delivered","conv_id":user[4],"seq":last,"to":user[3]}),
            );
        }
        let seqs: Vec<u64> = stored.iter().map(|(_, s)| *s).collect();
        let expected: Vec<u64> = (1..=seqs.len() as u64).collect();
        assert_eq!(seqs, expected, "round {round}: seqs not gap-free");
        assert!(
            batch_ends.contains(&(seqs.len() as u64)),
            "round {round}: {} messages stored, not a batch boundary of {batch_ends:?}",
            seqs.len()
        );
        for (id, seq) in &acked {
            assert!(
                stored.iter().any(|(i, s)| i == id && s == seq),
                "round {round}: acknowledged {id} (seq {seq}) lost after kill -9 \
                 ({} acked, {} stored)",
                acked.len(),
                stored.len()
            );
        }
    }
}
