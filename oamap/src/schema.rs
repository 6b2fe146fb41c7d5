//! OAMap schemas: the node tree (a graph through pointers), its JSON forms and the
//! array-naming convention.

use std::collections::{BTreeMap, HashMap};

use serde_json::{json, Map, Value};

use guideloom_formats::DtypeKind;

use crate::{Dtype, OamapError};

/// The index of a node inside a [`Schema`] (taken from the schema: [`Schema::root`],
/// [`Schema::field`], the child ids of a [`NodeKind`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub(crate) usize);

impl NodeId {
    /// The node's position in its schema, in `0..schema.len()` (for per-node tables).
    pub fn index(self) -> usize {
        self.0
    }
}

/// What a node is.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum NodeKind {
    /// One fixed-width value per index, read from the data array.
    Primitive {
        /// The value type.
        dtype: Dtype,
    },
    /// A variable-length list: `content[starts[i]..stops[i]]`.
    List {
        /// The element node.
        content: NodeId,
    },
    /// Exactly one of the possibilities per index (`tags[i]` read at `offsets[i]`).
    Union {
        /// Possibility `k` is selected by tag `k`.
        possibilities: Vec<NodeId>,
    },
    /// Named fields, sorted by name (OAMap lays out and fills fields in sorted order).
    Record {
        /// `(name, node)` pairs sorted by name.
        fields: Vec<(String, NodeId)>,
    },
    /// Positional fields `0..n`.
    Tuple {
        /// The field nodes in order.
        types: Vec<NodeId>,
    },
    /// A reference: the target read at `positions[i]`.
    Pointer {
        /// The node pointed to.
        target: NodeId,
        /// Whether the target lives outside the tree (its arrays under `-X`).
        external: bool,
    },
}

/// A recognised extension (matched by node name, OAMap's `UTF8String` / `ByteString`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extension {
    /// A `List(uint8)` named `UTF8String`: read as a UTF-8 string.
    Utf8String,
    /// A `List(uint8)` named `ByteString`: read as bytes.
    ByteString,
}

/// The array names a node uses (explicit overrides or derived from the naming convention).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ArrayNames {
    /// The node's derived name (its prefix before any `-N<name>`).
    pub prefix: String,
    /// The mask array (`-M`), for nullable nodes.
    pub mask: Option<String>,
    /// The first own array: data (Primitive), starts (List), tags (Union), positions (Pointer).
    pub first: Option<String>,
    /// The second own array: stops (List), offsets (Union).
    pub second: Option<String>,
}

/// Explicit array-name overrides given in the schema JSON.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExplicitNames {
    /// `mask`.
    pub mask: Option<String>,
    /// `data` (Primitive).
    pub data: Option<String>,
    /// `starts` (List).
    pub starts: Option<String>,
    /// `stops` (List).
    pub stops: Option<String>,
    /// `tags` (Union).
    pub tags: Option<String>,
    /// `offsets` (Union).
    pub offsets: Option<String>,
    /// `positions` (Pointer).
    pub positions: Option<String>,
}

/// One schema node.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// What the node is.
    pub kind: NodeKind,
    /// Whether the value may be null (adds a mask array).
    pub nullable: bool,
    /// The node's name (record class name or extension name); inserts `-N<name>`.
    pub name: Option<String>,
    /// The label an internal pointer refers to, as given in the JSON.
    pub label: Option<String>,
    /// Documentation string, if any.
    pub doc: Option<String>,
    /// Explicit array names.
    pub explicit: ExplicitNames,
    /// The extension this node matches, if any.
    pub extension: Option<Extension>,
    /// The resolved array names.
    pub names: ArrayNames,
}

/// A resolved OAMap schema: nodes, root, and the naming (prefix, delimiter) in force.
///
/// Build one with [`Schema::from_json`] (the golden files' simple form or OAMap's own schema
/// JSON, both accepted), read it back with [`Schema::to_oamap_json`].
#[derive(Debug, Clone, PartialEq)]
pub struct Schema {
    nodes: Vec<Node>,
    root: NodeId,
    prefix: String,
    delimiter: String,
}

