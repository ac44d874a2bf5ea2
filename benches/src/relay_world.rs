//! A relay-core world for benchmarks: one [`Relay`] on a [`MemoryStore`] under a virtual clock,
//! driven only through its public inputs (HTTP requests, WebSocket connects, frames), the way
//! `relay-core/tests/relay/world.rs` drives it. Everything here is setup: the benches time only
//! the input they are about.
//!
//! Panics (with the relay's answer) when a setup step is refused: a bench must never silently
//! measure an error path.

use client_core::encoding::to_base64;
use client_core::keys::SigningKeyPair;
use relay_core::store::MemoryStore;
use relay_core::{Config, ConnId, HttpRequest, HttpResponse, Method, Output, Relay, WsConnect};
use serde_json::{Value, json};
use wire::UnixMs;

/// Start of the virtual clock (epoch ms).
pub const T0: u64 = 1_800_000_000_000;

/// Spacing of frames from one connection: the relay allows 600 frames per connection per
/// minute (`MAX_FRAMES_PER_MIN_PER_CONN`, not configurable), so a sender advances the virtual
/// clock by a little more than 100 ms per frame to stay under it.
pub const FRAME_SPACING_MS: u64 = 101;

/// Production config with the setup-only limits relaxed: PoW difficulty 1 (a few hashes),
/// unlimited registrations per address and messages per user per minute (the bench sender
/// would hit 120/min otherwise). Everything on the measured paths is the production code.
pub fn bench_config() -> Config {
    Config {
        pow_difficulty: 1,
        registrations_per_hour_per_addr: u32::MAX,
        msgs_per_min_per_user: u32::MAX,
        ..Config::default()
    }
}

/// A registered, logged-in account.
#[derive(Debug, Clone)]
pub struct Account {
    /// User uuid.
    pub uuid: String,
    /// Alias id.
    pub alias: String,
    /// Current JWT.
    pub token: String,
    /// Open connection, if connected.
    pub conn: Option<ConnId>,
}

impl Account {
    /// The open connection (panics when not connected).
    pub fn conn(&self) -> ConnId {
        self.conn.expect("account is connected")
    }
}

/// The relay, its clock and id counters.
#[derive(Debug)]
pub struct RelayWorld {
    /// The relay under test.
    pub relay: Relay,
    /// The virtual clock.
    pub now: UnixMs,
    next_conn: u64,
    next_key: u32,
}

impl RelayWorld {
    /// A fresh relay on an empty [`MemoryStore`].
    pub fn new(config: Config) -> Self {
        Self::with_store(config, Box::new(MemoryStore::new()))
    }

    /// A fresh relay on `store`.
    pub fn with_store(config: Config, store: Box<dyn relay_core::store::Store>) -> Self {
        let relay = Relay::new(config, store, 1).expect("relay");
        Self {
            relay,
            now: UnixMs(T0),
            next_conn: 1,
            next_key: 1,
        }
    }

    /// Advances the virtual clock (no timers are fired).
    pub fn advance(&mut self, ms: u64) {
        self.now = self.now.plus_ms(ms);
    }

    /// Drains every pending output; returns how many there were.
    pub fn drain(&mut self) -> usize {
        let mut n = 0;
        while self.relay.poll_output().is_some() {
            n += 1;
        }
        n
    }

    /// Drains every pending output into `out`.
    pub fn drain_into(&mut self, out: &mut Vec<Output>) {
        while let Some(o) = self.relay.poll_output() {
            out.push(o);
        }
    }

    /// One HTTP request at the current time.
    pub fn http(&mut self, req: &HttpRequest) -> HttpResponse {
        self.relay.handle_http(self.now, req)
    }

    /// A JSON request that must succeed (2xx); returns the body.
    pub fn call(&mut self, method: Method, path: &str, body: &Value, token: Option<&str>) -> Value {
        let mut req = HttpRequest::new(method, path).json(body);
        if let Some(t) = token {
            req = req.bearer(t);
        }
        let r = self.http(&req);
        assert!(
            (200..300).contains(&r.status),
            "{method:?} {path}: {} {}",
            r.status,
            r.body_json()
        );
        self.drain();
        r.body_json()
    }

