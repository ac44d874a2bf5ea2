//! The suite in a stranger's hands: against `independent-relay/relay.py`, a relay written from
//! SPEC.md and PROTOCOL.md alone (Python's standard library) that takes every choice the
//! documents leave open differently from ours (error codes in `code`, its own limits, 1 h
//! opaque tokens, no channel versions, `PUT`-only accept, its own id formats), started by the
//! runner as `--relay-cmd` would (real sockets on 127.0.0.1):
//!
//! * the documents profile: no MUST case fails and none errors, the DURABILITY cases included;
//! * its planted bugs, one at a time: `--plant no-dedup` fails the dedup cases (MSG-004,
//!   MSG-013); `--plant ack-before-durable` (acks before the commit, which a background task
//!   does every 2 s) fails the DURABILITY cases, which kill -9 it right after an ack;
//! * the runner's relay process: a start or a restart that exits before it listens is tried
//!   again, and two runs against one relay both pass;
//! * the reference profile: a refusal in the relay's own words fails as wording, never as the
//!   refused frame's effect.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use conformance::ctx::{ClockControl, Hooks, Shared};
use conformance::model::{Level, Profile};
use conformance::process::RelayProcess;
use conformance::runner::{self, CaseReport, RunConfig, Status};
use conformance::{cases, transport};
use seam::net::Endpoint;

/// The webhook secret the runner and the independent relay share.
const SECRET: &str = "independent-relay-secret";

fn relay_py() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("independent-relay/relay.py")
}

/// Starts the independent relay (`plant`: a planted bug), runs `only` (all when empty).
async fn run(plant: Option<&str>, only: &[&str]) -> (Vec<CaseReport>, String) {
    let flags = plant
        .map(|bug| format!("--plant {bug}"))
        .unwrap_or_default();
    run_with(&flags, only).await
}

/// The independent relay as `--relay-cmd` starts it (test clock, the shared webhook secret),
/// with `flags`, its data under `dir`.
async fn start_independent(flags: &str, dir: &std::path::Path) -> RelayProcess {
    let cmd = format!(
        "python3 {} --listen {{listen}} --data {{data}} --test-clock --payment-secret {{payment_secret}} {flags}",
        relay_py().display()
    );
    RelayProcess::start(&cmd, Some(SECRET.to_owned()), dir)
        .await
        .unwrap_or_else(|e| panic!("the independent relay (python3 on PATH) did not start: {e}"))
}

/// Starts the independent relay with `flags`, runs `only` (all when empty) under the
/// documents profile.
async fn run_with(flags: &str, only: &[&str]) -> (Vec<CaseReport>, String) {
    run_under(Profile::Documents, flags, only).await
}

/// Starts the independent relay with `flags`, runs `only` (all when empty) under `profile`.
async fn run_under(profile: Profile, flags: &str, only: &[&str]) -> (Vec<CaseReport>, String) {
    let dir = tempfile::tempdir().unwrap();
    let process = start_independent(flags, dir.path()).await;
    let url = process.base_url();
    let hooks = Hooks {
        payment_secret: Some(SECRET.as_bytes().to_vec()),
        clock: Some(ClockControl::Http),
        process: Some(Arc::new(tokio::sync::Mutex::new(process))),
        push_probe: None,
    };
    let shared = Arc::new(
        Shared::new(
            hooks,
            common::SEED,
            Duration::from_secs(5),
            Duration::from_millis(300),
        )
        .with_profile(profile),
    );
    let cfg = RunConfig {
        jobs: 8,
        only: only.iter().map(|s| (*s).to_owned()).collect(),
        // Registration limit: the relay allows more than the documented 10 per address, so
        // the case would only use up time.
        skip: vec!["REG-012".to_owned()],
        ..RunConfig::default()
    };
    let selected = runner::select(cases::all(), &cfg);
    let transports = transport::loopback_factory(Endpoint::parse(&url).unwrap());
    let reports = runner::run(&selected, transports, shared, &cfg, &|_| {}).await;
    (reports, url)
}

