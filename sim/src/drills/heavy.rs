//! `heavy-author` and `credentials`: state built before a relay power cycle, used after it
//! (the `heavy` class runs without caches and reads a conversation's tombstones by row past
//! [`crate::class::HEAVY_BY_ROW_BYTES`]).
//!
//! **heavy-author.** Author A writes [`MESSAGES`] messages to B (B takes the first half, then
//! goes away), so their conversation's tombstones are far past the by-row threshold; the relay is power-cycled.
//! Then A sends some of its old ids again: each must be acknowledged with the seq it first
//! got (`dedup`); A retracts one of its old messages (it must not be refused: `retract`); B
//! tries to retract another of A's (it must be refused `NOT_THE_AUTHOR`, and A never told of
//! it: `authz`); a new message gets the next seq; then new messages and their resends go out
//! back to back (a resend may reach the relay before its first copy is durable), each id
//! acknowledged with one seq. Last, B syncs: every message of A that was not retracted
//! arrives at B exactly once over its two sessions (`dedup`).
//!
//! **many-queues.** Eight accounts, every pair befriended, each queueing messages for every
//! other while all are away: 56 queues in the store (the `heavy` class holds none in memory);
//! the relay is power-cycled; half the accounts sync and must get every message queued for
//! them once, with its seq (`dedup`); the relay's clock then passes the TTL, the sweep takes
//! the other queues a page at a time (three queues, sixteen messages: the class's pages), and
//! the rest sync to nothing of it (`expiry`; the store oracle checks no row is left).
//!
//! **credentials.** Before the power cycle the drill takes an auth challenge (signed, not yet
//! answered) and a WebSocket ticket (not yet redeemed), and uses another pair as an honest
//! client does; after it, within their lifetimes, the unused ticket must open a socket and the
//! unused challenge must log in, once each (`credentials`), and every one of the four must be
//! refused when presented again (`authz`). PROTOCOL.md §1.1 A4/A5 (single use) and the relay's
//! credentials (sealed, so a restart keeps them valid: `relay_core::credential`).

use std::collections::BTreeMap;

use serde_json::json;
use wire::http::paths;

use super::peer::{Answer, Socket, befriend, payload};
use super::{Calm, Drills, Outcome};
use crate::hostile::http::{RawAccount, field, http, post};
use crate::violation::{Oracle, Violation};

/// Messages of the heavy author.
const MESSAGES: u64 = 160;
/// Old ids sent again after the restart.
const RESENT: [u64; 6] = [0, 1, 7, MESSAGES / 2, MESSAGES / 2 + 1, MESSAGES - 1];
/// The old message A retracts after the restart, and the one B tries to.
const RETRACTED_BY_AUTHOR: u64 = 3;
const RETRACTED_BY_OTHER: u64 = 5;
/// How long the relay stays off.
pub(super) const DOWN_MS: u64 = 1_500;

