//! Receipts: `delivered` / `read` from the peer move our own messages up to their `seq`.
//!
//! * A receipt applies to own acknowledged messages (not `sending`) with `seq ≤ receipt.seq`;
//!   statuses only move up (`sent < delivered < read`; a `read` implies `delivered`).
//! * A receipt can overtake the relay's `ack` of the message it covers. The highest
//!   `delivered` and `read` seq per conversation are therefore remembered, durably
//!   ([`crate::store::ReceiptLevel`], so a restart in between loses nothing), and applied when
//!   the ack lands ([`super::outbox`]).

use std::collections::BTreeMap;

use wire::frames::ReceiptDelivery;

use super::client::Client;
use super::event::ClientError;
use crate::store::{ClientStore, MessageStatus, ReceiptLevel, ReceiptLevelSeqs};

/// Highest receipt seqs seen per conversation (mirrors the store's receipt levels).
pub(super) type ReceiptLevels = BTreeMap<String, ReceiptLevelSeqs>;

impl<S: ClientStore> Client<S> {
    pub(super) fn on_receipt(
        &mut self,
        r: &ReceiptDelivery,
        status: MessageStatus,
    ) -> Result<(), ClientError> {
        let conv = r.conv_id.as_str();
        let seq = r.seq.get();
        let hw = self.receipt_hw.entry(conv.to_owned()).or_default();
        let before = *hw;
        if status == MessageStatus::Read {
            hw.read_seq = hw.read_seq.max(seq);
        }
        hw.delivered_seq = hw.delivered_seq.max(seq);
        let after = *hw;
        if after != before {
            self.store.put_receipt_level(&ReceiptLevel {
                conversation_id: conv.to_owned(),
                seqs: after,
            })?;
        }
        for m in self.store.get_history(conv, None, None)? {
            if m.is_me && m.seq.is_some_and(|s| s <= seq) && m.status != MessageStatus::Sending {
                self.set_status(&m.id, status)?;
            }
        }
        Ok(())
    }

    /// The `ack` of own message `id` (`seq` in `conv`) landed: receipts that overtook it apply
    /// now.
    pub(super) fn apply_early_receipts(
        &mut self,
        id: &str,
        conv: &str,
        seq: u64,
    ) -> Result<(), ClientError> {
        let hw = self.receipt_hw.get(conv).copied().unwrap_or_default();
        if seq <= hw.read_seq {
            self.set_status(id, MessageStatus::Read)?;
        } else if seq <= hw.delivered_seq {
            self.set_status(id, MessageStatus::Delivered)?;
        }
        Ok(())
    }
}
