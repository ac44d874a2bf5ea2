//! A test world: one relay, in-memory clients, a virtual clock.

use base64::Engine as _;
use ed25519_dalek::{Signer as _, SigningKey};
use relay_core::prefetch::{ReadDone, ReadRequest};
use relay_core::store::{MemoryStore, Store};
use relay_core::{Config, ConnId, HttpRequest, HttpResponse, Method, Output, Relay, WsConnect};
use serde_json::{Value, json};
use wire::http::paths;
use wire::{ServerFrame, UnixMs};

pub(crate) const T0: u64 = 1_800_000_000_000;

/// The address the test world's "shell" resolves every push endpoint name to (a public
/// address; nothing ever connects to it: relay-core does no IO).
pub(crate) const PUBLIC_IP: &str = "93.184.216.34";

pub(crate) fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[derive(Debug, Clone)]
pub(crate) struct User {
    pub(crate) sk: SigningKey,
    pub(crate) x25519: [u8; 32],
    pub(crate) uuid: String,
    pub(crate) alias: String,
    pub(crate) token: String,
    pub(crate) conn: Option<ConnId>,
}

pub(crate) struct World {
    pub(crate) relay: Relay,
    pub(crate) mem: MemoryStore,
    pub(crate) config: Config,
    pub(crate) now: UnixMs,
    pub(crate) next_conn: u64,
    pub(crate) next_key: u8,
    /// Every output drained so far, in order.
    pub(crate) log: Vec<Output>,
    /// Pipelined commits ([`World::pipeline`]): the store taken from the relay, which this
    /// world commits sealed batches to, as a shell's committer would.
    pub(crate) committer: Option<Box<dyn Store>>,
    /// Sealed batches not yet committed, oldest first.
    pub(crate) pending: std::collections::VecDeque<relay_core::SealedBatch>,
    /// A commit failed: the committer refuses every later batch (built on the failed one).
    pub(crate) refusing: bool,
    /// Reads ahead ([`World::read_ahead`]): the reads the relay asked for and this world has
    /// not reported yet, oldest first, each with its result if it was run early.
    pub(crate) reads: Option<std::collections::VecDeque<(ReadRequest, Option<ReadDone>)>>,
    /// Reads ahead are run and reported as soon as they are asked ([`World::drain`]).
    pub(crate) reads_at_once: bool,
    /// Requests numbered for `handle_request`.
    next_request: u64,
    /// Requests and upgrades this world saw wait for a read.
    pub(crate) requests_parked: u64,
}

pub(crate) fn fast_config() -> Config {
    Config {
        pow_difficulty: 1,
        ..Config::default()
    }
}

impl World {
    pub(crate) fn new() -> Self {
        Self::with_config(fast_config())
    }

    pub(crate) fn with_config(config: Config) -> Self {
        Self::with_seed(config, 1)
    }

    pub(crate) fn with_seed(config: Config, seed: u64) -> Self {
        Self::on_store(config, MemoryStore::new(), seed)
    }

    /// A relay on `mem` as it is (another relay may share it: the shards of one process).
    pub(crate) fn on_store(config: Config, mem: MemoryStore, seed: u64) -> Self {
        // The key a real relay keeps in its key file: tokens survive `restart` (another seed).
        let mut config = config;
        if config.jwt_signing_key.is_none() {
            config.jwt_signing_key = Some(relay_core::JwtSigningKey([0x5e; 32]));
        }
        let relay = Relay::new(config.clone(), Box::new(mem.clone()), seed).unwrap();
        Self {
            relay,
            mem,
            config,
            now: UnixMs(T0),
            next_conn: 1,
            next_key: 1,
            log: Vec::new(),
            committer: None,
            pending: std::collections::VecDeque::new(),
            refusing: false,
            reads: None,
            reads_at_once: false,
            next_request: 0,
            requests_parked: 0,
        }
    }

