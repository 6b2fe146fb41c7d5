//! The reader abstraction every storage reads through: a batch of byte-range requests over a
//! set of shard files, served by a pluggable [`ReadBackend`].
//!
//! Storage readers turn a batch of windows or documents into [`ReadRequest`]s and call
//! [`ReadBackend::read_into`] once for the whole batch; the backend lays the requested bytes
//! back to back in request order into one caller buffer. Shard files are opened lazily and
//! kept in a bounded least-recently-used cache ([`FileSet`]), so a storage with thousands of
//! shards never holds more than [`ReadOptions::max_open_files`] descriptors.
//!
//! # Backends
//!
//! | backend | how | when |
//! | --- | --- | --- |
//! | [`UringBackend`] (`io_uring`) | one submission for the whole batch on a per-thread ring | Linux with the default `io-uring` feature |
//! | [`PreadBackend`] (`pread`) | one `pread(2)` per request | everywhere; the fallback |
//! | [`MmapBackend`] (`mmap`) | copies out of cached read-only maps; [`MmapBackend::map_range`] gives zero-copy slices | opt-in through an `unsafe` constructor |
//! | [`DirectBackend`] (`pread+direct`, `io_uring+direct`) | `O_DIRECT` reads through an aligned bounce buffer | cold-data benchmarks |
//! | [`AutoBackend`] (the default) | io_uring when a one-time probe succeeds, else pread | [`ReadOptions::default`] |
//! | [`HybridBackend`] (`hybrid`) | per file: the mmap path while the file is in the page cache, else [`AutoBackend`]'s | opt-in through an `unsafe` constructor (the `guideloom` binary's `auto`) |
//!
//! The environment variable [`IO_ENV_VAR`] (`GUIDELOOM_IO=pread|io_uring|auto`) forces what
//! [`AutoBackend`] picks; see [`auto_backend_choice`]. The library never maps files on its
//! own: `GUIDELOOM_IO=mmap` is not honoured here (a program that accepts the mmap contract
//! builds [`MmapBackend`] itself, as the `guideloom` binary does).

mod auto;
mod backend;
mod checker;
mod direct;
mod files;
mod hybrid;
mod mmap;
mod options;
mod pages;
mod pread;
mod request;
#[cfg(all(target_os = "linux", feature = "io-uring"))]
mod uring;
#[cfg(not(all(target_os = "linux", feature = "io-uring")))]
#[path = "uring_stub.rs"]
mod uring;

pub use auto::{auto_backend_choice, choose_backend, AutoBackend, BackendChoice, BackendKind, IO_ENV_VAR};
pub use backend::{ReadBackend, DIRECT_ALIGN};
pub use direct::DirectBackend;
pub use files::{descriptor_budget, open_descriptors, shared_descriptor_budget, FileSet};
pub use hybrid::{HybridBackend, HybridRoute, ResidencyProbe, HYBRID_MIN_RESIDENT, HYBRID_RECHECK};
pub(crate) use mmap::MappedPieces;
pub use mmap::{MappedBytes, MmapBackend};
pub use options::ReadOptions;
pub use pread::PreadBackend;
pub use request::{ReadRequest, ShardFile};
pub use uring::{io_uring_probe, UringBackend};
