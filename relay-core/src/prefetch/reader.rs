//! The readers a rule reads through ([`Reader`]): the relay's own ([`Inline`], counted) or the
//! rows read ahead ([`Ahead`]), which answer a frame's attempt and record its first miss.

use std::collections::BTreeMap;

use super::{ReadOp, ReadValue};
use crate::store::{Expiries, Rows, StoreError, StoreRead, Table};

/// Rows read ahead, which answer a parked frame's reads ([`Reader`]); the first read they
/// cannot answer is recorded.
#[derive(Debug, Default)]
pub(crate) struct Ahead {
    rows: BTreeMap<ReadOp, Held>,
    /// Each prefix of a held [`ReadOp::ScanPrefixes`], with that read: it answers the scan of
    /// that prefix alone.
    within: BTreeMap<(Table, String), ReadOp>,
    /// The first read of the current attempt that no row answered.
    missed: Option<ReadOp>,
    /// Estimated heap of `rows`.
    bytes: usize,
}

/// Where the rows of `prefix` are among `rows` of a [`ReadOp::ScanPrefixes`] (in key order: its
/// prefixes are sorted).
fn rows_of(rows: &Rows, prefix: &str) -> std::ops::Range<usize> {
    let start = rows.partition_point(|(k, _)| k.as_str() < prefix);
    let len = rows[start..]
        .iter()
        .take_while(|(k, _)| k.starts_with(prefix))
        .count();
    start..start + len
}

/// Writes the row `key` (`value`: its new value; `None`: deleted) into `rows`, in key order.
fn write_row(rows: &mut Rows, key: &str, value: Option<&[u8]>) {
    match (rows.binary_search_by(|(k, _)| k.as_str().cmp(key)), value) {
        (Ok(i), Some(v)) => v.clone_into(&mut rows[i].1),
        (Ok(i), None) => {
            rows.remove(i);
        }
        (Err(i), Some(v)) => rows.insert(i, (key.to_owned(), v.to_vec())),
        (Err(_), None) => {}
    }
}

/// A read's result, kept while frames that waited for it may run again.
#[derive(Debug)]
struct Held {
    result: Result<ReadValue, StoreError>,
    /// Frames parked on this read whose run is not over.
    holders: usize,
}

impl Ahead {
    /// The answer to `op` from the rows read ahead; a miss is recorded (the first of the
    /// attempt) and answered with an error.
    pub(super) fn answer(&mut self, op: ReadOp) -> Result<ReadValue, StoreError> {
        if let Some(held) = self.rows.get(&op) {
            if held.result.is_ok() {
                return held.result.clone();
            }
            // A failed read answers one frame (refused as for a failed read); any other frame
            // that waited for it reads again.
            if let Some(failed) = self.remove(&op) {
                return failed.result;
            }
        }
        if let Some(answer) = self.answer_within(&op) {
            return answer;
        }
        if self.missed.is_none() {
            self.missed = Some(op);
        }
        Err(not_read_ahead())
    }

    /// The answer to a whole-prefix scan from a held read of several prefixes that has it.
    fn answer_within(&mut self, op: &ReadOp) -> Option<Result<ReadValue, StoreError>> {
        let ReadOp::ScanPrefix {
            table,
            prefix,
            max: None,
        } = op
        else {
            return None;
        };
        let many = self.within.get(&(*table, prefix.clone()))?.clone();
        match &self.rows.get(&many)?.result {
            Ok(ReadValue::Rows(rows)) => {
                let mine = rows[rows_of(rows, prefix)].to_vec();
                Some(Ok(ReadValue::Rows(mine)))
            }
            Ok(_) => Some(Err(mismatch())),
            // As for any failed read: it answers once.
            Err(_) => self.remove(&many).map(|failed| failed.result),
        }
    }

    /// The held read of several prefixes `op` no longer answers for `prefix` (its rows are
    /// dropped), only for its other prefixes.
    fn narrow(&mut self, op: &ReadOp, table: Table, prefix: &str) {
        let key = (table, prefix.to_owned());
        if self.within.get(&key) != Some(op) {
            // Narrowed already (each of the queue's writes comes here): nothing left to drop.
            return;
        }
        self.within.remove(&key);
        let Some(held) = self.rows.get_mut(op) else {
            return;
        };
        let before = held_bytes(held);
        if let Ok(ReadValue::Rows(rows)) = &mut held.result {
            let mine = rows_of(rows, prefix);
            rows.drain(mine);
        }
        self.bytes = self.bytes - before + held_bytes(held);
    }

