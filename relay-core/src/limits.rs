//! Every limit of the relay, as a named constant with its unit. Where a value is configurable
//! the constant is the default of the matching `Config` field.

/// Length of one rate-limit window.
pub const MINUTE_MS: u64 = 60_000;
/// One hour.
pub const HOUR_MS: u64 = 60 * MINUTE_MS;

/// New (non-duplicate) `msg` frames per user per minute; excess: error frame `RATE_LIMITED`, no ack.
pub const MAX_MSGS_PER_MIN_PER_USER: u32 = 120;
/// `typing` frames per user per minute; excess silently dropped.
pub const MAX_TYPING_PER_MIN_PER_USER: u32 = 30;
/// Sustained inbound WebSocket frames per connection per minute (`Config::frames_per_min_per_conn`):
/// the refill rate of the connection's frame budget, a token bucket of
/// [`MAX_FRAME_BURST_PER_CONN`] frames. Every text or binary frame costs one token **before it is
/// decoded** (malformed, oversized and unknown frames included); a `delivered`/`read` that
/// releases messages pushed to the connection gets its token back (a client may answer every
/// pushed `msg`). With no token left the relay stops answering and closes the socket
/// ([`crate::CloseReason::RateLimited`]). The budget belongs to the account (it has one live
/// connection), so reconnecting does not refill it.
pub const MAX_FRAMES_PER_MIN_PER_CONN: u32 = 600;
/// Capacity of a connection's frame budget, in frames (`Config::frame_burst_per_conn`): what a
/// client may send at once, e.g. the web client re-sending every message of its last session
/// on reconnect (PROTOCOL.md §5.2).
pub const MAX_FRAME_BURST_PER_CONN: u32 = 2_000;
/// `Retry-After` of a 429 whose limiter cannot say when it frees up, in seconds.
pub const DEFAULT_RETRY_AFTER_S: u64 = 60;
/// Successful registrations per client address per hour; excess: 429 `RATE_LIMITED`.
pub const REGISTRATIONS_PER_HOUR_PER_ADDR: u32 = 10;
/// PoW challenges per client address per minute; excess: 429 `RATE_LIMITED`.
pub const POW_CHALLENGES_PER_MIN_PER_ADDR: u32 = 60;
/// Auth challenges per account per minute; excess: 429 `RATE_LIMITED`.
pub const AUTH_CHALLENGES_PER_MIN_PER_USER: u32 = 30;

/// A request budget: a token bucket of `burst` requests, refilled at `per_window` requests
/// per `window_ms` (fractions kept). A request past it: 429 `RATE_LIMITED` with `Retry-After`
/// = the seconds until the next token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Requests allowed at once.
    pub burst: u32,
    /// Requests refilled per window.
    pub per_window: u32,
    /// The refill window, in ms.
    pub window_ms: u64,
}

/// `GET /api/v1/users/{alias}` per account (`Config::lookups`): 30 at once, 120 per hour.
/// Aliases are `u` + 8 digits, so enumerating them takes ~830,000 account-hours.
pub const USER_LOOKUPS: Budget = Budget {
    burst: 30,
    per_window: 120,
    window_ms: HOUR_MS,
};
/// `GET /api/v1/users/{alias}` per client network (`Config::lookups_per_network`), on top of
/// the account's budget: twice one account's (60 at once, 240 per hour), so that a household
/// behind one address is not cornered while accounts registered from one network (10 an hour
/// each) do not multiply the budget.
pub const USER_LOOKUPS_PER_NETWORK: Budget = Budget {
    burst: 60,
    per_window: 240,
    window_ms: HOUR_MS,
};
/// `POST /api/v1/friends/request` per account (`Config::friend_requests`): 50 at once, 60 per
/// hour.
pub const FRIEND_REQUESTS: Budget = Budget {
    burst: 50,
    per_window: 60,
    window_ms: HOUR_MS,
};
/// Every other authenticated route per account (`Config::account_requests`): 600 at once,
/// 600 per minute.
pub const ACCOUNT_REQUESTS: Budget = Budget {
    burst: 600,
    per_window: 600,
    window_ms: MINUTE_MS,
};
/// Unauthenticated routes without a limit of their own (vanity search and reserve, order
/// status) per client address (`Config::public_requests`): 600 at once, 600 per minute.
pub const PUBLIC_REQUESTS_PER_ADDR: Budget = Budget {
    burst: 600,
    per_window: 600,
    window_ms: MINUTE_MS,
};

