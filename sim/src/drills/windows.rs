//! The `limits` class's drills of the relay's fixed windows and caps (constants of
//! `relay_core::limits`, not scaled down by the class): media upload inits and unfinished
//! uploads, auth challenges, typing notices and call signals per minute (`windows`), and the
//! spent-credential set (`spent-full`), each filled and checked exactly (`limit-exact`).

use relay_core::limits::{MINUTE_MS, WS_TICKET_TTL_MS};
use serde_json::json;
use wire::http::paths;

use super::limits::EXACT;
use super::peer::{DrillAccount, Socket, befriend, status_and_retry_after};
use super::{Calm, Drills, Outcome};
use crate::hostile::http::{field, http, post};
use crate::time::sim_ms;
use crate::violation::Violation;
use seam::net::HttpRequest;

/// The fixed windows of the relay's constants (`relay_core::limits`): media upload inits per
/// account per minute and unfinished uploads per account, auth challenges per account per
/// minute (used up first, then a new window), typing notices per account per minute (the
/// excess silently dropped: the peer sees exactly the allowance), call signals per connection
/// per minute (the peer gets exactly the allowance, the caller an error frame for each
/// excess signal).
pub(super) async fn windows(d: &mut Drills<'_>) -> Outcome {
    use relay_core::limits::{
        AUTH_CHALLENGES_PER_MIN_PER_USER, MAX_CALL_FRAMES_PER_MIN_PER_CONN,
        MAX_OPEN_UPLOADS_PER_USER, MAX_TYPING_PER_MIN_PER_USER, MEDIA_UPLOADS_PER_MIN_PER_USER,
    };
    let mut out = Outcome::default();
    // Media: a fresh account's inits, up to the rate, then (a window later) up to the quota.
    let m = d.account(130).await;
    let init = async || {
        post(
            &http(),
            paths::MEDIA_INIT,
            Some(&m.raw.token),
            &json!({"content_type": "application/octet-stream"}),
        )
        .await
        .map(|(s, v)| (s, field(&v, "error").unwrap_or_default()))
    };
    let calm = Calm::now(d.ctx);
    let rate = u64::from(MEDIA_UPLOADS_PER_MIN_PER_USER);
    let mut answers = Vec::new();
    for _ in 0..=rate {
        answers.push(init().await);
    }
    let ok = |a: &Option<(u16, String)>| matches!(a, Some((s, _)) if (200..300).contains(s));
    let undecided = |a: &Option<(u16, String)>| a.as_ref().is_none_or(|(s, _)| *s >= 500);
    if answers.iter().any(undecided) || !calm.clock_held(d.ctx) {
        out.skip();
    } else {
        let through = answers.iter().take_while(|a| ok(a)).count() as u64;
        let last = answers.last().cloned().flatten();
        out.expect(through == rate && matches!(&last, Some((429, c)) if c == "RATE_LIMITED"), EXACT, || {
            format!("media upload inits of a fresh account: {through} through, then {last:?} (the limit: {rate} a minute, then 429 RATE_LIMITED)")
        });
        if d.jump(MINUTE_MS + 100).await {
            let quota = MAX_OPEN_UPLOADS_PER_USER as u64;
            let mut more = Vec::new();
            for _ in rate..=quota {
                more.push(init().await);
            }
            if more.iter().any(undecided) || !calm.clock_held_but(d.ctx, 1) {
                out.skip();
            } else {
                let through = more.iter().take_while(|a| ok(a)).count() as u64;
                let last = more.last().cloned().flatten();
                out.expect(
                    through == quota - rate && matches!(&last, Some((403, c)) if c == "QUOTA_EXCEEDED"),
                    EXACT,
                    || format!("media upload inits in a new minute: {through} through with {rate} unfinished, then {last:?} (the quota: {quota} unfinished, then 403 QUOTA_EXCEEDED)"),
                );
            }
        } else {
            out.skip();
        }
    }
    // Auth challenges: used up, then a new window allows the whole allowance again. The
    // 429's Retry-After says when: the drill moves the relay's clock by exactly that.
    let a = d.account(131).await;
    let challenge = async || {
        let req = HttpRequest::post(paths::AUTH_CHALLENGE)
            .json(&json!({ "user_uuid": a.raw.uuid }))
            .ok()?;
        status_and_retry_after(req).await
    };
    let allowance = AUTH_CHALLENGES_PER_MIN_PER_USER;
    let mut retry_after = None;
    for _ in 0..=allowance {
        match challenge().await {
            Some((429, retry)) => {
                retry_after = Some(retry);
                break;
            }
            Some((s, _)) if s < 500 => {}
            _ => break,
        }
    }
    // A window of a minute frees within a minute.
    let wait_s = match retry_after {
        Some(Some(s)) if (1..=MINUTE_MS / 1_000).contains(&s) => Some(s),
        Some(retry) => {
            out.check(Some(Violation::new(
                EXACT,
                format!(
                    "auth challenges: a 429 with Retry-After {retry:?} (the window is a minute)"
                ),
            )));
            None
        }
        None => None,
    };
    let calm = Calm::now(d.ctx);
    if let Some(wait_s) = wait_s
        && d.jump(wait_s * 1_000).await
    {
        let mut through = 0;
        let mut last = None;
        for _ in 0..=allowance {
            last = challenge().await.map(|(s, _)| s);
            match last {
                Some(s) if (200..300).contains(&s) => through += 1,
                _ => break,
            }
        }
        // The challenge budget lives in the relay's memory: a power-off or a takeover
        // starts it afresh, so only a calm relay is judged.
        if last.is_none_or(|s| s >= 500) || !calm.held(d.ctx, 1) {
            out.skip();
        } else {
            out.expect(through == allowance && last == Some(429), EXACT, || {
                format!("auth challenges of one account after the 429's Retry-After ({wait_s} s): {through} through, then {last:?} (the limit: {allowance} a minute, then 429)")
            });
        }
    } else {
        out.skip();
    }
    // Typing notices: the peer hears exactly the allowance of a burst.
    let (mut t1, mut t2) = (d.account(132).await, d.account(133).await);
    match befriend(&t1.raw, &t2.raw).await {
        Some(conv) => {
            // Both checks are judged only if the relay the sockets reached stayed up: behind
            // the failover balancer a socket whose relay died is not closed, it goes silent.
            let calm = Calm::now(d.ctx);
            if let (Ok(mut s1), Ok(mut s2)) = (t1.socket(false).await, t2.socket(true).await) {
                let burst = MAX_TYPING_PER_MIN_PER_USER + 10;
                let mut sent = true;
                for _ in 0..burst {
                    sent &= s1
                        .send(&json!({"type": "typing", "to": t2.raw.alias, "conv_id": conv, "crypto_v": 1}))
                        .await;
                }
                s2.listen(5_000).await;
                if !sent || s1.ended || s2.ended || !calm.held(d.ctx, 0) {
                    out.skip();
                } else {
                    out.expect(s2.typings == MAX_TYPING_PER_MIN_PER_USER, EXACT, || {
                        format!(
                            "{burst} typing notices in a burst reached the peer {} times (the limit: {MAX_TYPING_PER_MIN_PER_USER} a minute, the rest dropped)",
                            s2.typings
                        )
                    });
                }
                // Call signals on the same connection: a limit of their own, and each excess
                // signal answered with an error frame.
                let over = 10;
                let burst = MAX_CALL_FRAMES_PER_MIN_PER_CONN + over;
                let mut sent = true;
                for n in 0..burst {
                    sent &= s1
                        .send(&json!({"type": "call_ice", "to": t2.raw.alias, "call_id": format!("drill-call-{n}"), "crypto_v": 1, "payload": "AAAA"}))
                        .await;
                }
                s1.listen(3_000).await;
                s2.listen(2_000).await;
                let refused = s1.errors.get("RATE_LIMITED").copied().unwrap_or(0);
                if !sent || s1.ended || s2.ended || !calm.held(d.ctx, 0) {
                    out.skip();
                } else {
                    out.expect(
                        s2.calls == MAX_CALL_FRAMES_PER_MIN_PER_CONN && refused == over,
                        EXACT,
                        || {
                            format!(
                                "{burst} call signals in a burst on one connection: the peer got {}, the caller {refused} RATE_LIMITED error frames (the limit: {MAX_CALL_FRAMES_PER_MIN_PER_CONN} a minute, each excess signal answered RATE_LIMITED)",
                                s2.calls
                            )
                        },
                    );
                }
            } else {
                out.skip();
            }
        }
        None => out.skip(),
    }
    out
}

