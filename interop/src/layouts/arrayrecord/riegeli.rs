//! The riegeli/records container under ArrayRecord (google/riegeli
//! `doc/riegeli_records_file_format.md`): 64 KiB blocks, each starting with a 24-byte block
//! header, interrupting chunks anywhere; chunks of a 40-byte header and their data; 64-bit
//! HighwayHash checks keyed by `"Riegeli/records\n"` twice; simple-records chunks
//! (`'r'`) with their compressions (none, brotli, zstd, snappy).
//!
//! Every size a chunk declares is checked against the byte range the caller allows it
//! before anything is read or allocated with it, and decompression never produces more
//! than the size the chunk declares (itself bounded by a multiple of the compressed bytes).

use std::io::Read;

use highway::{HighwayHash, HighwayHasher, Key};

use crate::error::{ForeignError, Result};
use crate::files::{u64_at, Fs};

/// Bytes per block.
pub(crate) const BLOCK: u64 = 1 << 16;
/// Bytes of a block header.
const BLOCK_HEADER: u64 = 24;
/// Bytes of a block after its header.
const USABLE: u64 = BLOCK - BLOCK_HEADER;
/// Bytes of a chunk header.
const CHUNK_HEADER: u64 = 40;
/// The most decoded bytes a chunk may declare per byte of its data (plus [`MIN_DECODED`]):
/// token records compress by far less; a larger claim is a damaged or hostile file.
const MAX_RATIO: u64 = 4096;
/// Decoded bytes any chunk may declare, whatever its data size.
const MIN_DECODED: u64 = 1 << 20;

/// The HighwayHash key of riegeli: `"Riegeli/records\n"` twice, as four little-endian u64.
const KEY: [u64; 4] =
    [0x2f69_6c65_6765_6952, 0x0a73_6472_6f63_6572, 0x2f69_6c65_6765_6952, 0x0a73_6472_6f63_6572];

/// The first 64 bytes of every riegeli/records file: the first block header and the
/// signature chunk (type `'s'`, no data).
pub(crate) const SIGNATURE: [u8; 64] = [
    0x83, 0xaf, 0x70, 0xd1, 0x0d, 0x88, 0x4a, 0x3f, 0, 0, 0, 0, 0, 0, 0, 0, 0x40, 0, 0, 0, 0, 0, 0, 0, 0x91,
    0xba, 0xc2, 0x3c, 0x92, 0x87, 0xe1, 0xa9, 0, 0, 0, 0, 0, 0, 0, 0, 0xe1, 0x9f, 0x13, 0xc0, 0xe9, 0xb1,
    0xc3, 0x72, 0x73, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
];

/// The 64-bit HighwayHash of `data` with riegeli's key.
pub(crate) fn hash(data: &[u8]) -> u64 {
    HighwayHasher::new(Key(KEY)).hash64(data)
}

/// The file position after `size` chunk bytes written from `pos`, block headers counted
/// (the spec's `AddWithOverhead`); `None` on overflow.
fn add_with_overhead(pos: u64, size: u64) -> Option<u64> {
    let overhead = size.checked_add((pos.checked_add(USABLE - 1)?) % BLOCK)? / USABLE;
    pos.checked_add(size)?.checked_add(overhead.checked_mul(BLOCK_HEADER)?)
}

/// The first position at or after `pos` where a chunk may begin (the spec's
/// `RoundUpToPossibleChunkBoundary`).
fn round_up_to_chunk_boundary(pos: u64) -> Option<u64> {
    let remaining = BLOCK - 1 - (pos.checked_add(BLOCK - 1)?) % BLOCK;
    pos.checked_add(remaining.saturating_sub(USABLE - 1))
}

/// A chunk's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChunkHeader {
    /// Bytes of data after the header.
    pub(crate) data_size: u64,
    /// HighwayHash of the data.
    data_hash: u64,
    /// The type byte (`'s'`, `'m'`, `'p'`, `'r'`, `'t'`).
    pub(crate) chunk_type: u8,
    /// Records in the chunk (56 bits).
    pub(crate) num_records: u64,
    /// Bytes of the records once decoded.
    pub(crate) decoded_data_size: u64,
}

