//! Detection power: known bugs are planted one at a time (feature `planted-bugs`, switched on
//! for `sim`'s tests by its own dev-dependency; see `sim::planted`), and a sweep of seeds
//! must catch each one with the oracle that guards against it — within [`N`] seeds, stopping
//! at the first catch. The same seeds must pass with nothing planted, so a catch is the bug's
//! doing and not noise. Each test prints its row of the table in BENCHMARKS.md ("Simulator:
//! detection power"); `cargo test -p sim --test detection -- --nocapture` shows them.
//!
//! A case sweeps the mix that exposes its bug: the default sweep (small scale, swarm faults,
//! drawn store) unless a bug needs something else (a hub's large backlog needs the medium
//! scale). The full 40-seed table comes from the CLI, e.g.
//! `cargo run --release -p sim --features planted-bugs --bin simulate -- --plant no-message-dedup --seeds 0..40`.

use std::ops::Range;

use relay_core::PlantedBug;
use sim::faults::{FaultSelection, StoreChoice};
use sim::oracles::Oracle;
use sim::planted::Planted;
use sim::scenario::Scale;
use sim::{RunConfig, RunReport, run};

/// Seeds a sweep may spend on one bug before the test fails (the aim: every planted bug
/// caught within 40 seeds).
const N: u64 = 40;

/// One planted bug and the sweep that must catch it.
#[derive(Debug, Clone, Copy)]
struct Case {
    bug: Planted,
    scale: Scale,
    faults: &'static str,
    /// A catch is a violation of one of these.
    oracles: &'static [Oracle],
}

