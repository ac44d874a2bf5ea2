//! Seed classes: what a run is for, beyond the scenario and the fault plan every seed draws.
//! A class adds to the standard run (the same apps, faults and oracles), it never takes away:
//!
//! | class | the relay | what the run adds |
//! |---|---|---|
//! | `standard` | production limits, except proof of work (difficulty 1) and the per-address registration and per-user message limits (out of the honest traffic's way) | the drills every class runs: each authenticated route asked without any token, requests of the right shape with wrong values, lookups of aliases that exist and that do not |
//! | `days` | as `standard`; the expiry sweep in pages of [`DAYS_PAGE_ROWS`] queues and [`DAYS_PAGE_MESSAGES`] messages; tokens live [`DAYS_JWT_TTL_MS`] | the world's clock (the relay's and every client's) jumps across idle stretches of hours inside the traffic window, [`DAYS_MIN_MS`] or more in all: queued messages expire (24 h), tokens expire (36 h), holds and orders lapse, rate windows pass; a drill queues messages of known ages, presents tokens before and after their lifetime |
//! | `heavy` | no caches; a conversation's tombstones read by row past [`HEAVY_BY_ROW_BYTES`]; the expiry sweep in pages of 3 queues and 16 messages | big state built cheaply, then the relay power-cycled mid-load: a heavy author (hundreds of messages, re-sent and retracted after the restart), many queues, credentials issued before the restart presented after it, push turned off before it; requests over a failing store read |
//! | `limits` | every limit scaled down ([`limits_config`]) so that each is reached in simulated minutes; production's push policy (public `https://` destinations only) | drills fill each request budget, rate limit, queue bound and the spent-credential set, and check that the refusal is the documented one, that the limit holds exactly, that what is below it works and that it frees up when it should |
//!
//! Each class also names its drills ([`Drill::of_class`]), run by the drill host
//! ([`crate::drills`]).
//!
//! A sweep mixes the classes ([`ClassChoice::Mixed`]: a quarter each, drawn from the seed), so
//! a plain `simulate --seeds 0..40` runs every class; `--class` pins one.

use std::fmt;
use std::str::FromStr;

use rand_chacha::ChaCha20Rng;
use rand_core::{Rng as _, SeedableRng as _};
use relay_core::Config;
use relay_core::limits::{Budget, HOUR_MS, MINUTE_MS};
use serde::{Deserialize, Serialize};

use crate::seeds::{TAG_CLASS, derive_seed, derive_u64};

/// What kind of run a seed is.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Class {
    /// The standard run.
    #[default]
    Standard,
    /// Days of simulated time: the world's clock jumps across idle stretches.
    Days,
    /// Big state across a relay power cycle.
    Heavy,
    /// Every limit filled, on a relay with scaled-down limits.
    Limits,
}

impl Class {
    /// Every class, in the order [`ClassChoice::Mixed`] draws them.
    pub const ALL: [Self; 4] = [Self::Standard, Self::Days, Self::Heavy, Self::Limits];

    /// CLI name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Standard => "standard",
            Self::Days => "days",
            Self::Heavy => "heavy",
            Self::Limits => "limits",
        }
    }

    /// The relay's configuration of this class, over the simulator's base configuration
    /// `base` (seed-drawn caches included).
    pub(crate) fn relay_config(self, base: Config) -> Config {
        match self {
            Self::Standard => base,
            Self::Days => Config {
                expiry_page_rows: DAYS_PAGE_ROWS,
                expiry_page_messages: DAYS_PAGE_MESSAGES,
                jwt_ttl_ms: DAYS_JWT_TTL_MS,
                ..base
            },
            Self::Heavy => Config {
                tombstone_cache_bytes: 0,
                queue_cache_bytes: 0,
                account_cache_bytes: 0,
                conversation_cache_bytes: 0,
                contact_cache_bytes: 0,
                tombstone_set_by_row_min_bytes: HEAVY_BY_ROW_BYTES,
                expiry_page_rows: 3,
                expiry_page_messages: 16,
                ..base
            },
            Self::Limits => limits_config(base),
        }
    }

    /// The honest scenario's largest burst in this class (`None`: the scale's own): under
    /// scaled-down queue bounds, the honest traffic stays mostly below them and the drills
    /// reach them on purpose.
    pub(crate) fn burst_cap(self) -> Option<u32> {
        (self == Self::Limits).then_some(LIMITS_BURST_CAP)
    }

    /// Whether honest clients register push targets (under production's push policy the
    /// stand-ins' `http://` endpoints on the simulated network are refused).
    pub(crate) fn honest_push(self) -> bool {
        self != Self::Limits
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Class {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| format!("unknown class {s:?} (standard, days, heavy, limits)"))
    }
}

