//! MEDIA: encrypted chunked upload and download through the relay (SPEC §What the service does 8;
//! PROTOCOL §1.6 M1-M4, §4.6).

use bytes::Bytes;
use client_core::crypto::media::{decrypt_media, encrypt_media};
use http::Method;
use serde_json::json;
use wire::http::paths;

use crate::ctx::{Account, Ctx, Kind, fields, s};
use crate::model::{Case, CaseResult, Failure};
use crate::{case, ensure};

/// Cases of this area.
pub const CASES: &[Case] = &[
    case!(
        "MEDIA-001",
        Must,
        "PROTOCOL §1.6 M1",
        "POST /api/v1/media/upload-parts/init `{content_type: application/octet-stream}` returns `{upload_id, media_key}`.",
        [],
        init
    ),
    case!(
        "MEDIA-002",
        Must,
        "PROTOCOL §1.6 M2",
        "POST …/{upload_id}/chunk?mediaKey=&partNumber=1 with one encrypted chunk frame returns `{etag}`.",
        [],
        chunk
    ),
    case!(
        "MEDIA-003",
        Must,
        "SPEC §What the service does 8; PROTOCOL §1.6 M3-M4",
        "After M3 complete, GET /api/v1/media/download?key= returns the uploaded ciphertext byte for byte, and the peer decrypts it with the session key.",
        [],
        roundtrip
    ),
    case!(
        "MEDIA-004",
        Must,
        "SPEC §What the service does 8",
        "A download with a key that was never uploaded is refused (a 4xx; our relay: 404).",
        [],
        unknown_key
    ),
    case!(
        "MEDIA-005",
        Must,
        "SPEC §What the service does 1 (never another user's data)",
        "A chunk for another account's upload id is refused (a 4xx; under the reference profile 403 or 404, our relay's).",
        [],
        foreign_upload
    ),
    case!(
        "MEDIA-006",
        Must,
        "SPEC §Authentication 8",
        "Media download needs a JWT (a 4xx without; our relay: 401).",
        [],
        download_needs_jwt
    ),
    case!(
        "MEDIA-007",
        Should,
        "PROTOCOL §1.6 M3",
        "Completing with an etag the relay did not issue is refused with a 4xx error body.",
        [],
        wrong_etag
    ),
    case!(
        "MEDIA-008",
        Must,
        "PROTOCOL §1.6 M1-M4",
        "A multi-part upload (two parts, in order) downloads as the concatenation of its chunk frames.",
        [],
        two_parts
    ),
];

