//! Batches and collation.

use std::sync::{Arc, Mutex, PoisonError};

use crate::LoaderError;

/// One batch of one rank, as the consumer receives it.
///
/// `data` is the collated value ([`VecCollate`] by default: the records in batch order);
/// `indices`, `positions`, `padding` and `repeat` are parallel, one entry per record.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Batch<T> {
    /// The collated records.
    pub data: T,
    /// Record indices in the source, in batch order.
    pub indices: Vec<u64>,
    /// Positions in the epoch's global order, before wrapping (`>= n` for padding).
    pub positions: Vec<u64>,
    /// `true` for records repeated to complete the final global batch of an epoch
    /// (only with `drop_remainder` off and `world_size > 1`).
    pub padding: Vec<bool>,
    /// `true` for positions delivered before an elastic restore that rounded down
    /// ([`ResumeOptions::round_down`](crate::ResumeOptions)) and replayed; all `false`
    /// otherwise.
    pub repeat: Vec<bool>,
    /// The epoch.
    pub epoch: u64,
    /// Absolute batch number of this rank, counted from the first batch of epoch 0.
    pub number: u64,
}

impl<T> Batch<T> {
    /// Number of records (padding included).
    pub fn len(&self) -> usize {
        self.indices.len()
    }

    /// Whether the batch holds no record (never true for a batch a loader yields).
    pub fn is_empty(&self) -> bool {
        self.indices.is_empty()
    }
}

/// Turns the mapped records of one batch into the value a [`Batch`] carries. Runs on the
/// workers.
///
/// Implemented by [`VecCollate`] (the default), [`StackTokens`], and every
/// `Fn(Vec<T>) -> Result<O, LoaderError> + Send + Sync`.
///
/// ```
/// use guideloom_loader::{Collate, LoaderError};
/// let sum = |v: Vec<u64>| Ok::<u64, LoaderError>(v.iter().sum());
/// assert_eq!(sum.collate(vec![1, 2, 3])?, 6);
/// # Ok::<(), LoaderError>(())
/// ```
pub trait Collate<T>: Send + Sync {
    /// The collated value.
    type Output: Send;

    /// Collates the records of one batch (in batch order, never empty).
    ///
    /// # Errors
    /// A [`LoaderError`] (usually [`LoaderError::Collate`]) when the records cannot be
    /// combined.
    fn collate(&self, records: Vec<T>) -> Result<Self::Output, LoaderError>;

    /// Whether every [`Collate::collate`] call returns within a bounded time (no network, no
    /// wait on another thread): see [`DataSource::reads_bounded`](crate::DataSource::reads_bounded),
    /// which says what a loader does with it. Default `false`; [`VecCollate`],
    /// [`StackTokens`] and the token-window collation over a local storage return `true`.
    fn bounded(&self) -> bool {
        false
    }
}

impl<T, O: Send, F> Collate<T> for F
where
    F: Fn(Vec<T>) -> Result<O, LoaderError> + Send + Sync,
{
    type Output = O;
    fn collate(&self, records: Vec<T>) -> Result<O, LoaderError> {
        self(records)
    }
}

/// The default collation: the records themselves, as a `Vec` in batch order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VecCollate;

impl<T: Send> Collate<T> for VecCollate {
    type Output = Vec<T>;
    fn collate(&self, records: Vec<T>) -> Result<Vec<T>, LoaderError> {
        Ok(records)
    }
    fn bounded(&self) -> bool {
        true
    }
}

/// Collates token windows (`Vec<E>` of equal length `seq_len`) into one contiguous row-major
/// `[B, seq_len]` buffer, a [`TokenBatch`].
///
/// ```
/// use guideloom_loader::{Collate, StackTokens};
/// let b = StackTokens.collate(vec![vec![1u16, 2, 3], vec![4, 5, 6]])?;
/// assert_eq!(b.shape(), [2, 3]);
/// assert_eq!(b.data(), [1, 2, 3, 4, 5, 6]);
/// assert_eq!(b.row(1), Some(&[4u16, 5, 6][..]));
/// # Ok::<(), guideloom_loader::LoaderError>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StackTokens;