    /// The relay reads ahead ([`Relay::read_ahead`]); this world runs the reads it asks for
    /// when told to ([`World::complete_read`], [`World::run_early`]), or at once in
    /// [`World::drain`] when `at_once`.
    pub(crate) fn read_ahead(&mut self, at_once: bool) {
        self.relay.read_ahead();
        self.reads = Some(std::collections::VecDeque::new());
        self.reads_at_once = at_once;
    }

    /// Reads asked for and not reported.
    pub(crate) fn reads_waiting(&self) -> usize {
        self.reads
            .as_ref()
            .map_or(0, std::collections::VecDeque::len)
    }

    /// Runs waiting read `i` now on the store; its result is reported later
    /// ([`World::complete_read`]): rows the relay writes meanwhile make it stale.
    pub(crate) fn run_early(&mut self, i: usize) {
        let mut reader = self.mem.clone();
        if let Some((req, done)) = self.reads.as_mut().and_then(|r| r.get_mut(i))
            && done.is_none()
        {
            *done = Some(req.run(&mut reader));
        }
    }

    /// Reports waiting read `i` (run now unless it ran early) to the relay; drain afterwards.
    pub(crate) fn complete_read(&mut self, i: usize) {
        let mut reader = self.mem.clone();
        let Some((req, done)) = self.reads.as_mut().and_then(|r| r.remove(i)) else {
            return;
        };
        let done = done.unwrap_or_else(|| req.run(&mut reader));
        self.relay.handle_read(self.now, done);
    }

    /// Reports every waiting read, and those they lead to, oldest first; returns the outputs.
    pub(crate) fn finish_reads(&mut self) -> Vec<Output> {
        let mut out = self.drain();
        while self.reads_waiting() > 0 {
            self.complete_read(0);
            out.extend(self.drain());
        }
        out
    }

    /// Drops the relay ("crash") and builds a new one from the same committed store.
    pub(crate) fn restart(&mut self, store: Box<dyn Store>) {
        // A read fault meant for the relay that died does not stop the new one from starting.
        self.mem.fail_reads(0);
        self.relay = Relay::new(self.config.clone(), store, 2).unwrap();
        self.pending.clear();
        if let Some(reads) = &mut self.reads {
            // The reads of the relay that died are never reported to the new one.
            reads.clear();
            self.relay.read_ahead();
        }
        self.refusing = false;
        if self.committer.is_some() {
            self.committer = self.relay.take_store();
        }
    }

    /// Switches to pipelined commits: the world takes the relay's store and commits sealed
    /// batches itself ([`World::seal`], [`World::commit_next`]); [`World::drain`] then seals
    /// and commits everything before it polls, so one-by-one helpers still see their outputs.
    pub(crate) fn pipeline(&mut self) {
        self.committer = self.relay.take_store();
        assert!(self.committer.is_some(), "the relay had no store to take");
    }

    /// Seals the open batch; `true` when it went in flight (it has a commit to wait for).
    pub(crate) fn seal(&mut self) -> bool {
        match self.relay.seal_batch() {
            Ok(Some(batch)) => {
                self.pending.push_back(batch);
                true
            }
            Ok(None) | Err(_) => false,
        }
    }

    /// Commits the oldest sealed batch (`ok`), or makes its commit fail (`!ok`), and reports
    /// it; after a failure every later batch is refused unapplied, as a committer does.
    pub(crate) fn commit_next(&mut self, ok: bool) -> Result<(), relay_core::BatchFailed> {
        let batch = self.pending.pop_front().expect("a sealed batch in flight");
        let result = if ok && !self.refusing {
            let store = self.committer.as_mut().expect("pipelined");
            if batch.mutations.is_empty() {
                Ok(())
            } else {
                store.commit(&batch.mutations)
            }
        } else {
            self.refusing = true;
            Err(relay_core::store::StoreError::Backend(
                "injected commit failure".into(),
            ))
        };
        self.relay.handle_committed(batch.id, &result)
    }

