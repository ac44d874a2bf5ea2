//! The rows of the relay's durable state as they are stored, and how they are keyed and
//! decoded: accounts, friendships, conversations, queued messages, tombstones, receipt marks,
//! pending receipts and retractions, the meta keys; the timers the relay arms; the per-queue
//! and per-account usage counts. The caches over the store (`directory`, `relations`,
//! `queue`, `tombstones` ...) hold these rows; `state` composes the caches.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize, de::DeserializeOwned};
use wire::http::{FriendStatus, PublicKeyB64};
use wire::{AliasId, ConvId, FriendshipId, MessageId, Seq, UnixMs, UserUuid};

use crate::store::{Batch, RowKey, StoreError, Table};
use wire::json;

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
    /// When its alias was last bound by the registry shard (0: never; left out of the row
    /// then): a later bind's notice replaces the alias only over an earlier one.
    #[serde(default, skip_serializing_if = "is_zero_ms")]
    pub(crate) alias_at: UnixMs,
    /// The aliases it had before, oldest first (retired by binds: each still names the
    /// account, so a message addressed to it is taken), at most
    /// [`MAX_FORMER_ALIASES`](crate::limits::MAX_FORMER_ALIASES); left out of the row while
    /// empty. Every shard that reads the account knows them (the registry's alias table is
    /// the registry shard's alone).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) former_aliases: Vec<AliasId>,
}

impl AccountRow {
    /// Takes `alias`, bound at `at`: the one it had joins its former aliases.
    pub(crate) fn rebind(&mut self, alias: AliasId, at: UnixMs) {
        let old = std::mem::replace(&mut self.alias_id, alias);
        self.alias_at = at;
        if old != self.alias_id && !self.former_aliases.contains(&old) {
            self.former_aliases.push(old);
        }
        self.former_aliases.retain(|a| *a != self.alias_id);
        let over = self
            .former_aliases
            .len()
            .saturating_sub(crate::limits::MAX_FORMER_ALIASES);
        self.former_aliases.drain(..over);
    }

    /// Whether `alias` names this account: its alias or a former one.
    pub(crate) fn is_named(&self, alias: &AliasId) -> bool {
        self.alias_id == *alias || self.former_aliases.contains(alias)
    }
}

/// Whether a time is 0 (left out of its row).
#[allow(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if passes a reference"
)]
fn is_zero_ms(t: &UnixMs) -> bool {
    t.get() == 0
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
    /// Its revision at its pair's owner shard (one per write; 0 for rows written before
    /// revisions, left out of the row then): a member's shard applies a newer revision only
    /// (`crate::handoff::Contact`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) rev: u64,
}

/// Whether a revision is 0 (left out of its row).
#[allow(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if passes a reference"
)]
fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl From<FriendshipRow> for crate::handoff::Contact {
    fn from(f: FriendshipRow) -> Self {
        Self {
            id: f.id,
            requester: f.requester,
            addressee: f.addressee,
            status: f.status,
            conversation_id: f.conversation_id,
            created_at: f.created_at,
            rev: f.rev,
        }
    }
}

impl From<crate::handoff::Contact> for FriendshipRow {
    fn from(c: crate::handoff::Contact) -> Self {
        Self {
            id: c.id,
            requester: c.requester,
            addressee: c.addressee,
            status: c.status,
            conversation_id: c.conversation_id,
            created_at: c.created_at,
            rev: c.rev,
        }
    }
}

/// A two-member conversation and its seq counters. (Rows written before the queues were
/// indexed apart also carry a `queued` field, which is ignored: `queue_index` holds it now.)
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ConversationRow {
    pub(crate) id: ConvId,
    pub(crate) members: [UserUuid; 2],
    /// The last seq assigned (0 before the first message).
    pub(crate) last_seq: Seq,
    /// The last seq authored by `members[i]` (0 if none).
    pub(crate) last_authored: [Seq; 2],
    /// The last seq authored by `members[i]` that was handed to the other member's shard (0
    /// if none; left out of the row then): the `prev` of the next hand-off of that stream
    /// (`crate::handoff`).
    #[serde(default = "unhanded", skip_serializing_if = "never_handed")]
    pub(crate) handed: [Seq; 2],
}

