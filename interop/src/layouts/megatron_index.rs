//! What a Megatron-Core `.idx` records beyond tokens and documents: [`MegatronIndex`] (the
//! sequences, their pointers, the document indices and the multimodal modes), as validated by
//! the Megatron reader (`crate::layouts::megatron`).

use guideloom_storage::{StorageError, Window};

/// A Megatron index as validated on open: the sequences (one `add_item` each), their byte
/// pointers, the document indices and, for multimodal datasets, the modes.
///
/// Sequence `i` is tokens `[sequence_starts[i], sequence_starts[i + 1])` of the stream;
/// document `j` is sequences `[document_indices[j], document_indices[j + 1])` (possibly
/// none: an empty document).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MegatronIndex {
    /// The header's dtype code.
    pub(crate) dtype_code: u8,
    /// Tokens per sequence.
    pub(crate) lengths: Vec<u32>,
    /// Byte offset of each sequence in the `.bin`.
    pub(crate) pointers: Vec<u64>,
    /// `sequences + 1` token offsets of the sequences in the stream, from 0.
    pub(crate) starts: Vec<u64>,
    /// The sequence each document starts at, the last `sequences`.
    pub(crate) document_indices: Vec<u64>,
    /// One mode per sequence (multimodal datasets).
    pub(crate) modes: Option<Vec<i8>>,
    /// Pointers rebuilt by `repair_pointers`.
    pub(crate) repaired: u64,
}

impl MegatronIndex {
    /// The dtype code of the header (1 u8, 2 i8, 3 i16, 4 i32, 5 i64, 8 u16).
    pub fn dtype_code(&self) -> u8 {
        self.dtype_code
    }

    /// Sequences in the index (`N`).
    pub fn sequence_count(&self) -> u64 {
        self.lengths.len() as u64
    }

    /// Tokens per sequence.
    pub fn sequence_lengths(&self) -> &[u32] {
        &self.lengths
    }

    /// Byte offset of each sequence in the `.bin` (validated against the lengths, or rebuilt
    /// from them with `repair_pointers`).
    pub fn sequence_pointers(&self) -> &[u64] {
        &self.pointers
    }

    /// The sequence each document starts at; `documents + 1` entries, the last `N`.
    pub fn document_indices(&self) -> &[u64] {
        &self.document_indices
    }

    /// The multimodal modes (one per sequence), when opened with `multimodal`.
    pub fn modes(&self) -> Option<&[i8]> {
        self.modes.as_deref()
    }

    /// How many pointers `repair_pointers` rebuilt (0 when none differed or repair was off).
    pub fn repaired_pointers(&self) -> u64 {
        self.repaired
    }

    /// Sequence `i` as a window of the stream; `None` past the end.
    pub fn sequence(&self, i: u64) -> Option<Window> {
        let i = usize::try_from(i).ok()?;
        let (s, e) = (*self.starts.get(i)?, *self.starts.get(i.checked_add(1)?)?);
        Some(Window::new(s, e - s))
    }

    /// Every sequence as a window of the stream.
    pub fn sequence_windows(&self) -> Vec<Window> {
        self.starts.windows(2).map(|p| Window::new(p[0], p[1] - p[0])).collect()
    }

    /// Megatron's `IndexedDataset.get(idx, offset, length)`: `length` tokens of sequence
    /// `sequence` from token `offset` of it, as a window of the stream (`length` `None`: to
    /// the sequence's end).
    ///
    /// # Errors
    /// [`StorageError::OutOfRange`] when the sequence does not exist or the range passes its
    /// end.
    pub fn sequence_range(
        &self,
        sequence: u64,
        offset: u64,
        length: Option<u64>,
    ) -> Result<Window, StorageError> {
        let total = self.sequence_count();
        let seq = self.sequence(sequence).ok_or(StorageError::OutOfRange {
            what: "sequence",
            start: sequence,
            len: 1,
            total,
        })?;
        let len = length.unwrap_or(seq.len.saturating_sub(offset));
        match offset.checked_add(len) {
            Some(end) if end <= seq.len => Ok(Window::new(seq.offset + offset, len)),
            _ => Err(StorageError::OutOfRange {
                what: "range of a sequence",
                start: offset,
                len,
                total: seq.len,
            }),
        }
    }
}
