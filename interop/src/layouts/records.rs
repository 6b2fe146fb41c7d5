//! Token ids inside one record of a record format (an ArrayRecord record, a raw TFRecord
//! record, a WebDataset `.npy` member): a NumPy `.npy` payload (dtype and shape in its
//! header, `numpy/lib/format.py`) or raw little-endian elements of a declared dtype.
// Each format uses part of this module: with fewer than the three record formats, some of it is unused.
#![cfg_attr(
    not(all(feature = "arrayrecord", feature = "tfrecord", feature = "webdataset")),
    allow(dead_code, unused_imports)
)]

use guideloom_formats::Primitive;

use guideloom_storage::Segment;

use crate::error::ForeignError;
use crate::format::ForeignFormat;
use crate::layouts::npy;
use crate::parts::{ForeignDetails, ForeignFile, Parts};

/// The tokens of one record, as little-endian bytes of `dtype`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RecordTokens {
    /// The element dtype.
    pub(crate) dtype: Primitive,
    /// The elements, little-endian (a big-endian `.npy` is swapped).
    pub(crate) bytes: Vec<u8>,
}

impl RecordTokens {
    /// The number of elements.
    pub(crate) fn len(&self) -> u64 {
        self.bytes.len() as u64 / self.dtype.size()
    }
}

/// The tokens of `record`: a `.npy` payload when it starts with the NumPy magic (its dtype
/// must be an integer one, and `dtype`'s when one is given), else raw little-endian
/// elements of `dtype`.
///
/// # Errors
/// [`ForeignError::DTypeRequired`] for raw bytes without a dtype; the `.npy` checks of
/// [`npy::in_memory`] ([`ForeignError::UnsupportedTokenDType`] for a float array);
/// [`ForeignError::MixedDTypes`] for a `.npy` of another dtype than the one given;
/// [`ForeignError::NotMultipleOfItemSize`] for raw bytes that are not whole elements.
pub(crate) fn record_tokens(record: &[u8], dtype: Option<Primitive>) -> Result<RecordTokens, ForeignError> {
    if record.starts_with(npy::MAGIC) {
        let (p, big, data) = npy::in_memory(record)?;
        if let Some(want) = dtype.filter(|&d| d != p) {
            return Err(ForeignError::MixedDTypes { expected: p.descr().into(), found: want.descr().into() });
        }
        let mut bytes = data.to_vec();
        if big {
            let size = p.size() as usize;
            bytes.chunks_exact_mut(size).for_each(<[u8]>::reverse);
        }
        return Ok(RecordTokens { dtype: p, bytes });
    }
    let Some(p) = dtype else {
        return Err(ForeignError::DTypeRequired {
            reason: format!("{} bytes without a .npy header", record.len()),
        });
    };
    if !(record.len() as u64).is_multiple_of(p.size()) {
        return Err(ForeignError::NotMultipleOfItemSize { bytes: record.len() as u64, itemsize: p.size() });
    }
    Ok(RecordTokens { dtype: p, bytes: record.to_vec() })
}

/// The ids of `tokens` widened to `i64`.
///
/// # Errors
/// [`ForeignError::UnsupportedTokenDType`] for a `u64` id above `i64::MAX`.
pub(crate) fn widen(tokens: &RecordTokens) -> Result<Vec<i64>, ForeignError> {
    let size = tokens.dtype.size() as usize;
    tokens
        .bytes
        .chunks_exact(size)
        .map(|c| {
            let mut b = [0u8; 8];
            b[..size].copy_from_slice(c);
            let signed =
                matches!(tokens.dtype, Primitive::I8 | Primitive::I16 | Primitive::I32 | Primitive::I64);
            if signed && c[size - 1] & 0x80 != 0 {
                b[size..].fill(0xff);
            }
            let v = i64::from_le_bytes(b);
            if tokens.dtype == Primitive::U64 && v < 0 {
                return Err(ForeignError::UnsupportedTokenDType {
                    dtype: format!("<u8 id {} above i64::MAX", v as u64),
                });
            }
            Ok(v)
        })
        .collect()
}

