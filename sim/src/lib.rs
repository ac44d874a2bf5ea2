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
//! In a test of your own, [`harness`] is the same run as a world you describe and check
//! (README "Write your own simulation test"; examples in `sim/examples/`):
//!
//! ```text
//!   World::from_seed(9).relays(Relays::Memory).faults("none").run().check_all();
//! ```
//!
//! # Modules
//!
//! Listed from the leaves up; a module imports only modules listed above it (the import
//! graph has no cycle; every constant two modules share lives in [`bounds`]).
//!
//! | module | owns | may import |
//! |---|---|---|
//! | [`bounds`] | hosts, ports, the run's timeline, the oracles' bounds, the network's limits | — |
//! | `time` | simulated ms, sleeps, the clients' [`SkewClock`] | — |
//! | `seeds` | the derivation of every random stream from the seed, one tag per stream | — |
//! | [`trace`] | the app-level records of a run, their lines and hash | — |
//! | [`violation`] | [`Violation`](violation::Violation): a broken invariant named by its oracle | — |
//! | `planted` | (feature `planted-bugs`) known bugs to plant, for the detection test | — |
//! | [`wiretap`] | what the clients' connections carried: requests and refusals by route, frames as received | — |
//! | [`class`] | seed classes: the relay's configuration of each, their drills, the `days` class's clock jumps | `seeds` |
//! | [`scenario`] | the scenario drawn from a seed: accounts, pairs, strangers, timed actions | `bounds`, `class` |
//! | [`faults`] | fault kinds, swarm selection, the fault plan and its draw | `bounds`, `scenario` |
//! | [`store`] | the relay's store with storage faults, the failover lease, the cluster's membership tables and shard fences, the commit history | `faults`, `seeds`, `time` |
//! | [`transit`] | what happens to each crossing between a sharded relay's cores (lost, repeated, delayed) while a fault of the plan lasts, drawn per crossing, and the counts | `seeds`, `time` |
//! | [`pushworld`] | the push stand-ins the relay delivers to for real | `bounds`, `seeds` |
//! | [`failover`] | active/standby relays: [`SimLeadership`](failover::SimLeadership), the load balancer | `bounds`, `store`, `time` |
//! | [`cluster`] | cluster nodes: [`SimMembership`](cluster::SimMembership) over the store's membership tables, the balancer's pick | `bounds`, `store`, `time` |
//! | `world` | the state the hosts share (`World`, `HostCtx`), the commerce ledger, what the drills did | `bounds`, `class`, `faults`, `pushworld`, `scenario`, `store`, `time`, `trace`, `transit`, `violation` |
//! | `market` | the scripted purchases, listings, buys, payments, binds and the commerce audit | `scenario`, `time`, `world` |
//! | `hostile` | raw clients: floods, dishonest requests, slow consumers, storms | `bounds`, `faults`, `time`, `violation`, `world` |
//! | [`drills`] | the drill host: raw clients that fill every limit, outlive expiries, build heavy state across restarts, call routes as strangers, meet failing store reads | `bounds`, `class`, `hostile`, `scenario`, `seeds`, `time`, `violation`, `world` |
//! | `apps` | the client apps: setup, traffic, probes, second devices, the auditor's app | `bounds`, `market`, `pushworld`, `scenario`, `seeds`, `time`, `trace`, `world` |
//! | [`oracles`] | the invariants checked at the end, one module per family; [`oracles::observed`], the client-visible history | `bounds`, `class`, `faults`, `pushworld`, `scenario`, `store`, `trace`, `violation`, `world` |
//! | `runner` | one run: [`RunConfig`], [`run`], the hosts, the step loop, the log scan | everything above |
//! | [`shrink`] | delta debugging of a failing run | `faults`, `planted`, `runner`, `scenario`, `violation` |
//! | [`jepsen`] | Jepsen mode: real sockets, a relay process, the same client-visible oracles | `oracles`, `scenario`, `trace`, `violation`, `wiretap` |
//! | [`coverage`] | code probes over a sweep: hits per probe, the catalogue, probes never hit | `probes` |
//! | [`report`] | HTML run reports: a timeline and latency plots per run, a summary per sweep | `faults`, `jepsen`, `runner`, `trace` |
//! | [`harness`] | the simulator for `cargo test`: a [`World`](harness::World) from a seed, its relays, faults by name or at chosen moments, the oracles as assertions on the [`Run`](harness::Run), the replay command and run report of a failing check | `faults`, `oracles`, `report`, `runner`, `scenario` |
//! | [`steps`] | a world of named users whose steps you write as async Rust against the client API, faults at chosen moments, its trace and hash, the app-level oracles that hold for any steps | `bounds`, `seeds`, `time`, `trace`, `violation` |

pub mod bounds;
pub mod class;
pub mod cluster;
pub mod coverage;
pub mod drills;
pub mod failover;
pub mod faults;
pub mod harness;
pub mod jepsen;
pub mod oracles;
#[cfg(feature = "planted-bugs")]
pub mod planted;
pub mod pushworld;
pub mod report;
pub mod scenario;
pub mod shrink;
pub mod steps;
pub mod store;
pub mod trace;
pub mod transit;
pub mod violation;
pub mod wiretap;

mod apps;
mod hostile;
mod market;
mod runner;
mod seeds;
mod time;
mod world;

pub use runner::{Replay, RunConfig, RunReport, RunStats, ShardsChoice, run};
pub use time::SkewClock;

/// Whether tokio's random choices (which ready branch an unbiased `select!` takes, in which
/// order a `watch` change wakes its waiters) are seeded by the run's seed: only when tokio is
/// built with `--cfg tokio_unstable`, which the workspace's `.cargo/config.toml` sets (a
/// `RUSTFLAGS` in the environment replaces it). Without it, a run that reaches such a choice
/// can leave its seed: the same seed then gives another trace.
#[must_use]
pub fn tokio_seeded() -> bool {
    cfg!(tokio_unstable)
}