impl<E: Copy + Send + Sync> Collate<Vec<E>> for StackTokens {
    type Output = TokenBatch<E>;
    fn collate(&self, records: Vec<Vec<E>>) -> Result<TokenBatch<E>, LoaderError> {
        let seq_len = records.first().map_or(0, Vec::len);
        let mut data = Vec::with_capacity(records.len() * seq_len);
        for (row, r) in records.iter().enumerate() {
            if r.len() != seq_len {
                return Err(LoaderError::Collate {
                    detail: format!("row {row} holds {} tokens, row 0 holds {seq_len}", r.len()),
                });
            }
            data.extend_from_slice(r);
        }
        Ok(TokenBatch::from_parts(data, records.len(), seq_len))
    }
    fn bounded(&self) -> bool {
        true
    }
}

/// A row-major `[rows, seq_len]` buffer of token ids (element type `E`), as made by
/// [`TokenWindowCollate`](crate::TokenWindowCollate) (the token-window fast path) and [`StackTokens`].
///
/// A batch made by the token-window fast path hands its buffer back to its collation's
/// [`BufferPool`] when it is dropped, so the next batch is read into memory that is already
/// allocated and touched (no allocation, no zeroing, no page faults per batch);
/// [`TokenBatch::into_vec`] keeps the buffer instead. Equality and cloning look at the shape
/// and the tokens only.
pub struct TokenBatch<E> {
    data: Vec<E>,
    rows: usize,
    seq_len: usize,
    /// Where the buffer goes when the batch is dropped.
    pool: Option<Arc<BufferPool<E>>>,
}

impl<E: std::fmt::Debug> std::fmt::Debug for TokenBatch<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenBatch")
            .field("data", &self.data)
            .field("rows", &self.rows)
            .field("seq_len", &self.seq_len)
            .finish_non_exhaustive()
    }
}

impl<E: Clone> Clone for TokenBatch<E> {
    /// A copy of the tokens in a new buffer (which goes back to the same pool when dropped).
    fn clone(&self) -> Self {
        TokenBatch {
            data: self.data.clone(),
            rows: self.rows,
            seq_len: self.seq_len,
            pool: self.pool.clone(),
        }
    }
}

impl<E: PartialEq> PartialEq for TokenBatch<E> {
    fn eq(&self, other: &Self) -> bool {
        (self.rows, self.seq_len) == (other.rows, other.seq_len) && self.data == other.data
    }
}

impl<E: Eq> Eq for TokenBatch<E> {}

impl<E> Drop for TokenBatch<E> {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take() {
            pool.put(std::mem::take(&mut self.data));
        }
    }
}

/// Buffers of dropped [`TokenBatch`]es, kept for the next batches of the same collation.
///
/// Holds at most [`BufferPool::MAX_FREE`] buffers, and never more than the batches that were
/// alive at once (a buffer enters only when its batch is dropped), so it adds nothing to the
/// loader's memory bound of about `prefetch + workers` batches. A buffer taken from it keeps
/// the tokens of the batch it last held until they are overwritten: it is always initialised
/// memory, and the collation overwrites every element before the batch is handed out.
pub struct BufferPool<E> {
    free: Mutex<Vec<Vec<E>>>,
}

impl<E> std::fmt::Debug for BufferPool<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BufferPool").field("free", &self.free_buffers()).finish()
    }
}

impl<E> Default for BufferPool<E> {
    fn default() -> Self {
        BufferPool { free: Mutex::new(Vec::new()) }
    }
}

impl<E> BufferPool<E> {
    /// Most buffers a pool keeps (a dropped batch beyond it frees its buffer).
    pub const MAX_FREE: usize = 64;

