//! TRADE: channel sale, channel buy, quota (SPEC §Endpoints, §States "Payment order", §Errors,
//! §Limits; PROTOCOL §1.4 CH9-CH11).

use http::Method;
use serde_json::{Value, json};
use wire::http::paths;

use crate::ctx::{Ctx, Kind, fields, s, u};
use crate::model::{Case, CaseResult, Failure};
use crate::{case, ensure};

/// Cases of this area.
pub const CASES: &[Case] = &[
    case!(
        "TRADE-001",
        Must,
        "SPEC §Endpoints list channel for sale; PROTOCOL §1.4 CH9",
        "The owner lists a channel with POST /api/v1/vanity/list-channel `{channel_id, price_usdt}`; its detail then shows for_sale true and sale_price.",
        [],
        list
    ),
    case!(
        "TRADE-002",
        Must,
        "SPEC §Endpoints list channel for sale (caller must be the owner)",
        "A non-owner cannot list a channel for sale (4xx).",
        [],
        list_non_owner
    ),
    case!(
        "TRADE-003",
        Must,
        "SPEC §Channels ChannelTradeOrder; PROTOCOL §1.4 CH10",
        "Buying a listed channel returns ChannelTradeOrder `{order_id, price_usdt, pay_to, expired_at}` at the listed price.",
        [],
        buy
    ),
    case!(
        "TRADE-004",
        Must,
        "SPEC §States Payment order (channel buy)",
        "A channel buy order starts `pending` (order status).",
        [],
        buy_pending
    ),
    case!(
        "TRADE-005",
        Must,
        "SPEC §Limits channel sale price",
        "The sale price is an integer number of USDT: a fractional price is refused (a 4xx; our relay: 400).",
        [],
        fractional_price
    ),
    case!(
        "TRADE-006",
        Should,
        "PROTOCOL §1.4 CH9 (iOS)",
        "PUT /api/v1/channels/{id}/forsale `{price_usdt}` lists the channel too.",
        [],
        list_ios
    ),
    case!(
        "TRADE-007",
        Should,
        "SPEC §States Payment order (channel buy: for sale)",
        "Buying a channel that is not listed for sale is refused with a 4xx error body.",
        [],
        buy_not_for_sale
    ),
    case!(
        "TRADE-008",
        Must,
        "SPEC §Endpoints buy channel quota; §Limits",
        "POST /api/v1/channels/quota/buy returns a ChannelTradeOrder at the fixed price of 5 USDT.",
        [],
        quota_order
    ),
    case!(
        "TRADE-009",
        Must,
        "SPEC §States Payment order (confirmed); §Events payment_confirmed",
        "When the channel order is paid, the buyer gets `payment_confirmed {order_id, ref_id: <channel id>}` and ownership is transferred: the buyer's ChannelInfo says role `owner`, the seller's no longer does, and the buyer may post. Under the reference profile the seller's post is refused too (owner-only posting is a client-side rule in PROTOCOL §1.4 CH7).",
        [PaymentWebhook],
        buy_confirmed_transfers
    ),
    case!(
        "TRADE-010",
        Must,
        "SPEC §Endpoints buy channel quota (+1 seat)",
        "A paid quota order adds one channel-creation seat: the buyer can create one more channel after hitting the quota.",
        [PaymentWebhook],
        quota_paid_adds_seat
    ),
    case!(
        "TRADE-011",
        Should,
        "SPEC §Endpoints list channel (optimistic-lock CAS)",
        "Relisting with a new price updates sale_price.",
        [],
        relist
    ),
];

async fn listed(ctx: &mut Ctx, price: u64) -> Result<(crate::ctx::Account, String), Failure> {
    let owner = ctx.account().await?;
    let id = ctx.create_channel(&owner, true).await?;
    ctx.list_for_sale(&owner, &id, price).await?.ok()?;
    Ok((owner, id))
}

