//! The media uploads the relay holds, in memory: each upload's stored row (its parts, its
//! expiry) and the indexes by media key and by owner, with the upload rate limit. The rules
//! that change them are in `media`; their writes on the working state in `state::media`.

use crate::limits::{MEDIA_UPLOADS_PER_MIN_PER_USER, MINUTE_MS};
use crate::ratelimit::RateLimiter;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use wire::{MediaKey, UnixMs, UploadId, UserUuid};

/// One stored part: its etag (hex SHA-256) and size in bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PartRow {
    pub(crate) etag: String,
    pub(crate) size: u64,
}

/// A multipart upload and, once completed, the object it became.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct UploadRow {
    pub(crate) upload_id: UploadId,
    pub(crate) media_key: MediaKey,
    pub(crate) owner: UserUuid,
    pub(crate) created_at: UnixMs,
    pub(crate) parts: BTreeMap<u32, PartRow>,
    /// `Some(n)`: completed as parts `1..=n` (downloadable until `expires_at`).
    pub(crate) completed: Option<u32>,
    pub(crate) expires_at: UnixMs,
}

impl UploadRow {
    pub(crate) fn size(&self) -> u64 {
        self.parts.values().map(|p| p.size).sum()
    }
}

/// Media metadata plus its indexes, and the ephemeral upload rate limit.
pub(crate) struct MediaState {
    pub(crate) uploads: BTreeMap<UploadId, UploadRow>,
    pub(crate) by_key: BTreeMap<MediaKey, UploadId>,
    pub(crate) by_owner: BTreeMap<UserUuid, BTreeSet<UploadId>>,
    /// Blobs to delete once the commit that forgot them succeeded: a whole upload (`None`) or
    /// one part.
    pub(crate) blob_garbage: Vec<(UploadId, Option<u32>)>,
    pub(crate) init_limit: RateLimiter<UserUuid>,
}

impl Default for MediaState {
    fn default() -> Self {
        Self {
            uploads: BTreeMap::new(),
            by_key: BTreeMap::new(),
            by_owner: BTreeMap::new(),
            blob_garbage: Vec::new(),
            init_limit: RateLimiter::new(MEDIA_UPLOADS_PER_MIN_PER_USER, MINUTE_MS),
        }
    }
}

impl std::fmt::Debug for MediaState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Media keys are capabilities: never printed.
        f.debug_struct("MediaState")
            .field("uploads", &self.uploads.len())
            .field("blob_garbage", &self.blob_garbage.len())
            .finish_non_exhaustive()
    }
}

impl MediaState {
    pub(crate) fn index(&mut self, row: UploadRow) {
        self.by_key
            .insert(row.media_key.clone(), row.upload_id.clone());
        self.by_owner
            .entry(row.owner.clone())
            .or_default()
            .insert(row.upload_id.clone());
        self.uploads.insert(row.upload_id.clone(), row);
    }
}
