//! Pass-through formats: the Rust side of formats whose `pack`/`unpack` run in Python. Records
//! arrive packed (element bytes, document bytes, a stream-with-meta record's elements and
//! pairs); reads leave as bytes plus the read's segmentation. The manifest records the Python
//! format's name, parameters and dtype.

use serde_json::Value;

use crate::rust_api::{
    DocumentFormat, Dtype, FormatError, MetaSink, MetaWindow, RawWindow, StreamFormat, StreamWithMetaFormat,
};

/// What the manifest records of a format written from Python.
#[derive(Debug, Clone)]
pub(crate) struct Spec {
    /// Format name (`"columns"` for `StreamNumpyFormat`, `"tokens"` for integer streams of the
    /// built-in formats, `"python:module.QualName"` for a format written in Python).
    pub(crate) name: String,
    /// Format parameters.
    pub(crate) params: Value,
}

/// The `name` and `params` methods of a format trait, from the format's [`Spec`] field `spec`.
macro_rules! spec_methods {
    () => {
        fn name(&self) -> &str {
            &self.spec.name
        }
        fn params(&self) -> Value {
            self.spec.params.clone()
        }
    };
}

/// Shard segmentation of one stream window.
#[derive(Debug, Clone)]
pub(crate) struct Segments {
    /// Length of each segment in elements.
    pub(crate) lengths: Vec<u64>,
    /// Shard of each segment.
    pub(crate) shards: Vec<u64>,
}

/// A stream format whose records are element bytes packed in Python.
#[derive(Debug, Clone)]
pub(crate) struct StreamBytes {
    pub(crate) spec: Spec,
    pub(crate) dtype: Dtype,
}

fn whole_elements(bytes: usize, itemsize: u64) -> Result<u64, FormatError> {
    if itemsize == 0 || !(bytes as u64).is_multiple_of(itemsize) {
        return Err(FormatError::Encode(format!(
            "{bytes} bytes are not a whole number of {itemsize}-byte elements"
        )));
    }
    Ok(bytes as u64 / itemsize)
}

impl StreamFormat for StreamBytes {
    type Input = [u8];
    type Output = Segments;

    spec_methods!();
    fn dtype(&self) -> Dtype {
        self.dtype.clone()
    }
    fn pack(&self, record: &[u8], out: &mut Vec<u8>) -> Result<u64, FormatError> {
        let n = whole_elements(record.len(), self.dtype.itemsize())?;
        out.extend_from_slice(record);
        Ok(n)
    }
    fn unpack(&self, window: &RawWindow<'_>) -> Result<Segments, FormatError> {
        Ok(Segments { lengths: window.shard_lengths().to_vec(), shards: window.shards().to_vec() })
    }
}

/// A document format whose documents are bytes encoded in Python.
#[derive(Debug, Clone)]
pub(crate) struct DocumentBytes {
    pub(crate) spec: Spec,
}

impl DocumentFormat for DocumentBytes {
    type Input = [u8];
    type Output = (Vec<u8>, u64);

    spec_methods!();
    fn pack(&self, document: &[u8], out: &mut Vec<u8>) -> Result<(), FormatError> {
        out.extend_from_slice(document);
        Ok(())
    }
    fn unpack(&self, bytes: &[u8], shard: u64) -> Result<(Vec<u8>, u64), FormatError> {
        Ok((bytes.to_vec(), shard))
    }
}

/// One stream-with-meta record packed in Python: its element bytes and, per element, the run
/// key (interned to an integer within the record) and the payload of a run's first pair.
#[derive(Debug, Clone)]
pub(crate) struct MetaRecord {
    pub(crate) stream: Vec<u8>,
    pub(crate) keys: Vec<u64>,
    pub(crate) payloads: Vec<Option<Vec<u8>>>,
}

/// One stream-with-meta window as read: elements, segmentation and the payloads it touches.
#[derive(Debug, Clone)]
pub(crate) struct MetaRead {
    pub(crate) stream: Vec<u8>,
    pub(crate) segments: Segments,
    pub(crate) document_shard: Vec<u64>,
    pub(crate) document_index: Vec<u32>,
    pub(crate) document_data: Vec<Vec<u8>>,
}

/// A stream-with-meta format whose records are packed in Python.
#[derive(Debug, Clone)]
pub(crate) struct MetaBytes {
    pub(crate) spec: Spec,
    pub(crate) dtype: Dtype,
}

impl StreamWithMetaFormat for MetaBytes {
    type Input = MetaRecord;
    type Output = MetaRead;
    type Key = u64;

    spec_methods!();
    fn dtype(&self) -> Dtype {
        self.dtype.clone()
    }
    fn size(&self, record: &MetaRecord) -> u64 {
        record.keys.len() as u64
    }
    fn pack(
        &self,
        record: &MetaRecord,
        meta: &mut MetaSink<u64>,
        out: &mut Vec<u8>,
    ) -> Result<u64, FormatError> {
        let n = whole_elements(record.stream.len(), self.dtype.itemsize())?;
        if n != record.keys.len() as u64 {
            return Err(FormatError::Encode(format!(
                "the returned array holds {n} elements but {} pairs were yielded",
                record.keys.len()
            )));
        }
        for (key, payload) in record.keys.iter().zip(&record.payloads) {
            meta.push(*key, payload.as_deref())?;
        }
        out.extend_from_slice(&record.stream);
        Ok(n)
    }
    fn unpack(&self, window: &MetaWindow<'_>) -> Result<MetaRead, FormatError> {
        let stream = window.stream();
        Ok(MetaRead {
            stream: stream.bytes().to_vec(),
            segments: Segments { lengths: stream.shard_lengths().to_vec(), shards: stream.shards().to_vec() },
            document_shard: window.document_shard().to_vec(),
            document_index: window.document_index().to_vec(),
            document_data: window.document_data().iter().map(|d| d.to_vec()).collect(),
        })
    }
}
