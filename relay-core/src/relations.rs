//! The conversations and friendships the relay holds in memory: two bounded caches over the
//! store's `conversations` and `contacts` tables.
//!
//! Neither is loaded at start (a relay's conversations grow with its users times their
//! contacts):
//!
//! * **A conversation** (members and seq counters) is read by its id on first use — a `msg`,
//!   a receipt, a retraction naming it — with one keyed read. What the relay must know of every
//!   conversation at all times is only what its queues hold (the queue bounds and the expiry
//!   timers), and that lives apart, per non-empty queue, in `queue_index` ([`crate::queue`]).
//! * **A user's contacts** (every friendship it is in, with its status and conversation) are
//!   read whole with one prefix scan of `contacts`, where each friendship has one row per
//!   member: a friends list, a friend request or answer, a call's contact check, the list of
//!   conversations of a `sync` or of `GET /conversations/active`. The `friendships` table keeps
//!   each friendship once more by id (the record a backup reads); the relay does not read it
//!   but at the first start of a store written before `contacts` existed.
//! * **Bounded** by [`crate::Config::conversation_cache_bytes`] and
//!   [`crate::Config::contact_cache_bytes`] (estimates of the heap each entry takes,
//!   [`CONVERSATION_BYTES`] and [`FRIENDSHIP_BYTES`] over its strings), least recently used
//!   out first.
//! * **Only clean entries are evicted** ([`crate::lru`]): a write pins what it changed until
//!   the batch that carries it is durable, so a counter or a friendship the store does not have
//!   yet is always in memory. A friendship is written to both members' lists, so an input that
//!   changes one reads both members' contacts first.
//!
//! A read that fails changes nothing: the request gets 503 `STORAGE_UNAVAILABLE`, a frame an
//! error frame of that code (no ack), and the client tries again.

use wire::{ConvId, FriendshipId, Seq, UserUuid};

use crate::lru::{Lru, Weigh};
use crate::planted::planted;
use crate::rows::{ConversationRow, FriendshipRow, ReceiptKind, ReceiptMarkRow, decode};
use crate::store::{RowKey, StoreError, StoreRead, Table};

/// Estimated heap per conversation in memory besides its id and member strings: the row, its
/// entry and place in the LRU order, the allocator's overhead. With [`CONTACTS_BYTES`] and
/// [`FRIENDSHIP_BYTES`], set from `relay-pg`'s `state_memory` example ("conversations at
/// rest": 1,697 B of heap for a conversation and its members' two lists of one friendship;
/// these constants estimate 1,696).
pub(crate) const CONVERSATION_BYTES: usize = 370;

/// Estimated heap per friendship in a cached contact list besides its strings: the row in the
/// list's buffer and its strings' allocations.
pub(crate) const FRIENDSHIP_BYTES: usize = 160;

/// Estimated heap per cached contact list besides its friendships and its key: the list's
/// entry and place in the LRU order, its buffer's header.
pub(crate) const CONTACTS_BYTES: usize = 320;

/// A conversation as the cache holds it: its row, and its receipt marks once a receipt needed
/// them (`marks[member][kind]`: the highest seq that member acknowledged, by
/// [`ReceiptKind::index`]).
#[derive(Debug, Clone)]
pub(crate) struct Conv {
    row: ConversationRow,
    marks: Option<[[Seq; 2]; 2]>,
}

impl Weigh for Conv {
    fn weight(&self) -> usize {
        CONVERSATION_BYTES
            + self
                .row
                .members
                .iter()
                .map(|m| m.as_str().len())
                .sum::<usize>()
    }
}

impl Weigh for ConvId {
    fn weight(&self) -> usize {
        self.as_str().len()
    }
}

/// Every friendship of one user, by id (oldest first).
#[derive(Debug, Clone, Default)]
pub(crate) struct Contacts(pub(crate) Vec<FriendshipRow>);

impl Weigh for Contacts {
    fn weight(&self) -> usize {
        CONTACTS_BYTES
            + self
                .0
                .iter()
                .map(|f| {
                    FRIENDSHIP_BYTES
                        + f.requester.as_str().len()
                        + f.addressee.as_str().len()
                        + f.conversation_id.as_ref().map_or(0, |c| c.as_str().len())
                })
                .sum::<usize>()
    }
}

