//! A loader over the exoplanet stars (an OAMap npz): shuffled columnar batches equal the
//! same records gathered from the JSON copy of the data.

use std::io::Read;
use std::sync::Arc;

use guideloom_formats::oamap::{Array, ArrayData};
use guideloom_loader::{GatherColumns, Loader, OamapRecords};
use serde_json::Value;

fn data(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/exoplanets").join(name)
}

fn stars_json() -> Vec<Value> {
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(data("planets.json.gz")).unwrap())
        .read_to_string(&mut text)
        .unwrap();
    serde_json::from_str::<Value>(&text).unwrap().as_array().unwrap().clone()
}

fn f32s(a: &Array) -> Vec<f32> {
    match a.data() {
        ArrayData::F32(v) => v.clone(),
        other => panic!("expected float32 values, got {other:?}"),
    }
}

fn bytes(a: &Array) -> Vec<u8> {
    match a.data() {
        ArrayData::U8(v) => v.clone(),
        other => panic!("expected uint8 bytes, got {other:?}"),
    }
}

#[test]
fn shuffled_star_batches_equal_the_json_records() {
    let stars = stars_json();
    let reader = Arc::new(guideloom_storage::oamap::open_npz_file(&data("planets.npz")).unwrap());
    let records = OamapRecords::new(Arc::clone(&reader)).unwrap();
    assert_eq!(guideloom_loader::DataSource::len(&records), 2_660);
    assert_eq!(records.json(0).unwrap()["name"], "Kepler-1239");
    let paths = ["planets.orbital_period.val", "planets.name"];
    let loader = Loader::builder(records)
        .shuffle(11)
        .batch_size(64)
        .workers(2)
        .collate(GatherColumns::new(Arc::clone(&reader), &paths).unwrap())
        .build()
        .unwrap();
    assert_eq!(loader.len(), 42);
    let mut seen = 0;
    for batch in loader.iter() {
        let batch = batch.unwrap();
        assert_eq!(batch.data.len, batch.indices.len());
        let period = batch.data.column("planets.orbital_period.val").unwrap();
        let name = batch.data.column("planets.name").unwrap();
        // Expected columns, built from the JSON records of this batch.
        let (mut p_off, mut p_vals, mut p_valid) = (vec![0i64], Vec::new(), Vec::new());
        let (mut n_off0, mut n_off1, mut n_bytes) = (vec![0i64], vec![0i64], Vec::new());
        for &i in &batch.indices {
            let planets = stars[i as usize]["planets"].as_array().unwrap();
            for p in planets {
                match p["orbital_period"].get("val").and_then(Value::as_f64) {
                    Some(v) => {
                        p_vals.push(v as f32);
                        p_valid.push(true);
                    }
                    None => {
                        p_vals.push(0.0);
                        p_valid.push(false);
                    }
                }
                n_bytes.extend_from_slice(p["name"].as_str().unwrap().as_bytes());
                n_off1.push(n_bytes.len() as i64);
            }
            p_off.push(p_vals.len() as i64);
            n_off0.push(n_off1.len() as i64 - 1);
        }
        assert_eq!(period.offsets, vec![p_off]);
        assert_eq!(period.valid, p_valid);
        let got = f32s(&period.values);
        assert_eq!(got.len(), p_vals.len());
        for (k, (g, e)) in got.iter().zip(&p_vals).enumerate() {
            if p_valid[k] {
                assert_eq!(g, e, "planet {k} of batch {}", batch.number);
            }
        }
        assert_eq!(name.offsets, vec![n_off0, n_off1]);
        assert_eq!(bytes(&name.values), n_bytes);
        seen += batch.indices.len();
    }
    assert_eq!(seen, 2_660);
    // Star 258's planets, gathered alone.
    let gather = GatherColumns::new(reader, &["planets.name"]).unwrap();
    let one = guideloom_loader::Collate::collate(&gather, vec![guideloom_loader::OamapRecord(258)]).unwrap();
    let col = one.column("planets.name").unwrap();
    let text = String::from_utf8(bytes(&col.values)).unwrap();
    assert_eq!(text, "HD 40307 bHD 40307 cHD 40307 dHD 40307 fHD 40307 g");
}
