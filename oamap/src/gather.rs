//! Gathering a batch of records (elements of the top-level list) into a columnar batch:
//! per projected field, leaf `values` plus one `offsets` vector per list level, rebased to
//! the batch — the layout a training loop consumes, with no per-record objects.

use guideloom_formats::Column;

use crate::schema::{NodeId, NodeKind, Schema};
use crate::{Array, Dataset, Dtype, OamapError, Reader};

/// Which fields to gather: dotted paths from the top-level list's record
/// (`"planets.orbital_period.val"`), lists traversed implicitly, pointers followed.
#[derive(Debug, Clone)]
pub struct Projection {
    columns: Vec<Plan>,
}

#[derive(Debug, Clone)]
struct Plan {
    path: String,
    /// Nodes from the top-level list's content down to the leaf.
    nodes: Vec<NodeId>,
    /// Number of list levels (a string leaf counts as one).
    levels: usize,
    leaf_dtype: Dtype,
}

impl Projection {
    /// Resolves `paths` against `schema` (whose root must be a list of records).
    ///
    /// # Errors
    /// [`OamapError::Path`] for an unknown field, a path that stops at a record or goes
    /// through a union (unions are not gathered).
    pub fn new(schema: &Schema, paths: &[&str]) -> Result<Self, OamapError> {
        let perr = |p: &str, r: &str| OamapError::Path { path: p.to_string(), reason: r.to_string() };
        let root = schema.content_of_list(schema.root()).ok_or_else(|| perr("", "the root is not a list"))?;
        let mut columns = Vec::new();
        for &path in paths {
            let mut parts = path.split('.').filter(|s| !s.is_empty()).peekable();
            let mut nodes = vec![root];
            let mut levels = 0;
            let mut cur = root;
            let leaf_dtype = loop {
                let node = schema.node(cur);
                match &node.kind {
                    NodeKind::Record { .. } | NodeKind::Tuple { .. } => {
                        let f = parts.next().ok_or_else(|| perr(path, "ends at a record: name a field"))?;
                        cur = schema.field(cur, f).ok_or_else(|| perr(path, &format!("no field {f:?}")))?;
                    }
                    NodeKind::List { content } => {
                        levels += 1;
                        if node.extension.is_some() {
                            break Dtype::UINT8;
                        }
                        cur = *content;
                    }
                    NodeKind::Pointer { target, .. } => cur = *target,
                    NodeKind::Primitive { dtype } => break *dtype,
                    _ => return Err(perr(path, "unions are not gathered")),
                }
                if nodes.len() > schema.len() {
                    return Err(perr(path, "recursive path"));
                }
                nodes.push(cur);
            };
            if parts.peek().is_some() {
                return Err(perr(path, "continues past a leaf"));
            }
            columns.push(Plan { path: path.to_string(), nodes, levels, leaf_dtype });
        }
        Ok(Projection { columns })
    }

    /// The projected paths, in order.
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.columns.iter().map(|c| c.path.as_str())
    }
}

/// One gathered field: offsets per list level, leaf values and validity.
///
/// `offsets[k]` belongs to list level `k` (outermost first) and has `n_k + 1` entries
/// starting at 0, where `n_0` is the number of records and `n_{k+1} = offsets[k][n_k]`;
/// the leaf level has `offsets.last()[..].last()` values (or one per record when the path
/// has no list). Nulls: a null list is empty with `list_valid[k][i] == false`; a null
/// leaf (or a null record above it) holds a zero placeholder with `valid[i] == false`.
#[derive(Debug, Clone, PartialEq)]
pub struct GatheredColumn {
    /// The projected path.
    pub path: String,
    /// Per list level, rebased offsets (`i64`, `n + 1` entries, first 0).
    pub offsets: Vec<Vec<i64>>,
    /// Per list level, whether each list is non-null.
    pub list_valid: Vec<Vec<bool>>,
    /// Leaf values (placeholders at nulls), dtype of the leaf (`uint8` bytes for strings).
    pub values: Array,
    /// Per leaf value, whether it is non-null.
    pub valid: Vec<bool>,
}

/// A gathered batch: one [`GatheredColumn`] per projected path, in projection order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ColumnarBatch {
    /// Number of records gathered.
    pub len: usize,
    /// The columns.
    pub columns: Vec<GatheredColumn>,
}

impl ColumnarBatch {
    /// The column for `path`, if projected.
    pub fn column(&self, path: &str) -> Option<&GatheredColumn> {
        self.columns.iter().find(|c| c.path == path)
    }
}

