//! A client store handle that outlives the client: the simulator keeps one per client host so
//! a crashed client restarts on the state it had committed.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use client_core::security::TrustRecord;
use client_core::store::{
    ClientStore, ExportScope, MemoryStore, OfflineMessage, OutboxIntent, PendingAction,
    ReceiptLevel, SessionRecord, StoreError, StoredIdentity, StoredMessage,
};

/// A [`MemoryStore`] behind a shared handle; clones see the same records.
///
/// Every [`ClientStore`] method is forwarded, the derived ones too (`has_offline`,
/// `count_offline`, `mark_session_verified`, `export_conversation`), so each call runs under
/// one lock on the inner store and nothing falls back to a trait default.
///
/// Only the client task writes through it while the client runs; other holders (the
/// simulator's oracles, a restarted client) read or take over after it stopped.
#[derive(Debug, Clone, Default)]
pub struct SharedStore {
    inner: Arc<Mutex<MemoryStore>>,
}

impl SharedStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// A snapshot of every record.
    pub fn snapshot(&self) -> MemoryStore {
        self.lock().clone()
    }

    fn lock(&self) -> MutexGuard<'_, MemoryStore> {
        // A panicking writer leaves whole records behind; nothing half-written to protect.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl ClientStore for SharedStore {
    fn load_identity(&self) -> Result<Option<StoredIdentity>, StoreError> {
        self.lock().load_identity()
    }
    fn save_identity(&mut self, identity: &StoredIdentity) -> Result<(), StoreError> {
        self.lock().save_identity(identity)
    }
    fn clear_identity(&mut self) -> Result<(), StoreError> {
        self.lock().clear_identity()
    }
    fn load_session(&self, conversation_id: &str) -> Result<Option<SessionRecord>, StoreError> {
        self.lock().load_session(conversation_id)
    }
    fn load_session_by_alias(&self, alias_id: &str) -> Result<Option<SessionRecord>, StoreError> {
        self.lock().load_session_by_alias(alias_id)
    }
    fn save_session(&mut self, session: &SessionRecord) -> Result<(), StoreError> {
        self.lock().save_session(session)
    }
    fn delete_session(&mut self, conversation_id: &str) -> Result<(), StoreError> {
        self.lock().delete_session(conversation_id)
    }
    fn list_sessions(&self) -> Result<Vec<SessionRecord>, StoreError> {
        self.lock().list_sessions()
    }
    fn get_message(&self, id: &str) -> Result<Option<StoredMessage>, StoreError> {
        self.lock().get_message(id)
    }
    fn put_message(&mut self, message: &StoredMessage) -> Result<(), StoreError> {
        self.lock().put_message(message)
    }
    fn get_history(
        &self,
        conversation_id: &str,
        limit: Option<usize>,
        before: Option<u64>,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        self.lock().get_history(conversation_id, limit, before)
    }
    fn message_conversations(&self) -> Result<Vec<String>, StoreError> {
        self.lock().message_conversations()
    }
    fn clear_history(&mut self, conversation_id: &str) -> Result<(), StoreError> {
        self.lock().clear_history(conversation_id)
    }
    fn clear_all_history(&mut self) -> Result<(), StoreError> {
        self.lock().clear_all_history()
    }
    fn put_outbox(&mut self, intent: &OutboxIntent) -> Result<(), StoreError> {
        self.lock().put_outbox(intent)
    }
    fn delete_outbox(&mut self, internal_id: &str) -> Result<(), StoreError> {
        self.lock().delete_outbox(internal_id)
    }
    fn list_outbox(&self) -> Result<Vec<OutboxIntent>, StoreError> {
        self.lock().list_outbox()
    }
    fn put_offline(&mut self, message: &OfflineMessage) -> Result<(), StoreError> {
        self.lock().put_offline(message)
    }
    fn delete_offline(&mut self, id: &str) -> Result<(), StoreError> {
        self.lock().delete_offline(id)
    }
    fn list_offline(&self) -> Result<Vec<OfflineMessage>, StoreError> {
        self.lock().list_offline()
    }
    fn has_offline(&self, id: &str) -> Result<bool, StoreError> {
        self.lock().has_offline(id)
    }
    fn count_offline(&self, conversation_id: Option<&str>) -> Result<usize, StoreError> {
        self.lock().count_offline(conversation_id)
    }
    fn put_trust(&mut self, record: &TrustRecord) -> Result<(), StoreError> {
        self.lock().put_trust(record)
    }
    fn delete_trust(&mut self, contact_id: &str) -> Result<(), StoreError> {
        self.lock().delete_trust(contact_id)
    }
    fn list_trust(&self) -> Result<Vec<TrustRecord>, StoreError> {
        self.lock().list_trust()
    }
    fn put_receipt_level(&mut self, level: &ReceiptLevel) -> Result<(), StoreError> {
        self.lock().put_receipt_level(level)
    }
    fn list_receipt_levels(&self) -> Result<Vec<ReceiptLevel>, StoreError> {
        self.lock().list_receipt_levels()
    }
    fn put_pending_action(&mut self, action: &PendingAction) -> Result<(), StoreError> {
        self.lock().put_pending_action(action)
    }
    fn delete_pending_action(&mut self, order: u64) -> Result<(), StoreError> {
        self.lock().delete_pending_action(order)
    }
    fn list_pending_actions(&self) -> Result<Vec<PendingAction>, StoreError> {
        self.lock().list_pending_actions()
    }
    fn put_confirmed_order(&mut self, order_id: &str) -> Result<(), StoreError> {
        self.lock().put_confirmed_order(order_id)
    }
    fn has_confirmed_order(&self, order_id: &str) -> Result<bool, StoreError> {
        self.lock().has_confirmed_order(order_id)
    }
    fn mark_session_verified(&mut self, conversation_id: &str) -> Result<(), StoreError> {
        self.lock().mark_session_verified(conversation_id)
    }
    fn export_conversation(&self, scope: ExportScope<'_>) -> Result<String, StoreError> {
        self.lock().export_conversation(scope)
    }
}
