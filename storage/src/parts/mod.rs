//! Many writers, one storage: parts written in parallel (by processes, a Slurm array, Spark or
//! Ray tasks) and published by one atomic commit.
//!
//! A part is a complete, committed storage of its own under
//! `<root>/_parts/<job>/<partition:06>-<attempt>/` ([`part_dir`]), written by a
//! [`PartWriter`] (the normal [`crate::Writer`] on that directory: its own lock, manifest and
//! checksums, so `inspect --verify` checks a part alone). Closing it returns a [`Receipt`]
//! (JSON, versioned): the job, partition and attempt, the kind, dtype and format, and the
//! part's shard entries with their file paths relative to the root. The receipt is what an
//! engine's task returns to its driver (Spark's `WriterCommitMessage`, Ray's write return).
//!
//! [`commit_parts`] on the driver checks that the parts agree (kind, dtype, format; with the
//! storage when appending), keeps one attempt per partition (the lowest), checks that every
//! file a receipt names exists with its committed length, appends the parts' shards after the
//! storage's own **in partition order** (then part shard order), each entry naming its file by
//! [`crate::ShardEntry::path`] (no byte is copied), and publishes the one manifest through
//! [`crate::WriteDir::replace_if`]: locally the atomic rename of every commit, on an object
//! store a conditional put (of two committers one wins, the other gets
//! [`crate::StorageError::ConcurrentCommit`]). Readers see nothing of a job before that write
//! and all of it after; the committed stream, the loader's order and the fingerprint depend
//! only on the parts' contents and partition numbers, not on which task ran where, retries or
//! timing.
//!
//! [`abort`] removes a job's parts that no manifest references; [`gc`] lists (and with
//! `apply` deletes) every part directory the manifest does not reference: failed attempts,
//! speculative duplicates, crashed or aborted jobs. Neither must run while a job still writes
//! parts (its parts are not referenced yet).
//!
//! The design follows the two-phase contracts of Spark's Python Data Source API
//! (`DataSourceWriter.write` / `commit` / `abort`), Ray's `Datasink` and MosaicML Streaming's
//! `merge_index` (shard basenames rewritten to `<part>/<basename>`, no copy).

mod commit;
mod gc;
mod receipt;
mod root;
mod writer;

pub use commit::{commit_parts, commit_parts_in, CommitMode, CommitReport};
pub use gc::{abort, gc};
#[cfg(feature = "remote")]
pub use gc::{abort_remote, gc_remote};
pub use receipt::{check_job, part_dir, part_dir_name, Receipt, PARTS_DIR, RECEIPT_VERSION};
pub use root::PartsRoot;
pub use writer::{receipt_of, PartWriter};
