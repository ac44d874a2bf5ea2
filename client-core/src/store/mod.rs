//! Local persistent records (SPEC "Locally persisted records") behind the [`ClientStore`] trait,
//! with an in-memory ([`MemoryStore`]) and a durable SQLite ([`SqliteStore`]) implementation.
//!
//! Records serialise with the spec's camelCase field names. Additions beyond the spec, needed for
//! the guarantees of this client: `StoredIdentity.x25519Path`, `OutboxIntent.attempts`,
//! `OfflineMessage.id` and `.fromAliasId` (the offline inbox is keyed by message id so two
//! parked messages without `seq` never collide), `SessionRecord.pendingEcdhPublicKey` (a changed
//! key announced by the server for a verified session, kept aside and never applied silently),
//! `SessionRecord.formerAliasIds` (the peer's earlier aliases in the conversation),
//! and the records [`ReceiptLevel`] and [`PendingAction`] (receipts seen before their ack;
//! `read`/`retract` queued offline), and the set of confirmed order ids already reported to the
//! app (`payment_confirmed` is redelivered by the relay; the app sees one per order).
//!
//! Every method that stores or reads records is required: a backend that silently forgot a
//! record would break the machine's guarantees across a restart, so there are no
//! "not persisted" defaults. Only helpers derived from other methods have default bodies
//! ([`ClientStore::has_offline`], [`ClientStore::count_offline`],
//! [`ClientStore::mark_session_verified`], [`ClientStore::export_conversation`]); a backend may
//! override them with a faster equivalent. The shared suite ([`conformance`], run with
//! [`client_store_tests!`](crate::client_store_tests)) checks every backend.
//!
//! History order is `(time, id)` ascending everywhere. [`ClientStore::export_conversation`]
//! writes NDJSON: one [`StoredMessage`] JSON object per line (fields `id`, `conversationId`,
//! `text`, `isMe`, `time`, `status`, and when present `msgType`, `mediaUrl`, `caption`, `seq`,
//! `fromAliasId`, `replyToId`), conversations in id order, each in history order, `\n` after
//! every line.

pub mod conformance;
mod memory;
mod sqlite;

pub use memory::MemoryStore;
pub use sqlite::{SCHEMA_VERSION, SqliteStore};

use serde::{Deserialize, Serialize};

use crate::keys::{SecretString, X25519Path};
use crate::security::TrustRecord;

impl Serialize for SecretString {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.expose())
    }
}

impl<'de> Deserialize<'de> for SecretString {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Self::new)
    }
}

/// The one stored identity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredIdentity {
    /// Account uuid.
    pub uuid: String,
    /// Current alias id.
    pub alias_id: String,
    /// Nickname.
    pub nickname: String,
    /// The mnemonic (secret).
    pub mnemonic: SecretString,
    /// Ed25519 public key, base64.
    pub signing_public_key: String,
    /// X25519 public key, base64.
    pub ecdh_public_key: String,
    /// Which X25519 path the account uses.
    #[serde(default)]
    pub x25519_path: X25519PathRecord,
}

/// Serialisable form of [`X25519Path`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum X25519PathRecord {
    /// The spec path.
    #[default]
    Spec,
    /// The web client's path.
    WebSdk,
}

impl From<X25519Path> for X25519PathRecord {
    fn from(p: X25519Path) -> Self {
        match p {
            X25519Path::Spec => Self::Spec,
            X25519Path::WebSdk => Self::WebSdk,
        }
    }
}

impl From<X25519PathRecord> for X25519Path {
    fn from(p: X25519PathRecord) -> Self {
        match p {
            X25519PathRecord::Spec => Self::Spec,
            X25519PathRecord::WebSdk => Self::WebSdk,
        }
    }
}

/// Trust state stored on a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionTrust {
    /// Not verified.
    #[default]
    Unverified,
    /// Verified.
    Verified,
}

