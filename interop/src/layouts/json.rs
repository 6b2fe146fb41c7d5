//! `index.json` files (MDS, litdata): read with a size limit ([`read_index`]) and decoded by
//! serde into their typed structs, JSON objects only ([`decode_object`]).

use serde::de::DeserializeOwned;

use crate::error::ForeignError;
use crate::files::{Fs, MAX_INDEX_BYTES};

/// The JSON object in `text` as a `T`. A top-level value that is not an object is refused
/// (serde would fill a struct's fields from an array by position).
///
/// # Errors
/// [`ForeignError::InvalidIndex`] with serde's message (syntax, a field of the wrong type), or
/// saying the text is not a JSON object.
pub(crate) fn decode_object<T: DeserializeOwned>(text: &[u8]) -> Result<T, ForeignError> {
    let first = text.iter().find(|b| !b.is_ascii_whitespace());
    if first.is_some_and(|&b| b != b'{') {
        return Err(ForeignError::InvalidIndex { reason: "the index is not a JSON object".into() });
    }
    serde_json::from_slice(text).map_err(|e| ForeignError::InvalidIndex { reason: e.to_string() })
}

/// The `index.json` of the dataset in `fs` (at most [`MAX_INDEX_BYTES`]) and what `check`
/// makes of its bytes (a layout's decode and validate), the check's error naming
/// `index.json`.
///
/// # Errors
/// Read errors; `check`'s error as [`crate::InteropError::Dataset`] about `index.json`.
pub(crate) fn read_index<T>(
    fs: &Fs,
    check: impl FnOnce(&[u8]) -> Result<T, ForeignError>,
) -> crate::error::Result<(Vec<u8>, T)> {
    let text = fs.read_whole("index.json", MAX_INDEX_BYTES)?;
    let checked = check(&text).map_err(|e| fs.err("index.json", e))?;
    Ok((text, checked))
}
