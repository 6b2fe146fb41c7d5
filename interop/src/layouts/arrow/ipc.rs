//! One Arrow IPC stream file (Arrow columnar format, `format/Message.fbs` and `Schema.fbs`):
//! encapsulated messages (`0xFFFFFFFF`, i32 metadata length, a `Message` flatbuffer, its
//! body), the first the `Schema`, then record batches, then the end-of-stream marker.
//!
//! Each message header is checked against the file's size before it is read, verified as a
//! flatbuffer by arrow-ipc ([`arrow_ipc::root_as_message`]) and the schema converted by
//! [`arrow_ipc::convert::try_fb_to_schema`] (a panic there becomes an error naming the file).
//! Of each record batch only the token column's buffers are looked at: its validity bitmaps
//! (when it declares nulls) and its list offsets are read and checked; its values buffer is
//! where the batch's tokens lie in the file, read in place by the stream reader (no decode).

use std::panic::{catch_unwind, AssertUnwindSafe};

use arrow_ipc::{MessageHeader, MetadataVersion};
use arrow_schema::{DataType, Field, Schema};
use guideloom_formats::Primitive;

use crate::error::{ForeignError, Result};
use crate::files::{i32_at, i64_at, u32_at, Fs};

/// The continuation marker before each message's length (IPC format ≥ 0.15).
const CONTINUATION: u32 = 0xFFFF_FFFF;

/// What one stream file holds: the token column's dtype and type, its runs of tokens and the
/// end of each row.
#[derive(Debug)]
pub(crate) struct IpcFile {
    /// The token dtype.
    pub(crate) dtype: Primitive,
    /// The token column's type as pyarrow names it.
    pub(crate) column_type: String,
    /// xxh3 of the schema message's flatbuffer.
    pub(crate) schema_hash: u64,
    /// Per record batch: where its tokens start in the file and how many there are.
    pub(crate) runs: Vec<Run>,
    /// Per row: its end, in tokens from the file's first token.
    pub(crate) ends: Vec<u64>,
}

/// The tokens of one record batch: contiguous little-endian values in the file.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Run {
    /// The first token's byte.
    pub(crate) offset: u64,
    /// Tokens.
    pub(crate) elements: u64,
}

/// How the token column stores its lists.
#[derive(Debug, Clone, Copy)]
enum ListKind {
    /// i32 offsets.
    List,
    /// i64 offsets.
    Large,
    /// A fixed number of values per row.
    Fixed(u64),
}

/// The token column found in the schema: its kind, dtype and where its nodes and buffers are.
#[derive(Debug)]
struct TokenColumn {
    kind: ListKind,
    dtype: Primitive,
    /// Index of the list's node in a batch's nodes.
    node: usize,
    /// Index of the list's first buffer (its validity) in a batch's buffers.
    buffer: usize,
    /// The Utf8View/BinaryView columns before it (each takes a variadic buffer count).
    views_before: usize,
}

