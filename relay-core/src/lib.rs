//! Sans-IO SecureChat relay: every rule of the service as a state machine over a
//! transactional store.
//!
//! The [`Relay`] never reads a clock, draws from a global RNG, spawns or touches a socket:
//! every input carries `now` (epoch milliseconds), randomness comes from a seed, and effects
//! are queued [`Output`]s. Durable state lives behind the [`store::Store`] trait
//! ([`store::SqliteStore`] for the real server, [`store::MemoryStore`] for the simulator);
//! every acknowledgement (HTTP 2xx, `ack`) is released only after its write committed.
//!
//! # The run loop of a shell
//!
//! ```
//! use relay_core::{Config, ConnId, HttpRequest, Method, Output, Relay, WsConnect};
//! use relay_core::store::MemoryStore;
//! use wire::UnixMs;
//!
//! let mut relay = Relay::new(Config::default(), Box::new(MemoryStore::new()), 42).unwrap();
//! let mut now = UnixMs(1_700_000_000_000);
//!
//! // An HTTP request: the response is returned directly.
//! let resp = relay.handle_http(now, &HttpRequest::new(Method::Post, "/api/v1/pow/challenge"));
//! assert_eq!(resp.status, 200);
//!
//! // A WebSocket upgrade: Ok means upgrade, Err is the response to send instead.
//! let refused = relay.handle_connect(now, ConnId(1), &WsConnect::default());
//! assert_eq!(refused.unwrap_err().status, 401);
//!
//! // After every input: drain the outputs, execute them in order, re-arm the timer.
//! while let Some(out) = relay.poll_output() {
//!     match out {
//!         Output::Send { conn, frame } => { let _text = frame.encode(); /* ws.send(text) */ }
//!         Output::Close { conn, reason } => { /* ws.close() */ }
//!         Output::Push { user, target, payload } => { /* Web Push / FCM / APNs, best effort */ }
//!         // Only when reading ahead (below): answers to requests and upgrades that waited.
//!         Output::Http { id, response } => { /* the reply of request `id` */ }
//!         Output::Connect { conn, result } => { /* complete or refuse the upgrade */ }
//!         // Only when this core is one of several shards (`Config::shard`): carried to
//!         // `handle_crossing` of the core that runs shard `c.to()`.
//!         Output::Cross(c) => { /* to the core of shard `c.to()` */ }
//!     }
//! }
//! if let Some(deadline) = relay.poll_timeout() {
//!     now = deadline; // the shell sleeps until then (or until the next input) …
//!     relay.handle_timeout(now);
//! }
//! // If a commit ever fails the relay stops (fail-stop): rebuild it from the store.
//! assert!(!relay.is_failed());
//! ```
//!
//! # Pipelined commits
//! A shell whose commits are slow takes the store and commits sealed batches itself, in seal
//! order, while the relay goes on with the next batch; outputs leave only once their batch and
//! every earlier one are reported committed (see [`Relay`]'s doc):
//!
//! ```
//! # use relay_core::{Config, HttpRequest, Method, Relay};
//! # use relay_core::store::{MemoryStore, Store as _};
//! # use wire::UnixMs;
//! # let now = UnixMs(1_700_000_000_000);
//! let mut relay = Relay::new(Config::default(), Box::new(MemoryStore::new()), 42).unwrap();
//! let mut store = relay.take_store().unwrap(); // to the committer (a thread, a task)
//! let _provisional = relay.handle_http(now, &HttpRequest::new(Method::Get, "/api/v1/friends"));
//! match relay.seal_batch() {
//!     // Nothing to commit and nothing in flight: its answers and outputs may go now.
//!     Ok(None) => {}
//!     Ok(Some(batch)) => {
//!         // … on the committer, after every batch sealed before it:
//!         let result = store.commit(&batch.mutations);
//!         // … back on the relay's task, in seal order: `Ok` releases the batch's outputs,
//!         // and the emptied batch may be given back for its buffers to be reused.
//!         let _durable = relay.handle_committed(batch.id, &result).is_ok();
//!         relay.recycle_batch(batch.mutations);
//!     }
//!     // The relay failed: answer the batch's requests with 503, rebuild from the store.
//!     Err(_) => {}
//! }
//! ```
//!
//! # Reading ahead
//! A shell whose store reads are slow (a disk, a database round trip) keeps them off the
//! relay's task: after [`Relay::read_ahead`], an input that needs a row not in memory waits
//! for it while every other input is served. Frames go in as before; requests and upgrades
//! go through [`Relay::handle_request`] and [`Relay::handle_connect_ahead`], whose `None` means
//! "answered later by an output". The reads come out of [`Relay::poll_read`], run anywhere
//! ([`prefetch::ReadRequest::run`] on a reader of the store) and go back with
//! [`Relay::handle_read`]:
//!
//! ```
//! # use relay_core::{Config, HttpRequest, Method, Output, Relay, RequestId};
//! # use relay_core::store::MemoryStore;
//! # use wire::UnixMs;
//! # let now = UnixMs(1_700_000_000_000);
//! let store = MemoryStore::new();
//! let mut relay = Relay::new(Config::default(), Box::new(store.clone()), 42).unwrap();
//! relay.read_ahead();
//! let req = HttpRequest::new(Method::Get, "/api/v1/friends").bearer("not-a-token");
//! let answer = match relay.handle_request(now, RequestId(1), req) {
//!     Some(response) => response,
//!     None => loop {
//!         // … on a reader thread: run the read against the store's reader, then report it.
//!         let read = relay.poll_read().expect("it waits for a read");
//!         let done = read.run(&mut store.clone());
//!         relay.handle_read(now, done);
//!         let answered = std::iter::from_fn(|| relay.poll_output()).find_map(|o| match o {
//!             Output::Http { id: RequestId(1), response } => Some(response),
//!             _ => None,
//!         });
//!         if let Some(response) = answered {
//!             break response;
//!         }
//!     },
//! };
//! assert_eq!(answer.status, 401);
//! ```
//!
//! # Modules
//! In layers, each importing only the ones below it (no import circle):
//! * **The dispatcher**: [`Relay`] (`relay`) builds, for each input, the view its rules work
//!   with and routes the input to them, then commits and releases the outputs; `commit` is its
//!   commit pipeline (group commit, sealed batches, fail-stop), `budgets` its request budgets.
//!   Its fields are private: no rule reaches the pipeline, the released outputs or the budgets.
//! * **The rules**, one module per area of PROTOCOL.md, each a block of methods of `cx::Cx`:
//!   `accounts` (registration, user lookup, active conversations, storage estimate), `auth`
//!   (PoW, challenges, JWTs, tickets, the WebSocket connect), `contacts` (friend requests and
//!   the list), `messaging` (`msg`, `typing`, `retract`), `receipts`, `sync` (replay and
//!   delivery), `calls` (ICE config and `call_*` routing), `media` (uploads over a
//!   [`blob::BlobStore`]: [`Relay::with_blobs`]), [`push`] (subscriptions and
//!   [`Output::Push`]), `channels`, `vanity`, `orders` (lifecycle, expiry, status),
//!   [`payments`] (the signed webhook); `reads`, the reads through the caches they share, and
//!   `sweeps`, the timed sweeps of expired messages and tombstones.
//! * **The context**: `cx::Cx` lends a rule the relay's parts for one input (configuration,
//!   store reader, ids, keys, the state and the sub-machines beside it) and collects the
//!   input's outputs. Beside the state: `admission` the PoW challenges and sign-in limits,
//!   `sessions` the open connections and whose each one is, `throttles` what a socket may send
//!   per unit of time, `shell` what the relay exchanges with its shell ([`Output`],
//!   [`ConnId`] ...).
//! * **The working state**: `state` composes what it is made of and records each write in
//!   the input's mutation batch (its writes by area in its own submodules).
//! * **What the state is made of**, each a struct with its own methods: the caches that load
//!   lazily from the [`store`] (`directory`, `relations`, `queue` and `queue_index`,
//!   `tombstones`), `credential`, `commerce_state`, `uploads`, `push_targets`, `window` (a
//!   connection's delivery window), `expiry` (the expiry sweep's cursor); below them `rows`,
//!   the stored rows with their keys and codecs.
//! * **Values and rules every module uses**: [`config`], [`limits`], [`http`], [`token`],
//!   [`pow`], [`pricing`], [`destination`], [`stats`], `ratelimit`, `ids`, `lru`.
//! * **Beside the relay, not wired into it yet**: [`handoff`], the hand-off between shards
//!   (the shard map, the owner's outbox, the recipient shard's inbox), sans IO like the rest.
//!
//! ARCHITECTURE.md's code map says what each module owns and imports; the `architecture`
//! crate's tests hold it to the code.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod accounts;
mod admission;
mod auth;
pub mod blob;
mod budgets;
mod calls;
mod channels;
mod commerce_state;
mod commit;
pub mod config;
mod contacts;
mod credential;
mod cx;
pub mod destination;
mod directory;
mod expiry;
pub mod handoff;
pub mod http;
pub(crate) mod ids;
pub mod limits;
mod lru;
mod media;
mod messaging;
mod orders;
pub mod payments;
mod planted;
pub mod pow;
pub mod prefetch;
pub mod pricing;
pub mod push;
mod push_targets;
mod queue;
mod queue_index;
pub(crate) mod ratelimit;
mod reads;
mod receipts;
mod relations;
mod relay;
mod rows;
mod sessions;
mod shards;
mod shell;
mod state;
pub mod stats;
pub mod store;
mod sweeps;
mod sync;
mod throttles;
pub mod token;
mod tombstones;
mod uploads;
mod vanity;
mod window;

pub use blob::{BlobStore, FsBlobStore, MemoryBlobStore};
pub use calls::turn_credential;
pub use commit::{BatchFailed, BatchId, SealedBatch};
pub use config::TurnSecret;
pub use config::{Config, JwtSigningKey};
pub use http::{ApiError, HttpRequest, HttpResponse, Method, Resolution};
#[cfg(feature = "planted-bugs")]
pub use planted::PlantedBug;
pub use push_targets::PushTarget;
pub use relay::forwards::{shard_for_request, shard_for_upgrade};
pub use relay::gate::{MAX_HELD_UPGRADES, START_HOLD_MS};
pub use relay::{Relay, legacy_jwt_signing_key, storage_unavailable_response};
pub use shell::{Accepted, CloseReason, ConnId, Output, RequestId, WsConnect};
pub use stats::{PrefetchStats, RelayStats, WebhookStats};
