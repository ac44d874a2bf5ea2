//! Self-contained single-use credentials: auth challenges (A3/A4) and WebSocket tickets (A5).
//!
//! A credential carries everything needed to check it, sealed with an HMAC-SHA256 under a key
//! derived from the relay's JWT signing key, so nothing a client holds depends on one process's
//! memory: a ticket or challenge issued before a restart (or, later, by another relay sharing
//! the key and the store) is accepted after it. What must be remembered is only that one was
//! *used*: its nonce goes into the [`Table::Spent`](crate::store::Table::Spent) rows in the same commit as the answer that
//! used it (the token of a login, the upgrade of a socket), and stays there until the
//! credential expires. A relay that restarts therefore still refuses a used one.
//!
//! Wire form: one kind letter, then the unpadded base64url of
//! `expires_at (8 bytes, big endian) ‖ nonce (16) ‖ extra ‖ tag (16)`, where
//! `tag = HMAC(key, kind ‖ len(bound) (8 bytes, big endian) ‖ bound ‖ expires_at ‖ nonce ‖
//! extra)` cut to 16 bytes, and `bound` is what the presenter states beside the credential
//! (the account's uuid), not repeated inside it. `extra` is the ticket's JWT id (the token it was asked with, checked
//! against the account's current one at the upgrade); a challenge has none. All of it is
//! URL-safe, so a ticket goes into the upgrade's query string as it is.
//!
//! Proof-of-work challenges stay in the relay's memory (`crate::auth`): registration sends
//! only the nonce, never the challenge it solves, so the relay must remember what it issued.

use std::collections::BTreeMap;

use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac as _};
use sha2::Sha256;
use wire::UnixMs;

/// What a credential is for; its letter starts the wire form and the HMAC input, so one kind
/// is never accepted as another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// An auth challenge, signed by the account's key at `verify`.
    Challenge,
    /// A WebSocket ticket, redeemed by an upgrade.
    Ticket,
}

impl Kind {
    fn letter(self) -> u8 {
        match self {
            Self::Challenge => b'c',
            Self::Ticket => b't',
        }
    }
}

/// Bytes of the random nonce that names a credential in the spent rows.
const NONCE_BYTES: usize = 16;
/// Bytes of the HMAC kept (128 bits).
const TAG_BYTES: usize = 16;
/// `expires_at`, the nonce and the tag: the smallest body.
const FIXED_BYTES: usize = 8 + NONCE_BYTES + TAG_BYTES;
/// The label the credential key is derived under (from the JWT signing key's seed).
const KEY_LABEL: &[u8] = b"securechat relay: single-use credentials v1";

/// The key credentials are sealed with.
pub(crate) struct CredentialKey([u8; 32]);

impl std::fmt::Debug for CredentialKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CredentialKey(<redacted>)")
    }
}

/// A credential that checked out: when it expires, what names it, what it carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Opened {
    pub(crate) expires_at: UnixMs,
    /// The spent-row key of this credential (kind letter and nonce).
    pub(crate) spent_key: String,
    /// The account it was issued to (the bound value), charged for it once spent.
    pub(crate) owner: String,
    pub(crate) extra: Vec<u8>,
}

/// Why a credential was not accepted (each answered with the kind's own error code).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Not of this relay's form, sealed with another key, or bound to another account.
    Forged,
    /// Past its expiry.
    Expired,
}

fn mac(key: &[u8; 32]) -> Hmac<Sha256> {
    // An HMAC key may have any length, so this cannot fail.
    <Hmac<Sha256> as KeyInit>::new_from_slice(key).unwrap_or_else(|_| unreachable!())
}

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
}

impl CredentialKey {
    /// The credential key of the relay whose JWT key has `jwt_seed` (HMAC-SHA256 used as a
    /// key-derivation function, under its own label).
    pub(crate) fn derive(jwt_seed: &[u8; 32]) -> Self {
        let mut m = mac(jwt_seed);
        m.update(KEY_LABEL);
        Self(m.finalize().into_bytes().into())
    }

    /// The MAC over a credential's signed input: the kind, the bound value (its length first,
    /// so `bound ‖ body` splits one way only) and the body.
    fn mac_of(&self, kind: Kind, bound: &str, body: &[u8]) -> Hmac<Sha256> {
        let mut m = mac(&self.0);
        m.update(&[kind.letter()]);
        m.update(&(bound.len() as u64).to_be_bytes());
        m.update(bound.as_bytes());
        m.update(body);
        m
    }

