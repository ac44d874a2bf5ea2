//! [`Violation`]: one broken invariant, named by the [`Oracle`] that found it. A leaf of the
//! crate: the oracles, the raw clients' own observations, Jepsen mode and the shrinker all
//! produce or read it.

use std::fmt;

/// One broken invariant.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Violation {
    /// The oracle that found it.
    pub oracle: Oracle,
    /// What was seen.
    pub detail: String,
}

impl Violation {
    /// A violation of `oracle`.
    pub fn new(oracle: Oracle, detail: impl Into<String>) -> Self {
        Self {
            oracle,
            detail: detail.into(),
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {}", self.oracle, self.detail)
    }
}

/// The oracle a [`Violation`] names: every check that can fail a run (the simulator's, the
/// drills' and Jepsen mode's). Shown, compared and sorted by its [`name`](Oracle::name), the
/// kebab-case word reports and replay files carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Oracle {
    /// `duplicate-delivery`.
    DuplicateDelivery,
    /// `seq-reused`.
    SeqReused,
    /// `delivered-exactly-once`.
    DeliveredExactlyOnce,
    /// `liveness`.
    Liveness,
    /// `seq-order`.
    SeqOrder,
    /// `seq-gap-free`.
    SeqGapFree,
    /// `seq-unique`.
    SeqUnique,
    /// `retract-drops`.
    RetractDrops,
    /// `receipt-drops`.
    ReceiptDrops,
    /// `sync-complete`.
    SyncComplete,
    /// `non-participant`.
    NonParticipant,
    /// `receipts`.
    Receipts,
    /// `receipts-clear`.
    ReceiptsClear,
    /// `fail-stop`.
    FailStop,
    /// `store-intact`.
    StoreIntact,
    /// `queue-summaries`.
    QueueSummaries,
    /// `contacts-index`.
    ContactsIndex,
    /// `outbox-drained`.
    OutboxDrained,
    /// `probes`.
    Probes,
    /// `retract-lands`.
    RetractLands,
    /// `media`.
    Media,
    /// `push`.
    Push,
    /// `authz`.
    Authz,
    /// `bad-input`.
    BadInput,
    /// `stuck-client`.
    StuckClient,
    /// `resources`.
    Resources,
    /// `canary-store`.
    CanaryStore,
    /// `canary-logs`.
    CanaryLogs,
    /// `setup`.
    Setup,
    /// `host-error`.
    HostError,
    /// `panic`.
    Panic,
    /// `payment-applied-once`.
    PaymentAppliedOnce,
    /// `alias-unique`.
    AliasUnique,
    /// `channel-single-owner`.
    ChannelSingleOwner,
    /// `holds-released`.
    HoldsReleased,
    /// `quota`.
    Quota,
    /// `commerce-model`.
    CommerceModel,
    /// `crash`.
    Crash,
    /// `expiry`.
    Expiry,
    /// `spent-bound`.
    SpentBound,
    /// `drills`.
    Drills,
    /// `lookup`.
    Lookup,
    /// `tokenless`.
    Tokenless,
    /// `values`.
    Values,
    /// `reads`.
    Reads,
    /// `webhook-counts`.
    WebhookCounts,
    /// `push-off`.
    PushOff,
    /// `dedup`.
    Dedup,
    /// `retract`.
    Retract,
    /// `credentials`.
    Credentials,
    /// `limit-exact`.
    LimitExact,
    /// `push-policy`.
    PushPolicy,
    /// `order-records`.
    OrderRecords,
    /// `bind-state`.
    BindState,
    /// `queue-bounds`.
    QueueBounds,
    /// `ack-lost`.
    AckLost,
    /// `unexpected-answer`.
    UnexpectedAnswer,
    /// `order-confirmed`.
    OrderConfirmed,
    /// `forged-refused`.
    ForgedRefused,
    /// `receipt-kept`.
    ReceiptKept,
    /// `shard-epochs`.
    ShardEpochs,
    /// `takeover`.
    Takeover,
    /// `ownership`.
    Ownership,
    /// `handoffs-drained`.
    HandoffsDrained,
}

