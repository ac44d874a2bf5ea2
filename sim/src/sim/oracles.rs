//! Invariants checked at the end of every run; each violation names its oracle.
//!
//! | oracle | checks |
//! |---|---|
//! | `delivered-exactly-once` | every message the relay acknowledged (the sender's store has its seq) reaches an app of the recipient's account; no app sees one message twice |
//! | `seq-order` | per device and conversation, `message` events come in strictly increasing seq |
//! | `seq-gap-free` | per conversation, the seqs seen (sender acks ∪ recipient messages) are exactly `1..=max` |
//! | `non-participant` | no message or typing event reaches a device outside the conversation, or claims a sender other than the peer |
//! | `receipts` | `delivered`/`read` only for messages the recipient's account received (and, for `read`, marked read); a status never moves down |
//!
//! Retracted messages are exempt from delivery and receipt checks: the relay drops a
//! still-queued copy on `retract`, and a later receipt "up to seq" covers it.
//! | `outbox-drained` | after the liveness phase no primary device has an unacknowledged outbox intent |
//! | `canary-store` / `canary-logs` | no planted plaintext in the relay's committed rows or in any log line |

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use client_core::machine::Event;
use client_core::store::{ClientStore as _, MessageStatus};
use relay_core::store::{MemoryStore as RelayStore, Store as _};

use super::scenario::Scenario;
use super::trace::{Device, Record};
use crate::client::SharedStore;

/// One broken invariant.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Violation {
    /// Oracle name.
    pub oracle: &'static str,
    /// What was seen.
    pub detail: String,
}

impl Violation {
    /// A violation of `oracle`.
    pub fn new(oracle: &'static str, detail: impl Into<String>) -> Self {
        Self {
            oracle,
            detail: detail.into(),
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {}", self.oracle, self.detail)
    }
}

/// Every oracle name (for summaries).
pub const ORACLES: [&str; 10] = [
    "delivered-exactly-once",
    "seq-order",
    "seq-gap-free",
    "non-participant",
    "receipts",
    "outbox-drained",
    "canary-store",
    "canary-logs",
    "setup",
    "host-error",
];

/// What the oracles read.
#[derive(Debug)]
pub(super) struct Input<'a> {
    pub(super) scenario: &'a Scenario,
    pub(super) records: &'a [Record],
    pub(super) stores: &'a [SharedStore],
    pub(super) second_stores: &'a [(Device, SharedStore)],
    pub(super) convs: &'a BTreeMap<usize, String>,
    pub(super) aliases: &'a BTreeMap<usize, String>,
    pub(super) relay_store: &'a RelayStore,
}

/// A message as acknowledged to its sender.
#[derive(Debug, Clone)]
struct Acked {
    id: String,
    conv: String,
    seq: u64,
    sender: usize,
}

/// Runs every store/trace oracle.
pub(super) fn check_all(input: &Input<'_>, out: &mut Vec<Violation>) {
    if out.iter().any(|v| v.oracle == "setup") {
        return;
    }
    let conv_pair: BTreeMap<&str, usize> = input
        .convs
        .iter()
        .map(|(pair, conv)| (conv.as_str(), *pair))
        .collect();
    let all_acked = acked_messages(input);
    let acked = all_acked.clone();
    // The relay drops a still-queued copy of a retracted message (relay-core `messaging`): a
    // retracted message need not be delivered, and receipts may cover it.
    let retracted: BTreeSet<&str> = input
        .records
        .iter()
        .filter_map(|r| match r {
            Record::Event {
                event: Event::Retracted { id },
                ..
            } => Some(id.as_str()),
            _ => None,
        })
        .collect();
    let acked: Vec<Acked> = acked
        .into_iter()
        .filter(|a| !retracted.contains(a.id.as_str()))
        .collect();
    delivery(input, &conv_pair, &acked, out);
    gap_free(input, &all_acked, out);
    receipts(input, &conv_pair, &acked, out);
    outbox(input, out);
    store_canaries(input, out);
}

fn acked_messages(input: &Input<'_>) -> Vec<Acked> {
    let mut out = Vec::new();
    for (client, store) in input.stores.iter().enumerate() {
        let snapshot = store.snapshot();
        for conv in input.convs.values() {
            for m in snapshot.get_history(conv, None, None).unwrap_or_default() {
                if let (true, Some(seq)) = (m.is_me, m.seq) {
                    out.push(Acked {
                        id: m.id,
                        conv: conv.clone(),
                        seq,
                        sender: client,
                    });
                }
            }
        }
    }
    out
}

