//! `sync` and delivery: replay of everything undelivered as ordinary `msg` frames, paced by one
//! window per connection, oldest first and fair across conversations.
//!
//! * A connection receives `msg` frames only after its `sync` (a message arriving earlier stays
//!   queued and is part of the replay). A new `sync` replays the whole undelivered suffix again
//!   (clients dedup by id). Kept receipts, retractions and payment confirmations are sent first.
//! * **The window** ([`Config::sync_window_msgs`](crate::Config) messages and
//!   [`Config::sync_window_bytes`](crate::Config) bytes, [`crate::limits::msg_frame_bytes`]
//!   each) covers every conversation of the connection: a message is *in flight* from its push
//!   until a `delivered`/`read` of the connection covers it (or it expires, or is retracted).
//!   Nothing more is pushed while the window is full; receipts refill it. The shell's outbound
//!   buffer holds at least twice the window, so the relay's own replay never overflows it.
//! * **Fairness**: conversations with messages not pushed yet take turns (round robin); each
//!   turn pushes that conversation's oldest unpushed message. At `sync` the turn order is the
//!   age of each conversation's oldest message, so the oldest backlog starts first; a
//!   conversation that gets a new message joins the end of the order. A live conversation whose
//!   window has room is served at once.

use std::collections::{BTreeMap, BTreeSet};

use wire::frames::{MsgDelivery, ReceiptDelivery, RetractDelivery};
use wire::{AliasId, ConvId, ErrorCode, Seq, ServerFrame, UnixMs, UserUuid};

use crate::cx::Cx;
use crate::planted::planted;
use crate::queue::Next;
use crate::receipts::receipt_frame;
use crate::rows::ReceiptKind;
use crate::shell::ConnId;
use crate::store::StoreError;
use crate::window::Window;

/// The alias of each account a replay names (`None`: the account has none).
type Aliases = BTreeMap<UserUuid, Option<AliasId>>;

