//! The dispatcher: [`Client`]'s state, its output queues and the routing of every input to
//! the sub-machine that owns it.
//!
//! Rules enforced here: an HTTP response is routed by the request it answers (an unknown or
//! already answered id is ignored); an undecodable text frame is dropped; a frame type the
//! machine does not know is ignored; `handle_timeout` runs the call timeout before the
//! connection timers. Everything else lives in the sub-machine modules listed in
//! [`crate::machine`].

use std::collections::{BTreeMap, VecDeque};

use rand_chacha::ChaCha20Rng;
use rand_core::{Rng as _, SeedableRng as _};
use serde_json::Value;
use wire::frames::{ClientFrame, ServerFrame};

use super::actions::Actions;
use super::auth::AuthFlow;
use super::call::Calls;
use super::connection::{Conn, ConnCommand, Link, NetworkState};
use super::contacts::ContactsSync;
use super::event::{ClientError, Event};
use super::inbox::{InboxOverflow, OFFLINE_INBOX_MAX_PER_CONVERSATION, OFFLINE_INBOX_MAX_TOTAL};
use super::outbox::{DEFAULT_OUTBOX_MAX_ATTEMPTS, Sending};
use super::receipts::ReceiptLevels;
use super::retract::HeldRetracts;
use crate::keys::{Identity, SecretString, X25519Path};
use crate::security::SecurityModule;
use crate::store::{ClientStore, MessageStatus, StoredIdentity};

/// Tunables of the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientConfig {
    /// X25519 path used when registering or restoring.
    pub x25519_path: X25519Path,
    /// Transmissions before an outbox intent fails.
    pub outbox_max_attempts: u32,
    /// Parked messages per conversation before further ones are refused (left with the relay).
    pub offline_max_per_conversation: usize,
    /// Parked messages in total before further ones are refused.
    pub offline_max_total: usize,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            x25519_path: X25519Path::Spec,
            outbox_max_attempts: DEFAULT_OUTBOX_MAX_ATTEMPTS,
            offline_max_per_conversation: OFFLINE_INBOX_MAX_PER_CONVERSATION,
            offline_max_total: OFFLINE_INBOX_MAX_TOTAL,
        }
    }
}

/// Correlates an HTTP request with its response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(pub u64);

/// HTTP method of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// GET
    Get,
    /// POST
    Post,
    /// PUT
    Put,
}

/// An HTTP request for the shell to perform.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpRequest {
    /// Pass back to [`Client::handle_http_response`].
    pub id: RequestId,
    /// Method.
    pub method: Method,
    /// Path below the base URL.
    pub path: String,
    /// JSON body, if any.
    pub body: Option<Value>,
    /// Attach `Authorization: Bearer <Client::bearer_token()>`.
    pub bearer: bool,
}

/// What an outstanding HTTP request is for (routes its answer).
#[derive(Debug)]
pub(super) enum Pending {
    Pow,
    Register,
    Challenge,
    Verify,
    Ticket,
    Friends,
}

