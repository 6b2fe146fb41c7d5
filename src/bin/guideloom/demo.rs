//! `guideloom demo`: the main job on a real corpus, end to end.

use std::path::{Path, PathBuf};
use std::time::Instant;

use guideloom::formats::TokenFormat;
use guideloom::ingest::{self, IngestOptions, Split, Tokenizer};
use guideloom::loader::{Loader, ReadTokens, State, TokenWindows};
use guideloom::storage::{Manifest, StreamReader};

use crate::CliResult;

/// Prints a line; a closed stdout does not stop the demo, whose exit status reports the resume
/// check.
macro_rules! say {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($t)*);
    }};
}

const SEQ_LEN: u64 = 1_025;
const BATCH: u64 = 16;
const SEED: u64 = 2_024;
const EPOCHS: u64 = 2;
const WORKERS: usize = 2;
const PREFETCH: usize = 4;

/// The bundled corpus: the six `*.txt` novels of `data/austen` (of the source tree, or of the
/// current directory), in name order.
fn default_corpus() -> CliResult<Vec<PathBuf>> {
    let candidates =
        [Path::new(env!("CARGO_MANIFEST_DIR")).join("data/austen"), PathBuf::from("data/austen")];
    let dir = candidates
        .into_iter()
        .find(|p| p.is_dir())
        .ok_or("the bundled corpus data/austen was not found; pass --corpus PATH")?;
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| format!("cannot list {}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "txt"))
        .collect();
    files.sort();
    Ok(files)
}

/// Shuffled windows read straight into `[BATCH, SEQ_LEN]` buffers (the token-window fast path).
fn loader(
    dir: &Path,
) -> CliResult<Loader<TokenWindows<u32>, guideloom::loader::WindowSpan, ReadTokens<u32>>> {
    let windows = TokenWindows::<u32>::open(dir, SEQ_LEN)?;
    let collate = windows.collate();
    Ok(Loader::builder(windows)
        .shuffle(SEED)
        .epochs(EPOCHS)
        .batch_size(BATCH)
        .workers(WORKERS)
        .prefetch(PREFETCH)
        .collate(collate)
        .build()?)
}

/// Runs the demo; returns an error (non-zero exit) when the resume check fails.
pub fn run(corpus: Vec<PathBuf>, workdir: Option<PathBuf>) -> CliResult {
    let corpus = if corpus.is_empty() { default_corpus()? } else { corpus };
    let (workdir, _cleanup) = match workdir {
        Some(d) => (d, None),
        None => {
            let d = tempdir()?;
            (d.clone(), Some(RemoveOnDrop(d)))
        }
    };
    let store = workdir.join("austen.gl");
    if store.exists() {
        // Only a storage an earlier demo wrote is replaced; anything else is left alone.
        if !store.join("manifest.json").is_file() {
            return Err(format!(
                "{} exists and is not a guideloom storage; remove it or choose another --workdir",
                store.display()
            )
            .into());
        }
        std::fs::remove_dir_all(&store).map_err(|e| format!("cannot clear {}: {e}", store.display()))?;
    }

    say!("== 1. ingest: {} with the cl100k BPE (embedded; no download)", display_list(&corpus));
    let t = Instant::now();
    let opts = IngestOptions {
        tokenizer: Tokenizer::Cl100k,
        split: Split::File,
        eos: true,
        shards: 4,
        progress: true,
        ..IngestOptions::default()
    };
    let report = ingest::ingest_text(&store, &corpus, &opts)?;
    let secs = t.elapsed().as_secs_f64();
    say!(
        "   {} documents, {} tokens ({}), {} shards, {:.1} MB of text in {:.2} s ({:.1} MB/s)",
        report.documents,
        report.tokens,
        report.dtype,
        report.shards,
        report.input_bytes as f64 / 1e6,
        secs,
        report.input_bytes as f64 / 1e6 / secs
    );
    if report.dtype != "u32" {
        return Err(format!("expected cl100k ids to need u32 storage, got {}", report.dtype).into());
    }

    say!("\n== 2. storage summary ({})", store.display());
    let m = Manifest::load(&store)?;
    let dtype = m.dtype().ok_or("the demo storage has no element dtype")?;
    say!(
        "   kind {}, dtype {dtype}, format {}, fingerprint {:016x}",
        m.kind(),
        m.format().name,
        m.fingerprint()
    );
    for s in m.shards() {
        say!(
            "   shard {}: {} tokens, {} bytes, crc32c {:08x}",
            s.id,
            s.elements.unwrap_or(0),
            s.bytes,
            s.checksum
        );
    }
    let v = guideloom::storage::verify(&store)?;
    say!("   verify: {} shards, {} bytes, all checksums match", v.shards, v.bytes);

    say!(
        "\n== 3. training loop: shuffled {SEQ_LEN}-token windows, batch {BATCH}, {EPOCHS} epochs, {WORKERS} workers, prefetch {PREFETCH}"
    );
    let l = loader(&store)?;
    let total = l.total_batches().unwrap_or(0);
    if total < 3 {
        return Err(format!(
            "the corpus is too small for the demo: {} windows of {SEQ_LEN} tokens make {total} batches of {BATCH}; it needs at least 3",
            guideloom::loader::DataSource::len(l.source())
        )
        .into());
    }
    say!(
        "   {} windows, {} batches per epoch, {total} batches in all",
        guideloom::loader::DataSource::len(l.source()),
        l.len()
    );
    let save_at = total / 3;
    let start = Instant::now();
    let mut first_batch = None;
    let mut seen: Vec<Vec<u32>> = Vec::with_capacity(total as usize);
    let mut saved: Option<State> = None;
    let mut it = l.iter();
    let mut loss_proxy = 0u64;
    let mut first_window = None;
    while let Some(batch) = it.next() {
        let batch = batch?;
        first_batch.get_or_insert_with(|| start.elapsed());
        // A stand-in for the training step: touch every token.
        loss_proxy =
            batch.data.data().iter().fold(loss_proxy, |a, &t| a.wrapping_mul(31).wrapping_add(u64::from(t)));
        if first_window.is_none() {
            let row = batch.data.row(0).unwrap_or(&[]);
            first_window = Some((batch.indices[0], row[..row.len().min(48)].to_vec()));
        }
        seen.push(batch.data.into_vec());
        if seen.len() as u64 == save_at {
            saved = Some(it.state());
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    drop(it);
    let tokens = seen.len() as u64 * BATCH * SEQ_LEN;
    say!("   consumed {} batches (checksum {loss_proxy:016x})", seen.len());
    if let Some((w, ids)) = first_window {
        let bpe = Tokenizer::Cl100k.load()?;
        let text = bpe.decode(&ids).unwrap_or_else(|_| "<a window cut inside a UTF-8 character>".into());
        say!("   batch 0 starts with window {w}; its first {} tokens decode to:", ids.len());
        say!("   {:?}", text.replace('\n', " "));
    }

    say!("\n== 4. checkpoint and resume");
    let state = saved.ok_or("the run ended before the checkpoint")?;
    let state_path = workdir.join("loader-state.json");
    std::fs::write(&state_path, state.to_json())?;
    say!(
        "   saved the state after {save_at} batches: {} bytes of JSON in {}",
        state.to_json().len(),
        state_path.display()
    );
    drop(l);
    let restored = State::from_json(&std::fs::read_to_string(&state_path)?)?;
    let fresh = loader(&store)?;
    let resumed: Vec<Vec<u32>> =
        fresh.iter_from(&restored)?.map(|b| b.map(|b| b.data.into_vec())).collect::<Result<_, _>>()?;
    let expected = &seen[save_at as usize..];
    if resumed.as_slice() != expected {
        let first_diff = resumed.iter().zip(expected).position(|(a, b)| a != b);
        return Err(format!(
            "resume check FAILED: resumed {} batches, expected {}; first difference at batch {:?}",
            resumed.len(),
            expected.len(),
            first_diff.map(|d| d as u64 + save_at)
        )
        .into());
    }
    say!(
        "   resume check: passed (the {} batches after the first {save_at} equal the uninterrupted run, in a fresh loader)",
        resumed.len()
    );

    say!("\n== 5. throughput (uninterrupted run, {WORKERS} workers)");
    say!(
        "   {:.0} windows/s, {:.1} M tokens/s, {:.1} MB/s of u32 tokens; first batch after {:.2} ms",
        seen.len() as f64 * BATCH as f64 / elapsed,
        tokens as f64 / elapsed / 1e6,
        tokens as f64 * 4.0 / elapsed / 1e6,
        first_batch.map_or(0.0, |d| d.as_secs_f64() * 1e3)
    );
    let r = StreamReader::open(&store, TokenFormat::<u32>::new())?;
    say!("   storage read through {} ({} tokens)", r.options().backend.name(), r.len());
    Ok(())
}

fn display_list(paths: &[PathBuf]) -> String {
    paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
}

fn tempdir() -> CliResult<PathBuf> {
    let d = std::env::temp_dir().join(format!("guideloom-demo-{}", std::process::id()));
    std::fs::create_dir_all(&d).map_err(|e| format!("cannot create {}: {e}", d.display()))?;
    Ok(d)
}

struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
