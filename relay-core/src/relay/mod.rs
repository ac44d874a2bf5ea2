//! The [`Relay`]: dispatcher over the sub-machines, the commit discipline and the output queue.
//!
//! This `impl Relay` block takes inputs, stages outputs, hands them to the commit pipeline
//! ([`crate::commit`], which decides what is committed when) and fails stop. The rules that make
//! an ack mean "stored" (what is staged, when it is released, what a failed commit discards and
//! closes) are read here, in `batches` (the relay's side of the pipeline: group commit, sealed
//! batches, the end of every input, fail-stop) and in `commit`; `ahead` is the relay's side of
//! reads ahead (a frame tried, parked on its first miss and run again when its read is back);
//! `gate` holds WebSocket upgrades after a start until the other shards' levels are known; `types` holds the vocabulary
//! shared with the shell. Every rule of the service itself lives in its own module
//! (`messaging`, `sync`, `orders`, …).

use std::borrow::Cow;
use std::collections::VecDeque;

use wire::frames::ErrorFrame;
use wire::{ErrorCode, ServerFrame, UnixMs, UserUuid};

use crate::admission::Admission;
use crate::budgets::{BudgetClass, Budgets};
use crate::commit::InputFailed;
use crate::commit::{BatchFailed, BatchId, Pipeline, Reported, Sealed, SealedBatch};
use crate::config::Config;
use crate::credential::CredentialKey;
use crate::cx::Cx;
use crate::http::{ApiError, HttpRequest, HttpResponse, Route};
use crate::ids::IdGen;
use crate::planted::planted;
use crate::prefetch::{Inline, Prefetch, ReadOp, Reader, Waiter, Work};
use crate::push_targets::PushTarget;
use crate::rows::meta;
use crate::sessions::Sessions;
use crate::state::State;
use crate::store::{Store, StoreError, Table};
use crate::throttles::Throttles;
use crate::token::TokenKeys;

mod ahead;
mod batches;
mod boot;
pub(crate) mod forwards;
pub(crate) mod gate;
mod requests;
mod timers;

pub use boot::legacy_jwt_signing_key;
use boot::{boot_ids, derived_jwt_seed, open_state};

use crate::shell::{Accepted, CloseReason, ConnId, Output, WsConnect};

