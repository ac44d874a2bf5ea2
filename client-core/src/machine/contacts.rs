//! Contacts and sessions: the friends list (F1) gives every accepted friend a session.
//!
//! * [`Client::sync_contacts`] fetches the list; the relay's `friend_request` and
//!   `friend_accepted` frames trigger it too. A malformed entry is skipped rather than losing
//!   the whole list; only accepted friends with a conversation count.
//! * A new conversation gets an unverified session keyed by
//!   [`session_key`](crate::crypto::session_key)`(our X25519, their X25519, conversation)`.
//! * A known one is reconciled: a new alias ([`super::vanity`]), a missing Ed25519 key is
//!   filled in, a new X25519 key ([`super::trust`]).
//! * Then [`Event::ContactsSynced`], and the parked messages of every new or changed
//!   conversation are retried ([`super::inbox`]).
//! * A sync asked for while one is in flight whose answer may be stale runs again after it;
//!   the last successful answer settles the held retracts ([`super::retract`]).
//! * A failed sync (no answer, a 5xx) while messages are parked or retracts held is retried
//!   after [`CONTACTS_RETRY_BASE_MS`], doubling up to [`CONTACTS_RETRY_MAX_MS`], until one
//!   succeeds: what waits for it must not wait for the next reconnect.
//! * A sync refused `401` (a token that expired while the socket stayed open) re-authenticates
//!   with the stored identity, keeping the socket (once per episode, never after a GOAWAY;
//!   see the [machine doc](crate::machine)); the retry then carries the fresh token.

use serde_json::Value;
use wire::http::FriendProfile;

use super::client::{Client, Method, Pending, ok_status};
use super::event::{ClientError, Event};
use crate::crypto::session_key;
use crate::encoding::to_base64;
use crate::keys::{Identity, SecretString};
use crate::store::{ClientStore, SessionRecord, SessionTrust};

/// First delay before a failed contacts sync is retried (doubles per failure).
pub const CONTACTS_RETRY_BASE_MS: u64 = 1_000;
/// Longest delay between retries of a failed contacts sync.
pub const CONTACTS_RETRY_MAX_MS: u64 = 60_000;

/// The contacts sync's own state: whether another sync must follow the one in flight, and
/// the retry timer of a failed one.
#[derive(Debug, Default)]
pub(super) struct ContactsSync {
    /// A message came from an unknown alias while a friends request was in flight: sync again
    /// when it answers (its list may predate the peer's bind).
    resync: bool,
    /// Consecutive failures.
    failures: u32,
    /// When to retry, if one is due.
    at_ms: Option<u64>,
}

impl ContactsSync {
    /// When a failed sync is asked again, if one is due.
    pub(super) fn retry_at_ms(&self) -> Option<u64> {
        self.at_ms
    }

    /// A sync answered: the failures and the retry are forgotten (a follow-up sync asked for
    /// meanwhile is kept).
    fn succeeded(&mut self) {
        self.failures = 0;
        self.at_ms = None;
    }

    fn schedule(&mut self, now_ms: u64) {
        let delay = CONTACTS_RETRY_BASE_MS
            .saturating_mul(1 << self.failures.min(16))
            .min(CONTACTS_RETRY_MAX_MS);
        self.failures = self.failures.saturating_add(1);
        self.at_ms = Some(now_ms.saturating_add(delay));
    }
}

/// One accepted friend of the list, as the session reconciliation sees it.
pub(super) struct Peer<'a> {
    /// Conversation id.
    pub(super) conv: &'a str,
    /// The friend's current alias.
    pub(super) alias: String,
    /// Their X25519 public key.
    pub(super) x25519: [u8; 32],
    /// The same, base64.
    pub(super) x25519_b64: String,
    /// Their Ed25519 public key, base64.
    pub(super) ed25519_b64: String,
}

/// What reconciling a known session with the list did.
#[derive(Debug, Default)]
pub(super) struct Reconciled {
    /// The session record changed: save it.
    pub(super) save: bool,
    /// Retry the conversation's parked messages.
    pub(super) retry_parked: bool,
}

impl<S: ClientStore> Client<S> {
    /// Fetches the friends list (F1); sessions are created for accepted friends.
    pub fn sync_contacts(&mut self, _now_ms: u64) {
        self.out.request(
            Method::Get,
            wire::http::paths::FRIENDS.into(),
            None,
            true,
            Pending::Friends,
        );
    }

    /// Asks for a contacts sync whose answer postdates now: when a friends request is already
    /// in flight its list may be stale (it may predate a peer's alias bind), so another sync
    /// follows its answer.
    pub(super) fn sync_contacts_again(&mut self, now_ms: u64) {
        if self.out.awaits(|p| matches!(p, Pending::Friends)) {
            self.contacts.resync = true;
        } else {
            self.sync_contacts(now_ms);
        }
    }