/// Which class a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClassChoice {
    /// Drawn from the seed: a quarter of the seeds each.
    #[default]
    Mixed,
    /// Always this one.
    Only(Class),
}

impl ClassChoice {
    /// The class of run `seed`.
    pub fn of(self, seed: u64) -> Class {
        match self {
            Self::Only(c) => c,
            Self::Mixed => Class::ALL[(derive_u64(seed, TAG_CLASS, 0) % 4) as usize],
        }
    }
}

impl FromStr for ClassChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "mixed" {
            Ok(Self::Mixed)
        } else {
            s.parse().map(Self::Only)
        }
    }
}

impl fmt::Display for ClassChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Mixed => f.write_str("mixed"),
            Self::Only(c) => f.write_str(c.name()),
        }
    }
}

/// One drill (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Drill {
    /// Authenticated routes without any token.
    Tokenless,
    /// Lookups of aliases that exist and that do not.
    Lookups,
    /// Tokens presented within and after their lifetime.
    Tokens,
    /// Messages of known ages across the idle stretches.
    Ages,
    /// A heavy author across a power cycle.
    HeavyAuthor,
    /// Credentials issued before a power cycle, used after it.
    Credentials,
    /// Request budgets used up and refilled.
    Budgets,
    /// The per-user message limit across a power cycle.
    MessageRate,
    /// Offline-queue bounds filled.
    Queues,
    /// Push destinations under production's policy.
    PushPolicy,
    /// The spent-credential set filled.
    SpentFull,
    /// Many queues across a power cycle, then past their TTL.
    ManyQueues,
    /// Single-use credentials at the ends of their lifetimes.
    Lifetimes,
    /// The fixed windows of the relay's constants: media inits and quota, auth challenges,
    /// typing notices.
    Windows,
    /// Requests of the right shape whose values are wrong.
    Values,
    /// Requests over a failing store read.
    Unreadable,
    /// Push turned off before a power cycle.
    PushOff,
}

impl Drill {
    /// Every drill.
    pub const ALL: [Self; 17] = [
        Self::Tokenless,
        Self::Lookups,
        Self::Tokens,
        Self::Ages,
        Self::HeavyAuthor,
        Self::Credentials,
        Self::Budgets,
        Self::MessageRate,
        Self::Queues,
        Self::PushPolicy,
        Self::SpentFull,
        Self::Windows,
        Self::ManyQueues,
        Self::Lifetimes,
        Self::Values,
        Self::Unreadable,
        Self::PushOff,
    ];

    /// Name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Tokenless => "tokenless",
            Self::Lookups => "lookups",
            Self::Tokens => "tokens",
            Self::Ages => "ages",
            Self::HeavyAuthor => "heavy-author",
            Self::Credentials => "credentials",
            Self::Budgets => "budgets",
            Self::MessageRate => "message-rate",
            Self::Queues => "queues",
            Self::PushPolicy => "push-policy",
            Self::SpentFull => "spent-full",
            Self::Windows => "windows",
            Self::ManyQueues => "many-queues",
            Self::Lifetimes => "lifetimes",
            Self::Values => "values",
            Self::Unreadable => "unreadable",
            Self::PushOff => "push-off",
        }
    }

    /// The drills a run of `class` runs, in order.
    pub fn of_class(class: Class) -> Vec<Self> {
        let own: &[Self] = match class {
            Class::Standard => &[],
            Class::Days => &[Self::Ages, Self::Tokens],
            Class::Heavy => &[
                Self::Credentials,
                Self::HeavyAuthor,
                Self::ManyQueues,
                Self::Unreadable,
                Self::PushOff,
            ],
            Class::Limits => &[
                Self::PushPolicy,
                Self::Budgets,
                Self::MessageRate,
                Self::Queues,
                Self::Windows,
                Self::SpentFull,
            ],
        };
        let mut out = vec![Self::Tokenless, Self::Values];
        out.extend_from_slice(own);
        out.extend([Self::Lifetimes, Self::Lookups]);
        out
    }
}

