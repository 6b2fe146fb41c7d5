//! MDS `index.json`, typed: [`decode`] turns its bytes into an [`Index`] (serde), [`validate`]
//! checks it (versions, shard formats, columns and their encodings, one token column) into the
//! [`Checked`] shard list the reader opens. Neither reads a file.
//!
//! Source: mosaicml/streaming `streaming/base/format/index.py` (`get_index_basename`, version 2)
//! and `streaming/base/format/mds/writer.py` (`MDSWriter.get_config`, `Writer._write_index`:
//! the shard entries).

use std::collections::BTreeMap;

use guideloom_formats::Primitive;
use serde::Deserialize;

use crate::error::ForeignError;
use crate::layouts::json::decode_object;
use crate::layouts::mds::encoding::{known_encoding, token_column, token_encoding, TokenEncoding};
use crate::options::ForeignOptions;

/// `index.json` as written: every field optional here, so that [`validate`] reports a missing
/// one by name, in the order the checks go.
#[derive(Debug, Deserialize)]
pub(crate) struct Index {
    version: Option<i64>,
    shards: Option<Vec<Shard>>,
}

/// One entry of `shards`.
#[derive(Debug, Deserialize)]
struct Shard {
    version: Option<i64>,
    format: Option<String>,
    column_names: Option<Vec<String>>,
    column_encodings: Option<Vec<String>>,
    /// Per column: its fixed size in bytes, or `null` for a variable-size column.
    column_sizes: Option<Vec<Option<u64>>>,
    compression: Option<String>,
    raw_data: Option<FileData>,
    zip_data: Option<FileData>,
    samples: Option<u64>,
}

/// `raw_data` / `zip_data` of a shard entry.
#[derive(Debug, Deserialize)]
struct FileData {
    basename: Option<String>,
    bytes: Option<u64>,
    /// Hex digest by algorithm name (`sha1`, `xxh3_64`, ...).
    #[serde(default)]
    hashes: BTreeMap<String, String>,
}

/// A shard file named by the index: its basename (relative to the dataset's directory, not yet
/// checked to stay inside it), size and hashes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileRef {
    /// The basename as the index gives it.
    pub(crate) name: String,
    /// `bytes`.
    pub(crate) bytes: u64,
    /// `(algorithm, hex digest)`, in algorithm order.
    pub(crate) hashes: Vec<(String, String)>,
}

/// One shard entry, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    /// The column names, in the index's order.
    pub(crate) names: Vec<String>,
    /// Per column: the fixed size, or `None` (variable size: a u32 length in each sample).
    pub(crate) sizes: Vec<Option<u64>>,
    /// `compression` (`zstd`, `gz`, with an optional `:level`).
    pub(crate) compression: Option<String>,
    /// Samples in the shard.
    pub(crate) samples: u64,
    /// The uncompressed shard.
    pub(crate) raw: FileRef,
    /// The compressed shard, when the writer compressed.
    pub(crate) zip: Option<FileRef>,
}

/// A checked index: the shards, and the token column they share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Checked {
    /// Every shard, in index order.
    pub(crate) entries: Vec<Entry>,
    /// The token column's name ...
    pub(crate) column: String,
    /// ... its encoding as the index names it ...
    pub(crate) column_encoding: String,
    /// ... and how it stores tokens.
    pub(crate) encoding: TokenEncoding,
}

impl Checked {
    /// The token dtype the encoding fixes (`None`: an untyped `ndarray`, whose samples say).
    pub(crate) fn dtype(&self, options: &ForeignOptions) -> Option<Primitive> {
        match self.encoding {
            TokenEncoding::Bytes(p) | TokenEncoding::Fixed(p) | TokenEncoding::Typed(p) => Some(p),
            TokenEncoding::Untyped => options.dtype,
        }
    }
}

/// The index in `text` (a JSON object).
///
/// # Errors
/// [`ForeignError::InvalidIndex`] with serde's message when it is not JSON or a field has the
/// wrong type.
pub(crate) fn decode(text: &[u8]) -> Result<Index, ForeignError> {
    decode_object(text)
}

