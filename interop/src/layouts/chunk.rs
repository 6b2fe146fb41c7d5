//! The item-offset table at the head of MDS shards and litdata chunks, checked against the
//! file's size.

use crate::error::ForeignError;

/// Checks a chunk's table of `n + 1` item offsets (MDS shards, litdata chunks): each inside
/// `[header, size]`, never decreasing, the last exactly `size` (the end of the file).
///
/// # Errors
/// [`ForeignError::OffsetOutOfRange`] naming the entry, [`ForeignError::OffsetsNotMonotonic`].
pub(crate) fn check_offsets(
    offsets: &[u64],
    header: u64,
    size: u64,
) -> std::result::Result<(), ForeignError> {
    for (k, &o) in offsets.iter().enumerate() {
        if o > size || o < header {
            return Err(ForeignError::OffsetOutOfRange { entry: k as u64, offset: o, min: header, size });
        }
        if k > 0 && o < offsets[k - 1] {
            return Err(ForeignError::OffsetsNotMonotonic { entry: k as u64 });
        }
    }
    match offsets.last() {
        Some(&last) if last != size => Err(ForeignError::OffsetOutOfRange {
            entry: offsets.len() as u64 - 1,
            offset: last,
            min: header,
            size,
        }),
        _ => Ok(()),
    }
}
