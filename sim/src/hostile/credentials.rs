//! Credentials that do not verify, on every route the relay serves. The routes come from the
//! relay's own table (`relay_core::http::ROUTE_NAMES`, with `route_name` telling which methods
//! each serves), so a new route is attacked without anyone writing a case for it.
//!
//! Each served `(method, route)` is asked three times: with no credentials, with the
//! stranger's own token whose signature is altered, and with a token claiming another account
//! (the stranger's header and signature over a payload naming the victim). The oracle is
//! differential and needs no knowledge of the route: **a forged credential never gets a 2xx
//! where no credential got a refusal** (a 4xx; a 5xx or a 429 without credentials says nothing
//! about the route, which is then not judged).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use relay_core::Method;
use relay_core::http::{ROUTE_NAMES, route_name};
use serde_json::{Value, json};

use super::Findings;
use super::http::{RawAccount, http, status};
use crate::violation::{Oracle, Violation};

/// Methods tried on every route.
const METHODS: [(Method, http::Method); 4] = [
    (Method::Get, http::Method::GET),
    (Method::Post, http::Method::POST),
    (Method::Put, http::Method::PUT),
    (Method::Delete, http::Method::DELETE),
];

/// A path serving `template` (`users/{alias}` → `/api/v1/users/u00000001`).
fn instantiate(template: &str) -> String {
    let mut path = String::from("/api/v1/");
    for (i, part) in template.split('/').enumerate() {
        if i > 0 {
            path.push('/');
        }
        match part {
            "{alias}" => path.push_str("u00000001"),
            p if p.starts_with('{') => path.push('1'),
            p => path.push_str(p),
        }
    }
    path
}

/// Every `(method, path, route)` the relay serves, in the table's order.
pub(crate) fn served_routes() -> Vec<(http::Method, String, &'static str)> {
    let mut out = Vec::new();
    for template in ROUTE_NAMES {
        let path = instantiate(template);
        for (core, method) in &METHODS {
            if route_name(*core, &path) == *template {
                out.push((method.clone(), path.clone(), *template));
            }
        }
    }
    out
}

/// The stranger's token with the first character of its signature changed.
fn altered_signature(token: &str) -> Option<String> {
    let (rest, sig) = token.rsplit_once('.')?;
    let first = sig.chars().next()?;
    let swapped = if first == 'A' { 'B' } else { 'A' };
    Some(format!("{rest}.{swapped}{}", &sig[first.len_utf8()..]))
}

/// The stranger's token with its payload's `sub` replaced by `victim` (signature kept).
fn claiming(token: &str, victim: &str) -> Option<String> {
    let mut parts = token.split('.');
    let (header, payload, sig) = (parts.next()?, parts.next()?, parts.next()?);
    let mut claims: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).ok()?).ok()?;
    claims.as_object_mut()?.insert("sub".into(), json!(victim));
    let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims).ok()?);
    Some(format!("{header}.{payload}.{sig}"))
}

/// Asks every served route with no, an altered and a foreign credential (see the module doc).
/// Returns the breaches and how many routes were asked.
pub(super) async fn credentials(account: &RawAccount, victim: Option<&str>) -> (Findings, usize) {
    let client = http();
    let mut found = Findings::new();
    let forged: Vec<(&str, String)> = [
        altered_signature(&account.token).map(|t| ("a token with an altered signature", t)),
        victim
            .and_then(|v| claiming(&account.token, v))
            .map(|t| ("a token claiming another account", t)),
    ]
    .into_iter()
    .flatten()
    .collect();
    let routes = served_routes();
    for (method, path, route) in &routes {
        let Some(bare) = status(&client, method, path, None).await else {
            continue;
        };
        if (200..300).contains(&bare) {
            continue; // a public route: nothing to forge
        }
        if !(400..500).contains(&bare) || bare == 429 {
            // Not a refusal of the request as made (a storage outage, a rate limit): the
            // route's answer to no credentials is unknown, so nothing is judged on it.
            continue;
        }
        for (what, token) in &forged {
            if let Some(s) = status(&client, method, path, Some(token)).await
                && (200..300).contains(&s)
            {
                found.push(Violation::new(
                    Oracle::Authz,
                    format!(
                        "relay answered {s} to {method} {route} with {what}, where it answered {bare} without credentials"
                    ),
                ));
            }
        }
    }
    (found, routes.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_yields_every_route_with_its_methods() {
        let routes = served_routes();
        let names: std::collections::BTreeSet<&str> = routes.iter().map(|(_, _, r)| *r).collect();
        // Every route of the table is served by some method at its instantiated path.
        let unserved: Vec<&&str> = ROUTE_NAMES
            .iter()
            .filter(|r| !names.contains(**r))
            .collect();
        assert!(unserved.is_empty(), "no method serves {unserved:?}");
        assert!(routes.iter().any(|(m, p, r)| *m == http::Method::GET
            && p == "/api/v1/users/u00000001"
            && *r == "users/{alias}"));
    }

    #[test]
    fn forged_tokens_differ_where_they_must() {
        let payload = URL_SAFE_NO_PAD.encode(br#"{"sub":"me","exp":9}"#);
        let token = format!("hdr.{payload}.Abcdef");
        assert_eq!(
            altered_signature(&token).as_deref(),
            Some(format!("hdr.{payload}.Bbcdef").as_str())
        );
        let other = claiming(&token, "victim").expect("forged");
        let claims = other.split('.').nth(1).expect("payload");
        let claims: Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(claims).expect("b64")).expect("json");
        assert_eq!(claims["sub"], "victim");
        assert_eq!(claims["exp"], 9);
        assert!(other.ends_with(".Abcdef"));
    }
}
