//! Media (M1-M4): the blind proxy, its limits, expiry and durability.

use relay_core::store::SqliteStore;
use relay_core::{FsBlobStore, MemoryBlobStore, Method};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use wire::http::paths;
use wire::limits::{MAX_MEDIA_PART_BYTES, MAX_MEDIA_PARTS};

use crate::world::{User, World, fast_config};

const DAY_MS: u64 = 24 * 60 * 60 * 1000;

/// A realistic part: one chunk frame `u32_BE(len) ‖ IV(12) ‖ ciphertext‖tag(len)` (§4.6);
/// the relay never looks inside.
fn chunk_frame(seed: u8, ct_len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(16 + ct_len);
    v.extend_from_slice(&u32::try_from(ct_len).unwrap().to_be_bytes());
    v.extend((0u8..12).map(|i| seed ^ i));
    v.extend((0..ct_len).map(|i| (i as u8).wrapping_mul(31) ^ seed));
    v
}

pub(crate) fn init(w: &mut World, u: &User) -> (String, String) {
    let r = w.post(
        paths::MEDIA_INIT,
        json!({"content_type": "application/octet-stream"}),
        Some(&u.token),
    );
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    let v = r.body_json();
    (
        v["upload_id"].as_str().unwrap().to_owned(),
        v["media_key"].as_str().unwrap().to_owned(),
    )
}

pub(crate) fn chunk(
    w: &mut World,
    token: &str,
    upload: &str,
    key: &str,
    part: &str,
    body: Vec<u8>,
) -> relay_core::HttpResponse {
    w.raw(
        Method::Post,
        &format!("/api/v1/media/upload-parts/{upload}/chunk?mediaKey={key}&partNumber={part}"),
        body,
        Some(token),
    )
}

pub(crate) fn etag_of(r: &relay_core::HttpResponse) -> String {
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    r.body_json()["etag"].as_str().unwrap().to_owned()
}

pub(crate) fn complete(
    w: &mut World,
    token: &str,
    upload: &str,
    key: &str,
    parts: Value,
) -> relay_core::HttpResponse {
    w.post(
        &paths::with(paths::MEDIA_COMPLETE, upload),
        json!({"media_key": key, "parts": parts}),
        Some(token),
    )
}

fn download(w: &mut World, token: &str, key: &str) -> relay_core::HttpResponse {
    w.get(&format!("/api/v1/media/download?key={key}"), Some(token))
}

fn code(r: &relay_core::HttpResponse) -> String {
    r.error_code().unwrap_or_default()
}

/// Uploads `parts` and completes; returns (upload id, key, concatenation).
fn upload(w: &mut World, u: &User, parts: &[Vec<u8>]) -> (String, String, Vec<u8>) {
    let (id, key) = init(w, u);
    let mut list = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        let r = chunk(w, &u.token, &id, &key, &(i + 1).to_string(), p.clone());
        // Clients strip quotes: send the etag back quoted to prove the relay tolerates it.
        list.push(json!({"etag": format!("\"{}\"", etag_of(&r)), "part_number": i + 1}));
    }
    let r = complete(w, &u.token, &id, &key, Value::Array(list));
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    (id, key, parts.concat())
}

fn three_parts() -> Vec<Vec<u8>> {
    vec![
        chunk_frame(1, 3000),
        chunk_frame(2, 2500),
        chunk_frame(3, 700),
    ]
}

