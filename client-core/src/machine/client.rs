//! The [`Client`] machine; see the module doc of [`crate::machine`].

use std::collections::{BTreeMap, VecDeque};

use rand_chacha::ChaCha20Rng;
use rand_core::{Rng as _, SeedableRng as _};
use serde_json::{Value, json};
use wire::frames::{ClientFrame, ServerFrame};

use super::actions::Actions;
use super::call::ActiveCall;
use super::connection::{Conn, ConnCommand, Link, NetworkState};
use super::event::{ClientError, Event};
use super::inbox::{InboxOverflow, OFFLINE_INBOX_MAX_PER_CONVERSATION, OFFLINE_INBOX_MAX_TOTAL};
use super::outbox::DEFAULT_OUTBOX_MAX_ATTEMPTS;
use super::receipts::ReceiptLevels;
use crate::crypto::signal::NonceCache;
use crate::keys::{Identity, KeyError, SecretString, X25519Path, derive_identity};
use crate::pow::{POW_DEFAULT_DIFFICULTY, solve_pow};
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

/// Why authentication failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthFailure {
    /// Registration refused with this status.
    Register(u16),
    /// The 409 account could not be proven ours (see the module doc).
    RecoveryRejected,
    /// Challenge or verify refused with this status.
    Auth(u16),
    /// A response body was not understood.
    BadResponse,
    /// The relay refused the token (this status, 401, on the ticket request or the WebSocket
    /// upgrade) again right after the machine re-authenticated: terminal, no reconnect.
    TokenRefused(u16),
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

#[derive(Debug)]
pub(super) struct AuthFlow {
    identity: Identity,
    nickname: String,
    uuid: Option<String>,
    alias: Option<String>,
    recovered: bool,
    /// Started by the machine after the relay refused the token (not by the app).
    reauth: bool,
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

    // ----- accounts

    /// Starts registration (idempotent for the same mnemonic; see the module doc).
    pub fn register_account(
        &mut self,
        _now_ms: u64,
        mnemonic: &str,
        nickname: &str,
    ) -> Result<(), ClientError> {
        if self.flow.is_some() {
            return Err(ClientError::Busy);
        }
        let identity = derive_identity(mnemonic, self.config.x25519_path)?;
        self.flow = Some(AuthFlow {
            identity,
            nickname: nickname.to_owned(),
            uuid: None,
            alias: None,
            recovered: false,
            reauth: false,
        });
        self.request(
            Method::Post,
            wire::http::paths::POW_CHALLENGE.into(),
            Some(json!({})),
            false,
            Pending::Pow,
        );
        Ok(())
    }

    /// Re-authenticates the stored identity; returns `(aliasId, nickname)` or `None` when none is stored.
    pub fn restore_session(
        &mut self,
        _now_ms: u64,
    ) -> Result<Option<(String, String)>, ClientError> {
        let Some(stored) = self.store.load_identity()? else {
            return Ok(None);
        };
        if self.flow.is_some() {
            return Err(ClientError::Busy);
        }
        let out = (stored.alias_id.clone(), stored.nickname.clone());
        self.start_auth_round(&stored, false)?;
        Ok(Some(out))
    }

    /// Challenge/verify (A3/A4) for a stored identity, after checking its keys.
    pub(super) fn start_auth_round(
        &mut self,
        stored: &StoredIdentity,
        reauth: bool,
    ) -> Result<(), ClientError> {
        let identity = derive_identity(stored.mnemonic.expose(), stored.x25519_path.into())?;
        if identity.signing_public_b64() != stored.signing_public_key
            || identity.ecdh_public_b64() != stored.ecdh_public_key
        {
            return Err(ClientError::Key(KeyError::PublicKey));
        }
        self.flow = Some(AuthFlow {
            identity,
            nickname: stored.nickname.clone(),
            uuid: Some(stored.uuid.clone()),
            alias: Some(stored.alias_id.clone()),
            recovered: false,
            reauth,
        });
        self.send_challenge(&stored.uuid);
        Ok(())
    }

    fn send_challenge(&mut self, uuid: &str) {
        self.request(
            Method::Post,
            wire::http::paths::AUTH_CHALLENGE.into(),
            Some(json!({ "user_uuid": uuid })),
            false,
            Pending::Challenge,
        );
    }

    fn fail_auth(&mut self, now_ms: u64, f: AuthFailure) {
        let reauth = self.flow.take().is_some_and(|f| f.reauth);
        self.auth_failed(now_ms, reauth, f);
    }

