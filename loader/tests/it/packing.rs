//! Acceptance tests of issue 16, packing (items 6-10, and 11 for packed pipelines). Golden
//! values from Grain 0.2.18's packers run on the same inputs (`shuffle_bins=False`).

use guideloom_loader::pack::{
    Overflow, PackCollate, PackConfig, PackPlan, PackStrategy, Packed, PackedBatch, PackedRow,
};
use guideloom_loader::{Batch, DataSource, Documents, Loader, LoaderError, VecSource};

const I: u32 = u32::MAX;

/// Document `i` is `i + 1` repeated `lengths[i]` times.
fn docs(lengths: &[u64]) -> VecSource<Vec<u32>> {
    VecSource::new(lengths.iter().enumerate().map(|(i, &n)| vec![i as u32 + 1; n as usize]).collect())
}

fn rows(lengths: &[u64], config: PackConfig) -> Vec<PackedRow<u32>> {
    let packed = Packed::scan(docs(lengths), config, 0, I).expect("packs");
    (0..packed.len()).map(|r| packed.get(r).expect("row")).collect()
}

fn field<F: Fn(&PackedRow<u32>) -> Vec<u32>>(rows: &[PackedRow<u32>], f: F) -> Vec<Vec<u32>> {
    rows.iter().map(f).collect()
}

#[test]
fn acceptance6_first_fit_and_best_fit_match_grain() {
    let ff = rows(&[3, 4, 2, 1], PackConfig::new(6, PackStrategy::FirstFit { bins: 2 }));
    assert_eq!(field(&ff, |r| r.tokens.clone()), [vec![1, 1, 1, 3, 3, 4], vec![2, 2, 2, 2, 0, 0]]);
    assert_eq!(field(&ff, |r| r.segment_ids.clone()), [vec![1, 1, 1, 2, 2, 3], vec![1, 1, 1, 1, 0, 0]]);
    assert_eq!(field(&ff, |r| r.positions.clone()), [vec![0, 1, 2, 0, 1, 0], vec![0, 1, 2, 3, 0, 0]]);
    let bf = rows(&[3, 4, 2, 1], PackConfig::new(6, PackStrategy::BestFit { bins: 2 }));
    assert_eq!(field(&bf, |r| r.tokens.clone()), [vec![1, 1, 1, 4, 0, 0], vec![2, 2, 2, 2, 3, 3]]);
    assert_eq!(field(&bf, |r| r.segment_ids.clone()), [vec![1, 1, 1, 2, 0, 0], vec![1, 1, 1, 1, 2, 2]]);
    assert_eq!(field(&bf, |r| r.positions.clone()), [vec![0, 1, 2, 0, 0, 0], vec![0, 1, 2, 3, 0, 1]]);
    // Grain's other table: [3,6,2,5,6,4] with 2 or 3 bins, both strategies.
    for strategy in [PackStrategy::FirstFit { bins: 2 }, PackStrategy::BestFit { bins: 3 }] {
        let r = rows(&[3, 6, 2, 5, 6, 4], PackConfig::new(6, strategy));
        assert_eq!(
            field(&r, |r| r.tokens.clone()),
            [vec![1, 1, 1, 3, 3, 0], vec![2; 6], vec![4, 4, 4, 4, 4, 0], vec![5; 6], vec![6, 6, 6, 6, 0, 0]],
            "{strategy:?}"
        );
    }
}

#[test]
fn acceptance7_concat_split_matches_grain() {
    let r = rows(&[3, 6, 2, 5, 6, 4], PackConfig::new(6, PackStrategy::ConcatSplit));
    assert_eq!(
        field(&r, |r| r.tokens.clone()),
        [
            vec![1, 1, 1, 2, 2, 2],
            vec![2, 2, 2, 3, 3, 4],
            vec![4, 4, 4, 4, 5, 5],
            vec![5, 5, 5, 5, 6, 6],
            vec![6, 6, 0, 0, 0, 0]
        ]
    );
    assert_eq!(r[1].segment_ids, [1, 1, 1, 2, 2, 3]);
    assert_eq!(r[1].positions, [0, 1, 2, 0, 1, 0]);
    // Document 2 continues from row 0 into row 1: its row-0 tokens target its next tokens.
    assert_eq!(r[0].targets, [1, 1, I, 2, 2, 2]);
    assert_eq!(r[1].targets, [2, 2, I, 3, I, 4]);
}

