//! What an operator does with a running `relay` process, tried as an outsider on 127.0.0.1:
//! scrape `/metrics` under load (checked with the Prometheus project's own OpenMetrics
//! parser, and for labels that could name anyone), SIGTERM under load (nothing acknowledged
//! lost, every socket told 1001 and every client back after the restart), and an online
//! backup under load restored into a fresh directory (every message acknowledged before the
//! backup began is there).
//!
//! The binary is the one cargo built for the tests, or `RELAY_TEST_BIN` (e.g.
//! `target/release/relay`, to measure). Each test prints its numbers on one line.
//! The strict exposition check runs `python3` with the `prometheus_client` package; without it
//! the test says SKIPPED for that part (and fails instead when
//! `RELAY_TEST_METRICS_PARSER_REQUIRED=1`, as in CI).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{SinkExt as _, StreamExt as _};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

mod common;
use common::{Account, FromAddr, account, befriend, connect};

/// Bound of every wait: only keeps a broken build from hanging.
const WAIT: Duration = Duration::from_secs(60);
/// Messages a sender keeps unacknowledged at once.
const WINDOW: usize = 8;
/// A payload: base64 of 48 bytes.
const PAYLOAD: &str = "T1BTLWxvYWQtcGF5bG9hZC1vcGVyYXRpb25zLXRlc3QtNDgtYnl0ZXMtbG9uZy4uLi4u";

/// The test's wall clock: measuring a real process takes real time (the one place this test
/// reads it).
#[allow(
    clippy::disallowed_methods,
    reason = "a black-box test of a real process measures and bounds real time"
)]
fn now() -> Instant {
    Instant::now()
}

fn relay_bin() -> PathBuf {
    std::env::var_os("RELAY_TEST_BIN")
        .map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_relay")), PathBuf::from)
}

fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
}

/// Flags every test relay gets: registration and sending cheap enough for a load test.
const LOAD_FLAGS: &[&str] = &[
    "--pow-difficulty",
    "0",
    "--msgs-per-min-per-user",
    "1000000",
    "--frames-per-min-per-conn",
    "1000000",
    "--frame-burst-per-conn",
    "1000000",
    "--log",
    "warn",
];

/// A relay process; killed when dropped.
struct Relay {
    child: Child,
    addr: SocketAddr,
}

impl Relay {
    async fn start(addr: SocketAddr, args: &[&str], log: &Path) -> Self {
        let log = std::fs::File::create(log).unwrap();
        let child = Command::new(relay_bin())
            .arg("--listen")
            .arg(addr.to_string())
            .args(LOAD_FLAGS)
            .args(args)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let relay = Self { child, addr };
        relay.wait_ready().await;
        relay
    }

    async fn wait_ready(&self) {
        let deadline = now() + WAIT;
        while now() < deadline {
            if get(self.addr, "/readyz")
                .await
                .is_some_and(|(s, _)| s == 200)
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("the relay on {} did not become ready", self.addr);
    }

    fn sigterm(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Waits for the process to exit; returns how long that took and whether it succeeded.
    async fn exited(&mut self) -> (Duration, bool) {
        let started = now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return (started.elapsed(), status.success());
            }
            assert!(started.elapsed() < WAIT, "the relay did not exit");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A plain HTTP GET; `None` when nothing answers.
async fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut tcp = tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(addr))
        .await
        .ok()?
        .ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n");
    tcp.write_all(request.as_bytes()).await.ok()?;
    let mut bytes = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut bytes))
        .await
        .ok()?
        .ok()?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let status = text.split(' ').nth(1)?.parse().ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    Some((
        status,
        if chunked {
            dechunk(body)
        } else {
            body.to_owned()
        },
    ))
}

/// The body of a chunked response (hyper chunks bodies of unknown length).
fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            return body.to_owned();
        };
        if n == 0 || after.len() < n {
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].strip_prefix("\r\n").unwrap_or(&after[n..]);
    }
    out
}