/// A heavy author across a power cycle (see the module doc).
pub(super) async fn heavy_author(d: &mut Drills<'_>) -> Outcome {
    let mut out = Outcome::default();
    let (mut a, mut b) = (d.account(60).await, d.account(61).await);
    let Some(conv) = befriend(&a.raw, &b.raw).await else {
        out.skip();
        return out;
    };
    let author = a.raw.alias.clone();
    let id = |k: u64| format!("heavy-{author}-{k}");
    let mut seqs: BTreeMap<u64, u64> = BTreeMap::new();
    let mut b_got: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    // A message whose answer never came may have taken a seq the drill does not know.
    let mut unanswered = false;
    for half in [0..MESSAGES / 2, MESSAGES / 2..MESSAGES] {
        let Ok(mut sa) = a.socket(false).await else {
            out.skip();
            return out;
        };
        for k in half.clone() {
            match sa.message(&id(k), &b.raw.alias, &conv, &payload(32)).await {
                Answer::Ack(seq) => {
                    seqs.insert(k, seq);
                }
                Answer::Silence => unanswered = true,
                Answer::Refused(_) => {}
            }
        }
        drop(sa);
        if half.start == 0
            && let Ok(mut sb) = b.socket(true).await
        {
            sb.drain(5_000).await;
            count(&mut b_got, &sb);
        }
    }
    if seqs.len() < MESSAGES as usize / 2 || !d.power_cycle(DOWN_MS).await {
        out.skip();
        return out;
    }
    let (Ok(mut sa), Ok(mut sb)) = (a.socket(false).await, b.socket(false).await) else {
        out.skip();
        return out;
    };
    for k in RESENT {
        let Some(first) = seqs.get(&k).copied() else {
            continue;
        };
        match sa.message(&id(k), &b.raw.alias, &conv, &payload(32)).await {
            Answer::Ack(seq) => out.expect(seq == first, Oracle::Dedup, || {
                format!(
                    "message {} of a heavy author, sent again after a relay restart, was acknowledged with seq {seq}; it first got {first}",
                    id(k)
                )
            }),
            Answer::Refused(code) if code == "STORAGE_UNAVAILABLE" || code == "RATE_LIMITED" => {
                out.skip();
            }
            Answer::Refused(code) => out.check(Some(Violation::new(
                Oracle::Dedup,
                format!(
                    "message {} of a heavy author, sent again after a relay restart, was refused {code} (it was acknowledged with seq {first})",
                    id(k)
                ),
            ))),
            Answer::Silence => out.skip(),
        }
    }
    retracts(
        &mut out, &mut sa, &mut sb, &a.raw, &b.raw, &conv, &id, &seqs,
    )
    .await;
    let newest = seqs.values().max().copied().unwrap_or(0);
    match sa.message(&id(MESSAGES), &b.raw.alias, &conv, &payload(32)).await {
        Answer::Ack(_) if unanswered => out.skip(),
        Answer::Ack(seq) => out.expect(seq == newest + 1, Oracle::Dedup, || {
            format!("the heavy author's next message after the restart got seq {seq}; the newest was {newest}")
        }),
        _ => out.skip(),
    }
    pipelined(&mut out, &mut sa, &b.raw.alias, &conv, &id, &mut seqs).await;
    drop(sb);
    if synced_after_refusals(&mut b, &mut b_got).await {
        for (k, first) in seqs.iter().filter(|(k, _)| **k != RETRACTED_BY_AUTHOR) {
            let got = b_got.get(&id(*k)).cloned().unwrap_or_default();
            // A redelivery (its receipt lost) carries the same seq; a second message would not.
            out.expect(
                !got.is_empty() && got.iter().all(|s| s == first),
                Oracle::Dedup,
                || {
                    format!(
                        "message {} of a heavy author (seq {first}) reached its recipient with seqs {got:?} over two sessions around a relay restart",
                        id(*k)
                    )
                },
            );
        }
    } else {
        out.skip();
    }
    out
}

/// New messages of the heavy author and their resends written back to back, so that a resend
/// reaches the relay while its first copy's commit may still be in flight (pipelined group
/// commit): each id is acknowledged with one seq however often it is sent (`dedup`); the
/// recipient's check at the end covers them too.
async fn pipelined(
    out: &mut Outcome,
    sa: &mut Socket,
    to: &str,
    conv: &str,
    id: &impl Fn(u64) -> String,
    seqs: &mut BTreeMap<u64, u64>,
) {
    let fresh = [MESSAGES + 1, MESSAGES + 2, MESSAGES + 3];
    let order = [fresh[0], fresh[1], fresh[0], fresh[2], fresh[1], fresh[0]];
    sa.acks.clear();
    for k in order {
        if !sa.send_message(&id(k), to, conv, &payload(32)).await {
            out.skip();
            return;
        }
    }
    sa.listen(super::peer::ANSWER_MS).await;
    for k in fresh {
        let got: Vec<u64> = sa
            .acks
            .iter()
            .filter(|(i, _)| *i == id(k))
            .map(|(_, s)| *s)
            .collect();
        let sent = order.iter().filter(|x| **x == k).count();
        let Some(&first) = got.first() else {
            out.skip();
            continue;
        };
        if got.len() < sent {
            // A copy was refused (a rate limit, a storage fault) or its answer lost.
            out.skip();
        } else {
            out.expect(got.iter().all(|s| *s == first), Oracle::Dedup, || {
                format!(
                    "message {} of a heavy author, sent {sent} times back to back, was acknowledged with seqs {got:?}",
                    id(k)
                )
            });
        }
        seqs.insert(k, first);
    }
}

