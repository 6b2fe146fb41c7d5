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
    /// The type string is taken apart by [`TypeStr::parse`], the one numpy type-string parser
    /// of the workspace.
    ///
    /// # Errors
    /// [`FormatError::InvalidDescr`] for anything that is not a supported little-endian
    /// primitive.
    pub fn from_descr(s: &str) -> Result<Self, FormatError> {
        let bad =
            |reason: &str| FormatError::InvalidDescr { descr: format!("{s:?}"), reason: reason.to_string() };
        let t = TypeStr::parse(s).map_err(|_| bad("unknown primitive type string"))?;
        if t.big_endian() {
            return Err(bad("big-endian elements are not supported (guideloom stores little-endian)"));
        }
        Ok(match (t.kind(), t.size()) {
            (DtypeKind::Bool, 1) => Primitive::Bool,
            (DtypeKind::UInt, 1) => Primitive::U8,
            (DtypeKind::Int, 1) => Primitive::I8,
            (DtypeKind::UInt, 2) => Primitive::U16,
            (DtypeKind::Int, 2) => Primitive::I16,
            (DtypeKind::UInt, 4) => Primitive::U32,
            (DtypeKind::Int, 4) => Primitive::I32,
            (DtypeKind::UInt, 8) => Primitive::U64,
            (DtypeKind::Int, 8) => Primitive::I64,
            (DtypeKind::Float, 2) => Primitive::F16,
            (DtypeKind::Float, 4) => Primitive::F32,
            (DtypeKind::Float, 8) => Primitive::F64,
            _ => return Err(bad("unknown primitive type string")),
        })
    }

    /// The primitive as a [`TypeStr`] (little-endian).
    pub const fn type_str(self) -> TypeStr {
        let (kind, size) = match self {
            Primitive::Bool => (DtypeKind::Bool, 1),
            Primitive::U8 => (DtypeKind::UInt, 1),
            Primitive::I8 => (DtypeKind::Int, 1),
            Primitive::U16 => (DtypeKind::UInt, 2),
            Primitive::I16 => (DtypeKind::Int, 2),
            Primitive::U32 => (DtypeKind::UInt, 4),
            Primitive::I32 => (DtypeKind::Int, 4),
            Primitive::U64 => (DtypeKind::UInt, 8),
            Primitive::I64 => (DtypeKind::Int, 8),
            Primitive::F16 => (DtypeKind::Float, 2),
            Primitive::F32 => (DtypeKind::Float, 4),
            Primitive::F64 => (DtypeKind::Float, 8),
        };
        TypeStr { kind, size, big_endian: false }
    }
}

/// The kind of a numpy scalar type (numpy's `dtype.kind` letter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DtypeKind {
    /// `b` (also `?`): one-byte boolean, 0 or 1.
    Bool,
    /// `i`: two's-complement signed integer of 1, 2, 4 or 8 bytes.
    Int,
    /// `u`: unsigned integer of 1, 2, 4 or 8 bytes.
    UInt,
    /// `f`: IEEE float of 2, 4 or 8 bytes.
    Float,
    /// `c`: complex of 8 or 16 bytes (two floats: real, imaginary).
    Complex,
    /// `S` (also `a`): fixed-width byte string of `size` bytes, NUL-padded.
    Bytes,
}

impl DtypeKind {
    /// numpy's kind letter: `b`, `i`, `u`, `f`, `c` or `S`.
    pub const fn letter(self) -> char {
        match self {
            DtypeKind::Bool => 'b',
            DtypeKind::Int => 'i',
            DtypeKind::UInt => 'u',
            DtypeKind::Float => 'f',
            DtypeKind::Complex => 'c',
            DtypeKind::Bytes => 'S',
        }
    }

    /// The kind of numpy's letter `letter` (`?` and `a` are accepted as `b` and `S`).
    pub const fn from_letter(letter: char) -> Option<Self> {
        Some(match letter {
            'b' | '?' => DtypeKind::Bool,
            'i' => DtypeKind::Int,
            'u' => DtypeKind::UInt,
            'f' => DtypeKind::Float,
            'c' => DtypeKind::Complex,
            'S' | 'a' => DtypeKind::Bytes,
            _ => return None,
        })
    }
}

/// A numpy array-protocol type string taken apart (numpy's `__array_interface__["typestr"]`):
/// byte order, kind and item size in bytes, for example `"<u2"`, `">f8"`, `"|b1"`, `"|S4"`.
///
/// The grammar is `[order] kind size`: `order` is `<` or `=` (little-endian; guideloom
/// treats native order as little-endian), `>` or `!` (big-endian), `|` (not applicable) or
/// absent (little-endian); `kind` is one of numpy's letters (see [`DtypeKind`]); `size` is
/// the item size in bytes, a decimal number without leading zeros. `"?"` alone is `"|b1"`.
/// Sizes are those numpy has: 1 for bools; 1, 2, 4, 8 for integers; 2, 4, 8 for floats;
/// 8, 16 for complex; at least 1 for byte strings. One-byte types and byte strings have no
/// byte order: [`TypeStr::big_endian`] is false for them.
///
/// ```
/// use guideloom_formats::{DtypeKind, TypeStr};
/// let t = TypeStr::parse(">f8")?;
/// assert_eq!((t.kind(), t.size(), t.big_endian()), (DtypeKind::Float, 8, true));
/// assert_eq!(t.descr(), ">f8");
/// assert_eq!(TypeStr::parse("u1")?.descr(), "|u1");
/// assert!(TypeStr::parse("<i3").is_err());
/// # Ok::<(), guideloom_formats::FormatError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TypeStr {
    kind: DtypeKind,
    size: u64,
    big_endian: bool,
}

