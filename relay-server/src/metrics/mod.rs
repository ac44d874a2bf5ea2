//! Prometheus metrics: what the server, its relay, its store and its push worker did, served
//! as OpenMetrics text on a listener of its own ([`serve_metrics`]; `relay --metrics-listen`),
//! never on the public port.
//!
//! * **Where the numbers come from**: the core task counts frames, closes and batches as it
//!   executes the relay's outputs, and adds the differences of
//!   [`Relay::stats`](relay_core::Relay::stats) after every round (relay-core only counts;
//!   reading the counters changes nothing); [`MeteredStore`] times every commit and load of
//!   the store it wraps; the REST handler counts answers by route; the supervisor sets the
//!   leadership gauges. Connections, outbound bytes and the push worker are read at scrape
//!   time ([`Metrics::attach_connections`], [`Metrics::attach_push`]).
//! * **Labels** are closed sets of fixed names ([`LABEL_VALUES`] lists every one): frame
//!   types, close reasons, route templates (`users/{alias}`, never a path), push services and
//!   results; and a core's shard, a number below the relay's `--shards`. No label ever carries an account, alias, id, token or address: cardinality stays
//!   bounded and a scrape tells nothing about anyone.
//! * **Cost**: a few atomic additions per batch and per frame; a server built without
//!   [`RelayServer::with_metrics`](super::RelayServer::with_metrics) (the simulator) counts
//!   nothing and reads no clock.
//!
//! The list, with meanings and suggested alerts, is in the README ("Metrics").

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use axum::{Router, http::header, response::IntoResponse, routing::get};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};
use relay_core::store::{Store, StoreError, WriteGroup};
use relay_push::PushWorker;
use seam::net::{ConnectionCounter, Network, ServeLimits};
use wire::{ClientFrame, ErrorCode, ServerFrame};

use super::OutboundBytes;

mod cluster;
mod core_share;
mod labels;
mod live;
mod relay_stats;
mod store;

pub(crate) use self::core_share::{CoreGauges, CoreShare};
pub(crate) use self::labels::close_kind;
pub use self::labels::*;
use self::labels::{client_kind, refusal, server_kind};
pub use self::store::MeteredStore;
pub(crate) use self::store::Stopwatch;

/// The path of the exposition on the metrics listener.
pub const METRICS_PATH: &str = "/metrics";
/// The exposition's content type (OpenMetrics 1.0 text, which Prometheus negotiates).
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Debug)]
struct Families {
    frames_received: Family<FrameLabels, Counter>,
    frames_sent: Family<FrameLabels, Counter>,
    websockets: Gauge,
    websockets_opened: Counter,
    websocket_closes: Family<CloseLabels, Counter>,
    messages_accepted: Family<RecipientLabels, Counter>,
    messages_deduplicated: Counter,
    messages_refused: Family<RefusalLabels, Counter>,
    syncs: Counter,
    sync_backlog_messages: Counter,
    webhooks: Family<WebhookLabels, Counter>,
    refunds_needed: Counter,
    http_responses: Family<HttpLabels, Counter>,
    http_duration: Histogram,
    rate_limited: Family<LimitLabels, Counter>,
    batch_inputs: Histogram,
    commit_duration: Histogram,
    commit_rows: Histogram,
    load_duration: Histogram,
    read_duration: Histogram,
    tombstone_sets_read: Counter,
    tombstone_rows_read: Counter,
    tombstone_cache: Gauge,
    frames_parked: Counter,
    requests_parked: Counter,
    sweeps_parked: Counter,
    crossings_parked: Counter,
    crossings_dropped_waiting: Counter,
    reads_inline: Counter,
    handed_off_messages: Counter,
    messages_submitted: Counter,
    submissions_resent: Counter,
    handoffs_applied: Counter,
    handoffs_repeated: Counter,
    handoffs_held: Counter,
    notices_taken: Counter,
    requests_forwarded: Counter,
    forwards_timed_out: Counter,
    prefetch_parked_frames: Gauge,
    prefetch_parked_requests: Gauge,
    prefetch_parked_crossings: Gauge,
    prefetch_reads_pending: Gauge,
    queues_read: Counter,
    queue_cache: Gauge,
    accounts_read: Counter,
    account_cache: Gauge,
    conversations_read: Counter,
    conversation_cache: Gauge,
    contacts_read: Counter,
    contact_cache: Gauge,
    store_errors: Family<StoreErrorLabels, Counter>,
    fenced_commits: Counter,
    failstops: Counter,
    core_busy: Family<ShardLabels, Counter<f64, AtomicU64>>,
    shard_outbox: Family<ShardLabels, Gauge>,
    upgrades_held: Counter,
    shard_handoffs_held: Family<ShardLabels, Gauge>,
    input_queue: Gauge,
    queued_messages: Gauge,
    queued_bytes: Gauge,
    leader: Gauge,
    epoch: Gauge,
    terms: Counter,
    draining: Gauge,
    cluster_shards_served: Gauge,
    cluster_shard_epoch: Family<ShardLabels, Gauge>,
    cluster_shard_moves: Family<MoveLabels, Counter>,
    passed_on: Family<PassedLabels, Counter>,
    passed_on_duration: Histogram,
}

