//! Expiries judged on the relay's clock (the simulator knows every jump of it:
//! [`World::relay_elapsed`](crate::world::World::relay_elapsed)), and what the drill host
//! found ([`crate::drills`]):
//!
//! | oracle | checks |
//! |---|---|
//! | `expiry` | no queued message is still stored at the end of the run more than [`SWEEP_SLACK_MS`] past its TTL on the relay's clock (the sweep, page after page, took every due queue); the drills' own expiry checks |
//! | `queue-bounds` | no queue bound was ever exceeded in the store: per conversation (messages, bytes), per recipient (messages, bytes), per sender (bytes), in all (bytes), whatever the traffic; of a sharded relay, a recipient's and a sender's bounds times the shards (each conversation owner shard keeps them over what it sees) |
//! | `spent-bound` | the store never holds more spent credentials of one account than the relay's bound per account (`max_spent_credentials_per_account`) |
//! | `drills` | every drill of a run without faults finished, and one that finished judged something or was kept from it by a fault (a drill that did nothing did not happen) |
//!
//! The liveness oracle asks [`expired_in_time`] whether a message it misses was taken by the
//! sweep once its TTL had passed (excused) or before (not excused).

use super::Input;
use crate::store::CommittedMessage;
use crate::violation::{Oracle, Violation};

/// How long past a message's TTL (on the relay's clock) the sweep may take to delete it: it
/// runs at the relay's next wake-up once the TTL passed, a page of queues at a time.
pub(super) const SWEEP_SLACK_MS: u64 = 60_000;
/// Whether committed message `m` left the store by expiry: deleted once its TTL had passed
/// on the relay's clock (from its acceptance, the row's own `at`).
pub(super) fn expired_in_time(input: &Input<'_>, m: &CommittedMessage) -> bool {
    m.deleted_ms.is_some_and(|d| {
        input.world.relay_now(d).saturating_sub(m.accepted_at) >= input.relay.offline_ttl_ms
    })
}

/// `expiry`: nothing stored past its TTL (plus [`SWEEP_SLACK_MS`]) at the end of the run.
pub(super) fn nothing_stored_past_its_ttl(input: &Input<'_>, out: &mut Vec<Violation>) {
    let Some(rows) = input.snapshot.get(&relay_core::store::Table::Messages) else {
        return;
    };
    let mut late: Vec<(&str, u64)> = Vec::new();
    for key in rows.keys() {
        let Some(m) = input.history.messages.get(key) else {
            continue;
        };
        let age = input
            .world
            .relay_now(input.end_ms)
            .saturating_sub(m.accepted_at);
        if age >= input.relay.offline_ttl_ms + SWEEP_SLACK_MS {
            late.push((m.id.as_str(), age));
        }
    }
    if let Some((id, age)) = late.first() {
        out.push(Violation::new(
            Oracle::Expiry,
            format!(
                "{} queued message(s) still stored at the end of the run past their {} h TTL on the relay's clock; first: {id}, accepted {} h {} min before",
                late.len(),
                input.relay.offline_ttl_ms / 3_600_000,
                age / 3_600_000,
                age % 3_600_000 / 60_000
            ),
        ));
    }
}

/// `spent-bound`: no account's spent credentials in the store ever outnumber the bound per
/// account.
pub(super) fn spent_within_bound(input: &Input<'_>, out: &mut Vec<Violation>) {
    let cap = input.relay.max_spent_credentials_per_account;
    if let Some((at, owner, most)) = input.history.spent_peaks.iter().find(|(_, _, n)| *n > cap) {
        out.push(Violation::new(
            Oracle::SpentBound,
            format!(
                "the store held {most} spent credentials of account {owner:?} after a commit at {at} ms; the bound per account is {cap}"
            ),
        ));
    }
}

/// `queue-bounds`: no queue bound was ever exceeded in the store, whatever sent what (the
/// most each conversation's queue, each recipient, each sender and everyone ever held after
/// a commit, against the relay's configuration).
pub(super) fn queues_within_bounds(input: &Input<'_>, out: &mut Vec<Violation>) {
    let c = input.relay;
    let q = &input.history.queued;
    let mut over = Vec::new();
    // A sharded relay keeps a recipient's and a sender's bounds per conversation owner shard
    // (`relay_core::limits`): at most the bound times the shards in all.
    let owners = u64::from(c.shard.map().shards());
    let ((n, b), conv) = &q.peak_conv;
    if *n > c.max_offline_queue_per_conversation as u64
        || *b > c.max_offline_queue_bytes_per_conversation
    {
        over.push(format!(
            "a conversation's queue {conv:?} held {n} messages, {b} bytes (bounds {} and {})",
            c.max_offline_queue_per_conversation, c.max_offline_queue_bytes_per_conversation
        ));
    }
    let ((n, b), recipient) = &q.peak_recipient;
    let (most_n, most_b) = (
        c.max_offline_queue_per_recipient as u64 * owners,
        c.max_offline_queue_bytes_per_recipient * owners,
    );
    if *n > most_n || *b > most_b {
        over.push(format!(
            "recipient {recipient:?} had {n} messages, {b} bytes queued (bounds {most_n} and {most_b})"
        ));
    }
    let (b, sender) = &q.peak_sender;
    let most = c.max_offline_queue_bytes_per_sender * owners;
    if *b > most {
        over.push(format!(
            "sender {sender:?} had {b} bytes queued (bound {most})"
        ));
    }
    if q.peak_total > c.max_offline_queue_bytes_total {
        over.push(format!(
            "{} bytes were queued in all (bound {})",
            q.peak_total, c.max_offline_queue_bytes_total
        ));
    }
    for text in over {
        out.push(Violation::new(Oracle::QueueBounds, text));
    }
}

/// `drills` and the drills' findings. A drill slowed past the end of the run by faults (slow
/// links make every request of it take seconds) judged what it reached; one that did not
/// finish in a run without faults is stuck.
pub(super) fn drills(input: &Input<'_>, out: &mut Vec<Violation>) {
    let log = &input.world.drills;
    out.extend(log.findings.iter().cloned());
    let faultless = input
        .plan
        .events
        .iter()
        .all(|e| matches!(e.action, crate::faults::FaultAction::SetSkew { .. }));
    for drill in input.drills {
        let judged = log.judged.get(drill).copied().unwrap_or(0);
        let unjudged = log.unjudged.get(drill).copied().unwrap_or(0);
        if !log.finished.contains(drill) {
            if faultless {
                out.push(Violation::new(
                    Oracle::Drills,
                    format!("drill {drill} did not finish by the end of a run without faults ({judged} checks judged so far)"),
                ));
            }
        } else if judged == 0 && unjudged == 0 {
            out.push(Violation::new(
                Oracle::Drills,
                format!("drill {drill} finished having judged nothing and met no fault: it did not happen"),
            ));
        }
    }
}
