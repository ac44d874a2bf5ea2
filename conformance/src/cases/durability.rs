//! DURABILITY: what the relay acknowledged survives `kill -9` and a restart on the same data
//! directory (SPEC §What the service does 4, 5, 7, §Vanity alias binding; PROTOCOL §9). The
//! runner starts the relay from `--relay-cmd` and kills it between a write and its read, at
//! once after the write was answered. Without `--relay-cmd` every case is skipped, saying how
//! to enable them.

use serde_json::{Value, json};
use wire::http::paths;

use crate::ctx::{Account, Ctx, s, u};
use crate::model::{Case, CaseResult, Failure};
use crate::{case, ensure, fail};

/// Cases of this area.
pub const CASES: &[Case] = &[
    case!(
        "DURABILITY-001",
        Must,
        "SPEC §What the service does 4; PROTOCOL §9",
        "A message acknowledged (`ack`) for an offline recipient is kept across kill -9 and restart: the recipient's next sync replays it with the acked seq.",
        [RelayProcess],
        acked_message
    ),
    case!(
        "DURABILITY-002",
        Must,
        "SPEC §What the service does 4; PROTOCOL §9",
        "Per-conversation seq survives kill -9: a message acked after the restart gets a seq above every seq acked before it (no seq is reused), and the recipient gets both ids.",
        [RelayProcess],
        seq_counter
    ),
    case!(
        "DURABILITY-003",
        Must,
        "SPEC §What the service does 5; PROTOCOL §1.2 F1, F3",
        "An accepted friendship survives kill -9: both F1 lists show it `accepted` with the same conversation_id, and messages flow in it.",
        [RelayProcess],
        friendship
    ),
    case!(
        "DURABILITY-004",
        Must,
        "SPEC §States Payment order; §What the service does 7",
        "A paid order (webhook answered 2xx) survives kill -9: its status is `confirmed` after the restart and its buyer can bind it.",
        [RelayProcess, PaymentWebhook],
        paid_order
    ),
    case!(
        "DURABILITY-005",
        Must,
        "SPEC §Vanity alias binding",
        "A binding survives kill -9: after the restart the bought alias still resolves to the buyer (F5).",
        [RelayProcess, PaymentWebhook],
        binding
    ),
    case!(
        "DURABILITY-006",
        Should,
        "SPEC §Events read; PROTOCOL §9",
        "A read receipt the relay took for an offline sender survives kill -9: the sender's next sync gets it.",
        [RelayProcess],
        receipt
    ),
    case!(
        "DURABILITY-007",
        Must,
        "SPEC §What the service does 4; PROTOCOL §9",
        "Nothing acknowledged is lost over three kills: every message acked between them reaches the recipient, with one seq per id and one id per seq.",
        [RelayProcess],
        repeated_kills
    ),
    case!(
        "DURABILITY-008",
        Must,
        "PROTOCOL §1.1 A5, §1.1.3, §9",
        "What was used stays used across kill -9: a WebSocket ticket redeemed before the kill opens no socket after the restart (single use), and a token a newer login revoked before the kill is refused after it.",
        [RelayProcess],
        used_credentials
    ),
    case!(
        "DURABILITY-009",
        Must,
        "PROTOCOL §9 (id as idempotency key), §5.2 (TS outbox), §7 D-TS-2",
        "A message id stays an idempotency key across kill -9: the same `msg` re-sent after the restart (as the web client re-sends every message on reconnect) is acked with its first seq, and the recipient gets it once.",
        [RelayProcess],
        resend_after_restart
    ),
];

/// A fresh token after a restart (tickets and challenges may be memory only). The account
/// was registered before the kill, so a refusal is a durability failure, not setup.
async fn back(ctx: &mut Ctx, acct: &mut Account) -> CaseResult {
    acct.token = ctx
        .login(&acct.uuid, &acct.identity)
        .await
        .map_err(|f| match f {
            Failure::Fail(r) | Failure::Error(r) => Failure::Fail(format!(
                "an account registered before the kill cannot log in: {r}"
            )),
            skip => skip,
        })?;
    Ok(())
}

