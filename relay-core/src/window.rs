//! One synced connection's delivery window (see `sync` for the rules): per conversation what
//! was pushed and what receipts released, the messages and bytes in flight, and the turn order
//! of the conversations with messages not pushed yet. It counts; what a message costs and
//! which messages a release covers are the caller's (it reads the queues).

use std::collections::{BTreeMap, VecDeque};

use wire::{ConvId, Seq};

/// Each one's share of a window's `room` (messages, bytes) among `n` conversations taking
/// turns in it (rounded up: at least one message each).
pub(crate) fn share(room: (usize, usize), n: usize) -> (usize, usize) {
    let n = n.max(1);
    (room.0.div_ceil(n), room.1.div_ceil(n))
}

/// The delivery window of one synced connection: what is in flight and whose turn is next.
#[derive(Debug, Default)]
pub(crate) struct Window {
    /// Per conversation this connection pushed to (or will), its in-flight part.
    convs: BTreeMap<ConvId, Flight>,
    /// Conversations with messages not pushed yet, in turn order.
    turns: VecDeque<ConvId>,
    /// Messages in flight, all conversations.
    msgs: usize,
    /// Their bytes (`limits::msg_frame_bytes`).
    bytes: usize,
}

/// One conversation's part of a connection's window.
#[derive(Debug)]
struct Flight {
    /// Highest seq pushed on this connection.
    pushed: Seq,
    /// Highest seq a receipt released from the window (its messages may still be queued when
    /// that receipt was refused: they are not counted again).
    released: Seq,
    /// Queued messages with `released` < seq <= `pushed` (pushed, not yet released).
    msgs: usize,
    /// Their bytes.
    bytes: usize,
    /// Whether the conversation is in `turns`.
    waiting: bool,
}

impl Default for Flight {
    fn default() -> Self {
        Self {
            pushed: Seq(0),
            released: Seq(0),
            msgs: 0,
            bytes: 0,
            waiting: false,
        }
    }
}

impl Window {
    /// Whether a message of `cost` bytes fits: always when nothing is in flight, else within
    /// both bounds.
    #[inline]
    pub(crate) fn has_room(&self, window_msgs: usize, window_bytes: usize, cost: usize) -> bool {
        self.msgs == 0 || (self.msgs < window_msgs && self.bytes + cost <= window_bytes)
    }

    /// Whether nothing is in flight.
    pub(crate) fn is_empty(&self) -> bool {
        self.msgs == 0
    }

    /// What is in flight (messages, bytes): of every conversation, or of `conv` alone.
    pub(crate) fn flying(&self, conv: Option<&ConvId>) -> (usize, usize) {
        match conv {
            None => (self.msgs, self.bytes),
            Some(conv) => self.convs.get(conv).map_or((0, 0), |f| (f.msgs, f.bytes)),
        }
    }

    /// The conversations waiting for their turn, in turn order.
    pub(crate) fn waiting(&self) -> impl Iterator<Item = &ConvId> {
        self.turns.iter()
    }

    /// Whether no conversation is waiting for its turn.
    pub(crate) fn nobody_waiting(&self) -> bool {
        self.turns.is_empty()
    }

    /// The highest seq of `conv` pushed on this connection (0 before the first).
    #[inline]
    pub(crate) fn pushed(&self, conv: &ConvId) -> Seq {
        self.convs.get(conv).map_or(Seq(0), |f| f.pushed)
    }

    /// Puts `conv` at the back of the turn order unless it is waiting already.
    pub(crate) fn wait_turn(&mut self, conv: &ConvId) {
        match self.convs.get_mut(conv) {
            Some(f) if f.waiting => return,
            Some(f) => f.waiting = true,
            None => {
                self.convs.insert(
                    conv.clone(),
                    Flight {
                        waiting: true,
                        ..Flight::default()
                    },
                );
            }
        }
        self.turns.push_back(conv.clone());
    }

    /// The conversation whose turn it is, taken off the front of the order (it is handed back
    /// with [`Window::keep_turn`], [`Window::next_round`] or [`Window::done`]).
    pub(crate) fn take_turn(&mut self) -> Option<ConvId> {
        self.turns.pop_front()
    }

    /// `conv` could not push for want of room: it keeps its place at the front.
    pub(crate) fn keep_turn(&mut self, conv: ConvId) {
        self.turns.push_front(conv);
    }

    /// `conv` pushed and has more: it goes to the back.
    pub(crate) fn next_round(&mut self, conv: ConvId) {
        self.turns.push_back(conv);
    }

    /// `conv` has nothing left to push: it waits no more.
    pub(crate) fn done(&mut self, conv: &ConvId) {
        if let Some(f) = self.convs.get_mut(conv) {
            f.waiting = false;
        }
    }

    /// Message `seq` of `conv`, `bytes` long, was pushed.
    #[inline]
    pub(crate) fn pushed_one(&mut self, conv: &ConvId, seq: Seq, bytes: usize) {
        // Keys are cloned only for a conversation's first push on this connection.
        let flight = match self.convs.get_mut(conv) {
            Some(f) => f,
            None => self.convs.entry(conv.clone()).or_default(),
        };
        flight.pushed = seq;
        flight.msgs += 1;
        flight.bytes += bytes;
        self.msgs += 1;
        self.bytes += bytes;
    }

    /// `msgs` messages of `conv` (`bytes` in all) up to `limit` left the window by a receipt.
    pub(crate) fn release(&mut self, conv: &ConvId, limit: Seq, msgs: usize, bytes: usize) {
        let Some(f) = self.convs.get_mut(conv) else {
            return;
        };
        f.released = f.released.max(limit);
        f.msgs = f.msgs.saturating_sub(msgs);
        f.bytes = f.bytes.saturating_sub(bytes);
        self.msgs = self.msgs.saturating_sub(msgs);
        self.bytes = self.bytes.saturating_sub(bytes);
    }

    /// The seqs of `conv` in flight: after the released ones, up to the pushed ones.
    pub(crate) fn in_flight(&self, conv: &ConvId) -> Option<(Seq, Seq)> {
        self.convs.get(conv).map(|f| (f.released, f.pushed))
    }

    /// `conv`'s in-flight part is counted again as `msgs` messages of `bytes` (some left the
    /// queue another way: expiry, retraction).
    pub(crate) fn recount(&mut self, conv: &ConvId, msgs: usize, bytes: usize) {
        let Some(f) = self.convs.get_mut(conv) else {
            return;
        };
        self.msgs = self.msgs - f.msgs.min(self.msgs) + msgs;
        self.bytes = self.bytes - f.bytes.min(self.bytes) + bytes;
        f.msgs = msgs;
        f.bytes = bytes;
    }
}