/// A conversation's secure session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionRecord {
    /// Conversation id (server-assigned).
    pub conversation_id: String,
    /// Peer alias.
    pub their_alias_id: String,
    /// Peer X25519 public key, base64.
    pub their_ecdh_public_key: String,
    /// Peer Ed25519 public key, base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub their_ed25519_public_key: Option<String>,
    /// Session key, base64 (secret).
    pub session_key_base64: SecretString,
    /// Trust state.
    pub trust_state: SessionTrust,
    /// Creation time, epoch ms.
    pub created_at: u64,
    /// A different X25519 key the server now reports, not applied (see module doc).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_ecdh_public_key: Option<String>,
    /// The peer's earlier aliases in this conversation, oldest first, at most
    /// [`SessionRecord::FORMER_ALIASES_MAX`]. A relay may deliver what the peer queued before
    /// binding a vanity alias under the alias it was sent from; those messages are the peer's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub former_alias_ids: Vec<String>,
}

impl SessionRecord {
    /// Most earlier aliases a session remembers (the oldest is forgotten first).
    pub const FORMER_ALIASES_MAX: usize = 8;

    /// Whether `alias` is the peer's, now or earlier in this conversation.
    #[must_use]
    pub fn is_peer_alias(&self, alias: &str) -> bool {
        self.their_alias_id == alias || self.former_alias_ids.iter().any(|a| a == alias)
    }

    /// Remembers `alias` as one of the peer's earlier aliases (not the current one).
    pub fn remember_former_alias(&mut self, alias: &str) {
        if alias == self.their_alias_id || self.former_alias_ids.iter().any(|a| a == alias) {
            return;
        }
        if self.former_alias_ids.len() == Self::FORMER_ALIASES_MAX {
            self.former_alias_ids.remove(0);
        }
        self.former_alias_ids.push(alias.to_owned());
    }
}

/// An undecryptable or early message parked for retry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OfflineMessage {
    /// Message id (the key of the inbox).
    pub id: String,
    /// Conversation id.
    pub conversation_id: String,
    /// Relay seq (0 when absent).
    pub seq: u64,
    /// The encrypted payload as received.
    pub payload_encrypted: String,
    /// Relay time `at`, epoch ms.
    pub created_at: u64,
    /// Sender alias.
    #[serde(default)]
    pub from_alias_id: String,
}

/// Status of a stored message, ordered `sending < sent < delivered < read`; `failed` only from `sending`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MessageStatus {
    /// Queued, not acknowledged.
    Sending,
    /// Acknowledged by the relay.
    Sent,
    /// Delivered to the peer.
    Delivered,
    /// Read by the peer.
    Read,
    /// Gave up sending.
    Failed,
}

impl MessageStatus {
    /// Wire/string form.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sending => "sending",
            Self::Sent => "sent",
            Self::Delivered => "delivered",
            Self::Read => "read",
            Self::Failed => "failed",
        }
    }

    fn rank(self) -> Option<u8> {
        match self {
            Self::Sending => Some(0),
            Self::Sent => Some(1),
            Self::Delivered => Some(2),
            Self::Read => Some(3),
            Self::Failed => None,
        }
    }

    /// Whether `self -> next` is allowed: strictly up the order, or `sending -> failed`.
    pub fn can_advance_to(self, next: Self) -> bool {
        match (self.rank(), next.rank()) {
            (Some(a), Some(b)) => b > a,
            (Some(0), None) => true,
            _ => false,
        }
    }
}

/// A message in local history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredMessage {
    /// Message id.
    pub id: String,
    /// Conversation id.
    pub conversation_id: String,
    /// Display text (plaintext content; media strings for media).
    pub text: String,
    /// Sent by us.
    pub is_me: bool,
    /// Time, epoch ms.
    pub time: u64,
    /// Status.
    pub status: MessageStatus,
    /// `retracted`, `image`, `file`, `voice`, or absent for text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub msg_type: Option<String>,
    /// Media key for media messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_url: Option<String>,
    /// Caption (file name for files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caption: Option<String>,
    /// Relay seq.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// Sender alias (inbound).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_alias_id: Option<String>,
    /// Id of the message replied to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_to_id: Option<String>,
}

/// An outgoing message kept until the relay acknowledges it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutboxIntent {
    /// Message id (re-sent unchanged).
    pub internal_id: String,
    /// Conversation id.
    pub conversation_id: String,
    /// Recipient alias.
    pub to_alias_id: String,
    /// Plaintext to encrypt (already reply-wrapped).
    pub text: String,
    /// When queued, epoch ms.
    pub added_at: u64,
    /// Id of the message replied to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_to_id: Option<String>,
    /// Times the frame was handed to a socket.
    #[serde(default)]
    pub attempts: u32,
}

