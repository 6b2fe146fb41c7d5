//! guideloom-candle against candle-core 0.11 on the CPU: zero copy, the language-model shift,
//! dtypes, shape errors, determinism, packed batches and resuming.

use std::path::Path;

use candle_core::{DType, Device, Storage, Tensor, WithDType};
use guideloom_candle::{lm_windows, CandleBatches, Error, IntoTensors, LmBatch, LmCollate, LmLoader};
use guideloom_formats::TokenFormat;
use guideloom_loader::pack::{PackCollate, PackConfig, PackStrategy, Packed};
use guideloom_loader::{Collate, DataSource, Loader, LoaderError, State, TokenWindows, VecSource};
use guideloom_storage::{ReadOptions, StreamWriter};

/// Writes one shard of `tokens` into a fresh storage of `T` ids
/// (`u32` ids, stored as `T`).
fn storage<T: guideloom_formats::TokenElement>(tokens: &[u32]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let mut w = StreamWriter::open(dir.path(), TokenFormat::<T>::new()).unwrap();
    w.append(0, tokens).unwrap();
    w.commit().unwrap();
    dir
}

/// The address of the first element of a CPU tensor's storage buffer (and the tensor starts
/// there).
fn cpu_ptr<D: WithDType>(t: &Tensor) -> *const D {
    let (storage, layout) = t.storage_and_layout();
    assert_eq!(layout.start_offset(), 0);
    match &*storage {
        Storage::Cpu(cpu) => cpu.as_slice::<D>().unwrap().as_ptr(),
        _ => panic!("not a CPU tensor"),
    }
}

/// A reproducible pseudo-random token stream (splitmix64), ids below `vocab`.
fn tokens(n: usize, vocab: u64) -> Vec<u32> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..n)
        .map(|_| {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            ((z ^ (z >> 31)) % vocab) as u32
        })
        .collect()
}

fn lm_loader(dir: &Path, seq_len: u64, batch: u64, seed: u64, workers: usize, epochs: u64) -> LmLoader<u32> {
    let (windows, collate) = lm_windows::<u32>(dir, seq_len, ReadOptions::default()).unwrap();
    let builder = Loader::builder(windows).shuffle(seed).batch_size(batch).workers(workers).epochs(epochs);
    builder.collate(collate).build().unwrap()
}

/// A batch's `(inputs, targets)` as rows of ids.
type Pair = (Vec<Vec<u32>>, Vec<Vec<u32>>);

fn rows(t: &Tensor) -> Vec<Vec<u32>> {
    t.to_vec2::<u32>().unwrap()
}

#[test]
fn c1_from_vec_keeps_the_vec_from_slice_copies() {
    let data: Vec<u32> = (0..10).collect();
    let ptr = data.as_ptr();
    let copied = Tensor::from_slice(&data, (2, 5), &Device::Cpu).unwrap();
    let moved = Tensor::from_vec(data, (2, 5), &Device::Cpu).unwrap();
    assert!(std::ptr::eq(cpu_ptr::<u32>(&moved), ptr));
    assert!(!std::ptr::eq(cpu_ptr::<u32>(&copied), ptr));
    assert_eq!(rows(&moved), rows(&copied));
}

