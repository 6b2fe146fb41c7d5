//! guideloom-interop's integration tests (one binary): one module per layout, mirroring
//! `src/layouts/` (`mds` and `olmo` with their features; `features` checks each layout's
//! feature either way), the malformed and damaged samples, the orders (`src/orders/`), the
//! loader's sources over foreign datasets (`src/windows.rs`) and the regressions.

#[cfg(feature = "arrayrecord")]
mod arrayrecord;
mod common;
mod features;
#[cfg(feature = "arrow")]
mod hf_arrow;
mod hostile;
#[cfg(all(feature = "arrayrecord", feature = "tfrecord", feature = "webdataset"))]
mod hostile_records;
mod litdata;
mod malformed;
#[cfg(any(
    feature = "arrow",
    feature = "parquet",
    feature = "arrayrecord",
    feature = "tfrecord",
    feature = "webdataset"
))]
mod malformed_derived;
#[cfg(feature = "mds")]
mod mds;
mod megatron;
mod npy;
#[cfg(feature = "olmo")]
mod olmo;
mod open;
mod orders_llmc;
mod orders_megatron;
mod orders_megatron_boundaries;
#[cfg(feature = "parquet")]
mod parquet;
mod raw;
mod records;
#[cfg(any(feature = "arrayrecord", feature = "tfrecord", feature = "webdataset"))]
mod records_samples;
mod regression;
#[cfg(any(feature = "arrow", feature = "parquet"))]
mod tables;
#[cfg(feature = "tfrecord")]
mod tfrecord;
#[cfg(feature = "webdataset")]
mod webdataset;
mod windows;
