//! Checkpoint state of a loader iterator.

use serde::{Deserialize, Serialize};

use crate::error::check_same as cmp;
use crate::{LoaderError, SamplerConfig};

/// The state format version this crate writes. It also reads version 1 (see [`State`]).
///
/// The rule: a saved [`State`] resumes onto the same batches only while the order and the
/// draws it implies stay the same, so any change to the shuffled order
/// ([`Permutation`](crate::Permutation): rounds, round keys, cycle-walking, the small-domain
/// sign rule), to how the sampler lays out batches and ranks, to the per-record RNG
/// ([`RecordRng`](crate::RecordRng)) or to a fingerprint ([`RangeSource`](crate::RangeSource),
/// window sources, the storage manifest's) requires bumping this version, so that older
/// states are refused with [`LoaderError::StateVersion`] instead of resuming onto other
/// batches. The loader's `golden` tests pin literal orders, draws and fingerprints; a change
/// that fails them needs this bump (and new golden values), never only new golden values.
pub const STATE_VERSION: u32 = 2;

/// Identifies a data source in a [`State`]: its length, [`DataSource::fingerprint`] and,
/// for window sources, the [`WindowParams`] that shape its records.
///
/// [`DataSource::fingerprint`]: crate::DataSource::fingerprint
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SourceId {
    /// Number of records.
    pub records: u64,
    /// The source's content fingerprint (0 when the source has none).
    pub fingerprint: u64,
    /// The window parameters of a window source ([`DataSource::window_params`]); `None` for
    /// other sources and in states written before the field existed (JSON: the `window` key
    /// is then absent).
    ///
    /// [`DataSource::window_params`]: crate::DataSource::window_params
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<WindowParams>,
}

/// The parameters that shape the records of a window source (window `w` = elements
/// `[w * stride, w * stride + seq_len)` of a stream of `elements` elements), recorded in a
/// [`State`] so that resuming with another window length or stride names the parameter that
/// differs instead of reporting a record count mismatch.
///
/// ```
/// use guideloom_loader::{DataSource, RangeSource, WindowParams};
/// let p = WindowParams { seq_len: 129, stride: 128, elements: 10_000 };
/// assert_eq!(serde_json::to_string(&p)?, r#"{"seq_len":129,"stride":128,"elements":10000}"#);
/// assert_eq!(RangeSource::new(0, 3, 1)?.window_params(), None);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct WindowParams {
    /// Elements per window.
    pub seq_len: u64,
    /// Elements between the starts of consecutive windows.
    pub stride: u64,
    /// Elements in the stream the windows are cut from.
    pub elements: u64,
}

/// The sampling options a [`State`] pins: those that shape the global order of every epoch.
/// The topology (rank, world size, batch size per rank) is not among them: a version-2 state
/// restores onto any topology with the same global batch (see [`State`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StateConfig {
    /// Seed of the per-epoch permutations and of the per-record RNGs.
    pub seed: u64,
    /// Whether each epoch visits the records in a seeded pseudo-random order.
    pub shuffle: bool,
    /// Number of epochs, or `None` (JSON `null`) for an unbounded stream.
    pub epochs: Option<u64>,
    /// Whether the incomplete final global batch of each epoch is dropped.
    pub drop_remainder: bool,
}

impl From<&SamplerConfig> for StateConfig {
    fn from(c: &SamplerConfig) -> Self {
        StateConfig { seed: c.seed, shuffle: c.shuffle, epochs: c.epochs, drop_remainder: c.drop_remainder }
    }
}

/// The data-parallel topology a version-1 state was written with; version-1 states resume
/// only onto that topology.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Topology {
    /// The rank that wrote the state.
    pub rank: u64,
    /// The world size.
    pub world_size: u64,
    /// Records per batch per rank.
    pub batch_size: u64,
}

