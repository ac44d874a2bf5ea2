//! Connection hygiene of the relay server (issue 17, D4), on real loopback sockets: slow-header
//! and silent connections are closed after the header-read deadline; connections over the cap
//! per address are closed at once; every closed connection frees its place.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use relay_core::{Config, MemoryBlobStore, store::MemoryStore};
use sim::net::{ConnectionCounter, Listener as _, Network, ServeLimits, Tokio};
use sim::server::RelayServer;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::sync::Notify;

/// Header-read deadline of these tests.
const HEADER_MS: u64 = 300;
/// Per-address cap of these tests.
const PER_ADDR: usize = 4;

struct Running {
    addr: SocketAddr,
    connections: ConnectionCounter,
    stop: Arc<Notify>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

async fn start() -> Running {
    let listener = Tokio::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let server = RelayServer::in_memory(
        Config::default(),
        5,
        MemoryStore::new(),
        MemoryBlobStore::new(),
    )
    .with_limits(ServeLimits {
        header_read_timeout_ms: HEADER_MS,
        max_connections: 100,
        max_connections_per_addr: PER_ADDR,
        ..ServeLimits::default()
    });
    let connections = server.connections();
    let stop = Arc::new(Notify::new());
    let stopped = Arc::clone(&stop);
    let task = tokio::spawn(server.serve::<Tokio>(listener, async move {
        stopped.notified().await;
    }));
    Running {
        addr,
        connections,
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
    // A request on a held connection still works.
    let s = &mut held[0];
    s.write_all(b"GET /api/v1/nope HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 64];
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
