//! The durable store: a synchronous, transactional, row-level key/value store behind a trait.
//!
//! The relay keeps its working state in memory, except the *lazy* tables ([`Table::is_lazy`]),
//! which it reads on first use through a [`StoreRead`] handle and keeps behind a bounded cache.
//! Every input produces a [`Batch`] of row-level [`Mutation`]s which is committed in **one**
//! transaction before any output of that input is released; at startup the relay rebuilds its
//! working state from [`Store::load_eager`] (every table but the lazy ones).
//!
//! Rows of an *expiring* table ([`Table::has_expiry`]) carry an expiry next to the value
//! ([`Mutation::PutExpiring`]); [`Mutation::Expire`] deletes every row whose expiry has passed
//! with one indexed range delete, so nothing in memory has to remember each row to expire it;
//! where a due row is not simply deleted (a queue whose oldest message's TTL ended: its due
//! messages leave, and its row is rewritten), [`StoreRead::expired`] reads the due keys in pages
//! from the same index.
//!
//! Each logical [`Table`] maps a string key to an opaque value (serde JSON of a record in
//! `crate::records`). Keys are chosen so that lexicographic order is the useful order
//! (e.g. `conv/00000000000000000042` for message seqs). A networked implementation (PostgreSQL)
//! maps every table to `(k TEXT PRIMARY KEY, v BYTEA)` and a batch to one `BEGIN … COMMIT`.

pub mod backup;
mod batch;
mod memory;
mod sqlite;
#[cfg(any(test, feature = "test-suite"))]
pub mod suite;

use std::collections::BTreeMap;

pub(crate) use batch::Spares;
pub use batch::{Batch, Iter as BatchIter, MutationRef, RowKey};
pub use memory::MemoryStore;
#[cfg(any(test, feature = "test-suite"))]
pub use memory::NullStore;
pub use sqlite::{SCHEMA_VERSION, SqliteStore, WriteGroup};

/// The logical tables of the relay. Adding a table is additive (new SQL table, no migration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Table {
    /// Relay-wide settings: the JWT signing key, id counters.
    Meta,
    /// Accounts by user uuid. Lazy: read per account on first use (`crate::directory`).
    Accounts,
    /// Friendships by zero-padded friendship id. Lazy: the relay reads a user's friendships
    /// through [`Table::Contacts`]; this table is their record by id.
    Friendships,
    /// Conversations by conversation id. Lazy: read per conversation on first use
    /// (`crate::relations`).
    Conversations,
    /// Undelivered messages by `recipient/conv/seq`. Lazy: read per queue (recipient and
    /// conversation) when needed (`crate::queue`).
    Messages,
    /// Message-id tombstones (dedup and retract authorisation) by `author/message id`. Lazy
    /// and expiring: read per conversation on first use, deleted by [`Mutation::Expire`].
    Tombstones,
    /// Receipt high-water marks by `conv/reader/kind`. Lazy: read per conversation at its first
    /// receipt once it is in memory (`crate::relations`).
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
    /// The accounts' lookup keys: `alias/<alias id>`, `ed25519/<hex key>` and
    /// `x25519/<hex key>`, each to its account's uuid. Lazy: read per lookup
    /// (`crate::directory`).
    AccountIndex,
    /// Every friendship once per member, by `user/zero-padded friendship id`, to the
    /// friendship's row: a user's contacts in one prefix scan. Lazy (`crate::relations`).
    Contacts,
    /// What each non-empty queue holds (messages, bytes, oldest acceptance time, sender) by
    /// `recipient/conv`: the queue bounds, loaded at start (`crate::queue`). Expiring: each row
    /// carries when its queue's oldest message's TTL ends, and the relay finds the due queues
    /// with [`StoreRead::expired`] (it rewrites or deletes each row itself, never by range).
    QueueIndex,
    /// Messages this shard decided for a user of another shard, until that shard applied
    /// them, by `shard/recipient/conv/seq` (`crate::handoff`'s outbox).
    Outbox,
    /// The last seq applied per stream handed to this shard, by `recipient/conv`
    /// (`crate::handoff`'s inbox marks).
    InboxMarks,
    /// Receipts and retractions this shard decided for users of other shards, until that
    /// shard took them, by `shard/user/conv/what` (`crate::handoff`'s notices).
    Notices,
    /// The highest seq of each kind of receipt this shard took from other shards for each of
    /// its users, by `user/conv/kind`: a receipt notice at or below it is late (a newer one
    /// overtook it) and is dropped (`crate::handoff`'s receipt marks).
    ReceiptsTaken,
}

