//! Datasets and partitions, as OAMap 0.12 stores them (`oamap/database.py`,
//! `oamap/dataset.py`).
//!
//! A **dataset** is a top-level list split into partitions by `offsets`
//! (`[0, n0, n0+n1, ...]`): entry `k` lives in partition
//! `searchsorted(offsets, k, side="right") - 1`. Every partition is an independent array set
//! with the **same array names**; the top-level list's starts/stops are not stored but
//! synthesized per partition as `[0]` and `[partition length]` ([`PartitionArrays`]). The
//! stored description ([`DatasetDescription`]) is `{"schema": <OAMap schema JSON with every
//! array name explicit>, "offsets": [...], "extension"?, "doc"?, "metadata"?}`.

use std::sync::Arc;

use serde_json::{json, Map, Value};

use crate::schema::NodeKind;
use crate::{from_data, Array, ArrayMap, ArraySource, OamapError, Reader, Schema};

fn ds_err(msg: impl Into<String>) -> OamapError {
    OamapError::Dataset(msg.into())
}

/// The stored description of a partitioned dataset (OAMap's `Database._dataset2json`).
#[derive(Debug, Clone, PartialEq)]
pub struct DatasetDescription {
    schema: Arc<Schema>,
    offsets: Vec<u64>,
    /// `extension`, `doc`, `metadata`: kept verbatim.
    extra: Map<String, Value>,
}

impl DatasetDescription {
    /// A description of `schema` (root: a non-nullable list) split at `offsets`.
    ///
    /// `offsets` has one entry more than there are partitions: first 0, non-decreasing.
    ///
    /// # Errors
    /// [`OamapError::Dataset`] when the root is not a non-nullable list, or the offsets are
    /// empty, do not start at 0, or decrease.
    pub fn new(schema: Arc<Schema>, offsets: Vec<u64>) -> Result<Self, OamapError> {
        let root = schema.node(schema.root());
        if !matches!(root.kind, NodeKind::List { .. }) {
            return Err(ds_err("a dataset's schema must be a list (non-list data has one partition)"));
        }
        if root.nullable {
            return Err(ds_err("a dataset's top-level list cannot be nullable"));
        }
        match offsets.first() {
            Some(0) => {}
            Some(x) => return Err(ds_err(format!("offsets must start at 0, not {x}"))),
            None => return Err(ds_err("offsets must have at least one entry (0)")),
        }
        if let Some(k) = offsets.windows(2).position(|w| w[1] < w[0]) {
            return Err(ds_err(format!(
                "offsets decrease at entry {}: {} < {}",
                k + 1,
                offsets[k + 1],
                offsets[k]
            )));
        }
        Ok(DatasetDescription { schema, offsets, extra: Map::new() })
    }

    /// Parses the stored description. `prefix` is the array-name prefix for names the schema
    /// does not give explicitly (OAMap writes every name, so it rarely matters: the dataset
    /// name for in-memory datasets, `<dataset>/PART/obj` for numpy-file datasets).
    ///
    /// # Errors
    /// [`OamapError::Dataset`] for a description without `schema` or `offsets`, with a
    /// `packing` (not supported), or one [`DatasetDescription::new`] refuses; schema errors.
    pub fn from_json(value: &Value, prefix: &str) -> Result<Self, OamapError> {
        let obj = value.as_object().ok_or_else(|| ds_err("a dataset description must be a JSON object"))?;
        let schema_json =
            obj.get("schema").ok_or_else(|| ds_err("dataset description without \"schema\""))?;
        if obj.get("packing").is_some_and(|p| !p.is_null()) {
            return Err(ds_err("packed datasets (\"packing\") are not supported"));
        }
        let offsets = obj
            .get("offsets")
            .and_then(Value::as_array)
            .ok_or_else(|| ds_err("dataset description without \"offsets\" (a list schema needs them)"))?
            .iter()
            .enumerate()
            .map(|(k, v)| {
                v.as_u64().ok_or_else(|| ds_err(format!("offsets[{k}] = {v} is not an integer >= 0")))
            })
            .collect::<Result<Vec<u64>, _>>()?;
        let schema = Schema::from_json_named(schema_json, prefix, "-")?;
        let mut out = DatasetDescription::new(Arc::new(schema), offsets)?;
        for k in ["extension", "doc", "metadata"] {
            if let Some(v) = obj.get(k) {
                out.extra.insert(k.to_string(), v.clone());
            }
        }
        Ok(out)
    }

