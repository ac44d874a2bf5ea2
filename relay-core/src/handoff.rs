//! The hand-off between shards: how a message its conversation's owner shard committed reaches
//! its recipient's shard exactly once and in order, over a transport that may lose, repeat and
//! reorder what it carries, and across crashes of either side (ARCHITECTURE "Running N active
//! relays"). Sans IO like the rest of the core: [`Outbox`] is the owner's side, [`Inbox`] the
//! recipient shard's, and what passes between them ([`Handoff`], [`Applied`]) is a value the
//! shell carries, in a process or between processes.
//!
//! * **Which shard.** Users are hashed into a fixed number of shards ([`ShardMap`]); a
//!   conversation is owned by the shard of its lower member uuid, which alone assigns its seqs
//!   and decides its message ids (the tombstones are the conversation's).
//! * **The owner** commits the message, its seq, its tombstone and its outbox row in one
//!   commit, then acknowledges the sender ([`Outbox::push`] is told of the row once it is
//!   written). A row belongs to a *stream*, the messages of one conversation for one recipient
//!   ([`Stream`]), and names the previous seq of its stream (`prev`): the seqs a recipient gets
//!   from a conversation are not consecutive (the other member's own messages take seqs too),
//!   so the chain of `prev` links is what tells a gap from the end. The caller knows `prev`
//!   without a lookup: it is the last seq the sender authored in the conversation, which the
//!   conversation's row keeps.
//! * **At least once.** [`Outbox::poll`] hands out every row not acknowledged: at once the
//!   first time, again [`RESEND_MS`] after the last time, at most [`MAX_IN_FLIGHT_PER_SHARD`]
//!   in flight per destination (a slow or gone shard holds rows, not the owner's memory of
//!   what it sent beyond that).
//! * **The recipient's shard** applies a hand-off whose `prev` is its stream's last applied
//!   seq, with every held one that follows it, in one commit of its own that also writes the
//!   stream's new mark ([`Received::Apply`]); a hand-off already applied is answered with the
//!   durable mark again ([`Received::Again`]); one past a gap is held until the gap is filled,
//!   at most [`Inbox`]'s bound of them, beyond which it is dropped and sent again later. A mark
//!   is acknowledged ([`Applied`]) only once the commit that wrote it is durable
//!   ([`Inbox::durable`]), so a crash before that loses nothing the owner forgets.
//! * **The owner again** deletes every row of the stream up to the acknowledged seq
//!   ([`Outbox::on_applied`], acknowledgements are cumulative), in a commit of its own: a row
//!   deleted late is sent again and answered as a repeat.
//!
//! After a crash the owner rebuilds its outbox from the stored rows ([`Outbox::push`] again,
//! in any order) and the recipient's shard its marks from the stored marks
//! ([`Inbox::restore`]); what was held, or applied without a durable commit, comes again from
//! the outbox.

use std::collections::{BTreeMap, BTreeSet};

use sha2::{Digest as _, Sha256};
use wire::{ConvId, Seq, UnixMs, UserUuid};

/// How long a hand-off sent and not acknowledged waits before it is sent again.
pub const RESEND_MS: u64 = 1_000;
/// Hand-offs sent and not acknowledged (within [`RESEND_MS`]) per destination shard at most.
pub const MAX_IN_FLIGHT_PER_SHARD: usize = 256;
/// Hand-offs past a gap an [`Inbox`] holds by default ([`Inbox::new`]).
pub const MAX_HELD: usize = 4_096;

/// A shard: one owner of a share of the users and of the conversations they own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ShardId(pub u16);

/// Users hashed into a fixed number of shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardMap {
    shards: u16,
}

impl ShardMap {
    /// A map of `shards` shards (`None` for none).
    pub fn new(shards: u16) -> Option<Self> {
        (shards > 0).then_some(Self { shards })
    }

    /// How many shards there are.
    pub fn shards(&self) -> u16 {
        self.shards
    }

    /// The shard of `user`: SHA-256 of its uuid's text, so that every process and every build
    /// agrees (a `std` hasher is seeded per process).
    pub fn of_user(&self, user: &UserUuid) -> ShardId {
        if self.shards == 1 {
            return ShardId(0);
        }
        let digest = Sha256::digest(user.as_str().as_bytes());
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        let n = u64::from_be_bytes(first) % u64::from(self.shards);
        // Below `shards`, a `u16`.
        ShardId(u16::try_from(n).unwrap_or(0))
    }

    /// The shard that owns the conversation of `members`: its lower member's.
    pub fn owner_of(&self, members: [&UserUuid; 2]) -> ShardId {
        self.of_user(members[0].min(members[1]))
    }
}

/// Where a relay core runs: the shard map of its deployment and the shard it is. A core owns
/// the state of its shard's users and of the conversations their shard owns; what it decides
/// for a user of another shard crosses as a hand-off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardPlace {
    map: ShardMap,
    me: ShardId,
}

impl ShardPlace {
    /// Shard `me` of `map` (`None` if `map` has no such shard).
    pub fn new(map: ShardMap, me: ShardId) -> Option<Self> {
        (me.0 < map.shards()).then_some(Self { map, me })
    }

    /// The one shard of a relay that is not sharded: every user is its own.
    pub fn single() -> Self {
        Self {
            map: ShardMap { shards: 1 },
            me: ShardId(0),
        }
    }

