//! litdata optimized datasets: `index.json` + `chunk-<rank>-<n>.bin`.
//!
//! Layout (Lightning-AI/litdata `src/litdata/streaming/writer.py` `BinaryWriter._create_chunk`,
//! `item_loader.py`, `serializers.py`, `constants.py`): a chunk is u32 `n` items, `u32[n+1]`
//! absolute item offsets (the last = file size), then the items. With the `TokensLoader` an
//! item is one 1-D array's raw values (the chunk's token region is their concatenation, `dim`
//! tokens); with the `PyTreeLoader` an item is one u32 byte size per leaf, then the leaves.
//! Token leaves are `no_header_numpy:<i>` / `no_header_tensor:<i>` (raw values, dtype from
//! litdata's numpy/torch dtype tables) or `numpy` / `tensor` (u32 dtype index, u32 ndim, u32
//! dims, values; the dims' product must be the values' count: `NumpySerializer` and
//! `TensorSerializer` write the array's shape). Each item is one document. `pickle` leaves
//! and compressed or encrypted chunks are refused.
//!
//! The reader: [`index::decode`] and [`index::validate`] check `index.json` without reading a
//! chunk; then each chunk's header and items are checked against its size and the token runs
//! located.

mod index;
mod leaf;

use guideloom_formats::Primitive;
use guideloom_storage::Segment;

use crate::error::{ForeignError, Result};
use crate::files::{u32_at, Fs, Place};
use crate::format::ForeignFormat;
use crate::layouts::chunk::check_offsets;
use crate::layouts::json::read_index;
use crate::options::ForeignOptions;
use crate::parts::{ForeignDetails, ForeignFile, Parts};

use self::leaf::{numpy_dtype, torch_dtype, Leaf};