/// Gathers records `records` (indices into the top-level list, in any order) into a new
/// batch.
///
/// # Errors
/// [`OamapError::Path`] for a record index past the list; array errors (typed, naming the
/// array) for damaged data.
pub fn gather(
    reader: &Reader,
    records: &[u64],
    projection: &Projection,
) -> Result<ColumnarBatch, OamapError> {
    let mut out = ColumnarBatch::default();
    gather_into(reader, records, projection, &mut out)?;
    Ok(out)
}

/// [`gather`] into an existing batch, reusing its buffers: once the buffers have grown to
/// a batch's size, gathering another batch of that size allocates nothing.
///
/// # Errors
/// As [`gather`].
pub fn gather_into(
    reader: &Reader,
    records: &[u64],
    projection: &Projection,
    out: &mut ColumnarBatch,
) -> Result<(), OamapError> {
    let top = reader
        .root()?
        .as_list()
        .ok_or_else(|| OamapError::Path { path: String::new(), reason: "the root is not a list".into() })?;
    let (start, _) = top.range();
    let len = top.len();
    gather_with(projection, records, out, |r| {
        let i = usize::try_from(r).ok().filter(|&i| i < len).ok_or_else(|| OamapError::Path {
            path: r.to_string(),
            reason: format!("record index past the top-level list of {len}"),
        })?;
        Ok((reader, start + i, None))
    })
}

/// [`gather`] over a partitioned [`Dataset`]: `records` are global entry indices, in any
/// order and from any partitions; the batch holds them in `records` order with offsets
/// rebased across partitions, exactly as gathering the same entries from one unpartitioned
/// array set.
///
/// # Errors
/// [`OamapError::EntryOutOfRange`] for an index past the dataset;
/// [`OamapError::InPartition`] around array errors.
pub fn gather_dataset(
    dataset: &Dataset,
    records: &[u64],
    projection: &Projection,
) -> Result<ColumnarBatch, OamapError> {
    let mut out = ColumnarBatch::default();
    gather_dataset_into(dataset, records, projection, &mut out)?;
    Ok(out)
}

/// [`gather_dataset`] into an existing batch, reusing its buffers (see [`gather_into`]).
///
/// # Errors
/// As [`gather_dataset`].
pub fn gather_dataset_into(
    dataset: &Dataset,
    records: &[u64],
    projection: &Projection,
    out: &mut ColumnarBatch,
) -> Result<(), OamapError> {
    gather_with(projection, records, out, |r| {
        let (reader, j, p) = dataset.resolve(r)?;
        Ok((reader, j, Some(p)))
    })
}

/// The shared gather loop: `resolve(record)` gives the reader holding the record, the
/// record's index in that reader's top-level list content, and its partition (for errors).
fn gather_with<'a>(
    projection: &Projection,
    records: &[u64],
    out: &mut ColumnarBatch,
    resolve: impl Fn(u64) -> Result<(&'a Reader, usize, Option<usize>), OamapError>,
) -> Result<(), OamapError> {
    if out.columns.len() != projection.columns.len()
        || out.columns.iter().zip(&projection.columns).any(|(c, p)| c.path != p.path)
    {
        out.columns = projection
            .columns
            .iter()
            .map(|p| GatheredColumn {
                path: p.path.clone(),
                offsets: vec![Vec::new(); p.levels],
                list_valid: vec![Vec::new(); p.levels],
                values: Array::empty(p.leaf_dtype),
                valid: Vec::new(),
            })
            .collect();
    }
    out.len = records.len();
    for (col, plan) in out.columns.iter_mut().zip(&projection.columns) {
        for o in col.offsets.iter_mut() {
            o.clear();
            o.push(0);
        }
        col.list_valid.iter_mut().for_each(Vec::clear);
        col.values.data_mut().clear();
        col.valid.clear();
        for &r in records {
            let (reader, i, partition) = resolve(r)?;
            walk(reader, plan, col, 0, 0, i).map_err(|e| match partition {
                Some(partition) => OamapError::InPartition { partition, source: Box::new(e) },
                None => e,
            })?;
        }
    }
    Ok(())
}

