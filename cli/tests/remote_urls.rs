//! Foreign datasets and trainer orders read from object-store URLs (issue 18, item 1): every
//! interop sample uploaded to moto's S3 server (`tests/s3/setup.sh`; skipped with a message
//! when it is not installed, unless `GUIDELOOM_REQUIRE_S3` is set) gives through `batches`,
//! `batches --order llmc|megatron`, `inspect` and `import` the output it gives from its local
//! path, byte for byte (the location itself aside where it is printed), and a missing or
//! short object is a typed error naming its URL. Nothing here reaches any address but
//! 127.0.0.1.

use std::path::{Path, PathBuf};
use std::process::Output;

use guideloom::formats::Primitive;
use guideloom::interop::{ForeignDataset, ForeignError, ForeignFormat, ForeignOptions, InteropError};
use guideloom::storage::{RemoteDir, RemoteOptions, StorageError, StorageLocation};
use guideloom_testkit::s3::MotoServer;

use crate::cli::bin;

const BUCKET: &str = "guideloom-urls";

fn repo(rel: &str) -> PathBuf {
    guideloom_testkit::repo_root().join(rel)
}

/// The interop sample `rel`, local.
fn sample(rel: &str) -> String {
    repo("storage/tests/data/interop").join(rel).to_str().unwrap().to_string()
}

/// The interop sample `rel` on the server.
fn url(rel: &str) -> String {
    format!("s3://{BUCKET}/interop/{rel}")
}

/// moto with the interop samples under `interop/` and llm.c's order shards under
/// `llmc_order/`.
struct Server {
    moto: MotoServer,
}

impl Server {
    fn start(test: &str) -> Option<Server> {
        let moto = MotoServer::start(test)?;
        moto.create_bucket(BUCKET);
        let s = Server { moto };
        s.upload_tree(&repo("storage/tests/data/interop"), "interop");
        s.upload_tree(&repo("loader/tests/data/llmc_order"), "llmc_order");
        Some(s)
    }

    fn options(&self) -> RemoteOptions {
        RemoteOptions::default().block_size(4096).store_options(self.moto.store_options())
    }

    fn dir(&self, prefix: &str) -> RemoteDir {
        RemoteDir::open(&format!("s3://{BUCKET}/{prefix}"), self.options()).unwrap()
    }

    /// Every file below `local`, as objects under `prefix` (sub-directories as `/` parts).
    fn upload_tree(&self, local: &Path, prefix: &str) {
        let dir = self.dir(prefix);
        for (rel, bytes) in guideloom_testkit::files_below(local) {
            dir.put(&rel, bytes).unwrap();
        }
    }

    /// `guideloom ARGS` with the server's environment.
    fn run(&self, args: &[&str]) -> Output {
        bin()
            .args(args)
            .env_remove("GUIDELOOM_CACHE_DIR")
            .env("AWS_ENDPOINT_URL", self.moto.endpoint())
            .env("AWS_ALLOW_HTTP", "true")
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("AWS_REGION", "us-east-1")
            .env("GUIDELOOM_REMOTE_BLOCK", "4096")
            .output()
            .expect("run guideloom")
    }