impl Table {
    /// Every table, in a fixed order.
    pub const ALL: [Self; 27] = [
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
        Self::AccountIndex,
        Self::Contacts,
        Self::QueueIndex,
        Self::Outbox,
        Self::InboxMarks,
        Self::Notices,
        Self::ReceiptsTaken,
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
            Self::AccountIndex => "account_index",
            Self::Contacts => "contacts",
            Self::QueueIndex => "queue_index",
            Self::Outbox => "outbox",
            Self::InboxMarks => "inbox_marks",
            Self::Notices => "notices",
            Self::ReceiptsTaken => "receipts_taken",
        }
    }

    /// Whether the relay reads this table on demand ([`StoreRead`]) instead of loading it at
    /// startup: [`Store::load_eager`] leaves it out.
    pub fn is_lazy(self) -> bool {
        matches!(
            self,
            Self::Tombstones
                | Self::Messages
                | Self::Accounts
                | Self::AccountIndex
                | Self::Friendships
                | Self::Conversations
                | Self::Contacts
                | Self::ReceiptMarks
        )
    }

    /// Whether rows of this table carry an expiry ([`Mutation::PutExpiring`],
    /// [`Mutation::Expire`]). Only such tables accept those mutations; a store refuses them on
    /// any other table (the batch fails, nothing of it is applied).
    pub fn has_expiry(self) -> bool {
        matches!(self, Self::Tombstones | Self::QueueIndex)
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
    /// Insert or replace the row `key` of an expiring table ([`Table::has_expiry`]) together
    /// with its expiry (epoch milliseconds): the first [`Mutation::Expire`] of that table whose
    /// `up_to` reaches `expires_at` deletes it.
    PutExpiring {
        /// Target table.
        table: Table,
        /// Row key.
        key: String,
        /// Serialized record.
        value: Vec<u8>,
        /// When the row may be deleted.
        expires_at: u64,
    },
    /// Delete every row of the expiring table `table` whose expiry is at or before `up_to`
    /// (one indexed range delete).
    Expire {
        /// Target table.
        table: Table,
        /// Epoch milliseconds: rows expiring at or before it go.
        up_to: u64,
    },
}

impl Mutation {
    /// The table this mutation writes.
    pub fn table(&self) -> Table {
        self.as_ref().table()
    }

    /// Whether this mutation carries an expiry ([`Mutation::PutExpiring`], [`Mutation::Expire`])
    /// for a table without one: a store refuses its whole batch.
    pub fn misplaces_an_expiry(&self) -> bool {
        self.as_ref().misplaces_an_expiry()
    }

    /// The single row this mutation writes (`None` for [`Mutation::Expire`], which writes a
    /// range).
    pub fn key(&self) -> Option<&str> {
        self.as_ref().key()
    }
}

/// The full committed content of a store: table -> key -> value.
pub type Snapshot = BTreeMap<Table, BTreeMap<String, Vec<u8>>>;

/// Why the store could not load or commit. Never contains row values (they may be secret).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
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

/// Rows as a read returns them: key and value, in key order.
pub type Rows = Vec<(String, Vec<u8>)>;

/// Keys with their expiry, in expiry order (then key order).
pub type Expiries = Vec<(String, u64)>;

