//! Every request the async client makes, pinned to the table of PROTOCOL.md (§1): method,
//! path, `Content-Type` and the body's fields, in the web client's (TS SDK's) form where the
//! reference clients disagree. The client talks to our relay on loopback through a recording
//! proxy; each request it sends must match a row, and every row the client implements is seen.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use client::{Client, ClientOptions, SharedStore};
use relay_core::{Config, MemoryBlobStore, store::MemoryStore};
use relay_server::RelayServer;
use seam::clock::SystemClock;
use seam::net::{Endpoint, Listener as _, Network, Tokio};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// A request as it went on the wire.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    content_type: Option<String>,
    body: Vec<u8>,
}

/// What a row allows: its id in PROTOCOL.md, method, path (`{x}` one segment; a query is
/// compared by its parameter names), the body (`None`: no body and no `Content-Type`; `Some`:
/// JSON with exactly these fields, `?` marking an optional one) or raw bytes.
struct Row {
    id: &'static str,
    method: &'static str,
    path: &'static str,
    body: Body,
}

enum Body {
    None,
    Json(&'static [&'static str]),
    Octets,
}

/// PROTOCOL.md §1, as the web client (TS SDK) sends it.
const TABLE: &[Row] = &[
    Row {
        id: "A1",
        method: "POST",
        path: "/api/v1/pow/challenge",
        body: Body::Json(&[]),
    },
    Row {
        id: "A2",
        method: "POST",
        path: "/api/v1/register",
        body: Body::Json(&[
            "ed25519_public_key",
            "x25519_public_key",
            "nickname",
            "pow_nonce?",
        ]),
    },
    Row {
        id: "A3",
        method: "POST",
        path: "/api/v1/auth/challenge",
        body: Body::Json(&["user_uuid"]),
    },
    Row {
        id: "A4",
        method: "POST",
        path: "/api/v1/auth/verify",
        body: Body::Json(&["user_uuid", "challenge", "signature"]),
    },
    Row {
        id: "A5",
        method: "POST",
        path: "/api/v1/ws/ticket",
        body: Body::Json(&[]),
    },
    Row {
        id: "F1",
        method: "GET",
        path: "/api/v1/friends",
        body: Body::None,
    },
    Row {
        id: "F2",
        method: "POST",
        path: "/api/v1/friends/request",
        body: Body::Json(&["to_alias_id"]),
    },
    Row {
        id: "F3",
        method: "PUT",
        path: "/api/v1/friends/{friendship_id}/accept",
        body: Body::None,
    },
    Row {
        id: "F5",
        method: "GET",
        path: "/api/v1/users/{alias_id}",
        body: Body::None,
    },
    Row {
        id: "CH1",
        method: "GET",
        path: "/api/v1/channels/search?q",
        body: Body::None,
    },
    Row {
        id: "CH2",
        method: "GET",
        path: "/api/v1/channels/mine",
        body: Body::None,
    },
    Row {
        id: "CH3",
        method: "GET",
        path: "/api/v1/channels/{id}",
        body: Body::None,
    },
    Row {
        id: "CH4",
        method: "POST",
        path: "/api/v1/channels",
        body: Body::Json(&["name", "description", "is_public"]),
    },
    Row {
        id: "CH5",
        method: "POST",
        path: "/api/v1/channels/{id}/subscribe",
        body: Body::Json(&[]),
    },
    Row {
        id: "CH6",
        method: "DELETE",
        path: "/api/v1/channels/{id}/subscribe",
        body: Body::None,
    },
    Row {
        id: "CH7",
        method: "POST",
        path: "/api/v1/channels/{id}/posts",
        body: Body::Json(&["type", "content"]),
    },
    Row {
        id: "CH8",
        method: "GET",
        path: "/api/v1/channels/{id}/posts",
        body: Body::None,
    },
    Row {
        id: "CH9",
        method: "POST",
        path: "/api/v1/vanity/list-channel",
        body: Body::Json(&["channel_id", "price_usdt"]),
    },
    Row {
        id: "CH10",
        method: "POST",
        path: "/api/v1/channels/{id}/buy",
        body: Body::Json(&[]),
    },
    Row {
        id: "CH11",
        method: "POST",
        path: "/api/v1/channels/quota/buy",
        body: Body::Json(&[]),
    },
    Row {
        id: "V1",
        method: "GET",
        path: "/api/v1/vanity/search",
        body: Body::None,
    },
    Row {
        id: "V1 (q)",
        method: "GET",
        path: "/api/v1/vanity/search?q",
        body: Body::None,
    },
    Row {
        id: "V2",
        method: "POST",
        path: "/api/v1/vanity/purchase",
        body: Body::Json(&["alias_id"]),
    },
    Row {
        id: "V3",
        method: "POST",
        path: "/api/v1/vanity/bind",
        body: Body::Json(&["order_id"]),
    },
    Row {
        id: "V4",
        method: "POST",
        path: "/api/v1/vanity/reserve",
        body: Body::Json(&["alias_id"]),
    },
    Row {
        id: "V5",
        method: "GET",
        path: "/api/v1/vanity/order/{order_id}/status",
        body: Body::None,
    },
    Row {
        id: "M1",
        method: "POST",
        path: "/api/v1/media/upload-parts/init",
        body: Body::Json(&["content_type"]),
    },
    Row {
        id: "M2",
        method: "POST",
        path: "/api/v1/media/upload-parts/{upload_id}/chunk?mediaKey&partNumber",
        body: Body::Octets,
    },
    Row {
        id: "M3",
        method: "POST",
        path: "/api/v1/media/upload-parts/{upload_id}/complete",
        body: Body::Json(&["media_key", "parts"]),
    },
    Row {
        id: "M4",
        method: "GET",
        path: "/api/v1/media/download?key",
        body: Body::None,
    },
    Row {
        id: "P1",
        method: "GET",
        path: "/api/v1/push/vapid-key",
        body: Body::None,
    },
    Row {
        id: "P2",
        method: "POST",
        path: "/api/v1/push/subscribe",
        body: Body::Json(&["endpoint", "keys"]),
    },
    Row {
        id: "K1",
        method: "GET",
        path: "/api/v1/calls/ice-config",
        body: Body::None,
    },
    Row {
        id: "WS",
        method: "GET",
        path: "/ws?user_uuid&ticket",
        body: Body::None,
    },
];

