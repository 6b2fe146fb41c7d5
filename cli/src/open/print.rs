//! The one printing loop of `batches` (every plan): a JSON line per batch on stdout, and
//! `--save-state` written with the state after the last batch that reached stdout, also when
//! a batch fails or stdout closes; and the JSON lists the lines are made of.

use std::fmt::Write as _;
use std::io::Write;
use std::path::Path;

use crate::error::CliResult;
use crate::open::state_file::StateFile;

/// Appends `items` as a JSON list of their `Display` forms (numbers, booleans).
pub(crate) fn write_list<T: std::fmt::Display>(out: &mut String, items: impl IntoIterator<Item = T>) {
    out.push('[');
    for (i, t) in items.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{t}");
    }
    out.push(']');
}

/// Appends `,"name":[...]` to a JSON line: one list of `Display` forms per row (`rows` of
/// token ids, for example).
pub(crate) fn write_rows<R, T>(out: &mut String, name: &str, rows: impl IntoIterator<Item = R>)
where
    R: IntoIterator<Item = T>,
    T: std::fmt::Display,
{
    let _ = write!(out, ",\"{name}\":[");
    for (i, row) in rows.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_list(out, row);
    }
    out.push(']');
}

/// What the loop needs of an iterator beside its batches: its state now, as JSON.
pub(crate) trait StateJson {
    /// The state after the batches yielded so far.
    fn state_json(&self) -> String;
}

impl<S, U, C> StateJson for guideloom::loader::LoaderIter<S, U, C>
where
    S: guideloom::loader::DataSource + 'static,
    U: 'static,
    C: guideloom::loader::Collate<U> + 'static,
    C::Output: 'static,
{
    fn state_json(&self) -> String {
        self.state().to_json()
    }
}

/// Prints at most `max` batches of `it`, one line each made by `write_line`, then calls
/// `after` (also after every batch). With `save_state` each line is flushed, and the state of
/// the last batch that reached stdout is saved atomically (the file is checked before the
/// first batch, and saved on an error too).
///
/// # Errors
/// The first batch error (after saving the state), a write error on stdout, or a state-file
/// error.
pub(crate) fn print_batches<I, B, E>(
    it: &mut I,
    max: Option<u64>,
    save_state: Option<&Path>,
    mut write_line: impl FnMut(&mut String, &B),
    mut after: impl FnMut(&mut I),
) -> CliResult
where
    I: Iterator<Item = Result<B, E>> + StateJson,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let state_file = save_state.map(StateFile::create).transpose()?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let (mut printed, mut line) = (0u64, String::new());
    let mut delivered = it.state_json();
    let mut written: std::io::Result<()> = Ok(());
    let mut failed = None;
    while max.is_none_or(|k| printed < k) {
        let Some(batch) = it.next() else { break };
        let batch = match batch {
            Ok(b) => b,
            Err(e) => {
                failed = Some(e);
                break;
            }
        };
        line.clear();
        write_line(&mut line, &batch);
        written = writeln!(out, "{line}").and_then(|()| match state_file {
            Some(_) => out.flush(),
            None => Ok(()),
        });
        if written.is_err() {
            break;
        }
        printed += 1;
        delivered = it.state_json();
        after(it);
    }
    after(it);
    if written.is_ok() {
        written = out.flush();
    }
    if let Some(f) = state_file {
        f.save(&delivered)?;
    }
    if let Some(e) = failed {
        return Err(e.into());
    }
    Ok(written?)
}