/// A synchronous transactional store.
///
/// Contract, checked by the shared test suite every implementation must pass:
/// * `commit` is atomic: after it returns `Ok`, every mutation is durable (survives a crash of
///   the process); after it returns `Err`, none of them is visible (all-or-nothing).
/// * `load` returns exactly the committed state; `load_eager` the same without the lazy tables.
/// * A [`StoreRead`] from `reader` sees every commit that returned `Ok` before the read began.
pub trait Store: Send + std::fmt::Debug {
    /// Reads every committed row (backups, tests and tools; the relay uses
    /// [`load_eager`](Store::load_eager)).
    fn load(&mut self) -> Result<Snapshot, StoreError>;
    /// Reads every committed row of every table that is not lazy ([`Table::is_lazy`]): what the
    /// relay holds in memory. The default filters [`load`](Store::load); an implementation
    /// should not read the lazy tables at all (they are the large ones).
    fn load_eager(&mut self) -> Result<Snapshot, StoreError> {
        let mut all = self.load()?;
        all.retain(|table, _| !table.is_lazy());
        Ok(all)
    }
    /// Applies `batch` atomically and durably. The batch is borrowed: an implementation binds
    /// or copies its rows, and the caller reuses its buffers for the next batch.
    fn commit(&mut self, batch: &Batch) -> Result<(), StoreError>;
    /// A handle for keyed reads that works beside this one, also while another thread commits
    /// through this store (a second connection, or a shared view of the same rows). It may
    /// connect at its first read, on the thread that reads (its reads fail while it cannot).
    fn reader(&mut self) -> Result<Box<dyn StoreRead>, StoreError>;
}

/// [`StoreRead::scan_prefixes`] as one [`StoreRead::scan_prefix`] per prefix.
pub fn scan_each<R: StoreRead + ?Sized>(
    reader: &mut R,
    table: Table,
    prefixes: &[String],
) -> Result<Rows, StoreError> {
    let mut rows = Vec::new();
    for prefix in prefixes {
        rows.extend(reader.scan_prefix(table, prefix)?);
    }
    Ok(rows)
}

