//! The page headers of a column chunk, walked before arrow-rs decodes any page
//! (parquet-format `parquet.thrift` `PageHeader`, Thrift compact protocol): each header's
//! `compressed_page_size` must fit the rest of the chunk and its `uncompressed_page_size` the
//! chunk's `total_uncompressed_size`, so that nothing in a page header makes the decoder
//! allocate more than the chunk declares (arrow-rs allocates `uncompressed_page_size` before
//! it validates it: apache/arrow-rs#10734). Only the three sizes are kept; every other field
//! is stepped over (nesting at most [`MAX_DEPTH`] deep, lengths checked against the bytes).

use super::source::Source;

/// The deepest nesting of Thrift structs and containers a page header may have.
const MAX_DEPTH: u32 = 16;

/// The most bytes a page header may take.
const MAX_HEADER: u64 = 1 << 20;

/// One page of a column chunk.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PageInfo {
    /// `uncompressed_page_size`.
    pub(crate) uncompressed: u64,
}

/// Walks the pages of the chunk `[start, end)` of `src`, every size checked.
///
/// # Errors
/// A message naming the page and the numbers.
pub(crate) fn walk(
    src: &Source,
    (start, end): (u64, u64),
    total_uncompressed: u64,
) -> std::result::Result<Vec<PageInfo>, String> {
    let mut pages = Vec::new();
    let mut pos = start;
    while pos < end {
        let k = pages.len();
        let mut window = (end - pos).min(256);
        let (header_len, uncompressed, compressed) = loop {
            let bytes = src.bytes(pos, window).map_err(|e| format!("page {k}: {e}"))?;
            match parse(&bytes) {
                Ok(h) => break h,
                Err(Short) if window < (end - pos).min(MAX_HEADER) => {
                    window = (window * 4).min(end - pos).min(MAX_HEADER)
                }
                Err(Short) => return Err(format!("page {k} at {pos}: the header does not fit the chunk")),
                Err(Bad(why)) => return Err(format!("page {k} at {pos}: header: {why}")),
            }
        };
        let (Ok(u), Ok(c)) = (u64::try_from(uncompressed), u64::try_from(compressed)) else {
            return Err(format!("page {k} at {pos}: negative sizes ({uncompressed}, {compressed})"));
        };
        let page_end = (pos + header_len).checked_add(c).filter(|&e| e <= end);
        let Some(page_end) = page_end else {
            return Err(format!(
                "page {k} at {pos}: {c} compressed bytes run past the end of the chunk at {end}"
            ));
        };
        if u > total_uncompressed {
            return Err(format!(
                "page {k} at {pos}: declares {u} uncompressed bytes, the chunk {total_uncompressed}"
            ));
        }
        pages.push(PageInfo { uncompressed: u });
        pos = page_end;
    }
    Ok(pages)
}

/// Why a header did not parse.
enum Failure {
    /// More bytes are needed.
    Short,
    /// It is not a page header.
    Bad(String),
}
use Failure::{Bad, Short};

/// A cursor over a header's bytes.
struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn byte(&mut self) -> Result<u8, Failure> {
        let v = *self.b.get(self.at).ok_or(Short)?;
        self.at += 1;
        Ok(v)
    }

    fn skip(&mut self, n: u64) -> Result<(), Failure> {
        let end = (self.at as u64).checked_add(n).ok_or(Short)?;
        if end > self.b.len() as u64 {
            return Err(Short);
        }
        self.at = end as usize;
        Ok(())
    }

    fn varint(&mut self) -> Result<u64, Failure> {
        let mut v = 0u64;
        for shift in (0..70).step_by(7) {
            let b = self.byte()?;
            if shift == 63 && b > 1 {
                return Err(Bad("a varint overflows 64 bits".into()));
            }
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(Bad("a varint longer than 10 bytes".into()))
    }

    fn zigzag(&mut self) -> Result<i64, Failure> {
        let v = self.varint()?;
        Ok((v >> 1) as i64 ^ -((v & 1) as i64))
    }

    /// Steps over a value of compact type `t`.
    fn value(&mut self, t: u8, depth: u32) -> Result<(), Failure> {
        if depth > MAX_DEPTH {
            return Err(Bad(format!("nested deeper than {MAX_DEPTH}")));
        }
        match t {
            1 | 2 => Ok(()),
            3 => self.skip(1),
            4..=6 => self.varint().map(drop),
            7 => self.skip(8),
            8 => {
                let n = self.varint()?;
                self.skip(n)
            }
            9 | 10 => {
                let h = self.byte()?;
                let n = match h >> 4 {
                    15 => self.varint()?,
                    n => u64::from(n),
                };
                if n > (self.b.len() - self.at) as u64 {
                    return Err(Short);
                }
                let et = h & 0x0f;
                for _ in 0..n {
                    if et == 1 || et == 2 {
                        self.skip(1)?;
                    } else {
                        self.value(et, depth + 1)?;
                    }
                }
                Ok(())
            }
            11 => {
                let n = self.varint()?;
                if n == 0 {
                    return Ok(());
                }
                if n > (self.b.len() - self.at) as u64 {
                    return Err(Short);
                }
                let kv = self.byte()?;
                for _ in 0..n {
                    self.value(kv >> 4, depth + 1)?;
                    self.value(kv & 0x0f, depth + 1)?;
                }
                Ok(())
            }
            12 => self.fields(depth + 1, |_, _, _| Ok(false)),
            other => Err(Bad(format!("unknown compact type {other}"))),
        }
    }

    /// Reads a struct's fields up to its stop byte; `take(id, type, cursor)` reads a field
    /// itself (returning true) or leaves it to be stepped over.
    fn fields(
        &mut self,
        depth: u32,
        mut take: impl FnMut(i16, u8, &mut Self) -> Result<bool, Failure>,
    ) -> Result<(), Failure> {
        let mut last = 0i16;
        loop {
            let h = self.byte()?;
            if h == 0 {
                return Ok(());
            }
            let t = h & 0x0f;
            let id = match h >> 4 {
                0 => i16::try_from(self.zigzag()?).map_err(|_| Bad("a field id out of range".into()))?,
                d => last.checked_add(i16::from(d)).ok_or_else(|| Bad("a field id out of range".into()))?,
            };
            last = id;
            if !take(id, t, self)? {
                self.value(t, depth)?;
            }
        }
    }
}

/// A page header's length, `uncompressed_page_size` and `compressed_page_size`.
fn parse(b: &[u8]) -> Result<(u64, i64, i64), Failure> {
    let mut c = Cursor { b, at: 0 };
    let (mut u, mut z) = (None, None);
    c.fields(0, |id, t, c| match (id, t) {
        (2, 5) => {
            u = Some(c.zigzag()?);
            Ok(true)
        }
        (3, 5) => {
            z = Some(c.zigzag()?);
            Ok(true)
        }
        _ => Ok(false),
    })?;
    match (u, z) {
        (Some(u), Some(z)) => Ok((c.at as u64, u, z)),
        _ => Err(Bad("no uncompressed_page_size or compressed_page_size".into())),
    }
}
