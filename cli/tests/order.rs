//! `guideloom batches --order megatron|llmc` (issue 14): Megatron-Core's and llm.c's sample
//! orders through the binary, with the exact samples megatron-core 0.16.1 and llm.c's C
//! loader give for the interop samples.

use std::path::PathBuf;

use crate::cli::run_ok;

fn sample(rel: &str) -> String {
    let p: PathBuf = guideloom_testkit::repo_root().join("storage/tests/data/interop").join(rel);
    p.to_str().unwrap().to_string()
}

fn lines(args: &[&str]) -> Vec<String> {
    String::from_utf8(run_ok(args).stdout).unwrap().lines().map(str::to_string).collect()
}

#[test]
fn megatron_order_prints_gpt_dataset_samples_and_resumes_from_consumed_samples() {
    let prefix = sample("megatron/gpt2_text_document");
    let base = [
        "batches",
        "--order",
        "megatron",
        "--data-path",
        &prefix,
        "--megatron-split",
        "1,0,0",
        "--seq-length",
        "4",
        "--seed",
        "1234",
        "--train-samples",
        "4",
    ];
    let mut first = base.to_vec();
    first.extend(["--batch-size", "2"]);
    assert_eq!(
        lines(&first),
        [
            r#"{"batch":0,"epoch":0,"samples":[0,1],"tokens":[[101,102,103,50256,201],[302,303,304,50256,401]]}"#,
            r#"{"batch":1,"epoch":0,"samples":[2,3],"tokens":[[201,202,50256,301,302],[401,50256,201,202,50256]]}"#,
            r#"{"batch":2,"epoch":0,"samples":[4,5],"tokens":[[304,50256,401,50256,101],[50256,301,302,303,304]]}"#,
        ]
    );
    // Rank 1 of 2 with micro batch 1 after 2 consumed samples: sample 3, then 5.
    let mut resumed = base.to_vec();
    resumed.extend(["--batch-size", "1", "--world-size", "2", "--rank", "1", "--consumed-samples", "2"]);
    assert_eq!(
        lines(&resumed),
        [
            r#"{"batch":1,"epoch":0,"samples":[3],"tokens":[[401,50256,201,202,50256]]}"#,
            r#"{"batch":2,"epoch":0,"samples":[5],"tokens":[[50256,301,302,303,304]]}"#,
        ]
    );
    // A count that is not whole steps (issue 14: it was refused) continues at sample 3 in
    // whole steps of 2: samples 3 and 4; sample 5 alone is an incomplete step, dropped.
    let mut odd = first.clone();
    odd.extend(["--consumed-samples", "3"]);
    assert_eq!(
        lines(&odd),
        [
            r#"{"batch":1,"epoch":0,"samples":[3,4],"tokens":[[401,50256,201,202,50256],[304,50256,401,50256,101]]}"#
        ]
    );
}

#[test]
fn megatron_blend_prints_each_samples_dataset_in_sources() {
    let data_path =
        format!("30 {} 70 {}", sample("megatron/gpt2_text_document"), sample("megatron/other_text_document"));
    let out = lines(&[
        "batches",
        "--order",
        "megatron",
        "--data-path",
        &data_path,
        "--megatron-split",
        "1,0,0",
        "--seq-len",
        "4",
        "--seed",
        "1234",
        "--train-samples",
        "10",
        "--batch-size",
        "5",
        "--no-tokens",
    ]);
    // The greedy schedule of 0.3 / 0.7 over 10 samples.
    assert_eq!(
        out,
        [
            r#"{"batch":0,"epoch":0,"samples":[0,1,2,3,4],"sources":[1,0,1,1,0]}"#,
            r#"{"batch":1,"epoch":0,"samples":[5,6,7,8,9],"sources":[1,1,0,1,1]}"#,
        ]
    );
}

