//! What a batch reads, planned before any I/O: the typed [`Window`] of a stream, the
//! [`ReadPlan`] of a batch of keys and the [`PlannedOutput`]s the kinds decode.

use crate::io::ReadRequest;
use crate::{Result, StorageError};

/// A window of a stream: `len` elements starting at element `offset` (elements, not bytes;
/// the stream is all shards concatenated in increasing id order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Window {
    /// First element.
    pub offset: u64,
    /// Number of elements.
    pub len: u64,
}

impl Window {
    /// The window of `len` elements starting at element `offset`.
    pub const fn new(offset: u64, len: u64) -> Self {
        Window { offset, len }
    }

    /// One past the last element, `None` when that overflows `u64`.
    pub fn end(self) -> Option<u64> {
        self.offset.checked_add(self.len)
    }
}

/// The byte ranges a batch of keys (windows or document indices) needs, made by
/// [`Reader::plan`](crate::Reader::plan) before any I/O: [`ReadPlan::requests`] over the reader's
/// [`Reader::files`](crate::Reader::files), in the order [`Reader::decode`](crate::Reader::decode)
/// expects their bytes, back to back ([`ReadPlan::bytes`] in all).
///
/// A caller that brings its own I/O reads the requests into one buffer (for example with
/// [`StorageDir::read_requests`](crate::StorageDir::read_requests)) and hands it to
/// [`Reader::decode`](crate::Reader::decode); [`Reader::read_many`](crate::Reader::read_many) does
/// plan, one backend call ([`Reader::fetch`](crate::Reader::fetch)) and decode.
#[derive(Debug, Clone)]
pub struct ReadPlan {
    /// The fingerprint of the storage of the reader that made the plan.
    pub(super) storage: u64,
    requests: Vec<ReadRequest>,
    /// Total bytes (fits `usize`: checked when the plan is finished).
    pub(super) bytes: u64,
    /// Per segment: its length in units of the kind (elements, or bytes for documents) and
    /// its shard id. Segment `k` is read by request `k`.
    seg_lens: Vec<u64>,
    seg_shards: Vec<u64>,
    /// Per output: one past its last segment, and one past its last byte.
    out_seg_end: Vec<usize>,
    out_byte_end: Vec<u64>,
    /// Stream-with-meta: the payloads, read after every segment.
    payloads: Option<Box<PayloadPlan>>,
}

/// The payload part of a stream-with-meta plan. Payload `p` is read by request
/// `segments + p`; its bytes follow the element bytes of the whole batch.
#[derive(Debug, Clone, Default)]
pub(crate) struct PayloadPlan {
    /// Per payload: the shard that stored it, the elements of its run before the window,
    /// and one past its last byte inside the payload part.
    pub(crate) shard: Vec<u64>,
    pub(crate) run_offset: Vec<u64>,
    pub(crate) byte_end: Vec<u64>,
    /// Per element of every window, the index of its payload among the window's payloads.
    pub(crate) index: Vec<u32>,
    /// Per output: one past its last payload, and one past its last index entry.
    pub(crate) out_payload_end: Vec<usize>,
    pub(crate) out_index_end: Vec<usize>,
}

impl PayloadPlan {
    /// Output `i`'s payloads and index entries (empty past the planned outputs).
    pub(crate) fn output(&self, i: usize) -> (std::ops::Range<usize>, std::ops::Range<usize>) {
        if i >= self.out_payload_end.len() || i >= self.out_index_end.len() {
            return (0..0, 0..0);
        }
        (span(&self.out_payload_end, i), span(&self.out_index_end, i))
    }
}

/// The ranges `ends[i - 1]..ends[i]` (from 0 for `i == 0`).
fn span<T: Copy + Default>(ends: &[T], i: usize) -> std::ops::Range<T> {
    let start = if i == 0 { T::default() } else { ends[i - 1] };
    start..ends[i]
}

impl ReadPlan {
    /// An empty plan for about `outputs` outputs.
    pub(crate) fn with_capacity(outputs: usize) -> Self {
        ReadPlan {
            storage: 0,
            requests: Vec::with_capacity(outputs + 4),
            bytes: 0,
            seg_lens: Vec::with_capacity(outputs + 4),
            seg_shards: Vec::with_capacity(outputs + 4),
            out_seg_end: Vec::with_capacity(outputs),
            out_byte_end: Vec::with_capacity(outputs),
            payloads: None,
        }
    }

    /// Adds a segment to the output being planned: `request` reads it, `len` units long,
    /// from shard `shard`.
    pub(crate) fn push_segment(&mut self, request: ReadRequest, len: u64, shard: u64) {
        self.requests.push(request);
        self.seg_lens.push(len);
        self.seg_shards.push(shard);
    }

    /// Closes the output being planned: its segments are those pushed since the last close,
    /// `bytes` long in all.
    ///
    /// # Errors
    /// [`StorageError::BatchTooLarge`] when the batch's bytes overflow `u64`.
    pub(crate) fn end_output(&mut self, bytes: u64) -> Result<()> {
        self.bytes = self.bytes.checked_add(bytes).ok_or(StorageError::BatchTooLarge { bytes: u64::MAX })?;
        self.out_seg_end.push(self.seg_lens.len());
        self.out_byte_end.push(self.bytes);
        Ok(())
    }

