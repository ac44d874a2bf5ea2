//! PAY: the payment processor's confirmation and its effects (SPEC §States Payment order,
//! §Vanity alias binding, §Events payment_confirmed; ARCHITECTURE wire: payment webhook).

use serde_json::{Value, json};
use wire::http::paths;

use crate::ctx::{Account, Ctx, s};
use crate::model::{Case, CaseResult, Failure};
use crate::{case, ensure};

/// Cases of this area.
pub const CASES: &[Case] = &[
    case!(
        "PAY-001",
        Must,
        "SPEC §What the service does 7; §Events payment_confirmed",
        "When the payment worker confirms a vanity order, the buyer gets `payment_confirmed {order_id, ref_id: <alias_id>}` over the WebSocket.",
        [PaymentWebhook],
        confirmed_frame
    ),
    case!(
        "PAY-002",
        Must,
        "SPEC §States Payment order (pending → confirmed)",
        "After confirmation the order status is `confirmed`.",
        [PaymentWebhook],
        status_confirmed
    ),
    case!(
        "PAY-003",
        Must,
        "SPEC §Vanity alias binding",
        "bind(order_id) of the caller's confirmed order returns `{alias_id}` and the alias becomes the account's alias_id.",
        [PaymentWebhook],
        bind_confirmed
    ),
    case!(
        "PAY-004",
        Should,
        "SPEC §Vanity alias binding; PROTOCOL §7 D-PWA-1 (paid but unbound)",
        "Binding the same confirmed order again by its owner is idempotent: 200 with the same alias_id, so a lost bind response can be retried.",
        [PaymentWebhook],
        bind_twice
    ),
    case!(
        "PAY-005",
        Should,
        "conformance README Hooks (payment webhook); ARCHITECTURE wire: payment webhook",
        "A webhook whose signature does not verify is refused with 401 and the order stays pending.",
        [PaymentWebhook],
        bad_signature
    ),
    case!(
        "PAY-006",
        Should,
        "ARCHITECTURE wire: payment webhook (replay carries the same payment_id)",
        "A replayed webhook does not confirm twice: exactly one payment_confirmed frame.",
        [PaymentWebhook],
        replay_once
    ),
    case!(
        "PAY-007",
        Should,
        "SPEC §States Payment order (payment received)",
        "A partial payment does not confirm the order.",
        [PaymentWebhook],
        partial
    ),
    case!(
        "PAY-008",
        Must,
        "SPEC §Vanity alias binding (belongs to the caller)",
        "Another account cannot bind a confirmed order (404).",
        [PaymentWebhook],
        bind_by_other
    ),
];

async fn confirmed_order(
    ctx: &mut Ctx,
) -> Result<(Account, crate::ctx::Ws, Value, String), Failure> {
    let a = ctx.account().await?;
    let mut ws = ctx.connect(&a, "buyer").await?;
    let item = ctx.free_alias().await?;
    let order = ctx
        .post(
            paths::VANITY_PURCHASE,
            Some(&a.token),
            &json!({"alias_id": item["alias_id"]}),
        )
        .await?
        .ok()?;
    let id = s(&order, "order_id")?.to_owned();
    let price = order["price_usdt"].as_f64().unwrap_or(0.0) as u64;
    ctx.pay(&id, "finished", price).await?.ok()?;
    let f = ws.expect("payment_confirmed").await?;
    ensure!(
        s(&f, "order_id")? == id && f["ref_id"] == item["alias_id"],
        "payment_confirmed {f} does not name order {id} and alias {}",
        item["alias_id"]
    );
    Ok((a, ws, item, id))
}

/// The frame names the order and, as `ref_id`, the alias (checked in [`confirmed_order`]).
async fn confirmed_frame(ctx: &mut Ctx) -> CaseResult {
    confirmed_order(ctx).await?;
    Ok(())
}

async fn status_confirmed(ctx: &mut Ctx) -> CaseResult {
    let (_a, _ws, _item, id) = confirmed_order(ctx).await?;
    let st = ctx
        .get(&format!("/api/v1/vanity/order/{id}/status"), None)
        .await?
        .ok()?;
    ensure!(st["status"] == "confirmed", "status is {}", st["status"]);
    Ok(())
}

