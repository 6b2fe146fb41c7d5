//! WebDataset (issue 28 item 3): the shards written by `webdataset` 1.0.2
//! (`tests/data/samples2/webdataset`, AC-WDS-01..03 of `tests/data/samples2/FORMATS.md` §8.5)
//! read in order by the sequential loader's source and as a token stream, against
//! `expected.json`; the malformed tars' errors.

use guideloom_formats::Primitive;
use guideloom_interop::{ForeignDataset, ForeignError, ForeignFormat, ForeignOptions, WebDatasetShards};
use guideloom_loader::sequential::{SequentialLoader, SequentialSource, ShardPos, ShardReader};

use crate::records_samples::{
    assert_case, assert_documents, case_error, documents, expected, open2, sample2, sequential_records,
};

fn opts() -> ForeignOptions {
    ForeignOptions::new().format(ForeignFormat::WebDataset)
}

fn all_records(shards: &WebDatasetShards) -> Vec<Vec<i64>> {
    sequential_records(shards).unwrap()
}

#[test]
fn issue28_ac_wds_01_five_pax_shards_match_expected() {
    let want = expected("webdataset");
    let shards =
        WebDatasetShards::open(sample2("webdataset/shards").to_str().unwrap(), &ForeignOptions::new())
            .unwrap();
    let files: Vec<String> = shards
        .files()
        .iter()
        .map(|f| format!("shards/{}", f.file_name().unwrap().to_str().unwrap()))
        .collect();
    let want_files: Vec<&str> =
        want["shards"]["files"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(files, want_files);
    let docs = all_records(&shards);
    assert_documents(&want["shards"], &docs);
    // Sample 17's other fields.
    let samples = shards.samples(0).unwrap();
    assert_eq!(samples.len(), 20);
    let s = &samples[17];
    assert_eq!(s.key, "doc000017");
    assert_eq!(s.fields.keys().collect::<Vec<_>>(), ["cls", "json", "npy", "txt"]);
    assert_eq!(s.fields["cls"], b"2");
    let json: serde_json::Value = serde_json::from_slice(&s.fields["json"]).unwrap();
    assert_eq!(json, want["shards"]["json_17"]);
    assert_eq!(s.fields["txt"], want["shards"]["txt_17"].as_str().unwrap().as_bytes());
    // As a token stream: documents = samples, dtype from the .npy headers.
    let data = open2("webdataset/shards", &opts());
    assert_eq!(data.dtype(), Primitive::I32);
    assert_eq!(documents(&data), docs);
    let counts = shards.count_lengths().unwrap().shards().iter().map(|s| s.len_hint).collect::<Vec<_>>();
    assert_eq!(counts, [Some(20); 5]);
}

#[test]
fn issue28_ac_wds_02_gzip_shard() {
    let want = expected("webdataset");
    let path = sample2("webdataset/train_gz-000000.tar.gz");
    let shards = WebDatasetShards::open(path.to_str().unwrap(), &ForeignOptions::new()).unwrap();
    let docs = all_records(&shards);
    assert_documents(&want["train_gz-000000.tar.gz"], &docs);
    let first = all_records(
        &WebDatasetShards::open(sample2("webdataset/shards").to_str().unwrap(), &ForeignOptions::new())
            .unwrap(),
    );
    assert_eq!(docs[..], first[..30]);
    assert_eq!(guideloom_interop::detect(&path).unwrap(), ForeignFormat::WebDataset);
}

#[test]
fn issue28_ac_wds_03_long_pax_keys_and_dotted_directories() {
    let want = expected("webdataset");
    let path = sample2("webdataset/long_keys.tar");
    let o = ForeignOptions::new().column("input_ids.npy");
    let shards = WebDatasetShards::open(path.to_str().unwrap(), &o).unwrap();
    let docs = all_records(&shards);
    assert_documents(&want["long_keys.tar"], &docs);
    let samples = shards.samples(0).unwrap();
    let keys: Vec<&str> = samples.iter().map(|s| s.key.as_str()).collect();
    let want_keys: Vec<&str> =
        want["long_keys.tar"]["keys"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(keys, want_keys);
    assert_eq!(samples[0].fields.keys().collect::<Vec<_>>(), ["input_ids.npy", "meta.json"]);
    let data = open2("webdataset/long_keys.tar", &opts().column("input_ids.npy"));
    assert_eq!((data.dtype(), data.elements()), (Primitive::U16, 137));
    // Without the field named, the default `npy` field is missing.
    let e = ForeignDataset::open(&path, &opts()).unwrap_err();
    assert!(
        matches!(e.foreign_error(), Some(ForeignError::MissingField { field, .. }) if field == "npy"),
        "{e}"
    );
    assert!(e.to_string().contains("no field npy"), "{e}");
}

#[test]
fn issue28_webdataset_sequential_loader_resumes_exactly_over_ranks() {
    let shards =
        WebDatasetShards::open(sample2("webdataset/shards").to_str().unwrap(), &ForeignOptions::new())
            .unwrap();
    // Positions restart a shard at a sample.
    let mut r = shards.open(1, ShardPos::START).unwrap();
    for _ in 0..7 {
        r.next_record().unwrap().unwrap();
    }
    let at = r.pos();
    let eighth = r.next_record().unwrap();
    assert_eq!(shards.open(1, at).unwrap().next_record().unwrap(), eighth);
    let loader = SequentialLoader::builder(shards)
        .pack(32)
        .batch_size(2)
        .window_shuffle(8)
        .seed(3)
        .shard(1, 2)
        .build()
        .unwrap();
    let all: Vec<_> = loader.iter().map(|b| b.unwrap().data).collect();
    let mut it = loader.iter();
    for _ in 0..4 {
        it.next().unwrap().unwrap();
    }
    let rest: Vec<_> = loader.iter_from(&it.state()).unwrap().map(|b| b.unwrap().data).collect();
    assert_eq!(rest[..], all[4..]);
}

#[test]
fn issue28_malformed_tars_give_their_errors() {
    for name in ["path_traversal", "symlink_member", "bad_header_checksum", "truncated_member", "float_npy"] {
        let rel = format!("webdataset/{name}.tar");
        let case = case_error(&rel);
        let e = ForeignDataset::open(sample2(&format!("malformed/{rel}")), &opts()).unwrap_err();
        assert_case(&e, &format!("{name}.tar"), &case);
    }
}

/// A GNU tar (as GNU tar writes long names: an `L` member before the header) of two samples
/// whose keys are longer than 100 bytes, with a directory member passed over.
#[test]
fn issue28_gnu_long_names_and_directory_members() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gnu.tar");
    let npy = |ids: &[u16]| -> Vec<u8> {
        let header = format!("{{'descr': '<u2', 'fortran_order': False, 'shape': ({},), }}", ids.len());
        let mut h = header.into_bytes();
        while (10 + h.len() + 1) % 64 != 0 {
            h.push(b' ');
        }
        h.push(b'\n');
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend_from_slice(&(h.len() as u16).to_le_bytes());
        out.extend_from_slice(&h);
        out.extend(ids.iter().flat_map(|t| t.to_le_bytes()));
        out
    };
    let long = "d/".to_string() + &"k".repeat(120);
    {
        let mut b = tar::Builder::new(std::fs::File::create(&path).unwrap());
        let mut d = tar::Header::new_gnu();
        d.set_entry_type(tar::EntryType::Directory);
        d.set_size(0);
        d.set_mode(0o755);
        b.append_data(&mut d, "d/", std::io::empty()).unwrap();
        for (i, ids) in [[1u16, 2, 3].as_slice(), &[4, 5]].iter().enumerate() {
            let data = npy(ids);
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o444);
            // append_data writes a GNU `L` long-name member for names over 100 bytes.
            b.append_data(&mut h, format!("{long}{i}.npy"), data.as_slice()).unwrap();
        }
        b.finish().unwrap();
    }
    let bytes = std::fs::read(&path).unwrap();
    assert!(bytes.windows(13).any(|w| w == b"././@LongLink"), "a GNU long-name member");
    let shards = WebDatasetShards::open(path.to_str().unwrap(), &ForeignOptions::new()).unwrap();
    let samples = shards.samples(0).unwrap();
    assert_eq!(
        samples.iter().map(|s| s.key.clone()).collect::<Vec<_>>(),
        [format!("{long}0"), format!("{long}1")]
    );
    assert_eq!(all_records(&shards), [vec![1, 2, 3], vec![4, 5]]);
}

