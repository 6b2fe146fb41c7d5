//! A Parquet file's token column as the stream reads it: [`TokenColumn`], a
//! [`DecodedFile`] of little-endian tokens decoded block by block (a data page when the file
//! has an offset index, else a row group) into a bounded cache.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use guideloom_formats::Primitive;
use guideloom_storage::StorageError;
use parquet::basic::Type as PhysicalType;
use parquet::column::page::{Page, PageMetadata, PageReader};
use parquet::column::reader::ColumnReaderImpl;
use parquet::data_type::{DataType, Int32Type, Int64Type};
use parquet::errors::ParquetError;
use parquet::file::metadata::ParquetMetaData;
use parquet::file::serialized_reader::SerializedPageReader;
use parquet::schema::types::ColumnDescPtr;

use super::footer::{dtype_of, guarded, leaf_type_name, read_footer};
use super::pages::{self, PageInfo};
use super::source::Source;
use crate::dir::DecodedFile;
use crate::error::{ForeignError, Result};
use crate::files::Fs;

/// The most decoded bytes a file's cache keeps (blocks past it are evicted oldest first; a
/// block larger than it is decoded, used and dropped).
const CACHE_BYTES: u64 = 64 << 20;

/// What decoding rows gives: each row's token count and the tokens' bytes, or what is wrong
/// with them (the outer error is the decoder's).
type Decoded = parquet::errors::Result<std::result::Result<(Vec<u64>, Vec<u8>), ForeignError>>;

/// Records read per call of the column reader.
const BATCH_RECORDS: usize = 8192;

/// The token column of one Parquet file, decoded on demand.
#[derive(Debug)]
pub(crate) struct TokenColumn {
    fs: Fs,
    name: String,
    source: Arc<Source>,
    metadata: Arc<ParquetMetaData>,
    leaf: usize,
    descr: ColumnDescPtr,
    /// The token dtype.
    pub(crate) dtype: Primitive,
    /// The column's type as pyarrow names it.
    pub(crate) type_name: String,
    /// xxh3 of the footer bytes.
    pub(crate) footer_hash: u64,
    /// Per row: its end, in tokens from the file's first token.
    pub(crate) ends: Vec<u64>,
    /// Per row group: its pages (from the header walk).
    pages: Vec<Vec<PageInfo>>,
    /// The units of decoding, in token order.
    blocks: Vec<Block>,
    cache: Mutex<Cache>,
}

/// Rows decoded together: one page (with an offset index) or one row group.
#[derive(Debug, Clone, Copy)]
struct Block {
    row_group: usize,
    /// Its first row, in the row group.
    first_row: u64,
    rows: u64,
    /// Its first token, in the file.
    start: u64,
    tokens: u64,
}

/// Decoded blocks, by index, oldest first in `order`.
#[derive(Debug, Default)]
struct Cache {
    blocks: HashMap<usize, Arc<Vec<u8>>>,
    order: VecDeque<usize>,
    bytes: u64,
}

/// How the definition levels of the token column read: `max` is a token; `>= element` a null
/// token; `element - 1` an empty list; below, a null list.
#[derive(Debug, Clone, Copy)]
struct Levels {
    max: i16,
    element: i16,
}

