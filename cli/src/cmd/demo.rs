//! `guideloom demo`: the main job on a real corpus, end to end.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use guideloom::formats::TokenFormat;
use guideloom::ingest::{self, IngestOptions, Split, Tokenizer};
use guideloom::loader::{DataSource, Loader, State, TokenWindowCollate, TokenWindows, WindowSpan};
use guideloom::storage::{Manifest, StreamReader};

use crate::cli::DemoArgs;
use crate::error::CliResult;

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

/// The demo's loader type.
type DemoLoader = Loader<TokenWindows<u32>, WindowSpan, TokenWindowCollate<u32>>;

/// Runs the demo: ingest, storage summary, training loop, checkpoint and resume, throughput.
/// Returns an error (non-zero exit) when a step fails, the resume check included.
pub(crate) fn run(a: DemoArgs) -> CliResult {
    for c in &a.corpus {
        crate::open::location::local_only(c, "--corpus", "download the text files first")?;
    }
    if let Some(w) = &a.workdir {
        crate::open::location::local_only(
            w,
            "--workdir",
            "the demo writes, checkpoints and resumes in a local directory (`guideloom upload` copies its storage to a store afterwards)",
        )?;
    }
    let corpus = if a.corpus.is_empty() { default_corpus()? } else { a.corpus };
    let work = Workdir::new(a.workdir)?;
    let store = work.fresh_store()?;
    ingest_corpus(&store, &corpus)?;
    print_summary(&store)?;
    let run = train(&store)?;
    check_resume(&work.dir, &store, &run)?;
    print_throughput(&store, &run)
}