    /// The shard this core is.
    pub fn me(&self) -> ShardId {
        self.me
    }

    /// The deployment's shard map.
    pub fn map(&self) -> ShardMap {
        self.map
    }

    /// The shard of `user` if it is not this one (`None`: the user is this shard's).
    pub fn elsewhere(&self, user: &UserUuid) -> Option<ShardId> {
        if self.map.shards == 1 {
            return None;
        }
        let shard = self.map.of_user(user);
        (shard != self.me).then_some(shard)
    }
}

impl Default for ShardPlace {
    fn default() -> Self {
        Self::single()
    }
}

/// The messages of one conversation for one recipient: what a chain of `prev` links orders.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Stream {
    /// Who the messages are for.
    pub recipient: UserUuid,
    /// Their conversation.
    pub conv: ConvId,
}

/// One message handed from its conversation's owner shard to its recipient's shard: an outbox
/// row of the owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handoff<T> {
    /// The owner shard.
    pub from: ShardId,
    /// The recipient's shard.
    pub to: ShardId,
    /// Whose and which conversation's.
    pub stream: Stream,
    /// Its seq in the conversation.
    pub seq: Seq,
    /// The previous seq of its stream (`Seq(0)` for the first).
    pub prev: Seq,
    /// What is handed (the message).
    pub item: T,
}

/// A message as its conversation's owner shard hands it to its recipient's shard: what the
/// recipient's queue keeps of it (its seq is the hand-off's).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Message {
    /// Its author, the conversation's other member.
    pub author: UserUuid,
    /// The author's id of it.
    pub id: wire::MessageId,
    /// The frame's `crypto_v`, if it had one.
    pub crypto_v: Option<u32>,
    /// The ciphertext, as the author sent it.
    pub payload: wire::frames::Payload,
    /// When the owner accepted it.
    pub at: UnixMs,
}

/// A recipient shard's acknowledgement: its stream is applied, durably, through `through`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The recipient's shard.
    pub from: ShardId,
    /// The owner shard.
    pub to: ShardId,
    /// Which stream.
    pub stream: Stream,
    /// The last seq applied.
    pub through: Seq,
}

/// A `msg` of a user of shard `from` in a conversation shard `to` owns: the owner decides it
/// (its id, its seq) and answers with a [`Verdict`]. Not durable: a submission lost with a
/// crash leaves its sender without an `ack`, and the client sends the message again with the
/// same id, as after any lost `ack`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submission {
    /// The sender's shard.
    pub from: ShardId,
    /// The conversation's owner shard.
    pub to: ShardId,
    /// The sender's connection at its shard (the shell's number), for the answer.
    pub conn: u64,
    /// The sender.
    pub author: UserUuid,
    /// The frame as the sender sent it.
    pub frame: Submitted,
}

/// A frame a user's shard submits to the conversation's owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Submitted {
    /// A message: the owner decides its id and seq.
    Msg(wire::frames::MsgFrame),
    /// A retraction: the owner's tombstone says whether the sender wrote the message.
    Retract(wire::frames::RetractFrame),
}

/// The owner's answer to a [`Submission`], released after the commit that stored the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The owner shard.
    pub from: ShardId,
    /// The sender's shard.
    pub to: ShardId,
    /// The sender's connection at its shard.
    pub conn: u64,
    /// The sender (the answer goes to its connection only while that is still its).
    pub author: UserUuid,
    /// What the sender is told.
    pub reply: Reply,
}

/// What a shard answers a frame another shard submitted or signalled for its sender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// The `ack` of message `id` with `seq`: a new message (`new`) or a resend.
    Ack {
        /// The message's id.
        id: wire::MessageId,
        /// Its seq.
        seq: Seq,
        /// Stored now (the sender's shard charges its message rate), not a resend.
        new: bool,
    },
    /// An error frame.
    Error {
        /// Its code.
        code: wire::ErrorCode,
        /// Its words.
        words: String,
        /// The type of the frame refused.
        ref_type: String,
        /// The id of the frame refused, if it had one.
        id: Option<String>,
    },
}

/// A best-effort frame for a user of another shard (typing notices, call signals): sent on
/// the user's connection if it has one there. Nothing keeps it: lost, it is gone, as when a
/// connection drops it.
#[derive(Debug, Clone, PartialEq)]
pub struct Signal {
    /// The sender's shard.
    pub from: ShardId,
    /// The user's shard.
    pub to: ShardId,
    /// Whom it is for.
    pub user: UserUuid,
    /// The frame, as it is sent.
    pub frame: wire::ServerFrame,
    /// What to answer the sender's connection (its number and its user) when the user has
    /// no connection (`None`: nothing).
    pub offline: Option<(u64, UserUuid, Reply)>,
}