fn failed(reports: &[CaseReport]) -> Vec<&'static str> {
    reports
        .iter()
        .filter(|r| r.status == Status::Fail)
        .map(|r| r.id)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_independent_relay_passes_every_must_case_of_the_documents() {
    let (reports, url) = run(None, &[]).await;
    passes_the_documents(&reports, &url);
}

/// The documents give no error body shape and allow the GOAWAY reason at top level alone: a
/// relay whose errors are words only (no code, HTTP bodies as text) and whose GOAWAY has no
/// `payload` passes them all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_with_words_only_errors_and_a_top_level_goaway_passes_the_documents() {
    let (reports, url) = run_with("--text-errors --goaway-top-level", &[]).await;
    passes_the_documents(&reports, &url);
}

/// PROTOCOL.md defines no error frame: a relay that answers a refused WebSocket frame with
/// nothing at all (no error frame, no ack) passes the documents as one that answers with an
/// error frame does; so do its rate limit at PROTOCOL §1.10's 120 messages a minute and its
/// size limits (given to the runner), refused by silence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_that_refuses_by_silence_passes_the_documents() {
    let (reports, url) = run_with("--silent-refusals --text-errors --goaway-top-level", &[]).await;
    passes_the_documents(&reports, &url);
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("limits.json");
    let sizes = "--max-frame-bytes 65536 --max-payload-bytes 49152";
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_conformance"))
        .args([
            "--relay-cmd",
            &format!(
                "python3 {} --listen {{listen}} --data {{data}} --silent-refusals --msgs-per-min 120 {sizes}",
                relay_py().display()
            ),
            "--only",
            "MSG-019,MSG-014,WS-012",
            "--quiet",
            "--json",
        ])
        .arg(&json)
        .args(sizes.split(' '))
        .output()
        .unwrap();
    let said = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{said}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let passed: Vec<&str> = report["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "pass")
        .filter_map(|c| c["id"].as_str())
        .collect();
    assert_eq!(passed, ["WS-012", "MSG-014", "MSG-019"], "{said}");
}

