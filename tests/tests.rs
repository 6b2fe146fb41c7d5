//! guideloom's cross-crate integration tests: one binary, one module per area.

#[cfg(feature = "cli")]
mod cli;
#[cfg(feature = "cli")]
mod foreign;
#[cfg(feature = "cli")]
mod order;
#[cfg(feature = "cli")]
mod regression;
#[cfg(feature = "cli")]
mod remote;
#[cfg(feature = "cli")]
mod remote_urls;
#[cfg(feature = "ingest")]
mod sequential;
