//! litdata `index.json`, typed: [`decode`] turns its bytes into an [`Index`] (serde),
//! [`validate`] checks it (no encryption or compression, the leaves' serializers, one token
//! leaf, the item loader, the chunk list) into the [`Checked`] form the reader opens. Neither
//! reads a file.
//!
//! Source: Lightning-AI/litdata `src/litdata/streaming/writer.py` (`BinaryWriter.get_config`,
//! `write_chunks_index`) and `config.py` (`ChunksConfig`).

use serde::de::IgnoredAny;
use serde::Deserialize;

use crate::error::ForeignError;
use crate::layouts::json::decode_object;
use crate::layouts::litdata::leaf::{leaf, Leaf};
use crate::options::ForeignOptions;

/// `index.json` as written: fields optional here, so that [`validate`] reports a missing one
/// by name, in the order the checks go.
#[derive(Debug, Deserialize)]
pub(crate) struct Index {
    config: Option<Config>,
    chunks: Option<Vec<Chunk>>,
}

/// `config`.
#[derive(Debug, Deserialize)]
struct Config {
    /// Anything but `null` means encrypted chunks.
    encryption: Option<IgnoredAny>,
    compression: Option<String>,
    compression_level: Option<String>,
    data_format: Option<Vec<String>>,
    item_loader: Option<String>,
}

/// One entry of `chunks`.
#[derive(Debug, Deserialize)]
struct Chunk {
    filename: Option<String>,
    chunk_size: Option<u64>,
    dim: Option<u64>,
}

/// One chunk file of the index, checked for its fields (its name not yet checked to stay
/// inside the dataset's directory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ChunkRef {
    /// `filename`.
    pub(crate) name: String,
    /// `chunk_size`: the items the chunk holds, when given.
    pub(crate) items: Option<u64>,
    /// `dim`: the tokens of a `TokensLoader` chunk, when given.
    pub(crate) dim: Option<u64>,
}

/// A checked index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Checked {
    /// `config.data_format`: each leaf's serializer.
    pub(crate) formats: Vec<String>,
    /// The token leaf's position among them ...
    pub(crate) token_leaf: usize,
    /// ... and how it stores tokens.
    pub(crate) kind: Leaf,
    /// `config.item_loader` (default `PyTreeLoader`).
    pub(crate) loader: String,
    /// Whether it is the `TokensLoader` (items are the raw token arrays back to back).
    pub(crate) tokens_loader: bool,
    /// The chunks, in index order.
    pub(crate) chunks: Vec<ChunkRef>,
}

/// The index in `text` (a JSON object).
///
/// # Errors
/// [`ForeignError::InvalidIndex`] with serde's message when it is not JSON or a field has the
/// wrong type.
pub(crate) fn decode(text: &[u8]) -> Result<Index, ForeignError> {
    decode_object(text)
}

