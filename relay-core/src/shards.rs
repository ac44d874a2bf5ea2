//! Messages that cross shards (`crate::handoff`): the owner's side, where a message for a
//! user of another shard becomes an outbox row, and the recipient shard's side, where a
//! hand-off is applied to its recipient's queue and delivered.
//!
//! * **The owner** writes the message's outbox row in the commit that stores its seq and
//!   tombstone, then acknowledges the sender; the hand-off goes out with the `ack` (both are
//!   released after that commit) and again every `RESEND_MS` until the recipient's shard
//!   acknowledges it. Its acknowledgement deletes the rows it covers.
//! * **The recipient's shard** applies the hand-offs that follow its stream's chain, each
//!   into the recipient's queue, with the stream's mark, in one commit; delivers them to a
//!   synced connection at once (the owner's commit made them durable, and its outbox hands
//!   them over again should the apply be lost; `Relay`'s drain order), or pushes to an
//!   offline recipient, and acknowledges them to the owner after that commit. A repeat is acknowledged again; a hand-off past
//!   a gap waits for the gap. The apply never refuses a message: the owner acknowledged it.
//! * **A sender whose shard does not own the conversation** submits its `msg` or `retract`
//!   to the owner, which decides it and answers with a verdict (the `ack` or the error frame),
//!   released after the owner's commit; a lost submission or verdict leaves the client without
//!   an answer, and it sends the frame again.
//! * **Receipts and retractions for a user of another shard** are notices: kept by the shard
//!   that decided them until the user's shard has applied them (a receipt forwarded or kept
//!   for the offline author, a retraction dropping the queued copy and forwarded or kept),
//!   sent again until then. Typing notices and call signals are best effort: lost, they are
//!   gone; a call signal for a user with no connection is answered `PEER_OFFLINE` by the
//!   callee's shard.

use wire::frames::AckFrame;
use wire::{ConvId, ErrorCode, Seq, ServerFrame, UnixMs, UserUuid};

use crate::cx::Cx;
use crate::handoff::{
    Answered, Applied, Crossing, Forward, Forwarded, Handoff, Levels, LevelsAsked, Message, Notice,
    NoticeSent, NoticeTaken, PairOp, Received, Reply, Sent, ShardId, Signal, Stream, Submission,
    Submitted, Verdict,
};
use crate::http::{ApiError, HttpResponse};
use crate::messaging::{Answer, MsgVerdict};
use crate::queue::Queued;
use crate::shell::{ConnId, Output};