/// Reads the stream file `name` (`size` bytes) and finds the token column `column`.
///
/// # Errors
/// [`ForeignError::MessageOutOfRange`], [`ForeignError::MessageDecode`],
/// [`ForeignError::UnsupportedVersion`], [`ForeignError::TruncatedStream`],
/// [`ForeignError::TrailingBytes`] for the stream's framing; [`ForeignError::ColumnNotFound`],
/// [`ForeignError::UnsupportedTokenType`] for the schema;
/// [`ForeignError::UnsupportedCompression`], [`ForeignError::BufferOutOfRange`],
/// [`ForeignError::InvalidOffsets`], [`ForeignError::ListOffsetOutOfRange`],
/// [`ForeignError::NullTokens`] for a record batch; read errors.
pub(crate) fn scan(fs: &Fs, name: &str, size: u64, column: &str) -> Result<IpcFile> {
    let err = |x: ForeignError| fs.err(name, x);
    let mut pos = 0u64;
    let mut message = 0u64;
    let mut token: Option<TokenColumn> = None;
    let mut out = IpcFile {
        dtype: Primitive::I32,
        column_type: String::new(),
        schema_hash: 0,
        runs: Vec::new(),
        ends: Vec::new(),
    };
    let mut batch = 0u64;
    let mut row_base = 0u64;
    while pos < size {
        if size - pos < 8 {
            return Err(err(ForeignError::MessageOutOfRange {
                message,
                offset: pos,
                metadata: 0,
                file: size,
            }));
        }
        let prefix = fs.read(name, pos, 8)?;
        if u32_at(&prefix, 0) != CONTINUATION {
            return Err(err(ForeignError::MessageDecode {
                message,
                offset: pos,
                reason: format!(
                    "no continuation marker (found {:08x}; pre-0.15 streams are not read)",
                    u32_at(&prefix, 0)
                ),
            }));
        }
        let meta_len = i32_at(&prefix, 4);
        if meta_len == 0 {
            // End of stream.
            let rest = size - pos - 8;
            if rest > 0 {
                return Err(err(ForeignError::TrailingBytes { count: rest }));
            }
            break;
        }
        let meta_end = (pos + 8).checked_add(u64::try_from(meta_len).unwrap_or(u64::MAX));
        if meta_len < 0 || meta_end.is_none_or(|e| e > size) {
            return Err(err(ForeignError::MessageOutOfRange {
                message,
                offset: pos,
                metadata: i64::from(meta_len),
                file: size,
            }));
        }
        let meta = fs.read(name, pos + 8, meta_len as u64)?;
        let decode = |reason: String| err(ForeignError::MessageDecode { message, offset: pos, reason });
        let msg = arrow_ipc::root_as_message(&meta).map_err(|e| decode(format!("flatbuffer: {e}")))?;
        let version = msg.version();
        if version != MetadataVersion::V4 && version != MetadataVersion::V5 {
            return Err(err(ForeignError::UnsupportedVersion {
                field: "MetadataVersion",
                found: i64::from(version.0),
            }));
        }
        let body_len = msg.bodyLength();
        let body_start = pos + 8 + meta_len as u64;
        let present = size - body_start;
        let body_end = u64::try_from(body_len).ok().and_then(|b| body_start.checked_add(b));
        let Some(body_end) = body_end.filter(|&e| e <= size) else {
            if msg.header_type() == MessageHeader::RecordBatch {
                return Err(err(ForeignError::TruncatedStream {
                    batch,
                    need: u64::try_from(body_len).unwrap_or(u64::MAX),
                    offset: body_start,
                    present,
                }));
            }
            return Err(decode(format!("body of {body_len} bytes, {present} present")));
        };
        match msg.header_type() {
            MessageHeader::Schema if token.is_none() => {
                let fb = msg.header_as_schema().ok_or_else(|| decode("no schema".into()))?;
                let schema = catch_unwind(AssertUnwindSafe(|| arrow_ipc::convert::try_fb_to_schema(fb)))
                    .map_err(|_| decode("the schema does not convert (arrow-ipc panicked)".into()))?
                    .map_err(|e| decode(format!("schema: {e}")))?;
                let t = find_column(&schema, column).map_err(err)?;
                out.dtype = t.dtype;
                out.column_type = type_name(schema.field(t_index(&schema, column)).data_type());
                out.schema_hash = xxhash_rust::xxh3::xxh3_64(&meta);
                token = Some(t);
            }
            MessageHeader::Schema => return Err(decode("a second schema".into())),
            MessageHeader::RecordBatch => {
                let t = token.as_ref().ok_or_else(|| decode("a record batch before the schema".into()))?;
                let rb = msg.header_as_record_batch().ok_or_else(|| decode("no record batch".into()))?;
                let b = Batch { fs, name, index: batch, body: body_start, body_len: body_end - body_start };
                let (run, ends) = b.tokens(t, &rb, column, row_base)?;
                row_base += ends.len() as u64;
                let base = out.ends.last().copied().unwrap_or(0);
                out.ends.extend(ends.into_iter().map(|e| base + e));
                out.runs.push(run);
                batch += 1;
            }
            // Dictionaries of other columns (the token column is never dictionary-encoded).
            MessageHeader::DictionaryBatch if token.is_some() => {}
            other => return Err(decode(format!("unexpected message {other:?}"))),
        }
        pos = body_end;
        message += 1;
    }
    if token.is_none() {
        return Err(err(ForeignError::MessageDecode {
            message: 0,
            offset: 0,
            reason: "no schema message (an empty file)".into(),
        }));
    }
    Ok(out)
}

