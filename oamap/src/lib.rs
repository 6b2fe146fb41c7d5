//! Object-array mapping (OAMap 0.12) for guideloom: nested, JSON-like records stored as
//! plain named numpy arrays and read lazily through typed views.
//!
//! - [`Schema`]: the node tree (Primitive, List, Union, Record, Tuple, Pointer; nullable
//!   anywhere; `UTF8String`/`ByteString` extensions) with OAMap's array-naming convention.
//! - [`Array`] / [`ArraySource`]: named arrays (a [`Dtype`] and a
//!   [`Column`] of values) and where they come from.
//! - [`from_data`]: nested values -> arrays (the compact form OAMap writes).
//! - [`Reader`]: lazy, typed views ([`Value`], [`ListView`], [`RecordView`]) over an array
//!   source.
//! - [`Dataset`] / [`from_data_dataset`]: a top-level list split into partitions (OAMap
//!   0.12's `Database`/`Dataset`); a [`Reader`] is a dataset of one partition
//!   ([`Dataset::from_reader`]).
//! - [`gather`] / [`gather_dataset`]: a batch of records into columnar form
//!   ([`ColumnarBatch`] of [`GatheredColumn`]s), for training loops.
//! - [`parse_npy`] / [`write_npy`], and with the default feature `npz` the `.npz` codec
//!   ([`NpzSource`], [`write_npz`], [`open_npz`]).
//! - [`fs`]: array sources and datasets on disk (a directory of `.npy` files, an `.npz`
//!   file, OAMap's numpy-file database layout), written atomically.
//!
//! ```
//! use std::sync::Arc;
//! use guideloom_oamap::{from_data, Reader, Schema};
//! let schema = Schema::from_json(&serde_json::json!(
//!     {"type": "list", "content": {"type": "record", "fields": {
//!         "x": "float64", "ys": {"type": "list", "content": "int32"}}}}))?;
//! let data = serde_json::json!([{"x": 1.5, "ys": [1, 2]}, {"x": 2.5, "ys": []}]);
//! let arrays = from_data(&schema, &data)?;
//! assert_eq!(arrays.array("object-L-Fys-B").unwrap().to_json(), serde_json::json!([0, 2]));
//! let reader = Reader::new(Arc::new(schema), Arc::new(arrays));
//! let first = reader.root()?.as_list().unwrap().get(0)?;
//! assert_eq!(first.as_record().unwrap().field("x")?.as_f64(), Some(1.5));
//! assert_eq!(reader.root_json()?, data);
//! # Ok::<(), guideloom_oamap::OamapError>(())
//! ```
//!
//! # Feature flags
//!
//! - `npz` (default): `.npz` archives (the `zip` crate with deflate).
//! - `test-util`: `RecordingSource`, a source that logs the names asked for (for tests of
//!   lazy loading).

#![forbid(unsafe_code)]

mod array;
mod dataset;
mod dtype;
mod error;
pub mod fs;
mod gather;
mod json;
mod limits;
mod npy;
mod reader;
mod schema;
mod source;
mod to_json;
mod writer;

pub use array::Array;
pub use dataset::{from_data_dataset, Dataset, DatasetDescription, PartitionArrays};
pub use dtype::Dtype;
pub use error::{BoxError, OamapError};
pub use gather::{
    gather, gather_dataset, gather_dataset_into, gather_into, ColumnarBatch, GatheredColumn, Projection,
};
pub use guideloom_formats::{Column, DtypeKind};
pub use json::{arrays_from_json, arrays_to_json};
pub use limits::{parse_json, MAX_JSON_DEPTH, MAX_WRITE_ARRAY_BYTES};
#[cfg(feature = "npz")]
pub use npy::{
    open_npz, write_npz, write_npz_with_schema, NpzSource, DEFAULT_MAX_NPZ_MEMBER, DEFAULT_MAX_NPZ_TOTAL,
};
pub use npy::{parse_npy, write_npy};
pub use reader::{ListView, Reader, RecordView, Value};
pub use schema::{ArrayNames, ExplicitNames, Extension, Node, NodeId, NodeKind, Schema};
#[cfg(any(test, feature = "test-util"))]
pub use source::RecordingSource;
pub use source::{ArrayMap, ArraySource};
pub use to_json::MAX_OUTPUT_DEPTH;
pub use writer::{from_data, from_data_serialize};
