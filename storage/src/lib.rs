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
//! - [`StreamWriter`] / [`StreamReader`]: fixed-size elements, read as [`Window`]s.
//! - [`DocumentWriter`] / [`DocumentReader`]: documents by global index.
//! - [`StreamWithMetaWriter`] / [`StreamWithMetaReader`]: a stream whose elements point to
//!   per-run metadata payloads.
//!
//! A stream held by files of another layout (a header, then elements; several runs per
//! file) is read in place too: a [`StreamLayout`] names the files and the element runs
//! ([`Segment`]s), and [`StreamReader::from_layout`] reads it like a stream storage
//! (`guideloom-interop` maps other projects' datasets onto it).
//!
//! # One reader, one writer
//!
//! The six names are [`Reader`] and [`Writer`] of a kind of [`kind`]: opening, the manifest,
//! the accessors, the batched read, locking, metadata, shard parking and the commit exist
//! once; a kind adds what differs ([`Kind`], [`ReaderKind`], [`ReaderIndex`], [`WriterKind`]).
//!
//! Writers append to shard files and make their data visible only through
//! [`Writer::commit`] (fsync shards, write `manifest.json.tmp`, fsync, rename, fsync the
//! directory). Readers trust only the committed counts: bytes past them are ignored, a file
//! shorter than committed is [`StorageError::ShardTooShort`]. Every offset read from disk is
//! checked before use.
//!
//! # Reading: plan, fetch, decode
//!
//! A batch is [`Reader::plan`] (keys to byte ranges over the shard files, no I/O: a
//! [`ReadPlan`]), [`Reader::fetch`] (one [`ReadBackend::read_into`] call) and
//! [`Reader::decode`]; [`Reader::read_many`] does the three. A caller with its own I/O reads
//! [`ReadPlan::requests`] itself and calls `decode`.
//!
//! Readers find their files through a [`StorageDir`]: [`LocalDir`] (what `open` uses) or
//! [`MemDir`] (in memory), or any other implementation ([`Reader::open_in`]). Batches of a
//! local directory go through the reader's [`ReadBackend`]. Writers write through a
//! [`WriteDir`] ([`LocalDir`] by default, any other with [`Writer::open_in`]): every write,
//! sync and rename of a commit goes through it.
//!
//! # I/O backends
//!
//! | backend | how | when |
//! | --- | --- | --- |
//! | [`UringBackend`] (`io_uring`) | one submission for the whole batch on a per-thread ring | Linux with the default `io-uring` feature |
//! | [`PreadBackend`] (`pread`) | one `pread(2)` per request | everywhere; the fallback |
//! | [`MmapBackend`] (`mmap`) | copies out of cached read-only maps; [`MmapBackend::map_range`] gives zero-copy slices | only through its `unsafe` constructor |
//! | [`DirectBackend`] (`pread+direct`, `io_uring+direct`) | `O_DIRECT` reads through an aligned bounce buffer | cold-data benchmarks |
//! | [`AutoBackend`] (the default) | io_uring when a one-time probe succeeds, else pread | [`ReadOptions::default`] |
//!
//! [`auto_backend_choice`] says which and why. The environment variable
//! `GUIDELOOM_IO=pread|io_uring|auto` ([`IO_ENV_VAR`]) forces the choice; `GUIDELOOM_IO=pread`
//! turns io_uring off. No safe function of this crate yields the mmap backend, whatever the
//! environment says: `GUIDELOOM_IO=mmap` is reported as not honoured, and a program that
//! accepts the mmap contract calls `unsafe { MmapBackend::new() }` itself. Backend names
//! parse in one place: [`BackendKind`]'s `FromStr`.
//!
//! # Platforms
//!
//! Unix. io_uring and `O_DIRECT` are Linux-only; elsewhere [`AutoBackend`] picks pread.
//!
//! # Feature flags
//!
//! - `io-uring` (default; Linux only): the io_uring backend. Without it
//!   [`UringBackend::new`] fails with the reason and [`AutoBackend`] picks pread.
//! - `remote`: storages in object stores (`RemoteDir`, through `object_store` and a tokio
//!   runtime per directory).
//! - `test-util`: the `conformance` module, the checks of the [`StorageDir`] /
//!   [`WriteDir`] contract for other implementations' tests.

#[cfg(not(unix))]
compile_error!("guideloom-storage needs a Unix system (positional reads, advisory file locks)");

mod append;
#[cfg(feature = "test-util")]
pub mod conformance;
mod core;
mod dir;
mod document;
mod error;
mod fsutil;
mod io;
pub mod kind;
mod layout;
mod lock;
mod manifest;
mod markers;
pub mod parts;
pub mod remote;
mod stream;
mod stream_meta;
#[cfg(feature = "remote")]
mod upload;
mod verify;

pub use crate::core::{KeyOf, Kind, ReadPlan, Reader, ReaderIndex, ReaderKind, Window, Writer, WriterKind};
pub use dir::{
    check_file_name, DirEntry, DirLock, EntryKind, ExpectedFile, LengthFault, LocalDir, MemDir, StorageDir,
    WriteDir, WriteFile,
};
pub use document::{DocumentReader, DocumentWriter};
pub use error::{Result, StorageError};
pub use io::{
    auto_backend_choice, choose_backend, descriptor_budget, io_uring_probe, open_descriptors,
    shared_descriptor_budget, AutoBackend, BackendChoice, BackendKind, DirectBackend, FileSet, HybridBackend,
    HybridRoute, MappedBytes, MmapBackend, PreadBackend, ReadBackend, ReadOptions, ReadRequest,
    ResidencyProbe, ShardFile, UringBackend, DIRECT_ALIGN, HYBRID_MIN_RESIDENT, HYBRID_RECHECK, IO_ENV_VAR,
};
pub use layout::{LayoutFile, Segment, StreamLayout};
pub use manifest::{
    check_shard_path, FileEntry, FormatSpec, Manifest, ShardEntry, StorageKind, FORMAT_VERSION,
    FORMAT_VERSION_FLAT, MANIFEST_FILE, MAX_MANIFEST_BYTES, MAX_SHARD_PATH_BYTES,
};
pub use remote::{CacheOptions, RemoteOptions, RetryPolicy, StorageLocation};
#[cfg(feature = "remote")]
pub use remote::{RemoteDir, RemoteStats};
pub use stream::{MappedWindows, StreamReader, StreamWriter};
pub use stream_meta::{StreamWithMetaReader, StreamWithMetaWriter};
pub use verify::{verify, verify_in, VerifyReport};
