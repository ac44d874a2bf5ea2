//! Tier 2: proptest against a deliberately naive reference model; invariants after every step.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use relay_core::ConnId;
use serde_json::json;
use wire::ServerFrame;

use crate::world::{User, World, frames};

#[derive(Debug, Clone)]
enum Op {
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
    /// Time passes.
    Advance { ms: u64 },
    /// The relay crashes and restarts on the same store.
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..2usize, 0..12u8).prop_map(|(from, id)| Op::Send { from, id }),
        2 => (0..2usize, 0..14u64).prop_map(|(who, seq)| Op::Delivered { who, seq }),
        1 => (0..2usize, 0..14u64).prop_map(|(who, seq)| Op::Read { who, seq }),
        1 => (0..2usize).prop_map(|who| Op::Disconnect { who }),
        2 => (0..2usize).prop_map(|who| Op::Connect { who }),
        1 => Just(Op::Intrude),
        1 => (1..50_000u64).prop_map(|ms| Op::Advance { ms }),
        1 => Just(Op::Restart),
    ]
}

/// The naive model: a list of everything accepted, who has acknowledged what.
#[derive(Debug, Default)]
struct Model {
    /// seq -> (author index, id)
    accepted: BTreeMap<u64, (usize, String)>,
    /// (author, id) -> seq
    ids: BTreeMap<(usize, String), u64>,
    /// Highest seq each member confirmed with `delivered`/`read`.
    confirmed: [u64; 2],
    /// seqs pushed to each member since it last confirmed (any push of a message to the
    /// member counts as "sent to it").
    pushed: [BTreeSet<u64>; 2],
    /// Highest receipt seq forwarded to each member, per kind.
    forwarded: [[u64; 2]; 2],
}

impl Model {
    fn undelivered_for(&self, who: usize) -> Vec<u64> {
        self.accepted
            .iter()
            .filter(|(s, (author, _))| *author != who && **s > self.confirmed[who])
            .map(|(s, _)| *s)
            .collect()
    }
}

fn run(ops: Vec<Op>) {
    let mut w = World::new();
    let mut users: Vec<User> = vec![w.user("a"), w.user("b")];
    let mut outsider = w.user("c");
    let conv = w.befriend(&users[0], &users[1]);
    let oc = w.connect(&mut outsider);
    w.sync(oc);
    let mut model = Model::default();
    let mut online: [Option<ConnId>; 2] = [None, None];
    for op in ops {
        let outs = match op {
            Op::Send { from, id } => {
                let Some(conn) = online[from] else { continue };
                let id = format!("m{from}-{id}");
                let to = users[1 - from].alias.clone();
                let outs = w.send(
                    conn,
                    json!({"type":"msg","id":id,"to":to,"conv_id":conv,"payload":"cA=="}),
                );
                for f in frames(&outs, conn) {
                    if let ServerFrame::Ack(a) = f {
                        let seq = a.seq.get();
                        match model.ids.get(&(from, id.clone())) {
                            // A duplicate id never gets a second seq.
                            Some(s) => assert_eq!(*s, seq, "duplicate {id} got a new seq"),
                            None => {
                                // Strictly increasing, gap-free.
                                let next = model.accepted.keys().last().map_or(1, |l| l + 1);
                                assert_eq!(seq, next, "seq gap");
                                model.accepted.insert(seq, (from, id.clone()));
                                model.ids.insert((from, id.clone()), seq);
                            }
                        }
                    }
                }
                outs
            }
            Op::Delivered { who, seq } | Op::Read { who, seq } => {
                let Some(conn) = online[who] else { continue };
                let kind = if matches!(op, Op::Delivered { .. }) {
                    "delivered"
                } else {
                    "read"
                };
                let to = users[1 - who].alias.clone();
                let outs = w.send(conn, json!({"type":kind,"conv_id":conv,"seq":seq,"to":to}));
                let refused = frames(&outs, conn)
                    .iter()
                    .any(|f| matches!(f, ServerFrame::Error(_)));
                // A receipt is valid iff every undelivered message to `who` up to `seq` was pushed.
                let valid = seq >= 1
                    && model
                        .accepted
                        .iter()
                        .any(|(s, (a, _))| *a != who && *s >= seq)
                    && model
                        .undelivered_for(who)
                        .iter()
                        .filter(|s| **s <= seq)
                        .all(|s| model.pushed[who].contains(s));
                if !refused {
                    assert!(
                        valid || seq <= model.confirmed[who],
                        "accepted an invalid receipt for {seq}"
                    );
                    model.confirmed[who] = model.confirmed[who].max(seq);
                }
                outs
            }
            Op::Disconnect { who } => {
                if let Some(c) = online[who].take() {
                    w.relay.handle_disconnect(w.now, c);
                }
                w.drain()
            }
            Op::Connect { who } => {
                let mut u = users[who].clone();
                let conn = w.connect(&mut u);
                users[who] = u;
                online[who] = Some(conn);
                model.pushed[who].clear();
                let outs = w.sync(conn);
                // Replay after sync is exactly the undelivered suffix (up to the batch window).
                let replay: Vec<u64> = frames(&outs, conn)
                    .iter()
                    .filter_map(|f| {
                        if let ServerFrame::Msg(m) = f {
                            Some(m.seq.get())
                        } else {
                            None
                        }
                    })
                    .collect();
                let expected = model.undelivered_for(who);
                assert_eq!(
                    replay,
                    expected[..expected.len().min(100)],
                    "replay mismatch"
                );
                outs
            }
            Op::Intrude => {
                let to = users[1].alias.clone();
                w.send(
                    oc,
                    json!({"type":"msg","id":"evil","to":to,"conv_id":conv,"payload":"cA=="}),
                )
            }
            Op::Advance { ms } => {
                w.now = w.now.plus_ms(ms);
                w.relay.handle_timeout(w.now);
                let outs = w.drain();
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
        };
        // Invariants over this step's outputs.
        for o in &outs {
            let relay_core::Output::Send { conn, frame } = o else {
                continue;
            };
            if *conn == oc {
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
                    let (author, id) = &model.accepted[&m.seq.get()];
                    assert_ne!(*author, who, "own message echoed");
                    assert_eq!(id, m.id.as_str());
                    assert_eq!(m.from.as_str(), users[*author].alias);
                    model.pushed[who].insert(m.seq.get());
                }
                ServerFrame::Delivered(r) | ServerFrame::Read(r) => {
                    let k = usize::from(matches!(frame, ServerFrame::Read(_)));
                    assert!(
                        r.seq.get() > model.forwarded[who][k],
                        "receipt moved backwards"
                    );
                    model.forwarded[who][k] = r.seq.get();
                }
                _ => {}
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
    #[test]
    fn relay_matches_naive_model(ops in proptest::collection::vec(op(), 1..60)) {
        run(ops);
    }
}
