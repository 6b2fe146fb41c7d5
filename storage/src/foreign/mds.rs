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

use std::io::Read;
use std::sync::Arc;

use guideloom_formats::Primitive;
use serde_json::Value;

use crate::Result;

use super::files::{u32_at, u64_at, Fs, Place, MAX_INDEX_BYTES};
use super::{ForeignDetails, ForeignError, ForeignFile, ForeignFormat, ForeignOptions, Parts};

/// Encodings MDS knows that are safe to skip (not token columns).
const OTHER_ENCODINGS: [&str; 24] = [
    "str",
    "int",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "int8",
    "int16",
    "int32",
    "int64",
    "float16",
    "float32",
    "float64",
    "str_int",
    "str_float",
    "str_decimal",
    "json",
    "pil",
    "jpeg",
    "png",
    "jpeg_array",
    "jpegarray",
    "list[pil]",
    "list[jpeg]",
];

/// How the token column is encoded.
#[derive(Debug, Clone, PartialEq, Eq)]
enum TokenEncoding {
    /// `bytes`: raw values of the configured dtype.
    Bytes(Primitive),
    /// `ndarray:<dtype>:<shape>`: values only, fixed size.
    Fixed(Primitive),
    /// `ndarray:<dtype>`: shape header, then values.
    Typed(Primitive),
    /// `ndarray`: dtype byte, shape header, values.
    Untyped,
}

/// An MDS ndarray dtype name's primitive (`Err` names it).
fn ndarray_dtype(name: &str) -> std::result::Result<Primitive, ForeignError> {
    Ok(match name {
        "uint8" => Primitive::U8,
        "int8" => Primitive::I8,
        "uint16" => Primitive::U16,
        "int16" => Primitive::I16,
        "uint32" => Primitive::U32,
        "int32" => Primitive::I32,
        "uint64" => Primitive::U64,
        "int64" => Primitive::I64,
        _ => return Err(ForeignError::UnsupportedTokenDType { dtype: name.to_string() }),
    })
}

/// The dtype of an untyped ndarray's code byte (`encodings.py` `_dtype2code` order).
fn ndarray_code(code: u8) -> std::result::Result<Primitive, ForeignError> {
    let name = match code {
        8 => "uint8",
        9 => "int8",
        16 => "uint16",
        17 => "int16",
        18 => "float16",
        32 => "uint32",
        33 => "int32",
        34 => "float32",
        64 => "uint64",
        65 => "int64",
        66 => "float64",
        c => return Err(ForeignError::UnsupportedTokenDType { dtype: format!("ndarray dtype code {c}") }),
    };
    ndarray_dtype(name)
}

/// Whether `enc` is an encoding MDS writes (the token ones included).
fn known_encoding(enc: &str) -> bool {
    if enc == "bytes" || enc == "ndarray" || OTHER_ENCODINGS.contains(&enc) || enc == "list[png]" {
        return true;
    }
    let mut p = enc.split(':');
    p.next() == Some("ndarray") && p.next().is_some_and(|d| !d.is_empty()) && p.count() <= 1
}

/// `raw_data` / `zip_data` of a shard entry: basename, bytes, `(algorithm, hex digest)`s.
type FileRef = (String, u64, Vec<(String, String)>);

/// One shard entry of `index.json`, checked.
#[derive(Debug)]
struct ShardEntry {
    names: Vec<String>,
    sizes: Vec<Option<u64>>,
    compression: Option<String>,
    samples: u64,
    raw: FileRef,
    zip: Option<FileRef>,
}

fn field<'a>(v: &'a Value, key: &str, fs: &Fs, what: &str) -> Result<&'a Value> {
    v.get(key).ok_or_else(|| {
        fs.err("index.json", ForeignError::InvalidIndex { reason: format!("{what} has no `{key}`") })
    })
}

fn int_field(v: &Value, key: &str, fs: &Fs, what: &str) -> Result<i64> {
    field(v, key, fs, what)?.as_i64().ok_or_else(|| {
        fs.err("index.json", ForeignError::InvalidIndex { reason: format!("{what}.{key} is not an integer") })
    })
}

fn u64_field(v: &Value, key: &str, fs: &Fs, what: &str) -> Result<u64> {
    field(v, key, fs, what)?.as_u64().ok_or_else(|| {
        fs.err(
            "index.json",
            ForeignError::InvalidIndex { reason: format!("{what}.{key} is not a non-negative integer") },
        )
    })
}

