//! `guideloom upload LOCAL URL`: a local storage copied to an object store.

use guideloom::storage::StorageLocation;

use crate::cli::UploadArgs;
use crate::error::CliResult;
use crate::open::location::local_only;

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
