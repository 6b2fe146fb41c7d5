//! Megatron-Core's sample order, computed in Rust: the MT19937 generator and NumPy's legacy
//! shuffle, the train/valid/test split, `GPTDataset`'s document, sample and shuffle indices,
//! `BlendedDataset`'s blending schedule, and [`MegatronSamples`], a source whose record `k`
//! is Megatron's sample `k` (its `seq_length + 1` tokens).
//!
//! Sources of the algorithms (NVIDIA/Megatron-LM, `megatron/core/datasets/`):
//! `gpt_dataset.py` (`_build_document_sample_shuffle_indices`, `_build_document_index`,
//! `_build_shuffle_index`, `_get_num_epochs`, `_query_document_sample_shuffle_indices`),
//! `helpers.cpp` (`build_sample_idx`, `build_blending_indices`), `blended_dataset.py`,
//! `blended_megatron_dataset_builder.py` (`_get_size_per_split_per_dataset`, split bookends),
//! `blended_megatron_dataset_config.py` (`parse_and_normalize_split`,
//! `convert_split_vector_to_split_matrix`) and `utils.py` (`normalize`); NumPy
//! `numpy/random/mtrand.pyx` (`RandomState.shuffle`), `numpy/random/src/legacy/` and
//! `numpy/random/src/distributions/` (`random_interval`, the masked rejection draw) and
//! `numpy/random/src/mt19937/` (MT19937 `init_genrand`, Matsumoto & Nishimura 1998).
//!
//! The order is a pure function of the configuration and the sequence lengths, so a
//! loader over [`MegatronSamples`] keeps its O(1) [`State`]; [`megatron_resume_state`]
//! turns Megatron's `consumed_samples` into that state.

use std::ops::Range;
use std::path::{Path, PathBuf};

use guideloom_formats::IntTokenFormat;
use guideloom_storage::foreign::{ForeignDataset, ForeignFormat, ForeignOptions};
use guideloom_storage::{ReadOptions, StorageError, StreamReader, Window};

use crate::storage_sources::open_error;
use crate::transforms::Slice;
use crate::{fingerprint_words, DataSource, LoaderError, State, WindowReader};

/// The MT19937 Mersenne Twister (32-bit), seeded as `init_genrand` (Matsumoto & Nishimura,
/// 1998) — the generator of `numpy.random.RandomState(seed)` for an integer seed.
///
/// ```
/// use guideloom_loader::Mt19937;
/// let mut g = Mt19937::new(5489)?;
/// assert_eq!(g.next_u32(), 3_499_211_612);
/// # Ok::<(), guideloom_loader::LoaderError>(())
/// ```
#[derive(Clone)]
pub struct Mt19937 {
    state: Box<[u32; 624]>,
    index: usize,
}

impl std::fmt::Debug for Mt19937 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mt19937").field("index", &self.index).finish_non_exhaustive()
    }
}

impl Mt19937 {
    /// The generator seeded with `seed` by `init_genrand`.
    ///
    /// # Errors
    /// [`LoaderError::InvalidSeed`] when `seed` is not in `[0, 2^32)` (NumPy refuses it too).
    pub fn new(seed: u64) -> Result<Self, LoaderError> {
        let s = u32::try_from(seed).map_err(|_| LoaderError::InvalidSeed { seed })?;
        let mut state = Box::new([0u32; 624]);
        state[0] = s;
        for i in 1..624 {
            let p = state[i - 1];
            state[i] = 1_812_433_253u32.wrapping_mul(p ^ (p >> 30)).wrapping_add(i as u32);
        }
        Ok(Mt19937 { state, index: 624 })
    }

    fn twist(&mut self) {
        const UPPER: u32 = 0x8000_0000;
        const LOWER: u32 = 0x7fff_ffff;
        let mt = &mut self.state;
        for i in 0..624 {
            let y = (mt[i] & UPPER) | (mt[(i + 1) % 624] & LOWER);
            let mut v = mt[(i + 397) % 624] ^ (y >> 1);
            if y & 1 != 0 {
                v ^= 0x9908_b0df;
            }
            mt[i] = v;
        }
        self.index = 0;
    }

    /// The untempered state words and the position of the next one (624: a twist comes
    /// first), to compare with a generator state another program saved.
    pub(crate) fn words(&self) -> (&[u32; 624], usize) {
        (&self.state, self.index)
    }

