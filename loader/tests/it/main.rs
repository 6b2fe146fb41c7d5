//! The loader's integration tests, one binary (module per area). Tests that count the
//! process's threads or descriptors live in the `threads` binary, where no other test runs
//! beside them.

mod acceptance;
mod boundaries;
mod elastic;
mod elastic_model;
mod golden;
mod hostile_state;
mod mutants;
#[cfg(feature = "oamap")]
mod oamap_stars;
mod packing;
mod props;
mod readahead;
mod regression;
mod sequential;
mod sequential_redeal;
mod stage;
mod token_windows;
mod transforms;
mod transforms_props;
