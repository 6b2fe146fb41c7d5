//! Lazy, typed views over an array source.
//!
//! A [`Reader`] owns a schema, a source and a per-node cache. Each node loads its arrays on
//! first need, all in one go (mask first, then starts/stops, tags/offsets, positions or
//! data), exactly when OAMap's proxies would. Navigation reads cached arrays by index and
//! allocates nothing; every index read from an array is bounds-checked.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use guideloom_formats::{Column, DtypeKind};
use serde_json::{Map, Value as Json};

use crate::array::{f32_to_f64_shortest, float_json};
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
    schema: Arc<Schema>,
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
    reader: &'r Reader,
    content: NodeId,
    start: usize,
    stop: usize,
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
    reader: &'r Reader,
    node: NodeId,
    index: usize,
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

    fn union_at(&self, id: NodeId, l: &Loaded, j: usize, n: usize) -> Result<(usize, usize), OamapError> {
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

    /// The value of node `id` at index `i` as JSON (the golden files' conventions: pointers
    /// inlined, a pointer back to an ancestor written `{"$ref": "<path>"}`).
    ///
    /// The output stays linear in the data: a pointer target (node, index) is inlined the
    /// first time a pointer reaches it and written `{"$ref": "<path of that first copy>"}`
    /// after that, so shared and recursive structures (a linked list, a DAG whose nodes are
    /// reached along many paths) are emitted once. As a last guard against damaged arrays
    /// (overlapping list ranges), the number of JSON values emitted is capped at 2^20 plus
    /// 8 per array element of the data.
    ///
    /// # Errors
    /// Array errors; [`OamapError::TooLarge`] past the output cap.
    pub fn to_json(&self, id: NodeId, i: usize) -> Result<Json, OamapError> {
        JsonWalk::new(self).convert(id, i)
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
    fn data_elements(&self) -> Result<u64, OamapError> {
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

/// One step of a path inside the converted value.
#[derive(Clone, Copy)]
enum Seg<'r> {
    Root,
    Field(&'r str),
    Index(usize),
}

/// One JSON conversion.
///
/// Paths are kept in an arena of `(parent, step)` entries (a path is an index into it), so
/// remembering where something was written costs one entry, not a copy of its path; a path
/// is spelled out only when a `$ref` names it.
struct JsonWalk<'r> {
    reader: &'r Reader,
    arena: Vec<(usize, Seg<'r>)>,
    /// The path being written.
    cur: usize,
    /// The lists, records and tuples being written: (node, index, path).
    stack: Vec<(NodeId, usize, usize)>,
    /// Nodes some pointer targets whose subtree holds a pointer (recursive structures).
    recursive: Vec<bool>,
    /// Where such targets sit in the value itself, reached without following pointers.
    located: HashMap<(NodeId, usize), usize>,
    /// Such targets inlined so far (not located in place) -> the path of that copy.
    emitted: HashMap<(NodeId, usize), usize>,
    /// JSON values emitted (and located) so far, against `cap`.
    count: u64,
    cap: u64,
    measured: bool,
}

/// JSON values any conversion may emit before the data's size is looked at (2^20).
const BASE_OUTPUT_VALUES: u64 = 1 << 20;

/// The deepest nesting of lists, records and tuples a JSON conversion writes (1,000):
/// `serde_json` drops and serializes a value recursively, and a value 1,000 levels deep
/// still fits a 2 MiB thread stack in a debug build (3,000 levels do not). Recursive data
/// stored in a list is written flat (each element a `$ref` to the next); only a chain reached
/// solely through pointers nests, one level per link.
pub const MAX_OUTPUT_DEPTH: usize = 1_000;

impl<'r> JsonWalk<'r> {
    fn new(reader: &'r Reader) -> Self {
        let schema = &reader.schema;
        let n = schema.len();
        // Which nodes hold a pointer in their own subtree (containment only)?
        let holds: Vec<bool> = (0..n).map(|k| subtree_holds_pointer(schema, NodeId(k))).collect();
        let mut recursive = vec![false; n];
        for k in 0..n {
            if let NodeKind::Pointer { target, .. } = schema.node(NodeId(k)).kind {
                recursive[target.0] = holds[target.0];
            }
        }
        JsonWalk {
            reader,
            arena: vec![(0, Seg::Root)],
            cur: 0,
            stack: Vec::new(),
            recursive,
            located: HashMap::new(),
            emitted: HashMap::new(),
            count: 0,
            cap: BASE_OUTPUT_VALUES,
            measured: false,
        }
    }

    /// The path of arena entry `at`, spelled as the golden files do (`""`, `"/a/0"`).
    fn spell(&self, mut at: usize) -> String {
        let mut segs = Vec::new();
        while at != 0 {
            let (parent, seg) = self.arena[at];
            segs.push(seg);
            at = parent;
        }
        let mut out = String::new();
        for seg in segs.into_iter().rev() {
            match seg {
                Seg::Field(f) => {
                    out.push('/');
                    out.push_str(f);
                }
                Seg::Index(k) => out.push_str(&format!("/{k}")),
                Seg::Root => {}
            }
        }
        out
    }

    fn reference(&self, at: usize) -> Json {
        let mut m = Map::new();
        m.insert("$ref".into(), Json::String(self.spell(at)));
        Json::Object(m)
    }

    /// Counts one emitted value against the cap (measuring the data the first time the base
    /// allowance runs out).
    fn tick(&mut self) -> Result<(), OamapError> {
        self.count += 1;
        if self.count > self.cap {
            if !self.measured {
                self.measured = true;
                self.cap = BASE_OUTPUT_VALUES.saturating_add(self.reader.data_elements()?.saturating_mul(8));
            }
            if self.count > self.cap {
                return Err(OamapError::TooLarge {
                    what: "JSON output (values; overlapping list ranges?)".into(),
                    limit: self.cap,
                    found: self.count,
                });
            }
        }
        Ok(())
    }

    /// Converts node `id` at index `i` as the whole value (path `""`).
    fn convert(&mut self, id: NodeId, i: usize) -> Result<Json, OamapError> {
        if self.recursive.iter().any(|&r| r) {
            self.locate(id, i, 0, 0)?;
        }
        self.value(id, i)
    }

    /// Converts `content[start..stop]` as the whole value (a JSON array, elements at `/k`).
    fn convert_elements(&mut self, content: NodeId, start: usize, stop: usize) -> Result<Json, OamapError> {
        if self.recursive.iter().any(|&r| r) {
            for (k, c) in (start..stop).enumerate() {
                let at = self.push_seg(0, Seg::Index(k));
                self.locate(content, c, at, 1)?;
            }
        }
        let mut out = Vec::new();
        for (k, c) in (start..stop).enumerate() {
            out.push(self.child(content, c, Seg::Index(k))?);
        }
        Ok(Json::Array(out))
    }

    /// Converts the fields of record or tuple `node` at `index` as the whole value.
    fn convert_fields(&mut self, node: NodeId, index: usize) -> Result<Json, OamapError> {
        let r = self.reader;
        match &r.schema.node(node).kind {
            NodeKind::Record { fields } => {
                let mut m = Map::new();
                for (n, f) in fields {
                    let at = self.push_seg(0, Seg::Field(n));
                    if self.recursive.iter().any(|&r| r) {
                        self.locate(*f, index, at, 1)?;
                    }
                }
                for (n, f) in fields {
                    m.insert(n.clone(), self.child(*f, index, Seg::Field(n))?);
                }
                Ok(Json::Object(m))
            }
            NodeKind::Tuple { types } => {
                let mut out = Vec::new();
                for (k, f) in types.iter().enumerate() {
                    let at = self.push_seg(0, Seg::Index(k));
                    if self.recursive.iter().any(|&r| r) {
                        self.locate(*f, index, at, 1)?;
                    }
                }
                for (k, f) in types.iter().enumerate() {
                    out.push(self.child(*f, index, Seg::Index(k))?);
                }
                Ok(Json::Array(out))
            }
            _ => Ok(Json::Null),
        }
    }

    fn push_seg(&mut self, parent: usize, seg: Seg<'r>) -> usize {
        self.arena.push((parent, seg));
        self.arena.len() - 1
    }

    /// Records where the recursive pointer targets sit inside node `id` at index `i` (path
    /// `at`, `depth` containers deep), without following pointers: a pointer to one of them
    /// is then written as a `$ref` to that place, however far ahead it is.
    fn locate(&mut self, id: NodeId, i: usize, at: usize, depth: usize) -> Result<(), OamapError> {
        crate::limits::deep(|| self.locate_at(id, i, at, depth))
    }

    fn locate_at(&mut self, id: NodeId, i: usize, at: usize, depth: usize) -> Result<(), OamapError> {
        self.tick()?;
        if depth > MAX_OUTPUT_DEPTH {
            return Err(self.too_deep(at, depth));
        }
        let r = self.reader;
        if self.recursive[id.0] {
            self.located.entry((id, i)).or_insert(at);
        }
        let node = r.schema.node(id);
        let l = r.load(id)?;
        let Some(j) = r.unmask(id, l, i)? else { return Ok(()) };
        match &node.kind {
            NodeKind::Union { possibilities } => {
                let (tag, off) = r.union_at(id, l, j, possibilities.len())?;
                self.locate(possibilities[tag], off, at, depth)
            }
            NodeKind::Record { fields } => {
                for (name, f) in fields {
                    let c = self.push_seg(at, Seg::Field(name));
                    self.locate(*f, j, c, depth + 1)?;
                }
                Ok(())
            }
            NodeKind::Tuple { types } => {
                for (k, f) in types.iter().enumerate() {
                    let c = self.push_seg(at, Seg::Index(k));
                    self.locate(*f, j, c, depth + 1)?;
                }
                Ok(())
            }
            NodeKind::List { content } if node.extension.is_none() => {
                let (start, stop) = r.list_range(id, l, j)?;
                for (k, c) in (start..stop).enumerate() {
                    let p = self.push_seg(at, Seg::Index(k));
                    self.locate(*content, c, p, depth + 1)?;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn too_deep(&self, at: usize, depth: usize) -> OamapError {
        // A path 1,000 levels deep is kilobytes long: its two ends say where.
        let path = self.spell(at);
        let path = match (path.char_indices().nth(60), path.char_indices().rev().nth(59)) {
            (Some((head, _)), Some((tail, _))) if head < tail => {
                format!("{}...{}", &path[..head], &path[tail..])
            }
            _ => path,
        };
        OamapError::TooDeep {
            name: format!("JSON output at {path:?}"),
            limit: MAX_OUTPUT_DEPTH,
            found: depth,
        }
    }

    fn value(&mut self, id: NodeId, i: usize) -> Result<Json, OamapError> {
        crate::limits::deep(|| self.value_at(id, i))
    }

    /// Node `id` at index `i` written one step below the current path.
    fn child(&mut self, id: NodeId, i: usize, seg: Seg<'r>) -> Result<Json, OamapError> {
        let parent = self.cur;
        self.cur = self.push_seg(parent, seg);
        let v = self.value(id, i);
        self.cur = parent;
        v
    }

    fn value_at(&mut self, id: NodeId, i: usize) -> Result<Json, OamapError> {
        self.tick()?;
        if self.stack.len() >= MAX_OUTPUT_DEPTH {
            return Err(self.too_deep(self.cur, self.stack.len() + 1));
        }
        let r = self.reader;
        let node = r.schema.node(id);
        let l = r.load(id)?;
        let Some(j) = r.unmask(id, l, i)? else { return Ok(Json::Null) };
        match &node.kind {
            NodeKind::Pointer { target, .. } => {
                let pos = r.position(id, l, j)?;
                if let Some(&(_, _, at)) = self.stack.iter().find(|(n, k, _)| n == target && *k == pos) {
                    return Ok(self.reference(at));
                }
                if self.recursive[target.0] {
                    let key = (*target, pos);
                    if let Some(&at) = self.located.get(&key).or_else(|| self.emitted.get(&key)) {
                        return Ok(self.reference(at));
                    }
                    self.emitted.insert(key, self.cur);
                }
                self.value(*target, pos)
            }
            NodeKind::Union { possibilities } => {
                let (tag, off) = r.union_at(id, l, j, possibilities.len())?;
                self.value(possibilities[tag], off)
            }
            NodeKind::Record { fields } => {
                self.stack.push((id, i, self.cur));
                let mut m = Map::new();
                for (name, f) in fields {
                    let v = self.child(*f, j, Seg::Field(name));
                    m.insert(name.clone(), v?);
                }
                self.stack.pop();
                Ok(Json::Object(m))
            }
            NodeKind::Tuple { types } => {
                self.stack.push((id, i, self.cur));
                let mut out = Vec::new();
                for (k, f) in types.iter().enumerate() {
                    let v = self.child(*f, j, Seg::Index(k));
                    out.push(v?);
                }
                self.stack.pop();
                Ok(Json::Array(out))
            }
            NodeKind::List { content } if node.extension.is_none() => {
                let (start, stop) = r.list_range(id, l, j)?;
                self.stack.push((id, i, self.cur));
                // Grown as elements arrive: `stop` comes from the data and is not trusted.
                let mut out = Vec::new();
                for (k, c) in (start..stop).enumerate() {
                    let v = self.child(*content, c, Seg::Index(k));
                    out.push(v?);
                }
                self.stack.pop();
                Ok(Json::Array(out))
            }
            _ => Ok(scalar_json(r.value(id, i)?)),
        }
    }
}

/// Whether node `id`'s own subtree (lists, records, tuples and unions it contains, not what
/// its pointers target) holds a pointer.
fn subtree_holds_pointer(schema: &Schema, id: NodeId) -> bool {
    crate::limits::deep(|| match &schema.node(id).kind {
        NodeKind::Pointer { .. } => true,
        NodeKind::Primitive { .. } => false,
        NodeKind::List { content } => subtree_holds_pointer(schema, *content),
        NodeKind::Union { possibilities: v } | NodeKind::Tuple { types: v } => {
            v.iter().any(|c| subtree_holds_pointer(schema, *c))
        }
        NodeKind::Record { fields } => fields.iter().any(|(_, c)| subtree_holds_pointer(schema, *c)),
    })
}

/// A scalar value as JSON (containers give `null`; use [`Reader::to_json`] for those).
fn scalar_json(v: Value<'_>) -> Json {
    match v {
        Value::Null => Json::Null,
        Value::Bool(b) => Json::Bool(b),
        Value::Int(x) => Json::from(x),
        Value::UInt(x) => Json::from(x),
        Value::Float32(x) => float_json(f32_to_f64_shortest(x)),
        Value::Float(x) => float_json(x),
        Value::Complex([a, b]) => Json::Array(vec![float_json(a), float_json(b)]),
        Value::Bytes(b) => Json::Array(b.iter().map(|&x| Json::from(x)).collect()),
        Value::Str(s) => Json::String(s.to_string()),
        Value::List(_) | Value::Record(_) | Value::Tuple(_) => Json::Null,
    }
}

impl<'r> ListView<'r> {
    /// The list as JSON.
    ///
    /// # Errors
    /// Array errors.
    pub fn to_json(&self) -> Result<Json, OamapError> {
        JsonWalk::new(self.reader).convert_elements(self.content, self.start, self.stop)
    }
}

impl<'r> RecordView<'r> {
    /// The record (or tuple) as JSON.
    ///
    /// # Errors
    /// Array errors.
    pub fn to_json(&self) -> Result<Json, OamapError> {
        // The record node read at an unmasked index: go through its fields directly.
        JsonWalk::new(self.reader).convert_fields(self.node, self.index)
    }
}

impl Value<'_> {
    /// The value as JSON (containers converted recursively).
    ///
    /// # Errors
    /// Array errors.
    pub fn to_json(&self) -> Result<Json, OamapError> {
        match self {
            Value::List(l) => l.to_json(),
            Value::Record(r) | Value::Tuple(r) => r.to_json(),
            other => Ok(scalar_json(*other)),
        }
    }
}
