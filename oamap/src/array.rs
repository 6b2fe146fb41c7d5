//! One named OAMap array: a dtype and its values, held in native byte order.

use guideloom_formats::{Column, DtypeKind};
use serde_json::Value;

use crate::{Dtype, OamapError};

/// A one-dimensional array of one primitive dtype: what an array source returns for a name.
///
/// The values are a [`Column`] (one vector per numpy scalar type, in native byte order).
/// Byte order only matters on the way in and out (`.npy` bytes); the array's [`Dtype`]
/// remembers it so a big-endian array is written back big-endian under its `DF8`-style name.
#[derive(Debug, Clone, PartialEq)]
pub struct Array {
    dtype: Dtype,
    data: Column,
}

impl Array {
    /// An empty array of `dtype`.
    pub fn empty(dtype: Dtype) -> Self {
        Array { dtype, data: Column::empty(dtype.type_str()) }
    }

    /// An `int32` array (starts, stops, masks, offsets, positions).
    pub fn from_i32(values: Vec<i32>) -> Self {
        Array { dtype: Dtype::INT32, data: Column::I32(values) }
    }

    /// An `int8` array (union tags).
    pub fn from_i8(values: Vec<i8>) -> Self {
        Array { dtype: Dtype::INT8, data: Column::I8(values) }
    }

    /// Wraps values, checking that they match `dtype`'s kind and size.
    ///
    /// # Errors
    /// [`OamapError::Dtype`] when the vector type differs from the dtype.
    pub fn new(dtype: Dtype, data: Column) -> Result<Self, OamapError> {
        let probe = Array::empty(dtype);
        let same = std::mem::discriminant(&probe.data) == std::mem::discriminant(&data)
            && match (&probe.data, &data) {
                (Column::Bytes { width: a, .. }, Column::Bytes { width: b, data }) => {
                    a == b && data.len().checked_rem(*b) == Some(0)
                }
                _ => true,
            };
        if !same {
            return Err(OamapError::Dtype { dtype: dtype.name(), reason: "values of another type".into() });
        }
        Ok(Array { dtype, data })
    }

    /// The array's dtype.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// The values.
    pub fn data(&self) -> &Column {
        &self.data
    }

    /// Mutable values (for builders inside this crate).
    pub(crate) fn data_mut(&mut self) -> &mut Column {
        &mut self.data
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        // The length of a vector held in memory, so it fits a usize.
        self.data.len() as usize
    }

    /// Whether the array has no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The values as an `i32` slice when the array is `int32` (the structural fast path).
    pub fn as_i32(&self) -> Option<&[i32]> {
        match &self.data {
            Column::I32(v) => Some(v),
            _ => None,
        }
    }

    /// Entry `i` as an integer, for integer and bool arrays; `None` when out of range or
    /// not an integer kind (a `uint64` above `i64::MAX` also gives `None`).
    #[inline]
    pub fn int_at(&self, i: usize) -> Option<i64> {
        match &self.data {
            Column::I32(v) => v.get(i).map(|&x| x as i64),
            Column::I8(v) => v.get(i).map(|&x| x as i64),
            Column::I16(v) => v.get(i).map(|&x| x as i64),
            Column::I64(v) => v.get(i).copied(),
            Column::U8(v) => v.get(i).map(|&x| x as i64),
            Column::U16(v) => v.get(i).map(|&x| x as i64),
            Column::U32(v) => v.get(i).map(|&x| x as i64),
            Column::U64(v) => v.get(i).and_then(|&x| i64::try_from(x).ok()),
            Column::Bool(v) => v.get(i).map(|&x| x as i64),
            _ => None,
        }
    }

    /// Entry `i` converted to `f64` for real numeric kinds (bools as 0/1); `None` when out of
    /// range or complex/bytes.
    #[inline]
    pub fn f64_at(&self, i: usize) -> Option<f64> {
        match &self.data {
            Column::F64(v) => v.get(i).copied(),
            Column::F32(v) => v.get(i).map(|&x| x as f64),
            Column::U64(v) => v.get(i).map(|&x| x as f64),
            Column::C64(_) | Column::C128(_) | Column::Bytes { .. } => None,
            _ => self.int_at(i).map(|x| x as f64),
        }
    }

