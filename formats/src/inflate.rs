//! The bound on what a compressed input may inflate to: decided by the input's own size (a
//! ratio cap plus a small allowance, under a global ceiling), never by what an index or a
//! header claims. Every reader of compressed bytes (MDS shards, OAMap `.npz` members, OLMo
//! metadata) inflates through this bound.

/// The most bytes one compressed byte may inflate to (100): token and array data compress
/// 2 to 10 times; 100 leaves room for very repetitive data, while a bomb (deflate reaches
/// 1,032, zstd far more) is cut early.
pub const MAX_INFLATE_RATIO: u64 = 100;

/// What any compressed input may inflate to whatever its size (1 MiB): small files carry
/// headers that make their ratios meaningless.
pub const INFLATE_ALLOWANCE_BYTES: u64 = 1 << 20;

/// The most bytes one compressed input may inflate to, and the most a reader keeps inflated
/// at once from one dataset (8 GiB).
pub const MAX_INFLATED_BYTES: u64 = 8 << 30;

/// The most bytes `packed` compressed bytes may inflate to:
/// `min(packed * MAX_INFLATE_RATIO + INFLATE_ALLOWANCE_BYTES, MAX_INFLATED_BYTES)`.
///
/// ```
/// use guideloom_formats::inflate_bound;
/// assert_eq!(inflate_bound(0), 1 << 20);
/// assert_eq!(inflate_bound(1 << 20), 101 << 20);
/// assert_eq!(inflate_bound(u64::MAX), 8 << 30);
/// ```
pub fn inflate_bound(packed: u64) -> u64 {
    packed.saturating_mul(MAX_INFLATE_RATIO).saturating_add(INFLATE_ALLOWANCE_BYTES).min(MAX_INFLATED_BYTES)
}
