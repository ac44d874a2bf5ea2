//! Secrets at rest of the `relay` binary: the JWT signing key lives in a key file of its own
//! next to the store, never in the store. Files are read and written through
//! [`private_files`] (0600, atomic, refused when open to group or others), as the push crate's
//! VAPID key and credentials are.
//!
//! * `DIR/cluster.key` (a cluster node's, in its secrets directory): 32 random bytes, base64,
//!   created mode 0600 when missing; the same file on every node ([`load_or_create_cluster_key`]).
//! * `DIR/jwt-signing.key`: 32 random bytes, base64, created mode 0600 on first start. A relay
//!   whose data directory still has the key in the store's `meta` table (an older version)
//!   moves it to the file, so tokens issued before the upgrade stay valid; [`relay_core::Relay`]
//!   then deletes the row.
//! * The relay refuses to start when the key file is readable or writable by the group or by
//!   others (`chmod 600` it), and creates the data directory 0700.
//! * Rotation: [`load_or_create_jwt_key`] with `rotate` writes a new key (atomically, through a
//!   0600 temporary file and a rename); every token signed with the old key is refused from
//!   then on (users log in again). The `relay` binary's `--rotate-jwt-key` does this;
//!   [`rotate_vapid_key`] (`--rotate-vapid-key`) does the same for the Web Push key.
//! * Fingerprints ([`jwt_key_fingerprint`], [`vapid_key_fingerprint`]): what the relays of one
//!   PostgreSQL database record and compare (`relay_pg::KeyFingerprint`, README "Two relays on
//!   one PostgreSQL database"), so that a relay with other keys refuses to lead. Never the key,
//!   nothing that helps recover it; logs and errors show a short prefix only.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac as _};
use private_files::{PrivateFileError, read_private, write_private};
use relay_core::config::JwtSigningKey;
use relay_pg::KeyFingerprint;
use relay_push::VapidKey;
use sha2::{Digest as _, Sha256};
use zeroize::Zeroizing;

/// Name of the key file in the data directory.
pub const JWT_KEY_FILE: &str = "jwt-signing.key";

/// Why the key could not be loaded or written. Messages name files, never key material.
#[derive(Debug, thiserror::Error)]
pub enum SecretsError {
    /// The key file could not be read or written, or is open to group or others.
    #[error(transparent)]
    File(#[from] PrivateFileError),
    /// The key file does not hold 32 bytes of base64.
    #[error("{} does not hold a base64 32-byte key", path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
    },
    /// No randomness for a new key.
    #[error("reading OS randomness for a new key: {0}")]
    Random(String),
}

/// Creates `dir` (and parents) if needed, mode 0700 when this call creates it.
///
/// An existing directory that the group or others may write to is refused (they could replace
/// the store, the key files or the blobs in it): `chmod 700` it.
pub fn create_private_dir(dir: &Path) -> Result<(), SecretsError> {
    private_files::create_private_dir(dir)?;
    Ok(private_files::check_dir_not_shared(dir)?)
}

/// The JWT signing key of the data directory `dir`: read from its key file, or moved there
/// from `legacy` (the key an older version kept in the store), or new; a new one when
/// `rotate`. Refuses a key file open to group or others.
pub fn load_or_create_jwt_key(
    dir: &Path,
    legacy: Option<JwtSigningKey>,
    rotate: bool,
) -> Result<JwtSigningKey, SecretsError> {
    let path = dir.join(JWT_KEY_FILE);
    if !rotate && path.exists() {
        return Ok(JwtSigningKey(read_key(&path)?));
    }
    let key = match legacy.filter(|_| !rotate) {
        Some(k) => k,
        None => JwtSigningKey(random_key()?),
    };
    write_key(&path, &key.0)?;
    Ok(key)
}

/// Name of a cluster's key file in the secrets directory.
pub const CLUSTER_KEY_FILE: &str = "cluster.key";

