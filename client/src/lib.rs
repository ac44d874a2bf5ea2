//! The async SecureChat client: a thin shell around [`client_core::machine::Client`], the
//! Rust counterpart of the spec's `SecureChatClient`.
//!
//! One task (the driver, see `driver.rs`) owns the machine. The [`Client`] handle sends it
//! commands over a bounded channel and awaits oneshot replies; nothing shares the machine.
//! The driver performs the machine's HTTP requests with [`HttpClient`], opens the WebSocket
//! with its connector, arms one `tokio::time` timer for `poll_timeout`, and hands events to
//! listeners ([`Client::on`]) and to broadcast subscribers ([`Client::subscribe`]).
//!
//! ```text
//!   let client = Client::<Turmoil>::start(store, ClientOptions::new(endpoint, clock, seed));
//!   let alias = client.register_account(&mnemonic, "alice").await?;
//!   client.connect().await?;
//!   let sub = client.on(EventKind::Message, |e| println!("{e:?}"));
//!   let id = client.send_message(&conv, &bob, "hi", None).await?;
//! ```
//!
//! Modules ([`Client::transport`], [`Client::messaging`], [`Client::auth`],
//! [`Client::contacts`], [`Client::media`], [`Client::push`], [`Client::channels`],
//! [`Client::vanity`], [`Client::calls`], [`Client::http`]) are borrowed views of the handle.
//! The machine has no flows for media, channels, vanity, push and calls; those modules are
//! **thin async wrappers**: REST calls with `wire` bodies plus client-core crypto (media upload
//! is client-core's chunk encryption over M1-M3), performed by the driver with the current
//! bearer token and base address. Their results are the relay's JSON, decoded into `wire` types.

mod driver;
mod modules;
mod store;

use std::fmt;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use client_core::machine::{self, ClientConfig, Event};
use client_core::store::{ClientStore, ExportScope, StoredMessage};
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng as _;
use tokio::sync::{broadcast, mpsc, oneshot};

pub use self::driver::DEAD_LINK_MS;
pub use self::modules::{
    Auth, CallOptions, Calls, Channels, Contacts, Http, Media, Messaging, OrderStatus, Push,
    Transport, Vanity,
};
pub use self::store::SharedStore;
pub use client_core::machine::{Event as ClientEvent, NetworkState};

use seam::net::{Endpoint, HttpClient, HttpResponse, Network};

/// Default base address of the relay, overridable per client ([`ClientOptions::endpoint`])
/// or later through [`Http::set_base`].
pub const DEFAULT_API_BASE: &str = "http://127.0.0.1:8080";
/// Bound of the command queue from handles to the driver.
const MAX_QUEUED_COMMANDS: usize = 256;
/// Bound of the broadcast event buffer; a slower subscriber sees `Lagged`.
const EVENT_BUFFER: usize = 1024;

/// Source of "now": [`SystemClock`](seam::clock::SystemClock) in production,
/// [`SimClock`](seam::clock::SimClock) in simulation.
pub type Clock = Arc<dyn seam::clock::Clock>;

/// An event listener given to [`Client::on`].
pub type Listener = Arc<dyn Fn(&ClientEvent) + Send + Sync>;

/// How to start a [`Client`].
#[derive(Clone)]
pub struct ClientOptions {
    /// Base address of the relay's HTTP interface.
    pub endpoint: Endpoint,
    /// Source of `now`.
    pub clock: Clock,
    /// Seed of the machine's RNG (message ids, IVs, backoff jitter).
    pub rng_seed: [u8; 32],
    /// Machine tunables.
    pub config: ClientConfig,
    /// Sees every HTTP answer and every frame as they came, before the machine (harnesses).
    pub tap: Option<Arc<dyn WireTap>>,
}

impl ClientOptions {
    /// Options with the default machine config.
    pub fn new(endpoint: Endpoint, clock: Clock, rng_seed: [u8; 32]) -> Self {
        Self {
            endpoint,
            clock,
            rng_seed,
            config: ClientConfig::default(),
            tap: None,
        }
    }

