//! CH: channels (SPEC §Channels, §Events channel post; PROTOCOL §1.4 CH1-CH8, §3.2).

use http::Method;
use serde_json::{Value, json};
use wire::http::paths;

use crate::ctx::{Ctx, Kind, fields, s};
use crate::model::{Case, CaseResult};
use crate::{case, ensure, fail};

/// Cases of this area.
pub const CASES: &[Case] = &[
    case!(
        "CH-001",
        Must,
        "SPEC §Endpoints channels.create; PROTOCOL §1.4 CH4",
        "POST /api/v1/channels `{name, description, is_public}` returns `{channel_id}`.",
        [],
        create
    ),
    case!(
        "CH-002",
        Must,
        "SPEC §Channels ChannelInfo; PROTOCOL §1.4 CH3",
        "GET /api/v1/channels/{id} returns ChannelInfo `{id, name, description}` with role `owner` for the creator.",
        [],
        detail
    ),
    case!(
        "CH-003",
        Must,
        "PROTOCOL §1.4 CH2",
        "GET /api/v1/channels/mine lists the channels the caller owns.",
        [],
        mine_owned
    ),
    case!(
        "CH-004",
        Must,
        "PROTOCOL §1.4 CH1",
        "GET /api/v1/channels/search?q= finds a public channel by name and returns an un-wrapped array.",
        [],
        search
    ),
    case!(
        "CH-005",
        Must,
        "PROTOCOL §1.4 CH5, CH2",
        "After POST …/subscribe (body `{}`), the channel is in the subscriber's mine list with is_subscribed true.",
        [],
        subscribe
    ),
    case!(
        "CH-006",
        Must,
        "PROTOCOL §1.4 CH6",
        "DELETE …/subscribe removes the channel from the subscriber's mine list.",
        [],
        unsubscribe
    ),
    case!(
        "CH-007",
        Must,
        "PROTOCOL §1.4 CH7",
        "The owner's POST …/posts `{type, content}` returns `{post_id}`.",
        [],
        post
    ),
    case!(
        "CH-008",
        Must,
        "SPEC §Channels ChannelPost; PROTOCOL §1.4 CH8",
        "GET …/posts returns ChannelPost `{id, type, content, created_at, author_alias_id}` newest first.",
        [],
        posts_newest_first
    ),
    case!(
        "CH-009",
        Should,
        "PROTOCOL §1.4 CH7",
        "Only the owner may post: a subscriber's post is refused (a 4xx; our relay: 403). The documents give owner-only posting as a client-side rule (`canPost`), so it is a MUST only under the reference profile.",
        [],
        non_owner_post
    ),
    case!(
        "CH-010",
        Should,
        "SPEC §Events channel post; PROTOCOL §3.2 channel_post; ARCHITECTURE wire",
        "An online subscriber gets a `channel_post` frame for a new post: the PWA's `{conv_id: <channel id>, post}` (our relay adds `channel_id`).",
        [],
        channel_post_frame
    ),
    case!(
        "CH-011",
        Should,
        "PROTOCOL §1.4 CH4",
        "When the free creation quota is used up, creation is refused with an error whose text contains QUOTA_EXCEEDED.",
        [],
        quota_exceeded
    ),
    case!(
        "CH-012",
        Must,
        "PROTOCOL §1.4 CH3",
        "An unknown channel id is refused (a 4xx; our relay: 404).",
        [],
        unknown_channel
    ),
    case!(
        "CH-013",
        Should,
        "PROTOCOL §1.4 CH4",
        "A channel created with is_public false is not found by search.",
        [],
        private_not_searchable
    ),
    case!(
        "CH-014",
        Must,
        "SPEC §What the service does 6",
        "Channel content is public: a non-subscriber can read the posts of a public channel.",
        [],
        public_posts_readable
    ),
];

async fn create(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let v = ctx
        .post(
            paths::CHANNELS,
            Some(&a.token),
            &json!({"name": "conf create", "description": "d", "is_public": true}),
        )
        .await?
        .ok()?;
    fields("CH4", &v, &[("channel_id", Kind::NonEmpty)])
}

async fn detail(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let id = ctx.create_channel(&a, true).await?;
    let v = ctx
        .get(&format!("/api/v1/channels/{id}"), Some(&a.token))
        .await?
        .ok()?;
    fields(
        "CH3",
        &v,
        &[
            ("id", Kind::NonEmpty),
            ("name", Kind::NonEmpty),
            ("description", Kind::Str),
        ],
    )?;
    ensure!(s(&v, "id")? == id, "detail id differs");
    ensure!(
        v.get("role").and_then(Value::as_str) == Some("owner"),
        "the creator's role is {:?}",
        v.get("role")
    );
    Ok(())
}

