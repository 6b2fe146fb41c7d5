//! The JSON Lines and text sequential sources of `guideloom::ingest` (issue 17, item 11):
//! reading a corpus in order with on-the-fly tokenization gives the tokens `ingest` plus the
//! indexed loader give.

use std::path::{Path, PathBuf};

use guideloom::formats::TokenFormat;
use guideloom::ingest::{
    ingest_jsonl, ingest_sequential, ingest_text, split_text, DtypeChoice, IngestOptions, JsonlField,
    JsonlShards, Split, Target, TextShards, Tokenizer, WriteOptions,
};
use guideloom::loader::sequential::{
    Dropped, SequentialEnd, SequentialLoader, SequentialSource, SequentialState, ShardPos, ShardReader,
};
use guideloom::loader::{Loader, TokenWindows};
use guideloom::storage::{StreamReader, Window};

fn austen(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/austen").join(name)
}

/// Three JSON Lines files of the first 90 paragraphs of Persuasion (30 each), field `text`,
/// with a blank line in the middle of the second file.
fn persuasion_jsonl(dir: &Path) -> Vec<PathBuf> {
    let text = std::fs::read_to_string(austen("persuasion.txt")).unwrap();
    let blocks = split_text(&text, Split::BlankLine);
    (0..3)
        .map(|f| {
            let mut lines = String::new();
            for (i, (_, block)) in blocks[30 * f..30 * (f + 1)].iter().enumerate() {
                if f == 1 && i == 15 {
                    lines.push('\n');
                }
                lines.push_str(&serde_json::json!({ "text": block, "n": i }).to_string());
                lines.push('\n');
            }
            let path = dir.join(format!("part{f}.jsonl"));
            std::fs::write(&path, lines).unwrap();
            path
        })
        .collect()
}

fn stream_tokens(dir: &Path) -> Vec<u32> {
    let r = StreamReader::open(dir, TokenFormat::<u32>::new()).unwrap();
    r.read(Window::new(0, r.len())).unwrap()
}

const WRITE: WriteOptions = WriteOptions {
    shards: 2,
    dtype: DtypeChoice::U32,
    target: Target::Stream,
    append: false,
    progress: false,
    max_document_bytes: guideloom::ingest::MAX_DOCUMENT_BYTES,
};

