//! The mmap backend: reads copy out of read-only maps of the shard files, cached per file in
//! the [`FileSet`] (bounded like its descriptors); [`MmapBackend::map_range`] hands out
//! zero-copy slices.

use std::ops::Range;
use std::sync::Arc;

use super::backend::{buffer_length, ReadBackend};
use super::files::FileSet;
use super::request::ReadRequest;
use crate::{Result, StorageError};

/// Reads through read-only memory maps of the shard files (memmap2).
///
/// Each file is mapped once, over its committed length (or its actual length if the file is
/// shorter, in which case reads past it are [`StorageError::ShortRead`]); empty files are
/// never mapped. A set of at most 16,384 files keeps each map for its life (a map holds no
/// descriptor: the descriptors stay under `max_open_files`); a set of more caches its maps
/// alongside the files' descriptors and releases them with them, so it holds at most
/// `max_open_files` maps.
///
/// Fastest when the data is in the page cache (a read is one `memcpy`, no system call);
/// reading evicted data takes a page fault per page.
#[derive(Debug, Clone, Copy)]
pub struct MmapBackend {
    _private: (),
}

impl MmapBackend {
    /// The mmap backend.
    ///
    /// # Safety
    /// A map shows the file's current contents, not a snapshot. For as long as any storage
    /// reader using this backend (or any [`MappedBytes`] it returned) is alive, no process
    /// may truncate or rewrite the mapped shard files:
    /// - truncating a file below a mapped byte makes any later access to that byte raise
    ///   `SIGBUS`, which kills the process (it is not an error Rust can catch);
    /// - rewriting bytes in place changes data that safe code already holds as `&[u8]`
    ///   (undefined behaviour, and readers see bytes that differ from what was committed).
    ///
    /// guideloom's own writers only append past the committed length and publish through the
    /// manifest, which is safe with live maps; the hazard is other tools (or a `StreamWriter`
    /// resuming an uncommitted session, which truncates stray uncommitted bytes, not mapped
    /// committed ones). No safe function of this crate builds this backend (in particular
    /// [`super::AutoBackend`] never does, whatever `GUIDELOOM_IO` says): the program that
    /// accepts this contract calls this function itself.
    pub unsafe fn new() -> Self {
        MmapBackend { _private: () }
    }

    /// The `len` bytes at `offset` of file `file` as a zero-copy slice of the file's map.
    ///
    /// # Errors
    /// [`StorageError::ShortRead`] when the range is not inside the mapped bytes;
    /// [`StorageError::Io`] when the file cannot be opened or mapped;
    /// [`StorageError::FileOutOfRange`] for a file index out of range;
    /// [`StorageError::BatchTooLarge`] for a length memory cannot address.
    pub fn map_range(&self, files: &FileSet, request: ReadRequest) -> Result<MappedBytes> {
        self.map_range_with(files, request, &mut Vec::new())
    }

    /// Every request as a zero-copy slice, in request order (a batch takes the file set's
    /// lock once per file, not per request).
    ///
    /// # Errors
    /// As [`MmapBackend::map_range`], for the first request that fails.
    pub fn map_ranges(&self, files: &FileSet, requests: &[ReadRequest]) -> Result<Vec<MappedBytes>> {
        let mut seen = Vec::new();
        requests.iter().map(|r| self.map_range_with(files, *r, &mut seen)).collect()
    }

    /// Every request as a byte range of one of the batch's maps, for
    /// [`crate::MappedWindows`]: the maps (one per file the batch reads, looked up once each)
    /// and, per request, the index of its map in them and its range (`usize::MAX` and an
    /// empty range for an empty request). No reference count is taken per request.
    ///
    /// # Errors
    /// As [`MmapBackend::map_range`], for the first request that fails.
    pub(crate) fn map_pieces(&self, files: &FileSet, requests: &[ReadRequest]) -> Result<MappedPieces> {
        let mut seen = Vec::new();
        let mut pieces = Vec::with_capacity(requests.len());
        for r in requests {
            let (k, range) = self.locate_index(files, *r, &mut seen)?;
            pieces.push(MappedPiece { map: k.unwrap_or(usize::MAX), start: range.start, end: range.end });
        }
        Ok(MappedPieces { maps: seen.into_iter().map(|(_, m)| m).collect(), pieces })
    }

    /// [`MmapBackend::map_range`] reusing the maps already looked up for this batch in `seen`
    /// (file index, map), so a batch takes the file set's lock once per file, not per request.
    fn map_range_with(
        &self,
        files: &FileSet,
        request: ReadRequest,
        seen: &mut Vec<(usize, Option<Arc<memmap2::Mmap>>)>,
    ) -> Result<MappedBytes> {
        let (map, range) = self.locate(files, request, seen)?;
        Ok(MappedBytes { map: map.filter(|_| !range.is_empty()).cloned(), range })
    }

