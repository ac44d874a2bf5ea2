//! Receipts: `delivered` / `read` apply "up to seq", are routed to the other member with
//! `from` injected, never move backwards, and are kept (latest per conversation and kind) for
//! an offline sender until its next `sync`.
//!
//! A receipt is refused with `INVALID_RECEIPT` when its seq was never sent to its author: 0,
//! beyond the last message the other member wrote, or at/after the first message still queued
//! for the author that has not been pushed to it yet. Both `delivered` and `read` release the
//! covered messages from the offline queue (a read message was delivered) and from the
//! connection's sync window (`crate::sync`); a receipt that releases messages pushed to the
//! connection costs nothing from its frame budget.

use wire::frames::{ReceiptDelivery, ReceiptFrame};
use wire::{AliasId, ConvId, ErrorCode, Seq, ServerFrame, UnixMs, UserUuid};

use crate::cx::Cx;
use crate::planted::planted;
use crate::rows::{PendingReceiptRow, ReceiptKind};
use crate::shell::ConnId;

pub(crate) fn receipt_frame(kind: ReceiptKind, r: ReceiptDelivery) -> ServerFrame {
    match kind {
        ReceiptKind::Delivered => ServerFrame::Delivered(r),
        ReceiptKind::Read => ServerFrame::Read(r),
    }
}

