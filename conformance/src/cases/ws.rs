//! WS: the WebSocket transport (PROTOCOL §2.1-2.3, §3.1, §9; ARCHITECTURE "Decisions in wire").

use http::HeaderName;
use seam::net::WsRequest;
use serde_json::{Value, json};
use wire::http::paths;

use super::online;
use crate::ctx::{Ctx, s};
use crate::model::{Case, CaseResult, Failure};
use crate::{case, ensure};

/// Cases of this area.
pub const CASES: &[Case] = &[
    case!(
        "WS-001",
        Must,
        "PROTOCOL §2.1",
        "`/ws?user_uuid=<uuid>&ticket=<ticket>` upgrades to a WebSocket.",
        [],
        ticket_upgrade
    ),
    case!(
        "WS-002",
        Must,
        "PROTOCOL §2.1, §9",
        "`/ws?user_uuid=<uuid>&token=<jwt>` upgrades to a WebSocket (Android, web fallback).",
        [],
        token_upgrade
    ),
    case!(
        "WS-003",
        Must,
        "SPEC §Authentication 3",
        "An upgrade without credentials is refused.",
        [],
        no_credentials
    ),
    case!(
        "WS-004",
        Must,
        "PROTOCOL §2.1",
        "An upgrade with an invalid token is refused.",
        [],
        bad_token
    ),
    case!(
        "WS-005",
        Must,
        "PROTOCOL §2.3",
        "`ping` with or without crypto_v is accepted; no client expects a reply, and the socket keeps working.",
        [],
        ping
    ),
    case!(
        "WS-006",
        Must,
        "PROTOCOL §9",
        "Unknown frame types do not close the socket.",
        [],
        unknown_frame
    ),
    case!(
        "WS-007",
        Must,
        "PROTOCOL §9",
        "Unknown extra fields in client frames are tolerated.",
        [],
        extra_fields
    ),
    case!(
        "WS-008",
        Must,
        "PROTOCOL §2.2",
        "`sync` is accepted with `crypto_v: 1` and without it (iOS).",
        [],
        sync_variants
    ),
    case!(
        "WS-009",
        Should,
        "PROTOCOL §9 (tolerate); ARCHITECTURE wire: error frame",
        "Text that is not JSON does not close the socket (our relay also answers an `error` frame `{type, error, message}`).",
        [],
        not_json
    ),
    case!(
        "WS-010",
        Should,
        "PROTOCOL §3.1 message (legacy); ARCHITECTURE wire: legacy message",
        "The legacy iOS `message` frame is not relayed and the socket stays open (our relay answers error UNSUPPORTED_FRAME).",
        [],
        legacy_message
    ),
    case!(
        "WS-011",
        Should,
        "PROTOCOL §2.1, §9",
        "The iOS form `?uuid=<uuid>` with `Sec-WebSocket-Protocol: bearer,<jwt>` upgrades and the relay echoes the `bearer` sub-protocol.",
        [],
        ios_subprotocol
    ),
    case!(
        "WS-012",
        Should,
        "SPEC §Limits (message size limits: not shown); wire::limits MAX_FRAME_BYTES",
        "A frame above the relay's limit (--max-frame-bytes; our relay: 64 KiB) is refused: never acked, never forwarded (an error frame, a close or silence; our relay: an error frame or a close).",
        [],
        oversized_frame
    ),
    case!(
        "WS-013",
        Must,
        "PROTOCOL §2.1",
        "A ticket is bound to its account: presenting it with another account's user_uuid is refused.",
        [],
        ticket_other_uuid
    ),
    case!(
        "WS-014",
        Must,
        "PROTOCOL §2.3",
        "The relay tolerates 2 s of silence on an open socket (idle timeout must exceed the 30 s heartbeat).",
        [],
        idle_tolerated
    ),
];

async fn ticket_upgrade(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    ctx.connect(&a, "A").await.map_err(Failure::checked)?;
    Ok(())
}

async fn token_upgrade(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let path = format!("{}?user_uuid={}&token={}", paths::WS, a.uuid, a.token);
    let mut ws = ctx
        .open_ws(WsRequest::new(path.clone()), &path, "A")
        .await
        .map_err(|e| format!("refused: {e}"))?;
    ws.send(&json!({"type": "sync", "crypto_v": 1})).await?;
    ensure!(
        !ws.closes().await,
        "the relay closed the token-authenticated socket"
    );
    Ok(())
}

async fn no_credentials(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let path = format!("{}?user_uuid={}", paths::WS, a.uuid);
    let r = ctx
        .open_ws(WsRequest::new(path.clone()), &path, "anon")
        .await;
    ensure!(
        r.is_err(),
        "an upgrade without ticket or token was accepted"
    );
    Ok(())
}

async fn bad_token(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let path = format!("{}?user_uuid={}&token=not.a.jwt", paths::WS, a.uuid);
    let r = ctx
        .open_ws(WsRequest::new(path.clone()), &path, "bad")
        .await;
    ensure!(r.is_err(), "an upgrade with an invalid token was accepted");
    Ok(())
}

async fn ping(ctx: &mut Ctx) -> CaseResult {
    let (p, mut wa, mut wb) = online(ctx).await?;
    wa.send(&json!({"type": "ping"})).await?;
    wa.send(&json!({"type": "ping", "crypto_v": 1})).await?;
    let (id, m) = ctx.msg(&p.key, &p.b, &p.conv, "after ping");
    wa.send_msg(&id, &m).await?;
    wb.expect("msg").await?;
    wa.expect_none("error").await
}