fn path_matches(template: &str, path: &str) -> bool {
    let (tp, tq) = template.split_once('?').unwrap_or((template, ""));
    let (pp, pq) = path.split_once('?').unwrap_or((path, ""));
    let ts: Vec<&str> = tp.split('/').collect();
    let ps: Vec<&str> = pp.split('/').collect();
    let names = |q: &str| -> BTreeSet<String> {
        q.split('&')
            .filter(|kv| !kv.is_empty())
            .map(|kv| kv.split('=').next().unwrap_or_default().to_owned())
            .collect()
    };
    ts.len() == ps.len()
        && ts
            .iter()
            .zip(&ps)
            .all(|(t, p)| t == p || (t.starts_with('{') && !p.is_empty()))
        && names(tq) == names(pq)
}

/// The row `seen` matches, or why none does.
fn row_of(seen: &Seen) -> Result<&'static str, String> {
    // A literal segment wins over a placeholder (`channels/quota/buy` is CH11, not CH10).
    let mut candidates: Vec<&Row> = TABLE
        .iter()
        .filter(|r| path_matches(r.path, &seen.path))
        .collect();
    candidates.sort_by_key(|r| r.path.matches('{').count());
    let Some(row) = candidates.iter().find(|r| r.method == seen.method) else {
        return Err(format!(
            "{} {}: {}",
            seen.method,
            seen.path,
            if candidates.is_empty() {
                "no such route in PROTOCOL.md".to_owned()
            } else {
                format!("PROTOCOL.md has it as {}", candidates[0].method)
            }
        ));
    };
    let what = format!("{} {} ({})", seen.method, seen.path, row.id);
    match row.body {
        Body::None => {
            if !seen.body.is_empty() || seen.content_type.is_some() {
                return Err(format!(
                    "{what}: sends a body or Content-Type; the web client sends neither"
                ));
            }
        }
        Body::Octets => {
            if seen.content_type.as_deref() != Some("application/octet-stream") {
                return Err(format!("{what}: Content-Type {:?}", seen.content_type));
            }
        }
        Body::Json(fields) => {
            if seen.content_type.as_deref() != Some("application/json") {
                return Err(format!("{what}: Content-Type {:?}", seen.content_type));
            }
            let v: Value = serde_json::from_slice(&seen.body)
                .map_err(|e| format!("{what}: body is not JSON: {e}"))?;
            let got: BTreeSet<&str> = v
                .as_object()
                .map(|o| o.keys().map(String::as_str).collect())
                .unwrap_or_default();
            let allowed: BTreeSet<&str> = fields.iter().map(|f| f.trim_end_matches('?')).collect();
            let required: BTreeSet<&str> = fields
                .iter()
                .filter(|f| !f.ends_with('?'))
                .copied()
                .collect();
            if !got.is_subset(&allowed) || !required.is_subset(&got) {
                return Err(format!(
                    "{what}: body fields {got:?}, PROTOCOL.md: {fields:?}"
                ));
            }
        }
    }
    Ok(row.id)
}

