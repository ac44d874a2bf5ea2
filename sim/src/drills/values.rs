//! `values`: requests of the right shape whose values are wrong, each answered with the refusal
//! the relay documents for it (the module docs of `relay-core`'s handlers), and what is below
//! each refusal still working. The dishonest clients spoil shapes (not JSON, a field of the
//! wrong type, a field left out); these requests are well formed and wrong in what they say:
//!
//! | route | the request | the answer |
//! |---|---|---|
//! | `POST register` | fresh keys, an empty nickname | 400 `INVALID_FIELD` |
//! | `POST register` | fresh keys, no `pow_nonce` (the relay asks for proof of work) | 400 `POW_REQUIRED` |
//! | `POST register` | the keys of an account that exists | 409 `ALREADY_REGISTERED`, that account's uuid |
//! | `GET /ws` | a `user_uuid` that is not a UUID | 401 |
//! | `GET /ws` | the caller's token as `Sec-WebSocket-Protocol: bearer, <token>`; then another account's token so | 101; 401 |
//! | `GET calls/ice-config` | `mode=` neither `relay` nor absent | 400 `INVALID_FIELD` |
//! | `GET calls/ice-config` | `mode=relay` on a relay with no TURN server | 503 `TURN_UNAVAILABLE` |
//! | `POST friends/request` | to the caller's own alias | 400 `BAD_REQUEST` |
//! | `POST friends/request` | to an accepted friend, from either side | 409 `ALREADY_EXISTS`, and the friendship still accepted in the same conversation |
//! | `POST vanity/purchase` | an alias the catalogue does not sell | 404 `ALIAS_NOT_FOUND` |
//! | `POST media/…/chunk` | no `partNumber`; an empty part | 400 `INVALID_FIELD` |
//! | `POST media/…/complete` | no parts; then the right list (200); then another list | 400 `INVALID_FIELD`, 200, 409 `INVALID_STATE` |
//! | `POST media/…/chunk` | a part after completion | 409 `INVALID_STATE` |
//! | `POST channels/{id}/posts` | content one byte over the bound | 413 `PAYLOAD_TOO_LARGE` |
//! | `PUT channels/{id}/forsale` | an `expected_version` the channel does not have | 409 `VERSION_CONFLICT` |
//! | `POST payments/webhook` (signed) | an empty `payment_id`; an order that does not exist | 400 `INVALID_FIELD`; 404 `ORDER_NOT_FOUND` |
//! | `msg` | an id the conversation's other member already used in it | error frame `ALREADY_EXISTS`, no ack |
//! | `msg` | the author's id again, in another conversation | an `ack` (ids are each conversation's) |
//! | `msg` | a payload that is not base64 | error frame `BAD_FRAME`, no ack |
//!
//! Oracle `values`: another status or code. An answer of 429 or 5xx, or none, is not judged
//! (a rate limit, a storage fault or a power-off says nothing about the value), nor a 401 (each
//! family of steps logs in first, but a `days` clock may jump past the token, and a fault may
//! lose the answer to a login that replaced it);
//! a step whose setup did not succeed (a channel the account has no seat for) is skipped, and
//! counted so.

use serde_json::{Value, json};
use wire::http::paths;
use wire::limits::MAX_CHANNEL_POST_BYTES;

use super::peer::{Answer, Socket, befriend, friend_row, payload};
use super::{Calm, Drills, Outcome};
use crate::hostile::http::{RawAccount, field, get, http, json_exchange, post};
use crate::violation::{Oracle, Violation};
use crate::world::HostCtx;
use seam::net::HttpRequest;

/// The oracle of this drill.
const ORACLE: Oracle = Oracle::Values;
/// The drill's accounts (numbers of [`Drills::account`]).
const FIRST: u64 = 300;
/// A drill mnemonic never registered (its keys are fresh).
const UNREGISTERED: u64 = 399;
/// A well-formed alias that no catalogue of the simulator sells (and no account is given:
/// assigned aliases are `u` and digits).
const UNSOLD_ALIAS: &str = "values_drill_unsold";

/// Runs the drill (see the module doc).
pub(super) async fn values(d: &mut Drills<'_>) -> Outcome {
    let mut out = Outcome::default();
    let mut a = d.account(FIRST).await;
    let mut b = d.account(FIRST + 1).await;
    let mut c = d.account(FIRST + 2).await;
    accounts(d, &a.raw, &mut out).await;
    // A fresh token before each family: a `days` run's clock may have jumped past the last.
    a.relogin().await;
    b.relogin().await;
    routes(&a.raw, &b.raw, &mut out).await;
    let no_turn = d.config.turn_urls.is_empty() || d.config.turn_secret.is_none();
    if no_turn {
        turn_unavailable(&a.raw, &mut out).await;
    }
    media(d.ctx, &b.raw, &mut out).await;
    c.relogin().await;
    channels(&c.raw, &mut out).await;
    webhook(d.ctx, &mut out).await;
    for account in [&mut a, &mut b, &mut c] {
        account.relogin().await;
    }
    messages(&a.raw, &b.raw, &c.raw, &mut out).await;
    out
}

