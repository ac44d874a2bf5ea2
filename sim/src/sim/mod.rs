//! The deterministic simulator: the relay server, N scripted async clients and the outside
//! world on turmoil, a scenario and a fault plan drawn from one seed, and oracles at the end.
//!
//! ```text
//!   let report = sim::sim::run(&RunConfig::new(42));
//!   println!("{}", report.plan);            // printed at the start of every CLI run
//!   assert!(report.violations.is_empty(), "{:?}", report.violations);
//!   println!("trace {}", report.trace_hash); // same seed, same hash
//! ```
//!
//! Modules: [`scenario`] (accounts, friendships, timed actions), [`faults`] (kinds, swarm
//! selection, plan), [`commerce`] (purchases, trades, quota buys, payments through the
//! stand-in, binds, the end-of-run audit), [`oracles`] (named invariants), [`trace`]
//! (app-level records and their hash); the runner steps turmoil, applies faults, heals and
//! checks.

pub mod commerce;
pub mod faults;
pub mod oracles;
pub mod scenario;
pub mod trace;

mod runner;

pub use runner::{
    AUDIT, FORGER_PORT, LIVENESS_BOUND_MS, PAY_PORT, RELAY_PORT, RunConfig, RunReport,
    SETUP_BOUND_MS, TRAFFIC_WINDOW_MS, run,
};
