//! Issue 14: llm.c's sequential and shuffled batch orders and its checkpoints
//! (`src/orders/llmc.rs`), reproduced exactly: the expected batches are llm.c's own C
//! `DataLoader`'s for the same shards (`loader/tests/data/llmc_order`, made by its
//! `generate.sh`).

use std::path::PathBuf;

use guideloom_formats::IntTokenFormat;
use guideloom_interop::{
    llmc_resume_state, llmc_shuffled_resume_state, llmc_shuffled_windows, llmc_windows, ForeignDataset,
    ForeignFormat, ForeignOptions, InteropError, LlmcCheckpoint, LlmcRun, LlmcRunOptions,
    LLMC_MAX_SHUFFLED_WINDOWS,
};
use guideloom_loader::{Loader, Spans};
use guideloom_storage::ReadOptions;

use crate::common::{llmc_order, sample};

/// AC-LLMC-03: llm.c's C loader over the two gpt-2 shards under their real names
/// (`tiny_train_000001.bin`, `tiny_val_000000.bin`), B = 1, T = 2, one process, no shuffle:
/// `glob()` sorts the names, so the train shard comes first (the bytes of `t` < `v`), three
/// windows per shard, then it wraps to the first shard. The expected batches are llm.c's own
/// (`loader/tests/data/llmc_order/tiny_glob.txt`, made by `generate.sh` with llm.c's
/// `llmc/dataloader.h`); the notes' listing of this case had the val shard first, which is
/// the order of a glob over names that sort val first, not of these names.
#[test]
fn llmc_sequential_order_matches_llmc_dataloader() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["tiny_val_000000.bin", "tiny_train_000001.bin"] {
        std::fs::copy(sample(&format!("llmc/{name}")), dir.path().join(name)).unwrap();
    }
    let options = ForeignOptions::new().format(ForeignFormat::Llmc);
    let data = ForeignDataset::open(dir.path().join("*.bin"), &options).unwrap();
    let reader = data.reader(IntTokenFormat::new(data.dtype()).unwrap(), ReadOptions::default()).unwrap();
    let spans = Spans::new(reader, llmc_windows(&data, 1, 2, 1).unwrap()).unwrap();
    let loader = Loader::builder(spans).batch_size(1).epochs(2).workers(0).build().unwrap();
    let got: Vec<Vec<i64>> = loader.iter().map(|b| b.unwrap().data.remove(0)).collect();
    let first: Vec<Vec<i64>> = vec![
        vec![50256, 301, 302],
        vec![302, 303, 304],
        vec![304, 50256, 401],
        vec![50256, 101, 102],
        vec![102, 103, 50256],
        vec![50256, 201, 202],
    ];
    assert_eq!(got[..6], first[..]);
    assert_eq!(got[6..], first[..], "wraps to the first shard");
    let measured = llmc_cases("tiny_glob.txt");
    let measured: Vec<Vec<i64>> = measured[0].batches.iter().map(|x| x.2.clone()).collect();
    assert_eq!(measured[..], got[..8], "llm.c's own batches");
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
    assert_llmc_config(llmc_windows(&data, 0, 2, 1), "B = 0, T = 2, processes = 1: ");
    // llm.c stopped at shard 1, batch position 1: the rest, then the wrap.
    let state = llmc_resume_state(&loader.initial_state(), &data, (1, 2, 1), 1, 1).unwrap();
    let rest: Vec<Vec<i64>> = loader.iter_from(&state).unwrap().map(|b| b.unwrap().data.remove(0)).collect();
    assert_eq!(rest[..], got[4..]);
    assert_eq!(rest[2], [50256, 301, 302]);
    let initial = loader.initial_state();
    assert_llmc_config(
        llmc_resume_state(&initial, &data, (1, 2, 1), 1, 4),
        "batch position 4 of shard 1, which holds 3",
    );
    assert_llmc_config(llmc_resume_state(&initial, &data, (1, 2, 1), 2, 0), "shard 2 of 2");
    assert_llmc_config(
        llmc_resume_state(&initial, &data, (1, 2, 2), 0, 0),
        "the loader's global batch is 1; ",
    );
}

