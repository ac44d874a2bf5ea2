//! **Test-only planted bugs** (cargo feature `planted-bugs`): realistic defects that can be
//! switched on one at a time, so a test can show that the simulator (`sim`) catches each one.
//!
//! The switch is `Config::planted_bug`, and both the field and `PlantedBug` exist only when
//! the feature is on. Nothing enables the feature but the `sim`
//! crate's own dev-dependency (its detection test) and an explicit `--features planted-bugs`:
//! a build of the relay for users (`cargo build -p relay-server --bin relay`, `relay-pg`, …) has no
//! such field to set, and every planted branch compiles to `if false` (see `planted!`).
//! Even in a build with the feature the default is `None`, and no binary sets it.
//!
//! Each mutation sits where such a bug would really live and is marked `PLANTED BUG` at the
//! site (`grep -rn 'planted!(' relay-core/src`).

/// One planted defect of the relay core (feature `planted-bugs`, for the simulator's detection
/// test only): set [`Config::planted_bug`](crate::Config::planted_bug) to switch it on. The
/// field and this enum do not exist without the feature, so a production build cannot plant
/// anything; with it, the default is `None`.
#[cfg(feature = "planted-bugs")]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PlantedBug {
    /// `Relay::finish`: when the commit of an input fails, its staged outputs (the `ack` of a
    /// `msg` among them) are released anyway. The sender believes the message is stored.
    AckWithoutCommit,
    /// `receipts`: a `delivered` receipt deletes everything the other member wrote in the
    /// conversation from the queue, not only what is covered by its seq (messages still in
    /// flight or never pushed are lost).
    ReceiptClearsBeyondSeq,
    /// `messaging`: the message-id dedup is gone; a resend after a lost `ack` is stored again
    /// under a new seq.
    NoMessageDedup,
    /// `sync`: the replay walks the account's conversations and stops at the first one with
    /// nothing queued; backlogs of later conversations wait for a new message or the next sync.
    SyncStopsAtEmptyConversation,
    /// `state`: assigning a seq updates the conversation's counter in memory only; after a
    /// restart the counter starts again from the last persisted value and seqs are reused.
    SeqNotPersisted,
    /// `sync`: backlog replay ignores the connection's window and
    /// pushes everything at once, overflowing the shell's outbound queue on every reconnect.
    SyncIgnoresWindow,
    /// `auth`: a bearer token whose signature does not verify is read anyway, so anyone can
    /// alter a token's signature (or, with a jti that is current, its claims) and be let in.
    TokenSignatureIgnored,
    /// `auth`: an auth challenge is read instead of consumed at `verify`, so a captured
    /// signed challenge logs in again until it expires.
    AuthChallengeReusable,
    /// `auth`: a WebSocket ticket is read instead of consumed at the upgrade, so a leaked
    /// ticket opens sockets until it expires.
    TicketReusable,
    /// `messaging`: a retract's id is looked up under either member of the conversation, so
    /// a member retracts the other one's messages.
    RetractByAnyMember,
    /// `calls`: a call signal's `from`, when the caller wrote one, is passed on instead of
    /// being overwritten with the caller's alias, so a caller can pose as someone else.
    CallFromNotStamped,
    /// `receipts`: a receipt may cover seqs never sent to its author, so a client that acks
    /// too far clears messages it never got and tells their sender they were delivered.
    ReceiptBeyondSent,
    /// `state`: a retract takes the message's still-queued copy out of the queue in memory
    /// but writes no deletion; after a restart the retracted message is queued again and
    /// delivered.
    RetractDropNotPersisted,
    /// `state`: a receipt takes the messages it acknowledges out of the queue in memory but
    /// writes no deletion; after a restart they are delivered again (under their seqs).
    ReceiptDeleteNotPersisted,
    /// `commerce_state`: the `payment_confirmed` kept for the buyer is not written; a restart
    /// before the buyer's next `sync` loses it.
    PendingConfirmNotPersisted,
    /// `orders`: a late payment is honoured when the alias is neither sold nor in use,
    /// without looking at a competing buyer's hold; both buyers' orders are confirmed.
    LatePaymentIgnoresHolds,
    /// `receipts`: a receipt frees room in the connection's window but does not refill it;
    /// what waits for room waits for the next message or reconnect.
    WindowNotRefilledOnReceipt,
    /// `media`: an upload's parts are accepted from whoever knows its id and key, not only
    /// from its owner, so a stranger overwrites or finishes someone else's upload.
    UploadByAnyone,
    /// `contacts`: either party may accept a friend request, so its sender accepts it and
    /// opens a conversation the addressee never agreed to.
    FriendAcceptByRequester,
    /// `channels`: listing a channel for sale skips the owner check, so anyone lists (and
    /// then buys) someone else's channel.
    ListingByAnyone,
    /// `calls`: a call signal is passed on without checking that `to` is an accepted
    /// contact of the caller, so anyone rings anyone whose alias they know.
    CallToAnyone,
    /// `auth`: a WebSocket ticket's lifetime is scaled twice, so a ticket the relay announced
    /// to live 30 s still opens a socket long after.
    TicketTtlUnits,
    /// `auth`: `verify` never checks the signature over the challenge, so whoever asks for
    /// an account's challenge logs in as that account.
    ChallengeSignatureIgnored,
    /// `credential`: a used ticket or auth challenge is marked spent in memory only, so after
    /// a restart it is accepted again until it expires.
    SpentNotPersisted,
    /// `tombstones`: an author whose tombstones are not in memory (evicted, or not read since
    /// a restart) is taken to have none, instead of having them read from the store, so a
    /// re-sent message is stored and delivered again under a new seq.
    EvictedTombstonesForgotten,
    /// `queue`: a queue that is not in memory (evicted, or not read since a restart) is taken
    /// to be empty instead of being read from the store, so the messages it held are never
    /// delivered.
    EvictedQueueForgotten,
    /// `directory`: an account that is not in memory (evicted, or not read since a restart)
    /// is taken not to exist instead of being read from the store, so its tokens stop working
    /// and messages to it are refused.
    EvictedAccountForgotten,
    /// `relations`: a conversation read back from the store (evicted, or not read since a
    /// restart) starts its seq counters again from 0, so new messages reuse seqs and the
    /// recipient's client drops them as already seen.
    EvictedConversationForgotten,
    /// `handoff`: the owner deletes a hand-off's outbox row when it sends it, not when the
    /// recipient's shard acknowledges its durable apply, so a hand-off lost with a crash (or
    /// a full peer) is never sent again and its message never arrives.
    HandoffRowDeletedOnSend,
    /// `receipts`: a receipt for an author of another shard is applied at the reader's shard
    /// as if the author were its own (sent to a connection it does not have, kept for an
    /// author it does not serve), so the author never learns of it.
    ReceiptAtReadersShard,
    /// `handoff`: a hand-off the recipient's shard already applied is applied again when it
    /// comes again (after a lost acknowledgement, or repeated by the transport) instead of
    /// being answered as a repeat, so its message is queued and delivered twice.
    HandoffApplyNotIdempotent,
    /// `handoff`: a hand-off past a gap in its stream is applied at once, its mark moved
    /// through it, instead of being held until the gap is filled: the owner, acknowledged
    /// through it, forgets the missing one, and what comes is out of order.
    HandoffGapNotHeld,
    /// `handoff`: a shard's core that starts (the shard's next owner after a move, or the same
    /// relay after a restart) does not load its outbox rows, so the hand-offs its previous
    /// term had not had acknowledged are never sent again and their messages never arrive.
    HandoffOutboxNotResumed,
}

