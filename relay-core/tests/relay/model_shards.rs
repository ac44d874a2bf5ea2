//! Tier 2 at K = 2: the naive model of `model.rs` against a relay of two shards (the `Two`
//! harness of `shards.rs`: two cores over one store), the conversation's members on different
//! shards, so that the owner-side member's messages are handed over to the other's shard and
//! the other's are submitted to the owner, which decides them and answers.
//!
//! The model's operations run at each member's shard, between operations of the transport
//! between the cores: some of the waiting crossings carried, in a drawn order (a later one
//! before an earlier one), each delivered, lost or repeated; all of them carried until none is
//! left; or none, left waiting across steps. Either core crashes and starts again on the
//! store, what it had sent and was still on the transport lost or not.
//!
//! After every step, what holds whatever the transport does: no message pushed twice or out
//! of seq order on one connection, nor after its recipient confirmed it; two message ids
//! never share a seq, an id keeps its seq, an id the other member used first is never
//! acknowledged; a receipt is taken only for what was pushed, and forwarded only as sent; a
//! sync at the owner's shard replays exactly the undelivered messages, one at the other shard
//! a prefix of them (what its shard applied). At the end of each case the transport heals
//! (everything delivered, time past the resend intervals until nothing crosses), both members
//! connect again, and every message acknowledged or delivered is then delivered exactly once
//! and in order, the seqs have no gap, each member got the other's last receipts (none
//! moved backwards, though notices cross out of order: the tests at the end), and the outbox and notice rows are drained. The cases are counted: most must have handed
//! messages over and submitted some, and some must have faulted them.

use std::cell::RefCell;

use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use relay_core::handoff::{Crossing, Notice, RESEND_MS};
use relay_core::store::Table;
use relay_core::{ConnId, Output};
use wire::ServerFrame;

use crate::model::{self, Model, Op};
use crate::shards::{Fate, Two, across};
use crate::world::{T0, User, World, frames};

/// Cases per run (each up to 80 steps).
const CASES: u32 = 1024;

/// One step of a case.
#[derive(Debug, Clone)]
enum Step {
    /// An operation of the one-relay model, at the shard of the member it names. `Restart`
    /// crashes both cores (the process; what is on the transport is lost with it),
    /// `InFlight` sends its messages one by one, `ReadFault` fails the next keyed read of the
    /// store at whichever core reads first, `Reads` does nothing (the cores do not read
    /// ahead).
    Model(Op),
    /// The transport carries some of the waiting crossings: for each pick, the one at `index`
    /// modulo their number (the oldest is 0), with the fate its draw says; what the cores send
    /// meanwhile waits.
    Carry(Vec<(u8, u8)>),
    /// The transport carries every waiting crossing and what follows from it until none is
    /// left, the fates drawn in turn (cycled); reversed first when `reverse`.
    CarryAll { fates: Vec<u8>, reverse: bool },
    /// Core `shard` crashes and starts again on the store; when `outgoing_lost`, what it sent
    /// and is still on the transport is lost with it.
    Crash { shard: usize, outgoing_lost: bool },
}

/// The model's operations, with more sends and connections than its own mix (a member
/// offline after a crash comes back), and the transport's.
fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        8 => model::op().prop_map(Step::Model),
        6 => (0..2usize, 0..12u8).prop_map(|(from, id)| Step::Model(Op::Send { from, id })),
        2 => (0..2usize).prop_map(|who| Step::Model(Op::Connect { who })),
        5 => proptest::collection::vec((any::<u8>(), any::<u8>()), 1..5).prop_map(Step::Carry),
        1 => (proptest::collection::vec(any::<u8>(), 1..4), any::<bool>())
            .prop_map(|(fates, reverse)| Step::CarryAll { fates, reverse }),
        1 => (0..2usize, any::<bool>())
            .prop_map(|(shard, outgoing_lost)| Step::Crash { shard, outgoing_lost }),
    ]
}

/// A draw's fate: mostly delivered, now and then lost or repeated.
fn fate(draw: u8) -> Fate {
    match draw % 8 {
        0 => Fate::Lose,
        1 => Fate::Repeat,
        _ => Fate::Deliver,
    }
}

