//! A sequential batch: as read by the producer ([`Raw`], before `map` and collation) and as
//! delivered ([`SequentialBatch`]).

use crate::RecordId;

/// One batch of one rank of a [`SequentialLoader`](crate::sequential::SequentialLoader).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SequentialBatch<T> {
    /// The collated records.
    pub data: T,
    /// The records' identities, in batch order.
    pub records: Vec<RecordId>,
    /// `true` for padding records ([`SequentialEnd::Pad`](crate::sequential::SequentialEnd::Pad)).
    pub padding: Vec<bool>,
    /// The epoch.
    pub epoch: u64,
    /// The batch's step in its epoch.
    pub step: u64,
    /// Batches this rank delivered before this one, since the start of epoch 0.
    pub number: u64,
}

impl<T> SequentialBatch<T> {
    /// Number of records (padding included).
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether the batch holds no record (never true for a batch a loader yields).
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }
}

/// A batch as read, before `map` and collation.
pub(crate) struct Raw<T> {
    pub(crate) items: Vec<T>,
    pub(crate) ids: Vec<RecordId>,
    pub(crate) padding: Vec<bool>,
    pub(crate) epoch: u64,
    pub(crate) step: u64,
    pub(crate) number: u64,
}