fn str_list(v: &Value, key: &str, fs: &Fs, what: &str) -> Result<Vec<String>> {
    let bad = || {
        fs.err(
            "index.json",
            ForeignError::InvalidIndex { reason: format!("{what}.{key} is not a list of strings") },
        )
    };
    field(v, key, fs, what)?
        .as_array()
        .ok_or_else(bad)?
        .iter()
        .map(|x| x.as_str().map(str::to_string).ok_or_else(bad))
        .collect()
}

/// `{basename, bytes, hashes}` of `raw_data` / `zip_data`.
fn file_entry(v: &Value, fs: &Fs, what: &str) -> Result<FileRef> {
    let name = field(v, "basename", fs, what)?.as_str().map(str::to_string).ok_or_else(|| {
        fs.err(
            "index.json",
            ForeignError::InvalidIndex { reason: format!("{what}.basename is not a string") },
        )
    })?;
    fs.safe_name(&name)?;
    let bytes = u64_field(v, "bytes", fs, what)?;
    let hashes = v
        .get("hashes")
        .and_then(Value::as_object)
        .map(|m| m.iter().filter_map(|(k, h)| Some((k.clone(), h.as_str()?.to_string()))).collect())
        .unwrap_or_default();
    Ok((name, bytes, hashes))
}

/// Where a shard's bytes are: in place, or decompressed in memory.
enum ShardBytes {
    File(String),
    Mem(Arc<[u8]>),
}

impl ShardBytes {
    fn read(&self, fs: &Fs, offset: u64, len: u64) -> Result<Vec<u8>> {
        match self {
            ShardBytes::File(name) => fs.read(name, offset, len),
            // Callers checked offset + len against the size.
            ShardBytes::Mem(b) => Ok(b[offset as usize..(offset + len) as usize].to_vec()),
        }
    }
}

/// Hex digest of `bytes` with MDS's algorithm names (hashlib and xxhash).
fn digest(algorithm: &str, bytes: &[u8]) -> Option<String> {
    use sha1::Digest as _;
    let hex = |d: &[u8]| d.iter().map(|b| format!("{b:02x}")).collect::<String>();
    Some(match algorithm {
        "sha1" => hex(&sha1::Sha1::digest(bytes)),
        "sha256" => hex(&sha2::Sha256::digest(bytes)),
        "sha512" => hex(&sha2::Sha512::digest(bytes)),
        "md5" => hex(&md5::Md5::digest(bytes)),
        "xxh64" => format!("{:016x}", xxhash_rust::xxh64::xxh64(bytes, 0)),
        "xxh3_64" => format!("{:016x}", xxhash_rust::xxh3::xxh3_64(bytes)),
        "xxh128" | "xxh3_128" => format!("{:032x}", xxhash_rust::xxh3::xxh3_128(bytes)),
        _ => return None,
    })
}

fn check_hashes(fs: &Fs, name: &str, hashes: &[(String, String)], bytes: &[u8]) -> Result<()> {
    for (algorithm, expected) in hashes {
        let found = digest(algorithm, bytes)
            .ok_or_else(|| fs.err(name, ForeignError::UnsupportedHash { algorithm: algorithm.clone() }))?;
        if !found.eq_ignore_ascii_case(expected) {
            return Err(fs.err(
                name,
                ForeignError::HashMismatch {
                    algorithm: algorithm.clone(),
                    expected: expected.clone(),
                    found,
                },
            ));
        }
    }
    Ok(())
}

/// Inflates `packed` (compressed with `algo`) to exactly `size` bytes at most.
fn decompress(fs: &Fs, name: &str, algo: &str, packed: &[u8], size: u64) -> Result<Vec<u8>> {
    let failed =
        |e: std::io::Error| fs.err(name, ForeignError::DecompressionFailed { reason: e.to_string() });
    let mut out = Vec::new();
    let limit = size.saturating_add(1);
    match algo {
        "zstd" => zstd::stream::read::Decoder::new(packed)
            .map_err(failed)?
            .take(limit)
            .read_to_end(&mut out)
            .map_err(failed)?,
        "gz" => flate2::read::GzDecoder::new(packed).take(limit).read_to_end(&mut out).map_err(failed)?,
        other => {
            return Err(fs.err(name, ForeignError::UnsupportedCompression { compression: other.to_string() }))
        }
    };
    Ok(out)
}

