//! The writer (OAMap's `fromdata`, here [`from_data`]): nested values -> named arrays, in the compact form.
//!
//! Differences from OAMap 0.12.4, on purpose: pointers are resolved by value equality (JSON
//! has no object identity), and objects appended to a pointer target count pointer
//! positions from the running total (OAMap's per-round counter writes wrong starts/stops
//! and masks for recursive data more than one level deep; see the golden README).

use std::collections::HashMap;

use serde::Serialize;
use serde_json::Value;

use guideloom_formats::DtypeKind;

use crate::schema::{Extension, NodeId, NodeKind, Schema};
use crate::{Array, ArrayMap, OamapError};

/// Fills arrays for one top-level value (OAMap's `fromdata`).
///
/// `value` is the whole top-level object: for a list root, the JSON array of records.
/// Returns every array of the schema (empty ones included), named by its convention.
///
/// # Errors
/// [`OamapError::Fill`] with the path of the first value that does not fit the schema.
pub fn from_data(schema: &Schema, value: &Value) -> Result<ArrayMap, OamapError> {
    let mut w = Writer::new(schema);
    w.fill(schema.root(), value, &mut String::new())?;
    w.resolve_pointers()?;
    Ok(w.finish())
}

/// [`from_data`] for any `serde::Serialize` value (converted to JSON first).
///
/// # Errors
/// [`OamapError::Json`] when the value cannot be turned into JSON; [`OamapError::Fill`]
/// when it does not fit the schema.
pub fn from_data_serialize<T: Serialize + ?Sized>(
    schema: &Schema,
    value: &T,
) -> Result<ArrayMap, OamapError> {
    let v = serde_json::to_value(value)
        .map_err(|source| OamapError::Json { name: "the value to write".into(), source })?;
    from_data(schema, &v)
}

struct Buffers {
    mask: Vec<i32>,
    first: Vec<i32>,
    tags: Vec<i8>,
    second: Vec<i32>,
    data: Option<Array>,
    /// Indices the parent has handed out (mask length when nullable).
    index_count: usize,
    /// Non-null entries.
    own_count: usize,
}

struct Pending<'v> {
    pointer: NodeId,
    slot: usize,
    value: &'v Value,
    path: String,
    /// The lists, records and tuples around the pointer (what a `$ref` inside the value may
    /// name).
    ancestors: Vec<Ancestor>,
}

/// A list, record or tuple being filled: its path, node and index (in the node's index
/// space, masked entries included, as pointer positions count).
#[derive(Clone)]
struct Ancestor {
    path: String,
    node: NodeId,
    index: usize,
}

/// The path a pointer value `{"$ref": "<path>"}` names (the golden files' convention for a
/// pointer back to an ancestor); `None` for any other value.
fn ref_path(v: &Value) -> Option<&str> {
    match v.as_object() {
        Some(o) if o.len() == 1 => o.get("$ref").and_then(Value::as_str),
        _ => None,
    }
}

struct Writer<'s, 'v> {
    schema: &'s Schema,
    bufs: Vec<Buffers>,
    /// For pointer targets: canonical JSON of a filled value -> its index.
    registry: HashMap<NodeId, HashMap<String, usize>>,
    pending: Vec<Pending<'v>>,
    ancestors: Vec<Ancestor>,
}

fn fill_err(path: &str, reason: impl Into<String>) -> OamapError {
    OamapError::Fill { path: path.to_string(), reason: reason.into() }
}

fn to_i32(path: &str, x: usize) -> Result<i32, OamapError> {
    i32::try_from(x).map_err(|_| fill_err(path, "more than 2^31-1 entries in one array"))
}