/// Two accounts that are friends: `a` sends to `b`.
struct Pair {
    a: Account,
    b: Account,
    conv: String,
}

/// `n` pairs, each account from its own loopback address (registration is limited per
/// address).
async fn pairs(relay: SocketAddr, n: u8) -> Vec<Pair> {
    let mut out = Vec::new();
    for i in 0..n {
        let (ka, kb) = (2 * i + 1, 2 * i + 2);
        let a = account(relay, FromAddr(Ipv4Addr::new(127, 0, 3, ka)), ka).await;
        let b = account(relay, FromAddr(Ipv4Addr::new(127, 0, 3, kb)), kb).await;
        let conv = befriend(relay, &a, &b).await;
        out.push(Pair { a, b, conv });
    }
    out
}

/// What one client saw.
#[derive(Debug, Default)]
struct Seen {
    /// Message ids acknowledged to this sender, in order.
    acked: Vec<String>,
    /// Message ids delivered to this receiver.
    received: BTreeSet<String>,
    /// Close codes the relay sent this client.
    closes: Vec<u16>,
    /// GOAWAY reasons.
    goaways: Vec<String>,
    /// Connections made (the first one included).
    connections: usize,
    /// Messages refused with an error frame (a full queue, say).
    refused: usize,
}

type Shared = Arc<Mutex<Seen>>;

