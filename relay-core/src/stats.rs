//! What the relay did since it was built, as plain counters a shell reads
//! ([`Relay::stats`](crate::Relay::stats)) and exports (the relay server's `/metrics`).
//!
//! Counting changes nothing the relay does: no output, timer or commit depends on a counter.
//! A counter counts handled inputs: an input whose commit then fails (fail-stop) was
//! counted although nothing of it was acknowledged; the shell counts failed commits itself.
//! Never per account, conversation or address: totals only.

/// Counters of one [`Relay`](crate::Relay), from zero at construction (a rebuilt relay
/// starts again from zero; a shell exporting monotonic totals adds the differences).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RelayStats {
    /// New `msg` frames stored and acknowledged, whose recipient had a synced connection
    /// open (routed at once, within its delivery window).
    pub messages_accepted_online: u64,
    /// New `msg` frames stored and acknowledged for a recipient without an open connection
    /// (queued for its next `sync`, with a push when it has targets).
    pub messages_accepted_offline: u64,
    /// Re-sends of a message id the relay still holds, acknowledged again with the first
    /// `seq` and not stored twice.
    pub messages_deduplicated: u64,
    /// `sync` frames handled.
    pub syncs: u64,
    /// Messages waiting for the account when it sent `sync` (replayed after it, oldest
    /// first), summed over every `sync`.
    pub sync_backlog_messages: u64,
    /// Conversations' tombstone sets read from the store (the first `msg` or `retract` in a
    /// conversation whose set was not in memory).
    pub tombstone_sets_read: u64,
    /// Single tombstones read from the store: the lookups in conversations whose sets are too
    /// large to hold whole, for ids not written since their entry was made.
    pub tombstone_rows_read: u64,
    /// Tombstone reads that failed (the frame was refused with `STORAGE_UNAVAILABLE`, or a
    /// range expiry was put off).
    pub tombstone_read_failures: u64,
    /// Times a frame was parked on a read ahead ([`Relay::read_ahead`](crate::Relay::read_ahead)):
    /// once per cold read it needed.
    pub frames_parked: u64,
    /// Times an HTTP request or a WebSocket upgrade was parked on a read ahead (once per cold
    /// read it needed).
    pub requests_parked: u64,
    /// WebSocket upgrades held after a start until the other shards said how full their
    /// users' queues are (at most [`START_HOLD_MS`](crate::START_HOLD_MS)).
    pub upgrades_held: u64,
    /// Times a step of the timed sweeps (expired tombstones and messages) was parked on a read
    /// ahead.
    pub sweeps_parked: u64,
    /// Times what another shard sent (a hand-off to apply, a submission to decide, a notice)
    /// was parked on a read ahead.
    pub crossings_parked: u64,
    /// Crossings dropped because [`MAX_PARKED_CROSSINGS`](crate::prefetch::MAX_PARKED_CROSSINGS)
    /// waited for reads already, or one was parked again too often (their sender sends again
    /// what the hand-off needs).
    pub crossings_dropped_waiting: u64,
    /// Reads of the store made on the relay's own task: every read when it does not read
    /// ahead; with it, those of the synchronous [`Relay::handle_http`](crate::Relay::handle_http)
    /// and [`Relay::handle_connect`](crate::Relay::handle_connect), and an input's read after
    /// it changed something.
    pub reads_inline: u64,
    /// Frames, requests and upgrades refused for reads ahead: too many waiting, or parked too
    /// many times (`crate::prefetch`'s bounds).
    pub frames_refused_waiting: u64,
    /// Queues read from the store (one recipient's messages in one conversation, needed while
    /// not in memory).
    pub queues_read: u64,
    /// Queue reads that failed (the frame or request was refused with `STORAGE_UNAVAILABLE`,
    /// a `sync` closed the connection, or an expiry was put off).
    pub queue_read_failures: u64,
    /// Queues whose stored messages disagreed with their queue index entry when read (the
    /// messages won; a healthy store never has any).
    pub queue_summaries_repaired: u64,
    /// Accounts read from the store (needed by uuid, alias or key while not in memory).
    pub accounts_read: u64,
    /// Account and lookup reads that failed (the request or frame was refused with
    /// `STORAGE_UNAVAILABLE`).
    pub account_read_failures: u64,
    /// Conversations read from the store (needed by id while not in memory).
    pub conversations_read: u64,
    /// Conversation and receipt mark reads that failed (the frame or request was refused with
    /// `STORAGE_UNAVAILABLE`).
    pub conversation_read_failures: u64,
    /// Conversations whose receipt marks were read from the store (at a receipt in them, once
    /// per time the conversation is in memory).
    pub receipt_marks_read: u64,
    /// Contact lists read from the store (one user's friendships, needed while not in memory).
    pub contacts_read: u64,
    /// Contact list reads that failed (the request or frame was refused with
    /// `STORAGE_UNAVAILABLE`, or a `sync` closed the connection).
    pub contact_read_failures: u64,
    /// Payment webhooks, by what they did.
    pub webhooks: WebhookStats,
    /// New `msg` frames stored and acknowledged for a user of another shard: written to the
    /// outbox and handed to that shard (`crate::handoff`).
    pub messages_handed_off: u64,
    /// `msg` frames of this shard's users submitted to the shard that owns their
    /// conversation, which decides them.
    pub messages_submitted: u64,
    /// Submitted `msg` frames sent again because their verdicts had not come
    /// (`crate::handoff::Submissions`).
    pub submissions_resent: u64,
    /// Outbox rows deleted because their destination shard applied them.
    pub handoffs_acknowledged: u64,
    /// Messages handed from another shard applied here (each joins its recipient's queue
    /// once).
    pub handoffs_applied: u64,
    /// Hand-offs received again after they were applied (acknowledged again).
    pub handoffs_repeated: u64,
    /// Hand-offs held past a gap in their stream until it is filled.
    pub handoffs_held: u64,
    /// Hand-offs not taken now (a failed read of the recipient's queue, or too many held):
    /// their owner sends them again.
    pub handoffs_deferred: u64,
    /// Receipts, retractions and friendships from other shards applied here
    /// (`crate::handoff::Notices`).
    pub notices_taken: u64,
    /// HTTP requests forwarded to the shard that decides them (a friendship's owner).
    pub requests_forwarded: u64,
    /// Forwarded requests answered 503 here because their answer did not come in time.
    pub forwards_timed_out: u64,
    /// Hand-offs refused because their chain contradicts what was applied (an owner's
    /// defect).
    pub handoffs_broken: u64,
}