    /// The contacts retry timer: a failed sync that something waits for is asked again.
    pub(super) fn contacts_timer(&mut self, now_ms: u64) {
        if self.contacts.at_ms.is_some_and(|at| at <= now_ms) {
            self.contacts.at_ms = None;
            self.sync_contacts_again(now_ms);
        }
    }

    /// Messages parked or retracts held: a contacts sync may release them.
    fn awaits_contacts(&self) -> Result<bool, ClientError> {
        Ok(!self.held_retracts_is_empty() || self.store.count_offline(None)? > 0)
    }

    /// The answer to [`Client::sync_contacts`].
    pub(super) fn on_friends_response(
        &mut self,
        now_ms: u64,
        status: u16,
        v: Option<Value>,
    ) -> Result<(), ClientError> {
        let listed = ok_status(status);
        if status == 401 {
            self.rest_token_refused();
        } else if listed {
            self.token_passed();
        }
        self.on_friends(now_ms, status, v)?;
        if std::mem::take(&mut self.contacts.resync) {
            self.sync_contacts(now_ms);
        } else if listed {
            self.contacts.succeeded();
            self.settle_held_retracts()?;
        } else if self.awaits_contacts()? {
            self.contacts.schedule(now_ms);
        }
        Ok(())
    }

    fn on_friends(
        &mut self,
        now_ms: u64,
        status: u16,
        v: Option<Value>,
    ) -> Result<(), ClientError> {
        if !ok_status(status) {
            return Ok(());
        }
        // Entry by entry, from text (some wire types borrow while decoding): a malformed entry
        // is skipped rather than losing the whole list.
        let friends: Vec<FriendProfile> = match v {
            Some(Value::Array(items)) => items
                .iter()
                .filter_map(|i| serde_json::from_str(&i.to_string()).ok())
                .collect(),
            _ => Vec::new(),
        };
        let Some(identity) = self.identity.clone() else {
            return Ok(());
        };
        let mut new_convs = Vec::new();
        for f in &friends {
            if f.status != wire::http::FriendStatus::Accepted {
                continue;
            }
            let Some(conv) = &f.conversation_id else {
                continue;
            };
            let peer = Peer {
                conv: conv.as_str(),
                alias: f.alias_id.as_str().to_owned(),
                x25519: f.x25519_public_key.0,
                x25519_b64: to_base64(&f.x25519_public_key.0),
                ed25519_b64: to_base64(&f.ed25519_public_key.0),
            };
            let retry = match self.store.load_session(peer.conv)? {
                None => {
                    self.open_session(now_ms, &identity, &peer)?;
                    true
                }
                Some(s) => self.reconcile_session(now_ms, &identity, s, &peer)?,
            };
            if retry {
                new_convs.push(peer.conv.to_owned());
            }
        }
        self.out.event(Event::ContactsSynced(friends));
        self.retry_parked(now_ms, &new_convs)?;
        Ok(())
    }

    /// A new accepted friend: an unverified session for the conversation.
    fn open_session(
        &mut self,
        now_ms: u64,
        identity: &Identity,
        peer: &Peer<'_>,
    ) -> Result<(), ClientError> {
        let key = session_key(&identity.ecdh_key, &peer.x25519, peer.conv);
        self.store.save_session(&SessionRecord {
            conversation_id: peer.conv.to_owned(),
            their_alias_id: peer.alias.clone(),
            their_ecdh_public_key: peer.x25519_b64.clone(),
            their_ed25519_public_key: Some(peer.ed25519_b64.clone()),
            session_key_base64: SecretString::new(key.to_base64()),
            trust_state: SessionTrust::Unverified,
            created_at: now_ms,
            pending_ecdh_public_key: None,
            former_alias_ids: Vec::new(),
        })?;
        Ok(())
    }

    /// A known conversation: follows a new alias, fills in a missing Ed25519 key, handles a
    /// new X25519 key; saves the session if it changed. True when its parked messages should
    /// be retried.
    fn reconcile_session(
        &mut self,
        now_ms: u64,
        identity: &Identity,
        mut s: SessionRecord,
        peer: &Peer<'_>,
    ) -> Result<bool, ClientError> {
        let mut r = Reconciled::default();
        if s.their_alias_id != peer.alias {
            self.follow_alias(&mut s, peer, &mut r)?;
        }
        if s.their_ed25519_public_key.is_none() {
            s.their_ed25519_public_key = Some(peer.ed25519_b64.clone());
            r.save = true;
        }
        if s.their_ecdh_public_key != peer.x25519_b64 {
            self.peer_key_changed(now_ms, identity, &mut s, peer, &mut r);
        }
        if !self.contacts.resync {
            self.adopt_former_aliases(&mut s, peer, &mut r)?;
        }
        if r.save {
            self.store.save_session(&s)?;
        }
        Ok(r.retry_parked)
    }
}
