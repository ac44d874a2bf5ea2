//! The relay's fuzz targets beyond frames (`fuzz/fuzz_targets/relay_checks.rs`: HTTP bodies,
//! the payment webhook, push subscriptions, tokens and tickets, store rows) on stable, for
//! CI, which has neither nightly nor cargo-fuzz: every corpus file under `fuzz/corpus/<target>/`
//! goes through the same check the target runs, then a deterministic mini-fuzz (arbitrary and
//! mutated inputs) does too.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

#[path = "../../fuzz/fuzz_targets/relay_checks.rs"]
mod relay_checks;

use std::path::Path;

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::RngSeed;

/// Replays `fuzz/corpus/<target>/`; at least `min` files must be there.
fn replay(target: &str, min: usize, check: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    files.sort();
    assert!(
        files.len() >= min,
        "{} files in {}",
        files.len(),
        dir.display()
    );
    for file in &files {
        let data = std::fs::read(file).unwrap();
        let outcome = std::panic::catch_unwind(|| check(&data));
        assert!(outcome.is_ok(), "{} fails its check", file.display());
    }
}

#[test]
fn http_bodies_corpus_replays() {
    replay("http_bodies", 100, relay_checks::http_bodies);
}

#[test]
fn webhook_corpus_replays() {
    replay("webhook", 5, relay_checks::webhook);
}

#[test]
fn push_subscription_corpus_replays() {
    replay("push_subscription", 10, relay_checks::push_subscription);
}

#[test]
fn tokens_corpus_replays() {
    replay("tokens", 5, relay_checks::tokens);
}

#[test]
fn store_rows_corpus_replays() {
    replay("store_rows", 5, relay_checks::store_rows);
}

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        rng_seed: RngSeed::Fixed(0x0f22_0c0e),
        ..ProptestConfig::default()
    }
}

/// JSON-ish text: the shapes the body decoders see most.
fn jsonish() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        vec(any::<u8>(), 0..96),
        "\\{(\"[a-z_]{1,12}\":(\"[ -~]{0,16}\"|-?[0-9]{1,20}|true|null|\\[\\]|\\{\\}),?){0,5}\\}?"
            .prop_map(String::into_bytes),
    ]
}

proptest! {
    #![proptest_config(config(200))]

    #[test]
    fn arbitrary_http_bodies(route in any::<u8>(), body in jsonish()) {
        let mut data = vec![route];
        data.extend(body);
        relay_checks::http_bodies(&data);
    }

    #[test]
    fn arbitrary_webhooks(mode in 0u8..3, body in jsonish()) {
        let mut data = vec![mode];
        data.extend(body);
        relay_checks::webhook(&data);
    }

    #[test]
    fn arbitrary_push_endpoints(
        scheme in prop_oneof![Just("https://"), Just("http://"), Just("HTTPS://"), Just("")],
        host in "([a-z0-9.\\-_]{0,20}|\\[[0-9a-f:.%]{0,30}\\]|(0x)?[0-9a-f]{1,10}(\\.[0-9]{1,4}){0,4})",
        rest in "(:[0-9]{0,6})?(/[ -~]{0,10})?",
        addrs in vec(prop_oneof![
            any::<[u8; 4]>().prop_map(|o| std::net::IpAddr::from(o).to_string()),
            any::<[u8; 16]>().prop_map(|o| std::net::IpAddr::from(o).to_string()),
        ], 0..3),
    ) {
        let text = format!("{scheme}{host}{rest}\n{}", addrs.join("\n"));
        relay_checks::push_subscription(text.as_bytes());
    }

    #[test]
    fn arbitrary_tokens(text in "(?s).{0,120}") {
        relay_checks::tokens(text.as_bytes());
    }

    #[test]
    fn arbitrary_store_rows(data in vec(any::<u8>(), 0..256)) {
        relay_checks::store_rows(&data);
    }
}