    /// Seals the open batch and commits every batch in flight.
    pub(crate) fn settle(&mut self) {
        self.seal();
        while !self.pending.is_empty() {
            let _ = self.commit_next(true);
        }
    }

    /// Outputs released so far, without sealing or committing anything (not logged).
    pub(crate) fn released(&mut self) -> Vec<Output> {
        std::iter::from_fn(|| self.relay.poll_output()).collect()
    }

    pub(crate) fn advance(&mut self, ms: u64) {
        self.now = self.now.plus_ms(ms);
        self.relay.handle_timeout(self.now);
        self.drain();
    }

    pub(crate) fn drain(&mut self) -> Vec<Output> {
        let mut out = Vec::new();
        loop {
            if self.committer.is_some() {
                self.settle();
            }
            while let Some(o) = self.relay.poll_output() {
                out.push(o);
            }
            let Some(reads) = &mut self.reads else {
                break;
            };
            reads.extend(std::iter::from_fn(|| self.relay.poll_read()).map(|r| (r, None)));
            if !self.reads_at_once || reads.is_empty() {
                break;
            }
            while self.reads_waiting() > 0 {
                self.complete_read(0);
            }
        }
        self.log.extend(out.iter().cloned());
        out
    }

    /// Handles `req`. A relay reading ahead gets it through `handle_request`: when it waits
    /// for reads, they are reported (oldest first) until its response comes out.
    pub(crate) fn http(&mut self, req: HttpRequest) -> HttpResponse {
        if self.reads.is_none() {
            return self.relay.handle_http(self.now, &req);
        }
        self.next_request += 1;
        let id = relay_core::RequestId(self.next_request);
        if let Some(response) = self.relay.handle_request(self.now, id, req) {
            return response;
        }
        self.requests_parked += 1;
        self.until_answered(|o| match o {
            Output::Http { id: i, response } if *i == id => Some(response.clone()),
            _ => None,
        })
    }

    /// Drains, reporting waiting reads oldest first, until an output `answer` picks comes out.
    fn until_answered<T>(&mut self, answer: impl Fn(&Output) -> Option<T>) -> T {
        for round in 0.. {
            let outs = self.drain();
            if let Some(found) = outs.iter().find_map(&answer) {
                return found;
            }
            // Each read it waits for is progress; a request that reads without end is a bug.
            assert!(
                round < 1_000,
                "a request still waits: {:?}",
                self.relay.prefetch()
            );
            assert!(
                self.reads_waiting() > 0,
                "a parked request waits for no read"
            );
            self.complete_read(0);
        }
        unreachable!()
    }

    /// A POST; a push subscription's endpoint host, when it is a name, comes with the
    /// resolution a shell would attach: [`PUBLIC_IP`] (a relay never resolves names itself).
    pub(crate) fn post(&mut self, path: &str, body: Value, token: Option<&str>) -> HttpResponse {
        let mut req = HttpRequest::new(Method::Post, path).json(&body);
        if let Some(t) = token {
            req = req.bearer(t);
        }
        let endpoint = body["endpoint"].as_str().unwrap_or_default();
        if path == paths::PUSH_SUBSCRIBE
            && let Ok(dest) = relay_core::destination::parse_endpoint(endpoint)
            && let relay_core::destination::Host::Name(name) = dest.host
        {
            req = req.resolved(name, vec![PUBLIC_IP.parse().unwrap()]);
        }
        self.http(req)
    }

    pub(crate) fn get(&mut self, path: &str, token: Option<&str>) -> HttpResponse {
        let mut req = HttpRequest::new(Method::Get, path);
        if let Some(t) = token {
            req = req.bearer(t);
        }
        self.http(req)
    }

    pub(crate) fn fresh_keys(&mut self) -> (SigningKey, [u8; 32]) {
        let k = self.next_key;
        self.next_key = self.next_key.wrapping_add(1);
        (SigningKey::from_bytes(&[k; 32]), [k.wrapping_add(128); 32])
    }

