//! Stream-with-meta formats: a stream whose every element points to a metadata payload,
//! stored once per run of equal keys.
//!
//! - [`StreamWithMetaFormat`]: the trait (`size`, `pack` into a [`MetaSink`], `unpack` of a
//!   [`MetaWindow`]).
//! - [`MetaSink`]: collects one `(key, payload?)` pair per element and checks the run contract
//!   as pairs arrive.
//! - [`DocumentTokensFormat`]: the built-in format for documents packed into a token stream.

use std::collections::HashSet;
use std::hash::Hash;
use std::marker::PhantomData;

use serde_json::{json, Value};

use crate::{Dtype, FormatError, RawWindow, StreamFormat, TokenElement, TokenFormat, TokenId};

/// Collects the `(key, payload?)` pairs a [`StreamWithMetaFormat::pack`] call yields, one per
/// element in element order, and checks the run contract as they arrive:
///
/// - a key may repeat only inside one contiguous run (`[0, 0, 1, 1]` is valid, `[0, 1, 0]` is
///   not);
/// - the first pair of a run must carry a payload; later pairs of the run may pass `None`
///   (a payload passed there is ignored: the run's first payload is the one stored);
/// - keys are compared within one record only and are never stored.
///
/// The first violation is returned by [`MetaSink::push`] *and* remembered, so a format that
/// ignores the error still has its record refused by [`MetaSink::check`]. A storage packs a
/// whole record into a sink and its element buffer, checks, and only then writes.
///
/// ```
/// use guideloom_formats::{FormatError, MetaSink};
/// let mut sink = MetaSink::new();
/// sink.push(0, Some(b"a"))?;
/// sink.push(0, None)?;
/// sink.push(1, Some(b"bc"))?;
/// sink.check(3)?;
/// assert_eq!(sink.runs().collect::<Vec<_>>(), [(0, &b"a"[..]), (2, &b"bc"[..])]);
/// assert!(matches!(sink.push(0, Some(b"x")), Err(FormatError::InvalidMeta { position: 3, .. })));
/// assert!(matches!(sink.check(4), Err(FormatError::InvalidMeta { position: 3, .. })));
/// # Ok::<(), FormatError>(())
/// ```
#[derive(Debug, Clone)]
pub struct MetaSink<K> {
    /// Pairs pushed (elements of the record so far).
    pairs: u64,
    /// Key of the current run.
    current: Option<K>,
    /// Keys of the closed runs of this record.
    closed: HashSet<K>,
    /// Per run: first element (0-based inside the record), start of its payload in `payloads`.
    runs: Vec<(u64, u64)>,
    /// The runs' payloads back to back.
    payloads: Vec<u8>,
    /// The first violation: element position and reason.
    error: Option<(u64, String)>,
}

impl<K> Default for MetaSink<K> {
    fn default() -> Self {
        MetaSink {
            pairs: 0,
            current: None,
            closed: HashSet::new(),
            runs: Vec::new(),
            payloads: Vec::new(),
            error: None,
        }
    }
}

impl<K: Eq + Hash> MetaSink<K> {
    /// An empty sink.
    pub fn new() -> Self {
        Self::default()
    }

    /// Empties the sink for the next record, keeping its allocations.
    pub fn clear(&mut self) {
        self.pairs = 0;
        self.current = None;
        self.closed.clear();
        self.runs.clear();
        self.payloads.clear();
        self.error = None;
    }

    /// Records the pair of the next element: its `key`, and its run's payload when the element
    /// starts a run (`None` allowed for the later elements of a run).
    ///
    /// # Errors
    /// [`FormatError::InvalidMeta`] (naming the element's position) when the key already
    /// closed a run earlier in this record, when a new run starts without a payload, or when
    /// an earlier pair already broke the contract. The sink stays refused until
    /// [`MetaSink::clear`].
    pub fn push(&mut self, key: K, payload: Option<&[u8]>) -> Result<(), FormatError> {
        let position = self.pairs;
        self.pairs += 1;
        if let Some((p, reason)) = &self.error {
            return Err(FormatError::InvalidMeta {
                position,
                reason: format!("the record was already refused at element {p}: {reason}"),
            });
        }
        if self.current.as_ref() == Some(&key) {
            return Ok(());
        }
        if self.closed.contains(&key) {
            return self.refuse(position, "its key repeats after another key (runs must be contiguous)");
        }
        let Some(payload) = payload else {
            return self.refuse(position, "the first pair of a run has no payload");
        };
        self.runs.push((position, self.payloads.len() as u64));
        self.payloads.extend_from_slice(payload);
        if let Some(prev) = self.current.replace(key) {
            self.closed.insert(prev);
        }
        Ok(())
    }

