//! The oracles over what the relay committed (its store's history and final content) and
//! over its logs:
//!
//! | oracle | checks |
//! |---|---|
//! | `seq-unique` | in the relay's committed rows, a message id of a conversation is stored once, with one author and one seq (a resend is deduplicated, never stored again; the other member's use of it is refused), and a seq of a conversation belongs to one message (never reused, e.g. after a restart) |
//! | `fail-stop` | every message acknowledged and every order handed out was committed first (the store's history has it) |
//! | `retract-drops` | once a retract is committed (the message's tombstone marked retracted), no queued copy of the message is left in the committed rows: the copy's deletion is in that commit, or the copy was gone before; with a sharded relay, where the recipient's copy is another shard's, the retract commits a notice for that shard, and the copy's deletion comes at the latest in the commit where that shard took it (the notice row's deletion follows it) |
//! | `receipt-drops` | once a receipt mark is committed, no committed queued copy of a message it covers is left for its reader (the deletion is in that commit, or was before) |
//! | `store-intact` | every reopen of the store (restart, rebuild) loads exactly what was committed, every table and row (SQLite); nothing is committed while the relay is powered off |
//! | `queue-summaries` | in the relay's final rows, the queue index holds one row per non-empty queue, saying what its stored messages give (messages, bytes, oldest, sender) between the members of a stored conversation: the relay reads queues only when needed and trusts the index for its bounds and timers meanwhile |
//! | `contacts-index` | in the relay's final rows, every friendship has exactly its two `contacts` rows (one per member, equal to it) and there is no other: a user's contacts are read from them alone |
//! | `canary-store` / `canary-logs` | no planted plaintext in the relay's committed rows or in any log line |

use std::collections::{BTreeMap, BTreeSet};

use super::Input;
use super::observed::Ack;
use crate::violation::{Oracle, Violation};

/// `retract-drops`: a committed retract leaves no committed queued copy of its message.
///
/// Every client-visible oracle excuses a retracted message (it may arrive, or not, or after
/// its retract), so a relay that drops the copy in memory only, and brings it back at its
/// next restart, is caught here, on what it committed, or nowhere.
pub(super) fn retract_drops(input: &Input<'_>, out: &mut Vec<Violation>) {
    let kept: Vec<String> = input
        .history
        .messages
        .values()
        .filter_map(|m| {
            let retracted = *input.history.retracted_ids.get(&m.id)?;
            // A notice of the retract for the recipient's shard: the copy goes by the time
            // that shard took it (not taken by the end: the outbox oracles judge the notice).
            let due = match input.history.retract_notices.get(&m.id) {
                Some(&(put, taken)) if put <= retracted => taken?,
                _ => retracted,
            };
            (m.at_ms <= due && m.deleted_ms.is_none_or(|d| d > due)).then(|| {
                let until = m
                    .deleted_ms
                    .map_or_else(|| "the end".to_owned(), |d| format!("{d} ms"));
                format!(
                    "{} ({} seq {}) retract committed at {retracted} ms, queued copy kept until {until}",
                    m.id, m.conv, m.seq
                )
            })
        })
        .collect();
    if let Some(first) = kept.first() {
        out.push(Violation::new(
            Oracle::RetractDrops,
            format!(
                "{} retracted message(s) still queued after their retract was committed; first: {first}",
                kept.len()
            ),
        ));
    }
}

