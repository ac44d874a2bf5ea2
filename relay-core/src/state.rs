//! The relay's durable working state: plain maps behind `&mut self`, loaded from the store at
//! startup (but for the caches over the lazy tables — accounts, conversations and contacts,
//! tombstones, queues — read when needed), and the row-level mutation batch of the input being
//! handled.
//!
//! Every `put_*` / `delete_*` updates the maps and indexes **and** records the matching
//! [`Mutation`](crate::store::Mutation); the dispatcher commits the batch before releasing any output of the input.
//!
//! Over 900 lines on purpose: each map, its derived indexes, its load from the store and its
//! `put_*`/`delete_*` must change together (a write that updates the map but forgets the
//! mutation, or an index rebuilt differently on load, is a durability bug), so they stay side by
//! side; the commerce tables live apart in `commerce_state`, the queues (their index, reads,
//! writes and expiry) in `queue`, the accounts in `directory`, the conversations and contacts
//! in `relations`.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize, de::DeserializeOwned};
use wire::http::{FriendStatus, PublicKeyB64};
use wire::{AliasId, ConvId, FriendshipId, MessageId, Seq, UnixMs, UserUuid};

use crate::queue::Queued;
use crate::store::{Batch, RowKey, Snapshot, StoreError, Table};
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
}

/// What one member's queue of a conversation holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct QueueSummary {
    /// Messages queued.
    pub(crate) msgs: u64,
    /// Their bytes as the queue bounds count them ([`Queued::charge`]).
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
        out.extend_from_slice(b"]}");
    }
}

/// An undelivered message, held for `recipient` (the stored row, as decoded at load; in memory
/// it is a [`Queued`] in its conversation's queue).
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
/// borrowed from the conversation and the [`Queued`] message.
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

/// A tombstone in memory, keyed by `(author, id)` in [`State::tombstones`] (so the key is not
/// stored twice).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tombstone {
    pub(crate) conv_id: ConvId,
    pub(crate) seq: Seq,
    pub(crate) expires_at: UnixMs,
    pub(crate) retracted: bool,
}

/// The serialised form of a [`Tombstone`]: the same fields as [`TombstoneRow`], borrowed.
#[derive(Serialize)]
struct TombstoneRecord<'a> {
    author: &'a UserUuid,
    id: &'a MessageId,
    conv_id: &'a ConvId,
    seq: Seq,
    expires_at: UnixMs,
    retracted: bool,
}

impl TombstoneRecord<'_> {
    /// The stored row: exactly `serde_json`'s encoding of `self` ([`wire::json`]).
    fn write_json(&self, out: &mut Vec<u8>) {
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
    /// Where older relays kept the JWT signing key (deleted at startup: keys live in files).
    pub(crate) const JWT_SIGNING_KEY: &str = "jwt_signing_key";
    pub(crate) const BOOT_COUNT: &str = "boot_count";
    pub(crate) const NEXT_FRIENDSHIP_ID: &str = "next_friendship_id";
    /// Present once every account has its `account_index` rows (written by the first start of
    /// a relay that reads accounts lazily, after it indexed the stored accounts).
    pub(crate) const ACCOUNT_INDEX: &str = "account_index";
    /// Present once every non-empty queue has its `queue_index` row (written by the first
    /// start of a relay that indexes the queues apart, after it summarised the stored messages).
    pub(crate) const QUEUE_INDEX: &str = "queue_index";
    /// Present once every friendship has its `contacts` rows (written by the first start of a
    /// relay that reads contacts lazily, after it indexed the stored friendships).
    pub(crate) const CONTACTS: &str = "contacts";
    /// The offline TTL (ms) the `queue_index` rows' expiries were written under: a start under
    /// another TTL (or of a store from before queues had an expiry, without this row) rewrites
    /// them.
    pub(crate) const QUEUE_EXPIRY_TTL: &str = "queue_expiry_ttl";
}

/// Deadlines kept in one ordered set; entries are checked against the state when they fire.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Timer {
    PendingReceipt(UserUuid, ConvId, ReceiptKind),
    PendingRetract(UserUuid, MessageId),
    /// A media upload's or object's expiry (`crate::media`).
    Media(wire::UploadId),
    /// A payment order's expiry (`crate::commerce`).
    Order(wire::OrderId),
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

