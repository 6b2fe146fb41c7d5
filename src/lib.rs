//! guideloom: a data-loader runtime for ML training.
//!
//! This facade re-exports the workspace crates:
//! - [`formats`]: element dtypes and record formats (`guideloom-formats`);
//! - [`storage`]: sharded on-disk storages and I/O backends (`guideloom-storage`);
//! - [`loader`]: data sources, samplers, the worker pool and checkpoint state
//!   (`guideloom-loader`);
//! - [`interop`]: datasets in other projects' layouts (Megatron, nanoGPT, llm.c, MDS,
//!   litdata, OLMo, NumPy) read in place, and Megatron's and llm.c's sample orders
//!   (`guideloom-interop`);
//! - [`oamap`]: the object-array mapping, nested records as named numpy arrays
//!   (`guideloom-oamap`);
//!
//! and holds `ingest`, the library behind `guideloom ingest` (and the JSON Lines and text
//! sequential sources, `ingest::JsonlShards` and `ingest::TextShards`, read in order by the
//! loader's `SequentialLoader` with on-the-fly tokenization).
//!
//! # Features
//!
//! - `cli` (default): the `guideloom` binary (clap); enables `ingest`.
//! - `ingest` (enabled by `cli`): the `ingest` module (tokenization with `tiktoken-rs` and
//!   `rayon`, progress with `indicatif`, file fingerprints of the sequential sources with
//!   `xxhash-rust`).
//!
//! A training program that only reads storages depends on guideloom with
//! `default-features = false` and compiles none of these.

#![forbid(unsafe_code)]

#[cfg(feature = "ingest")]
pub mod ingest;

pub use guideloom_formats as formats;
pub use guideloom_interop as interop;
pub use guideloom_loader as loader;
pub use guideloom_oamap as oamap;
pub use guideloom_storage as storage;

/// The README's examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