/// Default PoW difficulty in leading zero hex nibbles of SHA-256.
pub const POW_DIFFICULTY: u32 = 4;
/// Highest accepted configured difficulty (64 nibbles = the whole digest).
pub const MAX_POW_DIFFICULTY: u32 = 64;
/// Lifetime of a PoW challenge.
pub const POW_CHALLENGE_TTL_MS: u64 = 300_000;
/// Outstanding PoW challenges kept; when full the oldest is evicted.
pub const MAX_PENDING_POW_CHALLENGES: usize = 100_000;
/// Longest accepted `pow_nonce` (the reference clients send at most 8 decimal digits).
pub const MAX_POW_NONCE_BYTES: usize = 64;

/// Lifetime of an auth challenge.
pub const AUTH_CHALLENGE_TTL_MS: u64 = 120_000;
/// Default JWT lifetime.
pub const JWT_TTL_MS: u64 = 24 * HOUR_MS;
/// Lifetime of a WebSocket ticket.
pub const WS_TICKET_TTL_MS: u64 = 30_000;
/// Used auth challenges and tickets remembered per account (each until it expires: a ticket
/// after 30 s, a challenge after two minutes; ~150 bytes each in memory, one row in the store).
/// When an account's are this many, its next login or ticket upgrade is refused with 429 until
/// one expires: a used one is never forgotten early, and no account's use refuses another's.
/// An honest client spends one ticket per connection and one challenge per login: 64 allows a
/// reconnect every half second for a ticket's whole lifetime.
pub const MAX_SPENT_CREDENTIALS_PER_ACCOUNT: usize = 64;
/// Longest accepted bearer token / ticket string.
pub const MAX_TOKEN_BYTES: usize = 4096;

/// Longest nickname: `wire::limits::NICKNAME_MAX_CHARS` (32), counted after NFC
/// normalisation. Bodies: `wire::limits::MAX_JSON_BODY_BYTES`
/// (32 KiB, 413). Frames: `wire::limits::MAX_FRAME_BYTES` (64 KiB) and `MAX_MSG_PAYLOAD_BYTES` (48 KiB).
///
/// Shortest nickname (after trimming), in Unicode scalar values.
pub const MIN_NICKNAME_CHARS: usize = 1;
/// Combining marks allowed in a row after one base character in a nickname (enough for every
/// script's stacked diacritics; more is "Zalgo" text that covers its neighbours).
pub const MAX_NICKNAME_COMBINING_MARKS: usize = 4;
/// Attempts at drawing an unused `u` + 8 digits alias before giving up with 503.
pub const ALIAS_ATTEMPTS: u32 = 64;

/// Former aliases an account keeps (`AccountRow::former_aliases`): a message addressed to one
/// of them is taken on every shard. Past it, the oldest is forgotten there (the registry shard
/// still routes it, from its alias table).
pub const MAX_FORMER_ALIASES: usize = 16;

