//! Every constant more than one module of the simulator reads: the hosts and ports of the
//! simulated world, the run's timeline, the bounds the oracles hold the system to, and the
//! limits of the simulated network. A leaf: it imports nothing from the crate, so a module
//! that needs a bound never imports the module that uses it.
//!
//! ```text
//!   setup ─► traffic window (TRAFFIC_WINDOW_MS, faults inside) ─► heal ─► liveness (LIVENESS_BOUND_MS)
//!                                                              probes at PROBE_AFTER_HEAL_MS ┘
//!                          end - FINAL_JUMP_BEFORE_END_MS: the relay's clock jumps FINAL_JUMP_MS
//!                          end - AUDIT_BEFORE_END_MS: the commerce audit; end - PROBE_BEFORE_END_MS: its buy probes
//! ```
//!
//! Constants only one module reads stay in that module.

// ---------------------------------------------------------------------------- hosts and ports

/// Host name of the relay (with the `failover` fault kind: of the load balancer in front of
/// [`RELAY_A`] and [`RELAY_B`]).
pub const RELAY: &str = "relay";
/// The first relay of the failover topology.
pub const RELAY_A: &str = "relay-a";
/// The second relay of the failover topology.
pub const RELAY_B: &str = "relay-b";
/// The third node of the cluster topology (the first two are [`RELAY_A`] and [`RELAY_B`]).
pub const RELAY_C: &str = "relay-c";
/// The fewest shards a run of the cluster topology has (more when the run's relay is drawn
/// with more).
pub const MIN_CLUSTER_SHARDS: u16 = 4;
/// Host name of the payment processor stand-in.
pub const PAY: &str = "pay";
/// The webhook secret the relay and the payment processor stand-in share (the drills sign
/// webhooks of their own with it).
pub const WEBHOOK_SECRET: &[u8] = b"sim-webhook-secret";
/// Host name of the push-service stand-in (it shares the `pay` host).
pub const PUSH: &str = PAY;
/// Host of the commerce auditor's app (it shares the `pay` host with the payment and push
/// stand-ins).
pub const AUDIT: &str = PAY;

/// Port of the relay host.
pub const RELAY_PORT: u16 = 8080;
/// Port of the payment processor stand-in on the [`PAY`] host.
pub const PAY_PORT: u16 = 9090;
/// Port of the forger (wrong secret) on the [`PAY`] host.
pub const FORGER_PORT: u16 = 9091;
/// Port of the Web Push stand-in on the [`PUSH`] host (FCM and APNs take the next two ports).
pub const PUSH_PORT: u16 = 9100;

// ---------------------------------------------------------------------------- the timeline

/// Traffic window (faults happen inside it).
pub const TRAFFIC_WINDOW_MS: u64 = 120_000;
/// After healing, the run goes on this long (delivery, probes, commerce audit).
pub const LIVENESS_BOUND_MS: u64 = 120_000;
/// The probe round starts this long after healing (every client has noticed a dead socket
/// by then, see [`DELIVERY_BOUND_MS`]).
pub const PROBE_AFTER_HEAL_MS: u64 = client::DEAD_LINK_MS + 15_000;
/// The final clock jump (past every hold and trade order) happens this long before the end.
pub const FINAL_JUMP_BEFORE_END_MS: u64 = 40_000;
/// Final clock jump: 31 minutes (past the 30-minute trade order).
pub const FINAL_JUMP_MS: u64 = 31 * 60_000;
/// The commerce audit starts this long before the end.
pub const AUDIT_BEFORE_END_MS: u64 = 30_000;
/// The audit's buy probes start this long before the end.
pub const PROBE_BEFORE_END_MS: u64 = 15_000;

// ---------------------------------------------------------------------------- bounds

/// Every acknowledged message must reach its recipient within this long after healing (or
/// after its ack, if later), however large the backlog: a client learns that a socket died
/// silently in a partition only after [`DEAD_LINK_MS`](client::DEAD_LINK_MS) of
/// silence (60 s), then reconnects and syncs.
pub const DELIVERY_BOUND_MS: u64 = client::DEAD_LINK_MS + 20_000;
/// A client that connects on a healthy network must have everything queued for it at that
/// moment within this long (the `sync-complete` oracle): a backlog of thousands is replayed in
/// windows of `relay_core::limits::SYNC_WINDOW_MSGS`, each released by the client's receipts.
pub const SYNC_BOUND_MS: u64 = 20_000;
/// A probe (message, typing notice, call offer and its answer) must arrive within this long.
pub const PROBE_BOUND_MS: u64 = 10_000;
/// Setup (registration, friendships) must finish within this much simulated time at the
/// small and medium scales (see [`Scale::setup_bound_ms`](crate::scenario::Scale::setup_bound_ms)).
pub const SETUP_BOUND_MS: u64 = 120_000;
/// Setup at the large scale (hundreds of accounts befriend each other).
pub const LARGE_SETUP_BOUND_MS: u64 = 400_000;
/// A socket that stopped reading must be closed by the relay within this much simulated time
/// (the relay's writes to it block after the transport's window fills).
pub const STUCK_CLOSE_BOUND_MS: u64 = 60_000;

// ---------------------------------------------------------------------------- limits

/// turmoil's per-stream window and accept queue, in segments (turmoil panics when more
/// connection attempts than this reach a listener within one step).
pub const TCP_CAPACITY: usize = 256;
/// A slow consumer must provoke at least this many answers for the relay to be held to
/// [`STUCK_CLOSE_BOUND_MS`]: more than the transport's window (in segments, one answer
/// each) takes, so the relay's writes to it block (with fewer, every write completes and the
/// relay has no reason to drop it).
pub const STUCK_MIN_PROVOKE: u32 = TCP_CAPACITY as u32 + 44;
/// Most sockets a storm opens per wave: turmoil panics when more than its accept-queue
/// capacity (64) of connection attempts reach a listener within one tick.
pub const STORM_WAVE: usize = 24;
/// Pause between storm waves, in ms (one turmoil tick).
pub const STORM_WAVE_MS: u64 = 4;
/// How long a failover lease lasts without renewal (PostgreSQL: the lock session's
/// `idle_session_timeout`, 3 s in `relay_pg`).
pub const LEASE_MS: u64 = 3_000;
/// How often a failover leader renews its lease, and a cluster node its own (its heartbeat).
pub const RENEW_MS: u64 = 500;
/// Cluster topology: after a node's lease lapsed, each of its shards is served by another
/// node (its core opened under the shard's next epoch) within this long: the next heartbeat
/// of a live node moves it, the new owner's next one starts its core (two renewal periods),
/// plus scheduling. From the dead node's last renewal: the lease plus this.
pub const TAKEOVER_BOUND_MS: u64 = 1_500;
/// Cluster topology: how long a hand-off committed as the run ends may still wait for its
/// acknowledgement before `handoffs-drained` holds its outbox row against the relay (the
/// drills go on to the end, so the last rows are in flight): a lease and a takeover (a node
/// a drill powered off), the recipient's commit and the owner's, and one resend.
pub const HANDOFF_SETTLE_MS: u64 = LEASE_MS + TAKEOVER_BOUND_MS + 2 * 1_000 + 1_000;
