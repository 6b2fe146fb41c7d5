//! A value read through a [`Reader`] as JSON: shared and recursive pointer targets written
//! once and referenced with `$ref` after that.

use std::collections::HashMap;

use serde_json::{Map, Value as Json};

use crate::array::{f32_to_f64_shortest, float_json};
use crate::reader::{ListView, Reader, RecordView, Value};
use crate::schema::{NodeId, NodeKind, Schema};
use crate::OamapError;

impl Reader {
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
