//! One named OAMap array: a dtype and its values, held in native byte order.

use serde_json::Value;

use super::dtype::{Kind, OaDtype};
use super::OamapError;

/// The values of an [`Array`], one vector per primitive type, in native byte order.
///
/// Byte order only matters on the way in and out (`.npy` bytes); the array's [`OaDtype`]
/// remembers it so a big-endian array is written back big-endian under its `DF8`-style name.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ArrayData {
    /// `bool`.
    Bool(Vec<bool>),
    /// `int8`.
    I8(Vec<i8>),
    /// `int16`.
    I16(Vec<i16>),
    /// `int32`.
    I32(Vec<i32>),
    /// `int64`.
    I64(Vec<i64>),
    /// `uint8`.
    U8(Vec<u8>),
    /// `uint16`.
    U16(Vec<u16>),
    /// `uint32`.
    U32(Vec<u32>),
    /// `uint64`.
    U64(Vec<u64>),
    /// `float32`.
    F32(Vec<f32>),
    /// `float64`.
    F64(Vec<f64>),
    /// `complex64` as `[re, im]` pairs.
    C64(Vec<[f32; 2]>),
    /// `complex128` as `[re, im]` pairs.
    C128(Vec<[f64; 2]>),
    /// `S<width>` fixed-width byte strings, concatenated (`data.len() == width * len`).
    Bytes {
        /// Bytes per value (at least 1).
        width: usize,
        /// All values back to back, each NUL-padded to `width`.
        data: Vec<u8>,
    },
}

/// A one-dimensional array of one primitive dtype: what an array source returns for a name.
#[derive(Debug, Clone, PartialEq)]
pub struct Array {
    dtype: OaDtype,
    data: ArrayData,
}

macro_rules! each_numeric {
    ($data:expr, $v:ident => $body:expr, bytes $w:ident, $b:ident => $bytes_body:expr) => {
        match $data {
            ArrayData::Bool($v) => $body,
            ArrayData::I8($v) => $body,
            ArrayData::I16($v) => $body,
            ArrayData::I32($v) => $body,
            ArrayData::I64($v) => $body,
            ArrayData::U8($v) => $body,
            ArrayData::U16($v) => $body,
            ArrayData::U32($v) => $body,
            ArrayData::U64($v) => $body,
            ArrayData::F32($v) => $body,
            ArrayData::F64($v) => $body,
            ArrayData::C64($v) => $body,
            ArrayData::C128($v) => $body,
            ArrayData::Bytes { width: $w, data: $b } => $bytes_body,
        }
    };
}

impl Array {
    /// An empty array of `dtype`.
    pub fn empty(dtype: OaDtype) -> Self {
        let data = match (dtype.kind, dtype.size) {
            (Kind::Bool, _) => ArrayData::Bool(Vec::new()),
            (Kind::Int, 1) => ArrayData::I8(Vec::new()),
            (Kind::Int, 2) => ArrayData::I16(Vec::new()),
            (Kind::Int, 4) => ArrayData::I32(Vec::new()),
            (Kind::Int, _) => ArrayData::I64(Vec::new()),
            (Kind::UInt, 1) => ArrayData::U8(Vec::new()),
            (Kind::UInt, 2) => ArrayData::U16(Vec::new()),
            (Kind::UInt, 4) => ArrayData::U32(Vec::new()),
            (Kind::UInt, _) => ArrayData::U64(Vec::new()),
            (Kind::Float, 4) => ArrayData::F32(Vec::new()),
            (Kind::Float, _) => ArrayData::F64(Vec::new()),
            (Kind::Complex, 8) => ArrayData::C64(Vec::new()),
            (Kind::Complex, _) => ArrayData::C128(Vec::new()),
            (Kind::Bytes, w) => ArrayData::Bytes { width: w.max(1), data: Vec::new() },
        };
        Array { dtype, data }
    }

    /// An `int32` array (starts, stops, masks, offsets, positions).
    pub fn from_i32(values: Vec<i32>) -> Self {
        Array { dtype: OaDtype::INT32, data: ArrayData::I32(values) }
    }

    /// An `int8` array (union tags).
    pub fn from_i8(values: Vec<i8>) -> Self {
        Array { dtype: OaDtype::INT8, data: ArrayData::I8(values) }
    }