/// What a notice between shards says ([`Notices`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Notice {
    /// `reader` received (`read: false`) or read the messages `author` wrote in `conv`
    /// through `seq`; `from` and `to` are their aliases, as the receipt frame names them.
    Receipt {
        /// `read` receipt, else `delivered`.
        read: bool,
        /// The conversation.
        conv: ConvId,
        /// Through which seq.
        seq: Seq,
        /// Who sent the receipt.
        reader: UserUuid,
        /// Whose messages it covers: whom it is for.
        author: UserUuid,
        /// The reader's alias.
        from: Option<wire::AliasId>,
        /// The author's alias.
        to: Option<wire::AliasId>,
    },
    /// `author` retracted its message `id` (seq `seq`) of `conv`, for `recipient`; `from` is
    /// the author's alias.
    Retract {
        /// The conversation.
        conv: ConvId,
        /// The message.
        id: wire::MessageId,
        /// Its seq.
        seq: Seq,
        /// Its author.
        author: UserUuid,
        /// The author's alias.
        from: wire::AliasId,
        /// Whom it is for.
        recipient: UserUuid,
    },
}

/// The key of a [`Notice`]: one per user, conversation and what it is about.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct NoticeKey {
    /// Whom it is for.
    pub user: UserUuid,
    /// The conversation.
    pub conv: ConvId,
    /// `delivered`, `read`, or `retract/<id>`.
    pub what: String,
}

impl Notice {
    /// Its key: a later receipt of the same kind replaces the one before.
    pub fn key(&self) -> NoticeKey {
        match self {
            Self::Receipt {
                read, conv, author, ..
            } => NoticeKey {
                user: author.clone(),
                conv: conv.clone(),
                what: if *read { "read" } else { "delivered" }.to_owned(),
            },
            Self::Retract {
                conv,
                id,
                recipient,
                ..
            } => NoticeKey {
                user: recipient.clone(),
                conv: conv.clone(),
                what: format!("retract/{}", id.as_str()),
            },
        }
    }
}

/// What one shard's core sends another's: carried by the shell, in a process or between
/// processes, to [`Relay::handle_crossing`](crate::Relay::handle_crossing) of the core that runs
/// [`Crossing::to`].
#[derive(Debug, Clone, PartialEq)]
pub enum Crossing {
    /// A message for the recipient's shard (at least once, from the owner's outbox).
    Handoff(Handoff<Message>),
    /// The recipient's shard applied hand-offs, durably.
    Applied(Applied),
    /// A sender's `msg` or `retract` for its conversation's owner (at most once).
    Submit(Submission),
    /// The answer to a submission, or to a signal for a user without a connection.
    Verdict(Verdict),
    /// A receipt or a retraction for a user of the shard it goes to (at least once).
    Notice(NoticeSent<NoticeKey, Notice>),
    /// A notice taken, durably.
    Taken(NoticeTaken<NoticeKey>),
    /// A typing notice or a call signal (at most once).
    Signal(Signal),
}

impl Crossing {
    /// The shard it goes to.
    pub fn to(&self) -> ShardId {
        match self {
            Self::Handoff(h) => h.to,
            Self::Applied(a) => a.to,
            Self::Submit(s) => s.to,
            Self::Verdict(v) => v.to,
            Self::Notice(n) => n.to,
            Self::Taken(t) => t.to,
            Self::Signal(s) => s.to,
        }
    }
}

/// A hand-off whose chain does not hold: an owner's defect, refused rather than applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a hand-off of seq {seq} after {prev} does not follow the chain applied through {applied}")]
pub struct Broken {
    /// The hand-off's seq.
    pub seq: Seq,
    /// Its `prev`.
    pub prev: Seq,
    /// Its stream's last applied seq.
    pub applied: Seq,
}

/// A row of the outbox in memory: what is handed, and when it is due to be sent (`UnixMs(0)`:
/// never sent, due at once).
#[derive(Debug, Clone)]
struct Row<T> {
    prev: Seq,
    item: T,
    due: UnixMs,
}

/// The rows of one stream not acknowledged yet, by seq, and where they go.
#[derive(Debug, Clone)]
struct Out<T> {
    to: ShardId,
    rows: BTreeMap<Seq, Row<T>>,
}

/// The owner shard's outbox in memory: every row its store holds, and per destination when each
/// is due to be sent, so that a poll looks only at what is due and at what is in flight (at most
/// [`MAX_IN_FLIGHT_PER_SHARD`]), however many rows a slow or gone destination holds back.
#[derive(Debug, Clone)]
pub struct Outbox<T> {
    me: ShardId,
    streams: BTreeMap<Stream, Out<T>>,
    /// Per destination: (due, stream, seq) of each row.
    schedule: BTreeMap<ShardId, BTreeSet<(UnixMs, Stream, Seq)>>,
}

impl<T: Clone> Outbox<T> {
    /// An empty outbox of shard `me`.
    pub fn new(me: ShardId) -> Self {
        Self {
            me,
            streams: BTreeMap::new(),
            schedule: BTreeMap::new(),
        }
    }

    /// A row is stored (committed with its message, or read back at start): it is sent at the
    /// next [`Outbox::poll`]. A row already held is kept as it is.
    pub fn push(&mut self, to: ShardId, stream: Stream, seq: Seq, prev: Seq, item: T) {
        let out = self.streams.entry(stream.clone()).or_insert_with(|| Out {
            to,
            rows: BTreeMap::new(),
        });
        if let std::collections::btree_map::Entry::Vacant(e) = out.rows.entry(seq) {
            e.insert(Row {
                prev,
                item,
                due: UnixMs(0),
            });
            let due = self.schedule.entry(out.to).or_default();
            due.insert((UnixMs(0), stream, seq));
        }
    }

