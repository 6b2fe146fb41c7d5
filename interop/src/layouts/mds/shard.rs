//! The samples of one MDS shard (mosaicml/streaming `streaming/base/format/mds/writer.py`
//! `MDSWriter.encode_sample`, `encode_joint_shard`; `reader.py` `decode_sample`): u32 `n`,
//! `u32[n + 1]` absolute sample offsets (the last the file's size), then the samples, each one
//! u32 byte length per variable-size column (in column order) and the columns' bytes. Found
//! here: where each sample's tokens lie, every size checked before it is used.

use std::sync::Arc;

use guideloom_formats::Primitive;

use crate::error::{ForeignError, Result};
use crate::files::{u32_at, u64_at, Fs};
use crate::layouts::chunk::check_offsets;
use crate::layouts::mds::encoding::{ndarray_code, TokenEncoding};
use crate::layouts::mds::index::Entry;

/// Where a shard's bytes are: in place, or decompressed in memory.
#[derive(Debug)]
pub(crate) enum ShardBytes {
    /// The file of this name (relative to the dataset's directory).
    File(String),
    /// The decompressed shard.
    Mem(Arc<[u8]>),
}

impl ShardBytes {
    /// `len` bytes at `offset`; the caller checked them against the shard's size.
    fn read(&self, fs: &Fs, offset: u64, len: u64) -> Result<Vec<u8>> {
        match self {
            ShardBytes::File(name) => fs.read(name, offset, len),
            // Callers checked offset + len against the size.
            ShardBytes::Mem(b) => Ok(b[offset as usize..(offset + len) as usize].to_vec()),
        }
    }
}

/// What the token column of one shard holds, and the dtype the samples have shown so far
/// (an untyped `ndarray` column names it per sample; every sample must agree).
#[derive(Debug)]
pub(crate) struct TokenColumn<'a> {
    /// The column's name.
    pub(crate) name: &'a str,
    /// Its encoding.
    pub(crate) encoding: &'a TokenEncoding,
    /// The dtype found so far (`None`: none yet).
    pub(crate) dtype: Option<Primitive>,
}

