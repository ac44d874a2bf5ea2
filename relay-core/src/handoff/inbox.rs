//! The recipient shard's inbox: each stream applied once along its chain of seqs, what
//! follows a gap held (bounded), repeats answered with the durable mark.

use std::collections::BTreeMap;

use wire::Seq;

use super::{Applied, Broken, Handoff, Level, ShardId, Stream};

/// What an [`Inbox`] did with a hand-off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Received<T> {
    /// Apply these, in order (the hand-off and the held ones it let through), in one commit
    /// with the stream's mark through the last; then tell [`Inbox::durable`].
    Apply(Vec<Handoff<T>>),
    /// Already applied. `Some`: the acknowledgement to send again (the owner may have lost
    /// it); `None`: its commit is not durable yet, and its acknowledgement follows then.
    Again(Option<Applied>),
    /// Held until the gap before it is filled.
    Held,
    /// Not kept: the inbox holds its most; the owner sends it again.
    Dropped,
}

/// One stream's marks on the recipient's shard, and what it holds past a gap.
#[derive(Debug, Clone)]
struct In<T> {
    owner: ShardId,
    /// The last seq applied, its commit durable or not.
    applied: Seq,
    /// The last seq whose apply is durable.
    durable: Seq,
    /// Hand-offs past a gap, by their `prev`.
    held: BTreeMap<Seq, Handoff<T>>,
}

impl<T> In<T> {
    /// A stream of `owner` applied, durably, through `through`, holding nothing.
    fn at(owner: ShardId, through: Seq) -> Self {
        Self {
            owner,
            applied: through,
            durable: through,
            held: BTreeMap::new(),
        }
    }
}

/// The recipient shard's side: each stream's marks, and what it holds past a gap.
#[derive(Debug, Clone)]
pub struct Inbox<T> {
    me: ShardId,
    streams: BTreeMap<Stream, In<T>>,
    held: usize,
    max_held: usize,
}

impl<T> Inbox<T> {
    /// An empty inbox of shard `me`, holding at most `max_held` hand-offs past gaps.
    pub fn new(me: ShardId, max_held: usize) -> Self {
        Self {
            me,
            streams: BTreeMap::new(),
            held: 0,
            max_held,
        }
    }

    /// A stream's durable mark as stored (at start, or read before its first hand-off). A
    /// stream the inbox never heard of is applied through `Seq(0)`.
    pub fn restore(&mut self, owner: ShardId, stream: Stream, through: Seq) {
        self.streams.insert(stream, In::at(owner, through));
    }

    /// What to do with the hand-off `h`. `Err`: its chain does not hold (refused, nothing
    /// changed).
    pub fn receive(&mut self, h: Handoff<T>) -> Result<Received<T>, Broken> {
        let me = self.me;
        let s = self
            .streams
            .entry(h.stream.clone())
            .or_insert_with(|| In::at(h.from, Seq(0)));
        if h.seq <= h.prev || (h.prev < s.applied && s.applied < h.seq) {
            return Err(Broken {
                seq: h.seq,
                prev: h.prev,
                applied: s.applied,
            });
        }
        if h.seq <= s.applied {
            let ack = (h.seq <= s.durable).then(|| Applied {
                from: me,
                to: s.owner,
                stream: h.stream.clone(),
                through: s.durable,
                level: Level::default(),
            });
            return Ok(Received::Again(ack));
        }
        if h.prev > s.applied {
            if s.held.contains_key(&h.prev) {
                return Ok(Received::Held);
            }
            if self.held >= self.max_held {
                return Ok(Received::Dropped);
            }
            s.held.insert(h.prev, h);
            self.held += 1;
            return Ok(Received::Held);
        }
        s.owner = h.from;
        s.applied = h.seq;
        let mut apply = vec![h];
        while let Some(next) = s.held.remove(&s.applied) {
            self.held -= 1;
            s.applied = next.seq;
            apply.push(next);
        }
        Ok(Received::Apply(apply))
    }

    /// The commit that applied `stream` through `through` is durable: the acknowledgement to
    /// send its owner.
    pub fn durable(&mut self, stream: &Stream, through: Seq) -> Option<Applied> {
        let s = self.streams.get_mut(stream)?;
        s.durable = s.durable.max(through);
        Some(Applied {
            from: self.me,
            to: s.owner,
            stream: stream.clone(),
            through: s.durable,
            level: Level::default(),
        })
    }

    /// Hand-offs held past gaps.
    pub fn held(&self) -> usize {
        self.held
    }

    /// The last seq of `stream` applied here (`Seq(0)`: none).
    pub fn applied(&self, stream: &Stream) -> Seq {
        self.streams.get(stream).map_or(Seq(0), |s| s.applied)
    }
}
