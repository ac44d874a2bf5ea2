//! Two cluster nodes (`RelayServer::clustered` over `PgMembership`, in this process, on
//! loopback) on one PostgreSQL schema: the first serves every shard alone; when the second
//! joins, the first stops one shard's core and hands it over, and each node then serves its
//! own shard's users and passes the other's requests and sockets on to it (with the client's
//! address, which the owner's per-address limits count); when the first leaves, the second
//! serves every shard, and messages acknowledged by the first reach their recipient through
//! the second exactly once, in order; a message sent again after both shards moved is answered
//! with its first ack.
//!
//! Needs `RELAY_TEST_POSTGRES_URL` (`relay-pg/scripts/pg-test-cluster.sh`); without it the test
//! prints `SKIPPED …` and passes, unless `RELAY_TEST_POSTGRES_REQUIRED=1` (CI), where it fails.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod common;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use client_core::encoding::to_base64;
use client_core::keys::{EcdhKeyPair, SigningKeyPair};
use common::{
    Account, FromAddr, account, befriend, client, connect, database, inbox, now, send_acked,
};
use relay_core::handoff::ShardMap;
use relay_core::{Config, MemoryBlobStore};
use relay_pg::{JoinOptions, PgConfig};
use relay_server::RelayServer;
use relay_server::metrics::Metrics;
use relay_server::peers::ClusterKey;
use relay_server::postgres::PgMembership;
use seam::net::{HttpRequest, Listener as _, Network as _, Tokio};
use serde_json::json;
use tokio::sync::Notify;

/// Bound of every wait; only keeps a broken build from hanging.
const WAIT: Duration = Duration::from_secs(30);
const SHARDS: u16 = 2;

