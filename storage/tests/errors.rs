//! Each damaged or misused storage gives its specific error variant, never a panic.

use guideloom_formats::{FormatError, RawBytesFormat, TokenFormat};
use guideloom_storage::{DocumentReader, DocumentWriter, StorageError, StreamReader, StreamWriter, Window};

fn tokens(dir: &std::path::Path) {
    let mut w = StreamWriter::open(dir, TokenFormat::<u16>::new()).unwrap();
    w.append(0, &[1, 2, 3]).unwrap();
    w.append(1, &[4, 5]).unwrap();
    w.commit().unwrap();
}

fn docs(dir: &std::path::Path) {
    let mut w = DocumentWriter::open(dir, RawBytesFormat).unwrap();
    for d in [&b"ab"[..], b"cde", b"", b"fghi"] {
        w.append(0, d).unwrap();
    }
    w.commit().unwrap();
}

#[test]
fn dtype_mismatch_on_reopen_shows_both() {
    let dir = tempfile::tempdir().unwrap();
    tokens(dir.path());
    let e = StreamReader::open(dir.path(), TokenFormat::<u32>::new()).unwrap_err();
    assert!(
        matches!(&e, StorageError::DtypeMismatch { expected, found, .. } if expected == "<u4" && found == "<u2")
    );
    assert_eq!(
        e.to_string(),
        format!(
            "dtype mismatch for {}: the format has dtype <u4, the storage holds <u2",
            dir.path().join("manifest.json").display()
        )
    );
    let e = StreamWriter::open(dir.path(), TokenFormat::<u32>::new()).unwrap_err();
    assert!(matches!(e, StorageError::DtypeMismatch { .. }));
    let e = DocumentReader::open(dir.path(), RawBytesFormat).unwrap_err();
    assert!(matches!(e, StorageError::KindMismatch { .. }), "{e}");
}

#[test]
fn missing_shard_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    tokens(dir.path());
    let p = dir.path().join("shard-00001.stream");
    std::fs::remove_file(&p).unwrap();
    match StreamReader::open(dir.path(), TokenFormat::<u16>::new()).unwrap_err() {
        StorageError::MissingShard { shard, path } => assert_eq!((shard, path), (1, p)),
        e => panic!("unexpected {e}"),
    }
}

#[test]
fn shard_shorter_than_committed_names_file_and_sizes() {
    let dir = tempfile::tempdir().unwrap();
    tokens(dir.path());
    let p = dir.path().join("shard-00000.stream");
    std::fs::OpenOptions::new().write(true).open(&p).unwrap().set_len(5).unwrap();
    let e = StreamReader::open(dir.path(), TokenFormat::<u16>::new()).unwrap_err();
    assert!(matches!(&e, StorageError::ShardTooShort { shard: 0, expected: 6, actual: 5, .. }), "{e}");
    assert_eq!(
        e.to_string(),
        format!("shard 0: file {} is shorter than committed: 5 bytes, expected at least 6", p.display())
    );
    // A writer refuses to continue it too.
    assert!(matches!(
        StreamWriter::open(dir.path(), TokenFormat::<u16>::new()).unwrap().append(0, &[1]),
        Err(StorageError::ShardTooShort { .. })
    ));
}

#[test]
fn file_truncated_after_open_is_a_short_read() {
    let dir = tempfile::tempdir().unwrap();
    tokens(dir.path());
    let r = StreamReader::open(dir.path(), TokenFormat::<u16>::new()).unwrap();
    let p = dir.path().join("shard-00001.stream");
    std::fs::OpenOptions::new().write(true).open(&p).unwrap().set_len(1).unwrap();
    let e = r.read(Window::new(3, 2)).unwrap_err();
    assert!(matches!(&e, StorageError::ShortRead { expected: 4, got: 1, path, .. } if *path == p), "{e}");
}

#[test]
fn non_monotone_index_is_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    docs(dir.path());
    let p = dir.path().join("shard-00000.index");
    let mut idx = std::fs::read(&p).unwrap();
    assert_eq!(idx.len(), 40);
    idx[16..24].copy_from_slice(&1u64.to_le_bytes()); // offsets 0, 2, 1, 5, 9
    std::fs::write(&p, &idx).unwrap();
    let e = DocumentReader::open(dir.path(), RawBytesFormat).unwrap_err();
    assert!(matches!(&e, StorageError::CorruptIndex { shard: 0, entry: 2, .. }), "{e}");
    // Past the end of the payload file.
    idx[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
    std::fs::write(&p, &idx).unwrap();
    let e = DocumentReader::open(dir.path(), RawBytesFormat).unwrap_err();
    assert!(matches!(&e, StorageError::CorruptIndex { entry: 2, .. }), "{e}");
    // First entry not 0.
    idx[0..8].copy_from_slice(&1u64.to_le_bytes());
    std::fs::write(&p, &idx).unwrap();
    let e = DocumentReader::open(dir.path(), RawBytesFormat).unwrap_err();
    assert!(matches!(&e, StorageError::CorruptIndex { entry: 0, .. }), "{e}");
}

