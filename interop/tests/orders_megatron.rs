//! Issue 14: Megatron-Core's sample order (`src/orders/megatron/`), reproduced exactly. The
//! expected values are those megatron-core 0.16.1 (`GPTDataset`, `BlendedDataset`,
//! `helpers_cpp`) and NumPy's `RandomState` produced for the same inputs; the cached `.npy`
//! indices under `storage/tests/data/interop/megatron/cache` are megatron-core's own files for
//! the two `GPTDataset` cases.

use std::path::Path;

use guideloom_formats::IntTokenFormat;
use guideloom_interop::{
    megatron_blending_indices, megatron_exhaustive_blending_indices, megatron_resume_source,
    megatron_resume_state, megatron_split_ranges, BlendIndex, ForeignDataset, ForeignFormat, ForeignOptions,
    GptConfig, GptIndex, InteropError, MegatronSamples, MegatronSplit, Mt19937, SamplePiece,
};
use guideloom_loader::{DataSource, Loader, LoaderError};
use guideloom_storage::ReadOptions;

use crate::common::sample;

fn megatron(prefix: &Path) -> ForeignDataset {
    ForeignDataset::open(prefix, &ForeignOptions::new().format(ForeignFormat::Megatron)).unwrap()
}

/// All elements of a `.npy` file, widened to i64.
fn npy(path: &Path) -> Vec<i64> {
    let data = ForeignDataset::open(path, &ForeignOptions::new().format(ForeignFormat::Npy)).unwrap();
    let reader = data.reader(IntTokenFormat::new(data.dtype()).unwrap(), ReadOptions::default()).unwrap();
    let n = data.elements();
    reader.read_many(&[guideloom_storage::Window::new(0, n)]).unwrap().pop().unwrap()
}

#[test]
fn mt19937_first_outputs_match_init_genrand() {
    for (seed, want) in [
        (0u64, [2_357_136_044u32, 2_546_248_239, 3_071_714_933]),
        (1234, [822_569_775, 2_137_449_171, 2_671_936_806]),
        (5489, [3_499_211_612, 581_869_302, 3_890_346_734]),
    ] {
        let mut g = Mt19937::new(seed).unwrap();
        assert_eq!([g.next_u32(), g.next_u32(), g.next_u32()], want, "seed {seed}");
    }
}

#[test]
fn legacy_shuffle_matches_numpy_random_state() {
    for (seed, n, want) in [
        (0u64, 10u32, vec![2u32, 8, 4, 9, 1, 6, 7, 3, 0, 5]),
        (1234, 10, vec![7, 2, 9, 1, 0, 8, 4, 5, 6, 3]),
        (42, 5, vec![1, 4, 2, 0, 3]),
    ] {
        let mut a: Vec<u32> = (0..n).collect();
        Mt19937::new(seed).unwrap().shuffle(&mut a);
        assert_eq!(a, want, "seed {seed}");
    }
}

#[test]
fn legacy_interval_takes_the_64_bit_path_above_u32() {
    let max = (1u64 << 40) + 4;
    let got: Vec<u64> = [1u64, 2, 3].iter().map(|&s| Mt19937::new(s).unwrap().interval(max)).collect();
    assert_eq!(got, [163_196_666_091, 722_349_427_215, 1_073_054_410_371]);
}

#[test]
fn seed_outside_u32_is_invalid() {
    assert!(matches!(Mt19937::new(1 << 32), Err(InteropError::InvalidSeed { seed: 4_294_967_296 })));
    let c = GptConfig::new(4, u64::MAX);
    assert!(matches!(GptIndex::build(&[4, 3], 0..2, &c), Err(InteropError::InvalidSeed { .. })));
}

#[test]
fn blending_schedule_is_the_greedy_argmax() {
    assert_eq!(megatron_blending_indices(&[0.5, 0.5], 6), (vec![0, 1, 0, 1, 0, 1], vec![0, 0, 1, 1, 2, 2]));
    assert_eq!(
        megatron_blending_indices(&[0.2, 0.3, 0.5], 10),
        (vec![2, 1, 0, 2, 1, 2, 0, 2, 1, 2], vec![0, 0, 0, 1, 1, 2, 1, 3, 2, 4])
    );
    // The surplus per component and the blend's size (3 + 8 = 11 for 10 requested).
    let b = BlendIndex::new(&[25.0, 75.0], 10, 0.005).unwrap();
    assert_eq!((b.len(), b.component_samples()), (11, &[4u64, 9][..]));
}

#[test]
fn split_bookends_round_half_to_even() {
    assert_eq!(megatron_split_ranges("1,1", 5).unwrap(), [Some(0..2), Some(2..5), None]);
    assert_eq!(megatron_split_ranges("1,1,1", 10).unwrap(), [Some(0..3), Some(3..7), Some(7..10)]);
    assert_eq!(
        megatron_split_ranges("969,30,1", 1000).unwrap(),
        [Some(0..969), Some(969..999), Some(999..1000)]
    );
    assert_eq!(megatron_split_ranges("98,2", 7).unwrap(), [Some(0..7), Some(7..7), None]);
    let valid = GptConfig::new(4, 1234).split("98,2").which(MegatronSplit::Valid).num_samples(3);
    assert!(matches!(
        GptIndex::build(&[1; 7], 7..7, &valid),
        Err(InteropError::EmptySplit { split: "valid" })
    ));
    assert!(matches!(
        megatron_split_ranges("a,b", 7),
        Err(InteropError::InvalidConfig { field: "split", .. })
    ));
}