/// One chunk read and checked: its header, its data (block headers removed) and where the
/// next chunk may begin.
#[derive(Debug)]
pub(crate) struct Chunk {
    /// The file position of the chunk.
    pub(crate) at: u64,
    /// Its header.
    pub(crate) header: ChunkHeader,
    /// Its data.
    pub(crate) data: Vec<u8>,
}

/// The chunks of one file, read through `fs`.
#[derive(Debug)]
pub(crate) struct Chunks<'a> {
    /// The dataset's files.
    pub(crate) fs: &'a Fs,
    /// The file.
    pub(crate) name: &'a str,
}

impl Chunks<'_> {
    /// The error `error` about this file.
    pub(crate) fn err(&self, error: ForeignError) -> crate::error::InteropError {
        self.fs.err(self.name, error)
    }

    /// `n` chunk bytes from file position `pos`, block headers checked and removed; the
    /// file range they take must end by `limit`. Returns them and the position after them.
    fn logical(&self, chunk: u64, pos: u64, n: u64, limit: u64) -> Result<(Vec<u8>, u64)> {
        let out_of_range = |end: Option<u64>| {
            self.err(ForeignError::ChunkDecode {
                chunk,
                reason: match end {
                    Some(e) => format!("{n} bytes from {pos} end at {e}, past {limit}"),
                    None => format!("{n} bytes from {pos} overflow"),
                },
            })
        };
        let end = add_with_overhead(pos, n).ok_or_else(|| out_of_range(None))?;
        if end > limit {
            return Err(out_of_range(Some(end)));
        }
        let raw = self.fs.read(self.name, pos, end - pos)?;
        let mut out = Vec::with_capacity(n as usize);
        let mut p = pos;
        while p < end {
            let i = (p - pos) as usize;
            if p.is_multiple_of(BLOCK) {
                let header = raw.get(i..i + BLOCK_HEADER as usize).ok_or_else(|| out_of_range(Some(end)))?;
                if u64_at(header, 0) != hash(&header[8..]) {
                    return Err(self.err(ForeignError::ChunkHashMismatch { chunk: p, what: "block header" }));
                }
                p += BLOCK_HEADER;
                continue;
            }
            let take = (BLOCK - p % BLOCK).min(end - p);
            out.extend_from_slice(&raw[i..i + take as usize]);
            p += take;
        }
        Ok((out, end))
    }

    /// The header of the chunk at file position `at`, its hash checked, and the position of
    /// its data; the header must end by `limit`.
    ///
    /// # Errors
    /// [`ForeignError::ChunkHashMismatch`] (block header or header hash);
    /// [`ForeignError::ChunkDecode`] when the header runs past `limit`; read errors.
    pub(crate) fn header(&self, at: u64, limit: u64) -> Result<(ChunkHeader, u64)> {
        let (h, after) = self.logical(at, at, CHUNK_HEADER, limit)?;
        if u64_at(&h, 0) != hash(&h[8..]) {
            return Err(self.err(ForeignError::ChunkHashMismatch { chunk: at, what: "header" }));
        }
        let type_and_records = u64_at(&h, 24);
        let header = ChunkHeader {
            data_size: u64_at(&h, 8),
            data_hash: u64_at(&h, 16),
            chunk_type: (type_and_records & 0xff) as u8,
            num_records: type_and_records >> 8,
            decoded_data_size: u64_at(&h, 32),
        };
        Ok((header, after))
    }

    /// The chunk at file position `at`, hashes checked; the chunk must end by `limit`.
    ///
    /// # Errors
    /// As [`Chunks::header`], and [`ForeignError::ChunkHashMismatch`] for the data hash,
    /// [`ForeignError::ChunkDecode`] when the data runs past `limit`.
    pub(crate) fn read(&self, at: u64, limit: u64) -> Result<Chunk> {
        let (header, after) = self.header(at, limit)?;
        if header.data_size > limit.saturating_sub(after) {
            return Err(self.err(ForeignError::ChunkDecode {
                chunk: at,
                reason: format!("data_size {} runs past {limit}", header.data_size),
            }));
        }
        let (data, _) = self.logical(at, after, header.data_size, limit)?;
        if header.data_hash != hash(&data) {
            return Err(self.err(ForeignError::ChunkHashMismatch { chunk: at, what: "data" }));
        }
        Ok(Chunk { at, header, data })
    }
}