impl fmt::Display for Drill {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

// ---------------------------------------------------------------------------- days

/// The token lifetime of a `days` relay (`--jwt-ttl-secs`): not the default, so a relay that
/// ignores the setting is seen (a token refused early, between the default and this), and
/// longer than one idle stretch, so a token is used both within and past it.
pub const DAYS_JWT_TTL_MS: u64 = 36 * HOUR_MS;

/// The least simulated time the world's clock jumps over in a `days` run.
pub const DAYS_MIN_MS: u64 = 3 * 24 * HOUR_MS;
/// Due queues per page of the expiry sweep in a `days` run (so that a few dozen queues page).
pub const DAYS_PAGE_ROWS: usize = 4;
/// Messages per step of the expiry sweep in a `days` run.
pub const DAYS_PAGE_MESSAGES: usize = 24;

/// The world-clock jumps of a `days` run: `(offset from the start of traffic, ms)`, each an
/// idle stretch of 2 to 23 hours (so that some queued messages outlive one stretch and
/// expire in the next) plus one of 25 hours (every message queued before it expires), at
/// least [`DAYS_MIN_MS`] in all, spread over the first 80 % of the traffic window.
pub fn days_jumps(seed: u64, window_ms: u64) -> Vec<(u64, u64)> {
    let mut rng = ChaCha20Rng::from_seed(derive_seed(seed, TAG_CLASS, 1));
    let mut stretches = vec![25 * HOUR_MS];
    let mut total = 25 * HOUR_MS;
    while total < DAYS_MIN_MS {
        let ms = 2 * HOUR_MS + rng.next_u64() % (21 * HOUR_MS);
        stretches.push(ms);
        total += ms;
    }
    // The long stretch lands anywhere in the order.
    let at = rng.next_u32() as usize % stretches.len();
    stretches.swap(0, at);
    let slot = window_ms * 4 / 5 / stretches.len() as u64;
    stretches
        .into_iter()
        .enumerate()
        .map(|(i, ms)| {
            let at_ms = window_ms / 10 + i as u64 * slot + rng.next_u64() % (slot / 2).max(1);
            (at_ms, ms)
        })
        .collect()
}

// ---------------------------------------------------------------------------- heavy

/// In a `heavy` run a conversation's stored tombstones heavier than this are read by row (about a
/// dozen tombstones; production: an eighth of the cache, at least 64 KiB).
pub const HEAVY_BY_ROW_BYTES: usize = 2 * 1024;

// ---------------------------------------------------------------------------- limits

/// The honest scenario's largest burst in a `limits` run.
pub const LIMITS_BURST_CAP: u32 = 30;

/// The relay's limits in a `limits` run: small enough that a drill reaches each in simulated
/// minutes, large enough that the honest traffic of the run (bursts capped at
/// [`LIMITS_BURST_CAP`]) mostly stays below them.
pub fn limits_config(base: Config) -> Config {
    // A budget of `burst` at once that refills one token every `every_ms` (so that a drill's
    // own requests, a few ms apart, refill a small fraction of a token at most).
    let budget = |burst: u32, every_ms: u64| Budget {
        burst,
        per_window: u32::try_from(HOUR_MS / every_ms).unwrap_or(u32::MAX),
        window_ms: HOUR_MS,
    };
    Config {
        registrations_per_hour_per_addr: 200,
        msgs_per_min_per_user: LIMITS_MSGS_PER_MIN,
        max_offline_queue_per_conversation: 60,
        max_offline_queue_bytes_per_conversation: 96 * 1024,
        max_offline_queue_per_recipient: 100,
        max_offline_queue_bytes_per_recipient: 256 * 1024,
        max_offline_queue_bytes_per_sender: 160 * 1024,
        max_offline_queue_bytes_total: 1024 * 1024,
        lookups: budget(6, 10 * MINUTE_MS),
        friend_requests: budget(60, 10 * MINUTE_MS),
        account_requests: budget(300, MINUTE_MS),
        public_requests: budget(120, MINUTE_MS),
        max_spent_credentials_per_account: LIMITS_SPENT,
        expiry_page_rows: 3,
        expiry_page_messages: 16,
        ..base
    }
}

/// The per-user message limit of a `limits` run (per minute).
pub const LIMITS_MSGS_PER_MIN: u32 = 90;
/// The spent-credential bound per account of a `limits` run.
pub const LIMITS_SPENT: usize = 128;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mixed_sweep_runs_every_class() {
        let classes: std::collections::BTreeSet<Class> =
            (0..40).map(|s| ClassChoice::Mixed.of(s)).collect();
        assert_eq!(classes.len(), Class::ALL.len());
        assert_eq!(ClassChoice::Only(Class::Days).of(3), Class::Days);
        for c in Class::ALL {
            assert_eq!(c.name().parse::<Class>(), Ok(c));
        }
        assert_eq!("mixed".parse::<ClassChoice>(), Ok(ClassChoice::Mixed));
    }

    #[test]
    fn days_cover_three_days_inside_the_window() {
        for seed in 0..50 {
            let jumps = days_jumps(seed, 120_000);
            let total: u64 = jumps.iter().map(|(_, ms)| ms).sum();
            assert!(total >= DAYS_MIN_MS, "seed {seed}: {total}");
            assert!(jumps.iter().any(|(_, ms)| *ms > 24 * HOUR_MS));
            assert!(jumps.windows(2).all(|w| w[0].0 < w[1].0), "{jumps:?}");
            assert!(jumps.iter().all(|(at, _)| *at < 120_000 * 9 / 10));
        }
    }
}
