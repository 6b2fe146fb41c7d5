//! What the table layouts (Hugging Face Arrow, Parquet) share: [`Tables`], the files of one
//! dataset gathered into [`Parts`] (one document per row, every file of one token dtype).
// Each format uses part of this module: with fewer than both table layouts, some of it is unused.
#![cfg_attr(not(all(feature = "arrow", feature = "parquet")), allow(dead_code, unused_imports))]

use guideloom_formats::Primitive;
use guideloom_storage::Segment;

use crate::error::{ForeignError, Result};
use crate::files::Fs;
use crate::parts::{ForeignDetails, ForeignFile, Parts};

/// One file of a table dataset, as its layout reader found it.
#[derive(Debug)]
pub(crate) struct TableFile<'a> {
    /// The file's name in the dataset's directory.
    pub(crate) name: &'a str,
    /// The token dtype.
    pub(crate) dtype: Primitive,
    /// The token column's type as pyarrow names it.
    pub(crate) column_type: &'a str,
    /// A hash of its schema or footer (part of the fingerprint).
    pub(crate) hash: u64,
    /// Per row: its end, in tokens from the file's first token.
    pub(crate) ends: &'a [u64],
    /// Its record batches or row groups.
    pub(crate) groups: u64,
    /// Its units of decoding (0: read in place).
    pub(crate) blocks: u64,
    /// Its size as the stream reads it.
    pub(crate) bytes: u64,
    /// Its runs of tokens: (first byte, tokens).
    pub(crate) runs: &'a [(u64, u64)],
}

/// The files of a table dataset, gathered in order.
pub(crate) struct Tables {
    parts: Parts,
    column: String,
    hash: xxhash_rust::xxh3::Xxh3,
    documents: Vec<u64>,
    rows: Vec<u64>,
    groups: Vec<u64>,
    blocks: Vec<u64>,
    first: Option<(Primitive, String)>,
}

impl Tables {
    /// Nothing gathered yet from the directory of `fs`; `listing` (the bytes of the file that
    /// lists the dataset's files, if any) starts the index hash.
    pub(crate) fn new(fs: &Fs, column: &str, listing: &[u8]) -> Self {
        let mut hash = xxhash_rust::xxh3::Xxh3::new();
        hash.update(listing);
        Tables {
            parts: Parts::new(fs, Primitive::I32),
            column: column.to_string(),
            hash,
            documents: vec![0],
            rows: Vec::new(),
            groups: Vec::new(),
            blocks: Vec::new(),
            first: None,
        }
    }

    /// The parts gathered so far (for a layout's own additions).
    pub(crate) fn parts_mut(&mut self) -> &mut Parts {
        &mut self.parts
    }

    /// Adds the next file.
    ///
    /// # Errors
    /// [`ForeignError::MixedDTypes`] when its dtype differs from the first file's.
    pub(crate) fn add(&mut self, fs: &Fs, f: TableFile<'_>) -> Result<()> {
        match &self.first {
            Some((d, _)) if *d != f.dtype => {
                return Err(fs.err(
                    f.name,
                    ForeignError::MixedDTypes { expected: d.descr().into(), found: f.dtype.descr().into() },
                ))
            }
            Some(_) => {}
            None => self.first = Some((f.dtype, f.column_type.to_string())),
        }
        self.hash.update(&f.hash.to_le_bytes());
        let file = self.parts.files.len();
        let mut elements = 0u64;
        for &(offset, n) in f.runs {
            if n > 0 {
                self.parts.segments.push(Segment { file, offset, elements: n });
            }
            elements += n;
        }
        let base = self.documents[self.documents.len() - 1];
        self.documents.extend(f.ends.iter().map(|e| base + e));
        self.rows.push(f.ends.len() as u64);
        self.groups.push(f.groups);
        self.blocks.push(f.blocks);
        self.parts.files.push(ForeignFile { path: f.name.into(), bytes: f.bytes, elements });
        Ok(())
    }

    /// The dataset's parts: dtype, documents, index hash and details.
    pub(crate) fn finish(self) -> Parts {
        let mut parts = self.parts;
        let (dtype, column_type) = self.first.unwrap_or((Primitive::I32, String::new()));
        parts.dtype = dtype;
        parts.documents = Some(self.documents);
        parts.index_hash = self.hash.digest();
        parts.details = ForeignDetails::Table {
            column: self.column,
            column_type,
            rows: self.rows,
            groups: self.groups,
            blocks: self.blocks,
        };
        parts
    }
}
