//! The `relay` binary's push flags, as an operator uses them: `--help` lists them; key and
//! credential files open to group or others are refused at startup (without printing them);
//! and, in test mode on loopback, a real process with `--vapid-subject`, `--fcm-credentials`
//! and `--apns-key` pointed at the push-service stand-ins delivers to all three with real
//! cryptography, signing Web Push with the key it created in `DIR/vapid.pem` (mode 0600) and
//! serves, and logs none of the targets.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt as _, StreamExt as _};
use http::Method;
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng as _;
use relay_push::VapidKey;
use seam::clock::SystemClock;
use seam::net::{Listener as _, Network, Tokio};
use serde_json::{Value, json};
use standins::pushcrypto::{b64url_decode, is_uncompressed_p256_point};
use standins::{ApnsService, FcmService, WebPushService};
use tokio_tungstenite::tungstenite::Message;

mod common;
use common::{FromAddr, account, befriend, call, client, connect};

const SUBJECT: &str = "mailto:ops@example.org";
const KEY_ID: &str = "KEYID12345";
const TEAM_ID: &str = "TEAM123456";
const BUNDLE: &str = "org.example.securechat";
const NEW_MSG: &[u8] = br#"{"type":"new_msg"}"#;
/// Bound of every wait; only keeps a broken build from hanging.
const WAIT: Duration = Duration::from_secs(30);

fn relay_bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_relay"))
}

fn write_file(path: &Path, text: &str, mode: u32) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
}

/// Runs the binary expecting it to refuse to start; returns its output.
fn refused(args: &[&str]) -> Output {
    let mut child = relay_bin()
        .args(args)
        .args(["--listen", &free_addr().to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    for _ in 0..3_000 {
        if child.try_wait().unwrap().is_some() {
            let out = child.wait_with_output().unwrap();
            assert!(!out.status.success(), "{args:?} exited successfully");
            return out;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    panic!("{args:?}: the relay started instead of refusing");
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn help_lists_the_push_flags_and_no_plaintext_gateway() {
    let out = relay_bin().arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--vapid-subject",
        "--vapid-key",
        "--fcm-credentials",
        "--fcm-endpoint",
        "--fcm-token-url",
        "--apns-key ",
        "--apns-key-id",
        "--apns-team-id",
        "--apns-topic",
        "--apns-endpoint",
        "RELAY_VAPID_SUBJECT",
        "--push-allow-host",
        "--push-allow-private",
        "--body-read-timeout-ms",
        "--body-min-bytes-per-s",
        "--max-queued-bytes ",
        "--max-queued-msgs-per-recipient",
        "--max-queued-bytes-per-recipient",
        "--max-queued-bytes-per-conversation",
        "--max-queued-bytes-per-sender",
    ] {
        assert!(help.contains(flag), "--help lacks {flag}:\n{help}");
    }
    assert!(!help.contains("--push-gateway"), "{help}");
}

/// A data directory the group or others may write to is refused at startup; in a private one
/// the store, its WAL and shared-memory files are created 0600; and log lines written to a
/// pipe (or with `NO_COLOR`) carry no ANSI colour codes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_directory_store_files_and_piped_logs() {
    let tmp = tempfile::tempdir().unwrap();
    let shared = tmp.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    for open in [0o777, 0o770, 0o722] {
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(open)).unwrap();
        let out = refused(&["--data", shared.to_str().unwrap()]);
        let err = stderr(&out);
        assert!(err.contains("chmod 700"), "{open:o}: {err}");
        assert!(!shared.join("relay.sqlite3").exists(), "nothing written");
    }
    let data = tmp.path().join("data");
    let log = tmp.path().join("relay.log");
    let (relay, _addr) = start_relay(
        &["--data".into(), data.to_str().unwrap().into()],
        log.clone(),
    )
    .await;
    let files = [
        "relay.sqlite3",
        "relay.sqlite3-wal",
        "relay.sqlite3-shm",
        "jwt-signing.key",
    ];
    // The listener is bound before the store is opened: wait for the relay to say it listens.
    until("the relay to listen", || {
        std::fs::read_to_string(&log).is_ok_and(|t| t.contains("relay listening"))
    })
    .await;
    for file in files {
        assert_eq!(mode(&data.join(file)), 0o600, "{file}");
    }
    assert_eq!(mode(&data), 0o700);
    drop(relay);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("relay listening"), "{text}");
    assert!(
        !text.contains('\u{1b}'),
        "ANSI codes in a piped log:\n{text}"
    );
}

#[test]
fn key_and_credential_files_open_to_group_or_others_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let key = VapidKey::generate(&mut ChaCha20Rng::seed_from_u64(1));
    let pem = key.to_pem();
    let secret_line = pem.lines().nth(1).unwrap().to_owned();

    // DIR/vapid.pem, group-readable.
    let data = tmp.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700)).unwrap();
    write_file(&data.join("vapid.pem"), &pem, 0o640);
    let out = refused(&["--data", data.to_str().unwrap(), "--vapid-subject", SUBJECT]);
    let err = stderr(&out);
    assert!(
        err.contains("vapid.pem") && err.contains("chmod 600"),
        "{err}"
    );
    assert!(!err.contains(&secret_line), "the key was printed: {err}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains(&secret_line));

    // --vapid-key FILE, world-readable.
    let file = tmp.path().join("vapid-key.pem");
    write_file(&file, &pem, 0o644);
    let err = stderr(&refused(&[
        "--memory",
        "--vapid-subject",
        SUBJECT,
        "--vapid-key",
        file.to_str().unwrap(),
    ]));
    assert!(
        err.contains("chmod 600") && !err.contains(&secret_line),
        "{err}"
    );

    // FCM service account and APNs key, group-readable.
    let fcm = tmp.path().join("fcm.json");
    let account = FcmService::new(Arc::new(SystemClock)).service_account_json("https://x");
    write_file(&fcm, &account, 0o640);
    let err = stderr(&refused(&[
        "--memory",
        "--fcm-credentials",
        fcm.to_str().unwrap(),
    ]));
    assert!(
        err.contains("fcm.json") && err.contains("chmod 600"),
        "{err}"
    );
    let p8 = tmp.path().join("AuthKey.p8");
    let apns = ApnsService::new(1, Arc::new(SystemClock), KEY_ID, TEAM_ID, BUNDLE);
    write_file(&p8, &apns.p8_pem(), 0o604);
    let err = stderr(&refused(&[
        "--memory",
        "--apns-key",
        p8.to_str().unwrap(),
        "--apns-key-id",
        KEY_ID,
        "--apns-team-id",
        TEAM_ID,
        "--apns-topic",
        BUNDLE,
    ]));
    assert!(
        err.contains("AuthKey.p8") && err.contains("chmod 600"),
        "{err}"
    );

    // Outside test mode a push service URL must be https://.
    std::fs::set_permissions(&fcm, std::fs::Permissions::from_mode(0o600)).unwrap();
    let err = stderr(&refused(&[
        "--memory",
        "--fcm-credentials",
        fcm.to_str().unwrap(),
        "--fcm-endpoint",
        "http://127.0.0.1:9",
    ]));
    assert!(err.contains("https://"), "{err}");
    // A VAPID key without a subject is a usage error.
    let err = stderr(&refused(&[
        "--memory",
        "--vapid-key",
        file.to_str().unwrap(),
    ]));
    assert!(err.contains("--vapid-subject"), "{err}");
}