const DEFAULT_PREFIX: &str = "object";
const DEFAULT_DELIMITER: &str = "-";

impl Schema {
    /// Parses a schema with the default naming (prefix `object`, delimiter `-`).
    ///
    /// Accepts the simple form (fields as an object, `{"ref": label}` pointer targets,
    /// numpy dtype names) and OAMap's JSON (fields as `[name, node]` pairs, `D` codes,
    /// dtype strings as nodes, `"#N"` label references).
    ///
    /// # Errors
    /// [`OamapError::Schema`] for malformed JSON, unknown references, empty records, a node
    /// containing itself other than through a pointer, or a pointer to itself.
    pub fn from_json(value: &Value) -> Result<Self, OamapError> {
        Self::from_json_named(value, DEFAULT_PREFIX, DEFAULT_DELIMITER)
    }

    /// Parses a schema (see [`Schema::from_json`]) with the given array-name prefix and
    /// delimiter.
    ///
    /// # Errors
    /// As [`Schema::from_json`]; also a delimiter that is empty or starts with
    /// `[A-Za-z0-9_]`.
    pub fn from_json_named(value: &Value, prefix: &str, delimiter: &str) -> Result<Self, OamapError> {
        match delimiter.chars().next() {
            Some(c) if !(c.is_ascii_alphanumeric() || c == '_') => {}
            _ => return Err(OamapError::schema(format!("bad delimiter {delimiter:?}"))),
        }
        let mut parser = Parser { slots: Vec::new(), labels: HashMap::new() };
        let root = parser.parse(value)?;
        let (nodes, root) = parser.resolve(root)?;
        let mut schema = Schema { nodes, root, prefix: prefix.to_string(), delimiter: delimiter.to_string() };
        schema.assign_names()?;
        Ok(schema)
    }

    /// The root node.
    pub fn root(&self) -> NodeId {
        self.root
    }

