//! Inbound messages: dedup by id, the trust guard, decryption, storage, then `delivered`.
//!
//! * Deduplicated by id: a message already stored is re-acknowledged with `delivered` (and
//!   leaves the offline inbox) but not emitted again.
//! * `delivered` is sent only after the message is stored, and only on an open socket (the
//!   relay re-pushes on the next `sync` what was not acknowledged).
//! * A message is parked ([`super::inbox`]), never dropped, when its conversation has no
//!   session (a contacts sync is then asked for), its sender's alias is not the session's ([`super::vanity`]), the trust guard
//!   refuses the sender's key ([`super::trust`]), or it does not decrypt.
//! * A stored inbound message has status `delivered`, its `seq` and sender, and is reported as
//!   [`Event::Message`].

use wire::frames::{CRYPTO_V_MESSAGE, ClientFrame, MsgDelivery, ReceiptFrame};

use super::client::Client;
use super::event::{ClientError, Event};
use crate::crypto::content::MessageContent;
use crate::crypto::{SessionKey, decrypt_payload_text};
use crate::store::{ClientStore, MessageStatus, StoredMessage};

impl<S: ClientStore> Client<S> {
    /// A `msg` frame, or a parked message retried (see the module doc).
    pub(super) fn on_msg(&mut self, now_ms: u64, d: &MsgDelivery) -> Result<(), ClientError> {
        let id = d.id.as_str();
        if self.store.get_message(id)?.is_some() {
            probes::probe!("client:msg-duplicate");
            self.store.delete_offline(id)?;
            self.send_delivered(d);
            return Ok(());
        }
        let conv = d.conv_id.as_str();
        let Some(session) = self.store.load_session(conv)? else {
            // A friendship we have not heard of (its `friend_accepted` came while we were
            // away): the friends list gives the session, and the retry releases the message.
            probes::probe!("client:msg-parked-no-session");
            self.park(d)?;
            self.sync_contacts_again(now_ms);
            return Ok(());
        };
        if !session.is_peer_alias(d.from.as_str()) {
            probes::probe!("client:msg-from-other-alias");
            return self.on_msg_from_other_alias(now_ms, d);
        }
        if session.their_alias_id != d.from.as_str() {
            probes::probe!("client:msg-from-former-alias");
        }
        if !self.guard_inbound(now_ms, &session) {
            return self.park(d);
        }
        let Ok(key) = SessionKey::from_base64(session.session_key_base64.expose()) else {
            return self.park(d);
        };
        let Ok(text) = decrypt_payload_text(&key, &d.payload) else {
            return self.park(d);
        };
        let content = MessageContent::parse(&text);
        let mut m = stored_from_content(id, conv, &content, d.at.0);
        m.status = MessageStatus::Delivered;
        m.seq = Some(d.seq.get());
        m.from_alias_id = Some(d.from.as_str().to_owned());
        self.store.put_message(&m)?;
        self.store.delete_offline(id)?;
        self.send_delivered(d);
        self.out.event(Event::Message(m));
        Ok(())
    }

    fn send_delivered(&mut self, d: &MsgDelivery) {
        if self.is_connected() {
            self.out.frame(ClientFrame::Delivered(ReceiptFrame {
                conv_id: d.conv_id.clone(),
                seq: d.seq,
                to: d.from.clone(),
                crypto_v: Some(CRYPTO_V_MESSAGE),
            }));
        }
    }
}

pub(super) fn stored_from_content(
    id: &str,
    conv: &str,
    content: &MessageContent,
    time: u64,
) -> StoredMessage {
    use crate::crypto::content::Media;
    let (body, reply_to_id) = match content {
        MessageContent::Reply { reply_to_id, body } => (body.as_ref(), Some(reply_to_id.clone())),
        c => (c, None),
    };
    let (text, msg_type, media_url, caption) = match body {
        MessageContent::Media(Media::Image { key, .. }) => {
            (body.encode(), Some("image"), Some(key.clone()), None)
        }
        MessageContent::Media(Media::File { key, name, .. }) => (
            body.encode(),
            Some("file"),
            Some(key.clone()),
            Some(name.clone()),
        ),
        MessageContent::Media(Media::Voice { key, .. }) => {
            (body.encode(), Some("voice"), Some(key.clone()), None)
        }
        MessageContent::Text(t) => (t.clone(), None, None, None),
        MessageContent::Reply { .. } => (body.encode(), None, None, None),
    };
    StoredMessage {
        id: id.to_owned(),
        conversation_id: conv.to_owned(),
        text,
        is_me: false,
        time,
        status: MessageStatus::Sending,
        msg_type: msg_type.map(str::to_owned),
        media_url,
        caption,
        seq: None,
        from_alias_id: None,
        reply_to_id,
    }
}
