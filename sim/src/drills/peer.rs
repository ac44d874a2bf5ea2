//! The drills' raw clients: accounts registered by hand from mnemonics the seed draws, their
//! friendships, and their sockets, on which a message's answer (its `ack` or the `error`
//! frame naming it) is read exactly.

use std::collections::BTreeMap;
use std::time::Duration;

use client_core::keys::{Identity, X25519Path, derive_identity};
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng as _;
use serde_json::{Value, json};
use wire::http::paths;

use crate::hostile::http::{RawAccount, field, get, http, post, put_empty, register};
use crate::hostile::ws::{RawReader, RawWriter, open_ws, open_ws_protocol};
use crate::seeds::{TAG_DRILL, derive_seed};
use crate::time::{sim_ms, sleep_ms};

/// How long a drill waits for one answer of the relay (an `ack`, an `error` frame).
pub(super) const ANSWER_MS: u64 = 3_000;
/// How long a WebSocket upgrade may take (a relay that powered off mid-handshake never
/// answers it).
const UPGRADE_MS: u64 = 5_000;
/// Pause between a drill's attempts to register or reach the relay.
const RETRY_MS: u64 = 500;

/// `req`'s status and `Retry-After` (whole seconds, when the header is there and a number);
/// `None` without an answer.
pub(crate) async fn status_and_retry_after(
    req: seam::net::HttpRequest,
) -> Option<(u16, Option<u64>)> {
    let r = http().send(req).await.ok()?;
    let retry_after = r
        .headers
        .get(http::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok());
    Some((r.status.as_u16(), retry_after))
}

/// A drill account: its raw account and its keys.
#[derive(Debug, Clone)]
pub(crate) struct DrillAccount {
    pub(crate) raw: RawAccount,
    pub(crate) identity: Identity,
    pub(crate) nickname: String,
}

impl DrillAccount {
    /// Registers drill account `n` of run `seed` (or recovers it), retrying until the relay
    /// answers.
    pub(crate) async fn register(seed: u64, n: u64) -> Self {
        let mnemonic = Self::mnemonic(seed, n);
        let nickname = format!("drill{n}");
        let identity = Self::identity_of(seed, n);
        loop {
            if let Some(raw) = register(&mnemonic, &nickname).await {
                return Self {
                    raw,
                    identity,
                    nickname,
                };
            }
            sleep_ms(RETRY_MS).await;
        }
    }

    /// The mnemonic of drill account `n` of run `seed`.
    fn mnemonic(seed: u64, n: u64) -> String {
        client_core::keys::new_mnemonic(&mut ChaCha20Rng::from_seed(derive_seed(
            seed, TAG_DRILL, n,
        )))
        .expose()
        .to_owned()
    }

    /// The keys of drill account `n` of run `seed` (registered or not).
    pub(crate) fn identity_of(seed: u64, n: u64) -> Identity {
        let mnemonic = Self::mnemonic(seed, n);
        loop {
            if let Ok(i) = derive_identity(&mnemonic, X25519Path::Spec) {
                break i;
            }
        }
    }

    /// Its socket, `sync`ed when asked; a token the relay refuses (expired, revoked) is
    /// renewed by a login and the upgrade tried once more.
    pub(crate) async fn socket(&mut self, sync: bool) -> Result<Socket, u16> {
        match Socket::open(&self.raw, sync).await {
            Err(401) if self.relogin().await => Socket::open(&self.raw, sync).await,
            other => other,
        }
    }

    /// Logs in again (a new token; the old one is revoked); `false` when it did not succeed.
    pub(crate) async fn relogin(&mut self) -> bool {
        match crate::hostile::http::login(&http(), &self.raw.uuid, &self.identity).await {
            Some(token) => {
                self.raw.token = token;
                true
            }
            None => false,
        }
    }
}

/// Whether the relay serves again (an answer other than 503) within `ms`.
pub(crate) async fn relay_answers(ms: u64) -> bool {
    let deadline = sim_ms() + ms;
    loop {
        if let Some((status, _)) = post(&http(), paths::POW_CHALLENGE, None, &json!({})).await
            && status != 503
        {
            return true;
        }
        if sim_ms() >= deadline {
            return false;
        }
        sleep_ms(RETRY_MS).await;
    }
}

/// The row of `alias` in a friend list (`GET friends`), in `status` when given.
pub(crate) fn friend_row<'v>(
    friends: &'v Value,
    alias: &str,
    status: Option<&str>,
) -> Option<&'v Value> {
    friends.as_array()?.iter().find(|f| {
        field(f, "alias_id").as_deref() == Some(alias)
            && status.is_none_or(|s| field(f, "status").as_deref() == Some(s))
    })
}

