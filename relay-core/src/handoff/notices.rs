//! Notices between shards: receipts, retractions, friendships, payment confirmations and
//! alias binds for a user of another shard, kept until that shard has taken them.

use std::collections::{BTreeMap, BTreeSet};

use wire::http::FriendStatus;
use wire::{ConvId, FriendshipId, Seq, UnixMs, UserUuid};

use super::{MAX_IN_FLIGHT_PER_SHARD, RESEND_MS, ShardId};

/// What a notice between shards says ([`Notices`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Notice {
    /// `reader` received (`read: false`) or read the messages `author` wrote in `conv`
    /// through `seq`; `from` and `to` are their aliases, as the receipt frame names them.
    Receipt {
        /// `read` receipt, else `delivered`.
        read: bool,
        /// The conversation.
        conv: ConvId,
        /// Through which seq.
        seq: Seq,
        /// Who sent the receipt.
        reader: UserUuid,
        /// Whose messages it covers: whom it is for.
        author: UserUuid,
        /// The reader's alias.
        from: Option<wire::AliasId>,
        /// The author's alias.
        to: Option<wire::AliasId>,
    },
    /// `author` retracted its message `id` (seq `seq`) of `conv`, for `recipient`; `from` is
    /// the author's alias.
    Retract {
        /// The conversation.
        conv: ConvId,
        /// The message.
        id: wire::MessageId,
        /// Its seq.
        seq: Seq,
        /// Its author.
        author: UserUuid,
        /// The author's alias.
        from: wire::AliasId,
        /// Whom it is for.
        recipient: UserUuid,
    },
    /// The friendship `row` as its pair's owner shard wrote it, for `user`'s list of contacts
    /// at `user`'s shard; `announce`: the frame `user` is sent if connected when it is
    /// applied.
    Contact {
        /// Whose list it goes to.
        user: UserUuid,
        /// The friendship.
        row: Contact,
        /// The frame it announces to `user`, if any.
        announce: Option<Announce>,
    },
    /// The registry shard confirmed `user`'s order `order_id` (paid) at `at`: `user`'s shard
    /// keeps the `payment_confirmed` for its syncs and sends it live.
    Confirmed {
        /// The buyer.
        user: UserUuid,
        /// The order.
        order_id: wire::OrderId,
        /// What the frame names (an alias, a channel, the order).
        ref_id: String,
        /// When it was confirmed.
        at: UnixMs,
    },
    /// `user`'s shard changed the account's alias to `alias` (bound at `at`): shard `shard`'s
    /// copy of the account, if it holds one, takes it (so that its lookups and routing by
    /// the new alias find the account).
    Alias {
        /// The account.
        user: UserUuid,
        /// Its new alias.
        alias: wire::AliasId,
        /// When it was bound.
        at: UnixMs,
        /// The shard whose copy it is for.
        shard: ShardId,
    },
    /// The registry shard bound `alias` to `user` at `at` (a vanity bind): `user`'s shard
    /// changes the account (its alias and the alias's lookup row).
    Rebind {
        /// The account.
        user: UserUuid,
        /// Its new alias.
        alias: wire::AliasId,
        /// When it was bound.
        at: UnixMs,
    },
}

/// A friendship as its pair's owner shard wrote it: what a member's list of contacts keeps.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Contact {
    /// Its id.
    pub id: FriendshipId,
    /// Who asked.
    pub requester: UserUuid,
    /// Who was asked.
    pub addressee: UserUuid,
    /// Pending, accepted or rejected.
    pub status: FriendStatus,
    /// The conversation an accept created.
    pub conversation_id: Option<ConvId>,
    /// When it was asked first (ms).
    pub created_at: UnixMs,
    /// Its revision: each write of the friendship by its owner counts one up, so that a
    /// member's shard applies a revision only over an older one, whatever order they arrive.
    pub rev: u64,
}

/// The frame a [`Notice::Contact`] announces to its user.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Announce {
    /// `friend_request`: the requester's alias and nickname.
    Request {
        /// The requester's alias.
        from: wire::AliasId,
        /// The requester's nickname.
        nickname: String,
    },
    /// `friend_accepted`: the addressee's alias.
    Accepted {
        /// The addressee's alias.
        from: wire::AliasId,
    },
}

/// The key of a [`Notice`]: one per user and what it is about.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct NoticeKey {
    /// Whom it is for.
    pub user: UserUuid,
    /// `<conv>/delivered`, `<conv>/read`, `<conv>/retract/<id>` or `friendship/<id>`.
    pub what: String,
}

