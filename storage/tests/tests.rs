//! guideloom-storage integration tests (one binary; one module per area).

mod backends;
mod common;
mod conformance;
mod crash;
mod document;
mod errors;
mod hostile;
mod layout;
mod location;
mod meta;
mod parts;
mod plan;
mod power_loss;
mod props;
mod regression;
mod stream;