impl<'s, 'v> Writer<'s, 'v> {
    fn new(schema: &'s Schema) -> Self {
        let mut registry = HashMap::new();
        let mut bufs = Vec::with_capacity(schema.len());
        for i in 0..schema.len() {
            let node = schema.node(NodeId(i));
            if let NodeKind::Pointer { target, .. } = node.kind {
                registry.insert(target, HashMap::new());
            }
            let data = match node.kind {
                NodeKind::Primitive { dtype } => Some(Array::empty(dtype)),
                _ => None,
            };
            bufs.push(Buffers {
                mask: Vec::new(),
                first: Vec::new(),
                tags: Vec::new(),
                second: Vec::new(),
                data,
                index_count: 0,
                own_count: 0,
            });
        }
        Writer { schema, bufs, registry, pending: Vec::new(), ancestors: Vec::new() }
    }

    fn accepts(&self, id: NodeId, v: &Value) -> bool {
        crate::limits::deep(|| self.accepts_at(id, v))
    }

    fn accepts_at(&self, id: NodeId, v: &Value) -> bool {
        let node = self.schema.node(id);
        if v.is_null() {
            return node.nullable
                || match &node.kind {
                    NodeKind::Union { possibilities } => possibilities.iter().any(|p| self.accepts(*p, v)),
                    _ => false,
                };
        }
        match &node.kind {
            NodeKind::Primitive { dtype } => match dtype.kind() {
                DtypeKind::Bool => v.is_boolean(),
                DtypeKind::Int | DtypeKind::UInt => {
                    let mut probe = Array::empty(*dtype);
                    (v.is_i64() || v.is_u64()) && probe.push_json(v).is_ok()
                }
                DtypeKind::Float => v.is_number(),
                DtypeKind::Complex => {
                    v.is_number()
                        || v.as_array().is_some_and(|a| a.len() == 2 && a.iter().all(Value::is_number))
                }
                DtypeKind::Bytes => v.is_string(),
                _ => false,
            },
            NodeKind::List { content } => match node.extension {
                Some(Extension::Utf8String) => v.is_string(),
                Some(Extension::ByteString) => v.is_string() || v.is_array(),
                None => v.as_array().is_some_and(|a| a.iter().all(|x| self.accepts(*content, x))),
            },
            NodeKind::Record { fields } => v.as_object().is_some_and(|o| {
                fields.iter().all(|(n, f)| match o.get(n) {
                    Some(x) => self.accepts(*f, x),
                    None => self.schema.node(*f).nullable,
                })
            }),
            NodeKind::Tuple { types } => v.as_array().is_some_and(|a| {
                a.len() == types.len() && a.iter().zip(types).all(|(x, t)| self.accepts(*t, x))
            }),
            NodeKind::Union { possibilities } => possibilities.iter().any(|p| self.accepts(*p, v)),
            NodeKind::Pointer { target, .. } => ref_path(v).is_some() || self.accepts(*target, v),
        }
    }

    fn fill(&mut self, id: NodeId, v: &'v Value, path: &mut String) -> Result<(), OamapError> {
        crate::limits::deep(|| self.fill_at(id, v, path))
    }

    /// Fills a list, record or tuple's children with it on the ancestor stack.
    fn fill_within(
        &mut self,
        id: NodeId,
        index: usize,
        path: &mut String,
        f: impl FnOnce(&mut Self, &mut String) -> Result<(), OamapError>,
    ) -> Result<(), OamapError> {
        self.ancestors.push(Ancestor { path: path.clone(), node: id, index });
        let r = f(self, path);
        self.ancestors.pop();
        r
    }

