//! The receipt oracles:
//!
//! | oracle | checks |
//! |---|---|
//! | `receipts` | (shared with Jepsen mode) `delivered`/`read` only for messages the recipient's account received (and, for `read`, marked read); a status never moves down |
//! | `receipts-clear` | the relay deletes a queued message (a receipt, a retract) only after an app of the recipient received it, or its author retracted it, or its TTL passed on the relay's clock |
//! | `retract-lands` | a retract the relay accepted reaches the recipient of the message (if it got the message, and came back within the offline TTL on the relay's clock) |

use std::collections::{BTreeMap, BTreeSet};

use client_core::machine::{Event, NetworkState};
use client_core::store::MessageStatus;

use super::Input;
use super::observed::{Ack, Observed, Seen};
use crate::trace::{Device, Record};
use crate::violation::{Oracle, Violation};

fn rank(s: MessageStatus) -> u8 {
    match s {
        MessageStatus::Sending => 0,
        MessageStatus::Failed => 1,
        MessageStatus::Sent => 2,
        MessageStatus::Delivered => 3,
        MessageStatus::Read => 4,
    }
}

/// `receipts`, over what the clients observed: a sender's status of a live acknowledged
/// message moves up only, to `delivered` or `read` only once its recipient's account had the
/// message, and to `read` only once the recipient marked it read. ("Once": earlier in the
/// history when it is [`causal`](Observed::causal), anywhere in it otherwise.)
pub fn receipts(h: &Observed<'_>, out: &mut Vec<Violation>) {
    let by_id: BTreeMap<&str, &Ack> = h.live_acks().map(|a| (a.id.as_str(), a)).collect();
    let mut delivered: BTreeSet<(usize, &str)> = BTreeSet::new();
    let mut read_hw: BTreeMap<(usize, &str), u64> = BTreeMap::new();
    if !h.causal {
        for e in &h.events {
            had(e, &mut delivered, &mut read_hw);
        }
    }
    let mut last: BTreeMap<(Device, &str), MessageStatus> = BTreeMap::new();
    for e in &h.events {
        had(e, &mut delivered, &mut read_hw);
        let Seen::Status { who, id, status } = *e else {
            continue;
        };
        if let Some(prev) = last.insert((who, id), status)
            && rank(status) <= rank(prev)
        {
            out.push(Violation::new(
                Oracle::Receipts,
                format!("{who} status of {id} moved {prev:?} -> {status:?}"),
            ));
        }
        if !matches!(status, MessageStatus::Delivered | MessageStatus::Read) {
            continue;
        }
        let Some(a) = by_id.get(id) else {
            continue;
        };
        let Some(recipient) = h.recipient(a) else {
            continue;
        };
        if !delivered.contains(&(recipient, id)) {
            out.push(Violation::new(
                Oracle::Receipts,
                format!("{who} {status:?} for {id} before c{recipient} received it"),
            ));
        }
        if status == MessageStatus::Read
            && read_hw
                .get(&(recipient, a.conv.as_str()))
                .is_none_or(|hw| *hw < a.seq)
        {
            out.push(Violation::new(
                Oracle::Receipts,
                format!(
                    "{who} read for {id} (seq {}) not marked read by c{recipient}",
                    a.seq
                ),
            ));
        }
    }
}

