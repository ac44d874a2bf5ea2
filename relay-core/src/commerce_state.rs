//! Durable state of channels, payment orders, payments and sold aliases:
//! the rows, their derived indexes, and the `put_*` methods that record every change in the
//! input's batch (same discipline as [`crate::state`]).
//!
//! Derived indexes (rebuilt on load, never stored): channels by owner, subscribers both ways,
//! posts by id, the alias holds and channel locks of live orders, payments by order.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use wire::http::{OrderKind, OrderState, PaymentStatus, PostType};
use wire::{AliasId, ChannelId, OrderId, PostId, UnixMs, UserUuid};

use crate::state::State;

use crate::rows::{Timer, decode};
use crate::store::{Snapshot, StoreError, Table};

/// A channel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ChannelRow {
    pub(crate) id: ChannelId,
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) is_public: bool,
    pub(crate) owner: UserUuid,
    pub(crate) created_at: UnixMs,
    /// Listed for sale at this price (whole USDT), or not listed.
    pub(crate) sale_price: Option<u64>,
    /// The listing's compare-and-swap version: bumped by every listing change and every
    /// ownership change.
    pub(crate) version: u64,
    /// The last post seq (0 before the first post).
    pub(crate) last_post: u64,
}

/// A channel post.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PostRow {
    pub(crate) channel_id: ChannelId,
    pub(crate) seq: u64,
    pub(crate) id: PostId,
    pub(crate) post_type: PostType,
    pub(crate) content: String,
    pub(crate) author: UserUuid,
    pub(crate) created_at: UnixMs,
}

/// A subscription.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SubRow {
    pub(crate) channel_id: ChannelId,
    pub(crate) user: UserUuid,
    pub(crate) since: UnixMs,
}

/// Channel-creation seats of an account.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct QuotaRow {
    /// Channels this account ever created.
    pub(crate) created: u32,
    /// Seats bought (confirmed quota orders).
    pub(crate) bought: u32,
}

/// What a transition did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transition {
    /// `pending → confirmed`, or `expired → confirmed` for an honoured late payment.
    Confirmed,
    /// `pending → expired`.
    Expired,
    /// Nothing (already in a final state, or not yet due).
    Unchanged,
}

/// A payment order of any kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct OrderRow {
    pub(crate) id: OrderId,
    pub(crate) kind: OrderKind,
    /// The buying account; `None` for a deprecated `reserve` order (bound by whoever presents
    /// the confirmed order id first).
    pub(crate) buyer: Option<UserUuid>,
    /// The alias (vanity), the channel id (trade) or `""` (quota).
    pub(crate) target: String,
    /// The channel's listing version the trade was ordered at (0 for other kinds).
    pub(crate) listing_version: u64,
    pub(crate) price_usdt: u64,
    pub(crate) pay_to: String,
    pub(crate) created_at: UnixMs,
    pub(crate) expires_at: UnixMs,
    pub(crate) state: OrderState,
    /// Sum of the latest `paid_usdt` of every payment of this order.
    pub(crate) paid_usdt: u64,
    /// A payment arrived that could not be applied (late and no longer available, or a
    /// second payment of an already confirmed order): an operator must refund it.
    pub(crate) refund_needed: bool,
    /// A vanity order already bound to an account.
    pub(crate) used: bool,
    pub(crate) confirmed_at: Option<UnixMs>,
}

impl OrderRow {
    /// `pending → expired` when due.
    pub(crate) fn expire(&mut self, now: UnixMs) -> Transition {
        if self.state == OrderState::Pending && now >= self.expires_at {
            self.state = OrderState::Expired;
            Transition::Expired
        } else {
            Transition::Unchanged
        }
    }

    /// `pending | expired → confirmed` (the caller decided an expired order is still
    /// honourable).
    pub(crate) fn confirm(&mut self, now: UnixMs) -> Transition {
        match self.state {
            OrderState::Pending | OrderState::Expired => {
                self.state = OrderState::Confirmed;
                self.confirmed_at = Some(now);
                Transition::Confirmed
            }
            OrderState::Confirmed => Transition::Unchanged,
        }
    }

    /// Whether this order keeps its alias away from other buyers.
    pub(crate) fn holds_alias(&self) -> bool {
        self.kind == OrderKind::Vanity
            && (self.state == OrderState::Pending
                || (self.state == OrderState::Confirmed && !self.used))
    }

    /// Whether this order locks its channel against other buyers and listing changes.
    pub(crate) fn locks_channel(&self) -> bool {
        self.kind == OrderKind::ChannelTrade && self.state == OrderState::Pending
    }

