//! One module per command, plus what `batches` and `bench` share.

pub(crate) mod backend;
pub(crate) mod batches;
pub(crate) mod bench;
pub(crate) mod demo;
pub(crate) mod foreign;
pub(crate) mod import;
pub(crate) mod ingest;
pub(crate) mod inspect;
pub(crate) mod location;
pub(crate) mod mixpack;
pub(crate) mod oam;
pub(crate) mod order;
pub(crate) mod print;
pub(crate) mod sequential;
pub(crate) mod state_file;
pub(crate) mod windows;

/// An error with what the command was doing, and the library's error as its `source()`, so
/// `main` prints the whole chain once.
#[derive(Debug)]
pub(crate) struct Context {
    what: String,
    source: Box<dyn std::error::Error + Send + Sync>,
}

impl std::fmt::Display for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.what)
    }
}

impl std::error::Error for Context {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self.source.as_ref())
    }
}

/// `source` with what was being done (`what`) in front of it.
pub(crate) fn context(
    what: impl Into<String>,
    source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
) -> Context {
    Context { what: what.into(), source: source.into() }
}
