//! The sans-IO read split (plan, then bytes from anywhere, then decode) for every storage
//! kind, and storages served from memory through the `StorageDir` seam.

use std::path::Path;
use std::sync::Arc;

use guideloom_formats::{DocumentTokensFormat, RawBytesFormat, TokenDocument};
use guideloom_storage::{
    verify_in, DocumentReader, DocumentWriter, Manifest, MemDir, ReadOptions, ReadPlan, ReadRequest,
    StorageDir, StorageError, StreamReader, StreamWithMetaReader, StreamWithMetaWriter, StreamWriter, Window,
};

use crate::common::{backends, SegFormat};

/// The bytes of `plan`'s requests, cut by hand out of the files of `mem` (file `i` of the
/// reader's file set is the file of that name in memory).
fn bytes_from_memory(mem: &MemDir, files: &guideloom_storage::FileSet, plan: &ReadPlan) -> Vec<u8> {
    let mut out = Vec::with_capacity(plan.bytes() as usize);
    for r in plan.requests() {
        let name = files.file(r.file).path.file_name().unwrap().to_str().unwrap();
        let file = mem.get(name).unwrap();
        out.extend_from_slice(&file[r.offset as usize..(r.offset + r.len) as usize]);
    }
    assert_eq!(out.len() as u64, plan.bytes());
    out
}

/// A u16 stream over shards of 3, 0, 2 and 6 elements: 10..=12, -, 20..=21, 30..=35.
fn stream_storage(dir: &Path) {
    let mut w = StreamWriter::open(dir, SegFormat).unwrap();
    w.append(0, &[10, 11, 12]).unwrap();
    w.append(1, &[]).unwrap();
    w.append(2, &[20, 21]).unwrap();
    w.append(3, &[30, 31, 32, 33, 34, 35]).unwrap();
    w.commit().unwrap();
}

fn stream_windows() -> Vec<Window> {
    let mut v = vec![Window::new(2, 4), Window::new(0, 11), Window::new(11, 0), Window::new(4, 1)];
    v.extend((0..=11u64).flat_map(|o| (0..=11 - o).map(move |l| Window::new(o, l))));
    v
}

#[test]
fn stream_plan_lists_the_byte_ranges_decode_needs() {
    let dir = tempfile::tempdir().unwrap();
    stream_storage(dir.path());
    let r = StreamReader::open(dir.path(), SegFormat).unwrap();
    let plan = r.plan(&[Window::new(2, 4), Window::new(9, 2)]).unwrap();
    // Window (2, 4): element 2 of shard 0, skip the empty shard 1, both elements of shard 2,
    // the first of shard 3. Window (9, 2): elements 4 and 5 of shard 3.
    assert_eq!(
        plan.requests(),
        [
            ReadRequest { file: 0, offset: 4, len: 2 },
            ReadRequest { file: 2, offset: 0, len: 4 },
            ReadRequest { file: 3, offset: 0, len: 2 },
            ReadRequest { file: 3, offset: 8, len: 4 },
        ]
    );
    assert_eq!((plan.bytes(), plan.len(), plan.storage()), (12, 2, r.fingerprint()));
    let bytes = r.fetch(&plan).unwrap();
    assert_eq!(bytes, [12, 0, 20, 0, 21, 0, 30, 0, 34, 0, 35, 0]);
    assert_eq!(
        r.decode(&plan, &bytes).unwrap(),
        [(vec![12, 20, 21, 30], vec![1, 2, 1], vec![0, 2, 3]), (vec![34, 35], vec![2], vec![3])]
    );
    let e = r.plan(&[Window::new(0, 1), Window::new(10, 2)]).unwrap_err();
    assert!(matches!(e, StorageError::OutOfRange { what: "window", start: 10, len: 2, total: 11 }), "{e}");
}

#[test]
fn stream_plan_with_bytes_from_memory_decodes_as_read_many_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    stream_storage(dir.path());
    let mem = Arc::new(MemDir::copy_of(dir.path()).unwrap());
    let windows = stream_windows();
    for (name, opts) in backends() {
        let r = StreamReader::open_with(dir.path(), SegFormat, opts).unwrap();
        let plan = r.plan(&windows).unwrap();
        let bytes = bytes_from_memory(&mem, r.files(), &plan);
        assert_eq!(r.decode(&plan, &bytes).unwrap(), r.read_many(&windows).unwrap(), "{name}");
    }
    // A reader served by memory alone: the same windows and the same raw bytes.
    let disk = StreamReader::open(dir.path(), SegFormat).unwrap();
    let r = StreamReader::open_in(mem, SegFormat, ReadOptions::default()).unwrap();
    assert_eq!((r.len(), r.fingerprint()), (disk.len(), disk.fingerprint()));
    assert_eq!(r.read_many(&windows).unwrap(), disk.read_many(&windows).unwrap());
    let (mut a, mut b) = (Vec::new(), Vec::new());
    r.read_many_raw(&windows, &mut a).unwrap();
    disk.read_many_raw(&windows, &mut b).unwrap();
    assert_eq!(a, b);
    assert_eq!(a.len(), windows.iter().map(|w| 2 * w.len as usize).sum::<usize>());
}