/// The sans-IO relay.
///
/// # Methods
/// * **Construction**: [`Relay::new`] loads the committed state from the store
///   ([`Store::load_eager`]: everything but the tombstones, read per conversation when needed).
/// * **Inputs** (`handle_*`, each carries `now`): [`handle_http`](Relay::handle_http),
///   [`handle_connect`](Relay::handle_connect), [`handle_text`](Relay::handle_text),
///   [`handle_frame`](Relay::handle_frame), [`handle_disconnect`](Relay::handle_disconnect),
///   [`handle_timeout`](Relay::handle_timeout), [`handle_crossing`](Relay::handle_crossing)
///   (what another shard's core sent this one, when the relay is one of several shards,
///   `crate::handoff`); without `now`,
///   [`handle_committed`](Relay::handle_committed) (a pipelined commit's outcome).
/// * **Commits**: [`begin_batch`](Relay::begin_batch) / [`commit_batch`](Relay::commit_batch)
///   (group commit), [`take_store`](Relay::take_store) / [`seal_batch`](Relay::seal_batch)
///   (pipelined commits, below).
/// * **Outputs** (`poll_*`): [`poll_output`](Relay::poll_output) (frames to send, sockets to
///   close) and [`poll_timeout`](Relay::poll_timeout) (when to call `handle_timeout` next).
/// * **Getters**: [`is_failed`](Relay::is_failed), [`is_connected`](Relay::is_connected),
///   [`stats`](Relay::stats) (counters for metrics; reading them changes nothing), …
///
/// # Drain order
/// After **every** input the shell drains `poll_output` until `None` and executes the outputs
/// in that order (they are per-connection FIFO and deterministic), then re-arms its timer with
/// `poll_timeout`. An input's outputs (and an HTTP response) are released only after the
/// input's mutations were committed to the store in one transaction, but for one kind: the
/// frames that deliver a message handed over by another shard's core (durable at its owner
/// before it was handed over) go at once, unless a frame for their connection still waits
/// for a commit (a connection's frames keep their order).
///
/// # Group commit
/// A shell that handles several inputs at a time may commit them together: after
/// [`begin_batch`](Relay::begin_batch), each input's mutations and outputs are held back
/// instead of committed, and [`commit_batch`](Relay::commit_batch) commits all of them in **one**
/// store transaction and only then releases their outputs. Nothing of a batch is released
/// before its commit, so nothing is acknowledged before it is durable. What `handle_http` and
/// `handle_connect` return inside a batch is **provisional**: the shell must hold those answers
/// until `commit_batch` returns `Ok(())`, and answer every one of them with
/// [`storage_unavailable_response`] if it returns [`BatchFailed`] (the relay then fails stop, as
/// below).
/// Inputs of one batch see each other's effects, as they would one by one.
///
/// # Pipelined commits
/// A shell whose commits are slow (an `fsync`, a database round trip) keeps the relay busy
/// while they run: it takes the store ([`take_store`](Relay::take_store)) for a committer of
/// its own, and from then on a batch is always open. [`seal_batch`](Relay::seal_batch) closes
/// it and hands out its mutations; the relay goes on handling the next batch on top of the
/// sealed one's (uncommitted) state. The shell commits sealed batches one after the other, in
/// seal order, and reports each with [`handle_committed`](Relay::handle_committed): a batch's
/// outputs are released only when its commit **and every earlier one** succeeded, so nothing
/// is acknowledged before it is durable, and per-connection order is kept across batches. A
/// failed commit fails stop (below) and takes every later batch with it: none of their
/// outputs is released, and the shell must not apply them (they were built on the failed
/// one). How many batches may be in flight is the shell's bound.
///
/// # Commit failure: fail-stop
/// If a commit fails, nothing of that input (or batch, and of any batch sealed after it) is
/// acknowledged: the HTTP request gets 503
/// `STORAGE_UNAVAILABLE`, a frame gets an error frame `STORAGE_UNAVAILABLE` (no ack), every
/// socket is closed with [`CloseReason::StorageFailure`], and from then on the relay answers
/// every request with 503 and refuses connections. The in-memory state may be ahead of the
/// store, so the shell must drop this `Relay` and build a new one from the store
/// ([`is_failed`](Relay::is_failed) tells it to). Never a panic.
#[derive(Debug)]
pub struct Relay {
    config: Config,
    /// Keyed reads of what the relay does not hold in memory (accounts, tombstones, queues),
    /// beside the store, made on the relay's task.
    reader: Inline,
    /// Frames parked on reads ahead, the reads asked for and the rows read
    /// (`crate::prefetch`).
    prefetch: Prefetch,
    /// A frame is being tried against the rows read ahead (its rules read through them).
    reading_ahead: bool,
    ids: IdGen,
    tokens: TokenKeys,
    /// Seals and opens auth challenges and tickets (`crate::credential`).
    credentials: CredentialKey,
    state: State,
    admission: Admission,
    /// The open connections and whose each one is (`crate::sessions`).
    sessions: Sessions,
    /// Frames, messages, typing notices and call signals per unit of time (`crate::throttles`).
    throttles: Throttles,
    /// Media part bytes (`crate::media`).
    blobs: Box<dyn crate::blob::BlobStore>,
    /// Request budgets (`Config::lookups`, `friend_requests`, `account_requests`,
    /// `public_requests`).
    budgets: Budgets,
    /// The caller of the request being handled, once [`Relay::dispatch_http`] verified its
    /// token (every handler's `authenticate` then reuses it: one verification per request).
    verified: Option<(UserUuid, String)>,
    /// The number a forward of the request being handled would get, when its answer may
    /// come later and another forward may wait ([`crate::handoff::Awaiting::next_id`]): a
    /// rule may then forward it to the shard that decides it.
    request: Option<u64>,
    /// The requests forwarded to other shards, waiting for their answers.
    forwards: crate::handoff::Awaiting,
    /// WebSocket upgrades held after a start until the other shards' levels are known
    /// (`gate`).
    gate: gate::Gate,
    /// The budget the request being handled was charged to, by this attempt (given back if
    /// the relay refuses the request for its own reasons: `Relay::handle_request`).
    charge: Option<(BudgetClass, Option<UserUuid>)>,
    /// Outputs of the input being handled; released after its commit.
    staged: Vec<Output>,
    /// The commit pipeline: the store (until a shell takes it), the open batch, the batches
    /// in flight (`crate::commit`).
    commits: Pipeline,
    outputs: VecDeque<Output>,
    failed: bool,
    /// What the relay did since it was built ([`Relay::stats`]).
    stats: crate::stats::RelayStats,
}