    /// Adds the payload part (stream-with-meta): its requests after the segments', its bytes
    /// after theirs.
    ///
    /// # Errors
    /// [`StorageError::BatchTooLarge`] when the batch's bytes overflow `u64`.
    pub(crate) fn set_payloads(&mut self, requests: Vec<ReadRequest>, payloads: PayloadPlan) -> Result<()> {
        let extra = payloads.byte_end.last().copied().unwrap_or(0);
        self.bytes = self.bytes.checked_add(extra).ok_or(StorageError::BatchTooLarge { bytes: u64::MAX })?;
        self.requests.extend(requests);
        self.payloads = Some(Box::new(payloads));
        Ok(())
    }

    /// Checks that the whole batch fits one buffer.
    ///
    /// # Errors
    /// [`StorageError::BatchTooLarge`] when [`ReadPlan::bytes`] does not fit `usize`.
    pub(crate) fn finish(self) -> Result<Self> {
        usize::try_from(self.bytes).map_err(|_| StorageError::BatchTooLarge { bytes: self.bytes })?;
        Ok(self)
    }

    /// The byte ranges to read, over the planning reader's [`Reader::files`](crate::Reader::files),
    /// in the order their bytes lie in the buffer [`Reader::decode`](crate::Reader::decode) takes.
    pub fn requests(&self) -> &[ReadRequest] {
        &self.requests
    }

    /// Total bytes of all requests: the length of the buffer
    /// [`Reader::decode`](crate::Reader::decode) takes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Number of outputs (keys planned).
    pub fn len(&self) -> usize {
        self.out_seg_end.len()
    }

    /// Whether the plan has no output.
    pub fn is_empty(&self) -> bool {
        self.out_seg_end.is_empty()
    }

    /// The fingerprint ([`Manifest::fingerprint`](crate::Manifest::fingerprint)) of the storage the
    /// plan was made for.
    pub fn storage(&self) -> u64 {
        self.storage
    }

    /// Output `i`'s segment lengths and shard ids.
    pub(crate) fn segments(&self, i: usize) -> (&[u64], &[u64]) {
        let r = self.segment_range(i);
        (&self.seg_lens[r.clone()], &self.seg_shards[r])
    }

    /// The indices of output `i`'s segments.
    pub(crate) fn segment_range(&self, i: usize) -> std::ops::Range<usize> {
        span(&self.out_seg_end, i)
    }

    /// Segment `k`'s length in units of the kind.
    pub(crate) fn segment_len(&self, k: usize) -> u64 {
        self.seg_lens[k]
    }

    /// Segment `k`'s shard id.
    pub(crate) fn segment_shard(&self, k: usize) -> u64 {
        self.seg_shards[k]
    }

    /// The segments' requests (all requests but the payloads').
    pub(crate) fn segment_requests(&self) -> &[ReadRequest] {
        &self.requests[..self.seg_lens.len()]
    }
}

/// Output `i` of a [`ReadPlan`] with the batch buffer its bytes lie in: what
/// [`ReaderKind::decode_at`] decodes. Made by the reader; read by the kinds of this crate.
#[derive(Debug, Clone, Copy)]
pub struct PlannedOutput<'a> {
    plan: &'a ReadPlan,
    i: usize,
    bytes: &'a [u8],
}

impl<'a> PlannedOutput<'a> {
    /// Output `i` of `plan` over `bytes` (already checked to be [`ReadPlan::bytes`] long).
    pub(super) fn new(plan: &'a ReadPlan, i: usize, bytes: &'a [u8]) -> Self {
        PlannedOutput { plan, i, bytes }
    }

    /// The output's segment lengths and shard ids.
    pub(crate) fn segments(&self) -> (&'a [u64], &'a [u64]) {
        self.plan.segments(self.i)
    }

    /// The shard of the output's first segment (0 when it has none): what its errors name.
    pub(crate) fn first_shard(&self) -> u64 {
        self.segments().1.first().copied().unwrap_or(0)
    }

    /// The output's main bytes (elements, or a document's payload).
    pub(crate) fn bytes(&self) -> &'a [u8] {
        let r = span(&self.plan.out_byte_end, self.i);
        // Every byte end is at most the plan's bytes, which fit `usize` (checked by `finish`).
        &self.bytes[r.start as usize..r.end as usize]
    }

    /// The output's payloads (stream-with-meta); empty when the plan has no payload part.
    pub(crate) fn payloads(&self) -> OutputPayloads<'a> {
        let Some(p) = self.plan.payloads.as_deref() else { return OutputPayloads::default() };
        let main = self.plan.out_byte_end.last().copied().unwrap_or(0) as usize;
        let (payloads, entries) = p.output(self.i);
        let data = payloads
            .clone()
            .map(|k| {
                let start = if k == 0 { 0 } else { p.byte_end[k - 1] as usize };
                &self.bytes[main + start..main + p.byte_end[k] as usize]
            })
            .collect();
        OutputPayloads {
            shards: &p.shard[payloads.clone()],
            run_offsets: &p.run_offset[payloads],
            data,
            index: &p.index[entries],
        }
    }
}

/// The payloads of one planned output of a stream-with-meta plan.
#[derive(Debug, Default)]
pub(crate) struct OutputPayloads<'a> {
    /// Per payload: the shard that stored it.
    pub(crate) shards: &'a [u64],
    /// Per payload: the elements of its run before the window.
    pub(crate) run_offsets: &'a [u64],
    /// Per payload: its bytes.
    pub(crate) data: Vec<&'a [u8]>,
    /// Per element: the index of its payload.
    pub(crate) index: &'a [u32],
}
