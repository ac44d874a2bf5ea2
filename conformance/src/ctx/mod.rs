//! What a case works with: raw HTTP and WebSocket JSON against the relay, recorded in a
//! transcript, plus helpers that act as any number of clients (accounts, contacts, sockets,
//! genuine end-to-end encryption with client-core's keys and crypto).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use client_core::crypto::{SessionKey, decrypt_payload_text, encrypt_payload, session_key};
use client_core::keys::{Identity, X25519Path, derive_identity, new_mnemonic};
use client_core::pow::solve_pow;
use hmac::{Hmac, KeyInit as _, Mac as _};
use http::{HeaderName, Method, header::CONTENT_TYPE};
use rand_chacha::ChaCha20Rng;
use rand_core::{Rng as _, SeedableRng as _};
use serde_json::{Value, json};
use sha2::Sha256;
use sim::net::{HttpRequest, WsMessage, WsRequest};
use wire::http::paths;

use crate::model::{CaseResult, Failure};
use crate::transcript::{Direction, Transcript};
use crate::transport::{Transport, WsIo};
use crate::{ensure, fail};

/// How often account creation retries a rate-limited PoW challenge (5 s apart).
const POW_RATE_RETRIES: u32 = 24;

/// The documented test-mode clock endpoint (see README.md).
pub const ADVANCE_CLOCK_PATH: &str = "/api/v1/test/advance-clock";

/// How the runner advances the relay's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockControl {
    /// `POST /api/v1/test/advance-clock` on the relay (see README.md); the embedded relay
    /// serves it too (test mode).
    Http,
}

/// Optional hooks the runner was given.
#[derive(Debug, Clone, Default)]
pub struct Hooks {
    /// The payment webhook's HMAC secret: the runner acts as the payment processor.
    pub payment_secret: Option<Vec<u8>>,
    /// The test clock, if the relay offers one.
    pub clock: Option<ClockControl>,
}

/// State shared by every case of one run.
#[derive(Debug)]
pub struct Shared {
    /// Hooks.
    pub hooks: Hooks,
    /// Seed of the run; each case's RNG is derived from it and the case id.
    pub seed: u64,
    /// How long to wait for an expected frame or response.
    pub wait: Duration,
    /// How long to watch for a frame that must not arrive.
    pub quiet: Duration,
    alias_pool: tokio::sync::Mutex<Option<VecDeque<Value>>>,
}

impl Shared {
    /// Shared state of a run.
    pub fn new(hooks: Hooks, seed: u64, wait: Duration, quiet: Duration) -> Self {
        Self {
            hooks,
            seed,
            wait,
            quiet,
            alias_pool: tokio::sync::Mutex::new(None),
        }
    }
}

/// An HTTP response as the case saw it.
#[derive(Debug, Clone)]
pub struct Resp {
    /// Status code.
    pub status: u16,
    /// Headers.
    pub headers: http::HeaderMap,
    /// Raw body.
    pub body: Bytes,
    /// What was asked (for failure messages).
    pub what: String,
}

impl Resp {
    /// The body as JSON (`null` for an empty body).
    pub fn json(&self) -> Result<Value, Failure> {
        if self.body.iter().all(u8::is_ascii_whitespace) {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&self.body).map_err(|e| {
            Failure::Fail(format!(
                "{}: body is not JSON ({e}): {}",
                self.what,
                String::from_utf8_lossy(&self.body)
            ))
        })
    }

    /// Requires a 2xx status; returns the JSON body.
    pub fn ok(&self) -> Result<Value, Failure> {
        ensure!(
            (200..300).contains(&self.status),
            "{}: expected 2xx, got {} {}",
            self.what,
            self.status,
            String::from_utf8_lossy(&self.body)
        );
        self.json()
    }

    /// Requires exactly `status`; returns the JSON body.
    pub fn expect(&self, status: u16) -> Result<Value, Failure> {
        ensure!(
            self.status == status,
            "{}: expected {status}, got {} {}",
            self.what,
            self.status,
            String::from_utf8_lossy(&self.body)
        );
        self.json()
    }

    /// Requires `status` and the error body `{error: UPPER_SNAKE, message: string}`.
    pub fn expect_error(&self, status: u16) -> Result<Value, Failure> {
        let body = self.expect(status)?;
        check_error_body(&body).map_err(|r| Failure::Fail(format!("{}: {r}", self.what)))?;
        Ok(body)
    }

