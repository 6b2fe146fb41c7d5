//! One opener for token datasets: [`open_tokens`] reads a local path or an object-store URL
//! holding a native stream storage or a dataset in another project's layout, and answers a
//! [`TokenDataset`] of integer ids.

use guideloom_formats::{Dtype, Element, IntTokenFormat};
use guideloom_loader::TokenWindows;
use guideloom_storage::{
    Manifest, ReadOptions, RemoteOptions, StorageError, StorageKind, StorageLocation, StreamReader,
};

use crate::dataset::ForeignDataset;
use crate::error::{InteropError, Result};
use crate::options::ForeignOptions;

/// How [`open_tokens`] opens a dataset: the read backend, the object store's options and the
/// foreign layout's options. Every field has a default: the default read options, the
/// store's options from the environment ([`RemoteOptions::from_env`], read when a URL is
/// opened: `GUIDELOOM_CACHE_DIR` and the rest, as the command line honours them), and
/// detection of the layout where there is no `manifest.json`.
///
/// ```
/// use guideloom_interop::{ForeignFormat, ForeignOptions, OpenOptions};
/// use guideloom_storage::{ReadOptions, RemoteOptions};
/// let options = OpenOptions::default()
///     .read(ReadOptions::default())
///     .remote(RemoteOptions::default().block_size(1 << 20))
///     .foreign(ForeignOptions::new().format(ForeignFormat::Npy));
/// # let _ = options;
/// ```
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct OpenOptions {
    pub(crate) read: ReadOptions,
    remote: Option<RemoteOptions>,
    pub(crate) foreign: ForeignOptions,
}

impl OpenOptions {
    /// The read options of the dataset's reader (I/O backend, descriptor cap). Default:
    /// [`ReadOptions::default`].
    pub fn read(mut self, read: ReadOptions) -> Self {
        self.read = read;
        self
    }

    /// The object store's options for a URL. Default: [`RemoteOptions::from_env`], read at
    /// open time.
    pub fn remote(mut self, remote: RemoteOptions) -> Self {
        self.remote = Some(remote);
        self
    }

    /// The options of a dataset in another project's layout. When they name a format
    /// ([`ForeignOptions::format`]) the location is opened in that layout even where it holds
    /// a `manifest.json`. Default: [`ForeignOptions::new`] (the layout detected).
    pub fn foreign(mut self, foreign: ForeignOptions) -> Self {
        self.foreign = foreign;
        self
    }

    /// The remote options set, or those of the environment.
    pub(crate) fn remote_options(&self, location: &StorageLocation) -> Result<RemoteOptions> {
        Ok(match (&self.remote, location.is_remote()) {
            (Some(r), _) => r.clone(),
            (None, true) => RemoteOptions::from_env()?,
            (None, false) => RemoteOptions::default(),
        })
    }
}

/// A token dataset [`open_tokens`] opened: a reader of its integer ids
/// ([`IntTokenFormat`], the stored dtype), and the foreign dataset it reads where it is one.
#[derive(Debug)]
pub struct TokenDataset {
    location: String,
    reader: StreamReader<IntTokenFormat>,
    foreign: Option<ForeignDataset>,
}

impl TokenDataset {
    /// The reader of the dataset's ids.
    pub fn reader(&self) -> &StreamReader<IntTokenFormat> {
        &self.reader
    }

    /// The reader of the dataset's ids, owned.
    pub fn into_reader(self) -> StreamReader<IntTokenFormat> {
        self.reader
    }

    /// The dataset in another project's layout, where the location holds one (`None` for a
    /// native storage).
    pub fn foreign(&self) -> Option<&ForeignDataset> {
        self.foreign.as_ref()
    }

    /// The location as given to [`open_tokens`].
    pub fn location(&self) -> &str {
        &self.location
    }

    /// The stored element dtype (an integer primitive).
    pub fn dtype(&self) -> &Dtype {
        self.reader.dtype()
    }

    /// The number of tokens in the stream.
    pub fn elements(&self) -> u64 {
        self.reader.len()
    }

