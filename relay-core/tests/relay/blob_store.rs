//! The blob stores on their own: which upload keys they take (1 to 128 bytes of ASCII letters,
//! digits, `-`, `_`), what the memory store reports, a boxed store forwarding every call, and
//! the filesystem store's answers when a path is not what it expects.

use relay_core::blob::BlobError;
use relay_core::{BlobStore, FsBlobStore, MemoryBlobStore};

fn keys(b: &mut dyn BlobStore) {
    let longest = "k".repeat(128);
    for ok in ["a", "Z", "0", "-", "_", "up-1_X9", longest.as_str()] {
        assert_eq!(b.put_part(ok, 1, b"v"), Ok(()), "{ok:?}");
        assert_eq!(b.get_part(ok, 1).unwrap(), b"v", "{ok:?}");
        b.delete(ok).unwrap();
    }
    let too_long = "k".repeat(129);
    for bad in ["", ".", "a.b", "a/b", "a b", "é", "a\0", too_long.as_str()] {
        assert_eq!(
            b.put_part(bad, 1, b"v"),
            Err(BlobError::InvalidKey),
            "{bad:?}"
        );
        assert_eq!(b.get_part(bad, 1), Err(BlobError::InvalidKey), "{bad:?}");
        assert_eq!(b.delete_part(bad, 1), Err(BlobError::InvalidKey), "{bad:?}");
        assert_eq!(b.delete(bad), Err(BlobError::InvalidKey), "{bad:?}");
    }
    assert!(b.list().unwrap().is_empty());
}

#[test]
fn both_stores_take_exactly_the_documented_keys() {
    keys(&mut MemoryBlobStore::new());
    let dir = tempfile::tempdir().unwrap();
    keys(&mut FsBlobStore::open(dir.path()).unwrap());
}

/// A store used through a `Box` behaves as the store itself.
#[test]
fn a_boxed_store_forwards_every_call() {
    let inner = MemoryBlobStore::new();
    forwarded(&mut Box::new(inner.clone()), &inner);
}

fn forwarded<B: BlobStore>(b: &mut B, inner: &MemoryBlobStore) {
    b.put_part("up", 1, b"ab").unwrap();
    b.put_part("up", 2, b"cd").unwrap();
    b.put_part("other", 1, b"e").unwrap();
    assert_eq!(inner.part_count(), 3);
    assert_eq!(b.get_part("up", 2).unwrap(), b"cd");
    assert_eq!(b.assemble("up", 2).unwrap(), b"abcd");
    assert_eq!(b.list().unwrap(), vec!["other".to_owned(), "up".to_owned()]);
    b.delete_part("up", 1).unwrap();
    assert_eq!(inner.part_count(), 2);
    b.delete("up").unwrap();
    assert_eq!(b.list().unwrap(), vec!["other".to_owned()]);
    assert_eq!(
        b.get_part("up", 2),
        Err(BlobError::NotFound {
            upload: "up".into(),
            part: 2
        })
    );
}

/// The memory store counts parts and bytes, lists each upload once, fails exactly the
/// injected number of writes, and deletes one upload's parts only.
#[test]
fn the_memory_store_counts_lists_and_fails_as_told() {
    let mut m = MemoryBlobStore::new();
    assert_eq!((m.part_count(), m.total_bytes()), (0, 0));
    m.put_part("a", 1, b"123").unwrap();
    m.put_part("a", 2, b"45").unwrap();
    m.put_part("a", 3, b"").unwrap();
    m.put_part("ab", 1, b"6789").unwrap();
    assert_eq!((m.part_count(), m.total_bytes()), (4, 9));
    assert_eq!(m.list().unwrap(), vec!["a".to_owned(), "ab".to_owned()]);
    assert_eq!(m.assemble("a", 3).unwrap(), b"12345");
    assert_eq!(m.assemble("a", 0).unwrap(), b"");
    m.fail_writes(2);
    assert!(matches!(
        m.put_part("c", 1, b"x"),
        Err(BlobError::Backend(_))
    ));
    assert!(matches!(
        m.put_part("c", 1, b"x"),
        Err(BlobError::Backend(_))
    ));
    assert_eq!(m.put_part("c", 1, b"x"), Ok(()));
    assert_eq!(m.put_part("c", 2, b"y"), Ok(()));
    assert_eq!(m.part_count(), 6);
    m.delete("a").unwrap();
    assert_eq!(m.list().unwrap(), vec!["ab".to_owned(), "c".to_owned()]);
    assert_eq!((m.part_count(), m.total_bytes()), (3, 6));
    assert_eq!(format!("{m:?}"), "MemoryBlobStore { parts: 3, bytes: 6 }");
}

/// The filesystem store lists upload directories only, sorted, and tells a missing part
/// (`NotFound`, or nothing to delete) from a path it cannot use (`Backend`).
#[test]
fn the_fs_store_lists_upload_directories_and_reports_what_it_cannot_do() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let mut f = FsBlobStore::open(root).unwrap();
    f.put_part("zz", 1, b"z").unwrap();
    f.put_part("aa", 2, b"a").unwrap();
    std::fs::write(root.join("file"), b"not an upload").unwrap();
    std::fs::create_dir(root.join("not.an.upload")).unwrap();
    assert_eq!(f.list().unwrap(), vec!["aa".to_owned(), "zz".to_owned()]);

    assert_eq!(
        f.get_part("aa", 1),
        Err(BlobError::NotFound {
            upload: "aa".into(),
            part: 1
        })
    );
    assert_eq!(f.delete_part("aa", 1), Ok(()));
    assert_eq!(f.delete("missing"), Ok(()));
    // A part that is a directory cannot be read or removed as a file.
    std::fs::create_dir_all(root.join("aa").join("00003.part")).unwrap();
    assert!(matches!(f.get_part("aa", 3), Err(BlobError::Backend(_))));
    assert!(matches!(f.delete_part("aa", 3), Err(BlobError::Backend(_))));
    // An upload that is a file cannot be removed as a directory.
    assert!(matches!(f.delete("file"), Err(BlobError::Backend(_))));
    assert!(matches!(
        f.put_part("file", 1, b"x"),
        Err(BlobError::Backend(_))
    ));
    // A root that is a file cannot be opened or listed.
    assert!(matches!(
        FsBlobStore::open(root.join("file")),
        Err(BlobError::Backend(_))
    ));
    f.delete("zz").unwrap();
    assert_eq!(f.list().unwrap(), vec!["aa".to_owned()]);
    f.delete("aa").unwrap();
    assert!(f.list().unwrap().is_empty());
    drop(dir);
    assert!(matches!(f.list(), Err(BlobError::Backend(_))));
}
