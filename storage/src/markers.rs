//! The type-level markers of the storage kinds ([`crate::kind::Stream`],
//! [`crate::kind::Document`], [`crate::kind::StreamWithMeta`]): what each kind states (its
//! format trait, the dtype it records, its writer's buffers). Published through
//! [`crate::kind`].

use std::fmt;
use std::marker::PhantomData;

use guideloom_formats::{DocumentFormat, Dtype, MetaSink, StreamFormat, StreamWithMetaFormat};

use crate::core::{Kind, Sealed, WriterKind};
use crate::manifest::{FormatSpec, StorageKind};

/// Type-level markers (never constructed, sealed) with what each kind states: its format
/// trait, the dtype it records and its writer's buffers.
macro_rules! kinds {
    ($($(#[$doc:meta])* $name:ident: $format:ident, dtype $dtype:expr, scratch $scratch:ty;)*) => {$(
        $(#[$doc])*
        pub struct $name<F>(PhantomData<fn() -> F>);

        impl<F> fmt::Debug for $name<F> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(stringify!($name))
            }
        }

        impl<F> Sealed for $name<F> {}

        impl<F: $format> Kind for $name<F> {
            type Format = F;
            const KIND: StorageKind = StorageKind::$name;

            fn describe(format: &F) -> (Option<Dtype>, FormatSpec) {
                let dtype: fn(&F) -> Option<Dtype> = $dtype;
                (dtype(format), FormatSpec { name: format.name().to_string(), params: format.params() })
            }
        }

        impl<F: $format> WriterKind for $name<F> {
            type Scratch = $scratch;
        }
    )*};
}

kinds! {
    /// The stream kind ([`crate::StreamReader`], [`crate::StreamWriter`]): elements of one
    /// dtype, concatenated over the shards. A type-level marker; never constructed.
    Stream: StreamFormat, dtype |f| Some(f.dtype()), scratch Vec<u8>;
    /// The document kind ([`crate::DocumentReader`], [`crate::DocumentWriter`]):
    /// variable-size documents by global index. A type-level marker; never constructed.
    Document: DocumentFormat, dtype |_| None, scratch Vec<u8>;
    /// The stream-with-meta kind ([`crate::StreamWithMetaReader`],
    /// [`crate::StreamWithMetaWriter`]): a stream whose elements point to per-run metadata
    /// payloads. A type-level marker; never constructed.
    /// Its writer's buffers: element bytes, the record's pairs, run-index bytes.
    StreamWithMeta: StreamWithMetaFormat, dtype |f| Some(f.dtype()), scratch (Vec<u8>, MetaSink<F::Key>, Vec<u8>);
}
