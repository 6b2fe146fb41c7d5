//! The io_uring backend: every request of a batch pushed onto one ring owned by the reading
//! thread, submitted together, completions gathered by `user_data`.
//!
//! Buffer lifetime: the kernel writes straight into the caller's `out` slice (or the direct
//! backend's bounce buffer). [`run_ops`] does not return, on success, on error or while
//! unwinding from a panic, before every operation the kernel accepted has posted its
//! completion ([`Batch`]'s `Drop` drains), so the slice is never released while the kernel
//! may still write into it. A ring is put back into its thread-local slot only when it is
//! idle (nothing queued, nothing in flight); a ring whose state is unknown is discarded.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::os::unix::io::AsRawFd;
use std::sync::Arc;

use io_uring::{opcode, types, IoUring, Probe};

use super::backend::{plan, Op, ReadBackend, DIRECT_ALIGN};
use super::files::FileSet;
use super::request::ReadRequest;
use crate::{Result, StorageError};

/// Submission-queue entries per ring (the completion queue gets twice as many). Batches of
/// more requests are streamed through: the queue is refilled as completions arrive.
const RING_ENTRIES: u32 = 64;

/// Longest single read operation in bytes (a read's length is a `u32`; the kernel caps one
/// read at about 2 GiB anyway). Longer requests are split.
const MAX_OP: usize = 1 << 30;

const NAME: &str = "io_uring";

thread_local! {
    /// The reading thread's ring, idle between calls; created on first use.
    static RING: RefCell<Option<IoUring>> = const { RefCell::new(None) };
}

/// Checks once per call that io_uring can be used here: sets up a small ring and asks the
/// kernel's opcode probe whether `IORING_OP_READ` is supported.
///
/// # Errors
/// A human-readable reason (the failing step, the OS error and, when it explains it, the
/// `kernel.io_uring_disabled` sysctl value).
pub fn io_uring_probe() -> std::result::Result<(), String> {
    let ring = IoUring::new(2).map_err(|e| {
        let sysctl = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
            .map(|v| format!(" (kernel.io_uring_disabled = {})", v.trim()))
            .unwrap_or_default();
        format!("io_uring ring setup failed: {e}{sysctl}")
    })?;
    let mut probe = Probe::new();
    ring.submitter().register_probe(&mut probe).map_err(|e| format!("io_uring opcode probe failed: {e}"))?;
    if !probe.is_supported(opcode::Read::CODE) {
        return Err("the kernel's io_uring does not support IORING_OP_READ (needs Linux 5.6+)".into());
    }
    Ok(())
}

/// The io_uring probe's outcome ([`io_uring_probe`]), computed once per process.
pub(crate) fn cached_probe() -> &'static std::result::Result<(), String> {
    static PROBE: std::sync::OnceLock<std::result::Result<(), String>> = std::sync::OnceLock::new();
    PROBE.get_or_init(io_uring_probe)
}

/// Batched reads through io_uring: one ring per reading thread (created on the thread's first
/// read, `64` submission entries), all requests of a batch pushed and submitted with one
/// `io_uring_enter`, completions matched by `user_data`, short reads resubmitted for the
/// remainder, `EINTR`/`EAGAIN`/`EBUSY` retried. Plain (unregistered) descriptors and
/// buffers: the caller's buffer changes with every batch, and registering it per batch or
/// copying out of a registered pool costs more than `READ_FIXED` saves (see the crate's
/// benchmark notes).
#[derive(Debug, Clone, Copy)]
pub struct UringBackend {
    _private: (),
}

impl UringBackend {
    /// The io_uring backend, after checking (once per process, cached) that the kernel allows
    /// it ([`io_uring_probe`]).
    ///
    /// # Errors
    /// [`StorageError::Backend`] with the probe's reason when io_uring is unavailable (old
    /// kernel, seccomp sandbox, `kernel.io_uring_disabled`).
    pub fn new() -> Result<Self> {
        match cached_probe() {
            Ok(()) => Ok(UringBackend { _private: () }),
            Err(reason) => Err(StorageError::Backend { backend: NAME, reason: reason.clone() }),
        }
    }
}

impl ReadBackend for UringBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn read_into(&self, files: &FileSet, requests: &[ReadRequest], out: &mut [u8]) -> Result<()> {
        let mut ops = plan(files, requests, out.len(), MAX_OP)?;
        run_ops(files, &mut ops, out, false)
    }
}

