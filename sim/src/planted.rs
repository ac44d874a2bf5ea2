//! Planted bugs (feature `planted-bugs`, test-only): realistic defects the simulator must catch,
//! switched on one at a time through [`RunConfig::planted`](crate::RunConfig::planted).
//!
//! The relay-core ones are [`relay_core::PlantedBug`] (the relay's `Config` carries the
//! switch); the shell's ones are planted in the simulator's relay server: through its
//! [`ServeLimits`] ([`Planted::NoWriteDeadline`]) or by leaving its push delivery out
//! ([`Planted::NoPushDelivery`]). The
//! detection test (`sim/tests/detection.rs`) sweeps seeds with each one planted and asserts
//! that an oracle catches it; `simulate --plant NAME` runs any sweep with one planted:
//!
//! ```text
//! cargo run --release -p sim --features planted-bugs --bin simulate -- --plant seq-not-persisted --seeds 0..40
//! ```
//!
//! Nothing but `sim`'s own dev-dependency (its tests) and an explicit `--features` turns the
//! feature on; a build of the `relay` binary for users has neither this module nor the
//! relay-core switch.

use std::fmt;
use std::str::FromStr;

use relay_core::PlantedBug;

use seam::net::ServeLimits;

/// A write deadline no run outlives (about 11.6 days), for [`Planted::NoWriteDeadline`].
pub const NO_WRITE_DEADLINE_MS: u64 = 1_000_000_000;

/// One planted bug.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Planted {
    /// A bug planted in relay-core (see [`PlantedBug`]).
    Relay(PlantedBug),
    /// The relay server shell: a write to a client that stopped reading never times out, so
    /// the socket task blocks in it and the connection is held forever (the server's write
    /// deadline, [`ServeLimits::write_deadline_ms`], is set to [`NO_WRITE_DEADLINE_MS`]).
    NoWriteDeadline,
    /// The relay server shell: push delivery is never wired up
    /// ([`RelayServer::with_push`](relay_server::RelayServer::with_push) not called), so the
    /// relay's push outputs are dropped and offline users are never woken.
    NoPushDelivery,
    /// The shared store of the failover topology ([`crate::failover`]) checks no fencing
    /// epoch: a frozen leader that resumes after the standby took over still commits, next to
    /// the new leader (split brain).
    UnfencedStore,
    /// The cluster topology's shard stores ([`crate::cluster`]) check no shard epoch: a node
    /// that lost a shard (frozen past its lease, cut from the database) still commits for
    /// it after the move.
    ShardUnfenced,
    /// The cluster topology's membership renews a node's lease after it lapsed, and its
    /// renewal writes the shards it last owned back to it under their current epochs: the
    /// node that took them over meanwhile and the renewed one both serve them.
    LeaseRenewedAfterLapse,
}

impl Planted {
    /// Every planted bug.
    pub const ALL: [Self; 38] = [
        Self::Relay(PlantedBug::AckWithoutCommit),
        Self::Relay(PlantedBug::ReceiptClearsBeyondSeq),
        Self::Relay(PlantedBug::NoMessageDedup),
        Self::Relay(PlantedBug::SyncStopsAtEmptyConversation),
        Self::Relay(PlantedBug::SeqNotPersisted),
        Self::Relay(PlantedBug::SyncIgnoresWindow),
        Self::Relay(PlantedBug::TokenSignatureIgnored),
        Self::Relay(PlantedBug::AuthChallengeReusable),
        Self::Relay(PlantedBug::TicketReusable),
        Self::Relay(PlantedBug::RetractByAnyMember),
        Self::Relay(PlantedBug::CallFromNotStamped),
        Self::Relay(PlantedBug::ReceiptBeyondSent),
        Self::Relay(PlantedBug::RetractDropNotPersisted),
        Self::Relay(PlantedBug::ReceiptDeleteNotPersisted),
        Self::Relay(PlantedBug::PendingConfirmNotPersisted),
        Self::Relay(PlantedBug::LatePaymentIgnoresHolds),
        Self::Relay(PlantedBug::WindowNotRefilledOnReceipt),
        Self::Relay(PlantedBug::UploadByAnyone),
        Self::Relay(PlantedBug::FriendAcceptByRequester),
        Self::Relay(PlantedBug::ListingByAnyone),
        Self::Relay(PlantedBug::CallToAnyone),
        Self::Relay(PlantedBug::TicketTtlUnits),
        Self::Relay(PlantedBug::ChallengeSignatureIgnored),
        Self::Relay(PlantedBug::SpentNotPersisted),
        Self::Relay(PlantedBug::EvictedTombstonesForgotten),
        Self::Relay(PlantedBug::EvictedQueueForgotten),
        Self::Relay(PlantedBug::EvictedAccountForgotten),
        Self::Relay(PlantedBug::EvictedConversationForgotten),
        Self::Relay(PlantedBug::HandoffRowDeletedOnSend),
        Self::Relay(PlantedBug::ReceiptAtReadersShard),
        Self::Relay(PlantedBug::HandoffApplyNotIdempotent),
        Self::Relay(PlantedBug::HandoffGapNotHeld),
        Self::Relay(PlantedBug::HandoffOutboxNotResumed),
        Self::NoWriteDeadline,
        Self::NoPushDelivery,
        Self::UnfencedStore,
        Self::ShardUnfenced,
        Self::LeaseRenewedAfterLapse,
    ];

