//! Token files with little or no header: nanoGPT `train.bin` (raw) and llm.c /
//! modded-nanogpt shards (1024-byte header), and the dtype rule of every raw layout.
//!
//! Sources: karpathy/nanoGPT `data/openwebtext/prepare.py` (`np.memmap` of uint16, EOT
//! appended); karpathy/llm.c `dev/data/data_common.py` `write_datafile` (header of 256 i32:
//! magic 20240520 + version 1 + u16 tokens, or 20240801 + 7 + u32 tokens; token count at
//! word 2) and `llmc/dataloader.h`.

use std::path::Path;

use guideloom_formats::Primitive;
use guideloom_storage::{Segment, StorageDir};

use crate::error::{ForeignError, InteropError, Result};
use crate::files::{expand, i32_at, Fs, Place};
use crate::format::ForeignFormat;
use crate::options::ForeignOptions;
use crate::parts::{ForeignDetails, ForeignFile, Parts};

/// llm.c header bytes (256 × i32).
const LLMC_HEADER: u64 = 1024;
/// GPT-2 token shards: u16 tokens, version 1.
const LLMC_GPT2: i32 = 20_240_520;
/// Llama-3 token shards: u32 tokens, version 7.
const LLMC_LLAMA3: i32 = 20_240_801;
/// Multiple-choice evaluation files (not tokens).
const LLMC_EVAL: i32 = 20_240_522;

/// The dtype a raw layout needs, or the error saying so.
pub(crate) fn required_dtype(
    format: ForeignFormat,
    path: &Path,
    options: &ForeignOptions,
) -> Result<Primitive> {
    let d = options.dtype.ok_or_else(|| InteropError::Dataset {
        format: Some(format),
        path: path.to_path_buf(),
        error: Box::new(ForeignError::MissingOption {
            option: "dtype",
            reason: "the files record no dtype (nanoGPT writes u16, Dolma u16 or u32 by vocabulary): name it"
                .into(),
        }),
    })?;
    if !d.is_integer() {
        return Err(InteropError::Dataset {
            format: Some(format),
            path: path.to_path_buf(),
            error: Box::new(ForeignError::UnsupportedTokenDType { dtype: d.descr().into() }),
        });
    }
    Ok(d)
}

/// A raw file of `dtype` elements: its element count.
pub(crate) fn raw_elements(fs: &Fs, name: &str, bytes: u64, dtype: Primitive) -> Result<u64> {
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
        parts.segments.push(Segment { file: i, offset: 0, elements });
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
        segments.push(Segment { file: i, offset: base, elements });
        versions.push(version);
    }
    let mut parts = Parts::new(&fs, dtype.unwrap_or(Primitive::U16));
    parts.files = files;
    parts.segments = segments;
    parts.details = ForeignDetails::Llmc { versions };
    Ok(parts)
}
