//! `guideloom upload LOCAL URL`: a local storage copied to an object store.

use std::path::Path;

use guideloom::storage::StorageLocation;

use crate::cli::UploadArgs;
use crate::error::CliResult;
use crate::open::location::local_only;

/// The error for an `upload` LOCAL that is no guideloom storage: `upload` copies a storage,
/// `import --out URL` converts a dataset in another layout (a file such as nanoGPT's
/// `train.bin`) and uploads the result.
fn not_a_local_storage(local: &Path, url: &str) -> String {
    let what = if local.is_file() {
        "a file"
    } else if local.is_dir() {
        "a directory without manifest.json"
    } else {
        "missing"
    };
    format!(
        "upload copies a guideloom storage (a directory with manifest.json) and {} is {what}; to store a \
         dataset in another project's layout, convert it with `guideloom import {} --out {url}` \
         (with --format and --dtype for a raw token file such as nanoGPT's train.bin: --format nanogpt \
         --dtype u16)",
        local.display(),
        local.display()
    )
}

/// Runs `guideloom upload LOCAL URL`: every committed shard file, then the manifest.
pub(crate) fn run(a: &UploadArgs) -> CliResult {
    let loc = StorageLocation::parse(&a.url);
    let StorageLocation::Remote(url) = loc else {
        return Err(format!("{}: not an object-store URL (s3://, gs://, az://)", a.url).into());
    };
    local_only(
        &a.local,
        "LOCAL",
        "upload copies a local storage to a store (to read a remote storage, give its URL to the reading command)",
    )?;
    if !a.local.join("manifest.json").is_file() {
        return Err(not_a_local_storage(&a.local, &url).into());
    }
    let dir = guideloom::storage::RemoteDir::open(&url, guideloom::storage::RemoteOptions::from_env()?)?;
    let bytes = dir.upload(&a.local)?;
    let s = dir.stats();
    eprintln!(
        "uploaded {} to {url}: {bytes} bytes, {} requests ({} retried)",
        a.local.display(),
        s.requests,
        s.retries
    );
    Ok(())
}