/// A file of a dataset read in order through its directory (local or remote) from a byte
/// offset, in reads of at most [`FileRead::STEP`] bytes.
#[cfg(any(feature = "tfrecord", feature = "webdataset"))]
#[derive(Debug)]
pub(crate) struct FileRead {
    fs: crate::files::Fs,
    name: String,
    pos: u64,
    len: u64,
}

#[cfg(any(feature = "tfrecord", feature = "webdataset"))]
impl FileRead {
    /// Bytes per read of the file.
    const STEP: u64 = 1 << 20;

    /// File `name` of `fs`, from byte `pos` (its size read now).
    pub(crate) fn new(fs: &crate::files::Fs, name: &str, pos: u64) -> crate::error::Result<Self> {
        let len = fs.len(name)?;
        Ok(FileRead { fs: fs.clone(), name: name.to_string(), pos: pos.min(len), len })
    }

    /// The file's size.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }
}

#[cfg(any(feature = "tfrecord", feature = "webdataset"))]
impl std::io::Read for FileRead {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = (buf.len() as u64).min(self.len - self.pos).min(Self::STEP);
        if n == 0 {
            return Ok(0);
        }
        self.fs
            .dir
            .read_at(&self.name, self.pos, &mut buf[..n as usize])
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        self.pos += n;
        Ok(n as usize)
    }
}

/// Reads up to `buf.len()` bytes; the count read (fewer only at the end).
///
/// # Errors
/// [`ForeignError::DecompressionFailed`] with the read's error (a damaged gzip stream, a
/// failed read).
#[cfg(any(feature = "tfrecord", feature = "webdataset"))]
pub(crate) fn read_full(src: &mut dyn std::io::Read, buf: &mut [u8]) -> Result<usize, ForeignError> {
    let mut n = 0;
    while n < buf.len() {
        match src.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(ForeignError::DecompressionFailed { reason: e.to_string() }),
        }
    }
    Ok(n)
}

/// The files of a sequential record source (TFRecord, WebDataset): one shard each, in the
/// order found, their record counts once counted, and a fingerprint of their names, sizes
/// and how their records are read.
#[cfg(any(feature = "tfrecord", feature = "webdataset"))]
#[derive(Debug, Clone)]
pub(crate) struct RecordFiles {
    /// Their directory.
    pub(crate) fs: crate::files::Fs,
    /// The files, relative to it.
    pub(crate) names: Vec<String>,
    /// Records per file, once counted.
    pub(crate) lengths: Option<Vec<u64>>,
    /// xxh3 of the names, sizes and `how`.
    pub(crate) fingerprint: u64,
}

#[cfg(any(feature = "tfrecord", feature = "webdataset"))]
impl RecordFiles {
    /// The files of `format` at `place` with one of `exts`; `how` (how records are read)
    /// enters the fingerprint.
    pub(crate) fn open(
        format: ForeignFormat,
        place: &crate::files::Place,
        exts: &[&str],
        how: &str,
    ) -> crate::error::Result<Self> {
        let (dir, names) = crate::files::expand(format, place, exts)?;
        let fs = crate::files::Fs::new(format, dir);
        let mut key = how.as_bytes().to_vec();
        for n in &names {
            key.extend_from_slice(n.as_bytes());
            key.extend_from_slice(&fs.len(n)?.to_le_bytes());
        }
        Ok(RecordFiles { fs, names, lengths: None, fingerprint: xxhash_rust::xxh3::xxh3_64(&key) })
    }