    fn fill_at(&mut self, id: NodeId, v: &'v Value, path: &mut String) -> Result<(), OamapError> {
        let node = self.schema.node(id);
        let index = self.bufs[id.0].index_count;
        if node.nullable {
            if v.is_null() {
                self.bufs[id.0].mask.push(-1);
                self.bufs[id.0].index_count += 1;
                return Ok(());
            }
            let own = to_i32(path, self.bufs[id.0].own_count)?;
            self.bufs[id.0].mask.push(own);
        } else if v.is_null() && !matches!(node.kind, NodeKind::Union { .. }) {
            return Err(fill_err(path, "null in a non-nullable node"));
        }
        if let Some(reg) = self.registry.get_mut(&id) {
            reg.entry(v.to_string()).or_insert(index);
        }
        self.bufs[id.0].index_count += 1;
        self.bufs[id.0].own_count += 1;
        match &node.kind {
            NodeKind::Primitive { .. } => {
                if !self.accepts(id, v) {
                    return Err(fill_err(path, format!("{v} is not a {}", self.dtype_name(id))));
                }
                let buf = self.bufs[id.0].data.as_mut().ok_or_else(|| fill_err(path, "no data buffer"))?;
                let bytes = (buf.len() as u64 + 1).saturating_mul(buf.dtype().width() as u64);
                if bytes > crate::MAX_WRITE_ARRAY_BYTES {
                    return Err(OamapError::TooLarge {
                        what: format!(
                            "array {:?} (bytes) at {path}",
                            node.names.first.as_deref().unwrap_or("")
                        ),
                        limit: crate::MAX_WRITE_ARRAY_BYTES,
                        found: bytes,
                    });
                }
                buf.push_json(v).map_err(|r| fill_err(path, r))?;
            }
            NodeKind::List { content } => {
                let content = *content;
                let start = to_i32(path, self.bufs[content.0].index_count)?;
                if let Some(ext) = node.extension {
                    let bytes: Vec<Value> = match (ext, v) {
                        (_, Value::String(s)) => s.bytes().map(Value::from).collect(),
                        (Extension::ByteString, Value::Array(a)) => a.clone(),
                        _ => return Err(fill_err(path, format!("{v} is not a string"))),
                    };
                    let b = &mut self.bufs[content.0];
                    let data = b.data.as_mut().ok_or_else(|| fill_err(path, "no data buffer"))?;
                    for x in &bytes {
                        data.push_json(x).map_err(|r| fill_err(path, r))?;
                    }
                    b.index_count += bytes.len();
                    b.own_count += bytes.len();
                } else {
                    let items = v.as_array().ok_or_else(|| fill_err(path, format!("{v} is not a list")))?;
                    self.fill_within(id, index, path, |w, path| {
                        for (k, x) in items.iter().enumerate() {
                            let len = path.len();
                            path.push_str(&format!("/{k}"));
                            w.fill(content, x, path)?;
                            path.truncate(len);
                        }
                        Ok(())
                    })?;
                }
                let stop = to_i32(path, self.bufs[content.0].index_count)?;
                self.bufs[id.0].first.push(start);
                self.bufs[id.0].second.push(stop);
            }
            NodeKind::Record { fields } => {
                let obj = v.as_object().ok_or_else(|| fill_err(path, format!("{v} is not a record")))?;
                self.fill_within(id, index, path, |w, path| {
                    for (name, f) in fields {
                        let x = obj.get(name).unwrap_or(&Value::Null);
                        let len = path.len();
                        path.push('/');
                        path.push_str(name);
                        w.fill(*f, x, path)?;
                        path.truncate(len);
                    }
                    Ok(())
                })?;
            }
            NodeKind::Tuple { types } => {
                let items = v
                    .as_array()
                    .filter(|a| a.len() == types.len())
                    .ok_or_else(|| fill_err(path, format!("{v} is not a tuple of {}", types.len())))?;
                self.fill_within(id, index, path, |w, path| {
                    for (k, (x, t)) in items.iter().zip(types).enumerate() {
                        let len = path.len();
                        path.push_str(&format!("/{k}"));
                        w.fill(*t, x, path)?;
                        path.truncate(len);
                    }
                    Ok(())
                })?;
            }
            NodeKind::Union { possibilities } => {
                let k = possibilities
                    .iter()
                    .position(|p| self.accepts(*p, v))
                    .ok_or_else(|| fill_err(path, format!("{v} fits no possibility of the union")))?;
                let p = possibilities[k];
                let off = to_i32(path, self.bufs[p.0].index_count)?;
                self.bufs[id.0].tags.push(k as i8);
                self.bufs[id.0].second.push(off);
                self.fill(p, v, path)?;
            }
            NodeKind::Pointer { target, .. } => {
                let target = *target;
                if let Some(p) = ref_path(v) {
                    // A pointer back to an ancestor: its position is that ancestor's index.
                    let found = self.ancestors.iter().rev().find(|a| a.path == p && a.node == target);
                    let a = found.ok_or_else(|| {
                        fill_err(
                            path,
                            format!("$ref {p:?} names no enclosing value of the pointer's target type"),
                        )
                    })?;
                    let pos = to_i32(path, a.index)?;
                    self.bufs[id.0].first.push(pos);
                } else {
                    let slot = self.bufs[id.0].first.len();
                    self.bufs[id.0].first.push(0);
                    let ancestors = self.ancestors.clone();
                    self.pending.push(Pending { pointer: id, slot, value: v, path: path.clone(), ancestors });
                }
            }
        }
        Ok(())
    }