/// Opens the litdata dataset whose `index.json` is in the directory `place`.
pub(crate) fn open(place: &Place, options: &ForeignOptions) -> Result<Parts> {
    let fs = Fs::new(ForeignFormat::Litdata, place.dir()?);
    let (text, checked) = read_index(&fs, |text| index::validate(index::decode(text)?, options))?;
    // Every name stays inside the directory, before any chunk is opened.
    for c in &checked.chunks {
        fs.safe_name(&c.name)?;
    }
    let index::Checked { formats, token_leaf, kind, loader, tokens_loader, chunks } = checked;
    let mut dtype = match kind {
        Leaf::Raw(p) => Some(p),
        _ => options.dtype,
    };
    let mut parts = Parts::new(&fs, Primitive::U8);
    parts.index_hash = xxhash_rust::xxh3::xxh3_64(&text);
    let mut documents = vec![0u64];
    let mut items_per_chunk = Vec::with_capacity(chunks.len());
    let mut global = 0u64;
    for (ci, c) in chunks.iter().enumerate() {
        let name = &c.name;
        let err = |e: ForeignError| fs.err(name, e);
        let size = fs.len(name)?;
        if size < 4 {
            return Err(err(ForeignError::TruncatedHeader { need: 4, have: size }));
        }
        let head = fs.read(name, 0, size.min(8))?;
        if head.starts_with(b"LDFZ01") {
            return Err(err(ForeignError::UnsupportedCompression { compression: "zstd batch".into() }));
        }
        let n = u64::from(u32_at(&head, 0));
        if let Some(want) = c.items.filter(|&w| w != n) {
            return Err(err(ForeignError::SampleCountMismatch { index: want, shard: n }));
        }
        let header = 4 * (n + 2);
        if size < header {
            return Err(err(ForeignError::TruncatedHeader { need: header, have: size }));
        }
        let raw = fs.read(name, 4, 4 * (n + 1))?;
        let offsets: Vec<u64> = (0..=n as usize).map(|k| u64::from(u32_at(&raw, 4 * k))).collect();
        if tokens_loader {
            // The token region is the items back to back; `dim` counts its tokens.
            let p = dtype.unwrap_or(Primitive::U8);
            if let Some(dim) = c.dim {
                let need = dim.checked_mul(p.size()).and_then(|b| b.checked_add(header)).unwrap_or(u64::MAX);
                if need != size {
                    return Err(err(ForeignError::ChunkSizeMismatch { dim, need, have: size }));
                }
            }
        }
        check_offsets(&offsets, header, size).map_err(err)?;
        let chunk_start = documents[documents.len() - 1];
        if tokens_loader {
            let p = dtype.unwrap_or(Primitive::U8);
            for k in 0..n as usize {
                let len = offsets[k + 1] - offsets[k];
                if !len.is_multiple_of(p.size()) {
                    return Err(err(ForeignError::SampleLayout {
                        sample: global + k as u64,
                        reason: format!("{len} bytes are not whole {}-byte tokens", p.size()),
                    }));
                }
                documents.push(documents[documents.len() - 1] + len / p.size());
            }
            let tokens = (size - offsets[0]) / p.size();
            parts.segments.push(Segment { file: ci, offset: offsets[0], elements: tokens });
        } else {
            let leaves_n = formats.len() as u64;
            for k in 0..n as usize {
                let sample = global + k as u64;
                let layout = |reason: String| err(ForeignError::SampleLayout { sample, reason });
                let (start, len) = (offsets[k], offsets[k + 1] - offsets[k]);
                if len < 4 * leaves_n {
                    return Err(layout(format!("{len} bytes cannot hold {leaves_n} leaf sizes")));
                }
                let words = fs.read(name, start, 4 * leaves_n)?;
                let sizes: Vec<u64> =
                    (0..leaves_n as usize).map(|l| u64::from(u32_at(&words, 4 * l))).collect();
                let sum = sizes.iter().try_fold(4 * leaves_n, |a, &s| a.checked_add(s));
                if sum != Some(len) {
                    return Err(layout(format!("leaf sizes add up to {sum:?} bytes, the item holds {len}")));
                }
                let at = start + 4 * leaves_n + sizes[..token_leaf].iter().sum::<u64>();
                let leaf_len = sizes[token_leaf];
                let (skip, p) = match kind {
                    Leaf::Raw(p) => (0, p),
                    Leaf::Numpy | Leaf::Tensor => {
                        if leaf_len < 8 {
                            return Err(layout(format!("an array leaf of {leaf_len} bytes")));
                        }
                        // The dtype index, ndim and up to 4 dims in one read (more dims: a second).
                        let h = fs.read(name, at, leaf_len.min(8 + 4 * 4))?;
                        let (idx, ndim) = (u64::from(u32_at(&h, 0)), u64::from(u32_at(&h, 4)));
                        let p = if kind == Leaf::Numpy { numpy_dtype(idx) } else { torch_dtype(idx) }
                            .map_err(&err)?;
                        match dtype {
                            Some(d) if d != p => {
                                return Err(err(ForeignError::MixedDTypes {
                                    expected: d.descr().into(),
                                    found: p.descr().into(),
                                }))
                            }
                            _ => dtype = Some(p),
                        }
                        let skip = 8 + 4 * ndim;
                        if skip > leaf_len {
                            return Err(layout(format!(
                                "an array header of {skip} bytes in a leaf of {leaf_len}"
                            )));
                        }
                        // The shape's product (`None` past u64) must be the values' count.
                        let more;
                        let dims = match h.get(8..skip as usize) {
                            Some(dims) => dims,
                            None => {
                                more = fs.read(name, at + 8, 4 * ndim)?;
                                &more
                            }
                        };
                        let count = (0..ndim as usize)
                            .try_fold(1u64, |a, d| a.checked_mul(u64::from(u32_at(dims, 4 * d))));
                        let values = leaf_len - skip;
                        if count.and_then(|c| c.checked_mul(p.size())) != Some(values) {
                            let shape = count.map_or("a shape past 2^64 values".into(), |c| {
                                format!("a shape of {c} values")
                            });
                            return Err(layout(format!("{shape} in {values} value bytes")));
                        }
                        (skip, p)
                    }
                };
                let values = leaf_len - skip;
                if !values.is_multiple_of(p.size()) {
                    return Err(layout(format!(
                        "{values} value bytes are not whole {}-byte tokens",
                        p.size()
                    )));
                }
                parts.segments.push(Segment { file: ci, offset: at + skip, elements: values / p.size() });
                documents.push(documents[documents.len() - 1] + values / p.size());
            }
        }
        let elements = documents[documents.len() - 1] - chunk_start;
        parts.files.push(ForeignFile { path: name.into(), bytes: size, elements });
        items_per_chunk.push(n);
        global += n;
    }
    parts.dtype = dtype.unwrap_or(Primitive::U8);
    parts.documents = Some(documents);
    parts.details = ForeignDetails::Litdata { item_loader: loader, items: items_per_chunk };
    Ok(parts)
}