impl Relay {
    /// Builds a relay from the committed state of `store`. `seed` and the store's boot counter
    /// seed the RNG, so a restart never replays ids or tokens of an earlier run.
    pub fn new(config: Config, store: Box<dyn Store>, seed: u64) -> Result<Self, StoreError> {
        let mut store = store;
        let mut reader = store.reader()?;
        let mut state = open_state(&config, &mut *store, &mut *reader)?;
        let ids = boot_ids(&mut state, seed, config.shard.me());
        let jwt_seed = match &config.jwt_signing_key {
            Some(key) => key.0,
            None => derived_jwt_seed(seed),
        };
        let tokens = TokenKeys::from_seed(jwt_seed);
        let credentials = CredentialKey::derive(&jwt_seed);
        // Keys are not kept in the store: the caller owns the key (a file of its own); a row
        // left by an older version is forgotten.
        if state.meta().contains_key(meta::JWT_SIGNING_KEY) {
            state.delete_meta(meta::JWT_SIGNING_KEY);
        }
        store.commit(state.batch())?;
        state.mutations().reset();
        let msg_limit = crate::tombstones::restored_msg_limit(&mut *reader, &config)?;
        let sweep_at = crate::tombstones::first_sweep(&mut *reader)?;
        let first_expiry = reader.next_expiry(Table::QueueIndex, 0)?;
        state.expiry_sweep().set_first(first_expiry.map(UnixMs));
        let mut tombstones = crate::tombstones::Cache::new(config.tombstone_cache_bytes, sweep_at)
            .with_by_row_min(config.tombstone_set_by_row_min_bytes);
        if config.shard.map().shards() > 1 && config.shard.me() == crate::handoff::REGISTRY_SHARD {
            tombstones = tombstones.collecting_every(crate::limits::TOMBSTONE_COLLECT_MS);
        }
        #[cfg(feature = "planted-bugs")]
        {
            tombstones.planted_bug = config.planted_bug;
        }
        state.open_tombstones(tombstones);
        let throttles = Throttles::new(&config, msg_limit);
        let budgets = Budgets::new(&config);
        let sharded = config.shard.map().shards() > 1;
        Ok(Self {
            admission: Admission::new(&config),
            config,
            reader: Inline::new(reader),
            prefetch: Prefetch::default(),
            reading_ahead: false,
            ids,
            tokens,
            credentials,
            state,
            sessions: Sessions::default(),
            throttles,
            blobs: Box::new(crate::blob::MemoryBlobStore::new()),
            budgets,
            verified: None,
            request: None,
            forwards: crate::handoff::Awaiting::default(),
            gate: gate::Gate::default(),
            charge: None,
            staged: Vec::new(),
            // Only a relay of several shards releases frames before their commit
            // (`release_handed_early`), past none the pipeline holds for their connection.
            commits: Pipeline::new(store, sharded),
            outputs: VecDeque::new(),
            failed: false,
            stats: crate::stats::RelayStats::default(),
        })
    }

    /// Like [`Relay::new`] with media bytes in `blobs` ([`crate::blob::FsBlobStore`] for the
    /// real server; [`Relay::new`] keeps them in a fresh [`crate::blob::MemoryBlobStore`],
    /// which is enough only when nothing must survive a restart). Blobs that no committed
    /// upload names (a crash between a blob write and its commit) are deleted here.
    pub fn with_blobs(
        config: Config,
        store: Box<dyn Store>,
        blobs: Box<dyn crate::blob::BlobStore>,
        seed: u64,
    ) -> Result<Self, StoreError> {
        let mut relay = Self::new(config, store, seed)?;
        relay.blobs = blobs;
        relay
            .cx()
            .purge_orphan_blobs()
            .map_err(|e| StoreError::Backend(e.to_string()))?;
        Ok(relay)
    }

    // ------------------------------------------------------------------ getters

    /// Whether a commit failed; the relay then refuses everything and must be rebuilt.
    pub fn is_failed(&self) -> bool {
        self.failed
    }

