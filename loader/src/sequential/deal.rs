//! The shard order of an epoch and the dealing of shards to ranks.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::{fingerprint_words, Permutation};

/// Domain tag of the shard-order permutation's seed.
const TAG_SHARD_ORDER: u64 = u64::from_le_bytes(*b"glshardo");

/// The order in which epoch `epoch` takes the shards `0..shards`: `order[p]` is the shard at
/// position `p`. The identity without shuffling; with it, the [`Permutation`] of `shards`
/// elements keyed by a seed derived from `seed` (so that it is independent of the record
/// permutations of the same seed) and `epoch`. Consecutive epochs always differ for 3 to 16
/// shards (see [`Permutation`], "Small domains").
///
/// ```
/// use guideloom_loader::sequential::shard_order;
/// assert_eq!(shard_order(4, 7, false, 3), [0, 1, 2, 3]);
/// let (e0, e1) = (shard_order(4, 7, true, 0), shard_order(4, 7, true, 1));
/// assert_ne!(e0, e1);
/// let mut sorted = e1.clone();
/// sorted.sort();
/// assert_eq!(sorted, [0, 1, 2, 3]);
/// ```
pub fn shard_order(shards: u64, seed: u64, shuffle: bool, epoch: u64) -> Vec<u64> {
    if !shuffle || shards < 2 {
        return (0..shards).collect();
    }
    let p = Permutation::new(shards, fingerprint_words(&[TAG_SHARD_ORDER, seed]), epoch);
    (0..shards).map(|i| p.apply(i).unwrap_or(i)).collect()
}

/// Deals `count` entries (listed in the epoch's order) to `world` ranks and returns each
/// rank's entry indices in ascending order.
///
/// With `lengths` (one per entry): longest-processing-time first (Graham 1969: entries by
/// decreasing length, each to the rank with the least load so far); ties between entries go
/// to the earlier one, ties between ranks to the lower rank. Without: round-robin, entry `i`
/// to rank `i mod world`.
pub(crate) fn deal(count: usize, lengths: Option<&[u64]>, world: u64) -> Vec<Vec<usize>> {
    // The builder bounds the world size (`MAX_WORLD_SIZE`).
    let world = usize::try_from(world).unwrap_or(1).max(1);
    let mut ranks = vec![Vec::new(); world];
    match lengths {
        Some(lengths) => {
            let mut by_length: Vec<usize> = (0..count).collect();
            by_length.sort_by_key(|&i| (Reverse(lengths[i]), i));
            let mut loads: BinaryHeap<Reverse<(u64, usize)>> = (0..world).map(|r| Reverse((0, r))).collect();
            for i in by_length {
                let Some(Reverse((load, r))) = loads.pop() else { break };
                ranks[r].push(i);
                loads.push(Reverse((load.saturating_add(lengths[i]), r)));
            }
            for r in &mut ranks {
                r.sort_unstable();
            }
        }
        None => {
            for i in 0..count {
                ranks[i % world].push(i);
            }
        }
    }
    ranks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lpt_deals_longest_first_with_ties_to_the_earlier_entry_and_lower_rank() {
        assert_eq!(deal(4, Some(&[5, 3, 4, 2]), 2), [vec![0, 3], vec![1, 2]]);
        assert_eq!(deal(4, Some(&[4, 1, 3, 2]), 3), [vec![0], vec![2], vec![1, 3]]);
        assert_eq!(deal(3, Some(&[2, 2, 2]), 2), [vec![0, 2], vec![1]]);
        assert_eq!(deal(2, Some(&[1, 1]), 4), [vec![0], vec![1], vec![], vec![]]);
        assert_eq!(deal(5, None, 2), [vec![0, 2, 4], vec![1, 3]]);
        assert_eq!(deal(0, None, 3), [Vec::<usize>::new(), vec![], vec![]]);
    }
}