#[test]
fn c2_shift_contiguous_and_the_collates_own_buffers() {
    // Windows of L + 1 = 5 tokens at stride 5: rows [0..5) and [5..10).
    let dir = storage::<u16>(&(0..10).collect::<Vec<_>>());
    let windows = TokenWindows::<u32>::open_with(dir.path(), 5, 5, ReadOptions::default()).unwrap();
    let collate = LmCollate::new(&windows).unwrap();
    let batch = collate.collate(vec![windows.get(0).unwrap(), windows.get(1).unwrap()]).unwrap();
    assert_eq!(batch.shape(), [2, 4]);
    let (pi, pt) = (batch.inputs().as_ptr(), batch.targets().as_ptr());
    let (inputs, targets) = batch.into_tensors(&Device::Cpu).unwrap();
    assert_eq!(rows(&inputs), [[0, 1, 2, 3], [5, 6, 7, 8]]);
    assert_eq!(rows(&targets), [[1, 2, 3, 4], [6, 7, 8, 9]]);
    assert!(inputs.is_contiguous() && targets.is_contiguous());
    assert!(std::ptr::eq(cpu_ptr::<u32>(&inputs), pi));
    assert!(std::ptr::eq(cpu_ptr::<u32>(&targets), pt));
    assert_eq!((inputs.dtype(), targets.dims()), (DType::U32, &[2, 4][..]));

    // The training layout: windows of L + 1 at stride L, so every token is a target once,
    // in batch order (reversed here).
    let dir = storage::<u16>(&(0..13).collect::<Vec<_>>());
    let (windows, collate) = lm_windows::<u32>(dir.path(), 4, ReadOptions::default()).unwrap();
    assert_eq!(windows.len(), 3);
    let spans = (0..3).rev().map(|w| windows.get(w).unwrap()).collect();
    let (inputs, targets) = collate.collate(spans).unwrap().into_tensors(&Device::Cpu).unwrap();
    assert_eq!(rows(&inputs), [[8, 9, 10, 11], [4, 5, 6, 7], [0, 1, 2, 3]]);
    assert_eq!(rows(&targets), [[9, 10, 11, 12], [5, 6, 7, 8], [1, 2, 3, 4]]);
}

#[test]
fn c3_u16_storage_gives_u32_tensors_without_wrapping_and_i64_on_request() {
    let dir = storage::<u16>(&[65_535, 1]);
    // The whole stream as one window, through the plain token path.
    let windows = TokenWindows::<u32>::open(dir.path(), 2).unwrap();
    let batch = windows.collate().collate(vec![windows.get(0).unwrap()]).unwrap();
    let t = batch.into_tensors(&Device::Cpu).unwrap();
    assert_eq!(t.dtype(), DType::U32);
    assert_eq!(t.to_vec2::<u32>().unwrap(), [[65_535, 1]]);
    // The language-model path: L = 1.
    let (windows, collate) = lm_windows::<u32>(dir.path(), 1, ReadOptions::default()).unwrap();
    let (i, t) = collate.collate(vec![windows.get(0).unwrap()]).unwrap().into_tensors(&Device::Cpu).unwrap();
    assert_eq!(
        (i.to_vec2::<u32>().unwrap(), t.to_vec2::<u32>().unwrap()),
        (vec![vec![65_535]], vec![vec![1]])
    );
    // i64 ids on request.
    let (windows, collate) = lm_windows::<i64>(dir.path(), 1, ReadOptions::default()).unwrap();
    let (i, t) = collate.collate(vec![windows.get(0).unwrap()]).unwrap().into_tensors(&Device::Cpu).unwrap();
    assert_eq!((i.dtype(), t.dtype()), (DType::I64, DType::I64));
    assert_eq!(
        (i.to_vec2::<i64>().unwrap(), t.to_vec2::<i64>().unwrap()),
        (vec![vec![65_535]], vec![vec![1]])
    );
    // u32 ids that do not fit... u32 do fit i64; a u32 storage does not fit u16 (no u16 in
    // candle anyway), nor does any storage fit a narrower id type.
    let wide = storage::<u32>(&[70_000, 1]);
    assert!(matches!(lm_windows::<u8>(wide.path(), 1, ReadOptions::default()), Err(Error::Loader(_))));
}