    /// The next 32-bit output (tempered).
    pub fn next_u32(&mut self) -> u32 {
        if self.index >= 624 {
            self.twist();
        }
        let mut y = self.state[self.index];
        self.index += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    /// NumPy's legacy 64-bit output: `(next_u32() << 32) | next_u32()`.
    pub fn next_u64(&mut self) -> u64 {
        let hi = u64::from(self.next_u32());
        (hi << 32) | u64::from(self.next_u32())
    }

    /// A uniform integer in `[0, max]` by NumPy's legacy masked rejection
    /// (`random_interval`): `max` with every lower bit set is the mask; 32-bit draws when
    /// `max < 2^32`, else 64-bit draws, until one is `<= max`.
    pub fn interval(&mut self, max: u64) -> u64 {
        if max == 0 {
            return 0;
        }
        let mut mask = max;
        for s in [1, 2, 4, 8, 16, 32] {
            mask |= mask >> s;
        }
        if max <= u64::from(u32::MAX) {
            loop {
                let v = u64::from(self.next_u32()) & mask;
                if v <= max {
                    return v;
                }
            }
        }
        loop {
            let v = self.next_u64() & mask;
            if v <= max {
                return v;
            }
        }
    }

    /// `RandomState.shuffle` of a 1-D array: Fisher-Yates from the back, `j = interval(i)`
    /// for `i = n - 1` down to 1.
    ///
    /// ```
    /// use guideloom_loader::Mt19937;
    /// let mut a: Vec<u32> = (0..5).collect();
    /// Mt19937::new(42)?.shuffle(&mut a);
    /// assert_eq!(a, [1, 4, 2, 0, 3]);
    /// # Ok::<(), guideloom_loader::LoaderError>(())
    /// ```
    pub fn shuffle<T>(&mut self, a: &mut [T]) {
        for i in (1..a.len()).rev() {
            let j = self.interval(i as u64) as usize;
            a.swap(i, j);
        }
    }
}

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