/// Sync attempts of the recipient at the end of the heavy-author drill.
const SYNC_ATTEMPTS: u32 = 3;

/// `b` connects, syncs and drains, adding what it got to `got`; a sync the relay refused
/// because it could not read the queue (`STORAGE_UNAVAILABLE`, then a close: a storage fault)
/// is made again on a new connection, as a client does. `false`: no sync went through.
async fn synced_after_refusals(
    b: &mut super::peer::DrillAccount,
    got: &mut BTreeMap<String, Vec<u64>>,
) -> bool {
    for _ in 0..SYNC_ATTEMPTS {
        let Ok(mut sb) = b.socket(true).await else {
            return false;
        };
        sb.drain(10_000).await;
        count(got, &sb);
        if !(sb.ended && sb.errors.contains_key("STORAGE_UNAVAILABLE")) {
            return true;
        }
    }
    false
}

/// Adds what `socket` delivered to `got` (the seqs per message id).
fn count(got: &mut BTreeMap<String, Vec<u64>>, socket: &Socket) {
    for (id, seqs) in &socket.delivered {
        got.entry(id.clone()).or_default().extend(seqs);
    }
}

/// A retracts one of its old messages; B tries to retract another of A's.
#[allow(
    clippy::too_many_arguments,
    reason = "one step of one drill, with its sockets"
)]
async fn retracts(
    out: &mut Outcome,
    sa: &mut Socket,
    sb: &mut Socket,
    a: &RawAccount,
    b: &RawAccount,
    conv: &str,
    id: &dyn Fn(u64) -> String,
    seqs: &BTreeMap<u64, u64>,
) {
    if seqs.contains_key(&RETRACTED_BY_AUTHOR) {
        let own = id(RETRACTED_BY_AUTHOR);
        sa.send(
            &json!({"type": "retract", "id": own, "to": b.alias, "conv_id": conv, "crypto_v": 1}),
        )
        .await;
        match sa.answer_to(&own).await {
            Answer::Refused(code) if code == "STORAGE_UNAVAILABLE" => out.skip(),
            Answer::Refused(code) => out.check(Some(Violation::new(
                Oracle::Retract,
                format!("the heavy author's retract of its own old message {own} after a relay restart was refused {code}"),
            ))),
            _ => out.check(None),
        }
    }
    if seqs.contains_key(&RETRACTED_BY_OTHER) {
        let theirs = id(RETRACTED_BY_OTHER);
        sb.send(&json!({"type": "retract", "id": theirs, "to": a.alias, "conv_id": conv, "crypto_v": 1}))
            .await;
        match sb.answer_to(&theirs).await {
            Answer::Refused(code) if code == "NOT_THE_AUTHOR" => out.check(None),
            Answer::Refused(code) if code == "STORAGE_UNAVAILABLE" => out.skip(),
            answer => {
                sa.listen(1_000).await;
                let landed = sa.retracts.contains(&theirs);
                out.check((landed || matches!(answer, Answer::Refused(_))).then(|| {
                    Violation::new(
                        Oracle::Authz,
                        format!(
                            "the other member's retract of the heavy author's message {theirs} was {}",
                            if landed { "passed on to the author".to_owned() } else { format!("refused with {answer:?}, not NOT_THE_AUTHOR") }
                        ),
                    )
                }));
            }
        }
    }
}

