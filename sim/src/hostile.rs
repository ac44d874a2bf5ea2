//! Raw clients ("strangers"): accounts made over plain HTTP and sockets spoken by hand, no
//! client library, so they can do what an honest client never does.
//!
//! ```text
//! stranger host x<i>:
//!   register (PoW, keys from its mnemonic, challenge signed)   → alias published to the world
//!   reject the friend requests the scenario sends it           → then try to accept them anyway
//!   loop: the fault plan's acts, one at a time:
//!     flood        malformed frames at a high rate; each must get an error frame (or the
//!                  socket a close code)
//!     dishonest    others' conversations (msg, receipts, typing, retract), others'
//!                  friendships, orders, channels and identities; out-of-order binds
//!     stop-reading provoke answers, stop reading; the relay must close the socket within
//!                  STUCK_CLOSE_BOUND_MS (seen as the host's TCP stream count dropping to 0:
//!                  a relay that drops the socket resets it, its unread data makes it a RST)
//!     storm        many sockets at once: authenticated, bad tokens, silent TCP
//! ```
//!
//! What they observe goes to the run's findings (violations named `authz`, `stuck-client`,
//! `bad-input`); what they cannot observe is left to the oracles (a message of theirs
//! committed or delivered, a retract of someone else's message landing, a receipt mark in
//! their name).

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use client_core::keys::{X25519Path, derive_identity};
use rand_chacha::ChaCha20Rng;
use rand_core::{Rng as _, SeedableRng as _};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _, ReadHalf, WriteHalf};
use turmoil::net::TcpStream;
use wire::http::paths;

use crate::bounds::{
    RELAY, RELAY_PORT, STORM_WAVE, STORM_WAVE_MS, STUCK_CLOSE_BOUND_MS, STUCK_MIN_PROVOKE,
};
use crate::faults::HostileAct;
use crate::time::{sim_ms, sleep_ms};
use crate::violation::Violation;
use crate::world::{HostCtx, StuckRec, note, relay_endpoint};
use seam::net::{HttpClient, HttpRequest, TurmoilConnector};

/// A slow consumer that reads again and finds its socket closed must get a working new one
/// within this long (the relay may be restarting after a power-off: up to ~8 s, plus
/// rebuilds).
pub const RESUME_RECONNECT_MS: u64 = 30_000;
/// Pause between a slow consumer's provoking frames (longer than a link's latency, so the
/// relay answers each before the next arrives).
pub const STUCK_PROVOKE_PACE_MS: u64 = 20;
/// How long a flood waits for the answers to its last frames.
pub const FLOOD_ANSWER_WAIT_MS: u64 = 10_000;
/// Pause between the stranger's polls for friend requests.
const POLL_MS: u64 = 500;
/// How long a stranger waits for the friend requests it is to reject, after traffic starts.
const REJECT_WAIT_MS: u64 = 30_000;
/// Timeout of one raw write (a blocked write means the relay stopped reading).
const WRITE_TIMEOUT_MS: u64 = 1_000;
/// Text frames between `MAX_FRAME_BYTES` and the WebSocket library's hard limit get an error
/// frame `FRAME_TOO_LARGE`; this one is in between.
const OVERSIZE_FRAME_BYTES: usize = wire::limits::MAX_FRAME_BYTES + 6 * 1024;

/// What a raw client knows about its own account.
#[derive(Debug, Clone)]
pub(super) struct RawAccount {
    pub(super) uuid: String,
    pub(super) alias: String,
    pub(super) token: String,
}

/// A direct observation of a raw client.
pub(super) type Findings = Vec<Violation>;

fn http() -> HttpClient<TurmoilConnector> {
    HttpClient::new(TurmoilConnector, relay_endpoint())
        .with_max_idle(0)
        .with_timeout(Duration::from_millis(5_000))
}

async fn post(
    http: &HttpClient<TurmoilConnector>,
    path: &str,
    token: Option<&str>,
    body: &Value,
) -> Option<(u16, Value)> {
    let mut req = HttpRequest::post(path).json(body).ok()?;
    if let Some(t) = token {
        req = req.bearer(t);
    }
    let r = http.send(req).await.ok()?;
    let v = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
    Some((r.status.as_u16(), v))
}

async fn get(http: &HttpClient<TurmoilConnector>, path: &str, token: &str) -> Option<(u16, Value)> {
    let r = http.send(HttpRequest::get(path).bearer(token)).await.ok()?;
    let v = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
    Some((r.status.as_u16(), v))
}

fn field(v: &Value, name: &str) -> Option<String> {
    v.get(name).and_then(Value::as_str).map(str::to_owned)
}

