//! guideloom-storage integration tests (one binary; one module per area).

mod backends;
mod common;
mod document;
mod errors;
mod meta;
mod props;
mod stream;