impl TokenColumn {
    /// Opens `name`: footer and page headers checked, the token column decoded once for the
    /// document lengths.
    ///
    /// # Errors
    /// The footer errors of [`read_footer`]; [`ForeignError::PageDecode`],
    /// [`ForeignError::DecompressedSizeMismatch`], [`ForeignError::NullTokens`],
    /// [`ForeignError::RowCountMismatch`] for the pages; read errors.
    pub(crate) fn open(fs: &Fs, name: &str, column: &str) -> Result<Self> {
        let size = fs.len(name)?;
        let source = Arc::new(Source::new(fs, name, size));
        let (metadata, leaf, footer_hash) = read_footer(fs, name, &source, column)?;
        let descr = metadata.file_metadata().schema_descr().column(leaf);
        let dtype = dtype_of(&descr).unwrap_or(Primitive::I32);
        let mut file = TokenColumn {
            fs: fs.clone(),
            name: name.to_string(),
            source,
            metadata: metadata.clone(),
            leaf,
            type_name: leaf_type_name(&descr),
            descr,
            dtype,
            footer_hash,
            ends: Vec::new(),
            pages: Vec::new(),
            blocks: Vec::new(),
            cache: Mutex::new(Cache::default()),
        };
        for (g, rg) in metadata.row_groups().iter().enumerate() {
            let c = rg.column(leaf);
            let start = match c.dictionary_page_offset() {
                Some(d) if d > 0 && d < c.data_page_offset() => d,
                _ => c.data_page_offset(),
            } as u64;
            let range = (start, start + c.compressed_size() as u64);
            let total = u64::try_from(c.uncompressed_size()).unwrap_or(0);
            let walked =
                pages::walk(&file.source, range, total).map_err(|reason| file.page_error(g, reason))?;
            file.pages.push(walked);
        }
        let mut tokens = 0u64;
        for (g, rg) in metadata.row_groups().iter().enumerate() {
            let rows = u64::try_from(rg.num_rows()).unwrap_or(0);
            let (lengths, _) = file.read_rows(g, 0, rows, false)?;
            let first_row = file.ends.len();
            let rg_start = tokens;
            for l in &lengths {
                tokens += l;
                file.ends.push(tokens);
            }
            let row_end = |r: u64| if r == 0 { rg_start } else { file.ends[first_row + r as usize - 1] };
            let locations = metadata.page_index_for_row_group(g).page_locations(leaf).cloned();
            let mut firsts: Vec<u64> = match locations {
                Some(locs) if !locs.is_empty() => {
                    locs.iter().map(|l| l.first_row_index.max(0) as u64).collect()
                }
                _ => vec![0],
            };
            if firsts[0] != 0 || firsts.windows(2).any(|w| w[0] > w[1]) || firsts.iter().any(|&f| f > rows) {
                return Err(fs.err(
                    name,
                    ForeignError::FooterDecode {
                        reason: format!(
                            "row group {g}: the offset index's first rows {firsts:?} are not in order"
                        ),
                    },
                ));
            }
            firsts.push(rows);
            for w in firsts.windows(2) {
                let (a, b) = (w[0], w[1]);
                if b > a {
                    let (s, e) = (row_end(a), row_end(b));
                    file.blocks.push(Block {
                        row_group: g,
                        first_row: a,
                        rows: b - a,
                        start: s,
                        tokens: e - s,
                    });
                }
            }
        }
        Ok(file)
    }

    /// Tokens in the file.
    pub(crate) fn tokens(&self) -> u64 {
        self.ends.last().copied().unwrap_or(0)
    }

    /// Row groups in the file.
    pub(crate) fn row_groups(&self) -> usize {
        self.metadata.num_row_groups()
    }

    /// The units of decoding: data pages (with an offset index) or row groups.
    pub(crate) fn blocks(&self) -> usize {
        self.blocks.len()
    }

    /// The decoded size: tokens times the dtype's size.
    pub(crate) fn len_bytes(&self) -> u64 {
        self.tokens() * self.dtype.size()
    }

    fn column_path(&self) -> String {
        self.descr.path().string()
    }

    fn page_error(&self, row_group: usize, reason: String) -> crate::error::InteropError {
        self.fs.err(
            &self.name,
            ForeignError::PageDecode { row_group: row_group as u64, column: self.column_path(), reason },
        )
    }

    /// Decodes rows `[skip, skip + rows)` of row group `g`: each row's token count and, with
    /// `values`, the tokens as little-endian bytes of the dtype.
    fn read_rows(&self, g: usize, skip: u64, rows: u64, values: bool) -> Result<(Vec<u64>, Vec<u8>)> {
        let failed = Arc::new(AtomicUsize::new(usize::MAX));
        let run = || -> Decoded {
            let rg = self.metadata.row_group(g);
            let locations = self.metadata.page_index_for_row_group(g).page_locations(self.leaf).cloned();
            let inner = SerializedPageReader::new(
                self.source.clone(),
                rg.column(self.leaf),
                usize::try_from(rg.num_rows()).unwrap_or(0),
                locations,
            )?;
            let pages: Box<dyn PageReader> = Box::new(Counted { inner, next: 0, failed: failed.clone() });
            match self.descr.physical_type() {
                PhysicalType::INT32 => {
                    let reader = ColumnReaderImpl::<Int32Type>::new(self.descr.clone(), pages);
                    self.decode(reader, g, (skip, rows), values, i64::from)
                }
                _ => {
                    let reader = ColumnReaderImpl::<Int64Type>::new(self.descr.clone(), pages);
                    self.decode(reader, g, (skip, rows), values, |v| v)
                }
            }
        };
        let outcome = guarded(run).map_err(|reason| self.page_error(g, reason))?;
        match outcome {
            Ok(Ok(out)) => Ok(out),
            Ok(Err(x)) => Err(self.fs.err(&self.name, x)),
            Err(e) => Err(self.parquet_error(g, failed.load(Ordering::Relaxed), &e)),
        }
    }