impl Oracle {
    /// Every oracle, in the order they are declared.
    pub const ALL: [Self; 64] = [
        Self::DuplicateDelivery,
        Self::SeqReused,
        Self::DeliveredExactlyOnce,
        Self::Liveness,
        Self::SeqOrder,
        Self::SeqGapFree,
        Self::SeqUnique,
        Self::RetractDrops,
        Self::ReceiptDrops,
        Self::SyncComplete,
        Self::NonParticipant,
        Self::Receipts,
        Self::ReceiptsClear,
        Self::FailStop,
        Self::StoreIntact,
        Self::QueueSummaries,
        Self::ContactsIndex,
        Self::OutboxDrained,
        Self::Probes,
        Self::RetractLands,
        Self::Media,
        Self::Push,
        Self::Authz,
        Self::BadInput,
        Self::StuckClient,
        Self::Resources,
        Self::CanaryStore,
        Self::CanaryLogs,
        Self::Setup,
        Self::HostError,
        Self::Panic,
        Self::PaymentAppliedOnce,
        Self::AliasUnique,
        Self::ChannelSingleOwner,
        Self::HoldsReleased,
        Self::Quota,
        Self::CommerceModel,
        Self::Crash,
        Self::Expiry,
        Self::SpentBound,
        Self::Drills,
        Self::Lookup,
        Self::Tokenless,
        Self::Values,
        Self::Reads,
        Self::WebhookCounts,
        Self::PushOff,
        Self::Dedup,
        Self::Retract,
        Self::Credentials,
        Self::LimitExact,
        Self::PushPolicy,
        Self::OrderRecords,
        Self::BindState,
        Self::QueueBounds,
        Self::AckLost,
        Self::UnexpectedAnswer,
        Self::OrderConfirmed,
        Self::ForgedRefused,
        Self::ReceiptKept,
        Self::ShardEpochs,
        Self::Takeover,
        Self::Ownership,
        Self::HandoffsDrained,
    ];

    /// The oracle's name in reports (`duplicate-delivery` ...).
    pub const fn name(self) -> &'static str {
        match self {
            Self::DuplicateDelivery => "duplicate-delivery",
            Self::SeqReused => "seq-reused",
            Self::DeliveredExactlyOnce => "delivered-exactly-once",
            Self::Liveness => "liveness",
            Self::SeqOrder => "seq-order",
            Self::SeqGapFree => "seq-gap-free",
            Self::SeqUnique => "seq-unique",
            Self::RetractDrops => "retract-drops",
            Self::ReceiptDrops => "receipt-drops",
            Self::SyncComplete => "sync-complete",
            Self::NonParticipant => "non-participant",
            Self::Receipts => "receipts",
            Self::ReceiptsClear => "receipts-clear",
            Self::FailStop => "fail-stop",
            Self::StoreIntact => "store-intact",
            Self::QueueSummaries => "queue-summaries",
            Self::ContactsIndex => "contacts-index",
            Self::OutboxDrained => "outbox-drained",
            Self::Probes => "probes",
            Self::RetractLands => "retract-lands",
            Self::Media => "media",
            Self::Push => "push",
            Self::Authz => "authz",
            Self::BadInput => "bad-input",
            Self::StuckClient => "stuck-client",
            Self::Resources => "resources",
            Self::CanaryStore => "canary-store",
            Self::CanaryLogs => "canary-logs",
            Self::Setup => "setup",
            Self::HostError => "host-error",
            Self::Panic => "panic",
            Self::PaymentAppliedOnce => "payment-applied-once",
            Self::AliasUnique => "alias-unique",
            Self::ChannelSingleOwner => "channel-single-owner",
            Self::HoldsReleased => "holds-released",
            Self::Quota => "quota",
            Self::CommerceModel => "commerce-model",
            Self::Crash => "crash",
            Self::Expiry => "expiry",
            Self::SpentBound => "spent-bound",
            Self::Drills => "drills",
            Self::Lookup => "lookup",
            Self::Tokenless => "tokenless",
            Self::Values => "values",
            Self::Reads => "reads",
            Self::WebhookCounts => "webhook-counts",
            Self::PushOff => "push-off",
            Self::Dedup => "dedup",
            Self::Retract => "retract",
            Self::Credentials => "credentials",
            Self::LimitExact => "limit-exact",
            Self::PushPolicy => "push-policy",
            Self::OrderRecords => "order-records",
            Self::BindState => "bind-state",
            Self::QueueBounds => "queue-bounds",
            Self::AckLost => "ack-lost",
            Self::UnexpectedAnswer => "unexpected-answer",
            Self::OrderConfirmed => "order-confirmed",
            Self::ForgedRefused => "forged-refused",
            Self::ReceiptKept => "receipt-kept",
            Self::ShardEpochs => "shard-epochs",
            Self::Takeover => "takeover",
            Self::Ownership => "ownership",
            Self::HandoffsDrained => "handoffs-drained",
        }
    }

    /// The oracle named `name`, if there is one.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|o| o.name() == name)
    }

    /// Whether this oracle's violations are usually what another's cause: messages out of
    /// order, missing or late follow from a seq reused, an ack lost or a crash that dropped
    /// state, so a report lists them after those ([`causes_first`]).
    pub const fn is_symptom(self) -> bool {
        matches!(
            self,
            Self::SeqOrder
                | Self::SeqGapFree
                | Self::SeqUnique
                | Self::Liveness
                | Self::DeliveredExactlyOnce
                | Self::SyncComplete
                | Self::OutboxDrained
                | Self::StuckClient
        )
    }
}

