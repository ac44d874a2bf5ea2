//! What is read at scrape time ([`Live`]): connections, outbound bytes, the push worker's
//! occupancy, the queued-bytes limit and a SQLite relay's group commit, encoded as constant
//! metrics by the collector.

use std::sync::PoisonError;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric as _};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Unit;
use relay_core::store::WriteGroup;
use relay_push::{PushStats, PushWorker};

use super::labels::*;
use super::{Live, Sources, gauge};

impl Live {
    pub(super) fn sources(&self) -> std::sync::MutexGuard<'_, Sources> {
        // Every field is valid after any partial update (handles and numbers).
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Collector for Live {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let sources = self.sources();
        if let Some((counter, limits)) = &sources.connections {
            let open = ConstGauge::new(gauge(counter.open() as u64));
            let m = encoder.encode_descriptor(
                "tcp_connections",
                "TCP connections open now (HTTP and WebSocket).",
                None,
                MetricType::Gauge,
            )?;
            open.encode(m)?;
            let cap = ConstGauge::new(gauge(limits.max_connections as u64));
            let m = encoder.encode_descriptor(
                "tcp_connections_limit",
                "Connections the relay holds at most (--max-connections).",
                None,
                MetricType::Gauge,
            )?;
            cap.encode(m)?;
            let refused = counter.refused();
            let mut family = encoder.encode_descriptor(
                "connections_refused",
                "Connections closed at once, over the total or a per-address cap.",
                None,
                MetricType::Counter,
            )?;
            for (cap, n) in [
                (Cap::Total, refused.total_cap),
                (Cap::PerAddress, refused.per_addr_cap),
            ] {
                ConstCounter::new(n).encode(family.encode_family(&CapLabels { cap })?)?;
            }
        }
        if let Some(outbound) = &sources.outbound {
            let m = encoder.encode_descriptor(
                "outbound_queued",
                "Bytes of frames queued for sockets and not yet written, all sockets.",
                Some(&Unit::Bytes),
                MetricType::Gauge,
            )?;
            ConstGauge::new(gauge(outbound.get() as u64)).encode(m)?;
        }
        if let Some(limit) = sources.queued_bytes_limit {
            let m = encoder.encode_descriptor(
                "queued_limit",
                "The relay's bound on undelivered bytes (--max-queued-bytes).",
                Some(&Unit::Bytes),
                MetricType::Gauge,
            )?;
            ConstGauge::new(gauge(limit)).encode(m)?;
        }
        if let Some(worker) = &sources.push {
            encode_push(&mut encoder, worker)?;
        }
        if let Some(group) = &sources.write_group {
            encode_write_group(&mut encoder, group)?;
        }
        Ok(())
    }
}

/// A SQLite relay's group commit: the transactions its cores' stores wrote, and the commits
/// they carried.
fn encode_write_group(
    encoder: &mut DescriptorEncoder<'_>,
    group: &WriteGroup,
) -> Result<(), std::fmt::Error> {
    let (writes, batches) = group.written();
    for (name, help, n) in [
        (
            "store_group_writes",
            "Transactions the SQLite stores of the relay's cores wrote for their commits.",
            writes,
        ),
        (
            "store_group_commits",
            "Commits those transactions carried: more than the transactions is commits that shared one (and its fsync).",
            batches,
        ),
    ] {
        let m = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
        ConstCounter::new(n).encode(m)?;
    }
    Ok(())
}

/// The push worker's metrics: deliveries by service and result, retries by service, and its
/// queue and in-flight occupancy against their limits.
fn encode_push(
    encoder: &mut DescriptorEncoder<'_>,
    worker: &PushWorker,
) -> Result<(), std::fmt::Error> {
    let by_kind = worker.stats_by_kind();
    encode_push_results(encoder, &by_kind)?;
    encode_push_retries(encoder, &by_kind)?;
    encode_push_occupancy(encoder, worker)
}

/// The service label of a push worker's kind (`fcm`, `apns`; anything else is Web Push).
fn push_service(kind: &str) -> PushService {
    match kind {
        "fcm" => PushService::Fcm,
        "apns" => PushService::Apns,
        _ => PushService::WebPush,
    }
}

/// `pushes`: every push's outcome, by service and result.
fn encode_push_results(
    encoder: &mut DescriptorEncoder<'_>,
    by_kind: &[(&'static str, PushStats)],
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(
        "pushes",
        "Push notifications, by service and result.",
        None,
        MetricType::Counter,
    )?;
    for (kind, s) in by_kind {
        for (result, n) in [
            (PushResult::Delivered, s.delivered),
            (PushResult::Gone, s.gone),
            (PushResult::Failed, s.failed),
            (PushResult::GaveUp, s.gave_up),
            (PushResult::QueueFull, s.queue_full),
            (PushResult::Unconfigured, s.unconfigured),
            (PushResult::GoneReportDropped, s.gone_dropped),
        ] {
            let labels = PushLabels {
                service: push_service(kind),
                result,
            };
            ConstCounter::new(n).encode(family.encode_family(&labels)?)?;
        }
    }
    Ok(())
}

/// `push_retries`: attempts after the first, by service.
fn encode_push_retries(
    encoder: &mut DescriptorEncoder<'_>,
    by_kind: &[(&'static str, PushStats)],
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(
        "push_retries",
        "Push attempts after the first (retries and re-authentications), by service.",
        None,
        MetricType::Counter,
    )?;
    for (kind, s) in by_kind {
        let labels = ServiceLabels {
            service: push_service(kind),
        };
        ConstCounter::new(s.retries).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

/// The worker's gauges: pushes queued, in flight and retrying, and the limits of the first two.
fn encode_push_occupancy(
    encoder: &mut DescriptorEncoder<'_>,
    worker: &PushWorker,
) -> Result<(), std::fmt::Error> {
    let occupancy = worker.occupancy();
    let limits = worker.limits();
    for (name, help, value) in [
        (
            "push_queue",
            "Pushes waiting for a request slot.",
            occupancy.queued,
        ),
        (
            "push_queue_limit",
            "Pushes the queue holds at most (more are dropped).",
            limits.queue_capacity,
        ),
        (
            "push_in_flight",
            "Push requests in flight.",
            occupancy.in_flight,
        ),
        (
            "push_in_flight_limit",
            "Push requests in flight at most.",
            limits.max_concurrent,
        ),
        (
            "push_retrying",
            "Pushes waiting to retry.",
            occupancy.retrying,
        ),
    ] {
        let m = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
        ConstGauge::new(gauge(value as u64)).encode(m)?;
    }
    Ok(())
}