/// The cluster key of the secrets directory `dir` (`DIR/cluster.key`, 32 bytes of base64,
/// created mode 0600 when missing) and its fingerprint: every node of a cluster must have the
/// same, which the database checks when a node joins. Refuses a key file open to group or
/// others.
pub fn load_or_create_cluster_key(
    dir: &Path,
) -> Result<(Zeroizing<[u8; 32]>, KeyFingerprint), SecretsError> {
    let path = dir.join(CLUSTER_KEY_FILE);
    let bytes = if path.exists() {
        read_key(&path)?
    } else {
        let bytes = random_key()?;
        write_key(&path, &bytes)?;
        bytes
    };
    let fingerprint = keyed_fingerprint(&bytes, CLUSTER_FINGERPRINT_TAG);
    Ok((Zeroizing::new(bytes), fingerprint))
}

/// A key file's 32 bytes (base64 in a private file).
fn read_key(path: &Path) -> Result<[u8; 32], SecretsError> {
    let text = read_private(path)?;
    base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .ok()
        .and_then(|k| <[u8; 32]>::try_from(k.as_slice()).ok())
        .ok_or_else(|| SecretsError::Malformed {
            path: path.to_path_buf(),
        })
}

/// 32 bytes of OS randomness for a new key.
fn random_key() -> Result<[u8; 32], SecretsError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| SecretsError::Random(e.to_string()))?;
    Ok(bytes)
}

/// Writes a key file: base64, mode 0600, atomically.
fn write_key(path: &Path, bytes: &[u8; 32]) -> Result<(), SecretsError> {
    let text = Zeroizing::new(base64::engine::general_purpose::STANDARD.encode(bytes));
    Ok(write_private(path, text.as_bytes())?)
}

/// Domain tag of the JWT signing key's fingerprint: the HMAC message.
pub const JWT_FINGERPRINT_TAG: &[u8] = b"securechat relay key fingerprint v1: jwt signing key";
/// Domain tag of the VAPID key's fingerprint: hashed before the public point.
pub const VAPID_FINGERPRINT_TAG: &[u8] = b"securechat relay key fingerprint v1: vapid public key\0";

/// The fingerprint of the JWT signing key: HMAC-SHA256 keyed by the key (the Ed25519 seed),
/// over [`JWT_FINGERPRINT_TAG`].
///
/// Keyed by the secret rather than a hash of it: HMAC is a pseudorandom function of its key, so
/// the value says nothing about the key to anyone without it (no shortcut, no length extension;
/// only a search of all 2^256 keys could test a guess), and the domain tag makes it a value no
/// other part of the relay computes with that key (which only ever signs tokens with Ed25519).
pub fn jwt_key_fingerprint(key: &JwtSigningKey) -> KeyFingerprint {
    keyed_fingerprint(&key.0, JWT_FINGERPRINT_TAG)
}

/// Domain tag of the cluster key's fingerprint: the HMAC message (keyed by the cluster key,
/// as the JWT key's fingerprint is by that key).
pub const CLUSTER_FINGERPRINT_TAG: &[u8] = b"securechat relay key fingerprint v1: cluster key";

/// HMAC-SHA256 keyed by a secret key over its domain `tag`.
fn keyed_fingerprint(key: &[u8], tag: &[u8]) -> KeyFingerprint {
    let Ok(mut mac) = <Hmac<Sha256> as KeyInit>::new_from_slice(key) else {
        // HMAC takes keys of any length: unreachable, but never a panic in the relay.
        return KeyFingerprint::from_bytes(Sha256::digest(tag).into());
    };
    mac.update(tag);
    KeyFingerprint::from_bytes(mac.finalize().into_bytes().into())
}

/// The fingerprint of the VAPID key: SHA-256 over [`VAPID_FINGERPRINT_TAG`] and the 65-byte
/// uncompressed public point, the very value browsers' subscriptions are bound to (public, so a
/// hash of it reveals nothing secret; the same key in another file format has the same
/// fingerprint).
pub fn vapid_key_fingerprint(key: &VapidKey) -> KeyFingerprint {
    let mut hash = Sha256::new();
    hash.update(VAPID_FINGERPRINT_TAG);
    hash.update(key.public_key());
    KeyFingerprint::from_bytes(hash.finalize().into())
}