/// The largest item size of a fixed-width byte string (`S<n>`) a type string may name:
/// `i32::MAX`, numpy's own limit.
pub const MAX_BYTES_ITEMSIZE: u64 = i32::MAX as u64;

impl TypeStr {
    /// A type string of `kind` and `size` bytes, checking that numpy has that size for the
    /// kind. `big_endian` is ignored for one-byte types and byte strings.
    ///
    /// # Errors
    /// [`FormatError::InvalidDescr`] for a size numpy does not have (`int3`, `float1`,
    /// `S0` ...).
    pub fn new(kind: DtypeKind, size: u64, big_endian: bool) -> Result<Self, FormatError> {
        let ok = match kind {
            DtypeKind::Bool => size == 1,
            DtypeKind::Int | DtypeKind::UInt => matches!(size, 1 | 2 | 4 | 8),
            DtypeKind::Float => matches!(size, 2 | 4 | 8),
            DtypeKind::Complex => matches!(size, 8 | 16),
            // numpy's own limit on an item size (a C int); larger would ask for impossible
            // allocations one value at a time.
            DtypeKind::Bytes => (1..=MAX_BYTES_ITEMSIZE).contains(&size),
        };
        if !ok {
            return Err(FormatError::InvalidDescr {
                descr: format!("{:?}", format!("{}{size}", kind.letter())),
                reason: "unsupported item size".into(),
            });
        }
        let big_endian = big_endian && size > 1 && kind != DtypeKind::Bytes;
        Ok(TypeStr { kind, size, big_endian })
    }

    /// Parses a numpy type string (see the type's documentation for the grammar).
    ///
    /// # Errors
    /// [`FormatError::InvalidDescr`] naming the text when it is not a type string or has a
    /// size numpy does not have for its kind.
    pub fn parse(s: &str) -> Result<Self, FormatError> {
        let bad = |reason: &str| FormatError::InvalidDescr { descr: format!("{s:?}"), reason: reason.into() };
        let (big_endian, body) = match s.as_bytes().first() {
            Some(b'>' | b'!') => (true, &s[1..]),
            Some(b'<' | b'|' | b'=') => (false, &s[1..]),
            _ => (false, s),
        };
        if body == "?" {
            return Ok(TypeStr { kind: DtypeKind::Bool, size: 1, big_endian: false });
        }
        let mut chars = body.chars();
        let letter = chars.next().ok_or_else(|| bad("empty type string"))?;
        let kind = DtypeKind::from_letter(letter).ok_or_else(|| bad("unknown kind letter"))?;
        let digits = chars.as_str();
        let canonical = !digits.is_empty()
            && digits.bytes().all(|b| b.is_ascii_digit())
            && !(digits.len() > 1 && digits.starts_with('0'));
        if !canonical {
            return Err(bad("the kind letter must be followed by the item size in bytes"));
        }
        let size: u64 = digits.parse().map_err(|_| bad("item size out of range"))?;
        TypeStr::new(kind, size, big_endian).map_err(|_| bad("unsupported item size"))
    }

    /// The kind.
    pub const fn kind(self) -> DtypeKind {
        self.kind
    }

    /// Size of one value, in bytes.
    pub const fn size(self) -> u64 {
        self.size
    }

    /// Whether multi-byte values are stored big-endian (false for one-byte types and byte
    /// strings).
    pub const fn big_endian(self) -> bool {
        self.big_endian
    }

    /// numpy's type string: `<i4`, `>f8`, `|b1`, `|u1`, `|S4` (`|` for one-byte types and
    /// byte strings).
    pub fn descr(self) -> String {
        let order = if self.size == 1 || self.kind == DtypeKind::Bytes {
            '|'
        } else if self.big_endian {
            '>'
        } else {
            '<'
        };
        format!("{order}{}{}", self.kind.letter(), self.size)
    }
}

impl fmt::Display for TypeStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.descr())
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
        assert_eq!(TypeStr::parse("|S2147483647").unwrap().size(), MAX_BYTES_ITEMSIZE);
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
    fn type_strings_take_apart_and_round_trip() {
        let cases = [
            ("<i4", DtypeKind::Int, 4, false, "<i4"),
            (">f8", DtypeKind::Float, 8, true, ">f8"),
            ("!u2", DtypeKind::UInt, 2, true, ">u2"),
            ("=u8", DtypeKind::UInt, 8, false, "<u8"),
            ("|b1", DtypeKind::Bool, 1, false, "|b1"),
            ("?", DtypeKind::Bool, 1, false, "|b1"),
            (">u1", DtypeKind::UInt, 1, false, "|u1"),
            ("S4", DtypeKind::Bytes, 4, false, "|S4"),
            (">a3", DtypeKind::Bytes, 3, false, "|S3"),
            ("c16", DtypeKind::Complex, 16, false, "<c16"),
            ("<f2", DtypeKind::Float, 2, false, "<f2"),
        ];
        for (text, kind, size, big, descr) in cases {
            let t = TypeStr::parse(text).unwrap();
            assert_eq!((t.kind(), t.size(), t.big_endian()), (kind, size, big), "{text}");
            assert_eq!(t.descr(), descr, "{text}");
            assert_eq!(TypeStr::parse(descr).unwrap(), t, "{text}");
        }
        for text in [
            "",
            "<",
            "i",
            "<i3",
            "f1",
            "c4",
            "S0",
            "b2",
            "x4",
            "<i04",
            "<i+4",
            "int32",
            "<u99999999999999999999",
            "S99999999999999",
            "|S2147483648",
        ] {
            assert!(matches!(TypeStr::parse(text), Err(FormatError::InvalidDescr { .. })), "{text}");
        }
        for p in Primitive::ALL {
            assert_eq!(TypeStr::parse(p.descr()).unwrap(), p.type_str());
        }
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
