//! litdata's serializers as token leaves (Lightning-AI/litdata `src/litdata/streaming/serializers.py`,
//! `constants.py`: `_NUMPY_DTYPES_MAPPING`, `_TORCH_DTYPES_MAPPING`): which leaves can hold
//! token ids and how ([`Leaf`]).

use guideloom_formats::Primitive;

use crate::error::ForeignError;

/// litdata's numpy dtype table (`_NUMPY_DTYPES_MAPPING`).
pub(crate) fn numpy_dtype(i: u64) -> std::result::Result<Primitive, ForeignError> {
    let name = match i {
        0 => return Ok(Primitive::I8),
        1 => return Ok(Primitive::I16),
        2 => return Ok(Primitive::I32),
        3 => return Ok(Primitive::I64),
        4 => return Ok(Primitive::U8),
        5 => return Ok(Primitive::U16),
        6 => return Ok(Primitive::U32),
        7 => return Ok(Primitive::U64),
        8 => "float16",
        9 => "float32",
        10 => "float64",
        11 => "complex64",
        12 => "complex128",
        13 => "bool",
        14 => "object",
        15 => "bytes",
        16 => "str",
        17 => "void",
        _ => return Err(ForeignError::UnsupportedTokenDType { dtype: format!("numpy dtype index {i}") }),
    };
    Err(ForeignError::UnsupportedTokenDType { dtype: name.into() })
}

/// litdata's torch dtype table (`_TORCH_DTYPES_MAPPING`; aliases share an entry).
pub(crate) fn torch_dtype(i: u64) -> std::result::Result<Primitive, ForeignError> {
    let name = match i {
        11 => return Ok(Primitive::U8),
        12 => return Ok(Primitive::I8),
        13 | 14 => return Ok(Primitive::I16),
        15 | 16 => return Ok(Primitive::I32),
        17 | 18 => return Ok(Primitive::I64),
        20 => return Ok(Primitive::U16),
        0 | 1 => "float32",
        2 | 3 => "float64",
        4 | 5 => "complex64",
        6 | 7 => "complex128",
        8 | 9 => "float16",
        10 => "bfloat16",
        19 => "bool",
        _ => return Err(ForeignError::UnsupportedTokenDType { dtype: format!("torch dtype index {i}") }),
    };
    Err(ForeignError::UnsupportedTokenDType { dtype: name.into() })
}

/// How the token leaf stores values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Leaf {
    /// Raw values of a known dtype.
    Raw(Primitive),
    /// `numpy`: a u32 header (dtype index, ndim, dims) before the values.
    Numpy,
    /// `tensor`: the same header with the torch dtype index.
    Tensor,
}

