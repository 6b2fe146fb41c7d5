//! Megatron-Core indexed datasets: `<prefix>.idx` (`MMIDIDX` v1) + `<prefix>.bin`.
//!
//! Layout (NVIDIA/Megatron-LM `megatron/core/datasets/indexed_dataset.py`, `_IndexWriter`):
//! the `.idx` is the 9-byte magic `MMIDIDX\0\0`, u64 version 1, u8 dtype code, u64 sequence
//! count `N`, u64 document count `D` (documents + 1), then `i32[N]` sequence lengths (tokens),
//! `i64[N]` sequence pointers (byte offsets into the `.bin`), `i64[D]` document indices
//! (the sequence each document starts at; first 0, last `N`) and, for multimodal datasets
//! only, `i8[N]` modes. No array is aligned; everything is little-endian. The `.bin` is the
//! sequences back to back, no header.

use std::path::Path;

use guideloom_formats::Primitive;
use guideloom_storage::Segment;

use crate::error::{ForeignError, InteropError, Result};
use crate::files::{escaped, i32_at, i64_at, u64_at, Fs, Place};
use crate::format::ForeignFormat;
use crate::layouts::megatron_index::MegatronIndex;
use crate::options::ForeignOptions;
use crate::parts::{ForeignDetails, ForeignFile, Parts};

/// The `.idx` magic.
pub(crate) const MAGIC: &[u8] = b"MMIDIDX\0\0";
/// The legacy lazy/cached index magic (refused).
const LEGACY_MAGIC: &[u8] = b"TNTIDX\0\0";
/// Header bytes before the arrays.
const HEADER: u64 = 34;

/// The `.idx` of the dataset named by the last component `name` (a prefix, or its
/// `.bin`/`.idx`).
pub(crate) fn idx_name(name: &str) -> String {
    format!("{}.idx", stem(name))
}

/// The prefix's last component that `name` names (a trailing `.bin`/`.idx` removed).
fn stem(name: &str) -> &str {
    match Path::new(name).extension().and_then(|e| e.to_str()) {
        Some("bin" | "idx") => &name[..name.len() - 4],
        _ => name,
    }
}

/// What the `.idx` header says, checked against the file's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Header {
    /// The dtype code and its element type.
    code: u8,
    dtype: Primitive,
    /// Sequences (`N`) and document-index entries (`D`).
    sequences: u64,
    doc_entries: u64,
    /// Bytes per multimodal mode (1, or 4 for the 2023 writer's i32 modes); 0 without modes.
    mode_bytes: u64,
}

