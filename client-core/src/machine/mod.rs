//! The client state machine (sans-IO): accounts, connection, outbox, inbound processing.
//!
//! ```text
//! inputs  (all carry `now`, epoch ms)          outputs (drain after every input)
//!   register_account / restore_session           poll_http()       -> HttpRequest
//!   connect / disconnect                         poll_transmit()   -> ClientFrame
//!   send_message / mark_as_read / send_typing    poll_connection() -> ConnCommand
//!   retract_message / sync_contacts / ...        poll_event()      -> Event
//!   call / answer_call / reject_call / hangup_call
//!   send_ice_candidate / call_media_connected
//!   handle_http_response(id, status, body)       poll_timeout()    -> Option<u64>
//!   handle_connected / handle_disconnected
//!   handle_connect_refused(status)
//!   handle_frame / handle_text
//!   handle_timeout
//! ```
//!
//! [`Client`] (in `client.rs`) is the dispatcher: the shared state, the output queues and the
//! routing of every input. Behind it, one private module per sub-machine owns its part of the
//! state and starts with a short doc of the rules it enforces:
//!
//! | module | sub-machine | decisions below |
//! |---|---|---|
//! | `auth` | registration, 409 recovery, challenge/verify | Registration |
//! | `connection` | ticket, socket, heartbeat, backoff, GOAWAY, re-auth | Connection, Refused token |
//! | `outbox` | sending, statuses, `ack`, `error` frames, typing notices | Outbox, Statuses |
//! | `receipts` | `delivered` / `read`, receipts that overtake the `ack` | Statuses |
//! | `inbound` | dedup, trust guard, decryption, storage, `delivered` | Inbound |
//! | `inbox` | the offline inbox: parking, bounds, retries | Inbound, Offline inbox bound |
//! | `contacts` | the friends list and the sessions it creates | Trust, Peer alias change |
//! | `vanity` | following a peer's new alias | Peer alias change |
//! | `trust` | the guard, verification, key changes | Trust |
//! | `actions` | the durable queue of `read` and `retract` frames | Read receipts and retracts |
//! | `read_markers` | `mark_as_read`, unread counts | Local read marker |
//! | `retract` | retracts, ours and the peer's | Retract |
//! | `payments` | `payment_confirmed`, once per order | `payment_confirmed` |
//! | `call` | the call state machine and its signals | Calls |
//! | `event` | [`Event`] and [`ClientError`] | |
//!
//! Decisions (see also the crate README note in the report):
//! * **Registration** = PoW (A1, failure tolerated as in every reference client) → A2 → A3 → A4.
//!   The identity is stored only after A4 succeeded. On **409** the returned `uuid` is adopted
//!   only if A3/A4 with *our* Ed25519 key succeed for it: a relay issues a token only for a
//!   signature by the account's registered key, so success proves the account is ours; any
//!   failure ends in [`AuthFailure::RecoveryRejected`] and nothing is stored (S-10).
//! * **Connection**: ticket (A5) first, JWT in the query when the ticket request fails.
//!   Heartbeat `ping` every [`HEARTBEAT_INTERVAL_MS`]. Reconnect after
//!   `min(1 s · 2^n, 30 s) × jitter`, jitter uniform in `[0.7, 1.0)` from the seeded RNG
//!   (`n` = retries fired since the last open). No reconnect after GOAWAY or `disconnect`.
//! * **Refused token** (401 on the ticket request, e.g. `TOKEN_REVOKED`/`TOKEN_EXPIRED`/
//!   `TOKEN_INVALID`/`AUTH_REQUIRED`, or on the WebSocket upgrade, reported by the shell with
//!   [`Client::handle_connect_refused`], e.g. `TICKET_INVALID` or a refused fallback token):
//!   the token is dropped and the machine **re-authenticates once** with the stored identity
//!   (challenge + verify, what `restore_session` does; [`Event::Authenticated`] is emitted),
//!   then reconnects with the fresh token. A 401 on the ticket request goes straight to
//!   re-authentication (the JWT fallback would be refused too); other ticket failures still
//!   fall back to the JWT. "Once" = per episode: the budget is restored only by an open socket
//!   or an app `connect`. Terminal, with [`Event::AuthFailed`], `NetworkState::Disconnected`
//!   and no further attempt until the app authenticates and calls `connect` again: the relay
//!   refuses challenge/verify (any 4xx but 408/429, or a body not understood), or refuses the
//!   fresh token as well ([`AuthFailure::TokenRefused`]). When the relay cannot answer the
//!   re-authentication (transport error, 408, 429, 5xx) it is retried on the reconnect backoff,
//!   like any failed attempt. **GOAWAY wins** (PROTOCOL S-12): after a GOAWAY the machine
//!   neither reconnects nor re-authenticates on its own (late ticket/upgrade answers are
//!   ignored), otherwise two devices of one account would keep revoking each other. The re-auth
//!   path is for a 401 without a preceding GOAWAY (the socket died before the GOAWAY arrived,
//!   the token expired); an app `connect` after a GOAWAY is the user taking the session back,
//!   so a 401 then re-authenticates too (and the other device gets the GOAWAY). A contacts
//!   sync refused 401 while the socket stays open (its token expired under it) re-authenticates
//!   the same way, keeping the socket; its budget also comes back with a sync the token passed.
//! * **Outbox**: an intent stays until the relay's `ack` for its id; on every open `sync` is sent,
//!   then every intent is re-sent with the same id in `(addedAt, id)` order. Each transmission
//!   counts an attempt; an intent that already used [`ClientConfig::outbox_max_attempts`]
//!   attempts (or that the relay refuses with an `error` frame naming its id) becomes `failed`.
//! * **Statuses** only move up (`sending < sent < delivered < read`, `failed` only from
//!   `sending`). Receipts apply to own acknowledged messages with `seq ≤ receipt.seq`; a receipt
//!   that arrives before the ack is remembered per conversation (highest `delivered` and `read`
//!   seq, persisted as [`crate::store::ReceiptLevel`] so a restart between receipt and ack
//!   still applies it) and applied when the ack lands.
//! * **Inbound**: deduplicated by id (a duplicate is re-acknowledged with `delivered` but not
//!   re-emitted); `delivered` is sent only after the message is stored. Messages with no
//!   session, failing decryption, or from a verified contact whose key changed are parked in the
//!   offline inbox (never dropped) and retried when a session appears (contacts sync).
//!   Parked messages are released per conversation in seq order (seq-less ones last, by id).
//! * **Peer alias change** (the peer bound a vanity alias: same conversation, old alias
//!   retired): a message on a known conversation from another alias is parked and triggers a
//!   contacts sync (again after an answer already in flight). When the sync shows the
//!   conversation under a new alias with the same keys, the session (and a trust record) follows
//!   the alias silently and the parked messages are retried; with another X25519 key the alias
//!   follows only through the key-change path below; with another Ed25519 key and the same
//!   X25519 key it is not accepted.
//! * **Offline inbox bound**: at most [`ClientConfig::offline_max_per_conversation`] parked
//!   messages per conversation ([`OFFLINE_INBOX_MAX_PER_CONVERSATION`]) and
//!   [`ClientConfig::offline_max_total`] in all ([`OFFLINE_INBOX_MAX_TOTAL`]). A message that
//!   would exceed a bound is refused: not stored, and no `delivered` is sent, so the relay keeps
//!   it (the inbox never drops or evicts anything). [`Event::OfflineInboxFull`] is emitted once
//!   per conversation per episode. When retrying drains the conversation below its bound the
//!   machine sends `sync` (the relay re-pushes what it kept); every reconnect does too.
//! * **`payment_confirmed`** is deduplicated by `order_id` durably
//!   ([`crate::store::ClientStore::put_confirmed_order`]): the relay re-sends it on every `sync`
//!   for a while (at least once on the wire), the app sees one [`Event::PaymentConfirmed`] per
//!   order across reconnects and restarts.
//! * **Trust**: the guard runs on every inbound message from a verified contact. A key change
//!   reported by contacts sync never replaces a verified session: it is kept as
//!   `pendingEcdhPublicKey`, a `security_violation` is emitted and decryption is refused until
//!   the user calls [`Client::reset_trust_state`] (which adopts the new key, unverified). For an
//!   unverified contact the new key replaces the old one and [`Event::PeerKeyChanged`] is emitted.
//! * **Local read marker**: `mark_as_read(conv, max_seq)` also stores status `read` on our
//!   copy of every inbound message of `conv` with `seq ≤ max_seq` (inbound messages are stored
//!   `delivered`; the status never moves down, and no `StatusChange` is emitted, that event
//!   stays about own messages). [`Client::unread_count`] counts inbound messages not `read`.
//! * **Read receipts and retracts** need no open socket: while closed they are queued durably
//!   ([`crate::store::PendingAction`]) and sent on the next open after `sync` and the outbox
//!   re-sends (so a retract always follows its message), in queue order. Only the highest `read`
//!   per conversation is queued; while open a `read` not above the last one sent on this socket
//!   is skipped. Neither frame is acknowledged by the relay, so once handed to an open socket it
//!   leaves the queue (as every reference client). `mark_as_read`/`retract_message` no longer
//!   return `NotConnected`.
//! * **Retract**: own messages only, locally replaced by the placeholder (`msgType`
//!   `retracted`); an inbound retract applies only to an inbound message of its conversation
//!   whose peer sent it (under the message's alias or the session's, after a vanity bind).
//! * **Calls** (PROTOCOL §3.7, SPEC `CallState`): one call at a time. `call(to, options)` sends
//!   `call_offer` (`sdp`, `sdp_type`, `mode`; SDP/ICE are opaque app strings) → `calling`; an
//!   offer → `ringing` + [`CallEvent::Incoming`]; `answer_call` / a matching `call_answer` →
//!   `connecting`; the app's `call_media_connected` → `connected`. Final states: `hangup` (we
//!   hung up), `rejected` (declined either way, reason `busy` when the callee was busy),
//!   `ended` (peer hangup, timeout, lost glare); a new call may start from any final state.
//!   Signals need an open socket (they are never queued): while closed, a command that sends
//!   one returns [`ClientError::NotConnected`]; `reject_call`/`hangup_call` still end the call
//!   locally.
//!   Every signal is sealed/opened with `seal_signal`/`open_signal` (signature, 60 s window,
//!   nonce cache); a refused one emits [`CallEvent::SignalRefused`] and changes nothing.
//!   Answer/ICE/reject/hangup apply only when `call_id` **and** sender match the current call,
//!   otherwise they are ignored (fixes S-4). **Timeout**: [`CALL_RING_TIMEOUT_MS`] (30 s) in
//!   `calling` (we send `call_hangup`), `ringing` (we send `call_reject`) and `connecting`
//!   (`call_hangup`), then `ended`/`Timeout`. **Glare** (an offer from the peer we are
//!   calling): the call placed by the lexicographically lower alias wins on both sides; the
//!   winner ignores the losing offer, the loser ends its own call (`Glare`, nothing sent) and
//!   rings for the winner's. Any other offer during a call is refused with `call_reject`
//!   (`reason: "busy"`) and [`CallEvent::MissedWhileBusy`]; it never replaces the call.
//!   [`Event::CallSignal`] is still emitted for every verified signal (low level).

