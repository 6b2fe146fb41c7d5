//! The seam between the loaders of every kind and `_Loader`: a collated batch that becomes a
//! Python object ([`IntoPython`]), one batch on its way to Python ([`Out`]), a running
//! iterator ([`Running`]) and a built loader ([`Built`]) of any type. A leaf: `loader`,
//! `mixpack` and `orders` implement and use it.

use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::rust_api::{Collate, DataSource, Element, Loader, LoaderError, ResumeOptions, State, TokenBatch};
use crate::sources::batch_to_numpy;

/// A collated batch that becomes one Python object (an array, or a list for the slow path).
pub(crate) trait IntoPython: Send {
    fn into_python(self: Box<Self>, py: Python<'_>) -> PyResult<Py<PyAny>>;
    /// Per record, the source it came from, where the batch is a mixture's.
    fn sources(&self) -> Option<Vec<u32>> {
        None
    }
}

impl<E: Element + numpy::Element> IntoPython for TokenBatch<E> {
    fn into_python(self: Box<Self>, py: Python<'_>) -> PyResult<Py<PyAny>> {
        batch_to_numpy(py, *self)
    }
}

impl IntoPython for Vec<Py<PyAny>> {
    fn into_python(self: Box<Self>, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(PyList::new(py, *self)?.into_any().unbind())
    }
}

/// One batch on its way to Python.
pub(crate) struct Out {
    pub(crate) data: Box<dyn IntoPython>,
    pub(crate) indices: Vec<u64>,
    pub(crate) padding: Vec<bool>,
    pub(crate) number: u64,
    pub(crate) epoch: u64,
    /// Per record, the source it came from (a blend's or a mixture's component), when there are
    /// several.
    pub(crate) sources: Option<Vec<u32>>,
}

/// A running iterator of any loader type.
pub(crate) trait Running: Send {
    fn next_batch(&mut self) -> Option<Result<Out, LoaderError>>;
    fn state(&self) -> State;
}

impl<S, U, C> Running for crate::rust_api::LoaderIter<S, U, C>
where
    S: DataSource + 'static,
    U: 'static,
    C: Collate<U> + 'static,
    C::Output: IntoPython + 'static,
    Self: Send,
{
    fn next_batch(&mut self) -> Option<Result<Out, LoaderError>> {
        self.next().map(|r| {
            r.map(|b| Out {
                sources: b.data.sources(),
                data: Box::new(b.data),
                indices: b.indices,
                padding: b.padding,
                number: b.number,
                epoch: b.epoch,
            })
        })
    }
    fn state(&self) -> State {
        crate::rust_api::LoaderIter::state(self)
    }
}

/// A built loader of any type.
pub(crate) trait Built: Send + Sync {
    fn start(&self, state: Option<&State>, round_down: bool) -> Result<Box<dyn Running>, LoaderError>;
    fn initial_state(&self) -> State;
    fn len(&self) -> u64;
}

impl<S, U, C> Built for Loader<S, U, C>
where
    S: DataSource + 'static,
    U: 'static,
    C: Collate<U> + 'static,
    C::Output: IntoPython + 'static,
    crate::rust_api::LoaderIter<S, U, C>: Send,
    Self: Send + Sync,
{
    fn start(&self, state: Option<&State>, round_down: bool) -> Result<Box<dyn Running>, LoaderError> {
        Ok(match state {
            None => Box::new(self.iter()),
            Some(s) => {
                let options = if round_down { ResumeOptions::round_down() } else { ResumeOptions::default() };
                Box::new(self.iter_from_with(s, options)?)
            }
        })
    }
    fn initial_state(&self) -> State {
        Loader::initial_state(self)
    }
    fn len(&self) -> u64 {
        Loader::len(self)
    }
}