/// The serializable cursor of a loader iterator: a checkpoint.
///
/// `next_batch` is the absolute number of the next **global** step the consumer has not
/// received (counting from the first step of epoch 0, not from the last restore; every rank
/// is at the same step, so it is also the rank's batch number); `global_batch` is `G = B * W`,
/// the records one step consumes over all ranks; the rest pins the order of every epoch
/// (seed, shuffle, epochs, drop policy), the data and the transforms. Nothing in it depends on
/// the rank, the world size, the worker count, prefetch depth or I/O backend: the states of
/// all ranks at one step are byte-identical, and any of them restores any rank.
///
/// # Elastic resume
///
/// Step `t` of an epoch consumes global positions `[t*G, (t+1)*G)` of its order, whatever
/// the topology, so [`Loader::iter_from`](crate::Loader::iter_from) restores a state onto
/// any `(rank, world_size, batch_size)`:
/// - `batch_size * world_size == global_batch`: the next step is `next_batch`; every later
///   step holds the same set of records as the uninterrupted run, only their split over the
///   ranks changes; per-record randomness ([`RecordRng`](crate::RecordRng), keyed by the
///   position) and later epochs are unchanged.
/// - another global batch `G'`: accepted when the positions the state's epoch consumed,
///   `(next_batch mod batches_per_epoch) * G`, are a multiple of `G'` (the step is rescaled);
///   otherwise [`LoaderError::ElasticResume`], unless the caller asks to round down
///   ([`ResumeOptions::round_down`](crate::ResumeOptions::round_down)), which replays the
///   positions of the incomplete step and flags them in [`Batch::repeat`](crate::Batch).
///
/// The tail of an epoch: with `drop_remainder` off, the real records of the last step are the
/// same for every topology; the number of padding slots (flagged in
/// [`Batch::padding`](crate::Batch)) depends on it only where `W == 1` (no padding, a short
/// last batch) differs from `W > 1`.
///
/// # Versions
///
/// This crate writes version 2 ([`STATE_VERSION`]). A version-1 state (which recorded the
/// rank, world size and batch size instead of the global batch, and no transforms
/// fingerprint) still loads and resumes onto the topology it was written with
/// ([`State::topology`]); another topology is a [`LoaderError::StateMismatch`] naming
/// `batch_size`, `rank` or `world_size`. Serializing it again writes version 1.
///
/// ```
/// use guideloom_loader::{Loader, RangeSource, State};
/// let loader = Loader::builder(RangeSource::new(0, 10, 1)?).batch_size(4).workers(0).build()?;
/// let mut it = loader.iter();
/// it.next().unwrap()?;
/// let json = it.state().to_json();
/// let state = State::from_json(&json)?;
/// assert_eq!((state.next_batch, state.global_batch), (1, 4));
/// let rest: Vec<_> = loader.iter_from(&state)?.map(|b| b.map(|b| b.data)).collect::<Result<_, _>>()?;
/// assert_eq!(rest, [vec![4, 5, 6, 7], vec![8, 9]]);
/// // Two ranks of two records each take over from the one rank of four.
/// let rank1 = Loader::builder(RangeSource::new(0, 10, 1)?).batch_size(2).shard(1, 2).build()?;
/// let rest: Vec<_> = rank1.iter_from(&state)?.map(|b| b.map(|b| b.data)).collect::<Result<_, _>>()?;
/// assert_eq!(rest, [vec![6, 7], vec![0, 1]]); // the second batch is padding
/// # Ok::<(), guideloom_loader::LoaderError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(from = "StateRepr", into = "StateRepr")]
pub struct State {
    /// State format version ([`STATE_VERSION`], or 1 for a state read from version 1).
    pub version: u32,
    /// Absolute number of the next global step (batch) the consumer has not received.
    pub next_batch: u64,
    /// Records per global step, `G = batch_size * world_size`.
    pub global_batch: u64,
    /// The options that shape the order (seed, shuffle, epochs, drop policy).
    pub config: StateConfig,
    /// The data source.
    pub source: SourceId,
    /// The fingerprint of the loader's transforms
    /// ([`LoaderBuilder::transforms_fingerprint`](crate::LoaderBuilder::transforms_fingerprint),
    /// 0 when none was declared).
    pub transforms_fingerprint: u64,
    /// The topology a version-1 state was written with (it resumes only onto that one);
    /// `None` for version 2.
    pub topology: Option<Topology>,
}

/// The two JSON layouts of a state. Serialized untagged; read by the `Deserialize` below,
/// which tells the layouts apart by their keys, so that a state of another kind (a packed or
/// sequential loader's, a hand-edited one) is reported by the field it lacks or gets wrong,
/// not as "data did not match any variant".
#[derive(Serialize)]
#[serde(untagged)]
enum StateRepr {
    V2 {
        version: u32,
        next_batch: u64,
        global_batch: u64,
        config: StateConfig,
        source: SourceId,
        transforms_fingerprint: u64,
    },
    V1 {
        version: u32,
        next_batch: u64,
        config: SamplerConfig,
        source: SourceId,
    },
}

impl<'de> Deserialize<'de> for StateRepr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        let value = serde_json::Value::deserialize(d)?;
        // The version-1 layout has no `global_batch` and keeps the topology in `config`; every
        // other object is read as version 2, whose errors name the missing or invalid field.
        let v1 = value.get("global_batch").is_none()
            && value.get("config").and_then(|c| c.get("batch_size")).is_some();
        let parsed = if v1 {
            V1Layout::deserialize(value).map(StateRepr::from)
        } else {
            V2Layout::deserialize(value).map(StateRepr::from)
        };
        parsed.map_err(D::Error::custom)
    }
}

/// The version-2 layout, read on its own (see [`StateRepr`]'s `Deserialize`).
#[derive(Deserialize)]
struct V2Layout {
    version: u32,
    next_batch: u64,
    global_batch: u64,
    config: StateConfig,
    source: SourceId,
    #[serde(default)]
    transforms_fingerprint: u64,
}

