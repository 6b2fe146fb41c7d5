//! Documents of streams that record none (nanoGPT, llm.c, OLMo without metadata): the scan
//! for a [`DocumentDelimiter`] over the tokens.

use guideloom_formats::Primitive;
use guideloom_storage::Segment;

use crate::error::Result;
use crate::files::Fs;
use crate::options::DocumentDelimiter;
use crate::parts::Parts;

/// One element of `dtype` (little- or big-endian) as u64 (signed values sign-extended).
fn element_value(b: &[u8], dtype: Primitive, big_endian: bool) -> u64 {
    let mut le = [0u8; 8];
    let n = b.len().min(8);
    le[..n].copy_from_slice(&b[..n]);
    if big_endian {
        le[..n].reverse();
    }
    let v = u64::from_le_bytes(le);
    let bits = 8 * n as u32;
    match dtype {
        Primitive::I8 | Primitive::I16 | Primitive::I32 if bits < 64 => {
            let shift = 64 - bits;
            (((v << shift) as i64) >> shift) as u64
        }
        _ => v,
    }
}

/// The document boundaries `delimiter` gives over the stream of `parts` (`elements`
/// tokens), read segment by segment in chunks of at most 1 Mi tokens.
pub(crate) fn scan_documents(
    fs: &Fs,
    parts: &Parts,
    delimiter: DocumentDelimiter,
    elements: u64,
) -> Result<Vec<u64>> {
    const CHUNK: u64 = 1 << 20;
    let itemsize = parts.dtype.size();
    let mut bounds = vec![0u64];
    let mut pos = 0u64;
    for &Segment { file, offset: base, elements: n } in &parts.segments {
        let name = parts.files[file].path.to_string_lossy().into_owned();
        let mut done = 0u64;
        while done < n {
            let count = (n - done).min(CHUNK);
            let bytes = fs.read(&name, base + done * itemsize, count * itemsize)?;
            for (k, el) in bytes.chunks_exact(itemsize as usize).enumerate() {
                let v = element_value(el, parts.dtype, parts.big_endian);
                let p = pos + done + k as u64;
                match delimiter {
                    DocumentDelimiter::Ends(t) if v == t => bounds.push(p + 1),
                    DocumentDelimiter::Starts(t) if v == t && p > 0 => bounds.push(p),
                    _ => {}
                }
            }
            done += count;
        }
        pos += n;
    }
    if bounds.last() != Some(&elements) {
        bounds.push(elements);
    }
    Ok(bounds)
}
