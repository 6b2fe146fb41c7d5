//! Loader tests that count the process's worker threads or open descriptors, or run child
//! processes: a binary of their own, so no other test's loader is counted. Every test here
//! holds [`common::serial`].

mod common;
mod failure;
mod helping;
mod lifecycle;