    /// Wraps values, checking that they match `dtype`'s kind and size.
    ///
    /// # Errors
    /// [`OamapError::Dtype`] when the vector type differs from the dtype.
    pub fn new(dtype: OaDtype, data: ArrayData) -> Result<Self, OamapError> {
        let probe = Array::empty(dtype);
        let same = std::mem::discriminant(&probe.data) == std::mem::discriminant(&data)
            && match (&probe.data, &data) {
                (ArrayData::Bytes { width: a, .. }, ArrayData::Bytes { width: b, data }) => {
                    a == b && data.len() % b == 0
                }
                _ => true,
            };
        if !same {
            return Err(OamapError::Dtype { dtype: dtype.name(), reason: "values of another type".into() });
        }
        Ok(Array { dtype, data })
    }

    /// The array's dtype.
    pub fn dtype(&self) -> OaDtype {
        self.dtype
    }

    /// The values.
    pub fn data(&self) -> &ArrayData {
        &self.data
    }

    /// Mutable values (for builders inside this crate).
    pub(crate) fn data_mut(&mut self) -> &mut ArrayData {
        &mut self.data
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        each_numeric!(&self.data, v => v.len(), bytes w, b => b.len() / *w)
    }

    /// Whether the array has no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The values as an `i32` slice when the array is `int32` (the structural fast path).
    pub fn as_i32(&self) -> Option<&[i32]> {
        match &self.data {
            ArrayData::I32(v) => Some(v),
            _ => None,
        }
    }

    /// Entry `i` as an integer, for integer and bool arrays; `None` when out of range or
    /// not an integer kind (a `uint64` above `i64::MAX` also gives `None`).
    #[inline]
    pub fn int_at(&self, i: usize) -> Option<i64> {
        match &self.data {
            ArrayData::I32(v) => v.get(i).map(|&x| x as i64),
            ArrayData::I8(v) => v.get(i).map(|&x| x as i64),
            ArrayData::I16(v) => v.get(i).map(|&x| x as i64),
            ArrayData::I64(v) => v.get(i).copied(),
            ArrayData::U8(v) => v.get(i).map(|&x| x as i64),
            ArrayData::U16(v) => v.get(i).map(|&x| x as i64),
            ArrayData::U32(v) => v.get(i).map(|&x| x as i64),
            ArrayData::U64(v) => v.get(i).and_then(|&x| i64::try_from(x).ok()),
            ArrayData::Bool(v) => v.get(i).map(|&x| x as i64),
            _ => None,
        }
    }

    /// Entry `i` converted to `f64` for real numeric kinds (bools as 0/1); `None` when out of
    /// range or complex/bytes.
    #[inline]
    pub fn f64_at(&self, i: usize) -> Option<f64> {
        match &self.data {
            ArrayData::F64(v) => v.get(i).copied(),
            ArrayData::F32(v) => v.get(i).map(|&x| x as f64),
            ArrayData::U64(v) => v.get(i).map(|&x| x as f64),
            ArrayData::C64(_) | ArrayData::C128(_) | ArrayData::Bytes { .. } => None,
            _ => self.int_at(i).map(|x| x as f64),
        }
    }

    /// Whether the array holds integers (or bools) that can serve as structural indices.
    pub fn is_integer(&self) -> bool {
        matches!(self.dtype.kind, Kind::Int | Kind::UInt | Kind::Bool)
    }

    /// Entry `i` as a JSON number the way the golden files list arrays (bools as 0/1,
    /// complex as `[re, im]`, bytes as a list of byte values).
    pub fn json_at(&self, i: usize) -> Option<Value> {
        Some(match &self.data {
            ArrayData::Bool(v) => Value::from(u8::from(*v.get(i)?)),
            ArrayData::I8(v) => Value::from(*v.get(i)?),
            ArrayData::I16(v) => Value::from(*v.get(i)?),
            ArrayData::I32(v) => Value::from(*v.get(i)?),
            ArrayData::I64(v) => Value::from(*v.get(i)?),
            ArrayData::U8(v) => Value::from(*v.get(i)?),
            ArrayData::U16(v) => Value::from(*v.get(i)?),
            ArrayData::U32(v) => Value::from(*v.get(i)?),
            ArrayData::U64(v) => Value::from(*v.get(i)?),
            ArrayData::F32(v) => float_json(f32_to_f64_shortest(*v.get(i)?)),
            ArrayData::F64(v) => float_json(*v.get(i)?),
            ArrayData::C64(v) => {
                let [re, im] = *v.get(i)?;
                Value::Array(vec![float_json(f32_to_f64_shortest(re)), float_json(f32_to_f64_shortest(im))])
            }
            ArrayData::C128(v) => {
                let [re, im] = *v.get(i)?;
                Value::Array(vec![float_json(re), float_json(im)])
            }
            ArrayData::Bytes { width, data } => {
                let chunk = data.get(i * width..(i + 1) * width)?;
                Value::Array(chunk.iter().map(|&b| Value::from(b)).collect())
            }
        })
    }