    /// Requires a 4xx status with the error body.
    pub fn expect_client_error(&self) -> Result<Value, Failure> {
        ensure!(
            (400..500).contains(&self.status),
            "{}: expected a 4xx refusal, got {} {}",
            self.what,
            self.status,
            String::from_utf8_lossy(&self.body)
        );
        let body = self.json()?;
        check_error_body(&body).map_err(|r| Failure::Fail(format!("{}: {r}", self.what)))?;
        Ok(body)
    }
}

/// Checks the error body shape `{error: "UPPER_SNAKE", message: "..."}`.
pub fn check_error_body(body: &Value) -> Result<(), String> {
    let Some(code) = body.get("error").and_then(Value::as_str) else {
        return Err(format!("error body has no string `error`: {body}"));
    };
    if code.is_empty()
        || !code
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
    {
        return Err(format!("`error` is not an UPPER_SNAKE code: {code:?}"));
    }
    if body.get("message").and_then(Value::as_str).is_none() {
        return Err(format!("error body has no string `message`: {body}"));
    }
    Ok(())
}

/// The JSON type a field must have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A string.
    Str,
    /// A non-empty string.
    NonEmpty,
    /// An unsigned integer.
    Uint,
    /// Any number.
    Num,
    /// A boolean.
    Bool,
    /// An array.
    Arr,
    /// An object.
    Obj,
    /// An RFC 3339 / ISO 8601 date-time string.
    Iso,
}

fn kind_ok(v: &Value, k: Kind) -> bool {
    match k {
        Kind::Str => v.is_string(),
        Kind::NonEmpty => v.as_str().is_some_and(|s| !s.is_empty()),
        Kind::Uint => v.is_u64(),
        Kind::Num => v.is_number(),
        Kind::Bool => v.is_boolean(),
        Kind::Arr => v.is_array(),
        Kind::Obj => v.is_object(),
        Kind::Iso => v.as_str().is_some_and(|s| {
            s.len() >= 20
                && s.as_bytes().get(4) == Some(&b'-')
                && s.as_bytes().get(10) == Some(&b'T')
        }),
    }
}

/// Requires each named field to be present with its kind.
pub fn fields(what: &str, v: &Value, spec: &[(&str, Kind)]) -> CaseResult {
    for (name, kind) in spec {
        match v.get(*name) {
            None => fail!("{what}: field `{name}` is missing in {v}"),
            Some(f) if !kind_ok(f, *kind) => {
                fail!("{what}: field `{name}` should be {kind:?}, got {f}")
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// The string field `name` of `v`.
pub fn s<'a>(v: &'a Value, name: &str) -> Result<&'a str, Failure> {
    v.get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| Failure::Fail(format!("no string `{name}` in {v}")))
}

/// The unsigned integer field `name` of `v`.
pub fn u(v: &Value, name: &str) -> Result<u64, Failure> {
    v.get(name)
        .and_then(Value::as_u64)
        .ok_or_else(|| Failure::Fail(format!("no unsigned integer `{name}` in {v}")))
}

/// A registered, logged-in account.
#[derive(Debug, Clone)]
pub struct Account {
    /// Account id.
    pub uuid: String,
    /// Alias.
    pub alias: String,
    /// Current JWT.
    pub token: String,
    /// Nickname.
    pub nickname: String,
    /// Keys (derived from a fresh mnemonic on the spec's X25519 path).
    pub identity: Identity,
}

impl Account {
    /// Base64 Ed25519 public key.
    pub fn ed_b64(&self) -> String {
        self.identity.signing_public_b64()
    }
    /// Base64 X25519 public key.
    pub fn x_b64(&self) -> String {
        self.identity.ecdh_public_b64()
    }
}

/// Two accounts that are accepted contacts, with their conversation and session key.
#[derive(Debug, Clone)]
pub struct Pair {
    /// The requester.
    pub a: Account,
    /// The one who accepted.
    pub b: Account,
    /// The conversation id from the accept.
    pub conv: String,
    /// The friendship id.
    pub friendship_id: Value,
    /// Session key as `a` derives it (equal to `b`'s when the relay is honest about keys).
    pub key: SessionKey,
}

/// The context of one case.
pub struct Ctx {
    transport: Arc<dyn Transport>,
    shared: Arc<Shared>,
    rng: ChaCha20Rng,
    /// The case's wire transcript.
    pub transcript: Transcript,
    nick: u32,
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx").finish_non_exhaustive()
    }
}