async fn mine(ctx: &mut Ctx, token: &str) -> Result<Vec<Value>, crate::model::Failure> {
    let v = ctx.get(paths::CHANNELS_MINE, Some(token)).await?.ok()?;
    match v {
        Value::Array(items) => Ok(items),
        other => fail!("CH2 is not an array: {other}"),
    }
}

async fn mine_owned(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let id = ctx.create_channel(&a, true).await?;
    let list = mine(ctx, &a.token).await?;
    ensure!(
        list.iter().any(|c| c["id"] == id.as_str()),
        "mine lacks the owned channel"
    );
    Ok(())
}

async fn search(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let word = ctx.word();
    let name = format!("findme {word}");
    let v = ctx
        .post(
            paths::CHANNELS,
            Some(&a.token),
            &json!({"name": name, "description": "", "is_public": true}),
        )
        .await?
        .ok()?;
    let id = s(&v, "channel_id")?.to_owned();
    let found = ctx
        .get(
            &format!("{}?q={word}", paths::CHANNEL_SEARCH),
            Some(&a.token),
        )
        .await?
        .ok()?;
    let Some(items) = found.as_array() else {
        fail!("CH1 is not an array: {found}")
    };
    ensure!(
        items.iter().any(|c| c["id"] == id.as_str()),
        "search for {word:?} does not find the channel"
    );
    Ok(())
}

async fn subscribe(ctx: &mut Ctx) -> CaseResult {
    let owner = ctx.account().await?;
    let sub = ctx.account().await?;
    let id = ctx.create_channel(&owner, true).await?;
    ctx.post(
        &format!("/api/v1/channels/{id}/subscribe"),
        Some(&sub.token),
        &json!({}),
    )
    .await?
    .ok()?;
    let list = mine(ctx, &sub.token).await?;
    let Some(c) = list.iter().find(|c| c["id"] == id.as_str()) else {
        fail!("the subscribed channel is not in mine")
    };
    ensure!(
        c.get("is_subscribed") == Some(&Value::Bool(true)),
        "is_subscribed is {:?}",
        c.get("is_subscribed")
    );
    Ok(())
}

async fn unsubscribe(ctx: &mut Ctx) -> CaseResult {
    let owner = ctx.account().await?;
    let sub = ctx.account().await?;
    let id = ctx.create_channel(&owner, true).await?;
    let path = format!("/api/v1/channels/{id}/subscribe");
    ctx.post(&path, Some(&sub.token), &json!({})).await?.ok()?;
    ctx.req(Method::DELETE, &path, Some(&sub.token), None)
        .await?
        .ok()?;
    let list = mine(ctx, &sub.token).await?;
    ensure!(
        !list.iter().any(|c| c["id"] == id.as_str()),
        "the channel is still in mine after unsubscribing"
    );
    Ok(())
}

async fn post(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let id = ctx.create_channel(&a, true).await?;
    let v = ctx
        .post(
            &format!("/api/v1/channels/{id}/posts"),
            Some(&a.token),
            &json!({"type": "text", "content": "hello channel"}),
        )
        .await?
        .ok()?;
    fields("CH7", &v, &[("post_id", Kind::NonEmpty)])
}

async fn posts_newest_first(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let id = ctx.create_channel(&a, true).await?;
    let path = format!("/api/v1/channels/{id}/posts");
    let mut ids = Vec::new();
    for (t, c) in [("text", "first"), ("markdown", "**second**")] {
        let v = ctx
            .post(&path, Some(&a.token), &json!({"type": t, "content": c}))
            .await?
            .ok()?;
        ids.push(s(&v, "post_id")?.to_owned());
    }
    let list = ctx.get(&path, Some(&a.token)).await?.ok()?;
    let Some(items) = list.as_array() else {
        fail!("CH8 is not an array: {list}")
    };
    ensure!(items.len() >= 2, "expected 2 posts, got {}", items.len());
    for p in items {
        fields(
            "ChannelPost",
            p,
            &[
                ("id", Kind::NonEmpty),
                ("type", Kind::NonEmpty),
                ("content", Kind::Str),
                ("created_at", Kind::Iso),
                ("author_alias_id", Kind::NonEmpty),
            ],
        )?;
    }
    ensure!(
        items[0]["id"] == ids[1].as_str(),
        "posts are not newest first"
    );
    ensure!(
        items[0]["type"] == "markdown" && items[0]["content"] == "**second**",
        "the markdown post changed: {}",
        items[0]
    );
    ensure!(
        items[0]["author_alias_id"] == a.alias.as_str(),
        "author_alias_id is not the owner"
    );
    Ok(())
}

