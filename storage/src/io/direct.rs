//! `O_DIRECT` reads for cold-data measurements: bypass the page cache through an aligned
//! bounce buffer.

use super::backend::{plan, Op, ReadBackend, DIRECT_ALIGN};
use super::files::FileSet;
use super::request::ReadRequest;
use super::uring::UringBackend;
use super::{pread, uring};
use crate::{Result, StorageError};

/// One [`DIRECT_ALIGN`]-aligned block of a bounce buffer.
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C, align(4096))] // = DIRECT_ALIGN
struct Block([u8; DIRECT_ALIGN]);

/// Which engine a [`DirectBackend`] reads with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Engine {
    Pread,
    IoUring,
}

/// Reads with `O_DIRECT` descriptors (separate from the buffered ones, same descriptor cap):
/// each request is widened to [`DIRECT_ALIGN`]-aligned offsets and lengths, read into an
/// aligned bounce buffer and copied out. Meant for benchmarks of cold data (the page cache is
/// bypassed, so every read reaches the device); Linux only.
#[derive(Debug, Clone, Copy)]
pub struct DirectBackend {
    engine: Engine,
}

impl DirectBackend {
    /// `O_DIRECT` reads with one `pread` per request.
    pub fn pread() -> Self {
        DirectBackend { engine: Engine::Pread }
    }

    /// `O_DIRECT` reads batched through io_uring.
    ///
    /// # Errors
    /// [`StorageError::Backend`] when io_uring is unavailable (see
    /// [`UringBackend::new`]).
    pub fn io_uring() -> Result<Self> {
        UringBackend::new()?;
        Ok(DirectBackend { engine: Engine::IoUring })
    }
}

impl ReadBackend for DirectBackend {
    fn name(&self) -> &'static str {
        match self.engine {
            Engine::Pread => "pread+direct",
            Engine::IoUring => "io_uring+direct",
        }
    }

    fn read_into(&self, files: &FileSet, requests: &[ReadRequest], out: &mut [u8]) -> Result<()> {
        let exact = plan(files, requests, out.len(), usize::MAX)?;
        let mut ops = Vec::with_capacity(exact.len());
        let mut total = 0usize;
        for e in &exact {
            let start = e.offset - e.offset % DIRECT_ALIGN as u64;
            let head = (e.offset - start) as usize;
            let need = head + e.len;
            let len = need.div_ceil(DIRECT_ALIGN) * DIRECT_ALIGN;
            ops.push(Op { file: e.file, offset: start, dst: total, len, need, head, done: 0 });
            total = total.checked_add(len).ok_or(StorageError::BatchTooLarge { bytes: u64::MAX })?;
        }
        // Whole aligned blocks, so the buffer itself is aligned (no slack to skip).
        let mut blocks: Vec<Block> = bytemuck::zeroed_vec(total / DIRECT_ALIGN);
        let buf: &mut [u8] = bytemuck::cast_slice_mut(&mut blocks);
        match self.engine {
            Engine::Pread => pread::run_ops(files, &mut ops, buf, true)?,
            Engine::IoUring => uring::run_ops(files, &mut ops, buf, true)?,
        }
        for (e, op) in exact.iter().zip(&ops) {
            let src = op.dst + op.head;
            out[e.dst..e.dst + e.len].copy_from_slice(&buf[src..src + e.len]);
        }
        Ok(())
    }
}