fn samples_of(source: &MegatronSamples) -> Vec<Vec<i64>> {
    let all: Vec<u64> = (0..source.len()).collect();
    source.get_many(&all).unwrap().into_iter().map(|s| s.tokens).collect()
}

#[test]
fn gpt_dataset_separate_final_epoch_case() {
    let data = megatron(&sample("megatron/gpt2_text_document"));
    let c = GptConfig::new(4, 1234).split("1,0,0").num_samples(4);
    let s = MegatronSamples::open(&[(1.0, &data)], &c, ReadOptions::default()).unwrap();
    let ix = s.index(0).unwrap();
    assert_eq!((ix.epochs(), ix.separate_final_epoch(), ix.len()), (2, true, 6));
    assert_eq!(ix.document_index(), [0, 1, 2, 3, 1, 2, 3, 0]);
    assert_eq!(ix.sample_index(), [[0, 0], [1, 0], [2, 1], [3, 0], [4, 2], [5, 3], [7, 0]]);
    assert_eq!(ix.shuffle_index(), [0, 2, 1, 3, 5, 4]);
    assert_eq!(
        samples_of(&s),
        [
            vec![101, 102, 103, 50256, 201],
            vec![302, 303, 304, 50256, 401],
            vec![201, 202, 50256, 301, 302],
            vec![401, 50256, 201, 202, 50256],
            vec![304, 50256, 401, 50256, 101],
            vec![50256, 301, 302, 303, 304],
        ]
    );
}

#[test]
fn gpt_dataset_joint_shuffle_case() {
    let data = megatron(&sample("megatron/gpt2_text_document"));
    let c = GptConfig::new(4, 1234).split("1,0,0").num_samples(5);
    let s = MegatronSamples::open(&[(1.0, &data)], &c, ReadOptions::default()).unwrap();
    let ix = s.index(0).unwrap();
    assert_eq!((ix.epochs(), ix.separate_final_epoch(), ix.len()), (2, false, 6));
    assert_eq!(ix.document_index(), [2, 1, 2, 0, 0, 1, 3, 3]);
    assert_eq!(ix.sample_index(), [[0, 0], [0, 4], [2, 0], [2, 4], [3, 3], [4, 3], [6, 0]]);
    assert_eq!(ix.shuffle_index(), [0, 4, 3, 2, 5, 1]);
    assert_eq!(
        samples_of(&s),
        [
            vec![301, 302, 303, 304, 50256],
            vec![50256, 101, 102, 103, 50256],
            vec![50256, 101, 102, 103, 50256],
            vec![301, 302, 303, 304, 50256],
            vec![50256, 201, 202, 50256, 401],
            vec![50256, 201, 202, 50256, 301],
        ]
    );
}

#[test]
fn megatron_cached_indices_equal_the_computed_ones() {
    let lengths = [4u32, 3, 5, 2];
    for (md5, n) in [("cb6b325b654cb93cc690f6f34ed23067", 4u64), ("ab120df2b3b30f2071a2218ba2462cf5", 5)] {
        let file = |what: &str| sample(&format!("megatron/cache/{md5}-GPTDataset-train-{what}.npy"));
        let ix =
            GptIndex::build(&lengths, 0..4, &GptConfig::new(4, 1234).split("1,0,0").num_samples(n)).unwrap();
        let doc: Vec<i64> = ix.document_index().iter().map(|&d| i64::from(d)).collect();
        let smp: Vec<i64> = ix.sample_index().iter().flat_map(|p| p.map(i64::from)).collect();
        let shf: Vec<i64> = ix.shuffle_index().iter().map(|&d| i64::from(d)).collect();
        assert_eq!(npy(&file("document_index")), doc, "{n} samples");
        assert_eq!(npy(&file("sample_index")), smp, "{n} samples");
        assert_eq!(npy(&file("shuffle_index")), shf, "{n} samples");
        ix.check_cache(&sample(&format!("megatron/cache/{md5}-GPTDataset-train"))).unwrap();
    }
    // The other case's cache is a mismatch, named by array and entry.
    let ix = GptIndex::build(&lengths, 0..4, &GptConfig::new(4, 1234).split("1,0,0").num_samples(4)).unwrap();
    let err = ix.check_cache(&sample("megatron/cache/ab120df2b3b30f2071a2218ba2462cf5-GPTDataset-train"));
    assert!(
        matches!(
            err,
            Err(InteropError::CacheMismatch { array: "document_index", entry: 0, cached: 2, computed: 0 })
        ),
        "{err:?}"
    );
}

#[test]
fn blend_samples_are_the_components_samples_in_schedule_order() {
    let a = megatron(&sample("megatron/gpt2_text_document"));
    let b = megatron(&sample("megatron/other_text_document"));
    let c = GptConfig::new(4, 1234).split("1,0,0").num_samples(10);
    let blend = MegatronSamples::open(&[(30.0, &a), (70.0, &b)], &c, ReadOptions::default()).unwrap();
    let bi = blend.blend().unwrap();
    assert_eq!((bi.len(), bi.component_samples()), (10, &[4u64, 8][..]));
    let (ds, smp) = megatron_blending_indices(&[0.3, 0.7], 10);
    assert_eq!((bi.dataset_index(), bi.dataset_sample_index()), (&ds[..], &smp[..]));
    let alone: Vec<Vec<Vec<i64>>> = [(&a, 4u64), (&b, 8)]
        .iter()
        .map(|(d, n)| {
            let c = GptConfig::new(4, 1234).split("1,0,0").num_samples(*n);
            samples_of(&MegatronSamples::open(&[(1.0, *d)], &c, ReadOptions::default()).unwrap())
        })
        .collect();
    let got = blend.get_many(&(0..10).collect::<Vec<_>>()).unwrap();
    for (k, s) in got.iter().enumerate() {
        assert_eq!(s.dataset, ds[k]);
        assert_eq!(s.tokens, alone[ds[k] as usize][smp[k] as usize], "blended sample {k}");
        assert_eq!(s.tokens.len(), 5);
    }
}

