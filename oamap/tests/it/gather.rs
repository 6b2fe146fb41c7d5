//! Gathering shuffled batches of exoplanet stars into columnar batches equals gathering the
//! same records from planets.json.gz.

use guideloom_oamap::{
    gather, gather_into, open_npz, Column, ColumnarBatch, GatheredColumn, OamapError, Projection,
};
use serde_json::Value;

use guideloom_testkit::stars_json;

/// Expected column from JSON: offsets per list level, leaf values as f64 (strings: bytes),
/// validity.
#[derive(Default, Debug)]
struct Expect {
    offsets: Vec<Vec<i64>>,
    list_valid: Vec<Vec<bool>>,
    values: Vec<f64>,
    valid: Vec<bool>,
}

fn leaf_len(e: &Expect, level: usize) -> i64 {
    match e.offsets.get(level) {
        Some(o) => o.len() as i64 - 1,
        None => e.valid.len() as i64,
    }
}

fn jwalk(v: &Value, parts: &[&str], level: usize, levels: usize, e: &mut Expect) {
    if v.is_null() {
        if level < levels {
            let n = leaf_len(e, level + 1);
            e.offsets[level].push(n);
            e.list_valid[level].push(false);
        } else {
            e.values.push(0.0);
            e.valid.push(false);
        }
        return;
    }
    match v {
        Value::Object(o) => jwalk(o.get(parts[0]).unwrap_or(&Value::Null), &parts[1..], level, levels, e),
        Value::Array(a) => {
            for x in a {
                jwalk(x, parts, level + 1, levels, e);
            }
            let n = leaf_len(e, level + 1);
            e.offsets[level].push(n);
            e.list_valid[level].push(true);
        }
        Value::String(s) => {
            for b in s.bytes() {
                e.values.push(b as f64);
                e.valid.push(true);
            }
            let n = leaf_len(e, level + 1);
            e.offsets[level].push(n);
            e.list_valid[level].push(true);
        }
        Value::Number(n) => {
            e.values.push(n.as_f64().unwrap());
            e.valid.push(true);
        }
        Value::Bool(b) => {
            e.values.push(f64::from(u8::from(*b)));
            e.valid.push(true);
        }
        Value::Null => unreachable!(),
    }
}

fn check(col: &GatheredColumn, stars: &[Value], records: &[u64]) {
    let parts: Vec<&str> = col.path.split('.').collect();
    let levels = col.offsets.len();
    let mut e =
        Expect { offsets: vec![vec![0]; levels], list_valid: vec![vec![]; levels], ..Default::default() };
    for &r in records {
        jwalk(&stars[usize::try_from(r).unwrap()], &parts, 0, levels, &mut e);
    }
    assert_eq!(col.offsets, e.offsets, "{}", col.path);
    assert_eq!(col.list_valid, e.list_valid, "{}", col.path);
    assert_eq!(col.valid, e.valid, "{}", col.path);
    let got: Vec<f64> = match col.values.data() {
        Column::F32(v) => {
            // float32 storage: compare at float32 precision
            let want: Vec<f32> = e.values.iter().map(|&x| x as f32).collect();
            assert_eq!(v, &want, "{}", col.path);
            return;
        }
        Column::U8(v) => v.iter().map(|&b| b as f64).collect(),
        Column::I32(v) => v.iter().map(|&b| b as f64).collect(),
        Column::Bool(v) => v.iter().map(|&b| f64::from(u8::from(b))).collect(),
        other => panic!("unexpected {other:?}"),
    };
    assert_eq!(got, e.values, "{}", col.path);
}

#[test]
fn shuffled_batches_equal_json_gather() {
    let reader = open_npz(guideloom_testkit::planets_npz()).unwrap();
    let stars = stars_json();
    let n = stars.len() as u64;
    let proj = Projection::new(
        reader.schema(),
        &["planets.orbital_period.val", "planets.name", "ra", "planets.discovery_method", "num_planets"],
    )
    .unwrap();
    // A fixed shuffle (i * 1009 mod n is a bijection since gcd(1009, 2660) = 1), batches of 64.
    let order: Vec<u64> = (0..n).map(|i| (i * 1009 + 17) % n).collect();
    let mut reused = ColumnarBatch::default();
    let mut batches = 0;
    for batch in order.chunks(64) {
        let b = gather(&reader, batch, &proj).unwrap();
        assert_eq!(b.len, batch.len());
        for col in &b.columns {
            check(col, &stars, batch);
        }
        gather_into(&reader, batch, &proj, &mut reused).unwrap();
        assert_eq!(reused, b);
        batches += 1;
    }
    assert_eq!(batches, 42);
    // Star 258's five planet names, as one batch of one record.
    let b = gather(&reader, &[258], &proj).unwrap();
    let names = b.column("planets.name").unwrap();
    assert_eq!(names.offsets[0], [0, 5]);
    assert_eq!(names.offsets[1], [0, 10, 20, 30, 40, 50]);
    let Column::U8(bytes) = names.values.data() else { panic!() };
    assert_eq!(&bytes[40..50], b"HD 40307 g");
    let e = gather(&reader, &[n], &proj).unwrap_err();
    assert!(
        matches!(&e, OamapError::Path { path, reason }
            if *path == n.to_string() && *reason == format!("record index past the top-level list of {n}")),
        "{e:?}"
    );
    for bad in ["planets.nope", "planets"] {
        let e = Projection::new(reader.schema(), &[bad]).unwrap_err();
        assert!(matches!(&e, OamapError::Path { path, .. } if path == bad), "{e:?}");
    }
}