    /// `ref_id` of `payment_confirmed` and V5: alias, channel id, or the order id (quota).
    pub(crate) fn ref_id(&self) -> String {
        match self.kind {
            OrderKind::Vanity | OrderKind::ChannelTrade => self.target.clone(),
            OrderKind::ChannelQuota => self.id.to_string(),
        }
    }
}

/// One webhook event, by the processor's payment id (latest state of that payment).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PaymentRow {
    pub(crate) payment_id: String,
    pub(crate) order_id: OrderId,
    pub(crate) status: PaymentStatus,
    pub(crate) paid_usdt: u64,
    pub(crate) at: UnixMs,
}

/// Why an alias can never be sold again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum AliasFate {
    /// Bought and bound to `user` (its current alias, or an earlier one later retired).
    Bound,
    /// `user`'s former alias, replaced by a bound vanity alias.
    Retired,
}

/// A sold or retired alias.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct AliasRow {
    pub(crate) alias: AliasId,
    pub(crate) user: UserUuid,
    pub(crate) fate: AliasFate,
    pub(crate) at: UnixMs,
}

/// How long a confirmation is kept for redelivery: `payment_confirmed` is not acknowledged, so
/// it is re-sent on every `sync` of the buyer for this long after the confirmation (at least
/// once on the wire; clients deduplicate by order id), then purged by `handle_timeout`.
pub(crate) const CONFIRM_REDELIVERY_TTL_MS: u64 = 24 * 60 * 60 * 1000;

/// At most this many kept confirmations per buyer; beyond it the oldest is dropped.
pub(crate) const MAX_PENDING_CONFIRMS_PER_USER: usize = 64;

/// A `payment_confirmed` frame kept for redelivery on the buyer's `sync` (see
/// [`CONFIRM_REDELIVERY_TTL_MS`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PendingConfirmRow {
    pub(crate) user: UserUuid,
    pub(crate) order_id: OrderId,
    pub(crate) ref_id: String,
    pub(crate) at: UnixMs,
    /// The token id (device session) it was first sent to live, for the record only: it is
    /// redelivered to every connection of the buyer (kept so rows written before stay readable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) jti: Option<String>,
}

/// Commerce maps and their indexes.
#[derive(Debug, Default)]
pub(crate) struct Commerce {
    pub(crate) channels: BTreeMap<ChannelId, ChannelRow>,
    pub(crate) owned: BTreeMap<UserUuid, BTreeSet<ChannelId>>,
    pub(crate) posts: BTreeMap<ChannelId, BTreeMap<u64, PostRow>>,
    pub(crate) post_seq: BTreeMap<PostId, (ChannelId, u64)>,
    pub(crate) subs: BTreeMap<ChannelId, BTreeSet<UserUuid>>,
    pub(crate) subs_of: BTreeMap<UserUuid, BTreeSet<ChannelId>>,
    pub(crate) quota: BTreeMap<UserUuid, QuotaRow>,
    pub(crate) orders: BTreeMap<OrderId, OrderRow>,
    /// alias -> the live order holding it (pending, or confirmed and not yet bound).
    pub(crate) alias_hold: BTreeMap<AliasId, OrderId>,
    /// channel -> its pending trade order.
    pub(crate) channel_lock: BTreeMap<ChannelId, OrderId>,
    pub(crate) payments: BTreeMap<String, PaymentRow>,
    pub(crate) payments_of: BTreeMap<OrderId, BTreeSet<String>>,
    pub(crate) aliases: BTreeMap<AliasId, AliasRow>,
    pub(crate) pending_confirms: BTreeMap<(UserUuid, OrderId), PendingConfirmRow>,
}

fn post_key(channel: &ChannelId, seq: u64) -> String {
    format!("{channel}/{seq:020}")
}

fn pair_key(a: &impl std::fmt::Display, b: &impl std::fmt::Display) -> String {
    format!("{a}/{b}")
}

