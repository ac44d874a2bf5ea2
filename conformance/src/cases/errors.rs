//! ERR: every row of SPEC's Errors table, and the error body every non-2xx carries
//! (SPEC §Errors; PROTOCOL §0, §9; ARCHITECTURE wire: error body).

use http::Method;
use serde_json::json;
use wire::http::paths;

use crate::ctx::{Ctx, s};
use crate::model::{Case, CaseResult};
use crate::{case, ensure};

/// Cases of this area.
pub const CASES: &[Case] = &[
    case!(
        "ERR-001",
        Must,
        "SPEC §Errors register 409",
        "register: 409 when the public key is already registered; the body carries the existing account's `uuid` and `alias_id` (PROTOCOL §1.1; under the reference profile also our error code).",
        [],
        register_409
    ),
    case!(
        "ERR-002",
        Must,
        "SPEC §Errors vanity purchase 409",
        "vanity purchase: 409 when the alias is already held by another.",
        [],
        vanity_409
    ),
    case!(
        "ERR-003",
        Must,
        "SPEC §Errors vanity purchase 404",
        "vanity purchase: 404 when the alias does not exist.",
        [],
        vanity_404
    ),
    case!(
        "ERR-004",
        Must,
        "SPEC §Errors vanity bind 404",
        "vanity bind: 404 when the order does not exist or is not the caller's.",
        [],
        super::vanity::bind_unknown
    ),
    case!(
        "ERR-005",
        Must,
        "SPEC §Errors vanity bind 409",
        "vanity bind: 409 when the order is not confirmed.",
        [],
        bind_409
    ),
    case!(
        "ERR-006",
        Must,
        "SPEC §Errors channel buy 409",
        "channel buy: 409 when the channel was just bought by another (a pending order holds it).",
        [],
        channel_buy_409
    ),
    case!(
        "ERR-007",
        Must,
        "SPEC §Errors channel buy 404",
        "channel buy: 404 when the channel does not exist.",
        [],
        channel_buy_404
    ),
    case!(
        "ERR-008",
        Must,
        "SPEC §Errors channel buy 400",
        "channel buy: 400 when the buyer is the owner.",
        [],
        channel_buy_400
    ),
    case!(
        "ERR-009",
        Must,
        "SPEC §Errors buy quota 401",
        "buy quota: 401 when the caller is not logged in.",
        [],
        quota_401
    ),
    case!(
        "ERR-010",
        Should,
        "PROTOCOL §0 (the response body text matters), §9 (keep REST error bodies meaningful)",
        "An unknown route answers 404 (under the reference profile with our `{error, message}` body; the documents give neither the status nor the body).",
        [],
        unknown_route
    ),
    case!(
        "ERR-011",
        Should,
        "ARCHITECTURE wire: error codes",
        "A body that is not JSON is refused (4xx; our relay: 400) with an error body.",
        [],
        invalid_json
    ),
    case!(
        "ERR-012",
        Should,
        "ARCHITECTURE wire: METHOD_NOT_ALLOWED",
        "A known path with the wrong method answers 405 with an error body.",
        [],
        wrong_method
    ),
    case!(
        "ERR-013",
        Should,
        "PROTOCOL §0 (CORS any origin)",
        "Responses allow any origin (Access-Control-Allow-Origin).",
        [],
        cors
    ),
    case!(
        "ERR-014",
        Should,
        "SPEC §Limits (not shown); wire::limits MAX_JSON_BODY_BYTES",
        "A JSON body above the relay's limit (--max-body-bytes; our relay: 32 KiB) is refused (413 under the reference profile, a 4xx otherwise).",
        [],
        body_too_large
    ),
    case!(
        "ERR-015",
        Must,
        "PROTOCOL §1.2 F2 (409 or \"already exists\")",
        "A duplicate friend request is answered so the web client knows: 409 or a body text containing `already exists` (our relay: both).",
        [],
        duplicate_text
    ),
];

async fn register_409(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let body = ctx.register_body(&a.identity, "dup").await?;
    let v = ctx
        .post(paths::REGISTER, None, &body)
        .await?
        .expect_error(409)?;
    ensure!(
        s(&v, "uuid")? == a.uuid && s(&v, "alias_id")? == a.alias,
        "409 body lacks the existing account: {v}"
    );
    Ok(())
}

async fn vanity_409(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let b = ctx.account().await?;
    let item = ctx.free_alias().await?;
    ctx.post(
        paths::VANITY_PURCHASE,
        Some(&a.token),
        &json!({"alias_id": item["alias_id"]}),
    )
    .await?
    .ok()?;
    ctx.post(
        paths::VANITY_PURCHASE,
        Some(&b.token),
        &json!({"alias_id": item["alias_id"]}),
    )
    .await?
    .expect_error(409)?;
    Ok(())
}

