//! The relay's durable working state: plain maps behind `&mut self`, loaded from the store at
//! startup, and the row-level mutation batch of the input being handled.
//!
//! Every `put_*` / `delete_*` updates the maps and indexes **and** records the matching
//! [`Mutation`]; the dispatcher commits the batch before releasing any output of the input.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize, de::DeserializeOwned};
use wire::http::{FriendStatus, PublicKeyB64};
use wire::{AliasId, ConvId, FriendshipId, MessageId, Seq, UnixMs, UserUuid};

use crate::store::{Batch, Mutation, Snapshot, StoreError, Table};

/// An account.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct AccountRow {
    pub(crate) uuid: UserUuid,
    pub(crate) alias_id: AliasId,
    pub(crate) nickname: String,
    pub(crate) ed25519_public_key: PublicKeyB64,
    pub(crate) x25519_public_key: PublicKeyB64,
    pub(crate) created_at: UnixMs,
    /// The only JWT id currently accepted for this account (a new login replaces it).
    pub(crate) current_jti: Option<String>,
}

/// A friendship between `requester` and `addressee`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct FriendshipRow {
    pub(crate) id: FriendshipId,
    pub(crate) requester: UserUuid,
    pub(crate) addressee: UserUuid,
    pub(crate) status: FriendStatus,
    pub(crate) conversation_id: Option<ConvId>,
    pub(crate) created_at: UnixMs,
}

/// A two-member conversation and its seq counter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ConversationRow {
    pub(crate) id: ConvId,
    pub(crate) members: [UserUuid; 2],
    /// The last seq assigned (0 before the first message).
    pub(crate) last_seq: Seq,
    /// The last seq authored by `members[i]` (0 if none).
    pub(crate) last_authored: [Seq; 2],
}

impl ConversationRow {
    pub(crate) fn index_of(&self, user: &UserUuid) -> Option<usize> {
        self.members.iter().position(|m| m == user)
    }
    pub(crate) fn other(&self, user: &UserUuid) -> Option<&UserUuid> {
        self.index_of(user).map(|i| &self.members[1 - i])
    }
}

/// An undelivered message, held for `recipient`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct MessageRow {
    pub(crate) recipient: UserUuid,
    pub(crate) conv_id: ConvId,
    pub(crate) seq: Seq,
    pub(crate) id: MessageId,
    pub(crate) from: UserUuid,
    pub(crate) crypto_v: Option<u32>,
    pub(crate) payload: String,
    pub(crate) at: UnixMs,
}

/// What the relay remembers of an accepted message id after the message itself is gone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TombstoneRow {
    pub(crate) author: UserUuid,
    pub(crate) id: MessageId,
    pub(crate) conv_id: ConvId,
    pub(crate) seq: Seq,
    pub(crate) expires_at: UnixMs,
    pub(crate) retracted: bool,
}

/// Receipt kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ReceiptKind {
    Delivered,
    Read,
}

impl ReceiptKind {
    fn as_str(self) -> &'static str {
        match self {
            Self::Delivered => "delivered",
            Self::Read => "read",
        }
    }
}

/// The highest seq `reader` acknowledged with `kind` in `conv_id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ReceiptMarkRow {
    pub(crate) conv_id: ConvId,
    pub(crate) reader: UserUuid,
    pub(crate) kind: ReceiptKind,
    pub(crate) seq: Seq,
}

/// A receipt waiting for its offline `recipient` (the original sender); latest per kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PendingReceiptRow {
    pub(crate) recipient: UserUuid,
    pub(crate) conv_id: ConvId,
    pub(crate) kind: ReceiptKind,
    pub(crate) seq: Seq,
    pub(crate) from: UserUuid,
    pub(crate) at: UnixMs,
}

/// A retraction waiting for its offline `recipient`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PendingRetractRow {
    pub(crate) recipient: UserUuid,
    pub(crate) id: MessageId,
    pub(crate) conv_id: ConvId,
    pub(crate) from: UserUuid,
    pub(crate) at: UnixMs,
}

/// Keys of the `meta` table.
pub(crate) mod meta {
    pub(crate) const JWT_SIGNING_KEY: &str = "jwt_signing_key";
    pub(crate) const BOOT_COUNT: &str = "boot_count";
    pub(crate) const NEXT_FRIENDSHIP_ID: &str = "next_friendship_id";
}

/// Deadlines kept in one ordered set; entries are checked against the state when they fire.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Timer {
    Message(UserUuid, ConvId, Seq),
    Tombstone(UserUuid, MessageId),
    PendingReceipt(UserUuid, ConvId, ReceiptKind),
    PendingRetract(UserUuid, MessageId),
    /// A media upload's or object's expiry (`crate::media`).
    Media(wire::UploadId),
    /// A payment order's expiry (`crate::commerce`).
    Order(wire::OrderId),
}