/// What the transport and the crashes did in a case.
#[derive(Debug, Default, Clone, Copy)]
struct Traffic {
    /// Hand-offs delivered to the recipient's shard (repeats counted).
    handoffs: u64,
    /// Submissions delivered to the owner (repeats counted).
    submissions: u64,
    /// Hand-offs and submissions lost, repeated or carried before an older crossing.
    faulted: u64,
    /// Cores crashed.
    crashes: u64,
    /// Messages whose delivery the end of the case checked.
    checked: u64,
}

impl Traffic {
    /// Counts crossing `o` carried with `fate`; `reordered`: before an older one.
    fn count(&mut self, o: &Output, fate: Fate, reordered: bool) {
        let (handoff, submission) = match o {
            Output::Cross(Crossing::Handoff(_)) => (1, 0),
            Output::Cross(Crossing::Submit(_)) => (0, 1),
            _ => return,
        };
        if fate != Fate::Lose {
            self.handoffs += handoff;
            self.submissions += submission;
        }
        if fate != Fate::Deliver || reordered {
            self.faulted += 1;
        }
    }
}

/// One case: the two shards, the members (the owner-side one first), the outsider, the model.
struct Case {
    two: Two,
    users: Vec<User>,
    outsider: User,
    conv: String,
    model: Model,
    online: [Option<ConnId>; 2],
    /// Every connection the outsider opened.
    outsiders: Vec<ConnId>,
    traffic: Traffic,
}

impl Case {
    /// The members registered and befriended on one relay, whose store two cores then share
    /// (every cache bounded by `cache_bytes`); everyone connected at their shard.
    fn new(cache_bytes: usize) -> Self {
        let mut setup = World::with_config(model::caches(cache_bytes));
        let (owner_side, other) = across(&mut setup);
        let outsider = setup.user("c");
        let conv = setup.befriend(&owner_side, &other);
        let mut case = Self {
            two: Two::split(setup),
            users: vec![owner_side, other],
            outsider,
            conv,
            model: Model::new(relay_core::limits::OFFLINE_TTL_MS, true),
            online: [None, None],
            outsiders: Vec::new(),
            traffic: Traffic::default(),
        };
        assert_ne!(case.shard_of(0), case.shard_of(1));
        case.connect_outsider();
        for who in 0..2 {
            case.connect(who);
        }
        case
    }

    /// The shard of member `who`.
    fn shard_of(&self, who: usize) -> usize {
        self.two.of(&self.users[who])
    }

    /// Judges one step's outputs (of either core), then members whose connection their core
    /// closed go offline (what was sent on it before its close reached the client).
    fn observe(&mut self, outs: &[Output]) {
        self.model.note_acks(outs, &self.online);
        self.model
            .judge(outs, &self.online, &self.users, &self.outsiders);
        for who in 0..2 {
            let i = self.shard_of(who);
            if self.online[who].is_some_and(|c| !self.two.shards[i].relay.is_connected(c)) {
                self.online[who] = None;
            }
        }
    }

    /// The outsider connects at its shard and syncs.
    fn connect_outsider(&mut self) {
        let i = self.two.of(&self.outsider);
        let (conn, outs) = model::connect_and_sync(&mut self.two.shards[i], &mut self.outsider);
        self.two.keep(&outs);
        self.outsiders.push(conn);
        self.observe(&outs);
    }

    /// Runs one step.
    fn step(&mut self, step: Step) {
        self.model.now = self.two.shards[0].now.get();
        match step {
            Step::Model(op) => self.model_op(op),
            Step::Carry(picks) => {
                let mut outs = Vec::new();
                for (index, draw) in picks {
                    if self.two.wire.is_empty() {
                        break;
                    }
                    let at = usize::from(index) % self.two.wire.len();
                    let o = self.two.wire.remove(at);
                    let fate = fate(draw);
                    self.traffic.count(&o, fate, at > 0);
                    let times = match fate {
                        Fate::Lose => 0,
                        Fate::Deliver => 1,
                        Fate::Repeat => 2,
                    };
                    for _ in 0..times {
                        outs.extend(self.two.hand(&o));
                    }
                }
                self.observe(&outs);
            }
            Step::CarryAll { fates, reverse } => {
                if reverse {
                    self.two.wire.reverse();
                }
                let reversed = if reverse { self.two.wire.len() } else { 0 };
                let traffic = &mut self.traffic;
                let outs = self.two.carry(|n, o| {
                    let fate = fate(fates[n % fates.len()]);
                    traffic.count(o, fate, n < reversed);
                    fate
                });
                self.observe(&outs);
            }
            Step::Crash {
                shard,
                outgoing_lost,
            } => {
                if outgoing_lost {
                    self.two.wire.retain(|o| match o {
                        Output::Cross(c) => usize::from(c.to().0) == shard,
                        _ => true,
                    });
                }
                self.crash(shard);
            }
        }
    }

