#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::*;

const OWNER: ShardId = ShardId(0);
const DEST: ShardId = ShardId(1);
/// Streams of the runs: two recipients on the destination shard, two conversations.
const STREAMS: usize = 4;

fn stream(i: usize) -> Stream {
    Stream {
        recipient: UserUuid::from_random_bytes([u8::try_from(i / 2).unwrap() + 1; 16]),
        conv: ConvId::parse(&format!("c-{}", i % 2)).unwrap(),
    }
}

#[derive(Debug, Clone, Copy)]
enum Op {
    /// The owner commits a message of this stream (and its outbox row).
    Commit(usize),
    /// Time passes and the owner sends what is due.
    Poll(u64),
    /// The transport delivers this packet (an index into what is in flight).
    Deliver(usize),
    /// ... loses it.
    Lose(usize),
    /// ... repeats it.
    Repeat(usize),
    /// The recipient's shard commits what it applied.
    CommitApplies,
    /// The recipient's shard crashes: what it held and applied without a commit is lost.
    CrashInbox,
    /// The owner crashes: its outbox is rebuilt from the stored rows.
    CrashOwner,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..STREAMS).prop_map(Op::Commit),
        2 => (0..2_500u64).prop_map(Op::Poll),
        6 => any::<usize>().prop_map(Op::Deliver),
        1 => any::<usize>().prop_map(Op::Lose),
        1 => any::<usize>().prop_map(Op::Repeat),
        2 => Just(Op::CommitApplies),
        1 => Just(Op::CrashInbox),
        1 => Just(Op::CrashOwner),
    ]
}

#[derive(Debug, Clone)]
enum Packet {
    Handoff(Handoff<u64>),
    Applied(Applied),
}

/// The naive model and the two sides under test.
struct Run {
    now: UnixMs,
    /// Each conversation's last seq (both streams of a conversation share its seqs).
    conv_seq: [u64; 2],
    /// Each stream's whole chain, as the owner committed it.
    chain: Vec<Vec<u64>>,
    /// The owner's stored rows: stream -> seq -> prev.
    rows: BTreeMap<usize, BTreeMap<u64, u64>>,
    outbox: Outbox<u64>,
    /// What the recipient's shard applied durably, and without a commit yet, per stream.
    durable: Vec<Vec<u64>>,
    pending: Vec<Vec<u64>>,
    inbox: Inbox<u64>,
    net: Vec<Packet>,
    max_held: usize,
}

impl Run {
    fn new(max_held: usize) -> Self {
        Self {
            now: UnixMs(1),
            conv_seq: [0; 2],
            chain: vec![Vec::new(); STREAMS],
            rows: BTreeMap::new(),
            outbox: Outbox::new(OWNER),
            durable: vec![Vec::new(); STREAMS],
            pending: vec![Vec::new(); STREAMS],
            inbox: Inbox::new(DEST, max_held),
            net: Vec::new(),
            max_held,
        }
    }

    fn index(s: &Stream) -> usize {
        (0..STREAMS).find(|i| stream(*i) == *s).unwrap()
    }

    fn step(&mut self, op: Op) {
        match op {
            Op::Commit(i) => {
                let c = i % 2;
                self.conv_seq[c] += 1;
                let seq = self.conv_seq[c];
                let prev = self.chain[i].last().copied().unwrap_or(0);
                self.chain[i].push(seq);
                self.rows.entry(i).or_default().insert(seq, prev);
                self.outbox.push(DEST, stream(i), Seq(seq), Seq(prev), seq);
            }
            Op::Poll(ms) => {
                self.now = self.now.plus_ms(ms);
                let sent = self.outbox.poll(self.now);
                self.net.extend(sent.into_iter().map(Packet::Handoff));
            }
            Op::Deliver(k) if !self.net.is_empty() => {
                let p = self.net.swap_remove(k % self.net.len());
                self.deliver(p);
            }
            Op::Lose(k) if !self.net.is_empty() => {
                self.net.swap_remove(k % self.net.len());
            }
            Op::Repeat(k) if !self.net.is_empty() => {
                let p = self.net[k % self.net.len()].clone();
                self.net.push(p);
            }
            Op::CommitApplies => self.commit_applies(),
            Op::CrashInbox => {
                self.pending = vec![Vec::new(); STREAMS];
                self.inbox = Inbox::new(DEST, self.max_held);
                for (i, done) in self.durable.iter().enumerate() {
                    if let Some(last) = done.last() {
                        self.inbox.restore(OWNER, stream(i), Seq(*last));
                    }
                }
            }
            Op::CrashOwner => {
                self.outbox = Outbox::new(OWNER);
                for (i, rows) in &self.rows {
                    for (seq, prev) in rows.iter().rev() {
                        self.outbox
                            .push(DEST, stream(*i), Seq(*seq), Seq(*prev), *seq);
                    }
                }
            }
            Op::Deliver(_) | Op::Lose(_) | Op::Repeat(_) => {}
        }
    }

