//! litdata optimized datasets: `index.json` + `chunk-<rank>-<n>.bin`.
//!
//! Layout (Lightning-AI/litdata `src/litdata/streaming/writer.py` `BinaryWriter._create_chunk`,
//! `item_loader.py`, `serializers.py`, `constants.py`): a chunk is u32 `n` items, `u32[n+1]`
//! absolute item offsets (the last = file size), then the items. With the `TokensLoader` an
//! item is one 1-D array's raw values (the chunk's token region is their concatenation, `dim`
//! tokens); with the `PyTreeLoader` an item is one u32 byte size per leaf, then the leaves.
//! Token leaves are `no_header_numpy:<i>` / `no_header_tensor:<i>` (raw values, dtype from
//! litdata's numpy/torch dtype tables) or `numpy` / `tensor` (u32 dtype index, u32 ndim, u32
//! dims, values). Each item is one document. `pickle` leaves and compressed or encrypted
//! chunks are refused.

use guideloom_formats::Primitive;
use serde_json::Value;

use crate::Result;

use super::files::{u32_at, Fs, Place, MAX_INDEX_BYTES};
use super::{ForeignDetails, ForeignError, ForeignFile, ForeignFormat, ForeignOptions, Parts};

/// litdata's numpy dtype table (`_NUMPY_DTYPES_MAPPING`).
fn numpy_dtype(i: u64) -> std::result::Result<Primitive, ForeignError> {
    let name = match i {
        0 => return Ok(Primitive::I8),
        1 => return Ok(Primitive::I16),
        2 => return Ok(Primitive::I32),
        3 => return Ok(Primitive::I64),
        4 => return Ok(Primitive::U8),
        5 => return Ok(Primitive::U16),
        6 => return Ok(Primitive::U32),
        7 => return Ok(Primitive::U64),
        8 => "float16",
        9 => "float32",
        10 => "float64",
        11 => "complex64",
        12 => "complex128",
        13 => "bool",
        14 => "object",
        15 => "bytes",
        16 => "str",
        17 => "void",
        _ => return Err(ForeignError::UnsupportedTokenDType { dtype: format!("numpy dtype index {i}") }),
    };
    Err(ForeignError::UnsupportedTokenDType { dtype: name.into() })
}

/// litdata's torch dtype table (`_TORCH_DTYPES_MAPPING`; aliases share an entry).
fn torch_dtype(i: u64) -> std::result::Result<Primitive, ForeignError> {
    let name = match i {
        11 => return Ok(Primitive::U8),
        12 => return Ok(Primitive::I8),
        13 | 14 => return Ok(Primitive::I16),
        15 | 16 => return Ok(Primitive::I32),
        17 | 18 => return Ok(Primitive::I64),
        20 => return Ok(Primitive::U16),
        0 | 1 => "float32",
        2 | 3 => "float64",
        4 | 5 => "complex64",
        6 | 7 => "complex128",
        8 | 9 => "float16",
        10 => "bfloat16",
        19 => "bool",
        _ => return Err(ForeignError::UnsupportedTokenDType { dtype: format!("torch dtype index {i}") }),
    };
    Err(ForeignError::UnsupportedTokenDType { dtype: name.into() })
}

/// How the token leaf stores values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Leaf {
    /// Raw values of a known dtype.
    Raw(Primitive),
    /// `numpy`: a u32 header (dtype index, ndim, dims) before the values.
    Numpy,
    /// `tensor`: the same header with the torch dtype index.
    Tensor,
}

/// The token leaf a serializer name gives, `None` for a serializer that cannot hold tokens.
fn leaf(name: &str) -> std::result::Result<Option<Leaf>, ForeignError> {
    let unknown = || ForeignError::UnknownEncoding { column: "data_format".into(), encoding: name.into() };
    if let Some(i) = name.strip_prefix("no_header_numpy:") {
        return Ok(Some(Leaf::Raw(numpy_dtype(i.parse().map_err(|_| unknown())?)?)));
    }
    if let Some(i) = name.strip_prefix("no_header_tensor:") {
        return Ok(Some(Leaf::Raw(torch_dtype(i.parse().map_err(|_| unknown())?)?)));
    }
    match name {
        "numpy" => Ok(Some(Leaf::Numpy)),
        "tensor" => Ok(Some(Leaf::Tensor)),
        "pickle" => Err(ForeignError::UnsafeEncoding { column: "data_format".into(), encoding: name.into() }),
        "str" | "bool" | "int" | "float" | "bytes" | "pil" | "jpeg" | "jpeg_array" | "video" | "file"
        | "tifffile" => Ok(None),
        _ => Err(unknown()),
    }
}