/// No member's messages handed yet.
fn unhanded() -> [Seq; 2] {
    [Seq(0), Seq(0)]
}

/// Whether neither member's messages were ever handed to another shard.
fn never_handed(handed: &[Seq; 2]) -> bool {
    *handed == [Seq(0), Seq(0)]
}

/// What one member's queue of a conversation holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct QueueSummary {
    /// Messages queued.
    pub(crate) msgs: u64,
    /// Their bytes as the queue bounds count them (`queue::Queued::charge`).
    pub(crate) bytes: u64,
    /// The earliest acceptance time among them (0 when there are none).
    pub(crate) oldest: UnixMs,
}

impl QueueSummary {
    pub(crate) fn usage(self) -> Usage {
        Usage {
            msgs: usize::try_from(self.msgs).unwrap_or(usize::MAX),
            bytes: self.bytes,
        }
    }
}

impl ConversationRow {
    pub(crate) fn index_of(&self, user: &UserUuid) -> Option<usize> {
        self.members.iter().position(|m| m == user)
    }
    pub(crate) fn other(&self, user: &UserUuid) -> Option<&UserUuid> {
        self.index_of(user).map(|i| &self.members[1 - i])
    }

    /// The stored row: exactly `serde_json`'s encoding of `self` ([`wire::json`]).
    fn write_json(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"id\":");
        json::id(out, self.id.as_str());
        out.extend_from_slice(b",\"members\":[");
        json::uuid(out, &self.members[0]);
        out.push(b',');
        json::uuid(out, &self.members[1]);
        out.extend_from_slice(b"],\"last_seq\":");
        json::uint(out, self.last_seq.get());
        out.extend_from_slice(b",\"last_authored\":[");
        json::uint(out, self.last_authored[0].get());
        out.push(b',');
        json::uint(out, self.last_authored[1].get());
        out.push(b']');
        if !never_handed(&self.handed) {
            out.extend_from_slice(b",\"handed\":[");
            json::uint(out, self.handed[0].get());
            out.push(b',');
            json::uint(out, self.handed[1].get());
            out.push(b']');
        }
        out.push(b'}');
    }
}

/// An undelivered message, held for `recipient` (the stored row, as decoded at load; in memory
/// it is a `queue::Queued` in its conversation's queue).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct MessageRow {
    pub(crate) recipient: UserUuid,
    pub(crate) conv_id: ConvId,
    pub(crate) seq: Seq,
    pub(crate) id: MessageId,
    pub(crate) from: UserUuid,
    pub(crate) crypto_v: Option<u32>,
    pub(crate) payload: wire::frames::Payload,
    pub(crate) at: UnixMs,
}

/// The stored form of a queued message: the same fields as [`MessageRow`] (what load decodes),
/// borrowed from the conversation and the `queue::Queued` message.
#[derive(Serialize)]
pub(crate) struct MessageRecord<'a> {
    pub(crate) recipient: &'a UserUuid,
    pub(crate) conv_id: &'a ConvId,
    pub(crate) seq: Seq,
    pub(crate) id: &'a MessageId,
    pub(crate) from: &'a UserUuid,
    pub(crate) crypto_v: Option<u32>,
    pub(crate) payload: &'a str,
    pub(crate) at: UnixMs,
}

impl MessageRecord<'_> {
    /// The stored row: exactly `serde_json`'s encoding of `self` ([`wire::json`]).
    pub(crate) fn write_json(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"recipient\":");
        json::uuid(out, self.recipient);
        out.extend_from_slice(b",\"conv_id\":");
        json::id(out, self.conv_id.as_str());
        out.extend_from_slice(b",\"seq\":");
        json::uint(out, self.seq.get());
        out.extend_from_slice(b",\"id\":");
        json::id(out, self.id.as_str());
        out.extend_from_slice(b",\"from\":");
        json::uuid(out, self.from);
        out.extend_from_slice(b",\"crypto_v\":");
        json::opt_uint(out, self.crypto_v.map(u64::from));
        out.extend_from_slice(b",\"payload\":");
        json::string(out, self.payload);
        out.extend_from_slice(b",\"at\":");
        json::uint(out, self.at.get());
        out.push(b'}');
    }
}

