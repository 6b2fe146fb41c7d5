//! Element dtypes in numpy's `descr` notation.
//!
//! Layout follows numpy's array-interface `descr` (see numpy's "The array interface
//! protocol"): a primitive is a type string such as `"<u2"` (byte order, kind, size in bytes);
//! a structured dtype is a list of `[name, type]` pairs laid out back to back, where unnamed
//! `["", "|V<n>"]` entries are padding. guideloom stores elements little-endian only.

use std::fmt;

use serde_json::Value;

use crate::FormatError;

/// A primitive element type, stored little-endian.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Primitive {
    /// `bool`, one byte, 0 or 1 (`|b1`).
    Bool,
    /// `u8` (`|u1`).
    U8,
    /// `i8` (`|i1`).
    I8,
    /// `u16` (`<u2`).
    U16,
    /// `i16` (`<i2`).
    I16,
    /// `u32` (`<u4`).
    U32,
    /// `i32` (`<i4`).
    I32,
    /// `u64` (`<u8`).
    U64,
    /// `i64` (`<i8`).
    I64,
    /// IEEE half precision (`<f2`); stored and returned as raw `u16` bits.
    F16,
    /// `f32` (`<f4`).
    F32,
    /// `f64` (`<f8`).
    F64,
}

impl Primitive {
    /// All primitives, in a fixed order.
    pub const ALL: [Primitive; 12] = [
        Primitive::Bool,
        Primitive::U8,
        Primitive::I8,
        Primitive::U16,
        Primitive::I16,
        Primitive::U32,
        Primitive::I32,
        Primitive::U64,
        Primitive::I64,
        Primitive::F16,
        Primitive::F32,
        Primitive::F64,
    ];

    /// Size of one value, in bytes.
    pub const fn size(self) -> u64 {
        match self {
            Primitive::Bool | Primitive::U8 | Primitive::I8 => 1,
            Primitive::U16 | Primitive::I16 | Primitive::F16 => 2,
            Primitive::U32 | Primitive::I32 | Primitive::F32 => 4,
            Primitive::U64 | Primitive::I64 | Primitive::F64 => 8,
        }
    }

    /// numpy's type string, little-endian (`"<u2"`), or `"|"`-prefixed for one-byte types.
    pub const fn descr(self) -> &'static str {
        match self {
            Primitive::Bool => "|b1",
            Primitive::U8 => "|u1",
            Primitive::I8 => "|i1",
            Primitive::U16 => "<u2",
            Primitive::I16 => "<i2",
            Primitive::U32 => "<u4",
            Primitive::I32 => "<i4",
            Primitive::U64 => "<u8",
            Primitive::I64 => "<i8",
            Primitive::F16 => "<f2",
            Primitive::F32 => "<f4",
            Primitive::F64 => "<f8",
        }
    }

    /// Whether this is an unsigned or signed integer type (not bool, not float).
    pub const fn is_integer(self) -> bool {
        matches!(
            self,
            Primitive::U8
                | Primitive::I8
                | Primitive::U16
                | Primitive::I16
                | Primitive::U32
                | Primitive::I32
                | Primitive::U64
                | Primitive::I64
        )
    }

    /// Parses a numpy type string: `"<u2"`, `"|u1"`, `"=i4"` or `"u2"` (no byte order means
    /// little-endian here). Big-endian (`">"`) strings are refused.
    ///
    /// # Errors
    /// [`FormatError::InvalidDescr`] for anything that is not a supported little-endian
    /// primitive.
    pub fn from_descr(s: &str) -> Result<Self, FormatError> {
        let bad =
            |reason: &str| FormatError::InvalidDescr { descr: format!("{s:?}"), reason: reason.to_string() };
        let body = match s.as_bytes().first() {
            Some(b'<' | b'|' | b'=') => &s[1..],
            Some(b'>') => {
                let size_one = matches!(&s[1..], "u1" | "i1" | "b1");
                if !size_one {
                    return Err(bad(
                        "big-endian elements are not supported (guideloom stores little-endian)",
                    ));
                }
                &s[1..]
            }
            _ => s,
        };
        Ok(match body {
            "b1" | "?" => Primitive::Bool,
            "u1" => Primitive::U8,
            "i1" => Primitive::I8,
            "u2" => Primitive::U16,
            "i2" => Primitive::I16,
            "u4" => Primitive::U32,
            "i4" => Primitive::I32,
            "u8" => Primitive::U64,
            "i8" => Primitive::I64,
            "f2" => Primitive::F16,
            "f4" => Primitive::F32,
            "f8" => Primitive::F64,
            _ => return Err(bad("unknown primitive type string")),
        })
    }
}

