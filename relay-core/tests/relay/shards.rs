//! Two relay cores as two shards of one deployment over one store. A message from the
//! conversation's owner shard to a user of the other is handed over exactly once and in
//! order, across lost, repeated and reordered hand-offs and crashes of either core; a message
//! from the other member is submitted to the owner, which decides its seq.

use relay_core::handoff::{Crossing, ShardId, ShardMap, ShardPlace};
use relay_core::store::{MemoryStore, Table};
use relay_core::{HttpRequest, HttpResponse, Output, Relay, RequestId};
use serde_json::{Value, json};
use wire::ServerFrame;

use crate::world::{User, World, acks, fast_config, frames, msgs};

/// What the transport between the two cores does with one output it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    Deliver,
    Lose,
    Repeat,
}

/// Two shards and the transport between them.
pub(crate) struct Two {
    pub(crate) shards: [World; 2],
    map: ShardMap,
    /// Hand-offs and acknowledgements emitted and not yet carried, oldest first.
    pub(crate) wire: Vec<Output>,
    /// The number of the last request sent through [`Two::request`].
    next_request: u64,
}

impl Two {
    /// A world for setup: users registered and befriended on one unsharded relay, then two
    /// cores started over its store, shard 0 and shard 1.
    pub(crate) fn split(setup: World) -> Self {
        let map = ShardMap::new(2).unwrap();
        let mem: MemoryStore = setup.mem.clone();
        let base = setup.config.clone();
        drop(setup);
        let shard = |i: u16| {
            let mut config = base.clone();
            config.shard = ShardPlace::new(map, ShardId(i)).unwrap();
            let mut w = World::on_store(config, mem.clone(), 7);
            // Connections numbered apart, so that outputs of both cores tell them apart.
            w.next_conn = 1 + u64::from(i) * 1_000_000;
            w
        };
        let mut two = Self {
            shards: [shard(0), shard(1)],
            map,
            wire: Vec::new(),
            next_request: 0,
        };
        for i in 0..2 {
            two.learn_levels(i);
        }
        two
    }

    /// Core `i` (just started) asks the other how full its queues are, and takes the answer;
    /// what else waits on the transport waits on.
    pub(crate) fn learn_levels(&mut self, i: usize) {
        let waiting = std::mem::take(&mut self.wire);
        let w = &mut self.shards[i];
        w.relay.handle_timeout(w.now);
        let outs = w.drain();
        self.keep(&outs);
        let levels = |o: &Output| {
            matches!(
                o,
                Output::Cross(Crossing::LevelsAsked(_) | Crossing::Levels(_))
            )
        };
        let (asked, rest): (Vec<Output>, Vec<Output>) =
            std::mem::take(&mut self.wire).into_iter().partition(levels);
        self.wire = asked;
        self.carry(|_, _| Fate::Deliver);
        self.wire = waiting.into_iter().chain(rest).collect();
    }

    /// Core `i` crashes and starts again from the store, and learns the other's levels.
    pub(crate) fn restart(&mut self, i: usize) {
        let store = Box::new(self.shards[i].mem.clone());
        self.shards[i].restart(store);
        self.learn_levels(i);
    }

    pub(crate) fn of(&self, u: &User) -> usize {
        usize::from(self.map.of_user(&wire::UserUuid::parse(&u.uuid).unwrap()).0)
    }

    /// Keeps what crosses among `outs` for the transport.
    pub(crate) fn keep(&mut self, outs: &[Output]) {
        self.wire.extend(
            outs.iter()
                .filter(|o| matches!(o, Output::Cross(_)))
                .cloned(),
        );
    }

    /// Takes what waits on the transport, each with its fate (`fate(i, output)`), until
    /// nothing is left; returns every output of the cores that is not a crossing.
    pub(crate) fn carry(&mut self, mut fate: impl FnMut(usize, &Output) -> Fate) -> Vec<Output> {
        let mut others = Vec::new();
        let mut n = 0;
        while !self.wire.is_empty() {
            let o = self.wire.remove(0);
            let times = match fate(n, &o) {
                Fate::Deliver => 1,
                Fate::Lose => 0,
                Fate::Repeat => 2,
            };
            n += 1;
            for _ in 0..times {
                others.extend(self.hand(&o));
            }
        }
        others
    }

    /// Hands crossing `o` to the core it goes to; what that core sends on is kept for the
    /// transport, and its other outputs are returned.
    pub(crate) fn hand(&mut self, o: &Output) -> Vec<Output> {
        let Output::Cross(c) = o else {
            unreachable!("only crossings are kept")
        };
        let w = &mut self.shards[usize::from(c.to().0)];
        w.relay.handle_crossing(w.now, c.clone());
        let outs = w.drain();
        self.keep(&outs);
        outs.into_iter()
            .filter(|o| !matches!(o, Output::Cross(_)))
            .collect()
    }

    /// Both cores' clocks move on by `ms`; what they send again is kept for the transport,
    /// and their other outputs are returned.
    pub(crate) fn advance(&mut self, ms: u64) -> Vec<Output> {
        let mut others = Vec::new();
        for i in 0..self.shards.len() {
            let w = &mut self.shards[i];
            w.now = w.now.plus_ms(ms);
            w.relay.handle_timeout(w.now);
            let outs = w.drain();
            self.keep(&outs);
            others.extend(outs.into_iter().filter(|o| !matches!(o, Output::Cross(_))));
        }
        others
    }

    /// `from` (connected to its shard) sends message `id` to `to`; returns what its shard
    /// answered at once (nothing crossed yet).
    pub(crate) fn post(&mut self, from: &User, to: &User, conv: &str, id: &str) -> Vec<Output> {
        let i = self.of(from);
        let outs = self.shards[i].msg(from, to, conv, id);
        self.keep(&outs);
        outs
    }

    /// [`Two::post`] from the owner's side: returns the ack's seq.
    pub(crate) fn send(&mut self, from: &User, to: &User, conv: &str, id: &str) -> u64 {
        let outs = self.post(from, to, conv, id);
        let acked = acks(&frames(&outs, from.conn.unwrap()));
        assert_eq!(acked.len(), 1, "{outs:?}");
        acked[0].1
    }

