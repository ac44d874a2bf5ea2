//! Raw clients ("strangers"): accounts made over plain HTTP and sockets spoken by hand, no
//! client library, so they can do what an honest client never does.
//!
//! ```text
//! stranger host x<i>:
//!   register (PoW, keys from its mnemonic, challenge signed)   → alias published to the world
//!   reject the friend requests the scenario sends it           → then try to accept them anyway
//!   loop: the fault plan's acts, one at a time:
//!     flood        malformed frames at a high rate; each must get an error frame (or the
//!                  socket a close code)
//!     dishonest    first, against its own puppet account (`member`, `replay`): as the
//!                  other member of their conversation, a receipt for seqs never sent to
//!                  it, a retract of the puppet's message, a msg naming the puppet as
//!                  `from`; every route of the relay's table that names an object, on the
//!                  puppets' friendship, channel, upload and an honest order, and every
//!                  routed frame type to a non-contact (`foreign`); and each single-use
//!                  object (auth challenge, WebSocket ticket) used, then replayed. Then
//!                  others' conversations (msg, receipts, typing, retract), others'
//!                  friendships, orders, channels and identities; out-of-order binds; in
//!                  half of the acts every route of the table with forged credentials
//!                  (`credentials`), in the other half every route that reads a body with
//!                  that body spoiled (`malformed`); last, the puppet's login, ticket
//!                  and revoked token, used at the act's start, presented again if the
//!                  relay powered off in between (`restart`)
//!     stop-reading provoke answers, stop reading; the relay must close the socket within
//!                  STUCK_CLOSE_BOUND_MS (seen as the host's TCP stream count dropping to 0:
//!                  a relay that drops the socket resets it, its unread data makes it a RST)
//!     storm        many sockets at once: authenticated, bad tokens, silent TCP
//! ```
//!
//! What they observe goes to the run's findings (violations named `authz`, `stuck-client`,
//! `bad-input`); what they cannot observe is left to the oracles (a message of theirs
//! committed or delivered, a retract of someone else's message landing, a receipt mark in
//! their name).
//!
//! Modules: `http` (registration and login by hand), `ws` (a WebSocket spoken by hand),
//! `flood`, `dishonest` (with `credentials`, `foreign`, `malformed`, `member`, `replay` and
//! `restart`), `slow` (the slow consumer), `storm`.

pub(crate) mod credentials;
mod dishonest;
mod flood;
mod foreign;
pub(crate) mod http;
mod malformed;
mod member;
mod replay;
mod restart;
mod slow;
mod storm;
pub(crate) mod ws;

use std::collections::{BTreeSet, VecDeque};
use std::rc::Rc;

use serde_json::{Value, json};
use wire::http::paths;

use self::http::{RawAccount, field, get, post, put_empty, register};
use crate::faults::HostileAct;
use crate::time::{sim_ms, sleep_ms};
use crate::violation::{Oracle, Violation};
use crate::world::{HostCtx, note};

/// Pause between the stranger's polls for friend requests.
const POLL_MS: u64 = 500;
/// How long a stranger waits for the friend requests it is to reject, after traffic starts.
const REJECT_WAIT_MS: u64 = 30_000;

/// A direct observation of a raw client.
type Findings = Vec<Violation>;

/// The script of stranger host `x<index>`; runs again from the top after a crash.
pub(crate) async fn stranger_host(ctx: Rc<HostCtx>) {
    let index = ctx.me;
    let Some(stranger) = ctx.scenario.strangers.get(index).cloned() else {
        return;
    };
    let nickname = format!("stranger{index}");
    let mut account = loop {
        if let Some(a) = register(&stranger.mnemonic, &nickname).await {
            break a;
        }
        sleep_ms(POLL_MS).await;
    };
    ctx.world
        .borrow_mut()
        .strangers
        .insert(index, (account.uuid.clone(), account.alias.clone()));
    reject_requests(&ctx, index, &account).await;
    loop {
        let act = ctx
            .world
            .borrow_mut()
            .hostile_inbox
            .get_mut(&stranger.host)
            .and_then(VecDeque::pop_front);
        let Some(act) = act else {
            sleep_ms(100).await;
            continue;
        };
        note(&ctx, format!("{} {act}", stranger.host));
        renew_expired_token(&mut account, &stranger.mnemonic, &nickname).await;
        let found = match act {
            HostileAct::Flood { frames, roll } => flood::flood(&ctx, &account, frames, roll).await,
            HostileAct::Dishonest { count, roll } => {
                dishonest::dishonest(&ctx, &account, count, roll).await
            }
            HostileAct::StopReading { provoke, pause_ms } => {
                slow::stop_reading(&ctx, &stranger.host, &account, provoke, pause_ms).await
            }
            HostileAct::Storm { sockets, hold_ms } => {
                storm::storm(&account, sockets, hold_ms).await
            }
        };
        for v in found {
            note(&ctx, format!("{} found: {v}", stranger.host));
            ctx.world.borrow_mut().findings.push(v);
        }
    }
}

/// Logs the stranger in again when its token expired (the `days` class moves the relay's
/// clock by days): its acts judge the relay's answers to the stranger's own, valid token.
async fn renew_expired_token(account: &mut RawAccount, mnemonic: &str, nickname: &str) {
    let expired = matches!(
        get(&http::http(), paths::FRIENDS, &account.token).await,
        Some((401, body)) if field(&body, "error").as_deref() == Some("TOKEN_EXPIRED")
    );
    if expired && let Some(renewed) = register(mnemonic, nickname).await {
        *account = renewed;
    }
}

/// Rejects the friend requests the scenario sends this stranger, then (out of order) tries
/// to accept them anyway: the relay must refuse.
async fn reject_requests(ctx: &HostCtx, index: usize, account: &RawAccount) {
    let expected: BTreeSet<usize> = ctx
        .scenario
        .rejections
        .iter()
        .filter(|r| r.stranger == index)
        .map(|r| r.client)
        .collect();
    if expected.is_empty() {
        return;
    }
    let http = http::http();
    let mut rejected: BTreeSet<String> = BTreeSet::new();
    loop {
        let deadline = ctx
            .world
            .borrow()
            .traffic_start_ms
            .map(|s| s + REJECT_WAIT_MS);
        if deadline.is_some_and(|d| sim_ms() > d) || rejected.len() >= expected.len() {
            break;
        }
        if let Some((200, Value::Array(friends))) = get(&http, paths::FRIENDS, &account.token).await
        {
            for f in friends {
                let id = f.get("friendship_id").map(ToString::to_string);
                let received = field(&f, "direction").as_deref() == Some("received");
                let pending = field(&f, "status").as_deref() == Some("pending");
                if let (Some(id), true, true) = (id, received, pending) {
                    let path = paths::FRIEND_REJECT.replace("{friendship_id}", &id);
                    if let Some((s, _)) = post(&http, &path, Some(&account.token), &json!({})).await
                        && (200..300).contains(&s)
                    {
                        rejected.insert(id);
                    }
                }
            }
        }
        sleep_ms(POLL_MS).await;
    }
    let mut found = Findings::new();
    for id in &rejected {
        let path = paths::FRIEND_ACCEPT.replace("{friendship_id}", id);
        if let Some((s, _)) = put_empty(&http, &path, &account.token).await
            && (200..300).contains(&s)
        {
            found.push(Violation::new(
                Oracle::Authz,
                format!("a rejected friendship {id} was accepted afterwards by its rejecter ({s})"),
            ));
        }
    }
    let mut w = ctx.world.borrow_mut();
    w.rejected.insert(index, rejected.len());
    w.findings.extend(found);
}