async fn unknown_frame(ctx: &mut Ctx) -> CaseResult {
    let (p, mut wa, mut wb) = online(ctx).await?;
    wa.send(&json!({"type": "frobnicate", "x": 1})).await?;
    let (id, m) = ctx.msg(&p.key, &p.b, &p.conv, "after unknown");
    wa.send_msg(&id, &m).await?;
    wb.expect("msg").await?;
    Ok(())
}

async fn extra_fields(ctx: &mut Ctx) -> CaseResult {
    let (p, mut wa, mut wb) = online(ctx).await?;
    let (id, mut m) = ctx.msg(&p.key, &p.b, &p.conv, "extra");
    m["nonce"] = Value::from("vestigial");
    m["client_hint"] = json!({"v": 3});
    wa.send_msg(&id, &m).await?;
    wb.expect("msg").await?;
    Ok(())
}

async fn sync_variants(ctx: &mut Ctx) -> CaseResult {
    let (p, mut wa, mut wb) = online(ctx).await?;
    wa.send(&json!({"type": "sync"})).await?;
    wb.send(&json!({"type": "sync", "crypto_v": 1})).await?;
    let (id, m) = ctx.msg(&p.key, &p.b, &p.conv, "after syncs");
    wa.send_msg(&id, &m).await?;
    wb.expect("msg").await?;
    wa.expect_none("error").await
}

async fn not_json(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let mut ws = ctx.connect(&a, "A").await?;
    ws.send_text("{not json").await?;
    if ctx.reference() {
        let e = ws.expect("error").await?;
        crate::ctx::check_error_body(&e, ctx.profile()).map_err(|r| format!("error frame: {r}"))?;
    }
    ws.send(&json!({"type": "ping"})).await?;
    ensure!(
        !ws.closes().await,
        "the socket closed after a malformed frame"
    );
    Ok(())
}

async fn legacy_message(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let mut ws = ctx.connect(&a, "A").await?;
    ws.expect_error_for(&json!({"type": "message", "id": "m1", "from": "", "to": "x", "conv_id": "c", "text": "AAAA", "time": 1}), Some("UNSUPPORTED_FRAME")).await?;
    ensure!(!ws.closes().await, "the socket closed after a legacy frame");
    Ok(())
}

async fn ios_subprotocol(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let path = format!("{}?uuid={}", paths::WS, a.uuid);
    let req = WsRequest::new(path.clone()).header(
        HeaderName::from_static("sec-websocket-protocol"),
        format!("bearer,{}", a.token),
    );
    let mut ws = ctx
        .open_ws(req, &path, "ios")
        .await
        .map_err(|e| format!("refused: {e}"))?;
    ws.send(&json!({"type": "ping"})).await?;
    ensure!(!ws.closes().await, "the relay closed the iOS-style socket");
    Ok(())
}

async fn oversized_frame(ctx: &mut Ctx) -> CaseResult {
    let Some(limit) = ctx.limits().max_frame_bytes else {
        return Err(Failure::Skip(
            "the documents give no frame size limit (SPEC §Limits: \"Message size limits: not shown\"); give yours with --max-frame-bytes N".into(),
        ));
    };
    let (p, mut wa, mut wb) = online(ctx).await?;
    let id = ctx.uuid();
    let big = "A".repeat(limit + 16);
    let m = json!({"type": "msg", "id": id, "to": p.b.alias, "conv_id": p.conv, "crypto_v": 1, "payload": big});
    if ctx.reference() {
        wa.send(&m).await?;
        let refused = match wa.expect("error").await {
            Ok(_) => true,
            Err(_) => wa.is_closed(),
        };
        ensure!(
            refused,
            "an oversized frame got neither an error frame nor a close"
        );
    } else {
        // The documents give no error frame: a close, an error frame of any shape or silence
        // is a refusal, as long as the frame is neither acked nor forwarded.
        let refusal = wa.refuses(&m).await?;
        if refusal.frame().is_none() && !wa.is_closed() {
            let wanted = id.clone();
            wa.expect_none_where("ack", move |v| v["id"] == wanted.as_str())
                .await?;
        }
    }
    wb.expect_none("msg").await
}

async fn ticket_other_uuid(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let b = ctx.account().await?;
    let v = ctx
        .post(paths::WS_TICKET, Some(&a.token), &json!({}))
        .await?
        .ok()?;
    let t = s(&v, "ticket")?.to_owned();
    ctx.transcript.secret(&t);
    let path = format!("{}?user_uuid={}&ticket={t}", paths::WS, b.uuid);
    let r = ctx.open_ws(WsRequest::new(path.clone()), &path, "B?").await;
    ensure!(r.is_err(), "A's ticket opened a socket as B");
    Ok(())
}

async fn idle_tolerated(ctx: &mut Ctx) -> CaseResult {
    let (p, mut wa, mut wb) = online(ctx).await?;
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let (id, m) = ctx.msg(&p.key, &p.b, &p.conv, "after idle");
    wa.send_msg(&id, &m).await?;
    wb.expect("msg").await?;
    Ok(())
}
