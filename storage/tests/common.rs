//! Shared fixtures: backends every read test runs over, and a format exposing segments.

use std::sync::Arc;

use guideloom_formats::{Dtype, FormatError, Primitive, StreamFormat, Window};
use guideloom_storage::{
    AutoBackend, DirectBackend, MmapBackend, PreadBackend, ReadBackend, ReadOptions, UringBackend,
};

/// Every I/O backend a read test must pass with, with a label for failure messages: pread,
/// io_uring, mmap, Auto (what `ReadOptions::default()` picks), Auto with io_uring forced off
/// (`GUIDELOOM_IO=pread` semantics), and the two `O_DIRECT` backends.
///
/// The explicit io_uring entries are left out (with a note on stderr) when the kernel refuses
/// io_uring or when the run itself forces it off with `GUIDELOOM_IO=pread`.
pub fn backends() -> Vec<(&'static str, ReadOptions)> {
    let with = |b: Arc<dyn ReadBackend>| ReadOptions::default().with_backend(b);
    let mut v = vec![
        ("pread", with(Arc::new(PreadBackend))),
        // SAFETY: test storages live in private temp dirs that nothing truncates or rewrites
        // while a reader is open (tests that truncate files use their own readers).
        ("mmap", with(Arc::new(unsafe { MmapBackend::new() }))),
        ("auto", ReadOptions::default()),
        ("auto, io_uring forced off", with(Arc::new(AutoBackend::for_env_value(Some("pread"))))),
    ];
    if direct_io_works() {
        v.push(("pread+direct", with(Arc::new(DirectBackend::pread()))));
    }
    let forced_off = std::env::var("GUIDELOOM_IO").is_ok_and(|v| v.trim().eq_ignore_ascii_case("pread"));
    match (UringBackend::new(), DirectBackend::io_uring()) {
        (Ok(u), Ok(d)) if !forced_off => {
            v.push(("io_uring", with(Arc::new(u))));
            if direct_io_works() {
                v.push(("io_uring+direct", with(Arc::new(d))));
            }
        }
        (Err(e), _) | (_, Err(e)) => eprintln!("note: io_uring backends skipped: {e}"),
        _ => eprintln!("note: io_uring backends skipped: GUIDELOOM_IO=pread"),
    }
    v
}

/// Whether the temp dir's filesystem accepts `O_DIRECT` (tmpfs does not); the direct
/// backends are left out of [`backends`] (with a note) where it does not.
fn direct_io_works() -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    let Ok(f) = tempfile::NamedTempFile::new() else { return false };
    let ok = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(f.path()).is_ok();
    if !ok {
        eprintln!("note: O_DIRECT backends skipped: the temp dir's filesystem refuses O_DIRECT");
    }
    ok
}

/// u16 tokens whose unpack returns the ids with the window's segmentation.
#[derive(Debug, Clone, Copy)]
pub struct SegFormat;

/// What [`SegFormat`] returns: ids, segment lengths, segment shard ids.
pub type Segmented = (Vec<u16>, Vec<u64>, Vec<u64>);

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
    fn unpack(&self, w: &Window<'_>) -> Result<Segmented, FormatError> {
        Ok((w.elements::<u16>()?.into_owned(), w.shard_lengths().to_vec(), w.shards().to_vec()))
    }
}
