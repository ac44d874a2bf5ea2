//! Media at its edges: percent-encoded keys, a parts list of exactly the maximum, bytes gone
//! from the blob store under a live object, the relay's next wake-up once an upload is
//! completed, expiry to the millisecond, the object and account byte limits to the byte, and
//! what `Debug` shows.
//!
//! The byte limits are 100 MiB per object and 400 MiB per account: rather than upload that
//! much, the tests write the rows a relay would have written after those uploads (parts with
//! their sizes and etags, no bytes behind them) and restart from the store; only the parts
//! that decide are uploaded for real.

use relay_core::limits::{MAX_MEDIA_BYTES_PER_USER, MINUTE_MS};
use relay_core::store::{Mutation, Store as _, Table};
use relay_core::{BlobStore as _, MemoryBlobStore};
use serde_json::{Value, json};
use wire::http::paths;
use wire::limits::{MAX_MEDIA_OBJECT_BYTES, MAX_MEDIA_PART_BYTES, MAX_MEDIA_PARTS};

use crate::media::{etag_of as etag, init};
use crate::world::{User, World, fast_config};

const HOUR_MS: u64 = 60 * 60 * 1000;

fn chunk(
    w: &mut World,
    u: &User,
    upload: &str,
    key: &str,
    part: u32,
    body: Vec<u8>,
) -> relay_core::HttpResponse {
    crate::media::chunk(w, &u.token, upload, key, &part.to_string(), body)
}

fn complete(
    w: &mut World,
    u: &User,
    upload: &str,
    key: &str,
    parts: Value,
) -> relay_core::HttpResponse {
    crate::media::complete(w, &u.token, upload, key, parts)
}

fn download(w: &mut World, u: &User, key: &str) -> relay_core::HttpResponse {
    w.get(&format!("/api/v1/media/download?key={key}"), Some(&u.token))
}

fn status_code_message(r: &relay_core::HttpResponse) -> (u16, String, String) {
    let v = r.body_json();
    (
        r.status,
        v["error"].as_str().unwrap_or_default().to_owned(),
        v["message"].as_str().unwrap_or_default().to_owned(),
    )
}

/// Uploads one part of `bytes` and completes; returns (upload id, key).
fn upload_one(w: &mut World, u: &User, bytes: &[u8]) -> (String, String) {
    let (id, key) = init(w, u);
    let e = etag(&chunk(w, u, &id, &key, 1, bytes.to_vec()));
    let r = complete(w, u, &id, &key, json!([{"etag": e, "part_number": 1}]));
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    (id, key)
}

#[test]
fn a_percent_encoded_key_names_the_same_upload_wherever_the_escape_is() {
    let mut w = World::new();
    let a = w.user("alice");
    let (id, key) = init(&mut w, &a);
    // `m-…`: encode the `-` right after the `m` (an escape in the middle of the value).
    let encoded = format!("m%2D{}", &key[2..]);
    let e = etag(&chunk(&mut w, &a, &id, &encoded, 1, b"part-one".to_vec()));
    let r = complete(
        &mut w,
        &a,
        &id,
        &key,
        json!([{"etag": e, "part_number": 1}]),
    );
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    let d = download(&mut w, &a, &encoded);
    assert_eq!((d.status, d.body.as_slice()), (200, b"part-one".as_slice()));
    // Every character escaped.
    let all: String = key.bytes().map(|b| format!("%{b:02X}")).collect();
    assert_eq!(download(&mut w, &a, &all).body, b"part-one");
    // A broken escape is a bad query, not an unknown key.
    for bad in ["m%2", "m%zz-abc", "%"] {
        let (status, code, _) = status_code_message(&download(&mut w, &a, bad));
        assert_eq!((status, code.as_str()), (400, "INVALID_FIELD"), "{bad}");
    }
}

#[test]
fn a_parts_list_of_exactly_the_maximum_completes_and_one_more_entry_is_refused() {
    let mut w = World::new();
    let a = w.user("alice");
    let (id, key) = init(&mut w, &a);
    let mut list = Vec::new();
    for n in 1..=MAX_MEDIA_PARTS {
        let e = etag(&chunk(
            &mut w,
            &a,
            &id,
            &key,
            n,
            vec![u8::try_from(n).unwrap()],
        ));
        list.push(json!({"etag": e, "part_number": n}));
    }
    let mut over = list.clone();
    over.push(json!({"etag": "x", "part_number": MAX_MEDIA_PARTS + 1}));
    let r = complete(&mut w, &a, &id, &key, Value::Array(over));
    assert_eq!(
        status_code_message(&r),
        (
            400,
            "INVALID_FIELD".to_owned(),
            format!("at most {MAX_MEDIA_PARTS} parts")
        )
    );
    let r = complete(&mut w, &a, &id, &key, Value::Array(list));
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    assert_eq!(r.body_json()["size"], MAX_MEDIA_PARTS);
    let expected: Vec<u8> = (1..=MAX_MEDIA_PARTS)
        .map(|n| u8::try_from(n).unwrap())
        .collect();
    assert_eq!(download(&mut w, &a, &key).body, expected);
}