#[test]
fn three_parts_round_trip_and_any_user_with_the_key_downloads() {
    let blobs = MemoryBlobStore::new();
    let mut w = World::with_blobs(fast_config(), blobs.clone());
    let a = w.user("alice");
    let b = w.user("bob");
    let (id, key) = init(&mut w, &a);
    assert!(id.starts_with("up-"));
    // ≥ 128 bits, URL-safe.
    assert!(
        key.len() >= 24
            && key
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
    );
    let parts = three_parts();
    let mut list = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        let r = chunk(&mut w, &a.token, &id, &key, &(i + 1).to_string(), p.clone());
        let etag = etag_of(&r);
        let expected: String = Sha256::digest(p)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(etag, expected);
        list.push(json!({"etag": etag, "part_number": i + 1}));
    }
    // Not downloadable before completion.
    assert_eq!(code(&download(&mut w, &a.token, &key)), "MEDIA_NOT_FOUND");
    let r = complete(&mut w, &a.token, &id, &key, Value::Array(list.clone()));
    assert_eq!(r.status, 200);
    let total = parts.iter().map(Vec::len).sum::<usize>() as u64;
    assert_eq!(r.body_json()["size"], total);
    // A retry of the same complete answers the same.
    assert_eq!(
        complete(&mut w, &a.token, &id, &key, Value::Array(list)).status,
        200
    );
    for token in [&a.token, &b.token] {
        let d = download(&mut w, token, &key);
        assert_eq!(d.status, 200);
        assert_eq!(d.content_type, "application/octet-stream");
        assert_eq!(d.body, parts.concat());
    }
    // Unauthenticated: 401.
    assert_eq!(
        w.get(&format!("/api/v1/media/download?key={key}"), None)
            .status,
        401
    );
    // storage/estimate counts the uploader's media.
    let est = w.get(paths::STORAGE_ESTIMATE, Some(&a.token)).body_json();
    assert_eq!(est["used_bytes"], total);
    let est = w.get(paths::STORAGE_ESTIMATE, Some(&b.token)).body_json();
    assert_eq!(est["used_bytes"], 0);
    // A completed upload takes no more parts.
    let r = chunk(&mut w, &a.token, &id, &key, "4", chunk_frame(4, 10));
    assert_eq!((r.status, code(&r).as_str()), (409, "INVALID_STATE"));
    assert_eq!(blobs.part_count(), 3);
    // The relay's Debug never shows a media key or part bytes.
    let dbg = format!("{:?}", w.relay);
    assert!(!dbg.contains(&key), "media key leaked in Debug");
}