    fn deliver(&mut self, p: Packet) {
        match p {
            Packet::Handoff(h) => {
                assert_eq!(h.item, h.seq.get(), "the row's item travels with it");
                let i = Self::index(&h.stream);
                match self.inbox.receive(h).unwrap() {
                    Received::Apply(list) => {
                        for h in list {
                            self.pending[i].push(h.seq.get());
                        }
                        let applied: Vec<u64> = self.durable[i]
                            .iter()
                            .chain(&self.pending[i])
                            .copied()
                            .collect();
                        assert_eq!(
                            applied[..],
                            self.chain[i][..applied.len()],
                            "stream {i}: applied out of order or twice"
                        );
                    }
                    Received::Again(Some(a)) => self.net.push(Packet::Applied(a)),
                    Received::Again(None) | Received::Held | Received::Dropped => {}
                }
                assert!(self.inbox.held() <= self.max_held);
            }
            Packet::Applied(a) => {
                let i = Self::index(&a.stream);
                assert!(
                    self.durable[i].contains(&a.through.get()),
                    "acknowledged {} of stream {i} before it was durable",
                    a.through
                );
                for (seq, _) in self.outbox.on_applied(&a) {
                    self.rows.get_mut(&i).unwrap().remove(&seq.get());
                }
            }
        }
    }

    fn commit_applies(&mut self) {
        for i in 0..STREAMS {
            let pending = std::mem::take(&mut self.pending[i]);
            let Some(last) = pending.last().copied() else {
                continue;
            };
            self.durable[i].extend(pending);
            let ack = self.inbox.durable(&stream(i), Seq(last)).unwrap();
            self.net.push(Packet::Applied(ack));
        }
    }