    pub(crate) fn solve_pow(&mut self, addr: &str) -> String {
        let r = self.http(HttpRequest::new(Method::Post, paths::POW_CHALLENGE).from_addr(addr));
        assert_eq!(r.status, 200);
        let v = r.body_json();
        let c = v["challenge_string"].as_str().unwrap().to_owned();
        let d = u32::try_from(v["difficulty"].as_u64().unwrap()).unwrap();
        relay_core::pow::solve(&c, d)
    }

    pub(crate) fn register_with(
        &mut self,
        sk: &SigningKey,
        x: [u8; 32],
        nick: &str,
        addr: &str,
    ) -> HttpResponse {
        let nonce = self.solve_pow(addr);
        self.http(register_request(sk, x, nick, &nonce, addr))
    }

    pub(crate) fn login(&mut self, u: &mut User) -> HttpResponse {
        let c = self.post(paths::AUTH_CHALLENGE, json!({"user_uuid": u.uuid}), None);
        assert_eq!(c.status, 200, "{:?}", c.body_json());
        let challenge = c.body_json()["challenge"].as_str().unwrap().to_owned();
        let sig = u.sk.sign(challenge.as_bytes());
        let r = self.post(
            paths::AUTH_VERIFY,
            json!({"user_uuid": u.uuid, "challenge": challenge, "signature": b64(&sig.to_bytes())}),
            None,
        );
        if r.status == 200 {
            u.token = r.body_json()["token"].as_str().unwrap().to_owned();
        }
        r
    }

    /// Registers and logs in a new user.
    pub(crate) fn user(&mut self, nick: &str) -> User {
        let (sk, x) = self.fresh_keys();
        let addr = format!("10.0.0.{}", self.next_key);
        let r = self.register_with(&sk, x, nick, &addr);
        assert_eq!(r.status, 201, "{:?}", r.body_json());
        let v = r.body_json();
        let mut u = User {
            sk,
            x25519: x,
            uuid: v["uuid"].as_str().unwrap().to_owned(),
            alias: v["alias_id"].as_str().unwrap().to_owned(),
            token: String::new(),
            conn: None,
        };
        assert_eq!(self.login(&mut u).status, 200);
        u
    }

    pub(crate) fn connect_query(
        &mut self,
        query: String,
        protocol: Option<String>,
    ) -> Result<ConnId, HttpResponse> {
        let conn = ConnId(self.next_conn);
        self.next_conn += 1;
        let ws = WsConnect { query, protocol };
        if self.reads.is_none() {
            let r = self.relay.handle_connect(self.now, conn, &ws).map(|_| conn);
            self.drain();
            return r;
        }
        let answer = match self.relay.handle_connect_ahead(self.now, conn, ws) {
            Some(answer) => {
                self.drain();
                answer
            }
            None => {
                self.requests_parked += 1;
                self.until_answered(|o| match o {
                    Output::Connect { conn: c, result } if *c == conn => Some(result.clone()),
                    _ => None,
                })
            }
        };
        answer.map(|_| conn)
    }