    /// Whether `conn` is an open, authenticated connection.
    pub fn is_connected(&self, conn: ConnId) -> bool {
        self.sessions.is_open(conn)
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Number of undelivered messages held (all recipients), summed over the queue index
    /// (whether the messages are in memory or only in the store).
    pub fn queued_messages(&self) -> usize {
        let total: u64 = self
            .state
            .queued()
            .iter()
            .map(|(_, _, e)| e.summary.msgs)
            .sum();
        usize::try_from(total).unwrap_or(usize::MAX)
    }

    /// Number of undelivered messages held, as the queue bounds count them (kept as a running
    /// total: constant time, unlike [`queued_messages`](Relay::queued_messages)).
    pub fn backlog_messages(&self) -> usize {
        self.state.backlog().total.msgs
    }

    /// What the relay did since it was built: plain counters for a shell to export (see
    /// [`crate::stats`]).
    pub fn stats(&self) -> &crate::stats::RelayStats {
        &self.stats
    }

    /// The message-id tombstones held in memory: a few numbers, counted on each call (the
    /// number of tombstones walks the sets).
    pub fn tombstone_cache(&self) -> crate::stats::TombstoneCacheStats {
        self.state.tombstones().stats()
    }

    /// The accounts held in memory (the rest are in the store).
    pub fn account_cache(&self) -> crate::stats::AccountCacheStats {
        self.state.directory().stats()
    }

    /// The conversations and contact lists held in memory (the rest are in the store).
    pub fn relation_cache(&self) -> crate::stats::RelationCacheStats {
        self.state.relations().stats()
    }

    /// The queued messages held in memory: a few numbers, counted on each call (the number of
    /// messages walks the queues).
    pub fn queue_cache(&self) -> crate::stats::QueueCacheStats {
        self.state.queues().stats()
    }

    /// Bytes of undelivered messages held, as the queue bounds count them
    /// ([`crate::limits::queued_message_bytes`]; bounded by
    /// [`Config::max_offline_queue_bytes_total`]).
    pub fn queued_bytes(&self) -> u64 {
        self.state.backlog().total.bytes
    }

    // ------------------------------------------------------------------ inputs

    /// Handles one REST request and returns its response (released after its commit).
    /// A request that another shard decides (a friendship of a user of another shard) cannot
    /// wait here: it is answered 503 `STORAGE_UNAVAILABLE`; a sharded relay's shell uses
    /// [`handle_request`](Relay::handle_request).
    pub fn handle_http(&mut self, now: UnixMs, req: &HttpRequest) -> HttpResponse {
        self.http_now(now, req, None)
            .unwrap_or_else(|| storage_unavailable().into_response())
    }

    /// Charges `req` to its budget unless `charged` says it was (a request run again after a
    /// read ahead is charged once), then routes it.
    fn dispatch_http(
        &mut self,
        now: UnixMs,
        route: Route,
        req: &HttpRequest,
        charged: &mut bool,
    ) -> Result<HttpResponse, ApiError> {
        self.verified = None;
        self.charge_budget(now, &route, req, charged)?;
        let result = match self.home_elsewhere(&route, req, false) {
            Some(to) => self.forward_request(to, req),
            None => self.route_http(now, route, req),
        };
        self.verified = None;
        result
    }

    /// Charges `req` to its budget (see [`Budgets`]); 429 `RATE_LIMITED` with `Retry-After`
    /// when it is used up. A request whose token does not verify is not charged: its handler
    /// answers 401. `charged`: it was charged already (then it is not again), and is once this
    /// returns `Ok`.
    fn charge_budget(
        &mut self,
        now: UnixMs,
        route: &Route,
        req: &HttpRequest,
        charged: &mut bool,
    ) -> Result<(), ApiError> {
        let class = BudgetClass::of(route);
        let authenticated = match class {
            BudgetClass::Exempt => return Ok(()),
            BudgetClass::Public => None,
            _ => match self.cx().authenticate(now, req) {
                Ok(caller) => Some(caller),
                // The caller's account could not be read: refused as its handler would be.
                Err(e) if e.code == ErrorCode::STORAGE_UNAVAILABLE => return Err(e),
                Err(_) => return Ok(()),
            },
        };
        let caller = authenticated.as_ref().map(|(user, _)| user);
        if !*charged {
            self.budgets
                .charge(now.get(), class, caller, &req.remote_addr)?;
            *charged = true;
            self.charge = Some((class, caller.cloned()));
        }
        if authenticated.is_some() {
            self.verified = authenticated;
        }
        Ok(())
    }

    fn route_http(
        &mut self,
        now: UnixMs,
        route: Route,
        req: &HttpRequest,
    ) -> Result<HttpResponse, ApiError> {
        let mut cx = self.cx();
        match route {
            Route::PowChallenge => cx.http_pow_challenge(now, req),
            Route::Register => cx.http_register(now, req),
            Route::AuthChallenge => cx.http_auth_challenge(now, req),
            Route::AuthVerify => cx.http_auth_verify(now, req),
            Route::WsTicket => cx.http_ws_ticket(now, req),
            Route::Friends => cx.http_friends(now, req),
            Route::FriendRequest => cx.http_friend_request(now, req),
            Route::FriendAcceptPath(id) => cx.http_friend_accept_path(now, req, &id),
            Route::FriendAcceptBody => cx.http_friend_accept_body(now, req),
            Route::FriendReject(id) => cx.http_friend_reject(now, req, &id),
            Route::User(alias) => cx.http_user(now, req, &alias),
            Route::ActiveConversations => cx.http_active_conversations(now, req),
            Route::StorageEstimate => cx.http_storage_estimate(now, req),
            Route::ChannelSearch => cx.http_channel_search(now, req),
            Route::ChannelsMine => cx.http_channels_mine(now, req),
            Route::ChannelCreate => cx.http_channel_create(now, req),
            Route::Channel(id) => cx.http_channel(now, req, &id),
            Route::ChannelSubscribe(id) => cx.http_channel_subscribe(now, req, &id),
            Route::ChannelPosts(id) => cx.http_channel_posts(now, req, &id),
            Route::ChannelForSale(id) => cx.http_channel_for_sale(now, req, &id),
            Route::ChannelBuy(id) => cx.http_channel_buy(now, req, &id),
            Route::ChannelQuotaBuy => cx.http_quota_buy(now, req),
            Route::ListChannel => cx.http_list_channel(now, req),
            Route::VanitySearch => cx.http_vanity_search(now, req),
            Route::VanityPurchase => cx.http_vanity_purchase(now, req),
            Route::VanityBind => cx.http_vanity_bind(now, req),
            Route::VanityReserve => cx.http_vanity_reserve(now, req),
            Route::OrderStatus(id) => cx.http_order_status(now, req, &id),
            Route::PaymentWebhook => cx.http_payment_webhook(now, req),
            Route::MediaInit => cx.http_media_init(now, req),
            Route::MediaChunk(id) => cx.http_media_chunk(now, req, &id),
            Route::MediaComplete(id) => cx.http_media_complete(now, req, &id),
            Route::MediaDownload => cx.http_media_download(now, req),
            Route::PushVapidKey => cx.http_push_vapid_key(now, req),
            Route::PushSubscribe => cx.http_push_subscribe(now, req),
            Route::PushRegister => cx.http_push_register(now, req),
            Route::PushDisable => cx.http_push_disable(now, req),
            Route::IceConfig => cx.http_ice_config(now, req),
        }
    }

    /// Authenticates a WebSocket upgrade. `Err` is the response to send instead of upgrading.
    /// An older socket of the same account gets GOAWAY and is closed.
    pub fn handle_connect(
        &mut self,
        now: UnixMs,
        conn: ConnId,
        req: &WsConnect,
    ) -> Result<Accepted, HttpResponse> {
        if self.failed {
            return Err(storage_unavailable().into_response());
        }
        let r = self.cx().connect(now, conn, req);
        match (self.finish(), r) {
            (Ok(()), Ok(a)) => Ok(a),
            (Ok(()), Err(e)) => Err(e.into_response()),
            (Err(InputFailed), _) => Err(storage_unavailable().into_response()),
        }
    }

    /// Handles one text message from `conn`: charges it to the connection's frame budget
    /// (closing the socket when the budget is used up), decodes it, and answers an
    /// undecodable frame with an error frame (the socket stays open).
    pub fn handle_text(&mut self, now: UnixMs, conn: ConnId, text: &str) {
        if !self.admit(now, conn) {
            return;
        }
        match wire::ClientFrame::decode(text) {
            Ok(frame) => self.handle_admitted(now, conn, frame),
            Err(e) => self.refuse_undecodable(now, conn, &e),
        }
    }

    /// Handles one binary message from `conn` (iOS sends UTF-8 JSON in binary frames), like
    /// [`handle_text`](Relay::handle_text).
    pub fn handle_binary(&mut self, now: UnixMs, conn: ConnId, bytes: &[u8]) {
        if !self.admit(now, conn) {
            return;
        }
        match wire::ClientFrame::decode_bytes(bytes) {
            Ok(frame) => self.handle_admitted(now, conn, frame),
            Err(e) => self.refuse_undecodable(now, conn, &e),
        }
    }

    /// Handles what a shell got from decoding a frame itself (off the relay's task, say):
    /// the frame, or why it could not be decoded. Either is charged to the frame budget first,
    /// exactly as [`handle_text`](Relay::handle_text) charges text before decoding it, so a
    /// malformed frame costs a client as much as a valid one; an undecodable one is answered
    /// with the same error frame.
    pub fn handle_decoded(
        &mut self,
        now: UnixMs,
        conn: ConnId,
        decoded: Result<wire::ClientFrame, wire::FrameError>,
    ) {
        if !self.admit(now, conn) {
            return;
        }
        match decoded {
            Ok(frame) => self.handle_admitted(now, conn, frame),
            Err(e) => self.refuse_undecodable(now, conn, &e),
        }
    }

    /// Handles one frame the shell decoded itself; charged to the frame budget like
    /// [`handle_text`](Relay::handle_text). Frames from unknown connections are ignored.
    pub fn handle_frame(&mut self, now: UnixMs, conn: ConnId, frame: wire::ClientFrame) {
        if self.admit(now, conn) {
            self.handle_admitted(now, conn, frame);
        }
    }

    /// Charges one frame of `conn` to its account's frame budget. `false`: ignore the frame —
    /// the connection is unknown, or its budget is used up (then the socket is closed here).
    fn admit(&mut self, now: UnixMs, conn: ConnId) -> bool {
        if self.failed {
            return false;
        }
        let Some(user) = self.sessions.user(conn) else {
            return false;
        };
        if self.throttles.take_frame(now, user) {
            return true;
        }
        self.close_conn(conn, CloseReason::RateLimited);
        let _ = self.finish();
        false
    }

    /// Closes `conn` for `reason`: the close is staged, the frames it parked are forgotten and
    /// its session ends.
    fn close_conn(&mut self, conn: ConnId, reason: CloseReason) {
        self.staged.push(Output::Close { conn, reason });
        self.prefetch.forget(Waiter::Conn(conn));
        self.cx().drop_conn(conn);
    }

    fn refuse_undecodable(&mut self, now: UnixMs, conn: ConnId, e: &wire::FrameError) {
        self.sessions.touch(conn, now);
        probes::refusal(e.code().as_str());
        let frame = ErrorFrame {
            error: e.code(),
            message: e.to_string(),
            ref_type: e.frame_type().map(str::to_owned),
            id: e.frame_id().map(str::to_owned),
        };
        self.cx().send(conn, ServerFrame::Error(frame));
        let _ = self.finish();
    }

    fn handle_admitted(&mut self, now: UnixMs, conn: ConnId, frame: wire::ClientFrame) {
        self.sessions.touch(conn, now);
        if !self.prefetch.is_on() {
            let _ = self.run_frame(now, conn, frame);
            return;
        }
        let burst = self.config.frame_burst_per_conn;
        if let Err((code, words)) = self.prefetch.room_for(conn, burst) {
            self.refuse_waiting(conn, &frame, code, words);
            return;
        }
        if self.prefetch.is_waiting(conn) {
            // Charged when it runs, after the frames ahead of it (a receipt may refund it).
            if let Some(user) = self.sessions.user(conn) {
                self.throttles.refund_frame(&user.clone());
            }
            self.prefetch.queue_behind(conn, frame);
            return;
        }
        let copy = frame.clone();
        if let Some(op) = self.attempt(now, conn, frame) {
            self.prefetch
                .park(Waiter::Conn(conn), Work::Frame(copy), true, op);
        }
    }

    /// Runs `frame` of `conn` and ends the input; `Some`: it needed a read it could not make
    /// (reading ahead), and the input was not ended.
    fn run_frame(&mut self, now: UnixMs, conn: ConnId, frame: wire::ClientFrame) -> Option<ReadOp> {
        use wire::ClientFrame as F;
        // What the error frame needs if the commit fails, kept without copying anything on
        // the routing path: a `msg` that committed something was accepted, so its id is in
        // the ack staged for it (see `failed_frame_id`).
        let ref_type: Cow<'static, str> = match &frame {
            F::Sync(_) => Cow::Borrowed("sync"),
            F::Ping(_) => Cow::Borrowed("ping"),
            F::Msg(_) => Cow::Borrowed("msg"),
            F::Delivered(_) => Cow::Borrowed("delivered"),
            F::Read(_) => Cow::Borrowed("read"),
            F::Typing(_) => Cow::Borrowed("typing"),
            F::Retract(_) => Cow::Borrowed("retract"),
            F::Call(c) => Cow::Borrowed(c.kind.as_str()),
            F::Unknown(u) => Cow::Owned(u.frame_type().to_owned()),
        };
        let retract_id = match &frame {
            F::Retract(r) => Some(r.id.to_string()),
            _ => None,
        };
        let is_msg = matches!(frame, F::Msg(_));
        self.dispatch_frame(now, conn, frame);
        if self.reading_ahead
            && let Some(op) = self.prefetch.take_miss()
        {
            if self.state.batch().is_empty() {
                self.staged.clear();
                return Some(op);
            }
            // A rule wrote before it read: the attempt cannot be undone, so it stands (the
            // frame was refused as for a failed read) and the row is not waited for.
            debug_assert!(false, "a rule wrote before its read of {op:?}");
        }
        if let Err(discarded) = self.finish_staged() {
            let id = if is_msg {
                failed_frame_id(&discarded, conn)
            } else {
                retract_id
            };
            // The staged outputs (acks) were discarded; tell the sender nothing was accepted.
            // `finish` already closed every socket, so this frame is informational only.
            probes::refusal(ErrorCode::STORAGE_UNAVAILABLE.as_str());
            self.outputs.push_front(Output::Send {
                conn,
                frame: ServerFrame::Error(ErrorFrame {
                    error: ErrorCode::STORAGE_UNAVAILABLE,
                    message: "the relay could not store this frame; nothing was accepted".into(),
                    ref_type: Some(ref_type.into_owned()),
                    id,
                }),
            });
        }
        None
    }