    /// `u`'s request to its shard, numbered as a shell numbers it (so that it may be
    /// forwarded to the other shard), with what crosses carried with its `fate` until nothing
    /// is left: its answer (`None`: none came yet) and every other output of the cores.
    pub(crate) fn request(
        &mut self,
        u: &User,
        req: HttpRequest,
        fate: impl FnMut(usize, &Output) -> Fate,
    ) -> (Option<HttpResponse>, Vec<Output>) {
        self.request_at(self.of(u), req, fate)
    }

    /// [`Two::request`] to shard `i`, whoever sends it.
    pub(crate) fn request_at(
        &mut self,
        i: usize,
        req: HttpRequest,
        fate: impl FnMut(usize, &Output) -> Fate,
    ) -> (Option<HttpResponse>, Vec<Output>) {
        self.next_request += 1;
        let id = RequestId(self.next_request);
        let w = &mut self.shards[i];
        let now = w.now;
        let at_once = w.relay.handle_request(now, id, req);
        let outs = w.drain();
        self.keep(&outs);
        let mut others: Vec<Output> = outs
            .into_iter()
            .filter(|o| !matches!(o, Output::Cross(_)))
            .collect();
        others.extend(self.carry(fate));
        let answer = at_once.or_else(|| answer_to(&others, id));
        (answer, others)
    }

    /// The committed rows of `table`.
    pub(crate) fn rows(&self, table: Table) -> usize {
        self.shards[0].rows(table).len()
    }
}

/// The answer to request `id` among `outs`.
pub(crate) fn answer_to(outs: &[Output], id: RequestId) -> Option<HttpResponse> {
    outs.iter().find_map(|o| match o {
        Output::Http { id: i, response } if *i == id => Some(response.clone()),
        _ => None,
    })
}

/// Users registered on `w` until two are on different shards of a two-shard map, returned as
/// (the one whose shard owns their conversation, the other).
pub(crate) fn across(w: &mut World) -> (User, User) {
    let map = ShardMap::new(2).unwrap();
    let shard = |u: &User| map.of_user(&wire::UserUuid::parse(&u.uuid).unwrap());
    let first = w.user("first");
    for n in 0..32 {
        let u = w.user(&format!("user{n}"));
        if shard(&u) != shard(&first) {
            return if first.uuid < u.uuid {
                (first, u)
            } else {
                (u, first)
            };
        }
    }
    panic!("32 users on one shard of two");
}

/// Owner `a` and recipient `b` on the two shards, befriended, each connected to its shard
/// (`b` synced when `b_online`).
pub(crate) fn two_shards(b_online: bool) -> (Two, User, User, String) {
    two_shards_with(fast_config(), b_online)
}

/// [`two_shards`] with `config` on every core.
fn two_shards_with(config: relay_core::Config, b_online: bool) -> (Two, User, User, String) {
    let mut setup = World::with_config(config);
    let (mut a, mut b) = across(&mut setup);
    let conv = setup.befriend(&a, &b);
    let mut two = Two::split(setup);
    let (ia, ib) = (two.of(&a), two.of(&b));
    assert_ne!(ia, ib);
    let ca = two.shards[ia].connect(&mut a);
    two.shards[ia].sync(ca);
    if b_online {
        let cb = two.shards[ib].connect(&mut b);
        two.shards[ib].sync(cb);
    }
    (two, a, b, conv)
}

fn delivered(outs: &[Output], u: &User) -> Vec<(String, u64)> {
    msgs(&frames(outs, u.conn.unwrap()))
}

#[test]
fn a_message_crosses_to_the_recipients_shard_once_and_its_outbox_row_goes() {
    let (mut two, a, b, conv) = two_shards(true);
    let seq = two.send(&a, &b, &conv, "m1");
    assert_eq!(
        two.rows(Table::Outbox),
        1,
        "the outbox row commits with the message"
    );
    assert_eq!(two.wire.len(), 1, "one hand-off, released with the ack");
    let out = two.carry(|_, _| Fate::Deliver);
    assert_eq!(delivered(&out, &b), vec![("m1".to_owned(), seq)]);
    assert_eq!(
        two.rows(Table::Outbox),
        0,
        "acknowledged: the row is deleted"
    );
    let marks = two.shards[0].rows(Table::InboxMarks);
    assert_eq!(marks.len(), 1);
    let mark: Value = serde_json::from_slice(&marks[0].1).unwrap();
    assert_eq!(mark["through"], seq);
    let (ia, ib) = (two.of(&a), two.of(&b));
    assert_eq!(two.shards[ia].relay.stats().messages_handed_off, 1);
    assert_eq!(two.shards[ib].relay.stats().handoffs_applied, 1);
    assert_eq!(two.shards[ia].relay.handoff_backlog(), (0, 0));
    // Nothing more crosses once it is acknowledged.
    two.advance(5_000);
    assert!(two.wire.is_empty(), "{:?}", two.wire);
}

/// The hand-offs waiting on the transport, taken off it (nothing is carried).
fn handoffs_waiting(two: &mut Two) -> Vec<Crossing> {
    std::mem::take(&mut two.wire)
        .into_iter()
        .filter_map(|o| match o {
            Output::Cross(c @ Crossing::Handoff(_)) => Some(c),
            _ => None,
        })
        .collect()
}

/// On a recipient shard whose commits are pipelined, a hand-off reaches its recipient's
/// connection as soon as it is applied, before the apply's commit: its owner's commit made it
/// durable. The acknowledgement to the owner still waits for the apply's commit.
#[test]
fn a_handoff_is_delivered_before_its_apply_commits_and_acknowledged_after() {
    let (mut two, a, b, conv) = two_shards(true);
    let ib = two.of(&b);
    two.shards[ib].pipeline();
    let seq = two.send(&a, &b, &conv, "m1");
    let handoffs = handoffs_waiting(&mut two);
    assert_eq!(handoffs.len(), 1);
    let w = &mut two.shards[ib];
    w.relay.handle_crossing(w.now, handoffs[0].clone());
    let early = w.released();
    assert_eq!(delivered(&early, &b), vec![("m1".to_owned(), seq)]);
    assert!(
        !early
            .iter()
            .any(|o| matches!(o, Output::Cross(Crossing::Applied(_)))),
        "acknowledged before the apply's commit: {early:?}"
    );
    w.settle();
    let after = w.released();
    assert!(
        after
            .iter()
            .any(|o| matches!(o, Output::Cross(Crossing::Applied(_)))),
        "{after:?}"
    );
    assert!(delivered(&after, &b).is_empty(), "delivered once");
}

