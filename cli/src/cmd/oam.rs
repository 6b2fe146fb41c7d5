//! `guideloom oam fromdata|read`: nested JSON to OAMap arrays (JSON or an `.npz`) and back.

use std::path::Path;
use std::sync::Arc;

use guideloom::oamap::fs::read_regular_file;
use guideloom::oamap::{
    arrays_from_json, arrays_to_json, from_data, open_npz, parse_json, write_npz_with_schema, OamapError,
    Reader, Schema,
};
use serde_json::Value;

use crate::cli::OamCommand;
use crate::error::CliResult;

/// Runs one `oam` subcommand, on a stack grown to fit the deepest value the library
/// writes (`MAX_OUTPUT_DEPTH` levels are serialized and dropped recursively).
pub(crate) fn run(c: OamCommand) -> CliResult {
    stacker::grow(256 << 20, || run_on_big_stack(c))
}

fn run_on_big_stack(c: OamCommand) -> CliResult {
    match c {
        OamCommand::Fromdata { schema, data, out } => {
            let (schema, data) = (read_json(&schema)?, read_json(&data)?);
            match out {
                Some(path) => {
                    let bytes = from_data_npz(&schema, &data)?;
                    std::fs::write(&path, bytes)
                        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
                }
                None => outln!("{}", from_data_json(&schema, &data)?),
            }
        }
        OamCommand::Read { npz, schema, arrays, index } => {
            let value = match (npz, schema, arrays) {
                (Some(p), _, _) => read_index(&open_npz(read_regular_file(&p)?)?, index)?,
                (None, Some(s), Some(a)) => read_json_arrays(&read_json(&s)?, &read_json(&a)?, index)?,
                _ => return Err("give an .npz file, or --schema and --arrays".into()),
            };
            outln!("{value}");
        }
    }
    Ok(())
}

/// A JSON file named on the command line: a regular file (never a FIFO or device) of at most
/// `MAX_FILE_BYTES`, nested at most `MAX_JSON_DEPTH` levels.
fn read_json(p: &Path) -> CliResult<Value> {
    let text = read_regular_file(p)?;
    Ok(parse_json(&p.display().to_string(), &text)?)
}

/// `oam fromdata --schema S --data D`: the arrays OAMap's writer makes for `data`, as
/// `{"arrays", "dtypes"}`. `schema` is the simple form or OAMap's schema JSON.
fn from_data_json(schema: &Value, data: &Value) -> Result<Value, OamapError> {
    let schema = Schema::from_json(schema)?;
    Ok(arrays_to_json(&from_data(&schema, data)?))
}

/// `oam fromdata --schema S --data D --out F.npz`: the bytes of an `.npz` holding the arrays
/// and the schema.
fn from_data_npz(schema: &Value, data: &Value) -> Result<Vec<u8>, OamapError> {
    let schema = Schema::from_json(schema)?;
    let arrays = from_data(&schema, data)?;
    write_npz_with_schema(&schema, &arrays)
}

/// The value (or element `index` of the top-level list) as JSON.
fn read_index(reader: &Reader, index: Option<usize>) -> Result<Value, OamapError> {
    match index {
        None => reader.root_json(),
        Some(i) => {
            let root = reader.root()?;
            let list = root.as_list().ok_or_else(|| OamapError::Path {
                path: i.to_string(),
                reason: "--index needs a top-level list".into(),
            })?;
            list.get(i)?.to_json()
        }
    }
}

/// `oam read --schema S --arrays A [--index I]`: the value through `schema` over the arrays
/// JSON (`{"arrays", "dtypes"}`), in the golden files' conventions.
fn read_json_arrays(schema: &Value, arrays: &Value, index: Option<usize>) -> Result<Value, OamapError> {
    let schema = Arc::new(Schema::from_json(schema)?);
    let source = Arc::new(arrays_from_json(arrays)?);
    read_index(&Reader::new(schema, source), index)
}
