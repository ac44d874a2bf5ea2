//! `ages` and `tokens`: expiries measured on the relay's clock across the `days` class's idle
//! stretches (the world's clock jumps hours at a time, see [`crate::class::days_jumps`]).
//!
//! **ages.** Senders befriend two recipients that stay away. Before the first stretch and
//! after each one, every sender queues a few messages (each `ack` timed). After the traffic
//! window the recipients connect and sync. Judged per message, on the relay's clock between
//! its `ack` and the sync (the world's `relay_elapsed`):
//! past its TTL by more than [`SLACK_MS`], it must not arrive (the sweep deleted it); short
//! of its TTL by more than [`SLACK_MS`], it must arrive, once. Several queues per recipient
//! and the `days` class's small sweep pages make the sweep page.
//!
//! **tokens.** A token taken before the stretches is presented after each one: within its
//! lifetime (less [`SLACK_MS`]) a 2xx; past it (plus [`SLACK_MS`]) 401 `TOKEN_EXPIRED`, and
//! the WebSocket upgrade with it refused; a fresh login then works.

use wire::http::paths;

use super::peer::{Answer, DrillAccount, Socket, befriend, payload};
use super::{Calm, Drills, Outcome};
use crate::bounds::TRAFFIC_WINDOW_MS;
use crate::hostile::http::{field, get, http};
use crate::time::{sim_ms, sleep_ms};
use crate::violation::{Oracle, Violation};
use crate::world::wait_until;

/// How far from an expiry (on the relay's clock) a drill judges nothing: the relay stamps a
/// message a little before its `ack`, and the sweep runs at the relay's next wake-up after a
/// stretch.
pub(super) const SLACK_MS: u64 = 60_000;
/// Senders per recipient.
const SENDERS: u64 = 3;
/// Recipients.
const RECIPIENTS: u64 = 2;
/// Messages each sender queues per round.
const PER_ROUND: u32 = 3;

/// A queued message of the drill.
#[derive(Debug)]
struct Aged {
    id: String,
    /// Recipient number.
    to: u64,
    /// When it was sent (simulated ms): the relay accepted it between this and its `ack`.
    sent_ms: u64,
    /// When its `ack` came (simulated ms).
    acked_ms: u64,
}

/// Messages of known ages across the stretches (see the module doc).
pub(super) async fn ages(d: &mut Drills<'_>) -> Outcome {
    let mut out = Outcome::default();
    let ttl = d.config.offline_ttl_ms;
    let mut recipients = Vec::new();
    for r in 0..RECIPIENTS {
        recipients.push(d.account(30 + r).await);
    }
    // (sender account, its socket, (recipient number, conversation) pairs)
    let mut senders = Vec::new();
    for s in 0..SENDERS * RECIPIENTS {
        let sender = d.account(40 + s).await;
        let to = s % RECIPIENTS;
        let Some(conv) = befriend(&sender.raw, &recipients[to as usize].raw).await else {
            out.skip();
            continue;
        };
        senders.push((sender, to, conv));
    }
    let mut queued: Vec<Aged> = Vec::new();
    let start = d.ctx.world.borrow().traffic_start_ms.unwrap_or(0);
    let window_end = start + TRAFFIC_WINDOW_MS;
    let mut round = 0u32;
    loop {
        for (sender, to, conv) in &mut senders {
            let Ok(mut socket) = sender.socket(false).await else {
                out.skip();
                continue;
            };
            let alias = &recipients[*to as usize].raw.alias;
            for k in 0..PER_ROUND {
                let id = format!("age-{}-{round}-{k}", sender.raw.alias);
                let sent_ms = sim_ms();
                match socket.message(&id, alias, conv, &payload(64)).await {
                    Answer::Ack(_) => queued.push(Aged {
                        id,
                        to: *to,
                        sent_ms,
                        acked_ms: sim_ms(),
                    }),
                    // Refused or unanswered: nothing queued that the drill knows of.
                    Answer::Refused(_) | Answer::Silence => out.skip(),
                }
            }
        }
        round += 1;
        // Until the next stretch (or the end of the window).
        let jumps = d.ctx.world.borrow().relay_jumps.len();
        wait_until(d.ctx, |w| {
            w.relay_jumps.len() > jumps || sim_ms() >= window_end
        })
        .await;
        if sim_ms() >= window_end {
            break;
        }
        sleep_ms(1_000).await;
    }
    wait_until(d.ctx, |w| w.heal_ms.is_some()).await;
    for (r, recipient) in recipients.iter_mut().enumerate() {
        let Ok(mut socket) = recipient.socket(true).await else {
            out.skip();
            continue;
        };
        let synced_ms = sim_ms();
        socket.drain(20_000).await;
        for m in queued.iter().filter(|m| m.to == r as u64) {
            // Its age on the relay's clock at the sync: at most since it was sent, at least
            // since its ack (a stretch may fall between the two).
            let (oldest, youngest) = {
                let w = d.ctx.world.borrow();
                (
                    w.relay_elapsed(m.sent_ms, synced_ms),
                    w.relay_elapsed(m.acked_ms, synced_ms),
                )
            };
            let age = youngest;
            let seqs = socket.delivered.get(&m.id).cloned().unwrap_or_default();
            let got = seqs.len();
            if youngest >= ttl + SLACK_MS {
                out.expect(got == 0, Oracle::Expiry, || {
                    format!(
                        "message {} arrived {} h after it was queued, past the {} h TTL on the relay's clock",
                        m.id,
                        age / 3_600_000,
                        ttl / 3_600_000
                    )
                });
            } else if oldest + SLACK_MS <= ttl {
                out.expect(got == 1, Oracle::Expiry, || {
                    format!(
                        "message {} acknowledged at {} ms, {} min on the relay's clock before its recipient synced at {synced_ms} ms (TTL {} h), arrived {got} times (seqs {seqs:?})",
                        m.id,
                        m.acked_ms,
                        age / 60_000,
                        ttl / 3_600_000
                    )
                });
            } else {
                out.skip();
            }
        }
    }
    out
}

