//! Shared fixtures: backends every read test runs over, test backends wrapping them, a
//! format exposing segments, and a manifest editor for damaged-storage tests.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use guideloom_formats::{Dtype, FormatError, Primitive, RawWindow, StreamFormat};
use guideloom_storage::{
    AutoBackend, DirectBackend, FileSet, HybridBackend, MmapBackend, PreadBackend, ReadBackend, ReadOptions,
    ReadRequest, UringBackend,
};

/// Every I/O backend a read test must pass with, with a label for failure messages: pread,
/// io_uring, mmap, hybrid (maps for cached files, Auto for the others; checked on every batch),
/// Auto (what `ReadOptions::default()` picks), Auto with io_uring forced off
/// (`GUIDELOOM_IO=pread` semantics), and the two `O_DIRECT` backends.
///
/// A backend this host cannot run (the kernel or a seccomp profile refuses io_uring, the run
/// forces it off with `GUIDELOOM_IO=pread`, a temp file system refuses `O_DIRECT`) is left out
/// with a note on stderr, or fails the test when `GUIDELOOM_REQUIRE_BACKENDS` names it
/// ([`guideloom_testkit::skip_backend`]; CI requires both).
pub(crate) fn backends() -> Vec<(&'static str, ReadOptions)> {
    let with = |b: Arc<dyn ReadBackend>| ReadOptions::default().with_backend(b);
    let mut v = vec![
        ("pread", with(Arc::new(PreadBackend))),
        // SAFETY: test storages live in private temp dirs that nothing truncates or rewrites
        // while a reader is open (tests that truncate files use their own readers).
        ("mmap", with(Arc::new(unsafe { MmapBackend::new() }))),
        (
            "hybrid",
            // SAFETY: as for mmap.
            with(Arc::new(unsafe { HybridBackend::new() }.with_recheck_interval(std::time::Duration::ZERO))),
        ),
        ("auto", ReadOptions::default()),
        ("auto, io_uring forced off", with(Arc::new(AutoBackend::for_env_value(Some("pread"))))),
    ];
    let direct = match direct_io_available() {
        Ok(()) => true,
        Err(reason) => {
            guideloom_testkit::skip_backend("direct", "O_DIRECT backends", reason);
            false
        }
    };
    if direct {
        v.push(("pread+direct", with(Arc::new(DirectBackend::pread()))));
    }
    match (UringBackend::new(), DirectBackend::io_uring()) {
        _ if io_uring_forced_off() => guideloom_testkit::skip_backend(
            "io_uring",
            "io_uring backends",
            "GUIDELOOM_IO=pread turns io_uring off",
        ),
        (Ok(u), Ok(d)) => {
            v.push(("io_uring", with(Arc::new(u))));
            if direct {
                v.push(("io_uring+direct", with(Arc::new(d))));
            }
        }
        (Err(e), _) | (_, Err(e)) => {
            guideloom_testkit::skip_backend("io_uring", "io_uring backends", &e.to_string())
        }
    }
    v
}

/// Whether this run forces io_uring off (`GUIDELOOM_IO=pread`).
pub(crate) fn io_uring_forced_off() -> bool {
    std::env::var("GUIDELOOM_IO").is_ok_and(|v| v.trim().eq_ignore_ascii_case("pread"))
}

/// Whether `O_DIRECT` works where the storage tests put storages: the system temp dir
/// (`hostile::scratch_dir` uses `/dev/shm` only where it accepts `O_DIRECT` too). Checked
/// once.
pub(crate) fn direct_io_available() -> Result<(), &'static str> {
    static CHECK: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    let check = CHECK.get_or_init(|| guideloom_testkit::direct_io_works_in(&std::env::temp_dir()));
    check.as_ref().map(|_| ()).map_err(String::as_str)
}

/// u16 tokens whose unpack returns the ids with the window's segmentation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SegFormat;

/// What [`SegFormat`] returns: ids, segment lengths, segment shard ids.
pub(crate) type Segmented = (Vec<u16>, Vec<u64>, Vec<u64>);

impl StreamFormat for SegFormat {
    type Input = [u16];
    type Output = Segmented;
    fn name(&self) -> &str {
        "seg-test"
    }
    fn dtype(&self) -> Dtype {
        Dtype::Primitive(Primitive::U16)
    }
    fn pack(&self, record: &[u16], out: &mut Vec<u8>) -> Result<u64, FormatError> {
        out.extend(record.iter().flat_map(|v| v.to_le_bytes()));
        Ok(record.len() as u64)
    }
    fn unpack(&self, w: &RawWindow<'_>) -> Result<Segmented, FormatError> {
        Ok((w.elements::<u16>()?.into_owned(), w.shard_lengths().to_vec(), w.shards().to_vec()))
    }
}

/// A test backend wrapper whose reads come back in pieces of at most 3 bytes through a
/// `read_into` per piece (counted): the storage readers still get exact bytes (they depend
/// only on the `read_into` contract, not on one call per request).
#[derive(Debug)]
pub(crate) struct Trickle(pub Arc<dyn ReadBackend>, pub AtomicUsize);

impl ReadBackend for Trickle {
    fn name(&self) -> &'static str {
        "trickle"
    }
    fn read_into(
        &self,
        files: &FileSet,
        requests: &[ReadRequest],
        out: &mut [u8],
    ) -> guideloom_storage::Result<()> {
        let mut pos = 0usize;
        for r in requests {
            let mut done = 0u64;
            while done < r.len {
                let n = (r.len - done).min(3);
                let piece = ReadRequest { file: r.file, offset: r.offset + done, len: n };
                self.0.read_into(files, &[piece], &mut out[pos..pos + n as usize])?;
                self.1.fetch_add(1, Ordering::Relaxed);
                pos += n as usize;
                done += n;
            }
        }
        Ok(())
    }
}

/// A pread backend counting its `read_into` calls.
#[derive(Debug, Default)]
pub(crate) struct Counting(pub AtomicUsize);

impl ReadBackend for Counting {
    fn name(&self) -> &'static str {
        "counting-pread"
    }
    fn read_into(
        &self,
        files: &FileSet,
        requests: &[ReadRequest],
        out: &mut [u8],
    ) -> guideloom_storage::Result<()> {
        self.0.fetch_add(1, Ordering::SeqCst);
        PreadBackend.read_into(files, requests, out)
    }
}

/// Rewrites `dir/manifest.json` after `edit` changed its JSON (tests of damaged or
/// hand-made manifests; the library commits manifests only through its writers).
pub(crate) fn edit_manifest(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = dir.join("manifest.json");
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    edit(&mut m);
    std::fs::write(&path, serde_json::to_vec_pretty(&m).unwrap()).unwrap();
}

/// An error and its sources, joined by `": "` (what a chain-walking reporter prints).
pub(crate) fn report(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}
