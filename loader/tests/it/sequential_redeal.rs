//! Issue 33 item 2: the sequential loader's elastic re-deal, pinned: which shards each new rank
//! reads, from which record, and in what order (hand computations in each test).

use guideloom_loader::sequential::{
    Dropped, SequentialBatch, SequentialEnd, SequentialLoader, SequentialState, VecShards,
};

/// Record k of shard s.
type SK = (u64, u64);

fn shards(lengths: &[u64], known: bool) -> VecShards<SK> {
    let v = VecShards::new(
        lengths.iter().enumerate().map(|(s, &n)| (0..n).map(|k| (s as u64, k)).collect()).collect(),
    );
    if known {
        v
    } else {
        v.without_lengths()
    }
}

fn loader(
    lengths: &[u64],
    known: bool,
    rank: u64,
    world: u64,
    end: SequentialEnd,
) -> SequentialLoader<VecShards<SK>> {
    SequentialLoader::builder(shards(lengths, known))
        .shard(rank, world)
        .cycle(2)
        .batch_size(2)
        .end(end)
        .workers(1)
        .build()
        .expect("valid")
}

/// `s.k` lists of the batches' records (padding flagged with `*`).
fn show(batches: &[SequentialBatch<Vec<SK>>]) -> Vec<String> {
    batches
        .iter()
        .map(|b| {
            b.data
                .iter()
                .zip(&b.padding)
                .map(|((s, k), p)| format!("{s}.{k}{}", if *p { "*" } else { "" }))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// The states of the `world` ranks after `steps` batches each, and what they delivered.
fn first_steps(
    lengths: &[u64],
    known: bool,
    world: u64,
    steps: usize,
    end: &SequentialEnd,
) -> (Vec<SequentialState>, Vec<Vec<String>>) {
    let mut states = Vec::new();
    let mut shown = Vec::new();
    for rank in 0..world {
        let mut it = loader(lengths, known, rank, world, end.clone()).iter();
        let batches: Vec<_> = (&mut it).take(steps).map(|b| b.expect("ok")).collect();
        shown.push(show(&batches));
        states.push(it.state());
    }
    (states, shown)
}

/// The batches each rank of the new world delivers after restoring from `states`, and the
/// records it reports dropped.
fn after(
    lengths: &[u64],
    known: bool,
    world: u64,
    states: &[SequentialState],
    end: &SequentialEnd,
) -> Vec<(Vec<String>, Vec<String>)> {
    (0..world)
        .map(|rank| {
            let mut it =
                loader(lengths, known, rank, world, end.clone()).iter_from_ranks(states).expect("elastic");
            let batches: Vec<_> = (&mut it).map(|b| b.expect("ok")).collect();
            let dropped = it
                .take_dropped()
                .iter()
                .flat_map(|d| match d {
                    Dropped::Records { shard, start, end, .. } => {
                        (*start..*end).map(|k| format!("{shard}.{k}")).collect()
                    }
                    other => vec![format!("{other:?}")],
                })
                .collect();
            (show(&batches), dropped)
        })
        .collect()
}

/// Six shards of lengths 4, 4, 3, 3, 2, 2, known lengths, world 2 -> 3 after one step.
///
/// By hand. World 2, longest first (ties to the earlier shard, then the lower rank): 0 -> r0
/// (load 4), 1 -> r1 (4), 2 -> r0 (7), 3 -> r1 (7), 4 -> r0 (9), 5 -> r1 (9); r0 reads [0, 2, 4],
/// r1 [1, 3, 5], two open at a time. Step 0 (batch 2): r0 `0.0 2.0`, r1 `1.0 3.0`.
/// Left, in shard order: 0 from record 1 (3 left), 1 from 1 (3), 2 from 1 (2), 3 from 1 (2),
/// 4 from 0 (2), 5 from 0 (2). Re-dealt over 3 ranks by what is left: 0 -> r0 (3), 1 -> r1 (3),
/// 2 -> r2 (2), 3 -> r2 (4; r2 has the least load, 2), 4 -> r0 (5; loads 3, 3, 4: r0 is the lower
/// rank of the tie), 5 -> r1 (5). Lists in shard order: r0 [0, 4], r1 [1, 5], r2 [2, 3].
/// Streams: r0 `0.1 4.0 0.2 4.1 0.3`, r1 `1.1 5.0 1.2 5.1 1.3`, r2 `2.1 3.1 2.2 3.2`; with
/// drop every rank gets min(5, 5, 4) / 2 = 2 more steps, and 0.3 and 1.3 are dropped.
#[test]
fn issue33_redeal_by_length_pins_each_new_ranks_shards_and_order() {
    let lengths = [4, 4, 3, 3, 2, 2];
    let end = SequentialEnd::Drop;
    let (states, first) = first_steps(&lengths, true, 2, 1, &end);
    assert_eq!(first, [vec!["0.0 2.0"], vec!["1.0 3.0"]]);
    let got = after(&lengths, true, 3, &states, &end);
    let want = [
        (vec!["0.1 4.0", "0.2 4.1"], vec!["0.3"]),
        (vec!["1.1 5.0", "1.2 5.1"], vec!["1.3"]),
        (vec!["2.1 3.1", "2.2 3.2"], vec![]),
    ];
    for (rank, ((b, d), (wb, wd))) in got.iter().zip(&want).enumerate() {
        assert_eq!(
            (b, d),
            (&wb.iter().map(|s| s.to_string()).collect(), &wd.iter().map(|s| s.to_string()).collect()),
            "rank {rank}"
        );
    }
}

/// The same shards with no length hints: the re-deal is round-robin over what is left, in
/// shard order. By hand: world 2 deals [0, 2, 4] and [1, 3, 5] (the same as above); left after
/// one step: 0 from 1, 1 from 1, 2 from 1, 3 from 1, 4 from 0, 5 from 0; over 3 ranks: r0
/// [0, 3], r1 [1, 4], r2 [2, 5]. Streams (read to the end, a short last batch):
/// r0 `0.1 3.1 | 0.2 3.2 | 0.3`, r1 `1.1 4.0 | 1.2 4.1 | 1.3`, r2 `2.1 5.0 | 2.2 5.1`.
#[test]
fn issue33_redeal_round_robin_without_lengths_pins_each_new_ranks_shards_and_order() {
    let lengths = [4, 4, 3, 3, 2, 2];
    let end = SequentialEnd::Exhaust;
    let (states, first) = first_steps(&lengths, false, 2, 1, &end);
    assert_eq!(first, [vec!["0.0 2.0"], vec!["1.0 3.0"]]);
    let got: Vec<Vec<String>> =
        after(&lengths, false, 3, &states, &end).into_iter().map(|(b, _)| b).collect();
    assert_eq!(
        got,
        [vec!["0.1 3.1", "0.2 3.2", "0.3"], vec!["1.1 4.0", "1.2 4.1", "1.3"], vec!["2.1 5.0", "2.2 5.1"]]
    );
}

/// A shrinking world (3 -> 2) after two steps, with lengths whose re-deal must keep the epoch's
/// shard order inside a rank although a later shard has more left.
///
/// By hand. Lengths 2, 6, 3, 5, 4 over 3 ranks: 1 (6) -> r0, 3 (5) -> r1, 4 (4) -> r2,
/// 2 (3) -> r2 (loads 6, 5, 4), 0 (2) -> r1 (loads 6, 5, 7); lists r0 [1], r1 [0, 3], r2 [2, 4].
/// Two steps of 2: r0 `1.0 1.1 | 1.2 1.3`, r1 `0.0 3.0 | 0.1 3.1` (shard 0 is read to its end
/// and stays in its slot until the next read; finished, it is not re-dealt: issue 33, it was,
/// took a slot of the new rank 0, and the rank read shard 3 before shard 2),
/// r2 `2.0 4.0 | 2.1 4.1`. Left in shard order: 1 from 4 (2 left),
/// 2 from 2 (1), 3 from 2 (3), 4 from 2 (2). Over 2 ranks by what is left: 3 (3) -> r0,
/// 1 (2) -> r1, 4 (2) -> r1 (loads 3, 2), 2 (1) -> r0 (loads 3, 4). Lists in shard order:
/// r0 [2, 3], r1 [1, 4]. Streams: r0 `2.2 3.2 | 3.3 3.4`, r1 `1.4 4.2 | 1.5 4.3`.
#[test]
fn issue33_redeal_onto_fewer_ranks_keeps_the_shard_order_inside_a_rank() {
    let lengths = [2, 6, 3, 5, 4];
    let end = SequentialEnd::Drop;
    let (states, first) = first_steps(&lengths, true, 3, 2, &end);
    assert_eq!(first, [vec!["1.0 1.1", "1.2 1.3"], vec!["0.0 3.0", "0.1 3.1"], vec!["2.0 4.0", "2.1 4.1"]]);
    let got: Vec<Vec<String>> = after(&lengths, true, 2, &states, &end).into_iter().map(|(b, _)| b).collect();
    assert_eq!(got, [vec!["2.2 3.2", "3.3 3.4"], vec!["1.4 4.2", "1.5 4.3"]]);
}
