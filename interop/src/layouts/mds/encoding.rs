//! MDS column encodings (mosaicml/streaming `streaming/base/format/mds/encodings.py`): which
//! ones exist, which can hold token ids and how ([`TokenEncoding`]), and which column is the
//! token column.

use guideloom_formats::Primitive;

use crate::error::ForeignError;
use crate::options::ForeignOptions;

/// Encodings MDS knows that are safe to skip (not token columns).
const OTHER_ENCODINGS: [&str; 24] = [
    "str",
    "int",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "int8",
    "int16",
    "int32",
    "int64",
    "float16",
    "float32",
    "float64",
    "str_int",
    "str_float",
    "str_decimal",
    "json",
    "pil",
    "jpeg",
    "png",
    "jpeg_array",
    "jpegarray",
    "list[pil]",
    "list[jpeg]",
];

/// How the token column is encoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TokenEncoding {
    /// `bytes`: raw values of the configured dtype.
    Bytes(Primitive),
    /// `ndarray:<dtype>:<shape>`: values only, fixed size.
    Fixed(Primitive),
    /// `ndarray:<dtype>`: shape header, then values.
    Typed(Primitive),
    /// `ndarray`: dtype byte, shape header, values.
    Untyped,
}

/// An MDS ndarray dtype name's primitive (`Err` names it).
fn ndarray_dtype(name: &str) -> std::result::Result<Primitive, ForeignError> {
    Ok(match name {
        "uint8" => Primitive::U8,
        "int8" => Primitive::I8,
        "uint16" => Primitive::U16,
        "int16" => Primitive::I16,
        "uint32" => Primitive::U32,
        "int32" => Primitive::I32,
        "uint64" => Primitive::U64,
        "int64" => Primitive::I64,
        _ => return Err(ForeignError::UnsupportedTokenDType { dtype: name.to_string() }),
    })
}

/// The dtype of an untyped ndarray's code byte (`encodings.py` `_dtype2code` order).
pub(crate) fn ndarray_code(code: u8) -> std::result::Result<Primitive, ForeignError> {
    let name = match code {
        8 => "uint8",
        9 => "int8",
        16 => "uint16",
        17 => "int16",
        18 => "float16",
        32 => "uint32",
        33 => "int32",
        34 => "float32",
        64 => "uint64",
        65 => "int64",
        66 => "float64",
        c => return Err(ForeignError::UnsupportedTokenDType { dtype: format!("ndarray dtype code {c}") }),
    };
    ndarray_dtype(name)
}

/// Whether `enc` is an encoding MDS writes (the token ones included).
pub(crate) fn known_encoding(enc: &str) -> bool {
    if enc == "bytes" || enc == "ndarray" || OTHER_ENCODINGS.contains(&enc) || enc == "list[png]" {
        return true;
    }
    let mut p = enc.split(':');
    p.next() == Some("ndarray") && p.next().is_some_and(|d| !d.is_empty()) && p.count() <= 1
}

/// The index of the token column: the configured one, else `tokens`, else the only column
/// that can hold tokens.
pub(crate) fn token_column(
    names: &[String],
    encodings: &[String],
    options: &ForeignOptions,
) -> std::result::Result<usize, ForeignError> {
    let can_hold = |e: &str| e == "bytes" || e == "ndarray" || e.starts_with("ndarray:");
    if let Some(c) = &options.column {
        return names.iter().position(|n| n == c).ok_or_else(|| ForeignError::TokenColumn {
            reason: format!("no column {c:?} (--column; the columns: {names:?})"),
        });
    }
    if let Some(i) = names.iter().position(|n| n == "tokens") {
        return Ok(i);
    }
    let candidates: Vec<usize> = (0..names.len()).filter(|&i| can_hold(&encodings[i])).collect();
    match candidates.as_slice() {
        [i] => Ok(*i),
        _ => {
            let named: Vec<&str> = candidates.iter().map(|&i| names[i].as_str()).collect();
            Err(ForeignError::TokenColumn {
                reason: format!(
                    "no `tokens` column, and {} of the {} columns can hold tokens (bytes or ndarray \
                     encodings): {named:?}; name one with --column (ForeignOptions::column)",
                    candidates.len(),
                    names.len()
                ),
            })
        }
    }
}