impl fmt::Display for Primitive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.descr())
    }
}

/// One named field of a structured [`Dtype`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Field {
    /// Field name (non-empty, unique within the dtype).
    pub name: String,
    /// Field type.
    pub primitive: Primitive,
    /// Byte offset of the field inside one element.
    pub offset: u64,
}

/// The description of one stream element: a primitive, or a structured record of primitives.
///
/// Converts to and from numpy's `descr` JSON ([`Dtype::to_descr`], [`Dtype::from_descr`]).
///
/// ```
/// use guideloom_formats::{Dtype, Primitive};
/// let d = Dtype::structured([("tokens", Primitive::U32), ("loss_mask", Primitive::U8)])?;
/// assert_eq!(d.itemsize(), 5);
/// assert_eq!(d.to_descr().to_string(), r#"[["tokens","<u4"],["loss_mask","|u1"]]"#);
/// assert_eq!(Dtype::from_descr(&d.to_descr())?, d);
/// # Ok::<(), guideloom_formats::FormatError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Dtype {
    /// A single primitive value per element.
    Primitive(Primitive),
    /// Named fields at byte offsets inside an element of `itemsize` bytes.
    Structured {
        /// Fields in declaration order, offsets increasing, non-overlapping.
        fields: Vec<Field>,
        /// Size of one element in bytes (at least the end of the last field; the rest padding).
        itemsize: u64,
    },
}

impl Dtype {
    /// A packed structured dtype: fields laid out back to back with no padding.
    ///
    /// # Errors
    /// [`FormatError::InvalidDtype`] for no fields, an empty name or a duplicate name.
    pub fn structured<S: Into<String>>(
        fields: impl IntoIterator<Item = (S, Primitive)>,
    ) -> Result<Self, FormatError> {
        let mut offset = 0;
        let fields: Vec<Field> = fields
            .into_iter()
            .map(|(name, primitive)| {
                let f = Field { name: name.into(), primitive, offset };
                offset += primitive.size();
                f
            })
            .collect();
        Self::with_layout(fields, offset)
    }

    /// A structured dtype with explicit offsets and itemsize (for `#[repr(C)]` structs with
    /// padding).
    ///
    /// # Errors
    /// [`FormatError::InvalidDtype`] for no fields, empty or duplicate names, overlapping
    /// fields, decreasing offsets or a field past `itemsize`.
    pub fn with_layout(fields: Vec<Field>, itemsize: u64) -> Result<Self, FormatError> {
        if fields.is_empty() {
            return Err(FormatError::InvalidDtype("a structured dtype needs at least one field".into()));
        }
        let mut end = 0u64;
        for (i, f) in fields.iter().enumerate() {
            if f.name.is_empty() {
                return Err(FormatError::InvalidDtype(format!("field {i} has an empty name")));
            }
            if fields[..i].iter().any(|g| g.name == f.name) {
                return Err(FormatError::InvalidDtype(format!("duplicate field name {:?}", f.name)));
            }
            if f.offset < end {
                return Err(FormatError::InvalidDtype(format!(
                    "field {:?} at offset {} overlaps the previous field ending at {end}",
                    f.name, f.offset
                )));
            }
            end = f.offset + f.primitive.size();
        }
        if end > itemsize {
            return Err(FormatError::InvalidDtype(format!(
                "fields end at byte {end} but itemsize is {itemsize}"
            )));
        }
        Ok(Dtype::Structured { fields, itemsize })
    }

    /// Size of one element in bytes.
    pub fn itemsize(&self) -> u64 {
        match self {
            Dtype::Primitive(p) => p.size(),
            Dtype::Structured { itemsize, .. } => *itemsize,
        }
    }

    /// The fields of a structured dtype (empty for a primitive).
    pub fn fields(&self) -> &[Field] {
        match self {
            Dtype::Primitive(_) => &[],
            Dtype::Structured { fields, .. } => fields,
        }
    }