async fn acked_message(ctx: &mut Ctx) -> CaseResult {
    let mut p = ctx.pair().await?;
    let mut wa = ctx.connect(&p.a, "A").await?;
    let (id, m) = ctx.msg(&p.key, &p.b, &p.conv, "survives");
    let seq = u(&wa.send_msg(&id, &m).await?, "seq")?;
    drop(wa);
    ctx.restart_relay().await?;
    back(ctx, &mut p.b).await?;
    b_receives(
        ctx,
        &p.b,
        &id,
        seq,
        "before the kill, and B's sync after the restart does not replay it: an acknowledged message was lost",
    )
    .await?;
    Ok(())
}

async fn resend_after_restart(ctx: &mut Ctx) -> CaseResult {
    let mut p = ctx.pair().await?;
    let mut wa = ctx.connect(&p.a, "A").await?;
    let (id, m) = ctx.msg(&p.key, &p.b, &p.conv, "once");
    let first = u(&wa.send_msg(&id, &m).await?, "seq")?;
    drop(wa);
    ctx.restart_relay().await?;
    back(ctx, &mut p.a).await?;
    back(ctx, &mut p.b).await?;
    let mut wa = ctx.connect(&p.a, "A2").await?;
    let again = u(&wa.send_msg(&id, &m).await?, "seq")?;
    ensure!(
        again == first,
        "message {id} was acked with seq {first} before the kill and, re-sent after the restart, with seq {again}: the relay forgot the id and stored the message twice"
    );
    let mut wb = b_receives(
        ctx,
        &p.b,
        &id,
        first,
        "before the kill and again after it, and B's sync does not deliver it",
    )
    .await?;
    wb.expect_none_where("msg", |v| v["id"] == id.as_str())
        .await
}

/// B's WebSocket after the restart, once its sync delivered message `id` with `seq`; `lost`
/// finishes the failure when it does not ("message {id} was acked with seq {seq} {lost}").
async fn b_receives(
    ctx: &mut Ctx,
    b: &Account,
    id: &str,
    seq: u64,
    lost: &str,
) -> Result<crate::ctx::Ws, Failure> {
    let mut wb = ctx.connect(b, "B").await?;
    let wanted = id.to_owned();
    let d = wb
        .expect_where("msg", move |v| v["id"] == wanted.as_str())
        .await
        .map_err(|_| Failure::Fail(format!("message {id} was acked with seq {seq} {lost}")))?;
    ensure!(
        u(&d, "seq")? == seq,
        "message {id} was acked with seq {seq} and delivered after the restart with seq {}",
        d["seq"]
    );
    Ok(wb)
}

async fn seq_counter(ctx: &mut Ctx) -> CaseResult {
    let mut p = ctx.pair().await?;
    let mut wa = ctx.connect(&p.a, "A").await?;
    let (id1, m1) = ctx.msg(&p.key, &p.b, &p.conv, "before");
    let s1 = u(&wa.send_msg(&id1, &m1).await?, "seq")?;
    drop(wa);
    ctx.restart_relay().await?;
    back(ctx, &mut p.a).await?;
    back(ctx, &mut p.b).await?;
    let mut wa = ctx.connect(&p.a, "A2").await?;
    let (id2, m2) = ctx.msg(&p.key, &p.b, &p.conv, "after");
    let s2 = u(&wa.send_msg(&id2, &m2).await?, "seq")?;
    ensure!(
        s2 > s1,
        "seq reused: {id1} was acked with seq {s1} before the kill, {id2} with seq {s2} after the restart"
    );
    let mut wb = ctx.connect(&p.b, "B").await?;
    let mut seen = std::collections::BTreeMap::new();
    for _ in 0..2 {
        let d = wb.expect("msg").await?;
        seen.insert(s(&d, "id")?.to_owned(), u(&d, "seq")?);
    }
    for (id, seq) in [(&id1, s1), (&id2, s2)] {
        ensure!(
            seen.get(id.as_str()) == Some(&seq),
            "B got {seen:?}, not {id} with seq {seq}"
        );
    }
    Ok(())
}