/// Writes a Megatron dataset of `docs` (u16 tokens) at `prefix`.
fn write_megatron(prefix: &Path, docs: &[Vec<u16>]) {
    let n = docs.len() as u64;
    let mut idx = b"MMIDIDX\0\0".to_vec();
    idx.extend(1u64.to_le_bytes());
    idx.push(8);
    idx.extend(n.to_le_bytes());
    idx.extend((n + 1).to_le_bytes());
    docs.iter().for_each(|d| idx.extend((d.len() as i32).to_le_bytes()));
    let mut p = 0i64;
    for d in docs {
        idx.extend(p.to_le_bytes());
        p += 2 * d.len() as i64;
    }
    (0..=n as i64).for_each(|i| idx.extend(i.to_le_bytes()));
    let bin: Vec<u8> = docs.iter().flatten().flat_map(|t| t.to_le_bytes()).collect();
    std::fs::write(prefix.with_extension("idx"), idx).unwrap();
    std::fs::write(prefix.with_extension("bin"), bin).unwrap();
}

/// Every consumed-sample count `k` (whole steps) resumes onto the samples the uninterrupted
/// run gives after `k`, on data-parallel sizes 1, 2 and 4, and the ranks' batches of a step
/// are Megatron's `MegatronPretrainingSampler` split of the global order.
#[test]
fn resume_from_consumed_samples_on_dp_1_2_4() {
    let dir = tempfile::tempdir().unwrap();
    let docs = |base: u16, count: u16| -> Vec<Vec<u16>> {
        (0..count).map(|d| (0..(d % 7 + 1)).map(|t| base + d * 10 + t).collect()).collect()
    };
    write_megatron(&dir.path().join("a"), &docs(1000, 40));
    write_megatron(&dir.path().join("b"), &docs(5000, 25));
    let (a, b) = (megatron(&dir.path().join("a")), megatron(&dir.path().join("b")));
    let c = GptConfig::new(7, 99).split("90,10,0").num_samples(48);
    let source = std::sync::Arc::new(
        MegatronSamples::open(&[(2.0, &a), (1.0, &b)], &c, ReadOptions::default()).unwrap(),
    );
    let total = source.len();
    assert_eq!(total, 48);
    let order: Vec<(u16, Vec<i64>)> =
        samples_of_full(&source).into_iter().map(|s| (s.dataset, s.tokens)).collect();
    let micro = 2u64;
    for dp in [1u64, 2, 4] {
        let g = micro * dp;
        let loaders: Vec<_> = (0..dp)
            .map(|r| {
                Loader::builder(source.clone()).batch_size(micro).shard(r, dp).workers(0).build().unwrap()
            })
            .collect();
        for k in (0..total).step_by(g as usize) {
            let state = megatron_resume_state(&loaders[0].initial_state(), k).unwrap();
            let per_rank: Vec<Vec<Vec<_>>> = loaders
                .iter()
                .map(|l| l.iter_from(&state).unwrap().map(|b| b.unwrap().data).collect())
                .collect();
            let mut got = Vec::new();
            for step in 0..per_rank[0].len() {
                for rank in &per_rank {
                    got.extend(rank[step].iter().map(|s| (s.dataset, s.tokens.clone())));
                }
            }
            assert_eq!(got, order[k as usize..], "dp {dp}, consumed {k}");
        }
        let err = megatron_resume_state(&loaders[0].initial_state(), g + 1);
        assert!(
            matches!(err, Err(InteropError::Loader(LoaderError::ElasticResume { consumed, global_batch })) if consumed == g + 1 && global_batch == g)
        );
    }
}

fn samples_of_full(source: &MegatronSamples) -> Vec<guideloom_interop::MegatronSample> {
    source.get_many(&(0..source.len()).collect::<Vec<_>>()).unwrap()
}

