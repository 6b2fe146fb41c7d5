//! The checkpoint of a [`SequentialIter`](crate::sequential::SequentialIter).

use serde::{Deserialize, Serialize};

use crate::sequential::ShardPos;
use crate::LoaderError;

/// The sequential state format version this crate writes and reads.
pub const SEQUENTIAL_STATE_VERSION: u32 = 1;

/// Where a shard of a rank's interleave is: the shard, the position of its current shuffle window
/// (or of its next record), the records of that window already delivered, and, for packed
/// token windows, the tokens of the next record already delivered.
///
/// JSON: the array `[shard, record, offset, cursor, skip]`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(from = "[u64; 5]", into = "[u64; 5]")]
pub struct ShardCursor {
    /// The shard.
    pub shard: u64,
    /// The position of the first record of the current window (the next record without a
    /// window shuffle).
    pub pos: ShardPos,
    /// Records of the current window already delivered (0 without a window shuffle).
    pub cursor: u64,
    /// Tokens of the next record already delivered (packing only; 0 otherwise).
    pub skip: u64,
}

impl From<[u64; 5]> for ShardCursor {
    fn from([shard, record, offset, cursor, skip]: [u64; 5]) -> Self {
        ShardCursor { shard, pos: ShardPos { record, offset }, cursor, skip }
    }
}

impl From<ShardCursor> for [u64; 5] {
    fn from(c: ShardCursor) -> Self {
        [c.shard, c.pos.record, c.pos.offset, c.cursor, c.skip]
    }
}

impl ShardCursor {
    /// The start of `shard`.
    pub fn start(shard: u64) -> Self {
        ShardCursor { shard, ..Default::default() }
    }
}

/// The serializable cursor of one rank of a [`SequentialLoader`](crate::sequential::SequentialLoader): a
/// checkpoint. Small integers only: its JSON is about 200 bytes with two open shards (plus
/// about 25 bytes per further open shard).
///
/// It names the epoch, the batches this rank delivered (in all, and in the epoch), the
/// epoch's step count when every rank has the same one ([`SequentialEnd::Drop`] and
/// [`SequentialEnd::Pad`](crate::sequential::SequentialEnd)), the rank and world size, and the rank's
/// interleave: the next shard of its list to open (`next`), the open shard read next (`turn`),
/// and the open shards (`open`). The rank's list of shards is the epoch's deal (a function of
/// seed, epoch and world size), except after an elastic restore in the middle of an epoch,
/// when the list the re-deal gave this rank is recorded (`deal`) until the epoch ends.
/// `config` and `source` are fingerprints of the options that shape the order and of the
/// data (shard count, length hints, [`SequentialSource::fingerprint`]).
///
/// [`SequentialEnd::Drop`]: crate::sequential::SequentialEnd::Drop
/// [`SequentialSource::fingerprint`]: crate::sequential::SequentialSource::fingerprint
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SequentialState {
    /// State format version ([`SEQUENTIAL_STATE_VERSION`]).
    pub version: u32,
    /// The epoch.
    pub epoch: u64,
    /// Batches this rank delivered since the start of epoch 0 (the number of the next one).
    pub batch: u64,
    /// Batches this rank delivered in this epoch.
    pub step: u64,
    /// Batches of this epoch when every rank has the same count; `None` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<u64>,
    /// The rank that wrote the state.
    pub rank: u64,
    /// The world size it was written with.
    pub world_size: u64,
    /// Index of the next shard of the rank's list to open.
    pub next: u64,
    /// Index in `open` of the shard read next.
    pub turn: u64,
    /// The open shards, in slot order.
    pub open: Vec<ShardCursor>,
    /// Whether the rank's records are used up and it delivers flagged padding (re-reading its
    /// list from the start) to complete the epoch's steps.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub padding: bool,
    /// The rank's list of shards after an elastic re-deal in this epoch (each with the cursor
    /// it starts from); `None`: the epoch's deal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deal: Option<Vec<ShardCursor>>,
    /// Fingerprint of the options that shape the order.
    pub config: u64,
    /// Fingerprint of the data.
    pub source: u64,
}

impl SequentialState {
    /// The state as compact JSON.
    pub fn to_json(&self) -> String {
        // Serializing plain integers and booleans cannot fail.
        match serde_json::to_string(self) {
            Ok(s) => s,
            Err(e) => panic!("serializing a SequentialState failed: {e}"),
        }
    }

    /// Parses a state written by [`SequentialState::to_json`].
    ///
    /// # Errors
    /// [`LoaderError::StateJson`] when the text is not a state.
    pub fn from_json(json: &str) -> Result<Self, LoaderError> {
        Ok(serde_json::from_str(json)?)
    }
}
