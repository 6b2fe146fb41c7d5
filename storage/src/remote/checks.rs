//! The checks of a remote storage's bytes against what its reader expects
//! ([`crate::StorageDir::expect_files`]: each file's committed length and crc32c): the blocks'
//! crc32c values combined as they arrive (no byte read twice), and, when the local cache holds
//! every block of a file, its check before the first cached block is served.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use super::blocks::{BlockSize, Fetched};
use super::cache::DiskCache;
use crate::dir::ExpectedFile;
use crate::{Result, StorageError};

/// What the reader expects of one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Expect {
    shard: u64,
    committed: u64,
    checksum: u32,
}

/// Where the check of one file stands.
#[derive(Default)]
struct FileCheck {
    /// The whole-file check of the cache ran (at the file's first fetch).
    cache_checked: bool,
    /// Per block: the crc32c of its bytes below the committed length, and whether they came
    /// from the local cache.
    crcs: BTreeMap<u64, (u32, bool)>,
    /// The committed bytes matched.
    verified: bool,
    /// The store's own bytes did not: the crc32c they have.
    mismatch: Option<u32>,
}

/// The expected checksums of one directory and the checks of the files they cover.
#[derive(Default)]
pub(super) struct Checks {
    expect: HashMap<String, Expect>,
    files: HashMap<String, FileCheck>,
    /// Per file, per block: the crc32c of the block's bytes as the store holds them (see
    /// [`Checks::trusted_crc`]).
    trusted: HashMap<String, HashMap<u64, u32>>,
}

impl Checks {
    /// Takes what the reader expects now (replacing what it expected before); the checks of
    /// files whose expectation changed start again.
    pub(super) fn expect(&mut self, files: &[ExpectedFile]) {
        let expect: HashMap<String, Expect> = files
            .iter()
            .map(|f| {
                (f.name.clone(), Expect { shard: f.shard, committed: f.committed, checksum: f.checksum })
            })
            .collect();
        let changed: Vec<String> =
            self.files.keys().filter(|n| self.expect.get(*n) != expect.get(*n)).cloned().collect();
        for n in changed {
            self.files.remove(&n);
            self.trusted.remove(&n);
        }
        self.expect = expect;
    }

    /// Forgets the check of `name` (its object was written or removed).
    pub(super) fn forget(&mut self, name: &str) {
        self.files.remove(name);
        self.trusted.remove(name);
    }

    /// Checks the cached blocks of `name` against its expected checksum, once, before the
    /// first of them is served: when every block of its committed bytes is cached, their
    /// stored crc32c values are combined (no block is read but one that also holds bytes past
    /// the committed length: `size` gives the object's length then); on a mismatch every
    /// cached block of the file is removed, so that they are fetched from the store. `url`
    /// is the storage's, for the log.
    pub(super) fn check_cached(
        &mut self,
        name: &str,
        bs: BlockSize,
        cache: &DiskCache,
        size: impl Fn() -> Option<u64>,
        url: &str,
    ) {
        let Some(&e) = self.expect.get(name) else { return };
        let state = self.files.entry(name.to_string()).or_default();
        if state.cache_checked || state.verified {
            return;
        }
        state.cache_checked = true;
        let n = e.committed.div_ceil(bs.0);
        let mut crc = 0u32;
        // Per block: the crc32c of all its cached bytes (what a later `get` must find).
        let mut whole = HashMap::new();
        for id in 0..n {
            let start = id * bs.0;
            let part = (e.committed - start).min(bs.0);
            let block = if part == bs.0 {
                cache.trailer(name, id, bs.0).map(|c| (c, c))
            } else {
                // The last committed block: a shorter object ends here, a longer one (bytes
                // past the commit) needs its committed part's crc from its bytes.
                cache.trailer(name, id, part).map(|c| (c, c)).or_else(|| {
                    let len = size()?.min(start + bs.0).checked_sub(start)?;
                    let (bytes, all) = cache.get(name, id, len)?;
                    bytes.get(..part as usize).map(|b| (crc32c::crc32c(b), all))
                })
            };
            let Some((b, all)) = block else { return };
            whole.insert(id, all);
            crc = if id == 0 { b } else { crc32c::crc32c_combine(crc, b, part as usize) };
        }
        if crc == e.checksum {
            state.verified = true;
            self.trusted.entry(name.to_string()).or_default().extend(whole);
            return;
        }
        log::warn!(
            "the cached blocks of {url}/{name} have crc32c {crc:#010x}, its manifest commits {:#010x}: fetching them again",
            e.checksum
        );
        for id in 0..n {
            cache.remove(name, id);
        }
    }