/// The token run of each sample of the shard `name` (`bytes`, `size` bytes, checked against
/// the index entry `entry`): `(first byte, tokens)`, in sample order. `first_sample` is the
/// global index of the shard's first sample (errors name samples by it).
///
/// # Errors
/// [`ForeignError::TruncatedHeader`], [`ForeignError::SampleCountMismatch`], the offset
/// errors of [`check_offsets`], [`ForeignError::SampleLayout`] naming a sample whose column
/// sizes do not fit it, [`ForeignError::UnsupportedTokenDType`] and
/// [`ForeignError::MixedDTypes`] for an untyped ndarray; read errors.
pub(crate) fn samples(
    fs: &Fs,
    name: &str,
    (bytes, size): (&ShardBytes, u64),
    entry: &Entry,
    column: &mut TokenColumn<'_>,
    first_sample: u64,
) -> Result<Vec<(u64, u64)>> {
    let err = |x: ForeignError| fs.err(name, x);
    if size < 4 {
        return Err(err(ForeignError::TruncatedHeader { need: 4, have: size }));
    }
    let n = u64::from(u32_at(&bytes.read(fs, 0, 4)?, 0));
    if n != entry.samples {
        return Err(err(ForeignError::SampleCountMismatch { index: entry.samples, shard: n }));
    }
    let header = 4 + 4 * (n + 1);
    if size < header {
        return Err(err(ForeignError::TruncatedHeader { need: header, have: size }));
    }
    let raw_offsets = bytes.read(fs, 4, 4 * (n + 1))?;
    let offsets: Vec<u64> = (0..=n as usize).map(|k| u64::from(u32_at(&raw_offsets, 4 * k))).collect();
    check_offsets(&offsets, header, size).map_err(err)?;
    let col = entry.names.iter().position(|c| c == column.name).unwrap_or(0);
    let var: Vec<usize> = (0..entry.sizes.len()).filter(|&c| entry.sizes[c].is_none()).collect();
    let fixed = entry.sizes.iter().flatten().try_fold(0u64, |a, &s| a.checked_add(s));
    let mut out = Vec::with_capacity(n as usize);
    for k in 0..n as usize {
        let (start, end) = (offsets[k], offsets[k + 1]);
        let sample_len = end - start;
        let layout =
            |reason: String| err(ForeignError::SampleLayout { sample: first_sample + k as u64, reason });
        let words = 4 * var.len() as u64;
        if sample_len < words {
            return Err(layout(format!("{sample_len} bytes cannot hold {} column sizes", var.len())));
        }
        // Column sizes in column order.
        let var_sizes: Vec<u64> = if var.is_empty() {
            Vec::new()
        } else if var.len() == 1 {
            let rest = fixed.and_then(|f| sample_len.checked_sub(words)?.checked_sub(f));
            vec![rest.ok_or_else(|| layout("fixed columns overrun the sample".into()))?]
        } else {
            let w = bytes.read(fs, start, words)?;
            (0..var.len()).map(|c| u64::from(u32_at(&w, 4 * c))).collect()
        };
        let mut var_sizes = var_sizes.into_iter();
        let col_sizes: Vec<u64> =
            entry.sizes.iter().map(|s| s.or_else(|| var_sizes.next()).unwrap_or(0)).collect();
        let sum = col_sizes.iter().try_fold(words, |a, &s| a.checked_add(s));
        if sum != Some(sample_len) {
            return Err(layout(format!(
                "column sizes add up to {sum:?} bytes, the sample holds {sample_len}"
            )));
        }
        // The sizes add up to the sample's length: no sum below overflows.
        let before: u64 = col_sizes[..col].iter().sum::<u64>();
        let col_start = start + words + before;
        let col_len = col_sizes[col];
        let (skip, count, p) = match column.encoding {
            TokenEncoding::Bytes(p) | TokenEncoding::Fixed(p) => (0, None, *p),
            TokenEncoding::Typed(p) => {
                let (h, count) = ndarray_header(bytes, fs, col_start, col_len).map_err(&layout)?;
                (h, Some(count), *p)
            }
            TokenEncoding::Untyped => {
                let head = bytes.read(fs, col_start, col_len.min(1))?;
                let code = *head.first().ok_or_else(|| layout("an empty ndarray column".into()))?;
                let p = ndarray_code(code).map_err(err)?;
                match column.dtype {
                    Some(d) if d != p => {
                        return Err(err(ForeignError::MixedDTypes {
                            expected: d.descr().into(),
                            found: p.descr().into(),
                        }))
                    }
                    _ => column.dtype = Some(p),
                }
                let (h, count) = ndarray_header(bytes, fs, col_start + 1, col_len - 1).map_err(&layout)?;
                (1 + h, Some(count), p)
            }
        };
        let values = col_len - skip;
        if !values.is_multiple_of(p.size()) {
            return Err(layout(format!("{values} value bytes are not whole {}-byte elements", p.size())));
        }
        if let Some(count) = count.filter(|&c| c.checked_mul(p.size()) != Some(values)) {
            return Err(layout(format!("an ndarray of {count} values in {values} value bytes")));
        }
        out.push((col_start + skip, values / p.size()));
    }
    Ok(out)
}

/// The byte length of an ndarray shape header (`(ndim << 2) | k`, then `ndim` shape integers
/// of `1 << k` bytes) starting at `at`, checking that the values after it fill the column
/// exactly (`col_len` bytes from `at`).
fn ndarray_header(
    bytes: &ShardBytes,
    fs: &Fs,
    at: u64,
    col_len: u64,
) -> std::result::Result<(u64, u64), String> {
    if col_len == 0 {
        return Err("an empty ndarray column".into());
    }
    let b = bytes.read(fs, at, 1).map_err(|e| e.to_string())?[0];
    let (ndim, width) = (u64::from(b >> 2), 1u64 << (b & 3));
    let len = 1 + ndim * width;
    if len > col_len {
        return Err(format!("an ndarray header of {len} bytes in a column of {col_len}"));
    }
    let shape = bytes.read(fs, at + 1, ndim * width).map_err(|e| e.to_string())?;
    let mut count = 1u64;
    for d in 0..ndim as usize {
        let w = width as usize;
        let v = match w {
            1 => u64::from(shape[d]),
            2 => u64::from(u16::from_le_bytes([shape[2 * d], shape[2 * d + 1]])),
            4 => u64::from(u32_at(&shape, 4 * d)),
            _ => u64_at(&shape, 8 * d),
        };
        count = count.checked_mul(v).ok_or("the ndarray shape overflows")?;
    }
    Ok((len, count))
}
