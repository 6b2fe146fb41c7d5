//! Primitive dtypes of OAMap arrays: numpy names, numpy `descr` strings and OAMap `D` codes.

use std::fmt;

use super::OamapError;

/// The kind of a primitive value (numpy's kind letter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Kind {
    /// `b`: one-byte boolean, 0 or 1.
    Bool,
    /// `i`: two's-complement signed integer of 1, 2, 4 or 8 bytes.
    Int,
    /// `u`: unsigned integer of 1, 2, 4 or 8 bytes.
    UInt,
    /// `f`: IEEE float of 4 or 8 bytes.
    Float,
    /// `c`: complex of 8 or 16 bytes (two floats: real, imaginary).
    Complex,
    /// `S`: fixed-width byte string of `size` bytes (NUL-padded).
    Bytes,
}

/// A primitive dtype: kind, item size in bytes and byte order.
///
/// One-byte types and byte strings have no byte order (`big_endian` is false for them).
/// Names follow numpy (`int32`, `>float64`, `S4`); OAMap array names encode the dtype as a
/// `D` code (`Di4`, `DF8`, `DS4`: the kind letter is upper-case when big-endian).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OaDtype {
    /// The kind of value.
    pub kind: Kind,
    /// Size of one value, in bytes.
    pub size: usize,
    /// Whether multi-byte values are stored big-endian.
    pub big_endian: bool,
}

impl OaDtype {
    /// `int32`, the dtype of every starts, stops, mask, offsets and positions array.
    pub const INT32: OaDtype = OaDtype { kind: Kind::Int, size: 4, big_endian: false };
    /// `int8`, the dtype of union tags.
    pub const INT8: OaDtype = OaDtype { kind: Kind::Int, size: 1, big_endian: false };
    /// `uint8`, the content of strings.
    pub const UINT8: OaDtype = OaDtype { kind: Kind::UInt, size: 1, big_endian: false };

    /// Builds a dtype, checking that the size is one numpy has for the kind.
    ///
    /// # Errors
    /// [`OamapError::Dtype`] for an impossible size (`int3`, `float2`, `S0`...).
    pub fn new(kind: Kind, size: usize, big_endian: bool) -> Result<Self, OamapError> {
        let ok = match kind {
            Kind::Bool => size == 1,
            Kind::Int | Kind::UInt => matches!(size, 1 | 2 | 4 | 8),
            Kind::Float => matches!(size, 4 | 8),
            Kind::Complex => matches!(size, 8 | 16),
            Kind::Bytes => size >= 1,
        };
        if !ok {
            return Err(OamapError::Dtype {
                dtype: format!("{kind:?}{size}"),
                reason: "unsupported item size".into(),
            });
        }
        let big_endian = big_endian && size > 1 && kind != Kind::Bytes && kind != Kind::Bool;
        Ok(OaDtype { kind, size, big_endian })
    }

    fn letter(self) -> char {
        match self.kind {
            Kind::Bool => 'b',
            Kind::Int => 'i',
            Kind::UInt => 'u',
            Kind::Float => 'f',
            Kind::Complex => 'c',
            Kind::Bytes => 'S',
        }
    }

