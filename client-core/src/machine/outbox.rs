//! Sending: the outbox of own messages, their statuses, and typing notices.
//!
//! * An intent stays in the outbox until the relay's `ack` for its id; on every open the
//!   intents are re-sent with the same id in `(addedAt, id)` order (after `sync`).
//! * Each transmission counts an attempt. An intent that already used
//!   [`ClientConfig::outbox_max_attempts`](super::ClientConfig::outbox_max_attempts)
//!   attempts, whose ids are not valid on the wire, or that the relay refuses with an `error`
//!   frame naming its id becomes `failed` and leaves the outbox. A refusal whose code is
//!   transient ([`wire::ErrorCode::is_transient`]: a rate limit, a full queue, a store
//!   briefly unavailable) keeps the intent: it is sent again after a pause that doubles with
//!   its attempts ([`outbox_retry_delay_ms`]), still within the attempt limit. An intent whose
//!   conversation has no session yet stays queued.
//! * Statuses only move up (`sending < sent < delivered < read`, `failed` only from
//!   `sending`); every change is stored, then reported as [`Event::StatusChange`].
//! * The `ack` sets the message's `seq` and `sent`, then applies receipts that arrived before
//!   it ([`super::receipts`]).
//! * Typing notices are sent only while open, at most one per conversation per
//!   [`TYPING_DEBOUNCE_MS`].

use wire::frames::{CRYPTO_V_MESSAGE, ClientFrame, MsgFrame, TypingFrame};
use wire::ids::{AliasId, ConvId, MessageId};

use super::client::Client;
use super::event::{ClientError, Event};
use super::inbound::stored_from_content;
use crate::crypto::content::MessageContent;
use crate::crypto::{SessionKey, encrypt_payload};
use crate::store::{ClientStore, MessageStatus, OutboxIntent};

/// Minimum spacing of typing notices per conversation.
pub const TYPING_DEBOUNCE_MS: u64 = 300;
/// Default transmissions of one outbox intent before it is marked failed.
pub const DEFAULT_OUTBOX_MAX_ATTEMPTS: u32 = 5;
/// The first pause before an intent refused with a transient code is sent again.
pub const OUTBOX_RETRY_BASE_MS: u64 = 2_000;
/// The longest pause before an intent refused with a transient code is sent again.
pub const OUTBOX_RETRY_MAX_MS: u64 = 30_000;

/// The pause before an intent that was transmitted `attempts` times (at least once) and
/// refused with a transient code is sent again: 2 s, 4 s, 8 s ... up to 30 s.
pub fn outbox_retry_delay_ms(attempts: u32) -> u64 {
    let doublings = attempts.saturating_sub(1).min(16);
    (OUTBOX_RETRY_BASE_MS << doublings).min(OUTBOX_RETRY_MAX_MS)
}

/// The sending side's own state: the intents the relay refused with a transient code, until
/// their next transmission, and the last typing notice per conversation.
#[derive(Debug, Default)]
pub(super) struct Sending {
    /// The intents waiting for a retry, and when each is due.
    due: std::collections::BTreeMap<String, u64>,
    /// When a typing notice was last sent, per conversation.
    typing_sent_ms: std::collections::BTreeMap<String, u64>,
}

impl Sending {
    /// When the first intent waiting for a retry is due.
    pub(super) fn next_ms(&self) -> Option<u64> {
        self.due.values().min().copied()
    }

    /// Takes the intents due at `now_ms`.
    fn take_due(&mut self, now_ms: u64) -> Vec<String> {
        let due: Vec<String> = self
            .due
            .iter()
            .filter(|&(_, &at)| at <= now_ms)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &due {
            self.due.remove(id);
        }
        due
    }
}

impl<S: ClientStore> Client<S> {
    /// The socket opened (after `sync`): every intent again, with its id (those waiting for a
    /// retry too).
    pub(super) fn resend_outbox(&mut self) -> Result<(), ClientError> {
        self.sending.due.clear();
        for intent in self.store.list_outbox()? {
            self.transmit_intent(intent)?;
        }
        Ok(())
    }

    /// Queues a message (sent now when connected); returns its id.
    pub fn send_message(
        &mut self,
        now_ms: u64,
        conversation_id: &str,
        to_alias_id: &str,
        content: &MessageContent,
    ) -> Result<String, ClientError> {
        if self.stored.is_none() {
            return Err(ClientError::NotAuthenticated);
        }
        if self.store.load_session(conversation_id)?.is_none() {
            return Err(ClientError::NoSession(conversation_id.to_owned()));
        }
        ConvId::parse(conversation_id).map_err(|_| ClientError::InvalidId("conversation id"))?;
        AliasId::parse(to_alias_id).map_err(|_| ClientError::InvalidId("alias id"))?;
        let id = self.new_message_id();
        let text = content.encode();
        let reply_to_id = match content {
            MessageContent::Reply { reply_to_id, .. } => Some(reply_to_id.clone()),
            _ => None,
        };
        let intent = OutboxIntent {
            internal_id: id.clone(),
            conversation_id: conversation_id.to_owned(),
            to_alias_id: to_alias_id.to_owned(),
            text,
            added_at: now_ms,
            reply_to_id: reply_to_id.clone(),
            attempts: 0,
        };
        let mut msg = stored_from_content(&id, conversation_id, content, now_ms);
        msg.is_me = true;
        msg.status = MessageStatus::Sending;
        msg.reply_to_id = reply_to_id;
        self.store.put_message(&msg)?;
        self.store.put_outbox(&intent)?;
        if self.is_connected() {
            self.transmit_intent(intent)?;
        }
        Ok(id)
    }