/// The highest receipts of a conversation seen so far (`delivered`/`read` up to a seq). Kept so
/// a receipt that arrives before the relay's `ack` of an own message still applies when the ack
/// lands, across a restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReceiptLevelSeqs {
    /// Highest `delivered` (or `read`, which implies it) seq.
    pub delivered_seq: u64,
    /// Highest `read` seq.
    pub read_seq: u64,
}

/// [`ReceiptLevelSeqs`] of one conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReceiptLevel {
    /// Conversation id.
    pub conversation_id: String,
    /// The levels.
    #[serde(flatten)]
    pub seqs: ReceiptLevelSeqs,
}

/// A control frame queued while the socket was closed, sent in `order` after the next `sync`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingAction {
    /// Queue position; ascending is send order.
    pub order: u64,
    /// Conversation id.
    pub conversation_id: String,
    /// Recipient alias.
    pub to_alias_id: String,
    /// When queued, epoch ms.
    pub added_at: u64,
    /// What to send.
    pub kind: PendingActionKind,
}

/// The frame a [`PendingAction`] sends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum PendingActionKind {
    /// `read` up to `seq` (one per conversation: only the highest is kept).
    Read {
        /// Highest peer seq read.
        seq: u64,
    },
    /// `retract` of an own message.
    Retract {
        /// The retracted message.
        #[serde(rename = "messageId")]
        message_id: String,
    },
}

/// Which conversation(s) to export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportScope<'a> {
    /// One conversation.
    Conversation(&'a str),
    /// Every conversation (the spec's literal `all`).
    All,
}

impl<'a> ExportScope<'a> {
    /// Parses the spec's argument: a conversation id or the literal `all`.
    pub fn parse(arg: &'a str) -> Self {
        if arg == "all" {
            Self::All
        } else {
            Self::Conversation(arg)
        }
    }
}

/// Store failures.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The SQLite engine failed.
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// A stored record could not be (de)serialised.
    #[error("record encoding: {0}")]
    Encoding(#[from] serde_json::Error),
    /// The database has a schema version this code does not know.
    #[error("unsupported schema version {0}")]
    SchemaVersion(i64),
}

/// Synchronous local storage of every client record.
pub trait ClientStore {
    /// The stored identity, if any.
    fn load_identity(&self) -> Result<Option<StoredIdentity>, StoreError>;
    /// Replaces the stored identity (only one is kept).
    fn save_identity(&mut self, identity: &StoredIdentity) -> Result<(), StoreError>;
    /// Removes the identity.
    fn clear_identity(&mut self) -> Result<(), StoreError>;

    /// Session of a conversation.
    fn load_session(&self, conversation_id: &str) -> Result<Option<SessionRecord>, StoreError>;
    /// Session with a peer alias (first by conversation id if several).
    fn load_session_by_alias(&self, alias_id: &str) -> Result<Option<SessionRecord>, StoreError>;
    /// Inserts or replaces a session.
    fn save_session(&mut self, session: &SessionRecord) -> Result<(), StoreError>;
    /// Removes a session.
    fn delete_session(&mut self, conversation_id: &str) -> Result<(), StoreError>;
    /// All sessions, by conversation id.
    fn list_sessions(&self) -> Result<Vec<SessionRecord>, StoreError>;

    /// A message by id.
    fn get_message(&self, id: &str) -> Result<Option<StoredMessage>, StoreError>;
    /// Inserts or replaces a message.
    fn put_message(&mut self, message: &StoredMessage) -> Result<(), StoreError>;
    /// Messages of a conversation with `time < before` (if given), the latest `limit` (if given),
    /// in `(time, id)` order.
    fn get_history(
        &self,
        conversation_id: &str,
        limit: Option<usize>,
        before: Option<u64>,
    ) -> Result<Vec<StoredMessage>, StoreError>;
    /// Conversation ids that have messages, sorted.
    fn message_conversations(&self) -> Result<Vec<String>, StoreError>;
    /// Deletes one conversation's messages.
    fn clear_history(&mut self, conversation_id: &str) -> Result<(), StoreError>;
    /// Deletes every message.
    fn clear_all_history(&mut self) -> Result<(), StoreError>;

