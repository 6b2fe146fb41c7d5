//! Shared fixtures: backends every read test runs over, test backends wrapping them, a
//! format exposing segments, and a manifest editor for damaged-storage tests.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use guideloom_formats::{Dtype, FormatError, Primitive, RawWindow, StreamFormat};
use guideloom_storage::{FileSet, PreadBackend, ReadBackend, ReadRequest};

/// Every I/O backend a read test must pass with ([`guideloom_testkit::backends::read_backends`],
/// shared with the interop tests), and the checks behind it.
pub(crate) use guideloom_testkit::backends::read_backends as backends;

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
