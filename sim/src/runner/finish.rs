//! The end of a run: the closing notes of the trace (pushes received, failover terms), the
//! oracles over everything the run left, and the run's counters.

use client_core::machine::Event;
use client_core::store::MessageStatus;

use super::relay::free_channel_quota;
use super::step::Ended;
use super::{Inner, Parts, RunStats};
use crate::oracles;
use crate::pushworld::{PushKind, SeenPush};
use crate::store::{ClusterRecord, SimStore};
use crate::time::SkewClock;
use crate::trace::Record;
use crate::violation::{Oracle, Violation};

/// The outcome of a run whose relay store could not even be created.
pub(super) fn no_store(e: &std::io::Error) -> Inner {
    Inner {
        records: Vec::new(),
        violations: vec![Violation::new(
            Oracle::HostError,
            format!("cannot create the relay's store: {e}"),
        )],
        end_ms: 0,
        stats: RunStats::default(),
        routes: std::collections::BTreeMap::new(),
        times: (None, None),
        drill_counts: std::collections::BTreeMap::new(),
        relay_elapsed_ms: 0,
    }
}

/// Closes the trace, runs the oracles, counts.
pub(super) fn finish(
    parts: &Parts<'_>,
    store: &SimStore,
    relay: &relay_core::Config,
    failover: bool,
    ended: Ended,
    mut violations: Vec<Violation>,
) -> Inner {
    let seen = parts.push.seen();
    let cluster = store.ctl().cluster_record();
    closing_notes(parts, store, (failover, &cluster), ended.end_ms, &seen);
    let records = parts.trace.records();
    let webhook_bounds = check(
        parts,
        (store, &cluster),
        relay,
        &records,
        &seen,
        ended.end_ms,
        &mut violations,
    );
    let (acked, received, receipts) = (acked(&records), received(&records), receipts(&records));
    let pairs = parts.scenario.pairs.len() as u64;
    if pairs > 0 && acked == 0 && !violations.iter().any(|v| v.oracle == Oracle::Setup) {
        violations.push(Violation::new(
            Oracle::Setup,
            format!(
                "no message was acknowledged in the whole run ({pairs} pairs): nothing was judged"
            ),
        ));
    }
    violations.sort();
    violations.dedup();
    let history = store.ctl().history();
    let stats = RunStats {
        steps: ended.steps,
        acked,
        conversations: parts.world.borrow().convs.len() as u64,
        pairs,
        received,
        receipts,
        commits: history.counts.commits,
        failed_commits: history.counts.failed,
        loads: history.counts.loads,
        terms: history.terms.len() as u64,
        fenced: history.counts.fenced,
        shard_moves: cluster.moves(),
        webhook_bounds,
        handed_off: handed_off(&parts.metrics.encode()),
        crossings_faulted: parts.crossings.counts().faulted(),
    };
    let (routes, times, drill_counts, relay_elapsed_ms) = {
        let world = parts.world.borrow();
        let drills = parts
            .replay
            .drills
            .iter()
            .map(|d| {
                let judged = world.drills.judged.get(d).copied().unwrap_or(0);
                let unjudged = world.drills.unjudged.get(d).copied().unwrap_or(0);
                (*d, (judged, unjudged))
            })
            .collect();
        (
            world.wire.routes(),
            (world.traffic_start_ms, world.heal_ms),
            drills,
            world.relay_elapsed(0, ended.end_ms),
        )
    };
    Inner {
        records,
        violations,
        end_ms: ended.end_ms,
        stats,
        routes,
        times,
        drill_counts,
        relay_elapsed_ms,
    }
}

/// The pushes the stand-ins received; the failover topology's terms; the end.
fn closing_notes(
    parts: &Parts<'_>,
    store: &SimStore,
    (failover, cluster): (bool, &ClusterRecord),
    end_ms: u64,
    seen: &[SeenPush],
) {
    let counts = store.ctl().history().counts;
    parts.trace.push(Record::Note {
        t_ms: end_ms,
        text: format!(
            "store: {} commits ({} failed by injection), {} keyed reads ({} failed by injection)",
            counts.commits, counts.failed, counts.reads, counts.failed_reads
        ),
    });
    let crossings = parts.crossings.counts();
    if crossings.sent > 0 {
        parts.trace.push(Record::Note {
            t_ms: end_ms,
            text: format!(
                "crossings between relay cores: {} sent, {} lost, {} handed twice, {} delayed",
                crossings.sent, crossings.lost, crossings.repeated, crossings.delayed
            ),
        });
    }
    let count = |k: PushKind| seen.iter().filter(|p| p.kind == k).count();
    parts.trace.push(Record::Note {
        t_ms: end_ms,
        text: format!(
            "pushes received: web {}, fcm {}, apns {}; answered gone: {}",
            count(PushKind::Web),
            count(PushKind::Fcm),
            count(PushKind::Apns),
            seen.iter().filter(|p| p.gone).count()
        ),
    });
    if cluster.shards > 0 {
        parts.trace.push(Record::Note {
            t_ms: end_ms,
            text: cluster_note(cluster),
        });
    } else if failover {
        let history = store.ctl().history();
        let terms: Vec<String> = history
            .terms
            .iter()
            .map(|(at, host, epoch)| format!("{host} epoch {epoch} at {at} ms"))
            .collect();
        parts.trace.push(Record::Note {
            t_ms: end_ms,
            text: format!(
                "failover: terms [{}]; commits and loads fenced: {}",
                terms.join(", "),
                history.counts.fenced
            ),
        });
    }
    parts.trace.push(Record::Note {
        t_ms: end_ms,
        text: "end".into(),
    });
}

