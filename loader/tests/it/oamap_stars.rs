//! A loader over the exoplanet stars (an OAMap npz): shuffled columnar batches equal the
//! same records gathered from the JSON copy of the data.

use std::sync::Arc;

use guideloom_loader::{GatherColumns, Loader, OamapRecords};
use guideloom_oamap::{Array, Column};
use serde_json::Value;

use guideloom_testkit::stars_json;

fn f32s(a: &Array) -> Vec<f32> {
    match a.data() {
        Column::F32(v) => v.clone(),
        other => panic!("expected float32 values, got {other:?}"),
    }
}

fn bytes(a: &Array) -> Vec<u8> {
    match a.data() {
        Column::U8(v) => v.clone(),
        other => panic!("expected uint8 bytes, got {other:?}"),
    }
}

#[test]
fn shuffled_star_batches_equal_the_json_records() {
    let stars = stars_json();
    let reader =
        Arc::new(guideloom_oamap::fs::open_npz_file(&guideloom_testkit::exoplanets("planets.npz")).unwrap());
    let records = OamapRecords::from_reader(reader).unwrap();
    assert_eq!(guideloom_loader::DataSource::len(&records), 2_660);
    assert_eq!(records.json(0).unwrap()["name"], "Kepler-1239");
    let paths = ["planets.orbital_period.val", "planets.name"];
    let gather_all = GatherColumns::new(&records, &paths).unwrap();
    let gather = GatherColumns::new(&records, &["planets.name"]).unwrap();
    let loader =
        Loader::builder(records).shuffle(11).batch_size(64).workers(2).collate(gather_all).build().unwrap();
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
    let one = guideloom_loader::Collate::collate(&gather, vec![guideloom_loader::OamapRecord(258)]).unwrap();
    let col = one.column("planets.name").unwrap();
    let text = String::from_utf8(bytes(&col.values)).unwrap();
    assert_eq!(text, "HD 40307 bHD 40307 cHD 40307 dHD 40307 fHD 40307 g");
}

/// The stars written as a partitioned dataset (partitions of 1,000, 0 and 1,660 stars):
/// every batch, shuffled or in order, equals gathering the same stars from the unpartitioned
/// npz, including the batches whose stars straddle the partition boundary at 1,000.
#[test]
fn partitioned_star_batches_equal_the_unpartitioned_gather() {
    use guideloom_loader::{Collate, DataSource, OamapRecord};
    use guideloom_oamap::{from_data_dataset, gather, Dataset, Projection};

    let stars = stars_json();
    let flat =
        Arc::new(guideloom_oamap::fs::open_npz_file(&guideloom_testkit::exoplanets("planets.npz")).unwrap());
    let schema_json = flat.schema().to_oamap_json(false);
    let parts = [
        Value::Array(stars[..1000].to_vec()),
        Value::Array(Vec::new()),
        Value::Array(stars[1000..].to_vec()),
    ];
    let (desc, arrays) = from_data_dataset(&schema_json, "stars", &parts).unwrap();
    assert_eq!(desc.offsets(), &[0, 1000, 1000, 2660]);
    let dataset = Arc::new(Dataset::from_arrays(desc, arrays).unwrap());
    assert_eq!(dataset.locate(999).unwrap(), (0, 999));
    assert_eq!(dataset.locate(1000).unwrap(), (2, 0)); // the empty partition is skipped
    assert_eq!(dataset.get_json(258).unwrap()["name"], "HD 40307");
    assert_eq!(
        dataset.get_json(1000).unwrap(),
        flat.root().unwrap().as_list().unwrap().get(1000).unwrap().to_json().unwrap()
    );

    let records = OamapRecords::new(Arc::clone(&dataset));
    assert_eq!(records.len(), 2_660);
    assert_eq!(records.json(0).unwrap()["name"], "Kepler-1239");
    assert!(matches!(
        records.get(2_660),
        Err(guideloom_loader::LoaderError::IndexOutOfRange { index: 2_660, len: 2_660 })
    ));

    let paths = ["planets.orbital_period.val", "planets.name", "ra"];
    let flat_proj = Projection::new(flat.schema(), &paths).unwrap();
    for shuffle in [None, Some(5u64)] {
        let mut builder = Loader::builder(records.clone()).batch_size(64).workers(2);
        if let Some(seed) = shuffle {
            builder = builder.shuffle(seed);
        }
        let loader = builder.collate(GatherColumns::new(&records, &paths).unwrap()).build().unwrap();
        let (mut seen, mut crossing) = (0, 0);
        for batch in loader.iter() {
            let batch = batch.unwrap();
            let idx = &batch.indices;
            let want = gather(&flat, idx, &flat_proj).unwrap();
            assert_eq!(batch.data, want, "batch {} (shuffle {shuffle:?})", batch.number);
            if idx.iter().any(|&i| i < 1000) && idx.iter().any(|&i| i >= 1000) {
                crossing += 1;
            }
            seen += idx.len();
        }
        assert_eq!(seen, 2_660);
        assert!(crossing >= 1, "no batch crossed the partition boundary");
    }

    // One hand-checked batch across the boundary: stars 999 and 1000, in that order and
    // reversed; offsets are rebased across the partitions.
    let gather_ds = GatherColumns::new(&records, &["planets.name", "ra"]).unwrap();
    for order in [[999u64, 1000], [1000, 999]] {
        let b = gather_ds.collate(order.iter().map(|&i| OamapRecord(i)).collect()).unwrap();
        let (mut off0, mut off1, mut text) = (vec![0i64], vec![0i64], String::new());
        let mut ra = Vec::new();
        for &i in &order {
            for p in stars[i as usize]["planets"].as_array().unwrap() {
                text.push_str(p["name"].as_str().unwrap());
                off1.push(text.len() as i64);
            }
            off0.push(off1.len() as i64 - 1);
            ra.push(stars[i as usize]["ra"].as_f64().unwrap() as f32);
        }
        let names = b.column("planets.name").unwrap();
        assert_eq!(names.offsets, vec![off0, off1]);
        assert_eq!(String::from_utf8(bytes(&names.values)).unwrap(), text);
        assert_eq!(f32s(&b.column("ra").unwrap().values), ra);
    }
    // Out of range is a typed error.
    let e = gather_ds.collate(vec![OamapRecord(5_000)]).unwrap_err();
    assert!(e.to_string().contains("5000"), "{e}");
}
