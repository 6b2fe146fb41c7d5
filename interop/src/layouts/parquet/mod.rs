//! Parquet token tables (Hugging Face Hub files, plain pyarrow files): one file, a glob or a
//! directory of `*.parquet` (sorted byte-wise: the Hub's `<split>-0000k-of-0000N.parquet`
//! shards in row order), a token column (`input_ids` by default) that is a list of
//! INT32/INT64 values (any integer logical type), one document per row.
//!
//! Layout (apache/parquet-format `parquet.thrift`, `LogicalTypes.md`): `PAR1`, column chunks,
//! the page indexes, the Thrift `FileMetaData` footer, its u32 length, `PAR1`. The footer,
//! page indexes and pages are decoded by arrow-rs's `parquet` crate; before it is handed
//! any byte this reader checks the magic at both ends, the footer length, every token column
//! chunk's byte range against the start of the footer, and every page header's sizes against
//! its chunk ([`pages`]); a panic in the decoder becomes an error naming the file.
//!
//! Parquet values are encoded (dictionary, RLE, bit-packed) and compressed, so they cannot
//! be read in place: on open the token column is decoded once, row group by row group, for
//! the document lengths (memory: 8 bytes per document, and one batch of levels); the stream
//! then reads each file's tokens through a [`DecodedFile`](crate::dir::DecodedFile)
//! ([`decoded::TokenColumn`]) that decodes the *blocks* a window touches — one data page (with
//! its dictionary page) when the file has an offset index, else one whole row group — into
//! a bounded cache of decoded blocks. A random window therefore costs, in decoded bytes, the
//! pages it spans (plus their dictionary pages) with a page index, or the row groups it spans
//! without one.

mod decoded;
mod footer;
mod pages;
mod source;

use std::sync::Arc;

use crate::error::Result;
use crate::files::{self, Fs, Place};
use crate::format::ForeignFormat;
use crate::layouts::table::{TableFile, Tables};
use crate::options::ForeignOptions;
use crate::parts::Parts;

use self::decoded::TokenColumn;

/// The token column when none is named.
const DEFAULT_COLUMN: &str = "input_ids";

/// Opens the Parquet files at `place`.
pub(crate) fn open(place: &Place, options: &ForeignOptions) -> Result<Parts> {
    let column = options.column.as_deref().unwrap_or(DEFAULT_COLUMN);
    let (dir, names) = files::expand(ForeignFormat::Parquet, place, &["parquet"])?;
    let fs = Fs::new(ForeignFormat::Parquet, dir);
    let mut tables = Tables::new(&fs, column, &[]);
    for name in &names {
        let file = TokenColumn::open(&fs, name, column)?;
        tables.add(
            &fs,
            TableFile {
                name,
                dtype: file.dtype,
                column_type: &file.type_name,
                hash: file.footer_hash,
                ends: &file.ends,
                groups: file.row_groups() as u64,
                blocks: file.blocks() as u64,
                bytes: file.len_bytes(),
                runs: &[(0, file.tokens())],
            },
        )?;
        tables.parts_mut().decoded.insert(name.clone(), Arc::new(file));
    }
    Ok(tables.finish())
}
