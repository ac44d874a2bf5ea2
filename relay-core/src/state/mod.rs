//! The relay's durable working state: plain maps behind `&mut self`, loaded from the store at
//! startup (but for the caches over the lazy tables — accounts, conversations and contacts,
//! tombstones, queues — read when needed), and the row-level mutation batch of the input being
//! handled.
//!
//! Every `put_*` / `delete_*` updates the maps and indexes **and** records the matching
//! [`Mutation`](crate::store::Mutation); the dispatcher commits the batch before releasing any output of the input.
//!
//! Each map, its derived indexes, its load from the store and its `put_*`/`delete_*` change
//! together (a write that updates the map but forgets the mutation, or an index rebuilt
//! differently on load, is a durability bug), so each area's writes sit side by side in one
//! submodule: `accounts`, `relations`, `queues` (their index, reads, writes and expiry),
//! `commerce`, `credentials`, `handoffs` (the hand-off between shards), `media`, `push`. What the state is made of (the caches, the
//! commerce records ...) lives in the modules below it, which never name `State`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::Serialize;
use wire::{ConvId, FriendshipId, MessageId, UnixMs, UploadId, UserUuid};

use crate::config::Config;
use crate::stats::RelayStats;
use crate::store::{Batch, RowKey, Snapshot, StoreError, StoreRead, Table};

use crate::rows::*;

mod accounts;
mod commerce;
mod credentials;
mod handoffs;
mod media;
mod push;
mod queues;
mod relations;

/// All durable state plus its indexes.
#[derive(Debug, Default)]
pub(crate) struct State {
    meta: BTreeMap<String, String>,
    /// The accounts in memory and their names (`crate::directory`; the rest are in the
    /// store).
    directory: crate::directory::Directory,
    /// The conversations and contact lists in memory (`crate::relations`; the rest are in
    /// the store).
    relations: crate::relations::Relations,
    /// What every non-empty queue holds, by recipient and conversation (`crate::queue`; all
    /// of it in memory: the queue bounds need it).
    queued: crate::queue_index::QueueIndex,
    /// (conversation, message id) -> tombstone, for the conversations whose sets are in memory
    /// (`crate::tombstones`; the rest are in the store).
    tombstones: crate::tombstones::Cache,
    pending_receipts: BTreeMap<(UserUuid, ConvId, ReceiptKind), PendingReceiptRow>,
    pending_retracts: BTreeMap<(UserUuid, ConvId, MessageId), PendingRetractRow>,
    timers: BTreeSet<(UnixMs, Timer)>,
    /// What is queued per recipient, per sender and in total (the queue bounds).
    backlog: Backlog,
    /// The queues in memory (`crate::queue`; the rest are in the store).
    queues: crate::queue::Queues,
    /// Media uploads and objects (`crate::media`).
    media: crate::uploads::MediaState,
    /// Push targets (`crate::push`).
    push: crate::push_targets::PushState,
    /// Channels, orders, payments and sold aliases (`crate::commerce`).
    commerce: crate::commerce_state::Commerce,
    /// Used single-use credentials, until they expire (`crate::credential`).
    spent: crate::credential::Spent,
    /// The outbox, inbox marks and notices of the hand-off between shards (`handoffs`).
    handoffs: handoffs::Handoffs,
    /// How long an order that is over is kept (`Config::order_retention_ms`).
    order_retention_ms: u64,
    /// Changes to what is held in memory only ([`State::touched`]).
    touched: u64,
    /// Mutations of the input being handled (its buffers reused from input to input).
    batch: Batch,
    /// Set when a record failed to serialise: the next commit is refused (fail-stop).
    poisoned: bool,
    /// `Config::planted_bug`, for the planted bugs that live here (test-only).
    #[cfg(feature = "planted-bugs")]
    planted_bug: Option<crate::PlantedBug>,
}

/// The entries of the caches over the store that a batch wrote (one per write): they stay in
/// memory until the batch is durable ([`crate::lru`]).
#[derive(Debug, Default)]
pub(crate) struct Pins {
    accounts: Vec<UserUuid>,
    conversations: Vec<ConvId>,
    contacts: Vec<UserUuid>,
    tombstones: Vec<ConvId>,
    queues: Vec<crate::queue::QueueKey>,
    /// The earliest expiry of the messages the batch wrote: the expiry sweep is armed for it
    /// once the batch is durable (`crate::queue`).
    expiry: Option<UnixMs>,
}

