use serde_json::{json, Value};

use crate::{Dtype, DtypeKind, FormatError, Primitive, RawWindow, StreamFormat, TypeStr};

/// One typed vector of values, in native byte order: a structured field's values in stream
/// order ([`ColumnsFormat`]), or the values of one named array (the object-array mapping's
/// arrays in `guideloom-oamap`).
///
/// One variant per numpy scalar type; byte order matters only on the way in and out of
/// bytes, so it is not part of the value. [`ColumnsFormat`] stores the variants that have a
/// [`Primitive`] ([`Column::primitive`]); complex values and byte strings are array values
/// only.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Column {
    /// `|b1` values.
    Bool(Vec<bool>),
    /// `|u1` values.
    U8(Vec<u8>),
    /// `|i1` values.
    I8(Vec<i8>),
    /// `<u2` values.
    U16(Vec<u16>),
    /// `<i2` values.
    I16(Vec<i16>),
    /// `<u4` values.
    U32(Vec<u32>),
    /// `<i4` values.
    I32(Vec<i32>),
    /// `<u8` values.
    U64(Vec<u64>),
    /// `<i8` values.
    I64(Vec<i64>),
    /// `<f2` values as raw IEEE half-precision bits.
    F16(Vec<u16>),
    /// `<f4` values.
    F32(Vec<f32>),
    /// `<f8` values.
    F64(Vec<f64>),
    /// `<c8` (complex64) values as `[re, im]` pairs.
    C64(Vec<[f32; 2]>),
    /// `<c16` (complex128) values as `[re, im]` pairs.
    C128(Vec<[f64; 2]>),
    /// `|S<width>` fixed-width byte strings, back to back, each NUL-padded to `width` bytes:
    /// `data.len()` is a multiple of `width` (a `width` of 0 holds no value).
    Bytes {
        /// Bytes per value.
        width: usize,
        /// All values back to back.
        data: Vec<u8>,
    },
}

macro_rules! for_each_column {
    ($m:ident) => {
        $m!(Bool, bool, 1);
        $m!(U8, u8, 1);
        $m!(I8, i8, 1);
        $m!(U16, u16, 2);
        $m!(I16, i16, 2);
        $m!(U32, u32, 4);
        $m!(I32, i32, 4);
        $m!(U64, u64, 8);
        $m!(I64, i64, 8);
        $m!(F16, u16, 2);
        $m!(F32, f32, 4);
        $m!(F64, f64, 8);
    };
}

impl Column {
    /// An empty column for values of type `t` (`<f2` gives [`Column::F16`]; a byte string
    /// type gives [`Column::Bytes`] of its width).
    pub fn empty(t: TypeStr) -> Column {
        match (t.kind(), t.size()) {
            (DtypeKind::Bool, _) => Column::Bool(Vec::new()),
            (DtypeKind::Int, 1) => Column::I8(Vec::new()),
            (DtypeKind::Int, 2) => Column::I16(Vec::new()),
            (DtypeKind::Int, 4) => Column::I32(Vec::new()),
            (DtypeKind::Int, _) => Column::I64(Vec::new()),
            (DtypeKind::UInt, 1) => Column::U8(Vec::new()),
            (DtypeKind::UInt, 2) => Column::U16(Vec::new()),
            (DtypeKind::UInt, 4) => Column::U32(Vec::new()),
            (DtypeKind::UInt, _) => Column::U64(Vec::new()),
            (DtypeKind::Float, 2) => Column::F16(Vec::new()),
            (DtypeKind::Float, 4) => Column::F32(Vec::new()),
            (DtypeKind::Float, _) => Column::F64(Vec::new()),
            (DtypeKind::Complex, 8) => Column::C64(Vec::new()),
            (DtypeKind::Complex, _) => Column::C128(Vec::new()),
            // A width that does not fit in memory cannot hold a value either.
            (DtypeKind::Bytes, w) => {
                Column::Bytes { width: usize::try_from(w).unwrap_or(usize::MAX), data: Vec::new() }
            }
        }
    }

    /// The primitive type of the column's values; `None` for complex values and byte
    /// strings, which [`ColumnsFormat`] does not store.
    pub fn primitive(&self) -> Option<Primitive> {
        Some(match self {
            Column::Bool(_) => Primitive::Bool,
            Column::U8(_) => Primitive::U8,
            Column::I8(_) => Primitive::I8,
            Column::U16(_) => Primitive::U16,
            Column::I16(_) => Primitive::I16,
            Column::U32(_) => Primitive::U32,
            Column::I32(_) => Primitive::I32,
            Column::U64(_) => Primitive::U64,
            Column::I64(_) => Primitive::I64,
            Column::F16(_) => Primitive::F16,
            Column::F32(_) => Primitive::F32,
            Column::F64(_) => Primitive::F64,
            Column::C64(_) | Column::C128(_) | Column::Bytes { .. } => return None,
        })
    }