#[test]
fn manifest_not_json_or_unknown_version() {
    let dir = tempfile::tempdir().unwrap();
    tokens(dir.path());
    let p = dir.path().join("manifest.json");
    let good = std::fs::read_to_string(&p).unwrap();
    std::fs::write(&p, "{ not json").unwrap();
    assert!(matches!(
        StreamReader::open(dir.path(), TokenFormat::<u16>::new()),
        Err(StorageError::InvalidManifest { .. })
    ));
    std::fs::write(&p, good.replace("\"format_version\": 1", "\"format_version\": 99")).unwrap();
    assert!(matches!(
        StreamReader::open(dir.path(), TokenFormat::<u16>::new()),
        Err(StorageError::UnsupportedVersion { found: 99, supported: 2, .. })
    ));
    std::fs::write(&p, good.replace("\"elements\": 3", "\"elements\": -3")).unwrap();
    assert!(matches!(
        StreamReader::open(dir.path(), TokenFormat::<u16>::new()),
        Err(StorageError::InvalidManifest { .. })
    ));
    std::fs::write(&p, good.replace("\"elements\": 3", "\"elements\": 18446744073709551615")).unwrap();
    assert!(matches!(
        StreamReader::open(dir.path(), TokenFormat::<u16>::new()),
        Err(StorageError::InvalidManifest { .. })
    ));
    std::fs::remove_file(&p).unwrap();
    assert!(matches!(
        StreamReader::open(dir.path(), TokenFormat::<u16>::new()),
        Err(StorageError::NotAStorage { .. })
    ));
}

#[test]
fn token_too_large_for_u16_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = StreamWriter::open(dir.path(), TokenFormat::<u16>::new()).unwrap();
    w.append(0, &[1]).unwrap();
    let e = w.append(0, &[2, 70_000]).unwrap_err();
    match &e {
        StorageError::Format { shard: 0, source: FormatError::TokenOutOfRange { id, position, .. } } => {
            assert_eq!((*id, *position), (70_000, 1))
        }
        e => panic!("unexpected {e}"),
    }
    // The message names the shard; the format's error, with the token, is its source.
    assert_eq!(e.to_string(), "format error in shard 0");
    assert!(crate::common::report(&e).contains("70000"), "{}", crate::common::report(&e));
    w.commit().unwrap();
    let r = StreamReader::open(dir.path(), TokenFormat::<u16>::new()).unwrap();
    assert_eq!(r.read(Window::new(0, r.len())).unwrap(), vec![1]);
}

#[test]
fn reads_past_the_end_are_out_of_range() {
    let dir = tempfile::tempdir().unwrap();
    tokens(dir.path());
    let r = StreamReader::open(dir.path(), TokenFormat::<u16>::new()).unwrap();
    assert!(matches!(
        r.read(Window::new(4, 2)),
        Err(StorageError::OutOfRange { what: "window", start: 4, len: 2, total: 5 })
    ));
    assert!(matches!(r.read(Window::new(u64::MAX, 2)), Err(StorageError::OutOfRange { .. })));
    assert!(matches!(
        r.read_many(&[Window::new(0, 1), Window::new(5, 1)]),
        Err(StorageError::OutOfRange { .. })
    ));
    let d = tempfile::tempdir().unwrap();
    docs(d.path());
    let r = DocumentReader::open(d.path(), RawBytesFormat).unwrap();
    assert!(matches!(r.get(4), Err(StorageError::OutOfRange { what: "document", start: 4, total: 4, .. })));
}

#[test]
fn verify_names_the_corrupted_shard() {
    let dir = tempfile::tempdir().unwrap();
    tokens(dir.path());
    assert_eq!(guideloom_storage::verify(dir.path()).unwrap().shards, 2);
    let p = dir.path().join("shard-00001.stream");
    let mut b = std::fs::read(&p).unwrap();
    b[0] ^= 0x40;
    std::fs::write(&p, &b).unwrap();
    let e = guideloom_storage::verify(dir.path()).unwrap_err();
    assert!(matches!(&e, StorageError::ChecksumMismatch { shard: 1, path, .. } if *path == p), "{e}");
}

#[test]
fn a_second_writer_is_refused_while_the_first_is_open() {
    let dir = tempfile::tempdir().unwrap();
    let mut first = StreamWriter::open(dir.path(), TokenFormat::<u16>::new()).unwrap();
    first.append(0, &[1]).unwrap();
    match StreamWriter::open(dir.path(), TokenFormat::<u16>::new()) {
        Err(StorageError::Locked { dir: d }) => assert_eq!(d, dir.path()),
        other => panic!("expected Locked, got {other:?}"),
    }
    assert!(matches!(DocumentWriter::open(dir.path(), RawBytesFormat), Err(StorageError::Locked { .. })));
    // Readers take no lock.
    first.commit().unwrap();
    assert_eq!(StreamReader::open(dir.path(), TokenFormat::<u16>::new()).unwrap().len(), 1);
    drop(first);
    let mut second = StreamWriter::open(dir.path(), TokenFormat::<u16>::new()).unwrap();
    second.append(0, &[2]).unwrap();
    second.commit().unwrap();
    assert_eq!(
        StreamReader::open(dir.path(), TokenFormat::<u16>::new()).unwrap().read(Window::new(0, 2)).unwrap(),
        vec![1, 2]
    );
}