/// Checks the `.idx` header `head` (its first `min(idx_len, 34)` bytes) of an index of
/// `idx_len` bytes: the magic (the legacy one refused first), version 1, a token dtype code
/// (and the dtype `options` names, if any), and the exact size the counts imply (with the
/// modes when `options.multimodal`), computed without overflow.
///
/// # Errors
/// [`ForeignError::UnsupportedLegacyFormat`], [`ForeignError::BadMagic`],
/// [`ForeignError::TruncatedIndex`], [`ForeignError::UnsupportedVersion`],
/// [`ForeignError::UnsupportedTokenDType`], [`ForeignError::UnknownDTypeCode`],
/// [`ForeignError::MixedDTypes`], [`ForeignError::TrailingBytes`].
fn header(head: &[u8], idx_len: u64, options: &ForeignOptions) -> std::result::Result<Header, ForeignError> {
    // The legacy magic first: its file may be of any size.
    if head.starts_with(LEGACY_MAGIC) {
        return Err(ForeignError::UnsupportedLegacyFormat { magic: "TNTIDX".into() });
    }
    if idx_len < HEADER {
        if !MAGIC.starts_with(&head[..head.len().min(MAGIC.len())]) {
            return Err(ForeignError::BadMagic { found: escaped(&head[..head.len().min(MAGIC.len())]) });
        }
        return Err(ForeignError::TruncatedIndex { need: HEADER, have: idx_len });
    }
    if &head[..MAGIC.len()] != MAGIC {
        return Err(ForeignError::BadMagic { found: escaped(&head[..MAGIC.len()]) });
    }
    let version = u64_at(head, 9);
    if version != 1 {
        return Err(ForeignError::UnsupportedVersion { field: "version", found: version as i64 });
    }
    let code = head[17];
    let dtype = match code {
        1 => Primitive::U8,
        2 => Primitive::I8,
        3 => Primitive::I16,
        4 => Primitive::I32,
        5 => Primitive::I64,
        8 => Primitive::U16,
        6 | 7 => {
            return Err(ForeignError::UnsupportedTokenDType {
                dtype: format!("float (code {code}: float64 or float32 depending on the writer's version)"),
            })
        }
        c => return Err(ForeignError::UnknownDTypeCode { code: u64::from(c) }),
    };
    if let Some(want) = options.dtype.filter(|&d| d != dtype) {
        return Err(ForeignError::MixedDTypes { expected: dtype.descr().into(), found: want.descr().into() });
    }
    // The exact size, computed without overflow.
    let n = u64_at(head, 18);
    let d = u64_at(head, 26);
    let base = n
        .checked_mul(12)
        .and_then(|a| d.checked_mul(8).and_then(|b| a.checked_add(b)))
        .and_then(|a| a.checked_add(HEADER));
    let Some(base) = base else {
        return Err(ForeignError::TruncatedIndex { need: u64::MAX, have: idx_len });
    };
    let mut mode_bytes = 0u64;
    if options.multimodal {
        let with_modes = base.saturating_add(n);
        let int32_modes = n.checked_mul(4).and_then(|m| base.checked_add(m));
        if options.legacy_int32_modes && int32_modes == Some(idx_len) && idx_len != with_modes {
            mode_bytes = 4;
        } else if idx_len < with_modes {
            return Err(ForeignError::TruncatedIndex { need: with_modes, have: idx_len });
        } else if idx_len > with_modes {
            return Err(ForeignError::TrailingBytes { count: idx_len - with_modes });
        } else {
            mode_bytes = 1;
        }
    } else if idx_len < base {
        return Err(ForeignError::TruncatedIndex { need: base, have: idx_len });
    } else if idx_len > base {
        return Err(ForeignError::TrailingBytes { count: idx_len - base });
    }
    Ok(Header { code, dtype, sequences: n, doc_entries: d, mode_bytes })
}

/// The index in `idx` (the whole `.idx`, whose size [`header`] checked against `h`): the
/// document indices (from 0, non-decreasing, ending at the sequence count), the sequence
/// lengths and pointers (each pointer the end of the sequences before it, or rebuilt from the
/// lengths with `options.repair_pointers`), the modes; and the bytes the `.bin` must hold.
///
/// # Errors
/// [`ForeignError::DocumentIndexEnd`], [`ForeignError::DocumentIndexStart`],
/// [`ForeignError::DocumentIndexNotMonotonic`], [`ForeignError::NegativeLength`],
/// [`ForeignError::NegativePointer`], [`ForeignError::PointerMismatch`];
/// [`ForeignError::DataFileSize`] when the data's byte size overflows `u64`.
fn decode(
    idx: &[u8],
    h: &Header,
    options: &ForeignOptions,
) -> std::result::Result<(MegatronIndex, u64), ForeignError> {
    let (n, itemsize) = (h.sequences, h.dtype.size());
    // The size matches the file, so every count below fits memory as the file does.
    let (nn, dd) = (h.sequences as usize, h.doc_entries as usize);
    let lengths_at = HEADER as usize;
    let pointers_at = lengths_at + 4 * nn;
    let docs_at = pointers_at + 8 * nn;
    let modes_at = docs_at + 8 * dd;

    // Document indices.
    if dd == 0 {
        return Err(ForeignError::DocumentIndexEnd { last: -1, sequences: n });
    }
    let first = i64_at(idx, docs_at);
    if first != 0 {
        return Err(ForeignError::DocumentIndexStart { found: first });
    }
    let mut document_indices = Vec::with_capacity(dd);
    let mut prev = 0i64;
    for j in 0..dd {
        let v = i64_at(idx, docs_at + 8 * j);
        if v < prev {
            return Err(ForeignError::DocumentIndexNotMonotonic { entry: j as u64 });
        }
        prev = v;
        document_indices.push(v as u64);
    }
    if prev as u64 != n {
        return Err(ForeignError::DocumentIndexEnd { last: prev, sequences: n });
    }
    // Lengths and pointers, in 64 bits.
    let mut lengths = Vec::with_capacity(nn);
    let mut pointers = Vec::with_capacity(nn);
    let mut starts = Vec::with_capacity(nn + 1);
    let mut repaired = 0u64;
    let mut end = 0u64; // bytes
    let mut tokens = 0u64;
    starts.push(0);
    for i in 0..nn {
        let len = i32_at(idx, lengths_at + 4 * i);
        if len < 0 {
            return Err(ForeignError::NegativeLength { sequence: i as u64 });
        }
        let ptr = i64_at(idx, pointers_at + 8 * i);
        if ptr != end as i64 || ptr < 0 {
            if !options.repair_pointers {
                if ptr < 0 {
                    return Err(ForeignError::NegativePointer { sequence: i as u64 });
                }
                return Err(ForeignError::PointerMismatch { sequence: i as u64, found: ptr, expected: end });
            }
            repaired += 1;
        }
        lengths.push(len as u32);
        pointers.push(end);
        // At most 2^63 sequences of at most 2^31 tokens of 8 bytes: checked anyway.
        let bytes = (len as u64).checked_mul(itemsize).and_then(|b| end.checked_add(b));
        end = bytes.ok_or(ForeignError::DataFileSize { have: 0, want: u64::MAX })?;
        tokens += len as u64;
        starts.push(tokens);
    }
    let modes = match h.mode_bytes {
        1 => Some(idx[modes_at..modes_at + nn].iter().map(|&b| b as i8).collect()),
        4 => Some((0..nn).map(|i| i32_at(idx, modes_at + 4 * i) as i8).collect()),
        _ => None,
    };
    let index =
        MegatronIndex { dtype_code: h.code, lengths, pointers, starts, document_indices, modes, repaired };
    Ok((index, end))
}

