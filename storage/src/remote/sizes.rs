//! Object lengths of a remote storage: those known (asked once and kept: committed bytes never
//! change), and those whose `HEAD` or listing is in flight, which a caller of
//! [`crate::StorageDir::file_len`] waits for instead of asking again.

use std::collections::{HashMap, HashSet};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

/// Files a reader expects above which their lengths come from one `LIST` of the prefix
/// rather than one `HEAD` each.
pub(super) const LIST_OVER: usize = 64;

#[derive(Default)]
struct State {
    known: HashMap<String, u64>,
    pending: HashSet<String>,
}

/// The object lengths of one directory.
#[derive(Default)]
pub(super) struct Sizes {
    state: Mutex<State>,
    /// Notified when a name stops being pending.
    settled: Condvar,
}

impl Sizes {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The length of `name` when known.
    pub(super) fn known(&self, name: &str) -> Option<u64> {
        self.lock().known.get(name).copied()
    }

    /// Records that `name` holds `len` bytes.
    pub(super) fn insert(&self, name: &str, len: u64) {
        self.lock().known.insert(name.to_string(), len);
    }

    /// Marks the names of `names` that are neither known nor pending as pending, and returns
    /// them (their lengths are to be asked in the background).
    pub(super) fn begin<'a>(&self, names: impl Iterator<Item = &'a str>) -> Vec<String> {
        let mut s = self.lock();
        let fresh: Vec<String> = names
            .filter(|n| !s.known.contains_key(*n) && !s.pending.contains(*n))
            .map(str::to_string)
            .collect();
        s.pending.extend(fresh.iter().cloned());
        fresh
    }

    /// Records `len` for the pending `name` (a background `HEAD` found it); it stays pending
    /// until [`Sizes::end`].
    pub(super) fn found(&self, name: &str, len: u64) {
        let mut s = self.lock();
        if s.pending.contains(name) {
            s.known.insert(name.to_string(), len);
        }
    }

    /// Records the lengths of the pending names of `wanted` that a listing returned
    /// (`listed`: name and length), ends their pending state, and returns them.
    pub(super) fn listed<'a>(
        &self,
        wanted: &[String],
        listed: impl Iterator<Item = (&'a str, u64)>,
    ) -> HashSet<String> {
        let wanted: HashSet<&str> = wanted.iter().map(String::as_str).collect();
        let mut found = HashSet::new();
        let mut s = self.lock();
        for (name, len) in listed {
            if wanted.contains(name) && s.pending.remove(name) {
                s.known.insert(name.to_string(), len);
                found.insert(name.to_string());
            }
        }
        drop(s);
        self.settled.notify_all();
        found
    }

    /// Ends the pending state of `names` and wakes those waiting for them.
    pub(super) fn end(&self, names: &[String]) {
        let mut s = self.lock();
        for n in names {
            s.pending.remove(n);
        }
        drop(s);
        self.settled.notify_all();
    }

    /// The length of `name`, waiting while it is pending; `None` when it is not known then.
    pub(super) fn wait(&self, name: &str) -> Option<u64> {
        let mut s = self.lock();
        loop {
            if let Some(&n) = s.known.get(name) {
                return Some(n);
            }
            if !s.pending.contains(name) {
                return None;
            }
            s = self.settled.wait(s).unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Forgets what is known or pending about `name`.
    pub(super) fn forget(&self, name: &str) {
        let mut s = self.lock();
        s.known.remove(name);
        s.pending.remove(name);
        drop(s);
        self.settled.notify_all();
    }
}
