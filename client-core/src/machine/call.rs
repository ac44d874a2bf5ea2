//! Calls (PROTOCOL §3.7, SPEC `CallState`): the call state machine, its commands and the
//! inbound `call_*` signals.
//!
//! * One call at a time. `call` → `calling`; an offer → `ringing`; `answer_call` or the
//!   matching `call_answer` → `connecting`; `call_media_connected` → `connected`. Final states
//!   (`hangup`, `rejected`, `ended`) allow a new call.
//! * Signals are never queued: with the socket closed a command that sends one fails with
//!   `NotConnected` (`answer_call` then changes nothing; `reject_call` and `hangup_call` still
//!   end the call locally, and the peer times out).
//! * Every signal is sealed and opened with the conversation's session key and the peer's
//!   Ed25519 key (60 s window, nonce cache); a refused one emits `SignalRefused` and changes
//!   nothing. Answer, ICE, reject and hangup apply only when `call_id` **and** sender match the
//!   current call (S-4).
//! * [`CALL_RING_TIMEOUT_MS`] bounds `calling`, `ringing` and `connecting`; on expiry the
//!   machine sends `call_hangup` (`call_reject` while ringing) and ends with `Timeout`.
//! * Glare: the call placed by the lower alias wins on both sides; any other offer during a
//!   call is refused with `call_reject` (`busy`) and never replaces the call.
//!
//! The full contract is in the module doc of [`crate::machine`].

use serde_json::{Map, Value};
use wire::frames::{CRYPTO_V_CALL, CallKind, CallSignal, ClientFrame};
use wire::ids::{AliasId, CallId};

use super::client::Client;
use super::event::{ClientError, Event};
use crate::crypto::SessionKey;
use crate::crypto::signal::{NonceCache, SignalEnvelope, SignalError, open_signal, seal_signal};
use crate::encoding::from_base64_array;
use crate::store::ClientStore;

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
    /// Both called each other; the other call won (see the [machine doc](crate::machine)).
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

/// The calls of one client: the current (or last) call, and the nonces of the call signals
/// already opened (replay protection).
#[derive(Debug)]
pub(super) struct Calls {
    current: Option<ActiveCall>,
    nonces: NonceCache,
}

impl Calls {
    pub(super) fn new() -> Self {
        Self {
            current: None,
            nonces: NonceCache::new(),
        }
    }

    /// When the active call's timeout fires, if one is armed.
    pub(super) fn deadline_ms(&self) -> Option<u64> {
        self.current
            .as_ref()
            .filter(|c| c.info.state.is_active())
            .and_then(|c| c.deadline_ms)
    }
}

/// Whether an SDP describes video (a line starting `m=video `).
pub(super) fn sdp_has_video(sdp: &str) -> bool {
    sdp.lines().any(|l| l.starts_with("m=video "))
}

impl<S: ClientStore> Client<S> {
    /// Signs, encrypts and sends a call signal to `to_alias_id`. Signals are not queued: with
    /// no open socket this is [`ClientError::NotConnected`] and nothing is sent.
    pub fn send_call_signal(
        &mut self,
        now_ms: u64,
        kind: CallKind,
        to_alias_id: &str,
        call_id: &str,
        mut fields: Map<String, Value>,
    ) -> Result<(), ClientError> {
        let (Some(identity), Some(me)) = (self.identity.as_ref(), self.stored.as_ref()) else {
            return Err(ClientError::NotAuthenticated);
        };
        if !self.is_connected() {
            // The shell has no socket to send it on and would drop it.
            return Err(ClientError::NotConnected);
        }
        let session = self
            .store
            .load_session_by_alias(to_alias_id)?
            .ok_or_else(|| ClientError::NoSession(to_alias_id.to_owned()))?;
        let key = SessionKey::from_base64(session.session_key_base64.expose())
            .map_err(|_| ClientError::NoSession(to_alias_id.to_owned()))?;
        let (Ok(to), Ok(cid), Ok(from)) = (
            AliasId::parse(to_alias_id),
            CallId::parse(call_id),
            AliasId::parse(&me.alias_id),
        ) else {
            return Err(ClientError::InvalidId("call signal"));
        };
        fields.insert("type".into(), Value::from(kind.as_str()));
        fields.insert("call_id".into(), Value::from(call_id));
        fields.insert("from".into(), Value::from(me.alias_id.clone()));
        let payload = seal_signal(&key, &identity.signing_key, fields, now_ms, &mut self.rng)?;
        self.out.frame(ClientFrame::Call(CallSignal {
            kind,
            to,
            call_id: cid,
            from: Some(from),
            crypto_v: Some(CRYPTO_V_CALL),
            payload,
        }));
        Ok(())
    }

