//! The message-id tombstones the relay holds in memory: a bounded cache over the store's
//! `tombstones` table.
//!
//! Every accepted message leaves a tombstone `(conversation, id) -> (author, seq, expiry,
//! retracted)` for [`crate::limits::TOMBSTONE_TTL_MS`]: it answers a re-sent id with the first
//! `ack`, refuses the id to the conversation's other member, and authorises a `retract`. Dedup
//! is per conversation, so that whoever decides a conversation's seqs (one owner per
//! conversation, ARCHITECTURE "Running N active relays") decides its ids alone. There are far
//! more tombstones than anything else the relay keeps (30 messages a day for 7 days is 210 per
//! active user), so they live in the store and only some conversations' sets are in memory:
//!
//! * **Keys** are `conv/id/author`: a conversation's set is one prefix (`conv/`), an id's
//!   tombstone another (`conv/id/`), and the author, who the message limit is restored for at
//!   start, is read from the key alone. One id has one tombstone in a conversation; a store
//!   rekeyed from the per-author keys of older relays may hold two (both members once used the
//!   id), and then the first message (the lower seq) is the one known.
//! * **Per conversation, whole.** A conversation's set is read with one prefix scan of the
//!   store the first time the relay needs it (its first `msg` or `retract` since it was
//!   evicted), and then answers every lookup for that conversation from memory: a new id is
//!   known to be new without a read per message.
//! * **Bounded** by [`crate::Config::tombstone_cache_bytes`] (an estimate of the heap each set
//!   takes, [`ENTRY_BYTES`] and [`SET_BYTES`] over the key lengths). Past the bound the least
//!   recently used sets are evicted.
//! * **A conversation too large to hold whole is read by row.** A stored set heavier than an
//!   eighth of the bound ([`Cache::largest_set`], at least [`TOMBSTONE_SET_BY_ROW_MIN_BYTES`]),
//!   or of more rows than [`TOMBSTONE_SET_READ_MAX_ROWS`], is not kept (and the read that
//!   finds it stops after that many rows: a set is never read whole when it is large): held,
//!   it would push out most other sets, and evicted, it would be read whole again at the
//!   conversation's next message (a sender within the default rate limit writes ~1.2 million
//!   tombstones a week). The conversation is remembered for the relay's lifetime; from then on
//!   a lookup the memory cannot answer reads the id's rows (`conv/id/`) from the store, and its
//!   entry in memory holds only what the relay wrote since (pinned until durable, as every
//!   write). So such a conversation costs one keyed read per message, not a set per message.
//! * **Only clean sets are evicted** ([`crate::lru`]): a write pins its conversation's set
//!   until the batch that carries it is durable ([`Cache::move_written`], [`Cache::unpin`]), so
//!   a set read again from the store after an eviction holds everything the relay
//!   acknowledged. The bound can be exceeded by what the batches in flight pinned, never by
//!   more.
//! * **Expiry is exact in memory and lazy in the store.** A lookup ignores a tombstone whose
//!   expiry has passed; the rows themselves go with the relay's periodic range expiry
//!   ([`crate::store::Mutation::Expire`]), and the sets in memory drop theirs at the same time.

use std::collections::{BTreeMap, BTreeSet};

use wire::{ConvId, MessageId, UnixMs, UserUuid};

use crate::limits::{
    MINUTE_MS, TOMBSTONE_SET_BY_ROW_MIN_BYTES, TOMBSTONE_SET_READ_MAX_ROWS, TOMBSTONE_SWEEP_MS,
};
use crate::lru::{Lru, Weigh};
use crate::rows::{Tombstone, TombstoneRow, decode, write_tombstone_key};
use crate::store::{Batch, RowKey, Store, StoreError, StoreRead, Table};

/// Estimated heap per tombstone in a set, besides its id and author: the map entry, the two
/// strings' headers and the record's numbers.
pub(crate) const ENTRY_BYTES: usize = 112;
/// Estimated heap per conversation's set, besides its id: the set's map, its place in the LRU
/// order.
pub(crate) const SET_BYTES: usize = 160;

/// One conversation's tombstones in memory: all of them (`whole`, the set was read whole), or
/// for a conversation read by row, the ones written since its entry was made.
#[derive(Debug, Default)]
struct Set {
    ids: BTreeMap<MessageId, Tombstone>,
    /// Estimated heap of the tombstones.
    bytes: usize,
    whole: bool,
}

/// What memory tells of an id ([`Cache::known`]).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Known<'a> {
    /// Its live tombstone.
    Live(&'a Tombstone),
    /// No live tombstone: the conversation's whole set is in memory and has none.
    Absent,
    /// Memory cannot tell: the conversation is not in memory, or is read by row and this id
    /// was not written since.
    Unknown,
}

