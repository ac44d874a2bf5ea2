//! Oracles over what the relay sent, frame by frame, as each client's socket received it,
//! before the client's own deduplication ([`client::WireTap`]): a relay that delivers one
//! message twice under two seqs, or gives one seq to two messages, is caught even though the
//! app shows each message once.
//!
//! | oracle | checks |
//! |---|---|
//! | `duplicate-delivery` | no message id reaches its recipient under two different seqs (a re-send stored twice) |
//! | `seq-reused` | no (conversation, seq) names two different message ids, across every ack and delivery seen |
//! | `ack-lost` | every message acked to its sender (an `ack` frame) reached its recipient's socket by the end |
//! | `receipts` | (its wire half) a `delivered` for seq N reaches the sender only after the other member's socket received a message of that conversation with seq N or later, a `read` for seq N only after the other member marked it read up to N or later: a relay never invents a receipt nor forwards more than was sent |

use std::collections::{BTreeMap, BTreeSet};

pub use crate::wiretap::{WireAck, WireMsg, WireReceipt, WireSeen};

use crate::scenario::Pair;
use crate::violation::{Oracle, Violation};

/// `duplicate-delivery`: one message id delivered to its recipient under two seqs.
pub fn duplicate_delivery(seen: &WireSeen, out: &mut Vec<Violation>) {
    let mut seqs: BTreeMap<(usize, &str), BTreeSet<u64>> = BTreeMap::new();
    for m in &seen.msgs {
        if let Some(seq) = m.seq {
            seqs.entry((m.client, m.id.as_str()))
                .or_default()
                .insert(seq);
        }
    }
    let twice: Vec<_> = seqs.iter().filter(|(_, s)| s.len() > 1).collect();
    if let Some(((client, id), s)) = twice.first() {
        out.push(Violation::new(
            Oracle::DuplicateDelivery,
            format!(
                "{} message(s) delivered more than once under different seqs; first: c{client} got {id} as seqs {s:?}",
                twice.len()
            ),
        ));
    }
}

/// `seq-reused`: one (conversation, seq) naming two message ids.
pub fn seq_reused(seen: &WireSeen, out: &mut Vec<Violation>) {
    let mut ids: BTreeMap<(&str, u64), BTreeSet<&str>> = BTreeMap::new();
    for a in &seen.acks {
        ids.entry((a.conv.as_str(), a.seq))
            .or_default()
            .insert(a.id.as_str());
    }
    for m in &seen.msgs {
        if let Some(seq) = m.seq {
            ids.entry((m.conv.as_str(), seq))
                .or_default()
                .insert(m.id.as_str());
        }
    }
    let reused: Vec<_> = ids.iter().filter(|(_, i)| i.len() > 1).collect();
    if let Some(((conv, seq), i)) = reused.first() {
        out.push(Violation::new(
            Oracle::SeqReused,
            format!(
                "{} seq(s) given to more than one message; first: {conv} seq {seq} names {i:?}",
                reused.len()
            ),
        ));
    }
}

/// `ack-lost`: acked to its sender, never delivered to its recipient's socket.
pub fn ack_lost(seen: &WireSeen, members: &BTreeMap<&str, Pair>, out: &mut Vec<Violation>) {
    let delivered: BTreeSet<(usize, &str)> = seen
        .msgs
        .iter()
        .map(|m| (m.client, m.id.as_str()))
        .collect();
    let mut lost: BTreeMap<&str, &WireAck> = BTreeMap::new();
    for a in &seen.acks {
        let Some(pair) = members.get(a.conv.as_str()) else {
            continue;
        };
        if !delivered.contains(&(pair.peer(a.client), a.id.as_str())) {
            lost.entry(a.id.as_str()).or_insert(a);
        }
    }
    if let Some(first) = lost.values().next() {
        let recipient = members
            .get(first.conv.as_str())
            .map_or(first.client, |p| p.peer(first.client));
        out.push(Violation::new(
            Oracle::AckLost,
            format!(
                "{} acknowledged message(s) never reached the recipient's socket; first: {} (c{} -> c{recipient}, {} seq {})",
                lost.len(),
                first.id,
                first.client,
                first.conv,
                first.seq
            ),
        ));
    }
}

