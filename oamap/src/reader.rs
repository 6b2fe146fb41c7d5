//! Lazy, typed views over an array source.
//!
//! A [`Reader`] owns a schema, a source and a per-node cache. Each node loads its arrays on
//! first need, all in one go (mask first, then starts/stops, tags/offsets, positions or
//! data), exactly when OAMap's proxies would. Navigation reads cached arrays by index and
//! allocates nothing; every index read from an array is bounds-checked.

use std::sync::{Arc, OnceLock};

use guideloom_formats::{Column, DtypeKind};
use serde_json::Value as Json;

use crate::schema::{Extension, NodeId, NodeKind, Schema};
use crate::{Array, ArraySource, Dtype, OamapError};

/// The arrays of one node, once loaded.
#[derive(Debug, Default)]
pub(crate) struct Loaded {
    pub(crate) mask: Option<Arc<Array>>,
    pub(crate) first: Option<Arc<Array>>,
    pub(crate) second: Option<Arc<Array>>,
}

/// Reads an OAMap array set lazily through a schema.
pub struct Reader {
    pub(crate) schema: Arc<Schema>,
    source: Arc<dyn ArraySource>,
    cache: Vec<OnceLock<Loaded>>,
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader").field("loaded", &self.loaded()).finish_non_exhaustive()
    }
}

/// A value read through a [`Reader`]: scalars by value, strings and containers as views
/// borrowing the reader's cached arrays. Unions, pointers and masks are resolved.
#[derive(Debug, Clone, Copy)]
pub enum Value<'r> {
    /// A null (masked) value.
    Null,
    /// A `bool`.
    Bool(bool),
    /// A signed integer (any width).
    Int(i64),
    /// An unsigned integer (any width).
    UInt(u64),
    /// A `float32` value.
    Float32(f32),
    /// A `float64` value.
    Float(f64),
    /// A complex value `[re, im]`.
    Complex([f64; 2]),
    /// A `ByteString` or an `S<n>` primitive.
    Bytes(&'r [u8]),
    /// A `UTF8String`.
    Str(&'r str),
    /// A list.
    List(ListView<'r>),
    /// A record.
    Record(RecordView<'r>),
    /// A tuple.
    Tuple(RecordView<'r>),
}

impl<'r> Value<'r> {
    /// The value as `f64` for numbers (bools are 0/1); `None` otherwise (null included).
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::Float(x) => Some(x),
            Value::Float32(x) => Some(x as f64),
            Value::Int(x) => Some(x as f64),
            Value::UInt(x) => Some(x as f64),
            Value::Bool(b) => Some(f64::from(u8::from(b))),
            _ => None,
        }
    }

    /// Whether the value is null.
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// The list view, if this is a list.
    pub fn as_list(&self) -> Option<ListView<'r>> {
        match self {
            Value::List(l) => Some(*l),
            _ => None,
        }
    }

    /// The record view, if this is a record (or tuple).
    pub fn as_record(&self) -> Option<RecordView<'r>> {
        match self {
            Value::Record(r) | Value::Tuple(r) => Some(*r),
            _ => None,
        }
    }

    /// The string, if this is a `UTF8String`.
    pub fn as_str(&self) -> Option<&'r str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// A list: `content[start..stop]` in the content node's index space. Copy, no allocation.
#[derive(Debug, Clone, Copy)]
pub struct ListView<'r> {
    pub(crate) reader: &'r Reader,
    pub(crate) content: NodeId,
    pub(crate) start: usize,
    pub(crate) stop: usize,
}