/// The validation split with `drop_last_partial_validation_sequence` off keeps a partial last
/// sample (`ceil(float32(E*T - x) / L)` samples): 13 tokens after the extra one make three
/// samples of 4 and one of 1, so their real lengths (with the shared token) are 5, 5, 5 and
/// 2; Megatron pads the short one to `L + 1` with its pad id (-1 by default).
#[test]
fn validation_keeps_the_partial_last_sample_when_asked() {
    let data = megatron(&sample("megatron/gpt2_text_document"));
    let mut c = GptConfig::new(4, 1234).split("0,1,0").which(MegatronSplit::Valid);
    let dropped = MegatronSamples::open(&[(1.0, &data)], &c, ReadOptions::default()).unwrap();
    assert_eq!(dropped.len(), 3);
    assert!(samples_of(&dropped).iter().all(|s| s.len() == 5));
    c.drop_last_partial_validation = false;
    let kept = MegatronSamples::open(&[(1.0, &data)], &c, ReadOptions::default()).unwrap();
    let samples = samples_of(&kept);
    assert!(samples.iter().all(|s| s.len() == 5));
    let mut real: Vec<usize> = samples.iter().map(|s| s.iter().filter(|&&t| t != -1).count()).collect();
    real.sort_unstable();
    assert_eq!(real, [2, 5, 5, 5]);
    // The partial sample: the last two tokens of the index's walk, then three pads; another
    // pad id pads with it (and changes the source's fingerprint).
    let ix = kept.index(0).unwrap();
    let last = ix.shuffle_index().iter().position(|&j| u64::from(j) == ix.len() - 1).unwrap();
    let partial = &samples[last];
    assert_eq!(partial[2..], [-1, -1, -1]);
    assert_eq!(partial[1], 50256, "{partial:?}: the walk ends at the end of a document");
    let padded0 =
        MegatronSamples::open(&[(1.0, &data)], &c.clone().pad_token_id(0), ReadOptions::default()).unwrap();
    let mut with0 = partial.clone();
    with0[2..].fill(0);
    assert_eq!(samples_of(&padded0)[last], with0);
    assert_ne!(padded0.fingerprint(), kept.fingerprint());
    // The train split's fingerprint does not depend on the pad id (it never pads).
    let t = GptConfig::new(4, 1234).split("1,0,0");
    let a = MegatronSamples::open(&[(1.0, &data)], &t, ReadOptions::default()).unwrap();
    let b =
        MegatronSamples::open(&[(1.0, &data)], &t.clone().pad_token_id(7), ReadOptions::default()).unwrap();
    assert_eq!(a.fingerprint(), b.fingerprint());
}

/// Every consumed-sample count `k`, also one that is not a whole number of steps (a run
/// with another micro batch x data-parallel size, or inside a batch-size ramp-up), resumes
/// onto the uninterrupted order after `k` in whole steps (the incomplete last one dropped,
/// as Megatron's sampler does), on data-parallel sizes 1, 2 and 4.
#[test]
fn resume_from_any_consumed_samples_on_dp_1_2_4() {
    let data = megatron(&sample("megatron/gpt2_text_document"));
    let c = GptConfig::new(2, 7).split("1,0,0").num_samples(23);
    let source =
        std::sync::Arc::new(MegatronSamples::open(&[(1.0, &data)], &c, ReadOptions::default()).unwrap());
    let order: Vec<Vec<i64>> = samples_of(&source);
    let total = order.len() as u64;
    assert!(total >= 23);
    let micro = 3u64;
    for dp in [1u64, 2, 4] {
        let g = micro * dp;
        for k in 0..=total {
            let per_rank: Vec<Vec<Vec<Vec<i64>>>> = (0..dp)
                .map(|r| {
                    let (s, next_batch) = megatron_resume_source(source.clone(), k, g).unwrap();
                    let loader = Loader::builder(s)
                        .batch_size(micro)
                        .shard(r, dp)
                        .drop_remainder(true)
                        .workers(0)
                        .build()
                        .unwrap();
                    let state = guideloom_loader::State { next_batch, ..loader.initial_state() };
                    loader
                        .iter_from(&state)
                        .unwrap()
                        .map(|b| b.unwrap().data.into_iter().map(|s| s.tokens).collect())
                        .collect()
                })
                .collect();
            let mut got = Vec::new();
            for step in 0..per_rank[0].len() {
                for rank in &per_rank {
                    got.extend(rank[step].iter().cloned());
                }
            }
            let whole = (total - k) / g * g;
            assert_eq!(got, order[k as usize..(k + whole) as usize], "dp {dp}, consumed {k}");
        }
    }
    assert!(matches!(
        megatron_resume_source(source, 1, 0),
        Err(InteropError::InvalidConfig { field: "global_batch", ref detail }) if detail == "must be > 0"
    ));
}

/// Megatron's exhaustive blend (`build_exhaustive_blending_indices`, prefixes without
/// weights and no requested size), worked by hand: sizes [2, 3] weigh 0.4 / 0.6; the errors
/// `w_i * max(s, 1) - count_i` pick 1 (0.6 > 0.4), 0 (0.4 > -0.4), 1 (0.2 > -0.2),
/// 0 (0.2 > -0.2, which exhausts component 0), then 1 alone.
#[test]
fn exhaustive_blend_draws_every_component_until_exhausted() {
    assert_eq!(megatron_exhaustive_blending_indices(&[2, 3]), (vec![1, 0, 1, 0, 1], vec![0, 0, 1, 1, 2]));
    // Sizes [3, 2]: 0, 1, 0, 1 (exhausts 1), then 0 alone.
    assert_eq!(megatron_exhaustive_blending_indices(&[3, 2]), (vec![0, 1, 0, 1, 0], vec![0, 0, 1, 1, 2]));
    // The law: component i gives exactly its samples 0 .. sizes[i], in order.
    for sizes in [vec![5u64, 1, 9], vec![1, 1, 1, 1], vec![40, 3], vec![7]] {
        let (ds, sample) = megatron_exhaustive_blending_indices(&sizes);
        assert_eq!(ds.len() as u64, sizes.iter().sum::<u64>());
        for (i, &n) in sizes.iter().enumerate() {
            let mine: Vec<u64> =
                ds.iter().zip(&sample).filter(|(d, _)| **d as usize == i).map(|(_, s)| *s).collect();
            assert_eq!(mine, (0..n).collect::<Vec<_>>(), "{sizes:?}");
        }
    }
    // With a requested size: the greedy schedule over the normalised sizes, capped by their sum.
    let b = BlendIndex::unweighted(&[3, 2], Some(4)).unwrap();
    assert_eq!((b.dataset_index(), b.dataset_sample_index()), (&[0u16, 1, 0, 1][..], &[0u64, 0, 1, 1][..]));
    assert_eq!(BlendIndex::unweighted(&[3, 2], Some(100)).unwrap().len(), 5);
    for sizes in [&[3u64, 0][..], &[]] {
        let e = BlendIndex::unweighted(sizes, None).unwrap_err();
        assert!(
            matches!(&e, InteropError::InvalidConfig { field: "weights", detail }
                if detail.starts_with(&format!("component sizes {sizes:?}: "))),
            "{e}"
        );
    }
}