/// The token leaf a serializer name gives, `None` for a serializer that cannot hold tokens.
pub(crate) fn leaf(name: &str) -> std::result::Result<Option<Leaf>, ForeignError> {
    let unknown = || ForeignError::UnknownEncoding { column: "data_format".into(), encoding: name.into() };
    if let Some(i) = name.strip_prefix("no_header_numpy:") {
        return Ok(Some(Leaf::Raw(numpy_dtype(i.parse().map_err(|_| unknown())?)?)));
    }
    if let Some(i) = name.strip_prefix("no_header_tensor:") {
        return Ok(Some(Leaf::Raw(torch_dtype(i.parse().map_err(|_| unknown())?)?)));
    }
    match name {
        "numpy" => Ok(Some(Leaf::Numpy)),
        "tensor" => Ok(Some(Leaf::Tensor)),
        "pickle" => Err(ForeignError::UnsafeEncoding { column: "data_format".into(), encoding: name.into() }),
        "str" | "bool" | "int" | "float" | "bytes" | "pil" | "jpeg" | "jpeg_array" | "video" | "file"
        | "tifffile" => Ok(None),
        _ => Err(unknown()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unsupported(dtype: &str) -> std::result::Result<Primitive, ForeignError> {
        Err(ForeignError::UnsupportedTokenDType { dtype: dtype.into() })
    }

    /// Issue 33 (mutants deleting arms of `numpy_dtype`): every index of litdata's
    /// `_NUMPY_DTYPES_MAPPING` (`constants.py`: the enumeration of `_NUMPY_SCTYPES`, written
    /// out here in its order), the integer ones read as tokens, the others refused by name;
    /// past the table, by index.
    #[test]
    fn issue33_foreign_litdata_numpy_dtype_indices_are_litdata_s() {
        use Primitive::*;
        let ints = [I8, I16, I32, I64, U8, U16, U32, U64];
        for (i, p) in ints.into_iter().enumerate() {
            assert_eq!(numpy_dtype(i as u64), Ok(p), "{i}");
        }
        let others = [
            "float16",
            "float32",
            "float64",
            "complex64",
            "complex128",
            "bool",
            "object",
            "bytes",
            "str",
            "void",
        ];
        for (i, name) in others.into_iter().enumerate() {
            assert_eq!(numpy_dtype(8 + i as u64), unsupported(name), "{}", 8 + i);
        }
        assert_eq!(numpy_dtype(18), unsupported("numpy dtype index 18"));
    }

    /// The same for `_TORCH_DTYPES_MAPPING` (aliases such as `torch.short` share their
    /// dtype's entry; 20, `torch.uint16`, is litdata 0.2.76's, which wrote the samples).
    #[test]
    fn issue33_foreign_litdata_torch_dtype_indices_are_litdata_s() {
        use Primitive::*;
        let table: [(u64, std::result::Result<Primitive, &str>); 21] = [
            (0, Err("float32")),
            (1, Err("float32")),
            (2, Err("float64")),
            (3, Err("float64")),
            (4, Err("complex64")),
            (5, Err("complex64")),
            (6, Err("complex128")),
            (7, Err("complex128")),
            (8, Err("float16")),
            (9, Err("float16")),
            (10, Err("bfloat16")),
            (11, Ok(U8)),
            (12, Ok(I8)),
            (13, Ok(I16)),
            (14, Ok(I16)),
            (15, Ok(I32)),
            (16, Ok(I32)),
            (17, Ok(I64)),
            (18, Ok(I64)),
            (19, Err("bool")),
            (20, Ok(U16)),
        ];
        for (i, want) in table {
            assert_eq!(
                torch_dtype(i),
                want.map_err(|d| ForeignError::UnsupportedTokenDType { dtype: d.into() }),
                "{i}"
            );
        }
        assert_eq!(torch_dtype(21), unsupported("torch dtype index 21"));
    }

    /// Issue 33 (mutants deleting `leaf`'s arms): each serializer name of litdata's
    /// `_SERIALIZERS` gives its leaf: the headerless arrays with their dtype index, `numpy`
    /// and `tensor` with a header, `pickle` refused as unsafe, the others no token leaf; an
    /// unknown name or index is refused.
    #[test]
    fn issue33_foreign_litdata_serializer_names_give_their_leaves() {
        assert_eq!(leaf("no_header_numpy:5"), Ok(Some(Leaf::Raw(Primitive::U16))));
        assert_eq!(leaf("no_header_tensor:16"), Ok(Some(Leaf::Raw(Primitive::I32))));
        assert_eq!(leaf("numpy"), Ok(Some(Leaf::Numpy)));
        assert_eq!(leaf("tensor"), Ok(Some(Leaf::Tensor)));
        assert_eq!(
            leaf("pickle"),
            Err(ForeignError::UnsafeEncoding { column: "data_format".into(), encoding: "pickle".into() })
        );
        for name in
            ["str", "bool", "int", "float", "bytes", "pil", "jpeg", "jpeg_array", "video", "file", "tifffile"]
        {
            assert_eq!(leaf(name), Ok(None), "{name}");
        }
        for name in ["numpy:5", "no_header_numpy:x", "Tensor"] {
            assert_eq!(
                leaf(name),
                Err(ForeignError::UnknownEncoding { column: "data_format".into(), encoding: name.into() }),
                "{name}"
            );
        }
        assert_eq!(
            leaf("no_header_numpy:14"),
            Err(ForeignError::UnsupportedTokenDType { dtype: "object".into() })
        );
    }
}
