//! `index.json` files (MDS, litdata) decoded by serde into their typed structs: JSON objects
//! only.

use serde::de::DeserializeOwned;

use crate::error::ForeignError;

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
