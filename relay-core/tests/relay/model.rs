//! Tier 2: proptest against a deliberately naive reference model; invariants after every step.
//!
//! The same operations run against a relay committing one input at a time and against one
//! whose commits are pipelined (its store taken; batches sealed, committed and reported by
//! the test as a shell's committer would), where [`Op::InFlight`] keeps several batches in
//! flight and then commits them, fails one, or crashes with some of them applied.
//!
//! Both run with the default tombstone cache and with none at all (every conversation's tombstones
//! are evicted at the end of every input and read from the store again), and keyed reads of
//! the store fail now and then ([`Op::ReadFault`]).
//!
//! The offline TTL is short ([`MODEL_TTL_MS`]), so messages expire within a run: the model
//! knows when each was accepted, a `sync` must replay every unexpired undelivered message (an
//! expired one may still be replayed until the relay's sweep has run), and a sweep that
//! read without a fault leaves no expired message in the store.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use relay_core::ConnId;
use serde_json::json;
use wire::ServerFrame;

use crate::world::{User, World, frames};

/// The relay's offline TTL in these runs: a few [`Op::Advance`] steps.
const MODEL_TTL_MS: u64 = 120_000;

#[derive(Debug, Clone)]
pub(crate) enum Op {
    /// Member `from` (0/1) sends message id `id` (small space: duplicates are common).
    Send { from: usize, id: u8 },
    /// Member `who` acknowledges delivery up to `seq`.
    Delivered { who: usize, seq: u64 },
    /// Member `who` reads up to `seq`.
    Read { who: usize, seq: u64 },
    /// Member `who` disconnects.
    Disconnect { who: usize },
    /// Member `who` (re)connects and syncs.
    Connect { who: usize },
    /// The outsider tries to send into the conversation.
    Intrude,
    /// Time passes. A relay reading ahead: `settle` reports every waiting read afterwards
    /// (the sweep that came due finishes now); otherwise the sweep may wait for its reads
    /// across the steps that follow, messages sent and delivered meanwhile.
    Advance { ms: u64, settle: bool },
    /// The relay crashes and restarts on the same store.
    Restart,
    /// Pipelined relay: each `(from, id)` is a `msg` in a batch of its own, sealed on top of
    /// the ones before it (none committed yet); then `end`. A relay committing one input at a
    /// time just handles the messages.
    InFlight { sends: Vec<(usize, u8)>, end: End },
    /// The store's next keyed read fails (a `msg` needing it is refused, not acknowledged).
    ReadFault,
    /// A relay reading ahead: for each pick, a waiting read (index modulo their number) is
    /// reported (`false`) or run now and reported later (`true`: the relay may write its rows
    /// meanwhile). Reads are otherwise left waiting across steps, in any order.
    Reads { picks: Vec<(u8, bool)> },
}

/// What happens to the batches an [`Op::InFlight`] left in flight.
#[derive(Debug, Clone)]
pub(crate) enum End {
    /// Every commit succeeds, in order.
    Commit,
    /// Batches before `at` commit; batch `at` fails, so every later one fails too; the shell
    /// rebuilds the relay from the store.
    Fail { at: usize },
    /// The process dies after the first `applied` commits were durable, before any output of
    /// theirs left; it restarts on the store.
    Crash { applied: usize },
}

fn end() -> impl Strategy<Value = End> {
    prop_oneof![
        2 => Just(End::Commit),
        1 => (0..6usize).prop_map(|at| End::Fail { at }),
        2 => (0..7usize).prop_map(|applied| End::Crash { applied }),
    ]
}

