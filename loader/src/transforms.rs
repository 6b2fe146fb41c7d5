//! Index-stage transformations: random-access sources built from sources, each a pure
//! function of the position (so a loader over them keeps its O(1) state and its output for
//! every worker count).

use crate::{DataSource, LoaderError, Permutation};

/// Domain-separation tags of the transformations' fingerprints and keys.
const TAG_FILTER: u64 = u64::from_le_bytes(*b"glfilter");
const TAG_SLICE: u64 = u64::from_le_bytes(*b"glslice\0");
const TAG_REPEAT: u64 = u64::from_le_bytes(*b"glrepeat");
const TAG_CONCAT: u64 = u64::from_le_bytes(*b"glconcat");
const TAG_WINDOW: u64 = u64::from_le_bytes(*b"glwindow");

/// Keeps the records a predicate accepts, as a mask: a rejected record is a hole (`None`) in
/// its slot, so positions, lengths and batch shapes do not change (Grain's `filter` on a
/// `MapDataset`). A batch keeps its slots and `Option::is_some` is its validity mask; drop the
/// holes in the collate function or after batching when a dense batch is wanted.
///
/// ```
/// use guideloom_loader::{DataSource, RangeSource};
/// use guideloom_loader::transforms::Filter;
/// let even = Filter::new(RangeSource::new(0, 5, 1)?, |x: &i64| x % 2 == 0, 1);
/// assert_eq!(even.get_many(&[0, 1, 2])?, [Some(0), None, Some(2)]);
/// # Ok::<(), guideloom_loader::LoaderError>(())
/// ```
pub struct Filter<S, F> {
    inner: S,
    keep: F,
    id: u64,
}

impl<S: std::fmt::Debug, F> std::fmt::Debug for Filter<S, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Filter").field("inner", &self.inner).field("id", &self.id).finish()
    }
}

impl<S: DataSource, F: Fn(&S::Item) -> bool + Send + Sync> Filter<S, F> {
    /// Masks the records of `inner` that `keep` rejects. `id` names the predicate in the
    /// fingerprint recorded in loader states (change it when the predicate changes).
    pub fn new(inner: S, keep: F, id: u64) -> Self {
        Filter { inner, keep, id }
    }
}

impl<S: DataSource, F: Fn(&S::Item) -> bool + Send + Sync> DataSource for Filter<S, F> {
    type Item = Option<S::Item>;
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn get(&self, index: u64) -> Result<Self::Item, LoaderError> {
        let x = self.inner.get(index)?;
        Ok((self.keep)(&x).then_some(x))
    }
    fn get_many(&self, indices: &[u64]) -> Result<Vec<Self::Item>, LoaderError> {
        Ok(self.inner.get_many(indices)?.into_iter().map(|x| (self.keep)(&x).then_some(x)).collect())
    }
    fn fingerprint(&self) -> u64 {
        crate::fingerprint_words(&[TAG_FILTER, self.id, self.inner.fingerprint()])
    }
}

/// Positions `[start, end)` of a source as a new finite source (`take`, `skip` and `slice`).
/// A loader that shuffles or repeats a slice shuffles within the slice.
///
/// ```
/// use guideloom_loader::{DataSource, RangeSource};
/// use guideloom_loader::transforms::Slice;
/// let r = RangeSource::new(0, 10, 1)?;
/// assert_eq!(Slice::new(r, 2, 5)?.get_many(&[0, 1, 2])?, [2, 3, 4]);
/// assert_eq!(Slice::take(r, 3).len(), 3);
/// assert_eq!(Slice::skip(r, 7).get(0)?, 7);
/// # Ok::<(), guideloom_loader::LoaderError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Slice<S> {
    inner: S,
    start: u64,
    len: u64,
}

impl<S: DataSource> Slice<S> {
    /// Positions `[start, end)` of `inner`.
    ///
    /// # Errors
    /// [`LoaderError::InvalidConfig`] (`slice`) when `start > end` or `end > inner.len()`.
    pub fn new(inner: S, start: u64, end: u64) -> Result<Self, LoaderError> {
        if start > end || end > inner.len() {
            return Err(LoaderError::InvalidConfig {
                field: "slice",
                detail: format!("[{start}, {end}) is not a range of a source of {} records", inner.len()),
            });
        }
        Ok(Slice { inner, start, len: end - start })
    }

    /// The first `min(n, len)` records.
    pub fn take(inner: S, n: u64) -> Self {
        let len = n.min(inner.len());
        Slice { inner, start: 0, len }
    }

