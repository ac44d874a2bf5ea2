//! Vanity alias prices and tiers (a pure function of the alias) and the default catalog.
//!
//! # Rules ([`price`])
//! **Digits only.** Base by length: 3 → 1000, 4 → 500, 5 → 200, 6 → 100, 7 → 50, 8 → 30,
//! longer → 20 USDT. Then multipliers:
//! * every digit the same (`88888888`): ×50, and no other pattern counts;
//! * otherwise, longest run of one digit `r ≥ 3`: ×r (`66668888`: ×4);
//! * a repeating block of period 2 or half the length (`68686868`, `12341234`,
//!   when no run of 3 counted): ×4;
//! * a straight sequence of length ≥ 4, ascending or descending (`12345678`, `4321`): ×10;
//! * a palindrome of length ≥ 4 (`12344321`): ×2;
//! * lucky digits: at least half of the digits are 6 or 8: ×2;
//! * an unlucky 4 anywhere (when no sequence rule applied): ÷2.
//!
//! **With letters** (`crypto`, `alice`): base by length: 3 → 800, 4 → 400, 5 → 200, 6 → 120,
//! longer → 60 USDT; a word of the curated list [`PREMIUM_WORDS`]: ×3; containing a digit or
//! `_`: ÷2.
//!
//! Every price is then clamped to `[MIN_PRICE_USDT, MAX_PRICE_USDT]`. Tier: `top` from
//! [`TOP_TIER_USDT`], `premium` from [`PREMIUM_TIER_USDT`], else `standard`. The featured list is
//! the `top` tier.

use std::collections::BTreeSet;

use wire::AliasId;
use wire::http::VanityTier;

/// Lowest price of any alias, in USDT.
pub const MIN_PRICE_USDT: u64 = 10;
/// Highest price of any alias, in USDT.
pub const MAX_PRICE_USDT: u64 = 1_000_000;
/// Price from which an alias is `top` (and featured), in USDT.
pub const TOP_TIER_USDT: u64 = 1_000;
/// Price from which an alias is `premium`, in USDT.
pub const PREMIUM_TIER_USDT: u64 = 200;

/// Words priced ×3.
pub const PREMIUM_WORDS: &[&str] = &[
    "crypto", "satoshi", "bitcoin", "alice", "bob", "ether", "hodl", "moon", "whale", "vault",
    "cipher", "ghost", "king", "queen", "ace", "zen", "alpha", "omega", "neo",
];

/// Other words in the default catalog.
const WORDS: &[&str] = &[
    "wallet", "secure", "signal", "shadow", "phoenix", "dragon", "tiger", "lucky", "nova", "max",
    "sam", "anon", "nakamoto", "degen",
];

fn digits_base(len: usize) -> u64 {
    match len {
        0..=3 => 1_000,
        4 => 500,
        5 => 200,
        6 => 100,
        7 => 50,
        8 => 30,
        _ => 20,
    }
}

fn words_base(len: usize) -> u64 {
    match len {
        0..=3 => 800,
        4 => 400,
        5 => 200,
        6 => 120,
        _ => 60,
    }
}

fn longest_run(b: &[u8]) -> usize {
    let mut best = 0;
    let mut cur = 0;
    let mut prev = None;
    for &c in b {
        cur = if prev == Some(c) { cur + 1 } else { 1 };
        prev = Some(c);
        best = best.max(cur);
    }
    best
}

fn has_period(b: &[u8], p: usize) -> bool {
    p > 0 && p < b.len() && b.len().is_multiple_of(p) && (p..b.len()).all(|i| b[i] == b[i - p])
}

fn is_sequence(b: &[u8]) -> bool {
    if b.len() < 4 {
        return false;
    }
    let up = b.windows(2).all(|w| w[1] == w[0].wrapping_add(1));
    let down = b.windows(2).all(|w| w[0] == w[1].wrapping_add(1));
    up || down
}

/// The tier and price (whole USDT) of `alias`, by the rules in the module documentation.
pub fn price(alias: &AliasId) -> (VanityTier, u64) {
    let s = alias.as_str().as_bytes();
    let len = s.len();
    let mut p: u64;
    if s.iter().all(u8::is_ascii_digit) {
        p = digits_base(len);
        let run = longest_run(s);
        let sequence = is_sequence(s);
        if run == len {
            p *= 50;
        } else {
            if run >= 3 {
                p *= u64::try_from(run).unwrap_or(1);
            } else if has_period(s, 2) || has_period(s, len / 2) {
                p *= 4;
            }
            if sequence {
                p *= 10;
            }
            if len >= 4 && s.iter().eq(s.iter().rev()) {
                p *= 2;
            }
            let lucky = s.iter().filter(|c| **c == b'6' || **c == b'8').count();
            if lucky * 2 >= len {
                p *= 2;
            }
            if !sequence && s.contains(&b'4') {
                p /= 2;
            }
        }
    } else {
        p = words_base(len);
        if PREMIUM_WORDS.contains(&alias.as_str()) {
            p *= 3;
        }
        if s.iter().any(|c| c.is_ascii_digit() || *c == b'_') {
            p /= 2;
        }
    }
    let p = p.clamp(MIN_PRICE_USDT, MAX_PRICE_USDT);
    let tier = if p >= TOP_TIER_USDT {
        VanityTier::Top
    } else if p >= PREMIUM_TIER_USDT {
        VanityTier::Premium
    } else {
        VanityTier::Standard
    };
    (tier, p)
}