async fn list(ctx: &mut Ctx) -> CaseResult {
    let (owner, id) = listed(ctx, 42).await?;
    let v = ctx
        .get(&format!("/api/v1/channels/{id}"), Some(&owner.token))
        .await?
        .ok()?;
    ensure!(
        v.get("for_sale") == Some(&Value::Bool(true)),
        "for_sale is {:?}",
        v.get("for_sale")
    );
    ensure!(
        v.get("sale_price").and_then(Value::as_u64) == Some(42),
        "sale_price is {:?}",
        v.get("sale_price")
    );
    Ok(())
}

async fn list_non_owner(ctx: &mut Ctx) -> CaseResult {
    let owner = ctx.account().await?;
    let other = ctx.account().await?;
    let id = ctx.create_channel(&owner, true).await?;
    ctx.list_for_sale(&other, &id, 10)
        .await?
        .expect_client_error()?;
    Ok(())
}

async fn buy(ctx: &mut Ctx) -> CaseResult {
    let (_owner, id) = listed(ctx, 17).await?;
    let buyer = ctx.account().await?;
    let v = ctx
        .post(
            &format!("/api/v1/channels/{id}/buy"),
            Some(&buyer.token),
            &json!({}),
        )
        .await?
        .ok()?;
    fields(
        "ChannelTradeOrder",
        &v,
        &[
            ("order_id", Kind::NonEmpty),
            ("price_usdt", Kind::Num),
            ("pay_to", Kind::NonEmpty),
            ("expired_at", Kind::Iso),
        ],
    )?;
    ensure!(
        v["price_usdt"].as_f64() == Some(17.0),
        "price_usdt {} is not the listed 17",
        v["price_usdt"]
    );
    Ok(())
}

async fn buy_pending(ctx: &mut Ctx) -> CaseResult {
    let (_owner, id) = listed(ctx, 9).await?;
    let buyer = ctx.account().await?;
    let v = ctx
        .post(
            &format!("/api/v1/channels/{id}/buy"),
            Some(&buyer.token),
            &json!({}),
        )
        .await?
        .ok()?;
    let order = s(&v, "order_id")?.to_owned();
    let st = ctx
        .get(&format!("/api/v1/vanity/order/{order}/status"), None)
        .await?
        .ok()?;
    ensure!(st["status"] == "pending", "status is {}", st["status"]);
    Ok(())
}

async fn fractional_price(ctx: &mut Ctx) -> CaseResult {
    let owner = ctx.account().await?;
    let id = ctx.create_channel(&owner, true).await?;
    ctx.post(
        paths::LIST_CHANNEL,
        Some(&owner.token),
        &json!({"channel_id": id, "price_usdt": 9.5}),
    )
    .await?
    .refused(400)?;
    Ok(())
}

async fn list_ios(ctx: &mut Ctx) -> CaseResult {
    let owner = ctx.account().await?;
    let id = ctx.create_channel(&owner, true).await?;
    ctx.req(
        Method::PUT,
        &format!("/api/v1/channels/{id}/forsale"),
        Some(&owner.token),
        Some(&json!({"price_usdt": 30})),
    )
    .await?
    .ok()?;
    let v = ctx
        .get(&format!("/api/v1/channels/{id}"), Some(&owner.token))
        .await?
        .ok()?;
    ensure!(
        v.get("sale_price").and_then(Value::as_u64) == Some(30),
        "sale_price is {:?}",
        v.get("sale_price")
    );
    Ok(())
}

async fn buy_not_for_sale(ctx: &mut Ctx) -> CaseResult {
    let owner = ctx.account().await?;
    let buyer = ctx.account().await?;
    let id = ctx.create_channel(&owner, true).await?;
    ctx.post(
        &format!("/api/v1/channels/{id}/buy"),
        Some(&buyer.token),
        &json!({}),
    )
    .await?
    .expect_client_error()?;
    Ok(())
}

