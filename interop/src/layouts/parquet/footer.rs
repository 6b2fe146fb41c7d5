//! A Parquet file's footer, read and checked before the token column is decoded, and the
//! helpers that name its token column's type: shared by the layout's opener (`super`) and
//! the decoded column ([`super::decoded`]).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use guideloom_formats::Primitive;
use parquet::basic::{ConvertedType, LogicalType, Type as PhysicalType};
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaData, ParquetMetaDataReader};
use parquet::schema::types::ColumnDescriptor;

use super::source::Source;
use crate::error::{ForeignError, Result};
use crate::files::{self, Fs};

/// The magic at both ends of a Parquet file.
const MAGIC: &[u8; 4] = b"PAR1";

/// Reads and checks the footer of `name`: magic at both ends, the footer length, the Thrift
/// metadata (arrow-rs), then the token column chunks' ranges, then the page indexes.
///
/// # Errors
/// [`ForeignError::BadMagic`], [`ForeignError::UnsupportedEncryption`],
/// [`ForeignError::FooterLengthOutOfRange`], [`ForeignError::FooterDecode`],
/// [`ForeignError::ColumnChunkOutOfRange`]; the column errors of [`token_leaf`].
pub(crate) fn read_footer(
    fs: &Fs,
    name: &str,
    src: &Source,
    column: &str,
) -> Result<(Arc<ParquetMetaData>, usize, u64)> {
    let err = |x: ForeignError| fs.err(name, x);
    let size = src.size();
    if size < 12 {
        return Err(err(ForeignError::FooterLengthOutOfRange { footer: 0, file: size }));
    }
    let head = fs.read(name, 0, 4)?;
    let tail = fs.read(name, size - 8, 8)?;
    if &tail[4..] == b"PARE" {
        return Err(err(ForeignError::UnsupportedEncryption));
    }
    if &tail[4..] != MAGIC {
        return Err(err(ForeignError::BadMagic { found: format!("footer: {}", show_magic(&tail[4..])) }));
    }
    if head != MAGIC {
        return Err(err(ForeignError::BadMagic { found: format!("header: {}", show_magic(&head)) }));
    }
    let footer = u64::from(files::u32_at(&tail, 0));
    if footer + 12 > size {
        return Err(err(ForeignError::FooterLengthOutOfRange { footer, file: size }));
    }
    let data_end = size - 8 - footer;
    let decode = |reason: String| err(ForeignError::FooterDecode { reason });
    let metadata = guarded(|| ParquetMetaDataReader::new().parse_and_finish(src))
        .map_err(&decode)?
        .map_err(|e| decode(e.to_string()))?;
    let leaf = token_leaf(&metadata, column).map_err(err)?;
    for (g, rg) in metadata.row_groups().iter().enumerate() {
        let c = rg.column(leaf);
        let start = match c.dictionary_page_offset() {
            Some(d) if d > 0 && d < c.data_page_offset() => d,
            _ => c.data_page_offset(),
        };
        let end = start.checked_add(c.compressed_size());
        let out_of_range = |end: u64| {
            err(ForeignError::ColumnChunkOutOfRange {
                row_group: g as u64,
                column: c.column_path().string(),
                end,
                data_end,
            })
        };
        match (u64::try_from(start), end.and_then(|e| u64::try_from(e).ok())) {
            (Ok(s), Some(e)) if s >= 4 && e <= data_end && s <= e => {}
            (_, e) => return Err(out_of_range(e.unwrap_or(u64::MAX))),
        }
        for range in [c.offset_index_range(), c.column_index_range()].into_iter().flatten() {
            if range.end > data_end || range.start < 4 {
                return Err(out_of_range(range.end));
            }
        }
    }
    let footer_hash = xxhash_rust::xxh3::xxh3_64(&fs.read(name, data_end, footer)?);
    let metadata = guarded(|| {
        let mut reader = ParquetMetaDataReader::new_with_metadata(metadata)
            .with_page_index_policy(PageIndexPolicy::Optional);
        reader.read_page_indexes(src)?;
        reader.finish()
    })
    .map_err(&decode)?
    .map_err(|e| decode(format!("page index: {e}")))?;
    Ok((Arc::new(metadata), leaf, footer_hash))
}

/// A magic shown as text when it is Parquet's kind of text (`PAR0`), else as hex.
fn show_magic(b: &[u8]) -> String {
    if b.starts_with(b"PAR") && b.iter().all(u8::is_ascii_graphic) {
        String::from_utf8_lossy(b).into_owned()
    } else {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }
}