    const fn position(self) -> usize {
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
/// use guideloom_loader::megatron_split_ranges;
/// assert_eq!(megatron_split_ranges("1,1", 5)?, [Some(0..2), Some(2..5), None]);
/// # Ok::<(), guideloom_loader::LoaderError>(())
/// ```
///
/// # Errors
/// [`LoaderError::InvalidConfig`] (field `split`) for a string without numbers, more than
/// three, a number that does not parse, or a zero sum.
pub fn megatron_split_ranges(split: &str, sequences: u64) -> Result<[Option<Range<u64>>; 3], LoaderError> {
    let bad = |detail: String| LoaderError::InvalidConfig { field: "split", detail };
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

/// `build_blending_indices`: for each blended sample `s < size`, the component `i`
/// maximising `w_i * max(s, 1) - count_i` (ties to the lowest `i`), and that component's
/// sample number `count_i`. `weights` should be normalised (they are used as given).
///
/// ```
/// use guideloom_loader::megatron_blending_indices;
/// let (ds, sample) = megatron_blending_indices(&[0.5, 0.5], 6);
/// assert_eq!((ds, sample), (vec![0, 1, 0, 1, 0, 1], vec![0, 0, 1, 1, 2, 2]));
/// ```
pub fn megatron_blending_indices(weights: &[f64], size: u64) -> (Vec<u16>, Vec<u64>) {
    let mut counts = vec![0u64; weights.len()];
    let mut index = Vec::with_capacity(size as usize);
    let mut sample = Vec::with_capacity(size as usize);
    if weights.is_empty() {
        return (index, sample);
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
    (index, sample)
}

/// `build_exhaustive_blending_indices` (Megatron-Core `helpers.cpp`): draws exactly
/// `sizes[i]` samples from each component `i`, `sum(sizes)` in all: for each blended sample
/// `s`, among the components not yet exhausted (in index order), the one maximising
/// `w_i * max(s, 1) - count_i` with `w_i = sizes[i] / sum(sizes)` (f64; ties to the lowest
/// `i`), and that component's sample number `count_i`. A component of size 0 is never drawn
/// (Megatron refuses it before this point).
///
/// ```
/// use guideloom_loader::megatron_exhaustive_blending_indices;
/// let (ds, sample) = megatron_exhaustive_blending_indices(&[1, 3]);
/// assert_eq!((ds, sample), (vec![1, 0, 1, 1], vec![0, 0, 1, 2]));
/// ```
pub fn megatron_exhaustive_blending_indices(sizes: &[u64]) -> (Vec<u16>, Vec<u64>) {
    let total: u64 = sizes.iter().sum();
    let weights: Vec<f64> = sizes.iter().map(|&n| n as f64 / total as f64).collect();
    let mut counts = vec![0u64; sizes.len()];
    let mut unspent: Vec<usize> = (0..sizes.len()).filter(|&i| sizes[i] > 0).collect();
    let mut index = Vec::with_capacity(total as usize);
    let mut sample = Vec::with_capacity(total as usize);
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
    (index, sample)
}

/// The configuration of one `GPTDataset` (`GPTDatasetConfig` and the builder's arguments).
///
/// ```
/// use guideloom_loader::{GptConfig, MegatronSplit};
/// let c = GptConfig::new(4, 1234).num_samples(5);
/// assert_eq!((c.seq_length, c.split.as_str(), c.which), (4, "969,30,1", MegatronSplit::Train));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct GptConfig {
    /// `--seq-length` `L`: tokens per sample, plus the extra token.
    pub seq_length: u64,
    /// `--seed` (`random_seed`), in `[0, 2^32)`.
    pub seed: u64,
    /// `--split` (default `"969,30,1"`).
    pub split: String,
    /// Which split the dataset serves (default train).
    pub which: MegatronSplit,
    /// Samples requested (`--train-samples` for train); `None`: one epoch.
    pub num_samples: Option<u64>,
    /// `add_extra_token_to_sequence` (default `true`: samples of `L + 1` tokens).
    pub add_extra_token: bool,
    /// `drop_last_partial_validation_sequence` (default `true`); only the valid split reads it.
    pub drop_last_partial_validation: bool,
    /// `mid_level_dataset_surplus` of a blend (default 0.005).
    pub surplus: f64,
    /// The pad id a kept partial validation sample is padded with to `L + x` tokens
    /// (`GPTDataset._pad_token_id`: the tokenizer's pad, default -1, Megatron-Core's
    /// `_PAD_TOKEN_ID`; Megatron later maps it to token 0 with loss mask 0).
    pub pad_token_id: i64,
}

impl GptConfig {
    /// `seq_length` and `seed` with Megatron's defaults for the rest.
    pub fn new(seq_length: u64, seed: u64) -> Self {
        GptConfig {
            seq_length,
            seed,
            split: "969,30,1".into(),
            which: MegatronSplit::Train,
            num_samples: None,
            add_extra_token: true,
            drop_last_partial_validation: true,
            surplus: 0.005,
            pad_token_id: -1,
        }
    }

    /// Sets [`GptConfig::split`].
    pub fn split(mut self, split: impl Into<String>) -> Self {
        self.split = split.into();
        self
    }

    /// Sets [`GptConfig::which`].
    pub fn which(mut self, which: MegatronSplit) -> Self {
        self.which = which;
        self
    }

    /// Sets [`GptConfig::num_samples`].
    pub fn num_samples(mut self, n: u64) -> Self {
        self.num_samples = Some(n);
        self
    }

    /// Sets [`GptConfig::add_extra_token`].
    pub fn add_extra_token(mut self, on: bool) -> Self {
        self.add_extra_token = on;
        self
    }

    /// Sets [`GptConfig::pad_token_id`].
    pub fn pad_token_id(mut self, id: i64) -> Self {
        self.pad_token_id = id;
        self
    }

    fn extra(&self) -> u64 {
        u64::from(self.add_extra_token)
    }
}

/// One piece of a sample: `len` tokens of sequence `sequence` from its token `offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SamplePiece {
    /// The sequence (Megatron's "document": one `.idx` sequence).
    pub sequence: u64,
    /// First token inside the sequence.
    pub offset: u64,
    /// Tokens.
    pub len: u64,
}

/// The three indices of one `GPTDataset`, computed as Megatron-Core computes them.
///
/// `document_index` (`i32` in Megatron): the split's sequence ids repeated once per epoch and
/// shuffled (the last epoch shuffled on its own when it is "separate"); `sample_index`
/// (`S + 1` pairs `(position in document_index, token offset)`): where each sample starts;
/// `shuffle_index` (`S` entries): sample `k` of the dataset is `sample_index` entry
/// `shuffle_index[k]`. Sizes are limited to `u32` entries (Megatron's own int32 variant).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GptIndex {
    epochs: u64,
    separate_final_epoch: bool,
    extra: u64,
    seq_length: u64,
    document_index: Vec<u32>,
    sample_index: Vec<[u32; 2]>,
    shuffle_index: Vec<u32>,
}

impl GptIndex {
    /// Builds the indices over the sequences `range` of a dataset whose sequences have
    /// `lengths` tokens (the split, as [`megatron_split_ranges`] gives it).
    ///
    /// ```
    /// use guideloom_loader::{GptConfig, GptIndex};
    /// let c = GptConfig::new(4, 1234).num_samples(5);
    /// let ix = GptIndex::build(&[4, 3, 5, 2], 0..4, &c)?;
    /// assert_eq!(ix.document_index(), [2, 1, 2, 0, 0, 1, 3, 3]);
    /// assert_eq!(ix.shuffle_index(), [0, 4, 3, 2, 5, 1]);
    /// # Ok::<(), guideloom_loader::LoaderError>(())
    /// ```
    ///
    /// # Errors
    /// [`LoaderError::InvalidSeed`]; [`LoaderError::EmptySplit`] when the split holds no
    /// token; [`LoaderError::InvalidConfig`] for `seq_length` 0, a range past `lengths`, or
    /// indices over `u32` entries.
    pub fn build(lengths: &[u32], range: Range<u64>, config: &GptConfig) -> Result<Self, LoaderError> {
        let mut rng = Mt19937::new(config.seed)?;
        let l = config.seq_length;
        if l == 0 {
            return Err(LoaderError::InvalidConfig { field: "seq_length", detail: "must be > 0".into() });
        }
        let too_large = |what: &str| LoaderError::InvalidConfig {
            field: "num_samples",
            detail: format!("the {what} would exceed 2^32 - 1 entries"),
        };
        if range.end > lengths.len() as u64 || range.start > range.end {
            return Err(LoaderError::InvalidConfig {
                field: "split",
                detail: format!("sequences {range:?} pass the {} of the dataset", lengths.len()),
            });
        }
        let x = config.extra();
        let docs = &lengths[range.start as usize..range.end as usize];
        let tokens: u64 = docs.iter().map(|&n| u64::from(n)).sum();
        if tokens == 0 {
            return Err(LoaderError::EmptySplit { split: config.which.name() });
        }
        let (epochs, separate, before) = match config.num_samples {
            None => (1, false, 0),
            Some(n) => {
                let need = n.saturating_mul(l).saturating_add(x);
                let epochs = need.div_ceil(tokens).max(1);
                if epochs == 1 {
                    (1, false, 0)
                } else {
                    let before = ((epochs - 1) * tokens - x) / l;
                    let last = n as i128 - before as i128;
                    let per_epoch = (tokens - x) / l;
                    let threshold = (0.80 * per_epoch as f64) as i128;
                    (epochs, last < threshold, before)
                }
            }
        };
        let per = docs.len() as u64;
        let total = per
            .checked_mul(epochs)
            .filter(|&t| t < u64::from(u32::MAX))
            .ok_or_else(|| too_large("document index"))?;
        let ids = range.start as u32..range.end as u32;
        let mut document_index: Vec<u32> = Vec::with_capacity(total as usize);
        for _ in 0..epochs {
            document_index.extend(ids.clone());
        }
        if separate {
            let cut = ((epochs - 1) * per) as usize;
            let (first, last) = document_index.split_at_mut(cut);
            rng.shuffle(first);
            rng.shuffle(last);
        } else {
            rng.shuffle(&mut document_index);
        }
        let avail = epochs * tokens - x;
        let samples = if config.which == MegatronSplit::Valid && !config.drop_last_partial_validation {
            ((avail as f32) / l as f32).ceil() as u64
        } else {
            avail / l
        };
        if samples >= u64::from(u32::MAX) - 1 {
            return Err(too_large("shuffle index"));
        }
        let mut sample_index = Vec::with_capacity(samples as usize + 1);
        sample_index.push([0u32, 0u32]);
        let (mut pos, mut offset) = (0usize, 0i64);
        let last_pos = document_index.len() - 1;
        for _ in 0..samples {
            let mut remaining = (l + x) as i64;
            loop {
                let len = i64::from(lengths[document_index[pos] as usize]);
                let avail = len - offset;
                remaining -= avail;
                if remaining <= 0 {
                    offset += remaining + avail - x as i64;
                    break;
                }
                if pos == last_pos {
                    offset = len - x as i64;
                    break;
                }
                pos += 1;
                offset = 0;
            }
            sample_index.push([pos as u32, offset.max(0) as u32]);
        }
        let shuffled = if separate { before.min(samples) } else { samples };
        let mut shuffle_index: Vec<u32> = (0..samples as u32).collect();
        let (first, last) = shuffle_index.split_at_mut(shuffled as usize);
        rng.shuffle(first);
        if !last.is_empty() {
            rng.shuffle(last);
        }
        Ok(GptIndex {
            epochs,
            separate_final_epoch: separate,
            extra: x,
            seq_length: l,
            document_index,
            sample_index,
            shuffle_index,
        })
    }

