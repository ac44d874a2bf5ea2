//! `tokenless` and `lookups`: the relay's routes as a stranger calls them.
//!
//! **tokenless.** SPEC.md (Authentication, 8) and PROTOCOL.md §1 mark which operations need a
//! JWT ("401 when missing"). Each of them, by the method and path the relay serves
//! ([`served_routes`]), is asked with no `Authorization` header at all: the answer must be
//! 401. A 2xx is an `authz` breach; another 4xx a `tokenless` one (the route judged the
//! request before it asked who sent it); a 429, a 5xx or no answer is not judged. The
//! WebSocket upgrade with neither token nor ticket must not be let in, nor a ticket presented
//! as an auth challenge (signed as one) log in, nor a challenge presented as a ticket open a
//! socket (`authz`).
//!
//! **lookups.** `GET users/{alias}` (F5) of every account whose alias the run knows and that
//! no bind can change meanwhile (the drill's own, the strangers', the honest clients that buy
//! no alias), and, once the commerce audit begins, of every alias a bind gave and of every
//! binder's current one: 200 with the alias, the nickname and both public keys of the account
//! that registered them. An alias nobody has: 404. Each drill account asks at most its lookup
//! budget less one (the budget itself is the `budgets` drill's).

use std::collections::BTreeMap;

use client_core::keys::{X25519Path, derive_identity};
use serde_json::{Value, json};
use wire::http::paths;

use super::peer::Socket;
use super::{Drills, Outcome};
use crate::bounds::{AUDIT_BEFORE_END_MS, LIVENESS_BOUND_MS, TRAFFIC_WINDOW_MS};
use crate::hostile::credentials::served_routes;
use crate::hostile::http::{field, get, http, post, status};
use crate::scenario::ActionKind;
use crate::time::sleep_ms;
use crate::violation::{Oracle, Violation};
use crate::world::wait_until;

/// The operations the documents say need a JWT: `(route template, method)`.
const JWT_ROUTES: &[(&str, &str)] = &[
    ("ws/ticket", "POST"),
    ("friends", "GET"),
    ("friends/request", "POST"),
    ("friends/{id}/accept", "PUT"),
    ("friends/{id}/accept", "POST"),
    ("friends/accept", "POST"),
    ("friends/{id}/reject", "POST"),
    ("conversations/active", "GET"),
    ("storage/estimate", "GET"),
    ("media/upload-parts/init", "POST"),
    ("media/upload-parts/{id}/chunk", "POST"),
    ("media/upload-parts/{id}/complete", "POST"),
    ("media/download", "GET"),
    ("push/subscribe", "POST"),
    ("push/register", "POST"),
    ("push/disable", "POST"),
    ("calls/ice-config", "GET"),
    ("channels/mine", "GET"),
    ("channels", "POST"),
    ("channels/{id}/subscribe", "POST"),
    ("channels/{id}/subscribe", "DELETE"),
    ("channels/{id}/posts", "POST"),
    ("channels/{id}/forsale", "PUT"),
    ("channels/{id}/buy", "POST"),
    ("channels/quota/buy", "POST"),
    ("vanity/list-channel", "POST"),
    ("vanity/purchase", "POST"),
    ("vanity/bind", "POST"),
];

/// Every JWT route without a token (see the module doc), and each single-use credential
/// presented as the other kind.
pub(super) async fn tokenless(d: &mut Drills<'_>) -> Outcome {
    let mut out = Outcome::default();
    out.merge(cross_kind(d).await);
    let client = http();
    for (method, path, route) in served_routes() {
        if !JWT_ROUTES.contains(&(route, method.as_str())) {
            continue;
        }
        match status(&client, &method, &path, None).await {
            Some(s) if (200..300).contains(&s) => out.check(Some(Violation::new(
                Oracle::Authz,
                format!("{method} {route} answered {s} to a request with no token at all"),
            ))),
            Some(401) => out.check(None),
            Some(s) if s == 429 || s >= 500 => out.skip(),
            Some(s) => out.check(Some(Violation::new(
                Oracle::Tokenless,
                format!(
                    "{method} {route} answered {s} to a request with no token (the documents: 401)"
                ),
            ))),
            None => out.skip(),
        }
    }
    for query in ["", "user_uuid=00000000-0000-4000-8000-000000000000"] {
        match Socket::open_query(query, false).await {
            Ok(_) => out.check(Some(Violation::new(
                Oracle::Authz,
                format!("the WebSocket upgrade with neither token nor ticket (query {query:?}) was let in"),
            ))),
            Err(s) if s == 0 || s >= 500 => out.skip(),
            Err(_) => out.check(None),
        }
    }
    out
}