    /// A node by id.
    ///
    /// # Panics
    /// Only for an id not taken from this schema (an internal invariant).
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.0]
    }

    /// Number of nodes (including external pointer targets).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the schema has no nodes (never true for a parsed schema).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The array-name prefix (default `object`).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The array-name delimiter (default `-`).
    pub fn delimiter(&self) -> &str {
        &self.delimiter
    }

    /// The field `name` of a record node (or `"0"`, `"1"` ... of a tuple node).
    pub fn field(&self, id: NodeId, name: &str) -> Option<NodeId> {
        match &self.node(id).kind {
            NodeKind::Record { fields } => fields.iter().find(|(n, _)| n == name).map(|(_, c)| *c),
            NodeKind::Tuple { types } => name.parse::<usize>().ok().and_then(|k| types.get(k).copied()),
            _ => None,
        }
    }

    /// The node a reader reaches through `id` once pointers are followed (a pointer's
    /// target, repeatedly) — used by projections.
    pub fn content_of_list(&self, id: NodeId) -> Option<NodeId> {
        match &self.node(id).kind {
            NodeKind::List { content } => Some(*content),
            _ => None,
        }
    }

    /// Every array name, in OAMap's generator order (depth first; a node's mask, then its
    /// own arrays, then its children; record fields sorted; external pointer targets after
    /// the positions).
    pub fn array_names(&self) -> Vec<String> {
        let mut out = Vec::new();
        self.collect_names(self.root, &mut out);
        out
    }

    /// `(name, dtype)` of every array, in generator order.
    pub fn array_dtypes(&self) -> Vec<(String, Dtype)> {
        let mut out = Vec::new();
        self.collect_dtypes(self.root, &mut out);
        out
    }

    fn collect_names(&self, id: NodeId, out: &mut Vec<String>) {
        let mut dt = Vec::new();
        self.collect_dtypes(id, &mut dt);
        out.extend(dt.into_iter().map(|(n, _)| n));
    }

    fn collect_dtypes(&self, id: NodeId, out: &mut Vec<(String, Dtype)>) {
        let node = self.node(id);
        if let Some(m) = &node.names.mask {
            out.push((m.clone(), Dtype::INT32));
        }
        match &node.kind {
            NodeKind::Primitive { dtype } => out.extend(node.names.first.clone().map(|n| (n, *dtype))),
            NodeKind::List { content } => {
                out.extend(node.names.first.clone().map(|n| (n, Dtype::INT32)));
                out.extend(node.names.second.clone().map(|n| (n, Dtype::INT32)));
                self.collect_dtypes(*content, out);
            }
            NodeKind::Union { possibilities } => {
                out.extend(node.names.first.clone().map(|n| (n, Dtype::INT8)));
                out.extend(node.names.second.clone().map(|n| (n, Dtype::INT32)));
                for p in possibilities {
                    self.collect_dtypes(*p, out);
                }
            }
            NodeKind::Record { fields } => {
                for (_, f) in fields {
                    self.collect_dtypes(*f, out);
                }
            }
            NodeKind::Tuple { types } => {
                for f in types {
                    self.collect_dtypes(*f, out);
                }
            }
            NodeKind::Pointer { target, external } => {
                out.extend(node.names.first.clone().map(|n| (n, Dtype::INT32)));
                if *external {
                    self.collect_dtypes(*target, out);
                }
            }
        }
    }

    /// Marks tree membership, decides internal/external pointers, detects extensions and
    /// derives every array name.
    fn assign_names(&mut self) -> Result<(), OamapError> {
        // 1. Which nodes are in the tree (reached without following pointer targets)?
        let mut in_tree = vec![false; self.nodes.len()];
        let mut stack = vec![self.root];
        while let Some(id) = stack.pop() {
            if in_tree[id.0] {
                return Err(OamapError::schema(
                    "a node appears twice in the tree or contains itself (use a pointer)",
                ));
            }
            in_tree[id.0] = true;
            stack.extend(self.tree_children(id));
        }
        for i in 0..self.nodes.len() {
            if let NodeKind::Pointer { target, external } = &mut self.nodes[i].kind {
                *external = !in_tree[target.0];
            }
        }
        // 2. Derive names depth first; external targets under -X.
        let mut naming = Naming {
            assigned: vec![false; self.nodes.len()],
            spent: 0,
            limit: name_budget(&self.nodes, &self.prefix, &self.delimiter),
        };
        let root = self.root;
        let prefix = self.prefix.clone();
        self.derive(root, prefix, &mut naming)?;
        let assigned = naming.assigned;
        // 3. Positions of internal pointers get the target's derived name appended.
        for i in 0..self.nodes.len() {
            if !assigned[i] {
                continue;
            }
            if let NodeKind::Pointer { target, external } = self.nodes[i].kind {
                let node = &self.nodes[i];
                let own = node.names.prefix.clone();
                let p_named = match &node.name {
                    Some(n) => format!("{own}{}N{n}", self.delimiter),
                    None => own,
                };
                let positions = match &node.explicit.positions {
                    Some(p) => p.clone(),
                    None if external => format!("{p_named}{}P", self.delimiter),
                    None => {
                        if !assigned[target.0] {
                            return Err(OamapError::schema("pointer target is not part of the schema"));
                        }
                        format!("{p_named}{d}P{d}{}", self.nodes[target.0].names.prefix, d = self.delimiter)
                    }
                };
                self.nodes[i].names.first = Some(positions);
            }
        }
        Ok(())
    }

    fn tree_children(&self, id: NodeId) -> Vec<NodeId> {
        match &self.nodes[id.0].kind {
            NodeKind::List { content } => vec![*content],
            NodeKind::Union { possibilities } => possibilities.clone(),
            NodeKind::Record { fields } => fields.iter().map(|(_, c)| *c).collect(),
            NodeKind::Tuple { types } => types.clone(),
            _ => Vec::new(),
        }
    }

    fn derive(&mut self, id: NodeId, prefix: String, naming: &mut Naming) -> Result<(), OamapError> {
        crate::limits::deep(|| self.derive_at(id, prefix, naming))
    }

    fn derive_at(&mut self, id: NodeId, prefix: String, naming: &mut Naming) -> Result<(), OamapError> {
        if naming.assigned[id.0] {
            return Err(OamapError::schema("a node is reached twice while naming arrays"));
        }
        naming.assigned[id.0] = true;
        // Every name below derives from `prefix`: counted before any is made.
        naming.spend(prefix.len())?;
        let d = self.delimiter.clone();
        let node = &self.nodes[id.0];
        let named = match &node.name {
            Some(n) => format!("{prefix}{d}N{n}"),
            None => prefix.clone(),
        };
        let ex = node.explicit.clone();
        let mask = node.nullable.then(|| ex.mask.clone().unwrap_or_else(|| format!("{named}{d}M")));
        let (first, second, children): (Option<String>, Option<String>, Vec<(NodeId, String)>) = match &node
            .kind
        {
            NodeKind::Primitive { dtype } => {
                (Some(ex.data.clone().unwrap_or_else(|| format!("{named}{d}{}", dtype.code()))), None, vec![])
            }
            NodeKind::List { content } => (
                Some(ex.starts.clone().unwrap_or_else(|| format!("{named}{d}B"))),
                Some(ex.stops.clone().unwrap_or_else(|| format!("{named}{d}E"))),
                vec![(*content, format!("{named}{d}L"))],
            ),
            NodeKind::Union { possibilities } => (
                Some(ex.tags.clone().unwrap_or_else(|| format!("{named}{d}T"))),
                Some(ex.offsets.clone().unwrap_or_else(|| format!("{named}{d}O"))),
                possibilities.iter().enumerate().map(|(k, c)| (*c, format!("{named}{d}U{k}"))).collect(),
            ),
            NodeKind::Record { fields } => {
                if fields.is_empty() {
                    return Err(OamapError::schema("a record needs at least one field"));
                }
                (None, None, fields.iter().map(|(f, c)| (*c, format!("{named}{d}F{f}"))).collect())
            }
            NodeKind::Tuple { types } => {
                if types.is_empty() {
                    return Err(OamapError::schema("a tuple needs at least one field"));
                }
                (None, None, types.iter().enumerate().map(|(k, c)| (*c, format!("{named}{d}F{k}"))).collect())
            }
            NodeKind::Pointer { target, external } => {
                (None, None, if *external { vec![(*target, format!("{named}{d}X"))] } else { vec![] })
            }
        };
        let extension = match (&node.kind, node.name.as_deref()) {
            (NodeKind::List { content }, Some(n @ ("UTF8String" | "ByteString"))) => {
                let c = &self.nodes[content.0];
                match c.kind {
                    NodeKind::Primitive { dtype } if dtype == Dtype::UINT8 && !c.nullable => {
                        Some(if n == "UTF8String" { Extension::Utf8String } else { Extension::ByteString })
                    }
                    _ => None,
                }
            }
            _ => None,
        };
        let made = [&mask, &first, &second].iter().filter_map(|n| n.as_ref().map(String::len)).sum::<usize>();
        naming.spend(made)?;
        let node = &mut self.nodes[id.0];
        node.extension = extension;
        node.names = ArrayNames { prefix, mask, first, second };
        for (c, p) in children {
            self.derive(c, p, naming)?;
        }
        Ok(())
    }

    /// OAMap's schema JSON (`Schema.tojson()`): records as `[name, node]` pairs, dtypes as
    /// `D` codes, internal pointer targets labelled `#0`, `#1` ... With `explicit`, every
    /// array name is written out (OAMap's dataset descriptions do this).
    pub fn to_oamap_json(&self, explicit: bool) -> Value {
        let mut labels: BTreeMap<NodeId, String> = BTreeMap::new();
        for n in &self.nodes {
            if let NodeKind::Pointer { target, external: false } = n.kind {
                let k = labels.len();
                labels.entry(target).or_insert_with(|| format!("#{k}"));
            }
        }
        self.node_json(self.root, explicit, &labels)
    }

    fn node_json(&self, id: NodeId, explicit: bool, labels: &BTreeMap<NodeId, String>) -> Value {
        crate::limits::deep(|| self.node_json_at(id, explicit, labels))
    }

    fn node_json_at(&self, id: NodeId, explicit: bool, labels: &BTreeMap<NodeId, String>) -> Value {
        let node = self.node(id);
        let mut m = Map::new();
        let nm = &node.names;
        match &node.kind {
            NodeKind::Primitive { dtype } => {
                let plain = !explicit
                    && !node.nullable
                    && node.explicit.data.is_none()
                    && node.name.is_none()
                    && node.doc.is_none()
                    && !labels.contains_key(&id);
                if plain {
                    // OAMap writes a primitive with only defaults as numpy's `str(dtype)`.
                    return json!(numpy_str(*dtype));
                }
                m.insert("type".into(), json!("primitive"));
                m.insert("dtype".into(), json!(dtype.code()));
                if explicit {
                    m.insert("data".into(), json!(nm.first));
                } else if let Some(x) = &node.explicit.data {
                    m.insert("data".into(), json!(x));
                }
            }
            NodeKind::List { content } => {
                m.insert("type".into(), json!("list"));
                m.insert("content".into(), self.node_json(*content, explicit, labels));
                if explicit {
                    m.insert("starts".into(), json!(nm.first));
                    m.insert("stops".into(), json!(nm.second));
                } else {
                    if let Some(x) = &node.explicit.starts {
                        m.insert("starts".into(), json!(x));
                    }
                    if let Some(x) = &node.explicit.stops {
                        m.insert("stops".into(), json!(x));
                    }
                }
            }
            NodeKind::Union { possibilities } => {
                m.insert("type".into(), json!("union"));
                let p: Vec<Value> =
                    possibilities.iter().map(|c| self.node_json(*c, explicit, labels)).collect();
                m.insert("possibilities".into(), Value::Array(p));
                if explicit {
                    m.insert("tags".into(), json!(nm.first));
                    m.insert("offsets".into(), json!(nm.second));
                } else {
                    if let Some(x) = &node.explicit.tags {
                        m.insert("tags".into(), json!(x));
                    }
                    if let Some(x) = &node.explicit.offsets {
                        m.insert("offsets".into(), json!(x));
                    }
                }
            }
            NodeKind::Record { fields } => {
                m.insert("type".into(), json!("record"));
                let f: Vec<Value> =
                    fields.iter().map(|(n, c)| json!([n, self.node_json(*c, explicit, labels)])).collect();
                m.insert("fields".into(), Value::Array(f));
            }
            NodeKind::Tuple { types } => {
                m.insert("type".into(), json!("tuple"));
                let t: Vec<Value> = types.iter().map(|c| self.node_json(*c, explicit, labels)).collect();
                m.insert("types".into(), Value::Array(t));
            }
            NodeKind::Pointer { target, external } => {
                m.insert("type".into(), json!("pointer"));
                let t = if *external {
                    self.node_json(*target, explicit, labels)
                } else {
                    json!(labels.get(target).cloned().unwrap_or_default())
                };
                m.insert("target".into(), t);
                if explicit {
                    m.insert("positions".into(), json!(nm.first));
                } else if let Some(x) = &node.explicit.positions {
                    m.insert("positions".into(), json!(x));
                }
            }
        }
        if node.nullable {
            m.insert("nullable".into(), json!(true));
            if explicit {
                m.insert("mask".into(), json!(nm.mask));
            } else if let Some(x) = &node.explicit.mask {
                m.insert("mask".into(), json!(x));
            }
        }
        if let Some(n) = &node.name {
            m.insert("name".into(), json!(n));
        }
        if let Some(d) = &node.doc {
            m.insert("doc".into(), json!(d));
        }
        if let Some(l) = labels.get(&id) {
            m.insert("label".into(), json!(l));
        }
        Value::Object(m)
    }
}

