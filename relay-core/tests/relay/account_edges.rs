//! Registration and account reads at their edges: nicknames at the combining-mark limit and
//! emoji sequences that only look alike, and the storage estimate's sums.

use relay_core::{MemoryBlobStore, Method};
use serde_json::json;
use wire::http::paths;

use crate::world::{World, fast_config};

/// Registers a fresh account named `nick`; the status.
fn register(w: &mut World, nick: &str, n: &mut u32) -> u16 {
    *n += 1;
    let (sk, x) = w.fresh_keys();
    w.register_with(&sk, x, nick, &format!("198.51.100.{n}"))
        .status
}

#[test]
fn nicknames_at_the_edges_of_marks_and_emoji_sequences() {
    let mut w = World::new();
    let mut n = 0;
    for nick in [
        // Four combining marks after one base character (no precomposed form) are allowed.
        "x\u{0301}\u{0302}\u{0303}\u{0304}",
        // U+FE0F after a heart, and a joiner after it (heart on fire: the joiner's left
        // neighbour is the heart, past the variation selector).
        "\u{2764}\u{FE0F}\u{200D}\u{1F525}",
        // A joiner after a skin-toned emoji.
        "\u{1F469}\u{1F3FD}\u{200D}\u{1F692}",
    ] {
        assert_eq!(register(&mut w, nick, &mut n), 201, "{nick:?}");
    }
    for nick in [
        // Five marks.
        "x\u{0301}\u{0302}\u{0303}\u{0304}\u{0305}",
        // Invisible characters at the very start (nothing before them).
        "\u{FE0F}x",
        "\u{E0067}x",
        "\u{200D}\u{1F525}",
        // A joiner with an emoji on one side only, or between non-emoji letters and digits.
        "\u{1F468}\u{200D}x",
        "x\u{200D}\u{1F468}",
        "\u{00E9}\u{200D}\u{00FC}",
        "1\u{200D}2",
    ] {
        assert_eq!(register(&mut w, nick, &mut n), 400, "{nick:?}");
    }
}

/// The estimate counts every queued message as the queue bounds count it (from the queue
/// index, reading no message) and the caller's media bytes.
#[test]
fn the_storage_estimate_sums_queued_messages_and_media() {
    let mut w = World::with_blobs(fast_config(), MemoryBlobStore::new());
    let mut a = w.user("alice");
    let b = w.user("bob");
    let conv = w.befriend(&a, &b);
    let ca = w.connect(&mut a);
    w.sync(ca);
    let payloads = ["YWJj", "YWJjZGVmZ2g=", "eHl6"];
    for (i, p) in payloads.iter().enumerate() {
        w.send(
            ca,
            json!({"type":"msg","id":format!("m{i}"),"to":b.alias,"conv_id":conv,"payload":p}),
        );
    }
    let s = w.get(paths::STORAGE_ESTIMATE, Some(&b.token)).body_json();
    // Each message as the queue bounds count it: its payload, its id and the relay's overhead.
    let queued: u64 = payloads
        .iter()
        .map(|p| relay_core::limits::queued_message_bytes(2, p.len()))
        .sum();
    assert_eq!(
        (s["used_bytes"].as_u64(), s["message_count"].as_u64()),
        (Some(queued), Some(3))
    );
    // Bob's unfinished upload of 1,000 bytes counts too.
    let r = w.post(
        paths::MEDIA_INIT,
        json!({"content_type": "application/octet-stream"}),
        Some(&b.token),
    );
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    let v = r.body_json();
    let (upload, key) = (
        v["upload_id"].as_str().unwrap().to_owned(),
        v["media_key"].as_str().unwrap().to_owned(),
    );
    let r = w.raw(
        Method::Post,
        &format!("/api/v1/media/upload-parts/{upload}/chunk?mediaKey={key}&partNumber=1"),
        vec![7; 1_000],
        Some(&b.token),
    );
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    let s = w.get(paths::STORAGE_ESTIMATE, Some(&b.token)).body_json();
    assert_eq!(s["used_bytes"].as_u64(), Some(queued + 1_000));
}

/// Invisible characters that are also combining marks (variation selectors, U+034F, the
/// Mongolian free variation selectors) are refused after any letter, as the other invisible
/// characters are: "admin" + U+FE00 would otherwise pass for "admin". U+FE0F after an emoji
/// still passes.
#[test]
fn invisible_combining_marks_are_refused_after_a_letter() {
    let mut w = World::new();
    let mut n = 100;
    for nick in [
        "admin\u{FE00}",
        "x\u{FE0F}",
        "\u{00E9}\u{FE0F}",
        "a\u{034F}b",
        "x\u{180B}",
        "x\u{E0100}",
    ] {
        assert_eq!(register(&mut w, nick, &mut n), 400, "{nick:?}");
    }
    for nick in ["\u{2764}\u{FE0F}", "\u{263A}\u{FE0F} hi", "e\u{0301}"] {
        assert_eq!(register(&mut w, nick, &mut n), 201, "{nick:?}");
    }
}