/// Judges `answer` against `(status, code)`; `false` when it was not judged or breached.
fn judge(
    out: &mut Outcome,
    what: &str,
    answer: Option<&(u16, Value)>,
    status: u16,
    code: &str,
) -> bool {
    match answer {
        None => {
            out.skip();
            false
        }
        Some((s, _)) if *s == 429 || *s >= 500 => {
            out.skip();
            false
        }
        // The token lapsed (a `days` clock jumped past it) or was replaced (a login whose
        // answer a fault lost): says nothing about the value.
        Some((401, _)) if status != 401 => {
            out.skip();
            false
        }
        Some((s, body)) => {
            let got = field(body, "error").unwrap_or_default();
            let ok = *s == status && got == code;
            out.check((!ok).then(|| {
                Violation::new(
                    ORACLE,
                    format!("{what}: answered {s} {got:?}, the relay documents {status} {code}"),
                )
            }));
            ok
        }
    }
}

/// Registration with an empty nickname, and with the keys of an account that exists.
async fn accounts(d: &mut Drills<'_>, a: &RawAccount, out: &mut Outcome) {
    let http = http();
    let fresh = super::DrillAccount::identity_of(d.ctx.seed, UNREGISTERED);
    let body = json!({
        "ed25519_public_key": fresh.signing_public_b64(),
        "x25519_public_key": fresh.ecdh_public_b64(),
        "nickname": "   ",
        "pow_nonce": "0",
    });
    let answer = post(&http, paths::REGISTER, None, &body).await;
    judge(
        out,
        "registration with a blank nickname",
        answer.as_ref(),
        400,
        "INVALID_FIELD",
    );
    if d.config.pow_difficulty > 0 {
        let body = json!({
            "ed25519_public_key": fresh.signing_public_b64(),
            "x25519_public_key": fresh.ecdh_public_b64(),
            "nickname": "no work",
        });
        let answer = post(&http, paths::REGISTER, None, &body).await;
        judge(
            out,
            "registration without proof of work",
            answer.as_ref(),
            400,
            "POW_REQUIRED",
        );
    }
    let own = d.account(FIRST).await;
    let body = json!({
        "ed25519_public_key": own.identity.signing_public_b64(),
        "x25519_public_key": own.identity.ecdh_public_b64(),
        "nickname": "again",
    });
    let answer = post(&http, paths::REGISTER, None, &body).await;
    if judge(
        out,
        "registration with the keys of an account that exists",
        answer.as_ref(),
        409,
        "ALREADY_REGISTERED",
    ) {
        let uuid = answer.as_ref().and_then(|(_, v)| field(v, "uuid"));
        out.expect(uuid.as_deref() == Some(a.uuid.as_str()), ORACLE, || {
            format!(
                "a repeated registration named account {uuid:?}, not the one the keys belong to"
            )
        });
    }
}

/// The WebSocket upgrade, the ICE configuration, a friend request and a purchase, each with
/// one wrong value.
async fn routes(a: &RawAccount, b: &RawAccount, out: &mut Outcome) {
    match Socket::open_query("user_uuid=not-a-uuid&token=x", false).await {
        Ok(_) => out.check(Some(Violation::new(
            Oracle::Authz,
            "a WebSocket upgrade whose user_uuid is not a UUID was let in",
        ))),
        Err(0) => out.skip(),
        Err(s) if s >= 500 || s == 429 => out.skip(),
        Err(s) => out.expect(s == 401, ORACLE, || {
            format!(
                "a WebSocket upgrade whose user_uuid is not a UUID: {s}, the relay documents 401"
            )
        }),
    }
    subprotocol(a, b, out).await;
    let http = http();
    let ice = format!("{}?mode=everything", paths::ICE_CONFIG);
    let answer = get(&http, &ice, &a.token).await;
    judge(
        out,
        "the ICE configuration with mode=everything",
        answer.as_ref(),
        400,
        "INVALID_FIELD",
    );
    let body = json!({ "to_alias_id": a.alias });
    let answer = post(&http, paths::FRIEND_REQUEST, Some(&a.token), &body).await;
    judge(
        out,
        "a friend request to oneself",
        answer.as_ref(),
        400,
        "BAD_REQUEST",
    );
    let body = json!({ "alias_id": UNSOLD_ALIAS });
    let answer = post(&http, paths::VANITY_PURCHASE, Some(&a.token), &body).await;
    judge(
        out,
        "a purchase of an alias the catalogue does not sell",
        answer.as_ref(),
        404,
        "ALIAS_NOT_FOUND",
    );
}