/// Credentials issued before a power cycle, first used after it (see the module doc).
pub(super) async fn credentials(d: &mut Drills<'_>) -> Outcome {
    let mut out = Outcome::default();
    let mut c = d.account(70).await;
    if !c.relogin().await {
        out.skip();
        return out;
    }
    let http = http();
    // Used before: a login and a redeemed ticket, as an honest client uses them.
    let used_login = signed_challenge(&c).await;
    if let Some(body) = &used_login {
        match post(&http, paths::AUTH_VERIFY, None, body).await {
            Some((200, v)) => {
                if let Some(t) = field(&v, "token") {
                    c.raw.token = t;
                }
            }
            _ => {
                out.skip();
                return out;
            }
        }
    }
    let used_ticket = ticket(&c.raw).await;
    if let Some(q) = &used_ticket
        && Socket::open_query(q, false).await.is_err()
    {
        out.skip();
        return out;
    }
    // Issued before, used only after.
    let (Some(fresh_ticket), Some(fresh_login)) =
        (ticket(&c.raw).await, signed_challenge(&c).await)
    else {
        out.skip();
        return out;
    };
    let (calm, issued_ms) = (Calm::now(d.ctx), crate::time::sim_ms());
    if !d.power_cycle(DOWN_MS).await || !calm.clock_held(d.ctx) {
        out.skip();
        return out;
    }
    // Within their lifetimes on the relay's clock (with a margin for the answers' way back),
    // unless a fault moves that clock before they are presented (`held`).
    let held = Calm::now(d.ctx);
    let age = d.relay_since(issued_ms) + 2_000;
    let ticket_live = age < relay_core::limits::WS_TICKET_TTL_MS;
    let challenge_live = age < relay_core::limits::AUTH_CHALLENGE_TTL_MS;
    // The ticket first: a login revokes the token the ticket was asked with.
    let (mut ticket_used, mut login_used) = (false, false);
    match Socket::open_query(&fresh_ticket, false).await {
        Ok(_) => {
            ticket_used = true;
            out.check(None);
        }
        Err(_) if !ticket_live || !held.clock_held(d.ctx) => out.skip(),
        Err(s) if s == 0 || s >= 500 => out.skip(),
        Err(s) => out.check(Some(Violation::new(
            Oracle::Credentials,
            format!("a WebSocket ticket issued before a relay restart and never used was refused after it ({s}), within its lifetime"),
        ))),
    }
    match post(&http, paths::AUTH_VERIFY, None, &fresh_login).await {
        Some((200, _)) => {
            login_used = true;
            out.check(None);
        }
        Some(_) if !challenge_live || !held.clock_held(d.ctx) => out.skip(),
        Some((s, _)) if s == 429 || s >= 500 => out.skip(),
        Some((s, v)) => out.check(Some(Violation::new(
            Oracle::Credentials,
            format!(
                "an auth challenge issued before a relay restart and never answered was refused after it: {s} {}",
                field(&v, "error").unwrap_or_default()
            ),
        ))),
        None => out.skip(),
    }
    // Presented again: only what was used (a first use a fault refused used nothing).
    let again: [(&str, Option<&serde_json::Value>, Option<&String>); 4] = [
        (
            "a ticket redeemed after the restart",
            None,
            ticket_used.then_some(&fresh_ticket),
        ),
        (
            "a challenge answered after the restart",
            login_used.then_some(&fresh_login),
            None,
        ),
        (
            "a ticket redeemed before the restart",
            None,
            used_ticket.as_ref(),
        ),
        (
            "a challenge answered before the restart",
            used_login.as_ref(),
            None,
        ),
    ];
    for (what, login, query) in again {
        if let Some(q) = query {
            match Socket::open_query(q, false).await {
                Ok(_) => out.check(Some(Violation::new(
                    Oracle::Authz,
                    format!("{what} opened a socket again (101)"),
                ))),
                Err(s) if s == 0 || s >= 500 => out.skip(),
                Err(_) => out.check(None),
            }
        }
        if let Some(body) = login {
            match post(&http, paths::AUTH_VERIFY, None, body).await {
                Some((200, _)) => out.check(Some(Violation::new(
                    Oracle::Authz,
                    format!("{what} logged in again (200)"),
                ))),
                Some((s, _)) if s >= 500 => out.skip(),
                Some(_) => out.check(None),
                None => out.skip(),
            }
        }
    }
    out
}

/// The upgrade query of a fresh ticket of `account`'s.
async fn ticket(account: &RawAccount) -> Option<String> {
    let (status, v) = post(&http(), paths::WS_TICKET, Some(&account.token), &json!({})).await?;
    let t = field(&v, "ticket").filter(|_| (200..300).contains(&status))?;
    Some(format!("user_uuid={}&ticket={t}", account.uuid))
}

/// A fresh auth challenge of `account`'s, signed: the `verify` body, not sent.
async fn signed_challenge(account: &super::DrillAccount) -> Option<serde_json::Value> {
    let (_, ch) = post(
        &http(),
        paths::AUTH_CHALLENGE,
        None,
        &json!({ "user_uuid": account.raw.uuid }),
    )
    .await?;
    let challenge = field(&ch, "challenge")?;
    Some(json!({
        "user_uuid": account.raw.uuid,
        "challenge": challenge,
        "signature": account.identity.sign_challenge(&challenge),
    }))
}

