//! The simulator as a library for `cargo test`: a [`World`] from a seed, its relays, its
//! faults by name (drawn from the seed) or at chosen moments, one deterministic [`run`], and
//! the main sweep's oracles as assertions on the [`Run`] it returns (plus your own). Same seed,
//! same trace hash. A failing check panics with everything needed to look at the run again:
//! its scenario, fault plan and violations, the `simulate` command that replays it, and (with
//! `SIM_REPORT_DIR` set) the path of the HTML run report it wrote there.
//!
//! ```no_run
//! use sim::harness::{Relays, World};
//! use sim::faults::FaultAction;
//! use sim::oracles::Oracle;
//!
//! let run = World::from_seed(7)
//!     .relays(Relays::Sqlite)
//!     .faults("partition,hold")
//!     // 20 s into the traffic, the relay powers off; 3 s later it comes back.
//!     .fault_at(20_000, FaultAction::Crash { host: "relay".into() })
//!     .fault_at(23_000, FaultAction::Restart { host: "relay".into() })
//!     .run();
//! run.check_all();
//! run.check(&[Oracle::DeliveredExactlyOnce]);
//! run.check_that("some message was acknowledged", |r| r.stats.acked > 0);
//! println!("trace {}", run.trace_hash());
//! ```
//!
//! [`run`]: World::run

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::faults::{
    FaultAction, FaultEvent, FaultKind, FaultSelection, SWARM_WEIGHT_SCALE, StoreChoice, StoreKind,
};
use crate::oracles::Oracle;
use crate::report::{self, Timeline};
use crate::runner::{RunConfig, RunReport, run};
use crate::scenario::Scale;

/// The environment variable naming a directory where a failing check writes its run's HTML
/// report (the page `simulate --report DIR` writes for a seed).
pub const REPORT_DIR_VAR: &str = "SIM_REPORT_DIR";

/// The relays of a world.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relays {
    /// Drawn from the seed, as in the main sweep (SQLite in about a third of the runs).
    Drawn,
    /// One relay on `relay_core`'s in-memory store (its committed state survives a power-off).
    Memory,
    /// One relay on SQLite (a temporary file, reopened after every power-off).
    Sqlite,
    /// An active relay and a standby sharing one SQLite store (a lease and a fencing epoch)
    /// behind a load balancer: the `failover` fault kind, which freezes or powers off the
    /// active one so that the standby takes over.
    FailoverPair,
}

/// A simulated world, described before it runs: the seed, the relays, the clients, the
/// faults. Every random choice (scenario, fault plan, network, every RNG) derives from the
/// seed, so the same world gives the same run: the same trace, the same hash.
#[derive(Debug, Clone)]
pub struct World {
    config: RunConfig,
    relays: Relays,
    moments: Vec<FaultEvent>,
}

impl World {
    /// The main sweep's world of `seed` (small scale, 4 clients, a swarm of faults drawn
    /// from the seed, the store drawn from the seed, the seed's class).
    pub fn from_seed(seed: u64) -> Self {
        Self {
            config: RunConfig::new(seed),
            relays: Relays::Drawn,
            moments: Vec::new(),
        }
    }

    /// The relays (by default drawn from the seed).
    #[must_use]
    pub fn relays(mut self, relays: Relays) -> Self {
        self.relays = relays;
        self
    }

    /// The faults the seed draws a plan from, by name, as `simulate --faults` takes them:
    /// `none`, `swarm`, `all`, or kinds such as `partition,hold,clock-skew,relay-crash,
    /// commit-fail` ([`FaultKind`]). Panics on an unknown name.
    #[must_use]
    pub fn faults(mut self, names: &str) -> Self {
        self.config.faults = names
            .parse::<FaultSelection>()
            .unwrap_or_else(|e| panic!("faults {names:?}: {e}"));
        self
    }

    /// A fault at a chosen moment, `at_ms` after traffic starts, on top of the drawn plan: a
    /// partition or hold between hosts (`relay`, `c0`, `c1`, …), a clock jump, a host powered
    /// off and restarted, failing commits or reads, a store that is down, a slow commit.
    #[must_use]
    pub fn fault_at(mut self, at_ms: u64, action: FaultAction) -> Self {
        self.moments.push(FaultEvent { at_ms, action });
        self
    }

    /// The world's size (clients drawn from the scale).
    #[must_use]
    pub fn scale(mut self, scale: Scale) -> Self {
        self.config.scale = scale;
        self.config.clients = None;
        self
    }

    /// Exactly `n` client accounts.
    #[must_use]
    pub fn clients(mut self, n: usize) -> Self {
        self.config.clients = Some(n);
        self
    }