    /// Whether the array holds integers (or bools) that can serve as structural indices.
    pub fn is_integer(&self) -> bool {
        matches!(self.dtype.kind(), DtypeKind::Int | DtypeKind::UInt | DtypeKind::Bool)
    }

    /// Entry `i` as a JSON number the way the golden files list arrays (bools as 0/1,
    /// complex as `[re, im]`, bytes as a list of byte values).
    pub fn json_at(&self, i: usize) -> Option<Value> {
        Some(match &self.data {
            Column::Bool(v) => Value::from(u8::from(*v.get(i)?)),
            Column::I8(v) => Value::from(*v.get(i)?),
            Column::I16(v) => Value::from(*v.get(i)?),
            Column::I32(v) => Value::from(*v.get(i)?),
            Column::I64(v) => Value::from(*v.get(i)?),
            Column::U8(v) => Value::from(*v.get(i)?),
            Column::U16(v) => Value::from(*v.get(i)?),
            Column::U32(v) => Value::from(*v.get(i)?),
            Column::U64(v) => Value::from(*v.get(i)?),
            Column::F32(v) => float_json(f32_to_f64_shortest(*v.get(i)?)),
            Column::F64(v) => float_json(*v.get(i)?),
            Column::C64(v) => {
                let [re, im] = *v.get(i)?;
                Value::Array(vec![float_json(f32_to_f64_shortest(re)), float_json(f32_to_f64_shortest(im))])
            }
            Column::C128(v) => {
                let [re, im] = *v.get(i)?;
                Value::Array(vec![float_json(re), float_json(im)])
            }
            Column::Bytes { width, data } => {
                let chunk = data.get(i * width..(i + 1) * width)?;
                Value::Array(chunk.iter().map(|&b| Value::from(b)).collect())
            }
            // float16 (and any later type): never the values of an OAMap array.
            _ => return None,
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
    pub fn from_json(name: &str, dtype: Dtype, values: &[Value]) -> Result<Self, OamapError> {
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
            Column::Bool(x) => x.push(match v {
                Value::Bool(b) => *b,
                _ => match int::<i64>(v)? {
                    0 => false,
                    1 => true,
                    _ => return Err(format!("{v} is not a bool")),
                },
            }),
            Column::I8(x) => x.push(int(v)?),
            Column::I16(x) => x.push(int(v)?),
            Column::I32(x) => x.push(int(v)?),
            Column::I64(x) => x.push(int(v)?),
            Column::U8(x) => x.push(int(v)?),
            Column::U16(x) => x.push(int(v)?),
            Column::U32(x) => x.push(int(v)?),
            Column::U64(x) => x.push(int(v)?),
            Column::F32(x) => x.push(f32_of(float(v)?, v)?),
            Column::F64(x) => x.push(float(v)?),
            Column::C64(x) => {
                let [a, b] = complex(v)?;
                x.push([f32_of(a, v)?, f32_of(b, v)?])
            }
            Column::C128(x) => x.push(complex(v)?),
            Column::Bytes { width, data } => {
                let bytes: Vec<u8> = match v {
                    Value::String(s) => s.as_bytes().to_vec(),
                    Value::Array(a) => a.iter().map(int::<u8>).collect::<Result<_, _>>()?,
                    _ => return Err(format!("{v} is not bytes")),
                };
                let mut padded = bytes;
                padded.resize(*width, 0);
                data.extend_from_slice(&padded);
            }
            // float16 (and any later type): never the values of an OAMap array.
            _ => return Err(format!("no {} values in an OAMap array", self.dtype)),
        }
        Ok(())
    }

    /// Decodes raw bytes (`len * size` of them, in the dtype's byte order).
    ///
    /// # Errors
    /// [`OamapError::Npy`] naming `name` when the byte count is not a whole number of items.
    pub fn from_bytes(name: &str, dtype: Dtype, bytes: &[u8]) -> Result<Self, OamapError> {
        let size = dtype.width().max(1);
        if !bytes.len().is_multiple_of(size) {
            return Err(OamapError::Npy {
                name: name.to_string(),
                reason: format!("{} bytes is not a whole number of {}-byte items", bytes.len(), size),
            });
        }
        let be = dtype.big_endian();
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
            Column::Bool(_) => Column::Bool(bytes.iter().map(|&b| b != 0).collect()),
            Column::I8(_) => Column::I8(bytes.iter().map(|&b| b as i8).collect()),
            Column::U8(_) => Column::U8(bytes.to_vec()),
            Column::I16(_) => Column::I16(conv!(i16, 2)),
            Column::U16(_) => Column::U16(conv!(u16, 2)),
            Column::I32(_) => Column::I32(conv!(i32, 4)),
            Column::U32(_) => Column::U32(conv!(u32, 4)),
            Column::I64(_) => Column::I64(conv!(i64, 8)),
            Column::U64(_) => Column::U64(conv!(u64, 8)),
            Column::F32(_) => Column::F32(conv!(f32, 4)),
            Column::F64(_) => Column::F64(conv!(f64, 8)),
            Column::C64(_) => {
                let f = conv!(f32, 4);
                Column::C64(f.chunks_exact(2).map(|p| [p[0], p[1]]).collect())
            }
            Column::C128(_) => {
                let f = conv!(f64, 8);
                Column::C128(f.chunks_exact(2).map(|p| [p[0], p[1]]).collect())
            }
            Column::Bytes { width, .. } => Column::Bytes { width, data: bytes.to_vec() },
            // float16 (and any later type): `Dtype` has none, so `Array::empty` never gives one.
            _ => {
                return Err(OamapError::Npy {
                    name: name.to_string(),
                    reason: format!("no {dtype} values in an OAMap array"),
                })
            }
        };
        Ok(array)
    }

    /// The raw bytes, in the dtype's byte order (what a `.npy` body holds).
    pub fn to_bytes(&self) -> Vec<u8> {
        let be = self.dtype.big_endian();
        let mut out = Vec::with_capacity(self.len().saturating_mul(self.dtype.width()));
        macro_rules! put {
            ($v:expr) => {
                for x in $v {
                    out.extend_from_slice(&if be { x.to_be_bytes() } else { x.to_le_bytes() });
                }
            };
        }
        match &self.data {
            Column::Bool(v) => out.extend(v.iter().map(|&b| u8::from(b))),
            Column::I8(v) => out.extend(v.iter().map(|&b| b as u8)),
            Column::U8(v) => out.extend_from_slice(v),
            Column::I16(v) => put!(v),
            Column::U16(v) => put!(v),
            Column::I32(v) => put!(v),
            Column::U32(v) => put!(v),
            Column::I64(v) => put!(v),
            Column::U64(v) => put!(v),
            Column::F32(v) => put!(v),
            Column::F64(v) => put!(v),
            Column::C64(v) => put!(v.iter().flatten()),
            Column::C128(v) => put!(v.iter().flatten()),
            Column::F16(v) => put!(v),
            Column::Bytes { data, .. } => out.extend_from_slice(data),
            // Any later type: `Dtype` has none, so no array holds one.
            _ => {}
        }
        out
    }
}

/// The `f64` whose shortest decimal form equals the `f32`'s shortest form (so `293.12738f32`
/// prints as `293.12738`, not `293.1273803710938`).
pub(crate) fn f32_to_f64_shortest(x: f32) -> f64 {
    if !x.is_finite() {
        return x as f64;
    }
    x.to_string().parse::<f64>().unwrap_or(x as f64)
}

/// A JSON number for a float (`null` for NaN and infinities, which JSON cannot hold).
pub(crate) fn float_json(x: f64) -> Value {
    serde_json::Number::from_f64(x).map(Value::Number).unwrap_or(Value::Null)
}