#[test]
fn document_plan_with_bytes_from_memory_decodes_as_read_many_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = DocumentWriter::open(dir.path(), RawBytesFormat).unwrap();
    let docs: Vec<(u64, Vec<u8>)> = vec![
        (0, b"alpha".to_vec()),
        (0, vec![]),
        (2, b"gamma".to_vec()),
        (5, vec![7; 300]),
        (5, b"z".to_vec()),
    ];
    for (shard, d) in &docs {
        w.append(*shard, d).unwrap();
    }
    w.commit().unwrap();
    let mem = Arc::new(MemDir::copy_of(dir.path()).unwrap());
    let indices = [4u64, 0, 1, 3, 3, 2];
    for (name, opts) in backends() {
        let r = DocumentReader::open_with(dir.path(), RawBytesFormat, opts).unwrap();
        let plan = r.plan(&indices).unwrap();
        // One request per document, in request order: document 3 is 300 bytes at byte 0 of
        // shard 5's payload file (file 2).
        assert_eq!(plan.requests()[3], ReadRequest { file: 2, offset: 0, len: 300 }, "{name}");
        assert_eq!(plan.bytes(), 1 + 5 + 300 + 300 + 5, "{name}");
        let bytes = bytes_from_memory(&mem, r.files(), &plan);
        let decoded = r.decode(&plan, &bytes).unwrap();
        assert_eq!(decoded, r.read_many(&indices).unwrap(), "{name}");
        let want: Vec<Vec<u8>> = indices.iter().map(|&i| docs[i as usize].1.clone()).collect();
        assert_eq!(decoded, want, "{name}");
    }
    let r = DocumentReader::open_in(mem, RawBytesFormat, ReadOptions::default()).unwrap();
    assert_eq!(
        r.get_many(&indices).unwrap(),
        indices.iter().map(|&i| docs[i as usize].1.clone()).collect::<Vec<_>>()
    );
    assert_eq!(r.locate(3).unwrap(), (5, 0));
}

#[test]
fn stream_with_meta_plan_with_bytes_from_memory_decodes_as_read_many_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let doc = |ordinal, tokens: &[u32], data: &[u8]| TokenDocument {
        ordinal,
        tokens: tokens.to_vec(),
        data: data.to_vec(),
    };
    let format = DocumentTokensFormat::<u16>::new();
    let mut w = StreamWithMetaWriter::open(dir.path(), format).unwrap();
    w.append(0, &[doc(0, &[1, 2, 3], b"d0"), doc(1, &[4], b"")]).unwrap();
    w.append(1, &[]).unwrap();
    w.append(4, &[doc(2, &[5, 6], b"d2"), doc(3, &[7, 8, 9], b"d3!")]).unwrap();
    w.commit().unwrap();
    let mem = Arc::new(MemDir::copy_of(dir.path()).unwrap());
    let windows: Vec<Window> = (0..=9u64).flat_map(|o| (0..=9 - o).map(move |l| Window::new(o, l))).collect();
    for (name, opts) in backends() {
        let r = StreamWithMetaReader::open_with(dir.path(), format, opts).unwrap();
        let plan = r.plan(&windows).unwrap();
        let bytes = bytes_from_memory(&mem, r.files(), &plan);
        assert_eq!(r.decode(&plan, &bytes).unwrap(), r.read_many(&windows).unwrap(), "{name}");
        // The element requests of the stream plan come first (from the `.stream` files, even
        // indices), then one payload request per run a window touches (`.meta`, odd); a
        // payload is the document's u64 ordinal and its data.
        let one = r.plan(&[Window::new(2, 3)]).unwrap();
        assert_eq!(
            one.requests(),
            [
                ReadRequest { file: 0, offset: 4, len: 4 },
                ReadRequest { file: 4, offset: 0, len: 2 },
                ReadRequest { file: 1, offset: 0, len: 8 + 2 },
                ReadRequest { file: 1, offset: 10, len: 8 },
                ReadRequest { file: 5, offset: 0, len: 8 + 2 },
            ],
            "{name}"
        );
        assert_eq!(one.bytes(), 6 + 28, "{name}");
    }
    let disk = StreamWithMetaReader::open(dir.path(), format).unwrap();
    let r = StreamWithMetaReader::open_in(mem, format, ReadOptions::default()).unwrap();
    assert_eq!(r.run_count(), 4);
    assert_eq!(r.read_many(&windows).unwrap(), disk.read_many(&windows).unwrap());
    let out = r.read(Window::new(2, 3)).unwrap();
    assert_eq!((out.tokens, out.document, out.position), (vec![3, 4, 5], vec![0, 1, 2], vec![2, 0, 0]));
}

