//! The whole suite against our relay on 127.0.0.1 (real sockets), started through sim::server.

mod common;

use std::sync::Arc;
use std::time::Duration;

use conformance::ctx::Shared;
use conformance::{cases, embedded, runner, transport};
use sim::net::Endpoint;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suite_passes_against_the_embedded_relay_on_loopback() {
    let relay = embedded::start_loopback().await.expect("embedded relay");
    let endpoint = Endpoint::parse(&relay.base_url).expect("endpoint");
    let transports = transport::loopback_factory(endpoint);
    let shared = Arc::new(Shared::new(
        embedded::hooks(),
        common::SEED,
        Duration::from_secs(5),
        Duration::from_millis(300),
    ));
    let cfg = common::config(8);
    let reports = runner::run(cases::all(), transports, shared, &cfg, &|_| {}).await;
    let url = relay.base_url.clone();
    relay.stop().await;
    common::verdict("loopback", &reports, &url);
}
