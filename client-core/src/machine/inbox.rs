//! The offline inbox: inbound messages the machine cannot show yet are parked (never dropped)
//! and retried when what they wait for arrives.
//!
//! * Parked: no session for the conversation, the trust guard refused the sender's key, the
//!   payload did not decrypt, or the sender's alias is not the session's
//!   ([`super::inbound`], [`super::vanity`]). Each emits [`Event::Parked`].
//! * Retried when a session appears or changes (contacts sync, `reset_trust_state`), per
//!   conversation in seq order (seq-less ones last, by id), through the ordinary inbound path.
//! * Bounded: at most `offline_max_per_conversation` parked messages per conversation and
//!   `offline_max_total` in all ([`super::ClientConfig`]). A message that would exceed a bound
//!   is refused: not stored and no `delivered`, so the relay keeps it. The inbox never drops
//!   or evicts. [`Event::OfflineInboxFull`] is emitted once per conversation per episode;
//!   when retrying drains the conversation below its bound the machine sends `sync` so the
//!   relay re-pushes what it kept.

use std::collections::BTreeSet;

use wire::frames::{CRYPTO_V_MESSAGE, ClientFrame, MsgDelivery, SyncFrame};
use wire::ids::{AliasId, ConvId, MessageId, Seq};

use super::client::Client;
use super::event::{ClientError, Event};
use crate::store::{ClientStore, OfflineMessage};

/// Default bound on parked messages of one conversation (see [`ClientConfig`](super::ClientConfig)).
pub const OFFLINE_INBOX_MAX_PER_CONVERSATION: usize = 256;
/// Default bound on parked messages of all conversations together.
pub const OFFLINE_INBOX_MAX_TOTAL: usize = 2_048;

/// Conversations whose messages were refused because a bound was reached, until they drain.
pub(super) type InboxOverflow = BTreeSet<String>;

impl<S: ClientStore> Client<S> {
    pub(super) fn park(&mut self, d: &MsgDelivery) -> Result<(), ClientError> {
        let conv = d.conv_id.as_str();
        if !self.store.has_offline(d.id.as_str())? {
            let limit = if self.store.count_offline(None)? >= self.config.offline_max_total {
                Some(InboxLimit::Total)
            } else if self.store.count_offline(Some(conv))?
                >= self.config.offline_max_per_conversation
            {
                Some(InboxLimit::PerConversation)
            } else {
                None
            };
            if let Some(limit) = limit {
                // Refused: not stored and no `delivered`, so the relay keeps it.
                if self.inbox_overflow.insert(conv.to_owned()) {
                    self.out.event(Event::OfflineInboxFull {
                        conversation_id: conv.to_owned(),
                        limit,
                    });
                }
                return Ok(());
            }
        }
        self.store.put_offline(&OfflineMessage {
            id: d.id.as_str().to_owned(),
            conversation_id: d.conv_id.as_str().to_owned(),
            seq: d.seq.get(),
            payload_encrypted: d.payload.to_string(),
            created_at: d.at.0,
            from_alias_id: d.from.as_str().to_owned(),
        })?;
        self.out.event(Event::Parked {
            id: d.id.as_str().to_owned(),
            conversation_id: d.conv_id.as_str().to_owned(),
        });
        Ok(())
    }

    /// Retries the parked messages of `convs`, per conversation in seq order (the store lists
    /// them by `(createdAt, id)`; a message without a seq, stored as 0, comes after those with
    /// one, by id), so the app sees them in the order the relay assigned.
    pub(super) fn retry_parked(
        &mut self,
        now_ms: u64,
        convs: &[String],
    ) -> Result<(), ClientError> {
        let mut parked: Vec<OfflineMessage> = self
            .store
            .list_offline()?
            .into_iter()
            .filter(|o| convs.contains(&o.conversation_id))
            .collect();
        parked.sort_by(|a, b| {
            (&a.conversation_id, a.seq == 0, a.seq, &a.id).cmp(&(
                &b.conversation_id,
                b.seq == 0,
                b.seq,
                &b.id,
            ))
        });
        for off in parked {
            let (Ok(id), Ok(from), Ok(conv)) = (
                MessageId::parse(&off.id),
                AliasId::parse(&off.from_alias_id),
                ConvId::parse(&off.conversation_id),
            ) else {
                continue;
            };
            let d = MsgDelivery {
                id,
                from,
                conv_id: conv,
                seq: Seq(off.seq),
                at: wire::time::UnixMs(off.created_at),
                crypto_v: Some(CRYPTO_V_MESSAGE),
                payload: off.payload_encrypted.clone().into(),
            };
            self.on_msg(now_ms, &d)?;
        }
        self.release_inbox_overflow()
    }

    /// Conversations whose refused messages can be parked again leave the overflow set; if any
    /// did, `sync` asks the relay to redeliver what it kept.
    fn release_inbox_overflow(&mut self) -> Result<(), ClientError> {
        if self.inbox_overflow.is_empty()
            || self.store.count_offline(None)? >= self.config.offline_max_total
        {
            return Ok(());
        }
        let mut released = false;
        for conv in self.inbox_overflow.clone() {
            if self.store.count_offline(Some(&conv))? < self.config.offline_max_per_conversation {
                self.inbox_overflow.remove(&conv);
                released = true;
            }
        }
        if released && self.is_connected() {
            self.out.frame(ClientFrame::Sync(SyncFrame {
                crypto_v: Some(CRYPTO_V_MESSAGE),
            }));
        }
        Ok(())
    }
}

/// Which bound of the offline inbox was reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InboxLimit {
    /// [`ClientConfig::offline_max_per_conversation`](super::ClientConfig::offline_max_per_conversation).
    PerConversation,
    /// [`ClientConfig::offline_max_total`](super::ClientConfig::offline_max_total).
    Total,
}