    /// The rows to send at `now`: those never sent, and those sent [`RESEND_MS`] ago or more,
    /// the longest due first (among those never sent, each stream's oldest seq first), at most
    /// [`MAX_IN_FLIGHT_PER_SHARD`] in flight per destination. Each is due again
    /// [`RESEND_MS`] from `now`.
    pub fn poll(&mut self, now: UnixMs) -> Vec<Handoff<T>> {
        let mut sent = Vec::new();
        for (to, due) in &mut self.schedule {
            // In flight: due after now, the end of the schedule.
            let flying = due
                .iter()
                .rev()
                .take_while(|(at, _, _)| *at > now)
                .take(MAX_IN_FLIGHT_PER_SHARD)
                .count();
            let room = MAX_IN_FLIGHT_PER_SHARD.saturating_sub(flying);
            let ready: Vec<(UnixMs, Stream, Seq)> = due
                .iter()
                .take_while(|(at, _, _)| *at <= now)
                .take(room)
                .cloned()
                .collect();
            for key in ready {
                due.remove(&key);
                let (_, stream, seq) = key;
                let Some(row) = self
                    .streams
                    .get_mut(&stream)
                    .and_then(|out| out.rows.get_mut(&seq))
                else {
                    continue;
                };
                row.due = now.plus_ms(RESEND_MS);
                due.insert((row.due, stream.clone(), seq));
                sent.push(Handoff {
                    from: self.me,
                    to: *to,
                    stream,
                    seq,
                    prev: row.prev,
                    item: row.item.clone(),
                });
            }
        }
        sent
    }

    /// When a row is next due to be sent (`None`: nothing waits).
    pub fn next_deadline(&self) -> Option<UnixMs> {
        self.schedule
            .values()
            .filter_map(|due| due.first().map(|(at, _, _)| *at))
            .min()
    }

    /// An acknowledgement arrived: the rows of its stream through its seq are applied. Returns
    /// their seqs, for the caller to delete the rows (in a commit of its own).
    pub fn on_applied(&mut self, a: &Applied) -> Vec<Seq> {
        let Some(out) = self.streams.get_mut(&a.stream) else {
            return Vec::new();
        };
        let later = out.rows.split_off(&Seq(a.through.get().saturating_add(1)));
        let done = std::mem::replace(&mut out.rows, later);
        if let Some(due) = self.schedule.get_mut(&out.to) {
            for (seq, row) in &done {
                due.remove(&(row.due, a.stream.clone(), *seq));
            }
            if due.is_empty() {
                self.schedule.remove(&out.to);
            }
        }
        if out.rows.is_empty() {
            self.streams.remove(&a.stream);
        }
        done.into_keys().collect()
    }

    /// Rows not acknowledged yet.
    pub fn len(&self) -> usize {
        self.streams.values().map(|out| out.rows.len()).sum()
    }

    /// Rows of `stream` not acknowledged yet.
    pub fn stream_len(&self, stream: &Stream) -> usize {
        self.streams.get(stream).map_or(0, |out| out.rows.len())
    }

    /// Whether every row is acknowledged.
    pub fn is_empty(&self) -> bool {
        self.streams.is_empty()
    }
}

/// A notice for a user of another shard that means the same however often it arrives (a
/// receipt's "up to seq", a retraction): kept under its key until the destination
/// acknowledges it, sent at once and again every [`RESEND_MS`]. A newer notice under the same
/// key replaces the one before (a later receipt of the same kind), and an acknowledgement of
/// the older one leaves it in place: each is numbered (`version`), and an acknowledgement
/// names the number it answers.
#[derive(Debug, Clone)]
pub struct Notices<K, T> {
    me: ShardId,
    rows: BTreeMap<K, Noted<T>>,
    /// (due, key) of each row: what a poll looks at.
    schedule: BTreeSet<(UnixMs, K)>,
    next_version: u64,
}

/// A notice row in memory.
#[derive(Debug, Clone)]
struct Noted<T> {
    to: ShardId,
    version: u64,
    item: T,
    due: UnixMs,
}

/// A notice on its way: carried to the core of shard `to`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoticeSent<K, T> {
    /// The shard that keeps it until acknowledged.
    pub from: ShardId,
    /// The shard it is for.
    pub to: ShardId,
    /// Its key.
    pub key: K,
    /// Its number.
    pub version: u64,
    /// What it says.
    pub item: T,
}

/// A notice taken, durably: carried back to the core of shard `to`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoticeTaken<K> {
    /// The shard that took it.
    pub from: ShardId,
    /// The shard that sent it.
    pub to: ShardId,
    /// Its key.
    pub key: K,
    /// The number it answers.
    pub version: u64,
}

impl<K: Ord + Clone, T: Clone> Notices<K, T> {
    /// No notices, of shard `me`.
    pub fn new(me: ShardId) -> Self {
        Self {
            me,
            rows: BTreeMap::new(),
            schedule: BTreeSet::new(),
            next_version: 1,
        }
    }

    /// A new notice for shard `to` under `key` (replacing one not yet acknowledged): its
    /// number, for the row the caller writes with it.
    pub fn put(&mut self, to: ShardId, key: K, item: T) -> u64 {
        let version = self.next_version;
        self.restore(to, key, version, item);
        version
    }

