//! TFRecord files (TensorFlow's `tensorflow/core/lib/io/record_writer.cc` framing, as the
//! `tfrecord` package writes it: vahidk/tfrecord `tfrecord/writer.py`, `reader.py`), read in
//! order: per record `u64 length | u32 masked_crc32c(length) | data | u32
//! masked_crc32c(data)`, no header, no count; a `.gz` file is the gzip of the whole stream.
//!
//! A record is a `tf.train.Example` (TensorFlow's `example.proto` / `feature.proto`,
//! decoded with `prost`) whose `int64_list` feature holds the ids (packed or not, entries in
//! any order, unknown fields skipped, the last entry of a repeated key kept), or, with a
//! dtype given, raw little-endian ids (or a `.npy` payload). Both crcs are checked before the
//! bytes they cover are used, and a length is checked against the bytes left before anything
//! is allocated with it (a gzip stream, whose size is unknown, is read as far as the bytes
//! exist). The `tfrecord2idx` text index (`offset length` per line) is read and checked
//! against the file ([`TfRecordShards::read_index`]).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::PathBuf;

use guideloom_formats::Primitive;
use guideloom_loader::sequential::{SequentialSource, ShardInfo, ShardPos, ShardReader};
use guideloom_loader::LoaderError;
use guideloom_storage::{RemoteOptions, StorageLocation};
use prost::Message;

use crate::error::{ForeignError, Result};
use crate::files::{expand, u32_at, u64_at, Fs, Place};
use crate::format::ForeignFormat;
use crate::layouts::records::{
    in_record, read_from, read_full, record_tokens, widen, Collected, RecordFiles, RecordTokens,
};
use crate::options::ForeignOptions;
use crate::parts::Parts;

/// The constant TensorFlow adds to a rotated crc32c (`crc32c::Mask`).
const MASK_DELTA: u32 = 0xa282_ead8;
/// The feature read by default.
const DEFAULT_FEATURE: &str = "input_ids";
/// The most bytes of a `.index` file.
const MAX_INDEX_BYTES: u64 = 1 << 30;

/// TensorFlow's masked crc32c (Castagnoli) of `data`.
pub(crate) fn masked_crc(data: &[u8]) -> u32 {
    let c = crc32c::crc32c(data);
    c.rotate_right(15).wrapping_add(MASK_DELTA)
}

/// Whether the first 12 bytes of `head` are a TFRecord length with its masked crc.
pub(crate) fn length_crc_matches(head: &[u8]) -> bool {
    head.len() >= 12 && masked_crc(&head[..8]) == u32_at(head, 8)
}

/// `tf.train.Example`.
#[derive(Clone, PartialEq, prost::Message)]
struct Example {
    #[prost(message, optional, tag = "1")]
    features: Option<Features>,
}

/// `tf.train.Features`.
#[derive(Clone, PartialEq, prost::Message)]
struct Features {
    #[prost(btree_map = "string, message", tag = "1")]
    feature: BTreeMap<String, Feature>,
}

/// `tf.train.Feature`.
#[derive(Clone, PartialEq, prost::Message)]
struct Feature {
    #[prost(oneof = "Kind", tags = "1, 2, 3")]
    kind: Option<Kind>,
}

/// The oneof of `tf.train.Feature` (its variants named as the proto's fields).
#[allow(clippy::enum_variant_names)]
#[derive(Clone, PartialEq, prost::Oneof)]
enum Kind {
    #[prost(message, tag = "1")]
    BytesList(BytesList),
    #[prost(message, tag = "2")]
    FloatList(FloatList),
    #[prost(message, tag = "3")]
    Int64List(Int64List),
}

/// `tf.train.BytesList`.
#[derive(Clone, PartialEq, prost::Message)]
struct BytesList {
    #[prost(bytes = "vec", repeated, tag = "1")]
    value: Vec<Vec<u8>>,
}

/// `tf.train.FloatList`.
#[derive(Clone, PartialEq, prost::Message)]
struct FloatList {
    #[prost(float, repeated, tag = "1")]
    value: Vec<f32>,
}

/// `tf.train.Int64List`.
#[derive(Clone, PartialEq, prost::Message)]
struct Int64List {
    #[prost(int64, repeated, tag = "1")]
    value: Vec<i64>,
}

/// How a record holds its ids.
#[derive(Debug, Clone, PartialEq, Eq)]
enum RecordKind {
    /// A `tf.train.Example` with this `int64_list` feature.
    Example(String),
    /// Raw little-endian ids of this dtype (or a `.npy` payload).
    Raw(Primitive),
}

