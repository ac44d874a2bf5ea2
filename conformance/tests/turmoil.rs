//! The whole suite inside a deterministic turmoil simulation: the relay on host `relay` via
//! sim::server, each case on its own client host (its own address, as per-address limits
//! expect distinct clients) through sim::net's turmoil connector. Cases that move the relay's
//! clock run last, one at a time, on host `clock`.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use conformance::ctx::{ClockControl, Shared};
use conformance::runner::{self, CaseReport};
use conformance::transport::NetTransport;
use conformance::{cases, embedded};
use sim::net::{Endpoint, TurmoilConnector};

const RELAY_PORT: u16 = 8080;

async fn clock_of(slot: &Mutex<Option<ClockControl>>) -> ClockControl {
    loop {
        if let Some(c) = slot.lock().expect("slot").clone() {
            return c;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[test]
fn suite_passes_against_the_embedded_relay_in_turmoil() {
    let mut sim = turmoil::Builder::new()
        .rng_seed(common::SEED)
        .simulation_duration(Duration::from_secs(3600))
        .build();
    let slot: Arc<Mutex<Option<ClockControl>>> = Arc::default();
    let host_slot = Arc::clone(&slot);
    sim.host("relay", move || {
        let slot = Arc::clone(&host_slot);
        async move {
            embedded::serve_turmoil(SocketAddr::from(([0, 0, 0, 0], RELAY_PORT)), move |c| {
                *slot.lock().expect("slot") = Some(c);
            })
            .await?;
            Ok(())
        }
    });
    let cfg = common::config(1);
    let reports: Arc<Mutex<Vec<(usize, CaseReport)>>> = Arc::default();
    let all = cases::all();
    let parallel: Vec<usize> = (0..all.len()).filter(|&i| !all[i].exclusive()).collect();
    let remaining = Arc::new(AtomicUsize::new(parallel.len()));
    // One shared state for every case (the vanity alias pool must not hand an alias out twice);
    // its clock control forwards to the relay host's clock once that host has started.
    let fwd_slot = Arc::clone(&slot);
    let forward = ClockControl::InProcess(Arc::new(move |ms| {
        match fwd_slot.lock().expect("slot").clone() {
            Some(ClockControl::InProcess(advance)) => advance(ms),
            _ => 0,
        }
    }));
    let shared = Arc::new(Shared::new(
        embedded::turmoil_hooks(forward),
        common::SEED,
        Duration::from_secs(5),
        Duration::from_millis(300),
    ));
    for i in parallel {
        let (slot, out, remaining, cfg) = (
            Arc::clone(&slot),
            Arc::clone(&reports),
            Arc::clone(&remaining),
            cfg.clone(),
        );
        let shared = Arc::clone(&shared);
        sim.client(format!("case{i}"), async move {
            clock_of(&slot).await;
            let endpoint = Endpoint::parse(&format!("http://relay:{RELAY_PORT}"))?;
            let transport = NetTransport::new(TurmoilConnector, endpoint).shared();
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
    let (out, cfg2, shared2) = (Arc::clone(&reports), cfg, Arc::clone(&shared));
    sim.client("clock", async move {
        clock_of(&slot).await;
        while remaining.load(Ordering::SeqCst) > 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let endpoint = Endpoint::parse(&format!("http://relay:{RELAY_PORT}"))?;
        for (i, case) in all.iter().enumerate().filter(|(_, c)| c.exclusive()) {
            let transport = NetTransport::new(TurmoilConnector, endpoint.clone()).shared();
            let r = runner::run_one(
                *case,
                transport,
                Arc::clone(&shared2),
                cfg2.timeout,
                cfg2.expected.get(case.id).cloned(),
            )
            .await;
            out.lock().expect("reports").push((i, r));
        }
        Ok(())
    });
    sim.run().expect("simulation");
    let mut reports = reports.lock().expect("reports").clone();
    reports.sort_by_key(|(i, _)| *i);
    let reports: Vec<CaseReport> = reports.into_iter().map(|(_, r)| r).collect();
    assert_eq!(reports.len(), all.len(), "every case reported");
    common::verdict("turmoil", &reports, "turmoil://relay:8080");
}