/// A node serving on a loopback port until its stop is notified.
struct Running {
    addr: SocketAddr,
    metrics: Metrics,
    stop: Arc<Notify>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

async fn node(pg: &PgConfig, name: &str) -> Running {
    let listener = Tokio::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let options = JoinOptions {
        address: addr.to_string(),
        lease_ms: 1_500,
        heartbeat_interval_ms: 100,
        heartbeat_timeout_ms: 300,
        ..JoinOptions::new(name, SHARDS)
    };
    let config = Config {
        pow_difficulty: 0,
        registrations_per_hour_per_addr: 3,
        ..Config::default()
    };
    let blobs: relay_server::postgres::BlobOpener =
        Arc::new(|| Ok(Box::new(MemoryBlobStore::new())));
    let metrics = Metrics::new();
    let membership = PgMembership::new(pg.clone(), options, config, 5, blobs);
    let server = RelayServer::clustered(membership.with_metrics(metrics.clone()))
        .with_cluster_key(ClusterKey::new([42; 32]))
        .with_metrics(metrics.clone());
    let (stop, task) = common::serve_until_notified(server, listener);
    Running {
        addr,
        metrics,
        stop,
        task,
    }
}

async fn within<T>(what: &str, done: impl Future<Output = T>) -> T {
    tokio::time::timeout(WAIT, done)
        .await
        .unwrap_or_else(|_| panic!("not in time: {what}"))
}

/// The status of a ticket request by `who` at `relay` (its shard's core answers it).
async fn ticket_status(relay: SocketAddr, who: &Account) -> u16 {
    let req = HttpRequest::new(http::Method::POST, "/api/v1/ws/ticket")
        .json(&json!({}))
        .unwrap()
        .bearer(&who.token);
    match client(relay, who.from).send(req).await {
        Ok(resp) => {
            if resp.status.as_u16() != 200 {
                eprintln!("ticket at {relay}: {} {:?}", resp.status, resp.body);
            }
            resp.status.as_u16()
        }
        Err(_) => 0,
    }
}

/// Waits until `who`'s requests are answered 200 at `relay`.
async fn answered_at(relay: SocketAddr, who: &Account) {
    within("answered at the node", async {
        while ticket_status(relay, who).await != 200 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

/// The shards `relay` serves itself, as its `/readyz` says (none while it does not answer 200).
async fn shards_served(relay: SocketAddr) -> Vec<u16> {
    let req = HttpRequest::new(http::Method::GET, "/readyz");
    match client(relay, FromAddr(Ipv4Addr::LOCALHOST)).send(req).await {
        Ok(resp) if resp.status.as_u16() == 200 => {
            let body: serde_json::Value = serde_json::from_slice(&resp.body).unwrap();
            serde_json::from_value(body["shards"].clone()).unwrap()
        }
        _ => Vec::new(),
    }
}

/// Waits until `relay` serves exactly `shards` itself.
async fn serving(relay: SocketAddr, shards: &[u16]) {
    within("the node serves its shards", async {
        while shards_served(relay).await != shards {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

/// The status of a registration (PoW off) of key seed `k` from `from` at `relay`.
async fn register_status(relay: SocketAddr, from: FromAddr, k: u8) -> u16 {
    let req = HttpRequest::new(http::Method::POST, "/api/v1/register")
        .json(&json!({
            "ed25519_public_key": to_base64(&SigningKeyPair::from_private_bytes(&[k; 32]).public_key()),
            "x25519_public_key": to_base64(&EcdhKeyPair::from_private_bytes([k; 32]).public_key()),
            "nickname": format!("user{k}"),
            "pow_nonce": "0",
        }))
        .unwrap();
    client(relay, from).send(req).await.unwrap().status.as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_nodes_share_the_shards_and_one_serves_them_all_when_the_other_leaves() {
    let test = "two_nodes_share_the_shards_and_one_serves_them_all_when_the_other_leaves";
    let Some(url) = database(test) else { return };
    let _ = tracing_subscriber::fmt()
        .with_env_filter("info,relay_server=debug")
        .with_test_writer()
        .try_init();
    let schema = format!("cluster_{}", std::process::id());
    let pg = PgConfig::from_url(&url)
        .unwrap()
        .with_schema(&schema)
        .unwrap();

    // The first node alone: both shards. The registry (shard 0) answers registrations.
    let n1 = node(&pg, "n1").await;
    let home = FromAddr(Ipv4Addr::LOCALHOST);
    within("n1 serves", async {
        loop {
            let req = HttpRequest::new(http::Method::GET, "/api/v1/pow/challenge");
            let answered = client(n1.addr, home).send(req).await;
            if answered.is_ok_and(|r| r.status.as_u16() == 200) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let a = account(n1.addr, home, 1).await;
    let b = account(n1.addr, home, 2).await;
    let map = ShardMap::new(SHARDS).unwrap();
    let shard_of = |who: &Account| map.of_user(&wire::UserUuid::parse(&who.uuid).unwrap()).0;
    assert_eq!(
        (shard_of(&a), shard_of(&b)),
        (0, 1),
        "the seed puts them apart"
    );
    let conv = befriend(n1.addr, &a, &b).await;
    let (mut ws_a, _) = connect(n1.addr, &a).await;
    let mut first_acks = Vec::new();
    for id in ["m1", "m2", "m3"] {
        first_acks.push(send_acked(&mut ws_a, id, &b, &conv).await);
    }

    // The second node joins: n1 hands shard 1 (b's) over; each node serves its own shard, and
    // passes what the other serves on to it.
    let n2 = node(&pg, "n2").await;
    serving(n2.addr, &[1]).await;
    serving(n1.addr, &[0]).await;
    // (A node whose directory still names it for a shard that left refuses for that moment.)
    for (at, who) in [(n1.addr, &a), (n1.addr, &b), (n2.addr, &a), (n2.addr, &b)] {
        answered_at(at, who).await;
    }
    // Between the nodes: a at n1 sends m4, b gets it at once, on a socket opened at n1 (and
    // passed on to n2, which serves b's shard).
    let (mut ws_b_via_n1, _) = connect(n1.addr, &b).await;
    send_acked(&mut ws_a, "m4", &b, &conv).await;
    let live: Vec<String> = inbox(&mut ws_b_via_n1)
        .await
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    assert!(live.contains(&"m4".to_owned()), "{live:?}");
    drop(ws_b_via_n1);
    // a's socket opened at n2 is served by n1, and sends through it.
    let (mut ws_a_via_n2, _) = connect(n2.addr, &a).await;
    send_acked(&mut ws_a_via_n2, "m4b", &b, &conv).await;
    drop(ws_a_via_n2);
    // A request passed on counts its client's address at the owner, not the node's: the
    // registry (shard 0, at n1) allows 3 registrations per address an hour; a and b took 2
    // from 127.0.0.1.
    let (one, two) = (
        FromAddr(Ipv4Addr::new(127, 0, 0, 2)),
        FromAddr(Ipv4Addr::new(127, 0, 0, 3)),
    );
    let statuses = [
        register_status(n2.addr, one, 11).await,
        register_status(n2.addr, one, 12).await,
        register_status(n2.addr, one, 13).await,
        register_status(n2.addr, one, 14).await,
        register_status(n2.addr, two, 15).await,
    ];
    assert_eq!(
        statuses,
        [201, 201, 201, 429, 201],
        "registrations through n2"
    );
    // The metrics say what each node serves, under which epoch, and what it passed on.
    let (m1, m2) = (n1.metrics.encode(), n2.metrics.encode());
    assert!(m1.contains("relay_cluster_shards_served 1\n"), "{m1}");
    assert!(
        m2.contains("relay_cluster_shard_epoch{shard=\"1\"} 2\n"),
        "{m2}"
    );
    assert!(
        m1.contains("relay_cluster_shard_moves_total{change=\"handed_over\"} 1\n"),
        "{m1}"
    );
    for m in [&m1, &m2] {
        assert!(
            m.contains("relay_passed_on_total{kind=\"request\",result=\"answered\"}")
                && m.contains("relay_passed_on_total{kind=\"upgrade\",result=\"answered\"}"),
            "{m}"
        );
    }

    // n1 leaves: n2 serves every shard; b gets each message once, in order.
    drop(ws_a);
    let left = now();
    n1.stop.notify_one();
    within("n1 stops", n1.task).await.unwrap().unwrap();
    serving(n2.addr, &[0, 1]).await;
    eprintln!(
        "shard 0 served by n2 {:?} after n1 began to leave",
        left.elapsed()
    );
    let (mut ws_b, _) = connect(n2.addr, &b).await;
    let got = inbox(&mut ws_b).await;
    let ids: Vec<&str> = got.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["m1", "m2", "m3", "m4", "m4b"], "{got:?}");
    assert!(got.windows(2).all(|w| w[0].1 < w[1].1), "{got:?}");
    let (mut ws_a, _) = connect(n2.addr, &a).await;
    // Both shards moved since m2 was first acknowledged (1 at the join, 0 at the leave): a
    // resend is answered with its first ack, and delivered no second time.
    assert_eq!(send_acked(&mut ws_a, "m2", &b, &conv).await, first_acks[1]);
    send_acked(&mut ws_a, "m5", &b, &conv).await;
    let live = inbox(&mut ws_b).await;
    assert_eq!(live.len(), 1, "{live:?}");
    assert_eq!(live[0].0, "m5");

    drop((ws_a, ws_b));
    n2.stop.notify_one();
    within("n2 stops", n2.task).await.unwrap().unwrap();
}
