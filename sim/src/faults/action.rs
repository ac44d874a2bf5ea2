//! What one event of a fault plan does: [`FaultAction`] (on links, hosts, clocks, the store,
//! or a raw client's [`HostileAct`]), at a time after traffic starts ([`FaultEvent`]).

use std::fmt;

use serde::{Deserialize, Serialize};

/// One scheduled fault action, `at_ms` after traffic starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultEvent {
    /// Offset from the start of traffic.
    pub at_ms: u64,
    /// What happens.
    pub action: FaultAction,
}

/// What a raw (hostile or slow) client does when told to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "act")]
pub enum HostileAct {
    /// Sends `frames` malformed frames as fast as the link takes them (every one must be
    /// answered with an error frame, or the socket closed with a code).
    Flood {
        /// How many frames.
        frames: u32,
        /// Picks the mix of malformations.
        roll: u64,
    },
    /// Makes `count` requests an honest client never makes (every one must be refused).
    Dishonest {
        /// How many requests.
        count: u32,
        /// Picks the requests and their targets.
        roll: u64,
    },
    /// Stops reading its socket while provoking `provoke` answers; resumes after `pause_ms`
    /// (`None`: never).
    StopReading {
        /// Frames sent to make the relay answer.
        provoke: u32,
        /// How long the pause lasts (`None`: for good).
        pause_ms: Option<u64>,
    },
    /// Opens `sockets` connections at once (authenticated, bad tokens, and silent TCP), holds
    /// them for `hold_ms`, then drops them.
    Storm {
        /// How many sockets.
        sockets: u32,
        /// How long they stay open.
        hold_ms: u64,
    },
}

impl fmt::Display for HostileAct {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Flood { frames, .. } => write!(f, "floods {frames} malformed frames"),
            Self::Dishonest { count, .. } => write!(f, "makes {count} dishonest requests"),
            Self::StopReading {
                provoke,
                pause_ms: Some(ms),
            } => write!(f, "stops reading for {ms} ms (provoking {provoke} answers)"),
            Self::StopReading {
                provoke,
                pause_ms: None,
            } => write!(f, "stops reading for good (provoking {provoke} answers)"),
            Self::Storm { sockets, hold_ms } => {
                write!(f, "opens {sockets} sockets at once for {hold_ms} ms")
            }
        }
    }
}

