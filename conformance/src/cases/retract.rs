//! RETRACT: withdrawing one's own message (SPEC §Events retract, client `retractMessage`;
//! PROTOCOL §3.1-3.2, §9).

use serde_json::json;

use super::online;
use crate::ctx::{Ctx, s};
use crate::model::{Case, CaseResult};
use crate::{case, ensure};

/// Cases of this area.
pub const CASES: &[Case] = &[
    case!(
        "RETRACT-001",
        Must,
        "SPEC §Events retract; PROTOCOL §3.1-3.2",
        "The author's `retract {id, to, conv_id}` reaches the peer as `retract {id, from, conv_id}`.",
        [],
        author_retracts
    ),
    case!(
        "RETRACT-002",
        Must,
        "SPEC §Events retract (only own messages)",
        "A retract of a message by someone other than its author is refused and not forwarded (never acted on; an error frame of any shape or silence; our relay: an error frame).",
        [],
        non_author_refused
    ),
    case!(
        "RETRACT-003",
        Should,
        "SPEC §Endpoints retractMessage (no time limit)",
        "A retract is accepted one hour after the message was sent.",
        [ClockAdvance],
        no_time_limit
    ),
    case!(
        "RETRACT-004",
        Should,
        "PROTOCOL §9",
        "A retract for an offline peer is delivered after it syncs.",
        [],
        retract_offline
    ),
    case!(
        "RETRACT-005",
        Should,
        "SPEC §Events retract",
        "A retract of an unknown message id is refused and not forwarded.",
        [],
        unknown_id
    ),
    case!(
        "RETRACT-006",
        Must,
        "PROTOCOL §9",
        "The forwarded retract's `from` is the authenticated author even when the frame forges it.",
        [],
        forged_from
    ),
];

async fn author_retracts(ctx: &mut Ctx) -> CaseResult {
    let (p, mut wa, mut wb) = online(ctx).await?;
    let (id, m) = ctx.msg(&p.key, &p.b, &p.conv, "oops");
    wa.send_msg(&id, &m).await?;
    wb.expect("msg").await?;
    wa.send(
        &json!({"type": "retract", "id": id, "to": p.b.alias, "conv_id": p.conv, "crypto_v": 1}),
    )
    .await?;
    let r = wb.expect("retract").await?;
    ensure!(
        s(&r, "id")? == id && s(&r, "from")? == p.a.alias && s(&r, "conv_id")? == p.conv,
        "retract frame {r}"
    );
    Ok(())
}

async fn non_author_refused(ctx: &mut Ctx) -> CaseResult {
    let (p, mut wa, mut wb) = online(ctx).await?;
    let (id, m) = ctx.msg(&p.key, &p.b, &p.conv, "mine");
    wa.send_msg(&id, &m).await?;
    wb.expect("msg").await?;
    let refusal = wb
        .refuses(
            &json!({"type": "retract", "id": id, "to": p.a.alias, "conv_id": p.conv, "crypto_v": 1}),
        )
        .await?;
    wa.expect_none("retract").await?;
    refusal.in_our_words(None)
}

async fn no_time_limit(ctx: &mut Ctx) -> CaseResult {
    let (p, mut wa, mut wb) = online(ctx).await?;
    let (id, m) = ctx.msg(&p.key, &p.b, &p.conv, "old news");
    wa.send_msg(&id, &m).await?;
    wb.expect("msg").await?;
    drop((wa, wb));
    ctx.advance_clock(3_600_000).await?;
    // Sockets idle for an hour are gone, and tokens may have expired (lifetimes are the
    // relay's choice): both log in again, the author comes back and retracts.
    let mut p = p;
    for acct in [&mut p.a, &mut p.b] {
        acct.token = ctx
            .login(&acct.uuid, &acct.identity)
            .await
            .map_err(|f| f.in_setup("logging in again after the clock advance"))?;
    }
    let mut wa = ctx.connect(&p.a, "A2").await?;
    let mut wb = ctx.connect(&p.b, "B2").await?;
    wa.send(
        &json!({"type": "retract", "id": id, "to": p.b.alias, "conv_id": p.conv, "crypto_v": 1}),
    )
    .await?;
    let wanted = id.clone();
    wb.expect_where("retract", |v| v["id"] == wanted.as_str())
        .await?;
    Ok(())
}

async fn retract_offline(ctx: &mut Ctx) -> CaseResult {
    let p = ctx.pair().await?;
    let mut wa = ctx.connect(&p.a, "A").await?;
    let (id, m) = ctx.msg(&p.key, &p.b, &p.conv, "gone soon");
    wa.send_msg(&id, &m).await?;
    wa.send(
        &json!({"type": "retract", "id": id, "to": p.b.alias, "conv_id": p.conv, "crypto_v": 1}),
    )
    .await?;
    wa.expect_none("error").await?;
    let mut wb = ctx.connect(&p.b, "B").await?;
    let wanted = id.clone();
    wb.expect_where("retract", |v| v["id"] == wanted.as_str())
        .await?;
    Ok(())
}

async fn unknown_id(ctx: &mut Ctx) -> CaseResult {
    let (p, mut wa, mut wb) = online(ctx).await?;
    let id = ctx.uuid();
    let refusal = wa
        .refuses(
            &json!({"type": "retract", "id": id, "to": p.b.alias, "conv_id": p.conv, "crypto_v": 1}),
        )
        .await?;
    wb.expect_none("retract").await?;
    refusal.in_our_words(None)
}

async fn forged_from(ctx: &mut Ctx) -> CaseResult {
    let (p, mut wa, mut wb) = online(ctx).await?;
    let (id, m) = ctx.msg(&p.key, &p.b, &p.conv, "x");
    wa.send_msg(&id, &m).await?;
    wb.expect("msg").await?;
    wa.send(&json!({"type": "retract", "id": id, "to": p.b.alias, "conv_id": p.conv, "from": p.b.alias, "crypto_v": 1})).await?;
    let r = wb.expect("retract").await?;
    ensure!(
        s(&r, "from")? == p.a.alias,
        "forwarded retract `from` is {}, not the author",
        r["from"]
    );
    Ok(())
}
