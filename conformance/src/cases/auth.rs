//! AUTH: challenge-response, tokens, tickets (SPEC §Authentication; PROTOCOL §1.1 A3-A5, §1.1.3).

use http::Method;
use serde_json::json;
use wire::http::paths;

use crate::ctx::{Ctx, Kind, fields, s, u};
use crate::model::{Case, CaseResult, Failure};
use crate::{case, ensure};

/// Cases of this area.
pub const CASES: &[Case] = &[
    case!(
        "AUTH-001",
        Must,
        "SPEC §Authentication 2.4; PROTOCOL §1.1 A3",
        "POST /api/v1/auth/challenge `{user_uuid}` returns `{challenge: string}`.",
        [],
        challenge
    ),
    case!(
        "AUTH-002",
        Should,
        "PROTOCOL §1.1 A3",
        "The challenge response also carries `expires_at` (the iOS client requires it).",
        [],
        challenge_expires_at
    ),
    case!(
        "AUTH-003",
        Must,
        "SPEC §Authentication 2.5-2.6; PROTOCOL §1.1 A4, §1.1.3",
        "POST /api/v1/auth/verify with the Ed25519 signature of the challenge's UTF-8 bytes returns `{token}`.",
        [],
        verify
    ),
    case!(
        "AUTH-004",
        Should,
        "PROTOCOL §1.1 A4",
        "The verify response also carries `expires_in` (int seconds; the iOS client requires it).",
        [],
        verify_expires_in
    ),
    case!(
        "AUTH-005",
        Must,
        "SPEC §Authentication 3",
        "A signature by another key does not yield a token (a 4xx with an error body; our relay: 401).",
        [],
        verify_wrong_key
    ),
    case!(
        "AUTH-006",
        Should,
        "PROTOCOL §1.1 A3-A4",
        "An auth challenge is single use: verifying it a second time is refused with 401.",
        [],
        challenge_single_use
    ),
    case!(
        "AUTH-007",
        Should,
        "PROTOCOL §1.1 A3",
        "An auth challenge for an unknown account is refused with a 4xx error body.",
        [],
        challenge_unknown_user
    ),
    case!(
        "AUTH-008",
        Must,
        "SPEC §Authentication 8; PROTOCOL §0",
        "Operations that need a JWT refuse a caller without one: 401 for those SPEC lists (vanity purchase and bind, listing, buy quota), a 4xx for the others PROTOCOL marks JWT (our relay: 401).",
        [],
        jwt_required
    ),
    case!(
        "AUTH-009",
        Must,
        "PROTOCOL §0",
        "A malformed bearer token is refused (a 4xx; our relay: 401). PROTOCOL gives 401 for revoked and stale tokens (§1.10), no status for one that is not a token at all.",
        [],
        garbage_token
    ),
    case!(
        "AUTH-010",
        Must,
        "PROTOCOL §1.1.3, §9",
        "Every successful new login (A4) revokes the account's older tokens: the old token gets 401.",
        [],
        new_login_revokes
    ),
    case!(
        "AUTH-011",
        Must,
        "PROTOCOL §1.1 A5, §9",
        "POST /api/v1/ws/ticket returns `{ticket}` made only of URL-safe characters.",
        [],
        ticket
    ),
    case!(
        "AUTH-012",
        Must,
        "PROTOCOL §1.1 A5",
        "A WebSocket ticket is single use: a second upgrade with it is refused.",
        [],
        ticket_single_use
    ),
    case!(
        "AUTH-013",
        Must,
        "SPEC §Authentication 4",
        "Session restore: steps 4-6 run again for an existing account yield a fresh working token.",
        [],
        restore
    ),
    case!(
        "AUTH-014",
        Should,
        "PROTOCOL §1.1 A4",
        "A token expires after its `expires_in` seconds (401 afterwards).",
        [ClockAdvance],
        token_expires
    ),
    case!(
        "AUTH-015",
        Should,
        "PROTOCOL §1.1 A5",
        "A WebSocket ticket expires after 30 s.",
        [ClockAdvance],
        ticket_expires
    ),
    case!(
        "AUTH-016",
        Must,
        "SPEC §Authentication 8",
        "Public operations need no JWT: vanity search, deprecated reserve and order status.",
        [],
        public_ops
    ),
];

async fn challenge(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let v = ctx
        .post(paths::AUTH_CHALLENGE, None, &json!({"user_uuid": a.uuid}))
        .await?
        .ok()?;
    fields("A3", &v, &[("challenge", Kind::NonEmpty)])
}

