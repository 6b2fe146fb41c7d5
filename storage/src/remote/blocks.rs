//! The blocks of a remote storage in memory: fixed-size pieces of its objects, fetched,
//! in flight or failed, bounded in bytes with least recently used ones out first, and the
//! readahead runs waiting for room. Also the block arithmetic (which blocks a range lies in,
//! copying bytes out of them).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;

use super::retry::Failure;

/// A block: the file's name and the block's number in it.
pub(super) type BlockKey = (Arc<str>, u64);

/// Where one block stands.
pub(super) enum Slot {
    /// Its fetch is in flight.
    Pending,
    /// Fetched: its bytes, and when it was last used.
    Ready { bytes: Bytes, tick: u64 },
    /// Its fetch failed for good (readers get the failure; a later read clears it).
    Failed(Failure),
}

/// The block map of one directory.
#[derive(Default)]
pub(super) struct Blocks {
    pub(super) map: HashMap<BlockKey, Slot>,
    lru: BTreeMap<u64, BlockKey>,
    tick: u64,
    ready_bytes: u64,
    /// Readahead bytes in flight.
    pub(super) readahead_bytes: u64,
    /// Readahead runs hinted while the readahead in flight was at its bound, in hint order:
    /// started as the fetches in flight end (a hint is never dropped for want of room, only
    /// when more than [`MAX_DEFERRED`] wait). Each is (file, its size, blocks).
    pub(super) deferred: VecDeque<(Arc<str>, u64, Range<u64>)>,
}

/// Why blocks are fetched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Run {
    /// A read waits for them.
    Demand,
    /// Readahead, as hinted.
    Ahead,
    /// Readahead that waited for room and now fits.
    Deferred,
}

/// The most readahead runs waiting for room at once; older ones are dropped first (their
/// blocks are fetched when read).
pub(super) const MAX_DEFERRED: usize = 4096;

impl Blocks {
    /// Marks `key` used now.
    pub(super) fn touch(&mut self, key: &BlockKey) {
        self.tick += 1;
        let t = self.tick;
        if let Some(Slot::Ready { tick, .. }) = self.map.get_mut(key) {
            self.lru.remove(tick);
            *tick = t;
            self.lru.insert(t, key.clone());
        }
    }

    /// Keeps `bytes` as block `key` (nothing when it is ready already).
    pub(super) fn set_ready(&mut self, key: BlockKey, bytes: Bytes) {
        if matches!(self.map.get(&key), Some(Slot::Ready { .. })) {
            return;
        }
        self.tick += 1;
        self.ready_bytes += bytes.len() as u64;
        self.lru.insert(self.tick, key.clone());
        self.map.insert(key, Slot::Ready { bytes, tick: self.tick });
    }

    /// Drops block `key` when it is ready (a block in flight or failed stays).
    pub(super) fn drop_ready(&mut self, key: &BlockKey) {
        if matches!(self.map.get(key), Some(Slot::Ready { .. })) {
            if let Some(Slot::Ready { bytes, tick }) = self.map.remove(key) {
                self.lru.remove(&tick);
                self.ready_bytes -= bytes.len() as u64;
            }
        }
    }

    /// Drops every ready block of file `name`.
    pub(super) fn drop_file(&mut self, name: &str) {
        let keys: Vec<BlockKey> = self.map.keys().filter(|(n, _)| &**n == name).cloned().collect();
        for k in keys {
            self.drop_ready(&k);
        }
    }

    /// Marks the blocks `run` of `name` still in flight as failed with `failure`.
    pub(super) fn fail_pending(&mut self, name: &Arc<str>, run: Range<u64>, failure: &Failure) {
        for id in run {
            let key = (name.clone(), id);
            if matches!(self.map.get(&key), Some(Slot::Pending)) {
                self.map.insert(key, Slot::Failed(failure.clone()));
            }
        }
    }

    /// Drops least recently used blocks until the ready ones take at most `limit` bytes.
    pub(super) fn evict_to(&mut self, limit: u64) {
        while self.ready_bytes > limit {
            let Some((_, key)) = self.lru.pop_first() else { break };
            if let Some(Slot::Ready { bytes, .. }) = self.map.remove(&key) {
                self.ready_bytes -= bytes.len() as u64;
            }
        }
    }
}

/// The block size `bs` of a directory and the arithmetic over it.
#[derive(Debug, Clone, Copy)]
pub(super) struct BlockSize(pub(super) u64);

impl BlockSize {
    /// The block size of options asking `bytes` (at least 1).
    pub(super) fn new(bytes: u64) -> Self {
        BlockSize(bytes.max(1))
    }

    /// The bytes of block `id` of a file of `size` bytes.
    pub(super) fn range(self, id: u64, size: u64) -> Range<u64> {
        id * self.0..((id + 1) * self.0).min(size)
    }

    /// The bytes blocks `run` of a file of `size` bytes span.
    pub(super) fn run_bytes(self, run: &Range<u64>, size: u64) -> u64 {
        (run.end * self.0).min(size) - run.start * self.0
    }

    /// The blocks of a file of `size` bytes that `ranges` lie in, sorted, deduplicated.
    pub(super) fn ids(self, size: u64, ranges: impl Iterator<Item = Range<u64>>) -> BTreeSet<u64> {
        let mut ids = BTreeSet::new();
        for r in ranges.filter(|r| r.end > r.start && r.start < size) {
            ids.extend(r.start / self.0..=(r.end.min(size) - 1) / self.0);
        }
        ids
    }

    /// Copies bytes `offset..offset + out.len()` of a file out of `blocks` (block id to
    /// bytes), which hold every block of that range.
    pub(super) fn copy_out(self, blocks: &HashMap<u64, Bytes>, offset: u64, out: &mut [u8]) {
        let mut pos = 0usize;
        while pos < out.len() {
            let at = offset + pos as u64;
            let b = &blocks[&(at / self.0)];
            // `at % bs` < the block's length: the caller checked the range against the size.
            let from = (at % self.0) as usize;
            let n = (b.len() - from).min(out.len() - pos);
            out[pos..pos + n].copy_from_slice(&b[from..from + n]);
            pos += n;
        }
    }
}

/// A block that arrived: from the store or the local cache, with the crc32c of its bytes.
pub(super) struct Fetched {
    pub(super) id: u64,
    pub(super) bytes: Bytes,
    pub(super) crc: u32,
    pub(super) from_cache: bool,
}