impl Set {
    /// A whole set from its stored rows, those expired at `now` left out. Of two live
    /// tombstones of one id (a store rekeyed from per-author keys, where both members had used
    /// the id), the one kept is the first message's (the lower seq).
    fn whole(rows: impl IntoIterator<Item = (MessageId, Tombstone)>, now: UnixMs) -> Self {
        let mut set = Self {
            whole: true,
            ..Self::default()
        };
        for (id, t) in rows {
            if now >= t.expires_at {
                continue;
            }
            let bytes = entry_bytes(&id, &t);
            match set.ids.entry(id) {
                std::collections::btree_map::Entry::Vacant(e) => {
                    e.insert(t);
                    set.bytes += bytes;
                }
                std::collections::btree_map::Entry::Occupied(mut e) => {
                    if t.seq < e.get().seq {
                        e.insert(t);
                    }
                }
            }
        }
        set
    }
}

impl Weigh for Set {
    fn weight(&self) -> usize {
        self.bytes + SET_BYTES
    }
}

fn entry_bytes(id: &MessageId, t: &Tombstone) -> usize {
    ENTRY_BYTES + id.as_str().len() + t.author.as_str().len()
}

/// The conversations' sets in memory ([`Lru`]) and the schedule of the range expiry.
#[derive(Debug)]
pub(crate) struct Cache {
    sets: Lru<ConvId, Set>,
    /// Conversations whose stored sets were too heavy to hold ([`Cache::largest_set`]): read
    /// by row.
    by_row: BTreeSet<ConvId>,
    /// The heaviest set held whole.
    largest_set: usize,
    /// When the next range expiry of the stored rows is due.
    sweep_at: Option<UnixMs>,
    /// The earliest expiry of the tombstones written since the last range expiry.
    written_since_sweep: Option<UnixMs>,
    /// How long after a range expiry that found nothing due the next one comes anyway: at the
    /// collector of a sharded relay, whose store gets tombstones other shards write.
    collect_every: Option<u64>,
    /// A defect to plant (feature `planted-bugs`; see [`crate::PlantedBug`]).
    #[cfg(feature = "planted-bugs")]
    pub(crate) planted_bug: Option<crate::PlantedBug>,
}

impl Default for Cache {
    fn default() -> Self {
        Self::new(0, None)
    }
}

impl Cache {
    /// An empty cache of at most `bound` bytes; the first range expiry is due at `sweep_at`
    /// (the earliest expiry in the store, [`first_sweep`]).
    pub(crate) fn new(bound: usize, sweep_at: Option<UnixMs>) -> Self {
        Self {
            sets: Lru::new(bound),
            by_row: BTreeSet::new(),
            largest_set: (bound / 8).max(TOMBSTONE_SET_BY_ROW_MIN_BYTES),
            sweep_at,
            written_since_sweep: None,
            collect_every: None,
            #[cfg(feature = "planted-bugs")]
            planted_bug: None,
        }
    }

    /// This cache with `min_bytes` as the smallest set read by row (when an eighth of the
    /// bound is smaller).
    pub(crate) fn with_by_row_min(mut self, min_bytes: usize) -> Self {
        self.largest_set = (self.sets.bound() / 8).max(min_bytes);
        self
    }

    /// This cache at the collector of a sharded relay: a range expiry is due at once, and
    /// then at least every `ms`.
    pub(crate) fn collecting_every(mut self, ms: u64) -> Self {
        self.collect_every = Some(ms);
        self.sweep_at = Some(UnixMs(0));
        self
    }

    /// When the next range expiry is due.
    pub(crate) fn sweep_at(&self) -> Option<UnixMs> {
        self.sweep_at
    }

    /// The range expiry ran at `now`; `stored` is the earliest expiry left in the store. The
    /// next is due at the earliest of that and of the tombstones written since the last sweep
    /// (some may not be committed yet), but not sooner than [`TOMBSTONE_SWEEP_MS`] from now;
    /// at a collector, no later than its interval from now.
    pub(crate) fn swept(&mut self, now: UnixMs, stored: Option<UnixMs>) {
        let written = self.written_since_sweep.take().filter(|at| *at > now);
        let next = stored.into_iter().chain(written).min();
        let earliest = now.plus_ms(TOMBSTONE_SWEEP_MS);
        let collect = self.collect_every.map(|ms| now.plus_ms(ms));
        self.sweep_at = next
            .map(|at| at.max(earliest))
            .into_iter()
            .chain(collect)
            .min();
    }

