//! The account directory's writes on the working state: an account row stored and cached (see
//! `crate::directory` for the cache).

use crate::directory::Lookup;
use crate::rows::AccountRow;
use crate::state::State;
use crate::store::Table;
use wire::{AliasId, UnixMs, UserUuid};

impl State {
    /// Another shard's account changed its alias (`crate::handoff::Notice::Alias`): the copy
    /// in memory takes it; nothing is written (the account's shard wrote it).
    pub(crate) fn refresh_alias(&mut self, user: &UserUuid, alias: &AliasId, at: UnixMs) {
        self.directory.refresh_alias(user, alias, at);
    }

    /// Writes account `a` (a new account, or a new state of one read in the same input) and
    /// its lookup keys that changed: the index rows of names it no longer has are deleted
    /// (another account may take them later), those of new names put.
    pub(crate) fn put_account(&mut self, a: AccountRow) {
        self.record(Table::Accounts, a.uuid.as_str(), &a);
        let (old, a) = self.directory.put(a);
        let old_names = old.as_deref().map(Lookup::of);
        for (i, name) in Lookup::of(&a).into_iter().enumerate() {
            if old_names.is_some_and(|o| o[i] == name) {
                continue;
            }
            if let Some(o) = &old_names {
                self.batch.delete(Table::AccountIndex, &o[i].key());
            }
            self.record(Table::AccountIndex, &name.key(), &a.uuid);
        }
    }
}