pub(crate) type QueueKey = (UserUuid, ConvId);

/// All durable state plus its indexes.
#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) meta: BTreeMap<String, String>,
    pub(crate) accounts: BTreeMap<UserUuid, AccountRow>,
    pub(crate) by_alias: BTreeMap<AliasId, UserUuid>,
    pub(crate) by_ed25519: BTreeMap<[u8; 32], UserUuid>,
    pub(crate) by_x25519: BTreeMap<[u8; 32], UserUuid>,
    pub(crate) friendships: BTreeMap<FriendshipId, FriendshipRow>,
    /// (lower uuid, higher uuid) -> friendship.
    pub(crate) by_pair: BTreeMap<(UserUuid, UserUuid), FriendshipId>,
    pub(crate) conversations: BTreeMap<ConvId, ConversationRow>,
    /// user -> their conversations.
    pub(crate) convs_of: BTreeMap<UserUuid, BTreeSet<ConvId>>,
    /// (recipient, conv) -> seq -> message.
    pub(crate) queues: BTreeMap<QueueKey, BTreeMap<Seq, MessageRow>>,
    pub(crate) tombstones: BTreeMap<(UserUuid, MessageId), TombstoneRow>,
    pub(crate) marks: BTreeMap<(ConvId, UserUuid, ReceiptKind), Seq>,
    pub(crate) pending_receipts: BTreeMap<(UserUuid, ConvId, ReceiptKind), PendingReceiptRow>,
    pub(crate) pending_retracts: BTreeMap<(UserUuid, MessageId), PendingRetractRow>,
    pub(crate) timers: BTreeSet<(UnixMs, Timer)>,
    /// Media uploads and objects (`crate::media`).
    pub(crate) media: crate::media::MediaState,
    /// Push targets (`crate::push`).
    pub(crate) push: crate::push::PushState,
    /// Channels, orders, payments and sold aliases (`crate::commerce`).
    pub(crate) commerce: crate::commerce::Commerce,
    /// Mutations of the input being handled.
    pub(crate) batch: Batch,
    /// Set when a record failed to serialise: the next commit is refused (fail-stop).
    pub(crate) poisoned: bool,
}

pub(crate) fn pair(a: &UserUuid, b: &UserUuid) -> (UserUuid, UserUuid) {
    if a <= b {
        (a.clone(), b.clone())
    } else {
        (b.clone(), a.clone())
    }
}

fn seq_key(seq: Seq) -> String {
    format!("{:020}", seq.get())
}

fn message_key(recipient: &UserUuid, conv: &ConvId, seq: Seq) -> String {
    format!("{recipient}/{conv}/{}", seq_key(seq))
}

fn tombstone_key(author: &UserUuid, id: &MessageId) -> String {
    format!("{author}/{id}")
}

fn mark_key(conv: &ConvId, reader: &UserUuid, kind: ReceiptKind) -> String {
    format!("{conv}/{reader}/{}", kind.as_str())
}

fn pending_receipt_key(recipient: &UserUuid, conv: &ConvId, kind: ReceiptKind) -> String {
    format!("{recipient}/{conv}/{}", kind.as_str())
}

pub(crate) fn decode<T: DeserializeOwned>(
    table: Table,
    key: &str,
    value: &[u8],
) -> Result<T, StoreError> {
    serde_json::from_slice(value).map_err(|e| {
        StoreError::Backend(format!(
            "corrupt row {key:?} in table {}: {e}",
            table.name()
        ))
    })
}