/// Connects `who` (retrying while the relay is down), `sync` sent.
async fn reconnect(relay: SocketAddr, who: &Account, seen: &Shared) -> WebSocketStream<TcpStream> {
    let deadline = now() + WAIT;
    loop {
        let attempt = tokio::time::timeout(Duration::from_secs(5), try_connect(relay, who)).await;
        if let Ok(Some(ws)) = attempt {
            seen.lock().unwrap().connections += 1;
            return ws;
        }
        assert!(now() < deadline, "could not reconnect");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One connection attempt (`common::connect` panics on failure; the relay may be down).
async fn try_connect(relay: SocketAddr, who: &Account) -> Option<WebSocketStream<TcpStream>> {
    let (status, _) = get(relay, "/readyz").await?;
    if status != 200 {
        return None;
    }
    let task = {
        let who = Account {
            uuid: who.uuid.clone(),
            alias: who.alias.clone(),
            token: who.token.clone(),
            from: who.from,
        };
        tokio::spawn(async move { connect(relay, &who).await.0 })
    };
    task.await.ok()
}

/// What a frame from the relay means to a test client.
enum Event {
    /// A message acknowledged.
    Acked(String),
    /// A message refused with an error frame (not acknowledged, not to be sent again).
    Refused(String),
    /// A message delivered: the receipt to send back.
    Delivered(Value),
    Other,
}

/// Records a frame from the relay.
fn record(seen: &Shared, message: &Message) -> Event {
    match message {
        Message::Text(text) => {
            let Ok(v) = serde_json::from_str::<Value>(text.as_str()) else {
                return Event::Other;
            };
            let mut seen = seen.lock().unwrap();
            let id = v["id"].as_str().unwrap_or_default().to_owned();
            match v["type"].as_str().unwrap_or_default() {
                "ack" => {
                    seen.acked.push(id.clone());
                    Event::Acked(id)
                }
                "error" if v["ref_type"] == "msg" => Event::Refused(id),
                "msg" => {
                    seen.received.insert(id);
                    Event::Delivered(json!({"type": "delivered", "conv_id": v["conv_id"],
                        "seq": v["seq"], "to": v["from"], "crypto_v": 1}))
                }
                "goaway" => {
                    seen.goaways
                        .push(v["reason"].as_str().unwrap_or_default().to_owned());
                    Event::Other
                }
                _ => Event::Other,
            }
        }
        Message::Close(frame) => {
            let code = frame.as_ref().map_or(1005, |f| u16::from(f.code));
            seen.lock().unwrap().closes.push(code);
            Event::Other
        }
        _ => Event::Other,
    }
}

/// Sends `prefix-N` messages to `pair.b` as fast as acks come back (at most [`WINDOW`]
/// unacknowledged), until `stop`; reconnects whenever the socket ends and sends the
/// unacknowledged ones again, with the same ids. Returns once everything it sent was
/// acknowledged after `stop`.
async fn sender(
    relay: SocketAddr,
    pair: &Pair,
    prefix: &str,
    seen: Shared,
    mut stop: watch::Receiver<bool>,
) {
    let mut next = 0u64;
    let mut outstanding: BTreeSet<String> = BTreeSet::new();
    let deadline = now() + WAIT * 2;
    'connection: loop {
        let mut ws = reconnect(relay, &pair.a, &seen).await;
        for id in outstanding.clone() {
            if send_msg(&mut ws, pair, &id).await.is_err() {
                continue 'connection;
            }
        }
        loop {
            assert!(now() < deadline, "the sender never finished");
            let stopping = *stop.borrow();
            if stopping && outstanding.is_empty() {
                let _ = ws.close(None).await;
                return;
            }
            while !stopping && outstanding.len() < WINDOW {
                let id = format!("{prefix}-{next}");
                next += 1;
                if send_msg(&mut ws, pair, &id).await.is_err() {
                    outstanding.insert(id);
                    continue 'connection;
                }
                outstanding.insert(id);
            }
            let frame = tokio::select! {
                frame = ws.next() => frame,
                _ = stop.changed() => continue,
            };
            match frame {
                Some(Ok(message)) => match record(&seen, &message) {
                    Event::Acked(id) => {
                        outstanding.remove(&id);
                    }
                    Event::Refused(id) => {
                        seen.lock().unwrap().refused += 1;
                        outstanding.remove(&id);
                    }
                    Event::Delivered(_) | Event::Other => {}
                },
                _ => continue 'connection,
            }
        }
    }
}

async fn send_msg(ws: &mut WebSocketStream<TcpStream>, pair: &Pair, id: &str) -> Result<(), ()> {
    let msg = json!({"type": "msg", "id": id, "to": pair.b.alias, "conv_id": pair.conv,
        "crypto_v": 1, "payload": PAYLOAD});
    ws.send(msg.to_string().into()).await.map_err(|_| ())
}

/// Reads messages for `who` (reconnecting whenever the socket ends) until `stop`.
async fn receiver(relay: SocketAddr, who: &Account, seen: Shared, mut stop: watch::Receiver<bool>) {
    loop {
        let mut ws = reconnect(relay, who, &seen).await;
        loop {
            if *stop.borrow() {
                let _ = ws.close(None).await;
                return;
            }
            let frame = tokio::select! {
                frame = ws.next() => frame,
                _ = stop.changed() => continue,
            };
            match frame {
                Some(Ok(message)) => {
                    if let Event::Delivered(receipt) = record(&seen, &message)
                        && ws.send(receipt.to_string().into()).await.is_err()
                    {
                        break;
                    }
                }
                _ => break,
            }
        }
    }
}

fn acked(seen: &[Shared]) -> usize {
    seen.iter().map(|s| s.lock().unwrap().acked.len()).sum()
}

// ---------------------------------------------------------------------------------- metrics

/// One sample of an exposition: name, labels, value.
type Sample = (String, BTreeMap<String, String>, f64);

/// Parses `text` with the Prometheus project's Python client (its strict OpenMetrics
/// parser); `None` when python3 or the package is missing.
fn parse_openmetrics(text: &str) -> Option<Result<Vec<Sample>, String>> {
    const SCRIPT: &str = r#"
import json, sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
out = []
for family in text_string_to_metric_families(sys.stdin.read()):
    for s in family.samples:
        out.append([s.name, s.labels, s.value])
print(json.dumps(out))
"#;
    use std::io::Write as _;
    let probe = Command::new("python3")
        .args(["-c", "import prometheus_client.openmetrics.parser"])
        .output()
        .ok()?;
    if !probe.status.success() {
        return None;
    }
    let mut child = Command::new("python3")
        .args(["-c", SCRIPT])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    child.stdin.take()?.write_all(text.as_bytes()).ok()?;
    let out = child.wait_with_output().ok()?;
    if !out.status.success() {
        return Some(Err(String::from_utf8_lossy(&out.stderr).into_owned()));
    }
    let samples: Vec<(String, BTreeMap<String, String>, f64)> =
        serde_json::from_slice(&out.stdout).ok()?;
    Some(Ok(samples))
}

/// The samples of `text`, read line by line (when the strict parser is not installed).
fn parse_lines(text: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (series, value) = line.rsplit_once(' ').expect("sample line");
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => (name, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        let mut map = BTreeMap::new();
        for pair in labels.split("\",").filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once("=\"").expect("label");
            map.insert(k.to_owned(), v.trim_end_matches('"').to_owned());
        }
        out.push((name.to_owned(), map, value.parse().expect("value")));
    }
    out
}