#[test]
fn acceptance8_labels_masks_and_cu_seqlens() {
    let docs = VecSource::new(vec![vec![5u32, 6, 0], vec![7, 8, 0], vec![9]]);
    for strategy in
        [PackStrategy::ConcatSplit, PackStrategy::FirstFit { bins: 1 }, PackStrategy::BestFitDecreasing]
    {
        let packed = Packed::scan(docs.clone(), PackConfig::new(7, strategy), 0, I).unwrap();
        assert_eq!(packed.len(), 1, "{strategy:?}");
        let row = packed.get(0).unwrap();
        assert_eq!(row.tokens, [5, 6, 0, 7, 8, 0, 9]);
        assert_eq!(row.segment_ids, [1, 1, 1, 2, 2, 2, 3]);
        assert_eq!(row.positions, [0, 1, 2, 0, 1, 2, 0]);
        assert_eq!(row.targets, [6, 0, I, 8, 0, I, I]);
        assert_eq!(row.loss_mask, [1, 1, 0, 1, 1, 0, 0]);
        assert_eq!(row.cu_seqlens, [0, 3, 6, 7]);
    }
    // A configurable pad id fills padding; padding targets are the ignore id.
    let packed = Packed::scan(
        VecSource::new(vec![vec![3u32, 4]]),
        PackConfig::new(4, PackStrategy::ConcatSplit),
        99,
        7,
    )
    .unwrap();
    let row = packed.get(0).unwrap();
    assert_eq!(
        (row.tokens, row.targets, row.segment_ids),
        (vec![3, 4, 99, 99], vec![4, 7, 7, 7], vec![1, 1, 0, 0])
    );
}

#[test]
fn acceptance9_overflow_policies() {
    let lengths = [2u64, 13];
    let cfg = PackConfig::new(6, PackStrategy::FirstFit { bins: 2 });
    assert!(matches!(
        Packed::scan(docs(&lengths), cfg, 0, I),
        Err(LoaderError::DocumentTooLong { index: 1, len: 13, seq_len: 6 })
    ));
    let e = Packed::scan(docs(&lengths), cfg, 0, I).unwrap_err();
    assert_eq!(e.to_string(), "document 1 has 13 tokens, more than a row of 6");
    let plan = PackPlan::new(&[13], cfg.overflow(Overflow::Truncate)).unwrap();
    assert_eq!((plan.rows(), plan.row(0).unwrap()[0].len, plan.dropped_tokens()), (1, 6, 7));
    let t = rows(&[13], cfg.overflow(Overflow::Truncate));
    assert_eq!(t[0].targets, [1, 1, 1, 1, 1, I], "the last kept token has no target");
    let plan = PackPlan::new(&[13], cfg.overflow(Overflow::Split)).unwrap();
    let lens: Vec<u64> = (0..plan.rows()).flat_map(|r| plan.row(r).unwrap().iter().map(|p| p.len)).collect();
    assert_eq!(lens, [6, 6, 1]);
    assert_eq!(plan.dropped_tokens(), 0);
}

#[test]
fn acceptance10_best_fit_decreasing_fills_rows() {
    let bfd = |l, lengths: &[u64]| {
        PackPlan::new(lengths, PackConfig::new(l, PackStrategy::BestFitDecreasing)).unwrap()
    };
    assert_eq!(bfd(5, &[2, 2, 2, 2]).rows(), 2);
    assert_eq!(bfd(9, &[4, 4, 4, 4]).rows(), 2);
    // TRL's docstring example (with Split, as its bfd_split): [5,2,3,1] into rows of 4.
    let plan = PackPlan::new(
        &[5, 2, 3, 1],
        PackConfig::new(4, PackStrategy::BestFitDecreasing).overflow(Overflow::Split),
    )
    .unwrap();
    let rows: Vec<Vec<(u64, u64)>> =
        (0..plan.rows()).map(|r| plan.row(r).unwrap().iter().map(|p| (p.doc, p.len)).collect()).collect();
    assert_eq!(rows, [vec![(0, 4)], vec![(2, 3), (0, 1)], vec![(1, 2), (3, 1)]]);
    // max_segments is enforced.
    let plan =
        PackPlan::new(&[1; 10], PackConfig::new(8, PackStrategy::BestFitDecreasing).max_segments(3)).unwrap();
    assert_eq!(plan.rows(), 4);
    assert!((0..4).all(|r| plan.row(r).unwrap().len() <= 3));
    assert!(matches!(
        PackPlan::new(&[1], PackConfig::new(0, PackStrategy::ConcatSplit)),
        Err(LoaderError::InvalidConfig { field: "pack", .. })
    ));
}

