//! What crosses between shards (`crate::handoff`), held by the shard it belongs to: the outbox
//! of the messages this shard decided for users of other shards, and the inbox marks of the
//! streams other shards hand it. Each change is written to the batch of the input that makes
//! it: an outbox row with its message, a mark with the messages it applies, a row's delete
//! with the acknowledgement that ends it.

use wire::{Seq, UnixMs};

use crate::handoff::{
    Applied, Broken, Handoff, Inbox, MAX_HELD, Message, Notice, NoticeKey, NoticeSent, NoticeTaken,
    Notices, Outbox, Received, ShardId, ShardPlace, Stream,
};
use crate::rows::{
    InboxMarkRow, NoticeRow, OutboxRow, decode, write_inbox_mark_key, write_notice_key,
    write_outbox_key,
};
use crate::state::State;
use crate::store::{Snapshot, StoreError, Table};

/// This shard's side of the hand-off.
#[derive(Debug)]
pub(crate) struct Handoffs {
    outbox: Outbox<Message>,
    inbox: Inbox<Message>,
    notices: Notices<NoticeKey, Notice>,
}

impl Default for Handoffs {
    fn default() -> Self {
        Self::new(ShardPlace::single())
    }
}

impl Handoffs {
    fn new(place: ShardPlace) -> Self {
        Self {
            outbox: Outbox::new(place.me()),
            inbox: Inbox::new(place.me(), MAX_HELD),
            notices: Notices::new(place.me()),
        }
    }

    /// When an outbox row is next due to be sent (`None`: nothing waits).
    pub(crate) fn deadline(&self) -> Option<UnixMs> {
        [self.outbox.next_deadline(), self.notices.next_deadline()]
            .into_iter()
            .flatten()
            .min()
    }

    /// Outbox rows and notices not yet taken by their destination.
    pub(crate) fn outbox_rows(&self) -> usize {
        self.outbox.len() + self.notices.len()
    }

    /// Messages of `stream` handed to its recipient's shard and not yet applied there.
    pub(crate) fn unapplied(&self, stream: &Stream) -> usize {
        self.outbox.stream_len(stream)
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
    /// of the conversations it owns, the marks of its users' streams.
    pub(crate) fn load_handoffs(
        &mut self,
        snapshot: &Snapshot,
        place: ShardPlace,
    ) -> Result<(), StoreError> {
        let mut handoffs = Handoffs::new(place);
        let rows = |t: Table| snapshot.get(&t).into_iter().flat_map(|m| m.iter());
        for (k, v) in rows(Table::Outbox) {
            let r: OutboxRow = decode(Table::Outbox, k, v)?;
            // The rows of the conversations this shard owns.
            if place.map().owner_of([&r.recipient, &r.message.author]) != place.me() {
                continue;
            }
            let stream = Stream {
                recipient: r.recipient,
                conv: r.conv_id,
            };
            handoffs
                .outbox
                .push(ShardId(r.to), stream, r.seq, r.prev, r.message);
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
        self.handoffs = handoffs;
        Ok(())
    }

    /// This shard's side of the hand-off.
    pub(crate) fn handoffs(&self) -> &Handoffs {
        &self.handoffs
    }

    /// Writes the outbox row of message `seq` of `stream` for shard `to` (in the batch that
    /// stores the message and its seq) and holds it to be sent.
    pub(crate) fn hand_off(
        &mut self,
        to: ShardId,
        stream: Stream,
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
        self.handoffs
            .outbox
            .push(to, stream, seq, prev, row.message);
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

    /// The hand-offs to send at `now` (`crate::handoff::Outbox::poll`).
    pub(crate) fn poll_handoffs(&mut self, now: UnixMs) -> Vec<Handoff<Message>> {
        if self.handoffs.outbox.is_empty() {
            return Vec::new();
        }
        self.touched += 1;
        self.handoffs.outbox.poll(now)
    }

    /// Shard `a.from` applied `a.stream` through `a.through`: the outbox rows it covers are
    /// deleted. Returns how many.
    pub(crate) fn handoffs_applied(&mut self, a: &Applied) -> usize {
        let done = self.handoffs.outbox.on_applied(a);
        for seq in &done {
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
        self.handoffs.inbox.durable(stream, through)
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
