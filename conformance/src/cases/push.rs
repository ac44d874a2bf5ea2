//! PUSH: push registration (SPEC §What the service does 9; PROTOCOL §1.7 P1-P4).

use http::Method;
use serde_json::json;
use wire::http::paths;

use crate::ctx::{Ctx, s};
use crate::model::{Case, CaseResult};
use crate::{case, ensure};

/// A valid uncompressed P-256 point (the generator), base64url, as browsers send `p256dh`.
const P256DH: &str =
    "BGsX0fLhLEJH-Lzm5WOkQPJ3A32BLeszoPShOUXYmMKWT-NC4v4af5uO5-tKfA-eFivOM1drMV7Oy7ZAaDe_UfU";
/// A 16-byte auth secret, base64url.
const AUTH: &str = "AAECAwQFBgcICQoLDA0ODw";

/// Cases of this area.
pub const CASES: &[Case] = &[
    case!(
        "PUSH-001",
        Must,
        "PROTOCOL §1.7 P1",
        "GET /api/v1/push/vapid-key returns `{vapid_public_key}` in base64url.",
        [],
        vapid
    ),
    case!(
        "PUSH-002",
        Must,
        "SPEC §What the service does 9; PROTOCOL §1.7 P2",
        "POST /api/v1/push/subscribe with `PushSubscription.toJSON()` `{endpoint, keys: {p256dh, auth}}` is accepted.",
        [],
        subscribe
    ),
    case!(
        "PUSH-003",
        Must,
        "PROTOCOL §1.7 P3",
        "POST /api/v1/push/register accepts Android `{token, platform: android}` and iOS `{device_token, platform: ios}`.",
        [],
        register_native
    ),
    case!(
        "PUSH-004",
        Must,
        "PROTOCOL §1.7 P4, §0",
        "POST /api/v1/push/disable with no body is accepted and idempotent.",
        [],
        disable
    ),
    case!(
        "PUSH-005",
        Must,
        "SPEC §Authentication 8",
        "Push subscription needs a JWT (401 without).",
        [],
        needs_jwt
    ),
    case!(
        "PUSH-006",
        Should,
        "PROTOCOL §1.7 P3 (server de-duplicates)",
        "Registering the same native token again is accepted.",
        [],
        register_dedup
    ),
];

async fn vapid(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let v = ctx.get(paths::PUSH_VAPID_KEY, Some(&a.token)).await?.ok()?;
    let key = s(&v, "vapid_public_key")?;
    ensure!(
        !key.is_empty()
            && key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'='),
        "vapid_public_key {key:?} is not base64url"
    );
    Ok(())
}

async fn subscribe(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let sub = json!({"endpoint": "https://push.example.invalid/send/abc", "keys": {"p256dh": P256DH, "auth": AUTH}});
    ctx.post(paths::PUSH_SUBSCRIBE, Some(&a.token), &sub)
        .await?
        .ok()?;
    Ok(())
}

async fn register_native(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    ctx.post(
        paths::PUSH_REGISTER,
        Some(&a.token),
        &json!({"token": "fcm-token-1", "platform": "android"}),
    )
    .await?
    .ok()?;
    ctx.post(
        paths::PUSH_REGISTER,
        Some(&a.token),
        &json!({"device_token": "apns-token-1", "platform": "ios"}),
    )
    .await?
    .ok()?;
    Ok(())
}

async fn disable(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    ctx.req(Method::POST, paths::PUSH_DISABLE, Some(&a.token), None)
        .await?
        .ok()?;
    ctx.req(Method::POST, paths::PUSH_DISABLE, Some(&a.token), None)
        .await?
        .ok()?;
    Ok(())
}

async fn needs_jwt(ctx: &mut Ctx) -> CaseResult {
    let sub = json!({"endpoint": "https://push.example.invalid/x", "keys": {"p256dh": P256DH, "auth": AUTH}});
    ctx.post(paths::PUSH_SUBSCRIBE, None, &sub)
        .await?
        .expect_error(401)?;
    Ok(())
}

async fn register_dedup(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    for _ in 0..2 {
        ctx.post(
            paths::PUSH_REGISTER,
            Some(&a.token),
            &json!({"token": "fcm-same", "platform": "android"}),
        )
        .await?
        .ok()?;
    }
    Ok(())
}
