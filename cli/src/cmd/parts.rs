//! `guideloom commit-parts` and `guideloom gc`: the parts of a job (written by
//! `ingest --part`, an engine or any `PartWriter`) published in one commit, and the orphans.

use std::path::PathBuf;

use guideloom::storage::parts::{CommitMode, PartsRoot, Receipt};
use guideloom::storage::{RemoteOptions, StorageLocation};

use crate::cli::{CommitModeArg, CommitPartsArgs, GcArgs};
use crate::error::{context, CliResult};

/// The receipts named on the command line: the files given, then the `*.json` files of
/// `--receipts-dir` in name order.
fn receipt_files(a: &CommitPartsArgs) -> CliResult<Vec<PathBuf>> {
    let mut files = a.receipt.clone();
    if let Some(dir) = &a.receipts_dir {
        let mut found = Vec::new();
        for e in std::fs::read_dir(dir).map_err(|e| context(format!("listing {}", dir.display()), e))? {
            let p = e.map_err(|e| context(format!("listing {}", dir.display()), e))?.path();
            if p.extension().is_some_and(|x| x == "json") && p.is_file() {
                found.push(p);
            }
        }
        found.sort();
        files.extend(found);
    }
    Ok(files)
}

/// The largest receipt file read, in bytes (a receipt is about 100 bytes a shard).
const MAX_RECEIPT_BYTES: u64 = 64 << 20;

/// ROOT, a local path or an object-store URL (parts written there by
/// `PartWriter::open_remote` or the Python writers, reached with the store's environment).
fn parts_root(root: &std::path::Path) -> CliResult<PartsRoot> {
    Ok(PartsRoot::open(StorageLocation::from_path(root), RemoteOptions::from_env)?)
}

/// Runs `guideloom commit-parts` (ROOT a local path or an object-store URL); prints what was
/// committed.
pub(crate) fn commit(a: &CommitPartsArgs) -> CliResult {
    let mut receipts = Vec::new();
    for f in receipt_files(a)? {
        let len =
            std::fs::metadata(&f).map_err(|e| context(format!("reading receipt {}", f.display()), e))?.len();
        if len > MAX_RECEIPT_BYTES {
            return Err(format!("receipt {} is larger than {MAX_RECEIPT_BYTES} bytes", f.display()).into());
        }
        let text = std::fs::read_to_string(&f)
            .map_err(|e| context(format!("reading receipt {}", f.display()), e))?;
        receipts.push(Receipt::from_json(&text).map_err(|e| context(format!("receipt {}", f.display()), e))?);
    }
    let mode = match a.mode {
        CommitModeArg::Error => CommitMode::ErrorIfExists,
        CommitModeArg::Append => CommitMode::Append,
        CommitModeArg::Overwrite => CommitMode::Overwrite,
    };
    let r = parts_root(&a.root)?.commit(&receipts, mode, None)?;
    outln!(
        "committed {} partitions ({} shards from id {}) into {}; skipped duplicate attempts: {:?}; fingerprint {:016x}",
        r.partitions,
        r.shards,
        r.first_shard,
        a.root.display(),
        r.skipped,
        r.fingerprint
    );
    Ok(())
}

/// Runs `guideloom gc` (ROOT a local path or an object-store URL); prints one orphan a line
/// (relative to ROOT).
pub(crate) fn gc(a: &GcArgs) -> CliResult {
    for rel in parts_root(&a.root)?.gc(a.apply)? {
        outln!("{}{rel}", if a.apply { "deleted " } else { "" });
    }
    Ok(())
}