    fn refuse(&mut self, position: u64, reason: &str) -> Result<(), FormatError> {
        self.error = Some((position, reason.to_string()));
        Err(FormatError::InvalidMeta { position, reason: reason.to_string() })
    }
}

impl<K> MetaSink<K> {
    /// Number of pairs pushed since the last [`MetaSink::clear`].
    pub fn len(&self) -> u64 {
        self.pairs
    }

    /// Whether no pair was pushed.
    pub fn is_empty(&self) -> bool {
        self.pairs == 0
    }

    /// Number of runs (stored payloads).
    pub fn run_count(&self) -> u64 {
        self.runs.len() as u64
    }

    /// All payload bytes, run after run.
    pub fn payload_bytes(&self) -> &[u8] {
        &self.payloads
    }

    /// Each run as `(first element inside the record, payload)`, in element order.
    pub fn runs(&self) -> impl Iterator<Item = (u64, &[u8])> + '_ {
        let ends = self.runs.iter().skip(1).map(|r| r.1).chain([self.payloads.len() as u64]);
        self.runs
            .iter()
            .zip(ends)
            .map(|(&(first, start), end)| (first, &self.payloads[start as usize..end as usize]))
    }

    /// Checks the record is acceptable: no pair broke the run contract, and exactly `size`
    /// pairs were pushed.
    ///
    /// # Errors
    /// [`FormatError::InvalidMeta`] with the position and reason of the first violation, or
    /// for a pair count different from `size` (position = the smaller of the two).
    pub fn check(&self, size: u64) -> Result<(), FormatError> {
        if let Some((position, reason)) = &self.error {
            return Err(FormatError::InvalidMeta { position: *position, reason: reason.clone() });
        }
        if self.pairs != size {
            return Err(FormatError::InvalidMeta {
                position: self.pairs.min(size),
                reason: format!("the format yielded {} pairs for a record of size {size}", self.pairs),
            });
        }
        Ok(())
    }
}

/// A window of a stream-with-meta storage handed to [`StreamWithMetaFormat::unpack`].
///
/// - [`MetaWindow::stream`]: the elements, with their shard segmentation (as for stream
///   formats);
/// - [`MetaWindow::document_data`]: the distinct payloads the window touches, in first-touch
///   order (one per run, so a run cut by the window start is still one payload);
/// - [`MetaWindow::document_index`]: per element, the index of its payload in `document_data`
///   (same length as the stream);
/// - [`MetaWindow::document_shard`]: per payload, the shard that stored it;
/// - [`MetaWindow::run_offset`]: per payload, how many elements of its run lie before the
///   window (0 for every payload but possibly the first), so true positions inside a run are
///   known ([`MetaWindow::positions`]).
///
/// Indices are remapped for this read; they are not the keys `pack` saw.
#[derive(Debug, Clone, Copy)]
pub struct MetaWindow<'a> {
    stream: RawWindow<'a>,
    document_shard: &'a [u64],
    document_index: &'a [u32],
    document_data: &'a [&'a [u8]],
    run_offset: &'a [u64],
}