impl Contacts {
    /// The friendship between the owner of this list and `other`.
    pub(crate) fn with(&self, other: &UserUuid) -> Option<&FriendshipRow> {
        self.0
            .iter()
            .find(|f| f.requester == *other || f.addressee == *other)
    }

    /// The friendship `id`.
    pub(crate) fn by_id(&self, id: FriendshipId) -> Option<&FriendshipRow> {
        self.0
            .binary_search_by_key(&id, |f| f.id)
            .ok()
            .map(|i| &self.0[i])
    }

    /// The conversations of the accepted friendships, by conversation id.
    pub(crate) fn conversations(&self) -> Vec<ConvId> {
        let mut convs: Vec<ConvId> = self
            .0
            .iter()
            .filter_map(|f| f.conversation_id.clone())
            .collect();
        convs.sort();
        convs.dedup();
        convs
    }

    fn put(&mut self, f: &FriendshipRow) {
        match self.0.binary_search_by_key(&f.id, |g| g.id) {
            Ok(i) => self.0[i] = f.clone(),
            Err(i) => self.0.insert(i, f.clone()),
        }
    }
}

/// The conversations and the contact lists in memory.
#[derive(Debug)]
pub(crate) struct Relations {
    conversations: Lru<ConvId, Conv>,
    contacts: Lru<UserUuid, Contacts>,
    /// A defect to plant (feature `planted-bugs`; see [`crate::PlantedBug`]).
    #[cfg(feature = "planted-bugs")]
    pub(crate) planted_bug: Option<crate::PlantedBug>,
}

impl Default for Relations {
    fn default() -> Self {
        Self::new(usize::MAX, usize::MAX)
    }
}

impl Relations {
    /// Empty caches of at most `conversation_bound` and `contact_bound` bytes.
    pub(crate) fn new(conversation_bound: usize, contact_bound: usize) -> Self {
        Self {
            conversations: Lru::new(conversation_bound),
            contacts: Lru::new(contact_bound),
            #[cfg(feature = "planted-bugs")]
            planted_bug: None,
        }
    }

    /// The conversation `conv` if it is in memory (no read: [`with_conversation`] reads).
    pub(crate) fn conversation(&self, conv: &ConvId) -> Option<&ConversationRow> {
        self.conversations.get(conv).map(|c| &c.row)
    }

    /// The highest seq `reader` acknowledged with a `kind` receipt in `conv` (whose marks are
    /// in memory: [`read_marks`]; 0 when none).
    pub(crate) fn mark(&self, conv: &ConvId, reader: &UserUuid, kind: ReceiptKind) -> Seq {
        let Some(c) = self.conversations.get(conv) else {
            return Seq(0);
        };
        debug_assert!(c.marks.is_some(), "a mark used before it was read");
        match (c.row.index_of(reader), c.marks) {
            (Some(i), Some(marks)) => marks[i][kind.index()],
            _ => Seq(0),
        }
    }

    /// Sets `reader`'s `kind` mark in `conv` (if its marks are in memory) to `seq`, pinned as
    /// written.
    pub(crate) fn set_mark(
        &mut self,
        conv: &ConvId,
        reader: &UserUuid,
        kind: ReceiptKind,
        seq: Seq,
    ) {
        self.conversations.write(conv, |c| {
            if let (Some(i), Some(marks)) = (c.row.index_of(reader), c.marks.as_mut()) {
                marks[i][kind.index()] = seq;
            }
        });
    }

    /// Puts friendship `f` in `member`'s contact list, pinned as written; `false` when that
    /// list is not in memory.
    pub(crate) fn put_friendship(&mut self, member: &UserUuid, f: &FriendshipRow) -> bool {
        self.contacts.write(member, |c| c.put(f)).is_some()
    }

    /// Caches the new conversation `c` (no receipt marks yet), pinned as written.
    pub(crate) fn insert_new(&mut self, c: ConversationRow) {
        let id = c.id.clone();
        let marks = Some([[Seq(0); 2]; 2]);
        self.conversations
            .insert(id.clone(), Conv { row: c, marks });
        self.conversations.write(&id, |_| ());
    }

