//! The owner shard's outbox: every hand-off it committed, sent at least once until its
//! destination acknowledges it.

use std::collections::{BTreeMap, BTreeSet};

use wire::{Seq, UnixMs};

use super::{Applied, Handoff, MAX_IN_FLIGHT_PER_SHARD, RESEND_MS, ShardId, Stream};

/// A row of the outbox in memory: what is handed, and when it is due to be sent (`UnixMs(0)`:
/// never sent, due at once).
#[derive(Debug, Clone)]
struct Row<T> {
    prev: Seq,
    item: T,
    due: UnixMs,
}

/// The rows of one stream not acknowledged yet, by seq, and where they go.
#[derive(Debug, Clone)]
struct Out<T> {
    to: ShardId,
    rows: BTreeMap<Seq, Row<T>>,
}

/// The owner shard's outbox in memory: every row its store holds, and per destination when each
/// is due to be sent, so that a poll looks only at what is due and at what is in flight (at most
/// [`MAX_IN_FLIGHT_PER_SHARD`]), however many rows a slow or gone destination holds back.
#[derive(Debug, Clone)]
pub struct Outbox<T> {
    me: ShardId,
    streams: BTreeMap<Stream, Out<T>>,
    /// Per destination: (due, stream, seq) of each row.
    schedule: BTreeMap<ShardId, BTreeSet<(UnixMs, Stream, Seq)>>,
}

impl<T: Clone> Outbox<T> {
    /// An empty outbox of shard `me`.
    pub fn new(me: ShardId) -> Self {
        Self {
            me,
            streams: BTreeMap::new(),
            schedule: BTreeMap::new(),
        }
    }

    /// A row is stored (committed with its message, or read back at start): it is sent at the
    /// next [`Outbox::poll`]. A row already held is kept as it is (and `false` returned).
    pub fn push(&mut self, to: ShardId, stream: Stream, seq: Seq, prev: Seq, item: T) -> bool {
        let out = self.streams.entry(stream.clone()).or_insert_with(|| Out {
            to,
            rows: BTreeMap::new(),
        });
        if let std::collections::btree_map::Entry::Vacant(e) = out.rows.entry(seq) {
            e.insert(Row {
                prev,
                item,
                due: UnixMs(0),
            });
            let due = self.schedule.entry(out.to).or_default();
            due.insert((UnixMs(0), stream, seq));
            return true;
        }
        false
    }

    /// The rows to send at `now`: those never sent, and those sent [`RESEND_MS`] ago or more,
    /// the longest due first (among those never sent, each stream's oldest seq first), at most
    /// [`MAX_IN_FLIGHT_PER_SHARD`] in flight per destination. Each is due again
    /// [`RESEND_MS`] from `now`.
    pub fn poll(&mut self, now: UnixMs) -> Vec<Handoff<T>> {
        let mut sent = Vec::new();
        for (to, due) in &mut self.schedule {
            // In flight: due after now, the end of the schedule.
            let flying = due
                .iter()
                .rev()
                .take_while(|(at, _, _)| *at > now)
                .take(MAX_IN_FLIGHT_PER_SHARD)
                .count();
            let room = MAX_IN_FLIGHT_PER_SHARD.saturating_sub(flying);
            let ready: Vec<(UnixMs, Stream, Seq)> = due
                .iter()
                .take_while(|(at, _, _)| *at <= now)
                .take(room)
                .cloned()
                .collect();
            for key in ready {
                due.remove(&key);
                let (_, stream, seq) = key;
                let Some(row) = self
                    .streams
                    .get_mut(&stream)
                    .and_then(|out| out.rows.get_mut(&seq))
                else {
                    continue;
                };
                row.due = now.plus_ms(RESEND_MS);
                due.insert((row.due, stream.clone(), seq));
                sent.push(Handoff {
                    from: self.me,
                    to: *to,
                    stream,
                    seq,
                    prev: row.prev,
                    item: row.item.clone(),
                });
            }
        }
        sent
    }

    /// When a row is next due to be sent (`None`: nothing waits).
    pub fn next_deadline(&self) -> Option<UnixMs> {
        self.schedule
            .values()
            .filter_map(|due| due.first().map(|(at, _, _)| *at))
            .min()
    }

    /// An acknowledgement arrived: the rows of its stream through its seq are applied. Returns
    /// their seqs and items, for the caller to delete the rows (in a commit of its own).
    pub fn on_applied(&mut self, a: &Applied) -> Vec<(Seq, T)> {
        let Some(out) = self.streams.get_mut(&a.stream) else {
            return Vec::new();
        };
        let later = out.rows.split_off(&Seq(a.through.get().saturating_add(1)));
        let done = std::mem::replace(&mut out.rows, later);
        if let Some(due) = self.schedule.get_mut(&out.to) {
            for (seq, row) in &done {
                due.remove(&(row.due, a.stream.clone(), *seq));
            }
            if due.is_empty() {
                self.schedule.remove(&out.to);
            }
        }
        if out.rows.is_empty() {
            self.streams.remove(&a.stream);
        }
        done.into_iter().map(|(seq, row)| (seq, row.item)).collect()
    }

    /// Rows not acknowledged yet.
    pub fn len(&self) -> usize {
        self.streams.values().map(|out| out.rows.len()).sum()
    }

    /// Rows of `stream` not acknowledged yet.
    pub fn stream_len(&self, stream: &Stream) -> usize {
        self.streams.get(stream).map_or(0, |out| out.rows.len())
    }

    /// Whether every row is acknowledged.
    pub fn is_empty(&self) -> bool {
        self.streams.is_empty()
    }
}
