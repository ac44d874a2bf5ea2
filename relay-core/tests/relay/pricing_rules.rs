//! `relay_core::pricing` rule by rule: each alias below is chosen so that exactly one rule
//! (or none) applies, and the default catalog's exact content.

use relay_core::pricing::{PREMIUM_WORDS, default_catalog, price};
use wire::AliasId;
use wire::http::VanityTier::{self, Premium, Standard, Top};

fn p(s: &str) -> (VanityTier, u64) {
    price(&AliasId::parse_alias(s).unwrap())
}

#[test]
fn digit_aliases_without_a_pattern_cost_their_length_s_base() {
    for (alias, expected) in [
        ("123", (Top, 1_000)),
        ("121", (Top, 1_000)),
        ("1203", (Premium, 500)),
        ("12035", (Premium, 200)),
        ("120357", (Standard, 100)),
        ("1203579", (Standard, 50)),
        ("12035790", (Standard, 30)),
        ("120357901", (Standard, 20)),
        ("1203579012", (Standard, 20)),
    ] {
        assert_eq!(p(alias), expected, "{alias}");
    }
}

#[test]
fn each_digit_pattern_alone() {
    for (alias, expected, rule) in [
        ("11235", (Premium, 200), "a run of 2 counts for nothing"),
        ("11123", (Premium, 600), "a run of 3: x3"),
        ("11111235", (Standard, 150), "a run of 5: x5"),
        ("1212", (Top, 2_000), "period 2 (= half the length): x4"),
        (
            "121212",
            (Premium, 400),
            "period 2, not half the length: x4",
        ),
        (
            "123123",
            (Premium, 400),
            "period of half the length, not 2: x4",
        ),
        ("1357", (Premium, 500), "steps of 2 are no sequence"),
        (
            "4321",
            (Top, 5_000),
            "a descending sequence: x10, and its 4 does not halve",
        ),
        (
            "87654321",
            (Premium, 300),
            "a descending sequence of 8: x10",
        ),
        (
            "12356868",
            (Standard, 60),
            "exactly half the digits 6 or 8: x2",
        ),
        (
            "12035786",
            (Standard, 30),
            "a quarter of the digits 6 or 8: nothing",
        ),
        ("1221", (Top, 1_000), "a palindrome of 4: x2"),
        (
            "1203574",
            (Standard, 25),
            "an unlucky 4 without a sequence: /2",
        ),
    ] {
        assert_eq!(p(alias), expected, "{alias}: {rule}");
    }
}

#[test]
fn word_aliases_cost_their_length_s_base_and_the_word_rules() {
    for (alias, expected) in [
        ("xyz", (Premium, 800)),
        ("xyzw", (Premium, 400)),
        ("xyzwv", (Premium, 200)),
        ("xyzwvu", (Standard, 120)),
        ("xyzwvut", (Standard, 60)),
        ("xy_", (Premium, 400)),
        ("xy1", (Premium, 400)),
        ("zen", (Top, 2_400)),
        ("neo_", (Premium, 200)),
    ] {
        assert_eq!(p(alias), expected, "{alias}");
    }
    for word in PREMIUM_WORDS {
        let (_, price) = p(word);
        let base = match word.len() {
            3 => 800,
            4 => 400,
            5 => 200,
            6 => 120,
            _ => 60,
        };
        assert_eq!(price, base * 3, "{word}");
    }
}

#[test]
fn the_default_catalog_holds_exactly_the_generated_aliases() {
    let catalog: Vec<String> = default_catalog()
        .iter()
        .map(|a| a.as_str().to_owned())
        .collect();
    let has = |s: &str| catalog.iter().any(|a| a == s);
    // 55 runs of one digit (zeros only as 8), 36 round numbers, 48 pairs of lucky digits,
    // 41 listed numbers, 33 words.
    assert_eq!(catalog.len(), 55 + 36 + 48 + 41 + 33, "{catalog:?}");
    for s in [
        "00000000", "111", "11111111", "999", "99999999", "100", "900000", "1000", "11116666",
        "66661111", "16161616", "61616161", "116", "661", "1666", "6111", "99998888", "9888",
        "01234567", "52013140", "satoshi", "degen",
    ] {
        assert!(has(s), "{s} missing");
    }
    for s in [
        "000",
        "0000",
        "0000000",
        "1111111111",
        "1000000",
        "1616",
        "1661",
        "neo_",
    ] {
        assert!(!has(s), "{s} should not be in the catalog");
    }
    assert!(
        catalog.windows(2).all(|w| w[0] < w[1]),
        "sorted, no repeats"
    );
}
