//! Every OAMap golden case (tests/data/golden): writer arrays exact, reader data exact,
//! lazy-loading request order exact, generator order of array names.

use std::path::PathBuf;
use std::sync::Arc;

use guideloom_oamap::Value as OamValue;
use guideloom_oamap::{
    arrays_from_json, arrays_to_json, from_data, from_data_dataset, gather, gather_dataset, ArrayMap,
    ArraySource, Dataset, DatasetDescription, OamapError, Projection, Reader, RecordingSource, Schema,
};
use serde_json::Value;

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/golden")
}

/// The arrays the writer makes for `data`, as `{"arrays", "dtypes"}` JSON (what
/// `guideloom oam fromdata` prints).
fn from_data_json(schema: &Value, data: &Value) -> Result<Value, OamapError> {
    let schema = Schema::from_json(schema)?;
    Ok(arrays_to_json(&from_data(&schema, data)?))
}

/// The value `schema` reads from the arrays JSON `arrays` (what `guideloom oam read
/// --schema --arrays` prints).
fn read_json(schema: &Value, arrays: &Value) -> Result<Value, OamapError> {
    let reader = Reader::new(Arc::new(Schema::from_json(schema)?), Arc::new(arrays_from_json(arrays)?));
    reader.root_json()
}

fn cases() -> Vec<Value> {
    let index: Value =
        serde_json::from_str(&std::fs::read_to_string(golden_dir().join("index.json")).unwrap()).unwrap();
    let names: Vec<String> =
        index["cases"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap().to_string()).collect();
    assert_eq!(names.len(), 22);
    names
        .iter()
        .map(|n| {
            serde_json::from_str(&std::fs::read_to_string(golden_dir().join(format!("{n}.json"))).unwrap())
                .unwrap()
        })
        .collect()
}

fn is_dataset(case: &Value) -> bool {
    case.get("dataset_json").is_some()
}

#[test]
fn writer_produces_exact_arrays() {
    let mut checked = 0;
    for case in cases() {
        let name = case["name"].as_str().unwrap();
        if is_dataset(&case) {
            check_dataset_case(&case);
            continue;
        }
        if name == "nullable_primitives_placeholder" {
            continue; // hand-written, not a writer output (read-checked below)
        }
        let out = from_data_json(&case["schema"], &case["data"]).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(out["arrays"], case["arrays"], "{name}: arrays");
        if let Some(d) = case.get("dtypes") {
            assert_eq!(&out["dtypes"], d, "{name}: dtypes");
        }
        // The same through OAMap's own schema JSON.
        let out2 = from_data_json(&case["oamap_schema"], &case["data"]).unwrap();
        assert_eq!(out2, out, "{name}: oamap_schema form");
        checked += 1;
    }
    assert_eq!(checked, 20, "writer cases (22 less the dataset case and the placeholder)");
}

#[test]
fn reader_gives_exact_data() {
    let mut checked = 0;
    for case in cases() {
        let name = case["name"].as_str().unwrap();
        if is_dataset(&case) {
            check_dataset_case(&case);
            continue;
        }
        let v = read_json(&case["schema"], &case).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(v, case["data"], "{name}");
        let v2 = read_json(&case["oamap_schema"], &case).unwrap();
        assert_eq!(v2, case["data"], "{name}: oamap_schema form");
        checked += 1;
    }
    assert_eq!(checked, 21, "every case but the dataset case");
}

#[test]
fn generator_order_of_array_names() {
    let mut checked = 0;
    for case in cases() {
        let Some(order) = case.get("array_names_in_generator_order") else { continue };
        let schema = Schema::from_json(&case["schema"]).unwrap();
        let expect: Vec<String> = serde_json::from_value(order.clone()).unwrap();
        assert_eq!(schema.array_names(), expect, "{}", case["name"]);
        checked += 1;
    }
    assert_eq!(checked, 21);
}

fn navigate<'r>(root: OamValue<'r>, path: &[Value]) -> OamValue<'r> {
    let mut cur = root;
    for step in path {
        cur = match step {
            Value::Number(n) => {
                let i = n.as_u64().unwrap() as usize;
                match cur {
                    OamValue::List(l) => l.get(i).unwrap(),
                    OamValue::Tuple(t) => t.field(&i.to_string()).unwrap(),
                    other => panic!("cannot index {other:?}"),
                }
            }
            Value::String(f) => cur.as_record().unwrap().field(f).unwrap(),
            other => panic!("bad path step {other}"),
        };
    }
    cur
}