    /// The committed rows of `table`, in key order.
    pub(crate) fn rows(&self, table: relay_core::store::Table) -> Vec<(String, Vec<u8>)> {
        self.mem
            .clone()
            .load()
            .unwrap()
            .get(&table)
            .map(|rows| rows.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default()
    }

    /// Asks for a ticket and hands its upgrade to a relay that reads ahead: the connection's
    /// number and the answer, if it came at once (`None`: it comes later as
    /// [`Output::Connect`]).
    pub(crate) fn begin_connect(
        &mut self,
        u: &User,
    ) -> (ConnId, Option<Result<relay_core::Accepted, HttpResponse>>) {
        let t = self.post(paths::WS_TICKET, json!({}), Some(&u.token.clone()));
        assert_eq!(t.status, 200, "{:?}", t.body_json());
        let ticket = t.body_json()["ticket"].as_str().unwrap().to_owned();
        let conn = ConnId(self.next_conn);
        self.next_conn += 1;
        let ws = WsConnect {
            query: format!("user_uuid={}&ticket={ticket}", u.uuid),
            protocol: None,
        };
        let answer = self.relay.handle_connect_ahead(self.now, conn, ws);
        (conn, answer)
    }

    /// Connects with a ticket; `Err`: the status of the refused ticket request or upgrade.
    pub(crate) fn try_connect(&mut self, u: &mut User) -> Result<ConnId, u16> {
        let t = self.post(paths::WS_TICKET, json!({}), Some(&u.token.clone()));
        if t.status != 200 {
            return Err(t.status);
        }
        let ticket = t.body_json()["ticket"].as_str().unwrap().to_owned();
        let conn = self
            .connect_query(format!("user_uuid={}&ticket={ticket}", u.uuid), None)
            .map_err(|r| r.status)?;
        u.conn = Some(conn);
        Ok(conn)
    }

    /// Connects with a ticket and syncs.
    pub(crate) fn connect(&mut self, u: &mut User) -> ConnId {
        let t = self.post(paths::WS_TICKET, json!({}), Some(&u.token.clone()));
        assert_eq!(t.status, 200, "{:?}", t.body_json());
        let ticket = t.body_json()["ticket"].as_str().unwrap().to_owned();
        let conn = self
            .connect_query(format!("user_uuid={}&ticket={ticket}", u.uuid), None)
            .unwrap();
        u.conn = Some(conn);
        conn
    }

    pub(crate) fn send(&mut self, conn: ConnId, frame: Value) -> Vec<Output> {
        self.relay.handle_text(self.now, conn, &frame.to_string());
        self.drain()
    }

    /// Sends raw text (not necessarily JSON) on `conn`.
    pub(crate) fn send_raw(&mut self, conn: ConnId, text: &str) -> Vec<Output> {
        self.relay.handle_text(self.now, conn, text);
        self.drain()
    }

    pub(crate) fn sync(&mut self, conn: ConnId) -> Vec<Output> {
        self.send(conn, json!({"type": "sync", "crypto_v": 1}))
    }

    /// Makes `a` and `b` contacts and returns the conversation id.
    pub(crate) fn befriend(&mut self, a: &User, b: &User) -> String {
        let r = self.post(
            paths::FRIEND_REQUEST,
            json!({"to_alias_id": b.alias}),
            Some(&a.token),
        );
        assert_eq!(r.status, 200, "{:?}", r.body_json());
        let id = r.body_json()["friendship_id"].as_u64().unwrap();
        let r = self.http(
            HttpRequest::new(Method::Put, paths::with(paths::FRIEND_ACCEPT, id)).bearer(&b.token),
        );
        assert_eq!(r.status, 200, "{:?}", r.body_json());
        self.drain();
        r.body_json()["conversation_id"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    pub(crate) fn msg(&mut self, from: &User, to: &User, conv: &str, id: &str) -> Vec<Output> {
        let conn = from.conn.unwrap();
        self.send(
            conn,
            json!({"type":"msg","id":id,"to":to.alias,"conv_id":conv,"crypto_v":1,"payload":b64(format!("p-{id}").as_bytes())}),
        )
    }
}

/// The frames sent to `conn` among `outs`.
/// `POST /api/v1/register` of keys `sk` and `x` from `addr`, with proof of work `nonce`.
pub(crate) fn register_request(
    sk: &SigningKey,
    x: [u8; 32],
    nick: &str,
    nonce: &str,
    addr: &str,
) -> HttpRequest {
    let body = json!({
        "ed25519_public_key": b64(sk.verifying_key().as_bytes()),
        "x25519_public_key": b64(&x),
        "nickname": nick,
        "pow_nonce": nonce,
    });
    HttpRequest::new(Method::Post, paths::REGISTER)
        .json(&body)
        .from_addr(addr)
}

pub(crate) fn frames(outs: &[Output], conn: ConnId) -> Vec<ServerFrame> {
    outs.iter()
        .filter_map(|o| match o {
            Output::Send { conn: c, frame } if *c == conn => Some(frame.clone()),
            _ => None,
        })
        .collect()
}

pub(crate) fn closed(outs: &[Output], conn: ConnId) -> bool {
    outs.iter()
        .any(|o| matches!(o, Output::Close { conn: c, .. } if *c == conn))
}

pub(crate) fn acks(fs: &[ServerFrame]) -> Vec<(String, u64)> {
    fs.iter()
        .filter_map(|f| match f {
            ServerFrame::Ack(a) => Some((a.id.to_string(), a.seq.get())),
            _ => None,
        })
        .collect()
}

pub(crate) fn msgs(fs: &[ServerFrame]) -> Vec<(String, u64)> {
    fs.iter()
        .filter_map(|f| match f {
            ServerFrame::Msg(m) => Some((m.id.to_string(), m.seq.get())),
            _ => None,
        })
        .collect()
}

pub(crate) fn errors(fs: &[ServerFrame]) -> Vec<String> {
    fs.iter()
        .filter_map(|f| match f {
            ServerFrame::Error(e) => Some(e.error.to_string()),
            _ => None,
        })
        .collect()
}

// ---- media, push, calls helpers

impl World {
    /// A world whose relay keeps media bytes in `blobs` (clone it to keep a handle).
    pub(crate) fn with_blobs(config: Config, blobs: relay_core::MemoryBlobStore) -> Self {
        let mut w = Self::with_config(config);
        w.restart_with_blobs(Box::new(w.mem.clone()), Box::new(blobs));
        w
    }

    /// Drops the relay and builds a new one from `store` and `blobs`.
    pub(crate) fn restart_with_blobs(
        &mut self,
        store: Box<dyn Store>,
        blobs: Box<dyn relay_core::BlobStore>,
    ) {
        self.relay = Relay::with_blobs(self.config.clone(), store, blobs, 2).unwrap();
    }

    /// A request with a raw body.
    pub(crate) fn raw(
        &mut self,
        method: Method,
        path: &str,
        body: Vec<u8>,
        token: Option<&str>,
    ) -> HttpResponse {
        let mut req = HttpRequest::new(method, path).body(body);
        if let Some(t) = token {
            req = req.bearer(t);
        }
        self.http(req)
    }

    /// Sends a call signal of `kind` from `from` to the alias `to`.
    pub(crate) fn call(&mut self, from: &User, kind: &str, to: &str, call_id: &str) -> Vec<Output> {
        let conn = from.conn.unwrap();
        self.send(
            conn,
            json!({"type": kind, "to": to, "call_id": call_id, "from": "u99999999",
                   "crypto_v": 2, "payload": "c2lnbmFs"}),
        )
    }
}

/// The pushes among `outs`: (user uuid, target, payload JSON).
pub(crate) fn pushes(outs: &[Output]) -> Vec<(String, relay_core::PushTarget, Value)> {
    outs.iter()
        .filter_map(|o| match o {
            Output::Push {
                user,
                target,
                payload,
            } => Some((
                user.to_string(),
                target.clone(),
                serde_json::to_value(payload).unwrap(),
            )),
            _ => None,
        })
        .collect()
}

/// Alice (connected and synced) and Bob (registered, not connected), friends; and their
/// conversation.
pub(crate) fn online_and_offline(w: &mut World) -> (User, User, String) {
    let mut a = w.user("alice");
    let b = w.user("bob");
    let conv = w.befriend(&a, &b);
    let ca = w.connect(&mut a);
    w.sync(ca);
    (a, b, conv)
}

/// Alice and Bob, friends, each connected and synced; and their conversation.
pub(crate) fn both_online(w: &mut World) -> (User, User, String) {
    let mut a = w.user("alice");
    let mut b = w.user("bob");
    let conv = w.befriend(&a, &b);
    let ca = w.connect(&mut a);
    w.sync(ca);
    let cb = w.connect(&mut b);
    w.sync(cb);
    (a, b, conv)
}
