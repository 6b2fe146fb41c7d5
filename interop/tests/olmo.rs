//! OLMo / Dolma token files (`src/layouts/olmo.rs`): documents from their `.csv.gz` metadata or
//! a delimiter scan, FSL instances, and the refusals.

use guideloom_formats::{IntTokenFormat, Primitive};
use guideloom_interop::{DocumentDelimiter, ForeignDataset, ForeignError, ForeignFormat};
use guideloom_storage::ReadOptions;

use crate::common::{assert_foreign, check, open, opts, sample};

#[test]
fn olmo_token_files_with_their_metadata() {
    let options = opts(ForeignFormat::Olmo).dtype(Primitive::U16);
    let d = open("olmo/part-0-00000.npy", &options);
    let docs: &[&[i64]] =
        &[&[101, 102, 103, 50279], &[201, 202, 50279], &[301, 302, 303, 304, 50279], &[401, 50279]];
    check(&d, &docs.concat(), Some(docs));
    assert_eq!(d.documents(), Some(&[0, 4, 7, 12, 14][..]));
    // The same boundaries from an EOS scan when the metadata is not there.
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(sample("olmo/part-0-00000.npy"), dir.path().join("part-0-00000.npy")).unwrap();
    let scanned = ForeignDataset::open(
        dir.path().join("part-0-00000.npy"),
        &options.clone().delimiter(DocumentDelimiter::Ends(50279)),
    )
    .unwrap();
    assert_eq!(scanned.documents(), d.documents());
    // OLMo-core's FSL instances of L = 4 (the tail [401, 50279] dropped).
    let r = d.reader(IntTokenFormat::new(Primitive::U16).unwrap(), ReadOptions::default()).unwrap();
    assert_eq!(
        r.read_many(&d.file_windows(4, 4).unwrap()).unwrap(),
        [vec![101, 102, 103, 50279], vec![201, 202, 50279, 301], vec![302, 303, 304, 50279]]
    );
    let d = open("olmo/part-1-00000.npy", &opts(ForeignFormat::Olmo).dtype(Primitive::U32));
    check(
        &d,
        &[101, 102, 103, 100257, 201, 202, 100257],
        Some(&[&[101, 102, 103, 100257], &[201, 202, 100257]]),
    );
}

#[test]
fn olmo_refuses_npy_and_metadata_past_the_tokens() {
    let e = ForeignDataset::open(sample("npy/v1_u2.npy"), &opts(ForeignFormat::Olmo).dtype(Primitive::U16))
        .unwrap_err();
    assert_foreign(&e, "v1_u2.npy", &ForeignError::LooksLikeNpy);
    let e = ForeignDataset::open(sample("olmo/part-0-00000.npy"), &opts(ForeignFormat::Npy)).unwrap_err();
    assert!(matches!(e.foreign_error(), Some(ForeignError::BadMagic { .. })), "{e}");
    // AC-OLMO-04: the last row edited to end at 15 of 14 tokens.
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(sample("olmo/part-0-00000.npy"), dir.path().join("p.npy")).unwrap();
    let csv = "0,4,doc0,toy.jsonl.gz,0\n4,7,doc1,toy.jsonl.gz,1\n7,12,doc2,toy.jsonl.gz,2\n12,15,doc3,toy.jsonl.gz,3\n";
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut gz, csv.as_bytes()).unwrap();
    std::fs::write(dir.path().join("p.csv.gz"), gz.finish().unwrap()).unwrap();
    let e = ForeignDataset::open(dir.path().join("p.npy"), &opts(ForeignFormat::Olmo).dtype(Primitive::U16))
        .unwrap_err();
    assert_foreign(
        &e,
        "p.csv.gz",
        &ForeignError::MetadataOutOfRange { row: 3, start: 12, end: 15, tokens: 14 },
    );
}