impl RecordKind {
    fn of(options: &ForeignOptions) -> Self {
        match options.dtype {
            Some(d) => RecordKind::Raw(d),
            None => RecordKind::Example(options.column.clone().unwrap_or_else(|| DEFAULT_FEATURE.into())),
        }
    }

    fn dtype(&self) -> Primitive {
        match self {
            RecordKind::Example(_) => Primitive::I64,
            RecordKind::Raw(d) => *d,
        }
    }

    /// The ids of record `record` (its bytes `data`).
    fn tokens(&self, record: u64, data: &[u8]) -> std::result::Result<RecordTokens, ForeignError> {
        let feature = match self {
            RecordKind::Raw(d) => {
                return record_tokens(data, Some(*d)).map_err(in_record(format!("record {record}")))
            }
            RecordKind::Example(f) => f,
        };
        let example = Example::decode(data)
            .map_err(|e| ForeignError::ExampleDecode { record, reason: e.to_string() })?;
        let features = example.features.map(|f| f.feature).unwrap_or_default();
        let Some(found) = features.get(feature) else {
            let have: Vec<&str> = features.keys().map(String::as_str).collect();
            return Err(ForeignError::FeatureNotFound {
                record,
                feature: feature.clone(),
                have: have.join(", "),
            });
        };
        let wrong = |found: &str| {
            in_record(format!("record {record} feature {feature}"))(ForeignError::UnsupportedTokenType {
                found: found.into(),
            })
        };
        match &found.kind {
            Some(Kind::Int64List(l)) => Ok(RecordTokens {
                dtype: Primitive::I64,
                bytes: l.value.iter().flat_map(|v| v.to_le_bytes()).collect(),
            }),
            Some(Kind::FloatList(_)) => Err(wrong("float_list")),
            Some(Kind::BytesList(_)) => Err(wrong("bytes_list")),
            None => Err(wrong("a feature without a list")),
        }
    }
}

/// The framing of one file read in order.
struct Framing {
    src: Box<dyn Read + Send>,
    /// The next record's index and byte offset (in the decompressed stream for gzip).
    record: u64,
    offset: u64,
    /// Bytes left in an uncompressed file.
    left: Option<u64>,
}

impl std::fmt::Debug for Framing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Framing").field("record", &self.record).field("offset", &self.offset).finish()
    }
}

impl Framing {
    /// File `name` of `fs` from `at` (a position a reader reported).
    fn open(fs: &Fs, name: &str, at: ShardPos) -> Result<Self> {
        let (src, left) = read_from(fs, name, at.offset)?;
        Ok(Framing { src, record: at.record, offset: at.offset, left })
    }

    /// The next record's bytes (`None` at the end), both crcs checked.
    fn next(&mut self) -> std::result::Result<Option<Vec<u8>>, ForeignError> {
        let (record, offset) = (self.record, self.offset);
        let mut head = [0u8; 12];
        let n = read_full(&mut self.src, &mut head)?;
        if n == 0 {
            return Ok(None);
        }
        if n < 12 {
            return Err(ForeignError::TruncatedRecord { record, offset, have: n as u64 });
        }
        if !length_crc_matches(&head) {
            return Err(ForeignError::LengthCrcMismatch { record, offset });
        }
        let length = u64_at(&head, 0);
        let out_of_range = |left: u64| ForeignError::RecordOutOfRange { record, offset, length, left };
        if let Some(left) = self.left {
            let after = left.saturating_sub(12);
            if length > after.saturating_sub(4) {
                return Err(out_of_range(after));
            }
        }
        let need = length.checked_add(4).ok_or_else(|| out_of_range(0))?;
        let mut data = Vec::new();
        (&mut self.src)
            .take(need)
            .read_to_end(&mut data)
            .map_err(|e| ForeignError::DecompressionFailed { reason: e.to_string() })?;
        if (data.len() as u64) < need {
            return Err(out_of_range(data.len() as u64));
        }
        let crc = u32_at(&data, length as usize);
        data.truncate(length as usize);
        if masked_crc(&data) != crc {
            return Err(ForeignError::DataCrcMismatch { record, offset });
        }
        self.record += 1;
        self.offset += 16 + length;
        if let Some(left) = self.left.as_mut() {
            *left -= 16 + length;
        }
        Ok(Some(data))
    }
}