/// `receipts`, causally on the wire: every receipt a sender's socket received was preceded
/// (in the order the run's sockets received frames and the apps marked reads) by what it
/// stands for at the other member:
///
/// * a `delivered` for seq N, by a `msg` of its conversation with seq N or later at the
///   other member's socket (a client acknowledges only what it received, after it received
///   it: an earlier `delivered` was made up by the relay, e.g. at acceptance, while the
///   recipient was away);
/// * a `read` for seq N, by the other member's app marking that conversation read up to N
///   or later ([`WireSeen::marks`]): a relay forwards the seq the reader sent, never more
///   (not "the newest message", which the reader may not have seen).
pub fn receipts_causal(seen: &WireSeen, members: &BTreeMap<&str, Pair>, out: &mut Vec<Violation>) {
    // The lists are in the order the sockets received them (and the apps marked): walk them
    // together, keeping per (client, conversation) the highest seq received and marked so far.
    let mut newest: BTreeMap<(usize, &str), u64> = BTreeMap::new();
    let mut marked: BTreeMap<(usize, &str), u64> = BTreeMap::new();
    let mut msgs = seen.msgs.iter().peekable();
    let mut marks = seen.marks.iter().peekable();
    let mut invented: Vec<(&WireReceipt, usize)> = Vec::new();
    let mut beyond: Vec<(&WireReceipt, usize, Option<u64>)> = Vec::new();
    for r in &seen.receipts {
        while let Some(m) = msgs.next_if(|m| m.at < r.at) {
            if let Some(seq) = m.seq {
                raise(&mut newest, (m.client, m.conv.as_str()), seq);
            }
        }
        while let Some(m) = marks.next_if(|m| m.at < r.at) {
            raise(&mut marked, (m.client, m.conv.as_str()), m.seq);
        }
        let Some(pair) = members.get(r.conv.as_str()) else {
            continue;
        };
        let reader = pair.peer(r.client);
        let key = (reader, r.conv.as_str());
        if r.kind == "read" {
            let hw = marked.get(&key).copied();
            if hw.is_none_or(|hw| hw < r.seq) {
                beyond.push((r, reader, hw));
            }
        } else if newest.get(&key).is_none_or(|hw| *hw < r.seq) {
            invented.push((r, reader));
        }
    }
    if let Some((first, reader)) = invented.first() {
        out.push(Violation::new(
            Oracle::Receipts,
            format!(
                "{} receipt(s) reached the sender before the other member's socket had the message; first: {} {} seq {} to c{} before c{reader} received it",
                invented.len(),
                first.kind,
                first.conv,
                first.seq,
                first.client
            ),
        ));
    }
    if let Some((first, reader, hw)) = beyond.first() {
        let marked = hw.map_or_else(
            || "had marked nothing read".to_owned(),
            |hw| format!("had marked read up to seq {hw}"),
        );
        out.push(Violation::new(
            Oracle::Receipts,
            format!(
                "{} read receipt(s) covered more than the reader marked read; first: read {} seq {} to c{} when c{reader} {marked}",
                beyond.len(),
                first.conv,
                first.seq,
                first.client
            ),
        ));
    }
}