/// Accounts of the `many-queues` drill: every pair befriended, every account writing to
/// every other while all are away.
const QUEUE_ACCOUNTS: u64 = 8;
/// Messages each account queues for each of its friends (more than a page of the class's
/// sweep holds, so that pages are cut short by the message bound too).
const PER_QUEUE: u64 = 7;

/// Many queues across a power cycle and an expiry (see the module doc).
pub(super) async fn many_queues(d: &mut Drills<'_>) -> Outcome {
    let mut out = Outcome::default();
    let mut accounts = Vec::new();
    for n in 0..QUEUE_ACCOUNTS {
        accounts.push(d.account(140 + n).await);
    }
    // conv of each pair (a < b)
    let mut convs: BTreeMap<(usize, usize), String> = BTreeMap::new();
    for a in 0..accounts.len() {
        for b in a + 1..accounts.len() {
            match befriend(&accounts[a].raw, &accounts[b].raw).await {
                Some(conv) => {
                    convs.insert((a, b), conv);
                }
                None => {
                    out.skip();
                    return out;
                }
            }
        }
    }
    let conv_of = |a: usize, b: usize| convs.get(&(a.min(b), a.max(b))).cloned();
    // What each account's messages to each other account got: id -> seq.
    let mut queued: BTreeMap<usize, BTreeMap<String, u64>> = BTreeMap::new();
    let mut unanswered = false;
    for from in 0..accounts.len() {
        let Ok(mut socket) = accounts[from].socket(false).await else {
            out.skip();
            return out;
        };
        for to in (0..accounts.len()).filter(|t| *t != from) {
            let Some(conv) = conv_of(from, to) else {
                continue;
            };
            for k in 0..PER_QUEUE {
                let id = format!("mq-{}-{to}-{k}", accounts[from].raw.alias);
                match socket
                    .message(&id, &accounts[to].raw.alias, &conv, &payload(24))
                    .await
                {
                    Answer::Ack(seq) => {
                        queued.entry(to).or_default().insert(id, seq);
                    }
                    Answer::Silence => unanswered = true,
                    Answer::Refused(_) => {}
                }
            }
        }
    }
    if !d.power_cycle(DOWN_MS).await {
        out.skip();
        return out;
    }
    // Half the accounts come back: each gets what was queued for it, once.
    let half = accounts.len() / 2;
    for (r, account) in accounts.iter_mut().enumerate().take(half) {
        let calm = Calm::now(d.ctx);
        let Ok(mut socket) = account.socket(true).await else {
            out.skip();
            continue;
        };
        socket.drain(8_000).await;
        // A power-off during the sync cut it short: what it lacks is still queued.
        if socket.ended || !calm.held(d.ctx, 0) {
            out.skip();
            continue;
        }
        for (id, seq) in queued.get(&r).into_iter().flatten() {
            let got = socket.delivered.get(id).cloned().unwrap_or_default();
            out.expect(!got.is_empty() && got.iter().all(|s| s == seq), Oracle::Dedup, || {
                format!(
                    "message {id} (seq {seq}), queued before a relay restart among {} queues, reached its recipient as {got:?}",
                    convs.len() * 2
                )
            });
        }
        // Nothing the drill did not send, and no message twice in the sync.
        let extra = socket.delivered.iter().find(|(id, seqs)| {
            seqs.len() > 1 || (!unanswered && !queued.get(&r).is_some_and(|q| q.contains_key(*id)))
        });
        out.check(extra.map(|(id, seqs)| {
            Violation::new(
                Oracle::Dedup,
                format!("after a relay restart, a recipient's sync delivered {id} as {seqs:?}, which it was not sent once"),
            )
        }));
    }
    // The rest stay away a day and more: the sweep takes their queues page by page (the store
    // oracle `expiry` checks that none is left), and they come back to nothing of it.
    let ttl = d.config.offline_ttl_ms;
    let calm = Calm::now(d.ctx);
    if !d.jump(ttl + 60_000).await {
        out.skip();
        return out;
    }
    crate::time::sleep_ms(2_000).await;
    for (r, account) in accounts.iter_mut().enumerate().skip(half) {
        let Ok(mut socket) = account.socket(true).await else {
            out.skip();
            continue;
        };
        socket.drain(3_000).await;
        if socket.ended || !calm.clock_held_but(d.ctx, 1) {
            out.skip();
            continue;
        }
        let stale: Vec<&String> = queued
            .get(&r)
            .into_iter()
            .flatten()
            .map(|(id, _)| id)
            .filter(|id| socket.delivered.contains_key(*id))
            .collect();
        out.expect(stale.is_empty(), Oracle::Expiry, || {
            format!(
                "{} message(s) queued a day and more (on the relay's clock) before their recipient synced arrived anyway; first {:?}",
                stale.len(),
                stale.first()
            )
        });
    }
    out
}

