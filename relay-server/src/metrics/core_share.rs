//! One core's share of the server's gauges: a sharded server's cores each add theirs, so each
//! gauge is the sum over the cores.

use prometheus_client::metrics::gauge::Gauge;

use super::{Metrics, ShardLabels, gauge};

/// One core's share of the gauges every core of a sharded server adds to (each gauge is the
/// sum over the cores): the core reports its values after every batch of inputs and the share
/// moves each gauge by the difference from its last report; dropped with its core (stopped,
/// or its term ended), it takes what it added back.
///
/// The gauges labelled by shard (its outbox, the hand-offs it holds) are this core's shard's
/// series: a core gone sets them back by what it added, so a cluster node that lost a shard
/// shows 0 for it.
pub(crate) struct CoreShare {
    metrics: Metrics,
    shard: u16,
    last: CoreGauges,
}

impl CoreShare {
    pub(crate) fn new(metrics: Metrics, shard: u16) -> Self {
        Self {
            metrics,
            shard,
            last: CoreGauges::default(),
        }
    }

    /// The core's gauges after a round: sockets, inputs waiting, the relay's backlog, its
    /// caches and reads ahead.
    pub(crate) fn report(&mut self, now: CoreGauges) {
        let f = &self.metrics.f;
        let last = std::mem::replace(&mut self.last, now);
        let moves: [(&Gauge, usize, usize); 12] = [
            (&f.websockets, last.websockets, now.websockets),
            (&f.input_queue, last.inputs, now.inputs),
            (
                &f.queued_messages,
                last.queued_messages,
                now.queued_messages,
            ),
            (
                &f.tombstone_cache,
                last.tombstone_cache_bytes,
                now.tombstone_cache_bytes,
            ),
            (
                &f.queue_cache,
                last.queue_cache_bytes,
                now.queue_cache_bytes,
            ),
            (
                &f.prefetch_parked_frames,
                last.parked_frames,
                now.parked_frames,
            ),
            (
                &f.prefetch_parked_requests,
                last.parked_requests,
                now.parked_requests,
            ),
            (
                &f.prefetch_parked_crossings,
                last.parked_crossings,
                now.parked_crossings,
            ),
            (
                &f.prefetch_reads_pending,
                last.reads_pending,
                now.reads_pending,
            ),
            (
                &f.account_cache,
                last.account_cache_bytes,
                now.account_cache_bytes,
            ),
            (
                &f.conversation_cache,
                last.conversation_cache_bytes,
                now.conversation_cache_bytes,
            ),
            (
                &f.contact_cache,
                last.contact_cache_bytes,
                now.contact_cache_bytes,
            ),
        ];
        for (g, was, is) in moves {
            shift(g, was as u64, is as u64);
        }
        shift(&f.queued_bytes, last.queued_bytes, now.queued_bytes);
        self.shard_series(&last, &now);
    }

    /// The gauges of this core's shard: its outbox, the hand-offs it holds.
    fn shard_series(&self, last: &CoreGauges, now: &CoreGauges) {
        let f = &self.metrics.f;
        let labels = ShardLabels { shard: self.shard };
        for (family, was, is) in [
            (&f.shard_outbox, last.outbox_rows, now.outbox_rows),
            (
                &f.shard_handoffs_held,
                last.handoffs_held,
                now.handoffs_held,
            ),
        ] {
            if was != is {
                shift(&family.get_or_create(&labels), was as u64, is as u64);
            }
        }
    }
}

impl Drop for CoreShare {
    fn drop(&mut self) {
        self.report(CoreGauges::default());
    }
}

/// Moves `g` by `is - was`.
fn shift(g: &Gauge, was: u64, is: u64) {
    if is >= was {
        g.inc_by(gauge(is - was));
    } else {
        g.dec_by(gauge(was - is));
    }
}

