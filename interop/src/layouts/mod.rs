//! One reader per layout, each validating a dataset's files and finding its
//! [`Parts`](crate::parts::Parts): [`megatron`], [`raw`] (nanoGPT, llm.c), `olmo`
//! (the `olmo` feature), [`npy`], `mds` (the `mds` feature), [`litdata`], `arrow` (Hugging
//! Face datasets, the `arrow` feature) and `parquet` (the `parquet` feature); with what they
//! share: the offset tables of chunked files ([`chunk`]), `index.json` decoding ([`json`])
//! and the delimiter scan ([`scan`]); the record formats `arrayrecord`, `tfrecord` and
//! `webdataset` (each behind its feature), with the token ids inside a record ([`records`]) and their detection ([`record_detect`]).

#[cfg(feature = "arrayrecord")]
pub(crate) mod arrayrecord;
#[cfg(feature = "arrow")]
pub(crate) mod arrow;
pub(crate) mod chunk;
pub(crate) mod json;
pub(crate) mod litdata;
#[cfg(feature = "mds")]
pub(crate) mod mds;
pub(crate) mod megatron;
pub(crate) mod megatron_index;
pub(crate) mod npy;
#[cfg(feature = "olmo")]
pub(crate) mod olmo;
#[cfg(feature = "parquet")]
pub(crate) mod parquet;
pub(crate) mod raw;
pub(crate) mod record_detect;
#[cfg(any(feature = "arrayrecord", feature = "tfrecord", feature = "webdataset"))]
pub(crate) mod records;
pub(crate) mod scan;
#[cfg(any(feature = "arrow", feature = "parquet"))]
pub(crate) mod table;
#[cfg(feature = "tfrecord")]
pub(crate) mod tfrecord;
#[cfg(feature = "webdataset")]
pub(crate) mod webdataset;