impl State {
    /// Loads the commerce tables (called at the end of [`State::load`]).
    pub(crate) fn load_commerce(&mut self, snapshot: &Snapshot) -> Result<(), StoreError> {
        let rows = |t: Table| snapshot.get(&t).into_iter().flat_map(|m| m.iter());
        for (k, v) in rows(Table::Channels) {
            self.index_channel(decode(Table::Channels, k, v)?);
        }
        for (k, v) in rows(Table::ChannelPosts) {
            self.index_post(decode(Table::ChannelPosts, k, v)?);
        }
        for (k, v) in rows(Table::ChannelSubs) {
            let s: SubRow = decode(Table::ChannelSubs, k, v)?;
            self.index_sub(&s.channel_id, &s.user);
        }
        for (k, v) in rows(Table::ChannelQuota) {
            let user = UserUuid::parse(k)
                .map_err(|e| StoreError::Backend(format!("corrupt channel_quota key: {e}")))?;
            self.commerce
                .quota
                .insert(user, decode(Table::ChannelQuota, k, v)?);
        }
        for (k, v) in rows(Table::Orders) {
            let o: OrderRow = decode(Table::Orders, k, v)?;
            if o.state == OrderState::Pending {
                self.timers
                    .insert((o.expires_at, Timer::Order(o.id.clone())));
            }
            self.index_order(o);
        }
        for (k, v) in rows(Table::Payments) {
            let p: PaymentRow = decode(Table::Payments, k, v)?;
            self.index_payment(p);
        }
        for (k, v) in rows(Table::Aliases) {
            let a: AliasRow = decode(Table::Aliases, k, v)?;
            self.commerce.aliases.insert(a.alias.clone(), a);
        }
        for (k, v) in rows(Table::PendingConfirms) {
            let p: PendingConfirmRow = decode(Table::PendingConfirms, k, v)?;
            self.timers.insert((
                p.at.plus_ms(CONFIRM_REDELIVERY_TTL_MS),
                Timer::Order(p.order_id.clone()),
            ));
            self.commerce
                .pending_confirms
                .insert((p.user.clone(), p.order_id.clone()), p);
        }
        Ok(())
    }

    // ---- channels

    fn index_channel(&mut self, c: ChannelRow) {
        if let Some(old) = self.commerce.channels.get(&c.id)
            && old.owner != c.owner
        {
            let old_owner = old.owner.clone();
            if let Some(set) = self.commerce.owned.get_mut(&old_owner) {
                set.remove(&c.id);
                if set.is_empty() {
                    self.commerce.owned.remove(&old_owner);
                }
            }
        }
        self.commerce
            .owned
            .entry(c.owner.clone())
            .or_default()
            .insert(c.id.clone());
        self.commerce.channels.insert(c.id.clone(), c);
    }

    pub(crate) fn put_channel(&mut self, c: ChannelRow) {
        self.record(Table::Channels, c.id.as_str(), &c);
        self.index_channel(c);
    }

    fn index_post(&mut self, p: PostRow) {
        self.commerce
            .post_seq
            .insert(p.id.clone(), (p.channel_id.clone(), p.seq));
        self.commerce
            .posts
            .entry(p.channel_id.clone())
            .or_default()
            .insert(p.seq, p);
    }

    pub(crate) fn put_post(&mut self, p: PostRow) {
        self.record(Table::ChannelPosts, &post_key(&p.channel_id, p.seq), &p);
        self.index_post(p);
    }

    fn index_sub(&mut self, channel: &ChannelId, user: &UserUuid) {
        self.commerce
            .subs
            .entry(channel.clone())
            .or_default()
            .insert(user.clone());
        self.commerce
            .subs_of
            .entry(user.clone())
            .or_default()
            .insert(channel.clone());
    }

    pub(crate) fn is_subscribed(&self, channel: &ChannelId, user: &UserUuid) -> bool {
        self.commerce
            .subs
            .get(channel)
            .is_some_and(|s| s.contains(user))
    }

    /// Subscribes `user` (no-op when already subscribed).
    pub(crate) fn put_sub(&mut self, channel: &ChannelId, user: &UserUuid, now: UnixMs) {
        if self.is_subscribed(channel, user) {
            return;
        }
        let row = SubRow {
            channel_id: channel.clone(),
            user: user.clone(),
            since: now,
        };
        self.record(Table::ChannelSubs, &pair_key(channel, user), &row);
        self.index_sub(channel, user);
    }

    /// Unsubscribes `user` (no-op when not subscribed).
    pub(crate) fn delete_sub(&mut self, channel: &ChannelId, user: &UserUuid) {
        if !self.is_subscribed(channel, user) {
            return;
        }
        if let Some(s) = self.commerce.subs.get_mut(channel) {
            s.remove(user);
            if s.is_empty() {
                self.commerce.subs.remove(channel);
            }
        }
        if let Some(s) = self.commerce.subs_of.get_mut(user) {
            s.remove(channel);
            if s.is_empty() {
                self.commerce.subs_of.remove(user);
            }
        }
        self.record_delete(Table::ChannelSubs, &pair_key(channel, user));
    }

    pub(crate) fn quota_of(&self, user: &UserUuid) -> QuotaRow {
        self.commerce.quota.get(user).cloned().unwrap_or_default()
    }

    pub(crate) fn put_quota(&mut self, user: &UserUuid, q: QuotaRow) {
        self.record(Table::ChannelQuota, user.as_str(), &q);
        self.commerce.quota.insert(user.clone(), q);
    }

    // ---- orders and payments