pub(crate) fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..2usize, 0..12u8).prop_map(|(from, id)| Op::Send { from, id }),
        2 => (0..2usize, 0..14u64).prop_map(|(who, seq)| Op::Delivered { who, seq }),
        1 => (0..2usize, 0..14u64).prop_map(|(who, seq)| Op::Read { who, seq }),
        3 => proptest::collection::vec((any::<u8>(), any::<bool>()), 1..4)
            .prop_map(|picks| Op::Reads { picks }),
        1 => (0..2usize).prop_map(|who| Op::Disconnect { who }),
        2 => (0..2usize).prop_map(|who| Op::Connect { who }),
        1 => Just(Op::Intrude),
        1 => (1..50_000u64, any::<bool>()).prop_map(|(ms, settle)| Op::Advance { ms, settle }),
        1 => Just(Op::Restart),
        2 => (proptest::collection::vec((0..2usize, 0..12u8), 1..6), end())
            .prop_map(|(sends, end)| Op::InFlight { sends, end }),
        1 => Just(Op::ReadFault),
    ]
}

/// The id a member sends for the drawn `n`: its own for most, one both members may use (the
/// second to use it is refused) for the last few.
pub(crate) fn msg_id(from: usize, n: u8) -> String {
    if n >= 9 {
        format!("both-{n}")
    } else {
        format!("m{from}-{n}")
    }
}

/// A `msg` frame with id `id` for the member whose alias is `to`, in conversation `conv`.
pub(crate) fn msg_frame(id: &str, to: &str, conv: &str) -> serde_json::Value {
    json!({"type":"msg","id":id,"to":to,"conv_id":conv,"payload":"cA=="})
}

/// A receipt of `kind` (`delivered` or `read`) through `seq` of conversation `conv`, for the
/// member whose alias is `to`.
pub(crate) fn receipt_frame(kind: &str, conv: &str, seq: u64, to: &str) -> serde_json::Value {
    json!({"type":kind,"conv_id":conv,"seq":seq,"to":to})
}

/// The naive model: a list of everything accepted, who has acknowledged what.
#[derive(Debug, Default)]
pub(crate) struct Model {
    /// seq -> (author index, id)
    pub(crate) accepted: BTreeMap<u64, (usize, String)>,
    /// seq -> when it was accepted (the relay's clock, epoch ms)
    accepted_at: BTreeMap<u64, u64>,
    /// The relay's clock now.
    pub(crate) now: u64,
    /// The relay's offline TTL (`Config::offline_ttl_ms`).
    ttl_ms: u64,
    /// Acks may come late, out of seq order, or never (a sharded relay: the owner shard
    /// decides a member's message and its verdict crosses back to the sender's shard), so a
    /// message is also learned from its delivery, and a new seq is checked for reuse rather
    /// than for a gap (the run's end checks that the seqs have none).
    acks_may_lag: bool,
    /// id -> (author, seq): ids are the conversation's, whoever used one first
    ids: BTreeMap<String, (usize, u64)>,
    /// Highest seq each member confirmed with `delivered`/`read`.
    pub(crate) confirmed: [u64; 2],
    /// seqs pushed to each member since it last confirmed (any push of a message to the
    /// member counts as "sent to it").
    pushed: [BTreeSet<u64>; 2],
    /// Highest receipt seq forwarded to each member, per kind (delivered, read).
    forwarded: [[u64; 2]; 2],
    /// Highest receipt seq each member sent and the relay took, per kind.
    taken: [[u64; 2]; 2],
    /// Every connection a member opened, and whose it was.
    pub(crate) conns: BTreeMap<ConnId, usize>,
    /// The last seq pushed on each connection.
    last_on: BTreeMap<ConnId, u64>,
}

impl Model {
    /// A model of nothing sent yet, for a relay whose offline TTL is `ttl_ms`; `sharded`: its
    /// acks may lag.
    pub(crate) fn new(ttl_ms: u64, sharded: bool) -> Self {
        Self {
            ttl_ms,
            acks_may_lag: sharded,
            ..Self::default()
        }
    }

