//! The whole suite against our relay on 127.0.0.1 (real sockets), started through relay_server.

mod common;

use std::sync::Arc;
use std::time::Duration;

use conformance::ctx::Shared;
use conformance::model::Profile;
use conformance::{cases, embedded, runner, transport};
use seam::net::Endpoint;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suite_passes_against_the_embedded_relay_on_loopback() {
    let relay = embedded::start_loopback().await.expect("embedded relay");
    whole_suite_passes(relay, "loopback").await;
}

/// Every case, every hook (the push probe included: PUSH-008 runs), against `relay`.
async fn whole_suite_passes(relay: embedded::EmbeddedRelay, label: &str) {
    let endpoint = Endpoint::parse(&relay.base_url).expect("endpoint");
    let transports = transport::loopback_factory(endpoint);
    let hooks = embedded::loopback_hooks().await.expect("push probe");
    let shared = Arc::new(
        Shared::new(
            hooks,
            common::SEED,
            Duration::from_secs(5),
            Duration::from_millis(300),
        )
        .with_profile(Profile::Reference),
    );
    let cfg = common::config(8);
    let reports = runner::run(cases::all(), transports, shared, &cfg, &|_| {}).await;
    let url = relay.base_url.clone();
    relay.stop().await;
    common::verdict(label, &reports, &url, Profile::Reference);
}

/// The whole suite against a sharded relay: three relay cores over one store, each the owner
/// of its shard's accounts and on a thread of its own with its sockets (`relay --shards 3`,
/// thread per core as the binary runs it). What a client sees is the unsharded relay's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suite_passes_against_a_sharded_embedded_relay_on_loopback() {
    let options = relay_server::embedded::TestRelayOptions {
        shards: 3,
        core_threads: true,
        ..Default::default()
    };
    let relay = relay_server::embedded::start_test_relay::<seam::net::Tokio>(options)
        .await
        .expect("sharded embedded relay");
    whole_suite_passes(relay, "loopback, 3 shards").await;
}

/// Runs the cases with ids starting with `only` through a fault proxy per case.
async fn run_faulted(only: &[&str], plan: &str, seed: u64) -> (Vec<runner::CaseReport>, String) {
    let relay = embedded::start_loopback().await.expect("embedded relay");
    run_faulted_on(relay, only, plan, seed).await
}

/// [`run_faulted`] against `relay`.
async fn run_faulted_on(
    relay: embedded::EmbeddedRelay,
    only: &[&str],
    plan: &str,
    seed: u64,
) -> (Vec<runner::CaseReport>, String) {
    let endpoint = Endpoint::parse(&relay.base_url).expect("endpoint");
    let upstream = format!("{}:{}", endpoint.host(), endpoint.port())
        .parse()
        .expect("loopback address");
    let plan = fault_proxy::Plan::parse(plan).expect("plan");
    let transports = transport::faulted_factory(endpoint, upstream, plan, seed);
    let shared = Arc::new(
        Shared::new(
            embedded::hooks(),
            common::SEED,
            Duration::from_secs(5),
            Duration::from_millis(300),
        )
        .with_profile(Profile::Reference),
    );
    let cfg = runner::RunConfig {
        only: only.iter().map(|s| (*s).to_owned()).collect(),
        ..common::config(8)
    };
    let selected = runner::select(cases::all(), &cfg);
    let reports = runner::run(&selected, transports, shared, &cfg, &|_| {}).await;
    let url = relay.base_url.clone();
    relay.stop().await;
    (reports, url)
}

/// Latency, sliced frames, a bandwidth cap and a stalled-then-released link on every
/// connection: a conforming relay passes, and every report carries its plan and draws.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cases_pass_through_the_fault_proxy_with_slow_links() {
    let (reports, url) = run_faulted(
        &["MSG-00", "RCPT", "WS-00", "AUTH-01"],
        "latency,slicer,bandwidth,hold",
        3,
    )
    .await;
    assert!(reports.len() >= 10, "{} cases selected", reports.len());
    for r in &reports {
        let f = r.faults.as_ref().expect("every case ran through its proxy");
        if r.status != runner::Status::Skip {
            assert!(
                !f.connections.is_empty(),
                "{}: no connection went through",
                r.id
            );
        }
    }
    common::verdict("loopback-faults", &reports, &url, Profile::Reference);
}