/// Packed rows through a loader: identical for 0, 1, 3 and 8 workers, resumable after every
/// batch, state under 1 KiB.
#[test]
fn acceptance11_packed_pipelines_are_worker_invariant_and_resumable() {
    let lengths: Vec<u64> = (0..60u64).map(|i| 1 + (i * 7919) % 13).collect();
    for strategy in [
        PackStrategy::ConcatSplit,
        PackStrategy::FirstFit { bins: 3 },
        PackStrategy::BestFit { bins: 3 },
        PackStrategy::BestFitDecreasing,
    ] {
        let cfg = PackConfig::new(16, strategy);
        let build = |workers: usize| {
            Loader::builder(Packed::scan(docs(&lengths), cfg, 0, I).unwrap())
                .shuffle(5)
                .epochs(2)
                .batch_size(4)
                .workers(workers)
                .collate(PackCollate)
                .build()
                .unwrap()
        };
        let reference: Vec<Batch<PackedBatch<u32>>> = build(0).iter().collect::<Result<_, _>>().unwrap();
        assert!(reference.len() >= 6);
        for w in [1, 3, 8] {
            let got: Vec<Batch<PackedBatch<u32>>> = build(w).iter().collect::<Result<_, _>>().unwrap();
            assert_eq!(got, reference, "{strategy:?}: {w} workers");
        }
        let loader = build(3);
        let mut it = loader.iter();
        for k in 0..=reference.len() {
            let state = it.state();
            assert!(state.to_json().len() < 1024);
            let rest: Vec<_> = build(1).iter_from(&state).unwrap().collect::<Result<Vec<_>, _>>().unwrap();
            assert_eq!(rest, reference[k..], "{strategy:?}: resume after {k}");
            if k < reference.len() {
                it.next().unwrap().unwrap();
            }
        }
        // Every token of every document is in exactly one row.
        let packed = Packed::scan(docs(&lengths), cfg, 0, I).unwrap();
        let mut per_doc = vec![0u64; lengths.len()];
        for r in 0..packed.len() {
            let row = packed.get(r).unwrap();
            for (&t, &s) in row.tokens.iter().zip(&row.segment_ids) {
                if s != 0 {
                    per_doc[t as usize - 1] += 1;
                }
            }
        }
        assert_eq!(per_doc, lengths, "{strategy:?}");
    }
}

/// Packing a document storage (raw bytes as tokens) of a real file.
#[test]
fn packs_a_document_storage() {
    let dir = tempfile::tempdir().unwrap();
    let mut w =
        guideloom_storage::DocumentWriter::open(dir.path(), guideloom_formats::RawBytesFormat).unwrap();
    for d in [&b"ab"[..], b"cde", b"f"] {
        w.append(0, d).unwrap();
    }
    w.commit().unwrap();
    let docs = Documents::open(dir.path(), guideloom_formats::RawBytesFormat).unwrap();
    let packed = Packed::scan(docs, PackConfig::new(4, PackStrategy::BestFitDecreasing), b'_', b'!').unwrap();
    let rows: Vec<Vec<u8>> = (0..packed.len()).map(|r| packed.get(r).unwrap().tokens).collect();
    assert_eq!(rows, [b"cdef".to_vec(), b"ab__".to_vec()]);
    assert_eq!(packed.get(0).unwrap().targets, b"de!!".to_vec());
}

