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
//! * The session remembers the peer's earlier aliases: a relay may deliver what the peer queued
//!   before the bind under the alias it was sent from, and such messages flow like any other.
//! * A parked message from an alias the freshest sync lists for no one in its conversation
//!   (neither the peer's now nor earlier, e.g. a backlog sent before a bind this device never
//!   saw) was sent under an alias the peer has left: that alias becomes a former one and the
//!   message is retried (it must still decrypt under the session key and pass the trust guard).

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
            probes::probe!("client:alias-followed");
            let former = std::mem::replace(&mut s.their_alias_id, peer.alias.clone());
            s.former_alias_ids.retain(|a| *a != peer.alias);
            s.remember_former_alias(&former);
            r.save = true;
            r.retry_parked = true;
        }
        Ok(())
    }

    /// A contacts sync that postdates every park listed the conversation of `s` under
    /// `peer.alias`: parked messages of the conversation from aliases that are not the peer's
    /// and not the listed one adopt their alias as a former one (see the module doc).
    pub(super) fn adopt_former_aliases(
        &mut self,
        s: &mut SessionRecord,
        peer: &Peer<'_>,
        r: &mut Reconciled,
    ) -> Result<(), ClientError> {
        for off in self.store.list_offline()? {
            if off.conversation_id == s.conversation_id
                && off.from_alias_id != peer.alias
                && !s.is_peer_alias(&off.from_alias_id)
            {
                probes::probe!("client:former-alias-adopted");
                s.remember_former_alias(&off.from_alias_id);
                r.save = true;
                r.retry_parked = true;
            }
        }
        Ok(())
    }
}
