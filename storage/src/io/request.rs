//! What readers ask the backends for: the shard files of a storage ([`ShardFile`]) and the
//! byte ranges to read from them ([`ReadRequest`]). Plain data; a leaf.

use std::path::PathBuf;

/// One file of a storage as a reader sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardFile {
    /// The file's path.
    pub path: PathBuf,
    /// The shard it belongs to.
    pub shard: u64,
    /// Committed length in bytes (reads never go past it).
    pub committed: u64,
}

/// One byte range to read: `len` bytes at byte `offset` of file number `file` of a
/// [`super::FileSet`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadRequest {
    /// Index of the file in its [`super::FileSet`].
    pub file: usize,
    /// Byte offset in the file.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}