/// `(device, message id, conv, seq, from)` of every `message` event, in trace order.
/// `(device, message id, conv, seq, from)`.
type Received<'a> = (Device, &'a str, &'a str, Option<u64>, Option<&'a str>);

fn received(records: &[Record]) -> Vec<Received<'_>> {
    records
        .iter()
        .filter_map(|r| match r {
            Record::Event {
                who,
                event: Event::Message(m),
                ..
            } => Some((
                *who,
                m.id.as_str(),
                m.conversation_id.as_str(),
                m.seq,
                m.from_alias_id.as_deref(),
            )),
            _ => None,
        })
        .collect()
}

fn delivery(
    input: &Input<'_>,
    conv_pair: &BTreeMap<&str, usize>,
    acked: &[Acked],
    out: &mut Vec<Violation>,
) {
    let got = received(input.records);
    let mut per_device: BTreeMap<(Device, &str), usize> = BTreeMap::new();
    let mut last_seq: BTreeMap<(Device, &str), u64> = BTreeMap::new();
    for &(who, id, conv, seq, from) in &got {
        *per_device.entry((who, id)).or_default() += 1;
        if per_device[&(who, id)] == 2 {
            out.push(Violation::new(
                "delivered-exactly-once",
                format!("{who} got message {id} twice"),
            ));
        }
        let Some(&pair) = conv_pair.get(conv) else {
            out.push(Violation::new(
                "non-participant",
                format!("{who} got {id} in unknown conversation {conv}"),
            ));
            continue;
        };
        let p = input.scenario.pairs[pair];
        let peer_alias = input.aliases.get(&p.peer(who.client)).map(String::as_str);
        if !p.has(who.client) || from != peer_alias {
            out.push(Violation::new(
                "non-participant",
                format!("{who} got {id} in {conv} from {from:?}"),
            ));
        }
        if let Some(seq) = seq {
            let last = last_seq.entry((who, conv)).or_insert(0);
            if seq <= *last {
                out.push(Violation::new(
                    "seq-order",
                    format!("{who} got seq {seq} after {last} in {conv}"),
                ));
            }
            *last = (*last).max(seq);
        }
    }
    for r in input.records {
        if let Record::Event {
            who,
            event:
                Event::Typing {
                    from_alias_id,
                    conversation_id,
                },
            ..
        } = r
        {
            let ok = conv_pair
                .get(conversation_id.as_str())
                .is_some_and(|&pair| {
                    let p = input.scenario.pairs[pair];
                    p.has(who.client)
                        && input.aliases.get(&p.peer(who.client)) == Some(from_alias_id)
                });
            if !ok {
                out.push(Violation::new(
                    "non-participant",
                    format!("{who} got typing from {from_alias_id} in {conversation_id}"),
                ));
            }
        }
    }
    // Liveness: every acknowledged message reached some app of the recipient's account.
    let by_account: BTreeSet<(usize, &str)> =
        got.iter().map(|&(who, id, ..)| (who.client, id)).collect();
    for a in acked {
        let Some(&pair) = conv_pair.get(a.conv.as_str()) else {
            continue;
        };
        let recipient = input.scenario.pairs[pair].peer(a.sender);
        let in_store = input.stores[recipient]
            .snapshot()
            .get_message(&a.id)
            .ok()
            .flatten()
            .is_some();
        if !by_account.contains(&(recipient, a.id.as_str())) && !in_store {
            out.push(Violation::new(
                "delivered-exactly-once",
                format!(
                    "message {} (c{} -> c{recipient}, {} seq {}) acknowledged but never delivered",
                    a.id, a.sender, a.conv, a.seq
                ),
            ));
        }
    }
}

fn gap_free(input: &Input<'_>, acked: &[Acked], out: &mut Vec<Violation>) {
    let mut seqs: BTreeMap<&str, BTreeSet<u64>> = BTreeMap::new();
    for a in acked {
        seqs.entry(a.conv.as_str()).or_default().insert(a.seq);
    }
    for (_, _, conv, seq, _) in received(input.records) {
        if let Some(seq) = seq {
            seqs.entry(conv).or_default().insert(seq);
        }
    }
    for (conv, set) in seqs {
        let max = set.last().copied().unwrap_or(0);
        let missing: Vec<u64> = (1..=max).filter(|s| !set.contains(s)).collect();
        if !missing.is_empty() {
            out.push(Violation::new(
                "seq-gap-free",
                format!("{conv}: seqs {missing:?} of 1..={max} never seen"),
            ));
        }
    }
}