const CASES: [Case; 38] = [
    Case {
        bug: Planted::Relay(PlantedBug::AckWithoutCommit),
        scale: Scale::Small,
        faults: "swarm",
        oracles: &[Oracle::FailStop],
    },
    Case {
        bug: Planted::Relay(PlantedBug::ReceiptClearsBeyondSeq),
        scale: Scale::Small,
        faults: "swarm",
        oracles: &[Oracle::ReceiptsClear],
    },
    Case {
        bug: Planted::Relay(PlantedBug::NoMessageDedup),
        scale: Scale::Small,
        faults: "swarm",
        oracles: &[Oracle::SeqUnique],
    },
    // Re-sends of an author whose tombstones left memory (even seeds run without a tombstone
    // cache, so every conversation's set is read back at each message).
    Case {
        bug: Planted::Relay(PlantedBug::EvictedTombstonesForgotten),
        scale: Scale::Small,
        faults: "swarm",
        oracles: &[Oracle::SeqUnique],
    },
    // Messages queued for a recipient whose queue left memory (even seeds run without a queue
    // cache, so every queue not held by a synced connection is read back when next needed).
    Case {
        bug: Planted::Relay(PlantedBug::EvictedQueueForgotten),
        scale: Scale::Small,
        faults: "swarm",
        oracles: &[Oracle::Liveness, Oracle::DeliveredExactlyOnce],
    },
    // Accounts taken not to exist once they left memory (even seeds run without an account
    // cache, so a registered account is cold before its first login; odd seeds after a
    // restart): logins fail, so clients never get ready, and what they send is never acked.
    Case {
        bug: Planted::Relay(PlantedBug::EvictedAccountForgotten),
        scale: Scale::Small,
        faults: "swarm",
        oracles: &[Oracle::Setup, Oracle::OutboxDrained],
    },
    // Conversations whose seq counters start again once they left memory (even seeds run
    // without a conversation cache, so every message reads its conversation back): seqs repeat.
    Case {
        bug: Planted::Relay(PlantedBug::EvictedConversationForgotten),
        scale: Scale::Small,
        faults: "swarm",
        oracles: &[Oracle::SeqUnique],
    },
    Case {
        bug: Planted::Relay(PlantedBug::SyncStopsAtEmptyConversation),
        scale: Scale::Small,
        faults: "swarm",
        oracles: &[Oracle::SyncComplete],
    },
    Case {
        bug: Planted::Relay(PlantedBug::SeqNotPersisted),
        scale: Scale::Small,
        faults: "swarm",
        oracles: &[Oracle::SeqUnique],
    },
    // An unpaced sync needs a hub coming back to a backlog larger than the shell's outbound queue.
    Case {
        bug: Planted::Relay(PlantedBug::SyncIgnoresWindow),
        scale: Scale::Medium,
        faults: "none",
        oracles: &[Oracle::Liveness, Oracle::DeliveredExactlyOnce],
    },
    // A forged token is only ever presented by a dishonest raw client (the credentials sweep
    // over the relay's route table, in half of the dishonest acts).
    Case {
        bug: Planted::Relay(PlantedBug::TokenSignatureIgnored),
        scale: Scale::Small,
        faults: "dishonest",
        oracles: &[Oracle::Authz],
    },
    // Single-use objects used twice: the dishonest clients replay their puppet's login
    // challenge and WebSocket ticket after using them once.
    Case {
        bug: Planted::Relay(PlantedBug::AuthChallengeReusable),
        scale: Scale::Small,
        faults: "dishonest",
        oracles: &[Oracle::Authz],
    },
    Case {
        bug: Planted::Relay(PlantedBug::TicketReusable),
        scale: Scale::Small,
        faults: "dishonest",
        oracles: &[Oracle::Authz],
    },
    // A member acting on the other member's objects: the dishonest clients befriend their
    // puppet and, as members of that conversation, retract its messages and ack seqs the
    // relay never sent them.
    Case {
        bug: Planted::Relay(PlantedBug::RetractByAnyMember),
        scale: Scale::Small,
        faults: "dishonest",
        oracles: &[Oracle::Authz],
    },
    // Every route that names an object, tried by an outsider (or the wrong member) on the
    // puppets' objects: the owner's view must not change.
    Case {
        bug: Planted::Relay(PlantedBug::UploadByAnyone),
        scale: Scale::Small,
        faults: "dishonest",
        oracles: &[Oracle::Authz],
    },
    Case {
        bug: Planted::Relay(PlantedBug::FriendAcceptByRequester),
        scale: Scale::Small,
        faults: "dishonest",
        oracles: &[Oracle::Authz],
    },
    Case {
        bug: Planted::Relay(PlantedBug::ListingByAnyone),
        scale: Scale::Small,
        faults: "dishonest",
        oracles: &[Oracle::Authz],
    },
    // The worst moment: single-use credentials used before a relay power cycle, presented
    // after it.
    Case {
        bug: Planted::Relay(PlantedBug::SpentNotPersisted),
        scale: Scale::Small,
        faults: "dishonest",
        oracles: &[Oracle::Authz],
    },
    // One identity's credential presented for another: a challenge signed by another key.
    Case {
        bug: Planted::Relay(PlantedBug::ChallengeSignatureIgnored),
        scale: Scale::Small,
        faults: "dishonest",
        oracles: &[Oracle::Authz],
    },
    // An object used right after the expiry the relay announced for it.
    Case {
        bug: Planted::Relay(PlantedBug::TicketTtlUnits),
        scale: Scale::Small,
        faults: "dishonest",
        oracles: &[Oracle::Authz],
    },
    // Every frame type addressed to someone who is not the sender's contact.
    Case {
        bug: Planted::Relay(PlantedBug::CallToAnyone),
        scale: Scale::Small,
        faults: "dishonest",
        oracles: &[Oracle::Authz],
    },
    // A field of a frame the relay passes on, forged: a call signal naming another caller.
    Case {
        bug: Planted::Relay(PlantedBug::CallFromNotStamped),
        scale: Scale::Small,
        faults: "dishonest",
        oracles: &[Oracle::Authz],
    },
    Case {
        bug: Planted::Relay(PlantedBug::ReceiptBeyondSent),
        scale: Scale::Small,
        faults: "dishonest",
        oracles: &[Oracle::Authz],
    },
    // A deletion the relay made in memory only: every client-visible oracle excuses a
    // retracted message, so only the committed rows tell.
    Case {
        bug: Planted::Relay(PlantedBug::RetractDropNotPersisted),
        scale: Scale::Small,
        faults: "swarm",
        oracles: &[Oracle::RetractDrops],
    },
    // Acknowledged messages dropped from the queue in memory only: redelivered under their
    // seqs after a restart, which the wire oracles accept as at-least-once delivery.
    Case {
        bug: Planted::Relay(PlantedBug::ReceiptDeleteNotPersisted),
        scale: Scale::Small,
        faults: "swarm",
        oracles: &[Oracle::ReceiptDrops],
    },
    // A confirmation kept for an offline buyer in memory only: lost by a restart before the
    // buyer's next sync.
    Case {
        bug: Planted::Relay(PlantedBug::PendingConfirmNotPersisted),
        scale: Scale::Small,
        faults: "swarm",
        oracles: &[Oracle::PaymentAppliedOnce],
    },
    // A late payment honoured over a competing buyer's hold: two buyers confirmed for one
    // alias (the webhook faults jump the relay's clock past the holds).
    Case {
        bug: Planted::Relay(PlantedBug::LatePaymentIgnoresHolds),
        scale: Scale::Small,
        faults: "webhook",
        oracles: &[
            Oracle::AliasUnique,
            Oracle::PaymentAppliedOnce,
            Oracle::CommerceModel,
        ],
    },
    // A window that is not refilled after a receipt only stalls a connection with more in
    // flight than the window holds: a hub's backlog.
    Case {
        bug: Planted::Relay(PlantedBug::WindowNotRefilledOnReceipt),
        scale: Scale::Medium,
        faults: "none",
        oracles: &[Oracle::Liveness, Oracle::SyncComplete],
    },
    // The owner shard forgets a hand-off once it sent it: one lost with a crash of the relay
    // (both cores) never comes. Runs on two relay cores.
    Case {
        bug: Planted::Relay(PlantedBug::HandoffRowDeletedOnSend),
        scale: Scale::Small,
        faults: "swarm",
        oracles: &[
            Oracle::DeliveredExactlyOnce,
            Oracle::Liveness,
            Oracle::Probes,
            Oracle::OutboxDrained,
        ],
    },
    // A receipt kept at the reader's shard never reaches an author of the other shard (the
    // probes' receipts after healing). Runs on two relay cores.
    Case {
        bug: Planted::Relay(PlantedBug::ReceiptAtReadersShard),
        scale: Scale::Small,
        faults: "swarm",
        oracles: &[Oracle::Probes],
    },
    // A repeated hand-off applied again: the transport's repeats, and resends after a lost
    // acknowledgement (the `handoff` faults). A repeat that comes while its message is still
    // queued changes nothing a client sees; the queue's index counts it twice. Runs on two
    // relay cores.
    Case {
        bug: Planted::Relay(PlantedBug::HandoffApplyNotIdempotent),
        scale: Scale::Small,
        faults: "handoff",
        oracles: &[
            Oracle::DeliveredExactlyOnce,
            Oracle::DuplicateDelivery,
            Oracle::QueueSummaries,
        ],
    },
    // A hand-off past a gap applied at once: the gaps a lossy, reordering transport makes
    // (the `handoff` faults). Runs on two relay cores.
    Case {
        bug: Planted::Relay(PlantedBug::HandoffGapNotHeld),
        scale: Scale::Small,
        faults: "handoff",
        oracles: &[
            Oracle::DeliveredExactlyOnce,
            Oracle::SeqOrder,
            Oracle::OutboxDrained,
            Oracle::Liveness,
        ],
    },
    // A missing write deadline needs a raw client that stops reading (one swarm seed in ten has one).
    Case {
        bug: Planted::NoWriteDeadline,
        scale: Scale::Small,
        faults: "slow-consumer",
        oracles: &[Oracle::StuckClient],
    },
    // The relay server delivers no pushes (an offline client with a push target is
    // never woken).
    Case {
        bug: Planted::NoPushDelivery,
        scale: Scale::Small,
        faults: "none",
        oracles: &[Oracle::Push],
    },
    // The store two relays share checks no fencing epoch, so a frozen leader that
    // resumes after the standby took over writes next to it (split brain). Caught by what
    // clients see, not by a look at the epochs.
    Case {
        bug: Planted::UnfencedStore,
        scale: Scale::Small,
        faults: "failover",
        oracles: &[
            Oracle::SeqUnique,
            Oracle::DeliveredExactlyOnce,
            Oracle::SeqOrder,
            Oracle::ReceiptsClear,
        ],
    },
    // The cluster topology's shard stores check no epoch: a node frozen past its lease
    // serves, after it resumes, what reached it meanwhile, and commits it under an epoch that
    // is over, next to the shard's new owner.
    Case {
        bug: Planted::ShardUnfenced,
        scale: Scale::Small,
        faults: "cluster",
        oracles: &[Oracle::ShardEpochs],
    },
    // The cluster's membership renews a lapsed lease and writes the node's shards back to
    // it: the node that took them over and the renewed one serve them under one epoch.
    Case {
        bug: Planted::LeaseRenewedAfterLapse,
        scale: Scale::Small,
        faults: "cluster",
        oracles: &[Oracle::ShardEpochs],
    },
    // A shard's next owner does not resume its outbox: what the node it left had not had
    // acknowledged is never sent again. Acknowledgements missing when a shard moves need
    // crossings lost or held on the way (the `handoff` faults, between nodes as between cores).
    Case {
        bug: Planted::Relay(PlantedBug::HandoffOutboxNotResumed),
        scale: Scale::Small,
        faults: "cluster,handoff",
        oracles: &[
            Oracle::HandoffsDrained,
            Oracle::Liveness,
            Oracle::DeliveredExactlyOnce,
        ],
    },
];