impl Notice {
    /// Its key: a later receipt of the same kind replaces the one before.
    pub fn key(&self) -> NoticeKey {
        match self {
            Self::Receipt {
                read, conv, author, ..
            } => NoticeKey {
                user: author.clone(),
                what: format!("{conv}/{}", if *read { "read" } else { "delivered" }),
            },
            Self::Retract {
                conv,
                id,
                recipient,
                ..
            } => NoticeKey {
                user: recipient.clone(),
                what: format!("{conv}/retract/{}", id.as_str()),
            },
            Self::Contact { user, row, .. } => NoticeKey {
                user: user.clone(),
                what: format!("friendship/{}", row.id.get()),
            },
            Self::Confirmed { user, order_id, .. } => NoticeKey {
                user: user.clone(),
                what: format!("confirmed/{order_id}"),
            },
            Self::Rebind { user, .. } => NoticeKey {
                user: user.clone(),
                what: "alias".to_owned(),
            },
            Self::Alias { user, shard, .. } => NoticeKey {
                user: user.clone(),
                what: format!("alias/{}", shard.0),
            },
        }
    }
}

/// A notice for a user of another shard that means the same however often it arrives (a
/// receipt's "up to seq", a retraction): kept under its key until the destination
/// acknowledges it, sent at once and again every [`RESEND_MS`]. A newer notice under the same
/// key replaces the one before (a later receipt of the same kind), and an acknowledgement of
/// the older one leaves it in place: each is numbered (`version`), and an acknowledgement
/// names the number it answers.
#[derive(Debug, Clone)]
pub struct Notices<K, T> {
    me: ShardId,
    rows: BTreeMap<K, Noted<T>>,
    /// (due, key) of each row: what a poll looks at.
    schedule: BTreeSet<(UnixMs, K)>,
    next_version: u64,
}

/// A notice row in memory.
#[derive(Debug, Clone)]
struct Noted<T> {
    to: ShardId,
    version: u64,
    item: T,
    due: UnixMs,
}

/// A notice on its way: carried to the core of shard `to`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NoticeSent<K, T> {
    /// The shard that keeps it until acknowledged.
    pub from: ShardId,
    /// The shard it is for.
    pub to: ShardId,
    /// Its key.
    pub key: K,
    /// Its number.
    pub version: u64,
    /// What it says.
    pub item: T,
}

/// A notice taken, durably: carried back to the core of shard `to`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NoticeTaken<K> {
    /// The shard that took it.
    pub from: ShardId,
    /// The shard that sent it.
    pub to: ShardId,
    /// Its key.
    pub key: K,
    /// The number it answers.
    pub version: u64,
}

impl<K: Ord + Clone, T: Clone> Notices<K, T> {
    /// No notices, of shard `me`.
    pub fn new(me: ShardId) -> Self {
        Self {
            me,
            rows: BTreeMap::new(),
            schedule: BTreeSet::new(),
            next_version: 1,
        }
    }

    /// A new notice for shard `to` under `key` (replacing one not yet acknowledged): its
    /// number, for the row the caller writes with it.
    pub fn put(&mut self, to: ShardId, key: K, item: T) -> u64 {
        let version = self.next_version;
        self.restore(to, key, version, item);
        version
    }

    /// A notice row as stored (read back at start), or written now ([`Notices::put`]).
    pub fn restore(&mut self, to: ShardId, key: K, version: u64, item: T) {
        self.next_version = self.next_version.max(version.saturating_add(1));
        if let Some(old) = self.rows.remove(&key) {
            self.schedule.remove(&(old.due, key.clone()));
        }
        self.schedule.insert((UnixMs(0), key.clone()));
        self.rows.insert(
            key,
            Noted {
                to,
                version,
                item,
                due: UnixMs(0),
            },
        );
    }

    /// The notices to send at `now`, each due again [`RESEND_MS`] later; at most
    /// [`MAX_IN_FLIGHT_PER_SHARD`] a poll.
    pub fn poll(&mut self, now: UnixMs) -> Vec<NoticeSent<K, T>> {
        let due: Vec<(UnixMs, K)> = self
            .schedule
            .iter()
            .take_while(|(at, _)| *at <= now)
            .take(MAX_IN_FLIGHT_PER_SHARD)
            .cloned()
            .collect();
        let mut sent = Vec::with_capacity(due.len());
        for entry in due {
            self.schedule.remove(&entry);
            let (_, key) = entry;
            let Some(row) = self.rows.get_mut(&key) else {
                continue;
            };
            row.due = now.plus_ms(RESEND_MS);
            self.schedule.insert((row.due, key.clone()));
            sent.push(NoticeSent {
                from: self.me,
                to: row.to,
                key,
                version: row.version,
                item: row.item.clone(),
            });
        }
        sent
    }

    /// When a notice is next due (`None`: none waits).
    pub fn next_deadline(&self) -> Option<UnixMs> {
        self.schedule.first().map(|(at, _)| *at)
    }

    /// An acknowledgement: `true` when it ends the row (the caller deletes it in a commit of
    /// its own); `false` when the row is gone or newer than what was acknowledged.
    pub fn on_taken(&mut self, key: &K, version: u64) -> bool {
        let Some(row) = self.rows.get(key) else {
            return false;
        };
        if row.version != version {
            return false;
        }
        self.schedule.remove(&(row.due, key.clone()));
        self.rows.remove(key);
        true
    }

    /// Notices not acknowledged yet.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether every notice is acknowledged.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}