fn samples_of(text: &str) -> Vec<Sample> {
    let required = std::env::var_os("RELAY_TEST_METRICS_PARSER_REQUIRED").is_some();
    match parse_openmetrics(text) {
        Some(Ok(samples)) => samples,
        Some(Err(e)) => panic!(
            "the exposition is not valid OpenMetrics: {e}\n{} bytes, ending {:?}",
            text.len(),
            &text[text.len().saturating_sub(200)..]
        ),
        None if required => panic!(
            "RELAY_TEST_METRICS_PARSER_REQUIRED is set but python3's prometheus_client is missing"
        ),
        None => {
            eprintln!(
                "SKIPPED strict OpenMetrics parse: python3 with prometheus_client not installed \
                 (pip install prometheus_client); checking line by line"
            );
            parse_lines(text)
        }
    }
}

fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|(n, l, _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| l.get(*k).map(String::as_str) == Some(v))
        })
        .map(|(_, _, v)| v)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_scraped_under_load_are_valid_openmetrics_and_name_no_one() {
    let dir = tempfile::tempdir().unwrap();
    let (addr, metrics) = (free_addr(), free_addr());
    let data = dir.path().join("data");
    let relay = Relay::start(
        addr,
        &[
            "--data",
            data.to_str().unwrap(),
            "--metrics-listen",
            &metrics.to_string(),
        ],
        &dir.path().join("relay.log"),
    )
    .await;
    let pairs = pairs(addr, 3).await;
    let (stop_tx, stop) = watch::channel(false);
    let mut seen = Vec::new();
    let mut tasks = Vec::new();
    let pairs = Arc::new(pairs);
    for i in 0..pairs.len() {
        let (s, r): (Shared, Shared) = (Shared::default(), Shared::default());
        seen.push(s.clone());
        let (p, stop1, stop2) = (Arc::clone(&pairs), stop.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            sender(addr, &p[i], &format!("m{i}"), s, stop1).await;
        }));
        let p = Arc::clone(&pairs);
        tasks.push(tokio::spawn(async move {
            receiver(addr, &p[i].b, r, stop2).await;
        }));
    }
    // Scrape while the load runs: every exposition must parse.
    let mut scrapes = 0;
    let mut last = String::new();
    let started = now();
    let mut peak_tcp = 0.0f64;
    while started.elapsed() < Duration::from_millis(2_500) || scrapes < 5 {
        let (status, text) = get(metrics, "/metrics").await.expect("metrics answer");
        assert_eq!(status, 200);
        let samples = samples_of(&text);
        peak_tcp = peak_tcp.max(value(&samples, "relay_tcp_connections", &[]));
        scrapes += 1;
        last = text;
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    let _ = stop_tx.send(true);
    for task in tasks {
        task.await.unwrap();
    }
    let (status, text) = get(metrics, "/metrics").await.unwrap();
    assert_eq!(status, 200);
    if !text.is_empty() {
        last = text;
    }
    let samples = samples_of(&last);

    // Not on the public port.
    let (status, _) = get(addr, "/metrics").await.unwrap();
    assert_eq!(status, 404, "/metrics must not be served on --listen");

    // The load shows.
    let accepted = value(&samples, "relay_messages_accepted_total", &[]);
    let acked_total = acked(&seen) as f64;
    assert!(
        accepted >= acked_total && accepted > 0.0,
        "{accepted} < {acked_total}"
    );
    assert!(value(&samples, "relay_frames_received_total", &[("frame", "msg")]) >= accepted);
    assert!(value(&samples, "relay_frames_sent_total", &[("frame", "ack")]) >= accepted);
    assert!(value(&samples, "relay_store_commit_duration_seconds_count", &[]) > 0.0);
    assert!(value(&samples, "relay_store_commit_rows_count", &[]) > 0.0);
    assert!(value(&samples, "relay_batch_inputs_count", &[]) > 0.0);
    // The core worked, for less time than the load ran (it also waited).
    let busy = value(&samples, "relay_core_busy_seconds_total", &[("shard", "0")]);
    let ran = started.elapsed().as_secs_f64();
    assert!(busy > 0.0 && busy < ran, "core busy {busy} s in {ran} s");
    assert_eq!(
        value(
            &samples,
            "relay_http_responses_total",
            &[("route", "register"), ("status", "2xx")]
        ),
        6.0
    );
    assert!(value(&samples, "relay_websockets_opened_total", &[]) >= 6.0);
    assert_eq!(value(&samples, "relay_leader", &[]), 1.0);
    assert!(peak_tcp >= 6.0, "tcp connections under load: {peak_tcp}");

    // No label value outside the closed sets, none carrying an account, alias, id or address.
    let allowed: BTreeSet<&str> = relay_server::metrics::LABEL_VALUES
        .iter()
        .flat_map(|set| set.iter().copied())
        .collect();
    let mut secrets: Vec<String> = Vec::new();
    for p in pairs.iter() {
        for a in [&p.a, &p.b] {
            secrets.extend([
                a.uuid.clone(),
                a.alias.clone(),
                a.token.clone(),
                a.from.0.to_string(),
            ]);
        }
        secrets.push(p.conv.clone());
    }
    secrets.extend(["m0-1".into(), "127.0.0.1".into(), "127.0.3".into()]);
    let mut values = BTreeSet::new();
    for (name, labels, _) in &samples {
        assert!(name.starts_with("relay_"), "{name}");
        for (key, v) in labels {
            if key == "le" {
                continue;
            }
            // A core's shard: a number below the relay's shard count (one here).
            assert!(
                allowed.contains(v.as_str()) || (key == "shard" && v == "0"),
                "{name}{{{key}={v:?}}} is not a fixed label value"
            );
            for secret in &secrets {
                assert!(
                    !v.contains(secret.as_str()),
                    "{name}{{{key}={v:?}}} carries {secret}"
                );
            }
            values.insert(v.clone());
        }
    }
    println!(
        "metrics under load: {scrapes} scrapes in {:.1} s, all valid; {} samples, {} distinct \
         label values; {accepted} messages accepted; peak {peak_tcp} TCP connections",
        started.elapsed().as_secs_f64(),
        samples.len(),
        values.len()
    );
    drop(relay);
}