async fn non_owner_post(ctx: &mut Ctx) -> CaseResult {
    let owner = ctx.account().await?;
    let sub = ctx.account().await?;
    let id = ctx.create_channel(&owner, true).await?;
    ctx.post(
        &format!("/api/v1/channels/{id}/subscribe"),
        Some(&sub.token),
        &json!({}),
    )
    .await?
    .ok()?;
    ctx.post(
        &format!("/api/v1/channels/{id}/posts"),
        Some(&sub.token),
        &json!({"type": "text", "content": "not mine"}),
    )
    .await?
    .refused(403)?;
    Ok(())
}

async fn channel_post_frame(ctx: &mut Ctx) -> CaseResult {
    let owner = ctx.account().await?;
    let sub = ctx.account().await?;
    let id = ctx.create_channel(&owner, true).await?;
    ctx.post(
        &format!("/api/v1/channels/{id}/subscribe"),
        Some(&sub.token),
        &json!({}),
    )
    .await?
    .ok()?;
    let mut ws = ctx.connect(&sub, "sub").await?;
    let v = ctx
        .post(
            &format!("/api/v1/channels/{id}/posts"),
            Some(&owner.token),
            &json!({"type": "text", "content": "live"}),
        )
        .await?
        .ok()?;
    let post_id = s(&v, "post_id")?.to_owned();
    let f = ws.expect("channel_post").await?;
    ensure!(
        f["conv_id"] == id.as_str() && (!ctx.reference() || f["channel_id"] == id.as_str()),
        "channel_post does not name the channel: {f}"
    );
    ensure!(
        f["post"]["id"] == post_id.as_str() && f["post"]["content"] == "live",
        "channel_post.post differs: {f}"
    );
    Ok(())
}

async fn quota_exceeded(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    for _ in 0..20 {
        let r = ctx
            .post(
                paths::CHANNELS,
                Some(&a.token),
                &json!({"name": "quota", "description": "", "is_public": false}),
            )
            .await?;
        if !(200..300).contains(&r.status) {
            ensure!(
                String::from_utf8_lossy(&r.body).contains("QUOTA_EXCEEDED"),
                "refusal text lacks QUOTA_EXCEEDED: {} {}",
                r.status,
                String::from_utf8_lossy(&r.body)
            );
            r.expect_client_error()?;
            return Ok(());
        }
    }
    Err(crate::model::Failure::Skip(
        "20 channels created without hitting a quota".into(),
    ))
}

async fn unknown_channel(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let w = ctx.word();
    ctx.get(&format!("/api/v1/channels/nochan{w}"), Some(&a.token))
        .await?
        .refused(404)?;
    Ok(())
}

async fn private_not_searchable(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let word = ctx.word();
    let v = ctx
        .post(
            paths::CHANNELS,
            Some(&a.token),
            &json!({"name": format!("hidden {word}"), "description": "", "is_public": false}),
        )
        .await?
        .ok()?;
    let id = s(&v, "channel_id")?.to_owned();
    let found = ctx
        .get(
            &format!("{}?q={word}", paths::CHANNEL_SEARCH),
            Some(&a.token),
        )
        .await?
        .ok()?;
    ensure!(
        !found
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["id"] == id.as_str()),
        "a private channel was found by search"
    );
    Ok(())
}

async fn public_posts_readable(ctx: &mut Ctx) -> CaseResult {
    let owner = ctx.account().await?;
    let reader = ctx.account().await?;
    let id = ctx.create_channel(&owner, true).await?;
    let path = format!("/api/v1/channels/{id}/posts");
    ctx.post(
        &path,
        Some(&owner.token),
        &json!({"type": "text", "content": "public"}),
    )
    .await?
    .ok()?;
    let list = ctx.get(&path, Some(&reader.token)).await?.ok()?;
    ensure!(
        list.as_array().is_some_and(|l| !l.is_empty()),
        "a non-subscriber cannot read a public channel's posts: {list}"
    );
    Ok(())
}