    /// The relay acknowledged `id` of `from` with `seq`: a duplicate keeps its first seq, a
    /// new id takes the next one (strictly increasing, gap-free), and an id the other member
    /// used first is never acknowledged (it is the conversation's).
    pub(crate) fn note_ack(&mut self, from: usize, id: &str, seq: u64) {
        match self.ids.get(id) {
            Some((author, s)) => {
                assert_eq!(*author, from, "{id}, the other member's, acknowledged");
                assert_eq!(*s, seq, "duplicate {id} got a new seq");
            }
            None => {
                if self.acks_may_lag {
                    assert!(seq >= 1, "{id} with seq 0");
                    let reused = self.accepted.get(&seq);
                    assert!(reused.is_none(), "{id} took seq {seq} of {reused:?}");
                } else {
                    let next = self.accepted.keys().last().map_or(1, |l| l + 1);
                    assert_eq!(seq, next, "seq gap");
                }
                self.accepted.insert(seq, (from, id.to_owned()));
                self.accepted_at.insert(seq, self.now);
                self.ids.insert(id.to_owned(), (from, seq));
            }
        }
    }

    /// Notes every ack among `outs` (to whichever member's connection it went: an ack to a
    /// connection its client closed after sending the `msg` still says the relay stored it).
    pub(crate) fn note_acks(&mut self, outs: &[relay_core::Output], online: &[Option<ConnId>; 2]) {
        for o in outs {
            if let relay_core::Output::Send {
                conn,
                frame: ServerFrame::Ack(a),
            } = o
                && let Some(from) = (self.conns.get(conn).copied())
                    .or_else(|| online.iter().position(|c| *c == Some(*conn)))
            {
                self.note_ack(from, a.id.as_str(), a.seq.get());
            }
        }
    }

    pub(crate) fn undelivered_for(&self, who: usize) -> Vec<u64> {
        self.accepted
            .iter()
            .filter(|(s, (author, _))| *author != who && **s > self.confirmed[who])
            .map(|(s, _)| *s)
            .collect()
    }

    /// Whether message `seq`'s TTL has ended by now (the relay may have deleted it).
    fn expired(&self, seq: u64) -> bool {
        self.accepted_at
            .get(&seq)
            .is_some_and(|at| at + self.ttl_ms <= self.now)
    }

    /// `who` sent a receipt through `seq`, which the relay `refused` or took: a receipt may be
    /// taken only if every undelivered message to `who` up to `seq` was pushed to it (an
    /// expired one may be gone without a push); a taken one confirms them.
    pub(crate) fn note_receipt(&mut self, who: usize, seq: u64, read: bool, refused: bool) {
        let valid = seq >= 1
            && self
                .accepted
                .iter()
                .any(|(s, (a, _))| *a != who && *s >= seq)
            && self
                .undelivered_for(who)
                .iter()
                .filter(|s| **s <= seq && !self.expired(**s))
                .all(|s| self.pushed[who].contains(s));
        if !refused {
            assert!(
                valid || seq <= self.confirmed[who],
                "accepted an invalid receipt for {seq}"
            );
            self.confirmed[who] = self.confirmed[who].max(seq);
            let k = usize::from(read);
            self.taken[who][k] = self.taken[who][k].max(seq);
        }
    }

    /// Once everything was forwarded: each member got the last receipt of each kind the other
    /// sent.
    pub(crate) fn check_receipts_reached(&self) {
        for who in 0..2 {
            for k in 0..2 {
                let (sent, got) = (self.taken[1 - who][k], self.forwarded[who][k]);
                assert!(
                    got >= sent,
                    "receipts of kind {k} to {who}: {sent} sent, {got} got"
                );
            }
        }
    }

    /// `who` opened `conn` (and syncs on it): nothing is pushed to it yet.
    pub(crate) fn note_connected(&mut self, who: usize, conn: ConnId) {
        self.conns.insert(conn, who);
        self.pushed[who].clear();
    }

    /// What a sync that `replay`ed these seqs should have replayed to `who`: the undelivered
    /// suffix, less expired messages the sweep has already deleted.
    pub(crate) fn expected_replay(&self, who: usize, replay: &[u64]) -> Vec<u64> {
        self.undelivered_for(who)
            .iter()
            .copied()
            .filter(|s| !self.expired(*s) || replay.contains(s))
            .collect()
    }