/// The sans-IO client machine. `S` is the local store.
///
/// # Inputs
/// Every input carries `now` (epoch ms); none blocks or performs IO.
/// * App commands: [`register_account`](Self::register_account),
///   [`restore_session`](Self::restore_session), [`connect`](Self::connect),
///   [`disconnect`](Self::disconnect), [`send_message`](Self::send_message),
///   [`send_typing`](Self::send_typing), [`mark_as_read`](Self::mark_as_read),
///   [`retract_message`](Self::retract_message), [`sync_contacts`](Self::sync_contacts),
///   [`verify_input_code`](Self::verify_input_code),
///   [`mark_as_verified`](Self::mark_as_verified),
///   [`reset_trust_state`](Self::reset_trust_state), [`call`](Self::call),
///   [`answer_call`](Self::answer_call), [`reject_call`](Self::reject_call),
///   [`hangup_call`](Self::hangup_call), [`send_ice_candidate`](Self::send_ice_candidate),
///   [`call_media_connected`](Self::call_media_connected),
///   [`send_call_signal`](Self::send_call_signal).
/// * What the shell observed: [`handle_http_response`](Self::handle_http_response) (the answer
///   to a request from `poll_http`; status `0` for a transport error),
///   [`handle_connected`](Self::handle_connected),
///   [`handle_disconnected`](Self::handle_disconnected) (closed, or failed to open),
///   [`handle_connect_refused`](Self::handle_connect_refused) (the upgrade answered with an
///   HTTP status), [`handle_text`](Self::handle_text) / [`handle_frame`](Self::handle_frame)
///   (one WebSocket text message), [`handle_timeout`](Self::handle_timeout).
///
/// # Outputs
/// * [`poll_http`](Self::poll_http) → [`HttpRequest`]: perform it (with
///   [`bearer_token`](Self::bearer_token) when `bearer`), then feed the answer back.
/// * [`poll_connection`](Self::poll_connection) → [`ConnCommand`]: open or close the socket.
/// * [`poll_transmit`](Self::poll_transmit) → `ClientFrame`: send `frame.encode()` on the
///   open socket.
/// * [`poll_event`](Self::poll_event) → [`Event`]: hand it to the app.
/// * [`poll_timeout`](Self::poll_timeout): when to call `handle_timeout` next (heartbeat,
///   reconnect, call timeout, contacts retry).
///
/// Queries that change nothing: [`network_state`](Self::network_state),
/// [`is_connected`](Self::is_connected), [`alias_id`](Self::alias_id),
/// [`trust_state`](Self::trust_state), [`unread_count`](Self::unread_count),
/// [`current_call`](Self::current_call), [`call_state`](Self::call_state),
/// [`store`](Self::store).
///
/// # Drain order
/// After **every** input, drain the queues completely, in this order: `poll_http`,
/// `poll_connection`, `poll_transmit`, `poll_event`; then re-arm the timer from
/// `poll_timeout` (any input may move it or clear it). Events come last, so an app that
/// reacts to one with a new command finds the effects of the input that caused it already
/// handed to the shell. The crate doc shows the loop.
pub struct Client<S: ClientStore> {
    // Shared by every sub-machine: the store, randomness, tunables and who we are.
    pub(super) store: S,
    pub(super) rng: ChaCha20Rng,
    pub(super) config: ClientConfig,
    /// Our keys, once authenticated (written by `auth`).
    pub(super) identity: Option<Identity>,
    /// The stored identity (written by `auth`).
    pub(super) stored: Option<StoredIdentity>,
    /// The JWT (written by `auth`, dropped by `connection` when the relay refuses it).
    pub(super) token: Option<SecretString>,

    // Sub-machine state, each owned by its module.
    /// `auth`: the registration or login in progress.
    pub(super) flow: Option<AuthFlow>,
    /// `connection`.
    pub(super) link: Link,
    /// `outbox`: intents refused with a transient code, until their next transmission, and
    /// the last typing notice per conversation.
    pub(super) sending: Sending,
    /// `receipts`: receipts that may overtake an ack.
    pub(super) receipt_hw: ReceiptLevels,
    /// `inbox`: conversations over a bound.
    pub(super) inbox_overflow: InboxOverflow,
    /// `contacts`: a sync to follow the one in flight, and the retry of a failed sync that
    /// parked messages or held retracts wait for.
    pub(super) contacts: ContactsSync,
    /// `trust`: the trust table.
    pub(super) security: SecurityModule,
    /// `retract`: inbound retracts from an alias the session does not know yet, until the
    /// contacts sync they asked for answers.
    pub(super) held_retracts: HeldRetracts,
    /// `actions`: queued `read` / `retract` frames.
    pub(super) actions: Actions,
    /// `call`: the current (or last) call and the signals' replay protection.
    pub(super) calls: Calls,

    /// What the client hands to its shell, and the requests not answered yet.
    pub(super) out: Effects,
}

/// What a [`Client`] hands to its shell, each kind in its own queue drained by the `poll_*`
/// methods in order, and the HTTP requests handed out and not answered yet (each answer goes
/// to the sub-machine its request names, once).
#[derive(Debug, Default)]
pub(super) struct Effects {
    http: VecDeque<HttpRequest>,
    frames: VecDeque<ClientFrame>,
    commands: VecDeque<ConnCommand>,
    events: VecDeque<Event>,
    /// Requests handed out and not answered yet, by what the answer is for.
    pending: BTreeMap<RequestId, Pending>,
    next_request: u64,
}

impl Effects {
    /// Queues an HTTP request whose answer goes to the sub-machine named by `p`.
    pub(super) fn request(
        &mut self,
        method: Method,
        path: String,
        body: Option<Value>,
        bearer: bool,
        p: Pending,
    ) {
        let id = RequestId(self.next_request);
        self.next_request += 1;
        self.pending.insert(id, p);
        self.http.push_back(HttpRequest {
            id,
            method,
            path,
            body,
            bearer,
        });
    }

