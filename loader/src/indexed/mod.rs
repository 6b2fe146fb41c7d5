//! The random-access loader: [`Loader`] over a [`DataSource`](crate::DataSource), its
//! builder ([`LoaderBuilder`]) and its iterator ([`LoaderIter`]).

mod builder;
mod iter;
mod loader;

pub use builder::{Indexed, LoaderBuilder};
pub use iter::{LoaderIter, ResumeOptions, MAX_BATCH_NUMBER};
pub use loader::Loader;