/// The token in `Sec-WebSocket-Protocol` (as the Android client sends it): `a`'s own lets `a`
/// in; `b`'s, for `a`'s `user_uuid`, must not.
async fn subprotocol(a: &RawAccount, b: &RawAccount, out: &mut Outcome) {
    let query = format!("user_uuid={}", a.uuid);
    match Socket::open_with(&query, Some(&format!("bearer, {}", a.token)), false).await {
        Ok(_) => out.check(None),
        Err(s) if s == 0 || s == 401 || s == 429 || s >= 500 => out.skip(),
        Err(s) => out.check(Some(Violation::new(
            ORACLE,
            format!("a WebSocket upgrade with the account's own token as its subprotocol: {s}, the relay documents 101"),
        ))),
    }
    match Socket::open_with(&query, Some(&format!("bearer, {}", b.token)), false).await {
        Ok(_) => out.check(Some(Violation::new(
            Oracle::Authz,
            "a WebSocket upgrade for one account with another account's token as its subprotocol was let in",
        ))),
        Err(s) if s == 0 || s == 429 || s >= 500 => out.skip(),
        Err(s) => out.expect(s == 401, ORACLE, || {
            format!("a WebSocket upgrade with another account's token as its subprotocol: {s}, the relay documents 401")
        }),
    }
}

/// `mode=relay` on a relay without TURN: 503 `TURN_UNAVAILABLE` (an empty list would read as
/// success), the one 503 this drill judges (another 503, a storage fault, is not judged).
async fn turn_unavailable(a: &RawAccount, out: &mut Outcome) {
    let relay_only = format!("{}?mode=relay", paths::ICE_CONFIG);
    let answer = get(&http(), &relay_only, &a.token).await;
    let code = |body: &Value| field(body, "error").unwrap_or_default();
    match &answer {
        None | Some((429 | 401, _)) => out.skip(),
        Some((503, body)) if code(body) != "TURN_UNAVAILABLE" => out.skip(),
        Some((s, body)) => out.expect(*s == 503, ORACLE, || {
            format!(
                "the ICE configuration with mode=relay on a relay with no TURN server: {s} {:?}, the relay documents 503 TURN_UNAVAILABLE",
                code(body)
            )
        }),
    }
}

/// A raw POST of `body` to `path` with `token`; `(status, JSON body or null)`.
async fn post_bytes(path: &str, token: &str, body: Vec<u8>) -> Option<(u16, Value)> {
    let req = HttpRequest::post(path)
        .bearer(token)
        .header(http::header::CONTENT_TYPE, "application/octet-stream")
        .body(body);
    json_exchange(&http(), req).await
}