    /// What the answer to request `id` is for; `None` when it is unknown or was answered.
    fn answered(&mut self, id: RequestId) -> Option<Pending> {
        self.pending.remove(&id)
    }

    /// Whether a request for `p`'s kind is handed out and not answered yet.
    pub(super) fn awaits(&self, p: impl Fn(&Pending) -> bool) -> bool {
        self.pending.values().any(p)
    }

    /// Queues a frame to send on the socket.
    pub(super) fn frame(&mut self, f: ClientFrame) {
        self.frames.push_back(f);
    }

    /// Queues a command for the socket (open or close it).
    pub(super) fn command(&mut self, c: ConnCommand) {
        self.commands.push_back(c);
    }

    /// Queues an event for the app.
    pub(super) fn event(&mut self, e: Event) {
        self.events.push_back(e);
    }
}

impl<S: ClientStore> std::fmt::Debug for Client<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("alias", &self.stored.as_ref().map(|s| s.alias_id.clone()))
            .field("conn", &self.link.state)
            .field("network", &self.link.network)
            .finish_non_exhaustive()
    }
}

/// A 2xx status.
pub(super) fn ok_status(status: u16) -> bool {
    (200..300).contains(&status)
}

/// A response body as JSON (`Null` when empty, `None` when not JSON).
pub(super) fn parse_body(body: &[u8]) -> Option<Value> {
    if body.is_empty() {
        return Some(Value::Null);
    }
    serde_json::from_slice(body).ok()
}

impl<S: ClientStore> Client<S> {
    /// A client over `store`, with randomness from `rng_seed`. Loads trust records and identity.
    pub fn new(store: S, rng_seed: [u8; 32], config: ClientConfig) -> Result<Self, ClientError> {
        let security = SecurityModule::from_records(store.list_trust()?);
        let stored = store.load_identity()?;
        let receipt_hw = store
            .list_receipt_levels()?
            .into_iter()
            .map(|l| (l.conversation_id, l.seqs))
            .collect();
        let actions = store
            .list_pending_actions()?
            .into_iter()
            .map(|a| (a.order, a))
            .collect();
        Ok(Self {
            store,
            rng: ChaCha20Rng::from_seed(rng_seed),
            config,
            identity: None,
            stored,
            token: None,
            flow: None,
            link: Link::default(),
            sending: Sending::default(),
            receipt_hw,
            inbox_overflow: InboxOverflow::new(),
            contacts: ContactsSync::default(),
            held_retracts: HeldRetracts::default(),
            security,
            actions: Actions {
                queued: actions,
                read_sent: BTreeMap::new(),
            },
            calls: Calls::new(),
            out: Effects::default(),
        })
    }

    // ----- queries

    /// The local store.
    pub fn store(&self) -> &S {
        &self.store
    }
    /// The local store, mutably (tests and the shell's maintenance).
    pub fn store_mut(&mut self) -> &mut S {
        &mut self.store
    }
    /// The JWT to attach to requests with `bearer: true`.
    pub fn bearer_token(&self) -> Option<&str> {
        self.token.as_ref().map(SecretString::expose)
    }
    /// Current network state.
    pub fn network_state(&self) -> NetworkState {
        self.link.network
    }
    /// Our alias, once known.
    pub fn alias_id(&self) -> Option<&str> {
        self.stored.as_ref().map(|s| s.alias_id.as_str())
    }
    /// True while the socket is open.
    pub fn is_connected(&self) -> bool {
        self.link.state == Conn::Open
    }

    // ----- outputs