fn backend_err(reason: String) -> StorageError {
    StorageError::Backend { backend: NAME, reason }
}

/// Reads every op into `buf` on this thread's ring. With `direct`, descriptors are opened
/// with `O_DIRECT` and a short read that ends off the alignment grid is the end of the file.
pub(crate) fn run_ops(files: &FileSet, ops: &mut [Op], buf: &mut [u8], direct: bool) -> Result<()> {
    if ops.iter().all(|o| o.len == 0) {
        return Ok(());
    }
    let ring = match RING.with(|r| r.borrow_mut().take()) {
        Some(ring) => ring,
        None => IoUring::new(RING_ENTRIES).map_err(|e| backend_err(format!("ring setup failed: {e}")))?,
    };
    let mut batch = Batch { ring: Some(ring), in_flight: 0 };
    let result = batch.run(files, ops, buf, direct);
    if let Some(ring) = batch.finish() {
        // try_with: during thread teardown the slot may be gone; the idle ring is then dropped.
        let _ = RING.try_with(|r| *r.borrow_mut() = Some(ring));
    }
    result
}

/// A ring lent to one `read_into` call and the number of its operations the kernel may still
/// be working on. Dropping it waits for all of them.
struct Batch {
    /// `None` once the ring was found broken (it is then dropped only when nothing is in
    /// flight).
    ring: Option<IoUring>,
    /// Operations pushed and not yet completed (queued in the SQ or accepted by the kernel).
    in_flight: usize,
}

impl Batch {
    fn ring(&mut self) -> Result<&mut IoUring> {
        self.ring.as_mut().ok_or_else(|| backend_err("ring discarded after an earlier failure".into()))
    }

    fn run(&mut self, files: &FileSet, ops: &mut [Op], buf: &mut [u8], direct: bool) -> Result<()> {
        {
            let ring = self.ring()?;
            if !ring.submission().is_empty() || !ring.completion().is_empty() {
                // Never happens with rings returned idle; refuse to guess what is in there.
                self.ring = None;
                return Err(backend_err("thread ring was not idle".into()));
            }
        }
        // Files in use by one round: at most max(1, max_open / 2), so the descriptor cache
        // never has to close a file with an operation in flight (see FileSet).
        let max_pins = (files.max_open() / 2).max(1);
        let mut start = 0usize;
        while start < ops.len() {
            let mut pins: HashMap<usize, Arc<File>> = HashMap::new();
            let mut end = start;
            while end < ops.len() {
                let f = ops[end].file;
                if !pins.contains_key(&f) {
                    // Regression (issue 8): with one bound per thread, 4 reading threads pinned
                    // up to 2 * max_open files together and ran out of descriptors under a
                    // 256-descriptor limit; the cache-wide check keeps them near max_open.
                    if pins.len() == max_pins || (!pins.is_empty() && files.saturated()) {
                        break;
                    }
                    let h = if direct { files.handle_direct(f)? } else { files.handle(f)? };
                    pins.insert(f, h);
                }
                end += 1;
            }
            self.round(files, &mut ops[start..end], buf, &pins, direct)?;
            start = end;
        }
        Ok(())
    }