/// Runs `f`, a panic in it an error.
pub(crate) fn guarded<T>(f: impl FnOnce() -> T) -> std::result::Result<T, String> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| {
        let what = p
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| p.downcast_ref::<&str>().copied())
            .unwrap_or("a panic");
        format!("the Parquet decoder failed ({what})")
    })
}

/// The leaf column (its index among the file's leaves) holding the token column `column`:
/// a top-level field of that name with exactly one leaf, repeated once, of an integer type.
fn token_leaf(metadata: &ParquetMetaData, column: &str) -> std::result::Result<usize, ForeignError> {
    let schema = metadata.file_metadata().schema_descr();
    let top: Vec<String> = schema.root_schema().get_fields().iter().map(|f| f.name().to_string()).collect();
    if !top.iter().any(|n| n == column) {
        return Err(ForeignError::ColumnNotFound { column: column.to_string(), have: top });
    }
    let leaves: Vec<usize> =
        (0..schema.num_columns()).filter(|&i| schema.column(i).path().parts()[0] == column).collect();
    let Some(&leaf) = leaves.first() else {
        return Err(ForeignError::UnsupportedTokenType { found: "a group without leaves".into() });
    };
    let descr = schema.column(leaf);
    let type_name = leaf_type_name(&descr);
    if leaves.len() != 1 || descr.max_rep_level() != 1 || dtype_of(&descr).is_none() {
        return Err(ForeignError::UnsupportedTokenType {
            found: if leaves.len() != 1 { format!("a column of {} leaves", leaves.len()) } else { type_name },
        });
    }
    Ok(leaf)
}

/// The guideloom dtype of an integer leaf (INT32/INT64 with their integer logical or
/// converted types).
pub(crate) fn dtype_of(descr: &ColumnDescriptor) -> Option<Primitive> {
    let logical = match descr.logical_type_ref() {
        Some(LogicalType::Integer(t)) => Some((t.bit_width, t.is_signed)),
        Some(_) => return None,
        None => match descr.converted_type() {
            ConvertedType::NONE => None,
            ConvertedType::INT_8 => Some((8, true)),
            ConvertedType::INT_16 => Some((16, true)),
            ConvertedType::INT_32 => Some((32, true)),
            ConvertedType::INT_64 => Some((64, true)),
            ConvertedType::UINT_8 => Some((8, false)),
            ConvertedType::UINT_16 => Some((16, false)),
            ConvertedType::UINT_32 => Some((32, false)),
            ConvertedType::UINT_64 => Some((64, false)),
            _ => return None,
        },
    };
    Some(match (descr.physical_type(), logical) {
        (PhysicalType::INT32, None | Some((32, true))) => Primitive::I32,
        (PhysicalType::INT32, Some((8, true))) => Primitive::I8,
        (PhysicalType::INT32, Some((16, true))) => Primitive::I16,
        (PhysicalType::INT32, Some((8, false))) => Primitive::U8,
        (PhysicalType::INT32, Some((16, false))) => Primitive::U16,
        (PhysicalType::INT32, Some((32, false))) => Primitive::U32,
        (PhysicalType::INT64, None | Some((64, true))) => Primitive::I64,
        (PhysicalType::INT64, Some((64, false))) => Primitive::U64,
        _ => return None,
    })
}

/// A leaf's type as pyarrow names it (`string`, `list<float>`, `list<uint16>`).
pub(crate) fn leaf_type_name(descr: &ColumnDescriptor) -> String {
    let base = match (descr.physical_type(), descr.logical_type_ref(), dtype_of(descr)) {
        (_, _, Some(p)) => match p {
            Primitive::I8 => "int8",
            Primitive::I16 => "int16",
            Primitive::I32 => "int32",
            Primitive::I64 => "int64",
            Primitive::U8 => "uint8",
            Primitive::U16 => "uint16",
            Primitive::U32 => "uint32",
            _ => "uint64",
        }
        .to_string(),
        (PhysicalType::BYTE_ARRAY, Some(LogicalType::String), _) => "string".into(),
        (PhysicalType::BYTE_ARRAY, _, _) => "binary".into(),
        (PhysicalType::FLOAT, _, _) => "float".into(),
        (PhysicalType::DOUBLE, _, _) => "double".into(),
        (PhysicalType::BOOLEAN, _, _) => "bool".into(),
        (t, _, _) => t.to_string().to_ascii_lowercase(),
    };
    (0..descr.max_rep_level()).fold(base, |t, _| format!("list<{t}>"))
}