    /// An auth flow ended without a token. A re-authentication the machine started itself is
    /// retried later when the relay could not answer (transport error `0`, 408, 429, 5xx) and
    /// the app still wants to be connected; any other failure of it is terminal.
    pub(super) fn auth_failed(&mut self, now_ms: u64, reauth: bool, f: AuthFailure) {
        if reauth && self.reauth_failed(now_ms, &f) {
            return;
        }
        self.events.push_back(Event::AuthFailed(f));
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

    fn on_pow(&mut self, status: u16, v: Option<&Value>) {
        let Some(flow) = &self.flow else { return };
        // As every reference client: a failed PoW fetch registers without a nonce.
        let nonce = v.filter(|_| ok_status(status)).and_then(|v| {
            let ch = v.get("challenge_string")?.as_str()?;
            let d = v
                .get("difficulty")
                .and_then(Value::as_u64)
                .and_then(|d| u32::try_from(d).ok())
                .filter(|d| *d > 0)
                .unwrap_or(POW_DEFAULT_DIFFICULTY);
            solve_pow(ch, d).ok()
        });
        let mut body = json!({
            "ed25519_public_key": flow.identity.signing_public_b64(),
            "x25519_public_key": flow.identity.ecdh_public_b64(),
            "nickname": flow.nickname,
        });
        if let (Some(n), Some(o)) = (nonce, body.as_object_mut()) {
            o.insert("pow_nonce".into(), Value::from(n));
        }
        self.request(
            Method::Post,
            wire::http::paths::REGISTER.into(),
            Some(body),
            false,
            Pending::Register,
        );
    }

    fn on_register(&mut self, now_ms: u64, status: u16, v: Option<&Value>) {
        let ids = v.and_then(|v| {
            Some((
                v.get("uuid")?.as_str()?.to_owned(),
                v.get("alias_id")?.as_str()?.to_owned(),
            ))
        });
        let recovered = status == 409;
        if !(ok_status(status) || recovered) {
            return self.fail_auth(now_ms, AuthFailure::Register(status));
        }
        let Some((uuid, alias)) = ids else {
            return self.fail_auth(
                now_ms,
                if recovered {
                    AuthFailure::RecoveryRejected
                } else {
                    AuthFailure::BadResponse
                },
            );
        };
        if let Some(f) = self.flow.as_mut() {
            f.uuid = Some(uuid.clone());
            f.alias = Some(alias);
            f.recovered = recovered;
        }
        self.send_challenge(&uuid);
    }

    fn on_challenge(&mut self, now_ms: u64, status: u16, v: Option<&Value>) {
        let Some(flow) = &self.flow else { return };
        let recovered = flow.recovered;
        let challenge = v
            .filter(|_| ok_status(status))
            .and_then(|v| v.get("challenge")?.as_str().map(str::to_owned));
        let (Some(ch), Some(uuid)) = (challenge, flow.uuid.clone()) else {
            return self.fail_auth(
                now_ms,
                if recovered {
                    AuthFailure::RecoveryRejected
                } else {
                    AuthFailure::Auth(status)
                },
            );
        };
        let sig = flow.identity.sign_challenge(&ch);
        self.request(
            Method::Post,
            wire::http::paths::AUTH_VERIFY.into(),
            Some(json!({ "user_uuid": uuid, "challenge": ch, "signature": sig })),
            false,
            Pending::Verify,
        );
    }

    fn on_verify(
        &mut self,
        now_ms: u64,
        status: u16,
        v: Option<&Value>,
    ) -> Result<(), ClientError> {
        let token = v
            .filter(|_| ok_status(status))
            .and_then(|v| v.get("token")?.as_str().map(str::to_owned));
        let Some(flow) = self.flow.take() else {
            return Ok(());
        };
        let Some(token) = token else {
            let f = if flow.recovered {
                AuthFailure::RecoveryRejected
            } else {
                AuthFailure::Auth(status)
            };
            self.auth_failed(now_ms, flow.reauth, f);
            return Ok(());
        };
        let (Some(uuid), Some(alias)) = (flow.uuid.clone(), flow.alias.clone()) else {
            self.auth_failed(now_ms, flow.reauth, AuthFailure::BadResponse);
            return Ok(());
        };
        let stored = StoredIdentity {
            uuid,
            alias_id: alias.clone(),
            nickname: flow.nickname.clone(),
            mnemonic: flow.identity.mnemonic.clone(),
            signing_public_key: flow.identity.signing_public_b64(),
            ecdh_public_key: flow.identity.ecdh_public_b64(),
            x25519_path: flow.identity.x25519_path.into(),
        };
        self.store.save_identity(&stored)?;
        self.stored = Some(stored);
        self.identity = Some(flow.identity);
        self.token = Some(SecretString::new(token));
        self.events.push_back(Event::Authenticated {
            alias_id: alias,
            nickname: flow.nickname,
            recovered: flow.recovered,
        });
        self.connect_if_wanted(now_ms);
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
