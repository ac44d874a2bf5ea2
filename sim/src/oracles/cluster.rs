//! The oracles of the cluster topology (fault kind `cluster`, see [`crate::cluster`]), over
//! what the shared store recorded of the membership and of every shard's commits:
//!
//! | oracle | checks |
//! |---|---|
//! | `shard-epochs` | no commit was taken under an epoch of a shard that was over (a node that lost the shard, frozen or cut off, wrote nothing after the move), and each epoch of a shard has one writer (two nodes never both serve a shard under the same epoch) |
//! | `takeover` | after a node's lease lapsed or it left, each shard it owned was served again (a core opened under its next epoch or a later one) within [`TAKEOVER_BOUND_MS`] of the lapse or the leave, unless the node it went to could not serve meanwhile (powered off, frozen, cut from the database) or the store itself was faulted |
//! | `ownership` | at the end, every shard has an owner with a live lease, and every live node was last told exactly the shards the table gives it |
//! | `handoffs-drained` | at the end, after healing and the liveness phase, no hand-off is left in the relay's outbox: every one was applied by its recipient's shard and acknowledged, across every move (but those committed in the run's last `HANDOFF_SETTLE_MS`, which a drill still sending as the run ends leaves in flight) |
//!
//! A cluster run that moved no shard fails `takeover` as such: its scenario did not happen.

use std::collections::BTreeMap;

use relay_core::store::Table;

use super::Input;
use crate::bounds::{HANDOFF_SETTLE_MS, RENEW_MS, TAKEOVER_BOUND_MS};
use crate::store::{ClusterRecord, Freed};
use crate::violation::{Oracle, Violation};

/// Every cluster oracle, when the run had the cluster topology.
pub(super) fn cluster(input: &Input<'_>, out: &mut Vec<Violation>) {
    let record = input.cluster;
    if record.shards == 0 {
        return;
    }
    shard_epochs(record, out);
    takeover(input, record, out);
    ownership(input, record, out);
    handoffs_drained(input, out);
}

/// `shard-epochs`: nothing committed under an epoch that was over; one writer per epoch.
fn shard_epochs(record: &ClusterRecord, out: &mut Vec<Violation>) {
    if let Some((at, shard, epoch, current, host)) = record.superseded.first() {
        out.push(Violation::new(
            Oracle::ShardEpochs,
            format!(
                "{} commit(s) taken under an epoch that was over; first: {host} for shard {shard} under epoch {epoch} at {at} ms (the shard's epoch was {current})",
                record.superseded.len()
            ),
        ));
    }
    let mut writers: BTreeMap<(u16, u64), Vec<(u64, &str)>> = BTreeMap::new();
    for (at, shard, epoch, host) in &record.writers {
        writers
            .entry((*shard, *epoch))
            .or_default()
            .push((*at, host.as_str()));
    }
    for ((shard, epoch), hosts) in writers.iter().filter(|(_, h)| h.len() > 1) {
        let who: Vec<String> = hosts
            .iter()
            .map(|(at, host)| format!("{host} from {at} ms"))
            .collect();
        out.push(Violation::new(
            Oracle::ShardEpochs,
            format!(
                "shard {shard} epoch {epoch} was written by {} nodes: {}",
                hosts.len(),
                who.join(", ")
            ),
        ));
    }
}

/// Whether `host` could not serve at some time in `[from, until]`.
fn troubled(record: &ClusterRecord, host: &str, (from, until): (u64, u64)) -> bool {
    record
        .troubles
        .iter()
        .any(|(h, start, end)| h == host && *start <= until && end.is_none_or(|e| e >= from))
}

