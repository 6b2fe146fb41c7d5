//! `ingest text`: text files tokenized into a storage.

use std::fs;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde_json::json;

use crate::input::{collect_files, read_line_bounded, read_text};
use crate::spill::Spill;
use crate::write::{check_output, progress_bar, write_spill};
use crate::{Document, IngestError, IngestOptions, IngestReport, Split, Target, WriteOptions, CHUNK_BYTES};

/// Tokenizes the text files under `paths` into the stream storage `out`.
///
/// Files are read in [`collect_files`] order, split per [`IngestOptions::split`], tokenized
/// in parallel (rayon, [`CHUNK_BYTES`] of text per round) with `encode_ordinary`
/// (special-token text is treated as ordinary text), optionally followed by the end-of-text
/// id, and written in input order. Memory stays bounded whatever the corpus size: tokenized
/// documents go to an unnamed temporary file beside `out` first (4 bytes per token), so the
/// element type and the shard balance are known before the first byte is written, and a
/// corpus that fails (unreadable file, id too large) writes nothing. The manifest's metadata
/// records the tokenizer, split, eos flag and document count.
///
/// # Errors
/// Input errors ([`IngestError::Read`], [`IngestError::NotUtf8`]),
/// [`IngestError::TokenTooLarge`] for [`DtypeChoice::U16`](crate::DtypeChoice::U16) with a larger id,
/// [`IngestError::Spill`], storage errors.
pub fn ingest_text(out: &Path, paths: &[PathBuf], opts: &IngestOptions) -> Result<IngestReport, IngestError> {
    ingest_text_in_chunks(out, paths, opts, CHUNK_BYTES)
}

/// [`ingest_text`], tokenizing `chunk_bytes` of text per parallel round.
fn ingest_text_in_chunks(
    out: &Path,
    paths: &[PathBuf],
    opts: &IngestOptions,
    chunk_bytes_max: usize,
) -> Result<IngestReport, IngestError> {
    let mut files = collect_files(paths)?;
    // Never read the storage being written (an --out inside an input directory).
    if let Ok(out) = out.canonicalize() {
        files.retain(|f| !f.canonicalize().is_ok_and(|f| f.starts_with(&out)));
    }
    let total_bytes: u64 = files.iter().map(|f| fs::metadata(f).map(|m| m.len()).unwrap_or(0)).sum();
    let meta = json!({
        "tokenizer": opts.tokenizer.name(),
        "split": opts.split.name(),
        "eos": opts.eos,
        "eos_id": opts.tokenizer.eos_id(),
    });
    let write = WriteOptions {
        shards: opts.shards,
        dtype: opts.dtype,
        target: if opts.doc_meta { Target::DocMeta } else { Target::Stream },
        append: opts.append,
        progress: opts.progress,
        max_document_bytes: opts.max_document_bytes,
    };
    check_output(out, &meta, &write)?;
    let pb = progress_bar(opts.progress, total_bytes);
    pb.set_message("tokenizing");
    let vocab = opts.tokenizer.load()?;
    let eos = opts.eos.then(|| opts.tokenizer.eos_id());
    let mut spill = Spill::new(out)?;
    let mut chunk: Vec<(String, String)> = Vec::new();
    let mut chunk_bytes = 0;
    let tokenize = |chunk: &mut Vec<(String, String)>, spill: &mut Spill| {
        let tokens: Vec<Vec<u32>> = chunk
            .par_iter()
            .map(|(_, text)| {
                let mut tokens = vocab.encode_ordinary(text);
                tokens.extend(eos);
                pb.inc(text.len() as u64);
                tokens
            })
            .collect();
        for ((source, _), tokens) in chunk.drain(..).zip(tokens) {
            spill.push(&Document { source, tokens })?;
        }
        Ok::<_, IngestError>(())
    };
    for f in &files {
        for_each_document(f, opts.split, opts.max_document_bytes, &mut |suffix, doc| {
            chunk_bytes += doc.len();
            chunk.push((format!("{}{suffix}", f.display()), doc));
            if chunk_bytes >= chunk_bytes_max {
                tokenize(&mut chunk, &mut spill)?;
                chunk_bytes = 0;
            }
            Ok(())
        })?;
    }
    tokenize(&mut chunk, &mut spill)?;
    pb.finish_and_clear();
    write_spill(out, spill, total_bytes, meta, &write)
}