#[test]
fn an_object_whose_bytes_are_gone_from_the_blob_store_is_not_found_not_unavailable() {
    let mut blobs = MemoryBlobStore::new();
    let mut w = World::with_blobs(fast_config(), blobs.clone());
    let a = w.user("alice");
    let (id, key) = upload_one(&mut w, &a, b"bytes");
    assert_eq!(download(&mut w, &a, &key).body, b"bytes");
    // The bytes disappear behind the relay's back (an operator, a disk replaced).
    blobs.delete(&id).unwrap();
    let r = download(&mut w, &a, &key);
    assert_eq!(
        status_code_message(&r),
        (
            404,
            "MEDIA_NOT_FOUND".to_owned(),
            "the object's data is no longer available".to_owned()
        )
    );
    assert!(!w.relay.is_failed());
}

#[test]
fn once_completed_an_upload_wakes_the_relay_at_its_new_expiry_only() {
    let mut w = World::new();
    let a = w.user("alice");
    // Past every credential's expiry so only media timers are left (the token lives 24 h).
    w.advance(HOUR_MS);
    assert_eq!(w.relay.poll_timeout(), None);
    let (id, key) = init(&mut w, &a);
    assert_eq!(w.relay.poll_timeout(), Some(w.now.plus_ms(10 * MINUTE_MS)));
    w.advance(60_000);
    let e = etag(&chunk(&mut w, &a, &id, &key, 1, b"x".to_vec()));
    // A part moves the idle expiry on.
    assert_eq!(w.relay.poll_timeout(), Some(w.now.plus_ms(10 * MINUTE_MS)));
    w.advance(60_000);
    let completed_at = w.now;
    let r = complete(
        &mut w,
        &a,
        &id,
        &key,
        json!([{"etag": e, "part_number": 1}]),
    );
    assert_eq!(r.status, 200);
    // The unfinished upload's wake-up is gone: the next is the object's, 24 h on.
    assert_eq!(
        w.relay.poll_timeout(),
        Some(completed_at.plus_ms(24 * HOUR_MS))
    );
}

#[test]
fn debug_counts_uploads_and_pending_blob_deletions_only() {
    let mut w = World::with_blobs(fast_config(), MemoryBlobStore::new());
    let a = w.user("alice");
    assert!(format!("{:?}", w.relay).contains("MediaState { uploads: 0, blob_garbage: 0, .. }"));
    let (_, key) = upload_one(&mut w, &a, b"secret-bytes");
    let dbg = format!("{:?}", w.relay);
    assert!(
        dbg.contains("MediaState { uploads: 1, blob_garbage: 0, .. }"),
        "{dbg}"
    );
    assert!(!dbg.contains(&key), "{dbg}");
}

#[test]
fn an_upload_and_an_object_end_exactly_at_their_expiry_even_before_the_timer_fires() {
    let mut w = World::new();
    let a = w.user("alice");
    let (id, key) = init(&mut w, &a);
    let opened = w.now;
    // The clock moves without a tick: only the expiry checks of the handlers decide.
    w.now = opened.plus_ms(10 * MINUTE_MS - 1);
    let e = etag(&chunk(&mut w, &a, &id, &key, 1, b"late".to_vec()));
    w.now = w.now.plus_ms(10 * MINUTE_MS);
    for r in [
        chunk(&mut w, &a, &id, &key, 2, b"too late".to_vec()),
        complete(
            &mut w,
            &a,
            &id,
            &key,
            json!([{"etag": e, "part_number": 1}]),
        ),
    ] {
        let (status, code, _) = status_code_message(&r);
        assert_eq!((status, code.as_str()), (404, "MEDIA_NOT_FOUND"));
    }

    let (_, key) = upload_one(&mut w, &a, b"object");
    let done = w.now;
    w.now = done.plus_ms(24 * HOUR_MS - 1);
    // The token lives 24 h too: a fresh one.
    let mut a = a;
    w.login(&mut a);
    assert_eq!(download(&mut w, &a, &key).body, b"object");
    w.now = done.plus_ms(24 * HOUR_MS);
    let (status, code, _) = status_code_message(&download(&mut w, &a, &key));
    assert_eq!((status, code.as_str()), (404, "MEDIA_NOT_FOUND"));
}

const P: u64 = MAX_MEDIA_PART_BYTES as u64;

/// The committed media row of `upload`.
fn media_row(w: &World, upload: &str) -> Value {
    let snapshot = w.mem.clone().load().unwrap();
    serde_json::from_slice(&snapshot[&Table::Media][upload]).unwrap()
}

