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

#[cfg(test)]
mod tests {
    use super::*;

    fn out_of_range(entry: u64, offset: u64) -> Result<(), ForeignError> {
        Err(ForeignError::OffsetOutOfRange { entry, offset, min: 8, size: 20 })
    }

    /// Issue 33 (mutant of the order check `<` -> `<=`): two equal offsets are an empty item,
    /// read (MDS and litdata write one for an empty sample); one offset below the one before
    /// is refused naming it.
    #[test]
    fn issue33_foreign_chunk_offsets_may_repeat_but_not_decrease() {
        assert_eq!(check_offsets(&[8, 8, 20], 8, 20), Ok(()));
        assert_eq!(check_offsets(&[8, 12, 12, 20], 8, 20), Ok(()));
        assert_eq!(
            check_offsets(&[8, 12, 11, 20], 8, 20),
            Err(ForeignError::OffsetsNotMonotonic { entry: 2 })
        );
    }

    /// Issue 33 (mutant of the last offset's check `last != size` -> `false`): the table must
    /// end exactly at the end of the file: one byte short (trailing bytes no item owns) is
    /// refused naming the last entry; past the end is refused by the range check.
    #[test]
    fn issue33_foreign_chunk_offsets_end_exactly_at_the_file_s_end() {
        assert_eq!(check_offsets(&[8, 20], 8, 20), Ok(()));
        assert_eq!(check_offsets(&[8, 19], 8, 20), out_of_range(1, 19));
        assert_eq!(check_offsets(&[8, 21], 8, 20), out_of_range(1, 21));
        assert_eq!(check_offsets(&[8, 8], 8, 20), out_of_range(1, 8));
    }

    /// The range `[header, size]` on both sides: the header itself is an offset, one below it
    /// is not.
    #[test]
    fn issue33_foreign_chunk_offsets_start_at_the_header() {
        assert_eq!(check_offsets(&[8, 20], 8, 20), Ok(()));
        assert_eq!(check_offsets(&[7, 20], 8, 20), out_of_range(0, 7));
    }
}