    /// Whether `conv` has an entry in memory (its whole set, or, read by row, what was written
    /// since).
    pub(crate) fn is_loaded(&self, conv: &ConvId) -> bool {
        self.sets.contains(conv)
    }

    /// Whether `conv`'s stored set was too heavy to hold: its ids are read by row.
    pub(crate) fn is_read_by_row(&self, conv: &ConvId) -> bool {
        self.by_row.contains(conv)
    }

    /// The heaviest set held whole (an eighth of the bound, at least
    /// [`TOMBSTONE_SET_BY_ROW_MIN_BYTES`]).
    pub(crate) fn largest_set(&self) -> usize {
        self.largest_set
    }

    /// The most rows of a stored set read to hold it whole: no more than a set of
    /// [`Cache::largest_set`] bytes can have, and at most [`TOMBSTONE_SET_READ_MAX_ROWS`].
    pub(crate) fn set_read_max_rows(&self) -> usize {
        (self.largest_set / ENTRY_BYTES + 1).min(TOMBSTONE_SET_READ_MAX_ROWS)
    }

    /// From now on `conv`'s ids are read by row: its entry in memory starts empty and holds
    /// what is written for it.
    pub(crate) fn read_by_row(&mut self, conv: &ConvId) {
        self.by_row.insert(conv.clone());
        self.sets.insert(conv.clone(), Set::default());
    }

    /// What memory tells of `(conv, id)` at `now`.
    pub(crate) fn known(&self, conv: &ConvId, id: &MessageId, now: UnixMs) -> Known<'_> {
        let Some(set) = self.sets.get(conv) else {
            return Known::Unknown;
        };
        match set.ids.get(id).filter(|t| now < t.expires_at) {
            Some(t) => Known::Live(t),
            None if set.whole => Known::Absent,
            None => Known::Unknown,
        }
    }

    /// Adds `conv`'s set as read from the store (tombstones already expired at `now` are left
    /// out). Nothing is evicted before the input that read it ends ([`Cache::evict`]).
    /// (Tests; the relay goes through [`Cache::insert_read`].)
    #[cfg(test)]
    pub(crate) fn insert_loaded(
        &mut self,
        conv: &ConvId,
        rows: impl IntoIterator<Item = (MessageId, Tombstone)>,
        now: UnixMs,
    ) {
        self.sets.insert(conv.clone(), Set::whole(rows, now));
    }

    /// `conv`'s set as just read from the store: held whole if it weighs at most
    /// [`Cache::largest_set`], else the conversation is read by row from now on. Either way
    /// the read answers `id` (its live tombstone at `now`).
    pub(crate) fn insert_read(
        &mut self,
        conv: &ConvId,
        rows: impl IntoIterator<Item = (MessageId, Tombstone)>,
        id: &MessageId,
        now: UnixMs,
    ) -> Option<Tombstone> {
        let mut set = Set::whole(rows, now);
        if set.bytes <= self.largest_set() {
            let found = set.ids.get(id).cloned();
            self.sets.insert(conv.clone(), set);
            return found;
        }
        self.read_by_row(conv);
        set.ids.remove(id)
    }

    /// The live tombstone of `(conv, id)` at `now`. `None` also when the conversation's set is
    /// not loaded: callers load it first. (Tests; the relay asks [`Cache::known`].)
    #[cfg(test)]
    pub(crate) fn get(&self, conv: &ConvId, id: &MessageId, now: UnixMs) -> Option<&Tombstone> {
        self.sets
            .get(conv)?
            .ids
            .get(id)
            .filter(|t| now < t.expires_at)
    }

    /// Records a tombstone of a loaded conversation's set (a new one, or a new state of one)
    /// and pins the set until the write is durable.
    pub(crate) fn put(&mut self, conv: &ConvId, id: MessageId, t: Tombstone) {
        let at = t.expires_at;
        let written = self.sets.write(conv, |set| {
            let added = entry_bytes(&id, &t);
            let id_len = id.as_str().len();
            // One search: the replaced tombstone (if any) comes back from the insert.
            let removed = set
                .ids
                .insert(id, t)
                .map_or(0, |old| ENTRY_BYTES + id_len + old.author.as_str().len());
            set.bytes = set.bytes + added - removed;
        });
        debug_assert!(
            written.is_some(),
            "a tombstone written for a conversation whose set is not loaded"
        );
        self.sweep_at = Some(self.sweep_at.map_or(at, |s| s.min(at)));
        self.written_since_sweep = Some(self.written_since_sweep.map_or(at, |s| s.min(at)));
    }

    /// Moves the conversations written since the last move into `batch`
    /// ([`Lru::move_written`]).
    pub(crate) fn move_written(&mut self, batch: &mut Vec<ConvId>) {
        self.sets.move_written(batch);
    }

    /// The writes since the last [`move_written`](Cache::move_written) are durable (an input
    /// committed on its own): their sets may be evicted again.
    pub(crate) fn unpin_written(&mut self) {
        self.sets.unpin_written();
    }

    /// The writes `written` (a batch's, from [`move_written`](Cache::move_written)) are
    /// durable: their sets may be evicted again.
    pub(crate) fn unpin(&mut self, written: Vec<ConvId>) {
        self.sets.unpin(written);
    }

    /// Drops every tombstone expired at `now` from the sets in memory.
    pub(crate) fn expire(&mut self, now: UnixMs) {
        self.sets.update_all(|_, set| {
            set.ids.retain(|id, t| {
                let live = now < t.expires_at;
                if !live {
                    set.bytes -= entry_bytes(id, t);
                }
                live
            });
        });
    }

    /// What the cache holds now.
    pub(crate) fn stats(&self) -> crate::stats::TombstoneCacheStats {
        crate::stats::TombstoneCacheStats {
            bytes: self.sets.bytes(),
            conversations: self.sets.len(),
            tombstones: self.sets.values().map(|s| s.ids.len()).sum(),
            evictions: self.sets.evictions(),
        }
    }

    #[cfg(test)]
    fn bytes(&self) -> usize {
        self.sets.bytes()
    }

    #[cfg(test)]
    fn evictions(&self) -> u64 {
        self.sets.evictions()
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.stats().tombstones
    }

    /// Evicts the least recently used unpinned sets until the estimate is within the bound (the
    /// relay calls it at the end of every input, after its commit).
    pub(crate) fn evict(&mut self) {
        self.sets.evict();
    }
}

