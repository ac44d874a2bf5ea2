//! Shared by the loopback and turmoil suites: the run configuration and the verdict.

#![allow(dead_code, unreachable_pub)]

use std::path::PathBuf;
use std::time::Duration;

use conformance::model::Profile;
use conformance::report;
use conformance::runner::{self, CaseReport, RunConfig, Status};

/// Seed of the suite's accounts and ids.
pub const SEED: u64 = 7;

/// The expected failures committed with the suite.
pub fn config(jobs: usize) -> RunConfig {
    let text = include_str!("../expected-failures.txt");
    RunConfig {
        jobs,
        timeout: Duration::from_secs(30),
        expected: runner::parse_expected_failures(text).expect("expected-failures.txt parses"),
        ..RunConfig::default()
    }
}

/// Writes the reports next to the test binaries and asserts zero unexpected outcomes.
pub fn verdict(name: &str, reports: &[CaseReport], relay: &str, profile: Profile) {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("conformance");
    std::fs::create_dir_all(&dir).expect("report dir");
    std::fs::write(
        dir.join(format!("{name}.json")),
        report::json(reports, relay, profile),
    )
    .expect("json");
    std::fs::write(dir.join(format!("{name}.xml")), report::junit(reports)).expect("junit");
    std::fs::write(
        dir.join(format!("{name}.html")),
        report::html(reports, relay, profile),
    )
    .expect("html");
    println!("{}", report::summary(reports, relay, profile));
    println!("reports in {}", dir.display());
    let bad: Vec<String> = reports
        .iter()
        .filter(|r| {
            matches!(
                r.status,
                Status::Fail | Status::UnexpectedPass | Status::Error
            )
        })
        .map(|r| {
            format!(
                "{} {}: {}",
                r.id,
                r.status.label(),
                r.reason.as_deref().unwrap_or("")
            )
        })
        .collect();
    assert!(bad.is_empty(), "unexpected outcomes:\n{}", bad.join("\n"));
}
