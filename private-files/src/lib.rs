//! Files only their owner may read: the one implementation of "secret at rest" that the relay's
//! key files (the JWT signing key, the VAPID key) share.
//!
//! * [`write_private`]: a new file (or a replacement) written through a temporary file created
//!   with mode 0600, synced, renamed into place, and the directory synced, so a crash leaves
//!   the old file or the new one, never a torn or world-readable one.
//! * [`read_private`]: the file's text, refused ([`PrivateFileError::TooOpen`]) when the group
//!   or others may read or write it; the text is wiped from memory when dropped.
//! * [`check_private`]: that refusal on its own.
//! * [`create_private_dir`]: a directory (and its parents) created with mode 0700.
//! * [`make_private`]: a file another program creates (a database and its journals) made
//!   0600: created empty with that mode when missing, or narrowed when open to others.
//! * [`check_dir_not_shared`]: refuses a directory the group or others may write to (they
//!   could replace or delete the files in it).
//!
//! Errors name the file and what was being done, never its contents. On platforms without Unix
//! permissions the mode checks pass and files get the platform's defaults.
#![forbid(unsafe_code)]

use std::io::Write as _;
use std::path::{Path, PathBuf};

use zeroize::Zeroizing;

/// The permission bits of a private file.
pub const PRIVATE_FILE_MODE: u32 = 0o600;
/// The permission bits of a directory created for private files.
pub const PRIVATE_DIR_MODE: u32 = 0o700;
/// Largest private file [`read_private`] reads (key files and credentials are a few KiB).
pub const MAX_PRIVATE_FILE_BYTES: u64 = 64 * 1024;
/// The permission bits that must be clear on a private file: anything for group or others.
const GROUP_OR_OTHERS: u32 = 0o077;

/// Why a private file could not be read, written or checked.
#[derive(Debug, thiserror::Error)]
pub enum PrivateFileError {
    /// Reading, writing, syncing or setting the mode of a file failed.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file can be read or written by someone other than its owner.
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
    /// A directory the group or others may write to.
    #[error(
        "{} can be written by group or others (mode {mode:o}); run `chmod 700` on it",
        path.display()
    )]
    DirTooOpen {
        /// The directory.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The file is larger than [`MAX_PRIVATE_FILE_BYTES`]: not a key or credentials file.
    #[error(
        "{} is {len} bytes, more than a key file's {MAX_PRIVATE_FILE_BYTES}",
        path.display()
    )]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its length in bytes.
        len: u64,
    },
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> PrivateFileError {
    let path = path.to_owned();
    move |source| PrivateFileError::Io { what, path, source }
}

/// Writes `contents` to `path`, replacing any file there: through `<path>.tmp` created with
/// mode 0600, synced, renamed over `path`, then the directory synced.
pub fn write_private(path: &Path, contents: &[u8]) -> Result<(), PrivateFileError> {
    let mut tmp_name = path.as_os_str().to_owned();
    tmp_name.push(".tmp");
    let tmp = PathBuf::from(tmp_name);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(PRIVATE_FILE_MODE);
    }
    let mut file = options.open(&tmp).map_err(io("creating", &tmp))?;
    // A leftover temporary file keeps its old mode through `open`: set it explicitly.
    set_mode(&tmp, PRIVATE_FILE_MODE)?;
    file.write_all(contents).map_err(io("writing", &tmp))?;
    file.sync_all().map_err(io("syncing", &tmp))?;
    std::fs::rename(&tmp, path).map_err(io("renaming into place", path))?;
    sync_parent(path)
}

/// The text of the private file `path`, after [`check_private`] and a size check
/// ([`MAX_PRIVATE_FILE_BYTES`]); wiped from memory on drop.
pub fn read_private(path: &Path) -> Result<Zeroizing<String>, PrivateFileError> {
    check_private(path)?;
    let len = std::fs::metadata(path)
        .map_err(io("reading the size of", path))?
        .len();
    if len > MAX_PRIVATE_FILE_BYTES {
        return Err(PrivateFileError::TooLarge {
            path: path.to_owned(),
            len,
        });
    }
    let text = std::fs::read_to_string(path).map_err(io("reading", path))?;
    Ok(Zeroizing::new(text))
}

/// Refuses `path` when the group or others may read or write it.
pub fn check_private(path: &Path) -> Result<(), PrivateFileError> {
    let Some(mode) = mode_of(path)? else {
        return Ok(());
    };
    if mode & GROUP_OR_OTHERS != 0 {
        return Err(PrivateFileError::TooOpen {
            path: path.to_owned(),
            mode,
        });
    }
    Ok(())
}

/// Creates `dir` and its missing parents; a directory this call creates gets mode 0700 (an
/// existing one is left as it is).
pub fn create_private_dir(dir: &Path) -> Result<(), PrivateFileError> {
    if dir.exists() {
        return Ok(());
    }
    std::fs::create_dir_all(dir).map_err(io("creating the directory", dir))?;
    set_mode(dir, PRIVATE_DIR_MODE)
}

