use serde_json::{json, Value};

use crate::{Dtype, FormatError, Primitive, RawWindow, StreamFormat};

/// One typed column of values (a structured field's values, in stream order).
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
    /// The primitive type of the column's values.
    pub fn primitive(&self) -> Primitive {
        macro_rules! arm {
            ($v:ident, $t:ty, $n:expr) => {
                if let Column::$v(_) = self {
                    return Primitive::$v;
                }
            };
        }
        for_each_column!(arm);
        unreachable!("every Column variant is listed in for_each_column")
    }

    /// Number of values.
    pub fn len(&self) -> u64 {
        macro_rules! arm {
            ($v:ident, $t:ty, $n:expr) => {
                if let Column::$v(c) = self {
                    return c.len() as u64;
                }
            };
        }
        for_each_column!(arm);
        unreachable!("every Column variant is listed in for_each_column")
    }

    /// Whether the column has no value.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
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
            if col.primitive() != f.primitive {
                return Err(FormatError::FieldTypeMismatch {
                    field: f.name.clone(),
                    expected: f.primitive.descr().into(),
                    found: col.primitive().descr().into(),
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
        assert!(ColumnsFormat::new(Dtype::Primitive(Primitive::U8)).is_err());
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
        let dtype = Dtype::structured(cols.columns.iter().map(|(n, c)| (n.clone(), c.primitive()))).unwrap();
        let f = ColumnsFormat::new(dtype.clone()).unwrap();
        let mut out = Vec::new();
        assert_eq!(f.pack(&cols, &mut out).unwrap(), 2);
        assert_eq!(out.len() as u64, 2 * dtype.itemsize());
        let w = RawWindow::new(&out, dtype.itemsize(), &[2], &[3]).unwrap();
        assert_eq!(f.unpack(&w).unwrap(), cols);
    }
}
