//! Limits and expiries across areas (PROTOCOL §1.10 "Server-side limits", SPEC §States
//! "Payment order"): rate limits that need many requests from one client, and lifetimes that need the test clock.
//! The ids belong to their areas (REG, MSG, MEDIA, TRADE); they live together here because they
//! share how they are driven.

use serde_json::{Value, json};
use wire::http::paths;

use super::media::{enc, upload};
use crate::ctx::{Account, Ctx, s, u};
use crate::model::{Case, CaseResult, Failure};
use crate::{case, ensure, fail};

/// Cases of this module.
pub const CASES: &[Case] = &[
    case!(
        "REG-012",
        Should,
        "PROTOCOL §1.1 A2 (429 = registration rate limit, README: 10/IP/hour), §1.10",
        "More than 10 registrations from one client address within an hour are refused with 429 and the error body.",
        [],
        registration_limit
    ),
    case!(
        "REG-013",
        Should,
        "PROTOCOL §1.1 A1 (`expires_in`, default 300 s), §1.1.1",
        "A proof-of-work challenge expires after its `expires_in` seconds: a registration solved for it and submitted later is refused (4xx), while a fresh challenge still registers.",
        [ClockAdvance],
        pow_expiry
    ),
    case!(
        "MSG-019",
        Should,
        "PROTOCOL §1.10 (message rate limit 120 per user per minute), §3.1 msg; ARCHITECTURE wire",
        "More than 120 new `msg` per user per minute are refused: the excess message is never acked (an `error` frame of any shape, or silence; our relay: an `error` frame `RATE_LIMITED` carrying its id).",
        [],
        msg_rate_limit
    ),
    case!(
        "MSG-020",
        Should,
        "PROTOCOL §1.10 (typing rate limit 30 per user per minute), §3.1 typing",
        "More than 30 `typing` per user per minute: the excess is dropped silently (the peer gets at most 30, the sender no `error` frame).",
        [],
        typing_rate_limit
    ),
    case!(
        "MSG-021",
        Should,
        "PROTOCOL §1.10 (message TTL on relay 24 h, then purged), §9",
        "An undelivered message is kept 24 h: one sent 24 h + 1 ms before the recipient syncs is not replayed, one sent a minute before is.",
        [ClockAdvance],
        offline_ttl
    ),
    case!(
        "MEDIA-009",
        Should,
        "PROTOCOL §1.6 notes (upload rate limit 10 per user per minute, README), §1.10",
        "More than 10 upload inits per user per minute are refused with 429 and the error body.",
        [],
        upload_rate_limit
    ),
    case!(
        "MEDIA-010",
        Should,
        "PROTOCOL §1.6 notes (media TTL 24 h), §1.10",
        "A completed media object can be downloaded until 24 h after completion and not after (404).",
        [ClockAdvance],
        media_ttl
    ),
    case!(
        "TRADE-012",
        Should,
        "SPEC §States Payment order (`expired`), §Channels ChannelTradeOrder `expired_at`",
        "An unpaid channel trade order is `expired` after its `expired_at`, and the channel can then be bought by another buyer.",
        [ClockAdvance],
        trade_order_expiry
    ),
    case!(
        "TRADE-013",
        Should,
        "SPEC §States Payment order (`expired`), §Endpoints buy channel quota (ChannelTradeOrder)",
        "An unpaid channel-quota order is `expired` after its `expired_at`.",
        [ClockAdvance],
        quota_order_expiry
    ),
    case!(
        "TRADE-014",
        Should,
        "SPEC §Endpoints list channel for sale (optimistic-lock compare-and-swap; paths and statuses: not shown); ARCHITECTURE wire",
        "Reference profile only: a listing whose `expected_version` is stale is refused with 409 `VERSION_CONFLICT` and changes nothing; the current version is accepted.",
        [],
        listing_cas
    ),
];

