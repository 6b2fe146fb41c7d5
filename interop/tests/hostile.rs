//! Hostile files: damage to the samples never panics, never allocates beyond what the files
//! justify and never hangs (the mutation test of issues 13 and 19).

use std::path::{Path, PathBuf};

use guideloom_formats::{IntTokenFormat, Primitive};
use guideloom_interop::{DocumentDelimiter, ForeignDataset, ForeignFormat, ForeignOptions};
use guideloom_storage::{ReadOptions, StorageError, Window};
use guideloom_testkit::hostile::{panic_text, with_alloc_cap, CountingAlloc};

use crate::common::{backends, opts, sample};

/// Damaged Arrow files whose other data was compared with arrow-rs's own reading.
static ORACLE_CHECKED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Records, per thread, the largest single allocation made while armed.
#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// Copies the dataset at `src` into `dir` (all files of its folder) and returns the path to
/// open there.
fn copy_dataset(src: &Path, dir: &Path) -> PathBuf {
    let src = src.to_path_buf();
    let (folder, name) = if src.is_dir() {
        (src.clone(), None)
    } else {
        (src.parent().unwrap().to_path_buf(), src.file_name())
    };
    for entry in walk(&folder) {
        let to = dir.join(entry.strip_prefix(&folder).unwrap());
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(&entry, &to).unwrap();
    }
    match name {
        Some(n) => dir.join(n),
        None => dir.to_path_buf(),
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// Everything a reader of `d` returns: the whole stream and every document.
fn read_everything(
    d: &ForeignDataset,
    options: ReadOptions,
) -> Result<(Vec<i64>, Vec<Vec<i64>>), StorageError> {
    let format = IntTokenFormat::new(d.dtype())
        .map_err(|e| StorageError::Backend { backend: "test", reason: e.to_string() })?;
    let r = d.reader(format, options)?;
    let all = r.read(Window::new(0, r.len()))?;
    let docs = r.read_many(&d.document_windows())?;
    Ok((all, docs))
}

/// The mutation test of issue 13, extended for issue 19 to the rule the native storages'
/// (`hostile`) follows: 540 seeded byte replacements and truncations of the samples, each
/// opened and read completely under every I/O backend, give the undamaged data exactly, a
/// typed error, or other data (these layouts have no checksum over the tokens), the same on
/// every backend; never a panic (`catch_unwind`), a single allocation above 4 MiB + 8 x the
/// dataset's bytes (the counting allocator of `hostile`), or a hang (a 300 s watchdog naming
/// the case).
#[test]
fn damaged_samples_give_errors_never_panics() {
    let cases: Vec<(PathBuf, ForeignOptions)> = vec![
        (sample("megatron/gpt2_text_document"), ForeignOptions::new()),
        (sample("megatron/sentences_text_sentence"), ForeignOptions::new().repair_pointers(true)),
        (
            sample("llmc/tiny_val_000000.bin"),
            ForeignOptions::new().delimiter(DocumentDelimiter::Starts(50256)),
        ),
        (sample("mds/empty_first_shard"), ForeignOptions::new()),
        (sample("mds/tokens_zstd_sha1_xxh3"), ForeignOptions::new()),
        (sample("mds/encodings"), ForeignOptions::new().column("c_nd")),
        (sample("litdata/pytree"), ForeignOptions::new()),
        (sample("npy/c_2x3_u4.npy"), ForeignOptions::new()),
        (sample("olmo/part-0-00000.npy"), opts(ForeignFormat::Olmo).dtype(Primitive::U16)),
    ];
    mutate_samples(cases, 13, 60);
}

/// The mutation test over the issue 28 samples: every Hugging Face Arrow directory and every
/// Parquet file of `tests/data/samples2`, 40 seeded byte replacements and truncations each,
/// under the rule of [`damaged_samples_give_errors_never_panics`]: the undamaged data, a typed
/// error, or other data, alike on every backend; never a panic, an allocation past the cap
/// or a hang.
#[cfg(all(feature = "arrow", feature = "parquet"))]
#[test]
fn issue28_damaged_arrow_and_parquet_samples_give_errors_never_panics() {
    use crate::tables::sample2;
    let arrow = ForeignOptions::new().format(ForeignFormat::HfArrow);
    let parquet = ForeignOptions::new().format(ForeignFormat::Parquet);
    let mut cases: Vec<(PathBuf, ForeignOptions)> = crate::tables::HF_ARROW_SAMPLES
        .iter()
        .map(|n| (sample2(&format!("hf_arrow/{n}")), arrow.clone()))
        .collect();
    cases.push((sample2("hf_arrow/dataset_dict/train"), arrow.clone()));
    cases.push((sample2("hf_arrow/dataset_dict"), arrow.clone().split("validation")));
    for f in [
        "parquet/tokens_zstd_pageindex.parquet",
        "parquet/tokens_snappy_nopageindex.parquet",
        "parquet/tokens_u16_uncompressed_v2.parquet",
        "parquet/tokens_i64_large_list_gzip.parquet",
        "hf_parquet/data/train-00000-of-00002.parquet",
        "hf_parquet/data/train-00001-of-00002.parquet",
        "hf_parquet/data/test-00000-of-00001.parquet",
    ] {
        cases.push((sample2(f), parquet.clone()));
    }
    mutate_samples(cases, 28, 40);
}

/// Damages each of `cases` `rounds` times (seeded by `seed`) and reads it under every backend
/// (see [`damaged_samples_give_errors_never_panics`]); fails listing every failure.
fn mutate_samples(cases: Vec<(PathBuf, ForeignOptions)>, seed: u64, rounds: u64) {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    let progress = Arc::new(AtomicU64::new(0));
    let (tx, rx) = std::sync::mpsc::channel();
    let p = Arc::clone(&progress);
    std::thread::spawn(move || {
        let _ = tx.send(catch_unwind(AssertUnwindSafe(|| damaged_sample_cases(&p, cases, seed, rounds))));
    });
    let tally = match rx.recv_timeout(std::time::Duration::from_secs(300)) {
        Ok(Ok(t)) => t,
        Ok(Err(p)) => std::panic::resume_unwind(p),
        Err(_) => panic!("case {} made no progress in 300 s (a hang)", progress.load(Ordering::SeqCst)),
    };
    let (exact, other, refused, failures) = tally;
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
    assert!(exact > 0 && refused > 0, "{exact} exact, {other} other data, {refused} refused");
    eprintln!(
        "damaged foreign samples: {exact} read exactly, {other} other data ({} reads of damaged Arrow files equal to arrow-rs's own), {refused} typed errors",
        ORACLE_CHECKED.swap(0, Ordering::Relaxed)
    );

    fn damaged_sample_cases(
        progress: &AtomicU64,
        cases: Vec<(PathBuf, ForeignOptions)>,
        seed: u64,
        rounds: u64,
    ) -> (u32, u32, u32, Vec<String>) {
        use rand::{Rng, SeedableRng};
        let backends = backends();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let (mut exact, mut other, mut refused) = (0u32, 0u32, 0u32);
        let mut failures = Vec::new();
        for (c, (src, options)) in cases.into_iter().enumerate() {
            let rel = src.display();
            // The undamaged sample's outcome (mds/encodings' c_nd column is a float32 array:
            // refused as token data even undamaged).
            let want = ForeignDataset::open(&src, &options)
                .map_err(|e| e.to_string())
                .and_then(|d| read_everything(&d, ReadOptions::default()).map_err(|e| e.to_string()));
            for round in 0..rounds {
                progress.store(c as u64 * rounds + round, Ordering::SeqCst);
                let dir = tempfile::tempdir().unwrap();
                let path = copy_dataset(&src, dir.path());
                let files = walk(dir.path());
                let on_disk: u64 = files.iter().map(|f| std::fs::metadata(f).unwrap().len()).sum();
                let victim = &files[rng.random_range(0..files.len())];
                let mut bytes = std::fs::read(victim).unwrap();
                if bytes.is_empty() {
                    continue;
                }
                if round % 4 == 3 {
                    bytes.truncate(rng.random_range(0..bytes.len()));
                } else {
                    for _ in 0..rng.random_range(1..4) {
                        let at = rng.random_range(0..bytes.len());
                        bytes[at] = rng.random();
                    }
                }
                std::fs::write(victim, &bytes).unwrap();
                let what = format!("{rel} round {round} ({})", victim.display());
                let cap = (4usize << 20) + 8 * on_disk as usize;
                let mut first: Option<String> = None;
                for (name, backend) in &backends {
                    let run = || {
                        ForeignDataset::open(&path, &options)
                            .map_err(|e| e.to_string())
                            .and_then(|d| read_everything(&d, backend.clone()).map_err(|e| e.to_string()))
                    };
                    let (outcome, largest) = with_alloc_cap(cap, || catch_unwind(AssertUnwindSafe(run)));
                    let outcome = match outcome {
                        Ok(o) => o,
                        Err(p) => {
                            failures.push(format!("{what} [{name}]: panic: {}", panic_text(&*p)));
                            continue;
                        }
                    };
                    if largest > cap {
                        failures.push(format!("{what} [{name}]: allocation of {largest} bytes (cap {cap})"));
                    }
                    let class = match &outcome {
                        _ if outcome == want => "exact".to_string(),
                        Ok((_, docs)) => {
                            // Other data: where arrow-rs's own reader decodes the damaged
                            // files, it must find the same documents.
                            #[cfg(feature = "arrow")]
                            if options.format == Some(ForeignFormat::HfArrow) {
                                let d = ForeignDataset::open(&path, &options).unwrap();
                                if let Some(oracle) = arrow_oracle(&d) {
                                    ORACLE_CHECKED.fetch_add(1, Ordering::Relaxed);
                                    if &oracle != docs {
                                        failures.push(format!(
                                            "{what} [{name}]: wrong values (arrow-rs reads others)"
                                        ));
                                    }
                                }
                            }
                            let _ = docs;
                            "other".to_string()
                        }
                        Err(e) if e.is_empty() => {
                            failures.push(format!("{what} [{name}]: an error with no message"));
                            "error".to_string()
                        }
                        Err(e) => format!("error: {e}"),
                    };
                    match &first {
                        None => {
                            match class.as_str() {
                                "exact" => exact += 1,
                                "other" => other += 1,
                                _ => refused += 1,
                            }
                            first = Some(class);
                        }
                        Some(f) if *f != class => {
                            failures.push(format!("{what}: backends disagree: {f} / [{name}] {class}"))
                        }
                        Some(_) => {}
                    }
                }
            }
        }
        (exact, other, refused, failures)
    }
}

/// The documents arrow-rs's own IPC stream reader (which validates the arrays) finds in the
/// token column of `d`'s files, in order; `None` where it refuses (or panics on) a file.
#[cfg(feature = "arrow")]
fn arrow_oracle(d: &ForeignDataset) -> Option<Vec<Vec<i64>>> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{
        Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type, UInt32Type, UInt64Type, UInt8Type,
    };
    use arrow_array::{Array, ArrayRef};
    fn ints(a: &ArrayRef) -> Option<Vec<i64>> {
        use arrow_array::types::ArrowPrimitiveType;
        fn take<T: ArrowPrimitiveType>(a: &ArrayRef, f: impl Fn(T::Native) -> i64) -> Vec<i64> {
            a.as_primitive::<T>().values().iter().map(|&v| f(v)).collect()
        }
        use arrow_schema::DataType as T;
        Some(match a.data_type() {
            T::Int8 => take::<Int8Type>(a, i64::from),
            T::Int16 => take::<Int16Type>(a, i64::from),
            T::Int32 => take::<Int32Type>(a, i64::from),
            T::Int64 => take::<Int64Type>(a, |v| v),
            T::UInt8 => take::<UInt8Type>(a, i64::from),
            T::UInt16 => take::<UInt16Type>(a, i64::from),
            T::UInt32 => take::<UInt32Type>(a, i64::from),
            T::UInt64 => take::<UInt64Type>(a, |v| v as i64),
            _ => return None,
        })
    }
    let column = match d.details() {
        guideloom_interop::ForeignDetails::Table { column, .. } => column.clone(),
        _ => return None,
    };
    let read = || -> Option<Vec<Vec<i64>>> {
        let mut docs = Vec::new();
        for f in d.files() {
            let file = std::fs::File::open(d.root().join(&f.path)).ok()?;
            let reader = arrow_ipc::reader::StreamReader::try_new(file, None).ok()?;
            for batch in reader {
                let batch = batch.ok()?;
                let col = batch.column_by_name(&column)?;
                for r in 0..col.len() {
                    if col.is_null(r) {
                        return None;
                    }
                    let row = match col.data_type() {
                        arrow_schema::DataType::List(_) => col.as_list::<i32>().value(r),
                        arrow_schema::DataType::LargeList(_) => col.as_list::<i64>().value(r),
                        arrow_schema::DataType::FixedSizeList(..) => col.as_fixed_size_list().value(r),
                        _ => return None,
                    };
                    if row.null_count() > 0 {
                        return None;
                    }
                    docs.push(ints(&row)?);
                }
            }
        }
        Some(docs)
    };
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(read)).ok().flatten()
}