/// The version-1 layout, read on its own (see [`StateRepr`]'s `Deserialize`).
#[derive(Deserialize)]
struct V1Layout {
    version: u32,
    next_batch: u64,
    config: SamplerConfig,
    source: SourceId,
}

impl From<V2Layout> for StateRepr {
    fn from(l: V2Layout) -> Self {
        let V2Layout { version, next_batch, global_batch, config, source, transforms_fingerprint } = l;
        StateRepr::V2 { version, next_batch, global_batch, config, source, transforms_fingerprint }
    }
}

impl From<V1Layout> for StateRepr {
    fn from(l: V1Layout) -> Self {
        let V1Layout { version, next_batch, config, source } = l;
        StateRepr::V1 { version, next_batch, config, source }
    }
}

impl From<StateRepr> for State {
    fn from(r: StateRepr) -> Self {
        match r {
            StateRepr::V2 { version, next_batch, global_batch, config, source, transforms_fingerprint } => {
                State {
                    version,
                    next_batch,
                    global_batch,
                    config,
                    source,
                    transforms_fingerprint,
                    topology: None,
                }
            }
            StateRepr::V1 { version, next_batch, config, source } => State {
                version,
                next_batch,
                global_batch: config.batch_size.saturating_mul(config.world_size),
                config: StateConfig::from(&config),
                source,
                transforms_fingerprint: 0,
                topology: Some(Topology {
                    rank: config.rank,
                    world_size: config.world_size,
                    batch_size: config.batch_size,
                }),
            },
        }
    }
}

impl From<State> for StateRepr {
    fn from(s: State) -> Self {
        match s.topology {
            None => StateRepr::V2 {
                version: s.version,
                next_batch: s.next_batch,
                global_batch: s.global_batch,
                config: s.config,
                source: s.source,
                transforms_fingerprint: s.transforms_fingerprint,
            },
            Some(t) => StateRepr::V1 {
                version: s.version,
                next_batch: s.next_batch,
                config: SamplerConfig {
                    seed: s.config.seed,
                    shuffle: s.config.shuffle,
                    epochs: s.config.epochs,
                    batch_size: t.batch_size,
                    drop_remainder: s.config.drop_remainder,
                    rank: t.rank,
                    world_size: t.world_size,
                },
                source: s.source,
            },
        }
    }
}

impl State {
    /// The state as compact JSON.
    pub fn to_json(&self) -> String {
        // Serializing plain integers and booleans cannot fail.
        match serde_json::to_string(self) {
            Ok(s) => s,
            Err(e) => panic!("serializing a State failed: {e}"),
        }
    }

    /// Parses a state written by [`State::to_json`] (version 2, or version 1).
    ///
    /// # Errors
    /// [`LoaderError::StateJson`] when the text is not a state.
    pub fn from_json(json: &str) -> Result<Self, LoaderError> {
        Ok(serde_json::from_str(json)?)
    }

    /// Checks that `self` (a saved state) fits a loader whose own state at step 0 is
    /// `expected` and whose topology is `topology`, field by field. The global batch is not
    /// checked here (a different one may be rescaled).
    pub(crate) fn check_against(&self, expected: &State, topology: Topology) -> Result<(), LoaderError> {
        if !(1..=STATE_VERSION).contains(&self.version) {
            return Err(LoaderError::StateVersion { expected: STATE_VERSION, found: self.version });
        }
        let (a, b) = (&expected.config, &self.config);
        if let (Some(ours), Some(theirs)) = (expected.source.window, self.source.window) {
            cmp("source.seq_len", ours.seq_len, theirs.seq_len)?;
            cmp("source.stride", ours.stride, theirs.stride)?;
            cmp("source.elements", ours.elements, theirs.elements)?;
        }
        cmp("source.records", expected.source.records, self.source.records)?;
        cmp("source.fingerprint", expected.source.fingerprint, self.source.fingerprint)?;
        cmp("seed", a.seed, b.seed)?;
        cmp("shuffle", a.shuffle, b.shuffle)?;
        let epochs = |e: Option<u64>| e.map_or_else(|| "unbounded".to_string(), |n| n.to_string());
        if a.epochs != b.epochs {
            return Err(LoaderError::StateMismatch {
                field: "epochs",
                expected: epochs(a.epochs),
                found: epochs(b.epochs),
            });
        }
        match self.topology {
            // Version 1: the topology it was written with, and no transforms fingerprint.
            Some(t) => {
                cmp("batch_size", topology.batch_size, t.batch_size)?;
                cmp("drop_remainder", a.drop_remainder, b.drop_remainder)?;
                cmp("rank", topology.rank, t.rank)?;
                cmp("world_size", topology.world_size, t.world_size)?;
            }
            None => {
                cmp("drop_remainder", a.drop_remainder, b.drop_remainder)?;
                cmp("transforms_fingerprint", expected.transforms_fingerprint, self.transforms_fingerprint)?;
            }
        }
        Ok(())
    }
}
