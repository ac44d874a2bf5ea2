//! Connection hygiene of the relay server (issue 17, D2 and D4), on real loopback sockets:
//! slow-header and silent connections are closed after the header-read deadline; connections
//! over the cap per address are closed at once; every closed connection frees its place; a
//! client that stops reading is closed and everything queued for it is freed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use relay_core::{Config, MemoryBlobStore, store::MemoryStore};
use relay_server::{OutboundBytes, RelayServer};
use seam::net::{ConnectionCounter, Listener as _, Network, ServeLimits, Tokio};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::sync::Notify;

mod common;
use common::{FromAddr, account, call, client, connect_with};

/// Header-read deadline of these tests.
const HEADER_MS: u64 = 300;
/// Per-address cap of these tests.
const PER_ADDR: usize = 4;

struct Running {
    addr: SocketAddr,
    connections: ConnectionCounter,
    outbound: OutboundBytes,
    stop: Arc<Notify>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

async fn start() -> Running {
    start_with(
        Config::default(),
        ServeLimits {
            header_read_timeout_ms: HEADER_MS,
            max_connections: 100,
            max_connections_per_addr: PER_ADDR,
            ..ServeLimits::default()
        },
    )
    .await
}

async fn start_with(config: Config, limits: ServeLimits) -> Running {
    let listener = Tokio::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let server = RelayServer::in_memory(config, 5, MemoryStore::new(), MemoryBlobStore::new())
        .with_limits(limits);
    let connections = server.connections();
    let outbound = server.outbound_bytes();
    let (stop, task) = common::serve_until_notified(server, listener);
    Running {
        addr,
        connections,
        outbound,
        stop,
        task,
    }
}

/// Reads until EOF or an error; `true` when the server closed the connection within `within`.
async fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 1024];
    let read_all = async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(within, read_all).await.is_ok()
}

async fn wait_open(c: &ConnectionCounter, n: usize) {
    for _ in 0..200 {
        if c.open() == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(c.open(), n, "open connections");
}

#[tokio::test]
async fn slow_headers_and_silent_connections_are_closed_at_the_deadline() {
    let r = start().await;
    let mut silent = TcpStream::connect(r.addr).await.unwrap();
    let mut slow = TcpStream::connect(r.addr).await.unwrap();
    slow.write_all(b"GET /api/v1/pow HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let sender = async {
        // one header byte every 100 ms: never done within the deadline
        for b in b"X-Slow: 1\r\n" {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if slow.write_all(&[*b]).await.is_err() {
                break;
            }
        }
    };
    let ((), closed) = tokio::join!(sender, async {
        closed_within(&mut silent, Duration::from_secs(5)).await
    });
    assert!(closed, "a silent connection is closed");
    assert!(
        closed_within(&mut slow, Duration::from_secs(5)).await,
        "a slow-header connection is closed"
    );
    wait_open(&r.connections, 0).await;
    r.stop.notify_one();
    r.task.await.unwrap().unwrap();
}

#[tokio::test]
async fn connections_over_the_per_address_cap_are_closed_and_places_come_back() {
    let r = start().await;
    let mut held = Vec::new();
    for _ in 0..PER_ADDR {
        held.push(TcpStream::connect(r.addr).await.unwrap());
    }
    wait_open(&r.connections, PER_ADDR).await;
    let mut extra = TcpStream::connect(r.addr).await.unwrap();
    assert!(
        closed_within(&mut extra, Duration::from_millis(HEADER_MS / 2)).await,
        "closed before the header deadline could have closed it"
    );
    assert_eq!(r.connections.open(), PER_ADDR);
    // An exempt address (a cluster's other node) is counted in the total only.
    r.connections.set_exempt(
        "a cluster's nodes",
        std::collections::BTreeSet::from([std::net::IpAddr::from(Ipv4Addr::LOCALHOST)]),
    );
    let mut exempt = TcpStream::connect(r.addr).await.unwrap();
    wait_open(&r.connections, PER_ADDR + 1).await;
    exempt
        .write_all(b"GET /api/v1/nope HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 64];
    let n = exempt.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 404"), "{:?}", &buf[..n]);
    r.connections
        .set_exempt("a cluster's nodes", std::collections::BTreeSet::new());
    drop(exempt);
    wait_open(&r.connections, PER_ADDR).await;
    // A request on a held connection still works.
    let s = &mut held[0];
    s.write_all(b"GET /api/v1/nope HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let n = s.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 404"), "{:?}", &buf[..n]);
    drop(held);
    wait_open(&r.connections, 0).await;
    let mut again = TcpStream::connect(r.addr).await.unwrap();
    again
        .write_all(b"GET /api/v1/nope HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let n = again.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 404"));
    r.stop.notify_one();
    drop(again);
    r.task.await.unwrap().unwrap();
}

/// D2: a subscriber that stops reading while its channel floods it. Its kernel buffers fill,
/// then the relay's queue; the relay must close it within the write deadline (or at the
/// queue's byte bound) and free everything: the connection's place and every queued byte.
#[tokio::test]
async fn a_client_that_stops_reading_is_closed_and_freed() {
    const DEADLINE_MS: u64 = 500;
    let r = start_with(
        Config {
            pow_difficulty: 0,
            ..Config::default()
        },
        ServeLimits {
            write_deadline_ms: DEADLINE_MS,
            ..ServeLimits::default()
        },
    )
    .await;
    let owner = account(r.addr, FromAddr(Ipv4Addr::new(127, 0, 0, 1)), 1).await;
    let reader = account(r.addr, FromAddr(Ipv4Addr::new(127, 0, 0, 2)), 2).await;
    let post = http::Method::POST;
    let created = call(
        &client(r.addr, owner.from),
        post.clone(),
        "/api/v1/channels",
        &serde_json::json!({"name": "flood", "description": "", "is_public": true}),
        Some(&owner.token),
    )
    .await;
    let channel = created["channel_id"].as_str().unwrap().to_owned();
    call(
        &client(r.addr, reader.from),
        post.clone(),
        &format!("/api/v1/channels/{channel}/subscribe"),
        &serde_json::json!({}),
        Some(&reader.token),
    )
    .await;
    // The reader's socket: a 4 KiB receive buffer, and nobody ever reads it.
    let (stuck, _) = connect_with(r.addr, &reader, Some(4096)).await;
    wait_open(&r.connections, 1).await;

    // 16 KiB posts until the relay gives up on the reader (or 8 MiB went out).
    let content = "x".repeat(16 * 1024 - 64);
    let owner_http = client(r.addr, owner.from);
    let mut posts = 0;
    let mut peak = 0;
    while posts < 512 {
        call(
            &owner_http,
            post.clone(),
            &format!("/api/v1/channels/{channel}/posts"),
            &serde_json::json!({"type": "text", "content": content}),
            Some(&owner.token),
        )
        .await;
        posts += 1;
        peak = peak.max(r.outbound.get());
        // The owner's keep-alive connection is the only other one.
        if r.connections.open() <= 1 && r.outbound.get() == 0 && posts > 16 {
            break;
        }
    }
    owner_http.clear_idle();
    assert!(peak > 0, "the flood never queued anything for the reader");
    // Closed: its place is free and nothing stays queued for it.
    for _ in 0..200 {
        if r.connections.open() == 0 && r.outbound.get() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(
        r.connections.open(),
        0,
        "the stuck reader was not closed after {posts} posts"
    );
    assert_eq!(
        r.outbound.get(),
        0,
        "bytes still queued for a closed socket"
    );
    drop(stuck);
    r.stop.notify_one();
    r.task.await.unwrap().unwrap();
}