fn seed_for(seed: u64, id: &str) -> u64 {
    // FNV-1a over the id, mixed with the run seed: stable across runs and platforms.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed;
    for b in id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

impl Ctx {
    /// A context for case `id`.
    pub fn new(transport: Arc<dyn Transport>, shared: Arc<Shared>, id: &str) -> Self {
        let rng = ChaCha20Rng::seed_from_u64(seed_for(shared.seed, id));
        Self {
            transport,
            shared,
            rng,
            transcript: Transcript::default(),
            nick: 0,
        }
    }

    /// `http://host:port` of the relay.
    pub fn base_url(&self) -> String {
        self.transport.base_url()
    }

    /// The hooks of this run.
    pub fn hooks(&self) -> &Hooks {
        &self.shared.hooks
    }

    /// How long to watch for a frame that must not arrive.
    pub fn quiet(&self) -> Duration {
        self.shared.quiet
    }

    /// Records a note in the transcript.
    pub fn note(&self, text: &str) {
        self.transcript.note(text);
    }

    // ------------------------------------------------------------------ randomness

    /// A random lowercase UUID v4 string (message ids, call ids).
    pub fn uuid(&mut self) -> String {
        let mut b = [0u8; 16];
        self.rng.fill_bytes(&mut b);
        b[6] = (b[6] & 0x0f) | 0x40;
        b[8] = (b[8] & 0x3f) | 0x80;
        let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
        format!(
            "{}-{}-{}-{}-{}",
            &h[0..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..32]
        )
    }

    /// Random bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n];
        self.rng.fill_bytes(&mut v);
        v
    }

    /// A short random lowercase token (names).
    pub fn word(&mut self) -> String {
        let mut b = [0u8; 6];
        self.rng.fill_bytes(&mut b);
        b.iter()
            .map(|x| char::from(b'a' + x % 26))
            .collect::<String>()
    }

    /// Encrypts `text` with `key` (crypto_v 1 payload).
    pub fn encrypt(&mut self, key: &SessionKey, text: &str) -> String {
        encrypt_payload(key, text.as_bytes(), &mut self.rng)
    }

    /// The RNG (for client-core calls that take one).
    pub fn rng(&mut self) -> &mut ChaCha20Rng {
        &mut self.rng
    }

    // ------------------------------------------------------------------ HTTP

    /// Sends a request with an optional bearer token and optional JSON body.
    pub async fn req(
        &mut self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> Result<Resp, Failure> {
        let (bytes, ctype) = match body {
            Some(v) => (Bytes::from(v.to_string()), Some("application/json")),
            None => (Bytes::new(), None),
        };
        self.req_raw(method, path, token, bytes, ctype, &[]).await
    }

    /// Sends a request with a raw body and extra headers.
    pub async fn req_raw(
        &mut self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Bytes,
        content_type: Option<&str>,
        headers: &[(HeaderName, String)],
    ) -> Result<Resp, Failure> {
        let what = format!("{method} {path}");
        let shown = if body.is_empty() {
            String::new()
        } else if content_type == Some("application/json") {
            format!(" {}", String::from_utf8_lossy(&body))
        } else {
            format!(" <{} bytes>", body.len())
        };
        let auth = if token.is_some() {
            " [Bearer <redacted>]"
        } else {
            ""
        };
        self.transcript
            .record(Direction::Out, "http", &format!("{what}{auth}{shown}"));
        let mut req = HttpRequest::new(method, path).timeout(self.shared.wait);
        if let Some(t) = token {
            req = req.bearer(t);
        }
        if let Some(ct) = content_type {
            req = req.header(CONTENT_TYPE, ct);
        }
        for (name, value) in headers {
            req = req.header(name.clone(), value.clone());
        }
        let req = req.body(body);
        let resp = self
            .transport
            .http(req)
            .await
            .map_err(|e| Failure::Fail(format!("{what}: transport error: {e}")))?;
        let status = resp.status.as_u16();
        let text = if resp
            .headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/octet-stream"))
        {
            format!("<{} bytes>", resp.body.len())
        } else {
            String::from_utf8_lossy(&resp.body).into_owned()
        };
        self.transcript
            .record(Direction::In, "http", &format!("{status} {text}"));
        Ok(Resp {
            status,
            headers: resp.headers,
            body: resp.body,
            what,
        })
    }

    /// `GET` with an optional token.
    pub async fn get(&mut self, path: &str, token: Option<&str>) -> Result<Resp, Failure> {
        self.req(Method::GET, path, token, None).await
    }

    /// `POST` with an optional token and JSON body.
    pub async fn post(
        &mut self,
        path: &str,
        token: Option<&str>,
        body: &Value,
    ) -> Result<Resp, Failure> {
        self.req(Method::POST, path, token, Some(body)).await
    }

    // ------------------------------------------------------------------ accounts

    /// A fresh identity from the case's seeded RNG (spec X25519 path).
    pub fn identity(&mut self) -> Result<Identity, Failure> {
        let mnemonic = new_mnemonic(&mut self.rng);
        self.transcript.secret(mnemonic.expose());
        derive_identity(mnemonic.expose(), X25519Path::Spec)
            .map_err(|e| Failure::Fail(format!("deriving an identity: {e}")))
    }

    /// A2 body for `identity` with a solved proof of work (from A1).
    pub async fn register_body(
        &mut self,
        identity: &Identity,
        nickname: &str,
    ) -> Result<Value, Failure> {
        // A relay may rate-limit challenges per address: wait politely (virtual time under turmoil).
        let mut pow = self
            .req(Method::POST, paths::POW_CHALLENGE, None, Some(&json!({})))
            .await?;
        for _ in 0..POW_RATE_RETRIES {
            if pow.status != 429 {
                break;
            }
            tokio::time::sleep(Duration::from_secs(5)).await;
            pow = self
                .req(Method::POST, paths::POW_CHALLENGE, None, Some(&json!({})))
                .await?;
        }
        let pow = pow.ok()?;
        let challenge = s(&pow, "challenge_string")?.to_owned();
        let difficulty = u32::try_from(u(&pow, "difficulty")?).unwrap_or(u32::MAX);
        let mut body = json!({
            "ed25519_public_key": identity.signing_public_b64(),
            "x25519_public_key": identity.ecdh_public_b64(),
            "nickname": nickname,
        });
        if difficulty > 0 {
            let nonce = solve_pow(&challenge, difficulty)
                .map_err(|e| Failure::Fail(format!("solving PoW difficulty {difficulty}: {e}")))?;
            body["pow_nonce"] = Value::from(nonce);
        }
        Ok(body)
    }

    /// A3 + A4 for `uuid`: a fresh JWT.
    pub async fn login(&mut self, uuid: &str, identity: &Identity) -> Result<String, Failure> {
        let ch = self
            .post(paths::AUTH_CHALLENGE, None, &json!({"user_uuid": uuid}))
            .await?
            .ok()?;
        let challenge = s(&ch, "challenge")?.to_owned();
        let signature = identity.sign_challenge(&challenge);
        self.transcript.secret(&signature);
        let v = self
            .post(
                paths::AUTH_VERIFY,
                None,
                &json!({"user_uuid": uuid, "challenge": challenge, "signature": signature}),
            )
            .await?
            .ok()?;
        let token = s(&v, "token")?.to_owned();
        self.transcript.secret(&token);
        Ok(token)
    }

    /// Registers and logs in a fresh account.
    pub async fn account(&mut self) -> Result<Account, Failure> {
        let identity = self.identity()?;
        self.nick += 1;
        let nickname = format!("conf{}{}", self.word(), self.nick);
        let body = self.register_body(&identity, &nickname).await?;
        let reg = self.post(paths::REGISTER, None, &body).await?;
        let reg = reg.ok()?;
        let uuid = s(&reg, "uuid")?.to_owned();
        let alias = s(&reg, "alias_id")?.to_owned();
        let token = self.login(&uuid, &identity).await?;
        Ok(Account {
            uuid,
            alias,
            token,
            nickname,
            identity,
        })
    }

    /// The F1 entry `acct` sees for `other`, if any.
    pub async fn friend_entry(
        &mut self,
        acct: &Account,
        other: &str,
    ) -> Result<Option<Value>, Failure> {
        let list = self.get(paths::FRIENDS, Some(&acct.token)).await?.ok()?;
        let Some(items) = list.as_array() else {
            fail!("GET /api/v1/friends: expected a JSON array, got {list}");
        };
        Ok(items
            .iter()
            .find(|f| f.get("alias_id").and_then(Value::as_str) == Some(other))
            .cloned())
    }

    /// `a` asks `b`; returns the friendship id as `b` sees it.
    pub async fn request_friend(&mut self, a: &Account, b: &Account) -> Result<Value, Failure> {
        self.post(
            paths::FRIEND_REQUEST,
            Some(&a.token),
            &json!({"to_alias_id": b.alias}),
        )
        .await?
        .ok()?;
        let Some(entry) = self.friend_entry(b, &a.alias).await? else {
            fail!("the recipient's friends list has no entry for the requester");
        };
        entry
            .get("friendship_id")
            .cloned()
            .ok_or_else(|| Failure::Fail(format!("no friendship_id in {entry}")))
    }

    /// F3 (PUT, no body): `b` accepts; returns the conversation id.
    pub async fn accept(&mut self, b: &Account, friendship_id: &Value) -> Result<String, Failure> {
        let path = format!("/api/v1/friends/{}/accept", id_text(friendship_id));
        let v = self
            .req(Method::PUT, &path, Some(&b.token), None)
            .await?
            .ok()?;
        Ok(s(&v, "conversation_id")?.to_owned())
    }

    /// Makes `a` and `b` contacts.
    pub async fn befriend(&mut self, a: Account, b: Account) -> Result<Pair, Failure> {
        let friendship_id = self.request_friend(&a, &b).await?;
        let conv = self.accept(&b, &friendship_id).await?;
        let key = session_key(
            &a.identity.ecdh_key,
            &b.identity.ecdh_key.public_key(),
            &conv,
        );
        Ok(Pair {
            a,
            b,
            conv,
            friendship_id,
            key,
        })
    }

    /// Two fresh accounts that are contacts.
    pub async fn pair(&mut self) -> Result<Pair, Failure> {
        let a = self.account().await?;
        let b = self.account().await?;
        self.befriend(a, b).await
    }

    /// A `msg` frame from `from` to `to` in `conv` with `text` encrypted under `key`.
    pub fn msg(
        &mut self,
        key: &SessionKey,
        to: &Account,
        conv: &str,
        text: &str,
    ) -> (String, Value) {
        let id = self.uuid();
        let payload = self.encrypt(key, text);
        let frame = json!({"type": "msg", "id": id, "to": to.alias, "conv_id": conv, "crypto_v": 1, "payload": payload});
        (id, frame)
    }

    // ------------------------------------------------------------------ WebSocket

    /// Opens a socket for `acct` (A5 ticket, falling back to the token), then sends `sync`.
    pub async fn connect(&mut self, acct: &Account, label: &str) -> Result<Ws, Failure> {
        let ticket = self
            .post(paths::WS_TICKET, Some(&acct.token), &json!({}))
            .await?;
        let path = if (200..300).contains(&ticket.status) {
            let t = s(&ticket.json()?, "ticket")?.to_owned();
            self.transcript.secret(&t);
            format!("{}?user_uuid={}&ticket={t}", paths::WS, acct.uuid)
        } else {
            format!("{}?user_uuid={}&token={}", paths::WS, acct.uuid, acct.token)
        };
        let mut ws = self
            .open_ws(WsRequest::new(path.clone()), &path, label)
            .await
            .map_err(|e| Failure::Fail(format!("opening the WebSocket for {label}: {e}")))?;
        ws.send(&json!({"type": "sync", "crypto_v": 1})).await?;
        Ok(ws)
    }

    /// Opens a socket to `path` (already with query); `Err` carries the handshake error.
    pub async fn open_ws(
        &mut self,
        req: WsRequest,
        shown: &str,
        label: &str,
    ) -> Result<Ws, String> {
        let channel = format!("ws:{label}");
        self.transcript
            .record(Direction::Out, &channel, &format!("GET {shown} (upgrade)"));
        match self.transport.ws(req).await {
            Ok(io) => {
                self.transcript
                    .record(Direction::In, &channel, "101 Switching Protocols");
                Ok(Ws {
                    io,
                    channel,
                    transcript: self.transcript.clone(),
                    pending: VecDeque::new(),
                    closed: false,
                    wait: self.shared.wait,
                    quiet: self.shared.quiet,
                })
            }
            Err(e) => {
                let text = e.to_string();
                self.transcript
                    .record(Direction::In, &channel, &format!("refused: {text}"));
                Err(text)
            }
        }
    }

    // ------------------------------------------------------------------ hooks

    /// Acts as the payment processor: posts a signed webhook for `order_id`.
    pub async fn pay(
        &mut self,
        order_id: &str,
        status: &str,
        paid_usdt: u64,
    ) -> Result<Resp, Failure> {
        let Some(secret) = self.shared.hooks.payment_secret.clone() else {
            return Err(Failure::Skip(
                "no payment webhook secret (--payment-secret)".into(),
            ));
        };
        let payment_id = format!("pay-{}", self.uuid());
        let body = json!({"payment_id": payment_id, "order_id": order_id, "payment_status": status, "paid_usdt": paid_usdt}).to_string();
        self.pay_raw(&secret, body.into_bytes()).await
    }

    /// Posts a webhook body signed with `secret`.
    pub async fn pay_raw(&mut self, secret: &[u8], body: Vec<u8>) -> Result<Resp, Failure> {
        let mut mac = <Hmac<Sha256>>::new_from_slice(secret)
            .map_err(|e| Failure::Fail(format!("HMAC key: {e}")))?;
        mac.update(&body);
        let sig: String = mac
            .finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let header = HeaderName::from_static(wire::http::PAYMENT_SIGNATURE_HEADER);
        self.req_raw(
            Method::POST,
            paths::PAYMENT_WEBHOOK,
            None,
            Bytes::from(body),
            Some("application/json"),
            &[(header, sig)],
        )
        .await
    }

    /// The payment webhook secret (cases that forge signatures need it to exist).
    pub fn payment_secret(&self) -> Result<Vec<u8>, Failure> {
        self.shared
            .hooks
            .payment_secret
            .clone()
            .ok_or_else(|| Failure::Skip("no payment webhook secret (--payment-secret)".into()))
    }

    /// Advances the relay's test clock by `ms`; returns the relay's new `now_ms`.
    pub async fn advance_clock(&mut self, ms: u64) -> Result<u64, Failure> {
        match self.shared.hooks.clock {
            None => Err(Failure::Skip("no test clock (--clock-hook)".into())),
            Some(ClockControl::Http) => {
                let v = self
                    .post(ADVANCE_CLOCK_PATH, None, &json!({"ms": ms}))
                    .await?
                    .ok()?;
                u(&v, "now_ms")
            }
        }
    }

    // ------------------------------------------------------------------ commerce helpers

    /// A vanity alias for sale that no other case of this run was handed.
    pub async fn free_alias(&mut self) -> Result<Value, Failure> {
        let shared = Arc::clone(&self.shared);
        let mut pool = shared.alias_pool.lock().await;
        if pool.is_none() {
            let mut all: BTreeMap<String, Value> = BTreeMap::new();
            let mut queries = vec![String::new()];
            queries.extend(
                (b'0'..=b'9')
                    .chain(b'a'..=b'z')
                    .map(|c| char::from(c).to_string()),
            );
            for q in queries {
                let path = if q.is_empty() {
                    paths::VANITY_SEARCH.to_owned()
                } else {
                    format!("{}?q={q}", paths::VANITY_SEARCH)
                };
                let list = self.get(&path, None).await?.ok()?;
                for item in list.as_array().into_iter().flatten() {
                    if let Some(a) = item.get("alias_id").and_then(Value::as_str) {
                        all.insert(a.to_owned(), item.clone());
                    }
                }
            }
            *pool = Some(all.into_values().rev().collect());
        }
        pool.as_mut().and_then(VecDeque::pop_front).ok_or_else(|| {
            Failure::Skip("the relay's vanity inventory is exhausted for this run".into())
        })
    }

    /// Creates a channel owned by `owner`; returns its id.
    pub async fn create_channel(
        &mut self,
        owner: &Account,
        public: bool,
    ) -> Result<String, Failure> {
        let name = format!("conf {}", self.word());
        let v = self
            .post(
                paths::CHANNELS,
                Some(&owner.token),
                &json!({"name": name, "description": "conformance", "is_public": public}),
            )
            .await?
            .ok()?;
        Ok(s(&v, "channel_id")?.to_owned())
    }

    /// Lists `channel` for sale at `price` by `owner` (web/Android path).
    pub async fn list_for_sale(
        &mut self,
        owner: &Account,
        channel: &str,
        price: u64,
    ) -> Result<Resp, Failure> {
        self.post(
            paths::LIST_CHANNEL,
            Some(&owner.token),
            &json!({"channel_id": channel, "price_usdt": price}),
        )
        .await
    }

    /// Decrypts a delivered payload with `key`.
    pub fn decrypt(key: &SessionKey, payload: &str) -> Result<String, Failure> {
        decrypt_payload_text(key, payload)
            .map_err(|e| Failure::Fail(format!("the delivered payload does not decrypt: {e}")))
    }
}

/// A JSON id (number or string) as path text.
pub fn id_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// An open WebSocket of a case.
pub struct Ws {
    io: Box<dyn WsIo>,
    channel: String,
    transcript: Transcript,
    pending: VecDeque<Value>,
    closed: bool,
    wait: Duration,
    quiet: Duration,
}

impl std::fmt::Debug for Ws {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ws")
            .field("channel", &self.channel)
            .finish_non_exhaustive()
    }
}

