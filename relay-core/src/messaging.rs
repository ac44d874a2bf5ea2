//! Messaging: `msg` (dedup, seq, commit, ack, delivery), `typing` and `retract`.
//!
//! * A `msg` is accepted only from a member of `conv_id` whose `to` is the other member
//!   (else error frame `NOT_A_MEMBER`).
//! * Dedup, per conversation: every accepted id leaves a tombstone `(conv, id) -> (author,
//!   seq)` for `TOMBSTONE_TTL_MS` (7 days, longer than the 24 h the message itself is held), so
//!   a resend with the same id in the same conversation — e.g. the web client's
//!   resend-on-reconnect — gets the same `ack` with the same `seq` and is never delivered
//!   twice. An id the conversation's other member already used is refused (`ALREADY_EXISTS`);
//!   in another conversation the same id is a new message (each conversation's owner decides
//!   its ids alone).
//! * New messages: rate limit (`RATE_LIMITED`, no ack), bounded queues (no ack: the
//!   conversation's share of the recipient's queue `QUEUE_FULL`, the recipient's whole backlog
//!   `RECIPIENT_QUEUE_FULL`, the sender's undelivered bytes `SENDER_QUEUE_FULL`, the relay's
//!   total `RELAY_QUEUE_FULL`; a message is refused before it is stored, so nothing acknowledged
//!   is ever dropped to make room), next gap-free seq, commit, then `ack` and, if the recipient
//!   is online and synced, delivery.
//! * The `payload` must be standard base64 (else error frame `BAD_FRAME`, no ack); the relay
//!   never looks further into it.
//! * `typing`: members only, ephemeral, 30/min/user, excess silently dropped.
//! * `retract`: only the author (the conversation's tombstone of the id names them); a
//!   still-queued copy is dropped;
//!   the `retract` is forwarded live when the recipient is connected, and kept either way and
//!   re-sent on every `sync` of the recipient until the offline TTL (it has no ack: a live
//!   frame may be lost in a dead socket or a crash after the commit). Clients deduplicate.

use wire::frames::{
    AckFrame, MsgFrame, RetractDelivery, RetractFrame, TypingDelivery, TypingFrame,
};
use wire::{AliasId, ConvId, ErrorCode, ServerFrame, UnixMs, UserUuid};

use crate::cx::Cx;
use crate::handoff::{Fill, Notice, Reply, ShardId, Submitted};
use crate::limits::TOMBSTONE_TTL_MS;
use crate::planted::planted;
use crate::queue::Queued;
use crate::rows::{PendingRetractRow, Tombstone};
use crate::shell::ConnId;
use crate::store::StoreError;

/// Whether `text` is standard-alphabet base64 (RFC 4648 §4): `A-Z a-z 0-9 + /` in groups of
/// four, the last group possibly short; `=` padding optional (none, part or all of what the
/// last group needs; the base64 crate's `Indifferent` mode).
/// Every reference client's payload (`b64(IV ‖ ciphertext ‖ tag)`, PROTOCOL.md §4.4) is.
/// Checked without decoding (no allocation on the routing path), 32 bytes at a time without
/// a branch per byte (the compiler turns each block into vector compares).
pub(crate) fn is_base64(text: &str) -> bool {
    let bytes = text.as_bytes();
    let body = bytes
        .strip_suffix(b"==")
        .or_else(|| bytes.strip_suffix(b"="))
        .unwrap_or(bytes);
    let padding = bytes.len() - body.len();
    if !all_base64_alphabet(body) || body.len() % 4 == 1 {
        return false;
    }
    padding <= (4 - body.len() % 4) % 4
}

/// Whether every byte is in the standard base64 alphabet (`A-Z a-z 0-9 + /`).
fn all_base64_alphabet(bytes: &[u8]) -> bool {
    fn outside(block: &[u8; wire::json::BLOCK]) -> bool {
        // Non-short-circuit `|` and `&`: no branch per byte, so the block becomes vector
        // compares.
        let inside = block.iter().fold(true, |all, &b| {
            all & ((b.wrapping_sub(b'A') < 26)
                | (b.wrapping_sub(b'a') < 26)
                | (b.wrapping_sub(b'0') < 10)
                | (b == b'+')
                | (b == b'/'))
        });
        !inside
    }
    !wire::json::any_block(bytes, b'A', outside)
}

