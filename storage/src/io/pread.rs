//! The portable backend: one positional read per request.

use super::backend::{plan, Op, ReadBackend, DIRECT_ALIGN};
use super::files::FileSet;
use super::request::ReadRequest;
use crate::{Result, StorageError};

/// Positional reads (`pread(2)` through `FileExt::read_at`), one call per request (more when
/// the kernel returns short reads): the portable backend, and what [`super::AutoBackend`]
/// falls back to when io_uring is unavailable.
#[derive(Debug, Clone, Copy, Default)]
pub struct PreadBackend;

impl ReadBackend for PreadBackend {
    fn name(&self) -> &'static str {
        "pread"
    }

    fn read_into(&self, files: &FileSet, requests: &[ReadRequest], out: &mut [u8]) -> Result<()> {
        let mut ops = plan(files, requests, out.len(), usize::MAX)?;
        run_ops(files, &mut ops, out, false)
    }
}

/// Runs `ops` one after the other with `pread`, retrying `EINTR` and short reads. With
/// `direct`, descriptors are opened with `O_DIRECT`; a short read that ends off the
/// alignment grid is the end of the file.
pub(crate) fn run_ops(files: &FileSet, ops: &mut [Op], buf: &mut [u8], direct: bool) -> Result<()> {
    use std::os::unix::fs::FileExt;
    for op in ops.iter_mut() {
        if op.len == 0 {
            continue;
        }
        let file = if direct { files.handle_direct(op.file)? } else { files.handle(op.file)? };
        let dst = &mut buf[op.dst..op.dst + op.len];
        while op.done < op.need {
            match file.read_at(&mut dst[op.done..], op.offset + op.done as u64) {
                Ok(0) => return Err(op.short_read(files)),
                Ok(n) => {
                    op.done += n;
                    if direct && op.done < op.need && op.done % DIRECT_ALIGN != 0 {
                        return Err(op.short_read(files));
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(StorageError::io(&files.file(op.file).path, e)),
            }
        }
    }
    Ok(())
}