#[test]
fn c4_shape_errors_are_errors_not_panics() {
    // candle wraps its error with a backtrace when RUST_BACKTRACE is set.
    let e = match Tensor::from_vec(vec![1u32, 2, 3], (2, 2), &Device::Cpu).unwrap_err() {
        candle_core::Error::WithBacktrace { inner, .. } => *inner,
        e => e,
    };
    assert!(matches!(e, candle_core::Error::ShapeMismatch { buffer_size: 3, .. }), "{e}");
    let hole = Tensor::from_vec(vec![1i64, 2, 3, 4], (2, ()), &Device::Cpu).unwrap();
    assert_eq!((hole.dims(), hole.dtype()), (&[2, 2][..], DType::I64));

    let e = LmBatch::new(vec![1u32, 2, 3], vec![2, 3, 4, 5], 2, 2).unwrap_err();
    assert!(matches!(e, Error::Shape { what: "inputs", rows: 2, seq_len: 2, found: 3 }), "{e}");
    assert_eq!(e.to_string(), "inputs holds 3 elements, not 2 x 2");
    let e = LmBatch::new(vec![1u32, 2], vec![2, 3, 4], 1, 2).unwrap_err();
    assert!(matches!(e, Error::Shape { what: "targets", rows: 1, seq_len: 2, found: 3 }));
    // rows * seq_len overflows: no buffer can hold it.
    assert!(matches!(
        LmBatch::new(Vec::<u32>::new(), vec![], usize::MAX, 2),
        Err(Error::Shape { what: "inputs", rows: usize::MAX, seq_len: 2, found: 0 })
    ));
    let ok = LmBatch::new(vec![1u32, 2], vec![2, 3], 1, 2).unwrap();
    assert_eq!(ok.into_parts(), (vec![1, 2], vec![2, 3]));

    // A hand-made packed batch whose arrays disagree with its shape.
    let mut packed = packed_batch();
    packed.positions.pop();
    assert!(matches!(packed.into_tensors(&Device::Cpu), Err(Error::Tensor(_))));

    // Windows without an input/target pair, and L = 0.
    let dir = storage::<u16>(&[1, 2, 3]);
    let one = TokenWindows::<u32>::open(dir.path(), 1).unwrap();
    let e = LmCollate::new(&one).unwrap_err();
    assert!(matches!(e, LoaderError::InvalidConfig { field: "seq_len", .. }));
    assert!(matches!(lm_windows::<u32>(dir.path(), 0, ReadOptions::default()), Err(Error::Loader(_))));
    // A window longer than the stream.
    assert!(matches!(lm_windows::<u32>(dir.path(), 3, ReadOptions::default()), Err(Error::Loader(_))));
}

#[test]
fn c5_same_seed_same_first_100_batches_and_every_target_is_the_next_input() {
    let data = tokens(20_000, 256);
    let dir = storage::<u16>(&data);
    // (20_000 - 17) / 16 + 1 = 1_249 windows of 17 tokens, 157 batches of 8 per epoch (the
    // last one of 1).
    let take = |seed: u64, workers: usize| -> Vec<Pair> {
        let loader = lm_loader(dir.path(), 16, 8, seed, workers, 1);
        assert_eq!(loader.len(), 157);
        CandleBatches::new(loader.iter(), Device::Cpu)
            .take(100)
            .map(|b| {
                let (i, t) = b.unwrap();
                (rows(&i), rows(&t))
            })
            .collect()
    };
    let a = take(42, 2);
    assert_eq!(a.len(), 100);
    assert_eq!(a, take(42, 3));
    assert_eq!(a, take(42, 0));
    assert_ne!(a, take(43, 2));
    // Each row is a stretch of the stream: inputs at w * 16, targets one token later.
    let starts: Vec<usize> = (0..1_249).map(|w| w * 16).collect();
    for (inputs, targets) in &a {
        for (i, t) in inputs.iter().zip(targets) {
            let at = starts.iter().copied().find(|&s| data[s..s + 16] == i[..]).unwrap();
            assert_eq!(data[at + 1..at + 17], t[..]);
        }
    }
}

/// Documents [1, 2, 3], [4, 5], [6, 7, 8, 9], [10] packed first-fit (one open row) into rows
/// of 6; pad and ignore id 0, both rows in one batch.
fn packed_batch() -> guideloom_loader::pack::PackedBatch<u32> {
    let docs = VecSource::new(vec![vec![1u32, 2, 3], vec![4, 5], vec![6, 7, 8, 9], vec![10]]);
    let packed = Packed::scan(docs, PackConfig::new(6, PackStrategy::FirstFit { bins: 1 }), 0, 0).unwrap();
    assert_eq!(packed.len(), 2);
    let rows = vec![packed.get(0).unwrap(), packed.get(1).unwrap()];
    PackCollate.collate(rows).unwrap()
}

