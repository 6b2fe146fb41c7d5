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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::u16_bytes;
    use crate::format::ForeignFormat;
    use crate::layouts::mds::index::FileRef;

    /// A shard as Streaming's `MDSWriter.encode_joint_shard` writes it: u32 sample count,
    /// `u32[n + 1]` absolute sample offsets (the first just past the table), the samples.
    fn shard(samples: &[Vec<u8>]) -> Vec<u8> {
        let n = samples.len() as u32;
        let mut at = 4 + 4 * (n + 1);
        let mut out = n.to_le_bytes().to_vec();
        out.extend(at.to_le_bytes());
        for s in samples {
            at += s.len() as u32;
            out.extend(at.to_le_bytes());
        }
        samples.iter().for_each(|s| out.extend(s));
        out
    }

    /// A sample as `MDSWriter.encode_sample` writes it: one u32 size per variable-size
    /// column (`None` in `sizes`), in column order, then the columns' bytes.
    fn sample(sizes: &[Option<u64>], columns: &[Vec<u8>]) -> Vec<u8> {
        let mut out = Vec::new();
        for (s, c) in sizes.iter().zip(columns) {
            if s.is_none() {
                out.extend((c.len() as u32).to_le_bytes());
            }
        }
        columns.iter().for_each(|c| out.extend(c));
        out
    }

    /// An ndarray column with its shape header (Streaming's `NDArray.encode`: `(ndim << 2) |
    /// k`, the shape in `1 << k`-byte integers), `code` (the dtype byte) first when given.
    fn ndarray(code: Option<u8>, k: u8, shape: &[u64], values: &[u8]) -> Vec<u8> {
        let mut out: Vec<u8> = code.into_iter().collect();
        out.push(((shape.len() as u8) << 2) | k);
        for &d in shape {
            out.extend(&d.to_le_bytes()[..1 << k]);
        }
        out.extend(values);
        out
    }

    /// The token runs of the in-memory shard `bytes`, whose index entry has the columns
    /// `names` of `sizes` and `samples` samples, the token column `tokens` of `encoding`;
    /// the shard's first sample is global sample 10.
    fn runs(
        bytes: &[u8],
        (names, sizes, samples): (&[&str], &[Option<u64>], u64),
        (tokens, encoding): (&str, TokenEncoding),
    ) -> Result<Vec<(u64, u64)>> {
        let dir = tempfile::tempdir().unwrap();
        let fs = Fs::local(ForeignFormat::Mds, dir.path());
        let entry = Entry {
            names: names.iter().map(|n| n.to_string()).collect(),
            sizes: sizes.to_vec(),
            compression: None,
            samples,
            raw: FileRef { name: "shard.00000.mds".into(), bytes: bytes.len() as u64, hashes: Vec::new() },
            zip: None,
        };
        let mut column = TokenColumn { name: tokens, encoding: &encoding, dtype: None };
        let mem = ShardBytes::Mem(bytes.into());
        samples_of(&fs, &mem, bytes.len() as u64, &entry, &mut column)
    }

    fn samples_of(
        fs: &Fs,
        mem: &ShardBytes,
        size: u64,
        entry: &Entry,
        column: &mut TokenColumn<'_>,
    ) -> Result<Vec<(u64, u64)>> {
        samples(fs, "shard.00000.mds", (mem, size), entry, column, 10)
    }

    /// The error `want` about the shard.
    fn shard_err(got: Result<Vec<(u64, u64)>>, want: ForeignError) {
        match got {
            Err(crate::error::InteropError::Dataset { error, path, .. }) => {
                assert_eq!((*error, path.file_name().unwrap().to_str().unwrap()), (want, "shard.00000.mds"))
            }
            other => panic!("expected {want:?}, got {other:?}"),
        }
    }

    /// Issue 33 (mutants of the size checks `size < 4` and `size < header`, `<` -> `<=` and
    /// `==`): a shard shorter than its count is refused needing 4 bytes; one of exactly 4
    /// bytes (0 samples) needs its 8-byte table; a table of exactly its size (8 bytes, 0
    /// samples) holds no runs; two samples in 12 bytes need 16.
    #[test]
    fn issue33_foreign_mds_a_shard_holds_its_count_and_its_offset_table() {
        let columns = (&["tokens"][..], &[None][..], 0);
        let typed = ("tokens", TokenEncoding::Bytes(Primitive::U16));
        shard_err(runs(&[0; 3], columns, typed.clone()), ForeignError::TruncatedHeader { need: 4, have: 3 });
        shard_err(runs(&[0; 4], columns, typed.clone()), ForeignError::TruncatedHeader { need: 8, have: 4 });
        assert_eq!(runs(&shard(&[]), columns, typed.clone()).unwrap(), []);
        let two = [2u32, 16, 16].map(u32::to_le_bytes).concat();
        shard_err(
            runs(&two, (&["tokens"][..], &[None][..], 2), typed),
            ForeignError::TruncatedHeader { need: 16, have: 12 },
        );
    }

    /// Issue 33 (mutant of the sample check `sample_len < words` -> `<=`): a sample of one
    /// variable-size column holds at least its u32 size: 3 bytes are refused naming the
    /// sample (the shard's second, global sample 11); exactly 4 bytes are an empty column (an
    /// empty run just past the size: the 16-byte table, sample 0 at 16 with its tokens at 20,
    /// sample 1 at 24 with its empty run at 28).
    #[test]
    fn issue33_foreign_mds_a_sample_holds_its_column_sizes() {
        let columns = (&["tokens"][..], &[None][..], 2);
        let bytes = ("tokens", TokenEncoding::Bytes(Primitive::U16));
        let one = sample(&[None], &[u16_bytes(&[5, 6])]);
        let empty = sample(&[None], &[vec![]]);
        assert_eq!(empty.len(), 4);
        assert_eq!(runs(&shard(&[one.clone(), empty]), columns, bytes.clone()).unwrap(), [(20, 2), (28, 0)]);
        shard_err(
            runs(&shard(&[one, vec![0; 3]]), columns, bytes),
            ForeignError::SampleLayout { sample: 11, reason: "3 bytes cannot hold 1 column sizes".into() },
        );
    }

    /// Issue 33 (mutants of the untyped ndarray's dtype agreement, the guard `d != p` ->
    /// `true`, `false`, `==`): each sample of an `ndarray` column names its dtype (Streaming's
    /// `NDArray` dtype codes: 16 uint16, 33 int32); two uint16 samples are read, a third of
    /// int32 is refused naming both dtypes.
    #[test]
    fn issue33_foreign_mds_untyped_ndarray_samples_agree_on_one_dtype() {
        let columns = (&["tokens"][..], &[None][..], 2);
        let u16_sample = sample(&[None], &[ndarray(Some(16), 0, &[2], &u16_bytes(&[5, 6]))]);
        let i32_sample = sample(&[None], &[ndarray(Some(33), 0, &[1], &7i32.to_le_bytes())]);
        let two = shard(&[u16_sample.clone(), u16_sample.clone()]);
        // Past the 4-byte size: the dtype byte, the shape header's 2 bytes, then the values.
        assert_eq!(runs(&two, columns, ("tokens", TokenEncoding::Untyped)).unwrap(), [(23, 2), (34, 2)]);
        let mixed = shard(&[u16_sample, i32_sample]);
        shard_err(
            runs(&mixed, columns, ("tokens", TokenEncoding::Untyped)),
            ForeignError::MixedDTypes { expected: "<u2".into(), found: "<i4".into() },
        );
    }

    /// Issue 33 (mutants of the untyped ndarray's header bound `col_len - 1` -> `+`, `/`):
    /// past the dtype byte, a column of 2 bytes has 1 byte for the shape header, which a 1-D
    /// header of 1-byte dims (2 bytes) does not fit.
    #[test]
    fn issue33_foreign_mds_an_untyped_ndarray_header_fits_after_its_dtype_byte() {
        let columns = (&["tokens"][..], &[None][..], 1);
        let short = shard(&[sample(&[None], &[ndarray(Some(16), 0, &[0], &[])[..2].to_vec()])]);
        shard_err(
            runs(&short, columns, ("tokens", TokenEncoding::Untyped)),
            ForeignError::SampleLayout {
                sample: 10,
                reason: "an ndarray header of 2 bytes in a column of 1".into(),
            },
        );
        let whole = shard(&[sample(&[None], &[ndarray(Some(16), 0, &[0], &[])])]);
        assert_eq!(runs(&whole, columns, ("tokens", TokenEncoding::Untyped)).unwrap(), [(19, 0)]);
    }

    /// Issue 33 (mutants of `ndarray_header`: the header's length `1 + ndim * width`, its
    /// bound `len > col_len` -> `==`, `>=`, each width's arm and its byte positions): a
    /// typed ndarray column's shape header in each of Streaming's four widths (`k` = 0..3:
    /// 1-, 2-, 4- and 8-byte dims). A 2-D shape `[2, 3]` over 6 u16 values is read; `[7, 1]`
    /// over the same values is refused (7 values in 12 bytes); `[0]` with its header filling
    /// the column exactly is an empty run; one byte less is a header past its column.
    #[test]
    fn issue33_foreign_mds_ndarray_shapes_in_every_width() {
        let columns = (&["tokens"][..], &[None][..], 1);
        let typed = || ("tokens", TokenEncoding::Typed(Primitive::U16));
        let one = |column: Vec<u8>| shard(&[sample(&[None], &[column])]);
        let values = u16_bytes(&[1, 2, 3, 4, 5, 6]);
        // The 12-byte table, the sample's 4-byte size: the column starts at byte 16.
        for k in 0..4u8 {
            let width = 1u64 << k;
            let got = runs(&one(ndarray(None, k, &[2, 3], &values)), columns, typed());
            assert_eq!(got.unwrap(), [(16 + 1 + 2 * width, 6)], "k {k}");
            shard_err(
                runs(&one(ndarray(None, k, &[7, 1], &values)), columns, typed()),
                ForeignError::SampleLayout {
                    sample: 10,
                    reason: "an ndarray of 7 values in 12 value bytes".into(),
                },
            );
            let exact = ndarray(None, k, &[0], &[]);
            assert_eq!(runs(&one(exact.clone()), columns, typed()).unwrap(), [(16 + 1 + width, 0)], "k {k}");
            let reason = format!("an ndarray header of {} bytes in a column of {width}", 1 + width);
            shard_err(
                runs(&one(exact[..exact.len() - 1].to_vec()), columns, typed()),
                ForeignError::SampleLayout { sample: 10, reason },
            );
        }
    }
}