/// Why [`Cx::member_check`](crate::cx::Cx::member_check) refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotMember {
    /// Not a member, or `to` is not the other one: the words of the `NOT_A_MEMBER` refusal.
    Refused(&'static str),
    /// The conversation or the other member's account could not be read
    /// (`STORAGE_UNAVAILABLE`; nothing changed).
    Unreadable,
}

impl NotMember {
    /// The error code and words of the refusal.
    pub(crate) fn refusal(self) -> (ErrorCode, &'static str) {
        match self {
            Self::Refused(msg) => (ErrorCode::NOT_A_MEMBER, msg),
            Self::Unreadable => (
                ErrorCode::STORAGE_UNAVAILABLE,
                "the relay could not read the conversation or the other member's account; send \
                 it again",
            ),
        }
    }
}

/// What the checks of a `msg` decided (`Relay::judge_msg`).
pub(crate) enum MsgVerdict {
    /// A new message for `recipient`; `peer` is their open connection, if any.
    New {
        recipient: UserUuid,
        /// The recipient's shard, when it is not this one.
        away: Option<ShardId>,
        peer: Option<ConnId>,
    },
    /// A resend of an id the relay holds in the same conversation: acknowledged again with
    /// its first seq, not stored twice.
    Resent(wire::Seq),
    /// The conversation is another shard's: the message is submitted to it, which decides.
    Owner(ShardId),
}

/// Where the answer to a `msg` goes: the sender's connection here, or the sender's shard (a
/// submitted `msg`, `crate::shards`).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Answer {
    /// The sender's connection on this shard.
    Conn(ConnId),
    /// The sender's shard, and its connection there.
    Shard(ShardId, u64),
}

