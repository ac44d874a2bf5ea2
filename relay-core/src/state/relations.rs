//! Conversations, friendships and receipt marks written on the working state: each change
//! cached and recorded in the input's batch (see `crate::relations` for the caches).

use crate::handoff::ShardPlace;
use crate::planted::planted;
use crate::relations::write_contact_key;
use crate::rows::{
    ConversationRow, FriendshipRow, ReceiptKind, ReceiptMarkRow, push_conversation, write_mark_key,
};
use crate::state::State;
use crate::store::Table;
use wire::{ConvId, Seq, UserUuid};

/// The state's writes of conversations and friendships.
impl State {
    /// The highest seq `reader` acknowledged with a `kind` receipt in `conv` (whose marks are
    /// in memory: [`read_marks`](crate::relations::read_marks); 0 when none).
    pub(crate) fn mark(&self, conv: &ConvId, reader: &UserUuid, kind: ReceiptKind) -> Seq {
        self.relations.mark(conv, reader, kind)
    }

    /// Records that `reader` acknowledged `conv` up to `seq` with a `kind` receipt (the
    /// conversation's marks are in memory, where it is written too).
    pub(crate) fn put_mark(
        &mut self,
        conv: &ConvId,
        reader: &UserUuid,
        kind: ReceiptKind,
        seq: Seq,
    ) {
        let row = ReceiptMarkRow {
            conv_id: conv.clone(),
            reader: reader.clone(),
            kind,
            seq,
        };
        self.record_keyed(
            Table::ReceiptMarks,
            |k| write_mark_key(k, conv, reader, kind),
            &row,
        );
        self.relations.set_mark(conv, reader, kind, seq);
    }

    /// Writes friendship `f` at its pair's owner shard, `place`: its record by id, and its row
    /// in the contacts of each member of this shard (another shard's member gets it from a
    /// notice, `crate::contacts`). Those members' contacts must be in memory
    /// ([`with_contacts`](crate::relations::with_contacts)), where it is written too.
    pub(crate) fn put_friendship(&mut self, f: &FriendshipRow, place: ShardPlace) {
        self.record(Table::Friendships, &format!("{:020}", f.id.get()), f);
        for member in [&f.requester, &f.addressee] {
            if place.elsewhere(member).is_none() {
                self.put_contact(member, f);
            }
        }
    }

    /// Writes friendship `f` into `member`'s contacts (in memory first:
    /// [`with_contacts`](crate::relations::with_contacts)).
    pub(crate) fn put_contact(&mut self, member: &UserUuid, f: &FriendshipRow) {
        self.record_keyed(Table::Contacts, |k| write_contact_key(k, member, f.id), f);
        let written = self.relations.put_friendship(member, f);
        debug_assert!(
            written,
            "a friendship written before its member's contacts were read"
        );
    }

    /// Writes the new conversation `c` (kept in memory until its batch is durable).
    pub(crate) fn put_conversation(&mut self, c: ConversationRow) {
        push_conversation(&mut self.batch, &c, true);
        self.relations.insert_new(c);
    }

    /// Assigns the next seq of `conv` (in memory: [`with_conversation`](crate::relations::with_conversation)) to a message written
    /// by `author` and records the conversation with its new counters, in the batch that stores
    /// the message, with the stream's `prev` when the message is `handed` to another shard
    /// ([`Relations::next_seq`](crate::relations::Relations::next_seq)). `None` when `conv` is
    /// not in memory or `author` is not a member.
    pub(crate) fn next_seq(
        &mut self,
        conv: &ConvId,
        author: &UserUuid,
        handed: bool,
    ) -> Option<(Seq, Seq)> {
        let counter_stored = !planted!(self, SeqNotPersisted);
        let batch = &mut self.batch;
        self.relations.next_seq(conv, author, handed, |c| {
            push_conversation(batch, c, counter_stored);
        })
    }
}
