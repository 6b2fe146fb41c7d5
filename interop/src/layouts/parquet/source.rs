//! A Parquet file as arrow-rs reads it ([`ChunkReader`]): ranged reads of the dataset's
//! directory (a local file through pread, an object through ranged `GET`s), each range
//! checked against the file's size before anything is allocated for it.

use std::io::Read;

use bytes::Bytes;
use parquet::errors::ParquetError;
use parquet::file::reader::{ChunkReader, Length};

use crate::files::Fs;

/// One Parquet file of a dataset: its directory, name and size.
#[derive(Debug, Clone)]
pub(crate) struct Source {
    fs: Fs,
    name: String,
    size: u64,
}

impl Source {
    /// The file `name` of `fs`, `size` bytes.
    pub(crate) fn new(fs: &Fs, name: &str, size: u64) -> Self {
        Source { fs: fs.clone(), name: name.to_string(), size }
    }

    /// Its size in bytes.
    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    /// `len` bytes at `start`, refused past the end of the file.
    pub(crate) fn bytes(&self, start: u64, len: u64) -> parquet::errors::Result<Vec<u8>> {
        if start.checked_add(len).is_none_or(|e| e > self.size) {
            return Err(ParquetError::EOF(format!(
                "{len} bytes at {start} are past the end of {} ({} bytes)",
                self.name, self.size
            )));
        }
        self.fs.read(&self.name, start, len).map_err(|e| ParquetError::External(Box::new(e)))
    }
}

impl Length for Source {
    fn len(&self) -> u64 {
        self.size
    }
}

impl ChunkReader for Source {
    type T = RangeRead;

    fn get_read(&self, start: u64) -> parquet::errors::Result<RangeRead> {
        Ok(RangeRead { source: self.clone(), pos: start.min(self.size) })
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        Ok(Bytes::from(self.bytes(start, length as u64)?))
    }
}

/// A reader of a [`Source`] from a position to its end, in reads of at most 64 KiB.
#[derive(Debug)]
pub(crate) struct RangeRead {
    source: Source,
    pos: u64,
}

impl Read for RangeRead {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = (buf.len() as u64).min(self.source.size - self.pos).min(64 << 10);
        if n == 0 {
            return Ok(0);
        }
        let bytes = self.source.bytes(self.pos, n).map_err(std::io::Error::other)?;
        buf[..n as usize].copy_from_slice(&bytes);
        self.pos += n;
        Ok(n as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 33 (mutants of `RangeRead::read`'s count `size - pos` -> `+`, `/`): a reader
    /// from a position reads what is left of the file and no more, in reads of at most 64
    /// KiB: 70,000 bytes from 0 come in reads of 65,536 and 4,464; from byte 69,990 a read
    /// into a larger buffer gives the last 10 bytes, then the end; from past the end, the end.
    #[test]
    fn issue33_foreign_parquet_a_range_read_stops_at_the_file_s_end() {
        let dir = tempfile::tempdir().unwrap();
        let bytes: Vec<u8> = (0..70_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(dir.path().join("a.parquet"), &bytes).unwrap();
        let fs = Fs::local(crate::format::ForeignFormat::Parquet, dir.path());
        let source = Source::new(&fs, "a.parquet", 70_000);
        let mut buf = vec![0u8; 100_000];
        let mut r = source.get_read(0).unwrap();
        assert_eq!(r.read(&mut buf).unwrap(), 65_536);
        assert_eq!(buf[..65_536], bytes[..65_536]);
        assert_eq!(r.read(&mut buf).unwrap(), 4_464);
        assert_eq!(buf[..4_464], bytes[65_536..]);
        assert_eq!(r.read(&mut buf).unwrap(), 0);
        let mut r = source.get_read(69_990).unwrap();
        assert_eq!(r.read(&mut buf).unwrap(), 10);
        assert_eq!(buf[..10], bytes[69_990..]);
        assert_eq!(r.read(&mut buf).unwrap(), 0);
        assert_eq!(source.get_read(80_000).unwrap().read(&mut buf).unwrap(), 0);
        assert!(matches!(source.get_bytes(69_990, 11), Err(ParquetError::EOF(_))));
    }
}
