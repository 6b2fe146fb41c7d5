use serde_json::Value;

use crate::FormatError;

/// A format for document storages: one variable-size byte payload per document.
///
/// `pack` encodes a document (appending to the writer's buffer); `unpack` decodes the stored
/// bytes of one document, given the shard it was read from. The storage keeps no document
/// identity beyond its global index: encode one in the payload when a reader needs it.
pub trait DocumentFormat: Send + Sync {
    /// What a writer appends.
    type Input: ?Sized;
    /// What a reader returns for one document.
    type Output: Send;

    /// Format name stored in the manifest (for example `"raw"`).
    fn name(&self) -> &str;

    /// Format parameters stored in the manifest (default: JSON `null`).
    fn params(&self) -> Value {
        Value::Null
    }

    /// Appends the encoded document to `out`.
    ///
    /// # Errors
    /// A [`FormatError`] when the document cannot be encoded; `out` may then hold a partial
    /// document, which the storage discards.
    fn pack(&self, document: &Self::Input, out: &mut Vec<u8>) -> Result<(), FormatError>;

    /// Decodes the bytes of one document read from `shard`.
    ///
    /// # Errors
    /// A [`FormatError`] (usually [`FormatError::Decode`]) when the bytes are malformed.
    fn unpack(&self, bytes: &[u8], shard: u64) -> Result<Self::Output, FormatError>;
}

/// Documents stored as their raw bytes: `pack` copies, `unpack` returns a `Vec<u8>`.
/// Manifest name: `"raw"`.
///
/// ```
/// use guideloom_formats::{DocumentFormat, RawBytesFormat};
/// let mut out = Vec::new();
/// RawBytesFormat.pack(b"abc", &mut out)?;
/// assert_eq!(RawBytesFormat.unpack(&out, 0)?, b"abc");
/// # Ok::<(), guideloom_formats::FormatError>(())
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct RawBytesFormat;

impl DocumentFormat for RawBytesFormat {
    type Input = [u8];
    type Output = Vec<u8>;

    fn name(&self) -> &str {
        "raw"
    }

    fn pack(&self, document: &[u8], out: &mut Vec<u8>) -> Result<(), FormatError> {
        out.extend_from_slice(document);
        Ok(())
    }

    fn unpack(&self, bytes: &[u8], _shard: u64) -> Result<Vec<u8>, FormatError> {
        Ok(bytes.to_vec())
    }
}