    /// Core `shard` crashes and starts again on the store: its members are offline.
    fn crash(&mut self, shard: usize) {
        self.two.restart(shard);
        self.traffic.crashes += 1;
        for who in 0..2 {
            if self.shard_of(who) == shard {
                self.online[who] = None;
            }
        }
    }

    // Long on purpose: one arm per operation of the model, as in `model.rs`'s run.
    fn model_op(&mut self, op: Op) {
        let conv = self.conv.clone();
        match op {
            Op::Send { from, id } => {
                let Some(conn) = self.online[from] else {
                    return;
                };
                let id = model::msg_id(from, id);
                let to = self.users[1 - from].alias.clone();
                let msg = model::msg_frame(&id, &to, &conv);
                let outs = self.two.shards[self.shard_of(from)].send(conn, msg);
                self.two.keep(&outs);
                self.observe(&outs);
            }
            Op::Delivered { who, seq } | Op::Read { who, seq } => {
                let Some(conn) = self.online[who] else {
                    return;
                };
                let kind = if matches!(op, Op::Delivered { .. }) {
                    "delivered"
                } else {
                    "read"
                };
                let to = self.users[1 - who].alias.clone();
                let receipt = model::receipt_frame(kind, &conv, seq, &to);
                let outs = self.two.shards[self.shard_of(who)].send(conn, receipt);
                self.two.keep(&outs);
                let refused = frames(&outs, conn)
                    .iter()
                    .any(|f| matches!(f, ServerFrame::Error(_)));
                self.model.note_receipt(who, seq, kind == "read", refused);
                self.observe(&outs);
            }
            Op::Disconnect { who } => {
                if let Some(c) = self.online[who].take() {
                    let w = &mut self.two.shards[self.two.of(&self.users[who])];
                    w.relay.handle_disconnect(w.now, c);
                    let outs = w.drain();
                    self.two.keep(&outs);
                    self.observe(&outs);
                }
            }
            Op::Connect { who } => {
                let replay = self.connect(who);
                let expected = self.model.expected_replay(who, &replay);
                if self.shard_of(who) == self.shard_of(0) {
                    // The owner decided every message to this member, and queued it here.
                    assert_eq!(replay, expected[..expected.len().min(100)], "replay");
                } else {
                    // What its shard applied: hand-offs still on the transport come later.
                    assert!(
                        expected.starts_with(&replay),
                        "replay {replay:?} is not a prefix of {expected:?}"
                    );
                }
            }
            Op::Intrude => {
                let i = self.two.of(&self.outsider);
                let oc = *self.outsiders.last().expect("connected at the start");
                if !self.two.shards[i].relay.is_connected(oc) {
                    self.connect_outsider();
                }
                let oc = *self.outsiders.last().expect("connected");
                let to = self.users[1].alias.clone();
                let evil = model::msg_frame("evil", &to, &conv);
                let outs = self.two.shards[i].send(oc, evil);
                self.two.keep(&outs);
                self.observe(&outs);
            }
            Op::Advance { ms, .. } => {
                let outs = self.two.advance(ms);
                self.model.now = self.two.shards[0].now.get();
                self.observe(&outs);
            }
            Op::Restart => {
                self.two.wire.clear();
                self.crash(0);
                self.crash(1);
            }
            Op::InFlight { sends, .. } => {
                for (from, id) in sends {
                    self.model_op(Op::Send { from, id });
                }
            }
            Op::ReadFault => self.two.shards[0].mem.fail_reads(1),
            Op::Reads { .. } => {}
        }
    }