/// numpy's `str(dtype)`: `int32`, `float64`, `bool`, `>f8` (big-endian), `|S4`.
fn numpy_str(dtype: Dtype) -> String {
    if dtype.kind() == DtypeKind::Bytes || dtype.big_endian() {
        dtype.descr()
    } else {
        dtype.name()
    }
}

/// The state of naming a schema's arrays: the nodes named so far, and the bytes of the names
/// made against their budget ([`name_budget`]).
struct Naming {
    assigned: Vec<bool>,
    spent: u64,
    limit: u64,
}

impl Naming {
    /// Counts `bytes` more of names.
    ///
    /// # Errors
    /// [`OamapError::TooLarge`] once the names pass their budget.
    fn spend(&mut self, bytes: usize) -> Result<(), OamapError> {
        self.spent = self.spent.saturating_add(bytes as u64);
        if self.spent > self.limit {
            return Err(OamapError::TooLarge {
                what: "the array names a schema derives (each node's name repeats its ancestors'; pointers to nodes outside the tree chain them)".into(),
                limit: self.limit,
                found: self.spent,
            });
        }
        Ok(())
    }
}

/// The most bytes of array names a schema of `nodes` may derive, linear in the schema's
/// size: 1 MiB, plus 4 KiB per node, plus 16 bytes per byte of the field names, node names
/// and delimiter it holds (a name repeats its ancestors', so a chain of nodes, or of pointers
/// to nodes outside the tree, would otherwise take memory quadratic in its length before
/// anything else refuses it).
fn name_budget(nodes: &[Node], prefix: &str, delimiter: &str) -> u64 {
    let named = nodes.iter().fold((prefix.len() + delimiter.len()) as u64, |a, n| {
        let fields = match &n.kind {
            NodeKind::Record { fields } => fields.iter().map(|(f, _)| f.len() as u64).sum(),
            _ => 0,
        };
        a.saturating_add(fields).saturating_add(n.name.as_ref().map_or(0, |s| s.len() as u64))
    });
    (1u64 << 20)
        .saturating_add((nodes.len() as u64).saturating_mul(4096))
        .saturating_add(named.saturating_mul(16))
}

