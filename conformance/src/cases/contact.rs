//! CONTACT: friends, lookup, conversations, storage (SPEC §What the service does 5, §Contact;
//! PROTOCOL §1.2, §1.3, §3.2).

use http::Method;
use serde_json::{Value, json};
use wire::http::paths;

use crate::ctx::{Ctx, Kind, fields, id_text, s};
use crate::model::{Case, CaseResult, Failure};
use crate::{case, ensure, fail};

/// Cases of this area.
pub const CASES: &[Case] = &[
    case!(
        "CONTACT-001",
        Must,
        "SPEC §Contact; PROTOCOL §1.2 F1-F2",
        "After POST /api/v1/friends/request `{to_alias_id}`, the requester's F1 shows the entry `pending`/`sent` and the recipient's shows `pending`/`received`.",
        [],
        request_pending
    ),
    case!(
        "CONTACT-002",
        Must,
        "SPEC §Contact (FriendProfile); PROTOCOL §1.2 F1",
        "Each F1 entry carries friendship_id (number), alias_id, nickname, status, direction, conversation_id, x25519_public_key, ed25519_public_key and created_at (ISO).",
        [],
        profile_fields
    ),
    case!(
        "CONTACT-003",
        Must,
        "PROTOCOL §1.2 F3, §0",
        "PUT /api/v1/friends/{id}/accept with no body returns `{conversation_id}`; both sides then see `accepted` with that conversation_id.",
        [],
        accept
    ),
    case!(
        "CONTACT-004",
        Should,
        "PROTOCOL §1.2 F3 (iOS)",
        "POST /api/v1/friends/accept `{friendship_id}` accepts too.",
        [],
        accept_ios
    ),
    case!(
        "CONTACT-005",
        Must,
        "PROTOCOL §1.2 F2",
        "A repeated friend request answers 409 (or a 4xx whose text contains `already exists`).",
        [],
        duplicate_request
    ),
    case!(
        "CONTACT-006",
        Must,
        "PROTOCOL §1.2 F4",
        "POST /api/v1/friends/{id}/reject sets the friendship to `rejected`.",
        [],
        reject
    ),
    case!(
        "CONTACT-007",
        Must,
        "SPEC §What the service does 5; PROTOCOL §1.2 F5",
        "GET /api/v1/users/{alias_id} returns alias_id, nickname and the registered x25519/ed25519 public keys.",
        [],
        lookup
    ),
    case!(
        "CONTACT-008",
        Must,
        "PROTOCOL §1.2 F5",
        "A lookup of an unknown alias is refused (a 4xx: the web client treats any non-2xx as not found; our relay: 404).",
        [],
        lookup_unknown
    ),
    case!(
        "CONTACT-009",
        Should,
        "PROTOCOL §3.2; ARCHITECTURE wire",
        "An online recipient gets a `friend_request` frame when asked.",
        [],
        friend_request_frame
    ),
    case!(
        "CONTACT-010",
        Should,
        "PROTOCOL §3.2; ARCHITECTURE wire",
        "An online requester gets a `friend_accepted` frame with the conversation_id when accepted.",
        [],
        friend_accepted_frame
    ),
    case!(
        "CONTACT-011",
        Must,
        "SPEC §What the service does 5",
        "Only the recipient accepts: the requester's own accept is refused and the friendship stays pending.",
        [],
        requester_cannot_accept
    ),
    case!(
        "CONTACT-012",
        Must,
        "SPEC §What the service does 5",
        "A third account cannot accept someone else's friendship (4xx).",
        [],
        third_party_accept
    ),
    case!(
        "CONTACT-013",
        Must,
        "PROTOCOL §1.3 C1",
        "GET /api/v1/conversations/active returns `{conversations: [{conv_id}]}` including the accepted conversation.",
        [],
        active_conversations
    ),
    case!(
        "CONTACT-014",
        Must,
        "PROTOCOL §1.3 C2",
        "GET /api/v1/storage/estimate returns `{used_bytes, quota_bytes, message_count}` integers.",
        [],
        storage_estimate
    ),
    case!(
        "CONTACT-015",
        Should,
        "SPEC §What the service does 5",
        "A friend request to oneself is refused with a 4xx error body.",
        [],
        request_self
    ),
    case!(
        "CONTACT-016",
        Must,
        "PROTOCOL §1.2 F2",
        "A friend request to an unknown alias is refused (a 4xx; our relay: 404).",
        [],
        request_unknown
    ),
    case!(
        "CONTACT-017",
        Must,
        "PROTOCOL §9",
        "F1 is an un-wrapped JSON array; a fresh account gets `[]`.",
        [],
        empty_list
    ),
];