    /// All records but the first `n`.
    pub fn skip(inner: S, n: u64) -> Self {
        let start = n.min(inner.len());
        let len = inner.len() - start;
        Slice { inner, start, len }
    }

    fn at(&self, index: u64) -> Result<u64, LoaderError> {
        if index >= self.len {
            return Err(LoaderError::IndexOutOfRange { index, len: self.len });
        }
        Ok(self.start + index)
    }
}

impl<S: DataSource> DataSource for Slice<S> {
    type Item = S::Item;
    fn len(&self) -> u64 {
        self.len
    }
    fn get(&self, index: u64) -> Result<S::Item, LoaderError> {
        self.inner.get(self.at(index)?)
    }
    fn get_many(&self, indices: &[u64]) -> Result<Vec<S::Item>, LoaderError> {
        let at = indices.iter().map(|&i| self.at(i)).collect::<Result<Vec<_>, _>>()?;
        self.inner.get_many(&at)
    }
    fn fingerprint(&self) -> u64 {
        crate::fingerprint_words(&[TAG_SLICE, self.start, self.len, self.inner.fingerprint()])
    }
}

/// A source `times` times back to back: position `p` reads `p mod len` (a loader that
/// shuffles shuffles over all copies).
///
/// ```
/// use guideloom_loader::{DataSource, RangeSource};
/// use guideloom_loader::transforms::Repeat;
/// let r = Repeat::new(RangeSource::new(0, 3, 1)?, 2)?;
/// assert_eq!(r.get_many(&[0, 2, 3, 5])?, [0, 2, 0, 2]);
/// # Ok::<(), guideloom_loader::LoaderError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Repeat<S> {
    inner: S,
    times: u64,
    len: u64,
}

impl<S: DataSource> Repeat<S> {
    /// `inner` repeated `times` times.
    ///
    /// # Errors
    /// [`LoaderError::InvalidConfig`] (`repeat`) when the length overflows `u64`.
    pub fn new(inner: S, times: u64) -> Result<Self, LoaderError> {
        let len = inner.len().checked_mul(times).ok_or_else(|| LoaderError::InvalidConfig {
            field: "repeat",
            detail: format!("{times} copies of {} records overflow u64", inner.len()),
        })?;
        Ok(Repeat { inner, times, len })
    }

    fn at(&self, index: u64) -> Result<u64, LoaderError> {
        if index >= self.len {
            return Err(LoaderError::IndexOutOfRange { index, len: self.len });
        }
        Ok(index % self.inner.len())
    }
}

impl<S: DataSource> DataSource for Repeat<S> {
    type Item = S::Item;
    fn len(&self) -> u64 {
        self.len
    }
    fn get(&self, index: u64) -> Result<S::Item, LoaderError> {
        self.inner.get(self.at(index)?)
    }
    fn get_many(&self, indices: &[u64]) -> Result<Vec<S::Item>, LoaderError> {
        let at = indices.iter().map(|&i| self.at(i)).collect::<Result<Vec<_>, _>>()?;
        self.inner.get_many(&at)
    }
    fn fingerprint(&self) -> u64 {
        crate::fingerprint_words(&[TAG_REPEAT, self.times, self.inner.fingerprint()])
    }
}

/// Sources of one item type back to back.
///
/// ```
/// use guideloom_loader::{DataSource, RangeSource};
/// use guideloom_loader::transforms::Concat;
/// let c = Concat::new(vec![RangeSource::new(0, 2, 1)?, RangeSource::new(10, 13, 1)?])?;
/// assert_eq!(c.get_many(&[0, 1, 2, 4])?, [0, 1, 10, 12]);
/// # Ok::<(), guideloom_loader::LoaderError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Concat<S> {
    parts: Vec<S>,
    /// `starts[i]`: position of part `i`'s first record; one more entry holds the length.
    starts: Vec<u64>,
}

impl<S: DataSource> Concat<S> {
    /// `parts` back to back.
    ///
    /// # Errors
    /// [`LoaderError::InvalidConfig`] (`concat`) when the total length overflows `u64`.
    pub fn new(parts: Vec<S>) -> Result<Self, LoaderError> {
        let mut starts = vec![0u64];
        for p in &parts {
            let next =
                starts[starts.len() - 1].checked_add(p.len()).ok_or_else(|| LoaderError::InvalidConfig {
                    field: "concat",
                    detail: "the total length overflows u64".into(),
                })?;
            starts.push(next);
        }
        Ok(Concat { parts, starts })
    }