    /// Parses a numpy dtype name (`int32`, `>float64`, `bool`, `S4`), a numpy type string
    /// (`<i4`, `>f8`, `|b1`, `|S4`, `f8`) or an OAMap `D` code (`Di4`, `DF8`).
    ///
    /// # Errors
    /// [`OamapError::Dtype`] when the text is none of these.
    pub fn parse(text: &str) -> Result<Self, OamapError> {
        let bad = |reason: &str| OamapError::Dtype { dtype: text.to_string(), reason: reason.to_string() };
        if let Some(code) = text.strip_prefix('D') {
            let mut chars = code.chars();
            let letter = chars.next().ok_or_else(|| bad("empty D code"))?;
            let size: usize = chars.as_str().parse().map_err(|_| bad("D code needs a size"))?;
            let big = letter.is_ascii_uppercase() && letter != 'S';
            let kind = if letter == 'S' { Some(Kind::Bytes) } else { kind_of(letter.to_ascii_lowercase()) }
                .ok_or_else(|| bad("unknown kind letter"))?;
            return OaDtype::new(kind, size, big).map_err(|_| bad("unsupported item size"));
        }
        let (big, rest) = match text.as_bytes().first() {
            Some(b'>') | Some(b'!') => (true, &text[1..]),
            Some(b'<') | Some(b'|') | Some(b'=') => (false, &text[1..]),
            _ => (false, text),
        };
        let named = match rest {
            "bool" | "bool_" | "bool8" => Some((Kind::Bool, 1)),
            "int8" => Some((Kind::Int, 1)),
            "int16" => Some((Kind::Int, 2)),
            "int32" => Some((Kind::Int, 4)),
            "int64" => Some((Kind::Int, 8)),
            "uint8" => Some((Kind::UInt, 1)),
            "uint16" => Some((Kind::UInt, 2)),
            "uint32" => Some((Kind::UInt, 4)),
            "uint64" => Some((Kind::UInt, 8)),
            "float32" => Some((Kind::Float, 4)),
            "float64" => Some((Kind::Float, 8)),
            "complex64" => Some((Kind::Complex, 8)),
            "complex128" => Some((Kind::Complex, 16)),
            _ => None,
        };
        if let Some((kind, size)) = named {
            return OaDtype::new(kind, size, big);
        }
        let mut chars = rest.chars();
        let letter = chars.next().ok_or_else(|| bad("empty dtype"))?;
        let kind = kind_of(letter).ok_or_else(|| bad("unknown dtype"))?;
        let size: usize = chars.as_str().parse().map_err(|_| bad("unknown dtype"))?;
        OaDtype::new(kind, size, big).map_err(|_| bad("unsupported item size"))
    }

    /// numpy's dtype name, with `>` in front for big-endian: `int32`, `>float64`, `bool`, `S4`.
    pub fn name(self) -> String {
        let base = match (self.kind, self.size) {
            (Kind::Bool, _) => "bool".to_string(),
            (Kind::Int, s) => format!("int{}", s * 8),
            (Kind::UInt, s) => format!("uint{}", s * 8),
            (Kind::Float, s) => format!("float{}", s * 8),
            (Kind::Complex, s) => format!("complex{}", s * 8),
            (Kind::Bytes, s) => format!("S{s}"),
        };
        if self.big_endian {
            format!(">{base}")
        } else {
            base
        }
    }

    /// numpy's type string: `<i4`, `>f8`, `|b1`, `|u1`, `|S4`.
    pub fn descr(self) -> String {
        let order = if self.size == 1 || self.kind == Kind::Bytes {
            '|'
        } else if self.big_endian {
            '>'
        } else {
            '<'
        };
        format!("{order}{}{}", self.letter(), self.size)
    }

    /// OAMap's dtype code used in array names: `Di4`, `DF8` (big-endian), `Db1`, `DS4`.
    pub fn code(self) -> String {
        let letter = if self.big_endian { self.letter().to_ascii_uppercase() } else { self.letter() };
        format!("D{letter}{}", self.size)
    }
}

fn kind_of(letter: char) -> Option<Kind> {
    Some(match letter {
        'b' | '?' => Kind::Bool,
        'i' => Kind::Int,
        'u' => Kind::UInt,
        'f' => Kind::Float,
        'c' => Kind::Complex,
        'S' | 'a' => Kind::Bytes,
        _ => return None,
    })
}

impl fmt::Display for OaDtype {
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
            let d = OaDtype::parse(name).unwrap();
            assert_eq!(d.name(), name);
            assert_eq!(d.code(), code);
            assert_eq!(d.descr(), descr);
            assert_eq!(OaDtype::parse(code).unwrap(), d);
            assert_eq!(OaDtype::parse(descr).unwrap(), d);
        }
        assert!(OaDtype::parse("int3").is_err());
        assert!(OaDtype::parse("Dx4").is_err());
        assert!(OaDtype::parse("").is_err());
        assert!(OaDtype::parse("object").is_err());
    }
}