    /// All entries as JSON numbers (see [`Array::json_at`]).
    pub fn to_json(&self) -> Value {
        Value::Array((0..self.len()).filter_map(|i| self.json_at(i)).collect())
    }

    /// Builds an array of `dtype` from JSON numbers (`true`/`false` accepted for bools and
    /// ints; integers must fit the dtype).
    ///
    /// # Errors
    /// [`OamapError::BadValue`] naming `name` for a value that does not fit.
    pub fn from_json(name: &str, dtype: OaDtype, values: &[Value]) -> Result<Self, OamapError> {
        let mut array = Array::empty(dtype);
        for (i, v) in values.iter().enumerate() {
            array.push_json(v).map_err(|reason| OamapError::BadValue {
                name: name.to_string(),
                index: i as u64,
                reason,
            })?;
        }
        Ok(array)
    }

    /// Appends one JSON value converted to the array's dtype.
    pub(crate) fn push_json(&mut self, v: &Value) -> Result<(), String> {
        fn int<T: TryFrom<i64> + TryFrom<u64>>(v: &Value) -> Result<T, String> {
            let r = match v {
                Value::Bool(b) => T::try_from(i64::from(*b)).ok(),
                Value::Number(n) => {
                    if let Some(i) = n.as_i64() {
                        T::try_from(i).ok()
                    } else if let Some(u) = n.as_u64() {
                        T::try_from(u).ok()
                    } else {
                        None
                    }
                }
                _ => None,
            };
            r.ok_or_else(|| format!("{v} is not an integer in range"))
        }
        fn float(v: &Value) -> Result<f64, String> {
            match v {
                Value::Number(n) => n.as_f64().ok_or_else(|| format!("{v} is not a number")),
                Value::Bool(b) => Ok(f64::from(u8::from(*b))),
                _ => Err(format!("{v} is not a number")),
            }
        }
        // A finite value too large for float32 would become an infinity, which JSON (and so
        // the golden arrays form) cannot carry: refuse it instead of storing a silent null.
        fn f32_of(x: f64, v: &Value) -> Result<f32, String> {
            let y = x as f32;
            if x.is_finite() && !y.is_finite() {
                return Err(format!("{v} is out of range for float32"));
            }
            Ok(y)
        }
        fn complex(v: &Value) -> Result<[f64; 2], String> {
            match v {
                Value::Array(p) if p.len() == 2 => Ok([float(&p[0])?, float(&p[1])?]),
                _ => Ok([float(v)?, 0.0]),
            }
        }
        match &mut self.data {
            ArrayData::Bool(x) => x.push(match v {
                Value::Bool(b) => *b,
                _ => match int::<i64>(v)? {
                    0 => false,
                    1 => true,
                    _ => return Err(format!("{v} is not a bool")),
                },
            }),
            ArrayData::I8(x) => x.push(int(v)?),
            ArrayData::I16(x) => x.push(int(v)?),
            ArrayData::I32(x) => x.push(int(v)?),
            ArrayData::I64(x) => x.push(int(v)?),
            ArrayData::U8(x) => x.push(int(v)?),
            ArrayData::U16(x) => x.push(int(v)?),
            ArrayData::U32(x) => x.push(int(v)?),
            ArrayData::U64(x) => x.push(int(v)?),
            ArrayData::F32(x) => x.push(f32_of(float(v)?, v)?),
            ArrayData::F64(x) => x.push(float(v)?),
            ArrayData::C64(x) => {
                let [a, b] = complex(v)?;
                x.push([f32_of(a, v)?, f32_of(b, v)?])
            }
            ArrayData::C128(x) => x.push(complex(v)?),
            ArrayData::Bytes { width, data } => {
                let bytes: Vec<u8> = match v {
                    Value::String(s) => s.as_bytes().to_vec(),
                    Value::Array(a) => a.iter().map(int::<u8>).collect::<Result<_, _>>()?,
                    _ => return Err(format!("{v} is not bytes")),
                };
                let mut padded = bytes;
                padded.resize(*width, 0);
                data.extend_from_slice(&padded);
            }
        }
        Ok(())
    }