/// One configuration llm.c's own `DataLoader` ran (`loader/tests/data/llmc_order/expected.txt`,
/// made by `generate.sh` from llm.c's `llmc/dataloader.h`): `(B, T, rank, processes,
/// shuffle)` and per batch `(current_shard_idx, current_sample_idx, tokens)` after
/// `dataloader_next_batch`.
struct LlmcCase {
    config: (u64, u64, u64, u64, bool),
    batches: Vec<(u64, u64, Vec<i64>)>,
}

/// `r` is the llm.c order's configuration error (field `llmc`) whose detail starts with
/// `detail` (issue 33: refusals asserted by variant and field, not by `is_err`).
fn assert_llmc_config<T: std::fmt::Debug>(r: guideloom_interop::Result<T>, detail: &str) {
    match r {
        Err(InteropError::InvalidConfig { field: "llmc", detail: d }) if d.starts_with(detail) => {}
        other => panic!("expected InvalidConfig {{ field: \"llmc\", detail: {detail:?}.. }}, got {other:?}"),
    }
}

/// `r` is an llm.c checkpoint error whose detail starts with `detail`.
fn assert_checkpoint<T: std::fmt::Debug>(r: guideloom_interop::Result<T>, detail: &str) {
    match r {
        Err(InteropError::ForeignCheckpoint { what: "llm.c checkpoint", detail: d })
            if d.starts_with(detail) => {}
        other => panic!("expected ForeignCheckpoint {{ detail: {detail:?}.. }}, got {other:?}"),
    }
}

/// An llm.c dataset of one shard (`x_train_000001.bin` under `dir`) of `tokens` gpt-2
/// tokens `0, 1, ..`: llm.c's 1024-byte header (magic 20240520, version 1, the token count)
/// and the tokens as little-endian u16.
fn llmc_shard(dir: &std::path::Path, tokens: u16) -> ForeignDataset {
    let mut shard = vec![0u8; 1024];
    for (i, v) in [20240520u32, 1, u32::from(tokens)].into_iter().enumerate() {
        shard[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes());
    }
    shard.extend((0..tokens).flat_map(|t| t.to_le_bytes()));
    let path = dir.join("x_train_000001.bin");
    std::fs::write(&path, shard).unwrap();
    ForeignDataset::open(&path, &ForeignOptions::new().format(ForeignFormat::Llmc)).unwrap()
}

fn llmc_order_dir() -> PathBuf {
    llmc_order("")
}

fn llmc_cases(file: &str) -> Vec<LlmcCase> {
    let text = std::fs::read_to_string(llmc_order_dir().join(file)).unwrap();
    let mut cases: Vec<LlmcCase> = Vec::new();
    for line in text.lines() {
        let w: Vec<i64> = line.split_whitespace().filter_map(|w| w.parse().ok()).collect();
        if line.starts_with("case") {
            let u = |i: usize| w[i] as u64;
            cases.push(LlmcCase { config: (u(0), u(1), u(2), u(3), w[4] != 0), batches: Vec::new() });
        } else {
            cases.last_mut().unwrap().batches.push((w[0] as u64, w[1] as u64, w[2..].to_vec()));
        }
    }
    cases
}

fn llmc_order_data() -> ForeignDataset {
    let options = ForeignOptions::new().format(ForeignFormat::Llmc);
    ForeignDataset::open(llmc_order_dir().join("order_*.bin"), &options).unwrap()
}

/// The records a loader over `windows` (batch 1, one rank or `processes` ranks) gives rank
/// `rank`, for `epochs` epochs.
fn llmc_batches(
    data: &ForeignDataset,
    windows: Vec<guideloom_storage::Window>,
    (rank, processes, epochs): (u64, u64, u64),
) -> (Loader<Spans<guideloom_storage::StreamReader<IntTokenFormat>>>, Vec<Vec<i64>>) {
    let reader = data.reader(IntTokenFormat::new(data.dtype()).unwrap(), ReadOptions::default()).unwrap();
    let loader = Loader::builder(Spans::new(reader, windows).unwrap())
        .batch_size(1)
        .shard(rank, processes)
        .epochs(epochs)
        .workers(0)
        .build()
        .unwrap();
    let got = loader.iter().map(|b| b.unwrap().data.remove(0)).collect();
    (loader, got)
}