    /// CLI name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Relay(PlantedBug::AckWithoutCommit) => "ack-without-commit",
            Self::Relay(PlantedBug::ReceiptClearsBeyondSeq) => "receipt-clears-beyond-seq",
            Self::Relay(PlantedBug::NoMessageDedup) => "no-message-dedup",
            Self::Relay(PlantedBug::SyncStopsAtEmptyConversation) => {
                "sync-stops-at-empty-conversation"
            }
            Self::Relay(PlantedBug::SeqNotPersisted) => "seq-not-persisted",
            Self::Relay(PlantedBug::SyncIgnoresWindow) => "sync-ignores-window",
            Self::Relay(PlantedBug::TokenSignatureIgnored) => "token-signature-ignored",
            Self::Relay(PlantedBug::AuthChallengeReusable) => "auth-challenge-reusable",
            Self::Relay(PlantedBug::TicketReusable) => "ticket-reusable",
            Self::Relay(PlantedBug::RetractByAnyMember) => "retract-by-any-member",
            Self::Relay(PlantedBug::CallFromNotStamped) => "call-from-not-stamped",
            Self::Relay(PlantedBug::ReceiptBeyondSent) => "receipt-beyond-sent",
            Self::Relay(PlantedBug::RetractDropNotPersisted) => "retract-drop-not-persisted",
            Self::Relay(PlantedBug::ReceiptDeleteNotPersisted) => "receipt-delete-not-persisted",
            Self::Relay(PlantedBug::PendingConfirmNotPersisted) => "pending-confirm-not-persisted",
            Self::Relay(PlantedBug::LatePaymentIgnoresHolds) => "late-payment-ignores-holds",
            Self::Relay(PlantedBug::WindowNotRefilledOnReceipt) => "window-not-refilled-on-receipt",
            Self::Relay(PlantedBug::UploadByAnyone) => "upload-by-anyone",
            Self::Relay(PlantedBug::FriendAcceptByRequester) => "friend-accept-by-requester",
            Self::Relay(PlantedBug::ListingByAnyone) => "listing-by-anyone",
            Self::Relay(PlantedBug::CallToAnyone) => "call-to-anyone",
            Self::Relay(PlantedBug::TicketTtlUnits) => "ticket-ttl-units",
            Self::Relay(PlantedBug::ChallengeSignatureIgnored) => "challenge-signature-ignored",
            Self::Relay(PlantedBug::SpentNotPersisted) => "spent-not-persisted",
            Self::Relay(PlantedBug::EvictedTombstonesForgotten) => "evicted-tombstones-forgotten",
            Self::Relay(PlantedBug::EvictedQueueForgotten) => "evicted-queue-forgotten",
            Self::Relay(PlantedBug::EvictedAccountForgotten) => "evicted-account-forgotten",
            Self::Relay(PlantedBug::EvictedConversationForgotten) => {
                "evicted-conversation-forgotten"
            }
            Self::Relay(PlantedBug::HandoffRowDeletedOnSend) => "handoff-row-deleted-on-send",
            Self::Relay(PlantedBug::ReceiptAtReadersShard) => "receipt-at-readers-shard",
            Self::Relay(PlantedBug::HandoffApplyNotIdempotent) => "handoff-apply-not-idempotent",
            Self::Relay(PlantedBug::HandoffGapNotHeld) => "handoff-gap-not-held",
            Self::Relay(PlantedBug::HandoffOutboxNotResumed) => "handoff-outbox-not-resumed",
            Self::NoWriteDeadline => "no-write-deadline",
            Self::NoPushDelivery => "no-push-delivery",
            Self::UnfencedStore => "unfenced-store",
            Self::ShardUnfenced => "shard-unfenced",
            Self::LeaseRenewedAfterLapse => "lease-renewed-after-lapse",
        }
    }

    /// The relay-core switch, if the bug lives there.
    pub fn relay_bug(self) -> Option<PlantedBug> {
        match self {
            Self::Relay(bug) => Some(bug),
            Self::NoWriteDeadline
            | Self::NoPushDelivery
            | Self::UnfencedStore
            | Self::ShardUnfenced
            | Self::LeaseRenewedAfterLapse => None,
        }
    }

    /// The relay server's limits with this bug planted.
    pub fn serve_limits(self, limits: ServeLimits) -> ServeLimits {
        match self {
            Self::NoWriteDeadline => ServeLimits {
                write_deadline_ms: NO_WRITE_DEADLINE_MS,
                ..limits
            },
            Self::Relay(_)
            | Self::NoPushDelivery
            | Self::UnfencedStore
            | Self::ShardUnfenced
            | Self::LeaseRenewedAfterLapse => limits,
        }
    }
}

impl fmt::Display for Planted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Planted {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|p| p.name()).collect();
                format!("unknown planted bug {s:?}; one of {}", names.join(", "))
            })
    }
}
