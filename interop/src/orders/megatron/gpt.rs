//! One `GPTDataset`'s indices, as Megatron-Core computes them: [`GptConfig`], [`GptIndex`]
//! (document, sample and shuffle index, the 80 % separate-last-epoch rule) and the
//! [`SamplePiece`]s of a sample; [`GptIndex::check_cache`] compares them with Megatron's own
//! cached `.npy` files.
//!
//! Sources: NVIDIA/Megatron-LM `megatron/core/datasets/gpt_dataset.py`
//! (`_build_document_sample_shuffle_indices`, `_build_document_index`, `_build_shuffle_index`,
//! `_get_num_epochs`, `_query_document_sample_shuffle_indices`) and `helpers.cpp`
//! (`build_sample_idx`).

use std::ops::Range;
use std::path::{Path, PathBuf};

use guideloom_formats::IntTokenFormat;
use guideloom_loader::LoaderError;
use guideloom_storage::{ReadOptions, StorageError, Window};

use crate::dataset::ForeignDataset;
use crate::error::{InteropError, Result};
use crate::format::ForeignFormat;
use crate::options::ForeignOptions;
use crate::orders::capacity::index_vec;
use crate::orders::megatron::mt19937::Mt19937;
use crate::orders::megatron::split::MegatronSplit;

/// The configuration of one `GPTDataset` (`GPTDatasetConfig` and the builder's arguments).
///
/// ```
/// use guideloom_interop::{GptConfig, MegatronSplit};
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
    /// Megatron-LM's default `--seed` (`RNGConfig.seed` in `megatron/training/config/common_config.py`):
    /// what `batches --order megatron` and `inspect --order megatron` use without `--seed`.
    pub const DEFAULT_SEED: u64 = 1234;

    /// `seq_length` and `seed` with Megatron's defaults for the rest: `--split "969,30,1"`
    /// (Megatron-LM's legacy default when `--data-path` comes without `--split`), the train split,
    /// one epoch, `add_extra_token_to_sequence` and `drop_last_partial_validation_sequence` on,
    /// `mid_level_dataset_surplus` 0.005 and pad id -1 (megatron-core's `GPTDatasetConfig` and
    /// `BlendedMegatronDatasetConfig` defaults).
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

    /// The extra token of each sample (1 with `add_extra_token`, else 0).
    pub(crate) fn extra(&self) -> u64 {
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
    /// `lengths` tokens (the split, as [`megatron_split_ranges`](crate::megatron_split_ranges) gives it).
    ///
    /// ```
    /// use guideloom_interop::{GptConfig, GptIndex};
    /// let c = GptConfig::new(4, 1234).num_samples(5);
    /// let ix = GptIndex::build(&[4, 3, 5, 2], 0..4, &c)?;
    /// assert_eq!(ix.document_index(), [2, 1, 2, 0, 0, 1, 3, 3]);
    /// assert_eq!(ix.shuffle_index(), [0, 4, 3, 2, 5, 1]);
    /// # Ok::<(), guideloom_interop::InteropError>(())
    /// ```
    ///
    /// # Errors
    /// [`InteropError::InvalidSeed`]; [`InteropError::EmptySplit`] when the split holds no
    /// token; [`InteropError::InvalidConfig`] for `seq_length` 0, a range past `lengths`, or
    /// indices over `u32` entries.
    pub fn build(lengths: &[u32], range: Range<u64>, config: &GptConfig) -> Result<Self> {
        let mut rng = Mt19937::new(config.seed)?;
        let l = config.seq_length;
        if l == 0 {
            return Err(InteropError::InvalidConfig { field: "seq_length", detail: "must be > 0".into() });
        }
        // The most entries Megatron's 32-bit indices take: a document index below
        // `u32::MAX` entries, and a shuffle index below `u32::MAX - 1` (where
        // `_build_shuffle_index` turns to int64).
        let too_large = |what: &str, most: u32| InteropError::InvalidConfig {
            field: "num_samples",
            detail: format!("the {what} would hold more than {most} entries"),
        };
        if range.end > lengths.len() as u64 || range.start > range.end {
            return Err(InteropError::InvalidConfig {
                field: "split",
                detail: format!("sequences {range:?} pass the {} of the dataset", lengths.len()),
            });
        }
        let x = config.extra();
        let docs = &lengths[range.start as usize..range.end as usize];
        let tokens: u64 = docs.iter().map(|&n| u64::from(n)).sum();
        if tokens == 0 {
            return Err(InteropError::EmptySplit { split: config.which.name() });
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
            .ok_or_else(|| too_large("document index", u32::MAX - 1))?;
        let ids = range.start as u32..range.end as u32;
        let mut document_index: Vec<u32> = index_vec("document index", total)?;
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
            return Err(too_large("shuffle index", u32::MAX - 2));
        }
        let mut sample_index: Vec<[u32; 2]> = index_vec("sample index", samples + 1)?;
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
    /// [`InteropError::Dataset`] or [`InteropError::Storage`] when a file cannot be read as an
    /// integer `.npy`; [`InteropError::CacheMismatch`] naming the first array and entry that differ (or the
    /// lengths).
    pub fn check_cache(&self, prefix: &Path) -> Result<()> {
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
            let data = ForeignDataset::open(&path, &options)?;
            let format = IntTokenFormat::new(data.dtype())
                .map_err(|source| StorageError::Format { shard: 0, source })?;
            let reader = data.reader(format, ReadOptions::default())?;
            let n = data.elements();
            let got = if n == 0 {
                Vec::new()
            } else {
                let mut v = reader.read_many(&[Window::new(0, n)])?;
                v.pop().unwrap_or_default()
            };
            if let Some(entry) = got.iter().zip(&want).position(|(a, b)| a != b) {
                return Err(InteropError::CacheMismatch {
                    array,
                    entry: entry as u64,
                    cached: got[entry],
                    computed: want[entry],
                });
            }
            if got.len() != want.len() {
                return Err(InteropError::CacheMismatch {
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