    /// The same files with each one's records counted by `count`.
    pub(crate) fn counted(
        mut self,
        count: impl Fn(&crate::files::Fs, &str) -> crate::error::Result<u64>,
    ) -> crate::error::Result<Self> {
        let lengths =
            self.names.iter().map(|n| count(&self.fs, n)).collect::<crate::error::Result<Vec<u64>>>()?;
        self.lengths = Some(lengths);
        Ok(self)
    }

    /// The shards' length hints.
    pub(crate) fn shards(&self) -> Vec<guideloom_loader::sequential::ShardInfo> {
        (0..self.names.len())
            .map(|i| guideloom_loader::sequential::ShardInfo {
                len_hint: self.lengths.as_ref().map(|l| l[i]),
            })
            .collect()
    }

    /// The name of shard `shard`.
    ///
    /// # Errors
    /// [`guideloom_loader::LoaderError::IndexOutOfRange`] past the last.
    pub(crate) fn name(&self, shard: u64) -> Result<&str, guideloom_loader::LoaderError> {
        usize::try_from(shard).ok().and_then(|s| self.names.get(s)).map(String::as_str).ok_or(
            guideloom_loader::LoaderError::IndexOutOfRange { index: shard, len: self.names.len() as u64 },
        )
    }

    /// The files' paths.
    pub(crate) fn paths(&self) -> Vec<std::path::PathBuf> {
        self.names.iter().map(|n| self.fs.root.join(n)).collect()
    }
}

/// File `name` of `fs` read in order from byte `offset` (of the decompressed stream for a
/// `.gz` / `.tgz` file, which is read again from its start and skipped forward), and the
/// bytes left from there when they are known (not for gzip).
///
/// # Errors
/// [`ForeignError::InvalidIndex`] for an offset past the end; [`ForeignError::DecompressionFailed`]
/// for a damaged gzip stream before it; read errors.
#[cfg(any(feature = "tfrecord", feature = "webdataset"))]
pub(crate) fn read_from(
    fs: &crate::files::Fs,
    name: &str,
    offset: u64,
) -> crate::error::Result<(Box<dyn std::io::Read + Send>, Option<u64>)> {
    use std::io::{BufReader, Read};
    let past = |have: u64| {
        fs.err(
            name,
            ForeignError::InvalidIndex { reason: format!("offset {offset} is past the {have} bytes there") },
        )
    };
    if name.ends_with(".gz") || name.ends_with(".tgz") {
        let file = FileRead::new(fs, name, 0)?;
        let mut src: Box<dyn Read + Send> = Box::new(flate2::read::MultiGzDecoder::new(BufReader::new(file)));
        let skipped = std::io::copy(&mut (&mut src).take(offset), &mut std::io::sink())
            .map_err(|e| fs.err(name, ForeignError::DecompressionFailed { reason: e.to_string() }))?;
        if skipped != offset {
            return Err(past(skipped));
        }
        return Ok((src, None));
    }
    let file = FileRead::new(fs, name, offset)?;
    let left = file.len().checked_sub(offset).ok_or_else(|| past(file.len()))?;
    Ok((Box::new(BufReader::with_capacity(1 << 16, file)), Some(left)))
}

/// What a record format's reader collects into [`Parts`] on open: each file's ids (held in
/// memory, served by name), its records, the document boundaries and the one dtype.
#[derive(Debug)]
pub(crate) struct Collected {
    parts: Parts,
    dtype: Option<Primitive>,
    documents: Vec<u64>,
    records: Vec<u64>,
    bytes: Vec<u8>,
}

impl Collected {
    /// Nothing yet, in the directory of `fs`, of `dtype` when it is known.
    pub(crate) fn new(fs: &crate::files::Fs, dtype: Option<Primitive>) -> Self {
        let parts = Parts::new(fs, dtype.unwrap_or(Primitive::U8));
        Collected { parts, dtype, documents: vec![0], records: Vec::new(), bytes: Vec::new() }
    }

    /// The dtype so far.
    pub(crate) fn dtype(&self) -> Option<Primitive> {
        self.dtype
    }

