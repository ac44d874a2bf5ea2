//! Messages that cross shards (`crate::handoff`): the owner's side, where a message for a
//! user of another shard becomes an outbox row, and the recipient shard's side, where a
//! hand-off is applied to its recipient's queue and delivered.
//!
//! * **The owner** writes the message's outbox row in the commit that stores its seq and
//!   tombstone, then acknowledges the sender; the hand-off goes out with the `ack` (both are
//!   released after that commit) and again every `RESEND_MS` until the recipient's shard
//!   acknowledges it. Its acknowledgement deletes the rows it covers.
//! * **The recipient's shard** applies the hand-offs that follow its stream's chain, each
//!   into the recipient's queue, with the stream's mark, in one commit; then delivers them to
//!   a synced connection (or pushes to an offline recipient) and acknowledges them to the
//!   owner, both released after that commit. A repeat is acknowledged again; a hand-off past
//!   a gap waits for the gap. The apply never refuses a message: the owner acknowledged it.

use wire::frames::{AckFrame, MsgFrame};
use wire::{ConvId, MessageId, Seq, ServerFrame, UnixMs, UserUuid};

use crate::cx::Cx;
use crate::handoff::{
    Applied, Crossing, Handoff, Message, Outcome, Received, ShardId, Stream, Submission, Verdict,
};
use crate::messaging::{Answer, MsgVerdict};
use crate::queue::Queued;
use crate::shell::{ConnId, Output};