/// `--data-path "A B"` without weights: Megatron's exhaustive blend of one epoch of each
/// (3 and 2 samples: sources 0, 1, 0, 1, 0), each sample its component's own.
#[test]
fn megatron_prefixes_without_weights_blend_exhaustively() {
    let (a, b) = (sample("megatron/gpt2_text_document"), sample("megatron/other_text_document"));
    let run = |data_path: &str| {
        lines(&[
            "batches",
            "--order",
            "megatron",
            "--data-path",
            data_path,
            "--megatron-split",
            "1,0,0",
            "--seq-length",
            "4",
            "--seed",
            "1234",
            "--batch-size",
            "1",
        ])
    };
    let blend = run(&format!("{a} {b}"));
    let sources: Vec<i64> = blend
        .iter()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["sources"][0].as_i64().unwrap())
        .collect();
    assert_eq!(sources, [0, 1, 0, 1, 0]);
    let (ta, tb) = (tokens_of_rows(&run(&a)), tokens_of_rows(&run(&b)));
    assert_eq!(
        tokens_of_rows(&blend),
        [ta[0].clone(), tb[0].clone(), ta[1].clone(), tb[1].clone(), ta[2].clone()]
    );
    assert_eq!(ta[0], [201, 202, 50256, 301, 302]);
}

/// The one sample of each batch line of `batches --order megatron --batch-size 1`.
fn tokens_of_rows(lines: &[String]) -> Vec<Vec<i64>> {
    lines
        .iter()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["tokens"][0].as_array().unwrap().iter().map(|t| t.as_i64().unwrap()).collect()
        })
        .collect()
}

#[test]
fn llmc_order_prints_llmc_batches_and_wraps() {
    let out = lines(&[
        "batches",
        "--order",
        "llmc",
        &sample("llmc/tiny_val_000000.bin"),
        "--seq-len",
        "2",
        "--batch-size",
        "1",
        "--epochs",
        "2",
        "--max-batches",
        "4",
    ]);
    assert_eq!(
        out,
        [
            r#"{"batch":0,"epoch":0,"windows":[0],"tokens":[50256,101,102]}"#,
            r#"{"batch":1,"epoch":0,"windows":[1],"tokens":[102,103,50256]}"#,
            r#"{"batch":2,"epoch":0,"windows":[2],"tokens":[50256,201,202]}"#,
            r#"{"batch":3,"epoch":1,"windows":[0],"tokens":[50256,101,102]}"#,
        ]
    );
}

#[test]
fn inspect_order_megatron_prints_index_sizes_and_epochs() {
    let prefix = sample("megatron/gpt2_text_document");
    let out = run_ok(&[
        "inspect",
        &prefix,
        "--order",
        "megatron",
        "--megatron-split",
        "1,0,0",
        "--seq-length",
        "4",
        "--seed",
        "1234",
        "--train-samples",
        "4",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["samples"], 6);
    let c = &v["components"][0];
    assert_eq!(
        [
            &c["epochs"],
            &c["separate_final_epoch"],
            &c["document_index"],
            &c["sample_index"],
            &c["shuffle_index"]
        ],
        [
            &serde_json::json!(2),
            &serde_json::json!(true),
            &serde_json::json!(8),
            &serde_json::json!(7),
            &serde_json::json!(6)
        ]
    );
    assert_eq!(c["range"], serde_json::json!([0, 4]));
    assert!(v.get("blend").is_none());
}

/// The llm.c test shards and llm.c's own batches for them (loader/tests/data/llmc_order,
/// made by its generate.sh with llm.c's DataLoader): the tokens of each batch of the
/// configuration whose "case" line is `case`.
fn llmc_order(case: &str) -> (String, Vec<Vec<i64>>) {
    let dir = guideloom_testkit::repo_root().join("loader/tests/data/llmc_order");
    let text = std::fs::read_to_string(dir.join("expected.txt")).unwrap();
    let mut batches = Vec::new();
    let mut on = false;
    for line in text.lines() {
        if line.starts_with("case") {
            on = line == case;
        } else if on {
            batches.push(line.split_whitespace().skip(2).map(|w| w.parse().unwrap()).collect());
        }
    }
    (dir.join("order_*.bin").to_str().unwrap().to_string(), batches)
}

fn tokens_of(lines: &[String]) -> Vec<Vec<i64>> {
    lines
        .iter()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["tokens"].as_array().unwrap().iter().map(|t| t.as_i64().unwrap()).collect()
        })
        .collect()
}

