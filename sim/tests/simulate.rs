//! The simulator in CI: a fixed handful of seeds that together exercise every fault kind, and
//! the determinism check (one seed twice, same trace).

use std::collections::BTreeSet;

use sim::sim::faults::{FaultKind, FaultSelection};
use sim::sim::{RunConfig, RunReport, run};

/// `(seed, faults)`: explicit selections cover every kind; two swarm seeds add mixes.
const SEEDS: [(u64, &str); 8] = [
    (1, "none"),
    (2, "all"),
    (3, "partition,oneway"),
    (4, "hold,latency"),
    (5, "relay-crash,client-crash"),
    (6, "client-crash,partition"),
    (7, "swarm"),
    (8, "swarm"),
];

fn config(seed: u64, faults: &str) -> RunConfig {
    RunConfig {
        faults: faults.parse::<FaultSelection>().expect("valid fault list"),
        ..RunConfig::new(seed)
    }
}

fn describe(report: &RunReport) -> String {
    let violations: Vec<String> = report.violations.iter().map(ToString::to_string).collect();
    format!(
        "seed {}\n{}\n{}violations:\n{}\nreplay: cargo run --release -p sim --bin simulate -- --seed {} --trace",
        report.seed,
        report.scenario,
        report.plan,
        violations.join("\n"),
        report.seed
    )
}

#[test]
fn fixed_seeds_pass_every_oracle_and_cover_every_fault_kind() {
    let mut covered = BTreeSet::new();
    let mut failures = Vec::new();
    for (seed, faults) in SEEDS {
        let report = run(&config(seed, faults));
        covered.extend(report.plan.kinds.iter().copied());
        // Every enabled kind produced at least one event.
        assert!(
            report.plan.kinds.is_empty() || !report.plan.events.is_empty(),
            "{}",
            describe(&report)
        );
        if !report.violations.is_empty() {
            failures.push(describe(&report));
        }
    }
    let all: BTreeSet<FaultKind> = FaultKind::ALL.into_iter().collect();
    assert_eq!(
        covered, all,
        "the fixed seeds must exercise every fault kind"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Runs one seed in a fresh `simulate` process (see the CLI's `child_run` for why a process per
/// seed) and returns its trace hash.
fn hash_in_fresh_process(seed: u64, faults: &str) -> String {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_simulate"))
        .args(["--seed", &seed.to_string(), "--faults", faults, "--machine"])
        .output()
        .expect("simulate runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("HASH\t"))
        .map(str::to_owned)
        .unwrap_or_else(|| panic!("no hash in {stdout}"))
}

#[test]
fn same_seed_same_trace() {
    let first = hash_in_fresh_process(2, "all");
    let second = hash_in_fresh_process(2, "all");
    assert_eq!(first, second, "seed 2 must replay bit for bit");
    assert_ne!(first, hash_in_fresh_process(3, "all"), "the seed matters");
}

#[test]
fn fault_selection_parses() {
    assert_eq!("swarm".parse::<FaultSelection>(), Ok(FaultSelection::Swarm));
    let FaultSelection::Only(all) = "all".parse::<FaultSelection>().expect("all") else {
        panic!("all is a list");
    };
    assert_eq!(all.len(), FaultKind::ALL.len());
    assert!("partition,bogus".parse::<FaultSelection>().is_err());
}
