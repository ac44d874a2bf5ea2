//! The security module: SPEC's trust table, exactly.
//!
//! | From | Trigger | Condition | To |
//! |---|---|---|---|
//! | unverified | [`SecurityModule::verify_input_code`] | code matches | verified (returns true; records `verifiedAt` and the fingerprint snapshot) |
//! | unverified | `verify_input_code` | code differs | unverified (returns false) |
//! | unverified | [`SecurityModule::mark_as_verified`] | — | verified |
//! | any | [`SecurityModule::reset_trust_state`] | — | unverified |
//! | any | [`SecurityModule::guard_message`] | verified and fingerprint changed | unchanged; returns a [`SecurityViolationEvent`] |
//! | any | `guard_message` | otherwise | unchanged; returns `None` |
//!
//! `verify_input_code` ignores all whitespace and compares **case-insensitively** (the web docs
//! show upper-case codes; the web client compares case-sensitively, KT lower-cases both): a code
//! that differs only in case carries the same 240 bits. The full 60 characters must match (no
//! 8-character shortcut as in some apps). `verify_input_code` on an already verified contact
//! re-checks and re-records the snapshot on success, and leaves it verified on failure
//! (SPEC's table only defines the unverified rows; "never silently weaken trust").

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::keys::compute_security_code;

/// Characters per display group.
pub const DISPLAY_GROUP_CHARS: usize = 4;

/// A contact's security code in both forms.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SecurityCode {
    /// The contact the code belongs to.
    pub contact_id: String,
    /// 60 hex chars in groups of 4 separated by single spaces.
    pub display_code: String,
    /// The raw 60 hex chars used for comparison.
    pub fingerprint_hex: String,
}

/// Trust state of a contact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "camelCase")]
pub enum TrustState {
    /// Not verified.
    #[serde(rename = "unverified")]
    Unverified,
    /// Verified at `verified_at` (epoch ms) for `fingerprint_snapshot`.
    #[serde(rename = "verified", rename_all = "camelCase")]
    Verified {
        /// When the contact was verified, epoch ms.
        verified_at: u64,
        /// The fingerprint (60 hex) that was verified.
        fingerprint_snapshot: String,
    },
}

/// Persisted trust record of a verified contact (SPEC "trust" store).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TrustRecord {
    /// Contact id (the peer alias in this client).
    pub contact_id: String,
    /// Always `verified` (unverified contacts have no record).
    pub status: String,
    /// When verified, epoch ms.
    pub verified_at: u64,
    /// Fingerprint at verification time.
    pub fingerprint_snapshot: String,
}

/// Reported when a verified contact's key changed; the message is not decrypted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SecurityViolationEvent {
    /// Constant `security_violation`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The contact.
    pub contact_id: String,
    /// Fingerprint recorded when verified.
    pub previous_fingerprint: String,
    /// Fingerprint of the keys now in use.
    pub current_fingerprint: String,
    /// When detected, epoch ms.
    pub detected_at: u64,
    /// Always null.
    pub message: Option<String>,
}