/// The bundled corpus: the six `*.txt` novels of `data/austen` (of the source tree, or of the
/// current directory), in name order.
fn default_corpus() -> CliResult<Vec<PathBuf>> {
    // The source tree's root is the parent of this package's folder (cli/).
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap_or(Path::new(".."));
    let candidates = [root.join("data/austen"), PathBuf::from("data/austen")];
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

/// Where the demo writes: `--workdir`, or a fresh private temporary directory (created
/// exclusively with a random name and mode 0700, so no other user can pre-create or plant
/// links in it), removed on drop.
struct Workdir {
    dir: PathBuf,
    _temporary: Option<tempfile::TempDir>,
}

impl Workdir {
    fn new(workdir: Option<PathBuf>) -> CliResult<Self> {
        Ok(match workdir {
            Some(dir) => Workdir { dir, _temporary: None },
            None => {
                let tmp = tempfile::Builder::new()
                    .prefix("guideloom-demo-")
                    .tempdir()
                    .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
                Workdir { dir: tmp.path().to_path_buf(), _temporary: Some(tmp) }
            }
        })
    }

    /// The storage path, cleared of an earlier demo's storage (anything else there is an
    /// error, left alone).
    fn fresh_store(&self) -> CliResult<PathBuf> {
        let store = self.dir.join("austen.gl");
        if store.exists() {
            if !store.join("manifest.json").is_file() {
                return Err(format!(
                    "{} exists and is not a guideloom storage; remove it or choose another --workdir",
                    store.display()
                )
                .into());
            }
            std::fs::remove_dir_all(&store).map_err(|e| format!("cannot clear {}: {e}", store.display()))?;
        }
        Ok(store)
    }
}

/// Step 1: ingests `corpus` into `store` with cl100k (u32 ids), 4 shards.
fn ingest_corpus(store: &Path, corpus: &[PathBuf]) -> CliResult {
    let list = corpus.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ");
    say!("== 1. ingest: {list} with the cl100k BPE (embedded; no download)");
    let t = Instant::now();
    let opts = IngestOptions {
        tokenizer: Tokenizer::Cl100k,
        split: Split::File,
        eos: true,
        shards: 4,
        progress: true,
        ..IngestOptions::default()
    };
    let report = ingest::ingest_text(store, corpus, &opts)?;
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
    Ok(())
}

/// Step 2: the manifest, shard by shard, and a checksum verification.
fn print_summary(store: &Path) -> CliResult {
    say!("\n== 2. storage summary ({})", store.display());
    let m = Manifest::load(store)?;
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
    let v = guideloom::storage::verify(store)?;
    say!("   verify: {} shards, {} bytes, all checksums match", v.shards, v.bytes);
    Ok(())
}

/// Shuffled windows read straight into `[BATCH, SEQ_LEN]` buffers (the token-window fast path).
fn loader(store: &Path) -> CliResult<DemoLoader> {
    let windows = TokenWindows::<u32>::open(store, SEQ_LEN)?;
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

/// What the uninterrupted training loop saw.
struct TrainRun {
    /// Every batch's tokens, in order.
    seen: Vec<Vec<u32>>,
    /// The batches before the checkpoint.
    save_at: u64,
    /// The loader state after `save_at` batches.
    saved: State,
    /// The loop's wall time.
    elapsed: Duration,
    /// From the start of the loop to the first batch.
    first_batch: Duration,
}

/// Step 3: the training loop over every batch, saving the state after a third of them.
fn train(store: &Path) -> CliResult<TrainRun> {
    say!(
        "\n== 3. training loop: shuffled {SEQ_LEN}-token windows, batch {BATCH}, {EPOCHS} epochs, {WORKERS} workers, prefetch {PREFETCH}"
    );
    let l = loader(store)?;
    let windows = DataSource::len(l.source());
    let total = l.total_batches().unwrap_or(0);
    if total < 3 {
        return Err(format!(
            "the corpus is too small for the demo: {windows} windows of {SEQ_LEN} tokens make {total} batches of {BATCH}; it needs at least 3"
        )
        .into());
    }
    say!("   {windows} windows, {} batches per epoch, {total} batches in all", l.len());
    let save_at = total / 3;
    let start = Instant::now();
    let mut first_batch = None;
    let mut seen: Vec<Vec<u32>> = Vec::with_capacity(total as usize);
    let mut saved = None;
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
    let elapsed = start.elapsed();
    say!("   consumed {} batches (checksum {loss_proxy:016x})", seen.len());
    if let Some((w, ids)) = first_window {
        print_window_text(w, &ids)?;
    }
    let saved = saved.ok_or("the run ended before the checkpoint")?;
    Ok(TrainRun { seen, save_at, saved, elapsed, first_batch: first_batch.unwrap_or_default() })
}

/// Window `w`'s first tokens `ids`, decoded.
fn print_window_text(w: u64, ids: &[u32]) -> CliResult {
    let bpe = Tokenizer::Cl100k.load()?;
    let text = bpe.decode(ids).unwrap_or_else(|_| "<a window cut inside a UTF-8 character>".into());
    say!("   batch 0 starts with window {w}; its first {} tokens decode to:", ids.len());
    say!("   {:?}", text.replace('\n', " "));
    Ok(())
}

/// Step 4: writes the saved state to a file, reads it back into a fresh loader and checks
/// that the batches after the checkpoint equal the uninterrupted run's.
fn check_resume(workdir: &Path, store: &Path, run: &TrainRun) -> CliResult {
    say!("\n== 4. checkpoint and resume");
    let save_at = run.save_at;
    let state_path = workdir.join("loader-state.json");
    std::fs::write(&state_path, run.saved.to_json())?;
    say!(
        "   saved the state after {save_at} batches: {} bytes of JSON in {}",
        run.saved.to_json().len(),
        state_path.display()
    );
    let restored = State::from_json(&std::fs::read_to_string(&state_path)?)?;
    let fresh = loader(store)?;
    let resumed: Vec<Vec<u32>> =
        fresh.iter_from(&restored)?.map(|b| b.map(|b| b.data.into_vec())).collect::<Result<_, _>>()?;
    let expected = &run.seen[save_at as usize..];
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
    Ok(())
}

/// Step 5: the uninterrupted run's throughput and the backend that read the storage.
fn print_throughput(store: &Path, run: &TrainRun) -> CliResult {
    let elapsed = run.elapsed.as_secs_f64();
    let tokens = run.seen.len() as u64 * BATCH * SEQ_LEN;
    say!("\n== 5. throughput (uninterrupted run, {WORKERS} workers)");
    say!(
        "   {:.0} windows/s, {:.1} M tokens/s, {:.1} MB/s of u32 tokens; first batch after {:.2} ms",
        run.seen.len() as f64 * BATCH as f64 / elapsed,
        tokens as f64 / elapsed / 1e6,
        tokens as f64 * 4.0 / elapsed / 1e6,
        run.first_batch.as_secs_f64() * 1e3
    );
    let r = StreamReader::open(store, TokenFormat::<u32>::new())?;
    say!("   storage read through {} ({} tokens)", r.options().backend.name(), r.len());
    Ok(())
}
