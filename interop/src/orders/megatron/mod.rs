//! Megatron-Core's sample order, one algorithm per file: the MT19937 generator and NumPy's
//! legacy shuffle ([`mt19937`]), the train/valid/test split ([`split`]), one `GPTDataset`'s
//! document, sample and shuffle indices ([`gpt`]), `BlendedDataset`'s blending schedule
//! ([`blend`]), and the samples as a loader source with Megatron's `consumed_samples` resume
//! ([`samples`]), and a run continued as a loader ([`run`]).

pub(crate) mod blend;
pub(crate) mod gpt;
pub(crate) mod mt19937;
pub(crate) mod run;
pub(crate) mod samples;
pub(crate) mod split;
