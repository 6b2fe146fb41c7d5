use serde_json::{json, Value};

use crate::{Dtype, FormatError, Primitive, RawWindow, StreamFormat};

/// Token ids of any integer dtype chosen at run time (`u8`, `i8`, `u16`, `i16`, `u32`, `i32`,
/// `u64`, `i64`), read and written as `i64`: the format for token datasets whose dtype is only
/// known once their files are opened (Megatron's int32 and int64 indexed datasets, LLM
/// Foundry's int32/int64 MDS columns, NumPy arrays), and for storages of signed ids.
///
/// `pack` refuses an id the dtype cannot hold ([`FormatError::TokenOutOfRange`], naming the
/// id and its position; a negative id is reported as its two's-complement `u64`); `unpack`
/// widens each little-endian element to `i64` (sign-extending signed dtypes) and refuses a
/// `u64` id above `i64::MAX`. Manifest name: `"int_tokens"`.
///
/// ```
/// use guideloom_formats::{IntTokenFormat, Primitive, RawWindow, StreamFormat};
/// let f = IntTokenFormat::new(Primitive::I32)?;
/// let mut bytes = Vec::new();
/// assert_eq!(f.pack(&[128_000, -1, 7], &mut bytes)?, 3);
/// let window = RawWindow::new(&bytes, 4, &[3], &[0])?;
/// assert_eq!(f.unpack(&window)?, vec![128_000, -1, 7]);
/// assert!(matches!(IntTokenFormat::new(Primitive::F32), Err(guideloom_formats::FormatError::Other(_))));
/// # Ok::<(), guideloom_formats::FormatError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntTokenFormat {
    dtype: Primitive,
}

impl IntTokenFormat {
    /// Token ids stored as `dtype`.
    ///
    /// # Errors
    /// [`FormatError::Other`] when `dtype` is not an integer type.
    pub fn new(dtype: Primitive) -> Result<Self, FormatError> {
        if !dtype.is_integer() {
            return Err(FormatError::Other(format!(
                "token ids need an integer dtype, not {}",
                dtype.descr()
            )));
        }
        Ok(IntTokenFormat { dtype })
    }

    /// The stored dtype.
    pub fn primitive(&self) -> Primitive {
        self.dtype
    }

    /// Whether the stored dtype is signed.
    pub fn signed(&self) -> bool {
        matches!(self.dtype, Primitive::I8 | Primitive::I16 | Primitive::I32 | Primitive::I64)
    }

    /// The smallest and largest id the dtype holds, as `i128`.
    fn range(&self) -> (i128, i128) {
        let bits = 8 * self.dtype.size() as u32;
        if self.signed() {
            (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
        } else {
            (0, (1i128 << bits) - 1)
        }
    }
}

impl StreamFormat for IntTokenFormat {
    type Input = [i64];
    type Output = Vec<i64>;

    fn name(&self) -> &str {
        "int_tokens"
    }

    fn params(&self) -> Value {
        json!({})
    }

    fn dtype(&self) -> Dtype {
        Dtype::Primitive(self.dtype)
    }

    fn pack(&self, record: &[i64], out: &mut Vec<u8>) -> Result<u64, FormatError> {
        let (lo, hi) = self.range();
        let size = self.dtype.size() as usize;
        out.reserve(record.len() * size);
        for (position, &id) in record.iter().enumerate() {
            if !(lo..=hi).contains(&i128::from(id)) {
                return Err(FormatError::TokenOutOfRange {
                    id: id as u64,
                    position: position as u64,
                    dtype: self.dtype.descr().to_string(),
                });
            }
            out.extend_from_slice(&id.to_le_bytes()[..size]);
        }
        Ok(record.len() as u64)
    }

    fn unpack(&self, window: &RawWindow<'_>) -> Result<Vec<i64>, FormatError> {
        let size = self.dtype.size() as usize;
        if window.itemsize() != size as u64 {
            return Err(FormatError::BadWindow(format!(
                "{}-byte ids read from a window of {}-byte elements",
                size,
                window.itemsize()
            )));
        }
        let signed = self.signed();
        window
            .bytes()
            .chunks_exact(size)
            .enumerate()
            .map(|(position, b)| {
                let mut le = [0u8; 8];
                le[..size].copy_from_slice(b);
                let v = u64::from_le_bytes(le);
                let shift = 64 - 8 * size as u32;
                if signed {
                    Ok(((v << shift) as i64) >> shift)
                } else {
                    i64::try_from(v).map_err(|_| FormatError::TokenOutOfRange {
                        id: v,
                        position: position as u64,
                        dtype: "<i8".into(),
                    })
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_integer_dtype_round_trips_its_extremes() {
        for p in [
            Primitive::U8,
            Primitive::I8,
            Primitive::U16,
            Primitive::I16,
            Primitive::U32,
            Primitive::I32,
            Primitive::I64,
        ] {
            let f = IntTokenFormat::new(p).unwrap();
            let (lo, hi) = f.range();
            let ids = [lo as i64, 0, hi as i64];
            let mut out = Vec::new();
            f.pack(&ids, &mut out).unwrap();
            let w = RawWindow::new(&out, p.size(), &[3], &[0]).unwrap();
            assert_eq!(f.unpack(&w).unwrap(), ids, "{p:?}");
            let past = if hi as i64 == i64::MAX { None } else { Some(hi as i64 + 1) };
            if let Some(past) = past {
                assert!(matches!(
                    f.pack(&[0, past], &mut out),
                    Err(FormatError::TokenOutOfRange { position: 1, .. })
                ));
            }
        }
        let f = IntTokenFormat::new(Primitive::U64).unwrap();
        let bytes = u64::MAX.to_le_bytes();
        let w = RawWindow::new(&bytes, 8, &[1], &[0]).unwrap();
        assert!(matches!(f.unpack(&w), Err(FormatError::TokenOutOfRange { id: u64::MAX, .. })));
        assert!(matches!(
            IntTokenFormat::new(Primitive::Bool),
            Err(FormatError::Other(ref r)) if r.starts_with("token ids need an integer dtype, not ")
        ));
    }
}
