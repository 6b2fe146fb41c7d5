//! Megatron-Core's training samples as a loader source ([`MegatronSamples`]: one
//! `GPTDataset` or a `BlendedDataset` of several, read from the `.bin` files in place), and
//! the states that continue a Megatron run at its `consumed_samples`
//! ([`megatron_resume_state`], [`megatron_resume_source`]).
//!
//! The order is a pure function of the configuration and the sequence lengths, so a loader
//! over [`MegatronSamples`] keeps its O(1) [`State`]. Sources: NVIDIA/Megatron-LM
//! `megatron/core/datasets/gpt_dataset.py` (`GPTDataset.__getitem__`,
//! `_query_document_sample_shuffle_indices`), `blended_dataset.py` and
//! `megatron/legacy/data/data_samplers.py` (`MegatronPretrainingSampler`).

use guideloom_formats::IntTokenFormat;
use guideloom_loader::transforms::Slice;
use guideloom_loader::{fingerprint_words, DataSource, LoaderError, State, WindowReader};
use guideloom_storage::{ReadOptions, StorageError, StreamReader, Window};

use crate::dataset::ForeignDataset;
use crate::error::{open_error, InteropError, Result};
use crate::orders::megatron::blend::BlendIndex;
use crate::orders::megatron::gpt::{GptConfig, GptIndex};
use crate::orders::megatron::split::{megatron_split_ranges, MegatronSplit};

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
/// cannot be made; [`InteropError::InvalidConfig`] (field `data_path`) when a dataset is not
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
    ) -> Result<Self> {
        let blend = if datasets.len() > 1 {
            let n = config.num_samples.ok_or_else(|| InteropError::InvalidConfig {
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
    ) -> Result<Vec<Component>> {
        let mut components = Vec::with_capacity(datasets.len());
        for (i, data) in datasets.iter().enumerate() {
            let meg = data.megatron().ok_or_else(|| InteropError::InvalidConfig {
                field: "data_path",
                detail: format!("{} is a {} dataset, not Megatron", data.path().display(), data.format()),
            })?;
            let lengths = meg.sequence_lengths().to_vec();
            let mut starts: Vec<u64> = meg.sequence_windows().iter().map(|w| w.offset).collect();
            starts.push(data.elements());
            let ranges = megatron_split_ranges(&config.split, lengths.len() as u64)?;
            let range = ranges[config.which.position()]
                .clone()
                .ok_or(InteropError::EmptySplit { split: config.which.name() })?;
            let mut c = config.clone();
            c.num_samples = num_samples(i);
            let index = GptIndex::build(&lengths, range, &c)?;
            let format = IntTokenFormat::new(data.dtype())
                .map_err(|source| open_error(data.path())(StorageError::Format { shard: 0, source }))?;
            let reader = data.reader(format, options.clone()).map_err(open_error(data.path()))?;
            components.push(Component { reader, lengths, starts, index });
        }
        if components.is_empty() {
            return Err(InteropError::InvalidConfig { field: "data_path", detail: "no dataset".into() });
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
    ) -> Result<Self> {
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
    ) -> Result<Self> {
        if config.which == MegatronSplit::Valid && !config.drop_last_partial_validation {
            words.push(config.pad_token_id as u64);
        }
        let sample_len = usize::try_from(config.seq_length.saturating_add(config.extra())).map_err(|_| {
            InteropError::InvalidConfig {
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
                let i = usize::try_from(k).ok().filter(|&i| i < b.dataset_index().len());
                let i = i.ok_or(LoaderError::IndexOutOfRange { index: k, len: b.len() })?;
                Ok((b.dataset_index()[i] as usize, b.dataset_sample_index()[i]))
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
/// [`Loader::initial_state`](guideloom_loader::Loader::initial_state) (over a [`MegatronSamples`]
/// source, shuffle off), whose global batch (micro batch × data-parallel size) Megatron
/// consumed whole steps of.
///
/// # Errors
/// [`InteropError::Loader`] with [`LoaderError::ElasticResume`] when `consumed_samples` is not
/// a multiple of the global batch; [`megatron_resume_source`] continues such a count exactly.
pub fn megatron_resume_state(initial: &State, consumed_samples: u64) -> Result<State> {
    let g = initial.global_batch.max(1);
    if !consumed_samples.is_multiple_of(g) {
        return Err(LoaderError::ElasticResume { consumed: consumed_samples, global_batch: g }.into());
    }
    Ok(State { next_batch: consumed_samples / g, ..*initial })
}

/// Continues a Megatron run at any `consumed_samples`, also one that is not a whole number
/// of this run's steps (the earlier run used another micro batch × data-parallel size, or
/// stopped inside a batch-size ramp-up): returns `source` without its first
/// `consumed_samples mod global_batch` samples, and the step `consumed_samples div
/// global_batch` to start a loader over it at (set it as the `next_batch` of the loader's
/// [`Loader::initial_state`](guideloom_loader::Loader::initial_state)). Step `t` then holds
/// Megatron's samples `[consumed + (t - next_batch) * G, consumed + (t - next_batch + 1) * G)`, as
/// Megatron's `MegatronPretrainingSampler` deals them from `consumed_samples` on: the resumed
/// run's samples equal the uninterrupted run's after `consumed_samples`, with whole steps
/// (a loader with `drop_remainder` drops the incomplete last one, as Megatron does). A state
/// saved by such a loader resumes only onto a source with the same offset (the offset is
/// part of the source's fingerprint).
///
/// ```
/// use guideloom_interop::megatron_resume_source;
/// use guideloom_loader::{Loader, RangeSource, State};
/// let (source, next_batch) = megatron_resume_source(RangeSource::new(0, 10, 1)?, 3, 2)?;
/// let loader = Loader::builder(source).batch_size(2).drop_remainder(true).workers(0).build()?;
/// let state = State { next_batch, ..loader.initial_state() };
/// let rest: Vec<Vec<i64>> = loader.iter_from(&state)?.map(|b| b.map(|b| b.data)).collect::<Result<_, _>>()?;
/// assert_eq!(rest, [[3, 4], [5, 6], [7, 8]]);
/// # Ok::<(), guideloom_interop::InteropError>(())
/// ```
///
/// # Errors
/// [`InteropError::InvalidConfig`] (field `global_batch`) when `global_batch` is 0.
pub fn megatron_resume_source<S: DataSource>(
    source: S,
    consumed_samples: u64,
    global_batch: u64,
) -> Result<(Slice<S>, u64)> {
    if global_batch == 0 {
        return Err(InteropError::InvalidConfig { field: "global_batch", detail: "must be > 0".into() });
    }
    Ok((Slice::skip(source, consumed_samples % global_batch), consumed_samples / global_batch))
}