/// Acceptance 8 over a stream-with-meta storage: boundaries from the stored ordinals, not
/// from the EOD token values (token 0 inside a document does not end it).
#[test]
fn acceptance8_over_a_stream_with_meta_storage() {
    use guideloom_formats::{DocumentTokensFormat, TokenDocument};
    use guideloom_loader::MetaDocuments;
    use guideloom_storage::{StreamWithMetaReader, StreamWithMetaWriter};
    let dir = tempfile::tempdir().unwrap();
    let mut w = StreamWithMetaWriter::open(dir.path(), DocumentTokensFormat::<u16>::new()).unwrap();
    let doc = |ordinal, tokens| TokenDocument { ordinal, tokens, data: Vec::new() };
    w.append(0, &[doc(0, vec![5, 6, 0]), doc(1, vec![7, 8, 0])]).unwrap();
    w.append(1, &[doc(2, vec![9]), doc(3, vec![0, 4, 0, 3])]).unwrap();
    w.commit().unwrap();
    let docs = MetaDocuments::new(
        StreamWithMetaReader::open(dir.path(), DocumentTokensFormat::<u16>::new()).unwrap(),
    )
    .unwrap();
    assert_eq!(docs.lengths(), [3, 3, 1, 4]);
    assert_eq!(docs.get(3).unwrap(), [0, 4, 0, 3]);
    let lengths = docs.lengths();
    let packed = Packed::with_lengths(
        docs,
        lengths,
        PackConfig::new(7, PackStrategy::FirstFit { bins: 2 }),
        0,
        u16::MAX,
    )
    .unwrap();
    let (a, b) = (packed.get(0).unwrap(), packed.get(1).unwrap());
    assert_eq!(a.tokens, [5, 6, 0, 7, 8, 0, 9]);
    assert_eq!(a.segment_ids, [1, 1, 1, 2, 2, 2, 3]);
    assert_eq!(a.positions, [0, 1, 2, 0, 1, 2, 0]);
    assert_eq!(a.targets, [6, 0, u16::MAX, 8, 0, u16::MAX, u16::MAX]);
    assert_eq!(a.loss_mask, [1, 1, 0, 1, 1, 0, 0]);
    assert_eq!(a.cu_seqlens, [0, 3, 6, 7]);
    assert_eq!(b.tokens, [0, 4, 0, 3, 0, 0, 0]);
    assert_eq!(b.segment_ids, [1, 1, 1, 1, 0, 0, 0]);
}

/// The peers' packing bugs (notes §4.5), pinned: TRL's best-fit once packed nothing for row
/// lengths 2^k + 1; torchtune's packer crashed on a sample longer than twice the row; TRL's
/// truncation dropped tokens silently (here they are counted).
#[test]
fn peers_packing_bugs_do_not_happen_here() {
    for l in [3u64, 5, 9, 17, 33, 65] {
        let lengths: Vec<u64> = (1..=l).collect();
        let plan = PackPlan::new(&lengths, PackConfig::new(l, PackStrategy::BestFitDecreasing)).unwrap();
        let packed: u64 = (0..plan.rows()).flat_map(|r| plan.row(r).unwrap().iter().map(|p| p.len)).sum();
        assert_eq!(packed, l * (l + 1) / 2, "row length {l}");
        // Pairs (i, l - i) fill rows exactly: (l - 1) / 2 pairs + the full document + a half.
        assert_eq!(plan.rows(), l.div_ceil(2) + u64::from(l % 2 == 0), "row length {l}");
    }
    let r = rows(&[20], PackConfig::new(6, PackStrategy::FirstFit { bins: 1 }).overflow(Overflow::Split));
    assert_eq!(
        r.iter().map(|r| r.segment_ids.iter().filter(|&&s| s != 0).count()).collect::<Vec<_>>(),
        [6, 6, 6, 2]
    );
    let plan = PackPlan::new(
        &[8, 3, 9],
        PackConfig::new(4, PackStrategy::BestFit { bins: 2 }).overflow(Overflow::Truncate),
    )
    .unwrap();
    assert_eq!(plan.dropped_tokens(), 4 + 5);
}

/// Issue 34 item 4: mix then pack in one call; rows and batches carry each piece's source,
/// and `pack_with_lengths` (no document read to plan) packs the same rows.
#[test]
fn issue34_mix_then_pack_in_one_call_with_sources_on_rows() {
    use guideloom_loader::mix::{Mix, MixConfig};
    // Source 0: documents of tokens 10.., source 1: documents of tokens 20.. .
    let a = VecSource::new(vec![vec![10u32, 10], vec![11, 11, 11], vec![12]]);
    let b = VecSource::new(vec![vec![20u32], vec![21, 21]]);
    let mix = || Mix::new(vec![a.clone(), b.clone()], MixConfig::new(&[0.6, 0.4]).unwrap()).unwrap();
    // Proportional 3:2 over 5 positions: a0 a1 b0 a2 b1.
    let order: Vec<(u32, u64)> =
        (0..5).map(|p| mix().get(p).map(|s| (s.source, s.record)).unwrap()).collect();
    assert_eq!(order, [(0, 0), (0, 1), (1, 0), (0, 2), (1, 1)]);
    let config = PackConfig::new(4, PackStrategy::BestFitDecreasing);
    let packed = mix().pack(config, 0, I).unwrap();
    let rows: Vec<PackedRow<u32>> = (0..packed.len()).map(|r| packed.get(r).unwrap()).collect();
    // BFD over the positions' lengths [2, 3, 1, 1, 2]: a1 + b0 | a0 + b1 | a2.
    assert_eq!(
        field(&rows, |r| r.tokens.clone()),
        [vec![11, 11, 11, 20], vec![10, 10, 21, 21], vec![12, 0, 0, 0]]
    );
    assert_eq!(field(&rows, |r| r.sources.clone()), [vec![0, 1], vec![0, 1], vec![0]]);
    let planned = mix().pack_with_lengths(&[vec![2, 3, 1], vec![1, 2]], config, 0, I).unwrap();
    assert_eq!((0..planned.len()).map(|r| planned.get(r).unwrap()).collect::<Vec<_>>(), rows);
    assert_eq!(planned.fingerprint(), packed.fingerprint());
    // Batches carry them too, through the loader.
    let loader = Loader::builder(packed).batch_size(3).collate(PackCollate).build().unwrap();
    let batch: Batch<PackedBatch<u32>> = loader.iter().next().unwrap().unwrap();
    assert_eq!(batch.data.sources, [vec![0, 1], vec![0, 1], vec![0]]);
    // Lengths of the wrong shape are refused, naming both.
    let err = mix().pack_with_lengths::<u32>(&[vec![2, 3], vec![1, 2]], config, 0, I).unwrap_err();
    assert!(matches!(err, LoaderError::InvalidConfig { field: "lengths", .. }), "{err}");
    // An unmixed packing has no sources.
    assert!(rows_of(&Packed::scan(a.clone(), config, 0, I).unwrap())[0].sources.is_empty());
}

