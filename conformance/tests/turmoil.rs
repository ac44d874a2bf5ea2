//! The suite inside deterministic turmoil simulations: the relay on host `relay` (test mode,
//! via `relay_server::embedded`), each case on its own client host (its own address, as
//! per-address limits expect distinct clients) through seam::net's turmoil connector. Cases that
//! move the relay's clock (over HTTP, like against any relay in test mode) run last, one at a
//! time, on host `clock`.
//!
//! * [`suite_passes_against_the_embedded_relay_in_turmoil`]: every case, no faults.
//! * [`fault_subset_passes_with_latency_and_held_links`]: a subset (MSG, RCPT, RETRACT, GOAWAY,
//!   E2EE) with the simulator's faults on: every message takes 1-40 ms (seeded), and a chaos
//!   host holds each case host's link to the relay for [`HOLD`] at a time (messages queue, then
//!   flow on release) — faults a correct relay and client must tolerate at the protocol level
//!   within each case's waits.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use conformance::ctx::{Hooks, Shared};
use conformance::model::Case;
use conformance::model::Profile;
use conformance::runner::{self, CaseReport};
use conformance::transport::NetTransport;
use conformance::{cases, embedded};
use seam::net::{Endpoint, TurmoilConnector};

const RELAY_PORT: u16 = 8080;
/// How long the chaos host holds one case's link to the relay.
const HOLD: Duration = Duration::from_millis(700);
/// Pause between two holds of the same link.
const HOLD_GAP: Duration = Duration::from_millis(900);
/// Areas of the fault run.
const FAULT_AREAS: &[&str] = &["MSG", "RCPT", "RETRACT", "GOAWAY", "E2EE"];

/// Faults of a run.
#[derive(Clone, Copy)]
struct Faults {
    latency: Option<(Duration, Duration)>,
    hold_links: bool,
}

fn case_host(i: usize) -> String {
    format!("case{i}")
}

/// Runs `selected` (indices into `cases::all()`) and returns the reports in registry order.
fn run_in_turmoil(seed: u64, selected: &[usize], faults: Faults) -> Vec<CaseReport> {
    let mut builder = turmoil::Builder::new();
    builder
        .rng_seed(seed)
        .simulation_duration(Duration::from_secs(3600));
    if let Some((min, max)) = faults.latency {
        builder.min_message_latency(min).max_message_latency(max);
    }
    let mut sim = builder.build();
    sim.host("relay", || async {
        embedded::serve_turmoil(SocketAddr::from(([0, 0, 0, 0], RELAY_PORT))).await?;
        Ok(())
    });
    // The runner is the relay's Web Push service too (PUSH-008).
    let probe = embedded::turmoil_push_probe(&mut sim);
    let cfg = common::config(1);
    let reports: Arc<Mutex<Vec<(usize, CaseReport)>>> = Arc::default();
    let all: &'static [Case] = cases::all();
    let parallel: Vec<usize> = selected
        .iter()
        .copied()
        .filter(|&i| !all[i].exclusive())
        .collect();
    let exclusive: Vec<usize> = selected
        .iter()
        .copied()
        .filter(|&i| all[i].exclusive())
        .collect();
    let remaining = Arc::new(AtomicUsize::new(parallel.len()));
    // One shared state for every case (the vanity alias pool must not hand an alias out twice).
    let hooks = Hooks {
        push_probe: Some(probe),
        ..embedded::hooks()
    };
    let shared = Arc::new(
        Shared::new(
            hooks,
            common::SEED,
            Duration::from_secs(5),
            Duration::from_millis(300),
        )
        .with_profile(Profile::Reference),
    );
    let endpoint = || Endpoint::parse(&format!("http://relay:{RELAY_PORT}"));
    for &i in &parallel {
        let (out, remaining, cfg, shared) = (
            Arc::clone(&reports),
            Arc::clone(&remaining),
            cfg.clone(),
            Arc::clone(&shared),
        );
        sim.client(case_host(i), async move {
            let transport = NetTransport::new(TurmoilConnector, endpoint()?).shared();
            let case = all[i];
            let r = runner::run_one(
                case,
                transport,
                shared,
                cfg.timeout,
                cfg.expected.get(case.id).cloned(),
            )
            .await;
            out.lock().expect("reports").push((i, r));
            remaining.fetch_sub(1, Ordering::SeqCst);
            Ok(())
        });
    }
    if faults.hold_links {
        // Holds every case's link in turn while cases run; stops once they are all done.
        let (remaining, hosts) = (
            Arc::clone(&remaining),
            parallel.iter().map(|&i| case_host(i)).collect::<Vec<_>>(),
        );
        sim.client("chaos", async move {
            while remaining.load(Ordering::SeqCst) > 0 {
                for host in &hosts {
                    turmoil::hold(host.as_str(), "relay");
                }
                tokio::time::sleep(HOLD).await;
                for host in &hosts {
                    turmoil::release(host.as_str(), "relay");
                }
                tokio::time::sleep(HOLD_GAP).await;
            }
            Ok(())
        });
    }
    let (out, remaining) = (Arc::clone(&reports), Arc::clone(&remaining));
    sim.client("clock", async move {
        while remaining.load(Ordering::SeqCst) > 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        for i in exclusive {
            let transport = NetTransport::new(TurmoilConnector, endpoint()?).shared();
            let case = all[i];
            let r = runner::run_one(
                case,
                transport,
                Arc::clone(&shared),
                cfg.timeout,
                cfg.expected.get(case.id).cloned(),
            )
            .await;
            out.lock().expect("reports").push((i, r));
        }
        Ok(())
    });
    sim.run().expect("simulation");
    let mut reports = reports.lock().expect("reports").clone();
    reports.sort_by_key(|(i, _)| *i);
    assert_eq!(reports.len(), selected.len(), "every case reported");
    reports.into_iter().map(|(_, r)| r).collect()
}

#[test]
fn suite_passes_against_the_embedded_relay_in_turmoil() {
    let selected: Vec<usize> = (0..cases::all().len()).collect();
    let faults = Faults {
        latency: None,
        hold_links: false,
    };
    let reports = run_in_turmoil(common::SEED, &selected, faults);
    common::verdict(
        "turmoil",
        &reports,
        "turmoil://relay:8080",
        Profile::Reference,
    );
}

#[test]
fn fault_subset_passes_with_latency_and_held_links() {
    let selected: Vec<usize> = cases::all()
        .iter()
        .enumerate()
        .filter(|(_, c)| FAULT_AREAS.contains(&c.area()) && !c.exclusive())
        .map(|(i, _)| i)
        .collect();
    assert!(
        selected.len() >= 40,
        "{} cases in the fault run",
        selected.len()
    );
    let faults = Faults {
        latency: Some((Duration::from_millis(1), Duration::from_millis(40))),
        hold_links: true,
    };
    let reports = run_in_turmoil(common::SEED + 1, &selected, faults);
    common::verdict(
        "turmoil-faults",
        &reports,
        "turmoil://relay:8080 (faults)",
        Profile::Reference,
    );
}