/// No MUST case failed or errored, every DURABILITY case passed, and most cases ran.
fn passes_the_documents(reports: &[CaseReport], url: &str) {
    println!(
        "{}",
        conformance::report::summary(reports, url, Profile::Documents)
    );
    let bad: Vec<String> = reports
        .iter()
        .filter(|r| {
            r.status == Status::Error || (r.status == Status::Fail && r.level == Level::Must)
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
    assert!(
        bad.is_empty(),
        "MUST failures or errors:\n{}",
        bad.join("\n")
    );
    assert!(!runner::must_failed(reports), "the run would exit non-zero");
    let durability: Vec<_> = reports
        .iter()
        .filter(|r| r.area == "DURABILITY")
        .map(|r| r.status)
        .collect();
    assert!(
        durability.len() >= 7 && durability.iter().all(|s| *s == Status::Pass),
        "DURABILITY: {durability:?}"
    );
    let pass = reports.iter().filter(|r| r.status == Status::Pass).count();
    assert!(pass >= 190, "{pass} cases passed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_catches_the_planted_missing_dedup() {
    let (reports, _) = run(Some("no-dedup"), &["MSG-004", "MSG-013", "MSG-001"]).await;
    assert_eq!(failed(&reports), ["MSG-004", "MSG-013"], "{reports:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_with_relay_cmd_catches_the_planted_ack_before_the_commit() {
    let (reports, _) = run(
        Some("ack-before-durable"),
        &["DURABILITY-001", "DURABILITY-002", "DURABILITY-007"],
    )
    .await;
    let f = failed(&reports);
    assert!(f.contains(&"DURABILITY-001"), "{reports:#?}");
    let reason = reports[0].reason.as_deref().unwrap_or("");
    assert!(
        reason.contains("killed (kill -9) and restarted"),
        "the reason names the restart: {reason}"
    );
}

/// The runner as a team runs it against its long-lived relay: the whole suite twice (the
/// payment webhook and the test clock included), without `--seed`. Each run draws its own
/// accounts and finds the relay as the first left it (aliases bought and bound, channels
/// listed, the clock moved), so the second passes too; the same `--seed` twice registers the
/// same accounts again, which the relay rightly answers with its 409 recovery body (so the
/// check can fail).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_run_against_the_same_relay_passes() {
    let dir = tempfile::tempdir().unwrap();
    let process = start_independent("", dir.path()).await;
    let url = process.base_url();
    let runner = |only: &str, seed: Option<&str>| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_conformance"));
        command.args([
            "--relay",
            &url,
            "--payment-secret",
            SECRET,
            "--clock-hook",
            "--skip",
            "REG-012",
            "--jobs",
            "8",
            "--quiet",
        ]);
        if !only.is_empty() {
            command.args(["--only", only]);
        }
        if let Some(seed) = seed {
            command.args(["--seed", seed]);
        }
        let out = command.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.code(), format!("{stdout}\n{stderr}"))
    };
    for run in 1..=2 {
        let (code, out) = runner("", None);
        assert_eq!(code, Some(0), "run {run} without --seed:\n{out}");
        assert!(out.contains("accounts seed "), "{out}");
    }
    let few = "REG-003,REG-008,MSG-001";
    assert_eq!(runner(few, Some("11")).0, Some(0));
    let (code, out) = runner(few, Some("11"));
    assert_eq!(code, Some(1), "the same seed twice:\n{out}");
    drop(process);
}

/// A relay command that exits before it listens (as a relay whose port another process took
/// between the runner's pick and its bind does) is started again on another port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_that_exits_before_it_listens_is_started_again_on_another_port() {
    let dir = tempfile::tempdir().unwrap();
    let cmd = format!(
        "test -e {{data}}/tried || {{ touch {{data}}/tried; echo 'address in use: {{listen}}'; exit 98; }}; \
         exec python3 {} --listen {{listen}} --data {{data}}",
        relay_py().display()
    );
    let process = RelayProcess::start(&cmd, Some(SECRET.to_owned()), dir.path())
        .await
        .unwrap_or_else(|e| panic!("not started again: {e}"));
    let log = process.log_tail();
    let first = log
        .lines()
        .find_map(|l| l.trim().strip_prefix("address in use: "))
        .unwrap_or_else(|| panic!("the first attempt's line is missing:\n{log}"))
        .to_owned();
    assert_ne!(
        format!("http://{first}"),
        process.base_url(),
        "started again on the same port"
    );
    let status = status_of_get(&process.base_url()).await;
    assert!(status.is_some(), "the relay does not answer");
}

/// A relay whose restart after a kill exits before it listens (as one does when its port was
/// taken while it was down) is started again on the same port, which the cases' clients know.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_that_exits_before_it_listens_is_tried_again_on_the_same_port() {
    let dir = tempfile::tempdir().unwrap();
    let cmd = format!(
        "if test -e {{data}}/started && ! test -e {{data}}/refused; then \
           touch {{data}}/refused; echo 'address in use: {{listen}}'; exit 98; fi; \
         touch {{data}}/started; exec python3 {} --listen {{listen}} --data {{data}}",
        relay_py().display()
    );
    let mut process = RelayProcess::start(&cmd, Some(SECRET.to_owned()), dir.path())
        .await
        .unwrap_or_else(|e| panic!("did not start: {e}"));
    let before = process.base_url();
    process
        .kill_and_restart()
        .await
        .unwrap_or_else(|e| panic!("not restarted: {e}"));
    assert_eq!(process.base_url(), before, "restarted on another port");
    let log = process.log_tail();
    assert!(
        log.contains(&format!(
            "address in use: {}",
            before.trim_start_matches("http://")
        )),
        "the refused restart is not in the log:\n{log}"
    );
    assert!(
        status_of_get(&before).await.is_some(),
        "the relay does not answer after its restart"
    );
}

