//! The liveness oracles of the simulator (they need its clock: healing, ack times, the
//! relay's commit history):
//!
//! | oracle | checks |
//! |---|---|
//! | `liveness` | every live acknowledged message reaches its recipient within [`DELIVERY_BOUND_MS`] of healing, or of its ack if later, however large the backlog, unless the sweep took it once its TTL had passed on the relay's clock |
//! | `sync-complete` | a client that connects on a healthy network and stays connected gets everything queued for it at that moment within [`SYNC_BOUND_MS`] |
//! | `probes` | after healing, every probe message (and its `delivered` receipt back at its sender), typing notice and call offer (and its answer) arrives within [`PROBE_BOUND_MS`]; a call between clocks skewed more than the signal window apart is refused instead |
//! | `outbox-drained` | after the liveness phase no primary device has an unacknowledged outbox intent |
//! | `media` | media a recipient downloads decrypts to what its sender uploaded, unless it outlived its TTL on the relay's clock (then `expiry`: it must be gone) |

use std::collections::BTreeMap;

use client_core::machine::{Event, NetworkState};
use client_core::store::{ClientStore as _, MessageStatus};
use wire::frames::CallKind;

use super::observed::{Ack, Observed};
use super::{Input, ack_times};
use crate::bounds::{DELIVERY_BOUND_MS, PROBE_BOUND_MS, SYNC_BOUND_MS};
use crate::faults::FaultAction;
use crate::store::CommittedMessage;
use crate::trace::{Device, Record};
use crate::violation::{Oracle, Violation};
use crate::world::ProbeRec;

/// Call signals older or newer than this are refused (client-core's window).
const SIGNAL_WINDOW_MS: i64 = client_core::crypto::signal::SIGNAL_MAX_AGE_MS as i64;
/// The largest latency of a healed link: skews this close to the window are not judged.
const UNCERTAIN_MS: i64 = 5_000;

/// Every live acknowledged message arrives within [`DELIVERY_BOUND_MS`] of healing (or of
/// its ack).
pub(super) fn liveness(
    input: &Input<'_>,
    h: &Observed<'_>,
    got: &BTreeMap<(usize, &str), u64>,
    out: &mut Vec<Violation>,
) {
    let Some(heal) = input.heal_ms else { return };
    let acks = ack_times(input.records);
    let committed: BTreeMap<&str, &CommittedMessage> = input
        .history
        .messages
        .values()
        .map(|m| (m.id.as_str(), m))
        .collect();
    let mut late: BTreeMap<usize, Vec<&Ack>> = BTreeMap::new();
    for a in h.live_acks() {
        let Some(recipient) = h.recipient(a) else {
            continue;
        };
        let acked_at = acks.get(a.id.as_str()).copied().unwrap_or(heal);
        let due = heal.max(acked_at) + DELIVERY_BOUND_MS;
        let expired = committed
            .get(a.id.as_str())
            .is_some_and(|m| super::expiry::expired_in_time(input, m));
        if !expired
            && got
                .get(&(recipient, a.id.as_str()))
                .is_none_or(|t| *t > due)
        {
            late.entry(recipient).or_default().push(a);
        }
    }
    for (recipient, lost) in late {
        let backlog = input
            .history
            .messages
            .values()
            .filter(|m| {
                input.world.uuids.get(&recipient) == Some(&m.recipient)
                    && m.deleted_ms.is_none_or(|d| d > heal)
                    && m.at_ms <= heal
            })
            .count();
        let first = lost[0];
        out.push(Violation::new(
            Oracle::Liveness,
            format!(
                "{} acknowledged message(s) to c{recipient} not delivered within {DELIVERY_BOUND_MS} ms of healing (backlog of {backlog} queued for it at healing); first: {} (c{} -> c{recipient}, seq {})",
                lost.len(),
                first.id,
                first.sender,
                first.seq
            ),
        ));
    }
}