/// The cluster's moves and takeover times, for the trace's end.
fn cluster_note(cluster: &ClusterRecord) -> String {
    let takeovers: Vec<u64> = cluster
        .forced
        .iter()
        .filter_map(|m| Some(cluster.served_at(m)?.saturating_sub(m.freed_ms)))
        .collect();
    format!(
        "cluster: {} joins, {} forced moves (a lapse or a leave), {} handed over, {} shard cores opened; takeover after the shard was freed (ms) {:?}",
        cluster.joins.len(),
        cluster.forced.len(),
        cluster.handed_over,
        cluster.opened.len(),
        takeovers
    )
}

/// Every oracle over what the run left (the commerce ones only after a complete setup);
/// the bounds `webhook-counts` judged.
fn check(
    parts: &Parts<'_>,
    (store, cluster): (&SimStore, &ClusterRecord),
    relay: &relay_core::Config,
    records: &[Record],
    seen: &[SeenPush],
    end_ms: u64,
    violations: &mut Vec<Violation>,
) -> u64 {
    let plan = &parts.replay.plan;
    let history = store.ctl().history();
    let snapshot = store.snapshot().unwrap_or_default();
    let w = parts.world.borrow();
    let input = oracles::Input {
        scenario: &parts.scenario,
        plan,
        records,
        stores: &parts.stores,
        convs: &w.convs,
        aliases: &w.alias_history,
        snapshot: &snapshot,
        history: &history,
        world: &w,
        pushes: seen,
        start_ms: w.traffic_start_ms,
        heal_ms: w.heal_ms,
        end_ms,
        skews: &parts.clocks.iter().map(SkewClock::get).collect::<Vec<_>>(),
        relay,
        drills: &parts.replay.drills,
        cluster,
    };
    oracles::check_all(&input, violations);
    if violations.iter().any(|v| v.oracle == Oracle::Setup) {
        return 0;
    }
    // Every jump of the relay's clock before the final one (the plan's, the world's idle
    // stretches, the drills' window jumps): an order placed before one may have expired.
    let jumps: Vec<u64> = w
        .relay_jumps
        .iter()
        .map(|(at, _)| *at)
        .filter(|at| w.final_jump_ms.is_none_or(|f| *at < f))
        .collect();
    let market = oracles::MarketInput {
        ledger: &w.ledger,
        alias_history: &w.alias_history,
        records,
        processor: &parts.payments.processor,
        forger: &parts.payments.forger,
        snapshot: &snapshot,
        jumps_ms: &jumps,
        confirmed_ms: &history.confirmed_ms,
        world: &w,
        dishonest: plan.kinds.contains(&crate::faults::FaultKind::Dishonest),
        alias_pool: &parts.scenario.alias_pool,
        free_quota: free_channel_quota(),
    };
    oracles::check_market(&market, violations);
    let exposition = parts.metrics.encode();
    let webhooks = oracles::WebhookInput {
        processor: &parts.payments.processor,
        forger: &parts.payments.forger,
        drills: &w.drill_webhooks,
        exposition: &exposition,
        snapshot: &snapshot,
    };
    oracles::webhook_counts(&webhooks, violations)
}

/// The relay's count of messages handed to another shard, from its metrics exposition.
fn handed_off(exposition: &str) -> u64 {
    exposition
        .lines()
        .filter_map(|l| l.strip_prefix("relay_messages_handed_off_total "))
        .filter_map(|v| v.trim().parse::<u64>().ok())
        .sum()
}

/// Messages that reached a recipient's app, distinct per (recipient, id).
fn received(records: &[Record]) -> u64 {
    let mut seen = std::collections::BTreeSet::new();
    for r in records {
        if let Record::Event {
            who,
            event: Event::Message(m),
            ..
        } = r
            && !m.is_me
        {
            seen.insert((who.client, m.id.as_str()));
        }
    }
    seen.len() as u64
}

/// Receipts the senders' apps applied (`delivered` and `read` status changes).
fn receipts(records: &[Record]) -> u64 {
    records
        .iter()
        .filter(|r| {
            matches!(
                r,
                Record::Event {
                    event: Event::StatusChange {
                        status: MessageStatus::Delivered | MessageStatus::Read,
                        ..
                    },
                    ..
                }
            )
        })
        .count() as u64
}

/// Messages acknowledged to their senders (`sent` status events).
fn acked(records: &[Record]) -> u64 {
    records
        .iter()
        .filter(|r| {
            matches!(
                r,
                Record::Event {
                    event: Event::StatusChange {
                        status: MessageStatus::Sent,
                        ..
                    },
                    ..
                }
            )
        })
        .count() as u64
}
