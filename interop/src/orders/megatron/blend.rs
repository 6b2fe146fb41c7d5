//! Megatron's blend of several datasets (`BlendedDataset`): the blending schedules
//! ([`megatron_blending_indices`], [`megatron_exhaustive_blending_indices`]) and the blend's
//! index ([`BlendIndex`]).
//!
//! Sources: NVIDIA/Megatron-LM `megatron/core/datasets/helpers.cpp` (`build_blending_indices`,
//! `build_exhaustive_blending_indices`), `blended_dataset.py` (`_build_indices`) and
//! `blended_megatron_dataset_builder.py` (`_get_size_per_split_per_dataset`,
//! `_build_blended_dataset_splits`).

use crate::error::{InteropError, Result};
use crate::orders::capacity::{check_index, index_vec};

/// `build_blending_indices`: for each blended sample `s < size`, the component `i`
/// maximising `w_i * max(s, 1) - count_i` (ties to the lowest `i`), and that component's
/// sample number `count_i`. `weights` should be normalised (they are used as given).
///
/// ```
/// use guideloom_interop::megatron_blending_indices;
/// let (ds, sample) = megatron_blending_indices(&[0.5, 0.5], 6);
/// assert_eq!((ds, sample), (vec![0, 1, 0, 1, 0, 1], vec![0, 0, 1, 1, 2, 2]));
/// ```
///
/// The vectors grow as they are filled (no room is reserved from `size`); [`BlendIndex`]
/// checks its size against [`crate::MAX_INDEX_BYTES`] first.
pub fn megatron_blending_indices(weights: &[f64], size: u64) -> (Vec<u16>, Vec<u64>) {
    let (mut index, mut sample) = (Vec::new(), Vec::new());
    blend_into(weights, size, &mut index, &mut sample);
    (index, sample)
}

/// [`megatron_blending_indices`] appended to `index` and `sample`.
fn blend_into(weights: &[f64], size: u64, index: &mut Vec<u16>, sample: &mut Vec<u64>) {
    let mut counts = vec![0u64; weights.len()];
    if weights.is_empty() {
        return;
    }
    for s in 0..size {
        let x = (s as f64).max(1.0);
        let mut best = 0usize;
        let mut best_err = weights[0] * x - counts[0] as f64;
        for (i, &w) in weights.iter().enumerate().skip(1) {
            let err = w * x - counts[i] as f64;
            if err > best_err {
                best_err = err;
                best = i;
            }
        }
        index.push(best as u16);
        sample.push(counts[best]);
        counts[best] += 1;
    }
}

/// `build_exhaustive_blending_indices` (Megatron-Core `helpers.cpp`): draws exactly
/// `sizes[i]` samples from each component `i`, `sum(sizes)` in all: for each blended sample
/// `s`, among the components not yet exhausted (in index order), the one maximising
/// `w_i * max(s, 1) - count_i` with `w_i = sizes[i] / sum(sizes)` (f64; ties to the lowest
/// `i`), and that component's sample number `count_i`. A component of size 0 is never drawn
/// (Megatron refuses it before this point).
///
/// ```
/// use guideloom_interop::megatron_exhaustive_blending_indices;
/// let (ds, sample) = megatron_exhaustive_blending_indices(&[1, 3]);
/// assert_eq!((ds, sample), (vec![1, 0, 1, 1], vec![0, 0, 1, 2]));
/// ```
///
/// The vectors grow as they are filled; [`BlendIndex::unweighted`] checks the sizes' sum
/// against [`crate::MAX_INDEX_BYTES`] first.
pub fn megatron_exhaustive_blending_indices(sizes: &[u64]) -> (Vec<u16>, Vec<u64>) {
    let (mut index, mut sample) = (Vec::new(), Vec::new());
    exhaustive_into(sizes, &mut index, &mut sample);
    (index, sample)
}