/// Notes what a recipient had: a message its account received, a read mark.
fn had<'a>(
    e: &Seen<'a>,
    delivered: &mut BTreeSet<(usize, &'a str)>,
    read_hw: &mut BTreeMap<(usize, &'a str), u64>,
) {
    match *e {
        Seen::Message { who, id, .. } => {
            delivered.insert((who.client, id));
        }
        Seen::ReadMarked { who, conv, seq } => {
            let hw = read_hw.entry((who.client, conv)).or_insert(0);
            *hw = (*hw).max(seq);
        }
        Seen::Login { .. } | Seen::Status { .. } | Seen::Typing { .. } => {}
    }
}

/// The relay deletes a queued message only after its recipient's app had it, or when its
/// author retracted it.
pub(super) fn receipts_clear(
    input: &Input<'_>,
    got: &BTreeMap<(usize, &str), u64>,
    out: &mut Vec<Violation>,
) {
    let client_of: BTreeMap<&str, usize> = input
        .world
        .uuids
        .iter()
        .map(|(c, u)| (u.as_str(), *c))
        .collect();
    let mut early: Vec<String> = Vec::new();
    for m in input.history.messages.values() {
        let Some(deleted) = m.deleted_ms else {
            continue;
        };
        if input.history.retracted_ids.contains_key(&m.id)
            || super::expiry::expired_in_time(input, m)
        {
            continue;
        }
        let Some(&recipient) = client_of.get(m.recipient.as_str()) else {
            continue;
        };
        match got.get(&(recipient, m.id.as_str())) {
            Some(t) if *t <= deleted => {}
            other => early.push(format!(
                "{} (to c{recipient}, {} seq {}) deleted at {deleted} ms, {}",
                m.id,
                m.conv,
                m.seq,
                other.map_or_else(
                    || "never received".to_owned(),
                    |t| format!("received at {t} ms")
                )
            )),
        }
    }
    if let Some(first) = early.first() {
        out.push(Violation::new(
            Oracle::ReceiptsClear,
            format!(
                "{} queued message(s) deleted before their recipient had them; first: {first}",
                early.len()
            ),
        ));
    }
}

/// A retract the relay accepted reaches the recipient of the message, if it got the message.
pub(super) fn retract_lands(input: &Input<'_>, h: &Observed<'_>, out: &mut Vec<Violation>) {
    let on_primary: BTreeSet<(usize, &str)> = h
        .events
        .iter()
        .filter_map(|e| match *e {
            Seen::Message { who, id, .. } if who.device == 0 => Some((who.client, id)),
            _ => None,
        })
        .collect();
    let landed: BTreeSet<(usize, &str)> = input
        .records
        .iter()
        .filter_map(|r| match r {
            Record::Event {
                who,
                event: Event::Retracted { id },
                ..
            } => Some((who.client, id.as_str())),
            _ => None,
        })
        .collect();
    let second = second_device_spells(input.records);
    for a in h.acked {
        let Some(&accepted) = input.history.retracted_ids.get(&a.id) else {
            continue;
        };
        let Some(recipient) = h.recipient(a) else {
            continue;
        };
        if second.get(&recipient).is_some_and(|v| {
            v.iter()
                .any(|(from, to)| *from <= accepted && accepted <= *to)
        }) {
            continue;
        }
        // A retraction waits for its offline recipient as long as a message does (the
        // offline TTL, on the relay's clock): one the recipient came back too late for lapsed.
        let back = input.records.iter().find_map(|r| match r {
            Record::Event {
                t_ms,
                who,
                event: Event::NetworkState(NetworkState::Connected),
            } if who.client == recipient && who.device == 0 && *t_ms >= accepted => Some(*t_ms),
            _ => None,
        });
        if back.is_none_or(|b| input.world.relay_elapsed(accepted, b) >= input.relay.offline_ttl_ms)
        {
            continue;
        }
        // The primary device must hear of it; a second device that already left cannot.
        if on_primary.contains(&(recipient, a.id.as_str()))
            && !landed.contains(&(recipient, a.id.as_str()))
        {
            out.push(Violation::new(
                Oracle::RetractLands,
                format!(
                    "c{} retracted {} (the relay accepted it at {accepted} ms) but c{recipient}, who had it, never saw the retract",
                    a.sender, a.id
                ),
            ));
        }
    }
}

/// Each client's second-device spells `(login, left)` in simulated ms (`u64::MAX`: never
/// left): the relay gives a retract to the account's connection of the moment, and a second
/// device that never had the message has nothing to show.
fn second_device_spells(records: &[Record]) -> BTreeMap<usize, Vec<(u64, u64)>> {
    let mut second: BTreeMap<usize, Vec<(u64, u64)>> = BTreeMap::new();
    for r in records {
        match r {
            Record::Event {
                t_ms,
                who,
                event: Event::Authenticated { .. },
            } if who.device == 1 => second
                .entry(who.client)
                .or_default()
                .push((*t_ms, u64::MAX)),
            Record::Note { t_ms, text } if text.ends_with("/d1 left") => {
                let client = text
                    .strip_prefix('c')
                    .and_then(|t| t.split('/').next())
                    .and_then(|n| n.parse::<usize>().ok());
                if let Some(spell) = client
                    .and_then(|c| second.get_mut(&c))
                    .and_then(|v| v.last_mut())
                {
                    spell.1 = *t_ms;
                }
            }
            _ => {}
        }
    }
    second
}