/// When the first range expiry is due: the earliest expiry in the store (`None` when it holds
/// no tombstone).
pub(crate) fn first_sweep(reader: &mut dyn StoreRead) -> Result<Option<UnixMs>, StoreError> {
    Ok(reader.next_expiry(Table::Tombstones, 0)?.map(UnixMs))
}

/// The live tombstone of `id` in `conv` at `now`, reading the conversation's set from the
/// store first if it is not in memory. `Err`: the read failed (nothing changed; the caller
/// refuses the frame with `STORAGE_UNAVAILABLE` and the client sends it again). A function of
/// the relay's parts rather than a method, so that the caller may hold its connection's user
/// meanwhile.
pub(crate) fn lookup(
    cache: &mut Cache,
    reader: &mut dyn StoreRead,
    stats: &mut crate::stats::RelayStats,
    conv: &ConvId,
    id: &MessageId,
    now: UnixMs,
) -> Result<Option<Tombstone>, StoreError> {
    match cache.known(conv, id, now) {
        Known::Live(t) => return Ok(Some(t.clone())),
        Known::Absent => return Ok(None),
        Known::Unknown if cache.is_loaded(conv) => {}
        Known::Unknown if cache.is_read_by_row(conv) => cache.read_by_row(conv),
        Known::Unknown => {
            // PLANTED BUG (EvictedTombstonesForgotten): the stored set is not read back.
            let set = if crate::planted::planted!(cache, EvictedTombstonesForgotten) {
                Some(Vec::new())
            } else {
                read_set(reader, conv, cache.set_read_max_rows()).inspect_err(|_| {
                    stats.tombstone_read_failures += 1;
                })?
            };
            stats.tombstone_sets_read += 1;
            match set {
                Some(set) => return Ok(cache.insert_read(conv, set, id, now)),
                // Too many rows to hold: read by row from now on, this id first.
                None => cache.read_by_row(conv),
            }
        }
    }
    let found = read_id(reader, conv, id, now).inspect_err(|_| {
        stats.tombstone_read_failures += 1;
    })?;
    stats.tombstone_rows_read += 1;
    Ok(found)
}

/// The prefix of every stored tombstone of `conv`, or with `id`, of that id's.
fn key_prefix(conv: &ConvId, id: Option<&MessageId>) -> String {
    let mut prefix =
        String::with_capacity(conv.as_str().len() + 2 + id.map_or(0, |i| i.as_str().len()));
    prefix.push_str(conv.as_str());
    prefix.push('/');
    if let Some(id) = id {
        prefix.push_str(id.as_str());
        prefix.push('/');
    }
    prefix
}