    /// Member `who` connects to its shard and syncs (once more if a read fault refused the
    /// sync); returns the seqs replayed.
    fn connect(&mut self, who: usize) -> Vec<u64> {
        let i = self.shard_of(who);
        let (conn, outs) = model::connect_and_sync(&mut self.two.shards[i], &mut self.users[who]);
        self.two.keep(&outs);
        self.online[who] = Some(conn);
        self.model.note_connected(who, conn);
        self.observe(&outs);
        model::replayed(&outs, conn)
    }

    /// The transport heals: everything waiting is delivered, and time passes a resend
    /// interval at a time until nothing crosses and no hand-off waits; then both members
    /// connect again. Checks that every message the model knows reached its recipient once
    /// and in seq order, that the seqs have no gap, that receipts reached their authors, and
    /// that the outboxes and notices are drained.
    fn heal(&mut self) {
        self.two.shards[0].mem.fail_reads(0);
        for round in 0.. {
            assert!(round < 30, "still crossing: {:?}", self.two.wire);
            let traffic = &mut self.traffic;
            let outs = self.two.carry(|_, o| {
                traffic.count(o, Fate::Deliver, false);
                Fate::Deliver
            });
            self.observe(&outs);
            let outs = self.two.advance(RESEND_MS);
            self.observe(&outs);
            let quiet = self.two.wire.is_empty()
                && (0..2).all(|i| self.two.shards[i].relay.handoff_backlog() == (0, 0));
            if quiet {
                break;
            }
        }
        self.model.now = self.two.shards[0].now.get();
        assert!(
            self.model.now < T0 + relay_core::limits::OFFLINE_TTL_MS,
            "a message may have expired"
        );
        let mut got = [Vec::new(), Vec::new()];
        for (who, got) in got.iter_mut().enumerate() {
            *got = self.connect(who);
            let expected = self.model.expected_replay(who, got);
            assert!(expected.len() <= 100, "more than a sync's batch");
            assert_eq!(*got, expected, "what {who} got once healed");
        }
        let seqs: Vec<u64> = self.model.accepted.keys().copied().collect();
        let n = seqs.len() as u64;
        assert_eq!(seqs, (1..=n).collect::<Vec<u64>>(), "the seqs have a gap");
        for (seq, (author, id)) in &self.model.accepted {
            let to = 1 - author;
            assert!(
                *seq <= self.model.confirmed[to] || got[to].contains(seq),
                "{id} ({seq}) never reached its recipient"
            );
        }
        self.model.check_receipts_reached();
        self.traffic.checked += n;
        assert_eq!(self.two.rows(Table::Outbox), 0, "an outbox row left");
        assert_eq!(self.two.rows(Table::Notices), 0, "a notice left");
    }
}

/// Runs one case; returns what its transport did.
fn run(steps: Vec<Step>, cache_bytes: usize) -> Traffic {
    let mut case = Case::new(cache_bytes);
    for step in steps {
        case.step(step);
    }
    case.heal();
    case.traffic
}

/// What the run's cases did, together.
#[derive(Debug, Default)]
struct Tally {
    cases: u32,
    /// Cases in which a hand-off and a submission crossed.
    crossed_both_ways: u32,
    /// Cases in which a hand-off or a submission was lost, repeated or reordered.
    faulted: u32,
    /// Cases in which a core crashed.
    crashed: u32,
    /// Messages whose delivery was checked at the end of a case.
    checked: u64,
}

/// Runs the cases of test `name` with every cache bounded by `cache_bytes`, and checks that
/// they did what they are for.
fn cases(name: &'static str, cache_bytes: usize) {
    let mut config = ProptestConfig::with_cases(CASES);
    config.test_name = Some(name);
    config.source_file = Some(file!());
    let mut runner = TestRunner::new(config);
    let tally = RefCell::new(Tally::default());
    let steps = proptest::collection::vec(step(), 1..80);
    if let Err(e) = runner.run(&steps, |steps| {
        let t = run(steps, cache_bytes);
        let mut tally = tally.borrow_mut();
        tally.cases += 1;
        tally.crossed_both_ways += u32::from(t.handoffs > 0 && t.submissions > 0);
        tally.faulted += u32::from(t.faulted > 0);
        tally.crashed += u32::from(t.crashes > 0);
        tally.checked += t.checked;
        Ok(())
    }) {
        panic!("{e}\n{runner}");
    }
    let tally = tally.into_inner();
    eprintln!("{name}: {tally:?}");
    assert!(
        tally.crossed_both_ways * 2 >= tally.cases,
        "too few cases crossed both ways: {tally:?}"
    );
    assert!(
        tally.faulted * 3 >= tally.cases,
        "too few faulted: {tally:?}"
    );
    assert!(
        tally.crashed * 4 >= tally.cases,
        "too few crashed: {tally:?}"
    );
    assert!(
        tally.checked >= u64::from(tally.cases) * 3,
        "too few messages checked: {tally:?}"
    );
}