    pub(super) fn on_call(&mut self, now_ms: u64, c: &CallSignal) -> Result<(), ClientError> {
        let Some(from) = c.from.as_ref() else {
            return Ok(());
        };
        let Some(session) = self.store.load_session_by_alias(from.as_str())? else {
            return Ok(());
        };
        let Ok(key) = SessionKey::from_base64(session.session_key_base64.expose()) else {
            return Ok(());
        };
        let peer = session
            .their_ed25519_public_key
            .as_deref()
            .and_then(|k| from_base64_array::<32>(k).ok());
        let env = SignalEnvelope {
            frame_type: c.kind.as_str(),
            from: from.as_str(),
            call_id: c.call_id.as_str(),
        };
        match open_signal(
            &key,
            &c.payload,
            env,
            peer.as_ref(),
            now_ms,
            &mut self.calls.nonces,
        ) {
            Ok(v) => {
                self.out.event(Event::CallSignal {
                    kind: c.kind,
                    from: from.as_str().to_owned(),
                    call_id: c.call_id.as_str().to_owned(),
                    fields: v.fields.clone(),
                    coverage: v.coverage,
                });
                self.on_verified_signal(
                    now_ms,
                    c.kind,
                    from.as_str(),
                    c.call_id.as_str(),
                    &v.fields,
                );
            }
            Err(error) => self.out.event(Event::Call(CallEvent::SignalRefused {
                from: from.as_str().to_owned(),
                call_id: c.call_id.as_str().to_owned(),
                kind: c.kind,
                error,
            })),
        }
        Ok(())
    }

    /// The current (or last) call.
    pub fn current_call(&self) -> Option<&CallInfo> {
        self.calls.current.as_ref().map(|c| &c.info)
    }

    /// State of the current call ([`CallState::Idle`] before the first one).
    pub fn call_state(&self) -> CallState {
        self.calls
            .current
            .as_ref()
            .map_or(CallState::Idle, |c| c.info.state)
    }

    fn active_call(&self) -> Option<&CallInfo> {
        self.current_call().filter(|c| c.state.is_active())
    }

    fn set_call_state(
        &mut self,
        state: CallState,
        reason: Option<CallEndReason>,
        deadline: Option<u64>,
    ) {
        let Some(c) = self.calls.current.as_mut() else {
            return;
        };
        c.info.state = state;
        c.info.end_reason = reason;
        c.deadline_ms = deadline;
        self.out.event(Event::Call(CallEvent::StateChanged {
            call_id: c.info.call_id.clone(),
            peer: c.info.peer.clone(),
            state,
            reason,
        }));
    }

    fn signal_current(
        &mut self,
        now_ms: u64,
        kind: CallKind,
        fields: Map<String, Value>,
    ) -> Result<(), ClientError> {
        let Some(c) = self.active_call() else {
            return Err(ClientError::NoCall);
        };
        let (peer, id) = (c.peer.clone(), c.call_id.clone());
        self.send_call_signal(now_ms, kind, &peer, &id, fields)
    }