async fn request_pending(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let b = ctx.account().await?;
    ctx.request_friend(&a, &b).await.map_err(Failure::checked)?;
    let Some(sent) = ctx.friend_entry(&a, &b.alias).await? else {
        fail!("the requester's F1 lacks the request")
    };
    ensure!(
        sent["status"] == "pending" && sent["direction"] == "sent",
        "requester sees {sent}"
    );
    let Some(recv) = ctx.friend_entry_once(&b, &a.alias, |_| true).await? else {
        fail!("the recipient's F1 lacks the request")
    };
    ensure!(
        recv["status"] == "pending" && recv["direction"] == "received",
        "recipient sees {recv}"
    );
    Ok(())
}

async fn profile_fields(ctx: &mut Ctx) -> CaseResult {
    let p = ctx.pair().await?;
    let Some(e) = ctx.friend_entry(&p.a, &p.b.alias).await? else {
        fail!("no F1 entry")
    };
    fields(
        "F1 entry",
        &e,
        &[
            ("friendship_id", Kind::Uint),
            ("alias_id", Kind::NonEmpty),
            ("nickname", Kind::Str),
            ("status", Kind::NonEmpty),
            ("direction", Kind::NonEmpty),
            ("conversation_id", Kind::NonEmpty),
            ("x25519_public_key", Kind::NonEmpty),
            ("ed25519_public_key", Kind::NonEmpty),
            ("created_at", Kind::Iso),
        ],
    )?;
    ensure!(
        s(&e, "x25519_public_key")? == p.b.x_b64(),
        "the F1 X25519 key is not the one B registered"
    );
    ensure!(
        s(&e, "ed25519_public_key")? == p.b.ed_b64(),
        "the F1 Ed25519 key is not the one B registered"
    );
    ensure!(
        s(&e, "nickname")? == p.b.nickname,
        "the F1 nickname is not B's"
    );
    Ok(())
}

async fn accept(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let b = ctx.account().await?;
    let id = ctx.request_friend(&a, &b).await?;
    let conv = ctx.accept(&b, &id).await.map_err(Failure::checked)?;
    let p = crate::ctx::Pair {
        key: client_core::crypto::session_key(
            &a.identity.ecdh_key,
            &b.identity.ecdh_key.public_key(),
            &conv,
        ),
        a,
        b,
        conv,
        friendship_id: id,
    };
    for (who, other) in [(&p.a, &p.b.alias), (&p.b, &p.a.alias)] {
        let accepted = |e: &Value| e["status"] == "accepted";
        let Some(e) = ctx.friend_entry_once(who, other, accepted).await? else {
            fail!("no F1 entry")
        };
        ensure!(
            e["status"] == "accepted",
            "status is {} after accept",
            e["status"]
        );
        ensure!(
            e["conversation_id"] == p.conv.as_str(),
            "F1 conversation_id {} differs from the accept's {}",
            e["conversation_id"],
            p.conv
        );
    }
    Ok(())
}

async fn accept_ios(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let b = ctx.account().await?;
    let id = ctx.request_friend(&a, &b).await?;
    let v = ctx
        .post(
            paths::FRIEND_ACCEPT_BODY,
            Some(&b.token),
            &json!({"friendship_id": id}),
        )
        .await?
        .ok()?;
    fields("F3 (iOS)", &v, &[("conversation_id", Kind::NonEmpty)])
}

async fn duplicate_request(ctx: &mut Ctx) -> CaseResult {
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
    if ctx.reference() {
        r.expect_error(409)?;
    } else {
        // PROTOCOL §1.2 F2: "409 (or text containing `already exists`) = request already sent".
        let text = String::from_utf8_lossy(&r.body).to_lowercase();
        ensure!(
            r.status == 409 || ((400..500).contains(&r.status) && text.contains("already exists")),
            "a repeated friend request answered {} {text}, neither 409 nor `already exists`",
            r.status
        );
    }
    Ok(())
}

async fn reject(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let b = ctx.account().await?;
    let id = ctx.request_friend(&a, &b).await?;
    ctx.req(
        Method::POST,
        &format!("/api/v1/friends/{}/reject", id_text(&id)),
        Some(&b.token),
        None,
    )
    .await?
    .ok()?;
    let rejected = |e: &Value| e["status"] == "rejected";
    let Some(e) = ctx.friend_entry_once(&b, &a.alias, rejected).await? else {
        fail!("the rejected entry vanished from the recipient's F1")
    };
    ensure!(
        e["status"] == "rejected",
        "status is {} after reject",
        e["status"]
    );
    Ok(())
}

