//! Credentials used before a relay power cycle, presented after it. At the start of a
//! dishonest act the stranger's puppet logs in (its earlier token is revoked by it) and
//! redeems a WebSocket ticket, as an honest client does; at the act's end, if the relay
//! powered off in between and answers again, the stranger presents all three once more:
//!
//! | presented after the restart | PROTOCOL | breach |
//! |---|---|---|
//! | the ticket, redeemed before it | A5: single use | a 101 upgrade |
//! | the signed challenge, answered before it | A4: a login per challenge (§1.1.3) | a 200 with a token |
//! | the token that login revoked | §9: a new login revokes older JTIs | a 2xx on an authenticated route |
//!
//! A relay that forgets across a restart what it had already answered (a used credential, a
//! revocation) lets each in again. What was used is what was answered: an upgrade or a token
//! is released only after its commit, so every object judged here was acknowledged before
//! the relay powered off. In the failover topology a takeover counts too (the active relay
//! changed between the halves: the standby, sharing the store and the key, must refuse what
//! the old leader answered). Acts in which neither fell between the two halves judge nothing
//! (one act in three is planned across a power cycle).

use serde_json::Value;
use wire::http::paths;

use super::Findings;
use super::http::{RawAccount, get, http, post};
use super::replay::{issue_ticket, login_once, logs_in};
use super::ws::open_ws;
use crate::time::{sim_ms, sleep_ms};
use crate::violation::{Oracle, Violation};
use crate::world::HostCtx;

/// How long the stranger waits for a relay that powered off to answer again.
const BACK_WITHIN_MS: u64 = 20_000;
/// Pause between its attempts to reach the relay.
const RETRY_MS: u64 = 500;

/// What the puppet used before the power cycle, to present after it.
#[derive(Debug)]
pub(super) struct Used {
    /// When the last of them was used (simulated ms).
    at_ms: u64,
    /// The relay that was active when they were used.
    leader: String,
    /// The upgrade query of a ticket that opened a socket.
    ticket_query: Option<String>,
    /// The signed `verify` body of a login that got a token.
    login: Option<Value>,
    /// The token that login revoked.
    revoked: Option<String>,
}

/// The puppet logs in anew (revoking the token it had; `puppet.token` becomes the new one)
/// and redeems a ticket; returns what was used.
pub(super) async fn use_credentials(
    ctx: &HostCtx,
    puppet: &mut RawAccount,
    identity: &client_core::keys::Identity,
) -> Used {
    let (login, revoked) = match login_once(puppet, identity).await {
        Some((body, token)) => {
            let revoked = std::mem::replace(&mut puppet.token, token);
            (Some(body), Some(revoked))
        }
        None => (None, None),
    };
    let mut ticket_query = None;
    if let Some((ticket, _)) = issue_ticket(puppet).await {
        let query = format!("user_uuid={}&ticket={ticket}", puppet.uuid);
        if let Ok(Ok(socket)) = open_ws(&query).await {
            drop(socket);
            ticket_query = Some(query);
        }
    }
    Used {
        at_ms: sim_ms(),
        leader: ctx.world.borrow().active_relay(),
        ticket_query,
        login,
        revoked,
    }
}

/// Presents what was `used` again if the relay powered off or another took over since, once
/// it serves again; returns the breaches and how many presentations were judged.
pub(super) async fn present_after_restart(ctx: &HostCtx, used: Used) -> (Findings, usize) {
    let cycled = {
        let w = ctx.world.borrow();
        w.relay_off_ms.iter().any(|t| *t > used.at_ms) || w.active_relay() != used.leader
    };
    if !cycled || !relay_answers().await {
        return (Findings::new(), 0);
    }
    let mut found = Findings::new();
    let mut judged = 0;
    if let Some(query) = &used.ticket_query
        && let Ok(upgrade) = open_ws(query).await
    {
        judged += 1;
        if upgrade.is_ok() {
            found.push(Violation::new(
                Oracle::Authz,
                "a WebSocket ticket redeemed before a relay restart opened a socket again after it (101)",
            ));
        }
    }
    if let Some(body) = &used.login
        && let Some(again) = logs_in(body).await
    {
        judged += 1;
        if again {
            found.push(Violation::new(
                Oracle::Authz,
                "an auth challenge answered before a relay restart logged in again after it (200 with a token)",
            ));
        }
    }
    if let Some(token) = &used.revoked
        && let Some((status, _)) = get(&http(), paths::FRIENDS, token).await
    {
        judged += 1;
        if (200..300).contains(&status) {
            found.push(Violation::new(
                Oracle::Authz,
                format!(
                    "a token revoked by a newer login before a relay restart was accepted after it ({status})"
                ),
            ));
        }
    }
    (found, judged)
}

/// Whether the relay serves again (an answer other than 503) within [`BACK_WITHIN_MS`].
async fn relay_answers() -> bool {
    let deadline = sim_ms() + BACK_WITHIN_MS;
    loop {
        let client = http();
        // A relay rebuilding its state, or not (yet) the leader, answers 503.
        if let Some((status, _)) =
            post(&client, paths::POW_CHALLENGE, None, &serde_json::json!({})).await
            && status != 503
        {
            return true;
        }
        if sim_ms() >= deadline {
            return false;
        }
        sleep_ms(RETRY_MS).await;
    }
}