    /// Places a call (SPEC `call(toAliasId, CallOptions)`): sends `call_offer` with the app's
    /// SDP and `mode`; state `calling` until answered, rejected or [`CALL_RING_TIMEOUT_MS`].
    /// Returns the call id.
    pub fn call(
        &mut self,
        now_ms: u64,
        to_alias_id: &str,
        options: &CallOptions,
    ) -> Result<String, ClientError> {
        if self.active_call().is_some() {
            return Err(ClientError::CallBusy);
        }
        if !self.is_connected() {
            return Err(ClientError::NotConnected);
        }
        let call_id = self.new_message_id();
        let mut fields = Map::new();
        fields.insert("sdp".into(), Value::from(options.sdp.clone()));
        fields.insert("sdp_type".into(), Value::from("offer"));
        fields.insert(
            "mode".into(),
            Value::from(if options.video { "video" } else { "audio" }),
        );
        self.send_call_signal(now_ms, CallKind::Offer, to_alias_id, &call_id, fields)?;
        self.calls.current = Some(ActiveCall {
            info: CallInfo {
                call_id: call_id.clone(),
                peer: to_alias_id.to_owned(),
                outgoing: true,
                video: options.video,
                state: CallState::Idle,
                end_reason: None,
            },
            deadline_ms: None,
        });
        self.set_call_state(
            CallState::Calling,
            None,
            Some(now_ms + CALL_RING_TIMEOUT_MS),
        );
        Ok(call_id)
    }

    /// Answers the ringing call with the app's SDP answer: `call_answer`, state `connecting`.
    pub fn answer_call(&mut self, now_ms: u64, sdp: &str) -> Result<(), ClientError> {
        if self.call_state() != CallState::Ringing {
            return Err(ClientError::NoCall);
        }
        let mut fields = Map::new();
        fields.insert("sdp".into(), Value::from(sdp));
        fields.insert("sdp_type".into(), Value::from("answer"));
        self.signal_current(now_ms, CallKind::Answer, fields)?;
        self.set_call_state(
            CallState::Connecting,
            None,
            Some(now_ms + CALL_RING_TIMEOUT_MS),
        );
        Ok(())
    }

    /// Declines the ringing call: `call_reject`, state `rejected`.
    pub fn reject_call(&mut self, now_ms: u64) -> Result<(), ClientError> {
        if self.call_state() != CallState::Ringing {
            return Err(ClientError::NoCall);
        }
        // The call ends locally even if the signal cannot be sent (the caller times out).
        let sent = self.signal_current(now_ms, CallKind::Reject, Map::new());
        self.set_call_state(CallState::Rejected, Some(CallEndReason::LocalReject), None);
        sent
    }

    /// Ends the current call: `call_hangup`, state `hangup` (while ringing: same as
    /// [`Client::reject_call`]).
    pub fn hangup_call(&mut self, now_ms: u64) -> Result<(), ClientError> {
        match self.call_state() {
            CallState::Ringing => self.reject_call(now_ms),
            s if s.is_active() => {
                let sent = self.signal_current(now_ms, CallKind::Hangup, Map::new());
                self.set_call_state(CallState::Hangup, Some(CallEndReason::LocalHangup), None);
                sent
            }
            _ => Err(ClientError::NoCall),
        }
    }

    /// Sends one local ICE candidate (opaque JSON from the app) for the current call.
    pub fn send_ice_candidate(&mut self, now_ms: u64, candidate: Value) -> Result<(), ClientError> {
        let mut fields = Map::new();
        fields.insert("candidate".into(), candidate);
        self.signal_current(now_ms, CallKind::Ice, fields)
    }

    /// The app's media connection is up: `connecting → connected`.
    pub fn call_media_connected(&mut self, _now_ms: u64) -> Result<(), ClientError> {
        if self.call_state() != CallState::Connecting {
            return Err(ClientError::NoCall);
        }
        self.set_call_state(CallState::Connected, None, None);
        Ok(())
    }

