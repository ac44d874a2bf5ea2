//! The `limits` class's `push-policy` drill: Web Push endpoints a production relay must
//! refuse (private, loopback, link-local, shared, IPv4-embedding IPv6, numeric forms, local
//! names, names it cannot resolve, `http://`) and public ones it must take (`push-policy`).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::json;
use wire::http::paths;

use super::{Drills, Outcome};
use crate::hostile::http::{field, http, post};
use crate::violation::Oracle;

/// A Web Push endpoint and what production's policy answers it (`None`: taken).
const ENDPOINTS: &[(&str, Option<&str>)] = &[
    ("https://8.8.8.8/push/drill", None),
    ("https://[2606:4700:4700::1111]/push/drill", None),
    ("https://1.1.1.1:8443/push/drill", None),
    ("http://8.8.8.8/push/drill", Some("PUSH_ENDPOINT_FORBIDDEN")),
    ("https://10.0.0.1/push", Some("PUSH_ENDPOINT_FORBIDDEN")),
    ("https://172.16.5.4/push", Some("PUSH_ENDPOINT_FORBIDDEN")),
    ("https://192.168.1.1/push", Some("PUSH_ENDPOINT_FORBIDDEN")),
    ("https://127.0.0.1/push", Some("PUSH_ENDPOINT_FORBIDDEN")),
    ("https://0.0.0.0/push", Some("PUSH_ENDPOINT_FORBIDDEN")),
    (
        "https://169.254.169.254/latest",
        Some("PUSH_ENDPOINT_FORBIDDEN"),
    ),
    ("https://100.64.0.1/push", Some("PUSH_ENDPOINT_FORBIDDEN")),
    ("https://224.0.0.1/push", Some("PUSH_ENDPOINT_FORBIDDEN")),
    (
        "https://255.255.255.255/push",
        Some("PUSH_ENDPOINT_FORBIDDEN"),
    ),
    ("https://192.0.2.1/push", Some("PUSH_ENDPOINT_FORBIDDEN")),
    ("https://198.18.0.1/push", Some("PUSH_ENDPOINT_FORBIDDEN")),
    ("https://[::1]/push", Some("PUSH_ENDPOINT_FORBIDDEN")),
    ("https://[fe80::1]/push", Some("PUSH_ENDPOINT_FORBIDDEN")),
    ("https://[fc00::1]/push", Some("PUSH_ENDPOINT_FORBIDDEN")),
    (
        "https://[::ffff:8.8.8.8]/push",
        Some("PUSH_ENDPOINT_FORBIDDEN"),
    ),
    (
        "https://[64:ff9b::808:808]/push",
        Some("PUSH_ENDPOINT_FORBIDDEN"),
    ),
    (
        "https://[2002:808:808::1]/push",
        Some("PUSH_ENDPOINT_FORBIDDEN"),
    ),
    ("https://127.1/push", Some("PUSH_ENDPOINT_FORBIDDEN")),
    ("https://2130706433/push", Some("PUSH_ENDPOINT_FORBIDDEN")),
    ("https://0x7f000001/push", Some("PUSH_ENDPOINT_FORBIDDEN")),
    ("https://localhost/push", Some("PUSH_ENDPOINT_FORBIDDEN")),
    (
        "https://push.localhost/push",
        Some("PUSH_ENDPOINT_FORBIDDEN"),
    ),
    (
        "https://printer.local/push",
        Some("PUSH_ENDPOINT_FORBIDDEN"),
    ),
    (
        "https://metadata.internal/push",
        Some("PUSH_ENDPOINT_FORBIDDEN"),
    ),
    (
        "https://push.example.com/push",
        Some("PUSH_ENDPOINT_UNRESOLVABLE"),
    ),
    ("https://user@8.8.8.8/push", Some("INVALID_FIELD")),
];

/// Production's push policy, endpoint by endpoint (see [`ENDPOINTS`]).
pub(super) async fn push_policy(d: &mut Drills<'_>) -> Outcome {
    let mut out = Outcome::default();
    let account = d.account(120).await;
    let keys = json!({
        "p256dh": URL_SAFE_NO_PAD.encode([4u8; 65]),
        "auth": URL_SAFE_NO_PAD.encode([7u8; 16]),
    });
    let http = http();
    for (endpoint, expected) in ENDPOINTS {
        let body = json!({ "endpoint": endpoint, "keys": keys });
        let Some((status, v)) = post(
            &http,
            paths::PUSH_SUBSCRIBE,
            Some(&account.raw.token),
            &body,
        )
        .await
        else {
            out.skip();
            continue;
        };
        if status == 429 || status >= 500 {
            out.skip();
            continue;
        }
        let code = field(&v, "error").unwrap_or_default();
        match expected {
            None => out.expect((200..300).contains(&status), Oracle::PushPolicy, || {
                format!("a public https:// push endpoint {endpoint} was refused: {status} {code}")
            }),
            Some(want) => out.expect(status == 400 && code == *want, Oracle::PushPolicy, || {
                format!("push endpoint {endpoint} answered {status} {code} (production's policy: 400 {want})")
            }),
        }
    }
    // The same subscription again (a browser re-subscribing), then push turned off: both
    // taken (P2 is idempotent for one endpoint; P4 "idempotent").
    let again = json!({ "endpoint": ENDPOINTS[0].0, "keys": keys });
    for (path, body) in [
        (paths::PUSH_SUBSCRIBE, &again),
        (paths::PUSH_DISABLE, &json!({})),
        (paths::PUSH_DISABLE, &json!({})),
    ] {
        match post(&http, path, Some(&account.raw.token), body).await {
            Some((s, _)) if s == 429 || s >= 500 => out.skip(),
            Some((s, v)) => out.expect((200..300).contains(&s), Oracle::PushPolicy, || {
                format!(
                    "{path} (a repeat, idempotent) answered {s} {}",
                    field(&v, "error").unwrap_or_default()
                )
            }),
            None => out.skip(),
        }
    }
    out
}
