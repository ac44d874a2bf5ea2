//! Two `relay --postgres` processes on one database (real processes, 127.0.0.1 only):
//!
//! * **failover**: clients send messages (each re-sent with the same id until acknowledged)
//!   through the active relay; it is killed with SIGKILL; the standby leads (the takeover time
//!   is measured and printed) and the clients carry on through it with the tokens the first one
//!   issued (the relays share `--secrets-dir`). Every acknowledged message reaches its
//!   recipient exactly once (one sequence number per message id, none missing).
//! * **a paused leader**: the active relay is SIGSTOPped, the standby takes over (the server
//!   ends the paused leader's lock session), then the old one is resumed with a message frame
//!   and a request waiting in its sockets: it acknowledges nothing, commits nothing (the new
//!   leader's database never sees them), closes its sockets and stands by.
//! * **keys checked by the database**: a standby started with another `--secrets-dir` (another
//!   JWT signing key and VAPID key) warns at once, and when the active relay dies and it would
//!   lead, it refuses, exits non-zero naming both keys, their short fingerprints and the fix;
//!   a standby with the same directory then takes over and accepts the first relay's tokens.
//!   A relay started with `--rotate-jwt-key --rotate-vapid-key` records its new keys when it
//!   leads; relays on the old keys are refused from then on, relays given the new files lead.
//!
//! They need `RELAY_TEST_POSTGRES_URL` (`relay-pg/scripts/pg-test-cluster.sh`); without it they
//! print `SKIPPED <test>: …` and pass, unless `RELAY_TEST_POSTGRES_REQUIRED=1` (CI), where they
//! fail. Each test uses a schema of its own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{SinkExt as _, StreamExt as _};
use http::Method;
use seam::net::{HttpClient, HttpRequest};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

mod common;
use common::{Account, FromAddr, account, befriend, call, client, database, now};

/// Bound of every wait; only keeps a broken build from hanging.
const WAIT: Duration = Duration::from_secs(60);
/// Sender/recipient pairs of the failover test.
const PAIRS: usize = 4;
/// Messages each sender sends.
const MESSAGES: usize = 40;
/// Acknowledged messages (over all senders) before the active relay is killed.
const KILL_AFTER_ACKS: usize = 50;

/// One `relay --postgres` process; killed when dropped.
struct Relay {
    child: Child,
    addr: SocketAddr,
    log: PathBuf,
}

impl Relay {
    fn start(url: &str, schema: &str, secrets: &Path, log: PathBuf) -> Self {
        Self::start_with(url, schema, secrets, log, &[])
    }

    /// Starts a relay on a port of the kernel's choosing (read back from its log: no other
    /// process can take the port in between). A relay that exits before it listens (refusing
    /// its flags or keys) is returned too, with a placeholder address, for `exited` to judge.
    fn start_with(url: &str, schema: &str, secrets: &Path, log: PathBuf, extra: &[&str]) -> Self {
        let out = std::fs::File::create(&log).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_relay"))
            .args(["--postgres", url, "--pg-schema", schema, "--secrets-dir"])
            .arg(secrets)
            .args([
                "--pow-difficulty",
                "0",
                "--log",
                "info",
                "--listen",
                "127.0.0.1:0",
            ])
            .args(extra)
            .stdout(Stdio::from(out.try_clone().unwrap()))
            .stderr(Stdio::from(out))
            .spawn()
            .unwrap();
        let addr = common::listening_addr(&log, &mut child)
            .unwrap_or_else(|| SocketAddr::from((Ipv4Addr::LOCALHOST, 9)));
        Self { child, addr, log }
    }

