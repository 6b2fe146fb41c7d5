//! Token records of any token dataset as `u32` id sequences: its windows or its documents,
//! whatever the layout (a native stream or stream-with-meta storage, or a foreign dataset read
//! in place), local or remote. The sources that mixing ([`guideloom_loader::mix::Mix`]) and
//! packing ([`guideloom_loader::mix::Mix::pack`], [`guideloom_loader::pack::Packed`]) take
//! when their inputs are of several dtypes and layouts (the Python binding's `Mixture` and
//! `Packed`).

use std::sync::Arc;

use guideloom_formats::{DocumentTokensFormat, Dtype, Primitive, TokenElement};
use guideloom_loader::{DataSource, LoaderError, MetaDocuments, MetaWindows, Spans, StreamWindows};
use guideloom_storage::{
    Manifest, StorageDir, StorageError, StorageKind, StorageLocation, StreamWithMetaReader,
};

use crate::error::{InteropError, Result};
use crate::open::{open_tokens, OpenOptions};

/// What a record of [`open_token_records`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordUnit {
    /// Windows of `seq_len` tokens every `stride` tokens (foreign datasets: within each file,
    /// as [`crate::token_windows`] reads them).
    Windows {
        /// Tokens per window (at least 1).
        seq_len: u64,
        /// Tokens between window starts (at least 1).
        stride: u64,
    },
    /// Documents: a stream-with-meta storage's, or a foreign dataset's where its layout
    /// records document boundaries.
    Documents,
}

/// A source of `u32` token id sequences.
pub type U32Records = Arc<dyn DataSource<Item = Vec<u32>>>;

/// The records [`open_token_records`] opened: the source, the dataset's tokens and, for
/// documents, every document's length.
pub struct TokenRecords {
    source: U32Records,
    tokens: u64,
    lengths: Option<Vec<u64>>,
}

impl std::fmt::Debug for TokenRecords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenRecords")
            .field("records", &self.source.len())
            .field("tokens", &self.tokens)
            .field("documents", &self.lengths.as_ref().map(Vec::len))
            .finish()
    }
}

impl TokenRecords {
    /// The source of records.
    pub fn source(&self) -> &U32Records {
        &self.source
    }

    /// The source of records, owned.
    pub fn into_source(self) -> U32Records {
        self.source
    }

    /// Tokens in the dataset (all of them, not only those the records cover).
    pub fn tokens(&self) -> u64 {
        self.tokens
    }

    /// For documents, the tokens of each (`None` for windows).
    pub fn lengths(&self) -> Option<&[u64]> {
        self.lengths.as_deref()
    }
}

/// A source whose records are converted to `u32` ids (checked: an id outside `u32` is an
/// error naming the record).
struct Narrow<S>(S);

fn narrow<T: Copy + TryInto<u32> + std::fmt::Display>(
    index: u64,
    v: Vec<T>,
) -> Result<Vec<u32>, LoaderError> {
    v.into_iter()
        .map(|t| {
            t.try_into().map_err(|_| LoaderError::Source {
                index,
                source: format!("token id {t} of record {index} does not fit u32").into(),
            })
        })
        .collect()
}

impl<S, T> DataSource for Narrow<S>
where
    S: DataSource<Item = Vec<T>>,
    T: Copy + TryInto<u32> + std::fmt::Display,
{
    type Item = Vec<u32>;
    fn len(&self) -> u64 {
        self.0.len()
    }
    fn get(&self, index: u64) -> Result<Vec<u32>, LoaderError> {
        narrow(index, self.0.get(index)?)
    }
    fn get_many(&self, indices: &[u64]) -> Result<Vec<Vec<u32>>, LoaderError> {
        self.0.get_many(indices)?.into_iter().zip(indices).map(|(v, &i)| narrow(i, v)).collect()
    }
    fn fingerprint(&self) -> u64 {
        self.0.fingerprint()
    }
}

/// A stream-with-meta storage's windows of `.0` or documents, of `E` ids.
fn meta_records<E: TokenElement + TryInto<u32> + std::fmt::Display>(
    dir: Arc<dyn StorageDir>,
    unit: RecordUnit,
    options: &OpenOptions,
) -> Result<TokenRecords> {
    let r = StreamWithMetaReader::open_in(dir, DocumentTokensFormat::<E>::new(), options.read.clone())?;
    let tokens = r.len();
    Ok(match unit {
        RecordUnit::Documents => {
            let docs = MetaDocuments::new(r)?;
            let lengths = docs.lengths();
            TokenRecords { source: Arc::new(Narrow(docs)), tokens, lengths: Some(lengths) }
        }
        RecordUnit::Windows { seq_len, stride } => {
            let windows = MetaWindows::with_stride(r, seq_len, stride)?;
            let windows = Windowed(windows);
            TokenRecords { source: Arc::new(Narrow(windows)), tokens, lengths: None }
        }
    })
}