    /// Judges one step's frames to the members' connections (`online`) and the outsiders':
    /// each message pushed once per connection, in seq order, never after its recipient
    /// confirmed it, never the recipient's own, with its author's alias; receipts only as the
    /// other member sent them, and forwarded only forwards; nothing of the conversation to an
    /// outsider.
    pub(crate) fn judge(
        &mut self,
        outs: &[relay_core::Output],
        online: &[Option<ConnId>; 2],
        users: &[User],
        outsiders: &[ConnId],
    ) {
        for o in outs {
            let relay_core::Output::Send { conn, frame } = o else {
                continue;
            };
            if outsiders.contains(conn) {
                assert!(
                    !matches!(
                        frame,
                        ServerFrame::Msg(_) | ServerFrame::Delivered(_) | ServerFrame::Read(_)
                    ),
                    "non-member got {frame:?}"
                );
                continue;
            }
            let Some(who) = online.iter().position(|c| *c == Some(*conn)) else {
                continue;
            };
            match frame {
                ServerFrame::Msg(m) => {
                    let seq = m.seq.get();
                    if self.acks_may_lag {
                        // A message another shard decided may come before its ack.
                        self.note_ack(1 - who, m.id.as_str(), seq);
                    }
                    let Some((author, id)) = self.accepted.get(&seq) else {
                        panic!("{seq} pushed, and no ack or delivery named it");
                    };
                    assert_ne!(*author, who, "own message echoed");
                    assert_eq!(id, m.id.as_str());
                    assert_eq!(m.from.as_str(), users[*author].alias);
                    let last = self.last_on.insert(*conn, seq).unwrap_or(0);
                    assert!(seq > last, "{seq} pushed on {conn:?} after {last}");
                    assert!(
                        seq > self.confirmed[who],
                        "{seq} pushed again after its recipient confirmed {}",
                        self.confirmed[who]
                    );
                    self.pushed[who].insert(seq);
                }
                ServerFrame::Delivered(r) | ServerFrame::Read(r) => {
                    let k = usize::from(matches!(frame, ServerFrame::Read(_)));
                    let seq = r.seq.get();
                    assert!(
                        seq <= self.confirmed[1 - who],
                        "a receipt for {seq} the other member did not send"
                    );
                    assert!(seq > self.forwarded[who][k], "receipt moved backwards");
                    self.forwarded[who][k] = self.forwarded[who][k].max(seq);
                }
                _ => {}
            }
        }
    }
}

/// The seqs of the messages pushed to `conn` among `outs`, in order.
pub(crate) fn replayed(outs: &[relay_core::Output], conn: ConnId) -> Vec<u64> {
    frames(outs, conn)
        .iter()
        .filter_map(|f| {
            if let ServerFrame::Msg(m) = f {
                Some(m.seq.get())
            } else {
                None
            }
        })
        .collect()
}

/// The test configuration with `cache_bytes` the bound of every cache over the store
/// (accounts, tombstones, queues, conversations, contacts; 0: every read state is evicted
/// after each input that does not pin it).
pub(crate) fn caches(cache_bytes: usize) -> relay_core::Config {
    relay_core::Config {
        tombstone_cache_bytes: cache_bytes,
        queue_cache_bytes: cache_bytes,
        account_cache_bytes: cache_bytes,
        conversation_cache_bytes: cache_bytes,
        contact_cache_bytes: cache_bytes,
        // Without caches, queues are also read for delivery one message at a time.
        queue_page_msgs: if cache_bytes == 0 {
            1
        } else {
            relay_core::limits::QUEUE_PAGE_MSGS
        },
        ..crate::world::fast_config()
    }
}

/// `cache_bytes`: the bound of every cache over the store (accounts, tombstones, queues,
/// conversations, contacts; 0: every read state is evicted after each input that does not
/// pin it).
fn run(ops: Vec<Op>, pipelined: bool, cache_bytes: usize) {
    run_reading(ops, pipelined, cache_bytes, false);
}

