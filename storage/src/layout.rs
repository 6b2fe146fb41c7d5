//! Streams whose elements lie in files of another layout: a [`StreamLayout`] names the files,
//! the element runs in them and how the elements are stored, and
//! [`crate::StreamReader::from_layout`] (in the stream storage's module) reads it as a stream
//! storage, in place (the door `guideloom-interop` opens for datasets written by other
//! projects). A leaf: the description and its checks only.

use std::path::{Component, Path, PathBuf};

use guideloom_formats::Dtype;
use serde_json::{Map, Value};

use crate::manifest::FormatSpec;
use crate::{Result, StorageError};

/// The shape of a stream held by files that are not a guideloom storage: the files, the runs
/// of elements in them (in stream order) and how each element is stored, plus the
/// description the reader's manifest carries. [`crate::StreamReader::from_layout`] reads it.
///
/// The stream is the concatenation of [`StreamLayout::segments`]: segment `i` holds
/// `elements` elements of [`StreamLayout::dtype`] back to back from byte `offset` of file
/// `file`. Windows cross segment and file boundaries; their segmentation names segment `i`
/// as shard `i`.
///
/// ```
/// use guideloom_formats::{Dtype, Primitive, TokenFormat};
/// use guideloom_storage::{FormatSpec, LayoutFile, LocalDir, ReadOptions, Segment, StreamLayout, StreamReader, Window};
/// let dir = tempfile::tempdir()?;
/// // A 4-byte header, then three u16 tokens.
/// std::fs::write(dir.path().join("tokens.bin"), [0, 0, 0, 0, 7, 0, 8, 0, 9, 0])?;
/// let layout = StreamLayout {
///     files: vec![LayoutFile { path: "tokens.bin".into(), bytes: 10 }],
///     segments: vec![Segment { file: 0, offset: 4, elements: 3 }],
///     dtype: Dtype::Primitive(Primitive::U16),
///     big_endian: false,
///     spec: FormatSpec { name: "headered".into(), params: serde_json::json!({}) },
///     metadata: serde_json::Map::new(),
/// };
/// let dir = std::sync::Arc::new(LocalDir::new(dir.path()));
/// let r = StreamReader::from_layout(dir, layout, TokenFormat::<u16>::new(), ReadOptions::default())?;
/// assert_eq!(r.read(Window::new(1, 2))?, vec![8, 9]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct StreamLayout {
    /// The files the segments lie in, indexed by [`Segment::file`]. Each is named relative to
    /// the directory the reader reads through, with plain components only (no root, no
    /// `..`), and has its committed length: reads never go past it.
    pub files: Vec<LayoutFile>,
    /// The element runs of the stream, in stream order. Each lies inside its file's
    /// committed bytes: `offset + elements * itemsize <= bytes` (in `u64`, without overflow).
    /// A file may hold several segments, or none (an index file).
    pub segments: Vec<Segment>,
    /// The element dtype; the format a reader is built with must have it.
    pub dtype: Dtype,
    /// Whether the files store the elements big-endian (a NumPy `>` array): reads swap each
    /// element to little-endian. Only for a [`Dtype::Primitive`].
    pub big_endian: bool,
    /// The format the reader's manifest records (kind `stream`, this dtype, this spec, and one
    /// shard per file with its elements and bytes, checksum 0): with the files' sizes and
    /// element counts it makes the reader's fingerprint, so it should name what identifies
    /// the data (the layout, the files in stream order, an index hash).
    pub spec: FormatSpec,
    /// Free-form description the reader's manifest carries as its metadata
    /// ([`crate::Manifest::metadata`]); not part of the fingerprint.
    pub metadata: Map<String, Value>,
}

/// One file of a [`StreamLayout`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayoutFile {
    /// The file, relative to the reader's directory (plain components only).
    pub path: PathBuf,
    /// Its committed length in bytes: the bytes segments may use.
    pub bytes: u64,
}

/// One run of elements of a [`StreamLayout`]: `elements` elements back to back from byte
/// `offset` of file `file`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// The file, an index into [`StreamLayout::files`].
    pub file: usize,
    /// The byte its first element starts at.
    pub offset: u64,
    /// Elements in the run.
    pub elements: u64,
}

impl StreamLayout {
    /// The elements of each file (the sum of its segments'), in file order.
    ///
    /// # Errors
    /// [`StorageError::InvalidLayout`] when a segment names no file, lies past its file's
    /// committed bytes, or a count overflows `u64`; the path or dtype checks of
    /// [`crate::StreamReader::from_layout`].
    pub(crate) fn check(&self, dir: &Path) -> Result<Vec<u64>> {
        let invalid = |reason: String| StorageError::InvalidLayout { dir: dir.to_path_buf(), reason };
        if self.big_endian && !matches!(self.dtype, Dtype::Primitive(_)) {
            return Err(invalid(format!("big-endian elements of the non-primitive dtype {}", self.dtype)));
        }
        for f in &self.files {
            let plain = f.path.components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
            if f.path.as_os_str().is_empty() || !plain {
                return Err(invalid(format!("file {:?} is not a relative path below the directory", f.path)));
            }
        }
        let itemsize = self.dtype.itemsize();
        let mut per_file = vec![0u64; self.files.len()];
        let mut total = 0u64;
        for (i, s) in self.segments.iter().enumerate() {
            let file = self.files.get(s.file).ok_or_else(|| {
                invalid(format!("segment {i} names file {} of {}", s.file, self.files.len()))
            })?;
            let end = s.elements.checked_mul(itemsize).and_then(|n| n.checked_add(s.offset));
            match end {
                Some(end) if end <= file.bytes => {}
                _ => {
                    return Err(invalid(format!(
                        "segment {i}: {} elements of {itemsize} bytes from byte {} pass the {} bytes of {}",
                        s.elements,
                        s.offset,
                        file.bytes,
                        file.path.display()
                    )))
                }
            }
            total = total
                .checked_add(s.elements)
                .ok_or_else(|| invalid("the element count overflows u64".into()))?;
            // Below `total`, which did not overflow.
            per_file[s.file] += s.elements;
        }
        Ok(per_file)
    }
}
