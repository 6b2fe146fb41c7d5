//! guideloom's library integration tests through the facade: one binary, one module per area
//! (the `guideloom` binary's tests are in cli/tests/).

mod fingerprint;
mod sequential;
