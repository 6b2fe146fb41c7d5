//! `guideloom._guideloom`: the compiled part of the `guideloom` Python package.
//!
//! The binding converts between Python and the Rust crates and calls them; no storage or loader
//! logic lives here. The Python package (`python/guideloom/`) holds the seed's API (formats,
//! storages, data sources, the loader) over the classes of this module:
//!
//! - `storage`: `_StreamWriter`/`_StreamReader`, `_DocumentWriter`/`_DocumentReader`,
//!   `_MetaWriter`/`_MetaReader`: the Rust writers and readers over formats whose `pack` and
//!   `unpack` run in Python (records arrive as bytes, reads leave as bytes plus segmentation);
//! - `sources`: `_TokenWindows`, token windows over a native storage or a foreign layout, read
//!   in Rust into one `[n, seq_len]` numpy array;
//! - `loader`: `_Loader`, guideloom's loader over `_TokenWindows` (batches as numpy arrays owned
//!   by Rust) or over any Python object with `__len__`/`__getitem__` (the slow path);
//! - `mixpack`: `_TokenRecords`, `_Mixture`, `_Packed`: windows or documents of any dataset, their
//!   weighted mixture and packed rows, as sources of `_Loader`;
//! - `orders`: `_Loader.megatron` / `_Loader.llmc`, Megatron-Core's and llm.c's orders (the
//!   interop crate's runs);
//! - `oamap`: `_Schema`, `_ListProxy`, `_RecordProxy`: OAMap schemas bound to array sources
//!   (a Python mapping, an `.npz` file, a directory of `.npy` files) and the lazy proxies over
//!   the Rust reader (`guideloom.oamap`);
//! - `parts`: `_PartWriter` and `commit_parts`/`abort_parts`/`gc_parts`, one part of a job and
//!   their one commit (`guideloom.parts`);
//! - `errors`: Rust errors raised as the `guideloom.errors` classes.
//!
//! Every Rust path the binding uses is imported in `rust_api`.

mod batches;
mod errors;
mod fork;
mod formats;
mod loader;
mod mixpack;
mod oamap;
mod orders;
mod parts;
mod rust_api;
mod sources;
mod storage;

use pyo3::prelude::*;

/// The extension module `guideloom._guideloom`.
#[pymodule]
fn _guideloom(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("STATE_VERSION", rust_api::STATE_VERSION)?;
    fork::register(m)?;
    storage::register(m)?;
    sources::register(m)?;
    loader::register(m)?;
    mixpack::register(m)?;
    oamap::register(m)?;
    parts::register(m)?;
    Ok(())
}