/// A proxy that records each request (method, path, Content-Type, body) before forwarding it.
async fn recording_proxy(upstream: SocketAddr, log: Arc<Mutex<Vec<Seen>>>) -> SocketAddr {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let log = Arc::clone(&log);
            tokio::spawn(async move {
                let Ok(server) = TcpStream::connect(upstream).await else {
                    return;
                };
                let (cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                tokio::spawn(async move { tokio::io::copy(&mut sr, &mut cw).await });
                let mut cr = BufReader::new(cr);
                loop {
                    let mut head = Vec::new();
                    loop {
                        let mut line = Vec::new();
                        if cr.read_until(b'\n', &mut line).await.unwrap_or(0) == 0 {
                            return;
                        }
                        head.extend_from_slice(&line);
                        if line == b"\r\n" {
                            break;
                        }
                    }
                    let text = String::from_utf8_lossy(&head).into_owned();
                    let mut lines = text.split("\r\n");
                    let mut first = lines.next().unwrap_or_default().split(' ');
                    let (method, path) = (
                        first.next().unwrap_or_default(),
                        first.next().unwrap_or_default(),
                    );
                    let header = |name: &str| {
                        text.split("\r\n").skip(1).find_map(|l| {
                            let (k, v) = l.split_once(':')?;
                            k.trim()
                                .eq_ignore_ascii_case(name)
                                .then(|| v.trim().to_owned())
                        })
                    };
                    let n: usize = header("content-length")
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0);
                    let mut body = vec![0; n];
                    if cr.read_exact(&mut body).await.is_err() {
                        return;
                    }
                    log.lock().unwrap().push(Seen {
                        method: method.to_owned(),
                        path: path.to_owned(),
                        content_type: header("content-type"),
                        body: body.clone(),
                    });
                    if sw.write_all(&head).await.is_err() || sw.write_all(&body).await.is_err() {
                        return;
                    }
                    if header("upgrade").is_some() {
                        drop(tokio::io::copy(&mut cr, &mut sw).await);
                        return;
                    }
                }
            });
        }
    });
    addr
}