/// How long an undelivered message is kept for its recipient.
pub const OFFLINE_TTL_MS: u64 = 24 * HOUR_MS;
/// Undelivered messages per (recipient, conversation); when full: error frame `QUEUE_FULL`
/// to the sender and **no ack**, so the sender's outbox retries later.
pub const MAX_OFFLINE_QUEUE_PER_CONVERSATION: usize = 1_000;
/// Bytes one sender may have queued in one conversation (`Config::max_offline_queue_bytes_per_conversation`):
/// its share of the other member's queue. When full: error frame `QUEUE_FULL`, no ack.
pub const MAX_OFFLINE_QUEUE_BYTES_PER_CONVERSATION: u64 = 2 * 1024 * 1024;
/// Undelivered messages per recipient over all its conversations
/// (`Config::max_offline_queue_per_recipient`). When full: error frame `RECIPIENT_QUEUE_FULL`
/// to the sender, no ack.
pub const MAX_OFFLINE_QUEUE_PER_RECIPIENT: usize = 20_000;
/// Bytes queued per recipient over all its conversations
/// (`Config::max_offline_queue_bytes_per_recipient`). When full: `RECIPIENT_QUEUE_FULL`.
pub const MAX_OFFLINE_QUEUE_BYTES_PER_RECIPIENT: u64 = 32 * 1024 * 1024;
/// Bytes one sender may have queued over all its recipients
/// (`Config::max_offline_queue_bytes_per_sender`). When full: error frame `SENDER_QUEUE_FULL`,
/// no ack. What an attacker's accounts can park is this times their number.
pub const MAX_OFFLINE_QUEUE_BYTES_PER_SENDER: u64 = 4 * 1024 * 1024;
/// Bytes queued over every recipient (`Config::max_offline_queue_bytes_total`). When full:
/// error frame `RELAY_QUEUE_FULL`, no ack. A relay of several shards splits it: each shard
/// decides at most its share (`crate::handoff::total_share`), which holds the total exactly.
/// (The other bounds are kept by each conversation's owner shard from what the recipient's
/// shard reports, `crate::handoff::Views`: a conversation's exactly; a recipient's backlog and
/// a sender's bytes, shared by several owners, may be passed by what the other owners had in
/// flight at the same moment.)
pub const MAX_OFFLINE_QUEUE_BYTES_TOTAL: u64 = 1024 * 1024 * 1024;
/// What a queued message costs besides its payload and id, in bytes: an estimate of the
/// relay's heap per queued message (queue slot, expiry timer, row bookkeeping).
pub const QUEUED_MESSAGE_OVERHEAD_BYTES: u64 = 256;

/// The bytes a queued message counts against the queue bounds.
pub const fn queued_message_bytes(id_bytes: usize, payload_bytes: usize) -> u64 {
    (id_bytes + payload_bytes) as u64 + QUEUED_MESSAGE_OVERHEAD_BYTES
}