/// Writes a new VAPID key from `rng` to `path` (PKCS#8 PEM, mode 0600, atomically through a
/// temporary file and a rename), replacing the one there: every browser subscription made under
/// the old key gets no more pushes until it subscribes again.
pub fn rotate_vapid_key(
    path: &Path,
    rng: &mut impl rand_core::CryptoRng,
) -> Result<VapidKey, SecretsError> {
    let key = VapidKey::generate(rng);
    write_private(path, key.to_pem().as_bytes())?;
    Ok(key)
}

#[cfg(test)]
mod fingerprint_tests {
    use rand_chacha::ChaCha20Rng;
    use rand_core::SeedableRng as _;

    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn the_jwt_fingerprint_is_stable_per_key_and_never_the_key() {
        let key = JwtSigningKey([7; 32]);
        let fp = jwt_key_fingerprint(&key);
        assert_eq!(fp, jwt_key_fingerprint(&JwtSigningKey([7; 32])));
        // A known value: any change of the construction (tag, algorithm) breaks every
        // database's record, so it is pinned (HMAC-SHA256(key = 32 × 0x07, tag), computed
        // independently with Python's hmac module).
        assert_eq!(
            hex(fp.as_bytes()),
            "ed0c292bdbac8e202eccc785aa964b01c0b937526d9f40bdfe008f175f1aeb89"
        );
        assert_ne!(fp, jwt_key_fingerprint(&JwtSigningKey([8; 32])));
        let mut one_bit = [7; 32];
        one_bit[31] ^= 1;
        assert_ne!(fp, jwt_key_fingerprint(&JwtSigningKey(one_bit)));
        // Not the key, not a plain hash of it, and no 4-byte run of the key in it.
        let random = JwtSigningKey(std::array::from_fn(|i| (i as u8).wrapping_mul(37) ^ 0x5a));
        let fp = jwt_key_fingerprint(&random);
        assert_ne!(fp.as_bytes(), &random.0);
        assert_ne!(
            fp.as_bytes().as_slice(),
            Sha256::digest(random.0).as_slice()
        );
        for window in random.0.windows(4) {
            assert!(!fp.as_bytes().windows(4).any(|w| w == window));
        }
        assert!(!hex(fp.as_bytes()).contains(&hex(&random.0[..4])));
        assert_eq!(fp.to_string().len(), relay_pg::SHORT_FINGERPRINT_HEX);
    }

    #[test]
    fn the_vapid_fingerprint_follows_the_public_key_whatever_the_file_format() {
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        let key = VapidKey::generate(&mut rng);
        let other = VapidKey::generate(&mut rng);
        let fp = vapid_key_fingerprint(&key);
        assert_ne!(fp, vapid_key_fingerprint(&other));
        let reparsed = VapidKey::parse(&key.to_pem()).unwrap();
        assert_eq!(vapid_key_fingerprint(&reparsed), fp);
        // Domain-separated: not the plain hash of the public point, nor the point itself.
        assert_ne!(
            fp.as_bytes().as_slice(),
            Sha256::digest(key.public_key()).as_slice()
        );
        assert!(!hex(&key.public_key()).contains(&hex(&fp.as_bytes()[..8])));
        // Pinned like the JWT one: the key whose scalar is 1 has the P-256 generator as its
        // public point; SHA-256(tag ‖ 04 ‖ Gx ‖ Gy) computed independently with Python's hashlib.
        let one = VapidKey::parse("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAE").unwrap();
        assert_eq!(
            hex(&one.public_key()[..9]),
            "046b17d1f2e12c4247",
            "the generator"
        );
        assert_eq!(
            hex(vapid_key_fingerprint(&one).as_bytes()),
            "a629231f92c5911702ad3500cac13ab51b7264c8172d2d4078470d283b1ede97"
        );
        // A JWT key and a VAPID key never share a fingerprint construction.
        assert_ne!(
            JWT_FINGERPRINT_TAG,
            &VAPID_FINGERPRINT_TAG[..JWT_FINGERPRINT_TAG.len()]
        );
    }