#[test]
fn every_refusal_has_its_status_and_code() {
    let mut w = World::new();
    let a = w.user("alice");
    let b = w.user("bob");
    let (id, key) = init(&mut w, &a);
    let p = chunk_frame(1, 100);
    // Another account's upload.
    let r = chunk(&mut w, &b.token, &id, &key, "1", p.clone());
    assert_eq!((r.status, code(&r).as_str()), (403, "FORBIDDEN"));
    // Wrong key, unknown upload.
    let r = chunk(&mut w, &a.token, &id, "m-nope", "1", p.clone());
    assert_eq!((r.status, code(&r).as_str()), (404, "MEDIA_NOT_FOUND"));
    let r = chunk(&mut w, &a.token, "up-unknown", &key, "1", p.clone());
    assert_eq!((r.status, code(&r).as_str()), (404, "MEDIA_NOT_FOUND"));
    // Bad part numbers.
    let too_big = (MAX_MEDIA_PARTS + 1).to_string();
    for n in ["0", too_big.as_str(), "x", "-1", ""] {
        let r = chunk(&mut w, &a.token, &id, &key, n, p.clone());
        assert_eq!(
            (r.status, code(&r).as_str()),
            (400, "INVALID_FIELD"),
            "part {n}"
        );
    }
    let r = w.raw(
        Method::Post,
        &format!("/api/v1/media/upload-parts/{id}/chunk?partNumber=1"),
        p.clone(),
        Some(&a.token),
    );
    assert_eq!((r.status, code(&r).as_str()), (400, "INVALID_FIELD"));
    // Oversize and empty parts.
    let r = chunk(
        &mut w,
        &a.token,
        &id,
        &key,
        "1",
        vec![7; MAX_MEDIA_PART_BYTES + 1],
    );
    assert_eq!((r.status, code(&r).as_str()), (413, "BODY_TOO_LARGE"));
    let r = chunk(&mut w, &a.token, &id, &key, "1", Vec::new());
    assert_eq!((r.status, code(&r).as_str()), (400, "INVALID_FIELD"));
    // A full-size part is fine.
    let e1 = etag_of(&chunk(
        &mut w,
        &a.token,
        &id,
        &key,
        "1",
        vec![7; MAX_MEDIA_PART_BYTES],
    ));
    let e3 = etag_of(&chunk(
        &mut w,
        &a.token,
        &id,
        &key,
        "3",
        chunk_frame(3, 100),
    ));
    // Missing part 2.
    let parts = json!([{"etag": e1, "part_number": 1}, {"etag": "x", "part_number": 2}, {"etag": e3, "part_number": 3}]);
    let r = complete(&mut w, &a.token, &id, &key, parts);
    assert_eq!((r.status, code(&r).as_str()), (400, "INVALID_FIELD"));
    let e2 = etag_of(&chunk(&mut w, &a.token, &id, &key, "2", p.clone()));
    // Out of order.
    let parts = json!([{"etag": e1, "part_number": 1}, {"etag": e3, "part_number": 3}, {"etag": e2, "part_number": 2}]);
    let r = complete(&mut w, &a.token, &id, &key, parts);
    assert_eq!((r.status, code(&r).as_str()), (400, "INVALID_FIELD"));
    // Not starting at 1.
    let parts = json!([{"etag": e2, "part_number": 2}, {"etag": e3, "part_number": 3}]);
    assert_eq!(complete(&mut w, &a.token, &id, &key, parts).status, 400);
    // Wrong etag.
    let parts = json!([{"etag": e1, "part_number": 1}, {"etag": e3, "part_number": 2}]);
    let r = complete(&mut w, &a.token, &id, &key, parts);
    assert_eq!((r.status, code(&r).as_str()), (400, "INVALID_FIELD"));
    // Empty list.
    assert_eq!(complete(&mut w, &a.token, &id, &key, json!([])).status, 400);
    // Completing someone else's upload / with the wrong key.
    let parts = json!([{"etag": e1, "part_number": 1}]);
    assert_eq!(
        complete(&mut w, &b.token, &id, &key, parts.clone()).status,
        403
    );
    assert_eq!(
        complete(&mut w, &a.token, &id, "m-other", parts.clone()).status,
        404
    );
    // Completing with a prefix drops the parts beyond it.
    let r = complete(&mut w, &a.token, &id, &key, parts);
    assert_eq!(r.status, 200);
    assert_eq!(r.body_json()["size"], MAX_MEDIA_PART_BYTES);
    // Completing again with another list: 409.
    let parts = json!([{"etag": e1, "part_number": 1}, {"etag": e2, "part_number": 2}]);
    let r = complete(&mut w, &a.token, &id, &key, parts);
    assert_eq!((r.status, code(&r).as_str()), (409, "INVALID_STATE"));
    assert_eq!(
        download(&mut w, &b.token, &key).body.len(),
        MAX_MEDIA_PART_BYTES
    );
    // Unknown and malformed keys.
    let r = download(&mut w, &a.token, "m-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA");
    assert_eq!((r.status, code(&r).as_str()), (404, "MEDIA_NOT_FOUND"));
    assert_eq!(download(&mut w, &a.token, "[img]abc").status, 404);
    assert_eq!(w.get(paths::MEDIA_DOWNLOAD, Some(&a.token)).status, 400);
    // No token anywhere: 401.
    assert_eq!(w.post(paths::MEDIA_INIT, json!({}), None).status, 401);
    assert_eq!(chunk(&mut w, "x", &id, &key, "1", p).status, 401);
    // Wrong methods.
    assert_eq!(w.get(paths::MEDIA_INIT, Some(&a.token)).status, 405);
}

/// An unfinished upload lives 10 minutes past its init or its last part, and never more than
/// two hours from its init, however often parts come.
#[test]
fn an_unfinished_upload_expires_when_idle_and_at_two_hours_whatever_comes() {
    let blobs = MemoryBlobStore::new();
    let mut w = World::with_blobs(fast_config(), blobs.clone());
    let a = w.user("alice");
    let part = |w: &mut World, id: &str, key: &str, n: u32| {
        chunk(w, &a.token, id, key, &n.to_string(), chunk_frame(9, 50))
    };
    // Idle: a part 9 minutes after init keeps it; 10 minutes after that part it is gone.
    let (idle_id, idle_key) = init(&mut w, &a);
    w.advance(9 * 60_000);
    etag_of(&part(&mut w, &idle_id, &idle_key, 1));
    w.advance(10 * 60_000 - 1);
    etag_of(&part(&mut w, &idle_id, &idle_key, 2));
    w.advance(10 * 60_000);
    assert_eq!(
        code(&part(&mut w, &idle_id, &idle_key, 3)),
        "MEDIA_NOT_FOUND"
    );
    // Busy: a part every 9 minutes, yet gone two hours after its init.
    let mut a = a;
    w.login(&mut a);
    let (busy_id, busy_key) = init(&mut w, &a);
    let started = w.now;
    let mut n = 0;
    while w.now.get() + 9 * 60_000 < started.get() + 2 * 60 * 60 * 1000 {
        w.advance(9 * 60_000);
        n += 1;
        etag_of(&chunk(
            &mut w,
            &a.token,
            &busy_id,
            &busy_key,
            &n.to_string(),
            chunk_frame(9, 50),
        ));
    }
    w.advance(started.get() + 2 * 60 * 60 * 1000 - w.now.get());
    let r = chunk(
        &mut w,
        &a.token,
        &busy_id,
        &busy_key,
        "1",
        chunk_frame(9, 50),
    );
    assert_eq!(code(&r), "MEDIA_NOT_FOUND");
    assert_eq!(blobs.part_count(), 0);
}