/// How long a message id is remembered after its message was accepted (dedup and retract
/// authorisation). Longer than `OFFLINE_TTL_MS` so a resend-on-reconnect (D-TS-2) after the
/// message was delivered still gets the original seq.
pub const TOMBSTONE_TTL_MS: u64 = 7 * 24 * HOUR_MS;
/// Estimated heap for the message-id tombstones held in memory (whole sets of recently active
/// conversations; the rest are read from the store when needed, see `Config::tombstone_cache_bytes`).
/// At ~150 bytes per tombstone, 64 MiB holds ~440,000 of them.
pub const TOMBSTONE_CACHE_BYTES: usize = 64 * 1024 * 1024;
/// The smallest stored tombstone set of one conversation read by row rather than whole: a set
/// heavier than an eighth of the tombstone cache, and than this, is never held (the
/// conversation's ids are then read one row at a time). At ~155 bytes per tombstone, ~420 of them; a relay
/// without a cache still reads such small sets whole (`Config::tombstone_set_by_row_min_bytes`).
pub const TOMBSTONE_SET_BY_ROW_MIN_BYTES: usize = 64 * 1024;
/// The most rows of one conversation's stored tombstones read to hold the set whole: a
/// conversation with more is read by row (its set is never read whole). Bounds what one cold
/// conversation's first `msg` reads and decodes: ~4,000 rows (~0.6 MB), not the million a sender within the default
/// rate limit can leave in a week.
pub const TOMBSTONE_SET_READ_MAX_ROWS: usize = 4096;
/// Estimated heap for the queued messages held in memory (whole queues of one recipient in one
/// conversation; the rest are read from the store when needed, see
/// `Config::queue_cache_bytes`). The queues of synced recipients and those written by batches
/// not yet durable are held beyond it. Counted as the queue bounds count messages
/// ([`queued_message_bytes`]), so 64 MiB holds e.g. ~50,000 messages of 1 KiB.
pub const QUEUE_CACHE_BYTES: usize = 64 * 1024 * 1024;
/// Estimated heap for the accounts held in memory (each with its alias and keys for lookups;
/// the rest are read from the store when needed, see `Config::account_cache_bytes`). The
/// accounts written by batches not yet durable are held beyond it. At ~1,250 bytes per account,
/// 64 MiB holds ~50,000 of them.
pub const ACCOUNT_CACHE_BYTES: usize = 64 * 1024 * 1024;
/// Estimated heap for the conversations held in memory (members and seq counters; the rest are
/// read from the store when needed, see `Config::conversation_cache_bytes`). The conversations
/// written by batches not yet durable are held beyond it. At ~470 bytes per conversation,
/// 32 MiB holds ~70,000 of them.
pub const CONVERSATION_CACHE_BYTES: usize = 32 * 1024 * 1024;
/// Estimated heap for the users' contact lists held in memory (see
/// `Config::contact_cache_bytes`). At ~360 bytes for a list plus ~260 per friendship in it,
/// 32 MiB holds the lists of ~11,000 users of 10 contacts.
pub const CONTACT_CACHE_BYTES: usize = 32 * 1024 * 1024;
/// Stored accounts (or friendships) read per page by the one-time indexing start of a store
/// written before the accounts had their lookup rows (`account_index`), or the friendships
/// their rows per member (`contacts`).
pub const INDEX_PAGE_ROWS: usize = 10_000;
/// When reading a queue for its expiry failed, how long until the relay tries again.
pub const QUEUE_READ_RETRY_MS: u64 = 1_000;
/// Due queues read per page by the expiry sweep (their keys, from the store's index on the
/// queue index's expiry): a sweep's reads per `handle_timeout`, however many expire at once
/// (`Config::expiry_page_rows`).
pub const EXPIRY_PAGE_ROWS: usize = 128;
/// Messages the expiry sweep deletes per `handle_timeout` at most (it stops after the queue
/// that reaches it, and goes on after that queue next time): its work and batch per step,
/// however full the due queues (`Config::expiry_page_messages`).
pub const EXPIRY_PAGE_MESSAGES: usize = 2_048;
/// Bytes of due queues (by their index entries) the expiry sweep asks for in one read when the
/// next queue it handles is not in memory: that queue and the page's next ones not in memory
/// are read together off the relay's task (one read handed to the shell, the queues taken from
/// it one by one), so a page of cold queues costs a few reads, not one round trip each.
pub const EXPIRY_READ_BYTES: u64 = 4 * 1024 * 1024;
/// After a full page the sweep goes on this much later: a shell that fires a due deadline
/// before it reads its inputs still handles them between pages, however long the sweep.
pub const EXPIRY_PAGE_PAUSE_MS: u64 = 1;
/// Stored messages read per page by the one-time summarising start of a store written before
/// the queue index (`queue_index`) existed: its memory is one page and the summaries, not the
/// whole table.
pub const SUMMARISE_PAGE_ROWS: usize = 10_000;
/// How often, at most, expired tombstone rows are deleted from the store (one range delete;
/// lookups ignore an expired tombstone at once, so this only bounds how long its row lingers).
pub const TOMBSTONE_SWEEP_MS: u64 = MINUTE_MS;
/// How often the registry shard of a sharded relay, which deletes every shard's expired
/// tombstone rows, looks for some when it knows of none due (the other shards write them).
pub const TOMBSTONE_COLLECT_MS: u64 = 10 * MINUTE_MS;
/// Messages pushed on one connection (across all its conversations) and not yet released by a
/// `delivered`/`read` (`Config::sync_window_msgs`); the rest wait until receipts open the window.
/// A shell's outbound queue must hold at least twice this many frames.
pub const SYNC_WINDOW_MSGS: usize = 200;
/// Bytes of `msg` frames (as [`msg_frame_bytes`] bounds them) pushed on one connection and not
/// yet released (`Config::sync_window_bytes`). A message is pushed only when it fits, except
/// that one message may always be in flight. A shell's outbound buffer must hold at least
/// twice this many bytes, so the relay's own replay never overflows it.
pub const SYNC_WINDOW_BYTES: usize = 512 * 1024;
/// Messages per page of a queue read for delivery (`Config::queue_page_msgs`): a synced
/// recipient's queue is held in memory from its oldest message as far as pages were read, and
/// the next page is read (before the frame that needs it runs) when less than half a page of
/// what was not pushed yet is left. A window's worth, so one page fills an empty window.
pub const QUEUE_PAGE_MSGS: usize = SYNC_WINDOW_MSGS;
/// Bytes per page of a queue read for delivery, about (`Config::queue_page_bytes`; the page
/// takes as many rows as the mean message of the part not read makes this).
pub const QUEUE_PAGE_BYTES: usize = SYNC_WINDOW_BYTES;
/// Upper bound of the bytes a server `msg` frame adds to its `id`, `conv_id` and `payload`
/// (keys, `type`, the sender's alias, `seq`, `at`, `crypto_v`, quotes and commas).
pub const MSG_FRAME_OVERHEAD_BYTES: usize = 192;