/// A WebSocket ticket presented as an auth challenge (signed by the account's key, as a
/// challenge is), and an auth challenge presented as a ticket: neither may pass (A4, A5: each
/// is its own kind of single-use object).
async fn cross_kind(d: &mut Drills<'_>) -> Outcome {
    let mut out = Outcome::default();
    let account = d.account(2).await;
    let http = http();
    let ticket = post(
        &http,
        paths::WS_TICKET,
        Some(&account.raw.token),
        &json!({}),
    )
    .await
    .and_then(|(s, v)| field(&v, "ticket").filter(|_| (200..300).contains(&s)));
    let challenge = post(
        &http,
        paths::AUTH_CHALLENGE,
        None,
        &json!({ "user_uuid": account.raw.uuid }),
    )
    .await
    .and_then(|(_, v)| field(&v, "challenge"));
    if let Some(ticket) = ticket {
        let body = json!({
            "user_uuid": account.raw.uuid,
            "challenge": ticket,
            "signature": account.identity.sign_challenge(&ticket),
        });
        match post(&http, paths::AUTH_VERIFY, None, &body).await {
            Some((200, _)) => out.check(Some(Violation::new(
                Oracle::Authz,
                "a WebSocket ticket, signed and presented as an auth challenge, logged in (200)",
            ))),
            Some((s, _)) if s >= 500 || s == 429 => out.skip(),
            Some(_) => out.check(None),
            None => out.skip(),
        }
    } else {
        out.skip();
    }
    if let Some(challenge) = challenge {
        let query = format!("user_uuid={}&ticket={challenge}", account.raw.uuid);
        match Socket::open_query(&query, false).await {
            Ok(_) => out.check(Some(Violation::new(
                Oracle::Authz,
                "an auth challenge presented as a WebSocket ticket opened a socket (101)",
            ))),
            Err(s) if s == 0 || s >= 500 => out.skip(),
            Err(_) => out.check(None),
        }
    } else {
        out.skip();
    }
    out
}

/// What a lookup of an alias must answer: the account's nickname and keys (`None`: 404).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Expected {
    nickname: String,
    x25519: String,
    ed25519: String,
}

impl Expected {
    fn of(mnemonic: &str, nickname: &str) -> Option<Self> {
        let id = derive_identity(mnemonic, X25519Path::Spec).ok()?;
        Some(Self {
            nickname: nickname.to_owned(),
            x25519: id.ecdh_public_b64(),
            ed25519: id.signing_public_b64(),
        })
    }
}