    /// Checks Megatron's own cached index files against this index: `prefix` names them
    /// without the suffix (`<cache>/<md5>-GPTDataset-<split>`, read as
    /// `<prefix>-document_index.npy`, `-sample_index.npy`, `-shuffle_index.npy`: NumPy
    /// `.npy` files of any integer dtype, the sample index `[S + 1, 2]`), as `GPTDataset`
    /// writes them with `path_to_cache`.
    ///
    /// # Errors
    /// [`LoaderError::Open`] when a file cannot be read as an integer `.npy`;
    /// [`LoaderError::CacheMismatch`] naming the first array and entry that differ (or the
    /// lengths).
    pub fn check_cache(&self, prefix: &Path) -> Result<(), LoaderError> {
        let computed: [(&'static str, Vec<i64>); 3] = [
            ("document_index", self.document_index.iter().map(|&d| i64::from(d)).collect()),
            ("sample_index", self.sample_index.iter().flat_map(|p| p.map(i64::from)).collect()),
            ("shuffle_index", self.shuffle_index.iter().map(|&d| i64::from(d)).collect()),
        ];
        for (array, want) in computed {
            let mut path = prefix.as_os_str().to_os_string();
            path.push(format!("-{array}.npy"));
            let path = PathBuf::from(path);
            let options = ForeignOptions::new().format(ForeignFormat::Npy);
            let data = ForeignDataset::open(&path, &options).map_err(open_error(&path))?;
            let format = IntTokenFormat::new(data.dtype())
                .map_err(|source| open_error(&path)(StorageError::Format { shard: 0, source }))?;
            let reader = data.reader(format, ReadOptions::default()).map_err(open_error(&path))?;
            let n = data.elements();
            let got = if n == 0 {
                Vec::new()
            } else {
                let mut v = reader.read_many(&[Window::new(0, n)]).map_err(open_error(&path))?;
                v.pop().unwrap_or_default()
            };
            if let Some(entry) = got.iter().zip(&want).position(|(a, b)| a != b) {
                return Err(LoaderError::CacheMismatch {
                    array,
                    entry: entry as u64,
                    cached: got[entry],
                    computed: want[entry],
                });
            }
            if got.len() != want.len() {
                return Err(LoaderError::CacheMismatch {
                    array,
                    entry: got.len().min(want.len()) as u64,
                    cached: got.len() as i64,
                    computed: want.len() as i64,
                });
            }
        }
        Ok(())
    }

    /// Epochs indexed (`E`).
    pub fn epochs(&self) -> u64 {
        self.epochs
    }

    /// Whether the last epoch was shuffled on its own (the 80 % rule).
    pub fn separate_final_epoch(&self) -> bool {
        self.separate_final_epoch
    }

    /// Samples in the dataset (`S`, `len(dataset)`; usually more than requested).
    pub fn len(&self) -> u64 {
        self.shuffle_index.len() as u64
    }

    /// Whether the dataset holds no sample.
    pub fn is_empty(&self) -> bool {
        self.shuffle_index.is_empty()
    }

    /// The document index (sequence ids, `E * M` entries).
    pub fn document_index(&self) -> &[u32] {
        &self.document_index
    }

    /// The sample index: `S + 1` pairs `(position in the document index, token offset)`.
    pub fn sample_index(&self) -> &[[u32; 2]] {
        &self.sample_index
    }

    /// The shuffle index (`S` entries).
    pub fn shuffle_index(&self) -> &[u32] {
        &self.shuffle_index
    }

    /// Tokens of each sample: `seq_length + 1` (or `seq_length` without the extra token).
    pub fn sample_tokens(&self) -> u64 {
        self.seq_length + self.extra
    }

    /// The pieces of sample `k` (`_query_document_sample_shuffle_indices`), in order; their
    /// lengths sum to [`GptIndex::sample_tokens`] except for a kept partial last validation
    /// sample.
    ///
    /// # Errors
    /// [`LoaderError::IndexOutOfRange`] for `k >= len()`.
    pub fn pieces(&self, k: u64, lengths: &[u32]) -> Result<Vec<SamplePiece>, LoaderError> {
        let j = usize::try_from(k)
            .ok()
            .and_then(|k| self.shuffle_index.get(k))
            .ok_or(LoaderError::IndexOutOfRange { index: k, len: self.len() })?;
        let j = *j as usize;
        let [b, ob] = self.sample_index[j];
        let [e, oe] = self.sample_index[j + 1];
        let seq = |p: u32| u64::from(self.document_index[p as usize]);
        let len = |p: u32| u64::from(lengths[self.document_index[p as usize] as usize]);
        let (ob, oe) = (u64::from(ob), u64::from(oe));
        let mut out = Vec::new();
        let mut push = |sequence: u64, offset: u64, n: u64| {
            if n > 0 {
                out.push(SamplePiece { sequence, offset, len: n });
            }
        };
        if b == e {
            push(seq(b), ob, (oe + self.extra).saturating_sub(ob).min(len(b) - ob));
        } else {
            push(seq(b), ob, len(b) - ob);
            for p in b + 1..e {
                push(seq(p), 0, len(p));
            }
            push(seq(e), 0, (oe + self.extra).min(len(e)));
        }
        Ok(out)
    }
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
    /// use guideloom_loader::BlendIndex;
    /// let b = BlendIndex::new(&[0.25, 0.75], 10, 0.005)?;
    /// assert_eq!(b.len(), 11);
    /// assert_eq!(b.component_samples(), [4, 9]); // ceil(ceil(10 * w) * 1.005)
    /// # Ok::<(), guideloom_loader::LoaderError>(())
    /// ```
    ///
    /// # Errors
    /// [`LoaderError::InvalidConfig`] (field `weights`) for no weight, more than 32766, a
    /// negative or non-finite one, or a zero sum.
    pub fn new(weights: &[f64], n: u64, surplus: f64) -> Result<Self, LoaderError> {
        let sum: f64 = weights.iter().sum();
        if weights.is_empty()
            || weights.len() >= 32767
            || weights.iter().any(|w| !w.is_finite() || *w < 0.0)
            || sum <= 0.0
        {
            return Err(LoaderError::InvalidConfig {
                field: "weights",
                detail: format!(
                    "{weights:?}: need 1 to 32766 finite non-negative weights with a positive sum"
                ),
            });
        }
        let weights: Vec<f64> = weights.iter().map(|w| w / sum).collect();
        let per: Vec<u64> = weights.iter().map(|w| (n as f64 * w).ceil() as u64).collect();
        let component_samples = per.iter().map(|&p| (p as f64 * (1.0 + surplus)).ceil() as u64).collect();
        let size: u64 = per.iter().sum();
        let (dataset_index, dataset_sample_index) = megatron_blending_indices(&weights, size);
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
    /// use guideloom_loader::BlendIndex;
    /// let b = BlendIndex::unweighted(&[1, 3], None)?;
    /// assert_eq!((b.len(), b.dataset_index()), (4, &[1u16, 0, 1, 1][..]));
    /// let b = BlendIndex::unweighted(&[1, 3], Some(2))?;
    /// assert_eq!((b.len(), b.weights()), (2, &[0.25, 0.75][..]));
    /// # Ok::<(), guideloom_loader::LoaderError>(())
    /// ```
    ///
    /// # Errors
    /// [`LoaderError::InvalidConfig`] (field `weights`) for no component, more than 32766, or
    /// one of 0 samples (Megatron asserts every weight is positive).
    pub fn unweighted(sizes: &[u64], n: Option<u64>) -> Result<Self, LoaderError> {
        if sizes.is_empty() || sizes.len() >= 32767 || sizes.contains(&0) {
            return Err(LoaderError::InvalidConfig {
                field: "weights",
                detail: format!(
                    "component sizes {sizes:?}: need 1 to 32766 components of at least one sample"
                ),
            });
        }
        let total: u64 = sizes.iter().sum();
        let (weights, (dataset_index, dataset_sample_index)) = match n {
            Some(n) => {
                let sum: f64 = sizes.iter().map(|&x| x as f64).sum();
                let w: Vec<f64> = sizes.iter().map(|&x| x as f64 / sum).collect();
                let indices = megatron_blending_indices(&w, n.min(total));
                (w, indices)
            }
            None => (
                sizes.iter().map(|&x| x as f64 / total as f64).collect(),
                megatron_exhaustive_blending_indices(sizes),
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

/// One sample of a [`MegatronSamples`] source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MegatronSample {
    /// The sample's number in the dataset (or the blend).
    pub index: u64,
    /// The blend component it comes from (0 without a blend).
    pub dataset: u16,
    /// Its tokens, `seq_length + 1` (with the extra token). The partial last sample of a
    /// validation split kept with `drop_last_partial_validation` off ends in
    /// [`GptConfig::pad_token_id`]s up to that length, as Megatron's
    /// `_query_document_sample_shuffle_indices` pads it (Megatron then masks the padding out
    /// of the loss).
    pub tokens: Vec<i64>,
}

/// One component of a [`MegatronSamples`] source.
struct Component {
    reader: StreamReader<IntTokenFormat>,
    lengths: Vec<u32>,
    starts: Vec<u64>,
    index: GptIndex,
}

/// Megatron-Core's training samples over one Megatron dataset (`GPTDataset`) or a weighted
/// blend of several (`BlendedDataset`): record `k` is the sample Megatron's dataset returns
/// for index `k`, its `seq_length + 1` tokens read from the `.bin` files in place.
///
/// Use it with shuffling off (the order is Megatron's), `batch_size` = Megatron's micro
/// batch size and `shard(rank, data_parallel_size)`: the loader's sampler then hands rank
/// `r` the samples `[g*B*W + r*B, g*B*W + (r+1)*B)` of step `g`, as Megatron's
/// `MegatronPretrainingSampler` does. `get_many` reads the pieces of a batch with one read
/// per component. The fingerprint mixes the components' data with the configuration.
///
/// # Errors of [`MegatronSamples::open`]
/// As [`GptIndex::build`] and [`BlendIndex::new`]; [`LoaderError::Open`] when a reader
/// cannot be made; [`LoaderError::InvalidConfig`] (field `data_path`) when a dataset is not
/// a Megatron dataset.
pub struct MegatronSamples {
    components: Vec<Component>,
    blend: Option<BlendIndex>,
    fingerprint: u64,
    /// `L + x`: a shorter sample is padded to it ...
    sample_len: usize,
    /// ... with this id.
    pad_token_id: i64,
}

impl std::fmt::Debug for MegatronSamples {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MegatronSamples")
            .field("components", &self.components.len())
            .field("samples", &self.len())
            .finish()
    }
}

impl MegatronSamples {
    /// The samples of `datasets` (`(weight, dataset)`; one dataset: no blend, its weight is
    /// ignored) under `config`, read with `options`.
    ///
    /// # Errors
    /// See the type's documentation.
    pub fn open(
        datasets: &[(f64, &ForeignDataset)],
        config: &GptConfig,
        options: ReadOptions,
    ) -> Result<Self, LoaderError> {
        let blend = if datasets.len() > 1 {
            let n = config.num_samples.ok_or_else(|| LoaderError::InvalidConfig {
                field: "num_samples",
                detail: "a blend needs the number of samples".into(),
            })?;
            let w: Vec<f64> = datasets.iter().map(|d| d.0).collect();
            Some(BlendIndex::new(&w, n, config.surplus)?)
        } else {
            None
        };
        let mut words =
            vec![0x6d65_6761_7472_6f6e, config.seq_length, config.seed, config.which.position() as u64];
        let data: Vec<&ForeignDataset> = datasets.iter().map(|d| d.1).collect();
        let components = Self::components(&data, config, &options, |i| {
            blend.as_ref().map_or(config.num_samples, |b| Some(b.component_samples()[i]))
        })?;
        for (i, c) in components.iter().enumerate() {
            words.extend([c.reader.fingerprint(), c.index.len(), datasets[i].0.to_bits()]);
        }
        words.push(config.num_samples.unwrap_or(u64::MAX));
        Self::finish(components, blend, config, words)
    }

    /// The components over `datasets`, component `i` built for `num_samples(i)` samples.
    fn components(
        datasets: &[&ForeignDataset],
        config: &GptConfig,
        options: &ReadOptions,
        num_samples: impl Fn(usize) -> Option<u64>,
    ) -> Result<Vec<Component>, LoaderError> {
        let mut components = Vec::with_capacity(datasets.len());
        for (i, data) in datasets.iter().enumerate() {
            let meg = data.megatron().ok_or_else(|| LoaderError::InvalidConfig {
                field: "data_path",
                detail: format!("{} is a {} dataset, not Megatron", data.path().display(), data.format()),
            })?;
            let lengths = meg.sequence_lengths().to_vec();
            let mut starts: Vec<u64> = meg.sequence_windows().iter().map(|w| w.offset).collect();
            starts.push(data.elements());
            let ranges = megatron_split_ranges(&config.split, lengths.len() as u64)?;
            let range = ranges[config.which.position()]
                .clone()
                .ok_or(LoaderError::EmptySplit { split: config.which.name() })?;
            let mut c = config.clone();
            c.num_samples = num_samples(i);
            let index = GptIndex::build(&lengths, range, &c)?;
            let format = IntTokenFormat::new(data.dtype())
                .map_err(|source| open_error(data.path())(StorageError::Format { shard: 0, source }))?;
            let reader = data.reader(format, options.clone()).map_err(open_error(data.path()))?;
            components.push(Component { reader, lengths, starts, index });
        }
        if components.is_empty() {
            return Err(LoaderError::InvalidConfig { field: "data_path", detail: "no dataset".into() });
        }
        Ok(components)
    }

    /// Megatron's samples of several prefixes given without weights (`--data-path A B`):
    /// every component is a one-epoch `GPTDataset` (`num_samples` none), and the blend is
    /// [`BlendIndex::unweighted`] of their lengths for `config.num_samples` (none: each
    /// component drawn until exhausted). One dataset is [`MegatronSamples::open`] of it.
    ///
    /// # Errors
    /// As [`MegatronSamples::open`] and [`BlendIndex::unweighted`].
    pub fn open_unweighted(
        datasets: &[&ForeignDataset],
        config: &GptConfig,
        options: ReadOptions,
    ) -> Result<Self, LoaderError> {
        if let [one] = datasets {
            return Self::open(&[(1.0, one)], config, options);
        }
        let mut words = vec![
            0x6d65_6761_756e_7765, // "megaunwe"
            config.seq_length,
            config.seed,
            config.which.position() as u64,
        ];
        let components = Self::components(datasets, config, &options, |_| None)?;
        let sizes: Vec<u64> = components.iter().map(|c| c.index.len()).collect();
        for c in &components {
            words.extend([c.reader.fingerprint(), c.index.len()]);
        }
        let blend = BlendIndex::unweighted(&sizes, config.num_samples)?;
        words.push(config.num_samples.unwrap_or(u64::MAX));
        Self::finish(components, Some(blend), config, words)
    }

    fn finish(
        components: Vec<Component>,
        blend: Option<BlendIndex>,
        config: &GptConfig,
        mut words: Vec<u64>,
    ) -> Result<Self, LoaderError> {
        if config.which == MegatronSplit::Valid && !config.drop_last_partial_validation {
            words.push(config.pad_token_id as u64);
        }
        let sample_len = usize::try_from(config.seq_length.saturating_add(config.extra())).map_err(|_| {
            LoaderError::InvalidConfig {
                field: "seq_length",
                detail: format!("{} is too long", config.seq_length),
            }
        })?;
        Ok(MegatronSamples {
            components,
            blend,
            fingerprint: fingerprint_words(&words),
            sample_len,
            pad_token_id: config.pad_token_id,
        })
    }

    /// The index of component `i` (0 without a blend).
    pub fn index(&self, i: usize) -> Option<&GptIndex> {
        self.components.get(i).map(|c| &c.index)
    }

    /// The blend's index, when there are several components.
    pub fn blend(&self) -> Option<&BlendIndex> {
        self.blend.as_ref()
    }

    /// The component and the component's sample of record `k`.
    fn locate(&self, k: u64) -> Result<(usize, u64), LoaderError> {
        match &self.blend {
            Some(b) => {
                let i = usize::try_from(k).ok().filter(|&i| i < b.dataset_index.len());
                let i = i.ok_or(LoaderError::IndexOutOfRange { index: k, len: b.len() })?;
                Ok((b.dataset_index[i] as usize, b.dataset_sample_index[i]))
            }
            None => Ok((0, k)),
        }
    }
}

impl DataSource for MegatronSamples {
    type Item = MegatronSample;

    fn len(&self) -> u64 {
        match &self.blend {
            Some(b) => b.len(),
            None => self.components[0].index.len(),
        }
    }

    fn get(&self, index: u64) -> Result<MegatronSample, LoaderError> {
        let mut v = self.get_many(&[index])?;
        v.pop().ok_or(LoaderError::WrongCount { expected: 1, found: 0 })
    }

    fn get_many(&self, indices: &[u64]) -> Result<Vec<MegatronSample>, LoaderError> {
        let mut out: Vec<MegatronSample> =
            indices.iter().map(|&index| MegatronSample { index, dataset: 0, tokens: Vec::new() }).collect();
        let mut per: Vec<Vec<usize>> = vec![Vec::new(); self.components.len()];
        let mut windows: Vec<Vec<Window>> = vec![Vec::new(); self.components.len()];
        for (row, &k) in indices.iter().enumerate() {
            let (ci, sample) = self.locate(k)?;
            let c = &self.components[ci];
            if sample >= c.index.len() {
                return Err(LoaderError::IndexOutOfRange { index: k, len: DataSource::len(self) });
            }
            out[row].dataset = ci as u16;
            for p in c.index.pieces(sample, &c.lengths)? {
                windows[ci].push(Window::new(c.starts[p.sequence as usize] + p.offset, p.len));
                per[ci].push(row);
            }
        }
        for (ci, c) in self.components.iter().enumerate() {
            if windows[ci].is_empty() {
                continue;
            }
            let first = per[ci][0];
            let pieces = c
                .reader
                .read_windows(&windows[ci])
                .map_err(|source| LoaderError::Storage { index: indices[first], source })?;
            for (row, tokens) in per[ci].iter().zip(pieces) {
                out[*row].tokens.extend(tokens);
            }
        }
        for s in &mut out {
            if s.tokens.len() < self.sample_len {
                s.tokens.resize(self.sample_len, self.pad_token_id);
            }
        }
        Ok(out)
    }

    fn fingerprint(&self) -> u64 {
        self.fingerprint
    }
}

/// The loader state that continues a run Megatron stopped after `consumed_samples` samples
/// (`args.consumed_train_samples`): `initial` is the loader's
/// [`Loader::initial_state`](crate::Loader::initial_state) (over a [`MegatronSamples`]
/// source, shuffle off), whose global batch (micro batch × data-parallel size) Megatron
/// consumed whole steps of.
///
/// # Errors
/// [`LoaderError::ElasticResume`] when `consumed_samples` is not a multiple of the global
/// batch; [`megatron_resume_source`] continues such a count exactly.
pub fn megatron_resume_state(initial: &State, consumed_samples: u64) -> Result<State, LoaderError> {
    let g = initial.global_batch.max(1);
    if !consumed_samples.is_multiple_of(g) {
        return Err(LoaderError::ElasticResume { consumed: consumed_samples, global_batch: g });
    }
    Ok(State { next_batch: consumed_samples / g, ..*initial })
}

/// Continues a Megatron run at any `consumed_samples`, also one that is not a whole number
/// of this run's steps (the earlier run used another micro batch × data-parallel size, or
/// stopped inside a batch-size ramp-up): returns `source` without its first
/// `consumed_samples mod global_batch` samples, and the step `consumed_samples div
/// global_batch` to start a loader over it at (set it as the `next_batch` of the loader's
/// [`Loader::initial_state`](crate::Loader::initial_state)). Step `t` then holds Megatron's
/// samples `[consumed + (t - next_batch) * G, consumed + (t - next_batch + 1) * G)`, as
/// Megatron's `MegatronPretrainingSampler` deals them from `consumed_samples` on: the resumed
/// run's samples equal the uninterrupted run's after `consumed_samples`, with whole steps
/// (a loader with `drop_remainder` drops the incomplete last one, as Megatron does). A state
/// saved by such a loader resumes only onto a source with the same offset (the offset is
/// part of the source's fingerprint).
///
/// ```
/// use guideloom_loader::{megatron_resume_source, DataSource, Loader, RangeSource, State};
/// let (source, next_batch) = megatron_resume_source(RangeSource::new(0, 10, 1)?, 3, 2)?;
/// let loader = Loader::builder(source).batch_size(2).drop_remainder(true).workers(0).build()?;
/// let state = State { next_batch, ..loader.initial_state() };
/// let rest: Vec<Vec<i64>> = loader.iter_from(&state)?.map(|b| b.map(|b| b.data)).collect::<Result<_, _>>()?;
/// assert_eq!(rest, [[3, 4], [5, 6], [7, 8]]);
/// # Ok::<(), guideloom_loader::LoaderError>(())
/// ```
///
/// # Errors
/// [`LoaderError::InvalidConfig`] (field `global_batch`) when `global_batch` is 0.
pub fn megatron_resume_source<S: DataSource>(
    source: S,
    consumed_samples: u64,
    global_batch: u64,
) -> Result<(Slice<S>, u64), LoaderError> {
    if global_batch == 0 {
        return Err(LoaderError::InvalidConfig { field: "global_batch", detail: "must be > 0".into() });
    }
    Ok((Slice::skip(source, consumed_samples % global_batch), consumed_samples / global_batch))
}