/// The relay the runner started goes with it: once its handle is dropped nothing listens on
/// its port (the runner's cases and its command-line run end that way).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_relay_process_stops_its_relay() {
    let dir = tempfile::tempdir().unwrap();
    let process = start_independent("", dir.path()).await;
    let url = process.base_url();
    assert!(
        status_of_get(&url).await.is_some(),
        "the relay does not answer"
    );
    drop(process);
    let mut gone = false;
    for _ in 0..50 {
        if status_of_get(&url).await.is_none() {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        gone,
        "the relay still answers at {url} after its handle was dropped"
    );
}

/// `GET /` over a bare TCP connection: the status line's code, if any answer came.
async fn status_of_get(base: &str) -> Option<u16> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let addr = base.strip_prefix("http://")?;
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    stream
        .write_all(b"GET /api/v1/pow/challenge HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .ok()?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.ok()?;
    let text = String::from_utf8_lossy(&answer);
    text.split_whitespace().nth(1)?.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_catches_the_planted_receipt_bugs() {
    let (reports, _) = run(Some("read-newest"), &["RCPT-002", "RCPT-008"]).await;
    assert_eq!(failed(&reports), ["RCPT-008"], "{reports:#?}");
    let (reports, _) = run(
        Some("drop-offline-delivered"),
        &["RCPT-001", "RCPT-004", "RCPT-009"],
    )
    .await;
    assert_eq!(failed(&reports), ["RCPT-009"], "{reports:#?}");
    let (reports, _) = run(Some("invent-delivered"), &["RCPT-001", "RCPT-010"]).await;
    assert_eq!(failed(&reports), ["RCPT-010"], "{reports:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_catches_the_planted_rejected_requester() {
    let (reports, _) = run(
        Some("rejected-can-message"),
        &["E2EE-004", "E2EE-005", "E2EE-006", "MSG-001"],
    )
    .await;
    // Its friendship row lets the requester write while pending too.
    assert_eq!(failed(&reports), ["E2EE-005", "E2EE-006"], "{reports:#?}");
}

/// Under the reference profile a refusal in the independent relay's words (`code`, not our
/// `error`) fails as wording only, saying the frame was refused; a frame the relay acts on
/// (its planted rejected requester) fails as what it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_profile_tells_a_refusal_in_other_words_from_no_refusal() {
    let only = ["E2EE-004", "E2EE-005", "E2EE-006", "E2EE-013"];
    let reason = |r: &CaseReport| r.reason.clone().unwrap_or_default();
    let (reports, _) = run_under(Profile::Reference, "", &only).await;
    assert_eq!(failed(&reports), only, "{reports:#?}");
    for r in &reports {
        assert!(
            reason(r)
                .contains("refused (an error frame, no ack), but the frame is not our relay's"),
            "{}: {}",
            r.id,
            reason(r)
        );
    }
    let (reports, _) = run_under(Profile::Reference, "--plant rejected-can-message", &only).await;
    for r in reports
        .iter()
        .filter(|r| ["E2EE-005", "E2EE-006"].contains(&r.id))
    {
        assert_eq!(r.status, Status::Fail, "{r:#?}");
        assert!(
            reason(r).contains("acked a frame it must refuse"),
            "{}: {}",
            r.id,
            reason(r)
        );
    }
}

/// The documents give owner-only posting as a client-side rule (PROTOCOL §1.4 CH7, `canPost`):
/// a relay that lets any account post fails CH-009 (SHOULD) only, and a paid channel transfer
/// (TRADE-009) is judged by the ChannelInfo roles, not by the seller being refused; under the
/// reference profile both are our relay's rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owner_only_posting_is_the_reference_profiles_rule() {
    let only = ["CH-007", "CH-009", "TRADE-009"];
    let (reports, _) = run_with("--anyone-posts", &only).await;
    assert_eq!(failed(&reports), ["CH-009"], "{reports:#?}");
    assert!(!runner::must_failed(&reports), "{reports:#?}");
    let (reports, _) = run_under(Profile::Reference, "--anyone-posts", &only).await;
    assert_eq!(failed(&reports), ["CH-009", "TRADE-009"], "{reports:#?}");
}