fn put_media_row(w: &World, row: &Value) {
    w.mem
        .clone()
        .commit(
            &vec![Mutation::Put {
                table: Table::Media,
                key: row["upload_id"].as_str().unwrap().to_owned(),
                value: serde_json::to_vec(row).unwrap(),
            }]
            .into(),
        )
        .unwrap();
}

/// `row` with parts `numbers` of `P` bytes each (etag `e<n>`), as if they had been uploaded.
fn with_full_parts(mut row: Value, numbers: impl Iterator<Item = u32>) -> Value {
    for n in numbers {
        row["parts"][n.to_string()] = json!({"etag": format!("e{n}"), "size": P});
    }
    row
}

fn full_part(seed: u8) -> Vec<u8> {
    vec![seed; MAX_MEDIA_PART_BYTES]
}

fn restart(w: &mut World, blobs: &MemoryBlobStore, u: &mut User) {
    w.restart_with_blobs(Box::new(w.mem.clone()), Box::new(blobs.clone()));
    w.login(u);
}

#[test]
fn an_object_may_reach_its_byte_limit_exactly_and_not_one_byte_more() {
    assert_eq!(MAX_MEDIA_OBJECT_BYTES, 20 * P);
    let blobs = MemoryBlobStore::new();
    let mut w = World::with_blobs(fast_config(), blobs.clone());
    let mut a = w.user("alice");
    let (id, key) = init(&mut w, &a);
    // Parts 1-19 at full size: 19 parts' worth short of the limit by one part.
    put_media_row(&w, &with_full_parts(media_row(&w, &id), 1..=19));
    restart(&mut w, &blobs, &mut a);
    let e20 = etag(&chunk(&mut w, &a, &id, &key, 20, full_part(20)));
    // Exactly at the limit: one byte more is refused, even as part 21.
    let (status, code, _) = status_code_message(&chunk(&mut w, &a, &id, &key, 21, vec![1]));
    assert_eq!((status, code.as_str()), (413, "BODY_TOO_LARGE"));
    // Sending a part again replaces it: still exactly at the limit.
    assert_eq!(etag(&chunk(&mut w, &a, &id, &key, 20, full_part(20))), e20);
    let mut list: Vec<Value> = (1..=19)
        .map(|n| json!({"etag": format!("e{n}"), "part_number": n}))
        .collect();
    list.push(json!({"etag": e20, "part_number": 20}));
    let r = complete(&mut w, &a, &id, &key, Value::Array(list));
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    assert_eq!(r.body_json()["size"], MAX_MEDIA_OBJECT_BYTES);
}

#[test]
fn an_account_may_hold_its_byte_limit_exactly_and_not_one_byte_more() {
    assert_eq!(MAX_MEDIA_BYTES_PER_USER, 20 * P);
    let blobs = MemoryBlobStore::new();
    let config = fast_config();
    let queue_bound = config.max_offline_queue_bytes_per_recipient;
    let mut w = World::with_blobs(config, blobs.clone());
    let mut a = w.user("alice");
    let b = w.user("bob");
    let (id, key) = init(&mut w, &a);
    let row = media_row(&w, &id);
    // A completed object of 10 full parts, and this unfinished upload's parts 1-9.
    let mut other = with_full_parts(row.clone(), 1..=10);
    other["upload_id"] = json!(format!("up-{:024x}", 1));
    other["media_key"] = json!(format!("m-{}1", "k".repeat(31)));
    other["completed"] = json!(10);
    put_media_row(&w, &other);
    put_media_row(&w, &with_full_parts(row, 1..=9));
    restart(&mut w, &blobs, &mut a);
    // Unfinished parts count against the quota the estimate reports (media and queue).
    let est = w.get(paths::STORAGE_ESTIMATE, Some(&a.token)).body_json();
    assert_eq!(est["used_bytes"], 19 * P);
    assert_eq!(est["quota_bytes"], 20 * P + queue_bound);
    // The 20th part: exactly at the limit.
    let e20 = etag(&chunk(&mut w, &a, &id, &key, 10, full_part(10)));
    // One byte more in another upload is refused; another account is not affected.
    let (id2, key2) = init(&mut w, &a);
    let (status, code, _) = status_code_message(&chunk(&mut w, &a, &id2, &key2, 1, vec![1]));
    assert_eq!((status, code.as_str()), (403, "QUOTA_EXCEEDED"));
    let (id3, key3) = init(&mut w, &b);
    etag(&chunk(&mut w, &b, &id3, &key3, 1, vec![1]));
    // Replacing a part at the limit holds the same bytes: allowed.
    assert_eq!(etag(&chunk(&mut w, &a, &id, &key, 10, full_part(10))), e20);
}