/// What a read through the caches needs besides the state: the store's reader (a miss reads
/// the store) and the stats that count misses and failed reads. Built from the relay's parts
/// for one call (`ReadCx::new(&mut *self.reader, self.stats)` in a rule), so the caller may hold
/// other parts of the relay meanwhile.
pub(crate) struct ReadCx<'a> {
    reader: &'a mut dyn StoreRead,
    stats: &'a mut RelayStats,
}

impl<'a> ReadCx<'a> {
    pub(crate) fn new(reader: &'a mut dyn StoreRead, stats: &'a mut RelayStats) -> Self {
        Self { reader, stats }
    }

    /// The store's reader alone (a read outside the caches: the account index).
    pub(crate) fn reader(self) -> &'a mut dyn StoreRead {
        self.reader
    }

    /// The same parts for one more call, this context usable again after it.
    pub(crate) fn reborrow(&mut self) -> ReadCx<'_> {
        ReadCx {
            reader: &mut *self.reader,
            stats: &mut *self.stats,
        }
    }
}

/// Reads through the caches: from memory, or on a miss from the store (the entry is then
/// cached). A cache miss is not a write: nothing is recorded.
impl State {
    /// What `f` takes of the account `user` (`None`: no such account).
    #[inline]
    pub(crate) fn with_account<R>(
        &mut self,
        ReadCx { reader, stats }: ReadCx<'_>,
        user: &UserUuid,
        f: impl FnOnce(&Arc<AccountRow>) -> R,
    ) -> Result<Option<R>, StoreError> {
        crate::directory::with_account(&mut self.directory, reader, stats, user, f)
    }

    /// What `f` takes of the conversation `conv` (`None`: no such conversation).
    pub(crate) fn with_conversation<R>(
        &mut self,
        ReadCx { reader, stats }: ReadCx<'_>,
        conv: &ConvId,
        f: impl FnOnce(&ConversationRow) -> R,
    ) -> Result<Option<R>, StoreError> {
        crate::relations::with_conversation(&mut self.relations, reader, stats, conv, f)
    }

    /// What `f` takes of `user`'s contacts.
    pub(crate) fn with_contacts<R>(
        &mut self,
        ReadCx { reader, stats }: ReadCx<'_>,
        user: &UserUuid,
        f: impl FnOnce(&crate::relations::Contacts) -> R,
    ) -> Result<R, StoreError> {
        crate::relations::with_contacts(&mut self.relations, reader, stats, user, f)
    }

    /// Brings the receipt marks of `conv` (in memory) into memory.
    pub(crate) fn read_marks(
        &mut self,
        ReadCx { reader, stats }: ReadCx<'_>,
        conv: &ConvId,
    ) -> Result<(), StoreError> {
        crate::relations::read_marks(&mut self.relations, reader, stats, conv)
    }

    /// The tombstone of the message `id` in `conv` if one is live at `now`.
    pub(crate) fn tombstone(
        &mut self,
        ReadCx { reader, stats }: ReadCx<'_>,
        conv: &ConvId,
        id: &MessageId,
        now: UnixMs,
    ) -> Result<Option<Tombstone>, StoreError> {
        crate::tombstones::lookup(&mut self.tombstones, reader, stats, conv, id, now)
    }
}

/// What the state keeps in memory only, changed without a record: the pins of the queues a
/// synced connection reads, the expiry sweep's cursor, rate limits, the blobs to delete once
/// their batch is durable, the last push per recipient, the armed timers' order.
impl State {
    /// Sizes the caches over the store by `config` (at start, before any read).
    pub(crate) fn size_caches(&mut self, config: &Config) {
        self.directory = crate::directory::Directory::new(config.account_cache_bytes);
        self.relations = crate::relations::Relations::new(
            config.conversation_cache_bytes,
            config.contact_cache_bytes,
        );
        #[cfg(feature = "planted-bugs")]
        {
            self.directory.planted_bug = config.planted_bug;
            self.relations.planted_bug = config.planted_bug;
        }
        self.queues = crate::queue::Queues::new(config.queue_cache_bytes, config.offline_ttl_ms)
            .with_expiry_pages(config.expiry_page_rows, config.expiry_page_messages);
    }

    /// Plants `bug` in the state's own rules (feature `planted-bugs`).
    #[cfg(feature = "planted-bugs")]
    pub(crate) fn plant(&mut self, bug: Option<crate::PlantedBug>) {
        self.planted_bug = bug;
    }

    /// Puts the tombstone cache in place (at start, once the first sweep is known).
    pub(crate) fn open_tombstones(&mut self, cache: crate::tombstones::Cache) {
        self.tombstones = cache;
    }

