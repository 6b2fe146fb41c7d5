//! Issue 14: Megatron-Core's and llm.c's sample orders, reproduced exactly. The expected
//! values are those megatron-core 0.16.1 (`GPTDataset`, `BlendedDataset`, `helpers_cpp`),
//! NumPy's `RandomState` and llm.c's own C `DataLoader` produced for the same inputs; the
//! cached `.npy` indices under `storage/tests/data/interop/megatron/cache` are megatron-core's
//! own files for the two `GPTDataset` cases.

use std::path::{Path, PathBuf};

use guideloom_formats::IntTokenFormat;
use guideloom_loader::{
    llmc_resume_state, llmc_windows, megatron_blending_indices, megatron_resume_state, megatron_split_ranges,
    BlendIndex, DataSource, GptConfig, GptIndex, Loader, LoaderError, MegatronSamples, MegatronSplit,
    Mt19937, Spans,
};
use guideloom_storage::foreign::{ForeignDataset, ForeignFormat, ForeignOptions};
use guideloom_storage::ReadOptions;

fn sample(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../storage/tests/data/interop").join(rel)
}

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
    assert!(matches!(Mt19937::new(1 << 32), Err(LoaderError::InvalidSeed { seed: 4_294_967_296 })));
    let c = GptConfig::new(4, u64::MAX);
    assert!(matches!(GptIndex::build(&[4, 3], 0..2, &c), Err(LoaderError::InvalidSeed { .. })));
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
        Err(LoaderError::EmptySplit { split: "valid" })
    ));
    assert!(matches!(
        megatron_split_ranges("a,b", 7),
        Err(LoaderError::InvalidConfig { field: "split", .. })
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
            Err(LoaderError::CacheMismatch { array: "document_index", entry: 0, cached: 2, computed: 0 })
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
            matches!(err, Err(LoaderError::ElasticResume { consumed, global_batch }) if consumed == g + 1 && global_batch == g)
        );
    }
}

fn samples_of_full(source: &MegatronSamples) -> Vec<guideloom_loader::MegatronSample> {
    source.get_many(&(0..source.len()).collect::<Vec<_>>()).unwrap()
}

/// AC-LLMC-03: llm.c's C loader over the two gpt-2 shards (shard 0 = the val file, shard 1
/// the train file, as its glob listed them), B = 1, T = 2, one process, no shuffle: three
/// windows per shard, then it wraps to the first shard.
#[test]
fn llmc_sequential_order_matches_llmc_dataloader() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(sample("llmc/tiny_val_000000.bin"), dir.path().join("tiny_000000.bin")).unwrap();
    std::fs::copy(sample("llmc/tiny_train_000001.bin"), dir.path().join("tiny_000001.bin")).unwrap();
    let options = ForeignOptions::new().format(ForeignFormat::Llmc);
    let data = ForeignDataset::open(dir.path().join("tiny_*.bin"), &options).unwrap();
    let reader = data.reader(IntTokenFormat::new(data.dtype()).unwrap(), ReadOptions::default()).unwrap();
    let spans = Spans::new(reader, llmc_windows(&data, 1, 2, 1).unwrap()).unwrap();
    let loader = Loader::builder(spans).batch_size(1).epochs(2).workers(0).build().unwrap();
    let got: Vec<Vec<i64>> = loader.iter().map(|b| b.unwrap().data.remove(0)).collect();
    let first: Vec<Vec<i64>> = vec![
        vec![50256, 101, 102],
        vec![102, 103, 50256],
        vec![50256, 201, 202],
        vec![50256, 301, 302],
        vec![302, 303, 304],
        vec![304, 50256, 401],
    ];
    assert_eq!(got[..6], first[..]);
    assert_eq!(got[6..], first[..], "wraps to the first shard");
    // Two processes: each step hands rank r the window at idx * 2 * B * T + r * B * T.
    assert_eq!(
        llmc_windows(&data, 1, 2, 2).unwrap(),
        [
            guideloom_storage::Window::new(0, 3),
            guideloom_storage::Window::new(2, 3),
            guideloom_storage::Window::new(7, 3),
            guideloom_storage::Window::new(9, 3),
        ]
    );
    assert!(llmc_windows(&data, 0, 2, 1).is_err());
    // llm.c stopped at shard 1, batch position 1: the rest, then the wrap.
    let state = llmc_resume_state(&loader.initial_state(), &data, (1, 2, 1), 1, 1).unwrap();
    let rest: Vec<Vec<i64>> = loader.iter_from(&state).unwrap().map(|b| b.unwrap().data.remove(0)).collect();
    assert_eq!(rest[..], got[4..]);
    assert_eq!(rest[2], [50256, 101, 102]);
    assert!(llmc_resume_state(&loader.initial_state(), &data, (1, 2, 1), 1, 3).is_err());
    assert!(llmc_resume_state(&loader.initial_state(), &data, (1, 2, 1), 2, 0).is_err());
    assert!(llmc_resume_state(&loader.initial_state(), &data, (1, 2, 2), 0, 0).is_err());
}

/// The validation split with `drop_last_partial_validation_sequence` off keeps a partial last
/// sample (`ceil(float32(E*T - x) / L)` samples): 13 tokens after the extra one make three
/// samples of 4 and one of 1, so their lengths (with the shared token) are 5, 5, 5 and 2.
#[test]
fn validation_keeps_the_partial_last_sample_when_asked() {
    let data = megatron(&sample("megatron/gpt2_text_document"));
    let mut c = GptConfig::new(4, 1234).split("0,1,0").which(MegatronSplit::Valid);
    let dropped = MegatronSamples::open(&[(1.0, &data)], &c, ReadOptions::default()).unwrap();
    assert_eq!(dropped.len(), 3);
    assert!(samples_of(&dropped).iter().all(|s| s.len() == 5));
    c.drop_last_partial_validation = false;
    let kept = MegatronSamples::open(&[(1.0, &data)], &c, ReadOptions::default()).unwrap();
    let mut lens: Vec<usize> = samples_of(&kept).iter().map(Vec::len).collect();
    lens.sort_unstable();
    assert_eq!(lens, [2, 5, 5, 5]);
}