    /// Next HTTP request to perform.
    pub fn poll_http(&mut self) -> Option<HttpRequest> {
        self.out.http.pop_front()
    }
    /// Next frame to send on the socket.
    pub fn poll_transmit(&mut self) -> Option<ClientFrame> {
        self.out.frames.pop_front()
    }
    /// Next socket command.
    pub fn poll_connection(&mut self) -> Option<ConnCommand> {
        self.out.commands.pop_front()
    }
    /// Next app event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.out.events.pop_front()
    }
    /// Earliest time [`Client::handle_timeout`] must be called.
    pub fn poll_timeout(&self) -> Option<u64> {
        let retry = match self.link.state {
            Conn::WaitingRetry { at_ms } => Some(at_ms),
            _ => None,
        };
        let call = self.calls.deadline_ms();
        // An intent waits for its retry only while the socket is open (on open, all are sent).
        let outbox = self
            .is_connected()
            .then(|| self.sending.next_ms())
            .flatten();
        [
            retry,
            self.link.next_ping_ms,
            call,
            self.contacts.retry_at_ms(),
            outbox,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    // ----- helpers of the sub-machines

    /// A random UUID v4 (message and call ids).
    pub(super) fn new_message_id(&mut self) -> String {
        let mut b = [0u8; 16];
        self.rng.fill_bytes(&mut b);
        b[6] = (b[6] & 0x0f) | 0x40;
        b[8] = (b[8] & 0x3f) | 0x80;
        let h = crate::encoding::to_hex(&b);
        format!(
            "{}-{}-{}-{}-{}",
            &h[..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..]
        )
    }

    // ----- inputs routed to the sub-machines (app commands live in their modules)

    /// Feeds the response of a request from [`Client::poll_http`].
    pub fn handle_http_response(
        &mut self,
        now_ms: u64,
        id: RequestId,
        status: u16,
        body: &[u8],
    ) -> Result<(), ClientError> {
        let Some(p) = self.out.answered(id) else {
            return Ok(());
        };
        let v = parse_body(body);
        match p {
            // auth
            Pending::Pow => self.on_pow(status, v.as_ref()),
            Pending::Register => self.on_register(now_ms, status, v.as_ref()),
            Pending::Challenge => self.on_challenge(now_ms, status, v.as_ref()),
            Pending::Verify => self.on_verify(now_ms, status, v.as_ref())?,
            // connection
            Pending::Ticket => self.on_ticket(now_ms, status, v.as_ref()),
            // contacts
            Pending::Friends => self.on_friends_response(now_ms, status, v)?,
        }
        Ok(())
    }

    /// Timers: heartbeat, reconnect, the call timeout, the contacts retry and the outbox's
    /// retries after transient refusals. A store that fails while an intent is resent leaves
    /// it in the outbox (it goes again on the next open).
    pub fn handle_timeout(&mut self, now_ms: u64) {
        self.call_timeout(now_ms);
        self.connection_timers(now_ms);
        self.contacts_timer(now_ms);
        let _ = self.outbox_timer(now_ms);
    }

    /// Feeds a text frame; unparseable frames are dropped.
    pub fn handle_text(&mut self, now_ms: u64, text: &str) -> Result<(), ClientError> {
        match ServerFrame::decode(text) {
            Ok(f) => self.handle_frame(now_ms, f),
            Err(_) => Ok(()),
        }
    }

    /// Feeds a decoded frame.
    pub fn handle_frame(&mut self, now_ms: u64, frame: ServerFrame) -> Result<(), ClientError> {
        // ack, error → outbox; msg → inbound; delivered/read → receipts; retract → retract;
        // payment_confirmed → payments; friend_* → contacts; goaway → connection; call_* →
        // call; typing and channel posts go to the app as they are.
        match frame {
            ServerFrame::Ack(a) => self.on_ack(a.id.as_str(), a.seq.get())?,
            ServerFrame::Msg(m) => self.on_msg(now_ms, &m)?,
            ServerFrame::Delivered(r) => self.on_receipt(&r, MessageStatus::Delivered)?,
            ServerFrame::Read(r) => self.on_receipt(&r, MessageStatus::Read)?,
            ServerFrame::Typing(t) => self.out.event(Event::Typing {
                from_alias_id: t.from.into_string(),
                conversation_id: t.conv_id.into_string(),
            }),
            ServerFrame::Retract(r) => {
                self.on_retract(now_ms, r.id.as_str(), r.from.as_str(), r.conv_id.as_str())?;
            }
            ServerFrame::ChannelPost(p) => self.out.event(Event::ChannelPost(
                serde_json::to_value(&p).unwrap_or(Value::Null),
            )),
            ServerFrame::PaymentConfirmed(p) => self.on_payment_confirmed(p)?,
            ServerFrame::FriendRequest(_) | ServerFrame::FriendAccepted(_) => {
                self.sync_contacts(now_ms);
            }
            ServerFrame::Goaway(g) => self.on_goaway(g),
            ServerFrame::Error(e) => self.on_error_frame(now_ms, &e.error, e.id)?,
            ServerFrame::Call(c) => self.on_call(now_ms, &c)?,
            ServerFrame::Unknown(_) => {}
        }
        Ok(())
    }
}