async fn friendship(ctx: &mut Ctx) -> CaseResult {
    let mut p = ctx.pair().await?;
    ctx.restart_relay().await?;
    back(ctx, &mut p.a).await?;
    back(ctx, &mut p.b).await?;
    for (who, other) in [(&p.a, &p.b.alias), (&p.b, &p.a.alias)] {
        let Some(e) = ctx.friend_entry(who, other).await? else {
            fail!("the friendship accepted before the kill is gone from F1 after the restart");
        };
        ensure!(
            e["status"] == "accepted" && e["conversation_id"] == p.conv.as_str(),
            "after the restart F1 shows {e}, not accepted in {}",
            p.conv
        );
    }
    let mut wa = ctx.connect(&p.a, "A").await?;
    let mut wb = ctx.connect(&p.b, "B").await?;
    let (id, m) = ctx.msg(&p.key, &p.b, &p.conv, "still friends");
    wa.send_msg(&id, &m).await?;
    let wanted = id.clone();
    wb.expect_where("msg", move |v| v["id"] == wanted.as_str())
        .await?;
    Ok(())
}

/// A vanity order of a fresh account, paid (webhook answered 2xx): `(buyer, alias, order)`.
async fn paid(ctx: &mut Ctx) -> Result<(Account, String, String), Failure> {
    let a = ctx.account().await?;
    let item = ctx.free_alias().await?;
    let alias = s(&item, "alias_id")?.to_owned();
    let order = ctx
        .post(
            paths::VANITY_PURCHASE,
            Some(&a.token),
            &json!({"alias_id": alias}),
        )
        .await?
        .ok()
        .map_err(|f| f.in_setup("a vanity purchase (V2)"))?;
    let id = s(&order, "order_id")?.to_owned();
    let price = order["price_usdt"].as_f64().unwrap_or(0.0) as u64;
    ctx.pay(&id, "finished", price)
        .await?
        .ok()
        .map_err(|f| f.in_setup("paying the order (webhook)"))?;
    Ok((a, alias, id))
}

async fn paid_order(ctx: &mut Ctx) -> CaseResult {
    let (mut a, alias, id) = paid(ctx).await?;
    ctx.restart_relay().await?;
    let st = ctx
        .get(&format!("/api/v1/vanity/order/{id}/status"), None)
        .await?
        .ok()?;
    ensure!(
        st["status"] == "confirmed",
        "order {id} was paid (webhook 2xx) before the kill and is `{}` after the restart",
        st["status"]
    );
    back(ctx, &mut a).await?;
    let v = ctx
        .post(paths::VANITY_BIND, Some(&a.token), &json!({"order_id": id}))
        .await?
        .ok()?;
    ensure!(v["alias_id"] == alias.as_str(), "bind answered {v}");
    Ok(())
}

