//! What a sequential loader reads: a [`SequentialSource`] of shards, each read in order by a
//! [`ShardReader`] that restarts from a [`ShardPos`]; and [`VecShards`], shards in memory.

use serde::{Deserialize, Serialize};

use crate::LoaderError;

/// Where a [`ShardReader`] is: the position of the next record it yields.
///
/// `record` counts the records before that position (the loader derives record identities,
/// [`RecordId`](crate::RecordId), and the records left of a shard with a length hint from it);
/// `offset` is the source's own restart cursor (a byte offset in a file, a row group and row packed
/// into one integer, or the record count again for a generator). Opening the shard at a position a
/// reader reported yields the same records from there.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ShardPos {
    /// Records of the shard before this position.
    pub record: u64,
    /// The source's restart cursor for this position (meaning defined by the source).
    pub offset: u64,
}

impl ShardPos {
    /// The start of a shard: record 0, offset 0.
    pub const START: ShardPos = ShardPos { record: 0, offset: 0 };
}

/// What the loader knows of one shard before reading it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct ShardInfo {
    /// The number of records, when known. When every shard of a source has one, the loader takes
    /// them as exact: it deals shards by length, can give every rank the same number of steps
    /// ([`SequentialEnd::Drop`](crate::sequential::SequentialEnd::Drop),
    /// [`SequentialEnd::Pad`](crate::sequential::SequentialEnd::Pad)), reads no record past a
    /// shard's hint, and reports a shard that ends before its hint ([`LoaderError::ShardLength`]).
    pub len_hint: Option<u64>,
}

/// One shard being read in order.
///
/// ```
/// use guideloom_loader::sequential::{SequentialSource, ShardPos, ShardReader, VecShards};
/// let source = VecShards::new(vec![vec!["a", "b", "c"]]);
/// let mut r = source.open(0, ShardPos::START)?;
/// assert_eq!(r.next_record()?, Some("a"));
/// let at = r.pos();
/// assert_eq!(at, ShardPos { record: 1, offset: 1 });
/// let mut again = source.open(0, at)?;
/// assert_eq!((again.next_record()?, again.next_record()?, again.next_record()?), (Some("b"), Some("c"), None));
/// # Ok::<(), guideloom_loader::LoaderError>(())
/// ```
pub trait ShardReader: Send {
    /// What one record is.
    type Item;

    /// The next record, or `None` at the end of the shard.
    ///
    /// # Errors
    /// The source's read or parse failure, as [`LoaderError::Shard`] naming the shard and
    /// record (see [`LoaderError::shard`]).
    fn next_record(&mut self) -> Result<Option<Self::Item>, LoaderError>;

    /// The position of the next record (after the last one returned).
    fn pos(&self) -> ShardPos;
}

/// A source read in order, made of shards: the sequential counterpart of
/// [`DataSource`](crate::DataSource).
///
/// Shards are numbered `0..shards().len()` in their canonical order (for files: the order
/// given). The same shard opened at the same [`ShardPos`] always yields the same records.
pub trait SequentialSource: Send + Sync {
    /// What one record is.
    type Item: Send;
    /// The reader of one shard.
    type Reader: ShardReader<Item = Self::Item>;

    /// The shards, with their length hints.
    fn shards(&self) -> Vec<ShardInfo>;

    /// Opens shard `shard` at `at` (a position one of its readers reported, or
    /// [`ShardPos::START`]).
    ///
    /// # Errors
    /// [`LoaderError::Shard`] when the shard cannot be opened or `at` is not a position of it;
    /// [`LoaderError::IndexOutOfRange`] for a shard number past the last.
    fn open(&self, shard: u64, at: ShardPos) -> Result<Self::Reader, LoaderError>;

    /// A fingerprint of the source's contents, recorded in a
    /// [`SequentialState`](crate::sequential::SequentialState) so that a state is not restored onto
    /// other data (default 0: only the shard count and the length hints are checked).
    fn fingerprint(&self) -> u64 {
        0
    }
}

impl<T: SequentialSource + ?Sized> SequentialSource for std::sync::Arc<T> {
    type Item = T::Item;
    type Reader = T::Reader;
    fn shards(&self) -> Vec<ShardInfo> {
        (**self).shards()
    }
    fn open(&self, shard: u64, at: ShardPos) -> Result<T::Reader, LoaderError> {
        (**self).open(shard, at)
    }
    fn fingerprint(&self) -> u64 {
        (**self).fingerprint()
    }
}

/// Shards held in memory, each a `Vec` of records: the sequential source of tests and
/// examples. Length hints are the shards' lengths (or none, with
/// [`VecShards::without_lengths`]); a position's `offset` is its record count.
///
/// ```
/// use guideloom_loader::sequential::{SequentialSource, VecShards};
/// let s = VecShards::new(vec![vec![1, 2], vec![3]]);
/// assert_eq!(s.shards().iter().map(|i| i.len_hint).collect::<Vec<_>>(), [Some(2), Some(1)]);
/// assert_eq!(s.without_lengths().shards()[0].len_hint, None);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VecShards<T> {
    shards: std::sync::Arc<Vec<Vec<T>>>,
    lengths: bool,
    fingerprint: u64,
}

impl<T> VecShards<T> {
    /// Shards of these records, with their lengths as hints.
    pub fn new(shards: Vec<Vec<T>>) -> Self {
        VecShards { shards: std::sync::Arc::new(shards), lengths: true, fingerprint: 0 }
    }

    /// The same shards without length hints (as a corpus of files whose lengths are not
    /// counted).
    pub fn without_lengths(mut self) -> Self {
        self.lengths = false;
        self
    }

    /// Sets the fingerprint recorded in states.
    pub fn with_fingerprint(mut self, fingerprint: u64) -> Self {
        self.fingerprint = fingerprint;
        self
    }
}

/// The reader of one shard of a [`VecShards`].
#[derive(Debug)]
pub struct VecShardReader<T> {
    shards: std::sync::Arc<Vec<Vec<T>>>,
    shard: usize,
    next: usize,
}

impl<T: Clone + Send + Sync> ShardReader for VecShardReader<T> {
    type Item = T;
    fn next_record(&mut self) -> Result<Option<T>, LoaderError> {
        let r = self.shards[self.shard].get(self.next).cloned();
        self.next += usize::from(r.is_some());
        Ok(r)
    }
    fn pos(&self) -> ShardPos {
        ShardPos { record: self.next as u64, offset: self.next as u64 }
    }
}

impl<T: Clone + Send + Sync> SequentialSource for VecShards<T> {
    type Item = T;
    type Reader = VecShardReader<T>;
    fn shards(&self) -> Vec<ShardInfo> {
        self.shards.iter().map(|s| ShardInfo { len_hint: self.lengths.then_some(s.len() as u64) }).collect()
    }
    fn open(&self, shard: u64, at: ShardPos) -> Result<VecShardReader<T>, LoaderError> {
        let len = self.shards.len() as u64;
        let Some(records) = usize::try_from(shard).ok().and_then(|s| self.shards.get(s)) else {
            return Err(LoaderError::IndexOutOfRange { index: shard, len });
        };
        if at.record != at.offset || at.record > records.len() as u64 {
            return Err(LoaderError::shard(
                shard,
                at.record,
                format!("{at:?} is not a position of a shard of {} records", records.len()),
            ));
        }
        Ok(VecShardReader { shards: self.shards.clone(), shard: shard as usize, next: at.record as usize })
    }
    fn fingerprint(&self) -> u64 {
        self.fingerprint
    }
}