    fn dispatch_frame(&mut self, now: UnixMs, conn: ConnId, frame: wire::ClientFrame) {
        use wire::ClientFrame as F;
        let mut cx = self.cx();
        match frame {
            F::Sync(_) => cx.on_sync(now, conn),
            F::Ping(_) => {}
            F::Msg(m) => cx.on_msg(now, conn, m),
            F::Delivered(r) => cx.on_receipt(now, conn, crate::rows::ReceiptKind::Delivered, &r),
            F::Read(r) => cx.on_receipt(now, conn, crate::rows::ReceiptKind::Read, &r),
            F::Typing(t) => cx.on_typing(now, conn, &t),
            F::Retract(r) => cx.on_retract(now, conn, &r),
            F::Call(c) => cx.on_call(now, conn, c),
            F::Unknown(u) => {
                let t = u.frame_type().to_owned();
                cx.send_error(
                    conn,
                    ErrorCode::UNSUPPORTED_FRAME,
                    &format!("frame type {t:?} is not accepted from clients"),
                    Some(t),
                    None,
                );
            }
        }
    }

    /// Input: the push service said `target` of `user` no longer exists (Web Push 404/410,
    /// FCM `UNREGISTERED`, APNs 410 / `BadDeviceToken` / `Unregistered`); the shell's push
    /// worker reports it. The target is deleted durably, committed like any other input.
    /// Idempotent: an unknown account or a target already gone (deleted, replaced by a newer
    /// subscription with other keys, or evicted) changes nothing. Matching is exact, so a
    /// report about old keys never deletes a re-subscription to the same endpoint.
    ///
    /// `now` (the relay's clock at the report) is unused today, as in
    /// [`handle_disconnect`](Relay::handle_disconnect): a deletion sets no deadline. Inside a
    /// [batch](Relay#group-commit) the deletion is committed with the batch; a failed commit
    /// stops the relay like any other input's (fail-stop: [`Relay::is_failed`]). Drain
    /// `poll_output` afterwards, as after any input.
    pub fn handle_push_gone(&mut self, _now: UnixMs, user: &UserUuid, target: &PushTarget) {
        if self.failed {
            return;
        }
        self.cx().forget_push_target(user, target);
        let _ = self.finish();
    }

