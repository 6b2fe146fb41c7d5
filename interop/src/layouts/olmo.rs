//! OLMo / Dolma token files: raw tokens named `*.npy` (no NPY header), one file, a glob or a
//! directory, with each file's documents in a sibling `<stem>.csv.gz` (gzip: the `olmo`
//! feature).
//!
//! Sources: allenai/dolma `python/dolma/tokenizer/memmap_writer.py` and allenai/OLMo-core
//! `src/olmo_core/data/utils.py` (raw `np.memmap`, `.csv.gz` rows `start,end[,id,src,loc]`).

use std::io::Read;

use guideloom_storage::Segment;

use crate::error::{ForeignError, Result};
use crate::files::{expand, Fs, Place, MAX_INDEX_BYTES};
use crate::format::ForeignFormat;
use crate::layouts::npy::MAGIC as NPY_MAGIC;
use crate::layouts::raw::{raw_elements, required_dtype};
use crate::options::ForeignOptions;
use crate::parts::{ForeignFile, Parts};

/// OLMo / Dolma raw token files (named `*.npy` without an NPY header): a file, a glob or a
/// directory; documents from each file's sibling `<stem>.csv.gz` when every file has one.
pub(crate) fn open(place: &Place, options: &ForeignOptions) -> Result<Parts> {
    let format = ForeignFormat::Olmo;
    let dtype = required_dtype(format, &place.label(), options)?;
    let (dir, names) = expand(format, place, &["npy"])?;
    let fs = Fs::new(format, dir);
    let mut parts = Parts::new(&fs, dtype);
    let mut documents = Some(vec![0u64]);
    let mut base = 0u64;
    for (i, name) in names.iter().enumerate() {
        let bytes = fs.len(name)?;
        if bytes >= NPY_MAGIC.len() as u64 && fs.read(name, 0, NPY_MAGIC.len() as u64)? == NPY_MAGIC {
            return Err(fs.err(name, ForeignError::LooksLikeNpy));
        }
        let elements = raw_elements(&fs, name, bytes, dtype)?;
        let csv = format!("{}.csv.gz", name.strip_suffix(".npy").unwrap_or(name));
        match (&mut documents, fs.len_opt(&csv)?) {
            (Some(docs), Some(_)) => {
                for b in read_metadata(&fs, &csv, elements)? {
                    docs.push(base + b);
                }
            }
            _ => documents = None,
        }
        parts.files.push(ForeignFile { path: name.into(), bytes, elements });
        parts.segments.push(Segment { file: i, offset: 0, elements });
        base += elements;
    }
    if options.delimiter.is_none() {
        parts.documents = documents;
    }
    Ok(parts)
}

/// The document ends (token offsets inside the file) a Dolma / OLMo-core `.csv.gz` gives
/// for a file of `tokens` tokens: rows `start,end[,...]`, contiguous from 0 to `tokens`.
fn read_metadata(fs: &Fs, name: &str, tokens: u64) -> Result<Vec<u64>> {
    let gz = fs.read_whole(name, MAX_INDEX_BYTES)?;
    let mut text = String::new();
    // Bounded by the compressed size (a ratio cap), not only by the index limit.
    let cap = MAX_INDEX_BYTES.min(guideloom_formats::inflate_bound(gz.len() as u64));
    flate2::read::GzDecoder::new(&gz[..])
        .take(cap.saturating_add(1))
        .read_to_string(&mut text)
        .map_err(|e| fs.err(name, ForeignError::DecompressionFailed { reason: e.to_string() }))?;
    if text.len() as u64 > cap {
        return Err(fs.err(
            name,
            ForeignError::DecompressionFailed {
                reason: format!("{} compressed bytes inflate past {cap} bytes", gz.len()),
            },
        ));
    }
    let mut ends = Vec::new();
    let mut prev = 0u64;
    for (row, line) in text.lines().filter(|l| !l.trim().is_empty()).enumerate() {
        let row = row as u64;
        let mut cols = line.split(',');
        let mut num = |what: &str| -> Result<u64> {
            let c = cols.next().unwrap_or("").trim();
            c.parse::<u64>().map_err(|_| {
                fs.err(
                    name,
                    ForeignError::Metadata { row, reason: format!("{what} {c:?} is not a token offset") },
                )
            })
        };
        let (start, end) = (num("start")?, num("end")?);
        if start > end || end > tokens || (start >= tokens && tokens > 0) {
            return Err(fs.err(name, ForeignError::MetadataOutOfRange { row, start, end, tokens }));
        }
        if start != prev {
            return Err(fs.err(
                name,
                ForeignError::Metadata {
                    row,
                    reason: format!("starts at {start}, the row before ends at {prev}"),
                },
            ));
        }
        prev = end;
        ends.push(end);
    }
    if prev != tokens {
        return Err(fs.err(
            name,
            ForeignError::Metadata {
                row: ends.len() as u64,
                reason: format!("the rows end at token {prev}, the file holds {tokens}"),
            },
        ));
    }
    Ok(ends)
}
