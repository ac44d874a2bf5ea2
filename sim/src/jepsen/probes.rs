//! Probes after healing, on a calm network: what the traffic window cannot show.
//!
//! * **Strangers** (`authz`, what the documents require): two accounts made by hand over
//!   HTTP and spoken to over raw WebSockets, never friends of the ring. `x` asks `y` for
//!   friendship and `y` rejects it; then `x` tries, each attempt judged by what the relay
//!   did, never by how it worded a refusal:
//!
//!   | attempt by `x` | breach |
//!   |---|---|
//!   | a `msg` to `y`, the rejecter, in the conversation its friends list names (a fresh id when none) | `x` gets an `ack`, or `y`'s socket the message |
//!   | a `msg` into a ring conversation it is not a member of | `x` gets an `ack`, or the ring member's socket the message |
//!   | a `read` and a `delivered` for seq [`FORGED_SEQ`] in that conversation | the ring member's socket receives a receipt for that seq |
//!   | a `retract` of a ring member's message | the other member's socket receives a `retract` of it |
//!
//! * **Receipt kept** (`receipt-kept`, a SHOULD: the documents keep messages for offline
//!   recipients and say receipts are forwarded, not that they are kept): in the first ring
//!   conversation `a`–`b`, `b` goes offline, `a` sends and gets its ack, `a` goes offline,
//!   `b` comes back and receives the message (its client sends `delivered`), `b` sends a
//!   message of its own and gets its ack (so the relay has read the receipt before it), `a`
//!   comes back: within [`PROBE_WAIT_MS`] its message must show `delivered` (or `read`).
//!
//! A probe whose steps did not happen (an account not made, a message not acknowledged)
//! judges nothing and says so (a `setup` line).

use std::collections::BTreeMap;
use std::time::Duration;

use client_core::store::{ClientStore as _, MessageStatus};
use futures_util::{SinkExt as _, StreamExt as _};
use rand_chacha::ChaCha20Rng;
use rand_core::{Rng as _, SeedableRng as _};
use serde_json::{Value, json};
use wire::http::paths;

use super::apps::{App, History};
use super::derive;
use crate::hostile::http::{RawAccount, field, get, post, register_with};
use crate::violation::{Oracle, Violation};
use crate::wiretap::WireSeen;
use seam::net::{Endpoint, HttpClient, TokioConnector, WsMessage, WsRequest, WsStream};

/// How long a probe waits for each step (an ack, a delivery, a receipt).
pub const PROBE_WAIT_MS: u64 = 10_000;
/// How long the strangers' sockets are watched after their attempts.
const WATCH_MS: u64 = 2_000;
/// The seq the strangers' forged receipts name (no ring conversation gets near it).
pub const FORGED_SEQ: u64 = 1_000_000;
/// Pause between polls of a client's store.
const POLL_MS: u64 = 100;

/// What the probes found.
#[derive(Debug, Default)]
pub(super) struct ProbeReport {
    /// Breaches of what the documents require (`authz`).
    pub(super) must: Vec<Violation>,
    /// Findings against what the documents recommend (`receipt-kept`).
    pub(super) should: Vec<Violation>,
    /// Steps that did not happen (nothing was judged there).
    pub(super) not_run: Vec<String>,
    /// The strangers' attempts, and the ring sockets they were judged at.
    pub(super) stranger_attempts: u32,
    /// Receipt probes judged.
    pub(super) receipt_probes: u32,
}

/// What the strangers sent, to be found again at the ring's sockets.
#[derive(Debug, Default)]
pub(super) struct Forged {
    /// Message ids of the strangers' `msg` frames into the ring, with the member they named.
    msgs: Vec<(String, usize)>,
    /// `(conversation, member)` that must get no receipt for [`FORGED_SEQ`].
    receipts: Vec<(String, usize)>,
    /// `(message id, member)` that must get no `retract` of it.
    retracts: Vec<(String, usize)>,
}

