//! A cluster node (`RelayServer::clustered`) on loopback, with a membership the test moves by
//! hand over one memory store: the node serves the shards it owns, stops a shard's core before
//! handing it over, refuses what it does not serve, serves a shard again under its next epoch
//! with nothing acknowledged lost or delivered twice, and stops every core when the membership
//! ends, then joins again; a link another node opened ends when the server stops.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod common;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Account, FromAddr, Ws, account, befriend, client, connect, inbox, send_acked};
use futures_util::{SinkExt as _, StreamExt as _};
use relay_core::handoff::ShardMap;
use relay_core::store::MemoryStore;
use relay_core::{Config, MemoryBlobStore, Relay};
use relay_server::RelayServer;
use relay_server::cluster::{JoinFuture, Membership, Node, Owned, ShardLease};
use relay_server::leadership::TermStore;
use relay_server::metrics::Metrics;
use seam::net::{HttpRequest, Listener as _, Network as _, Tokio};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_tungstenite::tungstenite::Message;

const SHARDS: u16 = 2;
/// Longest wait for anything the node does on its own.
const SOON: Duration = Duration::from_secs(10);

/// A membership the test moves: what the node owns is the test's watch; a handover is
/// recorded; a join waits until the node owns something.
struct Hand {
    owned: watch::Receiver<Owned>,
    store: MemoryStore,
    blobs: MemoryBlobStore,
    handed: Arc<Mutex<Vec<(u16, u64)>>>,
    joins: Arc<Mutex<usize>>,
}

impl Membership for Hand {
    fn join(&mut self) -> JoinFuture<'_> {
        Box::pin(async move {
            self.owned
                .wait_for(|o| matches!(o, Owned::Shards(_)))
                .await
                .unwrap();
            *self.joins.lock().unwrap() += 1;
            let (store, blobs) = (self.store.clone(), self.blobs.clone());
            let handed = Arc::clone(&self.handed);
            Ok(Node {
                name: "n1".into(),
                map: ShardMap::new(SHARDS).unwrap(),
                owned: self.owned.clone(),
                // One node: no shard is served elsewhere.
                directory: watch::channel(std::collections::BTreeMap::new()).1,
                address: "127.0.0.1:1".into(),
                open: Box::new(move |place, _epoch, end| {
                    let config = Config {
                        shard: place,
                        pow_difficulty: 0,
                        ..Config::default()
                    };
                    let store = TermStore::new(store.clone(), end);
                    Relay::with_blobs(config, Box::new(store), Box::new(blobs.clone()), 5)
                }),
                hand_over: Box::new(move |shard, epoch| {
                    handed.lock().unwrap().push((shard, epoch));
                    Box::pin(async { Ok(()) })
                }),
                holder: Box::new(()),
            })
        })
    }
}

fn owns(shards: &[(u16, u64, bool)]) -> Owned {
    Owned::Shards(
        shards
            .iter()
            .map(|&(shard, epoch, leaving)| (shard, ShardLease { epoch, leaving }))
            .collect(),
    )
}

/// The status of a ticket request by `who` (its shard's core answers it).
async fn ticket_status(relay: SocketAddr, who: &Account) -> u16 {
    let req = HttpRequest::new(http::Method::POST, "/api/v1/ws/ticket")
        .json(&json!({}))
        .unwrap()
        .bearer(&who.token);
    client(relay, who.from)
        .send(req)
        .await
        .unwrap()
        .status
        .as_u16()
}

