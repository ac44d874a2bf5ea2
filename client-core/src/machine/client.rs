//! The [`Client`] machine; see the module doc of [`crate::machine`].

use std::collections::{BTreeMap, VecDeque};

use rand_chacha::ChaCha20Rng;
use rand_core::{Rng as _, SeedableRng as _};
use serde_json::Value;
use wire::frames::{ClientFrame, ServerFrame};

use super::actions::Actions;
use super::auth::AuthFlow;
use super::call::ActiveCall;
use super::connection::{Conn, ConnCommand, Link, NetworkState};
use super::event::{ClientError, Event};
use super::inbox::{InboxOverflow, OFFLINE_INBOX_MAX_PER_CONVERSATION, OFFLINE_INBOX_MAX_TOTAL};
use super::outbox::DEFAULT_OUTBOX_MAX_ATTEMPTS;
use super::receipts::ReceiptLevels;
use crate::crypto::signal::NonceCache;
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

#[derive(Debug)]
pub(super) enum Pending {
    Pow,
    Register,
    Challenge,
    Verify,
    Ticket,
    Friends,
}

/// The sans-IO client. `S` is the local store.
pub struct Client<S: ClientStore> {
    pub(super) store: S,
    pub(super) rng: ChaCha20Rng,
    pub(super) config: ClientConfig,
    pub(super) identity: Option<Identity>,
    pub(super) stored: Option<StoredIdentity>,
    pub(super) token: Option<SecretString>,
    pub(super) flow: Option<AuthFlow>,
    pub(super) pending: BTreeMap<RequestId, Pending>,
    pub(super) next_request: u64,
    pub(super) link: Link,
    pub(super) security: SecurityModule,
    pub(super) nonces: NonceCache,
    pub(super) typing_sent_ms: BTreeMap<String, u64>,
    pub(super) receipt_hw: ReceiptLevels,
    pub(super) inbox_overflow: InboxOverflow,
    /// A message came from an unknown alias while a friends request was in flight: sync again
    /// when it answers (its list may predate the peer's bind).
    pub(super) contacts_resync: bool,
    pub(super) actions: Actions,
    pub(super) call: Option<ActiveCall>,
    pub(super) http: VecDeque<HttpRequest>,
    pub(super) frames: VecDeque<ClientFrame>,
    pub(super) conn_cmds: VecDeque<ConnCommand>,
    pub(super) events: VecDeque<Event>,
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

pub(super) fn ok_status(status: u16) -> bool {
    (200..300).contains(&status)
}

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
            pending: BTreeMap::new(),
            next_request: 0,
            link: Link::default(),
            security,
            nonces: NonceCache::new(),
            typing_sent_ms: BTreeMap::new(),
            receipt_hw,
            inbox_overflow: InboxOverflow::new(),
            contacts_resync: false,
            actions: Actions {
                queued: actions,
                read_sent: BTreeMap::new(),
            },
            call: None,
            http: VecDeque::new(),
            frames: VecDeque::new(),
            conn_cmds: VecDeque::new(),
            events: VecDeque::new(),
        })
    }

    // ----- getters

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
        self.http.pop_front()
    }
    /// Next frame to send on the socket.
    pub fn poll_transmit(&mut self) -> Option<ClientFrame> {
        self.frames.pop_front()
    }
    /// Next socket command.
    pub fn poll_connection(&mut self) -> Option<ConnCommand> {
        self.conn_cmds.pop_front()
    }
    /// Next app event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }
    /// Earliest time [`Client::handle_timeout`] must be called.
    pub fn poll_timeout(&self) -> Option<u64> {
        let retry = match self.link.state {
            Conn::WaitingRetry { at_ms } => Some(at_ms),
            _ => None,
        };
        let call = self
            .call
            .as_ref()
            .filter(|c| c.info.state.is_active())
            .and_then(|c| c.deadline_ms);
        [retry, self.link.next_ping_ms, call]
            .into_iter()
            .flatten()
            .min()
    }

    // ----- helpers

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

    /// Feeds the response of a request from [`Client::poll_http`].
    pub fn handle_http_response(
        &mut self,
        now_ms: u64,
        id: RequestId,
        status: u16,
        body: &[u8],
    ) -> Result<(), ClientError> {
        let Some(p) = self.pending.remove(&id) else {
            return Ok(());
        };
        let v = parse_body(body);
        match p {
            Pending::Pow => self.on_pow(status, v.as_ref()),
            Pending::Register => self.on_register(now_ms, status, v.as_ref()),
            Pending::Challenge => self.on_challenge(now_ms, status, v.as_ref()),
            Pending::Verify => self.on_verify(now_ms, status, v.as_ref())?,
            Pending::Ticket => self.on_ticket(now_ms, status, v.as_ref()),
            Pending::Friends => self.on_friends_response(now_ms, status, v)?,
        }
        Ok(())
    }

    /// Timers: heartbeat, reconnect and the call timeout.
    pub fn handle_timeout(&mut self, now_ms: u64) {
        self.call_timeout(now_ms);
        self.connection_timers(now_ms);
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
        match frame {
            ServerFrame::Ack(a) => self.on_ack(a.id.as_str(), a.seq.get())?,
            ServerFrame::Msg(m) => self.on_msg(now_ms, &m)?,
            ServerFrame::Delivered(r) => self.on_receipt(&r, MessageStatus::Delivered)?,
            ServerFrame::Read(r) => self.on_receipt(&r, MessageStatus::Read)?,
            ServerFrame::Typing(t) => self.events.push_back(Event::Typing {
                from_alias_id: t.from.into_string(),
                conversation_id: t.conv_id.into_string(),
            }),
            ServerFrame::Retract(r) => {
                self.on_retract(r.id.as_str(), r.from.as_str(), r.conv_id.as_str())?;
            }
            ServerFrame::ChannelPost(p) => self.events.push_back(Event::ChannelPost(
                serde_json::to_value(&p).unwrap_or(Value::Null),
            )),
            ServerFrame::PaymentConfirmed(p) => self.on_payment_confirmed(p)?,
            ServerFrame::FriendRequest(_) | ServerFrame::FriendAccepted(_) => {
                self.sync_contacts(now_ms);
            }
            ServerFrame::Goaway(g) => self.on_goaway(g),
            ServerFrame::Error(e) => self.on_error_frame(e.id)?,
            ServerFrame::Call(c) => self.on_call(now_ms, &c)?,
            ServerFrame::Unknown(_) => {}
        }
        Ok(())
    }
}
