//! The stage's checkpoint ([`StageState`]) and output batch ([`StageBatch`]).

use serde::{Deserialize, Serialize};

use crate::{LoaderError, State};

/// The [`StageState`] format version this crate writes and reads.
pub const STAGE_STATE_VERSION: u32 = 1;

/// Checkpoint of a stage iterator ([`RebatchedIter`](crate::stage::RebatchedIter),
/// [`StagePackedIter`](crate::stage::StagePackedIter)): O(1), a few integers and the upstream
/// loader's [`State`].
///
/// ```
/// use guideloom_loader::stage::{Rebatched, StageState};
/// use guideloom_loader::{Loader, VecSource};
/// let loader = Loader::builder(VecSource::new((0..10u32).map(Some).collect())).batch_size(4).build()?;
/// let stage = Rebatched::new(loader, 3)?;
/// let mut it = stage.iter();
/// it.next().unwrap()?;
/// let json = it.state().to_json();
/// assert!(json.len() < 1024);
/// let state = StageState::from_json(&json)?;
/// assert_eq!((state.upstream.next_batch, state.offset, state.next_batch), (0, 3, 1));
/// # Ok::<(), guideloom_loader::LoaderError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageState {
    /// [`STAGE_STATE_VERSION`].
    pub version: u32,
    /// Output batches delivered so far (the number of the next one).
    pub next_batch: u64,
    /// The upstream loader's state whose `next_batch` is the upstream batch holding the
    /// resume position.
    pub upstream: State,
    /// Slot of the resume position in that upstream batch (holes and padding count).
    pub offset: u64,
    /// Tokens of the record at the resume position already packed before it (a record split
    /// across rows or groups); 0 for [`Rebatched`](crate::stage::Rebatched).
    pub token: u64,
    /// Rows of the group starting at the resume position already delivered; 0 for
    /// [`Rebatched`](crate::stage::Rebatched).
    pub rows: u64,
    /// Fingerprint of the stage's configuration and the upstream topology (batch size, rank,
    /// world size): a state resumes only onto the same stage and topology.
    pub fingerprint: u64,
}

impl StageState {
    /// The state of a stage (its `fingerprint`) that has delivered nothing, over an upstream
    /// loader at `upstream`.
    pub(crate) fn start(upstream: State, fingerprint: u64) -> Self {
        StageState {
            version: STAGE_STATE_VERSION,
            next_batch: 0,
            upstream,
            offset: 0,
            token: 0,
            rows: 0,
            fingerprint,
        }
    }

    /// The state as compact JSON.
    pub fn to_json(&self) -> String {
        // Serializing plain integers and booleans cannot fail.
        match serde_json::to_string(self) {
            Ok(s) => s,
            Err(e) => panic!("serializing a StageState failed: {e}"),
        }
    }

    /// Parses a state written by [`StageState::to_json`].
    ///
    /// # Errors
    /// [`LoaderError::StateJson`] for malformed JSON.
    pub fn from_json(json: &str) -> Result<Self, LoaderError> {
        Ok(serde_json::from_str(json)?)
    }
}

/// One output batch of a stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageBatch<T> {
    /// Output batch number, from 0.
    pub number: u64,
    /// The epoch of every record in the batch.
    pub epoch: u64,
    /// For [`Rebatched`](crate::stage::Rebatched): the record index of each item. For
    /// [`StagePacked`](crate::stage::StagePacked): the record of every piece, row by row,
    /// segment by segment.
    pub indices: Vec<u64>,
    /// The records ([`Rebatched`](crate::stage::Rebatched)) or rows
    /// ([`StagePacked`](crate::stage::StagePacked)).
    pub data: Vec<T>,
}

/// Checks a state's version and fingerprint.
pub(crate) fn check_state(state: &StageState, fingerprint: u64) -> Result<(), LoaderError> {
    if state.version != STAGE_STATE_VERSION {
        return Err(LoaderError::StateVersion { expected: STAGE_STATE_VERSION, found: state.version });
    }
    if state.fingerprint != fingerprint {
        // The field keeps its name from before the stage was called the stage: states and
        // messages stay as they were.
        return Err(LoaderError::StateMismatch {
            field: "stream.fingerprint",
            expected: fingerprint.to_string(),
            found: state.fingerprint.to_string(),
        });
    }
    Ok(())
}