fn rank(s: MessageStatus) -> u8 {
    match s {
        MessageStatus::Sending => 0,
        MessageStatus::Failed => 1,
        MessageStatus::Sent => 2,
        MessageStatus::Delivered => 3,
        MessageStatus::Read => 4,
    }
}

fn receipts(
    input: &Input<'_>,
    conv_pair: &BTreeMap<&str, usize>,
    acked: &[Acked],
    out: &mut Vec<Violation>,
) {
    let by_id: BTreeMap<&str, &Acked> = acked.iter().map(|a| (a.id.as_str(), a)).collect();
    let mut delivered: BTreeSet<(usize, &str)> = BTreeSet::new();
    let mut read_hw: BTreeMap<(usize, &str), u64> = BTreeMap::new();
    let mut last: BTreeMap<(Device, &str), MessageStatus> = BTreeMap::new();
    for r in input.records {
        match r {
            Record::Event {
                who,
                event: Event::Message(m),
                ..
            } => {
                delivered.insert((who.client, m.id.as_str()));
            }
            Record::ReadMarked { who, conv, seq, .. } => {
                let hw = read_hw.entry((who.client, conv.as_str())).or_insert(0);
                *hw = (*hw).max(*seq);
            }
            Record::Event {
                who,
                event: Event::StatusChange { id, status },
                ..
            } => {
                if let Some(prev) = last.insert((*who, id.as_str()), *status)
                    && rank(*status) <= rank(prev)
                {
                    out.push(Violation::new(
                        "receipts",
                        format!("{who} status of {id} moved {prev:?} -> {status:?}"),
                    ));
                }
                if !matches!(status, MessageStatus::Delivered | MessageStatus::Read) {
                    continue;
                }
                let Some(a) = by_id.get(id.as_str()) else {
                    continue;
                };
                let Some(&pair) = conv_pair.get(a.conv.as_str()) else {
                    continue;
                };
                let recipient = input.scenario.pairs[pair].peer(a.sender);
                if !delivered.contains(&(recipient, id.as_str())) {
                    out.push(Violation::new(
                        "receipts",
                        format!("{who} {status:?} for {id} before c{recipient} received it"),
                    ));
                }
                if *status == MessageStatus::Read
                    && read_hw
                        .get(&(recipient, a.conv.as_str()))
                        .is_none_or(|hw| *hw < a.seq)
                {
                    out.push(Violation::new(
                        "receipts",
                        format!(
                            "{who} read for {id} (seq {}) not marked read by c{recipient}",
                            a.seq
                        ),
                    ));
                }
            }
            _ => {}
        }
    }
}

fn outbox(input: &Input<'_>, out: &mut Vec<Violation>) {
    for (client, store) in input.stores.iter().enumerate() {
        let pending = store.snapshot().list_outbox().unwrap_or_default();
        if !pending.is_empty() {
            let ids: Vec<&str> = pending.iter().map(|i| i.internal_id.as_str()).collect();
            out.push(Violation::new(
                "outbox-drained",
                format!("c{client} still has unacknowledged {ids:?} after the liveness phase"),
            ));
        }
    }
    // Second devices only log in and leave; their stores are not expected to drain.
    let _ = input.second_stores;
}

fn store_canaries(input: &Input<'_>, out: &mut Vec<Violation>) {
    let mut store = input.relay_store.clone();
    let Ok(snapshot) = store.load() else {
        out.push(Violation::new("canary-store", "relay store unreadable"));
        return;
    };
    for (table, rows) in &snapshot {
        for (key, value) in rows {
            for canary in &input.scenario.canaries {
                let c = canary.as_bytes();
                if contains(key.as_bytes(), c) || contains(value, c) {
                    out.push(Violation::new(
                        "canary-store",
                        format!("{canary} in relay table {table:?}"),
                    ));
                }
            }
        }
    }
}

/// Checks captured log text for canaries.
pub(super) fn logs_free_of_canaries(text: &str, canaries: &[String], out: &mut Vec<Violation>) {
    for canary in canaries {
        if text.contains(canary.as_str()) {
            out.push(Violation::new(
                "canary-logs",
                format!("{canary} appears in the logs"),
            ));
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}