async fn binding(ctx: &mut Ctx) -> CaseResult {
    let (a, alias, id) = paid(ctx).await?;
    // The webhook may confirm asynchronously: wait for the status before binding.
    let mut confirmed = false;
    for _ in 0..50 {
        let st = ctx
            .get(&format!("/api/v1/vanity/order/{id}/status"), None)
            .await?
            .ok()?;
        if st["status"] == "confirmed" {
            confirmed = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    ensure!(confirmed, "the paid order {id} is not confirmed");
    let v = ctx
        .post(paths::VANITY_BIND, Some(&a.token), &json!({"order_id": id}))
        .await?
        .ok()
        .map_err(|f| f.in_setup("binding the paid order (V3)"))?;
    ensure!(v["alias_id"] == alias.as_str(), "bind answered {v}");
    ctx.restart_relay().await?;
    let mut other = ctx.account().await?;
    back(ctx, &mut other).await?;
    let u = ctx
        .get(&format!("/api/v1/users/{alias}"), Some(&other.token))
        .await?;
    ensure!(
        u.status == 200,
        "alias {alias} was bound before the kill; after the restart its lookup answers {}",
        u.status
    );
    ensure!(
        u.json()?.get("ed25519_public_key").and_then(Value::as_str) == Some(a.ed_b64().as_str()),
        "after the restart alias {alias} no longer resolves to its buyer"
    );
    Ok(())
}

async fn receipt(ctx: &mut Ctx) -> CaseResult {
    let (mut p, mut wa, mut wb) = super::online(ctx).await?;
    let (id, m) = ctx.msg(&p.key, &p.b, &p.conv, "read me");
    wa.send_msg(&id, &m).await?;
    let seq = u(&wb.expect("msg").await?, "seq")?;
    drop(wa);
    tokio::time::sleep(ctx.quiet()).await;
    wb.send(
        &json!({"type": "read", "conv_id": p.conv, "seq": seq, "to": p.a.alias, "crypto_v": 1}),
    )
    .await?;
    // No frame acknowledges a receipt: give the relay the quiet period to take it.
    tokio::time::sleep(ctx.quiet()).await;
    drop(wb);
    ctx.restart_relay().await?;
    back(ctx, &mut p.a).await?;
    let mut wa = ctx.connect(&p.a, "A2").await?;
    let r = wa.expect("read").await.map_err(|_| {
        Failure::Fail(format!(
            "the read receipt (seq {seq}) B sent for offline A before the kill did not reach A after the restart"
        ))
    })?;
    ensure!(
        u(&r, "seq")? == seq,
        "the kept receipt has seq {}",
        r["seq"]
    );
    Ok(())
}

async fn repeated_kills(ctx: &mut Ctx) -> CaseResult {
    let mut p = ctx.pair().await?;
    let mut acked: Vec<(String, u64)> = Vec::new();
    for round in 0..3 {
        let mut wa = ctx.connect(&p.a, &format!("A{round}")).await?;
        for i in 0..3 {
            let (id, m) = ctx.msg(&p.key, &p.b, &p.conv, &format!("round {round} #{i}"));
            let seq = u(&wa.send_msg(&id, &m).await?, "seq")?;
            acked.push((id, seq));
        }
        drop(wa);
        ctx.restart_relay().await?;
        back(ctx, &mut p.a).await?;
    }
    back(ctx, &mut p.b).await?;
    let mut wb = ctx.connect(&p.b, "B").await?;
    let mut got: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
    for _ in 0..acked.len() {
        let Ok(d) = wb.expect("msg").await else { break };
        got.insert(s(&d, "id")?.to_owned(), u(&d, "seq")?);
    }
    let lost: Vec<&(String, u64)> = acked
        .iter()
        .filter(|(id, _)| !got.contains_key(id))
        .collect();
    ensure!(
        lost.is_empty(),
        "ack-lost: {} of {} acked messages never reached B after the kills; first {} (acked seq {})",
        lost.len(),
        acked.len(),
        lost[0].0,
        lost[0].1
    );
    let mut by_seq: std::collections::BTreeMap<u64, &str> = std::collections::BTreeMap::new();
    for (id, seq) in &acked {
        if let Some(other) = by_seq.insert(*seq, id) {
            fail!("seq-reused: seq {seq} was acked for {other} and again for {id}");
        }
    }
    Ok(())
}

/// A ticket redeemed and a token revoked, both before a kill, presented after the restart.
async fn used_credentials(ctx: &mut Ctx) -> CaseResult {
    let mut a = ctx.account().await?;
    let revoked = a.token.clone();
    back(ctx, &mut a).await?;
    let v = ctx
        .post(paths::WS_TICKET, Some(&a.token), &json!({}))
        .await?
        .ok()
        .map_err(|f| f.in_setup("asking for a ticket"))?;
    let ticket = s(&v, "ticket")?.to_owned();
    ctx.transcript.secret(&ticket);
    let path = format!("{}?user_uuid={}&ticket={ticket}", paths::WS, a.uuid);
    let first = ctx
        .open_ws(seam::net::WsRequest::new(path.clone()), &path, "first")
        .await
        .map_err(|e| {
            Failure::Error(format!(
                "setup: the first upgrade with a fresh ticket failed: {e}"
            ))
        })?;
    drop(first);
    let after = ctx.restart_relay_timed().await?;
    // A ticket lives 30 s (PROTOCOL A5): past that a refusal says nothing of single use.
    if after >= std::time::Duration::from_secs(25) {
        return Err(Failure::Error(format!(
            "the restart took {} s, too close to the ticket's 30 s life to judge its single use",
            after.as_secs()
        )));
    }
    let again = ctx
        .open_ws(seam::net::WsRequest::new(path.clone()), &path, "again")
        .await;
    ensure!(
        again.is_err(),
        "a ticket redeemed before the kill opened a second socket after the restart"
    );
    let r = ctx.get(paths::FRIENDS, Some(&revoked)).await?;
    ensure!(
        !(200..300).contains(&r.status),
        "a token revoked by a newer login before the kill was accepted after the restart ({})",
        r.status
    );
    // The account is still there: the refusals above are not a relay that lost it.
    back(ctx, &mut a).await?;
    ctx.get(paths::FRIENDS, Some(&a.token)).await?.ok()?;
    Ok(())
}