/// The position after the chunk at `at` with this header (the spec's chunk end: data and
/// padding up to a possible chunk boundary); `None` on overflow.
pub(crate) fn chunk_end(at: u64, header: &ChunkHeader) -> Option<u64> {
    let a = add_with_overhead(at, CHUNK_HEADER.checked_add(header.data_size)?)?;
    let b = round_up_to_chunk_boundary(at.checked_add(header.num_records)?)?;
    Some(a.max(b))
}

/// The records of a simple-records chunk (`'r'`): their concatenated bytes and their sizes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SimpleRecords {
    /// The records, concatenated.
    pub(crate) values: Vec<u8>,
    /// Where each record ends in `values` (`num_records` offsets, non-decreasing).
    pub(crate) ends: Vec<u64>,
}

impl SimpleRecords {
    /// The number of records.
    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }

    /// Record `i` (`None` past the last).
    pub(crate) fn get(&self, i: usize) -> Option<&[u8]> {
        let end = *self.ends.get(i)? as usize;
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        self.values.get(start..end)
    }
}

/// A little-endian base-128 varint at `*i` of `b`, advancing `*i`.
pub(crate) fn varint(b: &[u8], i: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*i)?;
        *i += 1;
        v |= u64::from(byte & 0x7f).checked_shl(shift)?;
        if byte & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// Decodes a simple-records chunk.
///
/// # Errors
/// [`ForeignError::ChunkDecode`] for a chunk that is not one (its sizes, the compression
/// type, a decompressed size other than declared, record sizes that do not add up to
/// `decoded_data_size`), with the chunk's position.
pub(crate) fn simple_records(chunk: &Chunk) -> std::result::Result<SimpleRecords, ForeignError> {
    let bad = |reason: String| ForeignError::ChunkDecode { chunk: chunk.at, reason };
    let h = &chunk.header;
    let data = &chunk.data;
    let max_decoded = MIN_DECODED.saturating_add(h.data_size.saturating_mul(MAX_RATIO));
    if h.decoded_data_size > max_decoded {
        return Err(bad(format!(
            "decoded_data_size {} is more than {MAX_RATIO} times the {} bytes of data",
            h.decoded_data_size, h.data_size
        )));
    }
    let compression = *data.first().ok_or_else(|| bad("empty simple chunk".into()))?;
    let mut i = 1usize;
    let sizes_len =
        varint(data, &mut i).ok_or_else(|| bad("compressed sizes length does not parse".into()))?;
    let rest = (data.len() - i) as u64;
    if sizes_len > rest {
        return Err(bad(format!("compressed sizes of {sizes_len} bytes, {rest} bytes left")));
    }
    let (sizes_block, values_block) = data[i..].split_at(sizes_len as usize);
    // Each size is a varint of 1 to 10 bytes.
    let max_sizes = h.num_records.saturating_mul(10);
    if h.num_records > max_decoded {
        return Err(bad(format!("num_records {} for {} bytes of data", h.num_records, h.data_size)));
    }
    let sizes = decompress(compression, sizes_block, max_sizes).map_err(|r| bad(format!("sizes: {r}")))?;
    let values = decompress(compression, values_block, h.decoded_data_size)
        .map_err(|r| bad(format!("values: {r}")))?;
    if values.len() as u64 != h.decoded_data_size {
        return Err(bad(format!(
            "values hold {} bytes, decoded_data_size is {}",
            values.len(),
            h.decoded_data_size
        )));
    }
    let mut ends = Vec::with_capacity(h.num_records.min(sizes.len() as u64) as usize);
    let (mut j, mut end) = (0usize, 0u64);
    for k in 0..h.num_records {
        let n = varint(&sizes, &mut j).ok_or_else(|| bad(format!("size of record {k} does not parse")))?;
        end = end
            .checked_add(n)
            .filter(|&e| e <= h.decoded_data_size)
            .ok_or_else(|| bad(format!("record {k} ends past decoded_data_size {}", h.decoded_data_size)))?;
        ends.push(end);
    }
    if j != sizes.len() || end != h.decoded_data_size {
        return Err(bad(format!(
            "record sizes add up to {end} bytes ({} bytes of sizes left), decoded_data_size is {}",
            sizes.len() - j,
            h.decoded_data_size
        )));
    }
    Ok(SimpleRecords { values, ends })
}