/// Runs `args` twice: `first` batches with --save-state, then the rest with --resume (and
/// `resume_extra`); returns the two outputs joined.
fn interrupted(args: &[&str], first: u64, resume_extra: &[&str]) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let state = state.to_str().unwrap();
    let first = first.to_string();
    let mut a = args.to_vec();
    a.extend(["--max-batches", &first, "--save-state", state]);
    let mut out = lines(&a);
    let mut b = args.to_vec();
    b.extend(["--resume", state]);
    b.extend(resume_extra);
    out.extend(lines(&b));
    out
}

#[test]
fn megatron_order_resumes_from_its_saved_state_as_if_uninterrupted() {
    let prefix = sample("megatron/gpt2_text_document");
    for consumed in ["0", "3"] {
        let args = [
            "batches",
            "--order",
            "megatron",
            "--data-path",
            &prefix,
            "--megatron-split",
            "1,0,0",
            "--seq-length",
            "2",
            "--seed",
            "7",
            "--train-samples",
            "23",
            "--batch-size",
            "2",
            "--consumed-samples",
            consumed,
        ];
        let whole = lines(&args);
        assert!(whole.len() >= 9, "{consumed}: {} batches", whole.len());
        for k in [1, 4, whole.len() as u64 - 1] {
            assert_eq!(interrupted(&args, k, &[]), whole, "consumed {consumed}, stopped after {k}");
        }
    }
}

