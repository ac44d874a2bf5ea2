//! The durable queue of control frames that need no open socket: `read` and `retract`.
//!
//! * While the socket is closed a `read` or `retract` is stored as a
//!   [`PendingAction`](crate::store::PendingAction) and kept in memory in queue order; on the
//!   next open it is sent after `sync` and the outbox re-sends (so a retract always follows its
//!   message), in queue order, and leaves the queue.
//! * While open it is sent at once. The relay acknowledges neither frame, so once handed to an
//!   open socket it is gone (as every reference client does).
//! * The highest `read` sent per conversation on this socket is remembered (forgotten when the
//!   socket closes) so [`read_markers`](super::read_markers) can skip one that is not above it.

use std::collections::BTreeMap;

use wire::frames::{CRYPTO_V_MESSAGE, ClientFrame, ReceiptFrame, RetractFrame};
use wire::ids::{AliasId, ConvId, MessageId, Seq};

use super::client::Client;
use super::event::ClientError;
use crate::store::{ClientStore, PendingAction, PendingActionKind};

/// State of the queue.
#[derive(Debug, Default)]
pub(super) struct Actions {
    /// Queued while closed, by `order` (mirrors the store).
    pub(super) queued: BTreeMap<u64, PendingAction>,
    /// Highest `read` seq sent per conversation on the current socket.
    pub(super) read_sent: BTreeMap<String, u64>,
}

impl Actions {
    /// The socket closed: a `read` has no ack, so after a drop the app's next `mark_as_read`
    /// is sent again.
    pub(super) fn socket_closed(&mut self) {
        self.read_sent.clear();
    }
}

impl<S: ClientStore> Client<S> {
    /// The socket opened (after `sync` and the outbox): every queued action, in order.
    pub(super) fn send_queued_actions(&mut self) -> Result<(), ClientError> {
        for (order, action) in std::mem::take(&mut self.actions.queued) {
            self.transmit_action(&action);
            self.store.delete_pending_action(order)?;
        }
        Ok(())
    }

    pub(super) fn send_or_queue(
        &mut self,
        now_ms: u64,
        conversation_id: &str,
        to_alias_id: &str,
        kind: PendingActionKind,
    ) -> Result<(), ClientError> {
        let order = self
            .actions
            .queued
            .last_key_value()
            .map_or(0, |(&o, _)| o + 1);
        let action = PendingAction {
            order,
            conversation_id: conversation_id.to_owned(),
            to_alias_id: to_alias_id.to_owned(),
            added_at: now_ms,
            kind,
        };
        if self.is_connected() {
            self.transmit_action(&action);
        } else {
            self.store.put_pending_action(&action)?;
            self.actions.queued.insert(order, action);
        }
        Ok(())
    }

    fn transmit_action(&mut self, a: &PendingAction) {
        let (Ok(conv), Ok(to)) = (
            ConvId::parse(&a.conversation_id),
            AliasId::parse(&a.to_alias_id),
        ) else {
            return; // validated when queued; a corrupted record is dropped
        };
        match &a.kind {
            PendingActionKind::Read { seq } => {
                let hw = self
                    .actions
                    .read_sent
                    .entry(a.conversation_id.clone())
                    .or_default();
                *hw = (*hw).max(*seq);
                self.out.frame(ClientFrame::Read(ReceiptFrame {
                    conv_id: conv,
                    seq: Seq(*seq),
                    to,
                    crypto_v: Some(CRYPTO_V_MESSAGE),
                }));
            }
            PendingActionKind::Retract { message_id } => {
                let Ok(id) = MessageId::parse(message_id) else {
                    return;
                };
                self.out.frame(ClientFrame::Retract(RetractFrame {
                    id,
                    to,
                    conv_id: conv,
                    crypto_v: Some(CRYPTO_V_MESSAGE),
                }));
            }
        }
    }
}