    fn run_ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(out.status.success(), "guideloom {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    }
}

/// `args` with every `{}` replaced by `at`.
fn with(args: &[&str], at: &str) -> Vec<String> {
    args.iter().map(|a| a.replace("{}", at)).collect()
}

fn refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn remote_urls_every_foreign_sample_batches_inspects_and_imports_as_from_its_local_path() {
    let Some(s3) =
        Server::start("remote_urls_every_foreign_sample_batches_inspects_and_imports_as_from_its_local_path")
    else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let config = ["--seq-len", "3", "--stride", "2", "--shuffle", "--seed", "11", "--batch-size", "2"];
    for (i, (rel, flags)) in crate::foreign::importable().into_iter().enumerate() {
        let (local, remote) = (sample(rel), url(rel));
        // batches
        let mut args = vec!["batches", "{}"];
        args.extend(&flags);
        args.extend(config);
        let want = s3.run_ok(&refs(&with(&args, &local)));
        assert!(!want.is_empty(), "{rel}");
        assert_eq!(s3.run_ok(&refs(&with(&args, &remote))), want, "batches {rel}");
        // inspect (text): the same but for the dataset's location.
        let mut args = vec!["inspect", "{}"];
        args.extend(&flags);
        let want = s3.run_ok(&refs(&with(&args, &local)));
        let got = s3.run_ok(&refs(&with(&args, &remote)));
        assert!(got.contains(&remote), "{rel}: {got}");
        assert_eq!(got.replace(&remote, &local), want, "inspect {rel}");
        // inspect --json: the same fields, the fingerprint included (it names the data, not
        // where it lives: issue 18); only the location differs.
        args.push("--json");
        let mut want: serde_json::Value =
            serde_json::from_str(&s3.run_ok(&refs(&with(&args, &local)))).unwrap();
        let mut got: serde_json::Value =
            serde_json::from_str(&s3.run_ok(&refs(&with(&args, &remote)))).unwrap();
        assert_eq!(got["path"], remote.as_str(), "{rel}");
        assert!(got["fingerprint"].is_string(), "{rel}");
        for v in [&mut want, &mut got] {
            assert!(v.as_object_mut().unwrap().remove("path").is_some(), "{rel}");
        }
        assert_eq!(got, want, "inspect --json {rel}");
        // import: the storages read back alike.
        let (a, b) = (tmp.path().join(format!("local{i}")), tmp.path().join(format!("remote{i}")));
        for (from, out) in [(&local, &a), (&remote, &b)] {
            let mut args = vec!["import", from.as_str(), "--out", out.to_str().unwrap()];
            args.extend(&flags);
            s3.run_ok(&args);
        }
        let read = |d: &Path| {
            let mut args = vec!["batches", d.to_str().unwrap()];
            args.extend(config);
            s3.run_ok(&args)
        };
        assert_eq!(read(&b), read(&a), "import {rel}");
    }
    // MDS hashes verify from the store.
    let out = s3.run_ok(&["inspect", "--json", "--verify", &url("mds/tokens_zstd_sha1_xxh3")]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!((v["format"].as_str(), v["verified"].as_bool()), (Some("mds"), Some(true)));
    // import --out may be a URL too: the storage reads back as the local import does.
    let out_url = format!("s3://{BUCKET}/imported");
    s3.run_ok(&["import", &url("megatron/gpt2_text_document"), "--out", &out_url]);
    let local_out = tmp.path().join("gpt2");
    s3.run_ok(&["import", &sample("megatron/gpt2_text_document"), "--out", local_out.to_str().unwrap()]);
    let read = |d: &str| s3.run_ok(&["batches", d, "--seq-len", "3"]);
    assert_eq!(read(&out_url), read(local_out.to_str().unwrap()));
    let o = s3.run(&["import", &url("megatron/gpt2_text_document"), "--out", &out_url]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("already holds a storage"));
}

#[test]
fn remote_urls_llmc_and_megatron_orders_read_their_shards_and_prefixes_from_urls() {
    let Some(s3) =
        Server::start("remote_urls_llmc_and_megatron_orders_read_their_shards_and_prefixes_from_urls")
    else {
        return;
    };
    let order_local = repo("loader/tests/data/llmc_order/order_*.bin").to_str().unwrap().to_string();
    let order_url = format!("s3://{BUCKET}/llmc_order/order_*.bin");
    let cases: Vec<(Vec<&str>, &str, &str)> = vec![
        // llm.c, sequential and shuffled, over a glob of shards.
        (
            vec!["batches", "--order", "llmc", "{}", "--batch-size", "2", "--seq-len", "3", "--epochs", "2"],
            &order_local,
            &order_url,
        ),
        (
            vec![
                "batches",
                "--order",
                "llmc",
                "{}",
                "--llmc-shuffle",
                "--batch-size",
                "2",
                "--seq-len",
                "3",
                "--epochs",
                "3",
                "--world-size",
                "2",
                "--rank",
                "1",
            ],
            &order_local,
            &order_url,
        ),
        (
            vec!["batches", "--order", "llmc", "{}", "--seq-len", "2", "--batch-size", "1", "--epochs", "2"],
            "",
            "",
        ),
    ];
    for (args, local, remote) in &cases {
        let (local, remote) = if local.is_empty() {
            (sample("llmc/tiny_val_000000.bin"), url("llmc/tiny_val_000000.bin"))
        } else {
            (local.to_string(), remote.to_string())
        };
        let want = s3.run_ok(&refs(&with(args, &local)));
        assert!(want.lines().count() > 3, "{args:?}");
        assert_eq!(s3.run_ok(&refs(&with(args, &remote))), want, "{args:?}");
    }
    // Megatron: one prefix, and a weighted blend of two (the --data-path words are URLs).
    let one = ["megatron/gpt2_text_document"];
    let two = ["megatron/gpt2_text_document", "megatron/other_text_document"];
    for (prefixes, weighted) in [(&one[..], false), (&two[..], true), (&two[..], false)] {
        let data_path = |f: &dyn Fn(&str) -> String| {
            let words: Vec<String> = prefixes
                .iter()
                .enumerate()
                .map(|(i, p)| if weighted { format!("{} {}", [30, 70][i], f(p)) } else { f(p) })
                .collect();
            words.join(" ")
        };
        let (dl, dr) = (data_path(&sample), data_path(&url));
        let args = |d: &str| {
            with(
                &[
                    "batches",
                    "--order",
                    "megatron",
                    "--data-path",
                    "{}",
                    "--megatron-split",
                    "1,0,0",
                    "--seq-len",
                    "4",
                    "--seed",
                    "1234",
                    "--train-samples",
                    "10",
                    "--batch-size",
                    "2",
                ],
                d,
            )
        };
        let want = s3.run_ok(&refs(&args(&dl)));
        assert!(want.lines().count() >= 2, "{dl}");
        assert_eq!(s3.run_ok(&refs(&args(&dr))), want, "{dr}");
        // inspect --order megatron names each component by its location.
        let inspect = |d: &str| {
            with(
                &[
                    "inspect",
                    "-",
                    "--order",
                    "megatron",
                    "--data-path",
                    "{}",
                    "--megatron-split",
                    "1,0,0",
                    "--seq-length",
                    "4",
                    "--train-samples",
                    "10",
                ],
                d,
            )
        };
        let want = s3.run_ok(&refs(&inspect(&dl)));
        let mut got = s3.run_ok(&refs(&inspect(&dr)));
        for p in prefixes {
            assert!(got.contains(&url(p)), "{got}");
            got = got.replace(&url(p), &sample(p));
        }
        assert_eq!(got, want, "inspect --order megatron {dr}");
    }
}

#[test]
fn remote_urls_missing_or_short_objects_are_typed_errors_naming_the_url() {
    let Some(s3) = Server::start("remote_urls_missing_or_short_objects_are_typed_errors_naming_the_url")
    else {
        return;
    };
    let idx = std::fs::read(sample("megatron/gpt2_text_document.idx")).unwrap();
    let bin = std::fs::read(sample("megatron/gpt2_text_document.bin")).unwrap();
    let broken = s3.dir("broken");
    let at = |rel: &str| StorageLocation::parse(&format!("s3://{BUCKET}/broken/{rel}"));
    let megatron = ForeignOptions::new().format(ForeignFormat::Megatron);
    // The .bin is missing.
    broken.put("missing.idx", idx.clone()).unwrap();
    let e = ForeignDataset::open_at(&at("missing"), &s3.options(), &megatron).unwrap_err();
    let missing = format!("s3://{BUCKET}/broken/missing.bin");
    assert!(
        matches!(&e, InteropError::Storage(StorageError::Io { path, source }) if path == Path::new(&missing) && source.kind() == std::io::ErrorKind::NotFound),
        "{e:?}"
    );
    // The .bin is 2 bytes short of what the index says.
    broken.put("short.idx", idx).unwrap();
    broken.put("short.bin", bin[..bin.len() - 2].to_vec()).unwrap();
    let e = ForeignDataset::open_at(&at("short"), &s3.options(), &megatron).unwrap_err();
    assert!(
        matches!(&e, InteropError::Dataset { path, .. } if path == Path::new(&format!("s3://{BUCKET}/broken/short.bin"))),
        "{e:?}"
    );
    assert_eq!(
        e.foreign_error(),
        Some(&ForeignError::DataFileSize { have: bin.len() as u64 - 2, want: bin.len() as u64 })
    );
    // An llm.c shard cut inside its header; a glob matching nothing.
    let shard = std::fs::read(sample("llmc/tiny_val_000000.bin")).unwrap();
    broken.put("cut_000000.bin", shard[..100].to_vec()).unwrap();
    let e = ForeignDataset::open_at(
        &at("cut_*.bin"),
        &s3.options(),
        &ForeignOptions::new().format(ForeignFormat::Llmc),
    )
    .unwrap_err();
    assert!(
        matches!(&e, InteropError::Dataset { path, .. } if path == Path::new(&format!("s3://{BUCKET}/broken/cut_000000.bin"))),
        "{e:?}"
    );
    let nanogpt = ForeignOptions::new().format(ForeignFormat::NanoGpt).dtype(Primitive::U16);
    let e = ForeignDataset::open_at(&at("none_*.bin"), &s3.options(), &nanogpt).unwrap_err();
    assert!(
        matches!(e.foreign_error(), Some(ForeignError::NoFiles { pattern }) if pattern == &format!("s3://{BUCKET}/broken/none_*.bin")),
        "{e:?}"
    );
    // Through the command line: the message names the object's URL.
    for (args, names) in [
        (
            vec![
                "inspect".to_string(),
                format!("s3://{BUCKET}/broken/missing"),
                "--format".into(),
                "megatron".into(),
            ],
            missing.clone(),
        ),
        (
            vec![
                "batches".to_string(),
                "--order".into(),
                "megatron".into(),
                "--data-path".into(),
                format!("s3://{BUCKET}/broken/short"),
                "--seq-len".into(),
                "4".into(),
                "--train-samples".into(),
                "4".into(),
            ],
            format!("s3://{BUCKET}/broken/short.bin"),
        ),
        (
            vec![
                "batches".to_string(),
                "--order".into(),
                "llmc".into(),
                format!("s3://{BUCKET}/broken/cut_*.bin"),
                "--seq-len".into(),
                "4".into(),
            ],
            format!("s3://{BUCKET}/broken/cut_000000.bin"),
        ),
    ] {
        let o = s3.run(&refs(&args));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains(&names), "{args:?}: {err}");
    }
}

/// Arguments that name local files refuse a URL with what to do instead (no server needed:
/// nothing is read).
#[test]
fn remote_urls_local_only_arguments_refuse_urls_saying_what_to_do() {
    let u = "s3://bucket/somewhere";
    let cases: [(&[&str], &str); 5] = [
        (&["upload", u, "s3://bucket/other"], "LOCAL s3://bucket/somewhere: an object-store URL"),
        (&["demo", "--workdir", u], "--workdir s3://bucket/somewhere: an object-store URL"),
        (&["demo", "--corpus", u], "--corpus s3://bucket/somewhere: an object-store URL"),
        (&["ingest", "text", "--out", "/nonexistent/never-written", u], "download the input files first"),
        (
            &["batches", "--sequential", "--jsonl", u, "--tokens-field", "ids", "--seq-len", "4"],
            "a --sequential input s3://bucket/somewhere: an object-store URL",
        ),
    ];
    for (args, want) in cases {
        let o = bin().args(args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains(want), "{args:?}: {err}");
    }
}