/// The position of `column` in `schema` (the caller found it).
fn t_index(schema: &Schema, column: &str) -> usize {
    schema.fields().iter().position(|f| f.name() == column).unwrap_or(0)
}

/// Finds the token column and where its nodes and buffers sit among a batch's.
fn find_column(schema: &Schema, column: &str) -> std::result::Result<TokenColumn, ForeignError> {
    let Some(at) = schema.fields().iter().position(|f| f.name() == column) else {
        return Err(ForeignError::ColumnNotFound {
            column: column.to_string(),
            have: schema.fields().iter().map(|f| f.name().clone()).collect(),
        });
    };
    let (mut node, mut buffer, mut views_before) = (0usize, 0usize, 0usize);
    for f in &schema.fields()[..at] {
        let (n, b, v) = counts(f.data_type()).ok_or_else(|| ForeignError::UnsupportedTokenType {
            found: format!("column {} before {column} is of type {}", f.name(), type_name(f.data_type())),
        })?;
        node += n;
        buffer += b;
        views_before += v;
    }
    let unsupported =
        || ForeignError::UnsupportedTokenType { found: type_name(schema.field(at).data_type()) };
    let (kind, child) = match schema.field(at).data_type() {
        DataType::List(c) => (ListKind::List, c),
        DataType::LargeList(c) => (ListKind::Large, c),
        DataType::FixedSizeList(c, n) if *n > 0 => (ListKind::Fixed(*n as u64), c),
        _ => return Err(unsupported()),
    };
    let dtype = int_dtype(child).ok_or_else(unsupported)?;
    Ok(TokenColumn { kind, dtype, node, buffer, views_before })
}

/// The guideloom dtype of an integer child field.
fn int_dtype(child: &Field) -> Option<Primitive> {
    Some(match child.data_type() {
        DataType::Int8 => Primitive::I8,
        DataType::Int16 => Primitive::I16,
        DataType::Int32 => Primitive::I32,
        DataType::Int64 => Primitive::I64,
        DataType::UInt8 => Primitive::U8,
        DataType::UInt16 => Primitive::U16,
        DataType::UInt32 => Primitive::U32,
        DataType::UInt64 => Primitive::U64,
        _ => return None,
    })
}

/// The nodes, buffers and view columns (with a variadic buffer count) a field of type `t`
/// takes in a record batch (Arrow columnar format, "Buffer layout"); `None` for types this
/// reader does not step over.
fn counts(t: &DataType) -> Option<(usize, usize, usize)> {
    use DataType::*;
    let children = |fields: &mut dyn Iterator<Item = &DataType>| -> Option<(usize, usize, usize)> {
        let mut s = (0, 0, 0);
        for f in fields {
            let c = counts(f)?;
            s = (s.0 + c.0, s.1 + c.1, s.2 + c.2);
        }
        Some(s)
    };
    let (own_buffers, kids, views) = match t {
        Null => (0, (0, 0, 0), 0),
        Boolean | Int8 | Int16 | Int32 | Int64 | UInt8 | UInt16 | UInt32 | UInt64 | Float16 | Float32
        | Float64 | Timestamp(..) | Date32 | Date64 | Time32(_) | Time64(_) | Duration(_) | Interval(_)
        | FixedSizeBinary(_) | Decimal32(..) | Decimal64(..) | Decimal128(..) | Decimal256(..) => {
            (2, (0, 0, 0), 0)
        }
        Utf8 | LargeUtf8 | Binary | LargeBinary => (3, (0, 0, 0), 0),
        Utf8View | BinaryView => (2, (0, 0, 0), 1),
        List(c) | LargeList(c) | Map(c, _) => (2, counts(c.data_type())?, 0),
        FixedSizeList(c, _) => (1, counts(c.data_type())?, 0),
        Struct(fields) => (1, children(&mut fields.iter().map(|f| f.data_type()))?, 0),
        Dictionary(k, _) => (counts(k)?.1, (0, 0, 0), 0),
        _ => return None,
    };
    Some((1 + kids.0, own_buffers + kids.1, views + kids.2))
}