/// `sync-complete`: a `sync` on a healthy network hands over the whole backlog.
///
/// A connection counts if it opened while the network was healthy (the plan has no fault
/// events but clock skews, or it opened after healing) and no device of the account changed
/// its network state during the next [`SYNC_BOUND_MS`]. Every message the relay had committed
/// for the account before the connection opened, and still held then, must reach an app of
/// the account by the end of that bound (unless its author retracted it meanwhile). Later
/// traffic in a conversation releases a backlog the relay forgot; [`liveness`] with its long
/// bound (and the probe round after healing) cannot tell the two apart, this oracle can.
pub(super) fn sync_complete(
    input: &Input<'_>,
    got: &BTreeMap<(usize, &str), u64>,
    out: &mut Vec<Violation>,
) {
    let eventful = input
        .plan
        .events
        .iter()
        .any(|e| !matches!(e.action, FaultAction::SetSkew { .. }));
    let healthy_from = match (eventful, input.heal_ms) {
        (false, _) => 0,
        (true, Some(h)) => h,
        (true, None) => return,
    };
    let backlog = backlog_by_client(input);
    for (client, list) in &network_changes(input.records) {
        for (i, &(t, who, connected)) in list.iter().enumerate() {
            let until = t + SYNC_BOUND_MS;
            let undisturbed = list.get(i + 1).is_none_or(|&(next, _, _)| next > until);
            if !connected || t < healthy_from || !undisturbed || input.end_ms < until {
                continue;
            }
            let missing: Vec<&CommittedMessage> = backlog
                .get(client)
                .into_iter()
                .flatten()
                .copied()
                .filter(|m| m.at_ms < t && m.deleted_ms.is_none_or(|d| d > t))
                .filter(|m| {
                    input
                        .history
                        .retracted_ids
                        .get(&m.id)
                        .is_none_or(|r| *r > until)
                })
                .filter(|m| {
                    got.get(&(*client, m.id.as_str()))
                        .is_none_or(|g| *g > until)
                })
                .collect();
            if let Some(first) = missing.first() {
                out.push(Violation::new(
                    Oracle::SyncComplete,
                    format!(
                        "{who} connected at {t} ms on a healthy network with {} queued message(s) that had not arrived {SYNC_BOUND_MS} ms later; first: {} ({} seq {}, committed at {} ms, {})",
                        missing.len(),
                        first.id,
                        first.conv,
                        first.seq,
                        first.at_ms,
                        got.get(&(*client, first.id.as_str()))
                            .map_or_else(|| "never received".to_owned(), |g| format!("received at {g} ms"))
                    ),
                ));
            }
        }
    }
}

/// Network state changes per client, in time order: `(ms, device, connected)`.
fn network_changes(records: &[Record]) -> BTreeMap<usize, Vec<(u64, Device, bool)>> {
    let mut changes: BTreeMap<usize, Vec<(u64, Device, bool)>> = BTreeMap::new();
    for r in records {
        if let Record::Event {
            t_ms,
            who,
            event: Event::NetworkState(state),
        } = r
        {
            let connected = matches!(state, NetworkState::Connected);
            changes
                .entry(who.client)
                .or_default()
                .push((*t_ms, *who, connected));
        }
    }
    changes
}

/// Every message the relay ever committed, by the client it was for.
fn backlog_by_client<'h>(input: &Input<'h>) -> BTreeMap<usize, Vec<&'h CommittedMessage>> {
    let client_of: BTreeMap<&str, usize> = input
        .world
        .uuids
        .iter()
        .map(|(c, u)| (u.as_str(), *c))
        .collect();
    let mut backlog: BTreeMap<usize, Vec<&CommittedMessage>> = BTreeMap::new();
    for m in input.history.messages.values() {
        if let Some(&c) = client_of.get(m.recipient.as_str()) {
            backlog.entry(c).or_default().push(m);
        }
    }
    backlog
}

/// After healing, probes arrive within [`PROBE_BOUND_MS`].
pub(super) fn probes(input: &Input<'_>, out: &mut Vec<Violation>) {
    let late: Vec<String> = input
        .world
        .probes
        .iter()
        .filter_map(|p| {
            missing_probe(input, p)
                .map(|what| format!("{what} c{} -> c{} sent at {} ms", p.from, p.to, p.sent_ms))
        })
        .collect();
    if let Some(first) = late.first() {
        out.push(Violation::new(
            Oracle::Probes,
            format!(
                "{} of {} probe(s) did not arrive within {PROBE_BOUND_MS} ms; first: {first}",
                late.len(),
                input.world.probes.len()
            ),
        ));
    }
}