impl Cx<'_> {
    /// What the core of another shard sent this one.
    pub(crate) fn on_crossing(&mut self, now: UnixMs, c: Crossing) {
        match c {
            Crossing::Handoff(h) => self.on_handoff(now, h),
            Crossing::Applied(a) => self.on_applied(&a),
            Crossing::Submit(s) => self.on_submit(now, s),
            Crossing::Verdict(v) => self.on_verdict(now, v),
        }
    }

    /// The sender's side: `m` of `author` on `conn`, in a conversation shard `owner` owns,
    /// goes there to be decided.
    pub(crate) fn submit(&mut self, owner: ShardId, conn: ConnId, author: &UserUuid, m: MsgFrame) {
        self.stats.messages_submitted += 1;
        self.stage(Output::Cross(Crossing::Submit(Submission {
            from: self.config.shard.me(),
            to: owner,
            conn: conn.0,
            author: author.clone(),
            frame: m,
        })));
    }

    /// The owner's side: a submitted `msg`, judged and accepted as its own sender's would be
    /// (but for the rate, the sender shard's), answered with a verdict.
    fn on_submit(&mut self, now: UnixMs, s: Submission) {
        let answer = Answer::Shard(s.from, s.conn);
        let (author, m) = (s.author, s.frame);
        match self.judge_msg(now, &author, &m, answer) {
            Ok(MsgVerdict::New { recipient, peer }) => {
                self.accept_msg(now, answer, &author, &recipient, peer, m);
            }
            Ok(MsgVerdict::Resent(seq)) => {
                self.stats.messages_deduplicated += 1;
                self.answer(answer, &author, m.id, Outcome::Resent(seq));
            }
            // Never: a submission is judged as the owner's, not sent on. Unanswered, the
            // client sends it again.
            Ok(MsgVerdict::Owner(_)) => self.stats.handoffs_broken += 1,
            Err((code, words)) => {
                self.answer(answer, &author, m.id, Outcome::Refused(code, words.into()));
            }
        }
    }

    /// The sender's side: the owner's verdict on a submitted `msg`, answered on the sender's
    /// connection if it is still open (else the client sends the message again on its next).
    fn on_verdict(&mut self, now: UnixMs, v: Verdict) {
        let conn = ConnId(v.conn);
        if self.conn_user(conn).as_ref() != Some(&v.author) {
            return;
        }
        if let Outcome::New(_) = v.outcome {
            self.throttles_mut().charge_message(now, &v.author);
        }
        self.answer_conn(conn, v.id, v.outcome);
    }

    /// Answers a `msg` of `author`: on its connection here, or to its shard.
    pub(crate) fn answer(
        &mut self,
        answer: Answer,
        author: &UserUuid,
        id: MessageId,
        outcome: Outcome,
    ) {
        match answer {
            Answer::Conn(conn) => self.answer_conn(conn, id, outcome),
            Answer::Shard(to, conn) => self.stage(Output::Cross(Crossing::Verdict(Verdict {
                from: self.config.shard.me(),
                to,
                conn,
                author: author.clone(),
                id,
                outcome,
            }))),
        }
    }

    /// The `ack` of a `msg` on `conn`, or its error frame.
    fn answer_conn(&mut self, conn: ConnId, id: MessageId, outcome: Outcome) {
        match outcome {
            Outcome::New(seq) | Outcome::Resent(seq) => {
                self.send(conn, ServerFrame::Ack(AckFrame { id, seq }));
            }
            Outcome::Refused(code, words) => {
                let id = Some(id.to_string());
                self.send_error(conn, code, &words, Some("msg".into()), id);
            }
        }
    }

    /// The owner's side: message `m` of `author` for `stream` (its recipient and conversation),
    /// a user of shard `to`, is written to the outbox after `prev` (the stream's previous
    /// hand-off), and what is due is sent.
    pub(crate) fn hand_off(
        &mut self,
        now: UnixMs,
        to: ShardId,
        stream: (&UserUuid, &ConvId),
        author: &UserUuid,
        m: Queued,
        prev: Seq,
    ) {
        let message = Message {
            author: author.clone(),
            id: m.id,
            crypto_v: m.crypto_v,
            payload: m.payload,
            at: m.at,
        };
        let stream = Stream {
            recipient: stream.0.clone(),
            conv: stream.1.clone(),
        };
        self.state.hand_off(to, stream, m.seq, prev, message);
        self.stats.messages_handed_off += 1;
        self.send_handoffs(now);
    }

    /// Stages the hand-offs due at `now` (released after the commit of what staged them, so
    /// never before their outbox rows are durable).
    pub(crate) fn send_handoffs(&mut self, now: UnixMs) {
        for h in self.state.poll_handoffs(now) {
            self.stage(Output::Cross(Crossing::Handoff(h)));
        }
    }

    /// The owner's side: shard `a.from` applied `a.stream` through `a.through`.
    pub(crate) fn on_applied(&mut self, a: &Applied) {
        let deleted = self.state.handoffs_applied(a);
        self.stats.handoffs_acknowledged += deleted as u64;
    }

    /// The recipient shard's side: hand-off `h` from its conversation's owner shard.
    pub(crate) fn on_handoff(&mut self, now: UnixMs, h: Handoff<Message>) {
        let (recipient, conv) = (h.stream.recipient.clone(), h.stream.conv.clone());
        let peer = self.online(&recipient);
        // What delivery needs of the queue is read before the inbox moves its mark: a failed
        // read drops the hand-off unchanged, and the owner sends it again.
        if self.read_for_delivery(peer, &recipient, &conv).is_err() {
            self.stats.handoffs_deferred += 1;
            return;
        }
        let owner = h.from;
        match self.state.receive_handoff(h) {
            Ok(Received::Apply(applied)) => self.apply_handoffs(now, owner, applied),
            Ok(Received::Again(ack)) => {
                self.stats.handoffs_repeated += 1;
                if let Some(ack) = ack {
                    self.stage(Output::Cross(Crossing::Applied(ack)));
                }
            }
            Ok(Received::Held) => self.stats.handoffs_held += 1,
            Ok(Received::Dropped) => self.stats.handoffs_deferred += 1,
            Err(_broken) => self.stats.handoffs_broken += 1,
        }
    }

    /// Applies hand-offs of one stream, in chain order: each joins its recipient's queue, the
    /// stream's mark moves through the last, and the recipient's connection gets them (or a
    /// push is sent); the owner is acknowledged.
    fn apply_handoffs(&mut self, now: UnixMs, owner: ShardId, applied: Vec<Handoff<Message>>) {
        let Some(last) = applied.last() else {
            return;
        };
        let (stream, through) = (last.stream.clone(), last.seq);
        for h in applied {
            let queued = Queued {
                seq: h.seq,
                id: h.item.id,
                crypto_v: h.item.crypto_v,
                payload: h.item.payload,
                at: h.item.at,
            };
            let (recipient, conv) = (&h.stream.recipient, &h.stream.conv);
            self.state
                .put_message(conv, &h.item.author, recipient, queued);
            self.stats.handoffs_applied += 1;
        }
        if let Some(ack) = self.state.mark_applied(owner, &stream, through) {
            self.stage(Output::Cross(Crossing::Applied(ack)));
        }
        match self.online(&stream.recipient) {
            Some(peer) => self.deliver_on(peer, &stream.conv),
            None => self.push_new_msg(now, &stream.recipient),
        }
    }
}
