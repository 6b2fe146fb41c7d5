//! `guideloom oam fromdata` and `guideloom oam read`: OAMap arrays from nested JSON and back.

use std::path::{Path, PathBuf};

use guideloom::formats::oamap;
use serde_json::Value;

use crate::cli::OamCommand;
use crate::CliResult;

/// Runs `guideloom oam`: prints JSON on stdout, or writes an `.npz` with `fromdata --out`.
pub(crate) fn run(command: OamCommand) -> CliResult {
    match command {
        OamCommand::Fromdata { schema, data, out } => fromdata(&schema, &data, out.as_deref()),
        OamCommand::Read { npz, schema, arrays, index } => read(npz, schema, arrays, index),
    }
}

fn fromdata(schema: &Path, data: &Path, out: Option<&Path>) -> CliResult {
    let (schema, data) = (read_json(schema)?, read_json(data)?);
    match out {
        Some(path) => {
            let bytes = oamap::oam_fromdata_npz(&schema, &data)?;
            std::fs::write(path, bytes).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        }
        None => outln!("{}", oamap::oam_fromdata_json(&schema, &data)?),
    }
    Ok(())
}

fn read(
    npz: Option<PathBuf>,
    schema: Option<PathBuf>,
    arrays: Option<PathBuf>,
    index: Option<usize>,
) -> CliResult {
    let value = match (npz, schema, arrays) {
        (Some(p), _, _) => {
            let bytes = std::fs::read(&p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
            oamap::oam_read_npz(bytes, index)?
        }
        (None, Some(s), Some(a)) => oamap::oam_read_json(&read_json(&s)?, &read_json(&a)?, index)?,
        _ => return Err("give an .npz file, or --schema and --arrays".into()),
    };
    outln!("{value}");
    Ok(())
}

/// The JSON value in the file `p`.
fn read_json(p: &Path) -> CliResult<Value> {
    let text = std::fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
    serde_json::from_slice(&text).map_err(|e| format!("{} is not valid JSON: {e}", p.display()).into())
}
