//! `sync` and delivery: replay of everything undelivered as ordinary `msg` frames, in seq
//! order per conversation, in bounded batches.
//!
//! A connection receives `msg` frames only after its `sync` (a message arriving earlier stays
//! queued and is part of the replay). Per connection and conversation at most
//! `max_sync_batch` (100) pushed messages may be waiting for a `delivered`; the next ones are
//! pushed as receipts open the window. A new `sync` replays the whole undelivered suffix again
//! (clients dedup by id). Kept receipts and retractions for the user are delivered (once) on
//! `sync`.

use wire::frames::{MsgDelivery, ReceiptDelivery, RetractDelivery};
use wire::{ConvId, Seq, ServerFrame, UnixMs, UserUuid};

use crate::receipts::receipt_frame;
use crate::relay::{ConnId, Output, Relay};
use crate::state::ReceiptKind;

impl Relay {
    pub(crate) fn on_sync(&mut self, _now: UnixMs, conn: ConnId) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.synced = true;
        c.pushed.clear();
        let user = c.user.clone();
        let convs: Vec<ConvId> = self
            .state
            .convs_of
            .get(&user)
            .into_iter()
            .flatten()
            .cloned()
            .collect();
        for conv in &convs {
            for kind in [ReceiptKind::Delivered, ReceiptKind::Read] {
                let Some(r) = self
                    .state
                    .pending_receipts
                    .get(&(user.clone(), conv.clone(), kind))
                    .cloned()
                else {
                    continue;
                };
                let frame = ReceiptDelivery {
                    conv_id: r.conv_id.clone(),
                    seq: r.seq,
                    from: self.state.alias_of(&r.from).cloned(),
                    to: self.state.alias_of(&user).cloned(),
                };
                self.send(conn, receipt_frame(kind, frame));
                self.state.delete_pending_receipt(&user, conv, kind);
            }
        }
        let retracts: Vec<_> = self
            .state
            .pending_retracts
            .values()
            .filter(|r| r.recipient == user)
            .cloned()
            .collect();
        for r in retracts {
            if let Some(from) = self.state.alias_of(&r.from).cloned() {
                self.send(
                    conn,
                    ServerFrame::Retract(RetractDelivery {
                        id: r.id.clone(),
                        from,
                        conv_id: r.conv_id.clone(),
                    }),
                );
            }
            // Kept until the offline TTL: no ack says the frame arrived.
        }
        self.deliver_pending_confirms(conn, &user);
        for conv in &convs {
            self.pump(conn, conv);
        }
    }

    /// Pushes what fits in the window of `user`'s synced connection for `conv`.
    pub(crate) fn deliver(&mut self, user: &UserUuid, conv: &ConvId) {
        if let Some(conn) = self.online(user) {
            self.pump(conn, conv);
        }
    }

    fn pump(&mut self, conn: ConnId, conv: &ConvId) {
        let window = self.config.max_sync_batch;
        // Disjoint fields: the connection, the queue (read), the staged outputs (appended to).
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if !c.synced {
            return;
        }
        let Some(q) = self.state.queue(&c.user, conv) else {
            return;
        };
        let pushed = c.pushed.get(conv).copied().unwrap_or(Seq(0));
        let in_flight = q.range(..=pushed).count();
        let room = window.saturating_sub(in_flight);
        let mut last = None;
        for m in q.range(pushed.next()..).take(room).map(|(_, m)| m) {
            last = Some(m.seq);
            let Some(from) = self.state.alias_of(&m.from) else {
                continue;
            };
            self.staged.push(Output::Send {
                conn,
                frame: ServerFrame::Msg(MsgDelivery {
                    id: m.id.clone(),
                    from: from.clone(),
                    conv_id: m.conv_id.clone(),
                    seq: m.seq,
                    at: m.at,
                    crypto_v: m.crypto_v,
                    payload: m.payload.clone(),
                }),
            });
        }
        let Some(last) = last else {
            return;
        };
        // Keys are cloned only for a conversation's first push.
        match c.pushed.get_mut(conv) {
            Some(p) => *p = last,
            None => {
                c.pushed.insert(conv.clone(), last);
            }
        }
        match self.pushed_hwm.get_mut(&c.user, conv) {
            Some(hwm) => *hwm = (*hwm).max(last),
            None => {
                self.pushed_hwm
                    .inner_mut(&c.user)
                    .insert(conv.clone(), last);
            }
        }
    }
}