    /// A notice row as stored (read back at start), or written now ([`Notices::put`]).
    pub fn restore(&mut self, to: ShardId, key: K, version: u64, item: T) {
        self.next_version = self.next_version.max(version.saturating_add(1));
        if let Some(old) = self.rows.remove(&key) {
            self.schedule.remove(&(old.due, key.clone()));
        }
        self.schedule.insert((UnixMs(0), key.clone()));
        self.rows.insert(
            key,
            Noted {
                to,
                version,
                item,
                due: UnixMs(0),
            },
        );
    }

    /// The notices to send at `now`, each due again [`RESEND_MS`] later; at most
    /// [`MAX_IN_FLIGHT_PER_SHARD`] a poll.
    pub fn poll(&mut self, now: UnixMs) -> Vec<NoticeSent<K, T>> {
        let due: Vec<(UnixMs, K)> = self
            .schedule
            .iter()
            .take_while(|(at, _)| *at <= now)
            .take(MAX_IN_FLIGHT_PER_SHARD)
            .cloned()
            .collect();
        let mut sent = Vec::with_capacity(due.len());
        for entry in due {
            self.schedule.remove(&entry);
            let (_, key) = entry;
            let Some(row) = self.rows.get_mut(&key) else {
                continue;
            };
            row.due = now.plus_ms(RESEND_MS);
            self.schedule.insert((row.due, key.clone()));
            sent.push(NoticeSent {
                from: self.me,
                to: row.to,
                key,
                version: row.version,
                item: row.item.clone(),
            });
        }
        sent
    }

    /// When a notice is next due (`None`: none waits).
    pub fn next_deadline(&self) -> Option<UnixMs> {
        self.schedule.first().map(|(at, _)| *at)
    }

    /// An acknowledgement: `true` when it ends the row (the caller deletes it in a commit of
    /// its own); `false` when the row is gone or newer than what was acknowledged.
    pub fn on_taken(&mut self, key: &K, version: u64) -> bool {
        let Some(row) = self.rows.get(key) else {
            return false;
        };
        if row.version != version {
            return false;
        }
        self.schedule.remove(&(row.due, key.clone()));
        self.rows.remove(key);
        true
    }

    /// Notices not acknowledged yet.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether every notice is acknowledged.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

/// What an [`Inbox`] did with a hand-off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Received<T> {
    /// Apply these, in order (the hand-off and the held ones it let through), in one commit
    /// with the stream's mark through the last; then tell [`Inbox::durable`].
    Apply(Vec<Handoff<T>>),
    /// Already applied. `Some`: the acknowledgement to send again (the owner may have lost
    /// it); `None`: its commit is not durable yet, and its acknowledgement follows then.
    Again(Option<Applied>),
    /// Held until the gap before it is filled.
    Held,
    /// Not kept: the inbox holds its most; the owner sends it again.
    Dropped,
}

/// One stream's marks on the recipient's shard, and what it holds past a gap.
#[derive(Debug, Clone)]
struct In<T> {
    owner: ShardId,
    /// The last seq applied, its commit durable or not.
    applied: Seq,
    /// The last seq whose apply is durable.
    durable: Seq,
    /// Hand-offs past a gap, by their `prev`.
    held: BTreeMap<Seq, Handoff<T>>,
}

impl<T> In<T> {
    /// A stream of `owner` applied, durably, through `through`, holding nothing.
    fn at(owner: ShardId, through: Seq) -> Self {
        Self {
            owner,
            applied: through,
            durable: through,
            held: BTreeMap::new(),
        }
    }
}

/// The recipient shard's side: each stream's marks, and what it holds past a gap.
#[derive(Debug, Clone)]
pub struct Inbox<T> {
    me: ShardId,
    streams: BTreeMap<Stream, In<T>>,
    held: usize,
    max_held: usize,
}

impl<T> Inbox<T> {
    /// An empty inbox of shard `me`, holding at most `max_held` hand-offs past gaps.
    pub fn new(me: ShardId, max_held: usize) -> Self {
        Self {
            me,
            streams: BTreeMap::new(),
            held: 0,
            max_held,
        }
    }

    /// A stream's durable mark as stored (at start, or read before its first hand-off). A
    /// stream the inbox never heard of is applied through `Seq(0)`.
    pub fn restore(&mut self, owner: ShardId, stream: Stream, through: Seq) {
        self.streams.insert(stream, In::at(owner, through));
    }

    /// What to do with the hand-off `h`. `Err`: its chain does not hold (refused, nothing
    /// changed).
    pub fn receive(&mut self, h: Handoff<T>) -> Result<Received<T>, Broken> {
        let me = self.me;
        let s = self
            .streams
            .entry(h.stream.clone())
            .or_insert_with(|| In::at(h.from, Seq(0)));
        if h.seq <= h.prev || (h.prev < s.applied && s.applied < h.seq) {
            return Err(Broken {
                seq: h.seq,
                prev: h.prev,
                applied: s.applied,
            });
        }
        if h.seq <= s.applied {
            let ack = (h.seq <= s.durable).then(|| Applied {
                from: me,
                to: s.owner,
                stream: h.stream.clone(),
                through: s.durable,
            });
            return Ok(Received::Again(ack));
        }
        if h.prev > s.applied {
            if s.held.contains_key(&h.prev) {
                return Ok(Received::Held);
            }
            if self.held >= self.max_held {
                return Ok(Received::Dropped);
            }
            s.held.insert(h.prev, h);
            self.held += 1;
            return Ok(Received::Held);
        }
        s.owner = h.from;
        s.applied = h.seq;
        let mut apply = vec![h];
        while let Some(next) = s.held.remove(&s.applied) {
            self.held -= 1;
            s.applied = next.seq;
            apply.push(next);
        }
        Ok(Received::Apply(apply))
    }

