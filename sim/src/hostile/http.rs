//! Accounts made over plain HTTP, by hand: registration (proof of work, keys from the
//! mnemonic), login (the challenge signed), and the requests of a raw client.

use std::time::Duration;

use client_core::keys::{X25519Path, derive_identity};
use serde_json::{Value, json};
use wire::http::paths;

use crate::world::relay_endpoint;
use seam::net::{Connector, HttpClient, HttpRequest, TurmoilConnector};

/// Timeout of one raw HTTP request.
const REQUEST_TIMEOUT_MS: u64 = 5_000;

/// What a raw client knows about its own account.
#[derive(Debug, Clone)]
pub(crate) struct RawAccount {
    pub(crate) uuid: String,
    pub(crate) alias: String,
    pub(crate) token: String,
}

/// A fresh HTTP client to the relay (no pooled connections).
pub(crate) fn http() -> HttpClient<TurmoilConnector> {
    HttpClient::new(TurmoilConnector, relay_endpoint())
        .with_max_idle(0)
        .with_timeout(Duration::from_millis(REQUEST_TIMEOUT_MS))
}

/// POSTs `body` (with `token`, if any); `(status, JSON body)`, `None` without an answer.
pub(crate) async fn post<C: Connector>(
    http: &HttpClient<C>,
    path: &str,
    token: Option<&str>,
    body: &Value,
) -> Option<(u16, Value)> {
    let mut req = HttpRequest::post(path).json(body).ok()?;
    if let Some(t) = token {
        req = req.bearer(t);
    }
    json_exchange(http, req).await
}

/// Sends `req`; `(status, body)`, `None` without an answer.
pub(crate) async fn exchange<C: Connector>(
    http: &HttpClient<C>,
    req: HttpRequest,
) -> Option<(u16, Vec<u8>)> {
    let r = http.send(req).await.ok()?;
    Some((r.status.as_u16(), r.body.to_vec()))
}

/// Sends `req`; `(status, JSON body or null)`, `None` without an answer.
pub(crate) async fn json_exchange<C: Connector>(
    http: &HttpClient<C>,
    req: HttpRequest,
) -> Option<(u16, Value)> {
    let (status, body) = exchange(http, req).await?;
    Some((status, serde_json::from_slice(&body).unwrap_or(Value::Null)))
}

/// PUTs `path` with no body (F3 as the web and Android clients send it) and `token`;
/// `(status, JSON body)`, `None` without an answer.
pub(crate) async fn put_empty<C: Connector>(
    http: &HttpClient<C>,
    path: &str,
    token: &str,
) -> Option<(u16, Value)> {
    json_exchange(
        http,
        HttpRequest::new(http::Method::PUT, path).bearer(token),
    )
    .await
}

/// The status of `method path` (with `{}` as the body of a POST or PUT, and `token` as its
/// bearer), or `None` when the request got no answer.
pub(crate) async fn status<C: Connector>(
    client: &HttpClient<C>,
    method: &http::Method,
    path: &str,
    token: Option<&str>,
) -> Option<u16> {
    let mut req = HttpRequest::new(method.clone(), path);
    if matches!(*method, http::Method::POST | http::Method::PUT) {
        req = req.json(&json!({})).ok()?;
    }
    if let Some(t) = token {
        req = req.bearer(t);
    }
    client.send(req).await.ok().map(|r| r.status.as_u16())
}

/// GETs `path` with `token`; `(status, JSON body)`, `None` without an answer.
pub(crate) async fn get<C: Connector>(
    http: &HttpClient<C>,
    path: &str,
    token: &str,
) -> Option<(u16, Value)> {
    json_exchange(http, HttpRequest::get(path).bearer(token)).await
}

/// String field `name` of `v`.
pub(crate) fn field(v: &Value, name: &str) -> Option<String> {
    v.get(name).and_then(Value::as_str).map(str::to_owned)
}

/// Registers (or recovers, on 409) the account of `mnemonic` and logs in; `None` when the
/// relay did not answer (the caller retries).
pub(crate) async fn register(mnemonic: &str, nickname: &str) -> Option<RawAccount> {
    register_with(&http(), mnemonic, nickname).await
}

/// [`register`] through `http` (a relay on any network).
pub(crate) async fn register_with<C: Connector>(
    http: &HttpClient<C>,
    mnemonic: &str,
    nickname: &str,
) -> Option<RawAccount> {
    let identity = derive_identity(mnemonic, X25519Path::Spec).ok()?;
    let (_, pow) = post(http, paths::POW_CHALLENGE, None, &json!({})).await?;
    let challenge = field(&pow, "challenge_string")?;
    let difficulty = pow.get("difficulty").and_then(Value::as_u64).unwrap_or(0);
    let nonce =
        client_core::pow::solve_pow(&challenge, u32::try_from(difficulty).unwrap_or(0)).ok()?;
    let body = json!({
        "ed25519_public_key": identity.signing_public_b64(),
        "x25519_public_key": identity.ecdh_public_b64(),
        "nickname": nickname,
        "pow_nonce": nonce,
    });
    let (status, reg) = post(http, paths::REGISTER, None, &body).await?;
    if !(200..300).contains(&status) && status != 409 {
        return None;
    }
    let uuid = field(&reg, "uuid")?;
    let alias = field(&reg, "alias_id")?;
    let token = login(http, &uuid, &identity).await?;
    Some(RawAccount { uuid, alias, token })
}

pub(crate) async fn login<C: Connector>(
    http: &HttpClient<C>,
    uuid: &str,
    identity: &client_core::keys::Identity,
) -> Option<String> {
    let (_, ch) = post(
        http,
        paths::AUTH_CHALLENGE,
        None,
        &json!({ "user_uuid": uuid }),
    )
    .await?;
    let challenge = field(&ch, "challenge")?;
    let body = json!({
        "user_uuid": uuid,
        "challenge": challenge,
        "signature": identity.sign_challenge(&challenge),
    });
    let (status, v) = post(http, paths::AUTH_VERIFY, None, &body).await?;
    (status == 200).then(|| field(&v, "token")).flatten()
}
