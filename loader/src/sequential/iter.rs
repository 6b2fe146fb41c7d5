//! The iterator of a sequential loader: reading on the consumer's thread (the producer),
//! `map` and collation on the worker pool, batches handed back in order.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::pool::Pool;
use crate::sequential::batch::Raw;
use crate::sequential::producer::Producer;
use crate::sequential::shared::Shared;
use crate::sequential::{Dropped, SequentialBatch, SequentialSource, SequentialState};
use crate::{Cancellation, Collate, LoaderError};

/// The worker pool of a sequential iterator.
type BatchPool<T, O> = Pool<Raw<T>, SequentialBatch<O>>;

/// A batch read and sent to the workers, or a failure in its place.
enum Pending {
    Batch { number: u64, state: SequentialState, dropped: Vec<Dropped> },
    Failed(LoaderError),
}

/// The iterator of a [`SequentialLoader`](crate::sequential::SequentialLoader): `Ok(batch)` per
/// batch in order, or one `Err` at the place of a failed batch, after which it ends. Dropping it
/// joins its workers, as the random-access [`LoaderIter`](crate::LoaderIter) does.
pub struct SequentialIter<S: SequentialSource, U, C: Collate<U>> {
    shared: Arc<Shared<S, U, C>>,
    workers: usize,
    prefetch: usize,
    producer: Producer<S>,
    pool: Option<BatchPool<S::Item, C::Output>>,
    queue: VecDeque<Pending>,
    /// The state after the last delivered batch.
    state: SequentialState,
    /// Reports of batches delivered, not yet taken.
    dropped: Vec<Dropped>,
    /// Reports made after the last batch was read.
    tail: Vec<Dropped>,
    producer_done: bool,
    done: bool,
}

impl<S: SequentialSource, U, C: Collate<U>> std::fmt::Debug for SequentialIter<S, U, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SequentialIter")
            .field("state", &self.state)
            .field("queued", &self.queue.len())
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl<S, U, C> SequentialIter<S, U, C>
where
    S: SequentialSource + 'static,
    U: 'static,
    C: Collate<U> + 'static,
    C::Output: 'static,
{
    /// The iterator from `producer`'s position, with `workers` threads and `prefetch` batches
    /// read ahead.
    pub(crate) fn new(
        shared: Arc<Shared<S, U, C>>,
        workers: usize,
        prefetch: usize,
        producer: Producer<S>,
    ) -> Self {
        let state = producer.state(&shared);
        SequentialIter {
            shared,
            workers,
            prefetch,
            producer,
            pool: None,
            queue: VecDeque::new(),
            state,
            dropped: Vec::new(),
            tail: Vec::new(),
            producer_done: false,
            done: false,
        }
    }

    /// The checkpoint after the last batch this iterator yielded.
    pub fn state(&self) -> SequentialState {
        self.state.clone()
    }

    /// The records reported dropped at epoch ends this iterator has passed (in the order
    /// reported), since the last call.
    pub fn take_dropped(&mut self) -> Vec<Dropped> {
        std::mem::take(&mut self.dropped)
    }

    fn fail(&mut self, e: LoaderError) -> Option<Result<SequentialBatch<C::Output>, LoaderError>> {
        self.done = true;
        if let Some(mut p) = self.pool.take() {
            p.shutdown();
        }
        Some(Err(e))
    }

    /// Reads the next batch: `Ok(None)` after the last.
    fn read(&mut self) -> Result<Option<Raw<S::Item>>, LoaderError> {
        let (batch, epoch) = (self.producer.batch, self.producer.epoch);
        self.producer.produce(&self.shared).map_err(|e| LoaderError::InBatch {
            batch,
            epoch,
            source: Box::new(e),
        })
    }

    fn top_up(&mut self) {
        while !self.producer_done && self.queue.len() < self.prefetch {
            match self.read() {
                Ok(Some(raw)) => {
                    let number = raw.number;
                    let state = self.producer.state(&self.shared);
                    let dropped = std::mem::take(&mut self.producer.dropped);
                    let sent = self.pool.as_ref().is_some_and(|p| p.send(number, raw));
                    if !sent {
                        self.producer_done = true;
                        self.queue.push_back(Pending::Failed(LoaderError::Panic {
                            index: None,
                            message: "the worker pool closed its queue".into(),
                        }));
                        return;
                    }
                    self.queue.push_back(Pending::Batch { number, state, dropped });
                }
                Ok(None) => {
                    self.producer_done = true;
                    self.tail = std::mem::take(&mut self.producer.dropped);
                }
                Err(e) => {
                    self.producer_done = true;
                    self.queue.push_back(Pending::Failed(e));
                }
            }
        }
    }
}

impl<S, U, C> Iterator for SequentialIter<S, U, C>
where
    S: SequentialSource + 'static,
    U: 'static,
    C: Collate<U> + 'static,
    C::Output: 'static,
{
    type Item = Result<SequentialBatch<C::Output>, LoaderError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if self.workers == 0 {
            return match self.read() {
                Ok(Some(raw)) => match self.shared.work(raw) {
                    Ok(b) => {
                        self.state = self.producer.state(&self.shared);
                        self.dropped.append(&mut self.producer.dropped);
                        Some(Ok(b))
                    }
                    Err(e) => self.fail(e),
                },
                Ok(None) => {
                    self.state = self.producer.state(&self.shared);
                    self.dropped.append(&mut self.producer.dropped);
                    self.done = true;
                    None
                }
                Err(e) => self.fail(e),
            };
        }
        if self.pool.is_none() {
            let shared = Arc::clone(&self.shared);
            let work = Arc::new(move |_n, raw: Raw<S::Item>, _c: &Cancellation| shared.work(raw));
            match Pool::start(self.workers, work, false) {
                Ok(p) => self.pool = Some(p),
                Err(e) => return self.fail(e),
            }
        }
        self.top_up();
        match self.queue.pop_front() {
            None => {
                self.state = self.producer.state(&self.shared);
                self.dropped.append(&mut self.tail);
                self.done = true;
                if let Some(mut p) = self.pool.take() {
                    p.shutdown();
                }
                None
            }
            Some(Pending::Failed(e)) => self.fail(e),
            Some(Pending::Batch { number, state, mut dropped }) => {
                let Some(pool) = self.pool.as_mut() else { panic!("worker pool missing after start") };
                match pool.take(number) {
                    Ok(b) => {
                        self.state = state;
                        self.dropped.append(&mut dropped);
                        self.top_up();
                        Some(Ok(b))
                    }
                    Err(e) => self.fail(e),
                }
            }
        }
    }
}
