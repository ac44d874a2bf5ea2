//! The queues on the working state: reading a queue into the cache, writing and deleting
//! queued messages, the queue index and the backlog counts kept exact, a queue's expiry
//! (see `crate::queue` for the cache, `crate::queue_index` for the index).

use crate::handoff::{Fill, Stream};
use crate::limits;
use crate::planted::planted;
use crate::queue::{Gap, Queue, Queued, read_gap};
use crate::queue_index::{QueueEntry, record_entry};
use crate::rows::{MessageRecord, MessageRow, QueueSummary, decode, meta, write_message_key};
use crate::state::State;
use crate::store::{StoreError, StoreRead, Table};
use std::collections::BTreeMap;
use wire::{ConvId, Seq, UnixMs, UserUuid};

/// The queues' part of the relay's state: their index, reads, writes and expiry.
impl State {
    /// Counts every queue into the backlog, from the queue index (at start, after
    /// [`State::summarise_stored_queues`] if it was needed).
    pub(crate) fn index_queues(&mut self) {
        for (to, _, e) in self.queued.iter() {
            self.backlog.add(to, &e.from, e.summary.usage());
        }
    }

    /// Builds the queue index from the stored messages (one scan of the table, in pages of
    /// `page_rows` rows ([`limits::SUMMARISE_PAGE_ROWS`]), keeping only the summaries) and
    /// records its rows with their expiries, plus [`meta::QUEUE_INDEX`] and
    /// [`meta::QUEUE_EXPIRY_TTL`]: what the first start of a store written
    /// before the index existed needs, once.
    pub(crate) fn summarise_stored_queues(
        &mut self,
        reader: &mut dyn StoreRead,
        page_rows: usize,
    ) -> Result<(), StoreError> {
        let mut found: BTreeMap<(UserUuid, ConvId), QueueEntry> = BTreeMap::new();
        let mut after: Option<String> = None;
        loop {
            let page = reader.scan_page(Table::Messages, after.as_deref(), page_rows.max(1))?;
            let Some((last, _)) = page.last() else {
                break;
            };
            after = Some(last.clone());
            for (key, value) in &page {
                let m: MessageRow = decode(Table::Messages, key, value)?;
                let corrupt = || {
                    StoreError::Backend(format!(
                        "corrupt row {key:?} in table {}: not a message between the members \
                         of a conversation",
                        Table::Messages.name()
                    ))
                };
                if m.from == m.recipient {
                    return Err(corrupt());
                }
                // Keys are unique per (recipient, conversation, seq): each row is one message.
                let e = found
                    .entry((m.recipient, m.conv_id))
                    .or_insert_with(|| QueueEntry {
                        from: m.from.clone(),
                        summary: QueueSummary::default(),
                    });
                if e.from != m.from {
                    return Err(corrupt());
                }
                let s = &mut e.summary;
                if s.msgs == 0 || m.at < s.oldest {
                    s.oldest = m.at;
                }
                s.msgs += 1;
                s.bytes += limits::queued_message_bytes(m.id.as_str().len(), m.payload.len());
            }
        }
        let ttl = self.queues.ttl_ms();
        for ((to, conv), e) in found {
            record_entry(&mut self.batch, &to, &conv, Some(&e), ttl);
            self.queued.set(&to, &conv, Some(e));
        }
        self.put_meta(meta::QUEUE_INDEX, "1".to_owned());
        // Every row was just written with its expiry under this TTL: no re-timing to follow.
        self.put_meta(meta::QUEUE_EXPIRY_TTL, ttl.to_string());
        Ok(())
    }

    /// What is queued for `recipient` in `conv` (zero when nothing is).
    #[inline]
    pub(crate) fn summary(&self, recipient: &UserUuid, conv: &ConvId) -> QueueSummary {
        self.queued
            .get(recipient, conv)
            .map(|e| e.summary)
            .unwrap_or_default()
    }