/// Makes `path` its owner's alone: creates it empty with mode 0600 when it does not exist
/// (so that a program opening it afterwards, e.g. SQLite, keeps that mode and gives it to
/// the journals it creates next to it), and removes every group and other permission from an
/// existing one. Returns whether an existing file's mode was narrowed.
pub fn make_private(path: &Path) -> Result<bool, PrivateFileError> {
    if !path.exists() {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            options.mode(PRIVATE_FILE_MODE);
        }
        match options.open(path) {
            Ok(_) => {}
            // Created meanwhile by someone else: narrowed below like any existing file.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io("creating", path)(e)),
        }
        set_mode(path, PRIVATE_FILE_MODE)?;
    }
    match mode_of(path)? {
        Some(mode) if mode & GROUP_OR_OTHERS != 0 => {
            set_mode(path, mode & !GROUP_OR_OTHERS)?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// Refuses the directory `dir` when the group or others may write to it.
pub fn check_dir_not_shared(dir: &Path) -> Result<(), PrivateFileError> {
    match mode_of(dir)? {
        Some(mode) if mode & 0o022 != 0 => Err(PrivateFileError::DirTooOpen {
            path: dir.to_owned(),
            mode,
        }),
        _ => Ok(()),
    }
}

/// The permission bits of `path` (`None` where the platform has none).
pub fn mode_of(path: &Path) -> Result<Option<u32>, PrivateFileError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let meta = std::fs::metadata(path).map_err(io("reading the mode of", path))?;
        Ok(Some(meta.permissions().mode() & 0o777))
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        Ok(None)
    }
}

fn set_mode(path: &Path, mode: u32) -> Result<(), PrivateFileError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
            .map_err(io("setting the mode of", path))
    }
    #[cfg(not(unix))]
    {
        let _ = (path, mode);
        Ok(())
    }
}

/// Syncs the directory holding `path`, so that a rename into it survives a crash.
fn sync_parent(path: &Path) -> Result<(), PrivateFileError> {
    #[cfg(unix)]
    {
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        std::fs::File::open(parent)
            .and_then(|dir| dir.sync_all())
            .map_err(io("syncing the directory of", path))
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code")]

    use super::*;

    #[test]
    fn a_written_file_is_the_owners_alone_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        write_private(&path, b"secret").unwrap();
        assert_eq!(read_private(&path).unwrap().as_str(), "secret");
        #[cfg(unix)]
        assert_eq!(mode_of(&path).unwrap(), Some(PRIVATE_FILE_MODE));
        assert!(
            !dir.path().join("key.tmp").exists(),
            "no temporary file left"
        );
    }

    #[test]
    fn a_rewrite_replaces_the_contents_whatever_a_leftover_temporary_file_was() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        write_private(&path, b"old").unwrap();
        std::fs::write(dir.path().join("key.tmp"), b"torn").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let open = std::fs::Permissions::from_mode(0o666);
            std::fs::set_permissions(dir.path().join("key.tmp"), open).unwrap();
        }
        write_private(&path, b"new").unwrap();
        assert_eq!(read_private(&path).unwrap().as_str(), "new");
    }

    #[cfg(unix)]
    #[test]
    fn a_file_open_to_group_or_others_is_refused_and_named() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        write_private(&path, b"secret").unwrap();
        for mode in [0o640, 0o604, 0o620, 0o602] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let err = read_private(&path).unwrap_err();
            assert!(
                matches!(err, PrivateFileError::TooOpen { mode: m, .. } if m == mode),
                "{err}"
            );
            let message = err.to_string();
            assert!(message.contains("chmod 600"), "{message}");
            assert!(!message.contains("secret"), "{message}");
        }
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o400)).unwrap();
        assert!(
            check_private(&path).is_ok(),
            "read-only for the owner is private"
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_created_directory_is_0700_and_an_existing_one_is_left_alone() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let new = dir.path().join("a/b");
        create_private_dir(&new).unwrap();
        assert_eq!(mode_of(&new).unwrap(), Some(PRIVATE_DIR_MODE));
        let existing = dir.path().join("existing");
        std::fs::create_dir(&existing).unwrap();
        std::fs::set_permissions(&existing, std::fs::Permissions::from_mode(0o755)).unwrap();
        create_private_dir(&existing).unwrap();
        assert_eq!(mode_of(&existing).unwrap(), Some(0o755));
    }

    #[cfg(unix)]
    #[test]
    fn make_private_creates_0600_and_narrows_an_open_file() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let new = dir.path().join("db");
        assert!(!make_private(&new).unwrap());
        assert_eq!(mode_of(&new).unwrap(), Some(PRIVATE_FILE_MODE));
        assert_eq!(std::fs::metadata(&new).unwrap().len(), 0);
        let open = dir.path().join("old");
        std::fs::write(&open, b"rows").unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o664)).unwrap();
        assert!(make_private(&open).unwrap());
        assert_eq!(mode_of(&open).unwrap(), Some(0o600));
        assert_eq!(std::fs::read(&open).unwrap(), b"rows", "contents kept");
    }

    #[cfg(unix)]
    #[test]
    fn a_directory_others_may_write_is_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        for (mode, ok) in [
            (0o700, true),
            (0o755, true),
            (0o770, false),
            (0o777, false),
            (0o702, false),
        ] {
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(mode)).unwrap();
            let result = check_dir_not_shared(dir.path());
            assert_eq!(result.is_ok(), ok, "{mode:o}");
            if let Err(e) = result {
                assert!(e.to_string().contains("chmod 700"), "{e}");
            }
        }
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    }

    #[test]
    fn a_file_larger_than_a_key_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big");
        let big = vec![b'a'; usize::try_from(MAX_PRIVATE_FILE_BYTES).unwrap() + 1];
        write_private(&path, &big).unwrap();
        let err = read_private(&path).unwrap_err();
        assert!(matches!(err, PrivateFileError::TooLarge { .. }), "{err}");
    }

    #[test]
    fn a_missing_file_is_an_io_error_that_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("absent");
        let err = read_private(&path).unwrap_err();
        assert!(matches!(err, PrivateFileError::Io { .. }), "{err}");
        assert!(err.to_string().contains("absent"), "{err}");
    }
}
