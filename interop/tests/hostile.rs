//! Hostile files: damage to the samples never panics, never allocates beyond what the files
//! justify and never hangs (the mutation test of issues 13 and 19).

use std::path::{Path, PathBuf};

use guideloom_formats::{IntTokenFormat, Primitive};
use guideloom_interop::{DocumentDelimiter, ForeignDataset, ForeignFormat, ForeignOptions};
use guideloom_storage::{ReadOptions, StorageError, Window};
use guideloom_testkit::hostile::{panic_text, with_alloc_cap, CountingAlloc};

use crate::common::{backends, opts, sample};

/// Records, per thread, the largest single allocation made while armed.
#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// Copies the dataset `rel` into `dir` (all files of its folder) and returns the path to
/// open there.
fn copy_dataset(rel: &str, dir: &Path) -> PathBuf {
    let src = sample(rel);
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
    use rand::{Rng, SeedableRng};
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    let progress = Arc::new(AtomicU64::new(0));
    let (tx, rx) = std::sync::mpsc::channel();
    let p = Arc::clone(&progress);
    std::thread::spawn(move || {
        let _ = tx.send(catch_unwind(AssertUnwindSafe(|| damaged_sample_cases(&p))));
    });
    let tally = match rx.recv_timeout(std::time::Duration::from_secs(300)) {
        Ok(Ok(t)) => t,
        Ok(Err(p)) => std::panic::resume_unwind(p),
        Err(_) => panic!("case {} made no progress in 300 s (a hang)", progress.load(Ordering::SeqCst)),
    };
    let (exact, other, refused, failures) = tally;
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
    assert!(exact > 0 && refused > 0, "{exact} exact, {other} other data, {refused} refused");
    eprintln!("damaged foreign samples: {exact} read exactly, {other} other data, {refused} typed errors");

    fn damaged_sample_cases(progress: &AtomicU64) -> (u32, u32, u32, Vec<String>) {
        let cases: [(&str, ForeignOptions); 9] = [
            ("megatron/gpt2_text_document", ForeignOptions::new()),
            ("megatron/sentences_text_sentence", ForeignOptions::new().repair_pointers(true)),
            ("llmc/tiny_val_000000.bin", ForeignOptions::new().delimiter(DocumentDelimiter::Starts(50256))),
            ("mds/empty_first_shard", ForeignOptions::new()),
            ("mds/tokens_zstd_sha1_xxh3", ForeignOptions::new()),
            ("mds/encodings", ForeignOptions::new().column("c_nd")),
            ("litdata/pytree", ForeignOptions::new()),
            ("npy/c_2x3_u4.npy", ForeignOptions::new()),
            ("olmo/part-0-00000.npy", opts(ForeignFormat::Olmo).dtype(Primitive::U16)),
        ];
        let backends = backends();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(13);
        let (mut exact, mut other, mut refused) = (0u32, 0u32, 0u32);
        let mut failures = Vec::new();
        for (c, (rel, options)) in cases.into_iter().enumerate() {
            // The undamaged sample's outcome (mds/encodings' c_nd column is a float32 array:
            // refused as token data even undamaged).
            let want = ForeignDataset::open(sample(rel), &options)
                .map_err(|e| e.to_string())
                .and_then(|d| read_everything(&d, ReadOptions::default()).map_err(|e| e.to_string()));
            for round in 0..60u64 {
                progress.store(c as u64 * 60 + round, Ordering::SeqCst);
                let dir = tempfile::tempdir().unwrap();
                let path = copy_dataset(rel, dir.path());
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
                        Ok(_) => "other".to_string(),
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