impl Ws {
    /// Sends a JSON frame.
    pub async fn send(&mut self, frame: &Value) -> CaseResult {
        self.send_text(&frame.to_string()).await
    }

    /// Sends a raw text frame.
    pub async fn send_text(&mut self, text: &str) -> CaseResult {
        self.transcript.record(Direction::Out, &self.channel, text);
        self.io
            .send(WsMessage::text(text.to_owned()))
            .await
            .map_err(|e| Failure::Fail(format!("{}: send failed: {e}", self.channel)))
    }

    /// The next JSON frame within `within`, `None` on timeout or when the socket ended.
    async fn read(&mut self, within: Duration) -> Option<Value> {
        if self.closed {
            return None;
        }
        let deadline = tokio::time::sleep(within);
        tokio::pin!(deadline);
        loop {
            let next = tokio::select! {
                () = &mut deadline => return None,
                m = self.io.recv() => m,
            };
            match next {
                Some(Ok(WsMessage::Text(t))) => {
                    self.transcript
                        .record(Direction::In, &self.channel, t.as_str());
                    match serde_json::from_str::<Value>(t.as_str()) {
                        Ok(v) => return Some(v),
                        Err(_) => return Some(json!({"type": "<not json>", "text": t.as_str()})),
                    }
                }
                Some(Ok(WsMessage::Binary(b))) => {
                    self.transcript.record(
                        Direction::In,
                        &self.channel,
                        &format!("<binary {} bytes>", b.len()),
                    );
                }
                Some(Ok(WsMessage::Close(c))) => {
                    self.transcript
                        .record(Direction::In, &self.channel, &format!("close {c:?}"));
                    self.closed = true;
                    return None;
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    self.transcript
                        .record(Direction::In, &self.channel, &format!("error: {e}"));
                    self.closed = true;
                    return None;
                }
                None => {
                    self.transcript
                        .record(Direction::In, &self.channel, "end of stream");
                    self.closed = true;
                    return None;
                }
            }
        }
    }

