//! Array sources: anything that answers `get(name) -> array`.

use std::collections::BTreeMap;
use std::sync::Arc;
#[cfg(any(test, feature = "test-util"))]
use std::sync::Mutex;

use crate::{Array, OamapError};

/// A key-value store of named arrays: an in-memory map, an `.npz` archive, a directory of
/// `.npy` files, a guideloom storage ...
///
/// Readers call [`ArraySource::get`] once per array name (on first use) and cache the result.
pub trait ArraySource: Send + Sync {
    /// The array called `name`.
    ///
    /// # Errors
    /// [`OamapError::MissingArray`] when there is none; a source-specific error when it
    /// cannot be decoded.
    fn get(&self, name: &str) -> Result<Arc<Array>, OamapError>;
}

impl<S: ArraySource + ?Sized> ArraySource for Arc<S> {
    fn get(&self, name: &str) -> Result<Arc<Array>, OamapError> {
        (**self).get(name)
    }
}

impl<S: ArraySource + ?Sized> ArraySource for &S {
    fn get(&self, name: &str) -> Result<Arc<Array>, OamapError> {
        (**self).get(name)
    }
}

/// Named arrays in memory, sorted by name (what [`from_data`](crate::from_data) returns).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ArrayMap {
    arrays: BTreeMap<String, Arc<Array>>,
}

impl ArrayMap {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or replaces an array.
    pub fn insert(&mut self, name: impl Into<String>, array: Array) {
        self.arrays.insert(name.into(), Arc::new(array));
    }

    /// Removes an array, returning it.
    pub fn remove(&mut self, name: &str) -> Option<Arc<Array>> {
        self.arrays.remove(name)
    }

    /// The array called `name`, if present.
    pub fn array(&self, name: &str) -> Option<&Arc<Array>> {
        self.arrays.get(name)
    }

    /// `(name, array)` pairs sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &Arc<Array>)> {
        self.arrays.iter()
    }

    /// Number of arrays.
    pub fn len(&self) -> usize {
        self.arrays.len()
    }

    /// Whether the map holds no arrays.
    pub fn is_empty(&self) -> bool {
        self.arrays.is_empty()
    }
}

impl ArraySource for ArrayMap {
    fn get(&self, name: &str) -> Result<Arc<Array>, OamapError> {
        self.arrays.get(name).cloned().ok_or_else(|| OamapError::MissingArray { name: name.to_string() })
    }
}

/// Wraps a source and records every name asked for, in order (for lazy-loading checks and
/// for showing which columns a query touched). Feature `test-util`.
#[cfg(any(test, feature = "test-util"))]
#[derive(Debug)]
pub struct RecordingSource<S> {
    inner: S,
    requests: Mutex<Vec<String>>,
}

#[cfg(any(test, feature = "test-util"))]
impl<S> RecordingSource<S> {
    /// Wraps `inner`.
    pub fn new(inner: S) -> Self {
        RecordingSource { inner, requests: Mutex::new(Vec::new()) }
    }

    /// Every name requested so far, in request order.
    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// The names requested since the last call, clearing the log.
    pub fn take_requests(&self) -> Vec<String> {
        self.requests.lock().map(|mut r| std::mem::take(&mut *r)).unwrap_or_default()
    }

    /// The wrapped source.
    pub fn inner(&self) -> &S {
        &self.inner
    }
}

#[cfg(any(test, feature = "test-util"))]
impl<S: ArraySource> ArraySource for RecordingSource<S> {
    fn get(&self, name: &str) -> Result<Arc<Array>, OamapError> {
        if let Ok(mut r) = self.requests.lock() {
            r.push(name.to_string());
        }
        self.inner.get(name)
    }
}