#[test]
fn lazy_loading_requests_in_order() {
    let mut checked = 0;
    for case in cases() {
        let Some(steps) = case.get("lazy_loading").and_then(Value::as_array) else { continue };
        let name = case["name"].as_str().unwrap();
        let schema = Arc::new(Schema::from_json(&case["schema"]).unwrap());
        let source = Arc::new(RecordingSource::new(arrays_from_json(&case).unwrap()));
        let reader = Reader::new(schema, source.clone());
        for step in steps {
            let expect: Vec<String> = serde_json::from_value(step["requested"].clone()).unwrap();
            if step["access"] == "schema(arrays)" {
                reader.root().unwrap();
            } else {
                let path = step["access"].as_array().unwrap();
                navigate(reader.root().unwrap(), path);
            }
            assert_eq!(source.take_requests(), expect, "{name}: step {}", step["access"]);
        }
        checked += 1;
    }
    assert_eq!(checked, 8, "cases with lazy_loading");
}

#[test]
fn access_checks_follow_pointers() {
    let mut checked = 0;
    for case in cases() {
        let Some(checks) = case.get("access_checks").and_then(Value::as_array) else { continue };
        let schema = Arc::new(Schema::from_json(&case["schema"]).unwrap());
        let reader = Reader::new(schema, Arc::new(arrays_from_json(&case).unwrap()));
        for c in checks {
            let v = navigate(reader.root().unwrap(), c["path"].as_array().unwrap());
            assert_eq!(v.to_json().unwrap(), c["value"], "{} {}", case["name"], c["path"]);
            checked += 1;
        }
    }
    assert_eq!(checked, 3, "the access checks of the one case that has them");
}

#[test]
fn arrays_json_round_trips() {
    let mut checked = 0;
    for case in cases() {
        if case.get("dtypes").is_none() {
            continue;
        }
        let m: ArrayMap = arrays_from_json(&case).unwrap();
        let back = arrays_to_json(&m);
        assert_eq!(back["arrays"], case["arrays"], "{}", case["name"]);
        assert_eq!(back["dtypes"], case["dtypes"], "{}", case["name"]);
        checked += 1;
    }
    assert_eq!(checked, 21);
}

#[test]
fn typed_views_on_exoplanet_like_case() {
    let case = cases().into_iter().find(|c| c["name"] == "nested_records_exoplanet_like").unwrap();
    let schema = Arc::new(Schema::from_json(&case["schema"]).unwrap());
    let arrays = from_data(&schema, &case["data"]).unwrap();
    let reader = Reader::new(schema, Arc::new(arrays));
    let stars = reader.root().unwrap().as_list().unwrap();
    assert_eq!(stars.len(), 3);
    let hd = stars.get(2).unwrap().as_record().unwrap();
    assert_eq!(hd.field("name").unwrap().as_str(), Some("HD 40307"));
    assert_eq!(hd.field("ra").unwrap().as_f64(), Some(88.5));
    let planets = hd.field("planets").unwrap().as_list().unwrap();
    assert_eq!(planets.len(), 2);
    let c = planets.get(1).unwrap().as_record().unwrap();
    assert_eq!(c.field("name").unwrap().as_str(), Some("HD 40307 c"));
    assert_eq!(c.field("mass").unwrap().as_f64(), Some(0.0206));
    assert!(c.field("orbit").unwrap().is_null());
    let e = c.field("nope").unwrap_err();
    assert!(matches!(&e, OamapError::Path { path, .. } if path == "nope"), "{e:?}");
    let e = planets.get(2).unwrap_err();
    assert!(
        matches!(&e, OamapError::Path { path, reason } if path == "2" && reason == "index past the end of a list of 2"),
        "{e:?}"
    );
}

/// Name of the dataset in a partition case: the prefix of its stored array names.
fn dataset_name(case: &Value) -> String {
    let starts = case["dataset_json"]["schema"]["starts"].as_str().unwrap();
    starts.strip_suffix("-B").unwrap().to_string()
}

