//! placeholder

/// OAMap array sources on disk (`.npz` files, directories of `.npy`).
pub mod oamap;