/// The proxy really is in the path: with the client-to-relay direction dead, the case fails
/// (and says which faults it ran under); since half-open is destructive, the case is run
/// again without it and passes, and the report keeps the first attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_link_fails_the_first_attempt_and_the_report_names_the_faults() {
    let (reports, _) = run_faulted(
        &["REG-001"],
        r#"{"toxics":[{"type":"half_open","stream":"upstream"}]}"#,
        0,
    )
    .await;
    assert_eq!(reports.len(), 1);
    let first = reports[0]
        .first_attempt
        .as_ref()
        .expect("the first attempt failed on the dead link");
    assert!(first.faults.drew_destructive(), "{first:?}");
    assert_eq!(
        reports[0].status,
        runner::Status::Pass,
        "{:?}",
        reports[0].reason
    );
    let json = conformance::report::json(&reports, "relay", Profile::Reference);
    assert!(json.contains("half_open"), "{json}");
    assert!(json.contains("first_attempt"), "{json}");
}

/// `--faults all`: every connection is slowed, sliced and stalled, and some are also reset,
/// cut short, timed out or half-open. Cases whose connections drew a destructive toxic and
/// failed are run again without the destructive toxics: a conforming relay passes every case,
/// on a relay that went through the resets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_case_passes_under_all_faults_with_reruns_after_destructive_draws() {
    let (reports, url) = run_faulted(&["REG-00", "MSG-00", "WS-00", "RCPT"], "all", 5).await;
    assert!(reports.len() >= 20, "{} cases selected", reports.len());
    assert!(
        reports.iter().any(|r| r.first_attempt.is_some()),
        "some first attempt drew a destructive toxic and failed"
    );
    for r in reports.iter().filter(|r| r.first_attempt.is_some()) {
        let f = r.faults.as_ref().expect("faults");
        assert!(!f.plan.is_destructive(), "{}: the rerun is calm", r.id);
    }
    common::verdict("loopback-all-faults", &reports, &url, Profile::Reference);
}

/// A deliberately broken relay (relay-core's planted bug: message-id dedup removed, so a
/// resend gets a new seq) under network faults: the resend case fails, and the JSON, JUnit
/// and HTML reports all name the plan and the seed that reproduce the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_relay_under_faults_is_reported_with_its_plan_and_seed() {
    use relay_server::embedded::{TestRelayOptions, start_test_relay_with};
    use seam::net::Tokio;
    let options = TestRelayOptions::default();
    let mut config = options.config();
    config.planted_bug = Some(relay_core::PlantedBug::NoMessageDedup);
    let relay = start_test_relay_with::<Tokio>(options, config)
        .await
        .expect("planted relay");
    let (reports, url) = run_faulted_on(relay, &["MSG-013"], "latency,slicer", 17).await;
    assert_eq!(reports.len(), 1);
    let r = &reports[0];
    assert_eq!(r.status, runner::Status::Fail, "{:?}", r.reason);
    let faults = r.faults.as_ref().expect("the case ran through its proxy");
    assert!(!faults.connections.is_empty());
    let json = conformance::report::json(&reports, &url, Profile::Reference);
    let junit = conformance::report::junit(&reports);
    let html = conformance::report::html(&reports, &url, Profile::Reference);
    for (name, text) in [("json", &json), ("junit", &junit), ("html", &html)] {
        assert!(text.contains("MSG-013"), "{name}: {text}");
        assert!(text.contains("slicer"), "{name} lacks the plan: {text}");
        assert!(
            text.contains(&faults.seed.to_string()),
            "{name} lacks the seed {}: {text}",
            faults.seed
        );
    }
}