/// Calls `f(source suffix, text)` for each document of the text file `path`, in order, as
/// [`split_text`] cuts them. Line and blank-line splits stream through the file (one line,
/// or one blank-line block, in memory at a time); a whole-file document is read whole.
///
/// # Errors
/// [`IngestError::Read`], [`IngestError::NotUtf8`] (with the byte offset in the file), and
/// whatever `f` returns.
fn for_each_document(
    path: &Path,
    split: Split,
    limit: u64,
    f: &mut dyn FnMut(String, String) -> Result<(), IngestError>,
) -> Result<(), IngestError> {
    if split == Split::File {
        return f(String::new(), read_text(path, limit)?);
    }
    let read_error = |source| IngestError::Read { path: path.to_path_buf(), source };
    let file = fs::File::open(path).map_err(read_error)?;
    let mut reader = std::io::BufReader::with_capacity(1 << 16, file);
    let mut raw = Vec::new();
    let (mut offset, mut number) = (0u64, 0u64);
    let mut block = String::new();
    let mut block_start = 0u64;
    loop {
        raw.clear();
        let n = read_line_bounded(&mut reader, &mut raw, path, number + 1, limit)?;
        if n == 0 {
            break;
        }
        let line = std::str::from_utf8(&raw).map_err(|e| IngestError::NotUtf8 {
            path: path.to_path_buf(),
            offset: offset + e.valid_up_to() as u64,
        })?;
        offset += n as u64;
        number += 1;
        // As `str::lines`: the terminator is `\n` or `\r\n`; the last line may have none.
        let line = match line.strip_suffix('\n') {
            Some(l) => l.strip_suffix('\r').unwrap_or(l),
            None => line,
        };
        let blank = line.trim().is_empty();
        match split {
            Split::Line if !blank => f(format!(":{number}"), line.to_string())?,
            Split::BlankLine if blank && !block.is_empty() => {
                f(format!(":{block_start}"), std::mem::take(&mut block))?;
            }
            Split::BlankLine if !blank => {
                if block.len() as u64 + line.len() as u64 >= limit {
                    let line = if block.is_empty() { number } else { block_start };
                    return Err(IngestError::DocumentTooLarge { path: path.to_path_buf(), line, limit });
                }
                if block.is_empty() {
                    block_start = number;
                } else {
                    block.push('\n');
                }
                block.push_str(line);
            }
            _ => {}
        }
    }
    if !block.is_empty() {
        f(format!(":{block_start}"), block)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{split_text, Tokenizer, MAX_DOCUMENT_BYTES};

    /// Every file of a storage directory, by name, except the writer lock.
    fn storage_files(dir: &Path) -> Vec<(String, Vec<u8>)> {
        let mut files: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.file_name().unwrap() != ".writer.lock")
            .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), fs::read(&p).unwrap()))
            .collect();
        files.sort();
        files
    }

    #[test]
    fn text_ingest_in_one_byte_chunks_writes_the_same_storage_as_one_chunk() {
        let tmp = tempfile::tempdir().unwrap();
        let input = tmp.path().join("in");
        fs::create_dir(&input).unwrap();
        fs::write(input.join("a.txt"), "It is a truth universally acknowledged.\n\nThat a single man")
            .unwrap();
        fs::write(input.join("b.txt"), "in possession of a good fortune\n\nmust be in want of a wife.\n")
            .unwrap();
        for doc_meta in [false, true] {
            let opts = IngestOptions {
                split: Split::BlankLine,
                shards: 3,
                eos: true,
                doc_meta,
                ..Default::default()
            };
            let (one, many) =
                (tmp.path().join(format!("one{doc_meta}")), tmp.path().join(format!("many{doc_meta}")));
            let a = ingest_text_in_chunks(&one, std::slice::from_ref(&input), &opts, usize::MAX).unwrap();
            let b = ingest_text_in_chunks(&many, std::slice::from_ref(&input), &opts, 1).unwrap();
            assert_eq!(a, b);
            assert_eq!((a.documents, a.shards, a.dtype), (4, 3, "u32"));
            assert_eq!(storage_files(&one), storage_files(&many));
        }
    }

    #[test]
    fn streamed_splits_equal_split_text() {
        let tmp = tempfile::tempdir().unwrap();
        let cases = [
            "",
            "\n",
            "a",
            "a b\nc\n\n \nd\n\n",
            "x\r\ny\r\n\r\nz",
            "one\r",
            "\n\n  \nlast block\nstill\n",
            "é\n\nü",
        ];
        for (i, text) in cases.iter().enumerate() {
            let path = tmp.path().join(format!("{i}.txt"));
            fs::write(&path, text).unwrap();
            for split in [Split::File, Split::Line, Split::BlankLine] {
                let mut got = Vec::new();
                for_each_document(&path, split, MAX_DOCUMENT_BYTES, &mut |suffix, doc| {
                    got.push((suffix, doc));
                    Ok(())
                })
                .unwrap();
                assert_eq!(got, split_text(text, split), "case {i} {split:?}");
            }
        }
        let bad = tmp.path().join("bad.txt");
        fs::write(&bad, b"ok line\nsecond \xff line\n").unwrap();
        for split in [Split::File, Split::Line, Split::BlankLine] {
            let e = for_each_document(&bad, split, MAX_DOCUMENT_BYTES, &mut |_, _| Ok(())).unwrap_err();
            assert!(matches!(e, IngestError::NotUtf8 { offset: 15, .. }), "{split:?}: {e:?}");
        }
    }

    #[test]
    fn issue12_the_output_is_checked_before_the_input_is_read() {
        let tmp = tempfile::tempdir().unwrap();
        let good = tmp.path().join("good.txt");
        fs::write(&good, "Some text.").unwrap();
        let bad = tmp.path().join("bad.txt");
        fs::write(&bad, b"\xff").unwrap();
        let out = tmp.path().join("out");
        ingest_text(&out, std::slice::from_ref(&good), &IngestOptions::default()).unwrap();
        // An existing storage is refused before the (unreadable) input is touched.
        let e = ingest_text(&out, std::slice::from_ref(&bad), &IngestOptions::default()).unwrap_err();
        assert!(matches!(e, IngestError::Exists { .. }), "{e:?}");
        // An append with another tokenizer names the tokenizer, not the end-of-text id it implies.
        let gpt2 = IngestOptions { tokenizer: Tokenizer::Gpt2, append: true, ..Default::default() };
        let e = ingest_text(&out, std::slice::from_ref(&bad), &gpt2).unwrap_err();
        assert!(
            matches!(&e, IngestError::AppendMismatch { field, existing, new, .. }
                if field == "tokenizer" && existing == "\"cl100k\"" && new == "\"gpt2\""),
            "{e:?}"
        );
        // A directory of other files is not written into.
        let mine = tmp.path().join("mine");
        fs::create_dir(&mine).unwrap();
        fs::write(mine.join("notes.txt"), "keep").unwrap();
        let e = ingest_text(&mine, std::slice::from_ref(&good), &IngestOptions::default()).unwrap_err();
        assert!(matches!(&e, IngestError::NotAStorageDirectory { file, .. } if file == "notes.txt"), "{e:?}");
        let names: Vec<_> = fs::read_dir(&mine).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["notes.txt"]);
    }
}
