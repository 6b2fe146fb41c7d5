use guideloom_formats::{RawBytesFormat, SerdeFormat};
use guideloom_storage::{DocumentReader, DocumentWriter};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::common::{backends, edit_manifest};

fn doc(i: u64, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i as usize * 31 + j * 7) as u8).collect()
}

#[test]
fn ten_thousand_documents_over_four_shards() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let sizes: Vec<usize> =
        (0..10_000).map(|i| if i % 97 == 0 { 0 } else { rng.random_range(0..=5_000) }).collect();
    // Documents go to shards in blocks, so the global index is shard-major.
    let mut w = DocumentWriter::open(dir.path(), RawBytesFormat).unwrap();
    for (i, &n) in sizes.iter().enumerate() {
        w.append((i / 2_500) as u64, &doc(i as u64, n)).unwrap();
    }
    w.commit().unwrap();
    for (name, opts) in backends() {
        let r = DocumentReader::open_with(dir.path(), RawBytesFormat, opts).unwrap();
        assert_eq!(r.len(), 10_000, "{name}");
        for _ in 0..2_000 {
            let i = rng.random_range(0..10_000u64);
            assert_eq!(r.get(i).unwrap(), doc(i, sizes[i as usize]), "{name} doc {i}");
        }
        let picks: Vec<u64> = (0..64).map(|_| rng.random_range(0..10_000)).collect();
        let got = r.get_many(&picks).unwrap();
        assert_eq!(got.len(), 64, "{name}");
        for (i, g) in picks.iter().zip(got) {
            assert_eq!(g, doc(*i, sizes[*i as usize]), "{name}");
        }
        assert_eq!(r.get(0).unwrap(), Vec::<u8>::new(), "empty document");
        assert_eq!(r.locate(2_500).unwrap(), (1, 0));
        assert_eq!(r.locate(9_999).unwrap(), (3, 2_499));
    }
    guideloom_storage::verify(dir.path()).unwrap();
}

#[test]
fn serde_documents_and_reopen_append() {
    let dir = tempfile::tempdir().unwrap();
    type Doc = (String, Vec<u32>);
    let f = SerdeFormat::<Doc>::new();
    let mut w = DocumentWriter::open(dir.path(), f).unwrap();
    w.append(0, &("a".into(), vec![1, 2])).unwrap();
    w.commit().unwrap();
    drop(w);
    let mut w = DocumentWriter::open(dir.path(), f).unwrap();
    w.append(0, &("b".into(), vec![])).unwrap();
    w.append(5, &("c".into(), vec![u32::MAX])).unwrap();
    w.commit().unwrap();
    let r = DocumentReader::open(dir.path(), f).unwrap();
    assert_eq!(
        r.get_many(&[2, 0, 1]).unwrap(),
        vec![("c".to_string(), vec![u32::MAX]), ("a".to_string(), vec![1, 2]), ("b".to_string(), vec![])]
    );
    assert_eq!(r.manifest().format().name, "serde-postcard");
}

#[test]
fn document_past_4_gib_in_a_sparse_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = DocumentWriter::open(dir.path(), RawBytesFormat).unwrap();
    w.append(0, b"head").unwrap();
    w.commit().unwrap();
    drop(w);
    // Make document 0 a sparse 4.5 GiB payload followed by "far", committed by hand.
    let big = (9u64 << 30) / 2;
    let data = dir.path().join("shard-00000.docs");
    let f = std::fs::OpenOptions::new().write(true).open(&data).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, b"far", big).unwrap();
    let idx: Vec<u8> = [0u64, big, big + 3].iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(dir.path().join("shard-00000.index"), &idx).unwrap();
    edit_manifest(dir.path(), |m| {
        m["shards"][0]["documents"] = 2.into();
        m["shards"][0]["bytes"] = (big + 3).into();
        m["shards"][0]["files"]["index"]["bytes"] = 24.into();
    });
    // A writer continues past 4 GiB.
    let mut w = DocumentWriter::open(dir.path(), RawBytesFormat).unwrap();
    w.append(0, b"farther").unwrap();
    w.commit().unwrap();
    for (name, opts) in backends() {
        let r = DocumentReader::open_with(dir.path(), RawBytesFormat, opts).unwrap();
        assert_eq!(r.len(), 3, "{name}");
        assert_eq!(r.get(1).unwrap(), b"far", "{name}");
        assert_eq!(r.get(2).unwrap(), b"farther", "{name}");
    }
}