/// llm.c's shuffled and sequential orders over four shards of 41, 29, 53 and 36 tokens, for
/// one and two processes, over three or more epochs: every batch's tokens equal llm.c's, and
/// the position llm.c holds after each batch (what its checkpoint stores) resumes onto the
/// next one.
#[test]
fn llmc_orders_match_llmc_dataloader_and_positions_resume() {
    let data = llmc_order_data();
    let cases = llmc_cases("expected.txt");
    assert_eq!(cases.len(), 6);
    for case in &cases {
        let (b, t, rank, p, shuffle) = case.config;
        let per_epoch: u64 = data.files().iter().map(|f| (f.elements - 1) / (b * t * p)).sum();
        let n = case.batches.len() as u64;
        let epochs = n.div_ceil(per_epoch);
        let (loader, got) = if shuffle {
            let windows = llmc_shuffled_windows(&data, (b, t, p), rank, epochs).unwrap();
            llmc_batches(&data, windows, (0, 1, 1))
        } else {
            llmc_batches(&data, llmc_windows(&data, b, t, p).unwrap(), (rank, p, epochs))
        };
        let want: Vec<Vec<i64>> = case.batches.iter().map(|x| x.2.clone()).collect();
        assert_eq!(got[..n as usize], want[..], "case {:?}", case.config);
        for (i, &(shard, sample, _)) in case.batches.iter().enumerate() {
            let i = i as u64;
            let state = if shuffle {
                llmc_shuffled_resume_state(
                    &loader.initial_state(),
                    &data,
                    (b, t, p),
                    rank,
                    (i / per_epoch, shard, sample),
                )
                .unwrap()
            } else {
                llmc_resume_state(&loader.initial_state(), &data, (b, t, p), shard, sample).unwrap()
            };
            let want_next = if shuffle { i + 1 } else { (i % per_epoch) + 1 };
            assert_eq!(state.next_batch, want_next, "case {:?}, after batch {i}", case.config);
        }
    }
    // The shuffled orders of the two ranks differ (each seeds 42 + rank), and neither is the
    // sequential one.
    let r0 = llmc_shuffled_windows(&data, (1, 4, 2), 0, 1).unwrap();
    let r1 = llmc_shuffled_windows(&data, (1, 4, 2), 1, 1).unwrap();
    assert_ne!(
        r0.iter().map(|w| w.offset + 4).collect::<Vec<_>>(),
        r1.iter().map(|w| w.offset).collect::<Vec<_>>()
    );
    assert_llmc_config(llmc_shuffled_windows(&data, (1, 4, 2), 2, 1), "process rank 2 of 2 processes");
    assert_llmc_config(llmc_shuffled_windows(&data, (0, 4, 2), 0, 1), "B = 0, T = 4, processes = 2: ");
}

/// llm.c's checkpoints (`state_*.bin` in `train_gpt2.cu`'s layout, written by the harness
/// from llm.c's `DataLoader` after a known number of batches): the header's fields, the
/// shuffled run's epoch found from the tail, and the resume state at the next batch.
#[test]
fn llmc_checkpoints_resume_at_the_next_batch() {
    let data = llmc_order_data();
    let cases = llmc_cases("expected.txt");
    // (file, case, batches before the checkpoint)
    for (file, case, after) in [
        ("state_shuffled_r0.bin", 2usize, 30u64),
        ("state_shuffled_p2_r0.bin", 3, 11),
        ("state_shuffled_p2_r1.bin", 4, 25),
        ("state_sequential_p2_r1.bin", 5, 7),
    ] {
        let bytes = std::fs::read(llmc_order_dir().join(file)).unwrap();
        let c = LlmcCheckpoint::parse_header(&bytes).unwrap();
        let (b, t, rank, p, shuffle) = cases[case].config;
        let (shard, sample, _) = cases[case].batches[after as usize - 1];
        assert_eq!(
            (c.processes, c.rank, c.shuffle, c.step, c.shard, c.sample),
            (p, rank, shuffle, after, shard, sample),
            "{file}"
        );
        let windows = if shuffle {
            llmc_shuffled_windows(&data, (b, t, p), rank, 4).unwrap()
        } else {
            llmc_windows(&data, b, t, p).unwrap()
        };
        let (loader, _) = llmc_batches(&data, windows, if shuffle { (0, 1, 1) } else { (rank, p, 4) });
        let state = if shuffle {
            let tail_len = c.tail_bytes(&data, (b, t)).unwrap() as usize;
            let tail = &bytes[bytes.len().saturating_sub(tail_len)..];
            let epoch = c.epoch(tail, &data, (b, t), 10).unwrap();
            let per_epoch: u64 = data.files().iter().map(|f| (f.elements - 1) / (b * t * p)).sum();
            assert_eq!(epoch, (after - 1) / per_epoch, "{file}");
            // Another rank's generator, or too few epochs tried, finds none.
            let mut other = c;
            other.rank = 1 - rank;
            assert!(matches!(
                other.epoch(tail, &data, (b, t), 10),
                Err(InteropError::ForeignCheckpoint { .. })
            ));
            assert_checkpoint(c.epoch(tail, &data, (b, t), epoch), &format!("no epoch below {epoch} "));
            llmc_shuffled_resume_state(
                &loader.initial_state(),
                &data,
                (b, t, p),
                rank,
                (epoch, c.shard, c.sample),
            )
            .unwrap()
        } else {
            assert_checkpoint(c.epoch(&bytes, &data, (b, t), 10), "not a shuffled run: ");
            llmc_resume_state(&loader.initial_state(), &data, (b, t, p), c.shard, c.sample).unwrap()
        };
        let rest: Vec<Vec<i64>> =
            loader.iter_from(&state).unwrap().take(5).map(|b| b.unwrap().data.remove(0)).collect();
        let want: Vec<Vec<i64>> =
            cases[case].batches[after as usize..after as usize + 5].iter().map(|x| x.2.clone()).collect();
        assert_eq!(rest, want, "{file}");
    }
    let mut bad = std::fs::read(llmc_order_dir().join("state_shuffled_r0.bin")).unwrap();
    assert_checkpoint(LlmcCheckpoint::parse_header(&bad[..1000]), "1000 bytes, need a 1024-byte header");
    bad[0] ^= 1;
    assert_checkpoint(LlmcCheckpoint::parse_header(&bad), "magic 20240526 (expected 20240527)");
}

