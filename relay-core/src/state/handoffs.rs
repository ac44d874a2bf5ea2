//! What crosses between shards (`crate::handoff`), held by the shard it belongs to: the outbox
//! of the messages this shard decided for users of other shards, and the inbox marks of the
//! streams other shards hand it, the receipt marks of the receipts they sent its users. Each
//! change is written to the batch of the input that makes
//! it: an outbox row with its message, a mark with the messages it applies, a row's delete
//! with the acknowledgement that ends it.

use std::collections::BTreeMap;

use wire::{ConvId, Seq, UnixMs, UserUuid};

use crate::handoff::{
    Applied, Broken, Fill, Handoff, Inbox, Level, Levels, MAX_HELD, Message, Notice, NoticeKey,
    NoticeSent, NoticeTaken, Notices, Outbox, Received, Reply, Sent, ShardId, ShardPlace, Stamp,
    Stream, Submission, Submissions, Tally, Views,
};
use crate::rows::{
    InboxMarkRow, NoticeRow, OutboxRow, ReceiptKind, ReceiptTakenRow, decode, write_inbox_mark_key,
    write_notice_key, write_outbox_key, write_receipt_taken_key,
};
use crate::state::State;
use crate::store::{Snapshot, StoreError, Table};

/// This shard's side of the hand-off.
#[derive(Debug)]
pub(crate) struct Handoffs {
    place: ShardPlace,
    outbox: Outbox<Message>,
    /// What the outbox holds, counted (the owner's side of the queue bounds).
    unapplied: Tally,
    inbox: Inbox<Message>,
    notices: Notices<NoticeKey, Notice>,
    /// The highest seq of each kind of receipt taken from another shard for each of this
    /// shard's users, by author, conversation and kind: its receipt marks.
    receipts: BTreeMap<(UserUuid, ConvId, ReceiptKind), Seq>,
    /// How full other shards' queues of the conversations this shard owns are.
    views: Views,
    /// Streams of this shard's users that another shard owns and whose queues fell in this
    /// input, with their authors: their levels go to their owners.
    fell: BTreeMap<Stream, UserUuid>,
    /// Messages this shard's users submitted to other shards, waiting for their verdicts
    /// (in memory only: a closed connection's client sends them again).
    submissions: Submissions,
    /// This shard's incarnation (its boot count) and the levels it measured in it: the
    /// stamps of its level reports.
    boot: u64,
    measured: u64,
}

impl Default for Handoffs {
    fn default() -> Self {
        Self::new(ShardPlace::single())
    }
}

impl Handoffs {
    fn new(place: ShardPlace) -> Self {
        Self {
            place,
            outbox: Outbox::new(place.me()),
            unapplied: Tally::default(),
            inbox: Inbox::new(place.me(), MAX_HELD),
            notices: Notices::new(place.me()),
            receipts: BTreeMap::new(),
            views: Views::default(),
            fell: BTreeMap::new(),
            submissions: Submissions::default(),
            boot: 0,
            measured: 0,
        }
    }

    /// Keeps `message` in the outbox row of `stream` (new, or read back at start), counted.
    fn push(&mut self, to: ShardId, stream: &Stream, (seq, prev): (Seq, Seq), message: Message) {
        let fill = charge(&message);
        let author = message.author.clone();
        if self.outbox.push(to, stream.clone(), seq, prev, message) {
            self.unapplied.add(stream, &author, fill);
        }
    }

    /// What the outbox holds, counted.
    pub(crate) fn unapplied_fill(&self) -> &Tally {
        &self.unapplied
    }

    /// How full other shards' queues are, as reported.
    pub(crate) fn views(&self) -> &Views {
        &self.views
    }

