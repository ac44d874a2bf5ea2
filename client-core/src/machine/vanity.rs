//! Vanity follow: the peer bound a vanity alias (the relay retired the old one; the
//! conversation stays the same), and its session follows.
//!
//! * A message on a known conversation from another alias is parked and triggers a contacts
//!   sync (again after an answer already in flight, which may predate the bind).
//! * When the sync shows the conversation under a new alias with the same keys, the session
//!   and the contact's trust record follow the alias silently and the parked messages are
//!   retried: a rename, not a trust event.
//! * With another X25519 key the alias follows too, but only through the key-change path of
//!   [`super::trust`] (a violation for a verified contact, `PeerKeyChanged` otherwise), never
//!   silently.
//! * With another Ed25519 key and the same X25519 key the new alias is not accepted: the
//!   session keeps the old one and the messages stay parked.

use wire::frames::MsgDelivery;

use super::client::Client;
use super::contacts::{Peer, Reconciled};
use super::event::ClientError;
use crate::store::{ClientStore, SessionRecord};

impl<S: ClientStore> Client<S> {
    /// A message on a known conversation from an alias that is not the session's: the peer may
    /// have bound a new alias. Contacts sync decides and retries what is parked here.
    pub(super) fn on_msg_from_other_alias(
        &mut self,
        now_ms: u64,
        d: &MsgDelivery,
    ) -> Result<(), ClientError> {
        self.park(d)?;
        self.sync_contacts_again(now_ms);
        Ok(())
    }

    /// Contacts sync shows the conversation of `s` under `peer.alias` (see the module doc).
    pub(super) fn follow_alias(
        &mut self,
        s: &mut SessionRecord,
        peer: &Peer<'_>,
        r: &mut Reconciled,
    ) -> Result<(), ClientError> {
        let same_ed = s
            .their_ed25519_public_key
            .as_deref()
            .is_none_or(|e| e == peer.ed25519_b64);
        if same_ed || s.their_ecdh_public_key != peer.x25519_b64 {
            if let Some(t) = self.security.rename_contact(&s.their_alias_id, &peer.alias) {
                self.store.put_trust(&t)?;
                self.store.delete_trust(&s.their_alias_id)?;
            }
            s.their_alias_id.clone_from(&peer.alias);
            r.save = true;
            r.retry_parked = true;
        }
        Ok(())
    }
}