/// Percent-encodes a query value.
pub(crate) fn enc(v: &str) -> String {
    v.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

async fn init_upload(ctx: &mut Ctx, a: &Account) -> Result<(String, String), Failure> {
    let v = ctx
        .post(
            paths::MEDIA_INIT,
            Some(&a.token),
            &json!({"content_type": "application/octet-stream"}),
        )
        .await?
        .ok()?;
    Ok((
        s(&v, "upload_id")?.to_owned(),
        s(&v, "media_key")?.to_owned(),
    ))
}

async fn put_chunk(
    ctx: &mut Ctx,
    a: &Account,
    upload: &str,
    key: &str,
    n: u32,
    frame: Vec<u8>,
) -> Result<crate::ctx::Resp, Failure> {
    let path = format!(
        "/api/v1/media/upload-parts/{}/chunk?mediaKey={}&partNumber={n}",
        enc(upload),
        enc(key)
    );
    ctx.req_raw(
        Method::POST,
        &path,
        Some(&a.token),
        Bytes::from(frame),
        Some("application/octet-stream"),
        &[],
    )
    .await
}

pub(crate) async fn upload(
    ctx: &mut Ctx,
    a: &Account,
    frames: Vec<Vec<u8>>,
) -> Result<String, Failure> {
    let (upload, key) = init_upload(ctx, a).await?;
    let mut parts = Vec::new();
    for (i, f) in frames.into_iter().enumerate() {
        let n = u32::try_from(i + 1).unwrap_or(u32::MAX);
        let v = put_chunk(ctx, a, &upload, &key, n, f).await?.ok()?;
        parts.push(json!({"etag": s(&v, "etag")?.replace('"', ""), "part_number": n}));
    }
    ctx.post(
        &format!("/api/v1/media/upload-parts/{}/complete", enc(&upload)),
        Some(&a.token),
        &json!({"media_key": key, "parts": parts}),
    )
    .await?
    .ok()?;
    Ok(key)
}

async fn init(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let v = ctx
        .post(
            paths::MEDIA_INIT,
            Some(&a.token),
            &json!({"content_type": "application/octet-stream"}),
        )
        .await?
        .ok()?;
    fields(
        "M1",
        &v,
        &[("upload_id", Kind::NonEmpty), ("media_key", Kind::NonEmpty)],
    )
}

async fn chunk(ctx: &mut Ctx) -> CaseResult {
    let p = ctx.pair().await?;
    let (upload, key) = init_upload(ctx, &p.a).await?;
    let frames = encrypt_media(&p.key, b"chunk", ctx.rng());
    let f = frames.into_iter().next().unwrap_or_default();
    let v = put_chunk(ctx, &p.a, &upload, &key, 1, f).await?.ok()?;
    fields("M2", &v, &[("etag", Kind::NonEmpty)])
}

async fn roundtrip(ctx: &mut Ctx) -> CaseResult {
    let p = ctx.pair().await?;
    let plain = ctx.bytes(3000);
    let frames = encrypt_media(&p.key, &plain, ctx.rng());
    let expected: Vec<u8> = frames.concat();
    let key = upload(ctx, &p.a, frames).await?;
    let r = ctx
        .get(
            &format!("{}?key={}", paths::MEDIA_DOWNLOAD, enc(&key)),
            Some(&p.b.token),
        )
        .await?;
    ensure!(r.status == 200, "download answered {}", r.status);
    ensure!(
        r.body.as_ref() == expected.as_slice(),
        "downloaded {} bytes differ from the {} uploaded",
        r.body.len(),
        expected.len()
    );
    let got = decrypt_media(&p.key, &r.body)
        .map_err(|e| format!("the peer cannot decrypt the download: {e}"))?;
    ensure!(got == plain, "decrypted media differs");
    Ok(())
}

async fn unknown_key(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let w = ctx.word();
    ctx.get(
        &format!("{}?key=nokey{w}", paths::MEDIA_DOWNLOAD),
        Some(&a.token),
    )
    .await?
    .refused(404)?;
    Ok(())
}

async fn foreign_upload(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let b = ctx.account().await?;
    let (upload, key) = init_upload(ctx, &a).await?;
    let frame = ctx.bytes(64);
    let r = put_chunk(ctx, &b, &upload, &key, 1, frame).await?;
    // Any refusal keeps the upload its owner's; our relay's is 403 or 404.
    ensure!(
        !ctx.reference() || r.status == 403 || r.status == 404,
        "another account's chunk answered {}",
        r.status
    );
    r.expect_client_error()?;
    Ok(())
}

async fn download_needs_jwt(ctx: &mut Ctx) -> CaseResult {
    ctx.get(&format!("{}?key=anything", paths::MEDIA_DOWNLOAD), None)
        .await?
        .refused(401)?;
    Ok(())
}

async fn wrong_etag(ctx: &mut Ctx) -> CaseResult {
    let p = ctx.pair().await?;
    let (upload, key) = init_upload(ctx, &p.a).await?;
    let frames = encrypt_media(&p.key, b"x", ctx.rng());
    put_chunk(ctx, &p.a, &upload, &key, 1, frames.concat())
        .await?
        .ok()?;
    ctx.post(
        &format!("/api/v1/media/upload-parts/{}/complete", enc(&upload)),
        Some(&p.a.token),
        &json!({"media_key": key, "parts": [{"etag": "not-the-etag", "part_number": 1}]}),
    )
    .await?
    .expect_client_error()?;
    Ok(())
}

async fn two_parts(ctx: &mut Ctx) -> CaseResult {
    let p = ctx.pair().await?;
    let a = encrypt_media(&p.key, b"first part", ctx.rng());
    let b = encrypt_media(&p.key, b"second part", ctx.rng());
    let frames: Vec<Vec<u8>> = a.into_iter().chain(b).collect();
    let expected = frames.concat();
    let key = upload(ctx, &p.a, frames).await?;
    let r = ctx
        .get(
            &format!("{}?key={}", paths::MEDIA_DOWNLOAD, enc(&key)),
            Some(&p.a.token),
        )
        .await?;
    ensure!(
        r.status == 200 && r.body.as_ref() == expected.as_slice(),
        "two-part download differs ({} {} bytes)",
        r.status,
        r.body.len()
    );
    Ok(())
}
