//! The sealed traits a storage kind implements: what the manifest records ([`Kind`]), its
//! reader's index ([`ReaderIndex`]), its decode ([`ReaderKind`]) and its writer's buffers
//! ([`WriterKind`]).

use guideloom_formats::Dtype;

use super::plan::{PlannedOutput, ReadPlan};
use crate::dir::StorageDir;
use crate::io::ShardFile;
use crate::manifest::{FormatSpec, Manifest, StorageKind};
use crate::Result;

mod sealed {
    /// Keeps [`super::Kind`], [`super::ReaderIndex`] and the traits built on them to this
    /// crate's kinds.
    pub trait Sealed {}
}
pub(crate) use sealed::Sealed;

/// What every storage kind of [`crate::kind`] states: its format and what the manifest
/// records. Sealed.
pub trait Kind: Sealed {
    /// The format records are packed and decoded with.
    type Format: Send + Sync;
    /// The storage kind the manifest records.
    const KIND: StorageKind;

    /// The element dtype the manifest records for `format` (`None` for document storages),
    /// and the format's name and parameters.
    fn describe(format: &Self::Format) -> (Option<Dtype>, FormatSpec);
}

/// What a reader of a storage kind keeps in memory after open (shard starts, document
/// offsets, run indexes): how it opens and how it turns keys into byte ranges. Implemented by
/// the index types of [`crate::kind`]; sealed.
pub trait ReaderIndex: Sealed + Send + Sync + Sized {
    /// What a read asks for: a [`Window`](crate::Window) (stream kinds) or a document index
    /// (`u64`).
    type Key: Copy;

    /// Checks the shard files in `dir` against `manifest` (already checked to be of the
    /// reader's kind and dtype) and loads the index; returns it with the files batches read
    /// from and the number of records (elements or documents).
    ///
    /// # Errors
    /// The open errors of the kind's reader.
    fn open(dir: &dyn StorageDir, manifest: &Manifest) -> Result<(Self, Vec<ShardFile>, u64)>;

    /// The byte ranges of `keys`.
    ///
    /// # Errors
    /// [`StorageError::OutOfRange`](crate::StorageError::OutOfRange) for a key past the end;
    /// [`StorageError::BatchTooLarge`](crate::StorageError::BatchTooLarge).
    fn plan(&self, keys: &[Self::Key]) -> Result<ReadPlan>;
}

/// What a [`Reader`](crate::Reader) of kind `K` asks for: its index's key
/// ([`Window`](crate::Window) or `u64`).
pub type KeyOf<K> = <<K as ReaderKind>::Index as ReaderIndex>::Key;

/// What a storage kind adds to a [`Reader`](crate::Reader): its index and how the format decodes a
/// planned output. Implemented by the kinds of [`crate::kind`]; sealed.
pub trait ReaderKind: Kind {
    /// What the reader keeps in memory.
    type Index: ReaderIndex;
    /// One decoded record.
    type Output;

    /// Decodes one planned output.
    ///
    /// # Errors
    /// [`StorageError::Format`](crate::StorageError::Format) from the format.
    fn decode_at(
        format: &Self::Format,
        index: &Self::Index,
        output: PlannedOutput<'_>,
    ) -> Result<Self::Output>;
}

/// What a storage kind adds to a [`Writer`](crate::Writer): the buffers it packs records into (its
/// `append` is its own). Implemented by the kinds of [`crate::kind`]; sealed.
pub trait WriterKind: Kind {
    /// Buffers the kind packs records into.
    type Scratch: Default;
}