/// Groups a 60-char code as `xxxx xxxx …`.
pub fn display_code(fingerprint_hex: &str) -> String {
    let chars: Vec<char> = fingerprint_hex.chars().collect();
    chars
        .chunks(DISPLAY_GROUP_CHARS)
        .map(|c| c.iter().collect::<String>())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Normalises typed input: whitespace removed, ASCII lower-cased.
pub fn normalize_input_code(input: &str) -> String {
    input
        .chars()
        .filter(|c| !c.is_whitespace())
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// Trust records keyed by contact id; persist them with [`SecurityModule::records`].
#[derive(Debug, Clone, Default)]
pub struct SecurityModule {
    trust: BTreeMap<String, TrustRecord>,
}

impl SecurityModule {
    /// An empty module.
    pub fn new() -> Self {
        Self::default()
    }

    /// Rebuilds the module from stored records.
    pub fn from_records(records: impl IntoIterator<Item = TrustRecord>) -> Self {
        Self {
            trust: records
                .into_iter()
                .map(|r| (r.contact_id.clone(), r))
                .collect(),
        }
    }

    /// All records (to persist).
    pub fn records(&self) -> impl Iterator<Item = &TrustRecord> {
        self.trust.values()
    }

    /// The security code of a contact.
    pub fn get_security_code(
        &self,
        contact_id: &str,
        my_ecdh_public: &[u8; 32],
        their_ecdh_public: &[u8; 32],
    ) -> SecurityCode {
        let hex = compute_security_code(my_ecdh_public, their_ecdh_public);
        SecurityCode {
            contact_id: contact_id.to_owned(),
            display_code: display_code(&hex),
            fingerprint_hex: hex,
        }
    }

    /// Compares typed input with the computed code; on a match marks the contact verified.
    pub fn verify_input_code(
        &mut self,
        contact_id: &str,
        input_code: &str,
        my_ecdh_public: &[u8; 32],
        their_ecdh_public: &[u8; 32],
        now_ms: u64,
    ) -> bool {
        let hex = compute_security_code(my_ecdh_public, their_ecdh_public);
        if normalize_input_code(input_code) != hex {
            return false;
        }
        self.record(contact_id, hex, now_ms);
        true
    }

    /// Marks a contact verified without comparing codes (manual path).
    pub fn mark_as_verified(
        &mut self,
        contact_id: &str,
        my_ecdh_public: &[u8; 32],
        their_ecdh_public: &[u8; 32],
        now_ms: u64,
    ) {
        let hex = compute_security_code(my_ecdh_public, their_ecdh_public);
        self.record(contact_id, hex, now_ms);
    }

    fn record(&mut self, contact_id: &str, hex: String, now_ms: u64) {
        self.trust.insert(
            contact_id.to_owned(),
            TrustRecord {
                contact_id: contact_id.to_owned(),
                status: "verified".to_owned(),
                verified_at: now_ms,
                fingerprint_snapshot: hex,
            },
        );
    }

    /// The contact's trust state.
    pub fn get_trust_state(&self, contact_id: &str) -> TrustState {
        match self.trust.get(contact_id) {
            Some(r) => TrustState::Verified {
                verified_at: r.verified_at,
                fingerprint_snapshot: r.fingerprint_snapshot.clone(),
            },
            None => TrustState::Unverified,
        }
    }

    /// Moves a contact's record to a new contact id (the peer bound a new alias with the same
    /// keys); returns the moved record, to persist. Nothing happens when there is none.
    pub fn rename_contact(&mut self, old_id: &str, new_id: &str) -> Option<TrustRecord> {
        let mut r = self.trust.remove(old_id)?;
        r.contact_id = new_id.to_owned();
        self.trust.insert(new_id.to_owned(), r.clone());
        Some(r)
    }

    /// Back to unverified (from any state).
    pub fn reset_trust_state(&mut self, contact_id: &str) {
        self.trust.remove(contact_id);
    }

    /// Checks the current keys of a verified contact against the snapshot; call on every message.
    pub fn guard_message(
        &self,
        contact_id: &str,
        my_ecdh_public: &[u8; 32],
        their_ecdh_public: &[u8; 32],
        now_ms: u64,
    ) -> Option<SecurityViolationEvent> {
        let r = self.trust.get(contact_id)?;
        let current = compute_security_code(my_ecdh_public, their_ecdh_public);
        (current != r.fingerprint_snapshot).then(|| SecurityViolationEvent {
            kind: "security_violation".to_owned(),
            contact_id: contact_id.to_owned(),
            previous_fingerprint: r.fingerprint_snapshot.clone(),
            current_fingerprint: current,
            detected_at: now_ms,
            message: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: [u8; 32] = [3; 32];
    const B: [u8; 32] = [4; 32];
    const C: [u8; 32] = [5; 32];
    const CODE: &str = "505a9c6ac70bdffa46248e2025483f9fe997a0e31ed25559e448b73b7e02";

    #[test]
    fn trust_table() {
        let mut s = SecurityModule::new();
        let code = s.get_security_code("alias_z", &A, &B);
        assert_eq!(code.fingerprint_hex, CODE);
        assert_eq!(code.display_code.replace(' ', ""), CODE);
        assert_eq!(code.display_code.split(' ').count(), 15);
        assert_eq!(s.get_trust_state("alias_z"), TrustState::Unverified);
        assert!(!s.verify_input_code("alias_z", "0000", &A, &B, 1));
        assert_eq!(s.get_trust_state("alias_z"), TrustState::Unverified);
        assert_eq!(s.guard_message("alias_z", &A, &C, 1), None); // unverified: no event
        let upper = code.display_code.to_uppercase();
        assert!(s.verify_input_code("alias_z", &format!(" {upper}\n"), &A, &B, 5));
        assert_eq!(
            s.get_trust_state("alias_z"),
            TrustState::Verified {
                verified_at: 5,
                fingerprint_snapshot: CODE.into()
            }
        );
        assert_eq!(s.guard_message("alias_z", &B, &A, 6), None);
        let ev = s.guard_message("alias_z", &A, &C, 7).unwrap();
        assert_eq!(ev.previous_fingerprint, CODE);
        assert_eq!(ev.current_fingerprint, compute_security_code(&A, &C));
        assert_eq!(ev.detected_at, 7);
        let j = serde_json::to_value(&ev).unwrap();
        assert_eq!(j["type"], "security_violation");
        assert_eq!(j["contactId"], "alias_z");
        assert!(j["message"].is_null());
        // guard does not change the state
        assert!(matches!(
            s.get_trust_state("alias_z"),
            TrustState::Verified { .. }
        ));
        s.reset_trust_state("alias_z");
        assert_eq!(s.get_trust_state("alias_z"), TrustState::Unverified);
        s.reset_trust_state("alias_z");
        s.mark_as_verified("alias_z", &A, &B, 9);
        assert!(matches!(
            s.get_trust_state("alias_z"),
            TrustState::Verified { verified_at: 9, .. }
        ));
        // a prefix is not enough
        let mut t = SecurityModule::new();
        assert!(!t.verify_input_code("x", &CODE[..8], &A, &B, 1));
        let restored = SecurityModule::from_records(s.records().cloned());
        assert_eq!(
            restored.get_trust_state("alias_z"),
            s.get_trust_state("alias_z")
        );
        let ts = serde_json::to_value(s.get_trust_state("alias_z")).unwrap();
        assert_eq!(ts["status"], "verified");
        assert_eq!(ts["verifiedAt"], 9);
    }
}
