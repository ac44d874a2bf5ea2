//! Retracts: own messages only, locally replaced by a placeholder.
//!
//! * [`Client::retract_message`] accepts only an own message of the named conversation; it
//!   stores the placeholder ([`RETRACTED_TEXT`], `msgType` [`RETRACTED_MSG_TYPE`], no media)
//!   and sends `retract`, or queues it durably while closed ([`super::actions`]).
//! * An inbound `retract` applies only to an inbound message of the same conversation authored
//!   by the conversation's peer: the frame's `from` is the alias the message came from, or the
//!   peer's alias in the session. Anything else is ignored.
//! * A retract of a message still parked in the offline inbox ([`super::inbox`]) stores the
//!   placeholder in its place and takes it out of the inbox, under the same sender rule.
//! * A retract from an alias the session does not know yet (the peer may have bound a vanity
//!   alias since the message) is held in memory, at most [`HELD_RETRACTS_MAX`], and asks for a
//!   contacts sync; when a successful sync answers with nothing more to follow, each held
//!   retract lands if the session now carries its alias and is dropped otherwise. Held
//!   retracts do not survive a restart (the relay does not redeliver a retract it delivered).

use std::collections::VecDeque;

use wire::ids::{AliasId, ConvId, MessageId};

use super::client::Client;
use super::event::{ClientError, Event};
use crate::store::{ClientStore, MessageStatus, OfflineMessage, PendingActionKind, StoredMessage};

/// Local text of a retracted message (as the reference clients store it).
pub const RETRACTED_TEXT: &str = "消息已撤回";
/// `msgType` of a retracted message.
pub const RETRACTED_MSG_TYPE: &str = "retracted";

/// Most inbound retracts held for a contacts sync at once; past it a new one is ignored.
pub const HELD_RETRACTS_MAX: usize = 256;

/// Inbound retracts waiting for a contacts sync to show their sender's alias.
#[derive(Debug, Default)]
pub(super) struct HeldRetracts(VecDeque<HeldRetract>);

/// One held inbound retract.
#[derive(Debug)]
struct HeldRetract {
    id: String,
    from: String,
    conv: String,
}

impl<S: ClientStore> Client<S> {
    /// Retracts an own message: stores the local placeholder and sends `retract`, or queues it
    /// durably while the socket is closed (sent in order after the next `sync` and the outbox).
    pub fn retract_message(
        &mut self,
        now_ms: u64,
        message_id: &str,
        to_alias_id: &str,
        conversation_id: &str,
    ) -> Result<(), ClientError> {
        let Some(mut m) = self.store.get_message(message_id)? else {
            return Err(ClientError::NotFound);
        };
        if !m.is_me || m.conversation_id != conversation_id {
            return Err(ClientError::NotOwnMessage);
        }
        if MessageId::parse(message_id).is_err()
            || AliasId::parse(to_alias_id).is_err()
            || ConvId::parse(conversation_id).is_err()
        {
            return Err(ClientError::InvalidId("retract target"));
        }
        self.send_or_queue(
            now_ms,
            conversation_id,
            to_alias_id,
            PendingActionKind::Retract {
                message_id: message_id.to_owned(),
            },
        )?;
        make_placeholder(&mut m);
        self.store.put_message(&m)?;
        self.out.event(Event::Retracted {
            id: message_id.to_owned(),
        });
        Ok(())
    }

    pub(super) fn on_retract(
        &mut self,
        now_ms: u64,
        id: &str,
        from: &str,
        conv: &str,
    ) -> Result<(), ClientError> {
        match self.retract_target(id, from, conv)? {
            Target::Ignore => {}
            Target::Apply(m) => self.apply_retract(*m)?,
            Target::UnknownAlias => {
                if self.held_retracts.0.len() < HELD_RETRACTS_MAX {
                    self.held_retracts.0.push_back(HeldRetract {
                        id: id.to_owned(),
                        from: from.to_owned(),
                        conv: conv.to_owned(),
                    });
                    self.sync_contacts_again(now_ms);
                }
            }
        }
        Ok(())
    }

    /// After a successful contacts sync with no other one to follow: each held retract lands
    /// if the session now carries its alias, and is dropped otherwise.
    pub(super) fn settle_held_retracts(&mut self) -> Result<(), ClientError> {
        for h in std::mem::take(&mut self.held_retracts.0) {
            if let Target::Apply(m) = self.retract_target(&h.id, &h.from, &h.conv)? {
                self.apply_retract(*m)?;
            }
        }
        Ok(())
    }

    pub(super) fn held_retracts_is_empty(&self) -> bool {
        self.held_retracts.0.is_empty()
    }

    fn retract_target(&self, id: &str, from: &str, conv: &str) -> Result<Target, ClientError> {
        let m = match self.store.get_message(id)? {
            Some(m) => m,
            None => match self.store.list_offline()?.into_iter().find(|p| p.id == id) {
                Some(parked) => from_parked(parked),
                None => return Ok(Target::Ignore),
            },
        };
        let already = m.msg_type.as_deref() == Some(RETRACTED_MSG_TYPE);
        if m.is_me || m.conversation_id != conv || already {
            // A retract delivered again (the relay re-sends what it cannot know arrived) is
            // not a second event.
            return Ok(Target::Ignore);
        }
        if m.from_alias_id.as_deref() == Some(from) {
            return Ok(Target::Apply(Box::new(m)));
        }
        Ok(match self.store.load_session(conv)? {
            Some(s) if s.is_peer_alias(from) => Target::Apply(Box::new(m)),
            Some(_) => Target::UnknownAlias,
            None => Target::Ignore,
        })
    }

    fn apply_retract(&mut self, mut m: StoredMessage) -> Result<(), ClientError> {
        make_placeholder(&mut m);
        self.store.put_message(&m)?;
        self.store.delete_offline(&m.id)?;
        self.out.event(Event::Retracted { id: m.id });
        Ok(())
    }
}

/// What an inbound retract does.
enum Target {
    /// Not an inbound message of this conversation's peer.
    Ignore,
    /// Replace it by the placeholder.
    Apply(Box<StoredMessage>),
    /// The sender's alias is not the session's: wait for a contacts sync.
    UnknownAlias,
}

/// A parked message the peer retracts before it could be shown: it is stored as the
/// placeholder (and leaves the inbox), so a later redelivery is a duplicate.
fn from_parked(p: OfflineMessage) -> StoredMessage {
    StoredMessage {
        id: p.id,
        conversation_id: p.conversation_id,
        text: String::new(),
        is_me: false,
        time: p.created_at,
        status: MessageStatus::Delivered,
        msg_type: None,
        media_url: None,
        caption: None,
        seq: (p.seq > 0).then_some(p.seq),
        from_alias_id: Some(p.from_alias_id),
        reply_to_id: None,
    }
}

fn make_placeholder(m: &mut StoredMessage) {
    m.text = RETRACTED_TEXT.to_owned();
    m.msg_type = Some(RETRACTED_MSG_TYPE.to_owned());
    m.media_url = None;
    m.caption = None;
}