    /// When an outbox row is next due to be sent, or the question about other shards' levels
    /// (`None`: nothing waits).
    pub(crate) fn deadline(&self) -> Option<UnixMs> {
        let ask = self
            .views
            .next_ask(self.place.me(), self.place.map().shards());
        [
            self.outbox.next_deadline(),
            self.notices.next_deadline(),
            self.submissions.next_deadline(),
            ask,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Whether every other shard said how full its users' queues are since this core
    /// started (always, with one shard).
    pub(crate) fn levels_known(&self) -> bool {
        (self.views)
            .next_ask(self.place.me(), self.place.map().shards())
            .is_none()
    }

    /// Outbox rows and notices not yet taken by their destination.
    pub(crate) fn outbox_rows(&self) -> usize {
        self.outbox.len() + self.notices.len()
    }

    /// The last seq of `stream` applied here (`Seq(0)`: none).
    pub(crate) fn applied(&self, stream: &Stream) -> Seq {
        self.inbox.applied(stream)
    }

    /// Hand-offs held past a gap.
    pub(crate) fn held(&self) -> usize {
        self.inbox.held()
    }
}

impl State {
    /// Loads the outbox rows and inbox marks of shard `place` (eager tables): the outbox rows
    /// of the conversations it owns (unless `resume_outbox` is off: only a planted bug turns
    /// it off), the marks of its users' streams.
    pub(crate) fn load_handoffs(
        &mut self,
        snapshot: &Snapshot,
        (place, resume_outbox): (ShardPlace, bool),
    ) -> Result<(), StoreError> {
        let mut handoffs = Handoffs::new(place);
        let rows = |t: Table| snapshot.get(&t).into_iter().flat_map(|m| m.iter());
        let outbox = if resume_outbox {
            snapshot.get(&Table::Outbox)
        } else {
            None
        };
        for (k, v) in outbox.into_iter().flat_map(|m| m.iter()) {
            let r: OutboxRow = decode(Table::Outbox, k, v)?;
            // The rows of the conversations this shard owns.
            if place.map().owner_of([&r.recipient, &r.message.author]) != place.me() {
                continue;
            }
            let stream = Stream {
                recipient: r.recipient,
                conv: r.conv_id,
            };
            handoffs.push(ShardId(r.to), &stream, (r.seq, r.prev), r.message);
        }
        for (k, v) in rows(Table::InboxMarks) {
            let r: InboxMarkRow = decode(Table::InboxMarks, k, v)?;
            if place.elsewhere(&r.recipient).is_some() {
                continue;
            }
            let stream = Stream {
                recipient: r.recipient,
                conv: r.conv_id,
            };
            handoffs.inbox.restore(ShardId(r.owner), stream, r.through);
        }
        for (k, v) in rows(Table::Notices) {
            let r: NoticeRow = decode(Table::Notices, k, v)?;
            // The notices this shard decided: those for users of other shards.
            if notice_source(&r.notice, place) {
                let key = r.notice.key();
                handoffs
                    .notices
                    .restore(ShardId(r.to), key, r.version, r.notice);
            }
        }
        for (k, v) in rows(Table::ReceiptsTaken) {
            let r: ReceiptTakenRow = decode(Table::ReceiptsTaken, k, v)?;
            if place.elsewhere(&r.author).is_none() {
                handoffs
                    .receipts
                    .insert((r.author, r.conv_id, r.kind), r.seq);
            }
        }
        self.handoffs = handoffs;
        Ok(())
    }

    /// Whether a receipt notice of `kind` through `seq`, for `author` (a user of this shard)
    /// in `conv`, is news: above the highest taken before, which it becomes (written in this
    /// input's batch). One that is not came late, after a newer one overtook it on the way,
    /// and says nothing the author was not told.
    pub(crate) fn take_receipt(
        &mut self,
        author: &UserUuid,
        conv: &ConvId,
        kind: ReceiptKind,
        seq: Seq,
    ) -> bool {
        let key = (author.clone(), conv.clone(), kind);
        if self.handoffs.receipts.get(&key).is_some_and(|&s| s >= seq) {
            return false;
        }
        let row = ReceiptTakenRow {
            author: author.clone(),
            conv_id: conv.clone(),
            kind,
            seq,
        };
        self.record_keyed(
            Table::ReceiptsTaken,
            |k| write_receipt_taken_key(k, author, conv, kind),
            &row,
        );
        self.handoffs.receipts.insert(key, seq);
        true
    }

    /// This shard's side of the hand-off.
    pub(crate) fn handoffs(&self) -> &Handoffs {
        &self.handoffs
    }

    /// How full other shards' queues are, as reported (to take a report or ask again).
    pub(crate) fn handoffs_mut_views(&mut self) -> &mut Views {
        &mut self.handoffs.views
    }

    /// Writes the outbox row of message `seq` of `stream` for shard `to` (in the batch that
    /// stores the message and its seq) and holds it to be sent.
    pub(crate) fn hand_off(
        &mut self,
        to: ShardId,
        stream: &Stream,
        seq: Seq,
        prev: Seq,
        message: Message,
    ) {
        let row = OutboxRow {
            to: to.0,
            recipient: stream.recipient.clone(),
            conv_id: stream.conv.clone(),
            seq,
            prev,
            message,
        };
        self.record_keyed(
            Table::Outbox,
            |k| write_outbox_key(k, to.0, &row.recipient, &row.conv_id, seq),
            &row,
        );
        self.touched += 1;
        self.handoffs.push(to, stream, (seq, prev), row.message);
    }

    /// Keeps `notice` for shard `to` until it is taken (its row in this input's batch).
    pub(crate) fn put_notice(&mut self, to: ShardId, notice: Notice) {
        let key = notice.key();
        let version = self.handoffs.notices.put(to, key.clone(), notice.clone());
        let row = NoticeRow {
            to: to.0,
            version,
            notice,
        };
        self.record_keyed(Table::Notices, |k| write_notice_key(k, to.0, &key), &row);
        self.touched += 1;
    }

    /// The notices to send at `now`.
    pub(crate) fn poll_notices(&mut self, now: UnixMs) -> Vec<NoticeSent<NoticeKey, Notice>> {
        if self.handoffs.notices.is_empty() {
            return Vec::new();
        }
        self.touched += 1;
        self.handoffs.notices.poll(now)
    }

    /// Shard `t.from` took a notice: its row goes, unless a newer one replaced it.
    pub(crate) fn notice_taken(&mut self, t: &NoticeTaken<NoticeKey>) {
        if self.handoffs.notices.on_taken(&t.key, t.version) {
            self.batch
                .delete_row(Table::Notices, |k| write_notice_key(k, t.from.0, &t.key));
            self.touched += 1;
        }
    }

    /// Submission `s` was sent at `now`: a message is sent again until its verdict comes
    /// (`crate::handoff::Submissions`).
    pub(crate) fn submission_sent(&mut self, s: &Submission, now: UnixMs) -> Sent {
        let sent = self.handoffs.submissions.sent(s, now);
        if sent != Sent::NotKept {
            self.touched += 1;
        }
        sent
    }

    /// The verdict `reply` for a frame of connection `conn` came.
    pub(crate) fn submission_answered(&mut self, conn: u64, reply: &Reply) -> bool {
        let waited = self.handoffs.submissions.answered(conn, reply);
        if waited {
            self.touched += 1;
        }
        waited
    }

    /// Connection `conn` closed: its submissions are not sent again.
    pub(crate) fn submissions_closed(&mut self, conn: u64) {
        if !self.handoffs.submissions.is_empty() {
            self.handoffs.submissions.closed(conn);
            self.touched += 1;
        }
    }

    /// The submissions to send again at `now`.
    pub(crate) fn poll_submissions(&mut self, now: UnixMs) -> Vec<Submission> {
        if self.handoffs.submissions.is_empty() {
            return Vec::new();
        }
        self.touched += 1;
        self.handoffs.submissions.due(now)
    }

    /// The hand-offs to send at `now` (`crate::handoff::Outbox::poll`).
    pub(crate) fn poll_handoffs(&mut self, now: UnixMs) -> Vec<Handoff<Message>> {
        if self.handoffs.outbox.is_empty() {
            return Vec::new();
        }
        self.touched += 1;
        self.handoffs.outbox.poll(now)
    }

    /// Shard `a.from` applied `a.stream` through `a.through` (acknowledged at `now`): the
    /// outbox rows it covers are deleted, and its level taken with them. Returns how many.
    pub(crate) fn handoffs_applied(&mut self, a: &Applied, now: UnixMs) -> usize {
        let done = self.handoffs.outbox.on_applied(a);
        let h = &mut self.handoffs;
        for (_, m) in &done {
            h.unapplied.sub(&a.stream, &m.author, charge(m));
        }
        let author = done.first().map(|(_, m)| &m.author);
        h.views.report(&a.stream, author, a.level, now);
        for (seq, _) in &done {
            self.batch.delete_row(Table::Outbox, |k| {
                write_outbox_key(k, a.from.0, &a.stream.recipient, &a.stream.conv, *seq);
            });
        }
        if !done.is_empty() {
            self.touched += 1;
        }
        done.len()
    }

    /// What to do with hand-off `h` from another shard (`crate::handoff::Inbox::receive`).
    pub(crate) fn receive_handoff(
        &mut self,
        h: Handoff<Message>,
    ) -> Result<Received<Message>, Broken> {
        self.touched += 1;
        self.handoffs.inbox.receive(h)
    }

    /// `stream` of shard `owner` is applied through `through`: its mark is written in the
    /// batch that applies it. The acknowledgement for the owner; it may be released once the
    /// batch is durable, which the relay's outputs wait for.
    pub(crate) fn mark_applied(
        &mut self,
        owner: ShardId,
        stream: &Stream,
        through: Seq,
    ) -> Option<Applied> {
        let row = InboxMarkRow {
            owner: owner.0,
            recipient: stream.recipient.clone(),
            conv_id: stream.conv.clone(),
            through,
        };
        self.record_keyed(
            Table::InboxMarks,
            |k| write_inbox_mark_key(k, &row.recipient, &row.conv_id),
            &row,
        );
        let level = self.level(stream, None);
        let mut ack = self.handoffs.inbox.durable(stream, through)?;
        ack.level = level;
        Some(ack)
    }

    /// This shard starts its `boot`-th incarnation: its level reports are stamped with it.
    pub(crate) fn set_handoffs_boot(&mut self, boot: u64) {
        self.handoffs.boot = boot;
        self.handoffs.measured = 0;
    }

    /// A new stamp of a measurement of levels.
    fn stamp(&mut self) -> Stamp {
        self.handoffs.measured += 1;
        Stamp {
            boot: self.handoffs.boot,
            n: self.handoffs.measured,
        }
    }

    /// What this shard holds of `stream` (a stream of its user) and of its recipient's
    /// backlog, measured now (with `stamp`, or a new one).
    pub(crate) fn level(&mut self, stream: &Stream, stamp: Option<Stamp>) -> Level {
        let q = self.summary(&stream.recipient, &stream.conv);
        let r = self.backlog.of_recipient(&stream.recipient);
        Level {
            stream: Fill {
                msgs: q.msgs,
                bytes: q.bytes,
            },
            recipient: Fill {
                msgs: r.msgs as u64,
                bytes: r.bytes,
            },
            stamp: stamp.unwrap_or_else(|| self.stamp()),
        }
    }

    /// The queue of `recipient` from `from` in `conv` fell from `old` to `new`: if another
    /// shard owns the conversation, its level goes there after this input.
    pub(crate) fn note_fall(
        &mut self,
        (recipient, from, conv): (&UserUuid, &UserUuid, &ConvId),
        old: Fill,
        new: Fill,
    ) {
        let place = self.handoffs.place;
        if place.map().shards() == 1 || (new.msgs >= old.msgs && new.bytes >= old.bytes) {
            return;
        }
        // The recipient is this shard's: the conversation is another's only when its author
        // is the lower member and of another shard (no hash when the recipient is lower).
        if from < recipient && place.elsewhere(from).is_some() {
            let stream = Stream {
                recipient: recipient.clone(),
                conv: conv.clone(),
            };
            self.handoffs.fell.insert(stream, from.clone());
        }
    }

    /// The level reports of this input's falls, one per owner.
    pub(crate) fn take_falls(&mut self) -> Vec<Levels> {
        if self.handoffs.fell.is_empty() {
            return Vec::new();
        }
        let fell = std::mem::take(&mut self.handoffs.fell);
        let place = self.handoffs.place;
        let stamp = self.stamp();
        let mut reports: Vec<Levels> = Vec::new();
        for (stream, author) in fell {
            let owner = place.map().owner_of([&author, &stream.recipient]);
            let level = self.level(&stream, Some(stamp));
            let entry = (stream, Some(author), level);
            match reports.iter_mut().find(|r| r.to == owner) {
                Some(r) => r.streams.push(entry),
                None => reports.push(Levels {
                    from: place.me(),
                    to: owner,
                    streams: vec![entry],
                    complete: false,
                    stamp,
                }),
            }
        }
        reports
    }

    /// The answer to shard `to`'s question: the level of `stream`, or of every stream of this
    /// shard's users that `to` owns.
    pub(crate) fn levels_for(&mut self, to: ShardId, stream: Option<Stream>) -> Levels {
        let place = self.handoffs.place;
        let stamp = self.stamp();
        let streams = match stream {
            Some(s) => {
                let author = self.queued_from(&s.recipient, &s.conv);
                let level = self.level(&s, Some(stamp));
                vec![(s, author, level)]
            }
            None => {
                let owned: Vec<(Stream, UserUuid)> = self
                    .queued_streams()
                    .filter(|(s, from)| place.map().owner_of([&s.recipient, from]) == to)
                    .collect();
                owned
                    .into_iter()
                    .map(|(s, from)| {
                        let level = self.level(&s, Some(stamp));
                        (s, Some(from), level)
                    })
                    .collect()
            }
        };
        Levels {
            from: place.me(),
            to,
            streams,
            complete: true,
            stamp,
        }
    }
}

/// What a message counts against the queue bounds.
fn charge(m: &Message) -> Fill {
    Fill {
        msgs: 1,
        bytes: crate::limits::queued_message_bytes(m.id.as_str().len(), m.payload.len()),
    }
}

/// Whether shard `place` decided `notice`: a receipt at its reader's shard, a retraction at
/// its conversation's owner, a friendship at its pair's owner.
fn notice_source(notice: &Notice, place: ShardPlace) -> bool {
    let map = place.map();
    let source = match notice {
        Notice::Receipt { reader, .. } => map.of_user(reader),
        Notice::Retract {
            author, recipient, ..
        } => map.owner_of([author, recipient]),
        Notice::Contact { row, .. } => map.owner_of([&row.requester, &row.addressee]),
        Notice::Confirmed { .. } | Notice::Rebind { .. } => crate::handoff::REGISTRY_SHARD,
        Notice::Alias { user, .. } => map.of_user(user),
    };
    source == place.me()
}