/// `--data-path A B` (no weights): one-epoch components, blended exhaustively; every blended
/// sample is its component's sample, and the fingerprint differs from a weighted blend's.
#[test]
fn unweighted_prefixes_blend_one_epoch_components_exhaustively() {
    let a = megatron(&sample("megatron/gpt2_text_document"));
    let b = megatron(&sample("megatron/other_text_document"));
    let c = GptConfig::new(4, 1234).split("1,0,0");
    let blend = MegatronSamples::open_unweighted(&[&a, &b], &c, ReadOptions::default()).unwrap();
    let one = |d: &ForeignDataset| {
        samples_of(&MegatronSamples::open(&[(1.0, d)], &c, ReadOptions::default()).unwrap())
    };
    let (sa, sb) = (one(&a), one(&b));
    assert_eq!((sa.len(), sb.len()), (3, 2));
    let got = samples_of_full(&blend);
    assert_eq!(got.iter().map(|s| s.dataset).collect::<Vec<_>>(), [0, 1, 0, 1, 0]);
    let want = [&sa[0], &sb[0], &sa[1], &sb[1], &sa[2]];
    assert_eq!(got.iter().map(|s| &s.tokens).collect::<Vec<_>>(), want);
    assert_eq!(got[0].tokens, [201, 202, 50256, 301, 302]);
    // With --train-samples 4: the first four of the size-weighted schedule.
    let capped =
        MegatronSamples::open_unweighted(&[&a, &b], &c.clone().num_samples(4), ReadOptions::default())
            .unwrap();
    assert_eq!(samples_of(&capped), [sa[0].clone(), sb[0].clone(), sa[1].clone(), sb[1].clone()]);
    let weighted =
        MegatronSamples::open(&[(3.0, &a), (2.0, &b)], &c.clone().num_samples(5), ReadOptions::default())
            .unwrap();
    assert_ne!(weighted.fingerprint(), blend.fingerprint());
}

/// Issue 34 item 2: every default of [`GptConfig`] is megatron-core's (values read from
/// Megatron-LM: `RNGConfig.seed` 1234 in `megatron/training/config/common_config.py`, the
/// legacy `--split` "969, 30, 1" of `megatron/training/arguments.py`, and `GPTDatasetConfig` /
/// `BlendedMegatronDatasetConfig`'s `add_extra_token_to_sequence = True`,
/// `drop_last_partial_validation_sequence = True`, `mid_level_dataset_surplus = 0.005`,
/// `_PAD_TOKEN_ID = -1`).
#[test]
fn issue34_gpt_config_defaults_are_megatron_cores() {
    assert_eq!(GptConfig::DEFAULT_SEED, 1234);
    let c = GptConfig::new(4, GptConfig::DEFAULT_SEED);
    assert_eq!(c.seed, 1234);
    assert_eq!(
        megatron_split_ranges(&c.split, 1000).unwrap(),
        megatron_split_ranges("969, 30, 1", 1000).unwrap()
    );
    assert_eq!(c.which, MegatronSplit::Train);
    assert_eq!(c.num_samples, None);
    assert!(c.add_extra_token);
    assert!(c.drop_last_partial_validation);
    assert_eq!(c.surplus, 0.005);
    assert_eq!(c.pad_token_id, -1);
}

/// Issue 32 class 6: the blend allocated its index from `--train-samples` before any size
/// check (10^15 aborted on a failed allocation, 2^63 - 1 panicked on an overflowing sum),
/// weights whose sum overflowed to infinity gave a silent empty blend, and a zero weight was
/// taken (Megatron asserts every weight is positive). Each is now a typed error, before any
/// allocation.
#[test]
fn issue32_blend_sizes_and_weights_are_checked_before_allocation() {
    let limit = guideloom_interop::MAX_INDEX_BYTES;
    for n in [1_000_000_000_000_000u64, (1 << 63) - 1, u64::MAX] {
        match BlendIndex::new(&[0.5, 0.5], n, 0.005) {
            Err(InteropError::IndexTooLarge { what: "blend index", count, bytes, limit: l }) => {
                assert_eq!(count, if n == (1 << 63) - 1 || n == u64::MAX { count } else { n }, "{n}");
                assert!(count >= n.min(1 << 62), "{n}: {count}");
                assert_eq!(bytes, count.saturating_mul(10));
                assert_eq!(l, limit);
            }
            other => panic!("{n}: {other:?}"),
        }
    }
    assert!(matches!(
        BlendIndex::unweighted(&[u64::MAX, 1], None),
        Err(InteropError::IndexTooLarge { what: "blend index", count: u64::MAX, .. })
    ));
    assert!(matches!(
        BlendIndex::unweighted(&[1 << 40, 1 << 40], Some(u64::MAX)),
        Err(InteropError::IndexTooLarge { what: "blend index", count: 2_199_023_255_552, .. })
    ));
    for w in [&[1e308, 1e308][..], &[0.0, 1.0], &[f64::MAX, f64::MAX, 1.0]] {
        assert!(
            matches!(
                BlendIndex::new(w, 10, 0.005),
                Err(InteropError::InvalidConfig { field: "weights", .. })
            ),
            "{w:?}"
        );
    }
    assert!(matches!(
        BlendIndex::new(&[1.0, 1.0], 10, f64::NAN),
        Err(InteropError::InvalidConfig { field: "surplus", .. })
    ));
    // The limit itself: just under it is built (checked by its size, not allocated here).
    let ok = BlendIndex::new(&[1.0, 3.0], 1000, 0.0).unwrap();
    assert_eq!(ok.len(), 1000);
}