impl Forged {
    /// Breaches seen at the ring's sockets.
    pub(super) fn judge(&self, seen: &WireSeen, out: &mut Vec<Violation>) {
        for (id, to) in &self.msgs {
            if seen.msgs.iter().any(|m| m.client == *to && &m.id == id) {
                out.push(Violation::new(
                    Oracle::Authz,
                    format!("a stranger's msg {id} into a conversation it is not a member of reached c{to}"),
                ));
            }
        }
        for (conv, to) in &self.receipts {
            if let Some(r) = seen
                .receipts
                .iter()
                .find(|r| r.client == *to && &r.conv == conv && r.seq == FORGED_SEQ)
            {
                out.push(Violation::new(
                    Oracle::Authz,
                    format!(
                        "a stranger's {} for {conv} seq {FORGED_SEQ} reached c{to}",
                        r.kind
                    ),
                ));
            }
        }
        for (id, to) in &self.retracts {
            if seen.retracts.iter().any(|(c, r)| c == to && r == id) {
                out.push(Violation::new(
                    Oracle::Authz,
                    format!("a stranger's retract of {id}, not its message, reached c{to}"),
                ));
            }
        }
    }
}

type Socket = WsStream<tokio::net::TcpStream>;

/// A uuid-shaped id drawn from `rng`.
fn uuid(rng: &mut ChaCha20Rng) -> String {
    let (a, b) = (rng.next_u64(), rng.next_u64());
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        b >> 52,
        b & 0xffff_ffff_ffff
    )
}

/// Opens `account`'s socket (with a ticket, else the token in the query, as the reference
/// clients do) and asks for its backlog.
async fn open(http: &HttpClient<TokioConnector>, account: &RawAccount) -> Option<Socket> {
    let ticket = post(http, paths::WS_TICKET, Some(&account.token), &json!({}))
        .await
        .filter(|(status, _)| (200..300).contains(status))
        .and_then(|(_, v)| field(&v, "ticket"));
    let credential = ticket.map_or_else(
        || format!("token={}", account.token),
        |t| format!("ticket={t}"),
    );
    let path = format!("{}?user_uuid={}&{credential}", paths::WS, account.uuid);
    let mut ws = http.connect_ws(WsRequest::new(path)).await.ok()?;
    send(&mut ws, &json!({"type": "sync", "crypto_v": 1})).await;
    Some(ws)
}

async fn send(ws: &mut Socket, frame: &Value) {
    // A frame the relay closed the socket on is judged by what did (not) arrive.
    drop(ws.send(WsMessage::text(frame.to_string())).await);
}

/// Every JSON frame `ws` receives within `ms`.
async fn frames(ws: &mut Socket, ms: u64) -> Vec<Value> {
    let mut out = Vec::new();
    let read = async {
        while let Some(Ok(m)) = ws.next().await {
            if let WsMessage::Text(t) = m
                && let Ok(v) = serde_json::from_str::<Value>(t.as_str())
            {
                out.push(v);
            }
        }
    };
    // The watch ends when the time is up (or the relay closed the socket).
    drop(tokio::time::timeout(Duration::from_millis(ms), read).await);
    out
}