    /// Assigns the next seq of `conv` (in memory) to a message by `author`, hands the
    /// conversation with its new counters to `stored` and pins it as written: the seq, and
    /// when the message is `handed` to the other member's shard the seq of the author's
    /// previous hand-off in `conv` (its stream's `prev`; `Seq(0)` otherwise). `None` when
    /// `conv` is not in memory or `author` is not a member.
    pub(crate) fn next_seq(
        &mut self,
        conv: &ConvId,
        author: &UserUuid,
        handed: bool,
        stored: impl FnOnce(&ConversationRow),
    ) -> Option<(Seq, Seq)> {
        self.conversations
            .write(conv, |c| {
                let c = &mut c.row;
                let i = c.index_of(author)?;
                let seq = c.last_seq.next();
                c.last_seq = seq;
                c.last_authored[i] = seq;
                let mut prev = Seq(0);
                if handed {
                    prev = std::mem::replace(&mut c.handed[i], seq);
                }
                stored(c);
                Some((seq, prev))
            })
            .flatten()
    }

    /// Pins the writes since the last move to `batch`'s lists.
    pub(crate) fn move_written(&mut self, convs: &mut Vec<ConvId>, users: &mut Vec<UserUuid>) {
        self.conversations.move_written(convs);
        self.contacts.move_written(users);
    }

    /// See [`Lru::unpin_written`].
    pub(crate) fn unpin_written(&mut self) {
        self.conversations.unpin_written();
        self.contacts.unpin_written();
    }

    /// See [`Lru::unpin`].
    pub(crate) fn unpin(&mut self, convs: Vec<ConvId>, users: Vec<UserUuid>) {
        self.conversations.unpin(convs);
        self.contacts.unpin(users);
    }

    /// See [`Lru::evict`].
    pub(crate) fn evict(&mut self) {
        self.conversations.evict();
        self.contacts.evict();
    }

    /// What the caches hold now.
    pub(crate) fn stats(&self) -> crate::stats::RelationCacheStats {
        crate::stats::RelationCacheStats {
            conversation_bytes: self.conversations.bytes(),
            conversations: self.conversations.len(),
            contact_bytes: self.contacts.bytes(),
            contact_lists: self.contacts.len(),
            evictions: self.conversations.evictions() + self.contacts.evictions(),
        }
    }
}

/// Calls `f` with the conversation `conv`, reading it from the store if it is not in memory
/// (`None`: there is no such conversation). A free function over the relay's parts, so that
/// the routing path can hold other borrows of the relay while it reads.
pub(crate) fn with_conversation<R>(
    relations: &mut Relations,
    reader: &mut dyn StoreRead,
    stats: &mut crate::stats::RelayStats,
    conv: &ConvId,
    f: impl FnOnce(&ConversationRow) -> R,
) -> Result<Option<R>, StoreError> {
    if let Some(c) = relations.conversations.read(conv) {
        return Ok(Some(f(&c.row)));
    }
    let read = reader
        .get(Table::Conversations, conv.as_str())
        .inspect_err(|_| stats.conversation_read_failures += 1)?;
    // Counted once read: a read that waits (reading ahead) counts when it is back.
    stats.conversations_read += 1;
    let Some(value) = read else {
        return Ok(None);
    };
    let mut row: ConversationRow = decode(Table::Conversations, conv.as_str(), &value)?;
    if row.id != *conv {
        return Err(StoreError::Backend(format!(
            "corrupt row {:?} in table {}: it holds another conversation",
            conv.as_str(),
            Table::Conversations.name()
        )));
    }
    if planted!(relations, EvictedConversationForgotten) {
        // PLANTED BUG (test-only): a conversation read back from the store starts its
        // counters again, as if it had no messages.
        row.last_seq = Seq(0);
        row.last_authored = [Seq(0), Seq(0)];
    }
    let r = f(&row);
    relations
        .conversations
        .insert(conv.clone(), Conv { row, marks: None });
    Ok(Some(r))
}