/// A partition case (`dataset_json`): writer, stored description, read-back across and per
/// partition, global index -> partition, and a gather across the partition boundary.
fn check_dataset_case(case: &Value) {
    let name = case["name"].as_str().unwrap();
    let ds_name = dataset_name(case);
    assert_eq!(ds_name, "one", "{name}");
    let parts_data: Vec<Value> = case["partitions_data"].as_array().unwrap().clone();
    let expect_parts = case["partitions"].as_array().unwrap();
    assert_eq!(expect_parts.len(), 2, "{name}");

    // Writer: per-partition arrays exactly, description exactly; also from OAMap's schema JSON.
    for schema in [&case["schema"], &case["dataset_json"]["schema"]] {
        let (desc, parts) = from_data_dataset(schema, &ds_name, &parts_data).unwrap();
        assert_eq!(desc.to_json(), case["dataset_json"], "{name}: dataset_json");
        assert_eq!(desc.offsets(), &[0, 3, 5]);
        assert_eq!(parts.len(), expect_parts.len());
        for (k, (got, want)) in parts.iter().zip(expect_parts).enumerate() {
            assert_eq!(want["partition"], k);
            let j = arrays_to_json(got);
            assert_eq!(j["arrays"], want["arrays"], "{name}: partition {k} arrays");
            assert_eq!(j["dtypes"], want["dtypes"], "{name}: partition {k} dtypes");
            assert!(
                got.array("one-B").is_none() && got.array("one-E").is_none(),
                "top-level starts/stops stored"
            );
        }
        // The flat `arrays` repeat partition 0.
        assert_eq!(arrays_to_json(&parts[0])["arrays"], case["arrays"]);
    }

    // Reader: from the stored description and the golden per-partition arrays.
    let desc = DatasetDescription::from_json(&case["dataset_json"], &ds_name).unwrap();
    assert_eq!(desc.to_json(), case["dataset_json"]);
    let parts: Vec<ArrayMap> = expect_parts.iter().map(|p| arrays_from_json(p).unwrap()).collect();
    let ds = Dataset::from_arrays(desc, parts).unwrap();
    assert_eq!(ds.len(), 5);
    assert_eq!(ds.num_partitions(), 2);
    assert_eq!(ds.to_json().unwrap(), case["data"], "{name}: data across partitions");
    for (k, want) in parts_data.iter().enumerate() {
        assert_eq!(&ds.partition_json(k).unwrap(), want, "{name}: partitions_data[{k}]");
    }
    let data = case["data"].as_array().unwrap();
    for pair in case["global_index_to_partition"].as_array().unwrap() {
        let (g, p) = (pair[0].as_u64().unwrap(), pair[1].as_u64().unwrap() as usize);
        let (got_p, local) = ds.locate(g).unwrap();
        assert_eq!(got_p, p, "{name}: entry {g}");
        assert_eq!(local, g - [0, 3][p]);
        assert_eq!(&ds.get_json(g).unwrap(), &data[g as usize]);
    }
    assert!(matches!(ds.locate(5), Err(OamapError::EntryOutOfRange { index: 5, len: 5 })));
    let e = ds.partition_json(2).unwrap_err();
    assert!(matches!(&e, OamapError::Dataset(reason) if reason.contains('2')), "{e:?}");

    // The synthesized top-level starts/stops: [0] and [partition length].
    let parts: Vec<ArrayMap> = expect_parts.iter().map(|p| arrays_from_json(p).unwrap()).collect();
    let fresh =
        Dataset::from_arrays(DatasetDescription::from_json(&case["dataset_json"], &ds_name).unwrap(), parts)
            .unwrap();
    let r1 = fresh.partition(1).unwrap();
    assert_eq!(r1.root().unwrap().as_list().unwrap().len(), 2);
    assert_eq!(r1.loaded(), vec!["one-B".to_string(), "one-E".to_string()]);

    // Gather across the boundary equals gathering the same entries unpartitioned.
    let flat_schema = Schema::from_json_named(&case["schema"], &ds_name, "-").unwrap();
    let flat =
        Reader::new(Arc::new(flat_schema.clone()), Arc::new(from_data(&flat_schema, &case["data"]).unwrap()));
    let proj = Projection::new(ds.schema(), &["x", "y"]).unwrap();
    let order = [4u64, 2, 3, 0, 1];
    let got = gather_dataset(&ds, &order, &proj).unwrap();
    let want = gather(&flat, &order, &Projection::new(&flat_schema, &["x", "y"]).unwrap()).unwrap();
    assert_eq!(got, want);
    let y = got.column("y").unwrap();
    assert_eq!(y.offsets, vec![vec![0, 0, 2, 3, 4, 4]]);
    assert_eq!(y.values.to_json(), serde_json::json!([3.3, 3.3, 4.4, 1.1]));
    assert_eq!(got.column("x").unwrap().values.to_json(), serde_json::json!([5, 3, 4, 1, 2]));
}