    /// Waits for the first frame of `frame_type` matching `pred`; other frames stay queued.
    pub async fn expect_where(
        &mut self,
        frame_type: &str,
        pred: impl Fn(&Value) -> bool,
    ) -> Result<Value, Failure> {
        let matches =
            |v: &Value| v.get("type").and_then(Value::as_str) == Some(frame_type) && pred(v);
        if let Some(pos) = self.pending.iter().position(matches) {
            return Ok(self.pending.remove(pos).unwrap_or_default());
        }
        let wait = self.wait;
        let deadline = tokio::time::sleep(wait);
        tokio::pin!(deadline);
        loop {
            let v = tokio::select! {
                () = &mut deadline => None,
                v = self.read(wait) => v,
            };
            match v {
                Some(v) if matches(&v) => return Ok(v),
                Some(v) => self.pending.push_back(v),
                None => {
                    let seen: Vec<String> = self.pending.iter().map(Value::to_string).collect();
                    fail!(
                        "{}: no `{frame_type}` frame within {} ms{} (unconsumed: [{}])",
                        self.channel,
                        wait.as_millis(),
                        if self.closed {
                            "; the socket closed"
                        } else {
                            ""
                        },
                        seen.join(", ")
                    );
                }
            }
        }
    }

    /// Waits for the first frame of `frame_type`.
    pub async fn expect(&mut self, frame_type: &str) -> Result<Value, Failure> {
        self.expect_where(frame_type, |_| true).await
    }