/// The ids a burst of `n` messages from `a` to `b` used, sent without waiting for acks.
async fn burst(
    ctx: &mut Ctx,
    ws: &mut crate::ctx::Ws,
    p: &crate::ctx::Pair,
    n: usize,
    tag: &str,
) -> Result<Vec<String>, Failure> {
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        let (id, m) = ctx.msg(&p.key, &p.b, &p.conv, &format!("{tag} #{i}"));
        ws.send(&m).await?;
        ids.push(id);
    }
    Ok(ids)
}

/// PROTOCOL §1.10: 10 registrations per address per hour.
const REGISTRATIONS_PER_HOUR: usize = 10;
/// PROTOCOL §1.10: 120 messages per user per minute.
const MSGS_PER_MIN: usize = 120;
/// PROTOCOL §1.10: 30 typing notices per user per minute.
const TYPING_PER_MIN: usize = 30;
/// PROTOCOL §1.10: 10 uploads per user per minute.
const UPLOADS_PER_MIN: usize = 10;
/// PROTOCOL §1.10: messages and media live 24 h.
const DAY_MS: u64 = 24 * 3_600_000;

async fn registration_limit(ctx: &mut Ctx) -> CaseResult {
    for n in 1..=REGISTRATIONS_PER_HOUR + 1 {
        let identity = ctx.identity()?;
        let body = ctx.register_body(&identity, &format!("rl{n}")).await?;
        let r = ctx.post(paths::REGISTER, None, &body).await?;
        if r.status == 429 {
            r.expect_error(429)?;
            ensure!(
                n > 1,
                "the very first registration from this address got 429"
            );
            ctx.note(&format!("registration {n} from this address: 429"));
            return Ok(());
        }
        r.ok()?;
    }
    Err(Failure::Skip(format!(
        "{} registrations from one address within the hour were all accepted: this relay allows \
         more than the documented {REGISTRATIONS_PER_HOUR} (the embedded relay raises \
         Config::registrations_per_hour_per_addr to 1,000,000 — \
         relay_server::embedded::TEST_REGISTRATIONS_PER_HOUR_PER_ADDR — so the suite can create \
         its accounts; its clock cases share one address)",
        REGISTRATIONS_PER_HOUR + 1
    )))
}

async fn pow_expiry(ctx: &mut Ctx) -> CaseResult {
    // A relay that requires no proof of work (difficulty 0) checks no challenge, so a stale one
    // proves nothing about its lifetime.
    super::registration::difficulty(ctx).await?;
    let identity = ctx.identity()?;
    // Solved now, submitted after the challenge's lifetime.
    let probe = ctx
        .post(paths::POW_CHALLENGE, None, &json!({}))
        .await?
        .ok()?;
    let ttl_s = probe
        .get("expires_in")
        .and_then(Value::as_u64)
        .unwrap_or(300);
    let body = ctx.register_body(&identity, "powlate").await?;
    ctx.advance_clock(ttl_s * 1000 + 1000).await?;
    let r = ctx.post(paths::REGISTER, None, &body).await?;
    ensure!(
        (400..500).contains(&r.status),
        "a registration solved for a challenge older than its {ttl_s} s lifetime answered {} {}",
        r.status,
        String::from_utf8_lossy(&r.body)
    );
    r.expect_client_error()?;
    // The same keys with a fresh challenge register.
    let body = ctx.register_body(&identity, "powfresh").await?;
    ctx.post(paths::REGISTER, None, &body).await?.ok()?;
    Ok(())
}