    /// What the core of another shard sent this one (an [`Output::Cross`] of it): a message
    /// handed from its conversation's owner, applied to its recipient's queue once and in its
    /// stream's order, then delivered (a repeat is acknowledged again, one past a gap waits
    /// for it); an acknowledgement of hand-offs, whose outbox rows are deleted; a sender's
    /// `msg` for a conversation this shard owns, decided here; the owner's verdict on a `msg`
    /// this shard submitted, answered on the sender's connection. What it answers follows
    /// the commit. Drain `poll_output` afterwards, as after any input.
    pub fn handle_crossing(&mut self, now: UnixMs, c: crate::handoff::Crossing) {
        if self.failed {
            return;
        }
        match c {
            crate::handoff::Crossing::Answered(a) => self.on_answered(a),
            crate::handoff::Crossing::Forward(crate::handoff::Forward {
                from,
                id,
                op: crate::handoff::Forwarded::Request { caller, req },
                ..
            }) => return self.on_forwarded_request(now, (from, id), caller, &req),
            c if self.prefetch.is_on() => {
                self.cross_ahead(now, c);
                // The levels a held upgrade waits for may have come.
                self.open_gate(now);
                return;
            }
            c => self.cx().on_crossing(now, c),
        }
        let _ = self.finish();
    }

