//! Sharded on-disk storages for guideloom: writers, readers, the manifest commit and the
//! byte-range reader abstraction the I/O backends plug into.
//!
//! Three storage kinds share one directory layout (see `DESIGN.md` and the crate README):
//!
//! ```text
//! manifest.json          kind, dtype (numpy descr), format, shards (counts, bytes, crc32c), metadata
//! shard-00000.stream     raw little-endian elements (np.memmap(path, dtype=descr) reads it)
//! shard-00000.docs       document payloads back to back
//! shard-00000.index      documents + 1 little-endian u64 offsets, the first 0
//! shard-00000.meta       stream-with-meta: run payloads back to back
//! shard-00000.metaidx    stream-with-meta: per run, u64 first element + u64 payload offset
//! ```
//!
//! - [`StreamWriter`] / [`StreamReader`]: fixed-size elements, read as windows.
//! - [`DocumentWriter`] / [`DocumentReader`]: documents by global index.
//! - [`StreamWithMetaWriter`] / [`StreamWithMetaReader`]: a stream whose elements point to
//!   per-run metadata payloads.
//!
//! Writers append to shard files and make their data visible only through
//! [`StreamWriter::commit`] (fsync shards, write `manifest.json.tmp`, fsync, rename, fsync the
//! directory). Readers trust only the committed counts: bytes past them are ignored, a file
//! shorter than committed is [`StorageError::ShardTooShort`]. Every offset read from disk is
//! checked before use.
//!
//! # I/O backends
//!
//! Readers serve each batch with one [`ReadBackend::read_into`] call. The default
//! ([`ReadOptions::default`]) is [`AutoBackend`]: io_uring ([`UringBackend`]) when a one-time
//! probe succeeds, else pread ([`PreadBackend`]); [`auto_backend_choice`] says which and why.
//! The environment variable `GUIDELOOM_IO=pread|io_uring|mmap|auto` ([`IO_ENV_VAR`]) forces
//! the choice; `GUIDELOOM_IO=pread` turns io_uring off. [`MmapBackend`] is opt-in (unsafe
//! constructor) and [`DirectBackend`] reads with `O_DIRECT`. See the [`io`] module.
//!
//! # Feature flags
//!
//! - `io-uring` (default; Linux only): the io_uring backend. Without it
//!   [`UringBackend::new`] fails with the reason and [`AutoBackend`] picks pread.

mod append;
mod document;
mod error;
pub mod io;
pub mod manifest;
mod stream;
mod stream_meta;
mod verify;

pub use document::{DocumentReader, DocumentWriter};
pub use error::{Result, StorageError};
pub use io::{
    auto_backend_choice, AutoBackend, BackendChoice, BackendKind, DirectBackend, FileSet, MappedBytes,
    MmapBackend, PreadBackend, ReadBackend, ReadOptions, ReadRequest, ShardFile, UringBackend, IO_ENV_VAR,
};
pub use manifest::{FileEntry, FormatSpec, Manifest, ShardEntry, StorageKind};
pub use stream::{StreamReader, StreamWriter};
pub use stream_meta::{StreamWithMetaReader, StreamWithMetaWriter};
pub use verify::{verify, VerifyReport};