/// What a fault event does to the simulated world.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "do")]
pub enum FaultAction {
    /// Both directions between two hosts drop segments.
    Partition {
        /// One host.
        a: String,
        /// The other.
        b: String,
    },
    /// Repair both directions.
    Repair {
        /// One host.
        a: String,
        /// The other.
        b: String,
    },
    /// Segments from `from` to `to` are dropped.
    PartitionOneway {
        /// Sender side.
        from: String,
        /// Receiver side.
        to: String,
    },
    /// Repair one direction.
    RepairOneway {
        /// Sender side.
        from: String,
        /// Receiver side.
        to: String,
    },
    /// Segments between the hosts are queued.
    Hold {
        /// One host.
        a: String,
        /// The other.
        b: String,
    },
    /// Queued segments are delivered.
    Release {
        /// One host.
        a: String,
        /// The other.
        b: String,
    },
    /// Sets the maximum message latency of every link.
    MaxLatency {
        /// Milliseconds.
        ms: u64,
    },
    /// Powers a host off (its in-flight segments are lost; its durable store stays).
    Crash {
        /// Host name.
        host: String,
    },
    /// Starts a crashed host again.
    Restart {
        /// Host name.
        host: String,
    },
    /// The relay's clock jumps forward (an NTP step; pending orders whose deadline it passes
    /// expire, so their payments arrive late).
    ClockJump {
        /// Milliseconds.
        ms: u64,
    },
    /// Time passes over an idle stretch: the relay's clock and every app's clock jump forward
    /// together (the `days` class, [`crate::class`]); the network and the hosts' timers do
    /// not move, as for a machine that slept.
    WorldJump {
        /// Milliseconds.
        ms: u64,
    },
    /// A client host's clock runs `skew_ms` away from true time (negative: behind) for the
    /// whole run, setup included (the runner applies every skew before starting: a step of
    /// the clock mid-run would stretch the client's timers by the step, since client-core
    /// computes its deadlines from the wall clock).
    SetSkew {
        /// Host name.
        host: String,
        /// Offset from true (and the relay's unjumped) time.
        skew_ms: i64,
    },
    /// The relay's next `commits` commits fail (nothing of them is applied).
    FailCommits {
        /// How many.
        commits: u32,
    },
    /// The relay's next `reads` keyed reads of the store fail (an account, a conversation's
    /// tombstones, a queue, the next expiry), of one table when `table` names it: the inputs
    /// that needed them are refused, nothing is changed.
    FailReads {
        /// How many.
        reads: u32,
        /// Only reads of this table (its SQL name, `relay_core::store::Table::name`); any
        /// read when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        table: Option<String>,
    },
    /// Every commit and load fails for `ms` (the disk is gone; the shell keeps rebuilding).
    StoreDown {
        /// Milliseconds.
        ms: u64,
    },
    /// The relay's next commit takes `ms` (its committer waits before applying it; the relay
    /// keeps handling inputs, with batches in flight behind the slow one).
    StallCommit {
        /// Milliseconds.
        ms: u64,
    },
    /// The next commit is durable, then the relay powers off before sending anything;
    /// it restarts `restart_after_ms` later.
    CrashAfterCommit {
        /// Delay of the restart.
        restart_after_ms: u64,
    },
    /// The relay powers off in the middle of its next batch (nothing applied); it restarts
    /// `restart_after_ms` later.
    CrashMidBatch {
        /// Delay of the restart.
        restart_after_ms: u64,
    },
    /// The active relay's process freezes for `ms` (SIGSTOP, then SIGCONT): every link of
    /// its host held, its lease calls unanswered (failover topology only).
    Freeze {
        /// Milliseconds.
        ms: u64,
    },
    /// The busiest cluster node is cut from the database for `ms`, not from its clients or
    /// the other nodes: its commits fail, its heartbeats go unanswered (cluster topology
    /// only).
    CutFromStore {
        /// Milliseconds.
        ms: u64,
    },
    /// The busiest cluster node leaves the cluster on purpose (a planned stop, as on
    /// SIGTERM: it drains, stops its cores and gives its shards up) and starts again `ms`
    /// later, joining under load (cluster topology only).
    Leave {
        /// Milliseconds.
        ms: u64,
    },
    /// The busiest cluster node is cut from the load balancer for `ms`, not from the
    /// database or the other nodes: its clients' connections through the balancer go silent,
    /// and its shards stay its own (cluster topology only).
    CutFromBalancer {
        /// Milliseconds.
        ms: u64,
    },
    /// Tells a raw client host to do something.
    Hostile {
        /// Host name (`x0`, ...).
        host: String,
        /// What.
        act: HostileAct,
    },
    /// For `ms`, each crossing between the cores of a sharded relay is lost, handed twice or
    /// delayed (up to `delay_max_ms`) with these chances in percent (see [`crate::transit`]).
    Crossings {
        /// How long, in ms.
        ms: u64,
        /// Percent lost.
        lose_pct: u8,
        /// Percent handed twice (of what may come twice).
        twice_pct: u8,
        /// Percent delayed.
        delay_pct: u8,
        /// The longest delay, in ms.
        delay_max_ms: u64,
    },
    /// The next `commits` commits of one shard's store fail; the other shards commit on.
    ShardCommitsFail {
        /// The shard.
        shard: u16,
        /// How many.
        commits: u32,
    },
    /// The next commit of one shard's core takes `ms` (its later batches wait behind it); the
    /// other shards commit on.
    ShardCommitSlow {
        /// The shard.
        shard: u16,
        /// Milliseconds.
        ms: u64,
    },
    /// One shard's store is down for `ms` (commits, loads and reads); the other shards'
    /// are up.
    ShardStoreDown {
        /// The shard.
        shard: u16,
        /// Milliseconds.
        ms: u64,
    },
    /// The next commit that writes a row of `table` (its SQL name) is durable, then the
    /// relay powers off before sending anything; it restarts `restart_after_ms` later.
    /// `outbox`: an owner's hand-off committed and not yet applied; `inbox_marks`: an apply
    /// durable and not yet acknowledged.
    CrashAfterCommitOf {
        /// The table.
        table: String,
        /// Delay of the restart.
        restart_after_ms: u64,
    },
}

