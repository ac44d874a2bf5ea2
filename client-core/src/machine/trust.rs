//! The trust guard: verified contacts, security codes, and what a changed key does.
//!
//! * The guard runs on every inbound message from a verified contact: a key other than the
//!   verified one emits [`Event::SecurityViolation`] and the message is parked, not decrypted.
//! * A key change reported by contacts sync never replaces a verified session: the new key is
//!   kept aside as `pendingEcdhPublicKey`, a violation is emitted (once per new key) and
//!   decryption stays refused until the user calls [`Client::reset_trust_state`], which
//!   adopts the new key, unverified, and retries the parked messages.
//! * For an unverified contact the new key replaces the old one (new session key) and
//!   [`Event::PeerKeyChanged`] is emitted; the parked messages are retried.
//! * `verify_input_code` / `mark_as_verified` verify a contact; trust records are persisted.

use super::client::Client;
use super::contacts::{Peer, Reconciled};
use super::event::{ClientError, Event};
use crate::crypto::session_key;
use crate::encoding::from_base64_array;
use crate::keys::{Identity, SecretString};
use crate::security::TrustState;
use crate::store::{ClientStore, SessionRecord, SessionTrust};

impl<S: ClientStore> Client<S> {
    /// The trust state of a contact.
    pub fn trust_state(&self, contact_id: &str) -> TrustState {
        self.security.get_trust_state(contact_id)
    }

    pub(super) fn my_ecdh_public(&self) -> Option<[u8; 32]> {
        self.identity.as_ref().map(|i| i.ecdh_key.public_key())
    }

    fn their_pub(&self, conversation_id: &str) -> Result<[u8; 32], ClientError> {
        let s = self
            .store
            .load_session(conversation_id)?
            .ok_or_else(|| ClientError::NoSession(conversation_id.to_owned()))?;
        from_base64_array(&s.their_ecdh_public_key)
            .map_err(|_| ClientError::NoSession(conversation_id.to_owned()))
    }

    /// Compares typed input with the contact's code; verifies the session on a match.
    pub fn verify_input_code(
        &mut self,
        now_ms: u64,
        conversation_id: &str,
        input: &str,
    ) -> Result<bool, ClientError> {
        let mine = self.my_ecdh_public().ok_or(ClientError::NotAuthenticated)?;
        let theirs = self.their_pub(conversation_id)?;
        let Some(s) = self.store.load_session(conversation_id)? else {
            return Err(ClientError::NoSession(conversation_id.to_owned()));
        };
        let ok = self
            .security
            .verify_input_code(&s.their_alias_id, input, &mine, &theirs, now_ms);
        if ok {
            self.persist_verified(&s.their_alias_id, conversation_id)?;
        }
        Ok(ok)
    }

    /// Marks the contact of a conversation verified (manual path).
    pub fn mark_as_verified(
        &mut self,
        now_ms: u64,
        conversation_id: &str,
    ) -> Result<(), ClientError> {
        let mine = self.my_ecdh_public().ok_or(ClientError::NotAuthenticated)?;
        let theirs = self.their_pub(conversation_id)?;
        let Some(s) = self.store.load_session(conversation_id)? else {
            return Err(ClientError::NoSession(conversation_id.to_owned()));
        };
        self.security
            .mark_as_verified(&s.their_alias_id, &mine, &theirs, now_ms);
        self.persist_verified(&s.their_alias_id, conversation_id)
    }

    fn persist_verified(&mut self, contact: &str, conv: &str) -> Result<(), ClientError> {
        if let Some(r) = self.security.records().find(|r| r.contact_id == contact) {
            let r = r.clone();
            self.store.put_trust(&r)?;
        }
        self.store.mark_session_verified(conv)?;
        Ok(())
    }

    /// Back to unverified; a pending changed key (see the [machine doc](crate::machine)) is
    /// adopted now.
    pub fn reset_trust_state(
        &mut self,
        now_ms: u64,
        conversation_id: &str,
    ) -> Result<(), ClientError> {
        let Some(mut s) = self.store.load_session(conversation_id)? else {
            return Err(ClientError::NoSession(conversation_id.to_owned()));
        };
        self.security.reset_trust_state(&s.their_alias_id);
        self.store.delete_trust(&s.their_alias_id)?;
        s.trust_state = SessionTrust::Unverified;
        if let (Some(p), Some(identity)) =
            (s.pending_ecdh_public_key.take(), self.identity.as_ref())
            && let Ok(their) = from_base64_array::<32>(&p)
        {
            let key = session_key(&identity.ecdh_key, &their, conversation_id);
            s.session_key_base64 = SecretString::new(key.to_base64());
            s.their_ecdh_public_key = p;
        }
        self.store.save_session(&s)?;
        self.retry_parked(now_ms, &[conversation_id.to_owned()])
    }

    /// The guard on an inbound message of `session`: false when it must be parked, because the
    /// sender's current key (a pending changed one if any) is not the verified one (then
    /// [`Event::SecurityViolation`] is emitted), or we have no identity or a malformed key.
    pub(super) fn guard_inbound(&mut self, now_ms: u64, session: &SessionRecord) -> bool {
        let Some(mine) = self.my_ecdh_public() else {
            return false;
        };
        let current_b64 = session
            .pending_ecdh_public_key
            .as_deref()
            .unwrap_or(&session.their_ecdh_public_key);
        let Ok(current) = from_base64_array::<32>(current_b64) else {
            return false;
        };
        if let Some(ev) =
            self.security
                .guard_message(&session.their_alias_id, &mine, &current, now_ms)
        {
            self.out.event(Event::SecurityViolation(ev));
            return false;
        }
        true
    }

    /// Contacts sync reports a new X25519 key for the contact of `s`: kept aside for a verified
    /// contact (with a violation), adopted for an unverified one (see the module doc).
    pub(super) fn peer_key_changed(
        &mut self,
        now_ms: u64,
        identity: &Identity,
        s: &mut SessionRecord,
        peer: &Peer<'_>,
        r: &mut Reconciled,
    ) {
        let verified = matches!(
            self.security.get_trust_state(&s.their_alias_id),
            TrustState::Verified { .. }
        );
        if verified {
            if s.pending_ecdh_public_key.as_deref() != Some(&peer.x25519_b64) {
                s.pending_ecdh_public_key = Some(peer.x25519_b64.clone());
                r.save = true;
                if let Some(ev) = self.security.guard_message(
                    &s.their_alias_id,
                    &identity.ecdh_key.public_key(),
                    &peer.x25519,
                    now_ms,
                ) {
                    self.out.event(Event::SecurityViolation(ev));
                }
            }
        } else {
            let key = session_key(&identity.ecdh_key, &peer.x25519, peer.conv);
            s.their_ecdh_public_key.clone_from(&peer.x25519_b64);
            s.session_key_base64 = SecretString::new(key.to_base64());
            s.pending_ecdh_public_key = None;
            r.save = true;
            self.out.event(Event::PeerKeyChanged {
                conversation_id: s.conversation_id.clone(),
                alias_id: s.their_alias_id.clone(),
            });
            r.retry_parked = true;
        }
    }
}
