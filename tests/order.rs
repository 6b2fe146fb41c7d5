//! `guideloom batches --order megatron|llmc` (issue 14): Megatron-Core's and llm.c's sample
//! orders through the binary, with the exact samples megatron-core 0.16.1 and llm.c's C
//! loader give for the interop samples.

use std::path::{Path, PathBuf};

use crate::cli::{bin, run_ok};

fn sample(rel: &str) -> String {
    let p: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join("storage/tests/data/interop").join(rel);
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
    // A count that is not whole steps is refused.
    let mut odd = first.clone();
    odd.extend(["--consumed-samples", "3"]);
    let out = bin().args(&odd).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("global batch 2"));
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