/// One upload taken through its wrong values: chunks without a part number and empty,
/// completions with no parts and with another list, a part after completion.
async fn media(ctx: &HostCtx, b: &RawAccount, out: &mut Outcome) {
    let http = http();
    // An unfinished upload lapses with time: a `days` clock that jumps ends the judging.
    let calm = Calm::now(ctx);
    let lapsed = |out: &mut Outcome| {
        let moved = !calm.clock_held(ctx);
        if moved {
            out.skip();
        }
        moved
    };
    let init = json!({ "content_type": "application/octet-stream" });
    let Some((200..=299, started)) = post(&http, paths::MEDIA_INIT, Some(&b.token), &init).await
    else {
        out.skip();
        return;
    };
    let (Some(id), Some(key)) = (field(&started, "upload_id"), field(&started, "media_key")) else {
        out.check(Some(Violation::new(
            ORACLE,
            format!("a media upload began without an upload_id and a media_key: {started}"),
        )));
        return;
    };
    let chunk = paths::MEDIA_CHUNK.replace("{upload_id}", &id);
    let complete = paths::MEDIA_COMPLETE.replace("{upload_id}", &id);
    let answer = post_bytes(&format!("{chunk}?mediaKey={key}"), &b.token, vec![7; 16]).await;
    if lapsed(out) {
        return;
    }
    judge(
        out,
        "a media part without a partNumber",
        answer.as_ref(),
        400,
        "INVALID_FIELD",
    );
    let part = format!("{chunk}?mediaKey={key}&partNumber=1");
    let answer = post_bytes(&part, &b.token, Vec::new()).await;
    if lapsed(out) {
        return;
    }
    judge(
        out,
        "an empty media part",
        answer.as_ref(),
        400,
        "INVALID_FIELD",
    );
    let Some((200..=299, stored)) = post_bytes(&part, &b.token, vec![7; 16]).await else {
        out.skip();
        return;
    };
    let etag = field(&stored, "etag").unwrap_or_default();
    let body =
        |etag: &str| json!({ "media_key": key, "parts": [{"etag": etag, "part_number": 1}] });
    let answer = post(
        &http,
        &complete,
        Some(&b.token),
        &json!({ "media_key": key, "parts": [] }),
    )
    .await;
    if lapsed(out) {
        return;
    }
    judge(
        out,
        "a media completion that lists no parts",
        answer.as_ref(),
        400,
        "INVALID_FIELD",
    );
    let answer = post(&http, &complete, Some(&b.token), &body(&etag)).await;
    if lapsed(out) {
        return;
    }
    match answer {
        Some((s, _)) if (200..300).contains(&s) => out.check(None),
        Some((s, v)) if s != 429 && s != 401 && s < 500 => {
            out.check(Some(Violation::new(
                ORACLE,
                format!("a media completion with the uploaded part's etag: {s} {v}"),
            )));
            return;
        }
        _ => {
            out.skip();
            return;
        }
    }
    let answer = post(&http, &complete, Some(&b.token), &body("0000")).await;
    if lapsed(out) {
        return;
    }
    judge(
        out,
        "a completed upload completed again with another parts list",
        answer.as_ref(),
        409,
        "INVALID_STATE",
    );
    let answer = post_bytes(&part, &b.token, vec![8; 16]).await;
    if lapsed(out) {
        return;
    }
    judge(
        out,
        "a part sent to a completed upload",
        answer.as_ref(),
        409,
        "INVALID_STATE",
    );
}

/// A post one byte over the bound and a listing with a stale version, on a channel of its
/// own.
async fn channels(c: &RawAccount, out: &mut Outcome) {
    let http = http();
    let body = json!({"name": "values drill", "description": "d", "is_public": false});
    let id = match post(&http, paths::CHANNELS, Some(&c.token), &body).await {
        Some((200..=299, v)) => v
            .get("channel_id")
            .or_else(|| v.get("id"))
            .map(|id| id.as_str().map_or_else(|| id.to_string(), str::to_owned)),
        _ => None,
    };
    let Some(id) = id else {
        // No seat (a `limits` relay may give none) or no answer: nothing to judge here.
        out.skip();
        return;
    };
    let posts = paths::CHANNEL_POSTS.replace("{channel_id}", &id);
    let over = json!({"type": "text", "content": "x".repeat(MAX_CHANNEL_POST_BYTES + 1)});
    let answer = post(&http, &posts, Some(&c.token), &over).await;
    judge(
        out,
        "a channel post one byte over the bound",
        answer.as_ref(),
        413,
        "PAYLOAD_TOO_LARGE",
    );
    let at = json!({"type": "text", "content": "x".repeat(MAX_CHANNEL_POST_BYTES)});
    match post(&http, &posts, Some(&c.token), &at).await {
        Some((s, v)) if s != 429 && s != 401 && s < 500 => {
            out.expect((200..300).contains(&s), ORACLE, || {
                format!("a channel post of exactly the bound: {s} {v}")
            });
        }
        _ => out.skip(),
    }
    let forsale = paths::CHANNEL_FOR_SALE.replace("{channel_id}", &id);
    let req = HttpRequest::new(http::Method::PUT, forsale)
        .bearer(&c.token)
        .json(&json!({"price_usdt": 5, "expected_version": 1_000_000}));
    let answer = match req {
        Ok(req) => json_exchange(&http, req).await,
        Err(_) => None,
    };
    judge(
        out,
        "a channel listing with a version the channel does not have",
        answer.as_ref(),
        409,
        "VERSION_CONFLICT",
    );
}