    /// Keeps `user`'s queues of `convs` in memory while a connection of theirs is synced.
    pub(crate) fn hold_queues<'c>(
        &mut self,
        user: &UserUuid,
        convs: impl Iterator<Item = &'c ConvId>,
    ) {
        self.queues.hold(user, convs);
    }

    /// `user`'s last synced connection went: its queues may be evicted again.
    pub(crate) fn release_queues(&mut self, user: &UserUuid) {
        self.queues.release(user);
    }

    /// The expiry sweep's cursor and schedule.
    pub(crate) fn expiry_sweep(&mut self) -> &mut crate::expiry::Sweep {
        self.queues.sweep_mut()
    }

    /// The tombstones' range expiry ran at `now`; `stored` is the earliest expiry left.
    pub(crate) fn tombstones_swept(&mut self, now: UnixMs, stored: Option<UnixMs>) {
        self.tombstones.swept(now, stored);
    }

    /// Takes the earliest armed timer off.
    pub(crate) fn pop_timer(&mut self) -> Option<(UnixMs, Timer)> {
        self.timers.pop_first()
    }

    /// The media upload rate limit.
    pub(crate) fn upload_limit(&mut self) -> &mut crate::ratelimit::RateLimiter<UserUuid> {
        self.touched += 1;
        &mut self.media.init_limit
    }

    /// The media blobs (whole uploads, or single parts) to delete once the batch that dropped
    /// them is durable.
    pub(crate) fn blob_garbage(&mut self) -> &mut Vec<(UploadId, Option<u32>)> {
        self.touched += 1;
        &mut self.media.blob_garbage
    }

    /// When each recipient was last pushed to (the push interval).
    pub(crate) fn last_push(&mut self) -> &mut BTreeMap<UserUuid, UnixMs> {
        self.touched += 1;
        &mut self.push.last_push
    }

    /// Changes so far to what is held in memory only (the upload limit, the blobs to delete,
    /// the push interval): an input whose count moved has changed something no batch undoes
    /// (`Cx::read_parts`).
    pub(crate) fn touched(&self) -> u64 {
        self.touched
    }

    /// The input's mutations, for the commit pipeline to take.
    pub(crate) fn mutations(&mut self) -> &mut Batch {
        &mut self.batch
    }
}

/// Read-only views: every write goes through the state's own methods, which record it in
/// the input's batch.
impl State {
    /// The `meta` rows (schema markers, boot count ...).
    pub(crate) fn meta(&self) -> &BTreeMap<String, String> {
        &self.meta
    }

    /// The accounts in memory.
    pub(crate) fn directory(&self) -> &crate::directory::Directory {
        &self.directory
    }

    /// The conversations and contact lists in memory.
    pub(crate) fn relations(&self) -> &crate::relations::Relations {
        &self.relations
    }

    /// What every non-empty queue holds (the queue index).
    pub(crate) fn queued(&self) -> &crate::queue_index::QueueIndex {
        &self.queued
    }

    /// The message-id tombstones in memory.
    pub(crate) fn tombstones(&self) -> &crate::tombstones::Cache {
        &self.tombstones
    }

    /// The receipts kept for offline senders.
    pub(crate) fn pending_receipts(
        &self,
    ) -> &BTreeMap<(UserUuid, ConvId, ReceiptKind), PendingReceiptRow> {
        &self.pending_receipts
    }

    /// The retractions kept for offline recipients.
    pub(crate) fn pending_retracts(
        &self,
    ) -> &BTreeMap<(UserUuid, ConvId, MessageId), PendingRetractRow> {
        &self.pending_retracts
    }

    /// The armed timers, earliest first.
    pub(crate) fn timers(&self) -> &BTreeSet<(UnixMs, Timer)> {
        &self.timers
    }

    /// What is queued per recipient, per sender and in total.
    #[inline]
    pub(crate) fn backlog(&self) -> &Backlog {
        &self.backlog
    }

    /// The queues in memory.
    pub(crate) fn queues(&self) -> &crate::queue::Queues {
        &self.queues
    }

    /// Media uploads and objects.
    pub(crate) fn media(&self) -> &crate::uploads::MediaState {
        &self.media
    }

    /// Push targets.
    pub(crate) fn push(&self) -> &crate::push_targets::PushState {
        &self.push
    }

    /// Channels, orders, payments and sold aliases.
    pub(crate) fn commerce(&self) -> &crate::commerce_state::Commerce {
        &self.commerce
    }