    pub(super) fn call_timeout(&mut self, now_ms: u64) {
        let Some(c) = self.calls.current.as_ref() else {
            return;
        };
        if !c.info.state.is_active() || c.deadline_ms.is_none_or(|d| now_ms < d) {
            return;
        }
        let kind = if c.info.state == CallState::Ringing {
            CallKind::Reject
        } else {
            CallKind::Hangup
        };
        // Best effort: the peer also times out if the signal cannot be sent.
        let _ = self.signal_current(now_ms, kind, Map::new());
        self.set_call_state(CallState::Ended, Some(CallEndReason::Timeout), None);
    }

    fn on_verified_signal(
        &mut self,
        now_ms: u64,
        kind: CallKind,
        from: &str,
        call_id: &str,
        fields: &Map<String, Value>,
    ) {
        let current = self.active_call().map(|c| {
            (
                c.state,
                c.peer == from && c.call_id == call_id,
                c.peer == from,
            )
        });
        let str_field = |k: &str| fields.get(k).and_then(Value::as_str).unwrap_or_default();
        match (kind, current) {
            (CallKind::Offer, Some((_, true, _))) => {} // a retransmitted offer of this call
            (CallKind::Offer, Some((CallState::Calling, false, true)))
                if self.alias_id().is_some_and(|me| me < from) => {} // glare: our call wins
            (CallKind::Offer, Some((CallState::Calling, false, true))) => {
                // glare: their call wins; ours is dropped silently (they ignore our offer)
                self.set_call_state(CallState::Ended, Some(CallEndReason::Glare), None);
                self.ring(now_ms, from, call_id, fields);
            }
            (CallKind::Offer, Some(_)) => {
                let mut f = Map::new();
                f.insert("reason".into(), Value::from(CALL_REJECT_REASON_BUSY));
                let _ = self.send_call_signal(now_ms, CallKind::Reject, from, call_id, f);
                self.out.event(Event::Call(CallEvent::MissedWhileBusy {
                    from: from.to_owned(),
                    call_id: call_id.to_owned(),
                }));
            }
            (CallKind::Offer, None) => self.ring(now_ms, from, call_id, fields),
            (CallKind::Answer, Some((CallState::Calling, true, _))) => {
                self.out.event(Event::Call(CallEvent::RemoteAnswer {
                    call_id: call_id.to_owned(),
                    sdp: str_field("sdp").to_owned(),
                }));
                self.set_call_state(
                    CallState::Connecting,
                    None,
                    Some(now_ms + CALL_RING_TIMEOUT_MS),
                );
            }
            (CallKind::Ice, Some((_, true, _))) => {
                self.out.event(Event::Call(CallEvent::RemoteIce {
                    call_id: call_id.to_owned(),
                    candidate: fields.get("candidate").cloned().unwrap_or(Value::Null),
                }));
            }
            (CallKind::Reject, Some((_, true, _))) => {
                let reason = if str_field("reason") == CALL_REJECT_REASON_BUSY {
                    CallEndReason::Busy
                } else {
                    CallEndReason::RemoteReject
                };
                self.set_call_state(CallState::Rejected, Some(reason), None);
            }
            (CallKind::Hangup, Some((_, true, _))) => {
                self.set_call_state(CallState::Ended, Some(CallEndReason::RemoteHangup), None);
            }
            // another call id, no call, an answer out of turn, `call_invite`: ignored (S-4)
            _ => {}
        }
    }

    fn ring(&mut self, now_ms: u64, from: &str, call_id: &str, fields: &Map<String, Value>) {
        let sdp = fields
            .get("sdp")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let video =
            fields.get("mode").and_then(Value::as_str) == Some("video") || sdp_has_video(&sdp);
        self.calls.current = Some(ActiveCall {
            info: CallInfo {
                call_id: call_id.to_owned(),
                peer: from.to_owned(),
                outgoing: false,
                video,
                state: CallState::Idle,
                end_reason: None,
            },
            deadline_ms: None,
        });
        self.set_call_state(
            CallState::Ringing,
            None,
            Some(now_ms + CALL_RING_TIMEOUT_MS),
        );
        self.out.event(Event::Call(CallEvent::Incoming {
            call_id: call_id.to_owned(),
            from: from.to_owned(),
            video,
            sdp,
        }));
    }
}