/// What is read at scrape time.
#[derive(Debug, Default)]
struct Sources {
    connections: Option<(ConnectionCounter, ServeLimits)>,
    outbound: Option<OutboundBytes>,
    push: Option<PushWorker>,
    queued_bytes_limit: Option<u64>,
    write_group: Option<WriteGroup>,
}

/// The collector of [`Sources`].
#[derive(Debug, Default, Clone)]
struct Live(Arc<Mutex<Sources>>);

/// The server's metrics: cheap to clone (shared), registered once.
#[derive(Clone, Debug)]
pub struct Metrics {
    registry: Arc<Registry>,
    f: Arc<Families>,
    live: Live,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Every family, registered under the `relay_` prefix.
    // Long on purpose: one line per family, the table of them all.
    pub fn new() -> Self {
        let mut r = Registry::with_prefix("relay");
        let f = Families {
            frames_received: Family::default(),
            frames_sent: Family::default(),
            websockets: Gauge::default(),
            websockets_opened: Counter::default(),
            websocket_closes: Family::default(),
            messages_accepted: Family::default(),
            messages_deduplicated: Counter::default(),
            messages_refused: Family::default(),
            syncs: Counter::default(),
            sync_backlog_messages: Counter::default(),
            refunds_needed: Counter::default(),
            webhooks: Family::default(),
            http_responses: Family::default(),
            http_duration: Histogram::new(exponential_buckets(0.000_5, 2.0, 14)),
            rate_limited: Family::default(),
            batch_inputs: Histogram::new(exponential_buckets(1.0, 2.0, 9)),
            commit_duration: Histogram::new(exponential_buckets(0.000_05, 2.0, 17)),
            commit_rows: Histogram::new(exponential_buckets(1.0, 2.0, 13)),
            load_duration: Histogram::new(exponential_buckets(0.001, 4.0, 10)),
            read_duration: Histogram::new(exponential_buckets(0.000_01, 2.0, 17)),
            tombstone_sets_read: Counter::default(),
            tombstone_rows_read: Counter::default(),
            tombstone_cache: Gauge::default(),
            frames_parked: Counter::default(),
            requests_parked: Counter::default(),
            handed_off_messages: Counter::default(),
            messages_submitted: Counter::default(),
            submissions_resent: Counter::default(),
            handoffs_applied: Counter::default(),
            handoffs_repeated: Counter::default(),
            handoffs_held: Counter::default(),
            notices_taken: Counter::default(),
            requests_forwarded: Counter::default(),
            forwards_timed_out: Counter::default(),
            sweeps_parked: Counter::default(),
            crossings_parked: Counter::default(),
            crossings_dropped_waiting: Counter::default(),
            reads_inline: Counter::default(),
            prefetch_parked_frames: Gauge::default(),
            prefetch_parked_requests: Gauge::default(),
            prefetch_parked_crossings: Gauge::default(),
            prefetch_reads_pending: Gauge::default(),
            queues_read: Counter::default(),
            queue_cache: Gauge::default(),
            accounts_read: Counter::default(),
            account_cache: Gauge::default(),
            conversations_read: Counter::default(),
            conversation_cache: Gauge::default(),
            contacts_read: Counter::default(),
            contact_cache: Gauge::default(),
            store_errors: Family::default(),
            fenced_commits: Counter::default(),
            failstops: Counter::default(),
            core_busy: Family::default(),
            shard_outbox: Family::default(),
            upgrades_held: Counter::default(),
            shard_handoffs_held: Family::default(),
            input_queue: Gauge::default(),
            queued_messages: Gauge::default(),
            queued_bytes: Gauge::default(),
            leader: Gauge::default(),
            epoch: Gauge::default(),
            terms: Counter::default(),
            draining: Gauge::default(),
            cluster_shards_served: Gauge::default(),
            cluster_shard_epoch: Family::default(),
            cluster_shard_moves: Family::default(),
            passed_on: Family::default(),
            passed_on_duration: Histogram::new(exponential_buckets(0.000_1, 2.0, 18)),
        };
        register(&mut r, &f);
        let live = Live::default();
        r.register_collector(Box::new(live.clone()));
        Self {
            registry: Arc::new(r),
            f: Arc::new(f),
            live,
        }
    }

