//! JSON-in / JSON-out helpers that the `guideloom oam fromdata|read` commands wrap.

use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::{
    fromdata, write_npz, Array, ArrayMap, ArraySource, NpzSource, OaDtype, OamapError, Reader, Schema,
};

/// The dtype an array name implies when none is given: the `D` code of a data array
/// (`...-Df8`), `int8` for union tags (`...-T`), `int32` for every other structural array.
fn dtype_from_name(name: &str, delimiter: &str) -> OaDtype {
    let last = name.rsplit(delimiter).next().unwrap_or("");
    if last.starts_with('D') {
        if let Ok(d) = OaDtype::parse(last) {
            return d;
        }
    }
    if last == "T" {
        OaDtype::INT8
    } else {
        OaDtype::INT32
    }
}

/// Parses `{"arrays": {name: [numbers]}, "dtypes": {name: "numpy dtype name"}}` (the golden
/// files' shape; `dtypes` optional, missing entries inferred from the name).
///
/// # Errors
/// [`OamapError::Dtype`] / [`OamapError::BadValue`] naming the array that does not parse.
pub fn arrays_from_json(value: &Value) -> Result<ArrayMap, OamapError> {
    let arrays = value.get("arrays").and_then(Value::as_object).ok_or_else(|| OamapError::BadValue {
        name: "arrays".into(),
        index: 0,
        reason: "expected an object {\"arrays\": {name: [numbers]}}".into(),
    })?;
    let dtypes = value.get("dtypes").and_then(Value::as_object);
    let mut out = ArrayMap::new();
    for (name, values) in arrays {
        let dtype = match dtypes.and_then(|d| d.get(name)).and_then(Value::as_str) {
            Some(d) => OaDtype::parse(d)?,
            None => dtype_from_name(name, "-"),
        };
        let list = values.as_array().ok_or_else(|| OamapError::BadValue {
            name: name.clone(),
            index: 0,
            reason: "expected a list of numbers".into(),
        })?;
        out.insert(name.clone(), Array::from_json(name, dtype, list)?);
    }
    Ok(out)
}

/// The inverse of [`arrays_from_json`]: `{"arrays": {...}, "dtypes": {...}}`, names sorted.
pub fn arrays_to_json(arrays: &ArrayMap) -> Value {
    let mut a = Map::new();
    let mut d = Map::new();
    for (name, array) in arrays.iter() {
        a.insert(name.clone(), array.to_json());
        d.insert(name.clone(), Value::String(array.dtype().name()));
    }
    json!({"arrays": a, "dtypes": d})
}

/// `guideloom oam fromdata --schema S --data D`: the arrays OAMap's writer makes for `data`.
///
/// `schema` is the simple form or OAMap's schema JSON. Returns `{"arrays", "dtypes"}`.
///
/// # Errors
/// Schema errors, [`OamapError::Fill`] for data that does not fit.
pub fn oam_fromdata_json(schema: &Value, data: &Value) -> Result<Value, OamapError> {
    let schema = Schema::from_json(schema)?;
    Ok(arrays_to_json(&fromdata(&schema, data)?))
}

/// `guideloom oam fromdata --schema S --data D --out F.npz`: the bytes of an `.npz` holding
/// the arrays plus a member `<prefix>` (uint8 UTF-8 JSON `{"schema", "prefix",
/// "delimiter"}`), OAMap's way of storing the schema with the arrays.
///
/// # Errors
/// As [`oam_fromdata_json`]; [`OamapError::Npy`] if the archive cannot be written.
pub fn oam_fromdata_npz(schema: &Value, data: &Value) -> Result<Vec<u8>, OamapError> {
    let schema = Schema::from_json(schema)?;
    let arrays = fromdata(&schema, data)?;
    let doc = json!({"schema": schema.to_oamap_json(false), "prefix": schema.prefix(), "delimiter": schema.delimiter()});
    let bytes = Array::new(OaDtype::UINT8, super::ArrayData::U8(doc.to_string().into_bytes()))?;
    write_npz(&arrays, &[(schema.prefix().to_string(), bytes)])
}

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

/// `guideloom oam read --schema S --arrays A [--index I]`: the value (or element `I` of the
/// top-level list) as JSON, in the golden files' conventions.
///
/// # Errors
/// Schema errors; typed array errors (missing, damaged) naming the array.
pub fn oam_read_json(schema: &Value, arrays: &Value, index: Option<usize>) -> Result<Value, OamapError> {
    let schema = Arc::new(Schema::from_json(schema)?);
    let source = Arc::new(arrays_from_json(arrays)?);
    read_index(&Reader::new(schema, source), index)
}

/// Opens an OAMap `.npz` (bytes in memory) whose schema is stored in it: the member named
/// `object` holding UTF-8 JSON `{"schema", "prefix"?, "delimiter"?}` (OAMap 0.10/0.11's and
/// the exoplanets sample's layout). Arrays are decoded lazily, on first use.
///
/// # Errors
/// [`OamapError::Npy`] for a bad archive; [`OamapError::MissingArray`] (`object`) when no
/// schema is stored; schema errors.
pub fn open_npz(bytes: impl Into<Arc<[u8]>>) -> Result<Reader, OamapError> {
    let source = NpzSource::new(bytes)?;
    let meta = source.get("object")?;
    let text: Vec<u8> = match meta.data() {
        super::ArrayData::U8(v) => v.clone(),
        super::ArrayData::Bytes { data, .. } => data.iter().copied().filter(|&b| b != 0).collect(),
        _ => return Err(OamapError::schema("member 'object' is not uint8 bytes")),
    };
    let doc: Value =
        serde_json::from_slice(&text).map_err(|e| OamapError::schema(format!("member 'object': {e}")))?;
    let schema_json =
        doc.get("schema").ok_or_else(|| OamapError::schema("member 'object' has no \"schema\""))?;
    let prefix = doc.get("prefix").and_then(Value::as_str).unwrap_or("object");
    let delimiter = doc.get("delimiter").and_then(Value::as_str).unwrap_or("-");
    let schema = Schema::from_json_named(schema_json, prefix, delimiter)?;
    Ok(Reader::new(Arc::new(schema), Arc::new(source)))
}

/// `guideloom oam read FILE.npz [--index I]` on the file's bytes.
///
/// # Errors
/// As [`open_npz`] and [`oam_read_json`].
pub fn oam_read_npz(bytes: impl Into<Arc<[u8]>>, index: Option<usize>) -> Result<Value, OamapError> {
    let reader = open_npz(bytes)?;
    read_index(&reader, index)
}
