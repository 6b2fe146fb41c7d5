//! burn's [`Dataset`] over a guideloom [`DataSource`]: [`SourceDataset`].

use burn::data::dataset::{Dataset, DatasetError};
use guideloom_loader::DataSource;
#[cfg(doc)]
use guideloom_loader::LoaderError;

/// burn's [`Dataset`] over a guideloom [`DataSource`]: `get(i)` is record `i`, `len()` the
/// record count, `get_many` one batched source call (errors, not panics, for indices out of
/// range). Errors are guideloom's [`LoaderError`] as the `source()` of a [`DatasetError`].
///
/// ```
/// use burn::data::dataset::Dataset;
/// use guideloom_burn::SourceDataset;
/// use guideloom_loader::RangeSource;
/// let data = SourceDataset::new(RangeSource::new(10, 20, 2)?);
/// assert_eq!(data.len(), 5);
/// assert_eq!(data.get(3)?, 16);
/// assert_eq!(data.get_many(vec![4, 0])?, [18, 10]);
/// assert_eq!(data.get(5).unwrap_err().to_string(), "record 5 is out of range for a source of 5 records");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct SourceDataset<S>(S);

impl<S: DataSource> SourceDataset<S> {
    /// burn's view of `source`.
    pub fn new(source: S) -> Self {
        SourceDataset(source)
    }

    /// The guideloom source.
    pub fn source(&self) -> &S {
        &self.0
    }
}

impl<S: DataSource> Dataset<S::Item> for SourceDataset<S> {
    fn get(&self, index: usize) -> Result<S::Item, DatasetError> {
        self.0.get(index as u64).map_err(DatasetError::new)
    }

    fn get_many(&self, indexes: Vec<usize>) -> Result<Vec<S::Item>, DatasetError> {
        let indices: Vec<u64> = indexes.into_iter().map(|i| i as u64).collect();
        self.0.get_many(&indices).map_err(DatasetError::new)
    }

    fn len(&self) -> usize {
        usize::try_from(self.0.len()).unwrap_or(usize::MAX)
    }
}