    /// The same, with `tap` watching the wire.
    pub fn with_tap(mut self, tap: Arc<dyn WireTap>) -> Self {
        self.tap = Some(tap);
        self
    }
}

/// What a client's connections carried, as it came and before the machine handled it: for
/// harnesses that judge a relay by what it sent (a message delivered twice, a refusal), not by
/// what the client shows after its own deduplication. Called from the client's tasks: keep it
/// quick.
pub trait WireTap: Send + Sync {
    /// An HTTP exchange: the request line and the answer (`status` 0 when none came).
    fn http(&self, method: &http::Method, path: &str, status: u16, body: &[u8]);
    /// A WebSocket upgrade that did not open, and why.
    fn upgrade_failed(&self, why: &str);
    /// A text frame the relay sent.
    fn frame_in(&self, text: &str);
}

impl fmt::Debug for ClientOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientOptions")
            .field("endpoint", &self.endpoint)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Why an operation failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClientError {
    /// The machine refused the command.
    #[error("{0}")]
    Machine(String),
    /// Registration or authentication failed.
    #[error("authentication failed: {0}")]
    Auth(String),
    /// No JWT yet (register or restore first).
    #[error("not authenticated")]
    NotAuthenticated,
    /// The relay answered with a non-2xx status (and this body, shortened).
    #[error("HTTP status {0}: {1}")]
    Status(u16, String),
    /// No response (connect refused, timeout, reset).
    #[error("transport: {0}")]
    Transport(String),
    /// A response body was not what the wire format says (the reason quotes the body).
    #[error("bad response: {0}")]
    BadResponse(String),
    /// The client task is gone.
    #[error("client stopped")]
    Stopped,
    /// Calls were not initialised ([`Client::init_calls`]).
    #[error("calls not initialised")]
    CallsNotInitialised,
}

impl From<machine::ClientError> for ClientError {
    fn from(e: machine::ClientError) -> Self {
        Self::Machine(e.to_string())
    }
}

/// Event names of [`Client::on`] (the spec's names plus the machine's extra events).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EventKind {
    /// Every event.
    Any,
    /// `message`
    Message,
    /// `status_change`
    StatusChange,
    /// `network_state`
    NetworkState,
    /// `channel_post`
    ChannelPost,
    /// `typing`
    Typing,
    /// `goaway`
    Goaway,
    /// `payment_confirmed` (vanity `onPaymentConfirmed`)
    PaymentConfirmed,
    /// `security_violation`
    SecurityViolation,
    /// Retractions (ours or the author's).
    Retracted,
    /// Call signals.
    CallSignal,
}

impl EventKind {
    /// The kind of an event (`None` for internal ones only [`EventKind::Any`] sees).
    pub fn of(event: &ClientEvent) -> Option<Self> {
        Some(match event {
            Event::Message(_) => Self::Message,
            Event::StatusChange { .. } => Self::StatusChange,
            Event::NetworkState(_) => Self::NetworkState,
            Event::ChannelPost(_) => Self::ChannelPost,
            Event::Typing { .. } => Self::Typing,
            Event::Goaway(_) => Self::Goaway,
            Event::PaymentConfirmed { .. } => Self::PaymentConfirmed,
            Event::SecurityViolation(_) => Self::SecurityViolation,
            Event::Retracted { .. } => Self::Retracted,
            Event::CallSignal { .. } => Self::CallSignal,
            _ => return None,
        })
    }
}

/// Listeners and the broadcast sender, shared by the handle (registration) and the driver
/// (emission). Listeners are cloned out of the lock before they run, so a listener may call
/// [`Client::on`] or [`Subscription::unsubscribe`].
#[derive(Clone)]
pub(crate) struct EventHub {
    listeners: Arc<Mutex<(u64, driver::Listeners)>>,
    broadcast: broadcast::Sender<ClientEvent>,
}