impl<'a> MetaWindow<'a> {
    /// Describes a window.
    ///
    /// # Errors
    /// [`FormatError::BadWindow`] when `document_index` is not as long as the stream, when
    /// `document_shard`, `document_data` and `run_offset` differ in length, or when an index
    /// is not below the number of payloads.
    pub fn new(
        stream: RawWindow<'a>,
        document_shard: &'a [u64],
        document_index: &'a [u32],
        document_data: &'a [&'a [u8]],
        run_offset: &'a [u64],
    ) -> Result<Self, FormatError> {
        if document_index.len() as u64 != stream.len() {
            return Err(FormatError::BadWindow(format!(
                "{} payload indices for {} elements",
                document_index.len(),
                stream.len()
            )));
        }
        let n = document_data.len();
        if document_shard.len() != n || run_offset.len() != n {
            return Err(FormatError::BadWindow(format!(
                "{n} payloads but {} payload shards and {} run offsets",
                document_shard.len(),
                run_offset.len()
            )));
        }
        if let Some((i, &bad)) = document_index.iter().enumerate().find(|(_, &d)| d as usize >= n) {
            return Err(FormatError::BadWindow(format!(
                "element {i} points to payload {bad} of a window with {n} payloads"
            )));
        }
        Ok(MetaWindow { stream, document_shard, document_index, document_data, run_offset })
    }

    /// The window's elements and their shard segmentation.
    pub fn stream(&self) -> &RawWindow<'a> {
        &self.stream
    }

    /// Shard of each payload, parallel to [`MetaWindow::document_data`].
    pub fn document_shard(&self) -> &'a [u64] {
        self.document_shard
    }

    /// Per element, the index of its payload in [`MetaWindow::document_data`].
    pub fn document_index(&self) -> &'a [u32] {
        self.document_index
    }

    /// The distinct payloads the window touches, in first-touch order.
    pub fn document_data(&self) -> &'a [&'a [u8]] {
        self.document_data
    }

    /// Per payload, the number of elements of its run before the window start.
    pub fn run_offset(&self) -> &'a [u64] {
        self.run_offset
    }

    /// Per element, its true position (0-based) inside its run, counting the run's elements
    /// before the window.
    pub fn positions(&self) -> Vec<u64> {
        let mut out = Vec::with_capacity(self.document_index.len());
        let mut prev = None;
        let mut pos = 0u64;
        for &d in self.document_index {
            if prev == Some(d) {
                pos += 1;
            } else {
                pos = self.run_offset[d as usize];
                prev = Some(d);
            }
            out.push(pos);
        }
        out
    }
}

/// A format for stream-with-meta storages: fixed-size elements of one [`Dtype`], each pointing
/// to a metadata payload stored once per run of equal keys.
///
/// `pack` pushes exactly [`StreamWithMetaFormat::size`] pairs into the [`MetaSink`] (one per
/// element, in element order; see the sink for the run contract) and appends the same number
/// of elements to `out`. A record breaking the contract is refused whole by the storage.
/// `unpack` decodes a [`MetaWindow`]. The storage records `name`, `params` and `dtype` in its
/// manifest and refuses to reopen with another dtype.
pub trait StreamWithMetaFormat: Send + Sync {
    /// What a writer appends.
    type Input: ?Sized;
    /// What a reader returns for one window.
    type Output: Send;
    /// The run key `pack` pushes (compared within one record, never stored).
    type Key: Eq + Hash;

    /// Format name stored in the manifest.
    fn name(&self) -> &str;

    /// Format parameters stored in the manifest (default: JSON `null`).
    fn params(&self) -> Value {
        Value::Null
    }

    /// The element dtype.
    fn dtype(&self) -> Dtype;

    /// Number of elements (and pairs) `pack` produces for `record`.
    fn size(&self, record: &Self::Input) -> u64;

    /// Pushes one pair per element into `meta` and appends the elements to `out` as
    /// little-endian bytes; returns the number of elements appended.
    ///
    /// # Errors
    /// A [`FormatError`] when the record cannot be stored (the storage discards everything of
    /// it).
    fn pack(
        &self,
        record: &Self::Input,
        meta: &mut MetaSink<Self::Key>,
        out: &mut Vec<u8>,
    ) -> Result<u64, FormatError>;

    /// Decodes a window.
    ///
    /// # Errors
    /// A [`FormatError`] when the elements or payloads cannot be decoded.
    fn unpack(&self, window: &MetaWindow<'_>) -> Result<Self::Output, FormatError>;
}

/// One document appended to a [`DocumentTokensFormat`] storage.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TokenDocument<I = u32> {
    /// The document's global ordinal (assigned by the caller; stored in the payload).
    pub ordinal: u64,
    /// Its token ids.
    pub tokens: Vec<I>,
    /// Free user bytes stored with it (source, language, a serialized struct ...).
    pub data: Vec<u8>,
}

/// One document touched by a window of a [`DocumentTokensFormat`] storage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocumentInfo {
    /// The document's global ordinal.
    pub ordinal: u64,
    /// The shard that stored it.
    pub shard: u64,
    /// The user bytes appended with it.
    pub data: Vec<u8>,
}

/// What [`DocumentTokensFormat`] returns for a window. All per-token vectors have the
/// window's length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocumentTokensWindow<E> {
    /// The token ids.
    pub tokens: Vec<E>,
    /// Per token, the global ordinal of its document.
    pub document: Vec<u64>,
    /// Per token, its true 0-based position in its document: a window starting in the middle
    /// of a document continues that document's count (it does not restart at 0).
    pub position: Vec<u64>,
    /// Per token, the index of its document in `documents`.
    pub document_index: Vec<u32>,
    /// The documents the window touches, in first-touch order.
    pub documents: Vec<DocumentInfo>,
}

