//! How a relay starts from its store: the working state loaded and brought up to date, the
//! id generator of this boot, and the JWT seed when no key is configured (or one an older
//! relay left in the store).

use base64::Engine as _;
use sha2::{Digest as _, Sha256};

use crate::config::Config;
use crate::ids::IdGen;
use crate::rows::meta;
use crate::state::State;
use crate::store::{Store, StoreError, StoreRead, Table};

/// The JWT signing seed of a relay without a configured key: SHA-256 of a domain label and the
/// relay's seed (stable across restarts of the same seed; tests and simulations only).
pub(super) fn derived_jwt_seed(seed: u64) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"securechat-relay-jwt-signing-key-v1");
    h.update(seed.to_le_bytes());
    h.finalize().into()
}

/// The JWT signing key an older relay kept in the `meta` table of `store`, if any (keys live
/// outside the store). A shell migrating a data directory writes it to its
/// key file first; the next [`Relay::new`](crate::Relay::new) then deletes the row.
pub fn legacy_jwt_signing_key(
    store: &mut dyn Store,
) -> Result<Option<crate::config::JwtSigningKey>, StoreError> {
    let snapshot = store.load()?;
    let Some(raw) = snapshot
        .get(&Table::Meta)
        .and_then(|rows| rows.get(meta::JWT_SIGNING_KEY))
    else {
        return Ok(None);
    };
    let text: String = serde_json::from_slice(raw)
        .map_err(|_| StoreError::Backend("the stored JWT signing key is not a string".into()))?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .ok()
        .and_then(|k| <[u8; 32]>::try_from(k.as_slice()).ok())
        .ok_or_else(|| StoreError::Backend("the stored JWT signing key is malformed".into()))?;
    Ok(Some(crate::config::JwtSigningKey(bytes)))
}

/// The working state from `store`: its eager tables loaded, the derived tables a store
/// written before them lacks filled once, the caches sized by `config`, the queues'
/// summaries and expiry brought in line with `config`'s TTL.
pub(super) fn open_state(
    config: &Config,
    store: &mut dyn Store,
    reader: &mut dyn StoreRead,
) -> Result<State, StoreError> {
    let snapshot = store.load_eager()?;
    let mut state = State::load(
        &snapshot,
        config.shard,
        config.offline_ttl_ms,
        config.order_retention_ms,
    )?;
    let resume_outbox = !crate::planted::planted!(config, HandoffOutboxNotResumed);
    state.load_handoffs(&snapshot, (config.shard, resume_outbox))?;
    drop(snapshot);
    // Tables derived from others that a store written before them lacks: filled once; and
    // the tombstones of older relays, keyed by author, rekeyed by conversation once.
    type Derive = fn(&mut dyn Store, &mut dyn StoreRead, usize) -> Result<u64, StoreError>;
    let derived: [(&str, Derive); 3] = [
        (meta::ACCOUNT_INDEX, crate::directory::index_stored_accounts),
        (meta::CONTACTS, crate::relations::index_stored_friendships),
        (
            meta::TOMBSTONES_BY_CONVERSATION,
            crate::tombstones::rekey_by_conversation,
        ),
    ];
    for (done, derive) in derived {
        if !state.meta().contains_key(done) {
            derive(&mut *store, &mut *reader, crate::limits::INDEX_PAGE_ROWS)?;
            state.put_meta(done, "1".to_owned());
        }
    }
    state.size_caches(config);
    if !state.meta().contains_key(meta::QUEUE_INDEX) {
        state.summarise_stored_queues(&mut *reader, crate::limits::SUMMARISE_PAGE_ROWS)?;
    }
    let ttl = config.offline_ttl_ms.to_string();
    if state.meta().get(meta::QUEUE_EXPIRY_TTL) != Some(&ttl) {
        // Rows written under another TTL, or before queues had an expiry.
        state.retime_queues();
    }
    state.index_queues();
    #[cfg(feature = "planted-bugs")]
    state.plant(config.planted_bug);
    Ok(state)
}

/// The id generator of this boot: seeded from `seed` and the boot count, which is counted
/// up (so two boots from one seed draw different ids). Each shard of a map counts its own
/// boots and mixes its number in (shard 0 as an unsharded relay), so that two shards started
/// from one seed never draw the same ids.
pub(super) fn boot_ids(state: &mut State, seed: u64, shard: crate::handoff::ShardId) -> IdGen {
    let key = meta::of_shard(meta::BOOT_COUNT, shard);
    let boot: u64 = state
        .meta()
        .get(&key)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut h = Sha256::new();
    h.update(seed.to_le_bytes());
    h.update(boot.to_le_bytes());
    if shard.0 != 0 {
        h.update(shard.0.to_le_bytes());
    }
    let digest = h.finalize();
    let mut s = [0u8; 8];
    s.copy_from_slice(&digest[..8]);
    state.put_meta(&key, (boot + 1).to_string());
    state.set_handoffs_boot(boot);
    IdGen::new(u64::from_le_bytes(s))
}
