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

    /// The queue of `recipient` in `conv` brought into memory whole
    /// ([`State::load_queue_part`](crate::state::State::load_queue_part)).
    pub(crate) fn read_queue(
        &mut self,
        recipient: &UserUuid,
        conv: &ConvId,
    ) -> Result<(), StoreError> {
        let (state, cx) = self.read_parts();
        state.load_queue_part(cx, recipient, conv, None)
    }

    /// Reads the next page of the gap of the queue of `recipient` in `conv`
    /// ([`State::page_rows`](crate::state::State::page_rows) rows).
    fn read_queue_page(&mut self, recipient: &UserUuid, conv: &ConvId) -> Result<(), StoreError> {
        self.read_queue_page_within(recipient, conv, (usize::MAX, usize::MAX))
    }

    /// [`Cx::read_queue_page`], of at most `most` (messages, bytes) if that is less than a
    /// page.
    fn read_queue_page_within(
        &mut self,
        recipient: &UserUuid,
        conv: &ConvId,
        most: (usize, usize),
    ) -> Result<(), StoreError> {
        let page = (
            self.config.queue_page_msgs.min(most.0),
            self.config.queue_page_bytes.min(most.1),
        );
        let rows = self.state.page_rows(recipient, conv, page);
        let (state, cx) = self.read_parts();
        state.load_queue_part(cx, recipient, conv, Some(rows))
    }

    /// The delivery window of `user`'s connection, if it is synced.
    fn synced_window(&self, user: &UserUuid) -> Option<&crate::window::Window> {
        let c = self.sessions().get(self.online(user)?)?;
        c.synced.then_some(&c.window)
    }

    /// The oldest messages of the queue of `recipient` in `conv` in memory: its first page is
    /// read if they are not (what delivery starts from).
    /// The page is of at most twice `room` (messages, bytes), the part of the window the
    /// queue may fill first.
    pub(crate) fn read_queue_front(
        &mut self,
        recipient: &UserUuid,
        conv: &ConvId,
        room: (usize, usize),
    ) -> Result<(), StoreError> {
        if self
            .state
            .queue_gap(recipient, conv)
            .is_some_and(|g| g.after().is_none())
        {
            let most = (room.0.saturating_mul(2), room.1.saturating_mul(2));
            self.read_queue_page_within(recipient, conv, most)?;
        }
        Ok(())
    }

    /// Every stored message of the queue of `recipient` in `conv` up to `seq`, and the one
    /// after it, in memory: what a change of the messages up to `seq` needs (the queue's
    /// oldest message after it is then known). Read a page at a time.
    pub(crate) fn read_queue_through(
        &mut self,
        recipient: &UserUuid,
        conv: &ConvId,
        seq: wire::Seq,
    ) -> Result<(), StoreError> {
        while let Some(g) = self.state.queue_gap(recipient, conv) {
            if g.after().is_some_and(|a| a > seq) {
                break;
            }
            self.read_queue_page(recipient, conv)?;
        }
        Ok(())
    }

    /// The queue of `recipient` in `conv` in memory up to its first message that has not
    /// expired at `now` (every expired one before it, as its messages are queued in time
    /// order): what its expiry needs. Read a page at a time.
    pub(crate) fn read_queue_unexpired(
        &mut self,
        recipient: &UserUuid,
        conv: &ConvId,
        now: UnixMs,
    ) -> Result<(), StoreError> {
        let ttl = self.config.offline_ttl_ms;
        while let Some(g) = self.state.queue_gap(recipient, conv) {
            let key = (recipient.clone(), conv.clone());
            let last_read = g.after().and_then(|a| {
                let q = self.state.queues().peek(&key)?;
                q.upto(a).last().map(|m| m.at)
            });
            if last_read.is_some_and(|at| now < at.plus_ms(ttl)) {
                break;
            }
            self.read_queue_page(recipient, conv)?;
        }
        Ok(())
    }

    /// The room the window of `user`'s connection has (messages, bytes), once the messages of
    /// `releasing` in flight on it are released (`None`: as it is). Nothing when `user` has
    /// no synced connection.
    pub(crate) fn window_room(
        &self,
        user: &UserUuid,
        releasing: Option<&ConvId>,
    ) -> (usize, usize) {
        let Some(window) = self.synced_window(user) else {
            return (0, 0);
        };
        let (msgs, bytes) = window.flying(None);
        let (freed_msgs, freed_bytes) = releasing.map_or((0, 0), |conv| window.flying(Some(conv)));
        (
            self.config
                .sync_window_msgs
                .saturating_sub(msgs - freed_msgs.min(msgs)),
            self.config
                .sync_window_bytes
                .saturating_sub(bytes - freed_bytes.min(bytes)),
        )
    }

    /// [`Cx::read_queue_ahead`] for `conv` and each conversation waiting for its turn on the
    /// window of `user`'s connection (delivery pushes from those next), for a window with
    /// `room`, which they share (they take turns).
    pub(crate) fn read_ahead_of(
        &mut self,
        user: &UserUuid,
        conv: &ConvId,
        room: (usize, usize),
    ) -> Result<(), StoreError> {
        if room.0 == 0 {
            return Ok(());
        }
        let waiting: Vec<ConvId> = (self.synced_window(user))
            .map(|w| w.waiting().filter(|w| *w != conv).cloned().collect())
            .unwrap_or_default();
        let room = crate::window::share(room, 1 + waiting.len());
        self.read_queue_ahead(user, conv, room)?;
        for w in waiting {
            self.read_queue_ahead(user, &w, room)?;
        }
        Ok(())
    }

    /// Reads pages of the queue of `recipient` in `conv` until what its connection has not
    /// been pushed yet in memory fills `room` (messages, or bytes of their frames) or the
    /// queue is in memory whole: so that delivery, which pushes from memory, has what the
    /// window may take next without reading on the relay's task, and holds little more.
    pub(crate) fn read_queue_ahead(
        &mut self,
        recipient: &UserUuid,
        conv: &ConvId,
        room: (usize, usize),
    ) -> Result<(), StoreError> {
        if self.state.queue_gap(recipient, conv).is_none() {
            return Ok(());
        }
        let pushed = (self.synced_window(recipient)).map_or(wire::Seq(0), |w| w.pushed(conv));
        let key = (recipient.clone(), conv.clone());
        while let Some(g) = self.state.queue_gap(recipient, conv) {
            if let Some(after) = g.after() {
                let (mut msgs, mut bytes) = (0usize, 0usize);
                if let Some(q) = self.state.queues().peek(&key) {
                    let unpushed = q.starting_at(pushed.next()).take_while(|m| m.seq <= after);
                    for m in unpushed {
                        msgs += 1;
                        bytes += m.frame_bytes(conv);
                    }
                }
                if msgs >= room.0 || bytes >= room.1 {
                    return Ok(());
                }
                probes::probe!("queue:read-ahead");
            }
            // Pages of twice the room at most: a conversation with a small share of the
            // window (many take turns in it) holds little more than its share.
            let most = (room.0.saturating_mul(2), room.1.saturating_mul(2));
            self.read_queue_page_within(recipient, conv, most)?;
        }
        Ok(())
    }

    /// [`tombstones::lookup`](crate::tombstones::lookup) on this relay.
    pub(crate) fn tombstone(
        &mut self,
        conv: &ConvId,
        id: &MessageId,
        now: UnixMs,
    ) -> Result<Option<Tombstone>, StoreError> {
        let (state, cx) = self.read_parts();
        state.tombstone(cx, conv, id, now)
    }
}
