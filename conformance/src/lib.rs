//! A black-box conformance suite for SecureChat relays.
//!
//! Every case is tied to a sentence of `SPEC.md` or `PROTOCOL.md` (its id, level, source and
//! statement) and speaks only raw HTTP and WebSocket JSON, so it checks any relay by base URL.
//! client-core is used for keys and crypto only, so the suite can act as any number of genuine
//! end-to-end-encrypting clients.
//!
//! ```text
//!   let transport = NetTransport::new(TokioConnector, endpoint).shared();
//!   let shared = Arc::new(Shared::new(hooks, seed, wait, quiet));
//!   let reports = runner::run(&select(cases::all(), &cfg), transport, shared, &cfg, &|_| {}).await;
//!   println!("{}", report::summary(&reports, &base_url));
//! ```
//!
//! - [`model`]: [`Case`](model::Case) and the profiles' levels; [`verdict`]: levels,
//!   profiles, hooks and failures, the words the cases and their context share.
//! - [`ctx`]: what a case works with (HTTP, WebSocket, accounts, contacts, hooks).
//! - [`cases`]: the registry, one module per area.
//! - [`runner`]: selection, bounded parallel execution, timeouts, expected failures.
//! - [`report`]: terminal, JSON, JUnit XML and HTML reports.
//! - [`cli`]: the runner's command line as a library: the `conformance` binary, and a relay
//!   team's own runner with its cases registered after the built-in ones ([`cases::with`]).
//! - [`process`]: the relay as a process the runner starts, kills and restarts
//!   (`--relay-cmd`, the DURABILITY cases).
//! - `embedded` (feature `embedded`, on by default): starting our own relay in-process
//!   through `relay-server`.

#![forbid(unsafe_code)]

pub mod cases;
pub mod cli;
pub mod ctx;
#[cfg(feature = "embedded")]
pub mod embedded;
pub mod model;
pub mod process;
pub mod report;
pub mod runner;
pub mod transcript;
pub mod transport;
pub mod verdict;