impl<E> DocumentTokensWindow<E> {
    /// Number of tokens of each touched document inside the window, parallel to `documents`.
    pub fn document_lengths(&self) -> Vec<u64> {
        let mut out = vec![0u64; self.documents.len()];
        for &d in &self.document_index {
            if let Some(n) = out.get_mut(d as usize) {
                *n += 1;
            }
        }
        out
    }

    /// Next-token targets that stay inside one document: entry `i` (for `i` in
    /// `0..len - 1`) is `true` when token `i + 1` belongs to the same document as token `i`,
    /// `false` where a packed row crosses into the next document (mask that label).
    pub fn same_document_targets(&self) -> Vec<bool> {
        self.document.windows(2).map(|w| w[0] == w[1]).collect()
    }
}

/// The built-in stream-with-meta format for documents packed into a token stream.
///
/// - `E`: the stored token element (`u16` or `u32`); `I`: the id type callers append.
/// - A record is a slice of [`TokenDocument`]s; each non-empty document is one run, its
///   payload is its ordinal (u64 little-endian) followed by its user bytes. An empty document
///   stores nothing.
/// - `unpack` returns [`DocumentTokensWindow`]: tokens, per-token document ordinal, per-token true
///   position in the document (see [`DocumentTokensWindow::position`]), and the touched documents.
///   Document boundaries come from the stored metadata, never from token values.
///
/// Manifest name: `"document_tokens"`.
///
/// ```
/// use guideloom_formats::{DocumentTokensFormat, MetaSink, StreamWithMetaFormat, TokenDocument};
/// let f = DocumentTokensFormat::<u16>::new();
/// let docs = [TokenDocument { ordinal: 7, tokens: vec![1, 2], data: b"en".to_vec() }];
/// let mut sink = MetaSink::new();
/// let mut out = Vec::new();
/// assert_eq!(f.pack(&docs, &mut sink, &mut out)?, 2);
/// assert_eq!(out, [1, 0, 2, 0]);
/// assert_eq!(sink.payload_bytes(), [7, 0, 0, 0, 0, 0, 0, 0, b'e', b'n']);
/// # Ok::<(), guideloom_formats::FormatError>(())
/// ```
pub struct DocumentTokensFormat<E, I = u32> {
    _types: PhantomData<fn() -> (E, I)>,
}

impl<E, I> std::fmt::Debug for DocumentTokensFormat<E, I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DocumentTokensFormat").field("element", &std::any::type_name::<E>()).finish()
    }
}

impl<E, I> Clone for DocumentTokensFormat<E, I> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<E, I> Copy for DocumentTokensFormat<E, I> {}

impl<E, I> Default for DocumentTokensFormat<E, I> {
    fn default() -> Self {
        DocumentTokensFormat { _types: PhantomData }
    }
}

impl<E: TokenElement, I: TokenId> DocumentTokensFormat<E, I> {
    /// The format for token element type `E`.
    pub fn new() -> Self {
        Self::default()
    }
}

/// Bytes of the ordinal at the start of each [`DocumentTokensFormat`] payload.
const ORDINAL_BYTES: usize = 8;

impl<E: TokenElement, I: TokenId> StreamWithMetaFormat for DocumentTokensFormat<E, I> {
    type Input = [TokenDocument<I>];
    type Output = DocumentTokensWindow<E>;
    type Key = usize;

    fn name(&self) -> &str {
        "document_tokens"
    }

    fn params(&self) -> Value {
        json!({})
    }

    fn dtype(&self) -> Dtype {
        E::dtype()
    }

    fn size(&self, record: &[TokenDocument<I>]) -> u64 {
        record.iter().map(|d| d.tokens.len() as u64).sum()
    }

    fn pack(
        &self,
        record: &[TokenDocument<I>],
        meta: &mut MetaSink<usize>,
        out: &mut Vec<u8>,
    ) -> Result<u64, FormatError> {
        let tokens = TokenFormat::<E, I>::new();
        let mut payload = Vec::new();
        let mut n = 0u64;
        for (k, doc) in record.iter().enumerate() {
            if doc.tokens.is_empty() {
                continue;
            }
            payload.clear();
            payload.extend_from_slice(&doc.ordinal.to_le_bytes());
            payload.extend_from_slice(&doc.data);
            meta.push(k, Some(&payload))?;
            for _ in 1..doc.tokens.len() {
                meta.push(k, None)?;
            }
            n += tokens.pack(&doc.tokens, out).map_err(|e| match e {
                FormatError::TokenOutOfRange { id, position, dtype } => {
                    FormatError::TokenOutOfRange { id, position: position + n, dtype }
                }
                e => e,
            })?;
        }
        Ok(n)
    }

