//! The commerce tables on the working state: channels, orders, payments and sold aliases
//! loaded, written and expired (see `crate::commerce_state` for their records).

use crate::commerce_state::{
    AliasFate, AliasRow, CONFIRM_REDELIVERY_TTL_MS, ChannelRow, MAX_PENDING_CONFIRMS_PER_USER,
    OrderRow, PaymentRow, PendingConfirmRow, PostRow, QuotaRow, SubRow, pair_key, post_key,
};
use crate::rows::{Timer, decode};
use crate::state::State;
use crate::store::{Snapshot, StoreError, Table};
use wire::http::{OrderKind, OrderState};
use wire::{AliasId, ChannelId, OrderId, UnixMs, UserUuid};

impl State {
    /// Loads the commerce tables (called at the end of [`State::load`]): the registry shard's
    /// (`crate::handoff::REGISTRY_SHARD`) channels, orders, payments and sold aliases, and the
    /// kept confirmations of `place`'s users (a buyer's `sync` sends them).
    pub(crate) fn load_commerce(
        &mut self,
        snapshot: &Snapshot,
        place: crate::handoff::ShardPlace,
    ) -> Result<(), StoreError> {
        let rows = |t: Table| snapshot.get(&t).into_iter().flat_map(|m| m.iter());
        for (k, v) in rows(Table::PendingConfirms) {
            let p: PendingConfirmRow = decode(Table::PendingConfirms, k, v)?;
            if place.elsewhere(&p.user).is_some() {
                continue;
            }
            self.timers.insert((
                p.at.plus_ms(CONFIRM_REDELIVERY_TTL_MS),
                Timer::Confirm(p.user.clone(), p.order_id.clone()),
            ));
            self.commerce
                .pending_confirms
                .insert((p.user.clone(), p.order_id.clone()), p);
        }
        if place.me() != crate::handoff::REGISTRY_SHARD {
            return Ok(());
        }
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
            self.arm_order(&o);
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

    /// Arms `o`'s timer: its expiry while pending, its deletion once over and kept for the
    /// retention.
    fn arm_order(&mut self, o: &OrderRow) {
        let at = if o.state == OrderState::Pending {
            Some(o.expires_at)
        } else {
            o.over_at().map(|at| at.plus_ms(self.order_retention_ms))
        };
        if let Some(at) = at {
            self.timers.insert((at, Timer::Order(o.id.clone())));
        }
    }

    /// Stores an order (and arms its expiry while pending, its deletion once over).
    pub(crate) fn put_order(&mut self, o: OrderRow) {
        self.record(Table::Orders, o.id.as_str(), &o);
        self.arm_order(&o);
        self.index_order(o);
    }

    /// Deletes order `id` and its payments from memory and the store (an order that is over,
    /// past the retention).
    pub(crate) fn delete_order(&mut self, id: &OrderId) {
        let Some(o) = self.commerce.orders.remove(id) else {
            return;
        };
        self.record_delete(Table::Orders, id.as_str());
        if let Ok(alias) = AliasId::parse(&o.target)
            && self.commerce.alias_hold.get(&alias) == Some(id)
        {
            self.commerce.alias_hold.remove(&alias);
        }
        if let Ok(ch) = ChannelId::parse(&o.target)
            && self.commerce.channel_lock.get(&ch) == Some(id)
        {
            self.commerce.channel_lock.remove(&ch);
        }
        for payment in self.commerce.payments_of.remove(id).into_iter().flatten() {
            self.commerce.payments.remove(&payment);
            self.record_delete(Table::Payments, &payment);
        }
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

    /// Keeps a confirmation for redelivery (purged by its timer after
    /// [`CONFIRM_REDELIVERY_TTL_MS`]); drops the user's oldest beyond
    /// [`MAX_PENDING_CONFIRMS_PER_USER`].
    pub(crate) fn put_pending_confirm(&mut self, p: PendingConfirmRow) {
        // PLANTED BUG (PendingConfirmNotPersisted): the kept confirmation is not written.
        if !crate::planted::planted!(self, PendingConfirmNotPersisted) {
            self.record(Table::PendingConfirms, &pair_key(&p.user, &p.order_id), &p);
        }
        self.timers.insert((
            p.at.plus_ms(CONFIRM_REDELIVERY_TTL_MS),
            Timer::Confirm(p.user.clone(), p.order_id.clone()),
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
