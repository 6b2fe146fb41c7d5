//! Other trainers' sample orders, computed in Rust: Megatron-Core's ([`megatron`]) and llm.c's
//! ([`llmc`]), with the states that continue their runs, and each run as a loader ([`megatron::run`],
//! [`llmc_run`]).

pub(crate) mod capacity;
pub(crate) mod llmc;
pub(crate) mod llmc_run;
pub(crate) mod megatron;
