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

/// Bytes of one full media part.
const PART: usize = wire::limits::MAX_MEDIA_PART_BYTES;

/// Starts an upload of `a`'s: `(upload_id, media_key)`, or the refusal's status and code.
async fn init_upload(relay: SocketAddr, a: &Account) -> Result<(String, String), (u16, String)> {
    let http = client(relay, a.from);
    let req = seam::net::HttpRequest::new(Method::POST, "/api/v1/media/upload-parts/init")
        .json(&json!({"content_type": "application/octet-stream"}))
        .unwrap()
        .bearer(&a.token);
    let r = http.send(req).await.unwrap();
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap_or_default();
    if r.status.is_success() {
        Ok((
            v["upload_id"].as_str().unwrap().to_owned(),
            v["media_key"].as_str().unwrap().to_owned(),
        ))
    } else {
        Err((
            r.status.as_u16(),
            v["error"].as_str().unwrap_or("").to_owned(),
        ))
    }
}

/// Sends part `n` of `len` bytes; the status and error code.
async fn put_part(
    relay: SocketAddr,
    a: &Account,
    up: &(String, String),
    n: u32,
    len: usize,
) -> (u16, String) {
    let http = client(relay, a.from);
    let path = format!(
        "/api/v1/media/upload-parts/{}/chunk?mediaKey={}&partNumber={n}",
        up.0, up.1
    );
    let req = seam::net::HttpRequest::new(Method::POST, path)
        .body(vec![n as u8; len])
        .bearer(&a.token);
    let r = http.send(req).await.unwrap();
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap_or_default();
    (
        r.status.as_u16(),
        v["error"].as_str().unwrap_or("").to_owned(),
    )
}

/// Bytes of regular files under `dir`.
fn bytes_under(dir: &std::path::Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let meta = entry.metadata().unwrap();
        total += if meta.is_dir() {
            bytes_under(&entry.path())
        } else {
            meta.len()
        };
    }
    total
}

/// Unfinished uploads on `--memory`: parts go to the spool directory, not the relay's memory;
/// they count against the quota `storage/estimate` reports (about 100 MiB of media), past
/// which a part is refused 403 `QUOTA_EXCEEDED`; at most ten are open at once; the spool
/// directory goes when the relay exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unfinished_uploads_stay_inside_the_quota_and_out_of_memory() {
    let spool = tempfile::tempdir().unwrap();
    let mut relay = start(&["--spool-dir", spool.path().to_str().unwrap()]).await;
    let a = account(relay.addr, FromAddr(Ipv4Addr::new(127, 0, 0, 1)), 4).await;
    let rss_before = relay.rss_bytes();
    let mut uploads = Vec::new();
    for _ in 0..10 {
        uploads.push(
            init_upload(relay.addr, &a)
                .await
                .expect("an upload within the allowance"),
        );
    }
    assert_eq!(init_upload(relay.addr, &a).await.unwrap_err().0, 429);
    // Full parts spread over the ten unfinished uploads until the quota refuses one.
    let quota = relay_core::limits::MAX_MEDIA_BYTES_PER_USER;
    let mut stored = 0u64;
    let mut refused = None;
    'fill: for n in 1..=3u32 {
        for up in &uploads {
            match put_part(relay.addr, &a, up, n, PART).await {
                (200, _) => stored += PART as u64,
                other => {
                    refused = Some(other);
                    break 'fill;
                }
            }
        }
    }
    assert_eq!(
        stored, quota,
        "full parts stored before the quota refused one"
    );
    assert_eq!(refused, Some((403, "QUOTA_EXCEEDED".to_owned())));
    let http = client(relay.addr, a.from);
    let est = call(
        &http,
        Method::GET,
        "/api/v1/storage/estimate",
        &json!(null),
        Some(&a.token),
    )
    .await;
    assert_eq!(est["used_bytes"].as_u64(), Some(quota));
    assert!(est["quota_bytes"].as_u64().unwrap() >= quota, "{est}");
    // The bytes are on disk in the spool, not in the relay's memory.
    assert!(
        bytes_under(spool.path()) >= quota,
        "spooled {}",
        bytes_under(spool.path())
    );
    let grown = relay.rss_bytes().saturating_sub(rss_before);
    assert!(
        grown < quota / 2,
        "the relay's RSS grew {} MiB while holding {} MiB of unfinished uploads",
        grown >> 20,
        quota >> 20
    );
    assert!(relay.terminate(), "SIGTERM: a clean exit");
    assert_eq!(
        std::fs::read_dir(spool.path()).unwrap().count(),
        0,
        "the spool directory is removed at exit"
    );
}