/// The message-id tombstones held in memory, read with
/// [`Relay::tombstone_cache`](crate::Relay::tombstone_cache) (the rest are in the store).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TombstoneCacheStats {
    /// Estimated heap of the sets in memory (bounded by `Config::tombstone_cache_bytes`, plus
    /// what the batches in flight pinned).
    pub bytes: usize,
    /// Conversations whose sets are in memory.
    pub conversations: usize,
    /// Tombstones in those sets.
    pub tombstones: usize,
    /// Sets evicted since the relay was built.
    pub evictions: u64,
}

impl RelayStats {
    /// Takes the counts of rows read from `other` (an attempt that was dropped: what it read
    /// stays read, held in the caches for its next run). Not single tombstones: they are not
    /// held, so the next run reads them again, and counts them then.
    pub(crate) fn keep_reads(&mut self, other: &Self) {
        self.tombstone_sets_read = other.tombstone_sets_read;
        self.queues_read = other.queues_read;
        self.accounts_read = other.accounts_read;
        self.conversations_read = other.conversations_read;
        self.contacts_read = other.contacts_read;
        self.receipt_marks_read = other.receipt_marks_read;
    }
}

/// The reads ahead of parked frames, read with
/// [`Relay::prefetch`](crate::Relay::prefetch) (see [`Relay::read_ahead`](crate::Relay::read_ahead)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrefetchStats {
    /// Whether the relay reads ahead (a shell turned it on).
    pub on: bool,
    /// Frames waiting for a read, or queued behind one that is.
    pub parked_frames: usize,
    /// Connections with frames (or an upgrade) waiting.
    pub parked_conns: usize,
    /// HTTP requests and WebSocket upgrades waiting for a read.
    pub parked_requests: usize,
    /// What other shards sent waiting for a read, or queued behind what does.
    pub parked_crossings: usize,
    /// A step of the timed sweeps waits for a read.
    pub sweep_waiting: bool,
    /// Reads asked for and not yet reported.
    pub reads_pending: usize,
    /// Of those, the ones the shell has not polled yet.
    pub reads_queued: usize,
    /// Estimated heap of the rows read ahead and not yet used up.
    pub rows_held_bytes: usize,
}

/// The queued messages held in memory, read with
/// [`Relay::queue_cache`](crate::Relay::queue_cache) (the rest are in the store).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueCacheStats {
    /// Estimated heap of the queues in memory (bounded by `Config::queue_cache_bytes`, plus
    /// what synced recipients and the batches in flight hold).
    pub bytes: usize,
    /// Queues (one recipient, one conversation) in memory.
    pub queues: usize,
    /// Messages in those queues.
    pub messages: usize,
    /// Queues evicted since the relay was built.
    pub evictions: u64,
}

/// The accounts held in memory, read with [`Relay::account_cache`](crate::Relay::account_cache)
/// (the rest are in the store).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AccountCacheStats {
    /// Estimated heap of the accounts in memory (bounded by `Config::account_cache_bytes`,
    /// plus what the batches in flight pinned).
    pub bytes: usize,
    /// Accounts in memory.
    pub accounts: usize,
    /// Accounts evicted since the relay was built.
    pub evictions: u64,
}

/// The conversations and contact lists held in memory, read with
/// [`Relay::relation_cache`](crate::Relay::relation_cache) (the rest are in the store).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RelationCacheStats {
    /// Estimated heap of the conversations in memory (bounded by
    /// `Config::conversation_cache_bytes`, plus what the batches in flight pinned).
    pub conversation_bytes: usize,
    /// Conversations in memory.
    pub conversations: usize,
    /// Estimated heap of the contact lists in memory (bounded by `Config::contact_cache_bytes`,
    /// plus what the batches in flight pinned).
    pub contact_bytes: usize,
    /// Users whose contact lists are in memory.
    pub contact_lists: usize,
    /// Conversations and contact lists evicted since the relay was built.
    pub evictions: u64,
}

/// Payment webhooks by outcome.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WebhookStats {
    /// Verified and applied (a payment recorded; an order may have been confirmed).
    pub applied: u64,
    /// Verified exact replays, or reports after the payment finished: answered 200, nothing
    /// changed.
    pub duplicate: u64,
    /// Missing or wrong signature: 401.
    pub bad_signature: u64,
    /// Signed but malformed or contradicting an earlier report: 400.
    pub invalid: u64,
    /// Signed, for an order the relay does not know: 404.
    pub unknown_order: u64,
    /// Applied, but the money cannot buy anything (paid after the order expired and what it
    /// bought went to someone else, or a second payment of an order already confirmed): the
    /// order is marked `refund_needed` and an operator must refund the payment.
    pub refund_needed: u64,
}