/// Checks `index` as the reader needs it, before any chunk is opened: a `config` without
/// encryption or compression, serializers that are known and not `pickle`, one array leaf for
/// the tokens ([`ForeignOptions::column`]: its index; else the only array leaf), the
/// `TokensLoader` or `PyTreeLoader` (a `TokensLoader` dataset is one headerless array), and a
/// file name for every chunk.
///
/// # Errors
/// [`ForeignError::Encrypted`], [`ForeignError::UnsupportedCompression`] (a compression or
/// another item loader), [`ForeignError::UnsafeEncoding`], [`ForeignError::UnknownEncoding`],
/// [`ForeignError::UnsupportedTokenDType`], [`ForeignError::TokenColumn`],
/// [`ForeignError::InvalidIndex`] naming a missing field.
pub(crate) fn validate(index: Index, options: &ForeignOptions) -> Result<Checked, ForeignError> {
    let invalid = |reason: &str| ForeignError::InvalidIndex { reason: reason.into() };
    let config = index.config.ok_or_else(|| invalid("no `config`"))?;
    if config.encryption.is_some() {
        return Err(ForeignError::Encrypted);
    }
    if let Some(c) = config.compression {
        let level = config.compression_level.as_deref().unwrap_or("chunk");
        return Err(ForeignError::UnsupportedCompression { compression: format!("{c} {level}") });
    }
    let formats = config.data_format.ok_or_else(|| invalid("config.data_format is not a list"))?;
    let leaves = formats.iter().map(|f| leaf(f)).collect::<Result<Vec<_>, _>>()?;
    let token_leaf = match &options.column {
        Some(c) => {
            c.parse::<usize>().ok().filter(|&i| leaves.get(i).is_some_and(Option::is_some)).ok_or_else(
                || ForeignError::TokenColumn {
                    reason: format!("leaf {c:?} is not an array leaf of {formats:?}"),
                },
            )?
        }
        None => {
            let arrays: Vec<usize> = (0..leaves.len()).filter(|&i| leaves[i].is_some()).collect();
            match arrays.as_slice() {
                [i] => *i,
                _ => {
                    return Err(ForeignError::TokenColumn {
                        reason: format!(
                            "{} array leaves in {formats:?}: name the token leaf's index",
                            arrays.len()
                        ),
                    })
                }
            }
        }
    };
    let kind = leaves[token_leaf].unwrap_or(Leaf::Numpy);
    let loader = config.item_loader.unwrap_or_else(|| "PyTreeLoader".into());
    let tokens_loader = match loader.as_str() {
        "TokensLoader" => true,
        "PyTreeLoader" => false,
        other => {
            return Err(ForeignError::UnsupportedCompression { compression: format!("item loader {other}") })
        }
    };
    if tokens_loader && (formats.len() != 1 || !matches!(kind, Leaf::Raw(_))) {
        return Err(ForeignError::TokenColumn {
            reason: format!("a TokensLoader dataset of {formats:?}, not one headerless array"),
        });
    }
    let chunks = index.chunks.ok_or_else(|| invalid("`chunks` is not a list"))?;
    let chunks = chunks
        .into_iter()
        .enumerate()
        .map(|(ci, c)| {
            let name =
                c.filename.ok_or_else(|| invalid(&format!("chunks[{ci}].filename is not a string")))?;
            Ok(ChunkRef { name, items: c.chunk_size, dim: c.dim })
        })
        .collect::<Result<_, ForeignError>>()?;
    Ok(Checked { formats, token_leaf, kind, loader, tokens_loader, chunks })
}

#[cfg(test)]
mod tests {
    use guideloom_formats::Primitive;

    use super::*;

    const CONFIG: &str = r#""config": {"chunk_bytes": null, "chunk_size": 8, "compression": null,
        "compression_level": null, "data_format": ["no_header_numpy:5"], "encryption": null,
        "item_loader": "TokensLoader", "types": "json"}"#;

    fn check(text: &str) -> Result<Checked, ForeignError> {
        validate(decode(text.as_bytes())?, &ForeignOptions::new())
    }

    #[test]
    fn a_writers_index_decodes_and_validates_into_its_leaf_and_chunks() {
        let text = format!(
            r#"{{"chunks": [{{"chunk_bytes": 30, "chunk_size": 2, "dim": 7, "filename": "chunk-0-0.bin"}}], {CONFIG}}}"#
        );
        let c = check(&text).unwrap();
        assert_eq!(
            (c.token_leaf, c.kind, c.tokens_loader, c.loader.as_str()),
            (0, Leaf::Raw(Primitive::U16), true, "TokensLoader")
        );
        assert_eq!(c.chunks, [ChunkRef { name: "chunk-0-0.bin".into(), items: Some(2), dim: Some(7) }]);
    }

    #[test]
    fn refusals_come_in_the_order_of_the_checks() {
        let invalid = |reason: &str| Err(ForeignError::InvalidIndex { reason: reason.into() });
        assert_eq!(check(r#"{"chunks": []}"#), invalid("no `config`"));
        assert_eq!(
            check(r#"{"config": {"encryption": false, "compression": "zstd"}}"#),
            Err(ForeignError::Encrypted)
        );
        assert_eq!(
            check(r#"{"config": {"compression": "zstd", "compression_level": "batch"}}"#),
            Err(ForeignError::UnsupportedCompression { compression: "zstd batch".into() })
        );
        assert_eq!(check(r#"{"config": {}}"#), invalid("config.data_format is not a list"));
        assert_eq!(
            check(r#"{"config": {"data_format": ["pickle"]}}"#),
            Err(ForeignError::UnsafeEncoding { column: "data_format".into(), encoding: "pickle".into() })
        );
        assert_eq!(check(&format!("{{{CONFIG}}}")), invalid("`chunks` is not a list"));
        assert_eq!(
            check(&format!(r#"{{"chunks": [{{"dim": 1}}], {CONFIG}}}"#)),
            invalid("chunks[0].filename is not a string")
        );
    }
}
