//! Single-use objects presented a second time: every object the relay hands out for one use
//! (an auth challenge answered at `verify`, a WebSocket ticket redeemed at the upgrade) is
//! used once as an honest client would, then replayed. The oracle needs no knowledge of the
//! object: **a replay of a used object never gets the answer its first use got** (a 200 with
//! a token, a 101 upgrade). A ticket is also presented for the first time right after the
//! expiry the relay announced with it (`expires_in`): it must not open a socket either; nor
//! may a fresh ticket presented for another account or with a character changed; and the
//! puppet's challenge signed with another key must not log in.
//!
//! The replays run on the stranger's puppet account (see [`super::member`]), so the token a
//! replayed login would mint (and the revocation of the one before it) touches no account
//! the rest of the stranger's script depends on.

use client_core::keys::Identity;
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng as _;
use serde_json::json;
use wire::http::paths;

use super::Findings;
use super::http::{RawAccount, field, http, post};
use super::ws::open_ws;
use crate::time::sleep_ms;
use crate::violation::{Oracle, Violation};

/// One single-use object of the relay and how to use and replay it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OneShot {
    /// A3/A4: the challenge of `auth/challenge`, signed and answered at `auth/verify`.
    AuthChallenge,
    /// A5: the ticket of `ws/ticket`, redeemed by a WebSocket upgrade.
    WsTicket,
    /// A5 again, its ticket first redeemed a second after the `expires_in` the relay
    /// announced with it.
    ExpiredTicket,
    /// A3/A4 with the challenge signed by a key that is not the account's (one identity's
    /// credential presented for another).
    ForeignSignature,
    /// A5: the puppet's fresh ticket presented with another account's uuid, then with one
    /// character changed (a credential of one identity for another, and a forged one).
    ForeignTicket,
}

/// Every single-use object, each replayed in every round (the ticket first: a login, the
/// challenge's use, revokes the token the ticket is asked with).
const ONE_SHOTS: [OneShot; 5] = [
    OneShot::WsTicket,
    OneShot::ForeignTicket,
    OneShot::ExpiredTicket,
    OneShot::ForeignSignature,
    OneShot::AuthChallenge,
];

/// Uses each single-use object once, then replays it; returns the breaches and how many
/// replays were judged (a first use that failed, under a fault, leaves nothing to replay).
/// `other` is an account that is not the puppet (the stranger's own).
pub(super) async fn replay(
    puppet: &RawAccount,
    identity: &Identity,
    other: &RawAccount,
) -> (Findings, usize) {
    let mut found = Findings::new();
    let mut judged = 0;
    for one in ONE_SHOTS {
        let outcome = match one {
            OneShot::AuthChallenge => auth_challenge(puppet, identity).await,
            OneShot::WsTicket => ws_ticket(puppet).await,
            OneShot::ExpiredTicket => expired_ticket(puppet).await,
            OneShot::ForeignSignature => foreign_signature(puppet).await,
            OneShot::ForeignTicket => foreign_ticket(puppet, other).await,
        };
        if let Some(breach) = outcome {
            judged += 1;
            found.extend(breach);
        }
    }
    (found, judged)
}

/// A login of `puppet`'s as an honest client makes it: the signed `verify` body (to replay)
/// and the token it got, `None` when the login did not succeed.
pub(super) async fn login_once(
    puppet: &RawAccount,
    identity: &Identity,
) -> Option<(serde_json::Value, String)> {
    let http = http();
    let body = json!({ "user_uuid": puppet.uuid });
    let (_, ch) = post(&http, paths::AUTH_CHALLENGE, None, &body).await?;
    let challenge = field(&ch, "challenge")?;
    let body = json!({
        "user_uuid": puppet.uuid,
        "challenge": challenge,
        "signature": identity.sign_challenge(&challenge),
    });
    let (status, v) = post(&http, paths::AUTH_VERIFY, None, &body).await?;
    let token = field(&v, "token").filter(|_| status == 200)?;
    Some((body, token))
}

/// Whether `verify` answered the signed `body` with a token (a login).
pub(super) async fn logs_in(body: &serde_json::Value) -> Option<bool> {
    let (status, v) = post(&http(), paths::AUTH_VERIFY, None, body).await?;
    Some(status == 200 && field(&v, "token").is_some())
}

/// A login whose signed challenge is sent to `verify` twice: `None` when the first use did
/// not succeed (nothing to judge), else the breach, if the second one got a token too.
async fn auth_challenge(puppet: &RawAccount, identity: &Identity) -> Option<Option<Violation>> {
    let (body, _) = login_once(puppet, identity).await?;
    let again = logs_in(&body).await?;
    Some(again.then(|| {
        Violation::new(
            Oracle::Authz,
            "a signed auth challenge already answered at verify logged in again (200 with a token)",
        )
    }))
}