/// Issue 33, survivors of the `orders` mutation run in `exhaustive_into` (`w_i * x` -> `+`,
/// `/`; ties `>` -> `>=`; `s += 1` -> `*=`; `sizes[i] > 0` -> `>=`): with two components the
/// rule's `x` cancels out of every comparison, so three are needed. Worked by hand: sizes
/// `[1, 1, 8]` weigh 0.1, 0.1, 0.8; `w_i * max(s, 1) - count_i` picks 2 (0.8), 0 (0.1, 0.1,
/// -0.2: the tie to the lowest), 2 at s = 2 (-0.8, 0.2, 0.6), 2 at s = 3 (-0.7, 0.3, 0.4), 1 at
/// s = 4 (-0.6, 0.4, 0.2: the last of component 1), then 2 alone. Equal sizes tie at every step
/// and go to the lowest component first. A component of size 0 is never drawn.
#[test]
fn issue33_orders_exhaustive_blend_with_three_components_ties_and_empty_ones() {
    assert_eq!(
        megatron_exhaustive_blending_indices(&[1, 1, 8]),
        (vec![2, 0, 2, 2, 1, 2, 2, 2, 2, 2], vec![0, 0, 1, 2, 0, 3, 4, 5, 6, 7])
    );
    assert_eq!(megatron_exhaustive_blending_indices(&[1, 1]), (vec![0, 1], vec![0, 0]));
    assert_eq!(megatron_exhaustive_blending_indices(&[1, 1, 1, 1]), (vec![0, 1, 2, 3], vec![0; 4]));
    assert_eq!(megatron_exhaustive_blending_indices(&[0, 2]), (vec![1, 1], vec![0, 1]));
    assert_eq!(megatron_exhaustive_blending_indices(&[2, 0, 1]), (vec![0, 2, 0], vec![0, 0, 1]));
    assert_eq!(megatron_exhaustive_blending_indices(&[0, 0]), (vec![], vec![]));
}

/// Issue 33, survivors of the `orders` mutation run in `run.rs`, `blend.rs` and `samples.rs`
/// (a run's start state, offset, blend flag and fingerprint; the blend's weights and
/// emptiness; the samples' `Debug`, fingerprint and end): two datasets blended 30 : 70, 10
/// samples, micro batches of 2 on 2 ranks (global batch 4). `consumed_samples` 6 starts at
/// step `6 div 4` = 1, sample `6 mod 4` = 2.
#[test]
fn issue33_orders_a_megatron_run_starts_where_its_consumed_samples_say() {
    use guideloom_interop::{megatron_samples, MegatronRun, MegatronRunOptions};
    let a = megatron(&sample("megatron/gpt2_text_document"));
    let b = megatron(&sample("megatron/other_text_document"));
    let c = GptConfig::new(4, 1234).split("1,0,0").num_samples(10);
    let weighted = [(Some(30.0), a.clone()), (Some(70.0), b.clone())];
    let open = |datasets: &[(Option<f64>, ForeignDataset)], consumed| {
        let run = MegatronRunOptions::new(2).shard(0, 2).consumed_samples(consumed);
        MegatronRun::open(datasets, &c, &run, ReadOptions::default()).unwrap()
    };
    for (consumed, next_batch, offset) in [(0, 0, 0), (3, 0, 3), (4, 1, 0), (6, 1, 2)] {
        let run = open(&weighted, consumed);
        assert_eq!(
            (run.state.next_batch, run.offset, run.blend),
            (next_batch, offset, true),
            "consumed {consumed}"
        );
        assert_eq!(run.loader.source().len(), 10 - offset, "consumed {consumed}");
    }
    let single = open(&[(Some(1.0), a.clone())], 0);
    assert!(!single.blend);
    let unweighted = open(&[(None, a.clone()), (None, b.clone())], 0);
    assert!(unweighted.blend);
    let prints = [open(&weighted, 0).fingerprint(), single.fingerprint(), unweighted.fingerprint()];
    assert!(prints[0] != prints[1] && prints[1] != prints[2] && prints[0] != prints[2], "{prints:?}");
    let e = megatron_samples(&[(Some(1.0), a.clone()), (None, b.clone())], &c, ReadOptions::default())
        .unwrap_err();
    assert!(
        matches!(&e, InteropError::InvalidConfig { field: "datasets", detail } if detail == "either every dataset has a weight or none has"),
        "{e}"
    );
    // The blend's normalised weights, its emptiness, the samples' Debug and end.
    let samples = megatron_samples(&weighted, &c, ReadOptions::default()).unwrap();
    let bi = samples.blend().unwrap();
    assert_eq!((bi.weights(), bi.is_empty()), (&[0.3, 0.7][..], false));
    assert_eq!(format!("{samples:?}"), "MegatronSamples { components: 2, samples: 10 }");
    assert!(matches!(samples.get(10), Err(LoaderError::IndexOutOfRange { index: 10, len: 10 })));
    assert_eq!(BlendIndex::unweighted(&[3, 2], None).unwrap().weights(), [0.6, 0.4]);
    assert_eq!(BlendIndex::unweighted(&[3, 2], Some(4)).unwrap().weights(), [0.6, 0.4]);
    // The train split's samples do not depend on the pad id, nor does their fingerprint.
    let one =
        |c: &GptConfig| MegatronSamples::open(&[(1.0, &a)], c, ReadOptions::default()).unwrap().fingerprint();
    assert_eq!(one(&c), one(&c.clone().pad_token_id(7)));
    let mut keep = c.clone();
    keep.drop_last_partial_validation = false;
    assert_eq!(one(&keep), one(&keep.clone().pad_token_id(7)), "train: nothing is padded, kept or not");
    let empty = BlendIndex::unweighted(&[3, 2], Some(0)).unwrap();
    assert_eq!((empty.len(), empty.is_empty()), (0, true));
}

