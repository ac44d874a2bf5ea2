//! GOAWAY: one active login per account (SPEC §Authentication 12, §Events GOAWAY;
//! PROTOCOL §1.1.3, §2.1, §2.5, §9).

use serde_json::Value;

use crate::ctx::{Ctx, s};
use crate::model::{Case, CaseResult};
use crate::{case, ensure};

/// Cases of this area.
pub const CASES: &[Case] = &[
    case!(
        "GOAWAY-001",
        Must,
        "SPEC §Authentication 12; PROTOCOL §2.5, §9",
        "When another login of the same account connects, the older socket gets `goaway` with reason `new_device_login`.",
        [],
        second_login
    ),
    case!(
        "GOAWAY-002",
        Must,
        "PROTOCOL §2.5, §9",
        "The GOAWAY reason is at top level (`{type, reason}`), where every client reads it (the iOS client only there); under the reference profile also inside `payload`, as our relay sends it.",
        [],
        reason_both_places
    ),
    case!(
        "GOAWAY-003",
        Should,
        "PROTOCOL §2.5",
        "The relay closes the superseded socket after the GOAWAY.",
        [],
        closes_after
    ),
    case!(
        "GOAWAY-004",
        Must,
        "PROTOCOL §2.1",
        "A second socket with the same token replaces the first: the first is closed (with or without GOAWAY) and the second works.",
        [],
        same_token_replaces
    ),
    case!(
        "GOAWAY-005",
        Must,
        "PROTOCOL §1.1.3, §9",
        "A superseded token can no longer open a socket.",
        [],
        revoked_token_cannot_connect
    ),
];

async fn superseded(ctx: &mut Ctx) -> Result<(crate::ctx::Ws, Value), crate::model::Failure> {
    let mut a = ctx.account().await?;
    let mut old = ctx.connect(&a, "old").await?;
    a.token = ctx.login(&a.uuid, &a.identity).await?;
    let _new = ctx.connect(&a, "new").await?;
    let g = old.expect("goaway").await?;
    Ok((old, g))
}

async fn second_login(ctx: &mut Ctx) -> CaseResult {
    let (_old, g) = superseded(ctx).await?;
    let reason = g
        .get("payload")
        .and_then(|p| p.get("reason"))
        .or_else(|| g.get("reason"))
        .and_then(Value::as_str);
    ensure!(
        reason == Some("new_device_login"),
        "goaway reason {reason:?}, expected new_device_login"
    );
    Ok(())
}

async fn reason_both_places(ctx: &mut Ctx) -> CaseResult {
    let (_old, g) = superseded(ctx).await?;
    let top = s(&g, "reason")?;
    if !ctx.reference() {
        return Ok(());
    }
    let nested = g
        .get("payload")
        .and_then(|p| p.get("reason"))
        .and_then(Value::as_str);
    ensure!(
        nested == Some(top),
        "payload.reason {nested:?} differs from reason {top:?}"
    );
    Ok(())
}

async fn closes_after(ctx: &mut Ctx) -> CaseResult {
    let (mut old, _g) = superseded(ctx).await?;
    ensure!(old.closes().await, "the superseded socket stayed open");
    Ok(())
}

async fn same_token_replaces(ctx: &mut Ctx) -> CaseResult {
    let p = ctx.pair().await?;
    let mut first = ctx.connect(&p.a, "first").await?;
    let mut second = ctx.connect(&p.a, "second").await?;
    ensure!(
        first.closes().await,
        "the first socket of the same token stayed open"
    );
    let mut wb = ctx.connect(&p.b, "B").await?;
    let (id, m) = ctx.msg(&p.key, &p.b, &p.conv, "from the second socket");
    second.send_msg(&id, &m).await?;
    wb.expect("msg").await?;
    Ok(())
}

async fn revoked_token_cannot_connect(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let _newer = ctx.login(&a.uuid, &a.identity).await?;
    let path = format!("/ws?user_uuid={}&token={}", a.uuid, a.token);
    let r = ctx
        .open_ws(seam::net::WsRequest::new(path.clone()), &path, "revoked")
        .await;
    ensure!(r.is_err(), "a revoked token opened a socket");
    Ok(())
}
