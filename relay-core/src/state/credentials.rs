//! Used single-use credentials on the working state: loaded, marked spent durably in the
//! batch of the answer that used them, forgotten once expired (see `crate::credential`).

use crate::credential::Opened;
use crate::planted::planted;
use crate::rows::{Timer, decode};
use crate::state::State;
use crate::store::{Snapshot, StoreError, Table};
use serde::{Deserialize, Serialize};
use wire::UnixMs;

/// The stored form of a spent credential: when its row may go, and whose it was (empty in
/// rows written before owners were recorded: charged to nobody, gone within two minutes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct SpentRow {
    expires_at: UnixMs,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    owner: String,
}

impl State {
    /// Loads the spent rows of `snapshot` into the state (called by `State::load`); rows already past
    /// their expiry are deleted by the first `handle_timeout`.
    pub(super) fn load_spent(
        &mut self,
        snapshot: &Snapshot,
        place: crate::handoff::ShardPlace,
    ) -> Result<(), StoreError> {
        for (k, v) in snapshot.get(&Table::Spent).into_iter().flatten() {
            let row: SpentRow = decode(Table::Spent, k, v)?;
            // An account's credentials are spent at its shard (its sign-ins and upgrades).
            let shard = match wire::UserUuid::parse(&row.owner) {
                Ok(user) => place.map().of_user(&user),
                Err(_) => crate::handoff::REGISTRY_SHARD,
            };
            if place.map().shards() > 1 && shard != place.me() {
                continue;
            }
            self.index_spent(k.clone(), row.owner, row.expires_at);
        }
        Ok(())
    }
}

impl State {
    fn index_spent(&mut self, key: String, owner: String, expires_at: UnixMs) {
        self.timers.insert((expires_at, Timer::Spent(key.clone())));
        self.spent.insert(key, owner, expires_at);
    }

    /// Whether the credential `opened` was used already.
    pub(crate) fn is_spent(&self, opened: &Opened) -> bool {
        self.spent.contains(&opened.spent_key)
    }

    /// How many used credentials of `owner`'s are remembered (each until it expires).
    pub(crate) fn spent_count_of(&self, owner: &str) -> usize {
        self.spent.count_of(owner)
    }

    /// Marks `opened` used, durably (in the batch of the answer that used it).
    pub(crate) fn put_spent(&mut self, opened: &Opened) {
        let row = SpentRow {
            expires_at: opened.expires_at,
            owner: opened.owner.clone(),
        };
        // PLANTED BUG (SpentNotPersisted): the mark is kept in memory only, so a restart
        // forgets which credentials were used while they are still unexpired.
        if !planted!(self, SpentNotPersisted) {
            self.record(Table::Spent, &opened.spent_key, &row);
        }
        self.index_spent(
            opened.spent_key.clone(),
            opened.owner.clone(),
            opened.expires_at,
        );
    }

    /// Forgets the spent credential `key` once it has expired (nothing could present it).
    pub(crate) fn expire_spent(&mut self, now: UnixMs, key: &str) {
        if self.spent.remove_expired(key, now) {
            self.record_delete(Table::Spent, key);
        }
    }
}