#[test]
fn plans_belong_to_their_storage_and_buffers_must_fit() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    stream_storage(a.path());
    let mut w = StreamWriter::open(b.path(), SegFormat).unwrap();
    w.append(0, &[1, 2, 3]).unwrap();
    w.commit().unwrap();
    let (ra, rb) =
        (StreamReader::open(a.path(), SegFormat).unwrap(), StreamReader::open(b.path(), SegFormat).unwrap());
    let plan = ra.plan(&[Window::new(0, 3)]).unwrap();
    let bytes = ra.fetch(&plan).unwrap();
    let e = rb.decode(&plan, &bytes).unwrap_err();
    assert!(
        matches!(e, StorageError::PlanMismatch { expected, found } if expected == rb.fingerprint() && found == ra.fingerprint()),
        "{e}"
    );
    assert!(matches!(rb.fetch(&plan).unwrap_err(), StorageError::PlanMismatch { .. }));
    let e = ra.decode(&plan, &bytes[..4]).unwrap_err();
    assert!(matches!(e, StorageError::BufferLength { expected: 6, found: 4 }), "{e}");
    let e = ra.read_many_into(&[Window::new(0, 3), Window::new(3, 2)], &mut [0u8; 9]).unwrap_err();
    assert!(matches!(e, StorageError::BufferLength { expected: 10, found: 9 }), "{e}");
    assert_eq!(e.to_string(), "the buffer holds 9 bytes, but the reads need 10");
    let mut out = [0u8; 10];
    ra.read_many_into(&[Window::new(0, 3), Window::new(3, 2)], &mut out).unwrap();
    assert_eq!(out, [10, 0, 11, 0, 12, 0, 20, 0, 21, 0]);
}

#[test]
fn memory_dirs_load_manifests_check_files_and_verify() {
    let dir = tempfile::tempdir().unwrap();
    stream_storage(dir.path());
    let mem = MemDir::copy_of(dir.path()).unwrap();
    assert_eq!(
        mem.names(),
        [
            ".writer.lock",
            "manifest.json",
            "shard-00000.stream",
            "shard-00001.stream",
            "shard-00002.stream",
            "shard-00003.stream"
        ]
    );
    assert_eq!(Manifest::load_from(&mem).unwrap(), Manifest::load(dir.path()).unwrap());
    let report = verify_in(&mem).unwrap();
    assert_eq!((report.shards, report.files, report.bytes), (4, 4, 22));
    assert_eq!(mem.file_len("shard-00003.stream").unwrap(), Some(12));
    assert_eq!(mem.file_len("nope").unwrap(), None);
    let e = mem.read_at("shard-00000.stream", 4, &mut [0u8; 4]).unwrap_err();
    assert!(matches!(e, StorageError::ShortRead { offset: 4, expected: 4, got: 2, .. }), "{e}");

    // Damage seen through memory is reported as on disk.
    let mem = Arc::new(mem);
    mem.insert("shard-00002.stream", vec![20u8, 0]);
    let e = StreamReader::open_in(mem.clone(), SegFormat, ReadOptions::default()).unwrap_err();
    assert!(matches!(e, StorageError::ShardTooShort { shard: 2, expected: 4, actual: 2, .. }), "{e}");
    mem.remove("shard-00002.stream");
    let e = StreamReader::open_in(mem.clone(), SegFormat, ReadOptions::default()).unwrap_err();
    assert!(matches!(e, StorageError::MissingShard { shard: 2, .. }), "{e}");
    mem.remove("manifest.json");
    let e = StreamReader::open_in(mem, SegFormat, ReadOptions::default()).unwrap_err();
    assert!(matches!(e, StorageError::NotAStorage { .. }), "{e}");
    let e = Manifest::load_from(&MemDir::new()).unwrap_err();
    assert_eq!(e.to_string(), "memory is not a guideloom storage (no manifest.json)");
}