/// [`run`]; `ahead`: the relay reads ahead, and its reads are reported late and out of order
/// ([`Op::Reads`]). A receipt or a connection then first lets every waiting read finish
/// (so that what the member was sent is settled), and finishes its own reads before it is
/// judged.
fn run_reading(ops: Vec<Op>, pipelined: bool, cache_bytes: usize, ahead: bool) {
    let mut w = World::with_config(relay_core::Config {
        offline_ttl_ms: MODEL_TTL_MS,
        ..caches(cache_bytes)
    });
    if pipelined {
        w.pipeline();
    }
    if ahead {
        w.read_ahead(false);
    }
    let mut users: Vec<User> = vec![w.user("a"), w.user("b")];
    let mut outsider = w.user("c");
    let conv = w.befriend(&users[0], &users[1]);
    let oc = w.connect(&mut outsider);
    w.sync(oc);
    let mut model = Model::new(MODEL_TTL_MS, false);
    let mut online: [Option<ConnId>; 2] = [None, None];
    // After a sweep's read failed the relay sweeps again `QUEUE_READ_RETRY_MS` later, not at
    // the next timeout (its documented wait): until then expired messages may stay stored.
    let mut sweep_waits_until = 0;
    // The sweep's read failures counted so far: one may come during any operation (a read
    // the sweep waits for is settled by the next operation that settles reads).
    let mut failures_seen = 0;
    for op in ops {
        model.now = w.now.get();
        let outs = match op {
            Op::Send { from, id } => {
                let Some(conn) = online[from] else { continue };
                let id = msg_id(from, id);
                let to = users[1 - from].alias.clone();
                let outs = w.send(conn, msg_frame(&id, &to, &conv));
                for f in frames(&outs, conn) {
                    if let ServerFrame::Ack(a) = f {
                        model.note_ack(from, &id, a.seq.get());
                    }
                }
                outs
            }
            Op::Delivered { who, seq } | Op::Read { who, seq } => {
                settle_reads(&mut w, &mut model, &mut online, &users, oc);
                let Some(conn) = online[who] else { continue };
                let kind = if matches!(op, Op::Delivered { .. }) {
                    "delivered"
                } else {
                    "read"
                };
                let to = users[1 - who].alias.clone();
                let mut outs = w.send(conn, receipt_frame(kind, &conv, seq, &to));
                outs.extend(w.finish_reads());
                model.note_acks(&outs, &online);
                let refused = frames(&outs, conn)
                    .iter()
                    .any(|f| matches!(f, ServerFrame::Error(_)));
                model.note_receipt(who, seq, kind == "read", refused);
                outs
            }
            Op::Disconnect { who } => {
                if let Some(c) = online[who].take() {
                    w.relay.handle_disconnect(w.now, c);
                }
                w.drain()
            }
            Op::Connect { who } => {
                settle_reads(&mut w, &mut model, &mut online, &users, oc);
                let mut u = users[who].clone();
                let (conn, outs) = connect_and_sync(&mut w, &mut u);
                users[who] = u;
                online[who] = Some(conn);
                model.note_connected(who, conn);
                model.note_acks(&outs, &online);
                // Replay after sync is the undelivered suffix (up to the batch window), less
                // expired messages the sweep has already deleted.
                let replay = replayed(&outs, conn);
                let expected = model.expected_replay(who, &replay);
                assert_eq!(
                    replay,
                    expected[..expected.len().min(100)],
                    "replay mismatch (undelivered {:?})",
                    model.undelivered_for(who)
                );
                outs
            }
            Op::Intrude => {
                let to = users[1].alias.clone();
                w.send(oc, msg_frame("evil", &to, &conv))
            }
            Op::Advance { ms, settle } => {
                if w.relay.stats().queue_read_failures != failures_seen {
                    // It failed since the last advance, at this time (time moves only here).
                    sweep_waits_until = w.now.get() + relay_core::limits::QUEUE_READ_RETRY_MS;
                }
                w.now = w.now.plus_ms(ms);
                model.now = w.now.get();
                let failures = w.relay.stats().queue_read_failures;
                w.relay.handle_timeout(w.now);
                let mut outs = w.drain();
                if settle {
                    // Judged in order: what the timeout released, then what the reads did.
                    observe(&w, &outs, &mut model, &mut online, &users, oc);
                    outs.clear();
                    settle_reads(&mut w, &mut model, &mut online, &users, oc);
                    // As a shell does after every input: a deadline that passed meanwhile (a
                    // sweep that waited found more due) fires now.
                    while w.relay.poll_timeout().is_some_and(|at| at <= w.now) {
                        w.relay.handle_timeout(w.now);
                        let fired = w.drain();
                        observe(&w, &fired, &mut model, &mut online, &users, oc);
                        settle_reads(&mut w, &mut model, &mut online, &users, oc);
                    }
                }
                if w.relay.stats().queue_read_failures != failures {
                    sweep_waits_until = w.now.get() + relay_core::limits::QUEUE_READ_RETRY_MS;
                } else if w.relay.prefetch().sweep_waiting {
                    // The sweep waits for a read: what it will delete is still stored.
                } else if w.now.get() >= sweep_waits_until {
                    // The sweep read without a fault: nothing expired is left in the store.
                    let left: Vec<u64> = stored_seqs(&w)
                        .into_iter()
                        .filter(|s| model.expired(*s))
                        .collect();
                    assert!(left.is_empty(), "expired messages {left:?} still stored");
                }
                failures_seen = w.relay.stats().queue_read_failures;
                for o in &mut online {
                    if o.is_some_and(|c| !w.relay.is_connected(c)) {
                        *o = None;
                    }
                }
                outs
            }
            Op::Restart => {
                let store = w.mem.clone();
                w.restart(Box::new(store));
                online = [None, None];
                continue;
            }
            Op::ReadFault => {
                w.mem.fail_reads(1);
                continue;
            }
            Op::Reads { picks } => {
                for (pick, early) in picks {
                    let waiting = w.reads_waiting();
                    if waiting == 0 {
                        break;
                    }
                    let i = usize::from(pick) % waiting;
                    if early {
                        w.run_early(i);
                    } else {
                        w.complete_read(i);
                    }
                }
                let outs = w.drain();
                model.note_acks(&outs, &online);
                outs
            }
            Op::InFlight { sends, end } => {
                let Some(outs) =
                    in_flight(&mut w, &users, &conv, &online, &sends, &end, &mut model)
                else {
                    online = [None, None];
                    continue;
                };
                outs
            }
        };
        observe(&w, &outs, &mut model, &mut online, &users, oc);
    }
}

