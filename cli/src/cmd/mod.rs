//! One module per command (`guideloom <command>`): each turns its parsed arguments into
//! sources, loaders and states through the helpers of [`crate::open`], runs, and prints.
//! Commands do not use each other.

pub(crate) mod batches;
pub(crate) mod bench;
pub(crate) mod demo;
pub(crate) mod import;
pub(crate) mod ingest;
pub(crate) mod inspect;
pub(crate) mod oam;
pub(crate) mod parts;
pub(crate) mod upload;
