//! What an abuser does to the `relay` binary over loopback, one bound at a time: each test
//! fills the bound as an outsider would and checks that only the abuser is refused and that
//! what the relay holds for it stays within the documented limit.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{Ipv4Addr, SocketAddr};

use http::Method;
use serde_json::json;
use tokio_tungstenite::tungstenite;

mod common;
use common::{Account, FromAddr, account, call, client, start};

/// The status of a WebSocket upgrade of `a`'s with a fresh ticket (101 when it opened).
async fn ticket_upgrade(relay: SocketAddr, a: &Account) -> u16 {
    let http = client(relay, a.from);
    let v = call(
        &http,
        Method::POST,
        "/api/v1/ws/ticket",
        &json!({}),
        Some(&a.token),
    )
    .await;
    let ticket = v["ticket"].as_str().expect("ticket");
    let url = format!("ws://{relay}/ws?user_uuid={}&ticket={ticket}", a.uuid);
    match tokio_tungstenite::connect_async(url).await {
        Ok((_ws, response)) => response.status().as_u16(),
        Err(tungstenite::Error::Http(response)) => response.status().as_u16(),
        Err(e) => panic!("upgrade failed without an HTTP answer: {e}"),
    }
}

/// One account spending tickets as fast as it can fills only its own share of the
/// spent-credential set: it gets 429 at the bound (its login's challenge counts), and another
/// account's upgrade still opens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn burning_tickets_locks_out_only_the_burner() {
    let relay = start(&[]).await;
    let from = FromAddr(Ipv4Addr::new(127, 0, 0, 1));
    let burner = account(relay.addr, from, 1).await;
    let bystander = account(relay.addr, from, 2).await;
    let cap = relay_core::limits::MAX_SPENT_CREDENTIALS_PER_ACCOUNT;
    let mut opened = 0;
    let mut refused = None;
    for _ in 0..cap + 8 {
        match ticket_upgrade(relay.addr, &burner).await {
            101 => opened += 1,
            s => {
                refused = Some(s);
                break;
            }
        }
    }
    assert_eq!(
        (opened, refused),
        (cap - 1, Some(429)),
        "the burner's upgrades: the bound less its login's challenge, then 429"
    );
    assert_eq!(
        ticket_upgrade(relay.addr, &bystander).await,
        101,
        "another account's upgrade is not refused for the burner's spent set"
    );
}

/// The relay pings every socket on its own schedule, not only after it wrote something: an
/// idle socket hears a ping every `--ws-ping-interval-ms` (so a dead peer or a NAT that forgot
/// the binding is found, and a live one's binding is kept).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_socket_is_pinged_on_the_relay_s_schedule() {
    use futures_util::StreamExt as _;
    let relay = start(&["--ws-ping-interval-ms", "1000"]).await;
    let a = account(relay.addr, FromAddr(Ipv4Addr::new(127, 0, 0, 1)), 3).await;
    let (mut ws, _) = common::connect(relay.addr, &a).await;
    let mut pings = 0;
    // 3.5 s of reading (which answers each ping): the sync's answer, then nothing but pings.
    let listen = async {
        while let Some(Ok(message)) = ws.next().await {
            if message.is_ping() {
                pings += 1;
            }
        }
    };
    let _ = tokio::time::timeout(std::time::Duration::from_millis(3_500), listen).await;
    assert!(
        pings >= 3,
        "{pings} pings in 3.5 s of an idle socket with a 1 s ping interval"
    );
}

#[test]
fn a_ping_interval_out_of_range_is_refused() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_relay"))
        .args(["--memory", "--ws-ping-interval-ms", "10", "--check-config"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "a 10 ms ping interval was accepted");
}