/// [`megatron_exhaustive_blending_indices`] appended to `index` and `sample`.
fn exhaustive_into(sizes: &[u64], index: &mut Vec<u16>, sample: &mut Vec<u64>) {
    let total = sizes.iter().fold(0u64, |a, &n| a.saturating_add(n));
    let weights: Vec<f64> = sizes.iter().map(|&n| n as f64 / total as f64).collect();
    let mut counts = vec![0u64; sizes.len()];
    let mut unspent: Vec<usize> = (0..sizes.len()).filter(|&i| sizes[i] > 0).collect();
    let mut s = 0u64;
    while !unspent.is_empty() {
        let x = (s as f64).max(1.0);
        let (mut at, mut best_err) = (0usize, f64::MIN);
        for (k, &i) in unspent.iter().enumerate() {
            let err = weights[i] * x - counts[i] as f64;
            if err > best_err {
                best_err = err;
                at = k;
            }
        }
        let best = unspent[at];
        index.push(best as u16);
        sample.push(counts[best]);
        counts[best] += 1;
        if counts[best] == sizes[best] {
            unspent.remove(at);
        }
        s += 1;
    }
}

/// The two vectors of a blend of `size` samples filled by `fill`, after their bytes are
/// checked against [`crate::MAX_INDEX_BYTES`] (both together) and reserved.
///
/// # Errors
/// [`InteropError::IndexTooLarge`] (`blend index`).
fn blend_indices(size: u64, fill: impl FnOnce(&mut Vec<u16>, &mut Vec<u64>)) -> Result<(Vec<u16>, Vec<u64>)> {
    // One entry of each: 2 + 8 bytes per sample.
    check_index::<[u8; 10]>("blend index", size)?;
    let mut index = index_vec::<u16>("blend index", size)?;
    let mut sample = index_vec::<u64>("blend index", size)?;
    fill(&mut index, &mut sample);
    Ok((index, sample))
}

/// The blend of several `GPTDataset`s (`BlendedDataset`): each component's own index, and
/// which component (and which of its samples) each blended sample is.
#[derive(Debug, Clone, PartialEq)]
pub struct BlendIndex {
    weights: Vec<f64>,
    component_samples: Vec<u64>,
    dataset_index: Vec<u16>,
    dataset_sample_index: Vec<u64>,
}

impl BlendIndex {
    /// The blend of `weights` (normalised here, f64) for `n` requested samples: component
    /// `i` is asked for `ceil(ceil(n * w_i) * (1 + surplus))` samples and the blend holds
    /// `sum_i ceil(n * w_i)`, scheduled by [`megatron_blending_indices`].
    ///
    /// ```
    /// use guideloom_interop::BlendIndex;
    /// let b = BlendIndex::new(&[0.25, 0.75], 10, 0.005)?;
    /// assert_eq!(b.len(), 11);
    /// assert_eq!(b.component_samples(), [4, 9]); // ceil(ceil(10 * w) * 1.005)
    /// # Ok::<(), guideloom_interop::InteropError>(())
    /// ```
    ///
    /// # Errors
    /// [`InteropError::InvalidConfig`] (field `weights`) for no weight, more than 32766, a
    /// zero, negative or non-finite one (Megatron asserts every weight is positive), or a sum
    /// that overflows to infinity; (field `surplus`) for a negative or non-finite surplus;
    /// [`InteropError::IndexTooLarge`] when the blend's `sum_i ceil(n * w_i)` samples would
    /// take more than [`crate::MAX_INDEX_BYTES`].
    pub fn new(weights: &[f64], n: u64, surplus: f64) -> Result<Self> {
        let sum: f64 = weights.iter().sum();
        if weights.is_empty()
            || weights.len() >= 32767
            || weights.iter().any(|w| !w.is_finite() || *w <= 0.0)
            || !sum.is_finite()
        {
            return Err(InteropError::InvalidConfig {
                field: "weights",
                detail: format!(
                    "{weights:?}: need 1 to 32766 finite positive weights whose sum is finite (Megatron asserts every weight is positive)"
                ),
            });
        }
        if !surplus.is_finite() || surplus < 0.0 {
            return Err(InteropError::InvalidConfig {
                field: "surplus",
                detail: format!("{surplus}: need a finite non-negative fraction"),
            });
        }
        let weights: Vec<f64> = weights.iter().map(|w| w / sum).collect();
        // f64 to u64 saturates: a count past u64 is caught by the size check below.
        let per: Vec<u64> = weights.iter().map(|w| (n as f64 * w).ceil() as u64).collect();
        let component_samples = per.iter().map(|&p| (p as f64 * (1.0 + surplus)).ceil() as u64).collect();
        let size = per.iter().try_fold(0u64, |a, &p| a.checked_add(p)).unwrap_or(u64::MAX);
        let (dataset_index, dataset_sample_index) =
            blend_indices(size, |i, s| blend_into(&weights, size, i, s))?;
        Ok(BlendIndex { weights, component_samples, dataset_index, dataset_sample_index })
    }