async fn bind_confirmed(ctx: &mut Ctx) -> CaseResult {
    let (a, _ws, item, id) = confirmed_order(ctx).await?;
    let v = ctx
        .post(paths::VANITY_BIND, Some(&a.token), &json!({"order_id": id}))
        .await?
        .ok()?;
    ensure!(v["alias_id"] == item["alias_id"], "bind returned {v}");
    let alias = s(&item, "alias_id")?.to_owned();
    let other = ctx.account().await?;
    let u = ctx
        .get(&format!("/api/v1/users/{alias}"), Some(&other.token))
        .await?
        .ok()?;
    ensure!(
        s(&u, "ed25519_public_key")? == a.ed_b64(),
        "the bought alias does not resolve to the buyer"
    );
    Ok(())
}

async fn bind_twice(ctx: &mut Ctx) -> CaseResult {
    let (a, _ws, _item, id) = confirmed_order(ctx).await?;
    let first = ctx
        .post(paths::VANITY_BIND, Some(&a.token), &json!({"order_id": id}))
        .await?
        .ok()?;
    let again = ctx
        .post(paths::VANITY_BIND, Some(&a.token), &json!({"order_id": id}))
        .await?
        .ok()?;
    ensure!(
        s(&first, "alias_id")? == s(&again, "alias_id")?,
        "a repeated bind answered another alias: {} then {}",
        first["alias_id"],
        again["alias_id"]
    );
    Ok(())
}

async fn bad_signature(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let item = ctx.free_alias().await?;
    let order = ctx
        .post(
            paths::VANITY_PURCHASE,
            Some(&a.token),
            &json!({"alias_id": item["alias_id"]}),
        )
        .await?
        .ok()?;
    let id = s(&order, "order_id")?.to_owned();
    let mut wrong = ctx.payment_secret()?;
    wrong.push(b'x');
    let body = json!({"payment_id": "forged", "order_id": id, "payment_status": "finished", "paid_usdt": 1_000_000}).to_string();
    ctx.pay_raw(&wrong, body.into_bytes())
        .await?
        .expect_error(401)?;
    let st = ctx
        .get(&format!("/api/v1/vanity/order/{id}/status"), None)
        .await?
        .ok()?;
    ensure!(
        st["status"] == "pending",
        "a forged webhook changed the order to {}",
        st["status"]
    );
    Ok(())
}

async fn replay_once(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let mut ws = ctx.connect(&a, "buyer").await?;
    let item = ctx.free_alias().await?;
    let order = ctx
        .post(
            paths::VANITY_PURCHASE,
            Some(&a.token),
            &json!({"alias_id": item["alias_id"]}),
        )
        .await?
        .ok()?;
    let id = s(&order, "order_id")?.to_owned();
    let price = order["price_usdt"].as_f64().unwrap_or(0.0) as u64;
    let secret = ctx.payment_secret()?;
    let body = json!({"payment_id": format!("replay-{id}"), "order_id": id, "payment_status": "finished", "paid_usdt": price}).to_string();
    ctx.pay_raw(&secret, body.clone().into_bytes())
        .await?
        .ok()?;
    ctx.pay_raw(&secret, body.into_bytes()).await?.ok()?;
    ws.expect("payment_confirmed").await?;
    ws.expect_none("payment_confirmed").await
}

async fn partial(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let item = ctx.free_alias().await?;
    let order = ctx
        .post(
            paths::VANITY_PURCHASE,
            Some(&a.token),
            &json!({"alias_id": item["alias_id"]}),
        )
        .await?
        .ok()?;
    let id = s(&order, "order_id")?.to_owned();
    ctx.pay(&id, "partially_paid", 1).await?.ok()?;
    let st = ctx
        .get(&format!("/api/v1/vanity/order/{id}/status"), None)
        .await?
        .ok()?;
    ensure!(
        st["status"] == "pending",
        "a partial payment moved the order to {}",
        st["status"]
    );
    Ok(())
}

async fn bind_by_other(ctx: &mut Ctx) -> CaseResult {
    let (_a, _ws, _item, id) = confirmed_order(ctx).await?;
    let b = ctx.account().await?;
    ctx.post(paths::VANITY_BIND, Some(&b.token), &json!({"order_id": id}))
        .await?
        .expect_error(404)?;
    Ok(())
}