/// A frame for the recipient's connection that waits for a commit holds the hand-off's
/// delivery behind it: a connection's frames keep their order.
#[test]
fn a_handoff_waits_behind_a_frame_of_its_connection_that_waits_for_a_commit() {
    let (mut two, a, b, conv) = two_shards(true);
    let ib = two.of(&b);
    two.shards[ib].pipeline();
    let seqs: Vec<u64> = ["m1", "m2"]
        .iter()
        .map(|id| two.send(&a, &b, &conv, id))
        .collect();
    let handoffs = handoffs_waiting(&mut two);
    assert_eq!(handoffs.len(), 2);
    let w = &mut two.shards[ib];
    let cb = b.conn.unwrap();
    w.relay.handle_crossing(w.now, handoffs[0].clone());
    assert_eq!(delivered(&w.released(), &b).len(), 1, "m1 went early");
    // `b` sends a frame the relay refuses: the error frame waits for the open batch's
    // commit ...
    w.relay
        .handle_text(w.now, cb, &json!({"type": "no such frame"}).to_string());
    assert!(frames(&w.released(), cb).is_empty(), "the refusal waits");
    // ... and so does m2, which would otherwise pass it.
    w.relay.handle_crossing(w.now, handoffs[1].clone());
    assert!(
        delivered(&w.released(), &b).is_empty(),
        "m2 passed a held frame"
    );
    w.settle();
    let after = frames(&w.released(), cb);
    let got = msgs(&after);
    assert!(
        got.contains(&("m2".to_owned(), seqs[1])),
        "m2 after the commit: {after:?}"
    );
    let m2_at = after
        .iter()
        .position(|f| matches!(f, ServerFrame::Msg(m) if m.seq.get() == seqs[1]))
        .unwrap();
    assert!(
        matches!(after[..m2_at], [ServerFrame::Error(_)]),
        "the refusal first: {after:?}"
    );
}

#[test]
fn lost_repeated_and_reordered_handoffs_are_applied_once_in_order() {
    let (mut two, a, mut b, conv) = two_shards(false);
    let seqs: Vec<u64> = (1..=5)
        .map(|i| two.send(&a, &b, &conv, &format!("m{i}")))
        .collect();
    // The first is lost, the third repeated, the rest arrive in reverse.
    two.wire.reverse();
    let first_seq = seqs[0];
    two.carry(|_, o| match o {
        Output::Cross(Crossing::Handoff(h)) if h.seq.get() == first_seq => Fate::Lose,
        Output::Cross(Crossing::Handoff(h)) if h.seq.get() == seqs[2] => Fate::Repeat,
        _ => Fate::Deliver,
    });
    let ib = two.of(&b);
    assert_eq!(
        two.shards[ib].relay.stats().handoffs_applied,
        0,
        "all wait for the first"
    );
    assert_eq!(two.shards[ib].relay.handoff_backlog().1, 4);
    // The owner sends the first again after `RESEND_MS` (and the held ones too).
    two.advance(relay_core::handoff::RESEND_MS);
    two.carry(|_, _| Fate::Deliver);
    assert_eq!(two.shards[ib].relay.stats().handoffs_applied, 5);
    assert_eq!(two.rows(Table::Outbox), 0);
    let cb = two.shards[ib].connect(&mut b);
    let out = two.shards[ib].sync(cb);
    let got = delivered(&out, &b);
    let want: Vec<(String, u64)> = (1..=5).map(|i| (format!("m{i}"), seqs[i - 1])).collect();
    assert_eq!(got, want, "each once, in seq order");
}

#[test]
fn the_owner_crashing_before_the_apply_sends_the_handoff_again_from_its_outbox() {
    let (mut two, a, b, conv) = two_shards(true);
    let seq = two.send(&a, &b, &conv, "m1");
    two.wire.clear(); // lost with the crash
    let ia = two.of(&a);
    two.restart(ia);
    assert_eq!(
        two.shards[ia].relay.handoff_backlog().0,
        1,
        "read back at start"
    );
    two.advance(1);
    let out = two.carry(|_, _| Fate::Deliver);
    assert_eq!(delivered(&out, &b), vec![("m1".to_owned(), seq)]);
    assert_eq!(two.rows(Table::Outbox), 0);
}

#[test]
fn the_recipients_shard_crashing_after_the_apply_answers_the_resend_as_a_repeat() {
    let (mut two, a, mut b, conv) = two_shards(false);
    let seq = two.send(&a, &b, &conv, "m1");
    // Applied, and its acknowledgement lost.
    two.carry(|_, o| {
        if matches!(o, Output::Cross(Crossing::Applied(_))) {
            Fate::Lose
        } else {
            Fate::Deliver
        }
    });
    let ib = two.of(&b);
    two.restart(ib);
    two.advance(relay_core::handoff::RESEND_MS);
    two.carry(|_, _| Fate::Deliver);
    assert_eq!(two.shards[ib].relay.stats().handoffs_repeated, 1);
    assert_eq!(two.shards[ib].relay.stats().handoffs_applied, 0);
    assert_eq!(two.rows(Table::Outbox), 0);
    let cb = two.shards[ib].connect(&mut b);
    let out = two.shards[ib].sync(cb);
    assert_eq!(delivered(&out, &b), vec![("m1".to_owned(), seq)]);
}

#[test]
fn a_resend_to_the_owner_is_acknowledged_again_and_not_handed_twice() {
    let (mut two, a, b, conv) = two_shards(true);
    let seq = two.send(&a, &b, &conv, "m1");
    let out = two.carry(|_, _| Fate::Deliver);
    assert_eq!(delivered(&out, &b).len(), 1);
    assert_eq!(two.send(&a, &b, &conv, "m1"), seq);
    assert!(
        two.wire.is_empty(),
        "a resend hands nothing: {:?}",
        two.wire
    );
    let ia = two.of(&a);
    assert_eq!(two.shards[ia].relay.stats().messages_handed_off, 1);
}

#[test]
fn a_relay_of_one_shard_hands_nothing_off() {
    let mut w = World::new();
    let (mut a, mut b) = across(&mut w);
    let conv = w.befriend(&a, &b);
    w.connect(&mut a);
    let cb = w.connect(&mut b);
    w.sync(cb);
    let out = w.msg(&a, &b, &conv, "m1");
    assert!(!out.iter().any(|o| matches!(o, Output::Cross(_))));
    assert!(
        frames(&out, cb)
            .iter()
            .any(|f| matches!(f, ServerFrame::Msg(_)))
    );
    assert_eq!(w.rows(Table::Outbox).len(), 0);
    let _: &Relay = &w.relay;
}