async fn vanity_404(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    ctx.post(
        paths::VANITY_PURCHASE,
        Some(&a.token),
        &json!({"alias_id": "definitely_not_for_sale_zz"}),
    )
    .await?
    .expect_error(404)?;
    Ok(())
}

async fn bind_409(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let item = ctx.free_alias().await?;
    let o = ctx
        .post(
            paths::VANITY_PURCHASE,
            Some(&a.token),
            &json!({"alias_id": item["alias_id"]}),
        )
        .await?
        .ok()?;
    ctx.post(
        paths::VANITY_BIND,
        Some(&a.token),
        &json!({"order_id": o["order_id"]}),
    )
    .await?
    .expect_error(409)?;
    Ok(())
}

async fn channel_buy_409(ctx: &mut Ctx) -> CaseResult {
    let owner = ctx.account().await?;
    let b1 = ctx.account().await?;
    let b2 = ctx.account().await?;
    let id = ctx.create_channel(&owner, true).await?;
    ctx.list_for_sale(&owner, &id, 7).await?.ok()?;
    let path = format!("/api/v1/channels/{id}/buy");
    ctx.post(&path, Some(&b1.token), &json!({})).await?.ok()?;
    ctx.post(&path, Some(&b2.token), &json!({}))
        .await?
        .expect_error(409)?;
    Ok(())
}

async fn channel_buy_404(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let w = ctx.word();
    ctx.post(
        &format!("/api/v1/channels/nochan{w}/buy"),
        Some(&a.token),
        &json!({}),
    )
    .await?
    .expect_error(404)?;
    Ok(())
}

async fn channel_buy_400(ctx: &mut Ctx) -> CaseResult {
    let owner = ctx.account().await?;
    let id = ctx.create_channel(&owner, true).await?;
    ctx.list_for_sale(&owner, &id, 7).await?.ok()?;
    ctx.post(
        &format!("/api/v1/channels/{id}/buy"),
        Some(&owner.token),
        &json!({}),
    )
    .await?
    .expect_error(400)?;
    Ok(())
}

async fn quota_401(ctx: &mut Ctx) -> CaseResult {
    ctx.post(paths::CHANNEL_QUOTA_BUY, None, &json!({}))
        .await?
        .expect_error(401)?;
    Ok(())
}

async fn unknown_route(ctx: &mut Ctx) -> CaseResult {
    ctx.get("/api/v1/no/such/route", None)
        .await?
        .expect_error(404)?;
    Ok(())
}

async fn invalid_json(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    ctx.req_raw(
        Method::POST,
        paths::FRIEND_REQUEST,
        Some(&a.token),
        bytes::Bytes::from_static(b"{\"to_alias_id\":"),
        Some("application/json"),
        &[],
    )
    .await?
    .refused(400)?;
    Ok(())
}

async fn wrong_method(ctx: &mut Ctx) -> CaseResult {
    ctx.req(Method::DELETE, paths::REGISTER, None, None)
        .await?
        .expect_error(405)?;
    Ok(())
}

async fn cors(ctx: &mut Ctx) -> CaseResult {
    let origin = http::HeaderName::from_static("origin");
    let r = ctx
        .req_raw(
            Method::GET,
            paths::VANITY_SEARCH,
            None,
            bytes::Bytes::new(),
            None,
            &[(origin, "https://app.example".to_owned())],
        )
        .await?;
    let allow = r
        .headers
        .get("access-control-allow-origin")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    ensure!(
        allow == "*" || allow == "https://app.example",
        "Access-Control-Allow-Origin is {allow:?}"
    );
    Ok(())
}

async fn body_too_large(ctx: &mut Ctx) -> CaseResult {
    let Some(limit) = ctx.limits().max_body_bytes else {
        return Err(crate::model::Failure::Skip(
            "the documents give no request body limit (SPEC §Limits); give yours with --max-body-bytes N".into(),
        ));
    };
    let a = ctx.account().await?;
    let big = json!({"to_alias_id": "x".repeat(limit + 10)});
    ctx.post(paths::FRIEND_REQUEST, Some(&a.token), &big)
        .await?
        .refused(413)?;
    Ok(())
}

async fn duplicate_text(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let b = ctx.account().await?;
    ctx.request_friend(&a, &b).await?;
    let r = ctx
        .post(
            paths::FRIEND_REQUEST,
            Some(&a.token),
            &json!({"to_alias_id": b.alias}),
        )
        .await?;
    let text = String::from_utf8_lossy(&r.body).to_lowercase();
    let says = text.contains("already exists") || text.contains("already_exists");
    if ctx.reference() {
        r.expect_error(409)?;
        ensure!(says, "the 409 text does not say `already exists`: {text}");
    } else {
        ensure!(
            r.status == 409 || ((400..500).contains(&r.status) && says),
            "a duplicate friend request answered {} {text}: the web client looks for 409 or `already exists`",
            r.status
        );
    }
    Ok(())
}