impl Cx<'_> {
    /// Resolves the conversation and checks that the caller is a member and `to` the other one
    /// (whose account it reads if it is not in memory): the other member.
    pub(crate) fn member_check(
        &mut self,
        user: &UserUuid,
        conv_id: &ConvId,
        to: &AliasId,
    ) -> Result<UserUuid, NotMember> {
        let not_member = NotMember::Refused("unknown conversation, or you are not a member of it");
        let (state, mut cx) = self.read_parts();
        let other = state
            .with_conversation(cx.reborrow(), conv_id, |c| c.other(user).cloned())
            .map_err(|_| NotMember::Unreadable)?
            .flatten()
            .ok_or(not_member)?;
        let named = state
            .with_account(cx, &other, |a| a.is_named(to))
            .map_err(|_| NotMember::Unreadable)?;
        // A retired alias (replaced by a bound vanity alias) still routes to its account: the
        // account row keeps its latest former aliases, the registry's alias table them all.
        if named != Some(true) && self.state.retired_alias_owner(to) != Some(&other) {
            return Err(NotMember::Refused(
                "`to` is not the other member of this conversation",
            ));
        }
        Ok(other)
    }

    /// Whether one more message of `charge` bytes from `sender` to `recipient` in `conv` fits
    /// every queue bound (see `crate::limits`): the conversation's (the sender's share of the
    /// recipient's queue), the recipient's over all conversations, the sender's over all
    /// recipients, and this shard's share of the relay's total. `Err`: the code and message of
    /// the refusal.
    ///
    /// What another shard's user has queued there is what that shard last reported
    /// (`crate::handoff::Views`) plus what this shard handed it and it has not applied; a
    /// report that says full and is stale is asked for again while the message is refused.
    fn queue_bounds(
        &mut self,
        now: UnixMs,
        sender: &UserUuid,
        (recipient, away): (&UserUuid, Option<ShardId>),
        conv: &ConvId,
        charge: u64,
    ) -> Result<(), (ErrorCode, &'static str)> {
        let (conv_fill, to) = self.recipient_levels(recipient, away, conv)?;
        let c = &self.config;
        let full = if conv_fill.msgs >= c.max_offline_queue_per_conversation as u64
            || conv_fill.bytes + charge > c.max_offline_queue_bytes_per_conversation
        {
            Some((
                ErrorCode::QUEUE_FULL,
                "the recipient's offline queue for this conversation is full; retry later",
            ))
        } else if to.msgs >= c.max_offline_queue_per_recipient as u64
            || to.bytes + charge > c.max_offline_queue_bytes_per_recipient
        {
            Some((
                ErrorCode::RECIPIENT_QUEUE_FULL,
                "the recipient has too many undelivered messages; retry later",
            ))
        } else {
            None
        };
        if let Some(refusal) = full {
            if let Some(shard) = away {
                let stream = crate::handoff::Stream {
                    recipient: recipient.clone(),
                    conv: conv.clone(),
                };
                if self.state.handoffs_mut_views().ask_if_stale(&stream, now) {
                    self.ask_level(shard, stream);
                }
            }
            return Err(refusal);
        }
        self.shared_bounds(sender, charge)
    }

    /// What is queued for `recipient` in `conv`, and for `recipient` in all, as this shard
    /// knows it: its own queues, or (`away`: another shard's user) that shard's last report
    /// plus what this shard handed it and it has not applied (refused until that shard's
    /// first report after a start).
    fn recipient_levels(
        &self,
        recipient: &UserUuid,
        away: Option<ShardId>,
        conv: &ConvId,
    ) -> Result<(Fill, Fill), (ErrorCode, &'static str)> {
        let Some(shard) = away else {
            let q = self.state.summary(recipient, conv);
            let r = self.state.backlog().of_recipient(recipient);
            let fill = |msgs, bytes| Fill { msgs, bytes };
            return Ok((fill(q.msgs, q.bytes), fill(r.msgs as u64, r.bytes)));
        };
        let h = self.state.handoffs();
        let (views, handed) = (h.views(), h.unapplied_fill());
        if !views.synced(shard) {
            return Err((
                ErrorCode::STORAGE_UNAVAILABLE,
                "the relay is starting and does not know yet how full the recipient's queue is; send it again",
            ));
        }
        let stream = crate::handoff::Stream {
            recipient: recipient.clone(),
            conv: conv.clone(),
        };
        Ok((
            views.stream(&stream).plus(handed.stream(&stream)),
            views.recipient(recipient).plus(handed.recipient(recipient)),
        ))
    }

    /// The bounds several conversations share: the sender's bytes over all its recipients
    /// (what this shard stores of them, and what it handed to other shards and they hold), and
    /// this shard's share of the relay's total.
    fn shared_bounds(
        &self,
        sender: &UserUuid,
        charge: u64,
    ) -> Result<(), (ErrorCode, &'static str)> {
        let c = &self.config;
        let h = self.state.handoffs();
        let (views, handed) = (h.views(), h.unapplied_fill());
        let b = self.state.backlog();
        let sent =
            b.of_sender(sender).bytes + views.author(sender).bytes + handed.author(sender).bytes;
        if sent + charge > c.max_offline_queue_bytes_per_sender {
            return Err((
                ErrorCode::SENDER_QUEUE_FULL,
                "you have too many undelivered messages; retry when your contacts have received some",
            ));
        }
        let total = b.total.bytes + views.total().bytes + handed.total().bytes;
        let share =
            crate::handoff::total_share(c.max_offline_queue_bytes_total, c.shard.map().shards());
        if total + charge > share {
            return Err((
                ErrorCode::RELAY_QUEUE_FULL,
                "the relay holds as many undelivered messages as it may; retry later",
            ));
        }
        Ok(())
    }

    pub(crate) fn conn_user(&self, conn: ConnId) -> Option<UserUuid> {
        self.sessions().user(conn).cloned()
    }

    /// A `msg` frame: judged first (nothing written), then accepted, acknowledged and
    /// delivered or queued; a resend of a held id is acknowledged again with its first seq.
    pub(crate) fn on_msg(&mut self, now: UnixMs, conn: ConnId, m: MsgFrame) {
        let Some(user) = self.conn_user(conn) else {
            return;
        };
        match self.judge_msg(now, &user, &m, Answer::Conn(conn)) {
            Ok(MsgVerdict::New {
                recipient,
                away,
                peer,
            }) => {
                let to = (&recipient, away);
                self.accept_msg(now, Answer::Conn(conn), &user, to, peer, m);
            }
            Ok(MsgVerdict::Resent(seq)) => {
                probes::probe!("msg:deduplicated");
                self.stats.messages_deduplicated += 1;
                self.send(conn, ServerFrame::Ack(AckFrame { id: m.id, seq }));
            }
            Ok(MsgVerdict::Owner(owner)) => {
                self.submit(now, (owner, conn), &user, Submitted::Msg(m));
            }
            Err((code, msg)) => {
                // The id string is built only for a refusal (not on the routing path).
                let id = Some(m.id.to_string());
                self.send_error(conn, code, msg, Some("msg".into()), id);
            }
        }
    }

    /// A `msg` of `user`, a user of this shard, to `recipient` of shard `away` (`None`: this
    /// one), when the conversation's owner is that other shard (its lower member's): its
    /// payload and the sender's message rate are checked here (the sender's shard keeps its
    /// rate), the rest there. `None`: this shard owns the conversation.
    fn owner_elsewhere(
        &self,
        now: UnixMs,
        user: &UserUuid,
        (recipient, away): (&UserUuid, Option<ShardId>),
        m: &MsgFrame,
    ) -> Option<Result<MsgVerdict, (ErrorCode, &'static str)>> {
        let owner = away.filter(|_| recipient < user)?;
        if !is_base64(&m.payload) {
            return Some(Err((
                ErrorCode::BAD_FRAME,
                "payload is not base64 (standard alphabet)",
            )));
        }
        if !self.throttles().message_allowed(now, user) {
            return Some(Err((
                ErrorCode::RATE_LIMITED,
                "too many messages; retry later",
            )));
        }
        Some(Ok(MsgVerdict::Owner(owner)))
    }

    /// The checks of a `msg` of `user`, in order: membership and `to` (the conversation is
    /// read if not in memory), the conversation's tombstones are read (likewise), the
    /// payload's alphabet, a known id, the message rate, every queue bound, and a synced
    /// recipient's queue is read. Nothing is written; `Err`: the code and words of the
    /// refusal.
    ///
    /// A `msg` `submitted` by the sender's shard was checked there for its rate; one of a user
    /// of this shard in a conversation another shard owns goes there
    /// ([`MsgVerdict::Owner`]).
    pub(crate) fn judge_msg(
        &mut self,
        now: UnixMs,
        user: &UserUuid,
        m: &MsgFrame,
        answer: Answer,
    ) -> Result<MsgVerdict, (ErrorCode, &'static str)> {
        let recipient = self
            .member_check(user, &m.conv_id, &m.to)
            .map_err(NotMember::refusal)?;
        let submitted = matches!(answer, Answer::Shard(..));
        // The recipient's shard, found once for the whole message.
        let away = self.config.shard.elsewhere(&recipient);
        let to = (&recipient, away);
        if !submitted && let Some(elsewhere) = self.owner_elsewhere(now, user, to, m) {
            return elsewhere;
        }
        // Whether this id is known is decided after the payload's check; the conversation's
        // tombstones are read once the caller is known to be a member (a stranger's frame
        // reads nothing more).
        let known = self.tombstone(&m.conv_id, &m.id, now).map_err(|_| {
            (
                ErrorCode::STORAGE_UNAVAILABLE,
                "the relay could not read which message ids were already used; send it again",
            )
        })?;
        let peer = self.online(&recipient);
        if !is_base64(&m.payload) {
            return Err((
                ErrorCode::BAD_FRAME,
                "payload is not base64 (standard alphabet)",
            ));
        }
        // PLANTED BUG (test-only) when `NoMessageDedup`: the tombstone is never looked up.
        let dedup = !planted!(self.config, NoMessageDedup);
        if let Some(t) = known.filter(|_| dedup) {
            if t.author == *user {
                return Ok(MsgVerdict::Resent(t.seq));
            }
            return Err((
                ErrorCode::ALREADY_EXISTS,
                "this message id was already used by the other member of this conversation",
            ));
        }
        if !submitted && !self.throttles().message_allowed(now, user) {
            return Err((ErrorCode::RATE_LIMITED, "too many messages; retry later"));
        }
        let charge = crate::limits::queued_message_bytes(m.id.as_str().len(), m.payload.len());
        self.queue_bounds(now, user, to, &m.conv_id, charge)?;
        // A synced recipient's queue is read as far as delivery needs (its front and what the
        // window may take next: its queues are held while it is synced, so that is in memory
        // unless delivery is about to read the next page) before the message joins it: it is
        // delivered from there. Anyone else's is not read: the message joins its tail
        // (`State::put_message`), and the recipient's next `sync` reads the queue.
        if self
            .read_for_delivery(peer, &recipient, &m.conv_id)
            .is_err()
        {
            return Err((
                ErrorCode::STORAGE_UNAVAILABLE,
                "the relay could not read the recipient's queue; send it again",
            ));
        }
        Ok(MsgVerdict::New {
            recipient,
            away,
            peer,
        })
    }

    /// The queue of `recipient` in `conv` read as far as delivering a new message needs, when
    /// the recipient's connection `peer` is synced (else nothing is read).
    pub(crate) fn read_for_delivery(
        &mut self,
        peer: Option<ConnId>,
        recipient: &UserUuid,
        conv: &ConvId,
    ) -> Result<(), StoreError> {
        let synced = peer.is_some_and(|c| self.sessions().get(c).is_some_and(|s| s.synced));
        if !synced || self.state.queue_gap(recipient, conv).is_none() {
            // Not delivered now, or in memory whole (or empty): nothing to read.
            return Ok(());
        }
        let room = self.window_room(recipient, None);
        self.read_queue_front(recipient, conv, room)?;
        self.read_ahead_of(recipient, conv, room)
    }

    /// A new message `m` of `user` that passed [`judge_msg`](Self::judge_msg): its seq, its
    /// tombstone and its place in the recipient's queue are written, the sender is
    /// acknowledged, and the recipient's connection (`peer`) gets it or a push is sent.
    pub(crate) fn accept_msg(
        &mut self,
        now: UnixMs,
        answer: Answer,
        user: &UserUuid,
        (recipient, away): (&UserUuid, Option<ShardId>),
        peer: Option<ConnId>,
        m: MsgFrame,
    ) {
        // `away`: the recipient's shard, if it is not this one; the message is handed to it.
        // `judge_msg` found `user` in the conversation, so this is always `Some`.
        let Some((seq, prev)) = self.state.next_seq(&m.conv_id, user, away.is_some()) else {
            return;
        };
        if let Answer::Conn(_) = answer {
            // A submitted message is charged at its sender's shard.
            self.throttles_mut().charge_message(now, user);
        }
        self.state.put_tombstone(
            &m.conv_id,
            m.id.clone(),
            Tombstone {
                author: user.clone(),
                seq,
                expires_at: now.plus_ms(TOMBSTONE_TTL_MS.max(self.config.offline_ttl_ms)),
                retracted: false,
            },
        );
        let queued = Queued {
            seq,
            id: m.id.clone(),
            crypto_v: m.crypto_v,
            payload: m.payload,
            at: now,
        };
        if let Some(to) = away {
            let stream = (recipient, &m.conv_id);
            self.hand_off(now, to, stream, user, queued, prev);
            let ack = Reply::Ack {
                id: m.id,
                seq,
                new: true,
            };
            return self.answer(answer, user, ack);
        }
        self.state.put_message(&m.conv_id, user, recipient, queued);
        if peer.is_some() {
            self.stats.messages_accepted_online += 1;
        } else {
            self.stats.messages_accepted_offline += 1;
        }
        let ack = Reply::Ack {
            id: m.id,
            seq,
            new: true,
        };
        self.answer(answer, user, ack);
        match peer {
            Some(peer) => self.deliver_on(peer, &m.conv_id),
            None => self.push_new_msg(now, recipient),
        }
    }

    pub(crate) fn on_typing(&mut self, now: UnixMs, conn: ConnId, t: &TypingFrame) {
        let Some(user) = self.conn_user(conn) else {
            return;
        };
        let other = match self.member_check(&user, &t.conv_id, &t.to) {
            Ok(other) => other,
            Err(e) => {
                let (code, msg) = e.refusal();
                return self.send_error(conn, code, msg, Some("typing".into()), None);
            }
        };
        // The other member's connection here, or its shard if it is another's.
        let away = self.config.shard.elsewhere(&other);
        let peer = self.online(&other);
        // Typing is best effort: a failed read of the caller's alias drops it. Read before the
        // notice is charged (nothing changes before a frame's reads).
        let from = if peer.is_some() || away.is_some() {
            self.alias_of(&user).ok().flatten()
        } else {
            None
        };
        if self.read_missed() {
            return; // run again once the alias is read
        }
        if !self.throttles_mut().allow_typing(now, &user) {
            return; // silently dropped
        }
        let Some(from) = from else {
            return;
        };
        let frame = ServerFrame::Typing(TypingDelivery {
            from,
            conv_id: t.conv_id.clone(),
        });
        match (away, peer) {
            (Some(shard), _) => self.signal(shard, &other, frame, None),
            (None, Some(peer)) => self.send(peer, frame),
            (None, None) => {}
        }
    }

    pub(crate) fn on_retract(&mut self, now: UnixMs, conn: ConnId, r: &RetractFrame) {
        let Some(user) = self.conn_user(conn) else {
            return;
        };
        self.retract_as(now, Answer::Conn(conn), user, r);
    }

    /// A `retract` of `user`, answered where `answer` says: decided here when this shard
    /// owns the conversation (its tombstone names the author), else submitted to the owner.
    /// The recipient's part (its queued copy dropped, the retraction forwarded and kept) is
    /// done here when the recipient is this shard's, else sent to its shard as a notice.
    pub(crate) fn retract_as(
        &mut self,
        now: UnixMs,
        answer: Answer,
        user: UserUuid,
        r: &RetractFrame,
    ) {
        let id = Some(r.id.to_string());
        let other = match self.member_check(&user, &r.conv_id, &r.to) {
            Ok(other) => other,
            Err(e) => return self.refuse(answer, &user, e.refusal(), "retract", id),
        };
        let place = self.config.shard;
        let owner = place.map().owner_of([&user, &other]);
        if let Answer::Conn(conn) = answer
            && owner != place.me()
        {
            return self.submit(now, (owner, conn), &user, Submitted::Retract(r.clone()));
        }
        let unreadable = |relay: &mut Self, user: &UserUuid, what: &str, id| {
            let words = format!("the relay could not read {what}; send the retract again");
            let refusal = (ErrorCode::STORAGE_UNAVAILABLE, words.as_str());
            relay.refuse(answer, user, refusal, "retract", id);
        };
        // The caller's alias (the retraction's `from`), read before anything changes.
        let from = match self.alias_of(&user) {
            Ok(Some(from)) => from,
            Ok(None) => return self.retract_taken(answer, &user, &r.id),
            Err(_) => return unreadable(self, &user, "your account", id),
        };
        let Ok(tomb) = self.retracted_tombstone(&user, r, now) else {
            return unreadable(self, &user, "the message's tombstone", id);
        };
        let Some(tomb) = tomb else {
            let refusal = (
                ErrorCode::NOT_THE_AUTHOR,
                "only the author of a message can retract it (unknown id in this conversation)",
            );
            return self.refuse(answer, &user, refusal, "retract", id);
        };
        let message = (r, tomb);
        self.retract_decided(now, answer, (user, from), other, message);
    }

    /// A retraction the conversation's owner decided (`tomb`: the message's tombstone, whose
    /// author is `author`): its tombstone marked, and the recipient's part done here or sent
    /// to the recipient's shard.
    fn retract_decided(
        &mut self,
        now: UnixMs,
        answer: Answer,
        (user, from): (UserUuid, AliasId),
        other: UserUuid,
        (r, tomb): (&RetractFrame, Tombstone),
    ) {
        let away = self.config.shard.elsewhere(&other);
        if away.is_none()
            && self
                .read_queue_through(&other, &r.conv_id, tomb.seq)
                .is_err()
        {
            let words = "the relay could not read the recipient's queue; send the retract again";
            let refusal = (ErrorCode::STORAGE_UNAVAILABLE, words);
            return self.refuse(answer, &user, refusal, "retract", Some(r.id.to_string()));
        }
        if tomb.retracted {
            probes::probe!("retract:repeated");
        } else {
            self.state.put_tombstone(
                &r.conv_id,
                r.id.clone(),
                Tombstone {
                    retracted: true,
                    ..tomb
                },
            );
        }
        self.retract_taken(answer, &user, &r.id);
        let message = (&r.id, tomb.seq);
        match away {
            Some(shard) => {
                let notice = Notice::Retract {
                    conv: r.conv_id.clone(),
                    id: r.id.clone(),
                    seq: tomb.seq,
                    author: user,
                    from,
                    recipient: other,
                };
                self.send_notice(now, shard, notice);
            }
            None => {
                self.retract_for(now, (user, from), other, &r.conv_id, message);
            }
        }
    }

    /// A retraction submitted by another shard (`answer`) is decided: that shard stops sending
    /// it again (the sender is told nothing; a `retract` has no answer).
    fn retract_taken(&mut self, answer: Answer, user: &UserUuid, id: &wire::MessageId) {
        if let Answer::Shard(..) = answer {
            self.answer(answer, user, Reply::Taken { id: id.clone() });
        }
    }

    /// The recipient's part of a retraction of message `id` (seq `seq`) of `conv` by `author`:
    /// a queued copy is dropped and the retraction forwarded and kept. `false`: the
    /// recipient's queue could not be read (nothing changed).
    pub(crate) fn retract_for(
        &mut self,
        now: UnixMs,
        author: (UserUuid, AliasId),
        recipient: UserUuid,
        conv: &ConvId,
        (id, seq): (&wire::MessageId, wire::Seq),
    ) -> bool {
        if self.read_queue_through(&recipient, conv, seq).is_err() {
            return false;
        }
        let dropped = self.state.drop_retracted(&recipient, conv, seq);
        if dropped {
            probes::probe!("retract:dropped-queued-copy");
        }
        self.deliver_retract(now, author, recipient, (conv, id), dropped);
        true
    }

    /// The tombstone of `user`'s message `r.id` in `r.conv_id` (`None`: no such message of
    /// theirs in this conversation). `Err`: the read failed.
    fn retracted_tombstone(
        &mut self,
        user: &UserUuid,
        r: &RetractFrame,
        now: UnixMs,
    ) -> Result<Option<Tombstone>, StoreError> {
        let tomb = self.tombstone(&r.conv_id, &r.id, now)?;
        // PLANTED BUG (RetractByAnyMember): the author is not checked, so a member may
        // retract the other one's message.
        let any_member = planted!(self.config, RetractByAnyMember);
        Ok(tomb.filter(|t| t.author == *user || any_member))
    }

    /// Sends the retraction of message `id` of `conv` by `author` (with their alias) to
    /// `recipient`: live when the recipient has a connection (it may be silently dead, or the
    /// relay may stop before the frame leaves: a retract has no ack), and kept either way for
    /// redelivery on every later `sync` of the recipient until the offline TTL. `dropped`: a
    /// queued copy of the message was dropped (it may have been in flight on the recipient's
    /// connection).
    fn deliver_retract(
        &mut self,
        now: UnixMs,
        (author, from): (UserUuid, AliasId),
        recipient: UserUuid,
        (conv, id): (&ConvId, &wire::MessageId),
        dropped: bool,
    ) {
        let frame = ServerFrame::Retract(RetractDelivery {
            id: id.clone(),
            from,
            conv_id: conv.clone(),
        });
        if let Some(peer) = self.online(&recipient) {
            self.send(peer, frame);
            if dropped {
                self.recount(&recipient, conv);
            }
        }
        self.state.put_pending_retract(
            PendingRetractRow {
                recipient,
                id: id.clone(),
                conv_id: conv.clone(),
                from: author,
                at: now,
            },
            self.config.offline_ttl_ms,
        );
    }
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    use proptest::prelude::*;

    use super::is_base64;

    /// The base64 crate, as lenient as `is_base64`: padding optional, trailing bits allowed.
    fn lenient() -> GeneralPurpose {
        GeneralPurpose::new(
            &base64::alphabet::STANDARD,
            GeneralPurposeConfig::new()
                .with_decode_padding_mode(DecodePaddingMode::Indifferent)
                .with_decode_allow_trailing_bits(true),
        )
    }

    proptest! {
        #[test]
        fn agrees_with_the_base64_crate(text in "[A-Za-z0-9+/=_ -]{0,12}") {
            prop_assert_eq!(is_base64(&text), lenient().decode(&text).is_ok(), "{:?}", text);
        }

        #[test]
        fn accepts_every_encoding(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let padded = base64::engine::general_purpose::STANDARD.encode(&bytes);
            prop_assert!(is_base64(&padded));
            prop_assert!(is_base64(padded.trim_end_matches('=')));
        }

        /// Long texts go through the 32-byte blocks: an encoding with one byte replaced by
        /// any ASCII byte, anywhere (in a block or in the remainder).
        #[test]
        fn agrees_with_the_base64_crate_on_long_texts(
            bytes in proptest::collection::vec(any::<u8>(), 0..160),
            at in any::<proptest::sample::Index>(),
            replacement in 0u8..128,
            corrupt in any::<bool>(),
        ) {
            let mut text = base64::engine::general_purpose::STANDARD.encode(&bytes).into_bytes();
            if corrupt && !text.is_empty() {
                let i = at.index(text.len());
                text[i] = replacement;
            }
            let text = String::from_utf8(text).expect("ASCII");
            prop_assert_eq!(is_base64(&text), lenient().decode(&text).is_ok(), "{:?}", text);
        }
    }
}