#[test]
fn each_shard_starts_with_its_own_users_queues_only() {
    let (mut two, a, b, conv) = two_shards(false);
    two.send(&a, &b, &conv, "m1");
    two.carry(|_, _| Fate::Deliver);
    let (ia, ib) = (two.of(&a), two.of(&b));
    for i in [ia, ib] {
        two.restart(i);
    }
    assert_eq!(
        two.shards[ib].relay.backlog_messages(),
        1,
        "b's queue, at b's shard"
    );
    assert_eq!(
        two.shards[ia].relay.backlog_messages(),
        0,
        "not at the owner's"
    );
    assert_eq!(two.shards[ia].relay.handoff_backlog(), (0, 0));
}

#[test]
fn the_other_members_message_is_decided_by_the_owner_and_acknowledged_after_its_verdict() {
    let (mut two, a, b, conv) = two_shards(true);
    let out = two.post(&b, &a, &conv, "from-b");
    assert!(
        acks(&frames(&out, b.conn.unwrap())).is_empty(),
        "no ack before the owner's"
    );
    let out = two.carry(|_, _| Fate::Deliver);
    let acked = acks(&frames(&out, b.conn.unwrap()));
    assert_eq!(acked.len(), 1, "{out:?}");
    let seq = acked[0].1;
    assert_eq!(delivered(&out, &a), vec![("from-b".to_owned(), seq)]);
    // The owner's own message takes the next seq of the same conversation.
    let next = two.send(&a, &b, &conv, "from-a");
    assert_eq!(next, seq + 1);
    let out = two.carry(|_, _| Fate::Deliver);
    assert_eq!(delivered(&out, &b), vec![("from-a".to_owned(), next)]);
    let (ia, ib) = (two.of(&a), two.of(&b));
    assert_eq!(two.shards[ib].relay.stats().messages_submitted, 1);
    assert_eq!(two.shards[ia].relay.stats().messages_handed_off, 1);
    // A resend of b's id is answered with its first seq, and stored once.
    two.post(&b, &a, &conv, "from-b");
    let out = two.carry(|_, _| Fate::Deliver);
    assert_eq!(
        acks(&frames(&out, b.conn.unwrap())),
        vec![("from-b".to_owned(), seq)]
    );
    assert!(delivered(&out, &a).is_empty());
}

/// A core reading ahead never reads for what another shard sent on its own task: a
/// submission whose conversation is not in memory (the owner just started) waits for its
/// reads, what comes after it waits behind it in order, and both are decided once the reads
/// are back.
#[test]
fn a_submission_the_owner_cannot_judge_from_memory_waits_for_its_reads_in_order() {
    let (mut two, a, b, conv) = two_shards(true);
    let ia = two.of(&a);
    two.post(&b, &a, &conv, "before");
    two.carry(|_, _| Fate::Deliver);
    two.shards[ia].read_ahead(false);
    two.restart(ia);
    let inline = two.shards[ia].relay.stats().reads_inline;
    let out = two.post(&b, &a, &conv, "m1");
    assert!(acks(&frames(&out, b.conn.unwrap())).is_empty());
    two.carry(|_, _| Fate::Deliver);
    let owner = &two.shards[ia];
    assert_eq!(owner.relay.stats().crossings_parked, 1);
    assert!(
        owner.reads_waiting() > 0,
        "its reads are asked of the shell"
    );
    two.post(&b, &a, &conv, "m2");
    two.carry(|_, _| Fate::Deliver);
    let owner = &two.shards[ia];
    assert_eq!(
        owner.relay.prefetch().parked_crossings,
        2,
        "behind the first"
    );
    assert_eq!(owner.relay.stats().crossings_parked, 1);
    let outs = two.shards[ia].finish_reads();
    two.keep(&outs);
    let out = two.carry(|_, _| Fate::Deliver);
    let acked = acks(&frames(&out, b.conn.unwrap()));
    let ids: Vec<&str> = acked.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["m1", "m2"], "{out:?}");
    assert!(acked[0].1 < acked[1].1, "decided in the order they came");
    let owner = &two.shards[ia];
    assert_eq!(owner.relay.prefetch().parked_crossings, 0);
    assert_eq!(
        owner.relay.stats().reads_inline,
        inline,
        "no read on the core"
    );
}

#[test]
fn a_lost_submission_leaves_no_ack_and_its_resend_is_stored_once() {
    let (mut two, a, b, conv) = two_shards(true);
    let mut to_a = Vec::new();
    two.post(&b, &a, &conv, "m1");
    let out = two.carry(|_, _| Fate::Lose);
    assert!(acks(&frames(&out, b.conn.unwrap())).is_empty());
    // The verdict is lost instead: the message is stored, the sender not told.
    two.post(&b, &a, &conv, "m2");
    let out = two.carry(|_, o| {
        if matches!(o, Output::Cross(Crossing::Verdict(_))) {
            Fate::Lose
        } else {
            Fate::Deliver
        }
    });
    assert!(acks(&frames(&out, b.conn.unwrap())).is_empty());
    to_a.extend(delivered(&out, &a));
    // The client sends both again (as after a reconnect).
    two.post(&b, &a, &conv, "m1");
    two.post(&b, &a, &conv, "m2");
    let out = two.carry(|_, _| Fate::Deliver);
    to_a.extend(delivered(&out, &a));
    let mut acked = acks(&frames(&out, b.conn.unwrap()));
    assert_eq!(acked.len(), 2, "{out:?}");
    acked.sort_by_key(|(_, seq)| *seq);
    assert_eq!(
        to_a, acked,
        "each delivered once, with the seq its ack named"
    );
}

