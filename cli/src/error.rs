//! The error of a command: any error, with what the command was doing in front of it, printed
//! by `main` as one sentence.

use std::error::Error;

/// The result of a command: any error, reported by `main`.
pub(crate) type CliResult<T = ()> = Result<T, Box<dyn Error + Send + Sync>>;

/// An error with what the command was doing, and the library's error as its `source()`, so
/// `main` prints the whole chain once.
#[derive(Debug)]
pub(crate) struct Context {
    what: String,
    source: Box<dyn Error + Send + Sync>,
}

impl std::fmt::Display for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.what)
    }
}

impl Error for Context {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(self.source.as_ref())
    }
}

/// `source` with what was being done (`what`) in front of it.
pub(crate) fn context(what: impl Into<String>, source: impl Into<Box<dyn Error + Send + Sync>>) -> Context {
    Context { what: what.into(), source: source.into() }
}

/// `e` and its chain of causes ([`Error::source`]), joined by ": ".
pub(crate) fn one_sentence(e: &(dyn Error + 'static)) -> String {
    let mut msg = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        msg.push_str(": ");
        msg.push_str(&c.to_string());
        cause = c.source();
    }
    msg
}
