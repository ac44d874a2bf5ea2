//! A campaigning relay server (`RelayServer::campaigning`) on turmoil, with a leadership the
//! test switches by hand: what a standby answers, and that it never keeps a client's
//! connection. Behind a TCP load balancer a kept-alive connection stays with the relay it was
//! first sent to, so a standby (or a leader whose term just ended) must close it after its
//! `503 NOT_LEADER`; else the client asks the old leader forever (the simulator's failover
//! topology found this, `simulate --faults all --seed 0`).
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::Method;
use relay_core::store::MemoryStore;
use relay_core::{Config, MemoryBlobStore, Relay};
use relay_server::RelayServer;
use relay_server::leadership::{CampaignFuture, Leadership, Term, TermEnd};
use seam::clock::SimClock;
use seam::net::{Endpoint, HttpClient, HttpRequest, HttpResponse, Network as _, Turmoil};
use serde_json::Value;
use tokio::sync::watch;

const RELAY: &str = "relay";
const PORT: u16 = 8080;

/// Leads while the test's switch is on; the current term's end is shared with the test.
struct Switch {
    on: watch::Receiver<bool>,
    term: Arc<Mutex<Option<TermEnd>>>,
}

impl Leadership for Switch {
    fn campaign(&mut self) -> CampaignFuture<'_> {
        Box::pin(async move {
            self.on.wait_for(|on| *on).await.unwrap();
            let end = TermEnd::new();
            *self.term.lock().unwrap() = Some(end.clone());
            let (store, blobs) = (MemoryStore::new(), MemoryBlobStore::new());
            let open = move || {
                Relay::with_blobs(
                    Config::default(),
                    Box::new(store.clone()),
                    Box::new(blobs.clone()),
                    7,
                )
            };
            Ok(Term {
                open: Box::new(open),
                end,
                epoch: Some(1),
                holder: Box::new(()),
            })
        })
    }
}

fn closes(response: &HttpResponse) -> bool {
    response
        .headers
        .get(http::header::CONNECTION)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"close"))
}

fn error_code(response: &HttpResponse) -> String {
    let body: Value = serde_json::from_slice(&response.body).unwrap_or(Value::Null);
    body["error"].as_str().unwrap_or_default().to_owned()
}

async fn get(http: &HttpClient<seam::net::TurmoilConnector>, path: &str) -> HttpResponse {
    http.send(HttpRequest::new(Method::GET, path))
        .await
        .unwrap()
}

#[test]
fn a_standby_refuses_with_not_leader_and_closes_the_connection() {
    let mut sim = turmoil::Builder::new()
        .simulation_duration(Duration::from_secs(60))
        .build();
    let (switch, on) = watch::channel(false);
    let term: Arc<Mutex<Option<TermEnd>>> = Arc::default();
    {
        let term = Arc::clone(&term);
        sim.host(RELAY, move || {
            let leadership = Switch {
                on: on.clone(),
                term: Arc::clone(&term),
            };
            async move {
                RelayServer::campaigning(leadership)
                    .with_clock(SimClock::default())
                    .run::<Turmoil>(
                        SocketAddr::from((Ipv4Addr::UNSPECIFIED, PORT)),
                        std::future::pending(),
                    )
                    .await?;
                Ok(())
            }
        });
    }
    sim.client("client", async move {
        let http = HttpClient::new(
            Turmoil::connector(),
            Endpoint::parse(&format!("http://{RELAY}:{PORT}")).unwrap(),
        );
        tokio::time::sleep(Duration::from_millis(100)).await;

        // Standby: the probes answer (and keep the connection); every other route is refused
        // with NOT_LEADER, Retry-After, and the connection closed.
        let live = get(&http, "/healthz").await;
        assert_eq!(live.status.as_u16(), 200);
        assert!(!closes(&live));
        let ready = get(&http, "/readyz").await;
        assert_eq!(
            (ready.status.as_u16(), error_code(&ready)),
            (503, "NOT_LEADER".into())
        );
        assert!(!closes(&ready), "a health check may keep its connection");
        let refused = get(&http, "/api/v1/vanity/search?q=77").await;
        assert_eq!(
            (refused.status.as_u16(), error_code(&refused)),
            (503, "NOT_LEADER".into())
        );
        assert!(refused.headers.contains_key(http::header::RETRY_AFTER));
        assert!(closes(&refused), "a standby must not keep the connection");

        // Leading: served, connections kept.
        switch.send(true).unwrap();
        let mut ready = get(&http, "/readyz").await;
        for _ in 0..100 {
            if ready.status.as_u16() == 200 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            ready = get(&http, "/readyz").await;
        }
        assert_eq!(ready.status.as_u16(), 200, "the server leads");
        let served = get(&http, "/api/v1/vanity/search?q=77").await;
        assert_eq!(served.status.as_u16(), 200, "{:?}", served.body);
        assert!(!closes(&served));

        // The term ends: the next answer on the kept-alive connection refuses and closes it.
        switch.send(false).unwrap();
        term.lock()
            .unwrap()
            .take()
            .unwrap()
            .end("the test ended the term");
        tokio::time::sleep(Duration::from_millis(100)).await;
        let after = get(&http, "/api/v1/vanity/search?q=77").await;
        assert_eq!(
            (after.status.as_u16(), error_code(&after)),
            (503, "NOT_LEADER".into())
        );
        assert!(closes(&after), "the old leader lets the connection go");
        Ok(())
    });
    sim.run().unwrap();
}
