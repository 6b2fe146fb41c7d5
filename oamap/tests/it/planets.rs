//! The real exoplanets sample (data/exoplanets): planets.npz read with the schema stored in
//! it, compared with planets.json.gz; laziness of a nested-field scan; damaged arrays.

use std::sync::Arc;

use guideloom_oamap::Value as OamValue;
use guideloom_oamap::{open_npz, Array, ArrayMap, NpzSource, OamapError, Reader, RecordingSource, Schema};
use serde_json::Value;

use guideloom_testkit::planets_npz as npz_bytes;

use guideloom_testkit::stars_json;

/// Equal, with numbers compared at float32 precision (the npz stores float32).
fn same(a: &Value, b: &Value, path: &str) -> Result<(), String> {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            if x == y || (x as f32) == (y as f32) {
                Ok(())
            } else {
                Err(format!("{path}: {x} != {y}"))
            }
        }
        (Value::Object(x), Value::Object(y)) => {
            for k in x.keys().chain(y.keys()) {
                let n = Value::Null;
                same(x.get(k).unwrap_or(&n), y.get(k).unwrap_or(&n), &format!("{path}/{k}"))?;
            }
            Ok(())
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            x.iter().zip(y).enumerate().try_for_each(|(i, (p, q))| same(p, q, &format!("{path}/{i}")))
        }
        _ if a == b => Ok(()),
        _ => Err(format!("{path}: {a} != {b}")),
    }
}

#[test]
fn planets_npz_equals_planets_json() {
    let reader = open_npz(npz_bytes()).unwrap();
    let stars = reader.root().unwrap().as_list().unwrap();
    assert_eq!(stars.len(), 2660);
    let json = stars_json();
    assert_eq!(json.len(), 2660);
    let mut planets = 0;
    for (i, expect) in json.iter().enumerate() {
        let got = stars.get(i).unwrap().to_json().unwrap();
        same(&got, expect, &format!("/{i}")).unwrap();
        planets += got["planets"].as_array().unwrap().len();
    }
    assert_eq!(planets, 3572);
    let s0 = stars.get(0).unwrap().as_record().unwrap();
    assert_eq!(s0.field("name").unwrap().as_str(), Some("Kepler-1239"));
    assert!(matches!(s0.field("ra").unwrap(), OamValue::Float32(x) if x == 293.12738_f32));
    assert_eq!(s0.field("dec").unwrap().as_f64(), Some(42.320103_f32 as f64));
    let t = s0.field("temperature").unwrap().as_record().unwrap();
    assert_eq!(t.field("val").unwrap().as_f64(), Some(6564.0));
    let s258 = stars.get(258).unwrap().as_record().unwrap();
    let names: Vec<&str> = s258
        .field("planets")
        .unwrap()
        .as_list()
        .unwrap()
        .iter()
        .map(|p| p.unwrap().as_record().unwrap().field("name").unwrap().as_str().unwrap())
        .collect();
    assert_eq!(names, ["HD 40307 b", "HD 40307 c", "HD 40307 d", "HD 40307 f", "HD 40307 g"]);
    // Dictionary-encoded (external pointer) strings.
    let p0 = stars.get(0).unwrap().as_record().unwrap().field("planets").unwrap().as_list().unwrap();
    let p0 = p0.get(0).unwrap().as_record().unwrap();
    assert_eq!(p0.field("discovery_method").unwrap().as_str(), Some("Transit"));
}

#[test]
fn nested_field_scan_loads_only_its_arrays() {
    let npz = NpzSource::new(npz_bytes()).unwrap();
    let all = npz.read_all().unwrap();
    let reader = open_npz(npz_bytes()).unwrap();
    let schema = reader.schema().clone();
    let source = Arc::new(RecordingSource::new(all));
    let reader = Reader::new(schema.clone(), source.clone());
    let star = schema.content_of_list(schema.root()).unwrap();
    let planets_f = schema.field(star, "planets").unwrap();
    let planet = schema.content_of_list(planets_f).unwrap();
    let period_f = schema.field(planet, "orbital_period").unwrap();
    let val_f = schema.field(period_f, "val").unwrap();
    let stars = reader.root().unwrap().as_list().unwrap();
    let (mut n, mut sum) = (0usize, 0f64);
    for s in stars.iter() {
        let planets = s.unwrap().as_record().unwrap().field_at(planets_f).unwrap().as_list().unwrap();
        for p in planets.iter() {
            if let Some(per) = p.unwrap().as_record().unwrap().field_at(period_f).unwrap().as_record() {
                if let Some(v) = per.field_at(val_f).unwrap().as_f64() {
                    n += 1;
                    sum += v;
                }
            }
        }
    }
    assert_eq!(n, 3490); // planets with a non-null orbital_period.val in planets.json.gz
    assert!(sum > 0.0);
    assert_eq!(
        source.requests(),
        [
            "object-B",
            "object-E",
            "object-L-NStar-Fplanets-B",
            "object-L-NStar-Fplanets-E",
            "object-L-NStar-Fplanets-L-NPlanet-Forbital_period-NValueAsymErr-M",
            "object-L-NStar-Fplanets-L-NPlanet-Forbital_period-NValueAsymErr-Fval-M",
            "object-L-NStar-Fplanets-L-NPlanet-Forbital_period-NValueAsymErr-Fval-Df4",
        ]
    );
    assert_eq!(reader.loaded().len(), 7);
}

