//! The `guideloom` command-line tool: ingest, inspect, batches, bench, demo, oam, import,
//! upload, commit-parts, gc.
//!
//! `main` parses the command line ([`cli`]), hands the command to its module in [`cmd`] and
//! maps the outcome to an exit status: 0 on success, 1 on an error (printed as one sentence on
//! stderr), 2 on a usage error (printed by clap). The commands turn their arguments into
//! sources, loaders and states through the helpers in [`open`]; dependencies point one way:
//! `main` -> `cmd` -> `open` -> `cli`, `error`.

/// `println!` that returns an error instead of panicking when stdout is closed (for example
/// `guideloom batches ... | head`).
macro_rules! outln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($t)*)?
    }};
}

mod cli;
mod cmd;
mod error;
mod open;

use std::error::Error;
use std::process::ExitCode;

use clap::Parser as _;

use crate::cli::{Cli, Command};
use crate::error::{one_sentence, CliResult};

fn main() -> ExitCode {
    let cli = Cli::parse();
    open::backend::warn_unknown_env_value();
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        // A closed stdout (`| head`) ends the output; it is not a failure.
        Err(e) if is_broken_pipe(&*e) => ExitCode::SUCCESS,
        Err(e) => {
            // Not `eprintln!`: it panics (exit 101) when stderr is a closed pipe
            // (`guideloom ... 2>&1 | head -1`); the exit status still says the command failed.
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr().lock(), "error: {}", one_sentence(&*e));
            ExitCode::FAILURE
        }
    }
}

/// Runs one command.
fn run(command: Command) -> CliResult {
    match command {
        Command::Ingest(c) => cmd::ingest::run(c),
        Command::Inspect(a) => cmd::inspect::run(a),
        Command::Batches(a) => cmd::batches::run(a),
        Command::Bench(a) => cmd::bench::run(a),
        Command::Demo(a) => cmd::demo::run(a),
        Command::Oam(c) => cmd::oam::run(c),
        Command::Import(a) => cmd::import::run(a),
        Command::Upload(a) => cmd::upload::run(&a),
        Command::CommitParts(a) => cmd::parts::commit(&a),
        Command::Gc(a) => cmd::parts::gc(&a),
    }
}

/// Whether `e` is the error of writing to a closed stdout.
fn is_broken_pipe(e: &(dyn Error + 'static)) -> bool {
    e.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
}
