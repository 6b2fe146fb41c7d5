//! Checkpoint state of a loader iterator.

use serde::{Deserialize, Serialize};

use crate::{LoaderError, SamplerConfig};

/// The state format version this crate writes and reads.
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
pub const STATE_VERSION: u32 = 1;

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

/// The serializable cursor of a loader iterator: a checkpoint.
///
/// `next_batch` is the absolute number of the next batch the consumer has not received
/// (counting from the first batch of epoch 0, not from the last restore); the rest pins the
/// sampling configuration and the data. It does not depend on worker count, prefetch depth or
/// I/O backend, and its JSON is about 200 bytes (250 for window sources, which also record
/// their [`WindowParams`]).
///
/// States written before [`SourceId::window`] existed still load and resume (same
/// [`STATE_VERSION`]); they are checked by record count and fingerprint only.
///
/// ```
/// use guideloom_loader::{Loader, RangeSource, State};
/// let loader = Loader::builder(RangeSource::new(0, 10, 1)?).batch_size(4).workers(0).build()?;
/// let mut it = loader.iter();
/// it.next().unwrap()?;
/// let json = it.state().to_json();
/// let state = State::from_json(&json)?;
/// assert_eq!(state.next_batch, 1);
/// let rest: Vec<_> = loader.iter_from(&state)?.map(|b| b.map(|b| b.data)).collect::<Result<_, _>>()?;
/// assert_eq!(rest, [vec![4, 5, 6, 7], vec![8, 9]]);
/// # Ok::<(), guideloom_loader::LoaderError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct State {
    /// State format version ([`STATE_VERSION`]).
    pub version: u32,
    /// Absolute number of the next batch the consumer has not received.
    pub next_batch: u64,
    /// The sampling configuration (seed, shuffle, epochs, batch size, shard options).
    pub config: SamplerConfig,
    /// The data source.
    pub source: SourceId,
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

    /// Parses a state written by [`State::to_json`].
    ///
    /// # Errors
    /// [`LoaderError::StateJson`] when the text is not a state.
    pub fn from_json(json: &str) -> Result<Self, LoaderError> {
        Ok(serde_json::from_str(json)?)
    }

    /// Checks that `self` (a saved state) fits a loader whose own state at batch 0 is
    /// `expected`, field by field.
    pub(crate) fn check_against(&self, expected: &State) -> Result<(), LoaderError> {
        if self.version != STATE_VERSION {
            return Err(LoaderError::StateVersion { expected: STATE_VERSION, found: self.version });
        }
        fn cmp<T: PartialEq + std::fmt::Display>(
            field: &'static str,
            ours: T,
            theirs: T,
        ) -> Result<(), LoaderError> {
            if ours == theirs {
                Ok(())
            } else {
                Err(LoaderError::StateMismatch {
                    field,
                    expected: ours.to_string(),
                    found: theirs.to_string(),
                })
            }
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
        cmp("batch_size", a.batch_size, b.batch_size)?;
        cmp("drop_remainder", a.drop_remainder, b.drop_remainder)?;
        cmp("rank", a.rank, b.rank)?;
        cmp("world_size", a.world_size, b.world_size)?;
        Ok(())
    }
}