/// The strangers' attempts against the ring (`convs`: `(i, j)` → conversation), judged at
/// their own sockets now and at the ring's sockets later ([`Forged::judge`]).
pub(super) async fn strangers(
    endpoint: &Endpoint,
    seed: u64,
    apps: &[App],
    convs: &BTreeMap<(usize, usize), String>,
    history: &History,
    report: &mut ProbeReport,
) -> Forged {
    let mut forged = Forged::default();
    let http = HttpClient::new(TokioConnector, endpoint.clone())
        .with_max_idle(0)
        .with_timeout(Duration::from_millis(PROBE_WAIT_MS));
    let mut rng = ChaCha20Rng::from_seed(derive(seed, 5_000));
    let words = |rng: &mut ChaCha20Rng| client_core::keys::new_mnemonic(rng).expose().to_owned();
    let (wx, wy) = (words(&mut rng), words(&mut rng));
    let (Some(x), Some(y)) = (
        register_with(&http, &wx, "stranger").await,
        register_with(&http, &wy, "rejecter").await,
    ) else {
        report
            .not_run
            .push("strangers: their accounts could not be made".to_owned());
        return forged;
    };
    history.push(
        None,
        json!({"probe": "strangers", "x": x.alias, "y": y.alias}),
    );
    let Some(rejected_conv) = reject(&http, &x, &y, &mut rng).await else {
        report
            .not_run
            .push("strangers: the friend request could not be made and rejected".to_owned());
        return forged;
    };
    let (Some(mut wsx), Some(mut wsy)) = (open(&http, &x).await, open(&http, &y).await) else {
        report
            .not_run
            .push("strangers: their sockets did not open".to_owned());
        return forged;
    };
    let payload = "c3RyYW5nZXI=";
    let mut mine = Vec::new();
    let id = uuid(&mut rng);
    send(&mut wsx, &json!({"type": "msg", "id": id, "to": y.alias, "conv_id": rejected_conv, "crypto_v": 1, "payload": payload})).await;
    mine.push(id.clone());
    report.stranger_attempts += 1;
    if let Some((&(i, j), conv)) = convs.iter().next() {
        let id = uuid(&mut rng);
        let (to_i, to_j) = (
            alias_in(&apps[j], conv, &apps[i].alias).await,
            alias_in(&apps[i], conv, &apps[j].alias).await,
        );
        send(&mut wsx, &json!({"type": "msg", "id": id, "to": to_j, "conv_id": conv, "crypto_v": 1, "payload": payload})).await;
        mine.push(id.clone());
        forged.msgs.push((id, j));
        for kind in ["read", "delivered"] {
            send(
                &mut wsx,
                &json!({"type": kind, "conv_id": conv, "seq": FORGED_SEQ, "to": to_i}),
            )
            .await;
        }
        forged.receipts.push((conv.clone(), i));
        report.stranger_attempts += 3;
        if let Some(victim) = own_message(&apps[i], conv) {
            send(&mut wsx, &json!({"type": "retract", "id": victim, "conv_id": conv, "to": to_j, "crypto_v": 1})).await;
            forged.retracts.push((victim, j));
            report.stranger_attempts += 1;
        }
    }
    let (to_x, to_y) = tokio::join!(frames(&mut wsx, WATCH_MS), frames(&mut wsy, WATCH_MS));
    for f in &to_x {
        let id = f.get("id").and_then(Value::as_str).unwrap_or_default();
        if f["type"] == "ack" && mine.iter().any(|m| m == id) {
            report.must.push(Violation::new(
                Oracle::Authz,
                format!("the relay acknowledged a stranger's msg {id} (seq {}) to a conversation it is not a member of", f["seq"]),
            ));
        }
    }
    if let Some(f) = to_y.iter().find(|f| f["type"] == "msg") {
        report.must.push(Violation::new(
            Oracle::Authz,
            format!(
                "a rejected requester's msg reached the account that rejected it: {}",
                f.get("id").unwrap_or(&Value::Null)
            ),
        ));
    }
    forged
}

/// `x` asks `y` for friendship and `y` rejects it; the conversation id `x`'s friends list
/// then shows for `y` (a fresh one when none).
async fn reject(
    http: &HttpClient<TokioConnector>,
    x: &RawAccount,
    y: &RawAccount,
    rng: &mut ChaCha20Rng,
) -> Option<String> {
    let body = json!({ "to_alias_id": y.alias });
    let (status, _) = post(http, paths::FRIEND_REQUEST, Some(&x.token), &body).await?;
    if !(200..300).contains(&status) {
        return None;
    }
    let (_, friends) = get(http, paths::FRIENDS, &y.token).await?;
    let id = friends.as_array()?.iter().find_map(|f| {
        let received = field(f, "direction").as_deref() == Some("received");
        received.then(|| f.get("friendship_id").map(ToString::to_string))?
    })?;
    let path = paths::FRIEND_REJECT.replace("{friendship_id}", id.trim_matches('"'));
    let (status, _) = post(http, &path, Some(&y.token), &json!({})).await?;
    if !(200..300).contains(&status) {
        return None;
    }
    let listed = get(http, paths::FRIENDS, &x.token)
        .await
        .and_then(|(_, v)| {
            v.as_array()?
                .iter()
                .find(|f| field(f, "alias_id").as_deref() == Some(y.alias.as_str()))
                .and_then(|f| field(f, "conversation_id"))
        })
        .filter(|c| !c.is_empty());
    Some(listed.unwrap_or_else(|| uuid(rng)))
}

/// An acknowledged message `app` sent in `conv`, if any.
fn own_message(app: &App, conv: &str) -> Option<String> {
    app.store
        .snapshot()
        .get_history(conv, None, None)
        .ok()?
        .into_iter()
        .find(|m| m.is_me && m.seq.is_some())
        .map(|m| m.id)
}