    fn unpack(&self, window: &MetaWindow<'_>) -> Result<DocumentTokensWindow<E>, FormatError> {
        let tokens = window.stream().elements::<E>()?.into_owned();
        let mut documents = Vec::with_capacity(window.document_data().len());
        for (&payload, &shard) in window.document_data().iter().zip(window.document_shard()) {
            if payload.len() < ORDINAL_BYTES {
                return Err(FormatError::Decode {
                    shard,
                    reason: format!(
                        "document payload of {} bytes is shorter than its {ORDINAL_BYTES}-byte ordinal",
                        payload.len()
                    ),
                });
            }
            let (ord, data) = payload.split_at(ORDINAL_BYTES);
            let mut b = [0u8; ORDINAL_BYTES];
            b.copy_from_slice(ord);
            documents.push(DocumentInfo { ordinal: u64::from_le_bytes(b), shard, data: data.to_vec() });
        }
        let document_index = window.document_index().to_vec();
        let document = document_index.iter().map(|&d| documents[d as usize].ordinal).collect();
        Ok(DocumentTokensWindow { tokens, document, position: window.positions(), document_index, documents })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sink_refuses_and_stays_refused() {
        let mut s = MetaSink::new();
        s.push("a", Some(b"x")).unwrap();
        s.push("b", Some(b"y")).unwrap();
        let e = s.push("a", Some(b"z")).unwrap_err();
        assert!(matches!(e, FormatError::InvalidMeta { position: 2, .. }));
        assert!(matches!(
            s.push("c", Some(b"w")),
            Err(FormatError::InvalidMeta { position: 3, ref reason })
                if reason.starts_with("the record was already refused at element 2: ")
        ));
        assert!(matches!(s.check(4), Err(FormatError::InvalidMeta { position: 2, .. })));
        s.clear();
        assert!(matches!(s.push("a", None), Err(FormatError::InvalidMeta { position: 0, .. })));
        s.clear();
        s.push("a", Some(b"")).unwrap();
        assert!(matches!(s.check(2), Err(FormatError::InvalidMeta { position: 1, .. })));
        assert!(s.check(1).is_ok());
        assert_eq!(s.runs().collect::<Vec<_>>(), [(0, &b""[..])]);
    }

    #[test]
    fn unpack_true_positions_and_bad_payload() {
        let f = DocumentTokensFormat::<u16>::new();
        let bytes = [1u8, 0, 2, 0, 3, 0];
        let w = RawWindow::new(&bytes, 2, &[3], &[4]).unwrap();
        let p0 = [9u8, 0, 0, 0, 0, 0, 0, 0, b'z'];
        let p1 = [10u8, 0, 0, 0, 0, 0, 0, 0];
        let data: [&[u8]; 2] = [&p0, &p1];
        let mw = MetaWindow::new(w, &[4, 4], &[0, 0, 1], &data, &[5, 0]).unwrap();
        let out = f.unpack(&mw).unwrap();
        assert_eq!(out.tokens, [1, 2, 3]);
        assert_eq!(out.document, [9, 9, 10]);
        assert_eq!(out.position, [5, 6, 0]);
        assert_eq!(out.documents[0], DocumentInfo { ordinal: 9, shard: 4, data: b"z".to_vec() });
        let short: [&[u8]; 2] = [&p0, &p1[..3]];
        let mw = MetaWindow::new(w, &[4, 4], &[0, 0, 1], &short, &[5, 0]).unwrap();
        assert!(matches!(f.unpack(&mw), Err(FormatError::Decode { shard: 4, .. })));
        let bad_window = |r: Result<MetaWindow<'_>, FormatError>| match r {
            Err(FormatError::BadWindow(reason)) => reason,
            other => panic!("expected BadWindow, got {other:?}"),
        };
        assert_eq!(
            bad_window(MetaWindow::new(w, &[4, 4], &[0, 2, 1], &data, &[5, 0])),
            "element 1 points to payload 2 of a window with 2 payloads"
        );
        assert_eq!(
            bad_window(MetaWindow::new(w, &[4], &[0, 0, 1], &data, &[5, 0])),
            "2 payloads but 1 payload shards and 2 run offsets"
        );
        assert_eq!(
            bad_window(MetaWindow::new(w, &[4, 4], &[0, 0], &data, &[5, 0])),
            "2 payload indices for 3 elements"
        );
    }
}
