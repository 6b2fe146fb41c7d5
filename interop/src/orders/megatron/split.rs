//! Megatron's train/valid/test split of a dataset's sequences: [`MegatronSplit`] and
//! [`megatron_split_ranges`] (NVIDIA/Megatron-LM `megatron/core/datasets/`
//! `blended_megatron_dataset_config.py` `parse_and_normalize_split`,
//! `convert_split_vector_to_split_matrix`; `blended_megatron_dataset_builder.py`, the split
//! bookends; `utils.py` `normalize`).

use std::ops::Range;

use crate::error::{InteropError, Result};

/// One of Megatron's three splits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MegatronSplit {
    /// `train` (the first number of the split string).
    Train,
    /// `valid` (the second).
    Valid,
    /// `test` (the third).
    Test,
}

impl MegatronSplit {
    /// `train`, `valid` or `test`, as Megatron names the split.
    pub const fn name(self) -> &'static str {
        match self {
            MegatronSplit::Train => "train",
            MegatronSplit::Valid => "valid",
            MegatronSplit::Test => "test",
        }
    }

    /// The split's place in the split string (train 0, valid 1, test 2).
    pub(crate) const fn position(self) -> usize {
        match self {
            MegatronSplit::Train => 0,
            MegatronSplit::Valid => 1,
            MegatronSplit::Test => 2,
        }
    }
}

/// The sequence ranges of the three splits of `sequences` sequences for a split string such
/// as `"969,30,1"` (`parse_and_normalize_split` then the builder's bookends): the numbers are
/// padded to three, normalised by their sum (f64), summed into bookends `[0, s0, s0 + s1,
/// s0 + s1 + s2]`, and split `k` is `round(a * M) .. round(b * M)` with Python's
/// half-to-even rounding; `None` where `b <= a` (a zero weight).
///
/// ```
/// use guideloom_interop::megatron_split_ranges;
/// assert_eq!(megatron_split_ranges("1,1", 5)?, [Some(0..2), Some(2..5), None]);
/// # Ok::<(), guideloom_interop::InteropError>(())
/// ```
///
/// # Errors
/// [`InteropError::InvalidConfig`] (field `split`) for a string without numbers, more than
/// three, a number that does not parse, or a zero sum.
pub fn megatron_split_ranges(split: &str, sequences: u64) -> Result<[Option<Range<u64>>; 3]> {
    let bad = |detail: String| InteropError::InvalidConfig { field: "split", detail };
    let mut weights = Vec::new();
    for part in split.split(|c: char| !(c.is_ascii_digit() || c == '.')).filter(|p| !p.is_empty()) {
        let v: f64 = part.parse().map_err(|_| bad(format!("{part:?} in {split:?} is not a number")))?;
        weights.push(v);
    }
    if weights.is_empty() || weights.len() > 3 {
        return Err(bad(format!("{split:?} must hold one to three numbers")));
    }
    weights.resize(3, 0.0);
    let sum: f64 = weights.iter().sum();
    if sum <= 0.0 || !sum.is_finite() {
        return Err(bad(format!("the numbers of {split:?} sum to {sum}")));
    }
    let mut bookends = [0.0f64; 4];
    for i in 0..3 {
        bookends[i + 1] = bookends[i] + weights[i] / sum;
    }
    let m = sequences as f64;
    let mut out = [None, None, None];
    for i in 0..3 {
        let (a, b) = (bookends[i], bookends[i + 1]);
        if b > a {
            let begin = (a * m).round_ties_even() as u64;
            let end = (b * m).round_ties_even() as u64;
            out[i] = Some(begin..end.max(begin));
        }
    }
    Ok(out)
}
