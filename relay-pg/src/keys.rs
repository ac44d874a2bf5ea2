//! Key fingerprints: the relays of one schema must use the same keys, and the database checks it.
//!
//! The keys that make a relay interchangeable with another (the JWT signing key: a token issued
//! by one relay must verify on the next; the VAPID key: browsers' push subscriptions are bound
//! to its public key) are files of the shell, deliberately kept out of the database. What the
//! database keeps is a **fingerprint** of each (table `key_fingerprints`, migration 0003): a
//! 32-byte value the shell derives from the key (never the key, nothing that helps recover it;
//! this crate only compares and stores the bytes it is given, see [`KeyFingerprint`]).
//!
//! A new leader compares its fingerprints with the recorded ones **inside the transaction that
//! takes its epoch** (after the `UPDATE` of the epoch row, whose row lock serializes every
//! candidate's transaction; an old leader only ever writes the table in its own campaign, so a
//! fenced leader cannot change it):
//!
//! | this relay's [`KeyClaim`] | nothing recorded | same fingerprint | another fingerprint |
//! |---|---|---|---|
//! | none (e.g. no Web Push) | nothing | nothing | warning, leads |
//! | [`KeyClaim::new`] | recorded | leads | [`PgError::KeysDiffer`], nothing written |
//! | [`KeyClaim::replacing`] | recorded | leads | replaced (warning) |
//!
//! On a difference the whole transaction rolls back (no epoch taken, no migration applied) and
//! the campaign fails; the lock session closes, so another candidate may lead. A standby also
//! compares before waiting for the lock and warns early: a relay started with the wrong keys is
//! reported when it starts, not only at the failover.

use std::{collections::BTreeMap, fmt};

use tokio_postgres::GenericClient;

use crate::{PgError, error::describe};

/// Length of a [`KeyFingerprint`] (a SHA-256-sized value).
pub const KEY_FINGERPRINT_BYTES: usize = 32;
/// Hex digits of a fingerprint shown in logs and errors (its first 6 bytes): enough to tell
/// two keys apart by eye, and never the whole value.
pub const SHORT_FINGERPRINT_HEX: usize = 12;

/// A kind of key whose fingerprint is recorded per schema (the `kind` column).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KeyKind {
    /// The JWT signing key: a token issued by one relay must verify on every other.
    Jwt,
    /// The Web Push (VAPID) key: browsers' subscriptions are bound to its public key.
    Vapid,
    /// A cluster's key: its nodes prove their links and the requests they pass on with it.
    Cluster,
}

impl KeyKind {
    /// Every kind, in the order they are checked.
    pub const ALL: [Self; 3] = [Self::Jwt, Self::Vapid, Self::Cluster];

    /// The name stored in the `kind` column (`jwt`, `vapid`, `cluster`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Jwt => "jwt",
            Self::Vapid => "vapid",
            Self::Cluster => "cluster",
        }
    }

    fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

impl fmt::Display for KeyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The fingerprint of a key: [`KEY_FINGERPRINT_BYTES`] bytes computed by the caller, e.g. a
/// domain-separated hash of a public key or a keyed hash (HMAC) under a secret key. It must
/// not reveal the key: it is stored in the database in the clear.
///
/// `Display` and `Debug` show only the first [`SHORT_FINGERPRINT_HEX`] hex digits.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyFingerprint([u8; KEY_FINGERPRINT_BYTES]);

impl KeyFingerprint {
    /// A fingerprint from its bytes.
    pub const fn from_bytes(bytes: [u8; KEY_FINGERPRINT_BYTES]) -> Self {
        Self(bytes)
    }

    /// Its bytes (what the database stores).
    pub fn as_bytes(&self) -> &[u8; KEY_FINGERPRINT_BYTES] {
        &self.0
    }

    /// The first [`SHORT_FINGERPRINT_HEX`] hex digits, as logs and errors show it.
    pub fn short_hex(&self) -> String {
        self.0
            .iter()
            .take(SHORT_FINGERPRINT_HEX / 2)
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    fn from_slice(bytes: &[u8]) -> Option<Self> {
        <[u8; KEY_FINGERPRINT_BYTES]>::try_from(bytes)
            .ok()
            .map(Self)
    }
}

impl fmt::Display for KeyFingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.short_hex())
    }
}

impl fmt::Debug for KeyFingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyFingerprint({}…)", self.short_hex())
    }
}

/// The fingerprint of a key this relay uses, and what to do when another one is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyClaim {
    /// This relay's fingerprint of the key.
    pub fingerprint: KeyFingerprint,
    /// Overwrite a different recorded fingerprint (a deliberate key rotation) instead of
    /// refusing to lead.
    pub replace: bool,
}

impl KeyClaim {
    /// Record `fingerprint` if nothing is recorded; refuse to lead if another one is.
    pub fn new(fingerprint: KeyFingerprint) -> Self {
        Self {
            fingerprint,
            replace: false,
        }
    }