    /// Windows of `seq_len` tokens every `stride` tokens over the dataset, as batches of `E`
    /// ids ([`TokenWindows::from_int_reader`] over this dataset's reader, which the windows
    /// keep).
    ///
    /// # Errors
    /// [`InteropError::Loader`] with [`guideloom_loader::LoaderError::TokenDtype`] when the
    /// ids do not all fit `E`, [`guideloom_loader::LoaderError::InvalidConfig`] when
    /// `seq_len` or `stride` is 0, [`guideloom_loader::LoaderError::WindowTooLong`] when the
    /// stream holds tokens but fewer than `seq_len`.
    pub fn windows<E: Element>(self, seq_len: u64, stride: u64) -> Result<TokenWindows<E>> {
        Ok(TokenWindows::from_int_reader(self.reader, seq_len, stride)?)
    }
}

/// Opens the token dataset at `location`: a local path or an object-store URL
/// ([`StorageLocation::parse`]: `s3://`, `gs://`, `az://`, `http(s)://`, `file://`). Where
/// `options` names a foreign format, or the location holds no `manifest.json`, it is opened
/// as a dataset in another project's layout ([`ForeignDataset::open_at`], the layout named or
/// detected); else as a native stream storage of any integer dtype.
///
/// ```
/// use guideloom_formats::TokenFormat;
/// use guideloom_interop::{open_tokens, OpenOptions};
/// use guideloom_storage::{StreamWriter, Window};
/// let dir = tempfile::tempdir()?;
/// let mut w = StreamWriter::open(dir.path(), TokenFormat::<u16>::new())?;
/// w.append(0, &[5, 6, 7, 8])?;
/// w.commit()?;
/// let data = open_tokens(dir.path().to_str().unwrap(), &OpenOptions::default())?;
/// assert_eq!(data.elements(), 4);
/// assert!(data.foreign().is_none());
/// assert_eq!(data.reader().read(Window::new(1, 2))?, vec![6, 7]);
/// let windows = data.windows::<u32>(2, 2)?;
/// assert_eq!(guideloom_loader::DataSource::len(&windows), 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// [`InteropError::NotTokens`] naming the location, kind and dtype when a native storage is
/// not a stream of integer ids; [`InteropError::Storage`] when the store cannot be opened
/// (or this build lacks guideloom-storage's `remote` feature), a request fails, or the
/// storage is damaged; [`RemoteOptions::from_env`]'s errors; for a foreign dataset, as
/// [`ForeignDataset::open_at`] and [`ForeignDataset::reader`].
pub fn open_tokens(location: &str, options: &OpenOptions) -> Result<TokenDataset> {
    let at = StorageLocation::parse(location);
    let remote = options.remote_options(&at)?;
    let named = options.foreign.format.is_some();
    let local_file = matches!(&at, StorageLocation::Local(p) if !p.is_dir());
    if !named && !local_file {
        let dir = at.open_with(&remote)?;
        match Manifest::load_from(dir.as_ref()) {
            Ok(m) => {
                let not_tokens = || InteropError::NotTokens {
                    location: location.to_string(),
                    kind: m.kind(),
                    dtype: m.dtype().map_or_else(|| "none".to_string(), Dtype::to_string),
                };
                let primitive = match (m.kind(), m.dtype()) {
                    (StorageKind::Stream, Some(Dtype::Primitive(p))) => *p,
                    _ => return Err(not_tokens()),
                };
                let format = IntTokenFormat::new(primitive).map_err(|_| not_tokens())?;
                let reader = StreamReader::open_in(dir, format, options.read.clone())?;
                return Ok(TokenDataset { location: location.to_string(), reader, foreign: None });
            }
            Err(StorageError::NotAStorage { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let data = ForeignDataset::open_at(&at, &remote, &options.foreign)?;
    let format =
        IntTokenFormat::new(data.dtype()).map_err(|source| StorageError::Format { shard: 0, source })?;
    let reader = data.reader(format, options.read.clone())?;
    Ok(TokenDataset { location: location.to_string(), reader, foreign: Some(data) })
}