async fn wait_status(relay: SocketAddr, who: &Account, want: u16) {
    soon(&format!("a ticket answered {want}"), async {
        while ticket_status(relay, who).await != want {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

/// `done`, within [`SOON`].
async fn soon<T>(what: &str, done: impl Future<Output = T>) -> T {
    tokio::time::timeout(SOON, done)
        .await
        .unwrap_or_else(|_| panic!("not in time: {what}"))
}

/// The next text frame as JSON, skipping nothing; `None` when the socket ends or closes.
async fn next_json(ws: &mut Ws) -> Option<Value> {
    loop {
        match tokio::time::timeout(SOON, ws.next())
            .await
            .expect("a frame in time")
        {
            Some(Ok(Message::Text(text))) => return Some(serde_json::from_str(&text).unwrap()),
            Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return None,
            Some(Ok(_)) => {}
        }
    }
}

/// Frames of `ws` until one of `kind` comes.
async fn next_of(ws: &mut Ws, kind: &str) -> Value {
    loop {
        let v = next_json(ws).await.expect("the socket stays open");
        if v["type"] == kind {
            return v;
        }
    }
}

fn msg(id: &str, to: &Account, conv: &str) -> Message {
    Message::text(
        json!({"type": "msg", "id": id, "to": to.alias, "conv_id": conv,
            "crypto_v": 1, "payload": "aGk="})
        .to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_follows_its_membership_shard_by_shard() {
    let (set_owned, owned) = watch::channel(owns(&[(0, 1, false), (1, 1, false)]));
    let handed = Arc::new(Mutex::new(Vec::new()));
    let joins = Arc::new(Mutex::new(0));
    let metrics = Metrics::new();
    let server = RelayServer::clustered(Hand {
        owned,
        store: MemoryStore::new(),
        blobs: MemoryBlobStore::new(),
        handed: Arc::clone(&handed),
        joins: Arc::clone(&joins),
    })
    .with_metrics(metrics.clone());
    let listener = Tokio::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .await
        .unwrap();
    let relay = listener.local_addr().unwrap();
    let (stop, served) = common::serve_until_notified(server, listener);

    // Both shards served here: the whole path works, across the two cores.
    let home = FromAddr(Ipv4Addr::LOCALHOST);
    wait_serving(relay).await;
    let a = account(relay, home, 1).await;
    let b = account(relay, home, 2).await;
    let conv = befriend(relay, &a, &b).await;
    let map = ShardMap::new(SHARDS).unwrap();
    let uuid = |who: &Account| wire::UserUuid::parse(&who.uuid).unwrap();
    let shard_of = |who: &Account| map.of_user(&uuid(who)).0;
    let moving = shard_of(&b);
    let owner = map.owner_of([&uuid(&a), &uuid(&b)]).0;
    assert!(
        shard_of(&a) != moving && owner != moving,
        "the accounts' seeds put a and the conversation on the shard that stays"
    );
    let (mut ws_a, _) = connect(relay, &a).await;
    let (mut ws_b, _) = connect(relay, &b).await;
    send_acked(&mut ws_a, "m1", &b, &conv).await;
    assert_eq!(next_of(&mut ws_b, "msg").await["id"], "m1");

    // b's shard is planned to leave: its core stops (b's socket closes), then it is handed
    // over; b is refused here, a is still served when its shard stays.
    let kept = 1 - moving;
    set_owned.send_replace(owns(&[(kept, 1, false), (moving, 1, true)]));
    while next_json(&mut ws_b).await.is_some() {}
    soon("the handover", async {
        while handed.lock().unwrap().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert_eq!(*handed.lock().unwrap(), vec![(moving, 1)]);
    set_owned.send_replace(owns(&[(kept, 1, false)]));
    assert_eq!(ticket_status(relay, &b).await, 503);
    // While b's shard is away a sends m2: acknowledged by the conversation's owner once it
    // is served (here, or when b's shard is back), delivered to b exactly once.
    ws_a.send(msg("m2", &b, &conv)).await.unwrap();
    assert_eq!(next_of(&mut ws_a, "ack").await["id"], "m2");
    assert_eq!(ticket_status(relay, &a).await, 200);
    // Its hand-off waits in the owner's outbox, and the metrics show it.
    let outbox = |shard: u16| {
        gauge(
            &metrics,
            &format!("relay_shard_outbox{{shard=\"{shard}\"}}"),
        )
    };
    assert_eq!(outbox(owner), Some(1));

    // The shard comes back under its next epoch: b syncs and gets m1 (never receipted) and
    // m2, each once, in seq order.
    set_owned.send_replace(owns(&[(kept, 1, false), (moving, 2, false)]));
    wait_status(relay, &b, 200).await;
    // Sent again with its id, as a client does until it has the ack: stored once.
    send_acked(&mut ws_a, "m2", &b, &conv).await;
    let (mut ws_b, _) = connect(relay, &b).await;
    let got = inbox(&mut ws_b).await;
    let ids: Vec<&str> = got.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["m1", "m2"], "{got:?}");
    assert!(got[0].1 < got[1].1);
    // The shard that came back applied it: the owner's outbox drained.
    soon("the outbox drains", async {
        while outbox(owner) != Some(0) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;

    // The membership ends: every core stops at once, everything is refused; the node joins
    // again once it owns shards again.
    set_owned.send_replace(Owned::Lost("lease lapsed".into()));
    while next_json(&mut ws_a).await.is_some() {}
    assert_eq!(ticket_status(relay, &a).await, 503);
    assert_eq!(*joins.lock().unwrap(), 1);
    set_owned.send_replace(owns(&[(0, 3, false), (1, 3, false)]));
    wait_status(relay, &a, 200).await;
    assert_eq!(*joins.lock().unwrap(), 2);

    drop((ws_a, ws_b));
    stop_node(&stop, served).await;
}

/// The value of the gauge series `series` (its name and labels) in the exposition, if any.
fn gauge(metrics: &Metrics, series: &str) -> Option<i64> {
    let text = metrics.encode();
    let line = text.lines().find(|l| l.split(' ').next() == Some(series))?;
    line.rsplit(' ').next()?.parse().ok()
}

/// Stops the node and waits for it, within [`SOON`].
async fn stop_node(
    stop: &tokio::sync::Notify,
    served: tokio::task::JoinHandle<std::io::Result<()>>,
) {
    stop.notify_one();
    tokio::time::timeout(SOON, served)
        .await
        .expect("the node stops")
        .unwrap()
        .unwrap();
}

/// Starts `server` on a loopback port and waits until it serves: its address, its stop and
/// its task (for [`stop_node`]).
async fn start_serving(
    server: RelayServer,
) -> (
    SocketAddr,
    Arc<tokio::sync::Notify>,
    tokio::task::JoinHandle<std::io::Result<()>>,
) {
    let listener = Tokio::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .await
        .unwrap();
    let relay = listener.local_addr().unwrap();
    let (stop, served) = common::serve_until_notified(server, listener);
    wait_serving(relay).await;
    (relay, stop, served)
}

/// Waits until the node serves (the proof-of-work challenge answers something but 503).
async fn wait_serving(relay: SocketAddr) {
    soon("the node serves", async {
        loop {
            let http = client(relay, FromAddr(Ipv4Addr::LOCALHOST));
            let req = HttpRequest::new(http::Method::GET, "/api/v1/pow/challenge");
            if http.send(req).await.is_ok_and(|r| r.status.as_u16() != 503) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

/// A shard the membership gives the node already planned to leave (a forced move and a
/// rebalance in one round) is handed over at once, without a core: nothing ran under its
/// epoch here, and waiting would leave it with no node serving it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_planned_to_leave_before_it_started_is_handed_over_at_once() {
    let (set_owned, owned) = watch::channel(owns(&[(0, 1, false)]));
    let handed = Arc::new(Mutex::new(Vec::new()));
    let server = RelayServer::clustered(Hand {
        owned,
        store: MemoryStore::new(),
        blobs: MemoryBlobStore::new(),
        handed: Arc::clone(&handed),
        joins: Arc::new(Mutex::new(0)),
    });
    let (relay, stop, served) = start_serving(server).await;

    set_owned.send_replace(owns(&[(0, 1, false), (1, 4, true)]));
    soon("the handover", async {
        while handed.lock().unwrap().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert_eq!(*handed.lock().unwrap(), vec![(1, 4)]);
    // Shard 0 is served on.
    wait_serving(relay).await;
    stop_node(&stop, served).await;
}

/// A link another node opened to this one ends when this node's server stops: left open, the
/// sender would write its crossings into a server that is gone (answering its pings) rather
/// than connect again to whatever serves the address next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_from_another_node_is_closed_when_the_server_stops() {
    let key = relay_server::peers::ClusterKey::new([7; 32]);
    let (_set_owned, owned) = watch::channel(owns(&[(0, 1, false), (1, 1, false)]));
    let server = RelayServer::clustered(Hand {
        owned,
        store: MemoryStore::new(),
        blobs: MemoryBlobStore::new(),
        handed: Arc::new(Mutex::new(Vec::new())),
        joins: Arc::new(Mutex::new(0)),
    })
    .with_cluster_key(key.clone());
    let (relay, stop, served) = start_serving(server).await;

    // The server's clock (the system's).
    let now_s = seam::clock::Clock::now(&seam::clock::SystemClock).0 / 1_000;
    let mut request =
        tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(format!(
            "ws://{relay}{}",
            relay_server::peers::PEER_PATH
        ))
        .unwrap();
    request.headers_mut().insert(
        http::header::AUTHORIZATION,
        relay_server::peers::proof(&key, "n2", now_s)
            .parse()
            .unwrap(),
    );
    let tcp = tokio::net::TcpStream::connect(relay).await.unwrap();
    let (mut link, _) = tokio_tungstenite::client_async(request, tcp).await.unwrap();
    // The link is served: a ping is answered.
    link.send(Message::Ping(Vec::new().into())).await.unwrap();
    let pong = soon("a pong", link.next()).await;
    assert!(matches!(pong, Some(Ok(Message::Pong(_)))), "{pong:?}");

    stop_node(&stop, served).await;
    soon("the link ends", async {
        loop {
            match link.next().await {
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                Some(Ok(_)) => {}
            }
        }
    })
    .await;
}