fn raise<'a>(hw: &mut BTreeMap<(usize, &'a str), u64>, key: (usize, &'a str), seq: u64) {
    let v = hw.entry(key).or_default();
    *v = (*v).max(seq);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(client: usize, id: &str, seq: u64) -> WireMsg {
        WireMsg {
            client,
            id: id.into(),
            conv: "c".into(),
            seq: Some(seq),
            at: 0,
        }
    }

    fn at(m: WireMsg, at: u64) -> WireMsg {
        WireMsg { at, ..m }
    }

    fn receipt(client: usize, seq: u64, at: u64) -> WireReceipt {
        WireReceipt {
            client,
            kind: "delivered".into(),
            conv: "c".into(),
            seq,
            at,
        }
    }

    #[test]
    fn a_receipt_before_the_recipient_had_the_message_was_invented() {
        let members: BTreeMap<&str, Pair> = [("c", Pair { a: 0, b: 1 })].into_iter().collect();
        let seen = WireSeen {
            msgs: vec![at(msg(1, "m1", 1), 2), at(msg(1, "m2", 2), 5)],
            acks: vec![],
            receipts: vec![receipt(0, 1, 3), receipt(0, 2, 6)],
            marks: vec![],
            retracts: vec![],
        };
        let mut out = Vec::new();
        receipts_causal(&seen, &members, &mut out);
        assert!(out.is_empty(), "{out:?}");
        let seen = WireSeen {
            receipts: vec![receipt(0, 2, 4)],
            ..seen
        };
        receipts_causal(&seen, &members, &mut out);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].oracle, Oracle::Receipts);
        assert!(
            out[0].detail.contains("delivered c seq 2"),
            "{}",
            out[0].detail
        );
    }

    #[test]
    fn a_read_beyond_what_the_reader_marked_was_not_sent_by_it() {
        let members: BTreeMap<&str, Pair> = [("c", Pair { a: 0, b: 1 })].into_iter().collect();
        let read = |seq, at| WireReceipt {
            kind: "read".into(),
            ..receipt(0, seq, at)
        };
        let mark = |seq, at| WireReceipt {
            kind: "read".into(),
            ..receipt(1, seq, at)
        };
        // c1 received seqs 1..=3 and marked up to 2; the relay forwarded 2: as sent.
        let seen = WireSeen {
            msgs: vec![
                msg(1, "m1", 1),
                at(msg(1, "m2", 2), 1),
                at(msg(1, "m3", 3), 2),
            ],
            acks: vec![],
            receipts: vec![read(2, 5)],
            marks: vec![mark(2, 4)],
            retracts: vec![],
        };
        let mut out = Vec::new();
        receipts_causal(&seen, &members, &mut out);
        assert!(out.is_empty(), "{out:?}");
        // The relay forwarded the newest seq instead: more than c1 read.
        let seen = WireSeen {
            receipts: vec![read(3, 5)],
            ..seen
        };
        receipts_causal(&seen, &members, &mut out);
        assert_eq!(out.len(), 1, "{out:?}");
        assert!(
            out[0]
                .detail
                .contains("read c seq 3 to c0 when c1 had marked read up to seq 2"),
            "{}",
            out[0].detail
        );
    }

    fn ack(client: usize, id: &str, seq: u64) -> WireAck {
        WireAck {
            client,
            id: id.into(),
            conv: "c".into(),
            seq,
        }
    }

    #[test]
    fn a_replay_under_the_same_seq_is_not_a_duplicate_but_a_new_seq_is() {
        let mut out = Vec::new();
        let seen = WireSeen {
            msgs: vec![msg(1, "m", 3), msg(1, "m", 3)],
            acks: vec![],
            receipts: vec![],
            marks: vec![],
            retracts: vec![],
        };
        duplicate_delivery(&seen, &mut out);
        assert!(out.is_empty(), "{out:?}");
        let seen = WireSeen {
            msgs: vec![msg(1, "m", 13), msg(1, "m", 14)],
            acks: vec![],
            receipts: vec![],
            marks: vec![],
            retracts: vec![],
        };
        duplicate_delivery(&seen, &mut out);
        assert_eq!(out[0].oracle, Oracle::DuplicateDelivery);
        assert!(out[0].detail.contains("{13, 14}"), "{}", out[0].detail);
    }

    #[test]
    fn one_seq_two_ids_is_reused_and_an_undelivered_ack_is_lost() {
        let members: BTreeMap<&str, Pair> = [("c", Pair { a: 0, b: 1 })].into_iter().collect();
        let seen = WireSeen {
            msgs: vec![msg(1, "late", 16)],
            acks: vec![ack(0, "lost", 16), ack(0, "late", 16)],
            receipts: vec![],
            marks: vec![],
            retracts: vec![],
        };
        let mut out = Vec::new();
        seq_reused(&seen, &mut out);
        ack_lost(&seen, &members, &mut out);
        let names: Vec<&str> = out.iter().map(|v| v.oracle.name()).collect();
        assert_eq!(names, ["seq-reused", "ack-lost"], "{out:?}");
        assert!(out[1].detail.contains("lost"), "{}", out[1].detail);
    }
}