/// Registers (or recovers, on 409) the account of `mnemonic` and logs in; `None` when the
/// relay did not answer (the caller retries).
pub(super) async fn register(mnemonic: &str, nickname: &str) -> Option<RawAccount> {
    let http = http();
    let identity = derive_identity(mnemonic, X25519Path::Spec).ok()?;
    let (_, pow) = post(&http, paths::POW_CHALLENGE, None, &json!({})).await?;
    let challenge = field(&pow, "challenge_string")?;
    let difficulty = pow.get("difficulty").and_then(Value::as_u64).unwrap_or(0);
    let nonce =
        client_core::pow::solve_pow(&challenge, u32::try_from(difficulty).unwrap_or(0)).ok()?;
    let body = json!({
        "ed25519_public_key": identity.signing_public_b64(),
        "x25519_public_key": identity.ecdh_public_b64(),
        "nickname": nickname,
        "pow_nonce": nonce,
    });
    let (status, reg) = post(&http, paths::REGISTER, None, &body).await?;
    if !(200..300).contains(&status) && status != 409 {
        return None;
    }
    let uuid = field(&reg, "uuid")?;
    let alias = field(&reg, "alias_id")?;
    let token = login(&http, &uuid, &identity).await?;
    Some(RawAccount { uuid, alias, token })
}

async fn login(
    http: &HttpClient<TurmoilConnector>,
    uuid: &str,
    identity: &client_core::keys::Identity,
) -> Option<String> {
    let (_, ch) = post(
        http,
        paths::AUTH_CHALLENGE,
        None,
        &json!({ "user_uuid": uuid }),
    )
    .await?;
    let challenge = field(&ch, "challenge")?;
    let body = json!({
        "user_uuid": uuid,
        "challenge": challenge,
        "signature": identity.sign_challenge(&challenge),
    });
    let (status, v) = post(http, paths::AUTH_VERIFY, None, &body).await?;
    (status == 200).then(|| field(&v, "token")).flatten()
}

// ------------------------------------------------------------------------------ raw socket

/// WebSocket opcodes (RFC 6455 §5.2).
mod op {
    pub(super) const TEXT: u8 = 0x1;
    pub(super) const BINARY: u8 = 0x2;
    pub(super) const CLOSE: u8 = 0x8;
    pub(super) const PING: u8 = 0x9;
}

/// A frame read from the relay.
#[derive(Debug)]
pub(super) struct Frame {
    pub(super) opcode: u8,
    pub(super) payload: Vec<u8>,
}

impl Frame {
    fn json(&self) -> Option<Value> {
        (self.opcode == op::TEXT)
            .then(|| serde_json::from_slice(&self.payload).ok())
            .flatten()
    }
    /// The close code of a close frame.
    fn close_code(&self) -> Option<u16> {
        (self.opcode == op::CLOSE && self.payload.len() >= 2)
            .then(|| u16::from_be_bytes([self.payload[0], self.payload[1]]))
    }
}

/// The read side of a raw WebSocket.
pub(super) struct RawReader {
    half: ReadHalf<TcpStream>,
    buf: Vec<u8>,
}

/// The write side of a raw WebSocket (client frames are masked with a counter).
pub(super) struct RawWriter {
    half: WriteHalf<TcpStream>,
    mask: u32,
}

impl std::fmt::Debug for RawWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RawWriter")
    }
}

/// Opens `/ws?{query}` by hand: `Ok(Some(..))` upgraded, `Ok(None)` refused (with the
/// status), `Err` when the TCP connection failed.
pub(super) async fn open_ws(query: &str) -> std::io::Result<Result<(RawReader, RawWriter), u16>> {
    open_ws_at(RELAY, query).await
}