    /// Pushes, submits and completes `ops` (whose files are all in `pins`); returns only when
    /// none of them is in flight.
    fn round(
        &mut self,
        files: &FileSet,
        ops: &mut [Op],
        buf: &mut [u8],
        pins: &HashMap<usize, Arc<File>>,
        direct: bool,
    ) -> Result<()> {
        let base = buf.as_mut_ptr();
        let buf_len = buf.len();
        let mut pending: VecDeque<usize> = (0..ops.len()).filter(|&k| ops[k].len > 0).collect();
        let mut first_err: Option<StorageError> = None;
        let capacity = self.ring()?.params().sq_entries() as usize;
        loop {
            // Push while there is room and nothing failed.
            while first_err.is_none() && self.in_flight < capacity {
                let Some(k) = pending.pop_front() else { break };
                let op = &ops[k];
                let Some(file) = pins.get(&op.file) else {
                    first_err = Some(backend_err("internal: operation on an unpinned file".into()));
                    break;
                };
                let remaining = op.len - op.done;
                let dst = op.dst + op.done;
                // Bounds are guaranteed by `plan`; check anyway before handing a pointer to the
                // kernel.
                if dst.checked_add(remaining).is_none_or(|end| end > buf_len) {
                    first_err = Some(backend_err("internal: operation outside the buffer".into()));
                    break;
                }
                let entry = opcode::Read::new(
                    types::Fd(file.as_raw_fd()),
                    base.wrapping_add(dst),
                    u32::try_from(remaining).unwrap_or(u32::MAX),
                )
                .offset(op.offset + op.done as u64)
                .build()
                .user_data(k as u64);
                let ring = self.ring()?;
                // SAFETY: the entry points at `remaining` bytes inside `buf` (checked above),
                // which outlives the operation: this function returns only when `in_flight` is
                // 0 again, and `Batch::drop` drains in-flight operations on every other exit
                // (error return or unwinding). The descriptor is kept open by `pins` for the
                // whole round, and the cache never closes a file while a pin exists.
                let pushed = unsafe { ring.submission().push(&entry) };
                if pushed.is_err() {
                    pending.push_front(k);
                    break;
                }
                self.in_flight += 1;
            }
            if self.in_flight == 0 {
                break;
            }
            match self.ring()?.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if is_retry(&e) => {
                    // EINTR: nothing lost, enter again. EBUSY/EAGAIN: the kernel wants us to
                    // reap completions first; reaping below frees room.
                    if matches!(e.raw_os_error(), Some(libc::EBUSY | libc::EAGAIN)) {
                        std::thread::yield_now();
                    }
                }
                Err(e) => {
                    self.abandon();
                    return Err(first_err.unwrap_or_else(|| backend_err(format!("submit failed: {e}"))));
                }
            }
            let Some(ring) = self.ring.as_mut() else {
                return Err(backend_err("ring discarded after an earlier failure".into()));
            };
            for cqe in ring.completion() {
                self.in_flight -= 1;
                let k = usize::try_from(cqe.user_data()).unwrap_or(usize::MAX);
                let Some(op) = ops.get_mut(k) else {
                    first_err.get_or_insert_with(|| backend_err("completion with unknown user_data".into()));
                    continue;
                };
                let res = cqe.result();
                if res < 0 {
                    let errno = -res;
                    if errno == libc::EINTR || errno == libc::EAGAIN {
                        pending.push_back(k);
                    } else {
                        first_err.get_or_insert_with(|| {
                            StorageError::io(
                                &files.file(op.file).path,
                                std::io::Error::from_raw_os_error(errno),
                            )
                        });
                    }
                } else if res == 0 {
                    first_err.get_or_insert_with(|| op.short_read(files));
                } else {
                    op.done += res as usize;
                    if op.done < op.need {
                        if direct && op.done % DIRECT_ALIGN != 0 {
                            first_err.get_or_insert_with(|| op.short_read(files));
                        } else {
                            pending.push_back(k);
                        }
                    }
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// The ring failed to enter: waits, without entering it again, for the completions of the
    /// operations the kernel already accepted, then discards the ring (entries it never
    /// accepted stay unread in the discarded ring and are never submitted).
    fn abandon(&mut self) {
        let Some(ring) = self.ring.as_mut() else { return };
        let queued = ring.submission().len();
        let mut accepted = self.in_flight.saturating_sub(queued);
        while accepted > 0 {
            let n = ring.completion().count();
            accepted = accepted.saturating_sub(n);
            if n == 0 {
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
        }
        self.in_flight = 0;
        self.ring = None;
    }

    /// Waits until nothing is in flight (reaping and discarding completions).
    fn drain(&mut self) {
        while self.in_flight > 0 {
            let Some(ring) = self.ring.as_mut() else { return };
            match ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if is_retry(&e) => {}
                Err(_) => return self.abandon(),
            }
            let n = ring.completion().count();
            self.in_flight = self.in_flight.saturating_sub(n);
        }
    }

    /// The ring, if it is idle and fit for reuse.
    fn finish(mut self) -> Option<IoUring> {
        self.drain();
        self.ring.take()
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        // Reached with operations in flight only on an error return or while unwinding: the
        // buffer must not be released before the kernel is done with it.
        self.drain();
    }
}

fn is_retry(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EINTR | libc::EBUSY | libc::EAGAIN))
}