    /// numpy's little-endian type string of the values (`<u4`, `<c8`, `|S4` ...).
    pub fn descr(&self) -> String {
        match self {
            Column::C64(_) => "<c8".into(),
            Column::C128(_) => "<c16".into(),
            Column::Bytes { width, .. } => format!("|S{width}"),
            other => other.primitive().map_or_else(String::new, |p| p.descr().into()),
        }
    }

    /// Number of values.
    pub fn len(&self) -> u64 {
        let n = match self {
            Column::Bool(v) => v.len(),
            Column::U8(v) => v.len(),
            Column::I8(v) => v.len(),
            Column::U16(v) | Column::F16(v) => v.len(),
            Column::I16(v) => v.len(),
            Column::U32(v) => v.len(),
            Column::I32(v) => v.len(),
            Column::U64(v) => v.len(),
            Column::I64(v) => v.len(),
            Column::F32(v) => v.len(),
            Column::F64(v) => v.len(),
            Column::C64(v) => v.len(),
            Column::C128(v) => v.len(),
            Column::Bytes { width, data } => data.len().checked_div(*width).unwrap_or(0),
        };
        n as u64
    }

    /// Whether the column has no value.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes every value, keeping the type (and a byte string's width) and the capacity.
    pub fn clear(&mut self) {
        match self {
            Column::Bool(v) => v.clear(),
            Column::U8(v) => v.clear(),
            Column::I8(v) => v.clear(),
            Column::U16(v) | Column::F16(v) => v.clear(),
            Column::I16(v) => v.clear(),
            Column::U32(v) => v.clear(),
            Column::I32(v) => v.clear(),
            Column::U64(v) => v.clear(),
            Column::I64(v) => v.clear(),
            Column::F32(v) => v.clear(),
            Column::F64(v) => v.clear(),
            Column::C64(v) => v.clear(),
            Column::C128(v) => v.clear(),
            Column::Bytes { data, .. } => data.clear(),
        }
    }

    /// Writes value `i` little-endian into `dst` (`dst.len()` = the primitive's size).
    fn write_le(&self, i: usize, dst: &mut [u8]) {
        macro_rules! arm {
            ($v:ident, bool, $n:expr) => {
                if let Column::$v(c) = self {
                    dst[0] = u8::from(c[i]);
                    return;
                }
            };
            ($v:ident, $t:ty, $n:expr) => {
                if let Column::$v(c) = self {
                    dst.copy_from_slice(&c[i].to_le_bytes());
                    return;
                }
            };
        }
        for_each_column!(arm);
    }

    /// Reads the field at byte `offset` of every `itemsize`-byte element of `bytes`.
    fn gather(p: Primitive, bytes: &[u8], itemsize: usize, offset: usize) -> Column {
        let n = bytes.len().checked_div(itemsize).unwrap_or(0);
        macro_rules! arm {
            ($v:ident, bool, $n:expr) => {
                if p == Primitive::$v {
                    return Column::$v((0..n).map(|i| bytes[i * itemsize + offset] != 0).collect());
                }
            };
            ($v:ident, $t:ty, $n:expr) => {
                if p == Primitive::$v {
                    return Column::$v(
                        (0..n)
                            .map(|i| {
                                let s = i * itemsize + offset;
                                let mut b = [0u8; $n];
                                b.copy_from_slice(&bytes[s..s + $n]);
                                <$t>::from_le_bytes(b)
                            })
                            .collect(),
                    );
                }
            };
        }
        for_each_column!(arm);
        unreachable!("every Primitive has a Column variant")
    }
}

/// Named, equal-length columns: the input and output of [`ColumnsFormat`].
///
/// Columns keep insertion order; names are unique.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Columns {
    columns: Vec<(String, Column)>,
}

impl Columns {
    /// No columns.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) the column `name`; returns `self` for chaining.
    pub fn with(mut self, name: impl Into<String>, column: Column) -> Self {
        self.insert(name, column);
        self
    }

    /// Adds (or replaces) the column `name`.
    pub fn insert(&mut self, name: impl Into<String>, column: Column) {
        let name = name.into();
        match self.columns.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = column,
            None => self.columns.push((name, column)),
        }
    }

    /// The column `name`.
    pub fn get(&self, name: &str) -> Option<&Column> {
        self.columns.iter().find(|(n, _)| n == name).map(|(_, c)| c)
    }

    /// Column names in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.columns.iter().map(|(n, _)| n.as_str())
    }

    /// Number of columns.
    pub fn len(&self) -> usize {
        self.columns.len()
    }

    /// Whether there is no column.
    pub fn is_empty(&self) -> bool {
        self.columns.is_empty()
    }
}