fn rows_of<S: DataSource<Item = Vec<u32>>>(p: &Packed<S, u32>) -> Vec<PackedRow<u32>> {
    (0..p.len()).map(|r| p.get(r).unwrap()).collect()
}

/// Issue 34 item 5: token-weighted mixing. Source 0 holds documents of 3 to 5 tokens (mean 4),
/// source 1 documents of 10; token weights 0.7 / 0.3 become record weights 0.7 / 4 : 0.3 / 10
/// = 35 : 6, and the realized counts and token totals are computed independently here.
#[test]
fn issue34_token_weighted_mix_realizes_the_token_share() {
    use guideloom_loader::mix::{Mix, MixConfig};
    let a_lens: Vec<u64> = (0..735).map(|i| 3 + i % 3).collect(); // 3, 4, 5, ...: 2940 tokens
    let b_lens: Vec<u64> = vec![10; 200]; // 2000 tokens
    let a = docs(&a_lens);
    let b = VecSource::new(b_lens.iter().map(|&n| vec![99u32; n as usize]).collect());
    let (ta, tb): (u64, u64) = (a_lens.iter().sum(), b_lens.iter().sum());
    assert_eq!((ta, tb), (2940, 2000));
    let config = MixConfig::by_tokens(&[0.7, 0.3], &[735, 200], &[ta, tb]).unwrap();
    assert_eq!(config.ratios(), [35, 6]);
    let mix = Mix::new(vec![a, b], config).unwrap();
    // First exhausted: floor(min(735 * 41 / 35, 200 * 41 / 6)) = 861 positions; the
    // proportional schedule gives source 0 ceil(861 * 35 / 41) = 735 of them, source 1 126.
    assert_eq!(mix.len(), 861);
    let mut counts = [0u64; 2];
    let mut tokens = [0u64; 2];
    for p in 0..mix.len() {
        let s = mix.get(p).unwrap();
        counts[s.source as usize] += 1;
        tokens[s.source as usize] += s.item.len() as u64;
    }
    assert_eq!(counts, [735, 126]);
    assert_eq!(tokens, [2940, 1260]); // exactly 70 % of the 4200 tokens
                                      // Record-weighted 0.7 / 0.3 over the same sources gives 70 % of the documents instead:
                                      // floor(min(735 / 0.7, 200 / 0.3)) = 666 positions, ceil(666 * 0.7) = 467 from source 0.
    let by_records =
        Mix::new(vec![docs(&a_lens), docs(&b_lens)], MixConfig::new(&[0.7, 0.3]).unwrap()).unwrap();
    assert_eq!(by_records.len(), 666);
    let from_a = (0..666).filter(|&p| by_records.get(p).unwrap().source == 0).count();
    assert_eq!(from_a, 467);
    // Bad inputs are refused.
    for (records, tokens) in [(&[735u64, 0][..], &[ta, tb][..]), (&[735, 200][..], &[ta][..])] {
        let err = MixConfig::by_tokens(&[0.7, 0.3], records, tokens).unwrap_err();
        assert!(matches!(err, LoaderError::InvalidConfig { field: "weights", .. }), "{err}");
    }
}
