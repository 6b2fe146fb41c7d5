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
        // 8, 16 or 32 bits: the shift is 32 to 56.
        Primitive::I8 | Primitive::I16 | Primitive::I32 => {
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
    scan_in_chunks(fs, parts, delimiter, elements, 1 << 20)
}

/// [`scan_documents`] reading at most `chunk` (> 0) tokens at a time.
fn scan_in_chunks(
    fs: &Fs,
    parts: &Parts,
    delimiter: DocumentDelimiter,
    elements: u64,
    chunk: u64,
) -> Result<Vec<u64>> {
    let itemsize = parts.dtype.size();
    let mut bounds = vec![0u64];
    let mut pos = 0u64;
    for &Segment { file, offset: base, elements: n } in &parts.segments {
        let name = parts.files[file].path.to_string_lossy().into_owned();
        let mut done = 0u64;
        while done < n {
            let count = (n - done).min(chunk);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 33 (mutants of the sign extension: the width `8 * n`, the shift `64 - bits`, the
    /// shifts' directions, the guard on signed dtypes): every signed width sign-extends its top
    /// bit (`-1` is `u64::MAX`, `-2` is `u64::MAX - 1`) and keeps a positive value; unsigned
    /// values and 64-bit ones are as stored; big-endian bytes are swapped first.
    #[test]
    fn issue33_foreign_scan_signed_elements_are_sign_extended() {
        use Primitive::*;
        let cases: [(&[u8], Primitive, bool, u64); 12] = [
            (&[0xff], I8, false, u64::MAX),
            (&[0x7f], I8, false, 0x7f),
            (&[0xfe, 0xff], I16, false, u64::MAX - 1),
            (&[0xff, 0x7f], I16, false, 0x7fff),
            (&[0xff, 0xfe], I16, true, u64::MAX - 1),
            (&[0x7f, 0xff], I16, true, 0x7fff),
            (&[0x00, 0x00, 0x00, 0x80], I32, false, 0xffff_ffff_8000_0000),
            (&[0x01, 0x02, 0x03, 0x04], I32, false, 0x0403_0201),
            (&[0xff, 0xff], U16, false, 0xffff),
            (&[0xff; 4], U32, false, 0xffff_ffff),
            (&[0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff], I64, false, u64::MAX - 1),
            (&[0x01, 0, 0, 0, 0, 0, 0, 0x80], U64, true, 0x0100_0000_0000_0080),
        ];
        for (bytes, dtype, big, want) in cases {
            assert_eq!(element_value(bytes, dtype, big), want, "{bytes:?} {dtype:?} big-endian {big}");
        }
    }

    /// Issue 33 (mutant of the chunk's count `(n - done).min(CHUNK)` -> `n + done`): a scan
    /// reading 3 tokens at a time finds the same boundaries as one reading 1 Mi: two segments
    /// of 7 and 5 u16 tokens (the second at byte 4 of its file), each read in 3, 3 and 1 or 3
    /// and 2 tokens, with end tokens (9) and start tokens (9) on and next to the chunks' edges.
    #[test]
    fn issue33_foreign_scan_reads_a_segment_in_chunks_to_its_end() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.bin"), crate::files::u16_bytes(&[1, 2, 9, 4, 5, 9, 9])).unwrap();
        std::fs::write(dir.path().join("b.bin"), crate::files::u16_bytes(&[0, 0, 9, 8, 7, 9, 6])).unwrap();
        let fs = Fs::local(crate::format::ForeignFormat::NanoGpt, dir.path());
        let mut parts = Parts::new(&fs, Primitive::U16);
        for (name, bytes, elements) in [("a.bin", 14, 7), ("b.bin", 14, 5)] {
            parts.files.push(crate::parts::ForeignFile { path: name.into(), bytes, elements });
        }
        parts.segments =
            vec![Segment { file: 0, offset: 0, elements: 7 }, Segment { file: 1, offset: 4, elements: 5 }];
        for chunk in [3, 1 << 20] {
            let scan = |d| scan_in_chunks(&fs, &parts, d, 12, chunk).unwrap();
            assert_eq!(scan(DocumentDelimiter::Ends(9)), [0, 3, 6, 7, 8, 11, 12], "chunk {chunk}");
            assert_eq!(scan(DocumentDelimiter::Starts(9)), [0, 2, 5, 6, 7, 10, 12], "chunk {chunk}");
        }
    }
}
