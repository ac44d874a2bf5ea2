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
    /// When a vanity order was bound (absent in rows written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) bound_at: Option<UnixMs>,
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

    /// When this order was over, if it is: expired unpaid, or confirmed and all it sold given
    /// (a vanity order once bound). `None` while pending, while a paid alias waits to be bound,
    /// and while a refund is owed: such an order is kept (see [`ORDER_RETENTION_MS`](crate::limits::ORDER_RETENTION_MS)).
    pub(crate) fn over_at(&self) -> Option<UnixMs> {
        if self.refund_needed {
            return None;
        }
        match (self.state, self.kind) {
            (OrderState::Pending, _) => None,
            (OrderState::Expired, _) => Some(self.expires_at),
            (OrderState::Confirmed, OrderKind::Vanity) if !self.used => None,
            (OrderState::Confirmed, OrderKind::Vanity) => Some(
                self.bound_at
                    .or(self.confirmed_at)
                    .unwrap_or(self.expires_at),
            ),
            (OrderState::Confirmed, _) => Some(self.confirmed_at.unwrap_or(self.expires_at)),
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

pub(crate) fn post_key(channel: &ChannelId, seq: u64) -> String {
    format!("{channel}/{seq:020}")
}

pub(crate) fn pair_key(a: &impl std::fmt::Display, b: &impl std::fmt::Display) -> String {
    format!("{a}/{b}")
}