/// A relay reading ahead: reports every waiting read (and those they lead to), and judges
/// what they released, so that a receipt or a sync is judged on settled deliveries.
fn settle_reads(
    w: &mut World,
    model: &mut Model,
    online: &mut [Option<ConnId>; 2],
    users: &[User],
    oc: ConnId,
) {
    if w.reads.is_none() {
        return;
    }
    let outs = w.finish_reads();
    model.note_acks(&outs, online);
    observe(w, &outs, model, online, users, oc);
}

/// The invariants over one step's outputs; members whose connection the relay closed go
/// offline.
fn observe(
    w: &World,
    outs: &[relay_core::Output],
    model: &mut Model,
    online: &mut [Option<ConnId>; 2],
    users: &[User],
    oc: ConnId,
) {
    // A connection the relay closed (a delivery whose sender's account could not be read) is
    // offline: its client reconnects and syncs.
    for o in online.iter_mut() {
        if o.is_some_and(|c| !w.relay.is_connected(c)) {
            *o = None;
        }
    }
    model.judge(outs, online, users, &[oc]);
}

/// The seqs of the stored messages (both members' queues).
fn stored_seqs(w: &World) -> Vec<u64> {
    w.rows(relay_core::store::Table::Messages)
        .into_iter()
        .filter_map(|(k, _)| k.rsplit_once('/')?.1.parse().ok())
        .collect()
}

/// Connects `u`; a ticket request or upgrade refused with 503 (a read fault hit the account's
/// read: nothing changed) is tried again, as a client does.
fn connect(w: &mut World, u: &mut User) -> ConnId {
    match w.try_connect(u) {
        Ok(conn) => conn,
        Err(503) => w.try_connect(u).expect("a second connection refused"),
        Err(status) => panic!("connection refused with {status}"),
    }
}