/// What the relay remembers of an accepted message id after the message itself is gone (the
/// stored row, as decoded at load).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TombstoneRow {
    pub(crate) author: UserUuid,
    pub(crate) id: MessageId,
    pub(crate) conv_id: ConvId,
    pub(crate) seq: Seq,
    pub(crate) expires_at: UnixMs,
    pub(crate) retracted: bool,
}

/// A tombstone in memory, keyed by `(conversation, id)` in
/// [`State::tombstones`](crate::state::State::tombstones) (so the key is not stored twice).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tombstone {
    pub(crate) author: UserUuid,
    pub(crate) seq: Seq,
    pub(crate) expires_at: UnixMs,
    pub(crate) retracted: bool,
}

/// The serialised form of a [`Tombstone`]: the same fields as [`TombstoneRow`], borrowed.
#[derive(Serialize)]
pub(crate) struct TombstoneRecord<'a> {
    pub(crate) author: &'a UserUuid,
    pub(crate) id: &'a MessageId,
    pub(crate) conv_id: &'a ConvId,
    pub(crate) seq: Seq,
    pub(crate) expires_at: UnixMs,
    pub(crate) retracted: bool,
}

impl TombstoneRecord<'_> {
    /// The stored row: exactly `serde_json`'s encoding of `self` ([`wire::json`]).
    pub(crate) fn write_json(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"author\":");
        json::uuid(out, self.author);
        out.extend_from_slice(b",\"id\":");
        json::id(out, self.id.as_str());
        out.extend_from_slice(b",\"conv_id\":");
        json::id(out, self.conv_id.as_str());
        out.extend_from_slice(b",\"seq\":");
        json::uint(out, self.seq.get());
        out.extend_from_slice(b",\"expires_at\":");
        json::uint(out, self.expires_at.get());
        out.extend_from_slice(b",\"retracted\":");
        json::boolean(out, self.retracted);
        out.push(b'}');
    }
}

/// Receipt kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ReceiptKind {
    Delivered,
    Read,
}

impl ReceiptKind {
    /// 0 for `delivered`, 1 for `read`.
    pub(crate) fn index(self) -> usize {
        match self {
            Self::Delivered => 0,
            Self::Read => 1,
        }
    }

    /// The frame type: `delivered` or `read`.
    pub(crate) fn as_str(self) -> &'static str {
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

/// The highest seq of a `kind` receipt that `author`'s shard took from another shard for
/// `author` in `conv`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ReceiptTakenRow {
    pub(crate) author: UserUuid,
    pub(crate) conv_id: ConvId,
    pub(crate) kind: ReceiptKind,
    pub(crate) seq: Seq,
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
    /// Where older relays kept the JWT signing key (deleted at startup: keys live in files).
    pub(crate) const JWT_SIGNING_KEY: &str = "jwt_signing_key";
    pub(crate) const BOOT_COUNT: &str = "boot_count";
    pub(crate) const NEXT_FRIENDSHIP_ID: &str = "next_friendship_id";

    /// The key of a counter of shard `shard`: `base` for shard 0 (the key an unsharded relay
    /// writes), `base/shard` for the others.
    pub(crate) fn of_shard(base: &str, shard: crate::handoff::ShardId) -> String {
        if shard.0 == 0 {
            base.to_owned()
        } else {
            format!("{base}/{}", shard.0)
        }
    }
    /// Present once every account has its `account_index` rows (written by the first start of
    /// a relay that reads accounts lazily, after it indexed the stored accounts).
    pub(crate) const ACCOUNT_INDEX: &str = "account_index";
    /// Present once every non-empty queue has its `queue_index` row (written by the first
    /// start of a relay that indexes the queues apart, after it summarised the stored messages).
    pub(crate) const QUEUE_INDEX: &str = "queue_index";
    /// Present once every friendship has its `contacts` rows (written by the first start of a
    /// relay that reads contacts lazily, after it indexed the stored friendships).
    pub(crate) const CONTACTS: &str = "contacts";
    /// Present once every tombstone is keyed by its conversation (`conv/id/author`; written by
    /// the first start of a relay that dedups per conversation, after it rekeyed the rows of
    /// older relays, which were keyed by author).
    pub(crate) const TOMBSTONES_BY_CONVERSATION: &str = "tombstones_by_conversation";
    /// The offline TTL (ms) the `queue_index` rows' expiries were written under: a start under
    /// another TTL (or of a store from before queues had an expiry, without this row) rewrites
    /// them.
    pub(crate) const QUEUE_EXPIRY_TTL: &str = "queue_expiry_ttl";
}