    /// One more document of the current file; `Err` with [`ForeignError::MixedDTypes`]
    /// when its dtype is not the one of those before.
    pub(crate) fn push(&mut self, tokens: RecordTokens) -> Result<(), ForeignError> {
        match self.dtype {
            Some(d) if d != tokens.dtype => {
                return Err(ForeignError::MixedDTypes {
                    expected: d.descr().into(),
                    found: tokens.dtype.descr().into(),
                })
            }
            _ => self.dtype = Some(tokens.dtype),
        }
        self.documents.push(self.documents[self.documents.len() - 1] + tokens.len());
        self.bytes.extend_from_slice(&tokens.bytes);
        Ok(())
    }

    /// Ends file `name`, which held `records` records.
    pub(crate) fn end_file(&mut self, name: &str, records: u64) {
        let bytes = std::mem::take(&mut self.bytes);
        let elements = bytes.len() as u64 / self.dtype.map_or(1, Primitive::size);
        let file = self.parts.files.len();
        self.parts.files.push(ForeignFile { path: name.into(), bytes: bytes.len() as u64, elements });
        self.parts.segments.push(Segment { file, offset: 0, elements });
        self.parts.mem.insert(name.to_string(), bytes.into());
        self.records.push(records);
    }

    /// The parts: documents, the records per file, the boundaries' hash as the index hash.
    pub(crate) fn finish(mut self) -> Parts {
        self.parts.dtype = self.dtype.unwrap_or(Primitive::U8);
        let bounds: Vec<u8> = self.documents.iter().flat_map(|b| b.to_le_bytes()).collect();
        self.parts.index_hash = xxhash_rust::xxh3::xxh3_64(&bounds);
        self.parts.documents = Some(self.documents);
        self.parts.details = ForeignDetails::Records { records: self.records };
        self.parts
    }
}