/// The stored tombstone of `id` in `conv` live at `now`, if any (one prefix scan of the id's
/// rows: one, or two in a store rekeyed from per-author keys, of which [`Set::whole`] keeps
/// the first message's).
fn read_id(
    reader: &mut dyn StoreRead,
    conv: &ConvId,
    id: &MessageId,
    now: UnixMs,
) -> Result<Option<Tombstone>, StoreError> {
    let prefix = key_prefix(conv, Some(id));
    let mut rows = Vec::with_capacity(2);
    for (key, value) in reader.scan_prefix_max(Table::Tombstones, &prefix, 2)? {
        let (row_id, t) = split(conv, &key, &value)?;
        if row_id != *id {
            return Err(corrupt(&key, "another message's tombstone"));
        }
        rows.push((row_id, t));
    }
    Ok(Set::whole(rows, now).ids.remove(id))
}

fn corrupt(key: &str, what: &str) -> StoreError {
    StoreError::Backend(format!(
        "corrupt row {key:?} in table {}: {what}",
        Table::Tombstones.name()
    ))
}

/// A stored row of `conv` as its id and the tombstone kept under it.
fn split(conv: &ConvId, key: &str, value: &[u8]) -> Result<(MessageId, Tombstone), StoreError> {
    let row: TombstoneRow = decode(Table::Tombstones, key, value)?;
    if row.conv_id != *conv {
        return Err(corrupt(key, "another conversation's tombstone"));
    }
    let t = Tombstone {
        author: row.author,
        seq: row.seq,
        expires_at: row.expires_at,
        retracted: row.retracted,
    };
    Ok((row.id, t))
}

/// Every stored tombstone of `conv` (one prefix scan of at most `max_rows` + 1 rows), or
/// `None` when there are more than `max_rows`.
fn read_set(
    reader: &mut dyn StoreRead,
    conv: &ConvId,
    max_rows: usize,
) -> Result<Option<Vec<(MessageId, Tombstone)>>, StoreError> {
    let prefix = key_prefix(conv, None);
    let rows = reader.scan_prefix_max(Table::Tombstones, &prefix, max_rows.saturating_add(1))?;
    if rows.len() > max_rows {
        return Ok(None);
    }
    let mut set = Vec::with_capacity(rows.len());
    for (key, value) in rows {
        set.push(split(conv, &key, &value)?);
    }
    Ok(Some(set))
}

/// The author of the tombstone stored under `key` (`conv/id/author`), read from the key alone.
fn key_author(key: &str) -> Option<UserUuid> {
    let mut parts = key.split('/');
    let (_conv, _id, author) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    UserUuid::parse(author).ok()
}

/// The per-user message limit as the store shows it: every accepted message left a tombstone
/// stamped with its acceptance time (its expiry minus the tombstone lifetime), so the windows
/// of the last minute before the latest message are rebuilt from the tombstones that expire
/// last (one indexed read), and a restart does not hand every sender a fresh allowance. (Taken
/// relative to the latest message in the store, the relay's last known time: windows that
/// ended before the restart have expired on the first message after it.)
pub(crate) fn restored_msg_limit(
    reader: &mut dyn StoreRead,
    config: &crate::Config,
) -> Result<crate::ratelimit::RateLimiter<UserUuid>, StoreError> {
    let mut limit = crate::ratelimit::RateLimiter::new(config.msgs_per_min_per_user, MINUTE_MS);
    let ttl = crate::limits::TOMBSTONE_TTL_MS.max(config.offline_ttl_ms);
    let mut latest: Vec<(UserUuid, u64)> = Vec::new();
    for (key, expires_at) in reader.latest_expiries(Table::Tombstones, MINUTE_MS - 1)? {
        // The key is `conv/id/author`: the author is read from it (the values are not read).
        let author = key_author(&key).ok_or_else(|| corrupt(&key, "not a message's tombstone"))?;
        latest.push((author, expires_at.saturating_sub(ttl)));
    }
    let mut windows: BTreeMap<UserUuid, (u64, u32)> = BTreeMap::new();
    for (author, at) in latest {
        let w = windows.entry(author).or_insert((at, 0));
        w.0 = w.0.min(at);
        w.1 += 1;
    }
    for (author, (start, count)) in windows {
        limit.restore(author, start, count);
    }
    Ok(limit)
}