/// Appends `src[i]` (same dtype) or a zero placeholder (`src == None`); false on a bad index.
fn push(dst: &mut Array, src: Option<(&Array, usize)>) -> bool {
    macro_rules! one {
        ($v:expr, $variant:ident, $zero:expr) => {{
            match src.map(|(s, i)| (s.data(), i)) {
                Some((Column::$variant(s), i)) => match s.get(i) {
                    Some(x) => $v.push(*x),
                    None => return false,
                },
                Some(_) => return false,
                None => $v.push($zero),
            }
            true
        }};
    }
    match dst.data_mut() {
        Column::Bool(v) => one!(v, Bool, false),
        Column::I8(v) => one!(v, I8, 0),
        Column::I16(v) => one!(v, I16, 0),
        Column::I32(v) => one!(v, I32, 0),
        Column::I64(v) => one!(v, I64, 0),
        Column::U8(v) => one!(v, U8, 0),
        Column::U16(v) => one!(v, U16, 0),
        Column::U32(v) => one!(v, U32, 0),
        Column::U64(v) => one!(v, U64, 0),
        Column::F32(v) => one!(v, F32, 0.0),
        Column::F64(v) => one!(v, F64, 0.0),
        Column::C64(v) => one!(v, C64, [0.0; 2]),
        Column::C128(v) => one!(v, C128, [0.0; 2]),
        Column::F16(v) => one!(v, F16, 0),
        Column::Bytes { width, data } => {
            match src.map(|(s, i)| (s.data(), i)) {
                Some((Column::Bytes { width: w, data: s }, i)) if w == width => {
                    match s.get(i * *w..(i + 1) * *w) {
                        Some(x) => data.extend_from_slice(x),
                        None => return false,
                    }
                }
                Some(_) => return false,
                None => data.extend(std::iter::repeat_n(0u8, *width)),
            }
            true
        }
        // Any later value type: `Dtype` has none, so no gathered leaf holds one.
        _ => false,
    }
}

fn leaf_len(col: &GatheredColumn, level: usize) -> usize {
    match col.offsets.get(level) {
        Some(o) => o.len() - 1,
        None => col.valid.len(),
    }
}

/// Records a null at plan position `pos`: the first list level at or below it gets an
/// empty, invalid list; with no list below, the leaf gets an invalid placeholder.
fn push_null(col: &mut GatheredColumn, level: usize) {
    if level < col.offsets.len() {
        let next = leaf_len(col, level + 1) as i64;
        col.offsets[level].push(next);
        col.list_valid[level].push(false);
    } else {
        push(&mut col.values, None);
        col.valid.push(false);
    }
}

fn walk(
    reader: &Reader,
    plan: &Plan,
    col: &mut GatheredColumn,
    pos: usize,
    level: usize,
    i: usize,
) -> Result<(), OamapError> {
    let id = plan.nodes[pos];
    let schema = reader.schema();
    let node = schema.node(id);
    let l = reader.load(id)?;
    let Some(j) = reader.unmask(id, l, i)? else {
        push_null(col, level);
        return Ok(());
    };
    match &node.kind {
        NodeKind::Record { .. } | NodeKind::Tuple { .. } => walk(reader, plan, col, pos + 1, level, j),
        NodeKind::Pointer { .. } => {
            let p = reader.position(id, l, j)?;
            walk(reader, plan, col, pos + 1, level, p)
        }
        NodeKind::List { content } => {
            let (s, e) = reader.list_range(id, l, j)?;
            if node.extension.is_some() {
                let cl = reader.load(*content)?;
                let name = || schema.node(*content).names.first.clone().unwrap_or_default();
                let Some(Column::U8(bytes)) = cl.first.as_deref().map(Array::data) else {
                    return Err(OamapError::MissingArray { name: name() });
                };
                let slice = bytes.get(s..e).ok_or_else(|| OamapError::IndexOutOfRange {
                    name: name(),
                    index: e as u64,
                    len: bytes.len() as u64,
                })?;
                if let Column::U8(v) = col.values.data_mut() {
                    v.extend_from_slice(slice);
                }
                col.valid.extend(std::iter::repeat_n(true, slice.len()));
            } else {
                for c in s..e {
                    walk(reader, plan, col, pos + 1, level + 1, c)?;
                }
            }
            let next = leaf_len(col, level + 1) as i64;
            col.offsets[level].push(next);
            col.list_valid[level].push(true);
            Ok(())
        }
        NodeKind::Primitive { .. } => {
            let src = l.first.as_deref().ok_or_else(|| OamapError::MissingArray {
                name: node.names.first.clone().unwrap_or_default(),
            })?;
            if !push(&mut col.values, Some((src, j))) {
                return Err(OamapError::IndexOutOfRange {
                    name: node.names.first.clone().unwrap_or_default(),
                    index: j as u64,
                    len: src.len() as u64,
                });
            }
            col.valid.push(true);
            Ok(())
        }
        _ => Err(OamapError::Path { path: plan.path.clone(), reason: "unions are not gathered".into() }),
    }
}
