//! The commerce records of a run (orders, listed channels, binds, what the audit saw) and
//! the payment stand-ins the scripts pay through: written by `market`, read by the
//! commerce oracles.

use std::collections::{BTreeMap, BTreeSet};

use wire::http::{OrderKind, OrderState};

use crate::faults::WebhookFaults;
use standins::PaymentProcessor;

/// An order a client placed, as the client learned it.
#[derive(Debug, Clone)]
pub(crate) struct OrderRec {
    /// Order id.
    pub(crate) order_id: String,
    /// Kind.
    pub(crate) kind: OrderKind,
    /// Buyer (client index).
    pub(crate) client: usize,
    /// Alias, channel id, or "" for quota.
    pub(crate) target: String,
    /// Price.
    pub(crate) price: u64,
    /// Simulated ms at which the first request of the order was sent.
    pub(crate) requested_ms: u64,
    /// Paid in full through the stand-in (genuine signatures).
    pub(crate) paid: bool,
    /// Only a forger "paid" it.
    pub(crate) forged_only: bool,
    /// The bind loop is done with it (bound, or refused).
    pub(crate) settled: bool,
}

/// A channel a client created and listed.
#[derive(Debug, Clone)]
pub(crate) struct ChannelRec {
    /// Channel id.
    pub(crate) id: String,
    /// Creator (client index).
    pub(crate) creator: usize,
}

/// A successful bind.
#[derive(Debug, Clone)]
pub(crate) struct BindRec {
    /// Who.
    pub(crate) client: usize,
    /// The alias it now has.
    pub(crate) alias: String,
    /// The order it bound.
    pub(crate) order_id: String,
}

/// A bind the audit tried on purpose, and the relay's answer.
#[derive(Debug, Clone)]
pub(crate) struct BindProbe {
    /// Who tried (the order's buyer).
    pub(crate) client: usize,
    /// The order.
    pub(crate) order_id: String,
    /// What the order was: `expired` (never confirmed) or `bound` (bound by this client
    /// already, whose alias it still is).
    pub(crate) what: &'static str,
    /// The relay's status (`None`: no answer).
    pub(crate) status: Option<u16>,
}

/// What the audit saw through the public API.
#[derive(Debug, Clone, Default)]
pub(crate) struct Audit {
    /// V5 state per order id (`None`: no answer).
    pub(crate) states: BTreeMap<String, Option<OrderState>>,
    /// Whether vanity search for exactly this alias lists it.
    pub(crate) searchable: BTreeMap<String, bool>,
    /// Channel detail `for_sale` per channel (auditor's view).
    pub(crate) for_sale: BTreeMap<String, bool>,
    /// Channels each client owns (`channels/mine`, role owner).
    pub(crate) owned: BTreeMap<usize, BTreeSet<String>>,
    /// Buy probes: channel -> the relay's answer (the new order id, or the error).
    pub(crate) probes: BTreeMap<String, Result<String, String>>,
    /// Binds tried on purpose at the audit: of expired orders, and again of bound ones.
    pub(crate) bind_probes: Vec<BindProbe>,
    /// Orders some bind was sent for (answered or not).
    pub(crate) bind_attempted: BTreeSet<String>,
    /// Orders with webhook copies still in flight at the final clock jump.
    pub(crate) late_at_final_jump: BTreeSet<String>,
    /// The relay's clock (Unix ms) just after the final jump: an order created at or after
    /// it (a dishonest client still at work) has had no time to expire.
    pub(crate) final_jump_relay_ms: Option<u64>,
    /// The audit finished.
    pub(crate) done: bool,
}

/// Commerce state shared between hosts (the world's [`ledger`](super::World::ledger)).
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    /// Orders by placement.
    pub(crate) orders: Vec<OrderRec>,
    /// Listed channels by listing.
    pub(crate) channels: Vec<ChannelRec>,
    /// Successful binds.
    pub(crate) binds: Vec<BindRec>,
    /// Channels each client created (2xx answers seen).
    pub(crate) created: BTreeMap<usize, u32>,
    /// Audit results.
    pub(crate) audit: Audit,
}

/// The stand-ins a client script pays through.
#[derive(Debug, Clone)]
pub(crate) struct Payments {
    /// The genuine processor (shares the relay's secret).
    pub(crate) processor: PaymentProcessor,
    /// A forger: same protocol, wrong secret.
    pub(crate) forger: PaymentProcessor,
    /// Webhook fault bounds from the plan.
    pub(crate) faults: WebhookFaults,
    /// Whether the `webhook` fault kind is on.
    pub(crate) enabled: bool,
}
