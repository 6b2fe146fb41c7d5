//! The packing of a rank's token records into windows of `seq_len` tokens, across record and
//! shard boundaries.

use std::sync::Arc;

use crate::sequential::interleave::{Interleave, InterleaveConfig, InterleaveCursor};
use crate::sequential::SequentialSource;
use crate::{LoaderError, RecordId};

/// How packing reads and extends a record type (implemented for `Vec<E>`).
pub(crate) trait PackOps<T>: Send + Sync {
    /// Tokens in `t`.
    fn len(&self, t: &T) -> usize;
    /// An empty record with room for `n` tokens.
    fn empty(&self, n: usize) -> T;
    /// Appends tokens `from..from + n` of `t` to `out`.
    fn extend(&self, out: &mut T, t: &T, from: usize, n: usize);
}

/// [`PackOps`] of `Vec<E>`.
#[derive(Debug)]
pub(crate) struct VecOps;

impl<E: Copy + Send + Sync> PackOps<Vec<E>> for VecOps {
    fn len(&self, t: &Vec<E>) -> usize {
        t.len()
    }
    fn empty(&self, n: usize) -> Vec<E> {
        Vec::with_capacity(n)
    }
    fn extend(&self, out: &mut Vec<E>, t: &Vec<E>, from: usize, n: usize) {
        out.extend_from_slice(&t[from..from + n]);
    }
}

/// What [`Packer::next_window`] gives.
pub(crate) enum NextWindow<T> {
    /// A window of `seq_len` tokens starting at the given record and token.
    Window(T, RecordId),
    /// The rank's records ended before the window was full: the records its tokens came from, each
    /// with the first of its tokens it held (fewer than a window in all, not delivered).
    End(Vec<RecordId>),
}

/// Packs a rank's token records into windows of `seq_len` tokens, across record and shard
/// boundaries. Its position is the interleave's position before the record holding the next
/// window's first token, with that record's delivered tokens as the slot's `skip`.
pub(crate) struct Packer<T> {
    seq_len: usize,
    ops: Arc<dyn PackOps<T>>,
    /// The record being cut, its identity, the tokens of it used, and the interleave's cursor
    /// before it.
    doc: Option<(T, RecordId, InterleaveCursor)>,
    used: usize,
    /// The records the window being filled took tokens from (with the first token taken).
    taken: Vec<RecordId>,
}

impl<T> std::fmt::Debug for Packer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Packer")
            .field("seq_len", &self.seq_len)
            .field("used", &self.used)
            .finish_non_exhaustive()
    }
}

impl<T> Packer<T> {
    pub(crate) fn new(seq_len: usize, ops: Arc<dyn PackOps<T>>) -> Self {
        Packer { seq_len, ops, doc: None, used: 0, taken: Vec::new() }
    }

    /// The position to resume from: the interleave's, or the cursor before the record being cut
    /// with its used tokens as the skip of its slot.
    pub(crate) fn checkpoint<S: SequentialSource<Item = T>>(
        &self,
        interleave: &Interleave<S>,
    ) -> InterleaveCursor {
        match &self.doc {
            Some((t, _, before)) if self.used < self.ops.len(t) => {
                let mut c = before.clone();
                if let Some(slot) = c.open.get_mut(c.turn as usize) {
                    slot.skip = self.used as u64;
                }
                c
            }
            _ => interleave.cursor(),
        }
    }

    /// The next window of the rank's interleave.
    ///
    /// # Errors
    /// The source's failures.
    pub(crate) fn next_window<S: SequentialSource<Item = T>>(
        &mut self,
        interleave: &mut Interleave<S>,
        source: &S,
        cfg: &InterleaveConfig,
    ) -> Result<NextWindow<T>, LoaderError> {
        self.taken.clear();
        let mut out = self.ops.empty(self.seq_len);
        let mut first = None;
        let mut filled = 0;
        while filled < self.seq_len {
            let exhausted = match &self.doc {
                Some((t, _, _)) => self.used >= self.ops.len(t),
                None => true,
            };
            if exhausted {
                match interleave.next(source, cfg)? {
                    None => {
                        self.doc = None;
                        self.used = 0;
                        return Ok(NextWindow::End(std::mem::take(&mut self.taken)));
                    }
                    Some(p) => {
                        let before = interleave.cursor_before(&p);
                        self.used = usize::try_from(p.skip).unwrap_or(usize::MAX).min(self.ops.len(&p.item));
                        self.doc = Some((p.item, p.id, before));
                        continue;
                    }
                }
            }
            let Some((t, id, _)) = &self.doc else { panic!("a record is being cut") };
            let from = RecordId { offset: self.used as u64, ..*id };
            first.get_or_insert(from);
            self.taken.push(from);
            let n = (self.seq_len - filled).min(self.ops.len(t) - self.used);
            self.ops.extend(&mut out, t, self.used, n);
            self.used += n;
            filled += n;
        }
        let Some(first) = first else { panic!("a window of at least one token has a first record") };
        Ok(NextWindow::Window(out, first))
    }
}
