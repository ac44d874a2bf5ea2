//! VANITY: search, purchase, hold, reserve, status, bind refusals (SPEC §Vanity aliases,
//! §Endpoints, §States, §Errors, §Limits; PROTOCOL §1.5).

use serde_json::{Value, json};
use wire::http::paths;

use crate::ctx::{Account, Ctx, Kind, fields, s};
use crate::model::{Case, CaseResult, Failure};
use crate::{case, ensure, fail};

/// Cases of this area.
pub const CASES: &[Case] = &[
    case!(
        "VANITY-001",
        Must,
        "SPEC §Endpoints vanity/search; PROTOCOL §1.5 V1",
        "GET /api/v1/vanity/search without q (no JWT) returns featured VanityItems `{alias_id, price_usdt, tier, is_featured}` in ascending price order.",
        [],
        featured
    ),
    case!(
        "VANITY-002",
        Must,
        "SPEC §Endpoints vanity/search",
        "With q, every returned alias_id starts with q.",
        [],
        prefix
    ),
    case!(
        "VANITY-003",
        Must,
        "SPEC §Vanity PurchaseOrder; PROTOCOL §1.5 V2",
        "POST /api/v1/vanity/purchase `{alias_id}` returns PurchaseOrder `{order_id, alias_id, price_usdt, payment_url, expired_at}`.",
        [],
        purchase
    ),
    case!(
        "VANITY-004",
        Must,
        "SPEC §States Payment order; §Limits alias hold",
        "A purchased alias is held: another account's purchase of it answers 409 while the order is pending.",
        [],
        held
    ),
    case!(
        "VANITY-005",
        Must,
        "SPEC §Errors vanity purchase 404",
        "Purchasing an alias that does not exist answers 404.",
        [],
        purchase_unknown
    ),
    case!(
        "VANITY-006",
        Must,
        "SPEC §Authentication 8",
        "vanity purchase needs a JWT (401 without).",
        [],
        purchase_needs_jwt
    ),
    case!(
        "VANITY-007",
        Must,
        "SPEC §Endpoints vanity/reserve; PROTOCOL §1.5 V4",
        "The deprecated POST /api/v1/vanity/reserve (no JWT) returns ReserveOrder `{order_id, alias_id, price_usdt, pay_to, expired_at}`.",
        [],
        reserve
    ),
    case!(
        "VANITY-008",
        Must,
        "SPEC §Endpoints order status; PROTOCOL §1.5 V5",
        "GET /api/v1/vanity/order/{id}/status (no JWT) returns `{status: \"pending\", alias_id}` for a new order.",
        [],
        status_pending
    ),
    case!(
        "VANITY-009",
        Must,
        "SPEC §Vanity alias binding; §Errors bind 409",
        "Binding an order that is not confirmed answers 409.",
        [],
        bind_unconfirmed
    ),
    case!(
        "VANITY-010",
        Must,
        "SPEC §Errors bind 404",
        "Binding another account's order answers 404.",
        [],
        bind_others
    ),
    case!(
        "VANITY-011",
        Must,
        "SPEC §Errors bind 404",
        "Binding an order that does not exist answers 404.",
        [],
        bind_unknown
    ),
    case!(
        "VANITY-012",
        Must,
        "SPEC §States Payment order; §Limits alias hold 15 minutes",
        "After the 15-minute hold the alias is free again and the unpaid order is `expired`.",
        [ClockAdvance],
        hold_expires
    ),
    case!(
        "VANITY-013",
        Must,
        "SPEC §Limits alias hold 15 minutes",
        "14 minutes into the hold the alias is still held (409 for another buyer).",
        [ClockAdvance],
        hold_lasts
    ),
    case!(
        "VANITY-014",
        Should,
        "SPEC §Vanity VanityItem (prices in real time)",
        "The purchase price equals the price search shows for the alias.",
        [],
        price_matches_search
    ),
    case!(
        "VANITY-015",
        Should,
        "PROTOCOL §1.5 V2 (Android)",
        "PurchaseOrder also carries Android's `amount_usdt` equal to price_usdt.",
        [],
        amount_usdt
    ),
];

async fn buy(ctx: &mut Ctx, acct: &Account) -> Result<(Value, Value), Failure> {
    let item = ctx.free_alias().await?;
    let order = ctx
        .post(
            paths::VANITY_PURCHASE,
            Some(&acct.token),
            &json!({"alias_id": item["alias_id"]}),
        )
        .await?
        .ok()?;
    Ok((item, order))
}

async fn featured(ctx: &mut Ctx) -> CaseResult {
    let v = ctx.get(paths::VANITY_SEARCH, None).await?.ok()?;
    let Some(items) = v.as_array() else {
        fail!("V1 is not an array: {v}")
    };
    ensure!(!items.is_empty(), "the featured list is empty");
    let mut last = f64::MIN;
    for it in items {
        fields(
            "VanityItem",
            it,
            &[
                ("alias_id", Kind::NonEmpty),
                ("price_usdt", Kind::Num),
                ("tier", Kind::NonEmpty),
                ("is_featured", Kind::Bool),
            ],
        )?;
        ensure!(
            it["is_featured"] == true,
            "a featured-list item is not featured: {it}"
        );
        ensure!(
            ["top", "premium", "standard"].contains(&s(it, "tier")?),
            "tier {} not top/premium/standard",
            it["tier"]
        );
        let p = it["price_usdt"].as_f64().unwrap_or(0.0);
        ensure!(
            p.total_cmp(&last).is_ge(),
            "featured list not ascending by price at {it}"
        );
        last = p;
    }
    Ok(())
}