/// How far from a credential's expiry (on the relay's clock) the `lifetimes` drill presents it.
const LIFETIME_MARGIN_MS: u64 = 2_000;

/// Single-use credentials at the ends of their lifetimes (see the module doc): two tickets and
/// two challenges issued together, one of each presented just inside its lifetime and the
/// other just past it. A credential's age is bounded by when its issuing request left and
/// when its answer came, a presentation's moment by the same: only a presentation surely
/// inside (from the earliest issue to the latest arrival) or surely past (from the latest
/// issue to the earliest arrival) is judged.
pub(super) async fn lifetimes(d: &mut Drills<'_>) -> Outcome {
    use relay_core::limits::{AUTH_CHALLENGE_TTL_MS, WS_TICKET_TTL_MS};
    let mut out = Outcome::default();
    let mut c = d.account(71).await;
    if !c.relogin().await {
        out.skip();
        return out;
    }
    let now = crate::time::sim_ms;
    // (issue sent, issue answered, credential)
    let mut issued: Vec<(u64, u64, Result<String, serde_json::Value>)> = Vec::new();
    for kind in ["ticket", "ticket", "challenge", "challenge"] {
        let sent = now();
        let credential = if kind == "ticket" {
            ticket(&c.raw).await.map(Ok)
        } else {
            signed_challenge(&c).await.map(Err)
        };
        let Some(credential) = credential else {
            out.skip();
            return out;
        };
        issued.push((sent, now(), credential));
    }
    // In time order: (credential, inside its lifetime, its lifetime).
    let plan = [
        (0, true, WS_TICKET_TTL_MS),
        (1, false, WS_TICKET_TTL_MS),
        (2, true, AUTH_CHALLENGE_TTL_MS),
        (3, false, AUTH_CHALLENGE_TTL_MS),
    ];
    for (i, inside, ttl) in plan {
        let (issue_sent, issue_answered, credential) = &issued[i];
        let target = if inside {
            ttl - LIFETIME_MARGIN_MS
        } else {
            ttl + LIFETIME_MARGIN_MS
        };
        // From the issue's answer when it must be past, from its request when inside.
        let from = if inside { *issue_sent } else { *issue_answered };
        crate::time::sleep_ms(target.saturating_sub(d.relay_since(from))).await;
        let sent = now();
        let (taken, what) = match credential {
            Ok(query) => (
                match Socket::open_query(query, false).await {
                    Ok(_) => Some(true),
                    Err(s) if s == 0 || s >= 500 => None,
                    Err(_) => Some(false),
                },
                "ticket",
            ),
            Err(body) => (
                match post(&http(), paths::AUTH_VERIFY, None, body).await {
                    Some((200, _)) => Some(true),
                    Some((s, _)) if s == 429 || s >= 500 => None,
                    Some(_) => Some(false),
                    None => None,
                },
                "challenge",
            ),
        };
        let answered = now();
        let (youngest, oldest) = {
            let w = d.ctx.world.borrow();
            (
                w.relay_elapsed(*issue_answered, sent),
                w.relay_elapsed(*issue_sent, answered),
            )
        };
        // The ages are on the relay's clock, jumps included: a restart between changes nothing.
        let judged = if inside {
            oldest < ttl
        } else {
            youngest >= ttl
        };
        match taken {
            Some(taken) if judged => out.expect(taken == inside, Oracle::Credentials, || {
                format!(
                    "a {what} presented between {youngest} and {oldest} ms after it was issued (its lifetime: {ttl} ms) was {}",
                    if taken { "taken" } else { "refused" }
                )
            }),
            _ => out.skip(),
        }
    }
    out
}