/// Lookups of aliases that exist and that do not (see the module doc).
pub(super) async fn lookups(d: &mut Drills<'_>) -> Outcome {
    let mut out = Outcome::default();
    let mut asked: BTreeMap<String, Option<Expected>> = BTreeMap::new();
    let own = d.account(1).await;
    asked.insert(
        own.raw.alias.clone(),
        Some(Expected {
            nickname: own.nickname.clone(),
            x25519: own.identity.ecdh_public_b64(),
            ed25519: own.identity.signing_public_b64(),
        }),
    );
    asked.insert("u00000000".to_owned(), None);
    {
        let scenario = &d.ctx.scenario;
        let w = d.ctx.world.borrow();
        for (i, (_, alias)) in &w.strangers {
            if let Some(s) = scenario.strangers.get(*i) {
                asked.insert(
                    alias.clone(),
                    Expected::of(&s.mnemonic, &format!("stranger{i}")),
                );
            }
        }
        for (i, account) in scenario.accounts.iter().enumerate() {
            let buys = scenario
                .actions
                .iter()
                .any(|a| a.client == i && matches!(a.kind, ActionKind::BuyAlias { .. }));
            if let (false, Some(alias)) = (buys, w.aliases.get(&i)) {
                asked.insert(
                    alias.clone(),
                    Expected::of(&account.mnemonic, &account.nickname),
                );
            }
        }
    }
    out.merge(ask(d, &asked, 10).await);
    // Once the binds are settled: every alias a bind gave, and each binder's current one.
    let start = d.ctx.world.borrow().traffic_start_ms.unwrap_or(0);
    let audit_at = start + TRAFFIC_WINDOW_MS + LIVENESS_BOUND_MS - AUDIT_BEFORE_END_MS;
    wait_until(d.ctx, |_| crate::time::sim_ms() >= audit_at).await;
    let mut bound: BTreeMap<String, Option<Expected>> = BTreeMap::new();
    {
        let scenario = &d.ctx.scenario;
        let w = d.ctx.world.borrow();
        for b in &w.ledger.binds {
            let current = w.alias_history.get(&b.client).and_then(|h| h.last());
            // A client bound twice: only its current alias is its own.
            if current != Some(&b.alias) {
                continue;
            }
            if let Some(account) = scenario.accounts.get(b.client) {
                bound.insert(
                    b.alias.clone(),
                    Expected::of(&account.mnemonic, &account.nickname),
                );
            }
        }
    }
    out.merge(ask(d, &bound, 20).await);
    out
}

/// Looks up every alias of `asked`, spreading them over drill accounts `first..` so that none
/// uses its whole lookup budget.
async fn ask(
    d: &mut Drills<'_>,
    asked: &BTreeMap<String, Option<Expected>>,
    first: u64,
) -> Outcome {
    let mut out = Outcome::default();
    let per_account = (d.config.lookups.burst as usize).saturating_sub(1).max(1);
    let client = http();
    for (k, chunk) in asked
        .iter()
        .collect::<Vec<_>>()
        .chunks(per_account)
        .enumerate()
    {
        let mut asker = d.account(first + k as u64).await;
        // A fresh token: a `days` clock may have outlived the last one.
        asker.relogin().await;
        for (alias, expected) in chunk {
            let path = paths::USER.replace("{alias_id}", alias);
            let Some((status, body)) = get(&client, &path, &asker.raw.token).await else {
                out.skip();
                continue;
            };
            // 401: the token lapsed meanwhile (the `tokens` drill judges lifetimes).
            if status == 429 || status == 401 || status >= 500 {
                out.skip();
                continue;
            }
            out.check(judge(alias, expected.as_ref(), status, &body));
            sleep_ms(5).await;
        }
    }
    out
}

/// The breach in the answer `status`, `body` to a lookup of `alias`, if any.
fn judge(alias: &str, expected: Option<&Expected>, status: u16, body: &Value) -> Option<Violation> {
    let Some(e) = expected else {
        return (status != 404).then(|| {
            Violation::new(
                Oracle::Lookup,
                format!(
                    "a lookup of {alias}, an alias nobody has, answered {status} (expected 404)"
                ),
            )
        });
    };
    if status != 200 {
        return Some(Violation::new(
            Oracle::Lookup,
            format!("a lookup of {alias}, an existing account's alias, answered {status}"),
        ));
    }
    let got = |name: &str| field(body, name).unwrap_or_default();
    let wrong: Vec<String> = [
        ("alias_id", alias, got("alias_id")),
        ("nickname", e.nickname.as_str(), got("nickname")),
        (
            "x25519_public_key",
            e.x25519.as_str(),
            got("x25519_public_key"),
        ),
        (
            "ed25519_public_key",
            e.ed25519.as_str(),
            got("ed25519_public_key"),
        ),
    ]
    .into_iter()
    .filter(|(_, want, got)| want != got)
    .map(|(name, want, got)| format!("{name} {got:?} (expected {want:?})"))
    .collect();
    (!wrong.is_empty()).then(|| {
        Violation::new(
            Oracle::Lookup,
            format!("a lookup of {alias} answered {}", wrong.join(", ")),
        )
    })
}
