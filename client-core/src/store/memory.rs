//! In-memory [`ClientStore`] (tests and the simulator).

use std::collections::{BTreeMap, BTreeSet};

use super::{
    ClientStore, OfflineMessage, OutboxIntent, PendingAction, ReceiptLevel, SessionRecord,
    StoreError, StoredIdentity, StoredMessage, apply_limit, sort_history,
};
use crate::security::TrustRecord;

/// Every record in ordered maps; cloning it snapshots the whole store.
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    identity: Option<StoredIdentity>,
    sessions: BTreeMap<String, SessionRecord>,
    messages: BTreeMap<String, StoredMessage>,
    outbox: BTreeMap<String, OutboxIntent>,
    offline: BTreeMap<String, OfflineMessage>,
    trust: BTreeMap<String, TrustRecord>,
    receipt_levels: BTreeMap<String, ReceiptLevel>,
    pending_actions: BTreeMap<u64, PendingAction>,
    confirmed_orders: BTreeSet<String>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
}

impl ClientStore for MemoryStore {
    fn load_identity(&self) -> Result<Option<StoredIdentity>, StoreError> {
        Ok(self.identity.clone())
    }
    fn save_identity(&mut self, identity: &StoredIdentity) -> Result<(), StoreError> {
        self.identity = Some(identity.clone());
        Ok(())
    }
    fn clear_identity(&mut self) -> Result<(), StoreError> {
        self.identity = None;
        Ok(())
    }
    fn load_session(&self, conversation_id: &str) -> Result<Option<SessionRecord>, StoreError> {
        Ok(self.sessions.get(conversation_id).cloned())
    }
    fn load_session_by_alias(&self, alias_id: &str) -> Result<Option<SessionRecord>, StoreError> {
        Ok(self
            .sessions
            .values()
            .find(|s| s.their_alias_id == alias_id)
            .cloned())
    }
    fn save_session(&mut self, session: &SessionRecord) -> Result<(), StoreError> {
        self.sessions
            .insert(session.conversation_id.clone(), session.clone());
        Ok(())
    }
    fn delete_session(&mut self, conversation_id: &str) -> Result<(), StoreError> {
        self.sessions.remove(conversation_id);
        Ok(())
    }
    fn list_sessions(&self) -> Result<Vec<SessionRecord>, StoreError> {
        Ok(self.sessions.values().cloned().collect())
    }
    fn get_message(&self, id: &str) -> Result<Option<StoredMessage>, StoreError> {
        Ok(self.messages.get(id).cloned())
    }
    fn put_message(&mut self, message: &StoredMessage) -> Result<(), StoreError> {
        self.messages.insert(message.id.clone(), message.clone());
        Ok(())
    }
    fn get_history(
        &self,
        conversation_id: &str,
        limit: Option<usize>,
        before: Option<u64>,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        let mut v: Vec<StoredMessage> = self
            .messages
            .values()
            .filter(|m| m.conversation_id == conversation_id)
            .filter(|m| before.is_none_or(|b| m.time < b))
            .cloned()
            .collect();
        sort_history(&mut v);
        Ok(apply_limit(v, limit))
    }
    fn message_conversations(&self) -> Result<Vec<String>, StoreError> {
        let set: BTreeSet<String> = self
            .messages
            .values()
            .map(|m| m.conversation_id.clone())
            .collect();
        Ok(set.into_iter().collect())
    }
    fn clear_history(&mut self, conversation_id: &str) -> Result<(), StoreError> {
        self.messages
            .retain(|_, m| m.conversation_id != conversation_id);
        Ok(())
    }
    fn clear_all_history(&mut self) -> Result<(), StoreError> {
        self.messages.clear();
        Ok(())
    }
    fn put_outbox(&mut self, intent: &OutboxIntent) -> Result<(), StoreError> {
        self.outbox
            .insert(intent.internal_id.clone(), intent.clone());
        Ok(())
    }
    fn delete_outbox(&mut self, internal_id: &str) -> Result<(), StoreError> {
        self.outbox.remove(internal_id);
        Ok(())
    }
    fn list_outbox(&self) -> Result<Vec<OutboxIntent>, StoreError> {
        let mut v: Vec<OutboxIntent> = self.outbox.values().cloned().collect();
        v.sort_by(|a, b| (a.added_at, &a.internal_id).cmp(&(b.added_at, &b.internal_id)));
        Ok(v)
    }
    fn put_offline(&mut self, message: &OfflineMessage) -> Result<(), StoreError> {
        self.offline.insert(message.id.clone(), message.clone());
        Ok(())
    }
    fn delete_offline(&mut self, id: &str) -> Result<(), StoreError> {
        self.offline.remove(id);
        Ok(())
    }
    fn list_offline(&self) -> Result<Vec<OfflineMessage>, StoreError> {
        let mut v: Vec<OfflineMessage> = self.offline.values().cloned().collect();
        v.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        Ok(v)
    }
    fn put_trust(&mut self, record: &TrustRecord) -> Result<(), StoreError> {
        self.trust.insert(record.contact_id.clone(), record.clone());
        Ok(())
    }
    fn delete_trust(&mut self, contact_id: &str) -> Result<(), StoreError> {
        self.trust.remove(contact_id);
        Ok(())
    }
    fn list_trust(&self) -> Result<Vec<TrustRecord>, StoreError> {
        Ok(self.trust.values().cloned().collect())
    }
    fn put_receipt_level(&mut self, level: &ReceiptLevel) -> Result<(), StoreError> {
        self.receipt_levels
            .insert(level.conversation_id.clone(), level.clone());
        Ok(())
    }
    fn list_receipt_levels(&self) -> Result<Vec<ReceiptLevel>, StoreError> {
        Ok(self.receipt_levels.values().cloned().collect())
    }
    fn put_pending_action(&mut self, action: &PendingAction) -> Result<(), StoreError> {
        self.pending_actions.insert(action.order, action.clone());
        Ok(())
    }
    fn delete_pending_action(&mut self, order: u64) -> Result<(), StoreError> {
        self.pending_actions.remove(&order);
        Ok(())
    }
    fn list_pending_actions(&self) -> Result<Vec<PendingAction>, StoreError> {
        Ok(self.pending_actions.values().cloned().collect())
    }
    fn put_confirmed_order(&mut self, order_id: &str) -> Result<(), StoreError> {
        self.confirmed_orders.insert(order_id.to_owned());
        Ok(())
    }
    fn has_confirmed_order(&self, order_id: &str) -> Result<bool, StoreError> {
        Ok(self.confirmed_orders.contains(order_id))
    }
}