/// What of probe `p` did not arrive in time (or, for a call between clocks too far apart,
/// arrived although it must be refused).
fn missing_probe(input: &Input<'_>, p: &ProbeRec) -> Option<String> {
    let due = p.sent_ms + PROBE_BOUND_MS;
    let seen_by = |client: usize, f: &dyn Fn(&Event) -> bool| {
        input.records.iter().any(|r| match r {
            Record::Event { t_ms, who, event } => {
                who.client == client && *t_ms >= p.sent_ms && *t_ms <= due && f(event)
            }
            _ => false,
        })
    };
    match p.kind {
        "message" => {
            if !seen_by(p.to, &|e| matches!(e, Event::Message(m) if m.id == p.id)) {
                return Some("message".to_owned());
            }
            // Its recipient's app sent `delivered` on it: the sender learns of it.
            let receipt = |e: &Event| {
                matches!(e, Event::StatusChange { id, status } if *id == p.id
                    && matches!(status, MessageStatus::Delivered | MessageStatus::Read))
            };
            (!seen_by(p.from, &receipt)).then(|| "delivered receipt of the message".to_owned())
        }
        "typing" => (!seen_by(
            p.to,
            &|e| matches!(e, Event::Typing { conversation_id, .. } if *conversation_id == p.conv),
        ))
        .then(|| "typing notice".to_owned()),
        "call" => {
            let skew = input.skews.get(p.from).copied().unwrap_or(0)
                - input.skews.get(p.to).copied().unwrap_or(0);
            let incoming = seen_by(
                p.to,
                &|e| matches!(e, Event::CallSignal { kind: CallKind::Offer, call_id, .. } if *call_id == p.id),
            );
            if skew.abs() > SIGNAL_WINDOW_MS + UNCERTAIN_MS {
                incoming.then(|| {
                    format!("refusal of a call offer from a clock {skew} ms apart (it rang)")
                })
            } else if skew.abs() + UNCERTAIN_MS < SIGNAL_WINDOW_MS {
                let answered = seen_by(
                    p.from,
                    &|e| matches!(e, Event::CallSignal { kind: CallKind::Answer, call_id, .. } if *call_id == p.id),
                );
                match (incoming, answered) {
                    (false, _) => Some("call offer".to_owned()),
                    (true, false) => Some("call answer".to_owned()),
                    _ => None,
                }
            } else {
                None
            }
        }
        _ => None,
    }
}

/// No primary device keeps an unacknowledged outbox intent. (Second devices only log in and
/// leave; their stores are not expected to drain.)
pub(super) fn outbox(input: &Input<'_>, out: &mut Vec<Violation>) {
    for (client, store) in input.stores.iter().enumerate() {
        let pending = store.snapshot().list_outbox().unwrap_or_default();
        if !pending.is_empty() {
            let ids: Vec<&str> = pending
                .iter()
                .take(5)
                .map(|i| i.internal_id.as_str())
                .collect();
            out.push(Violation::new(
                Oracle::OutboxDrained,
                format!(
                    "c{client} still has {} unacknowledged intent(s) after the liveness phase, first {ids:?}",
                    pending.len()
                ),
            ));
        }
    }
}

/// Every media download in the probe round gave back what its sender uploaded, unless the
/// object had outlived its TTL on the relay's clock: then it must be gone (404).
pub(super) fn media(input: &Input<'_>, out: &mut Vec<Violation>) {
    let ttl = relay_core::limits::MEDIA_TTL_MS;
    for (client, id, outcome, checked_ms) in &input.world.media_checks {
        let age = input
            .world
            .media_sent
            .get(id)
            .map(|(_, _, sent_ms)| input.world.relay_elapsed(*sent_ms, *checked_ms));
        let expired = age.is_some_and(|a| a >= ttl + MEDIA_SLACK_MS);
        let live = age.is_some_and(|a| a + MEDIA_SLACK_MS <= ttl);
        match outcome {
            Ok(_) if expired => out.push(Violation::new(
                Oracle::Expiry,
                format!(
                    "c{client} downloaded media of {id} {} h after it was sent, past its {} h TTL on the relay's clock",
                    age.unwrap_or(0) / 3_600_000,
                    ttl / 3_600_000
                ),
            )),
            Ok(true) => {}
            Ok(false) => out.push(Violation::new(
                Oracle::Media,
                format!("c{client} downloaded media of {id} that differs from what was sent"),
            )),
            Err(_) if !live => {}
            Err(e) => out.push(Violation::new(
                Oracle::Media,
                format!("c{client} could not download media of {id}: {e}"),
            )),
        }
    }
}

/// How far from a media object's expiry (on the relay's clock) nothing is judged: the
/// simulator times an object by the message that refers to it, sent just after the upload
/// completed.
const MEDIA_SLACK_MS: u64 = 60_000;
