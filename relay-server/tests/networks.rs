//! Per-address bounds count networks, not addresses, on the `relay` binary: a client that
//! holds many addresses of one network (an IPv6 /64; here a loopback /24, as `127.0.0.0/8`
//! is all loopback) is one client for registrations, connections and user lookups. With the
//! default prefixes (IPv4 /32) each loopback address is a client of its own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{Ipv4Addr, SocketAddr};
use std::process::Command;
use std::time::Duration;

use client_core::encoding::to_base64;
use client_core::keys::{EcdhKeyPair, SigningKeyPair};
use http::Method;
use seam::net::HttpRequest;
use serde_json::json;
use tokio::io::AsyncReadExt as _;
use tokio::net::TcpSocket;

mod common;
use common::{Account, FromAddr, account, client, start};

fn loopback(last: u8) -> FromAddr {
    FromAddr(Ipv4Addr::new(127, 0, 0, last))
}

/// The status of a registration from `from` (`k` picks the keys).
async fn register_status(relay: SocketAddr, from: FromAddr, k: u8) -> u16 {
    let signing = SigningKeyPair::from_private_bytes(&[k; 32]);
    let ecdh = EcdhKeyPair::from_private_bytes([k.wrapping_add(100); 32]);
    let body = json!({
        "ed25519_public_key": to_base64(&signing.public_key()),
        "x25519_public_key": to_base64(&ecdh.public_key()),
        "nickname": format!("n{k}"),
        "pow_nonce": "0",
    });
    let req = HttpRequest::new(Method::POST, "/api/v1/register")
        .json(&body)
        .unwrap();
    client(relay, from).send(req).await.unwrap().status.as_u16()
}

/// How many of `n` lookups of `alias` by `who` were answered 2xx.
async fn lookups(relay: SocketAddr, who: &Account, alias: &str, n: u32) -> u32 {
    let http = client(relay, who.from);
    let mut granted = 0;
    for _ in 0..n {
        let req = HttpRequest::get(format!("/api/v1/users/{alias}")).bearer(&who.token);
        let status = http.send(req).await.unwrap().status.as_u16();
        assert!(status == 200 || status == 429, "lookup answered {status}");
        granted += u32::from(status == 200);
    }
    granted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_24_is_one_client_for_registrations_and_lookups() {
    let relay = start(&["--ipv4-prefix", "24"]).await;
    let mut accounts = Vec::new();
    for k in 1..=10 {
        accounts.push(account(relay.addr, loopback(k + 1), k).await);
    }
    // The eleventh registration of the hour from the /24, from an address not used before.
    assert_eq!(register_status(relay.addr, loopback(200), 50).await, 429);
    // Three accounts of the /24, 30 lookups each: the network's 60, not 90.
    let target = accounts[9].alias.clone();
    let mut granted = 0;
    for a in &accounts[..3] {
        granted += lookups(relay.addr, a, &target, 30).await;
    }
    assert_eq!(
        granted,
        relay_core::limits::USER_LOOKUPS_PER_NETWORK.burst,
        "lookups granted to three accounts of one network"
    );
    // Another network (127.0.1.0/24) registers and looks up on its own budgets.
    let other = account(relay.addr, FromAddr(Ipv4Addr::new(127, 0, 1, 9)), 60).await;
    assert_eq!(lookups(relay.addr, &other, &target, 5).await, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_each_ipv4_address_is_a_client_of_its_own() {
    let relay = start(&[]).await;
    let mut accounts = Vec::new();
    for k in 1..=11 {
        accounts.push(account(relay.addr, loopback(k + 1), k).await);
    }
    let target = accounts[10].alias.clone();
    let mut granted = 0;
    for a in &accounts[..3] {
        granted += lookups(relay.addr, a, &target, 30).await;
    }
    assert_eq!(granted, 90);
}

/// Holds a TCP connection from `from`; `true` when the relay closed it at once.
async fn closed_at_once(relay: SocketAddr, from: Ipv4Addr) -> (bool, tokio::net::TcpStream) {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::from((from, 0))).unwrap();
    let mut stream = socket.connect(relay).await.unwrap();
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_millis(500), stream.read(&mut byte)).await;
    (matches!(read, Ok(Ok(0) | Err(_))), stream)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_per_network_are_capped_across_its_addresses() {
    let relay = start(&["--ipv4-prefix", "24", "--max-connections-per-addr", "2"]).await;
    let (first, _a) = closed_at_once(relay.addr, Ipv4Addr::new(127, 0, 0, 2)).await;
    let (second, _b) = closed_at_once(relay.addr, Ipv4Addr::new(127, 0, 0, 3)).await;
    let (third, _c) = closed_at_once(relay.addr, Ipv4Addr::new(127, 0, 0, 4)).await;
    let (elsewhere, _d) = closed_at_once(relay.addr, Ipv4Addr::new(127, 0, 1, 4)).await;
    assert_eq!(
        (first, second, third, elsewhere),
        (false, false, true, false),
        "the /24's third connection is closed at once; another /24's is not"
    );
}

#[test]
fn a_prefix_out_of_range_is_refused_with_the_range() {
    for (flag, value) in [("--ipv4-prefix", "33"), ("--ipv6-prefix", "8")] {
        let out = Command::new(env!("CARGO_BIN_EXE_relay"))
            .args(["--memory", flag, value, "--check-config"])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{flag} {value} accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(flag) && err.contains(".."), "{err}");
    }
}