/// Named equal-length columns stored as one structured element per position (numpy's
/// structured arrays; the analogue of a `StreamNumpyFormat`).
///
/// `pack` takes [`Columns`] whose names and types are exactly the dtype's fields;
/// `unpack` returns one contiguous typed [`Column`] per field for the window, in the dtype's
/// field order (the shard segmentation is ignored). Manifest name: `"columns"`.
///
/// ```
/// use guideloom_formats::{Column, Columns, ColumnsFormat, Dtype, Primitive, StreamFormat, RawWindow};
/// let dtype = Dtype::structured([("tokens", Primitive::U32), ("loss_mask", Primitive::U8)])?;
/// let format = ColumnsFormat::new(dtype)?;
/// let record = Columns::new()
///     .with("tokens", Column::U32(vec![7, 8]))
///     .with("loss_mask", Column::U8(vec![1, 0]));
/// let mut bytes = Vec::new();
/// format.pack(&record, &mut bytes)?;
/// assert_eq!(bytes, [7, 0, 0, 0, 1, 8, 0, 0, 0, 0]);
/// let out = format.unpack(&RawWindow::new(&bytes, 5, &[2], &[0])?)?;
/// assert_eq!(out, record);
/// # Ok::<(), guideloom_formats::FormatError>(())
/// ```
#[derive(Debug, Clone)]
pub struct ColumnsFormat {
    dtype: Dtype,
}

impl ColumnsFormat {
    /// A format for a structured dtype.
    ///
    /// # Errors
    /// [`FormatError::InvalidDtype`] when `dtype` is not structured.
    pub fn new(dtype: Dtype) -> Result<Self, FormatError> {
        if dtype.fields().is_empty() {
            return Err(FormatError::InvalidDtype(format!(
                "the columns format needs a structured dtype, got {dtype}"
            )));
        }
        Ok(ColumnsFormat { dtype })
    }

    fn field_names(&self) -> Vec<String> {
        self.dtype.fields().iter().map(|f| f.name.clone()).collect()
    }
}

impl StreamFormat for ColumnsFormat {
    type Input = Columns;
    type Output = Columns;

    fn name(&self) -> &str {
        "columns"
    }

    fn params(&self) -> Value {
        json!({})
    }

    fn dtype(&self) -> Dtype {
        self.dtype.clone()
    }

    fn pack(&self, record: &Columns, out: &mut Vec<u8>) -> Result<u64, FormatError> {
        let fields = self.dtype.fields();
        for name in record.names() {
            if self.dtype.field(name).is_none() {
                return Err(FormatError::UnknownField { field: name.into(), expected: self.field_names() });
            }
        }
        let mut len = None;
        let mut cols = Vec::with_capacity(fields.len());
        for f in fields {
            let col = record.get(&f.name).ok_or_else(|| FormatError::MissingField {
                field: f.name.clone(),
                expected: self.field_names(),
            })?;
            if col.primitive() != Some(f.primitive) {
                return Err(FormatError::FieldTypeMismatch {
                    field: f.name.clone(),
                    expected: f.primitive.descr().into(),
                    found: col.descr(),
                });
            }
            match len {
                None => len = Some((f.name.clone(), col.len())),
                Some((ref first, n)) if n != col.len() => {
                    return Err(FormatError::UnequalLengths {
                        first: first.clone(),
                        field: f.name.clone(),
                        expected: n,
                        found: col.len(),
                    })
                }
                Some(_) => {}
            }
            cols.push((f, col));
        }
        let n = len.map_or(0, |(_, n)| n) as usize;
        let itemsize = self.dtype.itemsize() as usize;
        let start = out.len();
        out.resize(start + n * itemsize, 0);
        for i in 0..n {
            let elem = &mut out[start + i * itemsize..start + (i + 1) * itemsize];
            for (f, col) in &cols {
                let o = f.offset as usize;
                col.write_le(i, &mut elem[o..o + f.primitive.size() as usize]);
            }
        }
        Ok(n as u64)
    }