    /// Outbox rows not yet applied by their destination shard, and hand-offs held here past
    /// a gap.
    pub fn handoff_backlog(&self) -> (usize, usize) {
        let c = self.state.handoffs();
        (c.outbox_rows(), c.held())
    }

    /// The shell saw `conn` close (or fail). Nothing is lost: undelivered messages stay queued.
    /// Frames of `conn` still waiting for a read ahead were sent before the close and run
    /// first; the connection is dropped once they did (what they answer goes nowhere).
    pub fn handle_disconnect(&mut self, _now: UnixMs, conn: ConnId) {
        if self.forget_held(conn) {
            return;
        }
        // Frames that wait for a read were sent before the close: they run first.
        if self.prefetch.close_after_waiting(conn) {
            return;
        }
        self.cx().drop_conn(conn);
    }

    // ------------------------------------------------------------------ outputs

    /// The view the rules of one input work with (`crate::cx`): every part of the relay but
    /// the dispatcher's own.
    fn cx(&mut self) -> Cx<'_> {
        let reader = if self.reading_ahead {
            Reader::Ahead {
                ahead: self.prefetch.reader(),
                inline: &mut self.reader,
                may_park: true,
            }
        } else {
            Reader::Inline(&mut self.reader)
        };
        Cx::new(
            &self.config,
            reader,
            &mut self.ids,
            (&self.tokens, &self.credentials),
            &mut self.state,
            &mut self.admission,
            &mut self.sessions,
            &mut self.throttles,
            &mut *self.blobs,
            &mut self.stats,
            &mut self.staged,
            self.verified.as_ref(),
            self.request,
        )
    }

    /// The next effect for the shell, in order.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }
}