    fn tag(&self, kind: Kind, bound: &str, body: &[u8]) -> [u8; TAG_BYTES] {
        let full = self.mac_of(kind, bound, body).finalize().into_bytes();
        let mut tag = [0u8; TAG_BYTES];
        tag.copy_from_slice(&full[..TAG_BYTES]);
        tag
    }

    /// A credential of `kind` for `bound`, expiring at `expires_at`, named by `nonce`,
    /// carrying `extra`.
    pub(crate) fn seal(
        &self,
        kind: Kind,
        bound: &str,
        expires_at: UnixMs,
        nonce: [u8; NONCE_BYTES],
        extra: &[u8],
    ) -> String {
        let mut body = Vec::with_capacity(FIXED_BYTES + extra.len());
        body.extend_from_slice(&expires_at.get().to_be_bytes());
        body.extend_from_slice(&nonce);
        body.extend_from_slice(extra);
        let tag = self.tag(kind, bound, &body);
        body.extend_from_slice(&tag);
        let mut out = String::with_capacity(1 + body.len().div_ceil(3) * 4);
        out.push(char::from(kind.letter()));
        b64().encode_string(&body, &mut out);
        out
    }

    /// Checks `credential` as one of `kind` presented for `bound` at `now`. Says nothing of
    /// whether it was used before (see [`State::is_spent`](crate::state::State::is_spent)).
    pub(crate) fn open(
        &self,
        kind: Kind,
        bound: &str,
        credential: &str,
        now: UnixMs,
    ) -> Result<Opened, Refused> {
        let rest = credential
            .strip_prefix(char::from(kind.letter()))
            .ok_or(Refused::Forged)?;
        let body = b64().decode(rest).map_err(|_| Refused::Forged)?;
        if body.len() < FIXED_BYTES {
            return Err(Refused::Forged);
        }
        let (signed, tag) = body.split_at(body.len() - TAG_BYTES);
        // Compared in constant time, over the bytes kept.
        self.mac_of(kind, bound, signed)
            .verify_truncated_left(tag)
            .map_err(|_| Refused::Forged)?;
        let mut at = [0u8; 8];
        at.copy_from_slice(&signed[..8]);
        let expires_at = UnixMs(u64::from_be_bytes(at));
        if now >= expires_at {
            return Err(Refused::Expired);
        }
        let nonce = &signed[8..8 + NONCE_BYTES];
        let mut spent_key = String::with_capacity(2 + NONCE_BYTES * 2);
        spent_key.push(char::from(kind.letter()));
        spent_key.push('/');
        b64().encode_string(nonce, &mut spent_key);
        Ok(Opened {
            expires_at,
            spent_key,
            owner: bound.to_owned(),
            extra: signed[8 + NONCE_BYTES..].to_vec(),
        })
    }
}

/// Used credentials not yet expired, by spent-row key, and how many each account holds.
///
/// Bounded per account, never in total: a full account is refused (429) its next login or
/// ticket upgrade until one of its own expires, so filling the set locks out only whoever
/// filled it. Its size is at most the accounts times
/// [`Config::max_spent_credentials_per_account`](crate::config::Config::max_spent_credentials_per_account).
#[derive(Debug, Default)]
pub(crate) struct Spent {
    /// Spent-row key → (expiry, owning account).
    by_key: BTreeMap<String, (UnixMs, String)>,
    /// Account → how many of `by_key` are its.
    per_owner: BTreeMap<String, usize>,
}

impl Spent {
    /// Whether the credential named `key` was used.
    pub(crate) fn contains(&self, key: &str) -> bool {
        self.by_key.contains_key(key)
    }

    /// How many used credentials of `owner`'s are remembered.
    pub(crate) fn count_of(&self, owner: &str) -> usize {
        self.per_owner.get(owner).copied().unwrap_or(0)
    }

    /// Remembers `key`, used by `owner`, until `expires_at` (a key already there keeps its
    /// first owner).
    pub(crate) fn insert(&mut self, key: String, owner: String, expires_at: UnixMs) {
        if let std::collections::btree_map::Entry::Vacant(e) = self.by_key.entry(key) {
            *self.per_owner.entry(owner.clone()).or_insert(0) += 1;
            e.insert((expires_at, owner));
        }
    }

