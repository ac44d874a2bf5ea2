//! What the machine reports: the app [`Event`]s (drained with
//! [`Client::poll_event`](super::Client::poll_event)) and the [`ClientError`] of a refused user
//! command.
//!
//! Events are queued in the order the machine decides them. One that reports a store write
//! (`Message`, `StatusChange`, `Parked`, `Retracted`, `PaymentConfirmed`, `Authenticated`) is
//! queued after that write succeeded.

use serde_json::{Map, Value};
use wire::frames::CallKind;
use wire::http::FriendProfile;

use super::auth::AuthFailure;
use super::call::CallEvent;
use super::connection::NetworkState;
use super::inbox::InboxLimit;
use crate::crypto::signal::{SignalError, SignatureCoverage};
use crate::keys::KeyError;
use crate::security::SecurityViolationEvent;
use crate::store::{MessageStatus, StoreError, StoredMessage};

/// App events.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A new inbound message was stored.
    Message(StoredMessage),
    /// An own message changed status.
    StatusChange {
        /// Message id.
        id: String,
        /// New status.
        status: MessageStatus,
    },
    /// Network state changed.
    NetworkState(NetworkState),
    /// The peer is typing.
    Typing {
        /// Who.
        from_alias_id: String,
        /// Where.
        conversation_id: String,
    },
    /// A channel post frame, raw.
    ChannelPost(Value),
    /// The relay ended the session; no reconnect.
    Goaway(String),
    /// A payment was confirmed.
    PaymentConfirmed {
        /// Order.
        order_id: String,
        /// Alias or channel id.
        ref_id: String,
    },
    /// A verified contact's key changed; the message was not decrypted.
    SecurityViolation(SecurityViolationEvent),
    /// Registration or restore finished with a JWT.
    Authenticated {
        /// Our alias.
        alias_id: String,
        /// Our nickname.
        nickname: String,
        /// Recovered through a 409.
        recovered: bool,
    },
    /// Registration or restore failed, or the machine's own re-authentication after a refused
    /// token failed (then the machine stopped reconnecting; see the [machine doc](crate::machine)).
    AuthFailed(AuthFailure),
    /// Contacts synced (sessions created as needed).
    ContactsSynced(Vec<FriendProfile>),
    /// An unverified contact's key changed and was adopted.
    PeerKeyChanged {
        /// Conversation.
        conversation_id: String,
        /// Contact alias.
        alias_id: String,
    },
    /// A message was retracted locally (by us or by its author).
    Retracted {
        /// Message id.
        id: String,
    },
    /// An inbound message was parked in the offline inbox.
    Parked {
        /// Message id.
        id: String,
        /// Conversation.
        conversation_id: String,
    },
    /// The offline inbox is full for this conversation: further messages that would be parked
    /// are neither stored nor acknowledged (no `delivered`), so the relay keeps them and
    /// redelivers them on a later `sync`. Emitted once per episode; the machine sends `sync`
    /// itself when the conversation's parked messages drain.
    OfflineInboxFull {
        /// Conversation.
        conversation_id: String,
        /// The bound that was reached.
        limit: InboxLimit,
    },
    /// Call state machine events.
    Call(CallEvent),
    /// A verified call signal (low level; the call state machine consumes the same signals).
    CallSignal {
        /// Kind.
        kind: CallKind,
        /// Sender alias.
        from: String,
        /// Call id.
        call_id: String,
        /// Inner fields.
        fields: Map<String, Value>,
        /// Signature coverage.
        coverage: SignatureCoverage,
    },
}

/// Errors of user commands.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No identity / not authenticated.
    #[error("not registered or not authenticated")]
    NotAuthenticated,
    /// No session for this conversation or alias.
    #[error("no session for {0}")]
    NoSession(String),
    /// An id is not valid on the wire.
    #[error("invalid {0}")]
    InvalidId(&'static str),
    /// Message unknown.
    #[error("message not found")]
    NotFound,
    /// Only own messages can be retracted.
    #[error("not an own message")]
    NotOwnMessage,
    /// Not connected.
    #[error("not connected")]
    NotConnected,
    /// Another auth flow runs.
    #[error("an authentication flow is already running")]
    Busy,
    /// Key problems (mnemonic invalid, stored keys mismatch).
    #[error("keys: {0}")]
    Key(#[from] KeyError),
    /// Storage failed.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// Signing failed.
    #[error("signal: {0}")]
    Signal(#[from] SignalError),
    /// No call in a state that allows this command.
    #[error("no call in a state that allows this")]
    NoCall,
    /// A call is already in progress.
    #[error("a call is already in progress")]
    CallBusy,
}
