//! The accounts the relay holds in memory: a bounded cache over the store's `accounts` table
//! and its lookup keys (`account_index`).
//!
//! An account is needed by its uuid (a token's check, a login, a profile in a friend list), by
//! its alias (a friend request, a call, the `to` of every routed frame) and by its public keys
//! (a registration's duplicate check). None of it is loaded at start:
//!
//! * **Read on first use.** [`Cx::account`](crate::cx::Cx::account) reads the row of a uuid that is not in memory
//!   (one keyed read); [`Cx::account_by_alias`](crate::cx::Cx::account_by_alias) and [`Cx::account_by`](crate::cx::Cx::account_by) read the
//!   index row of an alias or a key, then the account it names. Every index hit is checked
//!   against the account row (the row wins), so an index row made stale by a change not yet
//!   committed (an alias replaced by a vanity bind) finds nothing.
//! * **Bounded** by [`crate::Config::account_cache_bytes`] (an estimate of the heap each
//!   account takes with its three lookup entries, [`ACCOUNT_BYTES`] over its strings), least
//!   recently used out first.
//! * **Only clean accounts are evicted** ([`crate::lru`]): a write pins its account until the
//!   batch that carries it is durable, so what the store does not have yet (a registration in
//!   flight, a new alias) is always in memory, and so are its lookup keys: two registrations
//!   of one key in consecutive batches meet in memory, not in the store.
//! * **Unknown names are not remembered**: a lookup of an alias or key that no account has is
//!   a read each time (the requests that make them are rate-limited).
//!
//! A read that fails changes nothing: the request gets 503 `STORAGE_UNAVAILABLE`, a frame an
//! error frame of that code (no ack), and the client tries again.

use std::collections::BTreeMap;
use std::sync::Arc;

use wire::{AliasId, UserUuid};

use crate::lru::{Lru, Weigh};
use crate::rows::{AccountRow, decode};
use crate::store::{StoreError, StoreRead, Table};

/// Estimated heap per account in memory besides its strings: the row (uuid, two keys,
/// numbers), its `Arc`, its entry and place in the LRU order, and its three lookup entries
/// (measured: ~1,250 bytes per account held, strings included, by `relay-pg`'s
/// `state_memory` example).
pub(crate) const ACCOUNT_BYTES: usize = 1_160;

/// An account as the cache holds it (shared: a caller keeps it across its other calls).
#[derive(Debug, Clone)]
pub(crate) struct Cached(pub(crate) Arc<AccountRow>);

impl Weigh for Cached {
    fn weight(&self) -> usize {
        let a = &self.0;
        ACCOUNT_BYTES
            + 2 * a.alias_id.as_str().len()
            + a.nickname.len()
            + a.current_jti.as_ref().map_or(0, String::len)
    }
}

impl Weigh for UserUuid {
    fn weight(&self) -> usize {
        self.as_str().len()
    }
}

