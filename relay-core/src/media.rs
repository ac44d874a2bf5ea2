//! Media (M1-M4): a blind proxy for encrypted, chunked multipart uploads.
//!
//! * **M1 init** (JWT, 10 per user per minute, at most `MAX_OPEN_UPLOADS_PER_USER` unfinished
//!   uploads): returns `upload_id` (`up-` + 24 hex) and an unguessable `media_key`
//!   (`m-` + base64url of 24 random bytes = 192 bits from the relay's seeded RNG).
//! * **M2 chunk** (JWT, uploader only): raw body, query `mediaKey` and `partNumber`
//!   (`1..=MAX_MEDIA_PARTS`), 1..=`MAX_MEDIA_PART_BYTES` bytes; the part may be re-sent (a
//!   client retry overwrites it). Returns `{"etag": <hex SHA-256 of the part>}`, unquoted.
//! * **M3 complete** (JWT, uploader only): the parts must be exactly `1..=n` in order, each
//!   uploaded, each etag equal (surrounding `"` ignored), total ≤ `MAX_MEDIA_OBJECT_BYTES`.
//!   Parts uploaded beyond `n` are dropped. Completing again with the same list answers the
//!   same (a retry after a lost response); with another list 409 `INVALID_STATE`.
//! * **M4 download** (JWT, `?key=`): **any authenticated account that knows the key** gets the
//!   concatenation of the parts (`application/octet-stream`). The key is a 192-bit capability
//!   shared only inside E2EE messages (`[img]<key>`), and the bytes are ciphertext under the
//!   conversation key, so restricting downloads to the uploader's contacts would add nothing
//!   but a lookup (and break forwarding a media message to a third contact).
//! * **Expiry**: a completed object lives `MEDIA_TTL_MS` (24 h) from completion, an unfinished
//!   upload `INCOMPLETE_UPLOAD_IDLE_MS` (10 min) from its init or last part, and never past
//!   `INCOMPLETE_UPLOAD_TTL_MS` (2 h) from init; both are purged by `handle_timeout`.
//! * **Quota**: an account holds at most `MAX_MEDIA_BYTES_PER_USER` (the storage quota,
//!   100 MiB) of parts, unfinished and completed alike, in at most `MAX_OPEN_UPLOADS_PER_USER`
//!   unfinished uploads; `storage/estimate` counts them all.
//!
//! Metadata is one durable row per upload in [`Table::Media`](crate::store::Table::Media); bytes live in the
//! [`crate::blob::BlobStore`] (see its module doc for the write / delete ordering).
//! Refusals: unknown upload, wrong key, expired or unfinished object: 404 `MEDIA_NOT_FOUND`;
//! another account's upload: 403 `FORBIDDEN`; bad query / parts list: 400 `INVALID_FIELD`;
//! too large: 413 `BODY_TOO_LARGE`; too many uploads: 429 `RATE_LIMITED` / 403
//! `QUOTA_EXCEEDED`; blob backend failure: 503 `STORAGE_UNAVAILABLE` (not fail-stop: the
//! metadata store is intact and nothing was committed).

use std::collections::BTreeMap;

use base64::Engine as _;
use sha2::{Digest as _, Sha256};
use wire::http::{
    ChunkResponse, CompleteUploadRequest, CompleteUploadResponse, CompletedPart, UploadInitRequest,
    UploadInitResponse, decode_body,
};
use wire::limits::{MAX_MEDIA_OBJECT_BYTES, MAX_MEDIA_PART_BYTES, MAX_MEDIA_PARTS};
use wire::{ErrorCode, MediaKey, UnixMs, UploadId, UserUuid};

use crate::blob::BlobError;
use crate::cx::Cx;
use crate::http::{ApiError, HttpRequest, HttpResponse, query_param};
use crate::ids::hex;
use crate::limits::{
    INCOMPLETE_UPLOAD_IDLE_MS, INCOMPLETE_UPLOAD_TTL_MS, MAX_MEDIA_BYTES_PER_USER,
    MAX_OPEN_UPLOADS_PER_USER, MEDIA_TTL_MS, MEDIA_UPLOADS_PER_MIN_PER_USER,
};
use crate::planted::planted;
use crate::uploads::{PartRow, UploadRow};

