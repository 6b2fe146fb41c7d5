//! Token files with little or no header: nanoGPT `train.bin` (raw), llm.c / modded-nanogpt
//! shards (1024-byte header), OLMo / Dolma token files (raw, named `*.npy`), and the
//! delimiter scan that finds their documents.
//!
//! Sources: karpathy/nanoGPT `data/openwebtext/prepare.py` (`np.memmap` of uint16, EOT
//! appended); karpathy/llm.c `dev/data/data_common.py` `write_datafile` (header of 256 i32:
//! magic 20240520 + version 1 + u16 tokens, or 20240801 + 7 + u32 tokens; token count at
//! word 2) and `llmc/dataloader.h`; allenai/dolma `memmap_writer.py` and OLMo-core
//! `data/utils.py` (raw `np.memmap`, `.csv.gz` rows `start,end[,id,src,loc]`).

use std::io::Read;
use std::path::Path;

use guideloom_formats::Primitive;

use crate::{Result, StorageError};

use super::files::{expand, i32_at, Fs, Place, MAX_INDEX_BYTES};
use super::npy::MAGIC as NPY_MAGIC;
use super::{
    DocumentDelimiter, ForeignDetails, ForeignError, ForeignFile, ForeignFormat, ForeignOptions, Parts,
};
use crate::dir::StorageDir;

/// llm.c header bytes (256 × i32).
const LLMC_HEADER: u64 = 1024;
/// GPT-2 token shards: u16 tokens, version 1.
const LLMC_GPT2: i32 = 20_240_520;
/// Llama-3 token shards: u32 tokens, version 7.
const LLMC_LLAMA3: i32 = 20_240_801;
/// Multiple-choice evaluation files (not tokens).
const LLMC_EVAL: i32 = 20_240_522;

/// The dtype a raw layout needs, or the error saying so.
fn required_dtype(format: ForeignFormat, path: &Path, options: &ForeignOptions) -> Result<Primitive> {
    let d = options.dtype.ok_or_else(|| StorageError::Foreign {
        format: Some(format),
        path: path.to_path_buf(),
        error: Box::new(ForeignError::MissingOption {
            option: "dtype",
            reason: "the files record no dtype (nanoGPT writes u16, Dolma u16 or u32 by vocabulary): name it"
                .into(),
        }),
    })?;
    if !d.is_integer() {
        return Err(StorageError::Foreign {
            format: Some(format),
            path: path.to_path_buf(),
            error: Box::new(ForeignError::UnsupportedTokenDType { dtype: d.descr().into() }),
        });
    }
    Ok(d)
}

/// A raw file of `dtype` elements: its element count.
fn raw_elements(fs: &Fs, name: &str, bytes: u64, dtype: Primitive) -> Result<u64> {
    let itemsize = dtype.size();
    if !bytes.is_multiple_of(itemsize) {
        return Err(fs.err(name, ForeignError::NotMultipleOfItemSize { bytes, itemsize }));
    }
    Ok(bytes / itemsize)
}

/// nanoGPT: raw little-endian tokens of the given dtype, one file or a glob.
pub(crate) fn open_nanogpt(place: &Place, options: &ForeignOptions) -> Result<Parts> {
    let format = ForeignFormat::NanoGpt;
    let dtype = required_dtype(format, &place.label(), options)?;
    let (dir, names) = expand(format, place, &["bin"])?;
    let fs = Fs::new(format, dir);
    let mut parts = Parts::new(&fs, dtype);
    for (i, name) in names.iter().enumerate() {
        let bytes = fs.len(name)?;
        let elements = raw_elements(&fs, name, bytes, dtype)?;
        parts.files.push(ForeignFile { path: name.into(), bytes, elements });
        parts.segments.push((i, 0, elements));
    }
    Ok(parts)
}

/// Whether file `name` of `dir` starts with a valid llm.c token-shard header (magic and its
/// version).
pub(crate) fn has_llmc_header(dir: &dyn StorageDir, name: &str) -> bool {
    let mut head = [0u8; 8];
    let ok = matches!(dir.file_len(name), Ok(Some(n)) if n >= 8) && dir.read_at(name, 0, &mut head).is_ok();
    ok && matches!((i32_at(&head, 0), i32_at(&head, 4)), (LLMC_GPT2, 1) | (LLMC_LLAMA3, 7))
}

