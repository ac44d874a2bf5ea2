//! Arbitrary bytes through both frame decoders: never panics, and whatever decodes re-encodes
//! and decodes again to an equal value. The property lives in `check.rs`, shared with the stable
//! corpus replay in `wire/tests/fuzz_corpus.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "check.rs"]
mod check;

fuzz_target!(|data: &[u8]| check::check(data));