/// Opens the litdata dataset whose `index.json` is in the directory `path`.
pub(crate) fn open(place: &Place, options: &ForeignOptions) -> Result<Parts> {
    let format = ForeignFormat::Litdata;
    let fs = Fs::new(format, place.dir()?);
    let ix = "index.json";
    let text = fs.read_whole(ix, MAX_INDEX_BYTES)?;
    let invalid = |reason: String| fs.err(ix, ForeignError::InvalidIndex { reason });
    let index: Value = serde_json::from_slice(&text).map_err(|e| invalid(e.to_string()))?;
    let config = index.get("config").ok_or_else(|| invalid("no `config`".into()))?;
    if config.get("encryption").is_some_and(|e| !e.is_null()) {
        return Err(fs.err(ix, ForeignError::Encrypted));
    }
    if let Some(c) = config.get("compression").and_then(Value::as_str) {
        let level = config.get("compression_level").and_then(Value::as_str).unwrap_or("chunk");
        return Err(fs.err(ix, ForeignError::UnsupportedCompression { compression: format!("{c} {level}") }));
    }
    let formats: Vec<String> = config
        .get("data_format")
        .and_then(Value::as_array)
        .ok_or_else(|| invalid("config.data_format is not a list".into()))?
        .iter()
        .map(|v| {
            v.as_str()
                .map(str::to_string)
                .ok_or_else(|| invalid("config.data_format holds a non-string".into()))
        })
        .collect::<Result<_>>()?;
    let mut leaves = Vec::with_capacity(formats.len());
    for f in &formats {
        leaves.push(leaf(f).map_err(|e| fs.err(ix, e))?);
    }
    let token_leaf = match &options.column {
        Some(c) => {
            c.parse::<usize>().ok().filter(|&i| leaves.get(i).is_some_and(Option::is_some)).ok_or_else(
                || {
                    fs.err(
                        ix,
                        ForeignError::TokenColumn {
                            reason: format!("leaf {c:?} is not an array leaf of {formats:?}"),
                        },
                    )
                },
            )?
        }
        None => {
            let arrays: Vec<usize> = (0..leaves.len()).filter(|&i| leaves[i].is_some()).collect();
            match arrays.as_slice() {
                [i] => *i,
                _ => {
                    return Err(fs.err(
                        ix,
                        ForeignError::TokenColumn {
                            reason: format!(
                                "{} array leaves in {formats:?}: name the token leaf's index",
                                arrays.len()
                            ),
                        },
                    ))
                }
            }
        }
    };
    let kind = leaves[token_leaf].unwrap_or(Leaf::Numpy);
    let loader = config.get("item_loader").and_then(Value::as_str).unwrap_or("PyTreeLoader").to_string();
    let tokens_loader = match loader.as_str() {
        "TokensLoader" => true,
        "PyTreeLoader" => false,
        other => {
            return Err(fs.err(
                ix,
                ForeignError::UnsupportedCompression { compression: format!("item loader {other}") },
            ))
        }
    };
    if tokens_loader && (formats.len() != 1 || !matches!(kind, Leaf::Raw(_))) {
        return Err(fs.err(
            ix,
            ForeignError::TokenColumn {
                reason: format!("a TokensLoader dataset of {formats:?}, not one headerless array"),
            },
        ));
    }
    let chunks = index
        .get("chunks")
        .and_then(Value::as_array)
        .ok_or_else(|| invalid("`chunks` is not a list".into()))?;

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
        let name = c
            .get("filename")
            .and_then(Value::as_str)
            .ok_or_else(|| invalid(format!("chunks[{ci}].filename is not a string")))?
            .to_string();
        fs.safe_name(&name)?;
        let err = |e: ForeignError| fs.err(&name, e);
        let size = fs.len(&name)?;
        if size < 4 {
            return Err(err(ForeignError::TruncatedHeader { need: 4, have: size }));
        }
        let head = fs.read(&name, 0, size.min(8))?;
        if head.starts_with(b"LDFZ01") {
            return Err(err(ForeignError::UnsupportedCompression { compression: "zstd batch".into() }));
        }
        let n = u64::from(u32_at(&head, 0));
        if let Some(want) = c.get("chunk_size").and_then(Value::as_u64).filter(|&w| w != n) {
            return Err(err(ForeignError::SampleCountMismatch { index: want, shard: n }));
        }
        let header = 4 * (n + 2);
        if size < header {
            return Err(err(ForeignError::TruncatedHeader { need: header, have: size }));
        }
        let raw = fs.read(&name, 4, 4 * (n + 1))?;
        let offsets: Vec<u64> = (0..=n as usize).map(|k| u64::from(u32_at(&raw, 4 * k))).collect();
        if tokens_loader {
            // The token region is the items back to back; `dim` counts its tokens.
            let p = dtype.unwrap_or(Primitive::U8);
            if let Some(dim) = c.get("dim").and_then(Value::as_u64) {
                let need = dim.checked_mul(p.size()).and_then(|b| b.checked_add(header)).unwrap_or(u64::MAX);
                if need != size {
                    return Err(err(ForeignError::ChunkSizeMismatch { dim, need, have: size }));
                }
            }
        }
        super::check_offsets(&offsets, header, size).map_err(err)?;
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
            parts.segments.push((ci, offsets[0], tokens));
        } else {
            let leaves_n = formats.len() as u64;
            for k in 0..n as usize {
                let sample = global + k as u64;
                let layout = |reason: String| err(ForeignError::SampleLayout { sample, reason });
                let (start, len) = (offsets[k], offsets[k + 1] - offsets[k]);
                if len < 4 * leaves_n {
                    return Err(layout(format!("{len} bytes cannot hold {leaves_n} leaf sizes")));
                }
                let words = fs.read(&name, start, 4 * leaves_n)?;
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
                        let h = fs.read(&name, at, 8)?;
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
                parts.segments.push((ci, at + skip, values / p.size()));
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
