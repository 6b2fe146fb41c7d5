//! Primitive dtypes of OAMap arrays: numpy names, numpy type strings and OAMap `D` codes.
//!
//! Type strings are taken apart by `guideloom_formats::TypeStr`, the workspace's one numpy
//! type-string parser; names and `D` codes are spelled as type strings first.

use std::fmt;

use guideloom_formats::{DtypeKind, FormatError, Primitive, TypeStr};

use crate::OamapError;

/// A primitive dtype of an OAMap array: kind, item size in bytes and byte order.
///
/// One-byte types and byte strings have no byte order ([`Dtype::big_endian`] is false for
/// them). Names follow numpy (`int32`, `>float64`, `S4`); OAMap array names encode the dtype
/// as a `D` code (`Di4`, `DF8`, `DS4`: the kind letter is upper-case when big-endian).
/// Every dtype numpy has except `float16`: bools, integers of 1, 2, 4, 8 bytes, floats of 4
/// and 8, complex of 8 and 16, byte strings of any width.
///
/// ```
/// use guideloom_oamap::{Dtype, DtypeKind};
/// let d = Dtype::parse(">float64")?;
/// assert_eq!((d.kind(), d.size(), d.big_endian()), (DtypeKind::Float, 8, true));
/// assert_eq!((d.descr(), d.code()), (">f8".to_string(), "DF8".to_string()));
/// assert_eq!(Dtype::parse("DF8")?, d);
/// # Ok::<(), guideloom_oamap::OamapError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Dtype {
    type_str: TypeStr,
}

impl Dtype {
    /// `int32`, the dtype of every starts, stops, mask, offsets and positions array.
    pub const INT32: Dtype = Dtype { type_str: Primitive::I32.type_str() };
    /// `int8`, the dtype of union tags.
    pub const INT8: Dtype = Dtype { type_str: Primitive::I8.type_str() };
    /// `uint8`, the content of strings.
    pub const UINT8: Dtype = Dtype { type_str: Primitive::U8.type_str() };

    /// Builds a dtype, checking that the size is one numpy has for the kind (and that the
    /// kind is not `float16`, which OAMap arrays do not hold).
    ///
    /// # Errors
    /// [`OamapError::Dtype`] for an impossible size (`int3`, `float2`, `S0`...).
    pub fn new(kind: DtypeKind, size: u64, big_endian: bool) -> Result<Self, OamapError> {
        let refuse =
            || OamapError::Dtype { dtype: format!("{kind:?}{size}"), reason: "unsupported item size".into() };
        if kind == DtypeKind::Float && size == 2 {
            return Err(refuse());
        }
        // A byte-string width must fit in memory to be indexed.
        if usize::try_from(size).is_err() {
            return Err(refuse());
        }
        let type_str = TypeStr::new(kind, size, big_endian).map_err(|_| refuse())?;
        Ok(Dtype { type_str })
    }

    /// The dtype of a numpy type string (already taken apart).
    ///
    /// # Errors
    /// [`OamapError::Dtype`] for `float16`.
    pub fn from_type_str(t: TypeStr) -> Result<Self, OamapError> {
        Dtype::new(t.kind(), t.size(), t.big_endian())
    }

    /// Parses a numpy dtype name (`int32`, `>float64`, `bool`, `S4`), a numpy type string
    /// (`<i4`, `>f8`, `|b1`, `|S4`, `f8`) or an OAMap `D` code (`Di4`, `DF8`).
    ///
    /// # Errors
    /// [`OamapError::Dtype`] when the text is none of these.
    pub fn parse(text: &str) -> Result<Self, OamapError> {
        let bad = |reason: String| OamapError::Dtype { dtype: text.to_string(), reason };
        let reason = |e: FormatError| match e {
            FormatError::InvalidDescr { reason, .. } => reason,
            other => other.to_string(),
        };
        let type_str = if let Some(code) = text.strip_prefix('D') {
            // `D` + kind letter (upper-case: big-endian; `S` is always upper) + size.
            let mut chars = code.chars();
            let letter = chars.next().ok_or_else(|| bad("empty D code".into()))?;
            let (order, letter) = match letter {
                'S' => ('|', 'S'),
                l if l.is_ascii_uppercase() => ('>', l.to_ascii_lowercase()),
                l if l.is_ascii_lowercase() && l != 's' => ('<', l),
                _ => return Err(bad("unknown kind letter".into())),
            };
            format!("{order}{letter}{}", chars.as_str())
        } else {
            let (order, rest) = match text.as_bytes().first() {
                Some(b'>' | b'!' | b'<' | b'|' | b'=') => text.split_at(1),
                _ => ("", text),
            };
            match numpy_name(rest) {
                Some(t) => format!("{order}{t}"),
                None => text.to_string(),
            }
        };
        let t = TypeStr::parse(&type_str).map_err(|e| bad(reason(e)))?;
        Dtype::from_type_str(t).map_err(|_| bad("unsupported item size".into()))
    }