fn config(case: &Case, seed: u64, planted: Option<Planted>) -> RunConfig {
    RunConfig {
        scale: case.scale,
        clients: (case.scale == Scale::Small).then_some(4),
        faults: case.faults.parse::<FaultSelection>().expect("valid faults"),
        store: StoreChoice::Drawn,
        planted,
        shards: sim::ShardsChoice::Fixed(shards(case.bug)),
        ..RunConfig::new(seed)
    }
}

/// The relay cores a case's runs have: two for the bugs of the hand-off between shards, the
/// cluster topology's least for the cluster's.
fn shards(bug: Planted) -> u16 {
    match bug {
        Planted::ShardUnfenced
        | Planted::LeaseRenewedAfterLapse
        | Planted::Relay(PlantedBug::HandoffOutboxNotResumed) => sim::bounds::MIN_CLUSTER_SHARDS,
        Planted::Relay(
            PlantedBug::HandoffRowDeletedOnSend
            | PlantedBug::ReceiptAtReadersShard
            | PlantedBug::HandoffApplyNotIdempotent
            | PlantedBug::HandoffGapNotHeld,
        ) => 2,
        _ => 1,
    }
}

fn command(case: &Case, seeds: &Range<u64>, planted: Option<Planted>) -> String {
    let plant = planted.map_or_else(String::new, |p| format!(" --plant {p}"));
    format!(
        "cargo run --release -p sim --features planted-bugs --bin simulate -- --seeds {}..{} --scale {} --faults {} --shards {}{plant}",
        seeds.start,
        seeds.end,
        case.scale,
        case.faults,
        shards(case.bug)
    )
}

