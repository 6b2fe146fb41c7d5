//! The layouts this crate reads: [`ForeignFormat`] (its names parse with `FromStr`, in
//! `crate::options`).

use std::fmt;

/// A layout of another project that [`crate::ForeignDataset`] reads in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ForeignFormat {
    /// Megatron-Core indexed dataset (`<prefix>.bin` + `<prefix>.idx`, `MMIDIDX` v1).
    Megatron,
    /// nanoGPT `train.bin`/`val.bin`: raw little-endian tokens, no header.
    NanoGpt,
    /// llm.c / modded-nanogpt token shards (256 × i32 header), or header-less legacy files
    /// with an explicit dtype.
    Llmc,
    /// MosaicML Streaming MDS (`index.json` v2 + `shard.NNNNN.mds`); needs the `mds` feature.
    Mds,
    /// litdata optimized chunks (`index.json` + `chunk-*.bin`).
    Litdata,
    /// OLMo / Dolma token files: raw tokens named `*.npy`, with `.csv.gz` document metadata;
    /// needs the `olmo` feature.
    Olmo,
    /// NumPy `.npy` v1/v2/v3 arrays, one file or a directory of them.
    Npy,
    /// Hugging Face `datasets` directories (`save_to_disk`: Arrow IPC stream files listed by
    /// `state.json`; a `DatasetDict` by split), or Arrow IPC stream files; needs the `arrow`
    /// feature.
    HfArrow,
    /// Parquet token tables (Hugging Face Hub and pyarrow files): one file, a glob or a
    /// directory of `*.parquet`; needs the `parquet` feature.
    Parquet,
    /// Grain's ArrayRecord files (riegeli/records chunks with a footer index), records as
    /// documents; needs the `arrayrecord` feature.
    ArrayRecord,
    /// TFRecord files (`tf.train.Example` records or raw records, optionally gzip); needs the
    /// `tfrecord` feature.
    TfRecord,
    /// WebDataset tar shards (samples grouped by key, one member as the tokens); needs the
    /// `webdataset` feature.
    WebDataset,
}

impl ForeignFormat {
    /// Every layout, in a fixed order.
    pub const ALL: [ForeignFormat; 12] = [
        ForeignFormat::Megatron,
        ForeignFormat::NanoGpt,
        ForeignFormat::Llmc,
        ForeignFormat::Mds,
        ForeignFormat::Litdata,
        ForeignFormat::Olmo,
        ForeignFormat::Npy,
        ForeignFormat::HfArrow,
        ForeignFormat::Parquet,
        ForeignFormat::ArrayRecord,
        ForeignFormat::TfRecord,
        ForeignFormat::WebDataset,
    ];

    /// The name `FromStr` parses and messages use: `megatron`, `nanogpt`, `llmc`, `mds`,
    /// `litdata`, `olmo`, `npy`, `arrow` (Hugging Face datasets), `parquet`, `arrayrecord`,
    /// `tfrecord`, `webdataset`.
    pub const fn name(self) -> &'static str {
        match self {
            ForeignFormat::Megatron => "megatron",
            ForeignFormat::NanoGpt => "nanogpt",
            ForeignFormat::Llmc => "llmc",
            ForeignFormat::Mds => "mds",
            ForeignFormat::Litdata => "litdata",
            ForeignFormat::Olmo => "olmo",
            ForeignFormat::Npy => "npy",
            ForeignFormat::HfArrow => "arrow",
            ForeignFormat::Parquet => "parquet",
            ForeignFormat::ArrayRecord => "arrayrecord",
            ForeignFormat::TfRecord => "tfrecord",
            ForeignFormat::WebDataset => "webdataset",
        }
    }

    /// The cargo feature of this crate that reading the layout needs (`None`: always read),
    /// and whether this build has it.
    pub const fn feature(self) -> Option<(&'static str, bool)> {
        match self {
            ForeignFormat::Mds => Some(("mds", cfg!(feature = "mds"))),
            ForeignFormat::Olmo => Some(("olmo", cfg!(feature = "olmo"))),
            ForeignFormat::HfArrow => Some(("arrow", cfg!(feature = "arrow"))),
            ForeignFormat::Parquet => Some(("parquet", cfg!(feature = "parquet"))),
            ForeignFormat::ArrayRecord => Some(("arrayrecord", cfg!(feature = "arrayrecord"))),
            ForeignFormat::TfRecord => Some(("tfrecord", cfg!(feature = "tfrecord"))),
            ForeignFormat::WebDataset => Some(("webdataset", cfg!(feature = "webdataset"))),
            _ => None,
        }
    }
}

impl fmt::Display for ForeignFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
