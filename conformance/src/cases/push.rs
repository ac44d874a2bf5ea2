//! PUSH: push registration (SPEC §What the service does 9; PROTOCOL §1.7 P1-P4) and, with
//! the push probe, delivery (RFC 8030 / 8291 / 8292).

use http::Method;
use serde_json::json;
use wire::http::paths;

use standins::pushcrypto::{b64url_decode, is_uncompressed_p256_point};

use crate::ctx::{Ctx, s};
use crate::model::{Case, CaseResult, Failure};
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
        "Push subscription needs a JWT (a 4xx without; our relay: 401).",
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
    case!(
        "PUSH-007",
        Must,
        "PROTOCOL §1.7 P1; W3C Push API `applicationServerKey`; RFC 8292 §3.2",
        "The VAPID key is base64url of an uncompressed P-256 point (65 bytes, 0x04, on the curve), so a browser's `pushManager.subscribe` accepts it.",
        [],
        vapid_is_a_p256_point
    ),
    case!(
        "PUSH-008",
        Must,
        "PROTOCOL §1.7, §1.10 (payload); RFC 8030 §5; RFC 8291; RFC 8292",
        "A message to an offline recipient with a Web Push subscription reaches its push service as one RFC 8291 aes128gcm body that decrypts to exactly `{\"type\":\"new_msg\"}`, with a VAPID JWT for the push service's origin signed by the served key, and `TTL`; a burst makes one push.",
        [PushProbe],
        probe_delivery
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

/// The endpoint the registration cases subscribe: a name that resolves nowhere (RFC 6761).
const TEST_ENDPOINT: &str = "https://push.example.invalid/send/abc";

async fn subscribe(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let sub = json!({"endpoint": TEST_ENDPOINT, "keys": {"p256dh": P256DH, "auth": AUTH}});
    let resp = ctx
        .post(paths::PUSH_SUBSCRIBE, Some(&a.token), &sub)
        .await?;
    if resp.status == 400 {
        // A relay may check where it will connect (a push endpoint is a URL a client chose),
        // and the test endpoint resolves nowhere: that refusal says nothing about the route.
        let body = resp.expect_client_error()?;
        let code = crate::ctx::error_code(&body).map_or("", |(_, code)| code);
        return Err(Failure::Skip(format!(
            "the relay refused the test endpoint {TEST_ENDPOINT} ({code}): it checks push \
             destinations, so this case needs the relay's test mode or an endpoint it accepts"
        )));
    }
    resp.ok()?;
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
    let sub = json!({"endpoint": TEST_ENDPOINT, "keys": {"p256dh": P256DH, "auth": AUTH}});
    ctx.post(paths::PUSH_SUBSCRIBE, None, &sub)
        .await?
        .refused(401)?;
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

/// Decodes the key the way the reference web client does (`urlBase64ToUint8Array`: pad with
/// `=`, `-`→`+`, `_`→`/`, base64) and checks what browsers check.
async fn vapid_is_a_p256_point(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let v = ctx.get(paths::PUSH_VAPID_KEY, Some(&a.token)).await?.ok()?;
    let key = s(&v, "vapid_public_key")?;
    let Some(raw) = b64url_decode(key) else {
        crate::fail!("vapid_public_key {key:?} is not base64url");
    };
    ensure!(
        is_uncompressed_p256_point(&raw),
        "vapid_public_key decodes to {} bytes{}: a browser's applicationServerKey must be a 65-byte uncompressed P-256 point (0x04 ‖ x ‖ y) on the curve",
        raw.len(),
        raw.first()
            .map(|b| format!(" starting {b:#04x}"))
            .unwrap_or_default()
    );
    Ok(())
}

async fn probe_delivery(ctx: &mut Ctx) -> CaseResult {
    let probe = ctx.push_probe()?;
    let p = ctx.pair().await?;
    let served = ctx
        .get(paths::PUSH_VAPID_KEY, Some(&p.b.token))
        .await?
        .ok()?;
    let served = s(&served, "vapid_public_key")?
        .trim_end_matches('=')
        .to_owned();
    let sub = probe.service.subscribe(&probe.base);
    ctx.note(&format!("probe subscription {}", sub.id));
    let body = json!({"endpoint": sub.endpoint, "keys": {"p256dh": sub.p256dh, "auth": sub.auth}});
    ctx.post(paths::PUSH_SUBSCRIBE, Some(&p.b.token), &body)
        .await?
        .ok()?;
    // b never connects: offline. Three messages in a burst.
    let mut wa = ctx.connect(&p.a, "A").await?;
    for text in ["one", "two", "three"] {
        let (id, m) = ctx.msg(&p.key, &p.b, &p.conv, text);
        wa.send_msg(&id, &m).await?;
    }
    let mine = |service: &standins::WebPushService| {
        service
            .received()
            .into_iter()
            .filter(|r| r.subscription == sub.id)
            .collect::<Vec<_>>()
    };
    let deadline = ctx.wait();
    let step = std::time::Duration::from_millis(20);
    let mut waited = std::time::Duration::ZERO;
    while mine(&probe.service).is_empty() {
        ensure!(
            waited < deadline,
            "no push reached the probe within {} ms",
            deadline.as_millis()
        );
        tokio::time::sleep(step).await;
        waited += step;
    }
    // Anything else of the burst would arrive within the quiet period.
    tokio::time::sleep(ctx.quiet()).await;
    let got = mine(&probe.service);
    ensure!(
        got.len() == 1,
        "a burst of 3 messages made {} pushes",
        got.len()
    );
    let push = &got[0];
    ensure!(
        push.content_encoding.as_deref() == Some("aes128gcm"),
        "Content-Encoding is {:?}, not aes128gcm",
        push.content_encoding
    );
    match &push.plaintext {
        Ok(plain) => ensure!(
            plain.as_slice() == br#"{"type":"new_msg"}"#,
            "the push decrypts to {:?}, not exactly {{\"type\":\"new_msg\"}}",
            String::from_utf8_lossy(plain)
        ),
        Err(e) => crate::fail!("the push body does not decrypt: {e}"),
    }
    match &push.vapid {
        Ok(claims) => ensure!(
            claims.key == served,
            "the VAPID JWT is signed by {:?}, not the served key {served:?}",
            claims.key
        ),
        Err(e) => crate::fail!("VAPID: {e}"),
    }
    ensure!(
        push.ttl
            .as_deref()
            .is_some_and(|t| t.parse::<u64>().is_ok()),
        "TTL header missing or not a number: {:?}",
        push.ttl
    );
    Ok(())
}
