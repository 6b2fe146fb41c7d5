//! Object-array mapping (OAMap 0.12): nested, JSON-like records stored as plain named arrays
//! and read lazily through typed views.
//!
//! - [`Schema`]: the node tree (Primitive, List, Union, Record, Tuple, Pointer; nullable
//!   anywhere; `UTF8String`/`ByteString` extensions) with OAMap's array-naming convention.
//! - [`Array`] / [`ArraySource`]: named arrays and where they come from.
//! - [`fromdata`]: nested values -> arrays (the compact form OAMap writes).
//! - [`Dataset`] / [`fromdata_dataset`]: a top-level list split into partitions (OAMap 0.12's
//!   `Database`/`Dataset`).

mod array;
mod cli;
mod dataset;
mod dtype;
mod error;
mod gather;
mod npy;
mod reader;
mod schema;
mod source;
mod writer;

pub use array::{f32_to_f64_shortest, Array, ArrayData};
pub use cli::{
    arrays_from_json, arrays_to_json, oam_fromdata_json, oam_fromdata_npz, oam_read_json, oam_read_npz,
    open_npz,
};
pub use dataset::{fromdata_dataset, Dataset, DatasetDescription, PartitionArrays};
pub use dtype::{Kind, OaDtype};
pub use error::OamapError;
pub use gather::{
    gather, gather_dataset, gather_dataset_into, gather_into, Column, ColumnarBatch, Projection,
};
pub use npy::{parse_npy, write_npy, write_npz, NpzSource};
pub use reader::{scalar_json, ListView, OValue, Reader, RecordView};
pub use schema::{ArrayNames, ExplicitNames, Extension, Node, NodeId, NodeKind, Schema};
pub use source::{ArrayMap, ArraySource, RecordingSource};
pub use writer::{fromdata, fromdata_serialize};