/// Minimal percent-decoding of a query value (`%XX`; `+` is kept: keys never contain it).
fn pct_decode(raw: &str) -> Option<String> {
    let b = raw.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let h = b.get(i + 1..i + 3)?;
            let h = std::str::from_utf8(h).ok()?;
            out.push(u8::from_str_radix(h, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn query_key(query: &str, name: &str) -> Result<MediaKey, ApiError> {
    let raw = query_param(query, name)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| {
            ApiError::new(
                ErrorCode::INVALID_FIELD,
                format!("query parameter `{name}` is required"),
            )
        })?;
    let decoded = pct_decode(raw).ok_or_else(|| {
        ApiError::new(
            ErrorCode::INVALID_FIELD,
            format!("query parameter `{name}` is not valid percent-encoding"),
        )
    })?;
    // An invalid key cannot name an object: not found rather than a parse detail.
    MediaKey::parse(&decoded).map_err(|_| not_found())
}

fn not_found() -> ApiError {
    ApiError::new(
        ErrorCode::MEDIA_NOT_FOUND,
        "no such media object or upload (unknown, expired or not completed)",
    )
}

fn blob_error(e: &BlobError) -> ApiError {
    match e {
        BlobError::NotFound { .. } => ApiError::new(
            ErrorCode::MEDIA_NOT_FOUND,
            "the object's data is no longer available",
        ),
        _ => ApiError::new(
            ErrorCode::STORAGE_UNAVAILABLE,
            "the media store is unavailable; nothing was changed, retry later",
        ),
    }
}

fn strip_quotes(etag: &str) -> &str {
    etag.trim().trim_matches('"')
}

/// Checks an M3 parts list against the stored parts: exactly `1..=n` in order, each uploaded
/// with the same etag. Returns `n`.
fn check_parts(row: &UploadRow, parts: &[CompletedPart]) -> Result<u32, ApiError> {
    let bad = |m: String| ApiError::new(ErrorCode::INVALID_FIELD, m);
    if parts.is_empty() {
        return Err(bad("parts must list at least one part".into()));
    }
    if parts.len() > MAX_MEDIA_PARTS as usize {
        return Err(bad(format!("at most {MAX_MEDIA_PARTS} parts")));
    }
    for (i, p) in parts.iter().enumerate() {
        let expected = u32::try_from(i + 1).unwrap_or(u32::MAX);
        if p.part_number != expected {
            return Err(bad(format!(
                "parts must be numbered 1..n in order: entry {i} has part_number {}, expected {expected}",
                p.part_number
            )));
        }
        let Some(stored) = row.parts.get(&p.part_number) else {
            return Err(bad(format!("part {expected} was not uploaded")));
        };
        if strip_quotes(&p.etag) != stored.etag {
            return Err(bad(format!("the etag of part {expected} does not match")));
        }
    }
    Ok(u32::try_from(parts.len()).unwrap_or(u32::MAX))
}

impl Cx<'_> {
    /// The bytes the relay holds for `user`'s media (unfinished uploads and live objects);
    /// `storage/estimate` adds it to `used_bytes`.
    pub(crate) fn media_bytes_of(&self, user: &UserUuid) -> u64 {
        self.state
            .media()
            .by_owner
            .get(user)
            .into_iter()
            .flatten()
            .filter_map(|id| self.state.media().uploads.get(id))
            .map(UploadRow::size)
            .sum()
    }

    /// Looks up `upload_id` for an M2 / M3 call by `user` with `key`.
    fn owned_upload(
        &self,
        user: &UserUuid,
        upload_id: &str,
        key: &MediaKey,
        now: UnixMs,
    ) -> Result<UploadRow, ApiError> {
        let id = UploadId::parse(upload_id).map_err(|_| not_found())?;
        let row = self
            .state
            .media()
            .uploads
            .get(&id)
            .filter(|r| r.media_key == *key && now < r.expires_at)
            .ok_or_else(not_found)?;
        // PLANTED BUG (UploadByAnyone): whoever knows an upload's id and key may send its
        // parts and complete it.
        if row.owner != *user && !planted!(self.config, UploadByAnyone) {
            return Err(ApiError::new(
                ErrorCode::FORBIDDEN,
                "this upload belongs to another account",
            ));
        }
        Ok(row.clone())
    }

    /// M1.
    pub(crate) fn http_media_init(
        &mut self,
        now: UnixMs,
        req: &HttpRequest,
    ) -> Result<HttpResponse, ApiError> {
        let (user, _) = self.authenticate(now, req)?;
        // The content type is informative only (always application/octet-stream by design).
        let _body: UploadInitRequest = decode_body(&req.body)?;
        if !self.state.media().init_limit.check(now.get(), &user) {
            return Err(ApiError::rate_limited(
                format!("at most {MEDIA_UPLOADS_PER_MIN_PER_USER} uploads per minute; retry later"),
                self.state
                    .media()
                    .init_limit
                    .retry_after_ms(now.get(), &user),
            ));
        }
        let open = self
            .state
            .media()
            .by_owner
            .get(&user)
            .into_iter()
            .flatten()
            .filter_map(|id| self.state.media().uploads.get(id))
            .filter(|r| r.completed.is_none())
            .count();
        if open >= MAX_OPEN_UPLOADS_PER_USER {
            return Err(ApiError::new(
                ErrorCode::QUOTA_EXCEEDED,
                format!(
                    "at most {MAX_OPEN_UPLOADS_PER_USER} unfinished uploads per account; complete or abandon one"
                ),
            ));
        }
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let (upload_id, media_key) = loop {
            let u = UploadId::parse(&format!("up-{}", hex(&self.ids.bytes::<12>())));
            let k = MediaKey::parse(&format!("m-{}", b64.encode(self.ids.bytes::<24>())));
            if let (Ok(u), Ok(k)) = (u, k)
                && !self.state.media().uploads.contains_key(&u)
                && !self.state.media().by_key.contains_key(&k)
            {
                break (u, k);
            }
        };
        self.state.upload_limit().record(now.get(), &user);
        self.state.put_upload(UploadRow {
            upload_id: upload_id.clone(),
            media_key: media_key.clone(),
            owner: user,
            created_at: now,
            parts: BTreeMap::new(),
            completed: None,
            expires_at: now.plus_ms(INCOMPLETE_UPLOAD_IDLE_MS),
        });
        Ok(HttpResponse::json(
            200,
            &UploadInitResponse {
                upload_id,
                media_key,
            },
        ))
    }

    /// M2.
    pub(crate) fn http_media_chunk(
        &mut self,
        now: UnixMs,
        req: &HttpRequest,
        upload_id: &str,
    ) -> Result<HttpResponse, ApiError> {
        let (user, _) = self.authenticate(now, req)?;
        let key = query_key(&req.query, "mediaKey")?;
        let part = part_of(req)?;
        let len = req.body.len();
        let mut row = self.owned_upload(&user, upload_id, &key, now)?;
        if row.completed.is_some() {
            return Err(ApiError::new(
                ErrorCode::INVALID_STATE,
                "this upload is already completed",
            ));
        }
        let size = len as u64;
        let replaced = row.parts.get(&part).map_or(0, |p| p.size);
        let total = row.size() - replaced + size;
        if total > MAX_MEDIA_OBJECT_BYTES {
            return Err(ApiError::new(
                ErrorCode::BODY_TOO_LARGE,
                format!(
                    "the object would be {total} bytes, the limit is {MAX_MEDIA_OBJECT_BYTES} bytes"
                ),
            ));
        }
        // The replaced part is the caller's own (`owned_upload`); saturating all the same, so
        // a broken ownership check cannot turn into an arithmetic panic.
        let held = self.media_bytes_of(&user).saturating_sub(replaced) + size;
        if held > MAX_MEDIA_BYTES_PER_USER {
            return Err(ApiError::new(
                ErrorCode::QUOTA_EXCEEDED,
                format!(
                    "this account would hold {held} bytes of media, the limit is {MAX_MEDIA_BYTES_PER_USER} bytes"
                ),
            ));
        }
        let etag = hex(&Sha256::digest(&req.body));
        // Bytes first (durably), then the metadata commit that names them.
        self.blobs_mut()
            .put_part(row.upload_id.as_str(), part, &req.body)
            .map_err(|e| blob_error(&e))?;
        row.parts.insert(
            part,
            PartRow {
                etag: etag.clone(),
                size,
            },
        );
        row.expires_at = now
            .plus_ms(INCOMPLETE_UPLOAD_IDLE_MS)
            .min(row.created_at.plus_ms(INCOMPLETE_UPLOAD_TTL_MS));
        self.state.put_upload(row);
        Ok(HttpResponse::json(200, &ChunkResponse { etag }))
    }

    /// M3.
    pub(crate) fn http_media_complete(
        &mut self,
        now: UnixMs,
        req: &HttpRequest,
        upload_id: &str,
    ) -> Result<HttpResponse, ApiError> {
        let (user, _) = self.authenticate(now, req)?;
        let body: CompleteUploadRequest = decode_body(&req.body)?;
        let mut row = self.owned_upload(&user, upload_id, &body.media_key, now)?;
        let checked = check_parts(&row, &body.parts);
        if let Some(done) = row.completed {
            // A retry of the same completion answers the same; anything else is a conflict.
            if checked == Ok(done) {
                return Ok(HttpResponse::json(
                    200,
                    &CompleteUploadResponse {
                        media_key: row.media_key.clone(),
                        size: row.size(),
                    },
                ));
            }
            return Err(ApiError::new(
                ErrorCode::INVALID_STATE,
                "this upload was already completed with other parts",
            ));
        }
        let n = checked?;
        let size: u64 = row.parts.range(..=n).map(|(_, p)| p.size).sum();
        if size > MAX_MEDIA_OBJECT_BYTES {
            return Err(ApiError::new(
                ErrorCode::BODY_TOO_LARGE,
                format!("the object is {size} bytes, the limit is {MAX_MEDIA_OBJECT_BYTES} bytes"),
            ));
        }
        // Parts uploaded beyond `n` are dropped (their blobs after the commit).
        let extra: Vec<u32> = row.parts.range(n + 1..).map(|(k, _)| *k).collect();
        for k in extra {
            row.parts.remove(&k);
            self.state
                .blob_garbage()
                .push((row.upload_id.clone(), Some(k)));
        }
        row.completed = Some(n);
        row.expires_at = now.plus_ms(MEDIA_TTL_MS);
        let media_key = row.media_key.clone();
        self.state.put_upload(row);
        Ok(HttpResponse::json(
            200,
            &CompleteUploadResponse { media_key, size },
        ))
    }

    /// M4.
    pub(crate) fn http_media_download(
        &mut self,
        now: UnixMs,
        req: &HttpRequest,
    ) -> Result<HttpResponse, ApiError> {
        self.authenticate(now, req)?;
        let key = query_key(&req.query, "key")?;
        let (id, parts) = self
            .state
            .media()
            .by_key
            .get(&key)
            .and_then(|id| self.state.media().uploads.get(id))
            .filter(|r| now < r.expires_at)
            .and_then(|r| r.completed.map(|n| (r.upload_id.clone(), n)))
            .ok_or_else(not_found)?;
        let bytes = self
            .blobs_mut()
            .assemble(id.as_str(), parts)
            .map_err(|e| blob_error(&e))?;
        Ok(HttpResponse::bytes(200, bytes))
    }

    /// Timer: an upload or object reached its expiry.
    pub(crate) fn fire_media(&mut self, now: UnixMs, id: &UploadId) {
        let expired = self
            .state
            .media()
            .uploads
            .get(id)
            .is_some_and(|r| now >= r.expires_at);
        if expired {
            self.state.delete_upload(id);
        }
    }

    /// Deletes the blobs forgotten by the last commit (call only after it succeeded). A failed
    /// delete leaves an orphan that the next startup removes.
    pub(crate) fn collect_blobs(&mut self) {
        for (id, part) in std::mem::take(self.state.blob_garbage()) {
            let _ = match part {
                None => self.blobs_mut().delete(id.as_str()),
                Some(p) => self.blobs_mut().delete_part(id.as_str(), p),
            };
        }
    }

    /// Startup: removes blobs that no committed upload names (a crash between a blob write
    /// and its metadata commit, or between a commit and its blob deletion). Only at the shard
    /// that holds the uploads, the registry's: another shard's core knows none of them.
    pub(crate) fn purge_orphan_blobs(&mut self) -> Result<(), BlobError> {
        if self.config.shard.me() != crate::handoff::REGISTRY_SHARD {
            return Ok(());
        }
        for id in self.blobs_mut().list()? {
            let known = UploadId::parse(&id)
                .ok()
                .and_then(|u| self.state.media().uploads.get(&u));
            match known {
                None => self.blobs_mut().delete(&id)?,
                Some(row) => {
                    // Parts no committed row names: written before a commit that failed, or
                    // dropped at completion and not yet deleted.
                    let doomed: Vec<u32> = (1..=MAX_MEDIA_PARTS)
                        .filter(|p| !row.parts.contains_key(p))
                        .collect();
                    for p in doomed {
                        self.blobs_mut().delete_part(&id, p)?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// M2's part: its number (query `partNumber`, in `1..=MAX_MEDIA_PARTS`) once its body is
/// known to be 1..=`MAX_MEDIA_PART_BYTES` bytes.
fn part_of(req: &HttpRequest) -> Result<u32, ApiError> {
    let part = query_param(&req.query, "partNumber")
        .and_then(|p| p.parse::<u32>().ok())
        .filter(|p| (1..=MAX_MEDIA_PARTS).contains(p))
        .ok_or_else(|| {
            ApiError::new(
                ErrorCode::INVALID_FIELD,
                format!("partNumber must be an integer in 1..={MAX_MEDIA_PARTS}"),
            )
        })?;
    let len = req.body.len();
    if len == 0 {
        return Err(ApiError::new(
            ErrorCode::INVALID_FIELD,
            "a part must not be empty",
        ));
    }
    if len > MAX_MEDIA_PART_BYTES {
        return Err(ApiError::new(
            ErrorCode::BODY_TOO_LARGE,
            format!("part is {len} bytes, the limit is {MAX_MEDIA_PART_BYTES} bytes"),
        ));
    }
    Ok(part)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_decoding() {
        assert_eq!(pct_decode("m-abc_%2D").as_deref(), Some("m-abc_-"));
        assert_eq!(pct_decode("a%2"), None);
        assert_eq!(pct_decode("a%zz"), None);
        assert_eq!(strip_quotes("\"ab\""), "ab");
    }
}
