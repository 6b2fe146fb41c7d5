use std::marker::PhantomData;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

use crate::{DocumentFormat, FormatError};

/// Documents of any serde type, encoded with [postcard](https://docs.rs/postcard) (a compact,
/// stable, non-self-describing binary codec).
///
/// Decoding only builds a value of type `T`: it never executes code, and malformed or
/// truncated bytes give [`FormatError::Decode`]. Trailing bytes after a complete value are
/// refused too. Manifest name: `"serde-postcard"`.
///
/// ```
/// use guideloom_formats::{DocumentFormat, SerdeFormat};
/// let format = SerdeFormat::<(String, Vec<u32>)>::new();
/// let mut bytes = Vec::new();
/// format.pack(&("doc".to_string(), vec![1, 2]), &mut bytes)?;
/// assert_eq!(format.unpack(&bytes, 0)?, ("doc".to_string(), vec![1, 2]));
/// assert!(matches!(format.unpack(&bytes[..2], 0), Err(guideloom_formats::FormatError::Decode { shard: 0, .. })));
/// # Ok::<(), guideloom_formats::FormatError>(())
/// ```
pub struct SerdeFormat<T> {
    _type: PhantomData<fn() -> T>,
}

impl<T> std::fmt::Debug for SerdeFormat<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SerdeFormat").field("type", &std::any::type_name::<T>()).finish()
    }
}

impl<T> Clone for SerdeFormat<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for SerdeFormat<T> {}

impl<T> Default for SerdeFormat<T> {
    fn default() -> Self {
        SerdeFormat { _type: PhantomData }
    }
}

impl<T: Serialize + DeserializeOwned + Send> SerdeFormat<T> {
    /// The serde format for `T`.
    pub fn new() -> Self {
        Self::default()
    }
}

impl<T: Serialize + DeserializeOwned + Send> DocumentFormat for SerdeFormat<T> {
    type Input = T;
    type Output = T;

    fn name(&self) -> &str {
        "serde-postcard"
    }

    fn params(&self) -> Value {
        json!({"codec": "postcard", "codec_version": 1})
    }

    fn pack(&self, document: &T, out: &mut Vec<u8>) -> Result<(), FormatError> {
        postcard::to_io(document, &mut *out).map(|_| ()).map_err(|e| FormatError::Encode(e.to_string()))
    }

    fn unpack(&self, bytes: &[u8], shard: u64) -> Result<T, FormatError> {
        let (value, rest) = postcard::take_from_bytes::<T>(bytes)
            .map_err(|e| FormatError::Decode { shard, reason: e.to_string() })?;
        if !rest.is_empty() {
            return Err(FormatError::Decode {
                shard,
                reason: format!("{} trailing bytes after the document", rest.len()),
            });
        }
        Ok(value)
    }
}