mod actions;
mod auth;
mod call;
mod client;
mod connection;
mod contacts;
mod event;
mod inbound;
mod inbox;
mod outbox;
mod payments;
mod read_markers;
mod receipts;
mod retract;
mod trust;
mod vanity;

pub use self::auth::AuthFailure;
pub use self::call::{
    CALL_REJECT_REASON_BUSY, CALL_RING_TIMEOUT_MS, CallEndReason, CallEvent, CallInfo, CallOptions,
    CallState,
};
pub use self::client::{Client, ClientConfig, HttpRequest, Method, RequestId};
pub use self::connection::{
    ConnCommand, HEARTBEAT_INTERVAL_MS, NetworkState, RECONNECT_BASE_MS,
    RECONNECT_JITTER_MIN_PERMILLE, RECONNECT_JITTER_SPAN_PERMILLE, RECONNECT_MAX_MS, WsAuth,
};
pub use self::contacts::{CONTACTS_RETRY_BASE_MS, CONTACTS_RETRY_MAX_MS};
pub use self::event::{ClientError, Event};
pub use self::inbox::{InboxLimit, OFFLINE_INBOX_MAX_PER_CONVERSATION, OFFLINE_INBOX_MAX_TOTAL};
pub use self::outbox::{
    DEFAULT_OUTBOX_MAX_ATTEMPTS, OUTBOX_RETRY_BASE_MS, OUTBOX_RETRY_MAX_MS, TYPING_DEBOUNCE_MS,
    outbox_retry_delay_ms,
};
pub use self::retract::{HELD_RETRACTS_MAX, RETRACTED_MSG_TYPE, RETRACTED_TEXT};
