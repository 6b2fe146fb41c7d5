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

/// `text` gzipped.
fn gz(text: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    std::io::Write::write_all(&mut gz, text).unwrap();
    gz.finish().unwrap()
}

/// Writes OLMo's raw u16 `tokens` as `<stem>.npy` under `dir`, with `csv` as its gzipped
/// `<stem>.csv.gz`; returns the token file's path.
fn olmo_file(dir: &std::path::Path, stem: &str, tokens: &[u16], csv: &[u8]) -> std::path::PathBuf {
    let path = dir.join(format!("{stem}.npy"));
    std::fs::write(&path, tokens.iter().flat_map(|t| t.to_le_bytes()).collect::<Vec<u8>>()).unwrap();
    std::fs::write(dir.join(format!("{stem}.csv.gz")), gz(csv)).unwrap();
    path
}

fn open_u16(path: &std::path::Path) -> Result<ForeignDataset, guideloom_interop::InteropError> {
    ForeignDataset::open(path, &opts(ForeignFormat::Olmo).dtype(Primitive::U16))
}

/// Issue 33 (mutant of `base += elements`): a directory of two token files is one stream, so
/// the second file's document ends (0..1, 1..4 in its own metadata) follow the first's 3
/// tokens.
#[test]
fn issue33_foreign_olmo_a_second_file_s_documents_follow_the_first_s_tokens() {
    let dir = tempfile::tempdir().unwrap();
    olmo_file(dir.path(), "a", &[1, 2, 3], b"0,2\n2,3\n");
    olmo_file(dir.path(), "b", &[4, 5, 6, 7], b"0,1,id,src,0\n1,4,id,src,1\n");
    let d = open_u16(dir.path()).unwrap();
    assert_eq!(d.documents(), Some(&[0, 2, 3, 4, 7][..]));
    check(&d, &[1, 2, 3, 4, 5, 6, 7], Some(&[&[1, 2], &[3], &[4], &[5, 6, 7]]));
}

/// Issue 33 (mutants of the row check `start > end || end > tokens || (start >= tokens &&
/// tokens > 0)`): an empty document is a row with `start == end` (read), `start > end` is
/// refused; a row may not start at the end of a file of tokens, but an empty file's one row
/// is `0,0`.
#[test]
fn issue33_foreign_olmo_metadata_rows_at_their_boundaries() {
    let dir = tempfile::tempdir().unwrap();
    let five = [1, 2, 3, 4, 5];
    let d = open_u16(&olmo_file(dir.path(), "empty_first", &five, b"0,0\n0,5\n")).unwrap();
    assert_eq!(d.documents(), Some(&[0, 0, 5][..]));
    let d = open_u16(&olmo_file(dir.path(), "empty_inside", &five, b"0,2\n2,2\n2,5\n")).unwrap();
    assert_eq!(d.documents(), Some(&[0, 2, 2, 5][..]));
    for (stem, csv, row, start, end) in
        [("backwards", &b"0,3\n3,2\n2,5\n"[..], 1, 3, 2), ("empty_at_end", b"0,5\n5,5\n", 1, 5, 5)]
    {
        let e = open_u16(&olmo_file(dir.path(), stem, &five, csv)).unwrap_err();
        assert_foreign(
            &e,
            &format!("{stem}.csv.gz"),
            &ForeignError::MetadataOutOfRange { row, start, end, tokens: 5 },
        );
    }
    let d = open_u16(&olmo_file(dir.path(), "no_tokens", &[], b"0,0\n")).unwrap();
    assert_eq!(d.documents(), Some(&[0, 0][..]));
}

/// Issue 33 (mutants of the inflated size check `text > cap`): a `.csv.gz` inflates to at most
/// `inflate_bound` of its compressed size (100 times plus 1 MiB). A text of exactly the bound
/// (one row, then spaces) is read; one byte more is refused. The padding is solved for: the
/// bound moves with the compressed size.
#[test]
fn issue33_foreign_olmo_metadata_inflates_up_to_its_bound_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let row = b"0,5\n";
    for extra in [0u64, 1] {
        let mut len = 1u64 << 20;
        let text = loop {
            let mut text = row.to_vec();
            text.resize(len as usize, b' ');
            let want = guideloom_formats::inflate_bound(gz(&text).len() as u64) + extra;
            if want == len {
                break text;
            }
            len = want;
        };
        let path = olmo_file(dir.path(), &format!("pad{extra}"), &[1, 2, 3, 4, 5], &text);
        let packed = std::fs::metadata(dir.path().join(format!("pad{extra}.csv.gz"))).unwrap().len();
        let cap = guideloom_formats::inflate_bound(packed);
        assert_eq!(text.len() as u64, cap + extra);
        match (extra, open_u16(&path)) {
            (0, Ok(d)) => assert_eq!(d.documents(), Some(&[0, 5][..])),
            (1, Err(e)) => assert_foreign(
                &e,
                "pad1.csv.gz",
                &ForeignError::DecompressionFailed {
                    reason: format!("{packed} compressed bytes inflate past {cap} bytes"),
                },
            ),
            (_, other) => panic!(
                "{extra} byte(s) past the bound: {:?}",
                other.map(|d| d.documents().map(<[u64]>::to_vec))
            ),
        }
    }
}
