//! No payload, token, ticket or client address reaches the relay's log at any level (issue 17,
//! D7), with the subscriber the `relay` binary installs (`relay_server::logging`) at TRACE for
//! every target: two accounts from their own loopback addresses befriend, connect, exchange a
//! message and send a malformed frame carrying the same payload; every line logged by the
//! relay, the libraries under it and the test's own clients is searched for those secrets, in
//! plain text and in the hex form tungstenite prints frames in.
//!
//! The same run with the JSON format (`--log-format json`): every line is one JSON object with
//! the documented field names, and none holds a secret either.
//!
//! A control run with a plain `EnvFilter("trace")` subscriber (what the binary used before)
//! shows that the search would find the payload if it leaked.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::{SinkExt as _, StreamExt as _};
use relay_core::{Config, MemoryBlobStore, store::MemoryStore};
use relay_server::RelayServer;
use seam::net::{Listener as _, Network, Tokio};
use serde_json::{Value, json};
use tracing_subscriber::util::SubscriberInitExt as _;

mod common;
use common::{FromAddr, account, befriend, connect};

/// Every formatted line, kept in memory.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Capture {
    fn text(&self) -> String {
        let bytes = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Capture {
    type Writer = Self;
    fn make_writer(&'a self) -> Self {
        self.clone()
    }
}

/// The payload every frame of the run carries: valid base64 of a recognisable plaintext.
const PAYLOAD: &str = "TE9HQ0FOQVJZLXBheWxvYWQtbXVzdC1uZXZlci1iZS1sb2dnZWQ="; // "LOGCANARY-payload-must-never-be-logged"
const ALICE_ADDR: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 77);
const BOB_ADDR: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 78);

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

/// What the run handed out and sent, to be searched for in the log.
struct Secrets {
    strings: Vec<String>,
}

/// Runs the relay and two clients on this thread (the caller's subscriber sees everything).
async fn run_flow() -> Secrets {
    let listener = Tokio::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .await
        .unwrap();
    let relay = listener.local_addr().unwrap();
    let config = Config {
        pow_difficulty: 0,
        ..Config::default()
    };
    let server = RelayServer::in_memory(config, 3, MemoryStore::new(), MemoryBlobStore::new());
    let (stop, task) = common::serve_until_notified(server, listener);

    let alice = account(relay, FromAddr(ALICE_ADDR), 1).await;
    let bob = account(relay, FromAddr(BOB_ADDR), 2).await;
    let conv = befriend(relay, &alice, &bob).await;
    let (mut a_ws, a_ticket) = connect(relay, &alice).await;
    let (mut b_ws, b_ticket) = connect(relay, &bob).await;

    let msg = json!({"type": "msg", "id": "m-canary-1", "to": bob.alias, "conv_id": conv,
        "crypto_v": 1, "payload": PAYLOAD});
    a_ws.send(msg.to_string().into()).await.unwrap();
    // Malformed (no `to`): answered with an error frame, the payload must not be echoed to logs.
    let bad = json!({"type": "msg", "id": "m-canary-2", "conv_id": conv, "payload": PAYLOAD});
    a_ws.send(bad.to_string().into()).await.unwrap();
    let delivered = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(Ok(frame)) = b_ws.next().await {
            if let Ok(text) = frame.to_text()
                && let Ok(v) = serde_json::from_str::<Value>(text)
                && v["type"] == "msg"
            {
                return v;
            }
        }
        Value::Null
    })
    .await
    .unwrap();
    assert_eq!(delivered["payload"], PAYLOAD, "the message went through");
    // Alice reads her ack and the error frame.
    let _ = tokio::time::timeout(Duration::from_millis(300), async {
        while a_ws.next().await.is_some() {}
    })
    .await;
    drop(a_ws);
    drop(b_ws);
    stop.notify_one();
    task.await.unwrap().unwrap();
    Secrets {
        strings: vec![
            PAYLOAD.to_owned(),
            hex(PAYLOAD),
            "LOGCANARY".to_owned(),
            alice.token,
            bob.token,
            a_ticket,
            b_ticket,
            ALICE_ADDR.to_string(),
            BOB_ADDR.to_string(),
        ],
    }
}

fn leaks(log: &str, secrets: &Secrets) -> Vec<String> {
    secrets
        .strings
        .iter()
        .filter(|s| log.contains(s.as_str()))
        .map(|s| s.chars().take(24).collect())
        .collect()
}

#[tokio::test(flavor = "current_thread")]
async fn nothing_secret_reaches_the_log_at_trace() {
    let capture = Capture::default();
    let subscriber = relay_server::logging::subscriber("trace", capture.clone(), false).unwrap();
    let guard = subscriber.set_default();
    let secrets = run_flow().await;
    drop(guard);
    let log = capture.text();
    // TRACE was on: the relay's per-frame events are there.
    assert!(log.contains("frame out"), "no TRACE line from the relay");
    assert!(
        log.contains("websocket open"),
        "no INFO line from the relay"
    );
    let found = leaks(&log, &secrets);
    assert!(found.is_empty(), "secrets in the log: {found:?}");
}

#[tokio::test(flavor = "current_thread")]
async fn nothing_secret_reaches_the_json_log_at_trace() {
    use relay_server::logging::{LogFormat, subscriber_with_format};
    let capture = Capture::default();
    let subscriber = subscriber_with_format("trace", capture.clone(), LogFormat::Json).unwrap();
    let guard = subscriber.set_default();
    let secrets = run_flow().await;
    drop(guard);
    let log = capture.text();
    let mut lines = 0;
    let mut with_span = 0;
    for line in log.lines() {
        let v: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not one JSON object per line ({e}): {line}"));
        for field in ["timestamp", "level", "target"] {
            assert!(v[field].is_string(), "no {field}: {line}");
        }
        assert!(
            !line.contains('\u{1b}'),
            "ANSI escape in a JSON line: {line}"
        );
        if v["span"]["name"] == "ws" {
            assert!(v["span"]["conn"].is_u64(), "{line}");
            with_span += 1;
        }
        lines += 1;
    }
    assert!(
        log.contains(r#""message":"frame out""#),
        "no TRACE line from the relay"
    );
    assert!(log.contains(r#""message":"websocket open""#));
    assert!(with_span > 0, "no event inside a connection's span");
    let found = leaks(&log, &secrets);
    assert!(found.is_empty(), "secrets in the JSON log: {found:?}");
    eprintln!("{lines} JSON lines, {with_span} inside a connection's span, no secret");
}

#[tokio::test(flavor = "current_thread")]
async fn control_an_unfiltered_trace_log_would_leak_the_payload() {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("trace"))
        .with_writer(capture.clone())
        .finish();
    let guard = subscriber.set_default();
    let secrets = run_flow().await;
    drop(guard);
    let found = leaks(&capture.text(), &secrets);
    eprintln!("an unfiltered TRACE log holds: {found:?}");
    assert!(
        !found.is_empty(),
        "the search found nothing even without the cap: it would not see a leak"
    );
}