async fn msg_rate_limit(ctx: &mut Ctx) -> CaseResult {
    let p = ctx.pair().await?;
    let mut wa = ctx.connect(&p.a, "A").await?;
    let mut acked = 0usize;
    // Two bursts at most: if the relay's window ended inside the first, the second is
    // entirely inside the next window.
    for round in 0..2 {
        let ids = burst(
            ctx,
            &mut wa,
            &p,
            MSGS_PER_MIN + 1,
            &format!("burst {round}"),
        )
        .await?;
        let mut refused: Vec<String> = Vec::new();
        let mut round_acked = 0usize;
        // The relay answers a burst's messages in order: once one message went unanswered for
        // the whole wait, the answers to those after it have had that time too.
        let mut within = ctx.wait();
        for id in &ids {
            let Some(v) = wa.answer_to(id, within).await else {
                // The documents define no error frame: silence (no ack) is a refusal too; the
                // reference profile wants our error frame.
                ensure!(
                    !ctx.reference(),
                    "message {} of the burst got neither an ack nor an error frame within {} ms",
                    round_acked + refused.len() + 1,
                    within.as_millis()
                );
                refused.push(id.clone());
                within = ctx.quiet();
                continue;
            };
            if v["type"] == "ack" {
                round_acked += 1;
                continue;
            }
            // The documents give no error code: an error frame for the message (and no ack)
            // is the refusal; the reference profile wants our code.
            ensure!(
                !ctx.reference() || v["error"] == "RATE_LIMITED",
                "message {} of the burst got an error frame {}: expected RATE_LIMITED in `error`",
                round_acked + refused.len() + 1,
                v
            );
            if let Some((field, c)) = crate::ctx::error_code(&v) {
                ctx.note(&format!("refused with code {c} (in `{field}`)"));
            }
            refused.push(id.clone());
        }
        acked += round_acked;
        if refused.is_empty() {
            ctx.note(&format!(
                "burst {round}: all {} acked; {acked} acked so far",
                ids.len()
            ));
            continue;
        }
        ensure!(
            round_acked <= MSGS_PER_MIN,
            "{round_acked} messages of one burst were acked before the first refusal (limit {MSGS_PER_MIN})"
        );
        // No ack ever follows for a refused message.
        let refused_ids = refused.clone();
        wa.expect_none_where("ack", move |v| {
            v.get("id")
                .and_then(Value::as_str)
                .is_some_and(|id| refused_ids.iter().any(|r| r == id))
        })
        .await?;
        return Ok(());
    }
    fail!(
        "{acked} new messages from one user within a minute were all acked (limit {MSGS_PER_MIN}); no RATE_LIMITED"
    )
}

async fn typing_rate_limit(ctx: &mut Ctx) -> CaseResult {
    let (p, mut wa, mut wb) = super::online(ctx).await?;
    let extra = 10;
    for _ in 0..TYPING_PER_MIN + extra {
        wa.send(&json!({"type": "typing", "to": p.b.alias, "conv_id": p.conv, "crypto_v": 1}))
            .await?;
    }
    // A marker message: frames from one sender reach the peer in order, so every typing
    // notice the relay forwarded is queued at B once the marker arrives.
    let (id, m) = ctx.msg(&p.key, &p.b, &p.conv, "marker");
    wa.send_msg(&id, &m).await?;
    let wanted = id.clone();
    wb.expect_where("msg", move |v| v["id"] == wanted.as_str())
        .await?;
    let got = wb.queued("typing");
    ensure!(got >= 1, "no typing notice reached the peer");
    ensure!(
        got <= TYPING_PER_MIN,
        "the peer got {got} of {} typing notices sent within a minute (limit {TYPING_PER_MIN})",
        TYPING_PER_MIN + extra
    );
    wa.expect_none("error").await
}

async fn upload_rate_limit(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    for n in 1..=UPLOADS_PER_MIN + 1 {
        let r = ctx
            .post(
                paths::MEDIA_INIT,
                Some(&a.token),
                &json!({"content_type": "application/octet-stream"}),
            )
            .await?;
        if n <= UPLOADS_PER_MIN {
            r.ok()?;
        } else {
            r.expect_error(429)?;
        }
    }
    Ok(())
}

/// After a long clock jump: a fresh token for `acct` (the old one may have expired).
async fn relogin(ctx: &mut Ctx, acct: &mut Account) -> CaseResult {
    acct.token = ctx
        .login(&acct.uuid, &acct.identity)
        .await
        .map_err(|f| f.in_setup("logging in again after the clock advance"))?;
    Ok(())
}