    fn dtype_name(&self, id: NodeId) -> String {
        match &self.schema.node(id).kind {
            NodeKind::Primitive { dtype } => dtype.name(),
            _ => "value".into(),
        }
    }

    fn resolve_pointers(&mut self) -> Result<(), OamapError> {
        while !self.pending.is_empty() {
            let round = std::mem::take(&mut self.pending);
            for p in round {
                let NodeKind::Pointer { target, .. } = self.schema.node(p.pointer).kind else {
                    continue;
                };
                let key = p.value.to_string();
                let found = self.registry.get(&target).and_then(|r| r.get(&key)).copied();
                let pos = match found {
                    Some(pos) => pos,
                    None => {
                        if !self.accepts(target, p.value) {
                            return Err(fill_err(
                                &p.path,
                                format!("{} does not fit the pointer's target", p.value),
                            ));
                        }
                        let pos = self.bufs[target.0].index_count;
                        let mut path = p.path.clone();
                        let outer = std::mem::replace(&mut self.ancestors, p.ancestors);
                        let r = self.fill(target, p.value, &mut path);
                        self.ancestors = outer;
                        r?;
                        pos
                    }
                };
                self.bufs[p.pointer.0].first[p.slot] = to_i32(&p.path, pos)?;
            }
        }
        Ok(())
    }

    fn finish(self) -> ArrayMap {
        let mut out = ArrayMap::new();
        for (i, b) in self.bufs.into_iter().enumerate() {
            let node = self.schema.node(NodeId(i));
            let names = &node.names;
            if names.prefix.is_empty() && names.first.is_none() && names.mask.is_none() {
                continue; // not reached by the naming walk
            }
            if let Some(m) = &names.mask {
                out.insert(m.clone(), Array::from_i32(b.mask));
            }
            match &node.kind {
                NodeKind::Primitive { .. } => {
                    if let (Some(n), Some(d)) = (&names.first, b.data) {
                        out.insert(n.clone(), d);
                    }
                }
                NodeKind::List { .. } => {
                    if let (Some(s), Some(e)) = (&names.first, &names.second) {
                        out.insert(s.clone(), Array::from_i32(b.first));
                        out.insert(e.clone(), Array::from_i32(b.second));
                    }
                }
                NodeKind::Union { .. } => {
                    if let (Some(t), Some(o)) = (&names.first, &names.second) {
                        out.insert(t.clone(), Array::from_i8(b.tags));
                        out.insert(o.clone(), Array::from_i32(b.second));
                    }
                }
                NodeKind::Pointer { .. } => {
                    if let Some(p) = &names.first {
                        out.insert(p.clone(), Array::from_i32(b.first));
                    }
                }
                _ => {}
            }
        }
        out
    }
}