#[test]
fn packed_batch_as_tensors_exact_values() {
    let batch = packed_batch();
    let (pt, ps) = (batch.tokens.as_ptr(), batch.segment_ids.as_ptr());
    let t = batch.into_tensors(&Device::Cpu).unwrap();
    assert_eq!(rows(&t.tokens), [[1, 2, 3, 4, 5, 0], [6, 7, 8, 9, 10, 0]]);
    assert_eq!(rows(&t.targets), [[2, 3, 0, 5, 0, 0], [7, 8, 9, 0, 0, 0]]);
    assert_eq!(rows(&t.segment_ids), [[1, 1, 1, 2, 2, 0], [1, 1, 1, 1, 2, 0]]);
    assert_eq!(rows(&t.positions), [[0, 1, 2, 0, 1, 0], [0, 1, 2, 3, 0, 0]]);
    assert_eq!(t.loss_mask.dtype(), DType::F32);
    assert_eq!(
        t.loss_mask.to_vec2::<f32>().unwrap(),
        [[1.0, 1.0, 0.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]]
    );
    assert_eq!(t.cu_seqlens, [vec![0, 3, 5], vec![0, 4, 5]]);
    for x in [&t.tokens, &t.targets, &t.segment_ids, &t.positions, &t.loss_mask] {
        assert_eq!(x.dims(), [2, 6]);
        assert!(x.is_contiguous());
    }
    // u32 arrays move into the tensors.
    assert!(std::ptr::eq(cpu_ptr::<u32>(&t.tokens), pt));
    assert!(std::ptr::eq(cpu_ptr::<u32>(&t.segment_ids), ps));
}

#[test]
fn packed_u16_documents_through_a_loader_give_u32_tensors() {
    let docs = VecSource::new(vec![vec![1u16, 2, 3], vec![4, 5], vec![6, 7, 8, 9], vec![65_535]]);
    let packed = Packed::scan(docs, PackConfig::new(6, PackStrategy::FirstFit { bins: 1 }), 0, 0).unwrap();
    let loader = Loader::builder(packed).batch_size(2).collate(PackCollate).build().unwrap();
    let mut batches = CandleBatches::new(loader.iter(), Device::Cpu);
    let t = batches.next().unwrap().unwrap();
    assert_eq!((t.tokens.dtype(), t.targets.dtype()), (DType::U32, DType::U32));
    assert_eq!(rows(&t.tokens), [[1, 2, 3, 4, 5, 0], [6, 7, 8, 9, 65_535, 0]]);
    assert_eq!(rows(&t.targets), [[2, 3, 0, 5, 0, 0], [7, 8, 9, 0, 0, 0]]);
    assert!(batches.next().is_none());
    assert_eq!(batches.position(), 1);
}

#[test]
fn resume_mid_epoch_yields_the_remaining_batches_exactly() {
    let dir = storage::<u16>(&tokens(5_000, 256));
    let loader = lm_loader(dir.path(), 32, 4, 7, 2, 2);
    let all: Vec<_> = CandleBatches::new(loader.iter(), Device::Cpu)
        .map(|b| {
            let (i, t) = b.unwrap();
            (rows(&i), rows(&t))
        })
        .collect();
    // (5_000 - 33) / 32 + 1 = 156 windows, 39 batches per epoch, 2 epochs.
    assert_eq!(all.len(), 78);
    for cut in [0, 1, 17, 39, 50, 77, 78] {
        let mut first = CandleBatches::new(loader.iter(), Device::Cpu);
        for _ in 0..cut {
            first.next().unwrap().unwrap();
        }
        let json = first.state().to_json();
        drop(first);
        let state = State::from_json(&json).unwrap();
        let rest: Vec<_> = CandleBatches::new(loader.iter_from(&state).unwrap(), Device::Cpu)
            .map(|b| {
                let (i, t) = b.unwrap();
                (rows(&i), rows(&t))
            })
            .collect();
        assert_eq!(rest, all[cut..], "resumed after {cut} batches");
    }
}