/// Tokens within and past their lifetime (see the module doc).
pub(super) async fn tokens(d: &mut Drills<'_>) -> Outcome {
    let mut out = Outcome::default();
    let ttl = d.config.jwt_ttl_ms;
    let mut account = d.account(50).await;
    if !account.relogin().await {
        out.skip();
        return out;
    }
    let (token, issued_ms) = (account.raw.token.clone(), sim_ms());
    let start = d.ctx.world.borrow().traffic_start_ms.unwrap_or(0);
    let window_end = start + TRAFFIC_WINDOW_MS;
    let mut expired_seen = false;
    while sim_ms() < window_end && !expired_seen {
        let jumps = d.ctx.world.borrow().relay_jumps.len();
        wait_until(d.ctx, |w| {
            w.relay_jumps.len() > jumps || sim_ms() >= window_end
        })
        .await;
        let age = d.relay_since(issued_ms);
        let calm = Calm::now(d.ctx);
        let Some((status, body)) = get(&http(), paths::FRIENDS, &token).await else {
            out.skip();
            continue;
        };
        // A jump while the request was on its way: the age above is not the one it met.
        if status == 429 || status >= 500 || !calm.clock_held(d.ctx) {
            out.skip();
            continue;
        }
        if age + SLACK_MS <= ttl {
            out.expect((200..300).contains(&status), Oracle::Expiry, || {
                format!(
                    "a token {} h old (lifetime {} h on the relay's clock) was refused: {status} {}",
                    age / 3_600_000,
                    ttl / 3_600_000,
                    field(&body, "error").unwrap_or_default()
                )
            });
        } else if age >= ttl + SLACK_MS {
            expired_seen = true;
            let code = field(&body, "error").unwrap_or_default();
            out.expect(status == 401 && code == "TOKEN_EXPIRED", Oracle::Expiry, || {
                format!(
                    "a token {} h old (lifetime {} h on the relay's clock) answered {status} {code}",
                    age / 3_600_000,
                    ttl / 3_600_000
                )
            });
            let upgrade = Socket::open(&account.raw, false).await;
            match upgrade {
                Ok(_) => out.check(Some(Violation::new(
                    Oracle::Expiry,
                    format!(
                        "a token {} h old (lifetime {} h) opened a WebSocket",
                        age / 3_600_000,
                        ttl / 3_600_000
                    ),
                ))),
                Err(s) if s == 0 || s >= 500 => out.skip(),
                Err(_) => out.check(None),
            }
            fresh_login_works(&mut account, &mut out).await;
        } else {
            out.skip();
        }
    }
    out
}

/// After an expiry the account logs in again and its new token is taken.
async fn fresh_login_works(account: &mut DrillAccount, out: &mut Outcome) {
    if !account.relogin().await {
        out.skip();
        return;
    }
    match get(&http(), paths::FRIENDS, &account.raw.token).await {
        Some((s, _)) if s == 429 || s >= 500 => out.skip(),
        Some((s, _)) => out.expect((200..300).contains(&s), Oracle::Expiry, || {
            format!("a fresh token, after the old one expired, was refused: {s}")
        }),
        None => out.skip(),
    }
}