async fn prefix(ctx: &mut Ctx) -> CaseResult {
    for q in ["8", "1"] {
        let v = ctx
            .get(&format!("{}?q={q}", paths::VANITY_SEARCH), None)
            .await?
            .ok()?;
        for it in v.as_array().into_iter().flatten() {
            ensure!(
                s(it, "alias_id")?.starts_with(q),
                "{} does not start with {q}",
                it["alias_id"]
            );
        }
    }
    Ok(())
}

async fn purchase(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let (item, order) = buy(ctx, &a).await?;
    fields(
        "PurchaseOrder",
        &order,
        &[
            ("order_id", Kind::NonEmpty),
            ("alias_id", Kind::NonEmpty),
            ("price_usdt", Kind::Num),
            ("payment_url", Kind::NonEmpty),
            ("expired_at", Kind::Iso),
        ],
    )?;
    ensure!(order["alias_id"] == item["alias_id"], "order alias differs");
    Ok(())
}

async fn held(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let b = ctx.account().await?;
    let (item, _) = buy(ctx, &a).await?;
    ctx.post(
        paths::VANITY_PURCHASE,
        Some(&b.token),
        &json!({"alias_id": item["alias_id"]}),
    )
    .await?
    .expect_error(409)?;
    Ok(())
}

async fn purchase_unknown(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let w = ctx.word();
    ctx.post(
        paths::VANITY_PURCHASE,
        Some(&a.token),
        &json!({"alias_id": format!("nosuch_{w}")}),
    )
    .await?
    .expect_error(404)?;
    Ok(())
}

async fn purchase_needs_jwt(ctx: &mut Ctx) -> CaseResult {
    let item = ctx.free_alias().await?;
    ctx.post(
        paths::VANITY_PURCHASE,
        None,
        &json!({"alias_id": item["alias_id"]}),
    )
    .await?
    .expect_error(401)?;
    Ok(())
}

async fn reserve(ctx: &mut Ctx) -> CaseResult {
    let item = ctx.free_alias().await?;
    let v = ctx
        .post(
            paths::VANITY_RESERVE,
            None,
            &json!({"alias_id": item["alias_id"]}),
        )
        .await?
        .ok()?;
    fields(
        "ReserveOrder",
        &v,
        &[
            ("order_id", Kind::NonEmpty),
            ("alias_id", Kind::NonEmpty),
            ("price_usdt", Kind::Num),
            ("pay_to", Kind::NonEmpty),
            ("expired_at", Kind::Iso),
        ],
    )
}

async fn status_pending(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let (item, order) = buy(ctx, &a).await?;
    let id = s(&order, "order_id")?.to_owned();
    let st = ctx
        .get(&format!("/api/v1/vanity/order/{id}/status"), None)
        .await?
        .ok()?;
    fields(
        "OrderStatus",
        &st,
        &[("status", Kind::NonEmpty), ("alias_id", Kind::Str)],
    )?;
    ensure!(
        st["status"] == "pending" && st["alias_id"] == item["alias_id"],
        "order status {st}"
    );
    Ok(())
}

async fn bind_unconfirmed(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let (_, order) = buy(ctx, &a).await?;
    ctx.post(
        paths::VANITY_BIND,
        Some(&a.token),
        &json!({"order_id": order["order_id"]}),
    )
    .await?
    .expect_error(409)?;
    Ok(())
}

async fn bind_others(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let b = ctx.account().await?;
    let (_, order) = buy(ctx, &a).await?;
    ctx.post(
        paths::VANITY_BIND,
        Some(&b.token),
        &json!({"order_id": order["order_id"]}),
    )
    .await?
    .expect_error(404)?;
    Ok(())
}

pub(super) async fn bind_unknown(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let id = ctx.uuid();
    ctx.post(paths::VANITY_BIND, Some(&a.token), &json!({"order_id": id}))
        .await?
        .expect_error(404)?;
    Ok(())
}

async fn hold_expires(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let b = ctx.account().await?;
    let (item, order) = buy(ctx, &a).await?;
    ctx.advance_clock(15 * 60 * 1000 + 1000).await?;
    let id = s(&order, "order_id")?.to_owned();
    let st = ctx
        .get(&format!("/api/v1/vanity/order/{id}/status"), None)
        .await?
        .ok()?;
    ensure!(
        st["status"] == "expired",
        "after 15 min the order is {}",
        st["status"]
    );
    let b = ctx
        .login(&b.uuid, &b.identity)
        .await
        .map(|t| Account { token: t, ..b })?;
    ctx.post(
        paths::VANITY_PURCHASE,
        Some(&b.token),
        &json!({"alias_id": item["alias_id"]}),
    )
    .await?
    .ok()?;
    Ok(())
}

async fn hold_lasts(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let b = ctx.account().await?;
    let (item, _) = buy(ctx, &a).await?;
    ctx.advance_clock(14 * 60 * 1000).await?;
    let b = ctx
        .login(&b.uuid, &b.identity)
        .await
        .map(|t| Account { token: t, ..b })?;
    ctx.post(
        paths::VANITY_PURCHASE,
        Some(&b.token),
        &json!({"alias_id": item["alias_id"]}),
    )
    .await?
    .expect_error(409)?;
    Ok(())
}

async fn price_matches_search(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let (item, order) = buy(ctx, &a).await?;
    ensure!(
        order["price_usdt"].as_f64() == item["price_usdt"].as_f64(),
        "order price {} differs from search price {}",
        order["price_usdt"],
        item["price_usdt"]
    );
    Ok(())
}

async fn amount_usdt(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let (_, order) = buy(ctx, &a).await?;
    ensure!(
        order.get("amount_usdt").and_then(Value::as_f64) == order["price_usdt"].as_f64(),
        "amount_usdt {:?} != price_usdt",
        order.get("amount_usdt")
    );
    Ok(())
}