    /// The mutations of the input being handled.
    pub(crate) fn batch(&self) -> &Batch {
        &self.batch
    }

    /// Whether a record failed to serialise (the next commit is refused).
    pub(crate) fn poisoned(&self) -> bool {
        self.poisoned
    }
}

impl State {
    /// Rebuilds the state and its indexes from a snapshot (of the eager tables: the queues'
    /// counts come from [`State::index_queues`], once the summaries are known).
    ///
    /// Of the rows kept per user, only those of `place`'s users are loaded: the rows of
    /// another shard's users are that shard's (`crate::handoff`).
    pub(crate) fn load(
        snapshot: &Snapshot,
        place: crate::handoff::ShardPlace,
        offline_ttl_ms: u64,
        order_retention_ms: u64,
    ) -> Result<Self, StoreError> {
        let mut s = Self {
            order_retention_ms,
            ..Self::default()
        };
        let rows = |t: Table| snapshot.get(&t).into_iter().flat_map(|m| m.iter());
        let theirs = |user: &UserUuid| place.elsewhere(user).is_some();
        for (k, v) in rows(Table::Meta) {
            s.meta.insert(k.clone(), decode(Table::Meta, k, v)?);
        }
        for (k, v) in rows(Table::QueueIndex) {
            if crate::queue_index::parse_queue_key(k).is_some_and(|(r, _)| theirs(&r)) {
                continue;
            }
            s.queued.load(k, v)?;
        }
        for (k, v) in rows(Table::PendingReceipts) {
            let r: PendingReceiptRow = decode(Table::PendingReceipts, k, v)?;
            if theirs(&r.recipient) {
                continue;
            }
            s.timers.insert((
                r.at.plus_ms(offline_ttl_ms),
                Timer::PendingReceipt(r.recipient.clone(), r.conv_id.clone(), r.kind),
            ));
            s.pending_receipts
                .insert((r.recipient.clone(), r.conv_id.clone(), r.kind), r);
        }
        for (k, v) in rows(Table::PendingRetracts) {
            let r: PendingRetractRow = decode(Table::PendingRetracts, k, v)?;
            if theirs(&r.recipient) {
                continue;
            }
            if *k != pending_retract_key(&r) {
                // Written by an older relay as `recipient/id`: rekeyed in the start's commit.
                s.batch.delete(Table::PendingRetracts, k);
                s.put_pending_retract(r, offline_ttl_ms);
                continue;
            }
            s.timers.insert((
                r.at.plus_ms(offline_ttl_ms),
                Timer::PendingRetract(r.recipient.clone(), r.conv_id.clone(), r.id.clone()),
            ));
            s.pending_retracts
                .insert((r.recipient.clone(), r.conv_id.clone(), r.id.clone()), r);
        }
        s.load_commerce(snapshot, place)?;
        s.load_media(snapshot, place)?;
        s.load_push(snapshot, place)?;
        s.load_spent(snapshot, place)?;
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

    /// A friendship id no shard of `place`'s map has given or will give: each shard gives the
    /// ids `≡ shard + 1 (mod shards)` from its own counter (`next_friendship_id`, with `/shard`
    /// but for shard 0), which starts past every counter stored when it is first used. With
    /// one shard: 1, 2, 3, … as an unsharded relay always gave them.
    pub(crate) fn next_friendship_id(&mut self, place: crate::handoff::ShardPlace) -> FriendshipId {
        let key = meta::of_shard(meta::NEXT_FRIENDSHIP_ID, place.me());
        let stored = |v: &String| v.parse::<u64>().ok();
        let start = self.meta.get(&key).and_then(stored).unwrap_or_else(|| {
            // Past every id given so far, by any shard under any map.
            (self.meta.range(meta::NEXT_FRIENDSHIP_ID.to_owned()..))
                .take_while(|(k, _)| k.starts_with(meta::NEXT_FRIENDSHIP_ID))
                .filter_map(|(_, v)| stored(v))
                .max()
                .unwrap_or(1)
        });
        // The first id of this shard's residue from `start` (a counter an unsharded relay
        // left is shard 0's, and need not be one of its ids).
        let shards = u64::from(place.map().shards());
        let wanted = u64::from(place.me().0) % shards;
        let start = start.max(1);
        let next = start + (shards + wanted - (start - 1) % shards) % shards;
        self.put_meta(&key, (next + shards).to_string());
        FriendshipId(next)
    }

    /// The shard of `map` that gave friendship id `id` ([`State::next_friendship_id`]'s
    /// residues; an id an unsharded relay gave before has one too, not its giver's).
    pub(crate) fn friendship_giver(
        id: FriendshipId,
        map: crate::handoff::ShardMap,
    ) -> crate::handoff::ShardId {
        let shards = u64::from(map.shards());
        crate::handoff::ShardId(u16::try_from(id.get().saturating_sub(1) % shards).unwrap_or(0))
    }

    // ---- the caches over the store

    /// Hands the cache entries written since the last move to `batch`'s pins.
    pub(crate) fn move_written(&mut self, batch: &mut Pins) {
        self.directory.move_written(&mut batch.accounts);
        self.relations
            .move_written(&mut batch.conversations, &mut batch.contacts);
        self.tombstones.move_written(&mut batch.tombstones);
        self.queues.move_written(&mut batch.queues);
        self.queues.sweep_mut().move_written(&mut batch.expiry);
    }

    /// The writes since the last [`State::move_written`] are durable.
    pub(crate) fn unpin_written(&mut self) {
        self.directory.unpin_written();
        self.relations.unpin_written();
        self.tombstones.unpin_written();
        self.queues.unpin_written();
        self.queues.sweep_mut().arm_written();
    }

    /// A batch whose writes pinned `batch` is durable.
    pub(crate) fn unpin(&mut self, batch: Pins) {
        self.directory.unpin(batch.accounts);
        self.relations.unpin(batch.conversations, batch.contacts);
        self.tombstones.unpin(batch.tombstones);
        self.queues.unpin(batch.queues);
        self.queues.sweep_mut().arm(batch.expiry);
    }

    /// Evicts what the caches hold beyond their bounds (only what no batch in flight wrote).
    pub(crate) fn evict(&mut self) {
        self.directory.evict();
        self.relations.evict();
        self.tombstones.evict();
        self.queues.evict();
    }

    /// The prefixes of the queues whose tails were evicted since the last call (see
    /// `Queues::take_forgotten_tails`): reads of them asked before are not to be used.
    pub(crate) fn take_forgotten_tails(&mut self) -> Vec<String> {
        let tails = self.queues.take_forgotten_tails();
        tails
            .iter()
            .map(|(to, conv)| crate::queue::queue_prefix(to, conv))
            .collect()
    }

    // ---- tombstones

    /// Writes the tombstone of `id` in `conv` (the conversation's set must be in memory) with
    /// its expiry.
    pub(crate) fn put_tombstone(&mut self, conv: &ConvId, id: MessageId, t: Tombstone) {
        let record = TombstoneRecord {
            author: &t.author,
            id: &id,
            conv_id: conv,
            seq: t.seq,
            expires_at: t.expires_at,
            retracted: t.retracted,
        };
        self.batch.put_expiring_row(
            Table::Tombstones,
            |k| write_tombstone_key(k, conv, &id, &t.author),
            |out| record.write_json(out),
            t.expires_at.get(),
        );
        self.tombstones.put(conv, id, t);
    }

    /// Drops every tombstone expired at `now` from the sets in memory and, when `rows`,
    /// deletes their rows from the store (one range delete, of every shard's: an expired
    /// tombstone is read by no one, and one shard, the registry, collects them all).
    pub(crate) fn expire_tombstones(&mut self, now: UnixMs, rows: bool) {
        if rows {
            self.batch.expire(Table::Tombstones, now.get());
        }
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
            |k| write_pending_retract_key(k, &r.recipient, &r.conv_id, &r.id),
            &r,
        );
        self.timers.insert((
            r.at.plus_ms(offline_ttl_ms),
            Timer::PendingRetract(r.recipient.clone(), r.conv_id.clone(), r.id.clone()),
        ));
        self.pending_retracts
            .insert((r.recipient.clone(), r.conv_id.clone(), r.id.clone()), r);
    }

