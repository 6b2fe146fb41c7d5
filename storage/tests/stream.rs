use guideloom_formats::{Column, Columns, ColumnsFormat, Dtype, Primitive, TokenFormat};
use guideloom_storage::{Manifest, StreamReader, StreamWriter, Window};

use crate::common::{backends, edit_manifest, SegFormat};

fn three_shards(dir: &std::path::Path) {
    let mut w = StreamWriter::open(dir, SegFormat).unwrap();
    w.append(0, &[10, 11, 12]).unwrap();
    w.append(0, &[13, 14]).unwrap();
    w.append(1, &[]).unwrap();
    w.append(2, &[20, 21]).unwrap();
    w.append(2, &[22, 23, 24, 25]).unwrap();
    w.commit().unwrap();
}

#[test]
fn round_trip_three_shards_with_an_empty_one() {
    let dir = tempfile::tempdir().unwrap();
    three_shards(dir.path());
    let m = Manifest::load(dir.path()).unwrap();
    assert_eq!(
        m.shards().iter().map(|s| (s.id, s.elements, s.bytes)).collect::<Vec<_>>(),
        [(0, Some(5), 10), (1, Some(0), 0), (2, Some(6), 12)]
    );
    for (name, opts) in backends() {
        let r = StreamReader::open_with(dir.path(), SegFormat, opts).unwrap();
        assert_eq!(r.len(), 11, "{name}");
        let (all, lens, shards) = r.read(Window::new(0, 11)).unwrap();
        assert_eq!(all, [10, 11, 12, 13, 14, 20, 21, 22, 23, 24, 25], "{name}");
        assert_eq!((lens, shards), (vec![5, 6], vec![0, 2]), "{name}");
        // Starts in shard 0, spans the empty shard 1, ends in shard 2.
        let (ids, lens, shards) = r.read(Window::new(3, 4)).unwrap();
        assert_eq!((ids, lens, shards), (vec![13, 14, 20, 21], vec![2, 2], vec![0, 2]), "{name}");
        // Inside one shard; at the boundary; empty window.
        assert_eq!(r.read(Window::new(5, 1)).unwrap(), (vec![20], vec![1], vec![2]), "{name}");
        assert_eq!(r.read(Window::new(4, 1)).unwrap(), (vec![14], vec![1], vec![0]), "{name}");
        assert_eq!(r.read(Window::new(5, 0)).unwrap(), (vec![], vec![], vec![]), "{name}");
        assert_eq!(r.read(Window::new(11, 0)).unwrap(), (vec![], vec![], vec![]), "{name}");
        let many = r.read_many(&[Window::new(9, 2), Window::new(0, 1), Window::new(4, 3)]).unwrap();
        assert_eq!(
            many.into_iter().map(|m| m.0).collect::<Vec<_>>(),
            [vec![24, 25], vec![10], vec![14, 20, 21]]
        );
        let mut raw = vec![9u8; 3];
        r.read_many_raw(&[Window::new(4, 2), Window::new(10, 1)], &mut raw).unwrap();
        assert_eq!(raw, [14, 0, 20, 0, 25, 0], "{name}");
    }
}

#[test]
fn token_format_reader_matches_concatenation() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = StreamWriter::open(dir.path(), TokenFormat::<u32>::new()).unwrap();
    w.append(7, &[70_000, 1]).unwrap();
    w.append(3, &[5]).unwrap();
    w.set_metadata("source", serde_json::json!("unit test"));
    w.commit().unwrap();
    let r = StreamReader::open(dir.path(), TokenFormat::<u32>::new()).unwrap();
    // Shard 3 comes before shard 7 in the stream whatever the append order.
    assert_eq!(r.read(Window::new(0, 3)).unwrap(), vec![5, 70_000, 1]);
    assert_eq!(r.manifest().metadata()["source"], "unit test");
    assert_eq!(r.manifest().dtype_descr(), &serde_json::json!("<u4"));
}

