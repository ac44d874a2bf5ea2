//! The team's cases with the built-in ones: through the library (the registry, the runner and
//! its reports) and through the team's binary (the runner's command line), against our relay
//! in-process on loopback; and the README's example is this crate's source.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use conformance::ctx::Shared;
use conformance::model::{Level, Profile};
use conformance::runner::{self, RunConfig, Status};
use conformance::{cases, embedded, report, transport};
use seam::net::Endpoint;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_team_cases_run_with_the_built_in_ones_and_reach_the_reports() {
    let registry = cases::with(&[conformance_example::CASES]).expect("registered");
    let cfg = RunConfig {
        only: vec!["WS-001".to_owned(), "TEAM".to_owned()],
        timeout: Duration::from_secs(30),
        ..RunConfig::default()
    };
    let selected = runner::select(&registry, &cfg);
    let ids: Vec<&str> = selected.iter().map(|c| c.id).collect();
    assert_eq!(ids, ["WS-001", "TEAM-001", "TEAM-002"]);

    let relay = embedded::start_loopback().await.expect("embedded relay");
    let endpoint = Endpoint::parse(&relay.base_url).expect("endpoint");
    let shared = Arc::new(Shared::new(
        embedded::hooks(),
        7,
        Duration::from_secs(5),
        Duration::from_millis(300),
    ));
    let transports = transport::loopback_factory(endpoint);
    let reports = runner::run(&selected, transports, shared, &cfg, &|_| {}).await;
    let url = relay.base_url.clone();
    relay.stop().await;

    for r in &reports {
        assert_eq!(r.status, Status::Pass, "{} {:?}", r.id, r.reason);
    }
    let team_002 = reports
        .iter()
        .find(|r| r.id == "TEAM-002")
        .expect("TEAM-002");
    assert_eq!(team_002.level, Level::Must);
    assert_eq!(team_002.source, "our relay's notes §Messaging");
    let json = report::json(&reports, &url, Profile::Documents);
    assert!(json.contains("TEAM-001") && json.contains("our relay's notes §Health"));
    assert!(report::junit(&reports).contains("TEAM-002"));
    assert!(report::html(&reports, &url, Profile::Documents).contains("TEAM-002"));
}

#[test]
fn the_team_runner_lists_and_runs_its_cases_with_the_built_in_ones() {
    let bin = env!("CARGO_BIN_EXE_team-conformance");
    let list = Command::new(bin)
        .args(["--list", "--only", "TEAM,WS-001"])
        .output()
        .unwrap();
    assert!(
        list.status.success(),
        "{}",
        String::from_utf8_lossy(&list.stderr)
    );
    let listed = String::from_utf8_lossy(&list.stdout);
    for id in ["WS-001", "TEAM-001", "TEAM-002"] {
        assert!(listed.contains(id), "{id} not listed:\n{listed}");
    }

    let dir = std::env::temp_dir().join(format!("team-conformance-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("report.json");
    let run = Command::new(bin)
        .args(["--only", "TEAM,WS-001", "--quiet", "--seed", "7", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let report = std::fs::read_to_string(&json).unwrap();
    assert!(report.contains("TEAM-002"), "{report}");
    std::fs::remove_dir_all(&dir).ok();
}

/// README "Add your own conformance case" shows this crate's `src/lib.rs` whole, so the
/// example it gives is the one CI compiles and runs.
#[test]
fn the_readme_example_is_this_crates_source() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).unwrap();
    let section = readme
        .split("## Add your own conformance case")
        .nth(1)
        .expect("the README section");
    for file in ["src/lib.rs", "src/main.rs"] {
        let source =
            std::fs::read_to_string(format!("{}/{file}", env!("CARGO_MANIFEST_DIR"))).unwrap();
        assert!(
            section.contains(&format!("```rust\n{source}```")),
            "README's example differs from conformance-example/{file}"
        );
    }
}
