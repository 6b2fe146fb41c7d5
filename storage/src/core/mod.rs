//! The reader and writer every storage kind shares: [`Reader`] and [`Writer`], generic over
//! the kind ([`crate::kind`]), with the sans-IO read split ([`Reader::plan`],
//! [`Reader::fetch`], [`Reader::decode`]) and the typed [`Window`].
//!
//! A kind supplies only what differs: what the manifest records about its format ([`Kind`]),
//! how it opens its files and index and turns keys into byte ranges ([`ReaderIndex`]), how the
//! format decodes a planned output ([`ReaderKind`]), and its writer's buffers and `append`
//! ([`WriterKind`]). Opening, the manifest, the accessors, the batched read, locking,
//! metadata, shard parking and the commit exist here once.

mod checks;
mod kind;
mod plan;
mod reader;
mod writer;

pub(crate) use checks::{check_file, check_shard_files, IndexFile};
pub(crate) use kind::Sealed;
pub use kind::{KeyOf, Kind, ReaderIndex, ReaderKind, WriterKind};
pub(crate) use plan::{PayloadPlan, PlannedOutput};
pub use plan::{ReadPlan, Window};
pub use reader::Reader;
pub use writer::Writer;