/// The record `at` wrapped around `error` ([`ForeignError::InRecord`]).
pub(crate) fn in_record(at: impl Into<String>) -> impl FnOnce(ForeignError) -> ForeignError {
    move |error| ForeignError::InRecord { at: at.into(), error: Box::new(error) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_and_npy_records_decode_and_widen_exactly() {
        let raw = record_tokens(&[1, 0, 0xff, 0xff], Some(Primitive::I16)).unwrap();
        assert_eq!(widen(&raw).unwrap(), vec![1, -1]);
        assert!(matches!(
            record_tokens(&[1, 2, 3], Some(Primitive::U16)),
            Err(ForeignError::NotMultipleOfItemSize { .. })
        ));
        assert!(matches!(record_tokens(&[1, 2], None), Err(ForeignError::DTypeRequired { .. })));
        let mut npy = b"\x93NUMPY\x01\x00".to_vec();
        let header = "{'descr': '>u2', 'fortran_order': False, 'shape': (2,), }";
        let mut h = header.as_bytes().to_vec();
        h.resize(118 - 10, b' ');
        h.push(b'\n');
        npy.extend_from_slice(&(h.len() as u16).to_le_bytes());
        npy.extend_from_slice(&h);
        npy.extend_from_slice(&[0x01, 0x02, 0x00, 0x07]);
        let t = record_tokens(&npy, None).unwrap();
        assert_eq!((t.dtype, widen(&t).unwrap()), (Primitive::U16, vec![0x0102, 7]));
        assert!(matches!(record_tokens(&npy, Some(Primitive::I32)), Err(ForeignError::MixedDTypes { .. })));
    }

    /// Issue 33 (mutants of the u64 range check `v < 0` -> `<=`, `==`, `>`): u64 ids widen to
    /// i64 up to `i64::MAX` (0 and `2^63 - 1` included); `2^63` is refused naming the id.
    /// Signed ids keep their sign (`-1` as i64 is not out of range).
    #[test]
    fn issue33_foreign_records_u64_ids_widen_up_to_i64_max() {
        let u64s = |ids: &[u64]| RecordTokens {
            dtype: Primitive::U64,
            bytes: ids.iter().flat_map(|i| i.to_le_bytes()).collect(),
        };
        assert_eq!(widen(&u64s(&[0, 1, (1 << 63) - 1])).unwrap(), [0, 1, i64::MAX]);
        assert_eq!(
            widen(&u64s(&[5, 1 << 63])),
            Err(ForeignError::UnsupportedTokenDType {
                dtype: "<u8 id 9223372036854775808 above i64::MAX".into()
            })
        );
        let i64s = RecordTokens { dtype: Primitive::I64, bytes: (-1i64).to_le_bytes().to_vec() };
        assert_eq!(widen(&i64s).unwrap(), [-1]);
    }

    /// Issue 33 (mutant of `read_full`'s guard on `ErrorKind::Interrupted` -> `false`): a read
    /// interrupted by a signal is retried, as `std::io::Read::read_exact` does, so the bytes
    /// after it still arrive; any other error is a failed decompression naming it.
    #[cfg(any(feature = "tfrecord", feature = "webdataset"))]
    #[test]
    fn issue33_foreign_records_an_interrupted_read_is_retried() {
        /// Reads `data` in reads of at most 2 bytes, failing once with `kind` before each read.
        struct Flaky {
            data: Vec<u8>,
            kind: std::io::ErrorKind,
            fail: bool,
        }
        impl std::io::Read for Flaky {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                self.fail = !self.fail;
                if self.fail {
                    return Err(std::io::Error::new(self.kind, "flaky"));
                }
                let n = buf.len().min(2).min(self.data.len());
                buf[..n].copy_from_slice(&self.data[..n]);
                self.data.drain(..n);
                Ok(n)
            }
        }
        let mut src = Flaky { data: vec![1, 2, 3, 4, 5], kind: std::io::ErrorKind::Interrupted, fail: false };
        let mut buf = [0u8; 8];
        assert_eq!(read_full(&mut src, &mut buf), Ok(5));
        assert_eq!(buf[..5], [1, 2, 3, 4, 5]);
        let mut src = Flaky { data: vec![1, 2, 3], kind: std::io::ErrorKind::Other, fail: false };
        assert_eq!(
            read_full(&mut src, &mut buf),
            Err(ForeignError::DecompressionFailed { reason: "flaky".into() })
        );
    }

    /// Issue 33 (mutant of `Collected::push`'s guard `d != tokens.dtype` -> `false`): the
    /// documents of a record format share one dtype: a second document of the same dtype is
    /// pushed (its tokens after the first's), one of another dtype is refused naming both, and
    /// the file ends with the tokens pushed before it.
    #[test]
    fn issue33_foreign_records_collected_documents_share_one_dtype() {
        let dir = tempfile::tempdir().unwrap();
        let fs = crate::files::Fs::local(ForeignFormat::WebDataset, dir.path());
        let u16s = |t: &[u16]| RecordTokens { dtype: Primitive::U16, bytes: crate::files::u16_bytes(t) };
        let mut c = Collected::new(&fs, None);
        assert_eq!(c.push(u16s(&[1, 2])), Ok(()));
        assert_eq!(c.push(u16s(&[3])), Ok(()));
        assert_eq!(c.dtype(), Some(Primitive::U16));
        let i32s = RecordTokens { dtype: Primitive::I32, bytes: 7i32.to_le_bytes().to_vec() };
        assert_eq!(
            c.push(i32s),
            Err(ForeignError::MixedDTypes { expected: "<u2".into(), found: "<i4".into() })
        );
        c.end_file("a.tar", 2);
        let parts = c.finish();
        assert_eq!((parts.dtype, parts.documents), (Primitive::U16, Some(vec![0, 2, 3])));
        assert_eq!((parts.files[0].bytes, parts.files[0].elements), (6, 3));
    }
}