impl EventHub {
    fn new() -> Self {
        Self {
            listeners: Arc::default(),
            broadcast: broadcast::channel(EVENT_BUFFER).0,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, driver::Listeners)> {
        self.listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn on(&self, kind: EventKind, listener: Listener) -> u64 {
        let mut guard = self.lock();
        guard.0 += 1;
        let id = guard.0;
        guard.1.insert(id, (kind, listener));
        id
    }

    fn off(&self, id: u64) {
        self.lock().1.remove(&id);
    }

    fn emit(&self, event: &ClientEvent) {
        let kind = EventKind::of(event);
        let matching: Vec<Listener> = self
            .lock()
            .1
            .values()
            .filter(|(k, _)| *k == EventKind::Any || Some(*k) == kind)
            .map(|(_, l)| Arc::clone(l))
            .collect();
        for listener in matching {
            listener(event);
        }
        // No subscriber is not an error.
        drop(self.broadcast.send(event.clone()));
    }
}

/// Returned by [`Client::on`]; [`Subscription::unsubscribe`] removes the listener (dropping
/// the handle keeps it registered, like the spec's unsubscribe function left uncalled).
#[derive(Clone)]
pub struct Subscription {
    hub: EventHub,
    id: u64,
}

impl Subscription {
    /// Removes the listener.
    pub fn unsubscribe(&self) {
        self.hub.off(self.id);
    }

    /// The listener id (for [`Client::off`]).
    pub fn id(&self) -> u64 {
        self.id
    }
}

impl fmt::Debug for Subscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subscription")
            .field("id", &self.id)
            .finish()
    }
}

/// A REST call performed by the driver with the current token and base.
#[derive(Debug)]
pub(crate) struct RestCall {
    method: http::Method,
    path: String,
    bearer: bool,
    body: Option<(&'static str, Bytes)>,
}

pub(crate) type RestReply = Result<HttpResponse, ClientError>;
type MachineOp<S> = Box<dyn FnOnce(&mut machine::Client<S>, u64) + Send>;
pub(crate) type AuthReply = oneshot::Sender<Result<Option<(String, String)>, ClientError>>;
pub(crate) type FriendsReply = oneshot::Sender<Result<Vec<wire::http::FriendProfile>, ClientError>>;

/// Commands from handles to the driver.
pub(crate) enum Command<S: ClientStore> {
    Register {
        mnemonic: String,
        nickname: String,
        reply: AuthReply,
    },
    Restore {
        reply: AuthReply,
    },
    Connect,
    Disconnect,
    WaitConnected {
        reply: oneshot::Sender<()>,
    },
    SyncFriends {
        reply: FriendsReply,
    },
    SetBase {
        endpoint: Endpoint,
    },
    Rest {
        call: RestCall,
        reply: oneshot::Sender<RestReply>,
    },
    Machine {
        op: MachineOp<S>,
    },
    Shutdown,
}

/// Call module settings given to [`Client::init_calls`].
#[derive(Debug, Clone)]
pub(crate) struct CallSetup {
    my_alias_id: String,
    always_relay: bool,
}

/// The async client handle. Cheap to clone; the driver stops when the last handle is dropped
/// or [`Client::shutdown`] is called.
pub struct Client<N, S: ClientStore = SharedStore> {
    commands: mpsc::Sender<Command<S>>,
    hub: EventHub,
    media_rng: Arc<Mutex<ChaCha20Rng>>,
    calls: Option<CallSetup>,
    network: PhantomData<fn() -> N>,
}

impl<N, S: ClientStore> Clone for Client<N, S> {
    fn clone(&self) -> Self {
        Self {
            commands: self.commands.clone(),
            hub: self.hub.clone(),
            media_rng: Arc::clone(&self.media_rng),
            calls: self.calls.clone(),
            network: PhantomData,
        }
    }
}

impl<N, S: ClientStore> fmt::Debug for Client<N, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("calls", &self.calls)
            .finish_non_exhaustive()
    }
}

