//! E2EE: what a relay must do, and must never do, for end-to-end encryption to mean anything
//! (SPEC §What the service does 1, 5; PROTOCOL §3.3, §9).

use serde_json::{Value, json};
use wire::http::paths;

use super::online;
use crate::ctx::{Ctx, Refusal, s, u};
use crate::model::{Case, CaseResult, Failure};
use crate::{case, ensure};

/// Cases of this area.
pub const CASES: &[Case] = &[
    case!(
        "E2EE-001",
        Must,
        "SPEC §What the service does 1; PROTOCOL §9 (never inspect payload)",
        "The relay forwards an encrypted payload it cannot read byte for byte, and the peer decrypts it with the session key both derived.",
        [],
        opaque_payload
    ),
    case!(
        "E2EE-002",
        Must,
        "PROTOCOL §9 (inject authenticated from)",
        "A `msg` whose client-supplied `from` is forged reaches the peer with `from` = the authenticated sender.",
        [],
        forged_msg_from
    ),
    case!(
        "E2EE-003",
        Must,
        "PROTOCOL §9 (inject authenticated from)",
        "A `typing` whose `from` is forged reaches the peer with the authenticated sender.",
        [],
        forged_typing_from
    ),
    case!(
        "E2EE-004",
        Must,
        "SPEC §What the service does 5",
        "Messages between non-contacts are refused: a message to a stranger (any conversation id) is not acked and never delivered.",
        [],
        stranger_refused
    ),
    case!(
        "E2EE-005",
        Must,
        "SPEC §What the service does 5",
        "A pending (not accepted) friendship does not allow messages.",
        [],
        pending_refused
    ),
    case!(
        "E2EE-006",
        Must,
        "SPEC §What the service does 5",
        "After a rejection the two accounts still cannot message.",
        [],
        rejected_refused
    ),
    case!(
        "E2EE-007",
        Must,
        "SPEC §What the service does 1 (never another user's data)",
        "The friends list never shows other users' friendships.",
        [],
        friends_private
    ),
    case!(
        "E2EE-008",
        Must,
        "SPEC §What the service does 1 (never another user's data)",
        "The storage estimate counts only the caller's own held messages.",
        [],
        storage_private
    ),
    case!(
        "E2EE-009",
        Must,
        "SPEC §Events retract (only own messages)",
        "Retract works only for the author: the peer cannot retract the author's message on the author's side either.",
        [],
        retract_author_only
    ),
    case!(
        "E2EE-010",
        Must,
        "SPEC §What the service does 1",
        "User lookup returns only public data: alias_id, nickname and public keys (no uuid, token or private material).",
        [],
        lookup_public_only
    ),
    case!(
        "E2EE-011",
        Should,
        "PROTOCOL §9 (never inspect payload)",
        "A payload that is valid base64 but not a valid ciphertext is still forwarded unchanged (the relay cannot tell).",
        [],
        garbage_ciphertext
    ),
    case!(
        "E2EE-012",
        Must,
        "PROTOCOL §1.2 F1, §4.3",
        "Both sides of a friendship see each other's registered keys, so the session key they derive is the same (the relay does not substitute keys).",
        [],
        keys_not_substituted
    ),
    case!(
        "E2EE-013",
        Must,
        "SPEC §What the service does 5",
        "A third party cannot send into a conversation it is not a member of, even naming a member as `to`.",
        [],
        outsider_into_conversation
    ),
    case!(
        "E2EE-014",
        Must,
        "SPEC §What the service does 1",
        "An account cannot read another account's offline messages: only the recipient's sync replays them.",
        [],
        offline_private
    ),
];

/// The relay refuses `frame`: never an ack; an error frame of any shape, or silence
/// ([`crate::ctx::Ws::refuses`]). Each case checks that the frame was never delivered before
/// it judges the refusal's wording (the reference profile's), so a verdict of these cases
/// follows what the relay did.
async fn refused(ws: &mut crate::ctx::Ws, frame: &Value) -> Result<Refusal, Failure> {
    ws.refuses(frame).await
}