    /// The commit that applied `stream` through `through` is durable: the acknowledgement to
    /// send its owner.
    pub fn durable(&mut self, stream: &Stream, through: Seq) -> Option<Applied> {
        let s = self.streams.get_mut(stream)?;
        s.durable = s.durable.max(through);
        Some(Applied {
            from: self.me,
            to: s.owner,
            stream: stream.clone(),
            through: s.durable,
        })
    }

    /// Hand-offs held past gaps.
    pub fn held(&self) -> usize {
        self.held
    }

    /// The last seq of `stream` applied here (`Seq(0)`: none).
    pub fn applied(&self, stream: &Stream) -> Seq {
        self.streams.get(stream).map_or(Seq(0), |s| s.applied)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    const OWNER: ShardId = ShardId(0);
    const DEST: ShardId = ShardId(1);
    /// Streams of the runs: two recipients on the destination shard, two conversations.
    const STREAMS: usize = 4;

    fn stream(i: usize) -> Stream {
        Stream {
            recipient: UserUuid::from_random_bytes([u8::try_from(i / 2).unwrap() + 1; 16]),
            conv: ConvId::parse(&format!("c-{}", i % 2)).unwrap(),
        }
    }

    #[derive(Debug, Clone, Copy)]
    enum Op {
        /// The owner commits a message of this stream (and its outbox row).
        Commit(usize),
        /// Time passes and the owner sends what is due.
        Poll(u64),
        /// The transport delivers this packet (an index into what is in flight).
        Deliver(usize),
        /// ... loses it.
        Lose(usize),
        /// ... repeats it.
        Repeat(usize),
        /// The recipient's shard commits what it applied.
        CommitApplies,
        /// The recipient's shard crashes: what it held and applied without a commit is lost.
        CrashInbox,
        /// The owner crashes: its outbox is rebuilt from the stored rows.
        CrashOwner,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..STREAMS).prop_map(Op::Commit),
            2 => (0..2_500u64).prop_map(Op::Poll),
            6 => any::<usize>().prop_map(Op::Deliver),
            1 => any::<usize>().prop_map(Op::Lose),
            1 => any::<usize>().prop_map(Op::Repeat),
            2 => Just(Op::CommitApplies),
            1 => Just(Op::CrashInbox),
            1 => Just(Op::CrashOwner),
        ]
    }

    #[derive(Debug, Clone)]
    enum Packet {
        Handoff(Handoff<u64>),
        Applied(Applied),
    }

    /// The naive model and the two sides under test.
    struct Run {
        now: UnixMs,
        /// Each conversation's last seq (both streams of a conversation share its seqs).
        conv_seq: [u64; 2],
        /// Each stream's whole chain, as the owner committed it.
        chain: Vec<Vec<u64>>,
        /// The owner's stored rows: stream -> seq -> prev.
        rows: BTreeMap<usize, BTreeMap<u64, u64>>,
        outbox: Outbox<u64>,
        /// What the recipient's shard applied durably, and without a commit yet, per stream.
        durable: Vec<Vec<u64>>,
        pending: Vec<Vec<u64>>,
        inbox: Inbox<u64>,
        net: Vec<Packet>,
        max_held: usize,
    }

    impl Run {
        fn new(max_held: usize) -> Self {
            Self {
                now: UnixMs(1),
                conv_seq: [0; 2],
                chain: vec![Vec::new(); STREAMS],
                rows: BTreeMap::new(),
                outbox: Outbox::new(OWNER),
                durable: vec![Vec::new(); STREAMS],
                pending: vec![Vec::new(); STREAMS],
                inbox: Inbox::new(DEST, max_held),
                net: Vec::new(),
                max_held,
            }
        }

        fn index(s: &Stream) -> usize {
            (0..STREAMS).find(|i| stream(*i) == *s).unwrap()
        }

        fn step(&mut self, op: Op) {
            match op {
                Op::Commit(i) => {
                    let c = i % 2;
                    self.conv_seq[c] += 1;
                    let seq = self.conv_seq[c];
                    let prev = self.chain[i].last().copied().unwrap_or(0);
                    self.chain[i].push(seq);
                    self.rows.entry(i).or_default().insert(seq, prev);
                    self.outbox.push(DEST, stream(i), Seq(seq), Seq(prev), seq);
                }
                Op::Poll(ms) => {
                    self.now = self.now.plus_ms(ms);
                    let sent = self.outbox.poll(self.now);
                    self.net.extend(sent.into_iter().map(Packet::Handoff));
                }
                Op::Deliver(k) if !self.net.is_empty() => {
                    let p = self.net.swap_remove(k % self.net.len());
                    self.deliver(p);
                }
                Op::Lose(k) if !self.net.is_empty() => {
                    self.net.swap_remove(k % self.net.len());
                }
                Op::Repeat(k) if !self.net.is_empty() => {
                    let p = self.net[k % self.net.len()].clone();
                    self.net.push(p);
                }
                Op::CommitApplies => self.commit_applies(),
                Op::CrashInbox => {
                    self.pending = vec![Vec::new(); STREAMS];
                    self.inbox = Inbox::new(DEST, self.max_held);
                    for (i, done) in self.durable.iter().enumerate() {
                        if let Some(last) = done.last() {
                            self.inbox.restore(OWNER, stream(i), Seq(*last));
                        }
                    }
                }
                Op::CrashOwner => {
                    self.outbox = Outbox::new(OWNER);
                    for (i, rows) in &self.rows {
                        for (seq, prev) in rows.iter().rev() {
                            self.outbox
                                .push(DEST, stream(*i), Seq(*seq), Seq(*prev), *seq);
                        }
                    }
                }
                Op::Deliver(_) | Op::Lose(_) | Op::Repeat(_) => {}
            }
        }

        fn deliver(&mut self, p: Packet) {
            match p {
                Packet::Handoff(h) => {
                    assert_eq!(h.item, h.seq.get(), "the row's item travels with it");
                    let i = Self::index(&h.stream);
                    match self.inbox.receive(h).unwrap() {
                        Received::Apply(list) => {
                            for h in list {
                                self.pending[i].push(h.seq.get());
                            }
                            let applied: Vec<u64> = self.durable[i]
                                .iter()
                                .chain(&self.pending[i])
                                .copied()
                                .collect();
                            assert_eq!(
                                applied[..],
                                self.chain[i][..applied.len()],
                                "stream {i}: applied out of order or twice"
                            );
                        }
                        Received::Again(Some(a)) => self.net.push(Packet::Applied(a)),
                        Received::Again(None) | Received::Held | Received::Dropped => {}
                    }
                    assert!(self.inbox.held() <= self.max_held);
                }
                Packet::Applied(a) => {
                    let i = Self::index(&a.stream);
                    assert!(
                        self.durable[i].contains(&a.through.get()),
                        "acknowledged {} of stream {i} before it was durable",
                        a.through
                    );
                    for seq in self.outbox.on_applied(&a) {
                        self.rows.get_mut(&i).unwrap().remove(&seq.get());
                    }
                }
            }
        }

        fn commit_applies(&mut self) {
            for i in 0..STREAMS {
                let pending = std::mem::take(&mut self.pending[i]);
                let Some(last) = pending.last().copied() else {
                    continue;
                };
                self.durable[i].extend(pending);
                let ack = self.inbox.durable(&stream(i), Seq(last)).unwrap();
                self.net.push(Packet::Applied(ack));
            }
        }

        /// The faults end: the transport delivers everything, the recipient commits, time
        /// passes. Every chain ends applied once, whole, and every row acknowledged.
        fn heal(&mut self) {
            for _ in 0..10_000 {
                while let Some(p) = self.net.pop() {
                    self.deliver(p);
                }
                self.commit_applies();
                if self.net.is_empty() && self.outbox.is_empty() {
                    break;
                }
                if self.net.is_empty() {
                    self.step(Op::Poll(RESEND_MS));
                }
            }
            assert!(
                self.outbox.is_empty(),
                "{} rows never acknowledged",
                self.outbox.len()
            );
            assert!(self.rows.values().all(BTreeMap::is_empty));
            assert_eq!(
                self.durable, self.chain,
                "every message applied once, in order"
            );
            assert_eq!(self.inbox.held(), 0);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Whatever the transport loses, repeats or reorders and whichever side crashes, the
        /// recipient's shard applies each stream's messages exactly once and in order, never
        /// acknowledges what is not durable, and once the faults end every row is drained.
        #[test]
        fn handed_off_exactly_once_in_order(
            ops in proptest::collection::vec(op(), 1..160),
            max_held in 0usize..6,
        ) {
            let mut run = Run::new(max_held);
            for op in ops {
                run.step(op);
            }
            run.heal();
        }
    }

    #[test]
    fn a_gap_is_held_and_a_repeat_answered_with_the_durable_mark() {
        let mut inbox = Inbox::new(DEST, 8);
        let h = |seq: u64, prev: u64| Handoff {
            from: OWNER,
            to: DEST,
            stream: stream(0),
            seq: Seq(seq),
            prev: Seq(prev),
            item: seq,
        };
        assert_eq!(inbox.receive(h(5, 2)).unwrap(), Received::Held);
        assert_eq!(inbox.receive(h(5, 2)).unwrap(), Received::Held);
        assert_eq!(inbox.held(), 1);
        let Received::Apply(list) = inbox.receive(h(2, 0)).unwrap() else {
            panic!("not applied");
        };
        assert_eq!(list.iter().map(|h| h.seq.get()).collect::<Vec<_>>(), [2, 5]);
        assert_eq!(inbox.held(), 0);
        assert_eq!(inbox.receive(h(2, 0)).unwrap(), Received::Again(None));
        let ack = inbox.durable(&stream(0), Seq(5)).unwrap();
        assert_eq!((ack.to, ack.through), (OWNER, Seq(5)));
        assert_eq!(inbox.receive(h(2, 0)).unwrap(), Received::Again(Some(ack)));
        assert!(inbox.receive(h(7, 3)).is_err(), "a chain that skips seq 5");
        assert!(inbox.receive(h(7, 7)).is_err(), "a link to itself");
    }

    #[test]
    fn the_outbox_resends_bounded_and_forgets_what_is_acknowledged() {
        let mut out = Outbox::new(OWNER);
        for seq in 1..=(MAX_IN_FLIGHT_PER_SHARD as u64 + 10) {
            out.push(DEST, stream(0), Seq(seq), Seq(seq - 1), seq);
        }
        let first = out.poll(UnixMs(0));
        assert_eq!(first.len(), MAX_IN_FLIGHT_PER_SHARD);
        assert!(out.poll(UnixMs(RESEND_MS - 1)).is_empty(), "all in flight");
        assert_eq!(out.next_deadline(), Some(UnixMs(0)), "ten never sent");
        let ack = Applied {
            from: DEST,
            to: OWNER,
            stream: stream(0),
            through: Seq(100),
        };
        assert_eq!(out.on_applied(&ack).len(), 100);
        let next = out.poll(UnixMs(RESEND_MS - 1));
        assert_eq!(next.len(), 10, "room for the ten never sent");
        assert_eq!(next[0].seq, Seq(MAX_IN_FLIGHT_PER_SHARD as u64 + 1));
        assert_eq!(
            out.poll(UnixMs(RESEND_MS)).len(),
            MAX_IN_FLIGHT_PER_SHARD - 100
        );
        assert_eq!(out.len(), MAX_IN_FLIGHT_PER_SHARD + 10 - 100);
    }

    /// A destination that never answers holds its own rows back, not another destination's;
    /// acknowledged rows leave the schedule too.
    #[test]
    fn a_silent_destination_does_not_hold_back_another() {
        let mut out = Outbox::new(OWNER);
        for seq in 1..=1_000u64 {
            out.push(DEST, stream(0), Seq(seq), Seq(seq - 1), seq);
        }
        out.push(ShardId(2), stream(1), Seq(1), Seq(0), 1);
        let mut now = UnixMs(0);
        for _ in 0..3 {
            let sent = out.poll(now);
            let to_other = sent.iter().filter(|h| h.to == ShardId(2)).count();
            assert_eq!(sent.len() - to_other, MAX_IN_FLIGHT_PER_SHARD);
            assert_eq!(to_other, 1, "resent each time its row is due");
            now = now.plus_ms(RESEND_MS);
        }
        let ack = |to, stream, through| Applied {
            from: to,
            to: OWNER,
            stream,
            through: Seq(through),
        };
        assert_eq!(out.on_applied(&ack(ShardId(2), stream(1), 1)), [Seq(1)]);
        assert_eq!(out.on_applied(&ack(DEST, stream(0), 1_000)).len(), 1_000);
        assert!(out.is_empty() && out.next_deadline().is_none());
        assert!(out.poll(now).is_empty());
    }

    #[test]
    fn a_conversation_is_owned_by_its_lower_members_shard() {
        let map = ShardMap::new(1_024).unwrap();
        assert!(ShardMap::new(0).is_none());
        let (a, b) = (
            UserUuid::from_random_bytes([1; 16]),
            UserUuid::from_random_bytes([2; 16]),
        );
        let lower = if a < b { &a } else { &b };
        assert_eq!(map.owner_of([&a, &b]), map.of_user(lower));
        assert_eq!(map.owner_of([&b, &a]), map.of_user(lower));
        let spread: BTreeSet<ShardId> = (0..=255u8)
            .map(|i| map.of_user(&UserUuid::from_random_bytes([i; 16])))
            .collect();
        assert!(spread.len() > 200, "{} shards of 256 users", spread.len());
        assert!(spread.iter().all(|s| s.0 < 1_024));
        assert_eq!(ShardMap::new(1).unwrap().of_user(&a), ShardId(0));
    }

    #[test]
    fn a_notice_replaced_before_its_acknowledgement_stays_until_its_own() {
        let mut n: Notices<&str, u64> = Notices::new(OWNER);
        let v1 = n.put(DEST, "read", 5);
        assert_eq!(n.poll(UnixMs(10)).len(), 1);
        let v2 = n.put(DEST, "read", 7);
        assert!(v2 > v1);
        assert!(!n.on_taken(&"read", v1), "the older one's acknowledgement");
        let again = n.poll(UnixMs(11));
        assert_eq!(again.len(), 1, "the newer is sent at once");
        assert_eq!((again[0].item, again[0].version), (7, v2));
        assert!(
            n.poll(UnixMs(12)).is_empty(),
            "then waits for its resend time"
        );
        assert_eq!(n.next_deadline(), Some(UnixMs(11 + RESEND_MS)));
        assert_eq!(n.poll(UnixMs(11 + RESEND_MS)).len(), 1);
        assert!(n.on_taken(&"read", v2));
        assert!(n.is_empty());
        assert_eq!(n.next_deadline(), None);
        // Read back at start, numbering goes on after the highest stored.
        let mut n: Notices<&str, u64> = Notices::new(OWNER);
        n.restore(DEST, "read", 41, 9);
        assert_eq!(n.put(DEST, "delivered", 3), 42);
        assert_eq!(n.len(), 2);
    }
}