/// Upper bound of the encoded size of a server `msg` frame with these variable parts, in bytes.
pub const fn msg_frame_bytes(id_bytes: usize, conv_id_bytes: usize, payload_bytes: usize) -> usize {
    id_bytes + conv_id_bytes + payload_bytes + MSG_FRAME_OVERHEAD_BYTES
}

/// A connection with no inbound frame for this long is closed (clients ping every 25-30 s).
pub const IDLE_TIMEOUT_MS: u64 = 90_000;

/// Entries of a rate-limiter table before expired windows are swept.
pub const RATE_LIMITER_SWEEP_AT: usize = 10_000;
/// Outstanding PoW challenges per client address; a new one evicts the oldest.
pub const MAX_POW_CHALLENGES_PER_ADDR: usize = 8;

// ---- commerce (channels, vanity aliases, payment orders; see NOTES.md "Commerce")

/// Channels an account may create for free (`Config::free_channel_quota`); each confirmed
/// quota purchase adds one seat.
pub const FREE_CHANNEL_QUOTA: u32 = 3;
/// Price of one extra channel-creation seat.
pub const QUOTA_PRICE_USDT: u64 = 5;
/// Channel search (CH1) results per request.
pub const MAX_CHANNELS_SEARCH_RESULTS: usize = 50;
/// Longest accepted search text (CH1, V1), in bytes; longer: 400 `INVALID_FIELD`.
pub const MAX_SEARCH_QUERY_BYTES: usize = 64;
/// Default page of post history (CH8).
pub const POSTS_PAGE_DEFAULT: usize = 50;
/// Largest page of post history (CH8); a larger `limit` is capped.
pub const POSTS_PAGE_MAX: usize = 200;
/// Channels listed by `channels/mine` (owned + subscribed), oldest first.
pub const MAX_CHANNELS_MINE: usize = 1_000;
/// Vanity search (V1) results per request.
pub const VANITY_SEARCH_MAX_RESULTS: usize = 50;
/// How long a vanity purchase holds its alias (the order's lifetime).
pub const ALIAS_HOLD_MS: u64 = 15 * MINUTE_MS;
/// Unpaid vanity holds (pending orders) one account may have at once
/// (`Config::vanity_holds_per_account`); the next purchase gets 429 `RATE_LIMITED` until one
/// lapses or is paid.
pub const VANITY_HOLDS_PER_ACCOUNT: usize = 3;
/// Unpaid vanity holds one client network may have at once, purchases and reserves together
/// (`Config::vanity_holds_per_network`; memory only, so a restart forgets whose they were).
pub const VANITY_HOLDS_PER_NETWORK: usize = 10;
/// After a hold lapses unpaid, neither its account nor its network may hold that alias again
/// for this long: a hold is never renewed by its holder past its lifetime (memory only).
pub const VANITY_REHOLD_COOLDOWN_MS: u64 = ALIAS_HOLD_MS;
/// How long an order that is over (expired unpaid, or confirmed and fully used) is kept, then
/// deleted from memory and the store (`Config::order_retention_ms`); its status is then 404.
/// Orders owing a refund and paid vanity orders not yet bound are kept until that changes.
pub const ORDER_RETENTION_MS: u64 = 7 * 24 * HOUR_MS;
/// Lifetime of a channel trade or quota order.
pub const CHANNEL_ORDER_TTL_MS: u64 = 30 * MINUTE_MS;
/// Highest accepted price of a channel listing, in USDT.
pub const MAX_CHANNEL_PRICE_USDT: u64 = 1_000_000_000;
/// Longest accepted webhook `payment_id`, in bytes.
pub const MAX_PAYMENT_ID_BYTES: usize = 128;