async fn opaque_payload(ctx: &mut Ctx) -> CaseResult {
    let (p, mut wa, mut wb) = online(ctx).await?;
    let secret_text = format!("attack at dawn {}", ctx.word());
    let (id, m) = ctx.msg(&p.key, &p.b, &p.conv, &secret_text);
    wa.send_msg(&id, &m).await?;
    let d = wb.expect("msg").await?;
    ensure!(d["payload"] == m["payload"], "payload changed in transit");
    let key_b = client_core::crypto::session_key(
        &p.b.identity.ecdh_key,
        &p.a.identity.ecdh_key.public_key(),
        &p.conv,
    );
    ensure!(
        Ctx::decrypt(&key_b, s(&d, "payload")?)? == secret_text,
        "the peer decrypts something else"
    );
    Ok(())
}

async fn forged_msg_from(ctx: &mut Ctx) -> CaseResult {
    let (p, mut wa, mut wb) = online(ctx).await?;
    let (id, mut m) = ctx.msg(&p.key, &p.b, &p.conv, "who am i");
    m["from"] = Value::from(p.b.alias.as_str());
    wa.send_msg(&id, &m).await?;
    let d = wb.expect("msg").await?;
    ensure!(
        s(&d, "from")? == p.a.alias,
        "forged from {} reached the peer",
        d["from"]
    );
    Ok(())
}

async fn forged_typing_from(ctx: &mut Ctx) -> CaseResult {
    let (p, mut wa, mut wb) = online(ctx).await?;
    wa.send(&json!({"type": "typing", "to": p.b.alias, "conv_id": p.conv, "from": "mallory", "crypto_v": 1})).await?;
    let t = wb.expect("typing").await?;
    ensure!(s(&t, "from")? == p.a.alias, "typing from is {}", t["from"]);
    Ok(())
}

async fn stranger_refused(ctx: &mut Ctx) -> CaseResult {
    let p = ctx.pair().await?;
    let c = ctx.account().await?;
    let mut wa = ctx.connect(&p.a, "A").await?;
    let mut wc = ctx.connect(&c, "C").await?;
    let (_, m1) = ctx.msg(&p.key, &c, &p.conv, "to a stranger via A-B conv");
    let r1 = refused(&mut wa, &m1).await?;
    let fake = ctx.uuid();
    let (_, m2) = ctx.msg(&p.key, &c, &fake, "to a stranger via invented conv");
    let r2 = refused(&mut wa, &m2).await?;
    wc.expect_none("msg").await?;
    r1.in_our_words(None)?;
    r2.in_our_words(None)
}

async fn pending_refused(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let b = ctx.account().await?;
    ctx.request_friend(&a, &b).await?;
    let mut wa = ctx.connect(&a, "A").await?;
    let mut wb = ctx.connect(&b, "B").await?;
    let conv = ctx.uuid();
    let key = client_core::crypto::session_key(
        &a.identity.ecdh_key,
        &b.identity.ecdh_key.public_key(),
        &conv,
    );
    let (_, m) = ctx.msg(&key, &b, &conv, "too early");
    let refusal = refused(&mut wa, &m).await?;
    wb.expect_none("msg").await?;
    refusal.in_our_words(None)
}

async fn rejected_refused(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let b = ctx.account().await?;
    let fid = ctx.request_friend(&a, &b).await?;
    ctx.req(
        http::Method::POST,
        &format!("/api/v1/friends/{}/reject", crate::ctx::id_text(&fid)),
        Some(&b.token),
        None,
    )
    .await?
    .ok()?;
    let mut wa = ctx.connect(&a, "A").await?;
    let mut wb = ctx.connect(&b, "B").await?;
    let conv = ctx.uuid();
    let key = client_core::crypto::session_key(
        &a.identity.ecdh_key,
        &b.identity.ecdh_key.public_key(),
        &conv,
    );
    let (_, m) = ctx.msg(&key, &b, &conv, "rejected");
    let refusal = refused(&mut wa, &m).await?;
    wb.expect_none("msg").await?;
    refusal.in_our_words(None)
}

async fn friends_private(ctx: &mut Ctx) -> CaseResult {
    let _p = ctx.pair().await?;
    let c = ctx.account().await?;
    let v = ctx.get(paths::FRIENDS, Some(&c.token)).await?.ok()?;
    ensure!(v == json!([]), "a stranger's friends list shows {v}");
    Ok(())
}