/// How the token column's encoding stores tokens.
pub(crate) fn token_encoding(
    enc: &str,
    options: &ForeignOptions,
) -> std::result::Result<TokenEncoding, ForeignError> {
    if enc == "bytes" {
        let p = options.dtype.unwrap_or(Primitive::I64);
        if !p.is_integer() {
            return Err(ForeignError::UnsupportedTokenDType { dtype: p.descr().into() });
        }
        return Ok(TokenEncoding::Bytes(p));
    }
    if enc == "ndarray" {
        return Ok(TokenEncoding::Untyped);
    }
    let mut parts = enc.split(':');
    if parts.next() != Some("ndarray") {
        return Err(ForeignError::TokenColumn { reason: format!("encoding {enc} cannot hold token ids") });
    }
    let p = ndarray_dtype(parts.next().unwrap_or(""))?;
    Ok(if parts.next().is_some() { TokenEncoding::Fixed(p) } else { TokenEncoding::Typed(p) })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 33 (mutants deleting `ndarray_dtype`'s arms): every value dtype code of
    /// Streaming's `NDArray._int2value_dtype` (`encodings.py`, written out here): the integer
    /// ones read as tokens, the float ones refused by name, any other code by number.
    #[test]
    fn issue33_foreign_mds_ndarray_dtype_codes_are_streaming_s() {
        use Primitive::*;
        for (code, p) in [(8, U8), (9, I8), (16, U16), (17, I16), (32, U32), (33, I32), (64, U64), (65, I64)]
        {
            assert_eq!(ndarray_code(code), Ok(p), "{code}");
        }
        for (code, name) in [(18, "float16"), (34, "float32"), (66, "float64")] {
            assert_eq!(ndarray_code(code), Err(ForeignError::UnsupportedTokenDType { dtype: name.into() }));
        }
        for code in [0, 7, 10, 35, 67, 255] {
            assert_eq!(
                ndarray_code(code),
                Err(ForeignError::UnsupportedTokenDType { dtype: format!("ndarray dtype code {code}") })
            );
        }
    }

    /// The same names as encodings: `ndarray:<dtype>` (shape header) and
    /// `ndarray:<dtype>:<shape>` (fixed) for each integer dtype.
    #[test]
    fn issue33_foreign_mds_typed_ndarray_encodings_name_their_dtype() {
        use Primitive::*;
        let options = ForeignOptions::new();
        for (name, p) in [
            ("uint8", U8),
            ("int8", I8),
            ("uint16", U16),
            ("int16", I16),
            ("uint32", U32),
            ("int32", I32),
            ("uint64", U64),
            ("int64", I64),
        ] {
            assert_eq!(token_encoding(&format!("ndarray:{name}"), &options), Ok(TokenEncoding::Typed(p)));
            assert_eq!(token_encoding(&format!("ndarray:{name}:8"), &options), Ok(TokenEncoding::Fixed(p)));
        }
        assert_eq!(
            token_encoding("ndarray:float32", &options),
            Err(ForeignError::UnsupportedTokenDType { dtype: "float32".into() })
        );
    }

    /// Issue 33 (mutant of `known_encoding`'s `&&` -> `||`): an encoding with arguments is
    /// known only as `ndarray:<dtype>[:<shape>]`; another name with arguments is not.
    #[test]
    fn issue33_foreign_mds_known_encodings_with_arguments() {
        for enc in
            ["ndarray", "ndarray:uint16", "ndarray:int32:4,2", "bytes", "str", "list[png]", "jpegarray"]
        {
            assert!(known_encoding(enc), "{enc}");
        }
        for enc in
            ["ndarray:", "ndarray:int32:4:2", "str:uint16", "bytes:int64", "pkl", "ndarrays:uint16", ""]
        {
            assert!(!known_encoding(enc), "{enc}");
        }
    }

    /// Issue 33 (mutants of `token_column`'s `can_hold` and its one-candidate arm): without a
    /// configured column or a `tokens` column, the token column is the only `bytes`, `ndarray`
    /// or `ndarray:...` column; none or two are refused naming the candidates.
    #[test]
    fn issue33_foreign_mds_the_token_column_is_the_only_one_that_can_hold_tokens() {
        let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let none = ForeignOptions::new();
        for enc in ["bytes", "ndarray", "ndarray:uint16", "ndarray:int32:8"] {
            assert_eq!(token_column(&names(&["id", "ids"]), &names(&["int", enc]), &none), Ok(1), "{enc}");
            assert_eq!(token_column(&names(&["ids", "id"]), &names(&[enc, "str"]), &none), Ok(0), "{enc}");
        }
        let refused = |n: usize, of: usize, named: &str| {
            Err(ForeignError::TokenColumn {
                reason: format!(
                    "no `tokens` column, and {n} of the {of} columns can hold tokens (bytes or ndarray \
                     encodings): {named}; name one with --column (ForeignOptions::column)"
                ),
            })
        };
        assert_eq!(
            token_column(&names(&["a", "b"]), &names(&["bytes", "ndarray"]), &none),
            refused(2, 2, r#"["a", "b"]"#)
        );
        assert_eq!(token_column(&names(&["a", "b"]), &names(&["str", "int"]), &none), refused(0, 2, "[]"));
        // `tokens` wins over the candidates; a configured column over `tokens`.
        let three = names(&["a", "tokens", "c"]);
        let encs = names(&["bytes", "ndarray:uint16", "ndarray"]);
        assert_eq!(token_column(&three, &encs, &none), Ok(1));
        assert_eq!(token_column(&three, &encs, &ForeignOptions::new().column("c")), Ok(2));
        assert_eq!(
            token_column(&three, &encs, &ForeignOptions::new().column("d")),
            Err(ForeignError::TokenColumn {
                reason: r#"no column "d" (--column; the columns: ["a", "tokens", "c"])"#.into()
            })
        );
    }
}
