//! Malformed bodies on every route of the relay's table that reads one. For each served
//! `POST`/`PUT` route, [`sample`] gives the body an honest client would send (a unit test
//! fails for a route of the table it does not cover); the stranger then sends it spoiled,
//! one way at a time:
//!
//! | variant | what must hold |
//! |---|---|
//! | not JSON at all; a JSON array | refused (4xx) |
//! | one field of a wrong type (a scalar as an object, an object or array as a number) | refused (4xx) |
//! | one field left out | not a 500 |
//! | one string field of 64 KiB | not a 500 |
//!
//! and every refusal carries the error body (`error`, a stable code, and a `message`). A 429
//! or a 503 (a rate limit, a storage outage) says nothing about the body and is not judged.
//! The unspoiled sample itself is never sent (it would make real objects).
//!
//! Push endpoints inside the operator's network are not tried here: the simulated relay
//! delivers to stand-ins on a simulated private network, so its destination policy is the
//! permissive test one (`relay-core`'s `destination` tests and the relay server's own hold
//! the real policy).

use http::Method;
use serde_json::{Map, Value, json};

use super::Findings;
use super::credentials::served_routes;
use super::http::{RawAccount, exchange, http};
use crate::violation::{Oracle, Violation};
use seam::net::{HttpClient, HttpRequest, TurmoilConnector};

/// Length of the oversized string variant.
const LONG: usize = 64 * 1024;

/// The body an honest client sends to `method template`: `Some(None)` when the route reads
/// none (or none this family can judge), `None` when the route is not covered yet.
pub(super) fn sample(template: &str, account: &RawAccount) -> Option<Option<Value>> {
    let key = "A".repeat(43) + "=";
    Some(Some(match template {
        "register" => json!({
            "ed25519_public_key": key,
            "x25519_public_key": key,
            "nickname": "spoiled",
            "pow_nonce": "0",
        }),
        "auth/challenge" => json!({ "user_uuid": account.uuid }),
        "auth/verify" => json!({
            "user_uuid": account.uuid,
            "challenge": "c",
            "signature": "A".repeat(86) + "==",
        }),
        "friends/request" => json!({ "to_alias_id": "u00000001" }),
        "friends/accept" => json!({ "friendship_id": 1 }),
        "media/upload-parts/init" => json!({ "content_type": "application/octet-stream" }),
        "media/upload-parts/{id}/complete" => {
            json!({"media_key": "media/k", "parts": [{"etag": "e", "part_number": 1}]})
        }
        "push/subscribe" => json!({
            "endpoint": "https://push.example/unused",
            "keys": {"p256dh": "B".repeat(86) + "A", "auth": "A".repeat(22)},
        }),
        "push/register" => json!({"platform": "android", "token": "t"}),
        "channels" => json!({"name": "spoiled", "description": "d", "is_public": true}),
        "channels/{id}/posts" => json!({"type": "text", "content": "c"}),
        "channels/{id}/forsale" => json!({ "price_usdt": 1 }),
        "vanity/list-channel" => json!({"channel_id": "1", "price_usdt": 1}),
        "vanity/purchase" | "vanity/reserve" => json!({ "alias_id": "u00000001" }),
        "vanity/bind" => json!({ "order_id": "o" }),
        // Bodies the handler never reads, a raw chunk (media parts are bytes, any bytes),
        // and the webhook (refused for its signature before its body is read).
        "pow/challenge"
        | "ws/ticket"
        | "friends/{id}/accept"
        | "friends/{id}/reject"
        | "media/upload-parts/{id}/chunk"
        | "push/disable"
        | "channels/{id}/subscribe"
        | "channels/{id}/buy"
        | "channels/quota/buy"
        | "payments/webhook"
        | relay_core::http::UNKNOWN_ROUTE => return Some(None),
        _ => return None,
    }))
}

/// Every way `body` is spoiled: `(what, bytes, must be refused)`.
fn variants(body: &Value) -> Vec<(String, Vec<u8>, bool)> {
    let mut out = vec![
        (
            "a body that is not JSON".to_owned(),
            b"{\"unterminated".to_vec(),
            true,
        ),
        ("a JSON array".to_owned(), b"[]".to_vec(), true),
    ];
    let Some(fields) = body.as_object() else {
        return out;
    };
    let with = |name: &str, value: Option<Value>| {
        let mut m: Map<String, Value> = fields.clone();
        match value {
            Some(v) => m.insert(name.to_owned(), v),
            None => m.remove(name),
        };
        serde_json::to_vec(&Value::Object(m)).unwrap_or_default()
    };
    for (name, value) in fields {
        let wrong = match value {
            Value::Object(_) | Value::Array(_) => json!(7),
            _ => json!({ "wrong": [true] }),
        };
        out.push((
            format!("`{name}` as {wrong}"),
            with(name, Some(wrong)),
            true,
        ));
        out.push((format!("`{name}` left out"), with(name, None), false));
        if value.is_string() {
            out.push((
                format!("`{name}` of {LONG} bytes"),
                with(name, Some(json!("x".repeat(LONG)))),
                false,
            ));
        }
    }
    out
}