    /// Who wrote what is queued for `recipient` in `conv` (`None` when nothing is).
    pub(crate) fn queued_from(&self, recipient: &UserUuid, conv: &ConvId) -> Option<UserUuid> {
        self.queued.get(recipient, conv).map(|e| e.from.clone())
    }

    /// Every stream with something queued, with who wrote it.
    pub(crate) fn queued_streams(&self) -> impl Iterator<Item = (Stream, UserUuid)> + '_ {
        self.queued.iter().map(|(to, conv, e)| {
            let stream = Stream {
                recipient: to.clone(),
                conv: conv.clone(),
            };
            (stream, e.from.clone())
        })
    }

    /// Reads the next part of the gap of the queue of `recipient` in `conv` into memory (a queue
    /// not in memory is all gap): `page` rows at most, or the rest of it (`None`), laid under
    /// the tail in memory, whose commit may still be in flight. Nothing is read when the queue
    /// is in memory whole, or empty (an empty queue is created in memory by the message that
    /// next joins it, [`State::put_message`]). Once the queue is whole, should its rows
    /// disagree with its index entry, the rows win: the entry and the backlog are corrected
    /// (and the row recorded) and counted in `stats`. `Err`: the read failed; nothing changed.
    pub(crate) fn load_queue_part(
        &mut self,
        super::ReadCx { reader, stats }: super::ReadCx<'_>,
        recipient: &UserUuid,
        conv: &ConvId,
        page: Option<usize>,
    ) -> Result<(), StoreError> {
        let key = (recipient.clone(), conv.clone());
        let Some(entry) = self.queued.get(recipient, conv) else {
            // Nothing to read, nor to keep: a message for it creates the queue in memory.
            return Ok(());
        };
        let (stored, from) = (entry.summary, entry.from.clone());
        let (range, tail) = match self.queues.peek(&key) {
            None => ((None, None), false),
            Some(q) => match q.gap_range() {
                None => return Ok(()),
                Some(range) => (range, q.is_tail() && !q.is_empty()),
            },
        };
        let (rows, more) = if planted!(self, EvictedQueueForgotten) {
            // PLANTED BUG (test-only): the stored queue is not read back.
            (Vec::new(), false)
        } else {
            let read = read_gap(reader, (recipient, conv, &from), range, page);
            let read = read.inspect_err(|_| {
                stats.queue_read_failures += 1;
            })?;
            stats.queues_read += 1;
            read
        };
        if tail {
            // The tail's messages may be newer than the read (their commit still in flight).
            probes::probe!("queue:tail-merged");
        }
        if more {
            probes::probe!("queue:page-read");
        }
        if !self.queues.merge(&key, stored, rows, more) {
            return Ok(());
        }
        let Some(found) = self.queues.peek(&key).map(Queue::summary) else {
            return Ok(());
        };
        if found != stored && !planted!(self, EvictedQueueForgotten) {
            // The gap counted what the entry said, and what it is has now been read; the
            // oldest of a gap is a bound, the counts are not.
            if (found.msgs, found.bytes) != (stored.msgs, stored.bytes) {
                stats.queue_summaries_repaired += 1;
            }
            self.set_summary(recipient, conv, &from, stored, found);
        }
        Ok(())
    }

    /// The stored messages of the queue of `recipient` in `conv` that are not in memory, while
    /// there are any (all of them, when the queue is not in memory).
    pub(crate) fn queue_gap(&self, recipient: &UserUuid, conv: &ConvId) -> Option<Gap> {
        let entry = self.queued.get(recipient, conv)?;
        match self.queues.peek(&(recipient.clone(), conv.clone())) {
            Some(q) => q.gap().filter(|g| g.msgs() > 0),
            None => Some(Gap::of(entry.summary)),
        }
    }

    /// Rows per page of the gap of the queue of `recipient` in `conv`: about `bytes` of its
    /// messages (at their mean size), at least one, at most `msgs`.
    pub(crate) fn page_rows(
        &self,
        recipient: &UserUuid,
        conv: &ConvId,
        (msgs, bytes): (usize, usize),
    ) -> usize {
        let gap = self.queue_gap(recipient, conv);
        let mean = gap
            .and_then(|g| g.bytes().checked_div(g.msgs()))
            .unwrap_or(1)
            .max(1);
        let rows = (bytes as u64 / mean).max(1);
        usize::try_from(rows)
            .unwrap_or(usize::MAX)
            .clamp(1, msgs.max(1))
    }

    /// Sets what the queue `(recipient, conv)` of messages from `from` holds, from `old` to
    /// `new`: the index entry (and its row) and the backlog.
    fn set_summary(
        &mut self,
        recipient: &UserUuid,
        conv: &ConvId,
        from: &UserUuid,
        old: QueueSummary,
        new: QueueSummary,
    ) {
        self.backlog
            .replace(recipient, from, old.usage(), new.usage());
        let fill = |q: QueueSummary| Fill {
            msgs: q.msgs,
            bytes: q.bytes,
        };
        self.note_fall((recipient, from, conv), fill(old), fill(new));
        let entry = (new.msgs > 0).then(|| QueueEntry {
            from: from.clone(),
            summary: new,
        });
        let ttl = self.queues.ttl_ms();
        if let Some(expires_at) =
            record_entry(&mut self.batch, recipient, conv, entry.as_ref(), ttl)
        {
            self.queues.sweep_mut().wrote(expires_at);
        }
        self.queued.set(recipient, conv, entry);
    }

    /// Rewrites every queue's index row with its expiry under the relay's TTL, and records
    /// that TTL ([`meta::QUEUE_EXPIRY_TTL`]): what a start needs when the rows were written
    /// under another TTL, or without an expiry (a store from before queues had one).
    pub(crate) fn retime_queues(&mut self) {
        let ttl = self.queues.ttl_ms();
        for (to, conv, e) in self.queued.iter() {
            record_entry(&mut self.batch, to, conv, Some(e), ttl);
        }
        self.put_meta(meta::QUEUE_EXPIRY_TTL, ttl.to_string());
    }

    /// The bytes queued for `recipient` in `conv` (by its index entry) when its oldest are
    /// stored but not in memory: what [`State::load_queue_part`] would read. `None`: nothing
    /// to read.
    pub(crate) fn queue_to_read(&self, recipient: &UserUuid, conv: &ConvId) -> Option<u64> {
        let entry = self.queued.get(recipient, conv)?;
        let key = (recipient.clone(), conv.clone());
        (!self.queues.is_loaded(&key)).then_some(entry.summary.bytes)
    }

    /// The messages queued for `recipient` in `conv`, by seq; `None` when there are none, or
    /// when its oldest are not in memory (callers that need them [`State::load_queue_part`] first;
    /// of a queue with a gap, only the part in memory).
    pub(crate) fn queue(&self, recipient: &UserUuid, conv: &ConvId) -> Option<&Queue> {
        self.queued.get(recipient, conv)?;
        let q = self.queues.get(&(recipient.clone(), conv.clone()));
        debug_assert!(q.is_some(), "a queue used before it was read");
        q.filter(|q| !q.is_empty())
    }

    /// Records the queue `(recipient, conv)` after messages left it (in memory), with its new
    /// summary, and keeps the backlog in step.
    fn queue_changed(&mut self, recipient: &UserUuid, conv: &ConvId) {
        let Some((from, old)) = self
            .queued
            .get(recipient, conv)
            .map(|e| (e.from.clone(), e.summary))
        else {
            return;
        };
        let Some(q) = self.queues.get(&(recipient.clone(), conv.clone())) else {
            return;
        };
        let new = q.summary();
        self.set_summary(recipient, conv, &from, old, new);
    }

    /// Stores and queues `m`, written by `author` in `conv` for `recipient`, with the queue's
    /// new index entry: in the queue in memory, or (when its stored messages are not in
    /// memory: [`State::load_queue_part`] reads them) in its tail.
    /// (The conversation's counters are the caller's: [`State::next_seq`].)
    pub(crate) fn put_message(
        &mut self,
        conv: &ConvId,
        author: &UserUuid,
        recipient: &UserUuid,
        m: Queued,
    ) {
        let record = MessageRecord {
            recipient,
            conv_id: conv,
            seq: m.seq,
            id: &m.id,
            from: author,
            crypto_v: m.crypto_v,
            payload: &m.payload,
            at: m.at,
        };
        self.batch.put_row(
            Table::Messages,
            |k| write_message_key(k, recipient, conv, m.seq),
            |out| record.write_json(out),
        );
        let qkey = (recipient.clone(), conv.clone());
        let old = self.summary(recipient, conv);
        let mut summary = old;
        if summary.msgs == 0 && !self.queues.is_loaded(&qkey) {
            self.queues.insert_empty(&qkey);
        }
        let usage = m.usage();
        let at = m.at;
        // A queue not in memory whole is not read for this: the message joins its tail (its
        // seq is above every stored one's), and the index entry counts it.
        let replaced = self.queues.append(&qkey, m, old);
        if summary.msgs == 0 || at < summary.oldest {
            summary.oldest = at;
        }
        summary.msgs += 1;
        summary.bytes += usage.bytes;
        if let Some(old) = replaced {
            // A seq is never reused (a planted defect aside): the replaced copy leaves.
            summary.msgs -= 1;
            summary.bytes -= old.charge();
        }
        self.set_summary(recipient, conv, author, old, summary);
    }

    /// Deletes the messages of the queue `(recipient, conv)` (in memory, if it holds any) whose
    /// TTL ended at `now`, with the queue's new index entry (and expiry). Returns how many.
    pub(crate) fn expire_queue(
        &mut self,
        now: UnixMs,
        recipient: &UserUuid,
        conv: &ConvId,
    ) -> usize {
        let ttl = self.queues.ttl_ms();
        let Some(q) = self.queue(recipient, conv) else {
            return 0;
        };
        let expired: Vec<Seq> = q
            .iter()
            .filter(|m| now >= m.at.plus_ms(ttl))
            .map(|m| m.seq)
            .collect();
        if expired.is_empty() {
            return 0;
        }
        let n = expired.len();
        let key = (recipient.clone(), conv.clone());
        let batch = &mut self.batch;
        self.queues.write(&key, |q| {
            for seq in expired {
                q.remove(seq);
                batch.delete_row(Table::Messages, |k| {
                    write_message_key(k, recipient, conv, seq);
                });
            }
        });
        self.queue_changed(recipient, conv);
        n
    }

    /// Takes message `seq` out of `recipient`'s queue of `conv` (memory only; the summary is
    /// the caller's, [`State::queue_changed`]).
    fn unqueue(&mut self, recipient: &UserUuid, conv: &ConvId, seq: Seq) -> bool {
        let key = (recipient.clone(), conv.clone());
        self.queues
            .write(&key, |q| q.remove(seq))
            .flatten()
            .is_some()
    }

    /// Drops the still-queued copy of a retracted message (its queue is in memory).
    pub(crate) fn drop_retracted(&mut self, recipient: &UserUuid, conv: &ConvId, seq: Seq) -> bool {
        let removed = self.unqueue(recipient, conv, seq);
        if removed {
            // PLANTED BUG (test-only) when `RetractDropNotPersisted`: the copy leaves the
            // queue in memory only; a restart brings it back.
            if !planted!(self, RetractDropNotPersisted) {
                self.batch.delete_row(Table::Messages, |k| {
                    write_message_key(k, recipient, conv, seq);
                });
            }
            self.queue_changed(recipient, conv);
        }
        removed
    }

    /// Deletes every message queued for `recipient` in `conv` (in memory) with seq <= `upto`.
    pub(crate) fn delete_messages_upto(&mut self, recipient: &UserUuid, conv: &ConvId, upto: Seq) {
        let key = (recipient.clone(), conv.clone());
        if self
            .queues
            .get(&key)
            .is_none_or(|q| q.iter().next().is_none_or(|m| m.seq > upto))
        {
            return;
        }
        // PLANTED BUG (test-only) when `ReceiptDeleteNotPersisted`: acknowledged messages
        // leave the queue in memory only; a restart queues them again.
        let persist = !planted!(self, ReceiptDeleteNotPersisted);
        let batch = &mut self.batch;
        self.queues.write(&key, |q| {
            while let Some(m) = q.pop_upto(upto) {
                if persist {
                    batch.delete_row(Table::Messages, |k| {
                        write_message_key(k, recipient, conv, m.seq);
                    });
                }
            }
        });
        self.queue_changed(recipient, conv);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use wire::{ConvId, MessageId, Seq, UnixMs, UserUuid};

    use super::*;
    use crate::rows::{MessageRow, meta, write_message_key};

    /// The one-time summarising start gives the same summaries whatever its page size, and the
    /// same as the queues the rows make.
    #[test]
    fn stored_queues_summarise_the_same_in_pages_of_any_size() {
        use crate::store::{MemoryStore, Store as _};
        let user = |n: u32| UserUuid::parse(&format!("00000000-0000-4000-8000-{n:012}")).unwrap();
        let conv = |n: u32| ConvId::parse(&format!("c-{n}")).unwrap();
        let convs = [(conv(1), [user(1), user(2)]), (conv(2), [user(1), user(3)])];
        // (conversation, recipient index, seq, at, payload bytes)
        let rows = [
            (0, 1, 1, 50, 10),
            (0, 1, 2, 20, 300),
            (0, 1, 3, 90, 0),
            (0, 0, 4, 70, 5),
            (0, 0, 5, 60, 7),
            (1, 1, 1, 40, 64),
            (1, 1, 2, 30, 1),
        ];
        let mut store = MemoryStore::new();
        let mut batch = crate::store::Batch::new();
        let mut want: BTreeMap<(UserUuid, ConvId), Queue> = BTreeMap::new();
        for &(c, r, seq, at, len) in &rows {
            let (id, members) = &convs[c];
            let m = MessageRow {
                recipient: members[r].clone(),
                conv_id: id.clone(),
                seq: Seq(seq),
                id: MessageId::parse(&format!("m-{c}-{seq}")).unwrap(),
                from: members[1 - r].clone(),
                crypto_v: Some(1),
                payload: "A".repeat(len).into(),
                at: UnixMs(at),
            };
            batch.put_row(
                Table::Messages,
                |k| write_message_key(k, &m.recipient, &m.conv_id, m.seq),
                |v| serde_json::to_writer(v, &m).unwrap(),
            );
            want.entry((m.recipient, m.conv_id))
                .or_default()
                .insert(Queued {
                    seq: m.seq,
                    id: m.id,
                    crypto_v: m.crypto_v,
                    payload: m.payload,
                    at: m.at,
                });
        }
        store.commit(&batch).unwrap();
        for page_rows in [1, 2, 3, 10_000] {
            let mut state = State::default();
            let mut reader = store.reader().unwrap();
            state
                .summarise_stored_queues(&mut *reader, page_rows)
                .unwrap();
            for (id, members) in &convs {
                for m in members {
                    let expected = want
                        .get(&(m.clone(), id.clone()))
                        .map(Queue::summary)
                        .unwrap_or_default();
                    assert_eq!(state.summary(m, id), expected, "page {page_rows}");
                    let other = members.iter().find(|o| *o != m).unwrap();
                    if expected.msgs > 0 {
                        assert_eq!(state.queued.get(m, id).map(|e| &e.from), Some(other));
                    }
                }
            }
            assert!(state.meta.contains_key(meta::QUEUE_INDEX));
        }
    }
}