/// A parsed node, or an unresolved `#label` / `{"ref": label}` reference (parse-time only:
/// [`Parser::resolve`] replaces every reference by the labelled node).
enum Slot {
    Node(Box<Node>),
    Ref(String),
}

struct Parser {
    slots: Vec<Slot>,
    labels: HashMap<String, NodeId>,
}

impl Parser {
    fn push_ref(&mut self, label: &str) -> NodeId {
        self.slots.push(Slot::Ref(label.to_string()));
        NodeId(self.slots.len() - 1)
    }

    /// The node slot `id` stands for: itself, or the node its reference's label names.
    fn target(&self, id: NodeId) -> Result<usize, OamapError> {
        match &self.slots[id.0] {
            Slot::Node(_) => Ok(id.0),
            Slot::Ref(l) => {
                let t =
                    self.labels.get(l).ok_or_else(|| OamapError::schema(format!("unknown label {l:?}")))?;
                Ok(t.0)
            }
        }
    }

    /// Drops the reference slots, renumbering the nodes and pointing every child id (and the
    /// root) at the node it stands for.
    fn resolve(self, root: NodeId) -> Result<(Vec<Node>, NodeId), OamapError> {
        let mut new_id = vec![usize::MAX; self.slots.len()];
        let mut n = 0;
        for (i, slot) in self.slots.iter().enumerate() {
            if matches!(slot, Slot::Node(_)) {
                new_id[i] = n;
                n += 1;
            }
        }
        // What every slot stands for, in the new numbering.
        let stands_for: Vec<usize> = (0..self.slots.len())
            .map(|i| self.target(NodeId(i)).map(|t| new_id[t]))
            .collect::<Result<_, _>>()?;
        let map = |id: &mut NodeId| *id = NodeId(stands_for[id.0]);
        let mut nodes = Vec::with_capacity(n);
        for slot in self.slots {
            let Slot::Node(mut node) = slot else { continue };
            match &mut node.kind {
                NodeKind::List { content } => map(content),
                NodeKind::Union { possibilities: v } | NodeKind::Tuple { types: v } => {
                    v.iter_mut().for_each(map)
                }
                NodeKind::Record { fields } => fields.iter_mut().for_each(|(_, c)| map(c)),
                NodeKind::Pointer { target, .. } => {
                    map(target);
                    if target.0 == nodes.len() {
                        return Err(OamapError::schema("a pointer may not target itself"));
                    }
                }
                NodeKind::Primitive { .. } => {}
            }
            nodes.push(*node);
        }
        refuse_empty_cycles(&nodes)?;
        Ok((nodes, NodeId(stands_for[root.0])))
    }