/// A type as pyarrow prints it (`list<int32>`, `large_list<uint16>`, `list<float>`,
/// `string`), for messages.
pub(crate) fn type_name(t: &DataType) -> String {
    use DataType::*;
    match t {
        Int8 => "int8".into(),
        Int16 => "int16".into(),
        Int32 => "int32".into(),
        Int64 => "int64".into(),
        UInt8 => "uint8".into(),
        UInt16 => "uint16".into(),
        UInt32 => "uint32".into(),
        UInt64 => "uint64".into(),
        Float16 => "halffloat".into(),
        Float32 => "float".into(),
        Float64 => "double".into(),
        Boolean => "bool".into(),
        Utf8 => "string".into(),
        LargeUtf8 => "large_string".into(),
        Binary => "binary".into(),
        LargeBinary => "large_binary".into(),
        List(c) => format!("list<{}>", type_name(c.data_type())),
        LargeList(c) => format!("large_list<{}>", type_name(c.data_type())),
        FixedSizeList(c, n) => format!("fixed_size_list<{}>[{n}]", type_name(c.data_type())),
        Struct(fields) => format!(
            "struct<{}>",
            fields
                .iter()
                .map(|f| format!("{}: {}", f.name(), type_name(f.data_type())))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Dictionary(k, v) => format!("dictionary<values={}, indices={}>", type_name(v), type_name(k)),
        other => other.to_string().to_ascii_lowercase(),
    }
}

/// One record batch's body in the file.
struct Batch<'a> {
    fs: &'a Fs,
    name: &'a str,
    index: u64,
    body: u64,
    body_len: u64,
}

