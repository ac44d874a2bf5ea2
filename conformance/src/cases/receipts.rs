//! RCPT: delivery and read receipts (SPEC §Events, §States "Message status"; PROTOCOL §3.1-3.2, §9).

use serde_json::{Value, json};

use super::online;
use crate::ctx::{Ctx, Pair, Ws, s, u};
use crate::model::{Case, CaseResult, Failure};
use crate::{case, ensure};

/// Cases of this area.
pub const CASES: &[Case] = &[
    case!(
        "RCPT-001",
        Must,
        "SPEC §Events delivered; PROTOCOL §9",
        "`delivered {conv_id, seq, to}` from the recipient is routed to the original sender as `delivered {conv_id, seq}`.",
        [],
        delivered_routed
    ),
    case!(
        "RCPT-002",
        Must,
        "SPEC §Events read; PROTOCOL §3.1, §9",
        "`read {conv_id, seq, to}` is routed to the original sender (`to`) as `read {conv_id, seq}`.",
        [],
        read_routed
    ),
    case!(
        "RCPT-003",
        Must,
        "PROTOCOL §9",
        "A routed receipt carries `from` = the authenticated receipt sender.",
        [],
        receipt_from
    ),
    case!(
        "RCPT-004",
        Should,
        "ARCHITECTURE One message step 6",
        "A receipt for an offline sender is kept and delivered on its next sync.",
        [],
        receipt_for_offline_sender
    ),
    case!(
        "RCPT-005",
        Should,
        "ARCHITECTURE wire: receipts without seq",
        "A receipt without `seq` is routed nowhere (our relay answers error BAD_FRAME).",
        [],
        receipt_without_seq
    ),
    case!(
        "RCPT-006",
        Must,
        "SPEC §What the service does 5",
        "A receipt addressed to a non-contact is not routed.",
        [],
        receipt_to_stranger
    ),
    case!(
        "RCPT-007",
        Should,
        "PROTOCOL §3.1 read",
        "`read.seq` is \"up to\": one read receipt for the highest seq covers earlier messages (a single frame is routed).",
        [],
        read_up_to
    ),
    case!(
        "RCPT-008",
        Must,
        "PROTOCOL §3.1 read, §9",
        "The relay forwards the seq the reader sent, never more: a `read` for an earlier message while a later one is unread reaches the sender with that earlier seq (a relay must not mark read what the reader never saw).",
        [],
        read_below_the_newest
    ),
    case!(
        "RCPT-009",
        Should,
        "ARCHITECTURE One message step 6",
        "A `delivered` receipt for an offline sender is kept and reaches it when it comes back, with the seq the recipient sent.",
        [],
        delivered_for_offline_sender
    ),
    case!(
        "RCPT-010",
        Must,
        "SPEC §Events delivered; PROTOCOL §3.1, §9",
        "The relay forwards receipts, it never makes one up: while the recipient is offline, the sender of a message waiting for it gets no `delivered` or `read` for it.",
        [],
        no_receipt_before_the_recipient_has_it
    ),
];

async fn sent_and_delivered(
    ctx: &mut Ctx,
    p: &Pair,
    wa: &mut Ws,
    wb: &mut Ws,
) -> Result<u64, Failure> {
    let (id, m) = ctx.msg(&p.key, &p.b, &p.conv, "receipt me");
    wa.send_msg(&id, &m).await?;
    u(&wb.expect("msg").await?, "seq")
}

async fn delivered_routed(ctx: &mut Ctx) -> CaseResult {
    let (p, mut wa, mut wb) = online(ctx).await?;
    let seq = sent_and_delivered(ctx, &p, &mut wa, &mut wb).await?;
    wb.send(&json!({"type": "delivered", "conv_id": p.conv, "seq": seq, "to": p.a.alias, "crypto_v": 1})).await?;
    let r = wa.expect("delivered").await?;
    ensure!(
        s(&r, "conv_id")? == p.conv && u(&r, "seq")? == seq,
        "receipt {r} does not name conv {} seq {seq}",
        p.conv
    );
    Ok(())
}

async fn read_routed(ctx: &mut Ctx) -> CaseResult {
    let (p, mut wa, mut wb) = online(ctx).await?;
    let seq = sent_and_delivered(ctx, &p, &mut wa, &mut wb).await?;
    wb.send(
        &json!({"type": "read", "conv_id": p.conv, "seq": seq, "to": p.a.alias, "crypto_v": 1}),
    )
    .await?;
    let r = wa.expect("read").await?;
    ensure!(
        s(&r, "conv_id")? == p.conv && u(&r, "seq")? == seq,
        "read receipt {r}"
    );
    Ok(())
}

async fn receipt_from(ctx: &mut Ctx) -> CaseResult {
    let (p, mut wa, mut wb) = online(ctx).await?;
    let seq = sent_and_delivered(ctx, &p, &mut wa, &mut wb).await?;
    wb.send(&json!({"type": "delivered", "conv_id": p.conv, "seq": seq, "to": p.a.alias, "from": "forged_sender", "crypto_v": 1})).await?;
    let r = wa.expect("delivered").await?;
    ensure!(
        r.get("from").and_then(Value::as_str) == Some(p.b.alias.as_str()),
        "receipt `from` is {:?}, not the authenticated {}",
        r.get("from"),
        p.b.alias
    );
    Ok(())
}