#[test]
fn structured_columns_round_trip_and_numpy_layout() {
    let dir = tempfile::tempdir().unwrap();
    let dtype = Dtype::structured([("tokens", Primitive::U32), ("loss_mask", Primitive::U8)]).unwrap();
    let format = ColumnsFormat::new(dtype.clone()).unwrap();
    let mut w = StreamWriter::open(dir.path(), format.clone()).unwrap();
    let rec = |t: Vec<u32>, m: Vec<u8>| {
        Columns::new().with("tokens", Column::U32(t)).with("loss_mask", Column::U8(m))
    };
    w.append(0, &rec(vec![1, 258], vec![0, 1])).unwrap();
    w.append(1, &rec(vec![65_536], vec![1])).unwrap();
    w.commit().unwrap();
    // numpy: np.memmap(path, dtype=[("tokens", "<u4"), ("loss_mask", "|u1")]) reads these bytes.
    let bytes = std::fs::read(dir.path().join("shard-00000.stream")).unwrap();
    assert_eq!(bytes, [1, 0, 0, 0, 0, 2, 1, 0, 0, 1]);
    let m = Manifest::load(dir.path()).unwrap();
    assert_eq!(m.dtype_descr(), &serde_json::json!([["tokens", "<u4"], ["loss_mask", "|u1"]]));
    assert_eq!(m.dtype(), Some(&dtype));
    for (name, opts) in backends() {
        let r = StreamReader::open_with(dir.path(), format.clone(), opts).unwrap();
        assert_eq!(r.read(Window::new(1, 2)).unwrap(), rec(vec![258, 65_536], vec![1, 1]), "{name}");
    }
}

#[test]
fn crash_shape_uncommitted_bytes_are_invisible_and_a_second_session_appends() {
    let dir = tempfile::tempdir().unwrap();
    three_shards(dir.path());
    {
        let mut w = StreamWriter::open(dir.path(), SegFormat).unwrap();
        w.append(0, &[99; 600_000]).unwrap();
        w.append(2, &[98; 10]).unwrap();
        // 1.2 MB reached the file (past the 1 MiB buffer); drop without commit = a crash.
        assert_eq!(w.shard_len(0), 600_005);
    }
    // Simulate bytes left by an interrupted append that reached the file.
    let p0 = dir.path().join("shard-00000.stream");
    let mut f = std::fs::OpenOptions::new().append(true).open(&p0).unwrap();
    std::io::Write::write_all(&mut f, &[1, 2, 3, 4, 5]).unwrap();
    drop(f);
    assert!(std::fs::metadata(&p0).unwrap().len() > 10);
    let r = StreamReader::open(dir.path(), SegFormat).unwrap();
    assert_eq!(r.len(), 11);
    assert_eq!(r.read(Window::new(0, 11)).unwrap().0, [10, 11, 12, 13, 14, 20, 21, 22, 23, 24, 25]);
    guideloom_storage::verify(dir.path()).unwrap();
    // Second session: appends after the committed bytes (the stray bytes are discarded).
    let mut w = StreamWriter::open(dir.path(), SegFormat).unwrap();
    w.append(0, &[15]).unwrap();
    w.append(3, &[30]).unwrap();
    w.commit().unwrap();
    let r = StreamReader::open(dir.path(), SegFormat).unwrap();
    assert_eq!(
        r.read(Window::new(0, r.len())).unwrap().0,
        [10, 11, 12, 13, 14, 15, 20, 21, 22, 23, 24, 25, 30]
    );
    guideloom_storage::verify(dir.path()).unwrap();
    assert_eq!(std::fs::metadata(&p0).unwrap().len(), 12);
}

#[test]
fn offsets_past_4_gib_in_a_sparse_stream() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = StreamWriter::open(dir.path(), TokenFormat::<u16>::new()).unwrap();
    w.append(0, &[1]).unwrap();
    w.commit().unwrap();
    drop(w);
    // Grow shard 0 sparsely to 5 GiB + 2 elements and commit that length by hand.
    let p = dir.path().join("shard-00000.stream");
    let big = 5u64 << 30;
    let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &[7, 0, 8, 0], big).unwrap();
    drop(f);
    edit_manifest(dir.path(), |m| {
        m["shards"][0]["elements"] = (big / 2 + 2).into();
        m["shards"][0]["bytes"] = (big + 4).into();
    });
    let mut w = StreamWriter::open(dir.path(), TokenFormat::<u16>::new()).unwrap();
    w.append(0, &[9]).unwrap();
    w.commit().unwrap();
    let r = StreamReader::open(dir.path(), TokenFormat::<u16>::new()).unwrap();
    assert_eq!(r.len(), big / 2 + 3);
    assert_eq!(r.read(Window::new(big / 2 - 1, 4)).unwrap(), vec![0, 7, 8, 9]);
    assert_eq!(r.read(Window::new(0, 2)).unwrap(), vec![1, 0]);
}

