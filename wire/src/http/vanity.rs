//! Vanity aliases, payment orders and the payment webhook (PROTOCOL.md §1.5).

use serde::{Deserialize, Serialize};

use crate::ids::{AliasId, OrderId};
use crate::time::IsoTime;

/// A vanity alias's price tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VanityTier {
    /// The most sought-after patterns.
    Top,
    /// Strong patterns.
    Premium,
    /// Everything else.
    Standard,
}

/// V1 element.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VanityItem {
    /// The alias for sale.
    pub alias_id: AliasId,
    /// Whole USDT, computed when asked.
    pub price_usdt: u64,
    /// Tier.
    pub tier: VanityTier,
    /// Shown in the featured list.
    pub is_featured: bool,
}

/// V2 and V4 request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PurchaseRequest {
    /// The alias to buy.
    pub alias_id: AliasId,
}

/// V2 response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PurchaseOrder {
    /// The order.
    pub order_id: OrderId,
    /// The alias held for the buyer.
    pub alias_id: AliasId,
    /// Whole USDT.
    pub price_usdt: u64,
    /// The same price under the Android SDK's field name.
    pub amount_usdt: u64,
    /// Hosted payment page.
    pub payment_url: String,
    /// Deprecated raw receiving address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pay_to: Option<String>,
    /// When the hold ends.
    pub expired_at: IsoTime,
}

/// V3 request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BindRequest {
    /// A confirmed order of the caller.
    pub order_id: OrderId,
}

/// V3 response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BindResponse {
    /// The caller's alias from now on.
    pub alias_id: AliasId,
}

/// V4 response (deprecated).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReserveOrder {
    /// The order.
    pub order_id: OrderId,
    /// The alias held.
    pub alias_id: AliasId,
    /// Whole USDT (web client's name).
    pub price_usdt: u64,
    /// Whole USDT (Android's and the README's name).
    pub price: u64,
    /// Receiving address.
    pub pay_to: String,
    /// When the hold ends.
    pub expired_at: IsoTime,
}

/// A payment order's lifecycle state: `pending → confirmed | expired`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OrderState {
    /// Waiting for payment.
    Pending,
    /// Paid and applied.
    Confirmed,
    /// Not paid in time; whatever it held is released.
    Expired,
}

/// What an order buys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OrderKind {
    /// A vanity alias (V2/V4).
    Vanity,
    /// A channel (CH10).
    ChannelTrade,
    /// One channel-creation seat (CH11).
    ChannelQuota,
}

/// V5 response (deprecated, still polled by apps for every order kind).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderStatusResponse {
    /// State; apps test for exactly `confirmed` and `expired`.
    pub status: OrderState,
    /// The alias for a vanity order; `""` for other kinds (iOS requires the field).
    pub alias_id: String,
    /// What the order buys (an extension).
    pub kind: OrderKind,
    /// The alias, channel or order id the order refers to (as in `payment_confirmed`).
    pub ref_id: String,
}

/// The payment processor's verdict in a webhook.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PaymentStatus {
    /// The full amount (or more) arrived.
    Finished,
    /// Less than the price arrived.
    PartiallyPaid,
    /// The payment failed.
    Failed,
}

/// Name of the header carrying `hex(HMAC-SHA256(secret, raw body))` on a payment webhook.
pub const PAYMENT_SIGNATURE_HEADER: &str = "x-payment-signature";

/// Body of a payment webhook (the payment processor → the relay), signed with
/// [`PAYMENT_SIGNATURE_HEADER`] over the exact raw body bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentWebhook {
    /// The processor's payment id; a replay carries the same one.
    pub payment_id: String,
    /// The relay's order.
    pub order_id: OrderId,
    /// Verdict.
    pub payment_status: PaymentStatus,
    /// Whole USDT received so far.
    pub paid_usdt: u64,
}