#[test]
fn objects_expire_after_24h_and_unfinished_uploads_when_idle() {
    let blobs = MemoryBlobStore::new();
    let mut w = World::with_blobs(fast_config(), blobs.clone());
    let a = w.user("alice");
    let (_, key, data) = upload(&mut w, &a, &three_parts());
    let (open_id, open_key) = init(&mut w, &a);
    etag_of(&chunk(
        &mut w,
        &a.token,
        &open_id,
        &open_key,
        "1",
        chunk_frame(9, 50),
    ));
    assert_eq!(blobs.part_count(), 4);
    // The relay asks to be woken for the first expiry.
    assert!(w.relay.poll_timeout().is_some());
    w.advance(10 * 60 * 1000);
    let r = chunk(
        &mut w,
        &a.token,
        &open_id,
        &open_key,
        "2",
        chunk_frame(9, 50),
    );
    assert_eq!(code(&r), "MEDIA_NOT_FOUND");
    assert_eq!(blobs.part_count(), 3);
    // Re-login: the token lives 24 h too.
    let mut a = a;
    w.advance(DAY_MS - 10 * 60 * 1000 - 1);
    w.login(&mut a);
    assert_eq!(download(&mut w, &a.token, &key).body, data);
    w.advance(1);
    assert_eq!(code(&download(&mut w, &a.token, &key)), "MEDIA_NOT_FOUND");
    assert_eq!(blobs.part_count(), 0);
    let est = w.get(paths::STORAGE_ESTIMATE, Some(&a.token)).body_json();
    assert_eq!(est["used_bytes"], 0);
}

#[test]
fn uploads_are_rate_limited_and_capped_per_user() {
    let mut w = World::new();
    let a = w.user("alice");
    let b = w.user("bob");
    for _ in 0..10 {
        init(&mut w, &a);
    }
    let r = w.post(paths::MEDIA_INIT, json!({}), Some(&a.token));
    assert_eq!((r.status, code(&r).as_str()), (429, "RATE_LIMITED"));
    init(&mut w, &b);
    // A new minute, but ten uploads are still unfinished: the cap on open uploads.
    w.advance(60_000);
    let r = w.post(paths::MEDIA_INIT, json!({}), Some(&a.token));
    assert_eq!((r.status, code(&r).as_str()), (403, "QUOTA_EXCEEDED"));
    // Left idle, they expire and free their seats.
    w.advance(10 * 60_000);
    init(&mut w, &a);
}

#[test]
fn a_failed_blob_write_is_503_and_changes_nothing() {
    let blobs = MemoryBlobStore::new();
    let mut w = World::with_blobs(fast_config(), blobs.clone());
    let a = w.user("alice");
    let (id, key) = init(&mut w, &a);
    blobs.fail_writes(1);
    let r = chunk(&mut w, &a.token, &id, &key, "1", chunk_frame(1, 10));
    assert_eq!((r.status, code(&r).as_str()), (503, "STORAGE_UNAVAILABLE"));
    assert!(!w.relay.is_failed());
    let r = complete(
        &mut w,
        &a.token,
        &id,
        &key,
        json!([{"etag": "x", "part_number": 1}]),
    );
    assert_eq!(r.status, 400);
    let e = etag_of(&chunk(&mut w, &a.token, &id, &key, "1", chunk_frame(1, 10)));
    let r = complete(
        &mut w,
        &a.token,
        &id,
        &key,
        json!([{"etag": e, "part_number": 1}]),
    );
    assert_eq!(r.status, 200);
}

