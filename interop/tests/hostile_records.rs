//! Hostile record files (issue 28 item 5): seeded byte replacements and truncations of every
//! ArrayRecord, TFRecord and WebDataset sample, each opened and read completely (as a token
//! stream, through the sequential sources, record by record), never panic, never make a
//! single allocation above 4 MiB + 8 x the file's bytes, and give the undamaged data
//! exactly or a typed error naming the file; where every byte is covered by a checksum
//! (ArrayRecord's HighwayHashes, TFRecord's crc32c, gzip's crc32) never other data, except a
//! TFRecord cut between records, which reads as the records before the cut.

use std::panic::{catch_unwind, AssertUnwindSafe};

use guideloom_formats::Primitive;
use guideloom_interop::{
    ArrayRecordReader, ForeignDataset, ForeignOptions, TfRecordShards, WebDatasetShards,
};
use guideloom_loader::sequential::SequentialSource;
use guideloom_testkit::hostile::{panic_text, with_alloc_cap};

use crate::records_samples::{documents, sample2, sequential_records};

/// What reading a file gives: every document, or the error's text.
type Outcome = Result<Vec<Vec<i64>>, String>;

fn read_stream(path: &std::path::Path, options: &ForeignOptions) -> Outcome {
    let d = ForeignDataset::open(path, options).map_err(|e| e.to_string())?;
    let format = guideloom_formats::IntTokenFormat::new(d.dtype()).map_err(|e| e.to_string())?;
    let r = d.reader(format, Default::default()).map_err(|e| e.to_string())?;
    r.read_many(&d.document_windows()).map_err(|e| e.to_string())
}

fn read_sequential<S: SequentialSource<Item = Vec<i64>>>(source: &S) -> Outcome {
    sequential_records(source).map_err(|e| format!("{e}: {:?}", std::error::Error::source(&e)))
}

fn read_records(path: &std::path::Path) -> Result<Vec<Vec<u8>>, String> {
    let r = ArrayRecordReader::open(path).map_err(|e| e.to_string())?;
    (0..r.len()).rev().map(|i| r.record(i).map_err(|e| e.to_string())).collect()
}

#[test]
fn issue28_damaged_record_samples_give_errors_never_panics_or_wrong_values() {
    use rand::{Rng, SeedableRng};
    let u16_raw = ForeignOptions::new().dtype(Primitive::U16);
    let cases: Vec<(&str, ForeignOptions, bool)> = vec![
        ("arrayrecord/tokens_npy_default.array_record", ForeignOptions::new(), true),
        ("arrayrecord/tokens_npy_g4_snappy.array_record", ForeignOptions::new(), true),
        ("arrayrecord/tokens_u16_raw_g16_brotli.array_record", u16_raw.clone(), true),
        ("arrayrecord/tokens_npy_g8_uncompressed_2blocks.array_record", ForeignOptions::new(), true),
        ("arrayrecord/raw_bytes_default.array_record", ForeignOptions::new().dtype(Primitive::U8), true),
        ("tfrecord/examples.tfrecord", ForeignOptions::new(), true),
        ("tfrecord/examples.tfrecord.gz", ForeignOptions::new(), true),
        ("tfrecord/raw_u16_tokens.tfrecord", u16_raw, true),
        ("webdataset/shards/train-000000.tar", ForeignOptions::new(), false),
        ("webdataset/train_gz-000000.tar.gz", ForeignOptions::new(), true),
        ("webdataset/long_keys.tar", ForeignOptions::new().column("input_ids.npy"), false),
    ];
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(28);
    let (mut exact, mut refused, mut other) = (0u32, 0u32, 0u32);
    let mut failures = Vec::new();
    for (rel, options, checksummed) in cases {
        let name = rel.rsplit('/').next().unwrap();
        let original = std::fs::read(sample2(rel)).unwrap();
        let want = read_stream(&sample2(rel), &options).unwrap();
        assert_eq!(documents(&ForeignDataset::open(sample2(rel), &options).unwrap()), want);
        for round in 0..40u32 {
            let mut bytes = original.clone();
            if round % 4 == 3 {
                bytes.truncate(rng.random_range(0..bytes.len()));
            } else {
                for _ in 0..rng.random_range(1..4) {
                    let at = rng.random_range(0..bytes.len());
                    bytes[at] = rng.random();
                }
            }
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join(name);
            std::fs::write(&path, &bytes).unwrap();
            let what = format!("{rel} round {round}");
            let cap = (4usize << 20) + 8 * original.len();
            let run = || {
                let mut outcomes = vec![read_stream(&path, &options)];
                let location = path.to_str().unwrap();
                if rel.starts_with("tfrecord") {
                    outcomes.push(
                        TfRecordShards::open(location, &options)
                            .map_err(|e| e.to_string())
                            .and_then(|s| read_sequential(&s)),
                    );
                } else if rel.starts_with("webdataset") {
                    outcomes.push(
                        WebDatasetShards::open(location, &options)
                            .map_err(|e| e.to_string())
                            .and_then(|s| read_sequential(&s)),
                    );
                } else if let Err(e) = read_records(&path) {
                    outcomes.push(Err(e));
                }
                outcomes
            };
            let (outcomes, largest) = with_alloc_cap(cap, || catch_unwind(AssertUnwindSafe(run)));
            let outcomes = match outcomes {
                Ok(o) => o,
                Err(p) => {
                    failures.push(format!("{what}: panic: {}", panic_text(&*p)));
                    continue;
                }
            };
            if largest > cap {
                failures.push(format!("{what}: allocation of {largest} bytes (cap {cap})"));
            }
            for outcome in outcomes {
                match outcome {
                    Ok(docs) if docs == want => exact += 1,
                    Ok(docs) if rel.starts_with("tfrecord") && round % 4 == 3 && want.starts_with(&docs) => {
                        other += 1
                    }
                    Ok(_) if checksummed => {
                        failures.push(format!("{what}: other data from a checksummed file"))
                    }
                    Ok(_) => other += 1,
                    Err(e) if !e.contains(name) => {
                        failures.push(format!("{what}: the error does not name the file: {e}"))
                    }
                    Err(_) => refused += 1,
                }
            }
        }
    }
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
    assert!(exact > 0 && refused > 0, "{exact} exact, {other} other, {refused} refused");
    eprintln!("damaged record samples: {exact} exact, {other} other data (no checksum, or a cut between records), {refused} typed errors");
}
