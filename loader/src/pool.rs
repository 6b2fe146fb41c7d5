//! The worker pool both loaders share: numbered jobs in, results out of order, a reorder
//! buffer that hands them back by number, and a shutdown that never hangs.

use std::any::Any;
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use crate::{Cancellation, LoaderError};

/// Most worker threads a loader starts (a larger request is a configuration error, not an
/// abort when the system runs out of thread stacks).
pub const MAX_WORKERS: usize = 1024;

/// Default number of worker threads.
pub const DEFAULT_WORKERS: usize = 2;

/// How long dropping an iterator waits for its workers to leave before detaching the ones
/// still inside a source call that ignores the [`Cancellation`].
pub const SHUTDOWN_GRACE: Duration = Duration::from_millis(500);

/// What a worker runs for job `(number, job)`.
pub(crate) type Work<J, O> = Arc<dyn Fn(u64, J, &Cancellation) -> Result<O, LoaderError> + Send + Sync>;

type Outcome<O> = Result<O, LoaderError>;

/// The message of a panic payload.
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

/// What a helped pool's consumer needs to run queued jobs: the queue's receiving end and the
/// work.
type Helper<J, O> = (Receiver<(u64, J)>, Work<J, O>);

/// Worker threads (named `guideloom-w<i>`) taking numbered jobs from one queue.
///
/// A helped pool ([`Pool::start`] with `help`) also lets [`Pool::take`] run a queued job on
/// the calling (consumer) thread when the result it waits for is not there yet: on a machine
/// with as many cores as workers, the consumer then produces instead of sleeping. Only for
/// work whose every call returns within a bounded time: a call that never returns would hold
/// the consumer.
pub(crate) struct Pool<J, O> {
    jobs: Option<Sender<(u64, J)>>,
    /// For a helped pool: the job queue's receiving end and the work, for [`Pool::take`].
    help: Option<Helper<J, O>>,
    results: Receiver<(u64, Outcome<O>)>,
    handles: Vec<JoinHandle<()>>,
    /// Receives a worker's number when it leaves its loop (sent by [`ExitNotice`]).
    exited: Receiver<usize>,
    cancel: Cancellation,
    reorder: BTreeMap<u64, Outcome<O>>,
}

/// Sends its worker's number on drop, that is when the worker leaves its loop, even by
/// unwinding.
struct ExitNotice(usize, Sender<usize>);

impl Drop for ExitNotice {
    fn drop(&mut self) {
        let _ = self.1.send(self.0);
    }
}

impl<J: Send + 'static, O: Send + 'static> Pool<J, O> {
    /// Starts `workers` threads running `work` on each job; with `help`, [`Pool::take`] also
    /// runs queued jobs on the calling thread while it waits (see [`Pool`]).
    ///
    /// # Errors
    /// [`LoaderError::Spawn`] when a thread cannot be started (those started are joined).
    pub(crate) fn start(workers: usize, work: Work<J, O>, help: bool) -> Result<Self, LoaderError> {
        let (job_tx, job_rx) = crossbeam_channel::unbounded::<(u64, J)>();
        let (res_tx, res_rx) = crossbeam_channel::unbounded();
        let (exit_tx, exit_rx) = crossbeam_channel::unbounded();
        let mut pool = Pool {
            help: help.then(|| (job_rx.clone(), Arc::clone(&work))),
            jobs: Some(job_tx),
            results: res_rx,
            exited: exit_rx,
            handles: Vec::with_capacity(workers),
            cancel: Cancellation::new(),
            reorder: BTreeMap::new(),
        };
        for i in 0..workers {
            let work = Arc::clone(&work);
            let (jobs, results, cancel) = (job_rx.clone(), res_tx.clone(), pool.cancel.clone());
            let notice = ExitNotice(i, exit_tx.clone());
            let spawned = std::thread::Builder::new().name(format!("guideloom-w{i}")).spawn(move || {
                let _notice = notice;
                while let Ok((number, job)) = jobs.recv() {
                    if cancel.is_cancelled() {
                        break;
                    }
                    // `work` already turns panics of user code into errors; this catches a
                    // loader bug so the consumer still gets an `Err` instead of waiting forever.
                    let r =
                        catch_unwind(AssertUnwindSafe(|| work(number, job, &cancel))).unwrap_or_else(|p| {
                            Err(LoaderError::Panic { index: None, message: panic_message(&*p) })
                        });
                    if results.send((number, r)).is_err() {
                        break;
                    }
                }
            });
            match spawned {
                Ok(h) => pool.handles.push(h),
                Err(e) => return Err(LoaderError::Spawn(e)), // `pool` drops: joins those started
            }
        }
        Ok(pool)
    }

    /// Queues job `number`; `false` when the queue is closed.
    pub(crate) fn send(&self, number: u64, job: J) -> bool {
        match &self.jobs {
            Some(tx) => tx.send((number, job)).is_ok(),
            None => false,
        }
    }

    /// Waits for the result of job `number` (which must have been sent), keeping results that
    /// arrive before it. A helped pool runs queued jobs (the oldest first) on this thread
    /// while the result is not there.
    pub(crate) fn take(&mut self, number: u64) -> Outcome<O> {
        loop {
            if let Some(r) = self.reorder.remove(&number) {
                return r;
            }
            if let Some((queue, work)) = &self.help {
                if let Ok((n, r)) = self.results.try_recv() {
                    self.reorder.insert(n, r);
                    continue;
                }
                if let Ok((n, job)) = queue.try_recv() {
                    let r =
                        catch_unwind(AssertUnwindSafe(|| work(n, job, &self.cancel))).unwrap_or_else(|p| {
                            Err(LoaderError::Panic { index: None, message: panic_message(&*p) })
                        });
                    self.reorder.insert(n, r);
                    continue;
                }
            }
            match self.results.recv() {
                Ok((n, r)) => {
                    self.reorder.insert(n, r);
                }
                Err(_) => {
                    return Err(LoaderError::Panic {
                        index: None,
                        message: format!("every worker exited while batch {number} was pending"),
                    })
                }
            }
        }
    }
}

impl<J, O> Pool<J, O> {
    /// Number of worker threads.
    pub(crate) fn threads(&self) -> usize {
        self.handles.len()
    }

    /// Fires the cancellation, closes the job queue, and joins every worker that leaves within
    /// [`SHUTDOWN_GRACE`]. Workers finish the job in hand (sources that block observe the
    /// cancellation) and exit; a worker stuck in a source call that ignores the cancellation
    /// is detached instead (it exits when that call returns: its job queue is closed and its
    /// result has no receiver), so shutting down never hangs.
    pub(crate) fn shutdown(&mut self) {
        self.cancel.cancel();
        self.jobs = None;
        self.help = None;
        self.reorder.clear();
        let deadline = Instant::now() + SHUTDOWN_GRACE;
        let mut left = vec![false; self.handles.len()];
        let mut waiting = self.handles.len();
        while waiting > 0 {
            match self.exited.recv_deadline(deadline) {
                Ok(i) => {
                    if let Some(l) = left.get_mut(i).filter(|l| !**l) {
                        *l = true;
                        waiting -= 1;
                    }
                }
                Err(_) => break,
            }
        }
        for (h, left) in self.handles.drain(..).zip(left) {
            if left || h.is_finished() {
                // A worker catches every panic of user code; a join error would be a loader
                // bug, and there is nobody left to report it to.
                let _ = h.join();
            }
            // Otherwise dropping the handle detaches the stuck worker.
        }
    }
}

impl<J, O> Drop for Pool<J, O> {
    fn drop(&mut self) {
        self.shutdown();
    }
}