/// `receipt-drops`: a committed receipt mark leaves no committed queued copy of what it
/// covers for its reader.
///
/// A copy kept in the store comes back at the next restart and is delivered again under its
/// seq, which the wire oracles accept (at-least-once redelivery), and the client drops as a
/// duplicate; only the committed rows tell that the acknowledgement was not held to.
pub(super) fn receipt_drops(input: &Input<'_>, out: &mut Vec<Violation>) {
    // The highest mark of (conversation, reader) as of each commit, in commit order.
    let mut marks: BTreeMap<(&str, &str), Vec<(u64, u64)>> = BTreeMap::new();
    for (at, conv, reader, seq) in &input.history.mark_writes {
        let list = marks.entry((conv.as_str(), reader.as_str())).or_default();
        let high = list.last().map_or(0, |(_, s)| *s).max(*seq);
        list.push((*at, high));
    }
    let kept: Vec<String> = input
        .history
        .messages
        .values()
        .filter_map(|m| {
            let list = marks.get(&(m.conv.as_str(), m.recipient.as_str()))?;
            let (at, seq) = list
                .iter()
                .find(|(at, seq)| *seq >= m.seq && *at >= m.at_ms)?;
            m.deleted_ms.is_none_or(|d| d > *at).then(|| {
                format!(
                    "{} ({} seq {}) covered by a receipt mark of seq {seq} committed at {at} ms",
                    m.id, m.conv, m.seq
                )
            })
        })
        .collect();
    if let Some(first) = kept.first() {
        out.push(Violation::new(
            Oracle::ReceiptDrops,
            format!(
                "{} acknowledged message(s) still queued for their reader after the receipt was committed; first: {first}",
                kept.len()
            ),
        ));
    }
}

/// One seq per message, one message per seq, over every `Messages` row the relay committed.
pub(super) fn seq_unique(input: &Input<'_>, out: &mut Vec<Violation>) {
    // A message is its conversation's id: stored once, under one seq, by one author.
    let mut seqs_of: BTreeMap<(&str, &str), BTreeSet<(&str, u64)>> = BTreeMap::new();
    let mut ids_at: BTreeMap<(&str, u64), BTreeSet<&str>> = BTreeMap::new();
    for (from, id, conv, seq) in &input.history.assigned {
        seqs_of
            .entry((conv.as_str(), id.as_str()))
            .or_default()
            .insert((from.as_str(), *seq));
        ids_at
            .entry((conv.as_str(), *seq))
            .or_default()
            .insert(id.as_str());
    }
    let twice: Vec<String> = seqs_of
        .iter()
        .filter(|(_, s)| s.len() > 1)
        .map(|((conv, id), s)| format!("{id} in {conv} stored as (author, seq) {s:?}"))
        .collect();
    if let Some(first) = twice.first() {
        out.push(Violation::new(
            Oracle::SeqUnique,
            format!(
                "{} message id(s) stored more than once in a conversation (a resend was not deduplicated, or the other member's id accepted); first: {first}",
                twice.len()
            ),
        ));
    }
    let reused: Vec<String> = ids_at
        .iter()
        .filter(|(_, ids)| ids.len() > 1)
        .map(|((conv, seq), ids)| format!("{conv} seq {seq} given to {ids:?}"))
        .collect();
    if let Some(first) = reused.first() {
        out.push(Violation::new(
            Oracle::SeqUnique,
            format!(
                "{} seq(s) given to more than one message; first: {first}",
                reused.len()
            ),
        ));
    }
}

/// Every ack and every order handed out was committed first.
pub(super) fn fail_stop(input: &Input<'_>, acked: &[Ack], out: &mut Vec<Violation>) {
    let committed_seq: BTreeMap<&str, u64> = input
        .history
        .messages
        .values()
        .map(|m| (m.id.as_str(), m.seq))
        .collect();
    for a in acked {
        let known = input.history.accepted_ids.contains(&a.id);
        match committed_seq.get(a.id.as_str()) {
            Some(seq) if *seq != a.seq => out.push(Violation::new(
                Oracle::FailStop,
                format!(
                    "c{} was acked {} with seq {}, but seq {seq} was committed",
                    a.sender, a.id, a.seq
                ),
            )),
            None if !known => out.push(Violation::new(
                Oracle::FailStop,
                format!(
                    "c{} was acked {} (seq {}) but the relay never committed it",
                    a.sender, a.id, a.seq
                ),
            )),
            _ => {}
        }
    }
    for o in &input.world.ledger.orders {
        if !input.history.orders.contains(&o.order_id) {
            out.push(Violation::new(
                Oracle::FailStop,
                format!(
                    "c{} was handed order {} but the relay never committed it",
                    o.client, o.order_id
                ),
            ));
        }
    }
}