    /// The stored JSON: `{"schema": <OAMap JSON, every array name explicit>, "offsets":
    /// [...]}` plus any `extension`/`doc`/`metadata` read in.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("schema".into(), self.schema.to_oamap_json(true));
        m.insert("offsets".into(), json!(self.offsets));
        for (k, v) in &self.extra {
            m.insert(k.clone(), v.clone());
        }
        Value::Object(m)
    }

    /// The schema (root: the top-level list).
    pub fn schema(&self) -> &Arc<Schema> {
        &self.schema
    }

    /// The partition boundaries, in entries (`num_partitions() + 1` values, first 0).
    pub fn offsets(&self) -> &[u64] {
        &self.offsets
    }

    /// Number of partitions.
    pub fn num_partitions(&self) -> usize {
        self.offsets.len() - 1
    }

    /// Number of entries (elements of the top-level list) over all partitions.
    pub fn len(&self) -> u64 {
        self.offsets.last().copied().unwrap_or(0)
    }

    /// Whether the dataset has no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of entries in partition `p` (`None` past the last partition).
    pub fn partition_len(&self, p: usize) -> Option<u64> {
        Some(self.offsets.get(p + 1)? - self.offsets.get(p)?)
    }

    /// `(partition, index within the partition)` of global entry `index`: the partition is
    /// `searchsorted(offsets, index, side="right") - 1`, so empty partitions are skipped.
    ///
    /// # Errors
    /// [`OamapError::EntryOutOfRange`] for `index >= len()`.
    pub fn locate(&self, index: u64) -> Result<(usize, u64), OamapError> {
        if index >= self.len() {
            return Err(OamapError::EntryOutOfRange { index, len: self.len() });
        }
        let p = self.offsets.partition_point(|&o| o <= index) - 1;
        Ok((p, index - self.offsets[p]))
    }
}

/// One partition's array source with the top-level list's starts/stops synthesized as `[0]`
/// and `[partition length]` (OAMap's `DatasetArrays._toplevel`); every other name is passed
/// to the partition's own source.
pub struct PartitionArrays {
    inner: Arc<dyn ArraySource>,
    starts: (String, Arc<Array>),
    stops: (String, Arc<Array>),
}

impl std::fmt::Debug for PartitionArrays {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartitionArrays")
            .field("starts", &self.starts.0)
            .field("stops", &self.stops.0)
            .finish_non_exhaustive()
    }
}

impl PartitionArrays {
    /// Partition `partition` of `description`, its arrays served by `inner`.
    ///
    /// # Errors
    /// [`OamapError::Dataset`] for a partition the description does not have, or one longer
    /// than `i32::MAX` entries (top-level stops are `int32`).
    pub fn new(
        description: &DatasetDescription,
        partition: usize,
        inner: Arc<dyn ArraySource>,
    ) -> Result<Self, OamapError> {
        let n = description.partition_len(partition).ok_or_else(|| {
            ds_err(format!("no partition {partition} (the dataset has {})", description.num_partitions()))
        })?;
        let n = i32::try_from(n)
            .map_err(|_| ds_err(format!("partition {partition} has {n} entries (> 2^31-1)")))?;
        let schema = description.schema();
        let names = &schema.node(schema.root()).names;
        let starts = names.first.clone().unwrap_or_default();
        let stops = names.second.clone().unwrap_or_default();
        Ok(PartitionArrays {
            inner,
            starts: (starts, Arc::new(Array::from_i32(vec![0]))),
            stops: (stops, Arc::new(Array::from_i32(vec![n]))),
        })
    }
}

impl ArraySource for PartitionArrays {
    fn get(&self, name: &str) -> Result<Arc<Array>, OamapError> {
        if name == self.starts.0 {
            Ok(Arc::clone(&self.starts.1))
        } else if name == self.stops.0 {
            Ok(Arc::clone(&self.stops.1))
        } else {
            self.inner.get(name)
        }
    }
}

/// A partitioned dataset read lazily: one [`Reader`] per partition (over a
/// [`PartitionArrays`]), all sharing the description's schema.
///
/// Each partition loads a column on first use and keeps it for the life of the dataset
/// (OAMap keeps one partition's cache at a time; here an unused partition costs nothing).
/// Errors from a partition come wrapped in [`OamapError::InPartition`].
///
/// A single [`Reader`] whose root is a list is a dataset of one partition
/// ([`Dataset::from_reader`]), so code that reads records by global index serves both.
#[derive(Debug)]
pub struct Dataset {
    description: DatasetDescription,
    partitions: Vec<Arc<Reader>>,
}

fn in_partition(partition: usize) -> impl Fn(OamapError) -> OamapError {
    move |e| OamapError::InPartition { partition, source: Box::new(e) }
}