#[test]
fn a_submission_whose_verdict_does_not_come_is_sent_again_on_the_open_connection() {
    let (mut two, a, b, conv) = two_shards(true);
    let ib = two.of(&b);
    two.post(&b, &a, &conv, "m1");
    two.carry(|_, _| Fate::Lose);
    two.post(&b, &a, &conv, "m2");
    let out = two.carry(|_, o| {
        if matches!(o, Output::Cross(Crossing::Verdict(_))) {
            Fate::Lose
        } else {
            Fate::Deliver
        }
    });
    let mut to_a = delivered(&out, &a);
    assert_eq!(to_a.len(), 1, "m2 is stored, its verdict lost");
    // No reconnect: b's shard sends both again once the resend period passed.
    two.advance(relay_core::handoff::RESEND_MS - 1);
    two.carry(|_, _| Fate::Deliver);
    assert_eq!(two.shards[ib].relay.stats().submissions_resent, 0);
    two.advance(1);
    let out = two.carry(|_, _| Fate::Deliver);
    assert_eq!(two.shards[ib].relay.stats().submissions_resent, 2);
    to_a.extend(delivered(&out, &a));
    let mut acked = acks(&frames(&out, b.conn.unwrap()));
    acked.sort_by_key(|(_, seq)| *seq);
    to_a.sort_by_key(|(_, seq)| *seq);
    assert_eq!(acked.len(), 2, "{out:?}");
    assert_eq!(to_a, acked, "each stored once, with the seq its ack named");
    // Answered: nothing is sent again.
    two.advance(relay_core::handoff::RESEND_MS * 3);
    two.carry(|_, _| Fate::Deliver);
    assert_eq!(two.shards[ib].relay.stats().submissions_resent, 2);
}

/// One step of a run of two shards.
#[derive(Debug, Clone)]
enum Step {
    /// The owner-side member (`true`) or the other sends message `id` (a small pool: ids
    /// come again, as resends).
    Send(bool, u8),
    /// The transport carries what waits: each lost, delivered or repeated by these draws
    /// (cycled), reversed first when `true`.
    Carry(Vec<u8>, bool),
    /// Time passes on both cores.
    Advance(u64),
    /// A core crashes and starts again from the store; its member reconnects.
    Restart(bool),
    /// A member (the owner-side one when `true`) sends a `read` receipt through the last seq
    /// delivered to it.
    Read(bool),
    /// A member retracts the `n`-th of the messages it was acknowledged.
    Retract(bool, u8),
}

fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    prop_oneof![
        5 => (any::<bool>(), 0..12u8).prop_map(|(a, id)| Step::Send(a, id)),
        4 => (proptest::collection::vec(any::<u8>(), 1..6), any::<bool>())
            .prop_map(|(f, r)| Step::Carry(f, r)),
        2 => (1..2_500u64).prop_map(Step::Advance),
        1 => any::<bool>().prop_map(Step::Restart),
        2 => any::<bool>().prop_map(Step::Read),
        1 => (any::<bool>(), any::<u8>()).prop_map(|(a, n)| Step::Retract(a, n)),
    ]
}

fn is_retract_submission(o: &Output) -> bool {
    matches!(o, Output::Cross(Crossing::Submit(s)) if matches!(s.frame, relay_core::handoff::Submitted::Retract(_)))
}

/// What the run saw.
#[derive(Default)]
struct Seen {
    /// Every ack: (sender is the owner-side member, id) -> seq.
    acked: std::collections::BTreeMap<(bool, String), u64>,
    /// Every message delivered: (to the owner-side member, id) -> seqs it came with.
    delivered: std::collections::BTreeMap<(bool, String), std::collections::BTreeSet<u64>>,
    /// The highest `read` receipt each member sent and was not refused (owner-side first).
    read_sent: [u64; 2],
    /// The highest `read` receipt each member got.
    read_got: [u64; 2],
    /// Retractions sent: (by the owner-side member, id).
    retracted: std::collections::BTreeSet<(bool, String)>,
    /// Retractions each member got: (to the owner-side member, id).
    retractions: std::collections::BTreeSet<(bool, String)>,
}

