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

pub mod bounds;
pub mod failover;
pub mod faults;
mod hostile;
pub mod jepsen;
pub mod oracles;
#[cfg(feature = "planted-bugs")]
pub mod planted;
pub mod pushworld;
pub mod scenario;
pub mod shrink;
pub mod store;
pub mod trace;
pub mod violation;

mod apps;
mod market;
mod runner;
mod seeds;
mod time;
mod world;

pub use runner::{Replay, RunConfig, RunReport, RunStats, run};
pub use time::SkewClock;