    /// Requires that no frame of `frame_type` matching `pred` arrives within the quiet period.
    pub async fn expect_none_where(
        &mut self,
        frame_type: &str,
        pred: impl Fn(&Value) -> bool,
    ) -> CaseResult {
        let matches =
            |v: &Value| v.get("type").and_then(Value::as_str) == Some(frame_type) && pred(v);
        if let Some(v) = self.pending.iter().find(|v| matches(v)) {
            fail!("{}: unexpected `{frame_type}` frame {v}", self.channel);
        }
        let quiet = self.quiet;
        let deadline = tokio::time::sleep(quiet);
        tokio::pin!(deadline);
        loop {
            let v = tokio::select! {
                () = &mut deadline => return Ok(()),
                v = self.read(quiet) => v,
            };
            match v {
                Some(v) if matches(&v) => {
                    fail!("{}: unexpected `{frame_type}` frame {v}", self.channel)
                }
                Some(v) => self.pending.push_back(v),
                None if self.closed => return Ok(()),
                None => {}
            }
        }
    }

    /// Requires that no frame of `frame_type` arrives within the quiet period.
    pub async fn expect_none(&mut self, frame_type: &str) -> CaseResult {
        self.expect_none_where(frame_type, |_| true).await
    }

    /// Whether the relay closes the socket within the wait period (queued frames are kept).
    pub async fn closes(&mut self) -> bool {
        let wait = self.wait;
        let deadline = tokio::time::sleep(wait);
        tokio::pin!(deadline);
        loop {
            if self.closed {
                return true;
            }
            let v = tokio::select! {
                () = &mut deadline => return false,
                v = self.read(wait) => v,
            };
            if let Some(v) = v {
                self.pending.push_back(v);
            }
        }
    }