#[cfg(feature = "planted-bugs")]
impl PlantedBug {
    /// Every planted bug.
    pub const ALL: [Self; 33] = [
        Self::AckWithoutCommit,
        Self::ReceiptClearsBeyondSeq,
        Self::NoMessageDedup,
        Self::SyncStopsAtEmptyConversation,
        Self::SeqNotPersisted,
        Self::SyncIgnoresWindow,
        Self::TokenSignatureIgnored,
        Self::AuthChallengeReusable,
        Self::TicketReusable,
        Self::RetractByAnyMember,
        Self::CallFromNotStamped,
        Self::ReceiptBeyondSent,
        Self::RetractDropNotPersisted,
        Self::ReceiptDeleteNotPersisted,
        Self::PendingConfirmNotPersisted,
        Self::LatePaymentIgnoresHolds,
        Self::WindowNotRefilledOnReceipt,
        Self::UploadByAnyone,
        Self::FriendAcceptByRequester,
        Self::ListingByAnyone,
        Self::CallToAnyone,
        Self::TicketTtlUnits,
        Self::ChallengeSignatureIgnored,
        Self::SpentNotPersisted,
        Self::EvictedTombstonesForgotten,
        Self::EvictedQueueForgotten,
        Self::EvictedAccountForgotten,
        Self::EvictedConversationForgotten,
        Self::HandoffRowDeletedOnSend,
        Self::ReceiptAtReadersShard,
        Self::HandoffApplyNotIdempotent,
        Self::HandoffGapNotHeld,
        Self::HandoffOutboxNotResumed,
    ];
}

/// Whether `$bug` is planted in `$config` (anything with a `planted_bug` field). Without the
/// `planted-bugs` feature this is the literal `false` and `$config` is not even evaluated, so
/// the mutation is dead code the compiler removes.
#[cfg(feature = "planted-bugs")]
macro_rules! planted {
    ($config:expr, $bug:ident) => {
        $config.planted_bug == Some($crate::planted::PlantedBug::$bug)
    };
}

/// Without the `planted-bugs` feature: always `false` (see the feature's version).
#[cfg(not(feature = "planted-bugs"))]
macro_rules! planted {
    ($config:expr, $bug:ident) => {
        false
    };
}

pub(crate) use planted;
