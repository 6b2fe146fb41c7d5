//! Rust errors raised as the classes of `guideloom.errors`: the class is chosen by the innermost
//! typed error of the chain, the context (path, shard, index, field, ...) of every level becomes
//! attributes, the message is the whole chain. A Python exception raised by a Python source or
//! format inside a Rust call comes back as itself.

use std::error::Error;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::rust_api::{ForeignError, FormatError, InteropError, LoaderError, OamapError, StorageError};

/// A Python exception carried through a Rust error chain (the source of a
/// `LoaderError::Source`, a format error's cause).
#[derive(Debug)]
pub(crate) struct PyCause(pub(crate) PyErr);

impl std::fmt::Display for PyCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl Error for PyCause {}

/// The class name in `guideloom.errors` and the context attributes of one error.
struct Classified {
    class: &'static str,
    context: Vec<(&'static str, Context)>,
}

/// One context value.
enum Context {
    Int(u64),
    Str(String),
}

fn storage(e: &StorageError, c: &mut Classified) {
    use StorageError as S;
    let path = |c: &mut Classified, p: &std::path::Path| {
        c.context.push(("path", Context::Str(p.display().to_string())))
    };
    c.class = match e {
        S::Io { path: p, source } => {
            path(c, p);
            if source.kind() == std::io::ErrorKind::NotFound {
                "StorageNotFoundError"
            } else {
                "StorageError"
            }
        }
        S::NotAStorage { dir } => {
            path(c, dir);
            "StorageNotFoundError"
        }
        S::InvalidManifest { path: p, .. } | S::UnsupportedVersion { path: p, .. } => {
            path(c, p);
            "CorruptStorageError"
        }
        S::KindMismatch { path: p, expected, found } | S::DtypeMismatch { path: p, expected, found } => {
            path(c, p);
            c.context.push(("expected", Context::Str(expected.clone())));
            c.context.push(("found", Context::Str(found.clone())));
            "StorageMismatchError"
        }
        S::MissingShard { shard, path: p }
        | S::ShardTooShort { shard, path: p, .. }
        | S::CorruptIndex { shard, path: p, .. }
        | S::ChecksumMismatch { shard, path: p, .. } => {
            path(c, p);
            c.context.push(("shard", Context::Int(*shard)));
            "CorruptStorageError"
        }
        S::ShortRead { path: p, .. } => {
            path(c, p);
            "CorruptStorageError"
        }
        S::OutOfRange { start, len, total, .. } => {
            c.context.push(("offset", Context::Int(*start)));
            c.context.push(("length", Context::Int(*len)));
            c.context.push(("total", Context::Int(*total)));
            "OutOfRangeError"
        }
        S::Format { shard, .. } => {
            c.context.push(("shard", Context::Int(*shard)));
            "FormatError"
        }
        S::Locked { dir } => {
            path(c, dir);
            "StorageLockedError"
        }
        S::FormatDtype { .. } => "StorageMismatchError",
        S::Remote { url, .. } => {
            c.context.push(("url", Context::Str(url.clone())));
            "RemoteError"
        }
        S::BatchTooLarge { .. } | S::ShardOverflow { .. } => "OutOfRangeError",
        S::ConcurrentCommit { path: p } => {
            path(c, p);
            "ConcurrentCommitError"
        }
        S::StorageExists { path: p } => {
            path(c, p);
            "StorageExistsError"
        }
        S::InvalidJob { .. } => "ReceiptError",
        S::InvalidReceipt { partition, .. } => {
            c.context.push(("partition", Context::Int(*partition)));
            "ReceiptError"
        }
        S::PartMismatch { partition, field, expected, found, .. } => {
            c.context.push(("partition", Context::Int(*partition)));
            c.context.push(("field", Context::Str((*field).to_string())));
            c.context.push(("expected", Context::Str(expected.clone())));
            c.context.push(("found", Context::Str(found.clone())));
            "PartMismatchError"
        }
        S::PartFileMissing { partition, path: p } => {
            path(c, p);
            c.context.push(("partition", Context::Int(*partition)));
            "PartFileError"
        }
        S::PartFileShort { partition, path: p, expected, found } => {
            path(c, p);
            c.context.push(("partition", Context::Int(*partition)));
            c.context.push(("expected", Context::Int(*expected)));
            c.context.push(("found", Context::Int(*found)));
            "PartFileError"
        }
        S::NoParts { path: p } => {
            path(c, p);
            "PartError"
        }
        S::UnsafeFile { path: p, .. } => {
            path(c, p);
            "StorageError"
        }
        _ => "StorageError",
    };
}

fn format(e: &FormatError, c: &mut Classified) {
    use FormatError as F;
    match e {
        F::MissingField { field, .. }
        | F::UnknownField { field, .. }
        | F::FieldTypeMismatch { field, .. }
        | F::UnequalLengths { field, .. } => c.context.push(("field", Context::Str(field.clone()))),
        F::InvalidMeta { position, .. } | F::TokenOutOfRange { position, .. } => {
            c.context.push(("element", Context::Int(*position)))
        }
        F::Decode { shard, .. } => c.context.push(("shard", Context::Int(*shard))),
        _ => {}
    }
    c.class = "FormatError";
}

fn interop(e: &InteropError, c: &mut Classified) {
    use InteropError as I;
    match e {
        // Transparent wrappers: their `source()` skips the wrapped error itself.
        I::Storage(s) => storage(s, c),
        I::Loader(l) => loader(l, c),
        I::Dataset { path: p, error, .. } => {
            c.context.push(("path", Context::Str(p.display().to_string())));
            c.class = if matches!(**error, ForeignError::NoFiles { .. }) {
                "StorageNotFoundError"
            } else {
                "ForeignLayoutError"
            };
        }
        I::ForeignCheckpoint { .. } | I::CacheMismatch { .. } => c.class = "StateError",
        I::InvalidConfig { field, .. } => {
            c.context.push(("field", Context::Str((*field).to_string())));
            c.class = "ConfigError";
        }
        I::InvalidSeed { .. } | I::EmptySplit { .. } => c.class = "ConfigError",
        _ => c.class = "GuideloomError",
    }
}

fn loader(e: &LoaderError, c: &mut Classified) {
    use LoaderError as L;
    c.class = match e {
        L::Source { index, .. } | L::Map { index, .. } | L::Storage { index, .. } => {
            c.context.push(("index", Context::Int(*index)));
            "LoaderError"
        }
        L::Open { path, .. } => {
            c.context.push(("path", Context::Str(path.display().to_string())));
            "LoaderError"
        }
        L::IndexOutOfRange { index, len } => {
            c.context.push(("index", Context::Int(*index)));
            c.context.push(("total", Context::Int(*len)));
            "OutOfRangeError"
        }
        L::InBatch { batch, epoch, .. } => {
            c.context.push(("batch", Context::Int(*batch)));
            c.context.push(("epoch", Context::Int(*epoch)));
            "LoaderError"
        }
        L::StateMismatch { field, expected, found } => {
            c.context.push(("field", Context::Str((*field).to_string())));
            c.context.push(("expected", Context::Str(expected.clone())));
            c.context.push(("found", Context::Str(found.clone())));
            "StateError"
        }
        L::StateVersion { .. } | L::StateJson(_) | L::ElasticResume { .. } | L::StatePastEnd { .. } => {
            "StateError"
        }
        L::InvalidConfig { field, .. } => {
            c.context.push(("field", Context::Str((*field).to_string())));
            "ConfigError"
        }
        L::TokenDtype { path, .. } => {
            c.context.push(("path", Context::Str(path.display().to_string())));
            "ConfigError"
        }
        L::WindowTooLong { .. } => "ConfigError",
        _ => "LoaderError",
    };
}

fn oamap(e: &OamapError, c: &mut Classified) {
    use OamapError as O;
    let array = |c: &mut Classified, n: &str| c.context.push(("array", Context::Str(n.to_string())));
    c.class = match e {
        O::MissingArray { name } => {
            array(c, name);
            "OamapMissingArrayError"
        }
        O::ArrayDtype { name, expected, found } => {
            array(c, name);
            c.context.push(("expected", Context::Str(expected.clone())));
            c.context.push(("found", Context::Str(found.clone())));
            "OamapArrayError"
        }
        O::IndexOutOfRange { name, index, len } => {
            array(c, name);
            c.context.push(("index", Context::Int(*index)));
            c.context.push(("total", Context::Int(*len)));
            "OamapArrayError"
        }
        O::BadValue { name, index, .. } => {
            array(c, name);
            c.context.push(("index", Context::Int(*index)));
            "OamapArrayError"
        }
        O::Npy { name, .. } | O::Archive { name, .. } | O::Utf8 { name, .. } => {
            array(c, name);
            "OamapArrayError"
        }
        O::TooLarge { limit, found, .. } => {
            c.context.push(("total", Context::Int(*found)));
            c.context.push(("length", Context::Int(*limit)));
            "OamapLimitError"
        }
        O::TooDeep { .. } => "OamapLimitError",
        O::Io { path, source } => {
            c.context.push(("path", Context::Str(path.display().to_string())));
            if source.kind() == std::io::ErrorKind::NotFound {
                "StorageNotFoundError"
            } else {
                "StorageError"
            }
        }
        O::UnsafeFile { path, .. } => {
            c.context.push(("path", Context::Str(path.display().to_string())));
            "StorageError"
        }
        O::EntryOutOfRange { index, len } => {
            c.context.push(("index", Context::Int(*index)));
            c.context.push(("total", Context::Int(*len)));
            "OutOfRangeError"
        }
        O::InPartition { partition, .. } => {
            c.context.push(("partition", Context::Int(*partition as u64)));
            c.class
        }
        O::Fill { path, .. } | O::Path { path, .. } => {
            c.context.push(("field", Context::Str(path.clone())));
            "OamapSchemaError"
        }
        _ => "OamapSchemaError",
    };
}

/// Converts a Rust error (any chain of the crates' errors) to the matching `guideloom.errors`
/// exception.
pub(crate) fn to_py(py: Python<'_>, e: &(dyn Error + 'static)) -> PyErr {
    let mut c = Classified { class: "GuideloomError", context: Vec::new() };
    let mut message = String::new();
    let mut level: Option<&(dyn Error + 'static)> = Some(e);
    while let Some(err) = level {
        if let Some(cause) = err.downcast_ref::<PyCause>() {
            return cause.0.clone_ref(py);
        }
        if let Some(s) = err.downcast_ref::<StorageError>() {
            storage(s, &mut c);
        } else if let Some(f) = err.downcast_ref::<FormatError>() {
            format(f, &mut c);
        } else if let Some(l) = err.downcast_ref::<LoaderError>() {
            loader(l, &mut c);
        } else if let Some(i) = err.downcast_ref::<InteropError>() {
            interop(i, &mut c);
        } else if let Some(o) = err.downcast_ref::<OamapError>() {
            oamap(o, &mut c);
        }
        let text = err.to_string();
        if !message.ends_with(&text) {
            if !message.is_empty() {
                message.push_str(": ");
            }
            message.push_str(&text);
        }
        level = err.source();
    }
    build(py, c, message)
}

fn build(py: Python<'_>, c: Classified, message: String) -> PyErr {
    let made = (|| -> PyResult<PyErr> {
        let module = py.import("guideloom.errors")?;
        let class = module.getattr(c.class)?;
        let kwargs = PyDict::new(py);
        for (k, v) in c.context {
            match v {
                Context::Int(i) => kwargs.set_item(k, i)?,
                Context::Str(s) => kwargs.set_item(k, s)?,
            }
        }
        let exc = class.call((message.clone(),), Some(&kwargs))?;
        Ok(PyErr::from_value(exc))
    })();
    made.unwrap_or_else(|_| PyRuntimeError::new_err(message))
}

/// `map_err` helper: a Rust error as its Python exception.
pub(crate) fn py_err<E: Error + 'static>(e: E) -> PyErr {
    Python::attach(|py| to_py(py, &e))
}

/// An error of `guideloom.errors` by class name (for checks done in the binding itself).
pub(crate) fn raise(class: &'static str, message: impl Into<String>) -> PyErr {
    Python::attach(|py| build(py, Classified { class, context: Vec::new() }, message.into()))
}