    /// The error of a page that failed to decode: a decompressed size that differs from its
    /// header's is [`ForeignError::DecompressedSizeMismatch`].
    fn parquet_error(&self, g: usize, page: usize, e: &ParquetError) -> crate::error::InteropError {
        let text = e.to_string();
        let lower = text.to_ascii_lowercase();
        let size = lower.contains("destination buffer")
            || lower.contains("too small")
            || lower.contains("decompressed size")
            || lower.contains("decompress");
        match self.pages.get(g).and_then(|p| p.get(page)) {
            Some(info) if size => self.fs.err(
                &self.name,
                ForeignError::DecompressedSizeMismatch {
                    row_group: g as u64,
                    column: self.column_path(),
                    page: page as u64,
                    declared: info.uncompressed,
                    found: if lower.contains("too small") || lower.contains("destination") {
                        "frame holds more".into()
                    } else {
                        text
                    },
                },
            ),
            _ if page != usize::MAX => self.page_error(g, format!("page {page}: {text}")),
            _ => self.page_error(g, text),
        }
    }

    /// Reads rows `[skip, skip + rows)` through `reader`; see [`TokenColumn::read_rows`].
    fn decode<T: DataType>(
        &self,
        mut reader: ColumnReaderImpl<T>,
        g: usize,
        (skip, rows): (u64, u64),
        values: bool,
        wide: impl Fn(T::T) -> i64,
    ) -> Decoded
    where
        T::T: Copy,
    {
        let column = self.column_path();
        let max = self.descr.max_def_level();
        let element = if self.descr.self_type().is_optional() { max - 1 } else { max };
        let levels = Levels { max, element };
        if skip > 0 {
            let skipped = reader.skip_records(skip as usize)? as u64;
            if skipped != skip {
                return Ok(Err(ForeignError::RowCountMismatch {
                    row_group: g as u64,
                    declared: skip + rows,
                    found: skipped,
                }));
            }
        }
        let first_row =
            self.metadata.row_groups()[..g].iter().map(|r| r.num_rows() as u64).sum::<u64>() + skip;
        let (mut def, mut rep, mut vals) = (Vec::new(), Vec::new(), Vec::new());
        let mut lengths: Vec<u64> = Vec::with_capacity(rows.min(1 << 20) as usize);
        let mut out = Vec::new();
        while (lengths.len() as u64) < rows {
            def.clear();
            rep.clear();
            vals.clear();
            let want = (rows - lengths.len() as u64).min(BATCH_RECORDS as u64) as usize;
            let (records, _, read) = reader.read_records(want, Some(&mut def), Some(&mut rep), &mut vals)?;
            if records == 0 {
                break;
            }
            if def.len() < read || rep.len() < read {
                return Ok(Err(ForeignError::PageDecode {
                    row_group: g as u64,
                    column,
                    reason: format!("{read} levels read, {} and {} kept", def.len(), rep.len()),
                }));
            }
            for i in 0..read {
                if rep[i] == 0 || lengths.is_empty() {
                    lengths.push(0);
                }
                let row = first_row + lengths.len() as u64 - 1;
                let d = def[i];
                if d == levels.max {
                    *lengths.last_mut().unwrap_or(&mut 0) += 1;
                } else if d >= levels.element || d < levels.element - 1 {
                    return Ok(Err(ForeignError::NullTokens { column, row }));
                }
            }
            if values {
                for &v in &vals {
                    if let Err(reason) = push_token(&mut out, self.dtype, wide(v)) {
                        return Ok(Err(ForeignError::PageDecode { row_group: g as u64, column, reason }));
                    }
                }
            }
        }
        if lengths.len() as u64 != rows {
            return Ok(Err(ForeignError::RowCountMismatch {
                row_group: g as u64,
                declared: skip + rows,
                found: skip + lengths.len() as u64,
            }));
        }
        Ok(Ok((lengths, out)))
    }

    /// The decoded bytes of block `b`, from the cache or decoded (and cached).
    fn block(&self, b: usize) -> Result<Arc<Vec<u8>>> {
        if let Some(hit) = self.cache.lock().unwrap_or_else(|p| p.into_inner()).blocks.get(&b) {
            return Ok(hit.clone());
        }
        let block = self.blocks[b];
        let (lengths, bytes) = self.read_rows(block.row_group, block.first_row, block.rows, true)?;
        let tokens: u64 = lengths.iter().sum();
        if tokens != block.tokens || bytes.len() as u64 != tokens * self.dtype.size() {
            return Err(self.page_error(
                block.row_group,
                format!("rows {}.. decode to {tokens} tokens, {} on open", block.first_row, block.tokens),
            ));
        }
        let bytes = Arc::new(bytes);
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.blocks.insert(b, bytes.clone()).is_none() {
            cache.order.push_back(b);
            cache.bytes += bytes.len() as u64;
        }
        while cache.bytes > CACHE_BYTES && cache.order.len() > 1 {
            if let Some(old) = cache.order.pop_front() {
                if let Some(gone) = cache.blocks.remove(&old) {
                    cache.bytes -= gone.len() as u64;
                }
            }
        }
        Ok(bytes)
    }
}