    /// Buffers waiting for reuse now.
    pub fn free_buffers(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Vec<E>>> {
        self.free.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps `buf` for reuse (unless it holds nothing or the pool is full).
    fn put(&self, buf: Vec<E>) {
        if buf.capacity() > 0 {
            let mut free = self.lock();
            if free.len() < Self::MAX_FREE {
                free.push(buf);
            }
        }
    }

    /// A buffer of exactly `n` initialised elements: a recycled one (its old contents kept,
    /// shortened, or lengthened with `fill`), or a new one filled with `fill`.
    pub(crate) fn take(&self, n: usize, fill: E) -> Vec<E>
    where
        E: Clone,
    {
        let recycled = self.lock().pop();
        match recycled {
            Some(mut buf) => {
                buf.resize(n, fill);
                buf
            }
            None => vec![fill; n],
        }
    }
}

impl<E> TokenBatch<E> {
    /// A batch of `rows` windows of `seq_len` tokens from a row-major buffer of
    /// `rows * seq_len` tokens.
    pub(crate) fn from_parts(data: Vec<E>, rows: usize, seq_len: usize) -> Self {
        debug_assert_eq!(data.len(), rows * seq_len);
        TokenBatch { data, rows, seq_len, pool: None }
    }

    /// As [`TokenBatch::from_parts`], handing the buffer to `pool` when dropped.
    pub(crate) fn pooled(data: Vec<E>, rows: usize, seq_len: usize, pool: Arc<BufferPool<E>>) -> Self {
        debug_assert_eq!(data.len(), rows * seq_len);
        TokenBatch { data, rows, seq_len, pool: Some(pool) }
    }

    /// `[rows, seq_len]`: records in the batch, tokens per record.
    pub fn shape(&self) -> [usize; 2] {
        [self.rows, self.seq_len]
    }

    /// The contiguous buffer, `rows * seq_len` tokens, row-major.
    pub fn data(&self) -> &[E] {
        &self.data
    }

    /// Row `i`, or `None` when `i >= rows`.
    pub fn row(&self, i: usize) -> Option<&[E]> {
        (i < self.rows).then(|| &self.data[i * self.seq_len..(i + 1) * self.seq_len])
    }

    /// The buffer, giving up the shape (it is not handed back to a pool).
    pub fn into_vec(mut self) -> Vec<E> {
        self.pool = None;
        std::mem::take(&mut self.data)
    }
}

impl<E: Copy> TokenBatch<E> {
    /// The language-model split of a `[rows, L + 1]` batch (windows of `L + 1` tokens, read
    /// at stride `L` so that every token is a target once): `(inputs, targets)`, two
    /// `[rows, L]` batches where row `r` of `inputs` is the first `L` tokens of row `r` and row
    /// `r` of `targets` the last `L` (the same row shifted by one token). Copies each token at
    /// most twice, into two new buffers; a batch of width 0 gives two `[rows, 0]` batches.
    ///
    /// ```
    /// use guideloom_loader::{Collate, StackTokens};
    /// let batch = StackTokens.collate(vec![vec![10u32, 11, 12, 13], vec![20, 21, 22, 23]])?;
    /// let (inputs, targets) = batch.inputs_targets();
    /// assert_eq!(inputs.shape(), [2, 3]);
    /// assert_eq!(inputs.data(), [10, 11, 12, 20, 21, 22]);
    /// assert_eq!(targets.data(), [11, 12, 13, 21, 22, 23]);
    /// # Ok::<(), guideloom_loader::LoaderError>(())
    /// ```
    pub fn inputs_targets(&self) -> (TokenBatch<E>, TokenBatch<E>) {
        let width = self.seq_len.saturating_sub(1);
        let mut inputs = Vec::with_capacity(self.rows * width);
        let mut targets = Vec::with_capacity(self.rows * width);
        if self.seq_len > 0 {
            for row in self.data.chunks_exact(self.seq_len) {
                inputs.extend_from_slice(&row[..width]);
                targets.extend_from_slice(&row[1..]);
            }
        }
        (TokenBatch::from_parts(inputs, self.rows, width), TokenBatch::from_parts(targets, self.rows, width))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_targets_shift_each_row_by_one_token() {
        let batch = TokenBatch::from_parts(vec![1u16, 2, 3, 4, 5, 6, 7, 8, 9], 3, 3);
        let (inputs, targets) = batch.inputs_targets();
        assert_eq!(inputs, TokenBatch::from_parts(vec![1, 2, 4, 5, 7, 8], 3, 2));
        assert_eq!(targets, TokenBatch::from_parts(vec![2, 3, 5, 6, 8, 9], 3, 2));
        assert_eq!(inputs.row(2), Some(&[7u16, 8][..]));
        assert_eq!(targets.row(0), Some(&[2u16, 3][..]));
        let one = TokenBatch::from_parts(vec![4i64, 5], 2, 1);
        let (i, t) = one.inputs_targets();
        assert_eq!((i.shape(), i.data(), t.shape(), t.data()), ([2, 0], &[][..], [2, 0], &[][..]));
        let none = TokenBatch::<u32>::from_parts(vec![], 2, 0);
        assert_eq!(none.inputs_targets().0.shape(), [2, 0]);
    }

    #[test]
    fn unequal_rows_are_refused() {
        let e = StackTokens.collate(vec![vec![1u32, 2], vec![3]]).unwrap_err();
        assert_eq!(e.to_string(), "collate: row 1 holds 1 tokens, row 0 holds 2");
    }
}