/// The core task's gauges, set after every batch of inputs.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CoreGauges {
    /// Authenticated WebSockets open.
    pub(crate) websockets: usize,
    /// Inputs waiting for the core task.
    pub(crate) inputs: usize,
    /// Undelivered messages held.
    pub(crate) queued_messages: usize,
    /// Their bytes, as the queue bounds count them.
    pub(crate) queued_bytes: u64,
    /// Estimated heap of the tombstones in memory.
    pub(crate) tombstone_cache_bytes: usize,
    /// Estimated heap of the queued messages in memory.
    pub(crate) queue_cache_bytes: usize,
    /// Estimated heap of the accounts in memory.
    pub(crate) account_cache_bytes: usize,
    /// Estimated heap of the conversations in memory.
    pub(crate) conversation_cache_bytes: usize,
    /// Estimated heap of the contact lists in memory.
    pub(crate) contact_cache_bytes: usize,
    /// Frames waiting for a read ahead (or queued behind one that is).
    pub(crate) parked_frames: usize,
    /// HTTP requests and WebSocket upgrades waiting for a read ahead.
    pub(crate) parked_requests: usize,
    /// What other shards sent waiting for a read ahead (or queued behind what does).
    pub(crate) parked_crossings: usize,
    /// Reads ahead asked and not yet done.
    pub(crate) reads_pending: usize,
    /// The shard's outbox rows: hand-offs and notices other shards have not taken yet.
    pub(crate) outbox_rows: usize,
    /// Hand-offs the shard holds past a gap in their stream.
    pub(crate) handoffs_held: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of the series `name` (with its labels, if any) in the exposition.
    fn value(metrics: &Metrics, name: &str) -> i64 {
        let text = metrics.encode();
        let line = text
            .lines()
            .find(|l| l.split(' ').next() == Some(name))
            .unwrap_or_else(|| panic!("no {name} in {text}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    }

    /// The cores of a sharded server add their gauges up; a core gone takes its part back.
    #[test]
    fn the_cores_gauges_add_up() {
        let metrics = Metrics::new();
        let mut first = CoreShare::new(metrics.clone(), 0);
        let mut second = CoreShare::new(metrics.clone(), 1);
        let gauges = |websockets, queued_bytes| CoreGauges {
            websockets,
            queued_bytes,
            ..CoreGauges::default()
        };
        first.report(gauges(3, 100));
        second.report(gauges(5, 40));
        assert_eq!(value(&metrics, "relay_websockets"), 8);
        assert_eq!(value(&metrics, "relay_queued_bytes"), 140);
        first.report(gauges(1, 10));
        assert_eq!(value(&metrics, "relay_websockets"), 6);
        assert_eq!(value(&metrics, "relay_queued_bytes"), 50);
        drop(second);
        assert_eq!(value(&metrics, "relay_websockets"), 1);
        assert_eq!(value(&metrics, "relay_queued_bytes"), 10);
    }

    /// Each core's outbox is its shard's series; a core gone (its shard moved to another
    /// node) sets its series back to 0, and a later core of the same shard starts from there.
    #[test]
    fn each_shard_has_its_outbox_series() {
        let metrics = Metrics::new();
        let (mut first, mut second) = (
            CoreShare::new(metrics.clone(), 0),
            CoreShare::new(metrics.clone(), 2),
        );
        let outbox = |outbox_rows, handoffs_held| CoreGauges {
            outbox_rows,
            handoffs_held,
            ..CoreGauges::default()
        };
        first.report(outbox(7, 1));
        second.report(outbox(3, 0));
        assert_eq!(value(&metrics, "relay_shard_outbox{shard=\"0\"}"), 7);
        assert_eq!(value(&metrics, "relay_shard_outbox{shard=\"2\"}"), 3);
        assert_eq!(value(&metrics, "relay_shard_handoffs_held{shard=\"0\"}"), 1);
        first.report(outbox(2, 0));
        assert_eq!(value(&metrics, "relay_shard_outbox{shard=\"0\"}"), 2);
        assert_eq!(value(&metrics, "relay_shard_handoffs_held{shard=\"0\"}"), 0);
        drop(second);
        assert_eq!(value(&metrics, "relay_shard_outbox{shard=\"2\"}"), 0);
        let mut again = CoreShare::new(metrics.clone(), 2);
        again.report(outbox(5, 0));
        assert_eq!(value(&metrics, "relay_shard_outbox{shard=\"2\"}"), 5);
    }
}