/// Sends every spoiled body to every route that reads one; returns the breaches and how
/// many answers were judged.
pub(super) async fn malformed(account: &RawAccount) -> (Findings, usize) {
    let client = http();
    let mut found = Findings::new();
    let mut judged = 0;
    for (method, path, template) in served_routes() {
        if !matches!(method, Method::POST | Method::PUT) {
            continue;
        }
        let Some(Some(body)) = sample(template, account) else {
            continue;
        };
        for (what, bytes, refused) in variants(&body) {
            let Some((status, answer)) = send(&client, &method, &path, account, bytes).await else {
                continue;
            };
            let what = format!("{method} {template} with {what}");
            judged += usize::from(judge(&what, status, &answer, refused, &mut found));
        }
    }
    (found, judged)
}

async fn send(
    client: &HttpClient<TurmoilConnector>,
    method: &Method,
    path: &str,
    account: &RawAccount,
    body: Vec<u8>,
) -> Option<(u16, Vec<u8>)> {
    let req = HttpRequest::new(method.clone(), path)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(body)
        .bearer(&account.token);
    exchange(client, req).await
}

/// Judges one answer (see the module doc); whether it was judged.
fn judge(what: &str, status: u16, answer: &[u8], refused: bool, found: &mut Findings) -> bool {
    if status == 429 || status == 503 {
        return false;
    }
    if status >= 500 {
        found.push(Violation::new(
            Oracle::BadInput,
            format!("relay answered {status} to {what}"),
        ));
    } else if refused && (200..300).contains(&status) {
        found.push(Violation::new(
            Oracle::BadInput,
            format!("relay accepted ({status}) {what}"),
        ));
    }
    if (400..500).contains(&status) && !error_body(answer) {
        found.push(Violation::new(
            Oracle::BadInput,
            format!(
                "relay refused {what} with {status} but no error body: {}",
                String::from_utf8_lossy(&answer[..answer.len().min(120)])
            ),
        ));
    }
    true
}

/// Whether `answer` is the error body: a stable `error` code and a human `message`.
fn error_body(answer: &[u8]) -> bool {
    let v: Value = serde_json::from_slice(answer).unwrap_or(Value::Null);
    v["error"].as_str().is_some_and(|c| !c.is_empty())
        && v["message"].as_str().is_some_and(|m| !m.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn account() -> RawAccount {
        RawAccount {
            uuid: "u".into(),
            alias: "u00000002".into(),
            token: "t".into(),
        }
    }

    #[test]
    fn every_route_that_takes_a_body_has_a_sample() {
        let uncovered: Vec<String> = served_routes()
            .into_iter()
            .filter(|(m, _, t)| {
                matches!(*m, Method::POST | Method::PUT) && sample(t, &account()).is_none()
            })
            .map(|(m, _, t)| format!("{m} {t}"))
            .collect();
        assert!(uncovered.is_empty(), "no sample body for {uncovered:?}");
    }

    #[test]
    fn each_field_is_spoiled_three_ways_and_the_body_twice() {
        let v = variants(&json!({"a": "s", "b": [1]}));
        let whats: Vec<&str> = v.iter().map(|(w, _, _)| w.as_str()).collect();
        assert_eq!(v.len(), 2 + 3 + 2, "{whats:?}");
        let wrong_a: Value = serde_json::from_slice(&v[2].1).expect("json");
        assert_eq!(wrong_a, json!({"a": {"wrong": [true]}, "b": [1]}));
        let wrong_b = v
            .iter()
            .find(|(w, _, _)| w.starts_with("`b` as"))
            .expect("b");
        assert_eq!(
            serde_json::from_slice::<Value>(&wrong_b.1).expect("json")["b"],
            7
        );
        assert!(v.iter().filter(|(_, _, refused)| *refused).count() == 4);
    }

    #[test]
    fn judging_needs_a_refusal_with_an_error_body() {
        let mut found = Findings::new();
        let body = br#"{"error":"INVALID_JSON","message":"bad"}"#;
        assert!(judge("x", 400, body, true, &mut found));
        assert!(found.is_empty());
        assert!(!judge("x", 503, b"", true, &mut found));
        judge("x", 200, b"{}", true, &mut found);
        judge("x", 400, b"nope", false, &mut found);
        judge("x", 500, body, false, &mut found);
        assert_eq!(found.len(), 3, "{found:?}");
    }
}
