//! What the relay knows of every non-empty queue at all times, loaded at start: how many
//! messages and bytes it holds (the queue bounds), its oldest message and who wrote it, one
//! `queue_index` row per queue (`recipient/conv`), written in the same commit as every change
//! to the queue (`crate::queue`), with when its oldest message's TTL ends in the row's indexed
//! expiry (the expiry sweep reads the due queues from that index). Its size follows the
//! undelivered messages (at most one entry per message), not the conversations.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use wire::{ConvId, UnixMs, UserUuid};

use crate::rows::{QueueSummary, decode};
use crate::store::{Batch, RowKey, StoreError, Table};
use wire::json;

/// What one non-empty queue holds, and the member who wrote it (a row of `queue_index`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct QueueEntry {
    pub(crate) from: UserUuid,
    pub(crate) summary: QueueSummary,
}

/// The stored form of a [`QueueEntry`], keyed `recipient/conv`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct QueueIndexRow {
    pub(crate) recipient: UserUuid,
    pub(crate) conv_id: ConvId,
    pub(crate) from: UserUuid,
    pub(crate) msgs: u64,
    pub(crate) bytes: u64,
    pub(crate) oldest: UnixMs,
}

/// Records the `queue_index` row of the queue `(recipient, conv)`: `entry`, expiring `ttl_ms`
/// after its oldest message, or its deletion when the queue is empty. The value is exactly
/// `serde_json`'s encoding of a [`QueueIndexRow`] ([`wire::json`]). Returns the row's expiry
/// (none for a deletion).
pub(crate) fn record_entry(
    batch: &mut Batch,
    recipient: &UserUuid,
    conv: &ConvId,
    entry: Option<&QueueEntry>,
    ttl_ms: u64,
) -> Option<UnixMs> {
    let key = |k: &mut RowKey<'_>| {
        k.push_str(recipient.as_str());
        k.push('/');
        k.push_str(conv.as_str());
    };
    let Some(e) = entry else {
        batch.delete_row(Table::QueueIndex, key);
        return None;
    };
    let expires_at = e.summary.oldest.plus_ms(ttl_ms);
    batch.put_expiring_row(
        Table::QueueIndex,
        key,
        |out| {
            out.extend_from_slice(b"{\"recipient\":");
            json::uuid(out, recipient);
            out.extend_from_slice(b",\"conv_id\":");
            json::id(out, conv.as_str());
            out.extend_from_slice(b",\"from\":");
            json::uuid(out, &e.from);
            out.extend_from_slice(b",\"msgs\":");
            json::uint(out, e.summary.msgs);
            out.extend_from_slice(b",\"bytes\":");
            json::uint(out, e.summary.bytes);
            out.extend_from_slice(b",\"oldest\":");
            json::uint(out, e.summary.oldest.get());
            out.push(b'}');
        },
        expires_at.get(),
    );
    Some(expires_at)
}

/// What every non-empty queue holds, by recipient then conversation: all of it in memory
/// (the queue bounds need it), loaded from `queue_index` at start. Its
/// size follows the undelivered messages (at most one entry per message), not the
/// conversations.
#[derive(Debug, Default)]
pub(crate) struct QueueIndex(BTreeMap<UserUuid, BTreeMap<ConvId, QueueEntry>>);

impl QueueIndex {
    /// Adds a stored row (at load).
    pub(crate) fn load(&mut self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        let r: QueueIndexRow = decode(Table::QueueIndex, key, value)?;
        if r.msgs == 0 || r.from == r.recipient {
            return Err(StoreError::Backend(format!(
                "corrupt row {key:?} in table {}: an empty queue, or one written to oneself",
                Table::QueueIndex.name()
            )));
        }
        let entry = QueueEntry {
            from: r.from,
            summary: QueueSummary {
                msgs: r.msgs,
                bytes: r.bytes,
                oldest: r.oldest,
            },
        };
        self.0
            .entry(r.recipient)
            .or_default()
            .insert(r.conv_id, entry);
        Ok(())
    }