    /// Megatron's blend of prefixes given without weights (`--data-path A B`): the
    /// components are one-epoch `GPTDataset`s of `sizes[i]` samples each (their lengths are
    /// the weights). With a requested size `n` (`--train-samples`), the blend holds
    /// `min(n, sum(sizes))` samples scheduled by [`megatron_blending_indices`] over the
    /// normalised sizes; without one, every component is drawn until exhausted
    /// ([`megatron_exhaustive_blending_indices`], `sum(sizes)` samples). Source:
    /// `blended_megatron_dataset_builder.py` `_build_blended_dataset_splits` ("Blend according
    /// to dataset sizes as-is") and `blended_dataset.py` `_build_indices`.
    ///
    /// ```
    /// use guideloom_interop::BlendIndex;
    /// let b = BlendIndex::unweighted(&[1, 3], None)?;
    /// assert_eq!((b.len(), b.dataset_index()), (4, &[1u16, 0, 1, 1][..]));
    /// let b = BlendIndex::unweighted(&[1, 3], Some(2))?;
    /// assert_eq!((b.len(), b.weights()), (2, &[0.25, 0.75][..]));
    /// # Ok::<(), guideloom_interop::InteropError>(())
    /// ```
    ///
    /// # Errors
    /// [`InteropError::InvalidConfig`] (field `weights`) for no component, more than 32766, or
    /// one of 0 samples (Megatron asserts every weight is positive);
    /// [`InteropError::IndexTooLarge`] when the blend's samples would take more than
    /// [`crate::MAX_INDEX_BYTES`].
    pub fn unweighted(sizes: &[u64], n: Option<u64>) -> Result<Self> {
        if sizes.is_empty() || sizes.len() >= 32767 || sizes.contains(&0) {
            return Err(InteropError::InvalidConfig {
                field: "weights",
                detail: format!(
                    "component sizes {sizes:?}: need 1 to 32766 components of at least one sample"
                ),
            });
        }
        let total = sizes.iter().try_fold(0u64, |a, &p| a.checked_add(p)).unwrap_or(u64::MAX);
        let (weights, (dataset_index, dataset_sample_index)) = match n {
            Some(n) => {
                let sum: f64 = sizes.iter().map(|&x| x as f64).sum();
                let w: Vec<f64> = sizes.iter().map(|&x| x as f64 / sum).collect();
                let size = n.min(total);
                let indices = blend_indices(size, |i, s| blend_into(&w, size, i, s))?;
                (w, indices)
            }
            None => (
                sizes.iter().map(|&x| x as f64 / total as f64).collect(),
                blend_indices(total, |i, s| exhaustive_into(sizes, i, s))?,
            ),
        };
        Ok(BlendIndex { weights, component_samples: sizes.to_vec(), dataset_index, dataset_sample_index })
    }

    /// The normalised weights.
    pub fn weights(&self) -> &[f64] {
        &self.weights
    }

    /// The samples each component's `GPTDataset` is built for.
    pub fn component_samples(&self) -> &[u64] {
        &self.component_samples
    }

    /// Samples in the blend.
    pub fn len(&self) -> u64 {
        self.dataset_index.len() as u64
    }

    /// Whether the blend holds no sample.
    pub fn is_empty(&self) -> bool {
        self.dataset_index.is_empty()
    }

    /// The component of each blended sample.
    pub fn dataset_index(&self) -> &[u16] {
        &self.dataset_index
    }

    /// The component's sample number of each blended sample.
    pub fn dataset_sample_index(&self) -> &[u64] {
        &self.dataset_sample_index
    }
}