/// Keyed reads of committed rows, for the state the relay does not hold in memory.
///
/// Reads never see uncommitted mutations: the relay keeps what it wrote and has not yet seen
/// committed in its own memory, and only forgets rows once they are durable.
pub trait StoreRead: Send + std::fmt::Debug {
    /// Makes the reader ready for its first read now (e.g. opens its connection), on the
    /// thread that will read; a reader that needs nothing does nothing. Its reads connect
    /// by themselves anyway: this only moves that wait ahead of the first read.
    fn connect(&mut self) -> Result<(), StoreError> {
        Ok(())
    }
    /// The committed value of row `key` of `table`.
    fn get(&mut self, table: Table, key: &str) -> Result<Option<Vec<u8>>, StoreError>;
    /// Every committed row of `table` whose key starts with `prefix`, in key order.
    fn scan_prefix(&mut self, table: Table, prefix: &str) -> Result<Rows, StoreError>;
    /// The first `max` committed rows of `table` whose keys start with `prefix`, in key
    /// order: a set read whole only when it is small (more than `max` rows tells it is not).
    ///
    /// The default truncates [`scan_prefix`](StoreRead::scan_prefix), which reads them all;
    /// an implementation over a large table should read only `max`.
    fn scan_prefix_max(
        &mut self,
        table: Table,
        prefix: &str,
        max: usize,
    ) -> Result<Rows, StoreError> {
        let mut rows = self.scan_prefix(table, prefix)?;
        rows.truncate(max);
        Ok(rows)
    }
    /// Every committed row of `table` whose key starts with one of `prefixes` (none a prefix
    /// of another), prefix by prefix in the order given, each in key order: several
    /// [`scan_prefix`](StoreRead::scan_prefix) in one read (the expiry sweep's due queues).
    ///
    /// The default makes one scan per prefix ([`scan_each`]); an implementation whose reads
    /// are round trips should make one.
    fn scan_prefixes(&mut self, table: Table, prefixes: &[String]) -> Result<Rows, StoreError> {
        scan_each(self, table, prefixes)
    }
    /// At most `max` committed rows of `table` whose keys are at least `start` and below
    /// `end`, in key order: a page of a queue (its rows between two seqs).
    ///
    /// The default filters [`scan_prefix`](StoreRead::scan_prefix) of the whole table; an
    /// implementation over a large table should read only the range.
    fn scan_range(
        &mut self,
        table: Table,
        start: &str,
        end: &str,
        max: usize,
    ) -> Result<Rows, StoreError> {
        let mut rows = self.scan_prefix(table, "")?;
        rows.retain(|(k, _)| k.as_str() >= start && k.as_str() < end);
        rows.truncate(max);
        Ok(rows)
    }
    /// At most `limit` committed rows of `table` whose keys come after `after` (from the first
    /// row when `None`), in key order: a lazy table read whole in pages of bounded size.
    ///
    /// The default filters [`scan_prefix`](StoreRead::scan_prefix) of the whole table, which
    /// holds it all at once; an implementation over a large table should read only the page.
    fn scan_page(
        &mut self,
        table: Table,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Rows, StoreError> {
        let mut rows = self.scan_prefix(table, "")?;
        rows.retain(|(k, _)| after.is_none_or(|after| k.as_str() > after));
        rows.truncate(limit);
        Ok(rows)
    }
    /// The keys of the expiring table `table` that expire last, with their expiries: every row
    /// whose expiry is within `window` milliseconds of the latest expiry in the table (none
    /// when it is empty), in expiry order. Values are not read: the index on the expiry
    /// answers alone.
    fn latest_expiries(&mut self, table: Table, window: u64) -> Result<Expiries, StoreError>;
    /// The earliest expiry after `after` among the rows of the expiring table `table`.
    fn next_expiry(&mut self, table: Table, after: u64) -> Result<Option<u64>, StoreError>;
    /// At most `limit` keys of the expiring table `table` whose expiry is at or before `up_to`,
    /// with their expiries, in (expiry, key) order, starting after the row `after` (an expiry
    /// and key) when given: the due rows read in pages from the index on the expiry, without
    /// their values.
    fn expired(
        &mut self,
        table: Table,
        up_to: u64,
        after: Option<(u64, &str)>,
        limit: usize,
    ) -> Result<Expiries, StoreError>;
}

impl<S: Store + ?Sized> Store for Box<S> {
    fn load(&mut self) -> Result<Snapshot, StoreError> {
        (**self).load()
    }
    fn load_eager(&mut self) -> Result<Snapshot, StoreError> {
        (**self).load_eager()
    }
    fn commit(&mut self, batch: &Batch) -> Result<(), StoreError> {
        (**self).commit(batch)
    }
    fn reader(&mut self) -> Result<Box<dyn StoreRead>, StoreError> {
        (**self).reader()
    }
}

/// Reads every committed row of `table` in keyset pages of `page_rows` rows and commits, page by
/// page, the rows `derive` writes for each into a batch of its own (so a rerun after a start cut
/// short redoes at most a page, and memory holds one page): how a start fills a table that
/// derives from another (index rows) for a store written before it existed. The rows derived
/// must be idempotent. Returns the rows read.
pub(crate) fn derive_in_pages(
    store: &mut dyn Store,
    reader: &mut dyn StoreRead,
    table: Table,
    page_rows: usize,
    mut derive: impl FnMut(&mut Batch, &str, &[u8]) -> Result<(), StoreError>,
) -> Result<u64, StoreError> {
    let mut after: Option<String> = None;
    let mut batch = Batch::default();
    let mut read = 0;
    loop {
        let page = reader.scan_page(table, after.as_deref(), page_rows.max(1))?;
        let Some((last, _)) = page.last() else {
            break;
        };
        after = Some(last.clone());
        batch.clear();
        for (key, value) in &page {
            derive(&mut batch, key, value)?;
            read += 1;
        }
        store.commit(&batch)?;
    }
    Ok(read)
}

/// A read of rows with an expiry from a table without one: a bug of the caller, refused.
pub(crate) fn no_expiry(table: Table) -> StoreError {
    StoreError::Backend(format!("table {} has no expiry column", table.name()))
}

/// Refuses `batch` when one of its mutations misplaces an expiry
/// ([`Mutation::misplaces_an_expiry`]), before anything of it is applied.
pub(crate) fn refuse_misplaced_expiry(batch: &Batch) -> Result<(), StoreError> {
    match batch.iter().find(|m| m.misplaces_an_expiry()) {
        Some(m) => Err(no_expiry(m.table())),
        None => Ok(()),
    }
}

/// The smallest string greater than every string starting with `prefix` (the exclusive end of
/// a prefix scan), or `None` when there is none (every string from `prefix` on matches).
pub fn prefix_end(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let next = (u32::from(last) + 1..=u32::from(char::MAX)).find_map(char::from_u32);
        if let Some(next) = next {
            chars.push(next);
            return Some(chars.into_iter().collect());
        }
    }
    None
}
