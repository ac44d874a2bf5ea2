//! What one shard's core sends another's besides hand-offs and notices: submissions to a
//! conversation's owner and its verdicts, requests forwarded to a friendship's owner and its
//! answers, best-effort signals, and the envelope of them all.

use wire::{AliasId, FriendshipId, Seq, UserUuid};

use super::{
    Announce, Applied, Contact, Handoff, Levels, LevelsAsked, Message, Notice, NoticeKey,
    NoticeSent, NoticeTaken, ShardId,
};
use crate::http::{HttpRequest, HttpResponse};

/// A `msg` of a user of shard `from` in a conversation shard `to` owns: the owner decides it
/// (its id, its seq) and answers with a [`Verdict`]. Not durable: a submission lost with a
/// crash leaves its sender without an `ack`, and the client sends the message again with the
/// same id, as after any lost `ack`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Submitted {
    /// A message: the owner decides its id and seq.
    Msg(wire::frames::MsgFrame),
    /// A retraction: the owner's tombstone says whether the sender wrote the message.
    Retract(wire::frames::RetractFrame),
}

/// The owner's answer to a [`Submission`], released after the commit that stored the message.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Reply {
    /// The `ack` of message `id` with `seq`: a new message (`new`) or a resend.
    Ack {
        /// The message's id.
        id: wire::MessageId,
        /// Its seq.
        seq: Seq,
        /// Stored now, not a resend (a resend gives back the charge the sender's shard made to
        /// its message rate when it submitted it).
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
    /// A submitted `retract` was decided (the retraction done, or nothing to do): the sender
    /// is told nothing (the frame has no answer), and its shard stops sending it again.
    Taken {
        /// The id of the message it retracts.
        id: wire::MessageId,
    },
}

/// A best-effort frame for a user of another shard (typing notices, call signals): sent on
/// the user's connection if it has one there. Nothing keeps it: lost, it is gone, as when a
/// connection drops it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Signal {
    /// The sender's shard.
    pub from: ShardId,
    /// The user's shard.
    pub to: ShardId,
    /// Whom it is for.
    pub user: UserUuid,
    /// The frame, as it is sent (between nodes: its wire text).
    #[serde(with = "frame_text")]
    pub frame: wire::ServerFrame,
    /// What to answer the sender's connection (its number and its user) when the user has
    /// no connection (`None`: nothing).
    pub offline: Option<(u64, UserUuid, Reply)>,
}

/// An HTTP request for the shard that decides it, from the shard it reached: shard `to`
/// decides it (or sends it on) and answers with an [`Answered`]. At most once, like the HTTP
/// exchange itself: a request whose answer does not come in time is answered 503 where it
/// waits.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Forward {
    /// The shard it comes from.
    pub from: ShardId,
    /// The shard it goes to.
    pub to: ShardId,
    /// Its number at `from`, for the answer.
    pub id: u64,
    /// What it asks.
    pub op: Forwarded,
}

/// What a forwarded request asks.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Forwarded {
    /// A change of a friendship of `user` (authenticated and charged at its shard, where it
    /// comes from), for the pair's owner.
    Pair {
        /// The caller.
        user: UserUuid,
        /// The change.
        op: PairOp,
    },
    /// The storage estimate of `user` (authenticated at its shard, where it comes from), for
    /// the registry shard, which holds the media: what `user`'s queues hold at its shard comes
    /// with it, and the registry answers the whole estimate.
    Storage {
        /// The caller.
        user: UserUuid,
        /// What its queues hold, in the queue bounds' bytes.
        queued_bytes: u64,
        /// How many messages they hold.
        queued_msgs: u64,
    },
    /// A whole request, for the shard that decides its route. `caller` is its caller with
    /// its token's id, verified by the caller's own shard (which holds the account, so its
    /// check of the token's session is the one that counts) when the request comes from
    /// there; `None`: the receiving shard authenticates it. Charged where it arrived.
    Request {
        /// The verified caller, if it comes from the caller's shard.
        caller: Option<(UserUuid, String)>,
        /// The request.
        req: HttpRequest,
    },
}

/// What a forwarded request asks of a friendship's owner shard.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum PairOp {
    /// A friend request to `target` (a user of the owner shard), with the `friend_request`
    /// frame for it (the caller's alias and nickname).
    Request {
        /// Whom it asks.
        target: UserUuid,
        /// The frame for `target`.
        announce: Option<Announce>,
    },
    /// Accept friendship `id` with `other` (a user of the owner shard); `from` is the caller's
    /// alias, for the `friend_accepted` frame.
    Accept {
        /// The friendship.
        id: FriendshipId,
        /// Its other member; `None`: the caller's shard did not hold the friendship yet (its
        /// notice had not come), and the owner reads it by its id.
        other: Option<UserUuid>,
        /// The caller's alias.
        from: Option<AliasId>,
    },
    /// Reject friendship `id` with `other` (a user of the owner shard).
    Reject {
        /// The friendship.
        id: FriendshipId,
        /// Its other member (`None` as for [`PairOp::Accept`]).
        other: Option<UserUuid>,
    },
}

