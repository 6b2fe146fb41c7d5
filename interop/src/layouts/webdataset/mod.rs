//! WebDataset tar shards (webdataset/webdataset `src/webdataset/writer.py` `TarWriter` /
//! `ShardWriter`, `src/webdataset/tariterators.py` `base_plus_ext` / `group_by_keys`), read
//! in order: members ([`tar`]) grouped into samples by key, one field of each sample the
//! document's ids.
//!
//! A member `dir/key.field.ext` has key `dir/key` (everything up to the first dot of the
//! last path component) and field `field.ext` (lowercased); members without such a dot are
//! passed over, as webdataset does. Consecutive members with one key are one sample (a key
//! seen again later starts a new sample); a field twice in one sample is
//! [`ForeignError::DuplicateField`]. The token field ([`ForeignOptions::column`]): `npy`
//! by default, any field ending in `npy` (a `.npy` payload, integer dtype), `json:<key>`
//! (a list of integers under `<key>` of the `json` field), or a field of raw little-endian
//! ids with [`ForeignOptions::dtype`].

mod tar;

use std::collections::BTreeMap;
use std::path::PathBuf;

use guideloom_formats::Primitive;
use guideloom_loader::sequential::{SequentialSource, ShardInfo, ShardPos, ShardReader};
use guideloom_loader::LoaderError;
use guideloom_storage::{RemoteOptions, StorageLocation};

use crate::error::{ForeignError, Result};
use crate::files::{Fs, Place};
use crate::format::ForeignFormat;
use crate::layouts::records::{
    in_record, read_from, record_tokens, widen, Collected, RecordFiles, RecordTokens,
};
use crate::options::ForeignOptions;
use crate::parts::Parts;
use tar::{Member, Members};

/// The token field read by default.
const DEFAULT_FIELD: &str = "npy";

/// One sample of a WebDataset shard: its key (`__key__`) and its fields' bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WdsSample {
    /// The key (the member names' common part, directories included).
    pub key: String,
    /// Each field (`npy`, `json`, `txt`, `input_ids.npy`, ...) and its bytes.
    pub fields: BTreeMap<String, Vec<u8>>,
}

/// Splits a member name into key and field as webdataset's `base_plus_ext` does.
fn key_and_field(name: &str) -> Option<(&str, String)> {
    let base = name.rfind('/').map_or(0, |i| i + 1);
    let dot = base + name[base..].find('.')?;
    (dot > base).then(|| (&name[..dot], name[dot + 1..].to_lowercase()))
}

/// The samples of one shard.
struct Samples {
    members: Members,
    ahead: Option<Member>,
    record: u64,
}

impl Samples {
    /// Shard file `name` of `fs` from `at`.
    fn open(fs: &Fs, name: &str, at: ShardPos) -> Result<Self> {
        let (src, left) = read_from(fs, name, at.offset)?;
        Ok(Samples { members: Members::new(src, at.offset, 0, left), ahead: None, record: at.record })
    }

    /// The position of the next sample.
    fn pos(&self) -> ShardPos {
        let offset = self.ahead.as_ref().map_or(self.members.pos, |m| m.header_at);
        ShardPos { record: self.record, offset }
    }

    /// The next sample (`None` at the end).
    fn next(&mut self) -> std::result::Result<Option<WdsSample>, ForeignError> {
        let mut sample: Option<WdsSample> = None;
        loop {
            let member = match self.ahead.take() {
                Some(m) => m,
                None => match self.members.next()? {
                    Some(m) => m,
                    None => break,
                },
            };
            let Some((key, field)) = key_and_field(&member.name) else { continue };
            match sample.as_mut() {
                None => {
                    sample = Some(WdsSample {
                        key: key.to_string(),
                        fields: BTreeMap::from([(field, member.data)]),
                    })
                }
                Some(s) if s.key == key => {
                    if s.fields.contains_key(&field) {
                        return Err(ForeignError::DuplicateField { key: s.key.clone(), field });
                    }
                    s.fields.insert(field, member.data);
                }
                Some(_) => {
                    self.ahead = Some(member);
                    break;
                }
            }
        }
        self.record += u64::from(sample.is_some());
        Ok(sample)
    }
}

/// Which field of a sample holds its ids.
#[derive(Debug, Clone, PartialEq, Eq)]
enum TokenField {
    /// A `.npy` payload or raw ids of the dtype given, in this field.
    Bytes(String, Option<Primitive>),
    /// A list of integers under this key of the `json` field.
    Json(String),
}

impl TokenField {
    fn of(options: &ForeignOptions) -> Self {
        let spec = options.column.clone().unwrap_or_else(|| DEFAULT_FIELD.into());
        match spec.strip_prefix("json:") {
            Some(key) => TokenField::Json(key.to_string()),
            None => TokenField::Bytes(spec.to_lowercase(), options.dtype),
        }
    }