impl Cx<'_> {
    /// What the core of another shard sent this one.
    pub(crate) fn on_crossing(&mut self, now: UnixMs, c: Crossing) {
        match c {
            Crossing::Handoff(h) => self.on_handoff(now, h),
            Crossing::Applied(a) => self.on_applied(now, &a),
            Crossing::Submit(s) => self.on_submit(now, s),
            Crossing::Verdict(v) => self.on_verdict(now, v),
            Crossing::Notice(n) => self.on_notice(now, n),
            Crossing::Taken(t) => self.on_taken(&t),
            Crossing::Signal(s) => self.on_signal(s),
            Crossing::Forward(f) => self.on_forward(now, f),
            Crossing::LevelsAsked(q) => {
                let levels = self.state.levels_for(q.from, q.stream);
                self.stage(Output::Cross(Crossing::Levels(levels)));
            }
            Crossing::Levels(l) => self.on_levels(now, &l),
            // The dispatcher's: it knows which requests wait (`Relay::handle_crossing`).
            Crossing::Answered(_) => debug_assert!(false, "an answer is the dispatcher's"),
        }
    }

    /// The user's side: the request being handled (`Cx::request`) of `user` is decided by
    /// shard `owner` and goes there; the dispatcher withholds the response this returns, and
    /// the owner's answer comes back (`Relay::on_answered`). A request that cannot wait for an
    /// answer (a shell that does not number its requests, or too many waiting) is answered
    /// 503 `STORAGE_UNAVAILABLE`.
    pub(crate) fn forward(
        &mut self,
        owner: ShardId,
        user: &UserUuid,
        op: PairOp,
    ) -> Result<HttpResponse, ApiError> {
        let op = Forwarded::Pair {
            user: user.clone(),
            op,
        };
        self.forward_op(owner, op)
    }

    /// [`Cx::forward`] of any request `op` a rule forwards to shard `to`.
    pub(crate) fn forward_op(
        &mut self,
        to: ShardId,
        op: Forwarded,
    ) -> Result<HttpResponse, ApiError> {
        let Some(id) = self.request else {
            return Err(ApiError::new(
                ErrorCode::STORAGE_UNAVAILABLE,
                "another shard decides this request and it cannot wait for it now; try again",
            ));
        };
        self.stats.requests_forwarded += 1;
        self.stage(Output::Cross(Crossing::Forward(Forward {
            from: self.config.shard.me(),
            to,
            id,
            op,
        })));
        Ok(HttpResponse::json(202, &wire::http::OkResponse::OK))
    }

    /// The deciding side: a request forwarded by the user's shard (a friendship's change at
    /// the pair's owner, a storage estimate at the registry), decided here and answered, with
    /// the friendship as written for the caller's list, after this input's commit.
    fn on_forward(&mut self, now: UnixMs, f: Forward) {
        let (response, contact) = match f.op {
            Forwarded::Pair { user, op } => self.decide_pair(now, user, op),
            Forwarded::Storage {
                user,
                queued_bytes,
                queued_msgs,
            } => (
                self.storage_estimate(&user, (queued_bytes, queued_msgs)),
                None,
            ),
            Forwarded::Request { .. } => {
                debug_assert!(false, "a whole request is the dispatcher's");
                return;
            }
        };
        self.stage(Output::Cross(Crossing::Answered(Answered {
            from: self.config.shard.me(),
            to: f.from,
            id: f.id,
            response,
            contact,
        })));
    }

    /// A friendship's change `op` of `user`, decided at the pair's owner: the response, and
    /// the friendship as written for the caller's list.
    fn decide_pair(
        &mut self,
        now: UnixMs,
        user: UserUuid,
        op: PairOp,
    ) -> (HttpResponse, Option<(UserUuid, crate::handoff::Contact)>) {
        let other = match &op {
            PairOp::Request { target, .. } => Ok(target.clone()),
            PairOp::Accept { other: Some(o), .. } | PairOp::Reject { other: Some(o), .. } => {
                Ok(o.clone())
            }
            PairOp::Accept {
                id, other: None, ..
            }
            | PairOp::Reject { id, other: None } => self.member_of_record(&user, *id),
        };
        let result = match other {
            Err(e) => Err(e),
            Ok(other) if self.pair_elsewhere(&user, &other).is_some() => Err(ApiError::new(
                ErrorCode::STORAGE_UNAVAILABLE,
                "this request went to a shard that does not decide it; try again",
            )),
            Ok(other) => match op {
                PairOp::Request { target, announce } => {
                    self.befriend(now, &user, &target, announce)
                }
                PairOp::Accept { id, from, .. } => self.accept(now, &user, &other, id, from),
                PairOp::Reject { id, .. } => self.reject(now, &user, &other, id),
            },
        };
        match result {
            Ok((response, row)) => (response, Some((user, row.into()))),
            Err(e) => (e.into_response(), None),
        }
    }

    /// The sender's side: `frame` of `author` on `conn`, about a conversation shard `owner`
    /// owns, goes there to be decided.
    pub(crate) fn submit(
        &mut self,
        now: UnixMs,
        (owner, conn): (ShardId, ConnId),
        author: &UserUuid,
        frame: Submitted,
    ) {
        let msg = matches!(frame, Submitted::Msg(_));
        self.stats.messages_submitted += u64::from(msg);
        let submission = Submission {
            from: self.config.shard.me(),
            to: owner,
            conn: conn.0,
            author: author.clone(),
            frame,
        };
        // A message is charged to its sender's rate as it goes, once (not again while the
        // same one waits): charged at its verdict, a burst would pass before the first came.
        if self.state.submission_sent(&submission, now) != Sent::Again && msg {
            self.throttles_mut().charge_message(now, author);
        }
        self.stage(Output::Cross(Crossing::Submit(submission)));
    }

    /// The owner's side: a submitted `msg`, judged and accepted as its own sender's would be
    /// (but for the rate, the sender shard's), or a submitted `retract`; answered with a
    /// verdict.
    fn on_submit(&mut self, now: UnixMs, s: Submission) {
        let answer = Answer::Shard(s.from, s.conn);
        let author = s.author;
        let m = match s.frame {
            Submitted::Msg(m) => m,
            Submitted::Retract(r) => return self.retract_as(now, answer, author, &r),
        };
        match self.judge_msg(now, &author, &m, answer) {
            Ok(MsgVerdict::New {
                recipient,
                away,
                peer,
            }) => {
                self.accept_msg(now, answer, &author, (&recipient, away), peer, m);
            }
            Ok(MsgVerdict::Resent(seq)) => {
                self.stats.messages_deduplicated += 1;
                let ack = Reply::Ack {
                    id: m.id,
                    seq,
                    new: false,
                };
                self.answer(answer, &author, ack);
            }
            // Never: a submission is judged as the owner's, not sent on. Unanswered, the
            // client sends it again.
            Ok(MsgVerdict::Owner(_)) => self.stats.handoffs_broken += 1,
            Err((code, words)) => {
                let refusal = Reply::Error {
                    code,
                    words: words.into(),
                    ref_type: "msg".into(),
                    id: Some(m.id.to_string()),
                };
                self.answer(answer, &author, refusal);
            }
        }
    }

    /// The sender's side: another shard's answer to a frame of the sender, sent on its
    /// connection if that is still open (else the client sends the frame again on its next).
    /// A message's charge is given back when the first verdict for it that comes refuses it
    /// or finds it stored already.
    fn on_verdict(&mut self, now: UnixMs, v: Verdict) {
        let first = self.state.submission_answered(v.conn, &v.reply);
        let not_stored_now = match &v.reply {
            Reply::Ack { new, .. } => !new,
            Reply::Error { ref_type, .. } => ref_type == "msg",
            Reply::Taken { .. } => false,
        };
        if first && not_stored_now {
            self.throttles_mut().refund_message(now, &v.author);
        }
        let conn = ConnId(v.conn);
        if self.conn_user(conn).as_ref() != Some(&v.author) {
            return;
        }
        self.reply_on(conn, v.reply);
    }

    /// Answers a frame of `author`: on its connection here, or to its shard.
    pub(crate) fn answer(&mut self, answer: Answer, author: &UserUuid, reply: Reply) {
        match answer {
            Answer::Conn(conn) => self.reply_on(conn, reply),
            Answer::Shard(to, conn) => self.stage(Output::Cross(Crossing::Verdict(Verdict {
                from: self.config.shard.me(),
                to,
                conn,
                author: author.clone(),
                reply,
            }))),
        }
    }

    /// Refuses a frame of `author` (the error frame's code, words, type and id), where
    /// `answer` says.
    #[cfg_attr(feature = "probes", track_caller)]
    pub(crate) fn refuse(
        &mut self,
        answer: Answer,
        author: &UserUuid,
        (code, words): (ErrorCode, &str),
        ref_type: &str,
        id: Option<String>,
    ) {
        match answer {
            Answer::Conn(conn) => self.send_error(conn, code, words, Some(ref_type.into()), id),
            Answer::Shard(..) => {
                let reply = Reply::Error {
                    code,
                    words: words.into(),
                    ref_type: ref_type.into(),
                    id,
                };
                self.answer(answer, author, reply);
            }
        }
    }

    /// An `ack` or an error frame on `conn`.
    fn reply_on(&mut self, conn: ConnId, reply: Reply) {
        match reply {
            Reply::Ack { id, seq, .. } => {
                self.send(conn, ServerFrame::Ack(AckFrame { id, seq }));
            }
            Reply::Error {
                code,
                words,
                ref_type,
                id,
            } => self.send_error(conn, code, &words, Some(ref_type), id),
            Reply::Taken { .. } => {}
        }
    }

    /// A best-effort frame for `user`, a user of shard `to`; `offline`: what to answer the
    /// sender's connection (`conn` of `author`) if `user` has no connection there.
    pub(crate) fn signal(
        &mut self,
        to: ShardId,
        user: &UserUuid,
        frame: ServerFrame,
        offline: Option<(ConnId, &UserUuid, Reply)>,
    ) {
        self.stage(Output::Cross(Crossing::Signal(Signal {
            from: self.config.shard.me(),
            to,
            user: user.clone(),
            frame,
            offline: offline.map(|(conn, author, reply)| (conn.0, author.clone(), reply)),
        })));
    }

    /// A best-effort frame from another shard: sent if its user is connected, else the
    /// sender is answered if it asked to be.
    fn on_signal(&mut self, s: Signal) {
        match (self.online(&s.user), s.offline) {
            (Some(peer), _) => self.send(peer, s.frame),
            (None, Some((conn, author, reply))) => {
                self.answer(Answer::Shard(s.from, conn), &author, reply);
            }
            (None, None) => {}
        }
    }

    /// A receipt or a retraction for `notice`'s user, a user of shard `to`: kept (in this
    /// input's commit) and sent until that shard has taken it.
    pub(crate) fn send_notice(&mut self, now: UnixMs, to: ShardId, notice: Notice) {
        self.state.put_notice(to, notice);
        self.send_handoffs(now);
    }

    /// A notice from another shard, applied as the frame that caused it would have been on
    /// this shard (a receipt forwarded or kept for an offline author unless a newer one was
    /// taken before it, a retraction dropping the queued copy and forwarded or kept), and
    /// acknowledged after that commit; a failed
    /// read leaves it unacknowledged, and it comes again.
    fn on_notice(&mut self, now: UnixMs, n: NoticeSent<crate::handoff::NoticeKey, Notice>) {
        let taken = match n.item {
            Notice::Receipt {
                read,
                conv,
                seq,
                reader,
                author,
                from,
                to,
            } => {
                let kind = if read {
                    crate::rows::ReceiptKind::Read
                } else {
                    crate::rows::ReceiptKind::Delivered
                };
                if self.state.take_receipt(&author, &conv, kind, seq) {
                    self.forward_receipt(now, kind, &conv, seq, (&reader, from), (&author, to));
                }
                true
            }
            Notice::Retract {
                conv,
                id,
                seq,
                author,
                from,
                recipient,
            } => self.retract_for(now, (author, from), recipient, &conv, (&id, seq)),
            Notice::Contact {
                user,
                row,
                announce,
            } => self.take_contact(&user, &row.into(), announce),
            Notice::Confirmed {
                user,
                order_id,
                ref_id,
                at,
            } => {
                self.confirm_to_buyer(user, order_id, ref_id, at);
                true
            }
            Notice::Rebind { user, alias, at } => self.take_rebind(now, &user, &alias, at),
            Notice::Alias {
                user, alias, at, ..
            } => {
                self.state.refresh_alias(&user, &alias, at);
                true
            }
        };
        if taken {
            self.stats.notices_taken += 1;
            self.stage(Output::Cross(Crossing::Taken(NoticeTaken {
                from: self.config.shard.me(),
                to: n.from,
                key: n.key,
                version: n.version,
            })));
        }
    }

    /// Shard `t.from` took a notice of this one: its row goes.
    fn on_taken(&mut self, t: &NoticeTaken<crate::handoff::NoticeKey>) {
        self.state.notice_taken(t);
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
        self.state.hand_off(to, &stream, m.seq, prev, message);
        self.stats.messages_handed_off += 1;
        self.send_handoffs(now);
    }

    /// Stages the hand-offs due at `now` (released after the commit of what staged them, so
    /// never before their outbox rows are durable).
    pub(crate) fn send_handoffs(&mut self, now: UnixMs) {
        for h in self.state.poll_handoffs(now) {
            if crate::planted::planted!(self.config, HandoffRowDeletedOnSend) {
                // PLANTED BUG (test-only): the row goes as the hand-off leaves, not when its
                // apply is acknowledged.
                let sent = Applied {
                    from: h.to,
                    to: h.from,
                    stream: h.stream.clone(),
                    through: h.seq,
                    level: crate::handoff::Level::default(),
                };
                self.state.handoffs_applied(&sent, now);
            }
            self.stage(Output::Cross(Crossing::Handoff(h)));
        }
        for n in self.state.poll_notices(now) {
            self.stage(Output::Cross(Crossing::Notice(n)));
        }
        for s in self.state.poll_submissions(now) {
            self.stats.submissions_resent += 1;
            self.stage(Output::Cross(Crossing::Submit(s)));
        }
    }

    /// The owner's side: shard `a.from` applied `a.stream` through `a.through`.
    pub(crate) fn on_applied(&mut self, now: UnixMs, a: &Applied) {
        let deleted = self.state.handoffs_applied(a, now);
        self.stats.handoffs_acknowledged += deleted as u64;
    }

    /// The owner's side: a recipients' shard reports how full their queues are.
    fn on_levels(&mut self, now: UnixMs, l: &Levels) {
        let views = self.state.handoffs_mut_views();
        if l.complete {
            let map = self.config.shard.map();
            views.report_all(l, now, |u| map.of_user(u));
        } else {
            for (stream, author, level) in &l.streams {
                views.report(stream, author.as_ref(), *level, now);
            }
        }
    }

    /// The owner's side: asks the recipients' shards that did not yet say how full their
    /// queues are (after a start), once every `RESEND_MS`.
    pub(crate) fn ask_levels(&mut self, now: UnixMs) {
        let place = self.config.shard;
        let ask = self
            .state
            .handoffs_mut_views()
            .to_ask(place.me(), place.map().shards(), now);
        for to in ask {
            self.stage(Output::Cross(Crossing::LevelsAsked(LevelsAsked {
                from: place.me(),
                to,
                stream: None,
            })));
        }
    }

    /// The owner's side: asks shard `to` how full `stream`'s queue is now.
    pub(crate) fn ask_level(&mut self, to: ShardId, stream: Stream) {
        self.stage(Output::Cross(Crossing::LevelsAsked(LevelsAsked {
            from: self.config.shard.me(),
            to,
            stream: Some(stream),
        })));
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
        // The hand-off as it came, for the planted bugs of the apply (test-only).
        #[cfg(feature = "planted-bugs")]
        let planted = matches!(
            self.config.planted_bug,
            Some(
                crate::planted::PlantedBug::HandoffApplyNotIdempotent
                    | crate::planted::PlantedBug::HandoffGapNotHeld
            )
        )
        .then(|| h.clone());
        #[cfg(not(feature = "planted-bugs"))]
        let planted: Option<Handoff<Message>> = None;
        match self.state.receive_handoff(h) {
            Ok(Received::Apply(applied)) => self.apply_handoffs(now, owner, applied),
            Ok(Received::Again(_))
                if crate::planted::planted!(self.config, HandoffApplyNotIdempotent) =>
            {
                // PLANTED BUG (test-only): a repeat is applied again.
                self.apply_handoffs(now, owner, planted.into_iter().collect());
            }
            Ok(Received::Held) if crate::planted::planted!(self.config, HandoffGapNotHeld) => {
                // PLANTED BUG (test-only): past a gap, applied at once.
                self.apply_handoffs(now, owner, planted.into_iter().collect());
            }
            Ok(Received::Again(ack)) => {
                self.stats.handoffs_repeated += 1;
                if let Some(mut ack) = ack {
                    ack.level = self.state.level(&ack.stream, None);
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
            self.stats.handoffs_applied += 1;
            // Retracted before it came (the retraction's notice and the hand-off race): its
            // retraction is kept for the recipient, and the message is never queued.
            let key = (recipient.clone(), conv.clone(), queued.id.clone());
            if self.state.pending_retracts().contains_key(&key) {
                probes::probe!("retract:before-handoff");
                continue;
            }
            self.state
                .put_message(conv, &h.item.author, recipient, queued);
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
