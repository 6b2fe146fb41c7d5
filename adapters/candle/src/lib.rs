//! guideloom batches as candle tensors (candle-core 0.11).
#![forbid(unsafe_code)]