async fn receipt_for_offline_sender(ctx: &mut Ctx) -> CaseResult {
    let (p, mut wa, mut wb) = online(ctx).await?;
    let seq = sent_and_delivered(ctx, &p, &mut wa, &mut wb).await?;
    drop(wa);
    // Give the relay a moment to see the close before the receipt.
    tokio::time::sleep(ctx.quiet()).await;
    wb.send(
        &json!({"type": "read", "conv_id": p.conv, "seq": seq, "to": p.a.alias, "crypto_v": 1}),
    )
    .await?;
    tokio::time::sleep(ctx.quiet()).await;
    let mut wa2 = ctx.connect(&p.a, "A2").await?;
    let r = wa2.expect("read").await?;
    ensure!(u(&r, "seq")? == seq, "kept receipt has seq {}", r["seq"]);
    Ok(())
}

async fn receipt_without_seq(ctx: &mut Ctx) -> CaseResult {
    let (p, mut wa, mut wb) = online(ctx).await?;
    sent_and_delivered(ctx, &p, &mut wa, &mut wb).await?;
    let refusal = wb
        .refuses(&json!({"type": "delivered", "conv_id": p.conv, "to": p.a.alias, "crypto_v": 1}))
        .await?;
    wa.expect_none("delivered").await?;
    refusal.in_our_words(Some("BAD_FRAME"))
}

async fn receipt_to_stranger(ctx: &mut Ctx) -> CaseResult {
    let (p, mut wa, mut wb) = online(ctx).await?;
    let seq = sent_and_delivered(ctx, &p, &mut wa, &mut wb).await?;
    let c = ctx.account().await?;
    let mut wc = ctx.connect(&c, "C").await?;
    wb.send(&json!({"type": "read", "conv_id": p.conv, "seq": seq, "to": c.alias, "crypto_v": 1}))
        .await?;
    wc.expect_none("read").await
}

async fn read_up_to(ctx: &mut Ctx) -> CaseResult {
    let (p, mut wa, mut wb) = online(ctx).await?;
    sent_and_delivered(ctx, &p, &mut wa, &mut wb).await?;
    let last = sent_and_delivered(ctx, &p, &mut wa, &mut wb).await?;
    wb.send(
        &json!({"type": "read", "conv_id": p.conv, "seq": last, "to": p.a.alias, "crypto_v": 1}),
    )
    .await?;
    let r = wa.expect("read").await?;
    ensure!(u(&r, "seq")? == last, "read seq {} != {last}", r["seq"]);
    wa.expect_none("read").await
}

async fn read_below_the_newest(ctx: &mut Ctx) -> CaseResult {
    let (p, mut wa, mut wb) = online(ctx).await?;
    let first = sent_and_delivered(ctx, &p, &mut wa, &mut wb).await?;
    let newest = sent_and_delivered(ctx, &p, &mut wa, &mut wb).await?;
    ensure!(newest > first, "seqs {first} then {newest}");
    wb.send(
        &json!({"type": "read", "conv_id": p.conv, "seq": first, "to": p.a.alias, "crypto_v": 1}),
    )
    .await?;
    let r = wa.expect("read").await?;
    ensure!(
        u(&r, "seq")? == first,
        "the reader read up to seq {first}, the sender was told {} (newest {newest})",
        r["seq"]
    );
    wa.expect_none("read").await
}

async fn delivered_for_offline_sender(ctx: &mut Ctx) -> CaseResult {
    let (p, mut wa, mut wb) = online(ctx).await?;
    let seq = sent_and_delivered(ctx, &p, &mut wa, &mut wb).await?;
    drop(wa);
    // Give the relay a moment to see the close before the receipt.
    tokio::time::sleep(ctx.quiet()).await;
    wb.send(&json!({"type": "delivered", "conv_id": p.conv, "seq": seq, "to": p.a.alias, "crypto_v": 1}))
        .await?;
    tokio::time::sleep(ctx.quiet()).await;
    let mut wa2 = ctx.connect(&p.a, "A2").await?;
    let r = wa2.expect("delivered").await?;
    ensure!(
        s(&r, "conv_id")? == p.conv && u(&r, "seq")? == seq,
        "kept receipt {r}, expected conv {} seq {seq}",
        p.conv
    );
    Ok(())
}

async fn no_receipt_before_the_recipient_has_it(ctx: &mut Ctx) -> CaseResult {
    let (p, mut wa, wb) = online(ctx).await?;
    drop(wb);
    // Give the relay a moment to see the close before the message.
    tokio::time::sleep(ctx.quiet()).await;
    let (id, m) = ctx.msg(&p.key, &p.b, &p.conv, "held for B");
    wa.send_msg(&id, &m).await?;
    wa.expect_none("delivered").await?;
    wa.expect_none("read").await
}
