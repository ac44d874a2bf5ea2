//! REG: proof of work and registration (SPEC §Authentication 2, 5; PROTOCOL §1.1 A1, A2, §1.1.1-2).

use http::Method;
use serde_json::{Value, json};
use wire::http::paths;

use crate::ctx::{Ctx, Kind, fields, s};
use crate::model::{Case, CaseResult, Failure};
use crate::{case, ensure};

/// Cases of this area.
pub const CASES: &[Case] = &[
    case!(
        "REG-001",
        Must,
        "PROTOCOL §1.1 A1",
        "POST /api/v1/pow/challenge with `{}` returns `{challenge_string: string, difficulty: int}`.",
        [],
        pow_challenge
    ),
    case!(
        "REG-002",
        Must,
        "PROTOCOL §0, §9",
        "The relay accepts an empty-body POST on /api/v1/pow/challenge (the Android client sends no body).",
        [],
        pow_challenge_empty_body
    ),
    case!(
        "REG-003",
        Must,
        "SPEC §Authentication 2; PROTOCOL §1.1 A2",
        "POST /api/v1/register with both public keys, a nickname and a solved pow_nonce returns 200/201 `{uuid, alias_id}`.",
        [],
        register
    ),
    case!(
        "REG-004",
        Must,
        "SPEC §Endpoints register; §Authentication 5",
        "Registering an already-registered public key answers 409 and returns the existing account's uuid and alias_id.",
        [],
        register_409_recovery
    ),
    case!(
        "REG-005",
        Must,
        "PROTOCOL §1.1 A2",
        "Registration without a pow_nonce is refused with 400 when the relay requires proof of work.",
        [],
        register_without_pow
    ),
    case!(
        "REG-006",
        Must,
        "PROTOCOL §1.1 A2, §1.1.1",
        "Registration with a pow_nonce that does not solve the challenge is refused with 400.",
        [],
        register_wrong_pow
    ),
    case!(
        "REG-007",
        Must,
        "PROTOCOL §1.1 A2",
        "Public keys are standard padded base64 of 32 bytes; a malformed key is refused (4xx; our relay: 400) with an error body.",
        [],
        register_malformed_key
    ),
    case!(
        "REG-008",
        Must,
        "PROTOCOL §9",
        "The relay accepts unknown extra JSON fields in the registration body.",
        [],
        register_extra_fields
    ),
    case!(
        "REG-009",
        Should,
        "PROTOCOL §1.1.2",
        "The alias_id assigned at registration matches `[a-z0-9_]{3,32}` and the uuid is a 36-character UUID, as the web client validates them.",
        [],
        register_id_formats
    ),
    case!(
        "REG-010",
        Must,
        "SPEC §Authentication 5",
        "Registration is idempotent for the same keys: repeating it returns the same account every time.",
        [],
        register_idempotent
    ),
    case!(
        "REG-011",
        Should,
        "PROTOCOL §1.1.1",
        "A proof-of-work challenge is single use: a solved nonce cannot register a second account.",
        [],
        pow_single_use
    ),
];

async fn pow_challenge(ctx: &mut Ctx) -> CaseResult {
    let v = ctx
        .post(paths::POW_CHALLENGE, None, &json!({}))
        .await?
        .ok()?;
    fields(
        "A1",
        &v,
        &[
            ("challenge_string", Kind::NonEmpty),
            ("difficulty", Kind::Uint),
        ],
    )
}

async fn pow_challenge_empty_body(ctx: &mut Ctx) -> CaseResult {
    let v = ctx
        .req(Method::POST, paths::POW_CHALLENGE, None, None)
        .await?
        .ok()?;
    fields(
        "A1 (no body)",
        &v,
        &[
            ("challenge_string", Kind::NonEmpty),
            ("difficulty", Kind::Uint),
        ],
    )
}

async fn register(ctx: &mut Ctx) -> CaseResult {
    let id = ctx.identity()?;
    let body = ctx.register_body(&id, "reg003").await?;
    let r = ctx.post(paths::REGISTER, None, &body).await?;
    ensure!(
        r.status == 200 || r.status == 201,
        "expected 200 or 201, got {}",
        r.status
    );
    fields(
        "A2",
        &r.json()?,
        &[("uuid", Kind::NonEmpty), ("alias_id", Kind::NonEmpty)],
    )
}

async fn register_409_recovery(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let body = ctx.register_body(&a.identity, "again").await?;
    let v = ctx.post(paths::REGISTER, None, &body).await?.expect(409)?;
    ensure!(
        s(&v, "uuid")? == a.uuid,
        "409 body uuid {} is not the existing account's {}",
        s(&v, "uuid")?,
        a.uuid
    );
    ensure!(
        s(&v, "alias_id")? == a.alias,
        "409 body alias_id is not the existing account's {}",
        a.alias
    );
    Ok(())
}