impl State {
    /// Rebuilds the state and its indexes from a snapshot.
    pub(crate) fn load(snapshot: &Snapshot, offline_ttl_ms: u64) -> Result<Self, StoreError> {
        let mut s = Self::default();
        let rows = |t: Table| snapshot.get(&t).into_iter().flat_map(|m| m.iter());
        for (k, v) in rows(Table::Meta) {
            s.meta.insert(k.clone(), decode(Table::Meta, k, v)?);
        }
        for (k, v) in rows(Table::Accounts) {
            s.index_account(decode(Table::Accounts, k, v)?);
        }
        for (k, v) in rows(Table::Friendships) {
            s.index_friendship(decode(Table::Friendships, k, v)?);
        }
        for (k, v) in rows(Table::Conversations) {
            s.index_conversation(decode(Table::Conversations, k, v)?);
        }
        for (k, v) in rows(Table::Messages) {
            let m: MessageRow = decode(Table::Messages, k, v)?;
            s.timers.insert((
                m.at.plus_ms(offline_ttl_ms),
                Timer::Message(m.recipient.clone(), m.conv_id.clone(), m.seq),
            ));
            s.queues
                .entry((m.recipient.clone(), m.conv_id.clone()))
                .or_default()
                .insert(m.seq, m);
        }
        for (k, v) in rows(Table::Tombstones) {
            let t: TombstoneRow = decode(Table::Tombstones, k, v)?;
            s.timers.insert((
                t.expires_at,
                Timer::Tombstone(t.author.clone(), t.id.clone()),
            ));
            s.tombstones.insert((t.author.clone(), t.id.clone()), t);
        }
        for (k, v) in rows(Table::ReceiptMarks) {
            let m: ReceiptMarkRow = decode(Table::ReceiptMarks, k, v)?;
            s.marks.insert((m.conv_id, m.reader, m.kind), m.seq);
        }
        for (k, v) in rows(Table::PendingReceipts) {
            let r: PendingReceiptRow = decode(Table::PendingReceipts, k, v)?;
            s.timers.insert((
                r.at.plus_ms(offline_ttl_ms),
                Timer::PendingReceipt(r.recipient.clone(), r.conv_id.clone(), r.kind),
            ));
            s.pending_receipts
                .insert((r.recipient.clone(), r.conv_id.clone(), r.kind), r);
        }
        for (k, v) in rows(Table::PendingRetracts) {
            let r: PendingRetractRow = decode(Table::PendingRetracts, k, v)?;
            s.timers.insert((
                r.at.plus_ms(offline_ttl_ms),
                Timer::PendingRetract(r.recipient.clone(), r.id.clone()),
            ));
            s.pending_retracts
                .insert((r.recipient.clone(), r.id.clone()), r);
        }
        s.load_commerce(snapshot)?;
        crate::media::load(&mut s, snapshot)?;
        crate::push::load(&mut s, snapshot)?;
        Ok(s)
    }

    pub(crate) fn record<T: Serialize>(&mut self, table: Table, key: String, value: &T) {
        match serde_json::to_vec(value) {
            Ok(value) => self.batch.push(Mutation::Put { table, key, value }),
            Err(_) => self.poisoned = true,
        }
    }

    pub(crate) fn record_delete(&mut self, table: Table, key: String) {
        self.batch.push(Mutation::Delete { table, key });
    }

    pub(crate) fn take_batch(&mut self) -> Batch {
        std::mem::take(&mut self.batch)
    }

    // ---- meta

    pub(crate) fn put_meta(&mut self, key: &str, value: String) {
        self.record(Table::Meta, key.to_owned(), &value);
        self.meta.insert(key.to_owned(), value);
    }

    pub(crate) fn next_friendship_id(&mut self) -> FriendshipId {
        let next = self
            .meta
            .get(meta::NEXT_FRIENDSHIP_ID)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(1);
        self.put_meta(meta::NEXT_FRIENDSHIP_ID, (next + 1).to_string());
        FriendshipId(next)
    }

    // ---- accounts

    fn index_account(&mut self, a: AccountRow) {
        self.by_alias.insert(a.alias_id.clone(), a.uuid.clone());
        self.by_ed25519
            .insert(a.ed25519_public_key.0, a.uuid.clone());
        self.by_x25519.insert(a.x25519_public_key.0, a.uuid.clone());
        self.accounts.insert(a.uuid.clone(), a);
    }

    pub(crate) fn put_account(&mut self, a: AccountRow) {
        self.record(Table::Accounts, a.uuid.to_string(), &a);
        if let Some(old) = self.accounts.get(&a.uuid)
            && old.alias_id != a.alias_id
        {
            let old_alias = old.alias_id.clone();
            self.by_alias.remove(&old_alias);
        }
        self.index_account(a);
    }

    pub(crate) fn alias_of(&self, user: &UserUuid) -> Option<&AliasId> {
        self.accounts.get(user).map(|a| &a.alias_id)
    }

    // ---- friendships and conversations

    fn index_friendship(&mut self, f: FriendshipRow) {
        self.by_pair.insert(pair(&f.requester, &f.addressee), f.id);
        self.friendships.insert(f.id, f);
    }

    pub(crate) fn put_friendship(&mut self, f: FriendshipRow) {
        self.record(Table::Friendships, format!("{:020}", f.id.get()), &f);
        self.index_friendship(f);
    }

    fn index_conversation(&mut self, c: ConversationRow) {
        for m in &c.members {
            self.convs_of
                .entry(m.clone())
                .or_default()
                .insert(c.id.clone());
        }
        self.conversations.insert(c.id.clone(), c);
    }

    pub(crate) fn put_conversation(&mut self, c: ConversationRow) {
        self.record(Table::Conversations, c.id.to_string(), &c);
        match self.conversations.get_mut(&c.id) {
            // The hot path (every `msg` bumps `last_seq`): same members, so `convs_of` is
            // already right; replace the row in place without re-indexing or cloning keys.
            Some(old) if old.members == c.members => *old = c,
            _ => self.index_conversation(c),
        }
    }

    // ---- messages