async fn quota_order(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let v = ctx
        .post(paths::CHANNEL_QUOTA_BUY, Some(&a.token), &json!({}))
        .await?
        .ok()?;
    fields(
        "ChannelTradeOrder",
        &v,
        &[
            ("order_id", Kind::NonEmpty),
            ("price_usdt", Kind::Num),
            ("pay_to", Kind::NonEmpty),
            ("expired_at", Kind::Iso),
        ],
    )?;
    ensure!(
        v["price_usdt"].as_f64() == Some(5.0),
        "quota price {} is not 5",
        v["price_usdt"]
    );
    Ok(())
}

async fn buy_confirmed_transfers(ctx: &mut Ctx) -> CaseResult {
    let (owner, id) = listed(ctx, 11).await?;
    let buyer = ctx.account().await?;
    let mut ws = ctx.connect(&buyer, "buyer").await?;
    let v = ctx
        .post(
            &format!("/api/v1/channels/{id}/buy"),
            Some(&buyer.token),
            &json!({}),
        )
        .await?
        .ok()?;
    let order = s(&v, "order_id")?.to_owned();
    let price = v["price_usdt"].as_f64().unwrap_or(0.0) as u64;
    ctx.pay(&order, "finished", price).await?.ok()?;
    let f = ws.expect("payment_confirmed").await?;
    ensure!(
        s(&f, "order_id")? == order && s(&f, "ref_id")? == id,
        "payment_confirmed {f}"
    );
    let path = format!("/api/v1/channels/{id}/posts");
    ctx.post(
        &path,
        Some(&buyer.token),
        &json!({"type": "text", "content": "new owner"}),
    )
    .await?
    .ok()?;
    let info = format!("/api/v1/channels/{id}");
    let role = |v: &Value| v.get("role").and_then(Value::as_str).map(str::to_owned);
    let buyers = ctx.get(&info, Some(&buyer.token)).await?.ok()?;
    ensure!(
        role(&buyers).as_deref() == Some("owner"),
        "after the paid transfer the buyer's ChannelInfo has role {:?}: {buyers}",
        role(&buyers)
    );
    let sellers = ctx.get(&info, Some(&owner.token)).await?.ok()?;
    ensure!(
        role(&sellers).as_deref() != Some("owner"),
        "after the paid transfer the seller's ChannelInfo still has role owner: {sellers}"
    );
    if ctx.reference() {
        ctx.post(
            &path,
            Some(&owner.token),
            &json!({"type": "text", "content": "old owner"}),
        )
        .await?
        .refused(403)?;
    }
    Ok(())
}

async fn quota_paid_adds_seat(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let mut hit = false;
    for _ in 0..20 {
        let r = ctx
            .post(
                paths::CHANNELS,
                Some(&a.token),
                &json!({"name": "seat", "description": "", "is_public": false}),
            )
            .await?;
        if !(200..300).contains(&r.status) {
            hit = true;
            break;
        }
    }
    if !hit {
        return Err(Failure::Skip(
            "20 channels created without hitting a quota".into(),
        ));
    }
    let v = ctx
        .post(paths::CHANNEL_QUOTA_BUY, Some(&a.token), &json!({}))
        .await?
        .ok()?;
    let order = s(&v, "order_id")?.to_owned();
    ctx.pay(&order, "finished", u(&v, "price_usdt").unwrap_or(5))
        .await?
        .ok()?;
    ctx.post(
        paths::CHANNELS,
        Some(&a.token),
        &json!({"name": "bought seat", "description": "", "is_public": false}),
    )
    .await?
    .ok()?;
    ctx.post(
        paths::CHANNELS,
        Some(&a.token),
        &json!({"name": "one too many", "description": "", "is_public": false}),
    )
    .await?
    .expect_client_error()?;
    Ok(())
}

async fn relist(ctx: &mut Ctx) -> CaseResult {
    let (owner, id) = listed(ctx, 20).await?;
    ctx.list_for_sale(&owner, &id, 25).await?.ok()?;
    let v = ctx
        .get(&format!("/api/v1/channels/{id}"), Some(&owner.token))
        .await?
        .ok()?;
    ensure!(
        v.get("sale_price").and_then(Value::as_u64) == Some(25),
        "sale_price is {:?} after relisting at 25",
        v.get("sale_price")
    );
    Ok(())
}