impl fmt::Display for FaultAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Partition { a, b } => write!(f, "partition {a} <-> {b}"),
            Self::Repair { a, b } => write!(f, "repair {a} <-> {b}"),
            Self::PartitionOneway { from, to } => write!(f, "partition {from} -> {to}"),
            Self::RepairOneway { from, to } => write!(f, "repair {from} -> {to}"),
            Self::Hold { a, b } => write!(f, "hold {a} <-> {b}"),
            Self::Release { a, b } => write!(f, "release {a} <-> {b}"),
            Self::MaxLatency { ms } => write!(f, "max latency {ms} ms"),
            Self::Crash { host } => write!(f, "power off {host}"),
            Self::Restart { host } => write!(f, "restart {host}"),
            Self::ClockJump { ms } => write!(f, "relay clock jumps +{} s", ms / 1_000),
            Self::WorldJump { ms } => write!(
                f,
                "every clock jumps +{} h {} min (an idle stretch)",
                ms / 3_600_000,
                ms % 3_600_000 / 60_000
            ),
            Self::SetSkew { host, skew_ms } => write!(f, "{host} clock skew {skew_ms:+} ms"),
            Self::FailCommits { commits } => write!(f, "next {commits} relay commit(s) fail"),
            Self::FailReads { reads, table: None } => {
                write!(f, "next {reads} relay store read(s) fail")
            }
            Self::FailReads {
                reads,
                table: Some(t),
            } => write!(f, "next {reads} relay store read(s) of {t} fail"),
            Self::StoreDown { ms } => write!(f, "relay store down for {ms} ms"),
            Self::StallCommit { ms } => write!(f, "relay's next commit takes {ms} ms"),
            Self::CrashAfterCommit { restart_after_ms } => write!(
                f,
                "relay powers off after its next commit (restart +{restart_after_ms} ms)"
            ),
            Self::CrashMidBatch { restart_after_ms } => write!(
                f,
                "relay powers off mid-batch (restart +{restart_after_ms} ms)"
            ),
            Self::Freeze { ms } => write!(f, "active relay freezes for {ms} ms"),
            Self::CutFromStore { ms } => {
                write!(f, "busiest node cut from the database for {ms} ms")
            }
            Self::Leave { ms } => {
                write!(
                    f,
                    "busiest node leaves the cluster and starts again after {ms} ms"
                )
            }
            Self::CutFromBalancer { ms } => {
                write!(f, "busiest node cut from the load balancer for {ms} ms")
            }
            Self::Hostile { host, act } => write!(f, "{host} {act}"),
            Self::Crossings {
                ms,
                lose_pct,
                twice_pct,
                delay_pct,
                delay_max_ms,
            } => write!(
                f,
                "crossings between relay cores for {ms} ms: {lose_pct}% lost, {twice_pct}% twice, {delay_pct}% delayed <= {delay_max_ms} ms"
            ),
            Self::ShardCommitsFail { shard, commits } => {
                write!(f, "next {commits} commit(s) of relay shard {shard} fail")
            }
            Self::ShardStoreDown { shard, ms } => {
                write!(f, "store of relay shard {shard} down for {ms} ms")
            }
            Self::ShardCommitSlow { shard, ms } => {
                write!(f, "next commit of relay shard {shard} takes {ms} ms")
            }
            Self::CrashAfterCommitOf {
                table,
                restart_after_ms,
            } => write!(
                f,
                "relay powers off after its next commit writing {table} (restart +{restart_after_ms} ms)"
            ),
        }
    }
}

impl FaultAction {
    /// Whether the action is a fault of the relay's store (failed or stalled commits and
    /// reads, the store down, crashes around a commit).
    pub fn is_store_fault(&self) -> bool {
        matches!(
            self,
            Self::FailCommits { .. }
                | Self::FailReads { .. }
                | Self::StoreDown { .. }
                | Self::StallCommit { .. }
                | Self::CrashAfterCommit { .. }
                | Self::CrashMidBatch { .. }
                | Self::ShardCommitsFail { .. }
                | Self::ShardStoreDown { .. }
                | Self::ShardCommitSlow { .. }
                | Self::CrashAfterCommitOf { .. }
                | Self::CutFromStore { .. }
        )
    }

    /// Every host name the action refers to (for shrinking away a host).
    pub fn hosts(&self) -> Vec<&str> {
        match self {
            Self::Partition { a, b }
            | Self::Repair { a, b }
            | Self::Hold { a, b }
            | Self::Release { a, b } => vec![a, b],
            Self::PartitionOneway { from, to } | Self::RepairOneway { from, to } => {
                vec![from, to]
            }
            Self::Crash { host }
            | Self::Restart { host }
            | Self::SetSkew { host, .. }
            | Self::Hostile { host, .. } => vec![host],
            _ => Vec::new(),
        }
    }

    /// Renames hosts (`c5` → `c4` when the shrinker drops `c3`); `None` drops the action.
    pub fn rename(&self, map: &dyn Fn(&str) -> Option<String>) -> Option<Self> {
        let m = |h: &String| map(h);
        Some(match self {
            Self::Partition { a, b } => Self::Partition { a: m(a)?, b: m(b)? },
            Self::Repair { a, b } => Self::Repair { a: m(a)?, b: m(b)? },
            Self::Hold { a, b } => Self::Hold { a: m(a)?, b: m(b)? },
            Self::Release { a, b } => Self::Release { a: m(a)?, b: m(b)? },
            Self::PartitionOneway { from, to } => Self::PartitionOneway {
                from: m(from)?,
                to: m(to)?,
            },
            Self::RepairOneway { from, to } => Self::RepairOneway {
                from: m(from)?,
                to: m(to)?,
            },
            Self::Crash { host } => Self::Crash { host: m(host)? },
            Self::Restart { host } => Self::Restart { host: m(host)? },
            Self::SetSkew { host, skew_ms } => Self::SetSkew {
                host: m(host)?,
                skew_ms: *skew_ms,
            },
            Self::Hostile { host, act } => Self::Hostile {
                host: m(host)?,
                act: act.clone(),
            },
            other => other.clone(),
        })
    }
}