    /// The field named `name`, if this is a structured dtype that has it.
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields().iter().find(|f| f.name == name)
    }

    /// numpy's `descr`: a type string for a primitive, a list of `[name, type]` pairs (with
    /// `["", "|V<n>"]` padding entries) for a structured dtype.
    pub fn to_descr(&self) -> Value {
        match self {
            Dtype::Primitive(p) => Value::String(p.descr().into()),
            Dtype::Structured { fields, itemsize } => {
                let mut out = Vec::new();
                let mut pos = 0;
                for f in fields {
                    if f.offset > pos {
                        out.push(serde_json::json!(["", format!("|V{}", f.offset - pos)]));
                    }
                    out.push(serde_json::json!([f.name, f.primitive.descr()]));
                    pos = f.offset + f.primitive.size();
                }
                if *itemsize > pos {
                    out.push(serde_json::json!(["", format!("|V{}", itemsize - pos)]));
                }
                Value::Array(out)
            }
        }
    }

    /// Parses numpy's `descr` (see [`Dtype::to_descr`]). Sub-array shapes (a third entry in
    /// a field) and nested structures are refused.
    ///
    /// # Errors
    /// [`FormatError::InvalidDescr`] when the value is not a supported descr.
    pub fn from_descr(descr: &Value) -> Result<Self, FormatError> {
        let bad = |reason: String| FormatError::InvalidDescr { descr: descr.to_string(), reason };
        match descr {
            Value::String(s) => Ok(Dtype::Primitive(Primitive::from_descr(s)?)),
            Value::Array(entries) => {
                let mut fields = Vec::new();
                let mut pos = 0u64;
                for e in entries {
                    let pair = e
                        .as_array()
                        .filter(|p| p.len() == 2)
                        .ok_or_else(|| bad(format!("field entry {e} is not a [name, type] pair")))?;
                    let name = pair[0]
                        .as_str()
                        .ok_or_else(|| bad(format!("field name {} is not a string", pair[0])))?;
                    let ty = pair[1]
                        .as_str()
                        .ok_or_else(|| bad(format!("field type {} is not a string", pair[1])))?;
                    if name.is_empty() {
                        let n = ty
                            .strip_prefix("|V")
                            .or_else(|| ty.strip_prefix('V'))
                            .and_then(|n| n.parse::<u64>().ok())
                            .filter(|&n| n <= 1 << 20)
                            .ok_or_else(|| {
                                bad(format!("unnamed entry of type {ty:?} is not padding |V<n>"))
                            })?;
                        pos += n;
                        continue;
                    }
                    let primitive = Primitive::from_descr(ty).map_err(|e| bad(e.to_string()))?;
                    fields.push(Field { name: name.to_string(), primitive, offset: pos });
                    pos += primitive.size();
                }
                Self::with_layout(fields, pos).map_err(|e| bad(e.to_string()))
            }
            _ => Err(bad("expected a type string or a list of [name, type] pairs".into())),
        }
    }
}

impl From<Primitive> for Dtype {
    fn from(p: Primitive) -> Self {
        Dtype::Primitive(p)
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dtype::Primitive(p) => f.write_str(p.descr()),
            Dtype::Structured { .. } => write!(f, "{}", self.to_descr()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn primitive_descrs_round_trip() {
        for p in Primitive::ALL {
            assert_eq!(Primitive::from_descr(p.descr()).unwrap(), p);
            assert_eq!(Dtype::from_descr(&Dtype::from(p).to_descr()).unwrap(), Dtype::Primitive(p));
        }
        assert_eq!(Primitive::from_descr("u2").unwrap(), Primitive::U16);
        assert_eq!(Primitive::from_descr(">u1").unwrap(), Primitive::U8);
        assert!(matches!(Primitive::from_descr(">u2"), Err(FormatError::InvalidDescr { .. })));
        assert!(matches!(Primitive::from_descr("<c8"), Err(FormatError::InvalidDescr { .. })));
        assert!(matches!(Primitive::from_descr(""), Err(FormatError::InvalidDescr { .. })));
    }

    #[test]
    fn padded_structured_descr() {
        let d = Dtype::with_layout(
            vec![
                Field { name: "tokens".into(), primitive: Primitive::U32, offset: 0 },
                Field { name: "loss_mask".into(), primitive: Primitive::U8, offset: 4 },
            ],
            8,
        )
        .unwrap();
        assert_eq!(d.to_descr(), json!([["tokens", "<u4"], ["loss_mask", "|u1"], ["", "|V3"]]));
        assert_eq!(Dtype::from_descr(&d.to_descr()).unwrap(), d);
        assert_eq!(d.itemsize(), 8);
    }

    #[test]
    fn bad_structured_descrs_are_errors() {
        for v in [
            json!([]),
            json!([["a", "<u4"], ["a", "<u4"]]),
            json!([["a", "<u4", [3]]]),
            json!([["a"]]),
            json!([[1, "<u4"]]),
            json!([["", "<u4"]]),
            json!(42),
            json!({"names": []}),
        ] {
            assert!(matches!(Dtype::from_descr(&v), Err(FormatError::InvalidDescr { .. })), "{v}");
        }
    }
}