    pub(crate) fn put_message(&mut self, m: MessageRow, offline_ttl_ms: u64) {
        self.record(
            Table::Messages,
            message_key(&m.recipient, &m.conv_id, m.seq),
            &m,
        );
        self.timers.insert((
            m.at.plus_ms(offline_ttl_ms),
            Timer::Message(m.recipient.clone(), m.conv_id.clone(), m.seq),
        ));
        self.queues
            .entry((m.recipient.clone(), m.conv_id.clone()))
            .or_default()
            .insert(m.seq, m);
    }

    pub(crate) fn delete_message(&mut self, recipient: &UserUuid, conv: &ConvId, seq: Seq) -> bool {
        let key = (recipient.clone(), conv.clone());
        let Some(q) = self.queues.get_mut(&key) else {
            return false;
        };
        if q.remove(&seq).is_none() {
            return false;
        }
        if q.is_empty() {
            self.queues.remove(&key);
        }
        self.record_delete(Table::Messages, message_key(recipient, conv, seq));
        true
    }

    /// Deletes every message queued for `recipient` in `conv` with seq <= `upto`.
    pub(crate) fn delete_messages_upto(&mut self, recipient: &UserUuid, conv: &ConvId, upto: Seq) {
        let seqs: Vec<Seq> = self
            .queues
            .get(&(recipient.clone(), conv.clone()))
            .map(|q| q.range(..=upto).map(|(s, _)| *s).collect())
            .unwrap_or_default();
        for s in seqs {
            self.delete_message(recipient, conv, s);
        }
    }

    // ---- tombstones

    pub(crate) fn put_tombstone(&mut self, t: TombstoneRow) {
        self.record(Table::Tombstones, tombstone_key(&t.author, &t.id), &t);
        self.timers.insert((
            t.expires_at,
            Timer::Tombstone(t.author.clone(), t.id.clone()),
        ));
        self.tombstones.insert((t.author.clone(), t.id.clone()), t);
    }

    pub(crate) fn delete_tombstone(&mut self, author: &UserUuid, id: &MessageId) {
        if self
            .tombstones
            .remove(&(author.clone(), id.clone()))
            .is_some()
        {
            self.record_delete(Table::Tombstones, tombstone_key(author, id));
        }
    }

    // ---- receipts

    pub(crate) fn mark(&self, conv: &ConvId, reader: &UserUuid, kind: ReceiptKind) -> Seq {
        self.marks
            .get(&(conv.clone(), reader.clone(), kind))
            .copied()
            .unwrap_or(Seq(0))
    }

    pub(crate) fn put_mark(
        &mut self,
        conv: &ConvId,
        reader: &UserUuid,
        kind: ReceiptKind,
        seq: Seq,
    ) {
        let row = ReceiptMarkRow {
            conv_id: conv.clone(),
            reader: reader.clone(),
            kind,
            seq,
        };
        self.record(Table::ReceiptMarks, mark_key(conv, reader, kind), &row);
        self.marks.insert((conv.clone(), reader.clone(), kind), seq);
    }

    pub(crate) fn put_pending_receipt(&mut self, r: PendingReceiptRow, offline_ttl_ms: u64) {
        self.record(
            Table::PendingReceipts,
            pending_receipt_key(&r.recipient, &r.conv_id, r.kind),
            &r,
        );
        self.timers.insert((
            r.at.plus_ms(offline_ttl_ms),
            Timer::PendingReceipt(r.recipient.clone(), r.conv_id.clone(), r.kind),
        ));
        self.pending_receipts
            .insert((r.recipient.clone(), r.conv_id.clone(), r.kind), r);
    }

    pub(crate) fn delete_pending_receipt(
        &mut self,
        recipient: &UserUuid,
        conv: &ConvId,
        kind: ReceiptKind,
    ) {
        if self
            .pending_receipts
            .remove(&(recipient.clone(), conv.clone(), kind))
            .is_some()
        {
            self.record_delete(
                Table::PendingReceipts,
                pending_receipt_key(recipient, conv, kind),
            );
        }
    }

    pub(crate) fn put_pending_retract(&mut self, r: PendingRetractRow, offline_ttl_ms: u64) {
        self.record(
            Table::PendingRetracts,
            tombstone_key(&r.recipient, &r.id),
            &r,
        );
        self.timers.insert((
            r.at.plus_ms(offline_ttl_ms),
            Timer::PendingRetract(r.recipient.clone(), r.id.clone()),
        ));
        self.pending_retracts
            .insert((r.recipient.clone(), r.id.clone()), r);
    }

    pub(crate) fn delete_pending_retract(&mut self, recipient: &UserUuid, id: &MessageId) {
        if self
            .pending_retracts
            .remove(&(recipient.clone(), id.clone()))
            .is_some()
        {
            self.record_delete(Table::PendingRetracts, tombstone_key(recipient, id));
        }
    }
}