async fn challenge_expires_at(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let v = ctx
        .post(paths::AUTH_CHALLENGE, None, &json!({"user_uuid": a.uuid}))
        .await?
        .ok()?;
    fields("A3", &v, &[("expires_at", Kind::Iso)])
}

async fn verify(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let ch = ctx
        .post(paths::AUTH_CHALLENGE, None, &json!({"user_uuid": a.uuid}))
        .await?
        .ok()?;
    let challenge = s(&ch, "challenge")?.to_owned();
    let sig = a.identity.sign_challenge(&challenge);
    ctx.transcript.secret(&sig);
    let v = ctx
        .post(
            paths::AUTH_VERIFY,
            None,
            &json!({"user_uuid": a.uuid, "challenge": challenge, "signature": sig}),
        )
        .await?
        .ok()?;
    fields("A4", &v, &[("token", Kind::NonEmpty)])?;
    let token = s(&v, "token")?.to_owned();
    ctx.transcript.secret(&token);
    ctx.get(paths::FRIENDS, Some(&token)).await?.ok()?;
    Ok(())
}

async fn verify_expires_in(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let ch = ctx
        .post(paths::AUTH_CHALLENGE, None, &json!({"user_uuid": a.uuid}))
        .await?
        .ok()?;
    let challenge = s(&ch, "challenge")?.to_owned();
    let sig = a.identity.sign_challenge(&challenge);
    let v = ctx
        .post(
            paths::AUTH_VERIFY,
            None,
            &json!({"user_uuid": a.uuid, "challenge": challenge, "signature": sig}),
        )
        .await?
        .ok()?;
    if let Some(t) = v.get("token").and_then(|t| t.as_str()) {
        ctx.transcript.secret(t);
    }
    fields("A4", &v, &[("expires_in", Kind::Uint)])
}

async fn verify_wrong_key(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let other = ctx.identity()?;
    let ch = ctx
        .post(paths::AUTH_CHALLENGE, None, &json!({"user_uuid": a.uuid}))
        .await?
        .ok()?;
    let challenge = s(&ch, "challenge")?.to_owned();
    let sig = other.sign_challenge(&challenge);
    ctx.post(
        paths::AUTH_VERIFY,
        None,
        &json!({"user_uuid": a.uuid, "challenge": challenge, "signature": sig}),
    )
    .await?
    .refused(401)?;
    Ok(())
}

async fn challenge_single_use(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let ch = ctx
        .post(paths::AUTH_CHALLENGE, None, &json!({"user_uuid": a.uuid}))
        .await?
        .ok()?;
    let challenge = s(&ch, "challenge")?.to_owned();
    let sig = a.identity.sign_challenge(&challenge);
    ctx.transcript.secret(&sig);
    let body = json!({"user_uuid": a.uuid, "challenge": challenge, "signature": sig});
    let first = ctx.post(paths::AUTH_VERIFY, None, &body).await?.ok()?;
    if let Some(t) = first.get("token").and_then(|t| t.as_str()) {
        ctx.transcript.secret(t);
    }
    ctx.post(paths::AUTH_VERIFY, None, &body)
        .await?
        .refused(401)?;
    Ok(())
}

async fn challenge_unknown_user(ctx: &mut Ctx) -> CaseResult {
    let uuid = ctx.uuid();
    ctx.post(paths::AUTH_CHALLENGE, None, &json!({"user_uuid": uuid}))
        .await?
        .expect_client_error()?;
    Ok(())
}

async fn jwt_required(ctx: &mut Ctx) -> CaseResult {
    // SPEC §Authentication 8: "(401 when missing)".
    for p in [
        paths::VANITY_PURCHASE,
        paths::VANITY_BIND,
        paths::LIST_CHANNEL,
        paths::CHANNEL_QUOTA_BUY,
    ] {
        ctx.req(Method::POST, p, None, Some(&json!({})))
            .await?
            .expect_error(401)?;
    }
    let routes: &[(Method, &str)] = &[
        (Method::GET, paths::FRIENDS),
        (Method::POST, paths::FRIEND_REQUEST),
        (Method::GET, paths::ACTIVE_CONVERSATIONS),
        (Method::GET, paths::STORAGE_ESTIMATE),
        (Method::POST, paths::WS_TICKET),
        (Method::GET, paths::CHANNELS_MINE),
        (Method::POST, paths::CHANNELS),
        (Method::POST, paths::MEDIA_INIT),
        (Method::POST, paths::PUSH_SUBSCRIBE),
        (Method::POST, paths::PUSH_DISABLE),
        (Method::GET, paths::ICE_CONFIG),
    ];
    for (m, p) in routes {
        let body = (*m == Method::POST).then(|| json!({}));
        ctx.req(m.clone(), p, None, body.as_ref())
            .await?
            .refused(401)?;
    }
    Ok(())
}