/// Opens the MDS dataset whose `index.json` is in the directory `path`.
pub(crate) fn open(place: &Place, options: &ForeignOptions) -> Result<Parts> {
    let format = ForeignFormat::Mds;
    let fs = Fs::new(format, place.dir()?);
    let text = fs.read_whole("index.json", MAX_INDEX_BYTES)?;
    let index: Value = serde_json::from_slice(&text)
        .map_err(|e| fs.err("index.json", ForeignError::InvalidIndex { reason: e.to_string() }))?;
    let version = int_field(&index, "version", &fs, "the index")?;
    if version != 2 {
        return Err(fs.err("index.json", ForeignError::UnsupportedIndexVersion { found: version }));
    }
    let shards = field(&index, "shards", &fs, "the index")?.as_array().ok_or_else(|| {
        fs.err("index.json", ForeignError::InvalidIndex { reason: "`shards` is not a list".into() })
    })?;

    // Pass 1: every entry, before any shard file is opened.
    let mut entries = Vec::with_capacity(shards.len());
    let mut token: Option<(String, String, TokenEncoding)> = None;
    for (i, s) in shards.iter().enumerate() {
        let what = format!("shards[{i}]");
        let v = int_field(s, "version", &fs, &what)?;
        if v != 2 {
            return Err(
                fs.err("index.json", ForeignError::UnsupportedShardVersion { shard: i as u64, found: v })
            );
        }
        let f = field(s, "format", &fs, &what)?.as_str().unwrap_or("").to_string();
        if f != "mds" {
            return Err(
                fs.err("index.json", ForeignError::UnsupportedShardFormat { shard: i as u64, found: f })
            );
        }
        let names = str_list(s, "column_names", &fs, &what)?;
        let encodings = str_list(s, "column_encodings", &fs, &what)?;
        let sizes: Vec<Option<u64>> = field(s, "column_sizes", &fs, &what)?
            .as_array()
            .map(|a| a.iter().map(Value::as_u64).collect())
            .unwrap_or_default();
        if names.len() != encodings.len() || names.len() != sizes.len() {
            return Err(fs.err(
                "index.json",
                ForeignError::InvalidIndex {
                    reason: format!("{what}: column names, encodings and sizes differ in length"),
                },
            ));
        }
        for (name, enc) in names.iter().zip(&encodings) {
            if enc == "pkl" {
                return Err(fs.err(
                    "index.json",
                    ForeignError::UnsafeEncoding { column: name.clone(), encoding: enc.clone() },
                ));
            }
            if !known_encoding(enc) {
                return Err(fs.err(
                    "index.json",
                    ForeignError::UnknownEncoding { column: name.clone(), encoding: enc.clone() },
                ));
            }
        }
        let col = token_column(&names, &encodings, options).map_err(|e| fs.err("index.json", e))?;
        let enc = token_encoding(&encodings[col], options).map_err(|e| fs.err("index.json", e))?;
        match &token {
            Some((n, e, _)) if *n != names[col] || *e != encodings[col] => {
                return Err(fs.err(
                    "index.json",
                    ForeignError::MixedDTypes {
                        expected: format!("{n}: {e}"),
                        found: format!("{}: {}", names[col], encodings[col]),
                    },
                ))
            }
            _ => token = Some((names[col].clone(), encodings[col].clone(), enc)),
        }
        let compression = s.get("compression").and_then(Value::as_str).map(str::to_string);
        let raw = file_entry(field(s, "raw_data", &fs, &what)?, &fs, &format!("{what}.raw_data"))?;
        let zip = match s.get("zip_data") {
            Some(z) if !z.is_null() => Some(file_entry(z, &fs, &format!("{what}.zip_data"))?),
            _ => None,
        };
        let samples = u64_field(s, "samples", &fs, &what)?;
        entries.push(ShardEntry { names, sizes, compression, samples, raw, zip });
    }
    let (column, column_encoding, encoding) = token.ok_or_else(|| {
        fs.err("index.json", ForeignError::TokenColumn { reason: "the index lists no shard".into() })
    })?;
    let dtype = match encoding {
        TokenEncoding::Bytes(p) | TokenEncoding::Fixed(p) | TokenEncoding::Typed(p) => Some(p),
        TokenEncoding::Untyped => options.dtype,
    };

    // Pass 2: the shard files.
    let mut parts = Parts::new(&fs, dtype.unwrap_or(Primitive::U8));
    let mut found_dtype = dtype;
    let mut documents = vec![0u64];
    let mut samples_per_shard = Vec::with_capacity(entries.len());
    let mut global = 0u64;
    parts.index_hash = xxhash_rust::xxh3::xxh3_64(&text);
    for (i, e) in entries.iter().enumerate() {
        let (raw_name, raw_bytes, raw_hashes) = &e.raw;
        let raw_len = fs.len_opt(raw_name)?;
        let use_raw = match (raw_len, &e.zip) {
            (Some(l), _) if l == *raw_bytes => true,
            (Some(_), None) => true,
            _ => false,
        };
        let bytes = if use_raw {
            if options.verify_hashes && !raw_hashes.is_empty() {
                check_hashes(&fs, raw_name, raw_hashes, &fs.read_whole(raw_name, u64::MAX)?)?;
            }
            ShardBytes::File(raw_name.clone())
        } else {
            let zip =
                e.zip.as_ref().filter(|z| fs.len_opt(&z.0).ok().flatten().is_some()).ok_or_else(|| {
                    fs.err(raw_name, ForeignError::ShardNotFound { basename: raw_name.clone() })
                })?;
            let packed = fs.read_whole(&zip.0, zip.1.max(1).saturating_mul(2).max(1 << 20))?;
            if options.verify_hashes {
                check_hashes(&fs, &zip.0, &zip.2, &packed)?;
            }
            let algo = e.compression.as_deref().unwrap_or("").split(':').next().unwrap_or("");
            let data = decompress(&fs, &zip.0, algo, &packed, *raw_bytes)?;
            if options.verify_hashes {
                check_hashes(&fs, raw_name, raw_hashes, &data)?;
            }
            let data: Arc<[u8]> = data.into();
            parts.mem.insert(raw_name.clone(), data.clone());
            ShardBytes::Mem(data)
        };
        let size = match &bytes {
            ShardBytes::File(n) => fs.len(n)?,
            ShardBytes::Mem(b) => b.len() as u64,
        };
        if size != *raw_bytes {
            return Err(fs.err(raw_name, ForeignError::ShardSizeMismatch { index: *raw_bytes, file: size }));
        }
        let err = |x: ForeignError| fs.err(raw_name, x);
        if size < 4 {
            return Err(err(ForeignError::TruncatedHeader { need: 4, have: size }));
        }
        let n = u64::from(u32_at(&bytes.read(&fs, 0, 4)?, 0));
        if n != e.samples {
            return Err(err(ForeignError::SampleCountMismatch { index: e.samples, shard: n }));
        }
        let header = 4 + 4 * (n + 1);
        if size < header {
            return Err(err(ForeignError::TruncatedHeader { need: header, have: size }));
        }
        let raw_offsets = bytes.read(&fs, 4, 4 * (n + 1))?;
        let offsets: Vec<u64> = (0..=n as usize).map(|k| u64::from(u32_at(&raw_offsets, 4 * k))).collect();
        super::check_offsets(&offsets, header, size).map_err(err)?;
        let col = e.names.iter().position(|c| *c == column).unwrap_or(0);
        let var: Vec<usize> = (0..e.sizes.len()).filter(|&c| e.sizes[c].is_none()).collect();
        for k in 0..n as usize {
            let (start, end) = (offsets[k], offsets[k + 1]);
            let sample_len = end - start;
            let layout =
                |reason: String| err(ForeignError::SampleLayout { sample: global + k as u64, reason });
            let words = 4 * var.len() as u64;
            if sample_len < words {
                return Err(layout(format!("{sample_len} bytes cannot hold {} column sizes", var.len())));
            }
            // Column sizes in column order.
            let var_sizes: Vec<u64> = if var.is_empty() {
                Vec::new()
            } else if var.len() == 1 {
                let fixed: u64 = e.sizes.iter().flatten().sum();
                vec![sample_len
                    .checked_sub(words + fixed)
                    .ok_or_else(|| layout("fixed columns overrun the sample".into()))?]
            } else {
                let w = bytes.read(&fs, start, words)?;
                (0..var.len()).map(|c| u64::from(u32_at(&w, 4 * c))).collect()
            };
            let mut col_sizes = Vec::with_capacity(e.sizes.len());
            let mut vi = 0;
            for s in &e.sizes {
                match s {
                    Some(s) => col_sizes.push(*s),
                    None => {
                        col_sizes.push(var_sizes[vi]);
                        vi += 1;
                    }
                }
            }
            let sum = col_sizes.iter().try_fold(words, |a, &s| a.checked_add(s));
            if sum != Some(sample_len) {
                return Err(layout(format!(
                    "column sizes add up to {sum:?} bytes, the sample holds {sample_len}"
                )));
            }
            let before: u64 = col_sizes[..col].iter().sum::<u64>();
            let col_start = start + words + before;
            let col_len = col_sizes[col];
            let (skip, count, p) = match &encoding {
                TokenEncoding::Bytes(p) | TokenEncoding::Fixed(p) => (0, None, *p),
                TokenEncoding::Typed(p) => {
                    let (h, count) = ndarray_header(&bytes, &fs, col_start, col_len).map_err(&layout)?;
                    (h, Some(count), *p)
                }
                TokenEncoding::Untyped => {
                    let head = bytes.read(&fs, col_start, col_len.min(1))?;
                    let code = *head.first().ok_or_else(|| layout("an empty ndarray column".into()))?;
                    let p = ndarray_code(code).map_err(&err)?;
                    match found_dtype {
                        Some(d) if d != p => {
                            return Err(err(ForeignError::MixedDTypes {
                                expected: d.descr().into(),
                                found: p.descr().into(),
                            }))
                        }
                        _ => found_dtype = Some(p),
                    }
                    let (h, count) =
                        ndarray_header(&bytes, &fs, col_start + 1, col_len - 1).map_err(&layout)?;
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
            let tokens = values / p.size();
            parts.segments.push((i, col_start + skip, tokens));
            documents.push(documents[documents.len() - 1] + tokens);
        }
        let elements = documents[documents.len() - 1] - parts.files.iter().map(|f| f.elements).sum::<u64>();
        parts.files.push(ForeignFile { path: raw_name.into(), bytes: size, elements });
        samples_per_shard.push(n);
        global += n;
    }
    parts.dtype = found_dtype.unwrap_or(Primitive::U8);
    parts.documents = Some(documents);
    parts.details = ForeignDetails::Mds { samples: samples_per_shard, column: (column, column_encoding) };
    Ok(parts)
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

/// The index of the token column: the configured one, else `tokens`, else the only column
/// that can hold tokens.
fn token_column(
    names: &[String],
    encodings: &[String],
    options: &ForeignOptions,
) -> std::result::Result<usize, ForeignError> {
    let can_hold = |e: &str| e == "bytes" || e == "ndarray" || e.starts_with("ndarray:");
    if let Some(c) = &options.column {
        return names.iter().position(|n| n == c).ok_or_else(|| ForeignError::TokenColumn {
            reason: format!("no column {c:?} (columns: {names:?})"),
        });
    }
    if let Some(i) = names.iter().position(|n| n == "tokens") {
        return Ok(i);
    }
    let candidates: Vec<usize> = (0..names.len()).filter(|&i| can_hold(&encodings[i])).collect();
    match candidates.as_slice() {
        [i] => Ok(*i),
        _ => Err(ForeignError::TokenColumn {
            reason: format!(
                "no `tokens` column and {} candidates among {names:?}: name one",
                candidates.len()
            ),
        }),
    }
}

/// How the token column's encoding stores tokens.
fn token_encoding(enc: &str, options: &ForeignOptions) -> std::result::Result<TokenEncoding, ForeignError> {
    if enc == "bytes" {
        let p = options.dtype.unwrap_or(Primitive::I64);
        if !p.is_integer() {
            return Err(ForeignError::UnsupportedTokenDType { dtype: p.descr().into() });
        }
        return Ok(TokenEncoding::Bytes(p));
    }
    if enc == "ndarray" {
        return Ok(TokenEncoding::Untyped);
    }
    let mut parts = enc.split(':');
    if parts.next() != Some("ndarray") {
        return Err(ForeignError::TokenColumn { reason: format!("encoding {enc} cannot hold token ids") });
    }
    let p = ndarray_dtype(parts.next().unwrap_or(""))?;
    Ok(if parts.next().is_some() { TokenEncoding::Fixed(p) } else { TokenEncoding::Typed(p) })
}