impl<'r> ListView<'r> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.stop - self.start
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.start == self.stop
    }

    /// The content node.
    pub fn content(&self) -> NodeId {
        self.content
    }

    /// The content index range `[start, stop)` (the stored starts/stops).
    pub fn range(&self) -> (usize, usize) {
        (self.start, self.stop)
    }

    /// Element `i`.
    ///
    /// # Errors
    /// [`OamapError::Path`] for `i >= len()`; array errors from the content's arrays.
    pub fn get(&self, i: usize) -> Result<Value<'r>, OamapError> {
        if i >= self.len() {
            return Err(OamapError::Path {
                path: i.to_string(),
                reason: format!("index past the end of a list of {}", self.len()),
            });
        }
        self.reader.value(self.content, self.start + i)
    }

    /// The elements in order.
    pub fn iter(&self) -> impl Iterator<Item = Result<Value<'r>, OamapError>> + 'r {
        let (r, c) = (self.reader, self.content);
        (self.start..self.stop).map(move |j| r.value(c, j))
    }
}

/// A record (or tuple) at an index: its fields are read at the same index. Copy.
#[derive(Debug, Clone, Copy)]
pub struct RecordView<'r> {
    pub(crate) reader: &'r Reader,
    pub(crate) node: NodeId,
    pub(crate) index: usize,
}

impl<'r> RecordView<'r> {
    /// The record node.
    pub fn node(&self) -> NodeId {
        self.node
    }

    /// The index the fields are read at.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Field `name` (for tuples `"0"`, `"1"` ...).
    ///
    /// # Errors
    /// [`OamapError::Path`] when there is no such field; array errors.
    pub fn field(&self, name: &str) -> Result<Value<'r>, OamapError> {
        let f = self
            .reader
            .schema
            .field(self.node, name)
            .ok_or_else(|| OamapError::Path { path: name.to_string(), reason: "no such field".into() })?;
        self.reader.value(f, self.index)
    }

    /// The field node `field` (looked up once with [`Schema::field`]) at this record's index:
    /// the fast path for loops.
    ///
    /// # Errors
    /// Array errors.
    pub fn field_at(&self, field: NodeId) -> Result<Value<'r>, OamapError> {
        self.reader.value(field, self.index)
    }

    /// The field names (sorted) or tuple positions.
    pub fn field_names(&self) -> Vec<String> {
        match &self.reader.schema.node(self.node).kind {
            NodeKind::Record { fields } => fields.iter().map(|(n, _)| n.clone()).collect(),
            NodeKind::Tuple { types } => (0..types.len()).map(|k| k.to_string()).collect(),
            _ => Vec::new(),
        }
    }
}

fn not_i32(name: &str, a: &Array) -> OamapError {
    OamapError::ArrayDtype {
        name: name.to_string(),
        expected: "an integer array".into(),
        found: a.dtype().name(),
    }
}

/// Converts a structural array to `int32` (OAMap copies such arrays to its fixed dtype).
fn as_structural(name: &str, a: Arc<Array>, dtype: Dtype) -> Result<Arc<Array>, OamapError> {
    if a.dtype() == dtype {
        return Ok(a);
    }
    if !a.is_integer() {
        return Err(not_i32(name, &a));
    }
    let mut out32 = Vec::with_capacity(a.len());
    for i in 0..a.len() {
        let v = a.int_at(i).ok_or_else(|| not_i32(name, &a))?;
        let v = i32::try_from(v).map_err(|_| OamapError::BadValue {
            name: name.to_string(),
            index: i as u64,
            reason: format!("{v} does not fit int32"),
        })?;
        out32.push(v);
    }
    if dtype == Dtype::INT8 {
        let mut out8 = Vec::with_capacity(out32.len());
        for (i, v) in out32.into_iter().enumerate() {
            out8.push(i8::try_from(v).map_err(|_| OamapError::BadValue {
                name: name.to_string(),
                index: i as u64,
                reason: format!("tag {v} does not fit int8"),
            })?);
        }
        return Ok(Arc::new(Array::from_i8(out8)));
    }
    Ok(Arc::new(Array::from_i32(out32)))
}

#[inline]
fn read_i32(a: &Array, name: &Option<String>, i: usize) -> Result<i64, OamapError> {
    match a.data() {
        Column::I32(v) => v.get(i).map(|&x| x as i64),
        Column::I8(v) => v.get(i).map(|&x| x as i64),
        _ => None,
    }
    .ok_or_else(|| OamapError::IndexOutOfRange {
        name: name.clone().unwrap_or_default(),
        index: i as u64,
        len: a.len() as u64,
    })
}