impl Batch<'_> {
    /// The token run of this batch and the end of each of its rows (tokens from the run's
    /// start), every buffer checked against the body and the offsets against the values.
    fn tokens(
        &self,
        t: &TokenColumn,
        rb: &arrow_ipc::RecordBatch<'_>,
        column: &str,
        row_base: u64,
    ) -> Result<(Run, Vec<u64>)> {
        let err = |x: ForeignError| self.fs.err(self.name, x);
        if let Some(c) = rb.compression() {
            return Err(err(ForeignError::UnsupportedCompression {
                compression: format!("Arrow IPC body {:?}", c.codec()),
            }));
        }
        if t.views_before > 0 && rb.variadicBufferCounts().is_some_and(|v| !v.is_empty()) {
            // Variadic buffers of view columns before the token column shift its buffers.
            return Err(err(ForeignError::UnsupportedTokenType {
                found: "a string/binary view column before the token column".into(),
            }));
        }
        let nodes = rb.nodes().ok_or_else(|| self.layout("no field nodes".into()))?;
        let buffers = rb.buffers().ok_or_else(|| self.layout("no buffers".into()))?;
        let need_buffers = t.buffer + if matches!(t.kind, ListKind::Fixed(_)) { 3 } else { 4 };
        if nodes.len() < t.node + 2 || buffers.len() < need_buffers {
            return Err(self.layout(format!(
                "{} nodes and {} buffers, the schema needs at least {} and {need_buffers}",
                nodes.len(),
                buffers.len(),
                t.node + 2
            )));
        }
        let rows = rb.length();
        let list = nodes.get(t.node);
        let child = nodes.get(t.node + 1);
        if list.length() != rows || rows < 0 || child.length() < 0 {
            return Err(self.layout(format!("the token column has {} rows, the batch {rows}", list.length())));
        }
        let rows = rows as u64;
        let child_len = child.length() as u64;
        // Buffer index -> (absolute offset, length), checked against the body.
        let buffer = |k: usize| -> Result<(u64, u64)> {
            let b = buffers.get(k);
            let (o, l) = (b.offset(), b.length());
            match (u64::try_from(o), u64::try_from(l)) {
                (Ok(o), Ok(l)) if o.checked_add(l).is_some_and(|e| e <= self.body_len) => {
                    Ok((self.body + o, l))
                }
                _ => Err(err(ForeignError::BufferOutOfRange {
                    batch: self.index,
                    buffer: k as u64,
                    reason: format!("offset {o} length {l} outside a body of {} bytes", self.body_len),
                })),
            }
        };
        let size = t.dtype.size();
        let (validity, child_validity, values) = match t.kind {
            ListKind::Fixed(_) => (t.buffer, t.buffer + 1, t.buffer + 2),
            _ => (t.buffer, t.buffer + 2, t.buffer + 3),
        };
        let (values_at, values_len) = buffer(values)?;
        if child_len.checked_mul(size).is_none_or(|n| n > values_len) {
            return Err(err(ForeignError::BufferOutOfRange {
                batch: self.index,
                buffer: values as u64,
                reason: format!("{child_len} values of {size} bytes in {values_len} bytes"),
            }));
        }
        let offsets: Vec<i64> = match t.kind {
            ListKind::Fixed(n) => {
                let total = rows.checked_mul(n);
                if total.is_none_or(|v| v > child_len) {
                    return Err(self.layout(format!("{rows} rows of {n} values, {child_len} values")));
                }
                (0..=rows).map(|r| (r * n) as i64).collect()
            }
            ListKind::List | ListKind::Large => {
                let w: u64 = if matches!(t.kind, ListKind::List) { 4 } else { 8 };
                let (at, len) = buffer(t.buffer + 1)?;
                if rows == 0 {
                    Vec::new()
                } else {
                    let need = (rows + 1) * w;
                    if need > len {
                        return Err(err(ForeignError::BufferOutOfRange {
                            batch: self.index,
                            buffer: (t.buffer + 1) as u64,
                            reason: format!("{} offsets need {need} bytes, the buffer has {len}", rows + 1),
                        }));
                    }
                    let raw = self.fs.read(self.name, at, need)?;
                    (0..=rows as usize)
                        .map(|r| if w == 4 { i64::from(i32_at(&raw, 4 * r)) } else { i64_at(&raw, 8 * r) })
                        .collect()
                }
            }
        };
        if offsets.is_empty() {
            return Ok((Run { offset: values_at, elements: 0 }, Vec::new()));
        }
        if offsets[0] < 0 {
            return Err(err(ForeignError::InvalidOffsets {
                column: column.to_string(),
                row: row_base,
                a: offsets[0],
                b: 0,
            }));
        }
        for r in 0..rows as usize {
            if offsets[r] > offsets[r + 1] {
                return Err(err(ForeignError::InvalidOffsets {
                    column: column.to_string(),
                    row: row_base + r as u64,
                    a: offsets[r],
                    b: offsets[r + 1],
                }));
            }
        }
        let last = offsets[rows as usize];
        if last as u64 > child_len {
            let row = offsets.iter().position(|&o| o as u64 > child_len).unwrap_or(1).saturating_sub(1);
            return Err(err(ForeignError::ListOffsetOutOfRange {
                column: column.to_string(),
                row: row_base + row as u64,
                offset: last,
                values: child_len,
            }));
        }
        // Nulls: a null list, or a null token inside the rows' ranges.
        if list.null_count() != 0 {
            let row = self.first_null(buffer(validity)?, 0, rows)?;
            return Err(err(ForeignError::NullTokens { column: column.to_string(), row: row_base + row }));
        }
        let base = offsets[0] as u64;
        if child.null_count() != 0 {
            let v = self.first_null(buffer(child_validity)?, base, last as u64)?;
            let row = offsets.partition_point(|&o| o as u64 <= base + v).saturating_sub(1) as u64;
            return Err(err(ForeignError::NullTokens { column: column.to_string(), row: row_base + row }));
        }
        let ends = offsets[1..].iter().map(|&o| o as u64 - base).collect();
        Ok((Run { offset: values_at + base * size, elements: last as u64 - base }, ends))
    }

    /// The first unset bit of the validity bitmap `(at, len)` in `[from, to)`, counted from
    /// `from` (`0` when the bitmap is absent or too short: the declared null count is then
    /// reported at the first row).
    fn first_null(&self, (at, len): (u64, u64), from: u64, to: u64) -> Result<u64> {
        let need = to.div_ceil(8);
        if need > len || to <= from {
            return Ok(0);
        }
        let bits = self.fs.read(self.name, at, need)?;
        Ok((from..to).find(|&i| bits[(i / 8) as usize] & (1 << (i % 8)) == 0).map_or(0, |i| i - from))
    }

    /// A record batch that does not match its schema.
    fn layout(&self, reason: String) -> crate::error::InteropError {
        self.fs.err(self.name, ForeignError::BufferOutOfRange { batch: self.index, buffer: 0, reason })
    }
}