/// Serves `router` on 127.0.0.1, port 0; returns its base URL.
async fn serve(router: axum::Router) -> String {
    let listener = Tokio::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(seam::net::serve(listener, router, std::future::pending()));
    format!("http://{addr}")
}

/// The relay process; killed when dropped.
struct RelayProcess {
    child: Child,
    log: PathBuf,
}

impl Drop for RelayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the binary on a port of its own choosing (port 0: no race with other tests for
/// a free port) and returns it with the address it logged.
async fn start_relay(args: &[String], log: PathBuf) -> (RelayProcess, SocketAddr) {
    let out = std::fs::File::create(&log).unwrap();
    let child = relay_bin()
        .args(args)
        .args(["--listen", "127.0.0.1:0", "--log", "info"])
        .stdout(Stdio::from(out.try_clone().unwrap()))
        .stderr(Stdio::from(out))
        .spawn()
        .unwrap();
    let mut relay = RelayProcess { child, log };
    let found =
        tokio::task::block_in_place(|| common::listening_addr(&relay.log, &mut relay.child));
    let Some(addr) = found else {
        panic!(
            "the relay did not start listening:\n{}",
            std::fs::read_to_string(&relay.log).unwrap()
        );
    };
    (relay, addr)
}

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..(WAIT.as_millis() / 10) {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{what}: not reached within the wait");
}

/// The next frame of type `kind` (others skipped).
async fn next_of<S>(ws: &mut tokio_tungstenite::WebSocketStream<S>, kind: &str) -> Value
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    loop {
        let message = tokio::time::timeout(WAIT, ws.next())
            .await
            .unwrap_or_else(|_| panic!("no {kind} within the wait"));
        if let Some(Ok(Message::Text(text))) = message {
            let v: Value = serde_json::from_str(&text).unwrap();
            if v["type"] == kind {
                return v;
            }
        } else if !matches!(message, Some(Ok(_))) {
            panic!("socket ended waiting for {kind}: {message:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_delivers_web_push_fcm_and_apns_to_the_stand_ins() {
    let tmp = tempfile::tempdir().unwrap();
    let clock = Arc::new(SystemClock);
    let web = WebPushService::new(41, clock.clone());
    let fcm = FcmService::new(clock.clone());
    let apns = ApnsService::new(41, clock, KEY_ID, TEAM_ID, BUNDLE);
    let web_base = serve(web.router()).await;
    let fcm_base = serve(fcm.router()).await;
    let apns_base = serve(apns.router()).await;
    let fcm_file = tmp.path().join("fcm.json");
    write_file(&fcm_file, &fcm.service_account_json(&fcm_base), 0o600);
    let p8 = tmp.path().join("AuthKey.p8");
    write_file(&p8, &apns.p8_pem(), 0o600);
    let data = tmp.path().join("data");
    let path = |p: &Path| p.to_str().unwrap().to_owned();
    let args: Vec<String> = [
        "--data",
        &path(&data),
        "--test-mode",
        "--pow-difficulty",
        "0",
        "--vapid-subject",
        SUBJECT,
        "--fcm-credentials",
        &path(&fcm_file),
        "--fcm-endpoint",
        &fcm_base,
        "--apns-key",
        &path(&p8),
        "--apns-key-id",
        KEY_ID,
        "--apns-team-id",
        TEAM_ID,
        "--apns-topic",
        BUNDLE,
        "--apns-endpoint",
        &apns_base,
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let (relay, addr) = start_relay(&args, tmp.path().join("relay.log")).await;

    // The key was created next to the JWT key, 0600, and is the one served.
    let key_file = data.join("vapid.pem");
    assert_eq!(mode(&key_file), 0o600);
    let key = VapidKey::load(&key_file).unwrap();
    let from = FromAddr(Ipv4Addr::LOCALHOST);
    let http = client(addr, from);
    let alice = account(addr, from, 1).await;
    let browser = account(addr, from, 2).await;
    let android = account(addr, from, 3).await;
    let ios = account(addr, from, 4).await;
    let v = call(
        &http,
        Method::GET,
        "/api/v1/push/vapid-key",
        &json!({}),
        Some(&browser.token),
    )
    .await;
    let served = v["vapid_public_key"].as_str().unwrap();
    assert_eq!(served, key.public_key_b64url());
    assert!(is_uncompressed_p256_point(&b64url_decode(served).unwrap()));
    web.expect_vapid_key(served);

    let sub = web.subscribe(&web_base);
    let post = Method::POST;
    call(
        &http,
        post.clone(),
        "/api/v1/push/subscribe",
        &json!({"endpoint": sub.endpoint, "keys": {"p256dh": sub.p256dh, "auth": sub.auth}}),
        Some(&browser.token),
    )
    .await;
    call(
        &http,
        post.clone(),
        "/api/v1/push/register",
        &json!({"token": "fcm-token-1", "platform": "android"}),
        Some(&android.token),
    )
    .await;
    call(
        &http,
        post.clone(),
        "/api/v1/push/register",
        &json!({"device_token": "0a1b2c3d4e5f", "platform": "ios"}),
        Some(&ios.token),
    )
    .await;
    let mut convs = Vec::new();
    for friend in [&browser, &android, &ios] {
        convs.push(befriend(addr, &alice, friend).await);
    }
    let (mut ws, _) = connect(addr, &alice).await;
    for (n, (friend, conv)) in [&browser, &android, &ios].iter().zip(&convs).enumerate() {
        let id = format!("m{n}");
        let frame = json!({"type": "msg", "id": id, "to": friend.alias, "conv_id": conv,
            "crypto_v": 1, "payload": "cHVzaA=="});
        ws.send(Message::text(frame.to_string())).await.unwrap();
        assert_eq!(next_of(&mut ws, "ack").await["id"], id);
    }
    until("a push at each stand-in", || {
        !web.received().is_empty() && !fcm.received().is_empty() && !apns.received().is_empty()
    })
    .await;

    let push = &web.received()[0];
    assert_eq!(push.status, 201, "{push:?}");
    assert_eq!(push.plaintext.as_deref(), Ok(NEW_MSG));
    let vapid = push.vapid.as_ref().expect("VAPID verifies");
    assert_eq!((vapid.key.as_str(), vapid.sub.as_str()), (served, SUBJECT));
    assert_eq!(vapid.aud, web_base);
    let f = &fcm.received()[0];
    assert!(f.authorized && f.status == 200, "{f:?}");
    assert_eq!(f.message["data"], json!({"type": "new_msg"}));
    let a = &apns.received()[0];
    assert_eq!(a.status, 200, "{a:?}");
    assert!(a.provider_token.is_ok(), "{a:?}");
    assert_eq!(a.body["type"], "new_msg");

    // The log names no target, key or token.
    drop(relay);
    let log = std::fs::read_to_string(tmp.path().join("relay.log")).unwrap();
    assert!(log.contains("push: Web Push enabled"), "{log}");
    for secret in [
        sub.endpoint.as_str(),
        "/wpush/",
        &sub.p256dh,
        &sub.auth,
        "fcm-token-1",
        "0a1b2c3d4e5f",
        served,
    ] {
        assert!(!log.contains(secret), "the log contains {secret:?}:\n{log}");
    }
}