/// [`open_ws`] on `host` (the active relay itself, past the failover topology's balancer).
async fn open_ws_at(
    host: &str,
    query: &str,
) -> std::io::Result<Result<(RawReader, RawWriter), u16>> {
    let stream = TcpStream::connect((host, RELAY_PORT)).await?;
    let (read, mut write) = tokio::io::split(stream);
    let request = format!(
        "GET /ws?{query} HTTP/1.1\r\nHost: {RELAY}:{RELAY_PORT}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: c2ltdWxhdGVkLXJhdy1rZXk=\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    write.write_all(request.as_bytes()).await?;
    let mut reader = RawReader {
        half: read,
        buf: Vec::new(),
    };
    let head = reader.head().await?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .unwrap_or(0);
    if status != 101 {
        return Ok(Err(status));
    }
    Ok(Ok((
        reader,
        RawWriter {
            half: write,
            mask: 0x5a5a_0001,
        },
    )))
}

impl RawReader {
    async fn fill(&mut self) -> std::io::Result<bool> {
        let mut chunk = [0u8; 16 * 1024];
        let n = self.half.read(&mut chunk).await?;
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(n > 0)
    }

    /// The HTTP response head (status line and headers).
    async fn head(&mut self) -> std::io::Result<String> {
        loop {
            if let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&self.buf[..end]).into_owned();
                self.buf.drain(..end + 4);
                return Ok(head);
            }
            if !self.fill().await? {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
        }
    }

    async fn need(&mut self, n: usize) -> std::io::Result<bool> {
        while self.buf.len() < n {
            if !self.fill().await? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The next frame (`None`: the connection ended).
    pub(super) async fn next(&mut self) -> std::io::Result<Option<Frame>> {
        if !self.need(2).await? {
            return Ok(None);
        }
        let opcode = self.buf[0] & 0x0f;
        let len7 = usize::from(self.buf[1] & 0x7f);
        let (len, head) = match len7 {
            126 => {
                if !self.need(4).await? {
                    return Ok(None);
                }
                (
                    usize::from(u16::from_be_bytes([self.buf[2], self.buf[3]])),
                    4,
                )
            }
            127 => {
                if !self.need(10).await? {
                    return Ok(None);
                }
                let mut b = [0u8; 8];
                b.copy_from_slice(&self.buf[2..10]);
                (
                    usize::try_from(u64::from_be_bytes(b)).unwrap_or(usize::MAX),
                    10,
                )
            }
            n => (n, 2),
        };
        if !self.need(head + len).await? {
            return Ok(None);
        }
        let payload = self.buf[head..head + len].to_vec();
        self.buf.drain(..head + len);
        Ok(Some(Frame { opcode, payload }))
    }
}

impl RawWriter {
    fn encode(&mut self, opcode: u8, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(payload.len() + 14);
        out.push(0x80 | opcode);
        match payload.len() {
            n if n < 126 => out.push(0x80 | u8::try_from(n).unwrap_or(0)),
            n if n <= usize::from(u16::MAX) => {
                out.push(0x80 | 126);
                out.extend_from_slice(&u16::try_from(n).unwrap_or(0).to_be_bytes());
            }
            n => {
                out.push(0x80 | 127);
                out.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        self.mask = self.mask.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        let key = self.mask.to_be_bytes();
        out.extend_from_slice(&key);
        out.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
        out
    }

    /// Writes one frame; `false` when the write did not complete within
    /// [`WRITE_TIMEOUT_MS`] or failed.
    pub(super) async fn send(&mut self, opcode: u8, payload: &[u8]) -> bool {
        let bytes = self.encode(opcode, payload);
        matches!(
            tokio::time::timeout(
                Duration::from_millis(WRITE_TIMEOUT_MS),
                self.half.write_all(&bytes)
            )
            .await,
            Ok(Ok(()))
        )
    }

    async fn text(&mut self, value: &Value) -> bool {
        self.send(op::TEXT, value.to_string().as_bytes()).await
    }
}

fn ws_query(account: &RawAccount) -> String {
    format!("user_uuid={}&token={}", account.uuid, account.token)
}

// ------------------------------------------------------------------------------ the host

/// The script of stranger host `x<index>`; runs again from the top after a crash.
pub(super) async fn stranger_host(ctx: std::rc::Rc<HostCtx>) {
    let index = ctx.me;
    let Some(stranger) = ctx.scenario.strangers.get(index).cloned() else {
        return;
    };
    let account = loop {
        if let Some(a) = register(&stranger.mnemonic, &format!("stranger{index}")).await {
            break a;
        }
        sleep_ms(POLL_MS).await;
    };
    ctx.world
        .borrow_mut()
        .strangers
        .insert(index, (account.uuid.clone(), account.alias.clone()));
    reject_requests(&ctx, index, &account).await;
    loop {
        let act = ctx
            .world
            .borrow_mut()
            .hostile_inbox
            .get_mut(&stranger.host)
            .and_then(std::collections::VecDeque::pop_front);
        let Some(act) = act else {
            sleep_ms(100).await;
            continue;
        };
        note(&ctx, format!("{} {act}", stranger.host));
        let found = match act {
            HostileAct::Flood { frames, roll } => flood(&ctx, &account, frames, roll).await,
            HostileAct::Dishonest { count, roll } => dishonest(&ctx, &account, count, roll).await,
            HostileAct::StopReading { provoke, pause_ms } => {
                stop_reading(&ctx, &stranger.host, &account, provoke, pause_ms).await
            }
            HostileAct::Storm { sockets, hold_ms } => storm(&account, sockets, hold_ms).await,
        };
        for v in found {
            note(&ctx, format!("{} found: {v}", stranger.host));
            ctx.world.borrow_mut().findings.push(v);
        }
    }
}

/// Rejects the friend requests the scenario sends this stranger, then (out of order) tries
/// to accept them anyway: the relay must refuse.
async fn reject_requests(ctx: &HostCtx, index: usize, account: &RawAccount) {
    let expected: BTreeSet<usize> = ctx
        .scenario
        .rejections
        .iter()
        .filter(|r| r.stranger == index)
        .map(|r| r.client)
        .collect();
    if expected.is_empty() {
        return;
    }
    let http = http();
    let mut rejected: BTreeSet<String> = BTreeSet::new();
    loop {
        let deadline = ctx
            .world
            .borrow()
            .traffic_start_ms
            .map(|s| s + REJECT_WAIT_MS);
        if deadline.is_some_and(|d| sim_ms() > d) || rejected.len() >= expected.len() {
            break;
        }
        if let Some((200, Value::Array(friends))) = get(&http, paths::FRIENDS, &account.token).await
        {
            for f in friends {
                let id = f.get("friendship_id").map(ToString::to_string);
                let received = field(&f, "direction").as_deref() == Some("received");
                let pending = field(&f, "status").as_deref() == Some("pending");
                if let (Some(id), true, true) = (id, received, pending) {
                    let path = paths::FRIEND_REJECT.replace("{friendship_id}", &id);
                    if let Some((s, _)) = post(&http, &path, Some(&account.token), &json!({})).await
                        && (200..300).contains(&s)
                    {
                        rejected.insert(id);
                    }
                }
            }
        }
        sleep_ms(POLL_MS).await;
    }
    let mut found = Findings::new();
    for id in &rejected {
        let path = paths::FRIEND_ACCEPT.replace("{friendship_id}", id);
        if let Some((s, _)) = post(&http, &path, Some(&account.token), &json!({})).await
            && (200..300).contains(&s)
        {
            found.push(Violation::new(
                "authz",
                format!("a rejected friendship {id} was accepted afterwards by its rejecter ({s})"),
            ));
        }
    }
    let mut w = ctx.world.borrow_mut();
    w.rejected.insert(index, rejected.len());
    w.findings.extend(found);
}

/// Malformed frames as fast as the link takes them; every one must be answered with an error
/// frame, unless the relay closed the socket with a close code.
async fn flood(ctx: &HostCtx, account: &RawAccount, frames: u32, roll: u64) -> Findings {
    let mut found = Findings::new();
    let started = sim_ms();
    let Ok(Ok((mut reader, mut writer))) = open_ws(&ws_query(account)).await else {
        return found;
    };
    let mut rng = ChaCha20Rng::seed_from_u64(roll);
    let counter = std::rc::Rc::new(std::cell::RefCell::new(FloodSeen::default()));
    let seen = std::rc::Rc::clone(&counter);
    let read = tokio::task::spawn_local(async move {
        while let Ok(Some(frame)) = reader.next().await {
            let mut s = seen.borrow_mut();
            if let Some(code) = frame.close_code() {
                s.close = Some(code);
                break;
            }
            if frame.opcode == op::CLOSE {
                s.close = Some(0);
                break;
            }
            if frame
                .json()
                .is_some_and(|v| field(&v, "type").as_deref() == Some("error"))
            {
                s.errors += 1;
            }
        }
        seen.borrow_mut().ended = true;
    });
    let mut expected = 0u64;
    for i in 0..frames {
        let (opcode, payload, answered) = bad_frame(&mut rng, i);
        if !writer.send(opcode, &payload).await {
            break;
        }
        expected += u64::from(answered);
        if counter.borrow().ended {
            break;
        }
    }
    let until = sim_ms() + FLOOD_ANSWER_WAIT_MS;
    while sim_ms() < until && counter.borrow().errors < expected && !counter.borrow().ended {
        sleep_ms(100).await;
    }
    let s = *counter.borrow();
    // A relay that powered off meanwhile took the socket with it, unanswered frames and all
    // (and turmoil tells no one: the socket looks open).
    let relay_died = ctx
        .world
        .borrow()
        .relay_off_ms
        .iter()
        .any(|t| (started..=sim_ms()).contains(t));
    if s.errors < expected && s.close.is_none() && !relay_died {
        found.push(Violation::new(
            "bad-input",
            format!(
                "{} of {expected} malformed frames got no error frame and the socket was not closed with a code ({})",
                expected - s.errors,
                if s.ended { "it ended silently" } else { "it is still open" }
            ),
        ));
    }
    read.abort();
    found
}

#[derive(Debug, Default, Clone, Copy)]
struct FloodSeen {
    errors: u64,
    close: Option<u16>,
    ended: bool,
}

/// One malformed frame: `(opcode, payload, whether an error frame must answer it)`.
fn bad_frame(rng: &mut ChaCha20Rng, i: u32) -> (u8, Vec<u8>, bool) {
    match rng.next_u32() % 9 {
        0 => (op::TEXT, b"{not json".to_vec(), true),
        1 => (op::TEXT, b"[1,2,3]".to_vec(), true),
        2 => (op::TEXT, br#"{"type":"msg"}"#.to_vec(), true),
        3 => (
            op::TEXT,
            format!(r#"{{"type":"msg","id":{i},"to":[],"conv_id":null,"payload":7}}"#).into_bytes(),
            true,
        ),
        4 => (
            op::TEXT,
            br#"{"type":"delivered","conv_id":"c","seq":"x"}"#.to_vec(),
            true,
        ),
        5 => {
            let big = "A".repeat(OVERSIZE_FRAME_BYTES);
            (
                op::TEXT,
                format!(r#"{{"type":"ping","pad":"{big}"}}"#).into_bytes(),
                true,
            )
        }
        6 => (op::BINARY, vec![0xff, 0x00, 0x13, 0x37], true),
        7 => (op::PING, b"hi".to_vec(), false),
        _ => (op::TEXT, br#"{"type":"typing"}"#.to_vec(), true),
    }
}

/// The world's identifiers a dishonest client targets ("leaked" to it).
#[derive(Debug, Default)]
struct Targets {
    /// `(conv, member alias)` of honest conversations.
    convs: Vec<(String, String)>,
    /// Honest message ids.
    messages: Vec<(String, String, String)>,
    /// Honest order ids.
    orders: Vec<String>,
    /// Honest channel ids.
    channels: Vec<String>,
    /// Honest account uuids.
    uuids: Vec<String>,
    /// Friendship ids to guess at.
    friendships: u64,
}

fn targets(ctx: &HostCtx) -> Targets {
    let w = ctx.world.borrow();
    let mut t = Targets::default();
    for (pair, conv) in &w.convs {
        let p = ctx.scenario.pairs[*pair];
        if let Some(alias) = w.aliases.get(&p.b) {
            t.convs.push((conv.clone(), alias.clone()));
        }
    }
    for (id, (conv, to)) in &w.sent_ids {
        t.messages.push((id.clone(), conv.clone(), to.clone()));
    }
    t.orders = w.ledger.orders.iter().map(|o| o.order_id.clone()).collect();
    t.channels = w.ledger.channels.iter().map(|c| c.id.clone()).collect();
    t.uuids = w.uuids.values().cloned().collect();
    t.friendships = ctx.scenario.pairs.len() as u64 + ctx.scenario.rejections.len() as u64 + 4;
    t
}

fn pick<'a, T>(rng: &mut ChaCha20Rng, items: &'a [T]) -> Option<&'a T> {
    (!items.is_empty()).then(|| &items[rng.next_u32() as usize % items.len()])
}

/// Requests an honest client never makes; each must be refused.
async fn dishonest(ctx: &HostCtx, account: &RawAccount, count: u32, roll: u64) -> Findings {
    let mut found = Findings::new();
    let mut rng = ChaCha20Rng::seed_from_u64(roll);
    let t = targets(ctx);
    let http = http();
    let ws = open_ws(&ws_query(account)).await.ok().and_then(Result::ok);
    let (mut reader, mut writer) = match ws {
        Some((r, w)) => (Some(r), Some(w)),
        None => (None, None),
    };
    if let Some(w) = &mut writer {
        w.text(&json!({"type": "sync", "crypto_v": 1})).await;
    }
    let mut evil_ids = Vec::new();
    let bad = |what: String, status: u16| {
        Violation::new(
            "authz",
            format!("relay answered {status} to a dishonest {what}"),
        )
    };
    for n in 0..count {
        match rng.next_u32() % 10 {
            0 | 1 => {
                let (Some(w), Some((conv, to))) = (&mut writer, pick(&mut rng, &t.convs)) else {
                    continue;
                };
                let id = format!("evil-{}-{n}", account.alias);
                evil_ids.push(id.clone());
                // base64 of "not yours"
                let payload = "bm90IHlvdXJz";
                w.text(&json!({"type": "msg", "id": id, "to": to, "conv_id": conv, "crypto_v": 1, "payload": payload}))
                    .await;
            }
            2 => {
                let (Some(w), Some((conv, to))) = (&mut writer, pick(&mut rng, &t.convs)) else {
                    continue;
                };
                let kind = if rng.next_u32().is_multiple_of(2) {
                    "delivered"
                } else {
                    "read"
                };
                w.text(&json!({"type": kind, "conv_id": conv, "seq": 1_000_000, "to": to, "crypto_v": 1}))
                    .await;
            }
            3 => {
                let (Some(w), Some((id, conv, to))) = (&mut writer, pick(&mut rng, &t.messages))
                else {
                    continue;
                };
                w.text(
                    &json!({"type": "retract", "id": id, "to": to, "conv_id": conv, "crypto_v": 1}),
                )
                .await;
            }
            4 => {
                let (Some(w), Some((conv, to))) = (&mut writer, pick(&mut rng, &t.convs)) else {
                    continue;
                };
                w.text(&json!({"type": "typing", "to": to, "conv_id": conv, "crypto_v": 1}))
                    .await;
            }
            5 => {
                let id = 1 + rng.next_u64() % t.friendships.max(1);
                let (what, path) = if rng.next_u32().is_multiple_of(2) {
                    ("accept", paths::FRIEND_ACCEPT)
                } else {
                    ("reject", paths::FRIEND_REJECT)
                };
                let path = path.replace("{friendship_id}", &id.to_string());
                if let Some((s, _)) = post(&http, &path, Some(&account.token), &json!({})).await
                    && (200..300).contains(&s)
                    && !own_friendship(&http, account, id).await
                {
                    found.push(bad(format!("{what} of someone else's friendship {id}"), s));
                }
            }
            6 => {
                let Some(order) = pick(&mut rng, &t.orders) else {
                    continue;
                };
                let body = json!({ "order_id": order });
                if let Some((s, _)) =
                    post(&http, paths::VANITY_BIND, Some(&account.token), &body).await
                    && (200..300).contains(&s)
                {
                    found.push(bad(format!("bind of someone else's order {order}"), s));
                }
            }
            7 => {
                let Some(channel) = pick(&mut rng, &t.channels) else {
                    continue;
                };
                let (what, path, body) = if rng.next_u32().is_multiple_of(2) {
                    (
                        "listing",
                        paths::LIST_CHANNEL.to_owned(),
                        json!({"channel_id": channel, "price_usdt": 1}),
                    )
                } else {
                    (
                        "post",
                        paths::CHANNEL_POSTS.replace("{channel_id}", channel),
                        json!({"type": "text", "content": "mine now"}),
                    )
                };
                if let Some((s, _)) = post(&http, &path, Some(&account.token), &body).await
                    && (200..300).contains(&s)
                {
                    found.push(bad(
                        format!("{what} on someone else's channel {channel}"),
                        s,
                    ));
                }
            }
            8 => {
                let Some(uuid) = pick(&mut rng, &t.uuids) else {
                    continue;
                };
                let query = format!("user_uuid={uuid}&token={}", account.token);
                if let Ok(Ok(_)) = open_ws(&query).await {
                    found.push(bad(
                        format!("WebSocket upgrade as {uuid} with its own token"),
                        101,
                    ));
                }
            }
            _ => {
                // Out of order: buy, then bind the unpaid order at once.
                let Some(alias) = pick(&mut rng, &ctx.scenario.alias_pool) else {
                    continue;
                };
                let body = json!({ "alias_id": alias });
                if let Some((s, v)) =
                    post(&http, paths::VANITY_PURCHASE, Some(&account.token), &body).await
                    && (200..300).contains(&s)
                    && let Some(order) = field(&v, "order_id")
                {
                    let body = json!({ "order_id": order });
                    if let Some((s, _)) =
                        post(&http, paths::VANITY_BIND, Some(&account.token), &body).await
                        && (200..300).contains(&s)
                    {
                        found.push(bad(format!("bind of its own unpaid order {order}"), s));
                    }
                }
            }
        }
    }
    // Answers to the frames: an `ack` of a message into someone else's conversation is a
    // breach (the oracles also look for it in the store and at the recipients).
    if let (Some(r), false) = (&mut reader, evil_ids.is_empty()) {
        let until = sim_ms() + 3_000;
        while sim_ms() < until {
            let Ok(Ok(Some(frame))) =
                tokio::time::timeout(Duration::from_millis(500), r.next()).await
            else {
                break;
            };
            if let Some(v) = frame.json()
                && field(&v, "type").as_deref() == Some("ack")
                && let Some(id) = field(&v, "id")
                && evil_ids.contains(&id)
            {
                found.push(bad(
                    format!("msg {id} into someone else's conversation (ack)"),
                    200,
                ));
            }
        }
    }
    ctx.world.borrow_mut().evil_ids.extend(evil_ids);
    found
}

/// Whether friendship `id` involves this account (a stranger's own rejected request is its
/// own to reject again).
async fn own_friendship(
    http: &HttpClient<TurmoilConnector>,
    account: &RawAccount,
    id: u64,
) -> bool {
    let Some((200, Value::Array(friends))) = get(http, paths::FRIENDS, &account.token).await else {
        return false;
    };
    friends
        .iter()
        .any(|f| f.get("friendship_id").and_then(Value::as_u64) == Some(id))
}

/// A slow consumer: provoke answers, stop reading; the relay must close the socket within
/// [`STUCK_CLOSE_BOUND_MS`]. With a pause, read again afterwards: the socket must either
/// still work or have been closed (then a new one must work).
async fn stop_reading(
    ctx: &HostCtx,
    host: &str,
    account: &RawAccount,
    provoke: u32,
    pause_ms: Option<u64>,
) -> Findings {
    let mut found = Findings::new();
    // Straight to the active relay in the failover topology: the bound is the relay's, and
    // the balancer's buffers in between would only need more answers to fill.
    let target = ctx.world.borrow().active_relay();
    let Ok(Ok((mut reader, mut writer))) = open_ws_at(&target, &ws_query(account)).await else {
        return found;
    };
    let before = turmoil::established_tcp_stream_count();
    let stopped = sim_ms();
    let mut blocked_at = None;
    for _ in 0..provoke {
        // Not while the relay's links are held (a slow commit): the held frames would reach
        // it in one clump and be answered with one write.
        while ctx.world.borrow().relay_stalled {
            sleep_ms(POLL_MS).await;
        }
        // Each malformed frame makes the relay answer with an error frame nobody reads.
        if !writer.send(op::TEXT, b"{stuck").await {
            blocked_at = Some(sim_ms());
            break;
        }
        // Paced so that each answer leaves the relay in a write of its own: the relay writes
        // every frame already queued for a socket with one flush, and turmoil's window
        // counts writes (segments), not bytes.
        sleep_ms(STUCK_PROVOKE_PACE_MS).await;
    }
    let deadline = stopped + STUCK_CLOSE_BOUND_MS;
    let resume = pause_ms.map(|p| stopped + p);
    let check_until = match resume {
        Some(r) if r < deadline => r,
        _ => deadline,
    };
    let closed_at = wait_for_reset(&mut writer, before, check_until).await;
    let must_close = resume.is_none_or(|r| r >= deadline) && provoke >= STUCK_MIN_PROVOKE;
    ctx.world.borrow_mut().stuck.push(StuckRec {
        host: host.to_owned(),
        stopped_ms: stopped,
        blocked_ms: blocked_at,
        closed_ms: closed_at,
        provoke,
        must_close,
    });
    let Some(resume) = resume else {
        // For good: keep the socket (and whatever the relay holds for it) to the end.
        std::future::pending::<()>().await;
        return found;
    };
    sleep_ms(resume.saturating_sub(sim_ms())).await;
    // Read again: drain what the relay sent, then check the socket answers.
    let drain = async { while let Ok(Some(_)) = reader.next().await {} };
    let _ = tokio::time::timeout(Duration::from_millis(5_000), drain).await;
    let works = writer.send(op::TEXT, b"{again").await
        && matches!(
            tokio::time::timeout(Duration::from_millis(5_000), reader.next()).await,
            Ok(Ok(Some(_)))
        );
    if !works {
        // Closed meanwhile (allowed): a new socket must work, once the relay is up (it may be
        // powered off or rebuilding right now: retried for RESUME_RECONNECT_MS).
        let give_up = sim_ms() + RESUME_RECONNECT_MS;
        let mut fresh = false;
        while !fresh && sim_ms() < give_up {
            let again = open_ws(&ws_query(account)).await.ok().and_then(Result::ok);
            fresh = match again {
                Some((mut r, mut w)) => {
                    w.send(op::TEXT, b"{again").await
                        && matches!(
                            tokio::time::timeout(Duration::from_millis(5_000), r.next()).await,
                            Ok(Ok(Some(_)))
                        )
                }
                None => false,
            };
            if !fresh {
                sleep_ms(1_000).await;
            }
        }
        if !fresh {
            found.push(Violation::new(
                "stuck-client",
                format!("{host} resumed reading at {resume} ms but neither its socket nor a new one works"),
            ));
        }
    }
    found
}

/// Watches this host's sockets until simulated `until_ms`: `Some(ms)` when the count fell
/// below `before` (the relay dropped its end of the watched socket: turmoil removes a socket
/// when a reset arrives). A small write each round makes sure a close is seen however the
/// relay closed: after a reset it fails at once; after a FIN (which would wait behind the
/// unread data) the write reaches a host without that socket and is answered by a reset.
async fn wait_for_reset(writer: &mut RawWriter, before: usize, until_ms: u64) -> Option<u64> {
    while sim_ms() < until_ms {
        if turmoil::established_tcp_stream_count() < before {
            return Some(sim_ms());
        }
        let _ = writer.send(op::PING, b"").await;
        sleep_ms(250).await;
    }
    None
}

/// Many sockets at once (in waves turmoil's accept queue takes): a third authenticated (the
/// same account, so each kicks the previous one), a third with a bad token (must be refused),
/// a third silent TCP connections.
async fn storm(account: &RawAccount, sockets: u32, hold_ms: u64) -> Findings {
    let mut found = Findings::new();
    let mut held = Vec::new();
    let mut silent = Vec::new();
    for i in 0..sockets {
        if i > 0 && (i as usize).is_multiple_of(STORM_WAVE) {
            sleep_ms(STORM_WAVE_MS).await;
        }
        match i % 3 {
            0 => {
                if let Ok(Ok(ws)) = open_ws(&ws_query(account)).await {
                    held.push(ws);
                }
            }
            1 => {
                let query = format!("user_uuid={}&token=forged.{i}.token", account.uuid);
                if let Ok(Ok(ws)) = open_ws(&query).await {
                    found.push(Violation::new(
                        "authz",
                        "relay upgraded a WebSocket with a forged token".to_owned(),
                    ));
                    held.push(ws);
                }
            }
            _ => {
                if let Ok(s) =
                    TcpStream::connect(SocketAddr::from((turmoil::lookup(RELAY), RELAY_PORT))).await
                {
                    silent.push(s);
                }
            }
        }
    }
    sleep_ms(hold_ms).await;
    drop(held);
    drop(silent);
    found
}

#[cfg(test)]
mod tests {
    //! The slow-consumer oracle's instrument, checked on a bare turmoil socket: a peer that
    //! drops a socket it can no longer write to is seen (both ways it can close), and one that
    //! keeps it is not.
    use std::time::Duration;

    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use turmoil::net::{TcpListener, TcpStream};

    use super::{RawWriter, wait_for_reset};

    /// How the peer behaves once its writes block.
    #[derive(Clone, Copy)]
    enum Peer {
        /// Drops the socket, never having read what the client sent (a reset goes out).
        DropsUnread,
        /// Reads everything, then drops the socket (a FIN goes out, behind the unread data).
        DropsAfterReading,
        /// Keeps the socket forever.
        Keeps,
    }

    fn watch(peer: Peer) -> Option<u64> {
        let mut sim = turmoil::Builder::new()
            .tcp_capacity(crate::bounds::TCP_CAPACITY)
            .simulation_duration(Duration::from_secs(120))
            .build();
        sim.host("peer", move || async move {
            let listener = TcpListener::bind("0.0.0.0:9000").await?;
            let (stream, _) = listener.accept().await?;
            let (mut read, mut write) = tokio::io::split(stream);
            let (mut held, mut reader) = (None, None);
            if matches!(peer, Peer::DropsAfterReading) {
                reader = Some(tokio::task::spawn_local(async move {
                    let mut buf = [0u8; 1024];
                    while matches!(read.read(&mut buf).await, Ok(n) if n > 0) {}
                    read
                }));
            } else {
                held = Some(read);
            }
            // Write until the window is full and the write blocks; give up after 2 s.
            let fill = async {
                loop {
                    if write.write_all(&[0u8; 32]).await.is_err() {
                        return;
                    }
                }
            };
            let _ = tokio::time::timeout(Duration::from_secs(2), fill).await;
            if matches!(peer, Peer::Keeps) {
                std::future::pending::<()>().await;
            }
            // Both halves go (as when the relay drops a socket task).
            drop(held);
            if let Some(reader) = reader {
                reader.abort();
                let _ = reader.await;
            }
            drop(write);
            std::future::pending::<()>().await;
            Ok(())
        });
        let seen = std::rc::Rc::new(std::cell::Cell::new(None));
        let out = std::rc::Rc::clone(&seen);
        sim.client("stuck", async move {
            let stream = TcpStream::connect("peer:9000").await?;
            let (_read, write) = tokio::io::split(stream);
            let mut writer = RawWriter {
                half: write,
                mask: 1,
            };
            let before = turmoil::established_tcp_stream_count();
            out.set(wait_for_reset(&mut writer, before, 60_000).await);
            Ok(())
        });
        sim.run().expect("simulation");
        seen.get()
    }

    #[test]
    fn a_reset_from_a_peer_that_never_read_is_seen() {
        assert!(watch(Peer::DropsUnread).is_some_and(|t| t < 10_000));
    }

    #[test]
    fn a_fin_behind_unread_data_is_seen_by_the_next_write() {
        assert!(watch(Peer::DropsAfterReading).is_some_and(|t| t < 10_000));
    }

    #[test]
    fn a_peer_that_keeps_the_socket_is_not_seen_closed() {
        assert_eq!(watch(Peer::Keeps), None);
    }
}
