//! Datasets in other projects' layouts, read in place: when a path is one, and the options
//! `--format`, `--dtype`, `--column`, `--repair-pointers`, `--multimodal` give.

use std::path::Path;

use guideloom::storage::foreign::{self, ForeignDataset, ForeignOptions};

use crate::cli::ForeignArgs;
use crate::CliResult;

/// The library options of the command-line flags.
pub(crate) fn options(a: &ForeignArgs) -> ForeignOptions {
    let mut o = ForeignOptions::new().repair_pointers(a.repair_pointers).multimodal(a.multimodal);
    o.format = a.format;
    o.dtype = a.dtype;
    o.column = a.column.clone();
    o
}

/// The foreign dataset at `path` when it is one: `--format` names a layout, or `path` holds
/// no native storage and its layout is detected (a magic number or an index file). `None`:
/// read it as a native storage.
///
/// # Errors
///
/// The dataset fails validation; `--dtype` without `--format` on a path that is no storage
/// and whose layout is not detected (raw token files need `--format`). A path of no known
/// layout without `--dtype` is left to the native reader's error ("not a directory", "no
/// manifest.json").
pub(crate) fn open(path: &Path, a: &ForeignArgs) -> CliResult<Option<ForeignDataset>> {
    let native = path.join("manifest.json").is_file();
    if a.format.is_none() {
        if native {
            return Ok(None);
        }
        match foreign::detect(path) {
            Ok(_) => {}
            Err(_) if a.dtype.is_some() => {
                return Err(format!(
                    "{} is not a guideloom storage: name its layout with --format (nanogpt, llmc, olmo, ...)",
                    path.display()
                )
                .into())
            }
            Err(_) => return Ok(None),
        }
    }
    Ok(Some(ForeignDataset::open(path, &options(a))?))
}