/// All durable state plus its indexes.
#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) meta: BTreeMap<String, String>,
    /// The accounts in memory and their names (`crate::directory`; the rest are in the
    /// store).
    pub(crate) directory: crate::directory::Directory,
    /// The conversations and contact lists in memory (`crate::relations`; the rest are in
    /// the store).
    pub(crate) relations: crate::relations::Relations,
    /// What every non-empty queue holds, by recipient and conversation (`crate::queue`; all
    /// of it in memory: the queue bounds need it).
    pub(crate) queued: crate::queue_index::QueueIndex,
    /// (author, message id) -> tombstone, for the authors whose sets are in memory
    /// (`crate::tombstones`; the rest are in the store).
    pub(crate) tombstones: crate::tombstones::Cache,
    pub(crate) pending_receipts: BTreeMap<(UserUuid, ConvId, ReceiptKind), PendingReceiptRow>,
    pub(crate) pending_retracts: BTreeMap<(UserUuid, MessageId), PendingRetractRow>,
    pub(crate) timers: BTreeSet<(UnixMs, Timer)>,
    /// What is queued per recipient, per sender and in total (the queue bounds).
    pub(crate) backlog: Backlog,
    /// The queues in memory (`crate::queue`; the rest are in the store).
    pub(crate) queues: crate::queue::Queues,
    /// Media uploads and objects (`crate::media`).
    pub(crate) media: crate::media::MediaState,
    /// Push targets (`crate::push`).
    pub(crate) push: crate::push::PushState,
    /// Channels, orders, payments and sold aliases (`crate::commerce`).
    pub(crate) commerce: crate::commerce_state::Commerce,
    /// Used single-use credentials, until they expire (`crate::credential`).
    pub(crate) spent: crate::credential::Spent,
    /// Mutations of the input being handled (its buffers reused from input to input).
    pub(crate) batch: Batch,
    /// Set when a record failed to serialise: the next commit is refused (fail-stop).
    pub(crate) poisoned: bool,
    /// `Config::planted_bug`, for the planted bugs that live here (test-only).
    #[cfg(feature = "planted-bugs")]
    pub(crate) planted_bug: Option<crate::PlantedBug>,
}

/// The entries of the caches over the store that a batch wrote (one per write): they stay in
/// memory until the batch is durable ([`crate::lru`]).
#[derive(Debug, Default)]
pub(crate) struct Pins {
    accounts: Vec<UserUuid>,
    conversations: Vec<ConvId>,
    contacts: Vec<UserUuid>,
    tombstones: Vec<UserUuid>,
    queues: Vec<crate::queue::QueueKey>,
    /// The earliest expiry of the messages the batch wrote: the expiry sweep is armed for it
    /// once the batch is durable (`crate::queue`).
    expiry: Option<UnixMs>,
}

/// Messages and bytes ([`Queued::charge`]) of some queues.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Usage {
    pub(crate) msgs: usize,
    pub(crate) bytes: u64,
}

impl Usage {
    pub(crate) fn of(m: &Queued) -> Self {
        Self {
            msgs: 1,
            bytes: m.charge(),
        }
    }

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
    pub(crate) fn of_recipient(&self, user: &UserUuid) -> Usage {
        self.by_recipient.get(user).copied().unwrap_or_default()
    }