    /// The faults end: the transport delivers everything, the recipient commits, time
    /// passes. Every chain ends applied once, whole, and every row acknowledged.
    fn heal(&mut self) {
        for _ in 0..10_000 {
            while let Some(p) = self.net.pop() {
                self.deliver(p);
            }
            self.commit_applies();
            if self.net.is_empty() && self.outbox.is_empty() {
                break;
            }
            if self.net.is_empty() {
                self.step(Op::Poll(RESEND_MS));
            }
        }
        assert!(
            self.outbox.is_empty(),
            "{} rows never acknowledged",
            self.outbox.len()
        );
        assert!(self.rows.values().all(BTreeMap::is_empty));
        assert_eq!(
            self.durable, self.chain,
            "every message applied once, in order"
        );
        assert_eq!(self.inbox.held(), 0);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Whatever the transport loses, repeats or reorders and whichever side crashes, the
    /// recipient's shard applies each stream's messages exactly once and in order, never
    /// acknowledges what is not durable, and once the faults end every row is drained.
    #[test]
    fn handed_off_exactly_once_in_order(
        ops in proptest::collection::vec(op(), 1..160),
        max_held in 0usize..6,
    ) {
        let mut run = Run::new(max_held);
        for op in ops {
            run.step(op);
        }
        run.heal();
    }
}

#[test]
fn a_gap_is_held_and_a_repeat_answered_with_the_durable_mark() {
    let mut inbox = Inbox::new(DEST, 8);
    let h = |seq: u64, prev: u64| Handoff {
        from: OWNER,
        to: DEST,
        stream: stream(0),
        seq: Seq(seq),
        prev: Seq(prev),
        item: seq,
    };
    assert_eq!(inbox.receive(h(5, 2)).unwrap(), Received::Held);
    assert_eq!(inbox.receive(h(5, 2)).unwrap(), Received::Held);
    assert_eq!(inbox.held(), 1);
    let Received::Apply(list) = inbox.receive(h(2, 0)).unwrap() else {
        panic!("not applied");
    };
    assert_eq!(list.iter().map(|h| h.seq.get()).collect::<Vec<_>>(), [2, 5]);
    assert_eq!(inbox.held(), 0);
    assert_eq!(inbox.receive(h(2, 0)).unwrap(), Received::Again(None));
    let ack = inbox.durable(&stream(0), Seq(5)).unwrap();
    assert_eq!((ack.to, ack.through), (OWNER, Seq(5)));
    assert_eq!(inbox.receive(h(2, 0)).unwrap(), Received::Again(Some(ack)));
    assert!(inbox.receive(h(7, 3)).is_err(), "a chain that skips seq 5");
    assert!(inbox.receive(h(7, 7)).is_err(), "a link to itself");
}

#[test]
fn the_outbox_resends_bounded_and_forgets_what_is_acknowledged() {
    let mut out = Outbox::new(OWNER);
    for seq in 1..=(MAX_IN_FLIGHT_PER_SHARD as u64 + 10) {
        out.push(DEST, stream(0), Seq(seq), Seq(seq - 1), seq);
    }
    let first = out.poll(UnixMs(0));
    assert_eq!(first.len(), MAX_IN_FLIGHT_PER_SHARD);
    assert!(out.poll(UnixMs(RESEND_MS - 1)).is_empty(), "all in flight");
    assert_eq!(out.next_deadline(), Some(UnixMs(0)), "ten never sent");
    let ack = Applied {
        from: DEST,
        to: OWNER,
        stream: stream(0),
        through: Seq(100),
        level: Level::default(),
    };
    assert_eq!(out.on_applied(&ack).len(), 100);
    let next = out.poll(UnixMs(RESEND_MS - 1));
    assert_eq!(next.len(), 10, "room for the ten never sent");
    assert_eq!(next[0].seq, Seq(MAX_IN_FLIGHT_PER_SHARD as u64 + 1));
    assert_eq!(
        out.poll(UnixMs(RESEND_MS)).len(),
        MAX_IN_FLIGHT_PER_SHARD - 100
    );
    assert_eq!(out.len(), MAX_IN_FLIGHT_PER_SHARD + 10 - 100);
}

/// A destination that never answers holds its own rows back, not another destination's;
/// acknowledged rows leave the schedule too.
#[test]
fn a_silent_destination_does_not_hold_back_another() {
    let mut out = Outbox::new(OWNER);
    for seq in 1..=1_000u64 {
        out.push(DEST, stream(0), Seq(seq), Seq(seq - 1), seq);
    }
    out.push(ShardId(2), stream(1), Seq(1), Seq(0), 1);
    let mut now = UnixMs(0);
    for _ in 0..3 {
        let sent = out.poll(now);
        let to_other = sent.iter().filter(|h| h.to == ShardId(2)).count();
        assert_eq!(sent.len() - to_other, MAX_IN_FLIGHT_PER_SHARD);
        assert_eq!(to_other, 1, "resent each time its row is due");
        now = now.plus_ms(RESEND_MS);
    }
    let ack = |to, stream, through| Applied {
        from: to,
        to: OWNER,
        stream,
        through: Seq(through),
        level: Level::default(),
    };
    assert_eq!(
        out.on_applied(&ack(ShardId(2), stream(1), 1)),
        [(Seq(1), 1)]
    );
    assert_eq!(out.on_applied(&ack(DEST, stream(0), 1_000)).len(), 1_000);
    assert!(out.is_empty() && out.next_deadline().is_none());
    assert!(out.poll(now).is_empty());
}

#[test]
fn a_conversation_is_owned_by_its_lower_members_shard() {
    let map = ShardMap::new(1_024).unwrap();
    assert!(ShardMap::new(0).is_none());
    let (a, b) = (
        UserUuid::from_random_bytes([1; 16]),
        UserUuid::from_random_bytes([2; 16]),
    );
    let lower = if a < b { &a } else { &b };
    assert_eq!(map.owner_of([&a, &b]), map.of_user(lower));
    assert_eq!(map.owner_of([&b, &a]), map.of_user(lower));
    let spread: BTreeSet<ShardId> = (0..=255u8)
        .map(|i| map.of_user(&UserUuid::from_random_bytes([i; 16])))
        .collect();
    assert!(spread.len() > 200, "{} shards of 256 users", spread.len());
    assert!(spread.iter().all(|s| s.0 < 1_024));
    assert_eq!(ShardMap::new(1).unwrap().of_user(&a), ShardId(0));
}

#[test]
fn a_notice_replaced_before_its_acknowledgement_stays_until_its_own() {
    let mut n: Notices<&str, u64> = Notices::new(OWNER);
    let v1 = n.put(DEST, "read", 5);
    assert_eq!(n.poll(UnixMs(10)).len(), 1);
    let v2 = n.put(DEST, "read", 7);
    assert!(v2 > v1);
    assert!(!n.on_taken(&"read", v1), "the older one's acknowledgement");
    let again = n.poll(UnixMs(11));
    assert_eq!(again.len(), 1, "the newer is sent at once");
    assert_eq!((again[0].item, again[0].version), (7, v2));
    assert!(
        n.poll(UnixMs(12)).is_empty(),
        "then waits for its resend time"
    );
    assert_eq!(n.next_deadline(), Some(UnixMs(11 + RESEND_MS)));
    assert_eq!(n.poll(UnixMs(11 + RESEND_MS)).len(), 1);
    assert!(n.on_taken(&"read", v2));
    assert!(n.is_empty());
    assert_eq!(n.next_deadline(), None);
    // Read back at start, numbering goes on after the highest stored.
    let mut n: Notices<&str, u64> = Notices::new(OWNER);
    n.restore(DEST, "read", 41, 9);
    assert_eq!(n.put(DEST, "delivered", 3), 42);
    assert_eq!(n.len(), 2);
}