/// Appends `v` to `out` as a little-endian `dtype`, refusing values outside its range (an
/// unsigned INT32/INT64 is the bit pattern: reinterpreted, not sign-extended).
fn push_token(out: &mut Vec<u8>, dtype: Primitive, v: i64) -> std::result::Result<(), String> {
    let range = |ok: bool| {
        if ok {
            Ok(())
        } else {
            Err(format!("token {v} is outside the range of {}", dtype.descr()))
        }
    };
    match dtype {
        Primitive::I8 => range(i8::try_from(v).is_ok()).map(|()| out.push(v as i8 as u8)),
        Primitive::U8 => range(u8::try_from(v).is_ok()).map(|()| out.push(v as u8)),
        Primitive::I16 => range(i16::try_from(v).is_ok()).map(|()| out.extend((v as i16).to_le_bytes())),
        Primitive::U16 => range(u16::try_from(v).is_ok()).map(|()| out.extend((v as u16).to_le_bytes())),
        Primitive::I32 => range(i32::try_from(v).is_ok()).map(|()| out.extend((v as i32).to_le_bytes())),
        Primitive::U32 => {
            out.extend((v as i32 as u32).to_le_bytes());
            Ok(())
        }
        _ => {
            out.extend(v.to_le_bytes());
            Ok(())
        }
    }
}

impl DecodedFile for TokenColumn {
    fn len(&self) -> u64 {
        self.len_bytes()
    }

    fn read_at(&self, offset: u64, out: &mut [u8]) -> guideloom_storage::Result<()> {
        let path: PathBuf = self.fs.root.join(&self.name);
        let end = offset.checked_add(out.len() as u64).filter(|&e| e <= self.len_bytes());
        let Some(end) = end else {
            return Err(StorageError::ShortRead {
                path,
                offset,
                expected: out.len() as u64,
                got: self.len_bytes().saturating_sub(offset),
            });
        };
        let size = self.dtype.size();
        let first = offset / size;
        let mut b = self.blocks.partition_point(|k| k.start + k.tokens <= first);
        let mut pos = offset;
        while pos < end {
            let block = self.blocks.get(b).copied().ok_or_else(|| StorageError::ShortRead {
                path: path.clone(),
                offset: pos,
                expected: end - pos,
                got: 0,
            })?;
            let (bs, be) = (block.start * size, (block.start + block.tokens) * size);
            if be <= pos {
                b += 1;
                continue;
            }
            let data = self.block(b).map_err(|e| StorageError::Io {
                path: path.clone(),
                source: std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()),
            })?;
            let (from, to) = (pos.max(bs), end.min(be));
            let dst = (from - offset) as usize..(to - offset) as usize;
            out[dst].copy_from_slice(&data[(from - bs) as usize..(to - bs) as usize]);
            pos = to;
            b += 1;
        }
        Ok(())
    }
}

/// A page reader that counts the pages it is asked for, recording the one that failed.
struct Counted<R> {
    inner: R,
    next: usize,
    failed: Arc<AtomicUsize>,
}

impl<R: PageReader> Counted<R> {
    fn note<T>(&mut self, r: parquet::errors::Result<T>) -> parquet::errors::Result<T> {
        if r.is_err() {
            self.failed.store(self.next, Ordering::Relaxed);
        }
        self.next += 1;
        r
    }
}

impl<R: PageReader> Iterator for Counted<R> {
    type Item = parquet::errors::Result<Page>;

    fn next(&mut self) -> Option<Self::Item> {
        self.get_next_page().transpose()
    }
}

impl<R: PageReader> PageReader for Counted<R> {
    fn get_next_page(&mut self) -> parquet::errors::Result<Option<Page>> {
        let r = self.inner.get_next_page();
        self.note(r)
    }

    fn peek_next_page(&mut self) -> parquet::errors::Result<Option<PageMetadata>> {
        self.inner.peek_next_page()
    }

    fn skip_next_page(&mut self) -> parquet::errors::Result<()> {
        let r = self.inner.skip_next_page();
        self.note(r)
    }

    fn supports_deferred_dictionary(&self) -> bool {
        self.inner.supports_deferred_dictionary()
    }

    fn take_deferred_dictionary(&mut self) -> parquet::errors::Result<Option<Page>> {
        self.inner.take_deferred_dictionary()
    }

    fn at_record_boundary(&mut self) -> parquet::errors::Result<bool> {
        self.inner.at_record_boundary()
    }
}
