//! Array sets as JSON: `{"arrays": {name: [numbers]}, "dtypes": {name: "numpy dtype name"}}`,
//! the golden files' shape and what `guideloom oam fromdata` prints.

use serde_json::{json, Map, Value};

use crate::{Array, ArrayMap, Dtype, OamapError};

/// The dtype an array name implies when none is given: the `D` code of a data array
/// (`...-Df8`), `int8` for union tags (`...-T`), `int32` for every other structural array.
fn dtype_from_name(name: &str, delimiter: &str) -> Dtype {
    let last = name.rsplit(delimiter).next().unwrap_or("");
    if last.starts_with('D') {
        if let Ok(d) = Dtype::parse(last) {
            return d;
        }
    }
    if last == "T" {
        Dtype::INT8
    } else {
        Dtype::INT32
    }
}

/// Parses `{"arrays": {name: [numbers]}, "dtypes": {name: "numpy dtype name"}}` (the golden
/// files' shape; `dtypes` optional, missing entries inferred from the name: the `D` code of
/// a data array, `int8` for union tags, `int32` otherwise).
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
            Some(d) => Dtype::parse(d)?,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_imply_dtypes_and_round_trip() {
        let v = json!({"arrays": {"object-B": [0], "object-E": [2], "object-L-T": [0, 1],
                                  "object-L-U0-Df8": [1.5], "object-L-U1-DU2": [7]}});
        let m = arrays_from_json(&v).unwrap();
        let dtype = |n: &str| m.array(n).unwrap().dtype().name();
        assert_eq!(dtype("object-B"), "int32");
        assert_eq!(dtype("object-L-T"), "int8");
        assert_eq!(dtype("object-L-U0-Df8"), "float64");
        assert_eq!(dtype("object-L-U1-DU2"), ">uint16");
        let back = arrays_to_json(&m);
        assert_eq!(back["arrays"], v["arrays"]);
        assert_eq!(arrays_from_json(&back).unwrap(), m);
        assert!(matches!(arrays_from_json(&json!({"a": 1})), Err(OamapError::BadValue { .. })));
        let bad = json!({"arrays": {"x": [1]}, "dtypes": {"x": "int3"}});
        assert!(matches!(arrays_from_json(&bad), Err(OamapError::Dtype { .. })));
    }
}