/// Issue 32 class 6: the epoch search of a shuffled llm.c checkpoint ran `max_epochs`
/// epochs however cheap each was: over a shard that holds less than one batch (nothing is
/// drawn, every epoch equals the first), a checkpoint of another run searched without end
/// for `--epochs` of 2^64 - 1. The search is now bounded: it answers at once.
#[test]
fn issue32_llmc_epoch_search_is_bounded_when_the_shard_holds_less_than_one_batch() {
    let dir = tempfile::tempdir().unwrap();
    let data = llmc_shard(dir.path(), 9);
    let bytes = std::fs::read(llmc_order_dir().join("state_shuffled_r0.bin")).unwrap();
    let c = LlmcCheckpoint::parse_header(&bytes).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(c.epoch(&bytes, &data, (4, 4), u64::MAX));
    });
    let r = rx.recv_timeout(std::time::Duration::from_secs(20)).expect("the epoch search is bounded");
    match r {
        Err(InteropError::ForeignCheckpoint { what: "llm.c checkpoint", detail }) => {
            assert!(detail.starts_with("no epoch below 1 of rank 0 over these 1 shards"), "{detail}")
        }
        other => panic!("expected ForeignCheckpoint (no epoch below 1), got {other:?}"),
    }
}

/// `r` is `InvalidConfig` of `field` with exactly `detail`.
fn assert_config<T: std::fmt::Debug>(r: guideloom_interop::Result<T>, field: &str, detail: &str) {
    match r {
        Err(InteropError::InvalidConfig { field: f, detail: d }) if f == field && d == detail => {}
        other => panic!("expected InvalidConfig {{ field: {field:?}, detail: {detail:?} }}, got {other:?}"),
    }
}

/// Issue 33 (mutants of `llmc_run.rs:16`, `125`, `126`): a shuffled llm.c run lists every
/// epoch's windows, at most 2^27 of them, counted from the shards' lengths before any is
/// listed. One shard of 3 tokens holds one batch of B = 2, T = 1 ((3 - 1) / 2), so 2^27
/// epochs are exactly the limit: the run passes it and is refused only by the next check
/// (rank 1 of 1 process, which keeps the test from listing 2^27 windows); 2^27 + 1 epochs
/// are refused by the limit itself.
#[test]
fn issue33_orders_a_shuffled_llmc_run_lists_at_most_2_pow_27_windows() {
    assert_eq!(LLMC_MAX_SHUFFLED_WINDOWS, 134_217_728);
    let dir = tempfile::tempdir().unwrap();
    let data = llmc_shard(dir.path(), 3);
    let open = |epochs: u64, rank: u64| {
        let run = LlmcRunOptions::new(2, 1).shard(rank, 1).epochs(epochs).shuffle(true);
        LlmcRun::open(&data, &run, ReadOptions::default())
    };
    assert_config(open(1 << 27, 1), "llmc", "process rank 1 of 1 processes");
    assert_config(
        open((1 << 27) + 1, 1),
        "epochs",
        "a shuffled llm.c run lists every epoch's windows: 134217729 epochs of about 1 are more \
         than 134217728; ask for fewer epochs",
    );
    // Sequential, the windows are listed once whatever the epochs.
    let sequential = LlmcRunOptions::new(2, 1).epochs((1 << 27) + 1);
    let run = LlmcRun::open(&data, &sequential, ReadOptions::default()).unwrap();
    assert_eq!((run.shuffle, run.per_epoch), (false, u64::MAX));
}