    #[test]
    fn a_vapid_rotation_writes_a_new_private_key_file() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("vapid.pem");
        let mut rng = ChaCha20Rng::seed_from_u64(2);
        let (old, created) = VapidKey::load_or_create(&path, &mut rng).unwrap();
        assert!(created);
        let new = rotate_vapid_key(&path, &mut rng).unwrap();
        assert_ne!(vapid_key_fingerprint(&new), vapid_key_fingerprint(&old));
        let loaded = VapidKey::load(&path).unwrap();
        assert_eq!(vapid_key_fingerprint(&loaded), vapid_key_fingerprint(&new));
    }
}

#[cfg(all(test, unix))]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).expect("metadata").permissions().mode() & 0o777
    }

    #[test]
    fn created_0600_stable_across_starts_and_rotated_on_request() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        create_private_dir(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
        let k1 = load_or_create_jwt_key(&dir, None, false).unwrap();
        assert_eq!(mode(&dir.join(JWT_KEY_FILE)), 0o600);
        assert_eq!(load_or_create_jwt_key(&dir, None, false).unwrap(), k1);
        let k2 = load_or_create_jwt_key(&dir, None, true).unwrap();
        assert_ne!(k2, k1);
        assert_eq!(load_or_create_jwt_key(&dir, None, false).unwrap(), k2);
        assert_eq!(mode(&dir.join(JWT_KEY_FILE)), 0o600);
    }

    #[test]
    fn a_cluster_key_is_created_0600_once_and_its_fingerprint_follows_it() {
        let tmp = tempfile::tempdir().unwrap();
        let (_, f1) = load_or_create_cluster_key(tmp.path()).unwrap();
        let path = tmp.path().join(CLUSTER_KEY_FILE);
        assert_eq!(mode(&path), 0o600);
        let (_, again) = load_or_create_cluster_key(tmp.path()).unwrap();
        assert_eq!(again, f1, "the file is read, not replaced");
        let other = tempfile::tempdir().unwrap();
        let (_, f2) = load_or_create_cluster_key(other.path()).unwrap();
        assert_ne!(f2, f1, "a new key, a new fingerprint");
        // Not the JWT key's fingerprint for the same bytes (another domain).
        let bytes = read_key(&path).unwrap();
        assert_ne!(jwt_key_fingerprint(&JwtSigningKey(bytes)), f1);
        std::fs::write(&path, "not a key").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let err = load_or_create_cluster_key(tmp.path())
            .unwrap_err()
            .to_string();
        assert!(err.contains("cluster.key"), "{err}");
    }

    #[test]
    fn a_legacy_key_moves_to_the_file_and_a_file_wins_over_it() {
        let tmp = tempfile::tempdir().unwrap();
        let legacy = JwtSigningKey([5; 32]);
        let k = load_or_create_jwt_key(tmp.path(), Some(legacy.clone()), false).unwrap();
        assert_eq!(k, legacy);
        let again = load_or_create_jwt_key(tmp.path(), Some(JwtSigningKey([6; 32])), false);
        assert_eq!(again.unwrap(), legacy);
    }

    #[test]
    fn an_open_or_malformed_key_file_is_refused_without_printing_it() {
        let tmp = tempfile::tempdir().unwrap();
        let k = load_or_create_jwt_key(tmp.path(), None, false).unwrap();
        let path = tmp.path().join(JWT_KEY_FILE);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = load_or_create_jwt_key(tmp.path(), None, false).unwrap_err();
        assert!(
            matches!(
                e,
                SecretsError::File(PrivateFileError::TooOpen { mode: 0o644, .. })
            ),
            "{e}"
        );
        let text = e.to_string();
        let b64 = base64::engine::general_purpose::STANDARD.encode(k.0);
        assert!(text.contains("chmod 600") && !text.contains(&b64), "{text}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(&path, "not a key").unwrap();
        let e = load_or_create_jwt_key(tmp.path(), None, false).unwrap_err();
        assert!(matches!(e, SecretsError::Malformed { .. }), "{e}");
    }
}