    /// Takes `op`'s result out, with what it weighed and the prefixes it answered.
    fn remove(&mut self, op: &ReadOp) -> Option<Held> {
        let held = self.rows.remove(op)?;
        self.bytes -= held_bytes(&held);
        if let ReadOp::ScanPrefixes { table, prefixes } = op {
            for p in prefixes.iter() {
                let key = (*table, p.clone());
                if self.within.get(&key) == Some(op) {
                    self.within.remove(&key);
                }
            }
        }
        Some(held)
    }

    /// Keeps the result of `op` for the `holders` frames that waited for it.
    pub(super) fn hold(
        &mut self,
        op: ReadOp,
        result: Result<ReadValue, StoreError>,
        holders: usize,
    ) {
        let held = Held { result, holders };
        let _ = self.remove(&op);
        self.bytes += held_bytes(&held);
        if let ReadOp::ScanPrefixes { table, prefixes } = &op {
            for p in prefixes.iter() {
                self.within.insert((*table, p.clone()), op.clone());
            }
        }
        self.rows.insert(op, held);
    }

    /// Drops every row read that a write of `key` of `table` may have changed.
    pub(super) fn drop_covering(&mut self, table: Table, key: Option<&str>) {
        for op in self.covering(table, key) {
            self.drop_one(&op, table, key);
        }
    }

    /// The reads held that cover the row `key` of `table` (every row, for `None`).
    fn covering(&self, table: Table, key: Option<&str>) -> Vec<ReadOp> {
        (self.rows.keys())
            .filter(|op| op.covers(table, key))
            .cloned()
            .collect()
    }

    /// Drops what `op` read that a write of `key` of `table` may have changed.
    fn drop_one(&mut self, op: &ReadOp, table: Table, key: Option<&str>) {
        if let (ReadOp::ScanPrefixes { prefixes, .. }, Some(key)) = (op, key)
            && let Some(prefix) = super::read::covering_prefix(prefixes, key)
        {
            // Only that prefix's rows are stale: the others still answer their scans.
            self.narrow(op, table, prefix);
            return;
        }
        let _ = self.remove(op);
    }

    /// The relay wrote the row `key` of `table` (`value`: its new value; `None`: deleted).
    /// A row read (`Get`) or a whole scan (`ScanPrefix` without a bound) that holds it takes
    /// the write in, and so answers what the store holds once the write is durable (the read
    /// was not stale when it came back, and only this shard writes its rows); any other read
    /// that covers it (a bounded scan or page, whose bound the write may move; a failed read)
    /// is dropped, to be read again. A hub's rows, written all the time, would otherwise be
    /// read again and again by a frame that needs several reads.
    pub(super) fn written(&mut self, table: Table, key: &str, value: Option<&[u8]>) {
        for op in self.covering(table, Some(key)) {
            let Some(held) = self.rows.get_mut(&op) else {
                continue;
            };
            let before = held_bytes(held);
            let taken = match (&op, &mut held.result) {
                (ReadOp::Get { .. }, Ok(ReadValue::Row(row))) => {
                    *row = value.map(<[u8]>::to_vec);
                    true
                }
                (ReadOp::ScanPrefix { max: None, .. }, Ok(ReadValue::Rows(rows))) => {
                    write_row(rows, key, value);
                    true
                }
                _ => false,
            };
            if taken {
                let after = held_bytes(held);
                self.bytes = self.bytes - before + after;
            } else {
                self.drop_one(&op, table, Some(key));
            }
        }
    }

    /// Whether no row is held.
    pub(super) fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Estimated heap of the rows held.
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    /// The read the attempt that just ended could not make, if any (and forgets it).
    pub(super) fn take_miss(&mut self) -> Option<ReadOp> {
        self.missed.take()
    }

    /// One frame that held `op` ran: the row goes once none holds it.
    pub(super) fn release(&mut self, op: &ReadOp) {
        if let Some(held) = self.rows.get_mut(op) {
            held.holders = held.holders.saturating_sub(1);
            if held.holders == 0 {
                let _ = self.remove(op);
            }
        }
    }
}

fn held_bytes(h: &Held) -> usize {
    h.result.as_ref().map_or(0, ReadValue::bytes)
}

/// A result of another kind than its read's (a shell that answered the wrong request).
fn mismatch() -> StoreError {
    StoreError::Backend("a read was answered with another read's kind of result".into())
}

/// The relay's own reader, counting the reads made on the relay's task ([`Reader::Inline`]).
#[derive(Debug)]
pub(crate) struct Inline {
    reader: Box<dyn StoreRead>,
    reads: u64,
}

impl Inline {
    pub(crate) fn new(reader: Box<dyn StoreRead>) -> Self {
        Self { reader, reads: 0 }
    }

    /// Reads made through it.
    pub(crate) fn reads(&self) -> u64 {
        self.reads
    }

    fn run(&mut self, op: &ReadOp) -> Result<ReadValue, StoreError> {
        self.reads += 1;
        op.run(&mut *self.reader)
    }
}