#[test]
fn llmc_shuffled_order_prints_llmcs_batches() {
    let (shards, want) = llmc_order("case 2 3 0 1 1");
    let out = lines(&[
        "batches",
        "--order",
        "llmc",
        &shards,
        "--llmc-shuffle",
        "--batch-size",
        "2",
        "--seq-len",
        "3",
        "--epochs",
        "3",
    ]);
    // 6 + 4 + 8 + 5 batches per epoch.
    assert_eq!(out.len(), 69);
    assert_eq!(tokens_of(&out), want[..69]);
    assert!(out[23].starts_with(r#"{"batch":23,"epoch":1,"#), "{}", out[23]);
    // Process 1 of 2 has its own order (seed 43).
    let (_, want) = llmc_order("case 1 4 1 2 1");
    let out = lines(&[
        "batches",
        "--order",
        "llmc",
        &shards,
        "--llmc-shuffle",
        "--batch-size",
        "1",
        "--seq-len",
        "4",
        "--world-size",
        "2",
        "--rank",
        "1",
        "--epochs",
        "2",
    ]);
    assert_eq!(tokens_of(&out), want[..36]);
}

#[test]
fn llmc_order_resumes_from_saved_state_and_from_llmc_checkpoints() {
    let (shards, _) = llmc_order("case 2 3 0 1 1");
    for shuffle in [true, false] {
        let mut args = llmc_batches(&shards, &["--world-size", "2", "--rank", "1", "--epochs", "2"]);
        if shuffle {
            args.push("--llmc-shuffle");
        }
        let whole = lines(&args);
        assert_eq!(whole.len(), 36);
        for k in [1, 17, 18, 30] {
            assert_eq!(interrupted(&args, k, &[]), whole, "shuffle {shuffle}, stopped after {k}");
        }
    }
    let dir = guideloom_testkit::repo_root().join("loader/tests/data/llmc_order");
    // llm.c's checkpoint of process 1 of 2 after 25 shuffled batches (epoch 1), and its
    // sequential one after 7: the next batches are llm.c's.
    for (case, file, after, extra) in [
        ("case 1 4 1 2 1", "state_shuffled_p2_r1.bin", 25usize, vec!["--llmc-shuffle"]),
        ("case 1 4 1 2 0", "state_sequential_p2_r1.bin", 7, vec![]),
    ] {
        let (_, want) = llmc_order(case);
        let state = dir.join(file);
        let mut args = llmc_batches(
            &shards,
            &["--world-size", "2", "--rank", "1", "--epochs", "2", "--llmc-state", state.to_str().unwrap()],
        );
        args.extend(extra.iter());
        let out = lines(&args);
        assert_eq!(tokens_of(&out), want[after..36], "{file}");
        assert!(out[0].starts_with(&format!(r#"{{"batch":{after},"#)), "{}", out[0]);
    }
    // The position flags: sequential shard 2, batch 1 of process 1 of 2 = after 5 + 3 + 1.
    let (_, want) = llmc_order("case 1 4 1 2 0");
    let out = lines(&llmc_batches(
        &shards,
        &["--world-size", "2", "--rank", "1", "--llmc-shard-idx", "2", "--llmc-sample-idx", "1"],
    ));
    assert_eq!(tokens_of(&out), want[9..18]);
    // A shuffled position in an epoch the run does not list, or more epochs than can be
    // listed, is refused.
    for (extra, why) in [
        (
            &["--llmc-shard-idx", "0", "--llmc-sample-idx", "0", "--llmc-epoch", "2"][..],
            "--llmc-epoch 2 is not one of the 1 --epochs",
        ),
        (&["--epochs", "1000000000000"][..], "ask for fewer --epochs"),
    ] {
        fails_with(&[llmc_batches(&shards, &["--llmc-shuffle"]), extra.to_vec()].concat(), why);
    }
    // A checkpoint of another rank, or a shuffled one read as sequential, is refused.
    let state = dir.join("state_shuffled_p2_r0.bin");
    for (extra, why) in [
        (&["--rank", "1", "--llmc-shuffle"][..], "written by rank 0 of 2 processes"),
        (&["--rank", "0", "--epochs", "2"][..], "the run shuffled; add --llmc-shuffle"),
    ] {
        let args = llmc_batches(&shards, &["--world-size", "2", "--llmc-state", state.to_str().unwrap()]);
        fails_with(&[args, extra.to_vec()].concat(), why);
    }
}

/// `batches --order llmc SHARDS --batch-size 1 --seq-len 4` and `extra`.
fn llmc_batches<'a>(shards: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["batches", "--order", "llmc", shards, "--batch-size", "1", "--seq-len", "4"];
    args.extend_from_slice(extra);
    args
}

/// Runs `guideloom args` and checks that it fails saying `why`.
fn fails_with(args: &[&str], why: &str) {
    let out = crate::cli::bin().args(args).output().unwrap();
    assert!(!out.status.success(), "{args:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains(why), "{}", String::from_utf8_lossy(&out.stderr));
}

/// Issue 34 item 2: `--order megatron` without `--seed` is Megatron's own default seed (1234,
/// megatron-core's `RNGConfig.seed`), not the loader's 0; the other Megatron-mode defaults
/// (split "969,30,1", surplus 0.005, the extra token) are megatron-core's too.
#[test]
fn issue34_megatron_order_defaults_to_megatrons_seed() {
    let prefix = sample("megatron/gpt2_text_document");
    let base = ["batches", "--order", "megatron", "--data-path", &prefix, "--megatron-split", "1,0,0"];
    let base = [&base[..], &["--seq-length", "4", "--train-samples", "4", "--batch-size", "2"]].concat();
    let with = |seed: Option<&str>| {
        let mut args = base.clone();
        if let Some(s) = seed {
            args.extend(["--seed", s]);
        }
        lines(&args)
    };
    assert_eq!(with(None), with(Some("1234")));
    assert_ne!(with(None), with(Some("0")));
    // The seed megatron-core's test order above was computed with (seed 1234): the first batch.
    assert_eq!(
        with(None)[0],
        r#"{"batch":0,"epoch":0,"samples":[0,1],"tokens":[[101,102,103,50256,201],[302,303,304,50256,401]]}"#
    );
    // inspect --order megatron reports the defaults it used.
    let out =
        String::from_utf8(run_ok(&["inspect", &prefix, "--order", "megatron", "--seq-length", "4"]).stdout)
            .unwrap();
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!((v["seed"].as_u64(), v["split"].as_str()), (Some(1234), Some("969,30,1")));
}