    /// What `user` has queued for others.
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

/// Writes the key of the message row `recipient/conv/seq`.
pub(crate) fn write_message_key(k: &mut RowKey<'_>, recipient: &UserUuid, conv: &ConvId, seq: Seq) {
    write_row_key(k, &[recipient.as_str(), conv.as_str()], Some(seq));
}

/// Writes the key of the tombstone (or pending retraction) row `author/id`.
fn write_tombstone_key(k: &mut RowKey<'_>, author: &UserUuid, id: &MessageId) {
    write_row_key(k, &[author.as_str(), id.as_str()], None);
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
fn write_pending_receipt_key(
    k: &mut RowKey<'_>,
    recipient: &UserUuid,
    conv: &ConvId,
    kind: ReceiptKind,
) {
    write_row_key(k, &[recipient.as_str(), conv.as_str(), kind.as_str()], None);
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

impl State {
    /// Rebuilds the state and its indexes from a snapshot (of the eager tables: the queues'
    /// counts come from [`State::index_queues`], once the summaries are known).
    pub(crate) fn load(snapshot: &Snapshot, offline_ttl_ms: u64) -> Result<Self, StoreError> {
        let mut s = Self::default();
        let rows = |t: Table| snapshot.get(&t).into_iter().flat_map(|m| m.iter());
        for (k, v) in rows(Table::Meta) {
            s.meta.insert(k.clone(), decode(Table::Meta, k, v)?);
        }
        for (k, v) in rows(Table::QueueIndex) {
            s.queued.load(k, v)?;
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
        crate::credential::load(&mut s, snapshot)?;
        Ok(s)
    }

    /// Records the row `key` of `table`, serialised by serde; a record that cannot be encoded
    /// poisons the batch (the next commit is refused).
    pub(crate) fn record<T: Serialize>(&mut self, table: Table, key: &str, value: &T) {
        self.record_keyed(table, |k| k.push_str(key), value);
    }

    /// [`State::record`] with the key written in place by `key`.
    pub(crate) fn record_keyed<T: Serialize>(
        &mut self,
        table: Table,
        key: impl FnOnce(&mut RowKey<'_>),
        value: &T,
    ) {
        let encoded = self.batch.try_put_row(table, key, |out| {
            serde_json::to_writer(out, value).map_err(|_| ())
        });
        if encoded.is_err() {
            self.poisoned = true;
        }
    }

    pub(crate) fn record_delete(&mut self, table: Table, key: &str) {
        self.batch.delete(table, key);
    }

    // ---- meta

    pub(crate) fn put_meta(&mut self, key: &str, value: String) {
        self.record(Table::Meta, key, &value);
        self.meta.insert(key.to_owned(), value);
    }

    pub(crate) fn delete_meta(&mut self, key: &str) {
        self.record_delete(Table::Meta, key);
        self.meta.remove(key);
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

    // ---- the caches over the store

    /// Hands the cache entries written since the last move to `batch`'s pins.
    pub(crate) fn move_written(&mut self, batch: &mut Pins) {
        self.directory.move_written(&mut batch.accounts);
        self.relations
            .move_written(&mut batch.conversations, &mut batch.contacts);
        self.tombstones.move_written(&mut batch.tombstones);
        self.queues.move_written(&mut batch.queues);
        self.queues.sweep.move_written(&mut batch.expiry);
    }

    /// The writes since the last [`State::move_written`] are durable.
    pub(crate) fn unpin_written(&mut self) {
        self.directory.unpin_written();
        self.relations.unpin_written();
        self.tombstones.unpin_written();
        self.queues.unpin_written();
        self.queues.sweep.arm_written();
    }

    /// A batch whose writes pinned `batch` is durable.
    pub(crate) fn unpin(&mut self, batch: Pins) {
        self.directory.unpin(batch.accounts);
        self.relations.unpin(batch.conversations, batch.contacts);
        self.tombstones.unpin(batch.tombstones);
        self.queues.unpin(batch.queues);
        self.queues.sweep.arm(batch.expiry);
    }

    /// Evicts what the caches hold beyond their bounds (only what no batch in flight wrote).
    pub(crate) fn evict(&mut self) {
        self.directory.evict();
        self.relations.evict();
        self.tombstones.evict();
        self.queues.evict();
    }

    // ---- tombstones

    /// Writes `(author, id)`'s tombstone (the author's set must be in memory) with its expiry.
    pub(crate) fn put_tombstone(&mut self, author: &UserUuid, id: MessageId, t: Tombstone) {
        let record = TombstoneRecord {
            author,
            id: &id,
            conv_id: &t.conv_id,
            seq: t.seq,
            expires_at: t.expires_at,
            retracted: t.retracted,
        };
        self.batch.put_expiring_row(
            Table::Tombstones,
            |k| write_tombstone_key(k, author, &id),
            |out| record.write_json(out),
            t.expires_at.get(),
        );
        self.tombstones.put(author, id, t);
    }

    /// Deletes every tombstone row expired at `now` (one range delete) and drops them from
    /// the sets in memory.
    pub(crate) fn expire_tombstones(&mut self, now: UnixMs) {
        self.batch.expire(Table::Tombstones, now.get());
        self.tombstones.expire(now);
    }

    // ---- receipts

    pub(crate) fn put_pending_receipt(&mut self, r: PendingReceiptRow, offline_ttl_ms: u64) {
        self.record_keyed(
            Table::PendingReceipts,
            |k| write_pending_receipt_key(k, &r.recipient, &r.conv_id, r.kind),
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
            self.batch.delete_row(Table::PendingReceipts, |k| {
                write_pending_receipt_key(k, recipient, conv, kind);
            });
        }
    }

    pub(crate) fn put_pending_retract(&mut self, r: PendingRetractRow, offline_ttl_ms: u64) {
        self.record_keyed(
            Table::PendingRetracts,
            |k| write_tombstone_key(k, &r.recipient, &r.id),
            &r,
        );
        self.timers.insert((
            r.at.plus_ms(offline_ttl_ms),
            Timer::PendingRetract(r.recipient.clone(), r.id.clone()),
        ));
        self.pending_retracts
            .insert((r.recipient.clone(), r.id.clone()), r);
    }

    /// The retractions waiting for `recipient`, by message id: one range of the map (not a
    /// walk of every recipient's).
    pub(crate) fn pending_retracts_of<'a>(
        &'a self,
        recipient: &'a UserUuid,
    ) -> impl Iterator<Item = &'a PendingRetractRow> + 'a {
        // "-" sorts at or before every message id: every byte an id may hold is at least '-'.
        let start = MessageId::parse("-").ok().map(|id| (recipient.clone(), id));
        start.into_iter().flat_map(move |start| {
            self.pending_retracts
                .range(start..)
                .take_while(move |((to, _), _)| to == recipient)
                .map(|(_, r)| r)
        })
    }

    pub(crate) fn delete_pending_retract(&mut self, recipient: &UserUuid, id: &MessageId) {
        if self
            .pending_retracts
            .remove(&(recipient.clone(), id.clone()))
            .is_some()
        {
            self.batch.delete_row(Table::PendingRetracts, |k| {
                write_tombstone_key(k, recipient, id);
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

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

        /// A recipient's pending retractions, read as one range, are exactly those a walk of
        /// every one would find for it, whatever the message ids.
        #[test]
        fn pending_retracts_of_a_recipient_are_one_range(
            rows in proptest::collection::vec((0usize..4, token()), 0..40),
        ) {
            let users: Vec<UserUuid> = (0u8..4).map(|i| UserUuid::from_random_bytes([i; 16])).collect();
            let mut s = State::default();
            for (to, id) in &rows {
                s.put_pending_retract(
                    PendingRetractRow {
                        recipient: users[*to].clone(),
                        id: MessageId::parse(id).unwrap(),
                        conv_id: ConvId::parse("c-1").unwrap(),
                        from: users[(*to + 1) % 4].clone(),
                        at: UnixMs(1),
                    },
                    1,
                );
            }
            for u in &users {
                let walked: Vec<_> = s.pending_retracts.values().filter(|r| r.recipient == *u).collect();
                prop_assert_eq!(s.pending_retracts_of(u).collect::<Vec<_>>(), walked);
            }
        }

        #[test]
        fn conversation_rows_are_serde_json(
            members in (uuid(), uuid()),
            conv in token(),
            seqs in any::<(u64, u64, u64)>(),
        ) {
            let c = ConversationRow {
                id: ConvId::parse(&conv).unwrap(),
                members: [members.0, members.1],
                last_seq: Seq(seqs.0),
                last_authored: [Seq(seqs.1), Seq(seqs.2)],
            };
            let mut out = Vec::new();
            c.write_json(&mut out);
            prop_assert_eq!(out, serde_json::to_vec(&c).unwrap());
        }
    }

    #[test]
    fn tombstone_record_decodes_as_row() {
        let (author, id) = (
            UserUuid::parse("00000000-0000-4000-8000-000000000001").unwrap(),
            MessageId::parse("m-1").unwrap(),
        );
        let t = Tombstone {
            conv_id: ConvId::parse("c-1").unwrap(),
            seq: Seq(7),
            expires_at: UnixMs(9),
            retracted: true,
        };
        let mut s = State {
            tombstones: crate::tombstones::Cache::new(1 << 20, None),
            ..State::default()
        };
        s.tombstones.insert_loaded(&author, [], UnixMs(0));
        s.put_tombstone(&author, id.clone(), t.clone());
        let Some(crate::store::MutationRef::PutExpiring {
            key,
            value,
            expires_at,
            ..
        }) = s.batch.iter().next()
        else {
            panic!("one put with an expiry");
        };
        assert_eq!(key, "00000000-0000-4000-8000-000000000001/m-1");
        assert_eq!(expires_at, 9);
        let row: TombstoneRow = decode(Table::Tombstones, key, value).unwrap();
        assert_eq!(
            row,
            TombstoneRow {
                author,
                id,
                conv_id: t.conv_id,
                seq: t.seq,
                expires_at: t.expires_at,
                retracted: true,
            }
        );
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
        b.delete_row(Table::Tombstones, |k| write_tombstone_key(k, &r, &id));
        b.delete_row(Table::ReceiptMarks, |k| {
            write_mark_key(k, &c, &r, ReceiptKind::Read);
        });
        b.delete_row(Table::PendingReceipts, |k| {
            write_pending_receipt_key(k, &r, &c, ReceiptKind::Delivered);
        });
        let keys: Vec<_> = b.iter().filter_map(|m| m.key()).collect();
        assert_eq!(
            keys,
            [
                format!("{r}/{c}/{:020}", 42),
                format!("{r}/{c}/{}", u64::MAX),
                format!("{r}/{id}"),
                format!("{c}/{r}/read"),
                format!("{r}/{c}/delivered"),
            ]
        );
    }
}