impl Cx<'_> {
    pub(crate) fn on_receipt(
        &mut self,
        now: UnixMs,
        conn: ConnId,
        kind: ReceiptKind,
        r: &ReceiptFrame,
    ) {
        let Some(user) = self.conn_user(conn) else {
            return;
        };
        // Built only for an error frame (not on the routing path).
        let ref_type = || Some(kind.as_str().to_owned());
        let other = match self.member_check(&user, &r.conv_id, &r.to) {
            Ok(other) => other,
            Err(crate::messaging::NotMember::Unreadable) => {
                let (_, msg) = crate::messaging::NotMember::Unreadable.refusal();
                return self.refuse_unreadable_receipt(conn, r, msg, ref_type());
            }
            Err(e) => {
                let (code, msg) = e.refusal();
                return self.send_error(conn, code, msg, ref_type(), None);
            }
        };
        let last_from_other = self.last_from(&other, &user, &r.conv_id);
        let (from, to) = match self.receipt_reads(&user, &other, r) {
            Ok(aliases) => aliases,
            Err(msg) => return self.refuse_unreadable_receipt(conn, r, msg, ref_type()),
        };
        if r.seq == Seq(0) || r.seq > last_from_other || self.never_sent(&user, r) {
            return self.send_error(
                conn,
                ErrorCode::INVALID_RECEIPT,
                "the receipt covers a seq that was never delivered to you",
                ref_type(),
                None,
            );
        }
        // Messages in flight on this connection leave the window: the receipt was free.
        if self.release(conn, &r.conv_id, r.seq) > 0 {
            self.refund_frame(conn);
        }
        let upto =
            if planted!(self.config, ReceiptClearsBeyondSeq) && kind == ReceiptKind::Delivered {
                // PLANTED BUG (test-only): clears all the other member wrote, not only up to `seq`.
                last_from_other
            } else {
                r.seq
            };
        self.state.delete_messages_upto(&user, &r.conv_id, upto);
        if r.seq > self.state.mark(&r.conv_id, &user, kind) {
            self.state.put_mark(&r.conv_id, &user, kind, r.seq);
            self.forward_receipt(now, kind, &r.conv_id, r.seq, (&user, from), (&other, to));
        }
        // The window may have opened.
        // PLANTED BUG (WindowNotRefilledOnReceipt): what waits for room stays waiting.
        if !planted!(self.config, WindowNotRefilledOnReceipt) {
            self.pump(conn);
        }
    }

    /// The last seq `author` wrote to `reader` in `conv` that `reader` may have: what the
    /// conversation's row says on the shard that owns it (`member_check` read it: it is in
    /// memory until the input ends), else the last seq handed to `reader`'s shard.
    fn last_from(&self, author: &UserUuid, reader: &UserUuid, conv: &ConvId) -> Seq {
        let place = self.config.shard;
        if place.map().owner_of([author, reader]) != place.me() {
            let stream = crate::handoff::Stream {
                recipient: reader.clone(),
                conv: conv.clone(),
            };
            return self.state.handoffs().applied(&stream);
        }
        self.state
            .relations()
            .conversation(conv)
            .map_or(Seq(0), |c| {
                c.index_of(author).map_or(Seq(0), |i| c.last_authored[i])
            })
    }

    /// What a receipt `r` of `user` reads before anything changes: the aliases of both
    /// members (a forwarded receipt names them), `user`'s queue in the conversation through
    /// the receipt's seq, the next page of each of `user`'s queues delivery will push from
    /// once the receipt opened the window (`Cx::read_queue_ahead`), the conversation's receipt
    /// marks (`member_check` read the conversation). `Err`: what to tell the client.
    fn receipt_reads(
        &mut self,
        user: &UserUuid,
        other: &UserUuid,
        r: &ReceiptFrame,
    ) -> Result<(Option<AliasId>, Option<AliasId>), &'static str> {
        let conv = &r.conv_id;
        let (Ok(from), Ok(to)) = (self.alias_of(user), self.alias_of(other)) else {
            return Err("the relay could not read the members' accounts; send the receipt again");
        };
        if self.read_queue_through(user, conv, r.seq).is_err() {
            return Err("the relay could not read your queue; send the receipt again");
        }
        let room = self.window_room(user, Some(conv));
        if self.read_ahead_of(user, conv, room).is_err() {
            return Err("the relay could not read your queue; send the receipt again");
        }
        if self.read_marks(conv).is_err() {
            return Err(
                "the relay could not read this conversation's receipts; send the receipt again",
            );
        }
        Ok((from, to))
    }

    /// Whether receipt `r` of `user` covers a queued message never pushed to them (at or
    /// beyond the first one after the highest seq pushed).
    fn never_sent(&self, user: &UserUuid, r: &ReceiptFrame) -> bool {
        let highest = self
            .sessions()
            .highest_pushed(user, &r.conv_id)
            .unwrap_or(Seq(0));
        let first_unsent = self
            .state
            .queue(user, &r.conv_id)
            .and_then(|q| q.starting_at(highest.next()).next().map(|m| m.seq));
        // PLANTED BUG (ReceiptBeyondSent): the "never sent" bound is skipped.
        first_unsent.is_some_and(|f| r.seq >= f) && !planted!(self.config, ReceiptBeyondSent)
    }

    /// Refuses receipt `r` on `conn` because a read failed (`STORAGE_UNAVAILABLE`, nothing
    /// changed in the store). The messages it covers that are in flight on this connection
    /// still leave its window, and the window refills: the client has them, and no client is
    /// known to send a refused receipt again, so holding them in flight would stall the
    /// conversation's delivery until the client reconnects. They stay queued until a receipt
    /// is applied or a later `sync` replays them.
    fn refuse_unreadable_receipt(
        &mut self,
        conn: ConnId,
        r: &ReceiptFrame,
        msg: &str,
        ref_type: Option<String>,
    ) {
        self.send_error(conn, ErrorCode::STORAGE_UNAVAILABLE, msg, ref_type, None);
        if self.read_missed() {
            // The receipt waits for its read and runs again: its window is released then.
            return;
        }
        // PLANTED BUG (WindowNotRefilledOnReceipt): what waits for room stays waiting.
        if self.release(conn, &r.conv_id, r.seq) > 0
            && !planted!(self.config, WindowNotRefilledOnReceipt)
        {
            self.pump(conn);
        }
    }

    /// Sends `reader`'s receipt (`kind`, through `seq` in `conv`) to `author`: on its
    /// connection, else kept for its next `sync`; through its shard when that is another.
    pub(crate) fn forward_receipt(
        &mut self,
        now: UnixMs,
        kind: ReceiptKind,
        conv: &ConvId,
        seq: Seq,
        (reader, from): (&UserUuid, Option<AliasId>),
        (author, to): (&UserUuid, Option<AliasId>),
    ) {
        // PLANTED BUG (test-only) when `ReceiptAtReadersShard`: the author's shard is not
        // asked; the receipt is applied here.
        let elsewhere = self
            .config
            .shard
            .elsewhere(author)
            .filter(|_| !crate::planted::planted!(self.config, ReceiptAtReadersShard));
        if let Some(shard) = elsewhere {
            let notice = crate::handoff::Notice::Receipt {
                read: kind == ReceiptKind::Read,
                conv: conv.clone(),
                seq,
                reader: reader.clone(),
                author: author.clone(),
                from,
                to,
            };
            return self.send_notice(now, shard, notice);
        }
        match self.online(author) {
            Some(peer) => {
                let frame = ReceiptDelivery {
                    conv_id: conv.clone(),
                    seq,
                    from,
                    to,
                };
                self.send(peer, receipt_frame(kind, frame));
            }
            None => self.state.put_pending_receipt(
                PendingReceiptRow {
                    recipient: author.clone(),
                    conv_id: conv.clone(),
                    kind,
                    seq,
                    from: reader.clone(),
                    at: now,
                },
                self.config.offline_ttl_ms,
            ),
        }
    }
}