/// Opens the Megatron dataset named by `place` (a prefix, or its `.bin`/`.idx`): the header
/// first, the whole `.idx` only once its size is the one the header implies ([`header`],
/// [`decode`]), then the `.bin`'s size.
pub(crate) fn open(place: &Place, options: &ForeignOptions) -> Result<Parts> {
    let path = place.label();
    let (root, name) = place.split();
    let stem = name.as_deref().map(stem).ok_or_else(|| InteropError::Dataset {
        format: Some(ForeignFormat::Megatron),
        path: path.clone(),
        error: Box::new(ForeignError::NoFiles { pattern: path.display().to_string() }),
    })?;
    let (idx_name, bin_name) = (format!("{stem}.idx"), format!("{stem}.bin"));
    let fs = Fs::new(ForeignFormat::Megatron, root.dir()?);
    let idx_len = fs.len(&idx_name)?;
    let err = |e: ForeignError| fs.err(&idx_name, e);
    let head = fs.read(&idx_name, 0, idx_len.min(HEADER))?;
    let h = header(&head, idx_len, options).map_err(err)?;
    let idx = fs.read(&idx_name, 0, idx_len)?;
    let (index, end) = decode(&idx, &h, options).map_err(err)?;
    let bin_len = fs.len(&bin_name)?;
    if bin_len != end {
        return Err(fs.err(&bin_name, ForeignError::DataFileSize { have: bin_len, want: end }));
    }
    let tokens = index.starts[index.starts.len() - 1];
    let documents = index.document_indices.iter().map(|&s| index.starts[s as usize]).collect();
    let mut parts = Parts::new(&fs, h.dtype);
    parts.files = vec![
        ForeignFile { path: bin_name.into(), bytes: bin_len, elements: tokens },
        ForeignFile { path: idx_name.into(), bytes: idx_len, elements: 0 },
    ];
    parts.segments = vec![Segment { file: 0, offset: 0, elements: tokens }];
    parts.documents = Some(documents);
    parts.index_hash = xxhash_rust::xxh3::xxh3_64(&idx);
    parts.details = ForeignDetails::Megatron(index);
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An `.idx` as megatron-core's `_IndexWriter` writes it: magic, version 1, the dtype code,
    /// `N`, `D`, then `i32[N]` lengths, `i64[N]` pointers, `i64[D]` document indices and the
    /// `extra` bytes (modes, or trailing bytes).
    fn idx(code: u8, lengths: &[i32], pointers: &[i64], docs: &[i64], extra: &[u8]) -> Vec<u8> {
        let mut b = MAGIC.to_vec();
        b.extend(1u64.to_le_bytes());
        b.push(code);
        b.extend((lengths.len() as u64).to_le_bytes());
        b.extend((docs.len() as u64).to_le_bytes());
        lengths.iter().for_each(|l| b.extend(l.to_le_bytes()));
        pointers.iter().for_each(|p| b.extend(p.to_le_bytes()));
        docs.iter().for_each(|d| b.extend(d.to_le_bytes()));
        b.extend(extra);
        b
    }

    /// [`header`] as [`open`] calls it: the first 34 bytes (fewer for a shorter file) and the
    /// file's size.
    fn head(bytes: &[u8], options: &ForeignOptions) -> std::result::Result<Header, ForeignError> {
        header(&bytes[..bytes.len().min(HEADER as usize)], bytes.len() as u64, options)
    }

    /// Three u16 sequences of 4, 3 and 5 tokens in three documents (its size: 34 + 12 * 3 +
    /// 8 * 4 = 102 bytes).
    fn three(extra: &[u8]) -> Vec<u8> {
        idx(8, &[4, 3, 5], &[0, 8, 14], &[0, 1, 2, 3], extra)
    }

    fn header_of(mode_bytes: u64) -> Header {
        Header { code: 8, dtype: Primitive::U16, sequences: 3, doc_entries: 4, mode_bytes }
    }

    /// Issue 33 (mutants of the short-file checks `idx_len < HEADER` -> `<=`, `==` and of the
    /// prefix test `!MAGIC.starts_with`): an index shorter than the 34-byte header is truncated
    /// when what it holds is a prefix of the magic (0, 5, 9 and 33 bytes), and a bad magic
    /// when it is not; a header of exactly 34 bytes (no sequences, no documents) is whole,
    /// and then refused for its document index, which must end at the sequence count.
    #[test]
    fn issue33_foreign_megatron_a_header_of_34_bytes_is_whole() {
        let empty = idx(8, &[], &[], &[], &[]);
        assert_eq!(empty.len(), 34);
        for len in [0, 5, 9, 33] {
            assert_eq!(
                head(&empty[..len], &ForeignOptions::new()),
                Err(ForeignError::TruncatedIndex { need: 34, have: len as u64 }),
                "{len}"
            );
        }
        assert_eq!(
            head(b"MMIDIDY", &ForeignOptions::new()),
            Err(ForeignError::BadMagic { found: "MMIDIDY".into() })
        );
        let h = head(&empty, &ForeignOptions::new()).unwrap();
        assert_eq!(h, Header { code: 8, dtype: Primitive::U16, sequences: 0, doc_entries: 0, mode_bytes: 0 });
        assert_eq!(
            decode(&empty, &h, &ForeignOptions::new()),
            Err(ForeignError::DocumentIndexEnd { last: -1, sequences: 0 })
        );
    }

    /// Issue 33 (mutant of the dtype check `d != dtype` -> `==`): a dtype the options name is
    /// checked against the header's: the same one opens, another is refused naming both.
    #[test]
    fn issue33_foreign_megatron_the_options_dtype_must_be_the_header_s() {
        assert_eq!(head(&three(&[]), &ForeignOptions::new().dtype(Primitive::U16)), Ok(header_of(0)));
        assert_eq!(
            head(&three(&[]), &ForeignOptions::new().dtype(Primitive::I32)),
            Err(ForeignError::MixedDTypes { expected: "<u2".into(), found: "<i4".into() })
        );
    }

    /// Issue 33 (mutants of the multimodal size rule: `&&` -> `||` twice, `==` -> `!=`,
    /// `!=` -> `==`, `<` -> `>`, `>` -> `<`, the trailing count `-` -> `+`, `/`): with
    /// `multimodal`, an index of three sequences is whole with exactly 3 bytes of i8 modes;
    /// 2 bytes are truncated, 4 and 12 trailing. With `legacy_int32_modes` too, 12 bytes are
    /// the 2023 writer's i32 modes, 3 bytes are still i8 modes, and 11 are trailing bytes.
    /// Without sequences the two sizes are the same, and the modes are i8.
    #[test]
    fn issue33_foreign_megatron_multimodal_modes_are_one_or_four_bytes_exactly() {
        let multimodal = ForeignOptions::new().multimodal(true);
        let mut legacy = multimodal.clone();
        legacy.legacy_int32_modes = true;
        let with = |modes: usize, options: &ForeignOptions| head(&three(&vec![0; modes]), options);
        assert_eq!(with(3, &multimodal), Ok(header_of(1)));
        assert_eq!(with(2, &multimodal), Err(ForeignError::TruncatedIndex { need: 105, have: 104 }));
        assert_eq!(with(4, &multimodal), Err(ForeignError::TrailingBytes { count: 1 }));
        assert_eq!(with(12, &multimodal), Err(ForeignError::TrailingBytes { count: 9 }));
        assert_eq!(with(12, &legacy), Ok(header_of(4)));
        assert_eq!(with(3, &legacy), Ok(header_of(1)));
        assert_eq!(with(11, &legacy), Err(ForeignError::TrailingBytes { count: 8 }));
        assert_eq!(with(2, &legacy), Err(ForeignError::TruncatedIndex { need: 105, have: 104 }));
        let none = idx(8, &[], &[], &[0], &[]);
        let h = head(&none, &legacy).unwrap();
        assert_eq!((h.sequences, h.mode_bytes), (0, 1));
        // Without `multimodal`, the same sizes are exact (0 bytes of modes) or trailing bytes.
        assert_eq!(with(0, &ForeignOptions::new()), Ok(header_of(0)));
        assert_eq!(with(3, &ForeignOptions::new()), Err(ForeignError::TrailingBytes { count: 3 }));
        assert_eq!(
            head(&three(&[])[..101], &ForeignOptions::new()),
            Err(ForeignError::TruncatedIndex { need: 102, have: 101 })
        );
    }

    /// Issue 33 (mutant of the length check `len < 0` -> `<=`): a sequence of no tokens is
    /// read (its pointer is the end of the one before, and its document is empty); a negative
    /// length is refused naming its sequence.
    #[test]
    fn issue33_foreign_megatron_a_sequence_may_be_empty_but_not_negative() {
        let b = idx(8, &[2, 0, 1], &[0, 4, 4], &[0, 1, 2, 3], &[]);
        let h = head(&b, &ForeignOptions::new()).unwrap();
        let (index, end) = decode(&b, &h, &ForeignOptions::new()).unwrap();
        assert_eq!(
            (index.lengths.as_slice(), index.pointers.as_slice(), end),
            (&[2, 0, 1][..], &[0, 4, 4][..], 6)
        );
        assert_eq!(index.starts, [0, 2, 2, 3]);
        let b = idx(8, &[2, -1, 1], &[0, 4, 4], &[0, 1, 2, 3], &[]);
        let h = head(&b, &ForeignOptions::new()).unwrap();
        assert_eq!(decode(&b, &h, &ForeignOptions::new()), Err(ForeignError::NegativeLength { sequence: 1 }));
    }

    /// Issue 33 (mutant of the pointer check `ptr < 0` -> `<=`): a pointer of 0 where the
    /// sequences before end at byte 8 is a mismatch naming both, not a negative pointer; -1 is
    /// a negative pointer.
    #[test]
    fn issue33_foreign_megatron_a_zero_pointer_past_the_first_is_a_mismatch() {
        for (pointer, want) in [
            (0, ForeignError::PointerMismatch { sequence: 1, found: 0, expected: 8 }),
            (-1, ForeignError::NegativePointer { sequence: 1 }),
        ] {
            let b = idx(8, &[4, 3, 5], &[0, pointer, 14], &[0, 1, 2, 3], &[]);
            let h = head(&b, &ForeignOptions::new()).unwrap();
            assert_eq!(decode(&b, &h, &ForeignOptions::new()).map(|_| ()), Err(want));
        }
    }

    /// Issue 33 (mutants of the i32 modes' decoding, `modes_at + 4 * i` and its arm): the 2023
    /// writer's i32 modes and the current i8 modes decode to the same values, in sequence order.
    #[test]
    fn issue33_foreign_megatron_modes_decode_from_i8_and_i32() {
        let mut legacy = ForeignOptions::new().multimodal(true);
        legacy.legacy_int32_modes = true;
        let i32_modes: Vec<u8> = [0i32, 1, -2].iter().flat_map(|m| m.to_le_bytes()).collect();
        let i8_modes = [0u8, 1, (-2i8) as u8];
        for modes in [&i32_modes[..], &i8_modes[..]] {
            let b = three(modes);
            let h = head(&b, &legacy).unwrap();
            let (index, _) = decode(&b, &h, &legacy).unwrap();
            assert_eq!(index.modes, Some(vec![0, 1, -2]), "{} bytes of modes", modes.len());
        }
    }
}