    /// The run configuration the world runs (what `sim::run` takes).
    pub fn config(&self) -> RunConfig {
        let mut config = self.config.clone();
        config.store = match self.relays {
            Relays::Drawn => StoreChoice::Drawn,
            Relays::Memory => StoreChoice::Fixed(StoreKind::Memory),
            Relays::Sqlite | Relays::FailoverPair => StoreChoice::Fixed(StoreKind::Sqlite),
        };
        if self.relays == Relays::FailoverPair {
            // The pair is part of every plan: listed with named kinds, or always drawn in a swarm.
            match &mut config.faults {
                FaultSelection::Only(kinds) => {
                    kinds.insert(FaultKind::Failover);
                }
                FaultSelection::Weighted(weights) => {
                    weights.insert(FaultKind::Failover, SWARM_WEIGHT_SCALE);
                }
                FaultSelection::Swarm => {
                    config.faults = FaultSelection::Weighted(
                        [(FaultKind::Failover, SWARM_WEIGHT_SCALE)].into(),
                    );
                }
            }
        }
        if !self.moments.is_empty() {
            let mut replay = config.draw();
            replay.plan.events.extend(self.moments.iter().cloned());
            replay.plan.events.sort_by_key(|e| e.at_ms);
            config.replay = Some(replay);
        }
        config
    }

    /// Runs the world to its end (setup, traffic, faults, healing) and checks every oracle;
    /// the [`Run`] holds the verdicts.
    pub fn run(self) -> Run {
        let config = self.config();
        let report = run(&config);
        Run {
            report,
            command: self.replay_command(&config),
            bind_vanity: config.bind_vanity,
        }
    }

    /// The `simulate` command that replays this world (a replay file for one with chosen
    /// moments: it is written when a check fails).
    fn replay_command(&self, config: &RunConfig) -> String {
        let mut command = String::from("cargo run --release -p sim --bin simulate --");
        if !self.moments.is_empty() {
            command.push_str(" --replay {replay}");
        } else {
            let _ = write!(
                command,
                " --seed {} --scale {} --faults {} --store {} --class {}",
                config.seed, config.scale, config.faults, config.store, config.class
            );
            if let Some(n) = config.clients {
                let _ = write!(command, " --clients {n}");
            }
        }
        command.push_str(" --trace");
        command
    }
}

/// A finished run: its report and the checks on it.
#[derive(Debug, Clone)]
pub struct Run {
    report: RunReport,
    command: String,
    bind_vanity: bool,
}

impl Run {
    /// The run's report (scenario, plan, trace, violations, counts).
    pub fn report(&self) -> &RunReport {
        &self.report
    }

    /// SHA-256 of the run's trace: the same world gives the same hash.
    pub fn trace_hash(&self) -> &str {
        &self.report.trace_hash
    }

    /// The command that replays the run (with `{replay}` for a world with chosen moments:
    /// the replay file a failing check writes).
    pub fn replay_command(&self) -> &str {
        &self.command
    }

    /// Every oracle of the main sweep holds.
    pub fn check_all(&self) -> &Self {
        if !self.report.violations.is_empty() {
            self.fail("every oracle");
        }
        self
    }

    /// These oracles hold (the others are not judged here).
    pub fn check(&self, oracles: &[Oracle]) -> &Self {
        if self
            .report
            .violations
            .iter()
            .any(|v| oracles.contains(&v.oracle))
        {
            let names: Vec<String> = oracles.iter().map(ToString::to_string).collect();
            self.fail(&names.join(", "));
        }
        self
    }

    /// A check of your own on the report: `what` names it in the failure.
    pub fn check_that(&self, what: &str, holds: impl FnOnce(&RunReport) -> bool) -> &Self {
        if !holds(&self.report) {
            self.fail(what);
        }
        self
    }

    /// Writes the run's HTML report (timeline, fault plan, latency plots, violations, the
    /// replay command) into `dir`; returns its path.
    pub fn write_report(&self, dir: &Path) -> std::io::Result<PathBuf> {
        let page = report::seed_page(&Timeline::from_run(&self.report, &self.command))
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        std::fs::create_dir_all(dir)?;
        let path = dir.join(report::seed_file(self.report.seed));
        std::fs::write(&path, page)?;
        Ok(path)
    }

    /// Panics with what failed, the run, the replay command, and the report written.
    fn fail(&self, what: &str) -> ! {
        let r = &self.report;
        let mut text = format!(
            "simulation check failed: {what}\nseed {}\n{}\n{}violations:\n",
            r.seed, r.scenario, r.plan
        );
        for v in &r.violations {
            let _ = writeln!(text, "  {v}");
        }
        let command = if self.command.contains("{replay}") {
            let path = std::env::temp_dir().join(format!("sim-seed-{}-replay.json", r.seed));
            let written = serde_json::to_string_pretty(&r.replay(self.bind_vanity))
                .map_err(std::io::Error::other)
                .and_then(|json| std::fs::write(&path, json));
            match written {
                Ok(()) => self
                    .command
                    .replace("{replay}", &path.display().to_string()),
                Err(e) => format!("{} (the replay file was not written: {e})", self.command),
            }
        } else {
            self.command.clone()
        };
        let _ = writeln!(text, "replay: {command}");
        match std::env::var_os(REPORT_DIR_VAR) {
            Some(dir) => match self.write_report(Path::new(&dir)) {
                Ok(path) => {
                    let _ = writeln!(text, "report: {}", path.display());
                }
                Err(e) => {
                    let _ = writeln!(text, "report not written: {e}");
                }
            },
            None => {
                let _ = writeln!(text, "(set {REPORT_DIR_VAR}=DIR for the HTML run report)");
            }
        }
        panic!("{text}")
    }
}