/// The reader a rule reads through: the relay's own, or, while a frame is tried against the
/// rows read ahead, those rows. A read they cannot answer ends the attempt while the frame
/// has changed nothing yet (it may park: [`Reader::may_park`]); once it has written or staged
/// something it cannot be tried again, so the read is made on the relay's task (counted in
/// `reads_inline`).
#[derive(Debug)]
pub(crate) enum Reader<'a> {
    /// Every read on the relay's task.
    Inline(&'a mut Inline),
    /// Reads from the rows read ahead.
    Ahead {
        ahead: &'a mut Ahead,
        inline: &'a mut Inline,
        /// The frame has changed nothing yet: a miss ends its attempt.
        may_park: bool,
    },
}

impl Reader<'_> {
    /// Whether a miss may end the attempt now (the input has changed nothing).
    pub(crate) fn may_park(&mut self, clean: bool) {
        if let Self::Ahead { may_park, .. } = self {
            *may_park = clean;
        }
    }

    /// Whether a read of this attempt missed (the attempt will be dropped and run again).
    pub(crate) fn missed(&self) -> bool {
        matches!(self, Self::Ahead { ahead, .. } if ahead.missed.is_some())
    }

    /// The read made: from the rows read ahead when they have it; else, if the attempt may
    /// park, the miss (the attempt ends); else on this task.
    fn read(&mut self, op: ReadOp) -> Result<ReadValue, StoreError> {
        match self {
            Self::Inline(inline) => inline.run(&op),
            Self::Ahead {
                ahead,
                inline,
                may_park,
            } => {
                if ahead.missed.is_some() {
                    // The attempt is over: the rule reads on towards its refusal.
                    return Err(not_read_ahead());
                }
                let answer = ahead.answer(op);
                match ahead.missed.take_if(|_| !*may_park) {
                    Some(op) => inline.run(&op),
                    None => answer,
                }
            }
        }
    }
}

impl StoreRead for Reader<'_> {
    fn get(&mut self, table: Table, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let key = key.to_owned();
        match self.read(ReadOp::Get { table, key })? {
            ReadValue::Row(row) => Ok(row),
            _ => Err(mismatch()),
        }
    }
    fn scan_prefix(&mut self, table: Table, prefix: &str) -> Result<Rows, StoreError> {
        let prefix = prefix.to_owned();
        rows(self.read(ReadOp::ScanPrefix {
            table,
            prefix,
            max: None,
        }))
    }
    fn scan_prefix_max(
        &mut self,
        table: Table,
        prefix: &str,
        max: usize,
    ) -> Result<Rows, StoreError> {
        let (prefix, max) = (prefix.to_owned(), Some(max));
        rows(self.read(ReadOp::ScanPrefix { table, prefix, max }))
    }
    fn scan_range(
        &mut self,
        table: Table,
        start: &str,
        end: &str,
        max: usize,
    ) -> Result<Rows, StoreError> {
        let (start, end) = (start.to_owned(), end.to_owned());
        rows(self.read(ReadOp::ScanRange {
            table,
            start,
            end,
            max,
        }))
    }
    fn scan_page(
        &mut self,
        table: Table,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Rows, StoreError> {
        let after = after.map(str::to_owned);
        rows(self.read(ReadOp::ScanPage {
            table,
            after,
            limit,
        }))
    }
    fn latest_expiries(&mut self, table: Table, window: u64) -> Result<Expiries, StoreError> {
        expiries(self.read(ReadOp::LatestExpiries { table, window }))
    }
    fn next_expiry(&mut self, table: Table, after: u64) -> Result<Option<u64>, StoreError> {
        match self.read(ReadOp::NextExpiry { table, after })? {
            ReadValue::Expiry(at) => Ok(at),
            _ => Err(mismatch()),
        }
    }
    fn expired(
        &mut self,
        table: Table,
        up_to: u64,
        after: Option<(u64, &str)>,
        limit: usize,
    ) -> Result<Expiries, StoreError> {
        let after = after.map(|(at, k)| (at, k.to_owned()));
        expiries(self.read(ReadOp::Expired {
            table,
            up_to,
            after,
            limit,
        }))
    }
}

/// The rows a scan returned.
fn rows(read: Result<ReadValue, StoreError>) -> Result<Rows, StoreError> {
    match read? {
        ReadValue::Rows(rows) => Ok(rows),
        _ => Err(mismatch()),
    }
}

/// The keys and expiries an expiry read returned.
fn expiries(read: Result<ReadValue, StoreError>) -> Result<Expiries, StoreError> {
    match read? {
        ReadValue::Expiries(keys) => Ok(keys),
        _ => Err(mismatch()),
    }
}

fn not_read_ahead() -> StoreError {
    StoreError::Backend("not read ahead".into())
}