    /// The exposition, OpenMetrics text (ends with `# EOF`).
    pub fn encode(&self) -> String {
        let mut text = String::new();
        if prometheus_client::encoding::text::encode(&mut text, &self.registry).is_err() {
            text.clear();
            text.push_str("# EOF\n");
        }
        text
    }

    /// Reads open TCP connections and refusals from `counter` at scrape time, with the caps
    /// of `limits`.
    pub fn attach_connections(&self, counter: ConnectionCounter, limits: ServeLimits) {
        self.live.sources().connections = Some((counter, limits));
    }

    /// Reads bytes queued for sockets at scrape time.
    pub fn attach_outbound(&self, outbound: OutboundBytes) {
        self.live.sources().outbound = Some(outbound);
    }

    /// Reads the push worker's counters and occupancy at scrape time.
    pub fn attach_push(&self, worker: PushWorker) {
        self.live.sources().push = Some(worker);
    }

    /// Reads the group commit of a SQLite relay's cores at scrape time (its writes and the
    /// commits they carried).
    pub fn attach_write_group(&self, group: WriteGroup) {
        self.live.sources().write_group = Some(group);
    }

    /// The relay's bound on undelivered bytes (`relay_queued_bytes_limit`).
    pub fn set_queued_bytes_limit(&self, bytes: u64) {
        self.live.sources().queued_bytes_limit = Some(bytes);
    }

    /// A frame from a client (or one that could not be decoded).
    pub(super) fn frame_received(&self, decoded: Result<&ClientFrame, ()>) {
        let frame = match decoded {
            Ok(frame) => client_kind(frame),
            Err(()) => FrameKind::Undecodable,
        };
        self.f
            .frames_received
            .get_or_create(&FrameLabels { frame })
            .inc();
    }

    /// A frame handed to a socket; an error frame also counts as the refusal it tells of.
    pub(super) fn frame_sent(&self, frame: &ServerFrame) {
        let kind = server_kind(frame);
        self.f
            .frames_sent
            .get_or_create(&FrameLabels { frame: kind })
            .inc();
        if let ServerFrame::Error(e) = frame {
            let about = e.ref_type.as_deref();
            if about == Some("msg") {
                self.f
                    .messages_refused
                    .get_or_create(&RefusalLabels {
                        reason: refusal(&e.error),
                    })
                    .inc();
            }
            if e.error == ErrorCode::RATE_LIMITED {
                let limit = if about == Some("msg") {
                    WsLimit::Msg
                } else {
                    WsLimit::Call
                };
                self.rate_limited(limit.as_str());
            }
        }
    }