/// The default inventory (about 200 aliases), generated deterministically, sorted.
pub fn default_catalog() -> Vec<AliasId> {
    let mut set: BTreeSet<String> = BTreeSet::new();
    for d in 0..=9u8 {
        let c = char::from(b'0' + d);
        for len in 3..=8 {
            if d > 0 || len == 8 {
                set.insert(std::iter::repeat_n(c, len).collect());
            }
        }
        if d > 0 {
            // 100, 1000, … 900000
            for zeros in 2..=5 {
                let mut s = String::from(c);
                s.extend(std::iter::repeat_n('0', zeros));
                set.insert(s);
            }
        }
    }
    let lucky = ['1', '6', '8', '9'];
    for a in lucky {
        for b in lucky {
            if a != b {
                let mut s: String = std::iter::repeat_n(a, 4).collect();
                s.extend(std::iter::repeat_n(b, 4));
                set.insert(s);
                set.insert(format!("{a}{b}").repeat(4));
                set.insert(format!("{a}{a}{b}"));
                set.insert(format!("{a}{b}{b}{b}"));
            }
        }
    }
    for s in [
        "123", "321", "168", "518", "1234", "4321", "6688", "8866", "1688", "2024", "2025", "1314",
        "12345", "54321", "66888", "88666", "16888", "123456", "654321", "666888", "888666",
        "168168", "112233", "778899", "1234567", "7654321", "01234567", "12345678", "23456789",
        "87654321", "98765432", "12344321", "68866886", "88666688", "16888861", "11223344",
        "55667788", "12341234", "56785678", "13141314", "52013140",
    ] {
        set.insert(s.to_owned());
    }
    for w in PREMIUM_WORDS.iter().chain(WORDS) {
        set.insert((*w).to_owned());
    }
    set.into_iter()
        .filter_map(|s| AliasId::parse_alias(&s).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> (VanityTier, u64) {
        price(&AliasId::parse_alias(s).unwrap())
    }

    #[test]
    fn all_same_digits_are_top() {
        assert_eq!(p("88888888"), (VanityTier::Top, 1_500));
        assert_eq!(p("888"), (VanityTier::Top, 50_000));
        assert_eq!(p("00000000"), (VanityTier::Top, 1_500));
    }

    #[test]
    fn sequences_runs_and_patterns() {
        // 30 × 10 (sequence)
        assert_eq!(p("12345678"), (VanityTier::Premium, 300));
        // 30 × 4 (runs of 4) × 2 (lucky)
        assert_eq!(p("66668888"), (VanityTier::Premium, 240));
        // 30 × 4 (period 2) × 2 (lucky)
        assert_eq!(p("68686868"), (VanityTier::Premium, 240));
        // 30 × 2 (palindrome), contains 4: ÷2
        assert_eq!(p("12344321"), (VanityTier::Standard, 30));
        // 500 × 10
        assert_eq!(p("1234"), (VanityTier::Top, 5_000));
        // 500 × 2 (lucky)
        assert_eq!(p("1688"), (VanityTier::Top, 1_000));
        // 100 plain
        assert_eq!(p("520131"), (VanityTier::Standard, 100));
    }

    #[test]
    fn words() {
        assert_eq!(p("crypto"), (VanityTier::Premium, 360));
        assert_eq!(p("bob"), (VanityTier::Top, 2_400));
        assert_eq!(p("wallet"), (VanityTier::Standard, 120));
        assert_eq!(p("a_1"), (VanityTier::Premium, 400));
        assert_eq!(p("verylongname"), (VanityTier::Standard, 60));
    }

    #[test]
    fn clamped_and_deterministic() {
        let (_, hi) = p("999");
        assert!(hi <= MAX_PRICE_USDT);
        assert_eq!(p("77777777"), p("77777777"));
        assert!(p("1234567890123").1 >= MIN_PRICE_USDT);
    }

    #[test]
    fn catalog_is_about_200_valid_aliases() {
        let c = default_catalog();
        assert!((150..=260).contains(&c.len()), "{}", c.len());
        assert!(c.windows(2).all(|w| w[0] < w[1]));
        assert!(c.iter().any(|a| a.as_str() == "88888888"));
        assert!(c.iter().any(|a| a.as_str() == "satoshi"));
        assert!(c.iter().any(|a| price(a).0 == VanityTier::Top));
        assert!(!c.iter().any(|a| a.as_str().starts_with('u')));
    }
}