/// Signed webhooks whose values are wrong: an empty payment id, an order that does not exist.
async fn webhook(ctx: &HostCtx, out: &mut Outcome) {
    let http = http();
    for (what, body, status, code) in [
        (
            "a signed webhook with an empty payment_id",
            json!({"payment_id": "", "order_id": "values-drill-order", "payment_status": "finished", "paid_usdt": 5}),
            400,
            "INVALID_FIELD",
        ),
        (
            "a signed webhook for an order that does not exist",
            json!({"payment_id": "values-drill-payment", "order_id": "values-drill-order", "payment_status": "finished", "paid_usdt": 5}),
            404,
            "ORDER_NOT_FOUND",
        ),
    ] {
        let bytes = serde_json::to_vec(&body).unwrap_or_default();
        let signature = relay_core::payments::sign_webhook(crate::bounds::WEBHOOK_SECRET, &bytes);
        let req = HttpRequest::post(paths::PAYMENT_WEBHOOK)
            .header(
                http::HeaderName::from_static(wire::http::PAYMENT_SIGNATURE_HEADER),
                signature,
            )
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(bytes);
        let answer = json_exchange(&http, req).await;
        if let Some((status, _)) = &answer {
            *ctx.world
                .borrow_mut()
                .drill_webhooks
                .entry(*status)
                .or_default() += 1;
        }
        judge(out, what, answer.as_ref(), status, code);
    }
}

/// A friend request between accepted friends `a` and `b` (conversation `conv`), from each
/// side: 409 `ALREADY_EXISTS`, and both still list the other as accepted in `conv`.
async fn again_to_a_friend(a: &RawAccount, b: &RawAccount, conv: &str, out: &mut Outcome) {
    let http = http();
    for (from, to) in [(a, b), (b, a)] {
        let body = json!({ "to_alias_id": to.alias });
        let answer = post(&http, paths::FRIEND_REQUEST, Some(&from.token), &body).await;
        judge(
            out,
            "a friend request to an accepted friend",
            answer.as_ref(),
            409,
            "ALREADY_EXISTS",
        );
    }
    for (me, other) in [(a, b), (b, a)] {
        let Some((200, friends)) = get(&http, paths::FRIENDS, &me.token).await else {
            out.skip();
            continue;
        };
        let row = friend_row(&friends, &other.alias, None);
        let (status, kept) = (
            row.and_then(|f| field(f, "status")),
            row.and_then(|f| field(f, "conversation_id")),
        );
        out.expect(
            status.as_deref() == Some("accepted") && kept.as_deref() == Some(conv),
            ORACLE,
            || {
                format!(
                    "after friend requests between accepted friends, the friend list shows {status:?} in conversation {kept:?} (was accepted in {conv})"
                )
            },
        );
    }
}

/// A message id the other member already used in the conversation, the author's id again in
/// another conversation, and a payload that is not base64.
async fn messages(a: &RawAccount, b: &RawAccount, c: &RawAccount, out: &mut Outcome) {
    let (Some(ab), Some(ac)) = (befriend(a, b).await, befriend(a, c).await) else {
        out.skip();
        return;
    };
    again_to_a_friend(a, b, &ab, out).await;
    let Ok(mut socket) = Socket::open(a, true).await else {
        out.skip();
        return;
    };
    let id = "values-drill-1";
    match socket.message(id, &b.alias, &ab, &payload(64)).await {
        Answer::Ack(_) => out.check(None),
        Answer::Refused(code) if code == "RATE_LIMITED" || code == "STORAGE_UNAVAILABLE" => {
            out.skip();
            return;
        }
        Answer::Refused(code) => {
            out.check(Some(Violation::new(
                ORACLE,
                format!("a first message between friends was refused with {code}"),
            )));
            return;
        }
        Answer::Silence => {
            out.skip();
            return;
        }
    }
    let Ok(mut other) = Socket::open(b, true).await else {
        out.skip();
        return;
    };
    // `true`: sent by the other member; `None`: an ack is the answer.
    for (what, by_other, id, conv, to, body, code) in [
        (
            "a message id the other member already used in this conversation",
            true,
            id,
            &ab,
            &a.alias,
            payload(64),
            Some("ALREADY_EXISTS"),
        ),
        (
            "the author's message id again, in another conversation",
            false,
            id,
            &ac,
            &c.alias,
            payload(64),
            None,
        ),
        (
            "a message whose payload is not base64",
            false,
            "values-drill-2",
            &ab,
            &b.alias,
            "not base64!".to_owned(),
            Some("BAD_FRAME"),
        ),
    ] {
        let from = if by_other { &mut other } else { &mut socket };
        match from.message(id, to, conv, &body).await {
            Answer::Silence => out.skip(),
            Answer::Refused(got) if got == "RATE_LIMITED" || got == "STORAGE_UNAVAILABLE" => {
                out.skip();
            }
            answer => match code {
                Some(code) => out.expect(answer == Answer::Refused(code.to_owned()), ORACLE, || {
                    format!(
                        "{what}: {answer:?}, the relay documents an error frame {code} and no ack"
                    )
                }),
                None => out.expect(matches!(answer, Answer::Ack(_)), ORACLE, || {
                    format!("{what}: {answer:?}, the relay documents a new message (an ack)")
                }),
            },
        }
    }
}
