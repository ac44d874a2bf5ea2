//! The relay on PostgreSQL: [`PgStore`], relay-core's [`Store`](relay_core::store::Store) over a
//! networked database, and **active/standby leadership with epoch fencing** so that many relay
//! processes can point at one database while exactly one of them serves, or a **cluster** whose
//! nodes each own some of the deployment's shards, every shard fenced by its own epoch
//! ([see below](#a-cluster-of-nodes)).
//!
//! # How a shell uses it
//!
//! ```no_run
//! # async fn serve_until_lost(_: relay_pg::Leader) {}
//! use relay_pg::{CampaignOptions, PgConfig, campaign};
//!
//! # async fn run() -> Result<(), relay_pg::PgError> {
//! let config = PgConfig::from_env()?; // DATABASE_URL (+ RELAY_POSTGRES_PASSWORD_FILE or PGPASSWORD)
//! loop {
//!     // Standby: /healthz live, /readyz not ready, WebSockets refused, until this returns.
//!     let leader = match campaign(config.clone(), CampaignOptions::default()).await {
//!         Ok(leader) => leader,
//!         Err(e) => {
//!             // database unreachable, …: log and retry with a backoff; a newer schema
//!             // (`PgError::SchemaVersion`) or keys other than the recorded ones
//!             // (`PgError::KeysDiffer`): stop, retrying cannot help
//! #           let _ = e;
//!             continue;
//!         }
//!     };
//!     // Active: build the relay from `leader.store()?` (its opener calls `leader.store()` again
//!     // after a fail-stop), serve, and watch `leader.lost()`: when it resolves, or when a commit
//!     // fails with `StoreError::Fenced`, stop serving at once (close every socket) and campaign
//!     // again (or exit and let the supervisor restart the process as a standby).
//!     serve_until_lost(leader).await;
//! }
//! # }
//! ```
//!
//! [`campaign`] is async but runs on the crate's own thread, so it can be awaited on any
//! executor; [`campaign_blocking`], [`Leader::store`] and every [`PgStore`] call block the calling
//! thread and are safe on a tokio worker (see [the threading model](#threading)).
//!
//! # Guarantees
//!
//! * **At most one writer per epoch, and no write of an old epoch after a new one began.** Every
//!   new leader increments the epoch row (the fencing token) in a transaction and only then loads
//!   the state. Every [`PgStore`] commit runs `relay_fence(epoch)` first inside its own
//!   transaction: `SELECT … FOR SHARE` on the epoch row, abort unless the epoch is still its own.
//!   The share lock conflicts with the successor's `UPDATE`, so each commit of epoch *E* either
//!   commits before the increment to *E+1* (and the successor's load, which comes after, sees
//!   it), or sees *E+1* and applies nothing ([`StoreError::Fenced`](relay_core::store::StoreError)).
//!   A leader that was paused (SIGSTOP, GC, VM migration) or partitioned and resumes after a
//!   takeover therefore commits nothing, whatever it believes.
//! * **Mutual exclusion of campaigns**: a session-level advisory lock, keyed by the schema's OID,
//!   held on a dedicated lock session for the whole leadership. Safety does not depend on it
//!   (the fence does); it only keeps candidates from taking turns bumping the epoch.
//! * **Takeover**: the lock is released when the leader's lock session ends. A killed process
//!   closes its sockets at once, so a standby waiting in `pg_advisory_lock` leads within
//!   milliseconds, plus the time to load the state. A dead machine or a network partition sends
//!   no FIN: the server's TCP keepalive on the lock session (set per session:
//!   [`LOCK_KEEPALIVE_IDLE_S`] + [`LOCK_KEEPALIVE_COUNT`] × [`LOCK_KEEPALIVE_INTERVAL_S`], and
//!   `tcp_user_timeout` [`LOCK_TCP_USER_TIMEOUT_MS`]) drops it after about 5 s. A *paused*
//!   leader (SIGSTOP, a frozen VM) still has a kernel that acknowledges TCP, so keepalives see
//!   nothing; its heartbeats stop, and the server's `idle_session_timeout` on the lock session
//!   ([`LOCK_IDLE_SESSION_TIMEOUT_MS`]) ends it, releasing the lock.
//! * **The old leader learns it lost** within [`HEARTBEAT_INTERVAL_MS`] +
//!   [`HEARTBEAT_TIMEOUT_MS`] (or at once when its lock session's connection ends), and at the
//!   latest at its next commit (fenced by the database). Until then it may still *read* its
//!   in-memory state (e.g. push a message that was committed under its epoch to a client still
//!   connected to it); it cannot commit, so it acknowledges nothing new.
//!
//! These rely on: a single PostgreSQL primary whose committed transactions survive (with a
//! replica failover, synchronous replication — an asynchronously replicated commit can be lost
//! with the primary, acknowledged or not); nobody editing the `leader` row or the relay's tables
//! by hand; every writer of the schema being a [`PgStore`]. They do not rely on clocks.
//!
//! A commit whose answer is lost (timeout, connection cut after `COMMIT` was sent) has an
//! unknown outcome: the store reports an error, the relay fails stop and rebuilds from the
//! database, and clients re-send with the same message ids (the relay's dedup makes it harmless).
//!
//! # A cluster of nodes
//!
//! [`join`] makes this process a node of the cluster of the schema (creating it with
//! [`JoinOptions::shards`] shards when it is the first). Each node holds a **lease** on the
//! database's clock, renewed by its heartbeat and never once it lapsed; the live node first by
//! name spreads the shards evenly over the live nodes (`shards(id, epoch, owner, …)`): a dead
//! node's shards at once, a joining node's share by **handover** (the owner stops the shard and
//! hands it over with [`Member::hand_over`], or it is taken at the deadline). Every change of
//! owner takes the shard's next epoch, and [`Member::store`] opens a store whose every commit
//! runs `relay_fence_shard(shard, epoch)`: the guarantee of the leader's fence, per shard. A
//! node paused past its lease or cut from the database commits nothing for a shard it lost.
//! A schema is served by a cluster or by an active relay, never both ([`PgError::WrongMode`]).
//!
//! # Keys shared by every relay
//!
//! The relays of one schema must use the same keys (the shell's JWT signing key: tokens issued
//! by one must verify on the next; its VAPID key: browsers' push subscriptions are bound to it),
//! which are files, never rows. The shell passes a [`KeyFingerprint`] of each in
//! [`CampaignOptions::keys`]; a new leader compares them with the recorded ones in the
//! transaction that takes its epoch, records them when none are, and refuses to lead
//! ([`PgError::KeysDiffer`], nothing written) when one differs, unless its [`KeyClaim`] replaces
//! the recorded value (a key rotation). A standby warns early about a difference. Fingerprints
//! are never the keys and are shown only as short hex prefixes.
//!
//! # Threading
//!
//! The `Store` trait is synchronous and the relay shell calls it from a task on its own tokio
//! runtime. The sync `postgres` crate would `block_on` its runtime there and panic, so this crate
//! runs the async driver (`tokio-postgres`) on **one dedicated thread per leadership** (a
//! single-threaded tokio runtime owning the lock session, the heartbeat and every store
//! connection). Callers hand it a future and wait on a plain channel (blocking calls) or a
//! oneshot (async calls). The driver also gives what the sync crate cannot: pipelining (a whole
//! commit in one round trip) and a connection future that resolves the moment the lock session
//! dies.
//!
//! # Schema
//!
//! Tables live in their own schema (default [`DEFAULT_SCHEMA`], see [`PgConfig::with_schema`]):
//! one `(k TEXT COLLATE "C" PRIMARY KEY, v BYTEA)` table per relay-core
//! [`Table`](relay_core::store::Table), the layout of `SqliteStore` (an expiring table also has
//! an indexed `expires_at BIGINT`, epoch milliseconds), `schema_migrations`, the
//! one-row `leader` table, `key_fingerprints` (see [below](#keys-shared-by-every-relay)), and
//! a cluster's `cluster`, `nodes` and `shards` tables.
//! Migrations are the embedded files `migrations/NNNN_*.sql`
//! ([`MIGRATIONS`]); only a new leader applies them, and a schema newer than [`SCHEMA_VERSION`] is
//! refused.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod cluster;
mod config;
mod error;
mod keys;
mod leader;
mod reader;
mod runtime;
mod schema;
mod store;