impl<N: Network, S: ClientStore + Send + 'static> Client<N, S> {
    /// Starts the driver task (on the current tokio runtime or turmoil host) over `store`.
    pub fn start(store: S, options: ClientOptions) -> Result<Self, ClientError> {
        let machine = machine::Client::new(store, options.rng_seed, options.config)?;
        // Media IVs: a stream separate from the machine's, derived from the same seed.
        let mut media_seed = options.rng_seed;
        media_seed[0] ^= 0x6d;
        let media_rng = Arc::new(Mutex::new(ChaCha20Rng::from_seed(media_seed)));
        let (commands, rx) = mpsc::channel(MAX_QUEUED_COMMANDS);
        let hub = EventHub::new();
        let http = HttpClient::new(N::connector(), options.endpoint);
        let driver = driver::Driver::<N, S>::new(machine, http, options.clock, hub.clone(), rx)
            .with_tap(options.tap);
        tokio::spawn(driver.run());
        Ok(Self {
            commands,
            hub,
            media_rng,
            calls: None,
            network: PhantomData,
        })
    }

    fn media_rng(&self) -> std::sync::MutexGuard<'_, ChaCha20Rng> {
        self.media_rng
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    async fn send(&self, command: Command<S>) -> Result<(), ClientError> {
        self.commands
            .send(command)
            .await
            .map_err(|_| ClientError::Stopped)
    }

    async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> Command<S>,
    ) -> Result<T, ClientError> {
        let (tx, rx) = oneshot::channel();
        self.send(make(tx)).await?;
        rx.await.map_err(|_| ClientError::Stopped)
    }

    /// Runs `op` on the machine inside the driver and returns its result.
    async fn with_machine<T: Send + 'static>(
        &self,
        op: impl FnOnce(&mut machine::Client<S>, u64) -> T + Send + 'static,
    ) -> Result<T, ClientError> {
        self.ask(|reply| Command::Machine {
            op: Box::new(move |m, now| drop(reply.send(op(m, now)))),
        })
        .await
    }

    async fn rest(
        &self,
        method: http::Method,
        path: String,
        bearer: bool,
        body: Option<(&'static str, Bytes)>,
    ) -> Result<HttpResponse, ClientError> {
        let call = RestCall {
            method,
            path,
            bearer,
            body,
        };
        self.ask(|reply| Command::Rest { call, reply }).await?
    }

    // ----- modules

    /// Connection state, network-state and GOAWAY callbacks.
    pub fn transport(&self) -> Transport<'_, N, S> {
        Transport { client: self }
    }
    /// Frames: send, receipts, typing, retract.
    pub fn messaging(&self) -> Messaging<'_, N, S> {
        Messaging { client: self }
    }
    /// Registration and challenge/verify.
    pub fn auth(&self) -> Auth<'_, N, S> {
        Auth { client: self }
    }
    /// Friends (sync through the machine; request/accept/lookup as REST).
    pub fn contacts(&self) -> Contacts<'_, N, S> {
        Contacts { client: self }
    }
    /// Encrypted media upload/download (M1-M4).
    pub fn media(&self) -> Media<'_, N, S> {
        Media { client: self }
    }
    /// Push registration (REST).
    pub fn push(&self) -> Push<'_, N, S> {
        Push { client: self }
    }
    /// Channels (REST).
    pub fn channels(&self) -> Channels<'_, N, S> {
        Channels { client: self }
    }
    /// Vanity aliases and orders (REST).
    pub fn vanity(&self) -> Vanity<'_, N, S> {
        Vanity { client: self }
    }
    /// Call signalling; `None` until [`Client::init_calls`].
    pub fn calls(&self) -> Option<Calls<'_, N, S>> {
        self.calls.as_ref().map(|setup| Calls {
            client: self,
            setup,
        })
    }
    /// The HTTP client's settable base address.
    pub fn http(&self) -> Http<'_, N, S> {
        Http { client: self }
    }

    // ----- client operations

    /// Registers (or recovers, on 409) the account of `mnemonic`; returns its alias id.
    pub async fn register_account(
        &self,
        mnemonic: &str,
        nickname: &str,
    ) -> Result<String, ClientError> {
        let (mnemonic, nickname) = (mnemonic.to_owned(), nickname.to_owned());
        let out = self
            .ask(|reply| Command::Register {
                mnemonic,
                nickname,
                reply,
            })
            .await??;
        out.map(|(alias, _)| alias)
            .ok_or_else(|| ClientError::Auth("no account".into()))
    }

    /// Re-authenticates the stored identity: `(alias_id, nickname)`, or `None` if none is stored.
    pub async fn restore_session(&self) -> Result<Option<(String, String)>, ClientError> {
        self.ask(|reply| Command::Restore { reply }).await?
    }

    /// Connects now (or as soon as authenticated) and keeps reconnecting until
    /// [`Client::disconnect`] or a GOAWAY.
    pub async fn connect(&self) -> Result<(), ClientError> {
        self.send(Command::Connect).await
    }

    /// Closes the socket and stops reconnecting.
    pub async fn disconnect(&self) -> Result<(), ClientError> {
        self.send(Command::Disconnect).await
    }

    /// Whether the socket is open.
    pub async fn is_connected(&self) -> Result<bool, ClientError> {
        self.with_machine(|m, _| m.is_connected()).await
    }

    /// Resolves when the socket is open.
    pub async fn wait_connected(&self) -> Result<(), ClientError> {
        self.ask(|reply| Command::WaitConnected { reply }).await
    }

    /// Our alias, once known.
    pub async fn alias_id(&self) -> Result<Option<String>, ClientError> {
        self.with_machine(|m, _| m.alias_id().map(str::to_owned))
            .await
    }

    /// Registers `listener` for `kind`; the returned handle unsubscribes.
    pub fn on(
        &self,
        kind: EventKind,
        listener: impl Fn(&ClientEvent) + Send + Sync + 'static,
    ) -> Subscription {
        let id = self.hub.on(kind, Arc::new(listener));
        Subscription {
            hub: self.hub.clone(),
            id,
        }
    }

    /// Removes a listener by its [`Subscription::id`].
    pub fn off(&self, id: u64) {
        self.hub.off(id);
    }

    /// A broadcast receiver of every event from now on (lossy when it lags).
    pub fn subscribe(&self) -> broadcast::Receiver<ClientEvent> {
        self.hub.broadcast.subscribe()
    }

    /// Sets up the call module (the spec's `initCalls`); signing keys stay inside the machine.
    pub fn init_calls(&mut self, my_alias_id: &str, always_relay: bool) {
        self.calls = Some(CallSetup {
            my_alias_id: my_alias_id.to_owned(),
            always_relay,
        });
    }

    /// Queues a text message (sent when connected); returns its id.
    pub async fn send_message(
        &self,
        conversation_id: &str,
        to_alias_id: &str,
        text: &str,
        reply_to_id: Option<&str>,
    ) -> Result<String, ClientError> {
        let content = match reply_to_id {
            Some(r) => client_core::crypto::content::MessageContent::Reply {
                reply_to_id: r.to_owned(),
                body: Box::new(client_core::crypto::content::MessageContent::Text(
                    text.to_owned(),
                )),
            },
            None => client_core::crypto::content::MessageContent::Text(text.to_owned()),
        };
        self.send_content(conversation_id, to_alias_id, content)
            .await
    }

    async fn send_content(
        &self,
        conversation_id: &str,
        to_alias_id: &str,
        content: client_core::crypto::content::MessageContent,
    ) -> Result<String, ClientError> {
        let (conv, to) = (conversation_id.to_owned(), to_alias_id.to_owned());
        self.with_machine(move |m, now| m.send_message(now, &conv, &to, &content))
            .await?
            .map_err(Into::into)
    }

    /// Encrypts and uploads an image, then sends `[img]<key>`; returns the message id.
    pub async fn send_image(
        &self,
        conversation_id: &str,
        to_alias_id: &str,
        image: &[u8],
    ) -> Result<String, ClientError> {
        let media = self.media().upload_image(conversation_id, image).await?;
        self.send_content(conversation_id, to_alias_id, media_content(media))
            .await
    }

    /// Encrypts and uploads a file, then sends `[file]key|name|size`; returns the message id.
    pub async fn send_file(
        &self,
        conversation_id: &str,
        to_alias_id: &str,
        name: &str,
        file: &[u8],
    ) -> Result<String, ClientError> {
        let media = self
            .media()
            .upload_file(conversation_id, name, file)
            .await?;
        self.send_content(conversation_id, to_alias_id, media_content(media))
            .await
    }

    /// Encrypts and uploads a voice note, then sends `[voice]key|ms`; returns the message id.
    pub async fn send_voice(
        &self,
        conversation_id: &str,
        to_alias_id: &str,
        blob: &[u8],
        duration_ms: u64,
    ) -> Result<String, ClientError> {
        let media = self
            .media()
            .upload_voice(conversation_id, blob, duration_ms)
            .await?;
        self.send_content(conversation_id, to_alias_id, media_content(media))
            .await
    }

    /// Sends a typing notice (debounced by the machine).
    pub async fn send_typing(
        &self,
        conversation_id: &str,
        to_alias_id: &str,
    ) -> Result<(), ClientError> {
        let (conv, to) = (conversation_id.to_owned(), to_alias_id.to_owned());
        self.with_machine(move |m, now| m.send_typing(now, &conv, &to))
            .await?
            .map_err(Into::into)
    }

    /// Sends a read receipt up to `max_seq` to `to_alias_id`.
    pub async fn mark_as_read(
        &self,
        conversation_id: &str,
        max_seq: u64,
        to_alias_id: &str,
    ) -> Result<(), ClientError> {
        let (conv, to) = (conversation_id.to_owned(), to_alias_id.to_owned());
        self.with_machine(move |m, now| m.mark_as_read(now, &conv, max_seq, &to))
            .await?
            .map_err(Into::into)
    }

    /// Retracts an own message.
    pub async fn retract_message(
        &self,
        message_id: &str,
        to_alias_id: &str,
        conversation_id: &str,
    ) -> Result<(), ClientError> {
        let (id, to, conv) = (
            message_id.to_owned(),
            to_alias_id.to_owned(),
            conversation_id.to_owned(),
        );
        self.with_machine(move |m, now| m.retract_message(now, &id, &to, &conv))
            .await?
            .map_err(Into::into)
    }

    /// Stored messages of a conversation in time order; `before` keeps times below it.
    pub async fn get_history(
        &self,
        conversation_id: &str,
        limit: Option<usize>,
        before: Option<u64>,
    ) -> Result<Vec<StoredMessage>, ClientError> {
        let conv = conversation_id.to_owned();
        self.with_machine(move |m, _| m.store().get_history(&conv, limit, before))
            .await?
            .map_err(|e| ClientError::Machine(e.to_string()))
    }

    /// One stored message.
    pub async fn get_message_data(
        &self,
        message_id: &str,
    ) -> Result<Option<StoredMessage>, ClientError> {
        let id = message_id.to_owned();
        self.with_machine(move |m, _| m.store().get_message(&id))
            .await?
            .map_err(|e| ClientError::Machine(e.to_string()))
    }

    /// Deletes a conversation's local history.
    pub async fn clear_history(&self, conversation_id: &str) -> Result<(), ClientError> {
        let conv = conversation_id.to_owned();
        self.with_machine(move |m, _| m.store_mut().clear_history(&conv))
            .await?
            .map_err(|e| ClientError::Machine(e.to_string()))
    }

    /// Deletes every local message.
    pub async fn clear_all_history(&self) -> Result<(), ClientError> {
        self.with_machine(|m, _| m.store_mut().clear_all_history())
            .await?
            .map_err(|e| ClientError::Machine(e.to_string()))
    }

    /// NDJSON export of a conversation, or of all of them for the literal `all` (the spec returns
    /// an object URL; a library returns the document).
    pub async fn export_conversation(&self, scope: &str) -> Result<String, ClientError> {
        let scope = scope.to_owned();
        self.with_machine(move |m, _| m.store().export_conversation(ExportScope::parse(&scope)))
            .await?
            .map_err(|e| ClientError::Machine(e.to_string()))
    }

    /// Stops the driver (closing the socket); other handles then fail with `Stopped`.
    pub async fn shutdown(&self) {
        drop(self.send(Command::Shutdown).await);
    }
}

fn media_content(
    media: client_core::crypto::content::Media,
) -> client_core::crypto::content::MessageContent {
    client_core::crypto::content::MessageContent::Media(media)
}