fn damaged(edit: impl FnOnce(&mut ArrayMap)) -> OamapError {
    let schema = Schema::from_json(&serde_json::json!({
        "type": "list", "content": {"type": "record", "fields": {
            "x": {"type": "list", "content": {"type": "primitive", "dtype": "float64"}},
            "u": {"type": "union", "possibilities": [{"type": "primitive", "dtype": "int64"},
                                                     {"type": "primitive", "dtype": "float64"}]},
            "p": {"type": "pointer", "target": {"type": "primitive", "dtype": "int32"}, "nullable": true}}}}))
    .unwrap();
    let data = serde_json::json!([{"x": [1.0, 2.0], "u": 1, "p": 5}, {"x": [], "u": 2.5, "p": null}]);
    let mut arrays = guideloom_oamap::from_data(&schema, &data).unwrap();
    let good = Reader::new(Arc::new(schema.clone()), Arc::new(arrays.clone())).root_json().unwrap();
    assert_eq!(good, data);
    edit(&mut arrays);
    Reader::new(Arc::new(schema), Arc::new(arrays)).root_json().unwrap_err()
}

fn names(e: &OamapError) -> &str {
    match e {
        OamapError::MissingArray { name }
        | OamapError::BadValue { name, .. }
        | OamapError::IndexOutOfRange { name, .. }
        | OamapError::ArrayDtype { name, .. } => name,
        other => panic!("untyped error {other}"),
    }
}

#[test]
fn damaged_arrays_give_typed_errors_naming_the_array() {
    let e = damaged(|a| a.insert("object-L-Fx-B", Array::from_i32(vec![0, 3])));
    assert!(matches!(e, OamapError::BadValue { .. }), "{e}");
    assert_eq!(names(&e), "object-L-Fx-E"); // starts 3 > stops 2
    let e = damaged(|a| a.insert("object-L-Fx-E", Array::from_i32(vec![9, 2])));
    assert!(matches!(e, OamapError::IndexOutOfRange { .. }), "{e}");
    assert_eq!(names(&e), "object-L-Fx-L-Df8");
    let e = damaged(|a| a.insert("object-L-Fp-P", Array::from_i32(vec![7])));
    assert!(matches!(e, OamapError::IndexOutOfRange { .. }), "{e}");
    assert_eq!(names(&e), "object-L-Fp-X-Di4");
    let e = damaged(|a| a.insert("object-L-Fp-P", Array::from_i32(vec![-3])));
    assert_eq!(names(&e), "object-L-Fp-P");
    let e = damaged(|a| a.insert("object-L-Fu-T", Array::from_i8(vec![0, 2])));
    assert!(matches!(e, OamapError::BadValue { .. }), "{e}");
    assert_eq!(names(&e), "object-L-Fu-T");
    let e = damaged(|a| {
        a.remove("object-L-Fu-O");
    });
    assert!(matches!(e, OamapError::MissingArray { .. }), "{e}");
    assert_eq!(names(&e), "object-L-Fu-O");
    let e = damaged(|a| a.insert("object-L-Fp-M", Array::from_i32(vec![0, -5])));
    assert_eq!(names(&e), "object-L-Fp-M");
    let e = damaged(|a| a.insert("object-L-Fp-M", Array::from_i32(vec![0])));
    assert!(matches!(e, OamapError::IndexOutOfRange { .. }), "{e}");
    assert_eq!(names(&e), "object-L-Fp-M");
    let e = damaged(|a| a.insert("object-E", Array::from_i32(vec![])));
    assert_eq!(names(&e), "object-E");
    let e = damaged(|a| {
        let f = Array::new(
            guideloom_oamap::Dtype::parse("float32").unwrap(),
            guideloom_oamap::Column::F32(vec![0.0]),
        )
        .unwrap();
        a.insert("object-L-Fx-B", f)
    });
    assert!(matches!(e, OamapError::ArrayDtype { .. }), "{e}");
    assert_eq!(names(&e), "object-L-Fx-B");
}