// ---- media, push, calls (see NOTES.md "Media, push, calls"); part, object and part-count
// limits are `wire::limits::{MAX_MEDIA_PART_BYTES, MAX_MEDIA_OBJECT_BYTES, MAX_MEDIA_PARTS}`.

/// Media upload inits (M1) per user per minute; excess: 429 `RATE_LIMITED`.
pub const MEDIA_UPLOADS_PER_MIN_PER_USER: u32 = 10;
/// Unfinished uploads per account at once (a minute's inits); excess M1: 403 `QUOTA_EXCEEDED`.
pub const MAX_OPEN_UPLOADS_PER_USER: usize = 10;
/// Media bytes (unfinished uploads and completed objects) one account may hold: one object of
/// the largest size (about 100 MiB); excess M2: 403 `QUOTA_EXCEEDED`. `storage/estimate`
/// reports it plus the account's offline-queue bound
/// (`Config::max_offline_queue_bytes_per_recipient`) as `quota_bytes`, and everything held for
/// the account (its media, and the messages waiting for it as the queue bounds count them:
/// [`queued_message_bytes`]) as `used_bytes`, which therefore never passes `quota_bytes`.
pub const MAX_MEDIA_BYTES_PER_USER: u64 = wire::limits::MAX_MEDIA_OBJECT_BYTES;
/// Lifetime of a completed media object, from completion.
pub const MEDIA_TTL_MS: u64 = 24 * HOUR_MS;
/// Longest lifetime of an unfinished upload, from init, however busy.
pub const INCOMPLETE_UPLOAD_TTL_MS: u64 = 2 * HOUR_MS;
/// An unfinished upload that receives no part for this long is deleted with its parts (each
/// part, and the init, start it again; never past [`INCOMPLETE_UPLOAD_TTL_MS`]). A 5 MiB part
/// takes under two minutes at 50 KB/s.
pub const INCOMPLETE_UPLOAD_IDLE_MS: u64 = 10 * MINUTE_MS;
/// Push targets (subscriptions and tokens) per account; a new one evicts the oldest.
pub const MAX_PUSH_TARGETS_PER_USER: usize = 4;
/// Longest Web Push endpoint URL, in bytes.
pub const MAX_PUSH_ENDPOINT_BYTES: usize = 2048;
/// Longest native push token (FCM / APNs), in bytes.
pub const MAX_PUSH_TOKEN_BYTES: usize = 4096;
/// At most one push per recipient per this interval (a burst of messages makes one push).
pub const PUSH_MIN_INTERVAL_MS: u64 = 30_000;
/// Default lifetime of TURN credentials, in seconds.
pub const TURN_CREDENTIAL_TTL_S: u64 = 24 * 60 * 60;
/// Default STUN servers (the ones the reference apps fall back to).
pub const DEFAULT_STUN_URLS: [&str; 2] = [
    "stun:stun.l.google.com:19302",
    "stun:stun1.l.google.com:19302",
];
/// Call signals per connection per minute (ICE bursts are legitimate); excess: error frame
/// `RATE_LIMITED`, signal dropped.
pub const MAX_CALL_FRAMES_PER_MIN_PER_CONN: u32 = 300;