/// Makes `a` and `b` friends (`a` asks, `b` accepts); their conversation id, `None` when the
/// relay did not get that far.
pub(crate) async fn befriend(a: &RawAccount, b: &RawAccount) -> Option<String> {
    let http = http();
    let find = |friends: &Value, alias: &str, status: &str| -> Option<(String, Option<String>)> {
        let f = friend_row(friends, alias, Some(status))?;
        let id = f.get("friendship_id").map(ToString::to_string)?;
        Some((id, field(f, "conversation_id")))
    };
    let (_, friends) = get(&http, paths::FRIENDS, &b.token).await?;
    if let Some((_, Some(conv))) = find(&friends, &a.alias, "accepted") {
        return Some(conv);
    }
    if find(&friends, &a.alias, "pending").is_none() {
        let body = json!({ "to_alias_id": b.alias });
        post(&http, paths::FRIEND_REQUEST, Some(&a.token), &body).await?;
    }
    let (_, friends) = get(&http, paths::FRIENDS, &b.token).await?;
    let (id, _) = find(&friends, &a.alias, "pending")?;
    let path = paths::FRIEND_ACCEPT.replace("{friendship_id}", &id);
    let (status, accepted) = put_empty(&http, &path, &b.token).await?;
    if !(200..300).contains(&status) {
        return None;
    }
    field(&accepted, "conversation_id")
}

/// What the relay answered a `msg`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Answer {
    /// `ack` with this seq.
    Ack(u64),
    /// An `error` frame naming the message, with this code.
    Refused(String),
    /// Nothing within [`ANSWER_MS`], or the socket ended.
    Silence,
}

/// A raw socket of a drill account.
pub(crate) struct Socket {
    reader: RawReader,
    writer: RawWriter,
    /// Every `msg` delivered on this socket: id -> the seq of each delivery, in order.
    pub(crate) delivered: BTreeMap<String, Vec<u64>>,
    /// Every `retract` delivered: message ids.
    pub(crate) retracts: Vec<String>,
    /// `typing` notices delivered.
    pub(crate) typings: u32,
    /// `call_*` signals delivered.
    pub(crate) calls: u32,
    /// Every `ack` received, in order: the message id and its seq.
    pub(crate) acks: Vec<(String, u64)>,
    /// `error` frames received, by code.
    pub(crate) errors: BTreeMap<String, u32>,
    /// The socket ended (closed by the relay or the network).
    pub(crate) ended: bool,
}

impl Socket {
    /// Opens `account`'s socket with its token (and `sync`s when asked); `Err` with the
    /// status of a refused upgrade (0: no answer).
    pub(crate) async fn open(account: &RawAccount, sync: bool) -> Result<Self, u16> {
        let query = format!("user_uuid={}&token={}", account.uuid, account.token);
        Self::open_query(&query, sync).await
    }

    /// Opens a socket with the upgrade query `query`.
    pub(crate) async fn open_query(query: &str, sync: bool) -> Result<Self, u16> {
        Self::open_with(query, None, sync).await
    }

    /// Opens a socket with the upgrade query `query` and the `Sec-WebSocket-Protocol`
    /// `protocol`, if any.
    pub(crate) async fn open_with(
        query: &str,
        protocol: Option<&str>,
        sync: bool,
    ) -> Result<Self, u16> {
        let upgrade = tokio::time::timeout(Duration::from_millis(UPGRADE_MS), async {
            match protocol {
                Some(p) => open_ws_protocol(query, p).await,
                None => open_ws(query).await,
            }
        });
        let (reader, mut writer) = match upgrade.await {
            Ok(Ok(Ok(pair))) => pair,
            Ok(Ok(Err(status))) => return Err(status),
            Ok(Err(_)) | Err(_) => return Err(0),
        };
        if sync && !writer.text(&json!({"type": "sync", "crypto_v": 1})).await {
            return Err(0);
        }
        Ok(Self {
            reader,
            writer,
            delivered: BTreeMap::new(),
            retracts: Vec::new(),
            typings: 0,
            calls: 0,
            acks: Vec::new(),
            errors: BTreeMap::new(),
            ended: false,
        })
    }

    /// Sends a text frame; `false` when the write did not complete.
    pub(crate) async fn send(&mut self, frame: &Value) -> bool {
        self.writer.text(frame).await
    }

