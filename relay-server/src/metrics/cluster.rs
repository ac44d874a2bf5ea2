//! A cluster node's metrics: the shards it serves (each one's epoch), how they moved, and what
//! it passed on to the other nodes (README "Metrics").

use prometheus_client::registry::{Registry, Unit};

use super::{
    Families, Metrics, MoveLabels, PassedKind, PassedLabels, PassedResult, ShardLabels, ShardMove,
};

impl Metrics {
    /// A cluster node began serving `shard` under `epoch` (`Some`), or stopped (`None`);
    /// `served`: how many it serves now.
    pub(crate) fn cluster_shard(&self, shard: u16, epoch: Option<u64>, served: usize) {
        match epoch {
            Some(epoch) => {
                self.f
                    .cluster_shard_epoch
                    .get_or_create(&ShardLabels { shard })
                    .set(i64::try_from(epoch).unwrap_or(i64::MAX));
            }
            None => {
                self.f.cluster_shard_epoch.remove(&ShardLabels { shard });
            }
        }
        self.f
            .cluster_shards_served
            .set(i64::try_from(served).unwrap_or(i64::MAX));
    }

    /// `n` shards changed as `change` says.
    pub(crate) fn cluster_moves(&self, change: ShardMove, n: u64) {
        if n > 0 {
            self.f
                .cluster_shard_moves
                .get_or_create(&MoveLabels { change })
                .inc_by(n);
        }
    }

    /// A request or an upgrade passed on to another node, answered or not, in `seconds` (the
    /// hop: from sending it on to reading the other node's answer).
    pub(crate) fn passed_on(&self, kind: PassedKind, answered: bool, seconds: f64) {
        let result = if answered {
            PassedResult::Answered
        } else {
            PassedResult::NoAnswer
        };
        self.f
            .passed_on
            .get_or_create(&PassedLabels { kind, result })
            .inc();
        if answered {
            self.f.passed_on_duration.observe(seconds);
        }
    }
}

/// Registers the cluster's families.
pub(super) fn register(r: &mut Registry, f: &Families) {
    r.register(
        "cluster_shards_served",
        "Shards this cluster node serves now",
        f.cluster_shards_served.clone(),
    );
    r.register(
        "cluster_shard_epoch",
        "The epoch of each shard this cluster node serves (its store is fenced by it), by shard",
        f.cluster_shard_epoch.clone(),
    );
    r.register(
        "cluster_shard_moves",
        "Shards this cluster node began serving, lost, or handed over on the membership's plan",
        f.cluster_shard_moves.clone(),
    );
    r.register(
        "passed_on",
        "Requests and WebSocket upgrades this cluster node passed on to the node serving their shard, by whether that node answered",
        f.passed_on.clone(),
    );
    r.register_with_unit(
        "passed_on_duration",
        "The extra hop of what a cluster node passed on: from sending it on to the other node's answer",
        Unit::Seconds,
        f.passed_on_duration.clone(),
    );
}