/// Item 11: JSON Lines read sequentially (one rank, cycle 1, no shuffle) with the text field
/// tokenized on the fly and packed into windows of 64 tokens yields exactly the windows of
/// the indexed loader over the storage `ingest jsonl` writes from the same files; the tail
/// (fewer than 64 tokens) is reported.
#[test]
fn issue17_item11_sequential_jsonl_equals_ingest_and_the_indexed_loader() {
    let tmp = tempfile::tempdir().unwrap();
    let files = persuasion_jsonl(tmp.path());
    let field = JsonlField::Text("text".into(), Tokenizer::Cl100k);
    let out = tmp.path().join("indexed");
    let report = ingest_jsonl(&out, &files, &field, &WRITE).unwrap();
    assert_eq!(report.documents, 90);
    let stream = stream_tokens(&out);
    let windows = TokenWindows::<u32>::open(&out, 64).unwrap();
    let collate = windows.collate();
    let indexed = Loader::builder(windows).batch_size(4).workers(2).collate(collate).build().unwrap();
    let indexed: Vec<Vec<u32>> = indexed
        .iter()
        .flat_map(|b| b.unwrap().data.into_vec().chunks(64).map(<[u32]>::to_vec).collect::<Vec<_>>())
        .collect();
    assert_eq!(indexed.len(), stream.len() / 64);

    let source = JsonlShards::open(files.clone(), field.clone()).unwrap();
    let loader = SequentialLoader::builder(source).pack(64).batch_size(4).workers(3).build().unwrap();
    let mut it = loader.iter();
    let sequential: Vec<Vec<u32>> = (&mut it).flat_map(|b| b.unwrap().data).collect();
    assert_eq!(sequential, indexed);
    let dropped = it.take_dropped();
    let Some(Dropped::Tokens { record, .. }) = dropped.first() else { panic!("a tail: {dropped:?}") };
    assert_eq!(record.shard, 2);
    assert!(!stream.len().is_multiple_of(64));

    // The same corpus as token ids: the tokens field, every window again.
    let ids_dir = tmp.path().join("ids");
    std::fs::create_dir(&ids_dir).unwrap();
    let id_files: Vec<PathBuf> = files
        .iter()
        .enumerate()
        .map(|(f, path)| {
            let vocab = Tokenizer::Cl100k.load().unwrap();
            let lines: String = std::fs::read_to_string(path)
                .unwrap()
                .lines()
                .filter(|l| !l.is_empty())
                .map(|l| {
                    let v: serde_json::Value = serde_json::from_str(l).unwrap();
                    format!(
                        "{}\n",
                        serde_json::json!({ "ids": vocab.encode_ordinary(v["text"].as_str().unwrap()) })
                    )
                })
                .collect();
            let p = ids_dir.join(format!("ids{f}.jsonl"));
            std::fs::write(&p, lines).unwrap();
            p
        })
        .collect();
    let source = JsonlShards::open(id_files, JsonlField::Tokens("ids".into())).unwrap();
    let loader = SequentialLoader::builder(source).pack(64).batch_size(4).workers(0).build().unwrap();
    let from_ids: Vec<Vec<u32>> = loader.iter().flat_map(|b| b.unwrap().data).collect();
    assert_eq!(from_ids, indexed);
}

/// The reverse path: `ingest_sequential` over `JsonlShards` writes the storage `ingest_jsonl`
/// writes, byte for byte.
#[test]
fn ingest_sequential_writes_what_ingest_jsonl_writes() {
    let tmp = tempfile::tempdir().unwrap();
    let files = persuasion_jsonl(tmp.path());
    let field = JsonlField::Text("text".into(), Tokenizer::Gpt2);
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let write = WriteOptions { dtype: DtypeChoice::Auto, shards: 3, ..WRITE };
    let ra = ingest_jsonl(&a, &files, &field, &write).unwrap();
    let source = JsonlShards::open(files.clone(), field).unwrap();
    let meta = serde_json::json!({"source": "jsonl", "text_field": "text", "tokenizer": "gpt2"});
    let rb = ingest_sequential(&b, &source, Some(&files), meta, &write).unwrap();
    assert_eq!(
        (ra.documents, ra.tokens, ra.dtype, ra.shards),
        (rb.documents, rb.tokens, rb.dtype, rb.shards)
    );
    let listing = |d: &Path| {
        let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.file_name().unwrap() != ".writer.lock")
            .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap()))
            .collect();
        v.sort();
        v
    };
    assert_eq!(listing(&a), listing(&b));
}

