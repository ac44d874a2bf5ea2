//! Relay configuration.

use crate::limits;

/// Tunables of a [`crate::Relay`]. `Config::default()` is the production configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// PoW difficulty in leading zero hex nibbles (0 disables PoW checking).
    pub pow_difficulty: u32,
    /// Registrations per client address per hour.
    pub registrations_per_hour_per_addr: u32,
    /// Unpaid vanity holds one account may have at once ([`limits::VANITY_HOLDS_PER_ACCOUNT`]).
    pub vanity_holds_per_account: usize,
    /// Unpaid vanity holds one client network may have at once
    /// ([`limits::VANITY_HOLDS_PER_NETWORK`]).
    pub vanity_holds_per_network: usize,
    /// How long an order that is over is kept ([`limits::ORDER_RETENTION_MS`]).
    pub order_retention_ms: u64,
    /// JWT lifetime in milliseconds.
    pub jwt_ttl_ms: u64,
    /// Undelivered message lifetime in milliseconds.
    pub offline_ttl_ms: u64,
    /// Idle timeout of a WebSocket in milliseconds.
    pub idle_timeout_ms: u64,
    /// New messages per user per minute.
    pub msgs_per_min_per_user: u32,
    /// Undelivered messages per (recipient, conversation).
    pub max_offline_queue_per_conversation: usize,
    /// Messages pushed to a connection and not yet released by a receipt, across all its
    /// conversations (the sync window; see `crate::limits::SYNC_WINDOW_MSGS`).
    pub sync_window_msgs: usize,
    /// Bytes of `msg` frames in the sync window (`crate::limits::SYNC_WINDOW_BYTES`).
    pub sync_window_bytes: usize,
    /// Messages per page of a synced recipient's queue read into memory, at most
    /// (`crate::limits::QUEUE_PAGE_MSGS`).
    pub queue_page_msgs: usize,
    /// Bytes per page of a synced recipient's queue read into memory, about
    /// (`crate::limits::QUEUE_PAGE_BYTES`).
    pub queue_page_bytes: usize,
    /// Sustained inbound frames per connection per minute (the refill of its frame budget).
    pub frames_per_min_per_conn: u32,
    /// Capacity of a connection's frame budget, in frames.
    pub frame_burst_per_conn: u32,
    /// The JWT signing key. `None`: derived from the relay's seed — for tests and simulations
    /// only (anyone who knows the seed can mint tokens); the `relay` binary keeps the key in a
    /// file of its own (mode 0600) and passes it here.
    pub jwt_signing_key: Option<JwtSigningKey>,
    /// Channels an account may create without buying seats.
    pub free_channel_quota: u32,
    /// The vanity aliases for sale (default: [`crate::pricing::default_catalog`]).
    pub vanity_catalog: Vec<wire::AliasId>,
    /// Base of the payment processor's hosted page; an order's `payment_url` is
    /// `{payment_page_base}/{order_id}`.
    pub payment_page_base: String,
    /// Shared secret of the payment webhook's HMAC-SHA256 signature (never logged).
    pub payment_webhook_secret: WebhookSecret,
    /// The VAPID public key (base64url, uncompressed P-256) returned by `push/vapid-key`;
    /// `None`: the documented placeholder [`crate::push::VAPID_KEY_PLACEHOLDER`].
    pub vapid_public_key: Option<String>,
    /// Which Web Push endpoints `push/subscribe` accepts ([`crate::destination`]): by default
    /// `https://` to public addresses only, names only with the addresses the shell resolved.
    /// A relay's **test mode** uses [`PushDestinations::permissive`](crate::destination::PushDestinations::permissive)
    /// (the conformance push probe and push-service stand-ins listen on plain HTTP on loopback
    /// or a simulated network). The shell's push transport must apply the same policy.
    pub push_destinations: crate::destination::PushDestinations,
    /// Undelivered messages one recipient may have queued over all its conversations.
    pub max_offline_queue_per_recipient: usize,
    /// Bytes (as [`crate::limits::queued_message_bytes`] counts them) one recipient may have
    /// queued over all its conversations.
    pub max_offline_queue_bytes_per_recipient: u64,
    /// Bytes one sender may have queued in one conversation, i.e. its share of the other
    /// member's queue.
    pub max_offline_queue_bytes_per_conversation: u64,
    /// Bytes one sender may have queued over all recipients.
    pub max_offline_queue_bytes_per_sender: u64,
    /// Bytes queued over every recipient: the relay's bound on undelivered messages (in the
    /// store; what is in memory is bounded by [`Config::queue_cache_bytes`]).
    pub max_offline_queue_bytes_total: u64,
    /// User lookups (`GET /api/v1/users/{alias}`) per account: burst and refill per hour.
    pub lookups: limits::Budget,
    /// User lookups per client network (the shell's key of the client's address), on top of
    /// [`Config::lookups`]: burst and refill per hour.
    pub lookups_per_network: limits::Budget,
    /// Friend requests per account: burst and refill per hour.
    pub friend_requests: limits::Budget,
    /// Every other authenticated route per account: burst and refill per minute.
    pub account_requests: limits::Budget,
    /// Unauthenticated routes (vanity search, reserve, order status) per client address: burst
    /// and refill per minute.
    pub public_requests: limits::Budget,
    /// STUN URLs returned by `calls/ice-config` (empty: none).
    pub stun_urls: Vec<String>,
    /// TURN URLs (`turn:` / `turns:`); TURN is offered only with these and `turn_secret`.
    pub turn_urls: Vec<String>,
    /// The TURN server's shared secret (coturn `static-auth-secret`; never logged).
    pub turn_secret: Option<TurnSecret>,
    /// Lifetime of TURN credentials, in seconds (also the `ttl` of `ice-config`).
    pub turn_ttl_s: u64,
    /// Used auth challenges and tickets remembered per account until they expire; when an
    /// account's are this many, its logins and ticket upgrades get 429 (see
    /// [`limits::MAX_SPENT_CREDENTIALS_PER_ACCOUNT`]).
    pub max_spent_credentials_per_account: usize,
    /// Estimated heap for message-id tombstones held in memory (see
    /// [`limits::TOMBSTONE_CACHE_BYTES`]); the sets of the least recently active conversations
    /// are evicted past it and read from the store again when needed. A conversation whose set
    /// outweighs an eighth of it (and [`limits::TOMBSTONE_SET_BY_ROW_MIN_BYTES`]) is read by
    /// row instead.
    pub tombstone_cache_bytes: usize,
    /// The smallest stored tombstone set of one conversation read by row rather than held whole,
    /// when an eighth of [`Config::tombstone_cache_bytes`] is smaller (see
    /// [`limits::TOMBSTONE_SET_BY_ROW_MIN_BYTES`]).
    pub tombstone_set_by_row_min_bytes: usize,
    /// Due queues the message expiry sweep reads per page (see [`limits::EXPIRY_PAGE_ROWS`]).
    pub expiry_page_rows: usize,
    /// Messages the expiry sweep deletes per step at most (see
    /// [`limits::EXPIRY_PAGE_MESSAGES`]).
    pub expiry_page_messages: usize,
    /// Estimated heap for queued messages held in memory (see
    /// [`limits::QUEUE_CACHE_BYTES`]); the queues of the least recently used conversations
    /// whose recipient is not synced are evicted past it and read from the store again when
    /// needed.
    pub queue_cache_bytes: usize,
    /// Estimated heap for accounts held in memory (see [`limits::ACCOUNT_CACHE_BYTES`]); the
    /// least recently used accounts are evicted past it and read from the store again when
    /// needed.
    pub account_cache_bytes: usize,
    /// Estimated heap for conversations (members and seq counters) held in memory (see
    /// [`limits::CONVERSATION_CACHE_BYTES`]); the least recently used are evicted past it and
    /// read from the store again when needed.
    pub conversation_cache_bytes: usize,
    /// Estimated heap for users' contact lists (their friendships) held in memory (see
    /// [`limits::CONTACT_CACHE_BYTES`]); the least recently used are evicted past it and read
    /// from the store again when needed.
    pub contact_cache_bytes: usize,
    /// The shard this relay core runs (`crate::handoff`): a message for a user of another
    /// shard leaves it as a hand-off. By default the one shard of a relay that is not sharded.
    pub shard: crate::handoff::ShardPlace,
    /// A defect to plant, for the simulator's detection test only (feature `planted-bugs`,
    /// which no production build enables; see [`crate::PlantedBug`]). `None` by default.
    #[cfg(feature = "planted-bugs")]
    pub planted_bug: Option<crate::PlantedBug>,
}