    fn pid(&self) -> String {
        self.child.id().to_string()
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.pid()])
            .status()
            .unwrap();
        assert!(status.success(), "kill {signal}");
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits for the process to exit on its own.
    async fn exited(&mut self) -> std::process::ExitStatus {
        for _ in 0..(WAIT.as_millis() / 10) {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("{} never exited:\n{}", self.addr, self.log());
    }

    /// Kills it (SIGKILL) and waits for it.
    fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET path` on `addr`: status and JSON body; `None` when nothing answers.
async fn probe(addr: SocketAddr, path: &str) -> Option<(u16, Value)> {
    let http = client(addr, FromAddr(Ipv4Addr::LOCALHOST));
    let response = tokio::time::timeout(
        Duration::from_secs(2),
        http.send(HttpRequest::new(Method::GET, path)),
    )
    .await
    .ok()?
    .ok()?;
    let body = serde_json::from_slice(&response.body).unwrap_or(Value::Null);
    Some((response.status.as_u16(), body))
}

async fn wait_ready(relay: &Relay) -> Value {
    for _ in 0..(WAIT.as_millis() / 5) {
        if let Some((200, body)) = probe(relay.addr, "/readyz").await {
            return body;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("{} never became ready:\n{}", relay.addr, relay.log());
}

/// Waits until a leader resumed after a pause has noticed that its term ended, then checks
/// that it answers as a standby. Until it notices (its lease connection or its next commit
/// tells it), `/readyz` may still answer 200 with its old epoch; any commit it tries is fenced.
async fn wait_deposed(relay: &Relay) {
    for _ in 0..(WAIT.as_millis() / 10) {
        match probe(relay.addr, "/readyz").await {
            Some((200, _)) | None => tokio::time::sleep(Duration::from_millis(10)).await,
            Some(_) => return wait_standby(relay).await,
        }
    }
    panic!("{} still answers as a leader:\n{}", relay.addr, relay.log());
}

/// Waits until `relay` answers as a standby, and checks what a standby answers.
async fn wait_standby(relay: &Relay) {
    for _ in 0..(WAIT.as_millis() / 10) {
        if let Some((status, body)) = probe(relay.addr, "/readyz").await {
            assert_eq!(status, 503, "{body}");
            assert_eq!(body["error"], "NOT_LEADER", "{body}");
            let (status, live) = probe(relay.addr, "/healthz").await.unwrap();
            assert_eq!((status, &live["role"]), (200, &json!("standby")), "{live}");
            // Any other route: 503 NOT_LEADER with Retry-After.
            let http = client(relay.addr, FromAddr(Ipv4Addr::LOCALHOST));
            let response = http
                .send(HttpRequest::new(Method::POST, "/api/v1/ws/ticket"))
                .await
                .unwrap();
            assert_eq!(response.status.as_u16(), 503);
            assert!(response.headers.contains_key(http::header::RETRY_AFTER));
            let body: Value = serde_json::from_slice(&response.body).unwrap();
            assert_eq!(body["error"], "NOT_LEADER", "{body}");
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{} never answered:\n{}", relay.addr, relay.log());
}

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Ticket, upgrade and `sync` on whichever of `addrs` accepts (a client behind a load balancer
/// that follows `/readyz`); retries with a short backoff until one does.
async fn connect_any(addrs: &[SocketAddr], a: &Account) -> Ws {
    let mut attempt = 0u64;
    loop {
        for &addr in addrs {
            if let Some(ws) = try_connect(addr, a).await {
                return ws;
            }
        }
        attempt += 1;
        assert!(attempt < 600, "no relay accepted a WebSocket");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn try_connect(addr: SocketAddr, a: &Account) -> Option<Ws> {
    let http: HttpClient<FromAddr> = client(addr, a.from);
    let request = HttpRequest::new(Method::POST, "/api/v1/ws/ticket")
        .json(&json!({}))
        .unwrap()
        .bearer(&a.token);
    let response = tokio::time::timeout(Duration::from_secs(2), http.send(request))
        .await
        .ok()?
        .ok()?;
    // Not the active relay (or not up): 503; a token refused here would be a 401.
    if response.status.as_u16() == 401 {
        panic!("{addr} refused the token the other relay issued (secrets not shared?)");
    }
    if !response.status.is_success() {
        return None;
    }
    let v: Value = serde_json::from_slice(&response.body).ok()?;
    let ticket = v["ticket"].as_str()?;
    let url = format!("ws://{addr}/ws?user_uuid={}&ticket={ticket}", a.uuid);
    let (mut ws, _) = tokio::time::timeout(
        Duration::from_secs(2),
        tokio_tungstenite::connect_async(url),
    )
    .await
    .ok()?
    .ok()?;
    ws.send(Message::text(
        json!({"type": "sync", "crypto_v": 1}).to_string(),
    ))
    .await
    .ok()?;
    Some(ws)
}

/// The next JSON frame; `None` when the socket ended or failed.
async fn next_frame(ws: &mut Ws) -> Option<Value> {
    loop {
        match tokio::time::timeout(WAIT, ws.next()).await.ok()? {
            Some(Ok(Message::Text(text))) => return serde_json::from_str(&text).ok(),
            Some(Ok(Message::Close(_)) | Err(_)) | None => return None,
            Some(Ok(_)) => {}
        }
    }
}

/// Sends `MESSAGES` messages to `to`, one at a time, each re-sent (same id, after a reconnect)
/// until acknowledged. Returns the acknowledged ids with their sequence numbers.
async fn sender(
    addrs: Vec<SocketAddr>,
    me: Account,
    to: String,
    conv: String,
    acked: Arc<Mutex<usize>>,
) -> BTreeMap<String, u64> {
    let mut acks = BTreeMap::new();
    let mut ws = connect_any(&addrs, &me).await;
    let mut n = 0;
    while n < MESSAGES {
        let id = format!("{}-m{n}", me.alias);
        let frame = json!({"type": "msg", "id": id, "to": to, "conv_id": conv,
            "crypto_v": 1, "payload": "ZmFpbG92ZXI="});
        let mut seq = None;
        if ws.send(Message::text(frame.to_string())).await.is_ok() {
            while let Some(v) = next_frame(&mut ws).await {
                if v["type"] == "ack" && v["id"] == id.as_str() {
                    seq = v["seq"].as_u64();
                    break;
                }
            }
        }
        match seq {
            Some(seq) => {
                acks.insert(id, seq);
                *acked.lock().unwrap() += 1;
                n += 1;
            }
            // The socket ended before the ack: outcome unknown, re-send the same id.
            None => ws = connect_any(&addrs, &me).await,
        }
    }
    acks
}

/// Receives until `done` says everything expected arrived; sends `delivered` for each
/// message. Returns every (id, seq) received, redeliveries included.
async fn recipient(
    addrs: Vec<SocketAddr>,
    me: Account,
    expected: Arc<Mutex<Option<BTreeSet<String>>>>,
) -> Vec<(String, u64)> {
    let mut got = Vec::new();
    let mut ids = BTreeSet::new();
    let mut ws = connect_any(&addrs, &me).await;
    loop {
        if let Some(want) = &*expected.lock().unwrap()
            && want.is_subset(&ids)
        {
            return got;
        }
        let frame = tokio::time::timeout(Duration::from_millis(200), ws.next()).await;
        match frame {
            Err(_) => continue,
            Ok(Some(Ok(Message::Text(text)))) => {
                let v: Value = serde_json::from_str(&text).unwrap();
                if v["type"] == "msg" {
                    let id = v["id"].as_str().unwrap().to_owned();
                    let seq = v["seq"].as_u64().unwrap();
                    let receipt = json!({"type": "delivered", "conv_id": v["conv_id"],
                        "seq": seq, "to": v["from"], "crypto_v": 1});
                    let _ = ws.send(Message::text(receipt.to_string())).await;
                    ids.insert(id.clone());
                    got.push((id, seq));
                }
            }
            Ok(Some(Ok(_))) => {}
            Ok(Some(Err(_)) | None) => ws = connect_any(&addrs, &me).await,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_standby_takes_over_a_killed_leader_and_no_acknowledged_message_is_lost_or_doubled() {
    let Some(url) = database("failover") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let schema = format!("failover_{}", std::process::id());
    let secrets = tmp.path().join("secrets");
    let mut a = Relay::start(&url, &schema, &secrets, tmp.path().join("a.log"));
    let first = wait_ready(&a).await;
    assert_eq!(first["role"], "active");
    let b = Relay::start(&url, &schema, &secrets, tmp.path().join("b.log"));
    wait_standby(&b).await;

    let from = FromAddr(Ipv4Addr::LOCALHOST);
    let mut pairs = Vec::new();
    for k in 0..PAIRS {
        let k = u8::try_from(k).unwrap();
        let s = account(a.addr, from, 2 * k + 1).await;
        let r = account(a.addr, from, 2 * k + 2).await;
        let conv = befriend(a.addr, &s, &r).await;
        pairs.push((s, r, conv));
    }
    let addrs = vec![a.addr, b.addr];
    let acked = Arc::new(Mutex::new(0usize));
    let mut senders = Vec::new();
    let mut recipients = Vec::new();
    let mut expectations = Vec::new();
    for (s, r, conv) in pairs {
        let expected = Arc::new(Mutex::new(None));
        expectations.push(Arc::clone(&expected));
        let to = r.alias.clone();
        recipients.push(tokio::spawn(recipient(addrs.clone(), r, expected)));
        senders.push(tokio::spawn(sender(
            addrs.clone(),
            s,
            to,
            conv,
            Arc::clone(&acked),
        )));
    }

    // Under load: kill -9 the active relay.
    for _ in 0..(WAIT.as_millis() / 5) {
        if *acked.lock().unwrap() >= KILL_AFTER_ACKS {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let acked_before = *acked.lock().unwrap();
    assert!(acked_before >= KILL_AFTER_ACKS, "the load did not start");
    a.child.kill().unwrap(); // SIGKILL
    let killed = now();
    a.child.wait().unwrap();
    let second = wait_ready(&b).await;
    let takeover = killed.elapsed();
    assert!(
        second["epoch"].as_u64().unwrap() > first["epoch"].as_u64().unwrap(),
        "{first} then {second}"
    );

    let mut all_acks = Vec::new();
    for (sender, expected) in senders.into_iter().zip(&expectations) {
        let acks = tokio::time::timeout(WAIT, sender).await.unwrap().unwrap();
        *expected.lock().unwrap() = Some(acks.keys().cloned().collect());
        all_acks.push(acks);
    }
    let mut redelivered = 0usize;
    let mut total = 0usize;
    for (recipient, acks) in recipients.into_iter().zip(&all_acks) {
        let got = tokio::time::timeout(WAIT, recipient)
            .await
            .unwrap()
            .unwrap();
        let mut seqs: BTreeMap<&str, BTreeSet<u64>> = BTreeMap::new();
        for (id, seq) in &got {
            seqs.entry(id).or_default().insert(*seq);
        }
        redelivered += got.len() - seqs.len();
        for (id, seq) in acks {
            let delivered = seqs
                .get(id.as_str())
                .unwrap_or_else(|| panic!("acknowledged message {id} was lost"));
            assert_eq!(
                delivered,
                &BTreeSet::from([*seq]),
                "{id}: acknowledged with seq {seq}, delivered as {delivered:?} (a duplicate)"
            );
        }
        for id in seqs.keys() {
            assert!(
                acks.contains_key(*id),
                "{id} delivered but never acknowledged"
            );
        }
        total += acks.len();
    }
    assert_eq!(total, PAIRS * MESSAGES);
    eprintln!(
        "failover: SIGKILL of the active relay after {acked_before} acks; the standby led (/readyz 200) {} ms later; {total} acknowledged messages, each delivered once (0 lost, 0 duplicated; {redelivered} same-seq redeliveries after reconnects)",
        takeover.as_millis()
    );
    assert!(b.log().contains("active: serving clients"), "{}", b.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_leader_resumed_after_the_takeover_commits_and_acknowledges_nothing() {
    let Some(url) = database("paused_leader") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let schema = format!("paused_{}", std::process::id());
    let secrets = tmp.path().join("secrets");
    let a = Relay::start(&url, &schema, &secrets, tmp.path().join("a.log"));
    wait_ready(&a).await;
    let b = Relay::start(&url, &schema, &secrets, tmp.path().join("b.log"));
    wait_standby(&b).await;
    let from = FromAddr(Ipv4Addr::LOCALHOST);
    let alice = account(a.addr, from, 1).await;
    let bob = account(a.addr, from, 2).await;
    let carol = account(a.addr, from, 3).await;
    let conv = befriend(a.addr, &alice, &bob).await;
    let mut ws = try_connect(a.addr, &alice).await.unwrap();
    let before = json!({"type": "msg", "id": "before-pause", "to": bob.alias, "conv_id": conv,
        "crypto_v": 1, "payload": "YmVmb3Jl"});
    ws.send(Message::text(before.to_string())).await.unwrap();
    loop {
        let v = next_frame(&mut ws).await.unwrap();
        if v["type"] == "ack" {
            break;
        }
    }

    a.signal("-STOP");
    let stopped = now();
    wait_ready(&b).await;
    let takeover = stopped.elapsed();
    // While it is paused: a message frame waits in its socket, a friend request in another.
    let after = json!({"type": "msg", "id": "after-pause", "to": bob.alias, "conv_id": conv,
        "crypto_v": 1, "payload": "YWZ0ZXI="});
    ws.send(Message::text(after.to_string())).await.unwrap();
    let http = client(a.addr, alice.from);
    let request = HttpRequest::new(Method::POST, "/api/v1/friends/request")
        .json(&json!({"to_alias_id": carol.alias}))
        .unwrap()
        .bearer(&alice.token);
    let pending = tokio::spawn(async move { http.send(request).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    a.signal("-CONT");

    // The old leader acknowledges nothing: its socket ends without an ack for the message.
    while let Some(v) = next_frame(&mut ws).await {
        assert_ne!(v["type"], "ack", "the resumed old leader acknowledged: {v}");
    }
    let response = tokio::time::timeout(WAIT, pending)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(response.status.as_u16(), 503, "{:?}", response.body);
    // It stands by again.
    wait_standby(&a).await;

    // It committed nothing: the new leader has the message from before the pause, not the one
    // after, and no friend request to Carol.
    let mut bob_ws = try_connect(b.addr, &bob).await.unwrap();
    let mut seen = BTreeSet::new();
    while let Ok(Some(Ok(Message::Text(text)))) =
        tokio::time::timeout(Duration::from_millis(1_500), bob_ws.next()).await
    {
        let v: Value = serde_json::from_str(&text).unwrap();
        if v["type"] == "msg" {
            seen.insert(v["id"].as_str().unwrap().to_owned());
        }
    }
    assert_eq!(seen, BTreeSet::from(["before-pause".to_owned()]));
    let carol_http = client(b.addr, carol.from);
    let requests = call(
        &carol_http,
        Method::GET,
        "/api/v1/friends",
        &json!({}),
        Some(&carol.token),
    )
    .await;
    assert!(
        !requests.to_string().contains(&alice.alias),
        "the fenced friend request reached the database: {requests}"
    );
    let log = a.log();
    assert!(log.contains("leadership ended: fail-stop"), "{log}");
    eprintln!(
        "paused leader: SIGSTOP of the active relay; the standby led {} ms later (the server ends a silent lock session after {} ms); resumed, the old leader acknowledged and committed nothing",
        takeover.as_millis(),
        relay_pg::LOCK_IDLE_SESSION_TIMEOUT_MS
    );
}

/// Web Push on (a VAPID key in the secrets directory, nothing is ever pushed in these tests).
const WEB_PUSH: [&str; 2] = ["--vapid-subject", "mailto:ops@example.org"];

/// Short fingerprints `(jwt, vapid)` of the keys in a secrets directory, as the relay computes
/// them.
fn fingerprints(dir: &Path) -> (String, String) {
    use base64::Engine as _;
    let text = std::fs::read_to_string(dir.join(relay_server::secrets::JWT_KEY_FILE)).unwrap();
    let seed: [u8; 32] = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .unwrap()
        .try_into()
        .unwrap();
    let jwt = relay_server::secrets::jwt_key_fingerprint(&relay_core::JwtSigningKey(seed));
    let vapid = relay_push::VapidKey::load(&dir.join("vapid.pem")).unwrap();
    let vapid = relay_server::secrets::vapid_key_fingerprint(&vapid);
    (jwt.short_hex(), vapid.short_hex())
}

/// Copies the key files of `from` to a new directory `to` (modes kept: 0600).
fn copy_secrets(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

/// The VAPID public key a relay serves (to a logged-in user).
async fn vapid_public_key(relay: &Relay, user: &Account) -> String {
    let http = client(relay.addr, user.from);
    let body = call(
        &http,
        Method::GET,
        "/api/v1/push/vapid-key",
        &json!({}),
        Some(&user.token),
    )
    .await;
    body.to_string()
}

/// Asserts that `relay` exited non-zero refusing to lead for both keys, naming the short
/// fingerprints (`ours` its own, `recorded` the database's) and the fix.
async fn assert_refused(relay: &mut Relay, ours: &(String, String), recorded: &(String, String)) {
    let status = relay.exited().await;
    let log = relay.log();
    assert!(!status.success(), "{status}:\n{log}");
    for part in [
        "refusing to lead",
        &format!("the jwt key here has fingerprint {}", ours.0),
        &format!("with fingerprint {}", recorded.0),
        &format!("the vapid key here has fingerprint {}", ours.1),
        &format!("with fingerprint {}", recorded.1),
        "--secrets-dir",
        "--rotate-jwt-key",
        "--rotate-vapid-key",
    ] {
        assert!(log.contains(part), "{part:?} missing:\n{log}");
    }
    assert!(
        !log.contains("active: serving clients"),
        "it served before refusing:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_with_other_keys_refuses_to_lead_and_one_with_the_same_keys_takes_over() {
    let Some(url) = database("other_keys") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let schema = format!("keys_{}", std::process::id());
    let shared = tmp.path().join("shared");
    let other = tmp.path().join("other");
    let mut a = Relay::start_with(&url, &schema, &shared, tmp.path().join("a.log"), &WEB_PUSH);
    let first = wait_ready(&a).await;
    let alice = account(a.addr, FromAddr(Ipv4Addr::LOCALHOST), 1).await;
    let vapid_of_a = vapid_public_key(&a, &alice).await;
    let mut c = Relay::start_with(&url, &schema, &other, tmp.path().join("c.log"), &WEB_PUSH);
    wait_standby(&c).await;
    let (recorded, ours) = (fingerprints(&shared), fingerprints(&other));
    assert_ne!(recorded, ours);
    // Told at once, while standing by: not only at the failover.
    let warned = |log: &str| {
        log.lines().any(|l| {
            l.contains("ERROR")
                && l.contains("refuse to lead")
                && l.contains(&ours.0)
                && l.contains(&recorded.0)
        })
    };
    for _ in 0..(WAIT.as_millis() / 10) {
        if warned(&c.log()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(warned(&c.log()), "no early warning:\n{}", c.log());

    // The active relay dies; the standby with other keys wins the lock and refuses.
    a.kill();
    assert_refused(&mut c, &ours, &recorded).await;

    // A standby with the same secrets directory takes over: the next epoch (the refused relay
    // took none), the first relay's tokens and VAPID key.
    let b = Relay::start_with(&url, &schema, &shared, tmp.path().join("b.log"), &WEB_PUSH);
    let second = wait_ready(&b).await;
    assert_eq!(
        second["epoch"].as_u64().unwrap(),
        first["epoch"].as_u64().unwrap() + 1,
        "{first} then {second}"
    );
    // (`try_connect` panics on a 401: a token the first relay issued refused.)
    let ws = try_connect(b.addr, &alice).await;
    assert!(ws.is_some(), "{}", b.log());
    assert_eq!(vapid_public_key(&b, &alice).await, vapid_of_a);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotation_records_the_new_keys_and_refuses_relays_left_on_the_old_ones() {
    let Some(url) = database("rotation") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let schema = format!("rotation_{}", std::process::id());
    let old = tmp.path().join("old");
    let mut a = Relay::start_with(&url, &schema, &old, tmp.path().join("a.log"), &WEB_PUSH);
    wait_ready(&a).await;
    let old_keys = fingerprints(&old);

    // Rotate both keys from a copy of the directory, on a standby that then takes over.
    let new = tmp.path().join("new");
    copy_secrets(&old, &new);
    let rotate = [&WEB_PUSH[..], &["--rotate-jwt-key", "--rotate-vapid-key"]].concat();
    let mut r = Relay::start_with(&url, &schema, &new, tmp.path().join("r.log"), &rotate);
    wait_standby(&r).await;
    let new_keys = fingerprints(&new);
    assert_ne!(new_keys.0, old_keys.0);
    assert_ne!(new_keys.1, old_keys.1);
    a.kill();
    wait_ready(&r).await;
    assert!(
        r.log().contains("replaced the recorded key fingerprint"),
        "{}",
        r.log()
    );

    // A relay left on the old keys is refused once it would lead …
    let mut stale = Relay::start_with(&url, &schema, &old, tmp.path().join("s.log"), &WEB_PUSH);
    wait_standby(&stale).await;
    r.kill();
    assert_refused(&mut stale, &old_keys, &new_keys).await;
    // … and one given the new files leads.
    let copied = tmp.path().join("copied");
    copy_secrets(&new, &copied);
    let b = Relay::start_with(&url, &schema, &copied, tmp.path().join("b.log"), &WEB_PUSH);
    wait_ready(&b).await;
}

/// `--rotate-jwt-key` replaces the record in the first term the process wins only: a rotating
/// relay that lost its term (paused past the server's idle timeout) and then wins again after
/// another relay rotated once more does not put its key back; it refuses to lead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotation_is_recorded_once_and_never_undoes_a_later_one() {
    let Some(url) = database("rotation_once") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let schema = format!("rotation_once_{}", std::process::id());
    let dir_r = tmp.path().join("r");
    let mut r = Relay::start_with(
        &url,
        &schema,
        &dir_r,
        tmp.path().join("r.log"),
        &["--rotate-jwt-key"],
    );
    let first = wait_ready(&r).await;
    // A second rotation, from a copy, on a standby that takes over while R is paused.
    let dir_x = tmp.path().join("x");
    copy_secrets(&dir_r, &dir_x);
    let mut x = Relay::start_with(
        &url,
        &schema,
        &dir_x,
        tmp.path().join("x.log"),
        &["--rotate-jwt-key"],
    );
    wait_standby(&x).await;
    r.signal("-STOP");
    let second = wait_ready(&x).await;
    assert!(second["epoch"].as_u64() > first["epoch"].as_u64());
    r.signal("-CONT");
    wait_deposed(&r).await;
    // R campaigns again; when X dies, R wins the lock and must refuse (X's key is the record).
    x.kill();
    let status = r.exited().await;
    let log = r.log();
    assert!(!status.success(), "{status}:\n{log}");
    assert!(
        log.contains("refusing to lead") && log.contains("the jwt key here"),
        "{log}"
    );
}

/// Without PostgreSQL: the probes of a single relay (always ready once serving), the flags in
/// `--help`, and `--postgres` without a shared secrets directory refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_relay_is_live_and_ready_and_postgres_needs_a_secrets_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("memory.log");
    let out = std::fs::File::create(&log).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_relay"))
        .args(["--memory", "--listen", "127.0.0.1:0", "--log", "info"])
        .stdout(Stdio::from(out.try_clone().unwrap()))
        .stderr(Stdio::from(out))
        .spawn()
        .unwrap();
    let addr = common::listening_addr(&log, &mut child).expect("the relay listens");
    let relay = Relay { child, addr, log };
    let ready = wait_ready(&relay).await;
    assert_eq!(
        ready,
        json!({"status": "ready", "role": "active", "shards": [0]})
    );
    let (status, live) = probe(addr, "/healthz").await.unwrap();
    assert_eq!(
        (status, live),
        (200, json!({"status": "live", "role": "active"}))
    );
    drop(relay);

    let help = Command::new(env!("CARGO_BIN_EXE_relay"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for flag in [
        "--postgres",
        "--pg-schema",
        "--secrets-dir",
        "--blob-dir",
        "--rotate-jwt-key",
        "--rotate-vapid-key",
        "DATABASE_URL",
        "RELAY_POSTGRES_PASSWORD_FILE",
    ] {
        assert!(help.contains(flag), "--help lacks {flag}:\n{help}");
    }
    let secret = "pw-XYZZY-never-printed";
    let out = Command::new(env!("CARGO_BIN_EXE_relay"))
        .args([
            "--postgres",
            &format!("postgresql://relay:{secret}@127.0.0.1:9/chat"),
            "--listen",
            "127.0.0.1:0",
        ])
        .env_remove("DATABASE_URL")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("--secrets-dir"), "{text}");
    assert!(!text.contains(secret), "the password was printed: {text}");
    let out = Command::new(env!("CARGO_BIN_EXE_relay"))
        .args(["--memory", "--postgres", "postgresql://x@127.0.0.1/db"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "--memory and --postgres together");
    // A rotation needs a key that outlives the process (and, for VAPID, Web Push).
    for flags in [
        &["--memory", "--rotate-jwt-key"][..],
        &[
            "--memory",
            "--rotate-vapid-key",
            "--vapid-subject",
            "mailto:ops@example.org",
        ],
        &["--memory", "--rotate-vapid-key"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_relay"))
            .args(flags)
            .args(["--listen", "127.0.0.1:0"])
            .env_remove("RELAY_VAPID_SUBJECT")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flags:?}: {text}");
        assert!(
            text.contains("--data DIR or --postgres") || text.contains("--vapid-subject"),
            "{flags:?}: {text}"
        );
    }
}