/// The alias `app` knows its friend in `conv` by now (a bought alias replaces the one the
/// friend registered with); `fallback` when the friends list does not say.
async fn alias_in(app: &App, conv: &str, fallback: &str) -> String {
    let friends = app
        .client
        .contacts()
        .sync_friends()
        .await
        .unwrap_or_default();
    friends
        .iter()
        .find(|f| {
            f.conversation_id
                .as_ref()
                .is_some_and(|c| c.as_str() == conv)
        })
        .map_or_else(|| fallback.to_owned(), |f| f.alias_id.as_str().to_owned())
}

/// Polls `cond` every [`POLL_MS`] for at most [`PROBE_WAIT_MS`].
async fn within(mut cond: impl FnMut() -> bool) -> bool {
    for _ in 0..PROBE_WAIT_MS / POLL_MS {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
    cond()
}

/// The status of message `id` in `app`'s store (`conv`), if it has it.
fn status(app: &App, conv: &str, id: &str) -> Option<(MessageStatus, Option<u64>)> {
    app.store
        .snapshot()
        .get_history(conv, None, None)
        .ok()?
        .into_iter()
        .find(|m| m.id == id)
        .map(|m| (m.status, m.seq))
}

/// The receipt-kept probe over the first ring conversation (see the module's docs).
pub(super) async fn receipt_kept(
    apps: &[App],
    convs: &BTreeMap<(usize, usize), String>,
    history: &History,
    report: &mut ProbeReport,
) {
    let Some((&(i, j), conv)) = convs.iter().next() else {
        return;
    };
    let (a, b) = (&apps[i], &apps[j]);
    let (alias_a, alias_b) = (
        alias_in(b, conv, &a.alias).await,
        alias_in(a, conv, &b.alias).await,
    );
    let step = |what: &str| history.push(None, json!({"probe": "receipt-kept", "step": what}));
    let not_run = |report: &mut ProbeReport, why: String| {
        report.not_run.push(format!("receipt-kept: {why}"));
    };
    drop(b.client.disconnect().await);
    step(&format!("c{j} offline"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let Ok(id) = a
        .client
        .send_message(conv, &alias_b, "probe: receipt kept", None)
        .await
    else {
        return not_run(report, format!("c{i} could not send"));
    };
    history.push(Some(i), json!({"send": id, "conv": conv, "to": j}));
    if !within(|| status(a, conv, &id).is_some_and(|(_, seq)| seq.is_some())).await {
        return not_run(report, format!("c{i}'s message {id} was not acknowledged"));
    }
    drop(a.client.disconnect().await);
    step(&format!("c{i} offline"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(b.client.connect().await);
    step(&format!("c{j} back"));
    if !within(|| status(b, conv, &id).is_some()).await {
        drop(a.client.connect().await);
        return not_run(report, format!("c{j} did not receive {id}"));
    }
    // b's socket carries its `delivered` before this message: once this is acknowledged,
    // the relay has read the receipt.
    let flush = b
        .client
        .send_message(conv, &alias_a, "probe: after the receipt", None)
        .await;
    if let Ok(flush) = &flush {
        history.push(Some(j), json!({"send": flush, "conv": conv, "to": i}));
    }
    let flushed = match &flush {
        Ok(f) => within(|| status(b, conv, f).is_some_and(|(_, seq)| seq.is_some())).await,
        Err(_) => false,
    };
    drop(a.client.connect().await);
    step(&format!("c{i} back"));
    if !flushed {
        return not_run(
            report,
            format!("c{j}'s message after its receipt was not acknowledged"),
        );
    }
    let seq = status(a, conv, &id)
        .and_then(|(_, s)| s)
        .unwrap_or_default();
    report.receipt_probes += 1;
    let receipted = within(|| {
        status(a, conv, &id)
            .is_some_and(|(s, _)| matches!(s, MessageStatus::Delivered | MessageStatus::Read))
    })
    .await;
    if let Ok(flush) = &flush {
        // The oracles want it delivered too.
        within(|| status(a, conv, flush).is_some()).await;
    }
    if !receipted {
        report.should.push(Violation::new(
            Oracle::ReceiptKept,
            format!(
                "c{j} received {id} ({conv} seq {seq}) while its sender c{i} was offline and sent `delivered`; c{i} came back and had no receipt for it within {PROBE_WAIT_MS} ms"
            ),
        ));
    }
}