    /// A socket the relay closed or lost, and why.
    pub(super) fn websocket_closed(&self, why: CloseKind) {
        self.f
            .websocket_closes
            .get_or_create(&CloseLabels { reason: why })
            .inc();
        if why == CloseKind::RateLimited {
            self.rate_limited(WsLimit::Frames.as_str());
        }
    }

    /// An upgrade accepted (committed).
    pub(super) fn websocket_opened(&self) {
        self.f.websockets_opened.inc();
    }

    /// `n` inputs taken from the queue at once (a group commit, or part of the batch that fills
    /// while a commit runs).
    pub(super) fn batch(&self, n: usize) {
        self.f.batch_inputs.observe(n as f64);
    }

    /// The core task of `shard` worked `seconds` on one wake-up (inputs, timers, commit
    /// reports: all but waiting).
    pub(super) fn core_busy(&self, shard: u16, seconds: f64) {
        self.f
            .core_busy
            .get_or_create(&ShardLabels { shard })
            .inc_by(seconds);
    }

    /// A fail-stop: the relay is rebuilt from its store.
    pub(super) fn failstop(&self) {
        self.f.failstops.inc();
    }

    /// The relay answered a request of `route` (a [`relay_core::http::route_name`]) with
    /// `status`, `seconds` after it was read.
    pub(super) fn http_response(&self, route: &'static str, status: u16, seconds: f64) {
        let class = match status {
            200..=299 => StatusClass::S2xx,
            300..=399 => StatusClass::S3xx,
            400..=499 => StatusClass::S4xx,
            500..=599 => StatusClass::S5xx,
            _ => StatusClass::Other,
        };
        self.f
            .http_responses
            .get_or_create(&HttpLabels {
                route,
                status: class,
            })
            .inc();
        self.f.http_duration.observe(seconds);
        if status == 429 {
            self.rate_limited(route);
        }
    }

    fn rate_limited(&self, route: &'static str) {
        self.f
            .rate_limited
            .get_or_create(&LimitLabels { route })
            .inc();
    }

    /// This process leads (`epoch`: PostgreSQL's fencing token; `None` for a single relay).
    pub(super) fn leading(&self, epoch: Option<u64>) {
        self.f.leader.set(1);
        self.f.epoch.set(gauge(epoch.unwrap_or(0)));
        self.f.terms.inc();
    }

    /// This process stopped leading.
    pub(super) fn standing_by(&self) {
        self.f.leader.set(0);
    }

    /// The server began to drain (SIGTERM).
    pub(super) fn draining(&self) {
        self.f.draining.set(1);
    }

    fn store_error(&self, op: StoreOp, error: &StoreError) {
        let kind = match error {
            StoreError::Fenced { .. } => StoreErrorKind::Fenced,
            StoreError::SchemaVersion { .. } => StoreErrorKind::SchemaVersion,
            StoreError::Backend(_) => StoreErrorKind::Backend,
        };
        self.f
            .store_errors
            .get_or_create(&StoreErrorLabels { op, kind })
            .inc();
        if kind == StoreErrorKind::Fenced && op == StoreOp::Commit {
            self.f.fenced_commits.inc();
        }
    }

    /// Wraps `store` so that every commit and load is timed and counted.
    pub fn meter<S: Store>(&self, store: S) -> MeteredStore<S> {
        MeteredStore {
            inner: store,
            metrics: self.clone(),
        }
    }
}

