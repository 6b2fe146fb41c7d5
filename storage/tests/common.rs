//! Shared fixtures: backends every read test runs over, and a format exposing segments.

use std::sync::Arc;

use guideloom_formats::{Dtype, FormatError, Primitive, StreamFormat, Window};
use guideloom_storage::{PreadBackend, ReadOptions};

/// Every I/O backend a read test must pass with, with a label for failure messages.
pub fn backends() -> Vec<(&'static str, ReadOptions)> {
    vec![("pread", ReadOptions::default().with_backend(Arc::new(PreadBackend)))]
}

/// u16 tokens whose unpack returns the ids with the window's segmentation.
#[derive(Debug, Clone, Copy)]
pub struct SegFormat;

/// What [`SegFormat`] returns: ids, segment lengths, segment shard ids.
pub type Segmented = (Vec<u16>, Vec<u64>, Vec<u64>);

impl StreamFormat for SegFormat {
    type Input = [u16];
    type Output = Segmented;
    fn name(&self) -> &str {
        "seg-test"
    }
    fn dtype(&self) -> Dtype {
        Dtype::Primitive(Primitive::U16)
    }
    fn pack(&self, record: &[u16], out: &mut Vec<u8>) -> Result<u64, FormatError> {
        out.extend(record.iter().flat_map(|v| v.to_le_bytes()));
        Ok(record.len() as u64)
    }
    fn unpack(&self, w: &Window<'_>) -> Result<Segmented, FormatError> {
        Ok((w.elements::<u16>()?.into_owned(), w.shard_lengths().to_vec(), w.shards().to_vec()))
    }
}