    /// Forgets `key` if it expired by `now`; whether it did.
    pub(crate) fn remove_expired(&mut self, key: &str, now: UnixMs) -> bool {
        if self.by_key.get(key).is_none_or(|(at, _)| now < *at) {
            return false;
        }
        if let Some((_, owner)) = self.by_key.remove(key)
            && let std::collections::btree_map::Entry::Occupied(mut n) = self.per_owner.entry(owner)
        {
            *n.get_mut() -= 1;
            if *n.get() == 0 {
                n.remove();
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000_000;

    fn key() -> CredentialKey {
        CredentialKey::derive(&[7; 32])
    }

    #[test]
    fn a_sealed_credential_opens_for_its_kind_and_account_until_it_expires() {
        let k = key();
        let at = UnixMs(NOW + 30_000);
        let t = k.seal(Kind::Ticket, "alice", at, [1; 16], b"jti-1");
        assert!(t.starts_with('t'));
        assert!(
            t.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        );
        let opened = k.open(Kind::Ticket, "alice", &t, UnixMs(NOW)).unwrap();
        assert_eq!(opened.expires_at, at);
        assert_eq!(opened.extra, b"jti-1");
        assert_eq!(opened.spent_key, "t/AQEBAQEBAQEBAQEBAQEBAQ");
        assert_eq!(
            k.open(Kind::Ticket, "alice", &t, UnixMs(NOW + 29_999))
                .map(|o| o.expires_at),
            Ok(at)
        );
        assert_eq!(
            k.open(Kind::Ticket, "alice", &t, at),
            Err(Refused::Expired),
            "a credential is dead at its expiry"
        );
        assert_eq!(
            k.open(Kind::Ticket, "bob", &t, UnixMs(NOW)),
            Err(Refused::Forged)
        );
        assert_eq!(
            k.open(Kind::Challenge, "alice", &t, UnixMs(NOW)),
            Err(Refused::Forged)
        );
        let other = CredentialKey::derive(&[8; 32]);
        assert_eq!(
            other.open(Kind::Ticket, "alice", &t, UnixMs(NOW)),
            Err(Refused::Forged)
        );
    }

    #[test]
    fn every_changed_byte_and_every_cut_is_refused() {
        let k = key();
        let c = k.seal(Kind::Challenge, "alice", UnixMs(NOW + 1), [9; 16], b"");
        let raw = b64().decode(&c[1..]).unwrap();
        for i in 0..raw.len() {
            for flip in [0x01u8, 0x80] {
                let mut bad = raw.clone();
                bad[i] ^= flip;
                let s = format!("c{}", b64().encode(&bad));
                assert_eq!(
                    k.open(Kind::Challenge, "alice", &s, UnixMs(NOW)),
                    Err(Refused::Forged),
                    "byte {i} ^ {flip:#x}"
                );
            }
        }
        for len in 0..raw.len() {
            let s = format!("c{}", b64().encode(&raw[..len]));
            assert_eq!(
                k.open(Kind::Challenge, "alice", &s, UnixMs(NOW)),
                Err(Refused::Forged),
                "cut to {len} bytes"
            );
        }
        for junk in ["", "c", "c!!!", "x", "c====", "tAAAA"] {
            assert_eq!(
                k.open(Kind::Challenge, "alice", junk, UnixMs(NOW)),
                Err(Refused::Forged),
                "{junk:?}"
            );
        }
    }

    #[test]
    fn the_bound_value_and_the_body_split_one_way_only() {
        // "ab" + body and "a" + ("b" + body) must not share a tag.
        let k = key();
        let body = [0u8; FIXED_BYTES];
        assert_ne!(
            k.tag(Kind::Ticket, "ab", &body[..]),
            k.tag(Kind::Ticket, "a", &[b"b".as_slice(), &body[..]].concat())
        );
    }

    #[test]
    fn the_key_is_redacted_and_depends_on_the_seed() {
        assert_eq!(format!("{:?}", key()), "CredentialKey(<redacted>)");
        assert_ne!(key().0, CredentialKey::derive(&[8; 32]).0);
    }
}