/// Sorts report lines (`[oracle] detail`, as a [`Violation`] shows) so that a report leads
/// with what explains the rest: lines of oracles that are not [symptoms](Oracle::is_symptom)
/// first, then the symptoms; each group by text. Duplicates are dropped.
pub fn causes_first(lines: &mut Vec<String>) {
    let symptom = |line: &str| {
        line.strip_prefix('[')
            .and_then(|rest| rest.split_once(']'))
            .and_then(|(name, _)| Oracle::from_name(name))
            .is_some_and(Oracle::is_symptom)
    };
    lines.sort_by(|a, b| (symptom(a), a).cmp(&(symptom(b), b)));
    lines.dedup();
}

impl PartialOrd for Oracle {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// By name, so that violations sort as their reports read.
impl Ord for Oracle {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.name().cmp(other.name())
    }
}

impl fmt::Display for Oracle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::Oracle;

    #[test]
    fn a_report_leads_with_the_cause_not_its_symptoms() {
        let mut lines = vec![
            "[seq-order] conv c: seq 4 after 5".to_owned(),
            "[liveness] m1 never arrived".to_owned(),
            "[seq-reused] conv c seq 5 names m2 and m3".to_owned(),
            "[seq-order] conv c: seq 4 after 5".to_owned(),
            "[ack-lost] m1 acked, then gone".to_owned(),
            "not an oracle line".to_owned(),
        ];
        super::causes_first(&mut lines);
        assert_eq!(
            lines,
            [
                "[ack-lost] m1 acked, then gone",
                "[seq-reused] conv c seq 5 names m2 and m3",
                "not an oracle line",
                "[liveness] m1 never arrived",
                "[seq-order] conv c: seq 4 after 5",
            ]
        );
    }

    #[test]
    fn every_name_is_distinct_and_found_again() {
        let names: std::collections::BTreeSet<&str> =
            Oracle::ALL.iter().map(|o| o.name()).collect();
        assert_eq!(names.len(), Oracle::ALL.len());
        for o in Oracle::ALL {
            assert_eq!(Oracle::from_name(o.name()), Some(o));
        }
        assert_eq!(Oracle::from_name("no-such-oracle"), None);
    }
}