fn describe(report: &RunReport) -> String {
    let lines: Vec<String> = report.violations.iter().map(ToString::to_string).collect();
    format!(
        "seed {}\n{}\n{}\n{}",
        report.seed,
        report.scenario,
        report.plan,
        lines.join("\n")
    )
}

/// Sweeps `0..N` with the case's bug planted until a seed violates one of its oracles, then
/// checks that every swept seed passes with nothing planted.
fn detects(bug: Planted) {
    let case = CASES
        .into_iter()
        .find(|c| c.bug == bug)
        .expect("every planted bug has a case");
    let mut caught = None;
    for seed in 0..N {
        let report = run(&config(&case, seed, Some(bug)));
        if let Some(v) = report
            .violations
            .iter()
            .find(|v| case.oracles.contains(&v.oracle))
        {
            caught = Some((seed, v.clone()));
            break;
        }
    }
    let Some((seed, violation)) = caught else {
        panic!(
            "{bug} was not caught by {:?} within {N} seeds; sweep: {}",
            case.oracles,
            command(&case, &(0..N), Some(bug))
        );
    };
    let swept = 0..seed + 1;
    for clean in swept.clone() {
        let report = run(&config(&case, clean, None));
        assert!(
            report.violations.is_empty(),
            "seed {clean} must pass with nothing planted (else the catch of {bug} may be noise):\n{}\nsweep: {}",
            describe(&report),
            command(&case, &swept, None)
        );
    }
    println!(
        "| {bug} | `{}` | {} | {} | {N} | {} {} |",
        violation.oracle,
        seed,
        seed + 1,
        case.scale,
        case.faults
    );
    println!("  {violation}");
}

