//! Read markers: `mark_as_read` sends (or queues) a `read` receipt and moves our own copy of the
//! inbound messages to `read`.
//!
//! * `mark_as_read(conv, max_seq)` stores status `read` on every inbound message of `conv`
//!   with `seq ≤ max_seq` (inbound messages are stored `delivered`; the status never moves
//!   down; no `StatusChange` is emitted, that event stays about own messages).
//! * Only the highest `read` per conversation is queued; while open, a `read` not above the
//!   last one sent on this socket is skipped. Sending and queueing is [`super::actions`].
//! * [`Client::unread_count`] counts inbound messages not `read`.

use wire::ids::{AliasId, ConvId};

use super::client::Client;
use super::event::ClientError;
use crate::store::{ClientStore, MessageStatus, PendingActionKind};

impl<S: ClientStore> Client<S> {
    /// Sends a read receipt up to `max_seq`, or queues it durably while the socket is closed
    /// (sent after the next `sync`). Only the highest seq per conversation is kept or sent.
    pub fn mark_as_read(
        &mut self,
        now_ms: u64,
        conversation_id: &str,
        max_seq: u64,
        to_alias_id: &str,
    ) -> Result<(), ClientError> {
        ConvId::parse(conversation_id).map_err(|_| ClientError::InvalidId("conversation id"))?;
        AliasId::parse(to_alias_id).map_err(|_| ClientError::InvalidId("alias id"))?;
        self.mark_inbound_read(conversation_id, max_seq)?;
        if self
            .actions
            .read_sent
            .get(conversation_id)
            .is_some_and(|&s| s >= max_seq)
        {
            return Ok(());
        }
        let queued = self.actions.queued.iter().find_map(|(&o, a)| match a.kind {
            PendingActionKind::Read { seq } if a.conversation_id == conversation_id => {
                Some((o, seq))
            }
            _ => None,
        });
        if let Some((order, seq)) = queued {
            if seq >= max_seq {
                return Ok(());
            }
            self.actions.queued.remove(&order);
            self.store.delete_pending_action(order)?;
        }
        self.send_or_queue(
            now_ms,
            conversation_id,
            to_alias_id,
            PendingActionKind::Read { seq: max_seq },
        )
    }

    /// Local read marker: inbound messages of the conversation with `seq ≤ max_seq` move
    /// `delivered → read` in the store (no event: the app asked for it).
    fn mark_inbound_read(
        &mut self,
        conversation_id: &str,
        max_seq: u64,
    ) -> Result<(), ClientError> {
        for mut m in self.store.get_history(conversation_id, None, None)? {
            if !m.is_me
                && m.seq.is_some_and(|s| s <= max_seq)
                && m.status.can_advance_to(MessageStatus::Read)
            {
                m.status = MessageStatus::Read;
                self.store.put_message(&m)?;
            }
        }
        Ok(())
    }

    /// Inbound messages of a conversation not yet marked read locally.
    pub fn unread_count(&self, conversation_id: &str) -> Result<usize, ClientError> {
        Ok(self
            .store
            .get_history(conversation_id, None, None)?
            .iter()
            .filter(|m| !m.is_me && m.status != MessageStatus::Read)
            .count())
    }
}