impl Seen {
    fn note(&mut self, outs: &[Output], a: &User, b: &User) -> Result<(), String> {
        for (owner_side, u) in [(true, a), (false, b)] {
            let Some(conn) = u.conn else { continue };
            let fs = frames(outs, conn);
            for (id, seq) in acks(&fs) {
                let first = self.acked.entry((owner_side, id.clone())).or_insert(seq);
                if *first != seq {
                    return Err(format!("{id} acknowledged with {first} and then {seq}"));
                }
            }
            for (id, seq) in msgs(&fs) {
                self.delivered
                    .entry((owner_side, id))
                    .or_default()
                    .insert(seq);
            }
            let me = usize::from(!owner_side);
            for f in &fs {
                match f {
                    ServerFrame::Read(r) => self.read_got[me] = self.read_got[me].max(r.seq.get()),
                    ServerFrame::Retract(r) => {
                        self.retractions.insert((owner_side, r.id.to_string()));
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// Whatever the transport and the crashes do, once they stop: every acknowledged message
    /// reaches its recipient with the seq its ack named, no id is delivered with two seqs, and
    /// no seq of the conversation names two messages; both outboxes drain.
    #[test]
    fn two_shards_deliver_every_acknowledged_message_with_its_seq(
        steps in proptest::collection::vec(step(), 1..40),
    ) {
        let (mut two, mut a, mut b, conv) = two_shards(true);
        let mut seen = Seen::default();
        for s in steps {
            let outs = match s {
                Step::Send(owner_side, id) => {
                    let (from, to) = if owner_side { (&a, &b) } else { (&b, &a) };
                    two.post(from, to, &conv, &format!("m{id}-{}", u8::from(owner_side)))
                }
                Step::Carry(fates, reverse) => {
                    if reverse {
                        two.wire.reverse();
                    }
                    two.carry(|n, o| match fates[n % fates.len()] % 8 {
                        // A `retract` has no ack, so nothing tells its client to send it again:
                        // its submission is lost only with the process (which also drops the
                        // author's connection), not by one core's crash as here.
                        0 if is_retract_submission(o) => Fate::Deliver,
                        0 => Fate::Lose,
                        1 => Fate::Repeat,
                        _ => Fate::Deliver,
                    })
                }
                Step::Advance(ms) => {
                    two.advance(ms);
                    Vec::new()
                }
                Step::Read(owner_side) => {
                    let (reader, author) = if owner_side { (&a, &b) } else { (&b, &a) };
                    let last = seen
                        .delivered
                        .iter()
                        .filter(|((to, _), _)| *to == owner_side)
                        .flat_map(|(_, seqs)| seqs.iter().copied())
                        .max();
                    match last {
                        Some(seq) => {
                            let read = json!({"type":"read","conv_id":conv,"seq":seq,"to":author.alias});
                            let outs = two.frame(reader, &read);
                            let refused = !crate::world::errors(&frames(&outs, reader.conn.unwrap())).is_empty();
                            let me = usize::from(!owner_side);
                            if !refused {
                                seen.read_sent[me] = seen.read_sent[me].max(seq);
                            }
                            outs
                        }
                        None => Vec::new(),
                    }
                }
                Step::Retract(owner_side, n) => {
                    let (author, to) = if owner_side { (&a, &b) } else { (&b, &a) };
                    let mine: Vec<String> = seen
                        .acked
                        .keys()
                        .filter(|(by, _)| *by == owner_side)
                        .map(|(_, id)| id.clone())
                        .collect();
                    if mine.is_empty() {
                        Vec::new()
                    } else {
                        let id = mine[usize::from(n) % mine.len()].clone();
                        seen.retracted.insert((owner_side, id.clone()));
                        let r = json!({"type":"retract","id":id,"to":to.alias,"conv_id":conv});
                        two.frame(author, &r)
                    }
                }
                Step::Restart(owner_side) => {
                    let u = if owner_side { &mut a } else { &mut b };
                    let i = two.of(u);
                    two.restart(i);
                    let c = two.shards[i].connect(u);
                    two.shards[i].sync(c)
                }
            };
            seen.note(&outs, &a, &b).map_err(proptest::test_runner::TestCaseError::fail)?;
        }
        // Healing: nothing lost any more, time for every resend, then both reconnect.
        for _ in 0..4 {
            two.advance(relay_core::handoff::RESEND_MS);
            let outs = two.carry(|_, _| Fate::Deliver);
            seen.note(&outs, &a, &b).map_err(proptest::test_runner::TestCaseError::fail)?;
        }
        for owner_side in [true, false] {
            let u = if owner_side { &mut a } else { &mut b };
            let i = two.of(u);
            let c = two.shards[i].connect(u);
            let outs = two.shards[i].sync(c);
            seen.note(&outs, &a, &b).map_err(proptest::test_runner::TestCaseError::fail)?;
        }
        proptest::prop_assert_eq!(two.shards[0].relay.handoff_backlog(), (0, 0));
        proptest::prop_assert_eq!(two.shards[1].relay.handoff_backlog(), (0, 0));
        let mut seqs = std::collections::BTreeSet::new();
        for ((owner_side, id), seq) in &seen.acked {
            proptest::prop_assert!(seqs.insert(*seq), "seq {} acknowledged twice", seq);
            let got = seen.delivered.get(&(!owner_side, id.clone()));
            if seen.retracted.contains(&(*owner_side, id.clone())) {
                // Its queued copy may have been dropped; any copy that came has its seq.
                let once = got.is_none_or(|seqs| seqs.len() == 1 && seqs.contains(seq));
                proptest::prop_assert!(once, "retracted {} came with {:?}", id, got);
                continue;
            }
            proptest::prop_assert_eq!(
                got.cloned(),
                Some([*seq].into_iter().collect()),
                "{} (acked {}) reached its recipient so", id, seq
            );
        }
        // Every receipt reached its author; every retraction of an acknowledged message, its
        // recipient.
        proptest::prop_assert!(seen.read_got[0] >= seen.read_sent[1], "reads to the owner side");
        proptest::prop_assert!(seen.read_got[1] >= seen.read_sent[0], "reads to the other");
        for (by, id) in &seen.retracted {
            proptest::prop_assert!(
                seen.retractions.contains(&(!by, id.clone())),
                "the retraction of {} did not reach its recipient", id
            );
        }
    }
}

impl Two {
    /// `from` sends `frame` on its connection; returns what its shard answered at once.
    fn frame(&mut self, from: &User, frame: &Value) -> Vec<Output> {
        let i = self.of(from);
        let outs = self.shards[i].send(from.conn.unwrap(), frame.clone());
        self.keep(&outs);
        outs
    }
}

/// The receipts among `outs` for `u`: (read, conv, seq, from).
fn receipts(outs: &[Output], u: &User) -> Vec<(bool, u64, String)> {
    frames(outs, u.conn.unwrap())
        .into_iter()
        .filter_map(|f| match f {
            ServerFrame::Delivered(r) => Some((false, r.seq.get(), r.from?.to_string())),
            ServerFrame::Read(r) => Some((true, r.seq.get(), r.from?.to_string())),
            _ => None,
        })
        .collect()
}

#[test]
fn receipts_cross_to_the_authors_shard_both_ways_and_wait_for_an_offline_author() {
    let (mut two, mut a, mut b, conv) = two_shards(true);
    // a (the owner's side) writes to b; b's read receipt crosses back as a notice.
    let seq = two.send(&a, &b, &conv, "m1");
    two.carry(|_, _| Fate::Deliver);
    let read = json!({"type":"read","conv_id":conv,"seq":seq,"to":a.alias});
    two.frame(&b, &read);
    let out = two.carry(|_, _| Fate::Deliver);
    assert_eq!(receipts(&out, &a), vec![(true, seq, b.alias.clone())]);
    assert_eq!(two.rows(Table::Notices), 0, "taken: the notice row is gone");
    // b writes to a (submitted to the owner); a's receipt crosses to b's shard, b offline:
    // kept there for b's next sync, and sent again until taken.
    two.post(&b, &a, &conv, "m2");
    let out = two.carry(|_, _| Fate::Deliver);
    let seq2 = acks(&frames(&out, b.conn.unwrap()))[0].1;
    let ib = two.of(&b);
    two.shards[ib]
        .relay
        .handle_disconnect(two.shards[ib].now, b.conn.unwrap());
    let delivered = json!({"type":"delivered","conv_id":conv,"seq":seq2,"to":b.alias});
    two.frame(&a, &delivered);
    assert_eq!(
        two.rows(Table::Notices),
        1,
        "kept with the receipt's commit"
    );
    two.carry(|_, _| Fate::Lose);
    two.advance(relay_core::handoff::RESEND_MS);
    two.carry(|_, _| Fate::Deliver);
    assert_eq!(two.rows(Table::Notices), 0);
    let cb = two.shards[ib].connect(&mut b);
    let out = two.shards[ib].sync(cb);
    assert_eq!(receipts(&out, &b), vec![(false, seq2, a.alias.clone())]);
    // A receipt beyond what reached b's shard is refused there.
    let beyond = json!({"type":"read","conv_id":conv,"seq":seq + 5,"to":a.alias});
    let out = two.frame(&b, &beyond);
    assert_eq!(
        crate::world::errors(&frames(&out, cb)),
        vec!["INVALID_RECEIPT"]
    );
    let _ = &mut a;
}

#[test]
fn retractions_cross_to_the_recipients_shard_and_the_owner_judges_the_other_members() {
    let (mut two, a, mut b, conv) = two_shards(false);
    let seq = two.send(&a, &b, &conv, "m1");
    two.carry(|_, _| Fate::Deliver);
    // a retracts while b is offline: b's shard drops the queued copy and keeps the retraction.
    let retract = json!({"type":"retract","id":"m1","to":b.alias,"conv_id":conv});
    two.frame(&a, &retract);
    two.carry(|_, _| Fate::Deliver);
    let ib = two.of(&b);
    let cb = two.shards[ib].connect(&mut b);
    let out = two.shards[ib].sync(cb);
    assert!(
        delivered(&out, &b).is_empty(),
        "the copy was dropped: {out:?}"
    );
    let retracted: Vec<String> = frames(&out, cb)
        .into_iter()
        .filter_map(|f| match f {
            ServerFrame::Retract(r) => Some(r.id.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(retracted, vec!["m1".to_owned()]);
    // b may not retract a's message: the owner refuses, and b is told.
    let not_bs = json!({"type":"retract","id":"m1","to":a.alias,"conv_id":conv});
    two.frame(&b, &not_bs);
    let out = two.carry(|_, _| Fate::Deliver);
    assert_eq!(
        crate::world::errors(&frames(&out, cb)),
        vec!["NOT_THE_AUTHOR"]
    );
    // b's own message, retracted by b: the owner drops a's queued copy... a is online, so
    // it gets the retraction live.
    two.post(&b, &a, &conv, "m2");
    two.carry(|_, _| Fate::Deliver);
    let own = json!({"type":"retract","id":"m2","to":a.alias,"conv_id":conv});
    two.frame(&b, &own);
    let out = two.carry(|_, _| Fate::Deliver);
    assert!(
        frames(&out, a.conn.unwrap())
            .iter()
            .any(|f| matches!(f, ServerFrame::Retract(r) if r.id.as_str() == "m2")),
        "{out:?}"
    );
    assert!(seq > 0);
}

/// A retraction submitted to the owner and lost on its way is sent again until the owner
/// decided it (a `retract` has no answer on the wire: the verdict only stops the resends).
#[test]
fn a_lost_retraction_is_sent_again_until_the_owner_took_it() {
    let (mut two, a, b, conv) = two_shards(true);
    let ib = two.of(&b);
    two.post(&b, &a, &conv, "m2");
    two.carry(|_, _| Fate::Deliver);
    let own = json!({"type":"retract","id":"m2","to":a.alias,"conv_id":conv});
    two.frame(&b, &own);
    let out = two.carry(|_, _| Fate::Lose);
    let retracted_at_a = |out: &[Output]| {
        frames(out, a.conn.unwrap())
            .iter()
            .any(|f| matches!(f, ServerFrame::Retract(r) if r.id.as_str() == "m2"))
    };
    assert!(!retracted_at_a(&out));
    two.advance(relay_core::handoff::RESEND_MS);
    let out = two.carry(|_, _| Fate::Deliver);
    assert!(retracted_at_a(&out), "{out:?}");
    assert!(
        frames(&out, b.conn.unwrap()).is_empty(),
        "b is told nothing"
    );
    assert_eq!(two.shards[ib].relay.stats().submissions_resent, 1);
    two.advance(relay_core::handoff::RESEND_MS * 3);
    two.carry(|_, _| Fate::Deliver);
    assert_eq!(two.shards[ib].relay.stats().submissions_resent, 1, "taken");
}

#[test]
fn typing_and_call_signals_cross_at_most_once_and_an_offline_callee_is_answered() {
    let (mut two, a, mut b, conv) = two_shards(true);
    let typing = json!({"type":"typing","conv_id":conv,"to":b.alias,"crypto_v":1});
    two.frame(&a, &typing);
    let out = two.carry(|_, _| Fate::Deliver);
    assert!(
        frames(&out, b.conn.unwrap())
            .iter()
            .any(|f| matches!(f, ServerFrame::Typing(_)))
    );
    // A call to b rings on b's shard.
    let ia = two.of(&a);
    let outs = two.shards[ia].call(&a, "call_offer", &b.alias, "call-1");
    two.keep(&outs);
    let out = two.carry(|_, _| Fate::Deliver);
    assert!(
        frames(&out, b.conn.unwrap())
            .iter()
            .any(|f| matches!(f, ServerFrame::Call(_)))
    );
    // b gone: b's shard answers a's connection.
    let ib = two.of(&b);
    two.shards[ib]
        .relay
        .handle_disconnect(two.shards[ib].now, b.conn.unwrap());
    let outs = two.shards[ia].call(&a, "call_offer", &b.alias, "call-2");
    two.keep(&outs);
    let out = two.carry(|_, _| Fate::Deliver);
    assert_eq!(
        crate::world::errors(&frames(&out, a.conn.unwrap())),
        vec!["PEER_OFFLINE"]
    );
    let _ = &mut b;
}

#[test]
fn each_shard_counts_its_own_boots() {
    let (two, _a, _b, _conv) = two_shards(false);
    let meta: Vec<String> = two.shards[0]
        .rows(Table::Meta)
        .into_iter()
        .map(|(k, _)| k)
        .filter(|k| k.starts_with("boot_count"))
        .collect();
    assert_eq!(
        meta,
        vec!["boot_count".to_owned(), "boot_count/1".to_owned()]
    );
}

#[test]
fn an_owner_holds_at_most_the_conversations_share_unapplied() {
    let config = relay_core::Config {
        max_offline_queue_per_conversation: 3,
        ..fast_config()
    };
    let (mut two, a, b, conv) = two_shards_with(config, false);
    for i in 0..3 {
        two.send(&a, &b, &conv, &format!("m{i}"));
    }
    // Nothing carried: the recipient's shard has applied none of them.
    let out = two.post(&a, &b, &conv, "m3");
    assert_eq!(
        crate::world::errors(&frames(&out, a.conn.unwrap())),
        vec!["QUEUE_FULL"]
    );
    assert_eq!(
        two.rows(Table::Outbox),
        3,
        "the refused message was not stored"
    );
    two.carry(|_, _| Fate::Deliver);
    assert_eq!(two.rows(Table::Outbox), 0);
    // Applied, they are queued at the recipient's shard, which said so with its
    // acknowledgement: the conversation's share is still full.
    let out = two.post(&a, &b, &conv, "m4");
    assert_eq!(
        crate::world::errors(&frames(&out, a.conn.unwrap())),
        vec!["QUEUE_FULL"]
    );
    // The recipient takes them: its shard reports the fall, and there is room again.
    let ib = two.of(&b);
    let mut b = b;
    let cb = two.shards[ib].connect(&mut b);
    let out = two.shards[ib].sync(cb);
    let got = delivered(&out, &b);
    assert_eq!(got.len(), 3);
    let last = got[2].1;
    let receipt = json!({"type":"delivered","conv_id":conv,"seq":last,"to":a.alias});
    two.frame(&b, &receipt);
    two.carry(|_, _| Fate::Deliver);
    two.send(&a, &b, &conv, "m5");
}

/// A core that started and has not yet heard how full the other shard's queues are refuses a
/// message for that shard's users `STORAGE_UNAVAILABLE` (the client sends it again), and
/// takes it once the other shard answered.
#[test]
fn after_a_start_a_message_waits_for_the_other_shards_levels() {
    let (mut two, mut a, b, conv) = two_shards(false);
    let ia = two.of(&a);
    let store = Box::new(two.shards[ia].mem.clone());
    two.shards[ia].restart(store);
    two.shards[ia].connect(&mut a);
    let out = two.post(&a, &b, &conv, "m1");
    assert_eq!(
        crate::world::errors(&frames(&out, a.conn.unwrap())),
        vec!["STORAGE_UNAVAILABLE"]
    );
    two.learn_levels(ia);
    two.send(&a, &b, &conv, "m1");
}

/// A fall whose report is lost leaves the owner's view full: the message is refused, and
/// once the view is a second old the owner asks again, and the answer makes room.
#[test]
fn a_lost_fall_report_is_asked_for_again_once_the_view_is_stale() {
    let config = relay_core::Config {
        max_offline_queue_per_conversation: 2,
        ..fast_config()
    };
    let (mut two, a, mut b, conv) = two_shards_with(config, false);
    two.send(&a, &b, &conv, "m1");
    let last = two.send(&a, &b, &conv, "m2");
    two.carry(|_, _| Fate::Deliver);
    let ib = two.of(&b);
    let cb = two.shards[ib].connect(&mut b);
    two.shards[ib].sync(cb);
    let receipt = json!({"type":"delivered","conv_id":conv,"seq":last,"to":a.alias});
    two.frame(&b, &receipt);
    let lose_levels = |_, o: &Output| {
        if matches!(o, Output::Cross(Crossing::Levels(_))) {
            Fate::Lose
        } else {
            Fate::Deliver
        }
    };
    two.carry(lose_levels);
    let refused = |two: &mut Two, id: &str| {
        let out = two.post(&a, &b, &conv, id);
        crate::world::errors(&frames(&out, a.conn.unwrap()))
    };
    assert_eq!(refused(&mut two, "m3"), vec!["QUEUE_FULL"]);
    assert!(
        !two.wire
            .iter()
            .any(|o| matches!(o, Output::Cross(Crossing::LevelsAsked(_)))),
        "a fresh view is not asked for"
    );
    two.advance(relay_core::handoff::LEVELS_STALE_MS);
    assert_eq!(refused(&mut two, "m3"), vec!["QUEUE_FULL"]);
    two.carry(|_, _| Fate::Deliver);
    two.send(&a, &b, &conv, "m3");
}

/// The queues that fell in one group commit are reported to their owner once, when the batch
/// is committed, with their levels after every input of it.
#[test]
fn the_falls_of_one_batch_go_to_their_owner_in_one_report() {
    let (mut two, a, mut b, conv) = two_shards(false);
    let first = two.send(&a, &b, &conv, "m1");
    let last = two.send(&a, &b, &conv, "m2");
    two.carry(|_, _| Fate::Deliver);
    let ib = two.of(&b);
    let cb = two.shards[ib].connect(&mut b);
    two.shards[ib].sync(cb);
    let reports = |outs: &[Output]| -> Vec<relay_core::handoff::Levels> {
        outs.iter()
            .filter_map(|o| match o {
                Output::Cross(Crossing::Levels(l)) => Some(l.clone()),
                _ => None,
            })
            .collect()
    };
    let w = &mut two.shards[ib];
    w.relay.begin_batch();
    let mut outs = Vec::new();
    for seq in [first, last] {
        let receipt = json!({"type":"delivered","conv_id":conv,"seq":seq,"to":a.alias});
        outs.extend(w.send(cb, receipt));
    }
    assert!(reports(&outs).is_empty(), "nothing before the commit");
    w.relay.commit_batch().unwrap();
    let reports = reports(&w.drain());
    assert_eq!(
        reports.len(),
        1,
        "one report for both receipts: {reports:?}"
    );
    let [(_, _, level)] = reports[0].streams.as_slice() else {
        panic!("one stream: {reports:?}");
    };
    assert_eq!(
        level.stream,
        relay_core::handoff::Fill::default(),
        "as after both"
    );
}

/// Each of two shards decides at most half of the relay's total of queued bytes: the owner
/// counts what it handed to the other shard (and the levels reported back) against its share.
#[test]
fn each_shard_decides_at_most_its_share_of_the_relays_total() {
    let id = |n: usize| format!("t{n:03}");
    let charge = |n: usize| {
        let payload = crate::world::b64(format!("p-{}", id(n)).as_bytes());
        relay_core::limits::queued_message_bytes(id(n).len(), payload.len())
    };
    let fits = 5;
    let config = relay_core::Config {
        // Two shards: each decides half, room for `fits` messages and not one more.
        max_offline_queue_bytes_total: 2 * (fits * charge(0) + charge(0) - 1),
        ..fast_config()
    };
    let (mut two, a, b, conv) = two_shards_with(config, false);
    for n in 0..fits as usize {
        two.send(&a, &b, &conv, &id(n));
        two.carry(|_, _| Fate::Deliver);
    }
    let out = two.post(&a, &b, &conv, &id(fits as usize));
    assert_eq!(
        crate::world::errors(&frames(&out, a.conn.unwrap())),
        vec!["RELAY_QUEUE_FULL"]
    );
}