/// Connects `u` and syncs; returns the connection and every output. A sync a read fault
/// refused (the connection is closed with nothing replayed) is followed by a second
/// connection, which syncs in full.
pub(crate) fn connect_and_sync(w: &mut World, u: &mut User) -> (ConnId, Vec<relay_core::Output>) {
    let mut conn = connect(w, u);
    let mut outs = w.sync(conn);
    outs.extend(w.finish_reads());
    if refused_sync(&outs, conn) {
        conn = connect(w, u);
        let len = outs.len();
        outs.extend(w.sync(conn));
        outs.extend(w.finish_reads());
        assert!(!refused_sync(&outs[len..], conn), "a second sync refused");
    }
    (conn, outs)
}

/// Whether `sync` on `conn` was refused for a failed read: an error frame
/// `STORAGE_UNAVAILABLE`, the connection closed, and no message replayed.
fn refused_sync(outs: &[relay_core::Output], conn: ConnId) -> bool {
    let refused = frames(outs, conn).iter().any(
        |f| matches!(f, ServerFrame::Error(e) if e.error == wire::ErrorCode::STORAGE_UNAVAILABLE),
    );
    if refused {
        assert!(
            outs.iter().any(|o| matches!(
                o,
                relay_core::Output::Close { conn: c, reason: relay_core::CloseReason::StorageUnavailable } if *c == conn
            )),
            "a refused sync leaves its connection open"
        );
        assert!(
            !frames(outs, conn)
                .iter()
                .any(|f| matches!(f, ServerFrame::Msg(_))),
            "a refused sync replayed messages"
        );
    }
    refused
}

/// Runs an [`Op::InFlight`]. `Some`: the outputs released (the relay lives on); `None`: the
/// relay was rebuilt or restarted from the store (every connection is gone).
fn in_flight(
    w: &mut World,
    users: &[User],
    conv: &str,
    online: &[Option<ConnId>; 2],
    sends: &[(usize, u8)],
    end: &End,
    model: &mut Model,
) -> Option<Vec<relay_core::Output>> {
    let send = |w: &mut World, from: usize, id: u8| {
        let conn = online[from]?;
        let id = msg_id(from, id);
        let to = users[1 - from].alias.clone();
        let text = msg_frame(&id, &to, conv).to_string();
        w.relay.handle_text(w.now, conn, &text);
        Some(())
    };
    if w.committer.is_none() {
        let mut outs = Vec::new();
        for &(from, id) in sends {
            if send(w, from, id).is_some() {
                outs.extend(w.drain());
            }
        }
        model.note_acks(&outs, online);
        return Some(outs);
    }
    w.settle();
    let before = w.released();
    model.note_acks(&before, online);
    let mut outs = before;
    // Each message in a batch of its own, sealed on top of the uncommitted ones before it.
    let mut batches = 0usize;
    for &(from, id) in sends {
        if send(w, from, id).is_some() && w.seal() {
            batches += 1;
        }
        // A batch that changed nothing with none in flight before it is released at once
        // (an ack of a duplicate, an error frame); nothing else may leave.
        let released = w.released();
        assert!(
            released.is_empty() || batches == 0,
            "an output left before the commit of a batch in flight: {released:?}"
        );
        model.note_acks(&released, online);
        w.log.extend(released.iter().cloned());
        outs.extend(released);
    }
    assert_eq!(w.relay.batches_in_flight(), batches);
    match *end {
        End::Commit => {
            for _ in 0..batches {
                w.commit_next(true).expect("every commit succeeds");
            }
            let released = w.released();
            model.note_acks(&released, online);
            w.log.extend(released.iter().cloned());
            outs.extend(released);
            Some(outs)
        }
        End::Fail { at } => {
            let mut durable = outs;
            for n in 0..batches {
                let ok = n < at;
                assert_eq!(
                    w.commit_next(ok).is_ok(),
                    ok,
                    "batch {n} of {batches}, failing {at}"
                );
                if ok {
                    durable.extend(w.released());
                }
            }
            model.note_acks(&durable, online);
            if at < batches {
                // Failed: after the durable batches' outputs, only closes (no ack, no msg).
                assert!(w.relay.is_failed());
                let after = w.released();
                assert!(
                    after
                        .iter()
                        .all(|o| matches!(o, relay_core::Output::Close { .. })),
                    "a failed batch (or a later one) released {after:?}"
                );
                let store = w.mem.clone();
                w.restart(Box::new(store));
                return None;
            }
            Some(durable)
        }
        End::Crash { applied } => {
            // The first `applied` commits are durable; their outputs never leave the process,
            // but their acks tell the model what the store now holds.
            let mut withheld = Vec::new();
            for _ in 0..applied.min(batches) {
                w.commit_next(true).expect("commit");
                withheld.extend(w.released());
            }
            model.note_acks(&withheld, online);
            let store = w.mem.clone();
            w.restart(Box::new(store));
            None
        }
    }
}