    /// The queue `(recipient, conv)` if it holds messages.
    pub(crate) fn get(&self, recipient: &UserUuid, conv: &ConvId) -> Option<&QueueEntry> {
        self.0.get(recipient)?.get(conv)
    }

    /// The non-empty queues of `recipient`, by conversation.
    pub(crate) fn of(&self, recipient: &UserUuid) -> impl Iterator<Item = (&ConvId, &QueueEntry)> {
        self.0.get(recipient).into_iter().flatten()
    }

    /// Every non-empty queue: recipient, conversation, entry.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&UserUuid, &ConvId, &QueueEntry)> {
        self.0
            .iter()
            .flat_map(|(to, convs)| convs.iter().map(move |(conv, e)| (to, conv, e)))
    }

    pub(crate) fn set(&mut self, recipient: &UserUuid, conv: &ConvId, entry: Option<QueueEntry>) {
        match entry {
            Some(e) => {
                let convs = match self.0.get_mut(recipient) {
                    Some(convs) => convs,
                    None => self.0.entry(recipient.clone()).or_default(),
                };
                match convs.get_mut(conv) {
                    Some(old) => *old = e,
                    None => {
                        convs.insert(conv.clone(), e);
                    }
                }
            }
            None => {
                if let Some(convs) = self.0.get_mut(recipient) {
                    convs.remove(conv);
                    if convs.is_empty() {
                        self.0.remove(recipient);
                    }
                }
            }
        }
    }
}

/// The recipient and conversation of the queue index row `key` (`recipient/conv`; a recipient
/// is a uuid, without `/`).
pub(crate) fn parse_queue_key(key: &str) -> Option<(UserUuid, ConvId)> {
    let (recipient, conv) = key.split_once('/')?;
    Some((UserUuid::parse(recipient).ok()?, ConvId::parse(conv).ok()?))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// A `queue_index` row is exactly serde_json's encoding of the row it decodes as, it
        /// expires the TTL after its oldest message, and an emptied queue deletes its row.
        #[test]
        fn queue_index_rows_are_serde_json(
            ids in any::<([u8; 16], [u8; 16])>(),
            conv in "[A-Za-z0-9._:-]{1,128}",
            (msgs, bytes, oldest) in (1u64.., any::<u64>(), any::<u64>()),
        ) {
            let (to, from) = (UserUuid::from_random_bytes(ids.0), UserUuid::from_random_bytes(ids.1));
            let conv = ConvId::parse(&conv).unwrap();
            let summary = QueueSummary { msgs, bytes, oldest: UnixMs(oldest) };
            let mut batch = Batch::default();
            record_entry(&mut batch, &to, &conv, Some(&QueueEntry { from: from.clone(), summary }), 1_000);
            record_entry(&mut batch, &to, &conv, None, 1_000);
            let ops: Vec<_> = batch.iter().collect();
            let crate::store::MutationRef::PutExpiring { key, value, expires_at, .. } = ops[0] else {
                panic!("a put with an expiry first");
            };
            prop_assert_eq!(expires_at, UnixMs(oldest).plus_ms(1_000).get());
            prop_assert_eq!(key, format!("{}/{}", to.as_str(), conv.as_str()));
            let row = QueueIndexRow { recipient: to.clone(), conv_id: conv.clone(), from, msgs, bytes, oldest: UnixMs(oldest) };
            let want = serde_json::to_vec(&row).unwrap();
            prop_assert_eq!(value, want.as_slice());
            let mut index = QueueIndex::default();
            index.load(key, value).unwrap();
            prop_assert_eq!(index.get(&to, &conv).map(|e| e.summary), Some(summary));
            let is_delete = matches!(ops[1], crate::store::MutationRef::Delete { key: k, .. } if k == key);
            prop_assert!(is_delete);
        }

    }
}
