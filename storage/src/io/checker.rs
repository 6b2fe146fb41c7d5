//! The residency checker: one background thread of the process that runs the
//! [`super::HybridBackend`]'s page-cache checks (`mincore(2)`) and populations
//! (`MADV_POPULATE_READ`) off the batches' path. A leaf.
//!
//! A check of a warm 1 GiB file takes tens of milliseconds (a `mincore` pass over 262,144
//! pages) and its population hundreds on a loaded 2-core machine; made on a batch's path they
//! delayed the first batch by the size of the data set (issue 31). The thread is started on
//! the first job and then waits for jobs for the life of the process; it holds no descriptor
//! and no map between jobs.

use std::sync::mpsc::{channel, Sender};
use std::sync::{Mutex, OnceLock, PoisonError};

/// One check: owns what it reads (a map's `Arc`) and the state it writes.
pub(super) type Job = Box<dyn FnOnce() + Send + 'static>;

/// Runs `job` on the checker thread, or here and now when that thread cannot be started (the
/// decision is then made inline, as before).
pub(super) fn submit(job: Job) {
    static CHECKER: OnceLock<Option<Mutex<Sender<Job>>>> = OnceLock::new();
    let sender = CHECKER.get_or_init(|| {
        let (tx, rx) = channel::<Job>();
        std::thread::Builder::new()
            .name("guideloom-residency".into())
            .spawn(move || {
                while let Ok(job) = rx.recv() {
                    job();
                }
            })
            .ok()
            .map(|_| Mutex::new(tx))
    });
    match sender {
        Some(tx) => {
            if let Err(back) = tx.lock().unwrap_or_else(PoisonError::into_inner).send(job) {
                (back.0)();
            }
        }
        None => job(),
    }
}
