//! Errors of the PostgreSQL store and of leadership.
//!
//! No error text ever contains the password, a row value or a server `DETAIL` line (which can
//! quote row keys): database errors are reduced to their SQLSTATE and primary message.

use relay_core::store::StoreError;

/// SQLSTATE raised by `relay_fence` (migration 0002) when a commit's epoch is not the current one.
pub(crate) const FENCED_SQLSTATE: &str = "RF001";

/// What went wrong talking to PostgreSQL or with leadership.
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    /// The connection settings are invalid (the URL itself is never repeated: it may hold a
    /// password).
    #[error("invalid PostgreSQL configuration: {0}")]
    Config(String),
    /// Connecting, a query or the connection failed (server down, network, timeout, SQL error).
    #[error("PostgreSQL failed: {0}")]
    Backend(String),
    /// The schema was written by a newer build than this one.
    #[error("unsupported schema version {found} (this build supports up to {supported})")]
    SchemaVersion {
        /// Version found in the database.
        found: i64,
        /// Highest version this build knows.
        supported: i64,
    },
    /// This writer's leadership epoch is not the database's current one (another relay took
    /// over) or its leadership was lost; nothing was committed.
    #[error("fenced: leadership epoch {epoch} has ended")]
    Fenced {
        /// The epoch this writer held.
        epoch: u64,
    },
    /// This writer no longer owns the shard under this epoch (the shard moved to another node,
    /// or this node's lease lapsed); nothing was committed.
    #[error("fenced: shard {shard} epoch {epoch} has ended")]
    ShardFenced {
        /// The shard.
        shard: u16,
        /// The epoch this writer held it under.
        epoch: u64,
    },
    /// The schema is served the other way: by an active/standby relay when a cluster node
    /// joins, or by a cluster when a relay campaigns. Nothing was written.
    #[error("{0}")]
    WrongMode(String),
    /// The cluster was created with another number of shards than this node's (users are
    /// hashed into them, so it is fixed for the cluster's life). Nothing was written.
    #[error("the cluster has {recorded} shards, this node is configured with {ours}")]
    ShardsDiffer {
        /// The cluster's.
        recorded: u32,
        /// This node's.
        ours: u32,
    },
    /// A live node holds this node's name (its previous life, whose lease has not lapsed yet,
    /// or another process configured with the same name). Nothing was written.
    #[error(
        "node name {name} is held by a live node (incarnation {incarnation}, address {address:?}) \
         until its lease lapses; give each node its own name"
    )]
    NodeNameInUse {
        /// The name.
        name: String,
        /// The live incarnation.
        incarnation: u64,
        /// The address it registered.
        address: String,
    },
    /// A key of this relay is not the one the relays of this schema use (its fingerprint differs
    /// from the recorded one): the candidate refused to lead and wrote nothing. Every mismatch
    /// is listed; fingerprints are shown as short prefixes.
    #[error("this relay's keys are not the ones recorded for this database: {}", crate::keys::describe_mismatches(.0))]
    KeysDiffer(Vec<crate::KeyMismatch>),
    /// The store's background thread is gone (it panicked or the process is shutting down).
    #[error("the PostgreSQL worker thread has stopped")]
    Stopped,
}

impl From<PgError> for StoreError {
    fn from(e: PgError) -> Self {
        match e {
            PgError::SchemaVersion { found, supported } => Self::SchemaVersion { found, supported },
            PgError::Fenced { epoch } | PgError::ShardFenced { epoch, .. } => {
                Self::Fenced { epoch }
            }
            other => Self::Backend(other.to_string()),
        }
    }
}

/// A driver error as text without `DETAIL`/`HINT` lines (they can quote row keys).
pub(crate) fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} {}: {}", db.severity(), db.code().code(), db.message()),
        None => match std::error::Error::source(e) {
            // IO and timeout causes carry no secrets (the driver's config-parse causes are not
            // reached here: URLs are parsed in `PgConfig`).
            Some(cause) => format!("{e}: {cause}"),
            None => e.to_string(),
        },
    }
}

/// A driver error as a [`PgError`]: the fence's SQLSTATE becomes `fenced` (the error of the
/// fence the statement ran under).
pub(crate) fn classify(e: &tokio_postgres::Error, fenced: PgError) -> PgError {
    match e.as_db_error() {
        Some(db) if db.code().code() == FENCED_SQLSTATE => fenced,
        _ => PgError::Backend(describe(e)),
    }
}