/// Calls `f` with the contacts of `user`, reading them from the store if they are not in
/// memory (one prefix scan; a user with no friendship has an empty list).
pub(crate) fn with_contacts<R>(
    relations: &mut Relations,
    reader: &mut dyn StoreRead,
    stats: &mut crate::stats::RelayStats,
    user: &UserUuid,
    f: impl FnOnce(&Contacts) -> R,
) -> Result<R, StoreError> {
    if let Some(c) = relations.contacts.read(user) {
        return Ok(f(c));
    }
    let mut prefix = String::with_capacity(user.as_str().len() + 1);
    prefix.push_str(user.as_str());
    prefix.push('/');
    let rows = reader
        .scan_prefix(Table::Contacts, &prefix)
        .inspect_err(|_| stats.contact_read_failures += 1)?;
    stats.contacts_read += 1;
    let mut list = Contacts(Vec::with_capacity(rows.len()));
    for (key, value) in &rows {
        let f: FriendshipRow = decode(Table::Contacts, key, value)?;
        if f.requester != *user && f.addressee != *user {
            return Err(StoreError::Backend(format!(
                "corrupt row {key:?} in table {}: a friendship of other accounts",
                Table::Contacts.name()
            )));
        }
        list.0.push(f);
    }
    // The keys order the rows by id already (20 digits): this only guards the invariant.
    list.0.sort_by_key(|f| f.id);
    let r = f(&list);
    relations.contacts.insert(user.clone(), list);
    Ok(r)
}

/// Reads the receipt marks of the conversation `conv` (in memory: [`with_conversation`]) unless
/// they are there already: one prefix scan of `receipt_marks` (at most four rows).
pub(crate) fn read_marks(
    relations: &mut Relations,
    reader: &mut dyn StoreRead,
    stats: &mut crate::stats::RelayStats,
    conv: &ConvId,
) -> Result<(), StoreError> {
    let Some(c) = relations.conversations.get(conv) else {
        debug_assert!(false, "marks read before their conversation");
        return Ok(());
    };
    if c.marks.is_some() {
        return Ok(());
    }
    let mut prefix = String::with_capacity(conv.as_str().len() + 1);
    prefix.push_str(conv.as_str());
    prefix.push('/');
    let rows = reader
        .scan_prefix(Table::ReceiptMarks, &prefix)
        .inspect_err(|_| stats.conversation_read_failures += 1)?;
    stats.receipt_marks_read += 1;
    let mut marks = [[Seq(0); 2]; 2];
    for (key, value) in &rows {
        let m: ReceiptMarkRow = decode(Table::ReceiptMarks, key, value)?;
        let Some(i) = c.row.index_of(&m.reader).filter(|_| m.conv_id == *conv) else {
            return Err(StoreError::Backend(format!(
                "corrupt row {key:?} in table {}: a mark of another conversation or reader",
                Table::ReceiptMarks.name()
            )));
        };
        marks[i][m.kind.index()] = m.seq;
    }
    // Not a write: the marks are what the store holds (no pin).
    relations
        .conversations
        .update(conv, |c| c.marks = Some(marks));
    Ok(())
}

pub(crate) fn write_contact_key(k: &mut RowKey<'_>, user: &UserUuid, id: FriendshipId) {
    k.push_str(user.as_str());
    k.push('/');
    k.push_str(&format!("{:020}", id.get()));
}

/// Writes the `contacts` rows of every stored friendship ([`crate::store::derive_in_pages`]),
/// for a store written before that table existed. The caller records the meta row that says
/// it is done.
pub(crate) fn index_stored_friendships(
    store: &mut dyn crate::store::Store,
    reader: &mut dyn StoreRead,
    page_rows: usize,
) -> Result<u64, StoreError> {
    crate::store::derive_in_pages(
        store,
        reader,
        Table::Friendships,
        page_rows,
        |batch, key, value| {
            let f: FriendshipRow = decode(Table::Friendships, key, value)?;
            for member in [&f.requester, &f.addressee] {
                batch.put_row(
                    Table::Contacts,
                    |k| write_contact_key(k, member, f.id),
                    |out| out.extend_from_slice(value),
                );
            }
            Ok(())
        },
    )
}
