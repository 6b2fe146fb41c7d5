//! guideloom's interoperability with other projects: their token datasets read in place
//! (Megatron-Core indexed datasets, nanoGPT and llm.c token files, MosaicML Streaming MDS,
//! litdata optimized chunks, OLMo/Dolma token files, NumPy `.npy` arrays, Hugging Face
//! `datasets` directories (Arrow IPC) and Parquet token tables) and their
//! trainers' sample orders computed exactly (Megatron-Core's `GPTDataset` /
//! `BlendedDataset`, llm.c's `DataLoader`), with the states that continue their runs.
//!
//! # Datasets
//!
//! [`ForeignDataset::open`] validates a dataset (headers, offsets against file sizes, paths
//! inside its directory) without reading its tokens, and maps its files onto the stream
//! shape every [`StreamReader`](guideloom_storage::StreamReader) reads: a list of files, each contributing element
//! ranges at byte offsets (its *segments*), in a fixed order, with the document boundaries
//! the layout records as ranges of that stream. [`ForeignDataset::reader`] then gives a
//! plain `StreamReader` over those segments (a [`StreamLayout`](guideloom_storage::StreamLayout), [`ForeignDataset::layout`]): windows cross file and segment
//! boundaries with their segmentation, batches are one backend call (io_uring, pread, mmap)
//! as for a native storage, `plan`/`fetch`/`decode` work as everywhere, and the loader's
//! token-window fast path reads them unchanged ([`token_windows`]). Nothing is converted or written; compressed
//! MDS shards (zstd, gzip) are decompressed into memory on open and read from there, and so
//! are the record formats (ArrayRecord, TFRecord, WebDataset), whose records are decoded on
//! open into one token stream per file. Arrow IPC record batches are read in place (each
//! batch's token values buffer is a segment; the list offsets become the documents). Parquet
//! pages are encoded and compressed: the token column is decoded once on open for the row
//! lengths, then served through a bounded cache (64 MiB per file) of decoded blocks, one data
//! page each where the file has an offset index (a random window costs the pages it spans plus
//! their dictionary page, in decoded bytes), else one row group each (a random window costs
//! its row groups' token column).
//!
//! The record formats are also read record by record: `ArrayRecordReader` reads record *i*
//! through ArrayRecord's footer index (one chunk read, hashed and decompressed per record
//! outside the chunk read last) and `ArrayRecordSource` is Grain's `ArrayRecordDataSource`
//! over many files (the `arrayrecord` feature); `TfRecordShards` and `WebDatasetShards` are sequential sources
//! (`guideloom_loader::sequential`: files dealt to ranks, exact resume from byte offsets,
//! window shuffle, packing).
//!
//! | layout | [`ForeignFormat`] | path | dtype | documents |
//! | --- | --- | --- | --- | --- |
//! | Megatron-Core `MMIDIDX` v1 | `megatron` | the prefix of `<prefix>.bin` / `<prefix>.idx` | from the index (codes 1-5, 8) | `document_indices` (and [`MegatronIndex`] keeps the sequences) |
//! | nanoGPT `train.bin` | `nanogpt` | a file or a glob | required ([`ForeignOptions::dtype`]) | scanned for a delimiter when one is given |
//! | llm.c / modded-nanogpt shards | `llmc` | a file or a glob (sorted byte-wise) | u16 (magic 20240520 v1), u32 (20240801 v7); header-less legacy files with an explicit dtype | scanned for a delimiter when one is given |
//! | MosaicML Streaming MDS | `mds` | the directory of `index.json` | the token column's (`ndarray`, `ndarray:<dtype>`, or `bytes` with a configured dtype, default i64) | samples |
//! | litdata optimized chunks | `litdata` | the directory of `index.json` | the token leaf's (`no_header_numpy:<i>`, `no_header_tensor:<i>`, `numpy`, `tensor`) | items |
//! | OLMo / Dolma token files | `olmo` | a file, a glob or a directory of `*.npy` (raw, no NPY header) | required | the sibling `.csv.gz`, else a delimiter scan |
//! | NumPy `.npy` v1/v2/v3 | `npy` | a file, a glob or a directory of `*.npy` | from the header (either byte order) | rows of a 2-D array; optionally one per file |
//! | Hugging Face `datasets` `save_to_disk` (Arrow IPC stream) | `arrow` | the directory of `state.json` (its `_data_files` in order), of `dataset_dict.json` with [`ForeignOptions::split`], or `.arrow` files (a file, glob or directory) | the token column's (`list`/`large_list`/`fixed_size_list` of any integer type; [`ForeignOptions::column`], default `input_ids`) | rows |
//! | Parquet (Hugging Face Hub, pyarrow) | `parquet` | a file, a glob or a directory of `*.parquet` | the token column's (a list of INT32/INT64, any integer logical type) | rows |
//! | Grain's ArrayRecord (riegeli/records) | `arrayrecord` | a file, a glob or a directory of `*.array_record` | a `.npy` record's header, or given for raw records (`u8`: bytes) | records |
//! | TFRecord (`tf.train.Example`, gzip too) | `tfrecord` | a file, a glob or a directory of `*.tfrecord`, `*.tfrecord.gz` | `i64` (an `int64_list` feature, [`ForeignOptions::column`], default `input_ids`), or given for raw records | records |
//! | WebDataset tar shards (gzip too) | `webdataset` | a file, a glob or a directory of `*.tar`, `*.tar.gz`, `*.tgz` | the token field's `.npy` header (`npy` by default, [`ForeignOptions::column`]; `json:<key>`: `i64`) | samples |
//!
//! [`ForeignDataset::open_at`] (and [`ForeignDataset::open_url`]) read the same layouts from
//! an object-store URL (`s3://bucket/data/fineweb_train_*.bin`, `gs://bucket/mds`): a
//! directory or a glob is one listing of the prefix, sorted byte-wise as locally, files are
//! read by ranged requests through the store's block cache, and errors name files as
//! `URL/name`. Locally, a directory or glob takes regular files only: a FIFO, socket, device
//! or symbolic link it matches is [`StorageError::UnsafeFile`](guideloom_storage::StorageError::UnsafeFile) naming it (a link is
//! followed only when the path names it directly), and sub-directories are passed over.
//!
//! Auto-detection ([`ForeignOptions::format`] `None`, [`detect`], [`detect_at`]) picks a layout only where a magic
//! number or an index file makes it unambiguous (`index.json` of MDS or litdata, a
//! Megatron `.idx`, the NumPy or llm.c magic, the riegeli signature, the tar magic, a first
//! TFRecord length whose crc holds, a gzip file named `.tar.gz` or `.tfrecord.gz`); raw files (nanoGPT, OLMo, legacy llm.c) need
//! the format and the dtype named.
//!
//! Sources of the layouts: NVIDIA/Megatron-LM `megatron/core/datasets/indexed_dataset.py`;
//! karpathy/nanoGPT `data/*/prepare.py`; karpathy/llm.c `dev/data/data_common.py` and
//! `llmc/dataloader.h`; KellerJordan/modded-nanogpt `data/fineweb.py`; mosaicml/streaming
//! `streaming/base/format/mds/{writer,reader,encodings}.py`; Lightning-AI/litdata
//! `src/litdata/streaming/{writer,item_loader,serializers}.py`; allenai/dolma
//! `python/dolma/tokenizer/memmap_writer.py` and allenai/OLMo-core `src/olmo_core/data/utils.py`;
//! numpy `numpy/lib/format.py`; huggingface/datasets `src/datasets/arrow_dataset.py`
//! (`save_to_disk`, `load_from_disk`); the Arrow columnar format and IPC
//! (`format/Message.fbs`, `Schema.fbs`), read with arrow-rs's `arrow-ipc`; apache/parquet-format
//! `parquet.thrift`, read with arrow-rs's `parquet`; google/array_record `cpp/layout.proto`,
//! `cpp/array_record_{writer,reader}.cc`, `python/array_record_data_source.py` and
//! google/riegeli `doc/riegeli_records_file_format.md`; TensorFlow's
//! `core/lib/io/record_writer.cc`, `core/example/{example,feature}.proto` and vahidk/tfrecord
//! `tfrecord/{writer,reader}.py`, `tfrecord/tools/tfrecord2idx.py`; webdataset/webdataset
//! `src/webdataset/{writer,tariterators}.py`.
//!
//! Validation on open: every offset and size from a file is computed in `u64` and checked
//! against the file sizes before anything is read or allocated with it; no path from an index
//! leaves the dataset's directory; encodings that execute code (MDS `pkl`, litdata `pickle`,
//! NumPy object arrays) are refused, never decoded. Errors are [`InteropError::Dataset`]
//! naming the file, with a [`ForeignError`] naming the field and the numbers. The index files
//! (MDS and litdata `index.json`) are decoded by serde into typed structs and validated
//! before any shard is opened.
//!
//! [`open_tokens`] is the one opener of a token dataset: a local path or a URL, holding a
//! native stream storage (any integer dtype) or a dataset in any of these layouts (named in
//! [`OpenOptions::foreign`] or detected), answered as a [`TokenDataset`] whose reader and
//! [`TokenDataset::windows`] read it alike.
//!
//! # Orders
//!
//! - [`MegatronSamples`]: Megatron-Core's `GPTDataset` / `BlendedDataset` samples in
//!   Megatron's order, computed in Rust ([`GptIndex`], [`BlendIndex`], [`Mt19937`],
//!   [`megatron_split_ranges`]), and [`megatron_resume_state`] / [`megatron_resume_source`]
//!   to continue a run at Megatron's `consumed_samples`.
//! - [`llmc_windows`], [`llmc_shuffled_windows`]: llm.c's sequential and shuffled batch orders
//!   as `guideloom_loader::Spans` records, and [`LlmcCheckpoint`] with [`llmc_resume_state`] /
//!   [`llmc_shuffled_resume_state`] to continue from llm.c's checkpoints.
//!
//! Sources of the algorithms: NVIDIA/Megatron-LM `megatron/core/datasets/` (`gpt_dataset.py`,
//! `helpers.cpp`, `blended_dataset.py`, `blended_megatron_dataset_builder.py`,
//! `blended_megatron_dataset_config.py`, `utils.py`); NumPy `numpy/random/` (`RandomState`,
//! MT19937); karpathy/llm.c `llmc/dataloader.h`, `llmc/rand.h`, `train_gpt2.cu`.
//!
//! # Feature flags
//!
//! Default: every layout. Layouts without dependencies of their own (Megatron, nanoGPT,
//! llm.c, litdata, NumPy) are always read; a layout whose feature is off is refused with
//! [`ForeignError::FeatureDisabled`] naming the feature ([`ForeignFormat::feature`]).
//!
//! - `mds`: MosaicML Streaming MDS (zstd and gzip shards: `zstd`, with its C library, and
//!   `flate2`; the shard hashes `verify_hashes` checks: `sha1`, `sha2`, `md-5`).
//! - `olmo`: OLMo / Dolma token files (their `.csv.gz` document metadata: `flate2`).
//! - `arrow`: Hugging Face `datasets` directories and Arrow IPC streams (`arrow-ipc`,
//!   `arrow-schema`: the flatbuffer messages and schemas; the buffers are read in place).
//! - `parquet`: Parquet token tables (`parquet` with the snappy, gzip and zstd codecs, `bytes`).
//! - `arrayrecord`: Grain's ArrayRecord (HighwayHash: `highway`; footers: `prost`; chunks:
//!   `brotli-decompressor`, `zstd`, `snap`).
//! - `tfrecord`: TFRecord (`crc32c`, `prost`, `flate2`).
//! - `webdataset`: WebDataset tar shards (`tar`, `flate2`).