/// The spent-credential set filled with redeemed tickets, then the clock moved past their
/// lifetime (see the module doc).
pub(super) async fn spent_full(d: &mut Drills<'_>) -> Outcome {
    let mut out = Outcome::default();
    let mut account = d.account(121).await;
    let cap = d.config.max_spent_credentials_per_account;
    let calm = Calm::now(d.ctx);
    let mut redeemed = 0;
    let mut full = false;
    // When each ticket was redeemed (simulated ms): the set forgets each after its lifetime,
    // so only `cap + 1` redeemed within one lifetime prove the bound let one too many in.
    let mut at: std::collections::VecDeque<u64> = std::collections::VecDeque::new();
    let mut overflow = false;
    while redeemed <= 3 * cap && !full && !overflow {
        let Some(query) = ticket(&account).await else {
            out.skip();
            return out;
        };
        match Socket::open_query(&query, false).await {
            Ok(_) => {
                redeemed += 1;
                at.push_back(sim_ms());
                if at.len() > cap {
                    let first = at.pop_front().unwrap_or(0);
                    overflow = d.relay_since(first) + 1_000 < WS_TICKET_TTL_MS;
                }
            }
            Err(429) => full = true,
            Err(s) if s == 0 || s >= 500 => {
                out.skip();
                return out;
            }
            Err(_) if !calm.held(d.ctx, 0) => {
                out.skip();
                return out;
            }
            Err(s) => {
                out.check(Some(Violation::new(
                    EXACT,
                    format!("a fresh WebSocket ticket was refused {s} while the spent-credential set filled"),
                )));
                return out;
            }
        }
    }
    if !calm.held(d.ctx, 0) {
        out.skip();
        return out;
    }
    if !full && !overflow {
        // The set forgot tickets as fast as the drill redeemed them (slow links): unjudged.
        out.skip();
        return out;
    }
    out.expect(full, EXACT, || {
        format!("{} tickets of one account redeemed within one ticket lifetime ({WS_TICKET_TTL_MS} ms), past the spent-credential bound of {cap} per account, and none refused 429", cap + 1)
    });
    if !full {
        return out;
    }
    // Full: what spends nothing still works (a token upgrade, an authenticated request).
    match Socket::open(&account.raw, false).await {
        Ok(_) => out.check(None),
        Err(_) if !calm.held(d.ctx, 0) => out.skip(),
        Err(s) if s == 0 || s >= 500 => out.skip(),
        Err(s) => out.check(Some(Violation::new(
            EXACT,
            format!("with the spent-credential set full, an upgrade with a token (which spends nothing) was refused {s}"),
        ))),
    }
    // Another account's tickets are not refused for this one's full set.
    let other = d.account(122).await;
    match ticket(&other).await {
        Some(query) => match Socket::open_query(&query, false).await {
            Ok(_) => out.check(None),
            Err(_) if !calm.held(d.ctx, 0) => out.skip(),
            Err(s) if s == 0 || s >= 500 => out.skip(),
            Err(s) => out.check(Some(Violation::new(
                EXACT,
                format!("with one account's spent credentials at the bound, another account's ticket upgrade was refused {s}"),
            ))),
        },
        None => out.skip(),
    }
    // Past every ticket's and challenge's lifetime, the set empties: a ticket works again.
    if !d
        .jump(relay_core::limits::AUTH_CHALLENGE_TTL_MS.max(WS_TICKET_TTL_MS) + 1_000)
        .await
    {
        out.skip();
        return out;
    }
    if !account.relogin().await {
        out.skip();
        return out;
    }
    match ticket(&account).await {
        Some(query) => match Socket::open_query(&query, false).await {
            Ok(_) => out.check(None),
            Err(_) if !calm.held(d.ctx, 1) => out.skip(),
            Err(s) if s == 0 || s >= 500 => out.skip(),
            Err(s) => out.check(Some(Violation::new(
                EXACT,
                format!("once every spent credential had expired, a fresh ticket was refused {s}"),
            ))),
        },
        None => out.skip(),
    }
    out
}

/// The upgrade query of a fresh ticket of `account`'s.
async fn ticket(account: &DrillAccount) -> Option<String> {
    let (status, v) = post(
        &http(),
        paths::WS_TICKET,
        Some(&account.raw.token),
        &json!({}),
    )
    .await?;
    let t = field(&v, "ticket").filter(|_| (200..300).contains(&status))?;
    Some(format!("user_uuid={}&ticket={t}", account.raw.uuid))
}
