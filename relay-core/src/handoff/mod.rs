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

use sha2::{Digest as _, Sha256};
use wire::{ConvId, Seq, UnixMs, UserUuid};

mod crossing;
pub mod envelope;
mod inbox;
mod levels;
mod notices;
mod outbox;
mod submissions;
#[cfg(test)]
mod tests;

pub use crossing::{
    Answered, Awaiting, Crossing, FORWARD_TIMEOUT_MS, Forward, Forwarded, MAX_FORWARDS_WAITING,
    PairOp, Reply, ReplyTo, Signal, Submission, Submitted, Verdict,
};
pub use inbox::{Inbox, Received};
pub use levels::{
    Fill, LEVELS_STALE_MS, Level, Levels, LevelsAsked, Stamp, Tally, Views, total_share,
};
pub use notices::{Announce, Contact, Notice, NoticeKey, NoticeSent, NoticeTaken, Notices};
pub use outbox::Outbox;
pub use submissions::{MAX_SUBMISSIONS_WAITING, Sent, Submissions};

/// How long a hand-off sent and not acknowledged waits before it is sent again.
pub const RESEND_MS: u64 = 1_000;
/// The shard that decides what the whole relay shares rather than one account or pair:
/// registration's names, channels, vanity aliases, orders and payments, media.
pub const REGISTRY_SHARD: ShardId = ShardId(0);
/// Hand-offs sent and not acknowledged (within [`RESEND_MS`]) per destination shard at most.
pub const MAX_IN_FLIGHT_PER_SHARD: usize = 256;
/// Hand-offs past a gap an [`Inbox`] holds by default ([`Inbox::new`]).
pub const MAX_HELD: usize = 4_096;

/// A shard: one owner of a share of the users and of the conversations they own.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
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
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct Stream {
    /// Who the messages are for.
    pub recipient: UserUuid,
    /// Their conversation.
    pub conv: ConvId,
}

/// One message handed from its conversation's owner shard to its recipient's shard: an outbox
/// row of the owner.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Applied {
    /// The recipient's shard.
    pub from: ShardId,
    /// The owner shard.
    pub to: ShardId,
    /// Which stream.
    pub stream: Stream,
    /// The last seq applied.
    pub through: Seq,
    /// The stream's level and its recipient's backlog after the apply (filled by the
    /// recipient's shard; [`Level::default`] where the inbox builds it).
    pub level: Level,
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
