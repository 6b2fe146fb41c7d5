//! guideloom as burn's data loader (burn 0.22.1).
#![forbid(unsafe_code)]