impl Cx<'_> {
    pub(crate) fn on_sync(&mut self, now: UnixMs, conn: ConnId) {
        let Some(user) = self.sessions().user(conn).cloned() else {
            return;
        };
        // The user's conversations and the first page of every queue of theirs (past what
        // expired) are read (if they are not in memory) before anything is replayed; the
        // queues stay in memory while the connection is synced (delivery pushes from them, and
        // reads their next page ahead of need). So are the aliases the replay names.
        let Ok((convs, aliases)) = self.sync_reads(now, &user) else {
            // The replay cannot be complete: the client reconnects and syncs again.
            return self.refuse_sync(conn, ErrorCode::STORAGE_UNAVAILABLE);
        };
        let Some(c) = self.sessions_mut().get_mut(conn) else {
            return;
        };
        let first_sync = !c.synced;
        c.synced = true;
        c.window = Window::default();
        // The connection's state changed: a read from here on cannot end the attempt.
        self.changed();
        if first_sync {
            self.state.hold_queues(&user, convs.iter());
        }
        // What outlived the offline TTL is never replayed, whether or not the expiry sweep
        // has reached its queue yet (it may be waiting for its reads, or pausing between
        // pages): it goes now, as the sweep would take it.
        for conv in &convs {
            if self.state.expire_queue(now, &user, conv) > 0 {
                probes::probe!("sync:expired-before-replay");
            }
        }
        self.stats.syncs += 1;
        self.stats.sync_backlog_messages += self.state.backlog().of_recipient(&user).msgs as u64;
        self.replay_kept(conn, &user, &convs, &aliases);
        self.deliver_pending_confirms(conn, &user);
        let backlog = self.turn_order(&user, &convs);
        if let Some(c) = self.sessions_mut().get_mut(conn) {
            for (_, conv) in backlog {
                c.window.wait_turn(&conv);
            }
        }
        self.pump(conn);
    }

    /// Refuses the `sync` of `conn` with `code` (`STORAGE_UNAVAILABLE`: its reads failed, or
    /// could not be done; else a bound of the frames waiting for reads) and closes the
    /// connection, so that the client (whichever it is: the reference clients never send a
    /// `sync` again on an error) reconnects and syncs again rather than stay connected without
    /// its replay.
    pub(crate) fn refuse_sync(&mut self, conn: ConnId, code: ErrorCode) {
        let words = if code == ErrorCode::STORAGE_UNAVAILABLE {
            "the relay could not read your queued messages; reconnect and sync again"
        } else {
            "too many frames wait for the store on this connection; reconnect and sync again"
        };
        self.send_error(conn, code, words, Some("sync".into()), None);
        self.close_unreadable(conn);
    }

    /// What a `sync` of `user` reads before it replays: its conversations (of each queue, its
    /// first page past what expired at `now`) and the alias of everyone the replay names (the
    /// senders of what is queued, of the pending receipts and retractions, and the user).
    fn sync_reads(
        &mut self,
        now: UnixMs,
        user: &UserUuid,
    ) -> Result<(Vec<ConvId>, Aliases), StoreError> {
        let convs = self.with_contacts(user, crate::relations::Contacts::conversations)?;
        // The replay starts with an empty window, which the conversations with a backlog share
        // (they take turns): each queue is read as far as its share may take from it.
        let backlog = convs
            .iter()
            .filter(|conv| self.state.summary(user, conv).msgs > 0)
            .count();
        let room = crate::window::share(
            (self.config.sync_window_msgs, self.config.sync_window_bytes),
            backlog,
        );
        for conv in &convs {
            self.read_queue_front(user, conv, room)?;
            self.read_queue_unexpired(user, conv, now)?;
            self.read_queue_ahead(user, conv, room)?;
        }
        let named = convs
            .iter()
            .flat_map(|conv| {
                [ReceiptKind::Delivered, ReceiptKind::Read].map(|kind| {
                    self.state
                        .pending_receipts()
                        .get(&(user.clone(), conv.clone(), kind))
                        .map(|r| r.from.clone())
                })
            })
            .flatten()
            .chain(self.state.pending_retracts_of(user).map(|r| r.from.clone()))
            .chain([user.clone()])
            // The senders of what is queued: the replay's frames name them.
            .chain(self.state.queued().of(user).map(|(_, e)| e.from.clone()))
            .collect::<BTreeSet<UserUuid>>();
        let mut aliases = Aliases::new();
        for u in named {
            let alias = self.alias_of(&u)?;
            aliases.insert(u, alias);
        }
        Ok((convs, aliases))
    }

    /// Sends `conn` what was kept for `user` while it was away: the pending receipts (each
    /// then forgotten) and retractions (kept until the offline TTL: no ack says the frame
    /// arrived).
    fn replay_kept(&mut self, conn: ConnId, user: &UserUuid, convs: &[ConvId], aliases: &Aliases) {
        let alias = |u: &UserUuid| aliases.get(u).cloned().flatten();
        for conv in convs {
            for kind in [ReceiptKind::Delivered, ReceiptKind::Read] {
                let Some(r) = self
                    .state
                    .pending_receipts()
                    .get(&(user.clone(), conv.clone(), kind))
                    .cloned()
                else {
                    continue;
                };
                let frame = ReceiptDelivery {
                    conv_id: r.conv_id.clone(),
                    seq: r.seq,
                    from: alias(&r.from),
                    to: alias(user),
                };
                self.send(conn, receipt_frame(kind, frame));
                self.state.delete_pending_receipt(user, conv, kind);
            }
        }
        let retracts: Vec<_> = self.state.pending_retracts_of(user).cloned().collect();
        for r in retracts {
            if let Some(from) = alias(&r.from) {
                self.send(
                    conn,
                    ServerFrame::Retract(RetractDelivery {
                        id: r.id.clone(),
                        from,
                        conv_id: r.conv_id.clone(),
                    }),
                );
            }
        }
    }

    /// The replay's turn order: the conversations of `user` with something queued, the one
    /// holding the oldest message first.
    fn turn_order(&self, user: &UserUuid, convs: &[ConvId]) -> Vec<(UnixMs, ConvId)> {
        let mut backlog: Vec<(UnixMs, ConvId)> = convs
            .iter()
            .filter_map(|conv| {
                let q = self.state.queue(user, conv)?;
                q.iter().map(|m| m.at).min().map(|at| (at, conv.clone()))
            })
            .collect();
        if planted!(self.config, SyncStopsAtEmptyConversation) {
            // PLANTED BUG (test-only): the replay walks the account's conversations and stops
            // at the first one with nothing queued.
            let stop = convs
                .iter()
                .position(|c| self.state.queue(user, c).is_none())
                .unwrap_or(convs.len());
            backlog.retain(|(_, c)| convs[..stop].contains(c));
        }
        backlog.sort();
        backlog
    }

    /// A message was queued in `conv` for the user of connection `conn`: pushes it if the
    /// window of that (synced) connection has room (at once when no other conversation is
    /// waiting), else it waits for its turn.
    pub(crate) fn deliver_on(&mut self, conn: ConnId, conv: &ConvId) {
        let Some(c) = self.sessions_mut().get_mut(conn) else {
            return;
        };
        if !c.synced {
            return;
        }
        if c.window.nobody_waiting() {
            // Nobody else is waiting: this conversation's turn, as long as there is room.
            while self.push_next(conn, conv) {}
        }
        self.wait_turn(conn, conv);
        self.pump(conn);
    }

    /// Puts `conv` in the turn order of `conn` if it has unpushed messages and is not there yet.
    fn wait_turn(&mut self, conn: ConnId, conv: &ConvId) {
        let Some(c) = self.sessions().get(conn) else {
            return;
        };
        let pushed = c.window.pushed(conv);
        let unpushed = self
            .state
            .queue(&c.user, conv)
            .is_some_and(|q| q.next_after(pushed) != Next::None);
        if !unpushed {
            return;
        }
        if let Some(c) = self.sessions_mut().get_mut(conn) {
            c.window.wait_turn(conv);
        }
    }

    /// Gives turns while the window has room: each turn pushes the oldest unpushed message of
    /// the conversation at the front, which then goes to the back if it has more.
    ///
    /// A conversation whose next message is in a page not read yet (it waits for a receipt's
    /// read ahead, see [`Cx::push_next`]) passes its turn to the others, once each round.
    pub(crate) fn pump(&mut self, conn: ConnId) {
        let mut passed = 0;
        loop {
            let Some((conv, waiting)) = self
                .sessions_mut()
                .get_mut(conn)
                .filter(|c| c.synced)
                .and_then(|c| Some((c.window.take_turn()?, c.window.waiting().count())))
            else {
                return;
            };
            // The window changed: a read from here on cannot end the attempt.
            self.changed();
            if self.push_next(conn, &conv) {
                passed = 0;
            } else if self.has_unpushed(conn, &conv) {
                let pass = passed < waiting && self.awaits_page(conn, &conv);
                let Some(c) = self.sessions_mut().get_mut(conn) else {
                    return;
                };
                if pass {
                    passed += 1;
                    c.window.next_round(conv);
                    continue;
                }
                // No room: the conversation keeps its place at the front.
                c.window.keep_turn(conv);
                return;
            }
            let more = self.has_unpushed(conn, &conv);
            let Some(c) = self.sessions_mut().get_mut(conn) else {
                return;
            };
            if more {
                c.window.next_round(conv);
            } else {
                c.window.done(&conv);
            }
        }
    }

    /// Whether the next message of `conv` to push on `conn` is in a page not read yet while
    /// the window has room (so the other conversations may go first).
    fn awaits_page(&self, conn: ConnId, conv: &ConvId) -> bool {
        let Some(c) = self.sessions().get(conn) else {
            return false;
        };
        let room = (self.config.sync_window_msgs, self.config.sync_window_bytes);
        c.window.has_room(room.0, room.1, 0)
            && self
                .state
                .queue(&c.user, conv)
                .is_some_and(|q| q.next_after(c.window.pushed(conv)) == Next::Gap)
    }

    fn has_unpushed(&self, conn: ConnId, conv: &ConvId) -> bool {
        let Some(c) = self.sessions().get(conn) else {
            return false;
        };
        let pushed = c.window.pushed(conv);
        self.state
            .queue(&c.user, conv)
            .is_some_and(|q| q.next_after(pushed) != Next::None)
    }

    /// Pushes the oldest unpushed message of `conv` on `conn` if the window has room for it.
    /// The sender's alias is read first if its account is not in memory; a failed read closes
    /// the connection (nothing is marked pushed that was not sent: the client reconnects and
    /// its `sync` replays the message).
    ///
    /// When that message is in the queue's gap (not read yet), nothing is pushed while others
    /// are in flight on the connection: each receipt reads ahead what delivery needs
    /// (`Cx::read_queue_ahead`) before it runs, so the next one brings it. With nothing in
    /// flight no receipt will come (the ones in flight expired or were retracted): the page is
    /// read here, on the relay's task.
    fn push_next(&mut self, conn: ConnId, conv: &ConvId) -> bool {
        if !self.page_in(conn, conv) {
            return false;
        }
        // The sender is the other member (a queue holds what the other member wrote).
        let Some(author) = self.sessions().get(conn).and_then(|c| {
            let queue = self.state.queued().get(&c.user, conv)?;
            Some(queue.from.clone())
        }) else {
            return false;
        };
        let Ok(from) = self.alias_of(&author) else {
            self.close_unreadable(conn);
            return false;
        };
        let (window_msgs, window_bytes) =
            (self.config.sync_window_msgs, self.config.sync_window_bytes);
        // Disjoint fields: the connection and the queue (both read).
        let Some(c) = self.sessions().get(conn) else {
            return false;
        };
        let Some(q) = self.state.queue(&c.user, conv) else {
            return false;
        };
        let pushed = c.window.pushed(conv);
        let Next::Msg(m) = q.next_after(pushed) else {
            return false;
        };
        let bytes = m.frame_bytes(conv);
        // PLANTED BUG (test-only) when `SyncIgnoresWindow`: no pacing.
        if !c.window.has_room(window_msgs, window_bytes, bytes)
            && !planted!(self.config, SyncIgnoresWindow)
        {
            probes::probe!("sync:window-full");
            return false;
        }
        let seq = m.seq;
        let frame = from.map(|from| {
            ServerFrame::Msg(MsgDelivery {
                id: m.id.clone(),
                from,
                conv_id: conv.clone(),
                seq,
                at: m.at,
                crypto_v: m.crypto_v,
                payload: m.payload.clone(),
            })
        });
        if let Some(frame) = frame {
            self.send(conn, frame);
        }
        self.sessions_mut().pushed(conn, conv, seq, bytes);
        true
    }

    /// Whether the next message of `conv` to push on `conn` is in memory, reading its page
    /// (on the relay's task) when it is not and nothing is in flight on `conn`
    /// ([`Cx::push_next`]); also `true` when the window is full (nothing is pushed then).
    /// `false`: it waits for a receipt's read ahead, or the read failed (the connection is
    /// closed).
    fn page_in(&mut self, conn: ConnId, conv: &ConvId) -> bool {
        if !self.awaits_page(conn, conv) {
            // In memory, or the window is full (nothing is pushed anyway).
            return true;
        }
        let Some(c) = self.sessions().get(conn) else {
            return false;
        };
        let (user, pushed) = (c.user.clone(), c.window.pushed(conv));
        if !c.window.is_empty() {
            probes::probe!("sync:page-awaits-receipt");
            return false;
        }
        probes::probe!("sync:page-read-inline");
        if self.read_queue_through(&user, conv, pushed).is_err() {
            self.close_unreadable(conn);
            return false;
        }
        true
    }

    /// Before the messages of `conv` up to `upto` are deleted by a receipt of `conn`: releases
    /// the ones in flight. Returns how many were.
    pub(crate) fn release(&mut self, conn: ConnId, conv: &ConvId, upto: Seq) -> usize {
        let Some(c) = self.sessions().get(conn) else {
            return 0;
        };
        let Some((released, pushed)) = c.window.in_flight(conv) else {
            return 0;
        };
        let limit = upto.min(pushed);
        let Some(q) = self.state.queue(&c.user, conv) else {
            return 0;
        };
        let (mut n, mut bytes) = (0, 0);
        for m in q.upto(limit).filter(|m| m.seq > released) {
            n += 1;
            bytes += m.frame_bytes(conv);
        }
        if n == 0 {
            // Nothing was in flight up to `upto`: only the released mark moves, which a run
            // again of the same input moves to the same place.
            if let Some(c) = self.sessions_idempotent().get_mut(conn) {
                c.window.release(conv, limit, 0, 0);
            }
            return 0;
        }
        if let Some(c) = self.sessions_mut().get_mut(conn) {
            c.window.release(conv, limit, n, bytes);
        }
        n
    }

    /// Messages of `user` in `conv` left the queue some other way (expiry, retraction): counts
    /// the in-flight part again and lets the window refill.
    pub(crate) fn recount(&mut self, user: &UserUuid, conv: &ConvId) {
        let Some(conn) = self.online(user) else {
            return;
        };
        let Some(c) = self.sessions().get(conn) else {
            return;
        };
        let Some((released, pushed)) = c.window.in_flight(conv) else {
            return;
        };
        let (mut n, mut bytes) = (0, 0);
        if let Some(q) = self.state.queue(&c.user, conv) {
            for m in q.upto(pushed).filter(|m| m.seq > released) {
                n += 1;
                bytes += m.frame_bytes(conv);
            }
        }
        if let Some(c) = self.sessions_mut().get_mut(conn) {
            c.window.recount(conv, n, bytes);
        }
        self.pump(conn);
    }
}
