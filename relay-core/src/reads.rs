//! The relay's reads through its caches: an account, a contact list, a conversation's receipt
//! marks, a queue, a tombstone, each from memory or on a miss from the store (counted in
//! the stats). The caches themselves are `directory`, `relations`, `queue` and `tombstones`.

use crate::cx::Cx;
use crate::directory::{Lookup, read_index};
use crate::relations::Contacts;
use crate::rows::AccountRow;
use crate::rows::Tombstone;
use crate::store::StoreError;
use std::sync::Arc;
use wire::{AliasId, UserUuid};
use wire::{ConvId, MessageId, UnixMs};

impl Cx<'_> {
    /// The account `user`, read from the store if it is not in memory ([`State::with_account`](crate::state::State::with_account)).
    pub(crate) fn account(
        &mut self,
        user: &UserUuid,
    ) -> Result<Option<Arc<AccountRow>>, StoreError> {
        let (state, cx) = self.read_parts();
        state.with_account(cx, user, Arc::clone)
    }

    /// The account named `name` (an alias or a public key), read from the store if it is not
    /// in memory. `Err`: a read failed (nothing changed).
    pub(crate) fn account_by(
        &mut self,
        name: Lookup<'_>,
    ) -> Result<Option<Arc<AccountRow>>, StoreError> {
        let uuid = match self.state.directory().cached_uuid(name) {
            Some(u) => u.clone(),
            None => {
                let (_, cx) = self.read_parts();
                let read = read_index(cx.reader(), name);
                let read = read.inspect_err(|_| {
                    self.stats.account_read_failures += 1;
                })?;
                match read {
                    Some(u) => u,
                    None => return Ok(None),
                }
            }
        };
        // The row wins over a stale index row (a name the account gave up in a batch that is
        // not committed yet).
        Ok(self.account(&uuid)?.filter(|a| name.names(a)))
    }

    /// The account with alias `alias` ([`Cx::account_by`](crate::cx::Cx::account_by)).
    pub(crate) fn account_by_alias(
        &mut self,
        alias: &AliasId,
    ) -> Result<Option<Arc<AccountRow>>, StoreError> {
        self.account_by(Lookup::Alias(alias))
    }

    /// Whether an account has alias `alias`. `Err`: a read failed.
    pub(crate) fn alias_in_use(&mut self, alias: &AliasId) -> Result<bool, StoreError> {
        Ok(self.account_by_alias(alias)?.is_some())
    }

    /// The alias of `user` (`None`: no such account). `Err`: the read failed.
    pub(crate) fn alias_of(&mut self, user: &UserUuid) -> Result<Option<AliasId>, StoreError> {
        let (state, cx) = self.read_parts();
        state.with_account(cx, user, |a| a.alias_id.clone())
    }

    /// [`State::read_marks`](crate::state::State::read_marks) on this relay's parts.
    pub(crate) fn read_marks(&mut self, conv: &ConvId) -> Result<(), StoreError> {
        let (state, cx) = self.read_parts();
        state.read_marks(cx, conv)
    }

    /// The contacts of `user` (read if they are not in memory), copied. `Err`: the read
    /// failed.
    pub(crate) fn contacts(&mut self, user: &UserUuid) -> Result<Contacts, StoreError> {
        let (state, cx) = self.read_parts();
        state.with_contacts(cx, user, Contacts::clone)
    }

    /// [`State::with_contacts`](crate::state::State::with_contacts) on this relay's parts: what `f` takes of `user`'s contacts.
    pub(crate) fn with_contacts<R>(
        &mut self,
        user: &UserUuid,
        f: impl FnOnce(&Contacts) -> R,
    ) -> Result<R, StoreError> {
        let (state, cx) = self.read_parts();
        state.with_contacts(cx, user, f)
    }

    /// Whether `user` and `other` are accepted contacts (reads `user`'s contacts if they are
    /// not in memory).
    pub(crate) fn are_contacts(
        &mut self,
        user: &UserUuid,
        other: &UserUuid,
    ) -> Result<bool, StoreError> {
        self.with_contacts(user, |c| {
            c.with(other)
                .is_some_and(|f| f.status == wire::http::FriendStatus::Accepted)
        })
    }

    /// [`State::load_queue`](crate::state::State::load_queue) on this relay's reader and counters.
    pub(crate) fn read_queue(
        &mut self,
        recipient: &UserUuid,
        conv: &ConvId,
    ) -> Result<(), StoreError> {
        let (state, cx) = self.read_parts();
        state.load_queue(cx, recipient, conv)
    }

    /// [`tombstones::lookup`](crate::tombstones::lookup) on this relay.
    pub(crate) fn tombstone(
        &mut self,
        author: &UserUuid,
        id: &MessageId,
        now: UnixMs,
    ) -> Result<Option<Tombstone>, StoreError> {
        let (state, cx) = self.read_parts();
        state.tombstone(cx, author, id, now)
    }
}