/// Decompresses one block of a simple chunk (`compression` 0: stored; `'b'` brotli, `'z'`
/// zstd, `'s'` snappy, each prefixed by its varint decompressed size), producing at most
/// `max` bytes.
fn decompress(compression: u8, block: &[u8], max: u64) -> std::result::Result<Vec<u8>, String> {
    if compression == 0 {
        if block.len() as u64 > max {
            return Err(format!("{} stored bytes, at most {max} expected", block.len()));
        }
        return Ok(block.to_vec());
    }
    let mut i = 0usize;
    let declared = varint(block, &mut i).ok_or("the decompressed size does not parse")?;
    if declared > max {
        return Err(format!("declared {declared} bytes, at most {max} expected"));
    }
    let body = &block[i..];
    let cap = declared as usize;
    let out = match compression {
        b'z' => {
            zstd::bulk::decompress(body, cap).map_err(|e| format!("zstd: {e} (declared {declared} bytes)"))?
        }
        b's' => {
            let n = snap::raw::decompress_len(body).map_err(|e| format!("snappy: {e}"))?;
            if n != cap {
                return Err(format!("snappy block of {n} bytes, declared {declared}"));
            }
            snap::raw::Decoder::new().decompress_vec(body).map_err(|e| format!("snappy: {e}"))?
        }
        b'b' => {
            let mut out = Vec::with_capacity(cap);
            brotli_decompressor::Decompressor::new(body, 4096)
                .take(declared.saturating_add(1))
                .read_to_end(&mut out)
                .map_err(|e| format!("brotli: {e}"))?;
            out
        }
        other => return Err(format!("unknown compression type {other:#04x}")),
    };
    if out.len() != cap {
        return Err(format!("decompressed to {} bytes, declared {declared}", out.len()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn highway_hash_matches_the_riegeli_vectors() {
        let mut sixteen = [0u8; 16];
        sixteen[8] = 0x40;
        assert_eq!(hash(&sixteen), 0x3f4a_880d_d170_af83);
        assert_eq!(hash(&[]), 0x72c3_b1e9_c013_9fe1);
        assert_eq!(u64_at(&SIGNATURE, 0), hash(&SIGNATURE[8..24]));
        assert_eq!(u64_at(&SIGNATURE, 24), hash(&SIGNATURE[32..64]));
    }

    #[test]
    fn chunk_boundaries_follow_the_spec_formulas() {
        assert_eq!(add_with_overhead(0, 64), Some(88));
        assert_eq!(add_with_overhead(64, 40), Some(104));
        assert_eq!(add_with_overhead(65_500, 100), Some(65_624));
        assert_eq!(round_up_to_chunk_boundary(65_530), Some(65_530));
        assert_eq!(round_up_to_chunk_boundary(65_536), Some(65_536));
        assert_eq!(round_up_to_chunk_boundary(65_540), Some(65_561));
        let h = ChunkHeader {
            data_size: 0,
            data_hash: 0,
            chunk_type: b's',
            num_records: 0,
            decoded_data_size: 0,
        };
        assert_eq!(chunk_end(0, &h), Some(64));
        assert_eq!(add_with_overhead(u64::MAX - 3, 10), None);
    }
}