    fn name(&self) -> &str {
        match self {
            TokenField::Bytes(f, _) => f,
            TokenField::Json(_) => "json",
        }
    }

    /// The ids of `sample`.
    fn tokens(&self, sample: &WdsSample) -> std::result::Result<RecordTokens, ForeignError> {
        let field = self.name();
        let Some(bytes) = sample.fields.get(field) else {
            return Err(ForeignError::MissingField { key: sample.key.clone(), field: field.to_string() });
        };
        let at = format!("sample {} field {field}", sample.key);
        match self {
            TokenField::Bytes(_, dtype) => record_tokens(bytes, *dtype).map_err(in_record(at)),
            TokenField::Json(key) => {
                let bad = |found: &str| {
                    in_record(at.clone())(ForeignError::UnsupportedTokenType { found: found.into() })
                };
                let value: serde_json::Value = serde_json::from_slice(bytes)
                    .map_err(|e| bad(&format!("JSON that does not parse ({e})")))?;
                let list = value
                    .get(key)
                    .and_then(|v| v.as_array())
                    .ok_or_else(|| bad(&format!("no list under {key:?}")))?;
                let mut out = Vec::with_capacity(list.len() * 8);
                for v in list {
                    out.extend_from_slice(
                        &v.as_i64().ok_or_else(|| bad(&format!("{v} in {key:?}")))?.to_le_bytes(),
                    );
                }
                Ok(RecordTokens { dtype: Primitive::I64, bytes: out })
            }
        }
    }
}

/// WebDataset tar shards as a sequential source: each shard file one shard (as webdataset
/// splits by node and worker), each sample one document of ids from the token field
/// (widened to `i64`), in the order given (a glob or a directory: `*.tar`, `*.tar.gz`,
/// `*.tgz` sorted byte-wise). Positions are the byte offset of a sample's first header (of
/// the decompressed stream for gzip: resuming one reads it again from its start).
#[derive(Debug, Clone)]
pub struct WebDatasetShards {
    files: RecordFiles,
    field: TokenField,
}

impl WebDatasetShards {
    /// The shards at `location` (a file, a glob, a directory; a local path or an
    /// object-store URL, the store's options from the environment), ids from
    /// [`ForeignOptions::column`] (`npy` by default; `input_ids.npy`; `json:<key>`).
    ///
    /// # Errors
    /// [`ForeignError::NoFiles`] when nothing matches; [`crate::InteropError::Storage`] when
    /// the files cannot be listed or their sizes read.
    pub fn open(location: &str, options: &ForeignOptions) -> Result<Self> {
        Self::open_place(&Place::parse(location)?, options)
    }

    /// [`WebDatasetShards::open`] with the store's options given.
    ///
    /// # Errors
    /// As [`WebDatasetShards::open`].
    pub fn open_at(
        location: &StorageLocation,
        remote: &RemoteOptions,
        options: &ForeignOptions,
    ) -> Result<Self> {
        Self::open_place(&Place::at(location, remote), options)
    }

    fn open_place(place: &Place, options: &ForeignOptions) -> Result<Self> {
        let field = TokenField::of(options);
        let files = RecordFiles::open(
            ForeignFormat::WebDataset,
            place,
            &["tar", "tar.gz", "tgz"],
            &format!("{field:?}"),
        )?;
        Ok(WebDatasetShards { files, field })
    }

    /// The same shards with their sample counts as length hints (one pass over every
    /// shard's headers and data).
    ///
    /// # Errors
    /// The first damaged member's error, naming the file.
    pub fn count_lengths(mut self) -> Result<Self> {
        self.files = self.files.counted(|fs, name| {
            let mut s = Samples::open(fs, name, ShardPos::START)?;
            while s.next().map_err(|e| fs.err(name, e))?.is_some() {}
            Ok(s.record)
        })?;
        Ok(self)
    }

    /// The shard files, in shard order.
    pub fn files(&self) -> Vec<PathBuf> {
        self.files.paths()
    }

    /// Every sample of shard `shard`, with all its fields (for the fields other than the
    /// tokens: `json`, `txt`, `cls`).
    ///
    /// # Errors
    /// [`crate::InteropError::Dataset`] naming the shard for a damaged member or sample;
    /// [`crate::InteropError::Storage`] for a shard number past the last or a read error.
    pub fn samples(&self, shard: usize) -> Result<Vec<WdsSample>> {
        let name = self.files.names.get(shard).ok_or(guideloom_storage::StorageError::OutOfRange {
            what: "shard",
            start: shard as u64,
            len: 1,
            total: self.files.names.len() as u64,
        })?;
        let mut s = Samples::open(&self.files.fs, name, ShardPos::START)?;
        let mut out = Vec::new();
        while let Some(x) = s.next().map_err(|e| self.files.fs.err(name, e))? {
            out.push(x);
        }
        Ok(out)
    }
}