async fn offline_ttl(ctx: &mut Ctx) -> CaseResult {
    let mut p = ctx.pair().await?;
    let mut wa = ctx.connect(&p.a, "A").await?;
    let (old, m) = ctx.msg(&p.key, &p.b, &p.conv, "expires");
    wa.send_msg(&old, &m).await?;
    drop(wa);
    // 24 h - 1 min later (tokens are still valid) A sends another one.
    ctx.advance_clock(DAY_MS - 60_000).await?;
    relogin(ctx, &mut p.a).await?;
    let mut wa = ctx.connect(&p.a, "A2").await?;
    let (fresh, m) = ctx.msg(&p.key, &p.b, &p.conv, "still here");
    wa.send_msg(&fresh, &m).await?;
    drop(wa);
    // Now the first is 24 h + 1 ms old.
    ctx.advance_clock(60_001).await?;
    relogin(ctx, &mut p.b).await?;
    let mut wb = ctx.connect(&p.b, "B").await?;
    let wanted = fresh.clone();
    wb.expect_where("msg", move |v| v["id"] == wanted.as_str())
        .await?;
    let expired = old.clone();
    wb.expect_none_where("msg", move |v| v["id"] == expired.as_str())
        .await
}

async fn media_ttl(ctx: &mut Ctx) -> CaseResult {
    let mut p = ctx.pair().await?;
    let plain = ctx.bytes(500);
    let frames = client_core::crypto::media::encrypt_media(&p.key, &plain, ctx.rng());
    let key = upload(ctx, &p.a, frames).await?;
    let path = format!("{}?key={}", paths::MEDIA_DOWNLOAD, enc(&key));
    ctx.advance_clock(DAY_MS - 60_000).await?;
    relogin(ctx, &mut p.b).await?;
    let r = ctx.get(&path, Some(&p.b.token)).await?;
    ensure!(
        r.status == 200,
        "download 1 min before the 24 h TTL answered {}",
        r.status
    );
    ctx.advance_clock(60_001).await?;
    relogin(ctx, &mut p.b).await?;
    ctx.get(&path, Some(&p.b.token)).await?.refused(404)?;
    Ok(())
}

/// Days from 1970-01-01 to the civil date (proleptic Gregorian).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// An RFC 3339 date-time (`2026-01-01T00:30:00Z`, `…:00.123Z`, `…+08:00`) as epoch ms.
pub fn parse_rfc3339_ms(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> { text.get(r)?.parse().ok() };
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let mut i = 19;
    let mut ms = 0i64;
    if b.get(i) == Some(&b'.') {
        let start = i + 1;
        i = start;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        let frac = text.get(start..i)?;
        let digits: String = frac.chars().chain("000".chars()).take(3).collect();
        ms = digits.parse().ok()?;
    }
    let offset_min = match b.get(i)? {
        b'Z' | b'z' => 0,
        sign @ (b'+' | b'-') => {
            let (oh, om) = (num(i + 1..i + 3)?, num(i + 4..i + 6)?);
            let m = oh * 60 + om;
            if *sign == b'+' { m } else { -m }
        }
        _ => return None,
    };
    let secs = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + sec - offset_min * 60;
    u64::try_from(secs * 1000 + ms).ok()
}

/// Moves the relay's clock to just past `order`'s `expired_at`.
async fn advance_past_expiry(ctx: &mut Ctx, order: &Value) -> CaseResult {
    let at = s(order, "expired_at")?;
    let Some(expires) = parse_rfc3339_ms(at) else {
        fail!("`expired_at` {at:?} is not an RFC 3339 date-time");
    };
    let now = ctx.advance_clock(0).await?;
    ensure!(
        expires > now,
        "a new order's expired_at {at} is not in the relay's future"
    );
    ctx.advance_clock(expires - now + 1_000).await?;
    Ok(())
}

async fn order_status(ctx: &mut Ctx, order: &str) -> Result<String, Failure> {
    let st = ctx
        .get(&format!("/api/v1/vanity/order/{order}/status"), None)
        .await?
        .ok()?;
    Ok(s(&st, "status")?.to_owned())
}

