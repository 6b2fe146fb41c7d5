//! Hugging Face `datasets` directories (`Dataset.save_to_disk`) and Arrow IPC stream files.
//!
//! Layout (huggingface/datasets `src/datasets/arrow_dataset.py` `save_to_disk` /
//! `load_from_disk`): a directory of `data-00000-of-0000N.arrow` Arrow IPC **stream** files
//! whose row order is the order `state.json` lists them in (`_data_files[].filename`); a
//! `DatasetDict` is a directory with `dataset_dict.json` (`{"splits": [...]}`) and one such
//! directory per split. Without `state.json`, a path names Arrow stream files directly (a
//! file, a glob or a directory of `*.arrow`, sorted byte-wise). Each row is one document: its
//! tokens are the token column's list (`list`, `large_list` or `fixed_size_list` of any
//! integer type), read in place ([`ipc`]: the child values buffer of each record batch is one
//! segment of the stream). `dataset_info.json` is not read: the Arrow schema of each file is
//! authoritative.

mod ipc;

use serde::Deserialize;

use crate::error::{ForeignError, Result};
use crate::files::{self, Fs, Place};
use crate::format::ForeignFormat;
use crate::layouts::table::{TableFile, Tables};
use crate::options::ForeignOptions;
use crate::parts::Parts;

/// The token column when none is named.
pub(crate) const DEFAULT_COLUMN: &str = "input_ids";

/// The most bytes `state.json` or `dataset_dict.json` may hold.
const MAX_LISTING_BYTES: u64 = 64 << 20;

/// `state.json`: the data files, in row order (other keys are ignored).
#[derive(Debug, Deserialize)]
struct State {
    #[serde(rename = "_data_files")]
    data_files: Vec<DataFile>,
}

/// One entry of `state.json`'s `_data_files`.
#[derive(Debug, Deserialize)]
struct DataFile {
    filename: String,
}

/// `dataset_dict.json`.
#[derive(Debug, Deserialize)]
struct DatasetDict {
    splits: Vec<String>,
}

/// Opens the Hugging Face dataset (or Arrow stream files) at `place`.
pub(crate) fn open(place: &Place, options: &ForeignOptions) -> Result<Parts> {
    let column = options.column.as_deref().unwrap_or(DEFAULT_COLUMN);
    let (fs, names, listing) = match place.as_dir()? {
        Some((dir, entries)) => {
            let has = |n: &str| entries.iter().any(|e| e.name == n);
            let fs = Fs::new(ForeignFormat::HfArrow, dir);
            if has("dataset_dict.json") && !has("state.json") {
                let split = choose_split(&fs, options)?;
                return open(&subdir(place, &split), options);
            }
            if has("state.json") {
                let (names, text) = listed_files(&fs)?;
                (fs, names, text)
            } else {
                let names = files::with_ext(fs.dir.as_ref(), &entries, "arrow")?;
                if names.is_empty() {
                    return Err(fs.err(
                        "",
                        ForeignError::NoFiles { pattern: format!("{}/*.arrow", place.label().display()) },
                    ));
                }
                (fs, names, Vec::new())
            }
        }
        None => {
            let (dir, names) = files::expand(ForeignFormat::HfArrow, place, &["arrow"])?;
            (Fs::new(ForeignFormat::HfArrow, dir), names, Vec::new())
        }
    };
    let mut tables = Tables::new(&fs, column, &listing);
    for name in &names {
        let size = fs.len(name)?;
        let file = ipc::scan(&fs, name, size, column)?;
        let runs: Vec<(u64, u64)> = file.runs.iter().map(|r| (r.offset, r.elements)).collect();
        tables.add(
            &fs,
            TableFile {
                name,
                dtype: file.dtype,
                column_type: &file.column_type,
                hash: file.schema_hash,
                ends: &file.ends,
                groups: file.runs.len() as u64,
                blocks: 0,
                bytes: size,
                runs: &runs,
            },
        )?;
    }
    Ok(tables.finish())
}

/// The split of a `DatasetDict` to read: the one named, which `dataset_dict.json` must list.
///
/// # Errors
/// [`ForeignError::SplitRequired`] when none is named or the named one is not listed;
/// [`ForeignError::InvalidIndex`] when `dataset_dict.json` does not parse.
fn choose_split(fs: &Fs, options: &ForeignOptions) -> Result<String> {
    let text = fs.read_whole("dataset_dict.json", MAX_LISTING_BYTES)?;
    let dict: DatasetDict = serde_json::from_slice(&text)
        .map_err(|e| fs.err("dataset_dict.json", ForeignError::InvalidIndex { reason: e.to_string() }))?;
    match &options.split {
        Some(s) if dict.splits.contains(s) => {
            fs.safe_name(s)?;
            Ok(s.clone())
        }
        _ => Err(fs.err("dataset_dict.json", ForeignError::SplitRequired { splits: dict.splits })),
    }
}

/// The directory `name` below `place`.
fn subdir(place: &Place, name: &str) -> Place {
    match place {
        Place::Local(p) => Place::Local(p.join(name)),
        Place::Remote { url, options } => {
            Place::Remote { url: format!("{}/{name}", url.trim_end_matches('/')), options: options.clone() }
        }
    }
}

/// The data files `state.json` lists, in its order, each a plain file name in the directory
/// that exists; and the text of `state.json`.
///
/// # Errors
/// [`ForeignError::InvalidIndex`] when it does not parse; [`ForeignError::UnsafeShardPath`]
/// for a name with `/`, `\`, `..` or an absolute path; [`ForeignError::FileNotFound`] for a
/// file that is not there (errors name `state.json`).
fn listed_files(fs: &Fs) -> Result<(Vec<String>, Vec<u8>)> {
    let text = fs.read_whole("state.json", MAX_LISTING_BYTES)?;
    let state: State = serde_json::from_slice(&text)
        .map_err(|e| fs.err("state.json", ForeignError::InvalidIndex { reason: e.to_string() }))?;
    let mut names = Vec::with_capacity(state.data_files.len());
    for f in state.data_files {
        let name = f.filename;
        if name.contains('/') || name == ".." || name == "." {
            return Err(fs.err("state.json", ForeignError::UnsafeShardPath { path: name }));
        }
        fs.safe_name(&name)
            .map_err(|_| fs.err("state.json", ForeignError::UnsafeShardPath { path: name.clone() }))?;
        if fs.dir.file_len(&name)?.is_none() {
            return Err(fs.err("state.json", ForeignError::FileNotFound { name }));
        }
        names.push(name);
    }
    Ok((names, text))
}
