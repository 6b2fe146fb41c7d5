//! MosaicML Streaming MDS datasets: `index.json` (version 2) + `shard.NNNNN.mds[.<compression>]`.
//!
//! Layout (mosaicml/streaming `streaming/base/format/mds/writer.py`
//! `MDSWriter.encode_joint_shard`, `reader.py`, `encodings.py`): a shard is u32 `n`, `u32[n+1]`
//! absolute byte offsets of the samples (the last = file size), the shard's config as JSON,
//! then the samples. A sample holds one u32 byte length per variable-size column (in column
//! order, columns sorted by name), then the columns' bytes. A token column is `ndarray`
//! (`[dtype u8][shape header][values]`), `ndarray:<dtype>` (`[shape header][values]`),
//! `ndarray:<dtype>:<shape>` (values only) or `bytes` (values of a configured dtype, LLM
//! Foundry's older writer: int64). Each sample is one document. `pkl` columns are refused.
//!
//! The reader: [`index::decode`] and [`index::validate`] check `index.json` without reading a
//! shard; then each shard is found (raw, or compressed and inflated into memory by
//! [`codec`]), hashed when asked, and its samples' token runs located ([`shard::samples`]).

mod codec;
mod encoding;
mod index;
mod shard;

use std::sync::Arc;

use guideloom_formats::Primitive;
use guideloom_storage::Segment;

use crate::error::{ForeignError, Result};
use crate::files::{Fs, Place};
use crate::format::ForeignFormat;
use crate::layouts::json::read_index;
use crate::options::ForeignOptions;
use crate::parts::{ForeignDetails, ForeignFile, Parts};

use self::codec::{check_hashes, decompress};
use self::index::Entry;
use self::shard::{ShardBytes, TokenColumn};

/// Opens the MDS dataset whose `index.json` is in the directory `place`.
pub(crate) fn open(place: &Place, options: &ForeignOptions) -> Result<Parts> {
    let fs = Fs::new(ForeignFormat::Mds, place.dir()?);
    let (text, checked) = read_index(&fs, |text| index::validate(index::decode(text)?, options))?;
    // Every name stays inside the directory, before any shard file is opened.
    for e in &checked.entries {
        fs.safe_name(&e.raw.name)?;
        if let Some(z) = &e.zip {
            fs.safe_name(&z.name)?;
        }
    }
    let dtype = checked.dtype(options);
    let mut parts = Parts::new(&fs, dtype.unwrap_or(Primitive::U8));
    parts.index_hash = xxhash_rust::xxh3::xxh3_64(&text);
    let mut column = TokenColumn { name: &checked.column, encoding: &checked.encoding, dtype };
    let mut documents = vec![0u64];
    let mut samples_per_shard = Vec::with_capacity(checked.entries.len());
    let mut global = 0u64;
    for (i, e) in checked.entries.iter().enumerate() {
        let name = &e.raw.name;
        let bytes = shard_bytes(&fs, e, options, &mut parts)?;
        let size = match &bytes {
            ShardBytes::File(n) => fs.len(n)?,
            ShardBytes::Mem(b) => b.len() as u64,
        };
        if size != e.raw.bytes {
            return Err(fs.err(name, ForeignError::ShardSizeMismatch { index: e.raw.bytes, file: size }));
        }
        let runs = shard::samples(&fs, name, (&bytes, size), e, &mut column, global)?;
        let mut elements = 0u64;
        for &(offset, tokens) in &runs {
            parts.segments.push(Segment { file: i, offset, elements: tokens });
            documents.push(documents[documents.len() - 1] + tokens);
            elements += tokens;
        }
        parts.files.push(ForeignFile { path: name.into(), bytes: size, elements });
        samples_per_shard.push(runs.len() as u64);
        global += runs.len() as u64;
    }
    parts.dtype = column.dtype.unwrap_or(Primitive::U8);
    parts.documents = Some(documents);
    parts.details =
        ForeignDetails::Mds { samples: samples_per_shard, column: (checked.column, checked.column_encoding) };
    Ok(parts)
}

/// The bytes of shard `e`: the raw file when it is there with the index's size (or there is no
/// compressed one), else the compressed file inflated into memory (and kept in `parts.mem`);
/// hashes checked with [`ForeignOptions::verify_hashes`].
///
/// # Errors
/// [`ForeignError::ShardNotFound`] when neither file exists; the hash and decompression
/// errors of [`codec`]; read errors.
fn shard_bytes(fs: &Fs, e: &Entry, options: &ForeignOptions, parts: &mut Parts) -> Result<ShardBytes> {
    let raw = &e.raw;
    let use_raw = match (fs.len_opt(&raw.name)?, &e.zip) {
        (Some(l), _) if l == raw.bytes => true,
        (Some(_), None) => true,
        _ => false,
    };
    if use_raw {
        if options.verify_hashes && !raw.hashes.is_empty() {
            let bytes = fs.read_whole(&raw.name, u64::MAX)?;
            check_hashes(&raw.hashes, &bytes).map_err(|x| fs.err(&raw.name, x))?;
        }
        return Ok(ShardBytes::File(raw.name.clone()));
    }
    let zip = e
        .zip
        .as_ref()
        .filter(|z| fs.len_opt(&z.name).ok().flatten().is_some())
        .ok_or_else(|| fs.err(&raw.name, ForeignError::ShardNotFound { basename: raw.name.clone() }))?;
    let packed = fs.read_whole(&zip.name, zip.bytes.max(1).saturating_mul(2).max(1 << 20))?;
    if options.verify_hashes {
        check_hashes(&zip.hashes, &packed).map_err(|x| fs.err(&zip.name, x))?;
    }
    let algo = e.compression.as_deref().unwrap_or("").split(':').next().unwrap_or("");
    // The global budget: the shards kept inflated in memory, this one included.
    let held = parts.mem.values().fold(raw.bytes, |a, d| a.saturating_add(d.len() as u64));
    if held > guideloom_formats::MAX_INFLATED_BYTES {
        return Err(fs.err(
            &zip.name,
            ForeignError::DecompressionFailed {
                reason: format!(
                    "the inflated shards would hold {held} bytes in memory, more than {}",
                    guideloom_formats::MAX_INFLATED_BYTES
                ),
            },
        ));
    }
    let data = decompress(algo, &packed, raw.bytes).map_err(|x| fs.err(&zip.name, x))?;
    if options.verify_hashes {
        check_hashes(&raw.hashes, &data).map_err(|x| fs.err(&raw.name, x))?;
    }
    let data: Arc<[u8]> = data.into();
    parts.mem.insert(raw.name.clone(), data.clone());
    Ok(ShardBytes::Mem(data))
}
