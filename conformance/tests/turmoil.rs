//! The whole suite inside a deterministic turmoil simulation: the relay on host `relay` via
//! sim::server, the cases on host `suite` through sim::net's turmoil connector.

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use conformance::ctx::{ClockControl, Shared};
use conformance::transport::NetTransport;
use conformance::{cases, embedded, runner};
use sim::net::{Endpoint, TurmoilConnector};

const RELAY_PORT: u16 = 8080;

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
    let reports: Arc<Mutex<Vec<runner::CaseReport>>> = Arc::default();
    let out = Arc::clone(&reports);
    sim.client("suite", async move {
        let clock = loop {
            if let Some(c) = slot.lock().expect("slot").clone() {
                break c;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let endpoint = Endpoint::parse(&format!("http://relay:{RELAY_PORT}"))?;
        let transport = NetTransport::new(TurmoilConnector, endpoint).shared();
        let shared = Arc::new(Shared::new(
            embedded::turmoil_hooks(clock),
            common::SEED,
            Duration::from_secs(5),
            Duration::from_millis(300),
        ));
        let cfg = common::config(8);
        let r = runner::run(
            cases::all(),
            conformance::transport::shared_factory(transport),
            shared,
            &cfg,
            &|_| {},
        )
        .await;
        *out.lock().expect("reports") = r;
        Ok(())
    });
    sim.run().expect("simulation");
    let reports = reports.lock().expect("reports").clone();
    common::verdict("turmoil", &reports, "turmoil://relay:8080");
}
