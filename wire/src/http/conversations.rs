//! Conversations and storage (PROTOCOL.md §1.3).

use serde::{Deserialize, Serialize};

use crate::ids::ConvId;

/// C1 element.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActiveConversation {
    /// The conversation.
    pub conv_id: ConvId,
}

/// C1 response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActiveConversations {
    /// The caller's conversations (accepted friendships).
    pub conversations: Vec<ActiveConversation>,
}

/// C2 response: what the relay holds for the caller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StorageEstimate {
    /// Bytes of undelivered payloads and media held for the caller.
    pub used_bytes: u64,
    /// The caller's limit.
    pub quota_bytes: u64,
    /// Undelivered messages held for the caller.
    pub message_count: u64,
}