    fn index_order(&mut self, o: OrderRow) {
        let c = &mut self.commerce;
        if let Ok(alias) = AliasId::parse(&o.target)
            && o.kind == OrderKind::Vanity
        {
            if o.holds_alias() {
                c.alias_hold.insert(alias, o.id.clone());
            } else if c.alias_hold.get(&alias) == Some(&o.id) {
                c.alias_hold.remove(&alias);
            }
        }
        if let Ok(ch) = ChannelId::parse(&o.target)
            && o.kind == OrderKind::ChannelTrade
        {
            if o.locks_channel() {
                c.channel_lock.insert(ch, o.id.clone());
            } else if c.channel_lock.get(&ch) == Some(&o.id) {
                c.channel_lock.remove(&ch);
            }
        }
        c.orders.insert(o.id.clone(), o);
    }

    /// Stores an order (and arms its expiry while pending).
    pub(crate) fn put_order(&mut self, o: OrderRow) {
        self.record(Table::Orders, o.id.as_str(), &o);
        if o.state == OrderState::Pending {
            self.timers
                .insert((o.expires_at, Timer::Order(o.id.clone())));
        }
        self.index_order(o);
    }

    fn index_payment(&mut self, p: PaymentRow) {
        self.commerce
            .payments_of
            .entry(p.order_id.clone())
            .or_default()
            .insert(p.payment_id.clone());
        self.commerce.payments.insert(p.payment_id.clone(), p);
    }

    pub(crate) fn put_payment(&mut self, p: PaymentRow) {
        self.record(Table::Payments, &p.payment_id, &p);
        self.index_payment(p);
    }

    pub(crate) fn put_alias_row(&mut self, a: AliasRow) {
        self.record(Table::Aliases, a.alias.as_str(), &a);
        self.commerce.aliases.insert(a.alias.clone(), a);
    }

    /// Whether `alias` was ever sold or retired (it can never be sold or assigned again).
    pub(crate) fn alias_spent(&self, alias: &AliasId) -> bool {
        self.commerce.aliases.contains_key(alias)
    }

    /// The account that retired `alias` (its former handle), if any.
    pub(crate) fn retired_alias_owner(&self, alias: &AliasId) -> Option<&UserUuid> {
        self.commerce
            .aliases
            .get(alias)
            .filter(|a| a.fate == AliasFate::Retired)
            .map(|a| &a.user)
    }

    /// Keeps a confirmation for redelivery (purged by the order's timer after
    /// [`CONFIRM_REDELIVERY_TTL_MS`]); drops the user's oldest beyond
    /// [`MAX_PENDING_CONFIRMS_PER_USER`].
    pub(crate) fn put_pending_confirm(&mut self, p: PendingConfirmRow) {
        // PLANTED BUG (PendingConfirmNotPersisted): the kept confirmation is not written.
        if !crate::planted::planted!(self, PendingConfirmNotPersisted) {
            self.record(Table::PendingConfirms, &pair_key(&p.user, &p.order_id), &p);
        }
        self.timers.insert((
            p.at.plus_ms(CONFIRM_REDELIVERY_TTL_MS),
            Timer::Order(p.order_id.clone()),
        ));
        let user = p.user.clone();
        self.commerce
            .pending_confirms
            .insert((p.user.clone(), p.order_id.clone()), p);
        let mut mine: Vec<(UnixMs, OrderId)> = self
            .commerce
            .pending_confirms
            .values()
            .filter(|r| r.user == user)
            .map(|r| (r.at, r.order_id.clone()))
            .collect();
        if mine.len() > MAX_PENDING_CONFIRMS_PER_USER {
            mine.sort();
            let excess = mine.len() - MAX_PENDING_CONFIRMS_PER_USER;
            for (_, order) in mine.into_iter().take(excess) {
                self.delete_pending_confirm(&user, &order);
            }
        }
    }

    /// Purges `user`'s kept confirmation of `order` once its redelivery time is over.
    pub(crate) fn expire_pending_confirm(&mut self, now: UnixMs, user: &UserUuid, order: &OrderId) {
        let over = self
            .commerce
            .pending_confirms
            .get(&(user.clone(), order.clone()))
            .is_some_and(|p| now >= p.at.plus_ms(CONFIRM_REDELIVERY_TTL_MS));
        if over {
            self.delete_pending_confirm(user, order);
        }
    }

    pub(crate) fn delete_pending_confirm(&mut self, user: &UserUuid, order: &OrderId) {
        if self
            .commerce
            .pending_confirms
            .remove(&(user.clone(), order.clone()))
            .is_some()
        {
            self.record_delete(Table::PendingConfirms, &pair_key(user, order));
        }
    }
}