/// Every reopen loaded what was committed; nothing was committed while powered off.
pub(super) fn store_intact(input: &Input<'_>, out: &mut Vec<Violation>) {
    for (t, diff) in &input.history.load_mismatches {
        out.push(Violation::new(
            Oracle::StoreIntact,
            format!("the store reopened at {t} ms did not load what was committed: {diff}"),
        ));
    }
    if let Some(t) = input.history.commits_while_off.first() {
        out.push(Violation::new(
            Oracle::StoreIntact,
            format!(
                "{} commit(s) while the relay was powered off, first at {t} ms",
                input.history.commits_while_off.len()
            ),
        ));
    }
}

/// What a queue holds, as its `queue_index` row states it or its messages give it.
#[derive(Debug, Default, PartialEq, Eq)]
struct QueueSum {
    msgs: u64,
    bytes: u64,
    oldest: u64,
    from: String,
}

/// `queue-summaries`: the queue index holds one row per non-empty queue, and each agrees with
/// the stored messages (counts, bytes, oldest, sender), between the members of a stored
/// conversation.
///
/// The relay corrects an index entry that disagrees when it next reads the queue (it counts
/// the correction), so a write path that forgets the index would otherwise only show as queue
/// bounds that drift; the committed rows tell it at once.
pub(super) fn queue_summaries(input: &Input<'_>, out: &mut Vec<Violation>) {
    use relay_core::store::Table;
    use serde_json::Value;
    let rows = |t: Table| input.snapshot.get(&t).into_iter().flatten();
    let mut found: BTreeMap<(String, String), QueueSum> = BTreeMap::new();
    let mut wrong = Vec::new();
    for (key, value) in rows(Table::Messages) {
        let Ok(m) = serde_json::from_slice::<Value>(value) else {
            wrong.push(format!("message row {key:?} is not JSON"));
            continue;
        };
        let text = |f: &str| m[f].as_str().unwrap_or_default().to_owned();
        let at = m["at"].as_u64().unwrap_or_default();
        let q = found
            .entry((text("recipient"), text("conv_id")))
            .or_default();
        q.oldest = if q.msgs == 0 { at } else { q.oldest.min(at) };
        q.msgs += 1;
        q.bytes +=
            relay_core::limits::queued_message_bytes(text("id").len(), text("payload").len());
        if q.from.is_empty() {
            q.from = text("from");
        } else if q.from != text("from") {
            wrong.push(format!("message row {key:?}: a second sender in one queue"));
        }
    }
    let conversations: BTreeMap<&String, Value> = rows(Table::Conversations)
        .filter_map(|(k, v)| Some((k, serde_json::from_slice::<Value>(v).ok()?)))
        .collect();
    for (key, value) in rows(Table::QueueIndex) {
        let Ok(e) = serde_json::from_slice::<Value>(value) else {
            wrong.push(format!("queue index row {key:?} is not JSON"));
            continue;
        };
        let text = |f: &str| e[f].as_str().unwrap_or_default().to_owned();
        let (recipient, conv) = (text("recipient"), text("conv_id"));
        if *key != format!("{recipient}/{conv}") {
            wrong.push(format!("queue index row {key:?} names {recipient}/{conv}"));
        }
        let members = conversations
            .get(&conv)
            .and_then(|c| c["members"].as_array().cloned())
            .unwrap_or_default();
        let (r, f) = (Value::from(recipient.clone()), Value::from(text("from")));
        if !(members.contains(&r) && members.contains(&f) && r != f) {
            wrong.push(format!(
                "queue index row {key:?}: not between the members of a stored conversation"
            ));
        }
        let want = found.remove(&(recipient, conv)).unwrap_or_default();
        let got = QueueSum {
            msgs: e["msgs"].as_u64().unwrap_or_default(),
            bytes: e["bytes"].as_u64().unwrap_or_default(),
            oldest: e["oldest"].as_u64().unwrap_or_default(),
            from: text("from"),
        };
        if got != want {
            wrong.push(format!(
                "{key}: the index says {got:?}, the stored messages {want:?}"
            ));
        }
    }
    for ((recipient, conv), q) in found {
        wrong.push(format!(
            "{} message(s) for {recipient} in {conv}, which has no queue index row",
            q.msgs
        ));
    }
    if let Some(first) = wrong.first() {
        out.push(Violation::new(
            Oracle::QueueSummaries,
            format!(
                "{} queue summary(ies) disagree with the stored messages; first: {first}",
                wrong.len()
            ),
        ));
    }
}