    /// How many already received, not yet consumed frames are of `frame_type`.
    pub fn queued(&self, frame_type: &str) -> usize {
        self.pending
            .iter()
            .filter(|v| v.get("type").and_then(Value::as_str) == Some(frame_type))
            .count()
    }

    /// Whether the relay has closed the socket.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Sends `msg` and returns its `ack` (matched by id).
    pub async fn send_msg(&mut self, id: &str, frame: &Value) -> Result<Value, Failure> {
        self.send(frame).await?;
        self.ack(id).await
    }

    /// Waits for the `ack` of `id`; an `error` frame about `id` fails with its code.
    pub async fn ack(&mut self, id: &str) -> Result<Value, Failure> {
        let wanted = id.to_owned();
        let v = self
            .expect_where_any(&["ack", "error"], move |v| {
                v.get("id").and_then(Value::as_str) == Some(wanted.as_str())
            })
            .await?;
        if v.get("type").and_then(Value::as_str) == Some("error") {
            fail!("{}: message {id} refused: {v}", self.channel);
        }
        Ok(v)
    }

    /// Waits for the first frame whose type is one of `types` and that matches `pred`.
    pub async fn expect_where_any(
        &mut self,
        types: &[&str],
        pred: impl Fn(&Value) -> bool,
    ) -> Result<Value, Failure> {
        let types: Vec<String> = types.iter().map(|t| (*t).to_owned()).collect();
        let matches = |v: &Value| {
            v.get("type")
                .and_then(Value::as_str)
                .is_some_and(|t| types.iter().any(|x| x == t))
                && pred(v)
        };
        if let Some(pos) = self.pending.iter().position(matches) {
            return Ok(self.pending.remove(pos).unwrap_or_default());
        }
        let wait = self.wait;
        let deadline = tokio::time::sleep(wait);
        tokio::pin!(deadline);
        loop {
            let v = tokio::select! {
                () = &mut deadline => None,
                v = self.read(wait) => v,
            };
            match v {
                Some(v) if matches(&v) => return Ok(v),
                Some(v) => self.pending.push_back(v),
                None => fail!(
                    "{}: none of {types:?} within {} ms{}",
                    self.channel,
                    wait.as_millis(),
                    if self.closed {
                        "; the socket closed"
                    } else {
                        ""
                    }
                ),
            }
        }
    }

    /// Sends `frame` and requires an `error` frame in answer (optionally with `code`); returns it.
    pub async fn expect_error_for(
        &mut self,
        frame: &Value,
        code: Option<&str>,
    ) -> Result<Value, Failure> {
        self.send(frame).await?;
        let e = self.expect("error").await?;
        check_error_body(&e)
            .map_err(|r| Failure::Fail(format!("{}: error frame: {r}", self.channel)))?;
        if let Some(code) = code {
            ensure!(
                e.get("error").and_then(Value::as_str) == Some(code),
                "{}: expected error {code}, got {e}",
                self.channel
            );
        }
        Ok(e)
    }
}