#[test]
fn a_failing_batch_arrives_as_the_loaders_error_then_the_iterator_ends() {
    let dir = storage::<u16>(&(0..100).collect::<Vec<_>>());
    let (windows, inner) = lm_windows::<u32>(dir.path(), 8, ReadOptions::default()).unwrap();
    // Fails on the batch holding window 5 (batches of 2 in order: windows 4 and 5 are batch 2).
    let collate = move |records: Vec<guideloom_loader::WindowSpan>| {
        if let Some(r) = records.iter().find(|r| r.index == 5) {
            return Err(LoaderError::Collate { detail: format!("window {} refused", r.index) });
        }
        inner.collate(records)
    };
    let loader = Loader::builder(windows).batch_size(2).workers(2).collate(collate).build().unwrap();
    let mut batches = CandleBatches::new(loader.iter(), Device::Cpu);
    for first in [0u32, 16] {
        let (inputs, _) = batches.next().unwrap().unwrap();
        assert_eq!(rows(&inputs)[0][0], first);
    }
    let e = batches.next().unwrap().unwrap_err();
    // The loader names the batch; the cause is the collation's error, reachable by source().
    let Error::Loader(LoaderError::InBatch { batch: 2, epoch: 0, source }) = &e else { panic!("{e:?}") };
    assert!(matches!(&**source, LoaderError::Collate { detail } if detail == "window 5 refused"));
    assert_eq!(e.to_string(), "batch 2 (epoch 0)");
    let cause = std::error::Error::source(&e).unwrap();
    assert_eq!(cause.to_string(), "collate: window 5 refused");
    assert!(batches.next().is_none());
    assert_eq!(batches.position(), 2);
}

#[test]
fn errors_convert_into_candle_errors_for_question_marks() {
    let e: candle_core::Error = Error::Shape { what: "inputs", rows: 1, seq_len: 2, found: 3 }.into();
    assert_eq!(e.to_string(), "inputs holds 3 elements, not 1 x 2");
}

mod regression {
    use candle_core::{DType, Device, Module, Tensor, Var, D};

    /// The example's layer norm and softmax: candle-nn 0.11.1's `LayerNorm::forward` and
    /// `ops::softmax_last_dim` apply fused kernels without a backward pass on contiguous inputs,
    /// so a model built from them did not learn before its last norm (issue 15: the example's
    /// loss stalled at 2.8 nats). `ops::layer_norm_slow` and `ops::softmax` backpropagate. If
    /// this test fails, candle-nn has changed: revisit the example and the README.
    #[test]
    fn issue15_candle_nn_fused_layer_norm_and_softmax_have_no_gradient() {
        let x = Var::from_tensor(&Tensor::new(&[[1f32, 2.0, 4.0], [0.5, -1.0, 3.0]], &Device::Cpu).unwrap())
            .unwrap();
        let w = Tensor::new(&[1f32, 2.0, 3.0], &Device::Cpu).unwrap();
        let b = Tensor::zeros(3, DType::F32, &Device::Cpu).unwrap();
        let weighted = |y: Tensor| y.broadcast_mul(&w).unwrap().sum_all().unwrap();
        // The gradient's L1 norm, or None when no gradient reaches x.
        let grad = |loss: Tensor| {
            loss.backward()
                .unwrap()
                .get(&x)
                .map(|g| g.abs().unwrap().sum_all().unwrap().to_scalar::<f32>().unwrap())
        };

        let fused = candle_nn::LayerNorm::new(w.clone(), b.clone(), 1e-5);
        assert!(grad(weighted(fused.forward(&x).unwrap())).is_none());
        assert!(grad(weighted(candle_nn::ops::softmax_last_dim(&x).unwrap())).is_none());

        let slow = candle_nn::ops::layer_norm_slow(&x, &w, &b, 1e-5).unwrap();
        assert!(grad(weighted(slow)).unwrap() > 0.1);
        let soft = candle_nn::ops::softmax(&x, D::Minus1).unwrap();
        assert!(grad(weighted(soft)).unwrap() > 0.1);
    }
}
