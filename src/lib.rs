//! guideloom: a data-loader runtime for ML training.
//!
//! This facade re-exports the workspace crates and holds no code of its own:
//! - [`formats`]: element dtypes and record formats (`guideloom-formats`);
//! - [`storage`]: sharded on-disk storages and I/O backends (`guideloom-storage`);
//! - [`loader`]: data sources, samplers, the worker pool and checkpoint state
//!   (`guideloom-loader`);
//! - [`interop`]: datasets in other projects' layouts (Megatron, nanoGPT, llm.c, MDS,
//!   litdata, OLMo, NumPy) read in place, and Megatron's and llm.c's sample orders
//!   (`guideloom-interop`);
//! - [`oamap`]: the object-array mapping, nested records as named numpy arrays
//!   (`guideloom-oamap`);
//! - `ingest` (feature `ingest`): text and JSON Lines files tokenized into storages, and the
//!   JSON Lines and text sequential sources (`ingest::JsonlShards`, `ingest::TextShards`) read
//!   in order by the loader's `SequentialLoader` with on-the-fly tokenization
//!   (`guideloom-ingest`).
//!
//! The `guideloom` command-line tool is the package `guideloom-cli` (folder `cli/`).
//!
//! # Features
//!
//! None is on by default: `guideloom = "0.1"` compiles the library without clap, indicatif,
//! tiktoken-rs or tokio.
//! - `ingest`: the `ingest` module (tokenization with `tiktoken-rs` and `rayon`, progress with
//!   `indicatif`, file fingerprints of the sequential sources with `xxhash-rust`).
//! - `remote`: storages addressed by URL (`s3://`, `gs://`, `az://`, `http(s)://`) through
//!   `object_store` and a tokio runtime (guideloom-storage's `remote` feature).

#![forbid(unsafe_code)]

#[cfg(feature = "ingest")]
pub use guideloom_ingest as ingest;

pub use guideloom_formats as formats;
pub use guideloom_interop as interop;
pub use guideloom_loader as loader;
pub use guideloom_oamap as oamap;
pub use guideloom_storage as storage;

/// The README's examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