    fn push(&mut self, node: Node) -> NodeId {
        self.slots.push(Slot::Node(Box::new(node)));
        NodeId(self.slots.len() - 1)
    }

    fn parse(&mut self, v: &Value) -> Result<NodeId, OamapError> {
        crate::limits::deep(|| self.parse_at(v))
    }

    fn parse_at(&mut self, v: &Value) -> Result<NodeId, OamapError> {
        let obj = match v {
            Value::String(s) if s.starts_with('#') => return Ok(self.push_ref(s)),
            Value::String(s) => {
                return Ok(self.push(Node::new(NodeKind::Primitive { dtype: Dtype::parse(s)? })))
            }
            Value::Object(o) => o,
            other => {
                return Err(OamapError::schema(format!(
                    "a schema node must be an object or string, got {other}"
                )))
            }
        };
        let ty = obj
            .get("type")
            .and_then(Value::as_str)
            .ok_or_else(|| OamapError::schema("node without \"type\""))?;
        let kind = match ty {
            "primitive" => {
                let d = obj.get("dtype").and_then(Value::as_str).unwrap_or("float64");
                NodeKind::Primitive { dtype: Dtype::parse(d)? }
            }
            "list" => {
                let c = obj.get("content").ok_or_else(|| OamapError::schema("list without content"))?;
                NodeKind::List { content: self.parse(c)? }
            }
            "union" => {
                let ps = obj
                    .get("possibilities")
                    .and_then(Value::as_array)
                    .ok_or_else(|| OamapError::schema("union without possibilities"))?;
                if ps.len() > 127 {
                    return Err(OamapError::schema("a union has at most 127 possibilities"));
                }
                let mut ids = Vec::new();
                for p in ps {
                    ids.push(self.parse(p)?);
                }
                NodeKind::Union { possibilities: ids }
            }
            "record" => {
                let mut fields: Vec<(String, NodeId)> = Vec::new();
                match obj.get("fields") {
                    Some(Value::Object(f)) => {
                        for (n, c) in f {
                            fields.push((n.clone(), self.parse(c)?));
                        }
                    }
                    Some(Value::Array(pairs)) => {
                        for p in pairs {
                            match p.as_array().map(Vec::as_slice) {
                                Some([Value::String(n), c]) => fields.push((n.clone(), self.parse(c)?)),
                                _ => {
                                    return Err(OamapError::schema(
                                        "record fields must be [name, node] pairs",
                                    ))
                                }
                            }
                        }
                    }
                    _ => return Err(OamapError::schema("record without fields")),
                }
                fields.sort_by(|a, b| a.0.cmp(&b.0));
                for w in fields.windows(2) {
                    if w[0].0 == w[1].0 {
                        return Err(OamapError::schema(format!("duplicate field {:?}", w[0].0)));
                    }
                }
                NodeKind::Record { fields }
            }
            "tuple" => {
                let ts = obj
                    .get("types")
                    .and_then(Value::as_array)
                    .ok_or_else(|| OamapError::schema("tuple without types"))?;
                let mut ids = Vec::new();
                for t in ts {
                    ids.push(self.parse(t)?);
                }
                NodeKind::Tuple { types: ids }
            }
            "pointer" => {
                let t = obj.get("target").ok_or_else(|| OamapError::schema("pointer without target"))?;
                let target = match t {
                    Value::Object(o) if o.contains_key("ref") && !o.contains_key("type") => {
                        let l = o
                            .get("ref")
                            .and_then(Value::as_str)
                            .ok_or_else(|| OamapError::schema("bad ref"))?;
                        self.push_ref(l)
                    }
                    other => self.parse(other)?,
                };
                NodeKind::Pointer { target, external: false }
            }
            other => return Err(OamapError::schema(format!("unknown node type {other:?}"))),
        };
        let s = |k: &str| obj.get(k).and_then(Value::as_str).map(str::to_string);
        let mut node = Node::new(kind);
        node.nullable = obj.get("nullable").and_then(Value::as_bool).unwrap_or(false);
        node.name = s("name");
        if let Some(n) = &node.name {
            let mut cs = n.chars();
            let ok = cs.next().is_some_and(|c| c.is_ascii_alphabetic())
                && cs.all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !ok {
                return Err(OamapError::schema(format!("bad node name {n:?}")));
            }
        }
        node.doc = s("doc");
        node.explicit = ExplicitNames {
            mask: s("mask"),
            data: s("data"),
            starts: s("starts"),
            stops: s("stops"),
            tags: s("tags"),
            offsets: s("offsets"),
            positions: s("positions"),
        };
        node.label = s("label");
        let label = node.label.clone();
        let id = self.push(node);
        if let Some(l) = label {
            if self.labels.insert(l.clone(), id).is_some() {
                return Err(OamapError::schema(format!("label {l:?} used twice")));
            }
        }
        Ok(id)
    }
}