    fn unpack(&self, window: &RawWindow<'_>) -> Result<Columns, FormatError> {
        if window.itemsize() != self.dtype.itemsize() {
            return Err(FormatError::BadWindow(format!(
                "window of {}-byte elements for a dtype of {} bytes",
                window.itemsize(),
                self.dtype.itemsize()
            )));
        }
        let mut out = Columns::new();
        for f in self.dtype.fields() {
            let col =
                Column::gather(f.primitive, window.bytes(), window.itemsize() as usize, f.offset as usize);
            out.columns.push((f.name.clone(), col));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fmt() -> ColumnsFormat {
        ColumnsFormat::new(
            Dtype::structured([("tokens", Primitive::U32), ("loss_mask", Primitive::U8)]).unwrap(),
        )
        .unwrap()
    }

    #[test]
    fn errors_name_the_field() {
        let f = fmt();
        let mut out = Vec::new();
        let missing = Columns::new().with("tokens", Column::U32(vec![1]));
        assert!(
            matches!(f.pack(&missing, &mut out), Err(FormatError::MissingField { field, .. }) if field == "loss_mask")
        );
        let wrong =
            Columns::new().with("tokens", Column::U16(vec![1])).with("loss_mask", Column::U8(vec![1]));
        assert!(
            matches!(f.pack(&wrong, &mut out), Err(FormatError::FieldTypeMismatch { field, .. }) if field == "tokens")
        );
        let unequal =
            Columns::new().with("tokens", Column::U32(vec![1, 2])).with("loss_mask", Column::U8(vec![1]));
        assert!(matches!(
            f.pack(&unequal, &mut out),
            Err(FormatError::UnequalLengths { expected: 2, found: 1, .. })
        ));
        let extra = Columns::new()
            .with("tokens", Column::U32(vec![1]))
            .with("loss_mask", Column::U8(vec![1]))
            .with("x", Column::U8(vec![1]));
        assert!(
            matches!(f.pack(&extra, &mut out), Err(FormatError::UnknownField { field, .. }) if field == "x")
        );
        assert!(matches!(
            ColumnsFormat::new(Dtype::Primitive(Primitive::U8)),
            Err(FormatError::InvalidDtype(ref r)) if r.starts_with("the columns format needs a structured dtype, got ")
        ));
    }

    #[test]
    fn array_only_columns_are_refused_by_type_and_sized_by_width() {
        let f = fmt();
        let mut out = Vec::new();
        for (col, found) in [
            (Column::C64(vec![[1.0, 2.0]]), "<c8"),
            (Column::C128(vec![[1.0, 2.0]]), "<c16"),
            (Column::Bytes { width: 4, data: b"abcd".to_vec() }, "|S4"),
        ] {
            assert_eq!(col.primitive(), None);
            assert_eq!(col.len(), 1);
            let rec = Columns::new().with("tokens", col).with("loss_mask", Column::U8(vec![1]));
            match f.pack(&rec, &mut out) {
                Err(FormatError::FieldTypeMismatch { field, expected, found: got }) => {
                    assert_eq!((field.as_str(), expected.as_str(), got.as_str()), ("tokens", "<u4", found));
                }
                other => panic!("{other:?}"),
            }
        }
        assert!(out.is_empty());
        let mut bytes = Column::Bytes { width: 3, data: b"abcdef".to_vec() };
        assert_eq!(bytes.len(), 2);
        bytes.clear();
        assert_eq!(bytes, Column::Bytes { width: 3, data: Vec::new() });
        assert_eq!(Column::Bytes { width: 0, data: vec![1] }.len(), 0);
        for (t, empty) in [
            ("<f2", Column::F16(vec![])),
            (">i8", Column::I64(vec![])),
            ("|S5", Column::Bytes { width: 5, data: vec![] }),
            ("<c16", Column::C128(vec![])),
            ("?", Column::Bool(vec![])),
        ] {
            assert_eq!(Column::empty(TypeStr::parse(t).unwrap()), empty, "{t}");
        }
        for p in Primitive::ALL {
            let c = Column::empty(p.type_str());
            assert_eq!((c.primitive(), c.descr()), (Some(p), p.descr().to_string()));
        }
    }

    #[test]
    fn every_primitive_round_trips() {
        let cols = Columns::new()
            .with("a", Column::Bool(vec![true, false]))
            .with("b", Column::I8(vec![-1, 2]))
            .with("c", Column::I16(vec![-300, 300]))
            .with("d", Column::I32(vec![-70_000, 1]))
            .with("e", Column::U64(vec![u64::MAX, 0]))
            .with("f", Column::I64(vec![i64::MIN, 5]))
            .with("g", Column::F16(vec![0x3c00, 0]))
            .with("h", Column::F32(vec![1.5, -0.25]))
            .with("i", Column::F64(vec![1e300, -2.0]))
            .with("j", Column::U16(vec![1, 2]));
        let dtype =
            Dtype::structured(cols.columns.iter().map(|(n, c)| (n.clone(), c.primitive().unwrap()))).unwrap();
        let f = ColumnsFormat::new(dtype.clone()).unwrap();
        let mut out = Vec::new();
        assert_eq!(f.pack(&cols, &mut out).unwrap(), 2);
        assert_eq!(out.len() as u64, 2 * dtype.itemsize());
        let w = RawWindow::new(&out, dtype.itemsize(), &[2], &[3]).unwrap();
        assert_eq!(f.unpack(&w).unwrap(), cols);
    }
}