/// Issue 33 (mutants of `llmc_run.rs:143`, `159`, `160`): a shuffled run of 3 epochs over
/// llm.c's order shards (41, 29, 53 and 36 tokens; B = 2, T = 2: 10 + 7 + 13 + 8 = 38
/// batches an epoch) is one loader epoch of 114 batches, and `llmc_epoch` is the batch
/// number divided by 38 at each epoch's first and last batch; its first 38 batches are a
/// one-epoch run's. Sequential, `llmc_epoch` is the loader's epoch.
#[test]
fn issue33_orders_a_shuffled_llmc_run_numbers_its_epochs() {
    let data = llmc_order_data();
    let open = |run: &LlmcRunOptions| LlmcRun::open(&data, run, ReadOptions::default()).unwrap();
    let batches =
        |run: &LlmcRun| -> Vec<Vec<i64>> { run.loader.iter().map(|b| b.unwrap().data.remove(0)).collect() };
    let run = open(&LlmcRunOptions::new(2, 2).epochs(3).shuffle(true));
    assert_eq!((run.shuffle, run.per_epoch), (true, 38));
    let got = batches(&run);
    assert_eq!(got.len(), 114);
    for (number, epoch) in [(0, 0), (37, 0), (38, 1), (75, 1), (76, 2), (113, 2)] {
        assert_eq!(run.llmc_epoch(number, 0), epoch, "batch {number}");
        assert_eq!(run.llmc_epoch(number, 7), epoch, "batch {number}, loader epoch 7");
    }
    let one = open(&LlmcRunOptions::new(2, 2).shuffle(true));
    assert_eq!(one.per_epoch, 38);
    assert_eq!(batches(&one), got[..38]);
    let sequential = open(&LlmcRunOptions::new(2, 2).epochs(3));
    for (number, epoch) in [(0, 0), (40, 1), (113, 2), (5, 9)] {
        assert_eq!(sequential.llmc_epoch(number, epoch), epoch);
    }
}

/// Issue 33 (mutants of `llmc_run.rs:182`, `190`): `position_state` takes a shuffled run's
/// epochs `0..epochs` and refuses `epochs`; a sequential run's position takes epoch 0 only.
/// The states it gives are those of `llmc_shuffled_resume_state` and `llmc_resume_state`.
#[test]
fn issue33_orders_an_llmc_position_state_checks_its_epoch() {
    let data = llmc_order_data();
    let shuffled =
        LlmcRun::open(&data, &LlmcRunOptions::new(2, 2).epochs(3).shuffle(true), ReadOptions::default())
            .unwrap();
    let initial = shuffled.loader.initial_state();
    for epoch in [0, 2] {
        let want = llmc_shuffled_resume_state(&initial, &data, (2, 2, 1), 0, (epoch, 1, 3)).unwrap();
        assert_eq!(shuffled.position_state(&data, (epoch, 1, 3)).unwrap(), want, "epoch {epoch}");
    }
    assert_eq!(shuffled.position_state(&data, (2, 0, 0)).unwrap().next_batch, 2 * 38);
    assert_config(
        shuffled.position_state(&data, (3, 1, 3)),
        "epoch",
        "epoch 3 is not one of the run's 3 epochs",
    );
    let sequential =
        LlmcRun::open(&data, &LlmcRunOptions::new(2, 2).epochs(3), ReadOptions::default()).unwrap();
    let want = llmc_resume_state(&sequential.loader.initial_state(), &data, (2, 2, 1), 1, 3).unwrap();
    assert_eq!(sequential.position_state(&data, (0, 1, 3)).unwrap(), want);
    assert_config(
        sequential.position_state(&data, (1, 1, 3)),
        "epoch",
        "a sequential llm.c run's position has no epoch",
    );
}

