//! The durable store: a synchronous, transactional, row-level key/value store behind a trait.
//!
//! The relay keeps its working state in memory. Every input produces a [`Batch`] of row-level
//! [`Mutation`]s which is committed in **one** transaction before any output of that input is
//! released; at startup the relay rebuilds its working state from [`Store::load`].
//!
//! Each logical [`Table`] maps a string key to an opaque value (serde JSON of a record in
//! `crate::records`). Keys are chosen so that lexicographic order is the useful order
//! (e.g. `conv/00000000000000000042` for message seqs). A networked implementation (PostgreSQL)
//! maps every table to `(k TEXT PRIMARY KEY, v BYTEA)` and a batch to one `BEGIN … COMMIT`.

pub mod backup;
mod memory;
mod sqlite;
#[cfg(any(test, feature = "test-suite"))]
pub mod suite;

use std::collections::BTreeMap;

pub use memory::MemoryStore;
pub use sqlite::{SCHEMA_VERSION, SqliteStore};

/// The logical tables of the relay. Adding a table is additive (new SQL table, no migration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Table {
    /// Relay-wide settings: the JWT signing key, id counters.
    Meta,
    /// Accounts by user uuid.
    Accounts,
    /// Friendships by zero-padded friendship id.
    Friendships,
    /// Conversations by conversation id.
    Conversations,
    /// Undelivered messages by `recipient/conv/seq`.
    Messages,
    /// Message-id tombstones (dedup and retract authorisation) by message id.
    Tombstones,
    /// Receipt high-water marks by `conv/reader/kind`.
    ReceiptMarks,
    /// Receipts waiting for an offline sender by `recipient/conv/kind`.
    PendingReceipts,
    /// Retractions waiting for an offline recipient by `recipient/message id`.
    PendingRetracts,
    /// Channels by channel id.
    Channels,
    /// Channel posts by `channel/seq` (zero-padded).
    ChannelPosts,
    /// Channel subscriptions by `channel/user`.
    ChannelSubs,
    /// Channel-creation seats (created, bought) by user uuid.
    ChannelQuota,
    /// Payment orders (vanity, channel trade, quota) by order id.
    Orders,
    /// Payment webhook events by the processor's payment id.
    Payments,
    /// Aliases sold and bound, or retired, by alias id (never sold again).
    Aliases,
    /// `payment_confirmed` frames waiting for an offline buyer by `user/order`.
    PendingConfirms,
    /// Media uploads and objects (metadata only; bytes in the blob store) by upload id.
    Media,
    /// Push targets (Web Push subscriptions, native tokens) by user uuid.
    PushTargets,
    /// Used single-use credentials (auth challenges, WebSocket tickets) by kind and nonce,
    /// until they expire.
    Spent,
}

impl Table {
    /// Every table, in a fixed order.
    pub const ALL: [Self; 20] = [
        Self::Meta,
        Self::Accounts,
        Self::Friendships,
        Self::Conversations,
        Self::Messages,
        Self::Tombstones,
        Self::ReceiptMarks,
        Self::PendingReceipts,
        Self::PendingRetracts,
        Self::Channels,
        Self::ChannelPosts,
        Self::ChannelSubs,
        Self::ChannelQuota,
        Self::Orders,
        Self::Payments,
        Self::Aliases,
        Self::PendingConfirms,
        Self::Media,
        Self::PushTargets,
        Self::Spent,
    ];

    /// The SQL table name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Meta => "meta",
            Self::Media => "media",
            Self::PushTargets => "push_targets",
            Self::Accounts => "accounts",
            Self::Friendships => "friendships",
            Self::Conversations => "conversations",
            Self::Messages => "messages",
            Self::Tombstones => "tombstones",
            Self::ReceiptMarks => "receipt_marks",
            Self::PendingReceipts => "pending_receipts",
            Self::PendingRetracts => "pending_retracts",
            Self::Channels => "channels",
            Self::ChannelPosts => "channel_posts",
            Self::ChannelSubs => "channel_subs",
            Self::ChannelQuota => "channel_quota",
            Self::Orders => "orders",
            Self::Payments => "payments",
            Self::Aliases => "aliases",
            Self::PendingConfirms => "pending_confirms",
            Self::Spent => "spent",
        }
    }
}

/// One row-level change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mutation {
    /// Insert or replace the row `key` of `table`.
    Put {
        /// Target table.
        table: Table,
        /// Row key.
        key: String,
        /// Serialized record.
        value: Vec<u8>,
    },
    /// Delete the row `key` of `table` (no-op when absent).
    Delete {
        /// Target table.
        table: Table,
        /// Row key.
        key: String,
    },
}

/// The mutations of one input, applied atomically and in order.
pub type Batch = Vec<Mutation>;

/// The full committed content of a store: table -> key -> value.
pub type Snapshot = BTreeMap<Table, BTreeMap<String, Vec<u8>>>;

/// Why the store could not load or commit. Never contains row values (they may be secret).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The backend failed (IO, corruption, disk full, injected fault).
    #[error("storage backend failed: {0}")]
    Backend(String),
    /// The database was written by a newer schema than this build understands.
    #[error("unsupported schema version {found} (this build supports up to {supported})")]
    SchemaVersion {
        /// Version found on disk.
        found: i64,
        /// Highest version this build knows.
        supported: i64,
    },
    /// This writer was fenced off: another relay process took over the shared database (it holds
    /// a newer leadership epoch), or this process lost its leadership. Nothing of the batch was
    /// applied, and no later commit through this store can succeed: the relay must stop serving
    /// (fail-stop) and campaign again rather than rebuild from the same store.
    #[error(
        "fenced: this relay's leadership (epoch {epoch}) has ended; another relay may have taken over"
    )]
    Fenced {
        /// The leadership epoch this store was writing under.
        epoch: u64,
    },
}

/// A synchronous transactional store.
///
/// Contract, checked by the shared test suite every implementation must pass:
/// * `commit` is atomic: after it returns `Ok`, every mutation is durable (survives a crash of
///   the process); after it returns `Err`, none of them is visible (all-or-nothing).
/// * `load` returns exactly the committed state.
pub trait Store: Send + std::fmt::Debug {
    /// Reads every committed row.
    fn load(&mut self) -> Result<Snapshot, StoreError>;
    /// Applies `batch` atomically and durably. The batch is taken by value so that an
    /// implementation which keeps rows in memory can move keys and values instead of copying
    /// them (a networked one just binds them by reference before dropping the batch).
    fn commit(&mut self, batch: Batch) -> Result<(), StoreError>;
}

impl<S: Store + ?Sized> Store for Box<S> {
    fn load(&mut self) -> Result<Snapshot, StoreError> {
        (**self).load()
    }
    fn commit(&mut self, batch: Batch) -> Result<(), StoreError> {
        (**self).commit(batch)
    }
}