/// Text files cut by blank lines and read sequentially give the documents `ingest text` writes
/// (the same stream), and a reader restarted at any reported position continues exactly.
#[test]
fn text_shards_cut_and_restart_like_ingest_text() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("a.txt");
    let b = tmp.path().join("b.txt");
    std::fs::write(&a, "First block\r\nstill first\n\n  \n\nsecond\n\nthird, no newline at end\r").unwrap();
    std::fs::write(&b, "\n\nOnly block of b\n").unwrap();
    let files = vec![a.clone(), b.clone()];
    for split in [Split::BlankLine, Split::Line, Split::File] {
        let out = tmp.path().join(format!("t{}", split.name()));
        let opts = IngestOptions { split, eos: true, tokenizer: Tokenizer::Gpt2, ..Default::default() };
        ingest_text(&out, &files, &opts).unwrap();
        let stream: Vec<u32> = {
            let r = StreamReader::open(&out, TokenFormat::<u16>::new()).unwrap();
            r.read(Window::new(0, r.len())).unwrap().into_iter().map(u32::from).collect()
        };
        let source = TextShards::open(files.clone(), split, Tokenizer::Gpt2, true).unwrap();
        let loader = SequentialLoader::builder(source.clone()).batch_size(1).workers(0).build().unwrap();
        let docs: Vec<Vec<u32>> = loader.iter().flat_map(|b| b.unwrap().data).collect();
        assert_eq!(docs.concat(), stream, "{split:?}");
        let expected_docs = match split {
            Split::BlankLine => 4,
            Split::Line => 5,
            Split::File => 2,
        };
        assert_eq!(docs.len(), expected_docs, "{split:?}");
        let counted = source.clone().count_lengths().unwrap();
        let hints: u64 = counted.shards().iter().map(|s| s.len_hint.unwrap()).sum();
        assert_eq!(hints, expected_docs as u64);
        // Restart shard 0 at every position its reader reports.
        let mut r = source.open(0, ShardPos::START).unwrap();
        let mut positions = vec![r.pos()];
        let mut all = Vec::new();
        while let Some(d) = r.next_record().unwrap() {
            all.push(d);
            positions.push(r.pos());
        }
        for (k, at) in positions.iter().enumerate() {
            assert_eq!(at.record, k as u64);
            let mut again = source.open(0, *at).unwrap();
            let mut rest = Vec::new();
            while let Some(d) = again.next_record().unwrap() {
                rest.push(d);
            }
            assert_eq!(rest[..], all[k..], "{split:?} from {at:?}");
        }
    }
}

/// Resuming a packed JSON Lines loader from the state after every batch (inside documents)
/// continues exactly; a malformed line is an error naming the file and byte offset.
#[test]
fn jsonl_shards_resume_inside_documents_and_name_bad_lines() {
    let tmp = tempfile::tempdir().unwrap();
    let files = persuasion_jsonl(tmp.path());
    let loader = || {
        let source = JsonlShards::open(files.clone(), JsonlField::Text("text".into(), Tokenizer::Gpt2))
            .unwrap()
            .count_lengths()
            .unwrap();
        SequentialLoader::builder(source)
            .cycle(2)
            .shuffle(4)
            .pack(50)
            .batch_size(3)
            .workers(2)
            .build()
            .unwrap()
    };
    let full: Vec<_> = loader().iter().map(Result::unwrap).collect();
    assert!(full.len() > 5);
    let mut it = loader().iter();
    let mut states = vec![it.state()];
    while let Some(b) = it.next() {
        b.unwrap();
        states.push(it.state());
    }
    for (k, s) in states.iter().enumerate().step_by(3) {
        let json = s.to_json();
        assert!(json.len() < 256, "{json}");
        let rest: Vec<_> = loader()
            .iter_from(&SequentialState::from_json(&json).unwrap())
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(rest[..], full[k..], "k = {k}");
    }
    let bad = tmp.path().join("bad.jsonl");
    std::fs::write(&bad, "{\"text\": \"fine\"}\n{\"text\": 7}\n").unwrap();
    let source =
        JsonlShards::open(vec![bad.clone()], JsonlField::Text("text".into(), Tokenizer::Gpt2)).unwrap();
    let l = SequentialLoader::builder(source)
        .end(SequentialEnd::Exhaust)
        .batch_size(1)
        .workers(0)
        .build()
        .unwrap();
    let e = l.iter().find_map(Result::err).expect("the second line fails");
    let mut chain = e.to_string();
    let mut cause = std::error::Error::source(&e);
    while let Some(c) = cause {
        chain = format!("{chain}: {c}");
        cause = c.source();
    }
    assert_eq!(
        chain,
        format!(
            "batch 1 (epoch 0): shard 0, record 1: {} byte 17: field \"text\" is missing or not a string",
            bad.display()
        )
    );
}