impl WebDatasetShards {
    /// The samples of shard `shard` from `at`.
    fn samples_at(&self, shard: u64, at: ShardPos) -> Result<Samples, LoaderError> {
        let name = self.files.name(shard)?;
        Samples::open(&self.files.fs, name, at).map_err(|e| LoaderError::shard(shard, at.record, e))
    }

    /// A reader of shard `shard`'s samples with all their fields, from `at` (a position a
    /// reader of this source reported): for token fields read otherwise than as ids (a
    /// `txt` field tokenized by the caller).
    ///
    /// # Errors
    /// As [`SequentialSource::open`].
    pub fn open_samples(&self, shard: u64, at: ShardPos) -> Result<WebDatasetSampleReader, LoaderError> {
        let samples = self.samples_at(shard, at)?;
        Ok(WebDatasetSampleReader { samples, shards: self.clone(), shard })
    }
}

/// The samples of one shard of [`WebDatasetShards`], every field kept
/// ([`WebDatasetShards::open_samples`]).
#[derive(Debug)]
pub struct WebDatasetSampleReader {
    samples: Samples,
    shards: WebDatasetShards,
    shard: u64,
}

impl WebDatasetSampleReader {
    /// The next sample, or `None` at the end of the shard.
    ///
    /// # Errors
    /// [`LoaderError::Shard`] naming the shard and sample, its source the damaged member's
    /// error naming the file.
    pub fn next_sample(&mut self) -> Result<Option<WdsSample>, LoaderError> {
        let record = self.samples.record;
        let name = &self.shards.files.names[self.shard as usize];
        self.samples
            .next()
            .map_err(|e| LoaderError::shard(self.shard, record, self.shards.files.fs.err(name, e)))
    }

    /// The position of the next sample.
    pub fn pos(&self) -> ShardPos {
        self.samples.pos()
    }
}

/// The reader of one shard of [`WebDatasetShards`].
#[derive(Debug)]
pub struct WebDatasetReader {
    samples: Samples,
    shards: WebDatasetShards,
    shard: u64,
}

impl std::fmt::Debug for Samples {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Samples").field("record", &self.record).field("members", &self.members).finish()
    }
}

impl ShardReader for WebDatasetReader {
    type Item = Vec<i64>;

    fn next_record(&mut self) -> Result<Option<Vec<i64>>, LoaderError> {
        let record = self.samples.record;
        let name = &self.shards.files.names[self.shard as usize];
        let fail =
            |e: ForeignError| LoaderError::shard(self.shard, record, self.shards.files.fs.err(name, e));
        let Some(sample) = self.samples.next().map_err(fail)? else { return Ok(None) };
        let tokens = self.shards.field.tokens(&sample).map_err(fail)?;
        widen(&tokens).map(Some).map_err(fail)
    }

    fn pos(&self) -> ShardPos {
        self.samples.pos()
    }
}

impl SequentialSource for WebDatasetShards {
    type Item = Vec<i64>;
    type Reader = WebDatasetReader;

    fn shards(&self) -> Vec<ShardInfo> {
        self.files.shards()
    }

    fn open(&self, shard: u64, at: ShardPos) -> Result<WebDatasetReader, LoaderError> {
        let samples = self.samples_at(shard, at)?;
        Ok(WebDatasetReader { samples, shards: self.clone(), shard })
    }

    fn fingerprint(&self) -> u64 {
        self.files.fingerprint
    }
}

/// Opens WebDataset shards as one token stream (every shard read once on open, the ids held
/// in memory): documents are samples; every sample's token field must share one dtype.
pub(crate) fn open(place: &Place, options: &ForeignOptions) -> Result<Parts> {
    let shards = WebDatasetShards::open_place(place, options)?;
    let fs = &shards.files.fs;
    let mut out = Collected::new(fs, options.dtype);
    for name in &shards.files.names {
        let mut samples = Samples::open(fs, name, ShardPos::START)?;
        while let Some(sample) = samples.next().map_err(|e| fs.err(name, e))? {
            let tokens = shards.field.tokens(&sample).map_err(|e| fs.err(name, e))?;
            out.push(tokens).map_err(|e| fs.err(name, in_record(format!("sample {}", sample.key))(e)))?;
        }
        out.end_file(name, samples.record);
    }
    Ok(out.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_split_at_the_first_dot_of_the_last_component() {
        assert_eq!(key_and_field("doc000017.npy"), Some(("doc000017", "npy".to_string())));
        assert_eq!(
            key_and_field("dir.v1/sub.dir/k00.input_ids.NPY"),
            Some(("dir.v1/sub.dir/k00", "input_ids.npy".to_string()))
        );
        assert_eq!(key_and_field("dir.v1/README"), None);
        assert_eq!(key_and_field("dir/.hidden"), None);
    }
}