/// A fresh challenge and the relay's difficulty; a skip when the relay requires no proof of
/// work (difficulty 0: nothing about a challenge can then be judged).
pub(super) async fn difficulty(ctx: &mut Ctx) -> Result<(String, u64), Failure> {
    let v = ctx
        .post(paths::POW_CHALLENGE, None, &json!({}))
        .await?
        .ok()?;
    let d = v.get("difficulty").and_then(Value::as_u64).unwrap_or(0);
    if d == 0 {
        return Err(Failure::Skip(
            "the relay requires no proof of work (difficulty 0)".into(),
        ));
    }
    Ok((s(&v, "challenge_string")?.to_owned(), d))
}

async fn register_without_pow(ctx: &mut Ctx) -> CaseResult {
    difficulty(ctx).await?;
    let id = ctx.identity()?;
    let body = json!({"ed25519_public_key": id.signing_public_b64(), "x25519_public_key": id.ecdh_public_b64(), "nickname": "nopow"});
    ctx.post(paths::REGISTER, None, &body)
        .await?
        .expect_error(400)?;
    Ok(())
}

async fn register_wrong_pow(ctx: &mut Ctx) -> CaseResult {
    let (challenge, d) = difficulty(ctx).await?;
    // Find a nonce that does NOT solve the challenge.
    let nonce = (0u64..)
        .map(|i| i.to_string())
        .find(|n| {
            !client_core::pow::pow_is_solved(&challenge, n, u32::try_from(d).unwrap_or(u32::MAX))
        })
        .unwrap_or_default();
    let id = ctx.identity()?;
    let body = json!({"ed25519_public_key": id.signing_public_b64(), "x25519_public_key": id.ecdh_public_b64(), "nickname": "badpow", "pow_nonce": nonce});
    ctx.post(paths::REGISTER, None, &body)
        .await?
        .expect_error(400)?;
    Ok(())
}

async fn register_malformed_key(ctx: &mut Ctx) -> CaseResult {
    let id = ctx.identity()?;
    let mut body = ctx.register_body(&id, "badkey").await?;
    body["ed25519_public_key"] = Value::from("AAAA");
    ctx.post(paths::REGISTER, None, &body).await?.refused(400)?;
    Ok(())
}

async fn register_extra_fields(ctx: &mut Ctx) -> CaseResult {
    let id = ctx.identity()?;
    let mut body = ctx.register_body(&id, "extra").await?;
    body["device_model"] = Value::from("conformance");
    body["nested"] = json!({"a": [1, 2]});
    ctx.post(paths::REGISTER, None, &body).await?.ok()?;
    Ok(())
}

async fn register_id_formats(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let alias_ok = (3..=32).contains(&a.alias.len())
        && a.alias
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    ensure!(
        alias_ok,
        "alias_id {:?} does not match [a-z0-9_]{{3,32}}",
        a.alias
    );
    let uuid_ok = a.uuid.len() == 36
        && a.uuid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
        && [8, 13, 18, 23]
            .iter()
            .all(|&i| a.uuid.as_bytes().get(i) == Some(&b'-'));
    ensure!(uuid_ok, "uuid {:?} is not a 36-character UUID", a.uuid);
    Ok(())
}

async fn register_idempotent(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    for _ in 0..2 {
        let body = ctx.register_body(&a.identity, "again").await?;
        let v = ctx.post(paths::REGISTER, None, &body).await?.expect(409)?;
        ensure!(
            s(&v, "uuid")? == a.uuid && s(&v, "alias_id")? == a.alias,
            "a repeated registration returned another account: {v}"
        );
    }
    let token = ctx.login(&a.uuid, &a.identity).await?;
    ensure!(!token.is_empty(), "the recovered account cannot log in");
    Ok(())
}

async fn pow_single_use(ctx: &mut Ctx) -> CaseResult {
    // No other challenge is fetched from this case's address, so only reuse could succeed.
    let first = ctx.identity()?;
    let body = ctx.register_body(&first, "first").await?;
    if body.get("pow_nonce").is_none() {
        return Err(Failure::Skip(
            "the relay requires no proof of work (difficulty 0)".into(),
        ));
    }
    ctx.post(paths::REGISTER, None, &body).await?.ok()?;
    let second = ctx.identity()?;
    let mut again = body.clone();
    again["ed25519_public_key"] = Value::from(second.signing_public_b64());
    again["x25519_public_key"] = Value::from(second.ecdh_public_b64());
    ctx.post(paths::REGISTER, None, &again)
        .await?
        .refused(400)?;
    Ok(())
}