#[test]
fn completed_objects_survive_a_restart_in_memory() {
    let blobs = MemoryBlobStore::new();
    let mut w = World::with_blobs(fast_config(), blobs.clone());
    let mut a = w.user("alice");
    let (_, key, data) = upload(&mut w, &a, &three_parts());
    let (open_id, open_key) = init(&mut w, &a);
    let e1 = etag_of(&chunk(
        &mut w,
        &a.token,
        &open_id,
        &open_key,
        "1",
        chunk_frame(5, 40),
    ));
    // An orphan blob (written, then the relay crashed before the metadata commit).
    let mut orphan = blobs.clone();
    relay_core::BlobStore::put_part(&mut orphan, "up-orphan", 1, b"junk").unwrap();
    w.restart_with_blobs(Box::new(w.mem.clone()), Box::new(blobs.clone()));
    assert_eq!(blobs.part_count(), 4, "the orphan is purged at startup");
    w.login(&mut a);
    assert_eq!(download(&mut w, &a.token, &key).body, data);
    // The unfinished upload continues where it was.
    let e2 = etag_of(&chunk(
        &mut w,
        &a.token,
        &open_id,
        &open_key,
        "2",
        chunk_frame(6, 40),
    ));
    let parts = json!([{"etag": e1, "part_number": 1}, {"etag": e2, "part_number": 2}]);
    assert_eq!(
        complete(&mut w, &a.token, &open_id, &open_key, parts).status,
        200
    );
    assert_eq!(
        download(&mut w, &a.token, &open_key).body,
        [chunk_frame(5, 40), chunk_frame(6, 40)].concat()
    );
    // Expiry still fires after the restart.
    w.advance(DAY_MS);
    assert_eq!(blobs.part_count(), 0);
}

#[test]
fn completed_objects_survive_a_restart_on_sqlite_and_files() {
    let db = tempfile::tempdir().unwrap();
    let files = tempfile::tempdir().unwrap();
    let path = db.path().join("relay.db");
    let mut w = World::new();
    w.restart_with_blobs(
        Box::new(SqliteStore::open(&path).unwrap()),
        Box::new(FsBlobStore::open(files.path()).unwrap()),
    );
    let mut a = w.user("alice");
    let b = w.user("bob");
    let (id, key, data) = upload(&mut w, &a, &three_parts());
    w.restart_with_blobs(
        Box::new(SqliteStore::open(&path).unwrap()),
        Box::new(FsBlobStore::open(files.path()).unwrap()),
    );
    assert_eq!(download(&mut w, &b.token, &key).body, data);
    assert!(files.path().join(&id).is_dir());
    w.advance(DAY_MS);
    w.login(&mut a);
    assert_eq!(download(&mut w, &a.token, &key).status, 404);
    assert!(!files.path().join(&id).exists());
}

#[test]
fn a_failed_metadata_commit_leaves_no_trace_after_restart() {
    let blobs = MemoryBlobStore::new();
    let mut w = World::with_blobs(fast_config(), blobs.clone());
    let mut a = w.user("alice");
    let (id, key) = init(&mut w, &a);
    let e1 = etag_of(&chunk(&mut w, &a.token, &id, &key, "1", chunk_frame(1, 64)));
    // The part's bytes are written, then its metadata commit fails: fail-stop.
    w.mem.fail_commits(1);
    let r = chunk(&mut w, &a.token, &id, &key, "2", chunk_frame(2, 64));
    assert_eq!(r.status, 503);
    assert!(w.relay.is_failed());
    assert_eq!(blobs.part_count(), 2);
    // Rebuilt: the uncommitted part is purged, the committed one kept.
    w.restart_with_blobs(Box::new(w.mem.clone()), Box::new(blobs.clone()));
    assert_eq!(blobs.part_count(), 1);
    w.login(&mut a);
    let parts = json!([{"etag": e1, "part_number": 1}, {"etag": "x", "part_number": 2}]);
    assert_eq!(complete(&mut w, &a.token, &id, &key, parts).status, 400);
    let parts = json!([{"etag": e1, "part_number": 1}]);
    assert_eq!(complete(&mut w, &a.token, &id, &key, parts).status, 200);
    assert_eq!(download(&mut w, &a.token, &key).body, chunk_frame(1, 64));
}