/// One network trying to corner the vanity catalogue without an account: its reserves stop at
/// the per-network bound (429), search still lists the rest from anywhere, and a buyer from
/// another network gets a featured alias.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_network_cannot_corner_the_vanity_catalogue() {
    let relay = start(&[]).await;
    let search = |from: Ipv4Addr| async move {
        let http = client(relay.addr, FromAddr(from));
        let v = call(
            &http,
            Method::GET,
            "/api/v1/vanity/search",
            &json!(null),
            None,
        )
        .await;
        v.as_array()
            .unwrap()
            .iter()
            .map(|i| i["alias_id"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    let abuser = Ipv4Addr::new(127, 0, 0, 2);
    let featured = search(abuser).await;
    let http = client(relay.addr, FromAddr(abuser));
    let mut held = 0;
    let mut refused = None;
    for alias in &featured {
        let req = seam::net::HttpRequest::new(Method::POST, "/api/v1/vanity/reserve")
            .json(&json!({ "alias_id": alias }))
            .unwrap();
        match http.send(req).await.unwrap().status.as_u16() {
            201 => held += 1,
            s => {
                refused = Some(s);
                break;
            }
        }
    }
    assert_eq!(
        (held, refused),
        (relay_core::limits::VANITY_HOLDS_PER_NETWORK, Some(429)),
        "reserves from one network"
    );
    let left = search(Ipv4Addr::new(127, 0, 0, 3)).await;
    assert!(
        left.len() >= featured.len().min(40),
        "search shows {} featured aliases after the abuser's holds (was {})",
        left.len(),
        featured.len()
    );
    let buyer = account(relay.addr, FromAddr(Ipv4Addr::new(127, 0, 0, 3)), 5).await;
    let http = client(relay.addr, buyer.from);
    let req = seam::net::HttpRequest::new(Method::POST, "/api/v1/vanity/purchase")
        .json(&json!({ "alias_id": left[0] }))
        .unwrap()
        .bearer(&buyer.token);
    assert_eq!(http.send(req).await.unwrap().status.as_u16(), 201);
}

/// Sends `msg` frames of the largest payload from `ws` to `to` in `conv` until the relay
/// refuses one; how many it acknowledged.
async fn flood(ws: &mut common::Ws, to: &str, conv: &str, tag: usize) -> usize {
    use futures_util::{SinkExt as _, StreamExt as _};
    let payload = "QUJD".repeat(wire::limits::MAX_MSG_PAYLOAD_BYTES / 4);
    let mut acked = 0;
    loop {
        let id = format!("f{tag}-{acked}");
        let frame = json!({"type": "msg", "id": id, "to": to, "conv_id": conv,
                           "crypto_v": 1, "payload": payload});
        ws.send(frame.to_string().into()).await.unwrap();
        loop {
            let Some(Ok(m)) = ws.next().await else {
                panic!("the sender's socket ended");
            };
            let Ok(text) = m.to_text() else { continue };
            let Ok(f) = serde_json::from_str::<serde_json::Value>(text) else {
                continue;
            };
            if f["type"] == "ack" && f["id"] == id.as_str() {
                acked += 1;
                break;
            }
            if f["type"] == "error" {
                return acked;
            }
        }
    }
}

/// Receives and marks delivered everything queued for `ws`'s account, until `n` came.
async fn drain(ws: &mut common::Ws, n: usize) {
    use futures_util::{SinkExt as _, StreamExt as _};
    let mut got = 0;
    while got < n {
        let Some(Ok(m)) = ws.next().await else {
            panic!("the recipient's socket ended after {got} of {n}");
        };
        let Ok(text) = m.to_text() else { continue };
        let Ok(f) = serde_json::from_str::<serde_json::Value>(text) else {
            continue;
        };
        if f["type"] == "msg" {
            got += 1;
            let receipt = json!({"type": "delivered", "conv_id": f["conv_id"], "seq": f["seq"],
                                 "to": f["from"], "crypto_v": 1});
            ws.send(receipt.to_string().into()).await.unwrap();
        }
    }
}

/// Many accounts each filling an offline recipient's queue, with a queue cache small enough
/// that the relay reads queues back again and again: once everything is delivered the
/// process gives the memory back (RSS within 48 MiB of where it started), rather than keeping
/// the flood's high-water mark.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_is_given_back_after_a_flood_is_delivered() {
    const PAIRS: usize = 40;
    let relay = start(&["--queue-cache-bytes", "1048576"]).await;
    let mut pairs = Vec::new();
    for i in 0..PAIRS {
        // Ten registrations an hour per address: each pair from addresses of its own.
        let net = u8::try_from(i).unwrap();
        let s = account(relay.addr, FromAddr(Ipv4Addr::new(127, 1, net, 1)), 2 * net).await;
        let r = account(
            relay.addr,
            FromAddr(Ipv4Addr::new(127, 1, net, 2)),
            2 * net + 1,
        )
        .await;
        let conv = common::befriend(relay.addr, &s, &r).await;
        pairs.push((s, r, conv));
    }
    let mut senders = Vec::new();
    for (s, _, _) in &pairs {
        senders.push(common::connect(relay.addr, s).await.0);
    }
    let start_rss = relay.rss_bytes();
    let mut queued = Vec::new();
    for (i, ((_, r, conv), ws)) in pairs.iter().zip(senders.iter_mut()).enumerate() {
        queued.push(flood(ws, &r.alias, conv, i).await);
    }
    let flooded_rss = relay.rss_bytes();
    for ((_, r, _), n) in pairs.iter().zip(&queued) {
        let (mut ws, _) = common::connect(relay.addr, r).await;
        drain(&mut ws, *n).await;
    }
    let total: usize = queued.iter().sum();
    assert!(total > PAIRS * 30, "{total} messages queued");
    // The allocator gives freed pages back within a few seconds.
    let mut after = relay.rss_bytes();
    for _ in 0..40 {
        if after < start_rss + (48 << 20) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        after = relay.rss_bytes();
    }
    assert!(
        after < start_rss + (48 << 20),
        "RSS {} MiB at the start, {} MiB flooded ({total} messages), {} MiB after every message was delivered",
        start_rss >> 20,
        flooded_rss >> 20,
        after >> 20
    );
}
