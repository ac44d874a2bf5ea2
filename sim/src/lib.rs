//! The deterministic simulator: the relay server (`relay-server`), N scripted async clients
//! (`client`), raw (hostile) clients and the outside world (`standins`) on turmoil, a scenario
//! and a fault plan drawn from one seed (or read from a replay file), and oracles at the end.
//! Beside it, [`jepsen`]: the same clients on real sockets against any relay process.
//!
//! ```text
//!   let report = sim::run(&RunConfig::new(42));
//!   println!("{}", report.plan);            // printed at the start of every CLI run
//!   assert!(report.violations.is_empty(), "{:?}", report.violations);
//!   println!("trace {}", report.trace_hash); // same seed, same hash
//! ```
//!
//! Modules: [`scenario`] (scales, accounts, friendships, timed actions), [`faults`] (kinds,
//! swarm selection, plan), [`store`] (the relay's store with storage faults and its commit
//! history), [`hostile`] (raw clients: floods, dishonest requests, slow consumers, storms),
//! [`commerce`] (purchases, trades, quota buys, payments through the stand-in, binds, the
//! end-of-run audit), [`pushworld`] (the push services the relay delivers to for real),
//! [`failover`] (active/standby relays on a shared store with a lease and a fencing epoch,
//! behind a load balancer), [`oracles`] (named invariants), [`trace`] (app-level records and their
//! hash), [`shrink`] (delta debugging of a failing run), `planted` (only with the test-only
//! feature `planted-bugs`: known bugs to plant, for the detection test); the runner steps
//! turmoil, applies faults, heals and checks.

pub mod commerce;
pub mod failover;
pub mod faults;
pub mod hostile;
pub mod jepsen;
pub mod oracles;
#[cfg(feature = "planted-bugs")]
pub mod planted;
pub mod pushworld;
pub mod scenario;
pub mod shrink;
pub mod store;
pub mod trace;

mod runner;

pub use runner::{
    AUDIT, DELIVERY_BOUND_MS, FORGER_PORT, LIVENESS_BOUND_MS, PAY_PORT, PROBE_AFTER_HEAL_MS,
    PROBE_BOUND_MS, PUSH_PORT, RELAY_PORT, Replay, RunConfig, RunReport, RunStats, SETUP_BOUND_MS,
    SYNC_BOUND_MS, SkewClock, TRAFFIC_WINDOW_MS, run,
};