/// Issue 33, survivor of the `orders` run in `mt19937.rs` (`Debug` -> nothing written): the
/// generator's `Debug` names its position in the 624-word state, which moves with each draw.
#[test]
fn issue33_orders_mt19937_debug_names_its_position() {
    let mut g = Mt19937::new(5).unwrap();
    let before = format!("{g:?}");
    g.next_u32();
    let after = format!("{g:?}");
    for text in [&before, &after] {
        assert!(text.starts_with("Mt19937 { index: ") && text.ends_with(", .. }"), "{text}");
    }
    assert_ne!(before, after);
}

/// `r` is `InvalidConfig` of `field` with exactly `detail`.
fn assert_config<T: std::fmt::Debug>(r: guideloom_interop::Result<T>, field: &str, detail: &str) {
    match r {
        Err(InteropError::InvalidConfig { field: f, detail: d }) if f == field && d == detail => {}
        other => panic!("expected InvalidConfig {{ field: {field:?}, detail: {detail:?} }}, got {other:?}"),
    }
}

/// `shuffle_index[range]` holds exactly the samples of `range` (a part shuffled on its own).
fn shuffles_only(ix: &GptIndex, range: std::ops::Range<u32>) -> bool {
    let mut part = ix.shuffle_index()[range.start as usize..range.end as usize].to_vec();
    part.sort_unstable();
    part == range.collect::<Vec<u32>>()
}

/// Issue 33 (mutants of `gpt.rs:194` and `196`: `num_samples_sans_final_epoch` and
/// `num_samples_per_epoch` of Megatron-Core's `_build_document_sample_shuffle_indices`):
/// the 80 % rule on both sides. Sequences of 5, 3, 4 and 4 tokens (16), `L` = 4, the extra
/// token: an epoch holds (16 - 1) div 4 = 3 samples, 80 % of it is 2; 8 or 9 samples take
/// 3 epochs ((8 * 4 + 1) / 16 rounded up), the first two hold (2 * 16 - 1) div 4 = 7, so
/// the last epoch is asked for 1 (separate: 1 < 2) or 2 (not: 2 < 2 fails). Separate, the
/// document index shuffles its first 2 epochs (8 entries) apart from the last 4, and the
/// shuffle index its first 7 of 11 samples apart from the last 4, for every seed tried.
#[test]
fn issue33_orders_gpt_the_separate_last_epoch_rule_on_both_sides() {
    let lengths = [5u32, 3, 4, 4];
    for seed in 0..8 {
        let config = |n: u64| GptConfig::new(4, seed).split("1,0,0").num_samples(n);
        let ix = GptIndex::build(&lengths, 0..4, &config(8)).unwrap();
        assert_eq!((ix.epochs(), ix.separate_final_epoch(), ix.len()), (3, true, 11), "seed {seed}");
        let mut last: Vec<u32> = ix.document_index()[8..].to_vec();
        last.sort_unstable();
        assert_eq!(last, [0, 1, 2, 3], "seed {seed}");
        assert!(
            shuffles_only(&ix, 0..7) && shuffles_only(&ix, 7..11),
            "seed {seed}: {:?}",
            ix.shuffle_index()
        );
        let joint = GptIndex::build(&lengths, 0..4, &config(9)).unwrap();
        assert_eq!(
            (joint.epochs(), joint.separate_final_epoch(), joint.len()),
            (3, false, 11),
            "seed {seed}"
        );
    }
}