/// Refuses a cycle made only of pointers and unions (`a -> b -> a`, or a union with a
/// pointer to itself): following it never reaches a list, record, tuple or primitive, so a
/// reader or writer walking it would never stop. A cycle through a list, record or tuple (a
/// linked list, a tree) is fine: each step consumes data.
fn refuse_empty_cycles(nodes: &[Node]) -> Result<(), OamapError> {
    let passes = |id: usize| -> &[NodeId] {
        match &nodes[id].kind {
            NodeKind::Pointer { target, .. } => std::slice::from_ref(target),
            NodeKind::Union { possibilities } => possibilities,
            _ => &[],
        }
    };
    // Iterative depth-first search: 0 = unseen, 1 = on the path, 2 = done.
    let mut state = vec![0u8; nodes.len()];
    for start in 0..nodes.len() {
        if state[start] != 0 {
            continue;
        }
        let mut path: Vec<(usize, usize)> = vec![(start, 0)];
        state[start] = 1;
        while let Some(&mut (id, ref mut next)) = path.last_mut() {
            let out = passes(id);
            if let Some(&t) = out.get(*next) {
                *next += 1;
                match state[t.0] {
                    0 => {
                        state[t.0] = 1;
                        path.push((t.0, 0));
                    }
                    1 => {
                        let label = |i: usize| nodes[i].label.clone().unwrap_or_else(|| format!("node {i}"));
                        return Err(OamapError::schema(format!(
                            "pointers and unions form a cycle with no list, record or tuple in it ({} -> {})",
                            label(id),
                            label(t.0)
                        )));
                    }
                    _ => {}
                }
            } else {
                state[id] = 2;
                path.pop();
            }
        }
    }
    Ok(())
}

impl Node {
    /// A node of `kind` with every attribute at its default.
    fn new(kind: NodeKind) -> Self {
        Node {
            kind,
            nullable: false,
            name: None,
            label: None,
            doc: None,
            explicit: ExplicitNames::default(),
            extension: None,
            names: ArrayNames::default(),
        }
    }
}
