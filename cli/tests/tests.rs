//! The `guideloom` binary's integration tests: one binary, one module per area, each driving
//! the binary (`CARGO_BIN_EXE_guideloom`) on real files, with the library checks they need
//! beside it.

mod cli;
mod foreign;
mod order;
mod parts;
mod records;
mod regression;
mod remote;
mod remote_urls;
