//! The delivery oracles over what the clients observed ([`Observed`]), shared by the
//! simulator and Jepsen mode:
//!
//! | oracle | checks |
//! |---|---|
//! | `delivered-exactly-once` | every live acknowledged message reaches an app of the recipient's account (or its store); no device login sees one message twice |
//! | `non-participant` | no message or typing notice reaches a device outside the conversation, or claims a sender other than the peer (any alias the peer ever had) |
//! | `seq-order` | per device login and conversation, `message` events come in strictly increasing seq |
//! | `seq-gap-free` | per conversation, the seqs seen (sender acks ∪ recipient messages) are exactly `1..=max` |

use std::collections::{BTreeMap, BTreeSet};

use super::observed::{Observed, Seen, alias_of, undelivered};
use crate::trace::Device;
use crate::violation::{Oracle, Violation};

/// Counts the logins of each device: every second-device login is a new install with an
/// empty store (it may be given what an earlier one already had), so what a device sees is
/// keyed by its login; a primary device keeps its store (session 0).
#[derive(Debug, Default)]
struct Logins(BTreeMap<Device, u32>);

impl Logins {
    fn see(&mut self, event: &Seen<'_>) {
        if let Seen::Login { who } = event {
            *self.0.entry(*who).or_default() += 1;
        }
    }

    fn session(&self, who: Device) -> u32 {
        if who.device == 0 {
            0
        } else {
            self.0.get(&who).copied().unwrap_or(0)
        }
    }
}

/// `delivered-exactly-once`: no device login sees a message twice, and every live
/// acknowledged message reached its recipient's account ([`undelivered`]).
pub fn exactly_once(h: &Observed<'_>, out: &mut Vec<Violation>) {
    let mut logins = Logins::default();
    let mut per_device: BTreeMap<(Device, u32, &str), usize> = BTreeMap::new();
    for e in &h.events {
        logins.see(e);
        if let Seen::Message { who, id, .. } = *e {
            let n = per_device
                .entry((who, logins.session(who), id))
                .or_default();
            *n += 1;
            if *n == 2 {
                out.push(Violation::new(
                    Oracle::DeliveredExactlyOnce,
                    format!("{who} got message {id} twice"),
                ));
            }
        }
    }
    for (recipient, lost) in undelivered(h) {
        let first = lost[0];
        let convs: BTreeSet<&str> = lost.iter().map(|a| a.conv.as_str()).collect();
        out.push(Violation::new(
            Oracle::DeliveredExactlyOnce,
            format!(
                "{} message(s) to c{recipient} in {} conversation(s) acknowledged but never delivered; first: {} (c{} -> c{recipient}, {} seq {})",
                lost.len(),
                convs.len(),
                first.id,
                first.sender,
                first.conv,
                first.seq
            ),
        ));
    }
}

/// `non-participant`: messages and typing notices only reach the members of their
/// conversation, from the other member.
pub fn non_participant(h: &Observed<'_>, out: &mut Vec<Violation>) {
    for e in &h.events {
        match *e {
            Seen::Message {
                who,
                id,
                conv,
                from,
                ..
            } => match h.members.get(conv) {
                None => out.push(Violation::new(
                    Oracle::NonParticipant,
                    format!("{who} got {id} in unknown conversation {conv}"),
                )),
                Some(p) => {
                    if !p.has(who.client) || !alias_of(h.aliases, p.peer(who.client), from) {
                        out.push(Violation::new(
                            Oracle::NonParticipant,
                            format!("{who} got {id} in {conv} from {from:?}"),
                        ));
                    }
                }
            },
            Seen::Typing { who, conv, from } => {
                let ok = h.members.get(conv).is_some_and(|p| {
                    p.has(who.client) && alias_of(h.aliases, p.peer(who.client), Some(from))
                });
                if !ok {
                    out.push(Violation::new(
                        Oracle::NonParticipant,
                        format!("{who} got typing from {from} in {conv}"),
                    ));
                }
            }
            _ => {}
        }
    }
}

/// `seq-order`: per device login and known conversation, strictly increasing seqs.
pub fn seq_order(h: &Observed<'_>, out: &mut Vec<Violation>) {
    let mut logins = Logins::default();
    let mut last_seq: BTreeMap<(Device, u32, &str), u64> = BTreeMap::new();
    for e in &h.events {
        logins.see(e);
        let Seen::Message {
            who,
            conv,
            seq: Some(seq),
            ..
        } = *e
        else {
            continue;
        };
        if !h.members.contains_key(conv) {
            continue;
        }
        let last = last_seq
            .entry((who, logins.session(who), conv))
            .or_insert(0);
        if seq <= *last {
            out.push(Violation::new(
                Oracle::SeqOrder,
                format!("{who} got seq {seq} after {last} in {conv}"),
            ));
        }
        *last = (*last).max(seq);
    }
}

/// `seq-gap-free`: per conversation, the seqs of every acknowledged message (retracted ones
/// too) and of every message event together are exactly `1..=max`.
pub fn seq_gap_free(h: &Observed<'_>, out: &mut Vec<Violation>) {
    let mut seqs: BTreeMap<&str, BTreeSet<u64>> = BTreeMap::new();
    for a in h.acked {
        seqs.entry(a.conv.as_str()).or_default().insert(a.seq);
    }
    for e in &h.events {
        if let Seen::Message {
            conv,
            seq: Some(seq),
            ..
        } = *e
        {
            seqs.entry(conv).or_default().insert(seq);
        }
    }
    for (conv, set) in seqs {
        let max = set.last().copied().unwrap_or(0);
        let missing: Vec<u64> = (1..=max).filter(|s| !set.contains(s)).collect();
        if !missing.is_empty() {
            let shown: Vec<u64> = missing.iter().copied().take(10).collect();
            out.push(Violation::new(
                Oracle::SeqGapFree,
                format!(
                    "{conv}: {} seq(s) of 1..={max} never seen, first {shown:?}",
                    missing.len()
                ),
            ));
        }
    }
}