/// TFRecord files as a sequential source: each file one shard, each record one document of
/// ids (`i64` from an Example's `int64_list`, or raw ids of the dtype given), in the order
/// given (a glob or a directory: `*.tfrecord` and `*.tfrecord.gz` sorted byte-wise).
/// Positions are byte offsets (of the decompressed stream, for gzip: resuming one reads it
/// again from its start).
///
/// ```
/// use guideloom_interop::{ForeignOptions, TfRecordShards};
/// use guideloom_loader::sequential::{SequentialSource, ShardPos, ShardReader};
/// // One raw record of two u16 ids: length, its masked crc32c, the data, its crc.
/// let dir = tempfile::tempdir()?;
/// let data = [7u8, 0, 9, 0];
/// let mask = |b: &[u8]| crc32c::crc32c(b).rotate_right(15).wrapping_add(0xa282_ead8);
/// let mut file = (data.len() as u64).to_le_bytes().to_vec();
/// file.extend(mask(&file).to_le_bytes());
/// file.extend(data);
/// file.extend(mask(&data).to_le_bytes());
/// std::fs::write(dir.path().join("a.tfrecord"), file)?;
/// let options = ForeignOptions::new().dtype(guideloom_formats::Primitive::U16);
/// let shards = TfRecordShards::open(dir.path().to_str().unwrap(), &options)?;
/// let mut r = shards.open(0, ShardPos::START)?;
/// assert_eq!(r.next_record()?, Some(vec![7, 9]));
/// assert_eq!(r.next_record()?, None);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct TfRecordShards {
    files: RecordFiles,
    kind: RecordKind,
}

impl TfRecordShards {
    /// The TFRecord files at `location` (a file, a glob, a directory; a local path or an
    /// object-store URL, whose options come from the environment), their records read as
    /// `options` says: Examples' [`ForeignOptions::column`] feature (default `input_ids`),
    /// or raw ids of [`ForeignOptions::dtype`] when one is given.
    ///
    /// # Errors
    /// [`ForeignError::NoFiles`] when nothing matches; [`crate::InteropError::Storage`] when the
    /// files cannot be listed or their sizes read.
    pub fn open(location: &str, options: &ForeignOptions) -> Result<Self> {
        Self::open_place(&Place::parse(location)?, options)
    }

    /// [`TfRecordShards::open`] with the store's options given.
    ///
    /// # Errors
    /// As [`TfRecordShards::open`].
    pub fn open_at(
        location: &StorageLocation,
        remote: &RemoteOptions,
        options: &ForeignOptions,
    ) -> Result<Self> {
        Self::open_place(&Place::at(location, remote), options)
    }

    fn open_place(place: &Place, options: &ForeignOptions) -> Result<Self> {
        let kind = RecordKind::of(options);
        let files = RecordFiles::open(
            ForeignFormat::TfRecord,
            place,
            &["tfrecord", "tfrecord.gz"],
            &format!("{kind:?}"),
        )?;
        Ok(TfRecordShards { files, kind })
    }

    /// The same shards with their record counts as length hints (one pass over every
    /// file, crcs checked).
    ///
    /// # Errors
    /// The first damaged record's error, naming the file.
    pub fn count_lengths(mut self) -> Result<Self> {
        self.files = self.files.counted(|fs, name| {
            let mut f = Framing::open(fs, name, ShardPos::START)?;
            while f.next().map_err(|e| fs.err(name, e))?.is_some() {}
            Ok(f.record)
        })?;
        Ok(self)
    }

    /// The files, in shard order.
    pub fn files(&self) -> Vec<PathBuf> {
        self.files.paths()
    }

    /// The dtype of the ids (`i64` for Examples).
    pub fn dtype(&self) -> Primitive {
        self.kind.dtype()
    }