impl Dataset {
    /// A dataset over `sources[p]`, the arrays of partition `p`.
    ///
    /// # Errors
    /// [`OamapError::Dataset`] when the number of sources is not the number of partitions
    /// (or as [`PartitionArrays::new`]).
    pub fn new(
        description: DatasetDescription,
        sources: Vec<Arc<dyn ArraySource>>,
    ) -> Result<Self, OamapError> {
        if sources.len() != description.num_partitions() {
            return Err(ds_err(format!(
                "{} partition sources for {} partitions",
                sources.len(),
                description.num_partitions()
            )));
        }
        let mut partitions = Vec::with_capacity(sources.len());
        for (p, s) in sources.into_iter().enumerate() {
            let arrays = PartitionArrays::new(&description, p, s)?;
            partitions.push(Arc::new(Reader::new(Arc::clone(description.schema()), Arc::new(arrays))));
        }
        Ok(Dataset { description, partitions })
    }

    /// The elements of `reader`'s top-level list as a dataset of one partition (offsets
    /// `[0, len]`; the reader's root starts/stops are loaded now and used as stored). Unlike
    /// a stored dataset, the root list may be nullable as long as its value is not null.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use guideloom_oamap::{from_data, Dataset, Reader, Schema};
    /// let schema = Schema::from_json(&serde_json::json!({"type": "list", "content": "int32"}))?;
    /// let arrays = from_data(&schema, &serde_json::json!([7, 8, 9]))?;
    /// let reader = Arc::new(Reader::new(Arc::new(schema), Arc::new(arrays)));
    /// let dataset = Dataset::from_reader(reader)?;
    /// assert_eq!((dataset.num_partitions(), dataset.len()), (1, 3));
    /// assert_eq!(dataset.get_json(2)?, serde_json::json!(9));
    /// # Ok::<(), guideloom_oamap::OamapError>(())
    /// ```
    ///
    /// # Errors
    /// [`OamapError::Dataset`] when the root is not a list or its value is null; array
    /// errors (missing, damaged) from reading the root.
    pub fn from_reader(reader: Arc<Reader>) -> Result<Self, OamapError> {
        let schema = Arc::clone(reader.schema());
        if !matches!(schema.node(schema.root()).kind, NodeKind::List { .. }) {
            return Err(ds_err("a dataset's schema must be a list (non-list data has one partition)"));
        }
        let len = reader.root()?.as_list().ok_or_else(|| ds_err("the top-level value is null"))?.len();
        let description = DatasetDescription { schema, offsets: vec![0, len as u64], extra: Map::new() };
        Ok(Dataset { description, partitions: vec![reader] })
    }

    /// A dataset over in-memory partitions (what [`from_data_dataset`] returns).
    ///
    /// # Errors
    /// As [`Dataset::new`].
    pub fn from_arrays(
        description: DatasetDescription,
        partitions: Vec<ArrayMap>,
    ) -> Result<Self, OamapError> {
        let sources = partitions.into_iter().map(|a| Arc::new(a) as Arc<dyn ArraySource>).collect();
        Dataset::new(description, sources)
    }

    /// The description.
    pub fn description(&self) -> &DatasetDescription {
        &self.description
    }

    /// The schema (root: the top-level list).
    pub fn schema(&self) -> &Arc<Schema> {
        self.description.schema()
    }

    /// Number of entries over all partitions.
    pub fn len(&self) -> u64 {
        self.description.len()
    }

    /// Whether the dataset has no entries.
    pub fn is_empty(&self) -> bool {
        self.description.is_empty()
    }

    /// Number of partitions.
    pub fn num_partitions(&self) -> usize {
        self.partitions.len()
    }

    /// The reader of partition `p` (its root is that partition's list), if there is one.
    pub fn partition(&self, p: usize) -> Option<&Reader> {
        self.partitions.get(p).map(|r| &**r)
    }

    /// `(partition, index within it)` of global entry `index`; see
    /// [`DatasetDescription::locate`].
    ///
    /// # Errors
    /// [`OamapError::EntryOutOfRange`].
    pub fn locate(&self, index: u64) -> Result<(usize, u64), OamapError> {
        self.description.locate(index)
    }

