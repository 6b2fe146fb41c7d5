//! Object-array-mapped datasets in the loader: the records of a top-level list as a data
//! source, and a collation that gathers a batch of them into named columns.

use std::sync::Arc;

use guideloom_formats::oamap::{gather_into, ColumnarBatch, OamapError, Projection, Reader};
use serde_json::Value;

use crate::{fingerprint_words, Collate, DataSource, LoaderError};

/// One record of an [`OamapRecords`] source: its index in the top-level list (checked against
/// the list's length). Its fields are read lazily through the source's [`Reader`], or gathered
/// with the other records of its batch by [`GatherColumns`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OamapRecord(pub u64);

/// The elements of an object-array-mapped dataset's top-level list as a data source.
///
/// `get` returns an [`OamapRecord`] handle and does no I/O; the data is touched by
/// [`GatherColumns`] (columnar batches, only the projected fields' arrays) or by
/// [`OamapRecords::json`] (one record as JSON). The fingerprint mixes the list length with
/// the schema's OAMap JSON.
///
/// ```
/// use std::sync::Arc;
/// use guideloom_formats::oamap::{fromdata, Reader, Schema};
/// use guideloom_loader::{GatherColumns, Loader, OamapRecords};
/// let schema = Schema::from_json(&serde_json::json!(
///     {"type": "list", "content": {"type": "record", "fields": {
///         "x": "float64", "ys": {"type": "list", "content": "int32"}}}}))?;
/// let data = serde_json::json!([{"x": 1.5, "ys": [1, 2]}, {"x": 2.5, "ys": []}, {"x": 3.5, "ys": [3]}]);
/// let arrays = fromdata(&schema, &data)?;
/// let reader = Arc::new(Reader::new(Arc::new(schema), Arc::new(arrays)));
/// let records = OamapRecords::new(Arc::clone(&reader))?;
/// let loader = Loader::builder(records)
///     .batch_size(2)
///     .collate(GatherColumns::new(reader, &["ys"])?)
///     .build()?;
/// let first = loader.iter().next().unwrap()?;
/// let ys = first.data.column("ys").unwrap();
/// assert_eq!(ys.offsets, vec![vec![0, 2, 2]]);       // rebased to the batch
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct OamapRecords {
    reader: Arc<Reader>,
    len: u64,
    fingerprint: u64,
}

fn oamap(index: u64, e: OamapError) -> LoaderError {
    LoaderError::source(index, e)
}

impl OamapRecords {
    /// The records of `reader`'s top-level list (its starts/stops are loaded now).
    ///
    /// # Errors
    /// [`LoaderError::Source`] when the root is not a list or its arrays are damaged.
    pub fn new(reader: Arc<Reader>) -> Result<Self, LoaderError> {
        let root = reader.root().map_err(|e| oamap(0, e))?;
        let list =
            root.as_list().ok_or_else(|| LoaderError::source(0, "the dataset's root is not a list"))?;
        let len = list.len() as u64;
        let schema = reader.schema().to_oamap_json(true).to_string();
        let mut words = vec![0x006f_616d_6170, len];
        words.extend(schema.as_bytes().chunks(8).map(|c| {
            let mut b = [0u8; 8];
            b[..c.len()].copy_from_slice(c);
            u64::from_le_bytes(b)
        }));
        Ok(OamapRecords { fingerprint: fingerprint_words(&words), reader, len })
    }

    /// The reader the records come from.
    pub fn reader(&self) -> &Arc<Reader> {
        &self.reader
    }

    /// Record `index` as JSON (OAMap's data conventions).
    ///
    /// # Errors
    /// [`LoaderError::IndexOutOfRange`]; [`LoaderError::Source`] for damaged arrays.
    pub fn json(&self, index: u64) -> Result<Value, LoaderError> {
        self.check(index)?;
        let root = self.reader.root().map_err(|e| oamap(index, e))?;
        let list =
            root.as_list().ok_or_else(|| LoaderError::source(index, "the dataset's root is not a list"))?;
        list.get(index as usize).and_then(|v| v.to_json()).map_err(|e| oamap(index, e))
    }

    fn check(&self, index: u64) -> Result<(), LoaderError> {
        if index >= self.len {
            return Err(LoaderError::IndexOutOfRange { index, len: self.len });
        }
        Ok(())
    }
}

impl DataSource for OamapRecords {
    type Item = OamapRecord;

    fn len(&self) -> u64 {
        self.len
    }

    fn get(&self, index: u64) -> Result<OamapRecord, LoaderError> {
        self.check(index)?;
        Ok(OamapRecord(index))
    }

    fn fingerprint(&self) -> u64 {
        self.fingerprint
    }
}

/// Collates a batch of [`OamapRecord`]s into a [`ColumnarBatch`]: per projected field, leaf
/// values plus offsets rebased to the batch (see
/// [`guideloom_formats::oamap::gather`]), in batch order. Only the projected fields' arrays
/// (and their parents' starts/stops) are ever loaded; no per-record object is created.
#[derive(Debug, Clone)]
pub struct GatherColumns {
    reader: Arc<Reader>,
    projection: Projection,
}

impl GatherColumns {
    /// Gathers the dotted `paths` (for example `"planets.orbital_period.val"`) of `reader`'s
    /// records.
    ///
    /// # Errors
    /// [`LoaderError::InvalidConfig`] for a path the schema does not have.
    pub fn new(reader: Arc<Reader>, paths: &[&str]) -> Result<Self, LoaderError> {
        let projection = Projection::new(reader.schema(), paths)
            .map_err(|e| LoaderError::InvalidConfig { field: "projection", detail: e.to_string() })?;
        Ok(GatherColumns { reader, projection })
    }
}

impl Collate<OamapRecord> for GatherColumns {
    type Output = ColumnarBatch;

    fn collate(&self, records: Vec<OamapRecord>) -> Result<ColumnarBatch, LoaderError> {
        let indices: Vec<usize> = records.iter().map(|r| r.0 as usize).collect();
        let mut out = ColumnarBatch::default();
        gather_into(&self.reader, &indices, &self.projection, &mut out)
            .map_err(|e| oamap(records.first().map_or(0, |r| r.0), e))?;
        Ok(out)
    }
}