    /// The retractions waiting for `recipient`, by conversation and message id: one range of
    /// the map (not a walk of every recipient's).
    pub(crate) fn pending_retracts_of<'a>(
        &'a self,
        recipient: &'a UserUuid,
    ) -> impl Iterator<Item = &'a PendingRetractRow> + 'a {
        // "-" sorts at or before every conversation and message id: every byte one may hold
        // is at least '-'.
        let start = ConvId::parse("-")
            .ok()
            .zip(MessageId::parse("-").ok())
            .map(|(conv, id)| (recipient.clone(), conv, id));
        start.into_iter().flat_map(move |start| {
            self.pending_retracts
                .range(start..)
                .take_while(move |((to, _, _), _)| to == recipient)
                .map(|(_, r)| r)
        })
    }

    pub(crate) fn delete_pending_retract(
        &mut self,
        recipient: &UserUuid,
        conv: &ConvId,
        id: &MessageId,
    ) {
        if self
            .pending_retracts
            .remove(&(recipient.clone(), conv.clone(), id.clone()))
            .is_some()
        {
            self.batch.delete_row(Table::PendingRetracts, |k| {
                write_pending_retract_key(k, recipient, conv, id);
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use wire::Seq;

    use super::*;

    #[test]
    fn one_shard_gives_friendship_ids_as_an_unsharded_relay() {
        let mut s = State::default();
        let one = crate::handoff::ShardPlace::single();
        let ids: Vec<u64> = (0..3).map(|_| s.next_friendship_id(one).get()).collect();
        assert_eq!(ids, [1, 2, 3]);
        assert_eq!(s.meta[meta::NEXT_FRIENDSHIP_ID], "4");
    }

    fn token() -> impl Strategy<Value = String> {
        "[A-Za-z0-9._:-]{1,128}"
    }

    proptest! {
        /// The shards of a map give disjoint friendship ids, each past every counter stored
        /// (an unsharded relay's included), and one shard gives 1, 2, 3, … as before.
        #[test]
        fn friendship_ids_of_the_shards_never_meet(
            shards in 1u16..5,
            legacy in prop::option::of(1u64..1_000),
            draws in proptest::collection::vec(0u16..5, 1..60),
        ) {
            use crate::handoff::{ShardId, ShardMap, ShardPlace};
            let map = ShardMap::new(shards).unwrap();
            let mut states: Vec<State> = (0..shards).map(|_| State::default()).collect();
            for s in &mut states {
                if let Some(next) = legacy {
                    s.meta.insert(meta::NEXT_FRIENDSHIP_ID.to_owned(), next.to_string());
                }
            }
            let mut given = BTreeSet::new();
            for d in draws {
                let shard = d % shards;
                let place = ShardPlace::new(map, ShardId(shard)).unwrap();
                let id = states[usize::from(shard)].next_friendship_id(place).get();
                prop_assert!(given.insert(id), "id {} given twice", id);
                prop_assert!(id >= legacy.unwrap_or(1));
                prop_assert_eq!((id - 1) % u64::from(shards), u64::from(shard));
            }
        }

        /// A recipient's pending retractions, read as one range, are exactly those a walk of
        /// every one would find for it, whatever the message ids.
        #[test]
        fn pending_retracts_of_a_recipient_are_one_range(
            rows in proptest::collection::vec((0usize..4, token(), token()), 0..40),
        ) {
            let users: Vec<UserUuid> = (0u8..4).map(|i| UserUuid::from_random_bytes([i; 16])).collect();
            let mut s = State::default();
            for (to, conv, id) in &rows {
                s.put_pending_retract(
                    PendingRetractRow {
                        recipient: users[*to].clone(),
                        id: MessageId::parse(id).unwrap(),
                        conv_id: ConvId::parse(conv).unwrap(),
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
    }

    #[test]
    fn tombstone_record_decodes_as_row() {
        let (author, id) = (
            UserUuid::parse("00000000-0000-4000-8000-000000000001").unwrap(),
            MessageId::parse("m-1").unwrap(),
        );
        let conv = ConvId::parse("c-1").unwrap();
        let t = Tombstone {
            author: author.clone(),
            seq: Seq(7),
            expires_at: UnixMs(9),
            retracted: true,
        };
        let mut s = State {
            tombstones: crate::tombstones::Cache::new(1 << 20, None),
            ..State::default()
        };
        s.tombstones.insert_loaded(&conv, [], UnixMs(0));
        s.put_tombstone(&conv, id.clone(), t.clone());
        let Some(crate::store::MutationRef::PutExpiring {
            key,
            value,
            expires_at,
            ..
        }) = s.batch.iter().next()
        else {
            panic!("one put with an expiry");
        };
        assert_eq!(key, "c-1/m-1/00000000-0000-4000-8000-000000000001");
        assert_eq!(expires_at, 9);
        let row: TombstoneRow = decode(Table::Tombstones, key, value).unwrap();
        assert_eq!(
            row,
            TombstoneRow {
                author,
                id,
                conv_id: conv,
                seq: t.seq,
                expires_at: t.expires_at,
                retracted: true,
            }
        );
    }
}