    /// The kind of value.
    pub fn kind(self) -> DtypeKind {
        self.type_str.kind()
    }

    /// Size of one value, in bytes.
    pub fn size(self) -> u64 {
        self.type_str.size()
    }

    /// Size of one value, in bytes, as a memory size (checked to fit at construction).
    pub(crate) fn width(self) -> usize {
        usize::try_from(self.type_str.size()).unwrap_or(usize::MAX)
    }

    /// Whether multi-byte values are stored big-endian.
    pub fn big_endian(self) -> bool {
        self.type_str.big_endian()
    }

    /// The numpy type string (see [`Dtype::descr`] for its text).
    pub fn type_str(self) -> TypeStr {
        self.type_str
    }

    /// numpy's dtype name, with `>` in front for big-endian: `int32`, `>float64`, `bool`, `S4`.
    pub fn name(self) -> String {
        let bits = self.size() * 8;
        let base = match self.kind() {
            DtypeKind::Bool => "bool".to_string(),
            DtypeKind::Int => format!("int{bits}"),
            DtypeKind::UInt => format!("uint{bits}"),
            DtypeKind::Float => format!("float{bits}"),
            DtypeKind::Complex => format!("complex{bits}"),
            _ => format!("S{}", self.size()),
        };
        if self.big_endian() {
            format!(">{base}")
        } else {
            base
        }
    }

    /// numpy's type string: `<i4`, `>f8`, `|b1`, `|u1`, `|S4`.
    pub fn descr(self) -> String {
        self.type_str.descr()
    }

    /// OAMap's dtype code used in array names: `Di4`, `DF8` (big-endian), `Db1`, `DS4`.
    pub fn code(self) -> String {
        let letter = self.kind().letter();
        let letter = if self.big_endian() { letter.to_ascii_uppercase() } else { letter };
        format!("D{letter}{}", self.size())
    }
}

/// The type string (without byte order) of a numpy dtype name: `int32` -> `i4`.
fn numpy_name(name: &str) -> Option<&'static str> {
    Some(match name {
        "bool" | "bool_" | "bool8" => "b1",
        "int8" => "i1",
        "int16" => "i2",
        "int32" => "i4",
        "int64" => "i8",
        "uint8" => "u1",
        "uint16" => "u2",
        "uint32" => "u4",
        "uint64" => "u8",
        "float32" => "f4",
        "float64" => "f8",
        "complex64" => "c8",
        "complex128" => "c16",
        _ => return None,
    })
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_codes_and_descrs_round_trip() {
        let cases = [
            ("int32", "Di4", "<i4"),
            (">float64", "DF8", ">f8"),
            ("bool", "Db1", "|b1"),
            ("uint8", "Du1", "|u1"),
            ("S4", "DS4", "|S4"),
            ("float32", "Df4", "<f4"),
            ("complex128", "Dc16", "<c16"),
            ("int8", "Di1", "|i1"),
        ];
        for (name, code, descr) in cases {
            let d = Dtype::parse(name).unwrap();
            assert_eq!(d.name(), name);
            assert_eq!(d.code(), code);
            assert_eq!(d.descr(), descr);
            assert_eq!(Dtype::parse(code).unwrap(), d);
            assert_eq!(Dtype::parse(descr).unwrap(), d);
        }
        for bad in ["int3", "Dx4", "", "object"] {
            assert!(
                matches!(Dtype::parse(bad), Err(OamapError::Dtype { ref dtype, .. }) if dtype == bad),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn constants_sizes_and_float16() {
        assert_eq!(Dtype::INT32, Dtype::parse("int32").unwrap());
        assert_eq!(Dtype::INT8, Dtype::parse("|i1").unwrap());
        assert_eq!(Dtype::UINT8, Dtype::parse("Du1").unwrap());
        assert!(matches!(Dtype::parse("<f2"), Err(OamapError::Dtype { .. })));
        for bad in ["Df2", "Ds4"] {
            assert!(
                matches!(Dtype::parse(bad), Err(OamapError::Dtype { ref dtype, .. }) if dtype == bad),
                "{bad:?}"
            );
        }
        for (kind, size, name) in [(DtypeKind::Float, 2, "Float2"), (DtypeKind::Bytes, 0, "Bytes0")] {
            assert!(matches!(
                Dtype::new(kind, size, false),
                Err(OamapError::Dtype { ref dtype, ref reason }) if dtype == name && reason == "unsupported item size"
            ));
        }
        let be = Dtype::new(DtypeKind::UInt, 1, true).unwrap();
        assert!(!be.big_endian(), "one-byte types have no byte order");
        assert_eq!(Dtype::parse(">S3").unwrap().code(), "DS3");
    }
}
