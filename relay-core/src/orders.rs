//! Payment orders of every kind (vanity, channel trade, channel quota): creation, the one
//! lifecycle `pending → confirmed | expired` (plus `expired → confirmed` for an honoured late
//! payment), expiry on `handle_timeout`, what a confirmation applies, `payment_confirmed`
//! delivery (live when connected, and re-sent on every `sync` of the buyer for
//! `CONFIRM_REDELIVERY_TTL_MS`), V5, and the deletion of orders that are over once
//! `Config::order_retention_ms` has passed (the same timer).

use wire::frames::PaymentConfirmedFrame;
use wire::http::{OrderKind, OrderState, OrderStatusResponse};
use wire::{AliasId, ChannelId, ErrorCode, OrderId, ServerFrame, UnixMs, UserUuid};

use crate::commerce_state::{ChannelRow, OrderRow, PendingConfirmRow, Transition};
use crate::cx::Cx;
use crate::handoff::Notice;
use crate::http::{ApiError, HttpRequest, HttpResponse};
use crate::ids::hex;
use crate::shell::ConnId;

/// Base58 (Bitcoin/TRON alphabet) for the stand-in receiving addresses.
const BASE58: &[u8; 58] = b"123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz";

impl Cx<'_> {
    /// The stand-in processor's hosted page of `order`.
    pub(crate) fn payment_url(&self, order: &OrderId) -> String {
        format!(
            "{}/{order}",
            self.config.payment_page_base.trim_end_matches('/')
        )
    }

    /// A fake TRC-20-looking address: `T` + 33 base58 characters from the RNG.
    fn fake_pay_to(&mut self) -> String {
        let bytes = self.ids.bytes::<33>();
        let mut s = String::with_capacity(34);
        s.push('T');
        for b in bytes {
            s.push(char::from(BASE58[usize::from(b) % BASE58.len()]));
        }
        s
    }

    fn fresh_order_id(&mut self) -> OrderId {
        loop {
            let raw = format!("o-{}", hex(&self.ids.bytes::<12>()));
            if let Ok(id) = OrderId::parse(&raw)
                && !self.state.commerce().orders.contains_key(&id)
            {
                return id;
            }
        }
    }

    /// Creates and stores a pending order (its expiry timer is armed by `put_order`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn create_order(
        &mut self,
        now: UnixMs,
        kind: OrderKind,
        buyer: Option<UserUuid>,
        target: String,
        listing_version: u64,
        price_usdt: u64,
        ttl_ms: u64,
    ) -> OrderRow {
        let id = self.fresh_order_id();
        let pay_to = self.fake_pay_to();
        let o = OrderRow {
            id,
            kind,
            buyer,
            target,
            listing_version,
            price_usdt,
            pay_to,
            created_at: now,
            expires_at: now.plus_ms(ttl_ms),
            state: OrderState::Pending,
            paid_usdt: 0,
            refund_needed: false,
            used: false,
            confirmed_at: None,
            bound_at: None,
        };
        self.state.put_order(o.clone());
        o
    }

    /// Timer: `pending → expired` when due; releases the alias hold or the channel lock. Also
    /// purges the buyer's kept `payment_confirmed` of this order once its redelivery time is
    /// over (same timer, armed by `put_pending_confirm`).
    pub(crate) fn expire_order(&mut self, now: UnixMs, id: &OrderId) {
        let Some(mut o) = self.state.commerce().orders.get(id).cloned() else {
            return;
        };
        if let Some(buyer) = &o.buyer {
            self.state.expire_pending_confirm(now, buyer, id);
        }
        if o.over_at()
            .is_some_and(|at| now >= at.plus_ms(self.config.order_retention_ms))
        {
            probes::probe!("order:purged");
            self.state.delete_order(id);
            return;
        }
        if o.expire(now) == Transition::Expired {
            probes::probe!("order:expired");
            if o.kind == OrderKind::Vanity
                && let Ok(alias) = AliasId::parse(&o.target)
            {
                self.admission_mut()
                    .vanity
                    .lapsed(&o.id, &alias, o.buyer.as_ref(), now);
            }
            self.state.put_order(o);
        }
    }

    /// Whether what an expired order bought can still be given to its buyer (late payment).
    /// `alias_in_use`: whether an account has the alias a vanity order is for
    /// ([`Cx::alias_in_use`](crate::cx::Cx::alias_in_use), read before the caller changes anything).
    pub(crate) fn still_available(&self, o: &OrderRow, alias_in_use: bool) -> bool {
        match o.kind {
            OrderKind::ChannelQuota => true,
            OrderKind::Vanity => AliasId::parse(&o.target).is_ok_and(|a| {
                // PLANTED BUG (LatePaymentIgnoresHolds): a competing buyer's hold is not
                // looked at, only whether the alias was sold or is in use.
                if crate::planted::planted!(self.config, LatePaymentIgnoresHolds) {
                    return !self.state.alias_spent(&a) && !alias_in_use;
                }
                self.vanity_available(&a, alias_in_use, None)
                    || self.state.commerce().alias_hold.get(&a) == Some(&o.id)
            }),
            OrderKind::ChannelTrade => {
                let Ok(ch) = ChannelId::parse(&o.target) else {
                    return false;
                };
                let lock = self.state.commerce().channel_lock.get(&ch);
                self.state.commerce().channels.get(&ch).is_some_and(|c| {
                    c.version == o.listing_version
                        && c.sale_price.is_some()
                        && o.buyer.as_ref() != Some(&c.owner)
                        && lock.is_none_or(|l| *l == o.id)
                })
            }
        }
    }

    /// Confirms `o` (pending, or expired and still available) and applies what it bought,
    /// exactly once; queues its single `payment_confirmed`.
    pub(crate) fn confirm_order(&mut self, now: UnixMs, mut o: OrderRow) {
        if o.confirm(now) != Transition::Confirmed {
            return;
        }
        self.admission_mut().vanity.settled(&o.id);
        match o.kind {
            OrderKind::Vanity => probes::probe!("order:confirmed:vanity"),
            OrderKind::ChannelQuota => {
                probes::probe!("order:confirmed:quota");
                if let Some(buyer) = &o.buyer {
                    let mut q = self.state.quota_of(buyer);
                    q.bought = q.bought.saturating_add(1);
                    self.state.put_quota(buyer, q);
                }
            }
            OrderKind::ChannelTrade => {
                let channel = ChannelId::parse(&o.target)
                    .ok()
                    .and_then(|ch| self.state.commerce().channels.get(&ch).cloned());
                if let (Some(c), Some(buyer)) = (channel, o.buyer.clone()) {
                    probes::probe!("order:confirmed:channel-trade");
                    let old_owner = c.owner.clone();
                    let id = c.id.clone();
                    self.state.put_channel(ChannelRow {
                        owner: buyer.clone(),
                        sale_price: None,
                        version: c.version + 1,
                        ..c
                    });
                    self.state.delete_sub(&id, &buyer);
                    self.state.put_sub(&id, &old_owner, now);
                }
            }
        }
        let frame = o.buyer.clone().map(|b| (b, o.id.clone(), o.ref_id()));
        self.state.put_order(o);
        if let Some((buyer, order_id, ref_id)) = frame {
            match self.config.shard.elsewhere(&buyer) {
                // The buyer's shard keeps it (its `sync` sends it) and sends it live.
                Some(shard) => {
                    let notice = Notice::Confirmed {
                        user: buyer,
                        order_id,
                        ref_id,
                        at: now,
                    };
                    self.send_notice(now, shard, notice);
                }
                None => {
                    self.confirm_to_buyer(buyer, order_id, ref_id, now);
                }
            }
        }
    }

    /// The `payment_confirmed` of `order_id` for `buyer`, a user of this shard: live when the
    /// buyer has a connection (it may be silently dead: no ack exists), and kept either way
    /// for redelivery on every later `sync` of the buyer. Once: a confirmation kept already is
    /// neither sent live nor kept again (`false`).
    pub(crate) fn confirm_to_buyer(
        &mut self,
        buyer: UserUuid,
        order_id: OrderId,
        ref_id: String,
        at: UnixMs,
    ) -> bool {
        let kept = (self.state.commerce().pending_confirms)
            .contains_key(&(buyer.clone(), order_id.clone()));
        if kept {
            return false;
        }
        let live = self.online(&buyer);
        let jti = live
            .and_then(|c| self.sessions().get(c))
            .map(|c| c.jti.clone());
        if let Some(conn) = live {
            self.send(
                conn,
                ServerFrame::PaymentConfirmed(PaymentConfirmedFrame {
                    order_id: order_id.clone(),
                    ref_id: ref_id.clone(),
                }),
            );
        }
        self.state.put_pending_confirm(PendingConfirmRow {
            user: buyer,
            order_id,
            ref_id,
            at,
            jti,
        });
        true
    }

    /// On `sync`: every kept `payment_confirmed` of the user, in order id order, whatever the
    /// token: a re-login of the same device (an expired or revoked token) cannot be told from
    /// another device, and a device that never got it must not lose it. Kept rows stay
    /// (re-sent on every `sync` until purged after `CONFIRM_REDELIVERY_TTL_MS`); clients
    /// deduplicate by `order_id`.
    pub(crate) fn deliver_pending_confirms(&mut self, conn: ConnId, user: &UserUuid) {
        let kept: Vec<PendingConfirmRow> = self
            .state
            .commerce()
            .pending_confirms
            .iter()
            .filter(|((u, _), _)| u == user)
            .map(|(_, p)| p.clone())
            .collect();
        for p in kept {
            self.send(
                conn,
                ServerFrame::PaymentConfirmed(PaymentConfirmedFrame {
                    order_id: p.order_id.clone(),
                    ref_id: p.ref_id.clone(),
                }),
            );
        }
    }

    /// V5 (no JWT): the state of any order kind.
    pub(crate) fn http_order_status(
        &mut self,
        _now: UnixMs,
        _req: &HttpRequest,
        id: &str,
    ) -> Result<HttpResponse, ApiError> {
        let not_found = || ApiError::new(ErrorCode::ORDER_NOT_FOUND, "no such order");
        let id = OrderId::parse(id).map_err(|_| not_found())?;
        let o = self
            .state
            .commerce()
            .orders
            .get(&id)
            .ok_or_else(not_found)?;
        let alias_id = if o.kind == OrderKind::Vanity {
            o.target.clone()
        } else {
            String::new()
        };
        Ok(HttpResponse::json(
            200,
            &OrderStatusResponse {
                status: o.state,
                alias_id,
                kind: o.kind,
                ref_id: o.ref_id(),
            },
        ))
    }
}