/// Issue 33 (mutant of `llmc.rs:98`, `> 0` -> `>= 0`): llm.c's step `B * T * P` is checked
/// before any window is listed: a zero factor (B, T or the process count) and a product past
/// u64 are refused with the configuration, and the smallest run (1, 4, 1) on 9 tokens lists
/// llm.c's windows of `B * T + 1` tokens at `0` and `4` ((9 - 1) / 4 = 2 steps).
#[test]
fn issue33_orders_llmc_a_zero_or_overflowing_step_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data = llmc_shard(dir.path(), 9);
    for (b, t, p) in [(1, 4, 0), (0, 4, 1), (1, 0, 1), (1 << 32, 1 << 32, 1), (1 << 32, 1 << 31, 2)] {
        assert_config(
            llmc_windows(&data, b, t, p),
            "llmc",
            &format!("B = {b}, T = {t}, processes = {p}: each must be > 0 and B*T*P fit u64"),
        );
    }
    assert_eq!(
        llmc_windows(&data, 1, 4, 1).unwrap(),
        [guideloom_storage::Window::new(0, 5), guideloom_storage::Window::new(4, 5)]
    );
}

/// The int32 `value` at int `i` of llm.c checkpoint `bytes`' header.
fn set_int(bytes: &mut [u8], i: usize, value: i32) {
    bytes[4 * i..4 * i + 4].copy_from_slice(&value.to_le_bytes());
}

/// Issue 33 (mutants of `parse_header`'s length check and rank check): a header of exactly
/// 1024 bytes parses, 1023 do not; the rank must be in `0..processes` (rank -1, rank 2 of 2
/// and 0 processes refused; rank 1 of 2 and 0 of 1 accepted).
#[test]
fn issue33_orders_llmc_a_checkpoint_header_at_its_boundaries() {
    let bytes = std::fs::read(llmc_order_dir().join("state_shuffled_r0.bin")).unwrap();
    let whole = LlmcCheckpoint::parse_header(&bytes).unwrap();
    assert_eq!(LlmcCheckpoint::parse_header(&bytes[..1024]).unwrap(), whole);
    assert_checkpoint(LlmcCheckpoint::parse_header(&bytes[..1023]), "1023 bytes, need a 1024-byte header");
    let mut header = bytes[..1024].to_vec();
    for (processes, rank, ok) in
        [(1, -1, false), (2, -1, false), (2, 2, false), (0, 0, false), (2, 1, true), (1, 0, true)]
    {
        set_int(&mut header, 2, processes);
        set_int(&mut header, 3, rank);
        let r = LlmcCheckpoint::parse_header(&header);
        if ok {
            let c = r.unwrap();
            assert_eq!(
                (c.processes, c.rank, c.step, c.shard, c.sample),
                (processes as u64, rank as u64, whole.step, whole.shard, whole.sample)
            );
        } else {
            assert_checkpoint(r, &format!("rank {rank} of {processes} processes"));
        }
    }
}

/// Issue 33 (mutants of `tail_bytes`' sum): the shuffle tail's most bytes are
/// `8 + 4 n` (shard count, order) `+ 8 + 4 k` (batch count, permutation of the largest
/// shard's k batches) `+ 2520` (`mt19937_state`: 8 + 4 + 4 + 624 x 4 + 2 x 4).
#[test]
fn issue33_orders_llmc_the_tail_bytes_are_llmc_s_layout() {
    let dir = tempfile::tempdir().unwrap();
    let data = llmc_shard(dir.path(), 9);
    let c =
        LlmcCheckpoint::parse_header(&std::fs::read(llmc_order_dir().join("state_shuffled_r0.bin")).unwrap())
            .unwrap();
    // (9 - 1) / (1 * 2 * P) batches: 4 for one process, 2 for two.
    assert_eq!(c.tail_bytes(&data, (1, 2)).unwrap(), 8 + 4 + 8 + 4 * 4 + 2520);
    let mut two = c;
    two.processes = 2;
    assert_eq!(two.tail_bytes(&data, (1, 2)).unwrap(), 8 + 4 + 8 + 4 * 2 + 2520);
}