/// `takeover`: each forced move served within the bound of its lapse or leave.
fn takeover(input: &Input<'_>, record: &ClusterRecord, out: &mut Vec<Violation>) {
    let store_faulted = input.plan.kinds.iter().any(|k| k.is_storage())
        || input
            .plan
            .kinds
            .contains(&crate::faults::FaultKind::Handoff);
    let moves = record.forced.len() + usize::try_from(record.handed_over).unwrap_or(0);
    if moves == 0 {
        out.push(Violation::new(
            Oracle::Takeover,
            "no shard moved in a cluster run (no lapsed lease, leave or join): nothing was judged",
        ));
        return;
    }
    for m in &record.forced {
        let deadline = m.freed_ms + TAKEOVER_BOUND_MS;
        if deadline > input.end_ms || store_faulted || troubled(record, &m.to, (m.at_ms, deadline))
        {
            continue;
        }
        let served = record.served_at(m);
        if served.is_none_or(|at| at > deadline) {
            let when = served.map_or_else(|| "never".to_owned(), |at| format!("at {at} ms"));
            let freed = match m.cause {
                Freed::Lapsed => "its lease lapsed",
                Freed::Left => "it left",
            };
            out.push(Violation::new(
                Oracle::Takeover,
                format!(
                    "shard {} of {} ({freed} at {} ms) went to {} under epoch {} at {} ms and was served {when}, past the bound of {TAKEOVER_BOUND_MS} ms",
                    m.shard, m.from, m.freed_ms, m.to, m.epoch, m.at_ms
                ),
            ));
        }
    }
}

/// `ownership`: the table and what each live node was told agree at the end.
fn ownership(input: &Input<'_>, record: &ClusterRecord, out: &mut Vec<Violation>) {
    // A move in the last two heartbeats may not have reached its new owner yet.
    if input.end_ms.saturating_sub(record.changed_ms) < 2 * RENEW_MS {
        return;
    }
    for (shard, (owner, epoch)) in &record.owners {
        if owner.as_ref().is_none_or(|o| !record.live.contains(o)) {
            out.push(Violation::new(
                Oracle::Ownership,
                format!(
                    "at the end shard {shard} (epoch {epoch}) has no owner with a live lease ({owner:?}; live: {:?})",
                    record.live
                ),
            ));
        }
    }
    for node in &record.live {
        let want: BTreeMap<u16, u64> = record
            .owners
            .iter()
            .filter(|(_, (owner, _))| owner.as_deref() == Some(node.as_str()))
            .map(|(shard, (_, epoch))| (*shard, *epoch))
            .collect();
        let told = record.told.get(node).cloned().unwrap_or_default();
        if told != want {
            out.push(Violation::new(
                Oracle::Ownership,
                format!(
                    "at the end {node} was last told it owns {told:?} (shard: epoch), the table gives it {want:?}"
                ),
            ));
        }
    }
}

/// `handoffs-drained`: no outbox row left at the end but those committed in its last
/// [`HANDOFF_SETTLE_MS`] (a drill may still be sending when the run ends: their
/// acknowledgements are on their way).
fn handoffs_drained(input: &Input<'_>, out: &mut Vec<Violation>) {
    let Some(rows) = input.snapshot.get(&Table::Outbox) else {
        return;
    };
    let settled = input.end_ms.saturating_sub(HANDOFF_SETTLE_MS);
    let written = |key: &str| input.history.outbox.get(key).copied();
    let stuck: Vec<(&String, Option<u64>)> = rows
        .keys()
        .map(|k| (k, written(k)))
        .filter(|(_, at)| at.is_none_or(|at| at < settled))
        .collect();
    if let Some((first, at)) = stuck.first() {
        let at = at.map_or_else(
            || "an unrecorded commit".to_owned(),
            |ms| format!("{ms} ms"),
        );
        out.push(Violation::new(
            Oracle::HandoffsDrained,
            format!(
                "{} hand-off(s) still in the relay's outbox at the end ({} ms), committed over {HANDOFF_SETTLE_MS} ms before it; first: {first}, committed at {at}",
                stuck.len(),
                input.end_ms,
            ),
        ));
    }
}