/// Issue 33 (mutants of `WebDatasetSampleReader::next_sample` and `pos`, the `Debug` of its
/// samples and tar members, and the source's fingerprint): a sample reader gives shard 0's
/// samples with every field, as `samples(0)` lists them; reopened at the position it reported
/// after sample 0 it goes on with sample 1; it ends after 20. Its debug form shows the sample
/// and the tar member it is at. Two sources over other shards have other fingerprints.
#[test]
fn issue33_foreign_wds_a_sample_reader_resumes_at_its_position() {
    let path = sample2("webdataset/shards");
    let shards = WebDatasetShards::open(path.to_str().unwrap(), &ForeignOptions::new()).unwrap();
    let all = shards.samples(0).unwrap();
    let mut r = shards.open_samples(0, ShardPos::START).unwrap();
    assert_eq!(r.next_sample().unwrap().as_ref(), Some(&all[0]));
    let after = r.pos();
    assert_eq!(after.record, 1);
    assert!(after.offset > 0, "{after:?}");
    let debug = format!("{r:?}");
    assert!(debug.contains("samples: Samples { record: 1, members: Members { pos: "), "{debug}");
    assert!(debug.contains(", member: "), "{debug}");
    let mut resumed = shards.open_samples(0, after).unwrap();
    let mut rest = Vec::new();
    while let Some(s) = resumed.next_sample().unwrap() {
        rest.push(s);
    }
    assert_eq!(rest, all[1..]);
    assert_eq!(resumed.pos().record, 20);

    let one = WebDatasetShards::open(path.join("train-000000.tar").to_str().unwrap(), &ForeignOptions::new())
        .unwrap();
    let other =
        WebDatasetShards::open(path.join("train-000001.tar").to_str().unwrap(), &ForeignOptions::new())
            .unwrap();
    let prints = [shards.fingerprint(), one.fingerprint(), other.fingerprint()];
    assert!(prints.iter().all(|&f| f > 1), "{prints:?}");
    assert!(prints[0] != prints[1] && prints[1] != prints[2] && prints[0] != prints[2], "{prints:?}");
}