/// llm.c / modded-nanogpt shards (one file or a glob); header-less legacy files when a dtype
/// is given and the file has no llm.c magic.
pub(crate) fn open_llmc(place: &Place, options: &ForeignOptions) -> Result<Parts> {
    let format = ForeignFormat::Llmc;
    let (dir, names) = expand(format, place, &["bin"])?;
    let fs = Fs::new(format, dir);
    let mut dtype: Option<Primitive> = None;
    let mut files = Vec::new();
    let mut segments = Vec::new();
    let mut versions = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let bytes = fs.len(name)?;
        let head = fs.read(name, 0, bytes.min(LLMC_HEADER))?;
        let err = |e: ForeignError| fs.err(name, e);
        let magic = (head.len() >= 4).then(|| i32_at(&head, 0));
        let (file_dtype, base, elements, version) = match magic {
            Some(m @ (LLMC_GPT2 | LLMC_LLAMA3)) => {
                let (want, file_dtype) =
                    if m == LLMC_GPT2 { (1, Primitive::U16) } else { (7, Primitive::U32) };
                if head.len() < 8 {
                    return Err(err(ForeignError::TruncatedHeader { need: LLMC_HEADER, have: bytes }));
                }
                let version = i32_at(&head, 4);
                if version != want {
                    return Err(err(ForeignError::UnsupportedVersion {
                        field: "version",
                        found: version.into(),
                    }));
                }
                if bytes < LLMC_HEADER {
                    return Err(err(ForeignError::TruncatedHeader { need: LLMC_HEADER, have: bytes }));
                }
                let ntok = i32_at(&head, 8);
                if ntok < 0 {
                    return Err(err(ForeignError::NegativeTokenCount { found: ntok.into() }));
                }
                let expected = LLMC_HEADER + ntok as u64 * file_dtype.size();
                if bytes != expected {
                    return Err(err(ForeignError::SizeMismatch { expected, got: bytes }));
                }
                if let Some(d) = options.dtype.filter(|&d| d != file_dtype) {
                    return Err(err(ForeignError::MixedDTypes {
                        expected: file_dtype.descr().into(),
                        found: d.descr().into(),
                    }));
                }
                (file_dtype, LLMC_HEADER, ntok as u64, version as u32)
            }
            Some(LLMC_EVAL) => return Err(err(ForeignError::NotATokenShard { magic: LLMC_EVAL.into() })),
            other => match options.dtype {
                // A header-less file (llm.c before 2024-05-21 wrote raw int32): read as told.
                Some(_) => {
                    let d = required_dtype(format, &place.label(), options)?;
                    (d, 0, raw_elements(&fs, name, bytes, d)?, 0)
                }
                None => {
                    return Err(match other {
                        Some(m) => err(ForeignError::BadMagic { found: m.to_string() }),
                        None => err(ForeignError::TruncatedHeader { need: LLMC_HEADER, have: bytes }),
                    })
                }
            },
        };
        match dtype {
            Some(d) if d != file_dtype => {
                return Err(err(ForeignError::MixedDTypes {
                    expected: d.descr().into(),
                    found: file_dtype.descr().into(),
                }))
            }
            _ => dtype = Some(file_dtype),
        }
        files.push(ForeignFile { path: name.into(), bytes, elements });
        segments.push((i, base, elements));
        versions.push(version);
    }
    let mut parts = Parts::new(&fs, dtype.unwrap_or(Primitive::U16));
    parts.files = files;
    parts.segments = segments;
    parts.details = ForeignDetails::Llmc { versions };
    Ok(parts)
}

/// OLMo / Dolma raw token files (named `*.npy` without an NPY header): a file, a glob or a
/// directory; documents from each file's sibling `<stem>.csv.gz` when every file has one.
pub(crate) fn open_olmo(place: &Place, options: &ForeignOptions) -> Result<Parts> {
    let format = ForeignFormat::Olmo;
    let dtype = required_dtype(format, &place.label(), options)?;
    let (dir, names) = expand(format, place, &["npy"])?;
    let fs = Fs::new(format, dir);
    let mut parts = Parts::new(&fs, dtype);
    let mut documents = Some(vec![0u64]);
    let mut base = 0u64;
    for (i, name) in names.iter().enumerate() {
        let bytes = fs.len(name)?;
        if bytes >= NPY_MAGIC.len() as u64 && fs.read(name, 0, NPY_MAGIC.len() as u64)? == NPY_MAGIC {
            return Err(fs.err(name, ForeignError::LooksLikeNpy));
        }
        let elements = raw_elements(&fs, name, bytes, dtype)?;
        let csv = format!("{}.csv.gz", name.strip_suffix(".npy").unwrap_or(name));
        match (&mut documents, fs.len_opt(&csv)?) {
            (Some(docs), Some(_)) => {
                for b in read_metadata(&fs, &csv, elements)? {
                    docs.push(base + b);
                }
            }
            _ => documents = None,
        }
        parts.files.push(ForeignFile { path: name.into(), bytes, elements });
        parts.segments.push((i, 0, elements));
        base += elements;
    }
    if options.delimiter.is_none() {
        parts.documents = documents;
    }
    Ok(parts)
}