    /// Inserts or replaces an outbox intent.
    fn put_outbox(&mut self, intent: &OutboxIntent) -> Result<(), StoreError>;
    /// Removes an outbox intent.
    fn delete_outbox(&mut self, internal_id: &str) -> Result<(), StoreError>;
    /// All intents in `(addedAt, internalId)` order.
    fn list_outbox(&self) -> Result<Vec<OutboxIntent>, StoreError>;

    /// Parks a message (keyed by id; re-parking replaces).
    fn put_offline(&mut self, message: &OfflineMessage) -> Result<(), StoreError>;
    /// Removes a parked message.
    fn delete_offline(&mut self, id: &str) -> Result<(), StoreError>;
    /// All parked messages in `(createdAt, id)` order.
    fn list_offline(&self) -> Result<Vec<OfflineMessage>, StoreError>;
    /// Whether a message with this id is parked. Default: scans [`Self::list_offline`].
    fn has_offline(&self, id: &str) -> Result<bool, StoreError> {
        Ok(self.list_offline()?.iter().any(|o| o.id == id))
    }
    /// Parked messages of one conversation, or of all when `None`. Default: scans
    /// [`Self::list_offline`].
    fn count_offline(&self, conversation_id: Option<&str>) -> Result<usize, StoreError> {
        Ok(self
            .list_offline()?
            .iter()
            .filter(|o| conversation_id.is_none_or(|c| o.conversation_id == c))
            .count())
    }

    /// Inserts or replaces a trust record.
    fn put_trust(&mut self, record: &TrustRecord) -> Result<(), StoreError>;
    /// Removes a trust record.
    fn delete_trust(&mut self, contact_id: &str) -> Result<(), StoreError>;
    /// All trust records by contact id.
    fn list_trust(&self) -> Result<Vec<TrustRecord>, StoreError>;

    /// Inserts or replaces the receipt level of a conversation.
    fn put_receipt_level(&mut self, level: &ReceiptLevel) -> Result<(), StoreError>;
    /// All receipt levels by conversation id.
    fn list_receipt_levels(&self) -> Result<Vec<ReceiptLevel>, StoreError>;

    /// Inserts or replaces a queued control frame (keyed by `order`).
    fn put_pending_action(&mut self, action: &PendingAction) -> Result<(), StoreError>;
    /// Removes a queued control frame.
    fn delete_pending_action(&mut self, order: u64) -> Result<(), StoreError>;
    /// Queued control frames in `order`.
    fn list_pending_actions(&self) -> Result<Vec<PendingAction>, StoreError>;

    /// Remembers that the app was told about the confirmation of `order_id` (the relay re-sends
    /// `payment_confirmed` on every sync for a while; idempotent).
    fn put_confirmed_order(&mut self, order_id: &str) -> Result<(), StoreError>;
    /// Whether [`Self::put_confirmed_order`] was called for `order_id`.
    fn has_confirmed_order(&self, order_id: &str) -> Result<bool, StoreError>;

    /// Marks a session verified (SPEC `markSessionVerified`).
    fn mark_session_verified(&mut self, conversation_id: &str) -> Result<(), StoreError> {
        if let Some(mut s) = self.load_session(conversation_id)? {
            s.trust_state = SessionTrust::Verified;
            self.save_session(&s)?;
        }
        Ok(())
    }

    /// NDJSON export (see the module doc for the format).
    fn export_conversation(&self, scope: ExportScope<'_>) -> Result<String, StoreError> {
        let convs = match scope {
            ExportScope::Conversation(c) => vec![c.to_owned()],
            ExportScope::All => self.message_conversations()?,
        };
        let mut out = String::new();
        for c in convs {
            for m in self.get_history(&c, None, None)? {
                out.push_str(&serde_json::to_string(&m)?);
                out.push('\n');
            }
        }
        Ok(out)
    }
}

fn sort_history(v: &mut [StoredMessage]) {
    v.sort_by(|a, b| (a.time, &a.id).cmp(&(b.time, &b.id)));
}

fn apply_limit(mut v: Vec<StoredMessage>, limit: Option<usize>) -> Vec<StoredMessage> {
    if let Some(l) = limit
        && v.len() > l
    {
        v.drain(..v.len() - l);
    }
    v
}
