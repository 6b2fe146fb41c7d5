//! The storage kinds a [`crate::Reader`] or [`crate::Writer`] is generic over, and what their
//! readers keep in memory. [`crate::StreamReader`] and the other five names spell them out.
//!
//! A namespace only: the markers are defined in a leaf module of their own and the indexes
//! beside their kinds' readers, so that those modules never import this one.

pub use crate::document::DocumentIndex;
pub use crate::markers::{Document, Stream, StreamWithMeta};
pub use crate::stream::StreamIndex;
pub use crate::stream_meta::StreamWithMetaIndex;