/// Deadlines kept in one ordered set; entries are checked against the state when they fire.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Timer {
    PendingReceipt(UserUuid, ConvId, ReceiptKind),
    PendingRetract(UserUuid, ConvId, MessageId),
    /// A media upload's or object's expiry (`crate::media`).
    Media(wire::UploadId),
    /// A payment order's expiry (`crate::commerce`).
    Order(wire::OrderId),
    /// The end of a kept `payment_confirmed`'s redelivery, by its buyer and order.
    Confirm(UserUuid, wire::OrderId),
    /// A used credential's expiry (`crate::credential`), by its spent-row key.
    Spent(String),
}

/// A map keyed by `(a, b)`, held as two levels so that a lookup borrows both parts of the key
/// (a tuple-keyed `BTreeMap` needs an owned tuple, i.e. two `String` clones, per lookup) while
/// iterating in the same `(a, b)` order. Empty inner maps are removed.
#[derive(Debug)]
pub(crate) struct PairMap<A, B, V>(BTreeMap<A, BTreeMap<B, V>>);

impl<A, B, V> Default for PairMap<A, B, V> {
    fn default() -> Self {
        Self(BTreeMap::new())
    }
}

impl<A: Ord + Clone, B: Ord, V> PairMap<A, B, V> {
    pub(crate) fn get(&self, a: &A, b: &B) -> Option<&V> {
        self.0.get(a)?.get(b)
    }

    pub(crate) fn get_mut(&mut self, a: &A, b: &B) -> Option<&mut V> {
        self.0.get_mut(a)?.get_mut(b)
    }

    /// The inner map of `a`, created (cloning `a`) when absent.
    pub(crate) fn inner_mut(&mut self, a: &A) -> &mut BTreeMap<B, V> {
        if !self.0.contains_key(a) {
            self.0.insert(a.clone(), BTreeMap::new());
        }
        self.0.get_mut(a).expect("inserted above")
    }
}

/// Messages and bytes (`queue::Queued::charge`) of some queues.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Usage {
    pub(crate) msgs: usize,
    pub(crate) bytes: u64,
}

impl Usage {
    fn add(&mut self, u: Self) {
        self.msgs += u.msgs;
        self.bytes += u.bytes;
    }

    fn sub(&mut self, u: Self) {
        self.msgs -= u.msgs;
        self.bytes -= u.bytes;
    }
}

/// Undelivered messages counted per recipient (all its conversations), per sender (all its
/// recipients) and in total, kept exact by every queue insert and removal; accounts with
/// nothing queued hold no entry.
#[derive(Debug, Default)]
pub(crate) struct Backlog {
    pub(crate) by_recipient: BTreeMap<UserUuid, Usage>,
    pub(crate) by_sender: BTreeMap<UserUuid, Usage>,
    pub(crate) total: Usage,
}

impl Backlog {
    pub(crate) fn add(&mut self, recipient: &UserUuid, sender: &UserUuid, m: Usage) {
        if m.msgs == 0 {
            return;
        }
        self.by_recipient
            .entry(recipient.clone())
            .or_default()
            .add(m);
        self.by_sender.entry(sender.clone()).or_default().add(m);
        self.total.add(m);
    }

    /// Takes `old` off and adds `new` (one lookup per map): a queue's change of summary. An
    /// account whose count falls to zero loses its entry.
    pub(crate) fn replace(
        &mut self,
        recipient: &UserUuid,
        sender: &UserUuid,
        old: Usage,
        new: Usage,
    ) {
        for (map, user) in [
            (&mut self.by_recipient, recipient),
            (&mut self.by_sender, sender),
        ] {
            if let Some(u) = map.get_mut(user) {
                u.sub(old);
                u.add(new);
                if u.msgs == 0 {
                    debug_assert_eq!(u.bytes, 0);
                    map.remove(user);
                }
            } else if new.msgs > 0 {
                map.insert(user.clone(), new);
            }
        }
        self.total.sub(old);
        self.total.add(new);
    }

