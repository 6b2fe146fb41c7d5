//! One reader per layout, each validating a dataset's files and finding its
//! [`Parts`](crate::parts::Parts): [`megatron`], [`raw`] (nanoGPT, llm.c), `olmo`
//! (the `olmo` feature), [`npy`], `mds` (the `mds` feature) and [`litdata`]; with what they
//! share: the offset tables of chunked files ([`chunk`]), `index.json` decoding ([`json`])
//! and the delimiter scan ([`scan`]).

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
pub(crate) mod raw;
pub(crate) mod scan;
