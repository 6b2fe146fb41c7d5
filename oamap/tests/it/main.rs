//! guideloom-oamap's integration tests: one binary, one module per area (the counting
//! allocator test is its own binary, `tests/gather_alloc.rs`).

#[cfg(feature = "npz")]
mod gather;
mod golden;
#[cfg(feature = "npz")]
mod planets;
mod regression;