async fn trade_order_expiry(ctx: &mut Ctx) -> CaseResult {
    let owner = ctx.account().await?;
    let id = ctx.create_channel(&owner, true).await?;
    ctx.list_for_sale(&owner, &id, 11).await?.ok()?;
    let first = ctx.account().await?;
    let second = ctx.account().await?;
    let buy = format!("/api/v1/channels/{id}/buy");
    let order = ctx.post(&buy, Some(&first.token), &json!({})).await?.ok()?;
    let order_id = s(&order, "order_id")?.to_owned();
    // While it is pending the channel is locked for others.
    let taken = ctx.post(&buy, Some(&second.token), &json!({})).await?;
    ensure!(
        taken.status == 409,
        "a second buyer during the pending order got {}",
        taken.status
    );
    advance_past_expiry(ctx, &order).await?;
    let status = order_status(ctx, &order_id).await?;
    ensure!(
        status == "expired",
        "the order is `{status}` after its expired_at"
    );
    let mut second = second;
    relogin(ctx, &mut second).await?;
    ctx.post(&buy, Some(&second.token), &json!({}))
        .await?
        .ok()?;
    Ok(())
}

async fn quota_order_expiry(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let order = ctx
        .post(paths::CHANNEL_QUOTA_BUY, Some(&a.token), &json!({}))
        .await?
        .ok()?;
    let order_id = s(&order, "order_id")?.to_owned();
    ensure!(
        order_status(ctx, &order_id).await? == "pending",
        "a new quota order is not pending"
    );
    advance_past_expiry(ctx, &order).await?;
    let status = order_status(ctx, &order_id).await?;
    ensure!(
        status == "expired",
        "the quota order is `{status}` after its expired_at"
    );
    Ok(())
}

async fn channel_version(ctx: &mut Ctx, owner: &Account, id: &str) -> Result<Value, Failure> {
    let v = ctx
        .get(&format!("/api/v1/channels/{id}"), Some(&owner.token))
        .await?
        .ok()?;
    u(&v, "version")?;
    Ok(v)
}

async fn listing_cas(ctx: &mut Ctx) -> CaseResult {
    if !ctx.reference() {
        return Err(Failure::Skip(
            "the documents show no field or status for the listing's compare-and-swap (SPEC: \"paths and statuses: not shown\"; no reference client sends a version): `expected_version`, `version` and 409 VERSION_CONFLICT are our relay's, checked with --profile reference".into(),
        ));
    }
    let owner = ctx.account().await?;
    let id = ctx.create_channel(&owner, true).await?;
    let before = u(&channel_version(ctx, &owner, &id).await?, "version")?;
    ctx.post(
        paths::LIST_CHANNEL,
        Some(&owner.token),
        &json!({"channel_id": id, "price_usdt": 21, "expected_version": before}),
    )
    .await?
    .ok()?;
    let listed = channel_version(ctx, &owner, &id).await?;
    let now = u(&listed, "version")?;
    ensure!(
        now != before,
        "the listing did not change the channel's version ({before})"
    );
    let body = ctx
        .post(
            paths::LIST_CHANNEL,
            Some(&owner.token),
            &json!({"channel_id": id, "price_usdt": 99, "expected_version": before}),
        )
        .await?
        .expect_error(409)?;
    ensure!(
        body["error"] == "VERSION_CONFLICT",
        "a stale expected_version answered {body}, expected VERSION_CONFLICT"
    );
    let after = channel_version(ctx, &owner, &id).await?;
    ensure!(
        after.get("sale_price").and_then(Value::as_u64) == Some(21),
        "the refused listing changed the price: {after}"
    );
    ctx.post(
        paths::LIST_CHANNEL,
        Some(&owner.token),
        &json!({"channel_id": id, "price_usdt": 23, "expected_version": now}),
    )
    .await?
    .ok()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_parses() {
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_rfc3339_ms("2026-01-01T00:00:00.250Z"),
            Some(1_767_225_600_250)
        );
        assert_eq!(
            parse_rfc3339_ms("2026-01-01T08:00:00+08:00"),
            Some(1_767_225_600_000)
        );
        assert_eq!(parse_rfc3339_ms("2026-01-01"), None);
    }
}