    /// The map of `request`'s file (looked up once per batch through `seen`, as in
    /// [`MmapBackend::map_range_with`]) and the byte range of `request` in it, checked; no
    /// reference count is taken (a copy out of the map needs none, and the count is shared by
    /// every thread reading the file).
    fn locate<'s>(
        &self,
        files: &FileSet,
        request: ReadRequest,
        seen: &'s mut Vec<(usize, Option<Arc<memmap2::Mmap>>)>,
    ) -> Result<(Option<&'s Arc<memmap2::Mmap>>, Range<usize>)> {
        let (k, range) = self.locate_index(files, request, seen)?;
        Ok((k.and_then(|k| seen[k].1.as_ref()), range))
    }

    /// [`MmapBackend::locate`], answering the index in `seen` of the request's map (`None`
    /// for an empty request, which needs none).
    fn locate_index(
        &self,
        files: &FileSet,
        request: ReadRequest,
        seen: &mut Vec<(usize, Option<Arc<memmap2::Mmap>>)>,
    ) -> Result<(Option<usize>, Range<usize>)> {
        let len =
            usize::try_from(request.len).map_err(|_| StorageError::BatchTooLarge { bytes: request.len })?;
        if len == 0 {
            files.get(request.file)?;
            return Ok((None, 0..0));
        }
        let k = match seen.iter().position(|(i, _)| *i == request.file) {
            Some(k) => k,
            None => {
                // SAFETY: `self` exists only through `MmapBackend::new`, whose caller accepted
                // the contract `FileSet::map` needs (no truncation or rewriting of mapped files).
                let m = unsafe { files.map(request.file) }?;
                seen.push((request.file, m));
                seen.len() - 1
            }
        };
        let map = seen[k].1.as_ref();
        let mapped = map.map_or(0, |m| m.len());
        let start = usize::try_from(request.offset).ok().filter(|&s| s <= mapped);
        let range = start.and_then(|s| s.checked_add(len).filter(|&e| e <= mapped).map(|e| s..e));
        match range {
            Some(range) => Ok((Some(k), range)),
            None => Err(StorageError::ShortRead {
                path: files.file(request.file).path.clone(),
                offset: request.offset,
                expected: request.len,
                got: (mapped as u64).saturating_sub(request.offset).min(request.len),
            }),
        }
    }
}

impl ReadBackend for MmapBackend {
    fn name(&self) -> &'static str {
        "mmap"
    }

    fn read_into(&self, files: &FileSet, requests: &[ReadRequest], out: &mut [u8]) -> Result<()> {
        let out_len = out.len();
        let mut pos = 0usize;
        let mut seen = Vec::new();
        for r in requests {
            // A kept map (every file's map fits the set's cap): no lock, no reference count.
            let kept = files.kept_map(r.file).and_then(|m| Some(&m[range_in(m.len(), r)?]));
            let src = match kept {
                Some(src) => src,
                None => {
                    let (map, range) = self.locate(files, *r, &mut seen)?;
                    map.map_or(&[][..], |m| &m[range])
                }
            };
            let dst = pos
                .checked_add(src.len())
                .and_then(|end| out.get_mut(pos..end))
                .ok_or_else(|| buffer_length(requests, out_len))?;
            dst.copy_from_slice(src);
            pos += src.len();
        }
        if pos != out.len() {
            return Err(buffer_length(requests, out.len()));
        }
        Ok(())
    }
}

/// A zero-copy view of mapped shard bytes; keeps its map alive (the map outlives the
/// [`FileSet`] cache entry if needed). Dereferences to `[u8]`.
///
/// A view of a page-aligned map at an offset that is a multiple of the element size is
/// aligned for that element, so `bytemuck::cast_slice` turns the view of a stream's ids into
/// `&[u16]` (`&[u32]` ...) without copying.
#[derive(Debug, Clone)]
pub struct MappedBytes {
    map: Option<Arc<memmap2::Mmap>>,
    range: Range<usize>,
}

impl std::ops::Deref for MappedBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.map {
            Some(m) => &m[self.range.clone()],
            None => &[],
        }
    }
}

impl AsRef<[u8]> for MappedBytes {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

/// The byte range of `request` in a map of `mapped` bytes, when it is non-empty and inside it
/// (the other cases go through [`MmapBackend::locate`], which answers them).
fn range_in(mapped: usize, request: &ReadRequest) -> Option<Range<usize>> {
    let start = usize::try_from(request.offset).ok()?;
    let end = start.checked_add(usize::try_from(request.len).ok()?)?;
    (request.len > 0 && end <= mapped).then_some(start..end)
}

/// The maps of one batch and its requests' ranges in them ([`MmapBackend::map_pieces`]).
#[derive(Debug, Clone, Default)]
pub(crate) struct MappedPieces {
    /// One per file the batch reads (`None` for a file with nothing mapped).
    pub(crate) maps: Vec<Option<Arc<memmap2::Mmap>>>,
    /// One per request, in request order.
    pub(crate) pieces: Vec<MappedPiece>,
}

/// One request's bytes: `maps[map][start..end]` (`map == usize::MAX`: no bytes).
#[derive(Debug, Clone, Copy)]
pub(crate) struct MappedPiece {
    pub(crate) map: usize,
    pub(crate) start: usize,
    pub(crate) end: usize,
}

impl MappedPieces {
    /// The bytes of `piece`.
    pub(crate) fn bytes(&self, piece: &MappedPiece) -> &[u8] {
        match self.maps.get(piece.map) {
            Some(Some(m)) => &m[piece.start..piece.end],
            _ => &[],
        }
    }
}
