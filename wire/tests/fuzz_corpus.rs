//! The `decode_frames` fuzz target's property on stable, for CI (which has neither nightly nor
//! cargo-fuzz): replays the seed corpus `fuzz/corpus/decode_frames/` and runs a deterministic
//! mini-fuzz (arbitrary bytes and strings, mutated valid frames, frame-shaped JSON) through the
//! same `check` the fuzz target uses.

mod common;

#[path = "../../fuzz/fuzz_targets/check.rs"]
mod check;

use std::path::Path;

use check::check;
use common::{CLIENT_TYPES, SERVER_TYPES, client_frame, json_value, server_frame};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::RngSeed;
use serde_json::{Map, Value};
use wire::limits::MAX_FRAME_BYTES;
use wire::{ClientFrame, FrameError, ServerFrame};

#[test]
fn seed_corpus_replays() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/decode_frames");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    files.sort();
    let seeds = files
        .iter()
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("seed-")
        })
        .count();
    assert!(seeds >= 20, "only {seeds} seed files in {}", dir.display());
    let mut decoded = 0;
    for file in &files {
        let data = std::fs::read(file).unwrap();
        check(&data);
        decoded += usize::from(
            ClientFrame::decode_bytes(&data).is_ok()
                || std::str::from_utf8(&data).is_ok_and(|t| ServerFrame::decode(t).is_ok()),
        );
    }
    assert!(decoded >= seeds / 2, "most seeds should be valid frames");
}

#[test]
fn frames_that_grow_when_re_encoded() {
    // The goaway reason is written twice.
    let reason = "r".repeat(MAX_FRAME_BYTES / 2);
    let goaway = format!(r#"{{"type":"goaway","reason":"{reason}"}}"#);
    assert!(ServerFrame::decode(&goaway).unwrap().encode().len() > MAX_FRAME_BYTES);
    check(goaway.as_bytes());
    // `1e5` renders as `100000.0`.
    let n = (MAX_FRAME_BYTES - 64) / 4;
    let floats = format!(r#"{{"type":"x","a":[{}1]}}"#, "1e5,".repeat(n));
    assert!(floats.len() <= MAX_FRAME_BYTES);
    let frame = ClientFrame::decode(&floats).unwrap();
    assert!(matches!(
        ClientFrame::decode(&frame.encode()),
        Err(FrameError::TooLarge { .. })
    ));
    check(floats.as_bytes());
}

#[test]
fn long_floats_in_unknown_frames_stay_within_an_ulp() {
    // serde_json without `float_roundtrip` parses some 17-digit floats one ulp off; the check
    // tolerates that for unknown frames (the only frames that can hold floats).
    for text in [
        r#"{"type":"x","a":8.012960323295518e+299}"#,
        r#"{"type":"x","a":-4.903402250120422e+299}"#,
        r#"{"type":"x","a":[0.1,2.2250738585072014e-308,1.7976931348623157e308]}"#,
    ] {
        check(text.as_bytes());
    }
}

// ---------------------------------------------------------------------------------------------
// deterministic mini-fuzz

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        rng_seed: RngSeed::Fixed(0x5ec0_c4a7),
        ..ProptestConfig::default()
    }
}

/// JSON fragments spliced into valid frames.
const FRAGMENTS: &[&str] = &[
    "\"",
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "null",
    "true",
    "-1",
    "1e400",
    "18446744073709551616",
    "\"type\":\"msg\",",
    "\"payload\":",
    "\"seq\":-0",
    "\\u0000",
    "\\ud800",
    "é",
    "\u{1f600}",
    "\"id\":7,",
    "\"crypto_v\":2,",
    "\"from\":\"\",",
    " ",
    "\n",
];

#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Insert(usize, u8),
    Delete(usize, usize),
    Truncate(usize),
    Splice(usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Flip(i, b)),
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Insert(i, b)),
        (any::<usize>(), 1..8usize).prop_map(|(i, n)| Mutation::Delete(i, n)),
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), 0..FRAGMENTS.len()).prop_map(|(i, f)| Mutation::Splice(i, f)),
    ]
}

fn mutate(mut data: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
    for m in mutations {
        let at = |i: usize, len: usize| if len == 0 { 0 } else { i % (len + 1) };
        match *m {
            Mutation::Flip(i, b) if !data.is_empty() => {
                let i = i % data.len();
                data[i] ^= b;
            }
            Mutation::Flip(..) => {}
            Mutation::Insert(i, b) => data.insert(at(i, data.len()), b),
            Mutation::Delete(i, n) => {
                let start = at(i, data.len());
                let end = (start + n).min(data.len());
                data.drain(start..end);
            }
            Mutation::Truncate(i) => data.truncate(at(i, data.len())),
            Mutation::Splice(i, f) => {
                let i = at(i, data.len());
                data.splice(i..i, FRAGMENTS[f].bytes());
            }
        }
    }
    data
}

/// Field names of every frame, so generated objects hit the typed decoders' error paths.
const FIELDS: &[&str] = &[
    "id",
    "to",
    "from",
    "conv_id",
    "crypto_v",
    "payload",
    "seq",
    "at",
    "call_id",
    "reason",
    "error",
    "message",
    "ref_type",
    "order_id",
    "ref_id",
    "friendship_id",
    "nickname",
    "conversation_id",
    "channel_id",
    "post",
    "created_at",
    "author_alias_id",
    "content",
    "type",
];

fn field_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => "[a-z0-9_]{3,12}".prop_map(Value::String),
        1 => "[A-Za-z0-9._:/ -]{0,12}".prop_map(Value::String),
        2 => any::<u64>().prop_map(Value::from),
        1 => (0..=3u64).prop_map(Value::from),
        1 => any::<i64>().prop_map(Value::from),
        1 => json_value(),
        1 => vec((proptest::sample::select(FIELDS), "[a-z0-9_]{3,8}"), 0..6).prop_map(|kv| {
            Value::Object(kv.into_iter().map(|(k, v)| (k.to_owned(), Value::String(v))).collect())
        }),
    ]
}

fn frame_shaped_json() -> impl Strategy<Value = String> {
    let types: Vec<&str> = CLIENT_TYPES.iter().chain(SERVER_TYPES).copied().collect();
    (
        proptest::sample::select(types),
        vec((proptest::sample::select(FIELDS), field_value()), 0..8),
    )
        .prop_map(|(t, fields)| {
            let mut obj = Map::new();
            obj.insert("type".to_owned(), Value::String(t.to_owned()));
            for (k, v) in fields {
                obj.insert(k.to_owned(), v);
            }
            Value::Object(obj).to_string()
        })
}

proptest! {
    #![proptest_config(config(1000))]

    #[test]
    fn arbitrary_bytes(data in vec(any::<u8>(), 0..160)) {
        check(&data);
    }

    #[test]
    fn arbitrary_text(text in "(?s).{0,80}") {
        check(text.as_bytes());
    }

    #[test]
    fn mutated_client_frames(frame in client_frame(), ms in vec(mutation(), 1..4)) {
        check(&mutate(frame.encode().into_bytes(), &ms));
    }

    #[test]
    fn mutated_server_frames(frame in server_frame(), ms in vec(mutation(), 1..4)) {
        check(&mutate(frame.encode().into_bytes(), &ms));
    }

    #[test]
    fn frame_shaped_objects(text in frame_shaped_json()) {
        check(text.as_bytes());
    }
}
