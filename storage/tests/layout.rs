//! Streams in files of another layout (issue 26): `StreamReader::from_layout` reads the runs a
//! `StreamLayout` names, across segments and files, under every backend, with the manifest the
//! layout describes; a layout that does not fit its files is refused, never read.

use std::sync::Arc;

use guideloom_formats::{Dtype, FormatError, Primitive, RawWindow, StreamFormat, TokenFormat};
use guideloom_storage::{
    FormatSpec, LayoutFile, LocalDir, ReadOptions, Segment, StorageDir, StorageError, StreamLayout,
    StreamReader, Window,
};

use crate::common::backends;

/// Elements of the struct dtype `[('a', '<u2'), ('b', '<u2')]`, as raw bytes.
#[derive(Debug, Clone, Copy)]
struct Pairs;

impl StreamFormat for Pairs {
    type Input = [u8];
    type Output = Vec<u8>;
    fn name(&self) -> &str {
        "pairs-test"
    }
    fn dtype(&self) -> Dtype {
        Dtype::from_descr(&serde_json::json!([["a", "<u2"], ["b", "<u2"]])).unwrap()
    }
    fn pack(&self, record: &[u8], out: &mut Vec<u8>) -> Result<u64, FormatError> {
        out.extend_from_slice(record);
        Ok(record.len() as u64 / 4)
    }
    fn unpack(&self, w: &RawWindow<'_>) -> Result<Vec<u8>, FormatError> {
        Ok(w.bytes().to_vec())
    }
}

/// Two files: `a.bin` is a 4-byte header, then u16 tokens 1..=3, then 2 padding bytes, then
/// tokens 4, 5; `b.bin` is tokens 6..=8; every token big-endian when `big`.
fn files(dir: &std::path::Path, big: bool) {
    let enc = |v: &[u16]| -> Vec<u8> {
        v.iter().flat_map(|t| if big { t.to_be_bytes() } else { t.to_le_bytes() }).collect()
    };
    let mut a = vec![0xee; 4];
    a.extend(enc(&[1, 2, 3]));
    a.extend([0xee, 0xee]);
    a.extend(enc(&[4, 5]));
    std::fs::write(dir.join("a.bin"), a).unwrap();
    std::fs::write(dir.join("b.bin"), enc(&[6, 7, 8])).unwrap();
}

fn layout(big: bool) -> StreamLayout {
    StreamLayout {
        files: vec![
            LayoutFile { path: "a.bin".into(), bytes: 16 },
            LayoutFile { path: "b.bin".into(), bytes: 6 },
            LayoutFile { path: "empty.idx".into(), bytes: 0 },
        ],
        segments: vec![
            Segment { file: 0, offset: 4, elements: 3 },
            Segment { file: 0, offset: 12, elements: 2 },
            Segment { file: 1, offset: 0, elements: 3 },
        ],
        dtype: Dtype::Primitive(Primitive::U16),
        big_endian: big,
        spec: FormatSpec { name: "test-layout".into(), params: serde_json::json!({"v": 1}) },
        metadata: serde_json::Map::from_iter([("where".to_string(), serde_json::json!("here"))]),
    }
}

fn dir(path: &std::path::Path) -> Arc<dyn StorageDir> {
    Arc::new(LocalDir::new(path))
}

#[test]
fn issue26_a_layout_reads_its_runs_across_segments_and_files_under_every_backend() {
    for big in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        files(tmp.path(), big);
        for (name, options) in backends() {
            let r =
                StreamReader::from_layout(dir(tmp.path()), layout(big), TokenFormat::<u16>::new(), options)
                    .unwrap();
            assert_eq!(r.len(), 8, "{name}");
            let got = r.read_many(&[Window::new(0, 8), Window::new(2, 2), Window::new(4, 3)]).unwrap();
            assert_eq!(
                got,
                [vec![1, 2, 3, 4, 5, 6, 7, 8], vec![3, 4], vec![5, 6, 7]],
                "{name}, big-endian {big}"
            );
            let mut raw = Vec::new();
            r.read_many_raw(&[Window::new(4, 2)], &mut raw).unwrap();
            assert_eq!(raw, [5, 0, 6, 0], "{name}: raw bytes are little-endian");
        }
        // The manifest the layout describes: one shard per file (its elements and bytes), the
        // spec, the metadata; the fingerprint is the manifest's.
        let r = StreamReader::from_layout(
            dir(tmp.path()),
            layout(big),
            TokenFormat::<u16>::new(),
            ReadOptions::default(),
        )
        .unwrap();
        let m = r.manifest();
        assert_eq!(m.format().name, "test-layout");
        let shards: Vec<(u64, Option<u64>, u64, u32)> =
            m.shards().iter().map(|s| (s.id, s.elements, s.bytes, s.checksum)).collect();
        assert_eq!(shards, [(0, Some(5), 16, 0), (1, Some(3), 6, 0), (2, Some(0), 0, 0)]);
        assert_eq!(m.metadata()["where"], "here");
        assert_eq!(r.fingerprint(), m.fingerprint());
    }
}

#[test]
fn issue26_a_layout_that_does_not_fit_its_files_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    files(tmp.path(), false);
    let open = |edit: &dyn Fn(&mut StreamLayout)| {
        let mut l = layout(false);
        edit(&mut l);
        StreamReader::from_layout(dir(tmp.path()), l, TokenFormat::<u16>::new(), ReadOptions::default())
            .unwrap_err()
    };
    let reason = |e: StorageError| match e {
        StorageError::InvalidLayout { dir, reason } => {
            assert_eq!(dir, tmp.path());
            reason
        }
        other => panic!("expected InvalidLayout, got {other:?}"),
    };
    assert_eq!(reason(open(&|l| l.segments[2].file = 3)), "segment 2 names file 3 of 3");
    assert_eq!(
        reason(open(&|l| l.segments[1].elements = 3)),
        "segment 1: 3 elements of 2 bytes from byte 12 pass the 16 bytes of a.bin"
    );
    assert_eq!(
        reason(open(&|l| l.segments[0].elements = u64::MAX / 2 + 1)),
        format!("segment 0: {} elements of 2 bytes from byte 4 pass the 16 bytes of a.bin", u64::MAX / 2 + 1)
    );
    assert_eq!(
        reason(open(&|l| {
            l.files[2].bytes = u64::MAX;
            l.segments = vec![Segment { file: 2, offset: 0, elements: u64::MAX / 4 }; 5];
        })),
        "the element count overflows u64"
    );
    for path in ["/etc/passwd", "../a.bin", "sub/../../a.bin", ""] {
        assert_eq!(
            reason(open(&|l| l.files[1].path = path.into())),
            format!("file {path:?} is not a relative path below the directory")
        );
    }
    // Big-endian elements of a struct dtype: no element order to swap.
    let pairs = StreamLayout { dtype: Pairs.dtype(), big_endian: true, ..layout(false) };
    let e = StreamReader::from_layout(dir(tmp.path()), pairs, Pairs, ReadOptions::default()).unwrap_err();
    assert_eq!(reason(e), r#"big-endian elements of the non-primitive dtype [["a","<u2"],["b","<u2"]]"#);
    let e = StreamReader::from_layout(
        dir(tmp.path()),
        StreamLayout { dtype: Dtype::Primitive(Primitive::U32), ..layout(false) },
        TokenFormat::<u16>::new(),
        ReadOptions::default(),
    )
    .unwrap_err();
    assert!(
        matches!(&e, StorageError::DtypeMismatch { expected, found, .. } if expected == "<u2" && found == "<u4"),
        "{e:?}"
    );
}
