//! The toxics against a loopback echo server, through real sockets on 127.0.0.1.

#![allow(clippy::unwrap_used)]
// test helpers
// Loopback tests read the wall clock to check the delay a toxic adds (lower bounds only).
#![allow(clippy::disallowed_methods)]

use std::net::SocketAddr;
use std::time::Duration;

use fault_proxy::{FaultProxy, Plan};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::timeout;

const LOOPBACK: &str = "127.0.0.1:0";

/// An echo server; returns its address.
async fn echo() -> SocketAddr {
    let l = TcpListener::bind(LOOPBACK).await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                drop(tokio::io::copy(&mut r, &mut w).await);
            });
        }
    });
    addr
}

async fn proxy(plan: &str) -> FaultProxy {
    FaultProxy::start(
        LOOPBACK.parse().unwrap(),
        echo().await,
        Plan::parse(plan).unwrap(),
        1,
    )
    .await
    .unwrap()
}

/// Writes `data` and reads back as many bytes, within `limit`.
async fn round_trip(p: &FaultProxy, data: &[u8], limit: Duration) -> std::io::Result<Vec<u8>> {
    let mut s = TcpStream::connect(p.local_addr()).await?;
    s.write_all(data).await?;
    let mut back = vec![0u8; data.len()];
    match timeout(limit, s.read_exact(&mut back)).await {
        Ok(r) => r.map(|_| back),
        Err(_) => Err(std::io::ErrorKind::TimedOut.into()),
    }
}

fn data(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8).collect()
}

#[tokio::test]
async fn no_toxics_forwards_bytes_unchanged() {
    let p = proxy("none").await;
    let d = data(100_000);
    assert_eq!(round_trip(&p, &d, Duration::from_secs(5)).await.unwrap(), d);
    assert_eq!(p.connections().len(), 1);
}

#[tokio::test]
async fn latency_delays_both_ways_and_keeps_order() {
    let p = proxy(
        r#"{"toxics":[
        {"type":"latency","latency_ms":100,"jitter_ms":0,"stream":"upstream"},
        {"type":"latency","latency_ms":100,"jitter_ms":0,"stream":"downstream"}]}"#,
    )
    .await;
    let d = data(50_000);
    let t = std::time::Instant::now();
    assert_eq!(round_trip(&p, &d, Duration::from_secs(5)).await.unwrap(), d);
    assert!(
        t.elapsed() >= Duration::from_millis(200),
        "{:?}",
        t.elapsed()
    );
}

#[tokio::test]
async fn slicer_and_bandwidth_deliver_every_byte_in_order() {
    let p = proxy(
        r#"{"toxics":[
        {"type":"slicer","average_size":7,"size_variation":6,"delay_us":0,"stream":"upstream"},
        {"type":"bandwidth","rate_kbps":200,"stream":"downstream"}]}"#,
    )
    .await;
    let d = data(40_000);
    let t = std::time::Instant::now();
    assert_eq!(round_trip(&p, &d, Duration::from_secs(5)).await.unwrap(), d);
    // 40 KB at 200 KB/s downstream: at least ~0.2 s
    assert!(
        t.elapsed() >= Duration::from_millis(180),
        "{:?}",
        t.elapsed()
    );
}

#[tokio::test]
async fn limit_data_closes_after_the_limit() {
    let p = proxy(r#"{"toxics":[{"type":"limit_data","bytes":1000,"stream":"downstream"}]}"#).await;
    let mut s = TcpStream::connect(p.local_addr()).await.unwrap();
    s.write_all(&data(5_000)).await.unwrap();
    let mut got = Vec::new();
    timeout(Duration::from_secs(5), s.read_to_end(&mut got))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got, data(1_000));
}

#[tokio::test]
async fn reset_peer_resets_the_client() {
    let p =
        proxy(r#"{"toxics":[{"type":"reset_peer","timeout_ms":100,"stream":"upstream"}]}"#).await;
    let mut s = TcpStream::connect(p.local_addr()).await.unwrap();
    let mut buf = [0u8; 16];
    let r = timeout(Duration::from_secs(5), s.read(&mut buf))
        .await
        .unwrap();
    assert_eq!(
        r.unwrap_err().kind(),
        std::io::ErrorKind::ConnectionReset,
        "a reset, not a clean close"
    );
}

#[tokio::test]
async fn half_open_drops_one_direction_and_keeps_the_socket() {
    let p = proxy(r#"{"toxics":[{"type":"half_open","stream":"upstream"}]}"#).await;
    let err = round_trip(&p, b"hello", Duration::from_millis(300))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
}

#[tokio::test]
async fn timeout_holds_then_closes() {
    let p =
        proxy(r#"{"toxics":[{"type":"timeout","timeout_ms":200,"stream":"downstream"}]}"#).await;
    let mut s = TcpStream::connect(p.local_addr()).await.unwrap();
    s.write_all(b"x").await.unwrap();
    let t = std::time::Instant::now();
    let mut got = Vec::new();
    timeout(Duration::from_secs(5), s.read_to_end(&mut got))
        .await
        .unwrap()
        .unwrap();
    assert!(got.is_empty());
    assert!(
        t.elapsed() >= Duration::from_millis(150),
        "{:?}",
        t.elapsed()
    );
}

#[tokio::test]
async fn hold_stalls_then_releases_in_order() {
    let p =
        proxy(r#"{"toxics":[{"type":"hold","after_ms":0,"for_ms":300,"stream":"downstream"}]}"#)
            .await;
    let d = data(10_000);
    let t = std::time::Instant::now();
    assert_eq!(round_trip(&p, &d, Duration::from_secs(5)).await.unwrap(), d);
    assert!(
        t.elapsed() >= Duration::from_millis(250),
        "{:?}",
        t.elapsed()
    );
}

#[tokio::test]
async fn toxicity_per_connection_is_reproducible_from_the_seed() {
    let plan = r#"{"toxics":[{"type":"latency","latency_ms":1,"jitter_ms":0,"stream":"upstream","toxicity":0.5}]}"#;
    let mut seen = Vec::new();
    for _ in 0..2 {
        let p = proxy(plan).await;
        for _ in 0..8 {
            round_trip(&p, b"ping", Duration::from_secs(5))
                .await
                .unwrap();
        }
        seen.push(p.connections());
    }
    assert_eq!(seen[0], seen[1]);
    let applied = seen[0].iter().filter(|c| !c.toxics.is_empty()).count();
    assert!((1..8).contains(&applied), "{applied} of 8 at toxicity 0.5");
}

#[tokio::test]
async fn upstream_connections_keep_the_clients_loopback_address() {
    let l = TcpListener::bind(LOOPBACK).await.unwrap();
    let server = l.local_addr().unwrap();
    let p = FaultProxy::bind(LOOPBACK.parse().unwrap(), server, Plan::none(), 0, true).unwrap();
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind("127.0.0.9:0".parse().unwrap()).unwrap();
    let _client = sock.connect(p.local_addr()).await.unwrap();
    let (_s, seen) = timeout(Duration::from_secs(5), l.accept())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(seen.ip().to_string(), "127.0.0.9");
}
