//! What one shard's core sends another's besides hand-offs and notices: submissions to a
//! conversation's owner, its verdicts, best-effort signals, and the envelope of them all.

use wire::{Seq, UserUuid};

use super::{Applied, Handoff, Message, Notice, NoticeKey, NoticeSent, NoticeTaken, ShardId};

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