/// Rekeys the tombstones of a store written by an older relay, which kept them per author
/// (`author/id`), to the per-conversation keys (`conv/id/author`), in keyset pages of
/// `page_rows` rows each committed on its own ([`crate::store::derive_in_pages`]): a rerun
/// after a start cut short skips what is rekeyed already (a key of three parts). The caller
/// records the meta row that says it is done. Returns the rows rekeyed.
pub(crate) fn rekey_by_conversation(
    store: &mut dyn Store,
    reader: &mut dyn StoreRead,
    page_rows: usize,
) -> Result<u64, StoreError> {
    let mut rekeyed = 0;
    crate::store::derive_in_pages(
        store,
        reader,
        Table::Tombstones,
        page_rows,
        |batch: &mut Batch, key, value| {
            if key.split('/').count() != 2 {
                return Ok(());
            }
            let row: TombstoneRow = decode(Table::Tombstones, key, value)?;
            if key != format!("{}/{}", row.author, row.id) {
                return Err(corrupt(key, "neither an author's nor a conversation's key"));
            }
            batch.put_expiring_row(
                Table::Tombstones,
                |k: &mut RowKey<'_>| write_tombstone_key(k, &row.conv_id, &row.id, &row.author),
                |out| out.extend_from_slice(value),
                row.expires_at.get(),
            );
            batch.delete(Table::Tombstones, key);
            rekeyed += 1;
            Ok(())
        },
    )?;
    Ok(rekeyed)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn user(n: u8) -> UserUuid {
        UserUuid::parse(&format!("00000000-0000-4000-8000-0000000000{n:02x}")).unwrap()
    }

    fn conv(n: u8) -> ConvId {
        ConvId::parse(&format!("c-{n}")).unwrap()
    }

    fn tomb(seq: u64, expires_at: u64) -> Tombstone {
        Tombstone {
            author: user(1),
            seq: wire::Seq(seq),
            expires_at: UnixMs(expires_at),
            retracted: false,
        }
    }

    fn id(s: &str) -> MessageId {
        MessageId::parse(s).unwrap()
    }

    /// A store holding `n` tombstones of `author` in `c` (`m1`..), `m{i}` with seq `i`,
    /// expiring at 1,000 but `m3` at 5.
    fn stored(c: &ConvId, author: &UserUuid, n: u64) -> crate::store::MemoryStore {
        use crate::store::Store as _;
        let mut store = crate::store::MemoryStore::new();
        let mut batch = Batch::new();
        for i in 1..=n {
            let row = TombstoneRow {
                author: author.clone(),
                id: id(&format!("m{i}")),
                conv_id: c.clone(),
                seq: wire::Seq(i),
                expires_at: UnixMs(if i == 3 { 5 } else { 1_000 }),
                retracted: false,
            };
            let value = serde_json::to_vec(&row).unwrap();
            let key = format!("{c}/m{i}/{author}");
            batch.put_expiring(Table::Tombstones, &key, &value, row.expires_at.get());
        }
        store.commit(&batch).unwrap();
        store
    }

    /// A set of more rows than the largest held may have is read only that far (one bounded
    /// read), then by row, also once its (partial) entry was evicted; what was written since
    /// is answered from memory; a light set is still held whole.
    #[test]
    fn a_heavy_set_is_read_whole_once_then_by_row() {
        use crate::store::Store as _;
        let (a, b) = (conv(1), conv(2));
        let mut store = stored(&a, &user(1), 700);
        let mut reader = store.reader().unwrap();
        let mut stats = crate::stats::RelayStats::default();
        let mut c = Cache::new(0, None);
        assert_eq!(c.largest_set(), TOMBSTONE_SET_BY_ROW_MIN_BYTES);
        let mut look = |c: &mut Cache, who: &ConvId, m: &str, now: u64| {
            lookup(c, &mut *reader, &mut stats, who, &id(m), UnixMs(now))
                .unwrap()
                .map(|t| t.seq.get())
        };
        assert_eq!(look(&mut c, &a, "m5", 10), Some(5));
        assert!(c.is_read_by_row(&a) && c.is_loaded(&a));
        assert_eq!(c.len(), 0, "the heavy set is not kept");
        c.evict();
        assert!(!c.is_loaded(&a));
        assert_eq!(look(&mut c, &a, "m6", 10), Some(6), "evicted: by row again");
        assert!(c.is_loaded(&a));
        assert_eq!(look(&mut c, &a, "m3", 10), None, "expired");
        assert_eq!(look(&mut c, &a, "nope", 10), None);
        c.put(&a, id("new"), tomb(701, 1_000));
        assert_eq!(look(&mut c, &a, "new", 10), Some(701));
        assert_eq!(
            look(&mut c, &b, "m1", 10),
            None,
            "a conversation with no rows"
        );
        assert!(!c.is_read_by_row(&b));
        assert_eq!(stats.tombstone_sets_read, 2, "a's once, b's once");
        assert_eq!(stats.tombstone_rows_read, 4, "m5, m6, m3, nope");
    }

    #[test]
    fn a_loaded_set_answers_until_each_expiry() {
        let mut c = Cache::new(1 << 20, None);
        let a = conv(1);
        assert!(!c.is_loaded(&a));
        c.insert_loaded(
            &a,
            [(id("m1"), tomb(1, 100)), (id("m0"), tomb(0, 10))],
            UnixMs(10),
        );
        assert!(c.is_loaded(&a));
        assert_eq!(c.len(), 1, "m0 had expired when the set was read");
        assert_eq!(c.get(&a, &id("m1"), UnixMs(99)).unwrap().seq, wire::Seq(1));
        assert!(c.get(&a, &id("m1"), UnixMs(100)).is_none());
        assert!(c.get(&conv(2), &id("m1"), UnixMs(0)).is_none());
        let before = c.bytes();
        c.expire(UnixMs(100));
        assert_eq!(c.len(), 0);
        assert!(c.bytes() < before);
        assert_eq!(c.bytes(), SET_BYTES + a.as_str().len());
    }

    #[test]
    fn over_the_bound_the_least_recent_clean_set_goes_and_pinned_ones_stay() {
        let one = SET_BYTES + 3 + ENTRY_BYTES + 2 + 36;
        let mut c = Cache::new(2 * one, None);
        let (a, b, d) = (conv(1), conv(2), conv(3));
        c.insert_loaded(&a, [], UnixMs(0));
        c.put(&a, id("m1"), tomb(1, 100));
        c.insert_loaded(&b, [(id("m1"), tomb(1, 100))], UnixMs(0));
        assert_eq!(c.bytes(), 2 * one);
        c.evict();
        assert_eq!(c.evictions(), 0, "within the bound");
        // a is older but pinned: b goes.
        c.insert_loaded(&d, [(id("m1"), tomb(1, 100))], UnixMs(0));
        assert!(
            c.is_loaded(&b),
            "a set just read stays until the input ends"
        );
        c.evict();
        assert!(c.is_loaded(&a) && !c.is_loaded(&b) && c.is_loaded(&d));
        assert_eq!(c.evictions(), 1);
        let mut written = Vec::new();
        c.move_written(&mut written);
        assert_eq!(written, std::slice::from_ref(&a));
        c.insert_loaded(&b, [(id("m1"), tomb(1, 100))], UnixMs(0));
        c.evict();
        assert!(c.is_loaded(&a), "over the bound while a is pinned");
        assert!(!c.is_loaded(&d), "d was the least recent clean set");
        // Once a's write is durable, a counts as just used: b is the least recent.
        c.unpin(written);
        c.evict();
        assert!(c.is_loaded(&a) && c.is_loaded(&b), "within the bound again");
        c.insert_loaded(&d, [(id("m1"), tomb(1, 100))], UnixMs(0));
        c.evict();
        assert!(c.is_loaded(&a) && !c.is_loaded(&b) && c.is_loaded(&d));
        assert_eq!(c.bytes(), 2 * one);
        assert_eq!(c.evictions(), 3);
    }

    #[test]
    fn a_collector_sweeps_at_once_and_then_at_least_every_interval() {
        let mut c = Cache::new(0, None);
        c.swept(UnixMs(1_000), None);
        assert_eq!(c.sweep_at(), None, "nothing due, nothing written: no sweep");
        let mut c = Cache::new(0, None).collecting_every(600_000);
        assert_eq!(c.sweep_at(), Some(UnixMs(0)), "due at once");
        c.swept(UnixMs(1_000), None);
        assert_eq!(c.sweep_at(), Some(UnixMs(601_000)));
        c.swept(UnixMs(1_000), Some(UnixMs(90_000)));
        assert_eq!(
            c.sweep_at(),
            Some(UnixMs(90_000)),
            "a known expiry comes first"
        );
        c.swept(UnixMs(1_000), Some(UnixMs(9_000_000)));
        assert_eq!(
            c.sweep_at(),
            Some(UnixMs(601_000)),
            "the interval comes first"
        );
    }

    #[test]
    fn a_zero_bound_keeps_only_pinned_sets() {
        let mut c = Cache::new(0, None);
        let a = conv(1);
        c.insert_loaded(&a, [(id("m1"), tomb(1, 100))], UnixMs(0));
        assert!(c.get(&a, &id("m1"), UnixMs(0)).is_some());
        c.put(&a, id("m2"), tomb(2, 100));
        c.evict();
        assert!(c.is_loaded(&a));
        c.unpin_written();
        c.evict();
        assert!(!c.is_loaded(&a));
        assert_eq!(c.bytes(), 0);
        assert_eq!(c.sweep_at(), Some(UnixMs(100)));
    }

    #[test]
    fn a_rewrite_counts_once() {
        let mut c = Cache::new(1 << 20, None);
        let a = conv(1);
        c.insert_loaded(&a, [], UnixMs(0));
        c.put(&a, id("m1"), tomb(1, 100));
        let bytes = c.bytes();
        c.put(
            &a,
            id("m1"),
            Tombstone {
                retracted: true,
                ..tomb(1, 100)
            },
        );
        assert_eq!(c.bytes(), bytes);
        assert!(c.get(&a, &id("m1"), UnixMs(0)).unwrap().retracted);
        let mut written = Vec::new();
        c.move_written(&mut written);
        assert_eq!(written.len(), 2);
    }

    /// Two stored tombstones of one id in one conversation (a store rekeyed from per-author
    /// keys) answer as the first message, read whole or by row.
    #[test]
    fn of_two_tombstones_of_one_id_the_first_is_known() {
        use crate::store::Store as _;
        let c1 = conv(1);
        let mut store = crate::store::MemoryStore::new();
        let mut batch = Batch::new();
        for (author, seq) in [(user(2), 4), (user(1), 9)] {
            let row = TombstoneRow {
                author: author.clone(),
                id: id("same"),
                conv_id: c1.clone(),
                seq: wire::Seq(seq),
                expires_at: UnixMs(1_000),
                retracted: false,
            };
            let key = format!("{c1}/same/{author}");
            batch.put_expiring(
                Table::Tombstones,
                &key,
                &serde_json::to_vec(&row).unwrap(),
                1_000,
            );
        }
        store.commit(&batch).unwrap();
        let mut reader = store.reader().unwrap();
        let mut stats = crate::stats::RelayStats::default();
        for by_row in [false, true] {
            let mut c = Cache::new(1 << 20, None);
            if by_row {
                c.read_by_row(&c1);
            }
            let t = lookup(
                &mut c,
                &mut *reader,
                &mut stats,
                &c1,
                &id("same"),
                UnixMs(1),
            )
            .unwrap()
            .unwrap();
            assert_eq!(
                (t.author, t.seq),
                (user(2), wire::Seq(4)),
                "by row: {by_row}"
            );
        }
    }

    /// Rows keyed by author are rekeyed by conversation (value and expiry kept); a rerun
    /// changes nothing; the author of a rekeyed row is read from its key.
    #[test]
    fn author_keys_are_rekeyed_by_conversation_once() {
        use crate::store::Store as _;
        let (a, b) = (user(1), user(2));
        let mut store = crate::store::MemoryStore::new();
        let mut batch = Batch::new();
        let mut rows = Vec::new();
        for (n, (author, c)) in [(&a, conv(1)), (&b, conv(1)), (&a, conv(2))]
            .into_iter()
            .enumerate()
        {
            let row = TombstoneRow {
                author: author.clone(),
                id: id(&format!("m{n}")),
                conv_id: c,
                seq: wire::Seq(n as u64 + 1),
                expires_at: UnixMs(100 + n as u64),
                retracted: n == 1,
            };
            let value = serde_json::to_vec(&row).unwrap();
            batch.put_expiring(
                Table::Tombstones,
                &format!("{author}/{}", row.id),
                &value,
                row.expires_at.get(),
            );
            rows.push((row, value));
        }
        store.commit(&batch).unwrap();
        let mut reader = store.reader().unwrap();
        assert_eq!(
            rekey_by_conversation(&mut store, &mut *reader, 2).unwrap(),
            3
        );
        let mut reader = store.reader().unwrap();
        assert_eq!(
            rekey_by_conversation(&mut store, &mut *reader, 2).unwrap(),
            0
        );
        let snapshot = store.load().unwrap();
        let stored = &snapshot[&Table::Tombstones];
        assert_eq!(stored.len(), 3);
        for (row, value) in &rows {
            let key = format!("{}/{}/{}", row.conv_id, row.id, row.author);
            assert_eq!(stored.get(&key), Some(value), "{key}");
            assert_eq!(key_author(&key), Some(row.author.clone()));
        }
        let mut reader = store.reader().unwrap();
        assert_eq!(reader.next_expiry(Table::Tombstones, 0).unwrap(), Some(100));
        let latest = reader.latest_expiries(Table::Tombstones, 0).unwrap();
        assert_eq!(latest, [(format!("{}/m2/{a}", conv(2)), 102)]);
    }
}