    /// The `tfrecord2idx` index of shard `shard` read from `index` (a local path or URL of a
    /// text file: one `offset length` line per record, `length` counting the 16 framing
    /// bytes), every line checked against the file: offsets follow each other from 0 and
    /// land on a record whose length crc holds and whose length matches. The positions
    /// ([`ShardPos`] with the record and its offset) open the shard at that record
    /// ([`SequentialSource::open`]).
    ///
    /// # Errors
    /// [`ForeignError::BadRecordIndex`] naming the index file and line; read errors.
    pub fn read_index(&self, shard: usize, index: &str) -> Result<Vec<ShardPos>> {
        let (dir, names) = expand(ForeignFormat::TfRecord, &Place::parse(index)?, &[])?;
        let ifs = Fs::new(ForeignFormat::TfRecord, dir);
        let iname = names.first().cloned().unwrap_or_default();
        let text = ifs.read_whole(&iname, MAX_INDEX_BYTES)?;
        let name = self.files.names.get(shard).ok_or_else(|| {
            ifs.err(&iname, ForeignError::BadRecordIndex { line: 0, reason: format!("no shard {shard}") })
        })?;
        let fs = &self.files.fs;
        let size = fs.len(name)?;
        let mut out = Vec::new();
        let mut expect = 0u64;
        for (i, line) in String::from_utf8_lossy(&text).lines().enumerate() {
            let bad =
                |reason: String| ifs.err(&iname, ForeignError::BadRecordIndex { line: i as u64 + 1, reason });
            let mut parts = line.split_ascii_whitespace().map(str::parse::<u64>);
            let (Some(Ok(offset)), Some(Ok(length)), None) = (parts.next(), parts.next(), parts.next())
            else {
                return Err(bad(format!("{line:?} is not `offset length`")));
            };
            if offset != expect || length < 16 || offset.checked_add(length).is_none_or(|e| e > size) {
                return Err(bad(format!("record at {offset} of {length} bytes: the records before end at {expect}, the file at {size}")));
            }
            let head = fs.read(name, offset, 12)?;
            if !length_crc_matches(&head) || u64_at(&head, 0) + 16 != length {
                return Err(bad(format!("no record of {length} bytes at offset {offset}")));
            }
            out.push(ShardPos { record: i as u64, offset });
            expect = offset + length;
        }
        Ok(out)
    }
}

/// The reader of one shard of [`TfRecordShards`].
#[derive(Debug)]
pub struct TfRecordReader {
    framing: Framing,
    shards: TfRecordShards,
    shard: u64,
}

impl ShardReader for TfRecordReader {
    type Item = Vec<i64>;

    fn next_record(&mut self) -> Result<Option<Vec<i64>>, LoaderError> {
        let record = self.framing.record;
        let files = &self.shards.files;
        let name = &files.names[self.shard as usize];
        let fail = |e: ForeignError| LoaderError::shard(self.shard, record, files.fs.err(name, e));
        let Some(data) = self.framing.next().map_err(fail)? else { return Ok(None) };
        let tokens = self.shards.kind.tokens(record, &data).map_err(fail)?;
        widen(&tokens).map(Some).map_err(fail)
    }

    fn pos(&self) -> ShardPos {
        ShardPos { record: self.framing.record, offset: self.framing.offset }
    }
}

impl SequentialSource for TfRecordShards {
    type Item = Vec<i64>;
    type Reader = TfRecordReader;

    fn shards(&self) -> Vec<ShardInfo> {
        self.files.shards()
    }

    fn open(&self, shard: u64, at: ShardPos) -> Result<TfRecordReader, LoaderError> {
        let name = self.files.name(shard)?;
        let framing =
            Framing::open(&self.files.fs, name, at).map_err(|e| LoaderError::shard(shard, at.record, e))?;
        Ok(TfRecordReader { framing, shards: self.clone(), shard })
    }

    fn fingerprint(&self) -> u64 {
        self.files.fingerprint
    }
}

/// Opens TFRecord files as one token stream (every record read once on open, its ids held
/// in memory): documents are records.
pub(crate) fn open(place: &Place, options: &ForeignOptions) -> Result<Parts> {
    let shards = TfRecordShards::open_place(place, options)?;
    let fs = &shards.files.fs;
    let mut out = Collected::new(fs, Some(shards.kind.dtype()));
    for name in &shards.files.names {
        let mut framing = Framing::open(fs, name, ShardPos::START)?;
        loop {
            let record = framing.record;
            let Some(data) = framing.next().map_err(|e| fs.err(name, e))? else { break };
            let tokens = shards.kind.tokens(record, &data).map_err(|e| fs.err(name, e))?;
            out.push(tokens).map_err(|e| fs.err(name, in_record(format!("record {record}"))(e)))?;
        }
        out.end_file(name, framing.record);
    }
    Ok(out.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masked_crc_is_tensorflows() {
        // crc32c("123456789") = 0xe3069283 (RFC 3720 check value), masked.
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(masked_crc(b"123456789"), 0xe306_9283u32.rotate_right(15).wrapping_add(MASK_DELTA));
    }
}