    /// What `user` has queued for it.
    #[inline]
    pub(crate) fn of_recipient(&self, user: &UserUuid) -> Usage {
        self.by_recipient.get(user).copied().unwrap_or_default()
    }

    /// What `user` has queued for others.
    #[inline]
    pub(crate) fn of_sender(&self, user: &UserUuid) -> Usage {
        self.by_sender.get(user).copied().unwrap_or_default()
    }
}

/// Digits of a zero-padded `u64` (`{:020}`): keys sort numerically.
const SEQ_DIGITS: usize = 20;

/// Writes `parts` joined with `/`, then `/` + the zero-padded `seq` if any, into a batch's key
/// (these keys are written for every routed message, with no allocation of their own).
fn write_row_key(k: &mut RowKey<'_>, parts: &[&str], seq: Option<Seq>) {
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            k.push('/');
        }
        k.push_str(p);
    }
    if let Some(seq) = seq {
        // `/{:020}` without the formatting machinery: a `u64` has at most 20 digits.
        let mut buf = [b'0'; SEQ_DIGITS];
        json::digits(&mut buf, seq.get());
        k.push('/');
        k.push_str(std::str::from_utf8(&buf).unwrap_or_default());
    }
}

/// An outbox row: a message this shard decided for a user of shard `to`, not yet applied
/// there (`crate::handoff`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct OutboxRow {
    pub(crate) to: u16,
    pub(crate) recipient: UserUuid,
    pub(crate) conv_id: ConvId,
    pub(crate) seq: Seq,
    /// The previous seq of the same stream (0 for its first).
    pub(crate) prev: Seq,
    pub(crate) message: crate::handoff::Message,
}

/// An inbox mark: the stream `recipient/conv` from shard `owner` is applied through `through`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct InboxMarkRow {
    pub(crate) owner: u16,
    pub(crate) recipient: UserUuid,
    pub(crate) conv_id: ConvId,
    pub(crate) through: Seq,
}

/// Writes the key of the outbox row `shard/recipient/conv/seq`.
pub(crate) fn write_outbox_key(
    k: &mut RowKey<'_>,
    to: u16,
    recipient: &UserUuid,
    conv: &ConvId,
    seq: Seq,
) {
    let shard = shard_part(to);
    write_row_key(k, &[&shard, recipient.as_str(), conv.as_str()], Some(seq));
}

/// The first part of a row key kept per destination shard: the shard zero-padded to five
/// digits, so that a destination's rows are one prefix in shard order.
fn shard_part(to: u16) -> String {
    format!("{to:05}")
}

/// A notice row: a receipt or retraction for a user of shard `to`, numbered `version`, until
/// that shard took it (`crate::handoff::Notices`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct NoticeRow {
    pub(crate) to: u16,
    pub(crate) version: u64,
    pub(crate) notice: crate::handoff::Notice,
}

/// Writes the key of the notice row `shard/user/conv/what` of `key` for shard `to`.
pub(crate) fn write_notice_key(k: &mut RowKey<'_>, to: u16, key: &crate::handoff::NoticeKey) {
    let shard = shard_part(to);
    let parts = [&shard, key.user.as_str(), &key.what];
    write_row_key(k, &parts, None);
}

/// Writes the key of the inbox mark `recipient/conv`.
pub(crate) fn write_inbox_mark_key(k: &mut RowKey<'_>, recipient: &UserUuid, conv: &ConvId) {
    write_row_key(k, &[recipient.as_str(), conv.as_str()], None);
}

/// Writes the key of the message row `recipient/conv/seq`.
pub(crate) fn write_message_key(k: &mut RowKey<'_>, recipient: &UserUuid, conv: &ConvId, seq: Seq) {
    write_row_key(k, &[recipient.as_str(), conv.as_str()], Some(seq));
}