#[test]
fn every_planted_bug_has_a_case() {
    for bug in Planted::ALL {
        assert_eq!(
            CASES.iter().filter(|c| c.bug == bug).count(),
            1,
            "{bug} needs exactly one case"
        );
    }
}

/// A cluster node's shard store without its fence.
#[test]
fn catches_a_shard_commit_without_its_fence() {
    detects(Planted::ShardUnfenced);
}

/// A cluster node's lease renewed after it lapsed.
#[test]
fn catches_a_lease_renewed_after_it_lapsed() {
    detects(Planted::LeaseRenewedAfterLapse);
}

/// A shard's next owner that does not resume its outbox.
#[test]
fn catches_an_outbox_not_resumed_by_the_next_owner() {
    detects(Planted::Relay(PlantedBug::HandoffOutboxNotResumed));
}

/// A hand-off's outbox row deleted when it is sent, not when its apply is acknowledged.
#[test]
fn catches_a_handoff_row_deleted_on_send() {
    detects(Planted::Relay(PlantedBug::HandoffRowDeletedOnSend));
}

/// A repeated hand-off applied again at the recipient's shard.
#[test]
fn catches_a_handoff_applied_twice() {
    detects(Planted::Relay(PlantedBug::HandoffApplyNotIdempotent));
}

/// A hand-off past a gap applied at once.
#[test]
fn catches_a_gap_not_held() {
    detects(Planted::Relay(PlantedBug::HandoffGapNotHeld));
}

/// A receipt for another shard's author applied at the reader's shard.
#[test]
fn catches_a_receipt_applied_at_the_readers_shard() {
    detects(Planted::Relay(PlantedBug::ReceiptAtReadersShard));
}

#[test]
fn catches_an_ack_without_commit() {
    detects(Planted::Relay(PlantedBug::AckWithoutCommit));
}

#[test]
fn catches_a_receipt_that_clears_beyond_its_seq() {
    detects(Planted::Relay(PlantedBug::ReceiptClearsBeyondSeq));
}

#[test]
fn catches_a_missing_message_dedup() {
    detects(Planted::Relay(PlantedBug::NoMessageDedup));
}

/// A re-sent message of an author whose tombstones were evicted, stored again.
#[test]
fn catches_tombstones_forgotten_after_an_eviction() {
    detects(Planted::Relay(PlantedBug::EvictedTombstonesForgotten));
}

/// Queued messages of a recipient whose queue was evicted, taken to be none.
#[test]
fn catches_a_queue_forgotten_after_an_eviction() {
    detects(Planted::Relay(PlantedBug::EvictedQueueForgotten));
}

/// An account that left memory, taken not to exist.
#[test]
fn catches_an_account_forgotten_after_an_eviction() {
    detects(Planted::Relay(PlantedBug::EvictedAccountForgotten));
}

/// A conversation that left memory, its seq counters started again.
#[test]
fn catches_a_conversation_forgotten_after_an_eviction() {
    detects(Planted::Relay(PlantedBug::EvictedConversationForgotten));
}

#[test]
fn catches_a_sync_that_stops_at_an_empty_conversation() {
    detects(Planted::Relay(PlantedBug::SyncStopsAtEmptyConversation));
}

#[test]
fn catches_a_seq_counter_not_persisted() {
    detects(Planted::Relay(PlantedBug::SeqNotPersisted));
}

/// Backlog replay not paced by the connection's window.
#[test]
fn catches_a_sync_not_paced_by_the_window() {
    detects(Planted::Relay(PlantedBug::SyncIgnoresWindow));
}

/// A bearer token whose signature does not verify is accepted (found by the dishonest
/// clients' forged credentials on every route of the relay's table).
#[test]
fn catches_a_token_whose_signature_is_not_checked() {
    detects(Planted::Relay(PlantedBug::TokenSignatureIgnored));
}