/// Open descriptors of this process that point into `dir`.
fn fds_into(dir: &std::path::Path) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|p| p.starts_with(dir))
        .count()
}

#[test]
fn writer_keeps_at_most_32_shard_files_open_and_reopens_parked_ones() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = StreamWriter::open(dir.path(), TokenFormat::<u16>::new()).unwrap();
    let mut peak = 0;
    // Two rounds over 300 shards: every shard is parked, then reopened and appended to.
    for round in 0..2u32 {
        for s in 0..300u64 {
            w.append(s, &[s as u32, round]).unwrap();
            peak = peak.max(fds_into(dir.path()));
        }
    }
    w.append(7, &vec![9; 700_000]).unwrap(); // a parked shard that flushes on append
    w.commit().unwrap();
    assert!(peak <= 32 + 1, "{peak} descriptors into the storage (32 shards + the lock file)");
    drop(w);
    let r = StreamReader::open(dir.path(), TokenFormat::<u16>::new()).unwrap();
    assert_eq!(r.len(), 300 * 4 + 700_000);
    assert_eq!(r.read(Window::new(0, 4)).unwrap(), vec![0, 0, 0, 1]);
    assert_eq!(r.read(Window::new(4 * 299 + 700_000, 4)).unwrap(), vec![299, 0, 299, 1]);
    assert_eq!(r.read(Window::new(4 * 7, 6)).unwrap(), vec![7, 0, 7, 1, 9, 9]);
    guideloom_storage::verify(dir.path()).unwrap();
}

/// Issue 21, item 2: the manifest fingerprint follows the committed data: a storage of the
/// same length with one token changed, or a manifest whose checksum or element count alone
/// differs, has another fingerprint; a metadata-only commit keeps it. The value for the
/// first storage is pinned (states record it; see the loader's `STATE_VERSION` rule).
#[test]
fn fingerprint_follows_the_data_not_the_metadata() {
    use std::path::Path;
    let write = |dir: &Path, tokens: &[u32]| {
        let mut w = StreamWriter::open(dir, TokenFormat::<u16>::new()).unwrap();
        w.append(0, &tokens[..10]).unwrap();
        w.append(1, &tokens[10..]).unwrap();
        w.commit().unwrap();
    };
    let fp = |dir: &Path| StreamReader::open(dir, TokenFormat::<u16>::new()).unwrap().fingerprint();
    let tokens: Vec<u32> = (0..25).collect();
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    write(a.path(), &tokens);
    let mut other = tokens.clone();
    other[12] = 99;
    write(b.path(), &other);
    let fa = fp(a.path());
    assert_eq!(fa, FINGERPRINT_0_TO_25);
    assert_ne!(fp(b.path()), fa, "one token differs");
    assert_eq!(Manifest::load(a.path()).unwrap().fingerprint(), fa);
    // Metadata only.
    let mut w = StreamWriter::open(a.path(), TokenFormat::<u16>::new()).unwrap();
    w.set_metadata("note", serde_json::json!("metadata only"));
    w.commit().unwrap();
    drop(w);
    assert_eq!(fp(a.path()), fa);
    // The manifest alone: a shard's checksum, a shard's element count.
    for (field, value) in [("checksum", serde_json::json!(12345)), ("elements", serde_json::json!(9))] {
        let c = tempfile::tempdir().unwrap();
        for e in std::fs::read_dir(a.path()).unwrap() {
            let p = e.unwrap().path();
            std::fs::copy(&p, c.path().join(p.file_name().unwrap())).unwrap();
        }
        edit_manifest(c.path(), |m| m["shards"][0][field] = value.clone());
        assert_ne!(Manifest::load(c.path()).unwrap().fingerprint(), fa, "{field}");
    }
}

/// The fingerprint of tokens 0..25 (u16) in shards of 10 and 15, recorded by this build.
const FINGERPRINT_0_TO_25: u64 = 16_205_031_855_146_550_322;