    /// The next JSON frame within `ms` (deliveries are recorded on the way).
    async fn next(&mut self, ms: u64) -> Option<Value> {
        if self.ended {
            return None;
        }
        match tokio::time::timeout(Duration::from_millis(ms.max(1)), self.reader.next()).await {
            Ok(Ok(Some(frame))) => {
                let Some(v) = frame.json() else {
                    if frame.opcode == crate::hostile::ws::op::CLOSE {
                        self.ended = true;
                    }
                    return Some(Value::Null);
                };
                self.record(&v);
                Some(v)
            }
            Ok(_) => {
                self.ended = true;
                None
            }
            Err(_) => None,
        }
    }

    fn record(&mut self, v: &Value) {
        match v.get("type").and_then(Value::as_str) {
            Some("msg") => {
                if let (Some(id), Some(seq)) =
                    (field(v, "id"), v.get("seq").and_then(Value::as_u64))
                {
                    self.delivered.entry(id).or_default().push(seq);
                }
            }
            Some("retract") => {
                if let Some(id) = field(v, "id") {
                    self.retracts.push(id);
                }
            }
            Some("typing") => self.typings += 1,
            Some(t) if t.starts_with("call_") => self.calls += 1,
            Some("ack") => {
                if let (Some(id), Some(seq)) =
                    (field(v, "id"), v.get("seq").and_then(Value::as_u64))
                {
                    self.acks.push((id, seq));
                }
            }
            Some("error") => {
                *self
                    .errors
                    .entry(field(v, "error").unwrap_or_default())
                    .or_default() += 1;
            }
            _ => {}
        }
    }

    /// Sends message `id` of `payload` to `to` in `conv` and reads until its answer.
    pub(crate) async fn message(
        &mut self,
        id: &str,
        to: &str,
        conv: &str,
        payload: &str,
    ) -> Answer {
        if !self.send_message(id, to, conv, payload).await {
            return Answer::Silence;
        }
        self.answer_to(id).await
    }

    /// Sends message `id` of `payload` to `to` in `conv` without waiting for its answer;
    /// `false` when the write did not complete.
    pub(crate) async fn send_message(
        &mut self,
        id: &str,
        to: &str,
        conv: &str,
        payload: &str,
    ) -> bool {
        let frame = json!({"type": "msg", "id": id, "to": to, "conv_id": conv, "crypto_v": 1, "payload": payload});
        self.send(&frame).await
    }

    /// Reads until the `ack` or `error` naming `id`.
    pub(crate) async fn answer_to(&mut self, id: &str) -> Answer {
        let until = sim_ms() + ANSWER_MS;
        while sim_ms() < until {
            let Some(v) = self.next(until.saturating_sub(sim_ms())).await else {
                return Answer::Silence;
            };
            let named = field(&v, "id").as_deref() == Some(id);
            match v.get("type").and_then(Value::as_str) {
                Some("ack") if named => {
                    return v
                        .get("seq")
                        .and_then(Value::as_u64)
                        .map_or(Answer::Silence, Answer::Ack);
                }
                Some("error") if named => {
                    return Answer::Refused(field(&v, "error").unwrap_or_default());
                }
                _ => {}
            }
        }
        Answer::Silence
    }

    /// Reads for `ms`, answering every delivered `msg` with a `delivered` receipt (so the
    /// relay releases its sync window and drops the delivered messages from the queue).
    pub(crate) async fn drain(&mut self, ms: u64) {
        let until = sim_ms() + ms;
        while sim_ms() < until {
            let Some(v) = self.next(until.saturating_sub(sim_ms())).await else {
                if self.ended {
                    return;
                }
                continue;
            };
            if v.get("type").and_then(Value::as_str) == Some("msg")
                && let (Some(conv), Some(seq), Some(from)) = (
                    field(&v, "conv_id"),
                    v.get("seq").and_then(Value::as_u64),
                    field(&v, "from"),
                )
            {
                let receipt = json!({"type": "delivered", "conv_id": conv, "seq": seq, "to": from, "crypto_v": 1});
                if !self.send(&receipt).await {
                    return;
                }
            }
        }
    }

    /// Reads whatever arrives for `ms` (recorded in [`Self::delivered`] and [`Self::retracts`]).
    pub(crate) async fn listen(&mut self, ms: u64) {
        let until = sim_ms() + ms;
        while sim_ms() < until && !self.ended {
            self.next(until.saturating_sub(sim_ms())).await;
        }
    }
}

/// A payload of `bytes` base64 characters (what the relay counts against its byte bounds).
pub(crate) fn payload(bytes: usize) -> String {
    "A".repeat(bytes.max(4) / 4 * 4)
}
