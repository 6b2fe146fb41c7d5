//! Element dtypes and record formats for guideloom.
//!
//! A *format* is the pair `pack` (what a writer appends -> stored bytes) and `unpack`
//! (stored bytes -> what a reader returns). This crate does no file I/O: storages in
//! `guideloom-storage` hand formats byte slices and segment descriptions.
//!
//! - [`Dtype`]: the description of one stream element (a primitive or a structured dtype),
//!   convertible to and from numpy's `descr` notation so numpy can `memmap` the same files.
//! - [`TypeStr`] / [`DtypeKind`]: a numpy type string (`"<u2"`, `">f8"`, `"|S4"`) taken apart;
//!   the one type-string parser every guideloom crate uses.
//! - [`Column`]: one typed vector of values (a structured field's values, or an array's).
//! - [`Element`]: plain-old-data Rust types that know their [`Dtype`].
//! - [`StreamFormat`]: fixed-size elements, decoded a [`RawWindow`] at a time.
//! - [`DocumentFormat`]: one variable-size byte payload per document.
//! - [`StreamWithMetaFormat`]: fixed-size elements, each pointing to a metadata payload stored
//!   once per run ([`MetaSink`], [`MetaWindow`]).
//!
//! Built-in formats: [`TokenFormat`], [`ColumnsFormat`], [`SerdeFormat`], [`RawBytesFormat`],
//! [`DocumentTokensFormat`].
//!
//! ```
//! use guideloom_formats::{StreamFormat, TokenFormat, RawWindow};
//! let format = TokenFormat::<u16>::new();
//! let mut stored = Vec::new();
//! format.pack(&[1u32, 2, 3], &mut stored)?;
//! assert_eq!(stored, [1, 0, 2, 0, 3, 0]); // little-endian u16
//! let window = RawWindow::new(&stored, 2, &[3], &[0])?;
//! assert_eq!(format.unpack(&window)?, vec![1u16, 2, 3]);
//! # Ok::<(), guideloom_formats::FormatError>(())
//! ```

#![forbid(unsafe_code)]

mod columns;
mod document;
mod dtype;
mod element;
mod error;
mod inflate;
mod int_tokens;
mod meta;
mod serde_doc;
mod stream;
mod tokens;

pub use columns::{Column, Columns, ColumnsFormat};
pub use document::{DocumentFormat, RawBytesFormat};
pub use dtype::{Dtype, DtypeKind, Field, Primitive, TypeStr, MAX_BYTES_ITEMSIZE};
pub use element::Element;
pub use error::FormatError;
pub use inflate::{inflate_bound, INFLATE_ALLOWANCE_BYTES, MAX_INFLATED_BYTES, MAX_INFLATE_RATIO};
pub use int_tokens::IntTokenFormat;
pub use meta::{
    DocumentInfo, DocumentTokensFormat, DocumentTokensWindow, MetaSink, MetaWindow, StreamWithMetaFormat,
    TokenDocument,
};
pub use serde_doc::SerdeFormat;
pub use stream::{RawWindow, StreamFormat};
pub use tokens::{sum_ids, TokenElement, TokenFormat, TokenId};

/// The result type of this crate.
pub type Result<T, E = FormatError> = std::result::Result<T, E>;