/// The document ends (token offsets inside the file) a Dolma / OLMo-core `.csv.gz` gives
/// for a file of `tokens` tokens: rows `start,end[,...]`, contiguous from 0 to `tokens`.
fn read_metadata(fs: &Fs, name: &str, tokens: u64) -> Result<Vec<u64>> {
    let gz = fs.read_whole(name, MAX_INDEX_BYTES)?;
    let mut text = String::new();
    flate2::read::GzDecoder::new(&gz[..])
        .take(MAX_INDEX_BYTES)
        .read_to_string(&mut text)
        .map_err(|e| fs.err(name, ForeignError::DecompressionFailed { reason: e.to_string() }))?;
    let mut ends = Vec::new();
    let mut prev = 0u64;
    for (row, line) in text.lines().filter(|l| !l.trim().is_empty()).enumerate() {
        let row = row as u64;
        let mut cols = line.split(',');
        let mut num = |what: &str| -> Result<u64> {
            let c = cols.next().unwrap_or("").trim();
            c.parse::<u64>().map_err(|_| {
                fs.err(
                    name,
                    ForeignError::Metadata { row, reason: format!("{what} {c:?} is not a token offset") },
                )
            })
        };
        let (start, end) = (num("start")?, num("end")?);
        if start > end || end > tokens || (start >= tokens && tokens > 0) {
            return Err(fs.err(name, ForeignError::MetadataOutOfRange { row, start, end, tokens }));
        }
        if start != prev {
            return Err(fs.err(
                name,
                ForeignError::Metadata {
                    row,
                    reason: format!("starts at {start}, the row before ends at {prev}"),
                },
            ));
        }
        prev = end;
        ends.push(end);
    }
    if prev != tokens {
        return Err(fs.err(
            name,
            ForeignError::Metadata {
                row: ends.len() as u64,
                reason: format!("the rows end at token {prev}, the file holds {tokens}"),
            },
        ));
    }
    Ok(ends)
}

/// One element of `dtype` (little- or big-endian) as u64 (signed values sign-extended).
pub(crate) fn element_value(b: &[u8], dtype: Primitive, big_endian: bool) -> u64 {
    let mut le = [0u8; 8];
    let n = b.len().min(8);
    le[..n].copy_from_slice(&b[..n]);
    if big_endian {
        le[..n].reverse();
    }
    let v = u64::from_le_bytes(le);
    let bits = 8 * n as u32;
    match dtype {
        Primitive::I8 | Primitive::I16 | Primitive::I32 if bits < 64 => {
            let shift = 64 - bits;
            (((v << shift) as i64) >> shift) as u64
        }
        _ => v,
    }
}

/// The document boundaries `delimiter` gives over the stream of `parts` (`elements`
/// tokens), read segment by segment in chunks of at most 1 Mi tokens.
pub(crate) fn scan_documents(
    fs: &Fs,
    parts: &Parts,
    delimiter: DocumentDelimiter,
    elements: u64,
) -> Result<Vec<u64>> {
    const CHUNK: u64 = 1 << 20;
    let itemsize = parts.dtype.size();
    let mut bounds = vec![0u64];
    let mut pos = 0u64;
    for &(file, base, n) in &parts.segments {
        let name = parts.files[file].path.to_string_lossy().into_owned();
        let mut done = 0u64;
        while done < n {
            let count = (n - done).min(CHUNK);
            let bytes = fs.read(&name, base + done * itemsize, count * itemsize)?;
            for (k, el) in bytes.chunks_exact(itemsize as usize).enumerate() {
                let v = element_value(el, parts.dtype, parts.big_endian);
                let p = pos + done + k as u64;
                match delimiter {
                    DocumentDelimiter::Ends(t) if v == t => bounds.push(p + 1),
                    DocumentDelimiter::Starts(t) if v == t && p > 0 => bounds.push(p),
                    _ => {}
                }
            }
            done += count;
        }
        pos += n;
    }
    if bounds.last() != Some(&elements) {
        bounds.push(elements);
    }
    Ok(bounds)
}