    /// Record `fingerprint` in place of whatever is recorded (a key rotation).
    pub fn replacing(fingerprint: KeyFingerprint) -> Self {
        Self {
            fingerprint,
            replace: true,
        }
    }
}

/// One key of this relay that is not the one recorded for the schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyMismatch {
    /// Which key.
    pub kind: KeyKind,
    /// This relay's fingerprint.
    pub ours: KeyFingerprint,
    /// The recorded fingerprint.
    pub recorded: KeyFingerprint,
    /// The `holder` label of the relay that recorded it.
    pub recorded_by: String,
    /// The leadership epoch in which it was recorded.
    pub recorded_epoch: i64,
    /// When it was recorded (the database's clock, as text).
    pub recorded_at: String,
}

impl fmt::Display for KeyMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the {kind} key here has fingerprint {ours}, but the relays of this database use \
             the {kind} key with fingerprint {recorded} (recorded at {at} by \"{by}\", epoch {epoch})",
            kind = self.kind,
            ours = self.ours,
            recorded = self.recorded,
            at = self.recorded_at,
            by = self.recorded_by,
            epoch = self.recorded_epoch,
        )
    }
}

/// `"a; b"` of the mismatches (the text of [`PgError::KeysDiffer`]).
pub(crate) fn describe_mismatches(mismatches: &[KeyMismatch]) -> String {
    mismatches
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// A recorded row.
struct Recorded {
    fingerprint: KeyFingerprint,
    holder: String,
    epoch: i64,
    at: String,
}

/// The recorded fingerprints; none when the table does not exist yet (schema before version 3).
/// `lock` takes the rows' update locks (inside the leader's transaction).
async fn recorded(
    client: &impl GenericClient,
    schema: &str,
    lock: bool,
) -> Result<BTreeMap<KeyKind, Recorded>, PgError> {
    let backend = |e: &tokio_postgres::Error| PgError::Backend(describe(e));
    let exists: bool = client
        .query_one(
            "SELECT to_regclass(format('%I.key_fingerprints', $1::text)) IS NOT NULL",
            &[&schema],
        )
        .await
        .map_err(|e| backend(&e))?
        .get(0);
    if !exists {
        return Ok(BTreeMap::new());
    }
    let rows = client
        .query(
            &format!(
                "SELECT kind, fingerprint, holder, epoch, recorded_at::text FROM key_fingerprints{}",
                if lock { " FOR UPDATE" } else { "" }
            ),
            &[],
        )
        .await
        .map_err(|e| backend(&e))?;
    let mut found = BTreeMap::new();
    for row in rows {
        let name: String = row.get(0);
        // A kind a newer build records: not ours to check.
        let Some(kind) = KeyKind::parse(&name) else {
            continue;
        };
        let bytes: Vec<u8> = row.get(1);
        let fingerprint = KeyFingerprint::from_slice(&bytes).ok_or_else(|| {
            PgError::Backend(format!(
                "key_fingerprints: the {kind} fingerprint has {} bytes, not {KEY_FINGERPRINT_BYTES}",
                bytes.len()
            ))
        })?;
        found.insert(
            kind,
            Recorded {
                fingerprint,
                holder: row.get(2),
                epoch: row.get(3),
                at: row.get(4),
            },
        );
    }
    Ok(found)
}

/// A standby's early look (no lock, nothing written): warns about every key that would stop
/// this relay from leading, so a misconfigured standby is noticed when it starts.
pub(crate) async fn warn_early(
    client: &impl GenericClient,
    schema: &str,
    claims: &BTreeMap<KeyKind, KeyClaim>,
) -> Result<(), PgError> {
    if claims.is_empty() {
        return Ok(());
    }
    let found = recorded(client, schema, false).await?;
    for (kind, claim) in claims {
        let Some(rec) = found.get(kind) else { continue };
        if rec.fingerprint == claim.fingerprint {
            continue;
        }
        if claim.replace {
            tracing::warn!(
                %kind,
                ours = %claim.fingerprint,
                recorded = %rec.fingerprint,
                "standby: this relay's key will replace the recorded one when it leads (key rotation)"
            );
        } else {
            tracing::error!(
                %kind,
                ours = %claim.fingerprint,
                recorded = %rec.fingerprint,
                recorded_by = %rec.holder,
                "standby: this relay's key is not the one recorded for this database; if it wins \
                 the leadership it will refuse to lead (every relay of a database needs the same keys)"
            );
        }
    }
    Ok(())
}

/// What the leader's check did, logged once its transaction committed.
#[derive(Debug)]
pub(crate) enum KeyEvent {
    Recorded(KeyKind, KeyFingerprint),
    Replaced {
        kind: KeyKind,
        old: KeyFingerprint,
        new: KeyFingerprint,
    },
    /// A fingerprint is recorded for a key this relay does not have.
    Unclaimed(KeyKind, KeyFingerprint),
}

impl KeyEvent {
    pub(crate) fn log(&self) {
        match self {
            Self::Recorded(kind, fp) => {
                tracing::info!(%kind, fingerprint = %fp, "recorded this relay's key fingerprint");
            }
            Self::Replaced { kind, old, new } => tracing::warn!(
                %kind,
                old = %old,
                new = %new,
                "replaced the recorded key fingerprint (key rotation): relays still on the old \
                 key now refuse to lead"
            ),
            Self::Unclaimed(kind, fp) => tracing::warn!(
                %kind,
                recorded = %fp,
                "a key fingerprint is recorded for this database but this relay has no such key"
            ),
        }
    }
}

/// The new leader's check, inside its epoch transaction (see the module doc). On any
/// mismatch, nothing is written and every mismatch is reported.
pub(crate) async fn check_and_record(
    tx: &tokio_postgres::Transaction<'_>,
    schema: &str,
    claims: &BTreeMap<KeyKind, KeyClaim>,
    holder: &str,
    epoch: i64,
) -> Result<Vec<KeyEvent>, PgError> {
    let found = recorded(tx, schema, true).await?;
    let mut mismatches = Vec::new();
    let mut writes = Vec::new();
    let mut events = Vec::new();
    for kind in KeyKind::ALL {
        match (claims.get(&kind), found.get(&kind)) {
            (None, None) => {}
            (None, Some(rec)) => events.push(KeyEvent::Unclaimed(kind, rec.fingerprint)),
            (Some(claim), None) => {
                writes.push((kind, claim.fingerprint));
                events.push(KeyEvent::Recorded(kind, claim.fingerprint));
            }
            (Some(claim), Some(rec)) if claim.fingerprint == rec.fingerprint => {}
            (Some(claim), Some(rec)) if claim.replace => {
                writes.push((kind, claim.fingerprint));
                events.push(KeyEvent::Replaced {
                    kind,
                    old: rec.fingerprint,
                    new: claim.fingerprint,
                });
            }
            (Some(claim), Some(rec)) => mismatches.push(KeyMismatch {
                kind,
                ours: claim.fingerprint,
                recorded: rec.fingerprint,
                recorded_by: rec.holder.clone(),
                recorded_epoch: rec.epoch,
                recorded_at: rec.at.clone(),
            }),
        }
    }
    if !mismatches.is_empty() {
        return Err(PgError::KeysDiffer(mismatches));
    }
    for (kind, fingerprint) in writes {
        tx.execute(
            "INSERT INTO key_fingerprints (kind, fingerprint, holder, epoch, recorded_at)
             VALUES ($1, $2, $3, $4, now())
             ON CONFLICT (kind) DO UPDATE SET fingerprint = EXCLUDED.fingerprint,
                 holder = EXCLUDED.holder, epoch = EXCLUDED.epoch, recorded_at = EXCLUDED.recorded_at",
            &[
                &kind.as_str(),
                &fingerprint.as_bytes().as_slice(),
                &holder,
                &epoch,
            ],
        )
        .await
        .map_err(|e| PgError::Backend(describe(&e)))?;
    }
    Ok(events)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_show_a_short_prefix_only() {
        let fp = KeyFingerprint::from_bytes(std::array::from_fn(|i| u8::try_from(i).unwrap()));
        assert_eq!(fp.to_string(), "000102030405");
        assert_eq!(fp.short_hex().len(), SHORT_FINGERPRINT_HEX);
        assert_eq!(format!("{fp:?}"), "KeyFingerprint(000102030405…)");
        let claim = KeyClaim::new(fp);
        assert!(!format!("{claim:?}").contains("0607"), "{claim:?}");
    }

    #[test]
    fn kinds_round_trip_through_their_column_names() {
        for kind in KeyKind::ALL {
            assert_eq!(KeyKind::parse(kind.as_str()), Some(kind));
        }
        assert_eq!(KeyKind::parse("apns"), None);
    }

    #[test]
    fn a_mismatch_names_the_kind_both_short_fingerprints_and_who_recorded_it() {
        let m = KeyMismatch {
            kind: KeyKind::Vapid,
            ours: KeyFingerprint::from_bytes([0xab; 32]),
            recorded: KeyFingerprint::from_bytes([0xcd; 32]),
            recorded_by: "relay pid 7".into(),
            recorded_epoch: 3,
            recorded_at: "2030-01-01 00:00:00+00".into(),
        };
        let text = describe_mismatches(&[m]);
        for part in [
            "vapid",
            "abababababab",
            "cdcdcdcdcdcd",
            "relay pid 7",
            "epoch 3",
        ] {
            assert!(text.contains(part), "{part}: {text}");
        }
        assert!(!text.contains(&"ab".repeat(7)), "{text}");
    }
}