/// The id of the `msg` whose commit failed: the id of the ack staged for it on `conn` (a `msg`
/// commits something only when it is accepted, and then its ack is staged).
fn failed_frame_id(discarded: &[Output], conn: ConnId) -> Option<String> {
    discarded.iter().find_map(|o| match o {
        Output::Send {
            conn: c,
            frame: ServerFrame::Ack(ack),
        } if *c == conn => Some(ack.id.to_string()),
        _ => None,
    })
}

/// The answer to a request whose input was not stored: 503 `STORAGE_UNAVAILABLE` (what
/// [`Relay::handle_http`] answers when its commit fails; a shell answers with it every
/// provisional response of a batch whose [`Relay::commit_batch`] failed).
pub fn storage_unavailable_response() -> HttpResponse {
    storage_unavailable().into_response()
}

pub(crate) fn storage_unavailable() -> ApiError {
    ApiError::new(
        ErrorCode::STORAGE_UNAVAILABLE,
        "the relay's store is unavailable; nothing was changed, retry later",
    )
}

/// A failed read refuses the request with 503 `STORAGE_UNAVAILABLE` (the store's own words stay
/// out of the answer).
impl From<StoreError> for ApiError {
    fn from(_: StoreError) -> Self {
        storage_unavailable()
    }
}