#![forbid(unsafe_code)]

mod dataset;
mod detect;
mod dir;
mod error;
mod files;
mod format;
mod layouts;
mod open;
mod options;
mod orders;
mod parts;
mod records;
mod windows;

pub use dataset::ForeignDataset;
pub use detect::{detect, detect_at};
pub use error::{ForeignError, InteropError, Result};
pub use format::ForeignFormat;
/// The element type a raw token file is read as ([`ForeignOptions::dtype`]): re-exported so that
/// opening a nanoGPT `train.bin` (`--format nanogpt --dtype u16`) needs no other guideloom crate.
pub use guideloom_formats::Primitive;
#[cfg(feature = "arrayrecord")]
pub use layouts::arrayrecord::{ArrayRecordReader, ArrayRecordSource};
pub use layouts::megatron_index::MegatronIndex;
#[cfg(feature = "tfrecord")]
pub use layouts::tfrecord::{TfRecordReader, TfRecordShards};
#[cfg(feature = "webdataset")]
pub use layouts::webdataset::{WdsSample, WebDatasetReader, WebDatasetSampleReader, WebDatasetShards};
pub use open::{open_tokens, OpenOptions, TokenDataset};
pub use options::{DocumentDelimiter, ForeignOptions};
pub use orders::capacity::MAX_INDEX_BYTES;
pub use orders::llmc::{
    llmc_resume_state, llmc_shuffled_resume_state, llmc_shuffled_windows, llmc_windows, LlmcCheckpoint,
};
pub use orders::llmc_run::{LlmcRun, LlmcRunOptions, LLMC_MAX_SHUFFLED_WINDOWS};
pub use orders::megatron::blend::{
    megatron_blending_indices, megatron_exhaustive_blending_indices, BlendIndex,
};
pub use orders::megatron::gpt::{GptConfig, GptIndex, SamplePiece};
pub use orders::megatron::mt19937::Mt19937;
pub use orders::megatron::run::{megatron_samples, MegatronRun, MegatronRunOptions};
pub use orders::megatron::samples::{
    megatron_resume_source, megatron_resume_state, MegatronSample, MegatronSamples,
};
pub use orders::megatron::split::{megatron_split_ranges, MegatronSplit};
pub use parts::{ForeignDetails, ForeignFile};
pub use records::{open_token_records, RecordUnit, TokenRecords, U32Records};
pub use windows::token_windows;
