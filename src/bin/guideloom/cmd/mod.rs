//! One module per command, plus what `batches` and `bench` share.

pub(crate) mod backend;
pub(crate) mod batches;
pub(crate) mod bench;
pub(crate) mod demo;
pub(crate) mod ingest;
pub(crate) mod inspect;
pub(crate) mod oam;
pub(crate) mod sequential;
pub(crate) mod windows;