/// Issue 33 (mutant of `gpt.rs:114`, `GptConfig::extra` -> 1): without the extra token a
/// sample is `L` tokens and the 16 tokens of 5, 3, 4 and 4 make 16 div 4 = 4 samples (with
/// it, 15 div 4 = 3), whose pieces cover the four sequences once each.
#[test]
fn issue33_orders_gpt_samples_without_the_extra_token() {
    let lengths = [5u32, 3, 4, 4];
    let c = GptConfig::new(4, 1234).split("1,0,0").add_extra_token(false);
    let ix = GptIndex::build(&lengths, 0..4, &c).unwrap();
    assert_eq!((ix.len(), ix.sample_tokens()), (4, 4));
    let mut covered = [0u64; 4];
    for k in 0..4 {
        let pieces = ix.pieces(k, &lengths).unwrap();
        assert_eq!(pieces.iter().map(|p| p.len).sum::<u64>(), 4, "sample {k}");
        for p in pieces {
            covered[p.sequence as usize] += p.len;
        }
    }
    assert_eq!(covered, [5, 3, 4, 4]);
    let with = GptIndex::build(&lengths, 0..4, &GptConfig::new(4, 1234).split("1,0,0")).unwrap();
    assert_eq!((with.len(), with.sample_tokens(), with.is_empty()), (3, 5, false));
    // Four sequences of 4 tokens: every sample ends at a sequence's end, so the next starts
    // at that end (its sample index entry is `[p, 4]`) and is exactly the next sequence, one
    // piece: no empty piece of the sequence before.
    let fours = [4u32; 4];
    let ix = GptIndex::build(&fours, 0..4, &c).unwrap();
    assert_eq!(ix.sample_index()[1..4], [[0, 4], [1, 4], [2, 4]]);
    for k in 0..4 {
        let j = ix.shuffle_index()[k as usize] as usize;
        let sequence = u64::from(ix.document_index()[j]);
        assert_eq!(
            ix.pieces(k, &fours).unwrap(),
            [SamplePiece { sequence, offset: 0, len: 4 }],
            "sample {k}"
        );
    }
    // One token and the extra one make no sample of 4: an empty index.
    let empty = GptIndex::build(&[1], 0..1, &GptConfig::new(4, 1234).split("1,0,0")).unwrap();
    assert_eq!((empty.len(), empty.is_empty(), empty.sample_index()), (0, true, &[[0u32, 0]][..]));
}

/// Issue 33 (mutant of `gpt.rs:174`, `||` -> `&&`): a range that ends past the sequences or
/// starts after its end is refused before it is sliced.
#[test]
fn issue33_orders_gpt_a_split_range_outside_the_sequences_is_refused() {
    let c = GptConfig::new(4, 1234);
    // A reversed range, as a caller's computed bounds can give (written through variables: the
    // literal `3..2` is what clippy's `reversed_empty_ranges` refuses).
    let (start, end) = (3, 2);
    assert_config(
        GptIndex::build(&[4, 3, 5, 2], start..end, &c),
        "split",
        "sequences 3..2 pass the 4 of the dataset",
    );
    assert_config(
        GptIndex::build(&[4, 3, 5, 2], 0..5, &c),
        "split",
        "sequences 0..5 pass the 4 of the dataset",
    );
    assert_eq!(GptIndex::build(&[4, 3, 5, 2], 2..4, &c).unwrap().document_index().len(), 2);
}

/// Issue 33 (mutants of `gpt.rs:205`, `226`, `229`): Megatron's 32-bit indices, refused
/// before anything of their size is allocated. A document index of exactly 2^32 - 1 entries
/// (65,537 one-token sequences, 65,535 epochs: 4,294,967,294 samples of `L` = 1) is
/// refused. One sequence of 2^32 - 1 tokens makes 2^32 - 2 samples, one more than the
/// shuffle index takes; one of 2^32 - 2 tokens makes 2^32 - 3, which the shuffle index
/// takes, and the sample index of 2^32 - 2 entries (8 bytes each) is then refused by the
/// 16 GiB index limit, named with its exact count.
#[test]
fn issue33_orders_gpt_the_32_bit_index_limits() {
    let ones = vec![1u32; 65_537];
    let c = GptConfig::new(1, 1234).split("1,0,0").num_samples(4_294_967_294);
    assert_config(
        GptIndex::build(&ones, 0..65_537, &c),
        "num_samples",
        "the document index would hold more than 4294967294 entries",
    );
    let one_epoch = GptConfig::new(1, 1234).split("1,0,0");
    assert_config(
        GptIndex::build(&[u32::MAX], 0..1, &one_epoch),
        "num_samples",
        "the shuffle index would hold more than 4294967293 entries",
    );
    match GptIndex::build(&[u32::MAX - 1], 0..1, &one_epoch) {
        Err(InteropError::IndexTooLarge { what: "sample index", count, bytes, .. }) => {
            assert_eq!((count, bytes), (4_294_967_294, 8 * 4_294_967_294))
        }
        other => panic!("expected IndexTooLarge for the sample index, got {other:?}"),
    }
}

/// Issue 33 (mutants of `gpt.rs:247`, the walk's end at the last document position,
/// `helpers.cpp` `build_sample_idx`: `doc_offset = sizes[...] - add_extra_token`): a kept
/// partial validation sample over 4, 3, 5 and 2 tokens (`L` = 4: 13 div 4 rounded up = 4
/// samples) ends its sample index at the last position of the document index, one token
/// before that document's end, so the partial sample is that document's last token and the
/// extra one: 2 tokens.
#[test]
fn issue33_orders_gpt_a_partial_validation_sample_ends_at_the_last_document() {
    let lengths = [4u32, 3, 5, 2];
    let mut c = GptConfig::new(4, 1234).split("0,1,0").which(MegatronSplit::Valid);
    c.drop_last_partial_validation = false;
    let ix = GptIndex::build(&lengths, 0..4, &c).unwrap();
    assert_eq!(ix.len(), 4);
    let last_document = ix.document_index()[3];
    assert_eq!(ix.sample_index()[4], [3, lengths[last_document as usize] - 1]);
    let k = ix.shuffle_index().iter().position(|&j| j == 3).unwrap() as u64;
    assert_eq!(ix.pieces(k, &lengths).unwrap().iter().map(|p| p.len).sum::<u64>(), 2);
}
