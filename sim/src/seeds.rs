//! Every random stream of a run derives from its seed through [`derive_seed`]: one tag per
//! consumer, listed here so no two consumers share a stream. A leaf of the crate.
//!
//! | tag | stream |
//! |---|---|
//! | [`TAG_SCENARIO`] | the scenario's draw |
//! | [`TAG_PLAN`] | the fault plan's draw |
//! | [`TAG_RELAY`] | the relay's RNG (`n`: 0 for `relay`, 1 and 2 for the failover topology's relays; 9: whether it commits inline; 10: its shards; 11: what happens to the crossings between its cores) |
//! | [`TAG_AUDITOR`] | the commerce auditor's mnemonic |
//! | [`TAG_MEDIA`] | the plaintext of media action `n` |
//! | [`TAG_PUSH`] | the push stand-ins' keys and the relay's push worker |
//! | [`TAG_CLASS`] | the run's class (`n` 0) and the `days` class's clock jumps (`n` 1) |
//! | [`TAG_DRILL`] | the drill host's accounts (`n`: the account's number) |
//! | [`TAG_RELAY_START`] | one start of a relay (`n`: its start on its host, from 0; seeded from the host's [`TAG_RELAY`] number, as the `relay` binary draws fresh randomness at each start) |
//! | [`TAG_RELAY_KEY`] | the relay's configured JWT signing key (one per run: the key file the relays of a deployment share) |
//! | [`TAG_READS`] | the relay's read latencies (`n` 0: the run's slowest read; `n` 1: each read's draw) |
//! | [`TAG_STEPS`] | a `steps` world: its relay (`n` 0), each user's client (`n`: the user's number from 1) and mnemonic (that number shifted left by 32) |
//! | [`client_tag`] | client `c`'s device `d` (`n`: its incarnation, from 1): `c << 8 \| d` |

/// The scenario's draw.
pub(crate) const TAG_SCENARIO: u64 = 1;
/// The fault plan's draw.
pub(crate) const TAG_PLAN: u64 = 2;
/// The relay's RNG.
pub(crate) const TAG_RELAY: u64 = 3;
/// The commerce auditor's mnemonic.
pub(crate) const TAG_AUDITOR: u64 = 4;
/// The plaintext of media actions.
pub(crate) const TAG_MEDIA: u64 = 5;
/// The push world.
pub(crate) const TAG_PUSH: u64 = 6;
/// The run's class and its clock jumps.
pub(crate) const TAG_CLASS: u64 = 7;
/// The drill host's accounts.
pub(crate) const TAG_DRILL: u64 = 8;
/// One start of a relay.
pub(crate) const TAG_RELAY_START: u64 = 9;
/// The relay's configured JWT signing key.
pub(crate) const TAG_RELAY_KEY: u64 = 10;
/// The relay's read latencies.
pub(crate) const TAG_READS: u64 = 11;
/// A [`crate::steps`] world: its relay (`n` 0), each user's client (`n`: the user's number,
/// from 1) and mnemonic (`n`: the number shifted left by 32).
pub(crate) const TAG_STEPS: u64 = 12;

/// The 32-byte seed of stream `(tag, n)` of run `seed`.
pub(crate) fn derive_seed(seed: u64, tag: u64, n: u64) -> [u8; 32] {
    let mut out = [0u8; 32];
    out[..8].copy_from_slice(&seed.to_le_bytes());
    out[8..16].copy_from_slice(&tag.to_le_bytes());
    out[16..24].copy_from_slice(&n.to_le_bytes());
    out
}

/// The tag of client `client`'s device `device` (its incarnations are the `n` of
/// [`derive_seed`], counted from 1, so client 0's second device never meets
/// `(TAG_SCENARIO, 0)`).
pub(crate) fn client_tag(client: usize, device: u8) -> u64 {
    (client as u64) << 8 | u64::from(device)
}

/// The next number of a splitmix64 stream whose state is `state` (a cheap draw per event for
/// what a lock guards: the store's read latencies, the crossings' faults).
pub(crate) fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The first number drawn from stream `(tag, n)` (a seed for an API that takes a `u64`):
/// every bit depends on the seed, the tag and `n`.
pub(crate) fn derive_u64(seed: u64, tag: u64, n: u64) -> u64 {
    use rand_chacha::ChaCha20Rng;
    use rand_core::{Rng as _, SeedableRng as _};
    ChaCha20Rng::from_seed(derive_seed(seed, tag, n)).next_u64()
}