/// The field `key` of `what`, or the error naming it.
fn need<T>(value: Option<T>, what: &str, key: &str) -> Result<T, ForeignError> {
    value.ok_or_else(|| ForeignError::InvalidIndex { reason: format!("{what} has no `{key}`") })
}

/// `raw_data` / `zip_data` of `what`, checked for its fields.
fn file_ref(data: FileData, what: &str) -> Result<FileRef, ForeignError> {
    let name = need(data.basename, what, "basename")?;
    let bytes = need(data.bytes, what, "bytes")?;
    Ok(FileRef { name, bytes, hashes: data.hashes.into_iter().collect() })
}

/// Checks `index` as the reader needs it, before any shard is opened: index version 2; per
/// shard (in order) version 2, format `mds`, column names, encodings and sizes of one length,
/// no `pkl` column and no unknown encoding, the token column ([`ForeignOptions::column`], else
/// `tokens`, else the only one that can hold tokens) of one name and encoding in every shard,
/// `raw_data`, and `samples`.
///
/// # Errors
/// [`ForeignError::UnsupportedIndexVersion`], [`ForeignError::UnsupportedShardVersion`],
/// [`ForeignError::UnsupportedShardFormat`], [`ForeignError::UnsafeEncoding`],
/// [`ForeignError::UnknownEncoding`], [`ForeignError::TokenColumn`],
/// [`ForeignError::UnsupportedTokenDType`], [`ForeignError::MixedDTypes`] (shards with another
/// token column), [`ForeignError::InvalidIndex`] naming a missing field.
pub(crate) fn validate(index: Index, options: &ForeignOptions) -> Result<Checked, ForeignError> {
    let version = need(index.version, "the index", "version")?;
    if version != 2 {
        return Err(ForeignError::UnsupportedIndexVersion { found: version });
    }
    let shards = need(index.shards, "the index", "shards")?;
    let mut entries = Vec::with_capacity(shards.len());
    let mut token: Option<(String, String, TokenEncoding)> = None;
    for (i, s) in shards.into_iter().enumerate() {
        let what = format!("shards[{i}]");
        let v = need(s.version, &what, "version")?;
        if v != 2 {
            return Err(ForeignError::UnsupportedShardVersion { shard: i as u64, found: v });
        }
        let f = need(s.format, &what, "format")?;
        if f != "mds" {
            return Err(ForeignError::UnsupportedShardFormat { shard: i as u64, found: f });
        }
        let names = need(s.column_names, &what, "column_names")?;
        let encodings = need(s.column_encodings, &what, "column_encodings")?;
        let sizes = need(s.column_sizes, &what, "column_sizes")?;
        if names.len() != encodings.len() || names.len() != sizes.len() {
            return Err(ForeignError::InvalidIndex {
                reason: format!("{what}: column names, encodings and sizes differ in length"),
            });
        }
        for (name, enc) in names.iter().zip(&encodings) {
            if enc == "pkl" {
                return Err(ForeignError::UnsafeEncoding { column: name.clone(), encoding: enc.clone() });
            }
            if !known_encoding(enc) {
                return Err(ForeignError::UnknownEncoding { column: name.clone(), encoding: enc.clone() });
            }
        }
        let col = token_column(&names, &encodings, options)?;
        let enc = token_encoding(&encodings[col], options)?;
        match &token {
            Some((n, e, _)) if *n != names[col] || *e != encodings[col] => {
                return Err(ForeignError::MixedDTypes {
                    expected: format!("{n}: {e}"),
                    found: format!("{}: {}", names[col], encodings[col]),
                })
            }
            _ => token = Some((names[col].clone(), encodings[col].clone(), enc)),
        }
        let raw = file_ref(need(s.raw_data, &what, "raw_data")?, &format!("{what}.raw_data"))?;
        let zip = s.zip_data.map(|z| file_ref(z, &format!("{what}.zip_data"))).transpose()?;
        let samples = need(s.samples, &what, "samples")?;
        entries.push(Entry { names, sizes, compression: s.compression, samples, raw, zip });
    }
    let (column, column_encoding, encoding) =
        token.ok_or_else(|| ForeignError::TokenColumn { reason: "the index lists no shard".into() })?;
    Ok(Checked { entries, column, column_encoding, encoding })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(shards: &str) -> String {
        format!(r#"{{"version": 2, "shards": [{shards}]}}"#)
    }

    const SHARD: &str = r#"{"column_encodings": ["ndarray:int32", "str"], "column_names": ["tokens", "text"],
        "column_sizes": [null, null], "compression": "zstd", "format": "mds", "hashes": ["sha1"],
        "raw_data": {"basename": "shard.00000.mds", "bytes": 267, "hashes": {"xxh3_64": "ab", "sha1": "cd"}},
        "samples": 3, "size_limit": 67108864, "version": 2,
        "zip_data": {"basename": "shard.00000.mds.zstd", "bytes": 120, "hashes": {}}}"#;

    #[test]
    fn a_writers_index_decodes_and_validates_into_its_shards_and_token_column() {
        let checked = validate(decode(index(SHARD).as_bytes()).unwrap(), &ForeignOptions::new()).unwrap();
        assert_eq!((checked.column.as_str(), checked.column_encoding.as_str()), ("tokens", "ndarray:int32"));
        assert_eq!(checked.encoding, TokenEncoding::Typed(Primitive::I32));
        let e = &checked.entries[0];
        assert_eq!(
            (e.samples, e.sizes.as_slice(), e.compression.as_deref()),
            (3, &[None, None][..], Some("zstd"))
        );
        assert_eq!(e.raw.hashes, [("sha1".to_string(), "cd".to_string()), ("xxh3_64".into(), "ab".into())]);
        assert_eq!(e.zip.as_ref().map(|z| (z.name.as_str(), z.bytes)), Some(("shard.00000.mds.zstd", 120)));
    }

    #[test]
    fn missing_fields_are_named_and_checks_go_in_order() {
        let v = |text: &str| validate(decode(text.as_bytes())?, &ForeignOptions::new());
        let invalid = |reason: &str| Err(ForeignError::InvalidIndex { reason: reason.into() });
        assert_eq!(v(r#"{"shards": []}"#), invalid("the index has no `version`"));
        assert_eq!(v(r#"{"version": 1}"#), Err(ForeignError::UnsupportedIndexVersion { found: 1 }));
        assert_eq!(v(r#"{"version": 2}"#), invalid("the index has no `shards`"));
        assert_eq!(
            v(&index(r#"{"version": 1, "format": "json"}"#)),
            Err(ForeignError::UnsupportedShardVersion { shard: 0, found: 1 })
        );
        assert_eq!(v(&index(r#"{"version": 2}"#)), invalid("shards[0] has no `format`"));
        let no_samples = SHARD.replace(r#""samples": 3,"#, "");
        assert_eq!(v(&index(&no_samples)), invalid("shards[0] has no `samples`"));
        assert_eq!(
            v(&index("")),
            Err(ForeignError::TokenColumn { reason: "the index lists no shard".into() })
        );
        let pkl = SHARD.replace(r#"["ndarray:int32", "str"]"#, r#"["ndarray:int32", "pkl"]"#);
        assert_eq!(
            v(&index(&pkl)),
            Err(ForeignError::UnsafeEncoding { column: "text".into(), encoding: "pkl".into() })
        );
        // Not JSON, or not an object: serde's message (an array would otherwise fill the
        // fields by position).
        assert!(matches!(decode(b"{"), Err(ForeignError::InvalidIndex { .. })));
        assert!(matches!(decode(b" [2, []]"), Err(ForeignError::InvalidIndex { .. })));
        assert!(matches!(decode(br#"{"version": "2"}"#), Err(ForeignError::InvalidIndex { .. })));
    }
}