    /// Decodes raw bytes (`len * size` of them, in the dtype's byte order).
    ///
    /// # Errors
    /// [`OamapError::Npy`] naming `name` when the byte count is not a whole number of items.
    pub fn from_bytes(name: &str, dtype: OaDtype, bytes: &[u8]) -> Result<Self, OamapError> {
        let size = dtype.size.max(1);
        if !bytes.len().is_multiple_of(size) {
            return Err(OamapError::Npy {
                name: name.to_string(),
                reason: format!("{} bytes is not a whole number of {}-byte items", bytes.len(), size),
            });
        }
        let be = dtype.big_endian;
        macro_rules! conv {
            ($t:ty, $n:expr) => {
                bytes
                    .chunks_exact($n)
                    .map(|c| {
                        let mut a = [0u8; $n];
                        a.copy_from_slice(c);
                        if be {
                            <$t>::from_be_bytes(a)
                        } else {
                            <$t>::from_le_bytes(a)
                        }
                    })
                    .collect::<Vec<$t>>()
            };
        }
        let mut array = Array::empty(dtype);
        array.data = match array.data {
            ArrayData::Bool(_) => ArrayData::Bool(bytes.iter().map(|&b| b != 0).collect()),
            ArrayData::I8(_) => ArrayData::I8(bytes.iter().map(|&b| b as i8).collect()),
            ArrayData::U8(_) => ArrayData::U8(bytes.to_vec()),
            ArrayData::I16(_) => ArrayData::I16(conv!(i16, 2)),
            ArrayData::U16(_) => ArrayData::U16(conv!(u16, 2)),
            ArrayData::I32(_) => ArrayData::I32(conv!(i32, 4)),
            ArrayData::U32(_) => ArrayData::U32(conv!(u32, 4)),
            ArrayData::I64(_) => ArrayData::I64(conv!(i64, 8)),
            ArrayData::U64(_) => ArrayData::U64(conv!(u64, 8)),
            ArrayData::F32(_) => ArrayData::F32(conv!(f32, 4)),
            ArrayData::F64(_) => ArrayData::F64(conv!(f64, 8)),
            ArrayData::C64(_) => {
                let f = conv!(f32, 4);
                ArrayData::C64(f.chunks_exact(2).map(|p| [p[0], p[1]]).collect())
            }
            ArrayData::C128(_) => {
                let f = conv!(f64, 8);
                ArrayData::C128(f.chunks_exact(2).map(|p| [p[0], p[1]]).collect())
            }
            ArrayData::Bytes { width, .. } => ArrayData::Bytes { width, data: bytes.to_vec() },
        };
        Ok(array)
    }

    /// The raw bytes, in the dtype's byte order (what a `.npy` body holds).
    pub fn to_bytes(&self) -> Vec<u8> {
        let be = self.dtype.big_endian;
        let mut out = Vec::with_capacity(self.len() * self.dtype.size);
        macro_rules! put {
            ($v:expr) => {
                for x in $v {
                    out.extend_from_slice(&if be { x.to_be_bytes() } else { x.to_le_bytes() });
                }
            };
        }
        match &self.data {
            ArrayData::Bool(v) => out.extend(v.iter().map(|&b| u8::from(b))),
            ArrayData::I8(v) => out.extend(v.iter().map(|&b| b as u8)),
            ArrayData::U8(v) => out.extend_from_slice(v),
            ArrayData::I16(v) => put!(v),
            ArrayData::U16(v) => put!(v),
            ArrayData::I32(v) => put!(v),
            ArrayData::U32(v) => put!(v),
            ArrayData::I64(v) => put!(v),
            ArrayData::U64(v) => put!(v),
            ArrayData::F32(v) => put!(v),
            ArrayData::F64(v) => put!(v),
            ArrayData::C64(v) => put!(v.iter().flatten()),
            ArrayData::C128(v) => put!(v.iter().flatten()),
            ArrayData::Bytes { data, .. } => out.extend_from_slice(data),
        }
        out
    }
}

/// The `f64` whose shortest decimal form equals the `f32`'s shortest form (so `293.12738f32`
/// prints as `293.12738`, not `293.1273803710938`).
pub fn f32_to_f64_shortest(x: f32) -> f64 {
    if !x.is_finite() {
        return x as f64;
    }
    x.to_string().parse::<f64>().unwrap_or(x as f64)
}

/// A JSON number for a float (`null` for NaN and infinities, which JSON cannot hold).
pub(crate) fn float_json(x: f64) -> Value {
    serde_json::Number::from_f64(x).map(Value::Number).unwrap_or(Value::Null)
}