#[test]
fn every_golden_dataset_case_is_checked() {
    let n = cases().into_iter().filter(is_dataset).inspect(check_dataset_case).count();
    assert_eq!(n, 1, "dataset_partitions_inmemory");
}

#[test]
fn damaged_partition_errors_name_partition_and_array() {
    let case: Value = serde_json::from_str(
        &std::fs::read_to_string(golden_dir().join("dataset_partitions_inmemory.json")).unwrap(),
    )
    .unwrap();
    let desc = DatasetDescription::from_json(&case["dataset_json"], "one").unwrap();
    let p0 = arrays_from_json(&case["partitions"][0]).unwrap();
    let mut p1 = arrays_from_json(&case["partitions"][1]).unwrap();
    p1.remove("one-L-Fy-L-Df8");
    let ds = Dataset::from_arrays(desc.clone(), vec![p0.clone(), p1]).unwrap();
    assert_eq!(ds.get_json(2).unwrap(), case["data"][2]);
    let e = ds.get_json(3).unwrap_err();
    match e {
        OamapError::InPartition { partition: 1, source } => {
            assert!(matches!(*source, OamapError::MissingArray { ref name } if name == "one-L-Fy-L-Df8"))
        }
        other => panic!("{other}"),
    }
    // Wrong number of partitions, bad offsets, non-list schema.
    assert!(matches!(Dataset::from_arrays(desc, vec![p0]), Err(OamapError::Dataset(_))));
    let mut bad = case["dataset_json"].clone();
    bad["offsets"] = serde_json::json!([0, 3, 2]);
    assert!(matches!(DatasetDescription::from_json(&bad, "one"), Err(OamapError::Dataset(_))));
    bad["offsets"] = serde_json::json!([1, 3, 5]);
    assert!(matches!(DatasetDescription::from_json(&bad, "one"), Err(OamapError::Dataset(_))));
    let rec = serde_json::json!({"schema": {"type": "record", "fields": {"a": "int32"}}, "offsets": [0, 1]});
    assert!(matches!(DatasetDescription::from_json(&rec, "one"), Err(OamapError::Dataset(_))));
    // A stored top-level starts array is ignored: they are synthesized.
    let mut p = arrays_from_json(&case["partitions"][1]).unwrap();
    p.insert("one-B", guideloom_oamap::Array::from_i32(vec![7]));
    let src: Arc<dyn ArraySource> = Arc::new(p);
    let d = DatasetDescription::from_json(
        &serde_json::json!({"schema": case["dataset_json"]["schema"], "offsets": [0, 2]}),
        "one",
    )
    .unwrap();
    let ds = Dataset::new(d, vec![src]).unwrap();
    assert_eq!(ds.to_json().unwrap(), serde_json::json!(case["partitions_data"][1]));
}

#[test]
fn oamap_schema_json_matches_golden() {
    let mut checked = 0;
    for case in cases() {
        let Some(want) = case.get("oamap_schema") else { continue };
        let schema = Schema::from_json(&case["schema"]).unwrap();
        // Field order: OAMap keeps the declared order in its JSON; we keep the sorted order
        // it lays arrays out in, so compare with record fields sorted.
        assert_eq!(schema.to_oamap_json(false), sort_fields(want), "{}", case["name"]);
        checked += 1;
    }
    assert_eq!(checked, 21);
}

fn sort_fields(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut out = serde_json::Map::new();
            for (k, x) in m {
                let mut x = sort_fields(x);
                if k == "fields" {
                    if let Value::Array(pairs) = &mut x {
                        pairs.sort_by(|a, b| a[0].as_str().cmp(&b[0].as_str()));
                    }
                }
                out.insert(k.clone(), x);
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(sort_fields).collect()),
        other => other.clone(),
    }
}