    /// The reader holding global entry `index` and the entry's index in that reader's
    /// top-level list content (what [`Reader::value`] of the list's content takes).
    ///
    /// # Errors
    /// [`OamapError::EntryOutOfRange`]; [`OamapError::InPartition`] around array errors.
    pub(crate) fn resolve(&self, index: u64) -> Result<(&Reader, usize, usize), OamapError> {
        let (p, local) = self.locate(index)?;
        let reader = self.partitions.get(p).ok_or_else(|| ds_err(format!("no partition {p}")))?;
        let root = reader.root().map_err(in_partition(p))?;
        let list = root.as_list().ok_or_else(|| ds_err("the top-level value is not a list"))?;
        let (start, stop) = list.range();
        let j = usize::try_from(local).ok().and_then(|l| start.checked_add(l)).filter(|&j| j < stop);
        let Some(j) = j else {
            return Err(in_partition(p)(OamapError::EntryOutOfRange {
                index: local,
                len: (stop - start) as u64,
            }));
        };
        Ok((reader, j, p))
    }

    /// Global entry `index` as JSON (the golden files' data conventions).
    ///
    /// # Errors
    /// [`OamapError::EntryOutOfRange`]; [`OamapError::InPartition`] around array errors.
    pub fn get_json(&self, index: u64) -> Result<Value, OamapError> {
        let (p, local) = self.locate(index)?;
        self.entry_json(p, local)
    }

    fn entry_json(&self, p: usize, local: u64) -> Result<Value, OamapError> {
        let reader = self.partitions.get(p).ok_or_else(|| ds_err(format!("no partition {p}")))?;
        let read = || -> Result<Value, OamapError> {
            let root = reader.root()?;
            let list = root.as_list().ok_or_else(|| ds_err("the top-level value is not a list"))?;
            let i = usize::try_from(local)
                .map_err(|_| OamapError::EntryOutOfRange { index: local, len: list.len() as u64 })?;
            list.get(i)?.to_json()
        };
        read().map_err(in_partition(p))
    }

    /// Partition `p`'s entries as a JSON array.
    ///
    /// # Errors
    /// [`OamapError::Dataset`] for a partition the dataset does not have;
    /// [`OamapError::InPartition`] around array errors.
    pub fn partition_json(&self, p: usize) -> Result<Value, OamapError> {
        let reader = self
            .partitions
            .get(p)
            .ok_or_else(|| ds_err(format!("no partition {p} (the dataset has {})", self.partitions.len())))?;
        reader.root_json().map_err(in_partition(p))
    }

    /// Every entry, across partitions in order, as one JSON array (what iterating OAMap's
    /// `Dataset` gives).
    ///
    /// # Errors
    /// As [`Dataset::partition_json`].
    pub fn to_json(&self) -> Result<Value, OamapError> {
        let mut out = Vec::new();
        for p in 0..self.partitions.len() {
            match self.partition_json(p)? {
                Value::Array(v) => out.extend(v),
                _ => return Err(ds_err(format!("partition {p} is not a list"))),
            }
        }
        Ok(Value::Array(out))
    }
}

/// OAMap's `Database.fromdata(name, schema, *partitions)`: fills each partition (a JSON
/// array of entries) separately with array-name prefix `prefix` (the dataset name for
/// in-memory datasets, `<dataset>/PART/obj` for numpy-file datasets) and drops the
/// top-level list's starts/stops, which are not stored.
///
/// Returns the description (schema with every array name explicit, `offsets` from the
/// partition lengths) and the arrays of each partition, in order.
///
/// # Errors
/// Schema errors; [`OamapError::Dataset`] when the schema's root is not a non-nullable
/// list; [`OamapError::InPartition`] around [`OamapError::Fill`] for an entry that does
/// not fit.
pub fn from_data_dataset(
    schema: &Value,
    prefix: &str,
    partitions: &[Value],
) -> Result<(DatasetDescription, Vec<ArrayMap>), OamapError> {
    let schema = Arc::new(Schema::from_json_named(schema, prefix, "-")?);
    let mut description = DatasetDescription::new(Arc::clone(&schema), vec![0])?;
    let root = schema.node(schema.root());
    let (starts, stops) =
        (root.names.first.clone().unwrap_or_default(), root.names.second.clone().unwrap_or_default());
    let mut out = Vec::with_capacity(partitions.len());
    let mut offsets = vec![0u64];
    for (p, data) in partitions.iter().enumerate() {
        let n = data
            .as_array()
            .ok_or_else(|| {
                in_partition(p)(OamapError::Fill {
                    path: String::new(),
                    reason: "a partition must be a list".into(),
                })
            })?
            .len() as u64;
        let mut arrays = from_data(&schema, data).map_err(in_partition(p))?;
        arrays.remove(&starts);
        arrays.remove(&stops);
        offsets.push(offsets.last().copied().unwrap_or(0) + n);
        out.push(arrays);
    }
    description.offsets = offsets;
    Ok((description, out))
}