async fn storage_private(ctx: &mut Ctx) -> CaseResult {
    let p = ctx.pair().await?;
    let c = ctx.account().await?;
    let mut wa = ctx.connect(&p.a, "A").await?;
    let (id, m) = ctx.msg(&p.key, &p.b, &p.conv, "held for B");
    wa.send_msg(&id, &m).await?;
    let vb = ctx
        .get(paths::STORAGE_ESTIMATE, Some(&p.b.token))
        .await?
        .ok()?;
    let vc = ctx
        .get(paths::STORAGE_ESTIMATE, Some(&c.token))
        .await?
        .ok()?;
    ensure!(
        u(&vb, "message_count")? >= 1,
        "B's estimate does not count B's held message: {vb}"
    );
    ensure!(
        u(&vc, "message_count")? == 0 && u(&vc, "used_bytes")? == 0,
        "a stranger's estimate counts others' messages: {vc}"
    );
    Ok(())
}

async fn retract_author_only(ctx: &mut Ctx) -> CaseResult {
    let (p, mut wa, mut wb) = online(ctx).await?;
    let (id, m) = ctx.msg(&p.key, &p.b, &p.conv, "keep me");
    wa.send_msg(&id, &m).await?;
    wb.expect("msg").await?;
    wb.send(
        &json!({"type": "retract", "id": id, "to": p.a.alias, "conv_id": p.conv, "crypto_v": 1}),
    )
    .await?;
    wa.expect_none("retract").await?;
    wb.expect_none("retract").await
}

async fn lookup_public_only(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let b = ctx.account().await?;
    let v = ctx
        .get(&format!("/api/v1/users/{}", b.alias), Some(&a.token))
        .await?
        .ok()?;
    let Some(obj) = v.as_object() else {
        crate::fail!("F5 is not an object: {v}")
    };
    for k in obj.keys() {
        let lk = k.to_lowercase();
        ensure!(
            !(lk.contains("private")
                || lk.contains("mnemonic")
                || lk.contains("token")
                || lk.contains("secret")
                || lk == "uuid"
                || lk == "user_uuid"),
            "lookup exposes `{k}`"
        );
    }
    ensure!(!v.to_string().contains(&b.uuid), "lookup exposes B's uuid");
    Ok(())
}

async fn garbage_ciphertext(ctx: &mut Ctx) -> CaseResult {
    let (p, mut wa, mut wb) = online(ctx).await?;
    let id = ctx.uuid();
    let payload = client_core::encoding::to_base64(&ctx.bytes(40));
    let m = json!({"type": "msg", "id": id, "to": p.b.alias, "conv_id": p.conv, "crypto_v": 1, "payload": payload});
    wa.send_msg(&id, &m).await?;
    let d = wb.expect("msg").await?;
    ensure!(d["payload"] == m["payload"], "payload changed");
    Ok(())
}

async fn keys_not_substituted(ctx: &mut Ctx) -> CaseResult {
    let p = ctx.pair().await?;
    let ea = ctx
        .friend_entry_once(&p.b, &p.a.alias, |_| true)
        .await?
        .ok_or("no F1 entry for A")?;
    let eb = ctx
        .friend_entry_once(&p.a, &p.b.alias, |_| true)
        .await?
        .ok_or("no F1 entry for B")?;
    ensure!(
        s(&ea, "x25519_public_key")? == p.a.x_b64(),
        "B is shown a different X25519 key for A"
    );
    ensure!(
        s(&eb, "x25519_public_key")? == p.b.x_b64(),
        "A is shown a different X25519 key for B"
    );
    ensure!(
        s(&ea, "ed25519_public_key")? == p.a.ed_b64()
            && s(&eb, "ed25519_public_key")? == p.b.ed_b64(),
        "Ed25519 keys substituted"
    );
    Ok(())
}

async fn outsider_into_conversation(ctx: &mut Ctx) -> CaseResult {
    let (p, _wa, mut wb) = online(ctx).await?;
    let c = ctx.account().await?;
    let mut wc = ctx.connect(&c, "C").await?;
    let (_, m) = ctx.msg(&p.key, &p.b, &p.conv, "intruder");
    let refusal = refused(&mut wc, &m).await?;
    wb.expect_none("msg").await?;
    refusal.in_our_words(None)
}

async fn offline_private(ctx: &mut Ctx) -> CaseResult {
    let p = ctx.pair().await?;
    let c = ctx.account().await?;
    let mut wa = ctx.connect(&p.a, "A").await?;
    let (id, m) = ctx.msg(&p.key, &p.b, &p.conv, "for B only");
    wa.send_msg(&id, &m).await?;
    let mut wc = ctx.connect(&c, "C").await?;
    wc.expect_none("msg").await?;
    let mut wb = ctx.connect(&p.b, "B").await?;
    wb.expect("msg").await?;
    Ok(())
}
