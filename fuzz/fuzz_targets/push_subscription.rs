//! The `push_subscription` property of `relay_checks.rs` (see its table), on libFuzzer's inputs. The
//! corpus `fuzz/corpus/push_subscription/` replays on stable in `relay-core/tests/fuzz_corpus.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "relay_checks.rs"]
#[allow(dead_code, reason = "each target uses one of the checks")]
mod relay_checks;

fuzz_target!(|data: &[u8]| relay_checks::push_subscription(data));