/// A name an account is found by besides its uuid: a key of the `account_index` table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lookup<'a> {
    Alias(&'a AliasId),
    Ed25519(&'a [u8; 32]),
    X25519(&'a [u8; 32]),
}

impl Lookup<'_> {
    /// The `account_index` row key: `alias/<alias>`, `ed25519/<hex>`, `x25519/<hex>`.
    pub(crate) fn key(self) -> String {
        fn hex(prefix: &str, key: &[u8; 32]) -> String {
            const DIGITS: &[u8; 16] = b"0123456789abcdef";
            let mut s = String::with_capacity(prefix.len() + 64);
            s.push_str(prefix);
            for b in key {
                s.push(char::from(DIGITS[usize::from(b >> 4)]));
                s.push(char::from(DIGITS[usize::from(b & 0xf)]));
            }
            s
        }
        match self {
            Self::Alias(a) => format!("alias/{}", a.as_str()),
            Self::Ed25519(k) => hex("ed25519/", k),
            Self::X25519(k) => hex("x25519/", k),
        }
    }

    /// Whether `a` has this name.
    pub(crate) fn names(self, a: &AccountRow) -> bool {
        match self {
            Self::Alias(alias) => a.alias_id == *alias,
            Self::Ed25519(k) => a.ed25519_public_key.0 == *k,
            Self::X25519(k) => a.x25519_public_key.0 == *k,
        }
    }

    /// Every name of `a`.
    pub(crate) fn of(a: &AccountRow) -> [Lookup<'_>; 3] {
        [
            Lookup::Alias(&a.alias_id),
            Lookup::Ed25519(&a.ed25519_public_key.0),
            Lookup::X25519(&a.x25519_public_key.0),
        ]
    }
}

/// The accounts in memory ([`Lru`]) and their names, for those accounts only.
#[derive(Debug)]
pub(crate) struct Directory {
    accounts: Lru<UserUuid, Cached>,
    by_alias: BTreeMap<AliasId, UserUuid>,
    by_ed25519: BTreeMap<[u8; 32], UserUuid>,
    by_x25519: BTreeMap<[u8; 32], UserUuid>,
    /// A defect to plant (feature `planted-bugs`; see [`crate::PlantedBug`]).
    #[cfg(feature = "planted-bugs")]
    pub(crate) planted_bug: Option<crate::PlantedBug>,
}

impl Default for Directory {
    fn default() -> Self {
        Self::new(0)
    }
}

impl Directory {
    /// An empty cache of at most `bound` bytes.
    pub(crate) fn new(bound: usize) -> Self {
        Self {
            accounts: Lru::new(bound),
            by_alias: BTreeMap::new(),
            by_ed25519: BTreeMap::new(),
            by_x25519: BTreeMap::new(),
            #[cfg(feature = "planted-bugs")]
            planted_bug: None,
        }
    }

    /// The account `user` if it is in memory (no read; [`Cx::account`](crate::cx::Cx::account) reads).
    pub(crate) fn cached(&self, user: &UserUuid) -> Option<&Arc<AccountRow>> {
        self.accounts.get(user).map(|c| &c.0)
    }

    /// The uuid of the account in memory named `name`.
    pub(crate) fn cached_uuid(&self, name: Lookup<'_>) -> Option<&UserUuid> {
        match name {
            Lookup::Alias(a) => self.by_alias.get(a),
            Lookup::Ed25519(k) => self.by_ed25519.get(k),
            Lookup::X25519(k) => self.by_x25519.get(k),
        }
    }

    fn index(&mut self, a: &AccountRow) {
        self.by_alias.insert(a.alias_id.clone(), a.uuid.clone());
        self.by_ed25519
            .insert(a.ed25519_public_key.0, a.uuid.clone());
        self.by_x25519.insert(a.x25519_public_key.0, a.uuid.clone());
    }

    fn unindex(&mut self, a: &AccountRow) {
        for name in Lookup::of(a) {
            let map_holds_it = self.cached_uuid(name) == Some(&a.uuid);
            if map_holds_it {
                match name {
                    Lookup::Alias(x) => self.by_alias.remove(x),
                    Lookup::Ed25519(k) => self.by_ed25519.remove(k),
                    Lookup::X25519(k) => self.by_x25519.remove(k),
                };
            }
        }
    }

    /// Adds an account as read from the store. Nothing is evicted before the input that read
    /// it ends ([`Directory::evict`]).
    fn insert_loaded(&mut self, a: AccountRow) -> Arc<AccountRow> {
        let a = Arc::new(a);
        self.index(&a);
        self.accounts.insert(a.uuid.clone(), Cached(Arc::clone(&a)));
        a
    }

    /// Writes account `a` (new, or a new state of one in memory: a caller changes an account
    /// it read in the same input) and pins it until the write is durable. Returns the state
    /// it replaces and the new one.
    pub(crate) fn put(&mut self, a: AccountRow) -> (Option<Arc<AccountRow>>, Arc<AccountRow>) {
        let old = self.cached(&a.uuid).cloned();
        if let Some(old) = &old {
            self.unindex(old);
        }
        self.index(&a);
        let new = Arc::new(a);
        let key = new.uuid.clone();
        if old.is_none() {
            self.accounts.insert(key.clone(), Cached(Arc::clone(&new)));
        }
        self.accounts.write(&key, |c| *c = Cached(Arc::clone(&new)));
        (old, new)
    }

    /// The account `user`'s shard bound `alias` to it at `at` (another shard's account): the
    /// copy in memory, if any, takes it unless it has that bind or a later one (what the store
    /// holds already: nothing is pinned).
    pub(crate) fn refresh_alias(&mut self, user: &UserUuid, alias: &AliasId, at: wire::UnixMs) {
        let Some(old) = self.cached(user).cloned() else {
            return;
        };
        if old.alias_at >= at || old.alias_id == *alias {
            return;
        }
        let mut new = AccountRow::clone(&old);
        new.rebind(alias.clone(), at);
        self.unindex(&old);
        self.index(&new);
        let new = Arc::new(new);
        self.accounts.update(user, |c| *c = Cached(new));
    }

    /// Moves the accounts written since the last move into `batch` ([`Lru::move_written`]).
    pub(crate) fn move_written(&mut self, batch: &mut Vec<UserUuid>) {
        self.accounts.move_written(batch);
    }

    /// The writes since the last [`move_written`](Directory::move_written) are durable.
    pub(crate) fn unpin_written(&mut self) {
        self.accounts.unpin_written();
    }

    /// The writes `written` (a batch's) are durable.
    pub(crate) fn unpin(&mut self, written: Vec<UserUuid>) {
        self.accounts.unpin(written);
    }

    /// Evicts the least recently used clean accounts beyond the bound, with their names.
    pub(crate) fn evict(&mut self) {
        let mut gone = Vec::new();
        self.accounts.evict_with(|_, c| gone.push(c.0));
        for a in gone {
            self.unindex(&a);
        }
    }

    /// What the cache holds now.
    pub(crate) fn stats(&self) -> crate::stats::AccountCacheStats {
        crate::stats::AccountCacheStats {
            bytes: self.accounts.bytes(),
            accounts: self.accounts.len(),
            evictions: self.accounts.evictions(),
        }
    }
}

/// The stored account `user`, decoded (`None`: no such account).
fn read_account(
    reader: &mut dyn StoreRead,
    user: &UserUuid,
) -> Result<Option<AccountRow>, StoreError> {
    let Some(value) = reader.get(Table::Accounts, user.as_str())? else {
        return Ok(None);
    };
    let row: AccountRow = decode(Table::Accounts, user.as_str(), &value)?;
    if row.uuid != *user {
        return Err(StoreError::Backend(format!(
            "corrupt row {:?} in table {}: another account's row",
            user.as_str(),
            Table::Accounts.name()
        )));
    }
    Ok(Some(row))
}

/// The uuid the stored index row of `name` names (`None`: no such row).
pub(crate) fn read_index(
    reader: &mut dyn StoreRead,
    name: Lookup<'_>,
) -> Result<Option<UserUuid>, StoreError> {
    let key = name.key();
    let Some(value) = reader.get(Table::AccountIndex, &key)? else {
        return Ok(None);
    };
    decode(Table::AccountIndex, &key, &value).map(Some)
}

/// `f` of the account `user`, read from the store if it is not in memory (what the routing
/// path needs of an account in memory costs one map lookup). `Err`: the read failed (nothing
/// changed). A function of the relay's parts rather than a method, so that the routing path
/// may hold its connection's user meanwhile.
pub(crate) fn with_account<R>(
    dir: &mut Directory,
    reader: &mut dyn StoreRead,
    stats: &mut crate::stats::RelayStats,
    user: &UserUuid,
    f: impl FnOnce(&Arc<AccountRow>) -> R,
) -> Result<Option<R>, StoreError> {
    if let Some(c) = dir.accounts.read(user) {
        return Ok(Some(f(&c.0)));
    }
    // PLANTED BUG (EvictedAccountForgotten): an account not in memory is taken not to exist.
    if crate::planted::planted!(dir, EvictedAccountForgotten) {
        return Ok(None);
    }
    let read = read_account(reader, user).inspect_err(|_| {
        stats.account_read_failures += 1;
    })?;
    stats.accounts_read += 1;
    Ok(read.map(|a| f(&dir.insert_loaded(a))))
}

/// Writes the `account_index` rows of every stored account ([`crate::store::derive_in_pages`]),
/// for a store written before that table existed. The caller records the meta row that says
/// it is done.
pub(crate) fn index_stored_accounts(
    store: &mut dyn crate::store::Store,
    reader: &mut dyn StoreRead,
    page_rows: usize,
) -> Result<u64, StoreError> {
    crate::store::derive_in_pages(
        store,
        reader,
        Table::Accounts,
        page_rows,
        |batch, key, value| {
            let a: AccountRow = decode(Table::Accounts, key, value)?;
            let uuid = serde_json::to_vec(&a.uuid)
                .map_err(|e| StoreError::Backend(format!("encoding an index row: {e}")))?;
            for name in Lookup::of(&a) {
                batch.put(Table::AccountIndex, &name.key(), &uuid);
            }
            Ok(())
        },
    )
}