/// A client that stops reading is never released (the relay server's write deadline is
/// infinite).
#[test]
fn catches_a_stuck_reader_never_released() {
    detects(Planted::NoWriteDeadline);
}

/// Push delivery never wired up in the relay server.
#[test]
fn catches_a_relay_that_delivers_no_pushes() {
    detects(Planted::NoPushDelivery);
}

/// Active/standby relays on a store that does not fence a paused old leader.
#[test]
fn catches_a_store_that_fences_nothing() {
    detects(Planted::UnfencedStore);
}

/// A signed login challenge answered twice logs in twice.
#[test]
fn catches_an_auth_challenge_that_is_not_consumed() {
    detects(Planted::Relay(PlantedBug::AuthChallengeReusable));
}

/// A WebSocket ticket redeemed twice opens two sockets.
#[test]
fn catches_a_ticket_that_is_not_consumed() {
    detects(Planted::Relay(PlantedBug::TicketReusable));
}

/// A member retracts the other member's message.
#[test]
fn catches_a_retract_by_the_other_member() {
    detects(Planted::Relay(PlantedBug::RetractByAnyMember));
}

/// A receipt for a seq never sent to its author is applied.
#[test]
fn catches_a_receipt_beyond_what_was_sent() {
    detects(Planted::Relay(PlantedBug::ReceiptBeyondSent));
}

/// A retract whose queue deletion is never written.
#[test]
fn catches_a_retract_whose_deletion_is_not_committed() {
    detects(Planted::Relay(PlantedBug::RetractDropNotPersisted));
}

/// A kept `payment_confirmed` that is not written.
#[test]
fn catches_a_confirmation_kept_in_memory_only() {
    detects(Planted::Relay(PlantedBug::PendingConfirmNotPersisted));
}

/// A late payment honoured over a competing buyer's hold.
#[test]
fn catches_a_late_payment_that_ignores_a_competing_hold() {
    detects(Planted::Relay(PlantedBug::LatePaymentIgnoresHolds));
}

/// A receipt that frees room in the window without refilling it.
#[test]
fn catches_a_window_not_refilled_on_receipt() {
    detects(Planted::Relay(PlantedBug::WindowNotRefilledOnReceipt));
}

/// A receipt whose queue deletions are never written.
#[test]
fn catches_a_receipt_whose_deletions_are_not_committed() {
    detects(Planted::Relay(PlantedBug::ReceiptDeleteNotPersisted));
}

/// A call signal's claimed `from` is passed on to the callee.
#[test]
fn catches_a_call_signal_whose_from_is_not_stamped() {
    detects(Planted::Relay(PlantedBug::CallFromNotStamped));
}

/// Someone else's upload takes a stranger's part.
#[test]
fn catches_an_upload_that_takes_anyones_parts() {
    detects(Planted::Relay(PlantedBug::UploadByAnyone));
}

/// A friend request accepted by the one who sent it.
#[test]
fn catches_a_friend_request_accepted_by_its_sender() {
    detects(Planted::Relay(PlantedBug::FriendAcceptByRequester));
}

/// A channel listed for sale by someone who does not own it.
#[test]
fn catches_a_listing_by_someone_else() {
    detects(Planted::Relay(PlantedBug::ListingByAnyone));
}

/// A call signal passed on to someone who is not the caller's contact.
#[test]
fn catches_a_call_to_someone_who_is_not_a_contact() {
    detects(Planted::Relay(PlantedBug::CallToAnyone));
}

/// A WebSocket ticket that outlives the expiry the relay announced for it.
#[test]
fn catches_a_ticket_that_outlives_its_announced_expiry() {
    detects(Planted::Relay(PlantedBug::TicketTtlUnits));
}

/// A login whose challenge was signed by another key.
#[test]
fn catches_a_login_whose_signature_is_not_checked() {
    detects(Planted::Relay(PlantedBug::ChallengeSignatureIgnored));
}

/// A used ticket or challenge accepted again after a relay restart.
#[test]
fn catches_credentials_used_again_after_a_restart() {
    detects(Planted::Relay(PlantedBug::SpentNotPersisted));
}