    fn transmit_intent(&mut self, mut intent: OutboxIntent) -> Result<(), ClientError> {
        if intent.attempts >= self.config.outbox_max_attempts {
            probes::probe!("client:outbox-attempts-exhausted");
            return self.fail_intent(&intent.internal_id);
        }
        let Some(session) = self.store.load_session(&intent.conversation_id)? else {
            return Ok(()); // kept until a session exists
        };
        let key = SessionKey::from_base64(session.session_key_base64.expose())
            .map_err(|_| ClientError::NoSession(intent.conversation_id.clone()))?;
        let (Ok(id), Ok(to), Ok(conv)) = (
            MessageId::parse(&intent.internal_id),
            AliasId::parse(&intent.to_alias_id),
            ConvId::parse(&intent.conversation_id),
        ) else {
            return self.fail_intent(&intent.internal_id);
        };
        let payload = encrypt_payload(&key, intent.text.as_bytes(), &mut self.rng);
        intent.attempts += 1;
        self.store.put_outbox(&intent)?;
        self.out.frame(ClientFrame::Msg(MsgFrame {
            id,
            to,
            conv_id: conv,
            crypto_v: Some(CRYPTO_V_MESSAGE),
            payload: payload.into(),
        }));
        Ok(())
    }

    fn fail_intent(&mut self, id: &str) -> Result<(), ClientError> {
        self.store.delete_outbox(id)?;
        self.set_status(id, MessageStatus::Failed)
    }

    pub(super) fn set_status(
        &mut self,
        id: &str,
        status: MessageStatus,
    ) -> Result<(), ClientError> {
        if let Some(mut m) = self.store.get_message(id)?
            && m.status.can_advance_to(status)
        {
            m.status = status;
            self.store.put_message(&m)?;
            self.out.event(Event::StatusChange {
                id: id.to_owned(),
                status,
            });
        }
        Ok(())
    }

    pub(super) fn on_ack(&mut self, id: &str, seq: u64) -> Result<(), ClientError> {
        let in_outbox = self
            .store
            .list_outbox()?
            .iter()
            .any(|i| i.internal_id == id);
        if in_outbox {
            self.store.delete_outbox(id)?;
        }
        let Some(mut m) = self.store.get_message(id)? else {
            return Ok(());
        };
        if !m.is_me {
            return Ok(());
        }
        if m.seq.is_none() {
            m.seq = Some(seq);
            self.store.put_message(&m)?;
        }
        self.set_status(id, MessageStatus::Sent)?;
        self.apply_early_receipts(id, &m.conversation_id, seq)
    }

    /// Sends a typing notice, at most one per conversation per [`TYPING_DEBOUNCE_MS`].
    pub fn send_typing(
        &mut self,
        now_ms: u64,
        conversation_id: &str,
        to_alias_id: &str,
    ) -> Result<(), ClientError> {
        let conv = ConvId::parse(conversation_id)
            .map_err(|_| ClientError::InvalidId("conversation id"))?;
        let to = AliasId::parse(to_alias_id).map_err(|_| ClientError::InvalidId("alias id"))?;
        if !self.is_connected() {
            return Ok(());
        }
        if let Some(&last) = self.sending.typing_sent_ms.get(conversation_id)
            && now_ms < last + TYPING_DEBOUNCE_MS
        {
            return Ok(());
        }
        self.sending
            .typing_sent_ms
            .insert(conversation_id.to_owned(), now_ms);
        self.out.frame(ClientFrame::Typing(TypingFrame {
            to,
            conv_id: conv,
            crypto_v: Some(CRYPTO_V_MESSAGE),
        }));
        Ok(())
    }

    /// An `error` frame: one that names an intent of the outbox fails it, unless its code is
    /// transient: then the intent is sent again after a pause.
    pub(super) fn on_error_frame(
        &mut self,
        now_ms: u64,
        code: &wire::ErrorCode,
        id: Option<String>,
    ) -> Result<(), ClientError> {
        let Some(id) = id else {
            return Ok(());
        };
        let Some(intent) = self
            .store
            .list_outbox()?
            .into_iter()
            .find(|i| i.internal_id == id)
        else {
            return Ok(());
        };
        if code.is_transient() {
            probes::probe!("client:outbox-retry-later");
            let at = now_ms + outbox_retry_delay_ms(intent.attempts);
            self.sending.due.insert(id, at);
            return Ok(());
        }
        self.fail_intent(&id)
    }

    /// Sends again the intents whose pause after a transient refusal is over (while the socket
    /// is open; a closed one resends every intent when it opens).
    pub(super) fn outbox_timer(&mut self, now_ms: u64) -> Result<(), ClientError> {
        if !self.is_connected() {
            return Ok(());
        }
        let due = self.sending.take_due(now_ms);
        if due.is_empty() {
            return Ok(());
        }
        for intent in self.store.list_outbox()? {
            if due.contains(&intent.internal_id) {
                self.transmit_intent(intent)?;
            }
        }
        Ok(())
    }
}
