use std::borrow::Cow;

use serde_json::Value;

use crate::{Dtype, Element, FormatError};

/// The stored bytes of a contiguous range of a stream, handed to [`StreamFormat::unpack`].
///
/// (Storage readers name the range itself, an element offset and length, with
/// `guideloom_storage::Window`; this is what such a range holds once read.) `bytes` holds the window's elements back to back (`len() * itemsize` bytes, little-endian).
/// The window may cross shard boundaries: segment `i` is `shard_lengths()[i]` elements long and
/// comes from shard `shards()[i]`; segments are in stream order and never empty.
#[derive(Debug, Clone, Copy)]
pub struct RawWindow<'a> {
    bytes: &'a [u8],
    itemsize: u64,
    shard_lengths: &'a [u64],
    shards: &'a [u64],
}

impl<'a> RawWindow<'a> {
    /// Describes a window.
    ///
    /// # Errors
    /// [`FormatError::BadWindow`] when `shard_lengths` and `shards` differ in length, or the
    /// segment lengths do not add up to `bytes.len() / itemsize`.
    pub fn new(
        bytes: &'a [u8],
        itemsize: u64,
        shard_lengths: &'a [u64],
        shards: &'a [u64],
    ) -> Result<Self, FormatError> {
        if shard_lengths.len() != shards.len() {
            return Err(FormatError::BadWindow(format!(
                "{} segment lengths but {} segment shards",
                shard_lengths.len(),
                shards.len()
            )));
        }
        let total: u64 = shard_lengths
            .iter()
            .try_fold(0u64, |a, &l| a.checked_add(l))
            .ok_or_else(|| FormatError::BadWindow("segment lengths overflow u64".into()))?;
        if itemsize == 0 || total.checked_mul(itemsize) != Some(bytes.len() as u64) {
            return Err(FormatError::BadWindow(format!(
                "{} bytes do not hold {total} elements of {itemsize} bytes",
                bytes.len()
            )));
        }
        Ok(RawWindow { bytes, itemsize, shard_lengths, shards })
    }

    /// The window's raw little-endian bytes.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Size of one element in bytes.
    pub fn itemsize(&self) -> u64 {
        self.itemsize
    }

    /// Number of elements in the window.
    pub fn len(&self) -> u64 {
        self.bytes.len() as u64 / self.itemsize
    }

    /// Whether the window holds no element.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Length in elements of each segment, in stream order.
    pub fn shard_lengths(&self) -> &'a [u64] {
        self.shard_lengths
    }

    /// Shard id of each segment, parallel to [`RawWindow::shard_lengths`].
    pub fn shards(&self) -> &'a [u64] {
        self.shards
    }

    /// The elements as a typed slice: borrowed when the bytes are aligned for `E`, copied
    /// otherwise.
    ///
    /// # Errors
    /// [`FormatError::BadWindow`] when `size_of::<E>()` differs from the window's itemsize.
    pub fn elements<E: Element>(&self) -> Result<Cow<'a, [E]>, FormatError> {
        if std::mem::size_of::<E>() as u64 != self.itemsize {
            return Err(FormatError::BadWindow(format!(
                "element type of {} bytes read from a window of {}-byte elements",
                std::mem::size_of::<E>(),
                self.itemsize
            )));
        }
        Ok(match bytemuck::try_cast_slice(self.bytes) {
            Ok(s) => Cow::Borrowed(s),
            Err(_) => Cow::Owned(bytemuck::pod_collect_to_vec(self.bytes)),
        })
    }
}

/// A format for stream storages: fixed-size elements of one [`Dtype`].
///
/// `pack` turns one record into elements (appended as bytes to the writer's buffer);
/// `unpack` decodes a [`RawWindow`] of the stream into the reader's output. Input and output
/// types may differ. The storage records [`StreamFormat::name`], [`StreamFormat::params`] and
/// [`StreamFormat::dtype`] in its manifest and refuses to reopen with another dtype.
pub trait StreamFormat: Send + Sync {
    /// What a writer appends (for example `[u32]` token ids).
    type Input: ?Sized;
    /// What a reader returns for one window.
    type Output: Send;

    /// Format name stored in the manifest (for example `"tokens"`).
    fn name(&self) -> &str;

    /// Format parameters stored in the manifest (default: JSON `null`).
    fn params(&self) -> Value {
        Value::Null
    }

    /// The element dtype.
    fn dtype(&self) -> Dtype;

    /// Appends the elements of `record` to `out` as little-endian bytes and returns how many
    /// elements were appended.
    ///
    /// # Errors
    /// A [`FormatError`] when the record cannot be stored; `out` may then hold a partial
    /// record, which the storage discards.
    fn pack(&self, record: &Self::Input, out: &mut Vec<u8>) -> Result<u64, FormatError>;

    /// Decodes a window.
    ///
    /// # Errors
    /// A [`FormatError`] when the bytes cannot be decoded.
    fn unpack(&self, window: &RawWindow<'_>) -> Result<Self::Output, FormatError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_checks_segments() {
        let b = [0u8; 8];
        assert!(RawWindow::new(&b, 2, &[1, 3], &[0, 2]).is_ok());
        assert!(matches!(RawWindow::new(&b, 2, &[1, 2], &[0, 2]), Err(FormatError::BadWindow(_))));
        assert!(matches!(RawWindow::new(&b, 2, &[4], &[0, 2]), Err(FormatError::BadWindow(_))));
        assert!(matches!(RawWindow::new(&b, 0, &[], &[]), Err(FormatError::BadWindow(_))));
        assert!(matches!(RawWindow::new(&b, 2, &[u64::MAX, 2], &[0, 1]), Err(FormatError::BadWindow(_))));
    }

    #[test]
    fn unaligned_elements_are_copied() {
        let b = [1u8, 0, 2, 0, 3];
        let w = RawWindow::new(&b[1..], 2, &[2], &[0]).unwrap();
        assert_eq!(&*w.elements::<u16>().unwrap(), &[512u16, 768]);
        assert!(matches!(
            w.elements::<u32>(),
            Err(crate::FormatError::BadWindow(ref r)) if r == "element type of 4 bytes read from a window of 2-byte elements"
        ));
    }
}
