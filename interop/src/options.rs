//! What a caller asks of a foreign dataset: [`ForeignOptions`] (the layout, the dtype of raw
//! files, the optional checks), the [`DocumentDelimiter`] of layouts without document
//! boundaries, and the names a [`ForeignFormat`] parses from.

use std::path::PathBuf;
use std::str::FromStr;

use guideloom_formats::Primitive;

use crate::error::{ForeignError, InteropError, Result};
use crate::format::ForeignFormat;

impl FromStr for ForeignFormat {
    type Err = InteropError;

    /// Parses a name of [`ForeignFormat::name`] (ASCII case ignored; `modded-nanogpt` and
    /// `dolma` are accepted as `llmc` and `olmo`).
    ///
    /// # Errors
    /// [`ForeignError::UnknownFormat`] for any other name.
    fn from_str(s: &str) -> Result<Self> {
        let s = s.trim().to_ascii_lowercase();
        let f = match s.as_str() {
            "megatron" => ForeignFormat::Megatron,
            "nanogpt" => ForeignFormat::NanoGpt,
            "llmc" | "llm.c" | "modded-nanogpt" => ForeignFormat::Llmc,
            "mds" => ForeignFormat::Mds,
            "litdata" => ForeignFormat::Litdata,
            "olmo" | "dolma" => ForeignFormat::Olmo,
            "npy" | "numpy" => ForeignFormat::Npy,
            "arrow" | "hf" | "huggingface" | "hf-arrow" => ForeignFormat::HfArrow,
            "parquet" => ForeignFormat::Parquet,
            "arrayrecord" | "array_record" | "array-record" => ForeignFormat::ArrayRecord,
            "tfrecord" => ForeignFormat::TfRecord,
            "webdataset" | "wds" => ForeignFormat::WebDataset,
            _ => {
                return Err(InteropError::Dataset {
                    format: None,
                    path: PathBuf::new(),
                    error: Box::new(ForeignError::UnknownFormat {
                        reason: format!(
                            "{s:?} is not one of megatron, nanogpt, llmc, mds, litdata, olmo, npy, arrow, parquet, \
                             arrayrecord, tfrecord, webdataset"
                        ),
                    }),
                })
            }
        };
        Ok(f)
    }
}

/// A token that delimits documents in a stream that records no boundaries of its own
/// (nanoGPT, llm.c, OLMo without metadata): where the documents are cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DocumentDelimiter {
    /// The token ends each document (an end-of-text appended, as nanoGPT's openwebtext,
    /// Megatron's `--append-eod` and Dolma write): a document ends after each occurrence.
    Ends(u64),
    /// The token starts each document (a BOS prepended, as llm.c and modded-nanogpt write):
    /// a document starts at each occurrence.
    Starts(u64),
}

/// How [`crate::ForeignDataset::open`] reads a dataset. `Default`: detect the layout, strict
/// validation, nothing optional.
///
/// ```
/// use guideloom_formats::Primitive;
/// use guideloom_interop::{ForeignFormat, ForeignOptions};
/// let o = ForeignOptions::new().format(ForeignFormat::NanoGpt).dtype(Primitive::U16);
/// assert_eq!((o.format, o.dtype), (Some(ForeignFormat::NanoGpt), Some(Primitive::U16)));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ForeignOptions {
    /// The layout; `None` detects it where a magic number or an index file says it.
    pub format: Option<ForeignFormat>,
    /// The element dtype of raw layouts (nanoGPT, OLMo, header-less llm.c) and of an MDS
    /// `bytes` token column (default `i64` there, LLM Foundry's historical writer). Never
    /// guessed; where the file records a dtype, a different one given here is an error.
    pub dtype: Option<Primitive>,
    /// Megatron: rebuild `sequence_pointers` from the lengths (a fix for indexes merged with
    /// numpy 2 before Megatron's 2025-09 fix, whose pointers wrapped at 2 GiB) instead of
    /// refusing them; [`crate::MegatronIndex::repaired_pointers`] reports how many differed.
    pub repair_pointers: bool,
    /// Megatron: the index carries the multimodal `modes` array (one i8 per sequence).
    pub multimodal: bool,
    /// Megatron: with `multimodal`, accept modes stored as i32 (the 2023-07..2023-10 writer).
    pub legacy_int32_modes: bool,
    /// MDS: check every shard's hashes against `index.json` on open.
    pub verify_hashes: bool,
    /// MDS / litdata: the token column (MDS column name; litdata: the leaf index as text).
    /// Default: `tokens` when present, else the only column that can hold tokens. Hugging
    /// Face Arrow and Parquet: the list column of token ids, default `input_ids`.
    pub column: Option<String>,
    /// Hugging Face `DatasetDict` directories (`dataset_dict.json`): the split to read
    /// (`train`, `validation`, ...); required there, ignored elsewhere.
    pub split: Option<String>,
    /// nanoGPT, llm.c, OLMo (without metadata): scan the tokens on open and cut documents at
    /// this delimiter.
    pub delimiter: Option<DocumentDelimiter>,
    /// NumPy / OLMo directories and globs: each file is one document.
    pub file_documents: bool,
}

impl ForeignOptions {
    /// The default options (detect the layout).
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets [`ForeignOptions::format`].
    pub fn format(mut self, format: ForeignFormat) -> Self {
        self.format = Some(format);
        self
    }

    /// Sets [`ForeignOptions::dtype`].
    pub fn dtype(mut self, dtype: Primitive) -> Self {
        self.dtype = Some(dtype);
        self
    }

    /// Sets [`ForeignOptions::repair_pointers`].
    pub fn repair_pointers(mut self, on: bool) -> Self {
        self.repair_pointers = on;
        self
    }

    /// Sets [`ForeignOptions::multimodal`].
    pub fn multimodal(mut self, on: bool) -> Self {
        self.multimodal = on;
        self
    }

    /// Sets [`ForeignOptions::verify_hashes`].
    pub fn verify_hashes(mut self, on: bool) -> Self {
        self.verify_hashes = on;
        self
    }

    /// Sets [`ForeignOptions::column`].
    pub fn column(mut self, column: impl Into<String>) -> Self {
        self.column = Some(column.into());
        self
    }

    /// Sets [`ForeignOptions::split`].
    pub fn split(mut self, split: impl Into<String>) -> Self {
        self.split = Some(split.into());
        self
    }

    /// Sets [`ForeignOptions::delimiter`].
    pub fn delimiter(mut self, delimiter: DocumentDelimiter) -> Self {
        self.delimiter = Some(delimiter);
        self
    }

    /// Sets [`ForeignOptions::file_documents`].
    pub fn file_documents(mut self, on: bool) -> Self {
        self.file_documents = on;
        self
    }
}