pub use cluster::{
    CLUSTER_HEARTBEAT_INTERVAL_MS, CLUSTER_HEARTBEAT_TIMEOUT_MS, CLUSTER_LEASE_MS,
    CLUSTER_LOCK_CLASS, HANDOVER_DEADLINE_MS, JoinOptions, MAX_CLUSTER_SHARDS,
    MAX_HANDOVERS_PLANNED, MAX_NODE_ADDRESS_BYTES, MAX_NODE_NAME_BYTES, MEMBERSHIP_LOCK_TIMEOUT_MS,
    Member, MemberStatus, MemberWatch, NodeId, ShardOwner, ShardTerm, join, join_blocking,
};
pub use config::{
    APPLICATION_NAME, CLIENT_KEEPALIVE_IDLE_MS, CONNECT_TIMEOUT_MS, DEFAULT_SCHEMA,
    MAX_PASSWORD_FILE_BYTES, MAX_SCHEMA_NAME_BYTES, PASSWORD_ENV, PASSWORD_FILE_ENV, PgConfig,
    URL_ENV,
};
pub use error::PgError;
pub use keys::{
    KEY_FINGERPRINT_BYTES, KeyClaim, KeyFingerprint, KeyKind, KeyMismatch, SHORT_FINGERPRINT_HEX,
};
pub use leader::{
    CAMPAIGN_LOCK_WAIT_MS, CampaignOptions, HEARTBEAT_INTERVAL_MS, HEARTBEAT_TIMEOUT_MS,
    LEADER_LOCK_CLASS, LOCK_IDLE_SESSION_TIMEOUT_MS, LOCK_KEEPALIVE_COUNT, LOCK_KEEPALIVE_IDLE_S,
    LOCK_KEEPALIVE_INTERVAL_S, LOCK_TCP_USER_TIMEOUT_MS, Leader, LeaderStatus, LeaderWatch,
    LostReason, MAX_HOLDER_BYTES, campaign, campaign_blocking,
};
pub use schema::{MIGRATIONS, Migration, SCHEMA_VERSION};
pub use store::{
    COMMIT_TIMEOUT_MS, Fence, IDLE_IN_TRANSACTION_TIMEOUT_MS, LOAD_TIMEOUT_MS, MAX_ROW_BYTES,
    PgStore, READ_TIMEOUT_MS, STORE_KEEPALIVE_IDLE_S,
};
