//! Media uploads and downloads (PROTOCOL.md §1.6).

use serde::{Deserialize, Serialize};

use crate::ids::{MediaKey, UploadId};

/// M1 request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UploadInitRequest {
    /// Always `application/octet-stream` from clients, by design.
    #[serde(default = "octet_stream")]
    pub content_type: String,
}

fn octet_stream() -> String {
    "application/octet-stream".to_owned()
}

/// M1 response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UploadInitResponse {
    /// The multipart upload.
    pub upload_id: UploadId,
    /// The object's unguessable key.
    pub media_key: MediaKey,
}

/// M2 query (camelCase names, as clients send them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkQuery {
    /// The object's key from M1.
    #[serde(rename = "mediaKey")]
    pub media_key: MediaKey,
    /// 1-based part number.
    #[serde(rename = "partNumber")]
    pub part_number: u32,
}

/// M2 response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkResponse {
    /// The part's entity tag; M3 must repeat it.
    pub etag: String,
}

/// One part in M3.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompletedPart {
    /// The etag M2 returned.
    pub etag: String,
    /// 1-based part number.
    pub part_number: u32,
}

/// M3 request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompleteUploadRequest {
    /// The object's key.
    pub media_key: MediaKey,
    /// Every part, in order.
    pub parts: Vec<CompletedPart>,
}

/// M3 response (clients ignore it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompleteUploadResponse {
    /// The object's key.
    pub media_key: MediaKey,
    /// Total size in bytes.
    pub size: u64,
}

/// M4 query.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DownloadQuery {
    /// The bare media key (no `[img]` prefix).
    pub key: MediaKey,
}