/// A WebSocket ticket of the puppet's and the seconds the relay says it lives, `None` when
/// none was issued.
pub(super) async fn issue_ticket(puppet: &RawAccount) -> Option<(String, u64)> {
    let http = http();
    let (status, v) = post(&http, paths::WS_TICKET, Some(&puppet.token), &json!({})).await?;
    if !(200..300).contains(&status) {
        return None;
    }
    let expires_in = v.get("expires_in").and_then(serde_json::Value::as_u64)?;
    Some((field(&v, "ticket")?, expires_in))
}

/// A WebSocket ticket redeemed twice: `None` when no ticket was issued or its first upgrade
/// failed, else the breach, if the second upgrade was let in too.
async fn ws_ticket(puppet: &RawAccount) -> Option<Option<Violation>> {
    let (ticket, _) = issue_ticket(puppet).await?;
    let query = format!("user_uuid={}&ticket={ticket}", puppet.uuid);
    let first = open_ws(&query).await.ok()?.ok()?;
    let second = open_ws(&query).await.ok()?;
    drop(first);
    Some(second.is_ok().then(|| {
        Violation::new(
            Oracle::Authz,
            "a WebSocket ticket already redeemed opened a second socket (101)",
        )
    }))
}

/// A WebSocket ticket first redeemed a second after the expiry the relay announced for it
/// (`expires_in`, in seconds): `None` when no ticket was issued, else the breach, if the
/// upgrade was let in.
async fn expired_ticket(puppet: &RawAccount) -> Option<Option<Violation>> {
    let (ticket, expires_in) = issue_ticket(puppet).await?;
    sleep_ms(expires_in * 1000 + 1000).await;
    let query = format!("user_uuid={}&ticket={ticket}", puppet.uuid);
    let upgrade = open_ws(&query).await.ok()?;
    Some(upgrade.is_ok().then(|| {
        Violation::new(
            Oracle::Authz,
            format!(
                "a WebSocket ticket opened a socket a second after the {expires_in} s the relay announced it would live"
            ),
        )
    }))
}

/// The puppet's fresh ticket presented for `other`, then for the puppet with its last
/// character changed: `None` when no ticket was issued or the relay did not answer, else the
/// breach, if either opened a socket.
async fn foreign_ticket(puppet: &RawAccount, other: &RawAccount) -> Option<Option<Violation>> {
    let (ticket, _) = issue_ticket(puppet).await?;
    let for_other = open_ws(&format!("user_uuid={}&ticket={ticket}", other.uuid))
        .await
        .ok()?;
    let mut forged = ticket.clone();
    let last = forged.pop()?;
    forged.push(if last == 'A' { 'B' } else { 'A' });
    let changed = open_ws(&format!("user_uuid={}&ticket={forged}", puppet.uuid))
        .await
        .ok()?;
    Some(match (for_other.is_ok(), changed.is_ok()) {
        (true, _) => Some(Violation::new(
            Oracle::Authz,
            "a WebSocket ticket issued to one account opened a socket for another (101)",
        )),
        (_, true) => Some(Violation::new(
            Oracle::Authz,
            "a WebSocket ticket with one character changed opened a socket (101)",
        )),
        (false, false) => None,
    })
}

/// The puppet's challenge signed with a key that is not the puppet's: `None` when no
/// challenge was issued, else the breach, if `verify` answered with a token.
async fn foreign_signature(puppet: &RawAccount) -> Option<Option<Violation>> {
    let http = http();
    let body = json!({ "user_uuid": puppet.uuid });
    let (_, ch) = post(&http, paths::AUTH_CHALLENGE, None, &body).await?;
    let challenge = field(&ch, "challenge")?;
    let other = stray_identity()?;
    let body = json!({
        "user_uuid": puppet.uuid,
        "challenge": challenge,
        "signature": other.sign_challenge(&challenge),
    });
    let (status, v) = post(&http, paths::AUTH_VERIFY, None, &body).await?;
    Some((status == 200 && field(&v, "token").is_some()).then(|| {
        Violation::new(
            Oracle::Authz,
            "a challenge signed with another account's key logged in (200 with a token)",
        )
    }))
}

/// An identity no account of the world was registered with (a fixed mnemonic).
pub(super) fn stray_identity() -> Option<Identity> {
    let words = client_core::keys::new_mnemonic(&mut ChaCha20Rng::seed_from_u64(0x5157));
    client_core::keys::derive_identity(words.expose(), client_core::keys::X25519Path::Spec).ok()
}