fn mnemonic(seed: u8) -> String {
    use rand_core::SeedableRng as _;
    let mut rng = rand_chacha::ChaCha20Rng::from_seed([seed; 32]);
    client_core::keys::new_mnemonic(&mut rng)
        .expose()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_matches_protocol_md() {
    let listener = Tokio::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .await
        .unwrap();
    let relay = listener.local_addr().unwrap();
    let config = Config {
        pow_difficulty: 1,
        ..Config::default()
    };
    let server = RelayServer::in_memory(config, 5, MemoryStore::new(), MemoryBlobStore::new());
    tokio::spawn(server.serve::<Tokio>(listener, std::future::pending()));
    let log = Arc::new(Mutex::new(Vec::new()));
    let proxy = recording_proxy(relay, Arc::clone(&log)).await;
    let endpoint = Endpoint::from(proxy);
    let start = |seed: u8| {
        let options = ClientOptions::new(endpoint.clone(), Arc::new(SystemClock), [seed; 32]);
        Client::<Tokio>::start(SharedStore::new(), options).unwrap()
    };
    let (mut alice, bob) = (start(1), start(2));
    let a = alice.register_account(&mnemonic(1), "alice").await.unwrap();
    let b = bob.register_account(&mnemonic(2), "bob").await.unwrap();
    alice.connect().await.unwrap();
    alice.contacts().send_friend_request(&b).await.unwrap();
    let pending = bob.contacts().sync_friends().await.unwrap();
    let id = pending[0].friendship_id.0.to_string();
    bob.contacts().accept_friend_request(&id).await.unwrap();
    let friends = alice.contacts().sync_friends().await.unwrap();
    let conv = friends[0].conversation_id.clone().unwrap().to_string();
    alice.contacts().lookup_user(&b).await.unwrap();
    // Vanity: search (with and without q), purchase, status, bind (409: unpaid), reserve.
    let items = alice.vanity().search("").await.unwrap();
    drop(alice.vanity().search("8").await);
    let order = alice
        .vanity()
        .purchase(items[0].alias_id.as_str())
        .await
        .unwrap();
    alice
        .vanity()
        .order_status(order.order_id.as_str())
        .await
        .unwrap();
    drop(alice.vanity().bind(order.order_id.as_str()).await);
    drop(bob.vanity().reserve(items[1].alias_id.as_str()).await);
    // Channels.
    let ch = alice.channels().create("routes", "d", true).await.unwrap();
    let ch = ch.channel_id.to_string();
    alice.channels().search("routes").await.unwrap();
    alice.channels().mine().await.unwrap();
    alice.channels().detail(&ch).await.unwrap();
    bob.channels().subscribe(&ch).await.unwrap();
    bob.channels().unsubscribe(&ch).await.unwrap();
    alice
        .channels()
        .post(&ch, "hi", wire::http::PostType::Text)
        .await
        .unwrap();
    bob.channels().posts(&ch).await.unwrap();
    alice.channels().list_for_sale(&ch, 7).await.unwrap();
    bob.channels().buy(&ch).await.unwrap();
    bob.channels().buy_quota().await.unwrap();
    // Media, push, calls.
    let key = alice.media().upload(&conv, b"bytes").await.unwrap();
    drop(alice.media().download_decrypted(&key, &conv).await);
    alice.push().vapid_key().await.unwrap();
    let sub = wire::http::PushSubscribeRequest {
        endpoint: "https://push.example.invalid/x".into(),
        keys: wire::http::PushKeys {
            p256dh: "BGsX0fLhLEJH-Lzm5WOkQPJ3A32BLeszoPShOUXYmMKWT-NC4v4af5uO5-tKfA-eFivOM1drMV7Oy7ZAaDe_UfU".into(),
            auth: "AAECAwQFBgcICQoLDA0ODw".into(),
        },
    };
    drop(alice.push().subscribe(&sub).await);
    alice.init_calls(&a, false);
    drop(alice.calls().unwrap().ice_config().await);

    let seen = log.lock().unwrap().clone();
    let mut rows = BTreeSet::new();
    let mut wrong = Vec::new();
    for s in &seen {
        match row_of(s) {
            Ok(id) => {
                rows.insert(id);
            }
            Err(why) => wrong.push(why),
        }
    }
    assert!(
        wrong.is_empty(),
        "requests unlike PROTOCOL.md:\n{}",
        wrong.join("\n")
    );
    let missing: Vec<&str> = TABLE
        .iter()
        .map(|r| r.id)
        .filter(|id| !rows.contains(id))
        .collect();
    assert!(
        missing.is_empty(),
        "rows the client never sent: {missing:?} (sent {rows:?})"
    );
}