// ---------------------------------------------------------------------------------- drain

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_under_load_loses_nothing_acknowledged_and_every_client_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    let addr = free_addr();
    let data = dir.path().join("data");
    let data_arg = data.to_str().unwrap().to_owned();
    let mut relay = Relay::start(addr, &["--data", &data_arg], &dir.path().join("a.log")).await;
    let pairs = Arc::new(pairs(addr, 4).await);
    let (stop_senders, stop_s) = watch::channel(false);
    let (stop_receivers, stop_r) = watch::channel(false);
    let (mut senders, mut receivers) = (Vec::new(), Vec::new());
    let (mut sending, mut receiving) = (Vec::new(), Vec::new());
    for i in 0..pairs.len() {
        let (s, r): (Shared, Shared) = (Shared::default(), Shared::default());
        senders.push(s.clone());
        receivers.push(r.clone());
        let (p, stop1, stop2) = (Arc::clone(&pairs), stop_s.clone(), stop_r.clone());
        sending.push(tokio::spawn(async move {
            sender(addr, &p[i], &format!("d{i}"), s, stop1).await;
        }));
        let p = Arc::clone(&pairs);
        receiving.push(tokio::spawn(async move {
            receiver(addr, &p[i].b, r, stop2).await;
        }));
    }
    // Under load: wait until messages flow, then SIGTERM.
    let deadline = now() + WAIT;
    while acked(&senders) < 400 {
        assert!(now() < deadline, "no load");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let acked_at_signal = acked(&senders);
    relay.sigterm();
    let (drain, clean) = relay.exited().await;
    assert!(clean, "the relay exited with an error after SIGTERM");
    assert!(
        drain < Duration::from_millis(relay_server::DRAIN_DEADLINE_MS),
        "drain took {drain:?}"
    );
    let acked_before_restart = acked(&senders);
    // Every socket was told: GOAWAY server_shutdown, then 1001.
    let everyone: Vec<&Shared> = senders.iter().chain(&receivers).collect();
    for (i, seen) in everyone.iter().enumerate() {
        let seen = seen.lock().unwrap();
        assert!(
            seen.closes.contains(&u16::from(CloseCode::Away)),
            "client {i} closes: {:?}",
            seen.closes
        );
        assert!(
            seen.goaways.iter().any(|r| r == "server_shutdown"),
            "client {i}"
        );
    }
    // Same data directory, a new process: every client reconnects by itself.
    let relay2 = Relay::start(addr, &["--data", &data_arg], &dir.path().join("b.log")).await;
    let deadline = now() + WAIT;
    while everyone.iter().any(|s| s.lock().unwrap().connections < 2) {
        assert!(now() < deadline, "not every client reconnected");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let _ = stop_senders.send(true);
    for task in sending {
        task.await.unwrap();
    }
    // Senders end once everything they sent is acknowledged; receivers get every message.
    let all_acked: Vec<BTreeSet<String>> = senders
        .iter()
        .map(|s| s.lock().unwrap().acked.iter().cloned().collect())
        .collect();
    let deadline = now() + WAIT;
    loop {
        let missing: usize = (0..pairs.len())
            .map(|i| {
                let got = &receivers[i].lock().unwrap().received;
                all_acked[i].iter().filter(|id| !got.contains(*id)).count()
            })
            .sum();
        if missing == 0 {
            break;
        }
        assert!(
            now() < deadline,
            "{missing} acknowledged messages never reached their recipient"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = stop_receivers.send(true);
    for task in receiving {
        task.await.unwrap();
    }
    let acked_ids: usize = all_acked.iter().map(BTreeSet::len).sum();
    let reconnected = everyone
        .iter()
        .filter(|s| s.lock().unwrap().connections >= 2)
        .count();
    println!(
        "drain under load: {acked_at_signal} acked at SIGTERM, {acked_before_restart} before the \
         restart, exit {} ms after SIGTERM (deadline {} ms), {}/{} sockets closed 1001 with \
         GOAWAY, {reconnected}/{} clients reconnected, {acked_ids} acked in all, 0 lost",
        drain.as_millis(),
        relay_server::DRAIN_DEADLINE_MS,
        everyone.len(),
        everyone.len(),
        everyone.len(),
    );
    drop(relay2);
}

// ---------------------------------------------------------------------------------- backup

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_online_backup_under_load_restores_every_message_acknowledged_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let addr = free_addr();
    let data = dir.path().join("data");
    let data_arg = data.to_str().unwrap().to_owned();
    let mut relay = Relay::start(addr, &["--data", &data_arg], &dir.path().join("a.log")).await;
    // Recipients stay offline: every message waits in the store.
    let pairs = Arc::new(pairs(addr, 3).await);
    let (stop_tx, stop) = watch::channel(false);
    let mut senders = Vec::new();
    let mut tasks = Vec::new();
    for i in 0..pairs.len() {
        let s = Shared::default();
        senders.push(s.clone());
        let (p, stop) = (Arc::clone(&pairs), stop.clone());
        tasks.push(tokio::spawn(async move {
            sender(addr, &p[i], &format!("b{i}"), s, stop).await;
        }));
    }
    let deadline = now() + WAIT;
    while acked(&senders) < 1_500 {
        assert!(now() < deadline, "no load");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // What was acknowledged before the backup began.
    let before: Vec<BTreeSet<String>> = senders
        .iter()
        .map(|s| s.lock().unwrap().acked.iter().cloned().collect())
        .collect();
    let out = dir.path().join("backup.sqlite3");
    let started = now();
    let backup = tokio::process::Command::new(relay_bin())
        .args([
            "backup",
            "--data",
            &data_arg,
            "--out",
            out.to_str().unwrap(),
        ])
        .output()
        .await
        .unwrap();
    let took = started.elapsed();
    assert!(
        backup.status.success(),
        "{}",
        String::from_utf8_lossy(&backup.stderr)
    );
    let during = acked(&senders) - before.iter().map(BTreeSet::len).sum::<usize>();
    let _ = stop_tx.send(true);
    for task in tasks {
        task.await.unwrap();
    }
    relay.sigterm();
    relay.exited().await;
    let size = std::fs::metadata(&out).unwrap().len();

    // Restore into a fresh directory, with the key file copied back as the README says.
    let fresh = dir.path().join("fresh");
    let restore = Command::new(relay_bin())
        .args([
            "restore",
            "--from",
            out.to_str().unwrap(),
            "--data",
            fresh.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        restore.status.success(),
        "{}",
        String::from_utf8_lossy(&restore.stderr)
    );
    let key = relay_server::secrets::JWT_KEY_FILE;
    std::fs::copy(data.join(key), fresh.join(key)).unwrap();
    // Restoring over a store is refused.
    let again = Command::new(relay_bin())
        .args([
            "restore",
            "--from",
            out.to_str().unwrap(),
            "--data",
            fresh.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already exists"));

    let relay2 = Relay::start(
        addr,
        &["--data", fresh.to_str().unwrap()],
        &dir.path().join("b.log"),
    )
    .await;
    let (_stop_tx, stop) = watch::channel(false);
    let mut found = 0usize;
    for (i, p) in pairs.iter().enumerate() {
        let seen = Shared::default();
        let task = {
            let (seen, stop) = (seen.clone(), stop.clone());
            let who = Account {
                uuid: p.b.uuid.clone(),
                alias: p.b.alias.clone(),
                token: p.b.token.clone(),
                from: p.b.from,
            };
            tokio::spawn(async move { receiver(addr, &who, seen, stop).await })
        };
        let deadline = now() + WAIT;
        loop {
            let missing = before[i]
                .iter()
                .filter(|id| !seen.lock().unwrap().received.contains(*id))
                .count();
            if missing == 0 {
                break;
            }
            assert!(
                now() < deadline,
                "pair {i}: {missing} messages acknowledged before the backup are not in it"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        found += before[i].len();
        task.abort();
    }
    println!(
        "backup under load: {} bytes in {} ms (the whole `relay backup` process) while {during} \
         more messages were acknowledged; restored into a fresh directory: {found}/{found} \
         messages acknowledged before the backup began were delivered",
        size,
        took.as_millis()
    );
    drop(relay2);
}