    /// Registers (solving the PoW) and logs in a new account with fresh keys.
    pub fn account(&mut self) -> Account {
        let k = self.next_key;
        self.next_key += 1;
        let mut seed = [0xA5u8; 32];
        seed[..4].copy_from_slice(&k.to_le_bytes());
        let sk = SigningKeyPair::from_private_bytes(&seed);
        let mut x = [0x5Au8; 32];
        x[..4].copy_from_slice(&k.to_le_bytes());
        let addr = format!("10.{}.{}.{}", (k >> 16) & 0xff, (k >> 8) & 0xff, k & 0xff);

        let r =
            self.http(&HttpRequest::new(Method::Post, "/api/v1/pow/challenge").from_addr(&addr));
        assert_eq!(r.status, 200, "pow challenge: {}", r.body_json());
        let v = r.body_json();
        let challenge = v["challenge_string"].as_str().expect("challenge");
        let difficulty =
            u32::try_from(v["difficulty"].as_u64().expect("difficulty")).expect("difficulty fits");
        let nonce = relay_core::pow::solve(challenge, difficulty);
        let body = json!({
            "ed25519_public_key": to_base64(&sk.public_key()),
            "x25519_public_key": to_base64(&x),
            "nickname": format!("bench{k}"),
            "pow_nonce": nonce,
        });
        let r = self.http(
            &HttpRequest::new(Method::Post, "/api/v1/register")
                .json(&body)
                .from_addr(&addr),
        );
        assert_eq!(r.status, 201, "register: {}", r.body_json());
        let v = r.body_json();
        let uuid = v["uuid"].as_str().expect("uuid").to_owned();
        let alias = v["alias_id"].as_str().expect("alias").to_owned();

        let c = self.call(
            Method::Post,
            "/api/v1/auth/challenge",
            &json!({"user_uuid": uuid}),
            None,
        );
        let challenge = c["challenge"].as_str().expect("challenge").to_owned();
        let sig = sk.sign(challenge.as_bytes());
        let v = self.call(
            Method::Post,
            "/api/v1/auth/verify",
            &json!({"user_uuid": uuid, "challenge": challenge, "signature": to_base64(&sig)}),
            None,
        );
        Account {
            uuid,
            alias,
            token: v["token"].as_str().expect("token").to_owned(),
            conn: None,
        }
    }

    /// A WebSocket ticket for `a` (valid 30 s).
    pub fn ticket(&mut self, a: &Account) -> WsConnect {
        let v = self.call(
            Method::Post,
            "/api/v1/ws/ticket",
            &json!({}),
            Some(&a.token),
        );
        let ticket = v["ticket"].as_str().expect("ticket");
        WsConnect {
            query: format!("user_uuid={}&ticket={ticket}", a.uuid),
            protocol: None,
        }
    }

    /// The next connection id.
    pub fn next_conn(&mut self) -> ConnId {
        let c = ConnId(self.next_conn);
        self.next_conn += 1;
        c
    }

    /// Opens the connection of `req` (must be accepted); returns its id.
    pub fn connect_with(&mut self, a: &mut Account, req: &WsConnect) -> ConnId {
        let conn = self.next_conn();
        if let Err(r) = self.relay.handle_connect(self.now, conn, req) {
            panic!("connect refused: {} {}", r.status, r.body_json());
        }
        self.drain();
        a.conn = Some(conn);
        conn
    }

    /// Ticket + connect (not synced).
    pub fn connect(&mut self, a: &mut Account) -> ConnId {
        let req = self.ticket(a);
        self.connect_with(a, &req)
    }

    /// Sends one text frame from `conn` at the current time and drains.
    pub fn text(&mut self, conn: ConnId, frame: &Value) -> usize {
        self.relay.handle_text(self.now, conn, &frame.to_string());
        self.drain()
    }

    /// Sends `sync` on `conn`.
    pub fn sync(&mut self, conn: ConnId) -> usize {
        self.text(conn, &json!({"type": "sync", "crypto_v": 1}))
    }

    /// Makes `a` and `b` contacts; returns the conversation id.
    pub fn befriend(&mut self, a: &Account, b: &Account) -> String {
        let v = self.call(
            Method::Post,
            "/api/v1/friends/request",
            &json!({"to_alias_id": b.alias}),
            Some(&a.token),
        );
        let id = v["friendship_id"].as_u64().expect("friendship id");
        let v = self.call(
            Method::Put,
            &format!("/api/v1/friends/{id}/accept"),
            &json!({}),
            Some(&b.token),
        );
        v["conversation_id"].as_str().expect("conv id").to_owned()
    }
}

/// An opaque payload of the size a ~200-byte message encrypts to (base64 of IV ‖ ct ‖ tag).
pub fn msg_payload() -> String {
    to_base64(&[0x42u8; 12 + 200 + 16])
}