/// The payment webhook's shared secret; `Debug` never prints it.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct WebhookSecret(pub Vec<u8>);

impl std::fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WebhookSecret(<redacted>)")
    }
}

/// The shared secret of a TURN server (coturn `static-auth-secret`). `Debug` redacts it.
#[derive(Clone, PartialEq, Eq)]
pub struct TurnSecret(pub String);

impl std::fmt::Debug for TurnSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TurnSecret(<redacted>)")
    }
}

/// The 32-byte Ed25519 seed that signs the relay's JWTs; `Debug` never prints it.
#[derive(Clone, PartialEq, Eq)]
pub struct JwtSigningKey(pub [u8; 32]);

impl std::fmt::Debug for JwtSigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JwtSigningKey(<redacted>)")
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            pow_difficulty: limits::POW_DIFFICULTY,
            registrations_per_hour_per_addr: limits::REGISTRATIONS_PER_HOUR_PER_ADDR,
            vanity_holds_per_account: limits::VANITY_HOLDS_PER_ACCOUNT,
            vanity_holds_per_network: limits::VANITY_HOLDS_PER_NETWORK,
            order_retention_ms: limits::ORDER_RETENTION_MS,
            jwt_ttl_ms: limits::JWT_TTL_MS,
            offline_ttl_ms: limits::OFFLINE_TTL_MS,
            idle_timeout_ms: limits::IDLE_TIMEOUT_MS,
            msgs_per_min_per_user: limits::MAX_MSGS_PER_MIN_PER_USER,
            max_offline_queue_per_conversation: limits::MAX_OFFLINE_QUEUE_PER_CONVERSATION,
            sync_window_msgs: limits::SYNC_WINDOW_MSGS,
            sync_window_bytes: limits::SYNC_WINDOW_BYTES,
            queue_page_msgs: limits::QUEUE_PAGE_MSGS,
            queue_page_bytes: limits::QUEUE_PAGE_BYTES,
            frames_per_min_per_conn: limits::MAX_FRAMES_PER_MIN_PER_CONN,
            frame_burst_per_conn: limits::MAX_FRAME_BURST_PER_CONN,
            jwt_signing_key: None,
            free_channel_quota: limits::FREE_CHANNEL_QUOTA,
            vanity_catalog: crate::pricing::default_catalog(),
            payment_page_base: String::from("https://pay.securechat.invalid/checkout"),
            payment_webhook_secret: WebhookSecret::default(),
            vapid_public_key: None,
            push_destinations: crate::destination::PushDestinations::default(),
            max_offline_queue_per_recipient: limits::MAX_OFFLINE_QUEUE_PER_RECIPIENT,
            max_offline_queue_bytes_per_recipient: limits::MAX_OFFLINE_QUEUE_BYTES_PER_RECIPIENT,
            max_offline_queue_bytes_per_conversation:
                limits::MAX_OFFLINE_QUEUE_BYTES_PER_CONVERSATION,
            max_offline_queue_bytes_per_sender: limits::MAX_OFFLINE_QUEUE_BYTES_PER_SENDER,
            max_offline_queue_bytes_total: limits::MAX_OFFLINE_QUEUE_BYTES_TOTAL,
            lookups: limits::USER_LOOKUPS,
            lookups_per_network: limits::USER_LOOKUPS_PER_NETWORK,
            friend_requests: limits::FRIEND_REQUESTS,
            account_requests: limits::ACCOUNT_REQUESTS,
            public_requests: limits::PUBLIC_REQUESTS_PER_ADDR,
            stun_urls: limits::DEFAULT_STUN_URLS
                .iter()
                .map(|u| (*u).to_owned())
                .collect(),
            turn_urls: Vec::new(),
            turn_secret: None,
            turn_ttl_s: limits::TURN_CREDENTIAL_TTL_S,
            max_spent_credentials_per_account: limits::MAX_SPENT_CREDENTIALS_PER_ACCOUNT,
            tombstone_cache_bytes: limits::TOMBSTONE_CACHE_BYTES,
            tombstone_set_by_row_min_bytes: limits::TOMBSTONE_SET_BY_ROW_MIN_BYTES,
            expiry_page_rows: limits::EXPIRY_PAGE_ROWS,
            expiry_page_messages: limits::EXPIRY_PAGE_MESSAGES,
            queue_cache_bytes: limits::QUEUE_CACHE_BYTES,
            account_cache_bytes: limits::ACCOUNT_CACHE_BYTES,
            conversation_cache_bytes: limits::CONVERSATION_CACHE_BYTES,
            contact_cache_bytes: limits::CONTACT_CACHE_BYTES,
            shard: crate::handoff::ShardPlace::single(),
            #[cfg(feature = "planted-bugs")]
            planted_bug: None,
        }
    }
}
