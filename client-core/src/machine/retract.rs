//! Retracts: own messages only, locally replaced by a placeholder.
//!
//! * [`Client::retract_message`] accepts only an own message of the named conversation; it
//!   stores the placeholder ([`RETRACTED_TEXT`], `msgType` [`RETRACTED_MSG_TYPE`], no media)
//!   and sends `retract`, or queues it durably while closed ([`super::actions`]).
//! * An inbound `retract` applies only to an inbound message of the same conversation authored
//!   by the retract's sender; anything else is ignored.

use wire::ids::{AliasId, ConvId, MessageId};

use super::client::Client;
use super::event::{ClientError, Event};
use crate::store::{ClientStore, PendingActionKind, StoredMessage};

/// Local text of a retracted message (as the reference clients store it).
pub const RETRACTED_TEXT: &str = "消息已撤回";
/// `msgType` of a retracted message.
pub const RETRACTED_MSG_TYPE: &str = "retracted";

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
        self.events.push_back(Event::Retracted {
            id: message_id.to_owned(),
        });
        Ok(())
    }

    pub(super) fn on_retract(
        &mut self,
        id: &str,
        from: &str,
        conv: &str,
    ) -> Result<(), ClientError> {
        let Some(mut m) = self.store.get_message(id)? else {
            return Ok(());
        };
        if m.is_me || m.conversation_id != conv || m.from_alias_id.as_deref() != Some(from) {
            return Ok(());
        }
        make_placeholder(&mut m);
        self.store.put_message(&m)?;
        self.events
            .push_back(Event::Retracted { id: id.to_owned() });
        Ok(())
    }
}

fn make_placeholder(m: &mut StoredMessage) {
    m.text = RETRACTED_TEXT.to_owned();
    m.msg_type = Some(RETRACTED_MSG_TYPE.to_owned());
    m.media_url = None;
    m.caption = None;
}
