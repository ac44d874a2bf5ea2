//! Call state machine types (PROTOCOL §3.7); the transitions live in [`super::Client`]
//! (`call`, `answer_call`, `reject_call`, `hangup_call`, inbound `call_*` signals, timeouts).
//! See the module doc of [`crate::machine`] for the decisions.

use serde_json::Value;
use wire::frames::CallKind;

use crate::crypto::signal::SignalError;

/// Ringing (callee) and answer (caller) timeout, and the bound on `connecting`.
pub const CALL_RING_TIMEOUT_MS: u64 = 30_000;
/// `reason` field of a `call_reject` sent because we are in another call.
pub const CALL_REJECT_REASON_BUSY: &str = "busy";

/// SPEC's call state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallState {
    /// No call yet.
    Idle,
    /// Our offer was sent; waiting for the answer.
    Calling,
    /// An offer arrived; waiting for the user.
    Ringing,
    /// Answer exchanged; media not connected yet (the app reports it).
    Connecting,
    /// Media connected.
    Connected,
    /// Ended by our hangup.
    Hangup,
    /// Declined (by us as callee, or by the callee of our call).
    Rejected,
    /// Ended otherwise: peer hangup, timeout, lost glare.
    Ended,
}

impl CallState {
    /// `calling`, `ringing`, `connecting` or `connected`.
    pub fn is_active(self) -> bool {
        matches!(
            self,
            Self::Calling | Self::Ringing | Self::Connecting | Self::Connected
        )
    }
}

/// Why a call reached a final state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallEndReason {
    /// We hung up.
    LocalHangup,
    /// The peer hung up (or cancelled while ringing).
    RemoteHangup,
    /// We declined.
    LocalReject,
    /// The peer declined.
    RemoteReject,
    /// The peer was in another call.
    Busy,
    /// No answer / no user action / no media within [`CALL_RING_TIMEOUT_MS`].
    Timeout,
    /// Both called each other; the other call won (see the module doc).
    Glare,
}

/// Options of an outgoing call; the SDP is produced by the app's WebRTC stack.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CallOptions {
    /// Video call (sent as `mode`).
    pub video: bool,
    /// The SDP offer, opaque.
    pub sdp: String,
}

/// The current (or last) call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallInfo {
    /// Call id (UUID).
    pub call_id: String,
    /// The other party's alias.
    pub peer: String,
    /// We placed the call.
    pub outgoing: bool,
    /// Video call.
    pub video: bool,
    /// State.
    pub state: CallState,
    /// Why it ended, once final.
    pub end_reason: Option<CallEndReason>,
}

/// Call events (inside [`super::Event::Call`]).
#[derive(Debug, Clone, PartialEq)]
pub enum CallEvent {
    /// The call changed state.
    StateChanged {
        /// Call id.
        call_id: String,
        /// Peer alias.
        peer: String,
        /// New state.
        state: CallState,
        /// Set for final states.
        reason: Option<CallEndReason>,
    },
    /// An offer arrived and we ring (SPEC `onIncomingCall`).
    Incoming {
        /// Call id.
        call_id: String,
        /// Caller alias.
        from: String,
        /// Video call (`mode`, or an `m=video ` line in the SDP).
        video: bool,
        /// The SDP offer, opaque.
        sdp: String,
    },
    /// The callee answered our call.
    RemoteAnswer {
        /// Call id.
        call_id: String,
        /// The SDP answer, opaque.
        sdp: String,
    },
    /// A remote ICE candidate for the current call.
    RemoteIce {
        /// Call id.
        call_id: String,
        /// The `candidate` value as sent (object or legacy string).
        candidate: Value,
    },
    /// An offer arrived during another call; it was refused with `call_reject` (`busy`).
    MissedWhileBusy {
        /// Caller alias.
        from: String,
        /// Their call id.
        call_id: String,
    },
    /// A call signal failed verification and was dropped.
    SignalRefused {
        /// Envelope sender.
        from: String,
        /// Envelope call id.
        call_id: String,
        /// Envelope kind.
        kind: CallKind,
        /// Why.
        error: SignalError,
    },
}

#[derive(Debug, Clone)]
pub(super) struct ActiveCall {
    pub(super) info: CallInfo,
    pub(super) deadline_ms: Option<u64>,
}

/// Whether an SDP describes video (a line starting `m=video `).
pub(super) fn sdp_has_video(sdp: &str) -> bool {
    sdp.lines().any(|l| l.starts_with("m=video "))
}