/// The answer to a [`Forward`], released after the commit of what it wrote: the response,
/// and for a friendship's change the friendship as its owner wrote it, for the caller's list
/// (applied at the caller's shard before the response goes on, so the caller reads what it
/// wrote; a notice carries it too).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Answered {
    /// The shard that answers.
    pub from: ShardId,
    /// The shard the request came from.
    pub to: ShardId,
    /// The request's number there.
    pub id: u64,
    /// The response.
    pub response: HttpResponse,
    /// The friendship as written and whose list it goes to (`None`: nothing written).
    pub contact: Option<(UserUuid, Contact)>,
}

/// What one shard's core sends another's: carried by the shell, in a process or between
/// processes, to [`Relay::handle_crossing`](crate::Relay::handle_crossing) of the core that runs
/// [`Crossing::to`].
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
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
    /// An HTTP request for a friendship's owner (at most once).
    Forward(Forward),
    /// The answer to a forwarded request.
    Answered(Answered),
    /// An owner asks a recipients' shard how full their queues are (at most once).
    LevelsAsked(LevelsAsked),
    /// How full queues are, for their conversations' owner (at most once; a lost report
    /// leaves the owner's view too high, and it asks again).
    Levels(Levels),
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
            Self::Forward(f) => f.to,
            Self::Answered(a) => a.to,
            Self::LevelsAsked(q) => q.to,
            Self::Levels(l) => l.to,
        }
    }
}

/// How long a shard waits for the answer to a request it forwarded before it answers the
/// request 503 `STORAGE_UNAVAILABLE` itself (a late answer is then dropped).
pub const FORWARD_TIMEOUT_MS: u64 = 5_000;

/// Forwarded requests waiting for their answers at one shard at most; past it a request that
/// must be forwarded is answered 503 `STORAGE_UNAVAILABLE` at once.
pub const MAX_FORWARDS_WAITING: usize = 4_096;

/// Where the answer to a forwarded request goes once it comes (or the request times out).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyTo {
    /// To the shell, as the answer of its request with this number.
    Http(u64),
    /// To shard `to`, which forwarded it here as its request `id`.
    Shard {
        /// The shard it came from.
        to: ShardId,
        /// Its number there.
        id: u64,
    },
}

/// The requests a shard forwarded and is waiting to answer, by the number it gave each: each
/// until its answer comes or [`FORWARD_TIMEOUT_MS`] passed.
#[derive(Debug, Clone, Default)]
pub struct Awaiting {
    /// Number -> where its answer goes, when it times out.
    due: std::collections::BTreeMap<u64, (ReplyTo, wire::UnixMs)>,
    /// (when it times out, number), soonest first.
    schedule: std::collections::BTreeSet<(wire::UnixMs, u64)>,
    /// The last number given.
    last: u64,
}

impl Awaiting {
    /// The number the next forwarded request gets, if another may wait
    /// ([`MAX_FORWARDS_WAITING`]).
    pub fn next_id(&self) -> Option<u64> {
        (self.due.len() < MAX_FORWARDS_WAITING).then_some(self.last + 1)
    }

    /// Request `id` (from [`Awaiting::next_id`]) was forwarded at `now`; its answer goes to
    /// `reply`.
    pub fn start(&mut self, id: u64, reply: ReplyTo, now: wire::UnixMs) {
        let at = now.plus_ms(FORWARD_TIMEOUT_MS);
        self.last = self.last.max(id);
        if let Some((_, old)) = self.due.insert(id, (reply, at)) {
            self.schedule.remove(&(old, id));
        }
        self.schedule.insert((at, id));
    }

    /// The answer to `id` came: where it goes, when it was still waited for.
    pub fn answered(&mut self, id: u64) -> Option<ReplyTo> {
        let (reply, at) = self.due.remove(&id)?;
        self.schedule.remove(&(at, id));
        Some(reply)
    }

    /// The requests whose answers did not come by `now` (no longer waited for): where each
    /// one's refusal goes.
    pub fn expired(&mut self, now: wire::UnixMs) -> Vec<ReplyTo> {
        let mut gone = Vec::new();
        while let Some(&(at, id)) = self.schedule.first() {
            if at > now {
                break;
            }
            self.schedule.pop_first();
            if let Some((reply, _)) = self.due.remove(&id) {
                gone.push(reply);
            }
        }
        gone
    }

    /// When the next request times out (`None`: none waits).
    pub fn next_deadline(&self) -> Option<wire::UnixMs> {
        self.schedule.first().map(|(at, _)| *at)
    }

    /// How many wait.
    pub fn len(&self) -> usize {
        self.due.len()
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.due.is_empty()
    }
}

/// A server frame as its wire text when a signal crosses between nodes.
mod frame_text {
    use serde::{Deserialize as _, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(
        frame: &wire::ServerFrame,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.serialize_str(&frame.encode())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<wire::ServerFrame, D::Error> {
        let text = std::borrow::Cow::<'de, str>::deserialize(d)?;
        wire::ServerFrame::decode(&text).map_err(serde::de::Error::custom)
    }
}
