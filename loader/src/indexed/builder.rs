//! The random-access loader's kind of [`Builder`]: [`LoaderBuilder`], its own options
//! (global batch, remainder rule, readahead) and `build`.

use std::sync::Arc;

use crate::builder::{Builder, BuilderKind};
use crate::indexed::loader::{Loader, Shared};
use crate::{Collate, DataSource, LoaderError, Sampler, SamplerConfig, SourceId, VecCollate};

/// The [`Builder`] kind of a [`Loader`]: its source and the options only a random-access
/// loader has ([`Builder::global_batch`], [`Builder::drop_remainder`],
/// [`Builder::readahead`]).
pub struct Indexed<S> {
    source: S,
    /// The global batch asked for with [`Builder::global_batch`].
    global_batch: Option<u64>,
    drop_remainder: bool,
    readahead: u64,
}

impl<S: DataSource> std::fmt::Debug for Indexed<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Indexed")
            .field("records", &self.source.len())
            .field("global_batch", &self.global_batch)
            .field("drop_remainder", &self.drop_remainder)
            .field("readahead", &self.readahead)
            .finish_non_exhaustive()
    }
}

impl<S: DataSource> BuilderKind for Indexed<S> {
    type Item = S::Item;
}

/// Configures a [`Loader`]; made by [`Loader::builder`]. The [`Builder`] of kind [`Indexed`]:
/// the setters every loader has, plus [`Builder::global_batch`],
/// [`Builder::drop_remainder`] and [`Builder::readahead`].
///
/// Type parameters: `S` the source, `U` the record type after `map` (the source's item by
/// default), `C` the collation ([`VecCollate`] by default).
pub type LoaderBuilder<S, U = <S as DataSource>::Item, C = VecCollate> = Builder<Indexed<S>, U, C>;

impl<S: DataSource + 'static> Loader<S>
where
    S::Item: 'static,
{
    /// Starts configuring a loader over `source` (to share a source, pass an `Arc`).
    pub fn builder(source: S) -> LoaderBuilder<S> {
        Builder::new(Indexed { source, global_batch: None, drop_remainder: false, readahead: 0 })
    }
}

impl<S: DataSource, U, C> Builder<Indexed<S>, U, C> {
    /// Records per global step over all ranks, `G`: the batch size per rank becomes
    /// `G / world_size` (the elastic way to configure a loader: keep `G` and change the world
    /// size). Default: unset (the batch size per rank is [`Builder::batch_size`]).
    ///
    /// [`Builder::build`] refuses a world size that does not divide `G`
    /// ([`LoaderError::InvalidConfig`] naming both), and a batch size set explicitly that is
    /// not `G / world_size`.
    ///
    /// ```
    /// use guideloom_loader::{Loader, LoaderError, RangeSource};
    /// let six = Loader::builder(RangeSource::new(0, 100, 1)?).global_batch(24).shard(0, 6).build()?;
    /// assert_eq!((six.sampler().config().batch_size, six.global_batch()), (4, 24));
    /// let five = Loader::builder(RangeSource::new(0, 100, 1)?).global_batch(24).shard(0, 5).build();
    /// assert_eq!(
    ///     five.unwrap_err().to_string(),
    ///     "invalid configuration: world_size: the world size 5 does not divide the global batch 24"
    /// );
    /// # Ok::<(), LoaderError>(())
    /// ```
    pub fn global_batch(mut self, global_batch: u64) -> Self {
        self.kind.global_batch = Some(global_batch);
        self
    }

    /// Whether each epoch's incomplete final global batch is dropped (default `false`); see
    /// [`Sampler`] for what happens otherwise.
    pub fn drop_remainder(mut self, drop: bool) -> Self {
        self.kind.drop_remainder = drop;
        self
    }

    /// Readahead: before batch `n` is produced, the source is told ([`DataSource::prefetch`])
    /// which records the next `batches` batches after those already handed to workers will
    /// read (batches `m .. m + batches`, where `m` is `n` plus the batches in flight, up to
    /// [`Builder::prefetch`]; `m = n` without workers), so a remote storage fetches
    /// their bytes in the background, in the order they will be consumed, a full `batches`
    /// batches before a worker asks for them. Default 0 (off); it never changes the batches.
    pub fn readahead(mut self, batches: u64) -> Self {
        self.kind.readahead = batches;
        self
    }

    /// Builds the loader.
    ///
    /// # Errors
    /// [`LoaderError::InvalidConfig`] for a zero batch size, world size, epoch count or
    /// prefetch (with workers), more than [`MAX_WORKERS`](crate::MAX_WORKERS) workers,
    /// `rank >= world_size`, or a [`Builder::global_batch`] that the world size does not
    /// divide (or that disagrees with an explicit batch size).
    ///
    /// An empty source, or a `drop_remainder` that leaves no batch, builds a loader with
    /// `len() == 0` whose iterators yield nothing (and start no thread). A
    /// [`StreamWindows`](crate::StreamWindows) source over a stream shorter than one window is
    /// such an empty source ([`Windows::check_fits`](crate::Windows::check_fits) says why);
    /// [`TokenWindows`](crate::TokenWindows) refuses that stream when it is opened.
    pub fn build(self) -> Result<Loader<S, U, C>, LoaderError>
    where
        C: Collate<U>,
    {
        let o = self.options;
        let mut config = SamplerConfig {
            seed: o.seed,
            shuffle: o.shuffle,
            epochs: o.epochs,
            batch_size: o.batch_size,
            drop_remainder: self.kind.drop_remainder,
            rank: o.rank,
            world_size: o.world_size,
        };
        if let Some(g) = self.kind.global_batch {
            let w = config.world_size;
            let bad = |field, detail| Err(LoaderError::InvalidConfig { field, detail });
            if g == 0 {
                return bad("global_batch", "must be at least 1".into());
            }
            if w == 0 || !g.is_multiple_of(w) {
                return bad("world_size", format!("the world size {w} does not divide the global batch {g}"));
            }
            if o.batch_size_set && config.batch_size != g / w {
                return bad(
                    "batch_size",
                    format!(
                        "batch size {} per rank times world size {w} is not the global batch {g}",
                        config.batch_size
                    ),
                );
            }
            config.batch_size = g / w;
        }
        let source = self.kind.source;
        let sampler = Sampler::new(source.len(), config)?;
        let (workers, prefetch) = o.pool()?;
        let source_id = SourceId {
            records: source.len(),
            fingerprint: source.fingerprint(),
            window: source.window_params(),
        };
        let helped = !self.mapped && source.reads_bounded() && self.collate.bounded();
        Ok(Loader {
            shared: Arc::new(Shared {
                helped,
                source,
                map: self.map,
                collate: self.collate,
                sampler,
                source_id,
                transforms: o.transforms,
            }),
            workers,
            prefetch,
            readahead: self.kind.readahead,
        })
    }
}