/// Meta windows as their tokens.
struct Windowed<S>(S);

impl<S, E> DataSource for Windowed<S>
where
    S: DataSource<Item = guideloom_formats::DocumentTokensWindow<E>>,
    E: Send,
{
    type Item = Vec<E>;
    fn len(&self) -> u64 {
        self.0.len()
    }
    fn get(&self, index: u64) -> Result<Vec<E>, LoaderError> {
        Ok(self.0.get(index)?.tokens)
    }
    fn get_many(&self, indices: &[u64]) -> Result<Vec<Vec<E>>, LoaderError> {
        Ok(self.0.get_many(indices)?.into_iter().map(|w| w.tokens).collect())
    }
    fn fingerprint(&self) -> u64 {
        self.0.fingerprint()
    }
}

/// The records of the token dataset at `location` (a path or URL, opened as [`open_tokens`]
/// opens it, and also a native stream-with-meta storage of `u16`/`u32` document tokens) as
/// `u32` id sequences: windows or documents ([`RecordUnit`]).
///
/// # Errors
/// As [`open_tokens`]; [`InteropError::InvalidConfig`] (field `documents`) when documents are
/// asked of a dataset without document boundaries (a plain token stream, a raw token file);
/// [`InteropError::Loader`] when `seq_len` or `stride` is 0, or the dataset holds tokens but
/// fewer than one window. A record holding an id outside `u32` fails when it is read.
pub fn open_token_records(location: &str, unit: RecordUnit, options: &OpenOptions) -> Result<TokenRecords> {
    // A native stream-with-meta storage: its documents (or windows over them).
    let at = StorageLocation::parse(location);
    if options.foreign.format.is_none() && !matches!(&at, StorageLocation::Local(p) if !p.is_dir()) {
        let remote = options.remote_options(&at)?;
        let dir = at.open_with(&remote)?;
        match Manifest::load_from(dir.as_ref()) {
            Ok(m) if m.kind() == StorageKind::StreamWithMeta => {
                return match m.dtype() {
                    Some(Dtype::Primitive(Primitive::U16)) => meta_records::<u16>(dir, unit, options),
                    Some(Dtype::Primitive(Primitive::U32)) => meta_records::<u32>(dir, unit, options),
                    other => Err(InteropError::NotTokens {
                        location: location.to_string(),
                        kind: m.kind(),
                        dtype: other.map_or_else(|| "none".to_string(), Dtype::to_string),
                    }),
                };
            }
            Ok(_) | Err(StorageError::NotAStorage { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let data = open_tokens(location, options)?;
    let tokens = data.elements();
    let no_documents = || {
        InteropError::InvalidConfig {
        field: "documents",
        detail: format!("{location} records no document boundaries (a plain token stream); pack windows, or a dataset with documents"),
    }
    };
    let (windows, lengths) = match (unit, data.foreign()) {
        (RecordUnit::Documents, Some(f)) => {
            let windows = f.documents().is_some().then(|| f.document_windows()).ok_or_else(no_documents)?;
            let lengths = windows.iter().map(|w| w.len).collect();
            (windows, Some(lengths))
        }
        (RecordUnit::Documents, None) => return Err(no_documents()),
        (RecordUnit::Windows { seq_len, stride }, Some(f)) => {
            if seq_len == 0 || stride == 0 {
                return Err(LoaderError::InvalidConfig {
                    field: "seq_len",
                    detail: "seq_len and stride must be at least 1".into(),
                }
                .into());
            }
            (f.file_windows(seq_len, stride)?, None)
        }
        (RecordUnit::Windows { seq_len, stride }, None) => {
            let windows = StreamWindows::with_stride(data.into_reader(), seq_len, stride)?;
            windows.check_fits()?;
            return Ok(TokenRecords { source: Arc::new(Narrow(windows)), tokens, lengths: None });
        }
    };
    let spans = Spans::new(data.into_reader(), windows)?;
    Ok(TokenRecords { source: Arc::new(Narrow(spans)), tokens, lengths })
}