impl Reader {
    /// A reader of `source` through `schema`. Nothing is loaded yet.
    pub fn new(schema: Arc<Schema>, source: Arc<dyn ArraySource>) -> Self {
        let cache = (0..schema.len()).map(|_| OnceLock::new()).collect();
        Reader { schema, source, cache }
    }

    /// The schema.
    pub fn schema(&self) -> &Arc<Schema> {
        &self.schema
    }

    /// The names of every array loaded so far, in generator order.
    pub fn loaded(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (i, c) in self.cache.iter().enumerate() {
            if c.get().is_some() {
                let n = &self.schema.node(NodeId(i)).names;
                out.extend(n.mask.iter().chain(n.first.iter()).chain(n.second.iter()).cloned());
            }
        }
        let order = self.schema.array_names();
        out.sort_by_key(|n| order.iter().position(|m| m == n));
        out
    }

    /// The top-level value (index 0 of the root node). For a list root this loads the root's
    /// starts/stops (and mask); for a record root nothing.
    ///
    /// # Errors
    /// Array errors (missing, damaged).
    pub fn root(&self) -> Result<Value<'_>, OamapError> {
        self.value(self.schema.root(), 0)
    }

    pub(crate) fn load(&self, id: NodeId) -> Result<&Loaded, OamapError> {
        let cell = &self.cache[id.0];
        if let Some(l) = cell.get() {
            return Ok(l);
        }
        let node = self.schema.node(id);
        let names = &node.names;
        let get = |n: &Option<String>| -> Result<Option<Arc<Array>>, OamapError> {
            match n {
                Some(n) => self.source.get(n).map(Some),
                None => Ok(None),
            }
        };
        let mask = match get(&names.mask)? {
            Some(m) => Some(as_structural(names.mask.as_deref().unwrap_or(""), m, Dtype::INT32)?),
            None => None,
        };
        let (first, second) = match &node.kind {
            NodeKind::Record { .. } | NodeKind::Tuple { .. } => (None, None),
            NodeKind::Primitive { dtype } => {
                let name = names.first.as_deref().unwrap_or("");
                let a = get(&names.first)?.ok_or_else(|| OamapError::MissingArray { name: name.into() })?;
                let found = a.dtype();
                if found.kind() != dtype.kind() || found.size() != dtype.size() {
                    return Err(OamapError::ArrayDtype {
                        name: name.into(),
                        expected: dtype.name(),
                        found: found.name(),
                    });
                }
                (Some(a), None)
            }
            NodeKind::List { .. } | NodeKind::Union { .. } | NodeKind::Pointer { .. } => {
                let dt1 =
                    if matches!(node.kind, NodeKind::Union { .. }) { Dtype::INT8 } else { Dtype::INT32 };
                let a = match get(&names.first)? {
                    Some(a) => Some(as_structural(names.first.as_deref().unwrap_or(""), a, dt1)?),
                    None => None,
                };
                let b = match get(&names.second)? {
                    Some(b) => Some(as_structural(names.second.as_deref().unwrap_or(""), b, Dtype::INT32)?),
                    None => None,
                };
                (a, b)
            }
        };
        let _ = cell.set(Loaded { mask, first, second });
        // Strings load their bytes together with their starts/stops.
        if node.extension.is_some() {
            if let NodeKind::List { content } = node.kind {
                self.load(content)?;
            }
        }
        cell.get().ok_or_else(|| OamapError::schema("cache cell empty after set"))
    }

    /// The index `i` of node `id` after its mask: `None` when null.
    #[inline]
    pub(crate) fn unmask(&self, id: NodeId, l: &Loaded, i: usize) -> Result<Option<usize>, OamapError> {
        match &l.mask {
            None => Ok(Some(i)),
            Some(m) => {
                let name = &self.schema.node(id).names.mask;
                let v = read_i32(m, name, i)?;
                if v == -1 {
                    Ok(None)
                } else if v < 0 {
                    Err(OamapError::BadValue {
                        name: name.clone().unwrap_or_default(),
                        index: i as u64,
                        reason: format!("mask value {v} (only -1 means null)"),
                    })
                } else {
                    Ok(Some(v as usize))
                }
            }
        }
    }

    /// `(start, stop)` of list node `id` at (unmasked) index `i`, checked `0 <= start <= stop`.
    #[inline]
    pub(crate) fn list_range(&self, id: NodeId, l: &Loaded, i: usize) -> Result<(usize, usize), OamapError> {
        let names = &self.schema.node(id).names;
        let (Some(b), Some(e)) = (&l.first, &l.second) else {
            return Err(OamapError::MissingArray { name: names.first.clone().unwrap_or_default() });
        };
        let start = read_i32(b, &names.first, i)?;
        let stop = read_i32(e, &names.second, i)?;
        if start < 0 {
            return Err(OamapError::BadValue {
                name: names.first.clone().unwrap_or_default(),
                index: i as u64,
                reason: format!("negative start {start}"),
            });
        }
        if stop < start {
            return Err(OamapError::BadValue {
                name: names.second.clone().unwrap_or_default(),
                index: i as u64,
                reason: format!("stop {stop} is before start {start}"),
            });
        }
        Ok((start as usize, stop as usize))
    }

    /// The value of node `id` at index `i` (the index its parent hands down).
    ///
    /// # Errors
    /// Missing or damaged arrays (typed errors naming the array).
    pub fn value(&self, id: NodeId, i: usize) -> Result<Value<'_>, OamapError> {
        let mut id = id;
        let mut i = i;
        let mut hops = 0usize;
        loop {
            let l = self.load(id)?;
            let Some(j) = self.unmask(id, l, i)? else { return Ok(Value::Null) };
            let node = self.schema.node(id);
            match &node.kind {
                NodeKind::Primitive { .. } => {
                    return self.primitive(id, l, j);
                }
                NodeKind::List { content } => {
                    let (start, stop) = self.list_range(id, l, j)?;
                    if let Some(ext) = node.extension {
                        return self.string(*content, ext, start, stop);
                    }
                    return Ok(Value::List(ListView { reader: self, content: *content, start, stop }));
                }
                NodeKind::Record { .. } => {
                    return Ok(Value::Record(RecordView { reader: self, node: id, index: j }))
                }
                NodeKind::Tuple { .. } => {
                    return Ok(Value::Tuple(RecordView { reader: self, node: id, index: j }))
                }
                NodeKind::Union { possibilities } => {
                    let (tag, off) = self.union_at(id, l, j, possibilities.len())?;
                    id = possibilities[tag];
                    i = off;
                }
                NodeKind::Pointer { target, .. } => {
                    i = self.position(id, l, j)?;
                    id = *target;
                }
            }
            hops += 1;
            if hops > self.schema.len() + 1 {
                return Err(OamapError::BadValue {
                    name: self.schema.node(id).names.first.clone().unwrap_or_default(),
                    index: i as u64,
                    reason: "pointers form a cycle that never reaches a value".into(),
                });
            }
        }
    }

    pub(crate) fn union_at(
        &self,
        id: NodeId,
        l: &Loaded,
        j: usize,
        n: usize,
    ) -> Result<(usize, usize), OamapError> {
        let names = &self.schema.node(id).names;
        let (Some(t), Some(o)) = (&l.first, &l.second) else {
            return Err(OamapError::MissingArray { name: names.first.clone().unwrap_or_default() });
        };
        let tag = read_i32(t, &names.first, j)?;
        if tag < 0 || tag as usize >= n {
            return Err(OamapError::BadValue {
                name: names.first.clone().unwrap_or_default(),
                index: j as u64,
                reason: format!("tag {tag} out of range (the union has {n} possibilities)"),
            });
        }
        let off = read_i32(o, &names.second, j)?;
        if off < 0 {
            return Err(OamapError::BadValue {
                name: names.second.clone().unwrap_or_default(),
                index: j as u64,
                reason: format!("negative offset {off}"),
            });
        }
        Ok((tag as usize, off as usize))
    }

    pub(crate) fn position(&self, id: NodeId, l: &Loaded, j: usize) -> Result<usize, OamapError> {
        let names = &self.schema.node(id).names;
        let Some(p) = &l.first else {
            return Err(OamapError::MissingArray { name: names.first.clone().unwrap_or_default() });
        };
        let pos = read_i32(p, &names.first, j)?;
        if pos < 0 {
            return Err(OamapError::BadValue {
                name: names.first.clone().unwrap_or_default(),
                index: j as u64,
                reason: format!("negative position {pos}"),
            });
        }
        Ok(pos as usize)
    }

    fn primitive<'a>(&'a self, id: NodeId, l: &'a Loaded, j: usize) -> Result<Value<'a>, OamapError> {
        let Some(a) = &l.first else {
            return Err(OamapError::MissingArray { name: String::new() });
        };
        let oob = || OamapError::IndexOutOfRange {
            name: self.schema.node(id).names.first.clone().unwrap_or_default(),
            index: j as u64,
            len: a.len() as u64,
        };
        Ok(match a.data() {
            Column::Bool(v) => Value::Bool(*v.get(j).ok_or_else(oob)?),
            Column::F64(v) => Value::Float(*v.get(j).ok_or_else(oob)?),
            Column::F32(v) => Value::Float32(*v.get(j).ok_or_else(oob)?),
            Column::U64(v) => Value::UInt(*v.get(j).ok_or_else(oob)?),
            Column::C64(v) => {
                let [a, b] = *v.get(j).ok_or_else(oob)?;
                Value::Complex([a as f64, b as f64])
            }
            Column::C128(v) => Value::Complex(*v.get(j).ok_or_else(oob)?),
            Column::Bytes { width, data } => {
                Value::Bytes(data.get(j * width..(j + 1) * width).ok_or_else(oob)?)
            }
            _ => {
                let x = a.int_at(j).ok_or_else(oob)?;
                if matches!(a.dtype().kind(), DtypeKind::UInt) {
                    Value::UInt(x as u64)
                } else {
                    Value::Int(x)
                }
            }
        })
    }

    fn string(
        &self,
        content: NodeId,
        ext: Extension,
        start: usize,
        stop: usize,
    ) -> Result<Value<'_>, OamapError> {
        let l = self.load(content)?;
        let name = self.schema.node(content).names.first.clone().unwrap_or_default();
        let bytes = match l.first.as_deref().map(Array::data) {
            Some(Column::U8(v)) => v.get(start..stop).ok_or_else(|| OamapError::IndexOutOfRange {
                name: name.clone(),
                index: stop as u64,
                len: v.len() as u64,
            })?,
            _ => return Err(OamapError::MissingArray { name }),
        };
        Ok(match ext {
            Extension::ByteString => Value::Bytes(bytes),
            Extension::Utf8String => {
                Value::Str(std::str::from_utf8(bytes).map_err(|_| OamapError::Utf8 {
                    name,
                    start: start as u64,
                    stop: stop as u64,
                })?)
            }
        })
    }

    /// The whole top-level value as JSON (see [`Reader::to_json`]).
    ///
    /// # Errors
    /// Array errors.
    pub fn root_json(&self) -> Result<Json, OamapError> {
        self.to_json(self.schema.root(), 0)
    }

    /// The number of elements in every array the schema names (loading them all): the size
    /// of the data, which bounds the JSON output.
    pub(crate) fn data_elements(&self) -> Result<u64, OamapError> {
        let mut total = 0u64;
        for k in 0..self.schema.len() {
            let l = self.load(NodeId(k))?;
            for a in [&l.mask, &l.first, &l.second].into_iter().flatten() {
                total = total.saturating_add(a.len() as u64);
            }
        }
        Ok(total)
    }
}