/// Issue 33 (mutants of `tail_matches`' comparisons): an llm.c checkpoint's epoch is found only
/// when the batch permutation, the generator's place and every state word are llm.c's: the
/// real checkpoint with its last batch position changed, its `next_` set to 0 (its generator
/// is mid-block: `next_` is neither 0 nor 624) or one state word changed matches no epoch.
#[test]
fn issue33_orders_llmc_a_changed_shuffle_tail_matches_no_epoch() {
    let data = llmc_order_data();
    let bytes = std::fs::read(llmc_order_dir().join("state_shuffled_r0.bin")).unwrap();
    let c = LlmcCheckpoint::parse_header(&bytes).unwrap();
    let case = &llmc_cases("expected.txt")[2];
    let (b, t, _, p, _) = case.config;
    // The unchanged file: 30 batches read (llmc_checkpoints_resume_at_the_next_batch).
    let per_epoch: u64 = data.files().iter().map(|f| (f.elements - 1) / (b * t * p)).sum();
    assert_eq!(c.epoch(&bytes, &data, (b, t), 10).unwrap(), 29 / per_epoch);
    let rng = bytes.len() - 2520;
    let next = u32::from_le_bytes(bytes[rng + 12..rng + 16].try_into().unwrap());
    assert!(next != 0 && next != 624, "next_ {next}");
    let changes: [(&str, usize, u32); 3] = [
        ("the last batch position", rng - 4, 1),
        ("next_ (to 0)", rng + 12, next),
        ("state word 0", rng + 16, 1),
    ];
    for (what, at, xor) in changes {
        let mut changed = bytes.clone();
        let v = u32::from_le_bytes(changed[at..at + 4].try_into().unwrap()) ^ xor;
        changed[at..at + 4].copy_from_slice(&v.to_le_bytes());
        match c.epoch(&changed, &data, (b, t), 10) {
            Err(InteropError::ForeignCheckpoint { detail, .. })
                if detail.starts_with("no epoch below 10 of rank 0 ") => {}
            other => panic!("{what} changed: expected no epoch, got {other:?}"),
        }
    }
}

/// Issue 33 (mutant of `tail_matches`' `next == 0`): a run whose generator drew nothing (one
/// shard of one batch: a permutation of one draws nothing) stores llm.c's fresh
/// `mt19937_state` (`manual_seed(42)`: `left_` 1, `next_` 0, the state words of
/// `init_genrand(42)`, computed here from the published recurrence
/// `mt[i] = 1812433253 * (mt[i-1] ^ (mt[i-1] >> 30)) + i`); its epoch is 0. With `next_` 1 it
/// matches none.
#[test]
fn issue33_orders_llmc_a_checkpoint_whose_generator_drew_nothing_is_epoch_0() {
    let dir = tempfile::tempdir().unwrap();
    // B = T = 4: 17 tokens are one batch.
    let data = llmc_shard(dir.path(), 17);
    let mut header = vec![0u8; 1024];
    for (i, v) in [(0, 20240527), (1, 1), (2, 1), (3, 0), (5, 1), (10, 1)] {
        set_int(&mut header, i, v);
    }
    header[128..136].copy_from_slice(&1u64.to_le_bytes());
    let c = LlmcCheckpoint::parse_header(&header).unwrap();
    let mut words = [0u32; 624];
    words[0] = 42;
    for i in 1..624 {
        words[i] = 1_812_433_253u32.wrapping_mul(words[i - 1] ^ (words[i - 1] >> 30)).wrapping_add(i as u32);
    }
    let tail = |next: u32| {
        let mut t = header.clone();
        t.extend(1u64.to_le_bytes()); // one shard
        t.extend(0u32.to_le_bytes()); // its order
        t.extend(1u64.to_le_bytes()); // one batch
        t.extend(0u32.to_le_bytes()); // its permutation
        t.extend(42u64.to_le_bytes()); // seed_
        t.extend(1i32.to_le_bytes()); // left_
        t.extend(next.to_le_bytes()); // next_
        t.extend(words.iter().flat_map(|w| w.to_le_bytes()));
        t.extend([0u32, 0x9908_b0df].iter().flat_map(|m| m.to_le_bytes()));
        t
    };
    assert_eq!(c.epoch(&tail(0), &data, (4, 4), 10).unwrap(), 0);
    assert_checkpoint(c.epoch(&tail(1), &data, (4, 4), 10), "no epoch below 1 of rank 0 ");
}