async fn garbage_token(ctx: &mut Ctx) -> CaseResult {
    ctx.get(paths::FRIENDS, Some("not.a.jwt"))
        .await?
        .refused(401)?;
    ctx.get(
        paths::FRIENDS,
        Some("eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiJ4In0.c2ln"),
    )
    .await?
    .refused(401)?;
    Ok(())
}

async fn new_login_revokes(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let newer = ctx.login(&a.uuid, &a.identity).await?;
    ctx.get(paths::FRIENDS, Some(&newer)).await?.ok()?;
    ctx.get(paths::FRIENDS, Some(&a.token))
        .await?
        .expect_error(401)?;
    Ok(())
}

async fn ticket(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let v = ctx
        .post(paths::WS_TICKET, Some(&a.token), &json!({}))
        .await?
        .ok()?;
    let t = s(&v, "ticket")?.to_owned();
    ctx.transcript.secret(&t);
    ensure!(
        t.bytes().all(|b| b.is_ascii_alphanumeric()
            || b == b'-'
            || b == b'_'
            || b == b'.'
            || b == b'~'),
        "the ticket has characters that need URL encoding"
    );
    Ok(())
}

async fn ticket_single_use(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let v = ctx
        .post(paths::WS_TICKET, Some(&a.token), &json!({}))
        .await?
        .ok()?;
    let t = s(&v, "ticket")?.to_owned();
    ctx.transcript.secret(&t);
    let path = format!("{}?user_uuid={}&ticket={t}", paths::WS, a.uuid);
    let _first = ctx
        .open_ws(seam::net::WsRequest::new(path.clone()), &path, "first")
        .await
        .map_err(|e| format!("the first upgrade with a fresh ticket failed: {e}"))?;
    let second = ctx
        .open_ws(seam::net::WsRequest::new(path.clone()), &path, "second")
        .await;
    ensure!(
        second.is_err(),
        "a second upgrade with the same ticket was accepted"
    );
    Ok(())
}

async fn restore(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let fresh = ctx
        .login(&a.uuid, &a.identity)
        .await
        .map_err(Failure::checked)?;
    ensure!(fresh != a.token, "the restore returned the same token");
    ctx.get(paths::FRIENDS, Some(&fresh)).await?.ok()?;
    Ok(())
}

async fn token_expires(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let ch = ctx
        .post(paths::AUTH_CHALLENGE, None, &json!({"user_uuid": a.uuid}))
        .await?
        .ok()?;
    let challenge = s(&ch, "challenge")?.to_owned();
    let sig = a.identity.sign_challenge(&challenge);
    let v = ctx
        .post(
            paths::AUTH_VERIFY,
            None,
            &json!({"user_uuid": a.uuid, "challenge": challenge, "signature": sig}),
        )
        .await?
        .ok()?;
    let token = s(&v, "token")?.to_owned();
    ctx.transcript.secret(&token);
    let ttl_s = u(&v, "expires_in")?;
    ctx.get(paths::FRIENDS, Some(&token)).await?.ok()?;
    ctx.advance_clock(ttl_s * 1000 + 1000).await?;
    ctx.get(paths::FRIENDS, Some(&token))
        .await?
        .expect_error(401)?;
    Ok(())
}

async fn ticket_expires(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let v = ctx
        .post(paths::WS_TICKET, Some(&a.token), &json!({}))
        .await?
        .ok()?;
    let t = s(&v, "ticket")?.to_owned();
    ctx.transcript.secret(&t);
    ctx.advance_clock(31_000).await?;
    let path = format!("{}?user_uuid={}&ticket={t}", paths::WS, a.uuid);
    let r = ctx
        .open_ws(seam::net::WsRequest::new(path.clone()), &path, "late")
        .await;
    ensure!(r.is_err(), "an upgrade with a 31 s old ticket was accepted");
    Ok(())
}

async fn public_ops(ctx: &mut Ctx) -> CaseResult {
    ctx.get(paths::VANITY_SEARCH, None).await?.ok()?;
    let item = ctx.free_alias().await?;
    let alias = s(&item, "alias_id")?.to_owned();
    let order = ctx
        .post(paths::VANITY_RESERVE, None, &json!({"alias_id": alias}))
        .await?
        .ok()?;
    let id = s(&order, "order_id")?.to_owned();
    ctx.get(&format!("/api/v1/vanity/order/{id}/status"), None)
        .await?
        .ok()?;
    Ok(())
}