    fn at(&self, index: u64) -> Result<(usize, u64), LoaderError> {
        let len = self.starts[self.starts.len() - 1];
        if index >= len {
            return Err(LoaderError::IndexOutOfRange { index, len });
        }
        let part = self.starts.partition_point(|&s| s <= index) - 1;
        Ok((part, index - self.starts[part]))
    }
}

impl<S: DataSource> DataSource for Concat<S> {
    type Item = S::Item;
    fn len(&self) -> u64 {
        self.starts[self.starts.len() - 1]
    }
    fn get(&self, index: u64) -> Result<S::Item, LoaderError> {
        let (part, i) = self.at(index)?;
        self.parts[part].get(i)
    }
    fn fingerprint(&self) -> u64 {
        let mut words = vec![TAG_CONCAT];
        words.extend(self.parts.iter().flat_map(|p| [p.len(), p.fingerprint()]));
        crate::fingerprint_words(&words)
    }
}

/// Shuffles within consecutive windows of `window` positions, for `epochs` epochs: position
/// `e * n + p` reads record `w * window + perm(p - w * window)` where `w = p / window` and
/// `perm` is the keyed [`Permutation`] of the window's size for `(seed, w, e)`. Each epoch
/// is a bijection of `[0, n)` and window `[w * window, min((w + 1) * window, n))` holds
/// exactly those records, also the last, partial window (where Grain's window shuffle is not
/// a permutation).
///
/// ```
/// use guideloom_loader::{DataSource, RangeSource};
/// use guideloom_loader::transforms::WindowShuffle;
/// let s = WindowShuffle::new(RangeSource::new(0, 10, 1)?, 4, 7, 1)?;
/// let mut last: Vec<i64> = s.get_many(&[8, 9])?;
/// last.sort();
/// assert_eq!(last, [8, 9]);
/// # Ok::<(), guideloom_loader::LoaderError>(())
/// ```
#[derive(Debug, Clone)]
pub struct WindowShuffle<S> {
    inner: S,
    window: u64,
    seed: u64,
    epochs: u64,
    len: u64,
}

impl<S: DataSource> WindowShuffle<S> {
    /// `inner` shuffled within windows of `window` records, `epochs` times over.
    ///
    /// # Errors
    /// [`LoaderError::InvalidConfig`] (`window`) for a window of 0, (`epochs`) when the
    /// length overflows `u64`.
    pub fn new(inner: S, window: u64, seed: u64, epochs: u64) -> Result<Self, LoaderError> {
        if window == 0 {
            return Err(LoaderError::InvalidConfig {
                field: "window",
                detail: "a window of 0 records".into(),
            });
        }
        let len = inner.len().checked_mul(epochs).ok_or_else(|| LoaderError::InvalidConfig {
            field: "epochs",
            detail: format!("{epochs} epochs of {} records overflow u64", inner.len()),
        })?;
        Ok(WindowShuffle { inner, window, seed, epochs, len })
    }

    /// The record of `inner` read at `position`, or `None` past the end.
    pub fn record(&self, position: u64) -> Option<u64> {
        if position >= self.len {
            return None;
        }
        let n = self.inner.len();
        let (epoch, p) = (position / n, position % n);
        let w = p / self.window;
        let start = w * self.window;
        let size = self.window.min(n - start);
        let key = crate::fingerprint_words(&[TAG_WINDOW, self.seed, w]);
        Some(start + Permutation::new(size, key, epoch).apply(p - start)?)
    }

    fn at(&self, index: u64) -> Result<u64, LoaderError> {
        self.record(index).ok_or(LoaderError::IndexOutOfRange { index, len: self.len })
    }
}

impl<S: DataSource> DataSource for WindowShuffle<S> {
    type Item = S::Item;
    fn len(&self) -> u64 {
        self.len
    }
    fn get(&self, index: u64) -> Result<S::Item, LoaderError> {
        self.inner.get(self.at(index)?)
    }
    fn get_many(&self, indices: &[u64]) -> Result<Vec<S::Item>, LoaderError> {
        let at = indices.iter().map(|&i| self.at(i)).collect::<Result<Vec<_>, _>>()?;
        self.inner.get_many(&at)
    }
    fn fingerprint(&self) -> u64 {
        crate::fingerprint_words(&[TAG_WINDOW, self.window, self.seed, self.epochs, self.inner.fingerprint()])
    }
}