/// The key of the message row `recipient/conv/seq`.
pub(crate) fn message_key(recipient: &UserUuid, conv: &ConvId, seq: Seq) -> String {
    let mut key = String::new();
    write_message_key(&mut RowKey::into(&mut key), recipient, conv, seq);
    key
}

/// Writes the key of the tombstone row `conv/id/author`.
pub(crate) fn write_tombstone_key(
    k: &mut RowKey<'_>,
    conv: &ConvId,
    id: &MessageId,
    author: &UserUuid,
) {
    write_row_key(k, &[conv.as_str(), id.as_str(), author.as_str()], None);
}

/// The key of the pending retraction row of `r`.
pub(crate) fn pending_retract_key(r: &PendingRetractRow) -> String {
    let mut key = String::new();
    write_pending_retract_key(&mut RowKey::into(&mut key), &r.recipient, &r.conv_id, &r.id);
    key
}

/// Writes the key of the pending retraction row `recipient/conv/id` (a message id is its
/// conversation's: two conversations may each have one).
pub(crate) fn write_pending_retract_key(
    k: &mut RowKey<'_>,
    recipient: &UserUuid,
    conv: &ConvId,
    id: &MessageId,
) {
    write_row_key(k, &[recipient.as_str(), conv.as_str(), id.as_str()], None);
}

/// Writes the key of the receipt mark row `conv/reader/kind`.
pub(crate) fn write_mark_key(
    k: &mut RowKey<'_>,
    conv: &ConvId,
    reader: &UserUuid,
    kind: ReceiptKind,
) {
    write_row_key(k, &[conv.as_str(), reader.as_str(), kind.as_str()], None);
}

/// Writes the key of the pending receipt row `recipient/conv/kind`.
pub(crate) fn write_pending_receipt_key(
    k: &mut RowKey<'_>,
    recipient: &UserUuid,
    conv: &ConvId,
    kind: ReceiptKind,
) {
    write_row_key(k, &[recipient.as_str(), conv.as_str(), kind.as_str()], None);
}

/// Writes the key of the receipt-taken row `author/conv/kind`.
pub(crate) fn write_receipt_taken_key(
    k: &mut RowKey<'_>,
    author: &UserUuid,
    conv: &ConvId,
    kind: ReceiptKind,
) {
    write_row_key(k, &[author.as_str(), conv.as_str(), kind.as_str()], None);
}