async fn lookup(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let b = ctx.account().await?;
    let v = ctx
        .get(&format!("/api/v1/users/{}", b.alias), Some(&a.token))
        .await?
        .ok()?;
    fields(
        "F5",
        &v,
        &[
            ("alias_id", Kind::NonEmpty),
            ("nickname", Kind::Str),
            ("x25519_public_key", Kind::NonEmpty),
            ("ed25519_public_key", Kind::NonEmpty),
        ],
    )?;
    ensure!(
        s(&v, "alias_id")? == b.alias
            && s(&v, "x25519_public_key")? == b.x_b64()
            && s(&v, "ed25519_public_key")? == b.ed_b64(),
        "F5 does not return B's registered keys: {v}"
    );
    Ok(())
}

async fn lookup_unknown(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let w = ctx.word();
    ctx.get(&format!("/api/v1/users/zz_{w}"), Some(&a.token))
        .await?
        .refused(404)?;
    Ok(())
}

async fn friend_request_frame(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let b = ctx.account().await?;
    let mut wb = ctx.connect(&b, "B").await?;
    ctx.post(
        paths::FRIEND_REQUEST,
        Some(&a.token),
        &json!({"to_alias_id": b.alias}),
    )
    .await?
    .ok()?;
    let f = wb.expect("friend_request").await?;
    // PROTOCOL §3.2: the fields are not determinable (apps only refresh F1 on it).
    if ctx.reference() {
        ensure!(
            f.get("from").and_then(Value::as_str) == Some(a.alias.as_str()),
            "friend_request.from is not the requester: {f}"
        );
    }
    Ok(())
}

async fn friend_accepted_frame(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let b = ctx.account().await?;
    let mut wa = ctx.connect(&a, "A").await?;
    let id = ctx.request_friend(&a, &b).await?;
    let conv = ctx.accept(&b, &id).await?;
    let f = wa.expect("friend_accepted").await?;
    if ctx.reference() {
        ensure!(
            f.get("conversation_id").and_then(Value::as_str) == Some(conv.as_str()),
            "friend_accepted lacks the conversation_id {conv}: {f}"
        );
    }
    Ok(())
}

async fn requester_cannot_accept(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let b = ctx.account().await?;
    let id = ctx.request_friend(&a, &b).await?;
    ctx.req(
        Method::PUT,
        &format!("/api/v1/friends/{}/accept", id_text(&id)),
        Some(&a.token),
        None,
    )
    .await?
    .expect_client_error()?;
    let Some(e) = ctx.friend_entry(&a, &b.alias).await? else {
        fail!("no F1 entry")
    };
    ensure!(
        e["status"] == "pending",
        "status is {} after the requester's own accept",
        e["status"]
    );
    Ok(())
}

async fn third_party_accept(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let b = ctx.account().await?;
    let c = ctx.account().await?;
    let id = ctx.request_friend(&a, &b).await?;
    ctx.req(
        Method::PUT,
        &format!("/api/v1/friends/{}/accept", id_text(&id)),
        Some(&c.token),
        None,
    )
    .await?
    .expect_client_error()?;
    Ok(())
}

async fn active_conversations(ctx: &mut Ctx) -> CaseResult {
    let p = ctx.pair().await?;
    let v = ctx
        .get(paths::ACTIVE_CONVERSATIONS, Some(&p.a.token))
        .await?
        .ok()?;
    fields("C1", &v, &[("conversations", Kind::Arr)])?;
    let found = v["conversations"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["conv_id"] == p.conv.as_str());
    ensure!(found, "C1 lacks the accepted conversation {}: {v}", p.conv);
    Ok(())
}

async fn storage_estimate(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let v = ctx
        .get(paths::STORAGE_ESTIMATE, Some(&a.token))
        .await?
        .ok()?;
    fields(
        "C2",
        &v,
        &[
            ("used_bytes", Kind::Uint),
            ("quota_bytes", Kind::Uint),
            ("message_count", Kind::Uint),
        ],
    )
}

async fn request_self(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    ctx.post(
        paths::FRIEND_REQUEST,
        Some(&a.token),
        &json!({"to_alias_id": a.alias}),
    )
    .await?
    .expect_client_error()?;
    Ok(())
}

async fn request_unknown(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let w = ctx.word();
    ctx.post(
        paths::FRIEND_REQUEST,
        Some(&a.token),
        &json!({"to_alias_id": format!("zz_{w}")}),
    )
    .await?
    .refused(404)?;
    Ok(())
}

async fn empty_list(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let v = ctx.get(paths::FRIENDS, Some(&a.token)).await?.ok()?;
    ensure!(v == json!([]), "a fresh account's F1 is {v}, not []");
    Ok(())
}