/// `contacts-index`: every stored friendship has exactly its two `contacts` rows (one per
/// member, each the friendship's row), and there is no other: a user's contacts are read from
/// those rows alone, so one missing or stale hides a friendship or a conversation from it.
/// A member of another shard than the friendship's owner gets its row by a notice the owner
/// keeps until that shard took it: a row missing or stale while its notice is still kept is
/// on its way (a friendship written in the run's last moments), not lost.
pub(super) fn contacts_index(input: &Input<'_>, out: &mut Vec<Violation>) {
    use relay_core::store::Table;
    use serde_json::Value;
    let rows = |t: Table| input.snapshot.get(&t).into_iter().flatten();
    let mut want: BTreeMap<String, &Vec<u8>> = BTreeMap::new();
    let mut wrong = Vec::new();
    for (key, value) in rows(Table::Friendships) {
        let Ok(f) = serde_json::from_slice::<Value>(value) else {
            wrong.push(format!("friendship row {key:?} is not JSON"));
            continue;
        };
        for member in ["requester", "addressee"] {
            let user = f[member].as_str().unwrap_or_default();
            want.insert(format!("{user}/{key}"), value);
        }
    }
    // Notice keys `<shard>/<user>/friendship/<id>` still kept: `<user>/<id>`.
    let on_the_way: BTreeSet<String> = rows(Table::Notices)
        .filter_map(|(key, _)| {
            let (_, rest) = key.split_once('/')?;
            let (user, id) = rest.split_once("/friendship/")?;
            Some(format!("{user}/{}", id.parse::<u64>().ok()?))
        })
        .collect();
    let kept = |contact_key: &str| {
        contact_key
            .rsplit_once('/')
            .and_then(|(user, id)| Some(format!("{user}/{}", id.parse::<u64>().ok()?)))
            .is_some_and(|k| on_the_way.contains(&k))
    };
    for (key, value) in rows(Table::Contacts) {
        match want.remove(key) {
            Some(v) if v == value => {}
            Some(_) if kept(key) => {}
            Some(v) => {
                let show = |bytes: &[u8]| {
                    let row = serde_json::from_slice::<Value>(bytes).unwrap_or_default();
                    format!("status {} rev {}", row["status"], row["rev"])
                };
                wrong.push(format!(
                    "contacts row {key:?} differs from its friendship ({} there, {} here)",
                    show(v),
                    show(value)
                ));
            }
            None => wrong.push(format!("contacts row {key:?} has no friendship")),
        }
    }
    wrong.extend(
        want.into_keys()
            .filter(|k| !kept(k))
            .map(|k| format!("no contacts row {k:?}")),
    );
    if let Some(first) = wrong.first() {
        out.push(Violation::new(
            Oracle::ContactsIndex,
            format!(
                "{} contacts row(s) disagree with the friendships; first: {first}",
                wrong.len()
            ),
        ));
    }
}

/// No canary in any key or value of the relay's final rows.
pub(super) fn store_canaries(input: &Input<'_>, out: &mut Vec<Violation>) {
    let canaries = input.scenario.canaries();
    for (table, rows) in input.snapshot {
        for (key, value) in rows {
            if !contains(value, b"CANARY") && !key.contains("CANARY") {
                continue;
            }
            for canary in &canaries {
                let c = canary.as_bytes();
                if contains(key.as_bytes(), c) || contains(value, c) {
                    out.push(Violation::new(
                        Oracle::CanaryStore,
                        format!("{canary} in relay table {table:?}"),
                    ));
                }
            }
        }
    }
}

/// Checks the lines that mention a canary prefix for actual canaries.
pub(crate) fn logs_free_of_canaries(text: &str, canaries: &[String], out: &mut Vec<Violation>) {
    if text.is_empty() {
        return;
    }
    for canary in canaries {
        if text.contains(canary.as_str()) {
            out.push(Violation::new(
                Oracle::CanaryLogs,
                format!("{canary} appears in the logs"),
            ));
        }
    }
}

/// Whether `needle` (non-empty) occurs in `haystack`.
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}