/// Records the row of conversation `c` in `batch`. `counter_stored` is false only for the
/// PLANTED BUG (test-only) `SeqNotPersisted`: the row is stored without its seq counter (as
/// it was created), which stays in memory only, so a restart reuses seqs.
pub(crate) fn push_conversation(batch: &mut Batch, c: &ConversationRow, counter_stored: bool) {
    let key = |k: &mut RowKey<'_>| k.push_str(c.id.as_str());
    if counter_stored {
        batch.put_row(Table::Conversations, key, |out| c.write_json(out));
    } else {
        let stale = ConversationRow {
            last_seq: Seq(0),
            last_authored: [Seq(0), Seq(0)],
            ..c.clone()
        };
        batch.put_row(Table::Conversations, key, |out| stale.write_json(out));
    }
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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use wire::Seq;

    use super::*;

    fn uuid() -> impl Strategy<Value = UserUuid> {
        any::<[u8; 16]>().prop_map(UserUuid::from_random_bytes)
    }

    fn token() -> impl Strategy<Value = String> {
        "[A-Za-z0-9._:-]{1,128}"
    }

    proptest! {
        /// The hand-written rows are `serde_json`'s bytes: stored rows did not change.
        #[test]
        fn message_rows_are_serde_json(
            (recipient, from) in (uuid(), uuid()),
            (conv, id) in (token(), token()),
            (seq, at, crypto_v) in (any::<u64>(), any::<u64>(), any::<Option<u32>>()),
            payload in any::<String>(),
        ) {
            let m = MessageRow {
                recipient,
                conv_id: ConvId::parse(&conv).unwrap(),
                seq: Seq(seq),
                id: MessageId::parse(&id).unwrap(),
                from,
                crypto_v,
                payload: payload.into(),
                at: UnixMs(at),
            };
            let record = MessageRecord {
                recipient: &m.recipient,
                conv_id: &m.conv_id,
                seq: m.seq,
                id: &m.id,
                from: &m.from,
                crypto_v: m.crypto_v,
                payload: &m.payload,
                at: m.at,
            };
            let mut out = Vec::new();
            record.write_json(&mut out);
            prop_assert_eq!(&out, &serde_json::to_vec(&m).unwrap());
            prop_assert_eq!(decode::<MessageRow>(Table::Messages, "k", &out).unwrap(), m);
        }

        #[test]
        fn tombstone_rows_are_serde_json(
            author in uuid(),
            (conv, id) in (token(), token()),
            (seq, expires_at, retracted) in (any::<u64>(), any::<u64>(), any::<bool>()),
        ) {
            let (id, conv_id) = (MessageId::parse(&id).unwrap(), ConvId::parse(&conv).unwrap());
            let record = TombstoneRecord {
                author: &author,
                id: &id,
                conv_id: &conv_id,
                seq: Seq(seq),
                expires_at: UnixMs(expires_at),
                retracted,
            };
            let mut out = Vec::new();
            record.write_json(&mut out);
            prop_assert_eq!(out, serde_json::to_vec(&record).unwrap());
        }

        #[test]
        fn conversation_rows_are_serde_json(
            members in (uuid(), uuid()),
            conv in token(),
            seqs in any::<(u64, u64, u64)>(),
            handed in prop_oneof![Just((0, 0)), any::<(u64, u64)>()],
        ) {
            let c = ConversationRow {
                id: ConvId::parse(&conv).unwrap(),
                members: [members.0, members.1],
                last_seq: Seq(seqs.0),
                last_authored: [Seq(seqs.1), Seq(seqs.2)],
                handed: [Seq(handed.0), Seq(handed.1)],
            };
            let mut out = Vec::new();
            c.write_json(&mut out);
            prop_assert_eq!(out, serde_json::to_vec(&c).unwrap());
        }
    }

    #[test]
    fn keys_written_in_place_are_the_documented_ones() {
        let r = UserUuid::parse("00000000-0000-4000-8000-000000000001").unwrap();
        let c = ConvId::parse("c-1").unwrap();
        let id = MessageId::parse("m-1").unwrap();
        let mut b = Batch::new();
        b.delete_row(Table::Messages, |k| write_message_key(k, &r, &c, Seq(42)));
        b.delete_row(Table::Messages, |k| {
            write_message_key(k, &r, &c, Seq(u64::MAX));
        });
        b.delete_row(Table::Tombstones, |k| write_tombstone_key(k, &c, &id, &r));
        b.delete_row(Table::PendingRetracts, |k| {
            write_pending_retract_key(k, &r, &c, &id);
        });
        b.delete_row(Table::ReceiptMarks, |k| {
            write_mark_key(k, &c, &r, ReceiptKind::Read);
        });
        b.delete_row(Table::PendingReceipts, |k| {
            write_pending_receipt_key(k, &r, &c, ReceiptKind::Delivered);
        });
        b.delete_row(Table::Outbox, |k| write_outbox_key(k, 3, &r, &c, Seq(7)));
        b.delete_row(Table::InboxMarks, |k| write_inbox_mark_key(k, &r, &c));
        let notice = crate::handoff::NoticeKey {
            user: r.clone(),
            what: format!("{c}/read"),
        };
        b.delete_row(Table::Notices, |k| write_notice_key(k, 12, &notice));
        b.delete_row(Table::ReceiptsTaken, |k| {
            write_receipt_taken_key(k, &r, &c, ReceiptKind::Read);
        });
        let keys: Vec<_> = b.iter().filter_map(|m| m.key()).collect();
        assert_eq!(
            keys,
            [
                format!("{r}/{c}/{:020}", 42),
                format!("{r}/{c}/{}", u64::MAX),
                format!("{c}/{id}/{r}"),
                format!("{r}/{c}/{id}"),
                format!("{c}/{r}/read"),
                format!("{r}/{c}/delivered"),
                format!("00003/{r}/{c}/{:020}", 7),
                format!("{r}/{c}"),
                format!("00012/{r}/{c}/read"),
                format!("{r}/{c}/read"),
            ]
        );
    }
}