/// The case that once failed the model (not the relay): the sweep's read fails, so the relay
/// sweeps again a second later; an advance of 1 ms in between must not expect the expired
/// message gone.
#[test]
fn a_sweep_whose_read_failed_waits_its_retry() {
    let ops = || {
        vec![
            Op::Connect { who: 1 },
            Op::Send { from: 1, id: 0 },
            Op::Advance {
                ms: MODEL_TTL_MS - 10,
                settle: true,
            },
            Op::ReadFault,
            Op::Advance {
                ms: 20,
                settle: true,
            },
            Op::Advance {
                ms: 1,
                settle: true,
            },
            Op::Advance {
                ms: relay_core::limits::QUEUE_READ_RETRY_MS,
                settle: true,
            },
        ]
    };
    for pipelined in [false, true] {
        for cache in [0, relay_core::limits::TOMBSTONE_CACHE_BYTES] {
            run(ops(), pipelined, cache);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
    #[test]
    fn relay_matches_naive_model(ops in proptest::collection::vec(op(), 1..60)) {
        run(ops, false, relay_core::limits::TOMBSTONE_CACHE_BYTES);
    }

    /// Without caches: every lookup reads the conversation's tombstones from the store, and every
    /// queue not held by a synced connection is read back when next needed.
    #[test]
    fn relay_without_caches_matches_naive_model(
        ops in proptest::collection::vec(op(), 1..60)
    ) {
        run(ops, false, 0);
    }

    /// The same model against pipelined commits, with batches in flight when commits fail and
    /// when the relay crashes: nothing whose output was released is lost, nothing of a batch
    /// that was not applied appears, and seqs stay gap-free across the crash.
    #[test]
    fn pipelined_relay_matches_naive_model(ops in proptest::collection::vec(op(), 1..60)) {
        run(ops, true, relay_core::limits::TOMBSTONE_CACHE_BYTES);
    }

    /// Pipelined without caches: the tombstone sets and queues written by batches in flight
    /// stay in memory until their commit is reported, and are read back from the store after
    /// it.
    /// Reading ahead: frames that need a cold row park on its read, which is reported late.
    #[test]
    fn relay_reading_ahead_matches_naive_model(ops in proptest::collection::vec(op(), 1..60)) {
        run_reading(ops, false, relay_core::limits::TOMBSTONE_CACHE_BYTES, true);
    }

    /// Reading ahead without caches: nearly every frame parks on a read, reads come back late,
    /// out of order and run early (stale by the time they are reported), fail, and are lost
    /// with a restart.
    #[test]
    fn relay_reading_ahead_without_caches_matches_naive_model(
        ops in proptest::collection::vec(op(), 1..60)
    ) {
        run_reading(ops, false, 0, true);
    }

    /// Reading ahead with pipelined commits and no caches.
    #[test]
    fn pipelined_relay_reading_ahead_matches_naive_model(
        ops in proptest::collection::vec(op(), 1..60)
    ) {
        run_reading(ops, true, 0, true);
    }

    #[test]
    fn pipelined_relay_without_caches_matches_naive_model(
        ops in proptest::collection::vec(op(), 1..60)
    ) {
        run(ops, true, 0);
    }
}