    /// The crc32c a cached block `block` of `name` must have to be served: the one its bytes
    /// had when this process fetched them from the store, or the one the cache held when the
    /// cached blocks of the whole file were checked against its manifest's checksum
    /// ([`Checks::check_cached`]). `None`: the cache's copy is not to be served (it is fetched
    /// from the store). Kept in memory, outside the cache: a block edited in the cache together
    /// with the checksum the cache keeps beside it does not match.
    pub(super) fn trusted_crc(&self, name: &str, block: u64) -> Option<u32> {
        self.trusted.get(name)?.get(&block).copied()
    }

    /// Records the crc32c of `block` of `name` for the check (one from the store is trusted
    /// for its cached copy, [`Checks::trusted_crc`]); when every committed block is
    /// recorded, checks them. Returns the blocks to drop: cached ones that failed the check
    /// (removed from `cache`; they are fetched again). When the store's own bytes fail it,
    /// every later read of the file fails ([`Checks::error`]) and nothing of it stays cached.
    pub(super) fn record(
        &mut self,
        name: &str,
        block: &Fetched,
        bs: BlockSize,
        cache: Option<&DiskCache>,
        url: &str,
    ) -> Vec<u64> {
        if !block.from_cache {
            self.trusted.entry(name.to_string()).or_default().insert(block.id, block.crc);
        }
        let Some(&e) = self.expect.get(name) else { return Vec::new() };
        let state = self.files.entry(name.to_string()).or_default();
        let start = block.id * bs.0;
        if state.verified || state.mismatch.is_some() || start >= e.committed {
            return Vec::new();
        }
        let end = start + block.bytes.len() as u64;
        let part = if end <= e.committed {
            block.crc
        } else {
            crc32c::crc32c(&block.bytes[..(e.committed.saturating_sub(start)) as usize])
        };
        state.crcs.insert(block.id, (part, block.from_cache));
        let n = e.committed.div_ceil(bs.0);
        if (state.crcs.len() as u64) < n || !(0..n).all(|i| state.crcs.contains_key(&i)) {
            return Vec::new();
        }
        let mut found = 0u32;
        for (&i, &(c, _)) in state.crcs.range(0..n) {
            let len = (e.committed - i * bs.0).min(bs.0);
            found = if i == 0 { c } else { crc32c::crc32c_combine(found, c, len as usize) };
        }
        if found == e.checksum {
            state.verified = true;
            state.crcs.clear();
            return Vec::new();
        }
        let cached: Vec<u64> = state.crcs.iter().filter(|(_, &(_, c))| c).map(|(&i, _)| i).collect();
        if cached.is_empty() {
            // The store's own bytes differ from what the manifest commits.
            state.mismatch = Some(found);
            state.crcs.clear();
            if let Some(c) = cache {
                for i in 0..n {
                    c.remove(name, i);
                }
            }
            return Vec::new();
        }
        log::warn!(
            "the blocks of {url}/{name} have crc32c {found:#010x}, its manifest commits {:#010x}: fetching the cached ones again",
            e.checksum
        );
        for i in &cached {
            state.crcs.remove(i);
            if let Some(c) = cache {
                c.remove(name, *i);
            }
        }
        cached
    }

    /// The error of file `name` (at `path`) when the store's bytes failed its check.
    ///
    /// # Errors
    /// [`StorageError::ChecksumMismatch`] naming the shard, the file and both checksums.
    pub(super) fn error(&self, name: &str, path: PathBuf) -> Result<()> {
        match (self.expect.get(name), self.files.get(name).and_then(|f| f.mismatch)) {
            (Some(e), Some(found)) => {
                Err(StorageError::ChecksumMismatch { shard: e.shard, path, expected: e.checksum, found })
            }
            _ => Ok(()),
        }
    }
}