#[test]
fn a_sharded_relay_matches_the_naive_model() {
    cases(
        concat!(module_path!(), "::a_sharded_relay_matches_the_naive_model"),
        relay_core::limits::TOMBSTONE_CACHE_BYTES,
    );
}

/// Without caches: every core reads what it needs from the shared store again at each input
/// (tombstones at the owner, queues and inbox marks at the recipient's shard).
#[test]
fn a_sharded_relay_without_caches_matches_the_naive_model() {
    cases(
        concat!(
            module_path!(),
            "::a_sharded_relay_without_caches_matches_the_naive_model"
        ),
        0,
    );
}

/// Member 1 (at the other shard) sends two messages, and member 0 (at the owner) confirms
/// them one by one: two receipt notices for member 1's shard, which the transport delivers
/// newest first; when `restart`, member 1's shard crashes right after the newest (and member
/// 1 connects again unless `offline`). Returns the receipts member 1 then gets on any of its
/// connections, live or, when `offline`, at its next sync.
fn receipts_reordered(offline: bool, restart: bool) -> Vec<u64> {
    let mut case = Case::new(relay_core::limits::TOMBSTONE_CACHE_BYTES);
    for id in 0..2 {
        case.step(Step::Model(Op::Send { from: 1, id }));
    }
    case.step(Step::CarryAll {
        fates: vec![2],
        reverse: false,
    });
    if offline {
        case.step(Step::Model(Op::Disconnect { who: 1 }));
    }
    for seq in [1, 2] {
        case.step(Step::Model(Op::Delivered { who: 0, seq }));
    }
    let i = case.shard_of(1);
    let mut conns = vec![case.users[1].conn.expect("connected")];
    case.two.wire.reverse();
    let mut crash = restart;
    while !case.two.wire.is_empty() {
        let o = case.two.wire.remove(0);
        let receipt = matches!(
            &o,
            Output::Cross(Crossing::Notice(n)) if matches!(n.item, Notice::Receipt { .. })
        );
        case.two.hand(&o);
        if receipt && std::mem::take(&mut crash) {
            case.crash(i);
            if !offline {
                case.connect(1);
                conns.push(case.users[1].conn.expect("connected"));
            }
        }
    }
    if offline {
        case.connect(1);
        conns.push(case.users[1].conn.expect("connected"));
    }
    conns.dedup();
    let log = &case.two.shards[i].log;
    conns
        .into_iter()
        .flat_map(|conn| frames(log, conn))
        .filter_map(|f| match f {
            ServerFrame::Delivered(r) => Some(r.seq.get()),
            _ => None,
        })
        .collect()
}

/// A late receipt notice is not forwarded after a newer one: member 1 gets "delivered 2"
/// only (the author's shard took 2, and 1 is not above it).
#[test]
fn a_late_receipt_notice_is_not_forwarded_after_a_newer_one() {
    assert_eq!(receipts_reordered(false, false), vec![2]);
}

/// A late receipt notice for an offline author does not replace the newer receipt kept for
/// it: member 1's sync brings "delivered 2".
#[test]
fn a_late_receipt_notice_does_not_replace_a_newer_kept_one() {
    assert_eq!(receipts_reordered(true, false), vec![2]);
}

/// What the author's shard took survives its crash: a late notice that comes after the
/// restart is still dropped, whether the author was told live or is told at its sync.
#[test]
fn a_late_receipt_notice_after_a_restart_is_dropped() {
    assert_eq!(receipts_reordered(false, true), vec![2]);
    assert_eq!(receipts_reordered(true, true), vec![2]);
}
