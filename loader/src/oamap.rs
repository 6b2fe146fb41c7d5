//! Object-array-mapped datasets in the loader (feature `oamap`): the records of a top-level
//! list as a data source, and a collation that gathers a batch of them into named columns.

use std::sync::Arc;

use guideloom_oamap::{gather_dataset_into, ColumnarBatch, Dataset, OamapError, Projection, Reader};
use serde_json::Value;

use crate::{fingerprint_words, Collate, DataSource, LoaderError};

/// One record of an [`OamapRecords`] source: its global index in the top-level list
/// (checked against the list's length). Its fields are read lazily through the source's
/// [`Dataset`], or gathered with the other records of its batch by [`GatherColumns`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OamapRecord(pub u64);

/// The elements of an object-array-mapped dataset's top-level list as a data source.
///
/// The data is a [`Dataset`]: OAMap 0.12's top-level list split into partitions by offsets
/// ([`OamapRecords::new`]; record `k` is global entry `k`, whatever partition holds it), or
/// a single [`Reader`], which is a dataset of one partition ([`OamapRecords::from_reader`]).
///
/// `get` returns an [`OamapRecord`] handle and does no I/O; the data is touched by
/// [`GatherColumns`] (columnar batches, only the projected fields' arrays) or by
/// [`OamapRecords::json`] (one record as JSON). The fingerprint mixes the schema's OAMap
/// JSON with the partition offsets (with the list length for a reader).
///
/// ```
/// use std::sync::Arc;
/// use guideloom_loader::{GatherColumns, Loader, OamapRecords};
/// use guideloom_oamap::{from_data, Reader, Schema};
/// let schema = Schema::from_json(&serde_json::json!(
///     {"type": "list", "content": {"type": "record", "fields": {
///         "x": "float64", "ys": {"type": "list", "content": "int32"}}}}))?;
/// let data = serde_json::json!([{"x": 1.5, "ys": [1, 2]}, {"x": 2.5, "ys": []}, {"x": 3.5, "ys": [3]}]);
/// let arrays = from_data(&schema, &data)?;
/// let reader = Arc::new(Reader::new(Arc::new(schema), Arc::new(arrays)));
/// let records = OamapRecords::from_reader(reader)?;
/// let gather = GatherColumns::new(&records, &["ys"])?;
/// let loader = Loader::builder(records).batch_size(2).collate(gather).build()?;
/// let first = loader.iter().next().unwrap()?;
/// let ys = first.data.column("ys").unwrap();
/// assert_eq!(ys.offsets, vec![vec![0, 2, 2]]);       // rebased to the batch
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct OamapRecords {
    dataset: Arc<Dataset>,
    fingerprint: u64,
}

fn oamap(index: u64, e: OamapError) -> LoaderError {
    LoaderError::source(index, e)
}

/// `[tag, numbers..., schema bytes as little-endian words...]`, for fingerprints.
fn schema_words(tag: u64, numbers: &[u64], schema: &str) -> Vec<u64> {
    let mut words = vec![tag];
    words.extend_from_slice(numbers);
    words.extend(schema.as_bytes().chunks(8).map(|c| {
        let mut b = [0u8; 8];
        b[..c.len()].copy_from_slice(c);
        u64::from_le_bytes(b)
    }));
    words
}

impl OamapRecords {
    /// The entries of `dataset`, across its partitions in order.
    pub fn new(dataset: Arc<Dataset>) -> Self {
        let schema = dataset.schema().to_oamap_json(true).to_string();
        let offsets = dataset.description().offsets();
        let fingerprint = fingerprint_words(&schema_words(0x0064_736f_616d, offsets, &schema));
        OamapRecords { dataset, fingerprint }
    }

    /// The elements of `reader`'s top-level list: a dataset of one partition
    /// ([`Dataset::from_reader`]; the root's starts/stops are loaded now).
    ///
    /// # Errors
    /// [`LoaderError::Source`] (record 0) when the root is not a list or its arrays are
    /// damaged.
    pub fn from_reader(reader: Arc<Reader>) -> Result<Self, LoaderError> {
        let schema = reader.schema().to_oamap_json(true).to_string();
        let dataset = Dataset::from_reader(reader).map_err(|e| oamap(0, e))?;
        // The fingerprint a reader's records have always had: its list length and schema.
        let fingerprint = fingerprint_words(&schema_words(0x006f_616d_6170, &[dataset.len()], &schema));
        Ok(OamapRecords { dataset: Arc::new(dataset), fingerprint })
    }

    /// The dataset the records come from.
    pub fn dataset(&self) -> &Arc<Dataset> {
        &self.dataset
    }

    /// Record (global entry) `index` as JSON (OAMap's data conventions).
    ///
    /// # Errors
    /// [`LoaderError::IndexOutOfRange`]; [`LoaderError::Source`] for damaged arrays (the
    /// error chain names the partition and the array).
    pub fn json(&self, index: u64) -> Result<Value, LoaderError> {
        self.check(index)?;
        self.dataset.get_json(index).map_err(|e| oamap(index, e))
    }

    fn check(&self, index: u64) -> Result<(), LoaderError> {
        if index >= self.dataset.len() {
            return Err(LoaderError::IndexOutOfRange { index, len: self.dataset.len() });
        }
        Ok(())
    }
}

impl DataSource for OamapRecords {
    type Item = OamapRecord;

    fn len(&self) -> u64 {
        self.dataset.len()
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
/// values plus offsets rebased to the batch (see [`guideloom_oamap::gather_dataset`]), in
/// batch order. Only the projected fields' arrays (and their parents' starts/stops) are ever
/// loaded; no per-record object is created. A batch may take records from several
/// partitions; its offsets are rebased across them, so the batch equals the one gathered
/// from the same records unpartitioned.
#[derive(Debug, Clone)]
pub struct GatherColumns {
    dataset: Arc<Dataset>,
    projection: Projection,
}

impl GatherColumns {
    /// Gathers the dotted `paths` (for example `"planets.orbital_period.val"`) of
    /// `records`' dataset (record indices are global entry indices).
    ///
    /// # Errors
    /// [`LoaderError::InvalidConfig`] for a path the schema does not have.
    pub fn new(records: &OamapRecords, paths: &[&str]) -> Result<Self, LoaderError> {
        let dataset = Arc::clone(records.dataset());
        let projection = Projection::new(dataset.schema(), paths)
            .map_err(|e| LoaderError::InvalidConfig { field: "projection", detail: e.to_string() })?;
        Ok(GatherColumns { dataset, projection })
    }
}

impl Collate<OamapRecord> for GatherColumns {
    type Output = ColumnarBatch;

    fn collate(&self, records: Vec<OamapRecord>) -> Result<ColumnarBatch, LoaderError> {
        let mut out = ColumnarBatch::default();
        let first = records.first().map_or(0, |r| r.0);
        let indices: Vec<u64> = records.iter().map(|r| r.0).collect();
        gather_dataset_into(&self.dataset, &indices, &self.projection, &mut out)
            .map_err(|e| oamap(first, e))?;
        Ok(out)
    }
}