fn gauge(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

// Long on purpose: the registry, one `register` per metric family with its help text.
fn register(r: &mut Registry, f: &Families) {
    r.register(
        "frames_received",
        "WebSocket frames received from clients, by type",
        f.frames_received.clone(),
    );
    r.register(
        "frames_sent",
        "WebSocket frames handed to sockets, by type",
        f.frames_sent.clone(),
    );
    r.register(
        "websockets",
        "Authenticated WebSockets open now",
        f.websockets.clone(),
    );
    r.register(
        "websockets_opened",
        "WebSocket upgrades accepted",
        f.websockets_opened.clone(),
    );
    r.register(
        "websocket_closes",
        "WebSockets ended, by reason",
        f.websocket_closes.clone(),
    );
    r.register(
        "messages_accepted",
        "New messages stored and acknowledged, by whether the recipient was connected",
        f.messages_accepted.clone(),
    );
    r.register(
        "messages_deduplicated",
        "Re-sent messages acknowledged again without storing them twice",
        f.messages_deduplicated.clone(),
    );
    r.register(
        "messages_refused",
        "Messages refused with an error frame (no ack), by reason",
        f.messages_refused.clone(),
    );
    r.register("syncs", "sync frames handled", f.syncs.clone());
    r.register(
        "sync_backlog_messages",
        "Messages waiting for an account when it synced (replayed after the sync), summed",
        f.sync_backlog_messages.clone(),
    );
    r.register(
        "payment_webhooks",
        "Payment webhooks, by result",
        f.webhooks.clone(),
    );
    r.register(
        "payment_refunds_needed",
        "Payments applied to orders that can no longer deliver (late after the alias or channel went to someone else, or a second payment): each needs a refund",
        f.refunds_needed.clone(),
    );
    r.register(
        "http_responses",
        "API responses of the relay, by route template and status class",
        f.http_responses.clone(),
    );
    r.register_with_unit(
        "http_request_duration",
        "Time from a request's body read to the relay's answer (queue, handling, commit)",
        Unit::Seconds,
        f.http_duration.clone(),
    );
    r.register(
        "rate_limited",
        "Requests and frames refused by a rate limit, by route template or WebSocket limit",
        f.rate_limited.clone(),
    );
    r.register_with_unit(
        "core_busy",
        "Time each core task spent working (inputs, timers, commit reports) rather than waiting, by shard: its rate is the core's utilisation, 1 when it is the ceiling",
        Unit::Seconds,
        f.core_busy.clone(),
    );
    r.register(
        "shard_outbox",
        "Hand-offs and notices a shard stored for other shards and they have not taken yet (its outbox rows), by shard: it grows while a destination shard is slow, cut off or not served, and drains once it applies them",
        f.shard_outbox.clone(),
    );
    r.register(
        "shard_handoffs_held",
        "Hand-offs a shard received past a gap in their stream and holds until the gap is filled, by shard",
        f.shard_handoffs_held.clone(),
    );
    r.register(
        "batch_inputs",
        "Inputs the core task took from its queue at once (one group commit, or part of one)",
        f.batch_inputs.clone(),
    );
    r.register_with_unit(
        "store_commit_duration",
        "Duration of one store commit (one transaction)",
        Unit::Seconds,
        f.commit_duration.clone(),
    );
    r.register(
        "store_commit_rows",
        "Rows written or deleted per store commit",
        f.commit_rows.clone(),
    );
    r.register_with_unit(
        "store_load_duration",
        "Duration of loading the whole state from the store (start, rebuild, takeover)",
        Unit::Seconds,
        f.load_duration.clone(),
    );
    r.register_with_unit(
        "store_read_duration",
        "Duration of one keyed read of the store (an account, a conversation's tombstones, a queue, the next expiry)",
        Unit::Seconds,
        f.read_duration.clone(),
    );
    r.register(
        "tombstone_sets_read",
        "Conversations' message-id tombstone sets read from the store (not in memory at their first msg or retract)",
        f.tombstone_sets_read.clone(),
    );
    r.register(
        "tombstone_rows_read",
        "Single message-id tombstones read from the store (conversations whose sets are too large to hold whole are read by row)",
        f.tombstone_rows_read.clone(),
    );
    r.register_with_unit(
        "tombstone_cache",
        "Estimated heap of the message-id tombstones held in memory",
        Unit::Bytes,
        f.tombstone_cache.clone(),
    );
    r.register(
        "frames_parked",
        "Times a frame waited for a read of what the relay does not hold in memory, done off the core task (once per cold read it needed)",
        f.frames_parked.clone(),
    );
    r.register(
        "requests_parked",
        "Times an HTTP request or a WebSocket upgrade waited for a read done off the core task (once per cold read it needed)",
        f.requests_parked.clone(),
    );
    r.register(
        "sweeps_parked",
        "Times a step of the timed expiry sweeps waited for a read done off the core task",
        f.sweeps_parked.clone(),
    );
    r.register(
        "crossings_parked",
        "Times what another shard sent (a hand-off, a submission, a notice) waited for a read done off the core task",
        f.crossings_parked.clone(),
    );
    r.register(
        "crossings_dropped_waiting",
        "What other shards sent dropped because too much of it waited for reads (sent again by its shard)",
        f.crossings_dropped_waiting.clone(),
    );
    r.register(
        "reads_inline",
        "Reads of the store made on the core task (every read of a relay that does not read ahead; with it, a read after an input changed something)",
        f.reads_inline.clone(),
    );
    r.register(
        "messages_handed_off",
        "Messages stored for a recipient of another shard: each an outbox row until that shard applies it",
        f.handed_off_messages.clone(),
    );
    r.register(
        "upgrades_held",
        "WebSocket upgrades a core that had just started held until the other shards said how full their users' queues are (at most 2 s), so that the messages a reconnecting client sends first are not refused",
        f.upgrades_held.clone(),
    );
    r.register(
        "messages_submitted",
        "msg frames of this server's users submitted to the shard that owns their conversation",
        f.messages_submitted.clone(),
    );
    r.register(
        "submissions_resent",
        "Submitted msg frames sent again to their conversation's shard because no verdict came in time",
        f.submissions_resent.clone(),
    );
    r.register(
        "handoffs_applied",
        "Messages from another shard applied to their recipient's queue (each once)",
        f.handoffs_applied.clone(),
    );
    r.register(
        "handoffs_repeated",
        "Hand-offs received again after they were applied (acknowledged again)",
        f.handoffs_repeated.clone(),
    );
    r.register(
        "handoffs_held",
        "Hand-offs held past a gap in their stream until it was filled",
        f.handoffs_held.clone(),
    );
    r.register(
        "notices_taken",
        "Receipts, retractions, friendships, payment confirmations and alias changes from other shards applied",
        f.notices_taken.clone(),
    );
    r.register(
        "requests_forwarded",
        "HTTP requests forwarded to the shard that decides them",
        f.requests_forwarded.clone(),
    );
    r.register(
        "forwards_timed_out",
        "Forwarded requests answered 503 because the deciding shard did not answer in time",
        f.forwards_timed_out.clone(),
    );
    r.register(
        "prefetch_parked_frames",
        "Frames waiting for a read ahead, or queued behind one that is",
        f.prefetch_parked_frames.clone(),
    );
    r.register(
        "prefetch_parked_requests",
        "HTTP requests and WebSocket upgrades waiting for a read ahead",
        f.prefetch_parked_requests.clone(),
    );
    r.register(
        "prefetch_parked_crossings",
        "What other shards sent waiting for a read ahead, or queued behind what does",
        f.prefetch_parked_crossings.clone(),
    );
    r.register(
        "prefetch_reads_pending",
        "Reads ahead asked for and not yet done",
        f.prefetch_reads_pending.clone(),
    );
    r.register(
        "queues_read",
        "Queues (one recipient's messages in one conversation) read from the store, not being in memory when needed",
        f.queues_read.clone(),
    );
    r.register_with_unit(
        "queue_cache",
        "Estimated heap of the queued messages held in memory",
        Unit::Bytes,
        f.queue_cache.clone(),
    );
    r.register(
        "accounts_read",
        "Accounts read from the store, not being in memory when needed (by uuid, alias or key)",
        f.accounts_read.clone(),
    );
    r.register_with_unit(
        "account_cache",
        "Estimated heap of the accounts held in memory",
        Unit::Bytes,
        f.account_cache.clone(),
    );
    r.register(
        "conversations_read",
        "Conversations read from the store, not being in memory when needed",
        f.conversations_read.clone(),
    );
    r.register_with_unit(
        "conversation_cache",
        "Estimated heap of the conversations held in memory",
        Unit::Bytes,
        f.conversation_cache.clone(),
    );
    r.register(
        "contacts_read",
        "Contact lists (one user's friendships) read from the store, not being in memory when needed",
        f.contacts_read.clone(),
    );
    r.register_with_unit(
        "contact_cache",
        "Estimated heap of the contact lists held in memory",
        Unit::Bytes,
        f.contact_cache.clone(),
    );
    r.register(
        "store_errors",
        "Failed store operations, by operation and kind",
        f.store_errors.clone(),
    );
    r.register(
        "fenced_commits",
        "Commits refused because another relay took over (PostgreSQL epoch fence)",
        f.fenced_commits.clone(),
    );
    r.register(
        "failstops",
        "Times the relay stopped after a failed commit and was rebuilt from its store",
        f.failstops.clone(),
    );
    r.register(
        "input_queue",
        "Inputs waiting for the core task",
        f.input_queue.clone(),
    );
    r.register(
        "queued_messages",
        "Undelivered messages held for recipients",
        f.queued_messages.clone(),
    );
    r.register_with_unit(
        "queued",
        "Bytes of undelivered messages held, as the queue bounds count them",
        Unit::Bytes,
        f.queued_bytes.clone(),
    );
    r.register(
        "leader",
        "1 while this process is the active relay, 0 while it stands by",
        f.leader.clone(),
    );
    r.register(
        "leader_epoch",
        "Fencing epoch of the current term (PostgreSQL; 0 for a single relay)",
        f.epoch.clone(),
    );
    r.register(
        "leadership_terms",
        "Terms this process led (1 for a single relay)",
        f.terms.clone(),
    );
    r.register(
        "draining",
        "1 once a shutdown began: no new connections, sockets closing",
        f.draining.clone(),
    );
    cluster::register(r, f);
    let info = prometheus_client::metrics::info::Info::new(VersionLabels {
        version: env!("CARGO_PKG_VERSION"),
    });
    r.register("build", "The relay's version", info);
}

/// Serves `GET /metrics` (and nothing else) on `listener` until `shutdown` resolves.
pub async fn serve_metrics<N: Network>(
    listener: N::Listener,
    metrics: Metrics,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let router = Router::new().route(
        METRICS_PATH,
        get(move || {
            let metrics = metrics.clone();
            async move {
                (
                    [(header::CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)],
                    metrics.encode(),
                )
                    .into_response()
            }
        }),
    );
    seam::net::serve(listener, router, shutdown).await
}

/// Binds `addr` on network `N` and serves the metrics there ([`serve_metrics`]).
pub async fn run_metrics<N: Network>(
    addr: SocketAddr,
    metrics: Metrics,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let listener = N::bind(addr).await?;
    serve_metrics::<N>(listener, metrics, shutdown).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_is_exported_with_the_prefix_and_no_free_text_label() {
        let metrics = Metrics::new();
        metrics.frame_received(Err(()));
        metrics.websocket_closed(CloseKind::RateLimited);
        metrics.http_response("users/{alias}", 429, 0.001);
        metrics.leading(Some(7));
        let text = metrics.encode();
        assert!(text.ends_with("# EOF\n"), "{text}");
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            assert!(line.starts_with("relay_"), "{line}");
        }
        assert!(
            text.contains(r#"relay_rate_limited_total{route="users/{alias}"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"relay_rate_limited_total{route="ws:frames"} 1"#),
            "{text}"
        );
        assert!(text.contains("relay_leader_epoch 7"), "{text}");
        assert!(
            text.contains(r#"relay_frames_received_total{frame="undecodable"} 1"#),
            "{text}"
        );
    }
}
