//! Secrets at rest of the `relay` binary (issue 17, D3): the JWT signing key lives in a key
//! file of its own next to the store, never in the store.
//!
//! * `DIR/jwt-signing.key`: 32 random bytes, base64, created mode 0600 on first start. A relay
//!   whose data directory still has the key in the store's `meta` table (an older version)
//!   moves it to the file, so tokens issued before the upgrade stay valid; [`relay_core::Relay`]
//!   then deletes the row.
//! * The relay refuses to start when the key file is readable or writable by the group or by
//!   others (`chmod 600` it), and creates the data directory 0700.
//! * Rotation: [`load_or_create_jwt_key`] with `rotate` writes a new key (atomically, through a
//!   0600 temporary file and a rename); every token signed with the old key is refused from
//!   then on (users log in again). The `relay` binary's `--rotate-jwt-key` does this.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use relay_core::config::JwtSigningKey;

/// Name of the key file in the data directory.
pub const JWT_KEY_FILE: &str = "jwt-signing.key";

/// Why the key could not be loaded or written. Messages name files, never key material.
#[derive(Debug, thiserror::Error)]
pub enum SecretsError {
    /// Reading, writing or setting the mode of a file failed.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The key file can be read or written by someone other than its owner.
    #[error(
        "{} is accessible to group or others (mode {mode:o}); run `chmod 600` on it",
        path.display()
    )]
    TooOpen {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
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

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> SecretsError {
    let path = path.to_owned();
    move |source| SecretsError::Io { what, path, source }
}

/// Creates `dir` (and parents) if needed, mode 0700 when this call creates it.
pub fn create_private_dir(dir: &Path) -> Result<(), SecretsError> {
    if dir.exists() {
        return Ok(());
    }
    std::fs::create_dir_all(dir).map_err(io("creating the data directory", dir))?;
    set_mode(dir, 0o700)
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
        check_private(&path)?;
        let text = std::fs::read_to_string(&path).map_err(io("reading", &path))?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text.trim())
            .ok()
            .and_then(|k| <[u8; 32]>::try_from(k.as_slice()).ok())
            .ok_or_else(|| SecretsError::Malformed { path: path.clone() })?;
        return Ok(JwtSigningKey(bytes));
    }
    let key = match legacy.filter(|_| !rotate) {
        Some(k) => k,
        None => {
            let mut bytes = [0u8; 32];
            getrandom::fill(&mut bytes).map_err(|e| SecretsError::Random(e.to_string()))?;
            JwtSigningKey(bytes)
        }
    };
    write_private(
        &path,
        &base64::engine::general_purpose::STANDARD.encode(key.0),
    )?;
    Ok(key)
}

/// Writes `text` to `path` through a 0600 temporary file and a rename.
fn write_private(path: &Path, text: &str) -> Result<(), SecretsError> {
    let tmp = path.with_extension("key.tmp");
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let mut f = options.open(&tmp).map_err(io("creating", &tmp))?;
    set_mode(&tmp, 0o600)?;
    f.write_all(text.as_bytes()).map_err(io("writing", &tmp))?;
    f.sync_all().map_err(io("syncing", &tmp))?;
    std::fs::rename(&tmp, path).map_err(io("renaming into place", path))?;
    Ok(())
}

#[cfg(unix)]
fn set_mode(path: &Path, mode: u32) -> Result<(), SecretsError> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(io("setting the mode of", path))
}

#[cfg(not(unix))]
fn set_mode(_path: &Path, _mode: u32) -> Result<(), SecretsError> {
    Ok(())
}

#[cfg(unix)]
fn check_private(path: &Path) -> Result<(), SecretsError> {
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(path)
        .map_err(io("reading the mode of", path))?
        .permissions()
        .mode()
        & 0o777;
    if mode & 0o077 != 0 {
        return Err(SecretsError::TooOpen {
            path: path.to_owned(),
            mode,
        });
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_private(_path: &Path) -> Result<(), SecretsError> {
    Ok(())
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
            matches!(e, SecretsError::TooOpen { mode: 0o644, .. }),
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
