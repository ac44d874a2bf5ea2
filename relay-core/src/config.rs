//! Relay configuration.

use crate::limits;

/// Tunables of a [`crate::Relay`]. `Config::default()` is the production configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// PoW difficulty in leading zero hex nibbles (0 disables PoW checking).
    pub pow_difficulty: u32,
    /// Registrations per client address per hour.
    pub registrations_per_hour_per_addr: u32,
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
    /// Messages in flight per connection per conversation.
    pub max_sync_batch: usize,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            pow_difficulty: limits::POW_DIFFICULTY,
            registrations_per_hour_per_addr: limits::REGISTRATIONS_PER_HOUR_PER_ADDR,
            jwt_ttl_ms: limits::JWT_TTL_MS,
            offline_ttl_ms: limits::OFFLINE_TTL_MS,
            idle_timeout_ms: limits::IDLE_TIMEOUT_MS,
            msgs_per_min_per_user: limits::MAX_MSGS_PER_MIN_PER_USER,
            max_offline_queue_per_conversation: limits::MAX_OFFLINE_QUEUE_PER_CONVERSATION,
            max_sync_batch: limits::MAX_SYNC_BATCH,
        }
    }
}
